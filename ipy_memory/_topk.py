"""The indices of the k largest values, as `np.argpartition` gives them, in a fraction of its time.

argpartition over a recall's 152k approximate vector scores took 1.6 ms for the top 200, a third
of the whole column scan. A strided sample guesses a threshold that about 3k values reach; one
comparison pass then keeps those, and argpartition runs on them alone (~0.2 ms in all). When the
guess keeps fewer than k values (rows sorted by score, say), the full argpartition runs instead:
the answer is the same set either way, ties at the k-th value broken arbitrarily as argpartition does.
"""

from __future__ import annotations

import numpy as np

from . import _kernels

_SAMPLED_PER_K = 32      # the sample holds ~32k values: its quantile is a steady guess
_MIN_SHARE = 64          # below n = 64k, argpartition over everything is about as fast
_FLOOR_FROM = 100_000    # largest_nonzero: below this many scores, listing the non-zero ones is as fast


def _guess(values: np.ndarray, k: int):
    """A threshold that about 3k of the values reach, from a strided sample; None where the array
    is too short for the sample to pay."""
    n = len(values)
    if n < _MIN_SHARE * k or n < 4096:
        return None
    step = n // (_SAMPLED_PER_K * k)
    sample = values[::step]
    # the sample holds ~k/step of the k largest: ask for three times that many, plus two
    r = min(len(sample), 3 * k // step + 2)
    return np.partition(sample, len(sample) - r)[len(sample) - r]


def _top_of(values: np.ndarray, kept: np.ndarray, k: int) -> np.ndarray:
    return kept[np.argpartition(values[kept], len(kept) - k)[len(kept) - k:]].astype(np.int64)


def largest(values: np.ndarray, k: int) -> np.ndarray:
    """Indices (int64, in no particular order) of the k largest of a 1-d array without NaN; every
    index when k >= len(values), none when k <= 0."""
    n = len(values)
    if k >= n:
        return np.arange(n, dtype=np.int64)
    if k <= 0:
        return np.zeros(0, np.int64)
    t = _guess(values, k)
    if t is not None:
        kept = np.flatnonzero(values >= t)
        if len(kept) >= k:
            return _top_of(values, kept, k)
    return np.argpartition(values, n - k)[n - k:].astype(np.int64)


def largest_nonzero(values: np.ndarray, k: int) -> np.ndarray:
    """Indices (int64, ascending) of the k largest non-zero values of a float32 array without NaN,
    every non-zero one when fewer: a recall's lexical candidates. When the sampled threshold is
    positive, one compiled pass keeps the values over it, instead of listing every non-zero index
    first: for 1.5M scores (1M memories), 13.5% non-zero, 2.54 -> 0.46 ms; about even at 100k
    scores (`benchmarks/kernels.py`, BENCHMARKS.md)."""
    if k <= 0:
        return np.zeros(0, np.int64)
    t = _guess(values, k) if len(values) >= _FLOOR_FROM else None
    if t is not None and t > 0:
        kept = _kernels.flatnonzero(values, float(t))
        if len(kept) >= k:
            out = _top_of(values, kept, k)
            out.sort()
            return out
    nz = _kernels.flatnonzero(values)
    if len(nz) <= k:
        return nz
    out = nz[largest(values[nz], k)]
    out.sort()
    return out


def unique(values) -> np.ndarray:
    """np.unique(values): the sorted distinct values of a 1-d array, by a sort and one comparison
    pass. numpy 2.4's np.unique (and setdiff1d, union1d, intersect1d and often isin, which call it) hashes
    instead, 12x slower at 100k integers here and 60x at 1M, and its first call imports numpy.ma
    (~6.5 ms of a new process's first recall) to ask whether the array is masked."""
    a = np.sort(np.asarray(values).ravel())
    if len(a) > 1:
        keep = np.empty(len(a), bool)
        keep[0] = True
        np.not_equal(a[1:], a[:-1], out=keep[1:])
        a = a[keep]
    return a


def isin(values, of) -> np.ndarray:
    """np.isin(values, of) for integer arrays, by binary search in a sorted copy of `of`: np.isin
    calls np.unique (see `unique`) whenever the values span too wide a range for its table."""
    values, of = np.asarray(values), np.sort(np.asarray(of).ravel())
    if not len(of):
        return np.zeros(values.shape, bool)
    at = np.searchsorted(of, values)
    np.minimum(at, len(of) - 1, out=at)
    return of[at] == values
