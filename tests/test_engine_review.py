"""Review findings on the engine's user-visible semantics (review of e9d3713): replacements, batch
dedup, recall filters and scores, dream/related, exchanges, Markdown and the token counter."""

import pytest

from ipy_memory import InvalidArgument, MemoryEngine, NotFound, Settings
from ipy_memory.config import DAY


@pytest.fixture
def mem(tmp_path, clock):
    with MemoryEngine(tmp_path / "store", project="p", session="s1", clock=lambda: clock[0]) as m:
        yield m


# ------------------------------------------------------------------------------ 1. replace= keeps what is not given
def test_replace_keeps_scope_importance_metadata_and_expiry(mem, clock):
    g = mem.remember("The VPN needs the 2FA app", scope="global", importance=0.9, metadata={"k": 1})
    clock[0] += 10
    r = mem.remember("The VPN needs the 2FA app and a hardware key", replace=g.id)
    m = mem.get(g.id)
    assert (m.scope, m.space, m.expires_at, m.importance, m.metadata) == ("global", "global", None, 0.9, {"k": 1})
    assert (r.scope, r.space, r.expires_at) == ("global", "global", None)
    assert m.content == "The VPN needs the 2FA app and a hardware key"

    p = mem.remember("Deploys need a ticket.", ttl=3600)
    clock[0] += 100
    mem.remember("Deploys need a ticket and a reviewer.", replace=p.id)
    assert mem.get(p.id).expires_at == p.expires_at      # the old expiry, not a new one from now


def test_replace_changes_only_what_is_given(mem, clock):
    g = mem.remember("Use the staging bucket for scratch data.", scope="global", importance=0.9, metadata={"k": 1})
    r = mem.remember("Use the scratch bucket for scratch data.", replace=g.id, scope="project", importance=0.3,
                     metadata={"k": 2})
    m = mem.get(g.id)
    assert (m.scope, m.space, m.project, m.importance, m.metadata) == ("project", "project:p", "p", 0.3, {"k": 2})
    assert m.expires_at == r.expires_at == clock[0] + Settings().ttl_project    # the new scope's TTL, from now
    clock[0] += 50
    mem.remember("Use the scratch bucket, always.", replace=g.id, ttl=0)         # 0: restart the scope's TTL
    assert mem.get(g.id).expires_at == clock[0] + Settings().ttl_project
    mem.remember("Use the scratch bucket, always!", replace=g.id, ttl=60)
    assert mem.get(g.id).expires_at == clock[0] + 60


def test_replace_from_another_project_keeps_the_memory_in_its_project(tmp_path):
    with MemoryEngine(tmp_path, project="billing") as billing, MemoryEngine(tmp_path, project="analytics") as analytics:
        m = billing.remember("Invoices are generated on the 1st of each month.")
        r = analytics.remember("Invoices are generated on the 2nd of each month.", replace=m.id)
        assert r.space == "project:billing" and analytics.get(m.id).project == "billing"
        assert [h.document_id for h in billing.recall("invoices generated")] == [m.id]
        assert billing.list_memories().total == 1 and analytics.list_memories().total == 0
        moved = analytics.remember("Invoices are generated on the 3rd.", replace=m.id, project="analytics")
        assert moved.space == "project:analytics" and analytics.list_memories().total == 1


def test_replace_keeps_a_session_memory_in_its_session(tmp_path):
    with MemoryEngine(tmp_path, project="p", session="a") as a, MemoryEngine(tmp_path, project="p", session="b") as b:
        m = a.remember("Scratch note about the notebook.", scope="session")
        r = b.remember("Scratch note about the other notebook.", replace=m.id)
        assert r.space == "session:a" and b.get(m.id).session == "a"
        assert [h.document_id for h in a.recall("scratch note", scope="session")] == [m.id]


