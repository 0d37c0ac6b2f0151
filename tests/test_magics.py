"""IPython magics: a fresh InteractiveShell per test (history off, temp IPython dir and data dir)."""

from __future__ import annotations

import hashlib
import re

import IPython
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from ipy_memory import MemoryEngine, MemoryList, RecallResult, RememberResult, Stats
from ipy_memory.magics import LIFECYCLE, MemoryMagics, RecallBlock, current_engine


def make_shell(tmp_path, monkeypatch, **magics_config):
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    c = Config()
    c.HistoryManager.enabled = False
    for k, v in magics_config.items():
        setattr(c.MemoryMagics, k, v)
    InteractiveShell.clear_instance()
    return InteractiveShell.instance(config=c)


@pytest.fixture
def bare(tmp_path, monkeypatch):
    """A fresh shell without ipy_memory loaded."""
    shell = make_shell(tmp_path, monkeypatch)
    yield shell
    if "ipy_memory" in shell.extension_manager.loaded:
        shell.run_line_magic("unload_ext", "ipy_memory")
    InteractiveShell.clear_instance()


def load(shell, tmp_path):
    shell.run_line_magic("load_ext", "ipy_memory")
    shell.run_line_magic("config", f"MemoryMagics.data_dir = {str(tmp_path / 'mem')!r}")
    shell.run_line_magic("config", "MemoryMagics.project = 'test'")
    return shell


@pytest.fixture
def ip(bare, tmp_path):
    return load(bare, tmp_path)


def magics(shell) -> MemoryMagics:
    return shell.magics_manager.registry["MemoryMagics"]


def lines(out: str, word: str) -> list[str]:
    return [line for line in out.splitlines() if word in line]


# ------------------------------------------------------------------------------ %remember / %%remember / %%store
def test_remember_line_returns_result_and_prints_one_line(ip, capsys):
    r = ip.run_line_magic("remember", "The sales table lives in warehouse.sales_2024")
    assert isinstance(r, RememberResult) and r.stored
    assert capsys.readouterr().out.strip() == r.summary()
    ip.run_cell("%remember Ruff is the linter; line length 110")        # shown as the cell's output, once
    assert len(lines(capsys.readouterr().out, "stored m-")) == 1
    ip.run_cell("x = %remember -s global Tabs are forbidden")           # assigned: printed after the cell, once
    out = capsys.readouterr().out
    assert len(lines(out, "stored m-")) == 1 and isinstance(ip.user_ns["x"], RememberResult)
    assert ip.user_ns["x"].scope == "global"
    ip.run_cell("y = %remember Printed in order\nprint('after')")               # printed at once, not deferred
    assert capsys.readouterr().out.splitlines()[-2:] == [ip.user_ns["y"].summary(), "after"]
    ip.run_cell("%%remember\n# A cell\nWith a body.")
    assert len(lines(capsys.readouterr().out, "stored m-")) == 1


def test_remember_options_and_quoting(ip):
    r = ip.run_line_magic("remember", '-t "Data sources" --importance 0.9 --ttl 3600 -p other don\'t "quote" me')
    m = current_engine(ip).get(r.id)
    assert (m.title, m.project, m.importance) == ("Data sources", "other", 0.9)
    assert m.content == 'don\'t "quote" me'
    assert m.expires_at is not None and m.expires_at - m.created_at == pytest.approx(3600, abs=5)
    r2 = ip.run_line_magic("remember", "-- -5 degrees is cold")
    assert current_engine(ip).get(r2.id).content == "-5 degrees is cold"
    r3 = ip.run_line_magic("remember", f"--replace {r.id} --force replaced text")
    assert r3.id == r.id and current_engine(ip).get(r.id).content == "replaced text"


def test_no_var_expansion_unless_asked(ip):
    ip.user_ns.update(price=5, name="Ada")
    r = ip.run_line_magic("remember", "cost is $price for {name}")
    assert current_engine(ip).get(r.id).content == "cost is $price for {name}"
    r = ip.run_line_magic("remember", "-v cost is $price for {name}")
    assert current_engine(ip).get(r.id).content == "cost is 5 for Ada"
    ip.run_cell("%%remember -v -t expanded\nowner: {name}\n")
    hits = ip.run_line_magic("recall", "owner Ada")
    assert any("owner: Ada" in h.text for h in hits)
    res = ip.run_line_magic("recall", "--block $price")   # the query itself is not expanded
    assert isinstance(res, str)


