"""What an install from a wheel or an sdist (not this checkout) relies on: the notebooks' committed
outputs hold in any environment the package installs into. Building a wheel or an sdist needs
setuptools>=77, which the test environment need not have, so the builds themselves are not run here."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SANITIZE = ROOT / "notebooks" / "nbval_sanitize.cfg"


def _sanitize(text: str) -> str:
    plugin = pytest.importorskip("nbval.plugin")
    for regex, replace in plugin.get_sanitize_patterns(SANITIZE.read_text(encoding="utf-8")):
        text = re.sub(regex, replace, text)
    return text


@pytest.mark.parametrize("shape", ["local_preset_installed: {}\n",                    # text/plain
                                   "local_preset_installed: <code>{}</code> · ",      # text/html
                                   "- local\\_preset\\_installed: `{}`\n"])           # text/markdown
def test_notebook_outputs_do_not_depend_on_the_local_extra(shape):
    """%memstats / TierStats show which local-model preset is installed: `make test` installs the
    `local` extra, a plain `pip install ipy-memory` does not, and nbval must pass on both."""
    shown = {_sanitize(shape.format(value)) for value in ("local", "local-e5", "—")}
    assert len(shown) == 1, shown
    assert "PRESET" in shown.pop()


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")                     # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_license_files_exist_and_go_into_the_distributions():
    """pyproject declares the licenses; their texts must ship (setuptools copies license-files into
    the sdist and the wheel's .dist-info/licenses)."""
    project = _pyproject()["project"]
    assert "LICENSE" in project["license-files"]
    for name in project["license-files"]:
        assert (ROOT / name).is_file(), name
    assert "MIT" in (ROOT / "LICENSE").read_text(encoding="utf-8")


def test_every_data_file_of_the_package_is_package_data():
    """A file beside the modules that is neither Python nor C source reaches the wheel only through
    [tool.setuptools.package-data] (include-package-data is off): a new one must be listed there."""
    tool = _pyproject()["tool"]["setuptools"]
    assert tool["include-package-data"] is False
    globs = tool["package-data"]
    pkg = ROOT / "ipy_memory"
    for path in pkg.rglob("*"):
        rel = path.relative_to(pkg)
        code = path.suffix in {".py", ".pyc", ".so", ".pyd"} or {"csrc", "__pycache__"} & set(rel.parts)
        if path.is_dir() or code:
            continue
        owner = ".".join(("ipy_memory", *rel.parts[:-1]))
        while owner not in globs and "." in owner:               # a glob may reach into a subfolder
            owner = owner.rsplit(".", 1)[0]
        base = pkg.joinpath(*owner.split(".")[1:])
        assert any(path.relative_to(base).match(g) for g in globs.get(owner, ())), f"{rel} is no package-data"


def test_the_version_is_written_once():
    """The distribution's version is ipy_memory.__version__ (what --version prints), not a second copy."""
    pyproject = _pyproject()
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "ipy_memory.__version__"}


def test_every_runtime_dependency_has_an_oldest_version_to_test():
    """`make test-oldest` installs .ci/oldest_pins.py's pins: one per dependency, each at the lowest
    version pyproject allows (a requirement it cannot pin, such as "~=" or a marker, stops it)."""
    deps = _pyproject()["project"]["dependencies"]
    out = subprocess.run([sys.executable, str(ROOT / ".ci" / "oldest_pins.py"), str(ROOT / "pyproject.toml")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    pins = out.stdout.split()
    assert [p.split("==")[0] for p in pins] == [d.split(">=")[0] for d in deps]
    assert all(p.split("==")[1].rstrip(".*") == d.split(">=")[1] for p, d in zip(pins, deps))
    assert "usearch==2.19.1" in pins         # older ones crash or refuse (pyproject.toml says which)
    local = subprocess.run([sys.executable, str(ROOT / ".ci" / "oldest_pins.py"), str(ROOT / "pyproject.toml"), "local"],
                           capture_output=True, text=True)
    assert local.returncode == 0 and local.stdout.split()[:len(pins)] == pins, local.stderr
    assert len(local.stdout.split()) == len(pins) + len(_pyproject()["project"]["optional-dependencies"]["local"])
