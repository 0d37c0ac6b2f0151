"""Command line: python -m ipy_memory {demo,store,recall,list,forget,stats,selftest,inspect,backup}.

Every subcommand takes --json; all but selftest (which works on a temporary store) also --data-dir (default:
IPY_MEMORY_DATA_DIR or the platform data dir) and --project.
Errors print one line and exit with status 2 (bad input) or 1 (anything else).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

from . import __version__, _kernels
from ._display import one_line
from .config import default_data_dir
from .engine import MemoryEngine
from .errors import InvalidArgument, IpyMemoryError, StorageError
from .store import DB_NAME

DEMO_QUERIES = [
    "where does the nightly sales job load from?",
    "which model had the best AUC?",
    "藻类 艺术 原型尺寸",
    "蓝光照射后发生了什么？",
]


class _OutputError(Exception):
    """stdout cannot be written (a full disk, a closed file): a one-line error, status 1."""


def _print(args, data, text: str) -> None:
    try:
        print(json.dumps(data, ensure_ascii=False, indent=1, default=str) if args.json else text, flush=True)
    except BrokenPipeError:
        raise                   # (the reader went away, e.g. `| head`: main() ends quietly)
    except OSError as exc:
        raise _OutputError(f"cannot write the output: {exc}") from None


def _utf8(value: str, what: str) -> str:
    """A command-line argument or stdin as text: bytes that are not UTF-8 arrive as lone surrogates
    (surrogateescape), which remember() would refuse in Python's words."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"{what} is not valid UTF-8 (at character {exc.start}): convert it to UTF-8 first") from None
    return value


def _stdin_text() -> str:
    data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode("utf-8", "surrogateescape")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"stdin is not valid UTF-8 (byte {data[exc.start:exc.start + 1]!r} at offset {exc.start}): "
                              "convert it to UTF-8 first, e.g. with iconv") from None


def _engine(args, **kw) -> MemoryEngine:
    try:
        return MemoryEngine(args.data_dir, project=getattr(args, "project", None),
                            session=getattr(args, "session", None), **kw)
    except StorageError:
        # A read-only open never creates the store: say whether the data dir is wrong or still empty.
        d = Path(args.data_dir if args.data_dir is not None else default_data_dir()).expanduser().resolve()
        if kw.get("read_only") and (d.is_dir() or not d.exists()) and not (d / DB_NAME).exists():
            why = "nothing has been stored there yet" if d.exists() else "that directory does not exist"
            raise StorageError(f"no memory store in {d}: {why}. Check --data-dir (or IPY_MEMORY_DATA_DIR), "
                               f"or store a memory first: {_prog()} store TEXT --data-dir {d}") from None
        raise


def _no_embedding(args, **kw) -> MemoryEngine:
    """For commands that embed nothing: no embedding server, key or model needed."""
    return _engine(args, embedder="recorded", **kw)


def cmd_demo(args) -> None:
    tmp = None
    if args.data_dir is None:
        tmp = args.data_dir = tempfile.mkdtemp(prefix="ipy-memory-demo-")
    try:
        with _engine(args) as mem:
            notes = sorted(p for p in resources.files("ipy_memory.demo_notes").iterdir() if p.name.endswith(".md"))
            results = mem.remember_many([{"content": p.read_text(encoding="utf-8"), "metadata": {"file": p.name}}
                                         for p in notes])
            out = {"stored": [r.to_dict() for r in results], "recalls": []}
            if not args.json:
                print(f"data dir: {mem.data_dir}")
                for p, r in zip(notes, results):
                    print(f"  {p.name}: {r.summary()}")
            for q in DEMO_QUERIES:
                res = mem.recall(q, limit=3)
                out["recalls"].append({"query": q, "hits": res.to_dicts()})
                if not args.json:
                    print(f"\n>>> recall {q!r}")
                    for i, h in enumerate(res, 1):
                        print(f"  {i}. {h.score:.3f}  {h.label}")
            block = mem.recall(DEMO_QUERIES[0], max_tokens=300)
            out["block"], out["stats"] = block.block, mem.stats().to_dict()
            if not args.json:
                print("\n" + block.block + "\n")
                print(mem.stats())
        if args.json:
            print(json.dumps(out, ensure_ascii=False, indent=1, default=str))
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def cmd_store(args) -> None:
    if args.scope == "session" and args.session is None:
        # Each CLI run is a new process with a new session id: no later command could see the memory.
        raise InvalidArgument("--scope session needs --session ID: each command runs in a new session, so no later "
                              "command could find the memory; pass the same --session ID to recall and list")
    text = _stdin_text() if args.text == "-" else _utf8(args.text, "TEXT")
    with _engine(args) as mem:
        r = mem.remember(text, title=args.title, scope=args.scope, force=args.force)
        _print(args, r.to_dict(), r.summary())


