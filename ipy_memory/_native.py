"""usearch, imported at its first use, and never before onnxruntime when that is installed.

usearch's extension exports its static copy of libstdc++'s locale facets as GNU unique symbols; an
onnxruntime extension loaded after it binds to them and crashes the process (onnxruntime >= 1.23)
or mis-loads models (1.22). Loaded first, both work. So `import ipy_memory` imports onnxruntime when
it is installed (also protecting a notebook that imports it later for a model of its own), while
usearch waits for the first vector search (with its urllib and tqdm imports, ~20-35 ms of
`import ipy_memory` on this machine): a kernel that recalls with the default settings never loads it.
"""

from __future__ import annotations

import importlib.util
import sys


def usearch():
    """The `usearch.index` module."""
    module = sys.modules.get("usearch.index")
    if module is None:
        preload_onnxruntime()
        import usearch.index as module
    return module


def preload_onnxruntime() -> None:
    """Import onnxruntime now, before anything loads usearch, when the 'local' extra is installed."""
    if "onnxruntime" in sys.modules or "usearch.compiled" in sys.modules:
        return
    try:
        if importlib.util.find_spec("onnxruntime") is not None:
            import onnxruntime  # noqa: F401
    except Exception:  # a broken install must not break vector search; the 'local' preset will say why
        pass


def exact_cosine(mat, queries, k: int, threads: int = 1):
    """usearch's exact (SIMD) cosine scan of `mat` for `queries`: its Matches / BatchMatches."""
    u = usearch()
    return u.search(mat, queries, k, u.MetricKind.Cos, exact=True, threads=threads)
