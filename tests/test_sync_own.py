"""An engine's own writes reach its indexes without being read back from SQLite (Shards._apply_own),
and leave them exactly as the read-back path does; anything another engine wrote meanwhile, or a
replacement, sends the batch through the read-back path. A large batch's sections are inserted by a
second thread while the indexes take them (BatchWriter.flush_beside_indexing): the same rows, the
same indexes, and nothing left in either when the insert, the indexing or the commit fails."""

import contextlib
import sqlite3
import time

import numpy as np
import pytest

from ipy_memory import Embedder, EmbeddingError, MemoryEngine, Settings, StorageError
from ipy_memory import _shards, _writer
from ipy_memory.embeddings.hashing import HashEmbedder

HYBRID = Settings().with_(vector_weight_hash=0.5)      # the vectors are loaded (and kept up to date) too


def batches():
    rng = np.random.default_rng(3)
    words = "otter seal clam harbour kelp tide boat net crab gull storm pier".split()
    for b in range(4):
        items = []
        for i in range(40):
            text = " ".join(rng.choice(words, 6))
            if i % 7 == 0:
                text = f"# Notes {b}-{i}\n{text}\n## Tides\nkelp at {i}\n## Boats\nnet {b}"
            items.append({"content": f"{text} #{b}-{i}", "force": True, "ttl": 3600.0 if i % 5 == 0 else None,
                          "metadata": {"i": i}})
        yield items


def index_state(mem):
    shard = mem.shards.get("project:p")
    lex = {k: np.asarray(v) for k, v in shard.lex.snapshot().items()}
    vec = {k: np.asarray(v) for k, v in shard.vec.arrays().items()}
    return lex, vec


def same(a, b):
    for part_a, part_b in zip(a, b):
        assert part_a.keys() == part_b.keys()
        for k in part_a:
            assert np.array_equal(part_a[k], part_b[k]), k


@pytest.fixture
def spy(monkeypatch):
    used = []
    real = _shards.Shards._apply_own
    monkeypatch.setattr(_shards.Shards, "_apply_own", lambda self, *a: used.append(self) or real(self, *a))
    return used


@pytest.fixture(params=["serial", "overlapped"])
def inserts(request, monkeypatch):
    """Which path batches take (every batch overlaps with a 1-section minimum); lists the overlapped ones."""
    class Used(list):
        mode = request.param
    used, real = Used(), _writer._insert_sections
    monkeypatch.setattr(_writer, "_insert_sections", lambda *a: used.append(1) or real(*a))
    monkeypatch.setattr(_writer, "OVERLAP_MIN_NODES", 1 if request.param == "overlapped" else 10**9)
    return used


def rebuilt(path, clock, hot="hot"):
    """The same store's indexes rebuilt from SQLite (no snapshot)."""
    for f in (path / "index").glob("*"):
        f.unlink()
    mem = MemoryEngine(path, project="p", session="s1", settings=HYBRID, clock=lambda: clock[0])
    mem.shards.hot_tier = lambda: hot
    mem.recall("kelp")
    return mem


@pytest.mark.parametrize("hot", ["hot", "fresh"])     # "fresh": new documents keep int8 vectors
def test_own_writes_index_exactly_as_reading_them_back(tmp_path, spy, clock, hot, inserts):
    with MemoryEngine(tmp_path, project="p", session="s1", settings=HYBRID, clock=lambda: clock[0]) as mem:
        mem.shards.hot_tier = lambda: hot
        mem.recall("kelp")                            # indexes loaded: writes keep them up to date
        for items in batches():
            mem.remember_many(items)
            clock[0] += 5
        mem.remember("a single note about kelp and gulls")   # the duplicate check's path
        assert spy == [mem.shards] * 5
        assert len(inserts) == (5 if inserts.mode == "overlapped" else 0)
        state = index_state(mem)
        hits = [h.id for h in mem.recall("kelp tide net")]
    assert len(state[1]["low_keys" if hot == "fresh" else "hot_keys"]) > 150
    other = rebuilt(tmp_path, clock, hot)
    try:
        same(state, index_state(other))
        assert [h.id for h in other.recall("kelp tide net")] == hits
    finally:
        other.close()


