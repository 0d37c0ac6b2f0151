"""Exact top-k for sparse queries: a column-major int8 copy of a space's float16 vectors.

The hashing embedder's query vectors are zero in most dimensions (a 2-5 word query: 59 of 384 at
the median), but a row-major scan reads every dimension of every row: the compiled exact float16
scan of 152k rows takes 9.3 ms on this machine (usearch's 26.6 on one core; benchmarks/kernels.py).
Stored by column, a query reads only its own dimensions: per part of a scan, one pass that sums
the query's weights times those columns
(`_kernels.column_scores`: compiled, 152k rows and 59 dimensions in about 0.4 ms; its numpy twin,
a gather and an einsum, takes 3 ms). The columns are int8: half the memory of int16 for the same
certified answer (below), and with AVX-512's byte conversions the faster of the two (0.43 against
0.65 ms).

Each row is stored as int8 with a scale of its own (its largest |value| / 127), so what the scan
computes for a row is an upper bound of its exact float32 dot product with the stored float16 row,
within `2 * scale * slack(q)` of it (rounding to int8 moves each value by at most half a scale
step; the float32 sums' rounding is covered too). `top_rows` takes the rows with the highest
bounds, rescores them exactly and returns them only when the lowest bound taken is below the k-th
exact score, which proves that no row left out can beat them; otherwise it returns None and the
caller scans every row as before. So the answer is always the exact scan's, only faster. Bounds
per row, not one for all rows, are what make int8 enough: on 300 queries of 100k memories every
answer was proven from the first 200 candidates (with one bound for all rows, 143 needed 800).

A scan is cut into parts that any free thread takes: the thread that scores the query, a worker
for scans above `_SPLIT_ROWS` rows or that check a snapshot's columns, and the recall's own thread
once its lexical scoring is done (`help_scan`). The compiled kernel releases the GIL for a whole
part, so two threads really scan at once; numpy's twin releases it inside each loop only.

Rows are kept in blocks of `BLOCK` rows (the last one grows geometrically): appends never copy the
whole matrix. The columns cost half the memory of the float16 rows (0.6 GB for 1M memories) and
are built on a thread of their own after the first sparse query of a process, while queries scan
every row as before (0.35-0.6 s for 100k memories here), unless the space's snapshot holds them
(then they are mapped from it, each column checked by the scan that first reads it, in the same
pass); `ColumnsMixin` is VectorShard's side of this.
"""

from __future__ import annotations

import threading

import numpy as np

from . import _kernels, _pages
from ._snapchecks import DamagedSnapshot, PieceChecks
from ._threads import Pieces, Worker
from ._topk import largest

BLOCK = 1 << 16            # rows per block (a block's column: 64 kB)
_ONE = _kernels.INT8_TOP   # the int8 value of a row's largest |value| (quantize_rows)
_CONVERT = 8192            # rows converted at a time (between two, a Build may stop)
_SPLIT_ROWS = 300_000      # from this many rows the worker takes parts of a scan too
_PART = 1 << 15            # rows per part of a scan (the unit a thread takes)
SPARSE_MIN_ROWS = 1_000    # below this, the full float16 scan is as fast (and needs no columns); by
                           # columns, a hybrid recall of 10k memories took 1.6 ms against 3.5 scanning
SPARSE_MAX_SHARE = 0.5     # by columns only for queries non-zero in at most this share of dimensions
_current = None            # the _Parts of the scan in progress (help_scan)
_HELPER = Worker("ipy_memory-colscan")


