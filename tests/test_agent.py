"""AutoRecall: injection into OpenAI / Anthropic message lists, skips, cooldown, timeouts, compat, capture."""

import copy
import re
import threading
import time

import pytest

from ipy_memory import EmbeddingError, InvalidArgument, MemoryEngine, NotFound
from ipy_memory.agent import DEFAULT_SKIP_PATTERNS, AutoRecall, is_recall_message

@pytest.fixture
def mem(tmp_path, clock):
    with MemoryEngine(tmp_path / "store", project="proj", session="s1", clock=lambda: clock[0]) as m:
        m.remember("# Environment\nUse the conda env `ds` for the sales analysis.\n"
                   "# Warehouse\nThe sales table is warehouse.sales_2024, refreshed nightly.")
        clock[0] += 7200
        m.remember("数据仓库的销售表每天凌晨刷新。")
        clock[0] += 7200
        yield m


def user(text):
    return {"role": "user", "content": text}


def check_block(text, max_chars):
    lines = text.split("\n")
    n = int(re.match(r'<memory-recall count="(\d+)">$', lines[0]).group(1))
    assert lines[-1] == "</memory-recall>" and len(text) <= max_chars
    assert len([ln for ln in lines[2:-1] if re.match(r"\[\d+\] ", ln)]) == n >= 1
    assert all(ln.startswith("  ") or re.match(r"\[\d+\] ", ln) for ln in lines[2:-1])   # frame unbroken
    return n


# ------------------------------------------------------------------------------ shapes
def test_openai_string_content(mem):
    auto = AutoRecall(mem)
    msgs = [{"role": "system", "content": "You are helpful."}, user("hello there"),
            {"role": "assistant", "content": "Hi!"}, user("Which conda env should I use for sales?")]
    frozen = copy.deepcopy(msgs)
    out = auto.inject(msgs, session_id="c1", turn_id=1)
    assert msgs == frozen and out is not msgs                       # input untouched
    assert len(out) == len(msgs) + 1 and out[-1] == msgs[-1] and out[:3] == msgs[:3]
    inj = out[-2]
    assert inj["role"] == "user" and isinstance(inj["content"], str)
    assert inj["source"] == {"kind": "plugin", "plugin": "ipy_memory", "form": "recall",
                             "id": auto.last_injection.id}
    check_block(inj["content"], 4000)
    assert "conda env `ds`" in inj["content"] and is_recall_message(inj)
    assert auto.stats()["injections"] == 1