def test_fire_replace_keeps_the_project(tmp_path):
    with MemoryEngine(tmp_path, project="billing") as billing, MemoryEngine(tmp_path, project="analytics") as analytics:
        m = billing.remember("Invoices are generated on the 1st of each month.")
        assert analytics.fire("Invoices are generated on the 2nd of each month.", replace=m.id)
        analytics.flush()
        assert analytics.get(m.id).space == "project:billing"


def test_replace_through_the_tool_keeps_scope_and_importance(mem):
    from ipy_memory.tools import call_tool
    g = mem.remember("The VPN needs the 2FA app", scope="global", importance=0.9)
    call_tool("memory_remember", {"content": "The VPN needs a hardware key", "replace": g.id}, engine=mem)
    m = mem.get(g.id)
    assert (m.scope, m.importance, m.expires_at) == ("global", 0.9, None)


# ------------------------------------------------------------------------------ 2. a batch dedups against its own state
def test_batch_stores_the_old_text_of_a_memory_it_replaced(mem):
    a = mem.remember("The staging database is called orca.")
    res = mem.remember_many([{"content": "The staging database is called beluga.", "replace": a.id},
                             {"content": "The staging database is called orca."},
                             {"content": "The staging database is called beluga."}])
    assert res[0].stored and res[1].stored and res[1].id != a.id
    assert mem.get(res[1].id).content == "The staging database is called orca."
    assert res[2].deduped and res[2].id == a.id            # a holds beluga now
    assert mem.list_memories().total == 2


def test_batch_replacing_twice_forgets_the_middle_text(mem):
    a = mem.remember("The cache lives in redis.")
    res = mem.remember_many([{"content": "The cache lives in memcached.", "replace": a.id},
                             {"content": "The cache lives in valkey.", "replace": a.id},
                             {"content": "The cache lives in memcached."}])
    assert res[2].stored and res[2].id != a.id
    assert {m.content for m in mem.list_memories()} == {"The cache lives in valkey.", "The cache lives in memcached."}


# ------------------------------------------------------------------------------ 10. deduped results and expiry
def test_deduped_result_reports_the_stored_memory_and_extends_its_life(mem, clock):
    a = mem.remember("Rotate the API signing key every quarter.", ttl=3600)
    r = mem.remember("Rotate the API signing key every quarter.", scope="project")
    assert r.deduped and r.id == a.id
    assert r.expires_at == mem.get(a.id).expires_at == clock[0] + Settings().ttl_project
    assert r.existing.expires_at == r.expires_at
    clock[0] += 7200
    assert [h.document_id for h in mem.recall("API signing key")] == [a.id]      # the index knows too
    with MemoryEngine(mem.data_dir, project="p", clock=lambda: clock[0]) as other:
        assert [h.document_id for h in other.recall("API signing key")] == [a.id]


def test_remembering_again_never_shortens_a_life(mem, clock):
    a = mem.remember("The warehouse is read-only on Sundays.", scope="global")
    r = mem.remember("The warehouse is read-only on Sundays.", scope="global", ttl=60)
    assert r.deduped and r.expires_at is None and mem.get(a.id).expires_at is None
    b = mem.remember("Backups are kept for 30 days.", ttl=5000)
    r = mem.remember("Backups are kept for 30 days.", ttl=60)
    assert r.expires_at == b.expires_at == mem.get(b.id).expires_at


def test_deduped_result_reports_the_stored_memorys_sections(mem):
    note = "# Plan\n## Monday\nLoad the data.\n## Tuesday\nTrain the model."
    a = mem.remember(note)
    r = mem.remember(note.replace("Load", "load"))      # the same text once case is normalised
    assert r.deduped and r.node_count == a.node_count == 3 and r.scope == "project"


def test_batch_copies_of_a_text_live_as_long_as_the_longest(mem, clock):
    res = mem.remember_many([{"content": "Ship on Thursdays.", "ttl": 100}, {"content": "Ship on Thursdays.", "ttl": 900}])
    assert res[1].deduped and res[0].expires_at == res[1].expires_at == clock[0] + 900
    assert mem.get(res[0].id).expires_at == clock[0] + 900


