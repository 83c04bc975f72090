"""The outbox port (`OutboxStore`), checked the same way on every store: notices written
with their events, routing into deliveries, leases, retries and dead letters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from interlock import Text
from interlock.model import Response, Status, build_request
from interlock.outbox import Delivery, LinkUse, delivery_id
from interlock.store import Store

pytestmark = pytest.mark.anyio


def now() -> datetime:
    return datetime.now(UTC)


def deliveries_for(notice_id: int, event_id: int, request_id: str, at: datetime, *channels: str) -> list[Delivery]:
    return [
        Delivery(
            delivery_id(event_id, "request", "alice", c, None),
            notice_id,
            request_id,
            "request",
            "created",
            "alice",
            c,
            None,
            at,
            at,
        )
        for c in channels
    ]


async def test_a_created_request_and_its_settlement_leave_one_notice_each(store: Store) -> None:
    request, _ = await store.insert(build_request(Text("Ship?"), to="alice", requester="bot"))
    notices = await store.claim_notices("loop-1", now(), 30)
    assert [(n.type, n.request_id, n.recipient) for n in notices] == [("created", request.id, "alice")]
    await store.settle(
        request.settle(Status.ANSWERED, Response(now(), answers={request.asks[0].id: "yes"}, by="alice"))
    )
    await store.consume(request.id, "bot", now())  # not a notice: it concerns the agent, not a person
    notices = await store.claim_notices("loop-1", now(), 30)
    assert [n.type for n in notices] == ["created", "answered"]


async def test_an_update_that_concerns_no_request_makes_no_notice(store: Store) -> None:
    await store.append_event("informed", {"to": "alice", "message": "hi"})
    assert await store.claim_notices("loop-1", now(), 30) == []


async def test_a_leased_notice_is_not_claimed_by_another_loop_until_the_lease_runs_out(store: Store) -> None:
    await store.insert(build_request(Text("Ship?"), to="alice", requester="bot"))
    t = now()
    assert len(await store.claim_notices("loop-1", t, 30)) == 1
    assert await store.claim_notices("loop-2", t + timedelta(seconds=5), 30) == []
    assert len(await store.claim_notices("loop-2", t + timedelta(seconds=31), 30)) == 1


async def test_routing_a_notice_adds_its_deliveries_once_even_when_routed_twice(store: Store) -> None:
    request, _ = await store.insert(build_request(Text("Ship?"), to="alice", requester="bot"))
    t = now()
    [notice] = await store.claim_notices("loop-1", t, 30)
    planned = deliveries_for(notice.id, notice.event_id, request.id, t, "hook", "mail")
    assert await store.route_notice(notice, planned, "loop-1", t) == 2
    assert await store.claim_notices("loop-1", t, 30) == []  # routed
    assert await store.route_notice(notice, planned, "loop-1", t) == 0
    listed = await store.list_deliveries(request_id=request.id)
    assert sorted(d.channel for d in listed) == ["hook", "mail"]
    assert all(d.status == "pending" and d.attempts == 0 for d in listed)


async def test_a_loop_that_lost_its_lease_cannot_route_the_notice(store: Store) -> None:
    request, _ = await store.insert(build_request(Text("Ship?"), to="alice", requester="bot"))
    t = now()
    [notice] = await store.claim_notices("loop-1", t, 1)
    [again] = await store.claim_notices("loop-2", t + timedelta(seconds=2), 30)
    planned = deliveries_for(notice.id, notice.event_id, request.id, t, "hook")
    assert await store.route_notice(notice, planned, "loop-1", t) == 0
    assert await store.route_notice(again, planned, "loop-2", t) == 1


async def test_deliveries_are_claimed_when_due_and_held_by_their_lease(store: Store) -> None:
    request, _ = await store.insert(build_request(Text("Ship?"), to="alice", requester="bot"))
    t = now()
    [notice] = await store.claim_notices("loop-1", t, 30)
    later = deliveries_for(notice.id, notice.event_id, request.id, t + timedelta(minutes=5), "hook")
    await store.route_notice(notice, later, "loop-1", t)
    assert await store.claim_deliveries("loop-1", t, 30) == []
    assert await store.next_outbox_due() == later[0].due_at
    [claimed] = await store.claim_deliveries("loop-1", t + timedelta(minutes=5), 30)
    assert claimed.id == later[0].id
    assert await store.claim_deliveries("loop-2", t + timedelta(minutes=5, seconds=10), 30) == []


async def test_a_finished_attempt_is_stored_only_by_the_lease_holder(store: Store) -> None:
    request, _ = await store.insert(build_request(Text("Ship?"), to="alice", requester="bot"))
    t = now()
    [notice] = await store.claim_notices("loop-1", t, 30)
    await store.route_notice(notice, deliveries_for(notice.id, notice.event_id, request.id, t, "hook"), "loop-1", t)
    [claimed] = await store.claim_deliveries("loop-1", t, 30)
    failed = claimed.with_state(attempts=1, last_error="HTTP 503", due_at=t + timedelta(seconds=10))
    assert not await store.finish_delivery(failed, "loop-2")
    assert await store.finish_delivery(failed, "loop-1")
    stored = await store.get_delivery(claimed.id)
    assert stored is not None and (stored.status, stored.attempts, stored.last_error) == ("pending", 1, "HTTP 503")
    [claimed] = await store.claim_deliveries("loop-2", t + timedelta(seconds=10), 30)
    done = claimed.with_state(status="delivered", attempts=2, delivered_at=t, last_error=None, reference="ts-1")
    assert await store.finish_delivery(done, "loop-2")
    stored = await store.get_delivery(claimed.id)
    assert stored is not None and (stored.status, stored.reference) == ("delivered", "ts-1")
    assert await store.claim_deliveries("loop-1", t + timedelta(hours=1), 30) == []


async def test_a_dead_letter_is_listed_and_can_be_retried(store: Store) -> None:
    request, _ = await store.insert(build_request(Text("Ship?"), to="alice", requester="bot"))
    t = now()
    [notice] = await store.claim_notices("loop-1", t, 30)
    await store.route_notice(
        notice, deliveries_for(notice.id, notice.event_id, request.id, t, "hook", "mail"), "loop-1", t
    )
    claimed = await store.claim_deliveries("loop-1", t, 30)
    await store.finish_delivery(claimed[0].with_state(status="dead", attempts=8, last_error="refused"), "loop-1")
    dead = await store.list_deliveries(status="dead")
    assert [d.id for d in dead] == [claimed[0].id]
    assert await store.retry_delivery(claimed[1].id, t) is None  # not dead: nothing to retry
    again = await store.retry_delivery(claimed[0].id, t + timedelta(seconds=1))
    assert again is not None and (again.status, again.attempts) == ("pending", 0)
    assert await store.list_deliveries(status="dead") == []


async def test_deliveries_list_in_pages(store: Store) -> None:
    request, _ = await store.insert(build_request(Text("Ship?"), to="alice", requester="bot"))
    t = now()
    [notice] = await store.claim_notices("loop-1", t, 30)
    await store.route_notice(
        notice, deliveries_for(notice.id, notice.event_id, request.id, t, "a", "b", "c"), "loop-1", t
    )
    first = await store.list_deliveries(limit=2)
    rest = await store.list_deliveries(after=first[-1].id, limit=2)
    assert len(first) == 2 and len(rest) == 1
    assert {d.channel for d in [*first, *rest]} == {"a", "b", "c"}


async def test_notices_routed_meanwhile_do_not_hide_later_ones(store: Store) -> None:
    t = now()
    await store.insert(build_request(Text("One?"), to="alice", requester="bot"))
    second, _ = await store.insert(build_request(Text("Two?"), to="alice", requester="bot"))
    a, _ = await store.claim_notices("loop-1", t, 30)
    await store.route_notice(a, [], "loop-1", t)
    third, _ = await store.insert(build_request(Text("Three?"), to="alice", requester="bot"))
    left = await store.claim_notices("loop-1", t, 30)
    assert [n.request_id for n in left] == [second.id, third.id]
    assert len({n.id for n in [a, *left]}) == 3


async def test_deliveries_list_by_recipient(store: Store) -> None:
    request, _ = await store.insert(build_request(Text("Ship?"), to="alice", requester="bot"))
    t = now()
    [notice] = await store.claim_notices("loop-1", t, 30)
    to_bob = Delivery(
        delivery_id(notice.event_id, "escalation", "bob", "hook", None),
        notice.id,
        request.id,
        "escalation",
        "created",
        "bob",
        "hook",
        None,
        t,
        t,
    )
    await store.route_notice(
        notice, [*deliveries_for(notice.id, notice.event_id, request.id, t, "hook"), to_bob], "loop-1", t
    )
    assert [d.recipient for d in await store.list_deliveries(recipient="bob")] == ["bob"]
    assert [d.recipient for d in await store.list_deliveries(recipient="alice")] == ["alice"]
    assert await store.list_deliveries(recipient="carol") == []


async def test_dead_letters_list_newest_first_a_page_at_a_time(store: Store) -> None:
    request, _ = await store.insert(build_request(Text("Ship?"), to="alice", requester="bot"))
    t = now()
    [notice] = await store.claim_notices("loop-1", t, 30)
    made = deliveries_for(notice.id, notice.event_id, request.id, t, *"abcdefg")
    to_bob = Delivery(
        delivery_id(notice.event_id, "escalation", "bob", "hook", None),
        *(notice.id, request.id, "escalation", "created", "bob", "hook", None, t, t),
    )
    await store.route_notice(notice, [*made, to_bob], "loop-1", t)
    claimed = {d.id: d for d in await store.claim_deliveries("loop-1", t, 30)}
    # Dead in an order of their own: a-d at distinct times, e-f at one (then by id), g alive.
    died = {"a": 3, "b": 1, "c": 4, "d": 2, "e": 5, "f": 5}
    for d in made:
        if d.channel in died:
            when = t + timedelta(seconds=died[d.channel])
            dead = claimed[d.id].with_state(status="dead", attempts=1, due_at=when, last_error="refused")
            assert await store.finish_delivery(dead, "loop-1")
    assert await store.finish_delivery(claimed[to_bob.id].with_state(status="dead", due_at=t), "loop-1")
    expected = sorted((d for d in made if d.channel in died), key=lambda d: (died[d.channel], d.id), reverse=True)
    seen: list[Delivery] = []
    before = None
    for _ in range(10):  # bounded: six dead letters, two a page
        page = await store.list_dead_letters(recipient="alice", before=before, limit=2)
        seen.extend(page)
        if len(page) < 2:
            break
        before = (page[-1].due_at, page[-1].id)
    assert [d.id for d in seen] == [d.id for d in expected]
    assert all(d.status == "dead" and d.recipient == "alice" for d in seen)
    everyone = await store.list_dead_letters()
    assert [d.id for d in everyone] == [d.id for d in expected] + [to_bob.id]  # bob's died first
    assert await store.list_dead_letters(recipient="carol") == []


async def test_a_member_lists_the_deliveries_of_the_requests_to_their_teams_beside_their_own(store: Store) -> None:
    """carol's list with her team ops: hers, and every delivery of a request to ops (to the
    team's address, to bob by his own route); not bob's of a request to him alone, nor a
    team she is not in, nor the escalation of ops's request to boss (it goes over the team)."""
    t = now()
    made: dict[str, list[Delivery]] = {}
    escalation: Delivery | None = None
    for to, recipients in (("ops", ("ops", "bob")), ("bob", ("bob",)), ("carol", ("carol",)), ("dev", ("dev",))):
        request, _ = await store.insert(build_request(Text(f"To {to}?"), to=to, requester="bot"))
        [notice] = await store.claim_notices("loop-1", t, 30)
        made[to] = [
            Delivery(
                delivery_id(notice.event_id, "request", name, "hook", None),
                *(notice.id, request.id, "request", "created", name, "hook", None, t, t),
            )
            for name in recipients
        ]
        if to == "ops":
            escalation = Delivery(
                delivery_id(notice.event_id, "escalation", "boss", "hook", None),
                *(notice.id, request.id, "escalation", "created", "boss", "hook", None, t, t),
            )
        await store.route_notice(notice, [*made[to], *([escalation] if to == "ops" else [])], "loop-1", t)
    assert escalation is not None
    claimed = {d.id: d for d in await store.claim_deliveries("loop-1", t, 30)}
    for d in claimed.values():
        assert await store.finish_delivery(d.with_state(status="dead", attempts=1), "loop-1")
    hers = sorted(d.id for d in [*made["ops"], *made["carol"]])
    listed = await store.list_deliveries(recipient="carol", teams=["ops"])
    assert [d.id for d in listed] == hers
    assert [d.id for d in await store.list_deliveries(recipient="carol", teams=["ops"], status="dead")] == hers
    assert [d.id for d in await store.list_deliveries(recipient="carol", teams=["ops"], after=hers[0])] == hers[1:]
    dead = await store.list_dead_letters(recipient="carol", teams=["ops"])
    assert sorted(d.id for d in dead) == hers
    assert [d.id for d in await store.list_dead_letters(recipient="carol")] == [made["carol"][0].id]
    assert [d.id for d in await store.list_deliveries(recipient="carol", teams=["nobody"])] == [made["carol"][0].id]
    assert await store.list_dead_letters(recipient="erin", teams=["qa"]) == []
    assert [d.id for d in await store.list_dead_letters(recipient="boss")] == [escalation.id]


