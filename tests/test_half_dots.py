"""The exact float16 scan (`half_dots`): its F16C and portable paths and its numpy twin agree with
float64 arithmetic, every float16 value converts exactly, bad arguments are refused, and a vector
search that uses it finds the same rows as exact float32 search."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipy_memory import _kernels
from ipy_memory.config import Settings
from ipy_memory.vectors import VectorShard

compiled = pytest.mark.skipif(not _kernels.COMPILED, reason="IPY_MEMORY_PURE_PYTHON is set")


def _kernels_under_test():
    out = [("numpy", _kernels.half_dots_numpy)]
    if _kernels.COMPILED:
        f = _kernels._speedups.half_dots
        out += [("simd", f), ("portable", lambda *a: f(*a, False))]
    return out


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 300), dim=st.integers(1, 70), nq=st.integers(1, 4),
       offset=st.integers(0, 3), with_alive=st.booleans())
def test_every_path_matches_float64_arithmetic(seed, n, dim, nq, offset, with_alive):
    rng = np.random.default_rng(seed)
    wide = rng.standard_normal((n, dim + offset)).astype(np.float16)
    mat = wide[:, offset:]                        # rows contiguous, a stride longer than dim
    qs = rng.standard_normal((nq, dim)).astype(np.float32)
    alive = rng.random(n) > 0.3 if with_alive else None
    exact = qs.astype(np.float64) @ mat.astype(np.float64).T
    tol = 1e-5 * (np.abs(qs).astype(np.float64) @ np.abs(mat.astype(np.float64)).T) + 1e-30
    for name, f in _kernels_under_test():
        out = np.full((nq, n), np.nan, np.float32)
        f(mat, qs, alive, out)
        if alive is not None:
            assert np.all(out[:, ~alive] == -np.inf), name
            assert np.all(np.abs(out[:, alive] - exact[:, alive]) <= tol[:, alive]), name
        else:
            assert np.all(np.abs(out - exact) <= tol), name


@compiled
def test_every_float16_value_converts_exactly():
    """All 65,536 bit patterns but NaN (any NaN stays NaN), through both compiled paths."""
    values = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    mat = np.zeros((len(values), 3), np.float16)
    mat[:, 1] = values
    q = np.array([[0, 1, 0]], np.float32)
    for name, f in _kernels_under_test()[1:]:
        out = np.empty((1, len(values)), np.float32)
        f(mat, q, None, out)
        want = values.astype(np.float32)
        nan = np.isnan(want)
        assert np.array_equal(out[0][~nan], want[~nan]) and np.isnan(out[0][nan]).all(), name


@compiled
def test_half_dots_refuse_what_they_cannot_read_safely():
    f = _kernels._speedups.half_dots
    mat, qs, out = np.zeros((10, 8), np.float16), np.ones((2, 8), np.float32), np.empty((2, 10), np.float32)
    f(mat, qs, None, out)
    f(mat, qs, np.ones(10, bool), out)
    bad = [
        ((mat.astype(np.float32), qs, None, out), TypeError),              # float16 rows only
        ((mat, qs.astype(np.float64), None, out), TypeError),
        ((mat, np.ones((2, 7), np.float32), None, out), ValueError),        # query length = dim
        ((mat, np.ones((2, 16), np.float32)[:, ::2], None, out), ValueError),
        ((mat, qs, np.ones(9, bool), out), ValueError),                     # one flag per row
        ((mat, qs, None, np.empty((3, 10), np.float32)), ValueError),       # a row of out per query
        ((mat, qs, None, np.empty((2, 11), np.float32)), ValueError),
        ((mat, qs, None, np.empty((2, 20), np.float32)[:, ::2]), ValueError),
        ((np.asfortranarray(mat), qs, None, out), ValueError),              # rows not contiguous
        ((mat[0], qs, None, out), TypeError),
    ]
    for args, error in bad:
        with pytest.raises(error):
            f(*args)
    frozen = np.empty((2, 10), np.float32)
    frozen.setflags(write=False)
    with pytest.raises((TypeError, ValueError, BufferError)):
        f(mat, qs, None, frozen)


def _crc_kernels_under_test():
    """(name, half_dots_crc, the half_dots whose values it must give)"""
    out = [("numpy", _kernels.half_dots_crc_numpy, _kernels.half_dots_numpy)]
    if _kernels.COMPILED:
        out.append(("compiled", _kernels._speedups.half_dots_crc, _kernels._speedups.half_dots))
    return out


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 40), dim=st.sampled_from([1, 7, 32, 100, 128, 256, 384]),
       nq=st.integers(1, 2), with_alive=st.booleans())
def test_half_dots_crc_is_half_dots_and_the_crc_of_the_rows(seed, n, dim, nq, with_alive):
    """The scan with the check in its pass gives half_dots' values bit for bit (the fused path, for
    one query over multiples of 128 dimensions, sums in the same order) and zlib's CRC of the rows."""
    import zlib
    rng = np.random.default_rng(seed)
    mat = rng.standard_normal((n, dim)).astype(np.float16)
    qs = rng.standard_normal((nq, dim)).astype(np.float32)
    alive = rng.random(n) > 0.3 if with_alive else None
    for name, f, plain in _crc_kernels_under_test():
        want, out = np.full((nq, n), np.nan, np.float32), np.full((nq, n), np.nan, np.float32)
        plain(mat, qs, alive, want)
        assert f(mat, qs, alive, out) == zlib.crc32(mat.tobytes()), name
        assert np.array_equal(out, want), name


