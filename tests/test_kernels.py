"""The compiled kernels (`_speedups`) compute what their numpy twins in `_kernels` compute, refuse
arguments they cannot use safely, and are the ones that run (this project's builds have a compiler)."""

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipy_memory import _kernels, _text, _wordkernels

compiled = pytest.mark.skipif(not _kernels.COMPILED, reason="IPY_MEMORY_PURE_PYTHON is set")


def test_the_extension_is_built_and_used():
    if os.environ.get("IPY_MEMORY_PURE_PYTHON"):
        assert not _kernels.COMPILED and _kernels.column_scores is _kernels.column_scores_numpy
        return
    assert _kernels.COMPILED, "ipy_memory/csrc (the _speedups extension) was not built: is a C compiler installed? (make test rebuilds it)"
    assert _kernels.column_scores is _kernels._speedups.column_scores


def test_pure_python_switch_turns_the_extension_off():
    code = "from ipy_memory import _kernels; print(_kernels.COMPILED, _kernels.column_scores.__name__)"
    env = {**os.environ, "IPY_MEMORY_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "column_scores_numpy"]


def _case(seed: int, dim: int, n: int, nd: int, offset: int, with_alive: bool):
    rng = np.random.default_rng(seed)
    cols = rng.integers(-127, 128, size=(dim, n + offset + 3), dtype=np.int8)[:, offset:offset + n]
    dims = np.sort(rng.choice(dim, nd, replace=False)).astype(np.int64)
    weights = rng.standard_normal(nd).astype(np.float32)
    scale = rng.uniform(0, 0.01, n).astype(np.float32)
    scale[::13] = 0
    alive = rng.random(n) > 0.2 if with_alive else None
    return cols, dims, weights, scale, alive


@compiled
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), dim=st.integers(1, 40), n=st.integers(0, 5000), nd=st.integers(0, 40),
       offset=st.integers(0, 7), with_alive=st.booleans(), slack=st.floats(0, 10, width=32))
def test_column_scores_match_the_numpy_twin(seed, dim, n, nd, offset, with_alive, slack):
    nd = min(nd, dim)
    cols, dims, weights, scale, alive = _case(seed, dim, n, nd, offset, with_alive)
    got, want = np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32)
    _kernels._speedups.column_scores(cols, dims, weights, scale, alive, slack, got)
    _kernels.column_scores_numpy(cols, dims, weights, scale, alive, slack, want)
    # both sum in float32 in the order of dims; the C loop may fuse a multiply-add (rounding once)
    exact = (weights.astype(np.float64) @ cols[dims].astype(np.float64) + slack) * scale
    tol = 1e-5 * (np.abs(weights).sum() * 127 + slack) * scale + 1e-30
    if alive is not None:
        assert np.all(got[~alive] == -np.inf) and np.all(want[~alive] == -np.inf)
        got, want, exact, tol = got[alive], want[alive], exact[alive], tol[alive]
    assert np.all(np.abs(got - exact) <= tol) and np.all(np.abs(want - exact) <= tol)


@compiled
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), dim=st.integers(1, 40), n=st.integers(0, 20_000), nd=st.integers(0, 40),
       offset=st.integers(0, 7), masked=st.booleans(), start=st.integers(0, 2**32 - 1))
def test_column_scores_checksum_the_columns_they_read(seed, dim, n, nd, offset, masked, start):
    """With crcs, each wanted dimension's n column bytes get their CRC-32 (continued from the value
    given) in the same pass, chunk after chunk (CHUNK = 8,192 rows), and the scores do not change."""
    import zlib
    nd = min(nd, dim)
    cols, dims, weights, scale, alive = _case(seed, dim, n, nd, offset, True)
    want = np.random.default_rng(seed).random(nd) < 0.6 if masked else None
    plain, got, twin = (np.full(n, np.nan, np.float32) for _ in range(3))
    crcs, twin_crcs = np.full(nd, start, np.uint32), np.full(nd, start, np.uint32)
    _kernels._speedups.column_scores(cols, dims, weights, scale, alive, 0.5, plain)
    _kernels._speedups.column_scores(cols, dims, weights, scale, alive, 0.5, got, crcs, want)
    _kernels.column_scores_numpy(cols, dims, weights, scale, alive, 0.5, twin, twin_crcs, want)
    assert np.array_equal(got, plain, equal_nan=True)
    expected = [zlib.crc32(cols[d, :n].tobytes(), start) if want is None or want[i] else start
                for i, d in enumerate(dims.tolist())]
    assert crcs.tolist() == expected == twin_crcs.tolist()


@compiled
def test_column_scores_refuse_what_they_cannot_read_safely():
    f = _kernels._speedups.column_scores
    cols = np.zeros((4, 10), np.int8)
    dims, w, scale, out = np.array([0, 3]), np.ones(2, np.float32), np.ones(10, np.float32), np.empty(10, np.float32)
    f(cols, dims, w, scale, None, 0.0, out)                                      # the valid call
    bad = [
        ((cols, np.array([0, 4]), w, scale, None, 0.0, out), IndexError),        # a dimension past the end
        ((cols, np.array([-1, 0]), w, scale, None, 0.0, out), IndexError),
        ((cols.astype(np.int16), dims, w, scale, None, 0.0, out), TypeError),    # int8 columns only
        ((cols, dims.astype(np.int32), w, scale, None, 0.0, out), TypeError),
        ((cols, dims, w[:1], scale, None, 0.0, out), ValueError),                # one weight per dimension
        ((cols, dims, w, scale[:9], None, 0.0, out), ValueError),                # one scale per row
        ((cols, dims, w, scale, np.ones(9, bool), 0.0, out), ValueError),
        ((cols[:, :5], dims, w, scale, None, 0.0, out), ValueError),             # fewer rows than out
        ((np.asfortranarray(cols), dims, w, scale, None, 0.0, out), ValueError),  # rows not contiguous
        ((cols, dims, w, scale, None, 0.0, out.astype(np.float64)), TypeError),
        ((cols, dims, w, scale, None, 0.0, np.empty(20, np.float32)[::2]), ValueError),   # out not contiguous
        ((cols, dims, w, scale, None, "x", out), TypeError),
        ((cols[0], dims, w, scale, None, 0.0, out), TypeError),                  # 1-d columns
        ((cols, dims, w, scale, None, 0.0, out, np.zeros(3, np.uint32)), ValueError),   # a CRC per dimension
        ((cols, dims, w, scale, None, 0.0, out, np.zeros(2, np.uint64)), ValueError),   # uint32 CRCs
        ((cols, dims, w, scale, None, 0.0, out, np.zeros(2, np.int64)), TypeError),
        ((cols, dims, w, scale, None, 0.0, out, np.zeros(2, np.uint32), np.ones(3, bool)), ValueError),
        ((cols, dims, w, scale, None, 0.0, out, None, np.ones(2, bool)), ValueError),   # want needs crcs
    ]
    for args, error in bad:
        with pytest.raises(error):
            f(*args)
    frozen = np.empty(10, np.float32)
    frozen.setflags(write=False)
    with pytest.raises((TypeError, ValueError, BufferError)):
        f(cols, dims, w, scale, None, 0.0, frozen)                               # out must be writable


