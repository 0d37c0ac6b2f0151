"""Fire-and-forget writes on a background thread (MemoryEngine.fire / flush)."""

from __future__ import annotations


class BackgroundMixin:
    """Methods of MemoryEngine for background writes (filled in by the lifecycle work)."""

    def _close_background(self) -> None:
        """Drain pending background writes before the engine closes."""
