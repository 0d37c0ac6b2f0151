"""Behaviour of the lexical ranking mechanisms on small hand-made stores (notes and chats).

Each test shows that the mechanism changes the ranking the intended way by comparing the default
with the mechanism switched off through its Settings field.
"""

import pytest

from ipy_memory import MemoryEngine, Settings

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
