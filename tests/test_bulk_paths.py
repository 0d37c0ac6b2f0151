"""The bulk write's shortcuts give what the plain paths give: a section text's words from its two
lines, content hashes by OpenSSL's SHA-256, a batch's vectors sliced from one matrix, its rows
inserted from the second thread (statement journals in memory, JSON as UTF-8 bytes)."""

import random
import re
import unicodedata
import warnings

import numpy as np
import pytest

from ipy_memory import MemoryEngine, _digests, _text, _writer
from ipy_memory._written import Written

_PIECES = list("abcXYZ019 _-.\n\t'") + ["Σ", "σ", "ς", "é", "e\u0301", "東", "京", "タ", "ワ", "ー", "ﬁ", "Ａ",
                                        "İ", "ß", "\u0301", "ǅ", "Ⅻ", "①", "한", "\u3000", "’", "n't"]


def test_a_section_text_has_the_words_of_the_whole_text():
    """hashing_words of "path\\nbody" (the path's words, then the body's, kept for the index) is what
    tokenising the whole text gives, NFD, final sigma and CJK included."""
    rng = random.Random(5)
    for _ in range(20_000):
        text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 24)))
        text += "\n" + "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 8)))
        _text._recent.clear()
        _text._older.clear()
        whole = text.isascii() or unicodedata.is_normalized("NFKC", text)
        assert _text.hashing_words(text) == _text._words_python(text, nfkc=whole), repr(text)
        assert _text.hashing_words(text) == _text._words_python(text, nfkc=whole)      # (now cached)


def test_the_bulk_digests_are_the_builtin_ones():
    rng = random.Random(6)
    texts = ["", "a", "Hello  World", *("".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 300)))
                                        for _ in range(200))]
    fast = _digests.bulk_sha256()
    for t in texts:
        data = t.encode("utf-8", "surrogatepass")
        assert fast(data).hexdigest() == _digests.sha256(data).hexdigest()


def test_written_vectors_slice_the_block_or_stack_rows():
    w = Written()
    half = np.arange(5 * 3, dtype=np.float16).reshape(5, 3)
    for i in range(5):
        w[10 + i] = (None, None)
    w.block(10, half)
    w[20] = (None, np.full(3, 7, np.float16))
    assert np.array_equal(w.vectors([11, 12, 13]), half[1:4])
    assert np.array_equal(w.vectors([10, 12, 20]), np.stack([half[0], half[2], np.full(3, 7, np.float16)]))


def test_a_long_batch_stores_what_single_writes_store(tmp_path, monkeypatch):
    """Content hashes (exact duplicates across the switch to OpenSSL's SHA-256) and sections."""
    items = [{"content": f"# Note {i}\n\nbody {i} of the batch\n\n## Part\n\nmore {i}", "force": True} for i in range(300)]
    with MemoryEngine(tmp_path / "a", project="p") as mem:
        mem.remember_many(items)
        again = mem.remember_many([{"content": it["content"]} for it in items[:5] + items[-5:]])
        assert all(r.deduped for r in again)
        many = mem.store.query("SELECT content_hash FROM nodes ORDER BY key")
    monkeypatch.setattr(_text, "_sha256", _digests.sha256)       # (the builtin one, as before any bulk write)
    with MemoryEngine(tmp_path / "b", project="p") as mem:
        for it in items:
            mem.remember(it["content"], force=True)
        single = mem.store.query("SELECT content_hash FROM nodes ORDER BY key")
    assert many == single


def test_a_bulk_transaction_keeps_temporary_storage_in_memory_and_then_the_default(tmp_path, monkeypatch):
    """store.write(bulk=True) (remember_many's inline path): temp_store MEMORY inside, DEFAULT after,
    a failed batch included; the rows are those a plain write stores."""
    items = [{"content": f"note {i} \u6771\u4eac caf\u00e9 \"q\" \\ {i}", "metadata": {"i": i, "\u00fc": "\u00df"},
              "force": True} for i in range(300)]
    with MemoryEngine(tmp_path / "a", project="p") as mem:
        seen = []
        real = mem.store.write

        def write(*args, **kwargs):
            cm = real(*args, **kwargs)

            class Spy:
                def __enter__(self):
                    db = cm.__enter__()
                    seen.append(db.execute("PRAGMA temp_store").fetchone()[0])
                    return db

                def __exit__(self, *exc):
                    return cm.__exit__(*exc)
            return Spy()
        mem.store.write = write
        mem.remember_many(items)
        assert seen[0] == 2 and set(seen[1:]) <= {0} and mem.store.db.execute("PRAGMA temp_store").fetchone()[0] == 0

        def fail(*args):
            raise RuntimeError("the sections' insert fails")
        monkeypatch.setattr(_writer, "_insert_sections", fail)
        with pytest.raises(RuntimeError):
            mem.remember_many([{**it, "content": it["content"] + " again"} for it in items])
        assert mem.store.db.execute("PRAGMA temp_store").fetchone()[0] == 0
        assert mem.store.query("SELECT count(*) FROM documents")[0][0] == 300        # (all or nothing)
        monkeypatch.undo()
        bulk = mem.store.query("SELECT title, content, content_hash, importance, metadata FROM documents ORDER BY rowid")
        nodes = mem.store.query("SELECT key, ord, path, title, body, content_hash FROM nodes ORDER BY key")
    with MemoryEngine(tmp_path / "b", project="p") as mem:
        for it in items:
            mem.remember(it["content"], metadata=it["metadata"], force=True)
        assert bulk == mem.store.query("SELECT title, content, content_hash, importance, metadata FROM documents "
                                       "ORDER BY rowid")
        assert nodes == mem.store.query("SELECT key, ord, path, title, body, content_hash FROM nodes ORDER BY key")


