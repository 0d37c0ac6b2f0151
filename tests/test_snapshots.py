"""Lexical snapshots: used on reopen, replayed forward, ignored when damaged, stale or foreign."""

import shutil
import zipfile

import numpy as np
import pytest

from ipy_memory import MemoryEngine, Settings
from ipy_memory import _lexscore, _npz, _shards, _snapchecks
from ipy_memory.embeddings.hashing import HashEmbedder

TEXTS = [f"entry {i}: the {['amber', 'cobalt', 'jade', 'onyx'][i % 4]} lantern number {i % 97}" for i in range(2500)]
QUERIES = ["amber lantern 12", "cobalt", "jade lantern number 5", "onyx 96"]


def results(mem):
    return [[(h.id, round(h.score, 4)) for h in mem.recall(q)] for q in QUERIES]


@pytest.fixture
def store(tmp_path):
    with MemoryEngine(tmp_path, project="p") as mem:
        mem.remember_many([{"content": t, "force": True} for t in TEXTS])
        expected = results(mem)
    return tmp_path, expected


def loaded_from_snapshot(mem, monkeypatch, space="project:p"):
    calls = []
    real = _shards.Shards._rows
    monkeypatch.setattr(_shards.Shards, "_rows",
                        lambda self, where, params: calls.append((where, tuple(params))) or real(self, where, params))
    mem.recall("amber")
    return ("d.space = ?", (space,)) not in calls


def test_snapshot_written_and_used(store, monkeypatch):
    path, expected = store
    snaps = list((path / "index").glob("*.lex.npz"))
    assert len(snaps) == 1
    with MemoryEngine(path, project="p") as mem:
        assert loaded_from_snapshot(mem, monkeypatch)
        assert results(mem) == expected


def test_snapshot_replays_later_changes(store, monkeypatch):
    path, _ = store
    with MemoryEngine(path, project="p") as writer:           # shard never loaded: snapshot goes stale
        new = writer.remember("a brand new amber lantern of unusual make").id
        old = writer.list_memories(limit=1, offset=10)[0].id
        writer.forget(old)
    with MemoryEngine(path, project="p") as mem:
        assert loaded_from_snapshot(mem, monkeypatch)
        ids = {h.document_id for h in mem.recall("amber lantern unusual make", limit=50)}
        assert new in ids and old not in ids
        assert len(mem.shards.get("project:p").lex) == len(TEXTS)


def test_the_scoring_structure_is_saved_and_used_on_reopen(store, monkeypatch):
    """The snapshot carries the lexical Structure made at close: a reopened store's first recall
    maps it instead of building it (_lexscore.saved / restore) and answers as before."""
    path, expected = store
    builds, real = [], _lexscore.build
    monkeypatch.setattr(_lexscore, "build", lambda *args: builds.append(1) or real(*args))
    with MemoryEngine(path, project="p") as mem:
        assert results(mem) == expected
        new = mem.remember("a brand new amber lantern of unusual make").id
        assert new in {h.document_id for h in mem.recall("lantern of unusual make")}
    assert builds == []                                       # extended in place by the write too


@pytest.mark.parametrize("damage", ["garbage", "truncate", "foreign", "st.around", "post.tfs", "st.keep"])
def test_bad_snapshot_is_rebuilt(store, tmp_path_factory, damage, monkeypatch, caplog):
    """Refused as it loads; but damaged postings, which a recall checks chunk by chunk as it reads
    them (the rest once it has answered): found by the first recall or the call after it."""
    path, expected = store
    snap = next((path / "index").glob("*.lex.npz"))
    if damage == "garbage":
        snap.write_bytes(b"\x00not a zip" * 100)
    elif damage == "truncate":
        snap.write_bytes(snap.read_bytes()[:500])
    elif damage != "foreign":                                 # one member: every one is checked as it loads
        raw = bytearray(snap.read_bytes())
        at = raw.index(b"\x93NUMPY", raw.index(damage.encode() + b".npy")) + 128
        raw[at:at + 64] = bytes([0x7F]) * 64
        snap.write_bytes(bytes(raw))
    else:                                                     # a snapshot from another store
        other = tmp_path_factory.mktemp("other")
        with MemoryEngine(other, project="p") as mem:
            mem.remember_many([{"content": t + " different", "force": True} for t in TEXTS])
            mem.recall("amber")                                  # loads the space, so it is snapshotted
        shutil.copy(next((other / "index").glob("*.lex.npz")), snap)
    with MemoryEngine(path, project="p") as mem:
        if damage == "post.tfs":
            assert results(mem) == expected and "piece 1 of post fails its CRC check" in caplog.text
            assert not list((path / "index").glob("*.lex.npz"))     # dropped: rebuilt from SQLite
        else:
            assert not loaded_from_snapshot(mem, monkeypatch)
        assert results(mem) == expected


