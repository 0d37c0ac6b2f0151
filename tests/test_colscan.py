"""The column scan for sparse queries (`_colscan`): its per-row bounds hold, its top rows are the exact
top rows, and a VectorShard answers the same with it as a brute-force float32 search."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipy_memory import _colscan, _kernels
from ipy_memory.config import Settings
from ipy_memory.embeddings.hashing import HashEmbedder
from ipy_memory.vectors import VectorShard


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def kernel(request, monkeypatch):
    """Every test here runs with the compiled kernel and with its numpy twin."""
    if request.param == "numpy":
        monkeypatch.setattr(_kernels, "column_scores", _kernels.column_scores_numpy)
        monkeypatch.setattr(_kernels, "quantize_rows", _kernels.quantize_rows_numpy)
    elif not _kernels.COMPILED:
        pytest.skip("the compiled kernels are not built (IPY_MEMORY_PURE_PYTHON)")
    return request.param


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 150), dim=st.integers(1, 70), share=st.floats(0.05, 1.0),
       scale=st.sampled_from([1e-6, 1e-3, 1.0, 300.0, 3e3]))
def test_compiled_columns_are_the_numpy_twins(kernel, seed, n, dim, share, scale):
    """quantize_rows gives its twin's int8 columns and scales exactly (F16C and portable paths), for
    rows of zeros, subnormal and large (finite) float16 values, written into a slice of wider columns."""
    if kernel == "numpy":
        return                   # (the fixture's numpy run: nothing to compare)
    rng = np.random.default_rng(seed)
    rows = (rng.standard_normal((n, dim)) * (rng.random((n, dim)) < share) * scale).astype(np.float16)
    rows[::7] = 0
    want_cols, want_scales = np.zeros((dim, n), np.int8), np.zeros(n, np.float32)
    _kernels.quantize_rows_numpy(rows, want_cols, want_scales)
    for simd in (True, False):
        block, scales = np.full((dim, n + 9), 99, np.int8), np.zeros(n, np.float32)
        _kernels._speedups.quantize_rows(rows, block[:, 4:4 + n], scales, simd)
        assert np.array_equal(block[:, 4:4 + n], want_cols) and np.array_equal(scales, want_scales), simd
        assert (block[:, :4] == 99).all() and (block[:, 4 + n:] == 99).all()    # nothing written outside
    with pytest.raises(ValueError):
        _kernels._speedups.quantize_rows(rows, block[:, :n + 1], np.zeros(n + 1, np.float32))


def sparse_unit(rng, n, dim=64, nonzero=12, empty=True):
    """Rows like the hashing embedder's: a few non-zero dimensions, unit length, some all-zero."""
    x = np.zeros((n, dim), np.float32)
    for row in x:
        at = rng.choice(dim, rng.integers(1, nonzero + 1), replace=False)
        row[at] = rng.standard_normal(len(at))
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    if empty:
        x[::97] = 0                                    # an empty text embeds to zeros
    return x


def exact_top(mat16, alive, q, k):
    """Brute force: the top-k live rows by float32 dot product with the stored float16 rows, ties by row."""
    sims = mat16.astype(np.float32) @ q
    sims[~alive] = -np.inf
    order = np.lexsort((np.arange(len(sims)), -np.round(sims, 5)))
    return order[:k], sims


def build(mat, dim):
    scan = _colscan.ColumnScan(dim)
    scan.append(mat)
    return scan


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(_colscan, "BLOCK", 1000)       # several blocks, and appends that cross them
    monkeypatch.setattr(_colscan, "_CONVERT", 333)


def test_upper_bounds_hold_across_blocks_and_appends(small_blocks):
    rng = np.random.default_rng(1)
    mat = (sparse_unit(rng, 2600) * rng.uniform(0.2, 1.0, (2600, 1)).astype(np.float32)).astype(np.float16)
    scan = _colscan.ColumnScan(64)
    for lo, hi in ((0, 1), (1, 700), (700, 1000), (1000, 2599), (2599, 2600)):
        scan.append(mat[lo:hi])
    assert scan.n == 2600 and len(scan.blocks) == 3
    exact = mat.astype(np.float32)
    scale = np.abs(exact).max(axis=1) / 127
    alive = np.ones(2600, bool)
    alive[5::11] = False
    for _ in range(50):
        q = sparse_unit(rng, 1, nonzero=30, empty=False)[0] if _ else np.ones(64, np.float32) / 8
        dims = np.flatnonzero(q)
        true = exact @ q
        upper = scan.upper(q, dims)
        assert np.all(upper >= true)                                         # a bound from above,
        assert np.all(upper - true <= 2 * scale * scan.slack(q, dims) + 1e-6)   # within twice the slack
        masked = scan.upper(q, dims, alive)
        assert np.all(masked[~alive] == -np.inf) and np.array_equal(masked[alive], upper[alive])


