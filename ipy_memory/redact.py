"""Redaction of likely secrets before text is stored.

On by default for captured exchanges (chat transcripts are where keys get pasted), and for every
memory when ``Settings(redact="all")``. Each match becomes ``[REDACTED:<kind>]``; ``redact`` is
idempotent (redacting redacted text changes nothing and counts nothing).

Two families of patterns:

* token shapes that are secrets wherever they appear: private-key blocks, OpenAI / Anthropic
  ``sk-…`` keys, Stripe ``sk_live_…``, AWS access key ids, GitHub / Hugging Face / Slack tokens,
  Google API keys, JWTs, bearer and basic ``Authorization`` values, passwords in URLs;
* assignments whose name says "secret": ``password = …``, ``DB_PASSWORD=…``, ``"api_key": "…"``,
  ``client_secret: …``, ``aws_secret_access_key = …``, ``token=…`` (the value is replaced, the
  name kept, so the note still says *which* setting it was).

Names are matched as whole words or ``_``/``-`` separated parts, so ``tokenizer = …`` or
``max_tokens=512`` are left alone.
"""

from __future__ import annotations

import re
from functools import cache

_SECRET_NAME = (r"(?:password|passwd|passphrase|pwd|secret|client[_-]?secret|secret[_-]?key|api[_-]?key|"
                r"apikey|access[_-]?key|secret[_-]?access[_-]?key|private[_-]?key|auth[_-]?token|access[_-]?token|"
                r"refresh[_-]?token|session[_-]?token|token|credentials?)")
_NOT_REDACTED = r"(?!\[REDACTED)"


@cache
def _patterns() -> list[tuple[str, re.Pattern]]:
    """Compiled at their first use (~1.5 ms): writes need them, an import does not."""
    return [
        ("private-key", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
                                   r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)", re.S)),
        ("api-key", re.compile(r"(?<![A-Za-z0-9_-])sk-(?:proj-|ant-(?:api\d\d-)?|svcacct-|admin-)?[A-Za-z0-9_\-]{16,}")),
        ("api-key", re.compile(r"(?<![A-Za-z0-9_])(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}")),
        ("api-key", re.compile(r"(?<![A-Za-z0-9_])AIza[0-9A-Za-z_\-]{35}")),
        ("aws-key", re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}(?![A-Za-z0-9])")),
        ("github-token", re.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})")),
        ("hf-token", re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}")),
        ("slack-token", re.compile(r"(?<![A-Za-z0-9_])xox[abposr]-[A-Za-z0-9-]{10,}")),
        ("jwt", re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
        ("bearer", re.compile(r"(?i)\bbearer\s+" + _NOT_REDACTED + r"[A-Za-z0-9._~+/\-]{16,}=*")),
        ("basic-auth", re.compile(r"(?i)(\bauthorization\s*[:=]\s*[\"']?\s*basic\s+)" + _NOT_REDACTED +
                                  r"[A-Za-z0-9+/]{8,}=*")),
        ("url-password", re.compile(r"(?i)(\b[a-z][a-z0-9+.\-]*://[^\s:/@\"'<>]+:)" + _NOT_REDACTED +
                                    r"[^\s/@\"'<>]+(?=@)")),
        # name = value, name: value, "name": "value", NAME=value (quoted values may contain spaces)
        ("password", re.compile(r"(?i)((?<![A-Za-z0-9])(?:[A-Za-z0-9]+[_-])*" + _SECRET_NAME + r"[\"']?\s*[:=]\s*)"
                                r"(?:([\"'])" + _NOT_REDACTED + r"[^\"'\n]{4,}?\2|" + _NOT_REDACTED +
                                r"(?![\"'/~])[^\s\"',;]{4,})")),      # not a path: PWD=/home/me is a directory
    ]


_KEEP_PREFIX = {"basic-auth", "url-password", "password"}    # the first group (the name, the URL start) stays


def redact(text: str) -> tuple[str, int]:
    """Return the text with likely secrets replaced, and how many were replaced."""
    total = 0
    for kind, pattern in _patterns():
        if kind in _KEEP_PREFIX:
            text, n = pattern.subn(lambda m, k=kind: f"{m.group(1)}[REDACTED:{k}]", text)
        else:
            text, n = pattern.subn(f"[REDACTED:{kind}]", text)
        total += n
    return text, total
