"""Settings, environment variables and the data-dir / project / session defaults.

Every retrieval weight lives here with the default chosen by measurement (see BENCHMARKS.md);
none of them is keyed to a particular data set.
"""

from __future__ import annotations

import math
import numbers
import os
import re
import reprlib
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Callable

from .errors import InvalidArgument

DAY = 86_400.0
SCOPES = ("session", "project", "global")
LOCALES = ("en", "zh")        # the recall block's frame has these languages (block.FRAME)


def _default_tokens(text: str) -> int:
    return (len(text) + 3) // 4


@dataclass(frozen=True)
class Settings:
    # input limits
    max_content_chars: int = 1_000_000
    # scopes: default TTL in seconds (None = never expires)
    ttl_session: float | None = 30 * DAY
    ttl_project: float | None = 90 * DAY
    ttl_global: float | None = None
    # secrets: "exchanges" (captured chats only), "all" (every memory) or "off"
    redact: str = "exchanges"
    # duplicates
    dedup_threshold: float = 0.92
    # lexical ranking (BM25 over stemmed terms)
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    neighbor_weights: tuple[float, ...] = (0.5, 0.25)   # context lent by sections/turns at distance 1, 2
    context_mode: str = "columns"                      # "columns": neighbours' text as BM25 columns; "propagate": their scores
    parent_weight: float = 1.0                         # roll-up of the whole document's own score
    flatten_shared_terms: bool = True                  # a term in every section of a document scores them alike,
                                                       # as a chat line's "[time] Speaker:" label scores it (_labels.py)
    title_weight: float = 0.75                         # query names a heading / speaker of the node (x)
    title_match_weight: float = 0.5                    # ... and the heading's own match (+, finds headings)
    addressee_names: bool = True                       # ... not by a name the query addresses ("say to Ben",
                                                       # "with Ben") when another term names one (_text.addressee_terms)
    cue_weight: float = 0.3                            # node holds the kind of answer asked for
    reply_weight: float = 0.35                         # share of a question's own match lent to the next node (its answer)
    question_discount: float = 0.2                     # a node ending with a question is not an answer (x)
    sequence_window: float = 3600.0                    # flat memories of one session this close in time are neighbours
    # fusion with vector similarity: score = lex/max(lex) + w * cos/max(cos)
    vector_weight_semantic: float = 0.6                # 0.3 before sections were embedded with context
    # a real model embeds each section of a multi-section document with up to this many characters
    # of the previous and the next section's body after its own text (0: its own text only)
    embed_context_chars: int = 300
    vector_weight_hash: float = 0.0
    # query expansion, real models only: each query word also looks for the store's words whose own
    # model vector is at least `expand_threshold` close ("children" finds "kids", "pets" finds "dog"),
    # up to `expand_terms` per word, scored at `expand_weight` times the lexical score (0: off)
    expand_weight: float = 0.6
    expand_threshold: float = 0.6
    expand_terms: int = 2
    candidates: int = 100
    # priors (mild): importance in [0, 1] around 0.6, recency with a half-life
    importance_weight: float = 0.05
    recency_weight: float = 0.05
    recency_half_life: float = 30 * DAY
    # vector index
    # "auto": an HNSW graph for large spaces of a real model's vectors; the hashing embedder's spread
    # almost uniformly, where HNSW measured badly (BENCHMARKS.md), so they are always scanned exactly.
    # "hnsw": a graph whenever vectors rank recall; "exact": never a graph.
    vector_index: str = "auto"
    exact_threshold: int = 20_000       # below this many vectors in a space, search exactly
    hnsw_connectivity: int = 16
    hnsw_expansion_add: int = 128
    hnsw_expansion_search: int = 256
    hnsw_tail: int = 20_000             # vectors added since the graph was built are searched exactly
    # recall block
    locale: str = "en"
    token_counter: Callable[[str], int] = field(default=_default_tokens, compare=False, repr=False)

    def __post_init__(self):
        if isinstance(self.neighbor_weights, list):     # e.g. from JSON
            object.__setattr__(self, "neighbor_weights", tuple(self.neighbor_weights))
        for name, value in ((f.name, getattr(self, f.name)) for f in fields(self)):
            rule = _RULES.get(name)
            if rule is not None and not rule[0](value):
                raise InvalidArgument(f"Settings.{name} must be {rule[1]}, not {reprlib.repr(value)}")
            if isinstance(value, numbers.Real) and not isinstance(value, bool) and type(value) not in (int, float):   # numpy's: as Python's
                object.__setattr__(self, name, int(value) if isinstance(value, numbers.Integral) else float(value))
        object.__setattr__(self, "neighbor_weights", tuple(float(w) if type(w) not in (int, float) else w
                                                           for w in self.neighbor_weights))

    def ttl_for(self, scope: str) -> float | None:
        return {"session": self.ttl_session, "project": self.ttl_project, "global": self.ttl_global}[scope]

    def with_(self, **changes) -> "Settings":
        known = {f.name for f in fields(self)}
        unknown = set(changes) - known
        if unknown:
            raise InvalidArgument(f"unknown setting(s) {sorted(unknown)}; known: {sorted(known)}")
        return replace(self, **changes)


