"""Redaction of likely secrets before text is stored.

On by default for captured exchanges (chat transcripts are where keys get pasted), and for every
memory when ``Settings(redact="all")``. Each match becomes ``[REDACTED:<kind>]``.
"""

from __future__ import annotations

import re

_PATTERNS: list[tuple[str, re.Pattern]] = [
    ("private-key", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S)),
    ("api-key", re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{16,}")),
    ("aws-key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("github-token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b")),
    ("bearer", re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/\-]{16,}=*")),
    ("password", re.compile(r"(?i)\b(password|passwd|pwd|secret|api[_-]?key|token)(\s*[:=]\s*)(['\"]?)[^\s'\"]{4,}\3")),
]


def redact(text: str) -> tuple[str, int]:
    """Return the text with likely secrets replaced, and how many were replaced."""
    total = 0
    for kind, pattern in _PATTERNS:
        if kind == "password":
            text, n = pattern.subn(lambda m: f"{m.group(1)}{m.group(2)}[REDACTED:{kind}]", text)
        else:
            text, n = pattern.subn(f"[REDACTED:{kind}]", text)
        total += n
    return text, total