def cmd_recall(args) -> None:
    with _engine(args, read_only=args.read_only) as mem:
        r = mem.recall(_utf8(args.query, "QUERY"), scope=args.scope, limit=args.limit, max_tokens=args.max_tokens)
        _print(args, r.to_dicts(), r.block)


def cmd_list(args) -> None:
    with _no_embedding(args, read_only=True) as mem:
        r = mem.list_memories(scope=args.scope, limit=args.limit, offset=args.offset)
        _print(args, {"total": r.total, "memories": r.to_dicts()}, repr(r))      # (its first line counts the page)


def cmd_forget(args) -> None:
    with _no_embedding(args) as mem:
        r = mem.forget(args.id)
        _print(args, r, f"forgot {r['id']} ({r['removed_nodes']} section(s))")


def cmd_stats(args) -> None:
    with _no_embedding(args, read_only=True) as mem:
        s = mem.stats()
        _print(args, s.to_dict(), repr(s))


def cmd_inspect(args) -> None:
    """Read-only view of a live store: stats plus the newest memories."""
    with _no_embedding(args, read_only=True) as mem:
        s, recent = mem.stats(), mem.list_memories(scope="session+project+global", limit=args.limit)
        every = mem.store.query("SELECT id, space, title, created_at FROM documents ORDER BY created_at DESC LIMIT ?",
                                (args.limit,))
        data = {"stats": s.to_dict(), "recent": [dict(zip(("id", "space", "title", "created_at"), r)) for r in every]}
        _print(args, data, repr(s) + "\n\nnewest memories (all spaces):\n" +
               "\n".join(f"  {r[0]}  {r[1]}  {one_line(r[2], 60)}" for r in every) + f"\n({len(recent)} visible here)")


def cmd_backup(args) -> None:
    with _no_embedding(args, read_only=True) as mem:
        r = mem.backup(args.out)
        _print(args, r, f"backed up {mem.store.path} to {r['path']} ({r['bytes']:,} bytes)")


def cmd_selftest(args) -> None:
    """Offline engine checks on a temporary store: store, dedup, recall (EN + ZH), forget, reopen."""
    checks = []
    with tempfile.TemporaryDirectory(prefix="ipy-memory-selftest-") as d:
        with MemoryEngine(d, project="selftest") as mem:
            a = mem.remember("# Setup\nThe GPU box is called orion.")
            checks.append(("remember", a.stored))
            checks.append(("exact dedup", mem.remember("# Setup\nThe GPU box is called orion.").deduped))
            checks.append(("recall en", mem.recall("what is the gpu box called?")[0].document_id == a.id))
            b = mem.remember("# 光遗传学\n## 艺术应用\n绿藻活体展示")
            checks.append(("recall zh", mem.recall("艺术应用")[0].document_id == b.id))
            checks.append(("block", mem.recall("orion").block.startswith('<memory-recall count="1">')))
            mem.forget(b.id)
            checks.append(("forget", all(h.document_id != b.id for h in mem.recall("艺术应用 绿藻"))))
        with MemoryEngine(d, project="selftest") as mem:
            checks.append(("reopen", mem.recall("orion")[0].document_id == a.id))
    ok = all(c[1] for c in checks)
    kernels = "compiled" if _kernels.COMPILED else "numpy"      # the optional C extension, or its twins
    _print(args, {"ok": ok, "checks": dict(checks), "kernels": kernels},
           "\n".join(f"{'ok  ' if c[1] else 'FAIL'} {c[0]}" for c in checks)
           + f"\nkernels: {kernels}" + ("\nall ok" if ok else "\nFAILED"))
    if not ok:
        raise SystemExit(1)