@compiled
def test_half_dots_crc_on_a_snapshot_sized_scan_and_its_refusals():
    """152k rows of 384 float16 (a 100k-memory store's vectors) in parts, as a cold recall scans them;
    rows that are not back to back are refused (their bytes are not one piece of the file)."""
    import zlib
    rng = np.random.default_rng(1)
    mat = rng.standard_normal((20_000, 384)).astype(np.float16)
    q = rng.standard_normal((1, 384)).astype(np.float32)
    want, out = np.empty((1, len(mat)), np.float32), np.empty((1, len(mat)), np.float32)
    _kernels._speedups.half_dots(mat, q, None, want)
    for lo in range(0, len(mat), 8192):
        part = mat[lo:lo + 8192]
        assert _kernels._speedups.half_dots_crc(part, q, None, out[:, lo:lo + 8192]) == zlib.crc32(part.tobytes())
    assert np.array_equal(out, want)
    wide = np.zeros((10, 400), np.float16)
    with pytest.raises(ValueError):
        _kernels._speedups.half_dots_crc(wide[:, :384], q, None, np.empty((1, 10), np.float32))
    with pytest.raises(ValueError):
        _kernels._speedups.half_dots_crc(mat[:10], q, None, np.empty((1, 11), np.float32))


def test_exact_vector_search_finds_the_float32_nearest_rows():
    """A shard too small for a graph scans its float16 rows exactly (half_dots, or usearch without the
    extension), forgotten rows excluded, and rescoring orders the answer as float32 search would
(scores equal to 5 decimals by key)."""
    rng = np.random.default_rng(3)
    dim, n = 48, 3000
    vecs = rng.standard_normal((n, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    shard = VectorShard(dim, Settings(), graph=False)
    keys = np.arange(1, n + 1, dtype=np.int64) * 7
    shard.add(keys, vecs)
    for k in keys[::3]:
        shard.remove(int(k))
    live = np.ones(n, bool)
    live[::3] = False
    stored = vecs.astype(np.float16).astype(np.float32)
    for q in rng.standard_normal((20, dim)).astype(np.float32):
        q /= np.linalg.norm(q)
        got_keys, got_sims = shard.search(q, 10)
        sims = np.where(live, stored @ q, -np.inf)
        want = np.lexsort((keys, -np.round(sims, 5)))[:10]       # near-ties (5 decimals) by key
        assert got_keys.tolist() == keys[want].tolist()
        assert np.allclose(got_sims, sims[want], atol=1e-6)
    qs = rng.standard_normal((5, dim)).astype(np.float32)
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    for q, (got_keys, _) in zip(qs, shard.search_many(qs, 10)):
        assert got_keys.tolist() == shard.search(q, 10)[0].tolist()


def test_the_f16c_scan_is_used_exactly_where_the_cpu_has_it():
    """FAST_HALF_DOTS (the compiled scan replaces usearch's) follows the CPU's flags on Linux x86."""
    import platform
    from pathlib import Path
    cpuinfo = Path("/proc/cpuinfo")
    if not _kernels.COMPILED:
        assert not _kernels.FAST_HALF_DOTS
        return
    if platform.machine() != "x86_64" or not cpuinfo.exists():
        pytest.skip("flags read from /proc/cpuinfo on x86_64 Linux")
    flags = set(next(line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")).split())
    assert _kernels.FAST_HALF_DOTS == ({"avx2", "f16c", "fma"} <= flags)
