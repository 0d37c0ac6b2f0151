"""Near-duplicates: whether a new memory is too close to one already in its space.

A document is compared with the memories whose sections are nearest to its own (by their vectors;
with the offline hashing embedder, among the sections that share a rarer index term with it, which
is also what keeps the check cheap in a large space). Exact duplicates are the writer's (by hash).
"""

from __future__ import annotations

import numpy as np

from . import _text
from ._ingest import Prepared
from ._topk import unique
from .models import Memory
from .store import DOC_COLS, memory_row


def semantic_duplicate(engine, db, p: Prepared, now: float) -> tuple[Memory, float] | None:
    """The most similar existing memory of the space if its whole-document similarity reaches
    `dedup_threshold`. Documents are compared as the normalised sum of their sections' vectors;
    candidates come from the nearest sections of the new document's sum and of its first sections
    (one section of a long document is far from the sum, so it cannot serve as the only probe)."""
    shard = engine.shards.get(p.space)
    if not len(shard.vec):
        return None
    docvec = p.vectors.sum(axis=0)
    norm = float(np.linalg.norm(docvec))
    if norm == 0:
        return None
    docvec /= norm
    probes = np.vstack([docvec[None], p.vectors[:8]])
    pool = None if engine.embedder.semantic else lexical_pool(shard, p, engine.settings.exact_threshold)
    if pool is None:
        found = [f[0] for f in shard.vec.search_many(probes, 5)]
    else:   # the same nearest sections, among those that share a rare term with the new document
        sims = shard.vec.dots_many(pool, probes)
        found = [pool[np.argsort(-row, kind="stable")[:5]] for row in sims]
    keys = {int(k) for k in found[0]} | {int(k) for f in found[1:] for k in f[:3]}
    if not keys:
        return None
    marks = ",".join("?" * len(keys))
    docs = [r[0] for r in db.execute(f"SELECT DISTINCT document_id FROM nodes WHERE key IN ({marks})", list(keys))]
    best = None
    for doc_id in docs:
        nkeys = [r[0] for r in db.execute("SELECT key FROM nodes WHERE document_id = ?", (doc_id,))]
        other = shard.vec.get(nkeys).sum(axis=0)
        n = float(np.linalg.norm(other))
        sim = float(other @ docvec / n) if n else 0.0
        if sim >= engine.settings.dedup_threshold and (best is None or sim > best[1]):
            row = db.execute(f"SELECT {DOC_COLS} FROM documents WHERE id = ? AND "
                             "(expires_at IS NULL OR expires_at > ?)", (doc_id, now)).fetchone()
            if row:
                best = (memory_row(row), sim)
    return best


def lexical_pool(shard, p: Prepared, threshold: int) -> np.ndarray | None:
    """Keys of the sections that may be near-duplicates of the document, or None (search the vectors).
    A near-duplicate shares index terms with it: in a small space, every section holding one of them
    is a candidate (by the vectors alone, "ααααα" was a duplicate of "αααααα", with which it shares
    letter n-grams but no word, so neither its own text nor the other found it again).

    The hashing embedder hashes each word with its letter 3-5-grams (a CJK character bigram alone),
    so a term weighs about as many features in the vector as `_features` says. A document at cosine
    >= dedup_threshold (0.92) lacks less than a fifth of the new one's feature mass (an exact bound
    for a subset is 0.154). So it holds one of the rarest terms that together weigh a fifth (and at
    least 4 of them), whose postings are usually short; and two of a set whose weight without its
    heaviest term reaches a fifth (and of at least 4), when those postings are long. Counting terms instead of
    weights missed near-duplicates that gained a Chinese sentence: many light bigram terms. Either
    pool costs far less than an exact scan of a large space (1.5M sections: ~200 ms); the scan
    remains for pools larger than that."""
    weight = {_text.term_hash(t): _features(t) for n in p.nodes for t in _text.terms(f"{n.title} {n.body}")}
    lists = sorted((len(post[0]), h, post[0]) for h in weight if (post := shard.lex.post.get(h)) is not None)
    if not lists:
        return np.zeros(0, np.int64)      # no term in common: nothing can be that close
    if len(shard.vec) < threshold:        # small: every section that holds one of its terms
        slots = unique(np.concatenate([s for _, _, s in lists]))
    elif (slots := _rare_term_slots(shard, weight, lists)) is None:
        return None
    slots = slots[shard.lex.alive.view[slots]]
    return shard.lex.keys.view[slots]


