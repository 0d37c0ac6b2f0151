"""Result objects returned by the engine: plain data with notebook-friendly representations."""

from __future__ import annotations

import json
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from . import _display


def _iso(ts: float | None) -> str | None:
    return None if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


class _Table(Sequence):
    """A sequence of dataclass rows with to_dicts() / to_pandas() and rich reprs."""

    _rows: list
    _kind = "rows"
    _columns: tuple = ()     # a row's keys: an empty table still has them (df[["title", ...]] works)

    def __getitem__(self, i):
        return self._rows[i]

    def __len__(self) -> int:
        return len(self._rows)

    def to_dicts(self) -> list[dict]:
        return [r.to_dict() for r in self._rows]

    def to_pandas(self):
        import pandas as pd  # lazy: pandas costs ~0.3 s to import
        return pd.DataFrame(self.to_dicts(), columns=list(self._columns) or None)

    def _repr_html_(self) -> str:
        return _display.table_html(self)

    def _repr_markdown_(self) -> str:
        return _display.table_markdown(self)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(_display.table_text(self))

    def __repr__(self) -> str:
        return _display.table_text(self)


@dataclass
class Memory:
    """One stored memory (a document) as listed by `list_memories`."""
    id: str
    title: str
    content: str
    scope: str
    project: str | None
    session: str | None
    space: str
    kind: str
    importance: float
    node_count: int
    created_at: float
    updated_at: float
    expires_at: float | None
    tier: str
    metadata: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class RememberResult:
    """What `remember` did: stored (`id`), found the same text (`deduped`) or a near copy (`duplicate`)."""
    id: str
    document_id: str
    node_count: int
    space: str
    scope: str
    deduped: bool = False
    duplicate: bool = False
    existing: Memory | None = None
    expires_at: float | None = None
    similarity: float | None = None

    @property
    def stored(self) -> bool:
        return not (self.deduped or self.duplicate)

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        if self.deduped:
            return f"already stored as {self.id}"
        if self.duplicate:
            return f"duplicate of {self.id} (similarity {self.similarity:.2f}); use force=True to store anyway"
        return f"stored {self.id} ({self.node_count} section{'s' if self.node_count != 1 else ''}, {self.space})"

    def __str__(self) -> str:
        return self.summary()


@dataclass
class Hit:
    """One recalled section: `id` is the node ('m-…#n'), `document_id` the memory it belongs to."""
    id: str
    document_id: str
    path: str
    title: str
    text: str
    score: float
    scope: str
    space: str
    created_at: float
    metadata: dict | None = field(default=None)

    @property
    def label(self) -> str:
        return self.path or self.title or self.document_id

    def to_dict(self) -> dict:
        d = asdict(self)
        d["created"] = _iso(self.created_at)
        return d


class Origin:
    """The engine that made a RecallResult or Stats, and the arguments it was called with: what a live
    view of the result searches, forgets and refreshes with. The engine is held weakly (a result kept in
    Out[] must not keep a store open); `data_dir` says which store it was."""

    def __init__(self, engine, **arguments):
        self._engine = weakref.ref(engine)
        self.data_dir = getattr(engine, "data_dir", None)
        self.arguments = arguments

    @property
    def engine(self):
        """The engine, or None once it has been garbage-collected (or in a pickled copy)."""
        return self._engine() if self._engine is not None else None

    def __getstate__(self) -> dict:       # a weakref does not pickle: a copy keeps the rest
        return {**self.__dict__, "_engine": None}


class RecallResult(_Table):
    """Hits best first, plus `.block`: the `<memory-recall>` text ready to paste into a prompt."""

    _kind = "hits"
    _columns = (*(f.name for f in fields(Hit)), "created")
    origin: Origin | None = None     # set by MemoryEngine.recall

    def __init__(self, query: str, hits: list[Hit], block: str, *, tokens: int = 0, candidates: int = 0):
        self.query, self._rows, self.block = query, list(hits), block
        self.tokens, self.candidates = tokens, candidates

    @property
    def hits(self) -> list[Hit]:
        return list(self._rows)

    def __str__(self) -> str:
        return self.block


class MemoryList(_Table):
    """A page of memories from `list_memories`."""

    _kind = "memories"
    _columns = tuple(f.name for f in fields(Memory))

    def __init__(self, memories: list[Memory], *, total: int, offset: int):
        self._rows, self.total, self.offset = list(memories), total, offset


class Stats(Mapping):
    """`stats()`: a read-only mapping (JSON-serialisable) with a tier table in its reprs."""

    def __init__(self, data: dict[str, Any], *, origin: Origin | None = None):
        self._data, self.origin = data, origin

    def __getitem__(self, key):
        return self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def to_dict(self) -> dict:
        return json.loads(json.dumps(self._data, default=str))

    def to_dicts(self) -> list[dict]:
        return [{"tier": k, **v} for k, v in self._data.get("tiers", {}).items()]

    def to_pandas(self):
        import pandas as pd
        return pd.DataFrame(self.to_dicts())

    def _repr_html_(self) -> str:
        return _display.stats_html(self)

    def _repr_markdown_(self) -> str:
        return _display.stats_markdown(self)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(_display.stats_text(self))

    def __repr__(self) -> str:
        return _display.stats_text(self)