def test_writes_of_another_engine_or_a_replacement_are_read_back(tmp_path, spy, clock, inserts):
    with MemoryEngine(tmp_path, project="p", session="s1", settings=HYBRID, clock=lambda: clock[0]) as mem, \
            MemoryEngine(tmp_path, project="p", session="s2", clock=lambda: clock[0]) as writer:
        mem.recall("kelp")
        first = mem.remember("the harbour pier lamp is green", force=True).id
        assert spy == [mem.shards]
        real_write = mem.store.write

        @contextlib.contextmanager
        def after_the_other(**how):      # the other engine commits between this one's sync and its write
            writer.remember("the other kernel wrote about kelp", force=True)
            with real_write(**how) as db:
                yield db

        mem.store.write = after_the_other
        mem.remember("the boat net is blue", force=True)
        mem.store.write = real_write
        assert spy.count(mem.shards) == 1                         # both read back
        assert len(inserts) == (2 if inserts.mode == "overlapped" else 0)    # the first one's and the other's
        mem.remember("the harbour pier lamp is red", replace=first)
        assert spy.count(mem.shards) == 1                         # a replacement deletes nodes
        assert len(inserts) == (2 if inserts.mode == "overlapped" else 0)
        texts = {h.text for h in mem.recall("kelp boat net harbour pier lamp", limit=10)}
        assert {"the other kernel wrote about kelp", "the boat net is blue", "the harbour pier lamp is red"} <= texts
        assert "the harbour pier lamp is green" not in texts
        state = index_state(mem)
    other = rebuilt(tmp_path, clock)
    try:
        lex, _ = index_state(other)
        assert sorted(lex["keys"][lex["alive"]].tolist()) == sorted(state[0]["keys"][state[0]["alive"]].tolist())
    finally:
        other.close()


def _stored(mem):
    q = mem.store.query
    return (q("SELECT count(*) FROM documents")[0][0], q("SELECT count(*) FROM nodes")[0][0],
            q("SELECT count(*) FROM vectors")[0][0], q("SELECT count(*), COALESCE(max(seq), 0) FROM changes")[0])


def test_overlapped_batches_store_the_rows_the_serial_path_stores(tmp_path, monkeypatch, clock):
    odd = ['quote " backslash \\ tab\t and a line\u2028separator', "emoji 🦦 and 中文 text", "ctrl \x01 char"]
    items = [dict(i, content=f"{i['content']} {odd[n % 3]}") for n, i in enumerate(next(batches()))]
    items.append({"content": "# A\n## B\ndeep section\n### C\ndeeper", "metadata": {"k": ["é", None, 1.5]}})
    items += [{"content": f"odd float {i}", "importance": x, "ttl": 1e5 / 7 * (i + 1)}
              for i, x in enumerate([0.1 + 0.2, 1 / 3, 5e-324, 1.0, 0.0])]
    rows, paths, real_exact, real_insert = {}, [], _writer._exact_in_json, _writer._insert_sections
    for mode, minimum, exact in (("serial", 10**9, real_exact), ("overlapped", 1, real_exact),
                                 ("overlapped, documents bound", 1, lambda db, values: False)):
        monkeypatch.setattr(_writer, "OVERLAP_MIN_NODES", minimum)
        monkeypatch.setattr(_writer, "_exact_in_json", exact)
        monkeypatch.setattr(_writer, "_insert_sections", lambda db, docs, *a: paths.append((mode, docs is not None))
                            or real_insert(db, docs, *a))
        with MemoryEngine(tmp_path / mode, project="p", session="s1", settings=HYBRID, clock=lambda: clock[0]) as mem:
            mem.recall("kelp")
            mem.remember_many(items)
            q = mem.store.query
            docs = {d: i for i, (d,) in enumerate(q("SELECT id FROM documents ORDER BY id"))}
            rows[mode] = (
                [(docs[r[0]], *r[1:]) for r in q("SELECT document_id, key, ord, parent_ord, depth, path, title, body, "
                                                  "metadata, content_hash, typeof(parent_ord), typeof(body), "
                                                  "typeof(metadata), typeof(ord) FROM nodes ORDER BY key")],
                q("SELECT node_key, vec FROM vectors ORDER BY node_key"),
                q("SELECT seq, op, node_key, space FROM changes ORDER BY seq"),
                q("SELECT title, content, content_hash, importance, metadata, created_at, updated_at, accessed_at, "
                  "expires_at, typeof(importance), typeof(metadata), typeof(expires_at) FROM documents ORDER BY id"),
                mem.shards.seq, index_state(mem), [h.text for h in mem.recall("kelp tide 中文")])
    assert paths == [("overlapped", True), ("overlapped, documents bound", False)]   # documents in JSON, or not
    serial = rows.pop("serial")
    assert len(serial[0]) > 40 and {r[3] for r in serial[3]} >= {0.1 + 0.2, 1 / 3, 5e-324}
    for mode, other in rows.items():
        assert serial[:5] == other[:5], mode
        for state in (serial[5][0], other[5][0]):
            assert len(state.pop("doc_ids", serial[3])) == len(serial[3])   # (time-ordered ids: each store its own)
        same(serial[5], other[5])
        assert serial[6] == other[6]


