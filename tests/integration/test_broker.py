"""The behaviour every backend shares: one suite, run over each store."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest

from interlock import (
    AlreadySettled,
    Broker,
    Cancelled,
    Choice,
    Closed,
    Confirm,
    Deny,
    Event,
    Expired,
    Form,
    InvalidAnswer,
    InvalidRequest,
    MultiChoice,
    NotFound,
    Rejected,
    Request,
    Status,
    Text,
)
from interlock.broker import MAX_EVENT_ID, LocalBroker, stored_routing
from interlock.channels import Message, PermanentFailure
from interlock.channels.delivery import DeliveryLoop
from interlock.dashboard import NOBODY
from interlock.errors import Forbidden, IdempotencyKeyReused
from interlock.model import Answers
from interlock.outbox import LinkUse
from interlock.principals import Principal, hash_token, issue_session, issue_signin_link, issue_token
from interlock.routing import routing_from_dict

pytestmark = pytest.mark.anyio

BOUND = 10  # seconds: the most any single wait in these tests may take


async def settled_event(broker: Broker, request_id: str, after: int = 0) -> Event:
    """The first settlement event of a request, following the log live."""
    with anyio.fail_after(BOUND):
        async for event in broker.events(after=after, follow=True):
            if event.request_id == request_id and event.type != "created":
                return event
    raise AssertionError("the event stream ended")


# -- create, answer, wait ----------------------------------------------------------------


async def test_a_created_request_is_pending_and_answerable_at_once(broker: Broker) -> None:
    request = await broker.create(Text("What colour?"), to="alice", title="Paint", session="s1")

    assert request.status is Status.PENDING
    assert request.to == "alice"
    assert request.origin.session == "s1"
    assert await broker.resolve(request.id, "blue", by="alice", via="api")

    response = await broker.wait(request.id)
    assert response.answers == {"text": "blue"}
    assert (response.by, response.via) == ("alice", "api")
    stored = await broker.get(request.id)
    assert stored.status is Status.ANSWERED
    assert stored.answer == "blue"


async def test_a_waiter_wakes_when_another_task_answers(broker: Broker) -> None:
    request = await broker.create(Confirm("Deploy?"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(broker.resolve, request.id, True)
        with anyio.fail_after(BOUND):
            response = await broker.wait(request.id)
    assert response.answers == {"confirm": True}


async def test_ask_returns_the_bare_value_for_one_ask_and_a_dict_for_several(broker: Broker) -> None:
    async def answer_next(after: int, answer: object) -> None:
        async for event in broker.events(after=after, follow=True):
            if event.type == "created":
                await broker.resolve(event.request_id or "", answer)
                return

    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            tg.start_soon(answer_next, await _last(broker), "red")
            assert await broker.ask(Choice("Colour?", options=["red", "green"])) == "red"

        async with anyio.create_task_group() as tg:
            tg.start_soon(answer_next, await _last(broker), {"name": "Ada", "ok": True})
            value = await broker.ask([Text("Name?", id="name"), Confirm("Sure?", id="ok")])
        assert value == {"name": "Ada", "ok": True}

        async with anyio.create_task_group() as tg:  # `ask`'s None: an optional ask left unanswered
            tg.start_soon(answer_next, await _last(broker), Answers())
            assert await broker.ask(Confirm("Also staging?", required=False)) is None

        # ... as a bare None says it (an empty Answers was the only way, and is not exported)
        async with anyio.create_task_group() as tg:
            tg.start_soon(answer_next, await _last(broker), None)
            assert await broker.ask(Text("Anything to add?", required=False)) is None
        required = await broker.create(Text("Name?"))
        with pytest.raises(InvalidAnswer, match="expected text, got null"):
            await broker.resolve(required.id, None)


async def _last(broker: Broker) -> int:
    return await broker.last_event_id()


async def test_every_waiter_on_a_request_gets_its_outcome(broker: Broker) -> None:
    request = await broker.create(Text("Name?"))
    waiters = [asyncio.create_task(broker.wait(request.id)) for _ in range(5)]
    await anyio.wait_all_tasks_blocked()
    await broker.resolve(request.id, "Ada")
    with anyio.fail_after(BOUND):
        responses = await asyncio.gather(*waiters)
    assert {r.answers["text"] for r in responses} == {"Ada"}

    rejected = await broker.create(Text("Name?"))
    waiters = [asyncio.create_task(broker.wait(rejected.id)) for _ in range(3)]
    await anyio.wait_all_tasks_blocked()
    await broker.reject(rejected.id, "not now")
    with anyio.fail_after(BOUND):
        outcomes = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(o, Rejected) and o.reason == "not now" for o in outcomes)


async def test_wait_on_a_settled_request_replays_the_same_outcome(broker: Broker) -> None:
    answered = await broker.create(Text("Name?"))
    await broker.resolve(answered.id, "Ada")
    first = await broker.wait(answered.id)
    assert await broker.wait(answered.id) == first

    rejected = await broker.create(Text("Name?"))
    await broker.reject(rejected.id, "no thanks")
    for _ in range(2):
        with pytest.raises(Rejected) as caught:
            await broker.wait(rejected.id)
        assert caught.value.reason == "no thanks"

    expired = await broker.create(Text("Name?"))
    with pytest.raises(Expired):
        await broker.wait(expired.id, timeout=0)
    with pytest.raises(Expired):
        await broker.wait(expired.id)


async def test_an_id_no_path_can_carry_is_no_request_of_anyone(broker: Broker) -> None:
    made = await broker.create(Text("Name?"), to="alice")
    for request_id in ("", ".", "..", f"../{made.id}", f"{made.id}/", "a/b"):
        with pytest.raises(NotFound, match=re.escape(f"no request with id {request_id!r}")):
            await broker.get(request_id)
        with pytest.raises(NotFound):
            await broker.wait(request_id, timeout=0.1)
        assert await broker.resolve(request_id, "x", by="alice") is False
        assert await broker.reject(request_id, "no") is False
        assert await broker.cancel(request_id) is False
        assert await broker.consume(request_id) is False
    assert (await broker.get(made.id)).status is Status.PENDING


async def test_the_claims_of_up_to_a_thousand_requests_are_read_at_once(broker: Broker) -> None:
    made = await broker.create(Text("Restart?"), to="ops")
    claim = await broker.claim(made.id, by="alice")
    unknown = [f"{i:032x}" for i in range(1, 999)]
    assert await broker.claims([*unknown[:500], made.id, *unknown[500:]]) == {made.id: claim}
    with pytest.raises(InvalidRequest, match="at most 1000 requests at a time"):
        await broker.claims([made.id, *unknown, "f" * 32, "e" * 32])


async def test_what_json_cannot_carry_is_refused_by_name_and_changes_nothing(broker: Broker) -> None:
    request = await broker.create([Text("A?", id="a"), Text("B?", id="b")], to="alice")
    for answer, why in (
        (Answers({"a": float("nan"), "b": "x"}), "nan is not a JSON number"),
        ({"a": {1, 2}, "b": "x"}, "set is not a JSON value"),
        ({"a": "\ud800", "b": "x"}, "lone surrogate"),
    ):
        with pytest.raises(InvalidAnswer, match=f"the answer: .*{why}"):
            await broker.resolve(request.id, answer, by="alice")
    with pytest.raises(InvalidAnswer, match="the comment contains a lone surrogate"):
        await broker.resolve(request.id, {"a": "x", "b": "y"}, comment="\udfff", by="alice")
    for settle in (broker.reject, broker.cancel):
        with pytest.raises(InvalidRequest, match="reason contains a lone surrogate"):
            await settle(request.id, "\ud800")
    assert (await broker.get(request.id)).status is Status.PENDING
    with pytest.raises(InvalidRequest, match="the message contains a lone surrogate"):
        await broker.inform("\ud800", to="alice")
    with pytest.raises(InvalidRequest, match="data: inf is not a JSON number"):
        await broker.inform("hello", to="alice", data={"x": float("inf")})
    with pytest.raises(InvalidRequest, match="an update needs a non-empty message"):
        await broker.inform(" ", to="alice")


async def test_an_unknown_id_is_not_found(broker: Broker) -> None:
    with pytest.raises(NotFound) as caught:
        await broker.wait("01NOSUCHREQUEST000000000000")
    assert isinstance(caught.value, ValueError)
    with pytest.raises(NotFound):
        await broker.get("nope")
    assert await broker.resolve("nope", "x") is False
    assert await broker.reject("nope") is False
    assert await broker.cancel("nope") is False
    assert await broker.release("nope") is False


async def test_the_first_settlement_wins_and_later_ones_return_false(broker: Broker) -> None:
    request = await broker.create(Text("Name?"))
    assert await broker.resolve(request.id, "first")
    assert await broker.resolve(request.id, "second") is False
    assert await broker.reject(request.id, "late") is False
    assert await broker.cancel(request.id) is False
    assert (await broker.wait(request.id)).answers == {"text": "first"}


async def test_two_concurrent_resolvers_exactly_one_wins(connect: Callable[..., Broker]) -> None:
    async with connect() as a, connect() as b:
        for _ in range(20):
            request = await a.create(Text("Name?"))
            results = await asyncio.gather(a.resolve(request.id, "a"), b.resolve(request.id, "b"))
            assert sorted(results) == [False, True]
            winner = "a" if results[0] else "b"
            assert (await a.get(request.id)).answer == winner
        events = [e async for e in a.events()]
        assert sum(e.type == "answered" for e in events) == 20


async def test_a_bad_answer_says_what_is_wrong_and_changes_nothing(broker: Broker) -> None:
    request = await broker.create([Text("Name?", id="name", max_length=5), MultiChoice("Pick", ["a", "b"], id="pick")])
    before = await broker.get(request.id)
    events_before = await _last(broker)

    bad: list[tuple[object, str]] = [
        ({"name": "Ada"}, "'pick'"),  # a required ask left out
        ({"name": "Ada", "pick": ["a"], "extra": 1}, "'extra'"),
        ({"name": "Adalovelace", "pick": ["a"]}, "at most 5"),
        ({"name": "Ada", "pick": ["a", "a"]}, "twice"),
        ({"name": "Ada", "pick": ["c"]}, "'c'"),
        ({"name": 7, "pick": ["a"]}, "expected text"),
        ("just text", "answers by ask id"),
    ]
    for answer, fragment in bad:
        with pytest.raises(InvalidAnswer) as caught:
            await broker.resolve(request.id, answer)
        assert fragment in str(caught.value), str(caught.value)

    assert await broker.get(request.id) == before
    assert await _last(broker) == events_before
    assert await broker.resolve(request.id, {"name": "Ada", "pick": ["b", "a"]})


async def test_each_ask_kind_checks_its_answer(broker: Broker) -> None:
    schema = {"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}, "required": ["age"]}
    cases: list[tuple[object, object, object]] = [
        (Confirm("Ok?"), True, "maybe"),
        (Choice("One", ["a", "b"]), "a", "z"),
        (Choice("One", ["a", "b"], allow_other=True), "something else", ["a"]),
        (MultiChoice("Some", ["a", "b", "c"], min=1, max=2), ["a", "c"], ["a", "b", "c"]),
        (Form("Details", schema=schema), {"age": 3}, {"age": -1}),
        (Text("Say", multiline=True), "line 1\nline 2", ""),
    ]
    for ask, good, wrong in cases:
        request = await broker.create(ask)
        with pytest.raises(InvalidAnswer):
            await broker.resolve(request.id, wrong)
        assert await broker.resolve(request.id, good)
        assert (await broker.get(request.id)).answer == good


async def test_a_form_answer_is_held_to_the_formats_its_schema_names_from_every_surface(broker: Broker) -> None:
    # The web inbox's inputs (type=email, date, url) refused some of these; the API, the CLI
    # and Python took them all, so one form's answers differed by where they came from.
    schema = {
        "type": "object",
        "properties": {
            "to": {"type": "string", "format": "email"},
            "on": {"type": "string", "format": "date"},
            "site": {"type": "string", "format": "uri"},
            "host": {"type": "string", "format": "ipv4"},
            "at": {"type": "string", "format": "time"},
            "when": {"type": "string", "format": "date-time"},
        },
    }
    request = await broker.create(Form("Where?", schema=schema))
    for field, wrong in (
        ("to", "not-an-email"),
        ("on", "2024-13-45"),
        ("site", "example.com/x"),
        ("host", "1.2.3"),
        ("at", "14:30"),  # RFC 3339's time has seconds and an offset
        ("when", "2026-12-07T10:00"),
    ):
        with pytest.raises(InvalidAnswer, match=f"is not a '[a-z0-9-]+' at '{field}'"):
            await broker.resolve(request.id, {field: wrong})
    good = {
        "to": "ops@example.com",
        "on": "2026-12-07",
        "site": "https://example.com/x",
        "host": "10.0.0.1",
        "at": "14:30:00+02:00",
        "when": "2026-12-07T10:00:00Z",
    }
    assert await broker.resolve(request.id, good)
    assert (await broker.get(request.id)).answer == good


async def test_an_invalid_request_stores_nothing(broker: Broker) -> None:
    with pytest.raises(InvalidRequest):
        await broker.create([Text("a", id="x"), Confirm("b", id="x")])
    with pytest.raises(InvalidRequest):
        await broker.create([])
    with pytest.raises(InvalidRequest):
        await broker.create(Text("x" * 20_001))
    with pytest.raises(InvalidRequest):
        await broker.create(Text("ok"), timeout=-1)
    # An inbox nobody reads, and a request that would wait there for good.
    for to, why in (("", "is empty"), (" alice", "holds white space"), ("alice smith", "holds white space")):
        with pytest.raises(InvalidRequest, match=f"to: {to!r} {why}, which no name of a person or team does"):
            await broker.create(Text("ok"), to=to)
    assert (await broker.list()).items == []
    assert await _last(broker) == 0
    # An agent's name may hold white space: it names the asker, who reads nothing.
    assert (await broker.create(Text("ok"), to="alice", requester="Research Agent")).requester in (
        "Research Agent",
        None,  # (over HTTP the server names the requester itself)
    )


async def test_the_prompt_limit_is_configurable(connect: Callable[..., Broker]) -> None:
    async with connect(max_prompt_length=10) as broker:
        await broker.create(Text("0123456789"))
        with pytest.raises(InvalidRequest, match="at most 10"):
            await broker.create(Text("0123456789!"))


# -- expiry --------------------------------------------------------------------------------


async def test_a_wait_whose_own_timeout_passes_expires_the_request(broker: Broker) -> None:
    request = await broker.create(Text("Name?"))
    with pytest.raises(Expired) as caught:
        await broker.wait(request.id, timeout=0.01)
    assert isinstance(caught.value, TimeoutError)
    assert (await broker.get(request.id)).status is Status.EXPIRED
    assert await broker.resolve(request.id, "late") is False


async def test_an_overdue_request_expires_with_nobody_waiting(broker: Broker) -> None:
    request = await broker.create(Text("Name?"), timeout=0.05)
    assert request.expires_at is not None
    event = await settled_event(broker, request.id)
    assert event.type == "expired"
    assert (await broker.get(request.id)).status is Status.EXPIRED


async def test_a_waiter_on_a_request_with_a_deadline_gets_expired(broker: Broker) -> None:
    request = await broker.create(Text("Name?"), timeout=timedelta(milliseconds=50))
    with anyio.fail_after(BOUND), pytest.raises(Expired):
        await broker.wait(request.id)


async def test_resolve_racing_expiry_has_exactly_one_outcome(broker: Broker) -> None:
    for _ in range(20):
        request = await broker.create(Text("Name?"))
        waited, resolved = await asyncio.gather(
            broker.wait(request.id, timeout=0), broker.resolve(request.id, "x"), return_exceptions=True
        )
        status = (await broker.get(request.id)).status
        if resolved is True:
            assert status is Status.ANSWERED
        else:
            assert status is Status.EXPIRED
            assert isinstance(waited, Expired)
        events = [e async for e in broker.events() if e.request_id == request.id and e.type != "created"]
        assert len(events) == 1


_SETTLE_WAYS: dict[str, Callable[[Broker, Request], Any]] = {
    "answered": lambda b, r: b.resolve(r.id, True),
    "denied": lambda b, r: b.resolve(r.id, False, comment="not now"),
    "rejected": lambda b, r: b.reject(r.id, "no"),
    "cancelled": lambda b, r: b.cancel(r.id, "withdrawn"),
    "expired": lambda b, r: b.expire(r.id),
    "closed": lambda b, r: b.close("deploys"),
}


@pytest.mark.parametrize("way", list(_SETTLE_WAYS))
async def test_a_settled_request_shows_no_expiry_wherever_it_is_read_but_its_created_event_does(
    broker: Broker, backend: str, connect: Callable[..., Broker], way: str
) -> None:
    made = await broker.create(Confirm("Deploy?"), kind="approval", timeout=3600, channel="deploys")
    assert made.expires_at is not None
    before = await broker.last_event_id()
    await _SETTLE_WAYS[way](broker, made)
    with anyio.fail_after(BOUND):
        watched = await broker.watch(made.id)
    settled = await settled_event(broker, made.id, before)
    read = [watched, await broker.get(made.id), *(await broker.list(channel="deploys")).items]
    assert settled.request is not None
    read.append(settled.request)
    assert all(r.id == made.id and r.status is not Status.PENDING and r.expires_at is None for r in read)
    readers = [broker]
    if backend != "memory":  # another process's broker, which holds none of it yet
        readers.append(await connect().open())
    try:
        for reader in readers:
            pages = [await reader.find_events(request=made.id), [e async for e in reader.events(after=0)]]
            for events in pages:
                created = next(e for e in events if e.type == "created" and e.request_id == made.id).request
                assert created is not None and created.status is Status.PENDING
                assert created.expires_at == made.expires_at
                after = [e.request for e in events if e.type != "created" and e.request_id == made.id]
                assert after and all(r is not None and r.expires_at is None for r in after)
    finally:
        for reader in readers[1:]:
            await reader.aclose()


# -- giving up -----------------------------------------------------------------------------


async def test_a_cancelled_waiting_call_withdraws_its_request(broker: Broker) -> None:
    request = await broker.create(Text("Name?"))
    waiter = asyncio.create_task(broker.wait(request.id))
    await anyio.wait_all_tasks_blocked()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert await broker.resolve(request.id, "late") is False
    stored = await broker.get(request.id)
    assert stored.status is Status.CANCELLED
    assert stored.response is not None and stored.response.cause == "withdrawn"


async def test_a_request_is_withdrawn_only_when_its_last_waiting_call_is_cancelled(broker: Broker) -> None:
    request = await broker.create(Text("Name?"))
    first = asyncio.create_task(broker.wait(request.id))
    second = asyncio.create_task(broker.wait(request.id))
    await anyio.wait_all_tasks_blocked()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert (await broker.get(request.id)).status is Status.PENDING  # the second still waits on it
    assert await broker.resolve(request.id, "Ada")
    with anyio.fail_after(BOUND):
        assert (await second).answers == {"text": "Ada"}


async def test_cancel_gives_waiters_cancelled_not_rejected(broker: Broker) -> None:
    request = await broker.create(Text("Name?"))
    waiter = asyncio.create_task(broker.wait(request.id))
    await anyio.wait_all_tasks_blocked()
    assert await broker.cancel(request.id, "not needed")
    with anyio.fail_after(BOUND), pytest.raises(Cancelled) as caught:
        await waiter
    assert isinstance(caught.value, RuntimeError) and not isinstance(caught.value, Rejected | Closed)
    assert caught.value.reason == "not needed"


async def test_cancel_refuses_a_cause_it_does_not_know_on_every_store(broker: Broker) -> None:
    # The API refused it (422); a local store kept it as the response's `cause`.
    request = await broker.create(Text("Name?"))
    with pytest.raises(InvalidRequest, match="cause"):
        await broker.cancel(request.id, cause="weird")  # type: ignore[arg-type]
    assert (await broker.get(request.id)).status is Status.PENDING
    assert await broker.cancel(request.id, cause="closed")
    assert (await broker.get(request.id)).response.cause == "closed"  # type: ignore[union-attr]


async def test_a_wait_timeout_that_is_no_number_is_refused_before_it_expires_anything(broker: Broker) -> None:
    # `create` refused such a timeout; `wait` took NaN as already past and expired the request.
    request = await broker.create(Text("Name?"))
    for timeout in (float("nan"), "5"):
        with pytest.raises(InvalidRequest, match="timeout"):
            await broker.wait(request.id, timeout=timeout)  # type: ignore[arg-type]
    assert (await broker.get(request.id)).status is Status.PENDING
    with anyio.fail_after(BOUND), pytest.raises(Expired):
        await broker.wait(request.id, timeout=-1)  # already past: it expires, as before


async def test_release_withdraws_a_detached_request_so_a_stray_waiter_unblocks(broker: Broker) -> None:
    request = await broker.create_detached(Text("Name?"))
    stray = asyncio.create_task(broker.wait(request.id))
    await anyio.wait_all_tasks_blocked()
    assert await broker.release(request.id)
    with anyio.fail_after(BOUND), pytest.raises(Cancelled) as caught:
        await stray
    assert not isinstance(caught.value, Rejected)
    assert await broker.release(request.id) is False
    assert (await broker.get(request.id)).response.cause == "released"  # type: ignore[union-attr]


async def test_releasing_an_answered_detached_request_drops_it_once_and_keeps_the_answer(broker: Broker) -> None:
    request = await broker.create_detached(Text("Name?"))
    assert request.detached and (await broker.get(request.id)).detached
    assert await broker.resolve(request.id, "Ada")
    assert await broker.release(request.id)  # one was dropped
    assert await broker.release(request.id) is False  # and only once
    assert (await broker.get(request.id)).status is Status.ANSWERED
    assert (await broker.wait(request.id)).answers == {"text": "Ada"}


async def test_only_requests_created_detached_are_marked_so(broker: Broker) -> None:
    plain = await broker.create(Text("Name?"))
    assert not plain.detached and not (await broker.get(plain.id)).detached
    assert await broker.release(plain.id)  # still pending: withdrawn
    assert await broker.release(plain.id) is False


@pytest.mark.parametrize("answered", [False, True], ids=["pending", "answered"])
async def test_a_detached_request_is_released_once_from_any_broker_on_the_store(
    broker: Broker, connect: Callable[..., Broker], backend: str, answered: bool
) -> None:
    if backend == "memory":
        pytest.skip("a memory store is one process's own")
    request = await broker.create_detached(Text("Name?"))
    if answered:
        assert await broker.resolve(request.id, "Ada")
    async with connect() as other, connect() as third:
        assert await other.release(request.id)  # not the broker that created it: dropped all the same
        assert await other.release(request.id) is False
        assert await third.release(request.id) is False  # and once across every broker
    assert await broker.release(request.id) is False  # the creator's own, later: nothing more to drop
    settled = await broker.get(request.id)
    if answered:
        assert settled.status is Status.ANSWERED and settled.answer == "Ada"
    else:
        assert (settled.status, settled.response.cause) == (Status.CANCELLED, "released")  # type: ignore[union-attr]


async def test_a_cut_waiter_in_another_broker_leaves_a_detached_request_pending(
    broker: Broker, connect: Callable[..., Broker], backend: str
) -> None:
    if backend == "memory":
        pytest.skip("a memory store is one process's own")
    request = await broker.create_detached(Text("Name?"))
    async with connect() as other:
        stray = asyncio.create_task(other.wait(request.id))
        await anyio.wait_all_tasks_blocked()
        stray.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stray
    assert (await broker.get(request.id)).status is Status.PENDING


async def test_cutting_a_stray_waiter_leaves_a_detached_request_pending(broker: Broker) -> None:
    request = await broker.create_detached(Text("Name?"))
    stray = asyncio.create_task(broker.wait(request.id))
    await anyio.wait_all_tasks_blocked()
    stray.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stray
    assert (await broker.get(request.id)).status is Status.PENDING


async def test_closing_a_channel_withdraws_its_requests_and_refuses_new_ones(broker: Broker) -> None:
    a = await broker.create(Text("A?"), channel="a")
    b = await broker.create(Text("B?"), channel="b")
    waiter = asyncio.create_task(broker.wait(a.id))
    await anyio.wait_all_tasks_blocked()

    await broker.close(channel="a")

    with anyio.fail_after(BOUND), pytest.raises(Closed) as caught:
        await waiter
    assert isinstance(caught.value, RuntimeError) and not isinstance(caught.value, Rejected)
    with pytest.raises(Closed):
        await broker.create(Text("A again?"), channel="a")
    assert (await broker.get(b.id)).status is Status.PENDING
    assert await broker.resolve(b.id, "fine")
    assert (await broker.create(Text("B again?"), channel="b")).status is Status.PENDING
    with pytest.raises(Closed):  # the replay says the same
        await broker.wait(a.id)


async def test_closing_a_broker_withdraws_what_it_made_and_nothing_another_process_owns(
    broker: Broker, connect: Callable[..., Broker], backend: str
) -> None:
    if backend == "memory":
        pytest.skip("a memory store is one process's own")
    run = await broker.start_run("helper")
    theirs = await broker.create(Text("Another process's?"))
    async with connect() as closing:
        plain = await closing.create(Text("Mine?"))
        waited = await closing.create(Text("Waited on?"))
        waiter = asyncio.create_task(closing.wait(waited.id))
        outlive = [
            await closing.create_detached(Text("Detached?")),
            await closing.create(Text("Keyed?"), idempotency_key="k-1"),
            await closing.create(Text("The run's?"), run=run.id),
        ]
        await anyio.wait_all_tasks_blocked()
        await closing.close()
        with anyio.fail_after(BOUND), pytest.raises(Closed):
            await waiter
    for request in (plain, waited):
        assert (await broker.get(request.id)).response.cause == "closed"  # type: ignore[union-attr]
    for request in (theirs, *outlive):  # a process shutting down takes nothing else with it
        assert (await broker.get(request.id)).status is Status.PENDING, request.title


async def test_close_without_a_channel_closes_everything(broker: Broker) -> None:
    a = await broker.create(Text("A?"), channel="a")
    plain = await broker.create(Text("No channel?"))
    await broker.close()
    for request in (a, plain):
        with pytest.raises(Closed):
            await broker.wait(request.id)
    with pytest.raises(Closed):
        await broker.create(Text("more?"), channel="z")
    with pytest.raises(Closed):
        await broker.create(Text("more?"))


async def test_close_racing_create_leaves_nothing_pending_in_the_closed_channel(broker: Broker) -> None:
    async def create() -> Request | None:
        try:
            return await broker.create(Text("Q?"), channel="x")
        except Closed:
            return None

    tasks = [asyncio.create_task(create()) for _ in range(30)]
    await asyncio.sleep(0)  # let some of the creates start before the close
    await broker.close(channel="x")
    created = [r for r in await asyncio.gather(*tasks) if r is not None]
    assert not (await broker.pending(channel="x"))
    for request in created:
        assert (await broker.get(request.id)).status is Status.CANCELLED


async def test_leaving_async_with_only_disconnects(connect: Callable[..., Broker], backend: str) -> None:
    broker = connect()
    await broker.open()
    request = await broker.create(Text("Name?"))
    waiter = asyncio.create_task(broker.wait(request.id))
    await anyio.wait_all_tasks_blocked()
    store = getattr(broker, "store", None)  # a remote broker has none: the server keeps the requests
    await broker.aclose()
    with anyio.fail_after(BOUND), pytest.raises(Closed):
        await waiter
    if backend == "memory":
        assert (await store.get(request.id)).status is Status.PENDING  # type: ignore[union-attr]
    else:
        async with connect() as again:
            assert (await again.get(request.id)).status is Status.PENDING
            assert await again.resolve(request.id, "Ada")


async def test_leaving_async_with_ends_a_follow_of_the_event_log(connect: Callable[..., Broker]) -> None:
    broker = connect()
    await broker.open()
    received: list[str] = []
    heard = asyncio.Event()
    after = await broker.last_event_id()

    async def follow() -> None:
        async for event in broker.events(after=after, follow=True):
            received.append(event.type)
            heard.set()

    follower = asyncio.create_task(follow())
    await broker.create(Text("Name?"))
    with anyio.fail_after(BOUND):
        await heard.wait()
    await asyncio.sleep(0.1)  # the follower is waiting for the next event again
    await broker.aclose()
    with anyio.fail_after(BOUND):
        await follower  # ends, as the docstring says: neither hanging nor raising
    assert received == ["created"]


# -- idempotency ---------------------------------------------------------------------------


async def test_an_idempotency_key_returns_the_first_request(broker: Broker) -> None:
    first = await broker.create(Text("Deploy?"), requester="agent-1", idempotency_key="k1")
    again = await broker.create(Text("Deploy?"), requester="agent-1", idempotency_key="k1")
    other = await broker.create(Text("Deploy?"), requester="agent-2", idempotency_key="k1")
    assert again.id == first.id
    assert other.id != first.id
    assert len((await broker.list()).items) == 2


async def test_an_idempotency_key_used_again_for_another_request_is_refused_and_changes_nothing(
    broker: Broker,
) -> None:
    create = broker.create
    first = await create(Text("Deploy?"), to="alice", requester="agent-1", idempotency_key="k1", timeout=60)
    # a retry: its deadline counts from now, and that is no other request
    again = await create(Text("Deploy?"), to="alice", requester="agent-1", idempotency_key="k1", timeout=90)
    assert again.id == first.id
    others: dict[str, tuple[list[Any], dict[str, Any]]] = {
        "asks": ([Text("Deploy to prod?")], {}),
        "to": ([Text("Deploy?")], {"to": "bob"}),
        "title": ([Text("Deploy?")], {"title": "Release"}),
        "kind": ([Confirm("Deploy?", id="text")], {"kind": "approval"}),
    }
    for field, (asks, other) in others.items():
        with pytest.raises(IdempotencyKeyReused, match=rf"^{field}: idempotency key 'k1' .*differs in {field}") as e:
            await create(*asks, requester="agent-1", idempotency_key="k1", **{"to": "alice", **other})
        assert e.value.request_id == first.id
        assert isinstance(e.value, InvalidRequest)  # what a caller catching bad requests catches
    assert [r.id for r in (await broker.list()).items] == [first.id]
    assert (await broker.get(first.id)).asks == first.asks


# -- hooks ---------------------------------------------------------------------------------


async def test_hooks_run_beside_the_wait_not_in_front_of_it(broker: Broker) -> None:
    release = asyncio.Event()
    seen: list[str] = []

    async def slow_notify(request: Request) -> None:
        seen.append(request.id)
        await release.wait()

    broker.add_input_hook(slow_notify)
    request = await broker.create(Text("Name?"))
    await anyio.wait_all_tasks_blocked()
    assert seen == [request.id]  # the hook runs, and is still blocked
    assert await broker.resolve(request.id, "Ada")
    with anyio.fail_after(BOUND):
        assert (await broker.wait(request.id)).answers == {"text": "Ada"}
    release.set()


async def test_a_denying_hook_rejects_the_request_wherever_wait_has_got_to(broker: Broker) -> None:
    go = asyncio.Event()

    async def deny_later(request: Request) -> Deny:
        await go.wait()
        return Deny("policy says no")

    broker.add_input_hook(deny_later)
    request = await broker.create(Text("Name?"))
    waiter = asyncio.create_task(broker.wait(request.id))
    await anyio.wait_all_tasks_blocked()
    go.set()
    with anyio.fail_after(BOUND), pytest.raises(Rejected, match="policy says no"):
        await waiter


async def test_a_plain_function_is_a_hook_too_and_may_deny(broker: Broker) -> None:
    seen: list[str] = []

    def refuse(request: Request) -> Deny:  # `InputHook` takes sync hooks, as the runner does
        seen.append(request.id)
        return Deny("not by hand")

    broker.add_input_hook(refuse)
    request = await broker.create(Text("Name?"))
    with anyio.fail_after(BOUND), pytest.raises(Rejected, match="not by hand"):
        await broker.wait(request.id)
    assert seen == [request.id]


async def test_hooks_run_in_priority_order_and_a_failing_one_is_logged(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    order: list[str] = []
    done = asyncio.Event()

    def hook(name: str, fail: bool = False) -> Callable[[Request], object]:
        async def run(request: Request) -> None:
            order.append(name)
            if name == "last":
                done.set()
            if fail:
                raise RuntimeError("boom")

        return run

    broker.add_input_hook(hook("last"), priority=10)  # type: ignore[arg-type]
    broker.add_input_hook(hook("first", fail=True), priority=-5)  # type: ignore[arg-type]
    broker.add_input_hook(hook("middle"))  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="interlock"):
        request = await broker.create(Text("Name?"))
        with anyio.fail_after(BOUND):
            await done.wait()
    assert order == ["first", "middle", "last"]
    assert "boom" in caplog.text
    assert (await broker.get(request.id)).status is Status.PENDING


async def test_a_hook_that_overruns_its_bound_is_cut_and_the_next_runs(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    reached = asyncio.Event()

    async def hang(request: Request) -> None:
        await asyncio.Event().wait()

    async def after(request: Request) -> None:
        reached.set()

    broker.add_input_hook(hang, timeout=0.01)
    broker.add_input_hook(after, priority=1)
    with caplog.at_level(logging.WARNING, logger="interlock"):
        await broker.create(Text("Name?"))
        with anyio.fail_after(BOUND):
            await reached.wait()
    assert "timed out" in caplog.text


# -- reading -------------------------------------------------------------------------------


async def test_every_change_appends_one_event_in_order(broker: Broker) -> None:
    a = await broker.create(Text("A?"))
    b = await broker.create(Text("B?"))
    await broker.resolve(a.id, "x")
    await broker.reject(b.id, "no")
    events = [e async for e in broker.events()]
    assert [(e.type, e.request_id) for e in events] == [
        ("created", a.id),
        ("created", b.id),
        ("answered", a.id),
        ("rejected", b.id),
    ]
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert events[2].request is not None and events[2].request.answer == "x"
    tail = [e async for e in broker.events(after=events[1].id)]
    assert [e.id for e in tail] == [events[2].id, events[3].id]


async def test_a_page_of_events_read_again_shows_each_request_as_it_was_then(broker: Broker) -> None:
    # A `created` event carries its request as created, however often the page is read
    # (stores make that form once for a request they hold), and the settlement's as settled.
    a = await broker.create(Text("A?"), to="alice")
    b = await broker.create(Text("B?"), to="alice")
    await broker.resolve(a.id, "x", by="alice")
    for _ in range(3):
        page = await broker.find_events(involving="alice")
        shown = {(e.type, e.request_id): e.request for e in page}
        created_a, created_b, answered_a = shown["created", a.id], shown["created", b.id], shown["answered", a.id]
        assert created_a is not None and created_a.status is Status.PENDING and created_a.response is None
        assert created_b is not None and created_b.status is Status.PENDING
        assert answered_a is not None and answered_a.status is Status.ANSWERED and answered_a.answer == "x"
        assert created_a.asks == answered_a.asks and created_a.created_at == answered_a.created_at
    await broker.reject(b.id, "no", by="alice")
    page = await broker.find_events(involving="alice")
    shown = {(e.type, e.request_id): e.request for e in page}
    assert shown["created", b.id] is not None and shown["created", b.id].status is Status.PENDING
    assert shown["rejected", b.id] is not None and shown["rejected", b.id].status is Status.REJECTED


async def test_a_page_of_events_after_no_event_id_is_refused_as_the_log_is(broker: Broker) -> None:
    await broker.create(Text("A?"), to="alice")
    for after in (-1, MAX_EVENT_ID + 1):
        with pytest.raises(InvalidRequest, match="after must be an event id between 0 and"):
            await broker.find_events(after=after)
        with pytest.raises(InvalidRequest, match="after must be an event id between 0 and"):
            [e async for e in broker.events(after=after)]


async def test_list_filters_and_pages_by_keyset(broker: Broker) -> None:
    made = []
    for i in range(7):
        made.append(await broker.create(Text(f"Q{i}?"), to="alice" if i % 2 else "bob", session=f"s{i % 3}"))
    await broker.resolve(made[1].id, "done")

    newest_first = [r.id for r in (await broker.list(limit=100)).items]
    assert newest_first == [r.id for r in reversed(made)]

    seen: list[str] = []
    cursor = None
    while True:
        page = await broker.list(order="asc", limit=3, after=cursor)
        seen += [r.id for r in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == [r.id for r in made]

    alice_pending = await broker.list(recipient="alice", status="pending")
    assert {r.id for r in alice_pending.items} == {made[3].id, made[5].id}
    assert {r.id for r in (await broker.list(session="s0")).items} == {made[0].id, made[3].id, made[6].id}


async def test_lists_of_approvals_and_of_one_agent_find_exactly_theirs_alone_or_beside_other_filters(
    broker: Broker,
) -> None:
    made = []
    for i in range(9):
        kind = "approval" if i % 3 == 0 else "question"
        asks = Confirm(f"Run step {i}?") if kind == "approval" else Text(f"Step {i}?")
        made.append(
            await broker.create(asks, kind=kind, to="alice" if i % 2 else "bob", agent=f"agent-{i % 2}", requester="ci")
        )
    await broker.resolve(made[3].id, True)

    async def ids(**filters: Any) -> list[str]:
        seen: list[str] = []
        cursor = None
        while True:  # page by page, two at a time
            page = await broker.list(limit=2, after=cursor, **filters)
            seen += [r.id for r in page.items]
            if page.next_cursor is None:
                return seen
            cursor = page.next_cursor

    def of(*indexes: int) -> list[str]:
        return [made[i].id for i in sorted(indexes, reverse=True)]  # newest first

    assert await ids(kind="approval") == of(0, 3, 6)
    assert await ids(kind="question") == of(1, 2, 4, 5, 7, 8)
    assert await ids(agent="agent-1") == of(1, 3, 5, 7)
    assert await ids(agent="agent-1", kind="approval") == of(3)
    assert await ids(recipient="bob", kind="approval") == of(0, 6)
    assert await ids(requester="ci", agent="agent-0") == of(0, 2, 4, 6, 8)
    assert await ids(kind="approval", status="pending") == of(0, 6)
    assert await ids(kind="approval", settled=True) == of(3)
    assert await ids(agent="nobody") == []


async def test_a_list_of_an_unknown_kind_is_refused_as_on_the_wire(broker: Broker) -> None:
    await broker.create(Text("Step?"), to="alice")
    for kind in ("approvals", "Question", ""):
        with pytest.raises(InvalidRequest, match=f"kind must be 'question' or 'approval', not {kind!r}"):
            await broker.list(kind=kind)


async def test_a_list_of_a_misspelt_status_or_order_is_refused_naming_what_there_is(broker: Broker) -> None:
    with pytest.raises(InvalidRequest, match=r"status must be one of pending, answered, .*, not 'pendin'"):
        await broker.list(status="pendin")
    with pytest.raises(InvalidRequest, match="order must be 'asc' or 'desc', not 'up'"):
        await broker.list(order="up")
    # Another surface's word for a filter named a class of interlock's own ("Query.__init__()").
    with pytest.raises(TypeError, match=r"list\(\) got an unknown filter 'to' \('to' is 'recipient' here\): it takes"):
        await broker.list(to="alice")  # type: ignore[call-arg]


async def test_the_dashboard_counts_what_waits_by_agent_and_how_each_person_answers(
    broker: Broker, local: LocalBroker
) -> None:
    for person in ("alice", "bob", "carol"):
        await local.save_principal(Principal(person, "human"))
    await broker.add_team_members("ops", ["alice", "carol"])
    for prompt in ("Deploy?", "Deploy again?"):
        await broker.create(Text(prompt), to="alice", agent="deployer")
    await broker.create(Text("Review?"), to="alice", agent="reviewer")
    done = await broker.create(Text("Done?"), to="alice", agent="reviewer")
    await local.resolve(done.id, "yes", by="alice")  # `by` as given (a server names its caller)
    await broker.expire((await broker.create(Text("Too late?"), to="alice", agent="reviewer")).id)
    await broker.create(Text("Bob's?"), to="bob", agent="deployer")
    await broker.create(Text("On call?"), to="ops", agent="pager")
    paged = await broker.create(Text("Paged?"), to="ops", agent="pager")
    await local.reject(paged.id, "not now", by="carol")
    anyone = await broker.create(Text("Anyone?"), agent="pager")  # to no one in particular
    await local.resolve(anyone.id, "me", by="dave")
    await broker.expire((await broker.create(Text("Anyone, in time?"), agent="pager")).id)

    mine = await broker.dashboard(recipient="alice", teams=["ops"])
    assert (mine.pending_count, mine.answered_count, mine.expired_count) == (4, 2, 1)
    assert [(a.agent, a.by_age, a.total) for a in mine.agents] == [
        ("deployer", (2, 0, 0), 2),
        ("pager", (1, 0, 0), 1),
        ("reviewer", (1, 0, 0), 1),
    ]
    assert all(timedelta(0) <= a.oldest < timedelta(minutes=5) for a in mine.agents)
    people = {p.person: (p.answered, p.expired, p.pending) for p in mine.people}
    assert people == {"alice": (1, 1, 3), "carol": (1, 0, 0)}  # carol answered for the team
    assert [(t.person, t.answered, t.expired, t.pending) for t in mine.teams] == [("ops", 1, 0, 1)]
    assert mine.median is not None and timedelta(0) <= mine.median < timedelta(minutes=5)
    assert not mine.capped and mine.window == timedelta(days=7)

    everyone = await broker.dashboard()  # every request, every team with its row
    assert (everyone.pending_count, everyone.answered_count, everyone.expired_count) == (5, 3, 2)
    assert {p.person: p.answered for p in everyone.people} == {"alice": 1, "bob": 0, "carol": 1, "dave": 1, NOBODY: 0}
    assert [t.person for t in everyone.teams] == ["ops"]
    assert (await broker.dashboard(recipient="bob")).pending_count == 1
    for wrong in ({"window": timedelta(0)}, {"window": timedelta(days=400)}, {"teams": ["ops"]}):
        with pytest.raises(InvalidRequest):
            await broker.dashboard(**wrong)  # type: ignore[arg-type]


async def test_pending_is_a_snapshot_copy(broker: Broker) -> None:
    a = await broker.create(Text("A?"))
    snapshot = await broker.pending()
    assert list(snapshot) == [a.id]
    snapshot.clear()
    b = await broker.create(Text("B?"))
    await broker.resolve(a.id, "x")
    assert list(await broker.pending()) == [b.id]


async def test_following_the_event_log_sees_new_events_live(broker: Broker) -> None:
    received: list[str] = []
    ready = asyncio.Event()

    async def follow() -> None:
        ready.set()
        async for event in broker.events(follow=True):
            received.append(event.type)
            if len(received) == 2:
                return

    task = asyncio.create_task(follow())
    await ready.wait()
    request = await broker.create(Text("Name?"))
    await broker.resolve(request.id, "Ada")
    with anyio.fail_after(BOUND):
        await task
    assert received == ["created", "answered"]


async def test_an_expired_deadline_in_the_past_settles_on_open(connect: Callable[..., Broker], backend: str) -> None:
    if backend != "sqlite":
        pytest.skip("this test moves a deadline in the SQLite file itself")
    async with connect() as first:
        request = await first.create(Text("Name?"), timeout=3600)
    # Move its deadline into the past, as if the process had been down for an hour.
    async with connect() as second:
        store = second.store
        past = datetime.now(UTC) - timedelta(seconds=1)
        stored = await store.get(request.id)
        assert stored is not None
        db = store.db  # type: ignore[attr-defined]
        db.execute("UPDATE requests SET expires_at = ? WHERE id = ?", (int(past.timestamp() * 1e6), request.id))
    async with connect() as third:
        assert (await third.get(request.id)).status is Status.EXPIRED


async def test_inform_records_a_progress_update_as_an_event(broker: Broker) -> None:
    receipt = await broker.inform("Indexing 40%", to="alice", session="s1", agent="indexer", data={"done": 40})
    events = [e async for e in broker.events()]
    assert [(e.id, e.type) for e in events] == [(receipt.id, "informed")]
    assert events[0].request is None
    assert events[0].data["message"] == "Indexing 40%"
    assert events[0].data["data"] == {"done": 40}
    assert (events[0].data["to"], events[0].data["session"]) == ("alice", "s1")
    with pytest.raises(InvalidRequest):
        await broker.inform("  ")


async def test_watching_returns_the_request_when_it_settles_and_changes_nothing(broker: Broker) -> None:
    request = await broker.create(Text("Name?"))
    still = await broker.watch(request.id, timeout=0.01)
    assert still.status is Status.PENDING  # the time ran out: nothing expired

    watcher = asyncio.create_task(broker.watch(request.id))
    await anyio.wait_all_tasks_blocked()
    watcher.cancel()
    with pytest.raises(asyncio.CancelledError):
        await watcher
    assert (await broker.get(request.id)).status is Status.PENDING  # nothing withdrawn

    watcher = asyncio.create_task(broker.watch(request.id, timeout=BOUND))
    await anyio.wait_all_tasks_blocked()
    await broker.resolve(request.id, "Ada")
    with anyio.fail_after(BOUND):
        assert (await watcher).answer == "Ada"
    with pytest.raises(NotFound):
        await broker.watch("nope")


async def test_expire_settles_a_pending_request_as_expired(broker: Broker) -> None:
    request = await broker.create(Text("Name?"))
    assert await broker.expire(request.id)
    assert await broker.expire(request.id) is False
    with pytest.raises(Expired):
        await broker.wait(request.id)


async def test_a_misspelt_field_is_refused_rather_than_ignored(broker: Broker) -> None:
    with pytest.raises(TypeError, match="unknown field"):
        await broker.create(Text("Name?"), too="alice")  # type: ignore[call-arg]
    assert (await broker.list()).items == []


async def test_an_id_written_as_a_hex_number_names_the_same_request(broker: Broker) -> None:
    request = await broker.create(Text("Name?"))
    as_hex = "0x" + request.id.upper()
    assert (await broker.get(as_hex)).id == request.id
    assert await broker.resolve(as_hex, "Ada")
    assert (await broker.wait(as_hex)).answers == {"text": "Ada"}
    with pytest.raises(NotFound):
        await broker.get("0x" + "f" * 32)


async def test_denying_an_approval_is_recorded_as_a_denial_with_the_reason(broker: Broker) -> None:
    approval = await broker.create(Confirm("Deploy to prod?", id="approve"), kind="approval")
    assert await broker.resolve(approval.id, False, by="alice", comment="Not on a Friday.")
    denied = await broker.get(approval.id)
    assert denied.status is Status.REJECTED
    assert denied.response is not None and (denied.response.reason, denied.response.by) == ("Not on a Friday.", "alice")
    assert denied.response.answers == {"approve": False}  # what was said, kept
    with pytest.raises(Rejected) as caught:
        await broker.wait(approval.id)
    assert caught.value.reason == "Not on a Friday."
    # A no to a question is an answer like any other.
    question = await broker.create(Confirm("Is it raining?"))
    assert await broker.resolve(question.id, False)
    assert (await broker.get(question.id)).status is Status.ANSWERED


# -- teams, the outbox and the routing -------------------------------------------------------


@pytest.fixture
def local(backend: str, broker: Broker, request: pytest.FixtureRequest) -> LocalBroker:
    """The local broker on the store under test: the broker itself, or the server's own
    (for what only a process on the store does: principals, tokens, its delivery loop)."""
    if backend == "http":
        server: LocalBroker = request.getfixturevalue("http_server").app.state.interlock.broker
        return server
    assert isinstance(broker, LocalBroker)
    return broker


async def test_a_team_is_made_with_its_members_changed_and_deleted(broker: Broker, local: LocalBroker) -> None:
    for person in ("alice", "bob"):
        await local.save_principal(Principal(person, "human"))
    await local.save_principal(Principal("alice-bot", "agent", "alice"))

    assert list(await broker.add_team_members("ops", ["alice"])) == ["alice"]
    assert list(await broker.add_team_members("ops", ["bob", "alice"])) == ["alice", "bob"]
    assert list(await broker.add_team_members("empty")) == []
    assert {name: list(members) for name, members in (await broker.list_teams()).items()} == {
        "empty": [],
        "ops": ["alice", "bob"],
    }
    assert await broker.team_members("nope") is None
    for team, members in (("ops", ["carol"]), ("ops", ["alice-bot"]), ("alice", []), ("alice-bot", [])):
        with pytest.raises(InvalidRequest):  # no person, an agent, a person's or an agent's name
            await broker.add_team_members(team, members)
    assert list(await broker.team_members("ops") or ()) == ["alice", "bob"]  # nothing changed
    assert await local.teams_of("alice") == frozenset({"ops"})

    assert await broker.remove_team_member("ops", "alice")
    assert await broker.remove_team_member("ops", "alice") is False
    assert await broker.remove_team_member("nope", "bob") is False
    assert list(await broker.team_members("ops") or ()) == ["bob"]
    assert await broker.delete_team("ops")
    assert await broker.delete_team("ops") is False
    assert await broker.team_members("ops") is None
    assert list(await broker.list_teams()) == ["empty"]


class _Refusing:
    """A channel that fails every send for good: each delivery becomes a dead letter."""

    async def send(self, message: Message) -> str | None:
        raise PermanentFailure("nobody is at this pager")

    async def aclose(self) -> None:
        pass


_PAGER = {
    "channels": {"pager": {"type": "webhook", "url": "http://127.0.0.1:9/pager", "secret": "s3cret-s3cret-s3cret"}},
    "recipients": {"alice": {"channels": ["pager"], "addresses": {"pager": "+33 6 12 34 56 78"}}},
}


async def test_a_dead_letter_is_listed_read_and_sent_again_once(broker: Broker, local: LocalBroker) -> None:
    request = await broker.create(Confirm("Restart the workers?"), to="alice", requester="ops-bot")
    other = await broker.create(Text("Lunch?"), to="bob", requester="ops-bot")  # routed nowhere
    loop = DeliveryLoop(local.outbox, routing_from_dict(_PAGER), channels={"pager": _Refusing()})
    with anyio.fail_after(BOUND):
        while not await broker.list_deliveries(status="dead"):
            await loop.run_once()

    [dead] = await broker.list_deliveries(request_id=request.id)
    assert (dead.status, dead.recipient, dead.channel, dead.attempts) == ("dead", "alice", "pager", 1)
    assert dead.last_error == "nobody is at this pager"
    assert await broker.get_delivery(dead.id) == dead
    assert [d.id for d in await broker.list_deliveries(status="dead")] == [dead.id]
    assert await broker.list_deliveries(status="pending") == []
    assert await broker.list_deliveries(request_id=other.id) == []
    assert await broker.list_deliveries(request_id="f" * 32) == []  # no such request: nothing of it
    assert await broker.list_deliveries(status="dead", after=dead.id) == []

    again = await broker.retry_delivery(dead.id)
    assert (again.id, again.status, again.attempts) == (dead.id, "pending", 0)
    assert (await broker.get_delivery(dead.id)).status == "pending"
    with pytest.raises(AlreadySettled, match="not a dead letter"):
        await broker.retry_delivery(dead.id)
    for missing in (broker.get_delivery("dlv_nope"), broker.retry_delivery("dlv_nope")):
        with pytest.raises(NotFound):
            await missing
    with pytest.raises(ValueError, match="limit"):
        await broker.list_deliveries(limit=0)
    # A filter no store could hold is refused alike by every store (PostgreSQL failed on a
    # NUL, as a signed inbound webhook naming such a request made it do).
    for filters in ({"request_id": "01\x00x"}, {"recipient": "al\x00ice"}, {"request_id": "x" * 5000}):
        with pytest.raises(InvalidRequest, match=r"request|recipient"):
            await local.list_deliveries(**filters)  # type: ignore[arg-type]


class _Recording:
    """A channel that takes every send: whom each message went to, and about which request."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    async def send(self, message: Message) -> str | None:
        self.sent.append((message.delivery.recipient, message.request.id))
        return None

    async def aclose(self) -> None:
        pass


