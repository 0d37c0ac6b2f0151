"""The write path: one transaction per batch, exact and near-duplicate checks, few executemany calls."""

from __future__ import annotations

import json
import time
from itertools import accumulate

import numpy as np

from . import _dreamed, _kernels
from . import _validate as v
from ._validate import json_encoder
from ._ingest import Prepared
from .errors import NotFound
from .lexical import NodeRow
from .models import RememberResult
from ._dedup import semantic_duplicate
from .store import DOC_COLS, encode_rows, memory_row
from ._threads import Worker
from ._written import Written


# A batch of at least this many sections inserts them from a second thread while the indexes take
# them: one INSERT ... SELECT FROM json_each(?) per table runs in SQLite without the GIL, where
# executemany takes it back for every row (and so gets next to nothing done beside busy Python); its
# JSON is bound as UTF-8 bytes (rows_json(utf8=True)) and read as the text it is: CAST(? AS TEXT).
OVERLAP_MIN_NODES = 256
_INSERTER = Worker("ipy_memory-insert")
_NODE_COLS = ("key", "document_id", "ord", "parent_ord", "depth", "path", "title", "body", "metadata", "content_hash")
# (each row's JSON read once into a temporary table: json_each's `value` copies it for every ->> of it).
# Named parameters, bound from dicts: Python 3.12.0-3.12.3 warn that numbered ones (?1) bound from a
# sequence will fail in 3.14 (they will not: gh-117995)
_ROWS = "WITH r(v) AS MATERIALIZED (SELECT value FROM json_each(CAST(:rows AS TEXT))) "
_NODES_SQL = (f"{_ROWS}INSERT INTO nodes ({', '.join(_NODE_COLS)}) SELECT "
              f"{', '.join(f'v ->> {i}' for i in range(len(_NODE_COLS)))} FROM r")
_DOCS_SQL = (_ROWS + "INSERT INTO documents (id, space, scope, project, session, kind, title, content, content_hash, "
             "importance, metadata, created_at, updated_at, accessed_at, expires_at) SELECT "
             + ", ".join(f"v ->> {i}" for i in range(11)) + ", :now, :now, :now, v ->> 11 FROM r")
_VECTORS_SQL = ("INSERT INTO vectors SELECT value, substr(:vecs, key * :width + 1, :width) "
                "FROM json_each(CAST(:rows AS TEXT))")
_CHANGES_SQL = "INSERT INTO changes (op, node_key, space) SELECT 'add', value ->> 0, value ->> 1 FROM json_each(CAST(? AS TEXT))"
# Exact duplicates: through the index of the hash's first 12 hex digits (store.py); the rows found are
# keyed by their whole hash, and their space is checked here ("+space": not by the (space, created_at) index)
_EXISTING_SQL = (f"SELECT {DOC_COLS}, content_hash FROM documents WHERE substr(content_hash, 1, 12) IN ({{marks}}) "
                 "AND +space = ? AND (expires_at IS NULL OR expires_at > ?)")
_json_sql: bool | None = None        # whether this process's SQLite has the JSON functions and ->> (3.38)


def embeds_in_transaction(embedder, preps: list[Prepared]) -> bool:
    """Whether a batch's vectors are computed inside its transaction, while the second thread
    inserts its documents (BatchWriter.insert_documents), rather than before it: a cheap embedder
    (no network, no model, no embedding cache in SQLite), new forced documents (no duplicate check
    needs the vectors first), enough sections to be inserted beside the indexing."""
    return (embedder.cheap and not embedder.semantic and all(p.force and not p.replace for p in preps)
            and sum(len(p.nodes) for p in preps) >= OVERLAP_MIN_NODES)


def rows_json(rows: list, utf8: bool = False) -> str | bytes:
    """A batch's rows (tuples of None, bool, int, float, str) as JSON for json_each: the compiled
    writer (a bulk insert's rows: 5.1 -> 1.8 us a memory), or json's encoder for what it does not take (another type, NaN, a
    lone surrogate: json's output or its error then). `utf8`: the writer's as UTF-8 bytes (json's
    stays a str), for SQL that reads them as text: a str is encoded again where it is bound."""
    write = _kernels.rows_json_utf8 if utf8 else _kernels.rows_json
    if write is not None:
        try:
            return write(rows)
        except (TypeError, ValueError):
            pass
    return json_encoder().encode(rows)


