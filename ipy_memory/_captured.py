"""Which messages of each chat AutoRecall.capture has stored, so that each turn stores only its new ones.

An agent calls ``capture(messages, session_id=...)`` after every turn with the whole, growing
conversation; storing it whole each time kept every earlier message once per later turn (four turns:
twenty sections for eight messages), and recall then returned the same text several times. Messages
are compared by a fingerprint of their role, name and content: what follows the longest prefix
already stored is new (an edited or restarted conversation under the same id shares a shorter prefix),
as is what follows the last message stored when the agent trims older messages from what it sends.
Kept in memory for the most recent sessions: a new process stores a conversation it is handed once more.
"""

from __future__ import annotations

import threading
from collections import OrderedDict


def _fingerprint(message: dict) -> int:
    return hash((message.get("role"), message.get("name"), repr(message.get("content"))))


class Captured:
    def __init__(self, sessions: int = 256):
        self._seen: OrderedDict[str, list[int]] = OrderedDict()
        self._sessions = sessions
        self._lock = threading.Lock()

    def new(self, session_id: str, messages: list[dict]) -> tuple[list[dict], list[int]]:
        """The messages not stored yet, and the fingerprints to `mark` once they are."""
        prints = [_fingerprint(m) for m in messages]
        with self._lock:
            seen = self._seen.get(session_id, [])
        return messages[_stored_lead(seen, prints):], prints

    def mark(self, session_id: str, prints: list[int]) -> None:
        """Record that the messages with these fingerprints are stored."""
        with self._lock:
            self._seen[session_id] = prints
            self._seen.move_to_end(session_id)
            while len(self._seen) > self._sessions:
                self._seen.popitem(last=False)


def _stored_lead(seen: list[int], prints: list[int]) -> int:
    """How many leading messages of `prints` are stored already: the prefix it shares with `seen`, or,
    when the agent sends a window that dropped older messages (the last N, or the first plus the last
    N), the longest lead found in `seen` in order that ends with the last message stored."""
    shared = next((i for i, (a, b) in enumerate(zip(seen, prints)) if a != b), min(len(seen), len(prints)))
    if seen:
        for end in range(len(prints) - 1, shared - 1, -1):
            if prints[end] == seen[-1]:
                rest = iter(seen)
                if all(p in rest for p in prints[:end + 1]):      # (a subsequence of seen)
                    return end + 1
    return shared