def test_batch_remembering_a_replaced_text_extends_the_replacement(mem, clock):
    a = mem.remember("Standup is at ten.", ttl=100)
    res = mem.remember_many([{"content": "Standup is at eleven.", "replace": a.id},
                             {"content": "Standup is at eleven."}])
    assert res[1].deduped and res[1].id == a.id
    assert res[1].expires_at == mem.get(a.id).expires_at == clock[0] + Settings().ttl_project


def test_duplicate_result_reports_the_existing_memory(mem, clock):
    a = mem.remember("The nightly scoring job runs at 02:00 UTC on the etl cluster.", scope="global")
    r = mem.remember("The nightly scoring job runs at 02:00 UTC on the etl cluster!", scope="global", ttl=60)
    assert r.duplicate and r.id == a.id
    assert (r.expires_at, r.scope, r.node_count) == (None, "global", 1)


# ------------------------------------------------------------------------------ 3. path= filters before the top is taken
def _brokers_and_runbook(mem):
    mem.remember_many([{"content": f"# Broker {i}\nkafka broker kafka broker number {i}", "force": True}
                       for i in range(30)])
    mem.remember("# Runbook\nWe restart the consumer group on Mondays, after the weekly load; see the kafka docs and "
                 "many other unrelated words about the weekly plan, dashboards, alerts, pagers, on-call rotations.")


def test_path_filter_finds_a_low_ranked_section_with_a_small_limit(mem):
    _brokers_and_runbook(mem)
    assert "Runbook" not in [h.path for h in mem.recall("kafka broker", limit=10)]
    assert [h.path for h in mem.recall("kafka broker", path="Runbook", limit=1)] == ["Runbook"]
    assert [h.path for h in mem.recall("kafka broker", path="Runbook", max_tokens=200)] == ["Runbook"]
    assert len(mem.recall("kafka broker", path="Broker 7", limit=1)) == 1


def test_path_filter_with_vectors_ranking(tmp_path):
    with MemoryEngine(tmp_path, project="p", settings=Settings(vector_weight_hash=0.5)) as mem:
        _brokers_and_runbook(mem)
        assert [h.path for h in mem.recall("kafka broker", path="Runbook", limit=1)] == ["Runbook"]
        assert mem.recall("kafka broker", path="No such heading").hits == []


# ------------------------------------------------------------------------------ 8. headings without text of their own
CHURN = ("# Churn model\n## Features\nTenure and support tickets are the strongest features.\n## Deployment\n"
         "The scoring job runs nightly at 02:00 UTC on the `etl` cluster.\n")


def test_a_heading_without_text_is_no_empty_hit(mem):
    mem.remember(CHURN)
    r = mem.recall("churn model", limit=1)
    assert [(h.path, h.text) for h in r] == [("Churn model/Features",
                                              "Tenure and support tickets are the strongest features.")]
    for h in mem.recall("churn model"):
        assert h.text.strip()
    assert len({h.id for h in mem.recall("churn model")}) == len(mem.recall("churn model"))


def test_readme_example_block_has_the_two_sections(mem):
    mem.remember(CHURN, metadata={"source": "meeting 2024-05-02"})
    res = mem.recall("when does scoring run?", max_tokens=400)
    assert [h.path for h in res] == ["Churn model/Deployment", "Churn model/Features"]
    assert res.block.startswith('<memory-recall count="2">')


def test_a_memory_of_headings_alone_is_still_found(mem):
    mem.remember("# Buy oat milk")
    assert [h.path for h in mem.recall("oat milk")] == ["Buy oat milk"]


# ------------------------------------------------------------------------------ 9. min_score meets the score shown
def test_min_score_equal_to_a_hits_score_keeps_it(mem):
    mem.remember_many(["The nightly job runs at 02:00 on etl.", "The weekly job runs on Sunday at noon.",
                       "Backups run hourly."])
    for q in ["job", "nightly job", "when do backups run", "runs"]:
        for h in mem.recall(q):
            assert h.id in {x.id for x in mem.recall(q, min_score=h.score)}, (q, h.score)


