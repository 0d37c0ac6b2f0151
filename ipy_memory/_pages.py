"""Large long-lived buffers from the kernel's own zero pages, without numpy's huge-page advice.

numpy marks every allocation of 4 MB or more MADV_HUGEPAGE. Where transparent huge pages are
`madvise` and their defrag is `madvise` too (Ubuntu's defaults), the first touch of such memory can
stall on synchronous compaction when the kernel has no free huge page at hand (numpy#31590): on the
2-core VM of BENCHMARKS.md, copying a 97k x 384 float16 matrix into a fresh doubled buffer took
1.0-1.2 s with the advice and 40 ms without. numpy's switch for it (`NUMPY_MADVISE_HUGEPAGE`, or
`_set_madvise_hugepage`) is process-wide state that a library has no business changing, so the
buffers that live with the index come from a private anonymous mapping instead: zero-filled on first
touch, 4 kB pages, unmapped when the last view of them goes. They are the growing columns
(`_columns.py`), postings merge outputs, the word tables and the hashing embedder's feature arrays,
the int8 column-scan blocks, and the lexical Structure's per-slot arrays and their spare room.
A query's short-lived temporaries stay numpy's: freed memory is reused from the heap without new
faults, where fresh mappings would fault in every page of every query (1M memories: p50 16 -> 37 ms).
The price: where huge pages are free (a fresh process) numpy's allocator faults 512x less often and
grows a large column ~2x faster (benchmarks/kernels.py); inside a 100k bulk insert they were not, and
the mappings measured +24% memories/s (BENCHMARKS.md, Reading).
"""

from __future__ import annotations

import mmap
import sys

import numpy as np

# numpy's own threshold for the advice, which it gives on Linux only (elsewhere, and where mmap has
# no anonymous mappings, numpy's allocator is kept: None)
MAPPED_FROM = 1 << 22 if sys.platform.startswith("linux") and hasattr(mmap, "MAP_ANONYMOUS") else None


def zeros(shape, dtype) -> np.ndarray:
    """np.zeros(shape, dtype), from a private anonymous mapping when it is MAPPED_FROM bytes or more
    (on Linux)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    size = count * dtype.itemsize
    if MAPPED_FROM is None or size < MAPPED_FROM:
        return np.zeros(shape, dtype)
    pages = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return np.ndarray(shape, dtype, buffer=pages)


def copy(values: np.ndarray, dtype, extra: int = 0) -> np.ndarray:
    """values.astype(dtype) (a 1-d array) on such pages, followed by `extra` zeros."""
    out = zeros(len(values) + extra, dtype)
    out[: len(values)] = values
    return out
