"""A vector shard's snapshot: its rows, its int8 columns, and CRCs by piece for both.

A snapshot of a space that its queries may scan by columns (_colscan) holds those columns, a
member per block (`colblock.0`, ...), with a CRC per column of a block, and a CRC per group of
`ROW_GROUP` float16 rows. A new process's first sparse query then reads only its own columns and
the rows it rescores, each piece checked as it is first read (_snapchecks.PieceChecks), and answers
before the snapshot's rows are checked whole (117 MB at 100k memories: that check goes on after
it, on the scan thread). Any read of the rows that the piece checks do not follow (an exact scan
of them all, a renumbering) makes a recall wait for the whole check again (`_uncover`).

Measured on a 100k-memory store (a new process, its first hybrid recall): 37.3 -> 27.3 ms; at 1M
249 -> 157 ms. The columns cost ~590 bytes a memory on disk, and a conversion at close when the
process holds none (100k memories: ~0.13 s).
"""

from __future__ import annotations

import numpy as np

from . import _colscan, _kernels
from ._colscan import ColumnScan
from ._log import log
from ._snapchecks import LaterChecks, PieceChecks, chunk_crcs, piece_count
from ._topk import isin, unique

ROW_GROUP = 16             # float16 rows per CRC (12 kB at 384 dims)
COLUMN_BLOCK = "colblock."  # a snapshot's member of a block of columns: colblock.0, colblock.1, ...


def column_crcs(blocks: list[np.ndarray], pieces: np.ndarray) -> np.ndarray:
    """The CRC of each of `pieces` of the (dim, rows) column blocks: piece b * dim + d is column d
    of block b."""
    dim, out = len(blocks[0]), np.empty(len(pieces), np.uint32)
    owner = pieces // dim
    for b in unique(owner).tolist():
        at = np.flatnonzero(owner == b)
        crcs = np.empty(len(at), np.uint32)
        _kernels.crc32_rows(blocks[b], pieces[at] - b * dim, crcs)
        out[at] = crcs
    return out


