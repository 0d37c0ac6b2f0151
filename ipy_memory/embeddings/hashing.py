"""The built-in offline embedder: signed feature hashing of words, word bigrams and char n-grams.

Needs numpy only, no network and no model file. Each distinct word's features (the word itself and
its character 3-5-grams) are hashed once and cached in two flat arrays, so a batch costs a
dictionary lookup per word plus one pass that sums the features (`_kernels.hash_rows`, compiled
where the extension is built, a numpy twin with the same vectors bit for bit otherwise): tens of
thousands of texts per second on one core.
"""

from __future__ import annotations

import functools
import math
import threading

import numpy as np

from .. import _kernels, _pages, _text, _validate, _wordkernels
from ..errors import InvalidArgument
from .base import Embedder

@functools.lru_cache(maxsize=None)
def _log_tf_table(size: int) -> np.ndarray:
    return np.array([1.0 + math.log(c) for c in range(1, size + 1)], np.float32)


def _log_tf(most: int) -> np.ndarray:
    """1 + ln(count) for counts 1..most (float32), from tables of power-of-two sizes."""
    return _log_tf_table(1 << max(most - 1, 0).bit_length())


def _grown(a: np.ndarray, used: int, need: int) -> np.ndarray:
    """`a`, or a copy of its first `used` items with room for `need` (capacity doubled). Not
    `_columns.Column`: its appends move each array's end on its own, and an interrupt between two of
    them would misalign the arrays; here the positions come from the cache and `_used`, which move
    only once every array is written."""
    if need <= len(a):
        return a
    out = _pages.zeros(max(need, 2 * len(a)), a.dtype)
    out[:used] = a[:used]
    return out


class HashEmbedder(Embedder):
    """Words + word bigrams + char 3-5-grams, stop-words dropped, log tf, signed hashing, L2-norm."""

    semantic = False
    cheap = True

    def __init__(self, dim: int = 384, *, char_ngrams: tuple[int, ...] = (3, 4, 5), cache_size: int = 500_000):
        self.dim = _validate.integer(dim, "HashEmbedder dim", 1, 65_536)
        if not isinstance(char_ngrams, (tuple, list)) or not char_ngrams:
            raise InvalidArgument(f"HashEmbedder char_ngrams must be a tuple of lengths such as (3, 4, 5), "
                                  f"not {char_ngrams!r}")
        self.char_ngrams = tuple(_validate.integer(n, "HashEmbedder char_ngrams", 1, 32) for n in char_ngrams)
        _validate.integer(cache_size, "HashEmbedder cache_size", 0, 1 << 40)
        self.name = f"hash-v1-{self.dim}"
        self._cache_size = cache_size
        self._grams: dict[str, int] = {}       # a new word mostly reuses n-grams of words seen before
        self._lock = threading.Lock()          # a batch's words are looked up and added as one step
        self._clear()

    def _clear(self) -> None:
        # word -> its entry (a word table, csrc/words.c): the entry's 64-bit word hash, first
        # feature and feature count sit in three arrays, the features of every entry in two more,
        # so a batch gathers all of them with one index per array instead of reading tuples word by word
        self._table = _wordkernels.word_table()
        self._words = 0                                # entries stored
        self._hash = np.zeros(256, np.uint64)
        self._first = np.zeros(256, np.int64)
        self._count = np.zeros(256, np.int64)
        self._slots = np.zeros(1024, np.int32)         # each feature's dimension
        self._signs = np.zeros(1024, np.int8)          # ... and its sign
        self._used = 0                                 # features stored

    def _lookup(self, per_text: list[tuple[str, ...]], total: int) -> tuple[np.ndarray, ...]:
        """Each word occurrence's index among the batch's distinct words, and those words' hashes,
        first features and feature counts, with the feature arrays those index: one compiled pass
        over the words (`_wordkernels.word_ids`) that also lists and enters the new ones, whose
        features are then computed in one more (`_add`)."""
        ids, distinct = np.empty(total, np.int64), np.empty(total, np.int64)
        with self._lock:
            try:
                self._table = _wordkernels.word_table_room(self._table, total)
                got, new = _wordkernels.word_ids(per_text, self._table, self._words, ids, distinct)
                if new and self._words + len(new) > self._cache_size:
                    self._clear()                    # between batches: a batch's entries stay valid
                    self._table = _wordkernels.word_table_room(self._table, total)
                    got, new = _wordkernels.word_ids(per_text, self._table, 0, ids, distinct)     # now all of them
                if new:
                    self._add(new)
            except BaseException:      # (an interrupt): entered words without features must not stay
                self._clear()
                raise
            at = distinct[:got]
            return ids, self._hash[at], self._first[at], self._count[at], self._slots, self._signs

    def _add(self, words: list[str]) -> None:
        """Hash and store the features of new words, entries self._words onwards (under the lock):
        each word's own hash and its char n-grams' (an n-gram's hash is cached: a new word mostly
        reuses n-grams of words seen before), in one compiled pass (`_wordkernels.word_features`)."""
        n, used, k = self._words, self._used, len(self.char_ngrams)
        room = len(words) * (1 + 3 * k) + k * sum(map(len, words))   # >= 1 + sum(len + 3 - size) a word
        self._hash, self._first, self._count = (_grown(a, n, n + len(words)) for a in (self._hash, self._first, self._count))
        self._slots, self._signs = (_grown(a, used, used + room) for a in (self._slots, self._signs))
        counts = self._count[n:n + len(words)]
        stored = _wordkernels.word_features(words, self._grams, self.char_ngrams, self.dim, self._hash[n:n + len(words)],
                                        counts, self._slots[used:used + room], self._signs[used:used + room])
        self._first[n:n + len(words)] = used + np.cumsum(counts) - counts
        self._used = used + stored
        self._words = n + len(words)
        if len(self._grams) >= self._cache_size:
            self._grams.clear()

    def _embed(self, texts: list[str]) -> np.ndarray:
        n = len(texts)
        per_text = [_text.hashing_words(t) for t in texts]
        per = np.fromiter(map(len, per_text), np.int64, n)
        out = np.zeros((n, self.dim), np.float32)
        # in runs of at most _RUN_WORDS words (or one text): the word table keeps room for a run's
        # words, and a huge batch would leave it that large
        ends = np.cumsum(per)
        start = 0
        while start < n:
            stop = max(int(np.searchsorted(ends, (ends[start - 1] if start else 0) + _RUN_WORDS, "right")), start + 1)
            self._embed_run(per_text[start:stop], per[start:stop], out[start:stop])
            start = stop
        return out

    def _embed_run(self, per_text: list[tuple[str, ...]], per: np.ndarray, out: np.ndarray) -> None:
        total = int(per.sum())
        if total:
            ids, hashes, firsts, counts, feat_slots, feat_signs = self._lookup(per_text, total)
            _kernels.hash_rows(ids, per, firsts, counts, hashes, feat_slots, feat_signs, _log_tf(int(per.max())), out)


_RUN_WORDS = 1 << 17
