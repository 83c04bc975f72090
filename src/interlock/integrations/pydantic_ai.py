"""pydantic-ai agents whose tool calls go through the approval gate, in runs that park.

`PydanticAIRuns` puts the `ApprovalGate` in front of every tool call the agent makes, with
pydantic-ai's own mechanism: a capability given to each run whose `before_tool_execute`
asks the gate before the tool runs. A call the gate lets through runs at once; one it
refuses (a hook's `Deny`) reaches the model as a denied call (`ToolDenied`, its reason
verbatim); one a person must decide raises `ApprovalRequired`. Calls pydantic-ai holds
itself (tools marked `requires_approval=True`, or that raise `ApprovalRequired`) are put to
the gate the same way when pydantic-ai hands them over (`handle_deferred_tool_calls`),
and ask when the gate has nothing to say about the tool. So the gate's policies, auto-allow
lists, hooks and the agent's stored policy apply to every tool, marked or not.

What a person must decide stops the agent with `DeferredToolRequests`; each such call
becomes a request of an interlock run (approvals through the gate, bound to the exact
arguments; calls deferred with `CallDeferred` as a question to the person), the message
history is stored as the run's state, and the run parks: the process may exit. Once the
person has answered, a worker resumes the run with `DeferredToolResults`: an approval as
`ToolApproved` (with the person's edited arguments as `override_args`), a denial as
`ToolDenied` with the person's reason verbatim, a question's answer as the call's result.
Each approved call that runs is recorded on the run with its output (or, for one that told
the model to try again with `ModelRetry` or that it failed with `ToolFailed`, with that
message); a resume repeated after a worker died gives the model the same output, retry or
failure instead of running the call again, or, if the worker died before reporting, a
failed call (`ToolFailed`) saying it was interrupted and may or may not have run
(`interlock.integrations._pauses`).

Messages a person sends to the run while it is busy (`broker.send_message`) are delivered
at its step boundaries, each verbatim as a user prompt of its own: in the next request to
the model (after a step's tool calls, and with the tool results when a parked run
resumes), and, for one sent while the last model call ran, as the next user turn; so the
run completes only once nothing is held for it.

    runs = PydanticAIRuns(broker, agent, name="deployer", gate=gate)
    run = await runs.start("Deploy 2.3 to prod")          # completed, or parked
    worker = Worker(broker, runs.handlers())              # in any process, later

Tested with pydantic-ai-slim 2.x (`pip install interlock[pydantic-ai]`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, RunContext, ToolApproved, ToolDenied
from pydantic_ai.capabilities import AbstractCapability, ValidatedToolArgs, WrapToolExecuteHandler
from pydantic_ai.exceptions import ApprovalRequired, ModelRetry, ToolFailed, ToolFailedError, ToolRetryError
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse, ToolCallPart, UserPromptPart
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import FunctionToolset

from ..agent.gate import ApprovalGate
from ..broker import Broker
from ..model import Request, Run
from ..runs import Park, ResumeHandler
from ._pauses import (
    Answered,
    Approved,
    Asker,
    Denied,
    Ended,
    Held,
    Interrupted,
    Outcome,
    Ran,
    failed_start,
    outcome_from_json,
    outcome_to_json,
    take_followups,
)

__all__ = ["PydanticAIRuns"]

_JSON: TypeAdapter[Any] = TypeAdapter(Any)
"""Turns an output (text, a model, a dataclass) into the run's JSON result."""


