"""Plain-text, Markdown and static HTML renderings of result objects (no IPython import).

Each result has three faces: ``*_text`` for terminal IPython and ``repr()``, ``*_markdown`` for
GitHub and other Markdown renderers, ``*_html`` for JupyterLab and nbconvert. The HTML is escaped,
styled inline (no classes, no JavaScript) with colours that work on light and dark themes, and
degrades to a plain table where styles are stripped (GitHub).
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterable

from .block import CONTROL_CHARS

MUTED = "opacity:.7"
_FONT = "font-family:var(--jp-ui-font-family,system-ui,sans-serif);font-size:13px;line-height:1.4"
_BORDER = "border-bottom:1px solid rgba(127,127,127,.3)"
_TD = f"padding:4px 8px;text-align:left;vertical-align:top;{_BORDER}"
_NUM = f"padding:4px 8px;text-align:right;vertical-align:top;white-space:nowrap;{_BORDER}"
EXCERPT = 280
# provenance keys shown first, with their labels; anything else in metadata goes to the details line
_PROVENANCE = (("source", "source"), ("notebook", "notebook"), ("cell", "cell"), ("magic", "via"),
               ("tool", "tool"), ("name", "name"))


def _escape(text: str, quote: bool = True) -> str:
    from html import escape     # here: the html module (~1 ms) only for notebooks that render HTML
    return escape(text, quote=quote)


# ------------------------------------------------------------------------------ small helpers
def date(ts: float | None) -> str:
    return "" if ts is None else time.strftime("%Y-%m-%d", time.gmtime(ts))


def plural(n: Any, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def one_line(value: Any, width: int | None = None) -> str:
    """The value on one line, without control characters (a stored title's ESC sequences would
    drive the terminal that prints it)."""
    s = f"{value:.3f}" if isinstance(value, float) else ("" if value is None else str(value))
    s = " ".join(CONTROL_CHARS.sub(" ", s).split())
    return s if width is None or len(s) <= width else s[: width - 1] + "…"


def excerpt(text: str, limit: int = EXCERPT) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def human_bytes(n: Any) -> str:
    if not isinstance(n, (int, float)) or isinstance(n, bool):
        return one_line(n)
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def provenance(meta: dict | None) -> list[tuple[str, str]]:
    """(label, value) pairs worth showing next to a memory, most telling first."""
    if not meta:
        return []
    out = []
    for key, label in _PROVENANCE:
        value = meta.get(key)
        if value not in (None, ""):
            if key == "notebook":
                value = str(value).replace("\\", "/").rsplit("/", 1)[-1]
            out.append((label, one_line(value, 60)))
    return out


def provenance_text(meta: dict | None) -> str:
    return " · ".join(f"{k} {v}" if k == "cell" else f"{k}: {v}" for k, v in provenance(meta))


def _esc(value: Any) -> str:
    return _escape(one_line(value) if not isinstance(value, str) else value, quote=True)


def md_escape(value: Any, width: int | None = None) -> str:
    """Escape for a Markdown table cell: no stray markup, pipes or raw HTML."""
    s = one_line(value, width)
    s = s.replace("\\", "\\\\").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "|*_`[]#~$":
        s = s.replace(ch, "\\" + ch)
    return s


def _code(value: str) -> str:
    return value.replace("`", "'")


def _align(rows: list[list[str]], right: Iterable[int] = ()) -> list[str]:
    right = set(right)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in rows]


def _md_table(head: list[str], rows: list[list[str]], right: Iterable[int] = ()) -> str:
    right = set(right)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("--:" if i in right else "---" for i in range(len(head))) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _html_table(head: list[str], rows: list[list[str]], right: Iterable[int] = ()) -> str:
    """`rows` hold HTML already escaped."""
    right = set(right)
    th = "".join(f'<th style="{_NUM if i in right else _TD}">{_esc(h)}</th>' for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(f'<td style="{_NUM if i in right else _TD}">{c}</td>' for i, c in enumerate(r))
                   + "</tr>" for r in rows)
    return (f'<table style="border-collapse:collapse;margin:4px 0;{_FONT}"><thead><tr>{th}</tr></thead>'
            f"<tbody>{body}</tbody></table>")


def _box(inner: str) -> str:
    return f'<div style="{_FONT}">{inner}</div>'


# ------------------------------------------------------------------------------ hits (RecallResult)
def hit_title(hit, rank: int) -> str:
    """One line naming a hit: '1. Data/Owner · 0.912 · 2024-05-01'."""
    return f"{rank}. {one_line(hit.label, 70)} · {hit.score:.3f} · {date(hit.created_at)}"


def hit_body_html(hit) -> str:
    """A hit's text and metadata as HTML (the body of a widget accordion item)."""
    meta = hit.metadata or {}
    prov = provenance_text(meta)
    extra = {k: v for k, v in meta.items() if k not in dict(_PROVENANCE)}
    details = ""
    if extra:
        details = (f'<details><summary style="{MUTED}">metadata</summary><pre style="margin:2px 0;white-space:pre-wrap">'
                   f"{_escape(json.dumps(extra, ensure_ascii=False, indent=1, default=str))}</pre></details>")
    return _box(f'<div style="white-space:pre-wrap">{_escape(hit.text or "")}</div>'
                f'<div style="{MUTED};margin-top:4px"><code>{_esc(hit.id)}</code> · {_esc(hit.space)}'
                + (f" · {_esc(prov)}" if prov else "") + f"</div>{details}")


