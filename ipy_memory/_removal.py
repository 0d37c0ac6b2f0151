"""Forgetting: one memory or section by id, and every memory whose TTL has passed (MemoryEngine's side)."""

from __future__ import annotations

import json

from . import _dreamed, _validate as v
from ._locking import locked
from ._text import content_hash, exchange_content
from .errors import NotFound

_NODES_OF = "SELECT n.key, d.space FROM nodes n JOIN documents d ON d.id = n.document_id WHERE "


def _log_deleted(db, keys: list[tuple[int, str]]) -> None:
    db.executemany("INSERT INTO changes (op, node_key, space) VALUES ('del', ?, ?)", keys)


class RemovalMixin:
    """forget() and purge_expired() of MemoryEngine: rows leave SQLite and a change-log entry per section
    tells every index (this process's at once, other kernels' at their next sync). Sections dream()
    set aside as duplicates of a section that goes return to the indexes (see _dreamed)."""

    def _forgettable(self, doc_id: str, ord_: int | None) -> bool:
        """Whether forget() finds it: the memory (even expired, until purged), or its section ord_, indexed
        or set aside by dream()."""
        with self.store.read() as db:
            if ord_ is None:
                return db.execute("SELECT 1 FROM documents WHERE id = ?", (doc_id,)).fetchone() is not None
            return _dreamed.has_section(db, doc_id, ord_)

    @locked
    def forget(self, id: str) -> dict:
        """Remove a memory ('m-…') or one of its sections ('m-…#n') everywhere. Unknown id -> NotFound."""
        self._check_open()
        doc_id, ord_ = v.memory_id(id)
        self._flush_accesses()
        with self.store.write() as db:
            if ord_ is None:
                keys = db.execute(_NODES_OF + "d.id = ?", (doc_id,)).fetchall()
                _dreamed.release(db, [k for k, _ in keys], [doc_id])
                if not db.execute("DELETE FROM documents WHERE id = ?", (doc_id,)).rowcount:
                    raise NotFound(f"no memory {id!r} (never stored, forgotten, or expired and purged)")
                removed = len(keys)
            else:
                keys = db.execute(_NODES_OF + "d.id = ? AND n.ord = ?", (doc_id, ord_)).fetchall()
                if keys:
                    _dreamed.release(db, [keys[0][0]])
                    db.execute("DELETE FROM nodes WHERE key = ?", (keys[0][0],))
                elif not _dreamed.forget_section(db, doc_id, ord_):    # (set aside: only its text is left)
                    raise NotFound(f"no memory section {id!r}")
                self._rewrite_content(db, doc_id)
                removed = 1
            _log_deleted(db, keys)
        self.shards.sync(force=True)
        return {"id": id, "removed_nodes": removed}

    def _rewrite_content(self, db, doc_id: str) -> None:
        """After one section is forgotten, its text must leave the document's source too, and only its:
        sections dream() set aside keep theirs."""
        rows = db.execute("SELECT n.ord, n.depth, n.title, COALESCE(n.body, d.content) FROM nodes n JOIN documents d "
                          "ON d.id = n.document_id WHERE d.id = ?", (doc_id,)).fetchall()
        aside = _dreamed.sections(db, doc_id)
        if not rows and not aside:
            db.execute("DELETE FROM documents WHERE id = ?", (doc_id,))
            return
        if not rows:    # its last indexed section went: the set-aside ones are indexed again, to be found
            _dreamed.restore_document(db, doc_id)
        parts = sorted(rows + aside)
        kind, title = db.execute("SELECT kind, title FROM documents WHERE id = ?", (doc_id,)).fetchone()
        if kind == "exchange":
            content, digest = exchange_content(title, [(speaker, body) for _, _, speaker, body in parts])
        else:
            content = "\n\n".join((("#" * depth + " " + heading + "\n\n") if depth else "") + body
                                  for _, depth, heading, body in parts)
            digest = content_hash(content)
        db.execute("UPDATE nodes SET body = COALESCE(body, (SELECT content FROM documents WHERE id = ?)) "
                   "WHERE document_id = ?", (doc_id, doc_id))
        db.execute("UPDATE documents SET content = ?, content_hash = ?, updated_at = ? WHERE id = ?",
                   (content, digest, self.clock(), doc_id))

    @locked
    def purge_expired(self) -> int:
        """Delete memories whose TTL has passed; returns how many documents were removed."""
        self._check_open()
        now = self.clock()
        with self.store.write() as db:
            ids = [r[0] for r in db.execute("SELECT id FROM documents WHERE expires_at IS NOT NULL AND expires_at <= ?",
                                            (now,))]
            keys = db.execute(_NODES_OF + "d.id IN (SELECT value FROM json_each(?))", (json.dumps(ids),)).fetchall()
            _dreamed.release(db, [k for k, _ in keys], ids)
            n = db.execute("DELETE FROM documents WHERE id IN (SELECT value FROM json_each(?))", (json.dumps(ids),)).rowcount
            _log_deleted(db, keys)
        self.shards.sync(force=True)
        return n

    def _maybe_purge(self, now: float) -> None:
        if now >= self._next_purge:
            self._next_purge = now + 3600
            self.purge_expired()
