"""Argument checks shared by every public entry point; each failure says what to pass instead."""

from __future__ import annotations

import math
import numbers
import os
import re
from functools import cache
from typing import Any

from .config import SCOPES
from .errors import InvalidArgument, IpyMemoryError

# Ids in JSON Schema (ECMA-262) syntax, as the tool schemas publish them: anchored, since their
# patterns search; [0-9], not \d (any Unicode digit). ID_RE is matched with fullmatch, since $ alone
# takes a trailing "\n".
MEMORY_ID = r"^m-[0-9a-f]{16}$"
MEMORY_OR_SECTION_ID = r"^m-[0-9a-f]{16}(?:#[0-9]{1,7})?$"
ID_RE = re.compile(r"^m-[0-9a-f]{16}(?:#([0-9]{1,7}))?$")
_NAME_BAD = re.compile(r"[\x00-\x1f\x7f]")
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")
MAX_TTL = 100 * 365 * 86_400.0


def text(value: Any, what: str, *, max_chars: int, allow_empty: bool = False) -> str:
    if isinstance(value, (bytes, bytearray)):
        raise InvalidArgument(f"{what} must be str, not bytes: decode it first, e.g. data.decode('utf-8')")
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a str, not {type(value).__name__}")
    if not allow_empty and not (value.strip() if value.isascii() else value.replace("\ufeff", "").strip()):   # (a BOM alone)
        raise InvalidArgument(f"{what} is empty: pass some text")
    if "\x00" in value:
        raise InvalidArgument(f"{what} contains a NUL byte (\\x00): remove it")
    if not value.isascii() and _LONE_SURROGATE.search(value):      # (isascii: a flag, no scan)
        raise InvalidArgument(f"{what} contains a lone surrogate (invalid Unicode): "
                              "decode bytes with errors='replace' first")
    if len(value) > max_chars:
        raise InvalidArgument(f"{what} has {len(value):,} characters; the limit is {max_chars:,} "
                              "(split it, or raise Settings.max_content_chars)")
    return value


def optional_text(value: Any, what: str, *, max_chars: int = 1000) -> str | None:
    if value is None:
        return None
    return text(value, what, max_chars=max_chars)


def is_integer(value: Any) -> bool:
    """An int of any kind (numpy's too), never a bool (numpy's bool is no number at all)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """A real number of any kind (numpy's, Fraction), never a bool; finite or not."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def integer(value: Any, what: str, lo: int, hi: int) -> int:
    """An int in [lo, hi] as a Python int: numpy integers are accepted, bools are not."""
    if not is_integer(value):
        raise InvalidArgument(f"{what} must be an int between {lo} and {hi}, not {_kind(value)}")
    value = int(value)
    if not lo <= value <= hi:
        raise InvalidArgument(f"{what} must be between {lo} and {hi}, got {value}")
    return value


def number(value: Any, what: str, lo: float, hi: float) -> float:
    """A finite real in [lo, hi] as a Python float: numpy numbers are accepted, bools are not."""
    if (type(value) is float or type(value) is int) and lo <= value <= hi:
        return float(value)          # (the common case without the ABC check: NaN and inf fail the test)
    try:
        ok = is_real(value) and math.isfinite(value)
    except (TypeError, ValueError, OverflowError):        # (a Real subclass float() rejects)
        ok = False
    if not ok:
        raise InvalidArgument(f"{what} must be a finite number between {lo} and {hi}, got {shown(value)}")
    if not lo <= value <= hi:
        raise InvalidArgument(f"{what} must be between {lo} and {hi}, got {value}")
    return float(value)


def _kind(value: Any) -> str:
    return f"{type(value).__name__} {shown(value)}" if isinstance(value, (bool, str)) else type(value).__name__


def shown(value: Any) -> str:
    """A bounded repr for messages: a 1 MB string or a big array is not repeated back."""
    import reprlib
    return reprlib.repr(value)


def flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{what} must be True or False, not {shown(value)}")
    return value


def scope(value: Any) -> str:
    """One scope; surrounding spaces are dropped, as recall's scopes() drops them around each part."""
    if not isinstance(value, str) or value.strip() not in SCOPES:
        raise InvalidArgument(f"scope must be one of {', '.join(SCOPES)} (lower case), got {shown(value)}")
    return value.strip()


def scopes(value: Any) -> tuple[str, ...]:
    """'project+global' -> ('project', 'global'); spaces around each part are dropped."""
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"scope must be a str such as 'project+global', got {shown(value)}")
    parts = tuple(dict.fromkeys(p.strip() for p in value.split("+")))
    for p in parts:
        if p not in SCOPES:
            raise InvalidArgument(f"unknown scope {p[:40]!r} in {value[:80]!r}: use session, project, global "
                                  "(lower case) or a '+'-joined combination")
    return parts


