"""The code in README.md, docs/lifecycle.md and docs/settings.md runs, and prints what its comments say.

Each Markdown file is run top to bottom like a notebook, its blocks sharing one namespace, in a
temporary HOME (so "~/.local/share/ipy_memory", the default data dir, is a fresh store) and working
directory, with the ipy_memory environment variables unset (the offline hashing embedder, no network):

* ```python blocks run as Python; a block with IPython magics (`%recall`, `x = %recall`, `%%store`) runs
  line by line (a cell magic: whole) in an InteractiveShell that has the same namespace;
* ```bash blocks run line by line with bash, `python` being this interpreter with this checkout's
  ipy_memory;
* ```text blocks are output, not code (the recall block example is compared with a real one);
* a block preceded by `<!-- not-run: REASON -->` is skipped (a Python one must still parse). Any other
  fenced block (no language, another language) fails the test: every block is run or says why not.

Example ids (`m-0123456789abcdef`, `m-fedcba9876543210`) stand for memories stored by the examples
before them: each is replaced by the id of the newest live memory whose text contains the words in
PLACEHOLDERS (else the newest live memory) just before its line runs.

Comments that show a value are checked where CHECKS lists the line (an entry whose line is no longer
in the docs fails): "output" means the comment (and the comment lines right below it) is the start of
what the line prints, or of the repr of its value, with `…` and `...` matching anything; "keys"
means every 'quoted': key the comment shows is a key of the value (at any depth).
"""

from __future__ import annotations

import ast
import io
import os
import re
import sqlite3
import subprocess
import sys
import time
import tokenize
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

import ipy_memory

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/lifecycle.md", "docs/settings.md")
PLACEHOLDERS = {"m-0123456789abcdef": "sales table", "m-fedcba9876543210": "Experiment 12"}
CODE_LANGS, TEXT_LANGS = ("python", "bash"), ("text",)


def _first_hit_is_deployment(ns, value):
    hits = list(ns["res"])
    assert hits and re.fullmatch(r"m-[0-9a-f]{16}#2", hits[0].id) and hits[0].path == "Churn model/Deployment", hits
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def _tool_shape(fmt):
    def check(ns, value):
        first = value[0]
        if fmt == "openai":
            assert first["type"] == "function" and first["function"]["strict"] is True
        elif fmt == "openai-responses":
            assert first["type"] == "function" and {"name", "parameters"} <= set(first)
        elif fmt == "anthropic":
            assert set(first) == {"name", "description", "input_schema"}
        else:
            assert {"readOnlyHint", "destructiveHint", "idempotentHint"} <= set(first["annotations"])
    return check


CHECKS = {
    "README.md": {
        "print(r)": "output",
        'print(mem.remember(note.replace("features.", "features!")))': "output",
        "for hit in res:": _first_hit_is_deployment,
        "prompt_part = res.block": "output",
        'export_tools("openai")': _tool_shape("openai"),
        'export_tools("openai-responses")': _tool_shape("openai-responses"),
        'export_tools("anthropic")': _tool_shape("anthropic"),
        'export_tools("mcp")': _tool_shape("mcp"),
        'export_tools("openai", prefix="notes_")':
            lambda ns, value: value[0]["function"]["name"] == "notes_memory_search" or pytest.fail(value[0]),
        'call_tool("memory_remember", {"content": "The sales table is warehouse.sales_2024."}, engine=mem).text':
            "output",
        """call_tool("memory_search", '{"query": "sales table", "limit": 3}', engine=mem).text""": "output",
        'call_tool("memory_search", {"query": "x", "limit": 500}, engine=mem).text': "output",
    },
    "docs/lifecycle.md": {
        'auto.stats()["compat"]': "output",
        "mem.rotate()": "keys",
        "mem.dream()": "keys",
        "mem.compact()": "keys",
    },
    "docs/settings.md": {
        "print(mem.settings.locale)": "output",
        "print(settings.with_(bm25_b=0.5).bm25_b)": "output",
    },
}


@dataclass
class Block:
    path: str
    line: int           # of the opening fence
    lang: str
    code: str
    not_run: str | None

    def __str__(self):
        return f"{self.path}:{self.line} ({self.lang or 'no language'})"


