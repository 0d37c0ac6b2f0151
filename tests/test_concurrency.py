"""Several kernels on one data dir at once.

Four worker processes (plain subprocesses running WORKER below) share one data dir and project.
Each stores N memories (single `remember` calls and `remember_many` batches, in the project and
global scopes), forgets some of its own and some recalled from other workers, and recalls other
workers' memories while they are being written; two of them insert every write from a second
thread beside their indexing (BatchWriter.flush_beside_indexing), and their batches, forced, are
embedded inside the transaction while that thread inserts the documents (insert_documents). Then every worker waits for the
others and recalls every memory the others acknowledged (all must be found) and every forgotten
one (none may be found). The parent checks SQLite, a freshly opened engine and a long-lived engine (open
since before the workers started) after its next recall.

Default N is small (fast); `pytest --heavy` runs N = 5,000 per process.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ipy_memory import MemoryEngine, Settings

WORKERS = 4

WORKER = textwrap.dedent(r'''
    import json, os, random, sys, time, traceback
    from pathlib import Path
    from ipy_memory import MemoryEngine, Settings, NotFound, IpyMemoryError

    w, n, data_dir, out_dir, seed, exact = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), \
        int(sys.argv[5]), int(sys.argv[6])
    rng = random.Random(seed * 100 + w)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rng.choice(letters) for _ in range(rng.randint(4, 9))) for _ in range(3000)]

    def token(worker, i):
        return f"w{worker}x{i:05d}"

    def content(i):
        words = " ".join(rng.choice(vocab) for _ in range(12))
        if i % 7 == 0:   # some Markdown with sections too
            return f"# Note {token(w, i)}\n\n{words}\n\n## Detail\n\nmore about {token(w, i)}: {words[::-1]}"
        return f"Memory {token(w, i)} from worker {w}: {words}."

    if w % 2 == 0:   # half the kernels insert every write from a second thread beside their indexing
        import ipy_memory._writer as _writer
        _writer.OVERLAP_MIN_NODES = 1

    eng = MemoryEngine(data_dir, project="shared", session=f"w{w}",
                       settings=Settings(exact_threshold=exact, hnsw_tail=max(exact // 2, 50), vector_weight_hash=0.3, vector_index="hnsw"))
    acked, forgotten, errors, not_found = {}, set(), [], 0
    dups, seen_others, recalls = 0, 0, 0
    t0 = time.perf_counter()
    i = 0

    def record(tokens, results):
        global dups
        for tok, res in zip(tokens, results):
            if res.stored:
                acked[res.id] = tok
            else:
                dups += 1

    while i < n:
        op = rng.random()
        try:
            if op < 0.40:
                scope = "global" if rng.random() < 0.25 else "project"
                res = eng.remember(content(i), scope=scope)
                record([token(w, i)], [res])
                i += 1
            elif op < 0.75:
                k = min(rng.randint(2, 6), n - i)
                items = [{"content": content(i + j), "scope": "global" if rng.random() < 0.25 else "project",
                          "force": w % 2 == 0} for j in range(k)]    # (forced: embedded beside the documents' insert)
                record([token(w, i + j) for j in range(k)], eng.remember_many(items))
                i += k
            elif op < 0.87:
                live = sorted(set(acked) - forgotten)
                if live:
                    victim = rng.choice(live)
                    try:
                        eng.forget(victim)
                    except NotFound:
                        not_found += 1   # another kernel recalled and forgot it first: documented
                    forgotten.add(victim)
            else:
                other = rng.choice([x for x in range(4) if x != w])
                j = rng.randrange(max(i, 1))
                hits = eng.recall(token(other, j), limit=3)
                recalls += 1
                others = [h for h in hits if h.document_id not in acked]
                seen_others += bool(others)
                if others and rng.random() < 0.15:   # forget a memory another kernel stored
                    victim = others[0].document_id
                    try:
                        eng.forget(victim)
                    except NotFound:
                        not_found += 1   # its owner (or a third kernel) forgot it first: documented
                    forgotten.add(victim)
        except Exception as exc:
            errors.append(f"{type(exc).__module__}.{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    write_seconds = time.perf_counter() - t0

    (out_dir / f"phase1-{w}.json").write_text(json.dumps({"acked": acked, "forgotten": sorted(forgotten)}))
    (out_dir / f"done-{w}").write_text("1")
    deadline = time.time() + 600
    while not all((out_dir / f"done-{x}").exists() for x in range(4)):
        if time.time() > deadline:
            errors.append("timed out waiting for the other workers")
            break
        time.sleep(0.05)

    # every kernel must now see every other kernel's memories (and none of the forgotten ones)
    phase1 = [json.loads((out_dir / f"phase1-{x}.json").read_text()) for x in range(4)]
    all_forgotten = set().union(*(p["forgotten"] for p in phase1))
    expected = missed = ghost = 0
    t1 = time.perf_counter()
    for x, p in enumerate(phase1):
        if x == w:
            continue
        for doc_id, tok in p["acked"].items():
            try:
                hits = eng.recall(tok, limit=3)
            except Exception as exc:
                errors.append(f"final recall: {type(exc).__name__}: {exc}")
                continue
            found = doc_id in {h.document_id for h in hits}
            if doc_id in all_forgotten:
                ghost += found
            else:
                expected += 1
                missed += not found
    recall_seconds = time.perf_counter() - t1
    eng.close()
    (out_dir / f"result-{w}.json").write_text(json.dumps({
        "errors": errors, "not_found": not_found, "dups": dups, "seen_others": seen_others, "recalls": recalls,
        "expected": expected, "missed": missed, "ghost": ghost, "write_seconds": write_seconds,
        "recall_seconds": recall_seconds, "stored": len(acked)}))
''')

TOKEN = re.compile(r"w\dx\d{5}")


def run_workers(data_dir: Path, out_dir: Path, n: int, exact: int, seed: int, timeout: float):
    out_dir.mkdir()
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(w), str(n), str(data_dir), str(out_dir),
                               str(seed), str(exact)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                              cwd=out_dir)
             for w in range(WORKERS)]
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"workers did not finish within {timeout} s")
        outs.append((p.returncode, err.decode(errors="replace")))
    for w, (rc, err) in enumerate(outs):
        assert rc == 0, f"worker {w} exited with {rc}:\n{err[-4000:]}"
    results = [json.loads((out_dir / f"result-{w}.json").read_text()) for w in range(WORKERS)]
    phase1 = [json.loads((out_dir / f"phase1-{w}.json").read_text()) for w in range(WORKERS)]
    return results, phase1


def graph_misses(problems: list[str]) -> tuple[int, list[str]]:
    """Split check_indexes' problems into HNSW self-search misses (counted) and everything else."""
    misses, others = 0, []
    for p in problems:
        m = re.search(r"(\d+) of \d+ node keys not found by vec.search .*\(HNSW graph\)", p)
        if m:
            misses += int(m.group(1))
        else:
            others.append(p)
    return misses, others


