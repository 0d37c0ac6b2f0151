"""Turning remember() / remember_exchange() arguments into validated documents and sections."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from . import _validate as v
from ._markdown import default_title, parse
from ._text import content_hash, exchange_content, question_marks, squeeze_spaces
from .config import Settings
from .errors import InvalidArgument
from .redact import redact

_REMEMBER_KEYS = {"content", "title", "scope", "project", "importance", "ttl", "force", "replace", "metadata"}


@dataclass
class PreparedNode:
    ord: int
    parent_ord: int | None
    depth: int
    path: str
    title: str
    body: str
    stored_body: str | None       # None: the body is the whole document content
    metadata_json: str | None
    hash: str


@dataclass
class Prepared:
    content: str
    title: str
    scope: str | None          # None (and importance, metadata): a replacement keeps the memory's
    project: str | None
    importance: float | None
    ttl: float | None
    force: bool
    replace: str | None
    metadata: dict | None
    kind: str
    nodes: list[PreparedNode]
    hash: str
    space: str = ""
    redactions: int = 0
    vectors: np.ndarray | None = field(default=None, repr=False)
    metadata_json: str | None = None   # `metadata` encoded as stored, when validation's encoding still holds
    keep_expiry: bool = False          # a replacement without ttl=: its memory's expiry stays (_writer)
    session: str | None = None         # a replacement of a session memory: that session (_writer)

    def embedding_texts(self, context_chars: int) -> list[str]:
        if context_chars <= 0:     # (embedding_text without context, inline: a bulk insert's every memory)
            return [f"{n.path}\n{n.body}" if n.path else (n.body or n.title) for n in self.nodes]
        return embedding_texts([(n.path, n.body, n.title) for n in self.nodes], context_chars)

    def project_name(self, default: str) -> str | None:
        return (self.project or default) if self.scope == "project" else None


def embedding_texts(nodes: list[tuple[str, str, str]], context_chars: int) -> list[str]:
    """The text embedded for each node of one document, given (path, body, title) in section order."""
    bodies = [b for _, b, _ in nodes]
    return [embedding_text(p, b, t, bodies[i - 1] if i else None, bodies[i + 1] if i + 1 < len(nodes) else None,
                           context_chars) for i, (p, b, t) in enumerate(nodes)]


def embedding_text(path: str, body: str | None, title: str, prev_body: str | None, next_body: str | None,
                   context_chars: int) -> str:
    """The text embedded for one node: its heading path and body, then its neighbours' text.

    With ``context_chars`` > 0 (real models, see ``Settings.embed_context_chars``), a section of a
    multi-section document is followed by up to that many characters of the previous and the next
    section's body: a reply is embedded with the question it answers, a section with what surrounds
    it (the lexical index gives its neighbours' terms to a node in the same way). Its own text comes
    first, so a model's token limit cuts the context, never the node.
    """
    own = f"{path}\n{body}" if path else (body or title)
    if context_chars <= 0:
        return own
    near = [b[:context_chars] for b in (prev_body, next_body) if b and b.strip()]
    return "\n".join([own, *near])


class _Redactor:
    """Redacts every user-supplied string of one memory (text, title, names, metadata) and counts."""

    def __init__(self, on: bool):
        self.on, self.count = on, 0

    def text(self, value):
        if not self.on or not isinstance(value, str):
            return value
        value, n = redact(value)
        self.count += n
        return value

    def meta(self, value):
        if not self.on:
            return value
        if isinstance(value, dict):
            return {self.text(k): self.meta(x) for k, x in value.items()}
        if isinstance(value, list):
            return [self.meta(x) for x in value]
        return self.text(value)


def _common(scope, project, importance, ttl, metadata):
    scope = v.scope(scope) if scope is not None else None    # (None: a replacement's, checked by _writer)
    project = v.name(project, "project") if project is not None else None
    if scope is not None:
        v.scoped_names((scope,), project)
    return (scope, project, v.number(importance, "importance", 0.0, 1.0) if importance is not None else None,
            v.ttl(ttl), *v.encoded_metadata(metadata))


def prepare(item: dict, settings: Settings) -> Prepared:
    if not _REMEMBER_KEYS.issuperset(item):
        unknown = set(item) - _REMEMBER_KEYS
        raise InvalidArgument(f"unknown argument(s) {sorted(unknown)}; remember() takes {sorted(_REMEMBER_KEYS)}")
    if "content" not in item:
        raise InvalidArgument("missing 'content': the text to remember")
    content = v.text(item["content"], "content", max_chars=settings.max_content_chars)
    title = v.optional_text(item.get("title"), "title")
    replace, scope, importance = item.get("replace"), item.get("scope"), item.get("importance")
    if replace is None:     # None, or absent, is "not given": a new memory's default, a replaced one's own value
        scope = "project" if scope is None else scope
        importance = 0.6 if importance is None else importance
    scope, project, importance, ttl, metadata, meta_json = _common(scope, item.get("project"), importance,
                                                                   item.get("ttl"), item.get("metadata"))
    redactions = 0
    if settings.redact == "all":
        r = _Redactor(True)
        content, title = r.text(content), r.text(title)
        before = r.count
        metadata = r.meta(metadata)
        if r.count != before:
            meta_json = None         # redacted: the writer encodes what is left
        redactions = r.count
    force = v.flag(item.get("force", False), "force")
    if replace is not None:
        doc_id, ord_ = v.memory_id(replace)
        if ord_ is not None:
            raise InvalidArgument(f"replace takes a memory id like 'm-0123456789abcdef', not a section id ({replace!r})")
        replace = doc_id
    sections = parse(content)
    doc_hash = content_hash(content)
    nodes = []
    for i, sec in enumerate(sections):
        single = len(sections) == 1 and sec.body == content
        # (normalising drops the empty title's newline: a single section's hash is the document's)
        nodes.append(PreparedNode(ord=i, parent_ord=sec.parent if sec.parent >= 0 else None, depth=sec.level,
                                  path=sec.path, title=sec.title or (title or "") if i == 0 else sec.title,
                                  body=sec.body, stored_body=None if single else sec.body, metadata_json=None,
                                  hash=doc_hash if single and not sec.title else content_hash(sec.title + "\n" + sec.body)))
    return Prepared(content=content, title=title or default_title(content, sections), scope=scope, project=project,
                    importance=importance, ttl=ttl, force=force, replace=replace, metadata=metadata, kind="note",
                    nodes=nodes, hash=doc_hash, redactions=redactions, metadata_json=meta_json,
                    keep_expiry=replace is not None and item.get("ttl") is None)


def _message_text(msg: dict, i: int) -> str:
    content = msg.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI / Anthropic content parts: keep the text ones
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text"):
                text = part.get("text")
                if text is not None and not isinstance(text, str):
                    raise InvalidArgument(f"message {i}: a text part's 'text' must be a str, "
                                          f"not {type(text).__name__}")
                parts.append(text or "")
            elif not isinstance(part, dict):
                raise InvalidArgument(f"message {i}: content parts must be str or dicts, not {type(part).__name__}")
        return "\n".join(parts)
    if content is None:
        return ""
    raise InvalidArgument(f"message {i}: content must be a str or a list of content parts")


# Acknowledgements an exchange leaves out (ending "." or "!", or the full-width "。" or "！"), unless they
# reply to a question: then "No." is the answer
_TRIVIAL = {"ok", "okay", "thanks", "thank you", "yes", "no", "sure", "k", "继续", "好的", "好", "谢谢", "嗯"}


def prepare_exchange(session_id, messages, *, scope, project, importance, ttl, metadata, settings: Settings,
                     after_question=False) -> Prepared:
    session_id = v.text(session_id, "session_id", max_chars=256)
    after_question = v.flag(after_question, "after_question")
    if not isinstance(messages, list):
        raise InvalidArgument("messages must be a list of {'role': ..., 'content': ...} dicts")
    scope, project, importance, ttl, metadata, _ = _common("project" if scope is None else scope, project,
                                                           0.6 if importance is None else importance, ttl, metadata)
    r = _Redactor(settings.redact in ("exchanges", "all"))   # chats are where keys get pasted
    session_id, metadata = r.text(session_id), r.meta(metadata)
    nodes, turns, asked = [], [], after_question
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or "role" not in msg:
            raise InvalidArgument(f"message {i} must be a dict with 'role' and 'content'")
        text = r.text(_message_text(msg, i).strip())
        if not text:
            continue
        trivial, asked = not asked and text.lower().strip(" .!。！") in _TRIVIAL, bool(question_marks(text))
        if trivial:
            continue
        v.text(text, f"message {i} content", max_chars=settings.max_content_chars)
        speaker = r.text(v.optional_text(msg.get("name"), f"message {i} name", max_chars=200)
                         or v.text(msg["role"], f"message {i} role", max_chars=200))
        node_meta = r.meta(v.metadata(msg.get("metadata")))
        # (spaces squeezed, as a heading's: recall(path=) finds the path however it is spaced)
        nodes.append(PreparedNode(ord=len(nodes), parent_ord=None, depth=0, path=squeeze_spaces(f"{session_id}/{speaker}"),
                                  title=speaker, body=text, stored_body=text,
                                  metadata_json=json.dumps(node_meta, ensure_ascii=False) if node_meta else None,
                                  hash=content_hash(speaker + "\n" + text)))
        turns.append((speaker, text))
    if not nodes:
        raise InvalidArgument("the exchange has no non-trivial text messages to remember")
    content, digest = exchange_content(session_id, turns)
    if len(content) > settings.max_content_chars:
        raise InvalidArgument(f"the exchange has {len(content):,} characters; the limit is {settings.max_content_chars:,}")
    return Prepared(content=content, title=session_id, scope=scope, project=project, importance=importance, ttl=ttl,
                    force=True, replace=None, metadata=metadata, kind="exchange", nodes=nodes,
                    hash=digest, redactions=r.count)
