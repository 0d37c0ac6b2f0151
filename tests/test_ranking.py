"""Behaviour of the lexical ranking mechanisms on small hand-made stores (notes and chats).

Each test shows that the mechanism changes the ranking the intended way by comparing the default
with the mechanism switched off through its Settings field.
"""

import pytest

from ipy_memory import MemoryEngine, Settings, _text

RUNBOOK = (
    "## Access\n\nOrion is reached through the bastion host; ask Dana for a key to orion and keep it in the agent.\n\n"
    "## Memory\n\nOrion jobs that need more than 80 GB of GPU memory go to the big queue on orion; smaller ones "
    "share cards, and anything interactive should use the notebook partition instead of the batch one, which is "
    "reserved for long training runs submitted overnight.\n\n"
    "## Owner\n\nDana owns orion.\n\n"
    "## Disks\n\nOrion scratch is wiped on Sundays.\n")


def _chat(m, day, lines):
    m.remember_exchange(f"chat {day}", [{"role": "user", "name": who, "content": f"[{day}] {who}: {text}"}
                                        for who, text in lines])


@pytest.fixture(params=[True, False], ids=["flatten", "plain"])
def shared(request, tmp_path):
    """An engine with `flatten_shared_terms` on (the default) or off, and the flag."""
    s = Settings().with_(flatten_shared_terms=request.param)
    with MemoryEngine(tmp_path / "m", project="p", session="s", settings=s) as m:
        yield m, request.param


def test_default_flattens_shared_terms():
    assert Settings().flatten_shared_terms is True


def test_term_in_every_section_of_a_note_does_not_favour_the_shortest(shared):
    m, flatten = shared
    m.remember(RUNBOOK)           # "orion" is in every section: the note's subject
    m.remember("# Laptop\n\n## Memory\n\nThe laptop has 16 GB of memory; close the browser before training.\n\n"
               "## Keys\n\nSSH keys live in the agent.\n")
    m.remember("# Vega\n\n## Access\n\nVega needs the VPN and a key from Dana.\n")
    top = m.recall("orion gpu")[0].title
    # length normalisation of the subject alone put the one-line "Owner" section above the GPU one
    assert top == ("Memory" if flatten else "Owner")


def test_session_date_does_not_favour_short_messages(shared):
    m, flatten = shared
    _chat(m, "2024-03-05", [
        ("Ana", "Morning! Long day at the lab ahead."),
        ("Ben", "Same here, the cluster is down again and the backlog keeps growing."),
        ("Ana", "After work I cooked a big pot of lentil soup with smoked paprika and lots of garlic for the "
                "whole team, it took hours but everyone loved it and asked for the recipe."),
        ("Ben", "Nice!"),
        ("Ana", "Bye!")])
    _chat(m, "2024-04-09", [("Ana", "I want to cook more often."), ("Ben", "Cooking is fun, I cook every day."),
                            ("Ana", "Soup next week?")])
    hits = m.recall("What did Ana cook on 2024-03-05?")
    assert hits[0].text.startswith("[2024-03-05]")          # the date still picks the session
    assert ("lentil soup" in hits[0].text) is flatten         # ... and no longer the shortest message in it


def test_shared_term_still_finds_every_section(shared):
    m, _ = shared
    r = m.remember(RUNBOOK)
    hits = m.recall("orion", limit=10)
    assert {h.title for h in hits} >= {"Access", "Memory", "Owner", "Disks"}
    # forgetting one section drops the document's roll-up until reload; the term stays findable
    m.forget(f"{r.id}#1")
    assert {h.title for h in m.recall("orion", limit=10)} >= {"Access", "Owner", "Disks"}


def test_two_sections_are_not_enough_to_call_a_term_shared(tmp_path):
    on = Settings()
    off = Settings().with_(flatten_shared_terms=False)
    note = "## Short\n\nZephyr.\n\n## Long\n\nZephyr builds run nightly on the shared runner and take an hour.\n"
    scores = []
    for s in (on, off):
        with MemoryEngine(tmp_path / str(len(scores)), project="p", session="s", settings=s) as m:
            m.remember(note)
            scores.append([(h.title, h.score) for h in m.recall("zephyr")])
    assert scores[0] == scores[1]