async def test_an_answer_link_is_used_once_and_its_first_use_is_kept(store: Store) -> None:
    t = now()
    first = LinkUse("link-1", "req-1", "alice", t)
    assert await store.answer_link_use("link-1") is None
    assert await store.use_answer_link(first, t + timedelta(days=1)) == (first, True)
    again = LinkUse("link-1", "req-1", "bob", t + timedelta(seconds=5))
    kept, recorded = await store.use_answer_link(again, t + timedelta(days=1))
    assert not recorded and (kept.by, kept.request_id) == ("alice", "req-1")
    assert abs((kept.at - t).total_seconds()) < 0.001
    assert await store.answer_link_use("link-1") == kept
    other = LinkUse("link-2", "req-1", "alice", t)
    assert (await store.use_answer_link(other, t + timedelta(days=1)))[1]


async def test_uses_of_expired_answer_links_are_let_go(store: Store) -> None:
    t = now()
    await store.use_answer_link(LinkUse("old", "req-1", "alice", t - timedelta(days=8)), t - timedelta(days=1))
    await store.use_answer_link(LinkUse("new", "req-2", "alice", t), t + timedelta(days=7))
    assert await store.answer_link_use("old") is None  # past its link's expiry: the link is refused anyway
    assert await store.answer_link_use("new") is not None


