"""What every framework adapter does with the calls its framework holds for a person.

A framework stops on calls that need approval (its own marks) and on calls deferred to a
person (a question). Here each becomes an interlock request of the run, through the
approval gate for approvals (its policies, hooks, digests and consumed-once rule apply as
they are), and back again, once settled, as an outcome the adapter turns into the
framework's own resume values. What is kept between the two is plain JSON, stored in the
run's state beside the framework's own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..agent.calls import ToolCall, canonical_json
from ..agent.gate import ApprovalGate, Policy
from ..broker import Broker
from ..errors import ApprovalDenied, ApprovalRefused, Cancelled, Expired
from ..model import Request, Run, Status, Text

__all__ = ["Answered", "Approved", "Asker", "Declined", "Denied", "Held", "Outcome", "take_followups"]


@dataclass(frozen=True, slots=True)
class Held:
    """One call the framework holds for a person."""

    call_id: str
    tool: str
    arguments: Mapping[str, Any]
    kind: Literal["approval", "question"]


@dataclass(frozen=True, slots=True)
class Approved:
    """Run the call with `arguments`; `edited` when the approver changed them."""

    arguments: dict[str, Any]
    edited: bool


@dataclass(frozen=True, slots=True)
class Denied:
    """Do not run the call; the model reads `reason` (the person's, verbatim)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Answered:
    """A question's answer: the call's result."""

    value: Any


@dataclass(frozen=True, slots=True)
class Declined:
    """A question nobody answered (refused, expired, withdrawn): `reason` says why."""

    reason: str


Outcome = Approved | Denied | Answered | Declined


async def take_followups(broker: Broker, run: Run) -> list[str]:
    """At a turn boundary: the messages a person sent while the run was busy, oldest first,
    verbatim, taken for delivery (each gets its `followup_replayed` event), for the adapter
    to hand its agent as the next user turn."""
    return [f.text for f in await broker.take_followups(run.id, worker=run.worker)]


class Asker:
    """Turns held calls into requests of a run, and settled requests into outcomes.

    `gate` decides the approvals: a call the framework marked as needing approval and
    that the gate has no policy for asks (`always`), unless the gate has a hook to
    decide it. `to` is the person asked (else the gate's `to`).
    """

    def __init__(self, broker: Broker, gate: ApprovalGate | None, *, agent: str, to: str | None = None) -> None:
        self.broker = broker
        self.gate = gate if gate is not None else ApprovalGate(broker, to=to)
        self.agent = agent
        self.to = to

    def policy(self, tool: str) -> Policy | None:
        declared = self.gate.policy_for(tool)
        if declared is None and self.gate.hook is None:
            return "always"  # the framework says it needs approval; the gate has no say
        return declared

    def tool_call(self, run: Run, held: Held) -> ToolCall:
        return ToolCall(
            held.tool,
            dict(held.arguments),
            held.call_id,
            session=run.session,
            agent=self.agent,
            to=self.to or self.gate.to,
            run=run.id,
        )

    async def ask(
        self, run: Run, calls: Sequence[Held], schemas: Mapping[str, Mapping[str, Any]]
    ) -> tuple[list[dict[str, Any]], dict[str, Outcome]]:
        """Ask for each held call: the JSON entries to keep in the run's state (with the
        request each waits on), and the outcomes decided without a person."""
        entries: list[dict[str, Any]] = []
        decided: dict[str, Outcome] = {}
        for held in calls:
            entry = {"call_id": held.call_id, "tool": held.tool, "arguments": dict(held.arguments), "kind": held.kind}
            if held.kind == "approval":
                request_id = await self._ask_approval(run, held, schemas.get(held.tool), decided)
            else:
                request_id = await self._ask_question(run, held)
            if request_id is not None:
                entry["request"] = request_id
                entries.append(entry)
        return entries, decided

    async def _ask_approval(
        self, run: Run, held: Held, schema: Mapping[str, Any] | None, decided: dict[str, Outcome]
    ) -> str | None:
        call = self.tool_call(run, held)
        try:
            begun = await self.gate.begin(call, schema=schema, policy=self.policy(held.tool))
        except ApprovalDenied as exc:
            decided[held.call_id] = Denied(exc.reason)
            return None
        except ApprovalRefused as exc:
            decided[held.call_id] = Denied(str(exc))
            return None
        if isinstance(begun, Request):
            return begun.id
        decided[held.call_id] = Approved(begun, edited=False)
        return None

    async def _ask_question(self, run: Run, held: Held) -> str:
        arguments = dict(held.arguments)
        prompt = next(
            (arguments[k] for k in ("question", "prompt", "message") if isinstance(arguments.get(k), str)), None
        )
        request = await self.broker.create(
            Text(prompt or f"{held.tool} needs your answer", id="answer", multiline=True),
            kind="question",
            to=self.to or self.gate.to,
            title=prompt or f"{held.tool}?",
            details="" if prompt else json.dumps(arguments, indent=2, ensure_ascii=False),
            requester=self.agent,
            idempotency_key=f"question:run={run.id}:{held.call_id}",
            run=run.id,
            session=run.session,
            agent=self.agent,
            tool_call_id=held.call_id,
            tool_name=held.tool,
            arguments=arguments,
        )
        return request.id

    async def outcomes(
        self, run: Run, entries: Sequence[Mapping[str, Any]], schemas: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, Outcome]:
        """The outcome of each entry `ask` kept, its request having settled."""
        out: dict[str, Outcome] = {}
        for entry in entries:
            held = Held(str(entry["call_id"]), str(entry["tool"]), dict(entry["arguments"]), entry["kind"])
            request_id = str(entry["request"])
            if held.kind == "approval":
                out[held.call_id] = await self._approval_outcome(run, held, request_id, schemas.get(held.tool))
            else:
                out[held.call_id] = await self._question_outcome(request_id)
        return out

    async def _approval_outcome(
        self, run: Run, held: Held, request_id: str, schema: Mapping[str, Any] | None
    ) -> Outcome:
        call = self.tool_call(run, held)
        try:
            arguments = await self.gate.finish(call, request_id, schema=schema, policy=self.policy(held.tool))
        except ApprovalDenied as exc:
            return Denied(exc.reason)
        except (ApprovalRefused, Expired, Cancelled) as exc:
            return Denied(str(exc))
        edited = canonical_json(arguments) != canonical_json(dict(held.arguments))
        return Approved(arguments, edited)

    async def _question_outcome(self, request_id: str) -> Outcome:
        request = await self.broker.get(request_id)
        if request.status is Status.ANSWERED:
            return Answered(request.answer)
        reason = request.response.reason if request.response is not None else ""
        if request.status is Status.REJECTED:
            return Declined(reason or "The person declined to answer.")
        return Declined(f"Nobody answered: the question {request.status.value}.")