_PAGERS = {
    "channels": {"pager": {"type": "webhook", "url": "http://127.0.0.1:9/pager", "secret": "s3cret-s3cret-s3cret"}},
    "teams": {"ops": {"members": ["alice", "bob"]}},
    "default": {"channels": ["pager"]},
}


async def test_nothing_is_sent_to_a_person_cut_off_and_each_skipped_delivery_says_why(
    broker: Broker, local: LocalBroker
) -> None:
    """`token revoke alice` cuts alice off: no message goes to her (its answers would be
    refused), each one she would have had is skipped saying why, her team's still reach
    bob, and `token create alice` lets what comes after reach her again."""
    for person in ("alice", "bob"):
        await local.save_principal(Principal(person, "human"))
        await local.save_token(issue_token(person, datetime.now(UTC)))
    await local.revoke_tokens(principal="alice")
    assert await local.outbox.cut_off(["alice", "bob", "carol", "ops"]) == frozenset({"alice"})
    assert await local.outbox.cut_off([]) == frozenset()
    pager = _Recording()
    loop = DeliveryLoop(local.outbox, routing_from_dict(_PAGERS), channels={"pager": pager})

    async def send_all() -> None:
        with anyio.fail_after(BOUND):
            while await loop.run_once() or await broker.list_deliveries(status="pending"):
                pass

    to_team = await broker.create(Confirm("Restart the workers?"), to="ops", requester="ops-bot")
    to_her = await broker.create(Text("Which region?"), to="alice", requester="ops-bot")
    await send_all()
    assert sorted(pager.sent) == [("bob", to_team.id)]
    skipped = [d for d in await broker.list_deliveries() if d.recipient == "alice"]
    assert sorted(d.request_id for d in skipped) == sorted([to_team.id, to_her.id])
    for delivery in skipped:
        assert (delivery.status, delivery.attempts) == ("skipped", 0)
        assert delivery.last_error is not None and "every token of 'alice' is revoked" in delivery.last_error
        assert "interlock token create alice" in delivery.last_error
    # the request's own deliveries (its page's, `GET /requests/{id}/deliveries`) list it, saying why
    [hers] = await broker.list_deliveries(request_id=to_her.id)
    assert (hers.recipient, hers.channel, hers.status) == ("alice", "pager", "skipped")
    assert hers.last_error is not None and "every token of 'alice' is revoked" in hers.last_error

    await local.save_token(issue_token("alice", datetime.now(UTC)))  # `token create alice`: back
    again = await broker.create(Text("And now?"), to="alice", requester="ops-bot")
    await send_all()
    assert sorted(pager.sent) == sorted([("bob", to_team.id), ("alice", again.id)])


