"""Re-embedding a store with another model: interrupted, resumed, atomic, equal to a fresh build."""

import pytest

from conftest import Recording
from ipy_memory import EmbedderMismatch, HashEmbedder, MemoryEngine, Settings

SETTINGS = Settings(vector_weight_hash=1.0)        # let the vectors decide the ranking
TEXTS = [f"# Note {i}\nfact {i}: the {['red', 'blue', 'green'][i % 3]} box holds item {i * 7 % 31}" for i in range(120)]
QUERIES = ["red box item", "green box", "fact 17", "blue holds"]


class Interrupting(HashEmbedder):
    def __init__(self, dim, after):
        super().__init__(dim)
        self.calls, self.after = 0, after

    def _embed(self, texts):
        self.calls += 1
        if self.calls > self.after:
            raise KeyboardInterrupt
        return super()._embed(texts)


def ranked(mem):
    return [[h.text for h in mem.recall(q, limit=5)] for q in QUERIES]


def test_reembed_interrupted_resumed_equals_fresh(tmp_path):
    with MemoryEngine(tmp_path / "a", project="p", settings=SETTINGS, embedder=HashEmbedder(384)) as mem:
        mem.remember_many([{"content": t, "force": True} for t in TEXTS])
        old = ranked(mem)
        with pytest.raises(KeyboardInterrupt):
            mem.reembed(Interrupting(128, after=2), batch_size=20, progress=False)
        staged = mem.store.query("SELECT count(*) FROM vectors_next")[0][0]
        assert 0 < staged < mem.stats()["nodes"]
        assert mem.stats()["embedder"] == "hash-v1-384" and ranked(mem) == old   # old vectors still serve
    with MemoryEngine(tmp_path / "a", project="p", settings=SETTINGS, embedder=HashEmbedder(384)) as mem:
        emb = Interrupting(128, after=10**6)
        out = mem.reembed(emb, batch_size=20, progress=False)
        assert out["embedder"] == "hash-v1-128" and emb.calls < 240 // 20     # resumed, not restarted
        after = ranked(mem)
        assert mem.stats()["embedder"] == "hash-v1-128"
    with MemoryEngine(tmp_path / "b", project="p", settings=SETTINGS, embedder=HashEmbedder(128)) as fresh:
        fresh.remember_many([{"content": t, "force": True} for t in TEXTS])
        assert ranked(fresh) == after
    with pytest.raises(EmbedderMismatch, match="hash-v1-128"):
        MemoryEngine(tmp_path / "a", embedder=HashEmbedder(384))
    with MemoryEngine(tmp_path / "a", project="p", settings=SETTINGS, embedder=HashEmbedder(128)) as mem:
        assert ranked(mem) == after


def test_other_engine_notices_reembed(tmp_path):
    a = MemoryEngine(tmp_path, project="p", embedder=HashEmbedder(384))
    b = MemoryEngine(tmp_path, project="p", embedder=HashEmbedder(384))
    a.remember("some fact about herons")
    a.reembed(HashEmbedder(64), progress=False)
    with pytest.raises(EmbedderMismatch, match="re-embedded"):
        b.recall("herons")
    assert a.recall("herons")[0].text == "some fact about herons"
    a.close()
    b.close()


def test_embedding_cache_avoids_embedding_twice(tmp_path):
    emb = Recording()
    with MemoryEngine(tmp_path, project="p", embedder=emb) as mem:
        mem.remember("the same paragraph", force=True)
        mem.remember("the same paragraph", force=True, scope="global")
        assert emb.seen.count("the same paragraph") == 1
        # the text, and its words for query expansion ("the" is a stop word), each once
        assert mem.store.query("SELECT count(*) FROM embed_cache")[0][0] == 3
        assert emb.seen.count("same") == emb.seen.count("paragraph") == 1
        seen = len(emb.seen)
        mem.recall("paragraph")          # embeds the query only: its word is the store's
        mem.recall("paragraph")
        assert emb.seen[seen:] == ["paragraph"]


def test_reembed_with_the_same_model_needs_force(tmp_path):
    """Memories embedded before embed_context_chars existed keep their own-text vectors until forced."""
    doc = "# Trip\n## Question\nWhere did we park?\n## Answer\nLevel 3, by the lifts."
    model = Recording()
    with MemoryEngine(tmp_path, project="p", embedder=model, settings=Settings(embed_context_chars=0)) as mem:
        mem.remember(doc)
        before = mem.stats()
    assert any("Where did we park?" in t for t in model.seen) and not any("Level 3" in t and "park" in t for t in model.seen)
    with MemoryEngine(tmp_path, project="p", embedder=Recording()) as mem:
        with pytest.raises(ValueError, match="force=True"):
            mem.reembed(Recording(), progress=False)
        fresh = Recording()
        mem.reembed(fresh, progress=False, force=True)
        assert any("Level 3" in t and "park" in t for t in fresh.seen)    # now with its neighbour's text
        assert mem.stats()["documents"] == before["documents"]
        assert "Where did we park?" in {h.text for h in mem.recall("park", limit=3)}    # searchable as before
