"""What is particular to the PostgreSQL store: migrations, event order, expiry across
nodes, the listener, URL options. (The shared behaviour suite runs in tests/integration.)"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import anyio
import asyncpg  # type: ignore[import-untyped]
import pytest
from pg_support import database_of, empty_database, psql, read_line, send, spawn

import interlock
from interlock import Broker, Confirm, NotFound, Response, Status, Text, Unavailable
from interlock.principals import Principal, hash_token, issue_token
from interlock.store._sql import load_migrations
from interlock.store.postgres import PostgresStore, split_url

pytestmark = pytest.mark.anyio

BOUND = 20


async def until(condition: str, url: str) -> str:
    """Poll (bounded) until `condition`, a query, returns a non-empty, non-false value."""
    with anyio.fail_after(BOUND):
        while True:
            value = psql(condition, database_of(url))
            if value not in ("", "f", "0"):
                return value
            await anyio.sleep(0.01)


def pool(broker: Broker) -> Any:
    store = broker.store
    assert isinstance(store, PostgresStore)
    return store.pool


# -- migrations --------------------------------------------------------------------------


OPENER = """
    import asyncio, sys, interlock

    async def main():
        broker = interlock.connect(sys.argv[1])
        print("ready", flush=True)
        sys.stdin.readline()  # all start together
        async with broker:
            print("open", flush=True)

    asyncio.run(main())
