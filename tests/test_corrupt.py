"""Corrupt or missing files.

Index files (HNSW graph `.usearch`, lexical snapshot `.lex.npz`) are caches: deleted, truncated,
random, of another dimension, from another store or stale, the engine opens, rebuilds, and
answers exactly as before. A damaged database is never silently used: opening or the first call
that touches the damage raises StorageError naming the file. backup() round-trips, also while
another engine writes, and a restored backup is served correctly despite newer index files.
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from ipy_memory import MemoryEngine, Settings, StorageError
from ipy_memory.embeddings import HashEmbedder
from ipy_memory.vectors import VectorShard

# exact_threshold=100, vector_index="hnsw" and vector_weight_hash > 0: spaces above 100 vectors get an HNSW graph even with
# the offline hashing embedder; with the snapshot threshold lowered to 300 (see `small_snapshots`), the
# 600-memory space also gets a lexical snapshot on close.
S = Settings(exact_threshold=100, vector_weight_hash=0.3, vector_index="hnsw")
N = 600
SNAPSHOT_MIN = 300     # lexical snapshots are written for spaces this large (the engine's default is 2,000)
T0 = 1_750_000_000.0


def clock() -> float:
    """A fixed clock: recency priors (and so scores) are the same in every engine of this module."""
    return T0
QUERIES = ["topic3 item20", "memory about topic7", "zq500", "item42 topic9 number", "nothing matches xyzzy",
           "topic11", "global fact 7", "memory number 555"]


def texts(n: int, seed: int = 0, template: str = "memory number {i} about topic{t} and item{i} zq{i}: ") -> list[str]:
    rng = random.Random(seed)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(4, 9))) for _ in range(3000)]
    return [template.format(i=i, t=i % 17) + " ".join(rng.choice(vocab) for _ in range(8)) for i in range(n)]


def answers(data_dir: Path, **kw) -> list[list[tuple[str, float]]]:
    with MemoryEngine(data_dir, project="p", session="s", settings=S, clock=clock, **kw) as eng:
        return [[(h.id, round(h.score, 5)) for h in eng.recall(q, limit=10)] for q in QUERIES]


@pytest.fixture(scope="module", autouse=True)
def small_snapshots():
    """Snapshot smaller spaces than the engine does by default, so the tests need fewer memories."""
    from ipy_memory import _shards
    if not hasattr(_shards, "SNAPSHOT_MIN_NODES"):
        yield
        return
    old, _shards.SNAPSHOT_MIN_NODES = _shards.SNAPSHOT_MIN_NODES, SNAPSHOT_MIN
    try:
        yield
    finally:
        _shards.SNAPSHOT_MIN_NODES = old


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A data dir with one large space (graph + lexical snapshot) and one small exact one, closed."""
    d = tmp_path_factory.mktemp("corrupt") / "base"
    with MemoryEngine(d, project="p", session="s", settings=S, clock=clock) as eng:
        eng.remember_many([{"content": t, "force": True} for t in texts(N)])
        eng.remember_many([{"content": f"global fact {i}: the answer is {i * 7}", "scope": "global", "force": True}
                           for i in range(30)])
        eng.recall("warm up the vectors")
    files = sorted(p.name for p in (d / "index").iterdir())
    assert all(any(f.endswith(s) for f in files) for s in (".usearch", ".lex.npz", ".vec.npz")), files
    return d, answers(d)


def copy(base_dir: Path, tmp_path: Path) -> Path:
    d = tmp_path / "mem"
    shutil.copytree(base_dir, d)
    return d


def other_dim_graph(path: Path) -> None:
    from usearch.index import Index
    g = Index(ndim=64, metric="cos", dtype="f16")
    g.add(np.arange(1, 300), np.random.default_rng(0).standard_normal((299, 64)).astype(np.float32))
    g.save(str(path))


@pytest.fixture(scope="module")
def foreign(tmp_path_factory):
    """Index files of another store (another store_id, other keys), built on first use."""
    made: dict[str, Path] = {}

    def get() -> Path:
        if "dir" not in made:
            other = made["dir"] = tmp_path_factory.mktemp("foreign") / "mem"
            with MemoryEngine(other, project="p", session="s", settings=S, clock=clock) as eng:
                eng.remember_many([{"content": t, "force": True} for t in texts(N, seed=9)[::-1]])
                eng.recall("load the indexes")
        return made["dir"]
    return get


