"""Sections embedded with their neighbours' text (Settings.embed_context_chars), for real models only."""

import numpy as np

from conftest import Recording
from ipy_memory import HashEmbedder, MemoryEngine, Settings
from ipy_memory._ingest import embedding_texts

NOTE = "# Trip\n\n## Plan\n\nWhich train do we take?\n\n## Decision\n\nThe early one, it has a dining car.\n"


def test_own_text_first_then_neighbours_cut_to_budget():
    nodes = [("Doc", "", "Doc"), ("Doc/A", "alpha text", "A"), ("Doc/B", "beta text", "B"), ("Doc/C", "gamma", "C")]
    assert embedding_texts(nodes, 0) == ["Doc\n", "Doc/A\nalpha text", "Doc/B\nbeta text", "Doc/C\ngamma"]
    assert embedding_texts(nodes, 4) == ["Doc\n\nalph", "Doc/A\nalpha text\nbeta",
                                         "Doc/B\nbeta text\nalph\ngamm", "Doc/C\ngamma\nbeta"]
    assert embedding_texts([("", "a lone fact", "")], 300) == ["a lone fact"]   # no neighbours


def test_real_models_get_context_the_hashing_embedder_does_not(tmp_path):
    settings = Settings(embed_context_chars=300)
    model, plain = Recording(semantic=True), Recording(semantic=False)
    with MemoryEngine(tmp_path / "m", project="p", embedder=model, settings=settings) as mem:
        mem.remember(NOTE)
    with MemoryEngine(tmp_path / "h", project="p", embedder=plain, settings=settings) as mem:
        mem.remember(NOTE)
    decision = [t for t in model.seen if t.startswith("Trip/Decision")]
    assert decision == ["Trip/Decision\nThe early one, it has a dining car.\nWhich train do we take?"]
    assert "Trip/Decision\nThe early one, it has a dining car." in plain.seen
    assert not any("\nWhich train" in t for t in plain.seen if t.startswith("Trip/Decision"))


def test_reembed_embeds_the_same_texts_as_a_fresh_store(tmp_path):
    settings = Settings(embed_context_chars=300, expand_weight=0.0)   # node texts only, no word vectors
    fresh = Recording()
    with MemoryEngine(tmp_path / "fresh", project="p", embedder=fresh, settings=settings) as mem:
        mem.remember(NOTE)
        mem.remember("a single fact")
        want = mem.store.query("SELECT n.path, v.vec FROM nodes n JOIN vectors v ON v.node_key = n.key ORDER BY n.path")
    with MemoryEngine(tmp_path / "old", project="p", embedder=HashEmbedder(64), settings=settings) as mem:
        mem.remember(NOTE)
        mem.remember("a single fact")
        new = Recording()
        mem.reembed(new, progress=False)
        got = mem.store.query("SELECT n.path, v.vec FROM nodes n JOIN vectors v ON v.node_key = n.key ORDER BY n.path")
    assert sorted(new.seen) == sorted(fresh.seen)
    assert [p for p, _ in got] == [p for p, _ in want]
    for (_, a), (_, b) in zip(got, want):
        assert np.array_equal(np.frombuffer(a, np.float16), np.frombuffer(b, np.float16))
