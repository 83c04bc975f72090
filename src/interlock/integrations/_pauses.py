"""What every framework adapter does with the tool calls of its agent, and with the calls its
framework holds for a person.

The gate decides every tool call the agent makes (`Asker.decide`): the adapter asks it
before each call runs, through the framework's own mechanism, so its policies, auto-allow
lists, hooks and the agent's stored policy apply as they are. A call the gate lets
through runs at once; one it refuses reaches the model as a denial; one a person must
decide stops the framework on the call, as the framework's own approvals do. Calls the
framework holds itself (its own marks) and calls deferred to a person (a question) become
requests of the run the same way. Once settled, each request comes back as an outcome the
adapter turns into the framework's own resume values. What is kept between the two is
plain JSON, stored in the run's state beside the framework's own.

An approval is spent once (`Broker.consume`), and the adapter records on the run when a
call it approved has run, with what it returned (or the retry or failure it ended with).
A resume repeated after a worker died finds the approval spent: the call ran (what it
returned, or its retry or failure, is given back; the tool does not run again) or the
worker stopped before reporting it (`Interrupted`: it may or may not have run, it does
not run again, and the run's events say so). So an approved call runs at most once per
approval, and the model never reads an interrupted call as a denial.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import TypeAdapter

from ..agent.calls import ToolCall, canonical_json
from ..agent.gate import ApprovalGate, Policy
from ..broker import Broker
from ..errors import ApprovalDenied, ApprovalRefused, Cancelled, Expired, InvalidRequest
from ..model import Event, Request, Run, Status, Text, derived_key

__all__ = [
    "Answered",
    "Approved",
    "Asker",
    "Declined",
    "Denied",
    "Ended",
    "Held",
    "Interrupted",
    "Outcome",
    "Ran",
    "failed_start",
    "json_output",
    "take_followups",
]

log = logging.getLogger("interlock")

_JSON: TypeAdapter[Any] = TypeAdapter(Any)

CALL_RAN = "ran"
CALL_INTERRUPTED = "interrupted"


@dataclass(frozen=True, slots=True)
class Held:
    """One call the framework holds for a person, or one the gate is asked about.

    `marked` says the framework itself holds it for approval (its own mark on the tool):
    with no policy, auto-allow entry or hook of the gate for the tool, it asks."""

    call_id: str
    tool: str
    arguments: Mapping[str, Any]
    kind: Literal["approval", "question"]
    marked: bool = True
    key: str | None = None
    """The call's identity for the gate and its requests when it is not `call_id` (a model
    that gives a call the id of one it made in an earlier turn)."""

    @property
    def identity(self) -> str:
        return self.key or self.call_id


@dataclass(frozen=True, slots=True)
class Approved:
    """Run the call with `arguments`; `edited` when the approver changed them."""

    arguments: dict[str, Any]
    edited: bool


@dataclass(frozen=True, slots=True)
class Denied:
    """Do not run the call; the model reads `reason` (the person's, verbatim)."""

    reason: str


DENIED_WITHOUT_REASON = "The person denied this call and gave no reason."
"""What the model reads of a denial that came without a reason (an empty one would tell it
nothing, not even that the call was denied)."""


def denied(reason: str) -> Denied:
    """A person's denial: their reason verbatim, or `DENIED_WITHOUT_REASON`."""
    return Denied(reason if reason.strip() else DENIED_WITHOUT_REASON)


@dataclass(frozen=True, slots=True)
class Answered:
    """A question's answer: the call's result."""

    value: Any


@dataclass(frozen=True, slots=True)
class Declined:
    """A question nobody answered (refused, expired, withdrawn): `reason` says why."""

    reason: str


Ended = Literal["returned", "retry", "failed"]
"""How an approved call that ran ended: it returned its output, or it told the model to try
again (`retry`) or that it failed (`failed`), its message then being its output."""


@dataclass(frozen=True, slots=True)
class Ran:
    """The approved call ran already, under an earlier attempt at this resume whose worker
    stopped: `output` is what it returned, as recorded (None when it was too large to
    keep: `kept` is False), or the message it ended with (`ended`). It does not run again;
    the model reads the output, or the message as the same retry or failure."""

    output: Any
    kept: bool = True
    ended: Ended = "returned"

    def text(self, tool: str) -> Any:
        return self.output if self.kept else f"The call to '{tool}' ran; its output was too large to keep."


@dataclass(frozen=True, slots=True)
class Interrupted:
    """The approval was spent by an earlier attempt whose worker stopped before it reported
    the call's outcome: the call may or may not have run. It does not run again; the model
    reads `reason`, which says so (not a denial: the person approved it)."""

    reason: str


Outcome = Approved | Denied | Answered | Declined | Ran | Interrupted


def json_output(value: Any) -> Any:
    """A tool's output as JSON, to record it (its text when it is not JSON)."""
    try:
        return _JSON.dump_python(value, mode="json")
    except Exception:
        return str(value)


def outcome_to_json(outcome: Outcome) -> dict[str, Any]:
    """An outcome as kept in a run's state."""
    if isinstance(outcome, Approved):
        return {"approved": outcome.arguments, "edited": outcome.edited}
    if isinstance(outcome, Denied):
        return {"denied": outcome.reason}
    if isinstance(outcome, Answered):
        return {"answered": outcome.value}
    if isinstance(outcome, Ran):
        return {"ran": outcome.output, "kept": outcome.kept, "ended": outcome.ended}
    if isinstance(outcome, Interrupted):
        return {"interrupted": outcome.reason}
    return {"declined": outcome.reason}


def outcome_from_json(data: Mapping[str, Any]) -> Outcome:
    """An outcome kept in a run's state by `outcome_to_json`."""
    if "approved" in data:
        return Approved(dict(data["approved"]), bool(data.get("edited")))
    if "denied" in data:
        return Denied(str(data["denied"]))
    if "answered" in data:
        return Answered(data["answered"])
    if "ran" in data:
        return Ran(data["ran"], bool(data.get("kept", True)), _ended(data.get("ended")))
    if "interrupted" in data:
        return Interrupted(str(data["interrupted"]))
    return Declined(str(data["declined"]))


async def take_followups(broker: Broker, run: Run) -> list[str]:
    """At a turn boundary: the messages a person sent while the run was busy, oldest first,
    verbatim, taken for delivery (each gets its `followup_replayed` event), for the adapter
    to hand its agent as the next user turn."""
    return [f.text for f in await broker.take_followups(run.id, worker=run.worker)]


async def failed_start(broker: Broker, run: Run, agent: str, exc: Exception) -> Run:
    """`run` failed as its adapter started it: the run keeps the exception's words, and its
    traceback goes to the log, as a worker's resume that fails logs it."""
    log.error("starting run %s of agent %s failed", run.id, agent, exc_info=exc)
    return await broker.fail_run(run.id, f"{type(exc).__name__}: {exc}")


class Asker:
    """Puts the gate in front of an agent's tool calls, turns held calls into requests of a
    run, and settled requests into outcomes.

    `gate` decides every call (`decide`) as it would any other: a tool it has no policy,
    auto-allow entry or hook for runs at once, unless the framework itself marks the tool
    as needing approval (`Held.marked`): then it asks (`always`). The agent's stored
    policy combines with either, the stricter winning. `to` is the person asked (else the
    gate's `to`).
    """

    def __init__(self, broker: Broker, gate: ApprovalGate | None, *, agent: str, to: str | None = None) -> None:
        self.broker = broker
        self.gate = gate if gate is not None else ApprovalGate(broker, to=to)
        self.agent = agent
        self.to = to

    def policy(self, tool: str, *, marked: bool = True) -> Policy | None:
        """The policy the gate decides a call of `tool` under: its own for the tool; for a
        tool the framework marks as needing approval that the gate has no say about,
        `always`; else none (the gate's hook, else the call runs)."""
        declared = self.gate.policy_for(tool)
        if marked and declared is None and self.gate.hook is None:
            return "always"  # the framework says it needs approval; the gate has no say
        return declared

    def tool_call(self, run: Run, held: Held) -> ToolCall:
        return ToolCall(
            held.tool,
            dict(held.arguments),
            held.identity,
            session=run.session,
            agent=self.agent,
            to=self.to or self.gate.to,
            run=run.id,
        )

    async def decide(self, run: Run, held: Held, schema: Mapping[str, Any] | None) -> Outcome | Request:
        """The gate's decision on one call before it runs: `Approved` (it runs now, without a
        person), `Denied` (a hook refused it, or the gate failed closed: the model reads
        why), or the approval request a person must answer first (made once per call: the
        same call decided again finds it). `RunFailed` from the gate stops the run."""
        call = self.tool_call(run, held)
        try:
            begun = await self.gate.begin(call, schema=schema, policy=self.policy(held.tool, marked=held.marked))
        except ApprovalDenied as exc:
            return denied(exc.reason)
        except ApprovalRefused as exc:
            return Denied(str(exc))
        if isinstance(begun, Request):
            return begun
        return Approved(begun, edited=False)

    async def ask(
        self, run: Run, calls: Sequence[Held], schemas: Mapping[str, Mapping[str, Any]]
    ) -> tuple[list[dict[str, Any]], dict[str, Outcome]]:
        """Ask for each held call: the JSON entries to keep in the run's state (with the
        request each waits on), and the outcomes decided without a person."""
        entries: list[dict[str, Any]] = []
        decided: dict[str, Outcome] = {}
        for held in calls:
            if held.kind == "approval":
                outcome = await self.decide(run, held, schemas.get(held.tool))
                if not isinstance(outcome, Request):
                    decided[held.call_id] = outcome
                    continue
                request_id = outcome.id
            else:
                request_id = await self._ask_question(run, held)
            entries.append(self.entry(held, request_id))
        return entries, decided

    @staticmethod
    def entry(held: Held, request_id: str) -> dict[str, Any]:
        """What the run's state keeps of a call waiting on `request_id`."""
        return {
            "call_id": held.call_id,
            "tool": held.tool,
            "arguments": dict(held.arguments),
            "kind": held.kind,
            "marked": held.marked,
            "request": request_id,
            **({"key": held.key} if held.key else {}),
        }

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
            idempotency_key=derived_key(
                "question",
                run.id,
                held.identity,
                spelled=None if ":" in run.id else f"question:run={run.id}:{held.identity}",
            ),
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
            held = held_of(entry)
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
            arguments = await self.gate.finish(call, request_id, schema=schema)
        except ApprovalDenied as exc:
            return denied(exc.reason)
        except ApprovalRefused as exc:
            spent = await self._spent(run, held, request_id)
            return spent if spent is not None else Denied(str(exc))
        except (Expired, Cancelled) as exc:
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
        if request.status is Status.CANCELLED:  # the reason it was withdrawn with, as LangGraph's node reads it
            return Declined(reason or "Nobody answered: the question was cancelled.")
        return Declined("Nobody answered: the question expired.")

    # -- an approval spent by an earlier attempt -------------------------------------------------

    async def ran(
        self, run: Run, call_id: str, tool: str, request_id: str, output: Any, *, ended: Ended = "returned"
    ) -> None:
        """Record on the run that the call `request_id` approved has run, with its output (or,
        when it ended by telling the model to try again or that it failed, with that message
        and how it `ended`), so that a resume repeated after this worker stops gives the
        model the same instead of running the call again. A failure to record is logged: a
        repeat then finds the call interrupted, which is still true."""
        data = {"tool": tool, "tool_call_id": call_id, "approval": request_id, "output": json_output(output)}
        message = f"{tool} ran, as approved (call {call_id})."
        if ended != "returned":
            data["ended"] = ended
            said = "told the model to try again" if ended == "retry" else "failed"
            message = f"{tool} ran, as approved (call {call_id}), and {said}."
        try:
            try:
                await self._note(run, CALL_RAN, message, data)
            except InvalidRequest:  # an output too large to keep with the record
                await self._note(run, CALL_RAN, message, {**data, "output": None, "kept": False})
        except Exception:
            log.warning("could not record that call %s of run %s ran", call_id, run.id, exc_info=True)

    async def _spent(self, run: Run, held: Held, request_id: str) -> Outcome | None:
        """For an approval the gate refused as used already: whether an earlier attempt at
        this run spent it (None if not: the refusal stands), and then what became of the
        call: `Ran` with its recorded output, or `Interrupted` (recorded on the run, once)."""
        consumed = await self._consumed(request_id)
        if consumed is None:
            return None
        record = await self._record_of(run, held.call_id, request_id, after=consumed.id)
        if record is not None and record.get("outcome") == CALL_RAN:
            return Ran(record.get("output"), bool(record.get("kept", True)), _ended(record.get("ended")))
        reason = (
            f"The approved call to '{held.tool}' (call {held.call_id}) was interrupted: the worker "
            "resuming the run stopped after it used the approval and before it reported the call's "
            "outcome, so the call may or may not have run. It was not run again."
        )
        if record is None:
            data = {"tool": held.tool, "tool_call_id": held.call_id, "approval": request_id, "reason": reason}
            await self._note(run, CALL_INTERRUPTED, reason, data)
        return Interrupted(reason)

    async def _consumed(self, request_id: str) -> Event | None:
        """The approval's `consumed` event, if it was used (its request's events, a page at
        a time: a page of a big request's events ends early, cut by its size)."""
        cursor = 0
        while True:
            page = await self.broker.find_events(after=cursor, request=request_id, limit=1000)
            consumed = next((e for e in page if e.type == "consumed"), None)
            if consumed is not None or (len(page) < 1000 and not page.cut):
                return consumed
            cursor = page[-1].id

    async def _note(self, run: Run, outcome: str, message: str, data: Mapping[str, Any]) -> Event:
        """An update on the run (an `informed` event, to the person asked) about an approved call."""
        return await self.broker.inform(
            message,
            to=self.to or self.gate.to,
            session=run.session,
            agent=self.agent,
            run=run.id,
            data={"outcome": outcome, **data},
            by=await self.broker.requester_of(self.agent),
        )

    async def _record_of(self, run: Run, call_id: str, request_id: str, *, after: int) -> Mapping[str, Any] | None:
        """The first record (`ran` or `interrupted`) of the approved call on the run after
        event `after`, made by this agent; None if there is none."""
        requester = await self.broker.requester_of(self.agent)
        cursor = after
        while True:
            page = await self.broker.find_events(after=cursor, limit=500, run=run.id)
            for event in page:
                data = event.data.get("data")
                if (
                    event.type == "informed"
                    and isinstance(data, Mapping)
                    and data.get("outcome") in (CALL_RAN, CALL_INTERRUPTED)
                    and data.get("tool_call_id") == call_id
                    and data.get("approval") == request_id
                    and _made_by(event, requester, self.agent)
                ):
                    return data
            if len(page) < 500 and not page.cut:
                return None
            cursor = page[-1].id


def _ended(value: Any) -> Ended:
    """How a recorded call ended; a record without it (or from before it was kept) returned."""
    return value if value in ("retry", "failed") else "returned"


def _made_by(event: Event, requester: str | None, agent: str) -> bool:
    """Whether an update was made by this agent's principal; one recorded without a maker
    was made by an admin (a server's operator, or one without auth), who may do anything."""
    by = event.data.get("by")
    return by == requester if by is not None else event.data.get("agent") == agent


def held_of(entry: Mapping[str, Any]) -> Held:
    """The held call an entry of the run's state (`Asker.entry`) keeps."""
    return Held(
        str(entry["call_id"]),
        str(entry["tool"]),
        dict(entry["arguments"]),
        entry["kind"],
        bool(entry.get("marked", True)),
        str(entry["key"]) if entry.get("key") else None,
    )
