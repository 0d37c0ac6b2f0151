"""WAL checkpoints: a large write leaves its checkpoint to a background connection; smaller writes
keep SQLite's own (which also catch up when the background falls behind). A checkpoint copies the
WAL into the database file, so that file's size tells whether one ran."""

import logging
import os
import signal
import threading

import pytest

from ipy_memory import MemoryEngine, store


def _memories(n: int, tag: str = "") -> list[dict]:
    return [{"content": f"note {tag}{i}: the {['amber', 'cobalt', 'jade'][i % 3]} lantern sits on shelf {i}",
             "force": True} for i in range(n)]


def _db_bytes(data_dir) -> int:
    return (data_dir / store.DB_NAME).stat().st_size


@pytest.fixture
def small_autocheckpoint(monkeypatch):
    """SQLite's own checkpoint after any commit that leaves 10 pages or more in the WAL."""
    monkeypatch.setattr(store, "AUTOCHECKPOINT_PAGES", 10)


def _held_requests(mem, monkeypatch) -> list:
    """Background checkpoint requests of `mem`, recorded and not run."""
    requests = []
    monkeypatch.setattr(mem.store.checkpoints, "request", lambda: requests.append(1))
    return requests


def _empty_wal(mem) -> None:
    mem.store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def test_a_large_write_commits_without_checkpointing_and_the_background_does_it(data_dir, monkeypatch,
                                                                                 small_autocheckpoint):
    with MemoryEngine(data_dir, project="p") as mem:
        mem.remember("a first note")
        _empty_wal(mem)
        before = _db_bytes(data_dir)
        requests = _held_requests(mem, monkeypatch)
        mem.remember_many(_memories(300))
        assert requests == [1]
        assert _db_bytes(data_dir) == before          # committed into the WAL only
        assert mem.store.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 10      # restored
        monkeypatch.undo()
        mem.store.checkpoints.request()
        mem.store.checkpoints.last[1].result()
        assert _db_bytes(data_dir) > before
        assert len(mem.recall("cobalt lantern shelf 7", limit=5).hits) == 5


def test_small_writes_keep_sqlites_checkpoint_which_catches_up(data_dir, monkeypatch, small_autocheckpoint):
    with MemoryEngine(data_dir, project="p") as mem:
        mem.remember("a first note")
        _empty_wal(mem)
        requests = _held_requests(mem, monkeypatch)
        mem.remember_many(_memories(300))             # its background checkpoint never runs
        before = _db_bytes(data_dir)
        mem.remember("one more note about the jade lantern")
        assert requests == [1]                        # the small write asked for none...
        assert _db_bytes(data_dir) > before           # ...and checkpointed the WAL itself


def test_a_failing_background_checkpoint_is_logged_and_loses_nothing(data_dir, monkeypatch, caplog):
    real_connect = store.sqlite3.connect

    def connect(*args, **kwargs):
        if threading.current_thread().name == "ipy_memory-checkpoint":
            raise store.sqlite3.OperationalError("unable to open database file")
        return real_connect(*args, **kwargs)
    monkeypatch.setattr(store.sqlite3, "connect", connect)
    with caplog.at_level(logging.WARNING, logger="ipy_memory"):
        with MemoryEngine(data_dir, project="p") as mem:
            ids = [r.id for r in mem.remember_many(_memories(300))]
            mem.store.checkpoints.last[1].result()
            mem.remember_many(_memories(300, "b"))
        assert "background checkpoint" in caplog.text
    with MemoryEngine(data_dir, project="p") as mem:
        assert mem.stats()["documents"] == 600 and mem.get(ids[5]).content.startswith("note 5:")


def test_close_waits_for_the_checkpoint_and_closes_its_connection(data_dir):
    with MemoryEngine(data_dir, project="p") as mem:
        mem.remember_many(_memories(300))
        assert mem.store.checkpoints.last is not None
    # the last connection to a database removes its WAL when it closes: none of ours is left open
    assert not (data_dir / (store.DB_NAME + "-wal")).exists()


def test_a_forked_child_does_not_wait_for_its_parents_checkpoint(data_dir):
    with MemoryEngine(data_dir, project="p") as mem:
        gate = threading.Event()
        store._CHECKPOINTS.submit(gate.wait)          # the parent's checkpoint waits behind this
        try:
            mem.remember_many(_memories(300))
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    signal.alarm(10)                  # the task never runs here: waiting would hang
                    mem.store.checkpoints.close()
                    code = 0
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0
        finally:
            gate.set()