@compiled
def test_column_scores_release_the_gil():
    """Another thread runs while the kernel does. With a switch interval far longer than the test,
    the main thread never hands the GIL over by itself: the counting thread can only advance while
    the kernel has released it (holding it, the count stays 0)."""
    import threading
    import time
    cols = np.ones((64, 200_000), np.int8)
    dims = np.arange(64, dtype=np.int64)
    w, scale, out = np.ones(64, np.float32), np.ones(200_000, np.float32), np.empty(200_000, np.float32)
    ticks, done, started = [0], threading.Event(), threading.Event()

    def count():
        started.set()
        while not done.is_set():
            ticks[0] += 1
            time.sleep(0)            # hands the GIL back: the main thread is never starved

    interval = sys.getswitchinterval()
    t = threading.Thread(target=count)
    t.start()
    started.wait()
    sys.setswitchinterval(1000)
    try:
        before = ticks[0]
        for _ in range(50):
            _kernels._speedups.column_scores(cols, dims, w, scale, None, 0.0, out)
        advanced = ticks[0] - before
    finally:
        sys.setswitchinterval(interval)
        done.set()
        t.join()
    assert np.all(out == 64) and advanced > 0


def _postings(rng, size, n, with_shared):
    slots = np.sort(rng.choice(size, min(n, size), replace=False)).astype(np.int32)
    tf = rng.integers(1, 4, len(slots)).astype(np.float32)
    shared = rng.random(len(slots)) < 0.3 if with_shared else None
    return slots, tf, shared


@compiled
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(1, 3000), n=st.integers(0, 400),
       mode=st.sampled_from(["norm", "norm+shared", "flat"]))
def test_bm25_add_matches_the_numpy_twin_bit_for_bit(seed, size, n, mode):
    rng = np.random.default_rng(seed)
    slots, tf, shared = _postings(rng, size, n, mode == "norm+shared")
    norm = rng.uniform(0.3, 3, 60).astype(np.float32)
    lens = rng.integers(0, 60, size).astype(np.int32)
    if mode == "flat":
        norm = lens = None
    base = rng.random(size + 1).astype(np.float32)
    got, want = base.copy(), base.copy()
    _kernels._speedups.bm25_add(got, slots, tf, norm, lens, shared, 1.2, 2.7)
    _kernels.bm25_add_numpy(want, slots, tf, norm, lens, shared, 1.2, 2.7)
    assert np.array_equal(got, want)


@compiled
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(2, 3000), n=st.integers(0, 400), with_shared=st.booleans())
def test_context_add_matches_the_numpy_twin_bit_for_bit(seed, size, n, with_shared):
    rng = np.random.default_rng(seed)
    slots, tf, shared = _postings(rng, size, n, with_shared)
    # neighbours one-to-one like prev/next links: a random permutation's predecessor and successor
    order = rng.permutation(size)
    prev, nxt = np.full(size + 1, -1, np.int32), np.full(size + 1, -1, np.int32)
    cut = rng.random(size) < 0.2                      # some nodes start a new thread: no neighbour
    for a, b, c in zip(order[:-1], order[1:], cut[1:]):
        if not c:
            nxt[a], prev[b] = b, a
    around = np.stack([prev, nxt, rng.integers(0, 50, size + 1), rng.integers(0, 50, size + 1)], 1).astype(np.int32)
    dead = np.append(rng.random(size) < 0.1, False)
    norm = rng.uniform(0.3, 3, 50).astype(np.float32)
    base = rng.random(size + 1).astype(np.float32)
    got, want = base.copy(), base.copy()
    tfc_got, tfc_want = np.zeros(size + 1, np.float32), np.zeros(size + 1, np.float32)
    args = (around, slots, tf, dead, shared, 1.2, (0, 1, 2, 3), norm, 0.8)
    _kernels._speedups.context_add(got, tfc_got, *args)
    _kernels.context_add_numpy(want, tfc_want, *args)
    assert np.array_equal(got[:size], want[:size])            # the last slot is the sentinel's
    assert not tfc_got.any() and not tfc_want.any()          # the scratch is zero again


@compiled
@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(0, 2000),
       weights=st.lists(st.sampled_from([0.0, 0.25, 0.5]), min_size=0, max_size=4))
def test_neighbours_matches_its_twin_and_the_per_slot_walk(seed, size, weights):
    from types import SimpleNamespace

    from ipy_memory import _lexscore
    rng = np.random.default_rng(seed)
    prev, nxt = np.full(size + 1, -1, np.int32), np.full(size + 1, -1, np.int32)
    order = rng.permutation(size)                     # threads: runs of a permutation
    for a, b, cut in zip(order[:-1], order[1:], rng.random(size) < 0.2):
        if not cut:
            nxt[a], prev[b] = b, a
    length = np.append(rng.integers(0, 40, size).astype(np.float64) * (rng.random(size) > 0.1), 0.0)
    distances = np.array([d + 1 for d, w in enumerate(weights) if w], np.int32)
    got = [np.empty((size + 1, 4 * len(distances)), np.int32), np.empty((len(distances), size + 1), np.int32)]
    want = [np.zeros_like(x) for x in got]
    _kernels._speedups.neighbours(prev, nxt, length, distances, *got)
    _kernels.neighbours_numpy(prev, nxt, length, distances, *want)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    # the walk that writes use for a few slots gives the same rows (here: for every slot)
    shard = SimpleNamespace(s=SimpleNamespace(neighbor_weights=tuple(weights)))
    hops = _lexscore._walk(shard, None, (prev, nxt))
    ctx = _lexscore._contexts(length.__getitem__, hops)
    assert all(np.array_equal(c, g) for c, g in zip(ctx, got[1])) and len(ctx) == len(got[1])
    if len(distances):
        assert np.array_equal(_lexscore._around(ctx, hops), got[0])


@compiled
def test_neighbours_refuses_bad_links_and_shapes():
    prev, nxt, length = np.array([-1, 0, 7, -1], np.int32), np.array([1, -1, -1, -1], np.int32), np.ones(4)
    out = np.empty((4, 4), np.int32), np.empty((1, 4), np.int32)
    with pytest.raises(IndexError):                   # a link past the columns
        _kernels._speedups.neighbours(prev, nxt, length, np.array([1], np.int32), *out)
    prev[2] = 1
    with pytest.raises(ValueError):                   # distances start at 1 and ascend
        _kernels._speedups.neighbours(prev, nxt, length, np.array([0], np.int32), *out)
    with pytest.raises(ValueError):                   # 4 columns a distance
        _kernels._speedups.neighbours(prev, nxt, length, np.array([1, 2], np.int32), *out)
    _kernels._speedups.neighbours(prev, nxt, length, np.array([1], np.int32), *out)
    assert out[0][:, :2].tolist() == [[-1, 1], [0, -1], [1, -1], [-1, -1]]


