"""Keeping a store healthy over months: consolidation (dream), tiers and rotation, compaction, backups.

Everything here works through SQLite (the source of truth) and the change log, so other kernels
see the result on their next call. The only schema this module owns is the `edges` table, created
lazily (IF NOT EXISTS) because store.py's schema is the engine's.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import _backup, _dreamed, _validate as v
from ._log import log
from .config import DAY
from .errors import InvalidArgument, ReadOnlyError
from .store import decode_vecs
from ._access import AccessMixin
from ._locking import locked


# Foreign keys cascade, so forget / purge / replace drop a node's edges without knowing they exist.
_EDGES = """
CREATE TABLE IF NOT EXISTS edges (
    src INTEGER NOT NULL REFERENCES nodes(key) ON DELETE CASCADE,
    dst INTEGER NOT NULL REFERENCES nodes(key) ON DELETE CASCADE,
    kind TEXT NOT NULL DEFAULT 'similar', weight REAL NOT NULL, space TEXT NOT NULL,
    PRIMARY KEY (src, dst, kind)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS edges_dst ON edges(dst);
CREATE INDEX IF NOT EXISTS edges_space ON edges(space, kind)
"""


def _sequence(value, field: str) -> tuple:
    # a str is iterable too: names="hot" would become the tiers ('h', 'o', 't')
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
        raise InvalidArgument(f"TierPolicy.{field} must be a tuple or list, not {type(value).__name__}")
    return tuple(value)


@dataclass(frozen=True)
class TierPolicy:
    """Tier names (hottest first) and how long a document may go unused before moving down.

    `max_age[i]` applies to tier `names[i]`: a document whose creation AND last access are older
    than it moves to `names[i + 1]`. `interval` is how often `maybe_rotate()` actually rotates.
    """
    names: tuple[str, ...] = ("hot", "warm", "cold")
    max_age: tuple[float, ...] = (7 * DAY, 30 * DAY)
    interval: float = DAY
    limit_per_hop: int | None = None

    def __post_init__(self):
        names, ages = _sequence(self.names, "names"), _sequence(self.max_age, "max_age")
        if not names or len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
            raise InvalidArgument("TierPolicy.names must be distinct non-empty strs, hottest first, e.g. ('hot', 'warm', 'cold')")
        if len(ages) != len(names) - 1:
            raise InvalidArgument(f"TierPolicy.max_age needs {len(names) - 1} ages in seconds (one per tier but the last)")
        for i, a in enumerate(ages):
            v.number(a, f"TierPolicy.max_age[{i}]", 0.0, v.MAX_TTL)
        if list(ages) != sorted(ages):
            raise InvalidArgument("TierPolicy.max_age must not decrease from hot to cold, e.g. (7 * DAY, 30 * DAY)")
        v.number(self.interval, "TierPolicy.interval (seconds)", 0.0, v.MAX_TTL)
        if self.limit_per_hop is not None:
            v.integer(self.limit_per_hop, "TierPolicy.limit_per_hop", 1, 10**9)
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "max_age", ages)


def _file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists())


class LifecycleMixin(AccessMixin):
    """Methods of MemoryEngine that maintain the store."""

    tier_policy: TierPolicy = TierPolicy()
    auto_rotate: bool = False          # True: recalls trigger maybe_rotate() on the background thread
    dream_threshold: float = 0.6       # cosine above which two nodes get a 'similar' edge
    dream_neighbors: int = 5           # at most this many 'similar' edges per node
    log_retention: float = 7 * DAY     # change-log rows younger than this are never trimmed
    _next_rotation_check = 0.0

    # ------------------------------------------------------------------------------ helpers
    def _policy(self) -> TierPolicy:
        if not isinstance(self.tier_policy, TierPolicy):
            raise InvalidArgument("engine.tier_policy must be an ipy_memory.lifecycle.TierPolicy(...)")
        return self.tier_policy

    def _writable(self, what: str) -> None:
        self._check_open()
        if self.read_only:
            raise ReadOnlyError(f"{what}() writes, but {self.store.path} is open read-only: "
                                "open a MemoryEngine without read_only=True")

    def _has_edges(self) -> bool:
        return bool(self.store.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'edges'"))

    def _set_meta(self, db, key: str, value) -> None:
        db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def _meta_json(self, key: str):
        raw = self.store.get_meta(key)
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return None

    # ------------------------------------------------------------------------------ tiers
    @locked
    def rotate(self, limit_per_hop: int | None = None, reason: str = "manual") -> dict:
        """Move documents unused for longer than their tier's age limit one tier colder (hot -> warm -> cold);
        a document moves at most one tier per call.

        Returns {"hops": [{"from", "to", "documents", "nodes"}], "moved_documents", "moved_nodes",
        "last_rotation", "previous_rotation", "reason"}."""
        self._writable("rotate")
        self._check_epoch()                 # tier moves reach the loaded vectors: they must be this model's
        if limit_per_hop is not None:
            limit_per_hop = v.integer(limit_per_hop, "limit_per_hop (None = no limit)", 1, 10**9)
        reason = v.text(reason, "reason", max_chars=200)
        self._flush_accesses()              # recent uses count before anything moves
        policy, now = self._policy(), self.clock()
        previous = (self._meta_json("last_rotation") or {}).get("at")
        hops = []
        with self.store.write() as db:
            # coldest hop first, so a document moved down by this call is not picked again by the next hop
            for i in reversed(range(len(policy.names) - 1)):
                src, dst = policy.names[i], policy.names[i + 1]
                cutoff = now - policy.max_age[i]
                # documents in a tier this policy does not name (e.g. after renaming tiers) count as hottest
                marks = ",".join("?" * len(policy.names))
                in_tier = f"(tier = ? OR tier NOT IN ({marks}))" if i == 0 else "tier = ?"
                params = [src, *policy.names] if i == 0 else [src]
                ids = [r[0] for r in db.execute(
                    f"SELECT id FROM documents WHERE {in_tier} AND accessed_at <= ? AND created_at <= ? "
                    "AND (expires_at IS NULL OR expires_at > ?) ORDER BY accessed_at, id LIMIT ?",
                    (*params, cutoff, cutoff, now, limit_per_hop or -1))]
                nodes = 0
                for j in range(0, len(ids), 500):
                    chunk = ids[j:j + 500]
                    m = ",".join("?" * len(chunk))
                    db.execute(f"UPDATE documents SET tier = ? WHERE id IN ({m})", (dst, *chunk))
                    db.execute("INSERT INTO changes (op, node_key, space) SELECT 'tier', n.key, d.space FROM nodes n "
                               f"JOIN documents d ON d.id = n.document_id WHERE d.id IN ({m})", chunk)
                    nodes += db.execute(f"SELECT count(*) FROM nodes WHERE document_id IN ({m})", chunk).fetchone()[0]
                hops.insert(0, {"from": src, "to": dst, "documents": len(ids), "nodes": nodes})
            report = {"at": now, "reason": reason, "moved": sum(h["documents"] for h in hops)}
            self._set_meta(db, "last_rotation", report)
        self._next_rotation_check = now + policy.interval
        self.shards.sync(force=True)
        return {"hops": hops, "moved_documents": sum(h["documents"] for h in hops),
                "moved_nodes": sum(h["nodes"] for h in hops), "last_rotation": now,
                "previous_rotation": previous, "reason": reason}

    def maybe_rotate(self, *, background: bool = False) -> dict | None:
        """Rotate if the policy's interval has passed since the last rotation (by any process).

        Returns quickly (no I/O) until a check is due; None when nothing ran. background=True queues
        the rotation on the background writer instead of running it here."""
        background = v.flag(background, "background")
        if self.read_only or getattr(self, "_closed", True):
            return None
        now, policy = self.clock(), self._policy()
        if now < self._next_rotation_check:
            return None
        last = (self._meta_json("last_rotation") or {}).get("at")
        if last is not None and now - last < policy.interval:
            self._next_rotation_check = last + policy.interval
            return None
        self._next_rotation_check = now + policy.interval   # one attempt per interval, even if it fails
        if background:
            self._submit(lambda: self.rotate(policy.limit_per_hop, reason="auto"), "rotate")
            return None
        return self.rotate(policy.limit_per_hop, reason="auto")

    @locked
    def tier_stats(self) -> dict:
        """Per tier: documents, nodes, text bytes, stored vector bytes (float16 in SQLite, the exact
        copy used for rescoring) and the in-memory search precision with its size: float16 for the
        hottest tier, int8 for the colder ones (`index_bytes_saved` against float16 everywhere)."""
        self._check_open()
        self._check_epoch()                 # the sizes below are this engine's model's
        self._flush_accesses()
        names, dim = self._policy().names, self.embedder.dim

        def row(tier, docs=0, nodes=0, text_b=0, vec_b=0):
            width = 2 * dim if tier == names[0] else dim
            return {"documents": docs, "nodes": nodes, "text_bytes": text_b, "vector_bytes": vec_b,
                    "precision": "f16" if tier == names[0] else "i8", "index_bytes": nodes * width,
                    "index_bytes_saved": nodes * (2 * dim - width)}
        out = {t: row(t) for t in names}
        for tier, docs, nodes, text_b, vec_b in self.store.query(
                "SELECT d.tier, count(DISTINCT d.id), count(n.key), "
                "COALESCE(sum(length(CAST(COALESCE(n.body, d.content) AS BLOB))), 0), "
                "COALESCE(sum(length(v.vec)), 0) FROM documents d LEFT JOIN nodes n ON n.document_id = d.id "
                "LEFT JOIN vectors v ON v.node_key = n.key GROUP BY d.tier"):
            out[tier] = row(tier, docs, nodes, text_b, vec_b)
        last = self._meta_json("last_rotation")
        return {"tiers": out, "last_rotation": last.get("at") if last else None}

    # ------------------------------------------------------------------------------ consolidation
    @locked
    def dream(self, scope: str = "project+global", *, project: str | None = None, threshold: float | None = None,
              neighbors: int | None = None) -> dict:
        """Consolidate: drop exact duplicate nodes within each space and rebuild 'similar' edges.

        A duplicate node is removed only when another node with the same normalised content and
        heading path stays indexed at least as long (expiry) and its document keeps at least one node; documents and
        their source text are never touched; a removed node is kept aside (_dreamed) and indexed again
        if the copy kept goes. Idempotent. Returns {"removed_nodes", "edges", "spaces"}."""
        self._writable("dream")
        self._check_epoch()                 # edges are scored from the stored vectors at this model's width
        spaces = self._spaces(scope, v.name(project, "project") if project is not None else None, None)
        threshold = v.number(threshold if threshold is not None else self.dream_threshold, "threshold", 0.0, 1.0)
        neighbors = v.integer(neighbors if neighbors is not None else self.dream_neighbors, "neighbors", 1, 100)
        self._flush_accesses()
        report = {}
        for space in spaces:
            removed = self._dedup_space(space)
            self.shards.sync(force=True)
            report[space] = {"removed_nodes": removed, "edges": self._rebuild_edges(space, threshold, neighbors)}
        return {"removed_nodes": sum(r["removed_nodes"] for r in report.values()),
                "edges": sum(r["edges"] for r in report.values()), "spaces": report}

    def _dedup_space(self, space: str) -> int:
        now = self.clock()
        with self.store.write() as db:
            for stmt in _EDGES.split(";"):
                db.execute(stmt)
            # copies under the same heading path only: a set-aside section is found (and shown) as the
            # copy kept, so recall(path=) of its own memory's headings must still reach it
            rows = db.execute(
                "SELECT n.key, n.content_hash || '/' || n.path, n.document_id, COALESCE(d.expires_at, 1e308), "
                "d.importance FROM nodes n JOIN documents d ON d.id = n.document_id WHERE d.space = ? AND "
                "(d.expires_at IS NULL OR d.expires_at > ?)", (space, now)).fetchall()
            remaining = dict(db.execute(
                "SELECT n.document_id, count(*) FROM nodes n JOIN documents d ON d.id = n.document_id "
                "WHERE d.space = ? GROUP BY n.document_id", (space,)).fetchall())
            groups: dict[str, list[tuple]] = {}
            for r in rows:
                groups.setdefault(r[1], []).append(r)
            removed = []
            for group in groups.values():
                if len(group) < 2:
                    continue
                # keep a node that cannot go anyway (its document's last), then the longest-lived, most important
                group.sort(key=lambda r: (remaining[r[2]] > 1, -r[3], -r[4], r[0]))
                keep = group[0]
                for key, _, doc, expires, _ in group[1:]:
                    if remaining[doc] > 1 and keep[3] >= expires:
                        remaining[doc] -= 1
                        removed.append((key, keep[0]))
            for dup, keep in removed:
                db.execute("UPDATE OR IGNORE edges SET src = ? WHERE src = ?", (keep, dup))
                db.execute("UPDATE OR IGNORE edges SET dst = ? WHERE dst = ?", (keep, dup))
            db.execute("DELETE FROM edges WHERE src = dst")
            _dreamed.set_aside(db, removed)      # their text stays in their memories: see _dreamed
            db.executemany("DELETE FROM nodes WHERE key = ?", [(d,) for d, _ in removed])
            db.executemany("INSERT INTO changes (op, node_key, space) VALUES ('del', ?, ?)",
                           [(d, space) for d, _ in removed])
        return len(removed)

    def _rebuild_edges(self, space: str, threshold: float, k: int) -> int:
        # read and score outside the write lock: scoring a large space takes a while
        with self.store.read() as db:
            rows = db.execute("SELECT v.node_key, v.vec FROM vectors v JOIN nodes n ON n.key = v.node_key "
                              "JOIN documents d ON d.id = n.document_id WHERE d.space = ? AND "
                              "(d.expires_at IS NULL OR d.expires_at > ?) ORDER BY v.node_key",
                              (space, self.clock())).fetchall()
        keys = np.array([r[0] for r in rows], np.int64)
        mat = decode_vecs([r[1] for r in rows], self.embedder.dim)
        edges = []
        kk = min(k, len(keys) - 1)
        for i in range(0, len(keys) if kk > 0 else 0, 512):
            sims = mat[i:i + 512] @ mat.T
            sims[np.arange(len(sims)), np.arange(i, i + len(sims))] = -np.inf     # no self edges
            top = np.argpartition(-sims, kk - 1, axis=1)[:, :kk]
            for r, cols in enumerate(top):
                for c in cols:
                    if sims[r, c] >= threshold:
                        edges.append((int(keys[i + r]), int(keys[c]), round(float(sims[r, c]), 4), space))
        with self.store.write() as db:
            db.execute("DELETE FROM edges WHERE space = ? AND kind = 'similar'", (space,))
            live = {r[0] for r in db.execute("SELECT n.key FROM nodes n JOIN documents d ON d.id = n.document_id "
                                             "WHERE d.space = ?", (space,))}
            edges = [e for e in edges if e[0] in live and e[1] in live]   # nodes forgotten meanwhile
            db.executemany("INSERT OR REPLACE INTO edges (src, dst, kind, weight, space) "
                           "VALUES (?, ?, 'similar', ?, ?)", edges)
        return len(edges)

    @locked
    def related(self, id: str, *, limit: int = 10) -> list[dict]:
        """Nodes linked to section `id` ('m-…#n', or 'm-…' for its first section) by dream()'s edges;
        NotFound, as from get(), if there is no such memory or section (never stored, forgotten, expired)."""
        self._check_open()
        doc_id, ord_ = v.memory_id(id)
        limit = v.integer(limit, "limit", 1, 200)
        self.get(id)                # (an unknown id is an error, not a memory without links)
        if not self._has_edges():
            return []
        now = self.clock()          # (an edge outlives the expiry of either end until the next dream)
        rows = self.store.query(
            "SELECT d.id, n.ord, COALESCE(NULLIF(n.title, ''), d.title), e.weight FROM nodes s "
            "JOIN documents sd ON sd.id = s.document_id JOIN edges e ON e.src = s.key JOIN nodes n ON n.key = e.dst "
            "JOIN documents d ON d.id = n.document_id WHERE s.document_id = ? AND s.ord = ? AND "
            "(sd.expires_at IS NULL OR sd.expires_at > ?) AND (d.expires_at IS NULL OR d.expires_at > ?) "
            "ORDER BY e.weight DESC, n.key LIMIT ?", (doc_id, ord_ or 0, now, now, limit))
        return [{"id": f"{d}#{o}", "document_id": d, "title": t, "weight": w} for d, o, t, w in rows]

    # ------------------------------------------------------------------------------ backup and compaction
    @locked
    def backup(self, path: str | os.PathLike) -> dict:
        """Copy the database to `path` with SQLite's online backup API (safe while others write).

        `path` may not be the live database, a -wal/-shm/-journal file or inside the index directory;
        an existing file there is replaced only if it is an ipy_memory database nobody has open
        (an earlier backup). Anything else: InvalidArgument, and nothing is written."""
        self._check_open()
        target = _backup.target_path(path, self.store.path, self.data_dir / "index")
        self._flush_accesses()
        return {"path": str(target), "bytes": _backup.write(self.store, target)}

    @locked
    def compact(self, *, vacuum: bool = True) -> dict:
        """Purge expired memories, rebuild indexes that hold tombstones, then VACUUM the database.

        The change log is trimmed only with vacuum=True, and only rows that were already in the log
        `log_retention` seconds (7 days) ago at an earlier compact(); see docs/lifecycle.md.
        Returns bytes before / after and what was done."""
        self._writable("compact")
        self._check_epoch()                 # it reloads vector indexes
        vacuum = v.flag(vacuum, "vacuum")
        self._flush_accesses()
        path = self.store.path
        before = _file_bytes(path)
        purged = self.purge_expired()
        tombstones = self._compact_indexes()
        trimmed = self._trim_log() if vacuum else 0
        vacuumed, error = False, None
        if vacuum:
            with self.store.lock:
                try:
                    self.store.db.execute("VACUUM")
                    self.store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    vacuumed = True
                except sqlite3.Error as exc:     # e.g. another process holds a lock: nothing lost
                    error = str(exc)
                    log.warning("compact: VACUUM skipped: %s", exc)
        return {"bytes_before": before, "bytes_after": _file_bytes(path), "purged": purged,
                "tombstones": tombstones, "log_rows_trimmed": trimmed, "vacuumed": vacuumed, "error": error}

    def _compact_indexes(self) -> int:
        """Reload spaces whose in-memory indexes carry removed rows; drop graph files of empty spaces."""
        self.shards.sync(force=True)
        removed = 0
        for space, shard in list(self.shards.loaded.items()):
            dead = (shard.lex.keys.size - len(shard.lex)) + (shard.vec.keys.size - shard.vec.live)
            if not dead:
                continue
            removed += dead
            self.shards.drop(space)               # saved files hold the same tombstones
            self.shards.get(space).lex_dirty = True
        self.shards.drop_files_except(s[0] for s in self.store.query("SELECT DISTINCT space FROM documents"))
        self.shards.save()
        return removed

    def _trim_log(self) -> int:
        """Trim change-log rows older than log_retention, dated by marks left by earlier compact() calls.

        The log has no timestamps, so each compact records (now, max seq); a later one may delete rows
        up to the newest mark that is at least log_retention old. 'changes_floor' in meta records the
        highest trimmed seq so an engine that slept past it can tell its indexes need a reload."""
        now = self.clock()
        marks = [m for m in (self._meta_json("changes_marks") or []) if isinstance(m, list) and len(m) == 2]
        old = [seq for at, seq in marks if at <= now - self.log_retention]
        floor = max(old) if old else 0
        with self.store.write() as db:
            n = db.execute("DELETE FROM changes WHERE seq <= ?", (floor,)).rowcount if floor else 0
            if n:
                self._set_meta(db, "changes_floor", floor)
            seq = db.execute("SELECT COALESCE(max(seq), 0) FROM changes").fetchone()[0]
            keep = [m for m in marks if m[1] > floor][-30:] + [[now, seq]]
            self._set_meta(db, "changes_marks", keep)
        if n:
            log.info("compact: trimmed %d change-log rows (seq <= %d)", n, floor)
        return n


__all__ = ["TierPolicy", "LifecycleMixin"]
