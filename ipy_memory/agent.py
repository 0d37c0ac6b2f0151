"""Automatic recall for notebook agents: one framed memory message per human turn, never a stall.

    auto = AutoRecall(mem)
    messages = auto.inject(messages, session_id="chat-1", turn_id=3)   # before each model call
    ...                                                                  # the model answers
    auto.capture(messages, session_id="chat-1")                         # after the turn

Works on plain OpenAI-style ({"role", "content": str | [parts]}) and Anthropic-style (content as a
list of blocks) message lists; it needs no LLM client library. The recall runs in a worker thread
and is abandoned after `timeout_ms`: a slow or failing store costs the turn its memory, never the
turn itself, and the reason shows in `stats()["compat"]`.
"""

from __future__ import annotations

import copy
import os
import re
import threading
from collections import Counter, OrderedDict
from dataclasses import asdict, dataclass, field

from . import _validate as v
from ._acks import DEFAULT_ACKS, DEFAULT_SKIP_PATTERNS, ack_pattern, normalize_query
from ._captured import Captured
from ._log import log
from ._messages import SOURCE, check_messages, is_human, text_of, text_part_type, is_recall_message
from ._text import question_marks
from .block import item as _item
from .block import render as _render
from .errors import InvalidArgument, IpyMemoryError, NotFound

_KEEP = 10_000      # bounded bookkeeping: remembered turns, queries and injections
_CAPTURE_KEYS = {"scope", "project", "importance", "ttl", "metadata"}     # remember_exchange's own


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: max(limit - 1, 0)]
    space = max(cut.rfind(" "), cut.rfind("\n"))
    if space >= limit * 0.8:       # end on a word boundary when that costs little
        cut = cut[:space]
    return cut.rstrip() + "…"


@dataclass
class Injection:
    """One recall block inserted into a turn; `used` is set by feedback()."""
    id: str
    session_id: str
    turn_id: str
    query: str
    hit_ids: list[str]
    chars: int
    at: float
    used: bool | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class _State:
    counts: Counter = field(default_factory=Counter)
    skips: Counter = field(default_factory=Counter)
    turns: OrderedDict = field(default_factory=OrderedDict)         # (session, turn, query) -> at
    queries: OrderedDict = field(default_factory=OrderedDict)       # (session, query) -> at
    hits: OrderedDict = field(default_factory=OrderedDict)          # (session, hit id) -> at
    injections: OrderedDict = field(default_factory=OrderedDict)    # id -> Injection


def _remember(d: OrderedDict, key, value) -> None:
    d[key] = value
    d.move_to_end(key)
    while len(d) > _KEEP:
        d.popitem(last=False)


