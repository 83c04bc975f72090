"""The pydantic-ai and OpenAI Agents SDK adapters in one process, on every backend.

What the gate decides without a person, questions deferred to a person, a run started
twice, a resume repeated after a worker died, and several held calls in one turn. The
subprocess tests (tests/acceptance/test_framework_runs.py) cover parking and resuming
across processes.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from agents import Agent as OpenAIAgent
from agents import Model, ModelResponse, RunConfig, Usage, function_tool
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from pydantic_ai import Agent, CallDeferred
from pydantic_ai.messages import ModelMessage, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.messages import ModelResponse as PaiResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from interlock import Broker, Deny, Status
from interlock.agent import ApprovalGate, ToolCall
from interlock.integrations.openai_agents import OpenAIAgentsRuns
from interlock.integrations.pydantic_ai import PydanticAIRuns
from interlock.model import RunStatus, new_id
from interlock.runs import Worker

pytestmark = pytest.mark.anyio
BOUND = 30


def pydantic_agent(calls: list[ToolCallPart], ran: list[tuple[str, dict[str, Any]]]) -> Agent[None, str]:
    """An agent whose model makes `calls` in its first turn, then lists what each returned."""

    def decide(messages: list[ModelMessage], info: AgentInfo) -> PaiResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return PaiResponse(parts=list(calls))
        return PaiResponse(parts=[TextPart(" | ".join(f"{r.tool_name}: {r.content}" for r in returns))])

    agent = Agent(FunctionModel(decide))

    @agent.tool_plain(requires_approval=True)
    def deploy(env: str) -> str:
        ran.append(("deploy", {"env": env}))
        return f"deployed to {env}"

    @agent.tool_plain(requires_approval=True)
    def read_logs(service: str) -> str:
        ran.append(("read_logs", {"service": service}))
        return f"logs of {service}"

    @agent.tool_plain
    def ask_human(question: str) -> str:
        raise CallDeferred(kind="question")

    return agent


async def resume_ready(broker: Broker, handlers: Any) -> Any:
    with anyio.fail_after(BOUND):
        resumed = await Worker(broker, handlers).run_once(wait=BOUND)
    assert resumed is not None
    return resumed


async def test_a_call_the_gate_never_asks_about_runs_without_parking(broker: Broker) -> None:
    ran: list[tuple[str, dict[str, Any]]] = []
    agent = pydantic_agent([ToolCallPart("read_logs", {"service": "api"}, tool_call_id="c1")], ran)
    gate = ApprovalGate(broker, policies={"read_*": "never"}, to="alice")
    run = await PydanticAIRuns(broker, agent, name="ops", gate=gate).start("look")
    assert (run.status, run.result) == (RunStatus.COMPLETED, "read_logs: logs of api")
    assert ran == [("read_logs", {"service": "api"})]
    assert (await broker.list(kind="approval")).items == []


async def test_a_hook_that_denies_reaches_the_model_without_asking(broker: Broker) -> None:
    ran: list[tuple[str, dict[str, Any]]] = []
    agent = pydantic_agent([ToolCallPart("deploy", {"env": "prod"}, tool_call_id="c1")], ran)
    gate = ApprovalGate(broker, hook=lambda call: Deny("prod is frozen"), to="alice")
    run = await PydanticAIRuns(broker, agent, name="ops", gate=gate).start("ship")
    assert (run.status, run.result) == (RunStatus.COMPLETED, "deploy: prod is frozen")
    assert ran == []


async def test_a_deferred_question_is_asked_and_its_answer_is_the_call_result(broker: Broker) -> None:
    ran: list[tuple[str, dict[str, Any]]] = []
    agent = pydantic_agent([ToolCallPart("ask_human", {"question": "Which region?"}, tool_call_id="q1")], ran)
    runs = PydanticAIRuns(broker, agent, name="ops", to="alice")
    run = await runs.start("where?")
    assert run.status is RunStatus.WAITING_FOR_INPUT
    (question,) = [await broker.get(i) for i in run.waiting_on]
    assert (question.kind, question.asks[0].prompt, question.origin.run) == ("question", "Which region?", run.id)
    await broker.resolve(question.id, "eu-west", by="alice")
    resumed = await resume_ready(broker, runs.handlers())
    assert (resumed.status, resumed.result) == (RunStatus.COMPLETED, "ask_human: eu-west")


async def test_starting_the_same_run_twice_asks_once(broker: Broker) -> None:
    ran: list[tuple[str, dict[str, Any]]] = []
    agent = pydantic_agent([ToolCallPart("deploy", {"env": "prod"}, tool_call_id="c1")], ran)
    runs = PydanticAIRuns(broker, agent, name="ops", gate=ApprovalGate(broker, to="alice"))
    run_id = new_id()
    first = await runs.start("ship", run_id=run_id)
    again = await runs.start("ship", run_id=run_id)
    assert again.id == first.id and again.waiting_on == first.waiting_on
    assert len((await broker.list(kind="approval")).items) == 1


async def test_a_resume_repeated_after_a_worker_died_never_runs_the_tool_twice(broker: Broker) -> None:
    ran: list[tuple[str, dict[str, Any]]] = []
    agent = pydantic_agent([ToolCallPart("deploy", {"env": "prod"}, tool_call_id="c1")], ran)
    runs = PydanticAIRuns(broker, agent, name="ops", gate=ApprovalGate(broker, to="alice"))
    run = await runs.start("ship")
    await broker.resolve(run.waiting_on[0], {"approve": True}, by="alice")
    claimed = await broker.claim_run(["ops"], worker="w1", lease=BOUND)
    assert claimed is not None
    assert await runs.resume(claimed, {}) == "deploy: deployed to prod"
    # The worker died before completing the run; another one resumes it from the same state.
    other = PydanticAIRuns(broker, agent, name="ops", gate=ApprovalGate(broker, to="alice"))
    replayed = await other.resume(claimed, {})
    assert "already decided once" in replayed
    assert ran == [("deploy", {"env": "prod"})]


async def test_the_gate_s_identity_for_a_framework_call_is_the_run_and_the_call_id(broker: Broker) -> None:
    ran: list[tuple[str, dict[str, Any]]] = []
    agent = pydantic_agent([ToolCallPart("deploy", {"env": "prod"}, tool_call_id="c1")], ran)
    gate = ApprovalGate(broker, to="alice")
    run = await PydanticAIRuns(broker, agent, name="ops", gate=gate).start("ship")
    (approval,) = [await broker.get(i) for i in run.waiting_on]
    assert (approval.origin.run, approval.origin.tool_call_id, approval.origin.session) == (run.id, "c1", None)
    call = ToolCall("deploy", {"env": "prod"}, "c1", agent="ops", run=run.id, to="alice")
    found = await gate.begin(call, policy="always")
    assert not isinstance(found, dict) and found.id == approval.id  # the same approval, not a second


class TwoCalls(Model):
    """A fake model: reads the logs and deploys in one turn, then reports both outputs."""

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        items = input if isinstance(input, list) else []
        outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if not outputs:
            calls = [
                ResponseFunctionToolCall(
                    arguments='{"service": "api"}', call_id="r1", name="read_logs", type="function_call"
                ),
                ResponseFunctionToolCall(
                    arguments='{"env": "prod"}', call_id="d1", name="deploy", type="function_call"
                ),
            ]
            return ModelResponse(output=list(calls), usage=Usage(), response_id=None)
        text = " | ".join(str(o["output"]) for o in outputs)
        content = [ResponseOutputText(text=text, type="output_text", annotations=[])]
        message = ResponseOutputMessage(id="m1", content=content, role="assistant", status="completed", type="message")
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@pytest.mark.parametrize("verdict", [True, False])
async def test_an_openai_agents_turn_with_a_call_the_gate_allows_and_one_it_asks_about(
    broker: Broker, verdict: bool
) -> None:
    ran: list[str] = []

    @function_tool(needs_approval=True)
    def read_logs(service: str) -> str:
        """Read logs."""
        ran.append(f"read_logs {service}")
        return f"logs of {service}"

    @function_tool(needs_approval=True)
    def deploy(env: str) -> str:
        """Deploy."""
        ran.append(f"deploy {env}")
        return f"deployed to {env}"

    agent = OpenAIAgent(name="ops", model=TwoCalls(), tools=[read_logs, deploy])
    gate = ApprovalGate(broker, policies={"read_*": "never", "deploy": "always"}, to="alice")
    runs = OpenAIAgentsRuns(broker, agent, name="ops", gate=gate, run_config=RunConfig(tracing_disabled=True))
    run = await runs.start("ship")
    assert run.status is RunStatus.WAITING_FOR_APPROVAL
    (approval,) = [await broker.get(i) for i in run.waiting_on]
    assert approval.origin.tool_name == "deploy" and approval.context["arguments"] == {"env": "prod"}
    if verdict:
        await broker.resolve(approval.id, {"approve": True}, by="alice")
    else:
        await broker.reject(approval.id, "Wait for the freeze to end.", by="alice")
    resumed = await resume_ready(broker, runs.handlers())
    assert resumed.status is RunStatus.COMPLETED
    if verdict:
        assert resumed.result == "logs of api | deployed to prod"
        assert sorted(ran) == ["deploy prod", "read_logs api"]
    else:
        assert resumed.result == "logs of api | Wait for the freeze to end."
        assert ran == ["read_logs api"]
    assert (await broker.get(approval.id)).status in (Status.ANSWERED, Status.REJECTED)
    assert json.loads(json.dumps(resumed.result)) == resumed.result


async def test_a_resumed_run_that_holds_another_call_parks_again(broker: Broker) -> None:
    ran: list[str] = []

    def decide(messages: list[ModelMessage], info: AgentInfo) -> PaiResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if len(returns) < 2:
            env = "staging" if not returns else "prod"
            return PaiResponse(parts=[ToolCallPart("deploy", {"env": env}, tool_call_id=f"call_{env}")])
        return PaiResponse(parts=[TextPart(" then ".join(str(r.content) for r in returns))])

    agent = Agent(FunctionModel(decide))

    @agent.tool_plain(requires_approval=True)
    def deploy(env: str) -> str:
        ran.append(env)
        return f"deployed to {env}"

    runs = PydanticAIRuns(broker, agent, name="ops", gate=ApprovalGate(broker, to="alice"))
    run = await runs.start("staging first, then prod")
    first = await broker.get(run.waiting_on[0])
    assert first.origin.arguments == {"env": "staging"}
    await broker.resolve(first.id, {"approve": True}, by="alice")
    parked = await resume_ready(broker, runs.handlers())
    assert parked.status is RunStatus.WAITING_FOR_APPROVAL and ran == ["staging"]
    (second,) = [await broker.get(i) for i in parked.waiting_on]
    assert second.origin.arguments == {"env": "prod"} and second.origin.run == run.id
    await broker.resolve(second.id, {"approve": True}, by="alice")
    done = await resume_ready(broker, runs.handlers())
    assert (done.status, done.result) == (RunStatus.COMPLETED, "deployed to staging then deployed to prod")
    assert ran == ["staging", "prod"]
