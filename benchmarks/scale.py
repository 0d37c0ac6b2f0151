#!/usr/bin/env python3
"""Scale benchmark: ipy_memory against ChromaDB, sqlite-vec and exact numpy search, 1k -> 1M memories.

    nice python benchmarks/scale.py --sizes 1000,10000,100000 [--json out.json]
    python benchmarks/scale.py --quick                      # 1k and 10k, few queries: a smoke test

Everything runs on the same synthetic memories (benchmarks/_synth.py: Zipfian vocabulary, varied
lengths, Markdown with headings, ~10% Chinese; deterministic by --seed) and the same embedding
function: ipy_memory's offline HashEmbedder (384-d), wrapped as each peer's embedding function, so
every system pays the same embedding cost. Per size and system, in a fresh subprocess each (so peak
RSS is that system's own):

  bulk insert    remember_many / add / INSERT in batches of --batch (force=True for ipy_memory),
                 embedding included; the time spent embedding is also reported, and insert
                 throughput without it (for the peers also by inserting precomputed vectors)
  single insert  p50/p95 of one remember() (default arguments, so duplicate detection runs) / add
  recall after   p50/p95 of a query right after each single insert (an agent's turn: remember, then
  a write        recall); a system whose index needs work after a write pays it here. Every system:
                 after the first half of the inserts (the same ops and queries); ipy_memory also
                 with its default settings (lexical only) after the second half
  single forget  p50/p95 of forgetting / deleting those single inserts again, one call each, each
                 followed by a query timed apart as after an insert ("recall right after a single forget")
  recall         p50/p95 warm, query embedding included (reported alone too; ipy_memory's cache of
                 recent query vectors is emptied before each timed query). ipy_memory: full hybrid
                 (BM25 + vectors; --set vector_weight_hash=0.5 by default, since the hash embedder's
                 default weight is 0, i.e. lexical only) and lexical only (default settings); peers:
                 vector kNN (they have no lexical ranking)
  cold open      a new process: import + open + first query (median of --cold-runs); ipy_memory also
                 with its default settings (lexical only). The peers' import leaves out the shared
                 embedding function's (ipy_memory's hashing embedder and numpy, imported before their timer)
  disk           bytes on disk per memory after close; peak RSS (getrusage) and its growth over the
                 worker's baseline (Python + numpy + the embedder)
  ANN recall@10  of each index against exact numpy search over the same vectors: the peers' float32
                 vector per memory; ipy_memory's search (int8 columns, then float16 rescoring, or a
                 graph for a model's vectors) against its own stored float16 vector per section

Needs chromadb, sqlite-vec and a sqlite3 that can load extensions (sqlean.py or pysqlite3) for the
peers: install them into a separate venv (see BENCHMARKS.md). Peers that are not installed are skipped.
Only the standard library is imported at module level, so cold-open timings are not polluted.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SYSTEMS = ("ipy_memory", "chromadb", "sqlite-vec", "numpy")
PROJECT = "bench"
SPACE = "project:" + PROJECT
DEFAULT_SET = {"vector_weight_hash": "0.5"}
BLAS_THREADS = "1"     # --blas-threads: multi-threaded OpenBLAS mat-vecs are 10-30x slower here


# ============================================================================== helpers
def now() -> float:
    return time.perf_counter()


def pct(xs, p) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def _status_mb(field: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def rss_mb() -> float:
    return _status_mb("VmRSS") or float("nan")


def peak_rss_mb() -> float:
    """Peak RSS of this process. getrusage's ru_maxrss survives exec() on Linux, so a worker started
    by a large parent would report the parent's peak: VmHWM (reset by exec) is used where it exists."""
    hwm = _status_mb("VmHWM")
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def dir_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def parse_settings(pairs: list[str]) -> dict:
    """--set name=value pairs -> Settings overrides, typed from the field's default."""
    from dataclasses import fields

    from ipy_memory import Settings
    defaults = {f.name: getattr(Settings(), f.name) for f in fields(Settings)}
    out = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        name = name.strip()
        if name not in defaults:
            sys.exit(f"--set {pair}: unknown setting; known: {', '.join(sorted(defaults))}")
        d = defaults[name]
        if value.strip().lower() == "none":
            out[name] = None
        elif isinstance(d, bool):
            out[name] = value.strip().lower() in ("1", "true", "yes", "on")
        elif isinstance(d, tuple):
            out[name] = tuple(float(x) for x in value.split(",") if x.strip())
        elif isinstance(d, int):
            out[name] = int(float(value))
        elif isinstance(d, float) or d is None:
            out[name] = float(value)
        else:
            out[name] = value
    return out


def read_corpus(path: Path, start: int, stop: int, batch: int):
    """Yield (ids, texts, metas) batches of corpus lines [start, stop)."""
    ids, texts, metas = [], [], []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i < start:
                continue
            if i >= stop:
                break
            d = json.loads(line)
            ids.append(i)
            texts.append(d["t"])
            metas.append(d["m"])
            if len(ids) == batch:
                yield ids, texts, metas
                ids, texts, metas = [], [], []
    if ids:
        yield ids, texts, metas


def hash_embedder():
    from ipy_memory.embeddings.hashing import HashEmbedder
    return HashEmbedder(dim=384)


class Timed:
    """Accumulates the seconds spent in embedding calls."""

    def __init__(self):
        self.seconds = 0.0

    def call(self, fn, *a):
        t = now()
        try:
            return fn(*a)
        finally:
            self.seconds += now() - t


# ============================================================================== systems
class System:
    name = ""
    precomputed_ok = False     # the API takes precomputed vectors

    def __init__(self, path: Path, settings: dict):
        self.path, self.settings = path, settings
        self.timer = Timed()

    @staticmethod
    def available() -> str | None:
        """None if usable here, else why not."""
        return None