def _label_is_text(hit) -> bool:
    """A note without headings is labelled by its own first line: don't show that twice."""
    label, text = " ".join((hit.label or "").split()).rstrip(".…"), " ".join((hit.text or "").split())
    return bool(label) and text.startswith(label)


def hits_header(result) -> str:
    n = len(result)
    q = getattr(result, "query", None)
    head = plural(n, "hit") + (f" for {q!r}" if q is not None else "")
    tokens = getattr(result, "tokens", 0)
    head += f" · {tokens} tokens in the recall block" if tokens else ""
    found = getattr(result, "candidates", 0)
    if n == 0 and found:        # matches, but not one fits max_tokens (the only way a recall drops them all)
        head += f" · {found} {'match' if found == 1 else 'matches'} did not fit the token budget"
    return head


def hits_text(result) -> str:
    lines = [hits_header(result)]
    for i, h in enumerate(result, 1):
        lines.append(f"[{i}] {date(h.created_at)}  {h.score:.3f}  {one_line(h.label, 60)}  ({h.id})")
        if not (_label_is_text(h) and len(h.text.strip()) <= len(h.label) + 1):
            lines.append("      " + one_line(excerpt(h.text, 160)))
        prov = provenance_text(h.metadata)
        if prov:
            lines.append("      " + prov)
    return "\n".join(lines)


def hits_markdown(result) -> str:
    head = f"**{md_escape(hits_header(result))}**"
    if not len(result):
        return head
    rows = [[str(i), date(h.created_at), ("" if _label_is_text(h) else f"**{md_escape(h.label, 80)}** ")
             + f"`{h.id}`<br>{md_escape(excerpt(h.text))}", f"{h.score:.3f}", md_escape(provenance_text(h.metadata))]
            for i, h in enumerate(result, 1)]
    return head + "\n\n" + _md_table(["#", "date", "memory", "score", "provenance"], rows, right=(0, 3))


def hits_html(result) -> str:
    head = f'<div style="margin-bottom:2px"><b>{_esc(hits_header(result))}</b></div>'
    if not len(result):
        return _box(head)
    rows = []
    for i, h in enumerate(result, 1):
        label = "" if _label_is_text(h) else f"<b>{_esc(h.label)}</b> "
        memory = (f'{label}<code style="{MUTED}">{_esc(h.id)}</code>'
                  f'<div style="white-space:pre-wrap">{_escape(excerpt(h.text))}</div>')
        rows.append([str(i), _esc(date(h.created_at)), memory, f"{h.score:.3f}",
                     "<br>".join(f"{_esc(k)}: {_esc(v)}" for k, v in provenance(h.metadata))])
    return _box(head + _html_table(["#", "date", "memory", "score", "provenance"], rows, right=(0, 3)))


