"""Regressions for the review of the IPython layer (/work/review/magics.md): one test or more per finding."""

from __future__ import annotations

import re

import pytest
from IPython.core.error import UsageError

from ipy_memory import MemoryEngine
from ipy_memory.magics import current_engine

from test_magics import bare, ip, magics  # noqa: F401  (fixtures and helpers)


# ------------------------------------------------------------------------------ 8. autopandas on an empty page
def test_an_empty_page_has_the_usual_columns(ip):
    ip.run_line_magic("config", "MemoryMagics.autopandas = True")
    empty = ip.run_line_magic("memories", "")
    assert len(empty) == 0
    assert list(empty[["title", "scope", "node_count", "tier"]].columns) == ["title", "scope", "node_count", "tier"]
    ip.run_line_magic("remember", "# Note\none memory")
    full = ip.run_line_magic("memories", "")
    assert list(empty.columns) == list(full.columns)
    assert list(ip.run_line_magic("memories", "--offset 5").columns) == list(full.columns)
    hits = ip.run_line_magic("recall", "one memory").to_pandas()
    none = ip.run_line_magic("recall", "--path Nowhere one memory").to_pandas()
    assert len(hits) == 1 and len(none) == 0 and list(none.columns) == list(hits.columns)


# ------------------------------------------------------------------------------ 1. a live view acts on its result's engine
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


@pytest.fixture
def kernel(ip, monkeypatch):
    """The `ip` shell as in a kernel (what ipykernel's shell has), showing results as live widgets."""
    monkeypatch.setattr(ip, "kernel", object(), raising=False)
    ip.run_line_magic("config", "MemoryMagics.display = 'widget'")
    return ip


def shown_view(shell, obj):
    """The live view the shell shows for `obj`, or None when it shows only the static one."""
    from ipywidgets.widgets.widget import _instances
    data = shell.display_formatter.format(obj)[0]
    return _instances[data[WIDGET_MIME]["model_id"]] if WIDGET_MIME in data else None


@pytest.fixture
def copy_engine(kernel, tmp_path):
    """A copy of the kernel's store (the same ids: a backup, a colleague's copy), open beside it."""
    kernel.run_line_magic("remember", "Staging password rotation happens on Fridays")
    live = current_engine(kernel)
    (tmp_path / "copy").mkdir()
    live.backup(tmp_path / "copy" / "memory.sqlite3")
    with MemoryEngine(tmp_path / "copy", project="test") as copy:
        yield copy


def test_forget_in_a_view_of_another_engines_result_forgets_there(kernel, copy_engine):
    live = current_engine(kernel)
    view = shown_view(kernel, copy_engine.recall("password rotation"))
    view.hit_views[0].confirm_button.click()
    assert "forgot m-" in view.status.value
    assert len(copy_engine.list_memories()) == 0 and len(live.list_memories()) == 1
    copy_engine.remember("Backups run nightly from the copy")
    view.search("backups nightly")
    assert view.result.hits[0].text == "Backups run nightly from the copy"
    stats = shown_view(kernel, copy_engine.stats())
    copy_engine.remember("One more note in the copy only")
    assert stats.refresh()["documents"] == 2 and live.stats()["documents"] == 1


def test_a_view_keeps_the_recalls_arguments(kernel):
    kernel.run_line_magic("remember", "-s global # Setup\n\nglobal setup note")
    kernel.run_line_magic("remember", "-p other # Setup\n\n## Env\nconda env ds for the other project")
    kernel.run_line_magic("remember", "# Setup\n\n## Env\nconda env base for this project")
    result = kernel.run_line_magic("recall", "-s project -p other --path Setup/Env --max-tokens 400 -n 3 conda env")
    view = shown_view(kernel, result)
    assert (view.scope_box.value, view.limit_box.value) == ("project", 3)
    # (and the session it searched: the spaces it used, whichever engine stands in for it later)
    assert view.options == {"project": "other", "path": "Setup/Env", "max_tokens": 400,
                            "session": current_engine().session}
    assert "project: other" in view.options_label.value
    again = view.search("conda env setup")
    assert [h.text for h in again] == ["conda env ds for the other project"]
    assert shown_view(kernel, kernel.run_line_magic("recall", "-s global setup")).scope_box.value == "global"


def test_a_result_from_no_known_engine_shows_only_the_static_view(kernel, copy_engine):
    result = copy_engine.recall("password rotation")
    result.origin = None                   # made by hand, or its engine is gone
    assert shown_view(kernel, result) is None
    assert "text/html" in kernel.display_formatter.format(result)[0]


