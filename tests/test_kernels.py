"""The compiled kernels (`_speedups`) compute what their numpy twins in `_kernels` compute, refuse
arguments they cannot use safely, and are the ones that run (this project's builds have a compiler)."""

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipy_memory import _kernels

compiled = pytest.mark.skipif(not _kernels.COMPILED, reason="IPY_MEMORY_PURE_PYTHON is set")


def test_the_extension_is_built_and_used():
    if os.environ.get("IPY_MEMORY_PURE_PYTHON"):
        assert not _kernels.COMPILED and _kernels.column_scores is _kernels.column_scores_numpy
        return
    assert _kernels.COMPILED, "ipy_memory/_speedups.c was not built: is a C compiler installed? (make test rebuilds it)"
    assert _kernels.column_scores is _kernels._speedups.column_scores


def test_pure_python_switch_turns_the_extension_off():
    code = "from ipy_memory import _kernels; print(_kernels.COMPILED, _kernels.column_scores.__name__)"
    env = {**os.environ, "IPY_MEMORY_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "column_scores_numpy"]


def _case(seed: int, dim: int, n: int, nd: int, offset: int, with_alive: bool):
    rng = np.random.default_rng(seed)
    cols = rng.integers(-127, 128, size=(dim, n + offset + 3), dtype=np.int8)[:, offset:offset + n]
    dims = np.sort(rng.choice(dim, nd, replace=False)).astype(np.int64)
    weights = rng.standard_normal(nd).astype(np.float32)
    scale = rng.uniform(0, 0.01, n).astype(np.float32)
    scale[::13] = 0
    alive = rng.random(n) > 0.2 if with_alive else None
    return cols, dims, weights, scale, alive


@compiled
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), dim=st.integers(1, 40), n=st.integers(0, 5000), nd=st.integers(0, 40),
       offset=st.integers(0, 7), with_alive=st.booleans(), slack=st.floats(0, 10, width=32))
def test_column_scores_match_the_numpy_twin(seed, dim, n, nd, offset, with_alive, slack):
    nd = min(nd, dim)
    cols, dims, weights, scale, alive = _case(seed, dim, n, nd, offset, with_alive)
    got, want = np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32)
    _kernels._speedups.column_scores(cols, dims, weights, scale, alive, slack, got)
    _kernels.column_scores_numpy(cols, dims, weights, scale, alive, slack, want)
    # both sum in float32 in the order of dims; the C loop may fuse a multiply-add (rounding once)
    exact = (weights.astype(np.float64) @ cols[dims].astype(np.float64) + slack) * scale
    tol = 1e-5 * (np.abs(weights).sum() * 127 + slack) * scale + 1e-30
    if alive is not None:
        assert np.all(got[~alive] == -np.inf) and np.all(want[~alive] == -np.inf)
        got, want, exact, tol = got[alive], want[alive], exact[alive], tol[alive]
    assert np.all(np.abs(got - exact) <= tol) and np.all(np.abs(want - exact) <= tol)


@compiled
def test_column_scores_refuse_what_they_cannot_read_safely():
    f = _kernels._speedups.column_scores
    cols = np.zeros((4, 10), np.int8)
    dims, w, scale, out = np.array([0, 3]), np.ones(2, np.float32), np.ones(10, np.float32), np.empty(10, np.float32)
    f(cols, dims, w, scale, None, 0.0, out)                                      # the valid call
    bad = [
        ((cols, np.array([0, 4]), w, scale, None, 0.0, out), IndexError),        # a dimension past the end
        ((cols, np.array([-1, 0]), w, scale, None, 0.0, out), IndexError),
        ((cols.astype(np.int16), dims, w, scale, None, 0.0, out), TypeError),    # int8 columns only
        ((cols, dims.astype(np.int32), w, scale, None, 0.0, out), TypeError),
        ((cols, dims, w[:1], scale, None, 0.0, out), ValueError),                # one weight per dimension
        ((cols, dims, w, scale[:9], None, 0.0, out), ValueError),                # one scale per row
        ((cols, dims, w, scale, np.ones(9, bool), 0.0, out), ValueError),
        ((cols[:, :5], dims, w, scale, None, 0.0, out), ValueError),             # fewer rows than out
        ((np.asfortranarray(cols), dims, w, scale, None, 0.0, out), ValueError),  # rows not contiguous
        ((cols, dims, w, scale, None, 0.0, out.astype(np.float64)), TypeError),
        ((cols, dims, w, scale, None, 0.0, np.empty(20, np.float32)[::2]), ValueError),   # out not contiguous
        ((cols, dims, w, scale, None, "x", out), TypeError),
        ((cols[0], dims, w, scale, None, 0.0, out), TypeError),                  # 1-d columns
    ]
    for args, error in bad:
        with pytest.raises(error):
            f(*args)
    frozen = np.empty(10, np.float32)
    frozen.setflags(write=False)
    with pytest.raises((TypeError, ValueError, BufferError)):
        f(cols, dims, w, scale, None, 0.0, frozen)                               # out must be writable


@compiled
def test_column_scores_release_the_gil():
    """Another thread runs while the kernel does. With a switch interval far longer than the test,
    the main thread never hands the GIL over by itself: the counting thread can only advance while
    the kernel has released it (holding it, the count stays 0)."""
    import threading
    import time
    cols = np.ones((64, 200_000), np.int8)
    dims = np.arange(64, dtype=np.int64)
    w, scale, out = np.ones(64, np.float32), np.ones(200_000, np.float32), np.empty(200_000, np.float32)
    ticks, done, started = [0], threading.Event(), threading.Event()

    def count():
        started.set()
        while not done.is_set():
            ticks[0] += 1
            time.sleep(0)            # hands the GIL back: the main thread is never starved

    interval = sys.getswitchinterval()
    t = threading.Thread(target=count)
    t.start()
    started.wait()
    sys.setswitchinterval(1000)
    try:
        before = ticks[0]
        for _ in range(50):
            _kernels._speedups.column_scores(cols, dims, w, scale, None, 0.0, out)
        advanced = ticks[0] - before
    finally:
        sys.setswitchinterval(interval)
        done.set()
        t.join()
    assert np.all(out == 64) and advanced > 0
