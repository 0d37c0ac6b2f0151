"""An engine's own writes reach its indexes without being read back from SQLite (Shards._apply_own),
and leave them exactly as the read-back path does; anything another engine wrote meanwhile, or a
replacement, sends the batch through the read-back path."""

import contextlib

import numpy as np
import pytest

from ipy_memory import MemoryEngine, Settings
from ipy_memory import _shards

HYBRID = Settings().with_(vector_weight_hash=0.5)      # the vectors are loaded (and kept up to date) too


def batches():
    rng = np.random.default_rng(3)
    words = "otter seal clam harbour kelp tide boat net crab gull storm pier".split()
    for b in range(4):
        items = []
        for i in range(40):
            text = " ".join(rng.choice(words, 6))
            if i % 7 == 0:
                text = f"# Notes {b}-{i}\n{text}\n## Tides\nkelp at {i}\n## Boats\nnet {b}"
            items.append({"content": f"{text} #{b}-{i}", "force": True, "ttl": 3600.0 if i % 5 == 0 else None,
                          "metadata": {"i": i}})
        yield items


def index_state(mem):
    shard = mem.shards.get("project:p")
    lex = {k: np.asarray(v) for k, v in shard.lex.snapshot().items()}
    vec = {k: np.asarray(v) for k, v in shard.vec.arrays().items()}
    return lex, vec


def same(a, b):
    for part_a, part_b in zip(a, b):
        assert part_a.keys() == part_b.keys()
        for k in part_a:
            assert np.array_equal(part_a[k], part_b[k]), k


@pytest.fixture
def spy(monkeypatch):
    used = []
    real = _shards.Shards._apply_own
    monkeypatch.setattr(_shards.Shards, "_apply_own", lambda self, *a: used.append(self) or real(self, *a))
    return used


def rebuilt(path, clock, hot="hot"):
    """The same store's indexes rebuilt from SQLite (no snapshot)."""
    for f in (path / "index").glob("*"):
        f.unlink()
    mem = MemoryEngine(path, project="p", session="s1", settings=HYBRID, clock=lambda: clock[0])
    mem.shards.hot_tier = lambda: hot
    mem.recall("kelp")
    return mem


@pytest.mark.parametrize("hot", ["hot", "fresh"])     # "fresh": new documents keep int8 vectors
def test_own_writes_index_exactly_as_reading_them_back(tmp_path, spy, clock, hot):
    with MemoryEngine(tmp_path, project="p", session="s1", settings=HYBRID, clock=lambda: clock[0]) as mem:
        mem.shards.hot_tier = lambda: hot
        mem.recall("kelp")                            # indexes loaded: writes keep them up to date
        for items in batches():
            mem.remember_many(items)
            clock[0] += 5
        mem.remember("a single note about kelp and gulls")   # the duplicate check's path
        assert spy == [mem.shards] * 5
        state = index_state(mem)
        hits = [h.id for h in mem.recall("kelp tide net")]
    assert len(state[1]["low_keys" if hot == "fresh" else "hot_keys"]) > 150
    other = rebuilt(tmp_path, clock, hot)
    try:
        same(state, index_state(other))
        assert [h.id for h in other.recall("kelp tide net")] == hits
    finally:
        other.close()


def test_writes_of_another_engine_or_a_replacement_are_read_back(tmp_path, spy, clock):
    with MemoryEngine(tmp_path, project="p", session="s1", settings=HYBRID, clock=lambda: clock[0]) as mem, \
            MemoryEngine(tmp_path, project="p", session="s2", clock=lambda: clock[0]) as writer:
        mem.recall("kelp")
        first = mem.remember("the harbour pier lamp is green", force=True).id
        assert spy == [mem.shards]
        real_write = mem.store.write

        @contextlib.contextmanager
        def after_the_other():      # the other engine commits between this one's sync and its write
            writer.remember("the other kernel wrote about kelp", force=True)
            with real_write() as db:
                yield db

        mem.store.write = after_the_other
        mem.remember("the boat net is blue", force=True)
        mem.store.write = real_write
        assert spy.count(mem.shards) == 1                         # both read back
        mem.remember("the harbour pier lamp is red", replace=first)
        assert spy.count(mem.shards) == 1                         # a replacement deletes nodes
        texts = {h.text for h in mem.recall("kelp boat net harbour pier lamp", limit=10)}
        assert {"the other kernel wrote about kelp", "the boat net is blue", "the harbour pier lamp is red"} <= texts
        assert "the harbour pier lamp is green" not in texts
        state = index_state(mem)
    other = rebuilt(tmp_path, clock)
    try:
        lex, _ = index_state(other)
        assert sorted(lex["keys"][lex["alive"]].tolist()) == sorted(state[0]["keys"][state[0]["alive"]].tolist())
    finally:
        other.close()