@dataclass(eq=False)
class _Gatekeeper(AbstractCapability[Any]):
    """The gate in front of every tool call of one pass of the agent over run `run`.

    Calls the gate lets through run at once; the others are held (`ApprovalRequired`) and
    handed back by pydantic-ai, to be denied at once or left for a person (`waiting`, by
    call id: the request each waits on). `approved` are the calls a person approved that
    this pass runs (by call id: the approval), recorded on the run once they have run."""

    asker: Asker
    run: Run
    schemas: Mapping[str, Mapping[str, Any]]
    approved: Mapping[str, str] = field(default_factory=dict)
    held: dict[str, Outcome | Request] = field(default_factory=dict)
    waiting: dict[str, tuple[Held, str]] = field(default_factory=dict)

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    async def before_tool_execute(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: ValidatedToolArgs
    ) -> ValidatedToolArgs:
        if ctx.tool_call_approved:  # decided already: by a person through the gate, or below
            return args
        held = Held(
            call.tool_call_id,
            call.tool_name,
            call.args_as_dict(),
            "approval",
            marked=False,
            key=_reused_id_key(ctx.messages, call.tool_call_id),
        )
        outcome = await self.asker.decide(self.run, held, self.schemas.get(call.tool_name))
        if isinstance(outcome, Approved):
            return args
        self.held[call.tool_call_id] = outcome
        raise ApprovalRequired

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        approval = self.approved.get(call.tool_call_id) if ctx.tool_call_approved else None
        try:
            result = await handler(args)
        except (ToolRetryError, ModelRetry, ToolFailedError, ToolFailed) as exc:  # it ran, and ended so
            if approval is not None:
                said, ended = _ended_with(exc)
                await self.asker.ran(self.run, call.tool_call_id, call.tool_name, approval, said, ended=ended)
            raise
        if approval is not None:
            await self.asker.ran(self.run, call.tool_call_id, call.tool_name, approval, result)
        return result

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[Any], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        results = DeferredToolResults()
        for part in requests.approvals:
            key = _reused_id_key(ctx.messages, part.tool_call_id)
            held = Held(part.tool_call_id, part.tool_name, part.args_as_dict(), "approval", key=key)
            outcome = self.held.pop(part.tool_call_id, None)
            if outcome is None:  # held by pydantic-ai itself: the tool is marked as needing approval
                outcome = await self.asker.decide(self.run, held, self.schemas.get(part.tool_name))
            else:
                held = Held(held.call_id, held.tool, held.arguments, "approval", marked=False, key=key)
            if isinstance(outcome, Approved):
                results.approvals[part.tool_call_id] = ToolApproved()
            elif isinstance(outcome, Denied):
                results.approvals[part.tool_call_id] = ToolDenied(outcome.reason)
            elif isinstance(outcome, Request):
                self.waiting[part.tool_call_id] = (held, outcome.id)
        return results if results.approvals else None


