"""The contents a tool result carries for the common outcomes, shared by the runner, the
human-input tools and the gate so the model reads the same words from each; and how logs
name a call."""

from __future__ import annotations

import json
from typing import Any

from .calls import ToolCall, ToolResult


def as_content(value: Any) -> str:
    """A string as is; anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def error_content(message: str) -> str:
    """The content of an error the model may act on: `{"error": message}`."""
    return json.dumps({"error": message}, ensure_ascii=False)


def failure(name: str, detail: str | None) -> ToolResult:
    """The generic failure: the model learns the call failed, never the error's message."""
    return ToolResult(error_content(f"Tool '{name}' failed"), is_error=True, detail=detail)


def refusal(reason: str, *, detail: str | None = None, denied: bool = False) -> ToolResult:
    """A call that did not run because someone refused it; `reason` is the content."""
    return ToolResult(reason, is_error=True, refused=True, denied=denied, reason=reason, detail=detail)


def seconds(timeout: float) -> str:
    """A timeout as the model reads it: `300`, `0.5`."""
    return f"{timeout:g}"


def about_call(call: ToolCall) -> str:
    """How logs name the tool call a hook ran on."""
    return f"tool call {call.id} ({call.name})"
