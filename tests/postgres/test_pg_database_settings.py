"""A database an operator bounds for every session (`ALTER DATABASE ... SET statement_timeout`,
`lock_timeout`, a connection limit): the migrations still run to their end, waiting for
another process's; a statement the database cancels is `Unavailable` (503 with Retry-After
over HTTP), changes nothing, and the store serves again once the database is fast enough; a
server that takes no more connections makes calls wait for the pool's own."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import Iterator

import anyio
import asyncpg  # type: ignore[import-untyped]
import pytest
from pg_support import PG_SERVER, database_of, empty_database, psql

import interlock
from asgi_support import serve_in_process
from interlock import Text, Unavailable
from interlock.store._sql import load_migrations

pytestmark = pytest.mark.anyio

BOUND = 20  # seconds: the most any one wait here may take
MIGRATIONS_LOCK = 7598390718262734180  # queries.sql `lock_migrations`
EVENTS_LOCK = 7598390718262734181  # taken by every event insert (migration 0023)


def bound_every_session(url: str, setting: str, value: str = "200ms") -> None:
    psql(f"ALTER DATABASE \"{database_of(url)}\" SET {setting} = '{value}'")


async def test_migrations_wait_for_another_process_s_past_the_database_s_timeouts() -> None:
    with empty_database() as url:
        bound_every_session(url, "statement_timeout")
        bound_every_session(url, "lock_timeout")
        other = await asyncpg.connect(url)  # a process of this version migrating: it holds the lock
        try:
            migrating = other.transaction()
            await migrating.start()
            await other.execute("SET LOCAL statement_timeout = 0")
            await other.execute(f"SELECT pg_advisory_xact_lock({MIGRATIONS_LOCK})")
            broker = interlock.connect(url)
            opening = asyncio.create_task(broker.open())
            with anyio.fail_after(BOUND):  # until it has waited longer than either timeout
                while not opening.done():
                    waited = psql(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                        "AND waitstart < clock_timestamp() - interval '500 ms'",
                        database_of(url),
                    )
                    if waited not in ("", "0"):
                        break
                    await anyio.sleep(0.02)
            await migrating.commit()
            with anyio.fail_after(BOUND):
                await opening
            try:
                request = await broker.create(Text("Opened?"))
                assert (await broker.get(request.id)).status.value == "pending"
            finally:
                await broker.aclose()
        finally:
            await other.close()
        applied = psql("SELECT version FROM interlock_migrations ORDER BY version", database_of(url))
        assert applied.splitlines() == [str(m.version) for m in load_migrations("postgresql")]


@pytest.mark.parametrize(
    ("setting", "said"),
    [("statement_timeout", "statement timeout"), ("lock_timeout", "lock timeout")],
)
async def test_a_write_the_database_cancels_is_unavailable_changes_nothing_and_serves_after(
    pg_url: str, setting: str, said: str
) -> None:
    bound_every_session(pg_url, setting)  # (for the sessions opened from now on)
    holder = await asyncpg.connect(pg_url)
    try:
        async with interlock.connect(pg_url) as broker:
            before = await broker.last_event_id()
            async with holder.transaction():  # a session holding the lock every event insert takes
                await holder.execute(f"SET LOCAL {setting} = 0")
                await holder.execute(f"SELECT pg_advisory_xact_lock({EVENTS_LOCK})")
                with anyio.fail_after(BOUND), pytest.raises(Unavailable, match=said):
                    await broker.create(Text("Held up?"))
            assert await broker.last_event_id() == before
            assert await broker.pending() == {}
            made = await broker.create(Text("Now?"))
            assert list(await broker.pending()) == [made.id]
    finally:
        await holder.close()


async def test_a_server_answers_503_with_retry_after_for_a_statement_the_database_cancelled(pg_url: str) -> None:
    bound_every_session(pg_url, "statement_timeout")
    holder = await asyncpg.connect(pg_url)
    try:
        async with serve_in_process(pg_url, auth=False) as server, server.client() as client:
            body = {"asks": [{"type": "text", "prompt": "Name?"}]}
            async with holder.transaction():
                await holder.execute("SET LOCAL statement_timeout = 0")
                await holder.execute(f"SELECT pg_advisory_xact_lock({EVENTS_LOCK})")
                with anyio.fail_after(BOUND):
                    held = await client.post("/api/v1/requests", json=body)
            assert held.status_code == 503, held.text
            assert held.json()["code"] == "unavailable"
            assert "statement timeout" in held.json()["detail"]
            assert int(held.headers["Retry-After"]) >= 1
            assert (await client.get("/api/v1/requests")).json()["items"] == []
            assert (await client.post("/api/v1/requests", json=body)).status_code == 201
    finally:
        await holder.close()


@contextlib.contextmanager
def a_role_of_its_own(url: str) -> Iterator[str]:
    """The URL of `url`'s database as a new role that may use interlock's tables there (a
    connection limit binds no superuser), dropped after."""
    role = f"interlock_limited_{os.getpid()}_{secrets.token_hex(4)}"
    database = database_of(url)
    psql(f"CREATE ROLE {role} LOGIN")
    try:
        psql(
            f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}; "
            f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}",
            database,
        )
        yield f"{PG_SERVER.replace('postgres@', f'{role}@')}/{database}"
    finally:
        psql(f"DROP OWNED BY {role}", database)
        psql(f"DROP ROLE {role}")


async def test_calls_wait_for_the_pool_s_connections_when_the_server_takes_no_more(pg_url: str) -> None:
    with a_role_of_its_own(pg_url) as url:
        async with interlock.connect(f"{url}?max_size=8") as broker:
            asked = await broker.create(Text("Name?"))
            role = url.split("//", 1)[1].split("@", 1)[0]
            # Other nodes and clients have taken every other connection the role may open.
            held = psql(f"SELECT count(*) FROM pg_stat_activity WHERE usename = '{role}'", database_of(url))
            psql(f"ALTER ROLE {role} CONNECTION LIMIT {held}")
            with anyio.fail_after(BOUND):
                read = await asyncio.gather(*(broker.get(asked.id) for _ in range(20)))
                made = await asyncio.gather(*(broker.create(Text(f"Name {i}?")) for i in range(5)))
            assert {r.id for r in read} == {asked.id}
            assert set(await broker.pending()) == {asked.id, *(r.id for r in made)}


async def test_a_role_that_may_only_read_and_write_the_tables_opens_a_migrated_database(pg_url: str) -> None:
    with a_role_of_its_own(pg_url) as url:  # no CREATE on the schema: the tables are another role's
        async with interlock.connect(url) as broker:
            asked = await broker.create(Text("Name?"))
            await broker.resolve(asked.id, "Ada")
            assert (await broker.get(asked.id)).status.value == "answered"


async def test_interlock_in_a_schema_of_its_own_keeps_every_table_there_and_parks_and_resumes_runs() -> None:
    """`?search_path=interlock`, for a database shared with an application's own tables: the
    migrations make everything in that schema (two had named `public.runs`, so the first
    start failed), and a request, a run parked on it and resumed work there."""
    from interlock import Confirm, RunStatus
    from interlock.runs import Worker

    async def deploy(run: object, requests: object) -> str:
        return "deployed"

    with empty_database() as url:
        psql("CREATE SCHEMA interlock", database_of(url))
        async with interlock.connect(f"{url}?search_path=interlock") as broker:
            run = await broker.start_run("deployer")
            request = await broker.create(Confirm("Deploy?"), kind="approval", to="alice", run=run.id)
            await broker.park(run.id, state={"step": 1}, waiting_on=[request.id])
            await broker.resolve(request.id, True, by="alice")
            with anyio.fail_after(BOUND):
                done = await Worker(broker, {"deployer": deploy}).run_once(wait=BOUND)
            assert done is not None and (done.status, done.result) == (RunStatus.COMPLETED, "deployed")
        tables = psql(
            "SELECT table_schema, count(*) FROM information_schema.tables "
            "WHERE table_schema IN ('public', 'interlock') GROUP BY table_schema",
            database_of(url),
        )
    counts = dict(line.split("|") for line in tables.splitlines())
    assert set(counts) == {"interlock"} and int(counts["interlock"]) > 20, tables  # none in public
