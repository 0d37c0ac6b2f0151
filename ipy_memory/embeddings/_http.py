"""Transport shared by the HTTP embedding providers (see remote.py).

One ``httpx.Client`` per embedder; texts are cut into batches that a small thread pool sends
concurrently; transient failures (connect errors, timeouts, 429, 5xx) are retried a bounded number
of times with exponential backoff and jitter, honouring ``Retry-After``; every response is checked
(well-formed JSON, one finite vector per input, the expected dimension) before it is used.
``timeout`` bounds each attempt as a whole, headers included (see _limits.py: httpx's own timeouts
are per read, so a server that trickles or stalls would otherwise hold a request open far longer), and
a response may be at most as large as its batch can need, also once decompressed.

Only the configured endpoint is contacted, and nothing else is sent. The API key must be printable
ASCII without spaces (it goes into a header); it is held in a `_Secret` whose repr is masked, and it is
scrubbed from every error message, also when a server echoes it escaped or URL-encoded.
"""

from __future__ import annotations

import base64
import email.utils
import json
import math
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any, Callable
from urllib.parse import quote, quote_plus

import httpx
import numpy as np

from .. import _validate
from ..errors import EmbeddingError, InvalidArgument, IpyMemoryError
from ._limits import ACCEPT_ENCODING, BodyRefused, attempt_deadline, bind_deadline, read_body
from .base import Embedder

# A response's size cap: JSON numbers take ~20 bytes, 32 leaves room for spacing; the slack covers
# the envelope (usage, ids) and error bodies. No batch may need more than the absolute cap.
_JSON_BYTES_PER_FLOAT = 32
_BYTES_PER_TEXT = 2048
_SLACK_BYTES = 2 << 20
_MAX_RESPONSE_BYTES = 256 << 20
_DIM_IF_UNKNOWN = 16384   # above any common embedding model's, until the first answer tells


_SHORT_KEY = 8


class _Secret:
    """An API key that never shows itself in a repr, a str or a traceback's locals."""

    __slots__ = ("value", "_forms", "_mask")

    def __init__(self, value: str | None):
        self.value = value or None
        # How a server or our own formatting may spell the key: escaped (repr, JSON, JSON with "\/"),
        # URL-encoded. Longest first, so a form is never half-replaced by a shorter one inside it.
        forms = {value, repr(value)[1:-1], json.dumps(value)[1:-1], json.dumps(value)[1:-1].replace("/", "\\/"),
                 quote(value, safe=""), quote(value), quote_plus(value)} if value else set()
        # A key this short is a local server's placeholder ("ollama", "lm-studio" is 9), no secret, and
        # the word may mean something else in a message ("ollama embeddings"): only "Bearer <key>" goes.
        prefix = "Bearer " if value and len(value) < _SHORT_KEY else ""
        self._forms = [prefix + f for f in sorted(forms, key=len, reverse=True)]
        self._mask = prefix + "***"

    def scrub(self, text: str) -> str:
        """``text`` with every spelling of the key replaced by ``***``."""
        for form in self._forms:
            text = text.replace(form, self._mask)
        return text

    def __repr__(self) -> str:
        return "<secret>" if self.value else "<none>"

    __str__ = __repr__

    def __bool__(self) -> bool:
        return self.value is not None


def check_positive_int(owner: str, name: str, value, *, maximum: int | None = None) -> int:
    if not _validate.is_integer(value) or value < 1 or (maximum and value > maximum):
        upper = f" and at most {maximum}" if maximum else ""
        raise InvalidArgument(f"{owner}: {name} must be an integer of at least 1{upper}, got {_validate.shown(value)}")
    return int(value)


def check_positive_float(owner: str, name: str, value) -> float:
    if not _validate.is_real(value) or not math.isfinite(value) or value <= 0:
        raise InvalidArgument(f"{owner}: {name} must be a positive number of seconds, got {_validate.shown(value)}")
    return float(value)


