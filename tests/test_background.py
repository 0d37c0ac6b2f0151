"""fire() / fire_exchange() / flush(): background writes that never raise into the caller."""

import logging
import threading
import time

import pytest

from ipy_memory import EmbeddingError, InvalidArgument, MemoryEngine


@pytest.fixture
def mem(tmp_path):
    with MemoryEngine(tmp_path / "store", project="proj", session="s1") as m:
        yield m


def block_writer(m):
    """Occupy the writer thread until the returned event is set."""
    gate, started = threading.Event(), threading.Event()

    def hold():
        started.set()
        gate.wait(10)
    assert m._submit(hold, "test-gate")
    assert started.wait(5)
    return gate


def count(m):
    return m.store.query("SELECT count(*) FROM documents")[0][0]


def test_fire_returns_at_once_and_flush_waits(mem):
    assert mem.background_stats()["running"] is False and mem.flush() is True
    gate = block_writer(mem)
    t = time.perf_counter()
    assert all(mem.fire(f"background fact {i} about topic{i}", importance=0.7) for i in range(20))
    assert time.perf_counter() - t < 0.5 and count(mem) == 0
    assert mem.flush(timeout=0.05) is False               # still blocked
    gate.set()
    assert mem.flush(timeout=10) is True
    assert count(mem) == 20
    st = mem.background_stats()
    assert st["pending"] == 0 and st["written"] == 21 and st["errors"] == 0 and st["running"]
    assert mem.recall("topic7").hits[0].text.startswith("background fact 7")


def test_writer_exception_is_logged_never_raised(mem, monkeypatch, caplog):
    def boom(*a, **k):
        raise EmbeddingError("embedding server returned HTTP 503")
    monkeypatch.setattr(mem.embedder, "embed", boom)
    with caplog.at_level(logging.ERROR, logger="ipy_memory"):
        assert mem.fire("this write will fail") is True
        assert mem.flush(5)
    assert "HTTP 503" in caplog.text
    st = mem.background_stats()
    assert st["errors"] == 1 and "HTTP 503" in st["last_error"] and st["running"]
    monkeypatch.undo()
    assert mem.fire("the writer survived the failure") and mem.flush(5)
    assert count(mem) == 1


def test_unexpected_exception_logs_traceback(mem, monkeypatch, caplog):
    monkeypatch.setattr(mem.embedder, "embed", lambda texts: 1 / 0)
    with caplog.at_level(logging.ERROR, logger="ipy_memory"):
        mem.fire("x y z")
        mem.flush(5)
    assert "ZeroDivisionError" in caplog.text and caplog.records[-1].exc_info


def test_one_bad_item_in_a_batch_costs_only_itself(mem, caplog):
    gate = block_writer(mem)
    mem.fire("good one alpha")
    mem.fire("bad one", metadata={"x": {1, 2}})            # not JSON: only the writer finds out
    mem.fire("good two beta")
    with caplog.at_level(logging.ERROR, logger="ipy_memory"):
        gate.set()
        assert mem.flush(10)
    assert count(mem) == 2 and mem.background_stats()["errors"] == 1
    assert "metadata must be JSON-serialisable" in caplog.text


def test_bad_arguments_closed_and_read_only_engines_are_logged(mem, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="ipy_memory"):
        assert mem.fire("x", scop="project") is False
        assert mem.fire(b"bytes") is False and mem.fire("   ") is False
        assert mem.fire_exchange("s", "not a list") is False
    assert "unknown argument(s) ['scop']" in caplog.text and "non-empty str" in caplog.text
    with MemoryEngine(tmp_path / "store", read_only=True) as ro:
        assert ro.fire("x") is False
    mem.close()
    assert mem.fire("after close") is False
    with pytest.raises(InvalidArgument):
        mem.flush(timeout=-1)


def test_bounded_queue_drops_when_full(mem, caplog):
    mem.fire_queue_size, mem.fire_put_timeout = 2, 0.01   # before the writer exists
    gate = block_writer(mem)
    with caplog.at_level(logging.WARNING, logger="ipy_memory"):
        results = [mem.fire(f"queued fact {i}") for i in range(5)]
    assert results == [True, True, False, False, False] and "queue full" in caplog.text
    gate.set()
    assert mem.flush(10) and count(mem) == 2 and mem.background_stats()["dropped"] == 3


def test_metadata_is_copied_at_fire_time(mem):
    gate = block_writer(mem)
    meta = {"tag": "original"}
    mem.fire("copied metadata note", metadata=meta)
    meta["tag"] = "mutated"
    gate.set()
    mem.flush(5)
    assert mem.list_memories()[0].metadata == {"tag": "original"}


def test_fire_exchange_and_close_drains(tmp_path):
    m = MemoryEngine(tmp_path / "store", project="proj")
    gate = block_writer(m)
    msgs = [{"role": "user", "content": "Where do the nightly exports go?"},
            {"role": "assistant", "content": [{"type": "text", "text": "To s3://exports/nightly."}]}]
    assert m.fire_exchange("chat-9", msgs)
    for i in range(30):
        m.fire(f"drained on close {i}")
    threading.Timer(0.2, gate.set).start()
    m.close()                                               # waits for all 31 writes
    with MemoryEngine(tmp_path / "store", project="proj") as again:
        assert again.store.query("SELECT count(*) FROM documents")[0][0] == 31
        assert any("s3://exports/nightly" in h.text for h in again.recall("nightly exports").hits)


def test_flush_from_the_writer_thread_does_not_deadlock(mem):
    seen = []
    mem._submit(lambda: seen.append(mem.flush()), "self-flush")
    assert mem.flush(5) and seen == [False]


def test_an_engine_dropped_without_close_stops_its_writer(tmp_path):
    import gc
    m = MemoryEngine(tmp_path / "store", project="proj")
    m.fire("written before the engine is dropped")
    m.flush(5)
    writer = m._writer
    m.store.close()          # what close() would do, minus draining: then drop every reference
    del m
    gc.collect()
    writer.thread.join(5)
    assert not writer.thread.is_alive()


def test_background_writes_never_race_recalls_on_the_callers_thread(mem):
    mem.remember_many([f"seed memory {i} about topic{i % 20} and alpha{i}" for i in range(300)])
    for i in range(400):
        assert mem.fire(f"fired memory {i} about topic{i % 20} and beta{i}")
        mem.recall(f"topic{i % 20} beta{max(i - 3, 0)}")     # would hit BufferError on a shared index
    assert mem.flush(30) and mem.background_stats()["errors"] == 0
    mem.recall("anything")                                    # applies the writer's changes
    assert len(mem.shards.get("project:proj").lex) == mem.store.query("SELECT count(*) FROM nodes")[0][0] == 700
    assert mem.recall("beta399").hits[0].text.startswith("fired memory 399")


def test_fire_follows_the_engines_project_and_embedder(mem):
    mem.fire("note for the first project")
    mem.project = "other"
    mem.fire("note for the other project")
    mem.flush(5)
    assert {m.project for m in mem.list_memories(scope="project", project="proj")} == {"proj"}
    assert [m.content for m in mem.list_memories(scope="project", project="other")] == ["note for the other project"]
