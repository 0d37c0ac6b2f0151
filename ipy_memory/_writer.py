"""The write path: one transaction per batch, exact and near-duplicate checks, few executemany calls."""

from __future__ import annotations

import json
import time
from itertools import accumulate

import numpy as np

from . import _text
from ._validate import json_encoder
from ._ingest import Prepared
from .errors import NotFound
from .lexical import NodeRow
from .models import Memory, RememberResult
from .store import encode_rows
from ._topk import unique
from ._threads import Worker

DOC_COLS = ("id, title, content, scope, project, session, space, kind, importance, "
            "(SELECT count(*) FROM nodes n WHERE n.document_id = documents.id), created_at, updated_at, "
            "expires_at, tier, metadata")


# A batch of at least this many sections inserts them from a second thread while the indexes take
# them: one INSERT ... SELECT FROM json_each(?) per table runs in SQLite without the GIL, where
# executemany takes it back for every row (and so gets next to nothing done beside busy Python).
OVERLAP_MIN_NODES = 256
_INSERTER = Worker("ipy_memory-insert")
_NODE_COLS = ("key", "document_id", "ord", "parent_ord", "depth", "path", "title", "body", "metadata", "content_hash")
_NODES_SQL = (f"INSERT INTO nodes ({', '.join(_NODE_COLS)}) SELECT "
              f"{', '.join(f'value ->> {i}' for i in range(len(_NODE_COLS)))} FROM json_each(?)")
_DOCS_SQL = ("INSERT INTO documents (id, space, scope, project, session, kind, title, content, content_hash, "
             "importance, metadata, created_at, updated_at, accessed_at, expires_at) SELECT "
             + ", ".join(f"value ->> {i}" for i in range(11)) + ", ?2, ?2, ?2, value ->> 11 FROM json_each(?1)")
_VECTORS_SQL = "INSERT INTO vectors SELECT value, substr(?2, key * ?3 + 1, ?3) FROM json_each(?1)"
_CHANGES_SQL = "INSERT INTO changes (op, node_key, space) SELECT 'add', value ->> 0, value ->> 1 FROM json_each(?)"
# Exact duplicates: through the index of the hash's first 12 hex digits (store.py); the rows found are
# keyed by their whole hash, and their space is checked here ("+space": not by the (space, created_at) index)
_EXISTING_SQL = (f"SELECT {DOC_COLS}, content_hash FROM documents WHERE substr(content_hash, 1, 12) IN ({{marks}}) "
                 "AND +space = ? AND (expires_at IS NULL OR expires_at > ?)")
_json_sql: bool | None = None        # whether this process's SQLite has the JSON functions and ->> (3.38)


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
    return [r[0] for r in db.execute("SELECT value FROM json_each(?)", (json_encoder().encode(values),))] == values


def _insert_sections(db, docs: str | None, now: float, nodes: str, keys: str, vecs: bytes, width: int,
                     changes: str) -> int:
    """What flush inserts (the documents unless done already) as one statement a table; the last
    change's seq. (The caller encodes: each time this thread wants the GIL back it may wait a
    switch interval.)"""
    if docs is not None:
        db.execute(_DOCS_SQL, (docs, now))
    db.execute(_NODES_SQL, (nodes,))
    db.execute(_VECTORS_SQL, (keys, vecs, width))
    db.execute(_CHANGES_SQL, (changes,))
    return db.execute("SELECT max(seq) FROM changes").fetchone()[0]


def memory_row(row) -> Memory:
    return Memory(*row[:14], metadata=json.loads(row[14]) if row[14] else None)


