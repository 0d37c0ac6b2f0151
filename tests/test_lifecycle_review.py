"""Review findings on backup(), forget() after dream(), exchanges, TierPolicy, rotate() and re-embedding."""

import os
import sqlite3

import pytest

from ipy_memory import EmbedderMismatch, HashEmbedder, InvalidArgument, MemoryEngine, NotFound
from ipy_memory.config import DAY
from ipy_memory.lifecycle import TierPolicy


@pytest.fixture
def mem(tmp_path, clock):
    with MemoryEngine(tmp_path / "store", project="proj", session="s1", clock=lambda: clock[0]) as m:
        yield m


def _count(path, table="documents"):
    con = sqlite3.connect(path)
    try:
        return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    finally:
        con.close()


# ------------------------------------------------------------------------------ backup targets
def test_backup_refuses_the_live_database_sidecars_and_index_dir(mem):
    mem.remember("the nightly job loads from the warehouse")
    db = mem.store.path
    wal = db.with_name(db.name + "-wal")
    assert wal.exists()
    wal_bytes = wal.read_bytes()
    for name in ("-wal", "-shm", "-journal"):
        with pytest.raises(InvalidArgument, match="live"):
            mem.backup(db.with_name(db.name + name))
    (mem.data_dir / "index").mkdir(exist_ok=True)
    with pytest.raises(InvalidArgument, match="index"):
        mem.backup(mem.data_dir / "index" / "copy.sqlite3")
    assert wal.read_bytes() == wal_bytes
    assert not db.with_name(db.name + "-journal").exists()
    assert [m.content for m in mem.list_memories()] == ["the nightly job loads from the warehouse"]
    assert not list(mem.data_dir.glob(".*partial*")) and not list((mem.data_dir / "index").glob(".*partial*"))


