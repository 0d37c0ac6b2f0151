"""The offline hashing embedder (the default preset) and the checks every Embedder result passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipy_memory import _wordkernels
from ipy_memory.embeddings import Embedder, HashEmbedder, get_embedder
from ipy_memory.errors import EmbeddingError, InvalidArgument

ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["The quick brown fox jumps over the lazy dog", "Pandas DataFrame groupby aggregation",
         "数据框的分组聚合", "Émile a mangé une crêpe à Paris", "x = np.linalg.norm(v)"]


@pytest.fixture(scope="module")
def emb():
    return HashEmbedder()


def cos(a, b):
    return float(np.dot(a, b))


def test_shape_dtype_and_name(emb):
    out = emb.embed(TEXTS)
    assert out.shape == (5, 384) and out.dtype == np.float32
    assert emb.name == "hash-v1-384" and emb.dim == 384 and emb.semantic is False
    assert HashEmbedder(dim=64).embed(["a b c"]).shape == (1, 64)
    assert HashEmbedder(dim=64).name == "hash-v1-64"


def test_vectors_are_unit_length(emb):
    norms = np.linalg.norm(emb.embed(TEXTS), axis=1)
    np.testing.assert_allclose(norms, 1.0, atol=1e-5)


def test_deterministic_within_process_and_batch_independent(emb):
    batch = emb.embed(TEXTS)
    one_by_one = np.stack([emb.embed([t])[0] for t in TEXTS])
    np.testing.assert_array_equal(batch, one_by_one)
    np.testing.assert_array_equal(batch, HashEmbedder().embed(TEXTS))   # fresh cache, same vectors
    np.testing.assert_array_equal(emb.embed_query(TEXTS[0]), batch[0])


def test_a_full_cache_and_threads_change_no_vector():
    import threading
    rng = np.random.default_rng(2)
    texts = [" ".join(f"w{int(x)}" for x in rng.integers(0, 400, 12)) for _ in range(120)] + TEXTS
    want = HashEmbedder().embed(texts)
    tiny = HashEmbedder(cache_size=50)       # cleared between batches, over and over
    np.testing.assert_array_equal(np.concatenate([tiny.embed(texts[i:i + 7]) for i in range(0, 125, 7)]), want)
    np.testing.assert_array_equal(tiny.embed(texts), want)           # one batch larger than the cache
    tiny.embed(["one more batch"])
    assert tiny._words == 3 and tiny._used < 60                     # the cache was emptied first
    shared, got, errors = HashEmbedder(cache_size=300), {}, []

    def run(start):
        try:
            for i in range(start, start + 125, 5):
                j = i % 125
                got[j] = shared.embed([texts[j]])[0]
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
    threads = [threading.Thread(target=run, args=(k,)) for k in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(got) == 125
    np.testing.assert_array_equal(np.stack([got[j] for j in range(125)]), want)


def test_an_interrupted_batch_leaves_no_bad_cache_entry(monkeypatch):
    """An interrupt (a user stopping a long remember_many in a notebook) arrives between bytecodes:
    here right after the new words' features were stored, before the cache names them."""
    emb, calls, real = HashEmbedder(), [], _wordkernels.word_features

    def interrupted(*args):
        calls.append(real(*args))
        raise KeyboardInterrupt
    monkeypatch.setattr(_wordkernels, "word_features", interrupted)
    with pytest.raises(KeyboardInterrupt):
        emb.embed(TEXTS)
    assert calls and calls[0] > 0 and not emb._words
    monkeypatch.undo()
    np.testing.assert_array_equal(emb.embed(TEXTS), HashEmbedder().embed(TEXTS))


def test_vectors_are_the_ones_stores_already_hold():
    # "hash-v1" names these exact vectors: stores written by earlier versions keep them, and new ones
    # must equal them bit for bit (digests computed with the first, unvectorised implementation)
    import hashlib
    texts = TEXTS + ["the the the cat cat sat", "", "Ünïcödé wörds and 2024-05-01 dates, again and again and again"]
    for dim, digest in ((384, "313332d929ffbe51005654df9851c27e"), (64, "07840315a9ab511fac19b7d90e0082fb")):
        vecs = HashEmbedder(dim=dim).embed(texts)
        assert hashlib.sha256(vecs.tobytes()).hexdigest()[:32] == digest

    # text NFKC changes (fullwidth forms, decomposed accents, ligatures): the lexical index normalises
    # it, the embedder may not (digests computed with the code before NFKC, 0455209)
    texts = ["ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ ａｎｄ ｄｉｇｉｔｓ １２３", "re\u0301sume\u0301 cafe\u0301 (decomposed)",
             "ﬁle ﬂow ligatures", "中文，标点！全角（括号）", "Ⅻ ㎏ ½ compat forms", "İstanbul ǅ titlecase"]
    for dim, digest in ((384, "6f0548a3e18021fde6cd9c1aa2c175d9"), (64, "377f5c2edf1965b4c3b338887d42dd1b")):
        vecs = HashEmbedder(dim=dim).embed(texts)
        assert hashlib.sha256(vecs.tobytes()).hexdigest()[:32] == digest


