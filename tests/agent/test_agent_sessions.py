"""Session views, subscribe, clear_session, inform_user and delegation."""

from __future__ import annotations

import asyncio
import io
import json
import logging

import anyio
import pytest

from interlock import Broker, InvalidAnswer, InvalidRequest, Request, Status, Text
from interlock.agent import (
    BrokerUserIO,
    Conversation,
    HumanInputTools,
    InformUserTool,
    Receipt,
    Sessions,
    TerminalUserIO,
    ToolCall,
    ToolRunner,
    UserIOContracts,
    ask_user_tool,
    inform_user,
    user_io_from,
)

from .support import BOUND, Inbox, bounded

pytestmark = pytest.mark.anyio


def ask_tools(broker: Broker) -> HumanInputTools:
    return HumanInputTools(broker, {"ask_user"}, definitions=[ask_user_tool()])


# -- inform_user -------------------------------------------------------------------------------


async def test_inform_user_records_an_update_without_waiting_and_returns_a_receipt(broker: Broker) -> None:
    conversation = Conversation("s1", person="alice", agent="indexer")
    receipt = await bounded(inform_user(broker, "Indexed 40% of the repo", conversation=conversation, data={"pct": 40}))
    events = [e async for e in broker.events()]
    assert [(e.id, e.type) for e in events] == [(receipt.id, "informed")]
    data = events[0].data
    assert (data["message"], data["to"], data["session"], data["agent"]) == (
        "Indexed 40% of the repo",
        "alice",
        "s1",
        "indexer",
    )
    assert data["data"] == {"pct": 40}
    assert (receipt.to, receipt.session, receipt.agent) == ("alice", "s1", "indexer")
    assert (await broker.list()).items == []  # nothing waits on anyone
    with pytest.raises(InvalidRequest):
        await inform_user(broker, "   ")


async def test_the_inform_user_tool_answers_with_the_receipt_at_once(broker: Broker) -> None:
    runner = ToolRunner(broker, [InformUserTool(broker), ask_tools(broker)])
    assert {d.name for d in runner.definitions} == {"inform_user", "ask_user"}
    tool = InformUserTool(broker)
    call = Conversation("s1", person="alice", agent="indexer").call("inform_user", {"message": "Halfway there"})
    result = await bounded(runner.run(call))
    body = json.loads(result.content)
    assert body["delivered"] is True
    (event,) = [e async for e in broker.events()]
    assert body["receipt"] == event.id and event.data["to"] == "alice"
    assert await tool(ToolCall("search")) is None
    assert (await tool(ToolCall("inform_user", {"message": 3}))).is_error
    assert (await tool(ToolCall("inform_user", {"message": " "}))).is_error
    assert tool.definitions[0].parameters["required"] == ["message"]


# -- views -------------------------------------------------------------------------------------


async def test_pending_requests_are_grouped_by_agent_and_has_pending_answers_per_agent(broker: Broker) -> None:
    sessions = Sessions(broker)
    a1 = await broker.create(Text("A1?"), session="s1", agent="planner")
    b1 = await broker.create(Text("B1?"), session="s1", agent="coder")
    a2 = await broker.create(Text("A2?"), session="s1", agent="planner")
    await broker.create(Text("Elsewhere?"), session="s2", agent="planner")
    done = await broker.create(Text("Done?"), session="s1", agent="tester")
    await broker.resolve(done.id, "yes")

    grouped = await sessions.pending("s1")
    assert {agent: [r.id for r in requests] for agent, requests in grouped.items()} == {
        "planner": [a1.id, a2.id],
        "coder": [b1.id],
    }
    assert await sessions.has_pending("s1")
    assert await sessions.has_pending("s1", agent="coder")
    assert not await sessions.has_pending("s1", agent="tester")
    assert not await sessions.has_pending("s3")
    await broker.resolve(b1.id, "ok")
    assert not await sessions.has_pending("s1", agent="coder")


