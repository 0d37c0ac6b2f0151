"""HTTP embedding providers, end to end against a real local server (tests/embed_server.py)."""

from __future__ import annotations

import json
import socket
import time
import traceback
import urllib.parse

import httpx
import numpy as np
import pytest

from embed_server import DASHSCOPE_PATH, OLLAMA_PATH, OPENAI_PATH, EmbedServer
from ipy_memory.embeddings import get_embedder
from ipy_memory.embeddings._http import _retry_after_seconds, _Secret
from ipy_memory.embeddings.remote import DashScopeEmbedder, OllamaEmbedder, OpenAIEmbedder
from ipy_memory.errors import EmbeddingError, InvalidArgument

KEY = "sk-test-SECRET-0123456789abcdef"

_ENV = [f"{p}{n}" for p in ("IPY_MEMORY_", "MEMORY_TREE_") for n in ("EMBED_PRESET", "EMBED_URL", "EMBED_MODEL", "API_KEY")]
_ENV += ["OPENAI_API_KEY", "OPENAI_BASE_URL", "DASHSCOPE_API_KEY"]
_ENV += [v for n in ("http_proxy", "https_proxy", "all_proxy", "no_proxy") for v in (n, n.upper())]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server():
    with EmbedServer(dim=8) as srv:
        yield srv


@pytest.fixture
def sleeps():
    return []


def openai(server, sleeps, **kw):
    kw.setdefault("api_key", KEY)
    kw.setdefault("model", "test-embed")
    return OpenAIEmbedder(base_url=server.url + "/v1", sleep=sleeps.append, **kw)