def _prog() -> str:
    """The command as typed: `ipy-memory` (the console script), else `python -m ipy_memory`."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name and name not in ("__main__.py", "-c") else "python -m ipy_memory"


def parser() -> argparse.ArgumentParser:
    json_only = argparse.ArgumentParser(add_help=False)       # (selftest works on a temporary store of its own)
    json_only.add_argument("--json", action="store_true", help="machine-readable output")
    common = argparse.ArgumentParser(add_help=False, parents=[json_only])
    common.add_argument("--data-dir", help="store location (default: IPY_MEMORY_DATA_DIR or the user data dir)")
    common.add_argument("--project", help="project name (default: git remote or working directory)")
    session = argparse.ArgumentParser(add_help=False)
    session.add_argument("--session", metavar="ID", help="session id for the 'session' scope (default: a new one per "
                         "command; required by store --scope session)")
    p = argparse.ArgumentParser(prog=_prog(), description="ipy_memory: long-term memory for notebooks")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", parents=[common], help="store bundled notes in a temp dir, recall, print block and stats")
    s = sub.add_parser("store", parents=[common, session], help="remember TEXT ('-' reads stdin)")
    s.add_argument("text", help="the note (Markdown: headings become sections); '-' reads it from stdin")
    s.add_argument("--title", help="title (default: the first heading or line)")
    s.add_argument("--scope", default="project", choices=["session", "project", "global"],
                   help="where it lives (default: project)")
    s.add_argument("--force", action="store_true", help="store it even if a near-duplicate exists")
    s = sub.add_parser("recall", parents=[common, session], help="recall QUERY and print the <memory-recall> block")
    s.add_argument("query", help="what to look for")
    s.add_argument("--scope", default="project+global",
                   help="'+'-joined session, project, global (default: project+global)")
    s.add_argument("-n", "--limit", type=int,
                   help="number of hits, 1-50 (default 10; with --max-tokens up to 50, as many as fit the budget)")
    s.add_argument("--max-tokens", type=int, help="token budget of the recall block, 1-100000")
    s.add_argument("--read-only", action="store_true", help="open the store read-only (e.g. on a read-only mount)")
    s = sub.add_parser("list", parents=[common, session], help="list memories, newest first")
    s.add_argument("--scope", help="'+'-joined session, project, global (default: all three)")
    s.add_argument("-n", "--limit", type=int, default=50, help="page size, 1-200 (default 50)")
    s.add_argument("--offset", type=int, default=0, help="how many to skip (default 0)")
    s = sub.add_parser("forget", parents=[common], help="forget a memory or section by id")
    s.add_argument("id", help="m-0123456789abcdef (a memory) or m-0123456789abcdef#2 (one of its sections)")
    sub.add_parser("stats", parents=[common], help="counts, sizes, embedder, tiers")
    sub.add_parser("selftest", parents=[json_only], help="offline engine checks on a temporary store")
    s = sub.add_parser("inspect", parents=[common], help="read-only view of a live store")
    s.add_argument("-n", "--limit", type=int, default=20, help="how many of the newest memories to list (default 20)")
    s = sub.add_parser("backup", parents=[common], help="copy the database to OUT (online backup API); OUT must be new or an "
                       "earlier backup")
    s.add_argument("out", help="the backup file to write")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        globals()["cmd_" + args.command](args)
    except InvalidArgument as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (IpyMemoryError, _OutputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:      # (Python's advice: no traceback, and none again when stdout is flushed at exit)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
