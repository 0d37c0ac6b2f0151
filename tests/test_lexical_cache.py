"""LexicalShard keeps query-independent arrays between queries: they must follow every change."""

import numpy as np
import pytest

from ipy_memory._npz import load_npz, write_npz
from ipy_memory.config import Settings
from ipy_memory.lexical import LexicalShard, NodeRow, query_terms


def row(key, text, doc=None, ord_=0, n=1, expires=None, session="s", t=0.0):
    return NodeRow(key=key, document_id=doc or f"d{key}", ord=ord_, doc_nodes=n, title="", body=text,
                   session=session, created_at=t, importance=0.5, expires_at=expires)


def scored(shard, query, now):
    s = shard.scores(query_terms(query), 0, now)
    return {int(shard.keys.view[i]): float(s[i]) for i in np.flatnonzero(s)}


def test_cached_structure_follows_expiry_time_writes_and_settings():
    shard = LexicalShard(Settings())
    shard.add([row(1, "the walrus ate", doc="a", ord_=0, n=3), row(2, "Where is it now?", doc="a", ord_=1, n=3),
               row(3, "in the bay", doc="a", ord_=2, n=3)])
    shard.add([row(4, "a walrus sighting", expires=100.0), row(5, "walrus facts", expires=200.0)])
    assert set(scored(shard, "walrus", 50.0)) == {1, 2, 3, 4, 5}
    assert set(scored(shard, "walrus", 150.0)) == {1, 2, 3, 5}          # 4 expired at 100
    assert set(scored(shard, "walrus", 250.0)) == {1, 2, 3}             # 5 at 200
    assert set(scored(shard, "walrus", 99.0)) == {1, 2, 3, 4, 5}        # a clock set back
    shard.set_expiry(4, None)
    assert 4 in scored(shard, "walrus", 250.0)
    before = scored(shard, "walrus", 50.0)
    shard.remove(1)                                                     # its text no longer lends context
    after = scored(shard, "walrus", 50.0)
    assert 1 not in after and after.get(2, 0.0) < before[2]
    shard.add([row(6, "walrus again", doc="b")])
    assert 6 in scored(shard, "walrus", 50.0)
    assert set(scored(shard, "bay", 50.0)) == {2, 3}                    # 2 borrows its neighbour's text
    shard.s = Settings(neighbor_weights=(0.0, 0.0), reply_weight=0.0, parent_weight=0.0)
    assert set(scored(shard, "bay", 50.0)) == {3}                       # no context under the new settings
    assert set(scored(shard, "walrus", 50.0)) == {4, 5, 6}


def test_reply_and_context_scores_match_a_fresh_shard():
    """A shard queried many times (cache warm) scores exactly like a new one built from the same rows."""
    rows = [row(i, text, doc="c", ord_=i - 1, n=6) for i, text in enumerate(
        ["what did the otter eat today?", "clams, mostly", "and the seal?", "fish", "otters nap after", "bye"], 1)]
    warm = LexicalShard(Settings())
    warm.add(rows)
    for q in ("otter", "seal fish", "clams"):
        warm.scores(query_terms(q), 0, 0.0)
    cold = LexicalShard(Settings())
    cold.add(rows)
    for q in ("what did the otter eat", "seal", "nap"):
        assert scored(warm, q, 0.0) == scored(cold, q, 0.0)
    assert scored(warm, "otter eat", 0.0)[2] > 0          # "clams, mostly" answers the question about the otter


def test_removals_retire_exactly_their_documents():
    """Removing a document's last node retires its document slot (and only its own), before and after
    a snapshot round trip, and a re-added document id gets a fresh slot."""
    def build():
        shard = LexicalShard(Settings())
        shard.add([row(k, f"note {k} about lanterns", doc=f"doc{k // 3}", ord_=k % 3, n=3) for k in range(30)])
        return shard

    for shard in (build(), LexicalShard.from_snapshot(build().snapshot(), Settings())):
        for k in (0, 1, 2, 4, 29):          # doc0 entirely; doc1 and doc9 in part
            assert shard.remove(k)
        assert set(shard.doc_slot_of) == {f"doc{d}" for d in range(1, 10)}
        for k in (3, 5):
            shard.remove(k)
        assert "doc1" not in shard.doc_slot_of and shard.n_docs == 8
        shard.add([row(100, "a lantern again", doc="doc1")])
        assert shard.doc_slot_of["doc1"] == shard.doc_len.size - 1
        shard.remove(100)
        assert "doc1" not in shard.doc_slot_of and shard.n_docs == 8
        assert set(scored(shard, "lanterns", 0.0)) == {k for k in range(6, 29)}


def test_shard_from_snapshot_builds_its_key_maps_only_when_asked_and_then_edits_like_the_original(tmp_path):
    original = LexicalShard(Settings())
    original.add([row(1, "kelp forest notes", doc="k", ord_=0, n=3), row(2, "otters rest in kelp", doc="k", ord_=1, n=3),
                  row(3, "tide is low", doc="k", ord_=2, n=3), row(4, "walrus", doc="w")])
    write_npz(tmp_path / "lex.npz", original.snapshot())
    loaded = LexicalShard.from_snapshot(load_npz(tmp_path / "lex.npz"), Settings())
    assert scored(loaded, "kelp otters", 0.0) == scored(original, "kelp otters", 0.0)
    assert loaded._slot_of is None and loaded._doc_slot_of is None      # a recall built neither
    for shard in (original, loaded):
        shard.remove(2)
        shard.add([row(5, "kelp again", doc="w2"), row(6, "walrus kelp", doc="k2")])
        shard.set_expiry(4, 10.0)
    assert loaded.slot_of == original.slot_of and loaded.doc_slot_of == original.doc_slot_of
    for q in ("kelp", "walrus otters", "tide"):
        assert scored(loaded, q, 20.0) == pytest.approx(scored(original, q, 20.0))


def test_a_snapshot_of_another_layout_version_or_sequence_window_is_not_used():
    import json
    shard = LexicalShard(Settings())
    shard.add([row(1, "kelp forest notes"), row(2, "walrus")])
    data = shard.snapshot()
    assert LexicalShard.from_snapshot(data, Settings()) is not None
    assert LexicalShard.from_snapshot(data, Settings(sequence_window=60.0)) is None
    state = json.loads(str(data["state"]))
    state["version"] -= 1                   # e.g. version 6: document ids and words as numpy str
    assert LexicalShard.from_snapshot({**data, "state": np.array(json.dumps(state))}, Settings()) is None
