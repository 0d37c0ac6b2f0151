"""A vector snapshot's int8 columns and its CRCs by piece (ColumnsMixin, _snapchecks.PieceChecks): saved,
used by a new process's first sparse query without a build, checked piece by piece as they are
read, and the snapshot's rows checked whole after the recall has answered."""

import shutil
import threading
import zipfile

import numpy as np
import pytest

from ipy_memory import MemoryEngine, Settings, _colscan, _colsnap, _crc, _npz, _snapchecks
from ipy_memory.vectors import VectorShard

HYBRID = Settings(vector_weight_hash=0.5)
WORDS = "alpha beta gamma delta kernel notebook pandas frame plot query index cache shard token".split()
RNG = np.random.default_rng(3)
TEXTS = [" ".join(RNG.choice(WORDS, RNG.integers(2, 12))) + f" note{i}" for i in range(900)]
QUERIES = [" ".join(RNG.choice(WORDS, RNG.integers(1, 4))) for _ in range(12)]


@pytest.fixture(autouse=True)
def small_spaces(monkeypatch):
    monkeypatch.setattr(_colscan, "SPARSE_MIN_ROWS", 100)
    monkeypatch.setattr(_colscan, "BLOCK", 256)         # several blocks, the last one partial


def results(mem):
    return [[(h.id, round(h.score, 5)) for h in mem.recall(q, scope="project", limit=10)] for q in QUERIES]


def space(mem):
    return mem.shards.get(mem._space("project", "p"))


@pytest.fixture
def store(tmp_path):
    with MemoryEngine(tmp_path / "s", project="p", settings=HYBRID) as mem:
        mem.remember_many([{"content": t, "force": True} for t in TEXTS])
        mem.forget(mem.recall("alpha beta", scope="project", limit=1)[0].id)     # a dead row before saving
        expected = results(mem)
    return tmp_path / "s", expected


def snapshot(path):
    return next((path / "index").glob("*.vec.npz"))


def member_at(snap, name):
    """(offset of the member's data in the file, its size) for an uncompressed .npy member."""
    raw = snap.read_bytes()
    at = raw.index(b"\x93NUMPY", raw.index(name.encode() + b".npy")) + 128
    return at, zipfile.ZipFile(snap).getinfo(name + ".npy").file_size - 128


def column_blocks(data):
    return [data[f"colblock.{b}"] for b in range(sum(k.startswith("colblock.") for k in data))]


def no_builds(monkeypatch):
    def build(*args):
        raise AssertionError("the columns were built instead of loaded")
    monkeypatch.setattr(_colscan, "Build", build)