def semantic_duplicate(engine, db, p: Prepared, now: float) -> tuple[Memory, float] | None:
    """The most similar existing memory of the space if its whole-document similarity reaches
    `dedup_threshold`. Documents are compared as the normalised sum of their sections' vectors;
    candidates come from the nearest sections of the new document's sum and of its first sections
    (one section of a long document is far from the sum, so it cannot serve as the only probe)."""
    shard = engine.shards.get(p.space)
    if not len(shard.vec):
        return None
    docvec = p.vectors.sum(axis=0)
    norm = float(np.linalg.norm(docvec))
    if norm == 0:
        return None
    docvec /= norm
    probes = np.vstack([docvec[None], p.vectors[:8]])
    pool = None if engine.embedder.semantic else lexical_pool(shard, p, engine.settings.exact_threshold)
    if pool is None:
        found = [f[0] for f in shard.vec.search_many(probes, 5)]
    else:   # the same nearest sections, among those that share a rare term with the new document
        sims = shard.vec.dots_many(pool, probes)
        found = [pool[np.argsort(-row, kind="stable")[:5]] for row in sims]
    keys = {int(k) for k in found[0]} | {int(k) for f in found[1:] for k in f[:3]}
    if not keys:
        return None
    marks = ",".join("?" * len(keys))
    docs = [r[0] for r in db.execute(f"SELECT DISTINCT document_id FROM nodes WHERE key IN ({marks})", list(keys))]
    best = None
    for doc_id in docs:
        nkeys = [r[0] for r in db.execute("SELECT key FROM nodes WHERE document_id = ?", (doc_id,))]
        other = shard.vec.get(nkeys).sum(axis=0)
        n = float(np.linalg.norm(other))
        sim = float(other @ docvec / n) if n else 0.0
        if sim >= engine.settings.dedup_threshold and (best is None or sim > best[1]):
            row = db.execute(f"SELECT {DOC_COLS} FROM documents WHERE id = ? AND "
                             "(expires_at IS NULL OR expires_at > ?)", (doc_id, now)).fetchone()
            if row:
                best = (memory_row(row), sim)
    return best


def lexical_pool(shard, p: Prepared, threshold: int) -> np.ndarray | None:
    """Keys of the sections that may be near-duplicates of the document, or None (search the vectors).
    A near-duplicate shares index terms with it: in a small space, every section holding one of them
    is a candidate (by the vectors alone, "ααααα" was a duplicate of "αααααα", with which it shares
    letter n-grams but no word, so neither its own text nor the other found it again).

    The hashing embedder hashes each word with its letter 3-5-grams (a CJK character bigram alone),
    so a term weighs about as many features in the vector as `_features` says. A document at cosine
    >= dedup_threshold (0.92) lacks less than a fifth of the new one's feature mass (an exact bound
    for a subset is 0.154). So it holds one of the rarest terms that together weigh a fifth (and at
    least 4 of them), whose postings are usually short; and two of a set whose weight without its
    heaviest term reaches a fifth (and of at least 4), when those postings are long. Counting terms instead of
    weights missed near-duplicates that gained a Chinese sentence: many light bigram terms. Either
    pool costs far less than an exact scan of a large space (1.5M sections: ~200 ms); the scan
    remains for pools larger than that."""
    weight = {_text.term_hash(t): _features(t) for n in p.nodes for t in _text.terms(f"{n.title} {n.body}")}
    lists = sorted((len(post[0]), h, post[0]) for h in weight if (post := shard.lex.post.get(h)) is not None)
    if not lists:
        return np.zeros(0, np.int64)      # no term in common: nothing can be that close
    if len(shard.vec) < threshold:        # small: every section that holds one of its terms
        slots = unique(np.concatenate([s for _, _, s in lists]))
    elif (slots := _rare_term_slots(shard, weight, lists)) is None:
        return None
    slots = slots[shard.lex.alive.view[slots]]
    return shard.lex.keys.view[slots]