def test_a_view_follows_the_kernels_engine_only_on_the_same_store(kernel, copy_engine, tmp_path):
    view = shown_view(kernel, kernel.run_line_magic("recall", "password rotation"))
    hit = view.hit_views[0].hit.id
    kernel.run_line_magic("config", "MemoryMagics.dedup_threshold = 0.9")   # the magics reopen the same store
    assert len(view.search("password rotation")) == 1 and view.engine is current_engine(kernel)
    copy_engine.close()
    kernel.run_line_magic("config", f"MemoryMagics.data_dir = {str(tmp_path / 'copy')!r}")   # the same ids
    assert not view.forget(hit) and "closed" in view.status.value
    assert len(current_engine(kernel).list_memories()) == 1


def test_results_that_know_their_engine_still_pickle(copy_engine):
    import copy
    import pickle
    result, stats = copy_engine.recall("password rotation"), copy_engine.stats()
    assert result.origin.engine is copy_engine and stats.origin.engine is copy_engine
    again = pickle.loads(pickle.dumps(result))
    assert [h.id for h in again] == [h.id for h in result] and again.origin.engine is None
    assert again.origin.arguments == result.origin.arguments and again.origin.data_dir == copy_engine.data_dir
    assert pickle.loads(pickle.dumps(stats))["documents"] == 1 and copy.deepcopy(result).origin.engine is None


# ------------------------------------------------------------------------------ 5. %%store NAME keeps backslashes
@pytest.mark.parametrize("typed,name", [(r"C:\notes\x", r"C:\notes\x"), (r"a\b", r"a\b"),
                                        (r'"C:\my notes"', r"C:\my notes"), (r"'\\server\share'", r"\\server\share")])
def test_store_name_keeps_backslashes(ip, typed, name):
    r = ip.run_cell_magic("store", typed, "win path body\n")
    m = current_engine(ip).get(r.id)
    assert (m.title, m.metadata["name"]) == (name, name)
    assert ip.run_cell_magic("store", typed, "win path body, changed\n").id == r.id


# ------------------------------------------------------------------------------ 6. grouped short flags
def test_grouped_short_flags_as_argparse_reads_them(ip):
    ip.user_ns["x"] = 5
    r = ip.run_line_magic("remember", "-vt Title expanded with title $x")
    m = current_engine(ip).get(r.id)
    assert (m.title, m.content) == ("Title", "expanded with title 5")
    m = current_engine(ip).get(ip.run_line_magic("remember", "-vtOther expanded again $x").id)
    assert (m.title, m.content) == ("Other", "expanded again 5")
    assert len(ip.run_line_magic("recall", "-vn 1 expanded $x")) == 1
    assert len(ip.run_line_magic("recall", "-vn1 expanded title")) == 1
    with pytest.raises(UsageError, match="unknown option '-vx'"):
        ip.run_line_magic("remember", "-vx text")
    with pytest.raises(UsageError, match="needs a value"):
        ip.run_line_magic("remember", "-vt")
    assert current_engine(ip).get(ip.run_line_magic("remember", "-5 degrees, - a bullet").id).content == \
        "-5 degrees, - a bullet"


# ------------------------------------------------------------------------------ 7. %recall?'s default scope
def test_recall_help_states_the_default_scope(ip):
    help_text = " ".join(ip.find_line_magic("recall").__doc__.split())
    assert "(default: MemoryMagics.scope plus project+global)" in help_text
    ip.run_line_magic("config", "MemoryMagics.scope = 'session'")
    ip.run_line_magic("remember", "zebra crossing session note")
    assert len(ip.run_line_magic("recall", "zebra")) == 1          # what the help says


# ------------------------------------------------------------------------------ 9. MemoryMagics.locale
@pytest.mark.parametrize("value", ["fr", "zh-CN", "zh_CN", ""])
def test_an_unknown_locale_is_reported_and_the_old_one_kept(ip, value):
    ip.run_line_magic("config", "MemoryMagics.locale = 'zh'")
    with pytest.warns(UserWarning, match=re.escape(f"MemoryMagics.locale = {value!r} is not valid (any of ['en', "
                                                   "'zh']); using 'zh'")):
        ip.run_line_magic("config", f"MemoryMagics.locale = {value!r}")
    assert magics(ip).locale == "zh"
    ip.run_line_magic("remember", "hello world note")
    assert "以下是" in ip.run_line_magic("recall", "--block hello")


