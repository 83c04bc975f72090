"""The hooks an agent registers, what each one is given and what it may answer.

- `before_tool_use(call)` on a `ToolRunner`: `Allow()` or None goes on, `Deny(reason)`
  refuses the call, `Rewrite(arguments)` runs it with other arguments.
- The approval gate's `hook(call)`: `Allow()` runs the call, `Deny(reason)` refuses it,
  `Pause(reason)` asks a person first.
- `on_tool_call(report)` observers: told of each call once, as a `ToolCallReport`.
- `on_input_required(request)`: the broker's input hook (`interlock.model.InputHook`).

All of them run on the core's hook runner (`interlock.hooks`): by priority, each call
bounded by its timeout, a failure logged with the hook's name.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from ..model import Deny
from .calls import ToolCall, ToolResult

__all__ = [
    "Allow",
    "ApprovalHook",
    "BeforeToolUse",
    "BeforeVerdict",
    "Pause",
    "Rewrite",
    "ToolCallObserver",
    "ToolCallReport",
]


@dataclass(frozen=True, slots=True)
class Allow:
    """A hook's verdict: let the call go on (for the approval hook: run it without asking)."""


@dataclass(frozen=True, slots=True)
class Pause:
    """The approval hook's verdict: a person must approve this call; `reason` is shown to them."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class Rewrite:
    """A `before_tool_use` verdict: run the call with these arguments instead."""

    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCallReport:
    """What `on_tool_call` observers see, once per call.

    `call` carries the arguments the call ran with (after any rewrite or edit); `result`
    is None for a cancelled call and for a run stopped by `RunFailed`.
    """

    call: ToolCall
    status: Literal["completed", "failed", "refused", "cancelled"]
    result: ToolResult | None = None
    detail: str | None = None


BeforeVerdict: TypeAlias = "Allow | Deny | Rewrite | None"
BeforeToolUse: TypeAlias = Callable[[ToolCall], "Awaitable[BeforeVerdict] | BeforeVerdict"]
ToolCallObserver: TypeAlias = Callable[[ToolCallReport], "Awaitable[None] | None"]
ApprovalHook: TypeAlias = Callable[[ToolCall], "Awaitable[Allow | Deny | Pause] | Allow | Deny | Pause"]
