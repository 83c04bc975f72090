"""The outbox delivered through signed webhooks to a real HTTP receiver, on every store:
at least once, retried with back-off, dead letters kept and retried, reminders,
escalations, and no delivery lost across a restart."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

import interlock
from interlock import Confirm
from interlock.broker import LocalBroker
from interlock.channels import Message
from interlock.channels.delivery import DeliveryLoop, send_limits
from interlock.principals import Principal, issue_token
from interlock.routing import routing_from_dict
from interlock.webhooks import InvalidSignature, verify

from .receiver import Received, Receiver, receiver

pytestmark = pytest.mark.anyio

SECRET = "a-shared-secret-of-32-characters"
STORES = ["memory", "sqlite", "postgresql"]


@pytest.fixture(params=STORES, ids=[f"{s}-store" for s in STORES])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "memory":
        yield "memory://"
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'outbox.db'}"
    else:
        databases: Callable[[], AbstractContextManager[str]] = request.getfixturevalue("pg_databases")
        with databases() as url:
            yield url


@pytest.fixture
async def hook() -> AsyncIterator[Receiver]:
    async with receiver() as r:
        yield r


def routing(hook_url: str, **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "inbox_url": "http://inbox.example",
        "retry_first": 0.05,
        "retry_cap": 0.2,
        "channels": {"hook": {"type": "webhook", "url": hook_url, "secret": SECRET}},
        "recipients": {"alice": {"channels": ["hook"]}},
    }
    doc.update(extra)
    return doc


async def until(
    loop: DeliveryLoop | Sequence[DeliveryLoop], check: Callable[[], Awaitable[bool]], timeout: float = 20.0
) -> None:
    """Wait (bounded) until `check` holds, looking again each time a loop stores something
    (give every loop that may do the work: a change made by another wakes nobody)."""
    loops = [loop] if isinstance(loop, DeliveryLoop) else list(loop)
    changed = asyncio.Event()
    for each in loops:
        each.on_change.append(changed.set)
    try:
        async with asyncio.timeout(timeout):
            while True:
                changed.clear()
                if await check():
                    return
                await changed.wait()
    finally:
        for each in loops:
            each.on_change.remove(changed.set)


def status_of(broker: LocalBroker, request_id: str, status: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        found = await broker.store.list_deliveries(request_id=request_id)
        return bool(found) and all(d.status == status for d in found)

    return check


def any_in(broker: LocalBroker, status: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return bool(await broker.store.list_deliveries(status=status))  # type: ignore[arg-type]

    return check


@asynccontextmanager
async def delivering(url: str, doc: dict[str, Any], **options: Any) -> AsyncIterator[tuple[LocalBroker, DeliveryLoop]]:
    async with interlock.connect(url) as broker:
        assert isinstance(broker, LocalBroker)
        loop = DeliveryLoop(broker.outbox, routing_from_dict(doc), poll_interval=0.05, **options)
        loop.start()
        try:
            yield broker, loop
        finally:
            await loop.stop()


async def test_a_request_reaches_its_recipient_as_one_signed_webhook(store_url: str, hook: Receiver) -> None:
    async with delivering(store_url, routing(hook.url)) as (broker, loop):
        request = await broker.create(Confirm("Ship it?"), to="alice", requester="bot")
        [got] = await hook.until(1)
        verify(SECRET, got.headers, got.body)
        body = got.json
        assert body["type"] == "request.created" and body["recipient"] == "alice"
        assert body["request"]["id"] == request.id and body["request"]["asks"][0]["prompt"] == "Ship it?"
        assert body["links"]["request"] == f"http://inbox.example/requests/{request.id}"
        assert got.headers["idempotency-key"] == body["id"]
        with pytest.raises(InvalidSignature):
            verify("another-secret-of-32-characters!", got.headers, got.body)
        with pytest.raises(InvalidSignature):
            verify(SECRET, got.headers, got.body + b" ")
        await until(loop, status_of(broker, request.id, "delivered"))
        listed = await broker.store.list_deliveries(request_id=request.id)
        assert [(d.channel, d.status, d.attempts) for d in listed] == [("hook", "delivered", 1)]


async def test_the_end_of_a_request_is_delivered_too(store_url: str, hook: Receiver) -> None:
    async with delivering(store_url, routing(hook.url)) as (broker, _):
        request = await broker.create(Confirm("Ship it?"), to="alice", requester="bot")
        await hook.until(1)
        await broker.resolve(request.id, True, by="alice", via="web")
        second = (await hook.until(2))[1].json
        assert second["type"] == "request.answered"
        assert second["request"]["status"] == "answered"


async def test_a_failing_receiver_is_retried_with_the_same_idempotency_key(store_url: str, hook: Receiver) -> None:
    hook.statuses = [503, 500]
    async with delivering(store_url, routing(hook.url)) as (broker, loop):
        request = await broker.create(Confirm("Ship it?"), to="alice", requester="bot")
        got = await hook.until(3)
        assert len({r.headers["idempotency-key"] for r in got}) == 1
        await until(loop, status_of(broker, request.id, "delivered"))
        [delivery] = await broker.store.list_deliveries(request_id=request.id)
        assert delivery.attempts == 3 and delivery.last_error is None


async def test_a_refusal_is_a_dead_letter_that_can_be_retried(store_url: str, hook: Receiver) -> None:
    hook.statuses = [410]
    async with delivering(store_url, routing(hook.url)) as (broker, loop):
        request = await broker.create(Confirm("Ship it?"), to="alice", requester="bot")
        await hook.until(1)
        await until(loop, any_in(broker, "dead"))
        dead = await broker.store.list_deliveries(status="dead")
        assert dead[0].request_id == request.id and "HTTP 410" in (dead[0].last_error or "")
        again = await broker.store.retry_delivery(dead[0].id, dead[0].due_at)
        assert again is not None
        loop.wake()
        await hook.until(2)
        await until(loop, status_of(broker, request.id, "delivered"))


async def test_a_redirect_is_not_followed_but_a_dead_letter_at_once_naming_where_it_pointed(
    store_url: str, hook: Receiver
) -> None:
    hook.statuses = [308]  # then 200: a retry would be "delivered", to a receiver that said it moved
    async with delivering(store_url, routing(hook.url)) as (broker, loop):
        request = await broker.create(Confirm("Ship it?"), to="alice", requester="bot")
        await hook.until(1)
        await until(loop, status_of(broker, request.id, "dead"))
        [dead] = await broker.store.list_deliveries(request_id=request.id)
        assert dead.attempts == 1 and "redirected it (HTTP 308)" in (dead.last_error or "")
        assert "channels.hook.url" in (dead.last_error or "")
    assert len(hook.received) == 1


async def test_out_of_attempts_a_delivery_becomes_a_dead_letter(store_url: str, hook: Receiver) -> None:
    hook.statuses = [503] * 10
    async with delivering(store_url, routing(hook.url, max_attempts=3)) as (broker, loop):
        await broker.create(Confirm("Ship it?"), to="alice", requester="bot")
        await hook.until(3)
        await until(loop, any_in(broker, "dead"))
        dead = await broker.store.list_deliveries(status="dead")
        assert dead[0].attempts == 3 and dead[0].last_error == "HTTP 503 from the receiver"
    assert len(hook.received) == 3


async def test_a_reminder_comes_before_expiry_unless_the_request_was_answered(store_url: str, hook: Receiver) -> None:
    doc = routing(hook.url)
    doc["recipients"]["alice"]["remind_before"] = "5s"
    async with delivering(store_url, doc) as (broker, loop):
        # Reminders are due 2 s in: time enough to answer the second first, even under load.
        reminded = await broker.create(Confirm("Ship it?"), to="alice", requester="bot", timeout=7.0)
        answered = await broker.create(Confirm("Roll back?"), to="alice", requester="bot", timeout=7.0)
        await hook.until(2)
        await broker.resolve(answered.id, False, by="alice")
        got = await hook.until(4)
        kinds = sorted((r.json["type"], r.json["request"]["id"]) for r in got[2:])
        assert kinds == sorted([("request.answered", answered.id), ("request.reminder", reminded.id)])
        await until(loop, any_in(broker, "skipped"))
        [skipped] = await broker.store.list_deliveries(status="skipped")
        assert skipped.request_id == answered.id and skipped.kind == "reminder"


async def test_a_request_nobody_answers_is_escalated_to_each_member_of_a_team(store_url: str, hook: Receiver) -> None:
    doc = routing(hook.url)
    doc["recipients"] = {
        "alice": {"channels": ["hook"], "escalate_after": "1s", "escalate_to": "ops"},
        "bob": {"channels": ["hook"]},
        "carol": {"channels": ["hook"]},
    }
    doc["teams"] = {"ops": {"members": ["bob", "carol"]}}
    async with delivering(store_url, doc) as (broker, _):
        await broker.create(Confirm("Ship it?"), to="alice", requester="bot")
        got = await hook.until(3)
        assert got[0].json["recipient"] == "alice"
        assert sorted((r.json["type"], r.json["recipient"]) for r in got[1:]) == [
            ("request.escalated", "bob"),
            ("request.escalated", "carol"),
        ]


async def test_an_escalation_says_whether_its_person_may_answer_by_the_store_s_teams(
    store_url: str, hook: Receiver
) -> None:
    """A request to the team ops, which the store keeps with bob alone, is escalated to
    each member of oncall: bob may answer it (`answerable`, and a link to it), dave may
    not, nor may carol, whom the routing (but not the store) lists in ops: neither is
    given a link to a page that would refuse them."""
    doc = routing(hook.url)
    doc["teams"] = {
        "ops": {"members": ["bob", "carol"], "channels": ["hook"], "escalate_after": "0.2s", "escalate_to": "oncall"},
        "oncall": {"members": ["bob", "carol", "dave"]},
    }
    doc["recipients"] = {name: {"channels": ["hook"]} for name in ("bob", "carol", "dave")}
    async with delivering(store_url, doc) as (broker, _):
        for name in ("bob", "carol", "dave"):
            await broker.save_principal(Principal(name, "human"))
        await broker.add_team_members("ops", ["bob"])
        request = await broker.create(Confirm("Ship it?"), to="ops", requester="bot")
        got = await hook.until(4)
        link = f"http://inbox.example/requests/{request.id}"
        told = sorted(
            (r.json["type"], r.json["recipient"], r.json["answerable"], r.json["links"]["request"]) for r in got
        )
        assert told == [
            ("request.created", "ops", True, link),
            ("request.escalated", "bob", True, link),
            ("request.escalated", "carol", False, None),
            ("request.escalated", "dave", False, None),
        ]


async def test_a_member_taken_out_of_a_team_the_store_keeps_is_told_nothing_of_its_requests(
    store_url: str, hook: Receiver
) -> None:
    """The routing still lists carol in ops, which the store keeps with bob alone (she was
    taken out with `interlock team rm`): she got each request to ops, and its answer, on
    her own channels, though she may no longer read them."""
    doc = routing(hook.url)
    doc["teams"] = {"ops": {"members": ["bob", "carol"]}}
    doc["recipients"] = {name: {"channels": ["hook"]} for name in ("bob", "carol")}
    async with delivering(store_url, doc) as (broker, loop):
        for name in ("bob", "carol"):
            await broker.save_principal(Principal(name, "human"))
        await broker.add_team_members("ops", ["bob"])
        request = await broker.create(Confirm("Ship it?"), to="ops", requester="bot")
        assert await broker.resolve(request.id, True, by="bob")
        await until(loop, _told_of_settling(broker, request.id))
        told = sorted((d.kind, d.recipient) for d in await broker.store.list_deliveries(request_id=request.id))
        assert told == [("request", "bob"), ("settled", "bob")]


class Recording:
    """A channel that keeps each message it is given."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def send(self, message: Message) -> str | None:
        self.messages.append(message)
        return None

    async def aclose(self) -> None:
        pass


