"""A review of the twenty-third session's own changes: each test failed on the code before its fix."""

from __future__ import annotations

import logging

import pytest

from ipy_memory import MemoryEngine
from ipy_memory.agent import AutoRecall
from ipy_memory.tools import Param, ToolResult, ToolSpec, TOOLS, call_tool, register


def test_a_snapshot_older_than_a_wholly_trimmed_log_is_not_trusted(tmp_path):
    t = [1_000_000.0]
    with MemoryEngine(tmp_path, project="p", clock=lambda: t[0]) as a:      # >= 256 nodes: a snapshot at close
        a.remember_many([f"note number {i} about topic {i * 7}" for i in range(300)])
        a.recall("topic")
    with MemoryEngine(tmp_path, project="p", clock=lambda: t[0]) as b:      # never loads the space: no snapshot
        b.remember("the zebra migration finished on Tuesday", force=True)
    t[0] += 10
    with MemoryEngine(tmp_path, project="p", clock=lambda: t[0]) as c:
        c.log_retention = 0                                                  # (as if a week had passed)
        c.compact()
        t[0] += 10
        c.compact()
        assert c.store.query("SELECT count(*) FROM changes")[0][0] == 0
    with MemoryEngine(tmp_path, project="p", clock=lambda: t[0]) as e:
        assert [h.text for h in e.recall("zebra migration")][:1] == ["the zebra migration finished on Tuesday"]


def test_a_memory_remembered_again_keeps_its_sections_findable_after_its_stand_in_expires(tmp_path):
    t = [1_000_000.0]
    deploy = "# Deploy\nThe deploy key rotates every Friday at noon.\n# Owner\n"
    with MemoryEngine(tmp_path, project="p", clock=lambda: t[0]) as m:
        m.remember(deploy + "Team amber owns it.", ttl=1000)
        m2 = m.remember(deploy + "Team violet owns it.", ttl=100).id
        m.dream()                                       # m2's Deploy section is set aside: m1's stands in
        again = m.remember(deploy + "Team violet owns it.", ttl=5000)
        assert again.deduped and again.id == m2         # m2 now outlives m1
        t[0] += 2000                                    # m1 has expired, m2 has not
        hits = m.recall("deploy key rotates Friday")
        assert any(h.document_id == m2 and "rotates every Friday" in h.text for h in hits)
        assert [h.document_id for h in m.recall("deploy key", path="Deploy")][:1] == [m2]


def test_path_reaches_exchanges_stored_with_their_spacing_as_typed(tmp_path):
    with MemoryEngine(tmp_path, project="p") as m:
        r = m.remember_exchange("chat  1", [{"role": "user", "content": "where is the lantern stored?"},
                                            {"role": "assistant", "content": "in the attic box"}])
        with m.store.write() as db:         # as stored before exchange paths were squeezed
            db.execute("UPDATE nodes SET path = replace(path, 'chat 1', 'chat  1') WHERE document_id = ?", (r.id,))
        m.shards.unload({s for s in m.shards.loaded})
        for path in ("chat  1", "chat 1", "chat  1/user"):
            assert {h.document_id for h in m.recall("lantern attic", path=path)} == {r.id}, path


def test_a_users_own_tool_runs_through_call_tool(tmp_path):
    def echo(engine, a, meta):
        return ToolResult("test_echo", a["text"], {"text": a["text"]})
    register(ToolSpec("test_echo", "Echo", "Echo text back.", {"text": Param("string", "text", required=True)}, echo))
    try:
        with MemoryEngine(tmp_path, project="p") as mem:
            r = call_tool("test_echo", {"text": "hi"}, engine=mem)
            assert not r.is_error and r.text == "hi"
    finally:
        TOOLS.pop("test_echo", None)


def test_a_failed_background_capture_is_a_background_error(tmp_path, caplog):
    with MemoryEngine(tmp_path, project="p") as m:
        auto = AutoRecall(m)
        msgs = [{"role": "user", "content": "Where does the nightly export land?"},
                {"role": "assistant", "content": "In s3://exports/nightly."}]
        with caplog.at_level(logging.ERROR, logger="ipy_memory"):
            assert auto.capture(msgs, session_id="s1", background=True, importance=5) is True   # fails in the writer
            assert m.flush(30)
        stats = m.background_stats()
        assert stats["errors"] == 1 and stats["written"] == 0 and "importance" in stats["last_error"]
        assert auto.stats()["capture_errors"] == 1


def test_a_users_tool_that_returns_no_tool_result_is_the_callers_error(tmp_path):
    from ipy_memory import InvalidArgument
    register(ToolSpec("test_bad", "Bad", "Returns a dict.", {}, lambda engine, a, meta: {"text": "hi"}))
    try:
        with MemoryEngine(tmp_path, project="p") as mem:
            with pytest.raises(InvalidArgument, match="must return a ToolResult"):
                call_tool("test_bad", {}, engine=mem)
    finally:
        TOOLS.pop("test_bad", None)
