"""The message shapes AutoRecall reads and writes: OpenAI chat (content a str or parts), the Responses
API (input_text parts) and Anthropic (content blocks); which message is the human's, which is ours."""

from __future__ import annotations

from .errors import InvalidArgument

SOURCE = {"kind": "plugin", "plugin": "ipy_memory", "form": "recall"}
_FRAME_START = "<memory-recall count="


def text_of(content) -> str:
    """The human-readable text of a message's content (str, OpenAI parts or Anthropic blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p if isinstance(p, str) else str(p.get("text", "")) for p in content
                         if isinstance(p, str) or (isinstance(p, dict) and p.get("type") in
                                                   ("text", "input_text", "output_text")))
    return ""


def text_part_type(parts: list) -> str:
    """'input_text' for the Responses API's input parts (it refuses 'text' there), else 'text'."""
    types = {p.get("type") for p in parts if isinstance(p, dict)}
    return "input_text" if "input_text" in types and "text" not in types else "text"


def is_recall_message(msg) -> bool:
    """True for a message AutoRecall inserted (by its tag, or by its <memory-recall> frame)."""
    if not isinstance(msg, dict):
        return False
    src = msg.get("source")
    if isinstance(src, dict) and src.get("plugin") == "ipy_memory":
        return True
    return msg.get("name") == "ipy_memory" or text_of(msg.get("content")).lstrip().startswith(_FRAME_START)


def check_messages(messages) -> list:
    if not isinstance(messages, list):
        raise InvalidArgument("messages must be a list of {'role': ..., 'content': ...} dicts")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):   # items without a role (e.g. tool-call items) pass through untouched
            raise InvalidArgument(f"message {i} must be a dict such as {{'role': 'user', 'content': '...'}}")
    return messages


def is_human(msg: dict) -> bool:
    """A user message typed by the human: not ours, has text, carries no tool results."""
    content = msg.get("content")
    if msg.get("role") != "user" or is_recall_message(msg):
        return False
    if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "tool_result" for p in content):
        return False
    return bool(text_of(content).strip())