@pytest.mark.parametrize("fails", ["insert", "indexing", "commit", "documents", "embedding"])
def test_a_failed_overlapped_batch_leaves_nothing_in_the_store_or_the_indexes(tmp_path, monkeypatch, clock, fails):
    """(The hashing embedder is cheap: these forced batches are embedded in the transaction while
    the documents are inserted, which fail in "documents", and the embedding in "embedding".)"""
    monkeypatch.setattr(_writer, "OVERLAP_MIN_NODES", 1)
    with MemoryEngine(tmp_path, project="p", session="s1", settings=HYBRID, clock=lambda: clock[0]) as mem:
        mem.remember_many([{"content": f"old note {i} about kelp", "force": True} for i in range(20)])
        mem.recall("kelp")
        before, hits = _stored(mem), [h.id for h in mem.recall("kelp note")]
        real_insert, real_take = _writer._insert_sections, _shards.Shards.take_own

        def insert(*a):
            seq = real_insert(*a)
            if fails == "insert":
                raise sqlite3.OperationalError("disk I/O error")
            return seq

        def take(self, *a):
            real_take(self, *a)               # the indexes hold the batch ...
            if fails == "indexing":
                raise KeyboardInterrupt       # ... when the interrupt comes

        real_documents, real_embed = _writer._insert_documents, HashEmbedder._embed

        def documents(*a):
            real_documents(*a)
            raise sqlite3.OperationalError("disk I/O error")

        def slow_documents(*a):               # still under way when the embedding fails: the rollback waits
            time.sleep(0.2)
            real_documents(*a)

        def embed(self, texts):
            if len(texts) > 1 and any("walrus" in t for t in texts):       # the batch, not a query
                raise RuntimeError("out of memory")
            return real_embed(self, texts)
        if fails == "documents":
            monkeypatch.setattr(_writer, "_insert_documents", documents)
        if fails == "embedding":
            monkeypatch.setattr(_writer, "_insert_documents", slow_documents)
            monkeypatch.setattr(HashEmbedder, "_embed", embed)

        real_write = mem.store.write

        @contextlib.contextmanager
        def failing_commit(**how):
            with real_write(**how) as db:
                yield db
                db.execute("CREATE TABLE documents (x)")      # fails: the transaction rolls back
        monkeypatch.setattr(_writer, "_insert_sections", insert)
        monkeypatch.setattr(_shards.Shards, "take_own", take)
        if fails == "commit":
            mem.store.write = failing_commit
        batch = [{"content": f"lost walrus note {i}", "force": True} for i in range(30)]
        raised = {"indexing": KeyboardInterrupt, "embedding": EmbeddingError}.get(fails, StorageError)
        with pytest.raises(raised):
            mem.remember_many(batch)
        _writer._INSERTER.submit(lambda: None).result()           # whatever the second thread had left is done
        mem.store.write = real_write
        if fails in ("insert", "indexing", "commit"):
            assert "project:p" not in mem.shards.loaded           # unloaded: it held the lost rows
        assert _stored(mem) == before and mem.shards.seq == before[3][1]
        assert not any("walrus" in h.text for h in mem.recall("walrus", limit=50).hits)
        assert [h.id for h in mem.recall("kelp note")] == hits
        monkeypatch.undo()
        mem.remember_many(batch)                                  # the connection and the indexes work on
        assert sum("walrus" in h.text for h in mem.recall("walrus", limit=50).hits) == 30
        assert _stored(mem)[0] == before[0] + 30