async def test_a_message_to_a_team_s_own_address_says_so_and_whether_its_members_may_open_it(
    store_url: str,
) -> None:
    """Requests to ops (a team the store keeps), to ghosts and to mixed (teams only the
    routing names, of no one here and of bob and someone unknown) and to alice: the
    messages to the teams' own addresses are `to_team`, for members who may answer each as
    themselves, and may open it in the inbox where one of its members is a person there;
    alice's is hers; the message once ops's request settled is a team's too."""
    doc = routing("http://unused.example/hook")
    doc["teams"] = {
        "ops": {"members": ["bob"], "channels": ["hook"]},
        "ghosts": {"members": ["nobody-here"], "channels": ["hook"]},
        "mixed": {"members": ["bob", "nobody-here"], "channels": ["hook"]},
    }
    channel = Recording()
    async with delivering(store_url, doc, channels={"hook": channel}) as (broker, loop):
        await broker.save_principal(Principal("bob", "human"))
        await broker.add_team_members("ops", ["bob"])
        made = {
            to: await broker.create(Confirm("Ship it?"), to=to, requester="bot")
            for to in ("ops", "ghosts", "mixed", "alice")
        }
        for request in made.values():
            await until(loop, status_of(broker, request.id, "delivered"))
        told = {m.delivery.recipient: (m.to_team, m.may_answer, m.may_read) for m in channel.messages}
        assert told == {
            "ops": (True, True, True),
            "ghosts": (True, True, False),
            "mixed": (True, True, True),
            "alice": (False, True, True),
        }
        await broker.resolve(made["ops"].id, True, by="bob")
        await until(loop, lambda: _settled_sent(channel))
        [ended] = [m for m in channel.messages if m.delivery.kind == "settled"]
        assert (ended.delivery.recipient, ended.to_team, ended.may_answer) == ("ops", True, False)


