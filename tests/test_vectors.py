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


@pytest.mark.parametrize("dead", [False, True])
def test_an_exact_scan_in_parts_answers_as_one_pass(monkeypatch, dead):
    """One query's exact float16 scan runs in parts any waiting thread may take (run_parts): the
    same rows and scores as the scan in one call, with and without dead rows."""
    from ipy_memory import _colscan, _kernels, vectors
    if not _kernels.FAST_HALF_DOTS:
        pytest.skip("the parts path is the compiled scan's")
    rng = np.random.default_rng(11)
    vecs = unit(rng, 3000)
    shard = VectorShard(32, Settings(exact_threshold=10 ** 9), graph=False)
    shard.add(np.arange(1, 3001), vecs, np.zeros(3000, bool))
    if dead:
        for key in range(1, 3001, 7):
            shard.remove(key)
    queries = np.vstack([vecs[[3, 1500, 2999]], unit(rng, 4)])
    monkeypatch.setattr(vectors, "_EXACT_PART", 10 ** 9)          # one call
    whole = [shard._exact_rows(q[None], 0, 25)[0] for q in queries]
    monkeypatch.setattr(vectors, "_EXACT_PART", 128)              # 24 parts
    calls = []
    monkeypatch.setattr(vectors, "run_parts", lambda parts, fn: calls.append(len(parts)) or
                        _colscan.run_parts(parts, fn))
    parts = [shard._exact_rows(q[None], 0, 25)[0] for q in queries]
    assert calls == [24] * len(queries)
    assert [sorted(a.tolist()) for a in whole] == [sorted(b.tolist()) for b in parts]
    assert all(len(a) == 25 for a in whole)


def test_column_adopts_a_loaded_array_and_still_grows():
    from ipy_memory._columns import Column
    col = Column(np.float16, width=4)
    loaded = np.arange(12, dtype=np.float16).reshape(3, 4)
    col.adopt(loaded)
    assert np.shares_memory(col.view, loaded)              # no copy
    col.extend(np.ones((2, 4), np.float16))
    assert col.view.shape == (5, 4) and col.view[0, 1] == 1 and col.view[4, 3] == 1
    assert len(col.padded()) == 6 and not col.padded()[-1].any()
    big = Column(np.int32, fill=-1)
    big.adopt(np.arange(16_000, dtype=np.int32))
    assert big.padded()[-1] == -1 and len(big._data) < 17_100     # room for the sentinel, not twice
    with pytest.raises(ValueError):
        col.adopt(loaded)                                  # not empty any more
    with pytest.raises(ValueError):
        Column(np.int8, width=4).adopt(loaded)             # another dtype


def test_padding_an_adopted_column_makes_room_once():
    from ipy_memory._columns import Column
    col = Column(np.int32, fill=-1)
    col.adopt(np.arange(5, dtype=np.int32))
    first = col.padded()
    assert first.tolist() == [0, 1, 2, 3, 4, -1]
    assert np.shares_memory(col.padded(), first)           # the same buffer, not a copy per call
    col.view[2] = 7                                        # writes show through the padded view
    assert col.padded()[2] == 7 and col.padded()[-1] == -1


def test_get_finds_rows_by_binary_search_while_keys_ascend_and_by_dict_after_a_tier_move():
    rng = np.random.default_rng(5)
    vecs = rng.standard_normal((300, 16)).astype(np.float32)
    store = {k: v for k, v in zip(range(10, 310), vecs)}
    shard = VectorShard(16, Settings(), graph=False, fetch=lambda keys: np.stack([store[k] for k in keys]))
    shard.add(np.arange(10, 160), vecs[:150])
    shard.add(np.arange(160, 310), vecs[150:])
    for k in (12, 200, 309):
        shard.remove(k)
    asked = np.array([5, 10, 12, 11, 200, 309, 308, 150, 999])
    expect = np.array([store[k] if k in store and k not in (12, 200, 309) else np.zeros(16) for k in asked])
    assert np.allclose(shard.get(asked), expect, atol=1e-2) and (shard._key_order.checked, shard._key_order.ascending) == (300, True)
    shard.set_cold(20, True)           # to the int8 tier: fetched exactly from `store`
    shard.set_cold(20, False)          # back, appended after larger keys: the dict answers from now on
    assert np.allclose(shard.get(asked), expect, atol=1e-2)
    assert shard._key_order.ascending is False
    assert np.allclose(shard.get([20, 21]), np.stack([store[20], store[21]]), atol=1e-2)