def test_two_threads_give_the_same_scores(small_blocks, monkeypatch):
    rng = np.random.default_rng(2)
    scan = build(sparse_unit(rng, 4500).astype(np.float16), 64)
    q = sparse_unit(rng, 1, nonzero=20, empty=False)[0]
    one = scan.upper(q, np.flatnonzero(q))
    monkeypatch.setattr(_colscan, "_SPLIT_ROWS", 1)
    assert np.array_equal(scan.upper(q, np.flatnonzero(q)), one)


def test_top_rows_are_the_exact_top_rows_with_ties():
    rng = np.random.default_rng(3)
    mat = sparse_unit(rng, 5000).astype(np.float16)
    mat[4000:4040] = mat[17]                          # 41 identical rows
    alive = np.ones(5000, bool)
    alive[::7] = False
    scan = build(mat, 64)
    for i in range(60):
        q = mat[17].astype(np.float32) if i == 0 else sparse_unit(rng, 1, nonzero=10, empty=False)[0]
        found = _colscan.top_rows(scan.upper(q, np.flatnonzero(q), alive), mat, q, 10, int(alive.sum()))
        assert found is not None
        rows, exact = found
        assert alive[rows].all() and np.allclose(exact, mat[rows].astype(np.float32) @ q)
        top, sims = exact_top(mat, alive, q, 10)
        assert set(top) <= set(rows.tolist())
        assert np.all(sims[rows] >= sims[top].min() - 1e-6)     # nothing returned below the 10th
        tenth = sims[top].min()
        assert (sims >= tenth - 1e-6).sum() == len(rows)         # and every row tied with it is there
    twins = [17] + [r for r in range(4000, 4040) if alive[r]]          # 35 live copies, asked for 5
    q = mat[17].astype(np.float32)
    rows, _ = _colscan.top_rows(scan.upper(q, np.flatnonzero(q), alive), mat, q, 5, int(alive.sum()))
    assert sorted(rows.tolist()) == twins


def test_top_rows_gives_up_when_the_bound_cannot_decide():
    mat = np.zeros((40_000, 8), np.float16)
    mat[:, 0] = 1                                     # 40,000 identical rows: no few thousand prove anything
    scan = build(mat, 8)
    q = np.zeros(8, np.float32)
    q[0] = 1
    assert _colscan.top_rows(scan.upper(q, np.flatnonzero(q)), mat, q, 5, 40_000) is None


def built(shard):
    """Wait for the shard's columns to be built and adopted (a sparse query's search starts the
    build on a worker thread)."""
    if shard._column_scan() is None:
        q = np.zeros(shard.dim, np.float32)
        q[0] = 1
        shard.search(q, 1)
        job = shard._columns_job          # (None if a build started earlier ended and was adopted meanwhile)
        if job is not None:
            job.wait()
    assert shard._column_scan() is not None
    return shard._columns


@pytest.fixture
def calls(monkeypatch):
    """Count the searches the column scan answered (so a test knows which path it checked)."""
    monkeypatch.setattr(_colscan, "SPARSE_MIN_ROWS", 500)
    seen = []
    real = _colscan.top_rows

    def counting(*a, **kw):
        out = real(*a, **kw)
        seen.append(out is not None)
        return out
    monkeypatch.setattr(_colscan, "top_rows", counting)
    return seen


def check(shard, mat16_by_key, queries, k=10):
    keys = np.array(sorted(mat16_by_key))
    mat16 = np.stack([mat16_by_key[x] for x in keys])
    for q in queries:
        got_keys, got_sims = shard.search(q, k)
        top, sims = exact_top(mat16, np.ones(len(keys), bool), q, k)
        assert got_keys.tolist() == keys[top].tolist()
        assert np.allclose(got_sims, sims[top], atol=1e-6)