class _Watched(Embedder):
    """The hashing embedder, noting whether the write transaction was open at each call; `cheap`
    as given (its vectors are the same either way)."""

    def __init__(self, mem_box: list, cheap: bool, semantic: bool = False):
        self.inner, self.box, self.in_transaction = HashEmbedder(), mem_box, []
        self.name, self.dim, self.cheap, self.semantic = self.inner.name, self.inner.dim, cheap, semantic

    def _embed(self, texts):
        self.in_transaction.append(self.box[0].store.db.in_transaction)
        return self.inner._embed(texts)


def test_a_cheap_embedders_forced_batch_is_embedded_beside_the_documents_insert(tmp_path, monkeypatch, clock):
    """Embedded inside the transaction while the second thread inserts the documents: the same
    rows and indexes as embedding first; any other batch embeds before the transaction."""
    early, real = [], _writer._insert_sections        # whether the documents went in before the sections
    monkeypatch.setattr(_writer, "_insert_sections", lambda db, docs, *a: early.append(docs is None) or real(db, docs, *a))
    monkeypatch.setattr(_writer, "OVERLAP_MIN_NODES", 20)
    items = [dict(i, metadata={"i": n}) for n, i in enumerate(next(batches()))]
    state = {}
    for cheap in (False, True):
        box = []
        emb = _Watched(box, cheap)
        with MemoryEngine(tmp_path / str(cheap), project="p", session="s1", settings=HYBRID, embedder=emb,
                          clock=lambda: clock[0]) as mem:
            box.append(mem)
            mem.recall("kelp")
            emb.in_transaction.clear()                            # (a hybrid recall embeds its query)
            mem.remember_many(items[:10])                         # too small: embedded first
            mem.remember_many(items[10:] + [dict(items[0], content=items[0]["content"] + "!")])   # (one new exactly)
            calls = list(emb.in_transaction)
            q = mem.store.query
            state[cheap] = (q("SELECT content, metadata, importance, expires_at FROM documents ORDER BY id"),
                            q("SELECT v.vec FROM vectors v ORDER BY node_key"), index_state(mem),
                            [h.text for h in mem.recall("kelp tide")], calls)
    assert state[False][4] == [False, False] and state[True][4] == [False, True]
    assert early == [False, True]                         # (the small batches were inserted serially)
    assert state[False][:2] == state[True][:2] and state[False][3] == state[True][3]
    state[False][2][0].pop("doc_ids"), state[True][2][0].pop("doc_ids")    # (time-ordered ids: each store its own)
    same(state[False][2], state[True][2])


@pytest.mark.parametrize("case", ["semantic", "unforced", "replace"])
def test_other_batches_embed_before_the_transaction(tmp_path, monkeypatch, case):
    monkeypatch.setattr(_writer, "OVERLAP_MIN_NODES", 1)
    box = []
    emb = _Watched(box, cheap=True, semantic=case == "semantic")
    with MemoryEngine(tmp_path, project="p", embedder=emb) as mem:
        box.append(mem)
        first = mem.remember("a note about the harbour")
        items = [{"content": f"note {i} on kelp and tides", "force": case != "unforced"} for i in range(30)]
        if case == "replace":
            items.append({"content": "the harbour note, rewritten", "replace": first.id, "force": True})
        emb.in_transaction.clear()
        mem.remember_many(items)
        assert emb.in_transaction and not any(emb.in_transaction)
        assert mem.stats()["documents"] == 31