def _told_of_settling(broker: LocalBroker, request_id: str) -> Callable[[], Awaitable[bool]]:
    """Every notice of the request delivered, its answer's among them (the loop may send the
    request's own before it has read that the request settled)."""

    async def check() -> bool:
        found = await broker.store.list_deliveries(request_id=request_id)
        settled = any(d.kind == "settled" for d in found)
        return settled and all(d.status == "delivered" for d in found)

    return check


async def _settled_sent(channel: Recording) -> bool:
    return any(m.delivery.kind == "settled" for m in channel.messages)


async def test_a_recipient_with_no_route_gets_nothing_and_a_default_route_covers_the_rest(
    store_url: str, hook: Receiver
) -> None:
    async with delivering(store_url, routing(hook.url)) as (broker, _):
        nobody = await broker.create(Confirm("Ship it?"), to="dave", requester="bot")
        await broker.create(Confirm("Ship it?"), to="alice", requester="bot")
        await hook.until(1)
        assert await broker.store.list_deliveries(request_id=nobody.id) == []
    async with delivering(store_url, routing(hook.url, default={"channels": ["hook"]})) as (broker, _):
        await broker.create(Confirm("Ship it?"), to="dave", requester="bot")
        got = await hook.until(2)
        assert got[1].json["recipient"] == "dave"


