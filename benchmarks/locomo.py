#!/usr/bin/env python3
"""LoCoMo retrieval quality of ipy_memory through its public API, beside a plain BM25 baseline.

    python benchmarks/locomo.py PATH/locomo_dev.json                  # turns, sessions, exchange + BM25
    python benchmarks/locomo.py PATH --modes turns --set parent_weight=0.3 --set neighbor_weights=0.5,0.25
    python benchmarks/locomo.py PATH --quick                          # first conversation, turns: smoke test

The data file is an argument and is never copied anywhere (LoCoMo is for internal evaluation only).
It follows shared/tools/locomo_recall.py, the team's harness: every dialog turn's text is
"[{session date}] {speaker}: {text}" (+ " [image: {blip_caption}]"); evidence ids are normalised the
same way ("D8:6; D9:17", "D:11:26", "D30:05") and ids absent from the conversation are dropped;
questions without evidence are skipped, category 5 (adversarial) unless --adversarial. Per question

    R@k   = |evidence turns among the top k distinct turns| / |evidence turns|
    All@k = 1 if every evidence turn is among the top k

averaged overall and per category. Every conversation is its own project; its turns are stored in
one of three ways a user would:

    turns     one memory per turn (remember_many, force=True, metadata {"dia_id": ...})
    sessions  one Markdown document per session: "# Session <date>", then "## <speaker> (turn i)"
              with the turn's text (i = the turn's index in the conversation), via remember()
    exchange  remember_exchange per session, one message per turn (name = speaker,
              metadata {"dia_id": ...})

and every question is a recall(question, scope="project", limit=min(max k, 50)). The BM25 baseline
(numpy Okapi BM25, k1=1.5, b=0.75, Lucene idf, the harness's tokenizer and stop-words) runs on the
same turns in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # small mat-vecs: threads only add noise to timings
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import machine, parse_settings  # noqa: E402  (stdlib-only at import time)

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
MODES = ("turns", "sessions", "exchange")
STOP = set("""a an and are as at be been but by can could did do does for from had has have he her hers him his
how i if in into is it its me my of on or our she so than that the their them then there these they this those
to was we were what when where which who whom why will with would you your""".split())
_TURN_TITLE = re.compile(r"\(turn (\d+)\)\s*$")


# ----------------------------------------------------------------------------------------- data
def load(path: str) -> list[dict]:
    """Conversations: {id, dia_ids, texts, sessions: [(date, [(index, speaker, text)])], qa}.
    Accepts the locomo10.json layout, a single such object, or the flat per-conversation layout."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    convs = []
    for i, item in enumerate([data] if isinstance(data, dict) else data):
        c = item.get("conversation", item)
        numbers = sorted(int(m.group(1)) for k in c
                         if (m := re.fullmatch(r"session_(\d+)", k)) and isinstance(c[k], list))
        dia_ids, texts, sessions = [], [], []
        for n in numbers:
            date = c.get(f"session_{n}_date_time", "")
            turns = []
            for t in c[f"session_{n}"]:
                text = f"[{date}] {t['speaker']}: {t['text']}"
                if t.get("blip_caption"):
                    text += f" [image: {t['blip_caption']}]"
                turns.append((len(texts), t["speaker"], text))
                dia_ids.append(t["dia_id"])
                texts.append(text)
            sessions.append((date, turns))
        convs.append({"id": str(item.get("sample_id", i)), "dia_ids": dia_ids, "texts": texts,
                      "sessions": sessions, "qa": item.get("qa", [])})
    return convs


def parse_evidence(evidence, known) -> list[str]:
    """Normalise annotation quirks ('D8:6; D9:17', 'D:11:26', 'D30:05'); drop ids absent from the conversation."""
    out = []
    for m in re.finditer(r"D:?(\d+):(\d+)", " ".join(map(str, evidence))):
        d = f"D{int(m.group(1))}:{int(m.group(2))}"
        if d in known and d not in out:
            out.append(d)
    return out


def tokens(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP and (len(w) > 1 or w.isdigit())]


# ----------------------------------------------------------------------------------------- retrievers
class BM25:
    """Okapi BM25 in numpy (k1=1.5, b=0.75, Lucene idf): the harness's bm25-numpy retriever."""
    name = "BM25 (numpy)"

    def __init__(self, k1: float = 1.5, b: float = 0.75):
        self.k1, self.b = k1, b

    def index(self, conv: dict) -> None:
        self.dia_ids = conv["dia_ids"]
        docs = [tokens(t) for t in conv["texts"]]
        self.vocab: dict[str, int] = {}
        for d in docs:
            for w in d:
                self.vocab.setdefault(w, len(self.vocab))
        tf = np.zeros((len(self.vocab), len(docs)), np.float32)
        for j, d in enumerate(docs):
            for w, c in Counter(d).items():
                tf[self.vocab[w], j] = c
        dl = tf.sum(0)
        df = (tf > 0).sum(1)
        idf = np.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
        norm = self.k1 * (1 - self.b + self.b * dl / max(dl.mean(), 1e-9))
        self.w = (idf[:, None] * tf / (tf + norm)).astype(np.float32)

    def search(self, query: str, k: int) -> list[str]:
        q = [w for w in tokens(query) if w in self.vocab]
        if not q:
            return []
        s = self.w[[self.vocab[w] for w in q]].sum(0)
        return [self.dia_ids[int(i)] for i in np.argsort(-s, kind="stable")[:k]]

    def close(self) -> None:
        pass