def test_vector_shard_answers_by_columns_exactly_through_writes(calls, small_blocks):
    rng = np.random.default_rng(4)
    vecs = sparse_unit(rng, 3000)
    shard = VectorShard(64, Settings(), graph=False)
    shard.add(np.arange(1, 2001), vecs[:2000])
    stored = {k: v.astype(np.float16) for k, v in zip(range(1, 2001), vecs[:2000])}
    queries = np.vstack([vecs[[3, 1500]], sparse_unit(rng, 20, nonzero=20, empty=False)])
    check(shard, stored, queries[:2])                 # the first query starts the build (a full scan)
    assert shard._columns_job is not None or shard._columns is not None
    built(shard)
    check(shard, stored, queries)
    assert calls and all(calls)
    shard.add(np.arange(2001, 3001), vecs[2000:])     # appended rows join the columns at the next query
    stored.update({k: v.astype(np.float16) for k, v in zip(range(2001, 3001), vecs[2000:])})
    for key in range(1, 3001, 3):
        shard.remove(key)
        del stored[key]
    calls.clear()
    check(shard, stored, queries)
    assert shard._columns.n == 3000 and len(calls) == len(queries) and all(calls)
    batched = shard.search_many(queries, 10)          # search_many takes the same path
    assert [b[0].tolist() for b in batched] == [shard.search(q, 10)[0].tolist() for q in queries]


def test_a_renumbering_drops_the_columns_and_a_build_in_flight(calls):
    rng = np.random.default_rng(5)
    vecs = sparse_unit(rng, 2000)
    shard = VectorShard(64, Settings(), graph=False)
    shard.add(np.arange(1, 2001), vecs)
    shard.search(vecs[1], 3)                          # a build in flight ...
    job = shard._columns_job
    for key in range(1, 1026):                        # ... and then so many removals that rows compact
        shard.remove(key)
    assert shard.keys.size == 975 and shard._columns_job is None and shard._columns is None
    job.wait()
    built(shard)
    assert shard._columns.n == 975
    check(shard, {k: v.astype(np.float16) for k, v in zip(range(1026, 2001), vecs[1025:])},
          sparse_unit(rng, 10, nonzero=20, empty=False))


def test_dense_queries_and_small_spaces_scan_every_row(calls):
    rng = np.random.default_rng(6)
    vecs = sparse_unit(rng, 600)
    shard = VectorShard(64, Settings(), graph=False)
    shard.add(np.arange(1, 401), vecs[:400])
    check(shard, {k: v.astype(np.float16) for k, v in zip(range(1, 401), vecs)}, vecs[1:4])
    assert shard._columns_job is None                 # below SPARSE_MIN_ROWS: no columns at all
    shard.add(np.arange(401, 601), vecs[400:])
    built(shard)
    dense = np.ones(64, np.float32) / 8
    calls.clear()
    check(shard, {k: v.astype(np.float16) for k, v in zip(range(1, 601), vecs)}, [dense])
    assert not calls                                  # dense: the full scan, as before


def test_hash_embedder_vectors(calls):
    """The case this exists for: hashing-embedder vectors of real-looking text and short queries."""
    words = ("pandas kernel notebook index query table model python train test data frame column row "
             "plot memory cache disk shard vector token budget recall forget dream tier scope").split()
    rng = np.random.default_rng(7)
    texts = [" ".join(rng.choice(words, rng.integers(3, 25))) + f" item{i}" for i in range(1500)]
    emb = HashEmbedder(dim=128)
    vecs = emb.embed(texts)
    shard = VectorShard(128, Settings(), graph=False)
    shard.add(np.arange(1, 1501), vecs)
    built(shard)
    queries = [emb.embed_query(" ".join(rng.choice(words, rng.integers(1, 5)))) for _ in range(40)]
    calls.clear()
    check(shard, {k: v.astype(np.float16) for k, v in zip(range(1, 1501), vecs)}, queries, k=20)
    assert len(calls) == 40 and all(calls)


