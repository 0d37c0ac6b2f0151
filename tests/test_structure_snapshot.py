"""A lexical snapshot carries the scoring Structure (_lexscore.saved / restore), so that a new
process's first query maps it instead of building it. Restored, it must equal a fresh build, keep
following writes in place, and never be used under settings it was not built for."""

import hashlib
import json
import random

import numpy as np
import pytest

from ipy_memory import _lexscore
from ipy_memory._npz import load_npz, write_npz
from ipy_memory.config import Settings
from ipy_memory.lexical import LexicalShard
from test_lexical_scoring import UPDATE_SETTINGS, _append, _same_structure, _scores_follow_the_formula, corpus


def _reloaded(shard, now, path, settings=None) -> LexicalShard:
    write_npz(path, shard.snapshot(now))
    return LexicalShard.from_snapshot(load_npz(path), settings or shard.s)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("settings", UPDATE_SETTINGS)
@pytest.mark.parametrize("late_section", [False, True])
def test_a_restored_structure_equals_a_build_and_follows_writes(tmp_path, seed, settings, late_section):
    rng = random.Random(seed)
    shard, queries = corpus(rng, late_section)
    shard.s = Settings(**settings)
    path = tmp_path / "lex.npz"
    loaded = _reloaded(shard, 100.0, path)
    saved = hashlib.sha256(path.read_bytes()).digest()
    st = loaded._cache
    assert st is not None
    _same_structure(st, _lexscore.build(loaded, 100.0))
    _scores_follow_the_formula(loaded, queries)
    assert loaded._structure(100.0) is st                        # used, not rebuilt
    older = sorted(loaded.slot_of)
    _append(rng, loaded, max(older) + 1, 10_000.0, 5)
    for key in rng.sample(older, 3):                             # (a new node removed: a rebuild)
        loaded.remove(key)
    assert loaded._structure(100.0) is st                        # extended and retired in place
    _same_structure(st, _lexscore.build(loaded, 100.0))
    assert hashlib.sha256(path.read_bytes()).digest() == saved  # in place: in the process's own copy


def test_a_restored_structure_follows_the_clock_past_expiry_times(tmp_path):
    rng = random.Random(4)
    shard, queries = corpus(rng, False)
    for key in rng.sample(sorted(shard.slot_of), len(shard.slot_of) // 3):
        shard.set_expiry(key, rng.uniform(100.0, 1000.0))
    loaded = _reloaded(shard, 100.0, tmp_path / "lex.npz")
    st = loaded._cache
    for now in (400.0, 2000.0):
        assert loaded._structure(now) is st                       # updated, not rebuilt
        _same_structure(st, _lexscore.build(loaded, now))
    _scores_follow_the_formula(loaded, queries, 2000.0)
    later = _reloaded(shard, 2000.0, tmp_path / "later.npz")          # saved once expiry times passed
    st = later._cache
    assert later._structure(2500.0) is st
    assert later._structure(500.0) is not st                          # a clock that ran back rebuilds
    _same_structure(later._cache, _lexscore.build(later, 500.0))


def test_a_structure_is_used_only_under_the_settings_and_shard_it_was_built_for(tmp_path):
    shard, _ = corpus(random.Random(1), False)
    assert not any(name.startswith("st.") for name in shard.snapshot())           # no `now`: none saved
    write_npz(tmp_path / "lex.npz", shard.snapshot(100.0))
    data = load_npz(tmp_path / "lex.npz")
    for changed in (dict(neighbor_weights=(0.3,)), dict(question_discount=0.0)):
        assert LexicalShard.from_snapshot(data, Settings(**changed))._cache is None
    other = LexicalShard.from_snapshot(data, Settings(bm25_k1=0.9, bm25_b=0.5, parent_weight=0.0))
    assert other._cache is not None                                 # the norm tables are recomputed
    _same_structure(other._cache, _lexscore.build(other, 100.0))
    state = json.loads(str(data["state"]))
    state["structure"]["size"] += 1                                 # not this shard's
    assert LexicalShard.from_snapshot({**data, "state": np.array(json.dumps(state))}, Settings())._cache is None
    for name in ("st.keep", "st.docs", "st.doc_lens", "st.answering"):      # an array of another length
        assert LexicalShard.from_snapshot({**data, name: data[name][:-1]}, Settings())._cache is None


def test_a_structure_reads_no_setting_but_those_it_is_saved_with():
    """restore() trusts a saved Structure when built_from(settings) matches: the build and the
    in-place updates must read no other setting (the BM25 ones only for the norm tables, which
    restore recomputes)."""
    read, recording = set(), [False]

    class Recorded:
        def __init__(self, s):
            self._s = s

        def __getattr__(self, name):
            if recording[0]:
                read.add(name)
            return getattr(self._s, name)

    rng = random.Random(2)
    shard, _ = corpus(rng, False)
    for key in rng.sample(sorted(shard.slot_of), 8):
        shard.set_expiry(key, rng.uniform(100.0, 1000.0))
    real, shard.s = shard.s, Recorded(shard.s)

    def structure(now):
        recording[0] = True
        try:
            return shard._structure(now)
        finally:
            recording[0] = False
    st = structure(100.0)
    older = sorted(shard.slot_of)
    _append(rng, shard, max(older) + 1, 10_000.0, 4)
    shard.remove(rng.choice(older))
    assert structure(100.0) is st and structure(2000.0) is st       # extend, retire, expire
    assert read and read <= set(_lexscore.built_from(real)) | {"bm25_k1", "bm25_b"}


def test_a_structure_read_without_mapping_is_restored_too(tmp_path, monkeypatch):
    """Where snapshots are read with np.load (Windows, or a compressed file), the same holds."""
    from ipy_memory import _npz
    monkeypatch.setattr(_npz, "MAP", False)
    rng = random.Random(5)
    shard, queries = corpus(rng, False)
    loaded = _reloaded(shard, 100.0, tmp_path / "lex.npz")
    st = loaded._cache
    older = sorted(loaded.slot_of)
    _append(rng, loaded, max(older) + 1, 10_000.0, 3)
    loaded.remove(older[0])
    assert loaded._structure(100.0) is st
    _same_structure(st, _lexscore.build(loaded, 100.0))
    _scores_follow_the_formula(loaded, queries)
