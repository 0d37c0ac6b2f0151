"""Snapshot files: aligned, memory-mapped on load, CRC-checked, readable by plain numpy."""

import functools
import mmap
import zipfile
import zlib

import numpy as np
import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from ipy_memory import MemoryEngine, Settings, _crc, _npz, _snapchecks

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
    with pytest.raises(_snapchecks.DamagedSnapshot, match="CRC"):
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
    checks = _snapchecks.LaterChecks()
    check_equal(_npz.load_npz(path, later, checks), ARRAYS)
    assert len(checks.pending) == 1 and checks.failed() == [] and not checks.pending

    bad_hot = damaged_copy(path, "hot")
    with pytest.raises(_snapchecks.DamagedSnapshot, match="hot.npy fails its CRC"):
        _npz.load_npz(bad_hot)                    # not named later: refused at once
    got = _npz.load_npz(bad_hot, later, checks)
    assert not np.array_equal(got["hot"], ARRAYS["hot"])      # handed out, unchecked...
    [(where, exc)] = checks.failed()                           # ...until the check says so
    assert where == bad_hot and "hot.npy fails its CRC" in str(exc)

    for member in ("keys", "seq"):                # integers are never left for later, named or not
        with pytest.raises(_snapchecks.DamagedSnapshot, match=f"{member}.npy fails its CRC"):
            _npz.load_npz(damaged_copy(path, member, at=130), later | {member}, checks)
    assert not checks.pending                     # a refused file leaves no check behind


def test_headers_of_numpys_writer_are_read_without_literal_eval_and_others_with_it(tmp_path, monkeypatch):
    _npz.write_npz(tmp_path / "s.npz", ARRAYS)
    with monkeypatch.context() as m:                      # numpy's own layout: the fast path only
        m.setattr(_npz.ast, "literal_eval", lambda text: pytest.fail(f"literal_eval({text!r})"))
        check_equal(_npz.load_npz(tmp_path / "s.npz"), ARRAYS)
    path = tmp_path / "other.npz"
    want = np.arange(6, dtype="<i4").reshape(2, 3)
    header = b"{'shape': (2, 3), 'descr': '<i4', 'fortran_order': False}"      # valid, in another order
    header += b" " * (64 - 10 - len(header) - 1) + b"\n"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x.npy", b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + want.tobytes())
    np.testing.assert_array_equal(_npz.load_npz(path)["x"], want)


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


# ------------------------------------------------------------------------ the zip directory reader
def zipfile_view(path):
    with zipfile.ZipFile(path) as z:
        return [(i.filename, i.CRC, i.compress_type, i.compress_size, i.file_size, i.header_offset)
                for i in z.infolist()]


def zip_layouts(tmp_path, monkeypatch):
    """Files as write_npz, np.savez and np.savez_compressed write them, and a ZIP64 one: zipfile
    writes its ZIP64 records and extra fields once a size passes ZIP64_LIMIT, here lowered."""
    _npz.write_npz(tmp_path / "ours.npz", ARRAYS)
    np.savez(tmp_path / "numpy.npz", **ARRAYS)
    np.savez_compressed(tmp_path / "packed.npz", **ARRAYS)
    with monkeypatch.context() as m:
        m.setattr(zipfile, "ZIP64_LIMIT", 1000)
        m.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 3)
        _npz.write_npz(tmp_path / "zip64.npz", ARRAYS)
    return sorted(tmp_path.glob("*.npz"))


def test_zip_directory_reads_what_zipfile_reads(tmp_path, monkeypatch):
    from ipy_memory import _zipdir
    paths = zip_layouts(tmp_path, monkeypatch)
    assert b"PK\x06\x06" in (tmp_path / "zip64.npz").read_bytes()     # the ZIP64 end record is there
    for path in paths:
        assert [tuple(m) for m in _zipdir.members(path.read_bytes())] == zipfile_view(path), path.name
    check_equal(_npz.load_npz(tmp_path / "zip64.npz"), ARRAYS)


