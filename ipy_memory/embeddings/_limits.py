"""What one HTTP attempt may cost: time (a deadline) and memory (a size cap on the body).

httpx's timeouts bound each socket operation, not an exchange: a server that trickles its headers
or answers them just before the deadline and then stalls would keep an attempt open far longer than
``timeout``. `bind_deadline` wraps the client's connection pools in a network backend whose every
connect, read and write waits at most the time left before the current thread's `attempt_deadline`.

`read_body` reads a streamed response's body within a byte cap, counted on the wire and after
decompression, inflating gzip/deflate step by step so that a compression bomb is refused before its
output is in memory.
"""

from __future__ import annotations

import contextlib
import threading
import time
import zlib

import httpcore
import httpx

_local = threading.local()   # each attempt runs in one thread, and so do its socket operations

# Content-Encodings we ask for and inflate ourselves (zlib window bits); anything else is refused.
ACCEPT_ENCODING = "gzip, deflate"
_WBITS = {"gzip": 31, "x-gzip": 31, "deflate": 15}


class BodyRefused(Exception):
    """A response body over the cap, or in an encoding we cannot inflate within it."""


@contextlib.contextmanager
def attempt_deadline(deadline: float):
    """Within the block, socket operations of bound clients end by ``deadline`` (time.monotonic())."""
    previous = getattr(_local, "deadline", None)
    _local.deadline = deadline
    try:
        yield
    finally:
        _local.deadline = previous


def _bounded(timeout: float | None, expired: type[Exception]) -> float | None:
    deadline = getattr(_local, "deadline", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise expired("no complete answer by the attempt's deadline")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream):
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._stream.start_tls(
            ssl_context, server_hostname, _bounded(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str):
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, backend: httpcore.NetworkBackend):
        self._backend = backend

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        return _DeadlineStream(self._backend.connect_tcp(
            host, port, _bounded(timeout, httpcore.ConnectTimeout), local_address, socket_options))

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        return _DeadlineStream(self._backend.connect_unix_socket(
            path, _bounded(timeout, httpcore.ConnectTimeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def bind_deadline(client: httpx.Client) -> bool:
    """Put the deadline backend under every connection pool of ``client``; True when all have it.

    httpx has no public hook for a pool's network backend, hence the private attributes (checked, so
    a future layout only loses this binding: `read_body` still checks the deadline between chunks).
    A transport that is not an httpcore pool (httpx.MockTransport, a custom one) is left as it is."""
    transports = [getattr(client, "_transport", None), *getattr(client, "_mounts", {}).values()]
    bound = True
    for transport in filter(None, transports):
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if isinstance(backend, _DeadlineBackend):
            continue
        if isinstance(backend, httpcore.NetworkBackend):
            pool._network_backend = _DeadlineBackend(backend)
        else:
            bound = False
    return bound


def read_body(response: httpx.Response, cap: int, deadline: float) -> bytes:
    """The decoded body of a streamed ``response``: BodyRefused past ``cap`` bytes (on the wire or
    inflated), httpx.ReadTimeout past ``deadline``."""
    too_large = BodyRefused(f"response is larger than {cap:,} bytes (the most this batch can need)")
    if response.is_stream_consumed:   # a transport that answered in full (httpx.MockTransport)
        if len(response.content) > cap:
            raise too_large
        return response.content
    codings = [c.strip().lower() for c in response.headers.get("Content-Encoding", "").split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if len(codings) > 1 or (codings and codings[0] not in _WBITS):
        raise BodyRefused(f"unsupported Content-Encoding {response.headers['Content-Encoding']!r} "
                          f"(asked for {ACCEPT_ENCODING!r})")
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > cap:
        raise too_large
    inflater = _Inflater(codings[0]) if codings else None
    parts, on_wire, size = [], 0, 0
    for chunk in response.iter_raw():
        if time.monotonic() > deadline:   # for transports the deadline backend does not reach
            raise httpx.ReadTimeout("no complete answer by the deadline", request=response.request)
        on_wire += len(chunk)
        part = inflater.inflate(chunk, cap - size) if inflater else chunk
        size += len(part)
        if on_wire > cap or size > cap:
            raise too_large
        parts.append(part)
    if inflater and not inflater.finished:
        raise BodyRefused(f"the {codings[0]} body ends before its compressed stream does")
    return b"".join(parts)


class _Inflater:
    """gzip/deflate, inflated at most ``room + 1`` bytes at a time: never more than the cap allows."""

    def __init__(self, coding: str):
        self._zlib = zlib.decompressobj(_WBITS[coding])
        self._raw_fallback = coding == "deflate"   # some servers send raw deflate, without zlib's header

    @property
    def finished(self) -> bool:
        return self._zlib.eof

    def inflate(self, data: bytes, room: int) -> bytes:
        out = []
        while data and not self._zlib.eof:
            try:
                piece = self._zlib.decompress(data, room + 1)
            except zlib.error as exc:
                if not self._raw_fallback:
                    raise BodyRefused(f"the compressed body is corrupt ({exc})") from None
                self._zlib, self._raw_fallback = zlib.decompressobj(-15), False
                continue
            self._raw_fallback = False
            room -= len(piece)
            out.append(piece)
            if room < 0:   # over the cap: stop before inflating any further
                break
            data = self._zlib.unconsumed_tail
        return b"".join(out)
