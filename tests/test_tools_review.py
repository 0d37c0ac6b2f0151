"""Review findings in the tool calls, the embedder presets, the command line and AutoRecall: each test
failed on the code before its fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ipy_memory import EmbeddingError, InvalidArgument, MemoryEngine
from ipy_memory.agent import AutoRecall
from ipy_memory.embeddings import get_embedder, register_preset
from ipy_memory.embeddings.remote import OllamaEmbedder, OpenAIEmbedder
from ipy_memory.tools import call_tool


# ------------------------------------------------------------------------------ call_tool
def test_call_tool_with_keys_that_are_no_str_is_a_tool_error(tmp_path):
    with MemoryEngine(tmp_path, project="p") as mem:
        for args in ({"query": "x", 1: "a"}, {"query": "x", None: 1}):
            r = call_tool("memory_search", args, engine=mem)
            assert r.is_error and "unknown argument" in r.text


@pytest.mark.parametrize("engine", [None, "engine", object()])
def test_call_tool_without_an_engine_is_the_callers_error(engine):
    with pytest.raises(InvalidArgument, match="engine must be a MemoryEngine"):
        call_tool("memory_search", {"query": "x"}, engine=engine)


# ------------------------------------------------------------------------------ get_embedder options
@pytest.mark.parametrize("preset, options", [
    ("openai", {"api_key": "k", "timout": 5}), ("ollama", {"bogus": 1}), ("dashscope", {"api_key": "k", "x": 1}),
    ("hash", {"bogus": 1}), ("local", {"bogus": 1}),
])
def test_an_unknown_preset_option_names_the_options_there_are(preset, options):
    with pytest.raises(InvalidArgument, match=r"has no option .*; it takes .*"):
        get_embedder(preset, **options)


@pytest.mark.parametrize("options", [{"dim": "abc"}, {"dim": 2.7}, {"dim": 0}, {"dim": -3}, {"dim": True},
                                     {"char_ngrams": 5}, {"char_ngrams": ()}, {"char_ngrams": (0,)},
                                     {"cache_size": -1}])
def test_hash_embedder_options_are_checked_when_built(options):
    with pytest.raises(InvalidArgument, match="HashEmbedder"):
        get_embedder("hash", **options)


def test_presets_still_take_their_options(monkeypatch):
    assert get_embedder("hash", dim=64).dim == 64
    assert get_embedder("openai", api_key="k", model="m", timeout=5, max_attempts=2).timeout == 5
    register_preset("test-own", lambda **kw: get_embedder("hash", **kw))     # a user's factory: open-ended
    assert get_embedder("test-own", dim=16).dim == 16


# ------------------------------------------------------------------------------ base_url with a query
def test_the_endpoint_goes_on_the_path_and_the_query_stays(local_embed_server):
    server = local_embed_server()
    emb = OpenAIEmbedder("m", base_url=server.url + "/v1?api-version=2024-02-01", api_key="k", dim=8)
    assert emb.url == server.url + "/v1/embeddings?api-version=2024-02-01"
    assert emb.display_url == server.url + "/v1/embeddings"           # (no query in messages)
    assert emb.embed(["a"]).shape == (1, 8)
    assert (server.requests[-1]["path"], server.requests[-1]["query"]) == ("/v1/embeddings", "api-version=2024-02-01")


# ------------------------------------------------------------------------------ the command line
def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "ipy_memory", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def test_commands_that_embed_nothing_need_no_embedding_server(tmp_path, local_embed_server):
    server = local_embed_server()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IPY_MEMORY_", "MEMORY_TREE_"))}
    d = str(tmp_path / "mem")
    with_server = dict(env, IPY_MEMORY_EMBED_PRESET="ollama", IPY_MEMORY_EMBED_URL=server.url)
    stored = json.loads(cli("store", "The scoring job runs nightly", "--data-dir", d, "--json", "--project", "p",
                            env=with_server).stdout)["id"]
    server.stop()                            # no server and no settings from here on
    assert json.loads(cli("stats", "--data-dir", d, "--json", env=env).stdout)["documents"] == 1
    listed = json.loads(cli("list", "--data-dir", d, "--json", "--project", "p", env=env).stdout)
    assert [m["id"] for m in listed["memories"]] == [stored]
    assert stored in cli("inspect", "--data-dir", d, env=env).stdout
    assert cli("backup", str(tmp_path / "copy.sqlite3"), "--data-dir", d, env=env).returncode == 0
    assert json.loads(cli("forget", stored, "--data-dir", d, "--json", env=env).stdout)["removed_nodes"] == 1
    failed = cli("recall", "scoring", "--data-dir", d, env=env)          # recall does embed
    assert failed.returncode == 1 and "ollama" in failed.stderr


def test_a_recorded_stand_in_refuses_to_embed(tmp_path):
    with MemoryEngine(tmp_path, project="p") as mem:
        mem.remember("the amber lantern is in the attic")
    with MemoryEngine(tmp_path, project="p", embedder="recorded") as mem:
        assert mem.embedder.name == "hash-v1-384" and mem.stats()["documents"] == 1
        assert len(mem.list_memories()) == 1
        with pytest.raises(EmbeddingError, match="embedder='recorded'"):
            mem.remember("a new note about something else entirely")
    with MemoryEngine(tmp_path / "new", embedder="recorded") as mem:      # nothing recorded: the default
        assert mem.embedder.name == "hash-v1-384"


# ------------------------------------------------------------------------------ AutoRecall.inject
def test_a_recall_message_copies_the_responses_api_part_type(tmp_path):
    with MemoryEngine(tmp_path, project="demo") as mem:
        mem.remember("The 2024 sales live in warehouse.sales_2024.")
        human = {"role": "user", "content": [{"type": "input_text", "text": "Which table holds the 2024 sales?"}]}
        out = AutoRecall(mem, tag=None).inject([human], session_id="s", turn_id=1)
        assert len(out) == 2 and [p["type"] for p in out[0]["content"]] == ["input_text"]
        chat = {"role": "user", "content": [{"type": "text", "text": "Which table holds the 2024 sales?"}]}
        out = AutoRecall(mem, tag=None).inject([chat], session_id="t", turn_id=1)
        assert [p["type"] for p in out[0]["content"]] == ["text"]


# ------------------------------------------------------------------------------ AutoRecall.capture
TURNS = [("Which table holds the 2024 sales?", "warehouse.sales_2024 holds them."),
         ("Who owns the nightly scoring job?", "The data-eng team owns that job."),
         ("Which cluster does scoring run on?", "It runs on the etl cluster."),
         ("When does the backup happen?", "Backups run at 03:00 UTC daily.")]


def stored_texts(mem) -> list[str]:
    return [n for m in mem.list_memories(scope="session+project+global", limit=50) for n in m.content.split("\n\n")]


@pytest.mark.parametrize("window", [lambda c: [c[0]] + c[1:][-4:], lambda c: c[-4:], lambda c: c[:3] + c[3:][-2:]])
def test_capture_of_a_trimmed_conversation_stores_each_message_once(tmp_path, window):
    with MemoryEngine(tmp_path, project="demo") as mem:
        auto, convo = AutoRecall(mem), [{"role": "system", "content": "You are helpful."}]
        for q, a in TURNS:
            convo += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
            auto.capture(window(convo), session_id="chat-1")
        texts = stored_texts(mem)
        assert sorted(texts) == sorted(f"{r}: {t}" for q, a in TURNS for r, t in (("user", q), ("assistant", a)))


class Flaky:
    """An embedder that is down while `down` is set."""
    down = False

    def __new__(cls):
        from ipy_memory import Embedder
        from ipy_memory.embeddings.hashing import HashEmbedder

        class _Flaky(Embedder):
            name, dim = "flaky-64", 64
            inner = HashEmbedder(64)

            def _embed(self, texts):
                if Flaky.down:
                    raise ConnectionError("embedding server unreachable")
                return self.inner.embed(texts)
        return _Flaky()


@pytest.mark.parametrize("background", [True, False])
def test_a_failed_capture_is_tried_again_with_the_next_turn(tmp_path, background):
    mem = MemoryEngine(tmp_path, project="demo", embedder=Flaky())
    try:
        auto, convo = AutoRecall(mem), []
        for i, (q, a) in enumerate(TURNS[:2]):
            Flaky.down = i == 0
            convo += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
            auto.capture(convo, session_id="chat", background=background)
            assert mem.flush(30)
            if i == 0:
                assert auto.stats()["capture_errors"] == 1 and auto.stats()["compat"]["capture"] == "degraded"
        assert auto.stats()["compat"]["capture"] == "on"
        texts = stored_texts(mem)
        assert sorted(texts) == sorted(f"{r}: {t}" for q, a in TURNS[:2] for r, t in (("user", q), ("assistant", a)))
    finally:
        Flaky.down = False
        mem.close()


def test_background_capture_takes_the_conversation_as_it_was(tmp_path):
    with MemoryEngine(tmp_path, project="demo") as mem:
        auto = AutoRecall(mem)
        convo = [{"role": "user", "content": TURNS[0][0]}, {"role": "assistant", "content": TURNS[0][1]}]
        assert auto.capture(convo, session_id="chat", background=True) is True
        convo[1]["content"] = "changed after the call"
        assert mem.flush(30)
        assert "changed after the call" not in " ".join(stored_texts(mem))


def test_a_placeholder_key_does_not_mangle_error_messages(local_embed_server):
    # OpenAI-compatible examples for Ollama pass api_key="ollama": the provider's own name stays readable
    server = local_embed_server(default="401")
    emb = OllamaEmbedder("nomic-embed-text", base_url=server.url, api_key="ollama", max_attempts=1, dim=8)
    with pytest.raises(EmbeddingError) as err:
        emb.embed(["x"])
    assert str(err.value).startswith("ollama embeddings (nomic-embed-text)")
    assert "Bearer ollama" not in str(err.value)          # (the 401 echoes the bearer token)


def test_a_store_opens_with_its_own_preset_whatever_the_environment_says(tmp_path, monkeypatch):
    # IPY_MEMORY_EMBED_PRESET picks the embedder of new stores; an existing one keeps what it was built with
    with MemoryEngine(tmp_path / "old", project="p") as mem:
        mem.remember("built with the hashing embedder")
    monkeypatch.setenv("IPY_MEMORY_EMBED_PRESET", "ollama")
    monkeypatch.setenv("IPY_MEMORY_EMBED_URL", "http://127.0.0.1:9")       # nothing listens there
    with MemoryEngine(tmp_path / "old", project="p") as mem:
        assert mem.embedder.name == "hash-v1-384"
        assert mem.recall("hashing embedder")[0].text == "built with the hashing embedder"
    monkeypatch.setenv("IPY_MEMORY_EMBED_PRESET", "nope")                   # a new store does read it
    with pytest.raises(InvalidArgument, match="unknown embedder preset 'nope'"):
        MemoryEngine(tmp_path / "new", project="p")
