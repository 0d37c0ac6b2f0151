"""Recall hits as accesses (accessed_at, access_count, warming the tier), written in few short
best-effort transactions: a recall must never fail or stall because the store is busy.

Part of MemoryEngine (through LifecycleMixin, whose rotation reads what this writes).
"""

from __future__ import annotations

import math
import sqlite3

from ._locking import locked
from ._log import log
from .errors import InvalidArgument


class AccessMixin:
    access_flush_interval: float = 5.0  # seconds: recall hits within it are written together

    def _best_effort_write(self, write, what: str):
        """`write(db)` in its own short transaction, or nothing (logged) if another writer holds the
        database, a transaction is open or the store is read-only. Never raises into a recall."""
        if self.read_only or getattr(self, "_closed", True):
            return None
        db = self.store.db
        with self.store.lock:
            if db.in_transaction:        # never commit someone else's transaction
                return None
            try:
                db.execute("PRAGMA busy_timeout = 100")   # another writer: skip, don't stall recall
                db.execute("BEGIN IMMEDIATE")
                try:
                    out = write(db)
                    db.execute("COMMIT")
                    return out
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
            except (sqlite3.Error, InvalidArgument) as exc:
                log.debug("%s skipped: %s", what, exc)
                return None
            finally:
                db.execute(f"PRAGMA busy_timeout = {self.store.busy_ms}")

    @locked
    def _on_recall(self, hits) -> None:
        """A recall hit is an access: it bumps accessed_at / access_count and warms the tier.

        Recorded here and written by `_flush_accesses`: at once when none was written in the last
        `access_flush_interval` seconds, else with the next write of this engine, the next read of
        that state (rotate, tier_stats, stats, get, list_memories, dream, compact, backup) or close:
        a burst of recalls costs one short transaction, not one each (0.2-0.3 ms of a 2 ms recall
        at 100k memories, and the store's write lock on every call). Best effort: a failed write
        keeps them pending; a process that dies unclosed loses at most the last interval's."""
        if self.read_only or getattr(self, "_closed", True):
            return
        if self.auto_rotate:
            self.maybe_rotate(background=True)
        if self.__dict__.get("_pending_cache"):     # vectors a recall computed (query expansion's words)
            self._best_effort_write(self._flush_embed_cache, "saving word vectors")
        if not hits:
            return
        now = self.clock()
        pending = self.__dict__.setdefault("_accesses", {})      # document id -> (last access, count)
        for doc_id in dict.fromkeys(h.document_id for h in hits):
            pending[doc_id] = (now, pending.get(doc_id, (now, 0))[1] + 1)
        last = self.__dict__.get("_accesses_written", -math.inf)
        if not last <= now < last + self.access_flush_interval:    # (a clock that ran back writes too)
            self._flush_accesses()

    def _flush_accesses(self) -> None:
        """Write the accesses `_on_recall` recorded, in one best-effort transaction."""
        pending = self.__dict__.get("_accesses")
        if not pending or self.read_only or getattr(self, "_closed", True):
            return
        hot = self._policy().names[0]
        batch = list(pending.items())

        def track(db) -> int:
            # warming documents up changes their vectors' precision: tell every engine
            warmed = 0
            for i in range(0, len(batch), 500):
                ids = [doc_id for doc_id, _ in batch[i:i + 500]]
                warmed += db.execute("INSERT INTO changes (op, node_key, space) SELECT 'tier', n.key, d.space FROM "
                                     "nodes n JOIN documents d ON d.id = n.document_id WHERE d.id IN "
                                     f"({','.join('?' * len(ids))}) AND d.tier != ?", (*ids, hot)).rowcount
            db.executemany("UPDATE documents SET accessed_at = ?, access_count = access_count + ?, tier = ? "
                           "WHERE id = ?", [(at, n, hot, doc_id) for doc_id, (at, n) in batch])
            return warmed

        warmed = self._best_effort_write(track, "access tracking")
        if warmed is None:
            return                          # another writer held the store: kept for the next try
        self._accesses, self._accesses_written = {}, self.clock()
        if warmed:
            self.shards.sync(force=True)    # apply our own 'tier' entries (own commits leave data_version alone)
