"""The vectorised lexical scorer (ipy_memory._lexscore) against the formula of lexical.py's docstring,
computed node by node with plain loops over the same index: documents and chat threads, questions
and answers, shared terms, headings, cues, forgotten and expired nodes, both neighbour modes."""

import math
import random

import numpy as np
import pytest

from ipy_memory import _lexscore, _text
from ipy_memory.config import Settings
from ipy_memory.lexical import LexicalShard, NodeRow, query_terms

WORDS = ("otter seal clam harbour kelp tide boat net crab gull storm pier lamp rope sail fish map "
         "anchor shell reef").split()
EXTRA = ["When is it?", "how many were there?", "at 5 pm", "Anna said so", "42 of them", "yes!"]


def corpus(rng: random.Random, late_section: bool) -> tuple[LexicalShard, list[str]]:
    shard, key, t = LexicalShard(Settings()), 0, 0.0
    for batch in range(6):
        rows = []
        for _ in range(rng.randint(3, 6)):
            t += rng.choice([5.0, 20.0, 5000.0])         # flat memories within sequence_window are a thread
            if rng.random() < 0.5:                       # a document of 1-5 sections
                n, doc, theme = rng.randint(1, 5), f"doc{key}", rng.choice(WORDS)
                for i in range(n):
                    key += 1
                    body = " ".join(rng.choices(WORDS, k=rng.randint(0, 7)))
                    if rng.random() < 0.7:
                        body += f" {theme}"              # often in every section: a shared term
                    rows.append(NodeRow(key, doc, i, n, rng.choice(["", "Harbour notes", "Kelp"]),
                                        f"{body} {rng.choice(EXTRA)}", "s1", t, 0.5, None))
            else:                                        # a flat chat message
                key += 1
                speaker = rng.choice(["Anna", "Ben"])
                body = f"{speaker}: " + " ".join(rng.choices(WORDS, k=rng.randint(1, 8))) + " " + rng.choice(EXTRA)
                rows.append(NodeRow(key, f"m{key}", 0, 1, "", body, rng.choice(["s1", "s2"]), t, 0.5,
                                    rng.choice([None, None, 150.0, 1e9])))
        shard.add(rows)
    if late_section:       # a section added to an earlier document: its slots are no longer one run
        first = next(r for r in shard_rows(shard) if r[1] > 1)
        shard.add([NodeRow(10_000, shard_doc_id(shard, first[0]), 9, 9, "", "otter late note", "s1", t, 0.5, None)])
    for k in rng.sample(sorted(shard.slot_of), 6):
        shard.remove(k)
    queries = [" ".join(rng.choices(WORDS + ["anna", "when", "how many"], k=rng.randint(1, 4))) for _ in range(40)]
    # names the query addresses (_text.addressee_terms), with and without another heading/speaker named
    queries += ["What did Anna say to Ben about kelp?", "tide with Anna", "kelp notes for Ben", "Harbour for Anna"]
    return shard, queries


def shard_rows(shard):
    return [(slot, int(shard.doc_text.view[shard.doc.view[slot]])) for slot in range(shard.keys.size)]


def shard_doc_id(shard, slot):
    ds = int(shard.doc.view[slot])
    return next(d for d, s in shard.doc_slot_of.items() if s == ds)