def test_cell_remember_stores_markdown_sections(ip, capsys):
    ip.run_cell("%%remember -t Setup\n# Env\nUse conda env `ds`.\n\n## Data\nRaw files live in s3://bucket/raw.\n")
    out = capsys.readouterr().out
    assert len(lines(out, "stored m-")) == 1 and "2 sections" in out
    hits = ip.run_line_magic("recall", "--path Env conda env")
    assert hits and hits[0].path.startswith("Env")


def test_store_cell_magic_names_replace(ip):
    first = ip.run_cell_magic("store", "notes", "# Notes\nFirst version of the notes.\n")
    second = ip.run_cell_magic("store", "notes", "# Notes\nSecond version, rewritten completely.\n")
    assert first.id == second.id
    m = current_engine(ip).get(first.id)
    assert "Second version" in m.content and m.title == "notes" and m.metadata["name"] == "notes"
    other = ip.run_cell_magic("store", "-s global -t Other", "# Other\nUnnamed documents are separate.\n")
    assert other.id != first.id and other.scope == "global"
    with pytest.raises(UsageError, match="empty"):
        ip.run_cell_magic("store", "", "  \n")


def test_ipython_line_store_keeps_working(ip):
    if IPython.version_info[0] < 9:     # IPython 8's %store stores nothing without pickleshare
        pytest.importorskip("pickleshare")
    ip.run_line_magic("load_ext", "storemagic")
    ip.user_ns["answer"] = 41
    ip.run_line_magic("store", "answer")
    del ip.user_ns["answer"]
    ip.run_line_magic("store", "-r answer")
    assert ip.user_ns["answer"] == 41
    assert ip.find_cell_magic("store") == magics(ip).store


def test_provenance_metadata(ip):
    ip.user_ns["__vsc_ipynb_file__"] = "/home/me/work/analysis.ipynb"
    source = "%remember -t T provenance please"
    ip.run_cell(source, store_history=True)
    mem = current_engine(ip).list_memories(limit=1)[0]
    meta = mem.metadata
    assert meta["source"] == "ipython" and meta["magic"] == "remember"
    assert meta["notebook"] == "/home/me/work/analysis.ipynb"
    assert meta["cell_sha256"] == hashlib.sha256(source.encode()).hexdigest()
    assert meta["cell"] == ip.execution_count - 1 and meta["kernel_session"] and meta["time"].endswith("Z")
    r = ip.run_line_magic("remember", "called from code, outside a cell")
    assert "cell" not in current_engine(ip).get(r.id).metadata


# ------------------------------------------------------------------------------ %recall, %memrecall, %rep
def test_recall_returns_result_and_block(ip):
    ip.run_line_magic("remember", "The sales table lives in warehouse.sales_2024")
    ip.run_line_magic("remember", "-s global Deploys happen on Tuesdays")
    res = ip.run_line_magic("recall", "-n 5 where is the sales table")
    assert isinstance(res, RecallResult) and "sales_2024" in res[0].text
    block = ip.run_line_magic("recall", "--block --max-tokens 200 sales table")
    assert isinstance(block, RecallBlock) and block.startswith("<memory-recall")
    from IPython.lib.pretty import pretty
    assert pretty(block) == str(block)                     # shown as text, not a quoted repr
    assert ip.run_line_magic("memrecall", "-s global deploys")[0].scope == "global"
    assert ip.run_line_magic("recall", "-s global+project deploys")   # any order of scopes


def test_recall_errors_say_what_to_type(ip):
    with pytest.raises(UsageError, match="%recall QUERY"):
        ip.run_line_magic("recall", "")
    with pytest.raises(UsageError, match="limit must be between 1 and 50"):
        ip.run_line_magic("recall", "-n 500 anything")
    with pytest.raises(UsageError, match="unknown scope"):
        ip.run_line_magic("recall", "-s galaxy anything")
    with pytest.raises(UsageError, match="unknown option"):
        ip.run_line_magic("recall", "--bogus anything")
    with pytest.raises(UsageError, match="%memories"):
        ip.run_line_magic("forget", "m-0000000000000000")
    with pytest.raises(UsageError, match="expected form"):
        ip.run_line_magic("forget", "nonsense")


