"""HTTP embedders against a misbehaving real server on 127.0.0.1 (a second review): the attempt's
deadline covers headers and every read, responses are capped in size (also once decompressed), and
JSON nested past the recursion limit is an EmbeddingError, reached without a second request."""

from __future__ import annotations

import time
import tracemalloc

import httpx
import numpy as np
import pytest

from embed_server import EmbedServer
from ipy_memory.embeddings.remote import OllamaEmbedder, OpenAIEmbedder
from ipy_memory.errors import EmbeddingError
from test_embeddings_remote import KEY, assert_not_in_chain, clean_env, expected  # noqa: F401 - fixture

SLACK = 0.35   # what an attempt may take beyond its timeout on a loaded 2-core machine


@pytest.fixture
def server():
    with EmbedServer(dim=8) as srv:
        yield srv


def openai(server, **kw):
    kw.setdefault("api_key", KEY)
    kw.setdefault("model", "test-embed")
    kw.setdefault("max_attempts", 1)
    return OpenAIEmbedder(base_url=server.url + "/v1", sleep=lambda s: None, **kw)


def timed_failure(emb, texts):
    started = time.monotonic()
    with pytest.raises(EmbeddingError) as err:
        emb.embed(texts)
    return time.monotonic() - started, err.value


# -- 1. the deadline covers the whole attempt --------------------------------------------------------

def test_headers_just_before_the_deadline_then_a_stall_end_at_the_deadline(server):
    server.stall_delay, server.stall_seconds = 0.9, 3.0
    server.script("stall")
    elapsed, err = timed_failure(openai(server, dim=8, timeout=1.0), ["x"])
    assert elapsed < 1.0 + SLACK, f"one attempt took {elapsed:.2f} s with timeout=1"
    assert "timeout=1 s" in str(err)
    assert_not_in_chain(err, KEY)


def test_headers_trickled_byte_by_byte_end_at_the_deadline(server):
    server.trickle_seconds = 0.02          # ~200 bytes of head: ~4 s, every read quick
    server.script("trickle_head")
    elapsed, err = timed_failure(openai(server, dim=8, timeout=0.6), ["x"])
    assert elapsed < 0.6 + SLACK, f"one attempt took {elapsed:.2f} s with timeout=0.6"
    assert "timed out" in str(err) and "timeout=0.6 s" in str(err)


def test_the_deadline_holds_on_a_reused_connection_and_for_every_attempt(server):
    emb = openai(server, dim=8, timeout=0.8, max_attempts=2)
    emb.embed(["warm the pool"])           # the next request reuses this keep-alive connection
    server.stall_delay, server.stall_seconds = 0.7, 3.0
    server.script("stall", "stall")
    elapsed, err = timed_failure(emb, ["x"])
    assert elapsed < 2 * 0.8 + SLACK, f"two attempts took {elapsed:.2f} s with timeout=0.8"
    assert "gave up after 2 attempt(s)" in str(err)


def test_an_answer_within_the_deadline_is_still_used(server):
    server.stall_delay, server.stall_seconds = 0.1, 0.1
    server.script("stall", "trickle_head")
    server.trickle_seconds = 0.001
    emb = openai(server, timeout=5.0)
    np.testing.assert_allclose(emb.embed(["x"]), expected(server, ["x"]), atol=1e-6)
    np.testing.assert_allclose(emb.embed(["y"]), expected(server, ["y"]), atol=1e-6)


# -- 2. responses are capped in size -----------------------------------------------------------------