# ------------------------------------------------------------------------------ 4. %%store --force, and the magics' hint
NEAR = "The conda env is ds, and raw data is in the s3 bucket raw!"


def test_store_force_stores_a_near_duplicate(ip, capsys):
    ip.run_line_magic("remember", "The conda env is ds and raw data is in the s3 bucket raw")
    capsys.readouterr()
    ip.run_cell(f"%%store setup\n{NEAR}\n")
    out = capsys.readouterr().out
    assert "duplicate of m-" in out and "to store it anyway: %%store --force" in out and "force=True" not in out
    r = ip.run_cell_magic("store", "--force setup", NEAR + "\n")
    assert r.stored and current_engine(ip).get(r.id).metadata["name"] == "setup"
    assert ip.run_cell_magic("store", "setup", NEAR + " Changed.\n").id == r.id      # the name is recorded now


@pytest.mark.parametrize("cell", ["%remember {text}", "r = %remember {text}", "%remember {text};"])
def test_the_near_duplicate_hint_names_the_magics_option(ip, capsys, cell):
    ip.run_line_magic("remember", "The conda env is ds and raw data is in the s3 bucket raw")
    capsys.readouterr()
    ip.run_cell(cell.format(text=NEAR), store_history=True)
    out = capsys.readouterr().out
    assert out.count("to store it anyway: %remember --force") == 1 and "force=True" not in out, out
    api = current_engine(ip).remember(NEAR)         # the Python API's result keeps the engine's words
    assert "force=True" in ip.display_formatter.format(api)[0]["text/plain"]


# ------------------------------------------------------------------------------ 2. %%store names are per notebook
def test_store_names_are_per_notebook(ip, capsys, monkeypatch):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    ip.user_ns["__vsc_ipynb_file__"] = "/proj/analysis_a.ipynb"
    a = ip.run_cell_magic("store", "notes", "# Notes A\nModel A uses learning rate 3e-4 and the 2024 split.\n")
    ip.user_ns["__vsc_ipynb_file__"] = "/proj/etl_b.ipynb"           # another notebook, the same project
    capsys.readouterr()
    b = ip.run_cell_magic("store", "notes", "# Notes B\nThe ETL job runs at 02:00 UTC on the etl cluster.\n")
    out = capsys.readouterr().out
    assert b.id != a.id and f"{a.id} ('notes' from /proj/analysis_a.ipynb) is kept" in out
    assert "learning rate 3e-4" in current_engine(ip).get(a.id).content
    assert [h.document_id for h in ip.run_line_magic("recall", "learning rate")][:1] == [a.id]
    again = ip.run_cell_magic("store", "notes", "# Notes B\nThe ETL job runs at 03:00 UTC now.\n")
    out = capsys.readouterr().out
    assert again.id == b.id and out.startswith(f"replaced {b.id} (1 section") and "kept" not in out
    ip.user_ns["__vsc_ipynb_file__"] = "/proj/analysis_a.ipynb"
    assert ip.run_cell_magic("store", "notes", "# Notes A\nModel A now uses learning rate 1e-4.\n").id == a.id
    del ip.user_ns["__vsc_ipynb_file__"]                            # a terminal: no notebook
    c = ip.run_cell_magic("store", "notes", "# Notes\nterminal notes\n")
    assert c.id not in (a.id, b.id) and " is kept: %%store names are per notebook" in capsys.readouterr().out
    assert ip.run_cell_magic("store", "notes", "# Notes\nterminal notes, changed\n").id == c.id
    ip.user_ns["__session__"] = "/proj/lab.ipynb"                   # Jupyter Server's name for the notebook
    capsys.readouterr()
    d = ip.run_cell_magic("store", "notes", "# Notes\nlab notes\n")
    assert d.id not in (a.id, b.id, c.id) and f"{c.id} ('notes' from outside any notebook)" in capsys.readouterr().out
    assert len(ip.run_line_magic("memories", "")) == 4


def test_help_says_store_names_are_per_notebook(ip):
    assert "Names are per notebook" in ip.find_cell_magic("store").__doc__


@pytest.mark.parametrize("store_history", [False, True])
def test_a_replaced_name_is_said_once_as_the_cells_output_too(ip, capsys, store_history):
    ip.run_cell("%%store named\n# Named\nfirst body", store_history=store_history)
    capsys.readouterr()
    ip.run_cell("%%store named\n# Named\nsecond body", store_history=store_history)
    out = capsys.readouterr().out
    assert out.count("replaced m-") == 1 and "stored m-" not in out, out


