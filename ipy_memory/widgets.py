"""ipywidgets views: `RecallBrowser` (search, inspect, forget) and `TierStats` (counts and sizes per tier and space).

    from ipy_memory.widgets import RecallBrowser, TierStats
    RecallBrowser(mem, query="sales table")     # or RecallBrowser() after %load_ext ipy_memory
    TierStats(mem)

Static first: displaying a view always sends its current state as static HTML (and plain text), so an
exported or unexecuted notebook still shows the results; the live widget view is added only where a
kernel can serve it (and not when ``MemoryMagics.display`` is 'html' or 'text').
"""

from __future__ import annotations

import html

import ipywidgets as w

from . import _display
from . import _validate as v
from ._magicline import loaded_magics, scope_arg
from ._formatters import ShellDisplay  # noqa: F401  (re-exported: it lived here)
from IPython.core.error import UsageError

from .errors import InvalidArgument, IpyMemoryError, StorageError
from .models import RecallResult, Stats
from .tools import SEARCH_SCOPES, call_tool
from .tools import _error as tool_error

__all__ = ["RecallBrowser", "TierStats", "HitView", "ShellDisplay", "live_widgets"]

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def _magics():
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        return None, None
    shell = get_ipython()
    return shell, loaded_magics(shell)


def live_widgets() -> bool:
    """True inside a kernel (ipykernel) whose display setting allows widgets; False in terminal IPython or scripts."""
    shell, magics = _magics()
    if magics is not None and magics.display in ("html", "text"):
        return False
    return getattr(shell, "kernel", None) is not None


def _engine_source(engine, origin=None):
    """How a view finds its engine for each call: the one passed; else the one that made the result it
    shows (`origin`, see _made_by); else the kernel's, looked up every time (the magics close theirs and
    open another when %config changes its settings)."""
    if engine is not None:
        if not callable(getattr(engine, "recall", None)):
            raise InvalidArgument(f"engine must be a MemoryEngine (or None: the kernel's), not {type(engine).__name__}")
        return lambda: engine
    if origin is not None:
        return lambda: _made_by(origin)
    if _magics()[1] is None:
        raise InvalidArgument("pass an engine, e.g. RecallBrowser(MemoryEngine()), or run %load_ext ipy_memory first")
    return _kernel_engine


def _made_by(origin):
    """The engine that made a shown result (models.Origin), so that Forget and Search act on the store the
    hits came from, not on the kernel's. Once it is closed (the magics reopen theirs when a setting changes),
    the kernel's engine stands in only if it is on the same data dir: another store may hold the same ids."""
    engine = origin.engine
    if engine is not None and not getattr(engine, "_closed", False):
        return engine
    magics = _magics()[1]
    kernels = magics.engine if magics is not None else None
    if kernels is not None and kernels.data_dir == origin.data_dir:
        return kernels
    raise StorageError(f"the engine these results came from ({origin.data_dir}) is closed, or not known to "
                       "this copy of them: open a new view on an open engine, e.g. RecallBrowser(engine)")


def _kernel_engine():
    magics = _magics()[1]
    if magics is None:
        raise InvalidArgument("ipy_memory is no longer loaded: run %load_ext ipy_memory, or pass an engine")
    return magics.engine


def _live_arg(live):
    return None if live is None else v.flag(live, "live (None: detect)")


class _Static:
    """Mixin: the engine of each call (see _engine_source), and a mimebundle with the static HTML and text,
    plus the widget view where it can render."""

    live: bool | None = None   # None = detect; True/False to force
    error: str | None = None   # the last call's error, shown instead of a result

    @property
    def engine(self):
        """The engine the next search, forget or refresh uses."""
        return self._engine_source()

    def _call(self, tool: str, arguments: dict):
        """call_tool on the current engine; an engine that cannot be had is an error result too."""
        try:
            engine = self.engine
        except (IpyMemoryError, UsageError) as exc:     # the magics say UsageError when the store cannot open
            return tool_error(tool, str(exc), type(exc).__name__)
        return call_tool(tool, arguments, engine=engine)

    def _error_html(self) -> str:
        return f'<span style="color:#c0392b">{html.escape(self.error or "")}</span>'

    def _static_html(self) -> str:
        raise NotImplementedError

    def _static_text(self) -> str:
        raise NotImplementedError

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
        _, magics = _magics()
        data = {"text/plain": self._static_text()}
        if magics is None or magics.display != "text":
            data["text/html"] = self._static_html()
        if self.live if self.live is not None else live_widgets():
            view = super()._repr_mimebundle_(include=include, exclude=exclude, **kwargs) or {}
            if WIDGET_MIME in view:
                data[WIDGET_MIME] = view[WIDGET_MIME]
        return data


