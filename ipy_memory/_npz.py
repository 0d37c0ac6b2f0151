"""Index snapshots as `.npz` files whose arrays are memory-mapped when loaded, not copied.

A snapshot is an ordinary uncompressed `.npz` (`np.load` reads it) written so that each array's
data starts on a 64-byte boundary of the file (padding in the zip entry's extra field, as Android's
zipalign does). `load_npz` maps the file copy-on-write and hands out arrays that point into the
mapping: a new process on a warm page cache gets 100k memories' vectors (117 MB) in ~20 ms instead
of ~170 ms for `np.load`, which allocates, faults in and copies every byte. Every member's CRC-32
is still checked against the zip directory, so a damaged file is refused as `np.load` would refuse
it. Members the caller names in `later` that hold only values (floating-point or text: nothing
indexes memory by them) are checked on a background thread instead, beside the caller's first use
of them; members named in `own` are checked by the caller, piece by piece, with CRCs the snapshot
stores (both kinds of check are in `_snapchecks`). Snapshots are only ever replaced
(written aside, then `os.replace`), never rewritten in place, so a mapping stays valid while
another process saves a newer one. Windows cannot replace a mapped file, so there (and for
anything unexpected) arrays are read with `np.load`.
"""

from __future__ import annotations

import ast
import mmap
import os
import re
from pathlib import Path

import numpy as np

from ._crc import crc32_many
from ._snapchecks import DamagedSnapshot, LaterChecks, RowChecks, verify
from ._zipdir import members as zip_members

ALIGN = 64
_PADDING_ID = (0xD935).to_bytes(2, "little")     # the extra-field id zipalign-style tools use
_ZIP64_EXTRA = 20                                 # force_zip64: the local header carries 20 bytes more
MAP = os.name == "posix"
_PARALLEL_CRC = 4 << 20     # bytes: below this, starting a thread costs more than it saves
_VALUES = "fcUS"            # dtype kinds that may be checked later: floats, complex, text


def write_npz(path: Path, arrays: dict) -> None:
    """Write `arrays` to `path` as an uncompressed `.npz` with 64-byte aligned array data; a value
    may be a function giving the array, called when it is written (in order)."""
    import zipfile
    with open(path, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, value in arrays.items():
            value = np.asanyarray(value() if callable(value) else value)
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            # numpy pads the .npy header to a multiple of 64: align the member's start and the data is aligned
            start = f.tell() + 30 + len(info.filename.encode()) + _ZIP64_EXTRA + 4
            pad = -start % ALIGN
            info.extra = _PADDING_ID + pad.to_bytes(2, "little") + bytes(pad)
            with z.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, value, allow_pickle=False)