@compiled
@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(1, 3000), share=st.floats(0, 1), aliased=st.booleans())
def test_reply_add_matches_its_twin_bit_for_bit(seed, size, share, aliased):
    rng = np.random.default_rng(seed)
    own = np.where(rng.random(size + 1) < 0.5, rng.random(size + 1), 0).astype(np.float32)
    own[size] = 0                                              # the sentinel
    asking = np.flatnonzero(rng.random(size) < share)
    answering = np.minimum(asking + 1, size - 1).astype(np.int32)   # questions answered by the next slot,
    answering[rng.random(len(asking)) < 0.2] = -1                    # which may ask too (chains), or by none
    if aliased:                                                # score is own: reads come before adds
        got, want = own.copy(), own.copy()
        _kernels._speedups.reply_add(got, got, asking, answering, 0.7)
        _kernels.reply_add_numpy(want, want, asking, answering, 0.7)
    else:
        got, want = np.ones_like(own), np.ones_like(own)
        _kernels._speedups.reply_add(got, own, asking, answering, 0.7)
        _kernels.reply_add_numpy(want, own, asking, answering, 0.7)
    assert np.array_equal(got, want)
    if aliased and len(asking):                                # against a loop over a copy
        ref = own.copy()
        for q, a in zip(asking, answering):
            if own[q] > 0 and a >= 0:
                ref[a] += np.float32(0.7) * own[q]
        assert np.array_equal(got, ref)


@compiled
def test_reply_add_refuses_questions_and_answers_past_the_scores():
    score = np.ones(5, np.float32)
    with pytest.raises(IndexError):
        _kernels._speedups.reply_add(score, score, np.array([1, 7]), np.array([2, 3], np.int32), 1.0)
    with pytest.raises(IndexError):
        _kernels._speedups.reply_add(score, score, np.array([1, 2]), np.array([2, 9], np.int32), 1.0)
    with pytest.raises(ValueError):
        _kernels._speedups.reply_add(score, score, np.array([1, 2]), np.array([2], np.int32), 1.0)


@compiled
def test_lexical_kernels_refuse_indices_past_the_arrays():
    out, tf = np.zeros(10, np.float32), np.ones(3, np.float32)
    norm, lens = np.ones(5, np.float32), np.zeros(10, np.int32)
    with pytest.raises(IndexError):
        _kernels._speedups.bm25_add(out, np.array([1, 2, 10], np.int32), tf, norm, lens, None, 1.0, 1.0)
    with pytest.raises(IndexError):                           # a length past the norm table
        _kernels._speedups.bm25_add(out, np.array([1, 2, 3], np.int32), tf, norm, lens + 5, None, 1.0, 1.0)
    with pytest.raises(ValueError):
        _kernels._speedups.bm25_add(out, np.array([1, 2], np.int32), tf, norm, lens, None, 1.0, 1.0)
    with pytest.raises(TypeError):
        _kernels._speedups.bm25_add(out, np.array([1, 2, 3], np.int64), tf, norm, lens, None, 1.0, 1.0)
    around = np.zeros((10, 4), np.int32)
    around[3, 0] = 99                                         # a neighbour past the scores
    ctx = (out, np.zeros(10, np.float32), around)
    rest = (np.zeros(10, bool), None, 1.0, (0, 1, 2, 3), norm, 1.0)
    with pytest.raises(IndexError):
        _kernels._speedups.context_add(*ctx, np.array([1, 2, 3], np.int32), tf, *rest)
    with pytest.raises(IndexError):
        _kernels._speedups.context_add(*ctx, np.array([1, 2, 11], np.int32), tf, *rest)
    with pytest.raises(ValueError):                           # a column past the rows' width
        _kernels._speedups.context_add(*ctx, np.array([1, 2, 4], np.int32), tf, np.zeros(10, bool), None, 1.0,
                                       (0, 1, 2, 4), norm, 1.0)


@compiled
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 5000), asked=st.integers(0, 31),
       density=st.floats(0, 1))
def test_priors_and_nonzero_match_their_numpy_twins_bit_for_bit(seed, n, asked, density):
    rng = np.random.default_rng(seed)
    score = np.where(rng.random(n) < density, rng.random(n), 0).astype(np.float32)
    keep = np.where(rng.random(n + 3) < 0.2, rng.choice([0, 0.5], n + 3), 1).astype(np.float32)
    cues = rng.integers(0, 32, n + 3).astype(np.uint8)
    got, want = score.copy(), score.copy()
    _kernels._speedups.priors(got, keep, cues, asked, 1.3)
    _kernels.priors_numpy(want, keep, cues, asked, 1.3)
    assert np.array_equal(got, want)
    assert np.array_equal(_kernels._flatnonzero(got), _kernels.flatnonzero_numpy(want))
    assert np.array_equal(_kernels._flatnonzero(got), np.flatnonzero(want))


@compiled
@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 3000), density=st.floats(0, 1),
       floor=st.floats(-2, 2) | st.sampled_from([0.0, -0.0, np.inf, -np.inf]))
def test_nonzero_over_a_floor_matches_its_twin(seed, n, density, floor):
    rng = np.random.default_rng(seed)
    values = np.where(rng.random(n) < density, rng.standard_normal(n), 0).astype(np.float32)
    if n:                     # the floor itself, and floors a hair either side of a value (doubles between floats)
        x = float(values[rng.integers(n)])
        floor = [floor, x, np.nextafter(x, np.inf), np.nextafter(x, -np.inf)][seed % 4]
    want = np.flatnonzero((values != 0) & (values.astype(np.float64) >= floor))
    assert np.array_equal(_kernels._flatnonzero(values, floor), want)
    assert np.array_equal(_kernels.flatnonzero_numpy(values, floor), want)


@compiled
def test_whole_array_kernels_refuse_short_arrays():
    with pytest.raises(ValueError):
        _kernels._speedups.priors(np.ones(5, np.float32), np.ones(4, np.float32), np.zeros(5, np.uint8), 1, 1.3)
    with pytest.raises(ValueError):
        _kernels._speedups.priors(np.ones(5, np.float32), np.ones(5, np.float32), np.zeros(4, np.uint8), 1, 1.3)
    with pytest.raises(TypeError):
        _kernels._speedups.priors(np.ones(5, np.float64), np.ones(5, np.float32), np.zeros(5, np.uint8), 1, 1.3)
    with pytest.raises(ValueError):
        _kernels._speedups.nonzero(np.ones(5, np.float32), np.empty(4, np.int64))
    with pytest.raises(TypeError):
        _kernels._speedups.nonzero(np.ones(5, np.float32), np.empty(5, np.int32))
    with pytest.raises(ValueError):
        _kernels._speedups.nonzero(np.ones(5, np.float32), np.empty(5, np.int64), float("nan"))


@compiled
@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=700), value=st.integers(0, 2**32 - 1), cut=st.integers(0, 700))
def test_crc32_equals_zlib(data, value, cut):
    import zlib
    f = _kernels._speedups.crc32
    assert f(data, value) == zlib.crc32(data, value) and f(data) == zlib.crc32(data)
    assert f(data, value, False) == zlib.crc32(data, value)          # 128-bit folds only
    assert f(data[cut:], f(data[:cut])) == zlib.crc32(data)          # continued like zlib's


@compiled
def test_crc32_of_large_and_odd_buffers_equals_zlib():
    import zlib
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, 3_000_017, dtype=np.uint8)
    # 64 bytes: the 128-bit folds; 256: the 512-bit ones where the CPU has them (WIDE_CRC32), whose
    # last whole 64 bytes are folded one register at a time, and the last 16s in 128 bits
    for n in (63, 64, 65, 79, 80, 127, 128, 129, 255, 256, 257, 271, 272, 319, 320, 336, 511, 512, 513,
              4096 + 15, 4096 + 240, len(data)):
        for at in (0, 1, 7):
            expected = zlib.crc32(data[at:at + n].tobytes())
            assert _kernels._speedups.crc32(data[at:at + n]) == expected, (at, n)
            assert _kernels._speedups.crc32(data[at:at + n], 0, False) == expected, (at, n)
    assert _kernels._speedups.crc32(memoryview(data.tobytes())[5:]) == zlib.crc32(data[5:].tobytes())
    assert _kernels.crc32 is (_kernels._speedups.crc32 if _kernels._speedups.FAST_CRC32 else zlib.crc32)
    with pytest.raises(TypeError):
        _kernels._speedups.crc32("text")