def _rare_term_slots(shard, weight: dict, lists: list) -> np.ndarray | None:
    """lexical_pool's sections of a large space (the rules in its docstring), or None."""
    fifth = sum(weight.values()) / 5
    cum = np.cumsum([weight[h] for _, h, _ in lists])
    one = rarest_held(cum, fifth)                                            # holds one of lists[:one]
    # above this many postings the two-of rule gives a far smaller pool: rescoring 100k sections' vectors
    # took ~200 ms at 1.5M sections, twice an exact scan (single-insert p95 at 1M: 106 -> 40 ms with 1/32)
    small = max(4096, len(shard.vec) // 32)
    if sum(n for n, _, _ in lists[:one]) <= small:
        return held_enough(shard, [weight[h] for _, h, _ in lists[:one]], [s for _, _, s in lists[:one]], fifth)
    heaviest = np.maximum.accumulate([weight[h] for _, h, _ in lists])
    two = max(4, int(np.searchsorted(cum - heaviest, fifth)) + 1)            # holds two of lists[:two]
    if two > len(lists) or sum(n for n, _, _ in lists[:two]) > 2 * len(shard.vec):
        return None
    found, _, count, slots = _per_document(shard, [s for _, _, s in lists[:two]], [1.0] * two)
    slots = _sections(shard, slots, found[count >= 2])              # only common words: two or more
    return None if len(slots) > small else slots


def rarest_held(cum, fifth: float, floor: int = 4) -> int:
    """How many of the rarest terms (cumulative feature weights `cum`) a near-duplicate holds one of:
    those that weigh a fifth of the document, and at least `floor` (benchmarks/dedup_pool.py)."""
    return max(min(floor, len(cum)), int(np.searchsorted(cum, fifth)) + 1)


def held_enough(shard, weights: list[float], lists: list[np.ndarray], fifth: float) -> np.ndarray:
    """The slots of `lists` (postings of the document's terms, weights `weights`) whose document does
    not lack three fifths of the document's weight among these terms. (`rarest_held`'s floor can
    gather common words' long postings for a short memory, where most sections hold one of its
    words.) A near-duplicate's vector lacks less than a fifth of the feature mass, but counted over
    terms it can lack more: a misspelt word is another term sharing most of its n-grams (up to 0.44
    of the weight on 60k synthetic pairs, benchmarks/dedup_pool.py), hence three fifths. Counted per
    document, not per section: a document's terms may be spread over its sections."""
    total = sum(weights)
    if total < 3 * fifth or sum(len(x) for x in lists) <= 4096:   # nothing can lack that much, or few to rescore
        return unique(np.concatenate(lists))
    found, held, _, slots = _per_document(shard, lists, weights)
    return _sections(shard, slots, found[held > total - 3 * fifth])


def _per_document(shard, lists: list[np.ndarray], weights: list[float]):
    """The documents holding any of the lists' terms, the weight of those terms each holds and how
    many of them, and every slot of the lists: (documents, weights, counts, slots)."""
    slots = np.concatenate(lists)
    docs = shard.lex.doc.view[slots].astype(np.int64)
    pairs = unique(docs * len(lists) + np.repeat(np.arange(len(lists)), [len(x) for x in lists]))
    docs = pairs // len(lists)                                           # one (document, term) each,
    first = np.r_[True, docs[1:] != docs[:-1]]                          # sorted by document
    found, at = docs[first], np.cumsum(first) - 1
    held = np.bincount(at, np.asarray(weights, np.float64)[pairs % len(lists)], len(found))
    return found, held, np.bincount(at, minlength=len(found)), slots


def _sections(shard, slots: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """The distinct slots among `slots` whose document is one of `docs`."""
    wanted = np.zeros(shard.lex.doc_len.size, bool)
    wanted[docs] = True
    return unique(slots[wanted[shard.lex.doc.view[slots]]])


def _features(term: str) -> int:
    """About how many hashed features the word behind an index term gets (HashEmbedder)."""
    return 1 if _text.is_cjk(term) else 1 + 3 * len(term)