async def test_the_routing_is_kept_with_its_secrets_masked_and_a_bad_one_changes_nothing(broker: Broker) -> None:
    assert await broker.routing() is None
    kept = await broker.set_routing(_PAGER)
    assert kept["channels"]["pager"] == {"type": "webhook", "url": "http://127.0.0.1:9/pager", "secret": "***"}
    assert kept["recipients"] == _PAGER["recipients"]
    assert await broker.routing() == kept
    with pytest.raises(InvalidRequest, match="sms"):
        await broker.set_routing({"recipients": {"alice": {"channels": ["sms"]}}})
    assert await broker.routing() == kept
    again = await broker.set_routing({**kept, "max_attempts": 4})  # read back, changed, put: the secret stays
    assert again == {**kept, "max_attempts": 4}
    with pytest.raises(InvalidRequest, match=r"channels\.beeper\.secret: '\*\*\*' is how a secret is shown"):
        await broker.set_routing({"channels": {"beeper": kept["channels"]["pager"]}})
    assert await broker.routing() == again


async def test_a_routing_put_back_as_shown_keeps_the_secrets_in_use(local: LocalBroker) -> None:
    await local.set_routing(_PAGER)
    await local.set_routing({**(await local.routing() or {}), "max_attempts": 4})
    kept = await stored_routing(local.store)
    assert kept is not None and kept["channels"]["pager"]["secret"] == "s3cret-s3cret-s3cret"