"""


async def test_migrations_run_once_even_when_many_processes_open_together() -> None:
    with empty_database() as url:
        children = [await spawn(OPENER, url) for _ in range(4)]
        brokers = [interlock.connect(url) for _ in range(2)]
        try:
            for child in children:
                assert await read_line(child) == "ready"
            send(children, "go")
            await asyncio.gather(*(b.open() for b in brokers))
            for child in children:
                assert await read_line(child) == "open"
            await brokers[0].create(Text("ok?"))
        finally:
            for b in brokers:
                await b.aclose()
            for child in children:
                with anyio.fail_after(BOUND):
                    await child.wait()
        assert [child.returncode for child in children] == [0] * 4
        applied = psql("SELECT version, name FROM interlock_migrations ORDER BY version", database_of(url))
        assert applied.splitlines() == [f"{m.version}|{m.name}" for m in load_migrations("postgresql")]
        async with interlock.connect(url) as again:  # opening once more changes nothing
            assert [e.type async for e in again.events()] == ["created"]


# -- durability and replay ---------------------------------------------------------------


async def test_a_deadline_that_passed_while_no_process_ran_expires_on_open(pg_url: str) -> None:
    async with interlock.connect(pg_url) as first:
        request = await first.create(Text("Name?"), timeout=3600)
    psql(f"UPDATE requests SET expires_at = now() - interval '1 second' WHERE id = '{request.id}'", database_of(pg_url))
    async with interlock.connect(pg_url) as second:
        assert (await second.get(request.id)).status is Status.EXPIRED
        assert [e.type async for e in second.events()] == ["created", "expired"]


async def test_principals_and_tokens_are_kept_and_revoked(pg_url: str) -> None:
    async with interlock.connect(pg_url) as broker:
        store = broker.store
        await store.save_principal(Principal("alice", "human"))
        await store.save_principal(Principal("bot", "agent", owner="alice"))
        await store.save_principal(Principal("bot", "agent", owner="alice"))  # saving again changes nothing
        first = issue_token("bot", datetime.now(UTC))
        second = issue_token("bot", datetime.now(UTC))
        await store.save_token(first)
        await store.save_token(second)
        with pytest.raises(ValueError, match="no principal"):
            await store.save_token(issue_token("nobody", datetime.now(UTC)))

        assert await store.principal_for_token(hash_token(first.secret)) == Principal("bot", "agent", owner="alice")
        assert await store.principal_for_token(hash_token("il_guess")) is None
        assert [p.name for p in await store.list_principals()] == ["alice", "bot"]
        assert await store.get_principal("alice") == Principal("alice", "human")

        assert await store.revoke_tokens(token_id=first.id) == 1
        assert await store.principal_for_token(hash_token(first.secret)) is None
        assert await store.principal_for_token(hash_token(second.secret)) is not None
        assert await store.revoke_tokens(principal="bot") == 1
        assert await store.principal_for_token(hash_token(second.secret)) is None


# -- event order ---------------------------------------------------------------------------


async def test_a_reader_never_skips_an_event_that_commits_later_with_a_smaller_id(pg_url: str) -> None:
    async with (
        interlock.connect(pg_url) as writer,
        interlock.connect(pg_url) as other,
        interlock.connect(pg_url) as reader,
    ):
        before = await reader.last_event_id()
        # A transaction appends an event and stays open: it has drawn its id.
        conn = await pool(writer).acquire()
        try:
            slow = conn.transaction()
            await slow.start()
            slow_id = await conn.fetchval("INSERT INTO events (type, at) VALUES ('informed', now()) RETURNING id")
            # Another one appends meanwhile. Without the ordering lock it would draw the next
            # id and commit first, and a reader would move past the open transaction's id.
            fast = asyncio.create_task(other.inform("committed second"))
            await until(
                "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
                " WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database()",
                pg_url,
            )
            assert not fast.done()
            assert [e.id async for e in reader.events(after=before)] == []  # nothing half-visible
            await slow.commit()
        finally:
            pool(writer).release(conn)
        with anyio.fail_after(BOUND):
            fast_event = await fast
        assert slow_id < fast_event.id
        assert [(e.id, e.data.get("message")) async for e in reader.events(after=before)] == [
            (slow_id, None),
            (fast_event.id, "committed second"),
        ]


async def test_a_rolled_back_event_leaves_a_gap_that_nothing_fills(pg_url: str) -> None:
    async with interlock.connect(pg_url) as broker:
        first = await broker.inform("one")
        conn = await pool(broker).acquire()
        try:
            tx = conn.transaction()
            await tx.start()
            lost = await conn.fetchval("INSERT INTO events (type, at) VALUES ('informed', now()) RETURNING id")
            await tx.rollback()
        finally:
            pool(broker).release(conn)
        second = await broker.inform("two")
        assert first.id < lost < second.id
        assert [e.id async for e in broker.events()] == [first.id, second.id]


async def test_concurrent_writers_on_many_connections_are_read_in_one_gapless_order(pg_url: str) -> None:
    writers = [interlock.connect(pg_url, max_size=4) for _ in range(4)]
    cycles = 40
    async with interlock.connect(pg_url) as reader:
        for w in writers:
            await w.open()
        try:
            seen: list[int] = []
            done = asyncio.Event()

            async def churn(broker: Broker) -> None:
                async def one(i: int) -> None:
                    request = await broker.create(Text(f"Q{i}?"))
                    await broker.resolve(request.id, "x")

                await asyncio.gather(*(one(i) for i in range(cycles)))

            async def follow() -> None:
                cursor = 0
                while not done.is_set() or cursor < await reader.store.last_event_id():
                    for event in await reader.store.events(cursor, 500):
                        assert event.id > cursor, "an event came out of order"
                        seen.append(event.id)
                        cursor = event.id
                    await asyncio.sleep(0)

            with anyio.fail_after(60):
                follower = asyncio.create_task(follow())
                await asyncio.gather(*(churn(w) for w in writers))
                done.set()
                await follower
        finally:
            for w in writers:
                await w.aclose()
        every = [e.id async for e in reader.events()]
        assert len(every) == 2 * cycles * len(writers)
        assert seen == every  # read live, while they committed: nothing skipped, nothing twice


# -- expiry across nodes ----------------------------------------------------------------


async def test_each_overdue_request_expires_once_whichever_node_gets_there_first(pg_url: str) -> None:
    brokers = [interlock.connect(pg_url) for _ in range(4)]
    for b in brokers:
        await b.open()
    try:
        made = [await brokers[i % 4].create(Text(f"Q{i}?"), timeout=3600) for i in range(120)]
        psql("UPDATE requests SET expires_at = now() - interval '1 second'", database_of(pg_url))
        now = datetime.now(UTC)
        response = Response(now, via="expiry")
        rounds = await asyncio.gather(
            *(b.store.settle_pending(Status.EXPIRED, response, due=now) for b in brokers for _ in range(3))
        )
        settled = [r.id for batch in rounds for r in batch]
        assert sorted(settled) == sorted(r.id for r in made)  # each once, by one node or another

        # And through the brokers' own expiry loops, all running at once.
        timed = [await brokers[i % 4].create(Text(f"T{i}?"), timeout=0.2) for i in range(40)]
        with anyio.fail_after(BOUND):
            expired: set[str] = set()
            async for event in brokers[0].events(follow=True):
                if event.type == "expired" and event.request_id in {r.id for r in timed}:
                    expired.add(event.request_id)
                    if len(expired) == len(timed):
                        break
    finally:
        for b in brokers:
            await b.aclose()
    async with interlock.connect(pg_url) as broker:
        events = [e async for e in broker.events()]
    assert sum(e.type == "expired" for e in events) == len(made) + len(timed)
    assert len({e.request_id for e in events if e.type == "expired"}) == len(made) + len(timed)


# -- wake-ups --------------------------------------------------------------------------------


async def test_the_listener_reconnects_after_its_connection_is_dropped(pg_url: str) -> None:
    listening = (  # this test's database only: other databases on the server are not ours to touch
        "SELECT pid FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = 'interlock-listener'"
    )
    # The waiting side polls once an hour: within the bound only a wake-up hint can wake it.
    async with interlock.connect(pg_url, poll_interval=3600) as waiting:
        old = await until(f"SELECT string_agg(pid::text, ',') FROM ({listening}) l", pg_url)
        async with interlock.connect(pg_url) as answering:
            first = await answering.create(Text("Name?"))
            waiter = asyncio.create_task(waiting.wait(first.id))
            await anyio.wait_all_tasks_blocked()
            psql(f"SELECT pg_terminate_backend({old})", database_of(pg_url))
            assert await answering.resolve(first.id, "Ada")
            with anyio.fail_after(BOUND):
                assert (await waiter).answers == {"text": "Ada"}  # caught up on reconnecting

            # Its new listener, and the answering side's.
            await until(f"SELECT count(*) = 2 FROM ({listening} AND pid <> {old}) l", pg_url)
            second = await answering.create(Text("Name?"))
            waiter = asyncio.create_task(waiting.wait(second.id))
            await anyio.wait_all_tasks_blocked()
            assert await answering.resolve(second.id, "Bo")
            with anyio.fail_after(BOUND):
                assert (await waiter).answers == {"text": "Bo"}  # by the new connection's hint


async def test_a_store_counts_as_its_own_only_the_backends_of_connections_it_has_open(pg_url: str) -> None:
    # A notification from one of its own backends is no news to a store, and ignored. It
    # had kept the pid of every connection it ever opened: a set that grew with each one
    # dropped (a statement cut short drops its connection), and once the database gave a
    # pid of ours to another node's backend, that node's wake-ups were ignored here.
    store = PostgresStore(pg_url)
    await store.open()
    try:
        dropped = set()
        for _ in range(5):
            conn = await store.pool.acquire()
            dropped.add(conn.get_server_pid())
            store.pool.release(conn, reusable=False)  # as a statement cut short does
        await asyncio.sleep(0)  # (the connections' termination callbacks run soon)
        await store.pool.execute("SELECT 1")
        activity = psql("SELECT pid FROM pg_stat_activity WHERE datname = current_database()", database_of(pg_url))
        open_pids = {int(pid) for pid in activity.split()}
        assert not dropped & store._own
        assert store._own <= open_pids
    finally:
        await store.aclose()


class HeldLog:
    """Holds a broker's reads of the event log (its follow loop) until released, so that
    only a settlement's own notification can wake its waiters meanwhile."""

    def __init__(self, broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
        self.released = asyncio.Event()
        self.reads = 0
        changes = broker.store.changes

        async def held(after: int = 0, limit: int = 500) -> Any:
            self.reads += 1
            await self.released.wait()
            return await changes(after, limit)

        monkeypatch.setattr(broker.store, "changes", held)


async def test_a_settlement_s_notification_wakes_a_waiter_before_the_event_log_is_read(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with interlock.connect(pg_url, poll_interval=3600) as waiting, interlock.connect(pg_url) as answering:
        log = HeldLog(waiting, monkeypatch)
        answered, rejected = await answering.create(Text("Name?")), await answering.create(Text("Go?"))
        # An id that JSON escapes (a quote, a backslash) and one it does not (ü) are read too.
        odd, _ = await answering.submit(replace(answering.prepare(Text("Id?")), id='say "ü" \\ twice'))
        answer = asyncio.create_task(waiting.wait(answered.id))
        rejection = asyncio.create_task(waiting.wait(rejected.id))
        odd_answer = asyncio.create_task(waiting.wait(odd.id))
        await anyio.wait_all_tasks_blocked()
        assert await answering.resolve(answered.id, "Ada", by="alice", via="web")
        assert await answering.reject(rejected.id, "not today", by="bob")
        assert await answering.resolve(odd.id, "odd")
        with anyio.fail_after(BOUND):
            response = await answer
            with pytest.raises(interlock.Rejected) as denied:
                await rejection
            assert (await odd_answer).answers == {"text": "odd"}
        assert (response.answers, response.by, response.via) == ({"text": "Ada"}, "alice", "web")
        assert denied.value.reason == "not today"
        # The settled requests are what the event log will say, and are served as such meanwhile.
        assert (await waiting.get(answered.id)).status is Status.ANSWERED
        assert (await waiting.get(rejected.id)).response.by == "bob"  # type: ignore[union-attr]
        assert log.reads >= 1  # the log was being read (and held) all along
        log.released.set()


async def test_a_settlement_note_from_anyone_without_the_database_s_key_wakes_nobody(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with interlock.connect(pg_url, poll_interval=3600) as waiting, interlock.connect(pg_url) as answering:
        log = HeldLog(waiting, monkeypatch)
        notes: list[tuple[str, Any]] = []
        read = asyncio.Event()
        settled_by_note = waiting.store._settled_by_note  # type: ignore[attr-defined]

        def reading(payload: str) -> Any:
            settled = settled_by_note(payload)
            notes.append((payload, settled))
            if len(notes) == 4:
                read.set()
            return settled

        monkeypatch.setattr(waiting.store, "_settled_by_note", reading)
        request = await answering.create(Confirm("Deploy?"))
        waiter = asyncio.create_task(waiting.wait(request.id))
        await anyio.wait_all_tasks_blocked()
        # Both brokers' listeners have run their LISTEN (a note sent before is heard by nobody).
        await until(
            "SELECT count(*) = 2 FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'interlock-listener' AND query LIKE 'LISTEN%'",
            pg_url,
        )
        # Any role that may connect may NOTIFY: a note unsigned, signed with another key, or
        # with a "signature" that is not ASCII (compared as text, it raised TypeError).
        forged = json.dumps(
            [request.id, "answered", {"answers": {"confirm": True}, "reason": "ship it", "at": "2026-12-05T00:00:00Z"}]
        )
        other = hashlib.sha256(b"guessed" + hashlib.sha256(b"guessed" + forged.encode()).digest()).hexdigest()
        forger = await asyncpg.connect(pg_url)
        try:
            for payload in (forged, forged + other, forged + "0" * 64, forged + "é" * 64):
                await forger.execute("SELECT pg_notify('interlock', $1)", payload)
        finally:
            await forger.close()
        with anyio.fail_after(BOUND):
            await read.wait()
        await anyio.wait_all_tasks_blocked()
        assert not waiter.done()
        assert [settled for _, settled in notes] == [None, None, None, None]
        ignored = [r for r in caplog.records if "not signed with this database's key" in r.getMessage()]
        assert len(ignored) >= 4  # (the answering broker, holding the request pending too, says so as well)
        # Each names the request it claims to settle, and none quotes the answer it carries.
        assert all(request.id in r.getMessage() for r in ignored)
        assert not [r for r in caplog.records if "ship it" in r.getMessage() or '"answers"' in r.getMessage()]
        log.released.set()
        assert (await waiting.get(request.id)).status is Status.PENDING
        assert await answering.reject(request.id, "not now")
        with anyio.fail_after(BOUND), pytest.raises(interlock.Rejected):
            await waiter


async def test_a_store_opening_while_another_makes_the_note_key_takes_that_key(pg_url: str) -> None:
    other = await asyncpg.connect(pg_url)
    store = PostgresStore(pg_url)
    try:
        await other.execute("DELETE FROM note_key")  # a database no store has opened yet
        making = other.transaction()
        await making.start()
        await other.execute("INSERT INTO note_key (key) VALUES ('\\x0102'::bytea)")  # another store, mid-open
        opening = asyncio.create_task(store.open())
        blocked = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND query LIKE '%note_key%'"
        )
        await until(blocked, pg_url)  # this store's insert waits on the other's
        await making.commit()
        with anyio.fail_after(BOUND):
            await opening
        assert store._note_key == b"\x01\x02"  # not None: it looked again once the other had committed
    finally:
        await store.aclose()
        await other.close()


async def test_a_settlement_s_notification_carries_it_unless_too_large_then_its_event_wakes_the_waiter(
    pg_url: str,
) -> None:
    heard: list[str] = []
    short_heard = asyncio.Event()
    listener = await asyncpg.connect(pg_url)  # a bare listener: what each commit sends

    def note(conn: Any, pid: int, channel: str, payload: str) -> None:
        heard.append(payload)
        if short.id in payload:
            short_heard.set()

    try:
        async with interlock.connect(pg_url, poll_interval=3600) as waiting, interlock.connect(pg_url) as answering:
            long, short = await answering.create(Text("Tell me everything")), await answering.create(Text("Name?"))
            await listener.add_listener("interlock", note)
            waiter = asyncio.create_task(waiting.wait(long.id))
            await anyio.wait_all_tasks_blocked()
            long_answer = "lorem ipsum " * 1000  # over the 8000 bytes a notification carries
            assert await answering.resolve(long.id, long_answer)
            with anyio.fail_after(BOUND):
                assert (await waiter).answers == {"text": long_answer}  # woken by reading the event log
            assert await answering.resolve(short.id, "Ada", by="alice")
            with anyio.fail_after(BOUND):
                await short_heard.wait()
    finally:
        await listener.close()
    notes = [json.loads(payload[:-64]) for payload in heard if payload]  # each signed
    assert [note[:2] for note in notes] == [[short.id, "answered"]]
    assert (notes[0][2]["answers"], notes[0][2]["by"]) == ({"text": "Ada"}, "alice")
    # The long answer's transaction sent its event's bare notification; the short one's, its
    # own note alone (one notification a settlement, as before the note).
    assert heard[0] == "" and len(heard) == 2


async def test_pool_connections_dropped_by_the_server_are_replaced(pg_url: str) -> None:
    async with interlock.connect(pg_url) as broker:
        request = await broker.create(Text("Name?"))
        psql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = 'interlock'",
            database_of(pg_url),
        )
        with anyio.fail_after(BOUND):
            await until(
                "SELECT count(*) = 0 FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = 'interlock'",
                pg_url,
            )
        assert await broker.resolve(request.id, "Ada")
        assert (await broker.get(request.id)).answer == "Ada"


@pytest.mark.parametrize("turns", range(6))
async def test_connections_the_server_ended_while_idle_are_not_used_again(pg_url: str, turns: int) -> None:
    # The server's "terminating connection" message is read a turn or more of the event
    # loop before the connection is seen closed: one handed out then was in the middle
    # of reading that error and failed the next caller's statement.
    async with interlock.connect(pg_url, poll_interval=3600) as broker:
        store = broker.store
        assert isinstance(store, PostgresStore)
        await store.pool.fill(3)
        psql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = 'interlock'",
            database_of(pg_url),
        )
        for _ in range(turns):
            await asyncio.sleep(0)
        request = await broker.create(Text("Name?"))
        assert await broker.resolve(request.id, "Ada")
        assert (await broker.get(request.id)).answer == "Ada"