class Engine:
    """ipy_memory through its public API; one project per conversation, one data dir per mode."""

    def __init__(self, mode: str, data_dir: Path, embedder, settings):
        self.mode, self.dir, self.embedder, self.settings = mode, data_dir, embedder, settings
        self.name = f"ipy_memory {mode}"
        self.eng = None

    def index(self, conv: dict) -> None:
        from ipy_memory import MemoryEngine
        self.close()
        self.dia_ids = conv["dia_ids"]
        self.eng = MemoryEngine(self.dir, project=f"locomo-{conv['id']}", embedder=self.embedder,
                                settings=self.settings)
        if self.mode == "turns":
            self.eng.remember_many([{"content": t, "metadata": {"dia_id": d}, "force": True}
                                    for d, t in zip(conv["dia_ids"], conv["texts"])])
        elif self.mode == "sessions":
            for date, turns in conv["sessions"]:
                body = "\n\n".join(f"## {speaker} (turn {i})\n\n{t}" for i, speaker, t in turns)
                self.eng.remember(f"# Session {date}\n\n{body}\n", force=True)
        elif self.mode == "exchange":
            for date, turns in conv["sessions"]:
                self.eng.remember_exchange(
                    f"session {date}",
                    [{"role": "user", "name": speaker, "content": t, "metadata": {"dia_id": self.dia_ids[i]}}
                     for i, speaker, t in turns])
        else:
            raise ValueError(f"unknown mode {self.mode!r}")

    def _dia(self, hit) -> str | None:
        if self.mode == "sessions":
            m = _TURN_TITLE.search(hit.title or "")
            return self.dia_ids[int(m.group(1))] if m and int(m.group(1)) < len(self.dia_ids) else None
        return (hit.metadata or {}).get("dia_id")

    def search(self, query: str, k: int) -> list[str]:
        out = []
        for hit in self.eng.recall(query, scope="project", limit=min(max(k, 1), 50)):
            d = self._dia(hit)
            if d is not None and d not in out:
                out.append(d)
        return out[:k]

    def close(self) -> None:
        if self.eng is not None:
            self.eng.close()
            self.eng = None


# ----------------------------------------------------------------------------------------- evaluation
def evaluate(convs, retriever, ks=(1, 5, 10, 20), adversarial=False) -> tuple[dict, list[dict]]:
    rows, per_q, skipped = [], [], Counter()
    t_index = t_search = 0.0
    for conv in convs:
        known = set(conv["dia_ids"])
        t0 = time.perf_counter()
        retriever.index(conv)
        t_index += time.perf_counter() - t0
        for qa in conv["qa"]:
            cat = qa.get("category")
            if cat == 5 and not adversarial:
                skipped["adversarial"] += 1
                continue
            ev = parse_evidence(qa.get("evidence") or [], known)
            if not ev:
                skipped["no evidence"] += 1
                continue
            t0 = time.perf_counter()
            got = retriever.search(qa["question"], max(ks))
            t_search += time.perf_counter() - t0
            got = list(dict.fromkeys(got))[:max(ks)]
            found = [sum(e in got[:k] for e in ev) for k in ks]
            rows.append((cat, [f / len(ev) for f in found], [float(f == len(ev)) for f in found]))
            per_q.append({"conv": conv["id"], "category": cat, "question": qa["question"], "evidence": ev, "top": got})
    retriever.close()
    groups = {"overall": rows}
    for c in sorted({r[0] for r in rows}):
        groups[f"{c} {CATEGORIES.get(c, '?')}"] = [r for r in rows if r[0] == c]
    table = {g: {"n": len(rs),
                 **{f"R@{k}": float(np.mean([r[1][i] for r in rs])) for i, k in enumerate(ks)},
                 **{f"All@{k}": float(np.mean([r[2][i] for r in rs])) for i, k in enumerate(ks)}}
             for g, rs in groups.items()}
    timing = {"index_s": t_index, "search_s": t_search, "queries": len(rows),
              "qps": len(rows) / t_search if t_search else float("inf")}
    return {"table": table, "timing": timing, "skipped": dict(skipped)}, per_q


