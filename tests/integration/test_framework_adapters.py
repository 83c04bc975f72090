"""The pydantic-ai and OpenAI Agents SDK adapters in one process, on every backend.

The gate deciding every tool call the agent makes (marked by the framework or not): its
policies, auto-allow, hooks and the agent's stored policy; questions deferred to a person;
a run started twice; a resume repeated after a worker died (the recorded output given
back, or the call reported interrupted, never as a denial); and several held calls in one
turn. The subprocess tests (tests/acceptance/test_framework_runs.py) cover parking and
resuming across processes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Annotated, Any

import anyio
import pytest
from agents import Agent as OpenAIAgent
from agents import Model, ModelResponse, RunConfig, Usage, function_tool
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from pydantic import AfterValidator
from pydantic_ai import Agent, CallDeferred, RunContext
from pydantic_ai.exceptions import ApprovalRequired, ModelRetry, ToolFailed
from pydantic_ai.messages import ModelMessage, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.messages import ModelResponse as PaiResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from interlock import Broker, Deny, Status
from interlock.agent import Allow, ApprovalGate, Pause, ToolCall
from interlock.integrations.openai_agents import OpenAIAgentsRuns
from interlock.integrations.pydantic_ai import PydanticAIRuns
from interlock.model import Request, Run, RunStatus, new_id
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


@pytest.mark.parametrize("reason", ["asked in the channel instead", ""])
async def test_a_deferred_question_withdrawn_on_its_own_gives_the_model_the_reason_it_was_withdrawn_with(
    broker: Broker, reason: str
) -> None:
    # As LangGraph's node reads it: the reason the question was cancelled with, else that
    # nobody answered it ("the question cancelled" read as if the question had done it).
    ran: list[tuple[str, dict[str, Any]]] = []
    agent = pydantic_agent([ToolCallPart("ask_human", {"question": "Which region?"}, tool_call_id="q1")], ran)
    runs = PydanticAIRuns(broker, agent, name="ops", to="alice")
    run = await runs.start("where?")
    (question_id,) = run.waiting_on
    assert await broker.cancel(question_id, reason)
    resumed = await resume_ready(broker, runs.handlers())
    assert resumed.status is RunStatus.COMPLETED
    assert resumed.result == f"ask_human: {reason or 'Nobody answered: the question was cancelled.'}", resumed.result


async def test_starting_the_same_run_twice_asks_once(broker: Broker) -> None:
    ran: list[tuple[str, dict[str, Any]]] = []
    agent = pydantic_agent([ToolCallPart("deploy", {"env": "prod"}, tool_call_id="c1")], ran)
    runs = PydanticAIRuns(broker, agent, name="ops", gate=ApprovalGate(broker, to="alice"))
    run_id = new_id()
    first = await runs.start("ship", run_id=run_id)
    again = await runs.start("ship", run_id=run_id)
    assert again.id == first.id and again.waiting_on == first.waiting_on
    assert len((await broker.list(kind="approval")).items) == 1


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


class Down(Model):
    """A fake model whose service is down."""

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("the model service is down")

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@pytest.mark.parametrize("framework", ["pydantic-ai", "openai-agents"])
async def test_a_run_that_fails_as_it_starts_leaves_its_traceback_in_the_log_by_the_run_s_id(
    broker: Broker, framework: str, caplog: pytest.LogCaptureFixture
) -> None:
    if framework == "pydantic-ai":

        def down(messages: list[ModelMessage], info: AgentInfo) -> PaiResponse:
            raise ConnectionError("the model service is down")

        run = await PydanticAIRuns(broker, Agent(FunctionModel(down)), name="ops").start("look")
    else:
        agent = OpenAIAgent(name="ops", model=Down())
        run = await OpenAIAgentsRuns(broker, agent, name="ops", run_config=RunConfig(tracing_disabled=True)).start(
            "look"
        )
    # The run keeps the exception's words; the log, where it was raised.
    assert (run.status, run.error) == (RunStatus.FAILED, "ConnectionError: the model service is down")
    [logged] = [r for r in caplog.records if r.getMessage() == f"starting run {run.id} of agent ops failed"]
    assert logged.levelno == logging.ERROR and logged.exc_info is not None
    assert "the model service is down" in caplog.text


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


class Recalls(Model):
    """A fake model: deploys to the environment the conversation's first user message named,
    then says what the deploy returned and how many user messages it read."""

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        assert isinstance(input, list), "the conversation reaches the model as items"
        said = [str(i["content"]) for i in input if isinstance(i, dict) and i.get("role") == "user"]
        outputs = [i for i in input if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if not outputs:
            env = said[0].removeprefix("we ship to ")
            call = ResponseFunctionToolCall(
                arguments=json.dumps({"env": env}), call_id="d1", name="deploy", type="function_call"
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        text = f"{outputs[-1]['output']} (after {len(said)} messages)"
        content = [ResponseOutputText(text=text, type="output_text", annotations=[])]
        message = ResponseOutputMessage(id="m1", content=content, role="assistant", status="completed", type="message")
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


async def test_an_openai_agents_run_started_on_a_conversation_so_far_keeps_it_across_the_pause(
    broker: Broker,
) -> None:
    ran: list[str] = []

    @function_tool(needs_approval=True)
    def deploy(env: str) -> str:
        """Deploy."""
        ran.append(env)
        return f"deployed to {env}"

    agent = OpenAIAgent(name="ops", model=Recalls(), tools=[deploy])
    runs = OpenAIAgentsRuns(
        broker, agent, name="ops", gate=ApprovalGate(broker, to="alice"), run_config=RunConfig(tracing_disabled=True)
    )
    conversation: list[Any] = [
        {"role": "user", "content": "we ship to eu-west"},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "ship it"},
    ]
    run = await runs.start(conversation)
    assert run.status is RunStatus.WAITING_FOR_APPROVAL and ran == []
    (approval,) = [await broker.get(i) for i in run.waiting_on]
    assert approval.origin.arguments == {"env": "eu-west"}
    await broker.resolve(approval.id, {"approve": True}, by="alice")
    done = await resume_ready(broker, runs.handlers())
    assert (done.status, done.result) == (RunStatus.COMPLETED, "deployed to eu-west (after 2 messages)")
    assert ran == ["eu-west"]


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


# -- the gate decides every tool call, marked by the framework or not ---------------------------

FRAMEWORKS = ["pydantic-ai", "openai-agents"]
Calls = list[tuple[str, dict[str, Any], str]]


class WorkerDied(BaseException):
    """Stands for the process dying while a tool runs: nothing in the adapter catches it."""


class Scripted(Model):
    """A fake model: makes `calls` in its first turn, then says what each call returned."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        items = input if isinstance(input, list) else []
        outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if not outputs:
            made = [
                ResponseFunctionToolCall(arguments=json.dumps(args), call_id=call_id, name=name, type="function_call")
                for name, args, call_id in self.calls
            ]
            return ModelResponse(output=list(made), usage=Usage(), response_id=None)
        text = " | ".join(str(o["output"]) for o in outputs)
        content = [ResponseOutputText(text=text, type="output_text", annotations=[])]
        message = ResponseOutputMessage(id="m1", content=content, role="assistant", status="completed", type="message")
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class Tools:
    """`deploy` and `read_logs` of one agent, each marked as needing approval or not; keeps
    every call that started (`started`) and finished (`ran`); `die` makes the next
    `deploy` stop its worker before it finishes."""

    def __init__(self, marked: set[str]) -> None:
        self.marked = marked
        self.started: list[str] = []
        self.ran: list[str] = []
        self.die = False

    def deploy(self, env: str) -> str:
        self.started.append(f"deploy {env}")
        if self.die:
            self.die = False
            raise WorkerDied
        self.ran.append(f"deploy {env}")
        return f"deployed to {env}"

    def read_logs(self, service: str) -> str:
        self.started.append(f"read_logs {service}")
        self.ran.append(f"read_logs {service}")
        return f"logs of {service}"


