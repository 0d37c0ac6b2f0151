"""VectorShard directly: batched searches agree with single ones in every layout of the shard."""

import numpy as np
import pytest

from ipy_memory.config import Settings
from ipy_memory.vectors import VectorShard


def unit(rng, n, dim=32):
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("layout", ["exact", "graph+tail", "dead-rows", "int8-tier"])
def test_search_many_equals_search(layout):
    rng = np.random.default_rng(7)
    vecs = unit(rng, 600)
    graph = layout == "graph+tail"
    shard = VectorShard(32, Settings(exact_threshold=200, hnsw_tail=150), graph=graph,
                        fetch=lambda keys: vecs[np.asarray(keys) - 1])
    cold = np.zeros(600, bool)
    if layout == "int8-tier":
        cold[::3] = True
    shard.add(np.arange(1, 401), vecs[:400], cold[:400])
    shard.add(np.arange(401, 601), vecs[400:], cold[400:])      # after the graph: an exact tail
    if layout == "dead-rows":
        for key in range(1, 601, 4):
            shard.remove(key)
    assert (shard.graph is not None) == graph
    queries = np.vstack([vecs[[5, 450, 599]], unit(rng, 5)])
    batched = shard.search_many(queries, 7)
    assert len(batched) == len(queries)
    for q, (keys, sims) in zip(queries, batched):
        one = shard.search(q, 7)
        assert keys.tolist() == one[0].tolist()
        assert np.allclose(sims, one[1])
    if layout == "exact":          # and an exact search is exact: the true top-7 by float32 cosine
        for q, (keys, _) in zip(queries, batched):
            assert keys.tolist() == (np.argsort(-(vecs @ q), kind="stable")[:7] + 1).tolist()


def test_column_adopts_a_loaded_array_and_still_grows():
    from ipy_memory._columns import Column
    col = Column(np.float16, width=4)
    loaded = np.arange(12, dtype=np.float16).reshape(3, 4)
    col.adopt(loaded)
    assert np.shares_memory(col.view, loaded)              # no copy
    col.extend(np.ones((2, 4), np.float16))
    assert col.view.shape == (5, 4) and col.view[0, 1] == 1 and col.view[4, 3] == 1
    assert len(col.padded()) == 6 and not col.padded()[-1].any()
    with pytest.raises(ValueError):
        col.adopt(loaded)                                  # not empty any more
    with pytest.raises(ValueError):
        Column(np.int8, width=4).adopt(loaded)             # another dtype