def _vec_state(vec) -> dict:
    """Graph or exact, as far as the engine's VectorShard (an internal object) tells."""
    graph = getattr(vec, "graph", None)
    in_graph = getattr(vec, "in_graph", None)
    if in_graph is None:
        in_graph = getattr(vec, "graph_rows", None)
    if in_graph is None and graph is not None:
        in_graph = len(graph)
    return {"graph": graph is not None, "in_graph": int(in_graph or 0), "vectors_in_shard": len(vec),
            "columns": getattr(vec, "_columns", None) is not None}


def _settle(eng) -> None:
    """Wait for the engine's background index work (the column scan for sparse query vectors, built
    on a worker thread after the first hybrid query of a process; meanwhile queries scan every row),
    so that warm queries are timed in the steady state. Reads engine internals."""
    try:
        for shard in eng.shards.loaded.values():
            job = getattr(shard.vec, "_columns_job", None) if shard.vec_loaded else None
            if job is not None:
                job.wait()
    except Exception:  # noqa: BLE001  (engine internals changed)
        pass


class IpyMemory(System):
    name = "ipy_memory"

    def open(self):
        from ipy_memory import Embedder, MemoryEngine, Settings
        inner, timer = hash_embedder(), self.timer
        self.emb = inner                  # the query-embedding timing uses it as the inserts left it

        class TimedHash(Embedder):
            name, dim, semantic, cheap = inner.name, inner.dim, False, getattr(inner, "cheap", False)

            def embed(self, texts):
                return timer.call(inner.embed, texts)

        self.Settings = Settings
        self.base_settings = Settings()
        self.eng = MemoryEngine(self.path, project=PROJECT, embedder=TimedHash(),
                                settings=Settings().with_(**self.settings))
        self.eng.recall("warm up", scope="project", limit=1)      # a session that has recalled once

    def insert(self, ids, texts, metas):
        self.eng.remember_many([{"content": t, "metadata": m, "force": True} for t, m in zip(texts, metas)])

    def insert_one(self, i, text, meta):
        self.single_ids = getattr(self, "single_ids", {})
        self.single_ids[i] = self.eng.remember(text, metadata=meta).id

    def delete_one(self, i):
        self.eng.forget(self.single_ids[i])

    def search(self, query, k):
        self.forget_query_vectors()
        return [h.metadata["i"] for h in self.eng.recall(query, scope="project", limit=k) if h.metadata]

    def forget_query_vectors(self):
        """Every timed query pays its embedding, as the peers' do: the engine keeps its last 256 query
        vectors, and the timed loops ask queries again (the warm-up's, and those after each insert)."""
        self.eng.__dict__.pop("_query_cache", None)

    def close(self):
        self.eng.close()

    def settle(self):
        _settle(self.eng)

    # ipy_memory only: where the time of a recall goes (internal objects, read only)
    def breakdown(self, queries):
        from ipy_memory._text import question_cues
        from ipy_memory.lexical import query_terms
        shard = self.eng.shards.get(SPACE)
        emb = self.eng.embedder
        lex, vec = [], []
        for q in queries:
            t0 = now()
            shard.lex.scores(query_terms(q), question_cues(q), time.time())
            t1 = now()
            qv = emb.embed_query(q)
            t2 = now()
            shard.vec.search(qv, self.eng.settings.candidates)
            t3 = now()
            lex.append(t1 - t0)
            vec.append(t3 - t2)
        return {"lexical_scores_ms": ms_stats(lex), "vector_search_ms": ms_stats(vec), **_vec_state(shard.vec)}

    @contextlib.contextmanager
    def default_settings(self):
        """Recall with the default settings meanwhile: for the hash embedder that is BM25 only."""
        hybrid = self.eng.settings
        self.eng.settings = self.base_settings.with_(**{n: v for n, v in self.settings.items()
                                                       if n != "vector_weight_hash"})
        try:
            self.eng.recall("warm up", scope="project", limit=1)     # new settings: indexes re-derived
            yield
        finally:
            self.eng.settings = hybrid

    def lexical_only(self, queries, k):
        with self.default_settings():
            out = []
            for q in queries:
                self.forget_query_vectors()
                t = now()
                self.eng.recall(q, scope="project", limit=k)
                out.append(now() - t)
            return out

    @staticmethod
    def cold(path, query, settings, ann_queries=None):
        t0 = now()
        from ipy_memory import MemoryEngine, Settings
        t1 = now()
        eng = MemoryEngine(path, project=PROJECT, embedder="hash", settings=Settings().with_(**settings))
        t2 = now()
        eng.recall(query, scope="project", limit=10)
        t3 = now()
        try:
            ann = IpyMemory.ann(eng, path, ann_queries) if ann_queries else None
        except Exception as exc:  # noqa: BLE001  (engine internals changed)
            ann = {"error": repr(exc)}
        finally:
            eng.close()
        return t1 - t0, t2 - t1, t3 - t2, ann

    @staticmethod
    def ann(eng, path, queries, k=10):
        """Recall@k of the engine's vector shard (as reloaded: saved graph + exact tail) against exact
        search over the same stored vectors. Runs after the cold-open timing, in that process."""
        import sqlite3

        import numpy as np
        shard = eng.shards.get(SPACE)
        _settle(eng)          # the cold query started the column build: measure what queries use after it
        db = sqlite3.connect(f"file:{path / 'memory.sqlite3'}?mode=ro", uri=True)
        rows = db.execute("SELECT node_key, vec FROM vectors ORDER BY node_key").fetchall()
        db.close()
        keys = np.array([r[0] for r in rows], np.int64)
        mat = np.frombuffer(b"".join(r[1] for r in rows), np.float16).reshape(len(rows), -1).astype(np.float32)
        del rows
        row_of = {int(key): i for i, key in enumerate(keys.tolist())}
        hits = []
        for q in queries:     # ties count as hits, as for the peers (see ann_recall)
            qv = eng.embedder.embed_query(q)
            s = mat @ qv
            kth = np.partition(-s, k - 1)[k - 1] * -1 if len(s) > k else s.min()
            got = [row_of[int(x)] for x in shard.vec.search(qv, k)[0]]
            hits.append(float((s[got] >= kth - 1e-4).sum()) / min(k, len(keys)))
        return {"recall": float(np.mean(hits)), "vectors": int(len(keys)), **_vec_state(shard.vec)}


