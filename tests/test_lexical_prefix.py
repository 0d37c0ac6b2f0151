"""A chat-log line's leading "[timestamp] Speaker: " label (ipy_memory/_labels.py): its words stay
body terms but score as if the line had the average length, like the terms a document shares. Only a
plain label is recognised: Markdown, code and prose keep their words as they were."""

import numpy as np
import pytest

from ipy_memory import MemoryEngine, _labels, _text
from ipy_memory.config import Settings
from ipy_memory.lexical import LexicalShard, NodeRow, query_terms


@pytest.mark.parametrize("text, label", [
    ("[8 May 2023] Caroline: I went to the support group", "[8 May 2023] Caroline: "),
    ("[1:56 pm on 8 May, 2023] Caroline: hi", "[1:56 pm on 8 May, 2023] Caroline: "),
    ("[2023-05-08 13:56] Alice: we moved the pier", "[2023-05-08 13:56] Alice: "),
    ("[2023-05-08T13:56:00Z] bob: hi", "[2023-05-08T13:56:00Z] bob: "),
    ("[10:32] user: hi", "[10:32] user: "), ("[08/05/2023] Ana Maria: x", "[08/05/2023] Ana Maria: "),
    ("[Mon 8 May] Jo: x", "[Mon 8 May] Jo: "), ("[3 pm] Bob: hi", "[3 pm] Bob: "),
    ("[Tuesday] Bob: x", "[Tuesday] Bob: "), ("[May 2023] the trip", "[May 2023] "),
    ("Caroline: I went", "Caroline: "), ("assistant: done", "assistant: "), ("Dr. Smith: hello", "Dr. Smith: "),
    ("  [2023-05-08] Ana :  hi\nthere", "  [2023-05-08] Ana :  "),
])
def test_a_chat_line_label_is_recognised(text, label):
    assert _labels.line_label(text) == label
    assert _labels.line_label(text, _text.chat_parts(text)) == label


@pytest.mark.parametrize("text", [
    "Note: the build needs gcc", "note: the gate code changed", "Q: what is it?", "Warning: disk full",
    "TODO: fix the tests", "See also: the README", "the cat sat: on the mat",
    "[x] done", "[ ] open task", "[1] Smith: et al. showed", "[link](https://example.org) is: good",
    "[1.2.0] Added: labels", "[1.2.10] Bob: x", "[v2] Bob: x", "[section 2] Bob: x", "[sat] Bob: x",
    "def f(x): return x", "http://example.org: x", "# Heading\n\nAlice: hi", "plain prose without either",
    "a speaker of far too many words: no", "",
])
def test_markdown_code_and_prose_have_no_label(text):
    assert _labels.line_label(text) == ""


def shard_of(bodies: list[str]) -> LexicalShard:
    """Flat memories far apart in time: no neighbours lend context."""
    shard = LexicalShard(Settings())
    shard.add([NodeRow(k + 1, f"m{k}", 0, 1, "", b, "s", 10_000.0 * k, 0.5, None) for k, b in enumerate(bodies)])
    return shard


def tfs(shard: LexicalShard, word: str) -> dict[int, float]:
    slots, tf = shard.post.get(_text.term_hash(_text.stem(word)))
    return dict(zip(slots.tolist(), tf.tolist()))


def test_label_terms_are_marked_and_others_are_not():
    shard = shard_of(["[8 May 2023] Caroline: Caroline, I said, hi", "Note: Caroline called",
                      "[1] Caroline: cited", "Melanie: Caroline is back in May"])
    assert tfs(shard, "caroline") == {0: -2.0, 1: 1.0, 2: 1.0, 3: 1.0}     # tf 2: the message's too
    assert tfs(shard, "may") == {0: -1.0, 3: 1.0} and tfs(shard, "2023") == {0: -1.0}
    assert tfs(shard, "melanie") == {3: -1.0} and tfs(shard, "said") == {0: 1.0}
    assert list(shard.length.view) == [7, 3, 3, 4]              # lengths count every word, as before


def test_a_speaker_name_does_not_favour_their_shortest_lines():
    short, long_ = "[8 May 2023] Caroline: Bye!", "[8 May 2023] Caroline: I went to the support group and it was moving"
    others = [f"[9 May 2023] Melanie: the pottery class number {i} was fun" for i in range(8)]
    shard = shard_of([short, long_, *others])
    s = shard.scores(query_terms("Caroline"), 0, 1e9)
    assert s[0] > 0 and np.isclose(s[0], s[1])                  # the label scores both alike
    s = shard.scores(query_terms("8 May"), 0, 1e9)
    assert s[0] > 0 and np.isclose(s[0], s[1]) and s[0] > s[2]
    # the message's own words are still length-normalised: the shorter of two matches ranks first
    shard = shard_of(["Ana: support group", "Ana: the support group met in the hall by the old pier", *others])
    s = shard.scores(query_terms("support group"), 0, 1e9)
    assert s[0] > s[1] > 0


def test_without_labels_the_shortest_line_won():
    """The ranking the label treatment changes: unmarked, the name favoured the shortest line."""
    short, long_ = "[8 May 2023] Caroline: Bye!", "[8 May 2023] Caroline: I went to the support group and it was moving"
    shard = shard_of([short, long_, *[f"[9 May 2023] Melanie: pottery {i}" for i in range(8)]])
    shard.s = Settings(flatten_shared_terms=False)          # the label's terms scored by length
    s = shard.scores(query_terms("Caroline"), 0, 1e9)
    assert s[0] > s[1] > 0


def test_engine_recall_of_a_speaker_question(tmp_path):
    lines = ["Bye!", "Thanks!", "See you", "Sure", "I went to the LGBTQ support group yesterday and it was powerful"]
    with MemoryEngine(tmp_path, project="p") as mem:
        mem.remember_many([{"content": f"[8 May 2023] Caroline: {t}", "force": True} for t in lines]
                          + [{"content": f"[8 May 2023] Melanie: I painted a lake sunrise, number {i}", "force": True}
                             for i in range(6)])
        top = mem.recall("What did Caroline go to?", limit=1)[0]
        assert "support group" in top.text


FILLER = [f"[{i % 28 + 1} May 2023] Ana: the amber lantern number {i}" for i in range(300)]   # enough for a snapshot


def test_a_snapshot_written_before_the_labels_is_rebuilt(tmp_path, monkeypatch):
    """Snapshot version 10 held unmarked label postings: this code rebuilds it from SQLite."""
    assert LexicalShard.VERSION == 12
    with monkeypatch.context() as old:
        old.setattr(LexicalShard, "VERSION", 10)
        old.setattr(_labels, "mark", lambda counts, distinct, sizes: counts.astype(np.float32))
        with MemoryEngine(tmp_path, project="p") as mem:
            mem.remember_many([{"content": t, "force": True} for t in FILLER])
            assert min(tfs(mem.shards.get("project:p").lex, "ana").values()) > 0
    assert list((tmp_path / "index").glob("*.lex.npz"))
    with MemoryEngine(tmp_path, project="p") as mem:
        mem.recall("amber lantern")
        lex = mem.shards.get("project:p").lex
        assert len(lex) == len(FILLER) and max(tfs(lex, "ana").values()) < 0