def markdown(results: dict, ks) -> str:
    """One row per (group, system): overall first, then each category."""
    cols = [f"R@{k}" for k in ks] + [f"All@{k}" for k in ks]
    out = ["| group | system | n | " + " | ".join(cols) + " | index s | queries/s |",
           "|---|---|---:|" + "---:|" * (len(cols) + 2)]
    groups = list(dict.fromkeys(g for r in results.values() for g in r["table"]))
    for g in groups:
        for name, r in results.items():
            row = r["table"].get(g)
            if row is None:
                continue
            t = r["timing"]
            extra = f" {t['index_s']:.2f} | {t['qps']:,.0f} |" if g == "overall" else " | |"
            out.append(f"| {g} | {name} | {row['n']} | " + " | ".join(f"{row[c]:.3f}" for c in cols) + " |" + extra)
    return "\n".join(out)


def compact(results: dict, k: int) -> str:
    """Side by side: R@k and All@k per category, one column pair per system."""
    names = list(results)
    out = ["| group | n | " + " | ".join(f"{n} R@{k} | All@{k}" for n in names) + " |",
           "|---|---:|" + "---:|---:|" * len(names)]
    groups = list(dict.fromkeys(g for r in results.values() for g in r["table"]))
    for g in groups:
        first = next(r["table"][g] for r in results.values() if g in r["table"])
        cells = []
        for n in names:
            row = results[n]["table"].get(g)
            cells.append(f"{row[f'R@{k}']:.3f} | {row[f'All@{k}']:.3f}" if row else "– | –")
        out.append(f"| {g} | {first['n']} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", help="LoCoMo JSON file (never copied)")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {','.join(MODES)}")
    ap.add_argument("--ks", default="1,5,10,20", help="comma-separated cut-offs")
    ap.add_argument("--adversarial", action="store_true", help="also evaluate category 5 questions")
    ap.add_argument("--embedder", default="hash", help="ipy_memory embedder preset (default hash)")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="override an ipy_memory Settings field, e.g. --set neighbor_weights=0.5,0.25")
    ap.add_argument("--no-bm25", action="store_true", help="skip the BM25 baseline")
    ap.add_argument("--quick", action="store_true", help="first conversation only, turns mode (smoke test)")
    ap.add_argument("--conversations", type=int, default=0, help="use only the first N conversations")
    ap.add_argument("--workdir", help="where the per-mode data dirs go (default: a temp dir, removed after)")
    ap.add_argument("--json", help="write summary and per-question top-k dia_ids here")
    a = ap.parse_args(argv)

    from ipy_memory import Settings
    ks = tuple(int(k) for k in a.ks.split(","))
    modes = ["turns"] if a.quick and a.modes == ",".join(MODES) else [m.strip() for m in a.modes.split(",") if m.strip()]
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode {m!r}; use {','.join(MODES)}")
    overrides = parse_settings(a.set)
    settings = Settings().with_(**overrides)
    convs = load(a.data)
    if a.quick:
        convs = convs[:1]
    elif a.conversations:
        convs = convs[: a.conversations]
    mach = machine()
    date = time.strftime("%Y-%m-%d %H:%M")
    print(f"# LoCoMo retrieval, {date}: {len(convs)} conversation(s), {sum(len(c['texts']) for c in convs):,} turns; "
          f"modes {','.join(modes)}; embedder {a.embedder}; settings overrides {overrides or 'none'}")
    print(f"{mach['cores']} cores, {mach['cpu']}, Python {mach['python']}; engine {mach['engine']}")

    root = Path(a.workdir or tempfile.mkdtemp(prefix="locomo-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    results, per_question = {}, {}
    try:
        retrievers = [Engine(m, root / m, a.embedder, settings) for m in modes]
        if not a.no_bm25:
            retrievers.append(BM25())
        for r in retrievers:
            if isinstance(r, Engine) and (r.dir / "memory.sqlite3").exists():
                shutil.rmtree(r.dir)       # a stale store would mix runs
            res, per_q = evaluate(convs, r, ks, a.adversarial)
            results[r.name] = res
            per_question[r.name] = per_q
            t = res["timing"]
            print(f"  {r.name}: R@{ks[-1]} {res['table']['overall'][f'R@{ks[-1]}']:.3f}, "
                  f"{t['queries']} questions, index {t['index_s']:.2f} s, {t['qps']:,.0f} queries/s", flush=True)
    finally:
        if not a.workdir:
            shutil.rmtree(root, ignore_errors=True)
    first = next(iter(results.values()))
    print(f"\nquestions {first['timing']['queries']}, skipped {first['skipped']}\n")
    print(markdown(results, ks))
    main_k = 10 if 10 in ks else ks[-1]
    print(f"\nSide by side, R@{main_k} and All@{main_k}:\n")
    print(compact(results, main_k))
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"data": a.data, "date": date, "machine": mach, "ks": ks, "modes": modes,
                       "embedder": a.embedder, "settings_overrides": {k: list(v) if isinstance(v, tuple) else v
                                                                       for k, v in overrides.items()},
                       "results": results, "questions": per_question}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