def scoped_names(scope_parts, project: str | None, session: str | None = None) -> None:
    """project= (session=) names the project (session) of a 'project' ('session') scope: given with a
    scope without that part, it would be silently ignored, so it is refused."""
    for value, part in ((project, "project"), (session, "session")):
        if value is not None and part not in scope_parts:
            raise InvalidArgument(f"{part}={value[:80]!r} is given, but scope {'+'.join(scope_parts)!r} has no "
                                  f"{part!r} part, so it would be ignored: drop {part}=, or put {part!r} in the scope")


def project_scoped(value: Any) -> bool:
    """Whether a memory written with scope `value` (None: the default) is a project's: only those take
    a default project (fire(), a queued capture); InvalidArgument for no scope."""
    return value is None or scope(value) == "project"


def ttl(value: Any) -> float | None:
    if value is None:
        return None
    if not is_real(value):      # (False == 0 would pass as "no ttl"; an array's == is no bool)
        raise InvalidArgument(f"ttl must be a number of seconds (0 or None = the scope's default), not {_kind(value)}")
    if value == 0:
        return None
    return number(value, "ttl (seconds; 0 or None = the scope's default)", 0, MAX_TTL)


def name(value: Any, what: str) -> str:
    """A project or session name: never a path that could escape the data dir. Spaces around it are
    dropped, as around a scope (' churn ' is the project 'churn', not one of its own)."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"{what} must be a non-empty str, got {shown(value)}")
    value = value.strip()
    if len(value) > 256:
        raise InvalidArgument(f"{what} is longer than 256 characters")
    if _NAME_BAD.search(value) or not value.isascii() and _LONE_SURROGATE.search(value):
        raise InvalidArgument(f"{what} contains control characters or NUL: use plain text")
    if value.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:[\\/]", value):
        raise InvalidArgument(f"{what} {value!r} looks like an absolute path: use a name such as 'myproject'")
    if any(seg in ("..", ".") for seg in re.split(r"[\\/]", value)):
        raise InvalidArgument(f"{what} {value!r} contains a '..' or '.' path segment: use a plain name")
    return value


def path(value: Any, what: str) -> str:
    """A file system path (str or os.PathLike) as str; InvalidArgument for other types, an empty or
    blank path (it would mean the working directory), NUL and what the file system cannot encode."""
    if not isinstance(value, (str, os.PathLike)):
        raise InvalidArgument(f"{what} must be a path (str or pathlib.Path), not {type(value).__name__}")
    try:
        raw = os.fsdecode(os.fspath(value))
    except TypeError as exc:              # (a PathLike whose __fspath__ returns no str or bytes)
        raise InvalidArgument(f"{what} must be a path (str or pathlib.Path): {exc}") from None
    if not raw.strip():
        raise InvalidArgument(f"{what} is empty ({raw!r}): pass a path, or leave it out (None) for the default")
    if "\x00" in raw:
        raise InvalidArgument(f"{what} {raw!r} contains a NUL character: no file can have that name")
    try:
        os.fsencode(raw)
    except UnicodeError:
        raise InvalidArgument(f"{what} {raw[:80]!r} contains characters the file system cannot encode "
                              "(a lone surrogate?)") from None
    return raw


def call_back(fn, what: str, *args):
    """`fn(*args)`, a caller's own callback (a clock, Settings.token_counter): what it raises comes
    back as InvalidArgument naming `what`, the original chained (`raise ... from`), so that every
    public call raises ipy_memory's errors only."""
    try:
        return fn(*args)
    except IpyMemoryError:
        raise
    except Exception as exc:
        raise InvalidArgument(f"{what} raised {type(exc).__name__}: {str(exc)[:200]}") from exc


def called_back_items(items, what: str):
    """The items of a caller's iterable, read through call_back (what it raises: InvalidArgument)."""
    items, end = call_back(iter, what, items), object()
    while (item := call_back(next, f"{what}, reading an item", items, end)) is not end:
        yield item


class Clock:
    """A caller's clock (MemoryEngine(clock=...)), its answers checked: seconds as a finite float.
    (A NaN would be stored as NULL and fail far from its cause; a str, in some arithmetic deep inside.)"""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __call__(self) -> float:
        now = call_back(self.fn, "the clock (MemoryEngine(clock=...))")
        if not is_real(now) or not math.isfinite(now):
            raise InvalidArgument(f"the clock (MemoryEngine(clock=...)) must return seconds since the epoch as a "
                                  f"finite number, like time.time(); it returned {shown(now)}")
        return float(now)