def two_tiers(rng, n):
    """A shard of n random 64-d vectors (keys 1..n), key 7 forgotten, keys 3 and 50 in the int8 tier,
    and the exact vectors by key (what `fetch` reads for the colder tier)."""
    vecs = rng.standard_normal((n, 64)).astype(np.float32)
    store = {k: v for k, v in zip(range(1, n + 1), vecs)}
    shard = VectorShard(64, Settings(), graph=False, fetch=lambda keys: np.stack([store[k] for k in keys]))
    shard.add(np.arange(1, n + 1), vecs)
    shard.remove(7)
    for k in (3, 50):
        shard.set_cold(k, True)        # exact values come from `store`, not from the int8 copy
    return shard, store


def test_dots_equal_get_times_q_for_hot_colder_and_unknown_keys():
    rng = np.random.default_rng(8)
    shard, store = two_tiers(rng, 200)
    asked = np.array([3, 7, 50, 1, 999, 120, 50])
    sparse = np.zeros(64, np.float32)
    sparse[[2, 9, 40]] = (0.5, -0.25, 0.75)
    for q in (sparse, rng.standard_normal(64).astype(np.float32), np.zeros(64, np.float32)):
        got = shard.dots(asked, q)
        assert got.dtype == np.float32 and got.shape == (7,)
        assert np.allclose(got, shard.get(asked) @ q, atol=1e-5)
        assert got[1] == got[4] == 0 and np.isclose(got[0], store[3] @ q, atol=1e-5)
    assert shard.dots([], sparse).shape == (0,)


@pytest.mark.parametrize("fast", [True, False])
def test_dots_many_equal_get_times_queries_for_hot_colder_and_unknown_keys(monkeypatch, fast):
    from ipy_memory import _kernels
    if fast and not _kernels.FAST_HALF_DOTS:
        pytest.skip("the compiled F16C scan does not run here")
    monkeypatch.setattr(_kernels, "FAST_HALF_DOTS", fast)
    rng = np.random.default_rng(9)
    shard, store = two_tiers(rng, 300)
    asked = np.array([3, 7, 50, 1, 999, 120, 50, 299])
    qs = rng.standard_normal((9, 64)).astype(np.float32)
    got = shard.dots_many(asked, qs)
    assert got.dtype == np.float32 and got.shape == (9, 8)
    assert np.allclose(got, qs @ shard.get(asked).T, atol=1e-5)
    assert not got[:, 1].any() and not got[:, 4].any()               # forgotten, unknown
    assert np.allclose(got[:, 0], qs @ store[3], atol=1e-5)         # colder: the stored value, exact
    assert shard.dots_many([], qs).shape == (9, 0)


