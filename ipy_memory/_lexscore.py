"""Scoring a LexicalShard: the query-independent `Structure` and the per-query passes over it.

The Structure is built once and then updated in place by appends, removals and expiries
(`_lexupdate.py`); new settings, a changed expiry time or a clock that ran back rebuild it. A
snapshot carries it (`saved` / `restore`), so a new process maps it instead of building it.

The cost of a query at scale is memory traffic, not arithmetic: at 1M nodes every per-node array
is megabytes, and each array a pass touches at a posting's slots costs a cache miss per posting.
So the passes touch only what the postings reach (a term's slots, their neighbours, the sections
of the documents it matched), per-node values are kept in the Structure (token counts with a norm
table per count, which nodes can hold a document-wide term), and the neighbours of every hop and
their context lengths are packed in one row per slot, read with one gather. The per-posting loops
(`bm25_add`, `context_add`) and whole-array passes (`priors`) are `_kernels`: compiled where the
extension is built, with numpy twins that give the same scores bit for bit. Nothing here changes a
score: `tests/test_lexical_scoring.py` compares the result with a direct computation of the formula
in `lexical.py`.
"""

from __future__ import annotations

import math

import numpy as np

from . import _kernels, _pages, _text
from .config import Settings


class Structure:
    """A shard's cached neighbour structure and BM25 tables (the fields below, given by keyword; a
    plain class: as a dataclass it cost 1 ms of `import ipy_memory`)."""

    settings: Settings
    size: int                  # the slots and document slots it covers (a write adds more: `extend`)
    n_doc_slots: int
    lo: float                  # valid while lo <= now < hi: no expiry time crossed
    hi: float
    dead: np.ndarray           # per slot + a sentinel slot (False): forgotten or expired
    dead_slots: np.ndarray     # the slots of `dead` (few): zeroing them beats a mask over every slot
    weights: list              # the neighbour distances' weights (zero weights left out)
    around: np.ndarray         # (slots + 1, 4 per weight) int32: per weight, the previous and next slot
                               # at that distance (-1 for none: index -1 is every array's sentinel),
                               # then the context length of each of those two slots at that distance
    ctx: list                  # per weight: context length per slot + sentinel (the two neighbours' text)
    ctx_sum: list              # per weight: their sum over live slots (exact: lengths are token counts)
    ctx_norm: list             # per weight: the BM25 norm of each context length (a lookup table)
    ctx_max: list              # per weight: the longest context
    n_live: int
    lens: np.ndarray           # token count per slot (int32) and the BM25 norm of each count (a table:
    norm: np.ndarray           # a write changes the average length, so every norm, but not the counts)
    doc_lens: np.ndarray       # ... per document slot
    doc_norm: np.ndarray
    docs: np.ndarray           # document slot per slot, plus the sentinel's (0)
    may_share: np.ndarray | None  # per slot: live, in a document whose shared terms are looked for
    doc_first: np.ndarray | None  # per document slot, its first slot and slot count (None when a
    doc_count: np.ndarray | None  # document's slots are not one run: then the roll-up is dense)
    asking: np.ndarray         # slots that ask a question, and the slots that answer them (-1: none)
    answering: np.ndarray
    keep: np.ndarray           # 0 for dead nodes, (1 - question_discount) for nodes ending with a question
    tfc: np.ndarray            # scratch of context_columns and titles, all zero between queries
    room: dict                 # spare capacity behind the per-slot arrays (extend)

    def __init__(self, **fields):
        wrong = fields.keys() ^ (Structure.__annotations__.keys() - {"room"})
        if wrong:
            raise TypeError(f"Structure: fields missing or unknown: {sorted(wrong)}")
        self.room = {}
        self.__dict__.update(fields)


def norm(s: Settings, lengths: np.ndarray, avg: float) -> np.ndarray:
    """k1 * (1 - b + b * length / avg), floored: a zero (k1 = 0, or b = 1 and no length) would make an
    absent term 0 / 0 in context_columns."""
    k1, b = s.bm25_k1, s.bm25_b
    return np.maximum(k1 * (1 - b + b * lengths / max(avg, 1e-9)), 1e-6).astype(np.float32)


