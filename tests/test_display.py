"""Reprs of result objects: escaped static HTML, Markdown tables, aligned plain text."""

from __future__ import annotations

import re

import pytest
from IPython.lib.pretty import pretty

from ipy_memory import _display
from ipy_memory.models import Hit, Memory, MemoryList, RecallResult, Stats

EVIL = "<script>alert(1)</script> | **bold** <img src=x onerror=alert(2)> `tick` [link](http://x)"


def hit(i=0, text="The sales table lives in warehouse.sales_2024.", meta=None, path="Data/Owner"):
    return Hit(id=f"m-0123456789abcde{i}#1", document_id=f"m-0123456789abcde{i}", path=path, title="Owner", text=text,
               score=0.91234, scope="project", space="project:demo", created_at=1_700_000_000.0, metadata=meta)


def result(*hits):
    return RecallResult("who owns the sales table?", list(hits), "<memory-recall count=\"0\">\n</memory-recall>",
                        tokens=42)


def memory(i=0, **kw):
    base = dict(id=f"m-0123456789abcde{i}", title="Style", content="Use ruff.", scope="global", project=None,
                session="s", space="global", kind="note", importance=0.6, node_count=2, created_at=1_700_000_000.0,
                updated_at=1_700_000_000.0, expires_at=None, tier="hot", metadata={"source": "ipython"})
    base.update(kw)
    return Memory(**base)


STATS = Stats({"db_path": "/tmp/x/memory.sqlite3", "data_dir": "/tmp/x", "embedder": "hash-v1-384", "dim": 384,
               "project": "demo", "documents": 3, "nodes": 5, "size_bytes": 123_456, "read_only": False,
               "tiers": {"hot": {"documents": 2, "nodes": 4, "bytes": 2048}, "cold": {"documents": 1, "nodes": 1,
                                                                                     "bytes": 10}},
               "spaces": {"project:demo": {"documents": 2, "nodes": 4}, "global": {"documents": 1, "nodes": 1}},
               "indexes": {"project:demo": {"lexical": 4, "vectors": 4}, "session:x": {"lexical": 0, "vectors": 0}},
               "future_key": {"nested": True}})


def test_hits_text_has_rank_date_score_label_id_excerpt_provenance():
    meta = {"source": "ipython", "notebook": "/home/me/analysis.ipynb", "cell": 7, "cell_sha256": "ab" * 32}
    text = repr(result(hit(meta=meta), hit(1, text="x" * 500)))
    assert text.splitlines()[0] == "2 hits for 'who owns the sales table?' · 42 tokens in the recall block"
    assert "[1] 2023-11-14  0.912  Data/Owner  (m-0123456789abcde0#1)" in text
    assert "source: ipython · notebook: analysis.ipynb · cell 7" in text
    assert "…" in text and "x" * 200 not in text                  # long texts are excerpts
    assert pretty(result(hit())) == repr(result(hit()))


def test_hits_html_is_escaped_and_static():
    page = result(hit(text=EVIL, meta={"source": EVIL}, path=EVIL))._repr_html_()
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;" in page and "&lt;img src=x onerror=alert(2)&gt;" in page
    assert not re.search(r"<[^>]+\son\w+=", page)                  # no event handler attributes
    assert "class=" not in page and "<style" not in page           # inline styles only
    for want in ("2023-11-14", "0.912", "m-0123456789abcde0#1", "<table", "<th"):
        assert want in page