def test_deterministic_across_processes(emb, tmp_path):
    # Python's str hash is salted per process; the embedder must not depend on it.
    out = tmp_path / "vecs.npy"
    code = ("import sys, numpy as np; from ipy_memory.embeddings import HashEmbedder; "
            "np.save(sys.argv[1], HashEmbedder().embed(sys.argv[2:]))")
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, "-c", code, str(out), *TEXTS], check=True, env=env, timeout=60)
    np.testing.assert_array_equal(np.load(out), emb.embed(TEXTS))


def test_similarity_sanity(emb):
    q, near, far = emb.embed(["how to merge two pandas dataframes",
                              "merging pandas DataFrames on a key column",
                              "the weather in Lisbon is sunny today"])
    assert cos(q, near) > cos(q, far) + 0.2
    assert cos(q, q) == pytest.approx(1.0, abs=1e-5)


def test_morphology_shares_char_ngrams(emb):
    a, b, c = emb.embed(["embedding", "embeddings", "kitchen"])
    assert cos(a, b) > 0.5 > cos(a, c)


def test_cjk(emb):
    q, near, far = emb.embed(["机器学习模型的训练", "训练机器学习模型", "今天天气很好"])
    assert cos(q, near) > 0.4 and cos(q, near) > cos(q, far) + 0.3
    ja, ja2 = emb.embed(["東京タワーに行きました", "東京タワーは高い"])
    assert cos(ja, ja2) > 0.2


@pytest.mark.parametrize("text", ["", "   \n\t", "the and of to", "!!! ??? ..."])
def test_texts_without_words_give_the_zero_vector(emb, text):
    out = emb.embed([text, "real words here"])
    assert not out[0].any() and np.isfinite(out).all()
    assert np.linalg.norm(out[1]) == pytest.approx(1.0, abs=1e-5)


def test_empty_batch(emb):
    out = emb.embed([])
    assert out.shape == (0, 384) and out.dtype == np.float32


@pytest.mark.parametrize("bad", ["a string, not a list", None, 42, [b"bytes"], ["ok", 3], [None]])
def test_validation_errors(emb, bad):
    with pytest.raises(InvalidArgument, match="embed"):
        emb.embed(bad)


def test_embed_query_takes_a_string(emb):
    with pytest.raises(InvalidArgument):
        emb.embed_query(123)


def test_tuples_are_accepted(emb):
    np.testing.assert_array_equal(emb.embed(("a cat", "a dog")), emb.embed(["a cat", "a dog"]))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=200), max_size=6))
def test_any_text_embeds_to_unit_or_zero(texts):
    out = HashEmbedder(dim=32).embed(texts)
    assert out.shape == (len(texts), 32) and np.isfinite(out).all()
    for norm in np.linalg.norm(out, axis=1):
        assert norm == pytest.approx(1.0, abs=1e-5) or norm == 0.0


# -- preset selection and the base-class checks --------------------------------------------------

def test_hash_is_the_default_preset(monkeypatch):
    for name in ("IPY_MEMORY_EMBED_PRESET", "MEMORY_TREE_EMBED_PRESET"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(get_embedder(), HashEmbedder)
    assert get_embedder("hash", dim=128).dim == 128
    monkeypatch.setenv("MEMORY_TREE_EMBED_PRESET", "hash")
    assert isinstance(get_embedder(), HashEmbedder)
    inst = HashEmbedder(dim=16)
    assert get_embedder(inst) is inst


def test_unknown_preset(monkeypatch):
    with pytest.raises(InvalidArgument, match="unknown embedder preset 'nope'.*hash"):
        get_embedder("nope")
    monkeypatch.setenv("IPY_MEMORY_EMBED_PRESET", "nope")
    with pytest.raises(InvalidArgument):
        get_embedder()


class _Broken(Embedder):
    name, dim = "broken", 4

    def __init__(self, result):
        self.result = result

    def _embed(self, texts):
        return self.result


@pytest.mark.parametrize("result, message", [
    (np.ones((2, 4)), "expected 1 vectors"),
    (np.ones((1, 3)), "expected dimension 4"),
    (np.array([[np.nan, 0, 0, 0]]), "NaN"),
    (np.array([[np.inf, 0, 0, 0]]), "NaN"),
    ([["a", "b", "c", "d"]], "not a matrix"),
])
def test_base_class_rejects_bad_vectors(result, message):
    with pytest.raises(EmbeddingError, match=message):
        _Broken(result).embed(["x"])


def test_base_class_normalises():
    out = _Broken(np.array([[3.0, 4.0, 0, 0]])).embed(["x"])
    np.testing.assert_allclose(out, [[0.6, 0.8, 0, 0]], atol=1e-6)


def test_runs_of_a_large_batch_change_no_vector(monkeypatch):
    from ipy_memory.embeddings import hashing
    texts = TEXTS + ["", "one", " ".join(f"w{i}" for i in range(40))] + TEXTS
    want = HashEmbedder().embed(texts)
    monkeypatch.setattr(hashing, "_RUN_WORDS", 5)      # runs of a few texts, a long text alone
    emb = HashEmbedder()
    np.testing.assert_array_equal(emb.embed(texts), want)