# ----------------------------------------------------------------------------------- vectors
def vectors_from_snapshot(mem, monkeypatch, space="project:p") -> bool:
    """Load the space's vectors; True if they came from `.vec.npz` rather than SQLite's rows."""
    calls = []
    real = _shards.Shards._load_vector_snapshot
    monkeypatch.setattr(_shards.Shards, "_load_vector_snapshot",
                        lambda self, space: calls.append(r := real(self, space)) or r)
    mem.shards.get(space).vec
    return calls[0] is not None


def test_vector_snapshot_written_used_and_replayed(store, monkeypatch, check_indexes):
    path, expected = store
    with MemoryEngine(path, project="p") as mem:
        mem.remember("a cobalt lantern, checked for duplicates")     # loads the vectors (dedup)
    assert len(list((path / "index").glob("*.vec.npz"))) == 1
    with MemoryEngine(path, project="p") as writer:               # vectors never loaded: the file goes stale
        new = writer.remember("a brand new jade lantern", force=True).id
        gone = writer.list_memories(limit=1, offset=3)[0].id
        writer.forget(gone)
    with MemoryEngine(path, project="p") as mem:
        assert vectors_from_snapshot(mem, monkeypatch)
        assert not check_indexes(mem)                               # every vector equals SQLite's
        keys = {k for k, in mem.store.query("SELECT n.key FROM nodes n JOIN documents d ON d.id = n.document_id "
                                            "WHERE d.id = ?", (new,))}
        assert keys <= set(mem.shards.get("project:p").vec.row_of)


def test_vector_snapshot_of_another_embedder_epoch_is_ignored(store, monkeypatch, check_indexes):
    """reembed() bumps the epoch: a snapshot of the old model's vectors (a kernel saving late) is not used."""
    path, _ = store
    with MemoryEngine(path, project="p") as mem:
        mem.shards.get("project:p").vec
    old = next((path / "index").glob("*.vec.npz"))
    saved = old.read_bytes()
    other = HashEmbedder(char_ngrams=(3,))                         # the same dimension, other vectors
    other.name = "hash-trigrams-384"
    with MemoryEngine(path, project="p") as mem:
        mem.reembed(other, progress=False)
    old.write_bytes(saved)
    with MemoryEngine(path, project="p", embedder=other) as mem:
        assert not vectors_from_snapshot(mem, monkeypatch)
        assert not check_indexes(mem)


@pytest.mark.parametrize("damage", ["garbage", "truncate", "foreign"])
def test_bad_vector_snapshot_is_ignored(store, tmp_path_factory, damage, monkeypatch, check_indexes):
    path, expected = store
    with MemoryEngine(path, project="p") as mem:
        mem.shards.get("project:p").vec
    snap = next((path / "index").glob("*.vec.npz"))
    if damage == "garbage":
        snap.write_bytes(b"\x00not a zip" * 100)
    elif damage == "truncate":
        snap.write_bytes(snap.read_bytes()[:5000])
    else:
        other = tmp_path_factory.mktemp("other")
        with MemoryEngine(other, project="p") as mem:
            mem.remember_many([{"content": t + " different", "force": True} for t in TEXTS])
            mem.shards.get("project:p").vec
        shutil.copy(next((other / "index").glob("*.vec.npz")), snap)
    with MemoryEngine(path, project="p") as mem:
        assert not vectors_from_snapshot(mem, monkeypatch)
        assert not check_indexes(mem)
        assert results(mem) == expected


def test_lexical_snapshot_survives_reembed(store, monkeypatch):
    """Postings do not depend on the embedder: a new epoch rebuilds vectors only."""
    path, expected = store
    other = HashEmbedder(char_ngrams=(3,))
    other.name = "hash-trigrams-384"
    with MemoryEngine(path, project="p") as mem:
        mem.reembed(other, progress=False)
    with MemoryEngine(path, project="p", embedder=other) as mem:
        assert loaded_from_snapshot(mem, monkeypatch)
        assert [[i for i, _ in r] for r in results(mem)] == [[i for i, _ in r] for r in expected]


