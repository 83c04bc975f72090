"""The follow-up queue (`FollowupStore`), checked the same way on every store: held
messages are listed oldest first, bounded, withdrawn or taken for delivery once, each
change with its event on the run's stream, and read-only once the run has ended."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from interlock.followups import FOLLOWUP_EVENTS, Followup
from interlock.model import Run, RunStatus, new_id
from interlock.store import EventQuery, FollowupStore, Store

pytestmark = pytest.mark.anyio


def new_run(run_id: str = "r1") -> Run:
    now = datetime.now(UTC)
    return Run(run_id, "deployer", now, now, session="thread-1", requester="bot")


def message(text: str, *, run: str = "r1", by: str = "alice", at: datetime | None = None) -> Followup:
    return Followup(new_id(), run, text, at or datetime.now(UTC), by)


async def followup_events(store: Store, run: str = "r1") -> list[tuple[str, str, str]]:
    events = await store.find_events(EventQuery(run=run))
    return [(e.type, e.data["followup_id"], e.data["text"]) for e in events if e.type in FOLLOWUP_EVENTS]


async def test_a_store_is_a_followup_store(store: Store) -> None:
    queue: FollowupStore = store
    assert queue is store


async def test_held_messages_are_listed_oldest_first_with_their_text_verbatim(store: Store) -> None:
    await store.insert_run(new_run())
    start = datetime.now(UTC)
    first = message("  actually, make it vegetarian \n", at=start)
    second = message("and no nuts", at=start + timedelta(milliseconds=1))
    assert await store.enqueue_followup(first, limit=5) == first
    assert await store.enqueue_followup(second, limit=5) == second
    held = await store.list_followups("r1")
    assert [f.text for f in held] == ["  actually, make it vegetarian \n", "and no nuts"]
    assert held[0].by == "alice" and held[0].run == "r1"
    assert abs(held[0].queued_at - start) < timedelta(milliseconds=1)
    assert await followup_events(store) == [
        ("followup_queued", first.id, first.text),
        ("followup_queued", second.id, second.text),
    ]
    (event, _) = [e for e in await store.find_events(EventQuery(run="r1")) if e.type == "followup_queued"]
    assert event.data["to"] == "bot" and event.data["by"] == "alice" and event.data["session"] == "thread-1"


async def test_a_full_queue_holds_nothing_more_and_changes_nothing(store: Store) -> None:
    await store.insert_run(new_run())
    for n in range(2):
        assert await store.enqueue_followup(message(f"m{n}"), limit=2) is not None
    assert await store.enqueue_followup(message("one too many"), limit=2) is None
    assert [f.text for f in await store.list_followups("r1")] == ["m0", "m1"]
    assert len(await followup_events(store)) == 2


async def test_nothing_is_held_for_an_unknown_run_or_one_that_has_ended(store: Store) -> None:
    assert await store.enqueue_followup(message("hello", run="r-unknown"), limit=5) is None
    await store.insert_run(new_run())
    await store.end_run("r1", RunStatus.COMPLETED, at=datetime.now(UTC), result="done")
    assert await store.enqueue_followup(message("too late"), limit=5) is None
    assert await store.list_followups("r1") == []


async def test_a_held_message_is_withdrawn_once(store: Store) -> None:
    await store.insert_run(new_run())
    kept, gone = message("keep"), message("take it back")
    await store.enqueue_followup(kept, limit=5)
    await store.enqueue_followup(gone, limit=5)
    now = datetime.now(UTC)
    assert await store.withdraw_followup("r1", gone.id, at=now) == gone
    assert await store.withdraw_followup("r1", gone.id, at=now) is None
    assert await store.withdraw_followup("r1", "f-unknown", at=now) is None
    await store.insert_run(new_run("r2"))
    assert await store.withdraw_followup("r2", kept.id, at=now) is None  # not that run's
    assert [f.id for f in await store.list_followups("r1")] == [kept.id]
    assert (await followup_events(store))[-1] == ("followup_withdrawn", gone.id, "take it back")


async def test_taking_delivers_every_held_message_once_with_a_replayed_event_each(store: Store) -> None:
    await store.insert_run(new_run())
    start = datetime.now(UTC)
    sent = [message(f"step {n}", at=start + timedelta(milliseconds=n)) for n in range(3)]
    for followup in sent:
        await store.enqueue_followup(followup, limit=5)
    now = datetime.now(UTC)
    taken = await store.claim_followups("r1", at=now) or ()
    assert [f.id for f in taken] == [f.id for f in sent]
    assert await store.claim_followups("r1", at=now) == []
    assert await store.list_followups("r1") == []
    assert await store.withdraw_followup("r1", sent[0].id, at=now) is None  # claimed for delivery
    replayed = [e for e in await followup_events(store) if e[0] == "followup_replayed"]
    assert replayed == [("followup_replayed", f.id, f.text) for f in sent]


async def test_only_a_running_run_held_by_the_worker_has_its_messages_taken(store: Store) -> None:
    await store.insert_run(new_run())
    request_less_park = await store.park_run(
        "r1",
        state=None,
        waiting_on=[],
        status=RunStatus.WAITING_FOR_INPUT,
        expires_at=datetime.now(UTC) + timedelta(hours=1),
        at=datetime.now(UTC),
    )
    assert request_less_park is not None
    held = message("while parked")
    await store.enqueue_followup(held, limit=5)
    now = datetime.now(UTC)
    assert await store.claim_followups("r1", at=now) == []  # parked: no turn boundary yet
    claimed = await store.claim_run(["deployer"], worker="w1", lease_expires_at=now + timedelta(seconds=30), at=now)
    assert claimed is not None and claimed.worker == "w1"
    assert await store.claim_followups("r1", at=now, worker="w2") is None  # refused: w1 holds it
    assert await store.claim_followups("r1", at=now) is None  # an agent's take too: w1 resumes it
    assert [f.id for f in await store.list_followups("r1")] == [held.id]
    assert [f.id for f in await store.claim_followups("r1", at=now, worker="w1") or ()] == [held.id]
    assert await store.claim_followups("r1", at=now) is None  # refused with nothing held as well
    assert await store.claim_followups("r1", at=now, worker="w1") == []


async def test_on_an_ended_run_undelivered_messages_stay_listed_read_only(store: Store) -> None:
    await store.insert_run(new_run())
    left = message("never delivered")
    await store.enqueue_followup(left, limit=5)
    await store.end_run("r1", RunStatus.CANCELLED, at=datetime.now(UTC), terminal_reason="cancelled_by_user")
    assert [f.text for f in await store.list_followups("r1")] == ["never delivered"]
    assert await store.withdraw_followup("r1", left.id, at=datetime.now(UTC)) is None
    assert await store.claim_followups("r1", at=datetime.now(UTC)) == []
    assert [f.id for f in await store.list_followups("r1")] == [left.id]


async def test_concurrent_takers_deliver_each_message_once(store: Store) -> None:
    await store.insert_run(new_run())
    for n in range(5):
        await store.enqueue_followup(message(f"m{n}"), limit=10)
    now = datetime.now(UTC)
    results = await asyncio.gather(*(store.claim_followups("r1", at=now) for _ in range(4)))
    delivered = [f.text for taken in results for f in taken or ()]
    assert sorted(delivered) == [f"m{n}" for n in range(5)]


async def test_concurrent_senders_never_hold_more_than_the_bound(store: Store) -> None:
    await store.insert_run(new_run())
    results = await asyncio.gather(*(store.enqueue_followup(message(f"m{n}"), limit=3) for n in range(8)))
    assert sum(r is not None for r in results) == 3
    assert len(await store.list_followups("r1")) == 3
