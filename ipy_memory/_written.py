"""A batch's written sections as the indexes take them (BatchWriter.written; Shards.sync, take_own)."""

from __future__ import annotations

import numpy as np


class Written(dict):
    """The sections a batch wrote, {key: (NodeRow, float16 vector)}, for the indexes to take as they
    are (Shards.sync / take_own). A vector of None is the row of a `block`: keys first, first + 1, ...
    had the rows of one matrix, which `vectors` then slices instead of stacking row by row."""

    def __init__(self):
        super().__init__()
        self.blocks: list[tuple[int, np.ndarray]] = []

    def block(self, first: int, half: np.ndarray) -> None:
        self.blocks.append((first, half))

    def vectors(self, keys: list[int]) -> np.ndarray:
        """The vectors of these keys (ascending, each in this dict) as one matrix."""
        if len(self.blocks) == 1 and keys and keys[-1] - keys[0] == len(keys) - 1:
            first, half = self.blocks[0]
            if first <= keys[0] and keys[-1] < first + len(half):
                return half[keys[0] - first:keys[-1] - first + 1]
        return np.stack([self._vector(k) for k in keys])

    def _vector(self, key: int) -> np.ndarray:
        vec = self[key][1]
        if vec is None:
            for first, half in self.blocks:
                if first <= key < first + len(half):
                    return half[key - first]
        return vec