# ------------------------------------------------------------------------------ 11. path= as the heading was typed
def test_path_matches_headings_with_slashes_and_spacing_as_typed(mem):
    mem.remember("# CI/CD\n## Runners\nThe runners use the large Ubuntu image.")
    mem.remember("# Notes\n##   Deploy   steps\nDeploy with the large helm chart.")
    for path in ["CI/CD", "CI/CD/Runners", "CI∕CD", " CI / CD / Runners ", "CI/CD/"]:
        assert [h.path for h in mem.recall("large", path=path)] == ["CI∕CD/Runners"], path
    for path in ["Notes/Deploy   steps", "Notes/Deploy steps", "Notes / Deploy\tsteps", "Notes"]:
        assert [h.path for h in mem.recall("large", path=path)] == ["Notes/Deploy steps"], path
    assert mem.recall("large", path="CI").hits == [] and mem.recall("large", path="Notes/Deploy").hits == []
    with pytest.raises(InvalidArgument, match="path"):
        mem.recall("large", path=" / ")


# ------------------------------------------------------------------------------ a token counter that is not one
@pytest.mark.parametrize("answer", ["3", None, -1, float("nan"), True])
def test_token_counter_returning_no_number_is_an_invalid_argument(tmp_path, answer):
    with MemoryEngine(tmp_path, project="p", settings=Settings(token_counter=lambda s: answer)) as mem:
        mem.remember("The nightly job runs at 02:00 on etl.")
        with pytest.raises(InvalidArgument, match="token_counter"):
            mem.recall("nightly job", max_tokens=100)


# ------------------------------------------------------------------------------ 4. dream merges copies under one heading path
def test_dream_keeps_same_text_under_other_headings_findable_by_path(mem):
    a = mem.remember("# Service A\n## Setup\nRun make bootstrap then make test.\n## Owner\nAlice owns service A.")
    b = mem.remember("# Service B\n## Setup\nRun make bootstrap then make test.\n## Owner\nBob owns service B.", force=True)
    assert mem.dream()["removed_nodes"] == 0
    for m, path in ((a, "Service A"), (b, "Service B")):
        hits = mem.recall("make bootstrap", path=path)
        assert [(h.document_id, h.path) for h in hits][:1] == [(m.id, f"{path}/Setup")]


def test_dream_still_merges_true_copies(mem):
    a = mem.remember("# Setup\nRun make bootstrap then make test.\n# Owner\nAlice owns it.")
    b = mem.remember("# Setup\nRun make bootstrap then make test.\n# Owner\nBob owns it.", force=True)
    assert mem.dream()["removed_nodes"] == 1
    assert [h.path for h in mem.recall("make bootstrap", path="Setup")] == ["Setup"]
    assert "bootstrap" in mem.get(a.id).content and "bootstrap" in mem.get(b.id).content


# ------------------------------------------------------------------------------ 5. related() and expiry
def test_related_never_returns_expired_memories(mem, clock):
    a = mem.remember("The harbour seals sleep on the northern rocks every night.")
    b = mem.remember("The harbour seals sleep on the northern rocks most nights.", ttl=100, force=True)
    mem.dream()
    assert [r["document_id"] for r in mem.related(a.id)] == [b.id]     # linked while b lives
    clock[0] += 200
    assert mem.related(a.id) == []                                     # an edge made before b expired
    with pytest.raises(NotFound):                                      # b itself is gone, as for get()
        mem.related(b.id)
    mem.dream()
    assert mem.related(a.id) == []
    assert not mem.store.query("SELECT 1 FROM edges e JOIN nodes n ON n.key IN (e.src, e.dst) "
                               "WHERE n.document_id = ?", (b.id,))