def expected(server, texts, dim=None):
    m = np.array([server.vector(t, dim) for t in texts], np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def assert_no_key(obj):
    text = str(obj) + repr(obj)
    if isinstance(obj, BaseException):
        text += "".join(traceback.format_exception(obj))
    assert KEY not in text
    assert KEY[8:20] not in text


# -- the three providers, end to end ----------------------------------------------------------------

def test_openai_batches_concurrently_and_keeps_order(server, sleeps):
    texts = [f"text number {i}" for i in range(25)]
    server.default = "slowish"
    with openai(server, sleeps, batch_size=4, max_concurrency=3) as emb:
        got = emb.embed(texts)
        assert emb.name == "openai:test-embed:8" and emb.dim == 8 and emb.semantic
    np.testing.assert_allclose(got, expected(server, texts), atol=1e-6)
    assert len(server.requests) == 7                        # ceil(25 / 4), no probe needed
    assert 1 < server.max_in_flight <= 3
    first = next(r for r in server.requests if r["json"]["input"][0] == texts[0])   # any arrival order
    assert first["path"] == OPENAI_PATH
    assert first["headers"]["authorization"] == f"Bearer {KEY}"
    assert first["json"] == {"model": "test-embed", "input": texts[:4], "encoding_format": "float"}
    assert sleeps == []


def test_openai_dimensions_are_sent_and_known_up_front(server, sleeps):
    emb = openai(server, sleeps, dimensions=16)
    assert emb.dim == 16 and emb.name == "openai:test-embed:16" and server.requests == []
    assert emb.embed(["a"]).shape == (1, 16)
    assert server.requests[0]["json"]["dimensions"] == 16


def test_dim_is_probed_lazily_once(server, sleeps):
    emb = openai(server, sleeps)
    assert "dim=?" in repr(emb) and server.requests == []   # repr never touches the network
    assert emb.dim == 8 and emb.name == "openai:test-embed:8"
    assert len(server.requests) == 1
    emb.embed(["x", "y"])
    assert len(server.requests) == 2


def test_dim_learnt_from_first_embed_without_probe(server, sleeps):
    emb = openai(server, sleeps)
    emb.embed(["hello"])
    assert emb.dim == 8 and len(server.requests) == 1


def test_openai_index_order_is_respected(server, sleeps):
    server.script("shuffled")
    texts = ["alpha", "beta", "gamma"]
    np.testing.assert_allclose(openai(server, sleeps).embed(texts), expected(server, texts), atol=1e-6)


def test_openai_base64_embeddings_are_decoded(server, sleeps):
    server.script("base64")
    texts = ["alpha", "beta"]
    np.testing.assert_allclose(openai(server, sleeps).embed(texts), expected(server, texts), atol=1e-6)


def test_dashscope_end_to_end_from_env(server, monkeypatch, sleeps):
    monkeypatch.setenv("IPY_MEMORY_EMBED_URL", server.url + "/compatible-mode/v1/")
    monkeypatch.setenv("DASHSCOPE_API_KEY", KEY)
    emb = get_embedder("dashscope", sleep=sleeps.append)
    assert isinstance(emb, DashScopeEmbedder)
    assert emb.name == "dashscope:text-embedding-v4:1024" and emb.dim == 1024 and server.requests == []
    texts = [f"句子 {i}" for i in range(23)]
    got = emb.embed(texts)
    np.testing.assert_allclose(got, expected(server, texts, 1024), atol=1e-6)
    assert sorted(len(r["json"]["input"]) for r in server.requests) == [3, 10, 10]   # DashScope takes 10 at most
    assert all(r["path"] == DASHSCOPE_PATH and r["json"]["dimensions"] == 1024 for r in server.requests)
    assert server.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"
    assert_no_key(emb)


def test_dashscope_custom_dimensions_and_model(server, sleeps):
    emb = DashScopeEmbedder("text-embedding-v3", base_url=server.url + "/compatible-mode/v1", api_key=KEY,
                            dimensions=512, sleep=sleeps.append)
    assert emb.name == "dashscope:text-embedding-v3:512"
    assert emb.embed(["x"]).shape == (1, 512)


def test_ollama_end_to_end_with_env_aliases(server, monkeypatch, sleeps):
    monkeypatch.setenv("MEMORY_TREE_EMBED_PRESET", "ollama")
    monkeypatch.setenv("MEMORY_TREE_EMBED_URL", server.url)
    monkeypatch.setenv("IPY_MEMORY_EMBED_MODEL", "nomic-embed-text")
    monkeypatch.setenv("IPY_MEMORY_API_KEY", KEY)   # meant for a cloud service: must not go to Ollama
    emb = get_embedder(sleep=sleeps.append)
    assert isinstance(emb, OllamaEmbedder)
    texts = ["one", "two", "three"]
    np.testing.assert_allclose(emb.embed(texts), expected(server, texts), atol=1e-6)
    assert emb.name == "ollama:nomic-embed-text:8"
    req = server.requests[0]
    assert req["path"] == OLLAMA_PATH and req["json"] == {"model": "nomic-embed-text", "input": texts, "truncate": True}
    assert "authorization" not in req["headers"]


def test_ollama_defaults_to_localhost():
    emb = OllamaEmbedder(dim=768)
    assert emb.url == "http://127.0.0.1:11434/api/embed" and emb.name == "ollama:nomic-embed-text:768"


def test_env_precedence(monkeypatch, server, sleeps):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-openai-var")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("IPY_MEMORY_EMBED_URL", server.url + "/v1")
    emb = OpenAIEmbedder(sleep=sleeps.append)          # IPY_MEMORY_EMBED_URL beats OPENAI_BASE_URL
    assert emb.url == server.url + "/v1/embeddings" and emb.model == "text-embedding-3-small"
    emb.embed(["x"])
    assert server.requests[0]["headers"]["authorization"] == "Bearer sk-from-openai-var"
    monkeypatch.setenv("IPY_MEMORY_API_KEY", KEY)      # beats OPENAI_API_KEY
    OpenAIEmbedder(sleep=sleeps.append).embed(["y"])
    assert server.requests[1]["headers"]["authorization"] == f"Bearer {KEY}"


def test_official_openai_dims_known_without_a_call():
    emb = OpenAIEmbedder("text-embedding-3-large", api_key=KEY)
    assert emb.dim == 3072 and emb.name == "openai:text-embedding-3-large:3072"
    assert_no_key(emb)


def test_blank_texts_are_zero_vectors_and_not_sent(server, sleeps):
    emb = openai(server, sleeps)
    got = emb.embed(["", "real text", "   "])
    assert not got[0].any() and not got[2].any() and abs(np.linalg.norm(got[1]) - 1) < 1e-6
    assert server.requests[0]["json"]["input"] == ["real text"]
    assert emb.embed([]).shape == (0, 8)


def test_embed_query_and_empty_input(server, sleeps):
    emb = openai(server, sleeps, dim=8)
    assert emb.embed([]).shape == (0, 8) and server.requests == []
    np.testing.assert_allclose(emb.embed_query("q"), expected(server, ["q"])[0], atol=1e-6)


# -- retries ------------------------------------------------------------------------------------------

def test_429_honours_retry_after(server, sleeps):
    server.retry_after = "3"
    server.script("429", "429", "ok")
    emb = openai(server, sleeps, max_backoff=2.5)
    np.testing.assert_allclose(emb.embed(["x"]), expected(server, ["x"]), atol=1e-6)
    assert sleeps == [2.5, 2.5]                    # as told, within max_backoff
    server.retry_after = "0.25"
    server.script("429")
    emb.embed(["y"])
    assert sleeps[-1] == 0.25


def test_5xx_and_dropped_connections_back_off_exponentially(server, sleeps):
    server.script("500", "503", "drop", "ok")
    emb = openai(server, sleeps, backoff=1.0, max_backoff=100)
    emb.embed(["x"])
    assert len(sleeps) == 3
    for attempt, slept in enumerate(sleeps):
        assert 0.5 * 2 ** attempt <= slept <= 2 ** attempt   # jittered in [half, full]


def test_bounded_attempts_then_error(server, sleeps):
    server.default = "500"
    emb = openai(server, sleeps, max_attempts=3)
    with pytest.raises(EmbeddingError) as err:
        emb.embed(["x"])
    msg = str(err.value)
    assert "openai" in msg and server.url + "/v1/embeddings" in msg and "HTTP 500" in msg and "3 attempt" in msg
    assert len(server.requests) == 3 and len(sleeps) == 2
    assert_no_key(err.value)


def test_read_timeout_is_retried(server, sleeps):
    server.slow_seconds = 0.6
    server.script("slow", "ok")
    emb = openai(server, sleeps, timeout=0.2)
    np.testing.assert_allclose(emb.embed(["x"]), expected(server, ["x"]), atol=1e-6)
    assert len(sleeps) == 1
    server.script("slow", "slow")
    with pytest.raises(EmbeddingError, match="timed out"):
        openai(server, sleeps, timeout=0.2, max_attempts=2).embed(["y"])


def test_connection_refused(sleeps):
    with socket.socket() as s:          # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    emb = OpenAIEmbedder("m", base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, sleep=sleeps.append,
                         max_attempts=2, connect_timeout=1)
    with pytest.raises(EmbeddingError) as err:
        emb.embed(["x"])
    assert "connection failed" in str(err.value) and f"127.0.0.1:{port}" in str(err.value)
    assert len(sleeps) == 1
    assert_no_key(err.value)


