"""Print pip requirements that pin each runtime dependency of pyproject.toml at its lowest declared
version (">=1.24" -> "==1.24.*", ">=2.19.1" -> "==2.19.1"), for `make test-oldest`."""

import re
import sys
import tomllib

with open(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml", "rb") as f:
    deps = tomllib.load(f)["project"]["dependencies"]
pins = []
for dep in deps:
    m = re.fullmatch(r"([A-Za-z0-9_.\-]+)>=([0-9]+(?:\.[0-9]+)*)", dep.replace(" ", ""))
    if m is None:
        sys.exit(f"oldest_pins: cannot pin {dep!r} (only 'name>=version' is understood)")
    name, version = m.groups()
    pins.append(f"{name}=={version}" + (".*" if version.count(".") < 2 else ""))
print("\n".join(pins))
