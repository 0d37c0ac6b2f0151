#!/usr/bin/env python3
"""Recall of the duplicate check's lexical pool (ipy_memory._dedup.lexical_pool) on near-duplicates.

    python benchmarks/dedup_pool.py              # 3,000 memories x 11 variants, both ways (~2 min)
    python benchmarks/dedup_pool.py --n 50       # a smoke test

Above `exact_threshold` the hashing embedder's duplicate check rescores only the sections that hold
one of the new document's rarest terms that together weigh a fifth of its hashed features (at
least `floor` terms). This builds near-duplicate pairs from the scale benchmark's synthetic memories
(case, punctuation, a word added, removed, inflected or swapped, two words changed, a word or a CJK
chunk appended), keeps the pairs at cosine >= 0.92 under the hashing embedder, and counts the pairs
whose older document holds none of the terms the pool is drawn from: near-duplicates the check
would miss. Per floor, for the earlier rule that counted terms instead of weighing them, and for
the pruning of large pools (`held_enough`: documents lacking three fifths of the weight of the pool's
terms are dropped); and the largest share of its weight a near-duplicate was seen to lack.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

from _synth import Corpus  # noqa: E402
from ipy_memory import _text  # noqa: E402
from ipy_memory._dedup import _features, rarest_held  # noqa: E402
from ipy_memory.embeddings.hashing import HashEmbedder  # noqa: E402


def variants(text: str, texts: list[str], rng: random.Random) -> list[str]:
    w = text.split()
    out = [text.upper(), text.rstrip(".") + "!", text + " again", " ".join(w[1:]), " ".join(w[:-1])]
    if len(w) > 2:
        i, j, k = (rng.randrange(len(w)) for _ in range(3))
        out.append(" ".join(w[:i] + w[i + 1:]))                            # a word removed
        out.append(" ".join(w[:j] + [w[j] + "s"] + w[j + 1:]))             # ... inflected
        v = w[:]
        v[k] = v[k][:-1] if len(v[k]) > 3 else v[k]                         # ... misspelt
        out.append(" ".join(v))
        a, b = rng.sample(range(len(w)), 2)
        v = w[:]
        v[a], v[b] = v[b], v[a]                                             # two swapped
        out.append(" ".join(v))
        v = w[:]
        for m in rng.sample(range(len(w)), 2):
            v[m] += "ed"                                                    # two changed
        out.append(" ".join(v))
        out.append(text + " " + rng.choice(texts).split()[0])               # a word or CJK chunk appended
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=3000, help="memories to vary")
    ap.add_argument("--corpus", type=int, default=20000, help="memories the document frequencies come from")
    ap.add_argument("--threshold", type=float, default=0.92)
    a = ap.parse_args()
    texts, _ = Corpus(1).memories(0, a.corpus)
    df = Counter(t for x in texts for t in set(_text.terms(x)))
    emb, rng = HashEmbedder(), random.Random(0)
    floors = (1, 2, 4)
    missed = {("weighed", f): Counter() for f in floors} | {("counted", 4): Counter(),
                                                             ("weighed, then pruned", 4): Counter(),
                                                             **{("two of the weighed", f): Counter() for f in (2, 4, 6)}}
    worst = 0.0     # the largest share of a document's weight that a near-duplicate lacks
    pairs = Counter()
    for doc in rng.sample(texts, min(a.n, len(texts))):
        for other in variants(doc, texts, rng):
            for new, old in ((doc, other), (other, doc)):
                v = emb.embed([new, old])
                if float(v[0] @ v[1]) < a.threshold:
                    continue
                terms, held = set(_text.terms(new)), set(_text.terms(old))
                if not terms:
                    continue
                cjk = any(_text.is_cjk(t) for t in terms)
                pairs[cjk] += 1
                present = sorted((t for t in terms if df.get(t, 0) or t in held), key=lambda t: (df.get(t, 0), t))
                cum = np.cumsum([_features(t) for t in present])
                fifth = sum(_features(t) for t in terms) / 5
                for f in floors:
                    one = rarest_held(cum, fifth, f)
                    missed[("weighed", f)][cjk] += not any(t in held for t in present[:one])
                # and what held_enough() then drops from a large pool: lacking 3 fifths among those terms
                one = rarest_held(cum, fifth)
                lack = sum(_features(t) for t in present[:one] if t not in held)
                missed[("weighed, then pruned", 4)][cjk] += lack >= 3 * fifth or not any(t in held for t in present[:one])
                # the rule for pools of common words: two of the rarest terms whose weight without
                # the heaviest of them reaches a fifth
                w = [_features(t) for t in present]
                two = int(np.searchsorted(cum - np.maximum.accumulate(w), fifth)) + 1 if w else 0
                for f in (2, 4, 6):
                    k = max(two, f)
                    missed[("two of the weighed", f)][cjk] += k <= len(present) and sum(t in held for t in present[:k]) < 2
                worst = max(worst, sum(_features(t) for t in terms if t not in held) / (5 * fifth))
                one = max(4, -(-len(terms) // 5))
                missed[("counted", 4)][cjk] += not any(t in held for t in present[:one])
    print(f"{sum(pairs.values()):,} pairs at cosine >= {a.threshold} ({pairs[True]:,} with CJK text)\n")
    print("| pool rule | at least | missed, no CJK | missed, with CJK |\n|---|---:|---:|---:|")
    for (rule, f), m in missed.items():
        print(f"| {rule} terms | {f} | {m[False]} | {m[True]} |")
    print(f"\nlargest share of the new document's term weight (hashed features) that a near-duplicate lacks: {worst:.3f}")


if __name__ == "__main__":
    main()
