"""In-memory BM25 over one space's nodes, derived from SQLite and kept in sync by the engine.

Why not FTS5's ``bm25()``: at 100k rows it took 31/57 ms (p50/p95) for a 3-5 word OR query on this
machine, against well under a millisecond for postings scored with numpy, and the ranking needs
more than one column can give. Each node is scored as

    bm25(node) + sum_d w_d * (bm25(node at -d) + bm25(node at +d))   neighbours lend context
    + reply_weight * bm25(node at -1) if that node asks a question        this one answers it
    + parent_weight * bm25(document)                                  roll-up, never a filter
    + title_match_weight * idf of the query terms found in the node's heading / speaker
    x (1 + title_weight * share of the query's idf found in the node's heading / speaker)
      (a name the query addresses, "to/with/for/about Ben", counts only if no other term names one)
    x (1 + cue_weight) when the node holds the kind of answer asked for (number, time, name)
    x (1 - question_discount) when the node itself ends with a question: it holds no answer

Neighbours are the previous/next sections or messages of the same document; flat memories stored
one after another in the same session (within `sequence_window` seconds) are neighbours too.

A term found in every section of a document (3 or more sections with text) describes the whole
document, e.g. a chat session's date or a note's subject: it scores every section alike (as if each
had the average length). With length normalisation it ranked a document's shortest sections first
("Bye!" for a question naming the session's date). So do the terms of a chat line's label, its
leading "[8 May 2023] Caroline: " (_labels.py), in that line.

This module keeps the index (postings, per-node columns, snapshots); _lexscore.py computes the scores.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import _labels, _lexscore, _lexupdate, _text, _wordkernels
from ._columns import AscendingKeys, Column
from ._postings import Postings
from ._topk import unique
from .config import Settings


@dataclass
class NodeRow:
    key: int
    document_id: str
    ord: int
    doc_nodes: int
    title: str
    body: str
    session: str
    created_at: float
    importance: float
    expires_at: float | None


def query_terms(query: str) -> Counter:
    return Counter(_text.term_hash(t) for t in _text.terms(query))


class LexicalShard:
    def __init__(self, settings: Settings):
        self.s = settings
        self.keys = Column(np.int64)
        self.doc = Column(np.int32)
        self.length = Column(np.float32)
        self.alive = Column(np.bool_, fill=False)
        self.prev = Column(np.int32, fill=-1)
        self.next = Column(np.int32, fill=-1)
        self.cues = Column(np.uint8)
        self.created = Column(np.float64)
        self.importance = Column(np.float32)
        self.expires = Column(np.float64, fill=np.inf)
        self._slot_of: dict[int, int] | None = None   # key -> live slot, built only if keys stop ascending
        self._key_order = AscendingKeys()             # (`slots`: a binary search while they ascend)
        self.post = Postings()           # body terms of each node
        self.title_post = Postings()     # heading / speaker terms of each node
        self.doc_post = Postings()       # body terms of each multi-section document
        self.doc_len = Column(np.float32)
        self.doc_multi = Column(np.bool_, fill=False)
        self.doc_live = Column(np.int32)               # live nodes per document slot
        self.doc_text = Column(np.int32)               # ... of which have text (a heading alone has none)
        self._doc_slot_of: dict[str, int] | None = {}  # document id -> document slot; None: ... from _doc_ids
        self._doc_ids: np.ndarray | None = None        # a snapshot's document ids (UTF-8), by document slot
        self._doc_at: dict[int, str] | None = None     # doc_slot_of reversed, built at the first removal
        self._vocab: dict[int, str] = {}               # term hash -> a word it came from (query expansion)
        self._vocab_saved: tuple | None = None         # a snapshot's vocabulary, merged in at first use
        # terms _vocab is known to hold (it only gains words), probed before it: a word table slot is
        # one cache miss, a dict lookup a Python int and two (~3 us a memory of a bulk insert)
        self._vocab_known = _wordkernels.word_table(16)
        # removed slots and retired document slots whose postings are still held (a snapshot leaves
        # them out): a term's document frequency must not count them (see `gone`)
        self._gone: list[int] = []
        self._gone_docs: list[int] = []
        self._gone_sorted: tuple[np.ndarray, np.ndarray] | None = None
        self.n_alive = 0
        self.total_len = 0.0
        self.n_docs = 0
        self.total_doc_len = 0.0
        self._thread_last: dict[str, tuple[int, float]] = {}
        self._cache: _Structure | None = None
        self._removed: list[int] = []           # slots removed since the cached Structure was made

    def __len__(self) -> int:
        return self.n_alive

    # ----------------------------------------------------------------------------------- snapshots
    _COLUMNS = ("keys", "doc", "length", "alive", "prev", "next", "cues", "created", "importance", "expires",
                "doc_len", "doc_multi", "doc_live", "doc_text")
    _POSTINGS = ("post", "title_post", "doc_post")
    VERSION = 12    # bump when tokenisation or the snapshot layout changes: old snapshots are rebuilt
                    # (9: NFKC words; no postings of removed nodes; 10: accents of Latin letters folded;
                    # 11: chat lines' label terms marked, _labels.py; 12: informal forms, _text._IRREGULAR)
    # members a recall's load leaves unchecked: each chunk is checked as it is first read (_postings)
    PIECE_MEMBERS = tuple(f"{name}.{k}" for name in _POSTINGS for k in ("slots", "tfs"))

    def snapshot(self, now: float | None = None) -> dict[str, np.ndarray]:
        """The shard as arrays for `from_snapshot`; with `now`, also its scoring Structure brought up
        to date for that time (`_lexscore.saved`)."""
        out = {c: getattr(self, c).view for c in self._COLUMNS}
        dead = {"post": ~self.alive.view, "title_post": ~self.alive.view, "doc_post": self.doc_live.view <= 0}
        for name in self._POSTINGS:     # without the postings of removed nodes: see `gone`
            out.update({f"{name}.{k}": v for k, v in getattr(self, name).arrays(dead[name]).items()})
        ids = [""] * self.doc_len.size            # index = document slot; "" for retired slots
        for doc_id, ds in self.doc_slot_of.items():
            ids[ds] = doc_id
        # UTF-8 bytes, not numpy's str: its 4 bytes a character made the ids 72 of ~620 bytes a memory
        out["doc_ids"] = np.array([i.encode() for i in ids], dtype=bytes)
        vocab = self.vocabulary()
        out["vocab_h"] = np.fromiter(vocab.keys(), np.int64, len(vocab))
        out["vocab_w"] = np.array([w.encode() for w in vocab.values()], dtype=bytes)
        state = {"version": self.VERSION, "sequence_window": self.s.sequence_window, "n_alive": self.n_alive,
                 "total_len": self.total_len, "n_docs": self.n_docs, "total_doc_len": self.total_doc_len,
                 "thread_last": self._thread_last}
        if now is not None and self.keys.size:
            arrays, state["structure"] = _lexscore.saved(self._structure(now))
            out.update(arrays)
        out["state"] = np.array(json.dumps(state))
        return out

    @classmethod
    def from_snapshot(cls, data, settings: Settings, path=None, checks=None) -> "LexicalShard | None":
        """A shard from `snapshot()` arrays, or None if the snapshot was made differently. `checks`:
        the PIECE_MEMBERS were loaded unchecked (see Postings.from_arrays)."""
        state = json.loads(str(data["state"]))
        if state.get("version") != cls.VERSION or state.get("sequence_window") != settings.sequence_window:
            return None
        shard = cls(settings)
        for c in cls._COLUMNS:
            getattr(shard, c).adopt(data[c])
        for name in cls._POSTINGS:
            setattr(shard, name, Postings.from_arrays(*(data[f"{name}.{k}"] for k in ("h", "off", "slots", "tfs", "crc")),
                                                      path, checks, name))
        # the key maps are built at their first use: a recall needs neither (100k: 40 ms of a cold start)
        shard._doc_slot_of, shard._doc_ids = None, data["doc_ids"]
        shard.n_alive, shard.total_len = state["n_alive"], state["total_len"]
        shard.n_docs, shard.total_doc_len = state["n_docs"], state["total_doc_len"]
        shard._thread_last = {k: tuple(v) for k, v in state["thread_last"].items()}
        shard._vocab_saved = (data["vocab_h"], data["vocab_w"])     # a dict only if expansion asks
        if "structure" in state:
            shard._cache = _lexscore.restore(shard, data, state["structure"])
        return shard

    @property
    def slot_of(self) -> dict[int, int]:
        """key -> live slot (built at first use: `slots` needs it only once keys stop ascending)."""
        if self._slot_of is None:
            live = np.flatnonzero(self.alive.view)     # dict(zip(...)) of lists: 3x faster than a loop
            self._slot_of = dict(zip(self.keys.view[live].tolist(), live.tolist()))
        return self._slot_of

    def slots(self, keys) -> np.ndarray:
        """The live slot of each key (int64), -1 for none."""
        slots = self._key_order.rows(self.keys, keys, lambda: self.slot_of)
        ok = slots >= 0
        ok[ok] = self.alive.view[slots[ok]]
        return np.where(ok, slots, -1)

    def slot(self, key: int) -> int | None:
        found = int(self.slots([key])[0])
        return found if found >= 0 else None

    @property
    def doc_slot_of(self) -> dict[str, int]:
        if self._doc_slot_of is None:
            live = np.flatnonzero((self.doc_live.view > 0) & (self._doc_ids != b""))
            ids = [i.decode() for i in self._doc_ids[live].tolist()]
            self._doc_slot_of, self._doc_ids = dict(zip(ids, live.tolist())), None
        return self._doc_slot_of

    def gone(self) -> tuple[np.ndarray, np.ndarray]:
        """The removed slots and retired document slots that still hold postings, sorted. Scores count
        live documents only (`_lexscore.live_df`), as a rebuild from the database or a snapshot does."""
        if self._gone_sorted is None:
            self._gone_sorted = (unique(np.asarray(self._gone, np.int32)),
                                 unique(np.asarray(self._gone_docs, np.int32)))
        return self._gone_sorted

    def vocabulary(self) -> dict[int, str]:
        """Term hash -> a word of the store it stands for (the words query expansion can reach)."""
        if self._vocab_saved is not None:
            hashes, words = self._vocab_saved
            merged = dict(zip(hashes.tolist(), [w.decode() for w in words.tolist()]))
            for h, w in self._vocab.items():
                merged.setdefault(h, w)
            self._vocab, self._vocab_saved = merged, None
        return self._vocab

    # ----------------------------------------------------------------------------------- writes
    def add(self, rows: list[NodeRow]) -> None:
        """Add the nodes of whole documents, each document's nodes in order."""
        if rows:
            rows = [r for r, s in zip(rows, self.slots([r.key for r in rows])) if s < 0]
        if not rows:
            return      # (the cached Structure stays: _structure extends it to the new slots)
        base = self.keys.size
        slots = range(base, base + len(rows))
        words = [_text.surface_words(r.body) for r in rows]
        # (the vocabulary gains their new words)
        terms, counts, distinct, self._vocab_known = index_batch(words, self._vocab, self._vocab_known)
        lengths = [len(ws) for ws in words]
        cues, docs, prev, ranks, labels = [], [], [], [], []
        new_docs: list[bool] = []                  # whether each document new to the shard has several nodes
        titles = ([], [])                          # heading and speaker postings: term hashes, slots
        doc_rank: dict[int, int] = {}              # multi-section documents in order of first appearance
        slot_of, doc_slot_of, doc_at, thread_last = self._slot_of, self.doc_slot_of, self._doc_at, self._thread_last
        first_doc, window = self.doc_len.size, self.s.sequence_window
        chat_parts, answer_cues, question_marks = _text.chat_parts, _text.answer_cues, _text.question_marks
        for slot, r in zip(slots, rows):
            if slot_of is not None:
                slot_of[r.key] = slot
            ds = doc_slot_of.get(r.document_id)
            if ds is None:
                ds = doc_slot_of[r.document_id] = first_doc + len(new_docs)
                if doc_at is not None:
                    doc_at[ds] = r.document_id
                new_docs.append(r.doc_nodes > 1)
            docs.append(ds)
            ranks.append(doc_rank.setdefault(ds, len(doc_rank)) if r.doc_nodes > 1 else -1)
            # the time stays in the body: temporal questions need it (measured: moving it out cost 0.02);
            # a chat line's "[time] Speaker: " label scores as if the line had the average length
            parts = chat_parts(r.body)
            stamp, speaker, message = parts
            labels.append(_labels.label_size(_labels.line_label(r.body, parts), words[slot - base])
                          if stamp or speaker else 0)
            named = _named_terms(f"{r.title} {speaker}")
            if named:
                titles[0].extend(named)
                titles[1].extend([slot] * len(named))
            cues.append(answer_cues(message) | question_marks(message))
            # neighbours: previous node of the same document, or the previous flat memory of the session
            link = -1
            if r.ord > 0 and slot > base and rows[slot - base - 1].document_id == r.document_id:
                link = slot - 1
            elif r.doc_nodes == 1:
                last = thread_last.get(r.session)
                if last is not None and abs(r.created_at - last[1]) <= window:
                    link = last[0]
                thread_last[r.session] = (slot, r.created_at)
            prev.append(link)
        self.doc_len.extend(np.zeros(len(new_docs)))
        self.doc_multi.extend(new_docs)
        self.doc_live.extend(np.zeros(len(new_docs)))
        self.doc_text.extend(np.zeros(len(new_docs)))
        self.n_docs += len(new_docs)
        np.add.at(self.doc_live.view, docs, 1)
        np.add.at(self.doc_text.view, [d for d, n in zip(docs, lengths) if n], 1)
        self.post.append_many(terms, np.repeat(np.arange(base, base + len(rows), dtype=np.int32), distinct),
                              _labels.mark(counts, distinct, labels))
        self.title_post.append_many(*titles, [1.0] * len(titles[0]))
        self.keys.extend([r.key for r in rows])
        self.doc.extend(docs)
        self.length.extend(lengths)
        self.alive.extend([True] * len(rows))
        self.prev.extend(prev)
        self.next.extend([-1] * len(rows))
        self.cues.extend(cues)
        self.created.extend([r.created_at for r in rows])
        self.importance.extend([r.importance for r in rows])
        self.expires.extend([np.inf if r.expires_at is None else r.expires_at for r in rows])
        nx = self.next.view
        for slot, link in zip(slots, prev):
            if link >= 0:
                nx[link] = slot
        rank = np.repeat(np.asarray(ranks, np.int64), distinct)      # the terms of multi-section documents' nodes
        if (multi := rank >= 0).any():
            self._add_doc_terms(terms[multi], counts[multi], rank[multi], np.fromiter(doc_rank, np.int64, len(doc_rank)))
        self.n_alive += len(rows)
        self.total_len += sum(lengths)

    def _add_doc_terms(self, t: np.ndarray, counts: np.ndarray, rank: np.ndarray, doc_slots: np.ndarray) -> None:
        """A batch's multi-section document postings: each (document, term)'s counts summed, the
        documents of a term in order of first appearance (numpy instead of a Counter per node)."""
        c = counts.astype(np.int64)
        order = np.lexsort((rank, t))                   # by term, then document (both stable)
        t, c, rank = t[order], c[order], rank[order]
        first = np.flatnonzero(np.r_[True, (t[1:] != t[:-1]) | (rank[1:] != rank[:-1])])
        self.doc_post.append_many(t[first], doc_slots[rank[first]], np.add.reduceat(c, first))
        self.doc_len.view[doc_slots] += np.bincount(rank, c, len(doc_slots)).astype(np.float32)
        self.total_doc_len += int(c.sum())

    def remove(self, key: int) -> bool:
        slot = self.slot(key)
        if slot is None:
            return False
        if self._slot_of is not None:
            del self._slot_of[key]
        self.alive.view[slot] = False
        self.n_alive -= 1
        self._gone.append(slot)
        self._gone_sorted = None
        if self._cache is not None:       # applied to the cached Structure at the next query
            self._removed.append(slot)
            if _lexupdate.rebuild_is_cheaper(len(self._removed), self.keys.size):
                self._cache, self._removed = None, []
        ds = int(self.doc.view[slot])
        self.doc_live.view[ds] -= 1
        self.doc_text.view[ds] -= bool(self.length.view[slot])
        # The document's roll-up postings still hold the removed text, and forgotten text must not
        # be findable: drop the roll-up for this document until the shard is next loaded.
        self.doc_multi.view[ds] = False
        if self.doc_live.view[ds] <= 0:   # a replaced document's new nodes get a fresh document slot
            self.n_docs -= 1
            self._gone_docs.append(ds)
            self.total_doc_len -= float(self.doc_len.view[ds])
            if self._doc_at is None:          # once: scanning the dict per removal cost 7 ms at 100k
                self._doc_at = {d: doc_id for doc_id, d in self.doc_slot_of.items()}
            doc_id = self._doc_at.pop(ds, None)
            if doc_id is not None and self.doc_slot_of.get(doc_id) == ds:
                del self.doc_slot_of[doc_id]
        self.total_len -= float(self.length.view[slot])
        return True

    def set_expiry(self, key: int, expires_at: float | None) -> None:
        slot = self.slot(key)
        if slot is not None:
            self.expires.view[slot] = np.inf if expires_at is None else expires_at
            self._cache = None

    # ----------------------------------------------------------------------------------- search
    def _structure(self, now: float) -> _lexscore.Structure:
        """The query-independent arrays for `now` (about half of a query's work at 100k nodes before
        caching): updated after removals, expiries and writes that only appended documents, rebuilt
        after anything else (a changed expiry time, new settings, a clock that ran back)."""
        st, self._cache = self._cache, None   # updates change st in place: never keep a half-updated one
        removed, self._removed = self._removed, []
        if st is not None and (st.settings is not self.s or now < st.lo):     # new settings, or time ran back
            st = None
        if st is not None and st.size < self.keys.size:
            st = _lexupdate.extend(self, st, now)          # only appended since: None if more
        if st is not None and removed:                     # after extend: a new slot may follow a removed one
            st = _lexupdate.retire(self, st, removed)     # None if a rebuild is cheaper
        if st is not None and now >= st.hi:
            st = _lexupdate.expire(self, st, now)
        self._cache = st = st or _lexscore.build(self, now)
        return st

    def scores(self, qterms: Counter, qcues: int, now: float, aside: frozenset = frozenset()) -> np.ndarray:
        """A score per slot (0 for no match, dead or expired nodes); `aside`: _lexscore.scores."""
        if not self.keys.size or not qterms:
            return np.zeros(self.keys.size, np.float32)
        return _lexscore.scores(self, self._structure(now), qterms, qcues, aside)