async def test_a_webhooks_headers_are_shown_masked_and_kept_when_put_back_as_shown(
    broker: Broker, local: LocalBroker
) -> None:
    hook = {**_PAGER["channels"]["pager"], "headers": {"Authorization": "Bearer hdr-s3cret", "X-Team": "ops"}}
    shown = await broker.set_routing({**_PAGER, "channels": {"pager": hook}})
    assert shown["channels"]["pager"]["headers"] == {"Authorization": "***", "X-Team": "***"}
    assert "hdr-s3cret" not in json.dumps(await broker.routing())
    edited = {**shown, "channels": {"pager": {**shown["channels"]["pager"]}}}
    edited["channels"]["pager"]["headers"] = {"Authorization": "***", "X-Team": "dev"}  # one kept, one changed
    await broker.set_routing(edited)
    kept = await stored_routing(local.store)
    assert kept is not None and kept["channels"]["pager"]["headers"] == {
        "Authorization": "Bearer hdr-s3cret",
        "X-Team": "dev",
    }
    edited["channels"]["pager"]["headers"] = {"X-Other": "***"}
    with pytest.raises(InvalidRequest, match=r"channels\.pager\.headers\.X-Other: '\*\*\*' is how a secret is shown"):
        await broker.set_routing(edited)
    assert await stored_routing(local.store) == kept


