"""ipywidgets views without a front end: trait state, button clicks, static mimebundles."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from ipy_memory.widgets import WIDGET_MIME, HitView, RecallBrowser, TierStats, live_widgets


@pytest.fixture
def stocked(engine):
    engine.remember("# Data\nThe sales table lives in warehouse.sales_2024.\n\n## Owner\nAlice owns the sales table.")
    engine.remember("Deploys happen on Tuesdays after the standup.", scope="global")
    return engine


def test_browser_searches_on_query(stocked):
    b = RecallBrowser(stocked, query="sales table", limit=5)
    assert b.query_box.value == "sales table" and b.limit_box.value == 5
    assert list(b.scope_box.options)[0] == "project+global" and b.scope_box.value == "project+global"
    assert len(b.results.children) == len(b.result) >= 2
    assert all(isinstance(v, HitView) for v in b.hit_views)
    assert b.results.titles[0].startswith("1. Data") and b.results.selected_index is None
    assert "sales_2024" in b.hit_views[0].body.value
    assert "hits for 'sales table'" in b.status.value
    b.query_box.value = "deploys tuesday"               # typing a new query (continuous_update off) searches
    assert b.result.query == "deploys tuesday" and "Tuesdays" in b.hit_views[0].body.value
    b.scope_box.value = "project"
    b.search_button.click()
    assert all(h.scope == "project" for h in b.result)
    b.limit_box.value = 1
    assert len(b.search("sales table")) == 1
    assert b.search("") is None and b.results.children == () and b.status.value == ""


def test_forget_needs_confirmation(stocked):
    b = RecallBrowser(stocked, query="sales table owner")
    n = len(b.result)
    view = b.hit_views[0]
    target = view.hit.id
    assert not view.confirming
    view.forget_button.click()
    assert view.confirming and view.forget_button.disabled
    view.cancel_button.click()
    assert not view.confirming and len(stocked.recall("sales table owner")) == n
    view.forget_button.click()
    view.confirm_button.click()
    assert target not in {h.id for h in b.result} and len(b.result) == n - 1
    assert f"forgot {target}" in b.status.value


def test_raw_block_toggle(stocked):
    b = RecallBrowser(stocked, query="sales")
    assert b.block_view.layout.display == "none"
    b.block_toggle.value = True
    assert b.block_view.layout.display is None
    assert "&lt;memory-recall count=" in b.block_view.value
    b.block_toggle.value = False
    assert b.block_view.layout.display == "none"


def test_error_shows_in_status(stocked):
    b = RecallBrowser(stocked, query="sales")
    stocked.close()
    assert b.search() is None and "closed" in b.status.value


def test_static_bundle_and_live_view(stocked):
    b = RecallBrowser(stocked, query="sales", live=False)
    data = b._repr_mimebundle_()
    assert set(data) == {"text/plain", "text/html"} and "<table" in data["text/html"]
    assert data["text/plain"].startswith("2 hits") or data["text/plain"].startswith("1 hit")
    b.live = True
    assert WIDGET_MIME in b._repr_mimebundle_()
    assert b._repr_mimebundle_()[WIDGET_MIME]["model_id"] == b.model_id
    empty = RecallBrowser(stocked, live=False)
    assert "no search yet" in empty._repr_mimebundle_()["text/html"]
    assert not live_widgets()                                # no kernel here


def test_browser_from_result(stocked):
    r = stocked.recall("deploys", scope="global")
    b = RecallBrowser(stocked, result=r, scope="global")
    assert b.result is r and b.query_box.value == "deploys" and len(b.hit_views) == len(r)


def test_tier_stats_refresh(stocked):
    t = TierStats(stocked, live=False)
    assert t.stats["documents"] == 2 and "<table" in t.view.value
    stocked.remember("A third memory about something else entirely.")
    t.refresh_button.click()
    assert t.stats["documents"] == 3
    data = t._repr_mimebundle_()
    assert set(data) == {"text/plain", "text/html"} and data["text/html"] == t.view.value
    assert "hot" in data["text/plain"]


@pytest.fixture
def ip(tmp_path, monkeypatch):
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    c = Config()
    c.HistoryManager.enabled = False
    c.MemoryMagics.data_dir = str(tmp_path / "mem")
    c.MemoryMagics.project = "test"
    InteractiveShell.clear_instance()
    shell = InteractiveShell.instance(config=c)
    shell.run_line_magic("load_ext", "ipy_memory")
    yield shell
    shell.run_line_magic("unload_ext", "ipy_memory")
    InteractiveShell.clear_instance()


def test_default_engine_and_display_setting(ip, monkeypatch):
    ip.run_line_magic("remember", "widgets use the kernel's engine")
    b = RecallBrowser(query="kernel engine")
    assert b.engine is ip.magics_manager.registry["MemoryMagics"].engine and len(b.result) == 1
    monkeypatch.setattr(ip, "kernel", object(), raising=False)
    assert live_widgets() and WIDGET_MIME in b._repr_mimebundle_()
    ip.run_line_magic("config", "MemoryMagics.display = 'html'")
    assert not live_widgets() and set(b._repr_mimebundle_()) == {"text/plain", "text/html"}
    ip.run_line_magic("config", "MemoryMagics.display = 'text'")
    assert set(TierStats()._repr_mimebundle_()) == {"text/plain"}


def test_no_engine_no_extension():
    InteractiveShell.clear_instance()
    with pytest.raises(ValueError, match="load_ext ipy_memory"):
        RecallBrowser()


def test_tier_stats_uses_the_engines_tier_report(stocked):
    if not callable(getattr(stocked, "tier_stats", None)):
        pytest.skip("engine without tier_stats()")
    t = TierStats(stocked, live=False)
    assert set(t.stats["tiers"]) == set(stocked.tier_stats()["tiers"])
    assert "vector size" in t.view.value and "precision" in t.view.value


# ------------------------------------------------------------------------------ review
def test_widgets_follow_the_kernels_engine_when_it_reopens(ip, tmp_path):
    ip.run_line_magic("remember", "widgets use the kernel's engine")
    b, t = RecallBrowser(query="kernel engine", live=False), TierStats(live=False)
    first = b.engine
    assert len(b.result) == 1 and t.stats["documents"] == 1
    ip.run_line_magic("config", f"MemoryMagics.data_dir = {str(tmp_path / 'other')!r}")   # the magics reopen it there
    assert first._closed
    assert b.search("kernel engine") is not None and len(b.result) == 0 and "closed" not in b.status.value
    assert b.engine is ip.magics_manager.registry["MemoryMagics"].engine
    assert t.refresh()["documents"] == 0


def test_widgets_report_a_kernel_engine_that_cannot_open(ip, tmp_path):
    b = RecallBrowser(live=False)
    (tmp_path / "file").write_text("not a dir")
    ip.run_line_magic("config", f"MemoryMagics.data_dir = {str(tmp_path / 'file')!r}")
    assert b.search("anything") is None and "cannot open the memory store" in b.status.value
    assert TierStats(live=False).stats is None


def test_failed_search_drops_the_previous_result(stocked):
    b = RecallBrowser(stocked, query="sales", live=False)
    assert b.result is not None and b.hit_views
    stocked.close()
    assert b.search("deploys") is None and b.result is None
    assert "closed" in b.status.value and b.results.children == () and b.hit_views == []
    data = b._repr_mimebundle_()
    assert "closed" in data["text/html"] and "closed" in data["text/plain"]
    assert b.search() is None and b.result is None                            # the box's query, failing again


def test_scope_in_any_order(stocked):
    b = RecallBrowser(stocked, scope="global+project", query="deploys")
    assert b.scope_box.value == "project+global" and b.result is not None
    assert RecallBrowser(stocked, scope=" global + session ").scope_box.value == "session+global"


@pytest.mark.parametrize("kwargs,match", [
    ({"scope": "bogus"}, "unknown scope"), ({"scope": "global+bogus"}, "unknown scope"), ({"scope": 3}, "scope"),
    ({"query": 5}, "query"), ({"query": b"sales"}, "query"), ({"limit": 0}, "limit"), ({"limit": 51}, "limit"),
    ({"limit": "5"}, "limit"), ({"limit": True}, "limit"), ({"live": "yes"}, "live"), ({"result": "x"}, "result"),
])
def test_browser_arguments_are_checked(stocked, kwargs, match):
    from ipy_memory.errors import InvalidArgument
    with pytest.raises(InvalidArgument, match=match):
        RecallBrowser(stocked, **kwargs)


@pytest.mark.parametrize("query", [5, b"sales", ["sales"]])
def test_browser_search_checks_its_query(stocked, query):
    from ipy_memory.errors import InvalidArgument
    b = RecallBrowser(stocked, query="deploys")
    with pytest.raises(InvalidArgument, match="query"):
        b.search(query)
    assert b.query_box.value == "deploys"


@pytest.mark.parametrize("kwargs,match", [({"stats": {"documents": 1}}, "stats"), ({"live": 1}, "live")])
def test_tier_stats_arguments_are_checked(stocked, kwargs, match):
    from ipy_memory.errors import InvalidArgument
    with pytest.raises(InvalidArgument, match=match):
        TierStats(stocked, **kwargs)


def test_an_engine_must_be_an_engine():
    from ipy_memory.errors import InvalidArgument
    for cls in (RecallBrowser, TierStats):
        with pytest.raises(InvalidArgument, match="engine"):
            cls("not an engine")