def test_damaged_vectors_are_caught_before_a_recall_answers(store, monkeypatch, caplog, check_indexes,
                                                           tmp_path_factory):
    """The vectors are CRC-checked beside the first recall (_npz.load_npz's `later`), and that
    recall answers only once the check passed: damaged, it is ranked again on SQLite's rows."""
    path, _ = store
    suffix, member, fill = ".vec.npz", "hot", 0x3C
    hybrid = Settings(vector_weight_hash=0.5)
    with MemoryEngine(path, project="p", settings=hybrid) as mem:       # saves the vectors' snapshot too
        expected = results(mem)
    snap = next((path / "index").glob("*" + suffix))
    raw = bytearray(snap.read_bytes())
    at = raw.index(b"\x93NUMPY", raw.index(member.encode() + b".npy")) + 128        # past the .npy header
    size = zipfile.ZipFile(snap).getinfo(member + ".npy").file_size - 128
    raw[at:at + size] = bytes([fill]) * size                 # every value (float16 ~1.06, float32 ~3e38)
    snap.write_bytes(bytes(raw))
    unchecked = tmp_path_factory.mktemp("unchecked") / "store"
    shutil.copytree(path, unchecked)
    with monkeypatch.context() as m:        # the damage matters: unchecked, the answers change
        m.setattr(_snapchecks.LaterChecks, "failed", lambda self, wait_covered=True: [])
        m.setattr(_snapchecks.PieceChecks, "ensure", lambda self, pieces: None)
        with MemoryEngine(unchecked, project="p", settings=hybrid) as mem:
            assert results(mem) != expected
    with MemoryEngine(path, project="p", settings=hybrid) as mem:
        assert results(mem) == expected
        assert "rebuilding the index from the database" in caplog.text and member in caplog.text
        assert not check_indexes(mem)
    _npz.load_npz(next((path / "index").glob("*" + suffix)))          # saved again at close, whole


def test_a_ranking_that_fails_on_damaged_values_ranks_again(store, monkeypatch, caplog):
    """Damaged values that make the ranking itself fail: the checks are settled, the snapshot is
    dropped and the recall answers from SQLite's rows; without damage, the error propagates."""
    import ipy_memory.engine as engine_module
    path, _ = store
    hybrid = Settings(vector_weight_hash=0.5)
    with MemoryEngine(path, project="p", settings=hybrid) as mem:
        expected = results(mem)
    snap = next((path / "index").glob("*.vec.npz"))
    raw = bytearray(snap.read_bytes())
    at = raw.index(b"\x93NUMPY", raw.index(b"hot.npy")) + 128
    raw[at:at + 4096] = bytes([0xFF]) * 4096                  # NaNs
    snap.write_bytes(bytes(raw))
    real, calls = engine_module.rank, []

    def failing_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            args[0][0].vec                                     # loads the (damaged) vectors, then fails
            raise FloatingPointError("a NaN where none can be")
        return real(*args, **kwargs)
    monkeypatch.setattr(engine_module, "rank", failing_once)
    with MemoryEngine(path, project="p", settings=hybrid) as mem:
        assert results(mem) == expected and "rebuilding the index" in caplog.text
        calls.clear()
        with pytest.raises(FloatingPointError):              # nothing damaged now: not hidden
            mem.recall("amber lantern 12")


def test_an_exact_scan_checks_the_vectors_it_reads(store, monkeypatch, caplog):
    """The first recall's exact scan checks the CRC of the snapshot's vector rows as it reads them
    (in parts of the scan's rows, in its own pass where the CPU allows); damage there is still caught
    before the recall answers."""
    from ipy_memory import _crc, _kernels, _npz, _recall, vectors
    if not _kernels.FAST_HALF_DOTS:
        pytest.skip("the scan in parts is the compiled one's")
    monkeypatch.setattr(vectors, "_EXACT_PART", 256)
    monkeypatch.setattr(vectors.VectorShard, "VALUE_MEMBERS", {"hot": 256})
    monkeypatch.setattr(_recall, "_BESIDE_ROWS", 1000)        # the scan on the worker, before the checks,
    monkeypatch.setattr(_snapchecks.LaterChecks, "help", lambda checks: None)     # which the recall's thread leaves to it
    monkeypatch.setattr(vectors.VectorShard, "column_members", lambda vec, hot: {})   # no columns saved: scans
    path, _ = store
    hybrid = Settings(vector_weight_hash=0.5)
    with MemoryEngine(path, project="p", settings=hybrid) as mem:
        expected = results(mem)
    read, take = [], _crc.CrcJob.take
    monkeypatch.setattr(_crc.CrcJob, "take", lambda job, i, at, size=None: read.append(at) or take(job, i, at, size))
    fused, scan = [], _kernels.half_dots_crc
    monkeypatch.setattr(_kernels, "half_dots_crc", lambda *args: fused.append(1) or scan(*args))
    with MemoryEngine(path, project="p", settings=hybrid) as mem:
        assert results(mem) == expected
    assert len(read) >= len(TEXTS) // 256                    # every part of the first scan
    assert fused                                             # parts checked in the scan's own pass
    assert "rebuilding the index" not in caplog.text         # and the pieces it checked add up
    snap = next((path / "index").glob("*.vec.npz"))
    raw = bytearray(snap.read_bytes())
    at = raw.index(b"\x93NUMPY", raw.index(b"hot.npy")) + 128 + 256 * 384 * 2 * 3      # in the 4th part
    raw[at:at + 768] = bytes([0x3C]) * 768
    snap.write_bytes(bytes(raw))
    with MemoryEngine(path, project="p", settings=hybrid) as mem:
        assert results(mem) == expected and "rebuilding the index" in caplog.text