def runs_of(
    framework: str, broker: Broker, gate: ApprovalGate | None, calls: Calls, tools: Tools
) -> PydanticAIRuns | OpenAIAgentsRuns:
    """An agent of `framework` named "ops" whose model makes `calls`, then reports what each
    returned (" | " between them), with interlock in front of it."""
    if framework == "pydantic-ai":

        def decide(messages: list[ModelMessage], info: AgentInfo) -> PaiResponse:
            returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
            if not returns:
                return PaiResponse(parts=[ToolCallPart(name, args, tool_call_id=i) for name, args, i in calls])
            return PaiResponse(parts=[TextPart(" | ".join(str(r.content) for r in returns))])

        agent = Agent(FunctionModel(decide))
        agent.tool_plain(name="deploy", requires_approval="deploy" in tools.marked)(tools.deploy)
        agent.tool_plain(name="read_logs", requires_approval="read_logs" in tools.marked)(tools.read_logs)
        return PydanticAIRuns(broker, agent, name="ops", gate=gate)
    made = [
        function_tool(tools.deploy, name_override="deploy", needs_approval="deploy" in tools.marked),
        function_tool(tools.read_logs, name_override="read_logs", needs_approval="read_logs" in tools.marked),
    ]
    oai = OpenAIAgent(name="ops", model=Scripted(calls), tools=list(made))
    return OpenAIAgentsRuns(broker, oai, name="ops", gate=gate, run_config=RunConfig(tracing_disabled=True))


