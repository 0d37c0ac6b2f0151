"""Review findings on backup(), forget() after dream(), exchanges, TierPolicy, rotate() and re-embedding."""

import os
import sqlite3

import pytest

from ipy_memory import EmbedderMismatch, HashEmbedder, InvalidArgument, MemoryEngine
from ipy_memory.config import DAY
from ipy_memory.lifecycle import TierPolicy


@pytest.fixture
def mem(tmp_path, clock):
    with MemoryEngine(tmp_path / "store", project="proj", session="s1", clock=lambda: clock[0]) as m:
        yield m


def _count(path, table="documents"):
    con = sqlite3.connect(path)
    try:
        return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    finally:
        con.close()


# ------------------------------------------------------------------------------ forget and exchanges
def test_forgetting_a_turn_of_an_exchange_keeps_the_speakers(mem):
    r = mem.remember_exchange("chat-1", [{"role": "user", "content": "Where do sales land?"},
                                         {"role": "assistant", "content": "In warehouse.sales, nightly."},
                                         {"role": "user", "content": "And the backups?"}])
    assert mem.get(r.id).content.startswith("user: Where do sales land?")
    mem.forget(f"{r.id}#1")
    assert mem.get(r.id).content == "user: Where do sales land?\n\nuser: And the backups?"


# ------------------------------------------------------------------------------ TierPolicy
@pytest.mark.parametrize("names", [None, "hot", ("hot", 3), ["hot", "warm", "cold", ""], 5])
def test_tier_policy_names_are_validated(names):
    with pytest.raises(InvalidArgument, match="names"):
        TierPolicy(names=names)


@pytest.mark.parametrize("ages", [None, 7.0, "7"])
def test_tier_policy_ages_are_validated(ages):
    with pytest.raises(InvalidArgument, match="max_age"):
        TierPolicy(max_age=ages)


# ------------------------------------------------------------------------------ after another engine re-embeds
@pytest.mark.parametrize("op", ["dream", "compact", "rotate", "tier_stats"])
def test_lifecycle_ops_notice_another_engines_reembed(tmp_path, op):
    a = MemoryEngine(tmp_path, project="p", embedder=HashEmbedder(384))
    b = MemoryEngine(tmp_path, project="p", embedder=HashEmbedder(384))
    try:
        a.remember("# Herons\nsome fact about herons\n## Egrets\nand egrets")
        b.recall("herons")                               # b holds the 384-dim vectors
        a.reembed(HashEmbedder(64), progress=False)
        with pytest.raises(EmbedderMismatch, match="re-embedded"):
            getattr(b, op)()
    finally:
        a.close()
        b.close()
