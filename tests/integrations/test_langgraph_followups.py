"""LangGraph: messages a person sends to a busy run reach the graph at its turn boundaries,
with the answers when a parked run resumes, and as the next turn's input once it ends."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AnyMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from interlock import Broker
from interlock.integrations.langgraph import LangGraphAgent, approve
from interlock.model import RunStatus
from interlock.runs import Worker

pytestmark = pytest.mark.anyio


class Chat(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    log: list[str]


def said(state: Chat) -> list[str]:
    return [str(m.content) for m in state.get("messages", []) if m.type == "human"]


async def replayed(broker: Broker, run_id: str) -> list[str]:
    return [e.data["text"] for e in await broker.find_events(run=run_id) if e.type == "followup_replayed"]


async def test_a_message_held_while_parked_reaches_the_graph_with_the_answer(broker: Broker) -> None:
    def deploy(state: Chat) -> dict[str, Any]:
        arguments = approve("deploy", {"env": "prod"})
        return {"log": [f"deployed {arguments['env']} having heard {said(state)}"]}

    builder = StateGraph(Chat)
    builder.add_node("deploy", deploy)
    builder.add_edge(START, "deploy")
    builder.add_edge("deploy", END)
    agent = LangGraphAgent(broker, builder.compile(checkpointer=InMemorySaver()), name="ops", to="alice")

    run = await agent.start({"messages": [{"role": "user", "content": "ship it"}]})
    assert run.status is RunStatus.WAITING_FOR_APPROVAL
    assert (await broker.send_message(run.id, "canary first, please", by="alice")).outcome == "queued"
    await broker.resolve(run.waiting_on[0], True, by="alice")
    done = await Worker(broker, agent.handlers()).run_once()
    assert done is not None and done.status is RunStatus.COMPLETED
    assert done.result["log"] == ["deployed prod having heard ['ship it', 'canary first, please']"]
    assert await replayed(broker, run.id) == ["canary first, please"]


async def test_a_message_sent_while_the_graph_works_is_the_input_of_its_next_turn(broker: Broker) -> None:
    async def cook(state: Chat) -> dict[str, Any]:
        heard = said(state)
        if len(heard) == 1:  # the person writes while the first turn is at work
            sent = await broker.send_message("dinner", "actually, make it vegetarian", by="alice")
            assert sent.outcome == "queued"
        return {"log": [*state.get("log", []), f"cooked for: {heard[-1]}"]}

    builder = StateGraph(Chat)
    builder.add_node("cook", cook)
    builder.add_edge(START, "cook")
    builder.add_edge("cook", END)
    agent = LangGraphAgent(broker, builder.compile(checkpointer=InMemorySaver()), name="chef", to="alice")
    run = await agent.start({"messages": [{"role": "user", "content": "plan dinner"}]}, run_id="dinner")
    assert run.status is RunStatus.COMPLETED
    assert run.result["log"] == ["cooked for: plan dinner", "cooked for: actually, make it vegetarian"]
    assert await replayed(broker, "dinner") == ["actually, make it vegetarian"]
