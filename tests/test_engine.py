"""API round trips of MemoryEngine on a real SQLite file and real usearch/lexical indexes."""

import json
import sqlite3

import pytest

from ipy_memory import (InvalidArgument, MemoryEngine, NotFound, ReadOnlyError, RecallResult, Settings,
                        StorageError)
from ipy_memory.config import DAY


@pytest.fixture
def mem(tmp_path, clock):
    with MemoryEngine(tmp_path / "store", project="proj", session="s1", clock=lambda: clock[0]) as m:
        yield m


def counts(m):
    q = m.store.query
    return tuple(q(f"SELECT count(*) FROM {t}")[0][0] for t in ("documents", "nodes", "vectors"))


def test_remember_markdown_tree(mem):
    r = mem.remember("Intro line.\n# 光遗传学\n概述\n## 艺术应用\n绿藻展示\n## 实验\n蓝光", metadata={"src": "t"})
    assert r.stored and r.node_count == 4 and r.scope == "project" and r.space == "project:proj"
    assert r.id == r.document_id and r.id.startswith("m-")
    hits = mem.recall("艺术应用 绿藻")
    assert hits[0].path == "光遗传学/艺术应用" and hits[0].id == f"{r.id}#2"
    assert hits[0].metadata == {"src": "t"}
    assert mem.get(r.id).title == "光遗传学"


def test_exact_and_semantic_duplicates_write_nothing(mem):
    a = mem.remember("The GPU box is called orion and lives in rack 4.")
    before = counts(mem)
    b = mem.remember("the gpu box is called orion and lives in rack 4.")
    assert b.deduped and b.id == a.id and b.existing.id == a.id
    c = mem.remember("The GPU box is called orion, and lives in rack 4!")
    assert c.duplicate and c.existing.id == a.id and c.similarity >= 0.92
    assert counts(mem) == before
    d = mem.remember("The GPU box is called orion, and lives in rack 4!", force=True)
    assert d.stored and d.id != a.id


def test_a_near_duplicate_by_the_hashing_embedder_shares_a_word(mem):
    """Letter n-grams alone made "ααααα" a duplicate of "αααααα" (cosine 0.95) though they share no
    index term: the new text was dropped, and recalling it found neither."""
    a = mem.remember("αααααα", force=True)
    b = mem.remember("ααααα")
    assert b.stored and b.id != a.id
    assert b.id in {h.document_id for h in mem.recall("ααααα", limit=10).hits}


def test_replace_keeps_id_and_swaps_content(mem):
    a = mem.remember("# Plan\nuse postgres")
    r = mem.remember("# Plan\nuse duckdb instead", replace=a.id)
    assert r.id == a.id and r.stored
    assert mem.recall("duckdb")[0].document_id == a.id
    assert not mem.recall("postgres").hits
    with pytest.raises(NotFound):
        mem.remember("x", replace="m-0000000000000000")


def test_new_ids_ascend_across_kernels_and_are_never_reused(tmp_path, monkeypatch):
    import ipy_memory._writer as writer
    now = [1_800_000_000_000_000_000]                    # a frozen wall clock, then one that steps back
    monkeypatch.setattr(writer.time, "time_ns", lambda: now[0])
    with MemoryEngine(tmp_path / "s", project="p") as a, MemoryEngine(tmp_path / "s", project="p") as b:
        ids = [r.id for r in a.remember_many(["kelp forest", "tide pools", "kelp forest"])]
        assert ids[2] == ids[0]                           # a duplicate takes no new id
        ids[2:] = [b.remember("gull colony").id, a.remember("crab molting").id]
        last = ids[-1]
        a.forget(last)
        now[0] -= 3_600 * 10**9
        ids += [r.id for r in b.remember_many(["reef sharks", "sea otters"])]
        assert ids == sorted(ids) and len(set(ids)) == len(ids) and ids[-2] > last
        assert ids[0] == f"m-{1_800_000_000_000 << 20:016x}"       # milliseconds, then a sequence
        assert {h.text for h in a.recall("gull colony otters", limit=5)} >= {"gull colony", "sea otters"}