DEPLOY: Calls = [("deploy", {"env": "prod"}, "d1")]
BOTH: Calls = [("read_logs", {"service": "api"}, "r1"), ("deploy", {"env": "prod"}, "d1")]


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_policy_of_always_pauses_a_tool_the_framework_does_not_mark(broker: Broker, framework: str) -> None:
    tools = Tools(marked=set())
    gate = ApprovalGate(broker, policies={"deploy": "always"}, to="alice")
    runs = runs_of(framework, broker, gate, DEPLOY, tools)
    run = await runs.start("ship")
    assert run.status is RunStatus.WAITING_FOR_APPROVAL and tools.started == []
    (approval,) = [await broker.get(i) for i in run.waiting_on]
    assert (approval.origin.tool_name, approval.origin.tool_call_id, approval.context["policy"]) == (
        "deploy",
        "d1",
        "always",
    )
    await broker.resolve(approval.id, {"approve": True}, by="alice")
    done = await resume_ready(broker, runs.handlers())
    assert (done.status, done.result, tools.ran) == (RunStatus.COMPLETED, "deployed to prod", ["deploy prod"])


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_tool_the_gate_lets_through_runs_without_a_pause(broker: Broker, framework: str) -> None:
    tools = Tools(marked=set())
    runs = runs_of(framework, broker, ApprovalGate(broker, to="alice"), BOTH, tools)
    run = await runs.start("look and ship")
    assert (run.status, run.result) == (RunStatus.COMPLETED, "logs of api | deployed to prod")
    assert sorted(tools.ran) == ["deploy prod", "read_logs api"]
    assert (await broker.list(kind="approval")).items == []


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_hook_s_denial_of_an_unmarked_tool_reaches_the_model_and_the_tool_never_runs(
    broker: Broker, framework: str
) -> None:
    tools = Tools(marked=set())
    asked: list[str] = []

    def hook(call: ToolCall) -> Allow | Deny:
        asked.append(call.name)
        return Deny("prod is frozen") if call.name == "deploy" else Allow()

    runs = runs_of(framework, broker, ApprovalGate(broker, hook=hook, to="alice"), BOTH, tools)
    run = await runs.start("look and ship")
    assert (run.status, run.result) == (RunStatus.COMPLETED, "logs of api | prod is frozen")
    assert tools.started == ["read_logs api"] and sorted(asked) == ["deploy", "read_logs"]
    assert (await broker.list(kind="approval")).items == []


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_hook_that_pauses_an_unmarked_tool_asks_a_person_with_its_reason(
    broker: Broker, framework: str
) -> None:
    tools = Tools(marked=set())
    gate = ApprovalGate(broker, hook=lambda call: Pause("a production change"), to="alice")
    runs = runs_of(framework, broker, gate, DEPLOY, tools)
    run = await runs.start("ship")
    (approval,) = [await broker.get(i) for i in run.waiting_on]
    assert "a production change" in approval.details
    await broker.reject(approval.id, "Not today.", by="alice")
    done = await resume_ready(broker, runs.handlers())
    assert (done.status, done.result, tools.started) == (RunStatus.COMPLETED, "Not today.", [])


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_denial_without_a_reason_still_tells_the_model_the_call_was_denied(
    broker: Broker, framework: str
) -> None:
    tools = Tools(marked={"deploy"})
    runs = runs_of(framework, broker, ApprovalGate(broker, to="alice"), DEPLOY, tools)
    run = await runs.start("ship")
    (approval,) = run.waiting_on
    await broker.resolve(approval, {"approve": False}, by="alice")  # `interlock answer ID no`, no --reason
    done = await resume_ready(broker, runs.handlers())
    assert (done.status, done.result) == (RunStatus.COMPLETED, "The person denied this call and gave no reason.")
    assert tools.started == []


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_auto_allow_lets_a_tool_the_framework_marks_run_without_a_pause(broker: Broker, framework: str) -> None:
    tools = Tools(marked={"deploy", "read_logs"})
    gate = ApprovalGate(broker, auto_allow=["read_*"], to="alice")
    runs = runs_of(framework, broker, gate, BOTH, tools)
    run = await runs.start("look and ship")
    assert run.status is RunStatus.WAITING_FOR_APPROVAL and tools.ran == ["read_logs api"]
    (approval,) = [await broker.get(i) for i in run.waiting_on]
    assert approval.origin.tool_name == "deploy"  # marked, and the gate has no say: asks


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_the_agent_s_stored_policy_pauses_the_unmarked_tools_it_gates(broker: Broker, framework: str) -> None:
    await broker.set_approval_policy({"agent": "ops", "approval": "always", "gatedTools": ["deploy"]})
    tools = Tools(marked=set())
    runs = runs_of(framework, broker, ApprovalGate(broker, to="alice"), BOTH, tools)
    run = await runs.start("look and ship")
    assert run.status is RunStatus.WAITING_FOR_APPROVAL and tools.ran == ["read_logs api"]
    (approval,) = [await broker.get(i) for i in run.waiting_on]
    await broker.resolve(approval.id, {"approve": True}, by="alice")
    done = await resume_ready(broker, runs.handlers())
    assert (done.status, done.result) == (RunStatus.COMPLETED, "logs of api | deployed to prod")
    assert sorted(tools.ran) == ["deploy prod", "read_logs api"]