def test_backup_refuses_targets_that_are_not_regular_files(mem, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for target in (fifo, "/dev/null"):
        with pytest.raises(InvalidArgument, match="not a regular file"):
            mem.backup(target)
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")
    with pytest.raises(InvalidArgument, match="NUL"):
        mem.backup(str(tmp_path / "a\0b"))
    assert not list(tmp_path.glob(".*partial*"))


def test_backup_overwrites_only_a_closed_ipy_memory_database(mem, tmp_path):
    mem.remember("a fact worth backing up")
    other = tmp_path / "notes.txt"
    other.write_text("someone's notes")
    with pytest.raises(InvalidArgument, match="not a backup made by backup"):
        mem.backup(other)
    assert other.read_text() == "someone's notes"
    plain = tmp_path / "plain.sqlite3"
    sqlite3.connect(plain).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(InvalidArgument, match="not a backup made by backup"):
        mem.backup(plain)
    # another store, open right now (its -wal beside it): refused, untouched
    with MemoryEngine(tmp_path / "other", project="x") as live:
        live.remember("the other store's own memory")
        with pytest.raises(InvalidArgument, match="in use"):
            mem.backup(live.store.path)
        assert [m.content for m in live.list_memories()] == ["the other store's own memory"]
    # an earlier backup (closed): replaced
    out = tmp_path / "b.sqlite3"
    mem.backup(out)
    mem.remember("a second fact")
    assert mem.backup(out)["bytes"] == out.stat().st_size and _count(out) == 2
    assert not list(tmp_path.glob(".*partial*"))


def test_backup_cleans_its_partial_file_on_any_failure(mem, tmp_path, monkeypatch):
    mem.remember("a fact")

    class Boom(BaseException):
        pass

    def fail(*a, **k):
        raise Boom()
    monkeypatch.setattr(os, "chmod", fail)
    with pytest.raises(Boom):
        mem.backup(tmp_path / "x.sqlite3")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]      # no x.sqlite3, no .partial left
    monkeypatch.undo()
    # another kernel's temporary file (or one a killed run left) is not ours to remove
    (tmp_path / ".ipy-memory-backup-other.partial").write_text("another backup, still being written")
    assert mem.backup(tmp_path / "y.sqlite3")["bytes"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ipy-memory-backup-other.partial", "store", "y.sqlite3"]


def test_two_backups_to_one_path_at_once_each_publish_a_whole_copy(mem, tmp_path, monkeypatch):
    """Both used one '.NAME.partial' file, and the second deleted the first's finished copy as a killed
    run's leftover: the first then published the second's empty file over the earlier backup."""
    from ipy_memory import _backup
    mem.remember("a fact both copies hold")
    out = tmp_path / "nightly.sqlite3"
    other = MemoryEngine(tmp_path / "store", project="proj")
    chmod, nested = os.chmod, []

    def chmod_then_the_other_kernels_backup(path, mode):
        if not nested:
            nested.append(None)
            nested[0] = other.backup(out)           # runs whole while this one's copy waits to be published
        chmod(path, mode)
    monkeypatch.setattr(_backup.os, "chmod", chmod_then_the_other_kernels_backup)
    first = mem.backup(out)
    other.close()
    assert nested[0]["bytes"] > 0 and first["bytes"] == out.stat().st_size > 0
    assert _count(out) == 1 and not list(tmp_path.glob(".*partial"))


def test_a_store_is_not_a_backup_even_closed(mem, tmp_path):
    """A closed store's database has no -wal beside it, like a backup: only backup()'s mark tells them
    apart, and a restored backup loses the mark once it is opened as a store."""
    with MemoryEngine(tmp_path / "other", project="x") as other:
        other.remember("the other store's only memory")
    with pytest.raises(InvalidArgument, match="not a backup made by backup"):
        mem.backup(tmp_path / "other" / "memory.sqlite3")
    assert _count(tmp_path / "other" / "memory.sqlite3") == 1
    restored = tmp_path / "restored"
    restored.mkdir()
    mem.backup(restored / "memory.sqlite3")
    mem.backup(restored / "memory.sqlite3")                # an earlier backup: replaced
    MemoryEngine(restored, project="proj").close()         # restored: a store now
    with pytest.raises(InvalidArgument, match="not a backup made by backup"):
        mem.backup(restored / "memory.sqlite3")


def test_backup_into_a_missing_directory_is_bad_input(mem, tmp_path):
    with pytest.raises(InvalidArgument, match="does not exist"):
        mem.backup(tmp_path / "no such dir" / "b.sqlite3")
    assert not (tmp_path / "no such dir").exists()


def test_backup_names_the_file_system_refuses(mem, tmp_path):
    with pytest.raises(InvalidArgument, match="cannot be used"):
        mem.backup(tmp_path / ("x" * 300 + ".sqlite3"))
    long_ok = tmp_path / ("y" * 240 + ".sqlite3")          # its own '.NAME.partial' would have been too long
    assert mem.backup(long_ok)["bytes"] == long_ok.stat().st_size


def test_get_of_a_section_dream_set_aside(mem):
    a = mem.remember(f"# Notes\nintro A\n{SHARED}").id
    b = mem.remember(f"# Notes\nintro B\n{SHARED}", force=True).id
    assert mem.dream()["removed_nodes"] == 1
    [(doc, ord_)] = mem.store.query("SELECT document_id, ord FROM dreamed")       # the copy set aside
    kept = b if doc == a else a
    assert mem.get(f"{doc}#{ord_}").id == doc             # still its memory's section (forget takes the id too)
    assert mem.forget(f"{doc}#{ord_}")["removed_nodes"] == 1
    with pytest.raises(NotFound):
        mem.get(f"{doc}#{ord_}")
    assert mem.get(kept).node_count == 2


# ------------------------------------------------------------------------------ forget and exchanges
def test_forgetting_a_turn_of_an_exchange_keeps_the_speakers(mem):
    r = mem.remember_exchange("chat-1", [{"role": "user", "content": "Where do sales land?"},
                                         {"role": "assistant", "content": "In warehouse.sales, nightly."},
                                         {"role": "user", "content": "And the backups?"}])
    assert mem.get(r.id).content.startswith("user: Where do sales land?")
    mem.forget(f"{r.id}#1")
    assert mem.get(r.id).content == "user: Where do sales land?\n\nuser: And the backups?"


# ------------------------------------------------------------------------------ forget after dream
# (each under "# Notes": dream merges copies under one heading path only)
SHARED = "## Conda\nUse the conda env `ds` for every analysis."


def _conda_docs(m):
    return sorted(h.document_id for h in m.recall("conda env ds analysis").hits if h.title == "Conda")


def test_forgetting_another_section_keeps_a_deduplicated_sections_text(mem):
    a = mem.remember(f"# Notes\nintro A\n{SHARED}\n## Data\nsales in warehouse.sales").id
    b = mem.remember(f"# Notes\nintro B\n{SHARED}\n## Owner\nAlice owns it").id
    assert mem.dream()["removed_nodes"] == 1
    mem.forget(f"{b}#2")                                # B's "Owner" section, not its Conda one
    content = mem.get(b).content
    assert "Alice" not in content and "conda env `ds`" in content and "intro B" in content
    mem.forget(a)                                       # the kept copy goes: B's text is found in B again
    assert _conda_docs(mem) == [b]
    assert mem.get(b).node_count == 2


def test_forgetting_the_kept_copy_makes_the_other_copy_recallable(mem, tmp_path, clock):
    a = mem.remember(f"# Notes\nintro A\n{SHARED}").id
    b = mem.remember(f"# Notes\nintro B\n{SHARED}", force=True).id
    assert mem.dream()["removed_nodes"] == 1
    assert _conda_docs(mem) == [a]
    late = MemoryEngine(tmp_path / "store", project="proj", clock=lambda: clock[0])   # another kernel
    assert _conda_docs(late) == [a]
    mem.forget(f"{a}#1")
    assert "conda env `ds`" in mem.get(b).content and "conda env `ds`" not in mem.get(a).content
    assert _conda_docs(mem) == [b] and _conda_docs(late) == [b]
    late.close()
    assert mem.dream()["removed_nodes"] == 0


def test_forgetting_a_deduplicated_section_removes_its_text(mem):
    a = mem.remember(f"# Notes\nintro A\n{SHARED}").id
    b = mem.remember(f"# Notes\nintro B\n{SHARED}", force=True).id
    mem.dream()
    mem.forget(f"{b}#1")                                # removed by dream(), still in B's text
    assert "conda" not in mem.get(b).content and mem.get(b).node_count == 1
    mem.forget(a)
    assert _conda_docs(mem) == []


def test_forgetting_a_whole_document_after_dream(mem):
    a = mem.remember(f"# Notes\nintro A\n{SHARED}").id
    b = mem.remember(f"# Notes\nintro B\n{SHARED}", force=True).id
    c = mem.remember(f"# Notes\nintro C\n{SHARED}", force=True).id
    assert mem.dream()["removed_nodes"] == 2
    mem.forget(b)                                      # a removed copy's memory: nothing else changes
    assert _conda_docs(mem) == [a]
    mem.forget(a)                                      # the kept copy's: C's copy is back
    assert _conda_docs(mem) == [c]
    assert mem.get(c).content == f"# Notes\nintro C\n{SHARED}"


def test_forgetting_the_last_indexed_section_indexes_the_set_aside_ones(mem):
    a = mem.remember(f"# Notes\nintro A\n{SHARED}").id
    b = mem.remember(f"# Notes\nintro B\n{SHARED}", force=True).id
    mem.dream()
    mem.forget(f"{b}#0")                                # B keeps only the section dream() set aside
    assert mem.get(b).content == "## Conda\n\nUse the conda env `ds` for every analysis."
    assert mem.get(b).node_count == 1 and _conda_docs(mem) == sorted([a, b])


# ------------------------------------------------------------------------------ TierPolicy
@pytest.mark.parametrize("names", [None, "hot", ("hot", 3), ["hot", "warm", "cold", ""], 5])
def test_tier_policy_names_are_validated(names):
    with pytest.raises(InvalidArgument, match="names"):
        TierPolicy(names=names)


@pytest.mark.parametrize("ages", [None, 7.0, "7"])
def test_tier_policy_ages_are_validated(ages):
    with pytest.raises(InvalidArgument, match="max_age"):
        TierPolicy(max_age=ages)


# ------------------------------------------------------------------------------ after another engine re-embeds
@pytest.mark.parametrize("op", ["dream", "compact", "rotate", "tier_stats"])
def test_lifecycle_ops_notice_another_engines_reembed(tmp_path, op):
    a = MemoryEngine(tmp_path, project="p", embedder=HashEmbedder(384))
    b = MemoryEngine(tmp_path, project="p", embedder=HashEmbedder(384))
    try:
        a.remember("# Herons\nsome fact about herons\n## Egrets\nand egrets")
        b.recall("herons")                               # b holds the 384-dim vectors
        a.reembed(HashEmbedder(64), progress=False)
        with pytest.raises(EmbedderMismatch, match="re-embedded"):
            getattr(b, op)()
    finally:
        a.close()
        b.close()


def test_replacing_or_expiring_after_dream(mem, clock):
    a = mem.remember(f"# Notes\nintro A\n{SHARED}").id
    b = mem.remember(f"# Notes\nintro B\n{SHARED}", force=True, ttl=2 * DAY).id
    c = mem.remember(f"# Notes\nintro C\n{SHARED}", force=True, ttl=DAY).id
    assert mem.dream()["removed_nodes"] == 2 and _conda_docs(mem) == [a]
    mem.remember("# A\nnothing about environments any more", replace=a)   # the kept copy's text goes
    assert sorted(_conda_docs(mem)) == sorted([b, c])
    assert mem.dream()["removed_nodes"] == 1
    kept = _conda_docs(mem)[0]
    assert kept == b                                       # the longer-lived copy stands in for the other
    mem.remember(f"# Notes\nintro B, reworded\n{SHARED}", replace=b, force=True)    # B's own text is replaced
    assert "intro B, reworded" in mem.get(b).content
    clock[0] += 1.5 * DAY                                  # C expires first: nothing to bring back
    mem.purge_expired()
    assert _conda_docs(mem) == [b]


def test_forget_after_reembed_brings_back_a_vector_of_the_new_model(tmp_path):
    with MemoryEngine(tmp_path, project="p", embedder=HashEmbedder(384)) as m:
        a = m.remember(f"# Notes\nintro A\n{SHARED}").id
        b = m.remember(f"# Notes\nintro B\n{SHARED}", force=True).id
        assert m.dream()["removed_nodes"] == 1
        kept, = _conda_docs(m)
        m.reembed(HashEmbedder(64), progress=False)
        m.forget(kept)
        assert _conda_docs(m) == [b if kept == a else a]
        blobs = m.store.query("SELECT length(vec) FROM vectors")
        assert {n for (n,) in blobs} == {2 * 64}
