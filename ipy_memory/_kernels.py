"""The hottest loops, compiled where the optional `_speedups` extension was built, numpy otherwise.

Each kernel has a numpy twin here that computes the same thing; the C one (ipy_memory/_speedups.c)
avoids the temporaries numpy needs and runs with the GIL released. Set IPY_MEMORY_PURE_PYTHON=1
(before importing ipy_memory) to run the numpy twins everywhere; `COMPILED` says which ones run,
and `python -m ipy_memory selftest` reports it.
"""

from __future__ import annotations

import os

import numpy as np

try:
    from . import _speedups
except ImportError:                  # not built (no C compiler at install time): numpy runs instead
    _speedups = None

if os.environ.get("IPY_MEMORY_PURE_PYTHON", "").strip().lower() in ("1", "true", "yes", "on"):
    _speedups = None

COMPILED = _speedups is not None


def column_scores_numpy(cols: np.ndarray, dims: np.ndarray, weights: np.ndarray, scale: np.ndarray,
                        alive: np.ndarray | None, slack: float, out: np.ndarray) -> None:
    """out[j] = scale[j] * (sum_i weights[i] * cols[dims[i], j] + slack) (float32, summed in the
    order of dims), -inf where `alive` is False; n = len(out) rows of the (dim, >= n) int8 `cols`."""
    n = len(out)
    np.einsum("i,ij->j", weights, cols[dims, :n], out=out, casting="unsafe")
    out += np.float32(slack)
    out *= scale
    if alive is not None:
        out[~alive] = -np.inf


column_scores = _speedups.column_scores if COMPILED else column_scores_numpy
