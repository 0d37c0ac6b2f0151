"""Print pip requirements that pin each runtime dependency of pyproject.toml, and of the extras named
after its path, at its lowest declared version (">=1.24" -> "==1.24.*", ">=2.19.1" -> "==2.19.1";
"==1.0.0" stays), for `make test-oldest`:  python .ci/oldest_pins.py pyproject.toml [EXTRA ...]"""

import re
import sys
import tomllib

with open(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
deps = project["dependencies"] + [d for extra in sys.argv[2:] for d in project["optional-dependencies"][extra]]
pins = []
for dep in deps:
    m = re.fullmatch(r"([A-Za-z0-9_.\-]+)(>=|==)([0-9]+(?:\.[0-9]+)*)", dep.replace(" ", ""))
    if m is None:
        sys.exit(f"oldest_pins: cannot pin {dep!r} (only 'name>=version' and 'name==version' are understood)")
    name, op, version = m.groups()
    pins.append(f"{name}=={version}" + (".*" if op == ">=" and version.count(".") < 2 else ""))
print("\n".join(pins))