def to_many(notice_id: int, event_id: int, request_id: str, at: datetime, channel: str, count: int) -> list[Delivery]:
    """`count` deliveries of one notice through `channel`, to r0, r1, ..., each due a
    millisecond after the one before."""
    return [
        Delivery(
            delivery_id(event_id, "request", f"r{i}", channel, None),
            *(notice_id, request_id, "request", "created", f"r{i}", channel, None),
            at + timedelta(milliseconds=i),
            at,
        )
        for i in range(count)
    ]


async def test_a_claim_takes_no_more_of_one_channel_than_its_owner_s_share_and_leaves_the_rest_as_they_were(
    store: Store,
) -> None:
    request, _ = await store.insert(build_request(Text("Ship?"), to="alice", requester="bot"))
    t = now()
    [notice] = await store.claim_notices("loop-1", t, 30)
    hook = to_many(notice.id, notice.event_id, request.id, t, "hook", 8)  # a burst to one channel
    mail = to_many(notice.id, notice.event_id, request.id, t + timedelta(seconds=1), "mail", 2)  # due after
    await store.route_notice(notice, [*hook, *mail], "loop-1", t)
    at = t + timedelta(seconds=2)

    first = await store.claim_deliveries("loop-1", at, 30, 10, per_channel=3)
    assert [d.id for d in first] == [d.id for d in [*hook[:3], *mail]]  # the earliest due first
    assert await store.claim_deliveries("loop-1", at, 30, 10, per_channel=3) == []  # hook is full, mail has none
    second = await store.claim_deliveries("loop-2", at, 30, 10, per_channel=3)  # a share is one loop's
    assert [d.id for d in second] == [d.id for d in hook[3:6]]

    # one of loop-1's ends: it takes the next one of hook, and only that one
    assert await store.finish_delivery(first[0].with_state(status="delivered", attempts=1, delivered_at=at), "loop-1")
    [third] = await store.claim_deliveries("loop-1", at, 30, 10, per_channel=3)
    assert third.id == hook[6].id
    # the one left over was passed over, not touched: due as it was, no attempt counted
    [left] = [d for d in await store.list_deliveries(request_id=request.id) if d.id == hook[7].id]
    assert (left.status, left.attempts, left.due_at, left.last_error) == ("pending", 0, hook[7].due_at, None)
    assert [d.id for d in await store.claim_deliveries("loop-3", at, 30, 10)] == [hook[7].id]  # no share: all

    # a lease run out holds nothing: loop-1's deliveries are due again, and its share free
    later = at + timedelta(seconds=31)
    again = await store.claim_deliveries("loop-1", later, 30, 10, per_channel=3)
    assert [d.channel for d in again] == ["hook"] * 3 + ["mail"] * 2
