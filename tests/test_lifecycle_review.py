"""Review findings on backup(), forget() after dream(), exchanges, TierPolicy, rotate() and re-embedding."""

import os
import sqlite3

import pytest

from ipy_memory import EmbedderMismatch, HashEmbedder, InvalidArgument, MemoryEngine
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
    with pytest.raises(InvalidArgument, match="not an ipy_memory database"):
        mem.backup(other)
    assert other.read_text() == "someone's notes"
    plain = tmp_path / "plain.sqlite3"
    sqlite3.connect(plain).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(InvalidArgument, match="not an ipy_memory database"):
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
    (tmp_path / ".y.sqlite3.partial").write_text("left by a killed run")
    assert mem.backup(tmp_path / "y.sqlite3")["bytes"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store", "y.sqlite3"]


# ------------------------------------------------------------------------------ forget and exchanges
def test_forgetting_a_turn_of_an_exchange_keeps_the_speakers(mem):
    r = mem.remember_exchange("chat-1", [{"role": "user", "content": "Where do sales land?"},
                                         {"role": "assistant", "content": "In warehouse.sales, nightly."},
                                         {"role": "user", "content": "And the backups?"}])
    assert mem.get(r.id).content.startswith("user: Where do sales land?")
    mem.forget(f"{r.id}#1")
    assert mem.get(r.id).content == "user: Where do sales land?\n\nuser: And the backups?"


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
