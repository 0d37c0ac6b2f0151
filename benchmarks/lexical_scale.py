#!/usr/bin/env python3
"""The lexical scorer alone at scale: `LexicalShard.scores` + top-k, against plain BM25 on the same postings.

    python benchmarks/lexical_scale.py --n 1000000      # ~3 min to index, then 300 queries
    python benchmarks/lexical_scale.py --n 20000 --profile

Builds an in-memory lexical index of the scale benchmark's synthetic memories (benchmarks/_synth.py;
30% of the sections in 3-section documents, the rest single memories) without SQLite or vectors,
then times the engine's structured scoring (neighbour context, document roll-up, shared terms,
reply/question handling, cues) and, in the same run, plain BM25 over the same postings (each
node's own score only) as the baseline. Prints p50/p95 and the ratio; --profile adds the functions
where the structured scoring spends its time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

from _synth import Corpus  # noqa: E402
from ipy_memory._text import question_cues  # noqa: E402
from ipy_memory.config import Settings  # noqa: E402
from ipy_memory.lexical import LexicalShard, NodeRow, query_terms  # noqa: E402


def build(n: int, seed: int) -> tuple[LexicalShard, list[str]]:
    corpus = Corpus(seed)
    texts, _ = corpus.memories(0, n)
    shard = LexicalShard(Settings())
    for start in range(0, n, 5000):
        rows = []
        for k in range(start, min(n, start + 5000)):
            multi = k % 10 < 3            # sections 0-2 of every ten form one document
            rows.append(NodeRow(key=k + 1, document_id=f"g{k // 10}" if multi else f"d{k}",
                                ord=k % 10 if multi else 0, doc_nodes=3 if multi else 1, title="",
                                body=texts[k], session="s", created_at=float(k), importance=0.5, expires_at=None))
        shard.add(rows)
    return shard, corpus.queries(300, n)


def top(scores: np.ndarray, k: int = 100) -> np.ndarray:
    nz = np.flatnonzero(scores != 0)
    cand = nz[np.argpartition(-scores[nz], k)[:k]] if len(nz) > k else nz
    return cand[np.argsort(-scores[cand], kind="stable")][:10]


def structured(shard, q):
    return top(shard.scores(query_terms(q), question_cues(q), 1e12))


def plain(shard, q):
    """Textbook BM25 over the same postings: each node's own score, nothing else."""
    k1, b, n = shard.s.bm25_k1, shard.s.bm25_b, shard.n_alive
    avg = shard.total_len / max(n, 1)
    out = np.zeros(shard.keys.size, np.float32)
    for h in query_terms(q):
        p = shard.post.get(h)
        if p is not None:
            slots, tf = p
            idf = np.log(1 + (n - len(slots) + 0.5) / (len(slots) + 0.5))
            np.add.at(out, slots, idf * (k1 + 1) * tf / (tf + k1 * (1 - b + b * shard.length.view[slots] / avg)))
    return top(out)


def timed(fn, shard, queries) -> np.ndarray:
    for q in queries[:20]:
        fn(shard, q)
    out = []
    for q in queries:
        t = time.perf_counter()
        fn(shard, q)
        out.append(1000 * (time.perf_counter() - t))
    return np.asarray(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="sections to index")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    t = time.perf_counter()
    shard, queries = build(a.n, a.seed)
    print(f"{a.n:,} sections indexed in {time.perf_counter() - t:.0f} s; {len(queries)} queries")
    s, p = timed(structured, shard, queries), timed(plain, shard, queries)
    print("| scoring | p50 ms | p95 ms |\n|---|---:|---:|")
    print(f"| structured (the engine's) | {np.percentile(s, 50):.2f} | {np.percentile(s, 95):.2f} |")
    print(f"| plain BM25, same postings | {np.percentile(p, 50):.2f} | {np.percentile(p, 95):.2f} |")
    print(f"| ratio | {np.percentile(s, 50) / np.percentile(p, 50):.2f}x | {np.percentile(s, 95) / np.percentile(p, 95):.2f}x |")
    if a.profile:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        prof.enable()
        for q in queries:
            structured(shard, q)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(10)


if __name__ == "__main__":
    main()
