"""Tiers and rotation, access tracking, TTL purge, compaction and dream() on a real store with a fake clock."""

import sqlite3

import pytest

from ipy_memory import InvalidArgument, MemoryEngine, NotFound, ReadOnlyError
from ipy_memory.config import DAY
from ipy_memory.lifecycle import TierPolicy
from conftest import T0

@pytest.fixture
def mem(tmp_path, clock):
    with MemoryEngine(tmp_path / "store", project="proj", session="s1", clock=lambda: clock[0]) as m:
        yield m


def tiers(m):
    return {r[0]: r[1] for r in m.store.query("SELECT id, tier FROM documents")}


def doc(m, id):
    return m.store.query("SELECT tier, accessed_at, access_count, content FROM documents WHERE id = ?", (id,))[0]


# ------------------------------------------------------------------------------ rotation
def test_rotation_moves_by_age_one_tier_per_limit(mem, clock):
    ids = [mem.remember(f"note {i}: the {w} pipeline runs nightly").id for i, w in enumerate(["etl", "ml", "bi"])]
    assert set(tiers(mem).values()) == {"hot"}
    clock[0] += 6 * DAY
    r = mem.rotate()
    assert r["moved_documents"] == 0 and r["previous_rotation"] is None
    clock[0] += 2 * DAY                                  # 8 days: older than hot's 7
    r = mem.rotate()
    assert r["hops"][0] == {"from": "hot", "to": "warm", "documents": 3, "nodes": 3}
    assert r["hops"][1]["documents"] == 0 and r["previous_rotation"] == T0 + 6 * DAY
    clock[0] += 23 * DAY                                 # 31 days: older than warm's 30
    assert mem.rotate()["hops"][1] == {"from": "warm", "to": "cold", "documents": 3, "nodes": 3}
    assert [tiers(mem)[i] for i in ids] == ["cold"] * 3
    assert [m.tier for m in mem.list_memories()] == ["cold"] * 3


def test_rotate_moves_a_document_one_tier_per_call(mem, clock):
    # the docstring and docs/lifecycle.md: one tier colder per call, each moved document counted once
    a = mem.remember("# Runbook\n## Restart\nsystemctl restart api").id
    clock[0] += 40 * DAY
    r = mem.rotate()
    assert r["moved_documents"] == 1 and r["moved_nodes"] == mem.get(a).node_count
    assert [h["documents"] for h in r["hops"]] == [1, 0] and tiers(mem)[a] == "warm"
    r = mem.rotate()
    assert [h["documents"] for h in r["hops"]] == [0, 1] and tiers(mem)[a] == "cold"
    assert mem.rotate()["moved_documents"] == 0


def test_limit_per_hop_and_validation(mem, clock):
    for i in range(5):
        mem.remember(f"fact number {i} about topic{i}")
    clock[0] += 8 * DAY
    r = mem.rotate(limit_per_hop=2)
    assert r["hops"][0]["documents"] == 2 and sorted(tiers(mem).values()).count("warm") == 2
    assert mem.rotate(limit_per_hop=2)["moved_documents"] == 2
    assert mem.rotate()["moved_documents"] == 1
    for bad in (0, -1, 1.5, "2", True):
        with pytest.raises(InvalidArgument, match="limit_per_hop"):
            mem.rotate(limit_per_hop=bad)
    with pytest.raises(InvalidArgument, match="reason"):
        mem.rotate(reason="")


def test_recall_counts_as_access_and_warms_the_tier(mem, clock):
    b = mem.remember("Lunch is at noon on Fridays").id
    clock[0] += 2 * 3600                                 # not a neighbour of b in the session thread
    a = mem.remember("The staging database is pg-staging-02").id
    clock[0] += 8 * DAY
    assert [h.document_id for h in mem.recall("staging database").hits] == [a]
    assert doc(mem, a)[1:3] == (clock[0], 1)
    mem.rotate()
    assert tiers(mem) == {a: "hot", b: "warm"}           # a was just used: it stays hot
    clock[0] += 40 * DAY
    mem.rotate()
    assert tiers(mem) == {a: "warm", b: "cold"}          # one tier per call
    mem.rotate()
    assert tiers(mem) == {a: "cold", b: "cold"}
    mem.recall("staging database")
    assert tiers(mem)[a] == "hot" and doc(mem, a)[2] == 2 and tiers(mem)[b] == "cold"


