"""Vector search over one space: exact below a size threshold, usearch HNSW above it.

The graph is the expensive part of inserting, so it is built in batches: vectors added since the
last build sit in an exact "tail" searched with one matrix product, and join the graph once the
tail reaches `hnsw_tail` rows (or when the graph is saved). Candidates from the graph are rescored
exactly against the stored vectors, so approximate search only decides which rows are looked at.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from usearch.index import Index

from ._columns import Column
from .config import Settings


class VectorShard:
    def __init__(self, dim: int, settings: Settings):
        self.dim, self.s = dim, settings
        self.keys = Column(np.int64)
        self.mat = Column(np.float32, width=dim)
        self.alive = Column(np.bool_, fill=False)
        self.row_of: dict[int, int] = {}
        self.graph: Index | None = None
        self.in_graph = 0          # live keys held by the graph

    def __len__(self) -> int:
        return len(self.row_of) + self.in_graph

    def _new_graph(self) -> Index:
        return Index(ndim=self.dim, metric="cos", dtype="f16", connectivity=self.s.hnsw_connectivity,
                     expansion_add=self.s.hnsw_expansion_add, expansion_search=self.s.hnsw_expansion_search)

    def add(self, keys, vecs: np.ndarray) -> None:
        keys = [int(k) for k in keys]
        fresh = [i for i, k in enumerate(keys) if k not in self.row_of and not self._in_graph(k)]
        if not fresh:
            return
        base = self.keys.size
        for j, i in enumerate(fresh):
            self.row_of[keys[i]] = base + j
        self.keys.extend([keys[i] for i in fresh])
        self.mat.extend(np.asarray(vecs, np.float32)[fresh])
        self.alive.extend([True] * len(fresh))
        if self.graph is None and len(self) >= self.s.exact_threshold:
            self.graph = self._new_graph()
            self.flush()
        elif self.graph is not None and len(self.row_of) >= self.s.hnsw_tail:
            self.flush()

    def _in_graph(self, key: int) -> bool:
        return self.graph is not None and key in self.graph

    def flush(self) -> None:
        """Move the exact tail into the graph (a no-op below the exact threshold)."""
        if self.graph is None or not self.row_of:
            return
        live = self.alive.view
        keys, mat = self.keys.view[live], self.mat.view[live]
        self.graph.add(keys, mat, threads=os.cpu_count() or 1)
        self.in_graph += len(keys)
        self.keys, self.mat, self.alive = Column(np.int64), Column(np.float32, width=self.dim), Column(np.bool_, fill=False)
        self.row_of = {}

    def remove(self, key: int) -> bool:
        row = self.row_of.pop(key, None)
        if row is not None:
            self.alive.view[row] = False
            return True
        if self._in_graph(key):
            self.graph.remove(key)
            self.in_graph -= 1
            return True
        return False

    def get(self, keys) -> np.ndarray:
        """Stored vectors for keys (zeros for unknown keys)."""
        out = np.zeros((len(keys), self.dim), np.float32)
        for i, k in enumerate(keys):
            row = self.row_of.get(int(k))
            if row is not None:
                out[i] = self.mat.view[row]
            elif self._in_graph(int(k)):
                out[i] = self.graph.get(int(k))
        return out

    def search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (keys, cosine similarities), best first."""
        keys, sims = [], []
        if self.row_of:
            live = np.flatnonzero(self.alive.view)
            s = self.mat.view[live] @ q
            top = live[np.argsort(-s)[:k]] if len(live) > k else live
            keys.append(self.keys.view[top])
            sims.append(self.mat.view[top] @ q)
        if self.graph is not None and self.in_graph:
            m = self.graph.search(q, min(self.in_graph, max(4 * k, 40)))
            gk = np.asarray(m.keys, np.int64)
            if len(gk):
                vecs = np.asarray(self.graph.get(gk), np.float32).reshape(len(gk), self.dim)
                keys.append(gk)
                sims.append(vecs @ q)          # exact rescoring of the graph's candidates
        if not keys:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        keys, sims = np.concatenate(keys), np.concatenate(sims).astype(np.float32)
        order = np.argsort(-sims, kind="stable")[:k]
        return keys[order], sims[order]

    # ------------------------------------------------------------------------ persistence (graph)
    def save_graph(self, path: Path) -> bool:
        if self.graph is None:
            return False
        self.flush()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self.graph.save(str(tmp))
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
        return True

    def load_graph(self, path: Path) -> bool:
        """Load a saved graph; False (and nothing loaded) if it is missing or unusable."""
        try:
            graph = self._new_graph()
            graph.load(str(path))
            if graph.ndim != self.dim:
                return False
        except Exception:  # a damaged index file is only a cache: rebuild from SQLite
            return False
        self.graph, self.in_graph = graph, len(graph)
        return True