class HitView(w.VBox):
    """One hit in a RecallBrowser: text and metadata, and a forget button that asks for confirmation."""

    def __init__(self, browser: "RecallBrowser", hit, rank: int):
        self.hit, self.browser = hit, browser
        self.body = w.HTML(_display.hit_body_html(hit))
        self.forget_button = w.Button(description="Forget…", icon="trash", tooltip=f"forget {hit.id}",
                                      layout=w.Layout(width="auto"))
        self.confirm_button = w.Button(description="Yes, forget it", button_style="danger", layout=w.Layout(width="auto"))
        self.cancel_button = w.Button(description="Cancel", layout=w.Layout(width="auto"))
        self.confirm_box = w.HBox([w.Label(f"Forget {hit.id} permanently?"), self.confirm_button, self.cancel_button],
                                  layout=w.Layout(display="none"))
        self.forget_button.on_click(lambda _: self._ask(True))
        self.cancel_button.on_click(lambda _: self._ask(False))
        self.confirm_button.on_click(lambda _: browser.forget(hit.id))
        super().__init__([self.body, w.HBox([self.forget_button, self.confirm_box])])

    @property
    def confirming(self) -> bool:
        return self.confirm_box.layout.display != "none"

    def _ask(self, on: bool) -> None:
        self.confirm_box.layout.display = None if on else "none"
        self.forget_button.disabled = on


