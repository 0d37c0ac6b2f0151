"""IPython magics for long-term memory: ``%load_ext ipy_memory``.

%remember / %%remember, %%store (IPython's line %store keeps working), %recall (= %memrecall; IPython's
%recall stays reachable as %rep while loaded), %memories, %memstats, %forget, and %memdream / %memrotate /
%memcompact when the engine has those methods. Settings are traitlets: ``%config MemoryMagics.limit = 5`` or
``c.MemoryMagics.limit = 5``. One engine per kernel, opened on first use, closed on unload and at exit.
"""

from __future__ import annotations

import atexit

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_cell_magic, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import Bool, Enum, Float, Int, TraitError, Unicode, observe
from traitlets.config.loader import DeferredConfig, LazyConfigValue

from . import tools
from ._formatters import ShellDisplay
from ._magicline import (NO_BUDGET, MagicTable, RecallBlock, announce, cell_usage, error_text, expand_vars, given,
                         ids_to_forget, loaded_magics, no_arguments, open_engine, open_hint, provenance,
                         rejected_settings, scope_arg, split_options, unwritable_store, without_semicolon,
                         without_settings, write_scope)
from ._remembered import Said, misplaced_option, named_memory, replacement_metadata, store_name
from .block import FRAME
from .config import SCOPES
from .engine import MemoryEngine
from .errors import InvalidArgument, IpyMemoryError
from .models import RememberResult

__all__ = ["MemoryMagics", "RecallBlock", "current_engine", "load_ipython_extension", "unload_ipython_extension"]

LIFECYCLE = ("dream", "rotate", "compact")       # %memdream, %memrotate, %memcompact when the engine has them


def current_engine(shell=None) -> MemoryEngine:
    """The kernel's engine (the one the magics use); needs ``%load_ext ipy_memory``."""
    if shell is None:
        from IPython import get_ipython
        shell = get_ipython()
    magics = loaded_magics(shell)
    if magics is None:
        raise UsageError("ipy_memory is not loaded: run %load_ext ipy_memory first")
    return magics.engine


def _lifecycle_magic(method: str, what: str):
    """The line magic %mem<method>, running engine.<method>() (see MemoryMagics._lifecycle)."""
    def magic(self, line: str = ""):
        return self._lifecycle(method, line)
    magic.__name__ = magic.__qualname__ = f"mem{method}"
    magic.__doc__ = (f"{what}: engine.{method}().\n\n    %mem{method}\n"
                     "Prints one line and returns the engine's report (a dict), which a cell's last line\n"
                     "shows instead of the line.\n")
    return line_magic(magic)


def _usage(check, *args):
    """`check(*args)` (a _magicline check), its InvalidArgument shown as a UsageError: a message, no traceback."""
    try:
        return check(*args)
    except InvalidArgument as exc:
        raise UsageError(str(exc)) from None


