"""MemoryEngine: remember / recall / forget / list over a SQLite store with derived indexes."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

import numpy as np

from . import _dreamed, _hits, _validate as v
from ._background import BackgroundMixin
from ._reembed import EmbeddingMixin
from ._removal import RemovalMixin
from ._gcpause import paused as gc_paused
from ._locking import locked
from ._expand import embed_new_words, expansion
from ._recall import Candidate, rank
from ._text import bulk_digests
from ._shards import Shards
from .lifecycle import LifecycleMixin
from .config import Settings, default_data_dir, default_project, default_session
from .embeddings import Embedder, get_embedder, installed_local_preset
from .embeddings.base import StandIn
from .config import env as _env
from .errors import EmbedderMismatch, InvalidArgument, NotFound, StorageError
from .models import Memory, MemoryList, Origin, RecallResult, RememberResult, Stats
from .store import DOC_COLS as _DOC_COLS
from .store import NODE_SELECT, Store
from .store import memory_row as _memory

if TYPE_CHECKING:
    from ._ingest import Prepared

_write_modules: tuple = ()
BULK_DIGESTS = 256       # remember_many's item from which content hashes take OpenSSL's SHA-256 (faster)


def _write_path():
    """(_ingest, _writer), imported by the first write: a process that only recalls (a new kernel's
    first `%recall`, an agent's search tool) never loads the Markdown parser, redaction or the batch
    writer (~5 ms of a ~95 ms cold open at 100k)."""
    global _write_modules
    if not _write_modules:
        from . import _ingest, _writer
        _write_modules = _ingest, _writer
    return _write_modules


class MemoryEngine(RemovalMixin, LifecycleMixin, BackgroundMixin, EmbeddingMixin):
    """Long-term memory over one data dir. Safe to open from several processes at once.

    >>> with MemoryEngine("/tmp/mem", project="demo") as mem:      # doctest: +SKIP
    ...     mem.remember("# Setup\\nUse conda env `ds`.")
    ...     print(mem.recall("which conda env?").block)
    """

    def __init__(self, data_dir: str | os.PathLike | None = None, *, embedder: Embedder | str | None = None,
                 project: str | None = None, session: str | None = None, read_only: bool = False,
                 settings: Settings | None = None, clock: Callable[[], float] | None = None):
        data_dir = v.path(data_dir, "data_dir") if data_dir is not None else None
        if settings is not None and not isinstance(settings, Settings):
            raise InvalidArgument("settings must be an ipy_memory.Settings (e.g. Settings().with_(dedup_threshold=0.9))")
        self._lock = threading.RLock()
        self.settings = settings or Settings()
        self.clock = v.clock(clock)
        self.read_only = v.flag(read_only, "read_only")
        self.project = v.name(project, "project") if project is not None else default_project()
        self.session = v.name(session, "session") if session is not None else default_session()
        self.data_dir = Path(data_dir if data_dir is not None else default_data_dir()).expanduser().resolve()
        self.store = Store(self.data_dir, read_only=self.read_only)
        try:
            self.embedder = self._open_embedder(embedder)
            self.shards = self._new_shards()
        except BaseException:
            self.store.close()
            raise
        self._closed = False
        self._next_purge = 0.0
        self._epoch = self._store_epoch()

    def _new_shards(self) -> Shards:
        # An HNSW graph only pays for a real model's vectors (see Settings.vector_index).
        ranks = self.embedder.semantic or self.settings.vector_weight_hash > 0
        graph = {"auto": self.embedder.semantic, "hnsw": ranks, "exact": False}[self.settings.vector_index]
        return Shards(self.store, self.embedder.dim, self.settings, self.data_dir / "index", graph=graph,
                      hot_tier=lambda: self._policy().names[0], clock=self.clock)

    def _store_epoch(self) -> int:
        return int(self.store.get_meta("epoch") or 0)

    def _check_epoch(self) -> None:
        """Another process re-embedded the store: this engine's model no longer matches its vectors."""
        if self._store_epoch() != self._epoch:
            recorded = self.store.get_meta("embedder")
            if recorded != self.embedder.name:
                raise EmbedderMismatch(f"{self.store.path} was re-embedded with {recorded!r} by another process; "
                                       f"this engine uses {self.embedder.name!r}: open a new MemoryEngine")
            self._epoch = self._store_epoch()

    def _open_embedder(self, embedder) -> Embedder:
        recorded = self.store.get_meta("embedder")
        if embedder == "recorded":          # the store's own, by name only (see StandIn)
            if recorded is not None:
                return StandIn(recorded, int(self.store.get_meta("dim")))
            embedder = None
        preset = embedder if isinstance(embedder, str) else None
        if embedder is None:
            # the store's own first: IPY_MEMORY_EMBED_PRESET picks the embedder of new stores
            preset = self.store.get_meta("embedder_preset") or _env("EMBED_PRESET") or "hash"
        emb = get_embedder(preset if embedder is None or preset else embedder)
        if recorded is None:
            if not self.read_only:
                with self.store.write() as db:
                    db.execute("INSERT OR REPLACE INTO meta VALUES ('embedder', ?), ('dim', ?)", (emb.name, str(emb.dim)))
                    if preset:
                        db.execute("INSERT OR REPLACE INTO meta VALUES ('embedder_preset', ?)", (preset,))
        elif recorded != emb.name:
            raise EmbedderMismatch(
                f"{self.store.path} was built with embedder {recorded!r} (dim {self.store.get_meta('dim')}), "
                f"not {emb.name!r} (dim {emb.dim}). Open it with the original embedder, or re-embed it: "
                f"MemoryEngine(data_dir, embedder=<old>).reembed(<new>)")
        return emb

    # ------------------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "MemoryEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @locked
    def close(self) -> None:
        if getattr(self, "_closed", True):
            return
        try:                # (whatever fails, e.g. a caller's clock, the rest is closed all the same)
            self._flush_accesses()
        finally:
            try:
                self._close_background()
            finally:
                self._closed = True
                try:
                    self.shards.stop_builds()
                    self.shards.save()
                finally:
                    self.embedder.close()
                    self.store.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("this MemoryEngine is closed: open a new one")

    def __repr__(self) -> str:
        return f"<MemoryEngine {self.data_dir} project={self.project!r} embedder={self.embedder.name}>"

    # ------------------------------------------------------------------------------ spaces
    def _space(self, scope: str, project: str | None = None, session: str | None = None) -> str:
        if scope == "global":
            return "global"
        if scope == "session":
            return "session:" + (session or self.session)
        return "project:" + (project or self.project)

    def _spaces(self, scope: str, project: str | None, session: str | None) -> list[str]:
        parts = v.scopes(scope)
        v.scoped_names(parts, project, session)
        return [self._space(s, project, session) for s in parts]

    # ------------------------------------------------------------------------------ writing
    def remember(self, content: str, *, title: str | None = None, scope: str | None = None, project: str | None = None,
                 importance: float | None = None, ttl: float | None = None, force: bool = False,
                 replace: str | None = None, metadata: dict | None = None) -> RememberResult:
        """Store Markdown `content` (headings become sections). Returns what was done; see RememberResult.

        None is "not given": a new memory gets scope "project" (this engine's project), importance
        0.6, the scope's TTL and no metadata. `replace=ID` swaps that memory's content and keeps its
        id and whatever is not given: scope, project (or session), importance, metadata, and its
        expiry (ttl=0 restarts the scope's TTL; a new scope gets its TTL from now). The same text
        again is `deduped` and makes the memory live at least as long as the new copy would."""
        item = dict(content=content, title=title, scope=scope, project=project, importance=importance,
                    ttl=ttl, force=force, replace=replace, metadata=metadata)
        return self._write([self._prepare(item, _write_path()[0].prepare)])[0]

    def remember_many(self, items: Iterable[str | dict]) -> list[RememberResult]:
        """Store many memories in one transaction (each a str, or a dict of remember()'s arguments)."""
        if isinstance(items, (str, bytes, dict)) or not hasattr(items, "__iter__"):
            raise InvalidArgument("remember_many takes a list of str or dicts, e.g. [{'content': '...'}]")
        prepare = _write_path()[0].prepare
        with gc_paused():       # (the batch makes no reference cycles: the collector would find nothing)
            preps = []       # (a caller's generator that raises: InvalidArgument, before anything is written)
            for i, item in enumerate(items if type(items) in (list, tuple) else v.called_back_items(items, "remember_many(items)")):
                if i == BULK_DIGESTS:
                    bulk_digests()
                if isinstance(item, str):
                    item = {"content": item}
                if not isinstance(item, dict):
                    raise InvalidArgument(f"item {i} must be a str or a dict with 'content', not {type(item).__name__}")
                try:
                    preps.append(self._prepare(item, prepare))
                except InvalidArgument as exc:
                    raise InvalidArgument(f"item {i}: {exc}") from None
            results = self._write(preps) if preps else []
            del preps         # (freed before the collector is back: its first pass need not visit them)
        return results

    @locked
    def remember_exchange(self, session_id: str, messages: list[dict], *, scope: str = "project",
                          project: str | None = None, importance: float = 0.6, ttl: float | None = None,
                          metadata: dict | None = None, after_question: bool = False) -> RememberResult:
        """Store a chat exchange as one document with a section per message (OpenAI or Anthropic shapes).
        `after_question`: the messages continue a conversation whose last message, stored before,
        asked a question, so a bare "yes" or "no" opening them is an answer and is kept."""
        prep = _write_path()[0].prepare_exchange(session_id, messages, scope=scope, project=project, importance=importance,
                                ttl=ttl, metadata=metadata, settings=self.settings, after_question=after_question)
        prep.space = self._space(prep.scope, prep.project)
        return self._write([prep])[0]

    def _prepare(self, item: dict, prepare: Callable) -> Prepared:
        prep = prepare(item, self.settings)
        if prep.scope is not None:          # (a replacement's space may be its memory's: _writer)
            prep.space = self._space(prep.scope, prep.project)
        return prep

    @locked
    def _write(self, preps: list[Prepared]) -> list[RememberResult]:
        self._check_open()
        if self.read_only:
            from .errors import ReadOnlyError
            raise ReadOnlyError(f"{self.store.path} is open read-only: open a MemoryEngine without read_only=True to write")
        self._flush_accesses()
        now = self.clock()
        context = self.settings.embed_context_chars if self.embedder.semantic else 0
        self._check_epoch()
        writing = _write_path()[1]
        inline = writing.embeds_in_transaction(self.embedder, preps)
        if not inline:
            vecs = self._embed_texts([t for p in preps for t in p.embedding_texts(context)])   # a failure writes nothing
            embed_new_words(self, (n.body for p in preps for n in p.nodes))   # for query expansion
            for p, v in zip(preps, np.split(vecs, np.cumsum([len(p.nodes) for p in preps])[:-1])):
                p.vectors = v
        self.shards.sync()
        for p in preps:  # load the spaces' indexes outside the write lock (dedup searches them)
            if not (p.force or p.replace):
                self.shards.get(p.space)
        writer = None
        try:
            with self.store.write(bulk=inline) as db:
                self._check_epoch()      # again under the lock: a re-embed may have committed while we embedded
                writer = writing.BatchWriter(self, db, now)
                try:
                    results = writer.write(preps)
                    if inline:
                        writer.insert_documents(self.shards)
                        writer.add_sections(self._embed_texts([t for p, _, _ in writer.later
                                                               for t in p.embedding_texts(context)]))
                    self._flush_embed_cache(db)
                    seq = writer.flush_beside_indexing(self.shards)
                except BaseException:
                    writer.settle(check=False)      # the second thread is done with the connection: then roll back
                    raise
        except BaseException:
            if writer is not None and writer.indexed:      # they hold rows that were never committed
                self.shards.unload({p.space for p in preps})
            raise
        if seq is None:
            self.shards.sync(force=True, own=writer.written)
        else:
            self.shards.seq = seq
        self._maybe_purge(now)
        return results

    # ------------------------------------------------------------------------------ reading
    @locked
    def recall(self, query: str, *, scope: str = "project+global", project: str | None = None,
               session: str | None = None, limit: int | None = None, max_tokens: int | None = None,
               path: str | None = None, min_score: float | None = None) -> RecallResult:
        """Find the memories that best match `query`: hybrid lexical + vector ranking, best first."""
        self._check_open()
        query = v.text(query, "query", max_chars=10_000)
        spaces = self._spaces(scope, v.name(project, "project") if project is not None else None,
                              v.name(session, "session") if session is not None else None)
        if max_tokens is not None:
            max_tokens = v.integer(max_tokens, "max_tokens", 1, 100_000)
        limit = v.integer(limit, "limit", 1, 50) if limit is not None else (50 if max_tokens else 10)
        path = v.optional_text(path, "path")
        min_score = v.number(min_score, "min_score", 0.0, 10.0) if min_score is not None else None
        self._check_epoch()
        self.shards.sync()
        now = self.clock()
        allowed = _hits.keys_under(self.store, spaces, path, now) if path is not None else None
        result = _hits.budget(query, _hits.collect(
            lambda k: self._rank(spaces, query, now, k, allowed) if allowed is None or len(allowed) else [],
            self._node_rows, self.store, 50 if max_tokens else limit, min_score), limit, max_tokens, self.settings)
        # the spaces it searched, not the defaults of whichever engine stands in for this one later
        result.origin = Origin(self, scope=scope, project=project if project is not None else self.project,
                               session=session if session is not None else self.session, limit=limit,
                               max_tokens=max_tokens, path=path, min_score=min_score)
        self._on_recall(result.hits)
        return result

    def _rank(self, spaces: list[str], query: str, now: float, pool: int, allowed=None) -> list[Candidate]:
        """rank() over the spaces' shards. The background checks of snapshots loaded for it run
        beside the ranking and are settled before it answers: after a damaged one, it ranks again
        on what SQLite rebuilt."""
        self.shards.defer_checks = True
        try:
            shards = [self.shards.get(s) for s in spaces]
            cands = rank(shards, query, self.embedder, self.settings, now, pool, self._embed_query,
                         lambda q: expansion(self, shards, q), allowed)
        except Exception:
            if self.shards.settle():        # it failed on a damaged snapshot's values
                return self._rank(spaces, query, now, pool, allowed)
            raise
        finally:
            self.shards.defer_checks = False
        return self._rank(spaces, query, now, pool, allowed) if self.shards.settle(answer=True) else cands

    def _node_rows(self, keys: list[int]) -> dict[int, tuple]:
        if not keys:
            return {}
        marks = ",".join("?" * len(keys))
        return {r[0]: r for r in self.store.query(NODE_SELECT + f" WHERE n.key IN ({marks})", keys)}

    @locked
    def get(self, id: str) -> Memory:
        """One memory by id ('m-…'), or the memory holding a section ('m-…#2'); NotFound if absent or expired."""
        self._check_open()
        doc_id, ord_ = v.memory_id(id)
        self._flush_accesses()
        with self.store.read() as db:
            rows = db.execute(f"SELECT {_DOC_COLS} FROM documents WHERE id = ? AND "
                              "(expires_at IS NULL OR expires_at > ?)", (doc_id, self.clock())).fetchall()
            section = ord_ is None or _dreamed.has_section(db, doc_id, ord_)
        if rows and not section:
            raise NotFound(f"no section {id!r}: memory {doc_id} has no section #{ord_} (or it was forgotten)")
        if not rows:
            raise NotFound(f"no memory {id!r}")
        return _memory(rows[0])

    @locked
    def list_memories(self, *, project: str | None = None, scope: str | None = None, limit: int = 50,
                      offset: int = 0) -> MemoryList:
        """A page of memories, newest first; `scope` as in recall (default: session+project+global)."""
        self._check_open()
        self._flush_accesses()
        project = v.name(project, "project") if project is not None else None
        limit = v.integer(limit, "limit", 1, 200)
        offset = v.integer(offset, "offset", 0, 10**12)
        spaces = self._spaces(scope if scope is not None else ("project" if project else "session+project+global"),
                              project, None)
        marks = ",".join("?" * len(spaces))
        where = f"space IN ({marks}) AND (expires_at IS NULL OR expires_at > ?)"
        params = (*spaces, self.clock())
        total = self.store.query(f"SELECT count(*) FROM documents WHERE {where}", params)[0][0]
        rows = self.store.query(f"SELECT {_DOC_COLS} FROM documents WHERE {where} "
                                "ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?", (*params, limit, offset))
        return MemoryList([_memory(r) for r in rows], total=total, offset=offset)

    @locked
    def stats(self) -> Stats:
        """Counts, sizes, embedder and per-tier / per-space breakdown."""
        self._check_open()
        self._flush_accesses()
        q = self.store.query
        files = [self.store.path, Path(str(self.store.path) + "-wal")]
        index_dir = self.data_dir / "index"
        files += list(index_dir.glob("*")) if index_dir.exists() else []
        tier_report = self.tier_stats()
        spaces = {s: {"documents": d, "nodes": n} for s, d, n in q(
            "SELECT space, count(DISTINCT d.id), count(n.key) FROM documents d LEFT JOIN nodes n "
            "ON n.document_id = d.id GROUP BY space")}
        return Stats({
            "db_path": str(self.store.path),
            "data_dir": str(self.data_dir),
            "embedder": self.embedder.name,
            "embedder_preset": self.store.get_meta("embedder_preset"),
            # the local-model extra is never switched on behind the user's back (a store records its
            # model); say when it is there to choose
            "local_preset_installed": installed_local_preset(),
            "dim": self.embedder.dim,
            "project": self.project,
            "session": self.session,
            "documents": q("SELECT count(*) FROM documents")[0][0],
            "nodes": q("SELECT count(*) FROM nodes")[0][0],
            "vectors": q("SELECT count(*) FROM vectors")[0][0],
            "expired": q("SELECT count(*) FROM documents WHERE expires_at <= ?", (self.clock(),))[0][0],
            "pending": self.background_stats()["pending"],
            "redactions": int(self.store.get_meta("redactions") or 0),
            "size_bytes": sum(f.stat().st_size for f in files if f.exists()),
            "read_only": self.read_only,
            "tiers": tier_report["tiers"],
            "last_rotation": tier_report["last_rotation"],
            "spaces": spaces,
            "indexes": self.shards.counts(),
        }, origin=Origin(self))