@pytest.mark.parametrize("status", ["400", "401"])
def test_client_errors_are_not_retried_and_never_show_the_key(server, sleeps, status):
    server.script(status)
    with pytest.raises(EmbeddingError) as err:
        openai(server, sleeps).embed(["x"])
    assert f"HTTP {status}" in str(err.value) and len(server.requests) == 1 and sleeps == []
    if status == "401":
        assert "Incorrect API key provided: ***" in str(err.value) and "IPY_MEMORY_API_KEY" in str(err.value)
    assert_no_key(err.value)


def test_unknown_path_gives_404_with_hint(server, sleeps):
    emb = OpenAIEmbedder("m", base_url=server.url + "/nope", api_key=KEY, sleep=sleeps.append)
    with pytest.raises(EmbeddingError, match="HTTP 404.*base URL"):
        emb.embed(["x"])


# -- response validation --------------------------------------------------------------------------

@pytest.mark.parametrize("behaviour, message", [
    ("wrong_dim", "expected dimension 8, got 7"),
    ("nan", "NaN or infinite"),
    ("inf", "NaN or infinite"),
    ("wrong_count", "sent 3 texts, got 2"),
    ("malformed", "not valid JSON"),
    ("bad_index", "out of range or repeated"),
    ("strings", "numeric vectors"),
    ("no_data", "no 'data' list"),
])
def test_bad_responses_raise(server, sleeps, behaviour, message):
    server.script(behaviour)
    emb = openai(server, sleeps, dim=8)
    with pytest.raises(EmbeddingError, match=message) as err:
        emb.embed(["a", "b", "c"])
    msg = str(err.value)
    assert msg.startswith("openai embeddings (test-embed)") and server.url in msg and "HTTP 200" in msg
    assert len(server.requests) == 1 and sleeps == []   # a bad answer is not retried
    assert_no_key(err.value)


