"""Lexical words are NFKC-normalised: a memory stored in one Unicode spelling is found by a query in
another, also in a store whose lexical snapshot was written with the tokens of the code before."""

import pytest

from ipy_memory import MemoryEngine, _text
from ipy_memory.lexical import LexicalShard

NFD = "Updated my re\u0301sume\u0301 before the interview"          # e + combining acute
FULLWIDTH = "Ｋｕｂｅｒｎｅｔｅｓ cluster upgrade notes"
FILLER = [f"entry {i}: the amber lantern number {i}" for i in range(300)]     # enough for a snapshot


def ids(mem, query):
    """The memories a query finds, best first (a match also brings its neighbours along)."""
    return [h.document_id for h in mem.recall(query, limit=3)]


@pytest.mark.parametrize("query, stored", [("résumé", NFD), ("kubernetes", FULLWIDTH), ("KUBERNETES", FULLWIDTH)])
def test_a_memory_is_found_in_another_unicode_spelling(tmp_path, query, stored):
    with MemoryEngine(tmp_path, project="p") as mem:
        want = mem.remember(stored).id
        mem.remember("an unrelated note about lanterns")
        assert ids(mem, query)[:1] == [want]
        other = mem.remember("the cafe\u0301 opens at nine").id          # and the other way round
        assert ids(mem, "café")[:1] == [other]


def _old_words(text: str, nfkc: bool = False) -> tuple[str, ...]:
    """_text.words of the code before NFKC (no CJK in these texts): lower-cased, no normalisation."""
    return tuple(t for t in _text._cjk_patterns()[0].findall(text.lower())
                 if t not in _text.STOP_WORDS and (len(t) > 1 or t.isdigit()))


def test_a_snapshot_written_with_the_old_words_is_rebuilt(tmp_path, monkeypatch):
    """A store whose lexical snapshot holds the old tokens (snapshot version 8, the last before NFKC)
    is re-tokenised from SQLite when opened, not loaded with them."""
    assert _old_words(NFD) != _text.words(NFD)          # (the old words differ: "re", "sume")
    with monkeypatch.context() as old:
        old.setattr(LexicalShard, "VERSION", 8)
        old.setattr(_text, "_words", _old_words)
        old.setattr(_text, "_recent_words", _old_words)
        with MemoryEngine(tmp_path, project="p") as mem:
            mem.remember_many([{"content": t, "force": True} for t in FILLER])
            want = mem.remember(NFD).id
            assert ids(mem, "résumé") == []               # what the old code answered
    assert list((tmp_path / "index").glob("*.lex.npz"))
    with MemoryEngine(tmp_path, project="p") as mem:
        assert ids(mem, "résumé")[:1] == [want]
        assert len(mem.shards.get("project:p").lex) == len(FILLER) + 1


# ------------------------------------------------------------------------------ accents of Latin letters
@pytest.mark.parametrize("query, stored", [
    ("cafe zurich", "Lunch at the Café in Zürich on Friday"),
    ("Café Zürich", "lunch at the cafe in zurich on friday"),
    ("resume", "Updated my résumé before the interview"),
    ("hauptstrasse", "The office moved to Hauptstraße 5"),
    ("Ångström", "wavelength in angstrom units"),
])
def test_accents_of_latin_letters_do_not_hide_a_memory(tmp_path, query, stored):
    with MemoryEngine(tmp_path, project="p") as mem:
        want = mem.remember(stored).id
        mem.remember("an unrelated note about lanterns")
        assert ids(mem, query)[:1] == [want]


def test_other_scripts_keep_their_marks():
    assert _text.stem("йогурт") != _text.stem("иогурт")        # й (и + breve) is a letter of its own
    assert _text.stem("ελληνικά") == "ελληνικά"
    assert _text.stem("café") == _text.stem("cafe") and _text.stem("øl") == "ol"


def test_a_snapshot_written_before_the_folding_is_rebuilt(tmp_path, monkeypatch):
    """Snapshot version 9 held the terms of unfolded words: opened by this code, it is rebuilt from
    SQLite (else 'café' would stay under a term no query makes any more)."""
    from ipy_memory import _wordkernels, lexical
    unfolded = _text.stem.__wrapped__.__globals__["_stemmer"].stemWord
    with monkeypatch.context() as old:
        old.setattr(LexicalShard, "VERSION", 9)
        old.setattr(_text, "stem", lambda w: w if _text.is_cjk(w) or w.isdigit() else unfolded(w))
        old.setattr(lexical, "_word_table", _wordkernels.word_table())      # the process's word -> term cache
        with MemoryEngine(tmp_path, project="p") as mem:
            mem.remember_many([{"content": t, "force": True} for t in FILLER])
            want = mem.remember("Lunch at the Café in Zürich on Friday").id
            assert ids(mem, "cafe zurich")[:1] != [want]                  # what the old code answered
    lexical._named_terms.cache_clear()
    assert list((tmp_path / "index").glob("*.lex.npz"))
    with MemoryEngine(tmp_path, project="p") as mem:
        assert ids(mem, "cafe zurich")[:1] == [want]
