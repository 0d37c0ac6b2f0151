"""One re-entrant lock per engine around every public call that touches the in-memory indexes.

SQLite serialises writers across processes, but the derived indexes live in this process's memory
and are not thread-safe: a recall abandoned by a timeout, or a background writer, must not read
them while another thread updates them.
"""

from __future__ import annotations

import functools


def locked(method):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return wrapper