def check_run(data_dir: Path, tmp_path: Path, n: int, exact: int, seed: int, timeout: float, check_indexes,
              miss_rate: float = 0.0):
    """Run the workers and check everything; `miss_rate`: share of HNSW self-search misses accepted."""
    # vector_index="hnsw" and vector_weight_hash > 0: hash vectors rank recall too, so spaces above `exact` get an HNSW graph
    settings = Settings(exact_threshold=exact, hnsw_tail=max(exact // 2, 50), vector_weight_hash=0.3, vector_index="hnsw")
    # a long-lived kernel: open before the workers start, with both spaces loaded
    long_lived = MemoryEngine(data_dir, project="shared", session="parent", settings=settings)
    try:
        parent = long_lived.remember("The parent kernel keeps a note about zebra crossings.")
        assert long_lived.recall("zebra crossings").hits[0].document_id == parent.id
        t0 = time.perf_counter()
        results, phase1 = run_workers(data_dir, tmp_path / "out", n, exact, seed, timeout)
        elapsed = time.perf_counter() - t0

        errors = [e for r in results for e in r["errors"]]
        assert not errors, "undocumented errors in workers:\n" + "\n".join(errors[:5])

        acked: dict[str, str] = {}
        for p in phase1:
            assert not set(p["acked"]) & set(acked), "two kernels were given the same id"
            acked.update(p["acked"])
        forgotten = set().union(*(p["forgotten"] for p in phase1))
        assert forgotten <= set(acked) | {parent.id}
        expected = (set(acked) | {parent.id}) - forgotten

        # SQLite: exactly the acknowledged, unforgotten documents, each once; counts agree
        con = sqlite3.connect(f"file:{data_dir / 'memory.sqlite3'}?mode=ro", uri=True)
        try:
            assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            docs = con.execute("SELECT id, content FROM documents").fetchall()
            assert {d for d, _ in docs} == expected
            tokens = [t for _, c in docs for t in set(TOKEN.findall(c))]
            assert len(tokens) == len(set(tokens)), "a memory was stored twice"
            assert {t for t in tokens} == {acked[d] for d in expected - {parent.id}}
            n_nodes = con.execute("SELECT count(*) FROM nodes").fetchone()[0]
            n_vecs = con.execute("SELECT count(*) FROM vectors").fetchone()[0]
            assert n_nodes == n_vecs
            assert con.execute("SELECT count(*) FROM nodes n LEFT JOIN vectors v ON v.node_key = n.key "
                               "WHERE v.node_key IS NULL").fetchone()[0] == 0
            assert con.execute("SELECT count(*) FROM documents d WHERE NOT EXISTS "
                               "(SELECT 1 FROM nodes n WHERE n.document_id = d.id)").fetchone()[0] == 0
            assert con.execute("SELECT count(*) FROM nodes n WHERE NOT EXISTS "
                               "(SELECT 1 FROM documents d WHERE d.id = n.document_id)").fetchone()[0] == 0
            assert con.execute(f"SELECT count(*) FROM documents WHERE id IN ({','.join('?' * len(forgotten))})",
                               sorted(forgotten)).fetchone()[0] == 0
        finally:
            con.close()

        # every kernel found the others' memories, and none of the forgotten ones
        for w, r in enumerate(results):
            assert r["expected"] > 0 and r["missed"] == 0, f"worker {w} missed {r['missed']}/{r['expected']}"
            assert r["ghost"] == 0, f"worker {w} recalled {r['ghost']} forgotten memories"

        # the long-lived engine, after its next recall, agrees with SQLite
        hits = long_lived.recall("zebra crossings")
        assert hits.hits[0].document_id == parent.id
        misses_long, others = graph_misses(check_indexes(long_lived, load=False))
        assert not others and misses_long <= miss_rate * n_nodes, (misses_long, others)
        lex_total = sum(len(s.lex) for s in long_lived.shards.loaded.values())
        assert lex_total == n_nodes
        for doc_id in list(forgotten)[:50]:
            assert doc_id not in {h.document_id for h in long_lived.recall(acked[doc_id], limit=5)}
    finally:
        long_lived.close()

    # a freshly opened engine (graphs saved by four closing kernels, reconciled on load) agrees too
    with MemoryEngine(data_dir, project="shared", session="fresh", settings=settings) as fresh:
        misses_fresh, others = graph_misses(check_indexes(fresh))
        assert not others and misses_fresh <= miss_rate * n_nodes, (misses_fresh, others)
        assert sum(len(s.lex) for s in fresh.shards.loaded.values()) == n_nodes
        st = fresh.stats()
        assert st["documents"] == len(expected) and st["nodes"] == st["vectors"] == n_nodes
        sample = sorted(expected - {parent.id})[:: max(1, len(expected) // 100)]
        for doc_id in sample:
            assert doc_id in {h.document_id for h in fresh.recall(acked[doc_id], limit=3)}
    return {"elapsed": elapsed, "stored": sum(r["stored"] for r in results), "documents": len(expected),
            "nodes": n_nodes, "forgotten": len(forgotten), "not_found": sum(r["not_found"] for r in results),
            "write_seconds": max(r["write_seconds"] for r in results),
            "recall_seconds": max(r["recall_seconds"] for r in results),
            "final_recalls": sum(r["expected"] for r in results),
            "graph_self_search_misses": {"long_lived": misses_long, "fresh": misses_fresh}}


def test_four_kernels_one_data_dir(data_dir, tmp_path, check_indexes):
    # exact_threshold=200: the project space (~450 nodes) uses the HNSW graph, global stays exact
    stats = check_run(data_dir, tmp_path, n=150, exact=200, seed=1, timeout=120, check_indexes=check_indexes)
    assert stats["documents"] > 300


@pytest.mark.heavy
def test_four_kernels_one_data_dir_heavy(data_dir, tmp_path, check_indexes):
    # HNSW is approximate: after thousands of interleaved adds and removes a node can end up reachable
    # only with a wider search than expansion_search=256 (seen: 1 of 15,703). Exact spaces and the
    # default-size test must find every key; here at most 0.1% may need the wider search.
    stats = check_run(data_dir, tmp_path, n=5000, exact=5000, seed=2, timeout=1800, check_indexes=check_indexes,
                      miss_rate=0.001)
    print("\nheavy concurrency:", json.dumps(stats, indent=1))
    report = os.environ.get("IPY_MEMORY_HEAVY_REPORT")
    if report:
        Path(report).write_text(json.dumps(stats, indent=1))
