"""Ranking: lexical scores (with structure) fused linearly with vector similarity, plus mild priors.

    score = lex / max(lex) + w * max(cos, 0) / max(cos)

Linear fusion of max-normalised scores beat reciprocal rank fusion in our measurements (see
BENCHMARKS.md). `w` is `vector_weight_semantic` for real models and `vector_weight_hash` for the
offline hashing embedder, whose vectors mostly echo the lexical score.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._text import question_cues
from .config import Settings
from .lexical import query_terms


@dataclass
class Candidate:
    key: int
    score: float


def rank(shards, query: str, embedder, s: Settings, now: float, k: int, embed_query=None) -> list[Candidate]:
    qterms, qcues = query_terms(query), question_cues(query)
    w = s.vector_weight_semantic if embedder.semantic else s.vector_weight_hash
    qvec = (embed_query or embedder.embed_query)(query) if w > 0 else None
    pool = max(s.candidates, k)
    parts = []   # per shard: keys, lexical, cosine, created, importance
    for shard in shards:
        lex = shard.lex.scores(qterms, qcues, now)
        nz = np.flatnonzero(lex)
        top = nz[np.argpartition(-lex[nz], pool)[:pool]] if len(nz) > pool else nz
        keys = shard.lex.keys.view[top]
        if qvec is not None and len(shard.vec):
            vkeys, _ = shard.vec.search(qvec, pool)
            slots = np.array([shard.lex.slot_of.get(int(x), -1) for x in vkeys], np.int64)
            ok = slots >= 0
            ok[ok] &= shard.lex.alive.view[slots[ok]] & (shard.lex.expires.view[slots[ok]] > now)
            extra = np.setdiff1d(slots[ok], top)
            top = np.concatenate([top, extra])
            keys = shard.lex.keys.view[top]
            cos = shard.vec.get(keys) @ qvec
        else:
            cos = np.zeros(len(top), np.float32)
        parts.append((keys, lex[top], cos, shard.lex.created.view[top], shard.lex.importance.view[top]))
    if not parts:
        return []
    keys, lex, cos, created, imp = (np.concatenate(x) for x in zip(*parts))
    if not len(keys):
        return []
    score = lex / lex.max() if lex.max() > 0 else np.zeros(len(keys))
    if qvec is not None and cos.max() > 0:
        score = score + w * np.maximum(cos, 0) / cos.max()
    score = score * (1 + s.importance_weight * (imp - 0.6))
    score = score * (1 + s.recency_weight * 0.5 ** (np.maximum(now - created, 0) / s.recency_half_life))
    order = np.argsort(-score, kind="stable")[:k]
    return [Candidate(int(keys[i]), float(score[i])) for i in order if score[i] > 0]