@pytest.fixture(params=[None, 0.0], ids=["reply", "no-reply"])
def replies(request, tmp_path):
    """An engine with the default `reply_weight` or none, and whether replies are on."""
    s = Settings() if request.param is None else Settings().with_(reply_weight=request.param)
    with MemoryEngine(tmp_path / "m", project="p", session="s", settings=s) as m:
        yield m, request.param is None


def test_answer_after_a_question_in_a_chat_inherits_its_match(replies):
    m, on = replies
    m.remember_exchange("deploy chat", [
        {"role": "user", "content": "The staging proxy was restarted this morning after the certificate change."},
        {"role": "assistant", "content": "Noted, I will watch the error rate for an hour."},
        {"role": "user", "content": "Which port does the staging proxy listen on now?"},
        {"role": "assistant", "content": "8443, behind the load balancer; the old one is closed."},
        {"role": "user", "content": "Thanks. Also remind me to renew the proxy certificate next month."},
        {"role": "assistant", "content": "Reminder set for the first of next month."},
    ])
    texts = [h.text for h in m.recall("staging proxy port")]
    assert texts[0].startswith("Which port")
    # the answer shares no word with the query: only the question before it makes it relevant
    assert (texts[1].startswith("8443")) is on


def test_section_after_an_open_question_in_a_note_inherits_its_match(replies):
    m, on = replies
    m.remember("# Database\n\n## Open questions\n\nShould the nightly backup move to the new object store?\n\n"
               "## Decision\n\nYes: from June it writes there, and the old bucket is read-only.\n\n"
               "## Restore\n\nRestores still read the old bucket until the nightly copies catch up.\n\n"
               "## Monitoring\n\nThe nightly backup job reports to the ops channel; a missing report pages on-call.\n")
    titles = [h.title for h in m.recall("nightly backup object store")]
    assert "Open questions" in titles[:2]
    assert (titles[0] == "Decision") is on        # the decision shares no word with the query


def test_question_marks():
    assert _text.question_marks("Which port is it now?") == _text.ASKS | _text.ENDS_ASKING
    assert _text.question_marks("Nice! Have you been? :)") == _text.ASKS | _text.ENDS_ASKING
    assert _text.question_marks("你好吗？") == _text.ASKS | _text.ENDS_ASKING
    assert _text.question_marks("Why? Because the disk was full.") == _text.ASKS
    assert _text.question_marks("see https://example.org/a?b=1 for details") == 0
    assert _text.question_marks("No question here.") == 0


@pytest.mark.parametrize("text, parts", [
    ("[2023-05-08 13:56] Alice: we moved the pier", ("2023-05-08 13:56", "Alice", "we moved the pier")),
    ("Bob: fine", ("", "Bob", "fine")), ("[1:56 pm on 8 May, 2023] ok then", ("1:56 pm on 8 May, 2023", "", "ok then")),
    ("note: the gate code changed", ("", "note", "the gate code changed")),
    ("a speaker of far too many words: no", ("", "", "a speaker of far too many words: no")),
    ("plain note without either mark", ("", "", "plain note without either mark")), ("", ("", "", "")),
    ("  [ts]  Ana :  hi\nthere", ("ts", "Ana", "hi\nthere"))])
def test_chat_parts(text, parts):
    assert _text.chat_parts(text) == parts
    m = _text.chat_line().match(text)         # the shortcut for texts without ':' or '[' agrees with the regex
    assert parts == (("", "", text) if not (m.group(1) or m.group(2)) or len((m.group(2) or "").split()) > 3
                     else ((m.group(1) or "").strip(), (m.group(2) or "").strip(), m.group(3)))


@pytest.mark.parametrize("discount", [None, 0.0], ids=["discount", "no-discount"])
def test_message_ending_with_a_question_is_not_an_answer(tmp_path, discount):
    s = Settings() if discount is None else Settings().with_(question_discount=discount)
    with MemoryEngine(tmp_path / "m", project="p", session="s", settings=s) as m:
        m.remember_exchange("standup", [
            {"role": "user", "name": "Ana", "content": "Did anyone look at the flaky login test?"},
            {"role": "user", "name": "Ben", "content": "Not yet, I was on the release notes all morning."},
            {"role": "user", "name": "Cy", "content": "The login test is flaky because it reads the real clock; "
                                                      "I will mock it today."},
            {"role": "user", "name": "Ana", "content": "Great, thanks."},
        ])
        top = m.recall("flaky login test")[0].text
    # the short question matches best word for word; the message that knows the answer should win
    assert top.startswith("The login test" if discount is None else "Did anyone")