def test_rep_is_ipythons_recall_while_loaded(ip):
    ip.user_ns["_"] = "last output"
    ip.run_line_magic("rep", "")
    assert ip.rl_next_input == "last output"
    assert isinstance(ip.run_line_magic("recall", "anything"), RecallResult)


def _behaves_like_ipython_recall(shell, name="recall") -> bool:
    shell.rl_next_input = None
    shell.user_ns["_"] = "previous value"
    shell.run_line_magic(name, "")
    return shell.rl_next_input == "previous value"


@pytest.mark.skipif(IPython.version_info[0] >= 9, reason="IPython 8 (pip install 'ipython<9')")
def test_loads_on_ipython_8(bare, tmp_path):
    """IPython 8 (the newest there is for Python 3.10) has no MagicsManager.find (its magics are all
    loaded up front): %load_ext ipy_memory raised AttributeError there. IPython 9 calls find itself,
    so it cannot be taken away to try this there."""
    load(bare, tmp_path)
    assert bare.run_line_magic("remember", "The GPU box is called orion").stored
    assert bare.run_line_magic("recall", "gpu box")[0].text == "The GPU box is called orion"
    assert _behaves_like_ipython_recall(bare, "rep")


def test_unload_restores_recall_rep_store(bare, tmp_path):
    bare.run_line_magic("load_ext", "storemagic")
    before = {k: dict(v) for k, v in bare.magics_manager.magics.items()}
    load(bare, tmp_path)
    magics(bare).engine   # opened
    engine = magics(bare)._engine
    bare.run_line_magic("unload_ext", "ipy_memory")
    assert engine._closed
    assert _behaves_like_ipython_recall(bare, "recall") and _behaves_like_ipython_recall(bare, "rep")
    for name in ("remember", "memrecall", "memories", "memstats", "forget"):
        assert bare.find_line_magic(name) is None
    assert bare.find_cell_magic("store") is None and bare.find_cell_magic("remember") is None
    bare.user_ns["v"] = 3
    bare.run_line_magic("store", "v")                      # IPython's %store still there
    after = {k: dict(v) for k, v in bare.magics_manager.magics.items()}
    for kind in ("line", "cell"):                          # every entry back (resolved lazies may now be real)
        assert set(after[kind]) == set(before[kind])
    assert not any(isinstance(c, MemoryMagics) for c in bare.configurables)
    assert "MemoryMagics" not in dict.keys(bare.magics_manager.registry)
    assert RememberResult not in bare.display_formatter.formatters["text/plain"].type_printers


def test_reload_ext(ip, tmp_path):
    ip.run_line_magic("reload_ext", "ipy_memory")
    ip.run_line_magic("config", f"MemoryMagics.data_dir = {str(tmp_path / 'mem')!r}")
    assert sum(isinstance(c, MemoryMagics) for c in ip.configurables) == 1
    ip.run_line_magic("remember", "after a reload")
    assert isinstance(ip.run_line_magic("recall", "reload"), RecallResult)
    assert _behaves_like_ipython_recall(ip, "rep")
    ip.run_line_magic("unload_ext", "ipy_memory")
    assert _behaves_like_ipython_recall(ip, "recall")


def test_shadow_builtins_false(tmp_path, monkeypatch):
    shell = make_shell(tmp_path, monkeypatch, shadow_builtins=False)
    try:
        load(shell, tmp_path)
        assert _behaves_like_ipython_recall(shell, "recall")
        assert isinstance(shell.run_line_magic("memrecall", "x"), RecallResult)
        shell.run_line_magic("config", "MemoryMagics.shadow_builtins = True")    # switch at runtime
        assert isinstance(shell.run_line_magic("recall", "x"), RecallResult)
        assert _behaves_like_ipython_recall(shell, "rep")
        shell.run_line_magic("config", "MemoryMagics.shadow_builtins = False")
        assert _behaves_like_ipython_recall(shell, "recall") and _behaves_like_ipython_recall(shell, "rep")
    finally:
        shell.run_line_magic("unload_ext", "ipy_memory")
        InteractiveShell.clear_instance()


