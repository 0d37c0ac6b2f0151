"""Postings lists as an immutable CSR base (from a snapshot) plus sorted runs of newer postings.

Loading a snapshot is a handful of numpy reads instead of re-tokenising every node, which is what
makes a cold open of a large store fast. Postings added since go to runs: arrays sorted by term,
one per write, merged four at a time (see _FANIN), so a lookup searches O(log n) runs and a write
is a sort plus amortised linear merges, with no Python loop over terms (a per-term dictionary of
arrays cost 40 us a memory in bulk inserts); the sort and the merges are compiled kernels
(csrc/postings.c) with numpy twins.
Term keys are the stable 63-bit hashes from `_text.term_hash`, so no vocabulary strings are kept.
Every term's postings stay in slot (insertion) order. A snapshot keeps a CRC for each chunk of
`CHUNK` postings: a recall that loads it checks only the chunks of its own terms before it reads
them (most of a lexical snapshot's bytes are postings), the rest once it has answered.
"""

from __future__ import annotations

import numpy as np

from . import _kernels, _pages, _snapchecks

_Run = tuple[np.ndarray, np.ndarray, np.ndarray]     # term hashes (sorted), slots, tfs

# Runs are merged four at a time once the last four are of a size (within 2x), like the levels of
# a tiered LSM tree: each posting is copied about log4 instead of log2 times. With the previous
# binary counter (a run merged into the one before once at least half its size) a 100k-memory bulk
# insert wrote 22M postings for 2.9M, 9% of its time, mostly in fresh pages. A lookup searches each
# run: at most _MAX_RUNS, past which the last four are merged whatever their sizes.
_FANIN = 4
_MAX_RUNS = 16

_EMPTY_I = np.zeros(0, np.int32)
_EMPTY_F = np.zeros(0, np.float32)


CHUNK = 4096     # postings a snapshot keeps a CRC for (16 kB of slots, 16 kB of tfs)