def test_a_loaded_snapshot_serves_searches_and_writes_without_its_key_map():
    """The key -> row dict of a loaded snapshot is built only when something needs it (1.5M
    sections: ~180 ms and ~150 MB); searches, duplicate-check reads, adds and removals do not."""
    rng = np.random.default_rng(3)
    vecs = rng.standard_normal((400, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    made = VectorShard(16, Settings(), graph=False)
    made.add(np.arange(1, 301), vecs[:300])
    loaded = VectorShard(16, Settings(), graph=False)
    loaded.restore(made.arrays())
    for shard in (made, loaded):
        shard.add(np.arange(301, 311), vecs[300:310])
        assert shard.remove(7) and not shard.remove(7) and not shard.remove(999)
        assert len(shard) == shard.hot_count == 309
    assert loaded._row_of is None                               # never needed so far
    for q in vecs[300:340]:
        assert all(np.array_equal(a, b) for a, b in zip(made.search(q, 8), loaded.search(q, 8)))
    assert np.array_equal(made.get([5, 7, 310, 999]), loaded.get([5, 7, 310, 999]))
    assert loaded._row_of is None
    assert loaded.row_of == made.row_of                         # built on demand, the same map


def test_snapshot_arrays_hold_the_live_rows_of_both_tiers_without_copying_a_whole_matrix():
    rng = np.random.default_rng(4)
    vecs = rng.standard_normal((60, 16)).astype(np.float32)
    shard = VectorShard(16, Settings(), graph=False)
    shard.add(np.arange(1, 61), vecs, cold=np.arange(60) >= 40)           # keys 41..60 in the int8 tier
    got = shard.arrays()
    assert got["hot_keys"].tolist() == list(range(1, 41)) and got["low_keys"].tolist() == list(range(41, 61))
    assert np.shares_memory(got["hot"], shard.mat.view)                  # every row live: a view
    np.testing.assert_array_equal(got["hot"], vecs[:40].astype(np.float16))
    assert shard.remove(5) and shard.remove(50)
    got = shard.arrays()
    assert 5 not in got["hot_keys"] and 50 not in got["low_keys"]
    assert len(got["hot"]) == 39 and len(got["low"]) == 19 and not np.shares_memory(got["hot"], shard.mat.view)
    np.testing.assert_array_equal(got["hot"], np.delete(vecs[:40], 4, axis=0).astype(np.float16))


# ------------------------------------------------------------------------------ graph checks (_graphcheck)
def test_the_narrow_first_pass_finds_exactly_the_nodes_a_wide_search_misses():
    from ipy_memory import _graphcheck
    from ipy_memory._native import usearch
    rng = np.random.default_rng(5)
    vecs = np.concatenate([unit(rng, 3000), np.repeat(unit(rng, 1), 40, axis=0)]).astype(np.float16)
    keys = np.arange(10, 10 + len(vecs))
    graph = usearch().Index(ndim=32, metric="cos", dtype="f16", connectivity=16, expansion_add=128, expansion_search=256)
    graph.add(keys, vecs, threads=2)
    wide = np.asarray(graph.search(vecs, 10, threads=2).keys).reshape(len(keys), -1)
    expected = ~(wide == keys[:, None]).any(axis=1)
    assert expected.sum() >= 30          # 40 identical vectors: a top 10 holds at most 10 of them
    assert np.array_equal(_graphcheck.unreachable(graph, keys, vecs), expected)
    assert graph.expansion_search == 256                     # the narrow pass's beam is put back


def test_the_beam_is_put_back_when_the_narrow_pass_fails():
    from ipy_memory import _graphcheck

    class Graph:
        expansion_search = 300

        def search(self, *a, **k):
            assert self.expansion_search == _graphcheck.FIRST_PASS
            raise MemoryError("no room")

    graph = Graph()
    with pytest.raises(MemoryError):
        _graphcheck.unreachable(graph, np.array([1]), np.zeros((1, 4), np.float16))
    assert graph.expansion_search == 300


def test_each_build_rechecks_older_graph_rows_whole_or_in_turn(monkeypatch):
    """Adding nodes can cut an older node's last way in: a build re-checks every older row while
    they are at most WHOLE times the new ones, else as many as it added, in passes over them."""
    from ipy_memory import _graphcheck
    checked = []
    real = _graphcheck.unreachable
    monkeypatch.setattr(_graphcheck, "unreachable", lambda g, k, v: (checked.append(set(k.tolist())), real(g, k, v))[1])
    rng = np.random.default_rng(9)
    vecs = unit(rng, 2500)
    shard = VectorShard(32, Settings(exact_threshold=100, hnsw_tail=100))
    shard.add(np.arange(1, 201), vecs[:200])                  # the first build: its 200 rows
    shard.add(np.arange(201, 401), vecs[200:400])             # 200 new, 200 older: all re-checked
    assert checked == [set(range(1, 201)), set(range(1, 401))]
    shard.remove(5)                                           # a dead row is not searched for
    starts = range(401, 2501, 100)                            # 100 new rows a build
    for start in starts:
        shard.add(np.arange(start, start + 100), vecs[start - 1:start + 99])
    assert [c >= set(range(s, s + 100)) for c, s in zip(checked[2:], starts)] == [True] * len(starts)
    older = [c - set(range(s, s + 100)) for c, s in zip(checked[2:], starts)]
    assert older[0] == set(range(1, 401)) - {5}               # 400 older rows: at most 4x, whole
    assert all(len(w) <= 100 and 5 not in w for w in older[1:])  # then 100 a build, in passes
    assert set().union(*older[1:]) >= set(range(1, 1001)) - {5}   # two passes: 500, then 1,000 rows


def test_rechecks_run_in_passes_that_cover_the_rows_they_began_with():
    from ipy_memory._graphcheck import recheck_window
    sweep, passes, firsts = (0, 0, 0), [], set()
    for old in range(500, 5000, 100):                 # the graph grows as fast as a window moves
        rows, sweep = recheck_window(old, 100, sweep)
        assert len(rows) <= 100 and rows.max() < old
        if sweep[1] == len(rows):                     # a pass began
            passes.append([])
            firsts.add(int(rows[0]))
        passes[-1].extend(rows.tolist())
    assert len(passes) >= 3
    for rows in passes[:-1]:                          # each finished pass: every row once
        assert sorted(rows) == list(range(len(rows)))
    assert 0 not in firsts and len(firsts) == len(passes)   # each from a row of its own
    rows, sweep = recheck_window(300, 100, sweep)      # fewer older rows than 4x the new: all of them
    assert rows.tolist() == list(range(300)) and sweep == (0, 0, 0)
