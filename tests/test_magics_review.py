"""Regressions for the review of the IPython layer (/work/review/magics.md): one test or more per finding."""

from __future__ import annotations

import pytest

from test_magics import bare, ip, load, magics  # noqa: F401  (fixtures and helpers)


# ------------------------------------------------------------------------------ 8. autopandas on an empty page
def test_an_empty_page_has_the_usual_columns(ip):
    ip.run_line_magic("config", "MemoryMagics.autopandas = True")
    empty = ip.run_line_magic("memories", "")
    assert len(empty) == 0
    assert list(empty[["title", "scope", "node_count", "tier"]].columns) == ["title", "scope", "node_count", "tier"]
    ip.run_line_magic("remember", "# Note\none memory")
    full = ip.run_line_magic("memories", "")
    assert list(empty.columns) == list(full.columns)
    assert list(ip.run_line_magic("memories", "--offset 5").columns) == list(full.columns)
    hits = ip.run_line_magic("recall", "one memory").to_pandas()
    none = ip.run_line_magic("recall", "--path Nowhere one memory").to_pandas()
    assert len(hits) == 1 and len(none) == 0 and list(none.columns) == list(hits.columns)