# ------------------------------------------------------------------------------ configuration
def test_config_from_file_and_percent_config(tmp_path, monkeypatch):
    shell = make_shell(tmp_path, monkeypatch, limit=1, data_dir=str(tmp_path / "a"), project="p")
    try:
        shell.run_line_magic("load_ext", "ipy_memory")
        m = magics(shell)
        assert (m.limit, m.project) == (1, "p")
        for text in ("apples grow in the orchard", "green apples are sour", "apples and pears for the pie"):
            shell.run_line_magic("remember", text)
        assert len(shell.run_line_magic("recall", "apples")) == 1
        shell.run_line_magic("config", "MemoryMagics.limit = 3")
        assert len(shell.run_line_magic("recall", "apples")) == 3
        first = m.engine
        shell.run_line_magic("config", f"MemoryMagics.data_dir = {str(tmp_path / 'b')!r}")   # reopened elsewhere
        assert first._closed and m.engine.data_dir == (tmp_path / "b").resolve()
        assert len(shell.run_line_magic("recall", "apples")) == 0
        with pytest.warns(UserWarning, match="MemoryMagics.display = 'nonsense' is not valid"):
            shell.run_line_magic("config", "MemoryMagics.display = 'nonsense'")           # rejected by the trait
        assert m.display == "auto"
        shell.run_line_magic("config", "MemoryMagics.dedup_threshold = 0.5")
        assert m.engine.settings.dedup_threshold == 0.5
    finally:
        shell.run_line_magic("unload_ext", "ipy_memory")
        InteractiveShell.clear_instance()


def test_engine_reopens_after_close(ip):
    current_engine(ip).close()
    assert isinstance(ip.run_line_magic("recall", "anything"), RecallResult)


def test_bad_store_is_a_usage_error(ip, tmp_path):
    (tmp_path / "file").write_text("not a dir")
    ip.run_line_magic("config", f"MemoryMagics.data_dir = {str(tmp_path / 'file')!r}")
    with pytest.raises(UsageError, match="data_dir"):
        ip.run_line_magic("memstats", "")


@pytest.mark.parametrize("mode,keys", [("text", {"text/plain"}), ("html", {"text/plain", "text/html"}),
                                       ("auto", {"text/plain", "text/html", "text/markdown"}),
                                       ("widget", {"text/plain", "text/html"})])
def test_display_setting(ip, mode, keys):
    ip.run_line_magic("remember", "display modes are configurable")
    ip.run_line_magic("config", f"MemoryMagics.display = {mode!r}")
    for obj in (ip.run_line_magic("recall", "display"), ip.run_line_magic("memstats", ""),
                ip.run_line_magic("memories", "")):
        assert set(ip.display_formatter.format(obj)[0]) == keys


def test_widget_display_in_a_kernel(ip, monkeypatch):
    monkeypatch.setattr(ip, "kernel", object(), raising=False)     # what ipykernel's shell has
    ip.run_line_magic("remember", "widgets show live views")
    ip.run_line_magic("config", "MemoryMagics.display = 'widget'")
    data = ip.display_formatter.format(ip.run_line_magic("recall", "widgets"))[0]
    assert {"text/html", "application/vnd.jupyter.widget-view+json"} <= set(data)
    ip.run_line_magic("config", "MemoryMagics.display = 'auto'")
    assert "application/vnd.jupyter.widget-view+json" not in ip.display_formatter.format(
        ip.run_line_magic("memstats", ""))[0]


# ------------------------------------------------------------------------------ %memories, %memstats, %forget, lifecycle
def test_memories_stats_forget(ip, capsys):
    ids = [ip.run_line_magic("remember", f"-s {s} memory in the {s} scope").id for s in ("project", "global")]
    listed = ip.run_line_magic("memories", "")
    assert isinstance(listed, MemoryList) and {m.id for m in listed} == set(ids)
    assert [m.id for m in ip.run_line_magic("memories", "-s global")] == [ids[1]]
    assert len(ip.run_line_magic("memories", "-n 1 --offset 1")) == 1
    with pytest.raises(UsageError, match="options only"):
        ip.run_line_magic("memories", "some query")
    stats = ip.run_line_magic("memstats", "")
    assert isinstance(stats, Stats) and stats["documents"] == 2 and "tier" in repr(stats)
    capsys.readouterr()
    ip.run_line_magic("forget", " ".join(ids))
    out = capsys.readouterr().out
    assert len(lines(out, "forgot m-")) == 2
    assert len(ip.run_line_magic("memories", "")) == 0
    with pytest.raises(UsageError, match="which memory"):
        ip.run_line_magic("forget", "")


