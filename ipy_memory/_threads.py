"""Background threads without `concurrent.futures`, whose import (it imports logging) took ~4-8 ms
of a new process's first recall here.

`Worker` runs submitted calls in order on one daemon thread, started at its first submit and again
in a forked child (which has no such thread; what the parent had queued is not run there).
`Pieces` shares n pieces of work among whichever threads come for them.
"""

from __future__ import annotations

import os
import queue
import threading
from typing import Any, Callable


class Task:
    """One submitted call. `result()` waits for it, then returns its value or raises its exception."""

    __slots__ = ("_call", "_done", "_value", "_error")

    def __init__(self, call: Callable[[], Any]):
        self._call, self._done = call, threading.Event()
        self._value = self._error = None

    def run(self) -> None:
        try:
            self._value = self._call()
        except BaseException as exc:  # noqa: BLE001  (handed to whoever waits for the result)
            self._error = exc
        finally:
            self._call = None
            self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def result(self) -> Any:
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value

    def finish(self) -> None:
        """Wait until the call has ended, an interrupt included (raised once it has): for a call that
        shares something, a connection in a transaction, with the waiting thread's next step."""
        interrupted = None
        while not self._done.is_set():
            try:
                self._done.wait()
            except BaseException as exc:  # noqa: BLE001  (raised below, once the call is over)
                interrupted = exc
        if interrupted is not None:
            raise interrupted


class Worker:
    """A one-thread executor: `submit(fn, *args, **kwargs)` queues a call and returns its `Task`."""

    def __init__(self, name: str):
        self.name = name
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()

    def submit(self, fn: Callable, /, *args, **kwargs) -> Task:
        task = Task(lambda: fn(*args, **kwargs))
        self._queue.put(task)
        if self._thread is None:
            with self._start:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, args=(self._queue,), name=self.name,
                                                    daemon=True)
                    self._thread.start()
        return task

    def hand_off(self, fn: Callable, /, *args) -> Task:
        """submit(fn, *args), then wait (without the GIL) until this thread has begun the call: it
        takes the GIL now, where a thread that wakes while the caller runs Python waits for the
        caller's next switch interval (5 ms) to begin."""
        begun = threading.Event()

        def call():
            begun.set()
            return fn(*args)
        task = self.submit(call)
        begun.wait()
        return task

    @property
    def started(self) -> bool:
        return self._thread is not None

    @staticmethod
    def _run(tasks: queue.SimpleQueue) -> None:
        while True:
            tasks.get().run()


class Pieces:
    """n pieces of work, each done once by whichever thread takes it: `_take()` the next free one,
    `_claim(k)` a chosen one (never waits), `_finish_one()` when it is done, `wait()` until all are."""

    def __init__(self, n: int):
        self._taken = bytearray(n)
        self._next = 0                               # no piece before it is free
        self._left = n
        self._lock, self._done = threading.Lock(), threading.Event()
        if not n:
            self._done.set()

    def _take(self) -> int | None:
        with self._lock:
            while self._next < len(self._taken) and self._taken[self._next]:
                self._next += 1
            if self._next == len(self._taken):
                return None
            self._taken[self._next] = 1
            return self._next

    def _claim(self, k: int) -> bool:
        """Take piece k if it is free and the lock is not held elsewhere (then leave it to others)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            free = not self._taken[k]
            self._taken[k] = 1
        finally:
            self._lock.release()
        return free

    def _finish_one(self) -> None:
        with self._lock:
            self._left -= 1
            if not self._left:
                self._done.set()

    def wait(self) -> None:
        self._done.wait()

    def done(self) -> bool:
        return self._done.is_set()


# the exact vector scans of a recall and the background CRC checks of snapshots (_npz): on one
# thread, they page the same snapshot in once between them (two threads fault the same pages in turn)
SCANS = Worker("ipy_memory-scan")
