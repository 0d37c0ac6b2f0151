"""What an install from a wheel or an sdist (not this checkout) relies on: the notebooks' committed
outputs hold in any environment the package installs into. Building a wheel or an sdist needs
setuptools>=77, which the test environment need not have, so the builds themselves are not run here."""

import re
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