# word -> _text.index_word(word), for every word indexed: a word table (csrc/words.c: one slot per
# word holding its key and entry side by side, a third of a dict's cache misses and ~70% of its
# memory), a dict where the extension is not built. Grown by doubling; past 2^19 words it starts afresh.
_WORD_SLOTS_MAX = 1 << 20
_word_table = _wordkernels.word_table()


def _word_cache(more: int) -> np.ndarray | dict:
    global _word_table
    _word_table = _wordkernels.word_table_room(_word_table, more, _WORD_SLOTS_MAX)
    return _word_table


def index_batch(per_text: list[tuple[str, ...]], vocab: dict, known) -> tuple[np.ndarray, np.ndarray, np.ndarray, object]:
    """Each text's distinct term hashes in order of first use, text after text (int64), how often
    each occurs (int32), how many each text has, and `known` (a word table of the terms vocab holds,
    grown if need be); an expandable word becomes its term's word in `vocab` unless one is there.
    One compiled pass over a batch and a cache of every word seen, instead of a cached call and a
    Counter per word."""
    total = sum(map(len, per_text))
    terms, counts, distinct = np.empty(total, np.int64), np.empty(total, np.int32), np.empty(len(per_text), np.int64)
    known = _wordkernels.word_table_room(known, total)
    n = _wordkernels.index_batch(per_text, _word_cache(total), _text.index_word, vocab, known, terms, counts, distinct)
    return terms[:n], counts[:n], distinct, known


def index_terms(words, vocab: dict) -> tuple[list[int], list[int]]:
    """index_batch of one text: its distinct term hashes and their counts, as lists."""
    terms, counts, _, _ = index_batch([tuple(words)], vocab, _wordkernels.word_table(16))
    return terms.tolist(), counts.tolist()


@lru_cache(maxsize=4096)
def _named_terms(text: str) -> tuple[int, ...]:
    """Distinct term hashes of a heading and speaker (they repeat: a cache saves re-tokenising)."""
    return tuple({_text.term_hash(t) for t in _text.terms(text)})
