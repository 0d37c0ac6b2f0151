"""What one HTTP attempt may cost: time (a deadline).

httpx's timeouts bound each socket operation, not an exchange: a server that trickles its headers
or answers them just before the deadline and then stalls would keep an attempt open far longer than
``timeout``. `bind_deadline` wraps the client's connection pools in a network backend whose every
connect, read and write waits at most the time left before the current thread's `attempt_deadline`.
"""

from __future__ import annotations

import contextlib
import threading
import time

import httpcore
import httpx

_local = threading.local()   # each attempt runs in one thread, and so do its socket operations

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
    a future layout only loses this binding: the deadline is still checked between chunks).
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
