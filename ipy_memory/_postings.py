"""Postings lists as an immutable CSR base (from a snapshot) plus an append-only delta.

Loading a snapshot is a handful of numpy reads instead of re-tokenising every node, which is what
makes a cold open of a large store fast; new postings go to the delta until the next snapshot.
Term keys are the stable 63-bit hashes from `_text.term_hash`, so no vocabulary strings are kept.
"""

from __future__ import annotations

from array import array

import numpy as np

_EMPTY_I = np.zeros(0, np.int32)
_EMPTY_F = np.zeros(0, np.float32)


class Postings:
    def __init__(self):
        self.hashes = np.zeros(0, np.int64)       # sorted term hashes of the base
        self.offsets = np.zeros(1, np.int64)
        self.slots = _EMPTY_I
        self.tfs = _EMPTY_F
        self.delta: dict[int, tuple[array, array]] = {}

    def __bool__(self) -> bool:
        return bool(len(self.hashes) or self.delta)

    def append_many(self, hashes: list[int], slots: list[int], tfs: list[float]) -> None:
        """Add postings at once: grouped by term with numpy, one extend per term (a
        batch of 1,000 memories holds ~25k postings of ~10k terms). Each term keeps slot order."""
        if not hashes:
            return
        h = np.asarray(hashes, np.int64)
        order = np.argsort(h, kind="stable")
        h, s, t = h[order], np.asarray(slots, np.int32)[order], np.asarray(tfs, np.float32)[order]
        starts = np.flatnonzero(np.r_[True, h[1:] != h[:-1]])
        ends = np.r_[starts[1:], len(h)]
        delta = self.delta
        for key, a, b in zip(h[starts].tolist(), starts.tolist(), ends.tolist()):
            d = delta.get(key)
            if d is None:
                d = delta[key] = (array("i"), array("f"))
            d[0].frombytes(s[a:b].tobytes())
            d[1].frombytes(t[a:b].tobytes())

    def get(self, h: int) -> tuple[np.ndarray, np.ndarray] | None:
        slots, tfs = _EMPTY_I, _EMPTY_F
        i = int(np.searchsorted(self.hashes, h))
        if i < len(self.hashes) and self.hashes[i] == h:
            a, b = self.offsets[i], self.offsets[i + 1]
            slots, tfs = self.slots[a:b], self.tfs[a:b]
        d = self.delta.get(h)
        if d is not None:      # copies: a live buffer view would stop the arrays from growing
            slots = np.concatenate([slots, np.array(d[0], np.int32)])
            tfs = np.concatenate([tfs, np.array(d[1], np.float32)])
        return (slots, tfs) if len(slots) else None

    def arrays(self) -> dict[str, np.ndarray]:
        """Base and delta merged into CSR arrays (for a snapshot)."""
        keys = np.union1d(self.hashes, np.fromiter(self.delta.keys(), np.int64, len(self.delta)))
        slots, tfs, counts = [], [], np.zeros(len(keys), np.int64)
        for j, h in enumerate(keys.tolist()):
            p = self.get(h)
            slots.append(p[0])
            tfs.append(p[1])
            counts[j] = len(p[0])
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return {"h": keys, "off": offsets,
                "slots": np.concatenate(slots) if slots else _EMPTY_I,
                "tfs": np.concatenate(tfs) if tfs else _EMPTY_F}

    @classmethod
    def from_arrays(cls, h, off, slots, tfs) -> "Postings":
        p = cls()
        p.hashes, p.offsets = h.astype(np.int64, copy=False), off.astype(np.int64, copy=False)
        p.slots, p.tfs = slots.astype(np.int32, copy=False), tfs.astype(np.float32, copy=False)
        return p