@magics_class
class MemoryMagics(Magics):
    """Long-term memory magics: %remember, %%store, %recall, %memories, %memstats, %forget."""

    data_dir = Unicode("", help="Data dir ('' = IPY_MEMORY_DATA_DIR, else the platform's data dir).").tag(config=True)
    scope = Enum(SCOPES, "project", help="Scope of new memories; %recall searches it plus project and global."
                 ).tag(config=True)
    project = Unicode("", help="Project name ('' = from the git remote or the working directory).").tag(config=True)
    limit = Int(10, min=1, max=50, help="Default number of %recall hits.").tag(config=True)
    max_tokens = Int(None, allow_none=True, min=1, max=100_000,
                     help="Default token budget of %recall (None = no budget: up to 100,000, the most a search takes; "
                          "the agent tool's own default is 4,000).").tag(config=True)
    display = Enum(("auto", "widget", "html", "text"), "auto", help=(
        "How results show: auto = HTML + Markdown + text (static, survives export); widget = live ipywidgets where "
        "a kernel runs, else html; html = HTML + text; text = plain text only.")).tag(config=True)
    autopandas = Bool(False, help="%memories returns a pandas DataFrame.").tag(config=True)
    dedup_threshold = Float(0.92, min=0.0, max=1.0,
                            help="Similarity above which a new memory counts as a duplicate.").tag(config=True)
    embedder = Unicode("", help="Embedder preset ('' = the store's, else IPY_MEMORY_EMBED_PRESET, else 'hash')."
                       ).tag(config=True)
    locale = Enum(tuple(FRAME), "en", help="Language of the recall block's frame ('en', 'zh').").tag(config=True)
    shadow_builtins = Bool(True, help="%recall is ours (IPython's stays reachable as %rep); False: only %memrecall."
                           ).tag(config=True)

    def __init__(self, shell=None, **kwargs):
        self._engine: MemoryEngine | None = None
        self._engine_key = None
        self._installed = False
        self._table = MagicTable(getattr(shell, "magics_manager", None))   # the magics we put in, what they replaced
        self._display = None       # _formatters.ShellDisplay: the formatters honouring `display`
        self._cell = None          # ExecutionInfo of the running cell (pre_run_cell .. post_run_cell)
        self._said = Said()        # the line shown for the last RememberResult a magic returned
        super().__init__(shell=shell, **kwargs)   # loads config, which fires the observers below

    def _load_config(self, cfg, section_names=None, traits=None) -> None:
        """Load the settings, leaving out (with a warning) each value its trait rejects: IPython keeps a bad
        `%config MemoryMagics.limit = 0` in the shell's config, and it must not make every later %load_ext fail."""
        traits = traits if traits is not None else self.traits(config=True)
        rejected = rejected_settings(self, self._find_my_config(cfg), traits, self._accepts)
        super()._load_config(without_settings(cfg, self.section_names(), rejected), section_names, traits)

    def _accepts(self, trait, value) -> bool:
        if isinstance(value, LazyConfigValue):    # a container's update: traitlets applies it
            return True
        try:
            value = trait._validate(self, value.get_value(trait) if isinstance(value, DeferredConfig) else value)
        except (TraitError, ValueError):          # (ValueError: a command-line string that does not parse)
            return False
        # what the traits let through: Int takes True, Float(min, max) takes NaN
        return not (isinstance(trait, Int) and isinstance(value, bool) or isinstance(value, float) and value != value)

    # ------------------------------------------------------------------------------ engine
    @property
    def engine(self) -> MemoryEngine:
        """The kernel's MemoryEngine, opened on first use and reopened when its settings change."""
        key = (self.data_dir, self.project, self.embedder, self.dedup_threshold, self.locale)
        if self._engine is not None and (self._engine_key != key or getattr(self._engine, "_closed", False)
                                         or self._engine.read_only and unwritable_store(self.data_dir) is None):
            self.close_engine()   # settings changed, someone closed it, or the store became writable: a fresh one
        if self._engine is None:
            try:
                self._engine = open_engine(MemoryEngine, self)
            except IpyMemoryError as exc:
                raise UsageError(f"cannot open the memory store: {exc}\n{open_hint(exc, self)}") from None
            self._engine_key = key
        return self._engine

    def close_engine(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()

    @observe("data_dir", "project", "embedder", "dedup_threshold", "locale")
    def _engine_settings_changed(self, change) -> None:
        self.close_engine()

    @observe("shadow_builtins")
    def _shadow_changed(self, change) -> None:
        if self._installed:
            self._shadow() if change["new"] else self._unshadow()

    # ------------------------------------------------------------------------------ install / uninstall
    def install(self) -> None:
        """Register the magics, display formatters and cell hooks (what %load_ext does)."""
        mm = self.shell.magics_manager
        mm.registry[type(self).__name__] = self
        names = [("line", "remember"), ("cell", "remember"), ("cell", "store"), ("line", "memrecall"),
                 ("line", "memories"), ("line", "memstats"), ("line", "forget")]
        names += [("line", "mem" + m) for m in LIFECYCLE if callable(getattr(MemoryEngine, m, None))]
        for kind, name in names:
            self._put(kind, name, getattr(self, name))
        if self.shadow_builtins:
            self._shadow()
        self._display = ShellDisplay(self)
        self._display.install(RememberResult, self._said.pretty)
        self.shell.events.register("pre_run_cell", self._pre_run_cell)
        self.shell.events.register("post_run_cell", self._post_run_cell)
        # loaded from inside a cell (`%load_ext ipy_memory` then `%remember ...`): that cell's pre_run_cell
        # has passed, so take its ExecutionInfo from what IPython hands its displayhook while a cell runs
        self._cell = getattr(getattr(self.shell.displayhook, "exec_result", None), "info", None)
        atexit.register(self.close_engine)
        self._installed = True

    def uninstall(self) -> None:
        """Undo install(): restore every magic and formatter we replaced, close the engine."""
        if not self._installed:
            return
        self._installed = False
        self._table.restore_all()
        self._display.uninstall()
        for event, fn in (("pre_run_cell", self._pre_run_cell), ("post_run_cell", self._post_run_cell)):
            if fn in self.shell.events.callbacks[event]:
                self.shell.events.unregister(event, fn)
        mm = self.shell.magics_manager
        if mm.registry.get(type(self).__name__) is self:
            del mm.registry[type(self).__name__]
        if self in self.shell.configurables:
            self.shell.configurables.remove(self)
        atexit.unregister(self.close_engine)
        self.close_engine()

    def _put(self, kind: str, name: str, fn) -> None:
        find = getattr(self.shell.magics_manager, "find", None)   # IPython 9 keeps builtins as lazy
        try:                                                       # placeholders: resolve first (not 8)
            find and find(kind, name)
        except UsageError:
            pass
        self._table.put(kind, name, fn)

    def _shadow(self) -> None:
        original = self.shell.find_line_magic("recall")
        self._put("line", "recall", self.memrecall)
        if original is not None:
            self._put("line", "rep", original)    # %rep is an alias of "recall": point it at IPython's own

    def _unshadow(self) -> None:
        self._table.restore("line", "rep")
        self._table.restore("line", "recall")

    # ------------------------------------------------------------------------------ display
    def _announce(self, result, kind: str, name: str, line: str, **how):
        """Print the magic's line for a RememberResult (or leave it to the displayhook, see announce)."""
        said = self._said(result, ("%%" if kind == "cell" else "%") + name, **how)
        return announce(self.shell, self._cell, result, kind, name, line, said)

    def _pre_run_cell(self, info) -> None:
        self._cell = info

    def _post_run_cell(self, result) -> None:
        self._cell = None

    # ------------------------------------------------------------------------------ helpers
    def _parse(self, func, line: str, typed: str, *, expand_text: bool = True):
        """Leading options go to argparse; the rest of the line is free text, kept verbatim (quotes, $, {}).
        Errors name the magic as `typed`: %%store, not %store (IPython's own)."""
        try:
            opts, rest = split_options(func.parser, line)
            args = func.parser.parse_args(opts)
        except (InvalidArgument, UsageError) as exc:     # argparse's errors are UsageErrors naming no magic
            raise UsageError(f"{typed}: {exc}; see {typed}?") from None
        if getattr(args, "expand", False) and expand_text:
            rest = expand_vars(self.shell, rest)
        return args, rest

    def _call(self, tool: str, arguments: dict, usage: str, metadata: dict | None = None):
        result = tools.call_tool(tool, {k: val for k, val in arguments.items() if val is not None},
                                 engine=self.engine, metadata=metadata)
        if result.is_error:
            raise UsageError(error_text(result.data["error"], result.data.get("type", ""), usage))
        return result.value

    def provenance(self, magic: str, source: str) -> dict:
        """Metadata for memories stored from IPython: where and when they came from."""
        return provenance(self.shell, self._cell, magic, source)

    # ------------------------------------------------------------------------------ magics
    @cell_usage("%%remember [options] [TITLE]    (the note: the cell body)")     # argparse shows %remember only
    @no_var_expand
    @magic_arguments()
    @argument("-s", "--scope", help="session, project (default: MemoryMagics.scope) or global")
    @argument("-p", "--project", help="project name (default: the current project)")
    @argument("-t", "--title", help="title (default: the first heading or line)")
    @argument("--ttl", type=float, help="seconds until it expires (default: the scope's)")
    @argument("--importance", type=float, help="0..1 (default 0.6)")
    @argument("--force", action="store_true", help="store even if a near-duplicate exists")
    @argument("--replace", metavar="ID", help="overwrite memory ID with this text (its scope and expiry kept unless given)")
    @argument("-v", "--expand", action="store_true", help="expand $var and {expr} in the text first")
    @argument("text", nargs="*", help="the text (line form); the cell body in %%%%remember")   # argparse %-formats
    @line_cell_magic
    def remember(self, line: str, cell: str | None = None):
        """Store a note in long-term memory; prints one line and returns the RememberResult.

            %remember The sales table lives in warehouse.sales_2024
            %remember -s global -t "Style" Use ruff, line length 110

            %%remember -t "Data sources"
            # Data
            The sales table lives in warehouse.sales_2024.

        `$var` and `{expr}` are kept literally unless you pass -v/--expand.
        """
        kind, typed = ("line", "%remember") if cell is None else ("cell", "%%remember")
        args, text = self._parse(self.remember, line, typed, expand_text=cell is None)
        if cell is not None:
            args.title = args.title or text or None
            text = expand_vars(self.shell, cell) if args.expand else cell
        if not text.strip():
            raise UsageError("nothing to remember: %remember TEXT, or %%remember with the note in the cell body")
        scope = _usage(write_scope, args.scope) or (None if args.replace else self.scope)     # a replacement keeps its own
        source = f"{typed} {line}" + ("" if cell is None else f"\n{cell}")
        usage = f"{typed} [options] " + ("TEXT" if cell is None else "[TITLE]")
        arguments = dict(content=text, scope=scope, project=args.project, title=args.title, ttl=args.ttl,
                         importance=args.importance, force=args.force or None, replace=args.replace)
        meta = self.provenance("remember", source)
        meta = replacement_metadata(self.engine, args.replace, meta) if args.replace else meta
        result = self._call("memory_remember", arguments, usage, meta)
        return self._announce(result, kind, "remember", line, replaced=args.replace is not None)

    @no_var_expand
    @magic_arguments("%store")     # the usage line reads %%store (IPython prefixes one %)
    @argument("-s", "--scope", help="session, project or global (default: MemoryMagics.scope; a re-run: its own)")
    @argument("-t", "--title", help="title (default: NAME, else the first heading or line)")
    @argument("--ttl", type=float, help="seconds until it expires (default: the scope's, also on a re-run)")
    @argument("--force", action="store_true", help="store even if a near-duplicate exists")
    @argument("-v", "--expand", action="store_true", help="expand $var and {expr} in the body first")
    @argument("name", nargs="?", help="a name: re-running the cell in the same notebook replaces its memory")
    @cell_magic
    def store(self, line: str, cell: str):
        """Store the cell body as a Markdown document in long-term memory (cell magic; %store is IPython's).

            %%store setup-notes
            # Environment
            Use the conda env `ds`; data lives in s3://bucket/raw.

        With NAME, re-running the cell replaces the memory this notebook stored under that name instead of adding
        one: it lives on from now (the scope's TTL, or --ttl), in its own scope unless -s moves it. Options go
        before NAME. Names are per notebook (as the front end reports it: VS Code, Jupyter): the same NAME in
        another notebook stores a memory of its own, and the line printed names the one left alone.
        """
        args, typed = self._parse(self.store, line, "%%store")
        name = store_name(typed) or None      # %%store "my notes" names it my notes
        if name == typed.strip() and (late := misplaced_option(name, self.store.parser._option_string_actions)):
            raise UsageError(f"{late!r} after NAME would be part of the name: put options first, %%store [options] NAME")
        body = expand_vars(self.shell, cell) if args.expand else cell
        if not body.strip():
            raise UsageError("the cell is empty: put the Markdown to store below %%store [NAME]")
        scope = _usage(write_scope, args.scope)
        meta = self.provenance("store", f"%%store {line}\n{cell}")
        replace, kept = named_memory(self.engine, name, meta) if name else (None, None)
        # a re-run re-asserts the note: it lives on from now (ttl=0: the scope's TTL), in its own scope unless -s
        arguments = dict(content=body, scope=scope or (None if replace else self.scope), title=args.title or name,
                         ttl=given(args.ttl, 0 if replace else None), force=args.force or None, replace=replace)
        result = self._call("memory_remember", arguments, "%%store [options] [NAME]", meta)
        return self._announce(result, "cell", "store", line, replaced=replace is not None, kept=kept)

    @no_var_expand
    @magic_arguments()
    @argument("-n", "--limit", type=int, help="number of hits, 1-50 (default: MemoryMagics.limit)")
    @argument("--max-tokens", type=int, help="token budget of the recall block, 1-100000")
    @argument("-s", "--scope", help="'+'-joined session, project, global (default: MemoryMagics.scope plus project+global)")
    @argument("-p", "--project", help="project name (default: the current project)")
    @argument("--path", help="only sections under this heading path, e.g. Setup/Env")
    @argument("--block", action="store_true", help="return the <memory-recall> text for a prompt")
    @argument("-v", "--expand", action="store_true", help="expand $var and {expr} in the query first")
    @argument("query", nargs="*", help="what to look for")
    @line_magic
    def memrecall(self, line: str):
        """Search long-term memory; returns a RecallResult (hits, best first), or with --block its prompt text.

            %recall where does the sales table live
            %recall -n 3 -s global code style
            prompt = %recall --block --max-tokens 500 sales table

        %recall is %memrecall while ipy_memory is loaded; IPython's own %recall is then %rep.
        """
        typed = "%recall" if ("line", "recall") in self._table.ours else "%memrecall"
        args, query = self._parse(self.memrecall, line, typed)
        if not query.strip():
            raise UsageError("what should I look for? %recall QUERY, e.g. %recall sales table")
        scope = _usage(scope_arg, args.scope) or _usage(scope_arg, f"{self.scope}+project+global")
        arguments = dict(query=query, scope=scope, project=args.project, limit=given(args.limit, self.limit),
                         max_tokens=given(given(args.max_tokens, self.max_tokens), NO_BUDGET), path=args.path)
        result = self._call("memory_search", arguments, f"{typed} [options] QUERY")
        return RecallBlock(result.block) if args.block else result

    @magic_arguments()
    @argument("-s", "--scope", help="'+'-joined session, project, global (default: all three)")
    @argument("-p", "--project", help="project name (default: the current project)")
    @argument("-n", "--limit", type=int, default=50, help="page size, 1-200 (default 50)")
    @argument("--offset", type=int, default=0, help="how many to skip")
    @line_magic
    def memories(self, line: str):
        """List stored memories, newest first (a MemoryList; a DataFrame when MemoryMagics.autopandas is on).

            %memories
            %memories -s global -n 20 --offset 20
        """
        args, rest = self._parse(self.memories, without_semicolon(line), "%memories")
        if rest:
            raise UsageError(f"%memories takes options only, not {rest!r}; to search use %recall {rest}")
        arguments = dict(scope=_usage(scope_arg, args.scope), project=args.project, limit=args.limit, offset=args.offset)
        result = self._call("memory_list", arguments, "%memories [options]")
        return result.to_pandas() if self.autopandas else result

    @line_magic
    def memstats(self, line: str = ""):
        """Counts and sizes of the store, with a table per tier and per space.

            %memstats
        """
        _usage(no_arguments, "%memstats", line)
        return self._call("memory_stats", {}, "%memstats")

    @line_magic
    def forget(self, line: str):
        """Delete memories (or single sections) by id, permanently; every id is checked before any is deleted.

            %forget m-0123456789abcdef
            %forget m-0123456789abcdef#2 m-fedcba9876543210
        """
        if not without_semicolon(line).split():
            raise UsageError("which memory? %forget ID (ids are shown by %memories and %recall)")
        try:
            ids = ids_to_forget(self.engine, without_semicolon(line).split())
        except IpyMemoryError as exc:
            raise UsageError(error_text(str(exc), type(exc).__name__, "%forget ID [ID ...]")) from None
        for id_ in ids:
            r = self._call("memory_forget", {"id": id_}, "%forget ID [ID ...]")
            print(f"forgot {id_} ({r.get('removed_nodes', 0)} section{'s' if r.get('removed_nodes') != 1 else ''})")

    def _lifecycle(self, method: str, line: str):
        _usage(no_arguments, f"%mem{method}", line)
        try:
            result = tools.maintenance(method)(self.engine, {}, None)
        except IpyMemoryError as exc:
            raise UsageError(f"{type(exc).__name__}: {exc}") from None
        return announce(self.shell, self._cell, result.value, "line", f"mem{method}", line, result.text)

    memdream = _lifecycle_magic("dream", "Consolidate memory now (drop duplicate sections, link related notes)")
    memrotate = _lifecycle_magic("rotate", "Move memories unused for long one tier colder (hot -> warm -> cold)")
    memcompact = _lifecycle_magic("compact", "Purge expired memories and reclaim space in the database and indexes")


def load_ipython_extension(ip) -> None:
    """%load_ext ipy_memory."""
    if loaded_magics(ip) is None:
        MemoryMagics(shell=ip).install()


def unload_ipython_extension(ip) -> None:
    """%unload_ext ipy_memory: remove everything load added and restore what it shadowed."""
    existing = ip.magics_manager.registry.get("MemoryMagics")
    if existing is not None and hasattr(existing, "uninstall"):
        existing.uninstall()
