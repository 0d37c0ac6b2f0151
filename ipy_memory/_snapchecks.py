"""The CRC checks of index snapshots (`_npz`): whole members now or later, or piece by piece.

`load_npz` checks most members as it loads them. A member that holds only values may be left for
later (`LaterChecks`): it is checked on the scan thread beside the caller's first use of it, and
readers of its rows check them while they are in cache (`RowChecks`); the caller waits for that
check before anything it computed from the member leaves it, unless every piece it read was checked
against a CRC of its own first (the check is then `covered` and runs after the answer). A member
stored with one CRC per piece is checked piece by piece as it is first read (`PieceChecks`), the
rest after the answer. A failed check is a `DamagedSnapshot`, and its file is not trusted."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from . import _kernels
from ._crc import CrcJob
from ._threads import SCANS
from ._topk import unique


class DamagedSnapshot(ValueError):
    """A snapshot file that is not what it claims: a bad zip, a failed CRC, a member cut short."""


class _Check:
    """One file's members left for later: their CRCs as a CrcJob, made in process `pid`. `covered`:
    every read of them so far went through PieceChecks, so an answer need not wait for this check."""

    __slots__ = ("path", "infos", "buffers", "layouts", "job", "started", "pid", "covered")
    PIECE = 4 << 20             # bytes a thread checks at a time

    def __init__(self, path: Path, infos: list, buffers: list, layouts: dict):
        self.path, self.infos, self.buffers, self.layouts = path, infos, buffers, layouts
        self.covered = False
        self.renew()

    def renew(self) -> None:
        self.job, self.started, self.pid = CrcJob(self.buffers, self.PIECE, self.layouts), False, os.getpid()


class RowChecks:
    """The check of a member left for later, for whoever reads its rows (after `head` bytes of .npy
    header, rows of `row_bytes`, the first at `address` in the mapping): see `read`. (Each call uses
    the job of this process: _Check.renew().)"""

    __slots__ = ("check", "member", "head", "row_bytes", "address")

    def __init__(self, check: _Check, member: int, head: int, row_bytes: int, address: int):
        self.check, self.member, self.head, self.row_bytes, self.address = check, member, head, row_bytes, address

    def read(self, lo: int, rows: np.ndarray, scan, scan_crc) -> None:
        """scan(rows), rows lo.. of the member, and their check: by scan_crc(rows) instead, which
        scans them and returns their CRC in the same pass, if they are a piece of the check that no
        thread has taken and are read from the mapping itself (not a copy); else the piece is
        checked after the scan, if it is free, while the rows are in cache."""
        job, at = self.check.job, self.head + lo * self.row_bytes
        k = None
        if rows.ctypes.data == self.address + lo * self.row_bytes:
            k = job.take(self.member, at, rows.nbytes)
        if k is None:
            scan(rows)
            job.offer(self.member, at)
            return
        try:
            crc = scan_crc(rows)
        except BaseException:
            job.finish(k)            # (a taken piece must be done for the check to end)
            raise
        job.provide(k, crc)


class PieceChecks:
    """A member stored with one CRC per piece (`crcs`), each piece checked at its first use:
    `ensure(pieces)` before reading them, or `confirm(pieces, crcs)` with the CRCs that a reader
    computed as it read them (before anything it computed from them is used). `compute(pieces)`
    gives the CRCs of pieces (an ascending int64 array) as they read now; a failed piece is
    reported to `checks` (as damage to the file `path`) and raised."""

    def __init__(self, crcs: np.ndarray, compute, path: Path, member: str, checks: "LaterChecks"):
        self.crcs, self.compute, self.path, self.member, self.checks = crcs, compute, path, member, checks
        self.done = np.zeros(len(crcs), bool)
        self.rest_task = None        # (pid, Task) of `rest` on the scan thread, once watched (LaterChecks)

    def ensure(self, pieces: np.ndarray) -> None:
        pieces = np.asarray(pieces, np.int64)
        todo = unique(pieces[~self.done[pieces]])
        if len(todo):
            self.confirm(todo, self.compute(todo))

    def confirm(self, pieces: np.ndarray, crcs: np.ndarray) -> None:
        """`crcs`: the CRCs of `pieces` as a reader computed them while it read them."""
        bad = pieces[crcs != self.crcs[pieces]]
        if len(bad):
            exc = self._damage(int(bad[0]))
            self.checks.report(self.path, exc)
            raise exc
        self.done[pieces] = True        # (two threads may check a piece twice: harmless)

    def damaged_piece(self) -> int | None:
        """Check every piece not checked yet: the first that fails (not reported), or None."""
        for lo in range(0, len(self.crcs), 4096):
            todo = np.arange(lo, min(lo + 4096, len(self.crcs)))
            todo = todo[~self.done[todo]]
            if len(todo):
                ok = self.compute(todo) == self.crcs[todo]
                self.done[todo[ok]] = True
                if not ok.all():
                    return int(todo[~ok][0])
        return None

    def rest(self) -> None:
        """Check every piece not checked yet; damage is reported, not raised."""
        bad = self.damaged_piece()
        if bad is not None:
            self.checks.report(self.path, self._damage(bad))

    def _damage(self, piece: int) -> DamagedSnapshot:
        return DamagedSnapshot(f"{self.path}: piece {piece} of {self.member} fails its CRC check")


def piece_count(n: int, per: int) -> int:
    """How many pieces of `per` items (the last one shorter) n items make."""
    return -(-n // per)


def chunk_crcs(array: np.ndarray, n: int, chunks: np.ndarray, per: int) -> np.ndarray:
    """The CRC of each of `chunks` of the first n rows (or items) of the C-contiguous `array`:
    chunk c is rows c * per up to (c + 1) * per or n."""
    whole = n // per
    out = np.empty(len(chunks), np.uint32)
    full = chunks < whole
    if full.any():
        crcs = np.empty(int(full.sum()), np.uint32)
        _kernels.crc32_rows(array[:whole * per].reshape(whole, -1), chunks[full], crcs)
        out[full] = crcs
    if not full.all():                # the last chunk, shorter
        out[~full] = _kernels.crc32(np.ascontiguousarray(array[whole * per:n]))
    return out


class LaterChecks:
    """The CRC checks that `load_npz(..., later=..., checks=self)` left for later. `start()` hands
    them to the scan thread (a recall does once its vector scan is queued: the scan comes first),
    `help()` takes a share on the calling thread, `failed()` does both and waits for the rest.
    Checks that are `covered` (see _Check) wait until a recall has answered, and the damage
    PieceChecks found is `report`ed here to come out of `failed()` with the rest."""

    def __init__(self):
        self.pending: list[_Check] = []
        self.damaged: list[tuple[Path, Exception]] = []
        self.hooks: dict[tuple[Path, str], object] = {}     # see load_npz; taken by the loader
        # piece checks of members no whole check covers: what a recall leaves unchecked is checked
        # on the scan thread once it has answered, and waited for by the next call (`failed`)
        self.watched: list[tuple[PieceChecks, object]] = []     # (checks, called once all passed)

    @property
    def busy(self) -> bool:
        return bool(self.pending or self.damaged or self.watched)

    def report(self, path: Path, exc: Exception) -> None:
        if all(p != path for p, _ in self.damaged):      # (two parts of a scan may find one file's damage)
            self.damaged.append((path, exc))

    def watch(self, pieces: PieceChecks, checked) -> None:
        self.watched.append((pieces, checked))

    def add(self, path: Path, infos: list, buffers: list, layouts: dict | None = None) -> _Check:
        check = _Check(path, infos, buffers, layouts or {})
        self.pending.append(check)
        return check

    def _current(self) -> list[_Check]:
        """The pending checks; in a forked child each starts afresh (its copy of a job may count a
        piece, or hold a lock, that a thread of the parent had when the process forked)."""
        for check in self.pending:
            if check.pid != os.getpid():
                check.renew()
        return self.pending

    def start(self, covered: bool = False) -> None:
        for check in self._current():
            if not check.started and (covered or not check.covered):
                SCANS.submit(check.job.work)
                check.started = True
        if covered:
            for pieces, _ in self.watched:
                if pieces.rest_task is None or pieces.rest_task[0] != os.getpid():   # (a forked child
                    pieces.rest_task = os.getpid(), SCANS.submit(pieces.rest)     # runs no parent task)

    def help(self) -> None:
        """Take on what is left of the pending checks that are not covered on this thread."""
        for check in self._current():
            if not check.covered:
                check.job.work()

    def failed(self, wait_covered: bool = True) -> list[tuple[Path, Exception]]:
        """Wait for every pending check (but, without `wait_covered`, the covered ones and watched
        pieces still running, which go on in the background); the files that failed theirs or were
        reported, with the reason."""
        self.start(covered=True)
        pending = self.pending
        self.pending = [c for c in pending if c.covered and not wait_covered and not c.job.done()]
        self.hooks.clear()
        if wait_covered:
            watched, self.watched = self.watched, []
            for pieces, checked in watched:
                try:
                    pieces.rest_task[1].result()
                except Exception as exc:  # noqa: BLE001  (a file its check could not read is not trusted)
                    self.report(pieces.path, DamagedSnapshot(f"{pieces.path}: checking {pieces.member} failed: {exc}"))
                    continue
                if pieces.done.all():
                    checked()
        out, self.damaged = self.damaged, []
        for check in pending:
            if check in self.pending:
                continue
            try:
                verify(check.path, check.infos, check.job.result())
            except DamagedSnapshot as exc:
                out.append((check.path, exc))
        return out


def verify(path: Path, infos: list, crcs: list[int]) -> None:
    for info, crc in zip(infos, crcs):
        if crc != info.CRC:
            raise DamagedSnapshot(f"{path}: {info.filename} fails its CRC check")
