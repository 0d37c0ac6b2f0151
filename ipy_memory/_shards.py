"""Per-space derived indexes (lexical + vector), loaded lazily from SQLite and kept in sync.

Each engine reads the change log after the last seq it applied, so a memory stored by another
kernel is searchable on this kernel's next call. Graphs of large spaces are saved beside the
database and reconciled with SQLite on load (missing keys added, vanished keys removed), so a
missing, stale or damaged index file only costs a rebuild, never a failed open.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from .config import Settings
from .lexical import LexicalShard, NodeRow
from .store import NODE_SELECT, Store, decode_vecs
from .vectors import VectorShard


class Shard:
    def __init__(self, space: str, dim: int, settings: Settings, graph: bool):
        self.space = space
        self.lex = LexicalShard(settings)
        self.vec = VectorShard(dim, settings, graph=graph)
        self.dirty = False


def node_row(r) -> NodeRow:
    return NodeRow(key=r[0], document_id=r[1], ord=r[2], doc_nodes=r[3], title=r[5], body=r[6],
                   session=r[10] or "", created_at=r[11], importance=r[12], expires_at=r[13])


class Shards:
    def __init__(self, store: Store, dim: int, settings: Settings, index_dir: Path, *, graph: bool = True):
        self.store, self.dim, self.s, self.dir, self.graph = store, dim, settings, index_dir, graph
        self.loaded: dict[str, Shard] = {}
        self.seq = store.max_seq()
        self._version = store.data_version()

    def graph_path(self, space: str) -> Path:
        return self.dir / (hashlib.sha1(space.encode()).hexdigest()[:20] + ".usearch")

    def get(self, space: str) -> Shard:
        shard = self.loaded.get(space)
        if shard is None:
            shard = self.loaded[space] = self._load(space)
        return shard

    def _load(self, space: str) -> Shard:
        shard = Shard(space, self.dim, self.s, self.graph)
        with self.store.read() as db:
            rows = db.execute(NODE_SELECT + " WHERE d.space = ? ORDER BY d.rowid, n.ord", (space,)).fetchall()
            vec_rows = db.execute("SELECT v.node_key, v.vec FROM vectors v JOIN nodes n ON n.key = v.node_key "
                                  "JOIN documents d ON d.id = n.document_id WHERE d.space = ?", (space,)).fetchall()
        shard.lex.add([node_row(r) for r in rows])
        shard.vec.add([k for k, _ in vec_rows], decode_vecs([b for _, b in vec_rows], self.dim))
        graph_file = self.graph_path(space)
        if shard.vec.graph_allowed and len(shard.vec) >= self.s.exact_threshold:
            if not (graph_file.exists() and shard.vec.adopt_graph(graph_file)):
                shard.vec.build_graph()
                shard.dirty = True
        return shard

    def sync(self, force: bool = False) -> None:
        """Apply changes other engines (or this one) committed since the last sync."""
        version = self.store.data_version()
        if not force and version == self._version:
            return
        self._version = version
        changes = self.store.query("SELECT seq, op, node_key, space FROM changes WHERE seq > ? ORDER BY seq", (self.seq,))
        if not changes:
            return
        self.seq = changes[-1][0]
        adds: dict[str, list[int]] = {}
        for _, op, key, space in changes:
            shard = self.loaded.get(space)
            if shard is None:
                continue
            if op == "del":
                shard.lex.remove(key)
                shard.vec.remove(key)
                shard.dirty = True
            elif op == "add":
                adds.setdefault(space, []).append(key)
            elif op == "expiry":
                adds.setdefault(space, []).append(-key)
        for space, keys in adds.items():
            self._apply_adds(self.loaded[space], keys)

    def _apply_adds(self, shard: Shard, keys: list[int]) -> None:
        expiry = [-k for k in keys if k < 0]
        keys = [k for k in keys if k > 0]
        for i in range(0, len(keys), 5000):
            chunk = keys[i:i + 5000]
            marks = ",".join("?" * len(chunk))
            with self.store.read() as db:
                rows = db.execute(NODE_SELECT + f" WHERE n.key IN ({marks}) ORDER BY d.rowid, n.ord", chunk).fetchall()
                vec_rows = db.execute(f"SELECT node_key, vec FROM vectors WHERE node_key IN ({marks})", chunk).fetchall()
            shard.lex.add([node_row(r) for r in rows])
            shard.vec.add([k for k, _ in vec_rows], decode_vecs([b for _, b in vec_rows], self.dim))
            shard.dirty = True
        if expiry:
            marks = ",".join("?" * len(expiry))
            for key, exp in self.store.query(
                    f"SELECT n.key, d.expires_at FROM nodes n JOIN documents d ON d.id = n.document_id "
                    f"WHERE n.key IN ({marks})", expiry):
                shard.lex.set_expiry(key, exp)

    def save(self) -> None:
        """Persist the graphs of large spaces (exact spaces are cheap to reload from SQLite)."""
        if self.store.read_only:
            return
        self.dir.mkdir(mode=0o700, exist_ok=True)
        for space, shard in self.loaded.items():
            if shard.dirty and shard.vec.save_graph(self.graph_path(space)):
                shard.dirty = False
        manifest = {s: self.graph_path(s).name for s, sh in self.loaded.items() if sh.vec.graph is not None}
        if manifest:
            (self.dir / "manifest.json").write_text(json.dumps(manifest, indent=1))

    def counts(self) -> dict[str, dict[str, int]]:
        return {s: {"lexical": len(sh.lex), "vectors": len(sh.vec)} for s, sh in self.loaded.items()}