# -- exactly what a worker that dies leaves behind ----------------------------------------------


async def call_records(broker: Broker, run_id: str) -> list[dict[str, Any]]:
    """What the run's events say of its approved calls: ran, or interrupted."""
    events = await broker.find_events(run=run_id)
    return [dict(e.data["data"]) for e in events if e.type == "informed" and "outcome" in e.data.get("data", {})]


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_resume_repeated_after_a_worker_died_gives_back_the_recorded_output_without_running_it_again(
    broker: Broker, framework: str
) -> None:
    tools = Tools(marked={"deploy"})
    runs = runs_of(framework, broker, ApprovalGate(broker, to="alice"), DEPLOY, tools)
    run = await runs.start("ship")
    await broker.resolve(run.waiting_on[0], {"approve": True}, by="alice")
    claimed = await broker.claim_run(["ops"], worker="w1", lease=BOUND)
    assert claimed is not None
    assert await runs.resume(claimed, {}) == "deployed to prod"
    # The worker died before completing the run; another one resumes it from the same state.
    other = runs_of(framework, broker, ApprovalGate(broker, to="alice"), DEPLOY, tools)
    assert await other.resume(claimed, {}) == "deployed to prod"
    assert tools.started == ["deploy prod"]
    (record,) = await call_records(broker, run.id)
    assert (record["outcome"], record["tool_call_id"], record["output"]) == ("ran", "d1", "deployed to prod")


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_worker_that_died_while_the_approved_tool_ran_leaves_the_call_interrupted_not_denied(
    broker: Broker, framework: str
) -> None:
    tools = Tools(marked={"deploy"})
    runs = runs_of(framework, broker, ApprovalGate(broker, to="alice"), DEPLOY, tools)
    run = await runs.start("ship")
    await broker.resolve(run.waiting_on[0], {"approve": True}, by="alice")
    claimed = await broker.claim_run(["ops"], worker="w1", lease=BOUND)
    assert claimed is not None
    tools.die = True
    with pytest.raises(WorkerDied):
        await runs.resume(claimed, {})
    other = runs_of(framework, broker, ApprovalGate(broker, to="alice"), DEPLOY, tools)
    said = await other.resume(claimed, {})
    assert "was interrupted" in said and "may or may not have run" in said and "d1" in said
    assert "already decided" not in said
    assert tools.started == ["deploy prod"]  # at most once per approval: not run again
    (record,) = await call_records(broker, run.id)
    assert (record["outcome"], record["tool"], record["tool_call_id"]) == ("interrupted", "deploy", "d1")
    assert record["approval"] == run.waiting_on[0]
    # a third attempt finds the same, and does not record it twice
    assert await runs_of(framework, broker, ApprovalGate(broker, to="alice"), DEPLOY, tools).resume(claimed, {}) == said
    assert len(await call_records(broker, run.id)) == 1