def _number(lo: float, hi: float = math.inf, integer: bool = False, none: bool = False):
    def ok(v) -> bool:
        if v is None:
            return none
        kind = numbers.Integral if integer else numbers.Real      # numpy's numbers too
        return isinstance(v, kind) and not isinstance(v, bool) and math.isfinite(v) and lo <= v <= hi
    what = f"{'an integer' if integer else 'a number'} in [{lo}, {hi}]" + (" or None" if none else "")
    return ok, what.replace("inf]", "inf)")


def _choice(*options):
    return (lambda v: isinstance(v, str) and v in options), "one of " + ", ".join(map(repr, options))


_WEIGHT = _number(0.0)
_RULES = {      # Settings field -> (check, what it must be); fields not listed take any value
    "max_content_chars": _number(1, integer=True), "ttl_session": _number(1e-9, none=True),
    "ttl_project": _number(1e-9, none=True), "ttl_global": _number(1e-9, none=True),
    "redact": _choice("exchanges", "all", "off"), "dedup_threshold": _number(0.0, 1.0),
    "bm25_k1": _number(0.0, 100.0), "bm25_b": _number(0.0, 1.0),
    "neighbor_weights": (lambda v: isinstance(v, tuple) and all(_WEIGHT[0](w) for w in v),
                         "a tuple of numbers >= 0 (one weight per distance)"),
    "context_mode": _choice("columns", "propagate"), "parent_weight": _WEIGHT,
    "flatten_shared_terms": (lambda v: isinstance(v, bool), "True or False"),
    "addressee_names": (lambda v: isinstance(v, bool), "True or False"),
    "title_weight": _WEIGHT, "title_match_weight": _WEIGHT, "cue_weight": _WEIGHT, "reply_weight": _WEIGHT,
    "question_discount": _number(0.0, 1.0), "sequence_window": _number(0.0),
    "vector_weight_semantic": _WEIGHT, "embed_context_chars": _number(0, integer=True),
    "vector_weight_hash": _WEIGHT, "expand_weight": _WEIGHT, "expand_threshold": _number(-1.0, 1.0),
    "expand_terms": _number(0, integer=True), "candidates": _number(1, integer=True),
    "importance_weight": _WEIGHT, "recency_weight": _WEIGHT, "recency_half_life": _number(1e-9),
    "vector_index": _choice("auto", "hnsw", "exact"), "exact_threshold": _number(0, integer=True),
    # (usearch sizes a graph's nodes by connectivity: 2**40 is "Out of memory!"; an expansion past 2**64 an overflow)
    "hnsw_connectivity": _number(2, 1024, integer=True), "hnsw_expansion_add": _number(1, 1_000_000, integer=True),
    "hnsw_expansion_search": _number(1, 1_000_000, integer=True), "hnsw_tail": _number(0, integer=True),
    "locale": _choice(*LOCALES),
    "token_counter": (callable, "a callable (text -> token count)"),
}


def env(name: str, default: str | None = None) -> str | None:
    """IPY_MEMORY_<name>, with the older MEMORY_TREE_<name> accepted as an alias."""
    for prefix in ("IPY_MEMORY_", "MEMORY_TREE_"):
        value = os.environ.get(prefix + name)
        if value:
            return value
    return default


def default_data_dir() -> Path:
    """IPY_MEMORY_DATA_DIR, else the platform's per-user data dir."""
    explicit = env("DATA_DIR")
    if explicit:
        return Path(explicit).expanduser()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "ipy_memory"


_SCP_REMOTE = re.compile(r"^[\w.-]+@([\w.-]+):(.+)$")


def normalize_remote(url: str) -> str:
    """git@github.com:org/repo.git and https://github.com/org/repo -> github.com/org/repo."""
    url = url.strip()
    m = _SCP_REMOTE.match(url)
    if m:
        url = f"{m.group(1)}/{m.group(2)}"
    url = re.sub(r"^[a-z+]+://", "", url)
    url = re.sub(r"^[^@/]+@", "", url)       # credentials never become part of a name
    url = re.sub(r"\.git$", "", url.rstrip("/"))
    return url.lower()


def default_project(cwd: str | os.PathLike | None = None) -> str:
    """The git remote of the working directory, else its absolute path as a file:// name."""
    import subprocess     # here: 4 ms of `import ipy_memory` that most processes never need
    cwd = Path(cwd or os.getcwd()).resolve()
    try:
        out = subprocess.run(["git", "-C", str(cwd), "config", "--get", "remote.origin.url"],
                             capture_output=True, text=True, timeout=2)
        if out.returncode == 0 and out.stdout.strip():
            return normalize_remote(out.stdout)
    except (OSError, subprocess.SubprocessError):
        pass
    return "file://" + cwd.as_posix()


_PROCESS_SESSION = os.urandom(8).hex()


def default_session() -> str:
    """One session id per process (one per kernel)."""
    return _PROCESS_SESSION