def replace_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """write_npz to a temporary file beside `path` (owner-only), then replace `path` with it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npz")
    write_npz(tmp, arrays)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def remove_stale_temps(directory: Path) -> None:
    """Delete the temporary files (`.<name>.<pid>.tmp...`) that a process killed while saving a
    snapshot or a graph left in `directory`: those of processes no longer running."""
    if not directory.is_dir():
        return
    for stale in directory.glob(".*.tmp*"):
        try:
            pid = int(stale.name.rsplit(".tmp", 1)[0].rsplit(".", 1)[1])
        except (IndexError, ValueError):
            pid = None
        if pid is None or not _running(pid):
            stale.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def load_npz(path: Path, later=(), checks: LaterChecks | None = None, own=()) -> dict[str, np.ndarray]:
    """All arrays of a snapshot. Raises OSError, EOFError or ValueError (DamagedSnapshot for a bad
    zip or CRC) if it is damaged. The members named in `later` whose dtype holds values only are
    checked in the background, the check added to `checks` (its failure is a DamagedSnapshot). A
    `later` mapping may give a member a number of rows: its check is then cut in parts of that many
    rows, and `checks.hooks[path, name]` is a RowChecks through which a reader of rows lo..hi checks
    them while they are in cache. The members whose names start with one of `own` are not checked
    here: the caller checks them, piece by piece (PieceChecks), with CRCs kept in another member."""
    if not MAP:
        return _read(path)
    with open(path, "rb") as f:
        if not os.fstat(f.fileno()).st_size:
            raise DamagedSnapshot(f"{path}: an empty file")
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # writes stay private to this process
    infos = zip_members(mapped) or _zip_members(path)
    if any(i.compress_type != 0 for i in infos):       # not stored: np.load inflates them
        return _read(path)
    out, members = {}, []
    for info in infos:
        at = info.header_offset
        if mapped[at:at + 4] != b"PK\x03\x04":
            raise DamagedSnapshot(f"{path}: bad local header for {info.filename}")
        start = at + 30 + int.from_bytes(mapped[at + 26:at + 28], "little") + int.from_bytes(mapped[at + 28:at + 30], "little")
        member = memoryview(mapped)[start:start + info.file_size]
        if len(member) != info.file_size:
            raise EOFError(f"{path}: {info.filename} is truncated")
        members.append((start, member))
    names = [info.filename[:-4] if info.filename.endswith(".npy") else info.filename for info in infos]
    arrays = [_array(mapped, *members[i], infos[i].filename) if checks is not None and names[i] in later else None
              for i in range(len(infos))]
    later_ok = [a is not None and a.dtype.kind in _VALUES for a in arrays]
    deferred = [i for i, ok in enumerate(later_ok) if ok]
    now = [i for i, ok in enumerate(later_ok) if not ok and not names[i].startswith(tuple(own))]
    verify(path, [infos[i] for i in now], _crcs([members[i][1] for i in now]))
    for i, name in enumerate(names):
        out[name] = arrays[i] if arrays[i] is not None else _array(mapped, *members[i], infos[i].filename)
    if deferred:
        layouts, hooks = {}, {}
        for j, i in enumerate(deferred):
            rows = later.get(names[i]) if isinstance(later, dict) else None
            a = arrays[i]
            if rows and a.ndim:
                row_bytes = a.dtype.itemsize * int(np.prod(a.shape[1:], dtype=np.int64))
                head = len(members[i][1]) - a.nbytes          # the .npy header
                layouts[j] = (head, rows * row_bytes)
                hooks[names[i]] = (j, head, row_bytes, a.ctypes.data)
        check = checks.add(path, [infos[i] for i in deferred], [members[i][1] for i in deferred], layouts)
        for name, (j, head, row_bytes, address) in hooks.items():
            checks.hooks[path, name] = RowChecks(check, j, head, row_bytes, address)
    return out


def _crcs(members: list[memoryview]) -> list[int]:
    """CRC-32 of each member, on two threads when there are megabytes to check (100k memories: the
    lexical snapshot, 52 MB, 20 -> 13 ms; the vector snapshot, 117 MB, 41 -> ~23 ms on 2 cores)."""
    many = (os.cpu_count() or 1) >= 2 and sum(len(m) for m in members) >= _PARALLEL_CRC
    return crc32_many(members, 2 if many else 1)


# the header numpy's writer makes (np.lib.format), read without ast.literal_eval: 35 us a member,
# 1.6 ms of a cold start's 46 lexical members; any other header is read by literal_eval
_NPY_HEADER = re.compile(r"\{'descr': '([^']+)', 'fortran_order': (False|True), 'shape': \(((?:\d+, ?)*(?:\d+)?)\), \} *\n?")


def _header(text: str) -> dict:
    m = _NPY_HEADER.fullmatch(text)
    if m is None:
        return ast.literal_eval(text)
    return {"descr": m[1], "fortran_order": m[2] == "True", "shape": tuple(int(x) for x in m[3].split(",") if x)}


def _array(mapped: mmap.mmap, start: int, member: memoryview, label: str) -> np.ndarray:
    """The array of the `.npy` image `member` (at `start` in `mapped`), pointing into the mapping."""
    try:
        if bytes(member[:6]) != b"\x93NUMPY":
            raise ValueError("no .npy magic")
        size_len = 2 if member[6] == 1 else 4
        header_len = int.from_bytes(member[8:8 + size_len], "little")
        offset = 8 + size_len + header_len
        header = _header(bytes(member[8 + size_len:offset]).decode("latin1"))
        dtype, shape = np.dtype(header["descr"]), tuple(int(x) for x in header["shape"])
        if header["fortran_order"] or dtype.hasobject or any(x < 0 for x in shape):
            raise ValueError("not a plain C-order array")
    except (ValueError, SyntaxError, TypeError, KeyError, IndexError, MemoryError) as exc:
        raise ValueError(f"{label}: not a readable .npy member ({exc})") from None
    count = int(np.prod(shape, dtype=np.int64))
    if offset + count * dtype.itemsize != len(member):
        raise ValueError(f"{label}: its size does not match its shape")
    array = np.frombuffer(mapped, dtype, count=count, offset=start + offset).reshape(shape)
    return array if array.flags.aligned else array.copy()     # a file written by plain np.savez


def _zip_members(path: Path) -> list:
    """The members as zipfile reads them: for a layout _zipdir does not read, or a damaged one."""
    import zipfile
    try:
        with zipfile.ZipFile(path) as z:
            return z.infolist()
    except zipfile.BadZipFile as exc:
        raise DamagedSnapshot(f"{path}: {exc}") from None


def _read(path: Path) -> dict[str, np.ndarray]:
    import zipfile
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except zipfile.BadZipFile as exc:
        raise DamagedSnapshot(f"{path}: {exc}") from None
