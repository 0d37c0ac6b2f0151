"""Exact scan against HNSW graphs on the offline embedder's vectors: why `vector_index="auto"`
scans the hashing embedder's vectors exactly.

    .venv/bin/python benchmarks/vector_index.py --n 100000          # about 10 minutes on 2 cores
    .venv/bin/python benchmarks/vector_index.py --quick             # 5,000 vectors: a smoke test

The vectors are `HashEmbedder` vectors of the scale benchmark's synthetic memories
(`benchmarks/_synth.py`), stored in float16 as the engine stores them; queries are the scale
benchmark's. For each index the script reports the build rate, recall@10 against exact float32
search, query p50/p95 (one thread, one query at a time) and, for graphs, how many nodes cannot find
themselves (self-search with k=10 at the search expansion): those are unreachable and would need an
exact side scan. The exact scan is the baseline of every ratio.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
from usearch.index import Index, MetricKind, search  # noqa: E402

from _synth import Corpus  # noqa: E402
from ipy_memory.embeddings.hashing import HashEmbedder  # noqa: E402


def vectors(n: int, nq: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    corpus, emb = Corpus(seed), HashEmbedder()
    texts, _ = corpus.memories(0, n)
    x = np.concatenate([emb.embed(texts[i:i + 5000]) for i in range(0, n, 5000)]).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True) + 1e-12
    return x, emb.embed(corpus.queries(nq, n)).astype(np.float32)


def timed(fn, queries) -> tuple[list, np.ndarray]:
    out, ms = [], []
    for q in queries:
        t = time.perf_counter()
        out.append(fn(q))
        ms.append(1000 * (time.perf_counter() - t))
    return out, np.asarray(ms)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--graphs", default="16:128,32:128", help="connectivity:expansion_add pairs")
    ap.add_argument("--ef", default="64,256,512", help="search expansions to try")
    ap.add_argument("--quick", action="store_true", help="5,000 vectors, 50 queries, one graph")
    a = ap.parse_args()
    if a.quick:
        a.n, a.queries, a.graphs, a.ef = 5000, 50, "16:64", "64"
    threads = os.cpu_count() or 1
    x, queries = vectors(a.n, a.queries, a.seed)
    x16 = x.astype(np.float16)
    truth = [set(np.argsort(-(x @ q))[:10].tolist()) for q in queries]

    def recall(found) -> float:
        return float(np.mean([len(set(np.asarray(f).tolist()[:10]) & t) / 10 for f, t in zip(found, truth)]))

    print(f"# {a.n:,} hash vectors (384-d float16), {a.queries} queries, {threads} cores\n")
    print("| index | build, vectors/s | search ef | recall@10 | p50 ms | p95 ms | p50 vs exact | unreachable nodes |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")

    def exact(q):   # the engine's scan: float16 candidates (over-fetched), rescored in float32
        rows = np.asarray(search(x16, q.astype(np.float16), 30, MetricKind.Cos, exact=True, threads=1).keys)
        rows = rows.reshape(-1)
        return rows[np.argsort(-(x16[rows].astype(np.float32) @ q))][:10]

    found, ms = timed(exact, queries)
    base = float(np.median(ms))
    print(f"| exact float16 scan | – | – | {recall(found):.3f} | {base:.2f} | {np.percentile(ms, 95):.2f} | 1.00× | 0 |")
    for spec in a.graphs.split(","):
        m, efa = (int(v) for v in spec.split(":"))
        graph = Index(ndim=x.shape[1], metric="cos", dtype="f16", connectivity=m, expansion_add=efa)
        t = time.perf_counter()
        graph.add(np.arange(a.n), x16, threads=threads)
        rate = a.n / (time.perf_counter() - t)
        for ef in (int(v) for v in a.ef.split(",")):
            graph.expansion_search = ef
            found, ms = timed(lambda q: np.asarray(graph.search(q, 10).keys).reshape(-1), queries)
            own = np.asarray(graph.search(x16, 10, threads=threads).keys).reshape(a.n, -1)
            lost = int((~(own == np.arange(a.n)[:, None]).any(axis=1)).sum())
            print(f"| HNSW M={m} ef_add={efa} | {rate:,.0f} | {ef} | {recall(found):.3f} | {np.median(ms):.2f} | "
                  f"{np.percentile(ms, 95):.2f} | {np.median(ms) / base:.2f}× | {lost:,} ({lost / a.n:.1%}) |")


if __name__ == "__main__":
    main()