@pytest.mark.parametrize("behaviour", ["wrong_dim", "nan", "wrong_count", "malformed", "no_data"])
def test_bad_ollama_responses_raise(server, sleeps, behaviour):
    server.script(behaviour)
    emb = OllamaEmbedder("m", base_url=server.url, dim=8, sleep=sleeps.append)
    with pytest.raises(EmbeddingError, match=r"ollama embeddings \(m\): POST .*/api/embed \(HTTP 200\)"):
        emb.embed(["a", "b", "c"])


def test_dimension_change_between_calls_is_caught(server, sleeps):
    emb = openai(server, sleeps)
    emb.embed(["a"])
    server.dim = 9
    with pytest.raises(EmbeddingError, match="expected dimension 8, got 9"):
        emb.embed(["b"])


# -- secrets and traffic ----------------------------------------------------------------------------

def test_key_never_in_repr_or_attributes(server, sleeps):
    emb = openai(server, sleeps)
    assert_no_key(emb)
    assert KEY not in repr(vars(emb)) and KEY not in repr(emb._client.headers)
    assert repr(_Secret(KEY)) == "<secret>" and str(_Secret(KEY)) == "<secret>"


def test_only_the_configured_endpoint_is_contacted(server, sleeps, monkeypatch):
    seen = []
    real_connect = socket.socket.connect

    def recording_connect(sock, address):
        seen.append(address)
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", recording_connect)
    emb = openai(server, sleeps, batch_size=2, max_concurrency=2)
    emb.embed([f"t{i}" for i in range(6)])
    emb.close()
    assert seen and all(a[:2] == ("127.0.0.1", server.port) for a in seen)
    assert {r["path"] for r in server.requests} == {OPENAI_PATH}


# -- arguments ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"base_url": "ftp://x"}, "base_url must be an http"),
    ({"base_url": ""}, "base_url must be a non-empty string"),
    ({"base_url": 5}, "base_url must be a non-empty string"),
    ({"model": ""}, "model must be a non-empty string"),
    ({"batch_size": 0}, "batch_size must be an integer of at least 1"),
    ({"max_concurrency": 100}, "at most 32"),
    ({"max_attempts": True}, "max_attempts must be an integer"),
    ({"timeout": -1}, "timeout must be a positive number"),
    ({"backoff": float("nan")}, "backoff must be a positive number"),
    ({"dimensions": 0}, "dimensions must be an integer"),
    ({"dimensions": 8, "dim": 9}, "contradicts"),
    ({"dim": "8"}, "dim must be an integer"),
    ({"api_key": 123}, "api_key must be a string"),
    ({"sleep": 1}, "sleep must be a function"),
])
def test_invalid_arguments(kwargs, message):
    kwargs = {"model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key": KEY} | kwargs
    with pytest.raises(InvalidArgument, match=message):
        OpenAIEmbedder(**kwargs)


def test_cloud_endpoints_need_a_key():
    with pytest.raises(InvalidArgument, match="OPENAI_API_KEY"):
        OpenAIEmbedder()
    with pytest.raises(InvalidArgument, match="DASHSCOPE_API_KEY"):
        get_embedder("dashscope")


def test_presets_are_registered():
    emb = get_embedder("openai", model="m", base_url="http://127.0.0.1:9/v1", dim=4)
    assert isinstance(emb, OpenAIEmbedder) and emb.name == "openai:m:4"
    assert isinstance(get_embedder("ollama", dim=3), OllamaEmbedder)


# -- unit tests on an in-memory transport -------------------------------------------------------------

def test_mock_transport_sees_exact_request():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = json.loads(request.content)
        return httpx.Response(200, json={"data": [{"index": i, "embedding": [1.0, 0.0]} for i in range(len(body["input"]))]})

    emb = OpenAIEmbedder("m", base_url="https://example.invalid/v1/", api_key=KEY, transport=httpx.MockTransport(handler))
    assert emb.embed(["a", "b"]).tolist() == [[1.0, 0.0], [1.0, 0.0]]
    assert str(seen[0].url) == "https://example.invalid/v1/embeddings"