def test_engine_recall_is_the_same_with_columns(tmp_path, monkeypatch):
    """Through the engine, on a real store: hybrid recall answers the same by columns as by the full
    scan, before and after a reopen from snapshots and after more writes."""
    from ipy_memory import MemoryEngine, Settings as S
    words = "alpha beta gamma delta kernel notebook pandas frame plot query index cache shard token".split()
    rng = np.random.default_rng(8)
    texts = [" ".join(rng.choice(words, rng.integers(2, 12))) + f" note{i}" for i in range(700)]
    queries = [" ".join(rng.choice(words, rng.integers(1, 4))) for _ in range(25)]
    settings = S().with_(vector_weight_hash=0.5)

    def answers(eng, by_columns):
        monkeypatch.setattr(_colscan, "SPARSE_MIN_ROWS", 100 if by_columns else 10**9)
        vec = eng.shards.get(eng._space("project", "p")).vec
        eng.recall(queries[0], scope="project", limit=10)
        if by_columns:
            built(vec)
        out = [eng.recall(q, scope="project", limit=10) for q in queries]
        assert vec._columns is not None or not by_columns
        return out

    def same(a, b):       # scores to float32 rounding: a dot product's last bit depends on its batch
        assert [[h.id for h in hits] for hits in a] == [[h.id for h in hits] for hits in b]
        assert np.allclose([h.score for hits in a for h in hits], [h.score for hits in b for h in hits], rtol=1e-6)

    eng = MemoryEngine(tmp_path / "store", project="p", embedder="hash", settings=settings)
    eng.remember_many([{"content": t, "force": True} for t in texts[:600]])
    same(answers(eng, False), answers(eng, True))
    eng.close()
    eng = MemoryEngine(tmp_path / "store", project="p", embedder="hash", settings=settings)
    same(answers(eng, True), answers(eng, False))
    eng.remember_many([{"content": t, "force": True} for t in texts[600:]])
    eng.forget(eng.recall(queries[1], scope="project", limit=1)[0].id)
    same(answers(eng, True), answers(eng, False))
    eng.close()


def test_a_waiting_thread_helps_with_the_scan_and_errors_reach_the_caller(small_blocks, monkeypatch):
    import threading
    rng = np.random.default_rng(9)
    scan = build(sparse_unit(rng, 6000).astype(np.float16), 64)
    monkeypatch.setattr(_colscan, "_PART", 200)           # 30 parts
    q = sparse_unit(rng, 1, nonzero=20, empty=False)[0]
    alone = scan.upper(q, np.flatnonzero(q))
    taken, real_part, helped = [], _colscan._score_part, threading.Event()
    result = []
    worker = threading.Thread(target=lambda: result.append(scan.upper(q, np.flatnonzero(q))))

    def slow(part, weights, checks):                     # the worker waits until the helper took one
        taken.append(threading.get_ident())
        if threading.get_ident() == worker.ident:
            helped.wait(5)
        else:
            helped.set()
        real_part(part, weights, checks)
    monkeypatch.setattr(_colscan, "_score_part", slow)
    worker.start()
    while worker.is_alive():
        _colscan.help_scan()
    worker.join()
    assert np.array_equal(result[0], alone) and len(taken) == 30
    assert len(set(taken)) == 2 and _colscan._current is None        # both threads scored parts

    def broken(part, weights, checks):
        raise MemoryError("no room")
    monkeypatch.setattr(_colscan, "_score_part", broken)
    with pytest.raises(MemoryError):
        scan.upper(q, np.flatnonzero(q))
    assert _colscan._current is None


def test_a_build_runs_on_a_daemon_thread_and_stops_when_asked(monkeypatch):
    import threading
    monkeypatch.setattr(_colscan, "_CONVERT", 64)
    gate = threading.Event()
    real = _colscan.ColumnScan.append

    def gated(self, rows):                 # the first chunk waits until the test has asked to stop
        gate.wait(5)
        real(self, rows)
    monkeypatch.setattr(_colscan.ColumnScan, "append", gated)
    mat = np.ones((6400, 8), np.float16)
    job = _colscan.Build(mat, 8)
    assert job.thread.daemon and not job.done()    # an exiting process does not wait for it
    job.stop()
    gate.set()
    assert job.wait(5) is None and job.done()      # stopped after the first of its 100 chunks
    finished = _colscan.Build(mat[:100], 8)
    assert finished.wait(5).n == 100


def test_closing_an_engine_stops_its_column_build(tmp_path, monkeypatch):
    from ipy_memory import MemoryEngine, Settings as S
    monkeypatch.setattr(_colscan, "SPARSE_MIN_ROWS", 100)
    eng = MemoryEngine(tmp_path / "store", project="p", embedder="hash", settings=S().with_(vector_weight_hash=0.5))
    eng.remember_many([{"content": f"note {i} about pandas kernels", "force": True} for i in range(300)])
    eng.recall("pandas", scope="project", limit=3)
    vec = eng.shards.get(eng._space("project", "p")).vec
    job = vec._columns_job
    assert job is not None
    stopped = []
    monkeypatch.setattr(job, "stop", lambda: stopped.append(True))
    eng.close()
    assert stopped and vec._columns is None and vec._columns_job is None


