"""Deterministic synthetic memories for the scale benchmark (no real data anywhere).

A corpus looks like what a notebook user stores: short notes and facts, longer paragraphs, some
Markdown documents with headings (and the odd code fence), and about 10% Chinese text. Words are
drawn from Zipf-Mandelbrot distributions over a generated English-like vocabulary (with real
function words at the top ranks, as in English) and a generated Chinese vocabulary, so term
frequencies, document frequencies and posting-list lengths behave like natural text.

    corpus = Corpus(seed=0)
    texts, metas = corpus.memories(0, 1000)     # memories 0..999; the same for the same seed
    queries = corpus.queries(200)               # built from random memories, so they have answers

Memory i depends only on (seed, i): any range can be generated on its own, in any process.
"""

from __future__ import annotations

import numpy as np

_FUNCTION = ("the of and to a in is for on that with as it this by be are from at or was an not "
             "we can if use when which all but has have will one so they more also do its into "
             "after before then than out up about only new how what where why who").split()
_TECH = ("data table model pandas numpy python notebook kernel query index column row frame train test "
         "loss epoch batch gpu cpu memory cache file path config env conda pip install version api key "
         "token request response server client docker image build deploy log error warning fix bug "
         "issue branch commit merge review schema sql join filter group sort plot chart figure metric "
         "score accuracy recall precision baseline experiment run result dataset split feature label "
         "vector embedding search rank user project session meeting deadline customer report sales "
         "revenue budget invoice region quarter week month year team owner note todo idea plan").split()
_SYLLABLES = ("ba be bi bo bu ka ke ki ko ku la le li lo lu ma me mi mo mu na ne ni no nu ra re ri ro ru "
              "sa se si so su ta te ti to tu va ve vi vo vu za ze zi zo zu bra cre dri flo gru pla "
              "pre sti tro qua shi cha tho wen lin dor mar tan vel rix son del kor").split()
_SUFFIX = ("", "", "", "", "s", "ed", "ing", "er", "ly", "tion", "ness", "al")
# Common CJK ideographs (a contiguous block of frequent characters is enough for tokenisation).
_CJK_BASE = 0x4E00
_CJK_SPAN = 3500
_HEADINGS = ("Overview Setup Usage Notes Results Decisions Open questions Next steps Background Data "
             "Method Caveats Summary Timeline Contacts Config").split(" ")


def _zipf(n: int, s: float = 1.07, q: float = 2.7) -> np.ndarray:
    p = 1.0 / (np.arange(1, n + 1) + q) ** s
    return np.cumsum(p / p.sum())


