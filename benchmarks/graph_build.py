"""Building the HNSW graph of a real model's vectors as memories arrive, and what it loses.

    .venv/bin/python benchmarks/graph_build.py --n 200000      # about 10 minutes on 2 cores
    .venv/bin/python benchmarks/graph_build.py --quick         # 12,000 vectors: a smoke test

A real embedding model's vectors (not the hashing embedder's, which are scanned exactly) get an HNSW
graph once a space holds `exact_threshold` of them; rows added later join it `hnsw_tail` at a time.
Each build searches for nodes that search cannot reach, which are then scanned exactly
(`ipy_memory/_graphcheck.py`). The vectors here are synthetic and clustered as model vectors are
(300 centres, deterministic by seed), L2-normalised, added 1,000 at a time, default settings. Three
ways of building the same graph, in the same run:

- `usearch only`: the same adds on a bare usearch index, nothing checked (the baseline of the ratios);
- `before`: each build checks only the nodes it added, each at full width (the engine until b69665f);
- `new nodes only`: the same nodes, with the engine's narrow first pass (`_graphcheck.unreachable`);
- `engine`: `VectorShard` as shipped (new nodes, and older ones, whole or a window at a time).

`lost` counts the nodes that neither the graph's search finds (top 10 of a search of their own
vector at the configured beam, checked at the end over the whole graph) nor the exact scan of known
orphans covers: memories a recall's vector search would never return.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from ipy_memory import _graphcheck  # noqa: E402
from ipy_memory.config import Settings  # noqa: E402
from ipy_memory.vectors import VectorShard  # noqa: E402

DIM, BATCH = 384, 1000


def vectors(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((300, DIM)).astype(np.float32)
    x = centres[rng.integers(0, 300, n)] * 0.6 + rng.standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def lost(graph, keys: np.ndarray, vecs: np.ndarray, known: set[int]) -> int:
    return len(set(keys[wide_only(graph, keys, vecs)].tolist()) - known)


def wide_only(graph, keys: np.ndarray, vecs: np.ndarray) -> np.ndarray:
    """The check before the narrow first pass: every node searched at full width."""
    found = np.asarray(graph.search(vecs, 10, threads=os.cpu_count() or 1).keys).reshape(len(keys), -1)
    return ~(found == np.asarray(keys)[:, None]).any(axis=1)


def engine(vecs: np.ndarray, s: Settings, variant: str) -> tuple[float, object, set[int]]:
    shard, keys = VectorShard(DIM, s), np.arange(1, len(vecs) + 1)
    real = _graphcheck.recheck_window, _graphcheck.unreachable
    if variant != "engine":           # only the nodes each build added
        _graphcheck.recheck_window = lambda old, new, sweep: (np.zeros(0, np.int64), sweep)
    if variant == "before":
        _graphcheck.unreachable = wide_only
    try:
        t = time.perf_counter()
        for i in range(0, len(vecs), BATCH):
            shard.add(keys[i:i + BATCH], vecs[i:i + BATCH])
        shard.build_graph()                   # the last tail too, as saving does
        return time.perf_counter() - t, shard.graph, set(shard.orphans)
    finally:
        _graphcheck.recheck_window, _graphcheck.unreachable = real


def bare(vecs: np.ndarray, s: Settings) -> tuple[float, object, set[int]]:
    graph = VectorShard(DIM, s)._new_graph()
    keys, built = np.arange(1, len(vecs) + 1), 0
    t = time.perf_counter()
    for i in range(BATCH, len(vecs) + BATCH, BATCH):          # the engine's build points
        end = min(i, len(vecs))
        if end >= s.exact_threshold and (built == 0 or end - built >= s.hnsw_tail or end == len(vecs)):
            graph.add(keys[built:end], vecs[built:end].astype(np.float16), threads=os.cpu_count() or 1)
            built = end
    return time.perf_counter() - t, graph, set()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="12,000 vectors, graph from 4,000, tail 2,000")
    a = ap.parse_args()
    s = Settings(exact_threshold=4_000, hnsw_tail=2_000) if a.quick else Settings()
    n = 12_000 if a.quick else a.n
    vecs = vectors(n, a.seed)
    keys = np.arange(1, n + 1)
    half = vecs.astype(np.float16)
    print(f"# graph builds: {n:,} clustered {DIM}-d vectors, {BATCH:,} a batch, exact_threshold "
          f"{s.exact_threshold:,}, hnsw_tail {s.hnsw_tail:,}, {os.cpu_count()} cores\n")
    print("| build | seconds | vectors/s | time vs usearch only | orphans scanned | lost |")
    print("|---|---:|---:|---:|---:|---:|")
    base = None
    for name in ("usearch only", "before", "new nodes only", "engine"):
        seconds, graph, orphans = bare(vecs, s) if name == "usearch only" else engine(vecs, s, name)
        base = base or seconds
        print(f"| {name} | {seconds:.1f} | {n / seconds:,.0f} | {seconds / base:.2f}× | {len(orphans):,} "
              f"| {lost(graph, keys, half, orphans):,} |", flush=True)


if __name__ == "__main__":
    main()