async def test_deliveries_survive_a_restart(tmp_path: Path, hook: Receiver) -> None:
    url = f"sqlite:///{tmp_path / 'restart.db'}"
    async with interlock.connect(url) as broker:  # no delivery loop runs: the notice waits in the outbox
        request = await broker.create(Confirm("Ship it?"), to="alice", requester="bot")
    assert hook.received == []
    async with delivering(url, routing(hook.url)):
        [got] = await hook.until(1)
        assert got.json["request"]["id"] == request.id


async def test_two_loops_on_one_postgresql_database_send_each_delivery_once(
    pg_databases: Callable[[], AbstractContextManager[str]], hook: Receiver
) -> None:
    with pg_databases() as url:
        async with (
            delivering(url, routing(hook.url)) as (broker, first),
            delivering(url, routing(hook.url)) as (_, second),
        ):
            ids = [(await broker.create(Confirm(f"Ship {i}?"), to="alice", requester="bot")).id for i in range(40)]
            got = await hook.until(40)

            async def all_delivered() -> bool:
                return len(await broker.store.list_deliveries(status="delivered", limit=1000)) == 40

            await until((first, second), all_delivered)
        assert sorted(r.json["request"]["id"] for r in got) == sorted(ids)
        assert len(hook.received) == 40
        assert len({r.headers["idempotency-key"] for r in hook.received}) == 40


