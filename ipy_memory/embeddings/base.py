"""The `Embedder` interface every provider implements, and the checks every result passes."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import EmbeddingError, InvalidArgument, IpyMemoryError


class Embedder:
    """Turns texts into L2-normalised float32 vectors of a fixed dimension.

    Subclasses set ``name`` (recorded in the store; a different name means different vectors) and
    ``dim``, and implement ``_embed``. ``embed_query`` exists for models that embed queries and
    passages differently; by default it is ``embed``.
    """

    name: str = "embedder"
    dim: int = 0
    #: True when the vectors are good enough to rank by (a real model); the hashing embedder is
    #: only a lexical echo, so recall gives it a small weight by default (see Settings).
    semantic: bool = False
    #: True when embedding a batch costs about what storing it does (no network, no model): the
    #: engine may then embed a large forced batch while it holds the write lock, beside the
    #: documents' insert (a remote or model embedder must never hold it that long).
    cheap: bool = False

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = _check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        try:
            vecs = self._embed(texts)
        except IpyMemoryError:
            raise
        except Exception as exc:     # a custom embedder's own failure: still one of our documented errors
            raise EmbeddingError(f"{self._failure_label()}: embedding failed: {type(exc).__name__}: {exc}") from exc
        return self._validated(vecs, len(texts))

    def _failure_label(self) -> str:
        """The embedder's name in an error about a failed call. An override must not do I/O (an
        HTTP embedder's ``name`` may have to ask its server for the dimension)."""
        return self.name

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]

    def _embed(self, texts: list[str]) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:
        """Release clients or sessions; the default has nothing to release."""

    def _validated(self, vecs, n: int) -> np.ndarray:
        try:
            arr = np.asarray(vecs, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise EmbeddingError(f"{self.name}: embedder returned something that is not a matrix") from exc
        if arr.ndim != 2 or arr.shape[0] != n:
            raise EmbeddingError(f"{self.name}: expected {n} vectors, got shape {arr.shape}")
        if arr.shape[1] != self.dim:
            raise EmbeddingError(f"{self.name}: expected dimension {self.dim}, got {arr.shape[1]}")
        if not np.isfinite(arr).all():
            raise EmbeddingError(f"{self.name}: embedder returned NaN or infinite values")
        norms = np.linalg.norm(arr, axis=1, keepdims=True)
        return np.divide(arr, norms, out=np.zeros_like(arr), where=norms > 0)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} dim={self.dim}>"


def _check_texts(texts) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise InvalidArgument("embed() takes a list of strings, e.g. embed(['some text'])")
    for t in texts:
        if not isinstance(t, str):
            raise InvalidArgument(f"embed() takes strings, got {type(t).__name__}")
    return list(texts)


class StandIn(Embedder):
    """The embedder a store records, by name and dimension only, for work that embeds nothing (list,
    stats, backup, forget): opened with ``embedder="recorded"``, a store built on a server or with a key
    opens without either. Embedding through it raises EmbeddingError."""

    def __init__(self, name: str, dim: int):
        self.name, self.dim = name, dim
        self.semantic = not name.startswith("hash-")       # every preset but the hashing one is a model

    def _embed(self, texts: list[str]) -> np.ndarray:
        raise EmbeddingError(f"{self.name}: this engine was opened with embedder='recorded', which embeds "
                             "nothing: open the store with its embedder to store or recall")

