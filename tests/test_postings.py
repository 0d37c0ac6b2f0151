"""Postings: a CSR base from a snapshot plus sorted runs of newer postings, against a plain dict."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipy_memory import _kernels
from ipy_memory._postings import _MAX_RUNS, Postings


def _reference_check(post: Postings, ref: dict[int, list[tuple[int, float]]], probe) -> None:
    for h in probe:
        got = post.get(h)
        want = ref.get(h)
        if want is None:
            assert got is None
        else:     # every term's postings in slot (insertion) order
            assert got[0].tolist() == [s for s, _ in want] and got[1].tolist() == [t for _, t in want]
    arrays = post.arrays()
    keys = sorted(ref)
    assert arrays["h"].tolist() == keys
    assert arrays["slots"].tolist() == [s for h in keys for s, _ in ref[h]]
    assert arrays["off"].tolist() == [0, *np.cumsum([len(ref[h]) for h in keys]).tolist()]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kernel", ["compiled", "numpy"])
def test_runs_and_snapshots_agree_with_a_dict(seed, kernel, monkeypatch):
    if kernel == "numpy":
        monkeypatch.setattr(_kernels, "merge_postings", _kernels.merge_postings_numpy)
        monkeypatch.setattr(_kernels, "sort_postings", _kernels.sort_postings_numpy)
    elif not _kernels.COMPILED:
        pytest.skip("IPY_MEMORY_PURE_PYTHON is set")
    rng = np.random.default_rng(seed)
    terms = rng.integers(0, 2**63 - 1, 300, dtype=np.int64)     # 63-bit hashes, as term_hash gives
    post, ref, slot = Postings(), {}, 0
    for batch in range(40):
        size = int(rng.integers(1, 120 if batch % 7 else 3000))   # uneven batches: runs merge unevenly
        hs, ss, ts = [], [], []
        for _ in range(size):
            for h in set(rng.choice(terms, int(rng.integers(1, 6))).tolist()):
                tf = float(rng.integers(1, 4))
                hs.append(h), ss.append(slot), ts.append(tf)
                ref.setdefault(h, []).append((slot, tf))
            slot += 1
        post.append_many(hs, ss, ts)
        assert len(post.runs) <= _MAX_RUNS
        if batch == 20:                          # a snapshot: the base, then more runs on top
            post = Postings.from_arrays(**{k: v.copy() for k, v in post.arrays().items()})
            assert not post.runs
    assert post.runs
    _reference_check(post, ref, [*terms[:50].tolist(), 12345])


def test_empty_and_single_run():
    post = Postings()
    assert not post and post.get(1) is None
    assert post.arrays()["off"].tolist() == [0]
    post.append_many([5, 3, 5], [0, 0, 1], [1.0, 2.0, 3.0])
    assert post and post.get(5)[0].tolist() == [0, 1] and post.get(3)[1].tolist() == [2.0]
    assert post.get(4) is None


# ------------------------------------------------------------------------------ compiled kernels
compiled = pytest.mark.skipif(not _kernels.COMPILED, reason="IPY_MEMORY_PURE_PYTHON is set")
_keys = st.sampled_from([0, 1, -1, 7, 2**63 - 1, -2**63, 2**40, 2**40 + 1, 3 << 52]) | st.integers(-2**63, 2**63 - 1)


def _run(hashes, first_slot=0):
    n = len(hashes)
    return (np.array(hashes, np.int64), np.arange(first_slot, first_slot + n, dtype=np.int32),
            np.arange(n, dtype=np.float32) / 7)


def _out(n):
    return np.empty(n, np.int64), np.empty(n, np.int32), np.empty(n, np.float32)


@compiled
@settings(max_examples=300, deadline=None)
@given(hashes=st.lists(_keys, max_size=300) | st.lists(st.integers(0, 5), max_size=3000))
def test_the_compiled_sort_is_the_stable_argsort(hashes):
    """Repeated terms keep their order (slots ascend within a term); negative and extreme keys sort
    as int64 (the kernel flips the sign bit); runs long enough to take every radix pass."""
    run = _run(hashes)
    want, got = _out(len(hashes)), _out(len(hashes))
    _kernels.sort_postings_numpy(*run, *want)
    _kernels._speedups.sort_postings(*run, *got)
    for w, g in zip(want, got):
        assert w.tolist() == g.tolist()


@compiled
@settings(max_examples=300, deadline=None)
@given(runs=st.lists(st.lists(_keys, max_size=200) | st.lists(st.integers(0, 3), max_size=50), max_size=6))
def test_the_compiled_merge_is_the_numpy_one(runs):
    """Any number of runs, keys shared between them (a term's postings keep the runs' order)."""
    runs = [_run(sorted(keys), first_slot=1000 * i) for i, keys in enumerate(runs)]
    n = sum(len(r[0]) for r in runs)
    want, got = _out(n), _out(n)
    _kernels.merge_postings_numpy(runs, *want)
    _kernels._speedups.merge_postings(runs, *got)
    for w, g in zip(want, got):
        assert w.tolist() == g.tolist()
    assert all(x <= y for x, y in zip(got[0], got[0][1:]))


def test_many_small_runs_merge_four_at_a_time():
    """Equal runs merge four at a time, a level at a time; a lookup never searches more than
    _MAX_RUNS runs, even when sizes never line up (each run smaller than the one before)."""
    post = Postings()
    for i in range(16):
        post.append_many([i], [i], [1.0])
    assert [len(r[0]) for r in post.runs] == [16]
    post = Postings()
    for i, size in enumerate(range(200, 140, -1)):
        post.append_many(list(range(size)), [i] * size, [1.0] * size)
        assert len(post.runs) <= _MAX_RUNS
    assert post.get(0)[0].tolist() == list(range(60))


@compiled
def test_the_postings_kernels_refuse_mismatched_arrays():
    k, a = _kernels._speedups, _run([3, 1, 2])
    with pytest.raises(ValueError):
        k.sort_postings(*a, *_out(2))                                       # out too short
    with pytest.raises(ValueError):
        k.sort_postings(a[0], a[1][:2], a[2], *_out(3))                     # slots too short
    with pytest.raises(TypeError):
        k.sort_postings(a[0].astype(np.int32), a[1], a[2], *_out(3))       # hashes are int64
    with pytest.raises(TypeError):
        k.sort_postings(*a, np.empty(3, np.int64), np.empty(3, np.int64), np.empty(3, np.float32))
    with pytest.raises(ValueError):
        k.merge_postings([a, a], *_out(5))                                  # out as long as both
    with pytest.raises(TypeError):
        k.merge_postings([a, a], *_out(6)[:2], np.empty(6, np.float64))    # tfs are float32
    with pytest.raises(ValueError):
        k.merge_postings([a, (a[0], a[1][:2], a[2])], *_out(6))            # a run's arrays as long
    with pytest.raises(TypeError):
        k.merge_postings([a, list(a)], *_out(6))                            # runs are tuples
    with pytest.raises(ValueError):
        k.merge_postings([a] * 65, *_out(195))                              # at most 64
    k.merge_postings([a] * 64, *_out(192))