def mailer_runs(broker: Broker, started: list[str], *, marked: bool) -> PydanticAIRuns:
    """A pydantic-ai agent named "ops" whose `send` needs approval (marked, or by the gate's
    policy) and has the model try again (`ModelRetry`) on a recipient without a domain. Its
    model sends to "bob" (call m1); told to try again, it sends to the full address (m2);
    told anything else of m1 (a failure), it sends to "bob" once more (m1-again); then it
    says what each call read ("id outcome: content", " | " between them)."""

    def decide(messages: list[ModelMessage], info: AgentInfo) -> PaiResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return PaiResponse(parts=[ToolCallPart("send", {"to": "bob"}, tool_call_id="m1")])
        last = returns[-1]
        if last.outcome == "retried":
            return PaiResponse(parts=[ToolCallPart("send", {"to": "bob@example.com"}, tool_call_id="m2")])
        if last.outcome == "failed" and last.tool_call_id == "m1":
            return PaiResponse(parts=[ToolCallPart("send", {"to": "bob"}, tool_call_id="m1-again")])
        return PaiResponse(parts=[TextPart(" | ".join(f"{r.tool_call_id} {r.outcome}: {r.content}" for r in returns))])

    agent = Agent(FunctionModel(decide))

    @agent.tool_plain(requires_approval=marked)
    def send(to: str) -> str:
        started.append(to)
        if "@" not in to:
            raise ModelRetry("recipient unknown, use a full address")
        return f"sent to {to}"

    gate = ApprovalGate(broker, policies={} if marked else {"send": "always"}, to="alice")
    return PydanticAIRuns(broker, agent, name="ops", gate=gate)


@pytest.mark.parametrize("marked", [True, False], ids=["marked", "policy"])
async def test_an_approved_pydantic_ai_call_that_had_the_model_retry_is_not_run_again_after_a_worker_died(
    broker: Broker, marked: bool
) -> None:
    started: list[str] = []
    runs = mailer_runs(broker, started, marked=marked)
    run = await runs.start("mail bob")
    (first,) = run.waiting_on
    await broker.resolve(first, {"approve": True}, by="alice")

    async def dies_before_saving(claimed: Run, requests: Mapping[str, Request]) -> Any:
        await runs.resume(claimed, requests)  # the tool ran, the model corrected its call, which asks
        raise WorkerDied  # before the run is parked on the corrected call

    with anyio.fail_after(BOUND), pytest.raises(WorkerDied):
        await Worker(broker, {"ops": dies_before_saving}, name="w1", lease=0.2).run_once(wait=BOUND)
    assert started == ["bob"]
    # w1's lease runs out; another worker resumes the run from the state it was parked with
    parked = await resume_ready(broker, mailer_runs(broker, started, marked=marked).handlers())
    assert parked.status is RunStatus.WAITING_FOR_APPROVAL and started == ["bob"]  # the body ran once
    (second,) = parked.waiting_on
    corrected = await broker.get(second)
    assert (corrected.origin.tool_call_id, corrected.origin.arguments) == ("m2", {"to": "bob@example.com"})
    pending = (await broker.list(kind="approval", status="pending")).items
    assert [r.id for r in pending] == [second]  # the one w1 asked for, not a second
    await broker.resolve(second, {"approve": True}, by="alice")
    done = await resume_ready(broker, runs.handlers())
    assert (done.status, done.result) == (
        RunStatus.COMPLETED,
        "m1 retried: recipient unknown, use a full address | m2 success: sent to bob@example.com",
    )
    assert started == ["bob", "bob@example.com"]
    assert [(r["outcome"], r["tool_call_id"], r["output"]) for r in await call_records(broker, run.id)] == [
        ("ran", "m1", "recipient unknown, use a full address"),
        ("ran", "m2", "sent to bob@example.com"),
    ]