async def test_a_masked_secret_is_not_kept_for_a_channel_that_would_send_it_elsewhere(
    broker: Broker, local: LocalBroker
) -> None:
    """Whoever may change the routing, but was only ever shown `***`, cannot have the secret
    behind it sent to a server of their choosing: a webhook's other `url`, a route's other
    address on it, an email channel's other SMTP host."""
    hook = {**_PAGER["channels"]["pager"], "headers": {"Authorization": "Bearer hdr-s3cret"}}
    mail = {"type": "email", "from": "ops@example.com", "host": "smtp.example.com", "password": "smtp-pw"}
    shown = await broker.set_routing({**_PAGER, "channels": {"pager": hook, "mail": mail}})
    stored = await stored_routing(local.store)

    def edited(**changes: Any) -> dict[str, Any]:
        doc = json.loads(json.dumps(shown))
        for path, value in changes.items():
            *parents, last = path.split("__")
            target = doc
            for key in parents:
                target = target[key]
            target[last] = value
        return doc

    for doc, changed in (
        (edited(channels__pager__url="https://collector.example.net/x"), "channels.pager.url"),
        (edited(recipients__alice__addresses__pager="https://collector.example.net/x"), "recipients.alice"),
        (edited(channels__mail__host="smtp.example.net"), "channels.mail.host"),
    ):
        with pytest.raises(InvalidRequest, match=rf"keeps the secret in use only while .* {re.escape(changed)}"):
            await broker.set_routing(doc)
        assert await stored_routing(local.store) == stored
    # the secret itself, given with the new destination, is taken
    moved = edited(channels__pager__url="https://hooks.example.org/in")
    moved["channels"]["pager"]["headers"] = {"Authorization": "Bearer new-s3cret"}
    moved["channels"]["pager"]["secret"] = "an0ther-s3cret-s3cret"
    await broker.set_routing(moved)
    kept = await stored_routing(local.store)
    assert kept is not None and kept["channels"]["pager"]["headers"] == {"Authorization": "Bearer new-s3cret"}
    # who an email is for is not where its password goes: a new address keeps it
    await broker.set_routing(
        {
            **(await broker.routing() or {}),
            "recipients": {"alice": {"channels": ["mail"], "addresses": {"mail": "a@x.org"}}},
        }
    )
    kept = await stored_routing(local.store)
    assert kept is not None and kept["channels"]["mail"]["password"] == "smtp-pw"