class ColumnScan:
    """int8 columns of rows [0, n) of a float16 matrix, with one float32 scale per row."""

    def __init__(self, dim: int):
        self.dim = dim
        self.blocks: list[np.ndarray] = []      # (dim, capacity) int8 each
        self.scales: list[np.ndarray] = []      # float32 per row of each block
        self.n = 0
        self.sealed = 0                         # blocks [0, sealed) came from a snapshot: never appended to
        self._last = 0                          # the first row of the last block
        self.checks: PieceChecks | None = None  # of the sealed blocks: piece b * dim + d is column d of block b

    @classmethod
    def loaded(cls, blocks: list[np.ndarray], scales: np.ndarray, checks: PieceChecks | None) -> "ColumnScan":
        """The scan of a snapshot's blocks of (dim, rows) columns (`live_blocks`), each column of each
        block checked at its first use when `checks` are given; rows appended later go to new blocks."""
        scan = cls(len(blocks[0]))
        at = 0
        for block in blocks:
            scan.blocks.append(block)
            scan.scales.append(scales[at:at + block.shape[1]])
            at += block.shape[1]
        scan.n = scan._last = at
        scan.sealed, scan.checks = len(blocks), checks
        return scan

    def live_blocks(self, alive: np.ndarray | None = None) -> tuple[list, np.ndarray]:
        """(a function giving each (dim, rows) int8 column block, and the (n,) float32 scales) of the
        rows, or of those where `alive` (blocks of other widths then: any width loads). Neighbouring
        blocks narrower than BLOCK are joined up to BLOCK rows: each process's new rows start a block
        of their own, which a store written a little at a time would otherwise save ever more of.
        Functions: a block with dead rows is gathered only when it is written (1M memories: not
        0.6 GB at once)."""
        groups, widths, scales, at = [], [], [], 0
        for block, scale in zip(self.blocks, self.scales):
            view = block[:, :len(scale)]
            if alive is None:
                part, width = (lambda view=view: view), len(scale)
                scales.append(scale)
            else:               # (a mask on the last axis can give a Fortran-ordered copy)
                keep = alive[at:at + len(scale)]
                part, width = (lambda view=view, keep=keep: np.ascontiguousarray(view[:, keep])), int(keep.sum())
                scales.append(scale[keep])
            at += len(scale)
            if not width:
                continue
            if groups and widths[-1] + width <= BLOCK:
                groups[-1].append(part)
                widths[-1] += width
            else:
                groups.append([part])
                widths.append(width)
        blocks = [(lambda parts=parts: parts[0]() if len(parts) == 1 else np.hstack([make() for make in parts]))
                  for parts in groups]
        return blocks, np.concatenate(scales) if scales else np.zeros(0, np.float32)

    def append(self, rows: np.ndarray) -> None:
        """Add rows (float16 as stored: the bounds are against these exact values)."""
        rows = np.asarray(rows).reshape(-1, self.dim)
        for lo in range(0, len(rows), _CONVERT):
            self._append(rows[lo:lo + _CONVERT])

    def _append(self, rows: np.ndarray) -> None:
        done = 0
        while done < len(rows):
            if not self.blocks or self.n - self._last == BLOCK or len(self.blocks) == self.sealed:
                self.blocks.append(_pages.zeros((self.dim, min(BLOCK, max(1024, len(rows) - done))), np.int8))
                self.scales.append(np.zeros(0, np.float32))
                self._last = self.n
            at = self.n - self._last
            take = min(len(rows) - done, BLOCK - at)
            block = self.blocks[-1]
            if at + take > block.shape[1]:       # the last block grows geometrically up to BLOCK
                grown = _pages.zeros((self.dim, min(BLOCK, max(at + take, 2 * block.shape[1]))), np.int8)
                grown[:, :at] = block[:, :at]
                block = self.blocks[-1] = grown
            scale = np.empty(take, np.float32)   # 0 for an all-zero row: it scores 0
            _kernels.quantize_rows(rows[done:done + take], block[:, at:at + take], scale)
            self.scales[-1] = np.concatenate([self.scales[-1], scale])
            done += take
            self.n += take

    def slack(self, q: np.ndarray, dims: np.ndarray) -> float:
        """How far, in units of a row's scale, its int8 sum may be from the exact float32 dot product
        with the stored row: rounding to int8 moves each value by at most half a scale step, and
        float32 sums of up to len(dims) terms of size |q| * 127 add at most ~2^-22 of that each."""
        l1 = float(np.abs(q[dims]).sum())
        return l1 * (0.51 + len(dims) * _ONE * 2.0 ** -22) + 1e-6

    def upper(self, q: np.ndarray, dims: np.ndarray, alive: np.ndarray | None = None) -> np.ndarray:
        """An upper bound of q . row for each of rows [0, n) (float32), at most 2 * scale * slack
        above it, using only the dimensions `dims`; -inf for the rows where `alive` is False. The
        snapshot's columns among `dims` not checked yet are checked as the scan reads them: a
        sealed block that has any is one part, which computes their CRCs in the same pass
        (_kernels.column_scores) and confirms them before its bounds are used (DamagedSnapshot,
        reported to the checks, if one fails)."""
        dims = np.asarray(dims, np.int64)
        weights = (dims, q[dims].astype(np.float32), self.slack(q, dims))
        out = np.empty(self.n, np.float32)
        parts, at = [], 0
        for b, (cols, scale) in enumerate(zip(self.blocks, self.scales)):
            check = self._unchecked(b, dims)
            step = _PART if check is None else max(len(scale), 1)    # a column's CRC runs in order
            for lo in range(0, len(scale), step):
                hi = min(len(scale), lo + step)
                parts.append((cols[:, lo:hi], scale[lo:hi], None if alive is None else alive[at + lo:at + hi],
                              out[at + lo:at + hi], check))
            at += len(scale)
        # the worker helps with large scans, and with any that checks columns (first reads: page
        # faults; a new process's first hybrid recall at 100k: 21.8 -> 20.9 ms)
        helper = self.n >= _SPLIT_ROWS or any(part[4] is not None for part in parts)
        run_parts(parts, lambda part: _score_part(part, weights, self.checks), helper=helper)
        return out

    def _unchecked(self, b: int, dims: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(the pieces, and which of `dims` they are) of block b's columns `dims` not checked yet."""
        if self.checks is None or b >= self.sealed:
            return None
        want = ~self.checks.done[b * self.dim + dims]
        return (b * self.dim + dims[want], want) if want.any() else None


def run_parts(parts: list, fn, helper: bool = False) -> None:
    """fn(part) for each part, on this thread, the colscan worker if `helper`, and any thread that
    calls `help_scan` meanwhile; raises what a part raised."""
    global _current
    tasks = _current = _Parts(parts, fn)
    try:
        if helper:
            _HELPER.submit(tasks.run)
        tasks.run()
        tasks.wait()
    finally:
        _current = None
    if tasks.error is not None:
        raise tasks.error


class _Parts(Pieces):
    """The parts of one scan, each taken by whichever thread is free: the thread scoring the query,
    the worker for a large scan, and (`help_scan`) the thread waiting for the answer."""

    def __init__(self, parts: list, fn):
        super().__init__(len(parts))
        self.parts, self.fn = parts, fn
        self.error: BaseException | None = None

    def run(self) -> None:
        while (k := self._take()) is not None:
            try:
                self.fn(self.parts[k])
            except BaseException as exc:  # noqa: BLE001  (re-raised by the scoring thread)
                self.error = exc
            finally:
                self._finish_one()


def help_scan() -> None:
    """Score parts of the scan in progress (by columns, or an exact one), if any: a recall's thread
    calls this once its lexical scoring is done, instead of idling until the vector search it
    started answers (measured at 100k memories: 0.8-1.0 ms less at p50, 1.2 ms at p95)."""
    parts = _current
    if parts is not None:
        parts.run()


def _score_part(part: tuple, weights: tuple, checks: PieceChecks | None) -> None:
    """For an (int8 columns, row scales, live rows, output, unchecked) part and (dims, float32 w,
    slack): output = scales * (sum of w[i] * column[dims[i]] + slack), -inf for dead rows; the sum
    runs over the dimensions in order, in float32, as `slack` assumes. Compiled, one pass over the
    part with the GIL released, which also computes the CRCs of its `unchecked` (pieces, wanted
    dims) for `checks` to confirm."""
    cols, scale, alive, out, unchecked = part
    dims, w, slack = weights
    if unchecked is None:
        _kernels.column_scores(cols, dims, w, scale, alive, slack, out)
        return
    pieces, want = unchecked
    crcs = np.zeros(len(dims), np.uint32)
    _kernels.column_scores(cols, dims, w, scale, alive, slack, out, crcs, want)
    checks.confirm(pieces, crcs[want])


class Build:
    """A ColumnScan being built from `mat` on a daemon thread of its own: numpy's loops release the
    GIL, so queries go on meanwhile, and rows never change once written, so the matrix can be read
    while the caller appends to it (to a new buffer, or past `len(mat)`). A process that exits does
    not wait for it, and `stop()` (a closing engine, renumbered rows) ends it at its next chunk."""

    def __init__(self, mat: np.ndarray, dim: int):
        self.scan: ColumnScan | None = None
        self.error: BaseException | None = None
        self._stop, self._done = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, args=(mat, dim), name="ipy_memory-columns", daemon=True)
        self.thread.start()

    def _run(self, mat: np.ndarray, dim: int) -> None:
        try:
            scan = ColumnScan(dim)
            for lo in range(0, len(mat), _CONVERT):
                if self._stop.is_set():
                    return
                scan.append(mat[lo:lo + _CONVERT])
            self.scan = scan
        except BaseException as exc:  # noqa: BLE001  (queries keep the full scan)
            self.error = exc
        finally:
            self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> ColumnScan | None:
        self._done.wait(timeout)
        return self.scan

    def stop(self) -> None:
        self._stop.set()


