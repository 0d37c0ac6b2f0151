"""The hottest loops, compiled where the optional `_speedups` extension was built, numpy otherwise.

Each kernel has a numpy twin here that computes the same thing (the word-level ones are in
`_wordkernels`); the C one (ipy_memory/csrc/)
avoids the temporaries numpy needs and runs with the GIL released. Set IPY_MEMORY_PURE_PYTHON=1
(before importing ipy_memory) to run the numpy twins everywhere; `COMPILED` says which ones run,
and `python -m ipy_memory selftest` reports it.
"""

from __future__ import annotations

import os
import zlib

import numpy as np

try:
    from . import _speedups
except ImportError:                  # not built (no C compiler at install time): numpy runs instead
    _speedups = None

if os.environ.get("IPY_MEMORY_PURE_PYTHON", "").strip().lower() in ("1", "true", "yes", "on"):
    _speedups = None

COMPILED = _speedups is not None
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)     # the hashing embedder's bigram mixing constant


def column_scores_numpy(cols: np.ndarray, dims: np.ndarray, weights: np.ndarray, scale: np.ndarray,
                        alive: np.ndarray | None, slack: float, out: np.ndarray, crcs: np.ndarray | None = None,
                        want: np.ndarray | None = None) -> None:
    """out[j] = scale[j] * (sum_i weights[i] * cols[dims[i], j] + slack) (float32, summed in the
    order of dims), -inf where `alive` is False; n = len(out) rows of the (dim, >= n) int8 `cols`.
    With `crcs`, also crcs[i] = zlib.crc32(cols[dims[i], :n], crcs[i]) where `want` (or for all i)."""
    n = len(out)
    np.einsum("i,ij->j", weights, cols[dims, :n], out=out, casting="unsafe")
    out += np.float32(slack)
    out *= scale
    if alive is not None:
        out[~alive] = -np.inf
    if crcs is not None:
        for i, d in enumerate(np.asarray(dims).tolist()):
            if want is None or want[i]:
                crcs[i] = zlib.crc32(np.ascontiguousarray(cols[d, :n]), int(crcs[i]))


def half_dots_numpy(mat: np.ndarray, queries: np.ndarray, alive: np.ndarray | None, out: np.ndarray,
                    simd: bool = True) -> None:
    """out[k, j] = queries[k] . mat[j] (float32) for the (n, dim) float16 rows of `mat`, -inf where
    `alive` is False; out is (len(queries), n). In blocks of rows: a float32 copy of all of them would
    double the memory a scan needs. (The package scans with usearch when the extension is not built:
    faster than this twin, which is the tests' reference.)"""
    for lo in range(0, len(mat), 16384):
        block = mat[lo:lo + 16384].astype(np.float32)
        out[:, lo:lo + len(block)] = queries @ block.T
    if alive is not None:
        out[:, ~alive] = -np.inf


def half_dots_crc_numpy(mat: np.ndarray, queries: np.ndarray, alive: np.ndarray | None, out: np.ndarray) -> int:
    """half_dots_numpy, and returns zlib.crc32 of mat's bytes (row after row): the check of a
    snapshot's rows that a scan of them does in the same pass where it is compiled."""
    half_dots_numpy(mat, queries, alive, out)
    return zlib.crc32(np.ascontiguousarray(mat))


INT8_TOP = 127      # quantize_rows' int8 value of a row's largest |value| (csrc/columns.c's too)


def quantize_rows_numpy(rows: np.ndarray, cols: np.ndarray, scales: np.ndarray) -> None:
    """The int8 columns of float16 rows (n, dim): scales[j] = max|rows[j]| / INT8_TOP (float32) and
    cols[:, j] = rint(rows[j] / scales[j]) clipped to [-INT8_TOP, INT8_TOP] (a row of zeros: scale 0, zeros);
    cols is (dim, n) int8, e.g. a slice of a ColumnScan block. All in float32. Non-finite values (a
    float32 of 65520 or more is inf in float16): the max is the finite values', +-inf saturates to
    +-INT8_TOP and NaN is 0."""
    x = rows.astype(np.float32)
    top = np.abs(x).max(axis=1) if x.size else np.zeros(len(rows), np.float32)
    odd = np.flatnonzero(~np.isfinite(top))         # rows holding inf or NaN (seldom: the rest as fast as before)
    if len(odd):
        a = np.abs(x[odd])
        top[odd] = np.where(a < np.inf, a, np.float32(0)).max(axis=1)
        x[odd] = np.where(np.isnan(x[odd]), np.float32(0), x[odd])
    scale = (top / np.float32(INT8_TOP)).astype(np.float32)
    np.divide(x, scale[:, None], out=x, where=scale[:, None] > 0)
    np.rint(x, out=x)
    np.clip(x, -INT8_TOP, INT8_TOP, out=x)
    cols[...] = x.astype(np.int8).T          # cast, then transpose: 4x faster
    scales[...] = scale


