"""What the magics do that needs no IPython import: splitting options from free text, scope arguments,
$var expansion, provenance metadata, the one-line summary unless the result shows as the cell's output,
error texts and hints, the ids %forget deletes, the memory a %%store NAME cell stored before, the
config values their traits reject, the entries put in IPython's magic tables and what they replaced,
the cell form's usage in %%remember's help.

Bad input raises InvalidArgument; magics.py turns it into IPython's UsageError (a message, no traceback).
"""

from __future__ import annotations

import ast
import copy
import hashlib
import os
import re
import shlex
import sys
import time
import warnings
from pathlib import Path

from . import _validate as v
from .config import SCOPES, Settings, default_data_dir, default_session
from .errors import InvalidArgument, NotFound
from .store import DB_NAME
from .tools import TOOLS

# %recall without a budget asks for the most a search takes (the agent tool's own default is smaller)
NO_BUDGET = TOOLS["memory_search"].params["max_tokens"].maximum

# one token: quoted parts kept whole, or a run of non-space characters
_TOKEN = re.compile(r"""\s*((?:[^\s"']|"(?:[^"\\]|\\.)*"|'[^']*')+|\S+)""")

# what to do next, by the error's class name
HINTS = {
    "NotFound": "list ids with %memories or %recall QUERY",
    "StorageError": "use another store: %config MemoryMagics.data_dir = '/path/to/dir'",
    "ReadOnlyError": "this store is read-only here: make its database writable (chmod u+w; the magics then reopen "
                     "it) or %config MemoryMagics.data_dir = '/a/writable/dir'",
    "EmbeddingError": "pick another embedder: %config MemoryMagics.embedder = 'hash'",
    "EmbedderMismatch": "open it with the embedder it was built with: %config MemoryMagics.embedder = '' "
                        "(the store's own)",
}


def open_hint(exc: Exception, magics) -> str:
    """What to change when a MemoryMagics' engine cannot open: the setting at fault (data_dir only for the
    store's errors)."""
    kind, project = type(exc).__name__, magics.project
    if kind == "EmbedderMismatch" and not magics.embedder:
        # the store's own preset was tried: it records none (built or re-embedded with an Embedder object)
        return ("the magics cannot open it: it was built with a custom embedder, not a preset. Open it in "
                "Python, MemoryEngine(path, embedder=...), or use another store: "
                "%config MemoryMagics.data_dir = '/path/to/dir'")
    if kind != "InvalidArgument":
        return HINTS.get(kind, HINTS["StorageError"])
    try:
        if project:
            v.name(project, "project")
    except InvalidArgument:
        return "use a plain name: %config MemoryMagics.project = 'myproject' ('' = from the git remote or directory)"
    return HINTS["EmbeddingError"]     # the only other setting checked as the engine opens (or IPY_MEMORY_EMBED_PRESET)


_MISSING = object()


class RecallBlock(str):
    """The `<memory-recall>` text (a str) that shows as plain text rather than a quoted repr."""

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


class MagicTable:
    """The entries put in IPython's magic tables (`manager.magics`) and what each replaced, so that
    taking them out restores exactly what was there."""

    def __init__(self, manager):
        self.manager = manager
        self.saved: dict[tuple[str, str], object] = {}    # (kind, name) -> what was there before us
        self.ours: dict[tuple[str, str], object] = {}     # (kind, name) -> what we put there

    def put(self, kind: str, name: str, fn) -> None:
        table = self.manager.magics[kind]
        if (kind, name) not in self.saved:
            self.saved[(kind, name)] = table.get(name, _MISSING)
        table[name] = self.ours[(kind, name)] = fn

    def restore(self, kind: str, name: str) -> None:
        table = self.manager.magics[kind]
        old, ours = self.saved.pop((kind, name), _MISSING), self.ours.pop((kind, name), None)
        if table.get(name) is not ours:
            return   # replaced by someone else since: leave theirs
        if old is _MISSING:
            table.pop(name, None)
        else:
            table[name] = old

    def restore_all(self) -> None:
        for kind, name in list(self.saved):
            self.restore(kind, name)