def test_a_gzip_bomb_is_refused_before_it_is_inflated(server):
    server.bomb_mb = 64                    # ~64 KB on the wire
    server.script("gzip_bomb")
    emb = openai(server, dim=8)
    tracemalloc.start()
    try:
        with pytest.raises(EmbeddingError, match=r"response is larger than") as err:
            emb.embed(["x"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak >> 20} MB allocated for a response capped far lower"
    assert_not_in_chain(err.value, KEY)


def test_a_huge_plain_body_without_length_is_refused_while_read(server):
    server.bomb_mb = 6
    server.script("huge")
    with pytest.raises(EmbeddingError, match=r"response is larger than"):
        openai(server, dim=8).embed(["x"])


def test_the_size_cap_grows_with_the_batch_and_the_dimension(server):
    server.bomb_mb = 3                     # a 3 MB answer: too big for 1 short vector, fine for 64 long ones
    server.script("huge", "huge")
    with pytest.raises(EmbeddingError, match=r"response is larger than"):
        openai(server, dim=8).embed(["x"])
    emb = openai(server, dimensions=1024)
    texts = [f"text {i}" for i in range(64)]
    np.testing.assert_allclose(emb.embed(texts), expected(server, texts, 1024), atol=1e-6)


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compressed_answers_are_decoded(server, encoding):
    server.script(encoding)
    texts = ["a", "b", "c"]
    np.testing.assert_allclose(openai(server).embed(texts), expected(server, texts), atol=1e-6)
    assert "gzip" in server.requests[0]["headers"]["accept-encoding"]


def test_an_unknown_content_encoding_is_an_embedding_error():
    def answer(request):
        return httpx.Response(200, headers={"Content-Encoding": "br"}, content=b"\x1b\x00\x00")
    emb = OpenAIEmbedder("m", base_url="http://127.0.0.1:9/v1", dim=2, max_attempts=1,
                         transport=_StreamingTransport(answer))
    with pytest.raises(EmbeddingError, match="Content-Encoding"):
        emb.embed(["x"])


class _StreamingTransport(httpx.BaseTransport):
    """Answers like a network transport: the body is a stream still to be read."""

    def __init__(self, answer):
        self.answer = answer

    def handle_request(self, request):
        r = self.answer(request)
        return httpx.Response(r.status_code, headers=r.headers, stream=httpx.ByteStream(r.content))


# -- 3. JSON nested past the recursion limit, and failures that are not ours -------------------------

@pytest.mark.parametrize("provider", ["openai", "ollama"])
def test_deeply_nested_json_is_an_embedding_error_after_one_request(server, provider):
    server.script("deep")
    if provider == "openai":
        emb = openai(server)               # dimension not known: a wrapping message must not probe
    else:
        emb = OllamaEmbedder("m", base_url=server.url, api_key=KEY, max_attempts=1)
    with pytest.raises(EmbeddingError, match="not valid JSON") as err:
        emb.embed(["x"])
    assert len(server.requests) == 1
    assert_not_in_chain(err.value, KEY)


def test_deeply_nested_error_body_still_reports_the_status(server):
    server.script("400_deep")
    with pytest.raises(EmbeddingError, match="HTTP 400"):
        openai(server).embed(["x"])
    assert len(server.requests) == 1


def test_an_unexpected_failure_is_wrapped_without_probing_or_showing_the_key():
    calls = []

    def answer(request):
        calls.append(request)
        raise RuntimeError(f"transport broke while sending {request.headers['authorization']}")
    emb = OpenAIEmbedder("m", base_url="http://127.0.0.1:9/v1", api_key=KEY, max_attempts=1,
                         transport=httpx.MockTransport(answer))
    with pytest.raises(EmbeddingError, match="RuntimeError") as err:
        emb.embed(["x"])
    assert len(calls) == 1                 # no probe for the dimension from inside the error path
    assert "***" in str(err.value)
    assert_not_in_chain(err.value, KEY, KEY[8:20])


def test_the_generic_wrapper_names_an_http_embedder_without_probing(server, monkeypatch):
    emb = openai(server)                   # dimension not known yet

    def broken_map(fn, batches):
        raise RuntimeError("a bug outside the transport")
    monkeypatch.setattr(emb, "_map", broken_map)
    with pytest.raises(EmbeddingError, match=r"openai:test-embed:\?: embedding failed: RuntimeError"):
        emb.embed(["x"])
    assert server.requests == []


def test_the_default_client_is_bound_to_the_deadline(server):
    assert openai(server)._deadline_bound   # fails loudly if an httpx upgrade moves the pool's backend
