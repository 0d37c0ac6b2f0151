"""Colder tiers keep int8 vectors in memory; recall quality does not drop (exact rescoring)."""

import pytest

from ipy_memory import MemoryEngine, Settings
from ipy_memory.config import DAY

SETTINGS = Settings(vector_weight_hash=1.0)     # let the vectors rank, so their precision matters
TEXTS = [f"note {i}: the {['red', 'blue', 'green', 'gold'][i % 4]} crate holds part {i * 7 % 53}" for i in range(200)]
QUERIES = ["red crate part 12", "gold crate", "blue holds part 40", "note 77"]


@pytest.fixture
def clock():
    return [1_800_000_000.0]


def ranked(mem):
    return [[(h.id, round(h.score, 4)) for h in mem.recall(q, limit=8)] for q in QUERIES]


def vector_top(mem, q):
    shard = mem.shards.get("project:p")
    keys, sims = shard.vec.search(mem.embedder.embed_query(q), 8)
    return [int(k) for k in keys], [round(float(x), 4) for x in sims]


def test_rotation_moves_vectors_to_int8_and_results_hold(tmp_path, clock):
    with MemoryEngine(tmp_path, project="p", settings=SETTINGS, clock=lambda: clock[0]) as mem:
        mem.remember_many([{"content": t, "force": True} for t in TEXTS])
        before = [vector_top(mem, q) for q in QUERIES]
        shard = mem.shards.get("project:p")
        assert shard.vec.hot_count == 200 and not shard.vec.low.row_of
        clock[0] += 40 * DAY
        moved = mem.rotate()
        assert moved["hops"][0]["documents"] == 200          # hot -> warm (one tier per call)
        assert len(shard.vec.low.row_of) == 200 and shard.vec.hot_count == 0
        assert [vector_top(mem, q) for q in QUERIES] == before          # exact rescoring: same answers
        st = mem.tier_stats()["tiers"]
        assert st["warm"]["precision"] == "i8" and st["warm"]["index_bytes_saved"] == 200 * mem.embedder.dim
        with MemoryEngine(tmp_path, project="p", settings=SETTINGS, clock=lambda: clock[0]) as other:
            other_shard = other.shards.get("project:p")
            assert len(other_shard.vec.low.row_of) == 200                # loaded at its tier's precision
            assert [vector_top(other, q) for q in QUERIES] == before
            hit = mem.recall("red crate part 12", limit=1)[0]            # an access warms it up again
            other.recall("anything")                                     # the other engine follows the log
            doc_keys = [k for k, in mem.store.query("SELECT key FROM nodes WHERE document_id = ?",
                                                     (hit.document_id,))]
            for s in (shard, other_shard):
                assert all(k in s.vec.row_of and k not in s.vec.low.row_of for k in doc_keys)
            assert mem.get(hit.document_id).tier == "hot"