async def test_a_write_whose_reply_was_lost_with_its_connection_is_repeated_safely(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with interlock.connect(pg_url) as broker:
        connections = pool(broker)
        lost: list[str] = []

        def losing_the_first_reply(method: str, function: str) -> Any:
            real = getattr(connections, method)

            async def run(sql: str, *args: Any) -> Any:
                result = await real(sql, *args)
                if function in sql and not lost:
                    lost.append(sql)
                    # as the pool says it: the store's own error, from the driver's
                    lost_reply = ConnectionResetError("the connection dropped before the reply came")
                    raise Unavailable(f"the store is unavailable for now: {lost_reply}") from lost_reply
                return result

            return run

        monkeypatch.setattr(connections, "fetchrow", losing_the_first_reply("fetchrow", "interlock_insert"))
        request = await broker.create(Text("Name?"))  # stored by the first attempt, found by the second
        monkeypatch.undo()
        lost.clear()
        monkeypatch.setattr(connections, "fetchval", losing_the_first_reply("fetchval", "interlock_settle"))
        assert await broker.resolve(request.id, "Ada")  # won by the first attempt: still True
        monkeypatch.undo()
        assert await broker.resolve(request.id, "Bo") is False
        assert [(e.type, e.request_id) async for e in broker.events()] == [
            ("created", request.id),
            ("answered", request.id),
        ]
        assert (await broker.get(request.id)).answer == "Ada"
        assert len(lost) == 1


# -- URLs ------------------------------------------------------------------------------------


def test_interlock_options_are_taken_out_of_the_url_and_the_rest_left_to_the_driver() -> None:
    dsn, ours = split_url("postgres://u:pw@db.example:6432/app?poll_interval=0.5&max_size=3&sslmode=require")
    assert dsn == "postgresql://u:pw@db.example:6432/app?sslmode=require"
    assert ours == {"poll_interval": 0.5, "max_size": 3}
    store = PostgresStore("postgresql://h/db?poll_interval=2&min_size=0", poll_interval=0.25)
    assert (store.poll_interval, store.min_size, store.max_size) == (0.25, 0, 10)
    with pytest.raises(ValueError, match="not a number"):
        split_url("postgresql://h/db?keepalive=soon")
    with pytest.raises(ValueError, match="min_size"):
        PostgresStore("postgresql://h/db?min_size=5&max_size=2")


async def test_connect_takes_postgres_urls_and_their_options(pg_url: str) -> None:
    alias = pg_url.replace("postgresql://", "postgres://") + "?poll_interval=0.5&application_name=mine"
    async with interlock.connect(alias) as broker:
        assert broker.store.poll_interval == 0.5
        request = await broker.create(Text("Name?"))
        assert (
            "mine"
            in psql(
                "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()", database_of(pg_url)
            ).splitlines()
        )
    async with interlock.connect(pg_url) as broker:
        assert (await broker.get(request.id)).status is Status.PENDING
        with pytest.raises(NotFound):
            await broker.get("nope")


async def test_the_store_s_connections_plan_without_parallel_workers_unless_the_url_says(pg_url: str) -> None:
    # A page read planned in parallel waited 20-30 ms for its worker to start.
    for url, expected in ((pg_url, "0"), (pg_url + "?max_parallel_workers_per_gather=3", "3")):
        store = PostgresStore(url)
        await store.open()
        try:
            conn = await store.pool.acquire()
            try:
                assert await conn.fetchval("SHOW max_parallel_workers_per_gather") == expected
            finally:
                store.pool.release(conn)
        finally:
            await store.aclose()


async def test_a_database_that_does_not_exist_is_a_clear_error(pg_url: str) -> None:
    with pytest.raises(ConnectionError, match="cannot open the PostgreSQL store"):
        async with interlock.connect(pg_url + "_missing"):
            pass


async def test_deleting_a_team_names_a_member_who_joined_while_it_ran_in_its_team_left(pg_url: str) -> None:
    """A member added by a transaction still open when the deletion starts is taken away by
    the deletion too, so its `team_left` event must name them (it ends their streams)."""
    other = await asyncpg.connect(pg_url)
    try:
        async with interlock.connect(pg_url) as broker:
            for name in ("alice", "bob"):
                await broker.store.save_principal(Principal(name, "human"))
            await broker.add_team_members("ops", ["alice"])
            after = await broker.last_event_id()
            joining = other.transaction()
            await joining.start()
            await other.execute("INSERT INTO team_members (team, member) VALUES ('ops', 'bob')")
            deleting = asyncio.create_task(broker.delete_team("ops"))
            blocked = (
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND query LIKE '%teams%'"
            )
            await until(blocked, pg_url)  # the deletion waits on the joining transaction
            await joining.commit()
            with anyio.fail_after(BOUND):
                assert await deleting
            left = [e for e in await broker.find_events(after=after) if e.type == "team_left"]
            assert [e.data for e in left] == [{"team": "ops", "principals": ["alice", "bob"]}]
            assert await broker.teams_of("bob") == frozenset()
    finally:
        await other.close()