def reference(shard: LexicalShard, query: str, now: float) -> np.ndarray:
    """Each node's score from lexical.py's formula, one node and one term at a time."""
    s, size = shard.s, shard.keys.size
    k1, b = s.bm25_k1, s.bm25_b
    alive = [bool(shard.alive.view[x]) and shard.expires.view[x] > now for x in range(size)]
    terms = list(query_terms(query))
    raw = {h: dict(zip(*(a.tolist() for a in shard.post.get(h)))) if shard.post.get(h) else {} for h in terms}
    tf = {h: {x: abs(v) for x, v in raw[h].items()} for h in terms}
    labelled = {h: {x for x, v in raw[h].items() if v < 0 and s.flatten_shared_terms} for h in terms}  # label terms
    idf = {h: bm25_idf(shard.n_alive, live_df(shard, tf[h])) for h in terms}   # forgotten nodes don't count
    # an addressed name names no heading/speaker when another query term names one anywhere
    aside = _text.addressee_terms(query) if s.addressee_names else frozenset()
    if not {h for h in terms if shard.title_post.get(h) is not None} - aside:
        aside = frozenset()
    doc = shard.doc.view

    def shared(h, x):
        d = doc[x]
        if not (shard.doc_multi.view[d] and shard.doc_text.view[d] >= 3) or not s.flatten_shared_terms:
            return False
        have = sum(1 for y in tf[h] if doc[y] == d and shard.alive.view[y])
        return have == shard.doc_text.view[d]

    def walk(x, links, d):
        for _ in range(d):
            x = int(links[x]) if x is not None and links[x] >= 0 else None
        return x

    def length(x):
        return float(shard.length.view[x]) if x is not None and alive[x] else 0.0

    def own(x):
        if not alive[x]:
            return 0.0
        avg = shard.total_len / max(shard.n_alive, 1)
        out = 0.0
        for h in terms:
            if x in tf[h]:
                nm = k1 if shared(h, x) or x in labelled[h] else k1 * (1 - b + b * shard.length.view[x] / avg)
                out += idf[h] * (k1 + 1) * tf[h][x] / (tf[h][x] + nm)
        return out

    owns = [own(x) for x in range(size)]
    score = np.zeros(size)
    for d, w in enumerate(s.neighbor_weights, 1):
        if not w:
            continue
        around = [(walk(x, shard.prev.view, d), walk(x, shard.next.view, d)) for x in range(size)]
        clen = [length(p) + length(n) for p, n in around]
        avg = np.mean([c for c, a in zip(clen, alive) if a])
        for x, (p, n) in enumerate(around):
            if s.context_mode == "propagate":
                score[x] += w * sum(owns[y] for y in (p, n) if y is not None)
                continue
            for h in terms:
                c = sum(tf[h].get(y, 0) for y in (p, n) if y is not None and alive[y])
                # a label's mark comes from the next neighbour holding the term, else the previous one
                side = n if n is not None and n in tf[h] else p
                if c:
                    nm = k1 if shared(h, x) or side in labelled[h] else k1 * (1 - b + b * clen[x] / avg)
                    score[x] += w * idf[h] * (k1 + 1) * c / (c + nm)
    for x in range(size):
        score[x] += owns[x]
        p = walk(x, shard.prev.view, 1)
        if p is not None and shard.cues.view[p] & _text.ASKS:
            score[x] += s.reply_weight * owns[p]
        if shard.doc_multi.view[doc[x]]:
            avg_doc = shard.total_doc_len / max(shard.n_docs, 1)
            for h in terms:
                dp = shard.doc_post.get(h)
                if dp is not None and doc[x] in dp[0].tolist():
                    dtf = float(dp[1][dp[0] == doc[x]].sum())     # a late section adds a posting
                    df = len({d for d in dp[0].tolist() if shard.doc_live.view[d] > 0})   # nor retired documents
                    didf = bm25_idf(shard.n_docs, df)
                    nm = k1 * (1 - b + b * shard.doc_len.view[doc[x]] / avg_doc)
                    score[x] += s.parent_weight * didf * (k1 + 1) * dtf / (dtf + nm)
        named = [h for h in terms if (tp := shard.title_post.get(h)) is not None and x in tp[0].tolist()
             and h not in aside]
        if named:
            score[x] += s.title_match_weight * sum(idf_title(shard, h) for h in named)
            score[x] *= 1 + s.title_weight
        if not alive[x]:
            score[x] = 0
        elif shard.cues.view[x] & _text.ENDS_ASKING:
            score[x] *= 1 - s.question_discount
        if shard.cues.view[x] & _text.question_cues(query):
            score[x] *= 1 + s.cue_weight
    return score


