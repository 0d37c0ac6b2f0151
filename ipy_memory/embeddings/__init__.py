"""Embedding providers behind one interface, chosen by preset name, argument or environment.

``get_embedder()`` with no argument reads ``IPY_MEMORY_EMBED_PRESET`` (alias
``MEMORY_TREE_EMBED_PRESET``) and falls back to the offline ``hash`` preset.
"""

from __future__ import annotations

import os
from typing import Callable

from ..errors import InvalidArgument
from .base import Embedder
from .hashing import HashEmbedder

__all__ = ["Embedder", "HashEmbedder", "get_embedder", "register_preset", "PRESETS", "env"]

PRESETS: dict[str, Callable[..., Embedder]] = {}


def register_preset(name: str, factory: Callable[..., Embedder]) -> None:
    PRESETS[name] = factory


def env(name: str, default: str | None = None) -> str | None:
    """Read IPY_MEMORY_<name>, accepting the older MEMORY_TREE_<name> spelling as an alias."""
    for prefix in ("IPY_MEMORY_", "MEMORY_TREE_"):
        value = os.environ.get(prefix + name)
        if value:
            return value
    return default


def get_embedder(preset: str | Embedder | None = None, **options) -> Embedder:
    """Return an embedder: an `Embedder` instance as is, else the named preset, else the env preset."""
    if isinstance(preset, Embedder):
        return preset
    if preset is None:
        preset = env("EMBED_PRESET", "hash")
    if not isinstance(preset, str) or preset not in PRESETS:
        raise InvalidArgument(f"unknown embedder preset {preset!r}: use one of {sorted(PRESETS)} "
                              "or pass an Embedder instance")
    return PRESETS[preset](**options)


register_preset("hash", lambda dim=384, **_: HashEmbedder(dim=dim))