# ------------------------------------------------------------------------------ 3. a write-protected database file
@pytest.fixture
def protected_store(tmp_path):
    """A store whose database file the user made read-only (0444), in a writable directory."""
    d = tmp_path / "mem"
    with MemoryEngine(d, project="p") as mem:
        mem.remember("# Notes\n\nthe protected note")
    db = d / "memory.sqlite3"
    db.chmod(0o444)
    yield d
    db.chmod(0o600)


def _mode(path) -> int:
    return path.stat().st_mode & 0o777


def test_a_write_protected_database_file_opens_read_only(bare, protected_store, capsys, db_counts):
    before = db_counts(protected_store)
    bare.run_line_magic("load_ext", "ipy_memory")
    bare.run_line_magic("config", f"MemoryMagics.data_dir = {str(protected_store)!r}")
    bare.run_line_magic("config", "MemoryMagics.project = 'p'")
    assert "the protected note" in bare.run_line_magic("recall", "protected note").block
    assert "memory.sqlite3 is not writable here: opened read-only" in capsys.readouterr().out
    with pytest.raises(UsageError, match="read-only"):
        bare.run_line_magic("remember", "written into the protected store")
    assert _mode(protected_store / "memory.sqlite3") == 0o444 and db_counts(protected_store) == before


def test_opening_a_store_never_adds_a_permission(protected_store):
    from ipy_memory.errors import StorageError
    try:
        MemoryEngine(protected_store, project="p").close()      # root may write it (and does, asked to)
    except StorageError:
        pass                                                    # anyone else may not
    assert _mode(protected_store / "memory.sqlite3") & ~0o444 == 0


SETPRIV = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--reuid=0", "--"]
AS_A_USER = """
import json, os, sys
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config
c = Config(); c.HistoryManager.enabled = False
ip = InteractiveShell.instance(config=c)
ip.run_line_magic("load_ext", "ipy_memory")
ip.run_line_magic("config", f"MemoryMagics.data_dir = {sys.argv[1]!r}")
ip.run_line_magic("config", "MemoryMagics.project = 'p'")
out = {"writable": os.access(os.path.join(sys.argv[1], "memory.sqlite3"), os.W_OK)}
out["hits"] = len(ip.run_line_magic("recall", "protected note"))
try:
    ip.run_line_magic("remember", "written into the protected store")
except Exception as exc:
    out["refused"] = str(exc)
print(json.dumps(out))
"""