def blocks(path: str) -> list[Block]:
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^(`{3,})(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while not lines[j].startswith(m.group(1)):
            j += 1
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        mark = re.fullmatch(r"<!-- not-run: (.+?) -->", lines[k].strip()) if k >= 0 else None
        out.append(Block(path, i + 1, m.group(2), "\n".join(lines[i + 1:j]) + "\n", mark and mark.group(1)))
        i = j + 1
    return out


def comments(code: str) -> dict[int, str]:
    """Line number -> the comment on it (or, for a line without one, right below it), continued on the
    comment-only lines below while its brackets are open."""
    found = {}
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.COMMENT:
            found[tok.start[0]] = (tok.line[:tok.start[1]].strip() == "", tok.string[1:].strip())
    out = {}
    for line in range(1, code.count("\n") + 1):
        if line in found and found[line][0]:
            continue                                    # a comment-only line: part of the code line above
        n = line if line in found else line + 1
        if not found.get(n, (False,))[0] and n != line:
            continue
        text = found[n][1]
        while sum(text.count(c) for c in "{[(") > sum(text.count(c) for c in ")]}") and found.get(n + 1, (False,))[0]:
            n += 1
            text += " " + found[n][1]
        out[line] = text
    return out


def pattern(comment: str) -> re.Pattern:
    parts = re.split(r"…|\.\.\.", comment)     # (a space in the comment stands for any whitespace)
    return re.compile(".*?".join(r"\s+".join(map(re.escape, p.split(" "))) for p in parts), re.S)


def quoted_keys(comment: str) -> set[str]:
    return set(re.findall(r"'(\w+)':", comment))


def all_keys(value) -> set:
    if isinstance(value, dict):
        return set(value).union(*(all_keys(v) for v in value.values()))
    if isinstance(value, (list, tuple)):
        return set().union(*(all_keys(v) for v in value))
    return set()


def _verify(block: Block, line: int, code_line: str, how, comment: str, ns: dict, value, printed: str | None):
    where = f"{block.path}:{block.line + line}: {code_line}"
    if callable(how):
        how(ns, value)
    elif not comment:
        pytest.fail(f"{where}: CHECKS compares it with its comment, and it has none")
    elif how == "output":
        shown = printed.rstrip("\n") if printed is not None else (repr(value) if comment[:1] in "'\"{[(" else str(value))
        assert pattern(comment).match(shown), f"{where}\n  comment: {comment}\n  actual:  {shown}"
    else:
        missing = quoted_keys(comment) - all_keys(value)
        assert quoted_keys(comment) and not missing, f"{where}: keys {sorted(missing)} not in {value!r}"


class _Instrument(ast.NodeTransformer):
    """Route each checked line's value (or what its print() prints) through __doc_check__(line, value)."""

    def __init__(self, lines):
        self.lines = lines

    def visit_Expr(self, node):
        if node.lineno not in self.lines:
            return node
        call = node.value
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print":
            new = ast.Call(ast.Name("__doc_print__", ast.Load()), [ast.Constant(node.lineno), *call.args], call.keywords)
        else:
            new = ast.Call(ast.Name("__doc_check__", ast.Load()), [ast.Constant(node.lineno), call], [])
        return ast.copy_location(ast.Expr(new), node)

    def visit_Assign(self, node):
        if node.lineno not in self.lines or len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            return node
        check = ast.Expr(ast.Call(ast.Name("__doc_check__", ast.Load()),
                                  [ast.Constant(node.lineno), ast.Name(node.targets[0].id, ast.Load())], []))
        return [node, ast.copy_location(check, node)]

    def visit_For(self, node):
        self.generic_visit(node)
        if node.lineno not in self.lines:
            return node
        check = ast.Expr(ast.Call(ast.Name("__doc_check__", ast.Load()), [ast.Constant(node.lineno),
                                                                          ast.Constant(None)], []))
        return [node, ast.copy_location(check, node)]


class Runner:
    def __init__(self, path: str, home: Path, shell):
        self.path, self.home, self.shell, self.checked = path, home, shell, set()
        self.ns = shell.user_ns
        self.db = home / ".local" / "share" / "ipy_memory" / "memory.sqlite3"

    def resolve(self, code: str) -> str:
        for placeholder, words in PLACEHOLDERS.items():
            if placeholder in code and self.db.exists():
                with sqlite3.connect(self.db) as db:
                    rows = db.execute("SELECT id, content FROM documents WHERE expires_at IS NULL OR expires_at > ? "
                                      "ORDER BY id DESC", (time.time(),)).fetchall()
                picked = next((i for i, text in rows if words in text), rows[0][0] if rows else None)
                if picked:
                    code = code.replace(placeholder, picked)
        return code

    def run(self, block: Block):
        if block.lang == "bash":
            return self.run_bash(block)
        code = block.code
        if re.search(r"^(\w+ = )?%", code, re.M):
            return self.run_ipython(block)
        checks = CHECKS.get(self.path, {})
        notes = comments(code)
        lines = {}
        for n, text in enumerate(code.splitlines(), 1):
            key = re.sub(r"\s+#.*$", "", text).strip()
            if key in checks:
                lines[n] = (key, checks[key], notes.get(n, ""))
                self.checked.add(key)
        tree = ast.fix_missing_locations(_Instrument(set(lines)).visit(ast.parse(self.resolve(code))))

        def check(line, value, printed=None):
            key, how, comment = lines[line]
            _verify(block, line, key, how, comment, self.ns, value, printed)
            return value

        def doc_print(line, *args, **kw):
            buf = io.StringIO()
            with redirect_stdout(buf):
                print(*args, **kw)
            print(buf.getvalue(), end="")
            check(line, None, buf.getvalue())

        self.ns.update(__doc_check__=check, __doc_print__=doc_print)
        exec(compile(tree, f"{block.path}:{block.line}", "exec"), self.ns)

    def run_ipython(self, block: Block):
        cells = [block.code] if block.code.startswith("%%") else [ln for ln in block.code.splitlines() if ln.strip()]
        for cell in cells:
            cell = self.resolve(cell)
            result = self.shell.run_cell(cell, store_history=False)
            assert result.success, f"{block}: {cell!r} failed: {result.error_before_exec or result.error_in_exec!r}"

    def run_bash(self, block: Block):
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                   PYTHONPATH=str(ROOT))
        for line in block.code.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            line = self.resolve(line).replace("python ", f"{sys.executable} ", 1)
            p = subprocess.run(["bash", "-c", line], cwd=self.home, env=env, capture_output=True, text=True,
                               timeout=120)
            assert p.returncode == 0, f"{block}: {line!r} exited {p.returncode}\n{p.stdout}\n{p.stderr}"


@pytest.fixture
def home(tmp_path, monkeypatch):
    for name in list(os.environ):
        if name.startswith(("IPY_MEMORY_", "MEMORY_TREE_", "OPENAI_", "DASHSCOPE_")) or name == "XDG_DATA_HOME":
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def shell(home):
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config
    c = Config()
    c.HistoryManager.enabled = False
    InteractiveShell.clear_instance()
    sh = InteractiveShell.instance(config=c)
    try:
        yield sh
    finally:
        if "ipy_memory" in sh.extension_manager.loaded:
            sh.run_line_magic("unload_ext", "ipy_memory")
        for value in list(sh.user_ns.values()):         # engines the examples left open
            if isinstance(value, ipy_memory.MemoryEngine):
                value.close()
        InteractiveShell.clear_instance()


@pytest.mark.parametrize("path", DOCS)
def test_every_block_is_code_output_or_marked(path):
    for b in blocks(path):
        assert b.lang in CODE_LANGS + TEXT_LANGS, \
            f"{b}: give the block a language (python, bash or text) so it is run or known to be output"
        if b.not_run:
            assert b.lang in CODE_LANGS, f"{b}: a not-run mark on a block that is not code"
            if b.lang == "python":
                ast.parse(re.sub(r"^(\s*)(\w+ = )?%.*$", r"\1pass", b.code, flags=re.M))


@pytest.mark.parametrize("path", DOCS)
def test_docs_run(path, home, shell):
    runner = Runner(path, home, shell)
    for b in blocks(path):
        if b.lang in CODE_LANGS and not b.not_run:
            try:
                runner.run(b)
            except Exception as exc:
                raise AssertionError(f"{b} does not run ({type(exc).__name__}: {exc}); fix it, or mark it "
                                     "<!-- not-run: REASON --> if it cannot run standalone") from exc
    unused = set(CHECKS.get(path, {})) - runner.checked
    assert not unused, f"CHECKS lists lines that are no longer in {path}'s run blocks: {sorted(unused)}"


def test_recall_block_example_is_what_recall_renders(home):
    """README's ```text block is the block its first example's recall renders, but for the dates."""
    shown = next(b.code for b in blocks("README.md") if b.lang == "text" and "<memory-recall" in b.code)
    first = next(b for b in blocks("README.md") if b.lang == "python")
    ns: dict = {"print": lambda *a, **k: None}
    exec(first.code, ns)
    actual = re.sub(r"\] \d{4}-\d\d-\d\d ·", "] DATE ·", ns["prompt_part"])
    assert re.sub(r"\] \d{4}-\d\d-\d\d ·", "] DATE ·", shown).strip() == actual.strip()
