"""Vector search over one space: exact SIMD scan of a float16 matrix, plus an HNSW graph for large
spaces of real-model vectors.

The exact scan is `_kernels.half_dots` (compiled, on CPUs with F16C; usearch's exact search elsewhere
and where the extension is not built), then exact float32 rescoring of its candidates (`rows_dot`).

Measured on this machine (2 cores): building a usearch HNSW graph costs 1.6k-7k inserts/s while an
exact float16 scan of 100k vectors takes a few milliseconds. So the graph is only built where it
pays: for a real embedding model's vectors (`Settings.vector_index`) in a space of more than
`exact_threshold` vectors. The hashing embedder's vectors spread almost uniformly and HNSW handles
them badly (14-35% of 100k nodes unreachable, `benchmarks/vector_index.py`), so they are scanned
exactly. Rows added after the graph was built form an exact "tail" that joins the graph in batches
of `hnsw_tail`; graph candidates are rescored exactly against the stored vectors. A sparse query
(the hashing embedder's: zero in most dimensions) in a large space without a graph reads only its
own dimensions from a column-major copy, with the same exact answer (`_colscan.py`); the colder
tiers' int8 store is in `_lowtier.py`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from . import _graphcheck, _kernels
from ._colscan import ColumnsMixin, rows_dot, run_parts
from ._colsnap import COLUMN_BLOCK, VectorSnapshot
from ._columns import AscendingKeys, Column
from ._lowtier import _LowTier, _Rows, _scan_threads
from ._native import exact_cosine, usearch
from ._topk import isin, largest, unique
from .config import Settings

_EXACT_PART = 8192           # rows an exact scan's part holds (6 MB at 384 dims)


class VectorShard(_Rows, ColumnsMixin, VectorSnapshot):
    """Vectors of one space. `fetch(keys)` reads exact vectors from SQLite (for the colder tiers)."""

    # checked beside its first use (_npz.load_npz): float16 values, in parts of an exact scan's rows
    VALUE_MEMBERS = {"hot": _EXACT_PART}
    PIECE_MEMBERS = (COLUMN_BLOCK,)  # members so named are checked piece by piece as read (_colsnap)

    def __init__(self, dim: int, settings: Settings, *, graph: bool = True, fetch=None):
        self.dim, self.s, self.graph_allowed = dim, settings, graph
        self.fetch = fetch
        self.scanned = None          # the snapshot rows' check, for an exact scan of them (_snapchecks.RowChecks)
        self.low = _LowTier(dim)
        self.keys = Column(np.int64)
        self.mat = Column(np.float16, width=dim)
        self.alive = Column(np.bool_, fill=False)
        self._row_of = {}
        self.dead = 0
        self.graph = None            # a usearch Index
        self.graph_rows = 0        # rows [0, graph_rows) of the matrix are in the graph
        self.orphans: set[int] = set()   # keys in the graph that its search cannot reach: scanned exactly
        self._sweep = (0, 0, 0)          # the re-check of older graph rows, in passes (_graphcheck)
        self._orphan_cache = None
        self._key_order = AscendingKeys()     # finds the row of a key: see _rows

    def __len__(self) -> int:
        return self.live + self.low.live

    @property
    def hot_count(self) -> int:
        return self.live

    def _new_graph(self):
        return usearch().Index(ndim=self.dim, metric="cos", dtype="f16", connectivity=self.s.hnsw_connectivity,
                     expansion_add=self.s.hnsw_expansion_add, expansion_search=self.s.hnsw_expansion_search)

    # ------------------------------------------------------------------------------ writes
    def add(self, keys, vecs: np.ndarray, cold=None, *, build: bool = True) -> None:
        """Add vectors; rows where `cold` is true go to the int8 store of the colder tiers.

        `build=False` leaves the graph alone (loading: a saved graph is adopted afterwards)."""
        keys = np.asarray(keys, np.int64)
        vecs = np.asarray(vecs)         # float16 rows (as stored) are kept as they are: no round trip
        vecs = vecs.astype(np.float32, copy=False) if vecs.dtype != np.float16 else vecs
        vecs = vecs.reshape(len(keys), self.dim)
        known = self._rows(keys) >= 0
        if self.low.live:
            known |= np.array([k in self.low.row_of for k in keys.tolist()], bool)
        if cold is not None:
            low = np.asarray(cold, bool) & ~np.asarray(known, bool)
            if low.any():
                self.low.add(keys[low], vecs[low])
            known = np.asarray(known, bool) | low
        fresh = [i for i, k in enumerate(known) if not k]
        if not fresh:
            return
        self._added(keys[fresh], self.keys.size)
        self.keys.extend(keys[fresh])
        self.mat.extend(vecs[fresh])
        self.alive.extend(np.ones(len(fresh), bool))
        if build and self.graph_allowed and self.hot_count >= self.s.exact_threshold:
            if self.keys.size - self.graph_rows >= (self.s.hnsw_tail if self.graph is not None else 0):
                self.build_graph()

    def build_graph(self) -> None:
        """Add the tail rows to the graph (creating it if needed)."""
        if self.graph is None:
            self.graph, self.graph_rows = self._new_graph(), 0
        old_rows = self.graph_rows
        rows = np.arange(old_rows, self.keys.size)
        rows = rows[self.alive.view[rows]]
        if len(rows):
            self.graph.add(self.keys.view[rows], self.mat.view[rows], threads=os.cpu_count() or 1)
            if old_rows:     # adding re-prunes older nodes' links: re-check some (_graphcheck)
                older, self._sweep = _graphcheck.recheck_window(old_rows, len(rows), self._sweep)
                rows = np.concatenate([older[self.alive.view[older]], rows])
            self._find_orphans(rows)
        self.graph_rows = self.keys.size

    def _orphan_block(self) -> tuple[np.ndarray, np.ndarray]:
        """Rows and a contiguous float16 copy of the orphans (cached until the set changes)."""
        if self._orphan_cache is None:
            orows = np.array(sorted(self.row_of[x] for x in self.orphans), np.int64)
            self._orphan_cache = (orows, np.ascontiguousarray(self.mat.view[orows]))
        return self._orphan_cache

    def _find_orphans(self, rows: np.ndarray) -> None:
        """Scan exactly, from now on, the graph rows among `rows` that its search cannot reach."""
        if not len(rows) or not len(self.graph):
            return
        keys = self.keys.view[rows]
        self.orphans.update(int(k) for k in keys[_graphcheck.unreachable(self.graph, keys, self.mat.view[rows])])
        self._orphan_cache = None

    def set_cold(self, key: int, cold: bool) -> None:
        """Move a row between the float16 (hottest tier) and int8 (colder tiers) stores."""
        key = int(key)
        if cold and key in self.row_of:
            self._check_rows(np.array([self.row_of[key]]))
            vec = self.mat.view[self.row_of[key]].astype(np.float32)
            self.remove(key)
            self.low.add(np.array([key]), vec[None])
        elif not cold and key in self.low.row_of and self.fetch is not None:
            self.low.remove(key)
            self.add([key], self.fetch([key]))

    def remove(self, key: int) -> bool:
        if self.low.remove(int(key)):
            return True
        row = self.row_of.pop(int(key), -1) if self._row_of is not None else int(self._rows(np.array([key]))[0])
        if row < 0:
            return False
        self.alive.view[row] = False
        self.live -= 1
        self.dead += 1
        if int(key) in self.orphans:
            self.orphans.discard(int(key))
            self._orphan_cache = None
        if self.graph is not None and row < self.graph_rows:
            self.graph.remove(int(key))
        if self.graph is None and self.dead > max(1024, self.keys.size // 4):
            self._compact()
        return True

    def _compact(self) -> None:
        self._reset(self.alive.view)

    def _reset(self, rows: np.ndarray) -> None:
        """Keep only `rows` (a mask or an index order) of the matrix, all live, renumbered."""
        keys, mat = self.keys.view[rows], self.mat.view[rows]
        self.keys, self.mat, self.alive = Column(np.int64), Column(np.float16, width=self.dim), Column(np.bool_, fill=False)
        self.keys.extend(keys)
        self.mat.extend(mat)
        self.alive.extend(np.ones(len(keys), bool))
        self._row_of, self.live = None, len(keys)
        self.dead = 0
        self._orphan_cache, self._sweep = None, (0, 0, 0)
        self._key_order = AscendingKeys()
        self._uncover()
        self.drop_columns()                 # rows were renumbered

    # ------------------------------------------------------------------------------ reads
    def _rows(self, keys: np.ndarray) -> np.ndarray:
        """The live float16 row of each key, -1 for none: by binary search while keys ascend (the
        duplicate check rescores up to N/8 sections: 1M memories, ~100 ms of dict lookups)."""
        rows = self._key_order.rows(self.keys, keys, lambda: self.row_of)
        ok = rows >= 0
        ok[ok] = self.alive.view[rows[ok]]
        return np.where(ok, rows, -1)

    def get(self, keys) -> np.ndarray:
        """Stored vectors for keys, exact for every tier (zeros for unknown keys)."""
        keys = np.asarray(keys, np.int64).reshape(-1)
        rows = self._rows(keys)
        out = np.zeros((len(rows), self.dim), np.float32)
        ok = rows >= 0
        self._check_rows(rows[ok])
        out[ok] = self.mat.view[rows[ok]]
        low = self._colder(keys)
        if low is not None:
            out[low] = self.fetch(keys[low].tolist())
        return out

    def dots(self, keys, q: np.ndarray) -> np.ndarray:
        """q . the stored vector of each key, exact for every tier (0 for unknown keys); as
        `get(keys) @ q`, without converting the dimensions a sparse q ignores."""
        keys = np.asarray(keys, np.int64).reshape(-1)
        q = np.asarray(q, np.float32)
        rows = self._rows(keys)
        out = np.zeros(len(rows), np.float32)
        ok = rows >= 0
        self._check_rows(rows[ok])
        out[ok] = rows_dot(self.mat.view[rows[ok]], q)
        low = self._colder(keys)
        if low is not None:
            out[low] = rows_dot(self.fetch(keys[low].tolist()), q)
        return out

    def dots_many(self, keys, qs: np.ndarray) -> np.ndarray:
        """qs @ the stored vector of each key, (len(qs), len(keys)) float32, exact for every tier (0
        for unknown keys): `qs @ get(keys).T` without a float32 copy of the rows, whose conversion
        one value at a time was most of the cost (the duplicate check of a write to a 1M store
        rescores up to 47k sections). The float16 rows are gathered and scanned by the compiled
        kernel where it runs F16C; the sums' order differs from a matrix product's in the last bits."""
        keys = np.asarray(keys, np.int64).reshape(-1)
        qs = np.ascontiguousarray(qs, np.float32).reshape(-1, self.dim)
        if not _kernels.FAST_HALF_DOTS:
            return qs @ self.get(keys).T
        rows = self._rows(keys)
        out = np.zeros((len(qs), len(keys)), np.float32)
        hot = np.flatnonzero(rows >= 0)
        if len(hot):
            self._check_rows(rows[hot])
            part = np.empty((len(qs), len(hot)), np.float32)
            _kernels.half_dots(self.mat.view[rows[hot]], qs, None, part)
            out[:, hot] = part
        low = self._colder(keys)
        if low is not None:
            out[:, low] = qs @ np.asarray(self.fetch(keys[low].tolist()), np.float32).reshape(-1, self.dim).T
        return out

    def _colder(self, keys: np.ndarray) -> np.ndarray | None:
        """Which keys are in the colder (int8) tier, whose exact vectors `fetch` reads; None for none."""
        if not self.low.live or self.fetch is None:
            return None
        low = np.array([k in self.low.row_of for k in keys.tolist()], bool)
        return low if low.any() else None

    def _exact_rows(self, qs: np.ndarray, start: int, k: int) -> list[np.ndarray]:
        """Per query, the (at most k) live rows from `start` on nearest by their float16 vectors (one
        scan pass for all queries; the caller rescores them exactly)."""
        mat = self.mat.view[start:]
        if not len(mat):
            return [np.zeros(0, np.int64) for _ in qs]
        self._uncover()                     # every row read: an answer waits for their whole check
        if _kernels.FAST_HALF_DOTS:
            return self._exact_rows_compiled(mat, qs, start, k)
        dead = int((~self.alive.view[start:]).sum()) if self.dead else 0
        want = min(len(mat), k + dead)
        m = exact_cosine(mat, qs.astype(np.float16), want, threads=_scan_threads(len(mat)))
        found = np.asarray(m.keys, np.int64).reshape(len(qs), -1)[:, :want] + start
        return [rows[(rows >= start) & self.alive.view[np.clip(rows, 0, self.keys.size - 1)]][:k] for rows in found]

    def _exact_rows_compiled(self, mat: np.ndarray, qs: np.ndarray, start: int, k: int) -> list[np.ndarray]:
        # float16 dots by F16C (152k rows: 9.3 ms on one core against usearch's 26.6; benchmarks/
        # kernels.py), and no usearch import on the way (~60-100 ms with urllib, tqdm, onnxruntime)
        sims = np.empty((len(qs), len(mat)), np.float32)
        qs, alive = np.ascontiguousarray(qs, np.float32), self.alive.view[start:] if self.dead else None
        if len(qs) == 1 and len(mat) >= 2 * _EXACT_PART:
            # in parts that the recall's thread takes too once its lexical scoring is done (help_scan),
            # each part's rows checked against the snapshot they came from in the scan's own pass
            # (half_dots_crc: 152k rows 9.5 ms against 17.8 for a scan, then a CRC of what it read)
            scanned = self.scanned if start == 0 else None

            def part(lo: int, hi: int) -> None:
                args = (qs, None if alive is None else alive[lo:hi], sims[:, lo:hi])
                if scanned is None:
                    _kernels.half_dots(mat[lo:hi], *args)
                else:
                    scanned.read(lo, mat[lo:hi], lambda rows: _kernels.half_dots(rows, *args),
                                 lambda rows: _kernels.half_dots_crc(rows, *args))
            run_parts([(lo, lo + _EXACT_PART) for lo in range(0, len(mat), _EXACT_PART)], lambda p: part(*p))
        else:
            _kernels.half_dots(mat, qs, alive, sims)
        out = []
        for row_sims in sims:
            rows = largest(row_sims, k)
            out.append(rows[np.isfinite(row_sims[rows])] + start)      # -inf: dead rows, when few live
        return out

    def search_many(self, qs: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """`search` for several queries: one exact scan pass serves them all (about 2x faster)."""
        qs = np.asarray(qs, np.float32).reshape(-1, self.dim)
        if not self.live or len(qs) < 2 or k <= 0:
            return [self.search(q, k) for q in qs]
        found = [self._sparse_rows(q, k) for q in qs]
        rest = [i for i, rows in enumerate(found) if rows is None]
        if rest:
            start = self.graph_rows if self.graph is not None else 0
            for i, rows in zip(rest, self._exact_rows(qs[rest], start, 2 * k + 10)):
                found[i] = rows
        return [self.search(q, k, rows) for q, rows in zip(qs, found)]

    def search(self, q: np.ndarray, k: int, _exact=None, *, start_columns: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (keys, cosine similarities), best first. `start_columns=False`: the caller calls
        `start_wanted_columns` later (a recall, once it has ranked)."""
        q = np.asarray(q, np.float32)
        if not len(self) or k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        hot_keys, hot_sims = self._search_hot(q, k, _exact) if self.live else (np.zeros(0, np.int64), np.zeros(0, np.float32))
        if start_columns:
            self.start_wanted_columns()
        low_keys = self.low.candidates(q, max(10 * k, 100))    # int8 picks the candidates, generously
        if not len(low_keys):
            return hot_keys, hot_sims
        low_sims = self.dots(low_keys, q)                    # exact rescoring from the stored vectors
        keys = np.concatenate([hot_keys, low_keys])
        sims = np.concatenate([hot_sims, low_sims]).astype(np.float32)
        order = np.lexsort((keys, -np.round(sims, 5)))[:k]
        return keys[order], sims[order]

    def _search_hot(self, q: np.ndarray, k: int, exact=None) -> tuple[np.ndarray, np.ndarray]:
        # over-fetch: the scans rank in float16, the answer is rescored in float32 (stable near-ties)
        want = 2 * k + 10
        if exact is None:
            exact = self._sparse_rows(q, k)       # (rows, exact scores) of the exact top k, or None
        if isinstance(exact, tuple):
            rows, sims = exact
        else:
            parts = [exact if exact is not None else self._exact_rows(q[None], self.graph_rows if self.graph is not None else 0, want)[0]]
            if self.orphans:
                orows, omat = self._orphan_block()
                m = exact_cosine(omat, q.astype(np.float16), min(len(orows), want))
                parts.append(orows[np.asarray(m.keys, np.int64).reshape(-1)[:want]])
            if self.graph is not None and len(self.graph):
                m = self.graph.search(q, min(len(self.graph), max(4 * k, 40)))
                grows = np.array([self.row_of.get(int(x), -1) for x in np.asarray(m.keys).reshape(-1)], np.int64)
                parts.append(grows[grows >= 0])
            rows = unique(np.concatenate(parts))            # an orphan may also come back from the graph
            rows = rows[self.alive.view[rows]]
            sims = rows_dot(self.mat.view[rows], q)            # exact rescoring of every candidate
        keys = self.keys.view[rows]
        order = np.lexsort((keys, -np.round(sims, 5)))[:k]      # ties broken by key: same answer every time
        return keys[order], sims[order].astype(np.float32)

    # ------------------------------------------------------------------------------ persistence (graph)
    def save_graph(self, path: Path) -> bool:
        if self.graph is None:
            return False
        self.build_graph()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self.graph.save(str(tmp))
        os.chmod(tmp, 0o600)
        orphans = path.with_name(path.name + ".orphans.npy")
        tmp_orphans = orphans.with_name(f".{orphans.name}.{os.getpid()}.tmp")
        with open(tmp_orphans, "wb") as f:
            np.save(f, np.array(sorted(self.orphans), np.int64))
        os.chmod(tmp_orphans, 0o600)
        os.replace(tmp_orphans, orphans)    # first: a newer list beside an older graph only adds exact scans
        os.replace(tmp, path)
        return True

    def adopt_graph(self, path: Path) -> bool:
        """Use a saved graph for the rows it holds that are still live; False if it is unusable."""
        try:
            graph = self._new_graph()
            graph.load(str(path))
            if graph.ndim != self.dim:
                return False
            in_graph = np.asarray(graph.keys, np.int64)
        except Exception:  # a damaged index file is only a cache: rebuild from SQLite
            return False
        # Keep only keys that are live here AND whose vector in the graph is the one SQLite holds:
        # a graph saved by another store, or before a backup was restored, must not be trusted.
        rows = np.array([self.row_of.get(k, -1) for k in in_graph.tolist()], np.int64)
        good = rows >= 0
        if good.any():
            stored = np.asarray(graph.get(in_graph[good]), np.float32).reshape(-1, self.dim)
            with np.errstate(invalid="ignore", over="ignore"):     # a garbage file may hold NaN / inf
                same = np.abs(stored - self.mat.view[rows[good]].astype(np.float32)).max(axis=1) <= 1e-3
            good[np.flatnonzero(good)[~same]] = False
        for k in in_graph[~good].tolist():
            graph.remove(k)
        in_graph = in_graph[good]
        # Reorder the matrix: rows in the graph first, then the tail the graph lacks.
        known = isin(self.keys.view, in_graph) & self.alive.view
        self._reset(np.concatenate([np.flatnonzero(known), np.flatnonzero(~known & self.alive.view)]))
        try:
            orphans = np.load(path.with_name(path.name + ".orphans.npy"), allow_pickle=False)
        except Exception:  # missing or damaged: recomputed below
            orphans = None
        if orphans is None or not good.all():   # unknown, or removals may have cut paths: search again
            self.graph = graph
            self._find_orphans(np.arange(int(known.sum())))
        else:
            self.orphans = {int(k) for k in orphans.tolist() if int(k) in self.row_of}
            self._orphan_cache = None
        self.graph, self.graph_rows = graph, int(known.sum())
        return True
