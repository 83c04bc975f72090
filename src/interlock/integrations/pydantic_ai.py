"""pydantic-ai agents whose held tool calls wait in interlock, in runs that park.

A pydantic-ai agent stops with `DeferredToolRequests` when the model calls a tool that
needs approval (`requires_approval=True`, `ApprovalRequired`) or one deferred to someone
outside the agent (`CallDeferred`). `PydanticAIRuns` turns each such call into a request
of an interlock run (approvals through the `ApprovalGate`, whose policies, hooks and
digests apply as they are; deferred calls as a question to the person), stores the
message history as the run's state, and parks the run: the process may exit. Once the
person has answered, a worker resumes the run with `DeferredToolResults`: an approval as
`ToolApproved` (with the person's edited arguments as `override_args`), a denial as
`ToolDenied` with the person's reason verbatim, a question's answer as the call's result.

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
from datetime import timedelta
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, UserPromptPart
from pydantic_ai.run import AgentRunResult
from pydantic_ai.toolsets import FunctionToolset

from ..agent.gate import ApprovalGate
from ..broker import Broker
from ..model import Request, Run
from ..runs import Park, ResumeHandler
from ._pauses import Answered, Approved, Asker, Declined, Denied, Held, Outcome, take_followups

__all__ = ["PydanticAIRuns"]

_JSON: TypeAdapter[Any] = TypeAdapter(Any)
"""Turns an output (text, a model, a dataclass) into the run's JSON result."""


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
            result = await self._run(run, prompt)
            outcome = await self._settle(run, result.output, result.all_messages())
        except Exception as exc:
            return await self.broker.fail_run(run.id, f"{type(exc).__name__}: {exc}")
        if isinstance(outcome, Park):
            return await self.broker.park(run.id, state=outcome.state, waiting_on=outcome.waiting_on)
        return await self.broker.complete_run(run.id, outcome)

    async def resume(self, run: Run, requests: Mapping[str, Request]) -> Any:
        """Go on with a run whose requests have settled: its result, or `Park` again."""
        state = run.state
        messages = ModelMessagesTypeAdapter.validate_python(state["messages"])
        entries = state["held"]
        outcomes = {k: _outcome_from_json(v) for k, v in state.get("decided", {}).items()}
        outcomes.update(await self.asker.outcomes(run, entries, self._schemas()))
        return await self._continue(run, messages, outcomes)

    # -- the loop -----------------------------------------------------------------------------

    async def _continue(self, run: Run, messages: list[ModelMessage], outcomes: Mapping[str, Outcome]) -> Any:
        results = DeferredToolResults()
        for call_id, outcome in outcomes.items():
            if isinstance(outcome, Approved):
                results.approvals[call_id] = ToolApproved(override_args=outcome.arguments if outcome.edited else None)
            elif isinstance(outcome, Denied):
                results.approvals[call_id] = ToolDenied(outcome.reason)
            elif isinstance(outcome, Answered):
                results.calls[call_id] = outcome.value
            else:
                results.calls[call_id] = ToolFailed(outcome.reason)
        result = await self._run(run, None, message_history=messages, deferred_tool_results=results)
        return await self._settle(run, result.output, result.all_messages())

    async def _run(self, run: Run, prompt: str | Sequence[str] | None, **options: Any) -> AgentRunResult[Any]:
        """Run the agent, delivering the messages held for the run at each step boundary:
        every request to the model (the first, and each after a step's tool calls, a
        resumed pause's included) carries them, each a user prompt of its own."""
        async with self.agent.iter(prompt, output_type=self._output_type(), deps=self.deps, **options) as agent_run:
            async for node in agent_run:
                if Agent.is_model_request_node(node):
                    followups = await take_followups(self.broker, run)
                    if followups:
                        node.request.parts = [*node.request.parts, *(UserPromptPart(text) for text in followups)]
        if agent_run.result is None:  # pragma: no cover - iter ends only with a result
            raise RuntimeError("the agent run ended without a result")
        return agent_run.result

    async def _settle(self, run: Run, output: Any, messages: list[ModelMessage]) -> Any:
        """The run's result when the agent finished, else `Park` on the calls it holds
        (going on at once when the gate decided every one of them without a person)."""
        if isinstance(output, DeferredToolRequests):
            held = [Held(c.tool_call_id, c.tool_name, c.args_as_dict(), "approval") for c in output.approvals]
            held += [Held(c.tool_call_id, c.tool_name, c.args_as_dict(), "question") for c in output.calls]
            entries, decided = await self.asker.ask(run, held, self._schemas())
            if entries:
                state = {
                    "messages": json.loads(ModelMessagesTypeAdapter.dump_json(messages)),
                    "held": entries,
                    "decided": {k: _outcome_to_json(v) for k, v in decided.items()},
                }
                return Park(state, [e["request"] for e in entries])
            return await self._continue(run, messages, decided)
        followups = await take_followups(self.broker, run)  # sent during the last model call: another turn
        if followups:
            result = await self._run(run, followups, message_history=messages)
            return await self._settle(run, result.output, result.all_messages())
        return _JSON.dump_python(output, mode="json")

    def _output_type(self) -> Any:
        declared = self.agent.output_type
        kinds = list(declared) if isinstance(declared, Sequence) and not isinstance(declared, str) else [declared]
        return kinds if DeferredToolRequests in kinds else [*kinds, DeferredToolRequests]

    def _schemas(self) -> dict[str, Mapping[str, Any]]:
        """The argument schema of each function tool, for the approver's optional edit."""
        out: dict[str, Mapping[str, Any]] = {}
        for toolset in self.agent.toolsets:
            if isinstance(toolset, FunctionToolset):
                for name, tool in toolset.tools.items():
                    out[name] = tool.tool_def.parameters_json_schema
        return out


def _outcome_to_json(outcome: Outcome) -> dict[str, Any]:
    if isinstance(outcome, Approved):
        return {"approved": outcome.arguments, "edited": outcome.edited}
    if isinstance(outcome, Denied):
        return {"denied": outcome.reason}
    if isinstance(outcome, Answered):
        return {"answered": outcome.value}
    return {"declined": outcome.reason}


def _outcome_from_json(data: Mapping[str, Any]) -> Outcome:
    if "approved" in data:
        return Approved(dict(data["approved"]), bool(data.get("edited")))
    if "denied" in data:
        return Denied(str(data["denied"]))
    if "answered" in data:
        return Answered(data["answered"])
    return Declined(str(data["declined"]))