def rows_dot(rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """rows . q in float32, exactly as stored. Reads only q's non-zero dimensions when it has few
    (a hashing-embedder query): numpy converts float16 to float32 one value at a time, and converting
    200 whole rows took 4x as long as converting their 61 dimensions that count."""
    dims = np.flatnonzero(q)
    if len(dims) > len(q) * SPARSE_MAX_SHARE:
        return rows.astype(np.float32, copy=False) @ q
    return rows[:, dims].astype(np.float32, copy=False) @ q[dims]


def top_rows(bounds: np.ndarray, mat: np.ndarray, q: np.ndarray, want: int, live: int,
             check_rows=lambda rows: None) -> tuple[np.ndarray, np.ndarray] | None:
    """(rows, their exact q . row) of the live rows holding the exact top `want` (all rows tied with
    the last one included), or None when the bounds (ColumnScan.upper of q's dimensions, -inf for
    dead rows) cannot prove it within a few thousand candidates. `check_rows(rows)` is called
    before the rows of `mat` are read."""
    want = min(want, live)
    if want <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    take = min(live, 2 * want)
    while True:
        rows = largest(bounds, take) if take < len(bounds) else np.flatnonzero(bounds > -np.inf)
        check_rows(rows)
        exact = rows_dot(mat[rows], q)
        if take >= live:
            return rows, exact
        nth = np.partition(exact, len(exact) - want)[len(exact) - want]
        # a row left out scores at most its bound <= the lowest bound taken
        if float(bounds[rows].min()) < nth - 1e-6:
            keep = exact >= nth - 1e-6
            return rows[keep], exact[keep]
        if take >= 8192:
            return None
        take = min(live, 4 * take)


class ColumnsMixin:
    """VectorShard's use of a ColumnScan: built after the first sparse query of a large space (or
    loaded with its snapshot: _colsnap), caught up with appended rows at each query, dropped when
    rows are renumbered (`_reset`). `_check_rows` and `_uncover` are _colsnap.VectorSnapshot's."""

    _columns: ColumnScan | None = None
    _columns_job: Build | None = None  # the columns being built
    _columns_wanted = False           # a sparse query found no columns: build them after it

    def _column_scan(self) -> ColumnScan | None:
        """The int8 columns of the matrix, caught up with its rows, or None while they are being
        built (100k memories: 0.35-0.6 s here; meanwhile a query scans every row)."""
        if self._columns is None:
            job = self._columns_job
            if job is None or not job.done() or job.scan is None:     # a failed build is not retried
                return None
            self._columns, self._columns_job = job.scan, None
        if self._columns.n < self.keys.size:
            self._columns.append(self.mat.view[self._columns.n:])
        return self._columns

    def _sparse_rows(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(rows, exact scores) of the live rows holding the exact top k (ties included), found by
        columns; None where that does not pay or cannot prove its answer: a small space, a dense
        query, a graph, columns not built yet (then `start_wanted_columns` builds them, called once
        the query is answered)."""
        if self.graph is not None or self.keys.size < SPARSE_MIN_ROWS:
            return None
        if not 0 < np.count_nonzero(q) <= self.dim * SPARSE_MAX_SHARE:
            return None
        scan = self._column_scan()
        if scan is None:
            self._columns_wanted = self._columns_job is None
            return None
        try:
            bounds = scan.upper(q, np.flatnonzero(q), self.alive.view[:scan.n])
        except DamagedSnapshot:        # reported: the snapshot is dropped at the next settle
            self.drop_columns()        # and meanwhile every row scanned
            return None
        return top_rows(bounds, self.mat.view, q, k, self.live, self._check_rows)

    def start_wanted_columns(self) -> None:
        """Start building the columns a sparse query found missing: after it has answered (a recall
        calls this once it has ranked), since the build must not slow the one that asked."""
        if self._columns_wanted and self._columns is None and self._columns_job is None:
            self._uncover()
            self._columns_job = Build(self.mat.view, self.dim)
        self._columns_wanted = False

    def stop_column_build(self) -> None:
        """Stop a build in progress (the engine closes: the columns it holds are saved)."""
        if self._columns_job is not None:
            self._columns_job.stop()
        self._columns_job = None

    def drop_columns(self) -> None:
        """Forget the columns and stop a build in progress (rows renumbered, damaged columns)."""
        self.stop_column_build()
        self._columns = None