def expand_vars(shell, text: str) -> str:
    """$var and {expr} in `text` expanded in the user's namespace (the frame running the cell, found by its globals)."""
    frame, depth = sys._getframe(0), 0
    while frame is not None and frame.f_globals is not shell.user_ns:
        frame, depth = frame.f_back, depth + 1
    return shell.var_expand(text, depth=depth if frame is not None else 10_000)


def loaded_magics(shell):
    """The shell's MemoryMagics while ipy_memory is loaded, else None."""
    magics = shell.magics_manager.registry.get("MemoryMagics") if shell is not None else None
    return magics if getattr(magics, "_installed", False) else None


def error_text(message: str, kind: str, usage: str) -> str:
    """What a magic shows for an error: the message, then what to do next (by the error's class name) or its usage."""
    return f"{message}\n{HINTS.get(kind, f'usage: {usage}  (see {usage.split()[0]}?)')}"


def without_semicolon(line: str) -> str:
    """The line of a magic that takes options or ids only, without a trailing ';' (typed out of habit:
    it reaches a line magic as part of its argument)."""
    line = line.strip()
    return line[:-1].rstrip() if line.endswith(";") else line


def no_arguments(magic: str, line: str) -> None:
    """Reject what a magic without options was given, before it does anything (%memrotate --dry-run rotated)."""
    if without_semicolon(line):
        raise InvalidArgument(f"{magic} takes no arguments, got {line.strip()!r}; see {magic}?")


def unwritable_store(data_dir: str) -> Path | None:
    """What keeps this kernel from writing the store in `data_dir`, if there is one: its directory (a
    read-only mount, a colleague's copy) or its database file (write-protected: no write bit at all, which
    root would ignore, or none for us). The magics open such a store read-only, so %recall, %memories and
    %memstats still work, and its permissions stay as the user set them."""
    d = Path(data_dir).expanduser() if data_dir else default_data_dir()
    db = d / DB_NAME
    if not db.is_file():
        return None
    if not os.access(d, os.W_OK):
        return d
    return db if not os.access(db, os.W_OK) or not db.stat().st_mode & 0o222 else None


def open_engine(engine_class, magics):
    """The engine for a MemoryMagics' settings: read-only, and said so, where the store cannot be written."""
    settings = Settings().with_(dedup_threshold=magics.dedup_threshold, locale=magics.locale)
    unwritable = unwritable_store(magics.data_dir)
    engine = engine_class(magics.data_dir or None, embedder=magics.embedder or None, project=magics.project or None,
                          settings=settings, read_only=unwritable is not None)
    if unwritable is not None:
        print(f"ipy_memory: {unwritable} is not writable here: opened read-only "
              "(%recall, %memories and %memstats work; writing does not)")
    return engine


def cell_usage(usage: str):
    """Decorator: a line_cell_magic's help (one docstring for both forms) with the cell form's `usage`
    below argparse's usage line, which shows the line form only. Put it above @magic_arguments."""
    def add(func):
        end = func.__doc__.index("\n\n", func.__doc__.index("\n\n") + 2)    # the usage block's end
        func.__doc__ = f"{func.__doc__[:end]}\n  {usage}{func.__doc__[end:]}"
        return func
    return add


def given(value, default):
    """An option typed on the line wins, even 0 (which then fails validation loudly)."""
    return default if value is None else value


def unquote(token: str) -> str:
    try:
        parts = shlex.split(token)
    except ValueError:      # an unbalanced quote: keep it as typed
        return token
    return parts[0] if len(parts) == 1 else token


def split_options(parser, line: str) -> tuple[list[str], str]:
    """The leading options of `line` that argparse `parser` knows (as tokens for parse_args), and the
    rest of the line verbatim (quotes, $, {} kept): free text starts at the first token that is no
    option ('-5 degrees', '- a bullet'), or after '--'."""
    opts, rest = [], line.strip()
    while rest.startswith("-"):
        m = _TOKEN.match(rest)
        tok = unquote(m.group(1))
        if tok == "--":
            rest = rest[m.end():].strip()
            break
        takes_next = _takes_next(parser._option_string_actions, tok)
        if takes_next is None:
            if re.match(r"^--?[A-Za-z]", tok):
                raise InvalidArgument(f"unknown option {tok!r} (put -- before text that starts with '-')")
            break
        opts.append(tok)
        rest = rest[m.end():].strip()
        if takes_next:
            m = _TOKEN.match(rest)
            if not m:
                raise InvalidArgument(f"option {tok} needs a value")
            opts.append(unquote(m.group(1)))
            rest = rest[m.end():].strip()
    return opts, rest