def foreign_snapshot(path: Path, foreign) -> None:
    src = next((foreign() / "index").glob("*" + "".join(path.suffixes)))
    shutil.copyfile(src, path)


DAMAGE = {
    "deleted": lambda p, foreign: p.unlink(),
    "truncated-half": lambda p, foreign: os.truncate(p, p.stat().st_size // 2),
    "truncated-empty": lambda p, foreign: os.truncate(p, 0),
    "random-bytes": lambda p, foreign: p.write_bytes(np.random.default_rng(1).bytes(p.stat().st_size)),
    "random-tail": lambda p, foreign: _overwrite(p, p.stat().st_size // 2, 4096),
    "foreign-store": lambda p, foreign: foreign_snapshot(p, foreign),
    "other-dimension": lambda p, foreign: other_dim_graph(p),                 # .usearch only
    "other-format": lambda p, foreign: np.savez(open(p, "wb"), seq=np.array(1)),  # snapshots only
}
CASES = [pytest.param(suffix, kind, marks=[])
         for suffix in (".usearch", ".lex.npz", ".vec.npz") for kind in DAMAGE
         if not (kind == "other-dimension" and suffix != ".usearch") and not (kind == "other-format" and suffix == ".usearch")]


def _overwrite(p: Path, at: int, n: int) -> None:
    with open(p, "r+b") as f:
        f.seek(at)
        f.write(np.random.default_rng(2).bytes(n))


@pytest.mark.parametrize("suffix,kind", CASES)
def test_damaged_index_file_is_rebuilt(base, foreign, tmp_path, kind, suffix, check_indexes):
    base_dir, before = base
    d = copy(base_dir, tmp_path)
    target = next((d / "index").glob("*" + suffix))
    DAMAGE[kind](target, foreign)
    with MemoryEngine(d, project="p", session="s", settings=S, clock=clock) as eng:   # opens, rebuilds
        assert [[(h.id, round(h.score, 5)) for h in eng.recall(q, limit=10)] for q in QUERIES] == before
        assert not check_indexes(eng, probe=False)
        assert eng.stats()["documents"] == N + 30
    assert answers(d) == before                       # and the file saved on close is good


def test_index_dir_deleted(base, tmp_path, check_indexes):
    base_dir, before = base
    d = copy(base_dir, tmp_path)
    shutil.rmtree(d / "index")
    assert answers(d) == before
    with MemoryEngine(d, project="p", session="s", settings=S, clock=clock) as eng:
        assert not check_indexes(eng)


def test_stale_index_files_are_reconciled(base, tmp_path, check_indexes):
    """Index files older than the database (another kernel wrote, then crashed before saving)."""
    base_dir, _ = base
    d = copy(base_dir, tmp_path)
    old = {p.name: p.read_bytes() for p in (d / "index").iterdir()}
    with MemoryEngine(d, project="p", session="s2", settings=S, clock=clock) as eng:
        added = eng.remember_many([{"content": t, "force": True} for t in texts(120, seed=5)])
        for m in eng.list_memories(scope="project", limit=40, offset=500):
            eng.forget(m.id)
    for name, data in old.items():                    # as if the newer snapshots were never written
        (d / "index" / name).write_bytes(data)
    replayed = answers(d)
    shutil.rmtree(d / "index")
    rebuilt = answers(d)
    for a, b in zip(replayed, rebuilt):               # the same as a rebuild from SQLite alone (up to the
        assert [i for i, _ in a[:3]] == [i for i, _ in b[:3]]   # idf of tombstoned postings, which
        assert np.allclose([x for _, x in a[:3]], [x for _, x in b[:3]], rtol=1e-2)   # compact() drops)
    for name, data in old.items():
        (d / "index" / name).write_bytes(data)
    with MemoryEngine(d, project="p", session="s", settings=S, clock=clock) as eng:
        assert not check_indexes(eng)
        for r in added[:20]:
            assert eng.get(r.id).id == r.id


def test_index_path_is_a_file(base, tmp_path):
    base_dir, before = base
    d = copy(base_dir, tmp_path)
    shutil.rmtree(d / "index")
    (d / "index").write_text("not a directory")
    eng = MemoryEngine(d, project="p", session="s", settings=S, clock=clock)
    try:
        assert [[(h.id, round(h.score, 5)) for h in eng.recall(q, limit=10)] for q in QUERIES] == before
    finally:
        try:
            eng.close()
        except StorageError:
            pass                                      # documented; a raw OSError is not


def test_graph_file_of_other_dimension_store(tmp_path, check_indexes):
    """A store re-embedded with another dimension never adopts the old graph file."""
    d = tmp_path / "mem"
    with MemoryEngine(d, project="p", settings=S) as eng:
        eng.remember_many([{"content": t, "force": True} for t in texts(300)])
        eng.recall("x")
    graph = next((d / "index").glob("*.usearch"))
    saved = graph.read_bytes()
    with MemoryEngine(d, project="p", settings=S) as eng:
        if not hasattr(eng, "reembed"):
            pytest.skip("MemoryEngine.reembed does not exist")
        eng.reembed(HashEmbedder(dim=128), progress=False)
    graph.write_bytes(saved)                          # a 384-d graph beside a 128-d store
    with MemoryEngine(d, project="p", settings=S, embedder=HashEmbedder(dim=128)) as eng:
        assert eng.recall("topic3 item20").hits[0].id.startswith("m-")
        assert not check_indexes(eng)


def test_every_graph_node_is_found_by_its_own_vector():
    """A multi-threaded add can strand nodes (usearch #735: 1-7 of 3,000 hash vectors per build on 2
    cores here, timing-dependent), and so can HNSW pruning among near-identical vectors; a later build
    can cut an older node's last way in (2 runs of 60 under load, before builds re-checked older
    nodes: _graphcheck). Whatever the adds did, every node must be found by its own vector (stranded
    ones are scanned exactly)."""
    vecs = HashEmbedder().embed(texts(1500, seed=3) + ["the same text"] * 40)   # plus 40 identical vectors
    keys = np.arange(1, len(vecs) + 1)
    one_build = VectorShard(384, Settings(exact_threshold=100))
    one_build.add(keys, vecs)                                    # one 1,540-row build
    batches = VectorShard(384, Settings(exact_threshold=100, hnsw_tail=250))
    for i in range(0, len(vecs), 190):                           # many incremental builds
        batches.add(keys[i:i + 190], vecs[i:i + 190])
    for shard in (one_build, batches):
        assert shard.graph is not None and len(shard) == len(vecs)
        for k, v in zip(keys.tolist(), vecs):
            found, sims = shard.search(v, 5)
            assert k in found.tolist() or (len(sims) == 5 and sims[-1] >= 0.999), k


# ------------------------------------------------------------------------------------------ database damage
def _db(d: Path) -> Path:
    return d / "memory.sqlite3"


def restore(backup: Path, d: Path) -> None:
    """Put a backup file in place of the data dir's database (its WAL and shared memory removed)."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{_db(d)}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(backup, _db(d))


def _check_storage_error(exc: BaseException, d: Path) -> None:
    assert isinstance(exc, StorageError) and isinstance(exc, OSError), repr(exc)
    assert str(_db(d)) in str(exc), f"the message should name the file: {exc}"
    assert "backup" in str(exc) and ("recover" in str(exc) or "move it aside" in str(exc)), \
        f"the message should say how to recover: {exc}"


@pytest.mark.parametrize("damage", ["header", "truncated-half", "truncated-100", "not-a-file"])
def test_damaged_database_fails_clearly(base, tmp_path, damage):
    base_dir, _ = base
    d = copy(base_dir, tmp_path)
    if damage == "header":
        _overwrite(_db(d), 0, 100)
    elif damage == "truncated-half":
        os.truncate(_db(d), _db(d).stat().st_size // 2)
    elif damage == "truncated-100":
        os.truncate(_db(d), 100)
    else:
        _db(d).unlink()
        _db(d).mkdir()
    size = _db(d).stat().st_size if _db(d).is_file() else None
    with pytest.raises(StorageError) as info:
        with MemoryEngine(d, project="p", settings=S) as eng:
            eng.recall("topic3")
            eng.list_memories(limit=200, offset=N - 100)
    _check_storage_error(info.value, d)
    if size is not None:
        assert _db(d).stat().st_size == size          # the damaged file is left as it was, for recovery


@pytest.fixture(scope="module")
def page_damage(base, tmp_path_factory):
    """Overwrite the root page of each table / index in turn with random bytes and run the API over it.

    Returns [(table, steps done, exception or None, data dir)]."""
    base_dir, _ = base
    tmp = tmp_path_factory.mktemp("pages")
    con = sqlite3.connect(_db(base_dir))
    roots = con.execute("SELECT name, rootpage FROM sqlite_master WHERE rootpage > 1 ORDER BY rootpage").fetchall()
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    runs = []
    for name, page in roots:
        d = tmp / f"page-{page}"
        shutil.copytree(base_dir, d)
        _overwrite(_db(d), (page - 1) * page_size, page_size)
        steps, error, silent = [], None, None
        try:
            with MemoryEngine(d, project="p", session="s", settings=S, clock=clock) as eng:
                steps.append("open")
                eng.recall("topic3 item20")
                steps.append("recall")
                listed = []
                for off in range(0, N + 100, 200):
                    listed += [m.id for m in eng.list_memories(scope="project", limit=200, offset=off)]
                steps.append("list")
                if len(set(listed)) != N:
                    silent = f"list_memories silently returned {len(set(listed))} of {N}"
                eng.stats()
                steps.append("stats")
                eng.remember("a memory written after the damage")
                steps.append("remember")
                eng.forget(listed[0])
                steps.append("forget")
        except BaseException as exc:           # noqa: BLE001 - classified by the tests
            error = exc
        runs.append((name, steps, error, silent, d))
    return runs


def test_damaged_pages_never_lose_data_silently(page_damage):
    """Every table's root page destroyed in turn: each call works with all data, or raises."""
    assert len(page_damage) >= 10
    silent = [f"{name}: {why}" for name, steps, e, why, d in page_damage if why]
    assert not silent, silent


def test_damaged_pages_raise_only_storage_error(page_damage):
    bad = [f"{name}: after {steps}: {type(e).__module__}.{type(e).__name__}: {e}"
           for name, steps, e, why, d in page_damage if e is not None and not isinstance(e, StorageError)]
    assert not bad, "\n".join(bad)


def test_damaged_pages_errors_say_how_to_recover(page_damage):
    bad = []
    for name, steps, e, why, d in page_damage:
        if isinstance(e, StorageError):
            try:
                _check_storage_error(e, d)
            except AssertionError as problem:
                bad.append(f"{name} after {steps}: {problem}")
    assert not bad, "\n".join(bad)


def test_garbage_wal_file_is_ignored(base, tmp_path):
    """A WAL file of random bytes fails its checksums: SQLite ignores it and nothing is lost."""
    base_dir, before = base
    d = copy(base_dir, tmp_path)
    (d / "memory.sqlite3-wal").write_bytes(np.random.default_rng(3).bytes(200_000))
    assert answers(d) == before


# ------------------------------------------------------------------------------------------ backup
def test_backup_round_trip(base, tmp_path, check_indexes):
    base_dir, before = base
    d = copy(base_dir, tmp_path)
    out = tmp_path / "backups" / "mem.sqlite3"
    out.parent.mkdir()
    with MemoryEngine(d, project="p", session="s", settings=S, clock=clock) as eng:
        info = eng.backup(out)
        assert info["path"] == str(out) and info["bytes"] == out.stat().st_size
    assert oct(out.stat().st_mode & 0o777) == oct(0o600)
    restored = tmp_path / "restored"
    restored.mkdir()
    shutil.copyfile(out, restored / "memory.sqlite3")
    assert answers(restored) == before
    with MemoryEngine(restored, project="p", session="s", settings=S, clock=clock) as eng:
        assert eng.stats()["documents"] == N + 30
        assert not check_indexes(eng)


def test_backup_while_another_engine_writes(base, tmp_path):
    """The online backup is a consistent snapshot: every document has its nodes and vectors."""
    base_dir, _ = base
    d = copy(base_dir, tmp_path)
    stop = threading.Event()
    errors = []

    def writer():
        try:
            with MemoryEngine(d, project="p", session="w", settings=S, clock=clock) as w:
                i = 0
                while not stop.is_set():
                    w.remember_many([{"content": t, "force": True} for t in texts(5, seed=1000 + i)])
                    i += 1
        except BaseException as exc:   # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=writer)
    t.start()
    try:
        with MemoryEngine(d, project="p", session="s", settings=S, clock=clock) as eng:
            outs = []
            for i in range(3):
                out = tmp_path / f"b{i}.sqlite3"
                eng.backup(out)
                outs.append(out)
    finally:
        stop.set()
        t.join(60)
    assert not errors, errors
    for out in outs:
        con = sqlite3.connect(out)
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert con.execute("SELECT count(*) FROM documents d WHERE NOT EXISTS "
                           "(SELECT 1 FROM nodes n WHERE n.document_id = d.id)").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM nodes").fetchone()[0] == \
            con.execute("SELECT count(*) FROM vectors").fetchone()[0]
        con.close()


def test_restored_backup_serves_the_backup(base, tmp_path, check_indexes):
    """Restoring a backup over a data dir with newer index files: answers are the backup's."""
    base_dir, before = base
    d = copy(base_dir, tmp_path)
    out = tmp_path / "older.sqlite3"
    with MemoryEngine(d, project="p", session="s", settings=S, clock=clock) as eng:
        eng.backup(out)
        eng.recall("load the vectors")
        eng.remember_many([{"content": t, "force": True} for t in texts(300, seed=11)])
        for m in eng.list_memories(scope="project", limit=50, offset=100):
            eng.forget(m.id)
    restore(out, d)
    assert answers(d) == before
    with MemoryEngine(d, project="p", session="s", settings=S, clock=clock) as eng:
        assert not check_indexes(eng, probe=False)


def test_restored_backup_beside_newer_index_files(base, tmp_path, check_indexes):
    """Restore an older backup into a data dir whose index files were saved later, with keys the backup
    never had and which new writes then reuse for other texts: the store must serve the new texts."""
    base_dir, _ = base
    d = copy(base_dir, tmp_path)
    out = tmp_path / "older.sqlite3"
    with MemoryEngine(d, project="p", session="s", settings=S, clock=clock) as eng:
        eng.backup(out)
        eng.recall("load the vectors first, so the graph saved on close holds the next keys")
        eng.remember_many([{"content": t, "force": True} for t in texts(300, seed=11)])
    restore(out, d)
    with MemoryEngine(d, project="p", session="s", settings=S, clock=clock) as eng:
        fresh = eng.remember_many([{"content": t, "force": True}
                                   for t in texts(300, seed=12, template="unrelated {t} text: ")])
        assert eng.stats()["documents"] == N + 30 + 300
        assert not check_indexes(eng)
        for r in fresh[::30]:
            vec = eng.embedder.embed([eng.get(r.id).content])[0]
            keys, _ = eng.shards.get("project:p").vec.search(vec, 5)
            node = eng.store.query("SELECT key FROM nodes WHERE document_id = ?", (r.id,))[0][0]
            assert node in keys.tolist()


def test_cli_backup(base, tmp_path):
    base_dir, before = base
    d = copy(base_dir, tmp_path)
    out = tmp_path / "cli-backup.sqlite3"
    proc = subprocess.run([sys.executable, "-m", "ipy_memory", "backup", "--data-dir", str(d), str(out)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    if proc.returncode != 0 and "invalid choice" in proc.stderr:
        pytest.skip("`python -m ipy_memory backup` is not available yet")
    assert proc.returncode == 0, proc.stderr
    restored = tmp_path / "restored"
    restored.mkdir()
    shutil.copyfile(out, restored / "memory.sqlite3")
    assert answers(restored) == before
    # and a clear failure (exit 1, one line, no traceback) for a damaged store
    _overwrite(_db(d), 0, 100)
    proc = subprocess.run([sys.executable, "-m", "ipy_memory", "backup", "--data-dir", str(d), str(out)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and str(_db(d)) in proc.stderr + proc.stdout