def test_forget_document_and_section(mem):
    a = mem.remember("# Doc\n## One\nalpha apples\n## Two\nbeta bananas")
    res = mem.forget(f"{a.id}#1")
    assert res["removed_nodes"] == 1
    assert not mem.recall("alpha apples").hits
    assert "alpha" not in mem.get(a.id).content          # the text leaves the source too
    assert mem.recall("beta bananas")[0].document_id == a.id
    mem.forget(a.id)
    assert counts(mem) == (0, 0, 0)
    with pytest.raises(NotFound):
        mem.forget(a.id)
    with pytest.raises(KeyError):                        # NotFound is also a KeyError
        mem.get(a.id)


def test_scopes_and_spaces(mem, tmp_path, clock):
    mem.remember("session note about kiwis", scope="session")
    mem.remember("project note about kiwis")
    mem.remember("global note about kiwis", scope="global")
    mem.remember("other project note about kiwis", project="other")
    assert {h.scope for h in mem.recall("kiwis")} == {"project", "global"}
    assert {h.scope for h in mem.recall("kiwis", scope="session")} == {"session"}
    assert len(mem.recall("kiwis", scope="session+project+global")) == 3
    assert [h.text for h in mem.recall("kiwis", project="other", scope="project")] == ["other project note about kiwis"]
    with MemoryEngine(mem.data_dir, project="proj", session="s2", clock=lambda: clock[0]) as other:
        assert not other.recall("kiwis", scope="session").hits     # another kernel's session


def test_ttl_defaults_and_expiry(mem, clock):
    s = mem.remember("session fact zebra", scope="session")
    p = mem.remember("project fact zebra")
    g = mem.remember("global fact zebra", scope="global")
    t = mem.remember("short fact zebra", ttl=60)
    now = clock[0]
    assert s.expires_at == now + 30 * DAY and p.expires_at == now + 90 * DAY and g.expires_at is None
    assert t.expires_at == now + 60
    assert mem.remember("zero ttl means default", ttl=0).expires_at == now + 90 * DAY
    clock[0] += 61
    assert t.id not in {h.document_id for h in mem.recall("zebra", scope="session+project+global")}
    clock[0] += 31 * DAY
    found = {h.document_id for h in mem.recall("zebra", scope="session+project+global")}
    assert {p.id, g.id} <= found and not {s.id, t.id} & found
    assert mem.purge_expired() == 2
    clock[0] += 60 * DAY
    assert [h.document_id for h in mem.recall("zebra", scope="session+project+global")] == [g.id]


def test_recall_limits_and_budget(mem):
    mem.remember_many([f"note {i} about penguins and their habitat in region {i}" for i in range(30)])
    assert len(mem.recall("penguins")) == 10
    assert len(mem.recall("penguins", limit=3)) == 3
    r = mem.recall("penguins", max_tokens=120)
    assert 0 < len(r) < 30 and r.tokens <= 120
    assert len(mem.recall("penguins", max_tokens=100_000)) == 30
    assert isinstance(r, RecallResult) and r.block.startswith(f'<memory-recall count="{len(r)}">')
    assert r.to_dicts()[0]["text"].startswith("note")
    assert not mem.recall("penguins", min_score=5.0).hits
    for bad in (dict(limit=0), dict(limit=51), dict(max_tokens=0), dict(max_tokens=10**9), dict(scope="team")):
        with pytest.raises(InvalidArgument):
            mem.recall("penguins", **bad)


def test_path_filter(mem):
    mem.remember("# A\n## B\nshared word\n# C\nshared word")
    assert {h.path for h in mem.recall("shared word", path="A")} <= {"A", "A/B"}
    assert "A/B" in {h.path for h in mem.recall("shared word", path="A/")}
    assert {h.path for h in mem.recall("shared word", path="C")} == {"C"}


def test_list_memories_pagination(mem):
    ids = [r.id for r in mem.remember_many([f"item number {i}" for i in range(25)])]
    pages = [mem.list_memories(limit=10, offset=o) for o in (0, 10, 20)]
    listed = [m.id for p in pages for m in p]
    assert sorted(listed) == sorted(ids) and len(set(listed)) == 25
    assert pages[0].total == 25
    df = pages[0].to_pandas()
    assert list(df["id"]) == [m.id for m in pages[0]]
    with pytest.raises(InvalidArgument):
        mem.list_memories(limit=201)


