"""`import ipy_memory` stays light: usearch loads at the first vector search, and never before
onnxruntime when that is installed (ipy_memory/_native.py)."""

import subprocess
import sys

from ipy_memory import MemoryEngine

SCRIPT = """
import sys, importlib.util
import ipy_memory
assert "usearch" not in sys.modules, "loaded by the import"
installed = importlib.util.find_spec("onnxruntime") is not None
assert ("onnxruntime" in sys.modules) == installed        # loaded first, whenever it could be loaded later
from ipy_memory import MemoryEngine, Settings
with MemoryEngine(sys.argv[1], project="p", embedder="hash") as mem:
    assert len(mem.recall("otter", scope="project"))                  # default settings: BM25 only
    assert "usearch" not in sys.modules, "loaded by a lexical recall"
    mem.settings = Settings(vector_weight_hash=0.5)
    assert len(mem.recall("otter", scope="project"))
order = [m for m in sys.modules if m in ("onnxruntime", "usearch.compiled")]
assert order == (["onnxruntime", "usearch.compiled"] if installed else ["usearch.compiled"]), order
"""


def test_usearch_loads_at_the_first_vector_search_after_onnxruntime(tmp_path):
    with MemoryEngine(tmp_path / "store", project="p", embedder="hash") as mem:
        mem.remember("the otter sleeps in the kelp")
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "store")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