# ------------------------------------------------------------------------------ 6. short answers to a question are kept
@pytest.mark.parametrize("answer", ["No.", "Yes", "Sure!", "ok", "好"])
def test_an_exchange_keeps_a_short_answer_to_a_question(mem, answer):
    r = mem.remember_exchange("chat-1", [
        {"role": "user", "content": "Is it safe to run the migration on the prod replica during business hours?"},
        {"role": "assistant", "content": answer}])
    assert r.node_count == 2 and f"assistant: {answer}" in mem.get(r.id).content
    assert answer in mem.recall("migration prod replica business hours").block


def test_an_exchange_still_leaves_out_acknowledgements(mem):
    r = mem.remember_exchange("chat-2", [
        {"role": "user", "content": "Deploy on Friday?"}, {"role": "assistant", "content": "Yes"},
        {"role": "user", "content": "thanks"}, {"role": "assistant", "content": "The deploy is at 16:00."},
        {"role": "user", "content": "ok"}])
    assert [t.split(": ", 1)[1] for t in mem.get(r.id).content.split("\n\n")] == [
        "Deploy on Friday?", "Yes", "The deploy is at 16:00."]
    with pytest.raises(InvalidArgument, match="non-trivial"):
        mem.remember_exchange("chat-3", [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "thanks"}])


def test_full_width_punctuation_does_not_keep_an_acknowledgement(mem):
    """"好的。" is as trivial as "好的" and "ok." (full-width punctuation ends Chinese replies)."""
    r = mem.remember_exchange("chat-zh", [
        {"role": "user", "content": "周五部署吗"}, {"role": "assistant", "content": "好的。"},
        {"role": "user", "content": "谢谢！"}, {"role": "assistant", "content": "部署在16:00。"}])
    assert [t.split(": ", 1)[1] for t in mem.get(r.id).content.split("\n\n")] == ["周五部署吗", "部署在16:00。"]


# ------------------------------------------------------------------------------ 7. Markdown: no setext heading after a list or quote
STANDUP = """# Standup 2024-05-02
- Alice: fixed the churn model's leakage
- Bob: moved the scoring job to 03:00
---
Next standup is on Monday.
"""


def test_a_list_followed_by_a_rule_stays_in_its_section(mem):
    from ipy_memory._markdown import parse
    assert [(s.level, s.path, s.body) for s in parse(STANDUP)] == [
        (1, "Standup 2024-05-02", STANDUP.split("\n", 1)[1].strip())]
    r = mem.remember(STANDUP)
    assert r.node_count == 1
    assert [h.path for h in mem.recall("who moved the scoring job")] == ["Standup 2024-05-02"]


@pytest.mark.parametrize("text", [
    "> Quote line\n---\nafter", "1. first\n2. second\n---\nafter", "* star\n===\nx", "- item\ncontinued lazily\n---\nx",
    "+ item\n\n  more text of the item\n---\nx", "> quote\n> more\n===\nx", "para\n***\n- a\n---\nx"])
def test_no_setext_heading_after_a_list_item_or_block_quote(text):
    from ipy_memory._markdown import _parse_lines, parse
    assert [s.level for s in parse(text)] == [0]
    assert parse(text) == _parse_lines(text, screen=False)


@pytest.mark.parametrize("text,title", [
    ("- a list\n\nTitle\n---\nbody", "Title"),                  # a paragraph after the list: a heading again
    ("para\n***\nMore\n---\nbody", "More"),                     # after a thematic break
    ("The year was\n1986. A good year\n---\nbody", "The year was 1986. A good year"),   # no list: continues
    ("Words\n*\n---\nbody", "Words *"),                         # an empty item cannot interrupt a paragraph
])
def test_setext_headings_still_found_around_lists(text, title):
    from ipy_memory._markdown import _parse_lines, parse
    assert [s.title for s in parse(text) if s.level] == [title]
    assert parse(text) == _parse_lines(text, screen=False)