def test_remember_many_is_atomic(mem):
    mem.remember("existing")
    before = counts(mem)
    with pytest.raises(InvalidArgument, match="item 2"):
        mem.remember_many(["ok one", "ok two", {"content": ""}])
    assert counts(mem) == before
    rs = mem.remember_many(["dup text", "dup text", {"content": "x y z", "scope": "global"}])
    assert rs[1].deduped and rs[1].id == rs[0].id and rs[2].scope == "global"


def test_exchange_capture_and_speaker(mem):
    r = mem.remember_exchange("chat-1", [
        {"role": "user", "name": "Ana", "content": "I adopted a greyhound called Pixel", "metadata": {"turn": 1}},
        {"role": "assistant", "content": "ok"},
        {"role": "assistant", "content": [{"type": "text", "text": "Greyhounds love short sprints."}]},
    ])
    assert r.node_count == 2
    hit = mem.recall("What dog did Ana adopt?")[0]
    assert hit.title == "Ana" and hit.metadata == {"turn": 1}


def test_validation_messages(mem):
    with pytest.raises(InvalidArgument, match="empty"):
        mem.remember("   ")
    with pytest.raises(ValueError, match="NUL"):
        mem.remember("a\x00b")
    with pytest.raises(TypeError):
        mem.remember(b"bytes")
    with pytest.raises(InvalidArgument, match="importance"):
        mem.remember("x", importance=2)
    with pytest.raises(InvalidArgument, match="ttl"):
        mem.remember("x", ttl=-1)
    with pytest.raises(InvalidArgument, match="path segment"):
        mem.remember("x", project="../etc")
    with pytest.raises(InvalidArgument, match="not a memory id"):
        mem.forget("123")
    with pytest.raises(InvalidArgument, match="JSON"):
        mem.remember("x", metadata={"f": object()})
    with pytest.raises(InvalidArgument):
        MemoryEngine(123)


def test_read_only_never_writes(mem, tmp_path, clock):
    mem.remember("persistent fact about otters")
    mem.close()
    db = tmp_path / "store" / "memory.sqlite3"
    before = db.read_bytes()
    with MemoryEngine(tmp_path / "store", project="proj", read_only=True, clock=lambda: clock[0]) as ro:
        assert ro.recall("otters")[0].text == "persistent fact about otters"
        with pytest.raises(ReadOnlyError):
            ro.remember("nope")
        with pytest.raises(ReadOnlyError):
            ro.forget(ro.recall("otters")[0].document_id)
    assert db.read_bytes() == before
    with pytest.raises(StorageError):
        MemoryEngine(tmp_path / "missing", read_only=True)


def test_data_dir_that_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(StorageError, match="not a directory"):
        MemoryEngine(f)


def test_embedder_mismatch_names_both(tmp_path):
    from ipy_memory import EmbedderMismatch, HashEmbedder
    MemoryEngine(tmp_path, embedder=HashEmbedder(384)).close()
    with pytest.raises(EmbedderMismatch, match="hash-v1-384.*hash-v1-128"):
        MemoryEngine(tmp_path, embedder=HashEmbedder(128))


def test_stats(mem):
    mem.remember("# a\nb\n## c\nd")
    s = mem.stats()
    assert s["documents"] == 1 and s["nodes"] == 2 and s["vectors"] == 2
    assert s["embedder"] == "hash-v1-384" and s["dim"] == 384 and s["tiers"]["hot"]["documents"] == 1
    assert s["spaces"]["project:proj"]["nodes"] == 2 and s["size_bytes"] > 0
    json.dumps(s.to_dict())


def test_backup_roundtrip(mem, tmp_path):
    mem.remember("backed up fact about lemurs")
    out = mem.backup(tmp_path / "b.sqlite3")
    db = sqlite3.connect(out["path"])
    assert db.execute("SELECT count(*) FROM documents").fetchone()[0] == 1


def test_near_duplicate_markdown_document_is_detected(mem):
    doc = "# Churn model\n## Features\nTenure and support tickets matter most.\n## Deployment\nNightly at 02:00 UTC."
    a = mem.remember(doc)
    b = mem.remember(doc.replace("most.", "most!"))
    assert b.duplicate and b.existing.id == a.id
    c = mem.remember("Tenure and support tickets matter most.")        # one section alone is new
    assert c.stored