def test_recalls_within_the_flush_interval_are_written_together(mem, tmp_path, clock):
    a = mem.remember("The staging database is pg-staging-02").id
    mem.recall("staging database")                        # none written lately: written at once
    assert doc(mem, a)[1:3] == (clock[0], 1)
    clock[0] += 1
    mem.recall("staging database")
    mem.recall("staging database")                        # within 5 s: recorded, not yet written
    assert doc(mem, a)[1:3] == (clock[0] - 1, 1)
    mem.list_memories()                                   # a read of that state writes them first
    assert doc(mem, a)[1:3] == (clock[0], 3)
    clock[0] += 1
    mem.recall("staging database")
    assert doc(mem, a)[2] == 3
    clock[0] += mem.access_flush_interval                 # the interval is over: the next one writes
    mem.recall("staging database")
    assert doc(mem, a)[1:3] == (clock[0], 5)
    mem.recall("staging database")
    for read in (mem.stats, mem.tier_stats, lambda: mem.get(a), mem.rotate, lambda: mem.forget(b)):
        b = mem.remember(f"a note to forget {clock[0]}").id
        before = doc(mem, a)[2]
        mem.recall("staging database")
        read()
        assert doc(mem, a)[2] == before + 1               # each of these writes the pending accesses
    mem.recall("staging database")
    mem.close()                                           # and so does close
    with MemoryEngine(tmp_path / "store", project="proj", clock=lambda: clock[0]) as other:
        assert other.store.query("SELECT access_count FROM documents WHERE id = ?", (a,))[0][0] == before + 2


def test_accesses_a_busy_store_refused_are_written_later(mem, tmp_path, clock):
    a = mem.remember("The staging database is pg-staging-02").id
    other = sqlite3.connect(tmp_path / "store" / "memory.sqlite3", timeout=0)
    other.execute("BEGIN IMMEDIATE")                      # another process holds the write lock
    try:
        assert mem.recall("staging database").hits        # the write is skipped, the access kept
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert doc(mem, a)[2] == 0
    mem.list_memories()
    assert doc(mem, a)[2] == 1


def test_access_tracking_on_read_only_engine_is_skipped(mem, tmp_path, clock):
    a = mem.remember("The staging database is pg-staging-02").id
    with MemoryEngine(tmp_path / "store", read_only=True, project="proj", clock=lambda: clock[0] + 5) as ro:
        assert ro.recall("staging database").hits
        with pytest.raises(ReadOnlyError):
            ro.rotate()
        with pytest.raises(ReadOnlyError):
            ro.compact()
        assert ro.maybe_rotate() is None and "hot" in ro.tier_stats()["tiers"]
    assert doc(mem, a)[2] == 0


def test_access_tracking_never_fails_recall(mem, tmp_path, clock):
    mem.remember("The staging database is pg-staging-02")
    other = sqlite3.connect(tmp_path / "store" / "memory.sqlite3", timeout=0)
    other.execute("BEGIN IMMEDIATE")                      # another process holds the write lock
    try:
        assert mem.recall("staging database").hits        # skipped quietly, not a 30 s stall
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_last_rotation_persists_and_maybe_rotate_interval(mem, tmp_path, clock):
    mem.remember("some note about rotation")
    assert mem.maybe_rotate()["reason"] == "auto"        # never rotated: due
    assert mem.maybe_rotate() is None
    clock[0] += DAY - 1
    assert mem.maybe_rotate() is None
    with MemoryEngine(tmp_path / "store", clock=lambda: clock[0]) as other:
        assert other.tier_stats()["last_rotation"] == T0
        assert other.maybe_rotate() is None               # another engine's rotation counts
        clock[0] += 1
        assert other.maybe_rotate()["previous_rotation"] == T0
    assert mem.maybe_rotate() is None                     # sees the other engine's rotation


def test_auto_rotate_runs_in_background_after_recall(mem, clock):
    mem.auto_rotate = True
    mem.remember("auto rotation note")
    clock[0] += 8 * DAY
    mem.recall("unrelated words entirely")
    assert mem.flush(5)
    assert mem.tier_stats()["last_rotation"] == clock[0]
    assert set(tiers(mem).values()) == {"warm"}


def test_custom_tier_policy(mem, clock):
    mem.tier_policy = TierPolicy(names=("hot", "archive"), max_age=(DAY,), interval=60)
    a = mem.remember("custom policy note").id
    clock[0] += 2 * DAY
    assert mem.rotate()["hops"] == [{"from": "hot", "to": "archive", "documents": 1, "nodes": 1}]
    assert set(mem.tier_stats()["tiers"]) == {"hot", "archive"}
    mem.tier_policy = TierPolicy(names=("fresh", "stale"), max_age=(DAY,))   # unnamed tiers count as hottest
    mem.store.db.execute("UPDATE documents SET tier = 'hot'")
    assert mem.rotate()["moved_documents"] == 1 and tiers(mem)[a] == "stale"
    for kw in (dict(names=()), dict(names=("a", "a"), max_age=(1,)), dict(max_age=(1,)),
               dict(max_age=(30 * DAY, 7 * DAY)), dict(max_age=(-1, 2)), dict(interval=-5),
               dict(limit_per_hop=0)):
        with pytest.raises(InvalidArgument):
            TierPolicy(**kw)
    mem.tier_policy = "fast"
    with pytest.raises(InvalidArgument, match="TierPolicy"):
        mem.rotate()