async def test_quiet_hours_hold_a_delivery_until_they_end(store_url: str, hook: Receiver) -> None:
    now = datetime.now(UTC)
    window = {
        "start": (now - timedelta(hours=1)).strftime("%H:%M"),
        "end": (now + timedelta(hours=1)).strftime("%H:%M"),
    }
    doc = routing(hook.url)
    doc["recipients"]["alice"]["quiet_hours"] = {**window, "timezone": "UTC"}
    async with delivering(store_url, doc) as (broker, loop):
        request = await broker.create(Confirm("Ship it?"), to="alice", requester="bot")
        await until(loop, status_of(broker, request.id, "pending"))
        planned = await broker.store.list_deliveries(request_id=request.id)
        assert planned[0].status == "pending"
        assert timedelta(minutes=58) < planned[0].due_at - now <= timedelta(hours=1)
    assert hook.received == []


class HeldChannel:
    """A channel whose sends wait until `release` is set; it records when it is closed."""

    def __init__(self) -> None:
        self.sending = asyncio.Event()
        self.release = asyncio.Event()
        self.sent: list[str] = []
        self.closed = False

    async def send(self, message: Message) -> str | None:
        assert not self.closed, "sent through a closed channel"
        self.sending.set()
        await self.release.wait()
        assert not self.closed, "closed while a send was under way"
        self.sent.append(message.delivery.id)
        return None

    async def aclose(self) -> None:
        self.closed = True


async def test_a_routing_replaced_during_a_send_lets_that_send_finish_as_delivered(store_url: str) -> None:
    held = HeldChannel()
    async with delivering(store_url, routing("http://unused.example/hook"), channels={"hook": held}) as (broker, loop):
        request = await broker.create(Confirm("Ship it?"), to="alice", requester="bot")
        async with asyncio.timeout(20):
            await held.sending.wait()
        replacement = HeldChannel()
        await loop.replace(loop.routing, {"hook": replacement}, loop.context)
        assert not held.closed  # its send is still under way
        held.release.set()
        await until(loop, status_of(broker, request.id, "delivered"))
        assert held.closed and len(held.sent) == 1
        [delivery] = await broker.store.list_deliveries(request_id=request.id)
        assert delivery.attempts == 1


async def test_a_receiver_slow_to_answer_holds_up_no_other_notice(store_url: str) -> None:
    """alice's pager hangs on her request's message (for less than the loop's send timeout);
    bob's request, made after it, reaches him through his own channel meanwhile."""
    doc = routing("http://unused.example/hook")
    doc["channels"]["pager"] = dict(doc["channels"]["hook"])
    doc["recipients"] = {"alice": {"channels": ["pager"]}, "bob": {"channels": ["hook"]}}
    held, fast = HeldChannel(), Recording()
    async with delivering(store_url, doc, channels={"pager": held, "hook": fast}) as (broker, loop):
        hers = await broker.create(Confirm("Ship it?"), to="alice", requester="bot")
        async with asyncio.timeout(20):
            await held.sending.wait()
        his = await broker.create(Confirm("Roll back?"), to="bob", requester="bot")
        await until(loop, status_of(broker, his.id, "delivered"))
        assert [m.delivery.request_id for m in fast.messages] == [his.id]
        [waiting] = await broker.store.list_deliveries(request_id=hers.id)
        assert (waiting.status, held.sent) == ("pending", [])
        held.release.set()
        await until(loop, status_of(broker, hers.id, "delivered"))
        assert held.sent == [waiting.id]


