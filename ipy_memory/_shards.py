"""Per-space derived indexes (lexical + vector), loaded lazily and kept in sync with SQLite.

Each engine reads the change log after the last seq it applied, so a memory stored by another
kernel is searchable on this kernel's next call; applying a change twice is harmless (adds skip
known keys, removes skip unknown ones), which keeps loading and syncing simple.

On close, large spaces are snapshotted beside the database (lexical postings and their scoring
Structure as `.lex.npz`, vectors as `.vec.npz`, HNSW graphs as `.usearch`), the first two tagged
with the store id, the space and the change-log seq they reflect. Reading 100k vectors row by row from SQLite
takes about a second, the snapshot a tenth of that; it costs a second copy of the vectors on disk.
A snapshot is only a cache: a missing, stale, damaged or foreign one is ignored and the space is
rebuilt from SQLite, so opening never fails because of an index file. Vectors are loaded on first use: with
the default hashing embedder only duplicate checks need them, not recall.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ._digests import sha1
from ._log import log
from ._npz import load_npz, remove_stale_temps, replace_npz
from ._snapchecks import DamagedSnapshot, LaterChecks
from ._sync import VECTOR_ROWS, SyncMixin
from .config import Settings
from .lexical import LexicalShard, NodeRow
from .store import NODE_SELECT, Store, decode_vecs
from .vectors import VectorShard


SNAPSHOT_MIN_NODES = 256       # rebuilding from SQLite re-tokenises ~5k nodes/s; a snapshot loads in ms
_DAMAGED = (OSError, ValueError, KeyError, EOFError)        # _snapchecks.DamagedSnapshot is a ValueError
_SUFFIXES = (".lex.npz", ".vec.npz", ".usearch", ".usearch.orphans.npy")


def node_row(r) -> NodeRow:
    return NodeRow(key=r[0], document_id=r[1], ord=r[2], doc_nodes=r[3], title=r[5], body=r[6],
                   session=r[10] or "", created_at=r[11], importance=r[12], expires_at=r[13])


class Shard:
    def __init__(self, owner: "Shards", space: str, lex: LexicalShard):
        self.owner, self.space, self.lex = owner, space, lex
        self._vec: VectorShard | None = None
        self.lex_dirty = self.vec_dirty = False

    @property
    def vec(self) -> VectorShard:
        if self._vec is None:
            self._vec, built = self.owner._load_vectors(self.space)
            self.vec_dirty = self.vec_dirty or built
            if not self.owner.defer_checks and self.owner.settle():
                return self.vec                      # its snapshot was damaged: from SQLite now
        return self._vec

    @property
    def vec_loaded(self) -> bool:
        return self._vec is not None


class Shards(SyncMixin):
    def __init__(self, store: Store, dim: int, settings: Settings, index_dir: Path, *, graph: bool = True,
                 hot_tier=lambda: "hot", clock=time.time):
        self.store, self.dim, self.s, self.dir, self.graph = store, dim, settings, index_dir, graph
        self.clock = clock               # the engine's: a snapshot's lexical Structure is made for its now
        self.hot_tier = hot_tier         # documents in any other tier keep int8 vectors in memory
        self.loaded: dict[str, Shard] = {}
        # the snapshot members whose CRC is checked in the background (_npz.load_npz); a recall sets
        # defer_checks, ranks beside the checks and settles them before it answers
        self.checks, self.defer_checks = LaterChecks(), False
        self.seq = store.max_seq()
        self._version = store.data_version()
        self.store_id = store.get_meta("store_id") or ""
        self.epoch = self._epoch()       # bumped by reembed(): vectors of another epoch are another model's

    def _epoch(self) -> int:
        return int(self.store.get_meta("epoch") or 0)

    def _file(self, space: str, suffix: str) -> Path:
        return self.dir / (sha1(space.encode()).hexdigest()[:20] + suffix)

    def graph_path(self, space: str) -> Path:
        return self._file(space, ".usearch")

    def snapshot_path(self, space: str) -> Path:
        return self._file(space, ".lex.npz")

    def vectors_path(self, space: str) -> Path:
        return self._file(space, ".vec.npz")

    def files(self, space: str) -> list[Path]:
        return [self._file(space, suffix) for suffix in _SUFFIXES]

    def stop_builds(self) -> None:
        """Stop index work still running on other threads (a closing engine does not wait for it)."""
        for shard in self.loaded.values():
            if shard.vec_loaded:
                shard.vec.stop_column_build()

    def drop(self, space: str) -> None:
        """Forget a space's in-memory indexes and its snapshot files (they are rebuilt on next use)."""
        self.loaded.pop(space, None)
        for path in self.files(space):
            path.unlink(missing_ok=True)

    def drop_files_except(self, spaces) -> None:
        """Delete the index files of every space not in `spaces` (spaces that no longer exist)."""
        if not self.dir.exists():
            return
        keep = {path.name for space in spaces for path in self.files(space)}
        for suffix in _SUFFIXES:
            for f in self.dir.glob("*" + suffix):
                if f.name not in keep:
                    f.unlink(missing_ok=True)

    def get(self, space: str) -> Shard:
        shard = self.loaded.get(space)
        if shard is None:
            shard = self.loaded[space] = self._load(space)
            if not self.defer_checks and self.settle():
                return self.get(space)               # its snapshot was damaged: from SQLite now
        return shard

    def settle(self, answer: bool = False) -> bool:
        """Wait for the snapshot checks still running (`answer`, a recall about to answer: but those
        covered by the checks of every piece it read, which go on in the background). A damaged
        snapshot's file is deleted and what was loaded from it dropped (rebuilt from SQLite at its
        next use); True if one was."""
        if not self.checks.busy:
            return False
        failed = self.checks.failed(wait_covered=not answer)
        for shard in self.loaded.values():
            scanned = shard.vec.scanned if shard.vec_loaded else None
            if scanned is not None and scanned.check not in self.checks.pending:
                shard.vec.scanned = shard.vec.row_checks = None     # checked: the hook would keep the mapping alive
        for path, exc in failed:
            log.warning("ipy_memory: rebuilding the index from the database: %s", exc)
            path.unlink(missing_ok=True)
            for space, shard in list(self.loaded.items()):
                if path == self.snapshot_path(space):
                    del self.loaded[space]
                elif path == self.vectors_path(space):
                    shard._vec, shard.vec_dirty = None, False
        return bool(failed)

    # ------------------------------------------------------------------------------ loading
    def _rows(self, where: str, params) -> list[NodeRow]:
        return [node_row(r) for r in self.store.query(NODE_SELECT + f" WHERE {where} ORDER BY d.rowid, n.ord", params)]

    def _load(self, space: str) -> Shard:
        lex = self._load_snapshot(space)
        fresh = lex is None
        if fresh:
            lex = LexicalShard(self.s)
            lex.add(self._rows("d.space = ?", (space,)))
        shard = Shard(self, space, lex)
        shard.lex_dirty = fresh          # worth a snapshot at close if the space is large
        return shard

    def _load_snapshot(self, space: str) -> LexicalShard | None:
        path = self.snapshot_path(space)
        if not path.exists():
            return None
        try:
            # checked now (on two threads), but for a recall the postings: chunk by chunk as it reads
            # them, the rest after it answers (first lexical-only query 15.2 -> 12.4 ms at 100k)
            checks = self.checks if self.defer_checks else None
            data = load_npz(path, own=LexicalShard.PIECE_MEMBERS if checks else ())
            seq = self._replayable(data, space)
            lex = None if seq is None else LexicalShard.from_snapshot(data, self.s, path, checks)
        except _DAMAGED:
            return None                               # damaged: rebuild from SQLite
        if lex is None:
            return None
        changes = self._changes_since(seq, space)
        for op, key in changes:
            if op == "del":
                lex.remove(key)
        adds = [k for op, k in changes if op == "add"]
        for i in range(0, len(adds), 5000):
            chunk = adds[i:i + 5000]
            lex.add(self._rows(f"n.key IN ({','.join('?' * len(chunk))})", chunk))
        expiry = [k for op, k in changes if op == "expiry"]
        self._apply_expiry(lex, expiry)
        return lex

    def _replayable(self, data, space: str, *, vectors: bool = False) -> int | None:
        """The seq a snapshot reflects, if it is this store's and space's and the change log still
        reaches it (and, for vectors, if they are of the store's current embedder epoch)."""
        seq, store_id, top = int(data["seq"]), str(data["store_id"]), self.store.max_seq()
        if store_id != self.store_id or str(data["space"]) != space or seq > top:
            return None          # another store's or space's file (copied, renamed), or a restored older database
        if vectors and int(data["epoch"]) != self._epoch():
            return None                               # re-embedded since: another model's vectors
        floor = self.store.query("SELECT min(seq) FROM changes")[0][0]
        if (top + 1 if floor is None else floor) > seq + 1 and seq < top:
            return None       # the change log no longer reaches back to it (compact() may have emptied it)
        return seq

    def _changes_since(self, seq: int, space: str) -> list[tuple[str, int]]:
        return self.store.query("SELECT op, node_key FROM changes WHERE seq > ? AND space = ? ORDER BY seq",
                                (seq, space))

    def fetch_vectors(self, keys) -> np.ndarray:
        """Exact vectors from SQLite, in the order of `keys` (zeros for unknown keys)."""
        keys = [int(k) for k in keys]
        found = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            found.update(self.store.query(f"SELECT node_key, vec FROM vectors WHERE node_key IN "
                                          f"({','.join('?' * len(chunk))})", chunk))
        zero = bytes(2 * self.dim)
        return decode_vecs([found.get(k, zero) for k in keys], self.dim)

    def _new_vectors(self) -> VectorShard:
        return VectorShard(self.dim, self.s, graph=self.graph, fetch=self.fetch_vectors)

    def _load_vector_snapshot(self, space: str) -> tuple[VectorShard, bool] | None:
        """The snapshot with the change log replayed on it, and whether anything was replayed."""
        path = self.vectors_path(space)
        if not path.exists():
            return None
        vec = self._new_vectors()
        try:
            data = load_npz(path, VectorShard.VALUE_MEMBERS, self.checks, own=VectorShard.PIECE_MEMBERS)
            vec.scanned = self.checks.hooks.pop((path, "hot"), None)
            seq = self._replayable(data, space, vectors=True)
            if seq is None:
                return None
            vec.restore(data, path, self.checks)
        except _DAMAGED:
            return None                               # damaged: reload from SQLite
        changes = self._changes_since(seq, space)
        for op, key in changes:
            if op == "del":
                vec.remove(key)
        self._add_vectors(vec, [k for op, k in changes if op == "add"], build=False)
        self._apply_tiers(vec, [k for op, k in changes if op == "tier"])
        return vec, bool(changes)

    def _load_vectors(self, space: str) -> tuple[VectorShard, bool]:
        """The space's vectors, and whether they differ from what is saved (worth saving at close)."""
        loaded = self._load_vector_snapshot(space)
        if loaded is not None:
            vec, dirty = loaded
        else:
            vec = self._new_vectors()
            self._add_vector_rows(vec, self.store.query(VECTOR_ROWS + "d.space = ?", (space,)), build=False)
            dirty = len(vec) >= SNAPSHOT_MIN_NODES
        if vec.graph_allowed and vec.hot_count >= self.s.exact_threshold:
            graph_file = self.graph_path(space)
            if not (graph_file.exists() and vec.adopt_graph(graph_file)):
                vec.build_graph()
                return vec, True
        return vec, dirty

    # ------------------------------------------------------------------------------ saving
    def save(self) -> None:
        """Snapshot large spaces so the next open skips re-tokenising and graph building.

        The files are only a cache, so failing to write them is logged, never raised."""
        self.settle()                 # never save what a damaged snapshot gave
        if self.store.read_only:
            return
        try:
            self._save()
        except OSError as exc:
            log.warning("ipy_memory: could not save index snapshots in %s: %s", self.dir, exc)
        except DamagedSnapshot as exc:    # what the settle above did not see: not written again
            log.warning("ipy_memory: not saving index snapshots in %s: %s", self.dir, exc)
            self.settle()

    def _save(self) -> None:
        remove_stale_temps(self.dir)
        for space, shard in self.loaded.items():
            if shard.lex_dirty and len(shard.lex) >= SNAPSHOT_MIN_NODES:
                self._save_snapshot(space, shard)
                shard.lex_dirty = False
            if shard.vec_loaded and shard.vec_dirty:
                self.dir.mkdir(mode=0o700, exist_ok=True)
                shard.vec.save_graph(self.graph_path(space))      # first: it adds the tail rows
                if len(shard.vec) >= SNAPSHOT_MIN_NODES:
                    self._write_snapshot(self.vectors_path(space), space, shard.vec.arrays(lazy=True))
                shard.vec_dirty = False

    def _save_snapshot(self, space: str, shard: Shard) -> None:
        self._write_snapshot(self.snapshot_path(space), space, shard.lex.snapshot(self.clock()))

    def _write_snapshot(self, path: Path, space: str, arrays: dict) -> None:
        self.dir.mkdir(mode=0o700, exist_ok=True)
        replace_npz(path, {"seq": np.array(self.seq), "store_id": np.array(self.store_id), "space": np.array(space),
                           "epoch": np.array(self.epoch), **arrays})

    def counts(self) -> dict[str, dict[str, int]]:
        return {s: {"lexical": len(sh.lex), **({"vectors": len(sh.vec), "vectors_int8": sh.vec.low.live}
                                                if sh.vec_loaded else {})}
                for s, sh in self.loaded.items()}