def clock(value: Any):
    """MemoryEngine's (or AutoRecall's) clock: time.time for None, else the callable, checked (Clock)."""
    import time
    if value is None or value is time.time or isinstance(value, Clock):
        return value or time.time
    if not callable(value):
        raise InvalidArgument(f"clock must be a callable returning seconds since the epoch, e.g. time.time, "
                              f"not {type(value).__name__}")
    return Clock(value)


def memory_id(value: Any) -> tuple[str, int | None]:
    """'m-0123456789abcdef' (a document) or 'm-0123456789abcdef#3' (one of its sections)."""
    if not isinstance(value, str):
        raise InvalidArgument(f"id must be a str like 'm-0123456789abcdef', not {type(value).__name__}")
    m = ID_RE.fullmatch(value)
    if not m:
        raise InvalidArgument(f"{value[:80]!r} is not a memory id: ids look like 'm-0123456789abcdef' "
                              "(a memory) or 'm-0123456789abcdef#2' (one of its sections)")
    return value.split("#")[0], (int(m.group(1)) if m.group(1) else None)


def metadata(value: Any) -> dict | None:
    return encoded_metadata(value)[0]


@cache
def json_encoder():
    """One encoder for all stored JSON (metadata, the writer's batches): json.dumps with options
    builds a new one per call (2x the cost)."""
    import json
    return json.JSONEncoder(ensure_ascii=False, allow_nan=False)


@cache
def _metadata_encoder():
    """json_encoder()'s compiled one-shot encoder, made once (JSONEncoder.encode makes one a call:
    half its cost for a small dict), or None without the json accelerator. No circular-reference
    markers: _check_json_tree refuses a cycle first (as nesting deeper than METADATA_DEPTH)."""
    from json import encoder
    e = json_encoder()
    try:     # (a private constructor: where its signature or output differs, the public path is kept)
        fast = encoder.c_make_encoder(None, e.default, encoder.c_encode_basestring, e.indent, e.key_separator,
                                      e.item_separator, e.sort_keys, e.skipkeys, e.allow_nan)
        probe = {"a": [1, 2.5, None, True, "é\n"], "b": {"c": ""}}
        return fast if "".join(fast(probe, 0)) == e.encode(probe) else None
    except Exception:  # noqa: BLE001  (AttributeError, TypeError: no such encoder here)
        return None


def encoded_metadata(value: Any) -> tuple[dict | None, str | None]:
    """The metadata and its JSON (as stored), or InvalidArgument."""
    if value is None:
        return None, None
    if not isinstance(value, dict):
        raise InvalidArgument(f"metadata must be a dict, not {type(value).__name__}")
    _check_json_tree(value)
    fast = _metadata_encoder()
    try:
        encoded = "".join(fast(value, 0)) if fast is not None else json_encoder().encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"metadata must be JSON-serialisable: {exc}") from None
    if len(encoded) > 100_000:
        raise InvalidArgument("metadata is larger than 100 kB once encoded as JSON")
    return value, encoded


METADATA_DEPTH = 32


def _check_json_tree(value: dict) -> None:
    """What JSON would store silently wrong or fail on deep inside: non-str keys (json turns 1 into
    "1", so {1: a, "1": b} collides), NUL or lone surrogates in any string, nesting deeper than
    METADATA_DEPTH (json.dumps would die with a RecursionError)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > METADATA_DEPTH:
            raise InvalidArgument(f"metadata is nested deeper than {METADATA_DEPTH} levels")
        if isinstance(node, dict):
            for k, x in node.items():
                if not isinstance(k, str):
                    raise InvalidArgument(f"metadata keys must be str; {k!r} is {type(k).__name__}")
                _check_json_str(k)
                if isinstance(x, str):
                    _check_json_str(x)
                elif isinstance(x, (dict, list, tuple)):
                    stack.append((x, depth + 1))
        else:
            for x in node:
                if isinstance(x, str):
                    _check_json_str(x)
                elif isinstance(x, (dict, list, tuple)):
                    stack.append((x, depth + 1))


def _check_json_str(s: str) -> None:
    if "\x00" in s or not s.isascii() and _LONE_SURROGATE.search(s):
        raise InvalidArgument(f"metadata contains NUL or lone surrogates (in {s[:40]!r})")
