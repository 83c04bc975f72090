"""OpenAI Agents SDK agents whose tool calls go through the approval gate, in runs that park.

`OpenAIAgentsRuns` puts the `ApprovalGate` in front of every function tool of the agent,
with the SDK's own mechanism: each tool's `needs_approval` becomes a callable that asks the
gate (the tool's own `needs_approval`, a bool or a callable, says whether the SDK would
hold it: a marked tool the gate has nothing to say about asks). A call the gate lets
through runs at once; one it refuses (a hook's `Deny`) is rejected with the reason as the
message the model reads; one a person must decide interrupts the run (`result.interruptions`),
as the SDK's own approvals do. So the gate's policies, auto-allow lists, hooks and the
agent's stored policy apply to every function tool, marked or not, of the agent and of the
agents it hands off to, and to the tools of their MCP servers (listed by the SDK as each
turn begins, each gated as it is listed; a server's `require_approval` is its tools'
mark). An agent used as a tool (`agent.as_tool`) is run by the SDK as it
was made: make its tool from `gate_tools(agent)` (an agent whose tool is not so made is
refused). An interruption the gate did not see (a hosted tool) is put to it as marked.

Each interruption left for a person becomes an approval of an interlock run, the SDK's
serialized `RunState` is stored as the run's state, and the run parks: the process may
exit. Once the person has decided, a worker restores the `RunState`, approves or rejects
each call (the rejection message is the person's reason, verbatim) and runs on. Each
approved call that runs is recorded on the run with its output; a resume repeated after a
worker died gives that output back instead of running the call again, or, if the worker
died before reporting, an output saying it was interrupted and may or may not have run
(`interlock.integrations._pauses`). A worker whose MCP server of the agent is not connected
(restoring the state lists its tools) hands the run back (`Unavailable`, naming the server)
for a worker that has it connected, instead of failing it.

    runs = OpenAIAgentsRuns(broker, agent, name="deployer", gate=gate)
    run = await runs.start("Deploy 2.3 to prod")          # completed, or parked
    worker = Worker(broker, runs.handlers())              # in any process, later

The SDK approves a call with the arguments the model gave, so the approval offers no
edit of the arguments. Messages a person sends to the run while it is busy
(`broker.send_message`) are delivered at its turn boundaries: after a turn that ends with
a final output (a resumed pause's included), each held message verbatim as the next user
turn, so the run completes only once nothing is held for it. Tested with openai-agents
0.24 (`pip install interlock[openai-agents]`).
"""

from __future__ import annotations

import copy
import inspect
import json
import weakref
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    Handoff,
    RunConfig,
    RunContextWrapper,
    Runner,
    RunResult,
    RunState,
    TResponseInputItem,
)
from agents.tool import Tool
from agents.tool_context import ToolContext
from pydantic import TypeAdapter

from ..agent.gate import ApprovalGate
from ..broker import Broker
from ..errors import Unavailable
from ..model import Request, Run
from ..runs import Park, ResumeHandler
from ._pauses import (
    Approved,
    Asker,
    Denied,
    Held,
    Interrupted,
    Outcome,
    Ran,
    failed_start,
    outcome_from_json,
    outcome_to_json,
    take_followups,
)

__all__ = ["OpenAIAgentsRuns", "gate_tools"]

_JSON: TypeAdapter[Any] = TypeAdapter(Any)
"""Turns a final output (text, a model, a dataclass) into the run's JSON result."""


@dataclass(eq=False)
class _Pass:
    """One pass of the SDK's runner over run `run`: what the gate held of its calls (by call
    id: the call and its denial or the approval request), the calls a person approved that
    it runs (by call id: the approval), and what the model reads instead of running a call
    that ran, or was interrupted, under an earlier attempt."""

    asker: Asker
    run: Run
    approved: Mapping[str, str] = field(default_factory=dict)
    replay: Mapping[str, Any] = field(default_factory=dict)
    held: dict[str, tuple[Held, Outcome | Request]] = field(default_factory=dict)


_PASS: ContextVar[_Pass | None] = ContextVar("interlock_openai_agents_pass", default=None)
"""The pass the SDK's runner is making (the tools' callables run inside it)."""