@compiled
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 40), width=st.integers(0, 300),
       offset=st.integers(0, 50), dtype=st.sampled_from(["int8", "float16", "uint32"]))
def test_crc32_rows_match_the_twin_and_zlib(seed, rows, width, offset, dtype):
    import zlib
    rng = np.random.default_rng(seed)
    mat = rng.integers(0, 100, (rows, width + offset)).astype(dtype)[:, offset:]      # rows strided
    pick = rng.integers(0, rows, rng.integers(0, 2 * rows + 1)).astype(np.int64)
    out, twin = np.zeros(len(pick), np.uint32), np.zeros(len(pick), np.uint32)
    _kernels._speedups.crc32_rows(mat, pick, out)
    _kernels.crc32_rows_python(mat, pick, twin)
    assert out.tolist() == twin.tolist() == [zlib.crc32(mat[r].tobytes()) for r in pick]


@compiled
def test_crc32_rows_refuse_rows_past_the_matrix_and_bad_arrays():
    mat = np.zeros((4, 8), np.int8)
    for f in (_kernels._speedups.crc32_rows, _kernels.crc32_rows_python):
        with pytest.raises(IndexError):
            f(mat, np.array([0, 4]), np.zeros(2, np.uint32))
        with pytest.raises(IndexError):
            f(mat, np.array([-1]), np.zeros(1, np.uint32))
    with pytest.raises(ValueError):
        _kernels._speedups.crc32_rows(mat, np.array([0, 1]), np.zeros(1, np.uint32))      # out too short
    with pytest.raises(ValueError):
        _kernels._speedups.crc32_rows(mat[:, ::2], np.array([0]), np.zeros(1, np.uint32))  # rows not contiguous
    with pytest.raises(TypeError):
        _kernels._speedups.crc32_rows(mat, np.array([0], np.int32), np.zeros(1, np.uint32))


def _hash_case(rng, n, entries, feats_per_word, dim):
    lens = rng.integers(0, feats_per_word + 1, entries).astype(np.int64)
    starts = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64)
    slots = rng.integers(0, dim, int(lens.sum()) + 5).astype(np.int32)          # a longer cache, as in use
    signs = rng.choice(np.array([-1, 1], np.int8), len(slots))
    hashes = rng.integers(0, 2**63, entries, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, entries, dtype=np.uint64)
    per = rng.integers(0, 12, n).astype(np.int64)
    ids = rng.integers(0, max(entries, 1), int(per.sum())).astype(np.int64) if entries else np.zeros(0, np.int64)
    log_tf = np.array([1.0 + np.log(c) for c in range(1, 17)], np.float32)
    return ids, per, starts, lens, hashes, slots, signs, log_tf


@compiled
@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 30), entries=st.integers(1, 60),
       feats=st.integers(0, 25), dim=st.sampled_from([1, 7, 64, 384]))
def test_hash_rows_match_the_numpy_twin_bit_for_bit(seed, n, entries, feats, dim):
    rng = np.random.default_rng(seed)
    args = _hash_case(rng, n, entries, feats, dim)
    got, want = np.full((n, dim), np.nan, np.float32), np.full((n, dim), np.nan, np.float32)
    if not args[0].size:
        return                       # (the embedder never calls it without words)
    _kernels._speedups.hash_rows(*args, got)
    _kernels.hash_rows_numpy(*args, want)
    assert np.array_equal(got, want)


@compiled
def test_the_hashing_embedder_gives_the_same_vectors_with_either_kernel(monkeypatch):
    from ipy_memory.embeddings.hashing import HashEmbedder
    rng = np.random.default_rng(5)
    vocab = ["kelp", "tide", "the", "Boat", "naïve", "2023", "光遗传学", "艺术", "x", "don't", "net", "crab"]
    texts = [" ".join(rng.choice(vocab, rng.integers(0, 30))) for _ in range(200)] + ["", "kelp kelp kelp kelp"]
    compiled_vecs = HashEmbedder().embed(texts)
    monkeypatch.setattr(_kernels, "hash_rows", _kernels.hash_rows_numpy)
    assert np.array_equal(HashEmbedder().embed(texts), compiled_vecs)


@compiled
def test_hash_rows_refuse_inconsistent_arrays():
    rng = np.random.default_rng(1)
    ids, per, starts, lens, hashes, slots, signs, log_tf = _hash_case(rng, 4, 10, 5, 16)
    out = np.empty((4, 16), np.float32)
    f = _kernels._speedups.hash_rows
    f(ids, per, starts, lens, hashes, slots, signs, log_tf, out)
    bad_ids = ids.copy()
    bad_ids[0] = 10                                         # past the entries
    with pytest.raises(ValueError):
        f(bad_ids, per, starts, lens, hashes, slots, signs, log_tf, out)
    with pytest.raises(ValueError):                          # words do not add up to per_text
        f(ids[1:], per, starts, lens, hashes, slots, signs, log_tf, out)
    long_lens = lens.copy()
    long_lens[3] = 10_000                                   # a feature range past the cache
    with pytest.raises(ValueError):
        f(ids, per, starts, long_lens, hashes, slots, signs, log_tf, out)
    with pytest.raises(ValueError):                          # more words in a text than log_tf covers
        f(ids, per, starts, lens, hashes, slots, signs, log_tf[:2], out)
    far = slots.copy()
    far[:] = 16                                             # slots must be below dim
    with pytest.raises(IndexError):
        f(ids, per, starts, lens, hashes, far, signs, log_tf, out)
    with pytest.raises(TypeError):
        f(ids, per, starts, lens, hashes.astype(np.int64), slots, signs, log_tf, out)


def _word_cache_for(kernel, entries: dict | None = None):
    """The cache each twin of index_batch takes: a word table for the compiled one, a dict for
    the Python twin; holding `entries` (stored through the kernel itself, from a miss function)."""
    if kernel is _wordkernels.index_batch_python:
        return dict(entries or {})
    table = _wordkernels.word_table(64)
    if entries:
        _batch(kernel, [tuple(entries)], table, entries.__getitem__, {})
    return table


def _batch(kernel, per_text, cache, miss, vocab, known=None):
    """kernel (a twin of index_batch) over per_text: [(terms, counts)] a text, as lists (`known`: a
    fresh table of the terms vocab holds unless given)."""
    total = sum(map(len, per_text))
    terms, counts, distinct = np.empty(total, np.int64), np.empty(total, np.int32), np.empty(len(per_text), np.int64)
    if known is None:
        known = {} if kernel is _wordkernels.index_batch_python else _wordkernels.word_table(1024)
    n = kernel(per_text, cache, miss, vocab, known, terms, counts, distinct)
    assert n == distinct.sum()
    ends = np.cumsum(distinct)
    return [(terms[e - d:e].tolist(), counts[e - d:e].tolist()) for d, e in zip(distinct, ends)]


