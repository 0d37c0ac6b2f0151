"""A zip file's central directory read straight from a mapping of the file, without `zipfile`.

`zipfile` imports shutil, bz2, lzma and more: ~3 ms of a new process's `import ipy_memory` that only
writing a snapshot needs. Loading one needs just the list of members, which `members` reads for
the files `_npz.write_npz` and `np.savez` write (ZIP64 or not, no comment, one disk). For any other
layout, or a directory that does not add up, it returns None and the caller asks `zipfile`, which
reads what is valid and names what is not.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

_END = struct.Struct("<4sHHHHIIH")                     # end of central directory record, 22 bytes
_END64_LOCATOR = struct.Struct("<4sIQI")               # ZIP64 end of central directory locator, 20 bytes
_END64 = struct.Struct("<4sQHHIIQQQQ")                 # ZIP64 end of central directory record, 56 bytes
_ENTRY = struct.Struct("<4sHHHHHHIIIHHHHHII")          # central directory file header, 46 bytes
_MAX16, _MAX32 = 0xFFFF, 0xFFFFFFFF                    # "see the ZIP64 fields"


class Member(NamedTuple):
    """A member as `zipfile.ZipInfo` names these attributes."""
    filename: str
    CRC: int
    compress_type: int
    compress_size: int
    file_size: int
    header_offset: int


def members(data) -> list[Member] | None:
    """The members listed in the central directory of the zip file `data` (a buffer), or None."""
    try:
        return _members(memoryview(data).cast("B"))
    except (struct.error, UnicodeDecodeError, ValueError, IndexError):
        return None


def _members(buf: memoryview) -> list[Member] | None:
    end = len(buf) - _END.size
    if end < 0:
        return None
    sig, disk, cd_disk, _, count, cd_size, cd_offset, comment = _END.unpack_from(buf, end)
    if sig != b"PK\x05\x06" or comment or disk or cd_disk:
        return None
    if count == _MAX16 or _MAX32 in (cd_size, cd_offset):
        sig, _, end64, _ = _END64_LOCATOR.unpack_from(buf, end - _END64_LOCATOR.size)
        if sig != b"PK\x06\x07":
            return None
        sig, *_, count, cd_size, cd_offset = _END64.unpack_from(buf, end64)
        if sig != b"PK\x06\x06":
            return None
    out, at, stop = [], cd_offset, cd_offset + cd_size
    for _ in range(count):
        (sig, _, _, flags, method, _, _, crc, csize, usize, name_len, extra_len, comment_len, _, _, _,
         offset) = _ENTRY.unpack_from(buf, at)
        if sig != b"PK\x01\x02" or flags & 0x1:          # encrypted: zipfile says so
            return None
        at += _ENTRY.size
        if at + name_len + extra_len > len(buf):
            return None
        name = bytes(buf[at:at + name_len]).decode("utf-8" if flags & 0x800 else "cp437")
        extra = buf[at + name_len:at + name_len + extra_len]
        if _MAX32 in (usize, csize, offset):
            usize, csize, offset = _zip64_sizes(extra, usize, csize, offset)
        out.append(Member(name, crc, method, csize, usize, offset))
        at += name_len + extra_len + comment_len
    return out if at == stop else None


def _zip64_sizes(extra: memoryview, usize: int, csize: int, offset: int) -> tuple[int, int, int]:
    """The sizes and offset that the entry's ZIP64 extra field (id 1) holds in place of 0xFFFFFFFF,
    in the order the format gives them."""
    at = 0
    while at + 4 <= len(extra):
        kind, size = struct.unpack_from("<HH", extra, at)
        if kind == 1:
            values = list(struct.unpack_from(f"<{size // 8}Q", extra, at + 4))
            usize = values.pop(0) if usize == _MAX32 else usize
            csize = values.pop(0) if csize == _MAX32 else csize
            offset = values.pop(0) if offset == _MAX32 else offset
            return usize, csize, offset
        at += 4 + size
    raise ValueError("no ZIP64 extra field")
