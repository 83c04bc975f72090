"""A node left running while a later version of interlock migrates the database (a rolling
upgrade): it writes nothing more, and reads on. The later version is this one with one
migration more, applied the way a real later version applies its own (`_migrate`)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

import interlock
import interlock.store.postgres as postgres_store
from asgi_support import serve_in_process
from interlock import Confirm, Status, Text
from interlock.broker import LocalBroker
from interlock.principals import Principal, issue_token
from interlock.store import NewerDatabase
from interlock.store._sql import Migration, load_migrations
from interlock.store.postgres import PostgresStore
from later_version_support import loops_say_once_they_write_no_more, retry_soon

pytestmark = pytest.mark.anyio

BOUND = 20.0
"""Seconds any wait in these tests may take before it fails."""

KNOWN = load_migrations("postgresql")[-1].version

# A later version's migration whose trigger writes what this version writes itself (as
# 0021's did for versions before it): a create's event, written twice by an older node.
CREATED_EVENTS_BY_TRIGGER = Migration(
    KNOWN + 1,
    "created_events_by_trigger",
    """
    CREATE FUNCTION later_created_event() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO events (type, request_id, at, recipient, requester, session, run)
        VALUES ('created', new.id, new.created_at, new.recipient, new.requester, new.session, new.run);
        RETURN NULL;
    END
    $$;
    CREATE TRIGGER later_created_event AFTER INSERT ON requests FOR EACH ROW EXECUTE FUNCTION later_created_event();
    """,
)
FROM_THE_FUTURE = Migration(KNOWN + 1, "from_the_future", "CREATE TABLE later (x integer);")


@contextlib.asynccontextmanager
async def later_version(url: str, migration: Migration) -> AsyncIterator[interlock.Broker]:
    """A process of a later version, one migration ahead, opened on `url` (which it migrates)."""
    patch = pytest.MonkeyPatch()
    try:
        patch.setattr(postgres_store, "load_migrations", lambda dialect: [*load_migrations(dialect), migration])
        newer = interlock.connect(url)
        await newer.open()
    finally:
        patch.undo()
    try:
        yield newer
    finally:
        await newer.aclose()


async def snapshot(url: str) -> dict[str, list[Any]]:
    """What the database holds that a write would change."""
    conn = await asyncpg.connect(url)
    try:
        return {
            table: [tuple(row) for row in await conn.fetch(sql)]
            for table, sql in {
                "requests": "SELECT id, status, response::text FROM requests ORDER BY id",
                "events": "SELECT id, type, request_id FROM events ORDER BY id",
                "runs": "SELECT id, status, worker, ready FROM runs ORDER BY id",
                "principals": "SELECT name, kind FROM principals ORDER BY name",
                "tokens": "SELECT id, revoked_at FROM tokens ORDER BY id",
                "claims": "SELECT request_id, claimed_by FROM claims ORDER BY request_id",
                "followups": "SELECT id, state FROM followups ORDER BY id",
                "outbox": "SELECT id, routed_at, lease_owner FROM outbox ORDER BY id",
            }.items()
        }
    finally:
        await conn.close()


async def test_a_node_left_running_refuses_to_write_once_a_later_version_migrated_the_database(pg_url: str) -> None:
    url = pg_url.replace("postgres@", "postgres:hunter2@", 1)  # (trust auth: the password is not asked for)
    async with interlock.connect(url) as older:
        await older.save_principal(Principal("alice", "human"))
        waiting = await older.create(Text("Colour?"), to="alice")
        # A run a worker holds, and a run ready for a worker.
        held_ask = older.prepare(Confirm("Send the mail?", id="ok"), to="alice")
        held = await older.start_parked("mailer", [held_ask], state={"step": 1})
        await older.resolve(held_ask.id, {"ok": True}, by="alice")
        assert (await older.claim_run(["mailer"], worker="w1")) is not None
        ready_ask = older.prepare(Confirm("Send it again?", id="ok"), to="alice")
        ready = await older.start_parked("mailer", [ready_ask], state={"step": 1})
        await older.resolve(ready_ask.id, {"ok": True}, by="alice")
        store = older.store
        assert isinstance(store, PostgresStore)
        await store._catch_up()  # the search texts of all that

        async with later_version(url, CREATED_EVENTS_BY_TRIGGER) as newer:
            before = await snapshot(url)
            refused = (
                r"the PostgreSQL database at postgresql://postgres:\*\*\*@127\.0\.0\.1:5432/\w+ was upgraded by a "
                rf"later version of interlock while this process had it open \(migrations "
                rf"{KNOWN + 1:04d}_created_events_by_trigger are unknown to this one, which knows 1 to {KNOWN}\): "
                r"the write was refused and changed nothing; restart this process on the later version"
            )
            writes: dict[str, Callable[[], Any]] = {
                "create": lambda: older.create(Text("Size?"), to="alice"),
                "create with a key": lambda: older.create(Text("Shape?"), to="alice", idempotency_key="k"),
                "answer": lambda: older.resolve(waiting.id, "blue", by="alice"),
                "reject": lambda: older.reject(waiting.id, "no", by="alice"),
                "park": lambda: older.start_parked(
                    "mailer", [older.prepare(Confirm("Again?"), to="alice")], state={"step": 1}
                ),
                "start a run": lambda: older.start_run("bot"),
                "claim a run": lambda: older.claim_run(["mailer"], worker="w2"),
                "complete a run": lambda: older.complete_run(held.id, {"sent": True}, worker="w1"),
                "send a run a message": lambda: older.send_message(held.id, "hurry", by="alice"),
                "claim a request": lambda: older.claim(waiting.id, by="alice"),
                "save a principal": lambda: older.save_principal(Principal("bob", "human")),
                "save a token": lambda: older.save_token(issue_token("alice", datetime.now(UTC))),
                "revoke tokens": lambda: older.revoke_tokens(principal="alice"),
            }
            refusals = {}
            for what, write in writes.items():
                try:
                    await write()
                except NewerDatabase as exc:
                    refusals[what] = re.fullmatch(refused, str(exc)) is not None  # (the URL's password never said)
            assert refusals == dict.fromkeys(writes, True)
            together = await asyncio.gather(  # several at once, on several connections
                *(older.create(Text(f"Shape {i}?"), to="bob") for i in range(3)), return_exceptions=True
            )
            assert [type(outcome) for outcome in together] == [NewerDatabase] * 3
            assert all("hunter2" not in str(outcome) for outcome in together)
            assert await snapshot(url) == before

            # It still reads: the request as it was, the lists, the search, the runs.
            assert (await older.get(waiting.id)).status is Status.PENDING
            assert [r.id for r in (await older.list(recipient="alice", status=Status.PENDING)).items] == [waiting.id]
            assert [e.type for e in await older.find_events(request=waiting.id)] == ["created"]
            assert (await older.get_run(ready.id)).ready
            assert {p.name for p in await older.list_principals()} == {"alice"}
            assert await snapshot(url) == before
            # A search too, with an event to take into the search texts first: it leaves them
            # to the later version, which keeps them up to date.
            conn = await asyncpg.connect(url)
            try:
                await conn.execute("INSERT INTO events (type, at) VALUES ('noted', now())")
            finally:
                await conn.close()
            assert [r.id for r in (await older.list(text="colour")).items] == [waiting.id]

            # The later version writes on, each event once.
            assert await newer.resolve(waiting.id, "blue", by="alice")
            made = await newer.create(Text("Size?"), to="alice")
            events = [(e.type, e.request_id) for e in await newer.find_events(request=made.id)]
            assert events == [("created", made.id), ("created", made.id)]  # its migration's trigger and its own
            # What the later version wrote, the older one reads.
            assert (await older.get(waiting.id)).status is Status.ANSWERED


async def test_a_connection_that_does_not_say_its_version_writes_on_a_database_a_later_version_migrated(
    pg_url: str,
) -> None:
    """psql, an operator's tools, a process of a version from before the check."""
    async with later_version(pg_url, FROM_THE_FUTURE):
        pass
    conn = await asyncpg.connect(pg_url)
    try:
        await conn.execute("INSERT INTO principals (name, kind, created_at) VALUES ('ops', 'human', now())")
        assert await conn.fetchval("SELECT count(*) FROM principals") == 1
    finally:
        await conn.close()


