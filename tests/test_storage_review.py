"""Storage review findings: an interrupted sync or write leaves nothing out of the indexes. The
interrupts land through hooks, not timing."""

import pytest

from ipy_memory import MemoryEngine, _shards


def texts(mem, query):
    return [h.text for h in mem.recall(query)]


def top(mem, query):
    return next(iter(texts(mem, query)), None)


@pytest.fixture
def small_snapshots(monkeypatch):
    """Snapshots of every space, however small (only large spaces are saved by default)."""
    monkeypatch.setattr(_shards, "SNAPSHOT_MIN_NODES", 1)


# ---------------------------------------------------------------------------- interrupted syncs
def test_interrupted_sync_applies_the_changes_later_and_saves_no_snapshot_without_them(data_dir, small_snapshots):
    b = MemoryEngine(data_dir, project="p", session="s")
    b.remember_many([{"content": f"early memory {i} about lemurs", "force": True} for i in range(20)])
    assert texts(b, "lemurs")                                  # the space is loaded (and dirty)
    with MemoryEngine(data_dir, project="p", session="s") as a:
        a.remember("a memory about geckos")
    real = b.shards._apply_adds

    def interrupted(*args):
        b.shards._apply_adds = real
        raise KeyboardInterrupt                                # "interrupt kernel" while it applies them
    b.shards._apply_adds = interrupted
    with pytest.raises(KeyboardInterrupt):
        b.recall("geckos")
    assert top(b, "geckos") == "a memory about geckos"
    b.close()                                                  # saves its snapshot
    with MemoryEngine(data_dir, project="p", session="s") as c:
        assert top(c, "geckos") == "a memory about geckos"


def test_write_interrupted_before_its_own_sync_is_applied_later(data_dir, monkeypatch):
    mem = MemoryEngine(data_dir, project="p", session="s")
    mem.remember("a memory about lemurs")
    assert texts(mem, "lemurs")
    real = _shards.Shards.sync

    def interrupted(self, force=False, own=None):
        if own is not None:                                    # the sync right after the commit
            monkeypatch.setattr(_shards.Shards, "sync", real)
            raise KeyboardInterrupt
        return real(self, force, own)
    monkeypatch.setattr(_shards.Shards, "sync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        mem.remember("a memory about geckos")
    assert top(mem, "geckos") == "a memory about geckos"
    mem.close()
