#!/usr/bin/env python3
"""The compiled kernels against what runs without them, measured in the same run, as a Markdown table.

    .venv/bin/python benchmarks/kernels.py              # 152k x 384 scan, 20k synthetic memories
    .venv/bin/python benchmarks/kernels.py --quick      # small sizes: a smoke test

* exact float16 scan: `half_dots` (F16C path and portable path) against usearch's exact search on
  one and two threads and the numpy twin, one query over `--rows` random unit rows of 384 dims
  (the row count of 100k synthetic memories' sections); and `half_dots_crc`, the scan with the CRC
  check of the snapshot rows it reads in the same pass (a cold recall's), against the scan followed
  by the CRC of each part, as before;
* int8 columns: `quantize_rows` (a space's columns for sparse queries, built after its first one)
  on its F16C and portable paths against its numpy twin, over the same rows;
* CRC-32: the compiled `crc32` (512-bit folds where the CPU has AVX-512 with VPCLMULQDQ) against its
  128-bit folds (`wide=False`, as before) and zlib's, over 32 MB in memory and over a fresh mapping
  of a 32 MB file in the page cache (as a new process checks a snapshot: page faults included);
* piece checks: `column_scores` with the CRCs of the 64 columns it reads (a first sparse query's scan
  of a snapshot's int8 columns, blocks of 65,536 rows) against `crc32_rows` (one call a block) then
  the scan, and `crc32_rows` against a `crc32` call a piece and against the CRC of the whole members
  that query no longer waits for (every column, the float16 rows);
* candidate selection: `_topk.largest_nonzero` (a sampled floor, then the compiled `nonzero` over
  it) against listing every non-zero index first (as recall did before, compiled and numpy), for
  the top 200 of `--scores` float32 scores of which 13.5% are non-zero (a 1M store's sections);
* neighbour structure: `neighbours` (every slot's neighbours and context lengths at distances 1
  and 2, built once per shard for its first query) against its numpy twin, over `--rows` slots
  linked as conversations of 2-40 turns, interleaved;
* float16: `to_half` (a write's vectors converted to float16, F16C) against numpy's astype;
* growth: a `--rows` x 384 float16 column (the vector matrix) grown by writes of 1,000 rows, its
  buffers from `_pages` (private mappings) against numpy's allocator, which advises huge pages for
  buffers of 4 MB or more, with and without the spare rows' fill (as before `b4bc2fd`); the median of
  the runs, not the best, since compaction stalls come and go with the kernel's free huge pages. In a
  fresh process they are free, and numpy's huge pages win; inside a long bulk insert they were not
  (BENCHMARKS.md, Reading);
* postings: `sort_postings` (a write's postings sorted by term) and `merge_postings` (four runs
  merged in one pass) against their numpy twins, for `--postings` postings of random 63-bit terms;
* text: `text_words`, `ascii_cues`, `blake2b64` and `gram_hashes` against their Python twins,
  over the texts (or the distinct words) of `--texts` memories of benchmarks/_synth.py, and
  `rows_json` against json's encoder over their document rows as a write builds them.

Best of `--repeat` runs each; the ratio column is twin / compiled (above 1: the kernel is faster).
Needs the extension built (`pip install -e .` with a C compiler).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402

from _synth import Corpus  # noqa: E402
from ipy_memory import _kernels, _text, _topk, _wordkernels  # noqa: E402
from ipy_memory._columns import Column  # noqa: E402
from ipy_memory._native import exact_cosine  # noqa: E402


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def scan_rows(rows: int, repeat: int) -> list[tuple[str, float, float]]:
    rng = np.random.default_rng(0)
    mat = rng.standard_normal((rows, 384)).astype(np.float32)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    mat = mat.astype(np.float16)
    q = rng.standard_normal(384).astype(np.float32)
    q /= np.linalg.norm(q)
    qs, sims = q[None], np.empty((1, rows), np.float32)
    c = _kernels._speedups.half_dots
    compiled = best(lambda: c(mat, qs, None, sims), repeat)
    out = [("half_dots, F16C path (one thread)", compiled, compiled),
           ("half_dots, portable path", best(lambda: c(mat, qs, None, sims, False), repeat), compiled)]
    q16 = q.astype(np.float16)
    for threads in (1, 2):
        out.append((f"usearch exact search, {threads} thread{'s' if threads > 1 else ''}",
                    best(lambda: exact_cosine(mat, q16, 30, threads=threads), repeat), compiled))
    out.append(("numpy twin (half_dots_numpy)",
                best(lambda: _kernels.half_dots_numpy(mat, qs, None, sims), repeat),
                compiled))
    return out


def checked_scan_rows(rows: int, repeat: int) -> list[tuple[str, float, float]]:
    """A cold recall's scan of a snapshot's rows with their CRC check, in parts of 8,192 rows."""
    mat = np.random.default_rng(1).standard_normal((rows, 384)).astype(np.float16)
    qs, sims = np.ones((1, 384), np.float32), np.empty((1, rows), np.float32)
    k = _kernels._speedups
    parts = [(lo, min(lo + 8192, rows)) for lo in range(0, rows, 8192)]

    def fused():
        for lo, hi in parts:
            k.half_dots_crc(mat[lo:hi], qs, None, sims[:, lo:hi])

    def separate():
        for lo, hi in parts:
            k.half_dots(mat[lo:hi], qs, None, sims[:, lo:hi])
            k.crc32(mat[lo:hi])
    compiled = best(fused, repeat)
    path = "one pass, AVX-512 + VPCLMULQDQ" if k.FUSED_CRC_DOTS else "CRC of each block of rows after its dots"
    return [(f"half_dots_crc ({path})", compiled, compiled),
            ("half_dots, then crc32 of the part", best(separate, repeat), compiled),
            ("half_dots alone (no check)", best(lambda: k.half_dots(mat, qs, None, sims), repeat), compiled)]


def columns_rows(rows: int, repeat: int) -> list[tuple[str, float, float]]:
    """The int8 columns of a cold space's float16 rows (ColumnScan, built after its first sparse
    query), in chunks of 8,192 rows as a Build converts them."""
    mat = np.random.default_rng(2).standard_normal((rows, 384)).astype(np.float16)
    cols, scales = np.zeros((384, rows), np.int8), np.zeros(rows, np.float32)

    def run(f):
        for lo in range(0, rows, 8192):
            f(mat[lo:lo + 8192], cols[:, lo:lo + 8192], scales[lo:lo + 8192])
    compiled = best(lambda: run(_kernels._speedups.quantize_rows), repeat)
    return [("quantize_rows, F16C path", compiled, compiled),
            ("quantize_rows, portable path", best(lambda: run(lambda *a: _kernels._speedups.quantize_rows(*a, False)),
                                                  repeat), compiled),
            ("numpy twin (quantize_rows_numpy)", best(lambda: run(_kernels.quantize_rows_numpy), repeat), compiled)]


def crc_rows(repeat: int, size: int = 32 << 20) -> list[tuple[str, float, float]]:
    """CRC-32 of `size` bytes in memory, and of a fresh mapping of a file of them (page cache warm)."""
    import mmap
    import tempfile
    import zlib
    data = np.random.default_rng(3).integers(0, 256, size, dtype=np.uint8)
    k = _kernels._speedups
    ways = [("crc32, 512-bit folds" if k.WIDE_CRC32 else "crc32 (no AVX-512 VPCLMULQDQ here: 128-bit folds)", k.crc32),
            ("crc32, 128-bit folds (wide=False)", lambda b: k.crc32(b, 0, False)), ("zlib.crc32", zlib.crc32)]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "snapshot")
        data.tofile(path)

        def mapped(fn):
            with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as m:
                fn(m)
        for name, fn in ways:
            out.append((f"{name}, {size >> 20} MB in memory", best(lambda: fn(data), repeat)))
        for name, fn in ways:
            out.append((f"{name}, a fresh mapping of a {size >> 20} MB file", best(lambda: mapped(fn), repeat)))
    half = len(ways)
    return [(name, t, out[0 if i < half else half][1]) for i, (name, t) in enumerate(out)]


def piece_check_rows(rows: int, repeat: int) -> list[tuple[str, float, float]]:
    """A new process's first sparse query over a snapshot: the CRCs of its 64 columns in each block of
    65,536 rows (_colsnap), by one `crc32_rows` call a block or a `crc32` call a piece, against the
    whole-member checks it no longer waits for (every column; the float16 rows)."""
    rng = np.random.default_rng(5)
    blocks = [rng.integers(-127, 128, (384, min(65_536, rows - lo)), dtype=np.int8) for lo in range(0, rows, 65_536)]
    mat = rng.standard_normal((rows, 384)).astype(np.float16)
    dims = np.sort(rng.choice(384, 64, replace=False)).astype(np.int64)
    k = _kernels._speedups
    out = np.empty(len(dims), np.uint32)

    def by_rows():
        for block in blocks:
            k.crc32_rows(block, dims, out)

    def by_piece():
        for block in blocks:
            for d in dims.tolist():
                k.crc32(block[d])
    weights, scale = rng.standard_normal(len(dims)).astype(np.float32), rng.uniform(0, 0.01, rows).astype(np.float32)
    scores, crcs = np.empty(rows, np.float32), np.zeros(len(dims), np.uint32)

    def scan(with_crcs: bool):
        at = 0
        for block in blocks:
            n = block.shape[1]
            if with_crcs:
                crcs[:] = 0
                k.column_scores(block, dims, weights, scale[at:at + n], None, 0.0, scores[at:at + n], crcs)
            else:
                k.column_scores(block, dims, weights, scale[at:at + n], None, 0.0, scores[at:at + n])
            at += n
    compiled = best(by_rows, repeat)
    scan_only = best(lambda: scan(False), repeat)
    return [("column_scores with its CRCs, one pass (a first query's scan)", best(lambda: scan(True), repeat),
             compiled),
            ("crc32_rows, then column_scores (as before)", compiled + scan_only, compiled),
            ("column_scores alone (a later query's scan)", scan_only, compiled),
            ("crc32_rows, one call a block", compiled, compiled),
            ("crc32, one call a piece", best(by_piece, repeat), compiled),
            ("crc32 of every column (the whole member)", best(lambda: [k.crc32(b) for b in blocks], repeat), compiled),
            ("crc32 of the float16 rows (the whole member)", best(lambda: k.crc32(mat), repeat), compiled)]


def selection_rows(n: int, repeat: int) -> list[tuple[str, float, float]]:
    rng = np.random.default_rng(0)
    # fresh arrays per run, as each recall's scores are: a warm cache would flatter every method
    arrays = [np.where(rng.random(n) < 0.135, rng.random(n), 0).astype(np.float32) for _ in range(repeat)]
    k = 200

    def each(fn):
        it = iter(arrays)
        return best(lambda: fn(next(it)), repeat)

    def listed(flatnonzero):
        def select(v):
            nz = flatnonzero(v)
            return nz[_topk.largest(v[nz], k)]
        return select

    fast = each(lambda v: _topk.largest_nonzero(v, k))
    return [("largest_nonzero (sampled floor, compiled nonzero over it)", fast, fast),
            ("every non-zero index (compiled nonzero), then largest", each(listed(_kernels._flatnonzero)), fast),
            ("every non-zero index (numpy twin), then largest", each(listed(_kernels.flatnonzero_numpy)), fast)]


def structure_rows(n: int, repeat: int) -> list[tuple[str, float, float]]:
    rng = np.random.default_rng(0)
    prev, nxt = np.full(n + 1, -1, np.int32), np.full(n + 1, -1, np.int32)
    order, at = rng.permutation(n), 0          # threads of 2-40 slots, scattered over the slots
    while at < n:
        run = order[at:at + int(rng.integers(2, 41))]
        nxt[run[:-1]], prev[run[1:]] = run[1:], run[:-1]
        at += len(run)
    length = np.append(rng.integers(1, 60, n).astype(np.float64), 0.0)
    distances = np.array([1, 2], np.int32)
    out = np.empty((n + 1, 8), np.int32), np.empty((2, n + 1), np.int32)
    fast = best(lambda: _kernels._speedups.neighbours(prev, nxt, length, distances, *out), repeat)
    return [("neighbours (compiled)", fast, fast),
            ("numpy twin (neighbours_numpy)", best(lambda: _kernels.neighbours_numpy(prev, nxt, length, distances, *out),
                                                    repeat), fast)]


def text_rows(n: int, repeat: int) -> list[tuple[str, float, float, float]]:
    texts, metas = Corpus(seed=0).memories(0, n)
    ascii_texts = [t for t in texts if t.isascii()]
    k, stop = _kernels._speedups, _text.STOP_WORDS
    per_text = [_text.words(t) for t in texts]
    words = list(dict.fromkeys(w for ws in per_text for w in ws))
    entries = {w: _text.index_word(w) for w in words}      # every word cached, as in a store that has seen them
    slots = 1 << max(len(entries) * 2, 2).bit_length()
    table = np.zeros(1 + _wordkernels.WORD_SLOT * slots, np.uint64)    # (the compiled one's cache)
    index_batch(k.index_batch, [tuple(entries)], table, entries.__getitem__)
    batches = [per_text[i:i + 1000] for i in range(0, len(per_text), 1000)]
    regexes = _text.cue_patterns()
    encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode      # (_validate.json_encoder)
    docs = [(f"m-{i:016x}", "project:bench", "project", "bench", "s", "note", t[:60], t, _text.content_hash(t), 0.6,
             encode(m) if m else None, None) for i, (t, m) in enumerate(zip(texts, metas))]
    doc_batches = [docs[i:i + 1000] for i in range(0, len(docs), 1000)]
    rows = []
    for name, fast, slow, items, per in [
        ("words of ASCII text (text_words / _words_python)", lambda x: k.text_words(x, stop), _text._words_python,
         ascii_texts, 1),
        ("words of other text, mostly Chinese (text_words / _words_python)", lambda x: k.text_words(x, stop),
         _text._words_python, [t for t in texts if not t.isascii()], 1),
        ("answer cues of ASCII text (ascii_cues / regexes)", k.ascii_cues, lambda x: _text._flags(x, regexes),
         ascii_texts, 1),
        ("BLAKE2b-64 of 'w|' + word (blake2b64 / hashlib)", lambda w: k.blake2b64("w|" + w),
         lambda w: _wordkernels.blake2b64_python("w|" + w), words, 1),
        ("a new word's 3-5-gram hashes (gram_hashes / Python)", lambda w: k.gram_hashes(f"<{w}>", {}, (3, 4, 5)),
         lambda w: _wordkernels.gram_hashes_python(f"<{w}>", {}, (3, 4, 5)), words, 1),
        ("a text's terms from cached words, in batches of 1,000 texts (index_batch / Python)",
         lambda b: index_batch(k.index_batch, b, table, None),
         lambda b: index_batch(_wordkernels.index_batch_python, b, entries, None), batches, len(per_text) / len(batches)),
        ("a batch's document rows as JSON, in batches of 1,000 (rows_json / json's encoder)", k.rows_json, encode,
         doc_batches, len(docs) / len(doc_batches)),
    ]:
        t_fast = best(lambda: [fast(x) for x in items], repeat)
        t_slow = best(lambda: [slow(x) for x in items], repeat)
        n = len(items) * per
        rows.append((name, t_fast / n, t_slow / n, round(n)))
    return rows


def index_batch(kernel, per_text: list, cache, miss) -> int:
    """kernel (either twin of index_batch) over per_text, into arrays with room for every word."""
    total = sum(map(len, per_text))
    known = _wordkernels.word_table_room({} if kernel is _wordkernels.index_batch_python else _wordkernels.word_table(16), total)
    return kernel(per_text, cache, miss, {}, known, np.empty(total, np.int64), np.empty(total, np.int32),
                  np.empty(len(per_text), np.int64))


def postings_rows(n: int, repeat: int) -> list[tuple[str, float, float]]:
    rng = np.random.default_rng(0)
    vocab = rng.integers(0, 2**63 - 1, max(n // 4, 1), dtype=np.int64)

    def out(m):
        return np.empty(m, np.int64), np.empty(m, np.int32), np.empty(m, np.float32)

    def sorted_run(i):
        run, o = (rng.choice(vocab, n), np.arange(i * n, (i + 1) * n, dtype=np.int32), np.ones(n, np.float32)), out(n)
        _kernels.sort_postings_numpy(*run, *o)
        return run, o
    run, _ = sorted_run(0)
    runs = [sorted_run(i)[1] for i in range(4)]
    k, merged = _kernels._speedups, out(4 * n)
    fast_sort = best(lambda: k.sort_postings(*run, *out(n)), repeat)
    fast_merge = best(lambda: k.merge_postings(runs, *merged), repeat)
    return [("sort_postings (compiled)", fast_sort, fast_sort),
            ("numpy twin (stable argsort, three gathers)",
             best(lambda: _kernels.sort_postings_numpy(*run, *out(n)), repeat), fast_sort),
            (f"merge_postings of four runs of {n:,} (compiled)", fast_merge, fast_merge),
            ("numpy twin (stable argsort of them all, three gathers)",
             best(lambda: _kernels.merge_postings_numpy(runs, *merged), repeat), fast_merge)]


def to_half_rows(rows: int, repeat: int) -> list[tuple[str, float, float]]:
    x = np.random.default_rng(0).standard_normal((rows, 384)).astype(np.float32)
    fast = best(lambda: _kernels.to_half(x), repeat)
    return [("to_half (F16C)", fast, fast), ("numpy astype(float16)", best(lambda: x.astype(np.float16), repeat), fast)]


def growth_rows(rows: int, repeat: int) -> list[tuple[str, float, float]]:
    batch = np.random.default_rng(0).standard_normal((1000, 384)).astype(np.float16)

    class NumpyZeros(Column):
        def _reserve(self, need, slack=None):
            if need > len(self._data):
                grown = np.zeros((max(need, 2 * len(self._data)), self.width), self.dtype)
                grown[: self.size] = self._data[: self.size]
                self._data = grown

    class NumpyFilled(Column):
        def _reserve(self, need, slack=None):
            if need > len(self._data):
                grown = np.empty((max(need, 2 * len(self._data)), self.width), self.dtype)
                grown[: self.size] = self._data[: self.size]
                grown[self.size:] = self.fill
                self._data = grown

    def grow(kind) -> float:
        times = []
        for _ in range(repeat):
            col, t = kind(np.float16, width=384), time.perf_counter()
            for _ in range(rows // 1000):
                col.extend(batch)
            times.append(time.perf_counter() - t)
            del col
        return float(np.median(times))
    ours = grow(Column)
    return [("Column (_pages: private mappings from 4 MB)", ours, ours),
            ("numpy's allocator (np.zeros)", grow(NumpyZeros), ours),
            ("numpy's allocator, np.empty + the spare rows filled", grow(NumpyFilled), ours)]


def ms_table(title: str, what: str, base: str, rows) -> None:
    """A section of (name, seconds, the baseline's seconds) rows: milliseconds and the ratio."""
    print(f"## {title}\n\n| {what} | ms | / {base} |\n|---|---:|---:|")
    for name, t, ref in rows:
        print(f"| {name} | {t * 1e3:.2f} | {t / ref:.2f}× |")
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=152_000, help="float16 rows scanned (default 152,000)")
    ap.add_argument("--scores", type=int, default=1_525_000, help="lexical scores to select from")
    ap.add_argument("--postings", type=int, default=24_000, help="postings a run (a 1,000-memory write: ~24,000)")
    ap.add_argument("--texts", type=int, default=20_000, help="synthetic memories for the text kernels")
    ap.add_argument("--repeat", type=int, default=7, help="runs per measurement, the best is kept")
    ap.add_argument("--quick", action="store_true", help="5,000 rows, 20,000 scores, 2,000 postings, 500 texts, 2 runs")
    a = ap.parse_args()
    if a.quick:
        a.rows, a.scores, a.postings, a.texts, a.repeat = 5_000, 20_000, 2_000, 500, 2
    if not _kernels.COMPILED:
        sys.exit("the _speedups extension is not built (or IPY_MEMORY_PURE_PYTHON is set): nothing to compare")
    print(f"# ipy_memory kernels, {time.strftime('%Y-%m-%d %H:%M')}; {os.cpu_count()} cores, "
          f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, numpy {np.__version__}\n")
    ms_table(f"Exact scan of {a.rows:,} float16 rows (384 dims), one query", "scan", "half_dots",
             scan_rows(a.rows, a.repeat))
    ms_table(f"Cold scan of {a.rows:,} snapshot rows with their CRC check, parts of 8,192", "scan + check",
             "half_dots_crc", checked_scan_rows(a.rows, a.repeat))
    ms_table(f"int8 columns of {a.rows:,} float16 rows (384 dims), chunks of 8,192", "build", "quantize_rows",
             columns_rows(a.rows, a.repeat))
    ms_table("CRC-32 of snapshot bytes", "checksum", "crc32", crc_rows(a.repeat, (2 if a.quick else 32) << 20))
    ms_table(f"A first sparse query's piece checks: 64 columns of {a.rows:,} int8 rows in blocks of 65,536",
             "check", "crc32_rows", piece_check_rows(a.rows, a.repeat))
    ms_table(f"Top 200 of {a.scores:,} lexical scores, 13.5% non-zero", "selection", "largest_nonzero",
             selection_rows(a.scores, a.repeat))
    ms_table(f"Neighbour structure of {a.rows:,} slots, distances 1 and 2", "build", "neighbours",
             structure_rows(a.rows, a.repeat))
    if _kernels.FAST_HALF_DOTS:
        ms_table("A write's vectors to float16: 1,500 x 384 float32", "conversion", "to_half", to_half_rows(1500, a.repeat))
    ms_table(f"A {a.rows // 1000 * 1000:,} x 384 float16 column grown by 1,000 rows, median of {a.repeat}", "growth",
             "Column", growth_rows(a.rows, a.repeat))
    ms_table(f"Postings runs of {a.postings:,} postings", "kernel", "the compiled one", postings_rows(a.postings, a.repeat))
    print(f"## Text kernels, {a.texts:,} synthetic memories\n")
    print("| kernel | compiled, µs each | twin, µs each | twin / compiled | items |\n|---|---:|---:|---:|---:|")
    for name, fast, slow, count in text_rows(a.texts, a.repeat):
        print(f"| {name} | {fast * 1e6:.2f} | {slow * 1e6:.2f} | {slow / fast:.1f}× | {count:,} |")


if __name__ == "__main__":
    main()
