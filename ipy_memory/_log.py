"""The package's logger ("ipy_memory"), looked up at its first use: `logging` is ~2 ms of every
`import ipy_memory`, and most processes never log anything."""

from __future__ import annotations


class _Logger:
    """Forwards to logging.getLogger("ipy_memory"), importing logging then."""

    def __getattr__(self, name: str):
        import logging
        return getattr(logging.getLogger("ipy_memory"), name)


log = _Logger()