async def test_a_burst_to_a_receiver_that_hangs_takes_its_share_of_the_sends_and_all_of_it_goes_once_it_answers(
    store_url: str, hook: Receiver
) -> None:
    """alice's pager (a real receiver) hangs on every message and gets a burst of 20, more
    than the loop's 16 sends: it has 4 of them under way at a time (`per_channel`), the
    rest wait untouched, and bob's request made meanwhile reaches him at once through his
    own channel. Each message the pager answers lets one more go; once it answers them all,
    each of the 20 is delivered, at its first attempt."""
    answer = asyncio.Semaphore(0)  # the pager answers one message for each release

    async def hang(_: Received) -> None:
        await answer.acquire()

    async with receiver() as pager:
        pager.hold = hang
        doc = routing(hook.url)
        doc["channels"]["pager"] = {**doc["channels"]["hook"], "url": pager.url, "timeout": 120}
        doc["recipients"] = {"alice": {"channels": ["pager"]}, "bob": {"channels": ["hook"]}}
        try:
            async with delivering(store_url, doc) as (broker, loop):
                hers = [(await broker.create(Confirm(f"Ship {i}?"), to="alice", requester="bot")).id for i in range(20)]
                await pager.until(4)
                his = await broker.create(Confirm("Roll back?"), to="bob", requester="bot")
                [got] = await hook.until(1, timeout=10)  # (16 sends hanging held it for their 30 s)
                assert got.json["request"]["id"] == his.id
                assert len(pager.received) == 4
                waiting = [d for r in hers for d in await broker.store.list_deliveries(request_id=r)]
                assert [(d.status, d.attempts) for d in waiting] == [("pending", 0)] * 20

                answer.release()  # one answered: the next goes out in its place, and only it
                await pager.until(5, timeout=10)
                assert len(pager.received) == 5
                for _ in range(19):
                    answer.release()
                await pager.until(20)
                for request_id in hers:
                    await until(loop, status_of(broker, request_id, "delivered"))
                sent = [d for r in hers for d in await broker.store.list_deliveries(request_id=r)]
                assert [d.attempts for d in sent] == [1] * 20
                assert sorted(r.headers["idempotency-key"] for r in pager.received) == sorted(d.id for d in sent)
                assert loop.per_channel == 4  # the default: a quarter of the 16 sends
        finally:
            for _ in range(20):  # (a failure above leaves nothing hanging)
                answer.release()


async def test_run_once_sends_no_more_of_one_channel_than_its_share(store_url: str) -> None:
    doc = routing("http://unused.example/hook")
    doc["default"] = {"channels": ["hook"]}
    fast = Recording()
    async with interlock.connect(store_url) as broker:
        assert isinstance(broker, LocalBroker)
        for i in range(10):
            await broker.create(Confirm(f"Ship {i}?"), to=f"person-{i}", requester="bot")
        loop = DeliveryLoop(broker.outbox, routing_from_dict(doc), channels={"hook": fast})
        assert await loop.run_once()  # the channel's share taken (4 of the 16 sends): there is more
        assert len(fast.messages) == 4
        for _ in range(10):  # bounded
            if not await loop.run_once():
                break
        assert sorted(m.delivery.recipient for m in fast.messages) == sorted(f"person-{i}" for i in range(10))
        await loop.stop()


async def test_stopping_the_loop_lets_a_send_under_way_store_its_outcome(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'stop.db'}"
    held = HeldChannel()
    async with interlock.connect(url) as broker:
        assert isinstance(broker, LocalBroker)
        loop = DeliveryLoop(
            broker.outbox,
            routing_from_dict(routing("http://unused.example/hook")),
            channels={"hook": held},
            poll_interval=0.05,
        )
        loop.start()
        request = await broker.create(Confirm("Ship it?"), to="alice", requester="bot")
        async with asyncio.timeout(20):
            await held.sending.wait()
        stopping = asyncio.create_task(loop.stop())
        await asyncio.sleep(0)  # the stop has begun: the loop takes no new work
        held.release.set()
        async with asyncio.timeout(20):
            await stopping
        [delivery] = await broker.store.list_deliveries(request_id=request.id)
        assert (delivery.status, delivery.attempts, held.sent) == ("delivered", 1, [delivery.id])