def test_tier_stats_reports_text_and_vector_bytes(mem, clock):
    mem.remember("数据仓库在上海")                          # 7 CJK chars = 21 UTF-8 bytes
    mem.remember("# A\nalpha\n# B\nbeta")
    clock[0] += 8 * DAY
    mem.rotate(limit_per_hop=1)
    st = mem.tier_stats()["tiers"]
    assert st["hot"]["nodes"] + st["warm"]["nodes"] == 3 and st["cold"]["documents"] == 0
    assert sum(t["vector_bytes"] for t in st.values()) == 3 * mem.embedder.dim * 2     # float16
    assert sum(t["text_bytes"] for t in st.values()) == 21 + len("alpha") + len("beta")
    assert [st[t]["precision"] for t in ("hot", "warm", "cold")] == ["f16", "i8", "i8"]
    assert st["warm"]["index_bytes"] == st["warm"]["nodes"] * mem.embedder.dim
    assert st["warm"]["index_bytes_saved"] == st["warm"]["nodes"] * mem.embedder.dim


# ------------------------------------------------------------------------------ TTL and compaction
def test_ttl_purge_with_clock(mem, clock):
    a = mem.remember("short lived scratch note", ttl=10).id
    b = mem.remember("kept note about the warehouse").id
    clock[0] += 5
    assert mem.purge_expired() == 0
    clock[0] += 6
    assert not mem.recall("scratch note").hits or all(h.document_id != a for h in mem.recall("scratch note").hits)
    assert mem.purge_expired() == 1
    assert set(tiers(mem)) == {b}


def test_compact_purges_removes_tombstones_and_shrinks(mem, clock):
    ids = [mem.remember(f"memory {i}: " + " ".join(f"word{i}x{j}" for j in range(200))).id for i in range(60)]
    mem.remember("expiring memory", ttl=5)
    assert len(mem.recall("word1x1").hits)
    for i in ids[:50]:
        mem.forget(i)
    clock[0] += 10
    r = mem.compact()
    assert r["purged"] == 1 and r["vacuumed"] and r["error"] is None
    assert r["tombstones"] >= 50
    assert r["bytes_after"] < r["bytes_before"]
    shard = mem.shards.get("project:proj")
    assert shard.lex.keys.size == len(shard.lex) == 10 and shard.vec.keys.size == len(shard.vec) == 10
    assert mem.recall("word55x3").hits[0].document_id == ids[55]
    assert mem.compact(vacuum=False)["vacuumed"] is False
    with pytest.raises(InvalidArgument):
        mem.compact(vacuum="yes")


def test_change_log_trimmed_only_when_old_and_vacuuming(mem, tmp_path, clock):
    for i in range(5):
        mem.remember(f"log note {i}")
    count = lambda: mem.store.query("SELECT count(*) FROM changes")[0][0]   # noqa: E731
    mem.compact()                                          # leaves a mark: (now, max seq = 5)
    assert count() == 5 and mem.compact()["log_rows_trimmed"] == 0
    mem.remember("later note")
    clock[0] += 8 * DAY
    assert mem.compact(vacuum=False)["log_rows_trimmed"] == 0 and count() == 6
    assert mem.compact()["log_rows_trimmed"] == 5 and count() == 1
    assert mem.store.get_meta("changes_floor") == "5"
    with MemoryEngine(tmp_path / "store", clock=lambda: clock[0]) as fresh:   # a new engine is unaffected
        assert fresh.recall("later note", scope="project+global", project="proj").hits
    mem.remember("after trim")
    assert mem.store.max_seq() == 7                        # AUTOINCREMENT: seqs are never reused


# ------------------------------------------------------------------------------ dream
SHARED = "## Conda\nUse the conda env `ds` for every analysis."


