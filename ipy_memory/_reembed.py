"""Changing the embedding model of a store, and the embedding cache.

``reembed(new)`` embeds every node with the new model into a staging table, batch by batch (each
batch its own transaction, so an interrupted run resumes where it stopped), then swaps the staged
vectors in with one transaction, which first stages what other kernels stored meanwhile. Until that
swap, recall keeps using the old vectors.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from . import _validate as v
from .embeddings import Embedder, get_embedder
from ._digests import sha256
from ._locking import locked
from .errors import InvalidArgument
from .store import decode_vecs, encode_vec

_STAGING = "CREATE TABLE IF NOT EXISTS vectors_next (node_key INTEGER PRIMARY KEY, vec BLOB NOT NULL)"
_STAGE = "INSERT OR REPLACE INTO vectors_next VALUES (?, ?)"
_SWAP_TRIES = 3     # times the swap lets go of the lock to stage late nodes before staging them under it


def _text_hash(text: str) -> str:
    return sha256(text.encode("utf-8")).hexdigest()[:32]


def _swap(db, new: Embedder, preset: str | None) -> int:
    """In the transaction that checked nothing is left to stage: the staged vectors replace the
    store's, and `new` becomes its embedder. Returns the new epoch."""
    db.execute("DELETE FROM vectors_next WHERE node_key NOT IN (SELECT key FROM nodes)")
    db.execute("DELETE FROM vectors")
    db.execute("INSERT INTO vectors SELECT node_key, vec FROM vectors_next")
    db.execute("DELETE FROM vectors_next")
    db.execute("DELETE FROM meta WHERE key = 'reembed_target'")
    db.execute("INSERT OR REPLACE INTO meta VALUES ('embedder', ?), ('dim', ?)", (new.name, str(new.dim)))
    if preset:
        db.execute("INSERT OR REPLACE INTO meta VALUES ('embedder_preset', ?)", (preset,))
    else:
        db.execute("DELETE FROM meta WHERE key = 'embedder_preset'")
    epoch = int(db.execute("SELECT COALESCE((SELECT value FROM meta WHERE key = 'epoch'), 0)").fetchone()[0]) + 1
    db.execute("INSERT OR REPLACE INTO meta VALUES ('epoch', ?)", (str(epoch),))
    return epoch


def _progress(total: int, enabled: bool, desc: str):
    if enabled:
        try:
            from tqdm.auto import tqdm  # notebook-aware when ipywidgets is there
            return tqdm(total=total, desc=desc, unit="node")
        except ImportError:
            pass

    class _Quiet:
        def update(self, n):
            pass

        def close(self):
            pass
    return _Quiet()