async def test_the_session_lists_which_agents_are_waiting_on_a_person(broker: Broker) -> None:
    sessions = Sessions(broker)
    await broker.create(Text("A?"), session="s1", agent="planner", to="alice")
    await broker.create(Text("B?"), session="s1", agent="coder", to="bob")
    await broker.create(Text("C?"), session="s1", agent="planner", to="alice")
    assert await sessions.waiting_agents("s1") == ["planner", "coder"]
    assert await sessions.waiting_agents("s1", person="alice") == ["planner"]
    assert await sessions.waiting_agents("s2") == []


# -- subscribe ---------------------------------------------------------------------------------


async def test_a_subscriber_is_called_once_for_each_new_request(broker: Broker) -> None:
    await broker.create(Text("Before?"), session="s1")  # made before subscribing: not seen
    seen: list[str] = []
    in_s1: list[str] = []
    last = asyncio.Event()
    last_in_s1 = asyncio.Event()

    async def record(request: Request) -> None:
        seen.append(request.id)
        if request.title == "last":
            last.set()

    def record_s1(request: Request) -> None:
        in_s1.append(request.id)
        if request.title == "last":
            last_in_s1.set()

    async with Sessions(broker) as sessions:
        await sessions.subscribe(record)
        await sessions.subscribe(record_s1, session="s1")
        made = [
            await broker.create(Text("One?"), session="s1"),
            await broker.create(Text("Two?"), session="s2"),
            await broker.create(Text("Three?"), session="s1"),
        ]
        await broker.resolve(made[0].id, "settling is not a new request")
        final = await broker.create(Text("Last?"), title="last", session="s1")
        with anyio.fail_after(BOUND):  # each subscriber follows on its own: wait for both
            await last.wait()
            await last_in_s1.wait()
    assert seen == [r.id for r in made] + [final.id]
    assert in_s1 == [made[0].id, made[2].id, final.id]