def _json_inserts(db) -> bool:
    global _json_sql
    if _json_sql is None:
        try:
            _json_sql = db.execute("SELECT value ->> 0 FROM json_each('[[7]]')").fetchone()[0] == 7
        except Exception:  # noqa: BLE001  (sqlite3.OperationalError: no JSON or no ->>)
            _json_sql = False
    return _json_sql


def _exact_in_json(db, values: set[float]) -> bool:
    """Whether SQLite reads each of these floats back from JSON as the same double (its own
    text-to-float conversion is not correctly rounded everywhere): a batch has only a few."""
    values = sorted(values)
    return [r[0] for r in db.execute("SELECT value FROM json_each(?)", (rows_json(values),))] == values


def _insert_documents(db, docs: bytes | str, now: float) -> None:
    db.execute(_DOCS_SQL, {"rows": docs, "now": now})


def _insert_sections(db, docs: bytes | str | None, now: float, nodes: bytes | str, keys: bytes | str, vecs: bytes,
                     width: int, changes: bytes | str) -> int:
    """What flush inserts (the documents unless done already) as one statement a table; the last
    change's seq. (The caller encodes: each time this thread wants the GIL back it may wait a
    switch interval.)"""
    if docs is not None:
        _insert_documents(db, docs, now)
    db.execute(_NODES_SQL, {"rows": nodes})
    db.execute(_VECTORS_SQL, {"rows": keys, "vecs": vecs, "width": width})
    db.execute(_CHANGES_SQL, (changes,))
    return db.execute("SELECT max(seq) FROM changes").fetchone()[0]


def later(a: float | None, b: float | None) -> float | None:
    """The later of two expiries (None: never)."""
    return None if a is None or b is None else max(a, b)


