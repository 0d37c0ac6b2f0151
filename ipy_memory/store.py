"""SQLite storage: the single source of truth (documents, nodes, vectors, change log).

WAL mode lets several kernels read while one writes; every write is one ``BEGIN IMMEDIATE``
transaction, so a failed or killed call leaves nothing half-written. The change log (a monotonic
``seq`` per node added or removed) is how each engine learns what other processes changed.

Checkpoints (copying the WAL back into the database file and syncing both) run in the committing
thread once the WAL passes 1,000 pages: for a bulk write that was every batch, ~20 ms of each
1,000 memories, a tenth of their time. A transaction that changed at least
`BACKGROUND_CHECKPOINT_ROWS` rows commits without it and leaves the checkpoint to a second
connection on a background thread, where SQLite runs it without the GIL beside the next batch.
Smaller writes keep SQLite's own checkpoints, which also catch up if the background ones fall behind.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np

from ._log import log
from ._threads import Task, Worker
from .errors import ReadOnlyError, StorageError
from .models import Memory

SCHEMA_VERSION = 1
DB_NAME = "memory.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    id TEXT PRIMARY KEY,
    space TEXT NOT NULL, scope TEXT NOT NULL, project TEXT, session TEXT,
    kind TEXT NOT NULL DEFAULT 'note',
    title TEXT NOT NULL, content TEXT NOT NULL, content_hash TEXT NOT NULL,
    importance REAL NOT NULL, metadata TEXT,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, accessed_at REAL NOT NULL,
    expires_at REAL, tier TEXT NOT NULL DEFAULT 'hot', access_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS documents_hash_prefix ON documents(substr(content_hash, 1, 12));
CREATE INDEX IF NOT EXISTS documents_space_created ON documents(space, created_at);
CREATE INDEX IF NOT EXISTS documents_expires ON documents(expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS nodes (
    key INTEGER PRIMARY KEY AUTOINCREMENT,
    document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    ord INTEGER NOT NULL, parent_ord INTEGER, depth INTEGER NOT NULL DEFAULT 0,
    path TEXT NOT NULL, title TEXT NOT NULL,
    body TEXT,                      -- NULL: same as the document's content (single-node memories)
    metadata TEXT, content_hash TEXT NOT NULL,
    UNIQUE (document_id, ord)
);
CREATE TABLE IF NOT EXISTS vectors (
    node_key INTEGER PRIMARY KEY REFERENCES nodes(key) ON DELETE CASCADE,
    vec BLOB NOT NULL               -- float16, L2-normalised
);
CREATE TABLE IF NOT EXISTS changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, op TEXT NOT NULL, node_key INTEGER NOT NULL, space TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS embed_cache (
    model TEXT NOT NULL, hash TEXT NOT NULL, vec BLOB NOT NULL, PRIMARY KEY (model, hash)
) WITHOUT ROWID;
"""

NODE_SELECT = """
SELECT n.key, n.document_id, n.ord, (SELECT count(*) FROM nodes m WHERE m.document_id = n.document_id),
       n.path, n.title, COALESCE(n.body, d.content), n.metadata, d.space, d.scope, d.session,
       d.created_at, d.importance, d.expires_at, d.metadata, d.title
FROM nodes n JOIN documents d ON d.id = n.document_id
"""


# a document as a Memory (memory_row): its columns, with its number of sections
DOC_COLS = ("id, title, content, scope, project, session, space, kind, importance, "
            "(SELECT count(*) FROM nodes n WHERE n.document_id = documents.id), created_at, updated_at, "
            "expires_at, tier, metadata")


def memory_row(row) -> Memory:
    return Memory(*row[:14], metadata=json.loads(row[14]) if row[14] else None)


AUTOCHECKPOINT_PAGES = 1000             # SQLite's default, set explicitly: it is restored after a large commit
BACKGROUND_CHECKPOINT_ROWS = 1000       # a bulk batch (a 1,000-memory batch changes ~5,000 rows)
_CHECKPOINTS = Worker("ipy_memory-checkpoint")


