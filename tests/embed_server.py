"""A real embeddings HTTP server for tests: stdlib http.server in a thread on 127.0.0.1 (ephemeral port).

It answers like OpenAI (``POST /v1/embeddings``), DashScope's compatible mode
(``POST /compatible-mode/v1/embeddings``) and Ollama (``POST /api/embed``). Vectors are a pure
function of the text (``EmbedServer.vector``), so a test can check that every text got its own.

Misbehaviour is scripted per request: ``server.script("429", "500", "ok")`` makes the next three
requests answer 429, then 500, then normally; later requests use ``server.default``. Behaviours:

    ok           a correct answer
    429          Too Many Requests with ``Retry-After: server.retry_after``
    500 / 503    a server error (OpenAI-style error body)
    400 / 401    a client error; 401 echoes the bearer token in its message, like some servers do
    401_mangled  401 echoing the token transformed: URL-encoded, JSON-escaped and as a Python repr
    500_echo     a server error whose plain-text (not JSON) body contains the bearer token
    slow         sleeps ``server.slow_seconds`` first (longer than the client's read timeout)
    slowish      sleeps ``server.slowish_seconds`` then answers (to observe concurrency)
    trickle      a correct answer sent one byte every ``server.trickle_seconds`` (each read is quick)
    trickle_head the status line and headers sent one byte every ``server.trickle_seconds``
    stall        headers after ``server.stall_delay`` seconds, one byte of the body, then a pause of
                 ``server.stall_seconds`` (every read but the last is quick)
    gzip / deflate  a correct answer, compressed (Content-Encoding)
    gzip_bomb    gzip of valid JSON padded with ``server.bomb_mb`` MB of spaces (small on the wire)
    huge         a correct answer padded with ``server.bomb_mb`` MB of spaces, without Content-Length
    deep         a 200 whose body is JSON nested deeper than Python's recursion limit
    400_deep     a 400 whose body is JSON nested deeper than Python's recursion limit
    drop         closes the connection without answering
    wrong_dim    vectors one element short
    nan / inf    a NaN / infinite value in the first vector
    wrong_count  one vector fewer than texts
    malformed    a body that is not JSON
    shuffled     the OpenAI ``data`` list in reverse order (``index`` still right)
    bad_index    two items with the same ``index``
    strings      numbers sent as strings
    no_data      valid JSON without the expected list
    base64       OpenAI ``embedding`` as base64 float32 (what the openai client asks for)
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
import urllib.parse
import zlib
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

OPENAI_PATH = "/v1/embeddings"
DASHSCOPE_PATH = "/compatible-mode/v1/embeddings"
OLLAMA_PATH = "/api/embed"
TRICKLE = "x-test-trickle-seconds"   # a header the handler consumes: send the body slowly
TRICKLE_HEAD = "x-test-trickle-head"  # ... send the status line and headers slowly
STALL = "x-test-stall"                # ... "delay,pause": late headers, then a pause inside the body
NO_LENGTH = "x-test-no-length"        # ... no Content-Length: the body ends when the connection closes
DEEP = b"[" * 100_000 + b"]" * 100_000


class EmbedServer:
    def __init__(self, dim: int = 8):
        self.dim = dim
        self.default = "ok"
        self.retry_after = "0"
        self.slow_seconds = 1.0
        self.slowish_seconds = 0.15
        self.trickle_seconds = 0.1
        self.stall_delay = 0.0
        self.stall_seconds = 3.0
        self.bomb_mb = 64
        self.requests: list[dict] = []    # one {"path", "query", "headers", "json"} per request received
        self.in_flight = 0
        self.max_in_flight = 0
        self._plan: deque[str] = deque()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    # -- control ------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def script(self, *behaviours: str) -> None:
        with self._lock:
            self._plan.extend(behaviours)

    def start(self) -> "EmbedServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def vector(self, text: str, dim: int | None = None) -> list[float]:
        """The server's (unnormalised) embedding of ``text``: deterministic, different per text."""
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        return np.random.default_rng(seed).uniform(-1, 1, dim or self.dim).round(6).tolist()

    def _next(self) -> str:
        with self._lock:
            return self._plan.popleft() if self._plan else self.default

    # -- answers ------------------------------------------------------------------------------------

    def answer(self, path: str, headers: dict, body: dict, query: str = "") -> tuple[int, dict, bytes] | None:
        behaviour = self._next()
        with self._lock:
            self.requests.append({"path": path, "query": query, "headers": headers, "json": body,
                                  "behaviour": behaviour})
        if behaviour == "drop":
            return None
        if behaviour == "slow":
            time.sleep(self.slow_seconds)
        if behaviour == "slowish":
            time.sleep(self.slowish_seconds)
        if behaviour == "429":
            return 429, {"Retry-After": self.retry_after}, _error_body("Rate limit reached", "rate_limit")
        if behaviour in ("500", "503"):
            return int(behaviour), {}, _error_body("The server had an error", "server_error")
        if behaviour == "400":
            return 400, {}, _error_body("'$.input' is invalid", "invalid_request_error")
        if behaviour == "401":
            token = headers.get("authorization", "")
            return 401, {}, _error_body(f"Incorrect API key provided: {token.removeprefix('Bearer ')}",
                                        "invalid_api_key")
        if behaviour in ("401_mangled", "500_echo"):
            token = headers.get("authorization", "").removeprefix("Bearer ")
            if behaviour == "500_echo":
                return 500, {"Content-Type": "text/plain"}, f"upstream refused token {token}".encode()
            mangled = f"{urllib.parse.quote(token, safe='')} {json.dumps(token)[1:-1]} {token!r}"
            return 401, {}, _error_body(f"Incorrect API key provided: {mangled}", "invalid_api_key")
        if behaviour == "malformed":
            return 200, {}, b'{"data": [ {"embedding": [0.1, '
        if behaviour in ("deep", "400_deep"):
            return (400 if behaviour == "400_deep" else 200), {}, DEEP
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else list(texts or [])
        dim = body.get("dimensions") or self.dim
        rows = [self.vector(t, dim) for t in texts]
        if behaviour == "wrong_dim":
            rows = [r[:-1] for r in rows]
        elif behaviour == "nan":
            rows[0][0] = float("nan")
        elif behaviour == "inf":
            rows[0][0] = float("inf")
        elif behaviour == "wrong_count":
            rows = rows[:-1]
        elif behaviour == "strings":
            rows = [[str(x) for x in r] for r in rows]
        if behaviour == "no_data":
            return 200, {}, b'{"object": "list", "result": []}'
        if path == OLLAMA_PATH:
            reply = {"model": body.get("model"), "embeddings": rows, "total_duration": 1000,
                     "load_duration": 10, "prompt_eval_count": len(texts)}
        else:
            data = [{"object": "embedding", "index": i,
                     "embedding": (base64.b64encode(np.asarray(r, "<f4").tobytes()).decode()
                                   if behaviour == "base64" else r)} for i, r in enumerate(rows)]
            if behaviour == "shuffled":
                data.reverse()
            if behaviour == "bad_index" and len(data) > 1:
                data[1]["index"] = data[0]["index"]
            reply = {"object": "list", "data": data, "model": body.get("model"),
                     "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)}}
            if path == DASHSCOPE_PATH:
                reply["id"] = "req-" + hashlib.md5(json.dumps(texts).encode()).hexdigest()[:12]
        payload = json.dumps(reply).encode()  # json allows NaN/Infinity literals, as some servers send
        headers = {TRICKLE: str(self.trickle_seconds)} if behaviour == "trickle" else {}
        if behaviour == "trickle_head":
            headers = {TRICKLE_HEAD: str(self.trickle_seconds)}
        elif behaviour == "stall":
            headers = {STALL: f"{self.stall_delay},{self.stall_seconds}"}
        elif behaviour in ("gzip", "deflate"):
            headers = {"Content-Encoding": behaviour}
            payload = _compress(behaviour, [payload])
        elif behaviour == "gzip_bomb":
            headers = {"Content-Encoding": "gzip"}
            payload = _compress("gzip", [payload[:-1]] + [b" " * (1 << 20)] * self.bomb_mb + [b"}"])
        elif behaviour == "huge":
            headers = {NO_LENGTH: "1"}
            payload = payload[:-1] + b" " * (self.bomb_mb << 20) + b"}"
        return 200, headers, payload


def _compress(encoding: str, parts: list[bytes]) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
    return b"".join(packer.compress(p) for p in parts) + packer.flush()


def _error_body(message: str, code: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": code, "code": code}}).encode()


def _handler_for(server: EmbedServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802 - http.server's naming
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            path, _, query = self.path.partition("?")       # routed by path; a query is kept in `requests`
            if path not in (OPENAI_PATH, DASHSCOPE_PATH, OLLAMA_PATH):
                return self._send(404, {}, b'{"error": "404 page not found"}')
            try:
                body = json.loads(raw)
            except ValueError:
                return self._send(400, {}, b'{"error": "bad json"}')
            with server._lock:
                server.in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server.in_flight)
            try:
                result = server.answer(path, {k.lower(): v for k, v in self.headers.items()}, body, query)
            finally:
                with server._lock:
                    server.in_flight -= 1
            if result is None:  # "drop": hang up without a word
                self.close_connection = True
                return
            self._send(*result)

        def _send(self, status: int, headers: dict, payload: bytes):
            headers = dict(headers)
            trickle = float(headers.pop(TRICKLE, 0))
            trickle_head = float(headers.pop(TRICKLE_HEAD, 0))
            delay, pause = (float(x) for x in headers.pop(STALL, "0,0").split(","))
            try:
                if trickle_head:   # a whole answer, its head one byte at a time
                    head = (f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\n"
                            f"Content-Length: {len(payload)}\r\nX-Padding: {'x' * 100}\r\n\r\n").encode()
                    for i in range(len(head)):
                        self.wfile.write(head[i:i + 1])
                        self.wfile.flush()
                        time.sleep(trickle_head)
                    return self.wfile.write(payload)
                time.sleep(delay)
                self.send_response(status)
                headers.setdefault("Content-Type", "application/json")
                if headers.pop(NO_LENGTH, None):
                    self.close_connection = True
                else:
                    self.send_header("Content-Length", str(len(payload)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                if pause:
                    self.wfile.write(payload[:1])
                    self.wfile.flush()
                    time.sleep(pause)
                    return self.wfile.write(payload[1:])
                if not trickle:
                    return self.wfile.write(payload)
                for i in range(len(payload)):   # each byte soon enough for a per-read timeout
                    self.wfile.write(payload[i:i + 1])
                    self.wfile.flush()
                    time.sleep(trickle)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                self.close_connection = True

        def log_message(self, *args):  # keep test output clean
            pass

    return Handler
