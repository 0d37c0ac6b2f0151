"""Ranking: lexical scores (with structure) fused linearly with vector similarity, plus mild priors.

    score = lex / max(lex) + w * max(cos, 0) / max(cos)

Linear fusion of max-normalised scores beat reciprocal rank fusion in our measurements (see
BENCHMARKS.md). `w` is `vector_weight_semantic` for real models and `vector_weight_hash` for the
offline hashing embedder, whose vectors mostly echo the lexical score.
"""

from __future__ import annotations

import numpy as np

from . import _colscan
from ._threads import SCANS
from ._text import addressee_terms, question_cues
from ._topk import isin, largest_nonzero, unique
from .config import Settings
from .lexical import query_terms


class Candidate:
    """A ranked node: its key and fused score, and whether it has no words of its own (`bare`: a
    heading whose text is in its subsections, say). (A plain class: a dataclass cost 0.4 ms of the import.)"""

    __slots__ = ("key", "score", "bare")

    def __init__(self, key: int, score: float, bare: bool = False):
        self.key, self.score, self.bare = key, score, bare

    def __repr__(self) -> str:
        return f"Candidate(key={self.key}, score={self.score})"


_BESIDE_ROWS = 20_000        # an exact scan this large runs beside the lexical scoring
_SCORE_ALLOWED = 20_000      # up to this many sections allowed (recall's path=), each is scored exactly


def _vector_searches(shards, qvec, pool: int, allowed=None) -> list:
    """Per shard, a callable giving its vector top-`pool`. Large exact scans release the GIL, so they
    start now on a worker thread and overlap the lexical scoring (100k memories: ~2 ms of ~15). But
    not the first search of a snapshot just loaded, whose reads are first touches and piece checks:
    beside the scoring it measured slower than after it, whatever the GIL's switch interval (a new
    process's first hybrid recall at 100k: 26.3 against 22.1 ms; warm: 3.4 ms p50 beside, 4.0
    after; BENCHMARKS.md, Reading)."""
    out = []
    for shard in shards:
        vec = shard.vec
        if qvec is None or not len(vec):
            out.append(None)
        elif allowed is not None and len(allowed) <= _SCORE_ALLOWED:
            out.append(lambda: (allowed, None))
        elif len(vec) >= _BESIDE_ROWS and vec.graph is None and vec.row_checks is None:
            out.append(SCANS.submit(vec.search, qvec, pool, start_columns=False).result)
        else:
            out.append(lambda vec=vec: vec.search(qvec, pool, start_columns=False))
    return out


def rank(shards, query: str, embedder, s: Settings, now: float, k: int, embed_query=None,
         expand=None, allowed=None) -> list[Candidate]:
    """The top k candidates with words of their own, and the `bare` ones ranked among them (the
    caller decides what they stand for). `expand(query)` gives extra query terms (a Counter of term
    hashes), scored at `expand_weight` beside the query's own (see _expand). `allowed`: only these
    keys (ascending) are candidates, ranked among themselves."""
    try:
        return _rank(shards, query, embedder, s, now, k, embed_query, expand, allowed)
    finally:
        # a cold space's first sparse query asks for the int8 columns: their build (0.35-0.6 s at
        # 100k memories) starts now, not while this recall's own scans compete with it for the cores
        for shard in shards:
            if shard.vec_loaded:
                shard.vec.start_wanted_columns()


def _rank(shards, query, embedder, s, now, k, embed_query, expand, allowed) -> list[Candidate]:
    qterms, qcues = query_terms(query), question_cues(query)
    aside = addressee_terms(query) if s.addressee_names else frozenset()
    w = s.vector_weight_semantic if embedder.semantic else s.vector_weight_hash
    qvec = (embed_query or embedder.embed_query)(query) if w > 0 else None
    pool = max(s.candidates, k)
    parts = []   # per shard: keys, lexical, cosine, created, importance
    searches = _vector_searches(shards, qvec, pool, allowed) if qvec is not None else [None] * len(shards)
    for shard in shards[:1]:
        shard.owner.checks.start()      # snapshot checks left for later: behind the scans just queued
    expanded = expand(query) if expand is not None else None
    for shard, vector_search in zip(shards, searches):
        lex = shard.lex.scores(qterms, qcues, now, aside)
        if expanded:
            lex += s.expand_weight * shard.lex.scores(expanded, qcues, now)
        if allowed is not None:       # (filtered before the top is taken: other sections cannot crowd it out)
            keep = np.zeros(len(lex), bool)
            allowed_slots = shard.lex.slots(allowed)
            keep[allowed_slots[allowed_slots >= 0]] = True
            lex = np.where(keep, lex, 0)
        top = largest_nonzero(lex, pool)
        keys = shard.lex.keys.view[top]
        if vector_search is not None:
            _colscan.help_scan()        # share the column scan the worker may be busy with
            shard.owner.checks.help()   # and the snapshot checks queued behind it
            vkeys, _ = vector_search()
            slots = allowed_slots if allowed is not None and vkeys is allowed else shard.lex.slots(vkeys)
            ok = slots >= 0
            ok[ok] &= shard.lex.expires.view[slots[ok]] > now
            if allowed is not None:
                ok[ok] &= keep[slots[ok]]
            extra = unique(slots[ok])
            extra = extra[~isin(extra, top)]
            top = np.concatenate([top, extra])
            keys = shard.lex.keys.view[top]
            cos = shard.vec.dots(keys, qvec)
        else:
            cos = np.zeros(len(top), np.float32)
        parts.append((keys, lex[top], cos, shard.lex.created.view[top], shard.lex.importance.view[top],
                      shard.lex.length.view[top] == 0))
    if not parts:
        return []
    keys, lex, cos, created, imp, bare = (np.concatenate(x) for x in zip(*parts))
    if not len(keys):
        return []
    score = lex / lex.max() if lex.max() > 0 else np.zeros(len(keys))
    if qvec is not None and cos.max() > 0:
        score = score + w * np.maximum(cos, 0) / cos.max()
    score = score * (1 + s.importance_weight * (imp - 0.6))
    score = score * (1 + s.recency_weight * 0.5 ** (np.maximum(now - created, 0) / s.recency_half_life))
    order = np.argsort(-score, kind="stable")
    order = order[score[order] > 0]
    order = order[:int(np.searchsorted(np.cumsum(~bare[order]), k)) + 1]    # to the k-th with words
    return [Candidate(int(keys[i]), float(score[i]), bool(bare[i])) for i in order]
