"""`_topk.largest`: the same set as argpartition's k largest, by its sampled threshold or without it."""

import numpy as np
import pytest

from ipy_memory._topk import largest


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