class _Str(str):
    pass


def test_text_words_with_odd_stop_sets_are_the_twins():
    """The compiled tokenizer tests short ASCII tokens against a packed copy of the stop set: any set,
    with upper case, long, NUL, non-ASCII, non-str or str-subclass members, gives the twin's words."""
    from ipy_memory import _kernels
    if _kernels.text_words is None:
        return
    sets = [_text.STOP_WORDS, frozenset(), frozenset({"ab", "AB", "abababababab", "a\0", "09", "é"}),
            frozenset({"abababab", "abababa"}), frozenset({1, "ab"}), frozenset({_Str("ab")}),
            frozenset({"x" * 9}), frozenset(f"zz{i}" for i in range(300))]
    rng = random.Random(7)
    parts = ["ab", "AB", "abababab", "ababababa", "the", "The", "0", "09", " ", ".", "x", "Zthe", "_", "abababababab"]
    for _ in range(3000):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(0, 10)))
        for stop in sets:
            want = tuple(t for t in _text._ASCII_TOKEN.findall(text.lower())
                         if t not in stop and (len(t) > 1 or t.isdigit()))
            assert _kernels.text_words(text, stop) == want, (text, stop)


def test_metadata_encoder_falls_back_when_the_private_constructor_differs(monkeypatch):
    """The compiled one-shot JSON encoder is CPython's private API: a Python whose constructor takes
    other arguments (or has none) must keep encoding metadata through the public encoder."""
    from json import encoder
    from ipy_memory import _validate

    real = encoder.c_make_encoder      # (the public encoder uses it too, with markers: a dict)

    def other_signature(markers, *args):
        if markers is None:
            raise TypeError("c_make_encoder() takes 10 arguments")
        return real(markers, *args)

    def other_output(markers, *args):
        return real(markers, *args) if markers is not None else (lambda obj, level: iter(["{}"]))

    meta = {"k": ["é", 1, 2.5, None], "n": {"x": True}}
    want = _validate.json_encoder().encode(meta)
    for replacement in (other_signature, other_output):
        monkeypatch.setattr(encoder, "c_make_encoder", replacement)
        _validate._metadata_encoder.cache_clear()
        try:
            assert _validate._metadata_encoder() is None
            assert _validate.encoded_metadata(meta) == (meta, want)
        finally:
            _validate._metadata_encoder.cache_clear()
    monkeypatch.undo()
    assert _validate._metadata_encoder() is not None     # (CPython 3.11 here: the fast one)


def test_the_bulk_statements_bind_named_parameters_from_dicts(tmp_path):
    """Python 3.12.0-3.12.3 warn (DeprecationWarning, "will fail in 3.14") on numbered parameters
    (?1) bound from a sequence, so the bulk inserts name theirs; and a bulk insert of the second
    thread's kind raises no warning of its own."""
    sqls = [v for k, v in vars(_writer).items() if k.endswith("_SQL") and isinstance(v, str)]
    assert len(sqls) >= 4 and not [s for s in sqls if re.search(r"\?\d", s)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with MemoryEngine(tmp_path, project="p") as mem:
            got = mem.remember_many([{"content": f"note {i} on #{i % 7}\n# part\nbody {i}", "force": True}
                                     for i in range(_writer.OVERLAP_MIN_NODES)])
            stats = mem.stats()
            assert len(got) == stats["documents"] == _writer.OVERLAP_MIN_NODES
            assert stats["nodes"] == stats["vectors"] == 2 * len(got)
