"""Fire-and-forget writes on a background thread (MemoryEngine.fire / fire_exchange / flush).

An agent hook must never wait on an embedder or fail a turn because a write failed, so `fire`
queues the call and returns at once; a single daemon thread writes in batches (one transaction and
one embedding call per batch, like remember_many). Failures are logged on the "ipy_memory"
logger and counted in `background_stats()`, never raised into the caller. The queue is bounded:
when the writer falls behind, `fire` waits up to `fire_put_timeout` seconds and then drops the
item (logged), so a stalled embedder cannot grow memory without limit.

Why a second engine: the in-memory indexes (and the engine's per-call state) are not safe to
mutate from two threads, and a recall on the caller's thread would race the writer's index
updates. So the thread writes through its own MemoryEngine on the same data dir (own SQLite
connection, same embedder object); the caller's engine picks the writes up from the change log on
its next call, exactly as it does for another kernel. The writer only loads a space's index when a
fired memory needs the semantic duplicate check (not for exchanges or force=True).
"""

from __future__ import annotations

import atexit
import copy
import queue
import threading
import time
import weakref

from . import _validate as v
from ._log import log
from .embeddings import Embedder
from .errors import InvalidArgument


_STOP = object()
_BATCH = 64


class _SharedEmbedder(Embedder):
    """The caller's embedder, used by the writer engine, which must not close it."""

    def __init__(self, inner: Embedder):
        self.inner, self.name, self.dim, self.semantic = inner, inner.name, inner.dim, inner.semantic

    def embed(self, texts):
        return self.inner.embed(texts)

    def embed_query(self, text):
        return self.inner.embed_query(text)

    def close(self) -> None:
        pass


