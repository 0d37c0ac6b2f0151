"""Postings: a CSR base from a snapshot plus sorted runs of newer postings, against a plain dict."""

from __future__ import annotations

import numpy as np
import pytest

from ipy_memory._postings import Postings


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
def test_runs_and_snapshots_agree_with_a_dict(seed):
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
        assert len(post.runs) <= 2 + int(np.log2(batch + 1)) * 2
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