def check_api_key(owner: str, value) -> str | None:
    """The key without surrounding whitespace; it must be printable ASCII, as an HTTP header needs.
    The message never shows the key, not even in part."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgument(f"{owner}: api_key must be a string or None, got {type(value).__name__}")
    key = value.strip()
    if not all("!" <= c <= "~" for c in key):
        raise InvalidArgument(f"{owner}: api_key must be printable ASCII without spaces or control characters; "
                              "the key given has another character (not shown here: check for a stray "
                              "newline, a non-breaking space or a typographic quote)")
    return key or None


def check_text(owner: str, name: str, value, example: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"{owner}: {name} must be a non-empty string such as {example!r}, got {value!r}")
    return value.strip()


def _retry_after_seconds(value: str | None) -> float | None:
    """Parse a Retry-After header: delta-seconds, or an HTTP date."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - datetime.now(timezone.utc)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _retryable(status: int) -> bool:
    # 408/429 and server errors are transient; 501 (not implemented) will not change on retry.
    return status in (408, 429) or (500 <= status < 600 and status != 501)


class HttpEmbedder(Embedder):
    """Base of the HTTP providers: transport, batching, retries and response checks.

    Subclasses set ``provider``, ``endpoint`` and ``default_batch_size`` and implement
    ``_payload(texts)`` and ``_rows(body, n)``. ``dim`` is the dimension given by the caller, else
    learnt from the first response; reading ``dim`` (or ``name``, which contains it) before any
    call sends one short probe request to learn it.

    Blank texts are not sent (most APIs reject them); they embed to the zero vector.
    """

    provider = "http"
    endpoint = "/embeddings"
    default_batch_size = 64
    semantic = True

    def __init__(self, *, base_url: str, model: str, api_key: str | None = None, dim: int | None = None,
                 batch_size: int | None = None, max_concurrency: int = 4, timeout: float = 60.0,
                 connect_timeout: float = 10.0, max_attempts: int = 4, backoff: float = 0.5,
                 max_backoff: float = 30.0, sleep: Callable[[float], Any] = time.sleep,
                 transport: httpx.BaseTransport | None = None):
        owner = self.provider
        self.model = check_text(owner, "model", model, "text-embedding-3-small")
        self.url, self.display_url = self._endpoint_url(base_url)
        self._key = _Secret(check_api_key(owner, api_key))
        self._dim = None if dim is None else check_positive_int(owner, "dim", dim, maximum=65_536)
        self.batch_size = check_positive_int(
            owner, "batch_size", self.default_batch_size if batch_size is None else batch_size)
        self.max_concurrency = check_positive_int(owner, "max_concurrency", max_concurrency, maximum=32)
        self.max_attempts = check_positive_int(owner, "max_attempts", max_attempts, maximum=20)
        self.backoff = check_positive_float(owner, "backoff", backoff)
        self.max_backoff = check_positive_float(owner, "max_backoff", max_backoff)
        if not callable(sleep):
            raise InvalidArgument(f"{owner}: sleep must be a function taking seconds, like time.sleep")
        self._sleep = sleep
        self.timeout = check_positive_float(owner, "timeout", timeout)
        self.connect_timeout = check_positive_float(owner, "connect_timeout", connect_timeout)
        headers = {"Accept": "application/json", "Accept-Encoding": ACCEPT_ENCODING, "User-Agent": "ipy-memory"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key.value}"
        self._client = httpx.Client(
            timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
            headers=headers, transport=transport, follow_redirects=False)
        self._deadline_bound = bind_deadline(self._client)   # False only for a custom transport
        self._dim_lock = threading.Lock()

    # -- identity ---------------------------------------------------------------------------------

    @property
    def dim(self) -> int:
        if self._dim is None:
            with self._dim_lock:
                if self._dim is None:  # probe once; a concurrent embed() may have learnt it meanwhile
                    self._learn_dim(self._embed_batch(["dimension probe"]).shape[1])
        return self._dim

    @property
    def name(self) -> str:
        return f"{self.provider}:{self.model}:{self.dim}"

    def _failure_label(self) -> str:  # never probes: it names the embedder inside an error path
        return f"{self.provider}:{self.model}:{self._dim or '?'}"

    def __repr__(self) -> str:  # must not probe the network, and never shows the key
        return (f"<{type(self).__name__} {self.provider}:{self.model} dim={self._dim or '?'} "
                f"url={self.display_url}>")

    def close(self) -> None:
        self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- subclass hooks ---------------------------------------------------------------------------

    def _payload(self, texts: list[str]) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def _rows(self, body: Any, n: int, status: int) -> list:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- embedding --------------------------------------------------------------------------------

    def _embed(self, texts: list[str]) -> np.ndarray:
        live = [i for i, t in enumerate(texts) if t.strip()]
        batches = [live[i:i + self.batch_size] for i in range(0, len(live), self.batch_size)]
        results = self._map(lambda idx: self._embed_batch([texts[i] for i in idx]), batches)
        for r in results:
            self._learn_dim(r.shape[1])
        out = np.zeros((len(texts), self.dim), np.float32)
        for idx, r in zip(batches, results):
            out[idx] = r
        return out

    def _map(self, fn, batches: list) -> list:
        if len(batches) <= 1 or self.max_concurrency == 1:
            return [fn(b) for b in batches]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(batches)),
                                thread_name_prefix=f"ipy-memory-{self.provider}") as pool:
            futures = [pool.submit(fn, b) for b in batches]
            try:
                return [f.result() for f in futures]
            except BaseException:
                for f in futures:  # don't send the batches still queued once one has failed
                    f.cancel()
                raise

    def _learn_dim(self, d: int) -> None:
        if self._dim is None:
            self._dim = d
        elif d != self._dim:
            raise self._error(f"expected dimension {self._dim}, got {d}", 200)

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        try:
            return self._checked_batch(texts)
        except IpyMemoryError:
            raise
        except Exception as exc:  # e.g. from a custom transport: its text may hold the key
            failure = f"{type(exc).__name__}: {exc}"
        # raised outside the except block, so the unscrubbed original is not chained to it
        raise self._error(f"embedding failed: {failure}")

    def _checked_batch(self, texts: list[str]) -> np.ndarray:
        body, status = self._post(self._payload(texts), self._response_cap(len(texts)))
        rows = self._rows(body, len(texts), status)
        try:
            arr = np.asarray(rows)
        except ValueError:
            raise self._error("vectors of different lengths in the response", status) from None
        if arr.dtype.kind not in "fi" or arr.ndim != 2 or arr.shape[0] != len(texts):
            raise self._error(f"expected {len(texts)} numeric vectors, got an array of shape {arr.shape} "
                              f"and type {arr.dtype}", status)
        if self._dim is not None and arr.shape[1] != self._dim:
            raise self._error(f"expected dimension {self._dim}, got {arr.shape[1]}", status)
        if arr.shape[1] == 0:
            raise self._error("the response has empty vectors", status)
        arr = arr.astype(np.float32)
        if not np.isfinite(arr).all():
            raise self._error("the response has NaN or infinite values", status)
        return arr

    @staticmethod
    def _decode_vector(value):
        """A vector as a list of numbers, or as base64 of little-endian float32 (encoding_format=base64)."""
        if isinstance(value, str):
            try:
                return np.frombuffer(base64.b64decode(value, validate=True), dtype="<f4").tolist()
            except ValueError:
                return None
        return value

    # -- transport --------------------------------------------------------------------------------

    def _endpoint_url(self, base_url) -> tuple[str, str]:
        example = getattr(self, "default_base_url", "https://api.example.com/v1")
        base = check_text(self.provider, "base_url", base_url, example)
        try:     # the endpoint goes on the path: a query (Azure's ?api-version=...) stays the query
            url = httpx.URL(base)
            path = url.path.rstrip("/")
            url = url.copy_with(path=path if path.endswith(self.endpoint) else path + self.endpoint)
        except (httpx.InvalidURL, TypeError, ValueError):
            url = None
        if url is None or url.scheme not in ("http", "https") or not url.host:
            raise InvalidArgument(f"{self.provider}: base_url must be an http(s) URL such as {example!r}, "
                                  f"got {base_url!r}")
        return str(url), str(url.copy_with(userinfo=b"", query=None))  # no credentials in messages

    def _response_cap(self, n_texts: int) -> int:
        per_text = (self._dim or _DIM_IF_UNKNOWN) * _JSON_BYTES_PER_FLOAT + _BYTES_PER_TEXT
        return min(_MAX_RESPONSE_BYTES, _SLACK_BYTES + n_texts * per_text)

    def _post(self, payload: dict, cap: int) -> tuple[Any, int]:
        """POST ``payload`` as JSON; return (decoded body, status), retrying transient failures.
        A body over ``cap`` bytes is refused, not retried (the same server would send it again)."""
        problem = "no attempt made"
        for attempt in range(1, self.max_attempts + 1):
            retry_after = None
            try:
                response = self._post_once(payload, cap)
            except BodyRefused as exc:
                raise self._error(str(exc)) from None
            except httpx.ConnectTimeout:
                problem = f"timed out connecting (connect_timeout={self.connect_timeout:g} s)"
            except httpx.TimeoutException:
                problem = f"timed out: no complete answer within timeout={self.timeout:g} s"
            except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                problem = f"connection failed ({type(exc).__name__}: {exc})"
            except httpx.HTTPError as exc:  # e.g. an unsupported protocol: retrying cannot help
                raise self._error(f"request failed ({type(exc).__name__}: {exc})") from None
            else:
                status = response.status_code
                if 200 <= status < 300:
                    try:
                        return response.json(), status
                    except (ValueError, RecursionError):  # nested past the recursion limit
                        raise self._error(f"response is not valid JSON: {self._snippet(response)}", status) from None
                problem = f"HTTP {status}: {self._detail(response)}"
                if not _retryable(status):
                    raise self._error(problem + self._hint(status))
                retry_after = _retry_after_seconds(response.headers.get("Retry-After"))
            if attempt < self.max_attempts:
                self._sleep(self._delay(attempt, retry_after))
        raise self._error(f"gave up after {self.max_attempts} attempt(s); last: {problem}")

    def _post_once(self, payload: dict, cap: int) -> httpx.Response:
        """One attempt, whose whole answer (headers included) must arrive by ``timeout`` seconds
        after it starts, and whose body may be at most ``cap`` bytes, on the wire and decoded."""
        deadline = time.monotonic() + self.timeout
        with attempt_deadline(deadline), self._client.stream("POST", self.url, json=payload) as streamed:
            body = read_body(streamed, cap, deadline)   # leaving the block early closes the connection
            headers = [(k, v) for k, v in streamed.headers.multi_items()
                       if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
            return httpx.Response(streamed.status_code, headers=headers, content=body, request=streamed.request)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:  # the server said when: do as told, within our cap
            return min(retry_after, self.max_backoff)
        # exponential backoff with jitter, so concurrent batches don't retry in lockstep
        return min(self.max_backoff, self.backoff * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)

    def _hint(self, status: int) -> str:
        if status in (401, 403):
            return f" (check the API key: {self._key_hint()})"
        if status == 404:
            return " (check the base URL and the model name)"
        return ""

    def _key_hint(self) -> str:
        return "pass api_key=... or set IPY_MEMORY_API_KEY"

    def _snippet(self, response: httpx.Response, limit: int = 200) -> str:
        text = " ".join(self._key.scrub(response.text).split())  # scrubbed before repr() escapes it
        return repr(text[:limit] + ("..." if len(text) > limit else ""))

    def _detail(self, response: httpx.Response) -> str:
        """The error message out of an OpenAI/DashScope ({"error": {"message"}}) or Ollama
        ({"error": "..."}) error body, else a short snippet of the body."""
        try:
            err = response.json().get("error")
            msg = err.get("message") if isinstance(err, dict) else err
            if isinstance(msg, str) and msg.strip():
                return " ".join(self._key.scrub(msg).split())[:300]
        except (ValueError, AttributeError, RecursionError):
            pass
        return self._snippet(response) if response.content else "(empty body)"

    def _error(self, what: str, status: int | None = None) -> EmbeddingError:
        where = f"POST {self.display_url}" + (f" (HTTP {status})" if status is not None else "")
        message = f"{self.provider} embeddings ({self.model}): {where}: {what}"
        # a server may echo the key back, in any spelling; it must never reach a message
        return EmbeddingError(self._key.scrub(message))

    def _bad(self, what: str, status: int) -> EmbeddingError:
        return self._error(f"unexpected response: {what}", status)
