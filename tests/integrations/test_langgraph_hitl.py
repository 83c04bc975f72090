"""LangChain's create_agent with HumanInTheLoopMiddleware behind interlock: each gated tool
call becomes a gate approval; the person's approve / edit / deny comes back as the
middleware's own decisions, in both of its interrupt modes."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver

from interlock import Broker
from interlock.agent import ApprovalGate
from interlock.integrations.langgraph import LangGraphAgent
from interlock.model import RunStatus
from interlock.runs import Worker

pytestmark = pytest.mark.anyio

sent_mails: list[dict[str, Any]] = []
model_calls: list[list[BaseMessage]] = []  # the history the model was given, each time


def send_email(to: str, subject: str) -> str:
    """Send an email."""
    sent_mails.append({"to": to, "subject": subject})
    return f"sent to {to}"


def read_inbox() -> str:
    """Read the inbox."""
    return "2 new mails"


class Scripted(BaseChatModel):
    """A chat model that decides from the history: call the tools, then report what they said."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Scripted:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        model_calls.append(list(messages))
        results = [m for m in messages if isinstance(m, ToolMessage)]
        if results:
            reply = AIMessage(content=" | ".join(str(m.content) for m in results))
        else:
            reply = AIMessage(
                content="",
                tool_calls=[
                    {"name": "read_inbox", "args": {}, "id": "call-read"},
                    {"name": "send_email", "args": {"to": "ops@example.com", "subject": "1.4"}, "id": "call-send"},
                ],
            )
        return ChatResult(generations=[ChatGeneration(message=reply)])


def agent_graph(mode: str) -> Any:
    middleware = HumanInTheLoopMiddleware(
        interrupt_on={"send_email": True, "read_inbox": True},
        interrupt_mode=mode,  # type: ignore[arg-type]
    )
    return create_agent(Scripted(), [send_email, read_inbox], middleware=[middleware], checkpointer=InMemorySaver())


@pytest.fixture(autouse=True)
def clear_sent() -> None:
    sent_mails.clear()
    model_calls.clear()


@pytest.mark.parametrize("mode", ["batched", "per_call"])
async def test_the_gate_decides_each_gated_call_and_the_person_edits_one(broker: Broker, mode: str) -> None:
    gate = ApprovalGate(broker, policies={"send_*": "always"}, auto_allow=["read_*"], to="alice")
    agent = LangGraphAgent(broker, agent_graph(mode), name="assistant", to="alice", gate=gate)
    run = await agent.start({"messages": [{"role": "user", "content": "mail ops"}]})
    assert run.status is RunStatus.WAITING_FOR_APPROVAL
    (request_id,) = run.waiting_on  # read_inbox is auto-allowed: only send_email asks
    request = await broker.get(request_id)
    assert request.kind == "approval" and request.context["tool"] == "send_email"
    edited = {"to": "ops@example.com", "subject": "release 1.4.1"}
    await broker.resolve(request_id, {"approve": True, "arguments": edited}, by="alice")
    done = await Worker(broker, agent.handlers(), name="w").run_once()
    assert done is not None and done.status is RunStatus.COMPLETED, done and done.error
    assert sent_mails == [edited]
    said = done.result["messages"][-1]["content"]  # what the tools told the model, edit notice included
    assert said.startswith("2 new mails | ") and said.endswith("sent to ops@example.com")
    assert "release 1.4.1" in said


@pytest.mark.parametrize("mode", ["batched", "per_call"])
async def test_a_denial_reaches_the_model_as_the_persons_reason(broker: Broker, mode: str) -> None:
    gate = ApprovalGate(broker, policies={"*": "always"}, auto_allow=["read_*"], to="alice")
    agent = LangGraphAgent(broker, agent_graph(mode), name="assistant", to="alice", gate=gate)
    run = await agent.start({"messages": [{"role": "user", "content": "mail ops"}]})
    await broker.resolve(run.waiting_on[0], {"approve": False}, by="alice", comment="not before the release")
    done = await Worker(broker, agent.handlers(), name="w").run_once()
    assert done is not None and done.status is RunStatus.COMPLETED, done and done.error
    assert sent_mails == []
    assert "not before the release" in done.result["messages"][-1]["content"]


async def test_a_turn_after_a_run_ended_at_its_approval_answers_the_calls_left_open(broker: Broker) -> None:
    """The ended run's model turn asked for calls nobody decided; the thread's next turn
    gave the model that turn and then the new message, with no answer to those calls in
    between, which chat models refuse. Each is answered as not run, before the new message."""
    gate = ApprovalGate(broker, policies={"*": "always"}, to="alice")
    agent = LangGraphAgent(broker, agent_graph("batched"), name="assistant", to="alice", gate=gate)
    first = await agent.start({"messages": [{"role": "user", "content": "mail ops"}]}, thread_id="t-1")
    assert first.status is RunStatus.WAITING_FOR_APPROVAL
    assert await broker.cancel_run(first.id, by="alice")
    second = await agent.start({"messages": [{"role": "user", "content": "never mind"}]}, thread_id="t-1")
    assert second.id != first.id and second.status is RunStatus.COMPLETED, second.error
    history = model_calls[-1]
    asked = next(m for m in history if isinstance(m, AIMessage) and m.tool_calls)
    after = history[history.index(asked) + 1 :]
    closed = [m for m in after[:2] if isinstance(m, ToolMessage)]
    assert sorted(m.tool_call_id for m in closed) == ["call-read", "call-send"]
    assert all(m.status == "error" and "No result was recorded" in str(m.content) for m in closed)
    assert after[2].content == "never mind"
    assert sent_mails == []


async def test_a_turn_that_answers_a_call_left_open_itself_keeps_its_own_answer(broker: Broker) -> None:
    """A call the new turn's input answers (a tool run by hand) is the input's to answer:
    only the others get the note that no result was recorded."""
    gate = ApprovalGate(broker, policies={"*": "always"}, to="alice")
    agent = LangGraphAgent(broker, agent_graph("batched"), name="assistant", to="alice", gate=gate)
    first = await agent.start({"messages": [{"role": "user", "content": "mail ops"}]}, thread_id="t-2")
    assert await broker.cancel_run(first.id, by="alice")
    by_hand = ToolMessage("sent by hand", tool_call_id="call-send", name="send_email")
    turn = {"messages": [by_hand, {"role": "user", "content": "I sent it myself"}]}
    second = await agent.start(turn, thread_id="t-2")
    assert second.status is RunStatus.COMPLETED, second.error
    results = {m.tool_call_id: str(m.content) for m in model_calls[-1] if isinstance(m, ToolMessage)}
    assert results["call-send"] == "sent by hand" and "No result was recorded" in results["call-read"]
    assert len([m for m in model_calls[-1] if isinstance(m, ToolMessage)]) == 2