@pytest.mark.parametrize("mode,graph", [("auto", False), ("hnsw", True), ("exact", False)])
def test_vector_index_setting_decides_the_graph(tmp_path, mode, graph):
    """The hashing embedder's vectors are scanned exactly unless a graph is asked for ("hnsw")."""
    s = Settings(exact_threshold=50, vector_weight_hash=0.3, vector_index=mode)
    with MemoryEngine(tmp_path, project="p", settings=s) as mem:
        mem.remember_many([{"content": f"note {i} about topic {i % 7} and item {i}", "force": True} for i in range(80)])
        assert [h.text for h in mem.recall("item 42 topic 0", limit=1)] == ["note 42 about topic 0 and item 42"]
        assert (mem.shards.get("project:p").vec.graph is not None) == graph
    assert bool(list((tmp_path / "index").glob("*.usearch"))) == graph


def test_vector_index_setting_is_validated():
    with pytest.raises(InvalidArgument, match="vector_index"):
        Settings(vector_index="fast")


def test_large_space_finds_near_duplicates_through_rare_terms(tmp_path, monkeypatch):
    """Above exact_threshold the hashing embedder's duplicate check scans only sections sharing one of
    the new document's rarest terms: it finds the same duplicates as a full scan, without the scan."""
    from ipy_memory.vectors import VectorShard
    filler = [{"content": f"routine log line {i} about batch {i % 13} and queue {i % 7}", "force": True}
              for i in range(300)]
    doc = "# Churn model\n## Features\nTenure and support tickets matter most.\n## Deployment\nNightly at 02:00 UTC."
    with MemoryEngine(tmp_path, project="p", settings=Settings(exact_threshold=100)) as mem:
        mem.remember_many(filler)
        a = mem.remember("The GPU box is called orion and lives in rack 4.")
        m = mem.remember(doc)
        scans = []
        real = VectorShard.search_many
        monkeypatch.setattr(VectorShard, "search_many", lambda self, *args: scans.append(1) or real(self, *args))
        c = mem.remember("The GPU box is called orion, and lives in rack 4!")
        assert c.duplicate and c.existing.id == a.id and c.similarity >= 0.92
        d = mem.remember(doc.replace("most.", "most!"))
        assert d.duplicate and d.existing.id == m.id
        assert mem.remember("Tenure and support tickets matter most.").stored   # one section alone is new
        assert mem.remember("routine log line 3 about batch 3 and queue 3, again").duplicate   # of line 3
        assert not scans                                                        # no full scan was needed


def test_large_space_of_common_words_finds_near_duplicates_without_a_full_scan(tmp_path, monkeypatch):
    """A document made only of words that most sections share: a near-duplicate holds two of its
    rarest r + 1 terms, which narrows the pool below a full scan and still finds it."""
    import itertools
    import random
    from ipy_memory.vectors import VectorShard
    words = "amber basin cedar delta ember fjord grove harbor inlet jetty kelp lagoon meadow nectar orchard".split()
    combos = list(itertools.combinations(words, 6))
    random.Random(3).shuffle(combos)
    filler = [{"content": " ".join(c), "force": True} for c in combos[:3200]]
    with MemoryEngine(tmp_path, project="p", settings=Settings(exact_threshold=100)) as mem:
        mem.remember_many(filler)
        scans = []
        real = VectorShard.search_many
        monkeypatch.setattr(VectorShard, "search_many", lambda self, *args: scans.append(1) or real(self, *args))
        again = mem.remember(" ".join(combos[17]).capitalize() + ".")
        assert again.duplicate and again.existing.content == " ".join(combos[17]) and again.similarity >= 0.92
        assert mem.remember("amber basin cedar delta ember fjord grove harbor inlet").stored   # not a near copy
        assert not scans