def _one(kernel, words, cache, miss, vocab):
    """kernel over one text: (terms, counts)."""
    return _batch(kernel, [tuple(words)], cache, miss, vocab)[0]


@compiled
@settings(max_examples=100, deadline=None)
@given(words=st.lists(st.sampled_from(["kelp", "tide", "net", "x1", "crab", "gull", "42", "naïve"]), max_size=150),
       known=st.lists(st.sampled_from(["kelp", "net", "x1"]), max_size=3))     # (past 64 words: a heap table)
def test_index_terms_match_the_python_twin(words, known):
    def entry(word):         # few terms: several words share one, expandable or not
        return (sum(map(ord, word)) % 7) << 1 | word.isalpha()

    def miss(word, calls):
        calls.append(word)
        return entry(word)
    runs = []
    for f in (_kernels._speedups.index_batch, _wordkernels.index_batch_python):
        cache = _word_cache_for(f, {w: entry(w) for w in known})
        vocab, calls = {3: "preset"}, []
        out = _one(f, tuple(words), cache, lambda w: miss(w, calls), vocab)
        again = _one(f, tuple(words), cache, lambda w: miss(w, calls), dict(vocab))    # every word cached now
        runs.append((out, vocab, calls, again))
    assert runs[0] == runs[1]
    terms, counts = runs[0][0]
    assert sum(counts) == len(words) and len(set(terms)) == len(terms)
    own = {"42"}             # an ASCII number is its own term: no call
    assert sorted(set(runs[0][2])) == sorted(runs[0][2]) == sorted(set(words) - set(known) - own)   # each miss once
    assert runs[0][3] == runs[0][0]


@settings(max_examples=200, deadline=None)
@given(words=st.lists(st.one_of(st.text(alphabet="0123456789", min_size=1, max_size=6),
                                st.text(alphabet="光ぁ한぀ヿ䶿鿿가﫿", min_size=1, max_size=2),
                                st.text(alphabet="ab9é٣　ﾟ", min_size=1, max_size=4)), max_size=20))
def test_index_terms_give_cjk_grams_and_numbers_index_words_entry_without_a_call(words):
    kernels = [_wordkernels.index_batch_python] + ([_kernels._speedups.index_batch] if _kernels.COMPILED else [])
    for f in kernels:
        cache, calls = {}, []
        got = _one(f, tuple(words), _word_cache_for(f), lambda w: calls.append(w) or _text.index_word(w), {})
        tf = {}
        for w in words:
            tf[_text.index_word(w) >> 1] = tf.get(_text.index_word(w) >> 1, 0) + 1
        assert got == (list(tf), list(tf.values()))
        assert set(calls) == {w for w in words if not (_text.is_cjk(w) or (w.isascii() and w.isdigit()))}


@settings(max_examples=100, deadline=None)
@given(texts=st.lists(st.lists(st.sampled_from(["kelp", "kelps", "tide", "net", "x1", "42", "光ぁ", "naïve"]),
                               max_size=70), max_size=6),
       known=st.lists(st.sampled_from(["kelp", "net", "x1"]), max_size=3))
def test_a_batch_gives_each_text_what_it_gives_alone(texts, known):
    """Terms and counts of each text, the vocabulary's words and the misses (each new word once) as
    if the texts came one by one; the compiled kernel as its twin."""
    def entry(word):
        return (sum(map(ord, word)) % 5) << 1 | word.isalpha()
    runs = []
    kernels = [_wordkernels.index_batch_python] + ([_kernels._speedups.index_batch] if _kernels.COMPILED else [])
    for f in kernels:
        for together in (True, False):
            cache = _word_cache_for(f, {w: entry(w) for w in known})
            vocab, calls = {}, []

            def miss(w):
                calls.append(w)
                return entry(w)
            per_text = [tuple(t) for t in texts]
            got = (_batch(f, per_text, cache, miss, vocab) if together
                   else [_one(f, t, cache, miss, vocab) for t in per_text])
            runs.append((got, vocab, calls))
    assert all(run == runs[0] for run in runs)
    assert len(runs[0][2]) == len(set(runs[0][2]))


@compiled
def test_index_terms_offer_the_first_expandable_word_of_a_term():
    for f in (_kernels._speedups.index_batch, _wordkernels.index_batch_python):
        vocab = {}
        entries = {"kelps": 9 << 1 | 1, "kelp": 9 << 1 | 1, "net": 4 << 1 | 1}
        cache = _word_cache_for(f, entries)
        assert _one(f, ("42", "kelps", "kelp", "42", "net"), cache, None, vocab) == ([_text.index_word("42") >> 1, 9, 4],
                                                                             [2, 2, 1])
        assert vocab == {9: "kelps", 4: "net"}
        vocab = {4: "nets"}
        assert _one(f, ("net", "net"), cache, None, vocab) == ([4], [2]) and vocab == {4: "nets"}


@compiled
def test_terms_known_to_be_in_the_vocabulary_are_not_looked_up_there():
    """`known` holds terms vocab holds: they are not offered again (a stand-in vocab shows it), and
    every term offered is added to it."""
    entries = {"kelps": 9 << 1 | 1, "net": 4 << 1 | 1, "tide": 6 << 1}
    for f in (_kernels._speedups.index_batch, _wordkernels.index_batch_python):
        known = _word_cache_for(f)
        _batch(f, [("kelps",)], _word_cache_for(f, entries), None, {9: "kelp"}, known)      # 9 is known now
        vocab = {}
        assert _batch(f, [("kelps", "net", "tide")], _word_cache_for(f, entries), None, vocab, known) == [([9, 4, 6],
                                                                                                      [1, 1, 1])]
        assert vocab == {4: "net"}                     # 9 was not looked up, 6 is not expandable
        if isinstance(known, dict):
            assert set(known) == {9, 4}
        else:
            keys = known[1::_wordkernels.WORD_SLOT]
            assert known[0] == 2 and sorted(keys[keys != 0].tolist()) == [4 | 1 << 63, 9 | 1 << 63]
    with pytest.raises(ValueError):
        table = _wordkernels.word_table(16)
        _batch(_kernels._speedups.index_batch, [("kelp",)], table, lambda w: 3, {}, table)  # not the word table


