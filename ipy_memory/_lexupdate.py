"""Updating a cached lexical `Structure` in place: appended documents (`extend`), removed nodes
(`retire`) and nodes whose expiry time has passed (`expire`) change only their own slots and the
rows within two neighbour distances of them, so an agent's turn (remember or forget, then recall)
costs the size of the write, not of the index: a rebuild takes 10-16 ms at 100k nodes and grows
with the index. `tests/test_lexical_scoring.py` checks that an updated Structure equals a fresh
build, array for array.
"""

from __future__ import annotations

import numpy as np

from . import _pages, _text
from ._lexscore import Structure, _around, _contexts, _doc_runs, _norms, _walk
from ._topk import isin, unique


def _grow(st: Structure, name: str, a: np.ndarray, n: int, fill) -> np.ndarray:
    """`a` lengthened to n rows (the new ones `fill`), inside spare capacity kept in `st.room`: a write
    of a few memories must not copy every per-slot array."""
    buf = st.room.get(name)
    if buf is None or len(buf) < n or not np.shares_memory(buf, a):
        buf = st.room[name] = _pages.zeros((max(n, len(a) + len(a) // 2 + 64), *a.shape[1:]), a.dtype)
        buf[:len(a)] = a
    out = buf[:n]
    out[len(a):] = fill
    return out


def _live_length(st: Structure, length: np.ndarray):
    """Token count of slots, 0 for dead ones (forgotten text lends no context), as a build counts."""
    return lambda x: np.where(st.dead[x], 0.0, length[x].astype(np.float64))


def extend(shard, st: Structure, now: float) -> Structure | None:
    """`st` brought up to date after writes that only appended whole new documents (no removal, no
    expiry, nothing added to an older document); None when that is not the case (build instead).
    Only the new slots and the rows within two neighbour distances before them change, so the cost
    is the size of the write, not of the index (a rebuild takes 10-13 ms at 100k nodes, and grows
    with the index)."""
    s, old, size = shard.s, st.size, shard.keys.size
    exp = shard.expires.view[old:size]
    docs = shard.doc.padded()
    if (exp <= now).any() or not shard.alive.view[old:size].all() or (docs[old:size] < st.n_doc_slots).any():
        return None
    nd, nd0, new = shard.doc_len.size, st.n_doc_slots, np.arange(old, size)
    linked = shard.prev.view[new]
    linked = linked[(linked >= 0) & (linked < old)]       # older slots a new one follows
    st.dead = _grow(st, "dead", st.dead, size + 1, False)
    _extend_neighbours(shard, st, new, linked)
    st.size, st.n_doc_slots, st.hi, st.docs = size, nd, min(st.hi, float(exp.min())), docs
    st.tfc = _grow(st, "tfc", st.tfc, size + 1, 0)
    st.keep = _grow(st, "keep", st.keep, size, 0)
    st.keep[old:] = 1
    if s.question_discount:
        st.keep[old:] *= 1 - s.question_discount * ((shard.cues.view[old:size] & _text.ENDS_ASKING) != 0)
    _extend_documents(shard, st, new, nd0)
    _extend_questions(shard, st, new, linked)
    st.lens = _grow(st, "lens", st.lens, size, 0)
    st.lens[old:] = shard.length.view[old:size]
    st.doc_lens = _grow(st, "doc_lens", st.doc_lens, nd, 0)
    st.doc_lens[nd0:] = shard.doc_len.view[nd0:nd]
    _norms(shard, st, max(len(st.norm) - 1, int(st.lens[old:].max())),
           max(len(st.doc_norm) - 1, int(st.doc_lens[nd0:].max(initial=0))))
    return st


def _extend_neighbours(shard, st: Structure, new: np.ndarray, linked: np.ndarray) -> None:
    """Context lengths and `around` rows of the new slots, and of the older ones whose neighbours
    changed: a new slot can follow an older one, whose next slot (and its predecessors' next slots at
    longer distances) it becomes."""
    old, size, reach = int(new[0]), int(new[-1]) + 1, len(shard.s.neighbor_weights)
    prev, touched, p = shard.prev.padded(), [], linked
    for _ in range(2 * reach):
        touched.append(p)
        p = prev.take(p)
        p = p[p >= 0]
    changed = unique(np.concatenate(touched[:reach] + [new[:0]]))   # contexts: up to `reach` before
    rows = unique(np.concatenate(touched + [new]))                    # rows: up to 2 x `reach` before
    at = np.concatenate([changed, new, [-1]])
    dead, length = st.dead, shard.length.padded()
    fresh = _contexts(_live_length(st, length), _walk(shard, at))
    live_old = ~dead.take(changed)
    for k, c in enumerate(st.ctx):
        c = st.ctx[k] = _grow(st, f"ctx{k}", c, size + 1, 0)
        st.ctx_sum[k] += float(fresh[k][len(changed):-1].sum(dtype=np.float64)) + float(
            (fresh[k][:len(changed)] - c.take(changed))[live_old].sum(dtype=np.float64))
        c[at] = fresh[k]
        st.ctx_max[k] = max(st.ctx_max[k], int(fresh[k].max()))
    st.n_live += len(new)
    st.around = _grow(st, "around", st.around, size + 1, 0)
    if st.weights:
        rows = np.append(rows, -1)                        # and the sentinel's, now at the end
        st.around[rows] = _around(st.ctx, _walk(shard, rows))


def _extend_documents(shard, st: Structure, new: np.ndarray, nd0: int) -> None:
    """Shared-term candidates and document runs of the new slots (in new documents only)."""
    old, size, nd = int(new[0]), int(new[-1]) + 1, shard.doc_len.size
    docs = st.docs.take(new)
    eligible = (shard.doc_text.view[docs] >= 3) & shard.doc_multi.view[docs]
    if st.may_share is not None or eligible.any():
        base = st.may_share if st.may_share is not None else np.zeros(old, bool)
        st.may_share = _grow(st, "may_share", base, size, False)
        st.may_share[old:] = eligible
    if st.doc_first is not None:
        first, count = _doc_runs(st.docs, old, size, nd, nd0)
        if first is None:
            st.doc_first = st.doc_count = None
        else:
            st.doc_first = _grow(st, "doc_first", st.doc_first, nd, 0)
            st.doc_count = _grow(st, "doc_count", st.doc_count, nd, 0)
            st.doc_first[nd0:], st.doc_count[nd0:] = first, count


def _extend_questions(shard, st: Structure, new: np.ndarray, linked: np.ndarray) -> None:
    """Older askers whose next slot is new now have an answer; new askers are appended."""
    old, size = int(new[0]), int(new[-1]) + 1
    if len(st.asking) and len(linked):
        at = np.searchsorted(st.asking, linked)
        at = at[(at < len(st.asking)) & (st.asking.take(np.minimum(at, len(st.asking) - 1)) == linked)]
        st.answering[at] = shard.next.view[st.asking[at]]
    asks = old + np.flatnonzero(shard.cues.view[old:size] & _text.ASKS)
    n0 = len(st.asking)
    st.asking = _grow(st, "asking", st.asking, n0 + len(asks), 0)
    st.answering = _grow(st, "answering", st.answering, n0 + len(asks), 0)
    st.asking[n0:], st.answering[n0:] = asks, shard.next.view[asks]


def expire(shard, st: Structure, now: float) -> Structure | None:
    """`st` at a later `now` that has passed the expiry times of some nodes: they are dead as if
    removed (but their documents keep sharing terms, as in a build). None when a rebuild is cheaper."""
    exp = shard.expires.view[:st.size]
    passed = exp <= now
    st = _retire(shard, st, np.flatnonzero(passed & ~st.dead[:st.size]), documents=False)
    if st is not None:
        st.lo = float(exp[passed].max()) if passed.any() else -np.inf
        st.hi = float(exp[~passed].min()) if (~passed).any() else np.inf
    return st


def retire(shard, st: Structure, slots: list[int]) -> Structure | None:
    """`st` after the nodes at `slots` were removed (they stay linked to their neighbours, as in a
    build): they score nothing, their text lends their neighbours no more context, and their
    documents no longer share terms. None when a rebuild is cheaper (a removal of many nodes)."""
    return _retire(shard, st, unique(np.asarray(slots, np.int64)), documents=True)


def rebuild_is_cheaper(removed: int, size: int) -> bool:
    """Whether building a Structure anew beats retiring `removed` of its `size` nodes one
    neighbourhood at a time (152k nodes: retiring 100 / 1,000 / 5,000 took 0.8 / 3.2 / 13.7 ms, a
    build 6-7 ms)."""
    return removed > max(64, size // 64)


def _retire(shard, st: Structure, slots: np.ndarray, documents: bool) -> Structure | None:
    if rebuild_is_cheaper(len(slots), st.size) or (len(slots) and slots[-1] >= st.size):   # many, or new
        return None
    newly = slots[~st.dead.take(slots)]            # not already expired
    if st.weights and len(newly):
        _retire_contexts(shard, st, newly)         # marks them dead
    st.dead[newly] = True
    st.dead_slots = unique(np.concatenate([st.dead_slots, newly]))
    st.keep[newly] = 0
    st.n_live -= len(newly)
    if documents and st.may_share is not None:     # a removal ends its document's shared terms
        docs = unique(st.docs.take(slots))
        if st.doc_first is None:
            st.may_share[isin(st.docs[:st.size], docs)] = False
        for d in docs.tolist() if st.doc_first is not None else ():
            st.may_share[st.doc_first[d]:st.doc_first[d] + st.doc_count[d]] = False
        if not st.may_share.any():
            st.may_share = None
    _norms(shard, st, len(st.norm) - 1, len(st.doc_norm) - 1)
    return st


def _retire_contexts(shard, st: Structure, newly: np.ndarray) -> None:
    """Mark `newly` dead and recompute the contexts (and their sums) that their text was part of,
    and the `around` rows that read those contexts."""
    links = shard.prev.padded(), shard.next.padded()
    changed, rows = _near(links, newly, len(shard.s.neighbor_weights))
    length = shard.length.padded()
    before = [c.take(changed) for c in st.ctx]
    gone = [float(c.take(newly).sum(dtype=np.float64)) for c in st.ctx]   # they were live: leave the sums
    st.dead[newly] = True
    fresh = _contexts(_live_length(st, length), _walk(shard, changed, links))
    live = ~st.dead.take(changed)
    for k, c in enumerate(st.ctx):
        st.ctx_sum[k] += float((fresh[k] - before[k])[live].sum(dtype=np.float64)) - gone[k]
        c[changed] = fresh[k]
        st.ctx_max[k] = int(c.max())
    st.around[rows] = _around(st.ctx, _walk(shard, rows, links))


def _near(links, slots: np.ndarray, reach: int) -> tuple[np.ndarray, np.ndarray]:
    """The slots whose context reaches `slots` (within `reach` neighbour distances, both ways), and
    the slots whose `around` row reaches those (twice that distance)."""
    (prev, nxt), rings, p, n = links, [], slots, slots
    for _ in range(2 * reach):
        p, n = prev.take(p), nxt.take(n)
        p, n = p[p >= 0], n[n >= 0]
        rings.append(np.concatenate([p, n]))
    changed = unique(np.concatenate(rings[:reach]))
    return changed, unique(np.concatenate([slots, *rings]))