class RecallBrowser(_Static, w.VBox):
    """Search memory interactively: query box, scope, limit; hits as an accordion; forget; the raw recall block.

    `engine` is a MemoryEngine, or None: then the engine that made `result` (a RecallResult), else the
    kernel's (after %load_ext ipy_memory), looked up on every search so that it follows %config changes.
    A `result` also gives the defaults of `scope` and `limit`, and its other recall arguments (project,
    path, max_tokens, ...) are kept for every search (`options`). A failed search shows its error and
    leaves no result.
    """

    def __init__(self, engine=None, *, query: str = "", scope: str | None = None, limit: int | None = None,
                 result=None, live: bool | None = None):
        if result is not None and not isinstance(result, RecallResult):
            raise InvalidArgument(f"result must be a RecallResult (e.g. mem.recall(...)) or None, not {type(result).__name__}")
        origin = getattr(result, "origin", None)
        self._engine_source = _engine_source(engine, origin)
        self.live = _live_arg(live)
        made = dict(origin.arguments) if origin is not None else {}
        self.options = {k: val for k, val in made.items() if k not in ("scope", "limit") and val is not None}
        query = v.text(query, "query", max_chars=10_000, allow_empty=True)
        scope = scope_arg(made.get("scope", "project+global") if scope is None else scope, "scope")   # any order
        if limit is None:
            limit = made.get("limit") or (min(50, len(result)) if result else 10)
        limit = v.integer(limit, "limit", 1, 50)
        self.result = result
        self.hit_views: list[HitView] = []
        self.query_box = w.Text(value=query or getattr(result, "query", ""), placeholder="search memory…",
                                continuous_update=False, layout=w.Layout(flex="1 1 auto", width="auto"))
        self.scope_box = w.Dropdown(options=SEARCH_SCOPES, value=scope, description="scope",
                                    layout=w.Layout(width="260px"))
        self.limit_box = w.IntSlider(value=limit, min=1, max=50, description="limit", layout=w.Layout(width="260px"))
        self.search_button = w.Button(description="Search", icon="search", layout=w.Layout(width="auto"))
        self.status = w.HTML()
        self.results = w.Accordion()
        self.block_toggle = w.ToggleButton(description="raw recall block", icon="code", value=False)
        self.block_view = w.HTML(layout=w.Layout(display="none"))
        self.query_box.observe(lambda _: self.search(), names="value")
        self.search_button.on_click(lambda _: self.search())
        self.block_toggle.observe(self._toggle_block, names="value")
        # what else every search keeps from the result, said next to the controls it has none of
        self.options_label = w.Label(", ".join(f"{k.replace('_', ' ')}: {val}" for k, val in self.options.items()))
        controls = w.HBox([self.query_box, self.scope_box, self.limit_box, self.search_button, self.options_label])
        super().__init__([controls, self.status, self.results, self.block_toggle, self.block_view])
        if result is not None:
            self._render()
        elif query:
            self.search()

    def search(self, query: str | None = None):
        """Run the query in the box (or `query`, which is put in the box); returns the RecallResult or None."""
        if query is not None:
            query = v.text(query, "query", max_chars=10_000, allow_empty=True)
        if query is not None and query != self.query_box.value:
            self.query_box.value = query   # the observer runs the search
            return self.result
        text = self.query_box.value.strip()
        if not text:
            self.result = None
            self._render()
            return None
        # a failed search shows its error, not the previous query's hits
        self.result, self.error = self._recall(text)
        self._render()
        return self.result

    def _recall(self, query: str):
        """(RecallResult, None) or (None, the error): the engine's recall with the boxes' scope and limit and
        the result's other arguments (which the search tool does not all take: the engine is called)."""
        scope = self.scope_box.value      # (the result's project and session: for the scopes that have them)
        options = {k: val for k, val in self.options.items() if k not in ("project", "session") or k in scope.split("+")}
        try:
            return self.engine.recall(query, scope=scope, limit=self.limit_box.value, **options), None
        except (IpyMemoryError, UsageError) as exc:     # the magics say UsageError when the store cannot open
            return None, f"Error: {type(exc).__name__}: {exc}"

    def forget(self, id: str) -> bool:
        """Forget a hit (as the confirm button does), then search again."""
        r = self._call("memory_forget", {"id": id})
        self.search()
        self.status.value = html.escape(r.text)
        return not r.is_error

    def _render(self) -> None:
        hits = list(self.result or [])
        self.hit_views = [HitView(self, h, i) for i, h in enumerate(hits, 1)]
        self.results.children = self.hit_views
        self.results.titles = tuple(_display.hit_title(h, i) for i, h in enumerate(hits, 1))
        self.results.selected_index = None
        if self.error:
            self.status.value = self._error_html()
        else:
            self.status.value = "" if self.result is None else html.escape(_display.hits_header(self.result), quote=False)
        block = getattr(self.result, "block", "")
        self.block_view.value = f'<pre style="white-space:pre-wrap;margin:0">{html.escape(block)}</pre>' if block else ""

    def _toggle_block(self, change) -> None:
        self.block_view.layout.display = None if change["new"] else "none"

    def _static_html(self) -> str:
        if self.result is None:
            return _display._box(self._error_html() if self.error else "<i>no search yet</i>")
        return _display.hits_html(self.result)

    def _static_text(self) -> str:
        if self.result is None:
            return self.error or "RecallBrowser (no search yet)"
        return _display.hits_text(self.result)


class TierStats(_Static, w.VBox):
    """Counts and sizes of the store per tier and per space, with a refresh button (`engine` as in
    RecallBrowser: None is the engine that made `stats`, else the kernel's)."""

    def __init__(self, engine=None, *, stats=None, live: bool | None = None):
        if stats is not None and not isinstance(stats, Stats):
            raise InvalidArgument(f"stats must be a Stats (e.g. mem.stats()) or None, not {type(stats).__name__}")
        self._engine_source = _engine_source(engine, getattr(stats, "origin", None))
        self.live = _live_arg(live)
        self.stats = None
        self.view = w.HTML()
        self.refresh_button = w.Button(description="Refresh", icon="refresh", layout=w.Layout(width="auto"))
        self.refresh_button.on_click(lambda _: self.refresh())
        super().__init__([self.view, self.refresh_button])
        if stats is not None:
            self._show(stats)
        else:
            self.refresh()

    def refresh(self):
        """Read the stats again; returns them."""
        r = self._call("memory_stats", {})
        if r.is_error:      # the error replaces the old numbers, as a failed search does its hits
            self.stats, self.error = None, r.text
            self.view.value = self._error_html()
            return None
        self.error = None
        self._show(r.value)
        return self.stats

    def _show(self, stats) -> None:
        self.stats = stats
        self.view.value = _display.stats_html(stats)

    def _static_html(self) -> str:
        return self.view.value

    def _static_text(self) -> str:
        return _display.stats_text(self.stats) if self.stats is not None else (self.error or "TierStats")