async def test_a_masked_smtp_password_is_not_kept_for_a_channel_that_would_send_it_without_tls(
    broker: Broker, local: LocalBroker
) -> None:
    """An email channel's password shown as `***` and put back with TLS turned off would go
    to the same server in the clear, for anyone on the way to read: refused, changing
    nothing. From one kind of TLS to the other, it is kept; with the password itself given,
    TLS may go."""
    mail = {"type": "email", "from": "ops@example.com", "host": "smtp.example.com", "tls": True, "password": "smtp-pw"}
    shown = await broker.set_routing({"channels": {"mail": mail}})
    assert shown["channels"]["mail"]["password"] == "***"
    stored = await stored_routing(local.store)
    plain = {**shown["channels"]["mail"], "tls": False}
    for options in (plain, {k: v for k, v in plain.items() if k != "tls"}):
        with pytest.raises(InvalidRequest, match=r"channels\.mail would send it without TLS .* give the secret itself"):
            await broker.set_routing({"channels": {"mail": options}})
        assert await stored_routing(local.store) == stored
    await broker.set_routing({"channels": {"mail": {**plain, "starttls": True}}})
    kept = await stored_routing(local.store)
    assert kept is not None and kept["channels"]["mail"]["password"] == "smtp-pw"
    await broker.set_routing({"channels": {"mail": {**plain, "password": "n3w-pw"}}})
    kept = await stored_routing(local.store)
    assert kept is not None and (kept["channels"]["mail"]["password"], kept["channels"]["mail"]["tls"]) == (
        "n3w-pw",
        False,
    )


