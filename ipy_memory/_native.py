"""usearch, imported at its first use, and never before onnxruntime when that is installed.

usearch's extension exports its static copy of libstdc++'s locale facets as GNU unique symbols; an
onnxruntime extension loaded after it binds to them and crashes the process (onnxruntime >= 1.23)
or mis-loads models (1.22). Loaded first, both work. So `import ipy_memory` puts a finder in front of
`sys.meta_path` that imports onnxruntime (when installed) just before anything, this package or the
user's own code, first imports usearch: a notebook that later loads a model of its own with
onnxruntime is protected, and a kernel that never searches vectors loads neither of them (importing
onnxruntime costs ~20 ms, usearch with its urllib and tqdm imports ~20-35 ms on this machine).
"""

from __future__ import annotations

import importlib.util
import sys


def usearch():
    """The `usearch.index` module (its first import loads onnxruntime first: `_OnnxruntimeFirst`)."""
    module = sys.modules.get("usearch.index")
    if module is None:
        import usearch.index as module
    return module


class _OnnxruntimeFirst:
    """A meta-path finder that finds nothing: it only imports onnxruntime before usearch's first import.

    It stays in `sys.meta_path` once it has fired (as a no-op): the import system iterates over that
    list while asking its finders, so removing an entry there would skip the next finder."""

    def __init__(self):
        self.fired = False

    def find_spec(self, name, path=None, target=None):
        if not self.fired and name == "usearch":
            self.fired = True
            preload_onnxruntime()
        return None


def install_import_order() -> None:
    """Make onnxruntime load before usearch, whoever imports usearch first (idempotent)."""
    if "usearch" in sys.modules or any(isinstance(f, _OnnxruntimeFirst) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _OnnxruntimeFirst())


def preload_onnxruntime() -> None:
    """Import onnxruntime now, before anything loads usearch, when the 'local' extra is installed."""
    if "onnxruntime" in sys.modules or "usearch.compiled" in sys.modules:
        return
    try:
        if importlib.util.find_spec("onnxruntime") is not None:
            import onnxruntime  # noqa: F401
    except Exception:  # a broken install must not break vector search; the 'local' preset will say why
        pass


install_import_order()


def exact_cosine(mat, queries, k: int, threads: int = 1):
    """usearch's exact (SIMD) cosine scan of `mat` for `queries`: its Matches / BatchMatches."""
    u = usearch()
    return u.search(mat, queries, k, u.MetricKind.Cos, exact=True, threads=threads)