def test_large_scans_run_beside_the_lexical_scoring_with_the_same_answer(tmp_path, monkeypatch):
    """Above `_BESIDE_ROWS` vectors the exact scan runs on a worker thread while BM25 scores: the
    ranking is the same, and a forked child (whose copy of the executor has no thread) still answers."""
    import os
    import signal

    from ipy_memory import _recall
    hybrid = Settings(vector_weight_hash=0.5)
    queries = ["amber lantern 5", "cobalt note", "lantren jade"]

    def answers(m):
        return [[(h.id, round(h.score, 5)) for h in m.recall(q)] for q in queries]

    with MemoryEngine(tmp_path / "m", project="p", settings=hybrid) as m:
        m.remember_many([{"content": f"note {i}: the {['amber', 'cobalt', 'jade'][i % 3]} lantern {i % 17}",
                          "force": True} for i in range(120)])
        monkeypatch.setattr(_recall, "_BESIDE_ROWS", 10 ** 9)
        inline = answers(m)
        monkeypatch.setattr(_recall, "_BESIDE_ROWS", 10)
        assert answers(m) == inline and _recall.SCANS.started
    pid = os.fork()
    if pid == 0:                      # the child: its own engine; it must not wait on a thread it lacks
        code = 1
        try:
            signal.alarm(20)
            with MemoryEngine(tmp_path / "m", project="p", settings=hybrid) as child:
                code = 0 if answers(child) == inline else 1
        finally:
            os._exit(code)            # never return into pytest from the child
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize("query, names", [
    ("What did Ana say to Ben?", {"ben"}), ("What did Jon say about Gina's store?", {"gina"}),
    ("a frustration shared with Audrey and Andrew", {"audrey", "andrew"}),
    ("trips for Mel, Jo & Cy", {"mel", "jo", "cy"}), ("hiking for Ana and her dog", {"ana"}),
    ("According to Gina, what makes Jon a mentor?", set()),           # the source, not the addressee
    ("What has Nate heard from Joanna?", set()), ("a book recommended by Joanna", set()),
    ("Did Ben tell Ana about Ben's trip?", set()),                   # Ben also asks: not only addressed
    ("how to deploy to staging", set()), ("", set())])
def test_addressee_terms(query, names):
    assert _text.addressee_terms(query) == {_text.term_hash(t) for n in names for t in _text.terms(n)}


@pytest.mark.parametrize("on", [True, False], ids=["addressee", "no-addressee"])
def test_a_name_the_query_addresses_does_not_name_the_speaker(tmp_path, on):
    s = Settings().with_(addressee_names=on)
    with MemoryEngine(tmp_path / "m", project="p", session="s", settings=s) as m:
        m.remember_exchange("catch-up", [
            {"role": "user", "name": "Ben", "content": "My trip to the coast was great, Ana, the weather held."},
            {"role": "user", "name": "Ana", "content": "Mine was long: the trip back took two days."},
            {"role": "user", "name": "Ben", "content": "Oh no. Glad you made it home."},
        ])
        texts = [h.text for h in m.recall("What did Ana say to Ben about the trip?")]
        # Ana said it: Ben is whom she said it to, though his line names her and the trip too
        assert texts[0].startswith("Mine was long") is on
        # a query naming Ben alone still names his lines
        assert m.recall("What did Ben say about the trip?")[0].text.startswith("My trip")


def test_a_question_in_neutral_words_finds_the_chat_line_in_informal_ones(tmp_path):
    lines = [f"[8 May 2023] Ana: the lake was cold, day {i}" for i in range(6)]
    lines.insert(3, "[8 May 2023] Ana: my fave pic of the kids is the one from the lake")
    with MemoryEngine(tmp_path / "m", project="p") as m:
        m.remember_many([{"content": t, "force": True} for t in lines])
        assert "fave pic" in m.recall("What is Ana's favorite picture of her children at the lake?")[0].text
