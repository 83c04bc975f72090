"""What marks an approval request as the approval gate's own, and the namespace reserved for it.

The gate (`interlock.agent.gate.ApprovalGate`) marks each approval request it makes with
`context["kind"] = GATE_MARK`. Values of `context["kind"]` in the `interlock.` namespace are
reserved: `Broker.create` and `Broker.prepare` refuse them, and so does every surface built
on them (`POST /api/v1/requests`, a human-input tool passing a model's `context_data` on).
A marked request is made only by the gate itself (`mark` on a prepared request) or through
`POST /api/v1/approvals`, where the server sets the mark and records the caller as the
requester. The mark alone is never trusted: the gate also checks who made the request, to
whom it went and who answered it (docs/explanation/security.md, "Approvals").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from .errors import InvalidRequest
from .model import Request, decision_ask

__all__ = [
    "GATE_MARK",
    "RESERVED_PREFIX",
    "check_context",
    "decision_ask",
    "is_marked",
    "mark",
    "not_the_approver",
    "refused_yes",
    "reserved_field",
    "unmarked",
    "yes_refused",
]

GATE_MARK = "interlock.approval"
"""`context["kind"]` of the approval requests the gate makes."""

RESERVED_PREFIX = "interlock."
"""Values of `context["kind"]` starting with this are interlock's own."""


def reserved_field(context: Any) -> str | None:
    """The field of `context` that uses the reserved namespace (`context.kind`), or None."""
    if context is not None and isinstance(context, Mapping):
        kind = context.get("kind")
        if isinstance(kind, str) and kind.startswith(RESERVED_PREFIX):
            return "context.kind"
    return None


def check_context(context: Any) -> None:
    """Raise `InvalidRequest`, naming the field, if `context` uses the reserved namespace."""
    if reserved_field(context) is not None:
        raise InvalidRequest(
            f"context.kind: {context['kind']!r} is reserved for interlock's own requests "
            f"(values starting with {RESERVED_PREFIX!r}); use another kind"
        )


def is_marked(request: Request) -> bool:
    """Whether `request` carries the gate's mark (which says nothing yet of who made it)."""
    context = request.context
    return request.kind == "approval" and isinstance(context, Mapping) and context.get("kind") == GATE_MARK


def mark(request: Request) -> Request:
    """`request` (a prepared approval whose context is an object) with the gate's mark."""
    if request.kind != "approval" or not isinstance(request.context, Mapping):
        raise InvalidRequest("only an approval whose context is an object can be a gate approval")
    return replace(request, context={"kind": GATE_MARK, **request.context})


def unmarked(context: Any) -> dict[str, Any]:
    """A gate approval's context without its mark, for a surface that sets the mark itself.

    The context must be an object whose `kind`, if any, is the mark.
    """
    if not isinstance(context, Mapping):
        raise InvalidRequest("context: a gate approval's context must be an object")
    rest = dict(context)
    if rest.pop("kind", GATE_MARK) != GATE_MARK:
        raise InvalidRequest(f"context.kind: a gate approval's kind is {GATE_MARK!r}, set by the server")
    return rest


class _Teams(Protocol):
    """What `not_the_approver` reads of a broker: a team's members (None: no such team)."""

    async def team_members(self, team: str) -> Sequence[str] | None: ...


def yes_refused(request: Request, who: str, by: str | None) -> str:
    """Why a yes to `request` answered as `by` is refused, `who` being whom its gate takes
    it from (`not_the_approver`), for the surface to end with how to answer as them."""
    answering = "names nobody" if by is None else f"answers as {by}"
    return (
        f"request {request.id} is an approval for {request.to}: the agent's approval gate takes a yes only from "
        f"{who}, and this one {answering}"
    )


async def refused_yes(broker: _Teams, request: Request, by: str | None) -> tuple[str, str] | None:
    """Why a yes to `request` answered as `by` is refused (`yes_refused`) and the name to
    answer as instead, when its gate would not take it (`not_the_approver`); else None."""
    refused = await not_the_approver(broker, request, by)
    if refused is None:
        return None
    who, example = refused
    return yes_refused(request, who, by), example


async def not_the_approver(broker: _Teams, request: Request, by: str | None) -> tuple[str, str] | None:
    """Whether a yes to `request` answered as `by` is one the agent's approval gate would
    not take (it counts a gate's approval only as its approver's answer, any member's for a
    team): None when it would take it, or `request` is no gate approval addressed to
    someone; else who it takes it from ("alice", "a member of the team ops") and the name
    to answer as ("alice", "MEMBER"). Surfaces refuse such a yes before it is recorded
    (`answer`, `watch` and the web inbox); the broker refuses only a yes naming nobody, as
    it cannot tell a contract the gate answers through (`auto_resolve`, a terminal) from
    anyone else."""
    to = request.to
    if to is None or by == to or not is_marked(request):
        return None
    members = await broker.team_members(to)
    if members is None:
        return to, to
    return None if by in members else (f"a member of the team {to}", "MEMBER")
