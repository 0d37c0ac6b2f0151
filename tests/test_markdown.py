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