@compiled
def test_index_terms_errors_reach_the_caller():
    f = _kernels._speedups.index_batch

    def table():
        return _wordkernels.word_table(16)
    with pytest.raises(TypeError):
        _one(f, ("kelp",), table(), lambda w: (5, True), {})      # an entry that is not term * 2 + expandable
    with pytest.raises(TypeError):
        _one(f, ("kelp",), table(), lambda w: -2, {})             # ... nor a negative one
    with pytest.raises(TypeError):
        _one(f, ("kelp",), table(), lambda w: 1 << 64, {})        # ... nor one past 64 bits
    with pytest.raises(ZeroDivisionError):
        _one(f, ("kelp",), table(), lambda w: 1 / 0, {})          # the miss function's own error
    with pytest.raises(TypeError):
        _batch(f, ("kelp",), table(), lambda w: 3, {})            # per_text must be a list
    with pytest.raises(TypeError):
        _batch(f, [["kelp"]], table(), lambda w: 3, {})           # ... of tuples
    with pytest.raises(TypeError):
        _one(f, ([1],), table(), lambda w: 3, {})                  # ... of str
    room = (np.empty(2, np.int64), np.empty(2, np.int32), np.empty(1, np.int64))
    for i, short in enumerate((np.empty(1, np.int64), np.empty(1, np.int32), np.empty(2, np.int64))):
        with pytest.raises(ValueError):                            # room for every word, a count per text
            f([("kelp", "tide")], table(), lambda w: 3, {}, table(), *room[:i], short, *room[i + 1:])
    with pytest.raises(TypeError):
        f([("kelp", "tide")], table(), lambda w: 3, {}, table(), room[0], room[0], room[2])   # counts are int32
    with pytest.raises(TypeError):
        f([("kelp", "tide")], table(), lambda w: 3, {}, {}, *room)                          # known is a word table
    with pytest.raises(TypeError):
        _one(f, ("kelp",), {}, lambda w: 3, {})                    # the cache must be a word table
    for bad in (np.zeros(1 + 3 * 12, np.uint64), np.zeros(3 * 16, np.uint64), np.zeros(4, np.uint64),
                np.zeros(1 + 2 * 16, np.uint64)):
        with pytest.raises(ValueError):
            _one(f, ("kelp",), bad, lambda w: 3, {})              # not 1 + 3 * a power of two >= 2
    overfull = table()
    overfull[0] = 17
    with pytest.raises(ValueError):
        _one(f, ("kelp",), overfull, lambda w: 3, {})


@compiled
def test_word_tables_keep_words_apart_fill_to_three_quarters_and_move():
    f, move = _kernels._speedups.index_batch, _kernels._speedups.word_table_move
    words = [f"w{i}" for i in range(40)] + ["é", "ωω", "\U0001f600", "e\u0301", "ab" * 9]   # every kind and length
    entry = {w: i << 1 for i, w in enumerate(words)}
    small = _wordkernels.word_table(16)
    got = _one(f, tuple(words), small, entry.__getitem__, {})
    assert got == ([i for i in range(len(words))], [1] * len(words))
    slot = _wordkernels.WORD_SLOT                                              # (key, check, entry)
    assert small[0] == 12 and np.count_nonzero(small[1::slot]) == 12       # stops storing at 3/4 full
    big = _wordkernels.word_table(128)
    move(small, big)
    assert big[0] == 12 and (sorted(big[3::slot][big[1::slot] != 0].tolist())
                             == sorted(small[3::slot][small[1::slot] != 0].tolist()))
    calls = []
    assert _one(f, tuple(words), big, lambda w: calls.append(w) or entry[w], {}) == got
    assert calls == words[12:]                                            # the moved ones were found
    with pytest.raises(ValueError):
        move(big, small)                                                  # too little room
    with pytest.raises(ValueError):
        move(big, big)


def test_the_lexical_word_cache_grows_and_starts_afresh(monkeypatch):
    from ipy_memory import lexical
    if not _kernels.COMPILED:
        monkeypatch.setattr(lexical, "_word_table", {})
        monkeypatch.setattr(lexical, "_WORD_SLOTS_MAX", 64)
        lexical.index_terms([f"word{i}" for i in range(40)], {})
        assert len(lexical._word_cache(0)) == 0                           # past half of the most: cleared
        return
    monkeypatch.setattr(lexical, "_word_table", _wordkernels.word_table(16))
    monkeypatch.setattr(lexical, "_WORD_SLOTS_MAX", 64)
    for i in range(0, 40, 4):
        words = [f"word{j}" for j in range(i, i + 4)]
        assert lexical.index_terms(words, {}) == ([_text.index_word(w) >> 1 for w in words], [1] * 4)
    table = lexical._word_cache(0)
    # grown to the most, afresh when a batch would take it past 32 words: the last two batches' 8 words
    assert len(table) == 1 + _wordkernels.WORD_SLOT * 64 and table[0] == 8
    assert lexical.index_terms(["word1"], {}) == ([_text.index_word("word1") >> 1], [1])


@compiled
@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=300))
def test_blake2b64_equals_hashlib(text):
    assert _kernels._speedups.blake2b64(text) == _wordkernels.blake2b64_python(text)


@compiled
def test_blake2b64_at_block_edges_and_on_bad_input():
    f = _kernels._speedups.blake2b64
    for n in (0, 1, 63, 64, 127, 128, 129, 255, 256, 257, 1000, 4096):
        for text in ("a" * n, "é" * n, "\U0001f600" * n):
            assert f(text) == _wordkernels.blake2b64_python(text), (n, text[:1])
    with pytest.raises(UnicodeEncodeError):
        f("lone \ud800 surrogate")
    with pytest.raises(UnicodeEncodeError):
        _wordkernels.blake2b64_python("lone \ud800 surrogate")
    with pytest.raises(TypeError):
        f(b"bytes")


@compiled
@settings(max_examples=200, deadline=None)
@given(words=st.lists(st.text(min_size=0, max_size=70), min_size=1, max_size=6),
       sizes=st.sampled_from([(3, 4, 5), (1,), (2, 6), (40,)]))
def test_gram_hashes_match_the_python_twin(words, sizes):
    got, want = {}, {}
    for w in words:            # a shared cache, as the embedder keeps one: later words reuse grams
        marked = f"<{w}>"
        assert _kernels._speedups.gram_hashes(marked, got, sizes) == _wordkernels.gram_hashes_python(marked, want, sizes)
    assert got == want


@compiled
@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**64 - 1) | st.sampled_from([0, 1, 2**30 - 1, 2**30, 2**60 - 1, 2**60, 2**63, 2**64 - 1]))
def test_gram_hashes_read_cached_ints_as_they_are(value):
    """A cached gram's int is read from its digits where they fit (csrc/blake2b.c gram_value)."""
    assert _kernels._speedups.gram_hashes("abc", {"abc": value}, (3,)) == [value]
    assert _kernels._speedups.gram_hashes("abc", {"abc": type("I", (int,), {})(value)}, (3,)) == [value]
    for bad in (-1, -value - 1, 2**64 + value):       # as PyLong_AsUnsignedLongLong refuses them
        with pytest.raises(OverflowError):
            _kernels._speedups.gram_hashes("abc", {"abc": bad}, (3,))


@compiled
def test_gram_hashes_refuse_bad_sizes_in_both_twins():
    for f in (_kernels._speedups.gram_hashes, _wordkernels.gram_hashes_python):
        with pytest.raises(ValueError):
            f("<word>", {}, (3, 0))
        with pytest.raises(TypeError):
            f("<word>", {}, (3.5,))


@compiled
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 3000), runs=st.integers(0, 300),
       overlapping=st.booleans())
def test_add_runs_match_the_numpy_twin_bit_for_bit(seed, n, runs, overlapping):
    rng = np.random.default_rng(seed)
    count = rng.integers(0, 8, runs).astype(np.int64)
    if overlapping:          # any runs inside the array, in any order
        first = np.array([rng.integers(0, n - c + 1) if c <= n else 0 for c in count], np.int64)
        count = np.minimum(count, n)
    else:                    # the roll-up's case: disjoint runs in slot order
        gaps = rng.integers(0, 4, runs)
        first = np.cumsum(gaps + count) - count
        keep = first + count <= n
        first, count = first[keep].astype(np.int64), count[keep]
    values = rng.standard_normal(len(first)).astype(np.float32)
    score = rng.standard_normal(n).astype(np.float32)
    got, want = score.copy(), score.copy()
    _kernels._speedups.add_runs(got, first, count, values, 0.3)
    _kernels.add_runs_numpy(want, first, count, values, 0.3)
    assert np.array_equal(got, want)


