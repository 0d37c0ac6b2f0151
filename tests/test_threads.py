"""_threads: the one-thread Worker and map_threads that replace concurrent.futures."""

import os
import signal
import threading

import pytest

from ipy_memory._threads import Worker, map_threads


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


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_map_threads_keeps_the_order_and_uses_the_threads(threads):
    names = set()

    def square(x):
        names.add(threading.current_thread().name)
        return x * x

    assert map_threads(square, list(range(200)), threads) == [x * x for x in range(200)]
    assert 1 <= len(names) <= threads
    assert threads > 1 or names == {threading.current_thread().name}


def test_map_threads_raises_the_first_error_after_all_threads_stopped():
    def f(x):
        if x == 7:
            raise KeyError(x)
        return x
    before = threading.active_count()
    with pytest.raises(KeyError):
        map_threads(f, list(range(20)), 3)
    assert threading.active_count() == before