class Corpus:
    def __init__(self, seed: int = 0, vocab: int = 50_000, zh_vocab: int = 12_000):
        self.seed = seed
        rng = np.random.default_rng([seed, 1])
        words, seen = list(_FUNCTION) + list(_TECH), set(_FUNCTION) | set(_TECH)
        while len(words) < vocab:
            k = int(rng.integers(1, 4))
            w = "".join(_SYLLABLES[j] for j in rng.integers(0, len(_SYLLABLES), k))
            w += _SUFFIX[int(rng.integers(0, len(_SUFFIX)))]
            if w not in seen:
                seen.add(w)
                words.append(w)
        # function words first (very frequent), then a shuffle of the technical and made-up words
        head, tail = words[:len(_FUNCTION)], words[len(_FUNCTION):]
        order = rng.permutation(len(tail))
        tech_rank = rng.integers(0, 2000, len(_TECH))    # technical words are common, not the most common
        tail = [tail[i] for i in order]
        for w, r in zip(_TECH, tech_rank):
            i = tail.index(w)
            tail[i], tail[int(r)] = tail[int(r)], tail[i]
        self.en = np.array(head + tail, dtype=object)
        self.en_cdf = _zipf(len(self.en))
        zh, zseen = [], set()
        while len(zh) < zh_vocab:
            k = int(rng.choice([1, 2, 2, 2, 3, 4]))
            w = "".join(chr(_CJK_BASE + int(c)) for c in rng.integers(0, _CJK_SPAN, k))
            if w not in zseen:
                zseen.add(w)
                zh.append(w)
        self.zh = np.array(zh, dtype=object)
        self.zh_cdf = _zipf(len(self.zh), s=1.0)

    # ------------------------------------------------------------------------------- pieces
    def _en_words(self, rng, n: int) -> list[str]:
        return list(self.en[np.searchsorted(self.en_cdf, rng.random(n))])

    def _zh_words(self, rng, n: int) -> list[str]:
        return list(self.zh[np.searchsorted(self.zh_cdf, rng.random(n))])

    def _sentences(self, rng, n: int) -> str:
        ws = self._en_words(rng, n)
        out, i = [], 0
        while i < len(ws):
            k = int(rng.integers(6, 18))
            s = ws[i:i + k]
            s[0] = s[0].capitalize()
            if rng.random() < 0.2:          # numbers, dates and identifiers, as in real notes
                s.insert(int(rng.integers(0, len(s))), str(int(rng.integers(1, 2030))))
            if rng.random() < 0.1:
                s.insert(int(rng.integers(0, len(s))), f"`{ws[min(i + 1, len(ws) - 1)]}_{int(rng.integers(0, 99))}`")
            out.append(" ".join(s) + ("." if rng.random() < 0.9 else "?"))
            i += k
        return " ".join(out)

    def _chinese(self, rng, n: int) -> str:
        ws = self._zh_words(rng, n)
        out, i = [], 0
        while i < len(ws):
            k = int(rng.integers(4, 12))
            s = ws[i:i + k]
            if rng.random() < 0.3:          # mixed-script notes: English technical words inside
                s.insert(int(rng.integers(0, len(s))), " " + _TECH[int(rng.integers(0, len(_TECH)))] + " ")
            out.append("".join(s) + ("，" if rng.random() < 0.3 else "。"))
            i += k
        return "".join(out)

    def _markdown(self, rng, n: int) -> str:
        title = " ".join(self._en_words(rng, int(rng.integers(2, 5)))).capitalize()
        parts = [f"# {title}"]
        sections = int(rng.integers(2, 6))
        for j in range(sections):
            head = _HEADINGS[int(rng.integers(0, len(_HEADINGS)))]
            parts.append(f"## {head} {j + 1}")
            parts.append(self._sentences(rng, max(4, n // sections)))
            if rng.random() < 0.15:
                parts.append("```python\n" + f"df = load('{self._en_words(rng, 1)[0]}.csv')\n" + "```")
        return "\n\n".join(parts)

    def memory(self, i: int) -> tuple[str, dict]:
        rng = np.random.default_rng([self.seed, 2, i])
        n = int(np.clip(rng.lognormal(3.3, 0.8), 5, 600))     # words: median ~27, long tail
        r = rng.random()
        if r < 0.10:
            kind, text = "zh", self._chinese(rng, n)
        elif r < 0.25:
            kind, text = "markdown", self._markdown(rng, max(n, 30))
        elif r < 0.35:
            kind = "fact"
            a, b = self._en_words(rng, 2)
            text = f"The {a} {_TECH[int(rng.integers(0, len(_TECH)))]} lives in {b}.{_TECH[int(rng.integers(0, len(_TECH)))]}_{i % 10_000}."
        else:
            kind, text = "note", self._sentences(rng, n)
        text = f"{text} (#{i})" if kind == "fact" else text   # every memory distinct (no exact dedup)
        return text, {"kind": kind, "i": i, "tag": _TECH[i % 37]}

    def memories(self, start: int, stop: int) -> tuple[list[str], list[dict]]:
        texts, metas = [], []
        for i in range(start, stop):
            t, m = self.memory(i)
            texts.append(t)
            metas.append(m)
        return texts, metas

    def queries(self, n: int, pool: int) -> list[str]:
        """n queries, each made from a few words of a random memory among the first `pool`."""
        rng = np.random.default_rng([self.seed, 3])
        frames = ("{}", "{}", "{}", "what about {}", "where is {}", "how did we {}", "{} again?", "notes on {}")
        out = []
        for j in range(n):
            text, meta = self.memory(int(rng.integers(0, pool)))
            if meta["kind"] == "zh":
                chars = [c for c in text if "\u4e00" <= c <= "\u9fff"]
                if len(chars) >= 4:
                    s = int(rng.integers(0, len(chars) - 3))
                    out.append("".join(chars[s:s + int(rng.integers(2, 5))]))
                    continue
            toks = [w.strip(".,?`()#").lower() for w in text.split()]
            toks = [w for w in toks if w.isalpha() and w not in _FUNCTION]
            if not toks:
                toks = ["data"]
            k = min(len(toks), int(rng.integers(2, 6)))
            pick = [toks[int(x)] for x in rng.choice(len(toks), k, replace=False)]
            out.append(frames[int(rng.integers(0, len(frames)))].format(" ".join(pick)))
        return out
