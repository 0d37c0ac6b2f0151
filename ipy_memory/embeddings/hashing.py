"""The built-in offline embedder: signed feature hashing of words, word bigrams and char n-grams.

Needs numpy only, no network and no model file. Each distinct word's features (the word itself and
its character 3-5-grams) are hashed once and cached in two flat arrays, so a batch costs a
dictionary lookup per word plus one pass that sums the features (`_kernels.hash_rows`, compiled
where the extension is built, a numpy twin with the same vectors bit for bit otherwise): tens of
thousands of texts per second on one core.
"""

from __future__ import annotations

import functools
import hashlib
import math
import threading
from itertools import chain

import numpy as np

from .. import _kernels, _text
from .base import Embedder

@functools.lru_cache(maxsize=None)
def _log_tf_table(size: int) -> np.ndarray:
    return np.array([1.0 + math.log(c) for c in range(1, size + 1)], np.float32)


def _log_tf(most: int) -> np.ndarray:
    """1 + ln(count) for counts 1..most (float32), from tables of power-of-two sizes."""
    return _log_tf_table(1 << max(most - 1, 0).bit_length())


def _h64(feature: str) -> int:
    return int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")


class HashEmbedder(Embedder):
    """Words + word bigrams + char 3-5-grams, stop-words dropped, log tf, signed hashing, L2-norm."""

    semantic = False

    def __init__(self, dim: int = 384, *, char_ngrams: tuple[int, ...] = (3, 4, 5), cache_size: int = 500_000):
        self.dim = int(dim)
        self.char_ngrams = tuple(char_ngrams)
        self.name = f"hash-v1-{self.dim}"
        self._cache_size = cache_size
        self._grams: dict[str, int] = {}       # a new word mostly reuses n-grams of words seen before
        self._lock = threading.Lock()          # a batch's words are looked up and added as one step
        self._clear()

    def _clear(self) -> None:
        # word -> (its 64-bit hash, first feature, feature count): features of every cached word
        # sit in two flat arrays, so a batch gathers them with one index instead of per-word arrays
        self._cache: dict[str, tuple[int, int, int]] = {}
        self._slots = np.zeros(1024, np.int32)         # each feature's dimension
        self._signs = np.zeros(1024, np.int8)          # ... and its sign
        self._used = 0

    def _features(self, word: str) -> tuple[int, list[int]]:
        """The word's hash and its features' hashes: the word itself and its char n-grams."""
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
        return h, feats

    def _lookup(self, words: list[str]) -> tuple[list[tuple[int, int, int]], np.ndarray, np.ndarray]:
        """Each (distinct) word's cache entry, hashing the words not seen before in one numpy pass
        (a pass per word cost more than the hashing), and the feature arrays the entries index."""
        with self._lock:
            if len(self._cache) + len(words) > self._cache_size:
                self._clear()                        # between batches: a batch's entries stay valid
            cache, entries, new, added = self._cache, [], [], {}
            for w in words:
                e = cache.get(w)
                if e is None:
                    h, feats = self._features(w)
                    e = added[w] = (h, self._used + len(new), len(feats))
                    new.extend(feats)
                entries.append(e)
            if new:     # cached only once their features are stored: an interrupt leaves no bad entry
                hs = np.array(new, np.uint64)
                end = self._used + len(hs)
                if end > len(self._slots):
                    cap = max(end, 2 * len(self._slots))
                    self._slots = np.concatenate([self._slots[:self._used], np.zeros(cap - self._used, np.int32)])
                    self._signs = np.concatenate([self._signs[:self._used], np.zeros(cap - self._used, np.int8)])
                self._slots[self._used:end] = hs % np.uint64(self.dim)
                self._signs[self._used:end] = np.where(hs >> np.uint64(63), 1, -1)
                self._used = end
                cache.update(added)
            return entries, self._slots, self._signs

    def _embed(self, texts: list[str]) -> np.ndarray:
        n = len(texts)
        per_text = [_text.words(t) for t in texts]
        flat = list(chain.from_iterable(per_text))
        if not flat:
            return np.zeros((n, self.dim), np.float32)
        local = {w: i for i, w in enumerate(dict.fromkeys(flat))}   # word -> id, by first appearance
        entries, feat_slots, feat_signs = self._lookup(list(local))
        ids = np.fromiter(map(local.__getitem__, flat), np.int64, len(flat))
        per = np.fromiter(map(len, per_text), np.int64, n)
        out = np.empty((n, self.dim), np.float32)
        _kernels.hash_rows(ids, per, np.fromiter((e[1] for e in entries), np.int64, len(entries)),
                           np.fromiter((e[2] for e in entries), np.int64, len(entries)),
                           np.fromiter((e[0] for e in entries), np.uint64, len(entries)),
                           feat_slots, feat_signs, _log_tf(int(per.max())), out)
        return out