def test_hits_markdown_table_escapes_cells():
    md = result(hit(text=EVIL), hit(1))._repr_markdown_()
    lines = md.splitlines()
    assert lines[0].startswith("**2 hits") and lines[2].startswith("| # | date | memory | score | provenance |")
    rows = [line for line in lines if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert len(rows) == 2
    assert all(len(re.findall(r"(?<!\\)\|", r)) == 6 for r in rows)     # pipes in the text are escaped
    assert "<script>" not in md and "&lt;script&gt;" in md and "\\*\\*bold\\*\\*" in md


def test_empty_results():
    empty = result()
    assert repr(empty).startswith("0 hits")
    assert "0 hits" in empty._repr_html_() and empty._repr_markdown_().startswith("**0 hits")
    lst = MemoryList([], total=0, offset=0)
    assert repr(lst) == "no memories" and "no memories" in lst._repr_html_()


def test_memory_list_reprs():
    lst = MemoryList([memory(0), memory(1, title="A | B", expires_at=1_800_000_000.0, scope="project")],
                     total=12, offset=10)
    text = repr(lst)
    assert text.splitlines()[0] == "memories 11–12 of 12"
    head = text.splitlines()[1]
    assert head.split() == ["id", "created", "scope", "title", "sections", "tier", "expires", "source"]
    assert "never" in text and "2027-01-15" in text
    assert "A \\| B" in lst._repr_markdown_() and "<code>m-0123456789abcde1</code>" in lst._repr_html_()


def test_stats_reprs_have_summary_tier_and_space_tables():
    text = repr(STATS)
    first = text.splitlines()[0]
    assert first == "ipy_memory · 3 memories · 5 sections · 123.5 kB · embedder hash-v1-384 (384-d)"
    assert re.search(r"^tier\s+memories\s+sections\s+text size$", text, re.M)
    assert re.search(r"^hot\s+2\s+4\s+2\.0 kB$", text, re.M)
    assert re.search(r"^space\s+memories\s+sections\s+lexical index\s+vectors index$", text, re.M)
    assert re.search(r"^project:demo\s+2\s+4\s+4\s+4$", text, re.M)
    assert "session:x" not in text                       # an empty loaded index is not a space
    assert "data_dir: /tmp/x" in text and "future_key" not in text
    assert "  documents: 3" in text and "embedder: hash" not in text    # raw counts listed; embedder only on top
    md = STATS._repr_markdown_()
    assert "| tier | memories | sections | text size |" in md and "| hot | 2 | 4 | 2.0 kB |" in md
    page = STATS._repr_html_()
    assert page.count("<table") == 2 and "123.5 kB" in page and "<script" not in page


def test_stats_without_tables():
    s = Stats({"documents": 0, "nodes": 0})
    assert repr(s) == "ipy_memory · 0 memories · 0 sections\n  documents: 0\n  nodes: 0"
    assert "<table" not in s._repr_html_()


@pytest.mark.parametrize("n,want", [(0, "0 B"), (999, "999 B"), (1000, "1.0 kB"), (2_500_000, "2.5 MB"),
                                    (7 * 10**12, "7000.0 GB"), ("n/a", "n/a")])
def test_human_bytes(n, want):
    assert _display.human_bytes(n) == want


def test_hit_title_and_body_for_widgets():
    h = hit(meta={"source": "tool", "extra": "<b>x</b>"})
    assert _display.hit_title(h, 3) == "3. Data/Owner · 0.912 · 2023-11-14"
    body = _display.hit_body_html(h)
    assert "&lt;b&gt;x&lt;/b&gt;" in body and "<details>" in body and "source: tool" in body


def test_generic_table_fallback():
    class Rows(MemoryList):
        _kind = "things"
    rows = Rows([memory()], total=1, offset=0)
    assert repr(rows).splitlines()[0].startswith("id")
    assert rows._repr_markdown_().startswith("| id |")


def test_label_taken_from_the_text_is_not_repeated():
    flat = hit(text="Use ruff with line length 110.", path="Use ruff with line length 110")
    assert "<b>Use ruff" not in result(flat)._repr_html_()
    assert "**Use ruff" not in result(flat)._repr_markdown_()
    assert repr(result(flat)).count("Use ruff") == 1
    assert "<b>Data/Owner</b>" in result(hit())._repr_html_()


def test_markdown_escapes_dollar_math():
    md = result(hit(text="costs $5 and $6 per run"))._repr_markdown_()
    assert "\\$5 and \\$6" in md


def test_tier_table_with_vector_sizes():
    s = Stats({"documents": 1, "nodes": 2, "tiers": {
        "hot": {"documents": 1, "nodes": 2, "text_bytes": 33, "vector_bytes": 1536, "precision": "f16"},
        "cold": {"documents": 0, "nodes": 0, "text_bytes": 0, "vector_bytes": 0, "precision": "i8"}}})
    text = repr(s)
    assert re.search(r"^tier\s+memories\s+sections\s+text size\s+vector size\s+precision$", text, re.M)
    assert re.search(r"^hot\s+1\s+2\s+33 B\s+1\.5 kB\s+f16$", text, re.M)
    assert "| cold | 0 | 0 | 0 B | 0 B | i8 |" in s._repr_markdown_()
