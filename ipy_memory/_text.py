"""Text normalisation and tokenisation shared by the lexical index and the hashing embedder.

Text is NFKC-normalised (a decomposed accent, fullwidth and halfwidth forms are the words a query
types), Latin-script words are lower-cased, stop-words dropped and (for the lexical index) stripped of
their letters' accents and stemmed with the Snowball English stemmer. CJK runs have no spaces between words, so they become overlapping
character bigrams (a lone character stays a unigram): the standard CJK analyser recipe, which makes
Chinese and Japanese searchable without a dictionary.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache, partial

import snowballstemmer

from . import _kernels, _wordkernels
from ._digests import bulk_sha256, sha256

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_ASCII_TOKEN = re.compile(r"[^\W_]+")       # what the CJK-aware pattern finds in ASCII text


@lru_cache(maxsize=None)
def _cjk_patterns() -> tuple[re.Pattern, re.Pattern]:
    """(tokens, CJK character), compiled at the first non-ASCII text: their large character classes
    take ~6 ms to compile, a tenth of what `import ipy_memory` costs."""
    return re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+"), re.compile(rf"[{_CJK}]")


# Function words only: "before", "after", "not", "first", "more" carry meaning in questions
# (a longer list cost 0.003 recall@10 on LoCoMo dev). "s", "t", "ll"... are contraction fragments.
STOP_WORDS = frozenset("""
a am an and are as at be been but by can could did do does for from had has have he her hers him his
how i if in into is it its me my of on or our she so than that the their them then there these they
this those to was we were what when where which who whom why will with would you your
s t d ll m re ve
""".split())

_stemmer = snowballstemmer.stemmer("english")
# PyStemmer's own cache of 10,000 words (a dict of lists, rebuilt each time it fills) would double
# what lru_cache and the word tables already keep; a bulk insert refilled it every batch, and each
# new one cost the cyclic GC a 2 ms pass over its ~9,000 lists. Uncached, a new word's stem takes 0.2 us.
if hasattr(_stemmer, "maxCacheSize"):
    _stemmer.maxCacheSize = 0

# Snowball conflates regular inflections only ("played" -> "play"); "went" never meets "go". The
# commonest irregular forms map to their base word first (LoCoMo dev R@10, BENCHMARKS.md: `local`
# +0.003, flat turns +0.003, sessions -0.001). Forms that are also common words of their own are
# left out ("left", "found", "saw", "felt", "bit", "lit", "lay", "people").
_IRREGULAR = {form: base for base, forms in (entry.split(":") for entry in """
go:went,gone see:seen buy:bought make:made take:took,taken get:got,gotten give:gave,given feel:felt
think:thought tell:told say:said come:came run:ran begin:began,begun write:wrote,written meet:met
bring:brought keep:kept hold:held teach:taught catch:caught sell:sold build:built send:sent
spend:spent lose:lost win:won become:became eat:ate,eaten drive:drove,driven fly:flew,flown
grow:grew,grown know:knew,known throw:threw,thrown draw:drew,drawn sing:sang,sung swim:swam,swum
drink:drank,drunk ride:rode,ridden speak:spoke,spoken break:broke,broken choose:chose,chosen
fall:fell,fallen forget:forgot,forgotten hide:hid,hidden wake:woke,woken wear:wore,worn tear:tore,torn
steal:stole,stolen freeze:froze,frozen shake:shook,shaken hear:heard pay:paid sit:sat stand:stood
understand:understood fight:fought seek:sought sleep:slept sweep:swept weep:wept deal:dealt
mean:meant lend:lent bend:bent feed:fed lead:led flee:fled bleed:bled strike:struck stick:stuck
hang:hung dig:dug spin:spun swing:swung shoot:shot slide:slid bite:bitten blow:blew,blown
forgive:forgave,forgiven ring:rang,rung shine:shone sink:sank,sunk overcome:overcame
withdraw:withdrew,withdrawn child:children man:men woman:women foot:feet tooth:teeth mouse:mice
""".split()) for form in forms.split(",")}
# Chat writes the informal word where a question uses the neutral one ("the kids", "my fave pic" for
# "children", "favorite picture"): clipped forms, a British spelling and the everyday words for family
# members meet that word too (LoCoMo dev R@10, BENCHMARKS.md: turns +0.003, sessions and exchange +0.001).
_IRREGULAR.update({form: base for base, forms in (entry.split(":") for entry in """
picture:pic,pics family:fam favorite:fave,faves,fav,favs,favourite,favourites video:vid,vids
conversation:convo,convos birthday:bday,bdays information:info puppy:pup,pups girlfriend:gf
child:kid,kids,kiddo mother:mom,moms,mum,mums,mommy father:dad,dads,daddy
""".split()) for form in forms.split(",")})
_NEGATION = re.compile(r"\b(\w+?)n['\u2019]t\b", re.I)     # "won't" is no form of "win"
_NEGATED = {"wo": "will", "ca": "can", "sha": "shall", "ai": "is"}


def squeeze_spaces_python(text: str) -> str:
    """Each run of whitespace one space, none at either end."""
    return " ".join(text.split())


squeeze_spaces = _kernels.squeeze_spaces or squeeze_spaces_python     # (compiled: no list of every word)


def normalize(text: str) -> str:
    """Unicode NFKC, case-folded, whitespace collapsed: what two texts must share to be 'the same'."""
    return squeeze_spaces(_nfkc(text).casefold())


_nfkc = _kernels.nfkc or partial(unicodedata.normalize, "NFKC")     # (compiled: fullwidth punctuation mapped first)


def content_hash(text: str) -> str:
    """Stable hash of the normalised text (exact-duplicate detection)."""
    return _sha256(normalize(text).encode("utf-8")).hexdigest()


_sha256 = sha256       # content_hash's SHA-256: the builtin one until a bulk write asks for `bulk_digests`


def bulk_digests() -> None:
    """content_hash by OpenSSL's SHA-256 from now on (the same digests, faster), for a bulk write
    long enough to pay for loading it (_digests.bulk_sha256)."""
    global _sha256
    if _sha256 is sha256:
        _sha256 = bulk_sha256()


def exchange_content(session_id: str, turns) -> tuple[str, str]:
    """A chat exchange's stored text, its (speaker, text) turns as "speaker: text" paragraphs, and its
    hash (taken with the session id): remember_exchange writes it, forgetting a turn rewrites it."""
    content = "\n\n".join(f"{speaker}: {text}" for speaker, text in turns)
    return content, content_hash(session_id + "\n" + content)


def is_cjk(token: str) -> bool:
    return token[0] >= "\u3040" and bool(_cjk_patterns()[1].match(token))   # cheap test first: most text is not CJK


def _cjk_grams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i:i + 2] for i in range(len(run) - 1)]


def words(text: str) -> tuple[str, ...]:
    """NFKC-normalised, lower-cased words without stop-words; CJK runs split into character bigrams.
    Not stemmed.

    A write tokenises each text twice, for the embedder and for the lexical index: the last few
    thousand short texts' words are kept, so the second time costs a lookup."""
    return _recent_words(text) if len(text) <= _RECENT_CHARS else _words(text)


