"""The word-level kernels: a text's words to index terms (lexical) and to hashed features (the
HashEmbedder), through a word table that caches each word's entry, compiled where the `_speedups`
extension was built (csrc/words.c, csrc/blake2b.c) and in Python otherwise (`_kernels` says which).
"""

from __future__ import annotations

from itertools import chain

import numpy as np

from . import _pages
from ._digests import blake2b
from ._kernels import COMPILED, _speedups


def index_batch_python(per_text: list, cache: dict, miss, vocab: dict, known: dict, terms: np.ndarray,
                       counts: np.ndarray, distinct: np.ndarray) -> int:
    """Each text's distinct term hashes in order of first use (into terms) and how often each
    occurs (counts), text after text, and how many each text has (distinct); returns how many
    terms it wrote. A word's entry, term hash * 2 + expandable, comes from `cache`, or from
    miss(word), which is then cached (a word that starts with a CJK character or is ASCII digits
    gets its own term, not expandable, without the call: what _text.index_word gives it); an
    expandable word is the word of its term in `vocab` unless one is there already (`known`: terms
    vocab is known to hold, not looked up there again). The batch is per_text as it is at the call
    (a miss that changes the list does not change it). (One int per word, not a tuple: a dict of
    ints is no work for the garbage collector, a dict of tuples is.)"""
    out = 0
    for t, words in enumerate(tuple(per_text)):
        tf: dict[int, int] = {}
        for word in words:
            entry = cache.get(word)
            if entry is None:
                own = isinstance(word, str) and (_starts_cjk(word) or (word.isascii() and word.isdigit()))
                entry = cache[word] = blake2b64_python(word) >> 1 << 1 if own else miss(word)
            term = entry >> 1
            if entry & 1 and term not in known:
                vocab.setdefault(term, word)
                known[term] = True
            tf[term] = tf.get(term, 0) + 1
        terms[out:out + len(tf)] = list(tf)
        counts[out:out + len(tf)] = list(tf.values())
        distinct[t] = len(tf)
        out += len(tf)
    return out


def word_ids_python(per_text: list, cache: dict, first_new: int, ids: np.ndarray, distinct: np.ndarray):
    """Each word's index (ids, in order) among the distinct entries cache[word] (distinct, in the
    order the batch first uses them) and how many those are, with the words not in cache, each
    once in the order first met: those are stored in cache with the entries first_new + their
    place in that list."""
    missing: list[str] = []
    local: dict[int, int] = {}
    for k, w in enumerate(chain.from_iterable(per_text)):
        e = cache.get(w)
        if e is None:
            e = cache[w] = first_new + len(missing)
            missing.append(w)
        at = local.get(e)
        if at is None:
            at = local[e] = len(local)
            distinct[at] = e
        ids[k] = at
    return len(local), missing


WORD_SLOT = 3       # uint64s a word table's slot holds: its word's key (two hashes) and entry (csrc/words.c)


def word_table(slots: int = 4096) -> np.ndarray | dict:
    """An empty word cache for index_batch / word_ids: a word table (csrc/words.c) of `slots`
    slots (a power of two), a dict where the extension is not built."""
    return _pages.zeros(1 + WORD_SLOT * slots, np.uint64) if COMPILED else {}


def word_table_room(table: np.ndarray | dict, more: int, most: int | None = None) -> np.ndarray | dict:
    """`table`, or one with its words and room for `more` (at most half full): doubled as often as
    that takes; past `most` slots an empty one of `most` slots instead (a dict past most / 2 words
    is emptied)."""
    if isinstance(table, dict):
        if most is not None and len(table) + more > most // 2:
            table.clear()
        return table
    slots = need = (len(table) - 1) // WORD_SLOT
    while int(table[0]) + more > need // 2:
        need *= 2
    if need == slots:
        return table
    if most is not None and need > most:
        need = most
        while more > need // 2:
            need *= 2
        return word_table(need)
    grown = word_table(need)
    _speedups.word_table_move(table, grown)
    return grown


def blake2b64_python(text: str) -> int:
    """The 8-byte BLAKE2b digest of the UTF-8 text, as a little-endian integer."""
    return int.from_bytes(blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def gram_hashes_python(marked: str, grams: dict, sizes: tuple) -> list[int]:
    """For each n in sizes and each n-character slice g of `marked`, in that order: grams[g], or
    blake2b64_python("c|" + g), which is then stored in `grams`."""
    out = []
    for n in sizes:
        if n < 1:
            raise ValueError("gram_hashes: sizes must be positive integers")
        for i in range(len(marked) - n + 1):
            g = marked[i:i + n]
            v = grams.get(g)
            if v is None:
                v = grams[g] = blake2b64_python("c|" + g)
            out.append(v)
    return out


def _starts_cjk(word: str) -> bool:
    """The first character is kana, CJK or hangul: `_text.is_cjk` (whose regex this module cannot import)."""
    c = ord(word[0]) if word else 0
    return (0x3040 <= c <= 0x30FF or 0x3400 <= c <= 0x4DBF or 0x4E00 <= c <= 0x9FFF or 0xAC00 <= c <= 0xD7AF
            or 0xF900 <= c <= 0xFAFF)


def word_features_python(words: list, grams: dict, sizes: tuple, dim: int, hashes: np.ndarray, counts: np.ndarray,
                         slots: np.ndarray, signs: np.ndarray) -> int:
    """The HashEmbedder's features of new words: for word i, hashes[i] = blake2b64('w|' + word) and
    its features, that hash followed (unless the word is a CJK gram) by gram_hashes('<' + word + '>'),
    stored one after another from the start of slots (hash % dim) and signs (+1 where bit 63 is set,
    else -1); counts[i] is how many. Returns the number of features stored. The words are the list
    as it is at the call (a key of grams that changes it does not change them)."""
    if dim < 1 or len(hashes) < len(words) or len(counts) < len(words) or len(slots) != len(signs):
        raise ValueError("word_features: dim must be >= 1, hashes and counts one per word, slots and signs "
                         "as long as each other")
    feats: list[int] = []
    for i, w in enumerate(tuple(words)):
        if not isinstance(w, str):
            raise TypeError("word_features: words must be a list of str")
        h = blake2b64_python("w|" + w)
        f = [h] if _starts_cjk(w) else [h, *gram_hashes_python(f"<{w}>", grams, sizes)]
        hashes[i], counts[i] = h, len(f)
        feats.extend(f)
    if len(feats) > len(slots):
        raise ValueError("word_features: slots and signs are too short for the features")
    hs = np.array(feats, np.uint64)
    slots[:len(hs)] = hs % np.uint64(dim)
    signs[:len(hs)] = np.where(hs >> np.uint64(63), 1, -1)
    return len(hs)


word_ids = _speedups.word_ids if COMPILED else word_ids_python
index_batch = _speedups.index_batch if COMPILED else index_batch_python
blake2b64 = _speedups.blake2b64 if COMPILED else blake2b64_python
gram_hashes = _speedups.gram_hashes if COMPILED else gram_hashes_python
word_features = _speedups.word_features if COMPILED else word_features_python