def idf_title(shard, h):
    return bm25_idf(shard.n_alive, live_df(shard, shard.title_post.get(h)[0].tolist()))  # tf 1, length 1: BM25 = idf


def live_df(shard, slots) -> int:
    return sum(1 for x in slots if shard.alive.view[x])


def bm25_idf(n: int, df: int) -> float:
    return math.log(1 + (max(n, df) - df + 0.5) / (df + 0.5))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("late_section", [False, True])
@pytest.mark.parametrize("mode", ["columns", "propagate"])
def test_scores_follow_the_formula(seed, late_section, mode):
    shard, queries = corpus(random.Random(seed), late_section)
    shard.s = Settings(context_mode=mode)
    assert (shard._structure(0.0).doc_first is None) == late_section     # both roll-up paths are taken
    for now in (100.0, 200.0):                                           # before / after some expiries
        for q in queries:
            got = shard.scores(query_terms(q), _text.question_cues(q), now, _text.addressee_terms(q))
            want = reference(shard, q, now)
            assert np.allclose(got, want, rtol=1e-5, atol=1e-6), (q, np.flatnonzero(~np.isclose(got, want)))


@pytest.mark.parametrize("settings", [
    dict(neighbor_weights=()), dict(neighbor_weights=(0.0, 0.5, 0.25)), dict(flatten_shared_terms=False),
    dict(bm25_b=1.0), dict(bm25_k1=0.0), dict(bm25_b=0.0, parent_weight=0.0, reply_weight=0.0),
    dict(title_weight=0.0, title_match_weight=0.0, cue_weight=0.0, question_discount=0.0),
    dict(context_mode="propagate", neighbor_weights=(0.3,))])
def test_scores_follow_the_formula_under_other_settings(settings):
    shard, queries = corpus(random.Random(7), False)
    shard.s = Settings(**settings)
    for q in queries:
        got = shard.scores(query_terms(q), _text.question_cues(q), 100.0, _text.addressee_terms(q))
        want = reference(shard, q, 100.0)
        assert np.all(np.isfinite(got))
        assert np.allclose(got, want, rtol=1e-5, atol=1e-6), (q, np.flatnonzero(~np.isclose(got, want)))


def _more_rows(rng: random.Random, key: int, t: float, n_docs: int) -> list[NodeRow]:
    """New documents and chat messages (threads continue from older messages of the same session)."""
    rows = []
    for _ in range(n_docs):
        t += rng.choice([5.0, 20.0])
        key += 1
        if rng.random() < 0.4:
            n, doc, theme = rng.randint(2, 5), f"new{key}", rng.choice(WORDS)
            for i in range(n):
                rows.append(NodeRow(key, doc, i, n, "Kelp", " ".join(rng.choices(WORDS, k=4)) + f" {theme}?",
                                    "s1", t, 0.5, None))
                key += 1
        else:
            rows.append(NodeRow(key, f"m{key}", 0, 1, "", f"Anna: {' '.join(rng.choices(WORDS, k=3))} "
                                f"{rng.choice(EXTRA)}", rng.choice(["s1", "s2"]), t, 0.5, rng.choice([None, 1e9])))
    return rows


def _same_structure(a, b) -> None:
    for name in type(a).__annotations__:
        if name in ("room", "settings"):
            continue
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, list):
            assert len(x) == len(y), name
            for u, v in zip(x, y):
                assert np.array_equal(u, v), name
        elif isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            assert x is not None and y is not None and np.array_equal(x, y), name
        else:
            assert x == y, name


def _append(rng, shard, key: int, t: float, size: int) -> tuple[int, float]:
    rows = _more_rows(rng, key, t, size)
    shard.add(rows)
    return max(r.key for r in rows) + 1, t + 100.0


def _cached(seed: int, settings: dict, late_section: bool):
    """A corpus shard under `settings` with its Structure cached, and where new keys and times start."""
    rng = random.Random(seed)
    shard, queries = corpus(rng, late_section)
    shard.s = Settings(**settings)
    return rng, shard, queries, shard._structure(100.0), max(shard.slot_of) + 1, 10_000.0


