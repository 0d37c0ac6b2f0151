"""Bad input an adversarial review found slipping past the checks (each failed before its fix).

Every case must raise the package's own error (catchable as the builtin), leave the store as it
was, or, where the input is valid, do what the docs say.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess

import numpy as np
import pytest

from ipy_memory import (Embedder, EmbedderMismatch, HashEmbedder, InvalidArgument, MemoryEngine, NotFound,
                        StorageError)

ID = "m-0123456789abcdef"


@pytest.mark.parametrize("value", [10**400, -10**400, 2**1024])
def test_huge_ints_are_invalid_arguments_not_overflow(engine, value):
    with pytest.raises(InvalidArgument):
        engine.remember("huge importance", importance=value)
    with pytest.raises(InvalidArgument):
        engine.remember("huge ttl", ttl=value)
    with pytest.raises(InvalidArgument):
        engine.recall("anything", min_score=value)
    assert engine.list_memories().total == 0


def _nested(depth: int) -> dict:
    meta: dict = {"leaf": 1}
    for _ in range(depth):
        meta = {"k": [meta]}
    return meta


@pytest.mark.parametrize("metadata", [
    _nested(5_000),                            # json.dumps: RecursionError
    {1: "one", "1": "also one"},               # json turns the int key into "1": a silent collision
    {("a", "b"): 1},
    {"k": ["fine", {"deep": "nul\x00"}]},
    {"k\x00": 1},
    {"k": "lone \ud800 surrogate"},
])
def test_bad_metadata_is_rejected(engine, metadata):
    with pytest.raises(InvalidArgument):
        engine.remember("with metadata", metadata=metadata)
    with pytest.raises(InvalidArgument):
        engine.remember_exchange("s", [{"role": "user", "content": "hello there", "metadata": metadata}])
    assert engine.list_memories().total == 0


def test_metadata_with_a_literal_backslash_u0000_is_fine(engine):
    meta = {"path": r"C:\u0000dir", "nested": {"list": [1, 2.5, None, True, "x"]}}
    r = engine.remember("a windows path", metadata=meta)
    assert engine.get(r.id).metadata == meta


@pytest.mark.parametrize("messages", [
    [{"role": 5, "content": "the role is a number"}],
    [{"role": None, "content": "the role is None"}],
    [{"role": "", "content": "the role is empty"}],
    [{"role": "user\ud800", "content": "a lone surrogate in the role"}],
    [{"role": "user", "content": [{"type": "text", "text": 42}]}],
    [{"role": "user", "content": [{"type": "text", "text": ["a", "list"]}]}],
    [{"role": "user", "content": [7, {"type": "text", "text": "a number part"}]}],
])
def test_bad_exchange_messages_are_rejected(engine, messages):
    with pytest.raises(InvalidArgument):
        engine.remember_exchange("s", messages)
    assert engine.list_memories().total == 0


def test_exchange_text_part_none_is_empty_not_the_string_none(engine):
    r = engine.remember_exchange("s", [{"role": "user", "content": [{"type": "text", "text": None},
                                                                     {"type": "text", "text": "real words here"}]}])
    assert "None" not in engine.get(r.id).content
    assert "real words here" in engine.get(r.id).content


@pytest.mark.parametrize("bad", [f"{ID}\n", f"{ID}#1\n", "m-0123456789abcde\u0663", f"{ID}#\u0661", f" {ID}"])
def test_ids_with_trailing_newline_or_unicode_digits_are_not_ids(engine, bad):
    with pytest.raises(InvalidArgument):
        engine.get(bad)
    with pytest.raises(InvalidArgument):
        engine.forget(bad)


def test_get_of_a_missing_section_is_not_found(engine):
    r = engine.remember("# A\n\none\n\n# B\n\ntwo")
    assert engine.get(f"{r.id}#1").id == r.id          # a section id names the memory holding it
    with pytest.raises(NotFound):
        engine.get(f"{r.id}#99")


@pytest.mark.parametrize("ttl", [False, True])
def test_ttl_bools_are_rejected(engine, ttl):
    with pytest.raises(InvalidArgument):
        engine.remember("a ttl of a bool", ttl=ttl)


def test_replace_does_not_revive_an_expired_memory(data_dir, clock):
    with MemoryEngine(data_dir, project="p", clock=lambda: clock[0]) as mem:
        r = mem.remember("short lived", ttl=10)
        clock[0] += 11
        with pytest.raises(NotFound):
            mem.get(r.id)
        with pytest.raises(NotFound):
            mem.remember("brought back?", replace=r.id)
        assert mem.list_memories().total == 0
        assert not mem.recall("brought back").hits


class _Bad(Embedder):
    def __init__(self, name, dim):
        self.name, self.dim = name, dim

    def _embed(self, texts):
        return np.ones((len(texts), max(self.dim, 1)), np.float32)


@pytest.mark.parametrize("name, dim", [("ok", 0), ("ok", -3), ("ok", True), ("ok", 3.0), (None, 8), ("", 8),
                                       ("two\nlines", 8)])
def test_custom_embedder_with_bad_name_or_dim_is_rejected(data_dir, name, dim):
    with pytest.raises(InvalidArgument):
        MemoryEngine(data_dir, embedder=_Bad(name, dim))
    with MemoryEngine(data_dir) as mem:                  # nothing was recorded for the store
        assert mem.embedder.name == HashEmbedder(384).name


@pytest.mark.parametrize("path", ["/tmp/with\x00nul", b"/tmp/bytes-path"])
def test_data_dir_with_nul_or_bytes_is_an_invalid_argument(path):
    with pytest.raises(InvalidArgument):
        MemoryEngine(path)


@pytest.mark.parametrize("timeout, ok", [(float("inf"), True), (1e300, True), (10**400, True), (float("nan"), False),
                                         (-1, False), (True, False)])
def test_flush_timeout(engine, timeout, ok):
    assert engine.fire("queued for the background writer")
    if ok:
        assert engine.flush(timeout) is True
    else:
        with pytest.raises(InvalidArgument):
            engine.flush(timeout)


def test_write_racing_another_engines_reembed_is_refused(data_dir):
    """The vectors of a write are computed before its transaction; a re-embed that commits in
    between must make the write fail cleanly instead of storing the old model's vectors."""
    first = MemoryEngine(data_dir, project="p", embedder=HashEmbedder(384))
    first.remember("an early memory so the re-embed has work")

    class Racing(HashEmbedder):
        def _embed(self, texts):
            out = super()._embed(texts)
            if not done:
                done.append(1)
                with MemoryEngine(data_dir, project="p", embedder=HashEmbedder(384)) as other:
                    other.reembed(HashEmbedder(256), progress=False)
            return out

    done: list = []
    first.close()
    with MemoryEngine(data_dir, project="p", embedder=Racing(384)) as mem:
        with pytest.raises(EmbedderMismatch):
            mem.remember_many([f"written while the store changes model {i}" for i in range(3)])
    with MemoryEngine(data_dir, project="p", embedder=HashEmbedder(256)) as mem:
        assert mem.list_memories().total == 1
        assert mem.recall("early memory").hits