# ----------------------------------------------------------------------------------- postings by chunk
def postings_of(mem):
    return mem.shards.get("project:p").lex.post


def test_a_recall_checks_the_postings_it_reads_and_the_rest_after_it_answers(store, monkeypatch):
    """The postings (most of a lexical snapshot) load unchecked for a recall: the chunks it reads
    are checked first, the others on the scan thread once it has answered, settled by the next call."""
    import threading
    path, expected = store
    release, real = threading.Event(), _snapchecks.PieceChecks.rest
    monkeypatch.setattr(_snapchecks.PieceChecks, "rest", lambda self: release.wait(30) and real(self))
    with MemoryEngine(path, project="p") as mem:
        first = [(h.id, round(h.score, 4)) for h in mem.recall(QUERIES[0])]
        post = postings_of(mem)
        assert post.checks is not None and post.checks.done.any() and not post.checks.done.all()
        assert [p.member for p, _ in mem.shards.checks.watched] == ["post", "title_post", "doc_post"]
        release.set()
        assert results(mem)[1:] == expected[1:]
        assert post.checks is None and not mem.shards.checks.watched
    assert first == expected[0]


def test_postings_loaded_outside_a_recall_are_checked_whole(store):
    path, _ = store
    with MemoryEngine(path, project="p") as mem:
        mem.remember("a note that loads the space first", force=True)
        assert postings_of(mem).checks is None and not mem.shards.checks.watched


def test_damaged_postings_a_recall_reads_are_caught_before_it_answers(store, caplog, monkeypatch, tmp_path):
    from ipy_memory import _postings, _text
    path, expected = store
    snap = next((path / "index").glob("*.lex.npz"))
    data = _npz.load_npz(snap)
    h = _text.term_hash("12")                                 # in QUERIES[0], "amber lantern 12"
    i = int(np.searchsorted(data["post.h"], h))
    assert data["post.h"][i] == h
    first, last = int(data["post.off"][i]), int(data["post.off"][i + 1])
    raw = bytearray(snap.read_bytes())
    at = raw.index(b"\x93NUMPY", raw.index(b"post.tfs.npy")) + 128
    raw[at + 4 * first:at + 4 * last] = bytes(4 * (last - first))     # its term frequencies zeroed
    snap.write_bytes(bytes(raw))
    unchecked = tmp_path / "unchecked"
    shutil.copytree(path, unchecked)
    with monkeypatch.context() as m:                          # the damage matters: unchecked, answers change
        m.setattr(_snapchecks.PieceChecks, "ensure", lambda self, pieces: None)
        with MemoryEngine(unchecked, project="p") as mem:
            assert [(h.id, round(h.score, 4)) for h in mem.recall(QUERIES[0])] != expected[0]
    with MemoryEngine(path, project="p") as mem:
        assert [(h.id, round(h.score, 4)) for h in mem.recall(QUERIES[0])] == expected[0]
        assert f"piece {2 * (first // _postings.CHUNK) + 1} of post fails its CRC check" in caplog.text


def test_saving_refuses_postings_that_fail_their_check(store, tmp_path):
    path, _ = store
    data = dict(_npz.load_npz(next((path / "index").glob("*.lex.npz"))))
    from ipy_memory._postings import Postings
    checks = _snapchecks.LaterChecks()
    tfs = data["post.tfs"].copy()
    tfs[-1] += 1
    post = Postings.from_arrays(data["post.h"], data["post.off"], data["post.slots"], tfs, data["post.crc"],
                                tmp_path / "x", checks, "post")
    with pytest.raises(_snapchecks.DamagedSnapshot):
        post.arrays()
    assert checks.damaged
    with pytest.raises(ValueError, match="inconsistent"):
        Postings.from_arrays(data["post.h"], data["post.off"], data["post.slots"][:-1], tfs[:-1])