def _scores_follow_the_formula(shard, queries, now: float = 100.0) -> None:
    for q in queries[:15]:
        got = shard.scores(query_terms(q), _text.question_cues(q), now, _text.addressee_terms(q))
        assert np.allclose(got, reference(shard, q, now), rtol=1e-5, atol=1e-6), q


UPDATE_SETTINGS = [{}, dict(neighbor_weights=(0.0, 0.5, 0.25)), dict(neighbor_weights=()),
                   dict(question_discount=0.0, context_mode="propagate")]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("settings", UPDATE_SETTINGS)
def test_appending_writes_extend_the_structure_as_a_rebuild_would(seed, settings):
    """After writes that only append documents, the cached Structure is extended in place (its cost
    is the write's, not the index's) and equals one built from scratch, array for array."""
    rng, shard, queries, st, key, t = _cached(seed, settings, False)
    for size in (1, 3, 40, 1, 200):
        key, t = _append(rng, shard, key, t, size)
        assert shard._structure(100.0) is st                             # extended, not rebuilt
        _same_structure(st, _lexscore.build(shard, 100.0))
    _scores_follow_the_formula(shard, queries)


def test_writes_that_are_not_appends_rebuild_the_structure():
    shard, _ = corpus(random.Random(3), False)
    st = shard._structure(100.0)
    multi = next(slot for slot, n in shard_rows(shard) if n > 1)
    shard.add([NodeRow(50_000, shard_doc_id(shard, multi), 9, 9, "", "otter late note", "s1", 1.0, 0.5, None)])
    assert shard._structure(100.0) is not st                             # a section of an older document
    st = shard._structure(100.0)
    shard.add([NodeRow(50_001, "gone", 0, 1, "", "otter soon gone", "s1", 1.0, 0.5, 50.0)])
    assert shard._structure(100.0) is not st                             # already expired at `now`
    _same_structure(shard._structure(100.0), _lexscore.build(shard, 100.0))


def test_extending_a_structure_that_has_no_questions_yet():
    shard = LexicalShard(Settings())
    shard.add([NodeRow(1, "m1", 0, 1, "", "otter seal", "s1", 0.0, 0.5, None)])
    st = shard._structure(100.0)
    shard.add([NodeRow(2, "m2", 0, 1, "", "otter kelp, where?", "s1", 1.0, 0.5, None)])   # a thread: follows 1
    shard.add([NodeRow(3, "m3", 0, 1, "", "in the kelp", "s1", 2.0, 0.5, None)])          # answers 2
    assert shard._structure(100.0) is st
    _same_structure(st, _lexscore.build(shard, 100.0))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("settings", UPDATE_SETTINGS)
@pytest.mark.parametrize("late_section", [False, True])
def test_removals_update_the_structure_as_a_rebuild_would(seed, settings, late_section):
    """Forgetting a memory (or one section of one) updates the cached Structure in place, and it
    equals one built from scratch, array for array, also when appends come in between."""
    rng, shard, queries, st, key, t = _cached(seed, settings, late_section)
    for step in range(12):
        live = sorted(k for k, slot in shard.slot_of.items() if shard.alive.view[slot])
        if step % 3 == 0:                                          # a whole document
            doc = shard_doc_id(shard, shard.slot_of[rng.choice(live)])
            gone = [k for k in live if shard_doc_id(shard, shard.slot_of[k]) == doc]
        else:                                                      # a few nodes anywhere
            gone = rng.sample(live, rng.choice([1, 2, 5]))
        for k in gone:
            assert shard.remove(k)
        if step % 4 == 1:
            key, t = _append(rng, shard, key, t, 3)
        assert shard._structure(100.0) is st                             # updated, not rebuilt
        _same_structure(st, _lexscore.build(shard, 100.0))
    _scores_follow_the_formula(shard, queries)