async def test_a_failing_subscriber_is_logged_and_the_others_still_run(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    got: list[str] = []
    both = asyncio.Event()
    broken_twice = asyncio.Event()
    broken_calls: list[str] = []

    def broken(request: Request) -> None:
        broken_calls.append(request.id)
        if len(broken_calls) == 2:
            broken_twice.set()  # the failure is logged before this subscriber's task yields
        raise RuntimeError("subscriber bug")

    def fine(request: Request) -> None:
        got.append(request.id)
        if len(got) == 2:
            both.set()

    with caplog.at_level(logging.ERROR, logger="interlock"):
        async with Sessions(broker) as sessions:
            await sessions.subscribe(broken)
            await sessions.subscribe(fine)
            first = await broker.create(Text("One?"))
            second = await broker.create(Text("Two?"))
            with anyio.fail_after(BOUND):
                await both.wait()
                await broken_twice.wait()
    assert got == [first.id, second.id]
    failures = [r for r in caplog.records if r.getMessage().startswith("subscriber")]
    assert len(failures) == 2 and all(r.exc_info for r in failures)


async def test_a_cancelled_subscription_is_not_called_again(broker: Broker) -> None:
    got: list[str] = []
    first_seen = asyncio.Event()

    def record(request: Request) -> None:
        got.append(request.id)
        first_seen.set()

    async with Sessions(broker) as sessions:
        subscription = await sessions.subscribe(record)
        first = await broker.create(Text("One?"))
        with anyio.fail_after(BOUND):
            await first_seen.wait()
        await subscription.aclose()
        await broker.create(Text("Two?"))
        await anyio.wait_all_tasks_blocked()
    assert got == [first.id]


# -- clear_session -----------------------------------------------------------------------------


async def test_clear_session_wakes_every_blocked_waiter_with_a_cancellation(broker: Broker, inbox: Inbox) -> None:
    tools = ask_tools(broker)
    sessions = Sessions(broker)
    calls = [
        ToolCall("ask_user", {"question": "One?"}, session="s1", agent="planner"),
        ToolCall("ask_user", {"question": "Two?"}, session="s1", agent="coder"),
        ToolCall("ask_user", {"question": "Other?"}, session="s2", agent="planner"),
    ]
    tasks = [asyncio.create_task(tools(call)) for call in calls]
    made = [await inbox.next() for _ in calls]  # in commit order, which need not be call order
    in_s1 = next(r for r in made if r.origin.session == "s1")
    waiter = asyncio.create_task(broker.wait(in_s1.id))
    await anyio.wait_all_tasks_blocked()

    cleared = await sessions.clear_session("s1")

    assert sorted(cleared) == sorted(r.id for r in made if r.origin.session == "s1")
    results = {call.arguments["question"]: await bounded(task) for call, task in zip(calls, tasks[:2], strict=False)}
    for result in results.values():
        assert (result.is_error, result.refused) == (True, False)
        assert json.loads(result.content)["error"] == "Tool 'ask_user' failed"
    with pytest.raises(Exception, match="the session was cleared"):
        await bounded(waiter)
    other = next(r for r in made if r.origin.session == "s2")
    assert (await broker.get(other.id)).status is Status.PENDING
    assert not await sessions.has_pending("s1")
    await broker.resolve(other.id, "still answerable")
    assert (await bounded(tasks[2])).content == "still answerable"


# -- delegation --------------------------------------------------------------------------------


async def test_a_delegates_question_reaches_the_root_person_with_the_chain_recorded(
    broker: Broker, inbox: Inbox
) -> None:
    root = Conversation("s1", person="alice", agent="planner", channel="chat")
    researcher = root.delegate("researcher")
    fetcher = researcher.delegate("fetcher", run="run-7")
    assert fetcher.delegation == ("planner", "researcher") and fetcher.root_agent == "planner"

    await broker.start_run("fetcher", run_id="run-7")
    tools = ask_tools(broker)
    task = asyncio.create_task(tools(fetcher.call("ask_user", {"question": "Which mirror?"}, id="c1")))
    request = await inbox.next()
    assert request.to == "alice"
    assert (request.origin.session, request.origin.agent, request.origin.actor) == ("s1", "fetcher", "alice")
    assert (request.origin.channel, request.origin.run, request.origin.tool_call_id) == ("chat", "run-7", "c1")
    assert request.origin.delegation == ("planner", "researcher")

    sessions = Sessions(broker)
    assert await sessions.waiting_agents("s1", person="alice") == ["fetcher"]
    assert await sessions.has_pending("s1", agent="fetcher")
    await broker.resolve(request.id, "eu-1", by="alice")
    assert (await bounded(task)).content == "eu-1"
    assert await sessions.waiting_agents("s1") == []


def test_only_a_conversation_with_an_agent_delegates() -> None:
    with pytest.raises(ValueError, match="with an agent"):
        Conversation("s1", person="alice").delegate("helper")
    with pytest.raises(ValueError, match="needs a name"):
        Conversation("s1", agent="planner").delegate("")
    plain = Conversation("s1", person="alice", agent="planner").call("ask_user", {"question": "?"})
    assert plain.delegation == () and plain.to == "alice" and plain.id


async def test_a_request_is_answered_by_session_agent_and_correlation_id(broker: Broker, inbox: Inbox) -> None:
    sessions = Sessions(broker)
    mine = await broker.create(Text("Colour?"), session="s1", agent="painter", correlation_id="corr-1")
    other_agent = await broker.create(Text("Colour?"), session="s1", agent="framer", correlation_id="corr-1")
    by_call = await broker.create(Text("Size?"), session="s1", agent="painter", tool_call_id="call-9")

    assert await sessions.resolve("s1", "painter", "corr-1", "blue", by="alice")
    assert await sessions.resolve("s1", "painter", "call-9", "large")
    assert (await broker.wait(mine.id)).answers == {"text": "blue"}
    assert (await broker.wait(by_call.id)).answers == {"text": "large"}
    assert (await broker.get(other_agent.id)).status is Status.PENDING
    # Nothing pending under that key any more, or under keys that name nothing.
    assert await sessions.resolve("s1", "painter", "corr-1", "red") is False
    assert await sessions.resolve("s2", "framer", "corr-1", "red") is False
    with pytest.raises(InvalidAnswer):  # checked like any answer, and nothing changes
        await sessions.resolve("s1", "framer", "corr-1", 42)
    assert (await broker.get(other_agent.id)).status is Status.PENDING


async def test_progress_updates_are_read_per_session_and_followed_live(broker: Broker) -> None:
    async with Sessions(broker) as sessions:
        heard: list[str] = []
        both = asyncio.Event()

        def hear(receipt: Receipt) -> None:
            heard.append(receipt.message)
            if len(heard) == 2:
                both.set()

        await sessions.subscribe_user_updates(hear, session="s1")
        first = await inform_user(broker, "Started", session="s1", agent="painter")
        await inform_user(broker, "Elsewhere", session="s2")
        await broker.create(Text("Colour?"), session="s1")  # not an update
        await inform_user(broker, "Half done", session="s1", agent="painter")

        updates = await sessions.user_updates("s1")
        assert [u.message for u in updates] == ["Started", "Half done"]
        assert [u.message for u in await sessions.user_updates("s1", after=first.id)] == ["Half done"]
        with anyio.fail_after(30):
            await both.wait()
        assert heard == ["Started", "Half done"]


# -- user-IO contracts ----------------------------------------------------------------------------


async def test_each_agents_updates_are_delivered_by_its_own_user_io_contract(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    console = io.StringIO()
    contracts = UserIOContracts(
        "broker",
        agents={
            "painter": TerminalUserIO(console),
            "framer": {"type": "log", "params": {"level": "WARNING"}},
        },
    )
    tool = InformUserTool(broker, contracts=contracts)
    with caplog.at_level(logging.INFO, logger="interlock.updates"):
        for agent, message in (("painter", "Primer on"), ("framer", "Frame cut"), ("sweeper", "Floor swept")):
            result = await tool(ToolCall("inform_user", {"message": message}, agent=agent, session="s1"))
            assert result is not None and json.loads(result.content)["delivered"] is True
    assert console.getvalue() == "[painter] Primer on\n"
    logged = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "interlock.updates"]
    assert logged == [("WARNING", "update for (nobody named) from framer: Frame cut")]
    # Whatever delivered them, every update is in the log for the inbox and the streams.
    updates = await Sessions(broker).user_updates("s1")
    assert [(u.agent, u.message) for u in updates] == [
        ("painter", "Primer on"),
        ("framer", "Frame cut"),
        ("sweeper", "Floor swept"),
    ]


async def test_an_update_whose_delivery_fails_is_still_recorded(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        async def deliver(self, receipt: Receipt) -> None:
            raise OSError("the terminal is gone")

    with caplog.at_level(logging.ERROR, logger="interlock"):
        receipt = await inform_user(broker, "Half done", session="s1", agent="painter", contracts=Broken())
    assert [u.id for u in await Sessions(broker).user_updates("s1")] == [receipt.id]
    assert any("failed to deliver" in r.getMessage() for r in caplog.records)


def test_a_user_io_contract_is_named_or_given() -> None:
    assert isinstance(user_io_from("terminal"), TerminalUserIO)
    assert isinstance(UserIOContracts().for_agent("anyone"), BrokerUserIO)
    with pytest.raises(ValueError, match="unknown user-IO contract 'email'"):
        user_io_from("email")
    with pytest.raises(ValueError, match="bad params"):
        user_io_from({"type": "terminal", "params": {"colour": True}})
    with pytest.raises(ValueError, match="unknown log level"):
        user_io_from({"type": "log", "params": {"level": "LOUD"}})
    with pytest.raises(TypeError):
        user_io_from(42)  # type: ignore[arg-type]