class PydanticAIRuns:
    """Runs of one pydantic-ai `agent`, known to interlock as `name`, that park on people.

    `start` runs the agent until it finishes (the run completes with its output) or holds
    calls for a person (the run parks); `resume` is the worker's handler for the run's
    agent (`handlers()`), which goes on from the stored message history once every
    request has settled, and parks again if the agent holds more calls. `deps` are given
    to every run of the agent (they are not stored in the run).
    """

    def __init__(
        self,
        broker: Broker,
        agent: Agent[Any, Any],
        *,
        name: str,
        gate: ApprovalGate | None = None,
        to: str | None = None,
        deps: Any = None,
    ) -> None:
        self.broker = broker
        self.agent = agent
        self.name = name
        self.deps = deps
        self.asker = Asker(broker, gate, agent=name, to=to)

    def handlers(self) -> dict[str, ResumeHandler]:
        """The worker's handlers: this agent's runs, resumed by `resume`."""
        return {self.name: self.resume}

    async def start(
        self,
        prompt: str,
        *,
        run_id: str | None = None,
        session: str | None = None,
        max_duration: float | timedelta | None = None,
    ) -> Run:
        """Start a run of the agent on `prompt` and go on until it completes or parks.

        With `run_id`, a run already started under that id is returned as it is (a
        restarted program does not start it twice)."""
        run = await self.broker.start_run(self.name, session=session, run_id=run_id, max_duration=max_duration)
        if run.attempts or run.status.value != "running" or run.state is not None:
            return run
        try:
            result, keeper = await self._run(run, prompt)
            outcome = await self._settle(run, result.output, result.all_messages(), keeper)
        except Exception as exc:
            return await failed_start(self.broker, run, self.name, exc)
        if isinstance(outcome, Park):
            return await self.broker.park(run.id, state=outcome.state, waiting_on=outcome.waiting_on)
        return await self.broker.complete_run(run.id, outcome)

    async def resume(self, run: Run, requests: Mapping[str, Request]) -> Any:
        """Go on with a run whose requests have settled: its result, or `Park` again."""
        state = run.state
        messages = ModelMessagesTypeAdapter.validate_python(state["messages"])
        entries = state["held"]
        outcomes = {k: outcome_from_json(v) for k, v in state.get("decided", {}).items()}
        outcomes.update(await self.asker.outcomes(run, entries, self._schemas()))
        for entry in entries:
            call_id = str(entry["call_id"])
            outcome = outcomes.get(call_id)
            if isinstance(outcome, Approved) and outcome.edited:
                problem = self._refused_edit(str(entry["tool"]), outcome.arguments)
                if problem is not None:
                    outcomes[call_id] = Denied(
                        f"The person approved this call with arguments they edited, which the tool refuses, "
                        f"so it did not run: {problem}. Their arguments: {json.dumps(outcome.arguments)}"
                    )
        approved = {
            str(e["call_id"]): str(e["request"])
            for e in entries
            if isinstance(outcomes.get(str(e["call_id"])), Approved)
        }
        return await self._continue(run, messages, outcomes, approved)

    # -- the loop -----------------------------------------------------------------------------

    async def _continue(
        self,
        run: Run,
        messages: list[ModelMessage],
        outcomes: Mapping[str, Outcome],
        approved: Mapping[str, str],
    ) -> Any:
        results = DeferredToolResults()
        tools = {
            part.tool_call_id: part.tool_name for m in messages for part in m.parts if isinstance(part, ToolCallPart)
        }
        for call_id, outcome in outcomes.items():
            if isinstance(outcome, Approved):
                results.approvals[call_id] = ToolApproved(override_args=outcome.arguments if outcome.edited else None)
            elif isinstance(outcome, Denied):
                results.approvals[call_id] = ToolDenied(outcome.reason)
            elif isinstance(outcome, Answered):
                results.calls[call_id] = outcome.value
            elif isinstance(outcome, Ran):  # ran under an earlier attempt: what the model read, not a second run
                said = outcome.text(tools.get(call_id, "the tool"))
                if outcome.ended == "retry":
                    said = ModelRetry(str(said))
                elif outcome.ended == "failed":
                    said = ToolFailed(str(said))
                results.calls[call_id] = said
            elif isinstance(outcome, Interrupted):
                results.calls[call_id] = ToolFailed(outcome.reason)
            else:
                results.calls[call_id] = ToolFailed(outcome.reason)
        result, keeper = await self._run(
            run, None, approved=approved, message_history=messages, deferred_tool_results=results
        )
        return await self._settle(run, result.output, result.all_messages(), keeper)

    async def _run(
        self,
        run: Run,
        prompt: str | Sequence[str] | None,
        *,
        approved: Mapping[str, str] | None = None,
        **options: Any,
    ) -> tuple[AgentRunResult[Any], _Gatekeeper]:
        """Run the agent with the gate in front of its tool calls, delivering the messages
        held for the run at each step boundary: every request to the model (the first, and
        each after a step's tool calls, a resumed pause's included) carries them, each a user
        prompt of its own."""
        keeper = _Gatekeeper(self.asker, run, self._schemas(), approved or {})
        async with self.agent.iter(
            prompt, output_type=self._output_type(), deps=self.deps, capabilities=[keeper], **options
        ) as agent_run:
            async for node in agent_run:
                if Agent.is_model_request_node(node):
                    followups = await take_followups(self.broker, run)
                    if followups:
                        node.request.parts = [*node.request.parts, *(UserPromptPart(text) for text in followups)]
        if agent_run.result is None:  # pragma: no cover - iter ends only with a result
            raise RuntimeError("the agent run ended without a result")
        return agent_run.result, keeper

    async def _settle(self, run: Run, output: Any, messages: list[ModelMessage], keeper: _Gatekeeper) -> Any:
        """The run's result when the agent finished, else `Park` on the calls held for a
        person (going on at once when none waits on one)."""
        if isinstance(output, DeferredToolRequests):
            entries: list[dict[str, Any]] = []
            missed: list[Held] = []
            for part in output.approvals:
                waiting = keeper.waiting.get(part.tool_call_id)
                if waiting is not None:
                    entries.append(self.asker.entry(*waiting))
                else:  # not handed to the gate by pydantic-ai: asked here, as marked
                    key = _reused_id_key(messages, part.tool_call_id)
                    missed.append(Held(part.tool_call_id, part.tool_name, part.args_as_dict(), "approval", key=key))
            missed += [
                Held(
                    c.tool_call_id,
                    c.tool_name,
                    c.args_as_dict(),
                    "question",
                    key=_reused_id_key(messages, c.tool_call_id),
                )
                for c in output.calls
            ]
            asked, decided = await self.asker.ask(run, missed, self._schemas())
            entries += asked
            if entries:
                state = {
                    "messages": json.loads(ModelMessagesTypeAdapter.dump_json(messages)),
                    "held": entries,
                    "decided": {k: outcome_to_json(v) for k, v in decided.items()},
                }
                return Park(state, [e["request"] for e in entries])
            return await self._continue(run, messages, decided, {})
        followups = await take_followups(self.broker, run)  # sent during the last model call: another turn
        if followups:
            result, keeper = await self._run(run, followups, message_history=messages)
            return await self._settle(run, result.output, result.all_messages(), keeper)
        return _JSON.dump_python(output, mode="json")

    def _output_type(self) -> Any:
        declared = self.agent.output_type
        kinds = list(declared) if isinstance(declared, Sequence) and not isinstance(declared, str) else [declared]
        return kinds if DeferredToolRequests in kinds else [*kinds, DeferredToolRequests]

    def _refused_edit(self, tool: str, arguments: Mapping[str, Any]) -> str | None:
        """What the tool's own validation says of the arguments a person edited (None if it
        takes them): a validator of the tool checks more than its JSON schema, which the
        approval checked, and a refused edit must not reach the model as the tool's own
        failure on arguments it never gave."""
        for toolset in self.agent.toolsets:
            found = toolset.tools.get(tool) if isinstance(toolset, FunctionToolset) else None
            if found is not None:
                try:
                    found.function_schema.validator.validate_python(dict(arguments))
                except ValidationError as exc:
                    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())
                return None
        return None

    def _schemas(self) -> dict[str, Mapping[str, Any]]:
        """The argument schema of each function tool, for the approver's optional edit."""
        out: dict[str, Mapping[str, Any]] = {}
        for toolset in self.agent.toolsets:
            if isinstance(toolset, FunctionToolset):
                for name, tool in toolset.tools.items():
                    out[name] = tool.tool_def.parameters_json_schema
        return out


