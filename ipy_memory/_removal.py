"""Forgetting: one memory or section by id, and every memory whose TTL has passed (MemoryEngine's side)."""

from __future__ import annotations

from . import _validate as v
from ._locking import locked
from ._text import content_hash
from .errors import NotFound


class RemovalMixin:
    """forget() and purge_expired() of MemoryEngine: rows leave SQLite and a change-log entry per section
    tells every index (this process's at once, other kernels' at their next sync)."""

    @locked
    def forget(self, id: str) -> dict:
        """Remove a memory ('m-…') or one of its sections ('m-…#n') everywhere. Unknown id -> NotFound."""
        self._check_open()
        doc_id, ord_ = v.memory_id(id)
        self._flush_accesses()
        with self.store.write() as db:
            if ord_ is None:
                keys = db.execute("SELECT n.key, d.space FROM nodes n JOIN documents d ON d.id = n.document_id "
                                  "WHERE d.id = ?", (doc_id,)).fetchall()
                if not db.execute("DELETE FROM documents WHERE id = ?", (doc_id,)).rowcount:
                    raise NotFound(f"no memory {id!r} (never stored, forgotten, or expired and purged)")
            else:
                keys = db.execute("SELECT n.key, d.space FROM nodes n JOIN documents d ON d.id = n.document_id "
                                  "WHERE d.id = ? AND n.ord = ?", (doc_id, ord_)).fetchall()
                if not keys:
                    raise NotFound(f"no memory section {id!r}")
                db.execute("DELETE FROM nodes WHERE key = ?", (keys[0][0],))
                self._rewrite_content(db, doc_id)
            db.executemany("INSERT INTO changes (op, node_key, space) VALUES ('del', ?, ?)", keys)
        self.shards.sync(force=True)
        return {"id": id, "removed_nodes": len(keys)}

    def _rewrite_content(self, db, doc_id: str) -> None:
        """After one section is forgotten, its text must leave the document's source too."""
        rows = db.execute("SELECT n.depth, n.title, COALESCE(n.body, d.content) FROM nodes n JOIN documents d "
                          "ON d.id = n.document_id WHERE d.id = ? ORDER BY n.ord", (doc_id,)).fetchall()
        if not rows:
            db.execute("DELETE FROM documents WHERE id = ?", (doc_id,))
            return
        kind, title = db.execute("SELECT kind, title FROM documents WHERE id = ?", (doc_id,)).fetchone()
        if kind == "exchange":
            # laid out as _ingest.prepare_exchange does: "speaker: text" turns, hashed with the session id
            content = "\n\n".join(f"{speaker}: {body}" for _, speaker, body in rows)
            digest = content_hash(title + "\n" + content)
        else:
            content = "\n\n".join((("#" * depth + " " + heading + "\n\n") if depth else "") + body
                                  for depth, heading, body in rows)
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
            keys = db.execute("SELECT n.key, d.space FROM nodes n JOIN documents d ON d.id = n.document_id "
                              "WHERE d.expires_at IS NOT NULL AND d.expires_at <= ?", (now,)).fetchall()
            n = db.execute("DELETE FROM documents WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,)).rowcount
            db.executemany("INSERT INTO changes (op, node_key, space) VALUES ('del', ?, ?)", keys)
        self.shards.sync(force=True)
        return n

    def _maybe_purge(self, now: float) -> None:
        if now >= self._next_purge:
            self._next_purge = now + 3600
            self.purge_expired()
