"""README's Magics and Agent tools sections document every magic, setting, tool and export format."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from ipy_memory.magics import LIFECYCLE, MemoryMagics
from ipy_memory.tools import FORMATS, TOOLS

README = Path(__file__).resolve().parent.parent / "README.md"


def section(name: str) -> str:
    text = README.read_text(encoding="utf-8")
    m = re.search(rf"<!-- {name}:start -->(.*?)<!-- {name}:end -->", text, re.S)
    assert m, f"README.md lacks the <!-- {name}:start --> / <!-- {name}:end --> markers"
    return m.group(1)


@pytest.fixture(scope="module")
def registered(tmp_path_factory):
    """Every magic %load_ext ipy_memory registers (with the builtin shadowed), by kind."""
    c = Config()
    c.HistoryManager.enabled = False
    c.MemoryMagics.data_dir = str(tmp_path_factory.mktemp("mem"))
    InteractiveShell.clear_instance()
    shell = InteractiveShell.instance(config=c)
    shell.run_line_magic("load_ext", "ipy_memory")
    try:
        magics = shell.magics_manager.registry["MemoryMagics"]
        return sorted({(kind, name) for kind, name in magics._table.ours})
    finally:
        shell.run_line_magic("unload_ext", "ipy_memory")
        InteractiveShell.clear_instance()


def test_every_magic_is_documented_with_an_example(registered):
    text = section("magics")
    names = {("cell" if kind == "cell" else "line", name) for kind, name in registered if name != "rep"}
    names |= {("line", "mem" + m) for m in LIFECYCLE}          # documented even before the engine has them
    for kind, name in sorted(names):
        token = ("%%" if kind == "cell" else "%") + name
        assert re.search(re.escape(token) + r"(?![\w-])", text), f"README Magics section does not mention {token}"
    code = "\n".join(re.findall(r"```python\n(.*?)```", text, re.S))
    for kind, name in sorted(names):
        token = ("%%" if kind == "cell" else "%") + name
        assert re.search(r"^(\w+ = )?" + re.escape(token) + r"(?![\w-])", code, re.M), \
            f"README Magics section has no copy-paste example of {token}"


def test_every_option_and_setting_is_documented():
    text = section("magics")
    for trait in MemoryMagics.class_trait_names(config=True):
        assert f"`{trait}`" in text, f"README Magics section does not document MemoryMagics.{trait}"
    for func in (MemoryMagics.remember, MemoryMagics.store, MemoryMagics.memrecall, MemoryMagics.memories):
        for action in func.parser._actions:
            for opt in action.option_strings:
                assert opt in text, f"README does not document option {opt} of %{func.__name__}"


def test_every_tool_and_format_is_documented():
    text = section("tools")
    for name in TOOLS:
        assert f"`{name}`" in text or name in text, f"README Agent tools section does not mention {name}"
    for fmt in FORMATS:
        assert f'export_tools("{fmt}")' in text, f"README does not show export_tools({fmt!r})"
    for word in ("call_tool(", "ToolResult", "run_tool_calls", "OpenAI", "Anthropic", "strict"):
        assert word in text