def _ended_with(error: ToolRetryError | ModelRetry | ToolFailedError | ToolFailed) -> tuple[str, Ended]:
    """What the model reads of a call that told it to try again (`ModelRetry`, which
    pydantic-ai hands a capability as `ToolRetryError`) or that it failed (`ToolFailed`,
    as `ToolFailedError`): the message, and which of the two it was."""
    if isinstance(error, ModelRetry | ToolFailed):
        return error.message, "retry" if isinstance(error, ModelRetry) else "failed"
    if isinstance(error, ToolFailedError):
        return str(error), "failed"
    content = error.tool_retry.content  # the tool's message, or the errors a hook's validation found
    return (content if isinstance(content, str) else str(error)), "retry"


def _reused_id_key(messages: Sequence[ModelMessage], call_id: str) -> str | None:
    """The identity of the latest call with id `call_id` when the model gave that id to a
    call of an earlier turn too (some models number their calls afresh each turn): the id
    and the position of its turn in the history, so that it is asked about as a call of its
    own rather than found decided (and spent) already. None when the id is the call's alone."""
    turns = [
        index
        for index, message in enumerate(messages)
        if isinstance(message, ModelResponse)
        and any(isinstance(part, ToolCallPart) and part.tool_call_id == call_id for part in message.parts)
    ]
    return f"{call_id}@{turns[-1]}" if len(turns) > 1 else None
