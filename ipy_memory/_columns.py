"""Growable numpy columns: amortised O(1) appends with array views for vectorised scoring."""

from __future__ import annotations

import numpy as np

from . import _pages


class Column:
    def __init__(self, dtype, width: int | None = None, fill=0):
        self.dtype, self.width, self.fill = np.dtype(dtype), width, fill
        self._data = np.full((16, width) if width else 16, fill, self.dtype)
        self.size = 0

    def extend(self, values) -> None:
        values = np.asarray(values, self.dtype)
        need = self.size + len(values)
        self._reserve(need)
        self._data[self.size:need] = values
        self.size = need

    def _reserve(self, need: int, slack: int | None = None) -> None:
        """Room for `need` rows: twice the capacity, or `need + slack` rows if given."""
        if need > len(self._data):
            cap = max(need, self._growth(need) * len(self._data)) if slack is None else need + slack
            shape = (cap, self.width) if self.width else cap
            # zeros, not empty + fill: the spare rows stay the kernel's untouched zero pages until
            # written (and without numpy's huge-page advice: see _pages.py)
            grown = _pages.zeros(shape, self.dtype)
            if self.fill:
                grown[self.size:] = self.fill
            grown[: self.size] = self._data[: self.size]
            self._data = grown

    def _growth(self, need: int) -> int:
        """How many times the capacity grows: 2, or 4 for a buffer mapped from the kernel's zero pages
        (_pages): rows never written cost address space only, and every growth copies each row into
        fresh pages that fault in one by one (a 100k bulk insert's vectors: ~6% of its time in
        copies and faults, two thirds of them the copies)."""
        row = self._data.itemsize * (self.width or 1)
        return 4 if _pages.MAPPED_FROM is not None and need * row >= _pages.MAPPED_FROM else 2

    def adopt(self, values: np.ndarray) -> None:
        """Take over a freshly loaded array as the whole (empty) column, without copying it."""
        values = np.asarray(values)
        if self.size or values.dtype != self.dtype or values.shape[1:] != self._data.shape[1:]:
            raise ValueError("adopt() needs an empty column and an array of its dtype and width")
        self._data = values if values.flags.writeable and values.flags.c_contiguous else values.copy()
        self.size = len(values)

    @property
    def view(self) -> np.ndarray:
        return self._data[: self.size]

    def padded(self) -> np.ndarray:
        """The column plus one trailing `fill` slot (a sentinel index for 'no such row'). An adopted
        array has no room for it: the column moves into a buffer that has, once, rather than being
        copied at every call, with 1/16 to spare, not twice the room (the pages of a new buffer
        are faulted in at their first write: 100k memories, ~3 ms of a cold query for three columns)."""
        self._reserve(self.size + 1, slack=self.size // 16 + 16)
        return self._data[: self.size + 1]

    def __len__(self) -> int:
        return self.size


class AscendingKeys:
    """Which row of an append-only key column holds each key. Keys are node ids, appended in
    ascending order but for a few moves (a tier move, a graph reorder, a key added back): while they
    ascend a binary search answers and no key -> row dict is needed (100k rows: building one took
    ~14 ms of a cold start); from the first key out of order on, the caller's dict answers."""

    def __init__(self):
        self.checked, self.ascending = 0, True     # rows checked so far, and whether they ascend

    def rows(self, column: Column, keys: np.ndarray, row_of) -> np.ndarray:
        """Row of each key (int64; -1 for a key not in the column); `row_of()` gives the dict."""
        view = column.view
        if self.ascending and self.checked < len(view):        # check only the rows added since
            tail = view[max(self.checked - 1, 0):]
            self.ascending = bool((tail[1:] > tail[:-1]).all())
            self.checked = len(view)
        keys = np.asarray(keys, np.int64).reshape(-1)
        if not len(view):
            return np.full(len(keys), -1, np.int64)
        if not self.ascending:
            found = row_of()
            return np.array([found.get(k, -1) for k in keys.tolist()], np.int64)
        at = np.searchsorted(view, keys).clip(0, len(view) - 1)
        return np.where(view[at] == keys, at, -1)