def new_ids(db, count: int) -> list[str]:
    """`count` fresh memory ids, ascending: milliseconds since the epoch above 20 bits of sequence.

    Time-ordered ids append to the documents' primary key and to the nodes' (document_id, ord)
    index; random ones put each insert on a random page of both, and a batch of a thousand then
    rewrote about a thousand pages of each at its commit. The store's last id (meta 'last_id',
    read and written inside the write transaction: one writer at a time) keeps ids unique across
    kernels and never reused, even if the clock steps back. Ids from before (random) stay valid."""
    row = db.execute("SELECT value FROM meta WHERE key = 'last_id'").fetchone()
    first = max(time.time_ns() // 1_000_000 << 20, int(row[0], 16) + 1 if row else 0)
    db.execute("INSERT OR REPLACE INTO meta VALUES ('last_id', ?)", (f"{first + count - 1:016x}",))
    return [f"m-{i:016x}" for i in range(first, first + count)]


class BatchWriter:
    """Writes a batch inside one transaction with a few executemany calls (not several per row)."""

    def __init__(self, engine, db, now: float):
        self.e, self.db, self.now = engine, db, now
        self.docs, self.nodes, self.vecs, self.changes = [], [], [], []
        # the nodes of new documents as the indexes take them, by key: what Shards.sync would read
        # back from SQLite after the commit (`own`)
        self.written = Written()     # {key: (row, float16 vector)}
        self.next_key = db.execute("SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'nodes'), 0), "
                                   "COALESCE((SELECT max(key) FROM nodes), 0)").fetchone()
        self.next_key = max(self.next_key) + 1
        self.redactions = 0
        self.indexed = False     # whether the indexes took the batch before its commit (flush_beside_indexing)
        self.later: list[tuple[Prepared, str, float | None]] = []   # documents whose sections wait for vectors
        self._docs_task = None   # the documents' insert on the second thread (insert_documents)

    def _existing(self, preps: list[Prepared]) -> dict[tuple[str, str], tuple]:
        wanted: dict[str, set[str]] = {}
        for p in preps:
            if p.replace is None:
                wanted.setdefault(p.space, set()).add(p.hash)
        found = {}
        for space, hashes in wanted.items():
            hashes = sorted(hashes)
            for i in range(0, len(hashes), 500):
                chunk = hashes[i:i + 500]
                for row in self.db.execute(_EXISTING_SQL.format(marks=",".join("?" * len(chunk))),
                                           (*[h[:12] for h in chunk], space, self.now)):
                    found.setdefault((space, row[-1]), row[:-1])
        return found

    def write(self, preps: list[Prepared]) -> list[RememberResult]:
        """The batch's rows, held for flush_beside_indexing (a replacement flushes what precedes it).
        Each item is checked against the store as the items before it left it."""
        existing, seen, results = self._existing(preps), {}, []
        holds = {row[0]: key for key, row in existing.items()}     # memory id -> the key of its text
        # every vector of the batch in float16 at once: as stored, and as the index keeps it (None:
        # vectors come later, add_sections; only for new documents written without a duplicate check)
        half = _kernels.to_half(np.concatenate([p.vectors for p in preps])) if preps[0].vectors is not None else None
        starts = [0, *accumulate(len(p.nodes) for p in preps)]
        latest = self._latest_expiry(preps)
        fresh = None
        for j, p in enumerate(preps):
            if p.replace is None:
                expires = latest[(p.space, p.hash)]
                if (p.space, p.hash) in seen:
                    prior, count, scope, was = seen[(p.space, p.hash)]
                    # (only a replacement can hold less: new ones got the latest, _latest_expiry)
                    expires = self._refresh(prior, p.space, was, expires)
                    seen[(p.space, p.hash)] = (prior, count, scope, expires)
                    results.append(RememberResult(id=prior, document_id=prior, deduped=True, node_count=count,
                                                  space=p.space, scope=scope, expires_at=expires))
                    continue
                row = existing.get((p.space, p.hash))
                if row:
                    row = (*row[:12], self._refresh(row[0], p.space, row[12], expires), *row[13:])
                    existing[(p.space, p.hash)] = row
                    results.append(RememberResult(id=row[0], document_id=row[0], deduped=True, existing=memory_row(row),
                                                  node_count=row[9], space=p.space, scope=row[3], expires_at=row[12]))
                    continue
                dup = None if p.force else semantic_duplicate(self.e, self.db, p, self.now)
                if dup:
                    m = dup[0]
                    results.append(RememberResult(id=m.id, document_id=m.id, duplicate=True, existing=m, similarity=dup[1],
                                                  node_count=m.node_count, space=m.space, scope=m.scope,
                                                  expires_at=m.expires_at))
                    continue
            else:
                expires = self._replacing(p)
                gone = holds.pop(p.replace, None)     # the text it replaces is no longer stored there
                for held in (existing, seen):
                    if gone in held and held[gone][0] == p.replace:
                        del held[gone]
            if p.replace is None and fresh is None:
                fresh = iter(new_ids(self.db, len(preps) - j))   # (duplicates' ids go unused)
            doc_id = p.replace or next(fresh)
            if half is None:
                if p.replace is not None or not p.force:    # (embeds_in_transaction sees to it: a bug if not)
                    raise ValueError("internal: a document written before its vectors must be new and forced")
                self._document(p, doc_id, expires, None)
                self.later.append((p, doc_id, expires))
            else:
                self._document(p, doc_id, expires, half[starts[j]:starts[j + 1]])
            seen[(p.space, p.hash)] = (doc_id, len(p.nodes), p.scope, expires)
            holds[doc_id] = (p.space, p.hash)
            results.append(RememberResult(id=doc_id, document_id=doc_id, node_count=len(p.nodes), space=p.space,
                                          scope=p.scope, expires_at=expires))
        return results

    def _latest_expiry(self, preps: list[Prepared]) -> dict[tuple[str, str], float | None]:
        """Per (space, hash) of the batch's new items, the latest expiry any of them asks for: the
        memory the text is stored as (or already was) lives that long."""
        latest: dict[tuple[str, str], float | None] = {}
        for p in preps:
            if p.replace is None:
                expires = self._expiry(p)
                key = (p.space, p.hash)
                latest[key] = later(latest[key], expires) if key in latest else expires
        return latest

    def _refresh(self, doc_id: str, space: str, was: float | None, expires: float | None) -> float | None:
        """A memory remembered again lives at least as long as the new copy would have (never
        shorter, `later`): the expiry it now has."""
        kept = later(was, expires)
        if kept == was:
            return was
        self.db.execute("UPDATE documents SET expires_at = ? WHERE id = ?", (expires, doc_id))
        self.db.execute("INSERT INTO changes (op, node_key, space) SELECT 'expiry', key, ? FROM nodes "
                        "WHERE document_id = ?", (space, doc_id))
        _dreamed.outlived(self.db, doc_id, expires)
        return kept

    def _replacing(self, p: Prepared) -> float | None:
        """Fills in what a replacement's caller left out (None) from the memory it replaces: scope,
        project (or session), importance, metadata, and its expiry unless ttl= is given or the scope
        changes (then the new scope's default, from now). Returns the expiry."""
        self.flush()          # the document may have been written earlier in this batch
        row = self.db.execute("SELECT space, scope, project, importance, metadata, expires_at FROM documents "
                              "WHERE id = ? AND (expires_at IS NULL OR expires_at > ?)", (p.replace, self.now)).fetchone()
        if row is None:       # (an expired one is gone, if not yet purged)
            raise NotFound(f"replace={p.replace!r}: no such memory (it may have been forgotten or expired)")
        space, scope, project, importance, metadata, expires = row
        p.scope = p.scope or scope
        v.scoped_names((p.scope,), p.project)     # (project= given, scope kept: it must be a project memory)
        same = p.scope == scope
        if same and p.project is None and scope == "project":
            p.project = project
        if same and scope == "session":
            p.session = space.removeprefix("session:")
        p.space = self.e._space(p.scope, p.project, p.session)
        p.importance = importance if p.importance is None else p.importance
        if p.metadata is None and p.metadata_json is None:
            p.metadata_json = metadata
        if p.keep_expiry and same:
            return expires
        return self._expiry(p)

    def _expiry(self, p: Prepared) -> float | None:
        """The expiry `p` asks for: its ttl, else its scope's default, from now (None: never)."""
        ttl = p.ttl if p.ttl is not None else self.e.settings.ttl_for(p.scope)
        return None if ttl is None else self.now + ttl

    def _document(self, p: Prepared, doc_id: str, expires: float | None, half: np.ndarray | None) -> None:
        """The document's row (or its replacement, after _replacing), and its sections' unless `half` is None."""
        meta = p.metadata_json
        if meta is None and p.metadata is not None:
            meta = json.dumps(p.metadata, ensure_ascii=False)
        row = (p.space, p.scope, p.project_name(self.e.project), p.session or self.e.session, p.kind, p.title,
               p.content, p.hash, p.importance, meta)
        if p.replace is not None:
            db = self.db
            old = db.execute("SELECT n.key, d.space FROM nodes n JOIN documents d ON d.id = n.document_id "
                             "WHERE d.id = ?", (doc_id,)).fetchall()
            _dreamed.release(db, [k for k, _ in old], [doc_id])    # sections dream() set aside
            db.executemany("INSERT INTO changes (op, node_key, space) VALUES ('del', ?, ?)", old)
            db.execute("DELETE FROM nodes WHERE document_id = ?", (doc_id,))
            db.execute("UPDATE documents SET space=?, scope=?, project=?, session=?, kind=?, title=?, content=?, "
                       "content_hash=?, importance=?, metadata=?, updated_at=?, accessed_at=?, expires_at=? WHERE id=?",
                       (*row, self.now, self.now, expires, doc_id))
        else:
            self.docs.append((doc_id, *row, self.now, self.now, self.now, expires))
        if half is not None:
            self._sections(p, doc_id, expires, half)
        self.redactions += p.redactions

    def add_sections(self, vecs: np.ndarray) -> None:
        """The sections of the documents written without vectors (`later`), given their vectors in
        order (those of Prepared.embedding_texts of each)."""
        half, at = _kernels.to_half(vecs), 0
        blobs, first = encode_rows(half), self.next_key       # (one copy of the batch's bytes)
        for p, doc_id, expires in self.later:
            n = len(p.nodes)
            self._sections(p, doc_id, expires, None, blobs[at:at + n])
            at += n
        self.written.block(first, half)      # (the later documents are all new: a key for each row, in order)
        self.later = []

    def _sections(self, p: Prepared, doc_id: str, expires: float | None, half: np.ndarray | None,
                  blobs: list[bytes] | None = None) -> None:
        """The rows of p's sections; their vectors `half`, or (None) rows of a block of `written`."""
        session, now, importance, count = self.e.session, self.now, p.importance, len(p.nodes)
        keep = p.replace is None      # (a replaced document keeps its tier, which only SQLite knows)
        for i, (node, blob) in enumerate(zip(p.nodes, encode_rows(half) if blobs is None else blobs)):
            key = self.next_key
            self.next_key += 1
            self.nodes.append((key, doc_id, node.ord, node.parent_ord, node.depth, node.path, node.title,
                               node.stored_body, node.metadata_json, node.hash))
            self.vecs.append((key, blob))
            self.changes.append((key, p.space))
            if keep:
                self.written[key] = (NodeRow(key, doc_id, node.ord, count, node.title, node.body, session, now,
                                             importance, expires), None if half is None else half[i])

    def flush(self) -> None:
        db = self.db
        if self.docs:
            db.executemany("INSERT INTO documents (id, space, scope, project, session, kind, title, content, "
                           "content_hash, importance, metadata, created_at, updated_at, accessed_at, expires_at) "
                           "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", self.docs)
        if self.nodes:
            db.executemany("INSERT INTO nodes (key, document_id, ord, parent_ord, depth, path, title, body, metadata, "
                           "content_hash) VALUES (?,?,?,?,?,?,?,?,?,?)", self.nodes)
            db.executemany("INSERT INTO vectors VALUES (?, ?)", self.vecs)
            db.executemany("INSERT INTO changes (op, node_key, space) VALUES ('add', ?, ?)", self.changes)
        if self.redactions:
            db.execute("INSERT INTO meta VALUES ('redactions', ?) ON CONFLICT(key) DO UPDATE SET "
                       "value = CAST(value AS INTEGER) + excluded.value", (self.redactions,))
        self.docs, self.nodes, self.vecs, self.changes, self.redactions = [], [], [], [], 0

    def _beside(self, shards, nodes: int) -> bool:
        """Whether a batch of `nodes` new sections is inserted from the second thread while the
        indexes take it (flush_beside_indexing): large, no replacement, nothing the indexes have not
        seen, JSON in this SQLite."""
        return (nodes >= OVERLAP_MIN_NODES and len(self.written) == len(self.nodes) and not shards.checks.pending
                and _json_inserts(self.db) and self.e.store.max_seq() == shards.seq)

    def _documents_json(self) -> bytes | str | None:
        """The documents (rows as _document makes them) as JSON for _DOCS_SQL, taken from `docs`;
        None (they stay) unless SQLite reads importance and expiry back from JSON exactly. Created,
        updated and accessed (11-13) are `now`, bound."""
        docs = self.docs
        if not docs or not _exact_in_json(self.db, {d[9] for d in docs} | {d[14] for d in docs if d[14] is not None}):
            return None
        self.docs = []
        return rows_json([d[:11] + d[14:] for d in docs], True)

    def insert_documents(self, shards) -> None:
        """Start inserting the documents written without vectors (`later`) on the second thread
        while the caller computes those vectors, if the batch will be inserted there anyway (the
        caller holds the connection back until flush_beside_indexing or settle)."""
        if self.later and self._beside(shards, sum(len(p.nodes) for p, _, _ in self.later)):
            docs = self._documents_json()
            if docs is not None:
                self._docs_task = _INSERTER.hand_off(_insert_documents, self.db, docs, self.now)

    def settle(self, check: bool = True) -> None:
        """Wait for the documents' insert (insert_documents), an interrupt included: the connection
        is the second thread's until then. Its error is raised if `check`."""
        task, self._docs_task = self._docs_task, None
        if task is not None:
            task.finish()
            if check:
                task.result()

    def flush_beside_indexing(self, shards) -> int | None:
        """flush(), with a large batch's sections inserted by a second thread while the indexes take
        them here (`shards`: what Shards.sync would do with `written` after the commit). Returns the
        last change's seq, or None when it only flushed: a small batch, a replacement, changes the
        indexes have not seen, no JSON in this SQLite. If this raises or the commit fails, the
        caller unloads the indexes of the batch's spaces (`indexed`): they hold uncommitted rows."""
        early = self._docs_task is not None          # (its conditions were checked then, in this transaction)
        widths = {len(b) for _, b in self.vecs}
        if not early and (len(widths) != 1 or not self._beside(shards, len(self.nodes))):
            self.flush()
            return None
        nodes, vecs, changes = self.nodes, self.vecs, self.changes
        self.nodes, self.vecs, self.changes = [], [], []
        docs = None if early else self._documents_json()
        if not early:
            self.flush()              # what is left: documents with binds (parents of the nodes), meta
        # (handed off unless it must wait for the documents' insert: then it follows that at once)
        start = _INSERTER.submit if early and not self._docs_task.done() else _INSERTER.hand_off
        task = start(_insert_sections, self.db, docs, self.now, rows_json(nodes, True), rows_json([k for k, _ in vecs], True),
                     b"".join(b for _, b in vecs), widths.pop(), rows_json(changes, True))
        self.indexed = True
        try:
            shards.take_own(changes, self.written)
        finally:
            task.finish()             # (the connection is the thread's until then)
        self.settle()
        seq = task.result()
        self.flush()                  # (early: the meta left)
        return seq
