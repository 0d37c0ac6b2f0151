"""backup(): where a copy of the database may go, and writing it there without ever leaving half of it.

A backup target must not be anything the live store (or another one) still uses: replacing the
database's -wal file, say, destroys the store. So the target may not be the live database, a
SQLite -wal/-shm/-journal file or a file of the store's index directory; an existing target must
be a backup made by backup() (marked so in its meta table; a store's own database, even closed,
is not one) that nobody has open: a device such as /dev/null, a FIFO or someone's notes are never
replaced. Each backup writes its own temporary file, so two kernels backing up to one path at once
each publish a whole copy (the last one wins).
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from . import _validate as v
from .errors import InvalidArgument, StorageError

SIDECARS = ("-wal", "-shm", "-journal")        # the files SQLite keeps beside a database it has open
BACKUP_MARK = "backup_of"       # meta key of a backup: the store it copies (a store clears it at open)
_SQLITE_MAGIC = b"SQLite format 3\x00"


def target_path(path, db_path: Path, index_dir: Path) -> Path:
    """The resolved file `path` names, if backup() may write it; InvalidArgument saying why not."""
    raw = v.path(path, "backup path")
    try:
        return _checked(Path(raw).expanduser().resolve(), db_path, index_dir)
    except (OSError, RuntimeError) as exc:      # a name too long, a directory we may not search, a symlink loop
        raise InvalidArgument(f"backup path {raw[:200]!r} cannot be used: {exc}") from None


def _checked(target: Path, db_path: Path, index_dir: Path) -> Path:
    live = db_path.resolve()
    if target == live or _same_file(target, live):
        raise InvalidArgument("backup path is the live database itself: choose another file")
    if target.name.endswith(SIDECARS):
        raise InvalidArgument(f"{target} would be taken for a live database's -wal/-shm/-journal file "
                              f"(replacing {live}'s would destroy the store): choose another name")
    index = index_dir.resolve()
    if target == index or index in target.parents:
        raise InvalidArgument(f"{target} is inside the store's index directory {index}: choose a file outside it")
    if target.is_dir():
        raise InvalidArgument(f"{target} is a directory: pass a file path such as {target / 'memory-backup.sqlite3'}")
    if not target.parent.is_dir():
        raise InvalidArgument(f"{target.parent} does not exist (or is not a directory): create it first")
    if target.exists():
        _check_replaceable(target)
    return target


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)          # a hard link to the live database is the live database
    except OSError:
        return False


def _check_replaceable(target: Path) -> None:
    """An existing target is replaced only when it is a closed ipy_memory database (an older backup)."""
    if not stat.S_ISREG(target.stat().st_mode):
        raise InvalidArgument(f"{target} exists and is not a regular file (a device, FIFO or socket): "
                              "backup() only replaces an earlier backup file")
    if any(Path(f"{target}{s}").exists() for s in SIDECARS):
        raise InvalidArgument(f"{target} is a database in use (its -wal/-shm/-journal file is beside it): "
                              "backup() never replaces a live store")
    if not _is_backup(target):
        raise InvalidArgument(f"{target} exists and is not a backup made by backup() (another store's database "
                              "or some other file): choose a new file name")


def _is_backup(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            if f.read(16) != _SQLITE_MAGIC:
                return False
        # immutable: read without locks and without creating -shm/-wal files beside it
        con = sqlite3.connect(f"{path.as_uri()}?immutable=1", uri=True)
        try:
            return bool(con.execute(f"SELECT 1 FROM meta WHERE key = '{BACKUP_MARK}'").fetchone())
        finally:
            con.close()
    except (OSError, sqlite3.Error):
        return False


def write(store, target: Path) -> int:
    """Copy `store` (a Store) to `target` through a temporary file of its own beside it; returns its size."""
    import tempfile          # (here: it imports random, which an engine's import does without)
    try:    # (a short name: a long target's own name plus a suffix could pass the file system's limit)
        fd, name = tempfile.mkstemp(prefix=".ipy-memory-backup-", suffix=".partial", dir=target.parent)
    except OSError as exc:
        raise StorageError(f"backup to {target} failed: {exc}") from exc
    os.close(fd)
    tmp = Path(name)
    try:
        dst = sqlite3.connect(tmp)
        try:
            with store.lock:
                store.db.backup(dst)
            # A restored backup is a different store: index snapshots of the live one must not match it.
            dst.execute(f"INSERT OR REPLACE INTO meta SELECT '{BACKUP_MARK}', value FROM meta WHERE key = 'store_id'")
            dst.execute("UPDATE meta SET value = lower(hex(randomblob(8))) WHERE key = 'store_id'")
            dst.commit()
        finally:
            dst.close()
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
    except BaseException as exc:
        _remove(tmp)
        if isinstance(exc, (OSError, sqlite3.Error)):
            raise StorageError(f"backup to {target} failed: {exc}") from exc
        raise
    return target.stat().st_size


def _remove(tmp: Path) -> None:
    """The partial file and any journal SQLite left beside it; what cannot be removed is left alone."""
    for p in (tmp, *(Path(f"{tmp}{s}") for s in SIDECARS)):
        try:
            p.unlink(missing_ok=True)
        except OSError:
            pass
