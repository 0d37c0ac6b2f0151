"""HTTP embedders against a misbehaving real server on 127.0.0.1 (a second review): JSON nested past
the recursion limit is an EmbeddingError, reached without a second request."""

from __future__ import annotations

import httpx
import pytest

from embed_server import EmbedServer
from ipy_memory.embeddings.remote import OllamaEmbedder, OpenAIEmbedder
from ipy_memory.errors import EmbeddingError
from test_embeddings_remote import KEY, assert_not_in_chain, clean_env  # noqa: F401 - fixture


@pytest.fixture
def server():
    with EmbedServer(dim=8) as srv:
        yield srv


def openai(server, **kw):
    kw.setdefault("api_key", KEY)
    kw.setdefault("model", "test-embed")
    kw.setdefault("max_attempts", 1)
    return OpenAIEmbedder(base_url=server.url + "/v1", sleep=lambda s: None, **kw)


# -- JSON nested past the recursion limit, and failures that are not ours -------------------------

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