def test_autopandas(ip):
    ip.run_line_magic("remember", "pandas tables for lists")
    ip.run_line_magic("config", "MemoryMagics.autopandas = True")
    df = ip.run_line_magic("memories", "")
    assert type(df).__name__ == "DataFrame" and list(df["content"]) == ["pandas tables for lists"]


def test_lifecycle_magics_follow_the_engine(ip, tmp_path, monkeypatch):
    for m in LIFECYCLE:
        assert (ip.find_line_magic("mem" + m) is not None) == callable(getattr(MemoryEngine, m, None))

    class Bare(MemoryEngine):
        dream = rotate = compact = None

    monkeypatch.setattr("ipy_memory.magics.MemoryEngine", Bare)
    ip.run_line_magic("reload_ext", "ipy_memory")
    assert all(ip.find_line_magic("mem" + m) is None for m in LIFECYCLE)

    class Full(MemoryEngine):
        def dream(self):
            return {"merged": 0}

        def rotate(self):
            return {"moved_documents": 0}

        def compact(self):
            return {"bytes_before": 10, "bytes_after": 5}

    monkeypatch.setattr("ipy_memory.magics.MemoryEngine", Full)
    ip.run_line_magic("reload_ext", "ipy_memory")
    ip.run_line_magic("config", f"MemoryMagics.data_dir = {str(tmp_path / 'mem')!r}")
    assert ip.run_line_magic("memdream", "") == {"merged": 0}
    assert ip.run_line_magic("memrotate", "") == {"moved_documents": 0}
    assert ip.run_line_magic("memcompact", "") == {"bytes_before": 10, "bytes_after": 5}


def test_help_is_the_docstring(ip):
    for name in ("remember", "recall", "memrecall", "memories", "memstats", "forget"):
        doc = ip.find_line_magic(name).__doc__
        assert doc and len(doc.strip()) > 40
    assert "-n LIMIT" in ip.find_line_magic("recall").__doc__
    assert "NAME" in ip.find_cell_magic("store").__doc__


# ------------------------------------------------------------------------------ review
def test_a_bad_setting_is_reported_and_the_extension_still_loads(bare, tmp_path):
    load(bare, tmp_path)
    with pytest.warns(UserWarning, match=r"MemoryMagics\.limit = 0 is not valid \(an int from 1 to 50\); using 10"):
        bare.run_line_magic("config", "MemoryMagics.limit = 0")          # stays in the shell's config
    assert magics(bare).limit == 10
    for action in ("reload_ext", "load_ext"):
        if action == "load_ext":
            bare.run_line_magic("unload_ext", "ipy_memory")
        with pytest.warns(UserWarning, match=r"MemoryMagics\.limit = 0"):
            bare.run_line_magic(action, "ipy_memory")
        assert bare.find_line_magic("remember") == magics(bare).remember and magics(bare).limit == 10
    bare.run_line_magic("config", f"MemoryMagics.data_dir = {str(tmp_path / 'mem')!r}")
    assert isinstance(bare.run_line_magic("recall", "anything"), RecallResult)


@pytest.mark.parametrize("setting, value", [("limit", True), ("max_tokens", False), ("dedup_threshold", float("nan"))])
def test_settings_the_traits_let_through_are_rejected_too(tmp_path, monkeypatch, setting, value):
    """traitlets' Int takes a bool and Float(min, max) NaN; either then broke every %recall."""
    shell = make_shell(tmp_path, monkeypatch, project="p", data_dir=str(tmp_path / "m"), **{setting: value})
    try:
        with pytest.warns(UserWarning, match=rf"MemoryMagics\.{setting} = .* is not valid"):
            shell.run_line_magic("load_ext", "ipy_memory")
        assert isinstance(shell.run_line_magic("recall", "anything"), RecallResult)
    finally:
        shell.run_line_magic("unload_ext", "ipy_memory")
        InteractiveShell.clear_instance()


