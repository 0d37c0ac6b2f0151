"""`_topk.largest` and `largest_nonzero`: the same set as argpartition's k largest, by the sampled
threshold or without it."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipy_memory import _topk
from ipy_memory._topk import largest, largest_nonzero


def is_top(values, idx, k):
    """idx holds k distinct indices whose values are all >= every value left out."""
    idx = np.asarray(idx)
    assert idx.dtype == np.int64 and len(idx) == min(k, len(values)) == len(set(idx.tolist()))
    rest = np.delete(values, idx)
    return not len(rest) or not len(idx) or values[idx].min() >= rest.max()


@pytest.mark.parametrize("n,k", [(0, 5), (3, 5), (10, 0), (5000, 1), (5000, 77), (200_000, 10), (200_000, 200),
                                 (200_000, 3000)])
def test_random_values(n, k):
    values = np.random.default_rng(n + k).standard_normal(n).astype(np.float32)
    out = largest(values, k)
    assert is_top(values, out, k)
    if 0 < k < n:
        want = np.argpartition(values, n - k)[n - k:]
        assert set(out.tolist()) == set(want.tolist())      # no ties here: one right answer


def test_ties_and_minus_infinity():
    rng = np.random.default_rng(3)
    values = rng.integers(0, 4, 100_000).astype(np.float32)    # a quarter of the rows tie at the top
    values[rng.random(100_000) < 0.5] = -np.inf                # dead rows
    for k in (1, 50, 10_000, 60_000, 99_999):
        assert is_top(values, largest(values, k), k)
    assert is_top(np.full(50_000, -np.inf, np.float32), largest(np.full(50_000, -np.inf, np.float32), 9), 9)


def test_a_threshold_guessed_too_high_falls_back_to_the_full_selection():
    n, k = 100_000, 10
    step = n // (32 * k)
    values = np.zeros(n, np.float32)
    values[0:5 * step:step] = 1.0         # five sampled rows hold the top values: fewer than k pass
    values[1:k * 7:7] = 0.5
    out = largest(values, k)
    assert is_top(values, out, k) and set(range(0, 5 * step, step)) <= set(out.tolist())


def test_sorted_input_either_way():
    values = np.arange(300_000, dtype=np.float32)
    assert set(largest(values, 100).tolist()) == set(range(299_900, 300_000))
    assert set(largest(values[::-1].copy(), 100).tolist()) == set(range(100))


@pytest.mark.parametrize("n,k,density", [(0, 5, 0.5), (10, 0, 0.5), (5000, 200, 0.1), (200_000, 200, 0.0005),
                                         (200_000, 200, 0.13), (1_000_000, 200, 0.5), (300_000, 50, 1.0)])
def test_largest_nonzero_is_the_top_of_the_nonzero_values(n, k, density):
    rng = np.random.default_rng(n + k)
    values = np.where(rng.random(n) < density, rng.random(n), 0).astype(np.float32)
    nz = np.flatnonzero(values)
    out = largest_nonzero(values, k)
    assert out.dtype == np.int64 and (np.diff(out) > 0).all()       # ascending: one order either way
    if k <= 0:
        assert not len(out)
    elif len(nz) <= k:
        assert np.array_equal(out, nz)
    else:
        assert set(out.tolist()) == set(nz[np.argpartition(values[nz], len(nz) - k)[len(nz) - k:]].tolist())


def test_largest_nonzero_takes_the_threshold_path_where_it_pays(monkeypatch):
    """Both paths give the same answer: force each and compare (a dense array takes the threshold)."""
    values = np.random.default_rng(5).random(400_000).astype(np.float32)
    values[::3] = 0
    calls = []
    real = _topk._kernels.flatnonzero
    monkeypatch.setattr(_topk._kernels, "flatnonzero", lambda v, *floor: calls.append(floor) or real(v, *floor))
    fast = largest_nonzero(values, 200)
    assert calls and calls[0] and calls[0][0] > 0            # the threshold pass ran, and sufficed
    monkeypatch.setattr(_topk, "_guess", lambda v, k: None)
    assert np.array_equal(largest_nonzero(values, 200), fast)
    neg = values.copy()
    neg[1::3] *= -1                                          # negative values are non-zero ones too
    monkeypatch.undo()
    nz = np.flatnonzero(neg)
    want = set(nz[np.argpartition(neg[nz], len(nz) - 200)[len(nz) - 200:]].tolist())
    assert set(largest_nonzero(neg, 200).tolist()) == want


@given(st.lists(st.integers(-2**62, 2**62), max_size=300), st.sampled_from([np.int64, np.int32, np.float64]))
@settings(max_examples=200, deadline=None)
def test_unique_is_np_unique(values, dtype):
    from ipy_memory._topk import unique
    a = np.array(values).astype(dtype) if values else np.zeros(0, dtype)
    got, want = unique(a), np.unique(a)
    assert got.dtype == want.dtype and np.array_equal(got, want)


@given(st.lists(st.integers(-2**62, 2**62), max_size=200), st.lists(st.integers(-2**62, 2**62), max_size=200),
       st.booleans())
@settings(max_examples=200, deadline=None)
def test_isin_is_np_isin(values, of, overlap):
    from ipy_memory._topk import isin
    of = of + values[::2] if overlap else of
    a, b = np.array(values, np.int64), np.array(of, np.int64)
    assert np.array_equal(isin(a, b), np.isin(a, b))