class _Writer:
    def __init__(self, engine, maxsize: int):
        # a weak reference: an engine dropped without close() is still collected, and stops us
        self._engine = weakref.ref(engine)
        self.close_timeout = engine.close_timeout
        self.q: queue.Queue = queue.Queue(maxsize)
        self.cond = threading.Condition()
        self.pending = 0
        self.counts = {"submitted": 0, "written": 0, "errors": 0, "dropped": 0}
        self.last_error: str | None = None
        self.closed = False
        self.own = None                     # the writer's MemoryEngine, opened on first use
        self.thread = threading.Thread(target=self._run, name="ipy_memory-writer", daemon=True)
        self.thread.start()
        # daemon threads die at interpreter exit: drain what was fired before that happens
        self._atexit = _drain_at_exit(weakref.ref(self))
        atexit.register(self._atexit)
        weakref.finalize(engine, self._stop_nowait).atexit = False   # at exit, _drain_at_exit runs instead

    @property
    def engine(self):
        engine = self._engine()
        if engine is None:
            raise RuntimeError("the MemoryEngine was garbage-collected before its queued writes ran")
        return engine

    def _own_engine(self):
        """The writer's engine, following the caller's project, session, settings and embedder."""
        main = self.engine
        if self.own is not None and self.own.embedder.name != main.embedder.name:   # re-embedded
            self.own.close()
            self.own = None
        if self.own is None:
            from .engine import MemoryEngine   # import here: engine.py imports this module
            self.own = MemoryEngine(main.data_dir, embedder=_SharedEmbedder(main.embedder), project=main.project,
                                    session=main.session, settings=main.settings, clock=main.clock)
        self.own.project, self.own.session, self.own.settings = main.project, main.session, main.settings
        return self.own

    def _stop_nowait(self) -> None:
        self.closed = True
        try:
            self.q.put_nowait(_STOP)
        except queue.Full:
            pass
        atexit.unregister(self._atexit)

    def put(self, item, timeout: float) -> bool:
        with self.cond:
            if self.closed:          # after stop(): nothing would ever run it
                log.warning("ipy_memory: background writer is stopped; dropped a %s", item[0])
                return False
            self.pending += 1
            self.counts["submitted"] += 1
        try:
            self.q.put(item, timeout=timeout)
            return True
        except queue.Full:
            self._done(1, dropped=1)
            log.warning("ipy_memory: background queue full (%d items); dropped a %s", self.q.maxsize, item[0])
            return False

    def _done(self, n: int, *, written: int = 0, errors: int = 0, dropped: int = 0) -> None:
        with self.cond:
            self.pending -= n
            self.counts["written"] += written
            self.counts["errors"] += errors
            self.counts["dropped"] += dropped
            self.cond.notify_all()

    def _fail(self, what: str, exc: BaseException) -> None:
        self.last_error = f"{what}: {type(exc).__name__}: {exc}"
        # our own errors carry a useful message; anything else deserves its traceback
        if exc.__class__.__module__.startswith("ipy_memory"):
            log.error("ipy_memory: background %s failed: %s", what, exc)
        else:
            log.error("ipy_memory: background %s failed", what, exc_info=exc)

    def _run(self) -> None:
        carry = None
        while True:
            item = carry if carry is not None else self.q.get()
            carry = None
            if item is _STOP:
                break
            batch = [item]
            while item[0] == "remember" and len(batch) < _BATCH:
                try:
                    nxt = self.q.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP or nxt[0] != "remember":
                    carry = nxt
                    break
                batch.append(nxt)
            try:
                self._execute(batch)
            except BaseException as exc:  # noqa: BLE001 - the writer thread must survive anything
                self._fail(batch[0][0], exc)
                self._done(len(batch), errors=len(batch))
        if self.own is not None:
            try:
                self.own.close()
            except Exception as exc:  # noqa: BLE001
                log.warning("ipy_memory: closing the background writer's engine: %s", exc)

    def _one(self, what: str, fn) -> None:
        try:
            fn()
            self._done(1, written=1)
        except Exception as exc:
            self._fail(what, exc)
            self._done(1, errors=1)

    def _execute(self, batch: list) -> None:
        kind, payload = batch[0]
        if kind == "exchange":
            self._one(kind, lambda: self._own_engine().remember_exchange(payload[0], payload[1], **payload[2]))
        elif kind == "call":
            self._one(payload[0], lambda: payload[1](self._own_engine()))
        elif kind != "remember":
            self._one(kind, payload)
        else:
            try:
                self._own_engine().remember_many([kw for _, kw in batch])
                self._done(len(batch), written=len(batch))
                return
            except Exception as exc:
                if len(batch) == 1:
                    self._fail("remember", exc)
                    self._done(1, errors=1)
                    return
            for _, kw in batch:  # one bad item must not cost the others: retry one by one
                self._one("remember", lambda kw=kw: self._own_engine().remember(**kw))

    def wait(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while self.pending > 0:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self.cond.wait(left)
        return True

    def stop(self, timeout: float) -> bool:
        drained = self.wait(timeout)
        with self.cond:
            self.closed = True
        if not drained:
            log.warning("ipy_memory: closing with %d background write(s) still pending; they are lost",
                        self.pending)
        try:
            self.q.put(_STOP, timeout=1.0)
        except queue.Full:
            pass
        self.thread.join(timeout=5.0 if drained else 0.1)
        atexit.unregister(self._atexit)
        return drained


class _drain_at_exit:
    def __init__(self, ref):
        self.ref = ref

    def __call__(self) -> None:
        writer = self.ref()
        if writer is not None and writer.thread.is_alive():
            writer.wait(writer.close_timeout)


class BackgroundMixin:
    """Methods of MemoryEngine for background writes."""

    fire_queue_size: int = 1000        # bounded: see the module docstring
    fire_put_timeout: float = 1.0      # seconds fire() may wait for room before dropping the item
    close_timeout: float = 30.0        # seconds close() waits for pending writes
    _writer: _Writer | None = None
    _writer_lock = threading.Lock()    # class-wide: only guards lazy creation

    def _background(self) -> _Writer:
        with self._writer_lock:
            if self._writer is None:
                self._writer = _Writer(self, self.fire_queue_size)
            return self._writer

    def _submit(self, fn, what: str) -> bool:
        """Run `fn()` on the writer thread after what is already queued.

        `fn` runs beside the caller's thread: it may use SQLite (self.store) but not the indexes."""
        if getattr(self, "_closed", True):
            return False
        return self._background().put((what, fn), self.fire_put_timeout)

    def fire(self, content, **kw) -> bool:
        """Queue `remember(content, **kw)` on the background writer and return at once.

        Never raises: problems (closed or read-only engine, bad arguments, a failing embedder) are
        logged on the "ipy_memory" logger. Returns True if queued. `flush()` waits for the writes,
        after which this engine's next call sees them."""
        try:
            self._check_fire(kw)
            if not isinstance(content, str) or not content.strip():
                raise InvalidArgument("fire(content): content must be a non-empty str")
            kw = copy.deepcopy(kw)       # the caller may mutate its metadata dict after we return
            if kw.get("replace") is None and v.project_scoped(kw.get("scope")):     # (a replacement keeps its memory's project)
                kw.setdefault("project", self.project)   # the project current when fired
        except Exception as exc:
            log.warning("ipy_memory: fire() ignored: %s", exc)
            return False
        return self._background().put(("remember", {"content": content, **kw}), self.fire_put_timeout)

    def fire_exchange(self, session_id, messages, **kw) -> bool:
        """Queue `remember_exchange(session_id, messages, **kw)`; never raises (see fire)."""
        try:
            self._check_fire({})
            if not isinstance(messages, list):
                raise InvalidArgument("fire_exchange(messages): pass a list of {'role', 'content'} dicts")
            messages, kw = copy.deepcopy(messages), copy.deepcopy(kw)
            if v.project_scoped(kw.get("scope")):
                kw.setdefault("project", self.project)
        except Exception as exc:
            log.warning("ipy_memory: fire_exchange() ignored: %s", exc)
            return False
        return self._background().put(("exchange", (session_id, messages, kw)), self.fire_put_timeout)

    def _fire_call(self, fn, what: str) -> bool:
        """Queue `fn(engine)` on the writer thread, `engine` being the writer's own (its indexes are
        not this engine's); False if not queued. `fn` handles its own failures."""
        try:
            self._check_fire({})
        except InvalidArgument as exc:
            log.warning("ipy_memory: %s ignored: %s", what, exc)
            return False
        return self._background().put(("call", (what, fn)), self.fire_put_timeout)

    def _check_fire(self, kw: dict) -> None:
        if getattr(self, "_closed", True):
            raise InvalidArgument("the engine is closed: open a new MemoryEngine")
        if self.read_only:
            raise InvalidArgument("the engine is read-only: open a MemoryEngine without read_only=True")
        import inspect        # here: 4 ms of `import ipy_memory`
        known = set(inspect.signature(self.remember).parameters) - {"content"}
        unknown = set(kw) - known
        if unknown:
            raise InvalidArgument(f"unknown argument(s) {sorted(unknown)}; fire() takes remember()'s: {sorted(known)}")

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every fired write is done (stored or logged as failed). False on timeout."""
        if timeout is not None:
            if not v.is_real(timeout) or timeout != timeout or timeout < 0:
                raise InvalidArgument(f"timeout must be None or seconds >= 0, got {v.shown(timeout)}")
            # (inf, 1e300, 10**400: a lock's wait would overflow) forever; numpy's: a Python float
            timeout = None if timeout >= threading.TIMEOUT_MAX else float(timeout)
        writer = self._writer
        if writer is None:
            return True
        if threading.current_thread() is writer.thread:   # a queued call flushing would wait on itself
            return False
        return writer.wait(timeout)

    def background_stats(self) -> dict:
        """pending, submitted, written, errors, dropped, last_error, running."""
        writer = self._writer
        if writer is None:
            return {"pending": 0, "submitted": 0, "written": 0, "errors": 0, "dropped": 0,
                    "last_error": None, "running": False}
        return {"pending": writer.pending, **writer.counts, "last_error": writer.last_error,
                "running": writer.thread.is_alive()}

    def _close_background(self) -> None:
        """Drain pending background writes before the engine closes."""
        writer = self._writer
        if writer is None or threading.current_thread() is writer.thread:
            return
        writer.stop(self.close_timeout)
