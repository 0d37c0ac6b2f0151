"""Lexical snapshots: used on reopen, replayed forward, ignored when damaged, stale or foreign."""

import shutil

import pytest

from ipy_memory import MemoryEngine
from ipy_memory import _shards

TEXTS = [f"entry {i}: the {['amber', 'cobalt', 'jade', 'onyx'][i % 4]} lantern number {i % 97}" for i in range(2500)]
QUERIES = ["amber lantern 12", "cobalt", "jade lantern number 5", "onyx 96"]


def results(mem):
    return [[(h.id, round(h.score, 4)) for h in mem.recall(q)] for q in QUERIES]


@pytest.fixture
def store(tmp_path):
    with MemoryEngine(tmp_path, project="p") as mem:
        mem.remember_many([{"content": t, "force": True} for t in TEXTS])
        expected = results(mem)
    return tmp_path, expected


def loaded_from_snapshot(mem, monkeypatch):
    calls = []
    real = _shards.Shards._rows
    monkeypatch.setattr(_shards.Shards, "_rows",
                        lambda self, where, params: calls.append((where, tuple(params))) or real(self, where, params))
    mem.recall("amber")
    return ("d.space = ?", ("project:p",)) not in calls


def test_snapshot_written_and_used(store, monkeypatch):
    path, expected = store
    snaps = list((path / "index").glob("*.lex.npz"))
    assert len(snaps) == 1
    with MemoryEngine(path, project="p") as mem:
        assert loaded_from_snapshot(mem, monkeypatch)
        assert results(mem) == expected


def test_snapshot_replays_later_changes(store, monkeypatch):
    path, _ = store
    with MemoryEngine(path, project="p") as writer:           # shard never loaded: snapshot goes stale
        new = writer.remember("a brand new amber lantern of unusual make").id
        old = writer.list_memories(limit=1, offset=10)[0].id
        writer.forget(old)
    with MemoryEngine(path, project="p") as mem:
        assert loaded_from_snapshot(mem, monkeypatch)
        ids = {h.document_id for h in mem.recall("amber lantern unusual make", limit=50)}
        assert new in ids and old not in ids
        assert len(mem.shards.get("project:p").lex) == len(TEXTS)


@pytest.mark.parametrize("damage", ["garbage", "truncate", "foreign"])
def test_bad_snapshot_is_rebuilt(store, tmp_path_factory, damage, monkeypatch):
    path, expected = store
    snap = next((path / "index").glob("*.lex.npz"))
    if damage == "garbage":
        snap.write_bytes(b"\x00not a zip" * 100)
    elif damage == "truncate":
        snap.write_bytes(snap.read_bytes()[:500])
    else:                                                     # a snapshot from another store
        other = tmp_path_factory.mktemp("other")
        with MemoryEngine(other, project="p") as mem:
            mem.remember_many([{"content": t + " different", "force": True} for t in TEXTS])
            mem.recall("amber")                                  # loads the space, so it is snapshotted
        shutil.copy(next((other / "index").glob("*.lex.npz")), snap)
    with MemoryEngine(path, project="p") as mem:
        assert not loaded_from_snapshot(mem, monkeypatch)
        assert results(mem) == expected