def _takes_next(actions: dict, tok: str) -> bool | None:
    """Whether option token `tok` takes the next token as its value, as argparse reads it (`--opt=value`
    and `-n3` hold theirs; in a run of short flags such as `-vt` only the last may take one); None if
    `tok` is no option."""
    action = actions.get(tok.split("=", 1)[0])
    if action is not None:
        return action.nargs != 0 and "=" not in tok
    if tok.startswith("--") or len(tok) < 2:
        return None
    for i, char in enumerate(tok[1:], 2):
        action = actions.get("-" + char)
        if action is None:
            return None
        if action.nargs != 0:
            return i == len(tok)        # the value is the rest of the token, else the next one
    return False


def scope_arg(value: str | None, what: str = "-s/--scope") -> str | None:
    """'global+project' -> 'project+global' (canonical order); InvalidArgument for unknown parts."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a str such as 'project+global', not {type(value).__name__}")
    parts = {p.strip() for p in value.split("+")}
    bad = parts - set(SCOPES)
    if bad or not parts:
        raise InvalidArgument(f"unknown scope {value!r} for {what}: use session, project, global or a '+'-joined "
                              "combination, e.g. -s project+global")
    return "+".join(s for s in SCOPES if s in parts)


def write_scope(value: str | None) -> str | None:
    """-s/--scope of %remember and %%store: one scope, spaces around it dropped (as %recall's -s and
    remember()'s scope=); checked before anything is looked up."""
    return None if value is None else v.scope(value)


def announce(shell, cell, result, kind: str, name: str, line: str, summary: str | None = None):
    """Print the one-line summary of `result`, unless IPython is about to show it as the cell's output
    (`cell`: the running cell's ExecutionInfo, None outside a cell). Returns `result`."""
    raw = getattr(cell, "raw_cell", None)
    body, calls = _statements(shell, cell, raw) if raw else ([], {})
    nth = calls[kind, name, line] = calls.get((kind, name, line), -1) + 1    # this call's place among its twins
    if not _shown(body, kind, name, line, shell.ast_node_interactivity, nth):
        print(summary if summary is not None else result.summary())
    return result


_last_cell: list = [None, None, None]     # the running cell's ExecutionInfo, its raw text, (statements, calls so far)


def _statements(shell, cell, raw: str) -> tuple[list, dict]:
    """The statements of the running cell as IPython runs it, remembered for that cell (a cell of many
    magics is transformed and parsed once, not once per magic, which made such a cell quadratic), and
    how many times each magic line has been announced in it so far."""
    if _last_cell[0] is not cell or _last_cell[1] != raw:
        _last_cell[:] = [cell, raw, (_parse(shell.transform_cell(raw)), {})]
    return _last_cell[2]


def _parse(code: str) -> list:
    try:
        return ast.parse(code).body
    except SyntaxError:
        return []


def _shown(body: list, kind: str, name: str, line: str, interactivity: str, nth: int = 0) -> bool:
    """Whether IPython's displayhook will show what this magic call returns, judged as IPython does: from
    the running cell as transformed (%magic, automagic and %%cell all become get_ipython().run_*_magic
    calls, and a ';' inside one is its text, not a silencer) and the shell's ast_node_interactivity.
    `nth`: which of the cell's statements that are this very call is running (a cell may repeat a line)."""
    if interactivity == "none" or not body:
        return False
    last = body[-1]
    shown = [n.value for n in (body if interactivity == "all" else [last]) if isinstance(n, ast.Expr)]
    if interactivity == "last_expr_or_assign" and _assigns_one_name(last):
        shown.append(last.value)       # IPython shows the name it was assigned to
    twins = [n.value for n in body if isinstance(n, (ast.Expr, ast.Assign, ast.AnnAssign))
             and _is_magic_call(n.value, kind, name, line)]
    if nth < len(twins):
        return any(value is twins[nth] for value in shown)
    return any(_is_magic_call(value, kind, name, line) for value in shown)     # (e.g. called in a loop)


def _assigns_one_name(node) -> bool:
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return isinstance(node.target, ast.Name)
    return isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)