def test_forget_takes_two_spellings_of_one_section_once(ip):
    doc = ip.run_line_magic("remember", "# A\none\n\n# B\ntwo\n\n# C\nthree")
    ip.run_line_magic("forget", f"{doc.id}#1 {doc.id}#01 {doc.id}#0000001")
    assert current_engine(ip).get(doc.id).node_count == 2


def test_forget_takes_a_section_dream_set_aside(ip):
    """get() and forget() find a section dream() set aside as a duplicate; %forget's check did not."""
    eng, shared = current_engine(ip), "## Conda\nUse the conda env `ds` for every analysis."
    eng.remember(f"# Notes\nintro A\n{shared}")          # (dream merges copies under one heading path)
    eng.remember(f"# Notes\nintro B\n{shared}", force=True)
    assert eng.dream()["removed_nodes"] == 1
    [(doc, ord_)] = eng.store.query("SELECT document_id, ord FROM dreamed")     # the copy set aside
    ip.run_line_magic("forget", f"{doc}#{ord_}")
    assert "conda" not in eng.get(doc).content


@pytest.mark.parametrize("line", ["%memories ;", "%memories -n 5 ;", "%memstats ;", "%forget {id} ;"])
def test_a_trailing_semicolon_is_not_an_argument(ip, line):
    doc = ip.run_line_magic("remember", "a memory to list and forget")
    r = ip.run_cell(line.format(id=doc.id))
    assert r.error_in_exec is None, r.error_in_exec


def test_bad_settings_in_a_config_file_keep_their_defaults(tmp_path, monkeypatch):
    shell = make_shell(tmp_path, monkeypatch, limit=500, display="nonsense", project="p", data_dir=str(tmp_path / "m"))
    try:
        with pytest.warns(UserWarning) as caught:
            shell.run_line_magic("load_ext", "ipy_memory")
        messages = sorted(str(w.message) for w in caught)
        assert len(messages) == 2
        assert "MemoryMagics.display = 'nonsense' is not valid (any of ['auto', 'widget', 'html', 'text'])" in messages[0]
        assert "MemoryMagics.limit = 500 is not valid (an int from 1 to 50); using 10" in messages[1]
        m = magics(shell)
        assert (m.limit, m.display, m.project) == (10, "auto", "p")         # the good settings still apply
    finally:
        shell.run_line_magic("unload_ext", "ipy_memory")
        InteractiveShell.clear_instance()


@pytest.mark.parametrize("typed", ['"my notes"', "'my notes'"])
def test_store_name_in_quotes_is_unquoted(ip, typed):
    first = ip.run_cell_magic("store", typed, "# Notes\nFirst version.\n")
    m = current_engine(ip).get(first.id)
    assert (m.title, m.metadata["name"]) == ("my notes", "my notes")
    again = ip.run_cell_magic("store", "my notes", "# Notes\nSecond version.\n")     # the same name, unquoted
    assert again.id == first.id and "Second" in current_engine(ip).get(first.id).content


@pytest.mark.parametrize("bad", ["BAD", "m-0000000000000000", "m-0000000000000000#1", "{id}#9"])
def test_forget_checks_every_id_before_deleting_any(ip, bad):
    keep = ip.run_line_magic("remember", "# Kept\nThis memory must survive a bad %forget.").id
    other = ip.run_line_magic("remember", "# Also kept\nAnd so must this one.").id
    with pytest.raises(UsageError, match="expected form|no memory"):
        ip.run_line_magic("forget", f"{keep} {other} {bad.format(id=keep)}")
    assert {m.id for m in ip.run_line_magic("memories", "")} == {keep, other}


