"""The tool-call vocabulary: a call, its result, a tool's definition, and a handler.

Framework-free on purpose: an adapter for an agent framework maps its own two types onto
`ToolCall` and `ToolResult` and gets the rest of `interlock.agent`. `canonical_json` and
`arguments_digest` bind an approval to one call's exact arguments; `current_call` tells a
handler which call it serves.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeAlias

from ..model import Origin, new_id

__all__ = [
    "ToolCall",
    "ToolDefinition",
    "ToolHandler",
    "ToolResult",
    "arguments_digest",
    "canonical_json",
    "current_call",
]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call of a tool by the model, with the context of the turn that made it.

    `id` is the model provider's call id (a fresh one when not given; replay detection
    needs the provider's own). `to` is the person to ask when the call needs one (the
    root conversation's person); `actor` is the participant whose turn raised the call;
    `delegation` lists the agents that delegated down to `agent`, root agent first.
    """

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=new_id)
    session: str | None = None
    channel: str | None = None
    agent: str | None = None
    actor: str | None = None
    to: str | None = None
    run: str | None = None
    delegation: tuple[str, ...] = ()
    channel_type: str | None = None
    """The kind of door the call came through (`text`, `realtime_voice`, ...), as the host names it."""
    server: str | None = None
    """The tool server (a connection) the tool comes from, when the host knows it: the
    approval gate applies the agent's stored policy for that server."""

    def with_arguments(self, arguments: Mapping[str, Any]) -> ToolCall:
        """The same call with other arguments (a rewrite or an approver's edit)."""
        return replace(self, arguments=dict(arguments))

    def origin(self) -> Origin:
        """Where a request made for this call comes from, so a notification knows whom to ask."""
        shared = {name: getattr(self, name) for name in _SHARED_WITH_ORIGIN}
        return Origin(
            **shared,
            tool_call_id=self.id,
            tool_name=self.name,
            arguments=dict(self.arguments),
            delegation=self.delegation or None,
        )


_SHARED_WITH_ORIGIN = tuple(
    name
    for name in Origin.__dataclass_fields__
    if name in ToolCall.__dataclass_fields__ and name not in ("arguments", "delegation")
)
"""The fields a call passes to its request's origin as they are (session, channel, agent,
actor, run, channel_type): those `ToolCall` and `Origin` both have, named alike."""


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What the model reads back for a call.

    `refused`: the call did not run because someone (a hook, a policy, a person) refused
    it, and `content` says why. `denied`: a person reviewing an approval said no; this is
    terminal, `reason` is theirs verbatim. `detail` says what failed, for logs and
    observers only: it is never part of `content`.
    """

    content: str
    is_error: bool = False
    refused: bool = False
    denied: bool = False
    reason: str | None = None
    detail: str | None = None

    @property
    def status(self) -> Literal["completed", "failed", "refused"]:
        """How an `on_tool_call` observer sees this result."""
        if self.refused:
            return "refused"
        return "failed" if self.is_error else "completed"


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """A tool as offered to the model: its name, what it does, and a JSON Schema of its arguments."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def to_dict(self) -> dict[str, Any]:
        """The neutral JSON shape most model APIs take (name, description, parameters)."""
        return {"name": self.name, "description": self.description, "parameters": dict(self.parameters)}


ToolHandler: TypeAlias = Callable[[ToolCall], Awaitable["ToolResult | None"]]
"""Serves the calls it knows and returns None for the others, so handlers compose."""


def canonical_json(value: Any) -> str:
    """The canonical JSON text of `value`: sorted keys, no spaces, no NaN. Raises on non-JSON
    (`ValueError` for a string holding a lone surrogate, which no UTF-8 text can carry)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(f"a string holds a lone surrogate ({text[exc.start]!r}), which is not text") from None
    return text


def arguments_digest(name: str, arguments: Mapping[str, Any]) -> str:
    """The SHA-256 that binds an approval to one tool and its exact canonical arguments."""
    return hashlib.sha256(canonical_json({"tool": name, "arguments": arguments}).encode()).hexdigest()


_current_call: contextvars.ContextVar[ToolCall | None] = contextvars.ContextVar("interlock_tool_call", default=None)


def current_call() -> ToolCall | None:
    """The call a `ToolRunner` is running in this task, or None outside one.

    Handlers and `requires_approval` functions read it to learn the session, agent and
    person of the turn without threading them through every signature.
    """
    return _current_call.get()
