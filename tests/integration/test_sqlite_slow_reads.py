"""SQLite runs on the event loop, but long work does not hold it: a read past
`READ_ON_LOOP` is stopped there and run again in a worker thread, with the same rows, and
a catch-up of the search index or the outbox is cut into transactions sized to
`DERIVE_HOLD`."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from pathlib import Path

import anyio
import pytest

import interlock
from interlock import Confirm, Text
from interlock.store import _sql, sqlite
from interlock.store.sqlite import SqliteStore

pytestmark = pytest.mark.anyio

COUNT_TO = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?) SELECT count(*) FROM c"


async def longest_stall_during(work: asyncio.Future[object] | asyncio.Task[object]) -> float:
    """The longest the event loop went without running this task while `work` ran."""
    longest, last = 0.0, time.monotonic()
    while not work.done():
        await asyncio.sleep(0)
        now = time.monotonic()
        longest, last = max(longest, now - last), now
    return longest


async def test_a_slow_read_leaves_the_event_loop_free_and_returns_its_rows(tmp_path: Path) -> None:
    async with interlock.connect(f"sqlite:///{tmp_path / 'slow.db'}") as broker:
        store = broker.store
        assert isinstance(store, SqliteStore)
        started = time.monotonic()
        read = asyncio.ensure_future(store._read(COUNT_TO, (3_000_000,)))  # about a second of SQLite's work
        stall = await longest_stall_during(read)
        took = time.monotonic() - started
        assert await read == [(3_000_000,)]
        # On the loop, the read alone would hold it for all of `took`.
        assert took > 0.2
        assert stall < took / 4, f"the loop stood still for {stall:.3f} s of the read's {took:.3f} s"
        # Meanwhile, and after, the store serves everything else as before.
        request = await broker.create(Text("Still there?"))
        assert await broker.resolve(request.id, "yes")
        assert (await broker.wait(request.id)).answers == {"text": "yes"}


async def test_a_statement_that_outran_the_loop_goes_straight_to_a_thread_next_time(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with interlock.connect(f"sqlite:///{tmp_path / 'slow.db'}") as broker:
        store = broker.store
        assert isinstance(store, SqliteStore)
        with caplog.at_level(logging.DEBUG, logger="interlock"):
            assert await store._read(COUNT_TO, (400_000,)) == [(400_000,)]
            assert await store._read(COUNT_TO, (500_000,)) == [(500_000,)]
        outran = [r for r in caplog.records if r.getMessage().startswith("a read outran")]
        assert len(outran) == 1  # the second read of the statement was not tried on the loop first


async def test_every_read_made_in_a_thread_finds_what_the_loop_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No time at all on the loop: each read that SQLite steps through for long enough to
    # look at its deadline is stopped and made again in a worker thread. Writes never are.
    monkeypatch.setattr(sqlite, "READ_ON_LOOP", 0.0)
    monkeypatch.setattr(sqlite, "PROGRESS_STEPS", 10)
    async with interlock.connect(f"sqlite:///{tmp_path / 'threads.db'}") as broker:
        ship = await broker.create(Confirm("Ship the release?"), kind="approval", to="alice", requester="deployer")
        colour = await broker.create(Text("Favourite colour?"), to="bob", requester="survey", session="s1")
        await broker.create(Text("Lunch?"), to="alice", requester="survey")
        assert await broker.resolve(ship.id, True, by="alice")
        await broker.reject(colour.id, "no time for surveys", by="bob")

        async def ids(**filters: object) -> list[str]:
            return [r.id for r in (await broker.list(**filters)).items]  # type: ignore[arg-type]

        everything = await ids()
        assert len(everything) == 3
        assert await ids(kind="approval") == [ship.id]
        assert await ids(recipient="bob") == [colour.id]
        assert await ids(requester="survey", settled=True) == [colour.id]
        assert await ids(session="s1") == [colour.id]
        assert await ids(settled=True, text="surveys") == [colour.id]
        assert await ids(settled=True, text="release") == [ship.id]
        assert (await broker.get(ship.id)).response.answers == {"confirm": True}  # type: ignore[union-attr]
        events = await broker.find_events(request=colour.id)
        assert [e.type for e in events] == ["created", "rejected"]
        store = broker.store
        assert isinstance(store, SqliteStore)
        assert store._slow, "no read went to a worker thread: the test proves nothing"


async def test_closing_the_store_ends_a_read_still_running_in_a_thread(tmp_path: Path) -> None:
    broker = interlock.connect(f"sqlite:///{tmp_path / 'closing.db'}")
    await broker.open()
    store = broker.store
    assert isinstance(store, SqliteStore)
    assert await store._read(COUNT_TO, (400_000,)) == [(400_000,)]  # slow: the next goes to a thread at once
    read = asyncio.ensure_future(store._read(COUNT_TO, (10**12,)))  # hours of work
    await asyncio.sleep(0)  # handed to the worker thread (which may or may not have begun it)
    started = time.monotonic()
    with anyio.fail_after(30):
        await broker.aclose()
    assert time.monotonic() - started < 10
    with pytest.raises(sqlite3.OperationalError, match="interrupted"):
        await read


async def test_a_catch_up_is_cut_into_transactions_sized_to_how_long_the_last_one_took(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "catch-up.db"
    async with interlock.connect(f"sqlite:///{path}") as broker:
        for i in range(150):
            request = await broker.create(Text(f"Ship release {i}?"), title="Nightly")
            if i % 3 == 0:
                await broker.resolve(request.id, "canary green")
    db = sqlite3.connect(path)
    try:  # forget the index: the next search catches up with the whole event log (200 events)
        with db:
            db.execute("INSERT INTO requests_text (requests_text) VALUES ('delete-all')")
            db.execute("UPDATE derived SET event_id = 0 WHERE name = 'search'")
    finally:
        db.close()
    # No time at all for a transaction: each one half the size of the last, down to 8 events.
    monkeypatch.setattr(sqlite, "DERIVE_HOLD", 0.0)
    monkeypatch.setattr(sqlite, "DERIVE_CHUNK", 64)
    monkeypatch.setattr(sqlite, "DERIVE_FEWEST", 8)
    monkeypatch.setattr(_sql, "DERIVE_DELAY", 3600.0)  # only searches catch up: the chunks are theirs
    async with interlock.connect(f"sqlite:///{path}") as broker:
        store = broker.store
        assert isinstance(store, SqliteStore)
        assert len((await broker.list(text="ship", limit=1000)).items) == 150
        assert len((await broker.list(text="canary", limit=1000)).items) == 50
        assert store._derive_size["search"] == 8  # 64, 32, 16, then 8 at a time
        monkeypatch.setattr(sqlite, "DERIVE_HOLD", 3600.0)  # all the time in the world: twice as many each time
        store._derive_size["search"] = 8
        for i in range(40):
            await broker.create(Text(f"Ship again {i}?"))
        assert len((await broker.list(text="again")).items) == 40
        assert store._derive_size["search"] == 32  # 8, 16, then the last 16


async def test_overdue_requests_are_expired_in_transactions_sized_to_how_long_the_last_one_took(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file opened after a long stop may hold thousands of requests due at once (29,000
    # at a million requests held the loop 4.7 s in one transaction). They are expired a
    # chunk a transaction, the expiry loop coming back at once for the rest.
    path = tmp_path / "overdue.db"
    async with interlock.connect(f"sqlite:///{path}") as broker:
        made = [await broker.create(Confirm(f"Deploy build {i}?"), timeout=3600, to="alice") for i in range(200)]
        kept = await broker.create(Confirm("Deploy tomorrow's build?"), timeout=3600, to="alice")
    db = sqlite3.connect(path)
    try:  # the process stopped for a day: every one but the last is overdue
        with db:
            db.execute("UPDATE requests SET expires_at = expires_at - 86400000000 WHERE id <> ?", (kept.id,))
    finally:
        db.close()
    # No time at all for a transaction: each one half the size of the last, down to 8.
    monkeypatch.setattr(sqlite, "DERIVE_HOLD", 0.0)
    monkeypatch.setattr(sqlite, "DUE_FEWEST", 8)
    async with interlock.connect(f"sqlite:///{path}") as broker:
        store = broker.store
        assert isinstance(store, SqliteStore)
        with anyio.fail_after(20):
            for request in made:
                with pytest.raises(interlock.Expired):
                    await broker.wait(request.id)
        assert store._due_size == 8  # 100, 50, 25, 12, then 8 at a time (and the last 5)
        assert (await broker.get(kept.id)).status is interlock.Status.PENDING
        expired = await broker.list(status=interlock.Status.EXPIRED, limit=1000)
        assert sorted(r.id for r in expired.items) == sorted(r.id for r in made)
