"""The cyclic garbage collector paused for the length of a bulk write.

A batch of 1,000 memories allocates tens of thousands of container objects (rows, results,
prepared sections), so the collector ran about 15 young-generation passes a batch, and now and
then a full one: 6.5 us a memory, 5.6% of a 100k bulk insert. They never found anything: the write
path makes no reference cycles (tests/test_gcpause.py checks a varied batch), so what it lets go,
reference counting frees at once. Pauses nest and may overlap across threads; the collector is
switched back on when the last one ends, and only if it was on when the first began (a program
that keeps it off keeps it off).
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

_lock = threading.Lock()
_active = 0            # pauses under way, in any thread
_was_enabled = False   # the collector's state when the first of them began


@contextmanager
def paused() -> Iterator[None]:
    global _active, _was_enabled
    with _lock:
        if not _active:
            _was_enabled = gc.isenabled()
            gc.disable()
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if not _active and _was_enabled:
                gc.enable()
