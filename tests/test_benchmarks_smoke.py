"""Smoke tests for the benchmark scripts: they run end to end and print their tables.

No timing is asserted (the machine is shared and noisy). The LoCoMo script runs on a tiny
LoCoMo-format file written here: the real data set is internal-only and never used by tests.
Peers (ChromaDB, sqlite-vec) are skipped by scale.py when they are not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"


def _run(args: list[str], tmp_path: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", IPY_MEMORY_DATA_DIR=str(tmp_path / "default-data"))
    env.pop("IPY_MEMORY_EMBED_PRESET", None)
    p = subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert p.returncode == 0, f"exit {p.returncode}\n--- stdout\n{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-3000:]}"
    return p


def test_scale_quick(tmp_path):
    p = _run([str(BENCH / "scale.py"), "--quick", "--sizes", "1000", "--workdir", str(tmp_path / "work"),
              "--json", str(tmp_path / "scale.json")], tmp_path)
    out = p.stdout
    assert "### 1,000 memories" in out
    assert "| metric | ipy_memory" in out
    for row in ("bulk insert, memories/s", "recall p95, ms", "cold open + first query, ms",
                "disk, bytes/memory", "peak RSS, MB", "vector recall@10 vs exact"):
        assert f"| {row} |" in out, row
    assert "### Goals (ipy_memory)" in out
    res = json.loads((tmp_path / "scale.json").read_text())["results"][0]
    ipy = res["systems"]["ipy_memory"]
    assert ipy["recall_empty"] < res["queries"]          # the synthetic queries find something
    assert 0.0 <= ipy["ann_recall10"] <= 1.0
    assert "insert_s" in res["systems"]["numpy"]
    assert not any((tmp_path / "work").iterdir())         # stores removed unless --keep


def _tiny_locomo(path: Path) -> None:
    """Two made-up conversations in the LoCoMo layout, with the annotation quirks the loader handles."""
    def conv(cid: str, a: str, b: str, topic: str) -> dict:
        s1 = [
            {"speaker": a, "dia_id": "D1:1", "text": f"Hi {b}! I started learning {topic} last week."},
            {"speaker": b, "dia_id": "D1:2", "text": f"Nice, {a}. Which {topic} class did you join?"},
            {"speaker": a, "dia_id": "D1:3", "text": "The evening class at the community centre on Elm Street.",
             "img_url": ["http://example.invalid/x.jpg"], "blip_caption": "a photo of a classroom with easels"},
            {"speaker": b, "dia_id": "D1:4", "text": "I adopted a grey cat named Pixel yesterday."},
        ]
        s2 = [
            {"speaker": a, "dia_id": "D2:1", "text": f"My {topic} teacher liked my first project."},
            {"speaker": b, "dia_id": "D2:2", "text": "Pixel knocked my coffee onto the keyboard this morning."},
            {"speaker": a, "dia_id": "D2:3", "text": "We are planning a trip to Lisbon in October."},
        ]
        return {
            "sample_id": cid,
            "conversation": {"speaker_a": a, "speaker_b": b,
                             "session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": s1,
                             "session_2_date_time": "10:04 am on 20 May, 2023", "session_2": s2,
                             "session_3_date_time": "9:00 am on 1 June, 2023"},   # a date with no session
            "qa": [
                {"question": f"Where does {a} take the {topic} class?", "answer": "Elm Street",
                 "evidence": ["D1:3"], "category": 4},
                {"question": f"What is the name of {b}'s cat?", "answer": "Pixel",
                 "evidence": ["D1:4; D2:2"], "category": 1},
                {"question": f"When did {a} start learning {topic}?", "answer": "May 2023",
                 "evidence": ["D:1:1"], "category": 2},
                {"question": "Where is the trip going?", "answer": "Lisbon", "evidence": ["D2:03", "D9:9"],
                 "category": 3},
                {"question": "What colour is the car?", "answer": "n/a", "evidence": [], "category": 3},
                {"question": f"Did {b} adopt a dog?", "adversarial_answer": "yes", "evidence": ["D1:4"],
                 "category": 5},
            ],
        }

    path.write_text(json.dumps([conv("conv-a", "Ana", "Ben", "pottery"),
                                conv("conv-b", "Cai", "Dee", "painting")]))


def test_locomo_quick(tmp_path):
    data = tmp_path / "tiny_locomo.json"
    _tiny_locomo(data)
    p = _run([str(BENCH / "locomo.py"), str(data), "--quick", "--json", str(tmp_path / "locomo.json")], tmp_path)
    out = p.stdout
    assert "| group | system | n |" in out
    assert "| overall | ipy_memory turns | 4 |" in out            # 6 questions: 1 adversarial, 1 no evidence
    assert "| overall | BM25 (numpy) | 4 |" in out
    res = json.loads((tmp_path / "locomo.json").read_text())
    assert res["modes"] == ["turns"]
    assert {q["conv"] for q in res["questions"]["ipy_memory turns"]} == {"conv-a"}
    assert res["results"]["ipy_memory turns"]["skipped"] == {"adversarial": 1, "no evidence": 1}


def test_locomo_all_modes_and_settings(tmp_path):
    data = tmp_path / "tiny_locomo.json"
    _tiny_locomo(data)
    p = _run([str(BENCH / "locomo.py"), str(data), "--adversarial", "--set", "parent_weight=0.3",
              "--set", "neighbor_weights=0.5,0.25", "--ks", "1,3"], tmp_path)
    for name in ("ipy_memory turns", "ipy_memory sessions", "ipy_memory exchange", "BM25 (numpy)"):
        assert f"| overall | {name} | 10 |" in p.stdout, name    # 2 conversations x 5 questions with evidence
    assert "5 adversarial" in p.stdout


def test_vector_index_quick(tmp_path):
    out = _run([str(BENCH / "vector_index.py"), "--quick"], tmp_path).stdout
    rows = [line for line in out.splitlines() if line.startswith("| exact") or line.startswith("| HNSW")]
    assert len(rows) == 2, out
    exact_recall = float(rows[0].split("|")[4])
    assert exact_recall >= 0.99, out      # the exact scan is exact (float16 candidates, float32 rescoring)


def test_graph_build_quick(tmp_path):
    out = _run([str(BENCH / "graph_build.py"), "--quick"], tmp_path).stdout
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in out.splitlines() if line.startswith("| ")}
    assert {"usearch only", "before", "new nodes only", "engine"} <= set(rows), out
    assert rows["usearch only"][2].strip() == "1.00×", out             # the baseline of the ratios
    assert int(rows["usearch only"][3].replace(",", "")) == 0, out     # a bare graph knows no orphans
    for name in ("before", "new nodes only", "engine"):                 # how many is timing-dependent
        assert int(rows[name][4].replace(",", "")) >= 0, out


def test_lexical_scale_small(tmp_path):
    out = _run([str(BENCH / "lexical_scale.py"), "--n", "3000"], tmp_path).stdout
    assert "3,000 sections indexed" in out, out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    assert {"structured (the engine's)", "plain BM25, same postings", "ratio"} <= set(rows), out
    assert float(rows["ratio"].split("|")[2].strip().rstrip("x")) > 0, out


def test_dedup_pool_small(tmp_path):
    out = _run([str(BENCH / "dedup_pool.py"), "--n", "40", "--corpus", "2000"], tmp_path).stdout
    assert "pairs at cosine >= 0.92" in out and int(out.split()[0].replace(",", "")) > 100
    rows = [line for line in out.splitlines() if line.startswith("| weighed terms | 4 |")]
    assert rows and rows[0].split("|")[3].strip() == "0"       # the engine's rule misses no English pair


def test_kernels_quick(tmp_path):
    from ipy_memory import _kernels
    if not _kernels.COMPILED:
        import pytest
        pytest.skip("the kernels benchmark compares the compiled extension with its twins")
    out = _run([str(BENCH / "kernels.py"), "--quick"], tmp_path).stdout
    for row in ("half_dots, F16C path", "usearch exact search, 2 threads", "numpy twin", "half_dots_crc (",
                "quantize_rows, F16C", "text_words", "ascii_cues", "blake2b64", "gram_hashes", "index_batch",
                "sort_postings", "merge_postings", "to_half", "rows_json"):
        assert row in out, row