# ------------------------------------------------------------------------------ memories (MemoryList)
_MEM_HEAD = ["id", "created", "scope", "title", "sections", "tier", "expires", "source"]


def _memory_cells(m) -> list[str]:
    meta = getattr(m, "metadata", None) or {}
    return [m.id, date(m.created_at), m.scope, one_line(m.title or excerpt(m.content, 60), 50),
            str(m.node_count), str(getattr(m, "tier", "") or ""), date(m.expires_at) or "never",
            one_line(meta.get("source", ""), 20)]


def _memories_header(table) -> str:
    n, offset = len(table), getattr(table, "offset", 0)
    total = getattr(table, "total", n)
    if not n:
        return f"no memories (total {total})" if total else "no memories"
    return f"memories {offset + 1}–{offset + n} of {total}"


def memories_text(table) -> str:
    rows = [_memory_cells(m) for m in table]
    return "\n".join([_memories_header(table), *(_align([_MEM_HEAD, *rows], right=(4,)) if rows else [])])


def memories_markdown(table) -> str:
    rows = [[md_escape(c) if i != 0 else f"`{c}`" for i, c in enumerate(_memory_cells(m))] for m in table]
    head = f"**{_memories_header(table)}**"
    return head + ("\n\n" + _md_table(_MEM_HEAD, rows, right=(4,)) if rows else "")


def memories_html(table) -> str:
    rows = [[f"<code>{_esc(c)}</code>" if i == 0 else _esc(c) for i, c in enumerate(_memory_cells(m))]
            for m in table]
    head = f'<div style="margin-bottom:2px"><b>{_esc(_memories_header(table))}</b></div>'
    return _box(head + (_html_table(_MEM_HEAD, rows, right=(4,)) if rows else ""))


# ------------------------------------------------------------------------------ generic tables (models._Table)
def _generic_rows(table) -> tuple[list[str], list[list[str]]]:
    dicts = table.to_dicts()
    cols = list(dict.fromkeys(k for d in dicts for k in d))[:8]
    return cols, [[one_line(d.get(c), 60) for c in cols] for d in dicts]


def table_text(table) -> str:
    kind = getattr(table, "_kind", "rows")
    if kind == "hits":
        return hits_text(table)
    if kind == "memories":
        return memories_text(table)
    cols, rows = _generic_rows(table)
    return "\n".join(_align([cols, *rows])) if rows else f"(no {kind})"


def table_markdown(table) -> str:
    kind = getattr(table, "_kind", "rows")
    if kind == "hits":
        return hits_markdown(table)
    if kind == "memories":
        return memories_markdown(table)
    cols, rows = _generic_rows(table)
    return _md_table(cols, [[md_escape(c) for c in r] for r in rows]) if rows else f"(no {kind})"


def table_html(table) -> str:
    kind = getattr(table, "_kind", "rows")
    if kind == "hits":
        return hits_html(table)
    if kind == "memories":
        return memories_html(table)
    cols, rows = _generic_rows(table)
    return _box(_html_table(cols, [[_esc(c) for c in r] for r in rows])) if rows else _box(f"(no {_esc(kind)})")


# ------------------------------------------------------------------------------ stats
_SUMMARY_ONLY = ("size_bytes", "embedder", "dim")   # shown (formatted) in the summary line only


def stats_summary(stats) -> str:
    s = dict(stats)
    parts = [plural(s.get("documents", 0), "memory").replace("memorys", "memories"), plural(s.get("nodes", 0), "section")]
    if "size_bytes" in s:
        parts.append(human_bytes(s["size_bytes"]))
    if "embedder" in s:
        parts.append(f"embedder {s['embedder']}" + (f" ({s['dim']}-d)" if "dim" in s else ""))
    return "ipy_memory · " + " · ".join(parts)


