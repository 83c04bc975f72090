"""Deadlines as a demanding user meets them, on every backend: far-off and odd expiry
times, durations at their edges, and the expiry loop that must go on whatever it holds."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

import anyio
import pytest

from interlock import Broker, Expired, InvalidRequest, Status, Text, Worker

pytestmark = pytest.mark.anyio
BOUND = 10


async def test_a_request_due_at_the_last_instant_there_is_leaves_expiry_working(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    # SQLite read that instant back as the year 10000, PostgreSQL as a time without its
    # zone: the expiry loop failed on every pass, logging a traceback a second, and
    # expired the other requests up to a second late. Over HTTP it went as a timeout,
    # refused as "past the last date that can be stored".
    caplog.set_level(logging.ERROR, logger="interlock")
    never = await broker.create(Text("Someday?"), expires_at=datetime.max.replace(tzinfo=UTC))
    soon = await broker.create(Text("Now?"), timeout=0.05)
    with anyio.fail_after(BOUND):
        async for event in broker.events(follow=True):
            if event.request_id == soon.id and event.type != "created":
                break
    assert event.type == "expired"
    assert (await broker.get(never.id)).status is Status.PENDING
    assert not [r for r in caplog.records if "expiring overdue requests failed" in r.getMessage()]


@pytest.mark.parametrize(
    "deadline",
    [
        datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))),  # 04:00 on 1 January 10000 in UTC
        datetime(1, 1, 1, 1, tzinfo=timezone(timedelta(hours=14))),  # the year 0 in UTC
    ],
    ids=["past-9999-in-utc", "before-year-1-in-utc"],
)
async def test_a_deadline_no_store_can_keep_is_refused_alike_everywhere(broker: Broker, deadline: datetime) -> None:
    # PostgreSQL refused it with its driver's DataError; the others kept it.
    with pytest.raises(InvalidRequest, match="outside the years 1 to 9999 in UTC"):
        await broker.create(Text("When?"), expires_at=deadline)
    assert (await broker.list()).items == []


async def test_a_deadline_with_an_offset_is_kept_as_given(broker: Broker) -> None:
    # Over HTTP it went as a timeout: the server kept another instant (the round trip
    # later), in UTC.
    india = timezone(timedelta(hours=5, minutes=30))
    deadline = datetime(2999, 3, 4, 5, 6, 7, 123457, tzinfo=india)
    made = await broker.create(Text("When?"), expires_at=deadline)
    for read in (made, await broker.get(made.id), (await broker.list()).items[0]):
        assert read.expires_at == deadline and read.expires_at.utcoffset() == timedelta(hours=5, minutes=30)


async def test_a_deadline_already_past_expires_the_request_at_once(broker: Broker) -> None:
    # Over HTTP it went as a timeout of 1 ms from when the server received it.
    past = datetime.now(UTC).astimezone(timezone(timedelta(hours=-3))) - timedelta(hours=1)
    made = await broker.create(Text("Yesterday?"), expires_at=past)
    assert made.expires_at == past and made.expires_at.utcoffset() == timedelta(hours=-3)
    with anyio.fail_after(BOUND), pytest.raises(Expired):
        await broker.wait(made.id)


async def test_with_a_deadline_and_a_timeout_the_earlier_counts(broker: Broker) -> None:
    # Over HTTP both went as one timeout, the deadline's moved by the round trip, in UTC.
    tokyo = timezone(timedelta(hours=9))
    deadline = (datetime.now(UTC) + timedelta(hours=1)).astimezone(tokyo)
    by_deadline = await broker.create(Text("Soon?"), expires_at=deadline, timeout=timedelta(days=1))
    assert by_deadline.expires_at == deadline and by_deadline.expires_at.utcoffset() == timedelta(hours=9)
    by_timeout = await broker.create(Text("Sooner?"), expires_at=deadline, timeout=60)
    assert by_timeout.expires_at is not None
    assert by_timeout.expires_at - by_timeout.created_at == timedelta(seconds=60)


@pytest.mark.parametrize("timeout", ["5", True, 1e-7, timedelta(microseconds=0.4)], ids=repr)
async def test_a_timeout_that_is_no_number_or_under_a_microsecond_is_refused(broker: Broker, timeout: object) -> None:
    # Text and True were taken (float("5"), one second); less than the microsecond the stores
    # keep times in was kept as no time at all. max_duration refused text already.
    with pytest.raises(InvalidRequest, match="timeout"):
        await broker.create(Text("Name?"), timeout=timeout)  # type: ignore[arg-type]
    assert (await broker.list()).items == []
    made = await broker.create(Text("Name?"), timeout=timedelta(microseconds=1))
    assert made.expires_at is not None and made.expires_at - made.created_at >= timedelta(microseconds=1)


async def test_a_max_duration_under_a_microsecond_is_refused(broker: Broker) -> None:
    # It was kept as 0 seconds, a duration refused when given as 0.
    with pytest.raises(InvalidRequest, match="max_duration"):
        await broker.start_run("agent", max_duration=1e-7)
    assert (await broker.list_runs()).items == []


async def test_an_operator_s_durations_under_a_microsecond_are_refused(
    connect: Callable[..., Broker], backend: str
) -> None:
    if backend == "http":
        pytest.skip("a server's own options")
    for option in ("pause_timeout", "default_expiry"):
        with pytest.raises(InvalidRequest, match=option):
            connect(**{option: 1e-7})


async def test_watching_with_a_timeout_that_is_no_number_is_refused_at_once(broker: Broker) -> None:
    # NaN had watched forever (`wait` refused it already).
    made = await broker.create(Text("Name?"))
    for timeout in (float("nan"), "5"):
        with anyio.fail_after(BOUND), pytest.raises(InvalidRequest, match="timeout"):
            await broker.watch(made.id, timeout=timeout)  # type: ignore[arg-type]
    assert (await broker.get(made.id)).status is Status.PENDING


async def test_a_worker_s_lease_is_checked_when_it_is_made(broker: Broker) -> None:
    # An infinite lease was taken, and the worker stopped with an error at its first claim.
    async def handler(run: object) -> None: ...

    for lease in (float("inf"), float("nan"), 0, 1e-7):
        with pytest.raises(InvalidRequest, match="lease"):
            Worker(broker, {"agent": handler}, lease=lease)
