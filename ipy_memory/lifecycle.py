"""Keeping a store healthy over months: consolidation (dream), tiers and rotation, compaction."""

from __future__ import annotations


class LifecycleMixin:
    """Methods of MemoryEngine that maintain the store (filled in by the lifecycle work)."""

    def _on_recall(self, hits) -> None:
        """Called after every recall with the hits returned (access tracking hooks in here)."""