def _rare_term_slots(shard, weight: dict, lists: list) -> np.ndarray | None:
    """lexical_pool's sections of a large space (the rules in its docstring), or None."""
    fifth = sum(weight.values()) / 5
    cum = np.cumsum([weight[h] for _, h, _ in lists])
    one = rarest_held(cum, fifth)                                            # holds one of lists[:one]
    # above this many postings the two-of rule gives a far smaller pool: rescoring 100k sections' vectors
    # took ~200 ms at 1.5M sections, twice an exact scan (single-insert p95 at 1M: 106 -> 40 ms with 1/32)
    small = max(4096, len(shard.vec) // 32)
    if sum(n for n, _, _ in lists[:one]) <= small:
        return held_enough(shard, [weight[h] for _, h, _ in lists[:one]], [s for _, _, s in lists[:one]], fifth)
    heaviest = np.maximum.accumulate([weight[h] for _, h, _ in lists])
    two = max(4, int(np.searchsorted(cum - heaviest, fifth)) + 1)            # holds two of lists[:two]
    if two > len(lists) or sum(n for n, _, _ in lists[:two]) > 2 * len(shard.vec):
        return None
    found, _, count, slots = _per_document(shard, [s for _, _, s in lists[:two]], [1.0] * two)
    slots = _sections(shard, slots, found[count >= 2])              # only common words: two or more
    return None if len(slots) > small else slots


def rarest_held(cum, fifth: float, floor: int = 4) -> int:
    """How many of the rarest terms (cumulative feature weights `cum`) a near-duplicate holds one of:
    those that weigh a fifth of the document, and at least `floor` (benchmarks/dedup_pool.py)."""
    return max(min(floor, len(cum)), int(np.searchsorted(cum, fifth)) + 1)


def held_enough(shard, weights: list[float], lists: list[np.ndarray], fifth: float) -> np.ndarray:
    """The slots of `lists` (postings of the document's terms, weights `weights`) whose document does
    not lack three fifths of the document's weight among these terms. (`rarest_held`'s floor can
    gather common words' long postings for a short memory, where most sections hold one of its
    words.) A near-duplicate's vector lacks less than a fifth of the feature mass, but counted over
    terms it can lack more: a misspelt word is another term sharing most of its n-grams (up to 0.44
    of the weight on 60k synthetic pairs, benchmarks/dedup_pool.py), hence three fifths. Counted per
    document, not per section: a document's terms may be spread over its sections."""
    total = sum(weights)
    if total < 3 * fifth or sum(len(x) for x in lists) <= 4096:   # nothing can lack that much, or few to rescore
        return unique(np.concatenate(lists))
    found, held, _, slots = _per_document(shard, lists, weights)
    return _sections(shard, slots, found[held > total - 3 * fifth])


def _per_document(shard, lists: list[np.ndarray], weights: list[float]):
    """The documents holding any of the lists' terms, the weight of those terms each holds and how
    many of them, and every slot of the lists: (documents, weights, counts, slots)."""
    slots = np.concatenate(lists)
    docs = shard.lex.doc.view[slots].astype(np.int64)
    pairs = unique(docs * len(lists) + np.repeat(np.arange(len(lists)), [len(x) for x in lists]))
    docs = pairs // len(lists)                                           # one (document, term) each,
    first = np.r_[True, docs[1:] != docs[:-1]]                          # sorted by document
    found, at = docs[first], np.cumsum(first) - 1
    held = np.bincount(at, np.asarray(weights, np.float64)[pairs % len(lists)], len(found))
    return found, held, np.bincount(at, minlength=len(found)), slots


def _sections(shard, slots: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """The distinct slots among `slots` whose document is one of `docs`."""
    wanted = np.zeros(shard.lex.doc_len.size, bool)
    wanted[docs] = True
    return unique(slots[wanted[shard.lex.doc.view[slots]]])


def _features(term: str) -> int:
    """About how many hashed features the word behind an index term gets (HashEmbedder)."""
    return 1 if _text.is_cjk(term) else 1 + 3 * len(term)


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
        self.written: dict[int, tuple[NodeRow, np.ndarray]] = {}     # (row, float16 vector)
        self.next_key = db.execute("SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'nodes'), 0), "
                                   "COALESCE((SELECT max(key) FROM nodes), 0)").fetchone()
        self.next_key = max(self.next_key) + 1
        self.redactions = 0
        self.indexed = False     # whether the indexes took the batch before its commit (flush_beside_indexing)

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
        """The batch's rows, held for flush_beside_indexing (a replacement flushes what precedes it)."""
        existing, seen, results = self._existing(preps), {}, []
        # every vector of the batch in float16 at once: as stored, and as the index keeps it
        half = np.concatenate([p.vectors for p in preps]).astype(np.float16) if preps else None
        starts = [0, *accumulate(len(p.nodes) for p in preps)]
        fresh = None
        for j, p in enumerate(preps):
            ttl = p.ttl if p.ttl is not None else self.e.settings.ttl_for(p.scope)
            expires = None if ttl is None else self.now + ttl
            base = dict(node_count=len(p.nodes), space=p.space, scope=p.scope, expires_at=expires)
            if p.replace is None:
                if (p.space, p.hash) in seen:
                    prior = seen[(p.space, p.hash)]
                    results.append(RememberResult(id=prior, document_id=prior, deduped=True, **base))
                    continue
                row = existing.get((p.space, p.hash))
                if row:
                    results.append(RememberResult(id=row[0], document_id=row[0], deduped=True, existing=memory_row(row), **base))
                    continue
                dup = None if p.force else semantic_duplicate(self.e, self.db, p, self.now)
                if dup:
                    results.append(RememberResult(id=dup[0].id, document_id=dup[0].id, duplicate=True,
                                                  existing=dup[0], similarity=dup[1], **base))
                    continue
            if p.replace is None and fresh is None:
                fresh = iter(new_ids(self.db, len(preps) - j))   # (duplicates' ids go unused)
            doc_id = p.replace or next(fresh)
            self._document(p, doc_id, expires, half[starts[j]:starts[j + 1]])
            seen[(p.space, p.hash)] = doc_id
            results.append(RememberResult(id=doc_id, document_id=doc_id, **base))
        return results

    def _document(self, p: Prepared, doc_id: str, expires: float | None, half: np.ndarray) -> None:
        meta = p.metadata_json
        if meta is None and p.metadata is not None:
            meta = json.dumps(p.metadata, ensure_ascii=False)
        row = (p.space, p.scope, p.project_name(self.e.project), self.e.session, p.kind, p.title, p.content,
               p.hash, p.importance, meta)
        if p.replace is not None:
            self.flush()          # the document may have been written earlier in this batch
            db = self.db
            if not db.execute("SELECT 1 FROM documents WHERE id = ?", (doc_id,)).fetchone():
                raise NotFound(f"replace={doc_id!r}: no such memory (it may have been forgotten or expired)")
            old = db.execute("SELECT n.key, d.space FROM nodes n JOIN documents d ON d.id = n.document_id "
                             "WHERE d.id = ?", (doc_id,)).fetchall()
            db.executemany("INSERT INTO changes (op, node_key, space) VALUES ('del', ?, ?)", old)
            db.execute("DELETE FROM nodes WHERE document_id = ?", (doc_id,))
            db.execute("UPDATE documents SET space=?, scope=?, project=?, session=?, kind=?, title=?, content=?, "
                       "content_hash=?, importance=?, metadata=?, updated_at=?, accessed_at=?, expires_at=? WHERE id=?",
                       (*row, self.now, self.now, expires, doc_id))
        else:
            self.docs.append((doc_id, *row, self.now, self.now, self.now, expires))
        for node, vec, blob in zip(p.nodes, half, encode_rows(half)):
            key = self.next_key
            self.next_key += 1
            self.nodes.append((key, doc_id, node.ord, node.parent_ord, node.depth, node.path, node.title,
                               node.stored_body, node.metadata_json, node.hash))
            self.vecs.append((key, blob))
            self.changes.append((key, p.space))
            if p.replace is None:     # (a replaced document keeps its tier, which only SQLite knows)
                self.written[key] = (NodeRow(key, doc_id, node.ord, len(p.nodes), node.title, node.body,
                                             self.e.session, self.now, p.importance, expires), vec)
        self.redactions += p.redactions

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

    def flush_beside_indexing(self, shards) -> int | None:
        """flush(), with a large batch's sections inserted by a second thread while the indexes take
        them here (`shards`: what Shards.sync would do with `written` after the commit). Returns the
        last change's seq, or None when it only flushed: a small batch, a replacement, changes the
        indexes have not seen, no JSON in this SQLite. If this raises or the commit fails, the
        caller unloads the indexes of the batch's spaces (`indexed`): they hold uncommitted rows."""
        db = self.db
        widths = {len(b) for _, b in self.vecs}
        if (len(self.nodes) < OVERLAP_MIN_NODES or len(self.written) != len(self.nodes) or len(widths) != 1
                or shards.checks.pending or not _json_inserts(db)
                or self.e.store.max_seq() != shards.seq):
            self.flush()
            return None
        docs, nodes, vecs, changes = self.docs, self.nodes, self.vecs, self.changes
        self.nodes, self.vecs, self.changes = [], [], []
        # documents (rows as _document makes them): created, updated and accessed (11-13) are `now`,
        # bound; importance (9) and expiry (14) pass through JSON if SQLite reads them back exactly,
        # else the documents are inserted here with binds
        encode = json_encoder().encode
        if docs and _exact_in_json(db, {d[9] for d in docs} | {d[14] for d in docs if d[14] is not None}):
            self.docs, docs = [], encode([d[:11] + d[14:] for d in docs])
        else:
            docs = None
        self.flush()                  # what is left: documents with binds (parents of the nodes), meta
        task = _INSERTER.submit(_insert_sections, db, docs, self.now, encode(nodes), encode([k for k, _ in vecs]),
                                b"".join(b for _, b in vecs), widths.pop(), encode(changes))
        self.indexed = True
        try:
            shards.take_own(changes, self.written)
        finally:
            task.finish()             # (the connection is the thread's until then)
        return task.result()

