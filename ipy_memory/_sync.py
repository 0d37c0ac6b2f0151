"""Keeping a `Shards`' loaded indexes in step with the change log (the mixin of `_shards.Shards`).

`sync` reads the changes committed after the last seq it applied and applies them to the spaces
that are loaded; snapshots replay their part of the log through the same helpers. Its position
(that seq, and the `Store.data_version` it has seen) moves only once a batch is wholly applied:
one interrupted part-way (Ctrl-C in a recall, a failed read) unloads the spaces it touched, which
load again from their snapshot or SQLite at their next use, and the next sync reads the batch
again (applying a change twice is harmless). An engine's own commit changes that version too, so
a write interrupted between its commit and its sync is applied by the next one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .lexical import LexicalShard
from .store import decode_half
from .vectors import VectorShard

if TYPE_CHECKING:
    from ._shards import Shard

VECTOR_ROWS = ("SELECT v.node_key, v.vec, d.tier FROM vectors v JOIN nodes n ON n.key = v.node_key "
               "JOIN documents d ON d.id = n.document_id WHERE ")


class SyncMixin:
    """Shards' syncing: it uses their store, loaded spaces, seq and `_rows`."""

    def sync(self, force: bool = False, own: dict | None = None) -> None:
        """Apply changes other engines (or this one) committed since the last sync. `own`: the nodes
        this engine has just written, {key: (NodeRow, vector)}: when they are all that changed, the
        indexes take them as they are instead of reading them back (8% of a bulk insert's time was
        that read)."""
        if self.checks.busy:          # left by a recall, or a call that failed
            self.settle()
        version = self.store.data_version()
        if not force and version == self._version:
            return
        floor = self.store.get_meta("changes_floor")
        if floor is not None and int(floor) > self.seq:
            # compaction trimmed changes this engine never applied (the floor is the last seq trimmed,
            # self.seq the last applied): reload what it holds
            self.loaded.clear()
            self.seq, self._version = self.store.max_seq(), version
            return
        changes = self.store.query("SELECT seq, op, node_key, space FROM changes WHERE seq > ? ORDER BY seq", (self.seq,))
        try:
            self._apply(changes, own)
        except BaseException:
            self.unload({space for *_, space in changes})     # half-applied: they load again at their next use
            raise
        if changes:
            self.seq = changes[-1][0]
        self._version = version

    def _apply(self, changes: list[tuple[int, str, int, str]], own: dict | None) -> None:
        """The (seq, op, key, space) changes, applied to the spaces that are loaded."""
        if own and changes and all(op == "add" and key in own for _, op, key, _ in changes):
            self._apply_own([(key, space) for _, _, key, space in changes], own)
            return
        adds: dict[str, list[int]] = {}
        expiry: dict[str, list[int]] = {}
        tiers: dict[str, list[int]] = {}
        for _, op, key, space in changes:
            shard = self.loaded.get(space)
            if shard is None:
                continue
            if op == "del":
                shard.lex.remove(key)
                if shard.vec_loaded:
                    shard.vec.remove(key)
                shard.lex_dirty = shard.vec_dirty = True
            elif op == "add":
                adds.setdefault(space, []).append(key)
            elif op == "expiry":
                expiry.setdefault(space, []).append(key)
            elif op == "tier":
                tiers.setdefault(space, []).append(key)
        for space, keys in adds.items():
            self._apply_adds(self.loaded[space], keys)
        for space, keys in expiry.items():
            self._apply_expiry(self.loaded[space].lex, keys)
        for space, keys in tiers.items():
            shard = self.loaded[space]
            if shard.vec_loaded:
                self._apply_tiers(shard.vec, keys)
                shard.vec_dirty = True

    def _apply_tiers(self, vec: VectorShard, keys: list[int]) -> None:
        hot = self.hot_tier()
        for i in range(0, len(keys), 5000):
            chunk = keys[i:i + 5000]
            for key, tier in self.store.query(
                    f"SELECT n.key, d.tier FROM nodes n JOIN documents d ON d.id = n.document_id "
                    f"WHERE n.key IN ({','.join('?' * len(chunk))})", chunk):
                vec.set_cold(key, tier != hot)

    def _add_vectors(self, vec: VectorShard, keys: list[int], build: bool = True) -> None:
        for i in range(0, len(keys), 5000):
            chunk = keys[i:i + 5000]
            rows = self.store.query(VECTOR_ROWS + f"v.node_key IN ({','.join('?' * len(chunk))})", chunk)
            self._add_vector_rows(vec, rows, build)

    def _add_vector_rows(self, vec: VectorShard, rows, build: bool) -> None:
        """Rows of VECTOR_ROWS: documents outside the hottest tier keep int8 vectors in memory."""
        hot = self.hot_tier()
        vec.add([r[0] for r in rows], decode_half([r[1] for r in rows], self.dim),
                cold=[r[2] != hot for r in rows], build=build)

    def _apply_adds(self, shard: Shard, keys: list[int]) -> None:
        for i in range(0, len(keys), 5000):
            shard.lex.add(self._rows(f"n.key IN ({','.join('?' * len(keys[i:i + 5000]))})", keys[i:i + 5000]))
        if shard.vec_loaded:
            self._add_vectors(shard.vec, keys)
        shard.lex_dirty = shard.vec_dirty = True

    def take_own(self, added: list[tuple[int, str]], own: dict) -> None:
        """The (key, space) adds this engine is writing, from `own`, before their commit: the caller
        has made sure nothing else changed (BatchWriter.flush_beside_indexing) and unloads the
        spaces if the commit fails."""
        self._apply_own(added, own)

    def unload(self, spaces) -> None:
        """Forget these spaces' in-memory indexes (not their files): the next use loads them again."""
        for space in spaces:
            self.loaded.pop(space, None)

    def _apply_own(self, added: list[tuple[int, str]], own: dict) -> None:
        """Adds this engine wrote and nothing else did meanwhile: the rows `_apply_adds` would read
        back, in the same order (a batch's keys ascend with its documents and their sections)."""
        by_space: dict[str, list[int]] = {}
        for key, space in added:
            if space in self.loaded:
                by_space.setdefault(space, []).append(key)
        cold = self.hot_tier() != "hot"             # a new document is in tier 'hot'
        for space, keys in by_space.items():
            shard = self.loaded[space]
            keys.sort()
            shard.lex.add([own[k][0] for k in keys])
            if shard.vec_loaded:
                vecs = own.vectors(keys) if hasattr(own, "vectors") else np.stack([own[k][1] for k in keys])
                shard.vec.add(keys, vecs, cold=[cold] * len(keys))
            shard.lex_dirty = shard.vec_dirty = True

    def _apply_expiry(self, lex: LexicalShard, keys: list[int]) -> None:
        for i in range(0, len(keys), 5000):
            chunk = keys[i:i + 5000]
            for key, exp in self.store.query(
                    f"SELECT n.key, d.expires_at FROM nodes n JOIN documents d ON d.id = n.document_id "
                    f"WHERE n.key IN ({','.join('?' * len(chunk))})", chunk):
                lex.set_expiry(key, exp)