def test_a_write_protected_database_file_for_a_user_without_root_powers(protected_store, tmp_path, db_counts):
    """The review's case: not root (root ignores file modes), so root's capabilities are dropped."""
    import json
    import os
    import shutil
    import subprocess
    import sys
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not available to drop root's capabilities")
    before = db_counts(protected_store)
    env = dict(os.environ, IPYTHONDIR=str(tmp_path / "ipython"), OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, "-c", AS_A_USER, str(protected_store)]
    done = subprocess.run((SETPRIV if os.geteuid() == 0 else []) + cmd, capture_output=True, text=True, env=env,
                          timeout=120)
    if done.returncode and "setpriv" in done.stderr:
        pytest.skip(f"setpriv cannot drop capabilities here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["writable"] is False and out["hits"] == 1 and "read-only" in out["refused"], out
    assert _mode(protected_store / "memory.sqlite3") == 0o444 and db_counts(protected_store) == before



def test_remember_replace_keeps_the_memorys_scope_unless_told(ip):
    mem = current_engine()
    r = mem.remember("The VPN needs the 2FA app", scope="global")
    ip.run_line_magic("remember", f"--replace {r.id} The VPN needs the 2FA app and a hardware key")
    assert mem.get(r.id).scope == "global"
    ip.run_line_magic("remember", f"--replace {r.id} -s project The VPN needs a hardware key")
    assert mem.get(r.id).scope == "project"


# ------------------------------------------------------------------------------ a second review of these fixes
def test_remember_replace_keeps_the_memorys_metadata_and_its_store_name(ip):
    mem = current_engine()
    r = mem.remember("The sales table lives in warehouse.sales_2024", metadata={"owner": "ana", "ticket": "DATA-12"})
    ip.run_line_magic("remember", f"--replace {r.id} The sales table lives in warehouse.orders_2024")
    meta = mem.get(r.id).metadata
    assert meta["owner"] == "ana" and meta["ticket"] == "DATA-12" and meta["magic"] == "remember"
    named = ip.run_cell_magic("store", "notes", "first body about pandas merges and joins")
    ip.run_line_magic("remember", f"--replace {named.id} corrected text about pandas merges and joins")
    again = ip.run_cell_magic("store", "notes", "rerun of the named cell with its new body text")
    assert again.id == named.id and mem.get(named.id).content == "rerun of the named cell with its new body text"


def test_a_store_name_is_found_in_any_scope(ip):
    mem = current_engine()
    first = ip.run_cell_magic("store", "style", "Use black with line length 88 for all python files")
    moved = ip.run_cell_magic("store", "-s global style", "Use ruff format, line length 110, no black anymore")
    assert moved.id == first.id and mem.get(first.id).scope == "global"
    assert len(mem.list_memories(scope="session+project+global")) == 1


def test_an_option_after_the_store_name_is_refused(ip):
    with pytest.raises(UsageError, match="'--force' after NAME"):
        ip.run_cell_magic("store", "notes --force", "the warehouse table lives in snowflake db")
    assert len(current_engine().list_memories(scope="session+project+global")) == 0


def test_a_result_remembers_the_project_and_session_it_searched(ip):
    ip.run_line_magic("config", "MemoryMagics.project = 'a'")
    ip.run_line_magic("remember", "alpha project note about widgets sales table")
    ip.run_line_magic("config", "MemoryMagics.project = 'b'")
    ip.run_line_magic("remember", "beta project note about widgets sales table")
    ip.run_line_magic("config", "MemoryMagics.project = 'a'")
    r = ip.run_line_magic("recall", "sales table")
    ip.run_line_magic("config", "MemoryMagics.project = 'b'")       # closes the engine that made r
    from ipy_memory.widgets import RecallBrowser
    assert [h.text for h in RecallBrowser(result=r, live=False).search()] == ["alpha project note about widgets sales table"]


def test_a_store_made_writable_again_is_reopened_for_writing(bare, protected_store):
    bare.run_line_magic("load_ext", "ipy_memory")
    bare.run_line_magic("config", f"MemoryMagics.data_dir = {str(protected_store)!r}")
    bare.run_line_magic("config", "MemoryMagics.project = 'p'")
    with pytest.raises(UsageError, match="chmod u\\+w"):
        bare.run_line_magic("remember", "written into the protected store")
    (protected_store / "memory.sqlite3").chmod(0o600)
    assert bare.run_line_magic("remember", "written once the store is writable again").stored


def test_sidecars_a_read_only_visit_left_write_protected_are_writable_again(protected_store):
    db = protected_store / "memory.sqlite3"
    with MemoryEngine(protected_store, project="p", read_only=True) as mem:       # as a read-only visit leaves them
        mem.recall("protected note")
        for side in ("-wal", "-shm"):
            path = db.with_name(db.name + side)
            path.touch()
            path.chmod(0o444)
    db.chmod(0o600)                                                                # the user makes it writable
    with MemoryEngine(protected_store, project="p") as mem:             # (root could write them anyway)
        assert [_mode(db.with_name(db.name + side)) for side in ("-wal", "-shm")] == [0o600, 0o600]
        assert mem.remember("written after the chmod").stored


def test_a_copy_of_a_result_says_its_engine_may_be_unknown_to_it(ip, tmp_path):
    import pickle
    from ipy_memory.widgets import RecallBrowser
    ip.run_line_magic("remember", "the sales table lives in warehouse")
    copy = pickle.loads(pickle.dumps(ip.run_line_magic("recall", "sales table")))    # no engine travels with it
    ip.run_line_magic("config", f"MemoryMagics.data_dir = {str(tmp_path / 'other')!r}")
    view = RecallBrowser(result=copy, live=False)
    assert view.search("sales table") is None and "not known to this copy" in view.status.value


def test_a_shown_result_stays_live_once_the_kernels_engine_reopened_on_its_store(kernel):
    import gc
    kernel.run_line_magic("remember", "the warehouse table lives in snowflake")
    result = kernel.run_line_magic("recall", "warehouse")
    kernel.run_line_magic("config", "MemoryMagics.dedup_threshold = 0.9")     # the magics reopen the same store
    current_engine(kernel)
    gc.collect()
    assert result.origin.engine is None and shown_view(kernel, result) is not None


def test_a_quoted_store_name_may_hold_an_option_like_word(ip):
    r = ip.run_cell_magic("store", '"pros -v cons"', "a table of the pros and cons of the migration")
    assert current_engine().get(r.id).metadata["name"] == "pros -v cons"


# ------------------------------------------------------------------------------ audit of the README: %%store re-runs, hints, help
DAY = 86400.0


def test_a_store_rerun_restarts_the_memorys_life(ip):
    """Re-running `%%store NAME` on days 30, 60 and 85 left it expiring on day 90: gone on day 91, though the cell
    ran 6 days before. A re-run re-asserts the note: its scope's TTL starts again from now, or --ttl's."""
    mem, now = current_engine(), [1_800_000_000.0]
    mem.clock = lambda: now[0]
    first = ip.run_cell_magic("store", "setup-notes", "# Environment\nUse the conda env ds.\n")
    now[0] += 85 * DAY
    ip.run_cell_magic("store", "setup-notes", "# Environment\nUse the conda env ds (checked on day 85).\n")
    assert mem.get(first.id).expires_at == pytest.approx(now[0] + mem.settings.ttl_for("project"))
    now[0] += 6 * DAY
    assert [m.id for m in mem.list_memories()] == [first.id]
    ip.run_cell_magic("store", "--ttl 3600 setup-notes", "# Environment\nUse the conda env ds for an hour.\n")
    assert mem.get(first.id).expires_at == pytest.approx(now[0] + 3600)
    ip.run_cell_magic("store", "setup-notes", "# Environment\nUse the conda env ds for an hour.\n")   # the same text
    assert mem.get(first.id).expires_at == pytest.approx(now[0] + mem.settings.ttl_for("project"))


def test_a_store_rerun_keeps_the_memorys_scope_unless_told(ip):
    """A re-run without -s moved the memory to MemoryMagics.scope (a global note became the project's)."""
    mem = current_engine()
    first = ip.run_cell_magic("store", "-s global moved-notes", "Use ruff format, line length 110, everywhere")
    again = ip.run_cell_magic("store", "moved-notes", "Use ruff format, line length 120, everywhere")
    assert again.id == first.id and mem.get(first.id).scope == "global" and mem.get(first.id).expires_at is None
    ip.run_cell_magic("store", "-s project moved-notes", "Use ruff format, line length 120, in this project")
    assert mem.get(first.id).scope == "project"
    assert ip.run_cell_magic("store", "new-notes", "A new note goes to MemoryMagics.scope").space.startswith("project")


def test_a_custom_embedder_store_is_said_to_need_python(ip, tmp_path):
    """The hint for a store built with an Embedder object said `%config MemoryMagics.embedder = ''`, the value
    already set: no preset opens such a store, so the hint says how it opens (in Python) instead."""
    import numpy as np

    from ipy_memory import Embedder

    class Tiny(Embedder):
        name, dim = "tiny-3", 3

        def _embed(self, texts):
            return np.array([[len(t), 1.0, 2.0] for t in texts], np.float32)

    with MemoryEngine(tmp_path / "mem", project="test", embedder=Tiny()) as custom:
        custom.remember("custom embedder memory about lynxes")
    with pytest.raises(UsageError) as caught:
        ip.run_line_magic("recall", "lynxes")
    message = str(caught.value)
    assert "MemoryEngine(path, embedder=...)" in message and "MemoryMagics.embedder = ''" not in message, message


def test_remember_help_shows_the_cell_form_usage(ip, capsys):
    """`%%remember?` showed only the line form's usage, `%remember [-s SCOPE] ...`."""
    ip.run_cell("%%remember?")
    usage = capsys.readouterr().out.split("Store a note")[0]
    assert "%remember [-s SCOPE]" in usage and "%%remember [options] [TITLE]" in usage, usage


def test_recall_without_a_budget_is_not_cut_to_the_agent_tools_default(ip):
    """The search tool's default budget (4,000 tokens, for a model's context) must not reach %recall, whose
    MemoryMagics.max_tokens None means no budget: 8 long matching notes gave 1 hit."""
    mem = current_engine()
    for i in range(8):
        mem.remember(f"Quarterly review {i} of the churn model. " + f"segment {i} churn figures " * 400, force=True)
    assert len(ip.run_line_magic("recall", "churn model quarterly review")) == 8
    assert len(ip.run_line_magic("recall", "--max-tokens 4000 churn model quarterly review")) < 8