def test_openai_content_parts_and_anthropic_blocks_keep_their_shape(mem):
    auto = AutoRecall(mem)
    parts = [user([{"type": "text", "text": "Where is the sales table?"},
                   {"type": "image_url", "image_url": {"url": "data:image/png;base64,xx"}}])]
    out = auto.inject(parts, session_id="c1", turn_id=1)
    assert out[0]["content"][0]["type"] == "text" and len(out[0]["content"]) == 1 and out[1] == parts[0]
    check_block(out[0]["content"][0]["text"], 4000)

    # Anthropic: the first step of a turn gets memory; tool-use steps of the same turn do not
    convo = [user([{"type": "text", "text": "What refreshes the sales table nightly?"}])]
    step1 = auto.inject(convo, session_id="c2", turn_id="t1")
    assert len(step1) == 2 and step1[0]["content"][0]["text"].startswith("<memory-recall")
    step2 = step1 + [{"role": "assistant", "content": [{"type": "tool_use", "id": "tu1", "name": "sql",
                                                        "input": {"q": "select 1"}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu1", "content": "1"}]}]
    assert auto.inject(step2, session_id="c2", turn_id="t1") == step2
    assert auto.stats()["skip_reasons"] == {"not first step": 1}


def test_tag_variants(mem):
    out = AutoRecall(mem, tag="name").inject([user("which conda env for sales?")], session_id="a", turn_id=1)
    assert out[0]["name"] == "ipy_memory" and "source" not in out[0]
    out = AutoRecall(mem, tag=None).inject([user("which conda env for sales?")], session_id="a", turn_id=1)
    assert set(out[0]) == {"role", "content"} and is_recall_message(out[0])
    # a later turn finds the human query past an untagged recall message
    nxt = out + [{"role": "assistant", "content": "Use ds."}, user("and the sales table name?")]
    auto = AutoRecall(mem, tag=None)
    res = auto.inject(nxt, session_id="a", turn_id=2)
    assert len(res) == len(nxt) + 1 and res[-1] == nxt[-1]
    with pytest.raises(InvalidArgument, match="tag"):
        AutoRecall(mem, tag="meta")


# ------------------------------------------------------------------------------ skips
@pytest.mark.parametrize("text", ["ok", "OK!", "thanks", "Thank you.", "ok, thanks", "got it 👍", "继续", "好的",
                                  "好的，谢谢", "嗯嗯", "ok 谢谢", "continue", "sure"])
def test_acknowledgements_are_skipped(mem, text):
    auto = AutoRecall(mem)
    msgs = [user(text)]
    assert auto.inject(msgs, session_id="c", turn_id=1) == msgs
    assert auto.stats()["skip_reasons"] == {"acknowledgement": 1}


def test_short_queries_custom_patterns_and_no_user_message(mem):
    auto = AutoRecall(mem)
    assert auto.inject([user("db")], session_id="c", turn_id=1) == [user("db")]
    assert auto.inject([user("👍👍")], session_id="c", turn_id=2) == [user("👍👍")]
    assert auto.inject([{"role": "system", "content": "x"}], session_id="c", turn_id=3)[0]["role"] == "system"
    assert auto.stats()["skip_reasons"] == {"too short": 2, "no user message": 1}
    custom = AutoRecall(mem, skip_patterns=DEFAULT_SKIP_PATTERNS + (r"lol+",))
    assert len(custom.inject([user("lolll")], session_id="c", turn_id=1)) == 1
    assert len(custom.inject([user("continue with the sales table")], session_id="c", turn_id=2)) == 2
    with pytest.raises(InvalidArgument, match="skip_patterns"):
        AutoRecall(mem, skip_patterns=["("])


def test_once_per_turn_and_cooldown(mem, clock):
    auto = AutoRecall(mem, cooldown_s=60)
    q = [user("Which conda env for the sales analysis?")]
    assert len(auto.inject(q, session_id="c", turn_id=1)) == 2
    assert auto.inject(q, session_id="c", turn_id=1) == q                  # same turn: never twice
    assert auto.inject(q, session_id="c", turn_id=2) == q                  # same query within cooldown
    assert len(auto.inject(q, session_id="other", turn_id=2)) == 2         # cooldown is per session
    clock[0] += 30
    # a different question whose hits were all injected 30 s ago: already in the context
    assert auto.inject([user("conda env sales analysis please")], session_id="c", turn_id=3) == \
        [user("conda env sales analysis please")]
    clock[0] += 31
    assert len(auto.inject(q, session_id="c", turn_id=4)) == 2
    assert auto.stats()["skip_reasons"] == {"already injected": 1, "cooldown": 2}
    assert auto.stats()["injections"] == 3


def test_no_hits_and_min_score(mem):
    auto = AutoRecall(mem)
    assert auto.inject([user("quantum chromodynamics lattice")], session_id="c", turn_id=1) == \
        [user("quantum chromodynamics lattice")]
    assert auto.stats()["skip_reasons"] == {"no hits": 1}
    strict = AutoRecall(mem, min_score=9.9)
    assert len(strict.inject([user("conda env for sales")], session_id="c", turn_id=1)) == 1


# ------------------------------------------------------------------------------ limits
@pytest.mark.parametrize("max_chars,max_node_chars", [(500, 1200), (700, 60), (4000, 80), (4000, 1200)])
def test_limits_never_break_the_frame(mem, max_chars, max_node_chars):
    mem.remember("# Long\n" + " ".join(f"sales detail number {i} of the warehouse" for i in range(200)))
    auto = AutoRecall(mem, max_nodes=5, max_chars=max_chars, max_node_chars=max_node_chars)
    out = auto.inject([user("sales warehouse detail")], session_id="c", turn_id=1)
    block = out[0]["content"]
    n = check_block(block, max_chars)
    assert n <= 5 and n == len(auto.last_injection.hit_ids) and auto.last_injection.chars == len(block)
    bodies = re.split(r"\n\[\d+\] [^\n]*\n", "\n" + "\n".join(block.split("\n")[2:-1]))[1:]
    assert all(len(b.replace("\n  ", "\n")) - 2 <= max_node_chars for b in bodies)


def test_argument_validation(mem):
    for kw in (dict(max_chars=100), dict(max_nodes=0), dict(timeout_ms=0), dict(cooldown_s=-1),
               dict(min_score="high"), dict(scope="nowhere"), dict(enabled="yes"), dict(clock=5)):
        with pytest.raises(InvalidArgument):
            AutoRecall(mem, **kw)
    with pytest.raises(InvalidArgument):
        AutoRecall(object())
    auto = AutoRecall(mem)
    for bad in ("text", [1], [user("x"), "y"]):
        with pytest.raises(InvalidArgument):
            auto.inject(bad, session_id="c", turn_id=1)
    with pytest.raises(InvalidArgument):
        auto.inject([user("x")], session_id="", turn_id=1)
    with pytest.raises(InvalidArgument):
        auto.inject([user("x")], session_id="c", turn_id=[1])


# ------------------------------------------------------------------------------ slow / failing engines
class SlowEngine:
    """A stand-in engine whose recall takes `delay` seconds, or raises `error`."""

    def __init__(self, real, delay=0.0, error=None):
        self.real, self.delay, self.error = real, delay, error
        self.settings, self.clock, self.read_only = real.settings, real.clock, False
        self.release = threading.Event()

    def recall(self, query, **kw):
        if self.error:
            raise self.error
        self.release.wait(self.delay)
        return self.real.recall(query, **kw)

    def remember_exchange(self, *a, **kw):
        if self.error:
            raise self.error
        return self.real.remember_exchange(*a, **kw)


def test_timeout_proceeds_without_memory_then_recovers(mem, clock):
    slow = SlowEngine(mem, delay=5)
    auto = AutoRecall(slow, timeout_ms=50)
    q = [user("Which conda env for the sales analysis?")]
    t = time.perf_counter()
    assert auto.inject(q, session_id="c", turn_id=1) == q
    assert time.perf_counter() - t < 1.0
    st = auto.stats()
    assert st["timeouts"] == 1 and st["compat"]["auto_recall"] == "degraded"
    assert "timeout_ms=50" in st["compat"]["reason"] and st["skip_reasons"] == {"recall failed": 1}
    q2 = [user("Where is the sales table?")]
    assert auto.inject(q2, session_id="c", turn_id=2) == q2                # previous recall still running
    assert auto.stats()["busy"] == 1
    slow.release.set()
    slow.delay = 0
    auto._inflight.join(5)
    assert len(auto.inject(q, session_id="c", turn_id=3)) == 2              # a failed try is no cooldown
    assert auto.stats()["compat"] == {"auto_recall": "on", "reason": None, "capture": "on", "capture_reason": None}


def test_engine_errors_degrade_and_are_reported(mem):
    broken = SlowEngine(mem, error=EmbeddingError("embedding server returned HTTP 503"))
    auto = AutoRecall(broken)
    q = [user("Which conda env for the sales analysis?")]
    assert auto.inject(q, session_id="c", turn_id=1) == q
    c = auto.stats()["compat"]
    assert c["auto_recall"] == "degraded" and "HTTP 503" in c["reason"] and auto.stats()["errors"] == 1
    assert auto.capture([user("remember: deploys are on Tuesdays"), {"role": "assistant", "content": "Noted."}],
                        session_id="c") is None
    c = auto.stats()["compat"]
    assert c["capture"] == "degraded" and "HTTP 503" in c["capture_reason"]


def test_compat_off_states(mem, tmp_path):
    assert AutoRecall(mem, enabled=False).stats()["compat"]["auto_recall"] == "off"
    off = AutoRecall(mem, enabled=False, capture=False)
    assert off.inject([user("conda env for sales")], session_id="c", turn_id=1) == [user("conda env for sales")]
    assert off.capture([user("conda env for sales")], session_id="c") is None
    assert off.stats()["compat"]["capture"] == "off" and off.stats()["skip_reasons"] == {"disabled": 1}
    with MemoryEngine(tmp_path / "store", read_only=True) as ro:
        assert AutoRecall(ro).stats()["compat"]["capture"] == "off"
    auto = AutoRecall(mem)
    mem.close()
    assert auto.stats()["compat"]["auto_recall"] == "off"
    assert auto.inject([user("conda env for sales")], session_id="c", turn_id=1) == [user("conda env for sales")]


# ------------------------------------------------------------------------------ feedback
def test_feedback_precision(mem):
    auto = AutoRecall(mem)
    ids = []
    for i, q in enumerate(["Which conda env for sales?", "Where is the sales table?", "销售表什么时候刷新？"]):
        assert len(auto.inject([user(q)], session_id=f"s{i}", turn_id=1)) == 2
        ids.append(auto.last_injection.id)
    assert auto.stats()["precision"] is None
    auto.feedback(ids[0], used=True)
    auto.feedback(ids[1], used=False)
    assert auto.stats()["precision"] == 0.5 and auto.stats()["feedback"] == 2
    auto.feedback(ids[1], used=True)                                       # a correction replaces
    assert auto.stats()["precision"] == 1.0
    with pytest.raises(NotFound):
        auto.feedback("inj-nope")
    with pytest.raises(InvalidArgument):
        auto.feedback(ids[2], used="yes")
    for bad in (123, None, b"inj"):                 # a wrong type is bad input, not a missing injection
        with pytest.raises(InvalidArgument, match="injection_id"):
            auto.feedback(bad)


# ------------------------------------------------------------------------------ capture
def exchange_docs(m):
    return m.store.query("SELECT id FROM documents WHERE kind = 'exchange'")


def test_capture_openai_string_and_parts(mem):
    auto = AutoRecall(mem)
    msgs = [user("Our deploy key is sk-proj-abcdefghijklmnopqrstuvwx; which conda env for sales?"),
            {"role": "assistant", "content": [{"type": "text", "text": "Deploys run on Tuesdays from CI."}]}]
    withmem = auto.inject(msgs[:1], session_id="c", turn_id=1) + msgs[1:]
    assert len(withmem) == 3
    r = auto.capture(withmem, session_id="chat-1")
    assert r.stored and r.node_count == 2                                   # the recall block is not stored
    text = mem.get(r.id).content
    assert "[REDACTED:api-key]" in text and "sk-proj" not in text and "memory-recall" not in text
    assert auto.stats()["captures"] == 1


def test_capture_anthropic_blocks_and_trivial(mem):
    auto = AutoRecall(mem)
    msgs = [user([{"type": "text", "text": "How many rows does sales_2024 have?"}]),
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "sql", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "1200"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "It has 1,200 rows."}]}]
    r = auto.capture(msgs, session_id="chat-2")
    assert r.node_count == 2 and "1,200 rows" in mem.get(r.id).content
    assert auto.capture([user("ok"), {"role": "assistant", "content": "Thanks!"}], session_id="chat-3") is None
    with pytest.raises(InvalidArgument):
        auto.capture("ok", session_id="c")
    with pytest.raises(InvalidArgument):
        auto.capture(msgs, session_id="c", scope="nowhere")
    assert auto.capture(msgs, session_id="chat-4", background=True) is True
    assert mem.flush(5) and len(exchange_docs(mem)) == 2


def test_capture_stores_each_turn_once(mem):
    """Called after every turn with the whole conversation, capture stored all of it each time (four
    turns of two messages: twenty sections), and recall returned the same text several times."""
    auto, msgs = AutoRecall(mem), [{"role": "system", "content": "You are a careful data assistant."}]
    for turn in range(4):
        msgs += [user(f"Question {turn}: where does the kelp dataset {turn} live?"),
                 {"role": "assistant", "content": f"Answer {turn}: in bucket kelp-{turn}."}]
        auto.capture(msgs, session_id="chat")
    assert auto.capture(msgs, session_id="chat") is None                  # nothing new
    texts = [b for (b,) in mem.store.query("SELECT n.body FROM nodes n JOIN documents d ON d.id = n.document_id "
                                           "WHERE d.kind = 'exchange'")]
    assert sorted(texts) == sorted(m["content"] for m in msgs[1:])       # each once; no system prompt
    hits = [h.text for h in mem.recall("kelp dataset bucket", limit=10)]
    assert len(hits) == len(set(hits))


def test_capture_after_an_edit_stores_from_the_change(mem):
    auto = AutoRecall(mem)
    first = [user("Which warehouse holds the kelp table?"), {"role": "assistant", "content": "The east one."}]
    auto.capture(first, session_id="chat")
    edited = [first[0], {"role": "assistant", "content": "The west one, since Monday."}]   # regenerated
    r = auto.capture(edited, session_id="chat")
    assert r.node_count == 1 and "west one" in mem.get(r.id).content
    assert auto.capture(first, session_id="another chat").node_count == 2   # per session


def test_capture_rejects_unknown_options(mem):
    with pytest.raises(InvalidArgument, match="scop"):
        AutoRecall(mem).capture([user("Where is the kelp table?")], session_id="c", scop="global")
    assert not exchange_docs(mem)


def test_tool_result_messages_and_roleless_items(mem):
    auto = AutoRecall(mem)
    mixed = [user("Which conda env for sales?"),
             {"type": "function_call", "name": "sql", "arguments": "{}"},            # Responses-API item
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"},
                                          {"type": "text", "text": "here is the result"}]}]
    assert auto.inject(mixed, session_id="c", turn_id=1) == mixed
    assert auto.stats()["skip_reasons"] == {"not first step": 1}
    r = auto.capture(mixed + [{"role": "assistant", "content": "Use the ds env."}], session_id="c")
    assert r.stored and "Use the ds env." in mem.get(r.id).content