def _words(text: str, nfkc: bool = True, after: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The text's words followed by `after`."""
    if _kernels.text_words is not None:
        return _kernels.text_words(text, STOP_WORDS, nfkc, after)    # _words_python, compiled
    return _words_python(text, nfkc) + after


def hashing_words(text: str) -> tuple[str, ...]:
    """`words` as they were before NFKC: the hashing embedder's vectors are kept in stores under its
    name ('hash-v1-384'), so the words it hashes may not change (those of NFKC text never did).

    A section's text is embedded as "heading path\nbody" and indexed as its body: such a text's words
    are its first line's and then the rest's (a line break ends a word, and NFKC and lower() act
    on each side of it alone), the rest's kept for the index (`words`), so the body is tokenised once."""
    if text.isascii() or unicodedata.is_normalized("NFKC", text):
        if "\n" not in text:               # (and a write's second tokenisation is a cache lookup)
            return _recent_words(text) if len(text) <= _RECENT_CHARS else _words(text)
        got = _recent.get(text) or _older.get(text)
        if got is None:
            head, _, tail = text.partition("\n")
            got = _words(head, True, words(tail))      # (one tuple, untracked by the GC as text_words' own)
            if len(text) <= _RECENT_CHARS:
                _keep(text, got)             # (a one-section memory's body: the index asks for it whole)
        return got
    return _words(text, nfkc=False)


def _words_python(text: str, nfkc: bool = True) -> tuple[str, ...]:
    if nfkc and not text.isascii():      # "e\u0301" is "é" and "ＡＢＣ" "ABC", as a query types them
        text = unicodedata.normalize("NFKC", text)
    text = text.lower()
    if text.isascii():          # no CJK token: one filter, no per-token script test
        return tuple(t for t in _ASCII_TOKEN.findall(text) if t not in STOP_WORDS and (len(t) > 1 or t.isdigit()))
    out: list[str] = []
    for tok in _cjk_patterns()[0].findall(text):
        if tok in STOP_WORDS:
            continue
        if is_cjk(tok):
            out.extend(_cjk_grams(tok))
        elif len(tok) > 1 or tok.isdigit():
            out.append(tok)
    return tuple(out)


# The words of the last few thousand texts up to _RECENT_CHARS long, in two generations of dicts
# (a full one becomes the older, the older is dropped): what `words` and `hashing_words` share.
_RECENT_CHARS, _RECENT_SIZE = 2048, 4096
_recent: dict[str, tuple[str, ...]] = {}
_older: dict[str, tuple[str, ...]] = {}


def _keep(text: str, got: tuple[str, ...]) -> None:
    global _recent, _older
    if len(_recent) >= _RECENT_SIZE:
        _recent, _older = {}, _recent
    _recent[text] = got


def _recent_words(text: str) -> tuple[str, ...]:
    """_words(text), from the recent texts' when it is there."""
    got = _recent.get(text)
    if got is None:
        got = _older.get(text)
        if got is None:
            got = _words(text)
        if len(_recent) < _RECENT_SIZE:
            _recent[text] = got
        else:
            _keep(text, got)
    return got

# Bounded LRU caches are walked entry by entry by every full garbage collection, each entry's
# objects read from wherever they lie: a few hundred thousand entries cost 100 ms a collection
# when bulk inserts ran (lexical.index_terms keeps every indexed word in a word table of plain integers instead).
# These serve queries and duplicate checks, whose words repeat.
_WORD_CACHE = 1 << 15


@lru_cache(maxsize=_WORD_CACHE)
def stem(word: str) -> str:
    """The lexical index's term for a word: its Snowball stem, accents of Latin letters dropped first
    ("café" is "cafe" as most keyboards type it, as SQLite FTS5's unicode61 tokenizer folds it)."""
    if is_cjk(word) or word.isdigit():
        return word
    if not word.isascii():
        word = word.translate(_latin_folds())
    return _stemmer.stemWord(_IRREGULAR.get(word, word))


@lru_cache(maxsize=None)
def _latin_folds() -> dict[int, str]:
    """str.translate table: each Latin letter with diacritics (a base letter and combining marks
    U+0300-U+036F once decomposed: é ñ ç ő ǎ ẽ) to its base letter, and the few with no decomposition
    (ø ł đ ß æ œ ı) to what they are typed as. Other scripts keep their marks: й is no и."""
    folds = {ord(c): base for c, base in zip("øłđßæœıħŧ", "o l d ss ae oe i h t".split())}
    for code in (*range(0xC0, 0x250), *range(0x1E00, 0x1F00)):
        parts = unicodedata.normalize("NFD", chr(code))
        if (len(parts) > 1 and parts[0].isascii() and parts[0].isalpha()
                and all("\u0300" <= m <= "\u036f" for m in parts[1:])):
            folds[code] = parts[0]
    return folds


def _expand_negation(match: re.Match) -> str:
    head = match.group(1)
    return _NEGATED.get(head.lower(), head) + " not"


def surface_words(text: str) -> tuple[str, ...]:
    """`words`, "n't" read as "not"."""
    if "n't" in text or "n\u2019t" in text:
        text = _NEGATION.sub(_expand_negation, text)
    return words(text)


def surface_terms(text: str) -> list[tuple[str, str]]:
    """(word, index term) pairs: `words` with their stems, "n't" read as "not"."""
    return [(w, stem(w)) for w in surface_words(text)]


def index_word(word: str) -> int:
    """term_hash of its stem * 2 + whether it is `expandable`: what indexing a text needs of each
    word, as one int (cached by `lexical.index_terms`). A CJK gram or a number is its own stem and
    not expandable: most words new to a store are such grams, and skip the caches on the way, as
    do ASCII words (no CJK test needed; the caller caches the result, so the word's stem and term
    would only take room in the query caches)."""
    if word.isascii():
        if word.isdigit():
            return term_hash.__wrapped__(word) << 1
        return (term_hash.__wrapped__(_stemmer.stemWord(_IRREGULAR.get(word, word))) << 1
                | (word.isalpha() and len(word) > 2))
    if is_cjk(word) or word.isdigit():
        return term_hash.__wrapped__(word) << 1     # (term_hash without its cache)
    return term_hash(stem(word)) << 1 | expandable(word)


def terms(text: str) -> list[str]:
    """Index terms for the lexical index: `words` stemmed, "n't" read as "not"."""
    return [t for _, t in surface_terms(text)]


def expandable(word: str) -> bool:
    """A word worth a model vector for query expansion: Latin letters, not a number or a CJK gram."""
    return word.isalpha() and not is_cjk(word) and len(word) > 2


@lru_cache(maxsize=_WORD_CACHE)
def term_hash(term: str) -> int:
    """A 63-bit hash that is the same in every process (Python's hash() is salted per process)."""
    return _wordkernels.blake2b64(term) >> 1


@lru_cache(maxsize=None)
def cue_patterns() -> tuple[re.Pattern, re.Pattern, re.Pattern]:
    """(number, time, proper name): what answer_cues looks for, compiled at a write's first non-ASCII
    text (ASCII goes through the compiled twin) instead of in every `import ipy_memory` (~1.8 ms).

    Only whether a text matches counts. A lookahead for the first letters of the alternatives lets
    the regex skip most positions at once (2-3x faster than trying every alternative everywhere); the
    lookahead and the number's "[.,:]\\d+" tail change no answer (a number's first digit run matches
    alone)."""
    return (re.compile(r"\b(?=[\dotfsenhdc])(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|"
                       r"twelve|twenty|thirty|hundred|thousand|dozen|several|few|couple)\b", re.I),
            re.compile(r"\b(?=[12jfmasondwtyle])(?:(?:19|20)\d\d|(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|"
                       r"nov|dec)[a-z]*|monday|tuesday|wednesday|thursday|friday|saturday|sunday|yesterday|today|"
                       r"tomorrow|tonight|week|weekend|month|year|ago|last|next|since|morning|evening|"
                       r"summer|winter|spring|autumn|fall)\b|\d:\d\d|[年月日周]", re.I),
            re.compile(r"(?=[A-Z])(?<![.!?]\s)(?<!^)\b[A-Z][a-z]{2,}"))


_Q_NUMBER = re.compile(r"\bhow (?:many|much|long|often|old)\b|多少|几", re.I)
_Q_TIME = re.compile(r"\bwhen\b|\bwhat (?:year|month|day|date|time)\b|\bhow long ago\b|什么时候|何时|哪一?年", re.I)
_Q_NAME = re.compile(r"\bwho(?:m|se)?\b|\bwhere\b|\bwhich (?:city|country|place|person)\b|谁|哪里|在哪", re.I)


def _flags(text: str, patterns) -> int:
    return sum(bit for bit, pattern in zip((1, 2, 4), patterns) if pattern.search(text))


def answer_cues(text: str) -> int:
    """Bit flags saying which kinds of answer a text contains: 1 number, 2 time, 4 proper name.

    Used as a mild prior when a question asks for that kind ("how many", "when", "where/who"). ASCII
    text is scanned by the compiled twin of the three regexes when it is built (~10x faster)."""
    if _kernels.ascii_cues is not None:
        cues = _kernels.ascii_cues(text)
        if cues is not None:
            return cues
    return _flags(text, cue_patterns())


# Cue bits of their own: the text asks a question (the next message answers it), and it ends with one
# (it hands the turn over: it is no answer itself). Not the "?" of a URL's query string.
ASKS, ENDS_ASKING = 8, 16


@lru_cache(maxsize=None)
def _question_patterns() -> tuple[re.Pattern, re.Pattern]:
    return re.compile(r"？|\?(?=[\s\"'”’)\]]|\Z)"), re.compile(r"[?？]\W*\Z")     # (at a write's first "?")


def question_marks(text: str) -> int:
    """ASKS | ENDS_ASKING bits of a message: "Nice! Have you been?" has both, "Why? I'll tell you." ASKS."""
    if "?" not in text and "？" not in text:      # both need one: most texts skip the two regexes
        return 0
    asks, ends = _question_patterns()
    return (ASKS if asks.search(text) else 0) | (ENDS_ASKING if ends.search(text) else 0)


def question_cues(query: str) -> int:
    """Bit flags of the answer kinds a query asks for (same bits as `answer_cues`)."""
    return _flags(query, (_Q_NUMBER, _Q_TIME, _Q_NAME))


@lru_cache(maxsize=None)
def _addressee() -> re.Pattern:
    # a preposition of the addressee, companion, beneficiary or topic, then words, joined by "," / "and" /
    # "&" (which of them are names is decided by case); "according to Ana" names the source instead,
    # and so do "from" and "by" ("heard from Ana", "recommended by Ana"), left out
    return re.compile(r"(?<!according )\b(?:to|with|for|about|regarding)\s+([^\W\d_][\w'’-]*"
                      r"(?:\s*(?:,|&|,?\s+and)\s+[^\W\d_][\w'’-]*)*)", re.I)


def addressee_terms(query: str) -> frozenset[int]:
    """Term hashes of the names a query gives as the addressee, companion or topic of what it asks
    about: "Ben" in "What did Ana say to Ben?", "with Ben", "for Ben and Cy", "about Ben's job". The
    question is about what the other person named said or did (on LoCoMo's questions naming both
    speakers, 85% of the evidence lines are the other one's), so such a name does not count as
    naming a line's speaker when another term of the query names one (_lexscore.scores). A name the
    query also uses elsewhere ("Did Ben tell Ana about Ben's trip?") is not one."""
    spans, names = [], []
    for m in _addressee().finditer(query):
        for word in re.split(r"\s*(?:,|&|,?\s+and)\s+", m.group(1)):
            if not word[0].isupper():
                break               # "for Ana and her dog": the list of names ends
            names.append(word)
        spans.append(m.span(1))
    if not names:
        return frozenset()
    rest = query
    for start, end in reversed(spans):
        rest = rest[:start] + " " + rest[end:]
    elsewhere = {term_hash(t) for t in terms(rest)}
    return frozenset(h for w in names for t in terms(w) if (h := term_hash(t)) not in elsewhere)


# "[2023-05-08 13:56] Alice: text", "Alice: text", "[1:56 pm on 8 May, 2023] Bob: text": the usual shape
# of a logged chat line. The speaker is a field of its own (a query naming them boosts the line);
# the timestamp says nothing about what kind of answer the line holds.
@lru_cache(maxsize=None)
def chat_line() -> re.Pattern:
    return re.compile(r"^\s*(?:\[([^\]\n]{1,60})\]\s*)?(?:([^\W\d][\w .'-]{0,40}?)\s*:\s+)?(.*)\Z", re.S)


def chat_parts(text: str) -> tuple[str, str, str]:
    """(timestamp, speaker, message) of a chat-log line; ('', '', text) when it does not look like one."""
    if ":" not in text and "[" not in text:      # neither a speaker nor a timestamp: most notes skip the regex
        return "", "", text
    m = chat_line().match(text)
    if not m or not (m.group(1) or m.group(2)) or (m.group(2) and len(m.group(2).split()) > 3):
        return "", "", text
    return (m.group(1) or "").strip(), (m.group(2) or "").strip(), m.group(3)