@compiled
def test_add_runs_refuse_runs_past_the_scores():
    f, score = _kernels._speedups.add_runs, np.zeros(10, np.float32)
    one = np.ones(1, np.float32)
    for first, count in ((8, 3), (-1, 1), (0, -1)):
        with pytest.raises(IndexError):
            f(score, np.array([first]), np.array([count]), one, 1.0)
    with pytest.raises(ValueError):
        f(score, np.array([0, 1]), np.array([1]), one, 1.0)
    with pytest.raises(TypeError):
        f(score, np.array([0], np.int32), np.array([1]), one, 1.0)
    assert not score.any()


@compiled
def test_kernels_returning_a_value_keep_no_reference_to_none():
    values, out = np.ones(10, np.float32), np.empty(10, np.int64)
    _kernels._speedups.nonzero(values, out)
    before = sys.getrefcount(None)
    for _ in range(5000):
        _kernels._speedups.nonzero(values, out, 0.5)
    assert sys.getrefcount(None) - before < 100          # one leaked per call before


def test_builtin_digests_are_hashlibs():
    import hashlib

    from ipy_memory import _digests
    for data in (b"", b"project:p", "ünïcode 中文".encode(), bytes(range(256)) * 9):
        assert _digests.sha1(data).hexdigest() == hashlib.sha1(data).hexdigest()
        assert _digests.sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
        assert _digests.blake2b(data, digest_size=8).digest() == hashlib.blake2b(data, digest_size=8).digest()


_WORDS = st.text(alphabet="abcé光", min_size=1, max_size=3)


@compiled
@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_WORDS, max_size=12).map(tuple), max_size=8), st.data())
def test_word_ids_match_the_twin(per_text, data):
    """The HashEmbedder's lookup: each word's index among the batch's distinct cache entries, the
    new words listed once each in the order first met and entered with entries from first_new on."""
    vocab = sorted({w for words in per_text for w in words})
    known = data.draw(st.sets(st.sampled_from(vocab)) if vocab else st.just(set()))
    entries = {w: i for i, w in enumerate(sorted(known))}
    total, first_new = sum(map(len, per_text)), len(entries)
    runs = []
    for kernel, cache in ((_kernels._speedups.word_ids, _wordkernels.word_table_room(_wordkernels.word_table(16), 200)),
                          (_wordkernels.word_ids_python, {})):
        if entries:                                                         # the known words, entered first
            kernel([tuple(sorted(known))], cache, 0, np.empty(len(known), np.int64), np.empty(len(known), np.int64))
        ids, distinct = np.full(total, -5, np.int64), np.full(total, -5, np.int64)
        count, new = kernel(per_text, cache, first_new, ids, distinct)
        again = np.full(total, -5, np.int64), np.full(total, -5, np.int64)
        runs.append((count, new, ids.tolist(), distinct[:count].tolist(), kernel(per_text, cache, 99, *again)[1]))
    assert runs[0] == runs[1]
    count, new, ids, distinct, new_again = runs[0]
    flat = [w for words in per_text for w in words]
    assert new == list(dict.fromkeys(w for w in flat if w not in known)) and new_again == []
    entry = {**entries, **{w: first_new + i for i, w in enumerate(new)}}
    assert [distinct[i] for i in ids] == [entry[w] for w in flat] and len(set(distinct)) == count


@compiled
def test_word_ids_match_the_twin_on_a_large_batch():
    """Thousands of distinct words, repeated across hundreds of texts of varied lengths: the batch's
    own table of entries grows several times (it starts small) and every index stays right."""
    rng = np.random.default_rng(7)
    pool = [f"w{i}" for i in range(6000)]
    per_text = [tuple(pool[j] for j in rng.zipf(1.3, rng.integers(0, 60)) % len(pool)) for _ in range(700)]
    total = sum(map(len, per_text))
    runs = []
    for kernel, cache in ((_kernels._speedups.word_ids, _wordkernels.word_table_room(_wordkernels.word_table(16), total)),
                          (_wordkernels.word_ids_python, {})):
        ids, distinct = np.empty(total, np.int64), np.empty(total, np.int64)
        count, new = kernel(per_text, cache, 3, ids, distinct)
        runs.append((count, new, ids.tolist(), distinct[:count].tolist()))
    assert runs[0] == runs[1]
    assert runs[0][0] > 1000     # past the batch table's first doublings


@compiled
def test_word_ids_refuse_what_they_cannot_use():
    f, ids = _kernels._speedups.word_ids, np.zeros(2, np.int64)

    def table():
        return _wordkernels.word_table(16)
    with pytest.raises(TypeError):
        f([["a", "b"]], table(), 0, ids, ids.copy())             # a list, not a tuple
    with pytest.raises(TypeError):
        f([("a", 2)], table(), 0, ids, ids.copy())               # not a str
    with pytest.raises(ValueError):
        f([("a", "b")], table(), 0, ids[:1], ids.copy())         # one id short
    with pytest.raises(TypeError):
        f([("a", "b")], table(), 0, ids.astype(np.int32), ids.copy())
    with pytest.raises(ValueError):
        f([("a", "b")], table(), -1, ids, ids.copy())            # no entry below 0
    full = table()
    full[0] = 11
    with pytest.raises(ValueError):
        f([("a", "b")], full, 0, ids, ids.copy())                # 13 > 3/4 of 16: no room for both words
    assert full[0] == 11 and not full[1:].any()                  # nothing stored
    with pytest.raises(TypeError):
        f([("a", "b")], {}, 0, ids, ids.copy())                  # the compiled one takes a word table


def test_word_table_room_grows_keeps_words_and_starts_afresh_past_most():
    table = _wordkernels.word_table(16)
    if isinstance(table, dict):
        table.update(a=1, b=2)
        assert _wordkernels.word_table_room(table, 3) is table and len(table) == 2
        assert _wordkernels.word_table_room(table, 40, most=64) == {}
        return
    _kernels._speedups.word_ids([("a", "b", "c")], table, 7, np.empty(3, np.int64), np.empty(3, np.int64))
    assert _wordkernels.word_table_room(table, 5) is table                  # 3 + 5 <= 16 / 2
    grown = _wordkernels.word_table_room(table, 6)
    assert len(grown) == 1 + _wordkernels.WORD_SLOT * 32 and grown[0] == 3
    _, new = _kernels._speedups.word_ids([("c", "a", "d")], grown, 10, np.empty(3, np.int64), np.empty(3, np.int64))
    assert new == ["d"]                                                  # the moved words are found
    assert len(_wordkernels.word_table_room(grown, 200)) == 1 + _wordkernels.WORD_SLOT * 512
    fresh = _wordkernels.word_table_room(grown, 30, most=32)
    assert len(fresh) == 1 + _wordkernels.WORD_SLOT * 64 and fresh[0] == 0  # past most: empty, room for 30


def _features_by_definition(word: str, grams: dict, sizes: tuple) -> list[int]:
    """The HashEmbedder's features of one word as its docstring defines them."""
    h = _wordkernels.blake2b64_python("w|" + word)
    return [h] if _text.is_cjk(word) else [h, *_wordkernels.gram_hashes_python(f"<{word}>", grams, sizes)]


