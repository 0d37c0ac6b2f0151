"""The built-in offline embedder: signed feature hashing of words, word bigrams and char n-grams.

Needs numpy only, no network and no model file. Each distinct word's features (the word itself and
its character 3-5-grams) are hashed once and cached, so a batch costs a dictionary lookup per word
plus one vectorised bincount: tens of thousands of texts per second on one core.
"""

from __future__ import annotations

import hashlib
import math
from itertools import chain

import numpy as np

from .. import _text
from .base import Embedder

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _h64(feature: str) -> int:
    return int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")


class HashEmbedder(Embedder):
    """Words + word bigrams + char 3-5-grams, stop-words dropped, log tf, signed hashing, L2-norm."""

    semantic = False

    def __init__(self, dim: int = 384, *, char_ngrams: tuple[int, ...] = (3, 4, 5), cache_size: int = 500_000):
        self.dim = int(dim)
        self.char_ngrams = tuple(char_ngrams)
        self.name = f"hash-v1-{self.dim}"
        self._cache: dict[str, tuple[int, np.ndarray, np.ndarray]] = {}
        self._grams: dict[str, int] = {}       # a new word mostly reuses n-grams of words seen before
        self._cache_size = cache_size

    def _word(self, word: str) -> tuple[int, np.ndarray, np.ndarray]:
        hit = self._cache.get(word)
        if hit is not None:
            return hit
        h = _h64("w|" + word)
        feats = [h]
        if not _text.is_cjk(word):
            w, grams = f"<{word}>", self._grams
            for n in self.char_ngrams:
                for i in range(len(w) - n + 1):
                    g = w[i:i + n]
                    v = grams.get(g)
                    if v is None:
                        v = grams[g] = _h64("c|" + g)
                    feats.append(v)
            if len(grams) >= self._cache_size:
                grams.clear()
        hs = np.array(feats, dtype=np.uint64)
        slots = (hs % np.uint64(self.dim)).astype(np.int64)
        signs = np.where(hs >> np.uint64(63), 1.0, -1.0).astype(np.float32)
        entry = (h, slots, signs)
        if len(self._cache) >= self._cache_size:
            self._cache.clear()
        self._cache[word] = entry
        return entry

    def _embed(self, texts: list[str]) -> np.ndarray:
        n = len(texts)
        per_text = [_text.words(t) for t in texts]
        flat = list(chain.from_iterable(per_text))
        out = np.zeros(n * self.dim, np.float64)
        if not flat:
            return out.astype(np.float32).reshape(n, self.dim)
        local = {w: i for i, w in enumerate(dict.fromkeys(flat))}   # word -> id, by first appearance
        cache = self._cache
        entries = [cache.get(w) or self._word(w) for w in local]
        ids = np.fromiter(map(local.__getitem__, flat), np.int64, len(flat))
        rows = np.repeat(np.arange(n, dtype=np.int64), np.fromiter(map(len, per_text), np.int64, n))
        # one (text, word) pair per distinct word of a text, in the order the text first uses it: the
        # order the sums below add up in, so a text's vector does not depend on its batch
        pairs, first, counts = np.unique(rows * len(entries) + ids, return_index=True, return_counts=True)
        by_first = np.argsort(first)
        pairs, counts = pairs[by_first], counts[by_first]
        t_rows, w_idx = pairs // len(entries), pairs % len(entries)
        log_tf = np.array([1.0 + math.log(c) for c in range(1, int(counts.max()) + 1)], np.float32)
        lens = np.array([len(e[1]) for e in entries], np.int64)
        starts = np.concatenate(([0], np.cumsum(lens)[:-1]))
        all_slots = np.concatenate([e[1] for e in entries])
        all_signs = np.concatenate([e[2] for e in entries])
        reps = lens[w_idx]
        pos = np.repeat(starts[w_idx] - np.concatenate(([0], np.cumsum(reps)[:-1])), reps) + np.arange(reps.sum())
        vals = all_signs[pos] * np.repeat(log_tf[counts - 1], reps)
        out += np.bincount(np.repeat(t_rows, reps) * self.dim + all_slots[pos], weights=vals, minlength=n * self.dim)
        # word bigrams: combine the cached 64-bit hashes of consecutive words of the same text
        if len(rows) > 1:
            hw = np.array([e[0] for e in entries], np.uint64)[ids]
            same = rows[:-1] == rows[1:]
            hb = (hw[:-1] * _GOLDEN ^ hw[1:])[same]
            signs = np.where(hb >> np.uint64(63), 1.0, -1.0)
            out += np.bincount(rows[:-1][same] * self.dim + (hb % np.uint64(self.dim)).astype(np.int64),
                               weights=signs, minlength=n * self.dim)
        return out.astype(np.float32).reshape(n, self.dim)