async def test_the_guard_follows_every_migration_recorded(pg_url: str) -> None:
    """A later migration keeps the guard current without a word about it: recording its row
    is enough (and forgetting it, as an operator undoing it by hand would, too)."""

    async def writes(version: int) -> str | None:
        """None for a write taken from a connection of `version`, else its refusal."""
        conn = await asyncpg.connect(pg_url, server_settings={"interlock.schema_version": str(version)})
        try:
            await conn.execute("UPDATE settings SET name = name")
        except asyncpg.PostgresError as exc:
            return f"{exc.sqlstate}: {exc.detail}"
        finally:
            await conn.close()
        return None

    assert await writes(KNOWN) is None
    assert await writes(KNOWN - 1) == f"IL001: {KNOWN:04d}_{load_migrations('postgresql')[-1].name}"
    admin = await asyncpg.connect(pg_url)
    try:
        await admin.execute(
            "INSERT INTO interlock_migrations (version, name) VALUES ($1, 'one'), ($2, 'two')", KNOWN + 1, KNOWN + 2
        )
        assert await writes(KNOWN) == f"IL001: {KNOWN + 1:04d}_one, {KNOWN + 2:04d}_two"
        assert await writes(KNOWN + 1) == f"IL001: {KNOWN + 2:04d}_two"
        assert await writes(KNOWN + 2) is None
        await admin.execute("DELETE FROM interlock_migrations WHERE version > $1", KNOWN)
        assert await writes(KNOWN) is None
    finally:
        await admin.close()