def test_a_node_added_and_removed_before_the_next_query_rebuilds():
    shard, _ = corpus(random.Random(5), False)
    st = shard._structure(100.0)
    shard.add([NodeRow(60_000, "brief", 0, 1, "", "otter brief note", "s1", 20_000.0, 0.5, None)])
    shard.remove(60_000)
    assert shard._structure(100.0) is not st
    _same_structure(shard._structure(100.0), _lexscore.build(shard, 100.0))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("settings", UPDATE_SETTINGS)
def test_time_passing_expiry_times_updates_the_structure_as_a_rebuild_would(seed, settings):
    rng = random.Random(seed)
    shard, queries = corpus(rng, seed % 2 == 1)
    shard.s = Settings(**settings)
    for key in rng.sample(sorted(shard.slot_of), len(shard.slot_of) // 3):
        shard.set_expiry(key, rng.choice([180.0, rng.uniform(100.0, 1000.0)]))
    st = shard._structure(100.0)
    for now in (150.0, 180.0, 181.0, 400.0, 999.0, 2000.0):
        assert shard._structure(now) is st                                # updated, not rebuilt
        _same_structure(st, _lexscore.build(shard, now))
    _scores_follow_the_formula(shard, queries, 2000.0)
    assert shard._structure(120.0) is not st                              # a clock that ran back rebuilds
    _same_structure(shard._structure(120.0), _lexscore.build(shard, 120.0))


def test_removals_without_queries_are_not_kept_past_the_point_a_rebuild_is_cheaper():
    rng = random.Random(6)
    shard, _ = corpus(rng, False)
    _append(rng, shard, max(shard.slot_of) + 1, 10_000.0, 120)
    keys = sorted(k for k, slot in shard.slot_of.items() if shard.alive.view[slot])
    assert len(keys) > 100
    shard.remove(keys[0])
    assert shard._removed == []                          # no cached Structure: nothing to update
    shard._structure(100.0)
    for k in keys[1:]:                                    # a writer that forgets and never recalls
        shard.remove(k)
        assert len(shard._removed) <= 64
    assert shard._cache is None                           # past 64 removals it was dropped
    _same_structure(shard._structure(100.0), _lexscore.build(shard, 100.0))


def test_slots_by_binary_search_while_keys_ascend_and_by_dict_after():
    rng = random.Random(4)
    shard = LexicalShard(Settings())
    shard.add(_more_rows(rng, 100, 10.0, 30))
    keys = shard.keys.view.copy()
    assert (keys[1:] > keys[:-1]).all()
    gone = int(keys[5])
    assert shard.remove(gone) and not shard.remove(gone) and not shard.remove(99_999)
    shard.set_expiry(int(keys[7]), 500.0)
    asked = [int(keys[0]), gone, 99_999, int(keys[-1]), int(keys[7]), 1]
    want = [0, -1, -1, len(keys) - 1, 7, -1]
    assert shard.slots(asked).tolist() == want and shard.expires.view[7] == 500.0
    assert shard._slot_of is None                     # no key -> slot dict was needed
    shard.add([NodeRow(**{**_more_rows(rng, 100, 20.0, 1)[0].__dict__, "key": gone})])   # back, out of order
    assert shard.slots(asked).tolist() == [0, len(keys), -1, len(keys) - 1, 7, -1]
    assert shard._slot_of is not None and shard.slot_of[gone] == len(keys)
    assert shard.remove(int(keys[0])) and shard.slots(asked).tolist()[0] == -1 and int(keys[0]) not in shard.slot_of


def test_document_postings_sum_each_documents_sections_in_order_of_first_appearance():
    # the reference: a Counter per multi-section document over its sections' index terms
    from collections import Counter
    from ipy_memory.lexical import index_terms
    rng, shard, key, want, order = random.Random(7), LexicalShard(Settings()), 0, {}, []
    batches = []
    for b in range(4):
        rows = []
        for d in range(5):
            n, doc = rng.randint(1, 4), f"d{b}-{d}"
            for i in range(n):
                key += 1
                rows.append(NodeRow(key, doc, i, n, "", " ".join(rng.choices(WORDS, k=rng.randint(0, 9))), "s1",
                                    float(key), 0.5, None))
        batches.append(rows)
    late = NodeRow(key + 1, "d0-0", 9, 9, "", "otter otter kelp", "s1", 1e4, 0.5, None)   # an earlier document's
    batches.append([NodeRow(key + 2, "new", 0, 2, "", "kelp reef", "s1", 1e4, 0.5, None),
                    NodeRow(key + 3, "new", 1, 2, "", "reef", "s1", 1e4, 0.5, None), late])
    for rows in batches:
        shard.add(rows)
        for r in rows:
            if r.doc_nodes > 1:
                terms, counts = index_terms(_text.surface_words(r.body), {})
                want.setdefault(r.document_id, Counter()).update(dict(zip(terms, counts)))
    got = shard.doc_post.arrays()
    for doc, tf in want.items():
        ds = shard.doc_slot_of[doc]
        assert shard.doc_len.view[ds] == sum(tf.values())
        mine = {int(h): float(got["tfs"][got["off"][i]:got["off"][i + 1]][got["slots"][got["off"][i]:got["off"][i + 1]] == ds].sum())
                for i, h in enumerate(got["h"]) if ds in got["slots"][got["off"][i]:got["off"][i + 1]]}
        assert mine == {h: float(c) for h, c in tf.items() if c}, doc
    assert shard.total_doc_len == sum(sum(tf.values()) for tf in want.values())
    kelp = _text.term_hash("kelp")            # a term's documents in the order they came in, not by slot
    i = int(np.searchsorted(got["h"], kelp))
    assert got["h"][i] == kelp
    assert got["slots"][got["off"][i]:got["off"][i + 1]][-2:].tolist() == [shard.doc_slot_of["new"], shard.doc_slot_of["d0-0"]]
    assert shard.doc_slot_of["new"] > shard.doc_slot_of["d0-0"]


def test_a_structure_is_built_with_every_field_and_no_other():
    from ipy_memory._lexscore import Structure
    fields = {name: None for name in Structure.__annotations__ if name != "room"}
    assert Structure(**fields).room == {}
    with pytest.raises(TypeError, match="size"):
        Structure(**{k: v for k, v in fields.items() if k != "size"})
    with pytest.raises(TypeError, match="colour"):
        Structure(**fields, colour=1)


@pytest.mark.parametrize("seed", range(4))
def test_a_snapshot_drops_forgotten_postings_and_scores_as_before(seed):
    """Forgotten nodes count in no document frequency, whether their postings are still held (in
    memory) or were left out (a snapshot); removals after the load are counted out again."""
    rng = random.Random(seed)
    shard, queries = corpus(rng, seed % 2 == 1)
    dead = np.flatnonzero(~shard.alive.view)
    assert len(dead) and len(shard.gone()[0]) == len(dead)
    loaded = LexicalShard.from_snapshot(dict(shard.snapshot(100.0)), shard.s)
    assert not np.isin(loaded.post.arrays()["slots"], dead).any() and not len(loaded.gone()[0])
    for q in queries:
        got = loaded.scores(query_terms(q), _text.question_cues(q), 100.0)
        assert np.allclose(got, shard.scores(query_terms(q), _text.question_cues(q), 100.0), rtol=1e-5, atol=1e-6), q
    for k in rng.sample(sorted(k for k, x in loaded.slot_of.items() if loaded.alive.view[x]), 5):
        loaded.remove(k)
    _scores_follow_the_formula(loaded, queries)


def test_live_df_counts_the_postings_not_gone():
    slots = np.array([1, 4, 6, 9, 12], np.int32)
    for gone in ([], [0], [4], [4, 9, 13], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13], [20]):
        want = len(set(slots.tolist()) - set(gone))
        assert _lexscore.live_df(slots, np.array(gone, np.int32)) == want, gone