def test_credentials_in_url_never_reach_messages():
    def handler(request):
        return httpx.Response(500, text="oops")

    emb = OpenAIEmbedder("m", base_url="https://user:pa55word@example.invalid/v1", api_key=KEY,
                         transport=httpx.MockTransport(handler), max_attempts=1)
    with pytest.raises(EmbeddingError) as err:
        emb.embed(["a"])
    assert "pa55word" not in str(err.value) and "https://example.invalid/v1/embeddings" in str(err.value)
    assert "pa55word" not in repr(emb)


def test_retry_after_parsing():
    assert _retry_after_seconds("7") == 7.0
    assert _retry_after_seconds("-3") == 0.0
    assert _retry_after_seconds(None) is None and _retry_after_seconds("soon") is None
    assert _retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0     # in the past: go now
    assert 50 < _retry_after_seconds(_http_date(60)) <= 60


def _http_date(seconds_ahead: float) -> str:
    import email.utils
    import time
    return email.utils.formatdate(time.time() + seconds_ahead, usegmt=True)


# -- review: an overall deadline, and keys that cannot leak -------------------------------------------

def test_timeout_is_an_overall_deadline_not_per_read(server, sleeps):
    server.trickle_seconds = 0.1          # every read is quick, but the whole answer would take ~30 s
    server.script("trickle")
    emb = openai(server, sleeps, timeout=0.5, max_attempts=1, dim=8)
    started = time.monotonic()
    with pytest.raises(EmbeddingError, match=r"timed out.*0\.5 s") as err:
        emb.embed(["a", "b", "c"])
    assert time.monotonic() - started < 2.0
    assert_no_key(err.value)


def test_a_trickled_answer_within_the_deadline_is_used(server, sleeps):
    server.trickle_seconds = 0.0005
    server.script("trickle")
    emb = openai(server, sleeps, timeout=5.0, max_attempts=1)
    np.testing.assert_allclose(emb.embed(["x"]), expected(server, ["x"]), atol=1e-6)


@pytest.mark.parametrize("key", ["sk-é-secret-0123", "sk-secret\n0123", "sk-sec ret-0123", "sk-secret\t0123",
                                 "sk-secret\x00123", "sk-secret\x7f123", "sk-\u200bsecret-0123"])
def test_keys_that_are_not_printable_ascii_are_refused_without_showing_them(key):
    with pytest.raises(InvalidArgument, match="api_key must be printable ASCII") as err:
        OpenAIEmbedder("m", base_url="http://127.0.0.1:9/v1", api_key=key)
    assert_not_in_chain(err.value, key, key[3:9], key[-4:])


def test_surrounding_whitespace_of_a_key_is_still_trimmed(server, sleeps):
    openai(server, sleeps, api_key=f"  {KEY}\n").embed(["x"])
    assert server.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"


ODD_KEY = "sk-odd/\\'\"+%&=?#-SECRET-42"     # characters that escaping and URL-encoding change


@pytest.mark.parametrize("behaviour", ["401", "401_mangled", "500_echo"])
def test_key_is_redacted_even_when_echoed_transformed(server, sleeps, behaviour):
    server.script(behaviour)
    with pytest.raises(EmbeddingError) as err:
        openai(server, sleeps, api_key=ODD_KEY, max_attempts=1).embed(["x"])
    assert "***" in str(err.value)
    forms = [ODD_KEY, repr(ODD_KEY)[1:-1], json.dumps(ODD_KEY)[1:-1], urllib.parse.quote(ODD_KEY, safe=""),
             urllib.parse.quote_plus(ODD_KEY), "SECRET-42"]
    assert_not_in_chain(err.value, *forms)


def assert_not_in_chain(exc: BaseException, *secrets: str):
    """No secret in the message, repr, traceback or args of ``exc`` and of every exception chained to it."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = str(exc) + repr(exc) + repr(exc.args) + "".join(traceback.format_exception(exc))
        for secret in secrets:
            assert secret not in text, f"{type(exc).__name__} shows the key"
        exc = exc.__cause__ or exc.__context__
