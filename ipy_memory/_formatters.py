"""The shell's display formatters for results, installed by %load_ext: they make a RecallResult,
MemoryList or Stats show as ``MemoryMagics.display`` says. Kept apart from widgets.py so that
loading the extension does not import ipywidgets (~30 ms here): only a live view does.
"""

from __future__ import annotations

from pathlib import Path

from .config import default_data_dir
from .models import MemoryList, RecallResult, Stats


class ShellDisplay:
    """Per-shell formatters that make results follow ``MemoryMagics.display`` (installed by %load_ext).

    auto: HTML + Markdown + text; html: HTML + text; text: text only; widget: like html, plus the live
    view (RecallBrowser for a RecallResult, TierStats for Stats) where a kernel can render it.
    """

    def __init__(self, magics):
        self.magics, self.shell = magics, magics.shell
        self._installed: list[tuple[object, type, object]] = []

    def install(self, *extra: tuple) -> None:
        """Register the formatters; `extra` is (cls, pretty-printer) for text/plain."""
        fmt = self.shell.display_formatter
        html, md, bundle = fmt.formatters["text/html"], fmt.formatters["text/markdown"], fmt.mimebundle_formatter
        entries = [(bundle, RecallResult, self._widget), (bundle, Stats, self._widget)]
        for cls in (RecallResult, MemoryList, Stats):
            entries += [(html, cls, self._html), (md, cls, self._markdown)]
        if extra:
            entries.append((fmt.formatters["text/plain"], *extra))
        for formatter, cls, fn in entries:
            self._installed.append((formatter, cls, formatter.for_type(cls, fn)))

    def uninstall(self) -> None:
        for formatter, cls, old in reversed(self._installed):
            formatter.pop(cls, None)
            if old is not None:
                formatter.for_type(cls, old)
        self._installed.clear()

    def _html(self, obj):
        return obj._repr_html_() if self.magics.display != "text" else None

    def _markdown(self, obj):
        return obj._repr_markdown_() if self.magics.display == "auto" else None

    def _widget(self, obj):
        if self.magics.display != "widget" or getattr(self.shell, "kernel", None) is None:
            return None
        origin = getattr(obj, "origin", None)
        made_by = getattr(origin, "engine", None)
        if origin is None or (made_by is None or getattr(made_by, "_closed", False)) and \
                self._kernel_store() != origin.data_dir:
            return None     # no engine known to act on (its Forget would hit another store): static only
        from .widgets import WIDGET_MIME, RecallBrowser, TierStats     # (ipywidgets: only for a live view)
        # no engine passed: the view acts on the one that made `obj`, with the same recall arguments
        view = RecallBrowser(result=obj, live=True) if isinstance(obj, RecallResult) else \
            TierStats(stats=obj, live=True)
        return {WIDGET_MIME: view._repr_mimebundle_()[WIDGET_MIME]}

    def _kernel_store(self):
        """The data dir of the kernel's engine: the open one's, else the one the magics' settings open
        (without opening it: no side effect here). A view whose own engine is gone (collected or closed)
        acts on that engine only on the same store (widgets._made_by)."""
        kernels = getattr(self.magics, "_engine", None)
        if kernels is not None and not getattr(kernels, "_closed", False):
            return kernels.data_dir
        data_dir = self.magics.data_dir
        return (Path(data_dir).expanduser() if data_dir else default_data_dir()).resolve()
