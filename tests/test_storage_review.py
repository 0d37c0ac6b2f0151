"""Storage review findings: an interrupted sync or write leaves nothing out of the indexes; each
restore of one backup file is a store of its own for the index snapshots; reembed() stages what
another kernel stores just before its swap; a kernel that missed exactly one trimmed change
reloads. The interrupts and the other kernel's writes land through hooks, not timing."""

import shutil
import time

import pytest

from ipy_memory import MemoryEngine, _reembed, _shards
from ipy_memory.embeddings.hashing import HashEmbedder


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


# ---------------------------------------------------------------------------- restored backups
def test_each_restore_of_a_backup_is_another_store_for_the_snapshots(tmp_path, small_snapshots):
    live, copy = tmp_path / "live", tmp_path / "backup.sqlite3"
    with MemoryEngine(live, project="p", session="s") as mem:
        mem.remember_many([{"content": f"base note {i} about topic{i}", "force": True} for i in range(5)])
        mem.backup(copy)

    def restore():
        for suffix in ("", "-wal", "-shm"):
            (live / f"memory.sqlite3{suffix}").unlink(missing_ok=True)
        shutil.copy(copy, live / "memory.sqlite3")

    restore()
    with MemoryEngine(live, project="p", session="s") as mem:      # its close saves the space's snapshot
        mem.remember_many([{"content": f"first history {i} about xylophone{i}", "force": True} for i in range(5)])
        assert top(mem, "xylophone1") == "first history 1 about xylophone1"
        first_id = mem.store.get_meta("store_id")
    restore()
    with MemoryEngine(live, project="p", session="s") as mem:
        # the log passes the first history's snapshot, whose node keys are now other rows
        mem.remember_many([{"content": f"second history {i} about trombone{i}", "force": True} for i in range(3)])
        mem.remember_many([{"content": f"global filler {i}", "scope": "global", "force": True} for i in range(10)])
        assert top(mem, "trombone1") == "second history 1 about trombone1"
        assert not any("history" in t for t in texts(mem, "xylophone1"))
        assert mem.store.get_meta("store_id") != first_id


def test_a_store_keeps_its_id_and_a_backup_gets_one_at_its_first_open(tmp_path):
    live, copy = tmp_path / "live", tmp_path / "backup.sqlite3"
    with MemoryEngine(live, project="p", session="s") as mem:
        mem.remember("a memory")
        own = mem.store.get_meta("store_id")
        mem.backup(copy)
    with MemoryEngine(live, project="p", session="s") as mem:
        assert mem.store.get_meta("store_id") == own
    restored = tmp_path / "restored"
    restored.mkdir()
    shutil.copy(copy, restored / "memory.sqlite3")
    ids = []
    for _ in range(2):
        with MemoryEngine(restored, project="p", session="s") as mem:
            ids.append(mem.store.get_meta("store_id"))
            assert mem.store.get_meta("backup_of") is None
    assert ids[0] == ids[1] != own


# ---------------------------------------------------------------------------- reembed
def _late_writer(a, b, every_time: bool):
    """`a.store.query` hooked: whenever re-embedding finds nothing left to stage, `b` (another
    kernel) stores a memory before the swap begins."""
    late = []
    real = a.store.query

    def query(sql, params=()):
        rows = real(sql, params)
        if "vectors_next" in sql and "LIMIT" in sql and not rows and (every_time or not late):
            late.append(b.remember(f"a late memory {len(late)} about kangaroos", force=True).id)
        return rows
    a.store.query = query
    return late


@pytest.mark.parametrize("every_time", [False, True], ids=["once", "at-every-try"])
def test_reembed_stages_what_another_kernel_stores_before_the_swap(data_dir, every_time):
    a = MemoryEngine(data_dir, project="p", session="s")
    a.remember_many([f"note {i} about subject{i}" for i in range(20)])
    b = MemoryEngine(data_dir, project="p", session="s")
    late = _late_writer(a, b, every_time)
    new = HashEmbedder(dim=256)
    a.reembed(new, progress=False)
    assert len(late) == (_reembed._SWAP_TRIES if every_time else 1)       # the last one staged under the lock
    rows = a.store.query("SELECT n.key, length(v.vec) FROM nodes n LEFT JOIN vectors v ON v.node_key = n.key")
    assert len(rows) == 20 + len(late) and {size for _, size in rows} == {2 * 256}
    assert a.store.query("SELECT count(*) FROM vectors_next")[0][0] == 0
    assert [h.document_id for h in a.recall("late memory 0 kangaroos", limit=1)] == [late[0].split("#")[0]]
    a.close()
    b.close()


# ---------------------------------------------------------------------------- change-log trim
def test_a_kernel_that_missed_one_trimmed_change_reloads(data_dir):
    now = [time.time()]
    a = MemoryEngine(data_dir, project="p", session="s", clock=lambda: now[0])
    a.remember("alpha bravo charlie first memory")
    b = MemoryEngine(data_dir, project="p", session="s")          # idle across the two compactions
    assert texts(b, "alpha bravo")
    a.remember("zebra quokka platypus second memory")             # the one change b has not applied
    a.compact()
    now[0] += 8 * 86400
    a.compact()                                                   # trims the log up to that change
    assert int(a.store.get_meta("changes_floor")) == b.shards.seq + 1
    assert top(b, "zebra quokka platypus") == "zebra quokka platypus second memory"
    a.close()
    b.close()


def test_a_wholly_trimmed_change_log_keeps_its_last_seq_and_the_snapshots(data_dir, small_snapshots):
    """compact() may trim every row of the log: the last seq given is still known, so the snapshots
    saved at it stay replayable (max(seq) of the empty log was 0, older than every snapshot)."""
    now = [time.time()]
    with MemoryEngine(data_dir, project="p", clock=lambda: now[0]) as a:
        a.remember_many([f"entry {i}: the amber lantern number {i}" for i in range(20)])
        last = a.store.max_seq()
        a.compact()
        now[0] += 8 * 86400
        a.compact()
        assert a.store.query("SELECT count(*) FROM changes")[0][0] == 0
        assert a.store.max_seq() == last
    with MemoryEngine(data_dir, project="p") as b:
        assert b.shards.seq == last
        loads = []
        original = b.shards._replayable
        b.shards._replayable = lambda *args, **kw: loads.append(original(*args, **kw)) or loads[-1]
        assert top(b, "amber lantern number 7") == "entry 7: the amber lantern number 7"
        assert loads and all(seq == last for seq in loads)