# ------------------------------------------------------------------------------------ read-only data dir
def test_read_only_directory_opens_read_only(read_only_dir, tmp_path):
    with MemoryEngine(read_only_dir, project="p", read_only=True) as mem:
        assert mem.list_memories().total == 1
        assert mem.recall("read-only store").hits
        assert mem.stats()["documents"] == 1
        out = mem.backup(tmp_path / "copy.sqlite3")
    assert sqlite3.connect(out["path"]).execute("SELECT count(*) FROM documents").fetchone() == (1,)
    with pytest.raises(StorageError, match="read_only=True"):
        MemoryEngine(read_only_dir, project="p")


def test_read_only_directory_with_pending_wal_says_so(tmp_path):
    """A WAL with changes that never reached the database cannot be read without its -shm file:
    immutable=1 would silently miss them, so the error says what to do."""
    src = tmp_path / "src"
    with MemoryEngine(src, project="p") as mem:
        mem.remember("checkpointed")
    db = sqlite3.connect(src / "memory.sqlite3", isolation_level=None)
    db.execute("PRAGMA wal_autocheckpoint = 0")
    db.execute("INSERT INTO meta VALUES ('only-in-the-wal', 'x')")
    copy = tmp_path / "copy"
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns("*-shm"))
    db.close()
    assert (copy / "memory.sqlite3-wal").stat().st_size
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() != 0:
        os.chmod(copy, 0o555)
        ro = copy
    elif subprocess.run(["mount", "--bind", "-o", "ro", str(copy), str(ro)], capture_output=True).returncode:
        pytest.skip("running as root without permission to mount")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], capture_output=True)
        with pytest.raises(StorageError, match="holds changes"):
            MemoryEngine(ro, project="p", read_only=True)
    finally:
        if ro != copy:
            subprocess.run(["umount", "-l", str(ro)], check=True)   # (lazy: a leaked handle must not keep it)
        os.chmod(copy, 0o755)
