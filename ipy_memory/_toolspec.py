"""The types of the tool registry (`tools.py`): a parameter, a tool and a tool call's result, each
knowing its JSON schema (OpenAI strict mode or plain) and how a call's arguments are checked.
"""

from __future__ import annotations

import json
import math
import numbers
import reprlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import InvalidArgument

_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool}


@dataclass(frozen=True)
class Param:
    """One argument: JSON type, description, default (None = optional without default) and limits."""
    type: str
    description: str
    default: Any = None
    required: bool = False
    minimum: float | None = None
    maximum: float | None = None
    enum: tuple | None = None
    max_length: int | None = None
    pattern: str | None = None

    def __post_init__(self):
        # (a user's own tool: a type no schema or check knows, or a default that `required` makes
        # unreachable, would be exported as given and fail only when a model calls it)
        if self.type not in _JSON_TYPES:
            raise InvalidArgument(f"Param type must be one of {', '.join(_JSON_TYPES)}, got {self.type!r}")
        if self.required and self.default is not None:
            raise InvalidArgument("a required Param takes no default: a call must give the value")

    def describe(self) -> str:
        text = self.description
        if self.minimum is not None and self.maximum is not None:
            text += f" Range {_number(self.minimum)}–{_number(self.maximum)}."
        if self.max_length is not None:   # (strict mode has no maxLength: the model reads it here)
            text += f" At most {self.max_length:,} characters."
        if self.default is not None:
            text += f" Default {json.dumps(self.default)}."
        return text

    def schema(self, *, strict: bool = False) -> dict:
        s: dict[str, Any] = {"type": self.type if (self.required or not strict) else [self.type, "null"],
                             "description": self.describe() if strict else self.description}
        if self.enum is not None:
            s["enum"] = list(self.enum) + ([None] if strict and not self.required else [])
        if self.minimum is not None:
            s["minimum"] = self.minimum
        if self.maximum is not None:
            s["maximum"] = self.maximum
        if self.pattern is not None:
            s["pattern"] = self.pattern
        if not strict:  # OpenAI strict mode rejects these keywords; they stay in the description
            if self.max_length is not None:
                s["maxLength"] = self.max_length
            if self.type == "string" and self.required:
                s["minLength"] = 1
            if self.default is not None:
                s["default"] = self.default
        return s

    def check(self, name: str, value: Any) -> Any:
        """The value, converted (10.0 -> 10 for integers), or InvalidArgument saying what to pass."""
        py = _JSON_TYPES[self.type]
        ok = isinstance(value, py) and (self.type == "boolean" or not isinstance(value, bool))
        if not ok and self.type in ("integer", "number") and isinstance(value, numbers.Real) \
                and not isinstance(value, bool):         # numpy's numbers, from Python callers: as Python's
            value, ok = (int(value) if isinstance(value, numbers.Integral) else float(value)), True
        if self.type == "integer" and isinstance(value, float) and value.is_integer():
            value = int(value)
        elif self.type == "integer" and isinstance(value, float):
            ok = False
        if not ok:
            raise InvalidArgument(f"{name} must be {'an' if self.type == 'integer' else 'a'} {self.type}"
                                  f"{self._range()}, got {reprlib.repr(value)[:80]}")   # (bounded: any depth, cycles)
        if self.type == "number" and isinstance(value, float) and not math.isfinite(value):   # (an int may pass a float's range)
            raise InvalidArgument(f"{name} must be a finite number{self._range()}, got {value}")
        if self.enum is not None and value not in self.enum:
            raise InvalidArgument(f"{name} must be one of {', '.join(map(str, self.enum))}; got {reprlib.repr(value)}")
        if (self.minimum is not None and value < self.minimum) or (self.maximum is not None and value > self.maximum):
            raise InvalidArgument(f"{name} must be{self._range()}, got {reprlib.repr(value)}")
        if self.type == "string":
            if self.required and not value.strip():
                raise InvalidArgument(f"{name} is empty: pass some text")
            if self.max_length is not None and len(value) > self.max_length:
                raise InvalidArgument(f"{name} has {len(value):,} characters; the limit is {self.max_length:,}")
            # the whole value: with re.search a pattern ending in '$' lets a trailing newline through
            if self.pattern is not None and not re.fullmatch(self.pattern, value):
                form = self.description.split("; ")[0].rstrip(".")      # what it is, not how it is used
                raise InvalidArgument(f"{name} {value[:80]!r} is not in the expected form: {form}.")
        return value

    def _range(self) -> str:
        if self.minimum is not None and self.maximum is not None:
            return f" between {_number(self.minimum)} and {_number(self.maximum)}"
        return ""


