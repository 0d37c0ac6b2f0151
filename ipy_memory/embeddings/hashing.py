"""The built-in offline embedder: signed feature hashing of words, word bigrams and char n-grams.

Needs numpy only, no network and no model file. Each distinct word's features (the word itself and
its character 3-5-grams) are hashed once and cached, so a batch costs a dictionary lookup per word
plus one vectorised bincount: tens of thousands of texts per second on one core.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter

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
        self._cache_size = cache_size

    def _word(self, word: str) -> tuple[int, np.ndarray, np.ndarray]:
        hit = self._cache.get(word)
        if hit is not None:
            return hit
        h = _h64("w|" + word)
        feats = [h]
        if not _text.is_cjk(word):
            w = f"<{word}>"
            feats += [_h64("c|" + w[i:i + n]) for n in self.char_ngrams for i in range(len(w) - n + 1)]
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
        local: dict[str, int] = {}      # word -> position in this batch's feature table
        entries: list[tuple[int, np.ndarray, np.ndarray]] = []
        t_rows, t_words, t_weights = [], [], []  # one (text, word, log-tf weight) per distinct word
        seq_rows, seq_words = [], []              # every word in order, for bigrams
        for r, text in enumerate(texts):
            ws = _text.words(text)
            ids = []
            for w in ws:
                i = local.get(w)
                if i is None:
                    i = local[w] = len(entries)
                    entries.append(self._word(w))
                ids.append(i)
            for i, c in Counter(ids).items():
                t_rows.append(r)
                t_words.append(i)
                t_weights.append(1.0 + math.log(c))
            seq_rows += [r] * len(ids)
            seq_words += ids
        out = np.zeros(n * self.dim, np.float64)
        if not entries:
            return out.astype(np.float32).reshape(n, self.dim)
        lens = np.array([len(e[1]) for e in entries], np.int64)
        starts = np.concatenate(([0], np.cumsum(lens)[:-1]))
        all_slots = np.concatenate([e[1] for e in entries])
        all_signs = np.concatenate([e[2] for e in entries])
        w_idx = np.asarray(t_words, np.int64)
        reps = lens[w_idx]
        pos = np.repeat(starts[w_idx] - np.concatenate(([0], np.cumsum(reps)[:-1])), reps) + np.arange(reps.sum())
        rows = np.repeat(np.asarray(t_rows, np.int64), reps)
        vals = all_signs[pos] * np.repeat(np.asarray(t_weights, np.float32), reps)
        out += np.bincount(rows * self.dim + all_slots[pos], weights=vals, minlength=n * self.dim)
        # word bigrams: combine the cached 64-bit hashes of consecutive words of the same text
        sr = np.asarray(seq_rows, np.int64)
        if len(sr) > 1:
            hw = np.array([e[0] for e in entries], np.uint64)[np.asarray(seq_words, np.int64)]
            same = sr[:-1] == sr[1:]
            hb = (hw[:-1] * _GOLDEN ^ hw[1:])[same]
            signs = np.where(hb >> np.uint64(63), 1.0, -1.0)
            out += np.bincount(sr[:-1][same] * self.dim + (hb % np.uint64(self.dim)).astype(np.int64),
                               weights=signs, minlength=n * self.dim)
        return out.astype(np.float32).reshape(n, self.dim)
