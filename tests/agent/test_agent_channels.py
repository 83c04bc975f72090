"""Channels on a shared broker: whose hooks hear of a request, what closing a channel stops,
which door a request came through, and which calls a human-input tool serves."""

from __future__ import annotations

import asyncio
import logging

import anyio
import pytest

import interlock
from interlock import Broker, Closed, Request, Status, Text
from interlock.agent import HumanInputTools, ToolCall, ToolFunctions, ToolResult, ToolRunner, ask_user_tool

from .support import Inbox, bounded

pytestmark = pytest.mark.anyio


class Heard(list[str | None]):
    """What hooks heard, with a bounded wait until there are `n` entries."""

    def __init__(self) -> None:
        super().__init__()
        self._grew = asyncio.Event()

    def add(self, value: str | None) -> None:
        self.append(value)
        self._grew.set()

    async def until(self, n: int) -> Heard:
        with anyio.fail_after(30):
            while len(self) < n:
                self._grew.clear()
                await self._grew.wait()
        return self


async def test_a_runners_input_hooks_hear_only_of_its_own_channels(broker: Broker) -> None:
    heard = {"support": Heard(), "sales": Heard()}
    everything = Heard()
    for name in heard:
        tools = HumanInputTools(broker, {"ask_user"}, definitions=[ask_user_tool()], timeout=60)
        runner = ToolRunner(broker, [tools], channels=[name])
        runner.on_input_required(lambda request, name=name: heard[name].add(request.origin.channel))
    broker.add_input_hook(lambda request: everything.add(request.origin.channel), priority=10)

    for channel in ("support", "sales", "support", None):
        await broker.create(Text("?"), channel=channel)
    await everything.until(4)  # the unscoped hook runs last: the scoped ones are done by then
    assert heard == {"support": ["support", "support"], "sales": ["sales"]}


async def test_a_hook_with_no_channels_hears_of_every_request(broker: Broker) -> None:
    heard = Heard()
    broker.add_input_hook(lambda request: heard.add(request.origin.channel))
    await broker.create(Text("?"), channel="a")
    await broker.create(Text("?"))
    assert set(await heard.until(2)) == {"a", None}


async def test_closing_a_channel_cancels_its_running_input_hooks_and_spares_the_others(broker: Broker) -> None:
    started, cancelled, finished = Heard(), Heard(), Heard()
    go_on = asyncio.Event()

    async def notify(request: Request) -> None:
        started.add(request.origin.channel)
        try:
            await go_on.wait()
        except asyncio.CancelledError:
            cancelled.add(request.origin.channel)
            raise
        finished.add(request.origin.channel)

    broker.add_input_hook(notify, timeout=120)
    await broker.create(Text("A?"), channel="a")
    b = await broker.create(Text("B?"), channel="b")
    await started.until(2)

    await broker.close("a")
    assert await cancelled.until(1) == ["a"]
    go_on.set()
    assert await finished.until(1) == ["b"]
    assert cancelled == ["a"]
    assert (await broker.get(b.id)).status is Status.PENDING


async def test_closing_the_broker_cancels_every_running_input_hook() -> None:
    started, cancelled = Heard(), Heard()

    async def notify(request: Request) -> None:
        started.add(request.origin.channel)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.add(request.origin.channel)
            raise

    async with interlock.connect("memory://") as broker:
        broker.add_input_hook(notify, timeout=120)
        await broker.create(Text("A?"), channel="a")
        await broker.create(Text("B?"))
        await started.until(2)
        await broker.close()
        assert set(await cancelled.until(2)) == {"a", None}


async def test_the_door_a_call_came_through_is_on_its_request_events_and_hooks(broker: Broker, inbox: Inbox) -> None:
    seen: list[str | None] = []
    broker.add_input_hook(lambda request: seen.append(request.origin.channel_type))
    tools = HumanInputTools(broker, {"ask_user"}, definitions=[ask_user_tool()], timeout=60)
    call = ToolCall("ask_user", {"question": "Which room?"}, "c1", channel="lobby", channel_type="realtime_voice")
    task = asyncio.create_task(tools(call))
    request = await inbox.next()
    assert request.origin.channel_type == "realtime_voice"
    assert (await broker.get(request.id)).origin.channel_type == "realtime_voice"
    assert await broker.resolve(request.id, "blue")
    assert (await bounded(task)).content == "blue"
    created = [e for e in await broker.find_events(request=request.id) if e.type == "created"]
    assert created and created[0].request is not None
    assert created[0].request.origin.channel_type == "realtime_voice"
    assert seen == ["realtime_voice"]


