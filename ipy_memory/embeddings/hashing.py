"""The built-in offline embedder: signed feature hashing of words, word bigrams and char n-grams.

Needs numpy only, no network and no model file. Each distinct word's features (the word itself and
its character 3-5-grams) are hashed once and cached in two flat arrays, so a batch costs a
dictionary lookup per word plus one vectorised bincount: tens of thousands of texts per second on
one core.
"""

from __future__ import annotations

import hashlib
import math
import threading
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
        out = np.zeros(n * self.dim, np.float64)
        if not flat:
            return out.astype(np.float32).reshape(n, self.dim)
        local = {w: i for i, w in enumerate(dict.fromkeys(flat))}   # word -> id, by first appearance
        entries, feat_slots, feat_signs = self._lookup(list(local))
        ids = np.fromiter(map(local.__getitem__, flat), np.int64, len(flat))
        rows = np.repeat(np.arange(n, dtype=np.int64), np.fromiter(map(len, per_text), np.int64, n))
        # one (text, word) pair per distinct word of a text, in the order the text first uses it: the
        # order the sums below add up in, so a text's vector does not depend on its batch
        pairs, first, counts = np.unique(rows * len(entries) + ids, return_index=True, return_counts=True)
        by_first = np.argsort(first)
        pairs, counts = pairs[by_first], counts[by_first]
        t_rows, w_idx = pairs // len(entries), pairs % len(entries)
        log_tf = np.array([1.0 + math.log(c) for c in range(1, int(counts.max()) + 1)], np.float32)
        lens = np.fromiter((e[2] for e in entries), np.int64, len(entries))
        starts = np.fromiter((e[1] for e in entries), np.int64, len(entries))
        reps = lens[w_idx]
        pos = np.repeat(starts[w_idx] - np.concatenate(([0], np.cumsum(reps)[:-1])), reps) + np.arange(reps.sum())
        vals = feat_signs[pos] * np.repeat(log_tf[counts - 1], reps)
        out += np.bincount(np.repeat(t_rows, reps) * self.dim + feat_slots[pos], weights=vals, minlength=n * self.dim)
        # word bigrams: combine the cached 64-bit hashes of consecutive words of the same text
        if len(rows) > 1:
            hw = np.array([e[0] for e in entries], np.uint64)[ids]
            same = rows[:-1] == rows[1:]
            hb = (hw[:-1] * _GOLDEN ^ hw[1:])[same]
            signs = np.where(hb >> np.uint64(63), 1.0, -1.0)
            out += np.bincount(rows[:-1][same] * self.dim + (hb % np.uint64(self.dim)).astype(np.int64),
                               weights=signs, minlength=n * self.dim)
        return out.astype(np.float32).reshape(n, self.dim)
