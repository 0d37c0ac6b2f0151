"""`import ipy_memory` stays light: usearch loads at its first use, onnxruntime just before it (never
after it, ipy_memory/_native.py); a kernel that recalls lexically loads neither, nor does one whose
vector searches are exact scans by the compiled kernel; no recall loads concurrent.futures, logging
or numpy.ma (np.unique's first call imports it), nor the write path's modules; the import compiles
none of the write path's regexes."""

import importlib.util
import subprocess
import sys

import pytest

from ipy_memory import MemoryEngine

# Each script imports numpy first: what numpy's own import loads is not held against ipy_memory
# (numpy 1.24 loads numpy.ma, random, secrets and hashlib; numpy 2 none of them)
SCRIPT = """
import sys, importlib.util
import numpy
numpy_own = set(sys.modules)
import ipy_memory
assert "usearch" not in sys.modules, "loaded by the import"
from ipy_memory import _text
WRITE_REGEXES = (_text.cue_patterns, _text._question_patterns, _text.chat_line)
assert not any(f.cache_info().currsize for f in WRITE_REGEXES), "a write's regexes compiled by the import"  # ~2 ms
assert "onnxruntime" not in sys.modules, "loaded by the import"
installed = importlib.util.find_spec("onnxruntime") is not None
from ipy_memory import MemoryEngine, Settings
with MemoryEngine(sys.argv[1], project="p", embedder="hash") as mem:
    assert len(mem.recall("otter", scope="project"))                  # default settings: BM25 only
    assert "usearch" not in sys.modules, "loaded by a lexical recall"
    assert "onnxruntime" not in sys.modules, "loaded by a lexical recall"
    mem.settings = Settings(vector_weight_hash=0.5)
    from ipy_memory import _recall
    _recall._BESIDE_ROWS = 1                  # the exact scan on the scan worker, as for 20k+ rows
    assert len(mem.recall("otter", scope="project")) and _recall.SCANS.started
    from ipy_memory import _kernels
    # where the extension is not built (no C compiler) or has no F16C scan, the exact scan is usearch's,
    # whose import loads tqdm and so logging: only what ipy_memory itself would load is held against it
    theirs = set() if _kernels.FAST_HALF_DOTS else {"logging"}
    late = [m for m in ("concurrent.futures", "logging", "numpy.ma") if m in sys.modules and m not in theirs | numpy_own]
    assert not late, f"loaded by a recall: {late}"     # each ~4-8 ms of a new process's first recall
    writing = [m for m in ("ipy_memory._ingest", "ipy_memory._writer", "ipy_memory._markdown") if m in sys.modules]
    assert not writing, f"the write path's modules loaded by a recall: {writing}"     # ~5 ms
    mem.remember("a heron nests by the otter's kelp. Has it? Ann: héron [1 May 2023]")
    assert "ipy_memory._writer" in sys.modules
    assert all(f.cache_info().currsize for f in WRITE_REGEXES)
    if _kernels.FAST_HALF_DOTS:     # the exact scan is the extension's: nothing else needed
        assert "usearch" not in sys.modules, "loaded by an exact vector scan"
        assert "onnxruntime" not in sys.modules, "loaded by an exact vector scan"
        from ipy_memory._native import usearch
        usearch()               # (an HNSW graph, a colder tier): the first use
order = [m for m in sys.modules if m in ("onnxruntime", "usearch.compiled")]
assert order == (["onnxruntime", "usearch.compiled"] if installed else ["usearch.compiled"]), order
"""

# the user's own `import usearch` after ipy_memory: onnxruntime is loaded first all the same, so a
# model the notebook loads with onnxruntime later does not crash the process
USER_IMPORT = """
import sys
import ipy_memory
import usearch.index
order = [m for m in sys.modules if m in ("onnxruntime", "usearch.compiled")]
assert order == ["onnxruntime", "usearch.compiled"], order
import onnxruntime      # already loaded: a no-op
"""


def run(script, *args):
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_usearch_loads_at_its_first_use_after_onnxruntime(tmp_path):
    with MemoryEngine(tmp_path / "store", project="p", embedder="hash") as mem:
        # the otters' sections spread over thousands of slots: np.isin would then sort (np.unique: numpy.ma)
        mem.remember_many([{"content": f"note {i}: the {'otter' if i % 10 == 0 else 'heron'} sleeps in the kelp",
                            "force": True} for i in range(3000)])
    run(SCRIPT, str(tmp_path / "store"))


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="needs onnxruntime (the 'local' extra)")
def test_a_users_own_usearch_import_loads_onnxruntime_first():
    run(USER_IMPORT)


def test_the_import_order_finder_is_installed_once_and_finds_nothing():
    from ipy_memory._native import _OnnxruntimeFirst, install_import_order
    install_import_order()
    install_import_order()
    finders = [f for f in sys.meta_path if isinstance(f, _OnnxruntimeFirst)]
    assert len(finders) <= 1                 # none if usearch was already imported in this process
    assert all(f.find_spec("json") is None for f in finders)


def test_the_import_leaves_what_only_some_processes_need_for_later():
    """logging (a warning's first use), html (a notebook's HTML view), the secret patterns (a
    write), hashlib (OpenSSL: _digests uses the builtin digests) and zipfile (a snapshot's writing)
    are loaded when used, not by `import ipy_memory`."""
    run("""
import sys
import numpy
numpy_own = set(sys.modules)
import ipy_memory
from ipy_memory import redact
late = [m for m in ("logging", "html", "secrets", "random", "hashlib", "zipfile") if m in sys.modules and m not in numpy_own]
assert not late, late
assert redact._patterns.cache_info().currsize == 0
assert redact.redact("api_key = 'abcd1234efgh'")[1] == 1
from ipy_memory._log import log
log.debug("first use")
assert "logging" in sys.modules
""")


def test_loading_the_extension_leaves_ipywidgets_for_a_live_view(tmp_path):
    """%load_ext ipy_memory installs the display formatters without importing ipywidgets (~30 ms of
    every kernel's start): only a live view, with MemoryMagics.display = 'widget' in a kernel, does."""
    run("""
import sys
from IPython.testing.globalipapp import start_ipython
ip = start_ipython()
assert "ipywidgets" not in sys.modules
ip.run_line_magic("config", f"MemoryMagics.data_dir = {sys.argv[1]!r}")
ip.run_line_magic("load_ext", "ipy_memory")
ip.run_line_magic("remember", "widgets show live views")
for mode in ("auto", "html", "text", "widget"):      # 'widget' outside a kernel: static
    ip.run_line_magic("config", f"MemoryMagics.display = {mode!r}")
    ip.display_formatter.format(ip.run_line_magic("recall", "widgets"))
assert "ipywidgets" not in sys.modules, "loaded by %load_ext or a static display"
ip.kernel = object()                                  # what ipykernel's shell has
data = ip.display_formatter.format(ip.run_line_magic("recall", "widgets"))[0]
assert "application/vnd.jupyter.widget-view+json" in data and "ipywidgets" in sys.modules
""", str(tmp_path / "store"))
