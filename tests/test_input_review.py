"""Bad-input review (s25): numpy numbers, scope spelling, project/session with a scope without them,
callbacks that fail, enumerated settings, paths, and the CLI's exit codes. Every rejected call must
raise the package's own error and leave the store as it was (SQLite rows, both indexes, recall)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from fractions import Fraction

import numpy as np
import pytest

from conftest import index_problems, read_counts
from ipy_memory import InvalidArgument, IpyMemoryError, MemoryEngine, Settings, StorageError
from ipy_memory.tools import call_tool, export_tools


@pytest.fixture
def mem(data_dir):
    with MemoryEngine(data_dir, project="p", session="s") as eng:
        eng.remember("# Setup\nThe GPU box is called orion.\n# Data\nSales live in warehouse.sales_2024.")
        eng.remember("Style: ruff, line length 110.", scope="global")
        eng.remember("This kernel loaded the parquet files.", scope="session")
        yield eng


def state(eng) -> tuple:
    """What a rejected call must leave alone: row counts, the indexes against SQLite, what recall finds."""
    assert index_problems(eng) == []
    found = [h.id for h in eng.recall("orion sales ruff parquet", scope="session+project+global", limit=20)]
    listed = [m.id for m in eng.list_memories(scope="session+project+global")]
    return read_counts(eng.data_dir), found, listed


def rejected(eng, call, match: str | None = None) -> InvalidArgument:
    before = state(eng)
    with pytest.raises(InvalidArgument, match=match) as info:
        call()
    assert state(eng) == before
    return info.value


# ------------------------------------------------------------------------------ 1. numpy numbers
NUMPY_INTS = [np.int64(3), np.int32(3), np.uint8(3)]


@pytest.mark.parametrize("k", NUMPY_INTS)
def test_numpy_integers_are_accepted_where_an_int_is(mem, k):
    r = mem.recall("orion", limit=k, max_tokens=np.int64(500))
    assert 1 <= len(r) <= 3 and r.origin.arguments["limit"] == 3 and type(r.origin.arguments["limit"]) is int
    page = mem.list_memories(scope="session+project+global", limit=k, offset=np.int64(1))
    assert len(page) == 2 and page.offset == 1 and type(page.offset) is int
    assert mem.related(mem.list_memories(limit=1)[0].id, limit=k) is not None


@pytest.mark.parametrize("x", [np.float64(0.9), np.float32(0.9), Fraction(9, 10)])
def test_numpy_floats_are_accepted_where_a_number_is(mem, x):
    r = mem.remember("A note with numpy importance and ttl.", importance=x, ttl=np.float32(3600))
    got = mem.get(r.id)
    assert got.importance == pytest.approx(0.9, abs=1e-6) and type(got.importance) is float
    assert got.expires_at is not None
    assert mem.recall("orion", min_score=np.float32(0.0)).hits


@pytest.mark.parametrize("bad", [np.bool_(True), True, np.float64(2.5), np.array([1, 2]), "3", np.float64("nan")])
def test_numpy_bools_arrays_and_fractions_are_still_refused_as_counts(mem, bad):
    rejected(mem, lambda: mem.recall("orion", limit=bad), "limit")
    rejected(mem, lambda: mem.list_memories(offset=bad), "offset")


@pytest.mark.parametrize("bad", [np.array([1.0, 2.0]), np.bool_(False), np.float64("inf"), [0.5]])
def test_bad_importance_and_ttl_are_refused_without_numpy_errors(mem, bad):
    rejected(mem, lambda: mem.remember("never stored", importance=bad), "importance")
    rejected(mem, lambda: mem.remember("never stored", ttl=bad), "ttl")
    rejected(mem, lambda: mem.remember_exchange("chat", [{"role": "user", "content": "never stored"}], ttl=bad), "ttl")


def test_numpy_numbers_through_the_tools_and_flush(mem):
    r = call_tool("memory_search", {"query": "orion", "limit": np.int64(2), "max_tokens": np.float64(400.0)}, engine=mem)
    assert not r.is_error and len(r.value) <= 2
    r = call_tool("memory_search", {"query": "orion", "limit": np.float64(2.5)}, engine=mem)
    assert r.is_error and "limit must be an integer" in r.text
    assert mem.flush(np.float64(5)) is True
    with pytest.raises(InvalidArgument, match="timeout"):
        mem.flush(np.array([1.0]))


def test_settings_take_numpy_numbers_as_python_ones():
    s = Settings(candidates=np.int64(50), bm25_b=np.float32(0.5), neighbor_weights=[np.float64(0.5)])
    assert type(s.candidates) is int and type(s.bm25_b) is float and s.neighbor_weights == (0.5,)
    assert type(s.neighbor_weights[0]) is float and s.flatten_shared_terms is True
    with pytest.raises(InvalidArgument, match="candidates"):
        Settings(candidates=np.bool_(True))


def test_hash_and_remote_embedders_take_numpy_dims():
    from ipy_memory import get_embedder
    assert get_embedder("hash", dim=np.int64(64)).dim == 64
    e = get_embedder("openai", api_key="k", dim=np.int64(8), timeout=np.float32(3))
    assert e.dim == 8 and type(e.timeout) is float
    with pytest.raises(InvalidArgument, match="dim"):
        get_embedder("openai", api_key="k", dim=10**9)


# ------------------------------------------------------------------------------ 2. project= with a scope without it
@pytest.mark.parametrize("scope", ["global", "session"])
def test_remember_refuses_a_project_its_scope_ignores(mem, scope):
    rejected(mem, lambda: mem.remember("never stored", scope=scope, project="x"),
             rf"project='x' is given, but scope '{scope}' has no 'project' part")
    rejected(mem, lambda: mem.remember_many([{"content": "never stored", "scope": scope, "project": "x"}]), "item 0")
    rejected(mem, lambda: mem.remember_exchange("chat", [{"role": "user", "content": "never stored"}], scope=scope,
                                                project="x"), "project")
    r = call_tool("memory_remember", {"content": "never stored", "scope": scope, "project": "x"}, engine=mem)
    assert r.is_error and "has no 'project' part" in r.text


def test_a_replacement_keeping_a_global_scope_refuses_a_project(mem):
    gid = mem.list_memories(scope="global")[0].id
    rejected(mem, lambda: mem.remember("replaced text", replace=gid, project="x"), "has no 'project' part")
    assert mem.remember("replaced text", replace=gid).stored        # without project=, it is replaced


@pytest.mark.parametrize("scope", ["global", "session", "session+global"])
def test_recall_list_and_dream_refuse_a_project_their_scope_ignores(mem, scope):
    rejected(mem, lambda: mem.recall("orion", scope=scope, project="x"), "has no 'project' part")
    rejected(mem, lambda: mem.list_memories(scope=scope, project="x"), "has no 'project' part")
    rejected(mem, lambda: mem.dream(scope, project="x"), "has no 'project' part")
    r = call_tool("memory_search", {"query": "orion", "scope": scope, "project": "x"}, engine=mem)
    assert r.is_error and "has no 'project' part" in r.text


def test_recall_refuses_a_session_its_scope_ignores(mem):
    rejected(mem, lambda: mem.recall("orion", scope="project+global", session="t"), "session='t' is given")
    assert mem.recall("parquet", scope="session", session="s").hits
    assert mem.recall("orion", scope="project+global", project="p").hits


def test_fire_of_a_global_memory_does_not_give_it_the_current_project(mem):
    assert mem.fire("A global note fired in the background.", scope="global")
    assert mem.flush(30) and mem.background_stats()["errors"] == 0
    assert any("fired in the background" in m.content for m in mem.list_memories(scope="global"))
    assert mem.fire_exchange("chat", [{"role": "user", "content": "a global chat fired in the background"}],
                             scope="global")
    assert mem.flush(30) and mem.background_stats()["errors"] == 0


# ------------------------------------------------------------------------------ 3. callbacks that fail
def test_a_clock_that_raises_is_an_invalid_argument_and_nothing_is_written(data_dir):
    calls = {"n": 0, "fail": False}

    def clock():
        calls["n"] += 1
        if calls["fail"]:
            raise ZeroDivisionError("clock broke")
        return time.time()

    eng = MemoryEngine(data_dir, project="p", session="s", clock=clock)
    eng.remember("first note about orion")
    before = read_counts(data_dir)
    calls["fail"] = True
    with pytest.raises(InvalidArgument, match=r"the clock \(MemoryEngine\(clock=\.\.\.\)\) raised ZeroDivisionError"
                       ) as info:
        eng.remember("second note, never stored")
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    with pytest.raises(InvalidArgument, match="clock"):
        eng.recall("orion")
    assert read_counts(data_dir) == before
    try:
        eng.close()                      # (its last access flush needs the clock: it is closed all the same)
    except InvalidArgument:
        pass
    assert eng._closed
    calls["fail"] = False
    with MemoryEngine(data_dir, project="p", session="s") as again:
        assert [h.text for h in again.recall("orion note")] == ["first note about orion"]


def test_remember_many_from_a_generator_that_raises_stores_nothing(mem):
    def items():
        yield "a first note that must not be stored"
        raise RuntimeError("source broke")
    e = rejected(mem, lambda: mem.remember_many(items()), r"remember_many\(items\), reading an item raised RuntimeError")
    assert isinstance(e.__cause__, RuntimeError)
    assert [r.stored for r in mem.remember_many(x for x in ["one", {"content": "two"}])] == [True, True]


@pytest.mark.parametrize("value", ["now", float("nan"), None, np.array([1.0]), True])
def test_a_clock_returning_no_time_is_refused_before_anything_is_stored(data_dir, value):
    eng = MemoryEngine(data_dir, project="p", clock=lambda: value)
    try:
        with pytest.raises(InvalidArgument, match="must return seconds since the epoch"):
            eng.remember("never stored")
    finally:
        try:
            eng.close()
        except InvalidArgument:
            pass
    assert read_counts(data_dir)["documents"] == 0


@pytest.mark.parametrize("clock", [5, "time.time"])
def test_a_clock_that_is_no_callable_is_refused_at_once(data_dir, clock):
    with pytest.raises(InvalidArgument, match="clock must be a callable"):
        MemoryEngine(data_dir, project="p", clock=clock)


def test_a_numpy_clock_is_fine(data_dir):
    with MemoryEngine(data_dir, project="p", clock=lambda: np.float64(1_700_000_000.5)) as eng:
        assert eng.get(eng.remember("numpy time").id).created_at == 1_700_000_000.5


def test_a_token_counter_that_raises_is_an_invalid_argument_naming_it(mem, data_dir):
    def counter(text):
        raise RuntimeError("tokenizer not loaded")
    before = state(mem)
    mem.settings = Settings(token_counter=counter)
    with pytest.raises(InvalidArgument, match="Settings.token_counter raised RuntimeError: tokenizer not loaded") as info:
        mem.recall("orion", max_tokens=100)
    assert isinstance(info.value.__cause__, RuntimeError)
    r = call_tool("memory_search", {"query": "orion", "max_tokens": 100}, engine=mem)
    assert r.is_error and "token_counter raised" in r.text
    mem.settings = Settings()
    assert state(mem) == before


# ------------------------------------------------------------------------------ 4. scope spelling
@pytest.mark.parametrize("spelled", [" project ", "project\t", "\nproject"])
def test_remember_and_recall_both_take_a_scope_with_spaces_around_it(mem, spelled):
    r = mem.remember("Spaced scope note about zeppelins.", scope=spelled)
    assert mem.get(r.id).scope == "project"
    assert [h.document_id for h in mem.recall("zeppelins", scope=spelled)] == [r.id]
    assert r.id in [m.id for m in mem.list_memories(scope=spelled)]


@pytest.mark.parametrize("spelled", ["Project", "GLOBAL", "project ,global", "projects"])
def test_remember_and_recall_both_refuse_other_spellings(mem, spelled):
    rejected(mem, lambda: mem.remember("never stored", scope=spelled), "lower case")
    rejected(mem, lambda: mem.recall("orion", scope=spelled), "lower case")
    rejected(mem, lambda: mem.list_memories(scope=spelled), "lower case")


def test_a_project_name_with_spaces_around_it_is_that_project(mem, data_dir):
    r = mem.remember("Spaced project note about airships.", project=" churn\t")
    assert mem.get(r.id).space == "project:churn"
    assert [h.document_id for h in mem.recall("airships", project="churn")] == [r.id]
    assert [h.document_id for h in mem.recall("airships", project="  churn ")] == [r.id]
    assert [m.id for m in mem.list_memories(project=" churn")] == [r.id]
    with MemoryEngine(data_dir, project="churn ", session="s") as other:
        assert other.project == "churn" and [h.document_id for h in other.recall("airships")] == [r.id]
    rejected(mem, lambda: mem.recall("orion", project=" \t "), "non-empty")


def test_scope_of_the_wrong_type_is_an_invalid_argument(mem):
    for bad in (np.array(["project"]), ["project"], 1, b"project"):
        rejected(mem, lambda: mem.remember("never stored", scope=bad), "scope")
        rejected(mem, lambda: mem.recall("orion", scope=bad), "scope")


# ------------------------------------------------------------------------------ 5. enumerated settings
@pytest.mark.parametrize("field, value, accepted", [
    ("locale", "fr", "'en', 'zh'"), ("locale", "EN", "'en', 'zh'"), ("locale", None, "'en', 'zh'"),
    ("redact", "ALL", "'exchanges', 'all', 'off'"), ("vector_index", " exact", "'auto', 'hnsw', 'exact'"),
    ("context_mode", ["columns"], "'columns', 'propagate'"),
])
def test_an_unsupported_enumerated_setting_lists_the_accepted_values(field, value, accepted):
    with pytest.raises(InvalidArgument, match=f"Settings.{field} must be one of {accepted}"):
        Settings(**{field: value})
    with pytest.raises(InvalidArgument, match=f"Settings.{field}"):
        Settings().with_(**{field: value})


def test_the_settings_locales_are_the_block_frames():
    from ipy_memory import block
    from ipy_memory.config import LOCALES
    assert set(LOCALES) == set(block.FRAME)
    assert Settings(locale="zh").locale == "zh"


@pytest.mark.parametrize("field, value", [("title_weight", float("inf")), ("sequence_window", float("inf")),
                                          ("hnsw_connectivity", 2**40), ("hnsw_expansion_add", 2**70),
                                          ("hnsw_expansion_search", 2**70)])
def test_infinite_weights_and_graph_sizes_usearch_cannot_build_are_refused(field, value):
    with pytest.raises(InvalidArgument, match=f"Settings.{field}"):
        Settings(**{field: value})


# ------------------------------------------------------------------------------ 6. paths
@pytest.mark.parametrize("path", ["", "   ", "\ud800", "a/\udbff/b"])
def test_empty_and_unencodable_data_dirs_are_invalid_arguments(tmp_path, monkeypatch, path):
    monkeypatch.chdir(tmp_path)                 # ("" would have been the working directory)
    with pytest.raises(InvalidArgument, match="data_dir"):
        MemoryEngine(path, project="p")
    assert list(tmp_path.iterdir()) == []


def test_backup_to_an_empty_or_unencodable_path_is_refused(mem, tmp_path, monkeypatch):
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    for bad in ("", "  ", "\ud800"):
        rejected(mem, lambda: mem.backup(bad), "path")
    assert list((tmp_path / "cwd").iterdir()) == []


def test_a_data_dir_that_is_a_regular_file_is_a_storage_error(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("not a store")
    with pytest.raises(StorageError, match="exists but is not a directory"):
        MemoryEngine(f, project="p")
    assert f.read_text() == "not a store"


# ------------------------------------------------------------------------------ tools
def test_a_huge_bad_enum_value_is_not_echoed_back(mem):
    r = call_tool("memory_search", {"query": "x", "scope": "x" * 1_000_000}, engine=mem)
    assert r.is_error and len(r.text) < 500
    r = call_tool("memory_list", {"scope": "y" * 1_000_000}, engine=mem)
    assert r.is_error and len(r.text) < 500


@pytest.mark.parametrize("kw", [{"strict": "yes"}, {"strict": 1}, {"format": np.array(["openai"])}, {"format": None}])
def test_export_tools_checks_its_options(kw):
    with pytest.raises(InvalidArgument):
        export_tools(**kw)


# ------------------------------------------------------------------------------ CLI
ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}   # (any cwd)


def cli(*args, stdin: bytes | None = None):
    return subprocess.run([sys.executable, "-m", "ipy_memory", *args], capture_output=True, timeout=120,
                          input=stdin, env=ENV)


def _one_line_error(r, code: int, *words: str) -> None:
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == code, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err


def test_cli_data_dir_that_is_a_file_is_a_runtime_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    for cmd in (["store", "hello"], ["recall", "hello"], ["list"], ["stats"]):
        _one_line_error(cli(*cmd, "--data-dir", str(f), "--project", "p"), 1, "not a directory")


def test_cli_empty_data_dir_is_a_usage_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "ipy_memory", "store", "hello", "--data-dir", "", "--project", "p"],
                       capture_output=True, timeout=120, cwd=tmp_path, env=ENV)
    _one_line_error(r, 2, "data_dir is empty")
    assert list(tmp_path.iterdir()) == []


def test_cli_text_that_is_not_utf8_is_a_usage_error(tmp_path):
    d = str(tmp_path / "mem")
    _one_line_error(cli("store", "-", "--data-dir", d, "--project", "p", stdin=b"\xff\xfe not utf-8"), 2,
                    "stdin is not valid UTF-8")
    _one_line_error(cli("store", "ab\udcffc", "--data-dir", d, "--project", "p"), 2, "TEXT is not valid UTF-8")
    assert cli("store", "-", "--data-dir", d, "--project", "p", stdin="# Ünïcode\nfine".encode()).returncode == 0


def test_cli_project_is_the_engines_so_a_global_scope_works_with_it(tmp_path):
    d = str(tmp_path / "mem")
    assert cli("store", "a global note", "--scope", "global", "--data-dir", d, "--project", "p").returncode == 0
    r = cli("recall", "note", "--scope", "global", "--data-dir", d, "--project", "p")
    assert r.returncode == 0 and b"a global note" in r.stdout


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_cli_output_to_a_full_device_is_one_line(tmp_path):
    d = str(tmp_path / "mem")
    assert cli("store", "hello", "--data-dir", d, "--project", "p").returncode == 0
    with open("/dev/full", "wb") as full:
        r = subprocess.run([sys.executable, "-m", "ipy_memory", "stats", "--data-dir", d, "--json"],
                           stdout=full, stderr=subprocess.PIPE, timeout=120, env=ENV)
    _one_line_error(r, 1, "cannot write the output")


def test_cli_closed_pipe_is_no_traceback(tmp_path):
    d = str(tmp_path / "mem")
    assert cli("store", "hello " * 50, "--data-dir", d, "--project", "p").returncode == 0
    p = subprocess.Popen([sys.executable, "-m", "ipy_memory", "stats", "--data-dir", d, "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    p.stdout.close()                         # the reader is gone before anything is written
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 1 and "Traceback" not in err, err


# ------------------------------------------------------------------------------ every error is ours
def test_nothing_but_the_packages_errors_across_a_sweep_of_bad_values(mem, tmp_path, monkeypatch):
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")         # (a backup to a bad name that were accepted would land here)
    bad_values = [None, True, -1, 2**64, 1.5, float("nan"), "", " ", "\x00", "\ud800", b"x", [], {}, object(),
                  np.int64(-1), np.array([1, 2]), np.float32("inf")]
    calls = [lambda x: mem.recall("orion", limit=x), lambda x: mem.recall("orion", max_tokens=x),
             lambda x: mem.recall("orion", min_score=x), lambda x: mem.recall("orion", path=x),
             lambda x: mem.recall("orion", project=x), lambda x: mem.recall("orion", session=x),
             lambda x: mem.recall("orion", scope=x), lambda x: mem.list_memories(limit=x),
             lambda x: mem.list_memories(offset=x), lambda x: mem.list_memories(scope=x),
             lambda x: mem.remember("never stored", scope=x), lambda x: mem.remember("never stored", ttl=x),
             lambda x: mem.remember("never stored", importance=x), lambda x: mem.remember("never stored", metadata=x),
             lambda x: mem.remember("never stored", replace=x), lambda x: mem.remember("never stored", force=x),
             lambda x: mem.get(x), lambda x: mem.forget(x), lambda x: mem.related(x),
             lambda x: mem.rotate(limit_per_hop=x), lambda x: mem.dream(x), lambda x: mem.compact(vacuum=x),
             lambda x: mem.backup(x), lambda x: mem.flush(x)]
    leaked = []
    for call in calls:
        for x in bad_values:
            try:
                call(x)
            except IpyMemoryError:
                pass
            except Exception as exc:          # noqa: BLE001 - what the test looks for
                leaked.append(f"{type(exc).__name__}: {exc}")
    assert leaked == []
    assert index_problems(mem) == []         # (the values that were fine wrote: the indexes still agree)
    assert list((tmp_path / "cwd").iterdir()) == []