def bm25_add_numpy(out: np.ndarray, slots: np.ndarray, tf: np.ndarray, norm: np.ndarray | None,
                   lens: np.ndarray | None, shared: np.ndarray | None, flat: float, coef: float) -> None:
    """out[slots] += coef * tf / (tf + nm) (float32), nm = flat where `shared`, else norm[lens[slots]]
    (flat for every posting when `norm` is None). A term's slots are distinct."""
    nm = norm.take(lens.take(slots)) if norm is not None else flat
    if shared is not None:
        nm = np.where(shared, flat, nm)
    np.add.at(out, slots, np.float32(coef) * tf / (tf + nm))


def context_add_numpy(score: np.ndarray, tfc: np.ndarray, around: np.ndarray, slots: np.ndarray, tf: np.ndarray,
                      dead: np.ndarray, shared: np.ndarray | None, flat: float, cols: tuple, norm: np.ndarray,
                      weight: float) -> None:
    """One neighbour distance of a term's context columns: the term's tf in each live posting slot
    goes to its two neighbours around[slot, cols[0]] and around[slot, cols[1]] (-1: none); then each
    neighbour t scores weight * v / (v + nm) once, v its summed tf and nm = flat where `shared`, else
    norm[around[slot, cols[2]]] (cols[3] on the second side), and `tfc` is zero again.

    Node t has slot j as a neighbour at that distance iff t = next[j] or t = prev[j]; both maps are
    one-to-one, so each side's targets are distinct. A node with the term on both sides is scored
    with the first side, whose reset leaves the second a tf of 0 (adding 0): no deduplication pass."""
    tf = tf * ~dead.take(slots)
    rows = around.take(slots, axis=0)
    sentinel = len(score) - 1                     # "no neighbour": a slot whose score is dropped
    targets = [np.where(rows[:, c] < 0, sentinel, rows[:, c]) for c in cols[:2]]
    for t in targets:
        np.add.at(tfc, t, tf)
    for t, c in zip(targets, cols[2:]):
        v = tfc.take(t)
        nm = norm.take(rows[:, c])
        if shared is not None:
            nm = np.where(shared, flat, nm)
        np.add.at(score, t, np.float32(weight) * v / (v + nm))
        tfc[t] = 0
    tfc[sentinel] = 0


def neighbours_numpy(prev: np.ndarray, nxt: np.ndarray, length: np.ndarray, distances: np.ndarray,
                     around: np.ndarray, ctx: np.ndarray) -> None:
    """The neighbour structure of a lexical shard (_lexscore.build), into `around` (slots, 4 W) and
    `ctx` (W, slots), W = len(distances): per distance d (ascending, >= 1), the slots d links back
    and forth along the padded columns prev / next (-1: none, and the sentinel's link, the last
    entry, for a walk from -1), their summed `length` (float64, cast to int32) as ctx[i], and
    around[x] = (back, forth per distance, then ctx[i] of each of those two)."""
    nw, back, forth, d = len(distances), prev, nxt, 1
    for i, want in enumerate(distances.tolist()):
        while d < want:
            back, forth, d = prev[back], nxt[forth], d + 1
        ctx[i] = length[back] + length[forth]           # index -1: the sentinel's
        around[:, 2 * i], around[:, 2 * i + 1] = back, forth
        around[:, 2 * nw + 2 * i], around[:, 2 * nw + 2 * i + 1] = ctx[i][back], ctx[i][forth]


