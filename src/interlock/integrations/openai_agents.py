"""OpenAI Agents SDK agents whose tool approvals wait in interlock, in runs that park.

A run of the OpenAI Agents SDK stops with `result.interruptions` when the model calls a
tool made with `needs_approval`. `OpenAIAgentsRuns` turns each interruption into an
approval of an interlock run through the `ApprovalGate` (its policies, hooks and digests
apply as they are: a call the gate allows at once is approved without asking), stores
the SDK's serialized `RunState` as the run's state, and parks the run: the process may
exit. Once the person has decided, a worker restores the `RunState`, approves or rejects
each call (the rejection message is the person's reason, verbatim) and runs on.

    runs = OpenAIAgentsRuns(broker, agent, name="deployer", gate=gate)
    run = await runs.start("Deploy 2.3 to prod")          # completed, or parked
    worker = Worker(broker, runs.handlers())              # in any process, later

The SDK approves a call with the arguments the model gave, so the approval offers no
edit of the arguments. Messages a person sends to the run while it is busy
(`broker.send_message`) are delivered at its turn boundaries: after a turn that ends with
a final output (a resumed pause's included), each held message verbatim as the next user
turn, so the run completes only once nothing is held for it. Tested with openai-agents 0.x (`pip install
interlock[openai-agents]`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from agents import Agent, RunConfig, Runner, RunResult, RunState, TResponseInputItem
from pydantic import TypeAdapter

from ..agent.gate import ApprovalGate
from ..broker import Broker
from ..model import Request, Run
from ..runs import Park, ResumeHandler
from ._pauses import Approved, Asker, Denied, Held, Outcome, take_followups

__all__ = ["OpenAIAgentsRuns"]

_JSON: TypeAdapter[Any] = TypeAdapter(Any)
"""Turns a final output (text, a model, a dataclass) into the run's JSON result."""


class OpenAIAgentsRuns:
    """Runs of one OpenAI Agents SDK `agent`, known to interlock as `name`, that park on people.

    `start` runs the agent until it finishes (the run completes with its final output)
    or is interrupted for approvals (the run parks); `resume` is the worker's handler for
    the run's agent (`handlers()`). `context` is given to every run (it is not stored in
    the run); `run_config` too (say, `RunConfig(tracing_disabled=True)`).
    """

    def __init__(
        self,
        broker: Broker,
        agent: Agent[Any],
        *,
        name: str,
        gate: ApprovalGate | None = None,
        to: str | None = None,
        context: Any = None,
        run_config: RunConfig | None = None,
    ) -> None:
        self.broker = broker
        self.agent = agent
        self.name = name
        self.context = context
        self.run_config = run_config
        self.asker = Asker(broker, gate, agent=name, to=to)

    def handlers(self) -> dict[str, ResumeHandler]:
        """The worker's handlers: this agent's runs, resumed by `resume`."""
        return {self.name: self.resume}

    async def start(
        self,
        input: str,
        *,
        run_id: str | None = None,
        session: str | None = None,
        max_duration: float | timedelta | None = None,
    ) -> Run:
        """Start a run of the agent on `input` and go on until it completes or parks.

        With `run_id`, a run already started under that id is returned as it is."""
        run = await self.broker.start_run(self.name, session=session, run_id=run_id, max_duration=max_duration)
        if run.attempts or run.status.value != "running" or run.state is not None:
            return run
        try:
            result = await Runner.run(self.agent, input, context=self.context, run_config=self.run_config)
            outcome = await self._settle(run, result)
        except Exception as exc:
            return await self.broker.fail_run(run.id, f"{type(exc).__name__}: {exc}")
        if isinstance(outcome, Park):
            return await self.broker.park(run.id, state=outcome.state, waiting_on=outcome.waiting_on)
        return await self.broker.complete_run(run.id, outcome)

    async def resume(self, run: Run, requests: Mapping[str, Request]) -> Any:
        """Go on with a run whose approvals have been decided: its result, or `Park` again."""
        stored = run.state
        state: RunState[Any, Agent[Any]] = await RunState.from_json(self.agent, stored["run_state"])
        outcomes: dict[str, Outcome] = {k: _outcome_from_json(v) for k, v in stored.get("decided", {}).items()}
        outcomes.update(await self.asker.outcomes(run, stored["held"], {}))
        return await self._continue(run, state, outcomes)

    async def _continue(self, run: Run, state: RunState[Any, Agent[Any]], outcomes: Mapping[str, Outcome]) -> Any:
        for item in state.get_interruptions():
            outcome = outcomes.get(item.call_id or "")
            if isinstance(outcome, Approved):
                state.approve(item)
            else:
                reason = outcome.reason if isinstance(outcome, Denied) else "The call was not approved."
                state.reject(item, rejection_message=reason)
        result = await Runner.run(self.agent, state, context=self.context, run_config=self.run_config)
        return await self._settle(run, result)

    async def _settle(self, run: Run, result: RunResult) -> Any:
        """The run's result when the agent finished, else `Park` on its interruptions
        (going on at once when the gate decided every one of them without a person)."""
        if not result.interruptions:
            followups = await take_followups(self.broker, run)  # the turn ended: messages held meanwhile go in now
            if followups:
                said: list[TResponseInputItem] = [{"role": "user", "content": text} for text in followups]
                turns = [*result.to_input_list(), *said]
                again = await Runner.run(self.agent, turns, context=self.context, run_config=self.run_config)
                return await self._settle(run, again)
            return _JSON.dump_python(result.final_output, mode="json")
        held = [
            Held(item.call_id or "", item.name or "", _arguments(item.arguments), "approval")
            for item in result.interruptions
        ]
        entries, decided = await self.asker.ask(run, held, {})
        state = result.to_state()
        if not entries:
            return await self._continue(run, state, decided)
        stored = {
            "run_state": state.to_json(),
            "held": entries,
            "decided": {k: _outcome_to_json(v) for k, v in decided.items()},
        }
        return Park(stored, [e["request"] for e in entries])


def _arguments(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {"input": value}


def _outcome_to_json(outcome: Outcome) -> dict[str, Any]:
    if isinstance(outcome, Approved):
        return {"approved": outcome.arguments}
    assert isinstance(outcome, Denied)  # only approvals are held in this SDK
    return {"denied": outcome.reason}


def _outcome_from_json(data: Mapping[str, Any]) -> Outcome:
    if "approved" in data:
        return Approved(dict(data["approved"]), edited=False)
    return Denied(str(data["denied"]))