_NEW_WORDS = st.lists(st.text(alphabet=st.sampled_from("abzé9_光ぁ한ﾟ\u30ff\u3040\u4dbf\u9fff\uac00\uf900\ufaff\ufb00"),
                              min_size=1, max_size=9), max_size=12)


@settings(max_examples=250, deadline=None)
@given(words=_NEW_WORDS, sizes=st.sampled_from([(3, 4, 5), (1,), (2, 6)]), dim=st.sampled_from([1, 7, 384]))
def test_word_features_match_their_definition_in_both_twins(words, sizes, dim):
    want = [_features_by_definition(w, {}, sizes) for w in words]
    flat = np.array([f for fs in want for f in fs], np.uint64)
    kernels = [_wordkernels.word_features_python] + ([_kernels._speedups.word_features] if _kernels.COMPILED else [])
    for kernel in kernels:
        room = len(flat) + 3
        hashes, counts = np.zeros(len(words), np.uint64), np.full(len(words), -1, np.int64)
        slots, signs, grams = np.full(room, -1, np.int32), np.zeros(room, np.int8), {}
        stored = kernel(words, grams, sizes, dim, hashes, counts, slots, signs)
        assert stored == len(flat)
        assert counts.tolist() == [len(fs) for fs in want]
        assert hashes.tolist() == [fs[0] for fs in want]
        assert slots[:stored].tolist() == (flat % np.uint64(dim)).astype(np.int64).tolist()
        assert signs[:stored].tolist() == np.where(flat >> np.uint64(63), 1, -1).tolist()
        assert (slots[stored:] == -1).all()              # nothing written past the features
        assert grams == {g: v for w in words if not _text.is_cjk(w)
                         for n in sizes for g, v in _gram_items(f"<{w}>", n)}


def _gram_items(marked, n):
    return [(marked[i:i + n], _wordkernels.blake2b64_python("c|" + marked[i:i + n])) for i in range(len(marked) - n + 1)]


def test_word_features_refuse_what_they_cannot_use():
    kernels = [_wordkernels.word_features_python] + ([_kernels._speedups.word_features] if _kernels.COMPILED else [])
    for kernel in kernels:
        h, c = np.zeros(2, np.uint64), np.zeros(2, np.int64)
        slots, signs = np.zeros(40, np.int32), np.zeros(40, np.int8)
        with pytest.raises(ValueError):
            kernel(["word", "other"], {}, (3,), 384, h, c, slots[:3], signs[:3])          # too little room
        with pytest.raises(ValueError):
            kernel(["word"], {}, (3,), 0, h, c, slots, signs)                             # no dimension
        with pytest.raises(ValueError):
            kernel(["word"], {}, (0,), 384, h, c, slots, signs)                           # a bad size
        with pytest.raises(ValueError):
            kernel(["word", "other", "third"], {}, (3,), 384, h, c, slots, signs)         # hashes one short
        with pytest.raises(TypeError):
            kernel(["word", 3], {}, (3,), 384, h, c, slots, signs)
        with pytest.raises(UnicodeEncodeError):
            kernel(["lone \ud800"], {}, (3,), 384, h, c, slots, signs)
    if _kernels.COMPILED:
        with pytest.raises(ValueError):       # slots and signs of other lengths
            _kernels._speedups.word_features(["a"], {}, (3,), 384, h, c, slots, signs[:5])
        with pytest.raises(TypeError):        # counts of the wrong type
            _kernels._speedups.word_features(["a"], {}, (3,), 384, h, c.astype(np.int32), slots, signs)


@compiled
def test_hashing_a_word_keeps_no_utf8_copy_with_it():
    """The caches keep hundreds of thousands of words: PyUnicode_AsUTF8 would attach a UTF-8 copy
    to each non-ASCII one for its life."""
    words = ["".join(map(chr, (0x6570 + i, 0x636e))) for i in range(3)] + ["café"]
    sizes = [sys.getsizeof(w) for w in words]
    k = _kernels._speedups
    for w in words:
        k.blake2b64(w)
    _one(k.index_batch, words, _wordkernels.word_table(16), _text.index_word, {})
    room = 64
    k.word_features(words, {}, (3,), 384, np.zeros(4, np.uint64), np.zeros(4, np.int64), np.zeros(room, np.int32),
                    np.zeros(room, np.int8))
    assert [sys.getsizeof(w) for w in words] == sizes


@pytest.mark.skipif(not _kernels.FAST_HALF_DOTS, reason="no F16C path here")
@settings(max_examples=300, deadline=None)
@given(bits=st.lists(st.integers(0, 2**32 - 1), min_size=0, max_size=70),
       halfway=st.lists(st.integers(0, 2**16 - 1), max_size=20))
def test_to_half_rounds_as_numpy(bits, halfway):
    """Every float32 (by its bits: subnormals, overflow to inf, ties between two float16s, which go
    to the even one) converts to numpy's float16, bit for bit; a NaN stays a NaN."""
    ties = [((h << 16) | 0x1000) for h in halfway]          # exactly between two float16 neighbours
    x = np.array(bits + ties, np.uint32).view(np.float32)
    with np.errstate(over="ignore"):                         # (numpy warns of what becomes inf)
        got, want = _kernels.to_half(x), x.astype(np.float16)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))
    matrix = np.resize(x, (3, len(x)))                      # any shape, and the tail past 8 values
    assert len(x) == 0 or np.array_equal(_kernels.to_half(matrix)[:, ~nan].view(np.uint16), want[~nan].view(np.uint16)[None].repeat(3, 0))


@pytest.mark.skipif(not _kernels.FAST_HALF_DOTS, reason="no F16C path here")
def test_to_half_refuses_mismatched_arrays():
    k = _kernels._speedups
    with pytest.raises(ValueError):
        k.to_half(np.zeros(3, np.float32), np.zeros(2, np.float16))
    with pytest.raises(TypeError):
        k.to_half(np.zeros(3, np.float64), np.zeros(3, np.float16))
    with pytest.raises(TypeError):
        k.to_half(np.zeros(3, np.float32), np.zeros(3, np.float32))


_NFKC_PIECES = ["a", "Z", " ", "，", "！", "Ａ", "ｚ", "０", "\u00a0", "\u2000", "\u2002", "\u200a", "\u202f", "\u205f",
                "\u3000", "\u0301", "\u0308", "\u3099", "か", "東", "\uf900", "가", "\u1100", "\u1161", "ﬁ", "Ⅻ", "①",
                "\u00b4", "\uff9e", "ｶ", "\ufe50", "\uff00", "\uff01", "\uff5e", "\uff5f", "İ", "ß", "\U0001d400"]


@compiled
@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_NFKC_PIECES), max_size=30).map("".join) | st.text(max_size=30))
def test_nfkc_is_unicodedatas(text):
    """_speedups.nfkc (fullwidth ASCII forms and NFKC's spaces mapped before unicodedata's NFKC, which
    then finds most Chinese text normalised by its quick check) is NFKC, a combining mark after a
    fullwidth letter included."""
    import unicodedata
    assert _kernels._speedups.nfkc(text) == unicodedata.normalize("NFKC", text)
    assert _kernels.nfkc is _kernels._speedups.nfkc