def test_dream_removes_duplicate_sections_but_never_documents(mem, tmp_path, clock):
    top = SHARED.replace("##", "#")        # (dream merges copies under one heading path only: "Conda")
    a = mem.remember(f"intro A\n{top}\n# Data\nsales in warehouse.sales").id
    b = mem.remember(f"intro B\n{top}\n# Owner\nAlice owns it").id
    # two one-section memories whose only section is the same text: they must keep it
    c = mem.remember(SHARED.replace("##", "#"), force=True).id
    d = mem.remember(SHARED.replace("##", "###"), force=True).id
    ids = (a, b, c, d)
    before = {i: (mem.get(i).content, mem.get(i).node_count) for i in ids}
    assert [n for _, n in before.values()] == [3, 3, 1, 1]

    def conda(engine):
        return sorted(h.document_id for h in engine.recall("conda env ds analysis").hits if h.path == "Conda")

    late = MemoryEngine(tmp_path / "store", project="proj", clock=lambda: clock[0])   # another kernel
    assert conda(late) == sorted(ids)
    r = mem.dream()
    assert r["removed_nodes"] == 2 and r["spaces"]["project:proj"]["removed_nodes"] == 2
    assert {i: mem.get(i).content for i in ids} == {i: c_ for i, (c_, _) in before.items()}   # source text kept
    assert [mem.get(i).node_count for i in ids] == [2, 2, 1, 1]                  # no document lost
    assert conda(mem) == sorted([c, d])
    assert conda(late) == sorted([c, d])                   # the 'del' changes reach other engines
    late.close()
    dels = mem.store.query("SELECT count(*) FROM changes WHERE op = 'del'")[0][0]
    assert dels == 2
    again = mem.dream()
    assert again["removed_nodes"] == 0 and again["edges"] == r["edges"]       # idempotent
    assert mem.store.query("SELECT count(*) FROM changes WHERE op = 'del'")[0][0] == dels
    assert mem.recall("Alice owns").hits[0].document_id == b


def test_dream_keeps_the_longest_lived_copy(mem, clock):
    short = mem.remember(f"# Env\nx\n{SHARED}", ttl=DAY).id
    keep = mem.remember(f"# Env\ny\n{SHARED}", force=True).id
    assert mem.dream()["removed_nodes"] == 1
    assert [h.document_id for h in mem.recall("conda env ds analysis").hits if h.path.endswith("Conda")] == [keep]
    assert mem.get(short).node_count == 1 and "conda env" in mem.get(short).content


def test_dream_edges_repoint_cascade_and_related(mem, clock):
    a = mem.remember("The sales dashboard refreshes every night at two").id
    b = mem.remember("The sales dashboard refreshes every night at 2am UTC").id
    mem.remember("Completely different: the cat sleeps on the sofa")
    r = mem.dream(threshold=0.3)
    assert r["edges"] >= 2
    rel = mem.related(a)
    assert rel[0]["document_id"] == b and 0.3 <= rel[0]["weight"] <= 1.0
    assert mem.related(a, limit=1) == rel[:1]
    # links held by a section that dream() removes as a duplicate move to the copy it keeps
    x = mem.remember(f"# XY\nx\n{SHARED}").id
    y = mem.remember(f"# XY\ny\n{SHARED}", force=True).id
    key = {i: mem.store.query("SELECT max(key) FROM nodes WHERE document_id = ?", (i,))[0][0] for i in (a, b, x, y)}
    with mem.store.write() as db:
        db.executemany("INSERT INTO edges (src, dst, kind, weight, space) VALUES (?, ?, 'link', 1, 'project:proj')",
                       [(key[y], key[a]), (key[b], key[y]), (key[y], key[x])])
    assert mem.dream(threshold=0.3)["removed_nodes"] == 1          # y's copy goes, x's (older key) stays
    links = set(mem.store.query("SELECT src, dst FROM edges WHERE kind = 'link'"))
    assert links == {(key[x], key[a]), (key[b], key[x])}          # the y -> x link became a self loop: dropped
    mem.forget(a)                                                  # foreign keys cascade to edges
    keys = {k for (k,) in mem.store.query("SELECT key FROM nodes")}
    assert all(s in keys and d in keys for s, d in mem.store.query("SELECT src, dst FROM edges"))
    assert set(mem.store.query("SELECT src, dst FROM edges WHERE kind = 'link'")) == {(key[b], key[x])}
    assert all(e["document_id"] != a for e in mem.related(b))


def test_dream_validation_and_scope(mem):
    a = mem.remember("global fact", scope="global").id
    assert set(mem.dream(scope="global")["spaces"]) == {"global"}
    assert set(mem.dream(scope="session")["spaces"]) == {"session:s1"}
    for kw in (dict(scope="everything"), dict(threshold=2), dict(neighbors=0), dict(project="../x")):
        with pytest.raises(InvalidArgument):
            mem.dream(**kw)
    with pytest.raises(InvalidArgument):
        mem.related("nope")
    with pytest.raises(NotFound):           # unknown ids are errors, as for get() and forget()
        mem.related("m-0123456789abcdef")
    with pytest.raises(NotFound):
        mem.related(f"{a}#99")