def stats_details(stats) -> list[tuple[str, str]]:
    """The scalar entries under their own names, in the engine's order (None shows as '—')."""
    return [(k, "—" if v is None else one_line(v)) for k, v in stats.items()
            if k not in _SUMMARY_ONLY and not isinstance(v, (dict, list))]


def tier_rows(stats) -> tuple[list[str], list[list[str]]]:
    """Tier table: counts and text size, plus vector size and precision when the engine reports them."""
    tiers = stats.get("tiers") or {}
    vectors = any("vector_bytes" in r for r in tiers.values())
    precision = any("precision" in r for r in tiers.values())
    head = ["tier", "memories", "sections", "text size"] + (["vector size"] if vectors else []) \
        + (["precision"] if precision else [])
    rows = []
    for t, r in tiers.items():
        row = [str(t), str(r.get("documents", "")), str(r.get("nodes", "")),
               human_bytes(r.get("bytes", r.get("text_bytes", "")))]
        rows.append(row + ([human_bytes(r.get("vector_bytes", ""))] if vectors else [])
                    + ([str(r.get("precision", ""))] if precision else []))
    return head, rows


def space_rows(stats) -> tuple[list[str], list[list[str]]]:
    spaces, indexes = stats.get("spaces") or {}, stats.get("indexes") or {}
    extra = list(dict.fromkeys(k for v in indexes.values() if isinstance(v, dict) for k in v))
    head = ["space", "memories", "sections", *(f"{k} index" for k in extra)]
    rows = []
    for name in dict.fromkeys([*spaces, *indexes]):
        row, idx = spaces.get(name, {}), indexes.get(name, {})
        if not row and not any(idx.values() if isinstance(idx, dict) else ()):
            continue  # an index loaded but empty: nothing stored there
        rows.append([str(name), str(row.get("documents", 0)), str(row.get("nodes", 0)),
                     *(str(idx.get(k, "")) for k in extra)])
    return head, rows


_TIER_RIGHT = (1, 2, 3, 4)


def stats_text(stats) -> str:
    lines = [stats_summary(stats)]
    lines += [f"  {k}: {v}" for k, v in stats_details(stats)]
    head, tiers = tier_rows(stats)
    if tiers:
        lines += ["", *_align([head, *tiers], right=_TIER_RIGHT)]
    head, spaces = space_rows(stats)
    if spaces:
        lines += ["", *_align([head, *spaces], right=range(1, len(head)))]
    return "\n".join(lines)


def stats_markdown(stats) -> str:
    out = [f"**{md_escape(stats_summary(stats))}**", ""]
    out += [f"- {md_escape(k)}: `{_code(v)}`" for k, v in stats_details(stats)]
    head, tiers = tier_rows(stats)
    if tiers:
        out += ["", _md_table(head, [[md_escape(c) for c in r] for r in tiers], right=_TIER_RIGHT)]
    head, spaces = space_rows(stats)
    if spaces:
        out += ["", _md_table(head, [[md_escape(c) for c in r] for r in spaces], right=range(1, len(head)))]
    return "\n".join(out).strip()


def stats_html(stats) -> str:
    parts = [f'<div style="margin-bottom:4px"><b>{_esc(stats_summary(stats))}</b></div>']
    details = stats_details(stats)
    if details:
        parts.append(f'<div style="{MUTED}">' + " · ".join(f"{_esc(k)}: <code>{_esc(v)}</code>" for k, v in details)
                     + "</div>")
    head, tiers = tier_rows(stats)
    if tiers:
        parts.append(_html_table(head, [[_esc(c) for c in r] for r in tiers], right=_TIER_RIGHT))
    head, spaces = space_rows(stats)
    if spaces:
        parts.append(_html_table(head, [[_esc(c) for c in r] for r in spaces], right=range(1, len(head))))
    return _box("".join(parts))


# ------------------------------------------------------------------------------ remember results
def remember_html(result) -> str:
    return _box(_esc(result.summary()))
