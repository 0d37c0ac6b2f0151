"""CRC-32 (the zip/zlib polynomial) of large buffers on several threads.

zlib releases the GIL while it checksums, but a zip member has one CRC over all its bytes, and
Python's zlib module cannot combine the CRCs of two halves (zlib's C `crc32_combine` is not
exposed). Combining needs no data, only polynomial arithmetic modulo the CRC polynomial over GF(2):
crc(a + b) = crc(a) * x^(8 * len(b)) + crc(b), with the powers of x kept in a table of squares, so
a combination costs a few hundred integer operations. A 117 MB vector snapshot is then checked in
two halves at once (100k memories: 41 -> ~23 ms here). The checksum itself is `_kernels.crc32`:
zlib's, or the compiled one, the same function 6-8 times as fast (benchmarks/kernels.py), which
also releases the GIL.
"""

from __future__ import annotations

import threading

from ._kernels import crc32 as _crc32
from ._threads import Pieces

_POLY = 0xEDB88320                  # bit-reflected, as zlib computes it: bit 31 is x^0


def _mul(a: int, b: int) -> int:
    """a * b modulo the CRC polynomial (reflected bit order)."""
    product, bit = 0, 1 << 31
    while a:
        if a & bit:
            product ^= b
            a ^= bit
        bit >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return product


_SQUARES = [1 << 30]                # x^(2^k) modulo the polynomial, k = 0..31 (x^1 is bit 30)
for _ in range(31):
    _SQUARES.append(_mul(_SQUARES[-1], _SQUARES[-1]))


def _x_to_the_8n(n: int) -> int:
    """x^(8n) modulo the polynomial: the shift that n bytes appended to a message apply to its CRC."""
    power, k = 1 << 31, 3           # x^0; 8n = n * 2^3
    while n:
        if n & 1:
            power = _mul(_SQUARES[k & 31], power)     # x^(2^k) repeats with period dividing 2^32 - 1
        n >>= 1
        k += 1
    return power


def combine(crc_a: int, crc_b: int, len_b: int) -> int:
    """The CRC-32 of a + b from the CRC-32 of a, that of b and the length of b."""
    return _mul(_x_to_the_8n(len_b), crc_a) ^ crc_b


class CrcJob(Pieces):
    """The CRC-32s of several buffers, cut in pieces that any number of threads take in turn:
    `work()` on a helper thread, and `result()` on the thread that needs them, which takes pieces
    too before it waits for the last one (nothing waits while work is left). `layouts[i] = (head,
    step)` cuts buffer i at `head` and then every `step` bytes (else every `piece` bytes), so that a
    thread that has just read a piece's bytes for its own ends can `offer` to check it then, from
    the cache."""

    def __init__(self, buffers: list, piece: int, layouts: dict | None = None):
        self.lengths, self.pieces = [], []           # (buffer index, piece), in order
        self._at: dict[tuple[int, int], int] = {}    # (buffer index, offset) -> piece
        for i, b in enumerate(buffers):
            b = memoryview(b)
            b = b.cast("B") if b.nbytes else memoryview(b"")     # bytes, to cut at byte offsets
            self.lengths.append(len(b))
            head, step = (layouts or {}).get(i, (0, piece))
            cuts = ([0] if head else []) + list(range(head, len(b), max(step, 1)))
            for at, end in zip(cuts, cuts[1:] + [len(b)]):
                self._at[(i, at)] = len(self.pieces)
                self.pieces.append((i, b[at:end]))
        self.crcs: list[int | None] = [None] * len(self.pieces)
        super().__init__(len(self.pieces))

    def work(self) -> None:
        while (k := self._take()) is not None:
            self.finish(k)

    def offer(self, i: int, at: int) -> None:
        """Check the piece of buffer i that starts at byte `at` now, if there is one and no thread
        has taken it (never waits: a lock held elsewhere leaves the piece to the others)."""
        k = self.take(i, at)
        if k is not None:
            self.finish(k)

    def take(self, i: int, at: int, size: int | None = None) -> int | None:
        """The piece of buffer i that starts at byte `at` (and is `size` bytes long), taken for the
        caller, who then gives its CRC to `provide` (or has `finish` compute it), if there is one
        and no thread has taken it (never waits)."""
        k = self._at.get((i, at))
        if k is None or (size is not None and len(self.pieces[k][1]) != size) or not self._claim(k):
            return None
        return k

    def provide(self, k: int, crc: int) -> None:
        """The CRC of piece k (taken), computed by the caller as it read the piece's bytes."""
        self.crcs[k] = crc
        self._finish_one()

    def finish(self, k: int) -> None:
        self.provide(k, _crc32(self.pieces[k][1]))

    def result(self) -> list[int]:
        self.work()
        self.wait()
        out: list[int | None] = [None] * len(self.lengths)
        for (i, piece), crc in zip(self.pieces, self.crcs):
            out[i] = crc if out[i] is None else combine(out[i], crc, len(piece))
        return [0 if c is None else c for c in out]


def crc32_many(buffers: list, threads: int, split: int = 8 << 20) -> list[int]:
    """zlib.crc32 of each buffer, buffers of `split` bytes or more cut in `threads` pieces, all of
    the pieces checksummed on `threads` threads."""
    if threads < 2:
        return [_crc32(b) for b in buffers]
    longest = max((memoryview(b).nbytes for b in buffers), default=0)
    job = CrcJob(buffers, piece=max(-(-longest // threads), 1) if longest >= split else max(longest, 1))
    helpers = [threading.Thread(target=job.work, daemon=True) for _ in range(min(threads, len(job.pieces)) - 1)]
    for t in helpers:
        t.start()
    try:
        return job.result()
    finally:
        for t in helpers:
            t.join()
