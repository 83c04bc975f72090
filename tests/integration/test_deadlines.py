"""Deadlines as a demanding user meets them, on every backend: far-off and odd expiry
times, durations at their edges, and the expiry loop that must go on whatever it holds."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta, timezone

import anyio
import pytest

from interlock import Broker, InvalidRequest, Status, Text

pytestmark = pytest.mark.anyio
BOUND = 10


async def test_a_request_due_at_the_last_instant_there_is_leaves_expiry_working(
    broker: Broker, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    if backend == "http":
        pytest.skip("the HTTP API takes a timeout in seconds, not an instant ")
    # SQLite read that instant back as the year 10000, PostgreSQL as a time without its
    # zone: the expiry loop failed on every pass, logging a traceback a second, and
    # expired the other requests up to a second late.
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


async def test_a_deadline_with_an_offset_is_kept_as_given(broker: Broker, backend: str) -> None:
    if backend == "http":
        pytest.skip("the HTTP API takes a timeout in seconds, not an instant")
    india = timezone(timedelta(hours=5, minutes=30))
    deadline = datetime(2999, 3, 4, 5, 6, 7, 123457, tzinfo=india)
    made = await broker.create(Text("When?"), expires_at=deadline)
    for read in (made, await broker.get(made.id), (await broker.list()).items[0]):
        assert read.expires_at == deadline and read.expires_at.utcoffset() == timedelta(hours=5, minutes=30)
