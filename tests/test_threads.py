"""_threads: the one-thread Worker that replaces concurrent.futures."""

import os
import signal
import threading

import pytest

from ipy_memory._threads import Worker


def test_worker_runs_calls_in_order_on_its_own_thread():
    w = Worker("test-worker")
    assert not w.started
    seen = []
    tasks = [w.submit(lambda i=i: seen.append((i, threading.current_thread().name)) or i * i) for i in range(50)]
    assert [t.result() for t in tasks] == [i * i for i in range(50)]
    assert [i for i, _ in seen] == list(range(50))
    assert {name for _, name in seen} == {"test-worker"} and w.started


def test_worker_hands_an_exception_to_the_waiter_and_goes_on():
    w = Worker("test-worker")
    bad = w.submit(lambda: 1 / 0)
    good = w.submit(lambda x, y=0: x + y, 2, y=3)
    with pytest.raises(ZeroDivisionError):
        bad.result()
    assert good.result() == 5 and bad.done()


def test_a_forked_child_starts_its_own_thread():
    w = Worker("test-worker")
    assert w.submit(lambda: 1).result() == 1
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.alarm(10)               # the parent's thread does not exist here: a wait would hang
            code = 0 if w.submit(os.getpid).result() == os.getpid() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