def _flat(s: Settings) -> float:
    """The norm of a shared term: the average length's, k1 (floored like `norm`)."""
    return max(s.bm25_k1, 1e-6)


def idf(n: int, df: int) -> float:
    return math.log(1 + (max(n, df) - df + 0.5) / (df + 0.5))


def live_df(slots: np.ndarray, gone: np.ndarray) -> int:
    """How many of a term's postings `slots` (ascending, distinct) are not in `gone` (ascending: removed
    slots that still hold postings, LexicalShard.gone). A binary search of the shorter in the longer;
    nothing at all until something is removed."""
    if not len(gone) or not len(slots):
        return len(slots)
    small, large = (gone, slots) if len(gone) <= len(slots) else (slots, gone)
    at = np.minimum(large.searchsorted(small), len(large) - 1)
    return len(slots) - int(np.count_nonzero(large.take(at) == small))


def _walk(shard, at: np.ndarray | None, links=None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per non-zero weight, the previous and next slots of the slots `at` (None: every slot and the
    sentinel) at that weight's distance; -1 (the sentinel) where there is none. `links`: the padded
    prev and next columns, when the caller has them already (padding may copy a loaded column)."""
    (prev, nxt), out = links or (shard.prev.padded(), shard.next.padded()), []
    p, n = (prev, nxt) if at is None else (prev[at], nxt[at])
    weights = shard.s.neighbor_weights
    for d, w in enumerate(weights):
        if w:
            out.append((p, n))
        if any(weights[d + 1:]):
            p, n = prev[p], nxt[n]
    return out


def _contexts(length_of, hops) -> list[np.ndarray]:
    """Per non-zero weight, the context length of the walked slots: their two neighbours' text."""
    return [(length_of(p) + length_of(n)).astype(np.int32) for p, n in hops]


def _around(ctx: list, hops) -> np.ndarray:
    """Rows of `around` for the walked slots."""
    cols = [x for p_n in hops for x in p_n] + [c[x] for c, p_n in zip(ctx, hops) for x in p_n]
    if not cols:
        return np.zeros((0, 0), np.int32)
    # stacked as rows, then transposed in one copy: 3-4x faster than stacking along axis 1
    return np.ascontiguousarray(np.stack(cols, 0).astype(np.int32, copy=False).T)


def _norms(shard, st: Structure, top: int, top_doc: int) -> None:
    """The norm tables for the current average lengths, up to the longest node `top` and document
    `top_doc` (token counts are whole numbers: one entry each)."""
    s = shard.s
    st.ctx_norm = [norm(s, np.arange(longest + 1, dtype=np.float64), total / st.n_live if st.n_live else 1.0)
                   for longest, total in zip(st.ctx_max, st.ctx_sum)]
    # float32 counts, as the columns hold them: the same arithmetic as norm() over the column
    st.norm = norm(s, np.arange(top + 1, dtype=np.float32), shard.total_len / max(shard.n_alive, 1))
    st.doc_norm = norm(s, np.arange(top_doc + 1, dtype=np.float32), shard.total_doc_len / max(shard.n_docs, 1))


def _doc_runs(docs: np.ndarray, start: int, size: int, nd: int, first_doc: int):
    """First slot and slot count of the document slots first_doc..nd-1, whose slots are start..size-1
    in document order (else None, None)."""
    part = docs[start:size]
    if len(part) > 1 and not (part[1:] >= part[:-1]).all():
        return None, None
    count = np.bincount(part - first_doc if first_doc else part, minlength=nd - first_doc)
    # in place from here: each new array's pages fault in
    first = np.cumsum(count, out=_pages.zeros(len(count), count.dtype))
    first -= count
    first += start
    return first, count


def build(shard, now: float) -> Structure:
    s, size, exp = shard.s, shard.keys.size, shard.expires.view
    passed = exp <= now
    dead = np.append(~shard.alive.view | passed, False)
    live = ~dead[:size]
    length = _pages.copy(shard.length.view, np.float64, extra=1)     # float64: the context sums are exact
    length[dead] = 0                                      # forgotten text lends no context
    # every slot's neighbours and context lengths at once (_walk / _contexts / _around do it for a
    # few slots, as writes need): one compiled call instead of ~25 numpy temporaries (100k memories)
    distances = np.array([d + 1 for d, w in enumerate(s.neighbor_weights) if w], np.int32)
    # the Structure's own arrays on private pages (_pages.py: 1M memories, 48 MB for `around` alone)
    around = _pages.zeros((size + 1, 4 * len(distances)), np.int32)
    ctxs = _pages.zeros((len(distances), size + 1), np.int32)
    _kernels.neighbours(shard.prev.padded(), shard.next.padded(), length, distances, around, ctxs)
    ctx = list(ctxs)
    docs = shard.doc.padded()
    nd = shard.doc_len.size
    eligible = (shard.doc_text.view >= 3) & shard.doc_multi.view       # 3+ sections with text
    first, count = _doc_runs(docs, 0, size, nd, 0) if size else (None, None)
    keep = _pages.copy(live, np.float32)
    if s.question_discount:
        np.multiply(keep, np.float32(1 - s.question_discount), out=keep,
                    where=(shard.cues.view & _text.ENDS_ASKING) != 0)
    asking = np.flatnonzero(shard.cues.view & _text.ASKS)
    st = Structure(
        settings=s, size=size, n_doc_slots=nd, lo=float(exp[passed].max()) if passed.any() else -np.inf,
        hi=float(np.min(exp, where=~passed, initial=np.inf)), dead=dead, dead_slots=np.flatnonzero(dead),
        weights=[w for w in s.neighbor_weights if w], ctx=ctx,
        around=around,
        ctx_sum=[float(np.sum(c[:size], where=live, dtype=np.float64)) for c in ctx], ctx_norm=[],
        ctx_max=[int(c.max()) for c in ctx], n_live=int(live.sum()), lens=_pages.copy(shard.length.view, np.int32),
        norm=None, doc_lens=shard.doc_len.view.astype(np.int32), doc_norm=None, docs=docs,
        may_share=(eligible[docs[:size]] & shard.alive.view) if eligible.any() else None, doc_first=first,
        doc_count=count, asking=asking, answering=shard.next.view[asking], keep=keep,
        tfc=_pages.zeros(size + 1, np.float32))
    _norms(shard, st, int(st.lens.max(initial=0)), int(st.doc_lens.max(initial=0)))
    return st


def built_from(s: Settings) -> dict:
    """The settings a Structure depends on (build and _lexupdate read no others; the norm tables,
    which read the BM25 ones, are recomputed at `restore`)."""
    return {"neighbor_weights": list(s.neighbor_weights), "question_discount": s.question_discount}


_SAVED = ("dead", "dead_slots", "around", "lens", "doc_lens", "docs", "asking", "answering", "keep")
_SAVED_IF_ANY = ("may_share", "doc_first", "doc_count")
_SCALARS = ("size", "n_doc_slots", "lo", "hi", "weights", "ctx_sum", "ctx_max", "n_live")


def saved(st: Structure) -> tuple[dict[str, np.ndarray], dict]:
    """A Structure as snapshot members ("st.<field>") and JSON state, for `restore` in a new process:
    a cold start's first query then maps it instead of building it (100k memories: 12-17 ms)."""
    arrays = {f"st.{name}": getattr(st, name) for name in _SAVED}
    arrays.update({f"st.{name}": a for name in _SAVED_IF_ANY if (a := getattr(st, name)) is not None})
    arrays["st.ctx"] = np.stack(st.ctx) if st.ctx else np.zeros((0, st.size + 1), np.int32)
    state = {name: getattr(st, name) for name in _SCALARS}
    state.update(settings=built_from(st.settings), top=len(st.norm) - 1, top_doc=len(st.doc_norm) - 1)
    return arrays, state


def restore(shard, data, state: dict) -> Structure | None:
    """The Structure `saved` for `shard` as loaded from the same snapshot, or None if it was built
    under other settings (or does not fit the shard: then a query builds one)."""
    if state.get("settings") != built_from(shard.s) or state.get("size") != shard.keys.size:
        return None
    fields = {name: data[f"st.{name}"] for name in _SAVED}
    fields.update({name: data.get(f"st.{name}") for name in _SAVED_IF_ANY})
    fields.update({name: state[name] for name in _SCALARS})
    ctx = list(data["st.ctx"])
    size, nd = state["size"], state["n_doc_slots"]
    rows = {"dead": size + 1, "docs": size + 1, "lens": size, "keep": size, "may_share": size,
            "doc_lens": nd, "doc_first": nd, "doc_count": nd, "answering": len(fields["asking"])}
    if (len(ctx) != len(state["weights"]) or any(len(c) != size + 1 for c in ctx)
            or fields["around"].shape != (size + 1, 4 * len(ctx))
            or any(fields[name] is not None and len(fields[name]) != n for name, n in rows.items())):
        return None             # not this shard's (a bug, not damage: the file's CRCs were checked)
    st = Structure(settings=shard.s, ctx=ctx, ctx_norm=[], norm=None, doc_norm=None,
                   tfc=_pages.zeros(size + 1, np.float32), **fields)
    _norms(shard, st, state["top"], state["top_doc"])
    return st


def node_postings(shard, st: Structure, qterms) -> dict[int, tuple]:
    """Body postings of the query terms: (slots, tf, shared), `shared` marking the postings (None if
    none) whose document has the term in every section, or whose chat line has it in its label (its
    tf stored negated): such a term scores them all alike."""
    out, flatten = {}, shard.s.flatten_shared_terms
    share = st.may_share if flatten else None
    for h in qterms:
        p = shard.post.get(h)
        if p is None:
            continue
        shared = p[1] < 0                       # a chat line's label term (_labels.mark)
        if shared.any():
            p = p[0], np.abs(p[1])
        if not flatten or not shared.any():
            shared = None
        if share is not None:
            at = np.flatnonzero(share.take(p[0]))            # postings in candidate documents
            if len(at):
                # counted over the term's own documents, not over every document (1M: 3x faster);
                # postings are in slot order, so a document's postings are usually one run
                docs = st.docs.take(p[0].take(at))
                if st.doc_first is not None:
                    starts = np.flatnonzero(np.r_[True, docs[1:] != docs[:-1]])
                    found, have = docs[starts], np.diff(np.r_[starts, len(docs)])
                    full = np.repeat(have == shard.doc_text.view[found], have)
                else:
                    found, inverse, have = np.unique(docs, return_inverse=True, return_counts=True)
                    full = (have == shard.doc_text.view[found])[inverse]
                if full.any():
                    if shared is None:
                        shared = np.zeros(len(p[0]), bool)
                    shared[at[full]] = True
        out[h] = (p[0], p[1], shared)
    return out


def term_scales(s: Settings, lists: dict, n: int, gone: np.ndarray) -> list[float]:
    """Each term's idf over `n` live documents (the `gone` slots not counted), times k1 + 1."""
    return [idf(n, live_df(slots, gone)) * (s.bm25_k1 + 1) for slots, *_ in lists.values()]


def bm25(s: Settings, lists: dict, scales: list[float], nrm, size: int,
         out: np.ndarray | None = None) -> np.ndarray:
    """BM25 per slot, given the terms' `term_scales`; `nrm` is (norm per length, length per slot), or
    one norm for all. Shared terms score as if the node had the average length (norm k1). `out`:
    zeros to add to (size + 1)."""
    flat = _flat(s)
    out = np.zeros(size + 1, np.float32) if out is None else out
    norm, lens = nrm if isinstance(nrm, tuple) else (None, None)
    for (slots, tf, *shared), scale in zip(lists.values(), scales):
        _kernels.bm25_add(out, slots, tf, norm, lens, shared[0] if shared else None,
                          flat if norm is not None else nrm, scale)
    return out


def context_columns(shard, st: Structure, lists: dict, scales: list[float], score: np.ndarray) -> None:
    """Add BM25 of each node's neighbours' text as extra columns (text at distance d, both sides):
    per distance, `around` holds each slot's two neighbours there and their context lengths. A
    neighbour is in its node's document, so the node shares its `shared` mark."""
    sides, flat = 2 * len(st.weights), _flat(shard.s)
    for (slots, tf, shared), scale in zip(lists.values(), scales):
        for i, w in enumerate(st.weights):
            _kernels.context_add(score, st.tfc, st.around, slots, tf, st.dead, shared, flat,
                                 (2 * i, 2 * i + 1, sides + 2 * i, sides + 2 * i + 1), st.ctx_norm[i], w * scale)


def scores(shard, st: Structure, qterms, qcues: int, aside: frozenset = frozenset()) -> np.ndarray:
    """`aside`: query terms that name a heading/speaker only when no other query term does (the
    names a query addresses, _text.addressee_terms)."""
    s, size = shard.s, shard.keys.size
    lists = node_postings(shard, st, qterms)
    scales = term_scales(s, lists, shard.n_alive, shard.gone()[0])    # (for own and context columns)
    own = bm25(s, lists, scales, (st.norm, st.lens), size)
    own[st.dead_slots] = 0             # forgotten or expired nodes lend no context either
    # the columns mode reads `own` only before adding to the scores (1M memories: a 6 MB copy saved)
    score = own if s.context_mode == "columns" else own.copy()
    if s.reply_weight and lists:       # the answer to a question rarely repeats its words
        _kernels.reply_add(score, own, st.asking, st.answering, s.reply_weight)
    if s.context_mode == "columns":
        context_columns(shard, st, lists, scales, score)
    else:
        for i, w in enumerate(st.weights):
            score[:size] += w * (own[st.around[:size, 2 * i]] + own[st.around[:size, 2 * i + 1]])
    if s.parent_weight and shard.doc_post:
        docs = _lists(shard.doc_post, qterms)
        if docs:
            _roll_up(shard, st, docs, score)
    score = score[:size]
    titles = _lists(shard.title_post, qterms)
    if aside and titles.keys() - aside:    # "What did Ana say to Ben?" names Ana's lines, not Ben's
        titles = {h: p for h, p in titles.items() if h not in aside}
    if titles and (s.title_weight or s.title_match_weight):
        named = _union([x[0] for x in titles.values()])
        # into the context scratch, zero again after (a fresh array per query: 1M memories, 6 MB)
        try:
            tscore = bm25(s, titles, term_scales(s, titles, shard.n_alive, shard.gone()[0]), s.bm25_k1, size,
                          st.tfc)[named]  # length 1
        finally:
            st.tfc[named] = 0
        score[named] += s.title_match_weight * tscore
        score[named] *= 1 + s.title_weight        # the query names this heading/speaker
    _kernels.priors(score, st.keep, shard.cues.view, qcues if s.cue_weight else 0, 1 + s.cue_weight)
    return score


def _roll_up(shard, st: Structure, lists: dict, score: np.ndarray) -> None:
    """Add each multi-section document's own BM25 to its sections (a roll-up, never a filter)."""
    nd, w = shard.doc_len.size, shard.s.parent_weight
    for h, (docs, tf) in lists.items():
        if len(docs) > 1 and not (docs[1:] > docs[:-1]).all():   # sections added to a document later
            docs, at = np.unique(docs, return_inverse=True)      # hold a posting each: one tf per document
            lists[h] = (docs, np.bincount(at, tf).astype(np.float32))
    scales = term_scales(shard.s, lists, shard.n_docs, shard.gone()[1])
    dscore = bm25(shard.s, lists, scales, (st.doc_norm, st.doc_lens), nd)
    if st.doc_first is None:
        dscore[:nd] *= shard.doc_multi.view
        score[: shard.keys.size] += w * dscore[shard.doc.view]
        return
    hit = _union([x[0] for x in lists.values()])
    hit = hit[shard.doc_multi.view.take(hit)]
    # the slots first[d] .. first[d] + count[d] - 1 of every hit document d, one compiled loop (no
    # repeat / arange temporaries or np.add.at: a fifth of a slow 1M query's lexical time before)
    _kernels.add_runs(score, st.doc_first.take(hit), st.doc_count.take(hit), dscore.take(hit), w)


def _lists(postings, qterms) -> dict:
    """The postings (slots, tfs) of the query terms that have any."""
    return {h: p for h in qterms if (p := postings.get(h)) is not None}


def _union(arrays: list) -> np.ndarray:
    """Sorted distinct values of several index arrays (a sort: numpy's hash-based unique was slower)."""
    a = np.concatenate(arrays)
    a.sort()
    return a[np.r_[True, a[1:] != a[:-1]]] if len(a) else a
