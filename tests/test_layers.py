"""Dependencies point one way (errors/config/models <- embeddings/store/index <- engine <- tools <-
magics/widgets), and each heavy third-party import lives in one module: read from the source's
import statements, function-level ones included."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ipy_memory"

LAYERS = [
    # 0: vocabulary and helpers that know nothing of storage or search
    {"errors", "config", "models", "block", "redact", "_display", "_columns", "_topk", "_kernels", "_wordkernels", "_crc",
     "_npz", "_snapchecks", "_postings", "_markdown", "_locking", "_gcpause", "_text", "_labels", "_written", "_validate", "demo_notes",
     "_log", "_threads", "_digests", "_zipdir", "_pages", "_captured", "_acks", "_messages"},
    # 1: embeddings, storage and the indexes
    {"embeddings", "store", "vectors", "lexical", "_colscan", "_colsnap", "_lowtier", "_graphcheck", "_native", "_expand", "_lexscore",
     "_lexupdate", "_ingest", "_shards", "_dedup", "_writer", "_recall", "_reembed", "_backup", "_dreamed", "_sync"},
    # 2: the engine and its mixins
    {"engine", "lifecycle", "_access", "_background", "_removal", "agent", "_hits"},
    # 3: the tool schemas, and the command line
    {"tools", "_toolspec", "__main__"},
    # 4: IPython
    {"magics", "widgets", "_magicline", "_formatters", "_remembered"},
]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}
# third-party imports allowed in one place only
OWNERS = {"IPython": {"magics", "widgets"}, "ipywidgets": {"widgets"}, "traitlets": {"magics"},
          "httpx": {"embeddings"}, "usearch": {"_native"}}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        yield path, parts


def _imports(path: Path, parts: tuple) -> tuple[set, set]:
    """(first-level package modules, top-level third-party packages) that the file imports."""
    package = ("ipy_memory",) + (parts[:-1] if parts[-1] != "__init__" else parts[:-1])
    inner, outer = set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                names = [node.module] if node.module else [a.name for a in node.names]
                for name in names:
                    full = base + tuple(name.split("."))
                    inner.add(full[1] if len(full) > 1 else "__init__")
            elif node.module.split(".")[0] == "ipy_memory":
                inner.add(node.module.split(".")[1] if "." in node.module else "__init__")
            else:
                outer.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            outer.update(a.name.split(".")[0] for a in node.names)
    return inner, outer


def test_every_module_has_a_layer():
    first_level = {parts[0] for _, parts in _modules()} - {"__init__"}
    assert first_level <= set(LAYER), sorted(first_level - set(LAYER))


@pytest.mark.parametrize("path,parts", [pytest.param(p, parts, id="/".join(parts)) for p, parts in _modules()])
def test_imports_point_down_the_layers(path, parts):
    inner, outer = _imports(path, parts)
    me = parts[0]
    if me == "__init__":
        return      # the facade (its %load_ext hooks import magics when called)
    up = {m for m in inner - {"__init__", me} if LAYER.get(m, -1) > LAYER[me]}
    assert not up, f"{'/'.join(parts)} (layer {LAYER[me]}) imports a higher layer: {sorted(up)}"
    for lib, owners in OWNERS.items():
        assert lib not in outer or me in owners, f"{'/'.join(parts)} imports {lib} (only {sorted(owners)} may)"