class _Checkpointer:
    """Passive checkpoints of one database on `_CHECKPOINTS`, through a connection of their own
    (opened there at the first one, and again in a forked child, which must not use its parent's)."""

    def __init__(self, path: Path, timeout_ms: int):
        self.path, self.timeout_ms = path, timeout_ms
        self.db: sqlite3.Connection | None = None
        self.pid = 0                        # the process that opened `db`
        self.last: tuple[int, Task] | None = None       # the process that requested it, the last request

    def request(self) -> None:
        self.last = (os.getpid(), _CHECKPOINTS.submit(self._run))

    def _run(self) -> None:
        try:
            if self.db is None or self.pid != os.getpid():
                self.db, self.pid = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False), os.getpid()
                self.db.execute(f"PRAGMA busy_timeout = {self.timeout_ms}")
            # PASSIVE: copies what no reader still needs, never waits for readers or writers
            self.db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:        # never needed for correctness: SQLite's own checkpoints remain
            log.warning("ipy_memory: background checkpoint of %s failed: %s", self.path, exc)

    def close(self) -> None:
        """Wait for the last requested checkpoint, then close the connection."""
        if self.last is not None and self.last[0] == os.getpid():    # (a parent's request never runs here)
            self.last[1].finish()
        if self.db is not None and self.pid == os.getpid():
            self.db.close()
        self.db = self.last = None


def encode_vec(v: np.ndarray) -> bytes:
    return np.asarray(v, np.float16).tobytes()


def encode_rows(half: np.ndarray) -> list[bytes]:
    """encode_vec of each row of a float16 matrix, from one copy of its bytes."""
    raw, step = half.tobytes(), half.shape[1] * 2
    return [raw[i:i + step] for i in range(0, len(raw), step)] if step else [b""] * len(half)


def decode_half(blobs: list[bytes], dim: int) -> np.ndarray:
    """The stored float16 rows as a matrix (float16)."""
    return np.frombuffer(b"".join(blobs), np.float16).reshape(len(blobs), dim)


def decode_vecs(blobs: list[bytes], dim: int) -> np.ndarray:
    return decode_half(blobs, dim).astype(np.float32)


def _probed(uri: str, timeout: float) -> sqlite3.Connection:
    """A connection to `uri` that has read the database (SQLite opens the file at the first query)."""
    db = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False)
    try:
        db.execute("SELECT 1 FROM documents LIMIT 1").fetchone()
    except BaseException:
        db.close()
        raise
    return db


