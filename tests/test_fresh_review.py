"""What a fresh user's review of the docs against the behaviour found (one test per finding)."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from ipy_memory import MemoryEngine


@pytest.fixture
def bare(tmp_path, monkeypatch):
    """A fresh shell without ipy_memory loaded; IPY_MEMORY_DATA_DIR points at a temp store."""
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("IPY_MEMORY_DATA_DIR", str(tmp_path / "mem"))
    c = Config()
    c.HistoryManager.enabled = False
    c.MemoryMagics.project = "test"
    InteractiveShell.clear_instance()
    shell = InteractiveShell.instance(config=c)
    yield shell
    if "ipy_memory" in shell.extension_manager.loaded:
        shell.run_line_magic("unload_ext", "ipy_memory")
    InteractiveShell.clear_instance()


def test_load_ext_and_remember_in_one_cell_prints_once_with_provenance(bare, capsys):
    """`%load_ext ipy_memory` then `%remember ...` in the same (first) cell: the line showed twice (printed,
    then again as the cell's output) and the memory had no cell number or source hash, because the
    extension's pre_run_cell hook was registered after that cell had started."""
    bare.run_cell("%load_ext ipy_memory\n%remember Loaded and remembered in one cell", store_history=True)
    out = capsys.readouterr().out
    assert len([line for line in out.splitlines() if "stored m-" in line]) == 1, out
    from ipy_memory.magics import current_engine
    meta = current_engine(bare).list_memories()[0].metadata
    assert meta.get("cell") == 1, meta


def test_embedder_mismatch_hint_names_a_usable_value(bare, tmp_path):
    """The hint after opening a store with another embedder said `%config MemoryMagics.embedder = '...'`;
    '' (the store's own preset) is the value that works."""
    pytest.importorskip("onnxruntime")                                       # the `local` extra
    MemoryEngine(tmp_path / "mem", project="test", embedder="local").close()  # (its model loads lazily: not here)
    bare.run_line_magic("load_ext", "ipy_memory")
    bare.run_line_magic("config", "MemoryMagics.embedder = 'hash'")
    with pytest.raises(UsageError) as err:
        bare.run_line_magic("memstats", "")
    assert "MemoryMagics.embedder = ''" in str(err.value), str(err.value)
    bare.run_line_magic("config", "MemoryMagics.embedder = ''")              # ... and it does work
    assert bare.run_line_magic("memstats", "")["embedder_preset"] == "local"


WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def test_a_result_whose_engine_is_closed_shows_only_the_static_view(bare, tmp_path, monkeypatch):
    """README: 'A result whose engine is gone is shown statically only.' A closed engine (still referenced, so
    not garbage-collected) got a live view whose Search and Forget could only fail with 'engine is closed'."""
    bare.run_line_magic("load_ext", "ipy_memory")
    monkeypatch.setattr(bare, "kernel", object(), raising=False)      # as in ipykernel
    bare.run_line_magic("config", "MemoryMagics.display = 'widget'")
    other = MemoryEngine(tmp_path / "other", project="x")
    other.remember("Another store: the kiwi bird is flightless")
    result = other.recall("kiwi")
    assert WIDGET_MIME in bare.display_formatter.format(result)[0]   # open: a live view
    other.close()
    data = bare.display_formatter.format(result)[0]
    assert WIDGET_MIME not in data and "kiwi" in data["text/html"]


def test_no_hit_because_of_the_token_budget_says_so(tmp_path):
    """`%recall` with a budget too small for any hit said only '0 hits for ...', as if nothing matched."""
    with MemoryEngine(tmp_path / "mem", project="p") as mem:
        mem.remember("The quokka lives on Rottnest island and smiles a lot.")
        for max_tokens in (30, 60):            # below the frame's cost; the frame fits, the hit does not
            r = mem.recall("quokka", max_tokens=max_tokens)
            assert len(r) == 0
            for shown in (repr(r), r._repr_html_(), r._repr_markdown_()):
                assert "1 match did not fit the token budget" in shown, shown
        assert "budget" not in repr(mem.recall("no such animal"))
        assert "budget" not in repr(mem.recall("quokka", max_tokens=400))


@pytest.mark.parametrize("argv0, prog", [("/venv/bin/ipy-memory", "ipy-memory"),
                                         ("/venv/lib/python3.11/site-packages/ipy_memory/__main__.py",
                                          "python -m ipy_memory")])
def test_cli_help_names_the_command_as_typed(monkeypatch, capsys, argv0, prog):
    """`ipy-memory --help` said 'usage: python -m ipy_memory' (the console script the install puts on the PATH
    is what README tells users to type)."""
    from ipy_memory.__main__ import main
    monkeypatch.setattr("sys.argv", [argv0, "--help"])
    with pytest.raises(SystemExit):
        main(["--help"])
    assert capsys.readouterr().out.startswith(f"usage: {prog} ")


def test_cli_every_argument_has_help():
    """`ipy-memory store --help` listed --title, --scope, --force and TEXT with no word on what they do."""
    import argparse

    from ipy_memory.__main__ import parser
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    bare = [f"{name} {action.dest}" for name, p in sub.choices.items() for action in p._actions
            if not action.help and not isinstance(action, argparse._HelpAction)]
    assert not bare, bare
