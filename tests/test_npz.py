"""Snapshot files: aligned, memory-mapped on load, CRC-checked, readable by plain numpy."""

import functools
import mmap
import zipfile
import zlib

import numpy as np
import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from ipy_memory import MemoryEngine, Settings, _crc, _npz

ARRAYS = {
    "seq": np.array(7), "store_id": np.array("0123456789abcdef"), "keys": np.arange(5, dtype=np.int64),
    "hot": np.random.default_rng(0).standard_normal((300, 384)).astype(np.float16),
    "low": np.zeros((0, 384), np.int8), "doc_ids": np.array(["a", "bcd", ""]), "state": np.array('{"v": 5}'),
}


def mapped(a: np.ndarray) -> bool:
    while isinstance(a, (np.ndarray, memoryview)):
        a = a.base if isinstance(a, np.ndarray) else a.obj
    return isinstance(a, mmap.mmap)


def check_equal(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape and np.array_equal(got[k], v), k


def test_round_trip_is_aligned_mapped_and_plain_npz(tmp_path):
    _npz.write_npz(tmp_path / "s.npz", ARRAYS)
    got = _npz.load_npz(tmp_path / "s.npz")
    check_equal(got, ARRAYS)
    assert all(a.flags.aligned and a.flags.writeable for a in got.values())
    if _npz.MAP:
        assert mapped(got["hot"]) and got["hot"].ctypes.data % _npz.ALIGN == 0
    got["hot"][0, 0] = 42                                  # copy-on-write: the file keeps its bytes
    check_equal(_npz.load_npz(tmp_path / "s.npz"), ARRAYS)
    with np.load(tmp_path / "s.npz", allow_pickle=False) as data:   # an ordinary .npz for numpy
        check_equal({k: data[k] for k in data.files}, ARRAYS)


def test_reads_files_written_by_numpy(tmp_path):
    np.savez(tmp_path / "plain.npz", **ARRAYS)                      # unaligned members: copied
    got = _npz.load_npz(tmp_path / "plain.npz")
    check_equal(got, ARRAYS)
    assert all(a.flags.aligned for a in got.values())
    np.savez_compressed(tmp_path / "packed.npz", **ARRAYS)         # compressed: read by numpy
    check_equal(_npz.load_npz(tmp_path / "packed.npz"), ARRAYS)


@pytest.mark.parametrize("where", ["data", "header"])
@pytest.mark.parametrize("parallel", [False, True])
def test_damage_is_refused(tmp_path, monkeypatch, where, parallel):
    if parallel:          # the CRCs of large snapshots are checked on two threads, large members in halves
        monkeypatch.setattr(_npz, "_PARALLEL_CRC", 0)
        monkeypatch.setattr(_npz.os, "cpu_count", lambda: 2)
        monkeypatch.setattr(_npz, "crc32_many", functools.partial(_crc.crc32_many, split=1000))
    path = tmp_path / "s.npz"
    _npz.write_npz(path, ARRAYS)
    raw = bytearray(path.read_bytes())
    at = raw.index(b"\x93NUMPY", raw.index(b"hot.npy"))
    raw[at + (200 if where == "data" else 20)] ^= 0x5A
    path.write_bytes(bytes(raw))
    with pytest.raises(zipfile.BadZipFile, match="CRC"):
        _npz.load_npz(path)


def damaged_copy(path, member: str, at: int = 200):
    raw = bytearray(path.read_bytes())
    raw[raw.index(b"\x93NUMPY", raw.index(member.encode() + b".npy")) + at] ^= 0x5A
    out = path.with_name(f"{member}-{at}.npz")
    out.write_bytes(bytes(raw))
    return out


def test_value_members_named_later_are_checked_in_the_background(tmp_path):
    path = tmp_path / "s.npz"
    _npz.write_npz(path, ARRAYS)
    later = {"hot", "doc_ids", "keys"}           # keys: int64, so checked before the load returns
    checks = _npz.LaterChecks()
    check_equal(_npz.load_npz(path, later, checks), ARRAYS)
    assert len(checks.pending) == 1 and checks.failed() == [] and not checks.pending

    bad_hot = damaged_copy(path, "hot")
    with pytest.raises(zipfile.BadZipFile, match="hot.npy fails its CRC"):
        _npz.load_npz(bad_hot)                    # not named later: refused at once
    got = _npz.load_npz(bad_hot, later, checks)
    assert not np.array_equal(got["hot"], ARRAYS["hot"])      # handed out, unchecked...
    [(where, exc)] = checks.failed()                           # ...until the check says so
    assert where == bad_hot and "hot.npy fails its CRC" in str(exc)

    for member in ("keys", "seq"):                # integers are never left for later, named or not
        with pytest.raises(zipfile.BadZipFile, match=f"{member}.npy fails its CRC"):
            _npz.load_npz(damaged_copy(path, member, at=130), later | {member}, checks)
    assert not checks.pending                     # a refused file leaves no check behind


def test_member_that_lies_about_its_shape_is_refused(tmp_path):
    path = tmp_path / "s.npz"
    with zipfile.ZipFile(path, "w") as z:                  # a valid zip whose .npy header is wrong
        with z.open("x.npy", "w") as f:
            np.lib.format.write_array(f, np.zeros(4))
        with z.open("y.npy", "w") as f:
            f.write(b"\x93NUMPY\x01\x00\x10\x00{'descr': <<<  \n")
    with pytest.raises(ValueError, match="y.npy"):
        _npz.load_npz(path)


def test_a_mapped_snapshot_survives_its_replacement(tmp_path):
    """Kernel A maps the snapshots; kernel B saves newer ones: A answers as a newly opened kernel does."""
    hybrid = Settings(vector_weight_hash=0.5)               # so the mapped vectors rank too
    texts = [f"note {i} about the {['amber', 'cobalt', 'jade'][i % 3]} lantern {i % 41}" for i in range(600)]
    queries = ["amber lantern 7", "extra cobalt lantern 299", "jade note"]

    def answers(mem):
        return [[(h.id, round(h.score, 4)) for h in mem.recall(q)] for q in queries]

    with MemoryEngine(tmp_path, project="p", settings=hybrid) as mem:
        mem.remember_many([{"content": t, "force": True} for t in texts])
        mem.shards.get("project:p").vec                      # so both snapshots are saved at close
    with MemoryEngine(tmp_path, project="p", settings=hybrid) as a:
        answers(a)
        assert a.shards.get("project:p").vec.hot_count == len(texts)
        with MemoryEngine(tmp_path, project="p", settings=hybrid) as b:
            b.shards.get("project:p").vec
            b.remember_many([{"content": f"extra cobalt lantern {i}", "force": True} for i in range(300)])
            b.forget(b.list_memories(limit=1, offset=400)[0].id)     # one that A has mapped
        with MemoryEngine(tmp_path, project="p", settings=hybrid) as fresh:   # reads B's new snapshots
            assert answers(a) == answers(fresh)
            assert a.shards.get("project:p").vec.hot_count == fresh.shards.get("project:p").vec.hot_count == 899


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000), st.binary(max_size=3000))
def test_crc_of_a_concatenation_from_its_parts(a, b):
    assert _crc.combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_crc32_many_equals_zlib_for_pieces_of_any_size(threads):
    rng = np.random.default_rng(threads)
    buffers = [rng.bytes(n) for n in (0, 1, 7, 4096, 100_003)] + [np.zeros((0, 4), np.int8), rng.random((50, 3))]
    want = [zlib.crc32(b) for b in buffers]
    for split in (1, 10, 4097, 1 << 30):
        assert _crc.crc32_many(buffers, threads, split=split) == want
