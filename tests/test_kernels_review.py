"""Regressions of the C extension's review (each failed, or crashed the interpreter, before its fix):
Python code that a kernel calls changing the arguments it reads, a str subclass's lower(), a leak on
a bad argument, word-table keys made to collide, zero-width rows, non-finite rows and an overflowing
range check. A case that crashed runs in a fresh interpreter, so that the suite survives it."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ipy_memory import _kernels, _text, _wordkernels

compiled = pytest.mark.skipif(not _kernels.COMPILED, reason="IPY_MEMORY_PURE_PYTHON is set")
ROOT = Path(__file__).resolve().parents[1]


def _survives(*code: str) -> None:
    """The code, after `S` (the extension), `K` (_kernels), `W` (_wordkernels), `T` (_text) and `np`
    are imported, runs to its end in a fresh interpreter (a crash there fails the test instead of
    ending the suite)."""
    prelude = ("import numpy as np\n"
               "from ipy_memory import _speedups as S, _kernels as K, _text as T, _wordkernels as W\n")
    source = prelude + "".join(map(textwrap.dedent, code)) + "\nprint('done')"
    run = subprocess.run([sys.executable, "-c", source], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip().endswith("done"), (run.returncode, run.stdout, run.stderr)


# ---------------------------------------------------------------------- 1: index_batch's miss

_INDEX_BATCH = """
def run(kernel, cache, known, per_text, change):
    calls, vocab = [], {}
    def miss(word):
        calls.append(word)
        change(per_text)
        return 2 * len(calls) + 1                       # a new expandable term a call
    total = sum(map(len, per_text))
    terms, counts, distinct = np.zeros(total, np.int64), np.zeros(total, np.int32), np.zeros(len(per_text), np.int64)
    n = kernel(per_text, cache, miss, vocab, known, terms, counts, distinct)
    return n, terms[:n].tolist(), counts[:n].tolist(), distinct.tolist(), calls, vocab

def both(make, change):
    got = run(S.index_batch, W.word_table(4096), W.word_table(16), make(), change)
    want = run(W.index_batch_python, {}, {}, make(), change)
    assert got == want, (got, want)
    return got
