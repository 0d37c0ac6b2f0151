"""Which graph nodes a search of their own vector cannot reach: they are scanned exactly instead.

An HNSW graph can lose nodes in three ways, all seen here: a multi-threaded add strands a few of the
nodes it adds (usearch #735); pruning among near-identical vectors leaves some with no way in; and
adding nodes re-prunes their neighbours' links, which can cut an *older* node's last way in. So a
build checks its new nodes and re-checks older ones: all of them while they are at most `WHOLE`
times the new ones, else as many as it added, the next window of a pass over them (a pass takes
older/new builds). Measured (`benchmarks/graph_build.py`: clustered 384-d vectors added 1,000 at a
time, default settings, 2 cores): older nodes cut off are rare there (at 100k none were left, with or
without the re-check; at 200k 23 against 26-29 without, 0.01%: the windows had not reached them
all), and adding 200k took 0.90x the time of builds that checked only their new nodes at full
width. In `tests/test_corrupt.py`'s small graph it happened in 2 runs of 60 under load; 0 of 150
since.

The check is a search of each node's own vector. A narrow first pass (beam `FIRST_PASS`, top 1)
costs a fifth (60k nodes: 16k against 3.5k self-searches/s, 2 cores) to a half (200k) of a search
at the width recall uses; only the ~0.3% it misses are searched again as recall does (top 10 at the
configured beam), and those the wide search misses too are the unreachable ones.
"""

from __future__ import annotations

import os

import numpy as np

FIRST_PASS = 32      # the narrow pass's beam (usearch's expansion_search)
WHOLE = 4            # older nodes are re-checked whole while at most this many times the new ones


def unreachable(graph, keys: np.ndarray, vecs: np.ndarray) -> np.ndarray:
    """A mask over `keys`: true where a search of the key's own vector does not find it."""
    keys = np.asarray(keys, np.int64)
    if not len(keys):
        return np.zeros(0, bool)
    threads = os.cpu_count() or 1
    wide = graph.expansion_search
    # the engine's lock keeps searches out while a build changes the beam (_locking.py)
    graph.expansion_search = min(FIRST_PASS, wide)
    try:
        top = np.asarray(graph.search(vecs, 1, threads=threads).keys, np.int64).reshape(len(keys), -1)
    finally:
        graph.expansion_search = wide
    missed = top[:, 0] != keys
    again = np.flatnonzero(missed)
    if len(again):
        found = np.asarray(graph.search(vecs[again], 10, threads=threads).keys, np.int64)
        missed[again] = ~(found.reshape(len(again), -1) == keys[again, None]).any(axis=1)
    return missed


def recheck_window(old_rows: int, new_rows: int, sweep: tuple[int, int, int]) -> tuple[np.ndarray, tuple[int, int, int]]:
    """The older rows [0, old_rows) to re-check after adding `new_rows` rows, and the sweep's next state.

    `sweep` is (first row, rows re-checked, rows covered) of the current pass, (0, 0, 0) for none. A
    pass runs over the rows older than its first window, from a row that depends on their count: a
    kernel that builds once a session then re-checks different rows each session (each process starts
    afresh). Rows added meanwhile were checked when added and wait for the next pass (a cursor that
    wrapped at the growing end would never come back to the first rows: the graph grows as fast)."""
    if old_rows <= WHOLE * new_rows:
        return np.arange(old_rows), (0, 0, 0)
    first, done, end = sweep
    if done >= end or end > old_rows:        # no pass, a pass over, or rows renumbered: a new pass
        first, done, end = int(old_rows * 0.6180339887) % old_rows, 0, old_rows
    rows = (first + np.arange(done, min(done + new_rows, end))) % end
    return rows, (first, done + len(rows), end)