EXEMPT = {
    "interlock_migrations": "the migrations' own record",
    "pending_requests": "written only by the triggers of requests",
    "settled_requests": "written only by the triggers of requests",
    "request_texts": "written by the triggers of requests, and by interlock_derive_search with derived",
}


async def test_every_table_a_store_writes_refuses_a_connection_of_an_earlier_version(pg_url: str) -> None:
    """A table a later migration adds is guarded too, or this test says which to guard
    (`refuse_unknown_schema`, see migration 0038) or why it needs no guard (EXEMPT)."""
    conn = await asyncpg.connect(pg_url)
    try:
        tables = {
            row[0]
            for row in await conn.fetch(
                "SELECT c.relname FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace"
                " AND c.relkind IN ('r', 'p') AND NOT c.relispartition"
            )
        }
        guarded = {
            row[0]: row[1]
            for row in await conn.fetch(
                "SELECT t.tgrelid::regclass::text,"
                " array_remove(ARRAY[CASE WHEN t.tgtype & 4 <> 0 THEN 'insert' END,"
                " CASE WHEN t.tgtype & 8 <> 0 THEN 'delete' END, CASE WHEN t.tgtype & 16 <> 0 THEN 'update' END],"
                " NULL)"
                " FROM pg_trigger t WHERE NOT t.tgisinternal"
                " AND t.tgfoid = 'interlock_refuse_unknown_schema'::regproc"
                " AND t.tgtype & 1 = 0 AND t.tgtype & 2 <> 0"  # for each statement, before it
            )
        }
    finally:
        await conn.close()
    assert set(EXEMPT) <= tables
    expected = {table: ["insert", "delete", "update"] for table in tables - set(EXEMPT)}
    expected["outbox"] = ["delete", "update"]  # its rows come from the events' trigger
    assert guarded == expected


async def test_a_server_on_a_database_a_later_version_migrated_answers_its_writes_503_and_reads_on(
    pg_url: str,
) -> None:
    body = {"asks": [{"type": "text", "prompt": "Name?"}]}
    async with serve_in_process(pg_url, auth=False) as server, server.client() as client:
        made = await client.post("/api/v1/requests", json=body)
        assert made.status_code == 201, made.text
        assert (await client.get("/healthz")).status_code == 200
        async with later_version(pg_url, FROM_THE_FUTURE):
            pass
        # Out of a load balancer's rotation before any write is tried on it.
        health = await client.get("/healthz")
        assert health.status_code == 503, health.text
        assert f"{KNOWN + 1:04d}_from_the_future" in health.json()["detail"]
        refused = await client.post("/api/v1/requests", json=body)
        assert refused.status_code == 503, refused.text
        assert refused.json()["code"] == "unavailable"
        assert f"{KNOWN + 1:04d}_from_the_future" in refused.json()["detail"]
        assert "restart this process on the later version" in refused.json()["detail"]
        assert int(refused.headers["Retry-After"]) >= 1
        answered = await client.post(f"/api/v1/requests/{made.json()['id']}/answer", json={"answers": {"text": "x"}})
        assert answered.status_code == 503, answered.text
        listed = await client.get("/api/v1/requests")
        assert [r["id"] for r in listed.json()["items"]] == [made.json()["id"]]
        assert listed.json()["items"][0]["status"] == "pending"
        # A person's page of the request too (its view goes unrecorded: a write).
        page = await client.get(f"/requests/{made.json()['id']}")
        assert page.status_code == 200, page.text
        assert "Name?" in page.text


async def test_a_node_left_on_a_database_a_later_version_migrated_says_once_that_its_loops_write_no_more(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Its expiry and delivery loops try again seldom, and say why once, without a traceback."""
    retry_soon(monkeypatch)
    async with interlock.connect(pg_url) as older:
        assert isinstance(older, LocalBroker)
        await older.create(Confirm("Restart the workers?"), to="alice", timeout=0.3)  # due soon, and routed
        store = older.store
        assert isinstance(store, PostgresStore)
        await store._catch_up()  # (its search text: a catch-up refused later would log a warning)
        async with later_version(pg_url, FROM_THE_FUTURE):
            pass
        before = await snapshot(pg_url)

        await loops_say_once_they_write_no_more(older, caplog)
        assert await snapshot(pg_url) == before