class EmbeddingMixin:
    """Embedding with a cache for model embedders, and re-embedding a whole store."""

    _query_cache: OrderedDict

    def _embed_texts(self, texts: list[str]) -> np.ndarray:
        """Embed stored texts; real models go through the (model, text hash) cache in SQLite."""
        emb = self.embedder
        if not emb.semantic or not texts:
            return emb.embed(texts)
        hashes = [_text_hash(t) for t in texts]
        out = np.zeros((len(texts), emb.dim), np.float32)
        found: dict[str, np.ndarray] = {}
        uniq = list(dict.fromkeys(hashes))
        for i in range(0, len(uniq), 500):
            chunk = uniq[i:i + 500]
            rows = self.store.query(f"SELECT hash, vec FROM embed_cache WHERE model = ? AND hash IN "
                                    f"({','.join('?' * len(chunk))})", (emb.name, *chunk))
            found.update((h, decode_vecs([b], emb.dim)[0]) for h, b in rows)
        missing = [i for i, h in enumerate(hashes) if h not in found]
        if missing:
            fresh = emb.embed([texts[i] for i in missing])
            for i, vec in zip(missing, fresh):
                found[hashes[i]] = vec
            pending = self.__dict__.setdefault("_pending_cache", [])   # a recall's words wait for the next write
            pending.extend((emb.name, hashes[i], encode_vec(vec)) for i, vec in zip(missing, fresh))
        for i, h in enumerate(hashes):
            out[i] = found[h]
        return out

    def _flush_embed_cache(self, db) -> None:
        """Inside the write transaction: keep what was just embedded."""
        rows = getattr(self, "_pending_cache", None)
        if rows:
            db.executemany("INSERT OR IGNORE INTO embed_cache VALUES (?, ?, ?)", rows)
            self._pending_cache = []

    def _embed_query(self, query: str) -> np.ndarray:
        cache = self.__dict__.setdefault("_query_cache", OrderedDict())
        vec = cache.get(query)
        if vec is None:
            vec = cache[query] = self.embedder.embed_query(query)
            if len(cache) > 256:
                cache.popitem(last=False)
        return vec

    @locked
    def reembed(self, embedder: Embedder | str, *, batch_size: int = 256, progress: bool = True,
                force: bool = False) -> dict:
        """Re-embed every node with `embedder` and switch the store to it (resumable, atomic swap).

        `force=True` re-embeds with the store's own model, e.g. so that memories stored before
        sections were embedded with their neighbours' text (`Settings.embed_context_chars`) get it."""
        self._check_open()
        new = get_embedder(embedder)
        batch_size = v.integer(batch_size, "batch_size", 1, 100_000)
        force = v.flag(force, "force")
        if new.name == self.embedder.name and not force:
            raise InvalidArgument(f"the store already uses {new.name!r} (force=True re-embeds with it anyway)")
        with self.store.write() as db:
            db.execute(_STAGING)
            target = db.execute("SELECT value FROM meta WHERE key = 'reembed_target'").fetchone()
            if not target or target[0] != new.name:      # staging belongs to another target: start over
                db.execute("DELETE FROM vectors_next")
                db.execute("INSERT OR REPLACE INTO meta VALUES ('reembed_target', ?)", (new.name,))
        # a node's neighbours in its document (a single-section memory has none: its body is NULL)
        todo_sql = ("SELECT n.key, n.path, COALESCE(n.body, d.content), n.title, "
                    "(SELECT m.body FROM nodes m WHERE m.document_id = n.document_id AND m.ord = n.ord - 1), "
                    "(SELECT m.body FROM nodes m WHERE m.document_id = n.document_id AND m.ord = n.ord + 1) "
                    "FROM nodes n JOIN documents d ON d.id = n.document_id "
                    "WHERE n.key NOT IN (SELECT node_key FROM vectors_next) ORDER BY n.key LIMIT ?")
        from ._ingest import embedding_text     # (the write path's module: loaded by the first write)
        context = self.settings.embed_context_chars if new.semantic else 0
        total = self.store.query("SELECT count(*) FROM nodes")[0][0]
        done = self.store.query("SELECT count(*) FROM vectors_next")[0][0]
        bar = _progress(total, progress, f"re-embedding with {new.name}")
        bar.update(done)

        def embedded(rows) -> list[tuple[int, bytes]]:
            vecs = new.embed([embedding_text(p, b, t, pb, nb, context) for _, p, b, t, pb, nb in rows])
            bar.update(len(rows))
            return [(r[0], encode_vec(x)) for r, x in zip(rows, vecs)]

        try:
            for tries_left in reversed(range(_SWAP_TRIES)):
                while rows := self.store.query(todo_sql, (batch_size,)):
                    staged = embedded(rows)
                    with self.store.write() as db:
                        db.executemany(_STAGE, staged)
                with self.store.write() as db:        # the swap: old vectors served until this commits
                    # nodes another kernel stored after the last batch was read would lose their vectors:
                    # staged first, as above (this transaction ends unused), or at the last try here
                    if tries_left and db.execute(todo_sql, (1,)).fetchone():
                        continue
                    while rows := db.execute(todo_sql, (batch_size,)).fetchall():
                        db.executemany(_STAGE, embedded(rows))
                    epoch = _swap(db, new, embedder if isinstance(embedder, str) else None)
                break
        finally:
            bar.close()
        old = self.embedder
        self.embedder = new
        for pattern in ("*.usearch", "*.vec.npz"):     # the old model's vectors (snapshots also check the epoch)
            for f in (self.data_dir / "index").glob(pattern):
                f.unlink(missing_ok=True)
        self.shards = self._new_shards()
        self._epoch = epoch
        self.__dict__.pop("_query_cache", None)
        old.close()
        return {"embedder": new.name, "dim": new.dim, "nodes": total}