def test_damage_found_while_saving_is_logged_not_raised(store, caplog, monkeypatch):
    """A close that finds damage as it writes a snapshot (what the settle before it did not see)
    skips that snapshot with a warning: closing never fails on an index cache."""
    path, expected = store
    with MemoryEngine(path, project="p") as mem:
        mem.recall(QUERIES[0])
        mem.remember("one more note about otters", force=True)         # dirty: saved at close
        shard = next(iter(mem.shards.loaded.values()))

        def damaged(now=None):
            raise _snapchecks.DamagedSnapshot("postings fail their CRC check")
        monkeypatch.setattr(shard.lex, "snapshot", damaged)
    assert "not saving index snapshots" in caplog.text and "postings fail" in caplog.text
    with MemoryEngine(path, project="p") as mem:        # the older snapshot, the change log replayed on it
        assert any("otters" in h.text for h in mem.recall("one more note about otters"))


# ----------------------------------------------------------------------------------- review
def _drop_index_files(path):
    for f in (path / "index").iterdir():
        f.unlink()


def test_forgotten_memories_leave_the_bm25_statistics(tmp_path, monkeypatch):
    """Document frequencies count live memories only: after forgetting, the scores in memory, from
    the snapshot saved at close and from a rebuild out of SQLite are all the same. (No neighbour
    context, so that a forgotten memory cannot change which memories neighbour each other.)"""
    settings = Settings(neighbor_weights=())
    with MemoryEngine(tmp_path, project="p", settings=settings) as mem:
        ids = [m.id for m in mem.remember_many([{"content": t, "force": True} for t in TEXTS[:600]])]
        before = results(mem)                     # the space is loaded: forgetting updates its index
        for i, doc in enumerate(ids):
            if i % 4 == 0 and i % 3:              # most 'amber' memories, a few of the others
                mem.forget(doc)
            elif i % 29 == 0:
                mem.forget(doc)
        in_memory = results(mem)
        lex = mem.shards.get("project:p").lex
        assert lex.n_alive < lex.keys.size and in_memory != before
    with MemoryEngine(tmp_path, project="p", settings=settings) as mem:
        assert loaded_from_snapshot(mem, monkeypatch)
        from_snapshot = results(mem)
    _drop_index_files(tmp_path)
    with MemoryEngine(tmp_path, project="p", settings=settings) as mem:
        rebuilt = results(mem)
    assert from_snapshot == rebuilt
    assert in_memory == rebuilt


def test_a_snapshot_saved_under_another_spaces_name_is_ignored(tmp_path, monkeypatch):
    """Snapshots name the space they are of: space A's files copied over space B's (same store, a
    valid seq) are ignored and B is rebuilt from SQLite, so B's recall answers with B's memories."""
    texts = {"a": [f"alpha note {i}: the amber lantern {i % 7}" for i in range(300)],
             "b": [f"beta note {i}: the cobalt lantern {i % 7}" for i in range(300)]}
    for project, batch in texts.items():
        with MemoryEngine(tmp_path, project=project) as mem:
            mem.remember_many([{"content": t, "force": True} for t in batch])
            mem.recall("lantern")                                      # loads the lexical index
            mem.remember(f"a {project} lantern, checked for duplicates")  # loads the vectors
    files = {p: mem.shards.files(f"project:{p}") for p in texts}
    for a_file, b_file in zip(files["a"], files["b"]):
        if a_file.suffix == ".npz":
            assert a_file.exists() and b_file.exists()
            shutil.copy(a_file, b_file)
    with MemoryEngine(tmp_path, project="b") as mem:
        assert not loaded_from_snapshot(mem, monkeypatch, "project:b")
        hits = mem.recall("lantern", scope="project", limit=50)
        assert hits and all(h.space == "project:b" and h.text.startswith(("beta", "a b ")) for h in hits)
        assert not vectors_from_snapshot(mem, monkeypatch, "project:b")
        b_keys = {k for k, in mem.store.query("SELECT n.key FROM nodes n JOIN documents d ON d.id = n.document_id "
                                              "WHERE d.space = 'project:b'")}
        assert set(mem.shards.get("project:b").vec.row_of) == b_keys
