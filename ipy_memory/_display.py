"""Plain-text, Markdown and static HTML renderings of result objects (no IPython import)."""

from __future__ import annotations

import html

_COLUMNS = {
    "hits": ("id", "score", "path", "title", "text"),
    "memories": ("id", "scope", "title", "node_count", "created_at"),
}


def _cell(v, width: int = 60) -> str:
    s = f"{v:.3f}" if isinstance(v, float) else str(v if v is not None else "")
    s = " ".join(s.split())
    return s if len(s) <= width else s[: width - 1] + "…"


def _rows(table):
    cols = _COLUMNS.get(table._kind, ("id",))
    return cols, [[_cell(getattr(r, c, "")) for c in cols] for r in table]


def table_text(table) -> str:
    cols, rows = _rows(table)
    if not rows:
        return f"(no {table._kind})"
    return "\n".join(" | ".join(r) for r in [list(cols), *rows])


def table_markdown(table) -> str:
    cols, rows = _rows(table)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)


def table_html(table) -> str:
    cols, rows = _rows(table)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def stats_text(stats) -> str:
    lines = [f"{k}: {v}" for k, v in stats.items() if not isinstance(v, dict)]
    for tier, row in stats.get("tiers", {}).items():
        lines.append(f"tier {tier}: " + ", ".join(f"{k}={v}" for k, v in row.items()))
    return "\n".join(lines)


def stats_markdown(stats) -> str:
    return "```\n" + stats_text(stats) + "\n```"


def stats_html(stats) -> str:
    return "<pre>" + html.escape(stats_text(stats)) + "</pre>"
