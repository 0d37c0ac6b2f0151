"""Shared test options and fixtures (kept small and generic).

* ``--heavy``: also run the tests marked ``@pytest.mark.heavy`` (full-size stress variants).
* ``data_dir``: a fresh, not yet existing data dir under ``tmp_path``.
* ``engine``: a MemoryEngine on ``data_dir`` (project "test", session "test"), closed afterwards.
* ``db_counts``: ``db_counts(data_dir) -> {"documents", "nodes", "vectors", "changes"}`` read
  straight from SQLite (no engine), for "the store is unchanged" checks.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from ipy_memory import MemoryEngine
from ipy_memory.embeddings.hashing import HashEmbedder


def pytest_addoption(parser):
    parser.addoption("--heavy", action="store_true", default=False,
                     help="also run the full-size stress tests marked 'heavy'")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--heavy"):
        return
    skip = pytest.mark.skip(reason="full-size stress variant: run with --heavy")
    for item in items:
        if "heavy" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def heavy(request) -> bool:
    """True when pytest was run with --heavy."""
    return bool(request.config.getoption("--heavy"))


@pytest.fixture
def data_dir(tmp_path) -> Path:
    return tmp_path / "mem"


@pytest.fixture
def engine(data_dir):
    from ipy_memory import MemoryEngine
    eng = MemoryEngine(data_dir, project="test", session="test")
    try:
        yield eng
    finally:
        eng.close()


def read_counts(path) -> dict[str, int]:
    """Row counts of the main tables of a data dir (or of a database file)."""
    path = Path(path)
    db_file = path / "memory.sqlite3" if path.is_dir() else path
    con = sqlite3.connect(f"file:{db_file}?mode=ro", uri=True)
    try:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("documents", "nodes", "vectors", "changes")}
    finally:
        con.close()


@pytest.fixture
def db_counts():
    return read_counts


# usearch's multi-threaded Index.add() can leave a few nodes that are stored but unreachable by search
# (unum-cloud/USearch#735); VectorShard.build_graph therefore adds single-threaded, and every key
# must be found (test_corrupt.py::test_graph_is_built_without_concurrent_inserts).
GRAPH_MISS_TOLERANCE = 0.0


def index_problems(eng, *, probe: bool = True, load: bool = True,
                   graph_miss_tolerance: float = GRAPH_MISS_TOLERANCE) -> list[str]:
    """Differences between an engine's in-memory indexes and SQLite, as readable lines.

    For every space with nodes in SQLite (and every space the engine has loaded): the lexical shard's
    live keys must equal the space's node keys; the vector shard must hold as many vectors, each
    SQLite key's vector (``vec.get``) must equal the stored one, and (with ``probe``) every node's
    vector must find its own key among the top 5 of ``vec.search`` (or 5 exact copies of itself).
    Keys forgotten in SQLite are therefore absent from both shards. ``load=False`` checks only the
    spaces already loaded (what a long-lived engine holds). ``graph_miss_tolerance``: share of
    self-search misses accepted in an HNSW-backed shard (see GRAPH_MISS_TOLERANCE).
    """
    import numpy as np
    from ipy_memory.store import decode_vecs

    rows = eng.store.query("SELECT d.space, n.key, v.vec FROM nodes n JOIN documents d ON d.id = n.document_id "
                           "LEFT JOIN vectors v ON v.node_key = n.key")
    by_space: dict[str, dict[int, bytes | None]] = {}
    for space, key, blob in rows:
        by_space.setdefault(space, {})[key] = blob
    problems = []
    spaces = set(eng.shards.loaded) | (set(by_space) if load else set())
    for space in sorted(spaces):
        want = by_space.get(space, {})
        missing_vec = [k for k, b in want.items() if b is None]
        if missing_vec:
            problems.append(f"{space}: nodes without a vector row: {missing_vec[:10]}")
        shard = eng.shards.get(space)
        lex = {k for k, s in shard.lex.slot_of.items() if shard.lex.alive.view[s]}
        extra, lost = sorted(lex - set(want)), sorted(set(want) - lex)
        if extra or lost:
            problems.append(f"{space}: lexical shard has {len(extra)} keys not in SQLite {extra[:10]} "
                            f"and lacks {len(lost)} SQLite keys {lost[:10]}")
        if len(shard.lex) != len(want) or len(shard.vec) != len(want):
            problems.append(f"{space}: len(lex)={len(shard.lex)} len(vec)={len(shard.vec)} "
                            f"SQLite nodes={len(want)}")
        keys = [k for k, b in want.items() if b is not None]
        if not keys:
            continue
        stored = decode_vecs([want[k] for k in keys], eng.embedder.dim)
        held = np.asarray(shard.vec.get(keys), np.float32)
        wrong = [k for k, a, b in zip(keys, stored, held) if not np.allclose(a, b, atol=2e-3)]
        if wrong:
            problems.append(f"{space}: vector shard lacks or holds other vectors for {len(wrong)} keys {wrong[:10]}")
        if probe:
            unfound = []
            for k, q in zip(keys, stored):
                n = float(np.linalg.norm(q))
                if n == 0:
                    continue
                found, sims = shard.vec.search(q / n, 5)
                # found, or crowded out of the top 5 by exact copies of its vector (identical texts)
                if k not in {int(x) for x in found} and not (len(sims) == 5 and float(sims[-1]) >= 0.999):
                    unfound.append(k)
            graph = getattr(shard.vec, "graph", None) is not None
            if unfound and (not graph or len(unfound) > graph_miss_tolerance * len(keys)):
                problems.append(f"{space}: {len(unfound)} of {len(keys)} node keys not found by vec.search of "
                                f"their own vector{' (HNSW graph)' if graph else ''}: {unfound[:10]}")
    return problems


@pytest.fixture
def check_indexes():
    """``check_indexes(engine, probe=True, load=True)`` -> list of problems (empty when consistent)."""
    return index_problems


T0 = 1_700_000_000.0      # a fixed "now" for tests with an injectable clock


class Recording(HashEmbedder):
    """The offline embedder, remembering every text it is asked to embed. `semantic=True` makes it a
    stand-in for a real model (sections embedded with their neighbours' text, query expansion)."""

    def __init__(self, semantic: bool = True, dim: int = 64):
        super().__init__(dim)
        self.semantic = semantic
        if semantic:
            self.name = f"recording-{dim}"
        self.seen: list[str] = []

    def _embed(self, texts):
        self.seen += texts
        return super()._embed(texts)


@pytest.fixture
def clock():
    """A mutable clock: pass `clock=lambda: clock[0]` to MemoryEngine, move time with `clock[0] += ...`."""
    return [T0]


@pytest.fixture
def local_embed_server():
    """``start(**attrs)`` -> a running tests/embed_server.py server (dim 8) with those attributes set
    (``default="401"``, ``slow_seconds=1.0``, ...); every server started is stopped after the test."""
    from embed_server import EmbedServer
    servers = []

    def start(**attrs):
        server = EmbedServer(dim=8).start()
        for name, value in attrs.items():
            setattr(server, name, value)
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def read_only_dir(tmp_path):
    """A store in a directory nobody may write: a read-only bind mount (root), else chmod 0555."""
    src, ro = tmp_path / "src", tmp_path / "ro"
    with MemoryEngine(src, project="p") as mem:
        mem.remember("# Notes\n\nthe read-only store still answers")
    if os.geteuid() != 0:
        os.chmod(src, 0o555)
        yield src
        os.chmod(src, 0o755)
        return
    ro.mkdir()
    if subprocess.run(["mount", "--bind", "-o", "ro", str(src), str(ro)], capture_output=True).returncode:
        pytest.skip("running as root without permission to mount: no way to make a read-only directory")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True, capture_output=True)
        yield ro
    finally:
        subprocess.run(["umount", "-l", str(ro)], check=True)   # (lazy: a leaked handle must not keep it)