"""


@compiled
def test_index_batch_reads_the_batch_as_given_when_miss_makes_a_text_longer():
    _survives(_INDEX_BATCH, """
    def longer(per_text):                 # longer than any text counted before the loop
        per_text[-1] = tuple(f"w{i}" for i in range(5000))
    n, terms, counts, distinct, calls, vocab = both(lambda: [("alpha",), ("beta", "gamma")], longer)
    assert calls == ["alpha", "beta", "gamma"] and distinct == [1, 2] and n == 3
    """)


@compiled
def test_index_batch_reads_the_batch_as_given_when_miss_empties_the_list():
    _survives(_INDEX_BATCH, """
    make = lambda: [tuple(f"w{i}x{t}" for i in range(50)) for t in range(3)]
    n, terms, counts, distinct, calls, vocab = both(make, lambda per_text: per_text.clear())
    assert distinct == [50, 50, 50] and len(calls) == 150 and len(vocab) == 150
    """)


# ---------------------------------------------------------------------- 2: word_features' grams

@compiled
def test_word_features_read_the_words_as_given_when_a_gram_key_empties_the_list():
    _survives("""
    def run(kernel):
        words = ["ab", "cd", "ef"]
        class Key:
            def __hash__(self):
                return hash("<a")          # the first 2-gram of "<ab>": its lookup compares with this key
            def __eq__(self, other):
                words.clear()
                return False
        hashes, counts = np.zeros(3, np.uint64), np.zeros(3, np.int64)
        slots, signs = np.zeros(64, np.int32), np.zeros(64, np.int8)
        n = kernel(words, {Key(): 0}, (2,), 16, hashes, counts, slots, signs)
        return n, hashes.tolist(), counts.tolist(), slots[:n].tolist(), signs[:n].tolist()
    got, want = run(S.word_features), run(W.word_features_python)
    assert got == want and got[2] == [4, 4, 4], (got, want)
    """)


# ---------------------------------------------------------------------- 3: text_words' lower()

@compiled
def test_text_words_refuse_a_lower_that_returns_no_str():
    _survives("""
    for result in (b"\\xff" * 100000, [None] * 100000, 12345):
        class Weird(str):
            def lower(self):
                return result
        for nfkc in (False, True):
            try:
                S.text_words(Weird("café"), frozenset(), nfkc)
            except TypeError:
                pass
            else:
                raise AssertionError((result[:3] if result != 12345 else result, nfkc))
    class Bytes(str):
        def lower(self):
            return b"caf\\xc3\\xa9"
    try:
        T._words_python(Bytes("café"), False)             # the twin: a TypeError too
    except TypeError:
        pass
    else:
        raise AssertionError("twin")
    """)


@compiled
def test_text_words_take_a_str_subclass_lower_as_the_twin_does():
    class Other(str):
        def lower(self):
            return Other("kelp Tide 光ぁ")                # a str (subclass) still: read as one

    for nfkc in (False, True):
        assert _kernels._speedups.text_words(Other("café"), _text.STOP_WORDS, nfkc) == _text._words_python(
            Other("café"), nfkc) == ("kelp", "Tide", "光ぁ")


# ---------------------------------------------------------------------- 4: sort_postings' leak

@compiled
def test_sort_postings_release_the_arrays_taken_before_a_bad_one():
    h, s, t = np.zeros(4, np.int64), np.zeros(4, np.int32), np.zeros(4, np.float32)
    oh, os_ = np.zeros(4, np.int64), np.zeros(4, np.int32)
    before = [sys.getrefcount(x) for x in (h, s, t, oh, os_)]
    for _ in range(100):
        with pytest.raises(TypeError):
            _kernels._speedups.sort_postings(h, s, t, oh, os_, np.zeros(4))       # float64 out_tfs
    assert [sys.getrefcount(x) for x in (h, s, t, oh, os_)] == before
    h.resize(8)                                      # no buffer export left on it


# ---------------------------------------------------------------------- 5: colliding word keys

# "tsèdßútþñåzåqûoñ" was computed from "internationalize" (one text_words keeps whole) so that the
# word tables' mixing hash of the two is the same (review/cext/mkcollide.py)
_COLLIDING = ("tsèdßútþñåzåqûoñ", "internationalize")


@compiled
def test_words_whose_mixing_hashes_collide_keep_their_own_entries():
    a, b = _COLLIDING
    assert _kernels._speedups.text_words(f"kelp {a} tide", _text.STOP_WORDS, True) == ("kelp", a, "tide")
    per_text = [(a,), (b,), (b, a)]
    runs = []
    for word_ids, index_batch, cache, known, index_cache in (
            (_kernels._speedups.word_ids, _kernels._speedups.index_batch, _wordkernels.word_table(64),
             _wordkernels.word_table(64), _wordkernels.word_table(64)),
            (_wordkernels.word_ids_python, _wordkernels.index_batch_python, {}, {}, {})):
        ids, distinct = np.zeros(4, np.int64), np.zeros(4, np.int64)
        count, new = word_ids(per_text, cache, 100, ids, distinct)
        terms, counts, texts, vocab = np.zeros(4, np.int64), np.zeros(4, np.int32), np.zeros(3, np.int64), {}
        n = index_batch(per_text, index_cache, _text.index_word, vocab, known, terms, counts, texts)
        runs.append((count, new, ids.tolist(), distinct[:count].tolist(), terms[:n].tolist(), texts.tolist(), vocab))
    assert runs[0] == runs[1]
    assert runs[0][1] == [a, b] and runs[0][4][:2] == [_text.index_word(a) >> 1, _text.index_word(b) >> 1]


@compiled
def test_colliding_words_stay_apart_when_a_word_table_moves():
    a, b = _COLLIDING
    small, big = _wordkernels.word_table(16), _wordkernels.word_table(64)
    ids, distinct = np.zeros(2, np.int64), np.zeros(2, np.int64)
    assert _kernels._speedups.word_ids([(a, b)], small, 7, ids, distinct) == (2, [a, b])
    _kernels._speedups.word_table_move(small, big)
    assert _kernels._speedups.word_ids([(b, a)], big, 9, ids, distinct) == (2, [])
    assert distinct.tolist() == [8, 7]


# ---------------------------------------------------------------------- 6: rows of no dimensions

@compiled
@pytest.mark.parametrize("n", [1, 3, 1000])
def test_half_dots_crc_of_zero_width_rows_is_the_crc_of_nothing(n):
    mat, q = np.zeros((n, 0), np.float16), np.zeros((1, 0), np.float32)
    got, want = np.full((1, n), np.nan, np.float32), np.full((1, n), np.nan, np.float32)
    assert _kernels._speedups.half_dots_crc(mat, q, None, got) == _kernels.half_dots_crc_numpy(mat, q, None, want) == 0
    assert np.array_equal(got, want) and not got.any()


# ---------------------------------------------------------------------- 7: non-finite rows

def _quantized(rows, run):
    cols, scales = np.full((rows.shape[1], len(rows)), 99, np.int8), np.full(len(rows), -1, np.float32)
    run(rows, cols, scales)
    return cols.T, scales


@pytest.mark.parametrize("dim", [16, 19, 3])
def test_quantize_rows_saturate_inf_and_zero_nan_on_every_path(dim):
    """NaN -> 0 and +-inf -> +-127, the scale from the finite values, in every lane position (both
    8-lane blocks and the tail past them), on the F16C path, the portable one and the twin."""
    nan, inf = np.float16("nan"), np.float16("inf")
    rows = np.full((2 * dim + 4, dim), 0.5, np.float16)
    rows[:, 0] = 1.0
    for i in range(dim):
        rows[2 * i, i] = nan
        rows[2 * i + 1, i] = -inf if i % 2 else inf
    rows[-4], rows[-3] = nan, inf                   # no finite value: scale 0
    rows[-3, 0] = 0
    rows[-2, :] = 0
    rows[-1, 1::2] = nan
    runs = [_quantized(rows, _kernels.quantize_rows_numpy)]
    if _kernels.COMPILED:
        runs += [_quantized(rows, lambda *a: _kernels._speedups.quantize_rows(*a, simd)) for simd in (True, False)]
    for cols, scales in runs[1:]:
        assert np.array_equal(cols, runs[0][0]) and np.array_equal(scales, runs[0][1])
    cols, scales = runs[0]
    assert np.isfinite(scales).all()
    for i in range(dim):
        finite = np.float32(1.0) if i else np.float32(0.5)
        assert scales[2 * i] == scales[2 * i + 1] == finite / np.float32(127)
        assert cols[2 * i, i] == 0 and cols[2 * i + 1, i] == (-127 if i % 2 else 127)
    assert scales[-4] == scales[-3] == scales[-2] == 0
    assert not cols[-4].any() and cols[-3, 0] == 0 and (cols[-3, 1:] == 127).all() and not cols[-2].any()
    assert (cols[-1, 1::2] == 0).all() and (cols[-1, 0] == 127)


# ---------------------------------------------------------------------- 8: hash_rows' range check

@compiled
def test_hash_rows_refuse_a_feature_range_whose_end_overflows():
    ids, per = np.array([0], np.int64), np.array([1], np.int64)
    starts, lens = np.array([2**63 - 5], np.int64), np.array([10], np.int64)       # starts + lens wraps
    args = ids, per, starts, lens, np.zeros(1, np.uint64), np.zeros(4, np.int32), np.ones(4, np.int8), \
        np.ones(1, np.float32)
    with pytest.raises(ValueError, match="inconsistent"):
        _kernels._speedups.hash_rows(*args, np.zeros((1, 8), np.float32))
    with pytest.raises(IndexError):
        _kernels.hash_rows_numpy(*args, np.zeros((1, 8), np.float32))
