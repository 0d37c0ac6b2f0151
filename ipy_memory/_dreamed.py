"""Sections dream() removed as duplicates, kept aside so that their memories stay whole and findable.

dream() takes a section out of the indexes when another section of the space has the same text
(the one kept "stands in" for it), but never changes a memory's text. So each removed section is
kept here, with its vector, until:

* the section standing in for it is deleted (forget, replace, purge): it returns to its own
  memory's nodes and vectors, so that text stays findable (`release`); likewise when its own
  memory, remembered again, comes to outlive the stand-in's (`outlived`);
* its own memory is forgotten or replaced: it goes with it;
* it is forgotten itself by its id 'm-…#n' (`forget_section`).

forget() of another section rebuilds the memory's content from its nodes and these (`sections`).
The table is created by the first dream(); until then every call here is a no-op.
"""

from __future__ import annotations

import json

SCHEMA = """
CREATE TABLE IF NOT EXISTS dreamed (
    key INTEGER PRIMARY KEY,          -- the removed node's key (nodes' AUTOINCREMENT never reuses it)
    keep INTEGER NOT NULL,            -- the node that stands in for it in the indexes
    document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    ord INTEGER NOT NULL, parent_ord INTEGER, depth INTEGER NOT NULL, path TEXT NOT NULL,
    title TEXT NOT NULL, body TEXT NOT NULL, metadata TEXT, content_hash TEXT NOT NULL,
    vec BLOB NOT NULL, epoch INTEGER NOT NULL        -- its vector, valid for that embedder epoch
);
CREATE INDEX IF NOT EXISTS dreamed_keep ON dreamed(keep);
CREATE INDEX IF NOT EXISTS dreamed_document ON dreamed(document_id)
"""

_NODE_COLS = "key, document_id, ord, parent_ord, depth, path, title, body, metadata, content_hash"
_EPOCH = "(SELECT CAST(COALESCE((SELECT value FROM meta WHERE key = 'epoch'), 0) AS INTEGER))"


def _exists(db) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'dreamed'").fetchone() is not None


def set_aside(db, pairs: list[tuple[int, int]]) -> None:
    """Inside dream()'s transaction, before the duplicates are deleted: (removed key, kept key) pairs."""
    for stmt in SCHEMA.split(";"):
        db.execute(stmt)
    # sections a removed node stood in for are now stood in for by the node kept in its place
    db.executemany("UPDATE dreamed SET keep = ? WHERE keep = ?", [(keep, dup) for dup, keep in pairs])
    db.executemany(f"INSERT INTO dreamed SELECT n.key, ?, n.document_id, n.ord, n.parent_ord, n.depth, n.path, "
                   f"n.title, COALESCE(n.body, d.content), n.metadata, n.content_hash, v.vec, {_EPOCH} "
                   "FROM nodes n JOIN documents d ON d.id = n.document_id JOIN vectors v ON v.node_key = n.key "
                   "WHERE n.key = ?", [(keep, dup) for dup, keep in pairs])


def release(db, keys: list[int], leaving: list[str] = ()) -> None:
    """Before the nodes `keys` are deleted, and the documents `leaving` (forgotten, purged or replaced)
    lose their text: the sections those nodes stood in for return to their own memories (and to
    every index, through the change log)."""
    if not _exists(db) or not keys:
        return
    if leaving:
        db.execute("DELETE FROM dreamed WHERE document_id IN (SELECT value FROM json_each(?))",
                   (json.dumps(list(leaving)),))
    _restore(db, "keep IN (SELECT value FROM json_each(?))", (json.dumps([int(k) for k in keys]),))


def outlived(db, doc_id: str, expires: float | None) -> None:
    """A memory now lives until `expires` (remembered again): its set-aside sections whose stand-in's
    memory expires sooner return to it (dream() sets one aside only for a stand-in that lives as long)."""
    if _exists(db):
        _restore(db, "key IN (SELECT r.key FROM dreamed r JOIN nodes n ON n.key = r.keep JOIN documents d "
                     "ON d.id = n.document_id WHERE r.document_id = ? AND d.expires_at IS NOT NULL AND "
                     "(? IS NULL OR d.expires_at < ?))", (doc_id, expires, expires))


def restore_document(db, doc_id: str) -> None:
    """All of a memory's set-aside sections back in the indexes (its last indexed one was forgotten)."""
    if _exists(db):
        _restore(db, "document_id = ?", (doc_id,))


def _restore(db, where: str, params: tuple) -> None:
    db.execute(f"INSERT INTO nodes ({_NODE_COLS}) SELECT {_NODE_COLS} FROM dreamed WHERE {where}", params)
    # re-embedded since dream(): the node standing in has the same text and a vector of the current model
    db.execute(f"INSERT INTO vectors (node_key, vec) SELECT m.key, CASE WHEN m.epoch = {_EPOCH} THEN m.vec "
               f"ELSE (SELECT vec FROM vectors WHERE node_key = m.keep) END FROM dreamed m WHERE m.{where}", params)
    db.execute(f"INSERT INTO changes (op, node_key, space) SELECT 'add', m.key, d.space FROM dreamed m "
               f"JOIN documents d ON d.id = m.document_id WHERE m.{where}", params)
    db.execute(f"DELETE FROM dreamed WHERE {where}", params)


def sections(db, doc_id: str) -> list[tuple[int, int, str, str]]:
    """(ord, depth, title, body) of a memory's set-aside sections."""
    if not _exists(db):
        return []
    return db.execute("SELECT ord, depth, title, body FROM dreamed WHERE document_id = ?", (doc_id,)).fetchall()


def has_section(db, doc_id: str, ord_: int) -> bool:
    """Whether memory doc_id has section ord_: indexed, or set aside by dream() (still the memory's)."""
    return (db.execute("SELECT 1 FROM nodes WHERE document_id = ? AND ord = ?", (doc_id, ord_)).fetchone() is not None
            or _exists(db) and db.execute("SELECT 1 FROM dreamed WHERE document_id = ? AND ord = ?",
                                          (doc_id, ord_)).fetchone() is not None)


def forget_section(db, doc_id: str, ord_: int) -> bool:
    """Remove a set-aside section ('m-…#n'); False if there is none."""
    return _exists(db) and db.execute("DELETE FROM dreamed WHERE document_id = ? AND ord = ?",
                                      (doc_id, ord_)).rowcount > 0