class Store:
    def __init__(self, data_dir: Path, *, read_only: bool = False, timeout: float = 30.0):
        self.dir, self.read_only = data_dir, read_only
        self.path = data_dir / DB_NAME
        self.lock = threading.RLock()
        self._prepare_dir()
        try:
            if read_only:
                self.db = self._connect_read_only(timeout)
            else:
                self._writable_sidecars()
                self.db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None,
                                          check_same_thread=False)
                os.chmod(self.path, os.stat(self.path).st_mode & 0o600)     # private, and never a bit added
            self.busy_ms = int(timeout * 1000)
            self.checkpoints = None if read_only else _Checkpointer(self.path, self.busy_ms)
            self.db.execute(f"PRAGMA busy_timeout = {self.busy_ms}")
            self.db.execute("PRAGMA foreign_keys = ON")
            if not read_only:
                self.db.execute("PRAGMA journal_mode = WAL")
                self.db.execute("PRAGMA synchronous = NORMAL")
                self.db.execute(f"PRAGMA wal_autocheckpoint = {AUTOCHECKPOINT_PAGES}")
                self._migrate()
        except sqlite3.DatabaseError as exc:
            raise self._error("cannot open", exc) from exc

    def _writable_sidecars(self) -> None:
        """SQLite creates -wal and -shm with the database's mode: a read-only visit to a write-protected
        database (chmod 444) leaves them 0444, and once the user makes the database writable again they
        would keep it from opening. Ours get the database's own owner bits back (never more than 0600)."""
        try:
            mode = os.stat(self.path).st_mode & 0o600
        except OSError:
            return
        for name in (self.path.name + "-wal", self.path.name + "-shm"):
            side = self.path.with_name(name)
            try:
                st = os.stat(side)
                if st.st_uid == os.geteuid() and mode & 0o200 and st.st_mode & 0o600 != mode:
                    os.chmod(side, mode)          # (only ever back to writable: a 0444 database's stay as they are)
            except OSError:
                pass          # none there, or not ours: SQLite says what it cannot open

    def _connect_read_only(self, timeout: float) -> sqlite3.Connection:
        """mode=ro, or on a read-only directory (a mount, a shared copy) immutable=1: a WAL database
        read with mode=ro needs its -shm file, which such a directory can neither hold nor create."""
        uri = f"{self.path.absolute().as_uri()}?mode=ro"
        try:
            return _probed(uri, timeout)
        except sqlite3.OperationalError:
            if os.access(self.dir, os.W_OK):
                raise
        wal = self.path.with_name(self.path.name + "-wal")
        if wal.exists() and wal.stat().st_size:
            # immutable=1 would silently skip what the WAL holds
            raise StorageError(f"{self.path} is in a read-only directory and {wal.name} holds changes not yet in the "
                               "database: copy the data dir somewhere writable and open the copy")
        return _probed(uri + "&immutable=1", timeout)

    def _error(self, doing: str, exc: sqlite3.Error) -> StorageError:
        """A StorageError naming the file; damaged files also get the way to recover."""
        text = f"{doing} {self.path}: {exc}"
        code = getattr(exc, "sqlite_errorcode", None)
        damaged = (code in (11, 26) or doing == "cannot open"
                   or any(w in str(exc).lower() for w in ("malformed", "not a database", "corrupt")))
        if damaged:
            text += (". If the file is damaged: restore a backup made with `python -m ipy_memory backup`, or move "
                     "it aside to start afresh (sqlite3's .recover command can salvage rows from it)")
        return StorageError(text)

    def _prepare_dir(self) -> None:
        if self.dir.exists() and not self.dir.is_dir():
            raise StorageError(f"data dir {self.dir} exists but is not a directory: pass another data_dir")
        if self.read_only:
            if not self.path.exists():
                raise StorageError(f"no memory store at {self.path} to open read-only")
            return
        try:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create data dir {self.dir}: {exc}") from exc
        if not os.access(self.dir, os.W_OK | os.X_OK):
            raise StorageError(f"data dir {self.dir} is not writable: pass a data_dir you can write to, "
                               "or open it with read_only=True to read it")

    def _migrate(self) -> None:
        with self.write() as db:
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    db.execute(stmt)
            row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            version = int(row[0]) if row else 0
            if version > SCHEMA_VERSION:
                raise StorageError(f"{self.path} was written by a newer ipy_memory (schema {version}); upgrade ipy-memory")
            if version < SCHEMA_VERSION:  # future migrations go here, one step per version
                db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            # Exact duplicates are found by 12 hex digits of the content hash (48 bits; the rows found
            # are checked against the whole hash and the space), not by (space, content_hash): an
            # index of a random key takes every insert to a random page, and with entries a quarter
            # the size (at 51k memories 279 pages instead of 1,253) a 1,000-memory write rewrites 262
            # of its pages instead of 788. Only indexes change, so no new version:
            # an older ipy_memory re-creates its own index at open, and this one drops it again.
            db.execute("DROP INDEX IF EXISTS documents_space_hash")
            # identifies this database to the index snapshots beside it (a restored backup is another store)
            db.execute("INSERT OR IGNORE INTO meta VALUES ('store_id', lower(hex(randomblob(8))))")
            # a restored backup in use is a store, which backup() may no longer replace (_backup.py), and
            # one of its own: snapshots saved after an earlier restore of the same file hold another history
            if db.execute("DELETE FROM meta WHERE key = 'backup_of'").rowcount:
                db.execute("UPDATE meta SET value = lower(hex(randomblob(8))) WHERE key = 'store_id'")

    # ------------------------------------------------------------------------------ transactions
    @contextmanager
    def write(self, bulk: bool = False) -> Iterator[sqlite3.Connection]:
        """A write transaction (BEGIN IMMEDIATE ... COMMIT, ROLLBACK on any exception). `bulk`: its
        statements' own undo records (statement journals, which SQLite spills to a temporary file
        past 64 kB: a new file of ~1 MB a 1,000-memory batch) and temporary tables stay in memory
        until it ends (temp_store, set back to the default after; never for VACUUM, outside any
        transaction). They never serve crash recovery: the WAL does, and the commit is the same."""
        if self.read_only:
            raise ReadOnlyError(f"{self.path} is open read-only: open a MemoryEngine without read_only=True to write")
        with self.lock:
            try:
                if bulk:
                    self.db.execute("PRAGMA temp_store = MEMORY")   # (read at BEGIN)
                self.db.execute("BEGIN IMMEDIATE")
            except sqlite3.DatabaseError as exc:
                self._default_temp(bulk)
                raise self._error("cannot write to", exc) from exc
            start = self.db.total_changes
            try:
                yield self.db
            except sqlite3.DatabaseError as exc:
                self._rollback()
                raise self._error("writing to", exc) from exc
            except BaseException:
                self._rollback()
                raise
            else:
                self._commit(self.db.total_changes - start >= BACKGROUND_CHECKPOINT_ROWS)
            finally:
                self._default_temp(bulk)

    def _default_temp(self, bulk: bool) -> None:
        if bulk:
            try:
                self.db.execute("PRAGMA temp_store = DEFAULT")
            except sqlite3.DatabaseError:
                pass     # (a transaction left open by a failed ROLLBACK: the next bulk write sets it again)

    def _commit(self, large: bool) -> None:
        """COMMIT; a large transaction's checkpoint is left to the background (see the module's doc)."""
        if large:
            self.db.execute("PRAGMA wal_autocheckpoint = 0")      # (a setting of this connection: no I/O)
        try:
            self.db.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            self._rollback()
            raise self._error("cannot commit to", exc) from exc
        finally:
            if large:
                self.db.execute(f"PRAGMA wal_autocheckpoint = {AUTOCHECKPOINT_PAGES}")
        if large:
            self.checkpoints.request()

    def _rollback(self) -> None:
        try:
            self.db.execute("ROLLBACK")
        except sqlite3.DatabaseError:
            pass   # the transaction is already gone (SQLite rolls back on some errors by itself)

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for several SELECTs."""
        with self.lock:
            if self.db.in_transaction:  # already inside a write: it is consistent by itself
                yield self.db
                return
            self.db.execute("BEGIN")
            try:
                yield self.db
            finally:
                self.db.execute("COMMIT")

    def query(self, sql: str, params=()) -> list[tuple]:
        with self.lock:
            try:
                return self.db.execute(sql, params).fetchall()
            except sqlite3.DatabaseError as exc:
                raise self._error("reading", exc) from exc

    # ------------------------------------------------------------------------------ metadata
    def get_meta(self, key: str) -> str | None:
        row = self.query("SELECT value FROM meta WHERE key = ?", (key,))
        return row[0][0] if row else None

    def max_seq(self) -> int:
        """The last change-log seq ever given, also once compact() trimmed every row (AUTOINCREMENT
        keeps it in sqlite_sequence; max(seq) of an empty log would be 0, and every snapshot newer)."""
        return self.query("SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'changes'), "
                          "(SELECT max(seq) FROM changes), 0)")[0][0]

    def data_version(self) -> tuple[int, int]:
        """Changes whenever a commit may have changed the database. SQLite's data_version only counts
        other connections' commits; this one's are counted by the rows it changed (an own write whose
        sync was interrupted after the commit must not look as seen)."""
        with self.lock:
            return self.db.execute("PRAGMA data_version").fetchone()[0], self.db.total_changes

    def close(self) -> None:
        with self.lock:
            if self.checkpoints is not None:
                self.checkpoints.close()
            try:
                if not self.read_only:
                    self.db.execute("PRAGMA optimize")
            except sqlite3.DatabaseError:
                pass
            self.db.close()
