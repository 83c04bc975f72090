"""Approvals given while the agent was not running, and agents that come back for them.

An approval's identity is (run or session, call id, argument digest): the same call asked
again by a restarted agent finds the approval made the first time; given meanwhile, it
authorizes that call exactly once. A waiting call cut short (Ctrl-C) leaves an approval,
or any request made with an idempotency key, pending for the agent to find again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest

from interlock import Broker, Confirm, Status, Text
from interlock.agent import ApprovalGate, ToolCall, ToolFunctions, ToolRunner, requires_approval
from interlock.agent.calls import arguments_digest
from interlock.errors import ApprovalDenied

from .support import Inbox, bounded

pytestmark = pytest.mark.anyio


class Deploys:
    def __init__(self) -> None:
        self.ran: list[dict[str, Any]] = []

    def runner(self, broker: Broker) -> ToolRunner:
        async def deploy(**arguments: Any) -> str:
            self.ran.append(arguments)
            return "deployed"

        return ToolRunner(
            broker,
            [ToolFunctions({"deploy": deploy})],
            gate=ApprovalGate(broker, to="alice", policies={"deploy": "always"}),
        )


@contextlib.asynccontextmanager
async def elsewhere(broker: Broker, connect: Callable[..., Broker], backend: str) -> AsyncIterator[Broker]:
    """Another process on the same store (in memory, there is no other: the same broker)."""
    if backend == "memory":
        yield broker
        return
    async with connect() as other:
        yield other


async def cut(task: asyncio.Task[Any]) -> None:
    """Ctrl-C on a waiting agent: its task is cancelled."""
    await anyio.wait_all_tasks_blocked()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await bounded(task)


async def test_an_approval_given_while_the_agent_was_down_runs_that_call_exactly_once(
    broker: Broker, connect: Callable[..., Broker], backend: str
) -> None:
    deploys = Deploys()
    call = ToolCall("deploy", {"env": "prod"}, "call_1", session="s1", agent="ops")
    first = asyncio.create_task(deploys.runner(broker).run(call))
    request = await Inbox(broker).next()
    await cut(first)
    assert (await broker.get(request.id)).status is Status.PENDING  # the person can still decide

    assert await broker.resolve(request.id, {"approve": True}, by="alice")
    async with elsewhere(broker, connect, backend) as restarted:
        result = await bounded(deploys.runner(restarted).run(call))
        assert result.content == "deployed"
        again = await bounded(deploys.runner(restarted).run(call))
        assert again.refused and "already decided" in again.content
        assert len((await restarted.list(kind="approval")).items) == 1
    assert deploys.ran == [{"env": "prod"}]


async def test_a_restarted_agent_asking_for_the_same_call_finds_the_pending_approval(
    broker: Broker, connect: Callable[..., Broker], backend: str
) -> None:
    deploys = Deploys()
    call = ToolCall("deploy", {"env": "prod"}, "call_1", session="s1", agent="ops")
    first = asyncio.create_task(deploys.runner(broker).run(call))
    request = await Inbox(broker).next()
    await cut(first)

    async with elsewhere(broker, connect, backend) as restarted:
        second = asyncio.create_task(deploys.runner(restarted).run(call))
        await anyio.wait_all_tasks_blocked()
        pending = (await restarted.list(kind="approval", status=Status.PENDING)).items
        assert [r.id for r in pending] == [request.id]  # no second approval in the inbox
        await restarted.resolve(request.id, {"approve": True}, by="alice")
        assert (await bounded(second)).content == "deployed"
    assert deploys.ran == [{"env": "prod"}]


async def test_a_denial_given_while_the_agent_was_down_reaches_it_with_the_reason_verbatim(
    broker: Broker, connect: Callable[..., Broker], backend: str
) -> None:
    deploys = Deploys()
    call = ToolCall("deploy", {"env": "prod"}, "call_1", session="s1", agent="ops")
    first = asyncio.create_task(deploys.runner(broker).run(call))
    request = await Inbox(broker).next()
    await cut(first)
    await broker.resolve(request.id, {"approve": False}, by="alice", comment="Not on a Friday.")

    async with elsewhere(broker, connect, backend) as restarted:
        result = await bounded(deploys.runner(restarted).run(call))
    assert (result.denied, result.content) == (True, "Not on a Friday.")
    assert deploys.ran == []


async def test_the_same_call_in_another_run_is_another_approval(broker: Broker) -> None:
    deploys = Deploys()
    runner = deploys.runner(broker)
    inbox = Inbox(broker)
    for run in ("run_a", "run_b"):
        await broker.start_run("ops", run_id=run)
        task = asyncio.create_task(runner.run(ToolCall("deploy", {"env": "prod"}, "call_1", run=run, agent="ops")))
        request = await inbox.next()
        assert request.origin.run == run
        await broker.resolve(request.id, {"approve": True}, by="alice")
        assert (await bounded(task)).content == "deployed"
    assert deploys.ran == [{"env": "prod"}, {"env": "prod"}]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param({"run": "run_a"}, {"session": "run=run_a"}, id="a-session-named-like-a-run"),
        pytest.param({"session": "a:b", "id": "c"}, {"session": "a", "id": "b:c"}, id="the-separator-moved"),
    ],
)
async def test_calls_whose_scope_and_id_only_spell_alike_are_two_approvals(
    broker: Broker, first: dict[str, str], second: dict[str, str]
) -> None:
    """The first call's approval, given and spent, is not found again for the second call:
    that one is asked afresh, not refused as already decided."""
    deploys = Deploys()
    runner = deploys.runner(broker)
    inbox = Inbox(broker)
    asked = []
    for where in (first, second):
        if "run" in where:
            await broker.start_run("ops", run_id=where["run"])
        scope = {"run": where.get("run"), "session": where.get("session")}
        call = ToolCall("deploy", {"env": "prod"}, where.get("id", "call_1"), agent="ops", **scope)
        task = asyncio.create_task(runner.run(call))
        request = await inbox.next()
        asked.append(request.id)
        await broker.resolve(request.id, {"approve": True}, by="alice")
        assert (await bounded(task)).content == "deployed"
    assert asked[0] != asked[1]
    assert deploys.ran == [{"env": "prod"}, {"env": "prod"}]


async def test_a_call_with_a_long_session_and_id_still_gets_its_approval_once(broker: Broker) -> None:
    """A session and a call id each as long as a name may be: the approval is made, and
    the same call asked again finds it instead of making another."""
    deploys = Deploys()
    call = ToolCall("deploy", {"env": "prod"}, "c" * 256, session="s" * 256, agent="ops")
    first = asyncio.create_task(deploys.runner(broker).run(call))
    request = await Inbox(broker).next()
    await cut(first)
    second = asyncio.create_task(deploys.runner(broker).run(call))
    await anyio.wait_all_tasks_blocked()
    assert [r.id for r in (await broker.list(kind="approval")).items] == [request.id]
    await broker.resolve(request.id, {"approve": True}, by="alice")
    assert (await bounded(second)).content == "deployed"
    assert deploys.ran == [{"env": "prod"}]


async def test_requires_approval_gives_a_call_a_stable_id_so_a_restart_asks_no_second_time(
    broker: Broker, connect: Callable[..., Broker], backend: str
) -> None:
    ran: list[int] = []

    def scale_with(b: Broker) -> Callable[..., Any]:
        @requires_approval(ApprovalGate(b, to="alice"), session="s1", agent="ops")
        async def scale(replicas: int) -> str:
            ran.append(replicas)
            return f"x{replicas}"

        return scale

    first = asyncio.create_task(scale_with(broker)(5))
    request = await Inbox(broker).next()
    await cut(first)
    async with elsewhere(broker, connect, backend) as restarted:
        scale = scale_with(restarted)
        second = asyncio.create_task(scale(5))
        await anyio.wait_all_tasks_blocked()
        assert [r.id for r in (await restarted.list(kind="approval")).items] == [request.id]
        await restarted.resolve(request.id, {"approve": True}, by="alice")
        assert await bounded(second) == "x5"

        inbox = Inbox(restarted)
        inbox.cursor = await restarted.last_event_id()
        third = asyncio.create_task(scale(5))  # called again in this process: a new call
        later = await inbox.next()
        assert later.id != request.id
        await restarted.resolve(later.id, {"approve": False}, by="alice", comment="enough")
        with pytest.raises(ApprovalDenied):
            await bounded(third)
    assert ran == [5]


async def test_ctrl_c_on_an_ask_with_an_idempotency_key_leaves_it_for_the_next_run(
    broker: Broker, connect: Callable[..., Broker], backend: str
) -> None:
    first = asyncio.create_task(broker.ask(Confirm("Ship it?"), idempotency_key="ship-42", requester="ops"))
    request = await Inbox(broker).next()
    await cut(first)
    assert (await broker.get(request.id)).status is Status.PENDING

    async with elsewhere(broker, connect, backend) as restarted:
        again = asyncio.create_task(restarted.ask(Confirm("Ship it?"), idempotency_key="ship-42", requester="ops"))
        await anyio.wait_all_tasks_blocked()
        await restarted.resolve(request.id, True)
        assert await bounded(again) is True


async def test_ctrl_c_on_a_plain_ask_still_withdraws_it(broker: Broker) -> None:
    first = asyncio.create_task(broker.ask(Text("Name?")))
    request = await Inbox(broker).next()
    await cut(first)
    stored = await broker.watch(request.id, timeout=10)
    assert stored.status is Status.CANCELLED and stored.response is not None
    assert stored.response.cause == "withdrawn"


async def test_an_approval_asked_by_an_earlier_version_is_found_by_the_same_call(broker: Broker) -> None:
    """interlock 0.1.0 named a gate approval `approval:<run=R or session>:<call id>:<digest>`:
    where that reads one way it is still the approval's name, so an agent restarted on
    this version finds the approval a person may be deciding, instead of asking again."""
    deploys = Deploys()
    call = ToolCall("deploy", {"env": "prod"}, "call:7", session="s1", agent="ops")
    first = asyncio.create_task(deploys.runner(broker).run(call))
    request = await Inbox(broker).next()
    await cut(first)
    digest = arguments_digest("deploy", {"env": "prod"})
    assert request.idempotency_key == f"approval:s1:call:7:{digest}"