def test_forget_repeats_and_covered_sections_are_harmless(ip, capsys):
    doc = ip.run_line_magic("remember", "# A\nfirst section\n\n# B\nsecond section")
    other = ip.run_line_magic("remember", "# C\nthird\n\n# D\nfourth").id
    assert doc.node_count == 2
    capsys.readouterr()
    ip.run_line_magic("forget", f"{doc.id} {doc.id} {doc.id}#1 {other}#1 {other}#1")
    out = capsys.readouterr().out
    assert lines(out, "forgot") == [f"forgot {doc.id} (2 sections)", f"forgot {other}#1 (1 section)"]
    assert [m.id for m in ip.run_line_magic("memories", "")] == [other]


@pytest.mark.parametrize("magic,method", [("memstats", "stats"), ("memdream", "dream"), ("memrotate", "rotate"),
                                          ("memcompact", "compact")])
def test_magics_without_options_reject_arguments_before_doing_anything(ip, monkeypatch, magic, method):
    engine, called = current_engine(ip), []
    monkeypatch.setattr(engine, method, lambda *a, **k: called.append(method) or {})
    for line in ("--dry-run", "-n 5", "now please"):
        with pytest.raises(UsageError, match=rf"%{magic} takes no arguments"):
            ip.run_line_magic(magic, line)
    assert called == []
    ip.run_line_magic(magic, "  ")
    ip.run_line_magic(magic, ";")           # `%memstats ;`: a semicolon typed out of habit
    assert called == [method, method]


def test_a_store_in_a_read_only_directory_opens_read_only(bare, read_only_dir, capsys):
    bare.run_line_magic("load_ext", "ipy_memory")
    bare.run_line_magic("config", f"MemoryMagics.data_dir = {str(read_only_dir)!r}")
    bare.run_line_magic("config", "MemoryMagics.project = 'p'")
    assert "read-only store" in bare.run_line_magic("recall", "read-only store").block
    assert "opened read-only" in capsys.readouterr().out
    assert len(bare.run_line_magic("memories", "")) == 1
    with pytest.raises(UsageError, match="read-only"):
        bare.run_line_magic("remember", "cannot be written")


@pytest.mark.parametrize("store_history", [False, True])          # a kernel runs cells with store_history=True
@pytest.mark.parametrize("cell", [
    "%remember percent form",
    "remember automagic form",
    "remember -t 'Quoted' automagic with options",
    "x = %remember assigned form",
    "%remember ends with a semicolon;",
    "%%remember\n# Cell\nbody",
    "%%store named\n# Named\nbody",
    "%%store named\n# Named\nbody ends with a semicolon;",
    "%%store\nunnamed body\n;",
    "if True:\n    %remember inside a block",
    "%remember first of two\nprint('between')",
])
def test_summary_shows_exactly_once(ip, capsys, cell, store_history):
    capsys.readouterr()
    ip.run_cell(cell, store_history=store_history)
    out = capsys.readouterr().out
    assert len(lines(out, "stored m-")) == 1, out


def test_a_cell_of_many_magics_is_transformed_once(ip, capsys, monkeypatch):
    # each magic asks whether IPython will show its result; asking must not re-read the whole cell each time
    calls = []
    original = ip.transform_cell
    monkeypatch.setattr(ip, "transform_cell", lambda raw: calls.append(raw) or original(raw))
    cell = "\n".join(f"%remember note number {i} about topic {i}" for i in range(30))
    ip.run_cell(cell)
    assert len(lines(capsys.readouterr().out, "stored m-")) == 30
    assert calls.count(cell) <= 2, len(calls)       # IPython's own run, then ipy_memory's once
    ip.run_cell("%remember one more\nx = 1")          # a new cell is read afresh: not its last line, so printed
    assert len(lines(capsys.readouterr().out, "stored m-")) == 1


@pytest.mark.parametrize("interactivity", ["last_expr", "all"])
def test_two_identical_magic_lines_in_a_cell_each_show_their_summary(ip, capsys, interactivity):
    # (the second is a duplicate: 'already stored as m-...')
    # the first call's line matched the cell's last statement, so it was taken for the one IPython shows
    ip.ast_node_interactivity = interactivity
    ip.run_cell("%remember the same note twice\n%remember the same note twice", store_history=True)
    assert len(lines(capsys.readouterr().out, "stored")) == 2
    ip.run_cell("x = %remember a note assigned\n%remember a note assigned", store_history=True)
    assert len(lines(capsys.readouterr().out, "stored")) == 2
    ip.run_cell("%remember shown last\n%remember shown last\n1", store_history=True)
    assert len(lines(capsys.readouterr().out, "stored")) == 2