def test_zip_directory_leaves_other_layouts_and_damage_to_zipfile(tmp_path, monkeypatch):
    from ipy_memory import _zipdir
    path = tmp_path / "s.npz"
    _npz.write_npz(path, ARRAYS)
    raw = path.read_bytes()
    with zipfile.ZipFile(tmp_path / "commented.npz", "w") as z:
        z.writestr("x.npy", b"")
        z.comment = b"a comment"
    cut = raw[:raw.rindex(b"PK\x01\x02")] + raw[raw.rindex(b"PK\x05\x06"):]    # an entry missing
    for bad in (b"", raw[:-1], raw[:len(raw) // 2], cut, (tmp_path / "commented.npz").read_bytes(),
                raw.replace(b"PK\x01\x02", b"PK\x01\x03")):
        assert _zipdir.members(bad) is None
    for bad in (raw[:-1], cut, raw[:len(raw) // 2]):
        path.write_bytes(bad)
        with pytest.raises(_snapchecks.DamagedSnapshot):
            _npz.load_npz(path)


@given(st.binary(max_size=300), st.integers(0, 2000))
@settings(max_examples=300, deadline=None)
def test_zip_directory_never_raises_on_garbage(noise, at):
    from ipy_memory import _zipdir
    raw = bytearray(ZIP_BYTES)
    raw[at:at + len(noise)] = noise
    got = _zipdir.members(bytes(raw))
    assert got is None or all(isinstance(m.filename, str) for m in got)


def _zip_bytes() -> bytes:
    import io
    buf = io.BytesIO()
    np.savez(buf, a=np.arange(3), b=np.zeros(2))
    return buf.getvalue()


ZIP_BYTES = _zip_bytes()


def test_loading_a_snapshot_needs_no_zipfile(tmp_path):
    import subprocess
    import sys
    _npz.write_npz(tmp_path / "s.npz", ARRAYS)
    script = ("import sys, numpy; numpy_own = set(sys.modules); "        # (numpy 1.24's import loads hashlib)
              "from ipy_memory import _npz; _npz.load_npz(sys.argv[1]); "
              "late = [m for m in ('zipfile', 'hashlib') if m in sys.modules and m not in numpy_own]; assert not late, late")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "s.npz")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_later_checks_start_afresh_in_a_forked_child(tmp_path):
    import os
    import signal
    path = tmp_path / "s.npz"
    _npz.write_npz(path, ARRAYS)
    bad = damaged_copy(path, "hot")
    checks = _snapchecks.LaterChecks()
    _npz.load_npz(bad, {"hot"}, checks)
    job = checks.pending[0].job
    job._take()                          # a piece a thread of the parent had taken...
    with job._lock:                      # ...and the lock it held, when the process forked
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.alarm(10)         # the copied job would wait for that piece forever
                code = 0 if [p for p, _ in checks.failed()] == [bad] else 1
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_crc_job_pieces_offered_by_readers_give_the_same_crcs():
    """CrcJob with a layout (a head, then fixed steps): pieces checked through offer() by a reader,
    in any order and beside work(), give zlib's CRCs; an offer of a taken piece, of an offset that
    starts no piece, or while the lock is held elsewhere does nothing and never waits."""
    rng = np.random.default_rng(3)
    buffers = [rng.bytes(10_000), rng.bytes(777), b""]
    want = [zlib.crc32(b) for b in buffers]
    for offers in ([], [(0, 128), (0, 128 + 4 * 1000)], [(0, 128 + 1000 * k) for k in range(10)][::-1]):
        job = _crc.CrcJob(buffers, 300, {0: (128, 1000)})
        for i, at in offers:
            job.offer(i, at)
        job.offer(0, 5)                       # no piece starts there
        job.offer(0, 128)                     # taken already, or taken now
        assert job.result() == want
    job = _crc.CrcJob(buffers, 300, {0: (128, 1000)})
    with job._lock:
        job.offer(0, 128)                     # returns at once
    assert not job._taken[job._at[(0, 128)]] and job.result() == want


def test_crc_job_pieces_taken_by_readers_are_checked_with_the_crc_they_give():
    """take() hands a free piece of the given start (and size) to its caller once; the CRC the
    caller provides, or finish() computes, completes the check like any other piece."""
    rng = np.random.default_rng(5)
    buffers = [rng.bytes(10_000), rng.bytes(777)]
    want = [zlib.crc32(b) for b in buffers]
    job = _crc.CrcJob(buffers, 300, {0: (128, 1000)})
    assert job.take(0, 5) is None                          # no piece starts there
    assert job.take(0, 128, 999) is None                   # one does, but not of that size
    k = job.take(0, 128, 1000)
    assert k is not None and job.take(0, 128, 1000) is None and job.take(0, 128) is None    # taken once
    job.provide(k, zlib.crc32(buffers[0][128:1128]))
    last = job.take(0, 128 + 9 * 1000)                     # the last piece runs to the end (872 bytes)
    job.finish(last)
    assert job.result() == want
    job = _crc.CrcJob(buffers, 300, {0: (128, 1000)})
    job.provide(job.take(0, 1128), 0xDEADBEEF)             # a reader's wrong CRC fails the check
    assert job.result()[0] != want[0] and job.result()[1] == want[1]


def test_row_checks_let_only_readers_of_the_mapping_check_rows_in_their_own_pass(tmp_path):
    """A member left for later with a row layout gets a RowChecks hook: a reader of a piece's rows
    from the mapping itself checks them with the CRC its own pass gives; one reading a copy (its
    bytes are not the file's) or rows that are no piece scans them, and the piece is checked from
    the mapping. Either way a wrong CRC from the reader is caught, and a failed scan still ends its
    piece's check."""
    path = tmp_path / "s.npz"
    _npz.write_npz(path, ARRAYS)
    hot = ARRAYS["hot"]

    def load():
        checks = _snapchecks.LaterChecks()
        got = _npz.load_npz(path, {"hot": 4}, checks)
        return checks, checks.hooks[path, "hot"], got["hot"]

    for rows_of, fused in ((lambda m, lo: m[lo:lo + 4], True), (lambda m, lo: m[lo:lo + 4].copy(), False),
                           (lambda m, lo: m[lo:lo + 3], False)):
        checks, hook, mapped_hot = load()
        scans = []
        for lo in range(0, len(hot), 4):
            hook.read(lo, rows_of(mapped_hot, lo), lambda r: scans.append("scan"),
                      lambda r: scans.append("crc") or zlib.crc32(r.tobytes()))
        assert set(scans) == {"crc" if fused else "scan"} and len(scans) == len(hot) // 4
        assert checks.failed() == []
    checks, hook, mapped_hot = load()
    hook.read(8, mapped_hot[8:12], None, lambda r: 0xDEADBEEF)          # a reader's wrong CRC
    assert [p.name for p, _ in checks.failed()] == [path.name]
    checks, hook, mapped_hot = load()

    def failing(rows):
        raise MemoryError
    with pytest.raises(MemoryError):
        hook.read(0, mapped_hot[0:4], None, failing)
    assert checks.failed() == []                                         # its piece checked all the same


def test_watched_piece_checks_are_redone_in_a_forked_child(tmp_path):
    """A recall leaves the pieces it did not read to the scan thread; a child forked meanwhile has
    no such thread (nor its queue): its next call checks them itself instead of waiting forever."""
    import os
    import signal
    import threading
    from ipy_memory._threads import SCANS
    data = np.arange(64 * 256, dtype=np.uint8).reshape(64, 256)
    compute = lambda pieces: _snapchecks.chunk_crcs(data, len(data), pieces, 1)     # noqa: E731
    crcs = compute(np.arange(64))
    crcs[40] ^= 1
    checks = _snapchecks.LaterChecks()
    pieces = _snapchecks.PieceChecks(crcs, compute, tmp_path / "x.npz", "rows", checks)
    checks.watch(pieces, lambda: None)
    gate = threading.Event()
    SCANS.submit(gate.wait, 30)                   # the scan thread busy: the rest is only queued
    checks.failed(wait_covered=False)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.alarm(10)
            code = 0 if [p for p, _ in checks.failed()] == [tmp_path / "x.npz"] else 1
        finally:
            os._exit(code)
    gate.set()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert [str(e) for _, e in checks.failed()] == [f"{tmp_path / 'x.npz'}: piece 40 of rows fails its CRC check"]


def test_a_watched_check_that_cannot_read_its_file_counts_as_damage(tmp_path):
    """A watched rest check that raises (the file unreadable, memory short) is reported as damage
    to its file, and the whole-file checks pending beside it are still verified and reported."""
    good = np.arange(4096, dtype=np.uint8)
    path = tmp_path / "w.npz"
    _npz.write_npz(path, {"v": good.astype(np.float32)})
    checks = _snapchecks.LaterChecks()
    _npz.load_npz(path, later=("v",), checks=checks)            # a whole-file check left pending

    def unreadable(pieces):
        raise OSError("input/output error")
    pieces = _snapchecks.PieceChecks(np.zeros(4, np.uint32), unreadable, tmp_path / "x.npz", "rows", checks)
    checks.watch(pieces, lambda: None)
    assert [(p, "input/output error" in str(e)) for p, e in checks.failed()] == [(tmp_path / "x.npz", True)]
    assert not checks.pending and not checks.watched and not checks.busy