def _is_magic_call(node, kind: str, name: str, line: str) -> bool:
    """`node` is get_ipython().run_{kind}_magic(name, line, ...)."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == f"run_{kind}_magic" and len(node.args) >= 2
            and all(isinstance(a, ast.Constant) for a in node.args[:2])
            and [a.value for a in node.args[:2]] == [name, line])


def provenance(shell, cell, magic: str, source: str) -> dict:
    """Metadata for memories stored from IPython: where and when they came from. `cell` is the running
    cell's ExecutionInfo (None outside a cell)."""
    raw = getattr(cell, "raw_cell", None) or source
    meta = {"source": "ipython", "magic": magic}
    ns = shell.user_ns
    notebook = ns.get("__vsc_ipynb_file__") or ns.get("__session__") or os.environ.get("JPY_SESSION_NAME")
    if notebook:
        meta["notebook"] = str(notebook)
    if cell is not None and getattr(cell, "store_history", False):
        meta["cell"] = shell.displayhook.prompt_count      # In[n] of the running cell
    if getattr(cell, "cell_id", None):
        meta["cell_id"] = cell.cell_id
    meta["cell_sha256"] = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()
    kernel = getattr(shell, "kernel", None)
    meta["kernel_session"] = getattr(getattr(kernel, "session", None), "session", None) or default_session()
    meta["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return meta


def bad_setting(owner: str, name: str, value, trait, kept) -> str:
    """The warning for a config value its trait rejects: what was given, what is allowed, what is used."""
    values, lo, hi = getattr(trait, "values", None), getattr(trait, "min", None), getattr(trait, "max", None)
    if values is not None:
        allowed = trait.info()                               # "any of ['auto', 'widget', ...]"
    elif lo is not None and hi is not None:
        allowed = f"{trait.info()} from {lo} to {hi}"        # "an int from 1 to 50"
    else:
        allowed = trait.info()
    if getattr(trait, "allow_none", False):
        allowed += ", or None"
    return (f"{owner}.{name} = {value!r} is not valid ({allowed}); using {kept!r}. "
            f"Fix it with %config {owner}.{name} = <a valid value>")


def rejected_settings(owner, config: dict, traits: dict, accepts) -> list[str]:
    """The settings in `config` (the owner's section) whose value `accepts(trait, value)` refuses, each
    reported with a warning at every load (a fresh registry: Python shows one once per code line)."""
    rejected = []
    for name, value in config.items():
        if name in traits and not accepts(traits[name], value):
            warnings.warn_explicit(bad_setting(type(owner).__name__, name, value, traits[name], getattr(owner, name)),
                                   UserWarning, __file__, 0, module=__name__, registry={})
            rejected.append(name)
    return rejected


def without_settings(config: dict, sections: list[str], names: list[str]) -> dict:
    """A copy of a traitlets Config without `names` in any section named in `sections` (nested ones too);
    the config itself when there are none."""
    if not names:
        return config
    out = copy.deepcopy(config)
    stack = [out]
    while stack:
        for key, value in stack.pop().items():
            if isinstance(value, dict):
                if key in sections:
                    for name in names:
                        value.pop(name, None)
                stack.append(value)
    return out


def ids_to_forget(engine, ids: list[str]) -> list[str]:
    """The ids %forget deletes, each checked first (its form, and that it exists) so that a bad one stops
    the command before anything is deleted. Repeats, and sections of a memory forgotten whole, are dropped."""
    parsed: dict[str, tuple[str, int | None]] = {}
    for id_ in ids:
        TOOLS["memory_forget"].validate({"id": id_})        # the tool's check and message
        doc, ord_ = v.memory_id(id_)
        parsed.setdefault(doc if ord_ is None else f"{doc}#{ord_}", (doc, ord_))   # ('#01' is '#1': once)
    for id_, (doc, ord_) in parsed.items():
        if not engine._forgettable(doc, ord_):
            raise NotFound(f"no memory {id_!r} (never stored, forgotten, or expired and purged)" if ord_ is None
                           else f"no memory section {id_!r}")
    whole = {doc for doc, ord_ in parsed.values() if ord_ is None}
    return [id_ for id_, (doc, ord_) in parsed.items() if ord_ is None or doc not in whole]