def posting_crcs(slots: np.ndarray, tfs: np.ndarray, pieces: np.ndarray) -> np.ndarray:
    """The CRC of each of `pieces` of a snapshot's postings: piece 2c is chunk c of the slots,
    2c + 1 chunk c of the term frequencies (see Postings.checks)."""
    out = np.empty(len(pieces), np.uint32)
    for half, values in ((0, slots), (1, tfs)):
        at = np.flatnonzero(pieces % 2 == half)
        if len(at):
            out[at] = _snapchecks.chunk_crcs(values, len(values), pieces[at] // 2, CHUNK)
    return out


class Postings:
    def __init__(self):
        self.hashes = np.zeros(0, np.int64)       # sorted term hashes of the base
        self.offsets = np.zeros(1, np.int64)
        self.slots = _EMPTY_I
        self.tfs = _EMPTY_F
        self.runs: list[_Run] = []                # newer postings, oldest run first
        # a snapshot's base not checked whole yet: each chunk a lookup reads is checked first
        self.checks: _snapchecks.PieceChecks | None = None

    def __bool__(self) -> bool:
        return bool(len(self.hashes) or self.runs)

    def append_many(self, hashes: list[int], slots: list[int], tfs: list[float]) -> None:
        """Add postings, in slot order and above every slot already added, as one sorted run."""
        if len(hashes) == 0:
            return
        run = _empty(len(hashes))
        _kernels.sort_postings(np.asarray(hashes, np.int64), np.asarray(slots, np.int32), np.asarray(tfs, np.float32),
                               *run)
        runs = self.runs
        runs.append(run)
        while len(runs) >= _FANIN and (_similar(runs[-_FANIN:]) or len(runs) > _MAX_RUNS):
            runs[-_FANIN:] = [_merge(runs[-_FANIN:])]

    def get(self, h: int) -> tuple[np.ndarray, np.ndarray] | None:
        slots, tfs = [], []
        i = int(np.searchsorted(self.hashes, h))
        if i < len(self.hashes) and self.hashes[i] == h:
            a, b = self.offsets[i], self.offsets[i + 1]
            if self.checks is not None and b > a:
                chunks = np.arange(a // CHUNK, (b - 1) // CHUNK + 1)
                self.checks.ensure(np.concatenate([2 * chunks, 2 * chunks + 1]))
            slots.append(self.slots[a:b])
            tfs.append(self.tfs[a:b])
        for rh, rs, rt in self.runs:
            a = int(rh.searchsorted(h))
            if a < len(rh) and rh[a] == h:
                b = int(rh.searchsorted(h, "right"))
                slots.append(rs[a:b])
                tfs.append(rt[a:b])
        if not slots:
            return None
        if len(slots) == 1:       # views: no array is ever changed in place
            return slots[0], tfs[0]
        return np.concatenate(slots), np.concatenate(tfs)

    def arrays(self, dead: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Base and runs merged into CSR arrays (for a snapshot), with the CRCs of their chunks;
        without the postings of the slots where `dead` (a bool per slot) is True."""
        if self.checks is not None:
            self.checks.rest()
            if not self.checks.done.all():
                raise _snapchecks.DamagedSnapshot(f"{self.checks.path}: postings fail their CRC check")
        merged = _merge([(np.repeat(self.hashes, np.diff(self.offsets)), self.slots, self.tfs)] + self.runs)
        if dead is not None and dead.any():
            keep = ~dead[merged[1]]
            merged = tuple(a[keep] for a in merged)
        h = merged[0]
        starts = np.flatnonzero(np.r_[True, h[1:] != h[:-1]]) if len(h) else np.zeros(0, np.int64)
        slots, tfs = merged[1].astype(np.int32, copy=False), merged[2].astype(np.float32, copy=False)
        return {"h": h[starts], "off": np.append(starts, len(h)).astype(np.int64), "slots": slots, "tfs": tfs,
                "crc": posting_crcs(slots, tfs, np.arange(2 * _snapchecks.piece_count(len(slots), CHUNK)))}

    @classmethod
    def from_arrays(cls, h, off, slots, tfs, crc=None, path=None, checks: _snapchecks.LaterChecks | None = None,
                    name: str = "postings") -> "Postings":
        """Postings of `arrays()`. With `checks`, slots and tfs have not been checked as they loaded:
        each chunk is checked as a lookup first reads it, the rest once a recall has answered."""
        p = cls()
        p.hashes, p.offsets = h.astype(np.int64, copy=False), off.astype(np.int64, copy=False)
        p.slots, p.tfs = slots.astype(np.int32, copy=False), tfs.astype(np.float32, copy=False)
        if (len(p.offsets) != len(p.hashes) + 1 or len(p.slots) != len(p.tfs) or int(p.offsets[-1]) != len(p.slots)
                or (crc is not None and (crc.dtype != np.uint32 or crc.shape != (2 * _snapchecks.piece_count(len(p.slots), CHUNK),)))):
            raise ValueError("postings of inconsistent lengths")
        if checks is not None:
            slots, tfs = p.slots, p.tfs
            p.checks = _snapchecks.PieceChecks(crc, lambda pieces: posting_crcs(slots, tfs, pieces), path, name, checks)
            checks.watch(p.checks, lambda: setattr(p, "checks", None))
        return p


def _merge(runs: list[_Run]) -> _Run:
    """One sorted run of them all, in one pass; a term's newer postings go after its older ones (slot
    order)."""
    out = _empty(sum(len(r[0]) for r in runs))
    _kernels.merge_postings(runs, *out)
    return out


def _similar(runs: list[_Run]) -> bool:
    sizes = [len(r[0]) for r in runs]
    return max(sizes) <= 2 * min(sizes)


def _empty(n: int) -> _Run:
    return _pages.zeros(n, np.int64), _pages.zeros(n, np.int32), _pages.zeros(n, np.float32)
