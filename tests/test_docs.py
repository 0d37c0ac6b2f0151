"""README and docs/ document every magic, setting, tool, export format, CLI subcommand and option, Settings field,
MemoryEngine method and public name, with the defaults, ranges and hints the code has."""

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


# ------------------------------------------------------------------------------ the rest of the public surface
ROOT = README.parent
DOCS_TEXT = "\n".join((ROOT / p).read_text(encoding="utf-8") for p in ("README.md", "docs/lifecycle.md",
                                                                        "docs/settings.md"))


def _table(text: str, first: str) -> dict[str, list[str]]:
    """Rows of the Markdown tables in `text` whose first cell is a `code` name: name -> the other cells."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        m = re.fullmatch(r"`([^`]+)`", cells[0]) if line.startswith("|") else None
        if m and len(cells) > 1:
            rows[m.group(1)] = cells[1:]
    assert rows, f"no table of {first} found"
    return rows


def test_every_public_name_is_documented():
    import ipy_memory
    for name in ipy_memory.__all__:
        assert re.search(rf"`(ipy_memory\.)?{re.escape(name)}[`(.]", DOCS_TEXT) or f"`{name}`s" in DOCS_TEXT, \
            f"ipy_memory.{name} is exported but README.md / docs/ never name it"


def test_every_engine_method_and_argument_is_documented():
    import inspect
    from ipy_memory import MemoryEngine
    for name in dir(MemoryEngine):
        if not name.startswith("_"):
            assert re.search(rf"`(mem\.|engine\.)?{name}[`(=]|\bmem\.{name}\b", DOCS_TEXT), \
                f"MemoryEngine.{name} is undocumented"
    for name in inspect.signature(MemoryEngine).parameters:
        assert f"{name}=" in section("engine"), f"README does not show MemoryEngine's {name}= argument"


def test_every_cli_subcommand_and_option_is_documented():
    from ipy_memory.__main__ import parser
    text = README.read_text(encoding="utf-8")
    cli = text[text.index("## Command line"):text.index("## Configuration")]
    sub = next(a for a in parser()._actions if a.dest == "command")
    common = {"-h", "--help", "--data-dir", "--json", "--project"}
    assert all(opt in cli for opt in common - {"-h", "--help"})
    for name, p in sub.choices.items():
        assert f"python -m ipy_memory {name}" in cli, f"README's command line block lacks the {name} subcommand"
        for action in p._actions:
            for opt in set(action.option_strings) - common:
                assert opt in cli, f"README does not document {opt} of `{name}`"


def test_every_settings_field_is_documented_with_its_default():
    from dataclasses import MISSING, fields
    from ipy_memory import Settings
    from ipy_memory.config import DAY
    rows = _table((ROOT / "docs/settings.md").read_text(encoding="utf-8"), "Settings fields")
    assert set(rows) == {f.name for f in fields(Settings)}, "docs/settings.md's table and Settings' fields differ"
    for f in fields(Settings):
        if f.default is MISSING or callable(f.default):        # (token_counter: a function)
            assert f.name in rows
            continue
        shown = re.fullmatch(r"`(.+)`", rows[f.name][0])
        assert shown and eval(shown.group(1), {"DAY": DAY}) == f.default, \
            f"docs/settings.md gives {f.name} the default {rows[f.name][0]}, Settings has {f.default!r}"


def test_magics_settings_table_gives_the_real_defaults():
    import ast
    rows = _table(section("magics"), "MemoryMagics settings")
    for name, trait in MemoryMagics.class_traits(config=True).items():
        shown = re.fullmatch(r"`(.+)`", rows[name][0])
        assert shown and ast.literal_eval(shown.group(1)) == trait.default_value, \
            f"README gives MemoryMagics.{name} the default {rows[name][0]}, the trait has {trait.default_value!r}"


def test_tools_table_gives_the_real_arguments_ranges_defaults_and_hints():
    import json
    rows = _table(section("tools"), "tools")
    assert set(TOOLS) <= set(rows), "README's tool table lacks " + ", ".join(sorted(set(TOOLS) - set(rows)))
    for name, spec in TOOLS.items():
        args, hints = rows[name]
        shown = dict((m.group(1), m) for m in re.finditer(
            r"`(\w+)`(?: ([\d.]+)–([\d.]+))?(?: \(([^)]*)\))?", args))
        assert set(shown) == set(spec.params), f"{name}: README lists {sorted(shown)}, it takes {sorted(spec.params)}"
        for key, m in shown.items():
            p = spec.params[key]
            if m.group(2):
                assert (float(m.group(2)), float(m.group(3))) == (p.minimum, p.maximum), f"{name}.{key} range"
            default = (m.group(4) or "").strip("`")
            if default and not default.startswith("a "):
                effective = json.dumps(p.default).strip('"') if p.default is not None else None
                said = default in p.description and "default" in p.description.lower()     # (replace keeps its own)
                assert default == effective or said, f"{name}.{key}: README's default {default!r}"
        assert ("read-only" in hints and "neither read-only" not in hints) == spec.read_only, f"{name}: {hints}"
        assert bool(re.search(r"(?<!nor )(?<!not )\bdestructive\b", hints)) == spec.destructive, f"{name}: {hints}"
        if not spec.read_only:
            assert ("idempotent" in hints and "not idempotent" not in hints) == spec.idempotent, f"{name}: {hints}"


def test_autorecall_options_and_engine_knobs_give_the_real_defaults():
    import ast
    import inspect
    from ipy_memory import MemoryEngine
    from ipy_memory.agent import AutoRecall
    text = (ROOT / "docs/lifecycle.md").read_text(encoding="utf-8")
    options = text[text.index("**Options**"):text.index("**Shapes**")]
    params = dict(inspect.signature(AutoRecall).parameters)
    params.pop("engine")
    for name, p in params.items():
        assert f"`{name}" in options, f"docs/lifecycle.md's AutoRecall options lack {name}"
    for name, value in re.findall(r"`(\w+)=([^`]+)`", options):
        assert ast.literal_eval(value) == params[name].default, f"AutoRecall {name}: doc {value}, code {params[name].default!r}"
    knobs = re.findall(r"`mem\.(\w+)` \((\d[\d,.]*)", text)
    assert len(knobs) >= 3
    for name, value in knobs:
        assert float(value.replace(",", "")) == getattr(MemoryEngine, name), f"mem.{name}: doc {value}"


def test_files_the_docs_name_exist():
    for path in ("README.md", "docs/lifecycle.md", "docs/settings.md", "BENCHMARKS.md"):
        text = (ROOT / path).read_text(encoding="utf-8")
        for name in set(re.findall(r"\b(?:tests/)?test_\w+\.py|(?:benchmarks|notebooks|docs)/[\w.-]+\.(?:py|ipynb|md)",
                                   text)):
            assert (ROOT / name).exists() or (ROOT / "tests" / name).exists(), f"{path} names {name}, which is gone"


def test_bad_input_counts_in_the_readme_are_the_tables():
    import sys
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from test_bad_input import CASES
    finally:
        sys.path.remove(str(ROOT / "tests"))
    counts = (len(CASES), sum(bool(c.engine) for c in CASES), sum(bool(c.tool) for c in CASES),
              sum(bool(c.magic) for c in CASES))
    claim = re.search(r"one table of (\d+) cases, (\d+) of them run through `MemoryEngine`,\s+(\d+) through "
                      r"`tools.call_tool` and (\d+) through the magics", section("reliability"))
    assert claim and tuple(map(int, claim.groups())) == counts, f"README's bad-input counts; the table has {counts}"
