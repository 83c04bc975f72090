"""Follow-up messages delivered by the pydantic-ai and OpenAI Agents SDK adapters at their
turn boundaries, on every backend, with each framework's offline test model: a message
held while a run was parked reaches the model when it resumes, and one sent while the run
worked reaches it after the step (pydantic-ai) or as the next user turn once the turn ends
(OpenAI Agents), before the run completes."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from agents import Agent as OpenAIAgent
from agents import Model, ModelResponse, RunConfig, Usage, function_tool
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.messages import ModelResponse as PaiResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from interlock import Broker
from interlock.agent import ApprovalGate
from interlock.integrations.openai_agents import OpenAIAgentsRuns
from interlock.integrations.pydantic_ai import PydanticAIRuns
from interlock.model import Run, RunStatus
from interlock.runs import Worker

pytestmark = pytest.mark.anyio
BOUND = 30


async def resume_ready(broker: Broker, handlers: Any) -> Run:
    with anyio.fail_after(BOUND):
        resumed = await Worker(broker, handlers).run_once(wait=BOUND)
    assert resumed is not None
    return resumed


async def replayed(broker: Broker, run_id: str) -> list[str]:
    return [e.data["text"] for e in await broker.find_events(run=run_id) if e.type == "followup_replayed"]


def said(messages: list[ModelMessage]) -> list[str]:
    """Every user prompt the model has been given, flattened, oldest first."""
    out: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                out += [part.content] if isinstance(part.content, str) else [str(c) for c in part.content]
    return out


async def test_pydantic_ai_a_message_held_while_parked_reaches_the_model_on_resume(broker: Broker) -> None:
    def decide(messages: list[ModelMessage], info: AgentInfo) -> PaiResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return PaiResponse(parts=[ToolCallPart("deploy", {"env": "prod"}, tool_call_id="c1")])
        return PaiResponse(parts=[TextPart(f"{returns[0].content}; heard: {' / '.join(said(messages)[1:])}")])

    agent = Agent(FunctionModel(decide))

    @agent.tool_plain(requires_approval=True)
    def deploy(env: str) -> str:
        return f"deployed to {env}"

    runs = PydanticAIRuns(broker, agent, name="ops", gate=ApprovalGate(broker, to="alice"))
    run = await runs.start("ship it")
    assert run.status is RunStatus.WAITING_FOR_APPROVAL
    for text in ("use the canary first", "and ping me after"):
        assert (await broker.send_message(run.id, text, by="alice")).outcome == "queued"
    await broker.resolve(run.waiting_on[0], {"approve": True}, by="alice")
    done = await resume_ready(broker, runs.handlers())
    assert (done.status, done.result) == (
        RunStatus.COMPLETED,
        "deployed to prod; heard: use the canary first / and ping me after",
    )
    assert await replayed(broker, run.id) == ["use the canary first", "and ping me after"]
    assert await broker.list_followups(run.id) == []


async def test_pydantic_ai_a_message_sent_while_the_run_works_reaches_the_model_after_the_step(
    broker: Broker,
) -> None:
    requests: list[list[str]] = []

    def decide(messages: list[ModelMessage], info: AgentInfo) -> PaiResponse:
        requests.append(said(messages))
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return PaiResponse(parts=[ToolCallPart("plan_menu", {}, tool_call_id="m1")])
        steering = said(messages)[1:]
        return PaiResponse(parts=[TextPart(f"menu: {'vegetarian' if steering else 'meat'}")])

    agent = Agent(FunctionModel(decide))

    @agent.tool_plain
    async def plan_menu() -> str:
        # the person writes while the agent is at work
        sent = await broker.send_message("dinner", "actually, make it vegetarian", by="alice")
        assert sent.outcome == "queued"
        return "planned"

    run = await PydanticAIRuns(broker, agent, name="chef").start("plan dinner", run_id="dinner")
    assert (run.status, run.result) == (RunStatus.COMPLETED, "menu: vegetarian")
    # delivered with the tool's result, in the step's next request: no extra turn
    assert requests == [["plan dinner"], ["plan dinner", "actually, make it vegetarian"]]
    assert await replayed(broker, "dinner") == ["actually, make it vegetarian"]


class DeployThenListen(Model):
    """A fake model: deploys, then reports the call's output and any user turn after it."""

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        items = input if isinstance(input, list) else []
        outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if not outputs:
            call = ResponseFunctionToolCall(
                arguments='{"env": "prod"}', call_id="d1", name="deploy", type="function_call"
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        after = items[items.index(outputs[-1]) + 1 :]
        heard = [i["content"] for i in after if isinstance(i, dict) and i.get("role") == "user"]
        text = str(outputs[-1]["output"]) + (f"; heard: {' / '.join(heard)}" if heard else "")
        content = [ResponseOutputText(text=text, type="output_text", annotations=[])]
        message = ResponseOutputMessage(id="m1", content=content, role="assistant", status="completed", type="message")
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


async def test_openai_agents_a_message_held_while_parked_is_the_next_user_turn_after_resuming(
    broker: Broker,
) -> None:
    @function_tool(needs_approval=True)
    def deploy(env: str) -> str:
        """Deploy."""
        return f"deployed to {env}"

    agent = OpenAIAgent(name="ops", model=DeployThenListen(), tools=[deploy])
    runs = OpenAIAgentsRuns(
        broker, agent, name="ops", gate=ApprovalGate(broker, to="alice"), run_config=RunConfig(tracing_disabled=True)
    )
    run = await runs.start("ship")
    assert run.status is RunStatus.WAITING_FOR_APPROVAL
    assert (await broker.send_message(run.id, "tell the on-call", by="alice")).outcome == "queued"
    assert (await broker.send_message(run.id, "approve", by="alice")).resolved == run.waiting_on[0]
    done = await resume_ready(broker, runs.handlers())
    assert (done.status, done.result) == (RunStatus.COMPLETED, "deployed to prod; heard: tell the on-call")
    assert await replayed(broker, run.id) == ["tell the on-call"]


class Heard(DeployThenListen):
    """`DeployThenListen` that keeps the input of each call to it."""

    def __init__(self) -> None:
        self.inputs: list[list[Any]] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        self.inputs.append(list(input) if isinstance(input, list) else [input])
        return await super().get_response(system_instructions, input, *args, **kwargs)


async def test_openai_agents_a_message_sent_while_the_run_works_is_the_next_user_turn_when_its_turn_ends(
    broker: Broker,
) -> None:
    model = Heard()

    @function_tool
    async def deploy(env: str) -> str:
        """Deploy."""
        # the person writes while the agent is at work
        sent = await broker.send_message("release", "then tell the on-call", by="alice")
        assert sent.outcome == "queued"
        return f"deployed to {env}"

    agent = OpenAIAgent(name="ops", model=model, tools=[deploy])
    runs = OpenAIAgentsRuns(broker, agent, name="ops", run_config=RunConfig(tracing_disabled=True))
    run = await runs.start("ship", run_id="release")
    assert (run.status, run.result) == (RunStatus.COMPLETED, "deployed to prod; heard: then tell the on-call")
    assert await replayed(broker, "release") == ["then tell the on-call"]
    # delivered when the turn ended, not between the SDK's steps: a third call to the model
    assert len(model.inputs) == 3
    users = [
        [i["content"] for i in turn if isinstance(i, dict) and i.get("role") == "user"] for turn in model.inputs[1:]
    ]
    assert users == [["ship"], ["ship", "then tell the on-call"]]
    assert await broker.list_followups("release") == []
