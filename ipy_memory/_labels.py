"""A chat-log line's label: the leading "[timestamp] Speaker: " of "[8 May 2023] Caroline: I went...".

It repeats in every line of a conversation and says when and by whom, not what the line is about.
The lexical index keeps its words as body terms (a question naming the speaker or the date matches
them, and their document frequency keeps a name that labels half the lines as cheap as it is), but
scores them as it scores the terms a document shares (lexical.py): as if the line had the average
length. Scored by length, a speaker's name favoured their shortest lines ("Bye!", "Thanks, Mel!") for
any question naming them, and a date the shortest lines of that day. A label's postings are stored
with a negative term frequency (`mark`); `_lexscore.node_postings` reads the mark and drops it.

Recognition is conservative: the parts `_text.chat_parts` splits off, when they plainly are a label.
A timestamp must look like a date or time (a clock time, a numeric date, a year, a month or weekday
with a number): "[x]", "[1]", "[link](url)" and "[1.2.0]" are none. Without a timestamp the speaker
must look like a name (capitalised words, or a chat role) and not a label of prose ("Note:", "Q:").
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from . import _text

_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
_DAY = r"(?:mon|tue|tues|wed|thu|thur|thurs|fri|sat|sun)[a-z]*\.?"
_ROLES = frozenset("user assistant system human ai bot model tool agent me".split())
_NOT_NAMES = frozenset("""note notes nb ps todo fixme hack xxx warning warn error errors caution danger tip tips hint
info important example examples summary tldr question answer q a re fwd subject step output input result
results reason status source update edit see also fix fixed added changed removed""".split())


@lru_cache(maxsize=None)
def _timestamp_patterns() -> tuple[re.Pattern, re.Pattern]:
    """(every token is a date / time word or a number, a date or time is there); compiled at first use."""
    token = rf"(?:\d+(?:st|nd|rd|th)?|{_MONTH}|{_DAY}|[ap]\.?m\.?|on|at|utc|gmt|z|t)"
    return (re.compile(rf"(?:{token}|[\s,:./+-])+", re.I),
            re.compile(rf"\d{{1,2}}:\d\d|\b\d{{4}}([-/.])\d\d?\1\d\d?\b|\b\d\d?([/-])\d\d?\2\d{{2,4}}\b"
                       rf"|\b\d\d?\.\d\d?\.\d{{4}}\b|\b(?:19|20)\d\d\b(?!\.\d)"
                       rf"|\b{_MONTH}\s*\d|\d(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}|\d\s*[ap]\.?m\b"
                       r"|\b(?:mon|tues|wednes|thurs|fri|satur|sun)day\b", re.I))


@lru_cache(maxsize=4096)
def is_timestamp(text: str) -> bool:
    """'1:56 pm on 8 May, 2023', '2023-05-08 13:56', '08/05/2023', 'Mon 8 May', '2023-05-08T13:56:00Z'."""
    only, has = _timestamp_patterns()
    return len(text) <= 40 and bool(only.fullmatch(text)) and bool(has.search(text))


def _is_name(speaker: str) -> bool:
    words = speaker.split()
    return (speaker.casefold() in _ROLES
            or (words[0].casefold().strip(".") not in _NOT_NAMES and all(w[0].isupper() for w in words)))


def line_label(text: str, parts: tuple[str, str, str] | None = None) -> str:
    """The leading "[timestamp] Speaker: " of a chat-log line (its `_text.chat_parts`, given or
    computed), or '' when it is not plainly one."""
    stamp, speaker, message = parts or _text.chat_parts(text)
    ok = is_timestamp(stamp) if stamp else bool(speaker) and _is_name(speaker)
    return text[: len(text) - len(message)] if ok else ""


@lru_cache(maxsize=4096)
def _label_words(label: str) -> tuple[tuple[str, ...], int]:
    """A label's words and how many distinct terms they are."""
    ws = _text.surface_words(label)
    return ws, len({_text.term_hash(_text.stem(w)) for w in ws})


def label_size(label: str, words: tuple[str, ...]) -> int:
    """How many of a text's distinct terms (in order of first use) are those of its label: 0 without
    one, or if the label's words are not where the text's words begin (tokenised differently)."""
    if not label:
        return 0
    ws, n = _label_words(label)
    return n if words[: len(ws)] == ws else 0


def mark(counts: np.ndarray, distinct: np.ndarray, sizes: list[int]) -> np.ndarray:
    """The term frequencies of a batch (lexical.index_batch: each text's distinct terms in order of
    first use, `distinct` a text), float32, with the first sizes[i] terms of text i (its label's) negated."""
    tfs = counts.astype(np.float32)
    n = np.asarray(sizes, np.int64)
    if n.any():
        at = np.repeat(np.cumsum(distinct) - distinct - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
        tfs[at] = -tfs[at]
    return tfs