class _Wordless:
    """A channel whose sends fail with exceptions that say nothing (as some clients' do)."""

    def __init__(self) -> None:
        self.failures: list[BaseException] = [httpx.ReadTimeout(""), httpx.ConnectError(""), RuntimeError()]

    async def send(self, message: Message) -> str | None:
        raise self.failures.pop(0)

    async def aclose(self) -> None:
        pass


async def test_an_error_that_says_nothing_is_described_for_people_not_by_its_class(tmp_path: Path) -> None:
    doc = routing("http://127.0.0.1:9/", max_attempts=1)
    doc["recipients"] = {name: {"channels": ["hook"]} for name in ("alice", "bob", "carol")}
    channel = _Wordless()
    async with delivering(f"sqlite:///{tmp_path / 'quiet.db'}", doc, channels={"hook": channel}) as (broker, loop):
        for name in ("alice", "bob", "carol"):  # one at a time: each meets the next failure
            request = await broker.create(Confirm("Ship it?"), to=name, requester="bot")
            await until(loop, status_of(broker, request.id, "dead"))
        errors = {d.recipient: d.last_error for d in await broker.store.list_deliveries(status="dead")}
    assert errors == {
        "alice": "no answer in time",
        "bob": "the connection failed",
        "carol": "the send failed without saying why",
    }


async def test_a_routing_s_lease_gives_each_send_a_third_of_it(store_url: str) -> None:
    held = HeldChannel()  # answers nothing until released
    doc = routing("http://unused.example/hook")
    async with delivering(store_url, doc, channels={"hook": HeldChannel()}) as (broker, loop):
        await loop.replace(routing_from_dict({**doc, "lease": "3s"}), {"hook": held}, loop.context)  # as set later
        request = await broker.create(Confirm("Ship it?"), to="alice", requester="bot")

        async def tried() -> bool:
            return any(d.attempts for d in await broker.store.list_deliveries(request_id=request.id))

        await until(loop, tried)  # cut short within the lease, before another loop could take it over
        [delivery] = await broker.store.list_deliveries(request_id=request.id)
        assert (delivery.status, delivery.last_error) == ("pending", "no answer within 1s")
        held.release.set()
        await until(loop, status_of(broker, request.id, "delivered"))


def delivery_records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "interlock.delivery" and r.levelno == level]


async def test_a_channel_that_begins_to_fail_is_one_warning_naming_the_delivery_and_why_not_one_per_attempt(
    tmp_path: Path, hook: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="interlock.delivery")
    hook.statuses = [503, 503, 503]  # then 200
    async with delivering(f"sqlite:///{tmp_path / 'failing.db'}", routing(hook.url)) as (broker, loop):
        request = await broker.create(Confirm("Ship it?"), to="alice", requester="bot")
        await until(loop, status_of(broker, request.id, "delivered"))
        [delivery] = await broker.store.list_deliveries(request_id=request.id)
    [warning] = delivery_records(caplog, logging.WARNING)
    assert f"delivery {delivery.id} of request {request.id} to alice through hook failed (attempt 1 of 8)" in warning
    assert "HTTP 503 from the receiver" in warning and "trying again in" in warning
    retried = delivery_records(caplog, logging.DEBUG)
    assert [line for line in retried if "(attempt 2 of 8)" in line or "(attempt 3 of 8)" in line] == retried[-2:]
    assert delivery_records(caplog, logging.INFO)[-1] == (
        f"channel hook delivers again (delivery {delivery.id}), after 3 failed attempts"
    )