class Chroma(System):
    name = "chromadb"
    precomputed_ok = True

    @staticmethod
    def available():
        try:
            import chromadb  # noqa: F401
        except ImportError as exc:
            return f"not installed ({exc})"
        return None

    @staticmethod
    def _ef(timer):
        from chromadb import EmbeddingFunction
        inner = hash_embedder()

        class HashEF(EmbeddingFunction):
            def __init__(self):
                pass

            def __call__(self, input):
                return list(timer.call(inner.embed, list(input)))

            @staticmethod
            def name():
                return "ipy-memory-hash-384"

            def get_config(self):
                return {}

            @staticmethod
            def build_from_config(config):
                return HashEF()

        ef = HashEF()
        ef.inner = inner
        return ef

    @staticmethod
    def _client(path):
        import chromadb
        return chromadb.PersistentClient(path=str(path), settings=chromadb.Settings(anonymized_telemetry=False))

    def open(self):
        self.client = self._client(self.path)
        ef = self._ef(self.timer)
        self.emb = ef.inner
        self.col = self.client.get_or_create_collection("bench", embedding_function=ef,
                                                        configuration={"hnsw": {"space": "cosine"}})

    def insert(self, ids, texts, metas):
        self.col.add(ids=[str(i) for i in ids], documents=texts, metadatas=metas)

    def insert_vectors(self, ids, texts, metas, vecs):
        self.col.add(ids=[str(i) for i in ids], documents=texts, metadatas=metas, embeddings=vecs)

    def insert_one(self, i, text, meta):
        self.col.add(ids=[str(i)], documents=[text], metadatas=[meta])

    def delete_one(self, i):
        self.col.delete(ids=[str(i)])

    def search(self, query, k):
        r = self.col.query(query_texts=[query], n_results=k, include=["documents", "metadatas", "distances"])
        return [int(x) for x in r["ids"][0]]

    def close(self):
        close = getattr(self.client, "close", None)
        if close:
            close()

    @staticmethod
    def cold(path, query, settings):
        t0 = now()
        import chromadb  # noqa: F401
        t1 = now()
        timer = Timed()
        col = Chroma._client(path).get_collection("bench", embedding_function=Chroma._ef(timer))
        t2 = now()
        col.query(query_texts=[query], n_results=10)
        t3 = now()
        return t1 - t0, t2 - t1, t3 - t2


def _sqlite_module():
    """A sqlite3 module that can load extensions (the stdlib one here cannot)."""
    import sqlite3
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3
    for name in ("sqlean", "pysqlite3"):
        try:
            return __import__(name)
        except ImportError:
            continue
    return None


class SqliteVec(System):
    name = "sqlite-vec"
    precomputed_ok = True

    @staticmethod
    def available():
        try:
            import sqlite_vec  # noqa: F401
        except ImportError as exc:
            return f"not installed ({exc})"
        if _sqlite_module() is None:
            return "this Python's sqlite3 cannot load extensions; install sqlean.py or pysqlite3"
        return None

    @staticmethod
    def _connect(path):
        import sqlite_vec
        mod = _sqlite_module()
        db = mod.connect(str(path), isolation_level=None)
        db.enable_load_extension(True)
        sqlite_vec.load(db)
        db.enable_load_extension(False)
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        return db

    def open(self):
        self.path.mkdir(parents=True, exist_ok=True)
        self.db = self._connect(self.path / "vec.sqlite3")
        self.db.execute("CREATE TABLE IF NOT EXISTS memories (id INTEGER PRIMARY KEY, content TEXT NOT NULL, "
                        "metadata TEXT, created_at REAL NOT NULL)")
        self.db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS vec_memories USING vec0("
                        "embedding float[384] distance_metric=cosine)")
        self.emb = hash_embedder()

    def insert_vectors(self, ids, texts, metas, vecs):
        import numpy as np
        t = time.time()
        vecs = np.asarray(vecs, np.float32)
        self.db.execute("BEGIN")
        self.db.executemany("INSERT INTO memories VALUES (?, ?, ?, ?)",
                            [(i + 1, x, json.dumps(m), t) for i, x, m in zip(ids, texts, metas)])
        self.db.executemany("INSERT INTO vec_memories (rowid, embedding) VALUES (?, ?)",
                            [(i + 1, v.tobytes()) for i, v in zip(ids, vecs)])
        self.db.execute("COMMIT")

    def insert(self, ids, texts, metas):
        self.insert_vectors(ids, texts, metas, self.timer.call(self.emb.embed, texts))

    def insert_one(self, i, text, meta):
        self.insert([i], [text], [meta])

    def delete_one(self, i):
        self.db.execute("BEGIN")
        self.db.execute("DELETE FROM vec_memories WHERE rowid = ?", (i + 1,))
        self.db.execute("DELETE FROM memories WHERE id = ?", (i + 1,))
        self.db.execute("COMMIT")

    def search(self, query, k):
        qv = self.timer.call(self.emb.embed_query, query)
        rows = self.db.execute(
            "SELECT m.id, m.content, m.metadata, v.distance FROM (SELECT rowid, distance FROM vec_memories "
            "WHERE embedding MATCH ? AND k = ?) v JOIN memories m ON m.id = v.rowid ORDER BY v.distance",
            (qv.tobytes(), k)).fetchall()
        return [r[0] - 1 for r in rows]

    def close(self):
        self.db.close()

    @staticmethod
    def cold(path, query, settings):
        t0 = now()
        import sqlite_vec  # noqa: F401
        _sqlite_module()
        emb = hash_embedder()
        t1 = now()
        db = SqliteVec._connect(path / "vec.sqlite3")
        t2 = now()
        qv = emb.embed_query(query)
        db.execute("SELECT m.id, m.content, m.metadata, v.distance FROM (SELECT rowid, distance FROM vec_memories "
                   "WHERE embedding MATCH ? AND k = 10) v JOIN memories m ON m.id = v.rowid ORDER BY v.distance",
                   (qv.tobytes(),)).fetchall()
        t3 = now()
        db.close()
        return t1 - t0, t2 - t1, t3 - t2


