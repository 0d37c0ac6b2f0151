import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipy_memory._markdown import default_title, parse


def paths(text):
    return [s.path for s in parse(text)]


def test_atx_tree_and_root():
    secs = parse("intro\n# A\na\n## B\nb\n### C\nc\n## D\nd\n# E\ne")
    assert [s.path for s in secs] == ["", "A", "A/B", "A/B/C", "A/D", "E"]
    assert [s.body for s in secs] == ["intro", "a", "b", "c", "d", "e"]
    assert secs[3].parent == 2 and secs[4].parent == 1 and secs[5].parent == -1


def test_setext_headings():
    assert paths("Title\n=====\nx\n\nSub\n---\ny") == ["Title", "Title/Sub"]
    assert [s.body for s in parse("Title\n=====\nx\n\nSub\n---\ny")] == ["x", "y"]     # underlines are not text
    assert paths("two line\nheading\n---") == ["two line heading"]  # CommonMark: the paragraph


def test_thematic_break_is_not_a_heading():
    assert paths("# A\n\n---\n\ntext") == ["A"]


def test_headings_in_code_fences_are_code():
    secs = parse("# A\n```python\n# comment\n```\n~~~\n# also code\n~~~\n# B\nb")
    assert [s.path for s in secs] == ["A", "B"]
    assert "# comment" in secs[0].body


def test_unclosed_fence_runs_to_end():
    assert paths("# A\n```\n# not a heading\n## still code") == ["A"]


def test_front_matter_is_opaque():
    secs = parse("---\ntitle: x\nlayout: y\n---\n# Real\nbody")
    assert [s.path for s in secs] == ["", "Real"]
    assert parse("---\ntitle: x\n---\n")[0].body.startswith("---")


def test_seven_hashes_is_text_and_closing_hashes_stripped():
    assert paths("####### seven\n## two ##") == ["", "two"]


def test_chinese_path_and_slash_in_heading():
    secs = parse("# 光遗传学\n## 艺术应用\n绿藻\n# a/b\nx")
    assert secs[1].path == "光遗传学/艺术应用"
    assert "/" not in secs[2].title


def test_default_title():
    assert default_title("Hello world. More text.", parse("Hello world. More text.")) == "Hello world"
    text = "intro\n# Heading\nx"
    assert default_title(text, parse(text)) == "Heading"


def test_many_headings():
    assert len(parse("\n".join(f"# h{i}\nt" for i in range(10_000)))) == 10_000


@settings(max_examples=600, deadline=None)
@given(st.text(alphabet="ab .!光\n \t", max_size=40), st.lists(st.tuples(
    st.sampled_from(list("#=-`~\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")), st.integers(0, 40)), max_size=2))
def test_plain_text_shortcut_parses_as_the_line_pass(plain, specials):
    """parse() skips the line-by-line pass for a text that can hold no heading, fence, front matter or
    other line break: the same sections as that pass gives (plain texts with a special character or
    two put in anywhere)."""
    from ipy_memory._markdown import _parse_lines
    text = plain
    for char, at in specials:
        text = text[:at] + char + text[at:]
    assert parse(text) == _parse_lines(text)


@pytest.mark.parametrize("char", list("#=-`~\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"))
@pytest.mark.parametrize("shape", ["ab{}ba", "ab\n{}\nba", "x\n  {}{}{}\ny", "{}{}{} x", " \t{}{}{}\nz"])
def test_plain_text_shortcut_with_each_special_character(char, shape):
    from ipy_memory._markdown import _parse_lines
    text = shape.format(char, char, char)
    assert parse(text) == _parse_lines(text)


_LINE = st.tuples(st.sampled_from(["", " ", "  ", "   ", "    ", "\t", " \t"]),
                  st.sampled_from(["#", "##", "#######", "```", "````", "~~~", "===", "---", "- ", "= ", "`x`", "~",
                                   "", "text", "光", "> ", "* ", "1. ", "2) ", "***", "_ _ _"]),
                  st.sampled_from(["", " A", " b #", "#", " ```", "x", "  ", "/c"])).map("".join)


@settings(max_examples=800, deadline=None)
@given(st.lists(_LINE, max_size=14), st.sampled_from(["\n", "\r\n", "\n\n"]))
def test_screened_lines_parse_as_every_regex_on_every_line(lines, sep):
    """The line pass tests a line's first character (after at most three spaces) before its
    regexes: the same sections as running them all on every line (fences, headings, setext
    underlines and indented lines of every shape, inside and outside fences)."""
    from ipy_memory._markdown import _parse_lines
    text = sep.join(lines)
    assert _parse_lines(text) == _parse_lines(text, screen=False)


def test_a_leading_byte_order_mark_hides_no_heading():
    """Files saved by some editors start with U+FEFF: the first heading, front matter and default
    title are found as without it."""
    secs = parse("\ufeff# Title\nbody\n## Sub\nmore")
    assert [(s.path, s.body) for s in secs] == [("Title", "body"), ("Title/Sub", "more")]
    assert paths("\ufeff---\ntitle: x\n---\n# Real\nbody") == ["", "Real"]
    assert paths("\ufeffTitle\n=====\nx") == ["Title"]
    assert parse("\ufeffplain note")[0].body == "plain note"
    assert default_title("\ufeffHello world. More.", parse("\ufeffHello world. More.")) == "Hello world"


def test_first_sentence_is_what_the_sentence_regex_matches():
    """default_title's search for the first sentence's end gives _SENTENCE's lazy match (or 120 characters)."""
    import random
    from ipy_memory._markdown import _SENTENCE, first_sentence
    pieces = list("ab .!?。！？\n\t\r\u00a0\u2028\u3000x\x1c\x85\u2029\x0b") + ["e.g.", "...", "word ", "x" * 50]
    rng = random.Random(7)
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, rng.choice([5, 40, 200]))))
        m = _SENTENCE.match(text)
        assert first_sentence(text) == (m.group(1) if m else text[:120]), repr(text)