class AutoRecall:
    """Insert recalled memories into an agent's messages once per human turn, within hard limits."""

    def __init__(self, engine, *, max_nodes: int = 5, max_chars: int = 4000, max_node_chars: int = 1200,
                 timeout_ms: int = 1500, cooldown_s: float = 60, skip_patterns=None, min_score: float | None = None,
                 min_query_chars: int = 3, scope: str = "project+global", tag: str | None = "source",
                 enabled: bool = True, capture: bool = True, clock=None):
        if not all(hasattr(engine, a) for a in ("recall", "remember_exchange")):
            raise InvalidArgument("AutoRecall(engine): pass a MemoryEngine")
        self.engine = engine
        self.max_nodes = v.integer(max_nodes, "max_nodes", 1, 50)
        self.max_chars = v.integer(max_chars, "max_chars (>= 500: the block's frame alone takes ~250)", 500, 1_000_000)
        self.max_node_chars = v.integer(max_node_chars, "max_node_chars", 50, 1_000_000)
        self.timeout_ms = v.integer(timeout_ms, "timeout_ms", 1, 600_000)
        self.cooldown_s = v.number(cooldown_s, "cooldown_s", 0.0, 86_400.0 * 365)
        self.min_score = v.number(min_score, "min_score", 0.0, 10.0) if min_score is not None else None
        self.min_query_chars = v.integer(min_query_chars, "min_query_chars", 0, 1000)
        v.scopes(scope)
        self.scope = scope
        if tag not in ("source", "name", None):
            raise InvalidArgument("tag must be 'source' (a 'source' dict on the message), 'name' (name='ipy_memory', "
                                  "accepted by OpenAI chat APIs) or None (no extra key, e.g. for the Anthropic API)")
        self.tag = tag
        self.enabled = v.flag(enabled, "enabled")
        self.capture_enabled = v.flag(capture, "capture")
        self.skip_patterns = self._compile(DEFAULT_SKIP_PATTERNS if skip_patterns is None else skip_patterns)
        self.clock = v.clock(clock) if clock is not None else getattr(engine, "clock", None)
        if not callable(self.clock):
            raise InvalidArgument("clock must be a callable returning seconds, e.g. time.time")
        self._lock = threading.RLock()
        self._s = _State()
        self._inflight: threading.Thread | None = None
        self._degraded: str | None = None
        self._capture_error: str | None = None
        self._captured = Captured()
        self._capture_lock = threading.Lock()      # what is new, its write and its mark: one step
        self.last_injection: Injection | None = None
        self.last_skip: str | None = None

    @staticmethod
    def _compile(patterns):
        if isinstance(patterns, (str, re.Pattern)):
            patterns = [patterns]
        try:
            return tuple(p if isinstance(p, re.Pattern) else re.compile(p) for p in patterns)
        except (TypeError, re.error) as exc:
            raise InvalidArgument(f"skip_patterns must be regex strs matched against the whole normalised "
                                  f"query, e.g. DEFAULT_SKIP_PATTERNS + (r'lol',): {exc}") from None

    # ------------------------------------------------------------------------------ recall
    def inject(self, messages: list, *, session_id: str, turn_id) -> list:
        """Return a new list with one recall message inserted before the human query (or unchanged)."""
        check_messages(messages)
        session_id = v.text(session_id, "session_id", max_chars=256)
        if isinstance(turn_id, bool) or not isinstance(turn_id, (str, int)):
            raise InvalidArgument(f"turn_id must be a str or int identifying the human turn, got {turn_id!r}")
        out = list(messages)
        if not self.enabled:
            return self._skip(out, "disabled")
        if getattr(self.engine, "_closed", False):
            return self._skip(out, "engine closed")
        idx = next((i for i in range(len(out) - 1, -1, -1) if is_human(out[i])), None)
        if idx is None:
            return self._skip(out, "no user message")
        if idx != len(out) - 1:        # tool results or an answer follow: a later step of the turn
            return self._skip(out, "not first step")
        query = text_of(out[idx].get("content")).strip()
        norm = normalize_query(query)
        now = self.clock()
        with self._lock:
            key = (session_id, str(turn_id), norm)
            if key in self._s.turns:
                return self._skip(out, "already injected")
            _remember(self._s.turns, key, now)
            if any(p.fullmatch(norm) for p in self.skip_patterns):
                return self._skip(out, "acknowledgement")
            if len(norm) < self.min_query_chars:
                return self._skip(out, "too short")
            last = self._s.queries.get((session_id, norm))
            if last is not None and now - last < self.cooldown_s:
                return self._skip(out, "cooldown")
        if len(query) > 2000:            # pasted code or logs: the start and end carry the question
            query = query[:1000] + "\n" + query[-1000:]
        hits = self._recall(query)
        if hits is None:                 # the same question may try again next turn
            return self._skip(out, "recall failed")
        with self._lock:
            _remember(self._s.queries, (session_id, norm), now)
            fresh = [h for h in hits if now - self._s.hits.get((session_id, h.id), -1e300) >= self.cooldown_s]
            if not fresh:
                return self._skip(out, "no hits" if not hits else "cooldown")
            block, used = self._block(fresh)
            if not used:
                return self._skip(out, "no room")
            inj = Injection(id="inj-" + os.urandom(6).hex(), session_id=session_id, turn_id=str(turn_id),
                            query=query[:200], hit_ids=[h.id for h in used], chars=len(block), at=now)
            for h in used:
                _remember(self._s.hits, (session_id, h.id), now)
            _remember(self._s.injections, inj.id, inj)
            self._s.counts["injections"] += 1
            self.last_injection = inj
        human = out[idx].get("content")
        msg = {"role": "user", "content": block if isinstance(human, str)
               else [{"type": text_part_type(human), "text": block}]}
        if self.tag == "source":
            msg["source"] = {**SOURCE, "id": inj.id}
        elif self.tag == "name":
            msg["name"] = "ipy_memory"
        out.insert(idx, msg)
        return out

    def _skip(self, out: list, reason: str) -> list:
        with self._lock:
            self._s.skips[reason] += 1
            self.last_skip = reason
        return out

    def _recall(self, query: str):
        """Hits, or None when the engine failed or missed the deadline (the reason is recorded)."""
        if self._inflight is not None and self._inflight.is_alive():
            self._fail("busy", "the previous recall is still running")
            return None
        box: dict = {}

        def work():
            try:
                box["hits"] = self.engine.recall(query, scope=self.scope, limit=self.max_nodes,
                                                 min_score=self.min_score).hits
            except BaseException as exc:  # noqa: BLE001 - reported, never raised into the turn
                box["error"] = exc

        t = threading.Thread(target=work, name="ipy_memory-autorecall", daemon=True)
        t.start()
        t.join(self.timeout_ms / 1000)
        if t.is_alive():
            self._inflight = t
            self._fail("timeouts", f"recall slower than timeout_ms={self.timeout_ms}")
            return None
        if "error" in box:
            exc = box["error"]
            self._fail("errors", f"{type(exc).__name__}: {exc}")
            if not isinstance(exc, IpyMemoryError):
                log.warning("ipy_memory: auto-recall failed", exc_info=exc)
            return None
        with self._lock:
            self._degraded = None
        return box["hits"]

    def _fail(self, counter: str, reason: str) -> None:
        with self._lock:
            self._s.counts[counter] += 1
            self._degraded = reason
        log.info("ipy_memory: auto-recall skipped this turn: %s", reason)

    def _block(self, hits) -> tuple[str, list]:
        """The <memory-recall> block within max_chars, built item by item (never sliced)."""
        locale = getattr(getattr(self.engine, "settings", None), "locale", "en")
        items, used = [], []
        for h in hits:
            text = _truncate(h.text, self.max_node_chars)
            while True:
                candidate = _item(len(items) + 1, h.created_at, h.label, text)
                over = len(_render(items + [candidate], locale)) - self.max_chars
                if over <= 0:
                    items.append(candidate)
                    used.append(h)
                    break
                if len(text) - over < 80:      # too little room left for a useful excerpt
                    return _render(items, locale), used
                text = _truncate(text, len(text) - over - 1)
        return _render(items, locale), used

    # ------------------------------------------------------------------------------ feedback / stats
    def feedback(self, injection_id: str, used: bool = True) -> None:
        """Record whether the model used an injection (for the precision in stats())."""
        used = v.flag(used, "used")
        injection_id = v.text(injection_id, "injection_id", max_chars=200)
        with self._lock:
            inj = self._s.injections.get(injection_id)
            if inj is None:
                raise NotFound(f"no injection {injection_id!r}: pass an id from auto.last_injection.id "
                               "(only the latest 10,000 are kept)")
            inj.used = used

    def stats(self) -> dict:
        """compat (auto-recall / capture: on, off or degraded with reason), counters and precision."""
        with self._lock:
            judged = [i.used for i in self._s.injections.values() if i.used is not None]
            c = self._s.counts
            return {
                "compat": self.compat(),
                "injections": c["injections"], "skips": sum(self._s.skips.values()),
                "skip_reasons": dict(self._s.skips), "timeouts": c["timeouts"], "errors": c["errors"],
                "busy": c["busy"], "captures": c["captures"], "capture_errors": c["capture_errors"],
                "feedback": len(judged), "used": sum(judged),
                "precision": round(sum(judged) / len(judged), 4) if judged else None,
                "last_injection": self.last_injection.to_dict() if self.last_injection else None,
                "last_skip": self.last_skip,
            }

    def compat(self) -> dict:
        if not self.enabled:
            recall, reason = "off", "disabled (enabled=False)"
        elif getattr(self.engine, "_closed", False):
            recall, reason = "off", "the engine is closed"
        elif self._degraded:
            recall, reason = "degraded", self._degraded
        else:
            recall, reason = "on", None
        if not self.capture_enabled:
            capture, creason = "off", "disabled (capture=False)"
        elif getattr(self.engine, "read_only", False):
            capture, creason = "off", "the engine is read-only"
        elif self._capture_error:
            capture, creason = "degraded", self._capture_error
        else:
            capture, creason = "on", None
        return {"auto_recall": recall, "reason": reason, "capture": capture, "capture_reason": creason}

    # ------------------------------------------------------------------------------ capture
    def capture(self, messages: list, *, session_id: str, background: bool = False, **kw):
        """Store the turn's new messages with engine.remember_exchange; secrets are redacted.

        `messages` is the conversation so far, whole or trimmed to its latest messages: what this AutoRecall
        stored for `session_id` before is not stored again, nor are recall messages and system / developer
        prompts. `kw`: remember_exchange's scope, project, importance, ttl, metadata. A failed store
        (logged; see stats()["compat"]) marks nothing stored: the next capture tries those messages again.
        Returns the RememberResult (True/False when queued: background=True, or while a timed-out
        recall is still running), or None when capture is off, there was nothing worth storing, or the
        store failed."""
        check_messages(messages)
        session_id = v.text(session_id, "session_id", max_chars=256)
        background = v.flag(background, "background")
        unknown = set(kw) - _CAPTURE_KEYS
        if unknown:
            raise InvalidArgument(f"capture() got unknown argument(s) {sorted(unknown)}; it takes {sorted(_CAPTURE_KEYS)}")
        if not self.capture_enabled or getattr(self.engine, "read_only", False):
            return None
        # never store recalled memory again; role-less items (tool calls) are not conversation text,
        # nor are system / developer prompts (instructions, sent again every turn)
        own = [m for m in messages if "role" in m and m["role"] not in ("system", "developer")
               and not is_recall_message(m)]
        if background or (self._inflight is not None and self._inflight.is_alive()):
            if not self._captured.new(session_id, own)[0]:    # the turns stored before are not queued again
                return None
            # an abandoned recall may still be reading the engine's indexes: the background
            # writer has its own, so writing through it cannot race that recall. What is new is
            # worked out there, when the write runs: turns queued before it are stored by then.
            own, kw = copy.deepcopy(own), copy.deepcopy(kw)
            if v.project_scoped(kw.get("scope")):
                kw.setdefault("project", self.engine.project)      # as of now
            return self.engine._fire_call(lambda engine: self._store(engine, session_id, own, kw, background=True),
                                          "capture")
        return self._store(self.engine, session_id, own, kw, background=False)

    def _store(self, engine, session_id: str, messages: list, kw: dict, *, background: bool):
        """Store what of `messages` is new, and only then mark it stored: a failed write is tried again
        with the next turn's capture."""
        with self._capture_lock:
            own, prints = self._captured.new(session_id, messages)
            if not own:
                return None
            # a bare "yes" opening the turn answers the question that ended the turn stored before
            before = messages[len(messages) - len(own) - 1] if len(own) < len(messages) else None
            asked = before is not None and bool(question_marks(text_of(before.get("content"))))
            try:
                result = engine.remember_exchange(session_id, own, after_question=asked, **kw)
            except InvalidArgument as exc:
                if "no non-trivial" in str(exc):     # an exchange of acknowledgements only
                    self._captured.mark(session_id, prints)
                    return None
                if not background:
                    raise                            # the caller's own mistake, told at once
                failure = exc
            except Exception as exc:  # noqa: BLE001 - a failed capture must not fail the turn
                failure = exc
            else:
                self._captured.mark(session_id, prints)
                with self._lock:
                    self._s.counts["captures"] += 1
                    self._capture_error = None
                return result
        with self._lock:
            self._s.counts["capture_errors"] += 1
            self._capture_error = f"{type(failure).__name__}: {failure}"
        if background:
            raise failure          # the writer logs it and counts it (background_stats()'s errors, last_error)
        log.warning("ipy_memory: capture failed: %s", failure)
        return None


__all__ = ["AutoRecall", "Injection", "DEFAULT_ACKS", "DEFAULT_SKIP_PATTERNS", "SOURCE", "ack_pattern",
           "is_recall_message", "normalize_query"]