async def test_a_urls_password_is_shown_masked_and_kept_only_with_the_rest_of_the_url(
    broker: Broker, local: LocalBroker
) -> None:
    hook = {"type": "webhook", "url": "https://hooks:url-s3cret@hooks.example.com/in?token=qs-s3cret"}
    routes = {"alice": {"channels": ["pager"], "addresses": {"pager": "https://al:addr-s3cret@alice.example.com/in"}}}
    shown = await broker.set_routing({"channels": {"pager": hook}, "recipients": routes})
    assert shown["channels"]["pager"]["url"] == "https://hooks:***@hooks.example.com/in?token=***"
    assert shown["recipients"]["alice"]["addresses"]["pager"] == "https://al:***@alice.example.com/in"
    assert "s3cret" not in json.dumps(await broker.routing())
    await broker.set_routing({**shown, "max_attempts": 4})  # put back as shown: kept
    kept = await stored_routing(local.store)
    assert kept is not None and kept["channels"]["pager"]["url"] == hook["url"]
    assert kept["recipients"] == routes
    elsewhere = {
        **shown,
        "channels": {"pager": {**shown["channels"]["pager"], "url": "https://hooks:***@evil.example/in"}},
    }
    with pytest.raises(InvalidRequest, match=r"channels\.pager\.url: '\*\*\*' is how a URL's password is shown"):
        await broker.set_routing(elsewhere)
    assert await stored_routing(local.store) == kept


async def test_a_person_whose_every_token_is_revoked_is_cut_off_until_given_a_new_one(local: LocalBroker) -> None:
    await local.save_principal(Principal("erin", "human"))
    assert not await local.tokens_all_revoked("erin")  # no token yet (serve's person at the machine)
    assert not await local.tokens_all_revoked("nobody")
    session = issue_token("erin", datetime.now(UTC), for_session=True)  # a sign-in link's session
    await local.save_token(session)
    await local.revoke_tokens(token_id=session.id)
    assert not await local.tokens_all_revoked("erin")  # a session's token is not one of hers
    first, second = (issue_token("erin", datetime.now(UTC)) for _ in range(2))
    for token in (first, second):
        await local.save_token(token)
    await local.revoke_tokens(token_id=first.id)
    assert not await local.tokens_all_revoked("erin")  # one of hers still works
    await local.revoke_tokens(principal="erin")
    assert await local.tokens_all_revoked("erin")  # `token revoke erin`: cut off
    await local.save_token(issue_token("erin", datetime.now(UTC)))
    assert not await local.tokens_all_revoked("erin")  # `token create erin`: back


