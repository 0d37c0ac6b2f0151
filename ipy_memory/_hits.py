"""From ranked candidates to a recall's answer: the `path` filter, hits and their scores, the token budget."""

from __future__ import annotations

import json
import math
import numbers
from typing import Callable

import numpy as np

from . import _validate as v, block as _block
from .errors import InvalidArgument
from .models import Hit, RecallResult


def path_key(path: str) -> str:
    """A heading path as `recall(path=)` compares it: a heading's own "/" (stored as "∕", since "/"
    joins the parts) and "/" alike, whitespace squeezed in each part and dropped around "/"."""
    return "/".join(" ".join(part.split()) for part in path.replace("∕", "/").split("/")).strip("/")


def _is_under(stored: str, want: str) -> bool:
    """Whether stored path `stored` is `want` (a path_key) or under it: `want` ends where one of its
    headings ends (under "CI", "CI∕CD/Runners" is not)."""
    if not path_key(stored).startswith(want):
        return False
    parts = [path_key(part) for part in stored.split("/")]
    return any("/".join(parts[:i]) == want for i in range(1, len(parts) + 1))


def keys_under(store, spaces: list[str], path: str, now: float) -> np.ndarray:
    """The keys (ascending) of the unexpired sections of `spaces` at or under heading path `path`."""
    want = path_key(path)
    if not want:
        raise InvalidArgument(f"path must name a heading, e.g. 'Setup/Env', not {path!r}")
    # SQLite narrows the scan of the nodes (first: CROSS JOIN) to paths holding the longest word of
    # `want` (a "/" of which may be a heading's "∕"; an exchange stored before 38a227e kept its
    # session id's and speaker's spacing as typed, so no part with a space in it is looked for)
    marks = ",".join("?" * len(spaces))
    rows = store.query("SELECT n.key, n.path FROM nodes n CROSS JOIN documents d ON d.id = n.document_id "
                       f"WHERE instr(n.path, ?) > 0 AND d.space IN ({marks}) AND (d.expires_at IS NULL OR "
                       "d.expires_at > ?)", (max(want.replace("/", " ").split(), key=len), *spaces, now))
    return np.array(sorted(k for k, stored in rows if _is_under(stored, want)), np.int64)


def collect(rank: Callable[[int], list], node_rows: Callable[[list], dict], store, want: int,
            min_score: float | None) -> list[Hit]:
    """The best `want` hits from `rank(k)` (candidates) and `node_rows(keys)` (NODE_SELECT rows by
    key). A stand-in that is a hit already makes none: while more candidates may exist, a wider
    ranking is asked for."""
    k = want
    while True:
        cands = rank(k)
        rows = node_rows([c.key for c in cands])
        subs = stand_ins(store, [r for r in rows.values() if not r[6].strip()])
        more = node_rows(sorted({sub for sub in subs.values() if sub not in rows}))
        subs = {key: rows.get(sub) or more.get(sub) for key, sub in subs.items()}
        found, done = hits(cands, rows, subs, want, min_score)
        if done or sum(not c.bare for c in cands) < k:
            return found
        k *= 4


_SPACES = "' ' || char(9) || char(10) || char(13)"     # (for trim(): bodies hold no other space at their ends)


def stand_ins(store, empty: list[tuple]) -> dict[int, int]:
    """{key of a section without text (NODE_SELECT row): key of its first subsection with text}, for
    those that have one."""
    if not empty:
        return {}
    docs = sorted({r[1] for r in empty})
    nodes: dict[str, list[tuple]] = {}
    for doc, *node in store.query(f"SELECT document_id, key, depth, trim(COALESCE(body, 'x'), {_SPACES}) != '' "
                                  f"FROM nodes WHERE document_id IN ({','.join('?' * len(docs))}) "
                                  "ORDER BY document_id, ord", docs):
        nodes.setdefault(doc, []).append(node)
    out = {}
    for r in empty:
        sections = nodes.get(r[1], [])
        at = next((i for i, n in enumerate(sections) if n[0] == r[0]), None)
        for key, depth, text in sections[at + 1:] if at is not None else ():
            if depth <= sections[at][1]:
                break
            if text:
                out[r[0]] = key
                break
    return out


def hits(cands: list, rows: dict[int, tuple], subs: dict[int, tuple], want: int,
         min_score: float | None) -> tuple[list[Hit], bool]:
    """Up to `want` hits of `cands` (best first), and whether more candidates could not add any (it
    has `want`, or reached one below `min_score`). A section without text of its own (a heading
    whose text is all in its subsections) is no hit: `subs`, its first subsection with text, takes
    its place, unless that is a hit already. (A memory of headings alone keeps them.)"""
    out: list[Hit] = []
    taken = set()
    for c in cands:
        r = rows.get(c.key)
        if r is not None and not r[6].strip():
            r = subs.get(r[0]) or r
        if r is None or r[0] in taken:
            continue
        score = round(float(c.score), 6)      # min_score compares the score the hit shows
        if min_score is not None and score < min_score:
            return out, True
        taken.add(r[0])
        meta = {**(json.loads(r[14]) if r[14] else {}), **(json.loads(r[7]) if r[7] else {})} or None
        out.append(Hit(id=f"{r[1]}#{r[2]}", document_id=r[1], path=r[4], title=r[5] or r[15], text=r[6],
                       score=score, scope=r[9], space=r[8], created_at=r[11], metadata=meta))
        if len(out) >= want:
            return out, True
    return out, False


def _checked(count):
    """Settings.token_counter, with its answers checked: a count of tokens, or InvalidArgument."""
    def checked(text: str):
        n = v.call_back(count, "Settings.token_counter", text)
        if isinstance(n, bool) or not isinstance(n, numbers.Real) or not (math.isfinite(n) and n >= 0):
            raise InvalidArgument(f"Settings.token_counter must return a number of tokens (>= 0), "
                                  f"got {n!r} ({type(n).__name__}) for a text of {len(text)} characters")
        return n
    return checked


def budget(query: str, found: list[Hit], limit: int, max_tokens: int | None, settings) -> RecallResult:
    """The best hits, at most `limit`, whose block fits `max_tokens` (whole items, best first)."""
    count, locale = _checked(settings.token_counter), settings.locale
    room = (max_tokens - _block.frame_cost(locale, count)) if max_tokens else None
    chosen, items, used = [], [], 0
    for h in found:
        text = _block.item(len(chosen) + 1, h.created_at, h.label, h.text)
        if room is not None:            # (without a budget only the whole block is counted)
            cost = count(text) + 1
            if used + cost > room:
                continue
            used += cost
        chosen.append(h)
        items.append(text)
        if len(chosen) >= limit:
            break
    block = _block.render(items, locale)
    if max_tokens is not None and count(block) > max_tokens:   # not even the frame fits the budget
        return RecallResult(query, [], "", tokens=0, candidates=len(found))
    return RecallResult(query, chosen, block, tokens=count(block), candidates=len(found))