class NumpyExact(System):
    """The floor: vectors in one float32 matrix, texts in a list, exact search; saved as .npy + JSONL."""
    name = "numpy"
    precomputed_ok = True

    def open(self):
        import numpy as np
        self.np = np
        self.path.mkdir(parents=True, exist_ok=True)
        self.emb = hash_embedder()
        self.mat = np.zeros((1024, 384), np.float32)
        self.n = 0
        self.ids, self.texts, self.metas = [], [], []

    def insert_vectors(self, ids, texts, metas, vecs):
        need = self.n + len(ids)
        if need > len(self.mat):
            grown = self.np.zeros((max(need, 2 * len(self.mat)), 384), self.np.float32)
            grown[: self.n] = self.mat[: self.n]
            self.mat = grown
        self.mat[self.n:need] = vecs
        self.n = need
        self.ids += ids
        self.texts += texts
        self.metas += metas

    def insert(self, ids, texts, metas):
        self.insert_vectors(ids, texts, metas, self.timer.call(self.emb.embed, texts))

    def insert_one(self, i, text, meta):
        self.insert([i], [text], [meta])

    def delete_one(self, i):
        """Swap the last row into the deleted one's place (what a matrix-backed store would do)."""
        j, last = self.ids.index(i), self.n - 1
        for seq in (self.ids, self.texts, self.metas):
            seq[j] = seq[last]
            del seq[last]
        self.mat[j] = self.mat[last]
        self.n = last

    def search(self, query, k):
        np = self.np
        qv = self.timer.call(self.emb.embed_query, query)
        s = self.mat[: self.n] @ qv
        top = np.argpartition(-s, k)[:k] if self.n > k else np.arange(self.n)
        top = top[np.argsort(-s[top], kind="stable")]
        _ = [(self.texts[j], self.metas[j]) for j in top]
        return [self.ids[j] for j in top]

    def close(self):
        self.np.save(self.path / "vectors.npy", self.mat[: self.n])
        with open(self.path / "memories.jsonl", "w", encoding="utf-8") as f:
            for i, t, m in zip(self.ids, self.texts, self.metas):
                f.write(json.dumps({"i": i, "t": t, "m": m}, ensure_ascii=False) + "\n")

    @staticmethod
    def cold(path, query, settings):
        t0 = now()
        import numpy as np
        emb = hash_embedder()
        t1 = now()
        mat = np.load(path / "vectors.npy")
        with open(path / "memories.jsonl", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
        t2 = now()
        s = mat @ emb.embed_query(query)
        top = np.argpartition(-s, 10)[:10]
        _ = [rows[j] for j in top[np.argsort(-s[top])]]
        t3 = now()
        return t1 - t0, t2 - t1, t3 - t2


CLASSES = {c.name: c for c in (IpyMemory, Chroma, SqliteVec, NumpyExact)}


def ms_stats(seconds) -> dict:
    return {"p50": pct(seconds, 50) * 1e3, "p95": pct(seconds, 95) * 1e3, "mean": statistics.fmean(seconds) * 1e3
            if seconds else float("nan"), "n": len(seconds)}


# ============================================================================== worker (one system, one size)
def worker(a) -> dict:
    import numpy as np
    hash_embedder()                               # baseline: Python + numpy + the embedder
    base_rss = rss_mb()
    wd = Path(a.workdir)
    settings = json.loads(a.settings_json)
    cls = CLASSES[a.worker]
    queries = json.loads((wd / "queries.json").read_text())
    corpus = wd / "corpus.jsonl"
    n, singles = a.size, a.singles
    out = {"system": cls.name, "size": n, "base_rss_mb": base_rss, "loadavg_start": os.getloadavg()[0]}
    prof = None
    if a.profile:
        import cProfile
        prof = cProfile.Profile()

    if a.phase == "precomputed":
        vecs = np.load(wd / "vectors.npy", mmap_mode="r")
        sysm = cls(wd / f"{cls.name}-pre", settings)
        sysm.open()
        t = now()
        for ids, texts, metas in read_corpus(corpus, 0, n, a.batch):
            sysm.insert_vectors(ids, texts, metas, np.asarray(vecs[ids[0]: ids[-1] + 1]))
        out["precomputed_insert_s"] = now() - t
        t = now()
        sysm.close()
        out["precomputed_close_s"] = now() - t
        return out

    sysm = cls(wd / cls.name, settings)
    t = now()
    sysm.open()
    out["open_s"] = now() - t
    # ---- bulk insert (corpus streamed batch by batch: only the batch is held besides the store)
    sysm.timer.seconds = 0.0
    if prof:
        prof.enable()
    t_ins, read_s = 0.0, 0.0
    t_read = now()
    for ids, texts, metas in read_corpus(corpus, 0, n, a.batch):
        read_s += now() - t_read
        t = now()
        sysm.insert(ids, texts, metas)
        t_ins += now() - t
        t_read = now()
    if prof:
        prof.disable()
        dump_profile(prof, wd / f"profile-{cls.name}-{n}-insert.txt")
        prof = __import__("cProfile").Profile()
    out["insert_s"] = t_ins
    out["insert_embed_s"] = sysm.timer.seconds
    # ---- recall, warm
    k = 10
    for q in queries[: min(20, len(queries))]:
        sysm.search(q + " (warm-up)", k)            # not the timed queries (no cache may answer them)
    if hasattr(sysm, "settle"):
        sysm.settle()
    times, results = [], []
    if prof:
        prof.enable()
    for q in queries:
        t = now()
        results.append(sysm.search(q, k))
        times.append(now() - t)
    if prof:
        prof.disable()
        dump_profile(prof, wd / f"profile-{cls.name}-{n}-recall.txt")
    out["recall_ms"] = ms_stats(times)
    out["recall_empty"] = sum(1 for r in results if not r)
    if cls is IpyMemory:
        out["recall_lexical_ms"] = ms_stats(sysm.lexical_only(queries, k))
        try:   # reads engine internals: a refactor must not stop the benchmark
            out["breakdown"] = sysm.breakdown(queries)
        except Exception as exc:  # noqa: BLE001
            out["breakdown_error"] = repr(exc)
    else:
        out["ann_recall10"] = ann_recall(wd, queries, results)
    # the system's own embedder, its cache as the inserts left it (a fresh one hid a cost that grew
    # with the cache in 7fa9e1b)
    emb, qt = getattr(sysm, "emb", None) or hash_embedder(), []
    for q in queries:
        emb.embed_query(q)
    for q in queries:
        t = now()
        emb.embed_query(q)
        qt.append(now() - t)
    out["query_embed_ms"] = ms_stats(qt)
    # ---- single inserts, then single forgets of them, each followed by a query
    inserts = [functools.partial(sysm.insert_one, ids[0], texts[0], metas[0])
               for ids, texts, metas in read_corpus(corpus, n, n + singles, 1)]
    forgets = [functools.partial(sysm.delete_one, ids[0]) for ids, _, _ in read_corpus(corpus, n, n + singles, 1)]
    for name, ops in (("single", inserts), ("forget", forgets)):
        times, after, lexical_after = agent_turns(sysm, cls is IpyMemory, ops, queries, k)
        out[f"{name}_ms"] = ms_stats(times)
        out[f"recall_after_{name}_ms"] = ms_stats(after)
        if lexical_after:
            out[f"recall_lexical_after_{name}_ms"] = ms_stats(lexical_after)
    t = now()
    sysm.close()
    out["close_s"] = now() - t
    out["peak_rss_mb"] = peak_rss_mb()
    out["loadavg_end"] = os.getloadavg()[0]
    return out


def agent_turns(sysm, is_ipy: bool, ops: list, queries: list, k: int):
    """Each op (one insert or one forget), then a query: what an agent does turn by turn, so a system
    whose index needs work after a write pays it in that query. ipy_memory runs the second half with
    its default settings (lexical only). Returns the ops' times and the queries' (hybrid, lexical):
    the hybrid ones, every system's, after the first half of the ops (the same ops and queries for all)."""
    times, after, lexical_after, half = [], [], [], (len(ops) + 1) // 2
    lexical = sysm.default_settings() if is_ipy else contextlib.nullcontext()
    for j, op in enumerate(ops):
        if j == half:
            lexical.__enter__()
        t = now()
        op()
        t1 = now()
        sysm.search(queries[j % len(queries)], k)
        if j < half:
            after.append(now() - t1)
        elif is_ipy:
            lexical_after.append(now() - t1)
        times.append(t1 - t)
    if len(ops) > half:
        lexical.__exit__(None, None, None)
    return times, after, lexical_after


def dump_profile(prof, path: Path, top: int = 30) -> None:
    import io
    import pstats
    s = io.StringIO()
    st = pstats.Stats(prof, stream=s)
    st.sort_stats("cumulative").print_stats(top)
    st.sort_stats("tottime").print_stats(top)
    path.write_text(s.getvalue())


def cold_main(a) -> dict:
    wd = Path(a.workdir)
    settings = json.loads(a.settings_json)
    if a.cold_lexical:        # the engine's default settings: the hash vectors do not rank
        settings = {k: v for k, v in settings.items() if k != "vector_weight_hash"}
    query = json.loads((wd / "queries.json").read_text())[0]
    cls = CLASSES[a.cold]
    if cls is not IpyMemory:
        hash_embedder()     # the embedding function every system shares: not a peer's import (it is ipy_memory's)
    if a.profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    if a.with_ann:
        ann_queries = json.loads((wd / "queries.json").read_text())
        r = cls.cold(wd / cls.name, query, settings, ann_queries)
    else:
        r = cls.cold(wd / cls.name, query, settings)
    if a.profile:
        prof.disable()
        dump_profile(prof, wd / f"profile-{cls.name}-{a.size}-cold.txt")
    out = {"import_s": r[0], "open_s": r[1], "first_s": r[2]}
    if len(r) > 3 and r[3]:
        out["ann"] = r[3]
    return out


# ============================================================================== parent
def run_child(args: list[str], log: Path, timeout: float) -> tuple[dict | None, float]:
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    env = dict(os.environ, PYTHONHASHSEED="0", TOKENIZERS_PARALLELISM="false", ANONYMIZED_TELEMETRY="False")
    if BLAS_THREADS:
        env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = BLAS_THREADS
    t = now()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        log.write_text(f"timeout after {timeout}s: {' '.join(cmd)}\n")
        return None, now() - t
    wall = now() - t
    log.write_text(f"$ {' '.join(cmd)}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}\n")
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[7:]), wall
    sys.stderr.write(f"  ! {' '.join(args[:4])} failed (exit {p.returncode}); see {log}\n"
                     + "\n".join("    " + x for x in p.stderr.strip().splitlines()[-8:]) + "\n")
    return None, wall