async def test_an_answer_in_the_name_of_a_person_cut_off_is_refused_and_changes_nothing(
    broker: Broker, local: LocalBroker
) -> None:
    """Whoever records it (an admin naming them over HTTP, a local caller), an answer or a
    local refusal `by` a person `token revoke` cut off is `Forbidden` (403 over HTTP) and leaves
    the request pending, until `token create` gives them a token again."""
    for person in ("alice", "bob"):
        await local.save_principal(Principal(person, "human"))
        await local.save_token(issue_token(person, datetime.now(UTC)))
    await local.revoke_tokens(principal="alice")
    question = await broker.create(Text("Which region?"), to="alice")
    approval = await broker.create(Confirm("Deploy?"), to="alice")
    with pytest.raises(Forbidden, match=r"every token of 'alice' is revoked .* nothing was answered"):
        await broker.resolve(question.id, "eu", by="alice")
    with pytest.raises(Forbidden, match="every token of 'alice' is revoked"):
        await broker.resolve(approval.id, True, by="alice")
    with pytest.raises(Forbidden, match="every token of 'alice' is revoked"):
        await local.reject(approval.id, "not now", by="alice")  # (a remote broker's names its caller)
    for request in (question, approval):
        assert (await broker.get(request.id)).status is Status.PENDING
    assert await broker.resolve(question.id, "eu", by="bob")  # bob is not cut off

    await local.save_token(issue_token("alice", datetime.now(UTC)))  # `token create alice`: back
    assert await local.reject(approval.id, "not now", by="alice")
    settled = await broker.get(approval.id)
    assert settled.status is Status.REJECTED and settled.response is not None and settled.response.by == "alice"


async def test_a_grant_given_by_a_person_cut_off_authorizes_nothing_until_they_are_given_a_token(
    broker: Broker, local: LocalBroker
) -> None:
    """`token revoke alice` withdraws alice's authority, and with it what her grants let
    others do: checked when used, so they are not revoked, and `token create alice` gives
    them back. A grant of someone else on the same thing checks meanwhile."""
    for person in ("alice", "bob"):
        await local.save_principal(Principal(person, "human"))
        await local.save_token(issue_token(person, datetime.now(UTC)))
    older = await broker.give_grant("bot", "repo:web", "deploy", by="bob", exp=None)
    given = await broker.give_grant("bot", "repo:web", "deploy", by="alice", exp=None)
    own = await broker.give_grant("bot", "interlock:inbox/alice", "hitl/request", by="alice", exp=None)
    nameless = await broker.give_grant("bot", "repo:docs", "read", exp=None)  # given by nobody named
    assert await broker.check_grant("bot", "repo:web", "deploy") == given  # the newest

    await local.revoke_tokens(principal="alice")
    assert await broker.check_grant("bot", "repo:web", "deploy") == older  # bob's still counts
    assert await broker.check_grant("bot", "repo:web", "deploy", issuer="alice") is None
    assert await broker.check_grant("bot", "interlock:inbox/alice", "hitl/request") is None
    assert await broker.check_grant("bot", "repo:docs", "read") == nameless
    live = (await broker.list_grants(audience="bot", live=True)).items
    assert sorted(g.id for g in live) == sorted([older.id, nameless.id])
    assert (await broker.get_grant(given.id)).revoked_at is None  # withheld, not revoked
    assert len((await broker.list_grants(audience="bot")).items) == 4

    await local.save_token(issue_token("alice", datetime.now(UTC)))  # `token create alice`: back
    assert await broker.check_grant("bot", "repo:web", "deploy") == given
    assert await broker.check_grant("bot", "interlock:inbox/alice", "hitl/request") == own


async def test_a_grant_given_by_a_person_cut_off_is_listed_and_read_as_not_in_force_until_they_are_given_a_token(
    broker: Broker, local: LocalBroker
) -> None:
    """Listed without `live`, or read by id, a grant whose issuer `token revoke` cut off
    says so (`issuer_cut_off`): it authorizes nothing, though nothing stored of it changed
    (not revoked, its expiry as it was), and once `token create` gives its issuer a token
    again it reads as before."""
    for person in ("alice", "bob"):
        await local.save_principal(Principal(person, "human"))
        await local.save_token(issue_token(person, datetime.now(UTC)))
    hers = await broker.give_grant("bot", "repo:web", "deploy", by="alice", exp=None)
    his = await broker.give_grant("bot", "repo:web", "deploy", by="bob", exp=None)
    nameless = await broker.give_grant("bot", "repo:docs", "read", exp=None)  # given by nobody named
    assert not any(g.issuer_cut_off for g in (await broker.list_grants(audience="bot")).items)

    await local.revoke_tokens(principal="alice")
    listed = {g.id: g for g in (await broker.list_grants(audience="bot")).items}
    assert {gid for gid, g in listed.items() if g.issuer_cut_off} == {hers.id}
    assert listed[hers.id] == replace(hers, issuer_cut_off=True)  # all else as it was given
    assert [g.id for g in (await broker.list_grants(issuer="alice")).items] == [hers.id]
    assert (await broker.list_grants(issuer="alice")).items[0].issuer_cut_off
    assert (await broker.get_grant(hers.id)).issuer_cut_off
    assert not (await broker.get_grant(his.id)).issuer_cut_off
    assert not (await broker.get_grant(nameless.id)).issuer_cut_off
    assert hers.id not in {g.id for g in (await broker.list_grants(audience="bot", live=True)).items}

    await local.save_token(issue_token("alice", datetime.now(UTC)))  # `token create alice`: back
    assert not any(g.issuer_cut_off for g in (await broker.list_grants(audience="bot")).items)
    assert await broker.get_grant(hers.id) == hers


async def test_an_answer_naming_nobody_issues_no_grant_as_a_person_cut_off(broker: Broker, local: LocalBroker) -> None:
    """An answer that names nobody issues its grants as the request's recipient's: not as
    the grants of a person `token revoke` cut off (they would count again once they are
    given a token, as if they had given them). It is refused and changes nothing."""
    await local.save_principal(Principal("alice", "human"))
    await local.save_token(issue_token("alice", datetime.now(UTC)))
    await local.revoke_tokens(principal="alice")
    deploy = {"with": "repo:web", "can": "deploy"}
    request = await broker.create(Confirm("Let bot deploy?", grants=[deploy]), to="alice", requester="bot")
    with pytest.raises(Forbidden, match=r"grants: every token of 'alice' is revoked .*issues its grants as theirs"):
        await local.resolve(request.id, True, grants=[deploy])
    assert (await broker.get(request.id)).status is Status.PENDING
    assert (await broker.list_grants(audience="bot")).items == []
    assert await local.resolve(request.id, True)  # (issuing nothing, it records nothing in her name)


async def test_a_routing_file_seeds_the_store_and_what_was_set_since_stays_until_the_file_changes(
    local: LocalBroker,
) -> None:
    from_file = routing_from_dict(_PAGER)
    assert await local.settle_routing(None) is None
    assert await local.settle_routing(from_file) is from_file
    changed = {**_PAGER, "max_attempts": 3}
    await local.set_routing(changed)
    kept = await local.settle_routing(from_file)  # the same file: what was set since stays
    assert kept is not None and kept.max_attempts == 3
    edited = routing_from_dict({**_PAGER, "max_attempts": 5})
    assert await local.settle_routing(edited) is edited  # the file changed: it wins
    assert (await local.routing() or {})["max_attempts"] == 5


async def test_a_local_broker_keeps_tokens_sessions_and_links_and_ends_them_by_revocation(local: LocalBroker) -> None:
    now = datetime.now(UTC)
    await local.save_principal(Principal("alice", "human"))
    assert [p.name for p in await local.list_principals()] == ["alice"]
    assert await local.get_principal("alice") == Principal("alice", "human")
    assert await local.get_principal("nobody") is None
    token = issue_token("alice", now)
    await local.save_token(token)
    live = await local.live_token(hash_token(token.secret))
    assert live is not None and live.principal.name == "alice"

    session = issue_session(now)
    started = await local.start_session(hash_token(token.secret), session)
    assert started is not None and started.principal.name == "alice"
    assert await local.get_session(hash_token(session.secret), now) == started
    assert await local.start_session(hash_token("il_not_a_token"), issue_session(now)) is None

    link = issue_signin_link("alice", now)
    await local.save_signin_link(link)
    assert await local.use_signin_link(hash_token(link.secret), now) == Principal("alice", "human")
    assert await local.use_signin_link(hash_token(link.secret), now) is None  # once

    assert await local.revoke_tokens(principal="alice") == 1
    assert await local.live_token(hash_token(token.secret)) is None
    assert await local.get_session(hash_token(session.secret), now) is None  # ended with its token
    assert await local.end_session(hash_token(session.secret)) is None


async def test_a_one_click_answer_link_is_used_once(local: LocalBroker) -> None:
    request = await local.create(Confirm("Ship it?"), to="alice")
    now = datetime.now(UTC)
    first = LinkUse("lnk_1", request.id, "alice", now)
    assert await local.answer_link_use("lnk_1") is None
    assert await local.use_answer_link(first, now + timedelta(hours=1)) == (first, True)
    later = LinkUse("lnk_1", request.id, "alice", now + timedelta(seconds=1))
    assert await local.use_answer_link(later, now + timedelta(hours=1)) == (first, False)
    assert await local.answer_link_use("lnk_1") == first
