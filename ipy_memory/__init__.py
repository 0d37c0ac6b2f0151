"""ipy_memory: long-term memory for Jupyter/IPython and the LLM agents that live in notebooks.

    from ipy_memory import MemoryEngine
    with MemoryEngine(project="demo") as mem:
        mem.remember("# Data\\nThe sales table lives in warehouse.sales_2024.")
        print(mem.recall("where is the sales table?").block)

In IPython / Jupyter: ``%load_ext ipy_memory``.
"""

from .config import Settings
from .embeddings import Embedder, HashEmbedder, get_embedder
from .engine import MemoryEngine
from .errors import (EmbedderMismatch, EmbeddingError, InvalidArgument, IpyMemoryError, NotFound, ReadOnlyError,
                     StorageError)
from .models import Hit, Memory, MemoryList, RecallResult, RememberResult, Stats

__version__ = "0.1.0"

__all__ = [
    "MemoryEngine",
    "Settings",
    "Embedder",
    "HashEmbedder",
    "get_embedder",
    "Hit",
    "Memory",
    "MemoryList",
    "RecallResult",
    "RememberResult",
    "Stats",
    "IpyMemoryError",
    "InvalidArgument",
    "NotFound",
    "StorageError",
    "ReadOnlyError",
    "EmbeddingError",
    "EmbedderMismatch",
    "__version__",
]


def load_ipython_extension(ipython):  # %load_ext ipy_memory
    from .magics import load_ipython_extension as _load
    _load(ipython)


def unload_ipython_extension(ipython):
    from .magics import unload_ipython_extension as _unload
    _unload(ipython)