def test_lifecycle_summary_shows_exactly_once(ip, capsys):
    for cell in ("%memrotate", "memrotate", "r = %memrotate"):
        capsys.readouterr()
        ip.run_cell(cell, store_history=True)
        assert len(lines(capsys.readouterr().out, "moved_documents")) == 1, cell


def test_summary_with_every_statement_shown(ip, capsys):
    ip.ast_node_interactivity = "all"
    ip.run_cell("%remember first\n%remember second")
    assert len(lines(capsys.readouterr().out, "stored m-")) == 2
    ip.ast_node_interactivity = "last_expr_or_assign"
    ip.run_cell("x = %remember assigned and shown")
    assert len(lines(capsys.readouterr().out, "stored m-")) == 1


@pytest.mark.parametrize("setting,value", [("project", "bad\x01name"), ("project", "x" * 300), ("project", "../up"),
                                           ("embedder", "bogus")])
def test_open_error_hint_names_the_setting_at_fault(ip, setting, value):
    ip.run_line_magic("config", f"MemoryMagics.{setting} = {value!r}")
    with pytest.raises(UsageError) as caught:
        ip.run_line_magic("memstats", "")
    message = str(caught.value)
    assert f"%config MemoryMagics.{setting} = " in message and "data_dir" not in message, message


def test_help_names_each_magic_as_typed(ip):
    store_doc = ip.find_cell_magic("store").__doc__
    assert "%%store [-s SCOPE]" in store_doc and not re.search(r"(?<!%)%store \[", store_doc)
    assert "the cell body in %%remember" in ip.find_cell_magic("remember").__doc__


@pytest.mark.parametrize("run,typed", [
    (lambda ip, line: ip.run_cell_magic("store", line, "body"), "%%store"),
    (lambda ip, line: ip.run_cell_magic("remember", line, "body"), "%%remember"),
    (lambda ip, line: ip.run_line_magic("remember", line), "%remember"),
    (lambda ip, line: ip.run_line_magic("recall", line), "%recall"),
    (lambda ip, line: ip.run_line_magic("memrecall", line), "%recall"),
])
@pytest.mark.parametrize("line", ["--bogus text", "--ttl abc text", "-n abc text", "-t"])
def test_errors_name_each_magic_as_typed(ip, run, typed, line):
    with pytest.raises(UsageError) as caught:
        run(ip, line)
    message = str(caught.value)
    assert f"see {typed}?" in message, message
    other = {"%%store": "%store", "%%remember": "%remember"}.get(typed)
    assert other is None or not re.search(rf"(?<!%){other}\b", message), message


def test_recall_errors_name_memrecall_when_recall_is_ipythons(tmp_path, monkeypatch):
    shell = make_shell(tmp_path, monkeypatch, shadow_builtins=False)
    try:
        load(shell, tmp_path)
        with pytest.raises(UsageError, match=r"see %memrecall\?"):
            shell.run_line_magic("memrecall", "--bogus query")
    finally:
        shell.run_line_magic("unload_ext", "ipy_memory")
        InteractiveShell.clear_instance()


@pytest.mark.parametrize("cell,usage", [
    ("%recall -n 0 sales table", "usage: %recall [options] QUERY  (see %recall?)"),
    ("%memories -n 0", "usage: %memories [options]  (see %memories?)"),
    ("%%store -s project --ttl -5 notes\n# Notes\nbody", "usage: %%store [options] [NAME]  (see %%store?)"),
])
def test_usage_hints_do_not_list_a_subset_of_the_options(ip, cell, usage):
    # hand-written option lists drifted from the parsers (%recall's lacked --max-tokens, -p, --path, -v)
    with pytest.raises(UsageError) as caught:
        if cell.startswith("%%"):
            first, body = cell.split("\n", 1)
            ip.run_cell_magic("store", first.split(" ", 1)[1], body)
        else:
            name, line = cell[1:].split(" ", 1)
            ip.run_line_magic(name, line)
    assert str(caught.value).endswith(usage), str(caught.value)
