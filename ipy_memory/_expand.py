"""Query expansion through the embedding model's sense of words (real models only).

BM25 only meets the words a query uses: "children" never finds "my kids", "pets" never finds "our
dog". A sentence model sees these pairs as close (MiniLM: kids/children 0.89, pets/dog 0.70,
dessert/cake 0.59), so each word of the store's vocabulary gets its own model vector, and each query
word also searches for the store's words within `expand_threshold` cosine of it (at most
`expand_terms` per query word, never one with the query word's own stem). Their lexical score is
added at `expand_weight`, with all the structure of the ordinary lexical score (LoCoMo dev, `local`,
sessions: R@10 0.819 -> 0.825, BENCHMARKS.md round 4).

Each new word of the store is embedded once per model, when it is written (`embed_new_words`), and
kept in the engine's embedding cache in SQLite. A store written without them (by an older version,
with `expand_weight=0`, or re-embedded by `reembed`) has its words embedded by the first recall that
needs them (5,000 distinct words: ~2 s with `local`, once; that recall keeps them in the cache).
"""

from __future__ import annotations

import weakref
from collections import Counter
from itertools import islice

import numpy as np

from . import _text
from ._columns import Column
from ._native import exact_cosine


class WordVectors:
    """Model vectors (float16, unit length) of the words of the spaces recalled so far, grown as
    words arrive. One per engine and model: the same word in two spaces is embedded once."""

    def __init__(self, model: str, dim: int):
        self.model, self.dim = model, dim
        self.hashes: list[int] = []
        self.row_of: dict[int, int] = {}
        self.mat = Column(np.float16, width=dim)        # grows in place: a write adds a few words
        self.seen = weakref.WeakKeyDictionary()   # lexical shard -> its vocabulary's size when last read

    def update(self, lex, embed) -> None:
        """Embed the words of `lex` (a LexicalShard) not seen yet."""
        vocabulary = lex.vocabulary()
        start = self.seen.get(lex, 0)
        if start == len(vocabulary):
            return
        # a vocabulary only grows, in insertion order: its new words are the last ones
        new = [(h, w) for h, w in islice(vocabulary.items(), start, None) if h not in self.row_of]
        self.seen[lex] = len(vocabulary)
        if new:
            self.add([h for h, _ in new], embed([w for _, w in new]))

    def add(self, hashes: list[int], vecs) -> None:
        vecs = np.asarray(vecs, np.float32).reshape(len(hashes), self.dim)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        vecs = np.divide(vecs, norms, out=np.zeros_like(vecs), where=norms > 0)
        base = len(self.hashes)
        self.mat.extend(vecs.astype(np.float16))
        self.hashes.extend(hashes)
        self.row_of.update((h, base + i) for i, h in enumerate(hashes))

    def vectors(self, words: list[str], embed) -> np.ndarray:
        """Vectors of `words` (embedding those not in the vocabulary)."""
        hashes = [_text.term_hash(_text.stem(w)) for w in words]
        missing = [i for i, h in enumerate(hashes) if h not in self.row_of]
        fresh = np.asarray(embed([words[i] for i in missing]), np.float32) if missing else None
        out = np.zeros((len(words), self.dim), np.float32)
        for i, h in enumerate(hashes):
            if h in self.row_of:
                out[i] = self.mat.view[self.row_of[h]]
        for j, i in enumerate(missing):
            out[i] = fresh[j] / (np.linalg.norm(fresh[j]) or 1.0)
        return out

    def neighbours(self, qvecs: np.ndarray, own: list[int], threshold: float, per_word: int) -> Counter:
        """Term hashes of the nearest vocabulary words to each query word, at cosine >= threshold."""
        out: Counter = Counter()
        if not self.hashes or not len(qvecs) or per_word <= 0:
            return out
        exclude = set(own)
        want = min(len(self.hashes), per_word + 4)      # room for the query word's own forms
        found = exact_cosine(self.mat.view, np.asarray(qvecs, np.float16), want)
        keys = np.asarray(found.keys, np.int64).reshape(len(qvecs), -1)
        dists = np.asarray(found.distances, np.float32).reshape(len(qvecs), -1)
        for row, dist in zip(keys, dists):
            taken = 0
            for i, d in zip(row.tolist(), dist.tolist()):
                if taken >= per_word or 1.0 - d < threshold or i < 0:
                    break
                h = self.hashes[i]
                if h not in exclude:
                    out[h] += 1
                    taken += 1
        return out


def query_words(query: str) -> tuple[list[str], list[int]]:
    """The query's expandable words and the term hashes of all its words (never expanded into)."""
    pairs = _text.surface_terms(query)
    words = list(dict.fromkeys(w for w, _ in pairs if _text.expandable(w)))
    return words, [_text.term_hash(t) for _, t in pairs]


def expansion(engine, shards, query: str) -> Counter:
    """Extra query terms for a recall over `shards` (none unless the engine has a real model)."""
    if not _enabled(engine):
        return Counter()
    s = engine.settings
    words, own = query_words(query)
    if not words:
        return Counter()
    vocab = _word_vectors(engine)
    for shard in shards:
        vocab.update(shard.lex, engine._embed_texts)
    return vocab.neighbours(vocab.vectors(words, engine._embed_texts), own, s.expand_threshold, s.expand_terms)


def _enabled(engine) -> bool:
    s = engine.settings
    return engine.embedder.semantic and s.expand_weight > 0 and s.expand_terms > 0


def _word_vectors(engine) -> WordVectors:
    emb = engine.embedder
    vocab = engine.__dict__.get("_word_vectors")
    if vocab is None or vocab.model != emb.name:
        vocab = engine._word_vectors = WordVectors(emb.name, emb.dim)
    return vocab


def embed_new_words(engine, bodies) -> None:
    """At write time, embed the words of new text that no recall has seen yet, so that the first
    recall after a large import does not embed a whole vocabulary at once (they reach SQLite's
    embedding cache with the write)."""
    if not _enabled(engine):
        return
    vocab, new = _word_vectors(engine), {}
    for body in bodies:
        for w, t in _text.surface_terms(body):
            if _text.expandable(w):
                h = _text.term_hash(t)
                if h not in vocab.row_of:
                    new.setdefault(h, w)
    if new:
        vocab.add(list(new), engine._embed_texts(list(new.values())))