def prepare(wd: Path, n: int, singles: int, nq: int, seed: int) -> dict:
    """Corpus (n + singles memories), queries, precomputed vectors and exact top-10 for the peers."""
    sys.path.insert(0, str(HERE))
    import numpy as np
    from _synth import Corpus
    t = now()
    corpus = Corpus(seed)
    chars = 0
    emb = hash_embedder()
    vecs = np.zeros((n, 384), np.float32)
    with open(wd / "corpus.jsonl", "w", encoding="utf-8") as f:
        for start in range(0, n + singles, 10_000):
            texts, metas = corpus.memories(start, min(start + 10_000, n + singles))
            for x, m in zip(texts, metas):
                f.write(json.dumps({"t": x, "m": m}, ensure_ascii=False) + "\n")
                chars += len(x)
            if start < n:
                stop = min(start + 10_000, n)
                vecs[start:stop] = emb.embed(texts[: stop - start])
    queries = corpus.queries(nq, n)
    (wd / "queries.json").write_text(json.dumps(queries, ensure_ascii=False))
    np.save(wd / "vectors.npy", vecs)
    gt, kth = [], []
    for q in queries:
        s = vecs @ emb.embed_query(q)
        gt.append(np.argsort(-s, kind="stable")[:10])
        kth.append(s[gt[-1][-1]])
    np.save(wd / "gt.npy", np.array(gt, np.int64))
    np.save(wd / "gt_kth.npy", np.array(kth, np.float32))    # the 10th best similarity: ties count as hits
    del vecs
    return {"prepare_s": now() - t, "avg_chars": chars / (n + singles)}