def reply_add_numpy(score: np.ndarray, own: np.ndarray, asking: np.ndarray, answering: np.ndarray,
                    weight: float) -> None:
    """score[answering[j]] += float32(weight) * own[asking[j]] for each question j whose own score
    is > 0 (answering -1: none); every own value is read before any is added (score may be own)."""
    asked = own.take(asking)
    hit = np.flatnonzero(asked > 0)
    answer = answering.take(hit)
    ok = answer >= 0
    np.add.at(score, answer[ok], np.float32(weight) * asked.take(hit)[ok])


def hash_rows_numpy(ids: np.ndarray, per_text: np.ndarray, starts: np.ndarray, lens: np.ndarray, hashes: np.ndarray,
                    slots: np.ndarray, signs: np.ndarray, log_tf: np.ndarray, out: np.ndarray) -> None:
    """The HashEmbedder's vectors before normalisation (embeddings/hashing.py) into out (n, dim):
    text t holds the words ids[sum(per_text[:t]):][:per_text[t]] (indices into the words' starts /
    lens / hashes); each distinct word, in the order the text first uses it, adds signs[f] *
    log_tf[count - 1] at slots[f] for its features f; each pair of consecutive words adds +-1 at
    (hash[a] * golden ^ hash[b]) % dim. Summed in float64 in that order (so a text's vector does not
    depend on its batch), word and pair sums added, then float32."""
    n, dim = out.shape
    entries = len(starts)
    rows = np.repeat(np.arange(n, dtype=np.int64), per_text)
    pairs, first, counts = np.unique(rows * entries + ids, return_index=True, return_counts=True)
    by_first = np.argsort(first)
    pairs, counts = pairs[by_first], counts[by_first]
    t_rows, w_idx = pairs // entries, pairs % entries
    reps = lens[w_idx]
    pos = np.repeat(starts[w_idx] - np.concatenate(([0], np.cumsum(reps)[:-1])), reps) + np.arange(reps.sum())
    vals = signs[pos] * np.repeat(log_tf[counts - 1], reps)
    acc = np.zeros(n * dim, np.float64)       # (bincount of nothing gives int64 zeros)
    acc += np.bincount(np.repeat(t_rows, reps) * dim + slots[pos], weights=vals, minlength=n * dim)
    if len(rows) > 1:       # word bigrams: the 64-bit hashes of consecutive words of the same text
        hw = hashes[ids]
        same = rows[:-1] == rows[1:]
        hb = (hw[:-1] * _GOLDEN ^ hw[1:])[same]
        acc += np.bincount(rows[:-1][same] * dim + (hb % np.uint64(dim)).astype(np.int64),
                           weights=np.where(hb >> np.uint64(63), 1.0, -1.0), minlength=n * dim)
    out[:] = acc.reshape(n, dim)


def sort_postings_numpy(h: np.ndarray, s: np.ndarray, t: np.ndarray, out_h: np.ndarray, out_s: np.ndarray,
                        out_t: np.ndarray) -> None:
    """The postings (int64 term hashes, int32 slots, float32 tfs) sorted by term hash into the out
    arrays, a term's postings in the order given."""
    order = np.argsort(h, kind="stable")
    for a, out in ((h, out_h), (s, out_s), (t, out_t)):
        np.take(a, order, out=out)


def merge_postings_numpy(runs, out_h: np.ndarray, out_s: np.ndarray, out_t: np.ndarray) -> None:
    """Runs of postings, each (hashes, slots, tfs) sorted by term hash, merged into the out arrays:
    sorted by term hash, a term's postings in the order of the runs (a stable sort of them all)."""
    h = np.concatenate([r[0] for r in runs]) if runs else np.zeros(0, np.int64)
    order = np.argsort(h, kind="stable")
    for i, out in enumerate((out_h, out_s, out_t)):
        np.take(np.concatenate([r[i] for r in runs]) if runs else out[:0], order, out=out)


def to_half_numpy(values: np.ndarray) -> np.ndarray:
    """values (float32) as float16, rounded to nearest even."""
    return values.astype(np.float16)


def _to_half(values: np.ndarray) -> np.ndarray:
    values = np.ascontiguousarray(values, np.float32)
    out = np.empty(values.shape, np.float16)
    _speedups.to_half(values.reshape(-1), out.reshape(-1))
    return out


