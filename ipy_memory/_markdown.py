"""Markdown -> a flat list of sections in document order, each knowing its heading chain.

Only what memory needs: ATX (`## x`) and setext (`x` underlined by `===`/`---`; not the text of a
list item or block quote, as in CommonMark) headings, fenced code blocks (whose `#` lines are code,
not headings; an unclosed fence runs to the end) and a leading YAML front-matter block (kept as
text, never parsed into headings). A leading byte order mark (U+FEFF) is dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._text import squeeze_spaces

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FRONT_END = re.compile(r"^(?:---|\.\.\.)[ \t]*$")
# what a setext underline cannot follow (CommonMark): a thematic break, a block quote, a list item
# (the text of either continues without a blank line, lazily; "- a\n---" is a list and a rule)
_BREAK = re.compile(r" {0,3}([-*_])[ \t]*(?:\1[ \t]*){2,}$")
_ITEM = re.compile(r" {0,3}(?:[-*+]|(\d{1,9})[.)])(?:([ \t]+)(\S?)|$)")
_OPENS = frozenset("-*+_>0123456789")       # what such a line starts with (after at most three spaces)
_BOM = "\ufeff"      # some editors start a file with one: it would hide the first heading
# the first sentence, as ^(.{1,120}?)(?:[.!?。！？](?:\s|$)|\n|$) (re.S) matches it: a lazy match tries each
# of 120 positions (~12,000 instructions a memory), where a search finds the next candidate end
_SENTENCE = re.compile(r"^(.{1,120}?)(?:[.!?。！？](?:\s|$)|\n|$)", re.S)
_ENDS = re.compile(r"[.!?。！？\n]")


@dataclass
class Section:
    level: int          # 0 for the text before the first heading
    title: str
    path: str           # heading chain joined by "/"
    body: str
    parent: int         # index of the enclosing section, -1 for top level


def _clean_heading(text: str) -> str:
    return " ".join(text.replace("/", "∕").split())  # "/" separates path parts


def parse(text: str) -> list[Section]:
    text = text.removeprefix(_BOM)
    # one line without "#" (printable: no line break of any kind str.splitlines knows) holds no
    # heading: most memories, and the line pass costs them ~3 us
    if "#" not in text and text.isprintable():
        return [Section(0, "", "", text.strip(), -1)]
    return _parse_lines(text)


# what a fence, an ATX heading or a setext underline starts with, after at most three spaces
_MARKS = frozenset("#`~=-")


def _opens(line: str, rest: str, in_paragraph: bool) -> tuple[str | None, int]:
    """What `line` (`rest`: without its indent of at most three spaces) opens: ("break", 0),
    ("quote", 0), ("item", the column of its text) or (None, 0). An empty item, or a numbered one
    not numbered 1, cannot interrupt a paragraph: it continues it."""
    c = rest[:1]
    if c == ">":
        return "quote", 0
    if c in ("-", "*", "_") and _BREAK.match(line):
        return "break", 0
    m = _ITEM.match(line) if c in ("-", "*", "+") or "0" <= c <= "9" else None
    if m is None or in_paragraph and (not m.group(3) or m.group(1) not in (None, "1")):
        return None, 0
    return "item", (m.end(2) if m.group(2) and len(m.group(2)) <= 4 else m.end() + 1)


def _parse_lines(text: str, screen: bool = True) -> list[Section]:
    """The sections of `text`, line by line. With `screen`, a line is matched against the regexes
    only if its first character after at most three spaces is one they start with (prose lines
    then cost no regex); without it every regex meets every line (the definition the tests hold it to)."""
    lines = text.splitlines()
    headings: list[tuple[int, int, str]] = []   # (line index, level, title); setext uses the text line
    skip: set[int] = set()                        # underline lines of setext headings
    fence: str | None = None
    start = 0
    if lines and lines[0].strip() == "---":     # front matter: opaque text up to its closing line
        for j in range(1, len(lines)):
            if _FRONT_END.match(lines[j]):
                start = j + 1
                break
    para_start = -1                               # first line of the current paragraph, or -1
    lazy = False                                  # in a list item or block quote's text
    item = 0                                      # the column of the last list item's text (0: none)
    for i in range(start, len(lines)):
        line = lines[i]
        rest = line.lstrip(" ")
        marked = not screen or (rest[:1] in _MARKS and len(line) - len(rest) <= 3)
        if fence is not None:
            m = marked and _FENCE.match(line)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip().strip(m.group(1)[0]):
                fence = None
            continue
        if marked:
            m = _FENCE.match(line)
            if m:
                fence, para_start, lazy, item = m.group(1), -1, False, 0
                continue
            m = _ATX.match(line)
            if m:
                headings.append((i, len(m.group(1)), _clean_heading(m.group(2) or "")))
                para_start, lazy, item = -1, False, 0
                continue
            if _SETEXT.match(line) and para_start >= 0:
                title = " ".join(ln.strip() for ln in lines[para_start:i])
                headings.append((para_start, 1 if line.strip()[0] == "=" else 2, _clean_heading(title)))
                skip.update(range(para_start + 1, i + 1))
                para_start = -1
                continue
        if not line.strip():
            para_start, lazy = -1, False
        elif line.startswith(("    ", "\t")):
            para_start = -1
        else:
            kind, column = _opens(line, rest, para_start >= 0) if rest[:1] in _OPENS else (None, 0)
            if kind is not None:
                para_start, lazy = -1, kind != "break"
                item = column if kind == "item" else item if kind == "quote" else 0
            elif lazy or item and len(line) - len(rest) >= item:     # (a list item's text after a blank line)
                para_start, lazy = -1, True
            elif para_start < 0:
                para_start, item = i, 0

    sections: list[Section] = []
    first = headings[0][0] if headings else len(lines)
    root = "\n".join(lines[:first]).strip()
    if root or not headings:
        sections.append(Section(0, "", "", root, -1))
    stack: list[tuple[int, int]] = []            # (level, section index)
    for n, (i, level, title) in enumerate(headings):
        end = headings[n + 1][0] if n + 1 < len(headings) else len(lines)
        own = lines[i + 1:end]                    # (without the underlines of setext headings, if any)
        body = "\n".join([ln for j, ln in enumerate(own, i + 1) if j not in skip] if skip else own).strip()
        while stack and stack[-1][0] >= level:
            stack.pop()
        parent = stack[-1][1] if stack else -1
        path = f"{sections[parent].path}/{title}" if parent >= 0 else title
        sections.append(Section(level, title, path, body, parent))
        stack.append((level, len(sections) - 1))
    return sections


def default_title(text: str, sections: list[Section]) -> str:
    """The first heading, else the first sentence (at most 120 characters)."""
    for s in sections:
        if s.level and s.title:
            return s.title
    text = text.removeprefix(_BOM).strip()
    return squeeze_spaces(first_sentence(text))


def first_sentence(text: str) -> str:
    """_SENTENCE's group(1), else the first 120 characters."""
    n, m = len(text), _ENDS.search(text, 1, 121)
    while m:
        k = m.start()
        if text[k] == "\n" or k + 1 == n or text[k + 1].isspace():     # (\s is str.isspace)
            return text[:k]
        m = _ENDS.search(text, k + 1, 121)
    return text[:120]       # (the text itself if it is shorter: `$`)