def ann_recall(wd: Path, queries: list[str], results: list[list[int]], k: int = 10) -> float:
    """Share of returned ids that are among the exact top k, ties included: the corpus repeats some
    memories, and which of several identical vectors a system returns is not an error."""
    import numpy as np
    vecs = np.load(wd / "vectors.npy", mmap_mode="r")     # only the returned rows are read
    kth, emb = np.load(wd / "gt_kth.npy"), hash_embedder()
    shares = []
    for q, r, t in zip(queries, results, kth):
        ids = np.asarray([i for i in r[:k] if 0 <= i < len(vecs)], np.int64)
        sims = np.asarray(vecs[ids], np.float32) @ emb.embed_query(q) if len(ids) else np.zeros(0)
        shares.append(float((sims >= t - 1e-4).sum()) / k)
    return float(np.mean(shares))


def run_size(a, n: int, systems: list[str], settings: dict) -> dict:
    wd = Path(tempfile.mkdtemp(prefix=f"scale-{n}-", dir=a.workdir))
    nq = a.queries if a.queries else (50 if a.quick else (300 if n <= 100_000 else 100))
    singles = a.singles if a.singles else (20 if a.quick else 200)
    print(f"\n## {n:,} memories  (workdir {wd})", flush=True)
    info = prepare(wd, n, singles, nq, a.seed)
    print(f"  corpus + vectors + exact top-10 ready in {info['prepare_s']:.1f} s "
          f"(avg {info['avg_chars']:.0f} chars/memory, {nq} queries, {singles} single inserts)", flush=True)
    common = ["--size", str(n), "--workdir", str(wd), "--batch", str(a.batch), "--singles", str(singles),
              "--settings-json", json.dumps(settings)] + (["--profile"] if a.profile else [])
    res = {"size": n, "queries": nq, "singles": singles, "batch": a.batch, **info, "systems": {}}
    for name in systems:
        why = CLASSES[name].available()
        if why:
            print(f"  - {name}: skipped, {why}", flush=True)
            res["systems"][name] = {"skipped": why}
            continue
        t = now()
        r, _ = run_child(["--worker", name] + common, wd / f"log-{name}.txt", a.timeout)
        if r is None:
            res["systems"][name] = {"skipped": "failed, see log", "failed": True}
            continue
        r["disk_bytes"] = dir_bytes(wd / name)
        colds = []
        for j in range(a.cold_runs + (name == "ipy_memory")):
            ann = ["--with-ann"] if j == a.cold_runs else []     # one more run for the ANN check, not timed
            c, wall = run_child(["--cold", name] + ann + common, wd / f"log-{name}-cold.txt", a.timeout)
            if c and ann:
                r["ann"] = c.get("ann", {"error": "no result"})
                if "recall" in r["ann"]:
                    r["ann_recall10"] = r["ann"]["recall"]
                else:
                    print(f"  ! vector recall check failed: {r['ann'].get('error')}", flush=True)
            elif c:
                c["process_wall_s"] = wall
                c["total_s"] = c["import_s"] + c["open_s"] + c["first_s"]
                colds.append(c)
        if colds:
            r["cold"] = sorted(colds, key=lambda c: c["total_s"])[len(colds) // 2]
            r["cold_all_s"] = [c["total_s"] for c in colds]
        lexical = []
        for _ in range(a.cold_runs if name == "ipy_memory" else 0):
            c, _wall = run_child(["--cold", name, "--cold-lexical"] + common, wd / f"log-{name}-cold.txt", a.timeout)
            if c:
                lexical.append(c["import_s"] + c["open_s"] + c["first_s"])
        if lexical:
            r["cold_lexical_s"] = sorted(lexical)[len(lexical) // 2]
        if name != "ipy_memory" and CLASSES[name].precomputed_ok and not a.no_precomputed:
            pre, _ = run_child(["--worker", name, "--phase", "precomputed"] + common,
                               wd / f"log-{name}-pre.txt", a.timeout)
            if pre:
                r.update({k: v for k, v in pre.items() if k.startswith("precomputed")})
                shutil.rmtree(wd / f"{name}-pre", ignore_errors=True)
        res["systems"][name] = r
        print(f"  - {name}: {n / r['insert_s']:,.0f} memories/s insert, recall p50 {r['recall_ms']['p50']:.2f} ms "
              f"p95 {r['recall_ms']['p95']:.2f} ms, cold {r.get('cold', {}).get('total_s', float('nan')) * 1e3:.0f} ms, "
              f"{r['disk_bytes'] / n:,.0f} B/memory, peak RSS {r['peak_rss_mb']:.0f} MB "
              f"({now() - t:.0f} s)", flush=True)
    if not a.keep:
        shutil.rmtree(wd, ignore_errors=True)
    else:
        res["workdir"] = str(wd)
    return res


# ============================================================================== report
def fmt(x, digits=2):
    if x is None or x != x:
        return "–"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.{digits}f}"


def metrics(n: int, r: dict) -> dict:
    m = {}
    if "insert_s" not in r:
        return m
    m["bulk insert, memories/s"] = n / r["insert_s"]
    m["  of which embedding, s"] = r["insert_embed_s"]
    m["  without embedding, memories/s"] = n / max(r["insert_s"] - r["insert_embed_s"], 1e-9)
    if "precomputed_insert_s" in r:
        m["  precomputed vectors, memories/s"] = n / r["precomputed_insert_s"]
    m["close / persist, s"] = r["close_s"]
    m["single insert p50, ms"] = r["single_ms"]["p50"]
    m["single insert p95, ms"] = r["single_ms"]["p95"]
    if "forget_ms" in r:
        m["single forget p50, ms"] = r["forget_ms"]["p50"]
        m["single forget p95, ms"] = r["forget_ms"]["p95"]
    m["recall p50, ms"] = r["recall_ms"]["p50"]
    m["recall p95, ms"] = r["recall_ms"]["p95"]
    if "recall_lexical_ms" in r:
        m["  lexical only p50, ms"] = r["recall_lexical_ms"]["p50"]
        m["  lexical only p95, ms"] = r["recall_lexical_ms"]["p95"]
    if "breakdown" in r:
        m["  in hybrid: BM25 scoring p50, ms"] = r["breakdown"]["lexical_scores_ms"]["p50"]
        m["  in hybrid: vector search p50, ms"] = r["breakdown"]["vector_search_ms"]["p50"]
    for op, what in (("single", "insert"), ("forget", "forget")):
        for key, label in ((f"recall_after_{op}_ms", f"recall right after a single {what}"),
                           (f"recall_lexical_after_{op}_ms", f"  lexical only, right after a single {what}")):
            if key in r:
                m[f"{label} p50, ms"] = r[key]["p50"]
                m[f"{label} p95, ms"] = r[key]["p95"]
    m["query embedding p50, ms"] = r["query_embed_ms"]["p50"]
    m["query embedding p95, ms"] = r["query_embed_ms"]["p95"]
    if "cold" in r:
        m["cold open + first query, ms"] = r["cold"]["total_s"] * 1e3
        m["  import, ms"] = r["cold"]["import_s"] * 1e3
        m["  open, ms"] = r["cold"]["open_s"] * 1e3
        m["  first query, ms"] = r["cold"]["first_s"] * 1e3
        m["  whole process (incl. interpreter), ms"] = r["cold"]["process_wall_s"] * 1e3
    if "cold_lexical_s" in r:
        m["  default settings (lexical only): cold open + first query, ms"] = r["cold_lexical_s"] * 1e3
    m["disk, bytes/memory"] = r["disk_bytes"] / n
    m["peak RSS, MB"] = r["peak_rss_mb"]
    m["  growth over baseline, MB"] = r["peak_rss_mb"] - r["base_rss_mb"]
    if "ann_recall10" in r:
        m["vector recall@10 vs exact"] = r["ann_recall10"]
    if "loadavg_start" in r:
        m["machine load (1-min avg) at start / end"] = (r["loadavg_start"], r["loadavg_end"])
    return m


def table(res: dict) -> str:
    n = res["size"]
    names = [s for s, r in res["systems"].items() if "insert_s" in r]
    ms = {s: metrics(n, res["systems"][s]) for s in names}
    peers = [s for s in names if s != "ipy_memory"]
    merged = {}
    for s in names:
        merged.update(res["systems"][s])
    rows = [k for k in metrics(n, merged) if any(k in ms[s] for s in names)]   # the order metrics() gives
    head = ["metric"] + names + ([f"ipy / {p}" for p in peers] if "ipy_memory" in names else [])
    out = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    for row in rows:
        cells = [row.replace("  ", "&nbsp;&nbsp;", 1) if row.startswith("  ") else row]
        if row.startswith("machine load"):
            cells += [f"{ms[s][row][0]:.1f} / {ms[s][row][1]:.1f}" if row in ms[s] else "–" for s in names]
            cells += ["–"] * (len(head) - len(cells))
            out.append("| " + " | ".join(cells) + " |")
            continue
        cells += [fmt(ms[s].get(row), 3 if "recall@10" in row else 2) for s in names]
        if "ipy_memory" in names:
            for p in peers:
                a, b = ms["ipy_memory"].get(row), ms[p].get(row)
                cells.append(f"{a / b:.2f}×" if a is not None and b and "recall@10" not in row else "–")
        out.append("| " + " | ".join(cells) + " |")
    skipped = {s: r["skipped"] for s, r in res["systems"].items() if "skipped" in r}
    if skipped:
        out.append("")
        out.append("Skipped: " + "; ".join(f"{s} ({why})" for s, why in skipped.items()))
    return "\n".join(out)


GOALS = [  # (size, description, metric, op, target, peer for a ratio target)
    (100_000, "hybrid recall p95 ≤ 5 ms at 100k", "recall p95, ms", "<=", 5.0, None),
    (1_000_000, "hybrid recall p95 ≤ 30 ms at 1M", "recall p95, ms", "<=", 30.0, None),
    (100_000, "bulk remember_many ≥ 10,000 memories/s at 100k", "bulk insert, memories/s", ">=", 10_000, None),
    (100_000, "bulk insert ≥ 10× ChromaDB at 100k", "bulk insert, memories/s", ">=", 10.0, "chromadb"),
    (100_000, "cold open + first recall ≤ 100 ms at 100k", "cold open + first query, ms", "<=", 100.0, None),
    (None, "disk ≤ 0.3× ChromaDB", "disk, bytes/memory", "<=", 0.3, "chromadb"),
    (None, "vector recall@10 ≥ 0.95 against exact", "vector recall@10 vs exact", ">=", 0.95, None),
]


def goals(results: list[dict]) -> str:
    out = ["| goal | size | measured | met? |", "|---|---:|---:|:---:|"]
    for size, desc, metric, op, target, peer in GOALS:
        for res in results:
            n = res["size"]
            if size is not None and n != size:
                continue
            sy = res["systems"]
            if "insert_s" not in sy.get("ipy_memory", {}):
                continue
            v = metrics(n, sy["ipy_memory"]).get(metric)
            if v is None:
                continue
            if peer:
                if "insert_s" not in sy.get(peer, {}):
                    continue
                v = v / metrics(n, sy[peer])[metric]
                shown = f"{v:.2f}× {peer}"
            else:
                shown = fmt(v, 3)
            ok = v <= target if op == "<=" else v >= target
            out.append(f"| {desc} | {n:,} | {shown} | {'yes' if ok else '**no**'} |")
    return "\n".join(out)


def compile_engine(engine: str) -> None:
    """Byte-compile the engine, as `pip install` does for an installed package. Run from a checkout
    under PYTHONDONTWRITEBYTECODE (as on the development machine), each cold start would otherwise
    compile its ~8k lines again: 30-55 ms that no installed package pays, and that the peers (installed
    by pip, compiled) did not pay either."""
    import compileall
    compileall.compile_dir(engine, quiet=1)


def machine() -> dict:
    import platform
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for mod in ("ipy_memory", "numpy", "usearch", "chromadb", "sqlite_vec", "sqlean"):
        try:
            m = __import__(mod)
            versions[mod] = getattr(m, "__version__", None) or getattr(m, "version", lambda: "?")()
        except Exception:
            continue
    import sqlite3
    versions["sqlite3 (stdlib)"] = sqlite3.sqlite_version
    mod = _sqlite_module()
    if mod is not None and mod is not sqlite3:
        versions[f"sqlite ({mod.__name__})"] = mod.sqlite_version
    import ipy_memory
    engine = str(Path(ipy_memory.__file__).parent)
    try:
        rev = subprocess.run(["git", "-C", engine, "log", "-1", "--format=%h %cs"], capture_output=True,
                             text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", engine, "status", "--porcelain", "--", "."], capture_output=True,
                               text=True, timeout=5).stdout.strip()
        engine += f" (commit {rev}{', with uncommitted changes' if dirty else ''})" if rev else ""
    except (OSError, subprocess.SubprocessError):
        pass
    return {"cores": os.cpu_count(), "cpu": cpu, "python": platform.python_version(), "versions": versions,
            "engine": engine}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=None, help="comma-separated corpus sizes (default 1000,10000,100000)")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"subset of {','.join(SYSTEMS)}")
    ap.add_argument("--quick", action="store_true", help="1k and 10k, 50 queries, 20 single inserts, 1 cold run")
    ap.add_argument("--batch", type=int, default=1000, help="bulk insert batch size")
    ap.add_argument("--queries", type=int, default=0, help="queries per size (default 300, 100 at 1M, 50 quick)")
    ap.add_argument("--singles", type=int, default=0, help="single inserts timed (default 200, 20 quick)")
    ap.add_argument("--cold-runs", type=int, default=0, help="cold-open runs, median reported (default 3, 1 quick)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blas-threads", default="1",
                    help="OPENBLAS/OMP/MKL_NUM_THREADS for the systems' processes ('default': leave unset)")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="override an ipy_memory Settings field (default: vector_weight_hash=0.5, i.e. hybrid)")
    ap.add_argument("--no-precomputed", action="store_true", help="skip the peers' precomputed-vector inserts")
    ap.add_argument("--profile", action="store_true", help="cProfile each worker phase into the workdir (implies --keep)")
    ap.add_argument("--workdir", default=None, help="where stores are built (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the stores and logs")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per subprocess")
    ap.add_argument("--json", help="write all results here")
    # internal
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--cold", help=argparse.SUPPRESS)
    ap.add_argument("--with-ann", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cold-lexical", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--phase", default="main", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--settings-json", default="{}", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    if a.worker or a.cold:
        r = worker(a) if a.worker else cold_main(a)
        print("RESULT " + json.dumps(r))
        return 0

    sizes = [int(float(x)) for x in (a.sizes or ("1000,10000" if a.quick else "1000,10000,100000")).split(",")]
    systems = [s.strip() for s in a.systems.split(",") if s.strip()]
    for s in systems:
        if s not in CLASSES:
            ap.error(f"unknown system {s!r}; use {','.join(SYSTEMS)}")
    a.cold_runs = a.cold_runs or (1 if a.quick else 3)
    global BLAS_THREADS
    BLAS_THREADS = None if a.blas_threads == "default" else a.blas_threads
    if BLAS_THREADS and "numpy" not in sys.modules:    # the parent's exact top-10 too
        os.environ["OPENBLAS_NUM_THREADS"] = BLAS_THREADS
    a.keep = a.keep or a.profile
    if a.workdir:
        Path(a.workdir).mkdir(parents=True, exist_ok=True)
    pairs = [f"{k}={v}" for k, v in DEFAULT_SET.items()] + a.set
    settings = parse_settings(pairs)
    import ipy_memory
    compile_engine(str(Path(ipy_memory.__file__).parent))      # before any cold start is timed
    mach = machine()
    started = time.strftime("%Y-%m-%d %H:%M")
    print(f"# ipy_memory scale benchmark, {started}")
    print(f"{mach['cores']} cores, {mach['cpu']}, Python {mach['python']}; "
          + ", ".join(f"{k} {v}" for k, v in mach["versions"].items()))
    print(f"settings overrides: {settings}; batch {a.batch}; BLAS threads {BLAS_THREADS or 'default'}; "
          f"engine {mach['engine']}")
    t0 = now()
    results = []
    for n in sizes:
        results.append(run_size(a, n, systems, settings))
    print()
    for res in results:
        print(f"### {res['size']:,} memories ({res['queries']} queries, {res['singles']} single inserts, "
              f"batches of {res['batch']}, {res['avg_chars']:.0f} chars/memory)\n")
        print(table(res))
        print()
    print("### Goals (ipy_memory)\n")
    print(goals(results))
    print(f"\ntotal {now() - t0:.0f} s")
    if a.json:
        Path(a.json).write_text(json.dumps({"machine": mach, "date": started, "argv": sys.argv[1:],
                                            "settings": settings, "results": results}, indent=1))
    failed = [f"{s} at {res['size']:,}" for res in results for s, r in res["systems"].items() if r.get("failed")]
    if failed:
        print(f"\nFAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