def priors_numpy(score: np.ndarray, keep: np.ndarray, cues: np.ndarray, asked: int, boost: float) -> None:
    """score *= keep, then score *= boost where cues & asked (float32, in place)."""
    n = len(score)
    score *= keep[:n]
    if asked:
        np.multiply(score, np.float32(boost), out=score, where=(cues[:n] & asked) != 0)


def add_runs_numpy(score: np.ndarray, first: np.ndarray, count: np.ndarray, values: np.ndarray,
                   weight: float) -> None:
    """score[first[j]:first[j] + count[j]] += float32(weight) * values[j] for each j, in order."""
    slots = np.repeat(first - (np.cumsum(count) - count), count) + np.arange(count.sum())
    np.add.at(score, slots, np.float32(weight) * np.repeat(values, count))


def flatnonzero_numpy(values: np.ndarray, floor: float = -np.inf) -> np.ndarray:
    """Indices of the non-zero float32 values that are >= floor, ascending (on a mask: 3x faster
    than on the floats)."""
    if floor == -np.inf:
        return np.flatnonzero(values != 0)
    return np.flatnonzero((values != 0) & (values.astype(np.float64) >= floor))


def crc32_rows_python(mat: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:
    """out[j] = zlib.crc32 of the bytes of row rows[j] of the 2-d `mat` (its rows contiguous)."""
    for j, r in enumerate(np.asarray(rows, np.int64).tolist()):
        if not 0 <= r < len(mat):
            raise IndexError("crc32_rows: rows out of range")
        out[j] = zlib.crc32(mat[r])


def _flatnonzero(values: np.ndarray, floor: float = -np.inf) -> np.ndarray:
    out = np.empty(len(values), np.int64)        # pages never written are never touched
    return out[:_speedups.nonzero(values, out, floor)]


column_scores = _speedups.column_scores if COMPILED else column_scores_numpy
half_dots = _speedups.half_dots if COMPILED else half_dots_numpy
half_dots_crc = _speedups.half_dots_crc if COMPILED else half_dots_crc_numpy
quantize_rows = _speedups.quantize_rows if COMPILED else quantize_rows_numpy
# the compiled float16 scan beats usearch's only on its F16C path (x86 with AVX2): elsewhere usearch scans
FAST_HALF_DOTS = bool(COMPILED and _speedups.FAST_HALF_DOTS)
# float32 -> float16 with F16C (the conversion of every vector written), numpy's elsewhere
to_half = _to_half if FAST_HALF_DOTS else to_half_numpy
rows_json = _speedups.rows_json if COMPILED else None      # (_writer.rows_json falls back to json's encoder)
rows_json_utf8 = _speedups.rows_json_utf8 if COMPILED else None      # (... and .encode() of it: rows_json(utf8=True))
bm25_add = _speedups.bm25_add if COMPILED else bm25_add_numpy
context_add = _speedups.context_add if COMPILED else context_add_numpy
priors = _speedups.priors if COMPILED else priors_numpy
add_runs = _speedups.add_runs if COMPILED else add_runs_numpy
neighbours = _speedups.neighbours if COMPILED else neighbours_numpy
reply_add = _speedups.reply_add if COMPILED else reply_add_numpy
hash_rows = _speedups.hash_rows if COMPILED else hash_rows_numpy
flatnonzero = _flatnonzero if COMPILED else flatnonzero_numpy
sort_postings = _speedups.sort_postings if COMPILED else sort_postings_numpy
merge_postings = _speedups.merge_postings if COMPILED else merge_postings_numpy
# ASCII text's words and answer cues in one pass each (None: not compiled); their twins are _text's
# regexes
text_words = _speedups.text_words if COMPILED else None
squeeze_spaces = _speedups.squeeze_spaces if COMPILED else None
nfkc = _speedups.nfkc if COMPILED else None          # (its twin: unicodedata.normalize('NFKC', text))
ascii_cues = _speedups.ascii_cues if COMPILED else None
# zlib.crc32 by carry-less multiplication, in 512-bit registers where the CPU has AVX-512 VPCLMULQDQ
# (~27 GB/s here, 128-bit folds ~20, zlib 1.2.13's ~3.5: benchmarks/kernels.py): snapshots' checks
crc32 = _speedups.crc32 if COMPILED and _speedups.FAST_CRC32 else zlib.crc32
crc32_rows = _speedups.crc32_rows if COMPILED else crc32_rows_python