async def test_a_human_input_tool_the_agent_never_offers_is_not_served_and_is_warned_of_once_per_channel(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    async def host(call: ToolCall) -> ToolResult:  # the host's own tool loop: it declares nothing up front
        return ToolResult(f"{call.name} handled by the host")

    tools = HumanInputTools(broker, {"ask_user", "confirm"}, definitions=[ask_user_tool()], timeout=60)
    runner = ToolRunner(broker, [tools, host])
    with caplog.at_level(logging.WARNING, logger="interlock"):
        for call_id, channel in (("c1", "web"), ("c2", "web"), ("c3", "sms")):
            result = await bounded(runner.run(ToolCall("confirm", {"question": "Ship?"}, call_id, channel=channel)))
            assert result.content == "confirm handled by the host"
    assert not (await broker.list(status="pending")).items  # nobody was asked
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "'web'" in warnings[0] and "'sms'" in warnings[1] and all("'confirm'" in w for w in warnings)


def test_a_host_handler_cannot_serve_a_human_input_tools_name(unopened: Broker) -> None:
    async def ask_user(**arguments: object) -> str:
        return "not a person"

    tools = HumanInputTools(unopened, {"ask_user"}, definitions=[ask_user_tool()])
    with pytest.raises(ValueError, match="'ask_user' is a human-input tool"):
        ToolRunner(unopened, [tools, ToolFunctions({"ask_user": ask_user})])


def _others() -> set[asyncio.Task[object]]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}


async def test_human_input_tools_make_their_own_broker_when_given_none_and_close_it_with_them() -> None:
    before = _others()
    async with HumanInputTools(tool_names={"ask_user"}, definitions=[ask_user_tool()], timeout=60) as tools:
        task = asyncio.create_task(tools(ToolCall("ask_user", {"question": "Which colour?"}, "c1")))
        request = await Inbox(tools.broker).next()
        assert await tools.broker.resolve(request.id, "green")
        assert (await bounded(task)).content == "green"
    assert _others() <= before  # the broker's background work stopped with the tools
    with pytest.raises(Closed):
        await tools.broker.open()
    closed = await tools(ToolCall("ask_user", {"question": "Still there?"}, "c2"))
    assert closed.is_error


async def test_closing_human_input_tools_made_with_its_own_broker_stops_it_whether_used_or_not() -> None:
    before = _others()
    unused = HumanInputTools(tool_names={"ask_user"})
    used = HumanInputTools(tool_names={"ask_user"})
    await used.broker.create(Text("Anyone?"))  # opened by its first request
    for tools in (unused, used):
        await tools.aclose()
        with pytest.raises(Closed):
            await tools.broker.open()
    assert _others() <= before


async def test_human_input_tools_leave_a_broker_they_were_given_open(broker: Broker) -> None:
    async with HumanInputTools(broker, {"ask_user"}, definitions=[ask_user_tool()]) as tools:
        assert tools.broker is broker
    await tools.aclose()
    assert (await broker.create(Text("Still open?"))).status is Status.PENDING


@pytest.mark.parametrize("door", ["text", "realtime_voice", "conference", None])
async def test_a_tools_own_timeout_bounds_its_request_whatever_door_the_call_came_through(
    broker: Broker, inbox: Inbox, door: str | None
) -> None:
    # the handler's own bound, not a door's default call bound (a voice channel's is seconds)
    tools = HumanInputTools(broker, {"ask_user"}, definitions=[ask_user_tool()], timeout=45)
    call = ToolCall("ask_user", {"question": "Which room?"}, "c1", channel="lobby", channel_type=door)
    task = asyncio.create_task(tools(call))
    request = await inbox.next()
    assert request.expires_at is not None
    assert 40 <= (request.expires_at - request.created_at).total_seconds() <= 45
    assert await broker.resolve(request.id, "blue")
    assert (await bounded(task)).content == "blue"