def test_large_space_finds_a_near_duplicate_that_gained_a_chinese_sentence(tmp_path, monkeypatch):
    """Many light CJK bigram terms must not hide a near-duplicate: the pool counts feature weight."""
    from ipy_memory.vectors import VectorShard
    filler = [{"content": f"routine log line {i} about batch {i % 13} and queue {i % 7}", "force": True}
              for i in range(300)]
    note = ("The churn model retrains nightly on tenure, support tickets, plan changes and billing "
            "disputes; the Grafana dashboard tracks drift of every feature against last quarter.")
    with MemoryEngine(tmp_path, project="p", settings=Settings(exact_threshold=100)) as mem:
        words = note.split()
        parts = [" ".join(words[i::3]) for i in range(3)]          # the note's words are not rare...
        mem.remember_many(filler + [{"content": f"{part} ({k})", "force": True} for part in parts for k in range(2)]
                          + [{"content": "部署在每天凌晨两点进行，模型会自动重新训练。", "force": True}])   # ...its bigrams are
        first = mem.remember(note)
        scans = []
        real = VectorShard.search_many
        monkeypatch.setattr(VectorShard, "search_many", lambda self, *args: scans.append(1) or real(self, *args))
        again = mem.remember(note + " 部署在每天凌晨两点进行。")
        assert again.duplicate and again.existing.id == first.id and again.similarity >= 0.92
        assert not scans


def test_large_duplicate_pools_keep_documents_holding_enough_of_the_terms_across_sections():
    """A pool drawn from common words' long postings is cut to the documents that could be near
    copies: held weight is counted per document, since a document spreads its terms over sections."""
    from types import SimpleNamespace
    from ipy_memory._text import term_hash
    from ipy_memory._dedup import _features, held_enough
    from ipy_memory.lexical import LexicalShard, NodeRow
    lex = LexicalShard(Settings())
    lex.add([NodeRow(i, f"m{i}", 0, 1, "", f"kernel filler{i}", "s", 0.0, 0.5, None) for i in range(5000)]
            + [NodeRow(5000 + j, "doc", j, 3, "", text, "s", 0.0, 0.5, None)
               for j, text in enumerate(["kernel", "budget", "cluster"])])
    terms = ["kernel", "budget", "cluster"]
    weights = [_features(t) for t in terms]
    lists = [lex.post.get(term_hash(t))[0] for t in terms]
    kept = held_enough(SimpleNamespace(lex=lex), weights, lists, sum(weights) / 5)
    assert sorted(kept.tolist()) == [5000, 5001, 5002]       # the sections of the one document holding them all
    # a pool that is small, or terms that weigh too little to lack two fifths of, are kept whole
    assert len(held_enough(SimpleNamespace(lex=lex), weights, [x[:100] for x in lists], sum(weights) / 5)) == 102
    assert len(held_enough(SimpleNamespace(lex=lex), weights[:1], lists[:1], sum(weights) / 5)) == 5001


def test_duplicate_pool_of_common_words_counts_terms_per_document():
    """When the pool is drawn from common words (a near-duplicate holds two of them), holding is
    counted per document: a document may hold the two words in different sections."""
    from types import SimpleNamespace
    from ipy_memory._dedup import lexical_pool
    from ipy_memory.lexical import LexicalShard, NodeRow
    lex, key = LexicalShard(Settings()), 0
    rows = []
    for word, n in (("amber", 1400), ("basin", 1400), ("cedar", 1600), ("delta", 1600)):
        for i in range(n):
            key += 1
            rows.append(NodeRow(key, f"m{key}", 0, 1, "", f"{word} filler{key}", "s", 0.0, 0.5, None))
    rows += [NodeRow(90_001, "doc", 0, 2, "", "amber", "s", 0.0, 0.5, None),
             NodeRow(90_002, "doc", 1, 2, "", "basin", "s", 0.0, 0.5, None),
             # two of the four, not of the two rarest: the rule looks at 4 at least (dedup_pool.py:
             # two of fewer missed 15 of 60,092 near-duplicate pairs, misspellings)
             NodeRow(90_003, "near", 0, 1, "", "amber cedar delta", "s", 0.0, 0.5, None)]
    lex.add(rows)
    shard = SimpleNamespace(lex=lex, vec=range(len(rows)))
    new = SimpleNamespace(nodes=[SimpleNamespace(title="", body="amber basin cedar delta")])
    assert sorted(lexical_pool(shard, new, 100).tolist()) == [90_001, 90_002, 90_003]
