"""Two processes on one data dir, and derived indexes rebuilt from SQLite."""

import subprocess
import sys
import textwrap

from ipy_memory import MemoryEngine, Settings

WRITER = textwrap.dedent("""
    import sys
    from ipy_memory import MemoryEngine
    with MemoryEngine(sys.argv[1], project="shared") as mem:
        r = mem.remember(sys.argv[2], force=True)
        print(r.id)
""")


def run_writer(data_dir, text):
    out = subprocess.run([sys.executable, "-c", WRITER, str(data_dir), text], capture_output=True, text=True,
                         check=True, timeout=60)
    return out.stdout.strip()


def test_other_process_writes_are_seen_on_next_call(tmp_path):
    with MemoryEngine(tmp_path, project="shared") as mem:
        mine = mem.remember("kernel A knows about quokkas").id
        assert [h.document_id for h in mem.recall("quokkas")] == [mine]
        theirs = run_writer(tmp_path, "kernel B also knows about quokkas")
        assert {h.document_id for h in mem.recall("quokkas")} == {mine, theirs}
        subprocess.run([sys.executable, "-c", "import sys; from ipy_memory import MemoryEngine; "
                        "MemoryEngine(sys.argv[1], project='shared').forget(sys.argv[2])", str(tmp_path), theirs],
                       check=True, timeout=60)
        assert [h.document_id for h in mem.recall("quokkas")] == [mine]


def _results(mem, queries):
    """Recall results plus the raw vector neighbours (the hashing embedder ranks lexically by default)."""
    shard = mem.shards.get("project:p")
    vec = [[int(k) for k in shard.vec.search(mem.embedder.embed_query(q), 10)[0]] for q in queries]
    return [[(h.id, round(h.score, 4)) for h in mem.recall(q)] for q in queries], vec


def test_index_files_rebuilt_when_missing_or_damaged(tmp_path):
    settings = Settings(exact_threshold=50, vector_weight_hash=0.3, vector_index="hnsw")   # vectors rank, so small data gets a graph
    texts = [f"memory {i} about topic {i % 7} with detail {i * 13 % 101}" for i in range(300)]
    queries = ["topic 3 detail", "memory 42", "topic 6"]
    with MemoryEngine(tmp_path, project="p", settings=settings) as mem:
        mem.remember_many([{"content": t, "force": True} for t in texts])
        before = _results(mem, queries)
    graphs = list((tmp_path / "index").glob("*.usearch"))
    assert graphs, "a graph file should have been saved for the large space"
    for damage in ("delete", "truncate", "garbage"):
        g = graphs[0]
        if damage == "delete":
            g.unlink(missing_ok=True)
        elif damage == "truncate":
            g.write_bytes(g.read_bytes()[:100] if g.exists() else b"")
        else:
            g.write_bytes(b"\x00garbage" * 1000)
        with MemoryEngine(tmp_path, project="p", settings=settings) as mem:
            assert _results(mem, queries) == before, damage
            assert len(mem.shards.get("project:p").vec) == 300


def test_reopen_adopts_the_saved_graph_without_rebuilding(tmp_path, monkeypatch):
    from ipy_memory import vectors
    settings = Settings(exact_threshold=50, vector_weight_hash=0.3, vector_index="hnsw")
    with MemoryEngine(tmp_path, project="p", settings=settings) as mem:
        mem.remember_many([{"content": f"fact {i} about widget {i % 13}", "force": True} for i in range(200)])
        mem.recall("widget 3")                                     # loads vectors: the graph is built once
    builds = []
    real = vectors.VectorShard.build_graph
    monkeypatch.setattr(vectors.VectorShard, "build_graph", lambda self: builds.append(1) or real(self))
    with MemoryEngine(tmp_path, project="p", settings=settings) as mem:
        assert mem.recall("widget 3").hits
        assert mem.shards.get("project:p").vec.graph is not None
        assert builds == []                  # adopted from disk, not rebuilt