class VectorSnapshot:
    """VectorShard's snapshot: its rows, and its columns and row checks (see the module)."""

    row_checks: PieceChecks | None = None    # of the snapshot's rows while their whole check is pending
    scanned = None                    # that whole check's RowChecks (_snapchecks), set by the loader

    def arrays(self, lazy: bool = False) -> dict:
        """The live rows as held in memory: float16 for the hottest tier, int8 for the colder ones;
        `lazy`: the columns' blocks as functions that make them, in order (see write_npz)."""
        (hot_keys, hot), (low_keys, low) = self.live_rows(), self.low.live_rows()
        out = {"hot_keys": hot_keys, "hot": hot, "low_keys": low_keys, "low": low, **self.column_members(hot)}
        return out if lazy else {k: v() if callable(v) else v for k, v in out.items()}

    def restore(self, data, path=None, checks=None) -> None:
        """Load `arrays()` of an earlier session into this empty shard, without conversion (the
        columns' pieces checked as they are first read if `checks`: see the module)."""
        hot_keys, hot = np.asarray(data["hot_keys"]), np.asarray(data["hot"])
        low_keys, low = np.asarray(data["low_keys"]), np.asarray(data["low"])
        if (hot_keys.dtype != np.int64 or low_keys.dtype != np.int64 or hot.dtype != np.float16
                or low.dtype != np.int8 or hot.shape != (len(hot_keys), self.dim)
                or low.shape != (len(low_keys), self.dim) or len(self)):
            raise ValueError("not a vector snapshot of this shard's shape")
        for keys, mat, part in ((hot_keys, hot, self), (low_keys, low, self.low)):
            part.keys.adopt(keys)               # mapped, not copied (1M sections: 12 MB of keys,
            part.mat.adopt(mat)                 # 1.2 GB of vectors)
            part.alive.adopt(np.ones(len(keys), bool))
            part._row_of, part.live = None, len(keys)
            if not (keys[1:] > keys[:-1]).all() and len(part.row_of) != len(keys):   # not ascending: count
                raise ValueError("duplicate keys in a vector snapshot")
        if len(low_keys) and isin(hot_keys, low_keys).any():
            raise ValueError("duplicate keys in a vector snapshot")
        self.restore_columns(data, path, checks)

    def column_members(self, hot: np.ndarray) -> dict:
        """The snapshot members of the columns of the live rows `hot` (as `arrays()` saves them),
        for a space scanned by columns: the columns as held, or converted now (100k memories:
        ~0.13 s), a member per block (not one array: at 1M memories, 0.6 GB copied once more on
        memory this VM hands out slowly), made as it is written (write_npz takes functions), with
        their CRCs; none for a space a graph may serve or too small for columns."""
        if self.graph_allowed or len(hot) < _colscan.SPARSE_MIN_ROWS:
            return {}
        scan = self._column_scan()
        if scan is not None and scan.checks is not None and scan.checks.damaged_piece() is not None:
            log.warning("ipy_memory: converting the vectors' columns anew: %s's were damaged", scan.checks.path)
            scan = None                # (mapped from a snapshot: what no query checked is checked now)
        if scan is None:               # (_column_scan gives a scan caught up with every row)
            scan = ColumnScan(self.dim)
            scan.append(hot)
        blocks, scale = scan.live_blocks(None if len(hot) == scan.n else self.alive.view)
        n, dim = len(scale), self.dim
        crcs = np.zeros(len(blocks) * dim, np.uint32)

        def written(b):                # each block made as it is written, its CRCs taken then
            def make():
                out = blocks[b]()
                crcs[b * dim:(b + 1) * dim] = column_crcs([out], np.arange(dim))
                return out
            return make
        return {**{f"{COLUMN_BLOCK}{b}": written(b) for b in range(len(blocks))},
                "cols.scale": scale, "hot.group": np.array(ROW_GROUP),
                "cols.crc": lambda: crcs,          # (written after the blocks, which fill it)
                "hot.crc": chunk_crcs(hot, n, np.arange(piece_count(n, ROW_GROUP)), ROW_GROUP)}

    def restore_columns(self, data, path, checks: LaterChecks | None) -> None:
        """Take the columns of a snapshot just restored (`column_members`), if it has them in this
        layout and this space may be scanned by columns (a graph reads every row, which the row
        checks do not follow); with `checks`, each piece is checked as it is first read (see the
        module)."""
        if self.graph_allowed or "cols.scale" not in data or int(data["hot.group"]) != ROW_GROUP:
            return
        blocks = []
        while f"{COLUMN_BLOCK}{len(blocks)}" in data:
            blocks.append(np.asarray(data[f"{COLUMN_BLOCK}{len(blocks)}"]))
        scale, col_crcs, row_crcs = (np.asarray(data[k]) for k in ("cols.scale", "cols.crc", "hot.crc"))
        n = self.keys.size
        if (not blocks or any(b.dtype != np.int8 or b.ndim != 2 or len(b) != self.dim or not b.shape[1] for b in blocks)
                or sum(b.shape[1] for b in blocks) != n or scale.dtype != np.float32 or scale.shape != (n,)
                or col_crcs.dtype != np.uint32 or row_crcs.dtype != np.uint32
                or col_crcs.shape != (len(blocks) * self.dim,) or row_crcs.shape != (piece_count(n, ROW_GROUP),)):
            raise ValueError("not the columns of this vector snapshot")
        mat = self.mat
        pieces = None if checks is None else PieceChecks(col_crcs, lambda p: column_crcs(blocks, p), path, "cols", checks)
        self._columns = ColumnScan.loaded(blocks, scale, pieces)
        if checks is not None and self.scanned is not None:
            self.row_checks = PieceChecks(row_crcs, lambda g: chunk_crcs(mat.view, n, g, ROW_GROUP), path, "hot", checks)
            self.scanned.check.covered = True

    def _check_rows(self, rows: np.ndarray) -> None:
        """Check the snapshot's rows among `rows` (row numbers) before they are read, if needed."""
        checks = self.row_checks
        if checks is not None and len(rows):
            rows = np.asarray(rows, np.int64)
            checks.ensure(rows[rows < len(checks.crcs) * ROW_GROUP] // ROW_GROUP)

    def _uncover(self) -> None:
        """The snapshot's rows are read in a way the piece checks do not follow: an answer now waits
        for their whole check (and a renumbering leaves the row numbers of `row_checks` behind)."""
        if self.scanned is not None:
            self.scanned.check.covered = False
        self.row_checks = None