def test_the_columns_are_saved_with_their_crcs_and_used_without_a_build(store, monkeypatch):
    path, expected = store
    data = _npz.load_npz(snapshot(path))
    hot, blocks = data["hot"], column_blocks(data)
    fresh = _colscan.ColumnScan(hot.shape[1])
    fresh.append(hot)
    want_blocks, want_scale = fresh.live_blocks()
    assert np.array_equal(np.hstack(blocks), np.hstack([make() for make in want_blocks]))
    assert np.array_equal(data["cols.scale"], want_scale) and len(hot) == len(TEXTS) - 1
    assert sum(b.shape[1] for b in blocks) == len(hot) and max(b.shape[1] for b in blocks) <= 256
    assert np.array_equal(data["cols.crc"], _colsnap.column_crcs(blocks, np.arange(len(data["cols.crc"]))))
    assert np.array_equal(data["hot.crc"], _snapchecks.chunk_crcs(hot, len(hot), np.arange(len(data["hot.crc"])), _colsnap.ROW_GROUP))
    assert len(data["hot.crc"]) == -(-len(hot) // _colsnap.ROW_GROUP)
    no_builds(monkeypatch)
    with MemoryEngine(path, project="p", settings=HYBRID) as mem:
        assert results(mem) == expected
        scan = space(mem).vec._columns
        assert scan.sealed == len(blocks) >= 3 and scan.checks.done.any() and not scan.checks.done.all()


def test_a_snapshot_without_columns_still_loads_and_builds_them(store, monkeypatch):
    path, expected = store
    monkeypatch.setattr(VectorShard, "column_members", lambda vec, hot: {})
    with MemoryEngine(path, project="p", settings=HYBRID) as mem:
        mem.recall(QUERIES[0], scope="project")
        mem.remember("one more note about pandas", force=True)      # dirty: saved again, without columns
    assert not column_blocks(_npz.load_npz(snapshot(path)))
    with MemoryEngine(path, project="p", settings=HYBRID) as mem:
        mem.recall(QUERIES[0], scope="project")
        vec = space(mem).vec
        assert vec._columns is None and vec._columns_job is not None and vec.row_checks is None


def test_rows_written_after_loading_go_to_new_blocks(store, monkeypatch):
    path, _ = store
    no_builds(monkeypatch)
    with MemoryEngine(path, project="p", settings=HYBRID) as mem:
        results(mem)
        scan = space(mem).vec._columns
        sealed = [b for b in scan.blocks]
        mem.remember_many([{"content": f"pandas kernel cache extra {i}", "force": True} for i in range(300)])
        got = results(mem)
        assert scan.blocks[:len(sealed)] == sealed and len(scan.blocks) > len(sealed)
        assert all(b.shape[1] <= 256 for b in scan.blocks)
    monkeypatch.setattr(_colscan, "SPARSE_MIN_ROWS", 10**9)      # the full scan's answers
    with MemoryEngine(path, project="p", settings=HYBRID) as mem:
        assert results(mem) == got


def test_columns_held_are_saved_without_their_dead_rows(store, monkeypatch):
    path, _ = store
    with MemoryEngine(path, project="p", settings=HYBRID) as mem:
        mem.recall(QUERIES[0], scope="project")
        vec = space(mem).vec
        vec._columns = None                                       # as if saved without: built here
        vec._columns_wanted = True
        vec.start_wanted_columns()
        vec._columns_job.wait()
        mem.forget(mem.recall("gamma delta", scope="project", limit=1)[0].id)
        mem.remember("a last note on pandas frames", force=True)
        held = vec._column_scan()
        assert held is not None and not vec.alive.view.all()
        expected = results(mem)
    data = _npz.load_npz(snapshot(path))
    widths = [b.shape[1] for b in column_blocks(data)]            # one block a row short: the dead one
    assert sum(widths) == len(data["hot"]) and max(widths) == 256 and widths.count(255) == 1
    no_builds(monkeypatch)
    with MemoryEngine(path, project="p", settings=HYBRID) as mem:
        assert results(mem) == expected


def blocked_scan_worker(monkeypatch):
    """Make the scan worker's CRC work wait until the test releases it (or 30 s pass): returns
    (release, log), log recording whether the test had released it in time."""
    release, log, real = threading.Event(), [], _crc.CrcJob.work

    def work(job):
        if threading.current_thread().name == "ipy_memory-scan":
            log.append(release.wait(30))
        return real(job)
    monkeypatch.setattr(_crc.CrcJob, "work", work)
    return release, log


def test_the_first_recall_answers_before_the_rows_are_checked_whole(store, monkeypatch):
    path, expected = store
    release, log = blocked_scan_worker(monkeypatch)
    with MemoryEngine(path, project="p", settings=HYBRID) as mem:
        first = mem.recall(QUERIES[0], scope="project", limit=10)
        checks = mem.shards.checks
        assert [c.covered for c in checks.pending] == [True]      # answered; the whole check still to do
        vec = space(mem).vec
        assert vec.row_checks.done.any() and not vec.row_checks.done.all()
        release.set()
        assert results(mem)[1:] == expected[1:]                   # the next call settles it
        assert not checks.pending and vec.scanned is None and vec.row_checks is None
    assert log == [True] and [(h.id, round(h.score, 5)) for h in first] == expected[0]


def test_a_recall_that_scans_every_row_waits_for_their_check(store, monkeypatch):
    """A dense query reads every row by the exact scan, which piece checks do not follow."""
    path, _ = store
    release, _ = blocked_scan_worker(monkeypatch)       # (the recall's own thread does the check)
    monkeypatch.setattr(_colscan, "SPARSE_MAX_SHARE", 0.0)         # no query by columns
    with MemoryEngine(path, project="p", settings=HYBRID) as mem:
        mem.recall(QUERIES[0], scope="project", limit=10)
        assert not mem.shards.checks.pending and space(mem).vec.scanned is None
        release.set()


def damage(snap, name, offset, size, fill=0x3C):
    at, total = member_at(snap, name)
    assert offset + size <= total
    raw = bytearray(snap.read_bytes())
    raw[at + offset:at + offset + size] = bytes([fill]) * size
    snap.write_bytes(bytes(raw))


def test_damaged_columns_are_caught_as_they_are_read(store, caplog, check_indexes):
    path, expected = store
    snap = snapshot(path)
    n = _npz.load_npz(snap)["hot"].shape[0]
    for b, block in enumerate(column_blocks(_npz.load_npz(snap))):
        damage(snap, f"colblock.{b}", 0, block.nbytes, fill=0x7F)          # every bound at its highest
    with MemoryEngine(path, project="p", settings=HYBRID) as mem:
        assert results(mem) == expected
        assert "rebuilding the index from the database" in caplog.text and "of cols" in caplog.text
        assert not check_indexes(mem)
    data = _npz.load_npz(snapshot(path))                      # saved again at close, whole
    assert data["hot"].shape[0] == n and np.array_equal(
        data["cols.crc"], _colsnap.column_crcs(column_blocks(data), np.arange(len(data["cols.crc"]))))


def test_a_damaged_row_the_recall_reads_is_caught_before_it_answers(store, caplog):
    path, expected = store
    snap = snapshot(path)
    with MemoryEngine(path, project="p", settings=HYBRID) as mem:
        top = mem.recall(QUERIES[0], scope="project", limit=1)[0]
        row = int(space(mem).vec._rows(np.array([mem.store.query(
            "SELECT key FROM nodes WHERE document_id = ?", (top.document_id,))[0][0]]))[0])
    damage(snap, "hot", row * 768, 768, fill=0x00)              # its vector zeroed: it would drop out
    with MemoryEngine(path, project="p", settings=HYBRID) as mem:
        assert results(mem) == expected
        assert "of hot fails its CRC check" in caplog.text


def test_a_damaged_row_no_recall_reads_is_caught_by_the_whole_check(store, caplog, tmp_path):
    """The recall answers from the rows it checked; the whole check finds the damage after it, and
    the next call rebuilds the vectors from SQLite."""
    path, expected = store
    snap = snapshot(path)
    n = _npz.load_npz(snap)["hot"].shape[0]
    with MemoryEngine(path, project="p", settings=HYBRID) as mem:
        mem.recall(QUERIES[0], scope="project", limit=10)
        read = space(mem).vec.row_checks.done
        group = int(np.flatnonzero(~read)[-1])                  # a group of rows the recall did not read
    damage(snap, "hot", group * _colsnap.ROW_GROUP * 768 + 100, 2)
    with MemoryEngine(path, project="p", settings=HYBRID) as mem:
        assert [(h.id, round(h.score, 5)) for h in mem.recall(QUERIES[0], scope="project", limit=10)] == expected[0]
        assert "rebuilding" not in caplog.text
        assert results(mem) == expected
        assert "rebuilding the index from the database" in caplog.text and "hot.npy fails its CRC" in caplog.text
    assert _npz.load_npz(snapshot(path))["hot"].shape[0] == n


def test_restore_refuses_columns_of_another_shape(store):
    path, _ = store
    data = dict(_npz.load_npz(snapshot(path)))
    vec = VectorShard(384, HYBRID, graph=False)
    data["cols.crc"] = data["cols.crc"][:-1]
    with pytest.raises(ValueError, match="columns"):
        vec.restore(data)
    other = VectorShard(384, HYBRID, graph=False)
    data = dict(_npz.load_npz(snapshot(path)), **{"hot.group": np.array(32)})     # another layout: ignored
    other.restore(data)
    assert other._columns is None and other.live == len(TEXTS) - 1


def test_piece_checks_report_and_raise(tmp_path):
    checks = _snapchecks.LaterChecks()
    blocks = [np.arange(4096, dtype=np.uint8).reshape(16, 256).astype(np.int8)]
    compute = lambda pieces: _colsnap.column_crcs(blocks, pieces)     # noqa: E731
    crcs = compute(np.arange(16))
    crcs[5] ^= 1
    pieces = _snapchecks.PieceChecks(crcs, compute, tmp_path / "x.npz", "cols", checks)
    pieces.ensure(np.array([1, 2, 2, 7]))
    assert list(np.flatnonzero(pieces.done)) == [1, 2, 7] and not checks.damaged
    with pytest.raises(_snapchecks.DamagedSnapshot, match="piece 5 of cols"):
        pieces.ensure(np.array([3, 5]))
    assert [p for p, _ in checks.damaged] == [tmp_path / "x.npz"] and not pieces.done[3]
    with pytest.raises(_snapchecks.DamagedSnapshot):
        pieces.ensure(np.array([5]))                               # found again (another part of a scan)
    assert len(checks.damaged) == 1                                # one file, reported once
    assert checks.failed() and not checks.damaged
    assert pieces.damaged_piece() == 5 and not checks.damaged          # checked, not reported
    assert pieces.done.sum() == 15 and not pieces.done[5]
    pieces.rest()
    assert [str(e) for _, e in checks.damaged] == [f"{tmp_path / 'x.npz'}: piece 5 of cols fails its CRC check"]


def test_the_first_search_of_a_loaded_snapshot_runs_on_the_recalls_thread(store, monkeypatch):
    """Beside the lexical scoring, both threads would check pieces of the new snapshot in small
    steps that pass the GIL back and forth; once checked, a large search runs beside it again."""
    from ipy_memory import _recall
    path, _ = store
    monkeypatch.setattr(_recall, "_BESIDE_ROWS", 100)
    threads, real = [], VectorShard.search
    monkeypatch.setattr(VectorShard, "search",
                        lambda self, *a, **k: threads.append(threading.current_thread().name) or real(self, *a, **k))
    with MemoryEngine(path, project="p", settings=HYBRID) as mem:
        results(mem)
    assert threads[0] == threading.current_thread().name and set(threads[1:]) == {"ipy_memory-scan"}


def test_columns_no_query_read_are_checked_before_they_are_saved_again(store, caplog):
    path, _ = store
    snap = snapshot(path)
    block = column_blocks(_npz.load_npz(snap))[0]
    dim = 383                                                  # no query's column: damage stays unread
    damage(snap, "colblock.0", dim * block.shape[1], 8, fill=0x55)
    with MemoryEngine(path, project="p", settings=HYBRID) as mem:
        results(mem)
        assert not space(mem).vec._columns.checks.done[dim]
        mem.remember("a note that makes the vectors worth saving again", force=True)
    data = _npz.load_npz(snapshot(path))
    fresh = _colscan.ColumnScan(384)
    fresh.append(data["hot"])
    assert np.array_equal(np.hstack(column_blocks(data)), np.hstack([make() for make in fresh.live_blocks()[0]]))
    assert "converting the vectors' columns anew" in caplog.text


def test_small_blocks_written_session_after_session_are_joined(store, monkeypatch):
    """Each process's new rows start a block of their own; saved again, neighbouring blocks narrower
    than BLOCK are joined up to BLOCK rows, so a store written a little at a time keeps few blocks."""
    path, _ = store
    no_builds(monkeypatch)
    for session in range(4):
        with MemoryEngine(path, project="p", settings=HYBRID) as mem:
            mem.remember_many([{"content": f"pandas kernel cache session {session} row {i}", "force": True}
                               for i in range(3)])
            got = results(mem)
        data = _npz.load_npz(snapshot(path))
        widths = [b.shape[1] for b in column_blocks(data)]
        assert sum(widths) == data["hot"].shape[0], widths
        assert all(a + b > 256 for a, b in zip(widths, widths[1:])), widths     # no neighbours left to join
    with MemoryEngine(path, project="p", settings=HYBRID) as mem:
        assert results(mem) == got                          # the joined columns answer as before
    monkeypatch.setattr(_colscan, "SPARSE_MIN_ROWS", 10**9)  # and as the full scan does
    with MemoryEngine(path, project="p", settings=HYBRID) as mem:
        assert results(mem) == got


def test_a_space_a_graph_may_serve_leaves_saved_columns_alone(store):
    """Columns saved while the space was scanned exactly are not taken once a graph may serve it
    (vector_index='hnsw'): a graph reads every row, so the recall waits for their whole check."""
    path, _ = store
    with MemoryEngine(path, project="p", settings=HYBRID.with_(vector_index="hnsw")) as mem:
        mem.recall(QUERIES[0], scope="project")
        vec = space(mem).vec
        assert vec.graph_allowed and vec._columns is None and vec.row_checks is None
        assert vec.scanned is None or not vec.scanned.check.covered