def test_a_recall_starts_the_column_build_only_once_it_has_ranked(tmp_path, monkeypatch):
    """The build competes for the cores with the recall's own scans: it starts after them."""
    from ipy_memory import MemoryEngine, Settings as S, _recall
    monkeypatch.setattr(_colscan, "SPARSE_MIN_ROWS", 100)
    eng = MemoryEngine(tmp_path / "store", project="p", embedder="hash", settings=S().with_(vector_weight_hash=0.5))
    eng.remember_many([{"content": f"note {i} about pandas kernels", "force": True} for i in range(300)])
    vec = eng.shards.get(eng._space("project", "p")).vec
    during = []
    real_search, real_rank = VectorShard.search, _recall._rank

    def search(self, *a, **kw):
        out = real_search(self, *a, **kw)
        during.append(("search", self._columns_job))
        return out

    def rank(*a, **kw):
        out = real_rank(*a, **kw)
        during.append(("ranked", vec._columns_job))
        return out
    monkeypatch.setattr(VectorShard, "search", search)
    monkeypatch.setattr(_recall, "_rank", rank)
    assert eng.recall("pandas", scope="project", limit=3)
    assert during == [("search", None), ("ranked", None)]       # nothing built while it searched and ranked
    assert vec._columns_job is not None                          # ... and the build runs now
    eng.close()


def test_a_loaded_scan_checks_the_columns_it_reads_in_the_same_pass(monkeypatch, tmp_path):
    """Columns mapped from a snapshot (ColumnScan.loaded): a scan computes the CRCs of those it reads
    that are not checked yet as it reads them (a block with any is one part, also on two threads),
    confirms them before its bounds are used, and never checks a column it did not read."""
    from ipy_memory import _snapchecks
    from ipy_memory._colsnap import column_crcs
    rng = np.random.default_rng(11)
    mat = sparse_unit(rng, 3000).astype(np.float16)
    monkeypatch.setattr(_colscan, "BLOCK", 1024)
    blocks, scales = build(mat, 64).live_blocks()
    blocks = [make().copy() for make in blocks]           # three sealed blocks: 1024, 1024, 952 rows
    crcs = column_crcs(blocks, np.arange(len(blocks) * 64))

    def loaded():
        computed = []
        pieces = _snapchecks.PieceChecks(crcs, lambda p: computed.append(p) or column_crcs(blocks, p), tmp_path / "s.npz",
                                  "cols", _snapchecks.LaterChecks())
        return _colscan.ColumnScan.loaded(blocks, scales, pieces), pieces, computed

    plain = build(mat, 64)
    for split in (False, True):
        monkeypatch.setattr(_colscan, "_SPLIT_ROWS", 1 if split else 10**9)
        scan, pieces, computed = loaded()
        q = np.zeros(64, np.float32)
        q[[3, 9, 40]] = [0.5, -0.7, 0.5]
        assert np.array_equal(scan.upper(q, np.flatnonzero(q)), plain.upper(q, np.flatnonzero(q)))
        assert sorted(np.flatnonzero(pieces.done).tolist()) == [b * 64 + d for b in range(3) for d in (3, 9, 40)]
        q[[9, 50]] = [0.2, 0.3]                              # one column checked, one new
        assert np.array_equal(scan.upper(q, np.flatnonzero(q)), plain.upper(q, np.flatnonzero(q)))
        assert pieces.done.sum() == 12 and all(pieces.done[b * 64 + 50] for b in range(3))
        assert not computed                                  # no second pass over what the scan read
    scan, pieces, _ = loaded()
    blocks[1][20, 500] ^= 0x10                                # a damaged byte in column 20 of block 1
    q = np.zeros(64, np.float32)
    q[[3, 21]] = 1.0
    scan.upper(q, np.flatnonzero(q))                         # a query that does not read it answers
    q[20] = 1.0
    with pytest.raises(_snapchecks.DamagedSnapshot, match="piece 84 of cols"):
        scan.upper(q, np.flatnonzero(q))
    assert pieces.checks.damaged and not pieces.done[84] and pieces.done[20] and pieces.done[2 * 64 + 20]