def _number(x: float) -> str:
    """A limit as a reader writes it: 3,153,600,000 and 1,000,000,000,000, not 3.1536e+09 and 1e+12."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


@dataclass
class ToolResult:
    """What a tool call produced: `text` for the model, `data` (JSON-able) for code, `value` the engine's object."""
    name: str
    text: str
    data: Any = None
    is_error: bool = False
    value: Any = field(default=None, repr=False, compare=False)

    def to_openai(self, tool_call_id: str) -> dict:
        """A chat-completions message answering one `tool_calls` entry."""
        return {"role": "tool", "tool_call_id": tool_call_id, "content": self.text}

    def to_openai_responses(self, call_id: str) -> dict:
        """A Responses API input item answering one `function_call` output item."""
        return {"type": "function_call_output", "call_id": call_id, "output": self.text}

    def to_anthropic(self, tool_use_id: str) -> dict:
        """A `tool_result` content block (goes in the next user message) answering one `tool_use` block."""
        block = {"type": "tool_result", "tool_use_id": tool_use_id, "content": self.text}
        if self.is_error:
            block["is_error"] = True
        return block

    def to_mcp(self) -> dict:
        """An MCP `CallToolResult`: the text alone. `data` is not sent as `structuredContent`: no tool
        declares an outputSchema, and a search's data holds the hits' raw text, outside the block's
        untrusted-material frame, and again beside the block (a client that wants it has `.data`)."""
        return {"content": [{"type": "text", "text": self.text}], "isError": self.is_error}

    def __str__(self) -> str:
        return self.text


Handler = Callable[[Any, dict, "dict | None"], ToolResult]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    params: dict[str, Param]
    handler: Handler
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    requires: str | None = None   # an optional engine method it calls: the tool is offered where it exists
    calls: str | None = None      # the engine method it calls otherwise (every engine has it)

    def input_schema(self, *, strict: bool = False) -> dict:
        props = {k: p.schema(strict=strict) for k, p in self.params.items()}
        required = list(self.params) if strict else [k for k, p in self.params.items() if p.required]
        return {"type": "object", "properties": props, "required": required, "additionalProperties": False}

    def available(self, engine: Any = None) -> bool:
        if self.requires is None:
            return True
        if engine is None:
            from .engine import MemoryEngine
            engine = MemoryEngine
        return callable(getattr(engine, self.requires, None))

    def validate(self, arguments: dict) -> dict:
        unknown = sorted(map(str, set(arguments) - set(self.params)))     # (a key may be no str)
        if unknown:      # (bounded: a model's 100,000-character key, or 50,000 keys, is not echoed back)
            listed = ", ".join(k if len(k) <= 80 else k[:77] + "..." for k in unknown[:10])
            listed += f" and {len(unknown) - 10:,} more" if len(unknown) > 10 else ""
            raise InvalidArgument(f"unknown argument(s) {listed}; {self.name} takes "
                                  f"{', '.join(self.params) or 'no arguments'}")
        out = {}
        for key, p in self.params.items():
            value = arguments.get(key)
            if value is None:
                if p.required:
                    raise InvalidArgument(f"{key} is required ({p.description})")
                out[key] = p.default
            else:
                out[key] = p.check(key, value)
        return out
