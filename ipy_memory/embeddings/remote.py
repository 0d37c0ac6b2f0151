"""Embedding providers reached over HTTP: OpenAI-compatible servers, DashScope and Ollama.

Settings come from the arguments, else the environment, else the defaults below:

    ============  ==========================  ===================================================
    setting       ipy_memory variable         provider's usual variable (fallback)
    ============  ==========================  ===================================================
    base URL      IPY_MEMORY_EMBED_URL        OPENAI_BASE_URL (openai only)
    model         IPY_MEMORY_EMBED_MODEL      -
    API key       IPY_MEMORY_API_KEY          OPENAI_API_KEY / DASHSCOPE_API_KEY
    ============  ==========================  ===================================================

(each ``IPY_MEMORY_*`` also accepts its older ``MEMORY_TREE_*`` spelling). Ollama needs no key and
is sent one only when ``api_key=`` is passed, so a key meant for a cloud service never goes to it.

The embedder's ``name`` is ``provider:model:dimension``. The dimension is known up front when
``dim=`` or ``dimensions=`` is given or the model is a known OpenAI one; otherwise it is learnt from
the first response, and reading ``dim`` or ``name`` before any call sends one short probe request.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import InvalidArgument
from . import env
from ._http import HttpEmbedder, check_positive_int

__all__ = ["OpenAIEmbedder", "DashScopeEmbedder", "OllamaEmbedder"]


def _setting(value, env_name: str, fallback_env: str | None, default):
    if value is not None:
        return value
    found = env(env_name)
    if found is None and fallback_env:
        found = os.environ.get(fallback_env) or None
    return default if found is None else found


class OpenAIEmbedder(HttpEmbedder):
    """Any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint (OpenAI, vLLM, LM Studio, ...).

    ``dimensions`` is sent to the API (text-embedding-3 models shorten their vectors to it);
    ``dim`` only states the dimension to expect, for servers that don't accept ``dimensions``.
    Other keyword arguments tune the transport: ``batch_size``, ``max_concurrency``, ``timeout``,
    ``connect_timeout``, ``max_attempts``, ``backoff``, ``max_backoff``, ``sleep``, ``transport``.
    """

    provider = "openai"
    endpoint = "/embeddings"
    default_base_url = "https://api.openai.com/v1"
    default_model = "text-embedding-3-small"
    default_batch_size = 256
    base_url_env: str | None = "OPENAI_BASE_URL"
    key_env = "OPENAI_API_KEY"
    # Native sizes of OpenAI's own models, so `dim` is known without a probe request.
    known_dims = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072,
                  "text-embedding-ada-002": 1536}

    def __init__(self, model: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 dimensions: int | None = None, dim: int | None = None, **transport: Any):
        if dimensions is not None:
            dimensions = check_positive_int(self.provider, "dimensions", dimensions)
            if dim is not None and dim != dimensions:
                raise InvalidArgument(f"{self.provider}: dim={dim!r} contradicts dimensions={dimensions!r}; "
                                      "pass only dimensions=")
            dim = dimensions
        self.dimensions = dimensions
        model = _setting(model, "EMBED_MODEL", None, self.default_model)
        base_url = _setting(base_url, "EMBED_URL", self.base_url_env, self.default_base_url)
        api_key = _setting(api_key, "API_KEY", self.key_env, None)
        if dim is None and isinstance(base_url, str) and base_url.rstrip("/") == self.default_base_url:
            dim = self.known_dims.get(model) if isinstance(model, str) else None
        super().__init__(base_url=base_url, model=model, api_key=api_key, dim=dim, **transport)
        if not self._key and self.url.startswith(self.default_base_url):
            self.close()
            raise InvalidArgument(f"{self.provider}: no API key for {self.display_url}: {self._key_hint()}")

    def _key_hint(self) -> str:
        return f"pass api_key=... or set IPY_MEMORY_API_KEY or {self.key_env}"

    def _payload(self, texts: list[str]) -> dict:
        payload: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.dimensions is not None:
            payload["dimensions"] = self.dimensions
        return payload

    def _rows(self, body: Any, n: int, status: int) -> list:
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise self._bad("no 'data' list in the JSON body", status)
        if len(data) != n:
            raise self._bad(f"sent {n} texts, got {len(data)} embeddings", status)
        rows: list = [None] * n
        for pos, item in enumerate(data):
            if not isinstance(item, dict) or "embedding" not in item:
                raise self._bad(f"data[{pos}] has no 'embedding'", status)
            index = item.get("index", pos)  # the API may answer out of order; 'index' says whose it is
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n or rows[index] is not None:
                raise self._bad(f"data[{pos}].index {index!r} is out of range or repeated", status)
            vector = self._decode_vector(item["embedding"])
            if not isinstance(vector, list):
                raise self._bad(f"data[{pos}].embedding is not a list of numbers", status)
            rows[index] = vector
        return rows


class DashScopeEmbedder(OpenAIEmbedder):
    """Alibaba Cloud DashScope (Qwen) text-embedding-v3/v4 through its OpenAI-compatible endpoint.

    ``dimensions`` defaults to 1024 (both models' default) and is always sent, so the dimension is
    known up front. DashScope takes at most 10 texts per request, hence the batch size.
    """

    provider = "dashscope"
    default_base_url = "https://dashscope.aliyuncs.com/compatible-mode/v1"
    default_model = "text-embedding-v4"
    default_batch_size = 10
    base_url_env = None
    key_env = "DASHSCOPE_API_KEY"
    known_dims: dict[str, int] = {}

    def __init__(self, model: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 dimensions: int | None = None, dim: int | None = None, **transport: Any):
        if dimensions is None:
            dimensions = dim if dim is not None else 1024
        super().__init__(model, base_url=base_url, api_key=api_key, dimensions=dimensions, dim=dim, **transport)


class OllamaEmbedder(HttpEmbedder):
    """A local Ollama server's ``POST {base_url}/api/embed`` (``ollama pull <model>`` first).

    ``dim`` states the dimension to expect; without it the first response (or a probe) tells.
    The first call can be slow while Ollama loads the model, hence the generous ``timeout``.
    """

    provider = "ollama"
    endpoint = "/api/embed"
    default_base_url = "http://127.0.0.1:11434"
    default_model = "nomic-embed-text"
    default_batch_size = 32

    def __init__(self, model: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 dim: int | None = None, **transport: Any):
        transport.setdefault("timeout", 120.0)
        super().__init__(base_url=_setting(base_url, "EMBED_URL", None, self.default_base_url),
                         model=_setting(model, "EMBED_MODEL", None, self.default_model),
                         api_key=api_key, dim=dim, **transport)

    def _payload(self, texts: list[str]) -> dict:
        return {"model": self.model, "input": texts, "truncate": True}

    def _rows(self, body: Any, n: int, status: int) -> list:
        rows = body.get("embeddings") if isinstance(body, dict) else None
        if not isinstance(rows, list):
            raise self._bad("no 'embeddings' list in the JSON body", status)
        if len(rows) != n:
            raise self._bad(f"sent {n} texts, got {len(rows)} embeddings", status)
        return rows