async def _marked(mark: Any, ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
    """Whether the tool's own `needs_approval` (a bool, or a callable) holds this call."""
    if isinstance(mark, bool):
        return mark
    verdict = mark(ctx, params, call_id)
    if inspect.isawaitable(verdict):
        verdict = await verdict
    return bool(verdict)


class _GateCheck:
    """The `needs_approval` of a gated tool: asks the gate of the pass under way (the tool's
    own `needs_approval`, `mark`, says whether the SDK would hold the call)."""

    def __init__(self, tool: str, mark: Any) -> None:
        self.tool = tool
        self.mark = mark

    async def __call__(self, ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
        marked = await _marked(self.mark, ctx, params, call_id)
        current = _PASS.get()
        if current is None:  # run outside interlock: as the tool says
            return marked
        held = Held(call_id, self.tool, params, "approval", marked=marked)
        outcome = await current.asker.decide(current.run, held, None)
        if isinstance(outcome, Approved):
            return False
        current.held[call_id] = (held, outcome)
        return True


def _gated(tool: Tool) -> Tool:
    """`tool` with the gate in front of it: a copy whose `needs_approval` asks the gate and
    whose invocation records an approved call's output (or gives back the recorded one)."""
    if not isinstance(tool, FunctionTool) or isinstance(tool.needs_approval, _GateCheck):
        return tool
    gated = copy.copy(tool)
    invoke = gated.on_invoke_tool

    async def on_invoke_tool(ctx: ToolContext[Any], input: str) -> Any:
        current = _PASS.get()
        if current is not None and ctx.tool_call_id in current.replay:
            return current.replay[ctx.tool_call_id]
        output = await invoke(ctx, input)
        approval = current.approved.get(ctx.tool_call_id) if current is not None else None
        if current is not None and approval is not None:
            await current.asker.ran(current.run, ctx.tool_call_id, tool.name, approval, output)
        return output

    gated.needs_approval = _GateCheck(tool.name, tool.needs_approval)
    gated.on_invoke_tool = on_invoke_tool
    return gated


class _Gating:
    """Copies of the agents one agent reaches by handing off, with the gate in front of
    each one's function tools (`_gated`); each agent is copied once, so handoffs that go
    round (a triage agent and its specialists, handing back) stay a graph. Your agents
    are not changed."""

    def __init__(self, known: Mapping[int, tuple[Agent[Any], Agent[Any]]] | None = None) -> None:
        # The copies by id of the original, which each entry keeps alive (so no id is reused).
        self.copies: dict[int, tuple[Agent[Any], Agent[Any]]] = dict(known or {})

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        known = self.copies.get(id(agent))
        if known is not None:
            return known[1]
        copied = agent.clone(tools=[], handoffs=[])
        self.copies[id(agent)] = (agent, copied)
        copied.tools = [self.tool(agent.name, tool) for tool in agent.tools]
        copied.handoffs = [self.handoff(item) for item in agent.handoffs]
        _gate_mcp_tools(copied)
        return copied

    def tool(self, owner: str, tool: Tool) -> Tool:
        inner = _agent_of_tool(tool)
        if inner is not None:
            ungated = _ungated(inner, set())
            if ungated:
                raise ValueError(
                    f"the gate cannot decide the calls of {', '.join(sorted(ungated))}: they are tools of agent "
                    f"{inner.name!r}, which agent {owner!r} uses as its tool {tool.name!r}, and the SDK runs that "
                    "agent as it was made. Make the tool from a gated copy of the agent: "
                    f"gate_tools({inner.name}).as_tool(...)"
                )
        return _gated(tool)

    def handoff(self, item: Agent[Any] | Handoff[Any, Any]) -> Agent[Any] | Handoff[Any, Any]:
        if isinstance(item, Agent):
            return self.agent(item)
        copied = copy.copy(item)
        target = _agent_handed_off_to(item)
        if target is not None:
            copied._agent_ref = weakref.ref(self.agent(target))
        invoke = item.on_invoke_handoff

        async def on_invoke_handoff(ctx: RunContextWrapper[Any], arguments: str) -> Any:
            chosen = await invoke(ctx, arguments)
            if not isinstance(chosen, Agent):
                return chosen
            if id(chosen) in self.copies:  # one of the agents the graph was made with
                return self.agent(chosen)
            # An agent the handoff made for this call: gated for this call alone, so that a
            # handoff making a new agent each time does not keep every one of them.
            return _Gating(self.copies).agent(chosen)

        copied.on_invoke_handoff = on_invoke_handoff
        return copied


class _GatedMCPTools:
    """The `get_mcp_tools` of a gated agent: the tools of its MCP servers (`mcp_servers`, a
    list it shares with the agent it copies), each with the gate in front of it. The SDK
    lists them, and makes each a function tool whose `needs_approval` is its server's
    `require_approval`, as each turn begins; so they are gated on each listing."""

    def __init__(self, listed: Any) -> None:
        self.listed = listed

    async def __call__(self, run_context: RunContextWrapper[Any]) -> list[Tool]:
        return [_gated(tool) for tool in await self.listed(run_context)]


def _gate_mcp_tools(agent: Agent[Any]) -> None:
    """Has `agent` put the gate in front of the tools of its MCP servers."""
    # An attribute of this copy alone, in front of the class's method: the agent stays of
    # its class, and the agent it copies is not changed.
    object.__setattr__(agent, "get_mcp_tools", _GatedMCPTools(agent.get_mcp_tools))


def _ungated(agent: Agent[Any], seen: set[int]) -> set[str]:
    """The function tools of `agent`, and of the agents it hands off to or uses as tools,
    that do not go through the gate (and the MCP servers whose tools do not)."""
    if id(agent) in seen:
        return set()
    seen.add(id(agent))
    found: set[str] = set()
    for tool in agent.tools:
        if isinstance(tool, FunctionTool):
            if not isinstance(tool.needs_approval, _GateCheck):
                found.add(repr(tool.name))
            inner = _agent_of_tool(tool)
            if inner is not None:
                found |= _ungated(inner, seen)
    if not isinstance(vars(agent).get("get_mcp_tools"), _GatedMCPTools):
        found |= {f"the tools of MCP server {server.name!r}" for server in agent.mcp_servers}
    for item in agent.handoffs:
        target = item if isinstance(item, Agent) else _agent_handed_off_to(item)
        if target is not None:
            found |= _ungated(target, seen)
    return found


def _agent_of_tool(tool: Tool) -> Agent[Any] | None:
    """The agent a tool runs, for a tool made by `agent.as_tool(...)` (the SDK keeps it on
    the tool); None for any other tool."""
    inner = getattr(tool, "_agent_instance", None) if isinstance(tool, FunctionTool) else None
    return inner if isinstance(inner, Agent) else None


def _agent_handed_off_to(item: Handoff[Any, Any]) -> Agent[Any] | None:
    """The agent a `handoff(...)` names, when it names one (the SDK keeps a weak reference);
    None for a handoff that makes its agent as it is called."""
    target = item._agent_ref() if item._agent_ref is not None else None
    return target if isinstance(target, Agent) else None


def gate_tools(agent: Agent[Any]) -> Agent[Any]:
    """A copy of `agent` whose function tools and MCP servers' tools, and those of the
    agents it hands off to, go through the gate of the interlock run that calls them.

    `OpenAIAgentsRuns` does this to the agent it is given, and to the agents it hands off
    to. An agent used as a tool of another (`agent.as_tool(...)`) is run by the SDK as it
    was made, so make its tool from a gated copy: `gate_tools(researcher).as_tool(...)`.
    Outside an interlock run the copy behaves as the agent does."""
    return _Gating().agent(agent)


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
        self._gating = _Gating()
        self._gated: Agent[Any] = self._gating.agent(agent)

    def handlers(self) -> dict[str, ResumeHandler]:
        """The worker's handlers: this agent's runs, resumed by `resume`."""
        return {self.name: self.resume}

    async def start(
        self,
        input: str | list[TResponseInputItem],
        *,
        run_id: str | None = None,
        session: str | None = None,
        max_duration: float | timedelta | None = None,
    ) -> Run:
        """Start a run of the agent on `input` (a prompt, or input items as `Runner.run`
        takes them: a conversation so far) and go on until it completes or parks.

        With `run_id`, a run already started under that id is returned as it is."""
        run = await self.broker.start_run(self.name, session=session, run_id=run_id, max_duration=max_duration)
        if run.attempts or run.status.value != "running" or run.state is not None:
            return run
        try:
            result, made = await self._pass(run, input)
            outcome = await self._settle(run, result, made)
        except Exception as exc:
            return await failed_start(self.broker, run, self.name, exc)
        if isinstance(outcome, Park):
            return await self.broker.park(run.id, state=outcome.state, waiting_on=outcome.waiting_on)
        return await self.broker.complete_run(run.id, outcome)

    async def resume(self, run: Run, requests: Mapping[str, Request]) -> Any:
        """Go on with a run whose approvals have been decided: its result, or `Park` again."""
        stored = run.state
        try:
            state: RunState[Any, Agent[Any]] = await RunState.from_json(self._gated, stored["run_state"])
        except Exception as exc:  # the SDK says only "Error details are redacted."
            why = await self._mcp_server_out_of_reach()
            if why is None:
                raise
            # Not the run's fault: this worker lacks the server, so it hands the run back
            # for a worker that has it connected (or for this one, once it connects it).
            raise Unavailable(
                f"the run's state could not be restored in this worker: {why}. Connect the agent's MCP "
                "servers (await server.connect()) in the process that resumes its runs, before the worker starts"
            ) from exc
        outcomes: dict[str, Outcome] = {k: outcome_from_json(v) for k, v in stored.get("decided", {}).items()}
        outcomes.update(await self.asker.outcomes(run, stored["held"], {}))
        approved = {
            str(e["call_id"]): str(e["request"])
            for e in stored["held"]
            if isinstance(outcomes.get(str(e["call_id"])), Approved)
        }
        return await self._continue(run, state, outcomes, approved)

    async def _mcp_server_out_of_reach(self) -> str | None:
        """Which MCP server of the agents this run reaches cannot list its tools, and why (the
        SDK lists them to restore a run's state); None when each one can."""
        for agent, _ in self._gating.copies.values():
            for server in agent.mcp_servers:
                try:
                    await server.list_tools()
                except Exception as exc:
                    why = f"{type(exc).__name__}: {exc}"
                    return f"MCP server {server.name!r} of agent {agent.name!r} cannot list its tools ({why})"
        return None

    async def _pass(
        self,
        run: Run,
        input: str | list[TResponseInputItem] | RunState[Any, Agent[Any]],
        *,
        approved: Mapping[str, str] | None = None,
        replay: Mapping[str, Any] | None = None,
    ) -> tuple[RunResult, _Pass]:
        """Run the agent (with the gate in front of its tools) until it ends or is interrupted."""
        made = _Pass(self.asker, run, approved or {}, replay or {})
        token = _PASS.set(made)
        try:
            result = await Runner.run(self._gated, input, context=self.context, run_config=self.run_config)
        finally:
            _PASS.reset(token)
        return result, made

    async def _continue(
        self,
        run: Run,
        state: RunState[Any, Agent[Any]],
        outcomes: Mapping[str, Outcome],
        approved: Mapping[str, str],
    ) -> Any:
        replay: dict[str, Any] = {}
        for item in state.get_interruptions():
            call_id = item.call_id or ""
            outcome = outcomes.get(call_id)
            if isinstance(outcome, Approved):
                state.approve(item)
            elif isinstance(outcome, Ran | Interrupted):  # under an earlier attempt: not run again
                state.approve(item)
                replay[call_id] = outcome.text(item.name or "the tool") if isinstance(outcome, Ran) else outcome.reason
            else:
                reason = outcome.reason if isinstance(outcome, Denied) else "The call was not approved."
                state.reject(item, rejection_message=reason)
        result, made = await self._pass(run, state, approved=approved, replay=replay)
        return await self._settle(run, result, made)

    async def _settle(self, run: Run, result: RunResult, made: _Pass) -> Any:
        """The run's result when the agent finished, else `Park` on the calls left for a
        person (going on at once when the gate decided every one of them)."""
        if not result.interruptions:
            followups = await take_followups(self.broker, run)  # the turn ended: messages held meanwhile go in now
            if followups:
                said: list[TResponseInputItem] = [{"role": "user", "content": text} for text in followups]
                again, made = await self._pass(run, [*result.to_input_list(), *said])
                return await self._settle(run, again, made)
            return _JSON.dump_python(result.final_output, mode="json")
        entries: list[dict[str, Any]] = []
        decided: dict[str, Outcome] = {}
        missed: list[Held] = []
        for item in result.interruptions:
            call_id = item.call_id or ""
            known = made.held.get(call_id)
            if known is None:  # an interruption the gate did not see: asked here, as marked
                missed.append(Held(call_id, item.name or "", _arguments(item.arguments), "approval"))
            elif isinstance(known[1], Request):
                entries.append(self.asker.entry(known[0], known[1].id))
            else:
                decided[call_id] = known[1]
        asked, more = await self.asker.ask(run, missed, {})
        entries += asked
        decided.update(more)
        state = result.to_state()
        if not entries:
            return await self._continue(run, state, decided, {})
        stored = {
            "run_state": state.to_json(),
            "held": entries,
            "decided": {k: outcome_to_json(v) for k, v in decided.items()},
        }
        return Park(stored, [e["request"] for e in entries])


def _arguments(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {"input": value}
