"""The rows bookkeeping every vector store shares (`_Rows`) and the int8 store of the colder tiers.

Split from vectors.py, whose VectorShard holds the hottest tier in float16.
"""

from __future__ import annotations

import os

import numpy as np

from ._columns import Column
from ._native import exact_cosine


def _scan_threads(rows: int) -> int:
    """Threads for an exact scan: splitting pays above ~50k rows (100k float16 rows: 10.6 -> 7.2 ms
    on 2 busy cores); below that, starting threads costs more than it saves."""
    return min(os.cpu_count() or 1, 4) if rows >= 50_000 else 1


class _Rows:
    """The live-row count and the key -> live row dict of a store (`keys` and `alive` columns). The
    dict is built at its first use: for a loaded snapshot of 1.5M sections it costs ~180 ms and
    ~150 MB, and neither a search nor the duplicate check needs it (a binary search finds rows)."""

    keys: Column
    mat: Column
    alive: Column
    live: int = 0
    _row_of: dict[int, int] | None = None

    @property
    def row_of(self) -> dict[int, int]:
        if self._row_of is None:
            rows = np.flatnonzero(self.alive.view)
            self._row_of = dict(zip(self.keys.view[rows].tolist(), rows.tolist()))
        return self._row_of

    def live_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, vectors) of the live rows: views when every row is live (the usual case; at 1M
        memories a snapshot would otherwise copy the 1.2 GB matrix first)."""
        alive, keys, mat = self.alive.view, self.keys.view, self.mat.view
        return (keys, mat) if alive.all() else (keys[alive], mat[alive])

    def _added(self, keys: np.ndarray, base: int) -> None:
        if self._row_of is not None:
            self._row_of.update(zip(keys.tolist(), range(base, base + len(keys))))
        self.live += len(keys)


class _LowTier(_Rows):
    """Rows of colder tiers held as int8 (half the memory of float16). Cosine is scale-invariant,
    so a scan needs no per-row scale; candidates are rescored exactly from SQLite's vectors."""

    def __init__(self, dim: int):
        self.dim = dim
        self.keys = Column(np.int64)
        self.mat = Column(np.int8, width=dim)
        self.alive = Column(np.bool_, fill=False)
        self._row_of = {}

    @staticmethod
    def quantize(vecs: np.ndarray) -> np.ndarray:
        vecs = np.asarray(vecs, np.float32).reshape(len(vecs), -1)
        scale = np.abs(vecs).max(axis=1, keepdims=True)
        return np.round(np.divide(vecs * 127, scale, out=np.zeros_like(vecs), where=scale > 0)).astype(np.int8)

    def add(self, keys: np.ndarray, vecs: np.ndarray) -> None:
        self._added(np.asarray(keys, np.int64), self.keys.size)
        self.keys.extend(keys)
        self.mat.extend(self.quantize(vecs))
        self.alive.extend(np.ones(len(keys), bool))

    def remove(self, key: int) -> bool:
        if not self.live:
            return False
        row = self.row_of.pop(key, None)
        if row is None:
            return False
        self.alive.view[row] = False
        self.live -= 1
        return True

    def candidates(self, q: np.ndarray, k: int) -> np.ndarray:
        if not self.live:
            return np.zeros(0, np.int64)
        dead = self.keys.size - self.live
        want = min(self.keys.size, k + dead)
        m = exact_cosine(self.mat.view, self.quantize(q[None])[0], want, threads=_scan_threads(self.keys.size))
        rows = np.asarray(m.keys, np.int64).reshape(-1)[:want]
        rows = rows[(rows >= 0) & (rows < self.keys.size)]
        return self.keys.view[rows[self.alive.view[rows]]][:k]