def test_capture_keeps_a_yes_that_answers_the_previous_turns_question(mem):
    """A turn that opens with a bare "yes" answering the assistant's question from the turn before
    was dropped as an acknowledgement: that question was stored by the previous capture, so the new
    messages alone showed no question before it. The user's decision was lost."""
    auto = AutoRecall(mem)
    msgs = [user("The kelp table has duplicate rows from the March backfill."),
            {"role": "assistant", "content": "Should I drop the duplicates from the kelp table?"}]
    auto.capture(msgs, session_id="chat")
    msgs += [user("yes"), {"role": "assistant", "content": "Done."}]
    r = auto.capture(msgs, session_id="chat")
    assert r is not None and r.node_count == 2 and "user: yes" in mem.get(r.id).content
    msgs += [user("ok"), {"role": "assistant", "content": "Anything else on the kelp table?"}]
    r = auto.capture(msgs, session_id="chat")          # an acknowledgement after no question stays out
    assert r.node_count == 1 and "user: ok" not in mem.get(r.id).content


def test_remember_exchange_after_question(mem):
    """after_question=True: the messages continue a conversation whose last message asked a question."""
    answer = [{"role": "user", "content": "No."}, {"role": "assistant", "content": "Then I will wait."}]
    assert mem.remember_exchange("chat", answer).node_count == 1
    r = mem.remember_exchange("chat-2", answer, after_question=True)
    assert r.node_count == 2 and mem.get(r.id).content.startswith("user: No.")
    with pytest.raises(InvalidArgument, match="after_question"):
        mem.remember_exchange("chat-3", answer, after_question="yes")
