"""Query expansion through a real model's word vectors (a stand-in model with known word senses)."""

import numpy as np

from ipy_memory import Embedder, MemoryEngine, Settings, _text
from ipy_memory._expand import expansion
from ipy_memory._npz import load_npz, write_npz
from ipy_memory.lexical import LexicalShard, NodeRow

SENSES = {"youngsters": 1, "children": 1, "child": 1, "pets": 2, "dog": 2, "dogs": 2}   # same sense, same axis


class WordSenseModel(Embedder):
    """A 'real' model whose text vector is the sum of its words' vectors: words of one sense share an
    axis (cosine ~0.99), every other word gets its own pseudo-random direction."""

    semantic = True
    name, dim = "word-sense-32", 32

    def __init__(self):
        self.seen: list[str] = []

    def _word(self, w: str) -> np.ndarray:
        v = np.random.default_rng(int(_text.term_hash(w) % 2**32)).standard_normal(self.dim) * 0.1
        if w in SENSES:
            v[SENSES[w]] += 10.0
        return v

    def _embed(self, texts):
        self.seen += texts
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            for w in _text.words(t):
                out[i] += self._word(w)
        return out


NOTES = ["My youngsters love the beach in summer.", "The boiler needs a service in March.",
         "Our dog sleeps by the radiator.", "Quarterly numbers are due on Friday."]
LEXICAL_ONLY = Settings(vector_weight_semantic=0.0)     # so only words (and their expansions) can match


def top(mem, query, settings):
    mem.settings = settings
    hits = mem.recall(query)
    return hits[0].text if hits else None


def test_a_query_word_finds_the_stores_words_of_the_same_sense(tmp_path):
    with MemoryEngine(tmp_path, project="p", embedder=WordSenseModel(), settings=LEXICAL_ONLY) as mem:
        mem.remember_many([{"content": n} for n in NOTES])
        assert top(mem, "what do the children enjoy", LEXICAL_ONLY) == NOTES[0]
        assert top(mem, "which pets live here", LEXICAL_ONLY) == NOTES[2]
        off = LEXICAL_ONLY.with_(expand_weight=0.0)
        assert top(mem, "what do the children enjoy", off) is None
        assert top(mem, "which pets live here", off) is None


def test_expansion_never_adds_the_query_words_own_stem_and_respects_its_limits(tmp_path):
    with MemoryEngine(tmp_path, project="p", embedder=WordSenseModel(), settings=LEXICAL_ONLY) as mem:
        mem.remember_many([{"content": n} for n in NOTES] + [{"content": "a child and two dogs"}])
        shards = [mem.shards.get(s) for s in mem._spaces("project", None, None)]
        got = expansion(mem, shards, "youngster")
        assert _text.term_hash(_text.stem("youngsters")) not in got            # "youngster" is "youngsters"' own stem
        assert _text.term_hash("child") in got and len(got) <= 2          # expand_terms = 2 per word
        mem.settings = LEXICAL_ONLY.with_(expand_threshold=0.9999)
        assert not expansion(mem, shards, "youngster")
        mem.settings = LEXICAL_ONLY.with_(expand_terms=0)
        assert not expansion(mem, shards, "youngster")


def test_offline_embedder_expands_nothing(tmp_path):
    with MemoryEngine(tmp_path, project="p") as mem:                      # the hashing embedder
        mem.remember_many([{"content": n} for n in NOTES])
        assert not expansion(mem, [mem.shards.get(s) for s in mem._spaces("project", None, None)], "children")


def test_words_are_embedded_when_written(tmp_path):
    model = WordSenseModel()
    with MemoryEngine(tmp_path, project="p", embedder=model, settings=LEXICAL_ONLY) as mem:
        mem.remember_many([{"content": n} for n in NOTES])
        assert "beach" in model.seen and "youngsters" in model.seen            # each word, once, at write time
        seen = len(model.seen)
        assert top(mem, "what do the children enjoy", LEXICAL_ONLY) == NOTES[0]
        assert model.seen[seen:] == ["children", "enjoy"]      # only the query's words the store lacks


def test_an_older_stores_words_are_embedded_once_by_a_recall(tmp_path):
    with MemoryEngine(tmp_path, project="p", embedder=WordSenseModel(),
                      settings=LEXICAL_ONLY.with_(expand_weight=0.0)) as mem:      # written without expansion
        mem.remember_many([{"content": n} for n in NOTES])
    first = WordSenseModel()
    with MemoryEngine(tmp_path, project="p", embedder=first, settings=LEXICAL_ONLY) as mem:
        assert top(mem, "what do the children enjoy", LEXICAL_ONLY) == NOTES[0]
        assert "beach" in first.seen and "youngsters" in first.seen            # the vocabulary, at the first recall
    again = WordSenseModel()
    with MemoryEngine(tmp_path, project="p", embedder=again, settings=LEXICAL_ONLY) as mem:
        assert top(mem, "what do the children enjoy", LEXICAL_ONLY) == NOTES[0]
        assert "beach" not in again.seen and "youngsters" not in again.seen    # kept in SQLite by that recall


def test_vocabulary_and_document_ids_survive_a_snapshot(tmp_path):
    shard = LexicalShard(Settings())
    notes = NOTES + ["naïve Café owners in Zürich", "中文 笔记 里 的 孩子"]
    shard.add([NodeRow(key=i, document_id=f"d{i}-ü文", ord=0, doc_nodes=1, title="", body=n, session="s",
                       created_at=0.0, importance=0.5, expires_at=None) for i, n in enumerate(notes)])
    vocab = shard.vocabulary()
    assert vocab[_text.term_hash(_text.stem("youngsters"))] == "youngsters" and _text.term_hash("in") not in vocab
    assert any(not w.isascii() for w in vocab.values())
    write_npz(tmp_path / "lex.npz", shard.snapshot())           # (UTF-8 bytes in the file)
    loaded = LexicalShard.from_snapshot(load_npz(tmp_path / "lex.npz"), Settings())
    assert loaded.vocabulary() == vocab
    assert loaded.doc_slot_of == shard.doc_slot_of and "d1-ü文" in loaded.doc_slot_of
