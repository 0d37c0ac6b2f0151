"""Exact duplicates are found through an index of the content hash's first 12 hex digits; the whole
hash, the space and the expiry are checked on the rows it finds."""

import sqlite3

from ipy_memory import MemoryEngine, store
from ipy_memory import _writer
from ipy_memory._text import content_hash


def _indexes(data_dir) -> set[str]:
    con = sqlite3.connect(data_dir / store.DB_NAME)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = "
                                          "'documents' AND sql IS NOT NULL")}
    finally:
        con.close()


def test_the_lookup_goes_through_the_prefix_index(engine):
    engine.remember("a first note")
    plan = engine.store.db.execute("EXPLAIN QUERY PLAN " + _writer._EXISTING_SQL.format(marks="?,?"),
                                   ("a" * 12, "b" * 12, "project:test", 0.0)).fetchall()
    assert "documents_hash_prefix" in str(plan), plan


def test_only_the_whole_hash_in_the_same_space_unexpired_is_a_duplicate(engine, data_dir):
    text = "The staging cluster is called heron and runs in eu-west-2."
    twin = content_hash(text)
    near = twin[:12] + ("0" if twin[12] != "0" else "1") + twin[13:]       # the same prefix, another hash
    with engine.store.write() as db:
        for doc_id, space, digest, expires in (("m-00000000000000a1", "project:test", near, None),
                                               ("m-00000000000000a2", "project:other", twin, None),
                                               ("m-00000000000000a3", "project:test", twin, 1.0)):    # long expired
            db.execute("INSERT INTO documents (id, space, scope, project, title, content, content_hash, importance, "
                       "created_at, updated_at, accessed_at, expires_at) VALUES (?, ?, 'project', 'test', 't', ?, ?, "
                       "0.5, 0, 0, 0, ?)", (doc_id, space, text, digest, expires))
    first = engine.remember(text)
    assert first.stored and first.id not in ("m-00000000000000a1", "m-00000000000000a2", "m-00000000000000a3")
    again = engine.remember(text.upper())            # normalised: the same hash
    assert again.deduped and again.id == first.id


def test_a_store_with_the_previous_index_gets_the_prefix_index(data_dir):
    with MemoryEngine(data_dir, project="p") as mem:
        first = mem.remember("Backups of the feature store run hourly.")
    con = sqlite3.connect(data_dir / store.DB_NAME)     # as the previous version left it
    con.execute("DROP INDEX documents_hash_prefix")
    con.execute("CREATE INDEX documents_space_hash ON documents(space, content_hash)")
    con.commit()
    con.close()
    with MemoryEngine(data_dir, project="p") as mem:
        assert {"documents_hash_prefix"} <= _indexes(data_dir) and "documents_space_hash" not in _indexes(data_dir)
        again = mem.remember("backups of the feature store run hourly.")
        assert again.deduped and again.id == first.id
