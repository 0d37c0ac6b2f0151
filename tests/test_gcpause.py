"""remember_many pauses the cyclic garbage collector: what a bulk write lets go, reference counting
frees (it makes no cycles), and the collector comes back as it was."""

import gc
import threading

import pytest

from ipy_memory import Embedder, MemoryEngine, _kernels
from ipy_memory._gcpause import paused


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def _varied(n: int, first: int = 0) -> list:
    items = []
    for i in range(first, first + n):
        items += [f"note {i}: the amber lantern sits on shelf {i}",
                  {"content": f"# Plan {i}\n## Setup\nuse duckdb {i}\n## Risks\nnone yet", "metadata": {"i": i, "tags": ["a"]}},
                  {"content": f"部署在每天凌晨{i}点进行，模型会自动重新训练。", "importance": 0.9, "ttl": 3600},
                  {"content": f"note {i}: the amber lantern sits on shelf {i}"},            # an exact duplicate
                  {"content": f"Note {i - 5} - the amber lantern sits on shelf {i - 5}!"},  # near one stored before
                  {"content": f"The GPU box {i} is called orion and lives in rack {i}!", "scope": "global"}]
    return items


def test_a_bulk_write_makes_no_reference_cycles(data_dir, collector_on):
    with MemoryEngine(data_dir, project="p", session="s") as mem:
        mem.remember_many(_varied(5))                 # indexes loaded, caches warm
        mem.recall("lantern")                         # a session that has recalled: the indexes follow writes
        gc.collect()
        gc.disable()
        # (an earlier test's closed engine may still be held by a thread winding down, and become
        # garbage only now: what existed before the write is not the write's)
        before = {id(o) for o in gc.get_objects()}
        try:
            results = mem.remember_many(_varied(60, first=5))
            # every path of a write taken: stored, exact duplicates, near-duplicates of earlier memories
            assert len(results) == 360 and sum(r.stored for r in results) >= 180
            assert any(r.deduped for r in results) and any(r.duplicate for r in results)
            del results
            assert _cycles_of_ipy_memory(before) == []      # nothing for the collector: no cycle was made
        finally:
            gc.enable()


def _cycles_of_ipy_memory(before: set[int]) -> list:
    """What a collection frees that ipy_memory made (its objects, functions, frames) since `before`
    (the ids of the objects the collector tracked then): another thread still winding down after an
    earlier test (an abandoned recall, a server, a closed engine's worker) may leave cycles of its own."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = gc.garbage[:]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()

    def ours(o) -> bool:
        code = getattr(o, "f_code", None) or getattr(o, "__code__", None)
        return (type(o).__module__.startswith("ipy_memory") or getattr(o, "__module__", "") == "ipy_memory"
                or (code is not None and "ipy_memory" in code.co_filename and "/tests/" not in code.co_filename))
    return [o for o in found if ours(o) and id(o) not in before]


def test_the_collector_is_paused_during_the_batch_and_restored(data_dir, collector_on):
    seen = []

    class Watching(Embedder):       # an embedder that notes whether the collector runs while it is called
        name, dim = "watching-v1", 8

        def _embed(self, texts):
            seen.append(gc.isenabled())
            return [[1.0] + [0.0] * 7 for _ in texts]
    with MemoryEngine(data_dir, project="p", embedder=Watching()) as mem:
        mem.remember_many(["first", "second"])
        assert seen == [False] and gc.isenabled()
        gc.disable()                                  # a program that keeps it off...
        mem.remember_many(["third"])
        assert not gc.isenabled()                     # ...keeps it off
        gc.enable()
        with pytest.raises(Exception):
            mem.remember_many(["fine", 42])           # a failing batch restores it too
        assert gc.isenabled()


def test_overlapping_pauses_restore_the_collector_when_the_last_ends(collector_on):
    first_in, release = threading.Event(), threading.Event()

    def hold():
        with paused():
            first_in.set()
            release.wait()
    t = threading.Thread(target=hold)
    t.start()
    first_in.wait()
    with paused():
        assert not gc.isenabled()
    assert not gc.isenabled()                         # the other pause is still on
    release.set()
    t.join()
    assert gc.isenabled()


@pytest.mark.skipif(not _kernels.COMPILED, reason="the words' tuples are untracked by the compiled tokenizer")
def test_a_bulk_write_leaves_little_for_the_next_collection(data_dir, collector_on):
    """What a batch keeps besides its results (the recent texts' words, the stems of new words)
    holds no container the collector must visit: the first collection after a batch of 1,000 cost
    2-3 ms when those caches kept thousands of tuples of words and lists young."""
    with MemoryEngine(data_dir, project="p", session="s") as mem:
        mem.remember_many(_varied(5, first=4990))
        mem.recall("lantern")
        gc.collect()
        gc.disable()
        try:
            results = mem.remember_many(_varied(60, first=5000))     # texts no other test wrote
            ours = {id(results)} | {id(r) for r in results}
            young = [o for o in gc.get_objects(generation=0) if id(o) not in ours]
            words = [o for o in young if type(o) is tuple and len(o) > 1 and all(type(x) is str for x in o)]
            assert words == [] and len(young) < len(results)
        finally:
            gc.enable()


def test_stemming_new_words_leaves_nothing_for_the_collector(collector_on):
    from ipy_memory import _text
    gc.collect()
    gc.disable()
    try:
        before = len(gc.get_objects(generation=0))
        entries = [_text.index_word(f"zorblat{chr(97 + i % 26)}{i}ings") for i in range(500)]
        assert len(set(entries)) == 500 and len(gc.get_objects(generation=0)) - before < 20
    finally:
        gc.enable()