async def test_a_dead_letter_s_warning_says_why_it_died_and_how_to_send_it_again(
    tmp_path: Path, hook: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    hook.statuses = [503] * 10
    async with delivering(f"sqlite:///{tmp_path / 'dead.db'}", routing(hook.url, max_attempts=3)) as (broker, loop):
        request = await broker.create(Confirm("Ship it?"), to="alice", requester="bot")
        await until(loop, status_of(broker, request.id, "dead"))
        [dead] = await broker.store.list_deliveries(request_id=request.id)
    [line] = [m for m in delivery_records(caplog, logging.WARNING) if "dead letter" in m]
    assert line == (
        f"delivery {dead.id} of request {request.id} to alice through hook is a dead letter: failed 3 times, "
        f"the last: HTTP 503 from the receiver; once that is fixed, send it again with "
        f"`interlock deliveries retry {dead.id}`"
    )


async def test_a_delivery_through_a_channel_no_longer_configured_is_not_a_silent_dead_letter(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    doc = routing("http://127.0.0.1:9/")
    async with delivering(f"sqlite:///{tmp_path / 'gone.db'}", doc, channels={}) as (broker, loop):
        request = await broker.create(Confirm("Ship it?"), to="alice", requester="bot")
        await until(loop, status_of(broker, request.id, "dead"))
        [dead] = await broker.store.list_deliveries(request_id=request.id)
    [line] = delivery_records(caplog, logging.WARNING)
    assert f"delivery {dead.id} of request {request.id} to alice through hook is a dead letter" in line
    assert "no channel named 'hook' is configured (the routing in use has none)" in line


@pytest.mark.parametrize(
    ("concurrency", "per_channel", "said"),
    [
        (0, None, "concurrency: at least 1 send at a time, not 0"),
        (-2, 1, "concurrency: at least 1 send at a time, not -2"),
        (16, 0, "per_channel: at least 1 send at a time, not 0"),
        (4, 5, "per_channel: at most the 4 sends at a time (concurrency) the loop has, not 5"),
    ],
)
async def test_a_loop_with_send_limits_out_of_range_is_refused(
    concurrency: int, per_channel: int | None, said: str
) -> None:
    async with interlock.connect("memory://") as broker:
        assert isinstance(broker, LocalBroker)
        with pytest.raises(ValueError, match=re.escape(said)):
            DeliveryLoop(
                broker.outbox,
                routing_from_dict(routing("http://unused.example/hook")),
                channels={"hook": Recording()},
                concurrency=concurrency,
                per_channel=per_channel,
            )
        assert send_limits(1) == (1, 1) and send_limits(16) == (16, 4) and send_limits(8, 8) == (8, 8)


async def test_a_running_loop_sends_nothing_to_a_member_cut_off_and_the_team_s_message_to_the_others(
    store_url: str, hook: Receiver
) -> None:
    # The loop `serve` and `deliver` run (its sends started apart): alice is cut off, so
    # the team's request reaches bob alone, and hers is skipped saying why.
    doc = routing(hook.url, teams={"ops": {"members": ["alice", "bob"]}}, default={"channels": ["hook"]})
    async with delivering(store_url, doc) as (broker, loop):
        for person in ("alice", "bob"):
            await broker.save_principal(Principal(person, "human"))
            await broker.save_token(issue_token(person, datetime.now(UTC)))
        await broker.revoke_tokens(principal="alice")
        request = await broker.create(Confirm("Ship it?"), to="ops", requester="bot")
        await until(loop, status_of_each(broker, request.id))
        [got] = await hook.until(1)
        assert got.json["recipient"] == "bob"
        by_whom = {d.recipient: d for d in await broker.store.list_deliveries(request_id=request.id)}
        assert (by_whom["alice"].status, by_whom["bob"].status) == ("skipped", "delivered")
        assert "every token of 'alice' is revoked" in (by_whom["alice"].last_error or "")


def status_of_each(broker: LocalBroker, request_id: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        found = await broker.store.list_deliveries(request_id=request_id)
        return len(found) == 2 and all(d.status != "pending" for d in found)

    return check
