"""Exceptions raised by ipy_memory.

Every public call raises only these (besides KeyboardInterrupt and the like). Each also subclasses
the builtin a caller would naturally catch, so ``except ValueError`` keeps working::

    IpyMemoryError                 base class of everything below
    ├── InvalidArgument            (ValueError, TypeError) an argument has the wrong type, range or shape
    ├── NotFound                   (KeyError)   no memory, node or document with that id
    ├── StorageError               (OSError)    the database or data dir cannot be used
    │   └── ReadOnlyError                       a write was attempted on a read-only engine
    └── EmbeddingError             (RuntimeError) the embedder failed or returned bad vectors
        └── EmbedderMismatch                    the store was built with another embedder

A failed call leaves the store exactly as it was: writes happen in one SQLite transaction, and the
derived indexes are updated only after it commits.
"""

from __future__ import annotations

__all__ = [
    "IpyMemoryError",
    "InvalidArgument",
    "NotFound",
    "StorageError",
    "ReadOnlyError",
    "EmbeddingError",
    "EmbedderMismatch",
]


class IpyMemoryError(Exception):
    """Base class of every error ipy_memory raises on purpose."""


class InvalidArgument(IpyMemoryError, ValueError, TypeError):
    """An argument has the wrong type, range or shape; the message says what to pass."""


class NotFound(IpyMemoryError, KeyError):
    """No memory with that id (it never existed, was forgotten, or has expired)."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the plain message
        return str(self.args[0]) if self.args else "not found"


class StorageError(IpyMemoryError, OSError):
    """The data dir or the database cannot be used (damaged, not writable, not a directory, ...)."""


class ReadOnlyError(StorageError):
    """A write was attempted on an engine opened with ``read_only=True``."""


class EmbeddingError(IpyMemoryError, RuntimeError):
    """The embedder failed (network, HTTP status, bad response) or returned unusable vectors."""


class EmbedderMismatch(EmbeddingError):
    """The store was built with a different embedder (name or dimension)."""