async def test_an_approved_pydantic_ai_call_that_failed_reads_the_same_failure_after_a_worker_died(
    broker: Broker,
) -> None:
    started: list[str] = []

    def decide(messages: list[ModelMessage], info: AgentInfo) -> PaiResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return PaiResponse(parts=[ToolCallPart("send", {"to": "bob@example.com"}, tool_call_id="m1")])
        return PaiResponse(parts=[TextPart(" | ".join(f"{r.tool_call_id} {r.outcome}: {r.content}" for r in returns))])

    def mailer() -> PydanticAIRuns:
        agent = Agent(FunctionModel(decide))

        @agent.tool_plain(requires_approval=True)
        def send(to: str) -> str:
            started.append(to)
            raise ToolFailed(f"the mailbox of {to} is full")

        return PydanticAIRuns(broker, agent, name="ops", gate=ApprovalGate(broker, to="alice"))

    run = await mailer().start("mail bob")
    await broker.resolve(run.waiting_on[0], {"approve": True}, by="alice")
    claimed = await broker.claim_run(["ops"], worker="w1", lease=BOUND)
    assert claimed is not None
    said = "m1 failed: the mailbox of bob@example.com is full"
    assert await mailer().resume(claimed, {}) == said
    # The worker died before completing the run; another one resumes it from the same state.
    assert await mailer().resume(claimed, {}) == said
    assert started == ["bob@example.com"]
    (record,) = await call_records(broker, run.id)
    assert (record["outcome"], record["ended"], record["output"]) == (
        "ran",
        "failed",
        "the mailbox of bob@example.com is full",
    )


async def test_a_pydantic_ai_tool_that_asks_for_approval_itself_is_held_for_a_person(broker: Broker) -> None:
    ran: list[str] = []

    def decide(messages: list[ModelMessage], info: AgentInfo) -> PaiResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return PaiResponse(parts=[ToolCallPart("transfer", {"amount": 900}, tool_call_id="t1")])
        return PaiResponse(parts=[TextPart(str(returns[-1].content))])

    agent = Agent(FunctionModel(decide))

    @agent.tool
    def transfer(ctx: RunContext[None], amount: int) -> str:
        if amount > 500 and not ctx.tool_call_approved:
            raise ApprovalRequired
        ran.append(f"transfer {amount}")
        return f"sent {amount}"

    runs = PydanticAIRuns(broker, agent, name="ops", gate=ApprovalGate(broker, to="alice"))
    run = await runs.start("pay")
    assert run.status is RunStatus.WAITING_FOR_APPROVAL and ran == []
    (approval,) = [await broker.get(i) for i in run.waiting_on]
    assert (approval.origin.tool_name, approval.context["arguments"]) == ("transfer", {"amount": 900})
    await broker.resolve(approval.id, {"approve": True}, by="alice")
    done = await resume_ready(broker, runs.handlers())
    assert (done.status, done.result, ran) == (RunStatus.COMPLETED, "sent 900", ["transfer 900"])


# -- OpenAI Agents SDK: the tools of the agents an agent hands off to, or uses as tools -----------


class Turns(Model):
    """A fake model whose turns are `script(outputs)`: the outputs of the calls made so far, by call id."""

    def __init__(self, script: Any) -> None:
        self.script = script

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        items = input if isinstance(input, list) else []
        outputs = {
            i["call_id"]: i["output"] for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"
        }
        made: list[Any] = []
        for step in self.script(outputs):
            if isinstance(step, str):
                content = [ResponseOutputText(text=step, type="output_text", annotations=[])]
                made.append(
                    ResponseOutputMessage(
                        id="m1", content=content, role="assistant", status="completed", type="message"
                    )
                )
            else:
                name, args, call_id = step
                made.append(
                    ResponseFunctionToolCall(
                        arguments=json.dumps(args), call_id=call_id, name=name, type="function_call"
                    )
                )
        return ModelResponse(output=made, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def shipper_agent(ran: list[str]) -> OpenAIAgent[Any]:
    """An agent whose unmarked `deploy` tool deploys to prod once, then says what it returned."""

    @function_tool
    def deploy(env: str) -> str:
        """Deploy."""
        ran.append(env)
        return f"deployed to {env}"

    def script(outputs: dict[str, str]) -> list[Any]:
        return [f"shipper: {outputs['s1']}"] if "s1" in outputs else [("deploy", {"env": "prod"}, "s1")]

    return OpenAIAgent(name="shipper", model=Turns(script), tools=[deploy])


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize("shape", ["agent", "handoff"])
async def test_the_gate_decides_the_tools_of_an_agent_handed_off_to(broker: Broker, shape: str) -> None:
    from agents import handoff

    ran: list[str] = []
    shipper = shipper_agent(ran)
    triage = OpenAIAgent(
        name="triage",
        model=Turns(lambda outputs: [("transfer_to_shipper", {}, "h1")]),
        handoffs=[shipper if shape == "agent" else handoff(shipper)],
    )
    shipper.handoffs = [triage]  # handing back: the agents make a cycle
    gate = ApprovalGate(broker, policies={"deploy": "always"}, to="alice")
    runs = OpenAIAgentsRuns(broker, triage, name="ops", gate=gate, run_config=RunConfig(tracing_disabled=True))
    run = await runs.start("ship")
    assert run.status is RunStatus.WAITING_FOR_APPROVAL and ran == []
    (approval,) = [await broker.get(i) for i in run.waiting_on]
    assert (approval.origin.tool_name, approval.context["policy"]) == ("deploy", "always")
    await broker.resolve(approval.id, {"approve": True}, by="alice")
    done = await resume_ready(broker, runs.handlers())
    assert (done.status, done.result, ran) == (RunStatus.COMPLETED, "shipper: deployed to prod", ["prod"])
    assert getattr(shipper.tools[0], "needs_approval", None) is False  # your agents are not changed


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_an_agent_used_as_a_tool_needs_a_gated_copy_and_then_its_tools_pause_the_run(broker: Broker) -> None:
    from interlock.integrations.openai_agents import gate_tools

    ran: list[str] = []
    shipper = shipper_agent(ran)

    def triage(tool: Any) -> OpenAIAgent[Any]:
        def script(outputs: dict[str, str]) -> list[Any]:
            return [f"triage: {outputs['t1']}"] if "t1" in outputs else [("shipping", {"input": "ship"}, "t1")]

        return OpenAIAgent(name="triage", model=Turns(script), tools=[tool])

    gate = ApprovalGate(broker, policies={"deploy": "always"}, to="alice")
    offline = RunConfig(tracing_disabled=True)
    plain = triage(shipper.as_tool(tool_name="shipping", tool_description="Ship."))
    with pytest.raises(ValueError, match=r"'deploy'.*agent 'shipper'.*gate_tools\(.*\)\.as_tool"):
        OpenAIAgentsRuns(broker, plain, name="ops", gate=gate, run_config=offline)
    gated = triage(gate_tools(shipper).as_tool(tool_name="shipping", tool_description="Ship."))
    runs = OpenAIAgentsRuns(broker, gated, name="ops", gate=gate, run_config=offline)
    run = await runs.start("ship")
    assert run.status is RunStatus.WAITING_FOR_APPROVAL and ran == []
    (approval,) = [await broker.get(i) for i in run.waiting_on]
    assert (approval.origin.tool_name, approval.origin.tool_call_id) == ("deploy", "s1")
    await broker.resolve(approval.id, {"approve": True}, by="alice")
    done = await resume_ready(broker, runs.handlers())
    assert (done.status, done.result, ran) == (RunStatus.COMPLETED, "triage: shipper: deployed to prod", ["prod"])


def lower_case(env: str) -> str:
    """A check of the tool's own, beyond its JSON schema."""
    if env != env.lower():
        raise ValueError("env must be lower case")
    return env


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_arguments_a_person_edited_that_the_pydantic_ai_tool_refuses_do_not_run_and_the_model_reads_why(
    broker: Broker,
) -> None:
    ran: list[str] = []
    calls = [ToolCallPart("deploy", {"env": "prod"}, tool_call_id="d1"), ToolCallPart("deploy", {"env": "qa"}, "d2")]

    def decide(messages: list[ModelMessage], info: AgentInfo) -> PaiResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return PaiResponse(parts=list(calls))
        return PaiResponse(parts=[TextPart(" | ".join(f"{r.tool_name}: {r.content}" for r in returns))])

    agent = Agent(FunctionModel(decide))

    @agent.tool_plain(requires_approval=True)
    def deploy(env: Annotated[str, AfterValidator(lower_case)]) -> str:
        ran.append(env)
        return f"deployed to {env}"

    runs = PydanticAIRuns(broker, agent, name="ops", gate=ApprovalGate(broker, to="alice"))
    run = await runs.start("ship")
    first, second = [await broker.get(i) for i in run.waiting_on]
    await broker.resolve(first.id, {"approve": True, "arguments": {"env": "PROD"}}, by="alice")  # its schema takes it
    reason = 'Not qa — «frozen»\nuntil "Monday"'
    await broker.reject(second.id, reason, by="alice")
    done = await resume_ready(broker, runs.handlers())
    assert done.status is RunStatus.COMPLETED and ran == []
    edited, denied = str(done.result).split(" | ")
    assert edited.startswith("deploy: The person approved this call with arguments they edited, which the tool refuses")
    assert "env must be lower case" in edited and '{"env": "PROD"}' in edited
    assert denied == f"deploy: {reason}"


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_a_pydantic_ai_call_whose_id_the_model_gave_an_earlier_call_is_asked_about_and_runs_again(
    broker: Broker,
) -> None:
    ran: list[str] = []

    def decide(messages: list[ModelMessage], info: AgentInfo) -> PaiResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if len(returns) < 2:  # the same call, numbered afresh each turn
            return PaiResponse(parts=[ToolCallPart("deploy", {"env": "prod"}, tool_call_id="call_1")])
        return PaiResponse(parts=[TextPart(" then ".join(str(r.content) for r in returns))])

    agent = Agent(FunctionModel(decide))

    @agent.tool_plain(requires_approval=True)
    def deploy(env: str) -> str:
        ran.append(env)
        return f"deploy #{len(ran)} to {env}"

    runs = PydanticAIRuns(broker, agent, name="ops", gate=ApprovalGate(broker, to="alice"))
    run = await runs.start("ship twice")
    await broker.resolve(run.waiting_on[0], {"approve": True}, by="alice")
    again = await resume_ready(broker, runs.handlers())
    assert again.status is RunStatus.WAITING_FOR_APPROVAL and ran == ["prod"]
    (second,) = again.waiting_on
    assert second != run.waiting_on[0]
    await broker.resolve(second, {"approve": True}, by="alice")
    done = await resume_ready(broker, runs.handlers())
    assert (done.status, done.result) == (RunStatus.COMPLETED, "deploy #1 to prod then deploy #2 to prod")
    assert ran == ["prod", "prod"]


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_an_agent_a_handoff_makes_on_each_call_is_gated_and_not_kept(broker: Broker) -> None:
    import gc
    import weakref

    from agents import Handoff

    ran: list[str] = []
    made: list[weakref.ref[OpenAIAgent[Any]]] = []

    async def a_new_shipper(ctx: Any, arguments: str) -> OpenAIAgent[Any]:
        shipper = shipper_agent(ran)
        made.append(weakref.ref(shipper))
        return shipper

    to_shipper = Handoff(
        tool_name="transfer_to_shipper",
        tool_description="Hand off to a shipper made for the job.",
        input_json_schema={"type": "object", "properties": {}, "additionalProperties": False},
        on_invoke_handoff=a_new_shipper,
        agent_name="shipper",
    )
    triage = OpenAIAgent(
        name="triage", model=Turns(lambda outputs: [("transfer_to_shipper", {}, "h1")]), handoffs=[to_shipper]
    )
    gate = ApprovalGate(broker, hook=lambda call: Deny("prod is frozen"), to="alice")
    runs = OpenAIAgentsRuns(broker, triage, name="ops", gate=gate, run_config=RunConfig(tracing_disabled=True))
    for _ in range(2):
        run = await runs.start("ship")
        assert run.status is RunStatus.COMPLETED, run
        assert str(run.result).startswith("shipper: ") and "prod is frozen" in str(run.result)  # the gate refused
    assert ran == []
    del run
    gc.collect()
    assert len(made) == 2 and all(ref() is None for ref in made)  # neither shipper is kept
