"""Fresh PostgreSQL databases for the tests, without a CREATE and a DROP DATABASE each.

Cloning the template costs about a second on a loaded machine and dropping the clone as
much again (every database is a few megabytes of catalog, written and synced), against
a few milliseconds of the test itself. So a database a test is done with is brought back
to the template's state and handed to the next test:

- every other connection to it is ended (as DROP DATABASE ... WITH (FORCE) would);
- its schema (tables, columns, indexes, constraints, triggers, functions, sequences,
  applied migrations, database settings) must still be the template's, to the byte of a
  fingerprint; a test that changed it gets its database dropped, never reused;
- every table that holds anything, even dead rows, is truncated (new, empty files, so
  sizes are the template's: a plan checked with EXPLAIN sees what a fresh clone shows),
  every sequence restarts, the planner's statistics for the tables are removed and the
  activity counters reset (pg_stat_reset), as in a clone that never ran anything.

A database that cannot be brought back in time is dropped. The admin work runs on its own
thread and event loop (asyncpg), so the sync fixtures can use it between tests.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import secrets
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import asyncpg

T = TypeVar("T")
BOUND = 60  # seconds: the most one admin step may take

FINGERPRINT = """
SELECT md5(coalesce(string_agg(line, E'\\n' ORDER BY line), '')) FROM (
    SELECT format('column %s.%s.%s %s %s %s', table_schema, table_name, column_name, data_type,
                  is_nullable, column_default) AS line
      FROM information_schema.columns WHERE table_schema NOT IN ('pg_catalog', 'information_schema')
    UNION ALL SELECT format('index %s %s', schemaname, indexdef)
      FROM pg_indexes WHERE schemaname NOT IN ('pg_catalog', 'information_schema')
    UNION ALL SELECT format('constraint %s %s %s', conrelid::regclass, conname, pg_get_constraintdef(oid))
      FROM pg_constraint WHERE connamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
    UNION ALL SELECT format('trigger %s', pg_get_triggerdef(oid)) FROM pg_trigger WHERE NOT tgisinternal
    UNION ALL SELECT format('function %s %s', p.oid::regprocedure, md5(p.prosrc))
      FROM pg_proc p WHERE p.pronamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
    UNION ALL SELECT format('sequence %s.%s %s %s %s', schemaname, sequencename, start_value, increment_by, max_value)
      FROM pg_sequences
    UNION ALL SELECT format('view %s.%s %s', schemaname, viewname, md5(definition))
      FROM pg_views WHERE schemaname NOT IN ('pg_catalog', 'information_schema')
    UNION ALL SELECT format('setting %s', setconfig) FROM pg_db_role_setting
      WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
    UNION ALL SELECT format('schema %s', nspname) FROM pg_namespace
      WHERE nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') AND nspname NOT LIKE 'pg_temp%'
        AND nspname NOT LIKE 'pg_toast_temp%'
) AS schema
"""

MIGRATIONS = "SELECT md5(coalesce(string_agg(m::text, ',' ORDER BY m::text), '')) FROM interlock_migrations m"

USER_TABLES = """
SELECT c.oid::regclass::text AS name, pg_relation_size(c.oid) + coalesce(pg_relation_size(c.reltoastrelid), 0) AS size
  FROM pg_class c
 WHERE c.relkind IN ('r', 'p')
   AND c.relnamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
   AND c.relpersistence = 'p'
   AND c.oid::regclass::text <> 'interlock_migrations'
"""


class DatabasePool:
    """`with pool.database() as url:` a database in the template's state, for one test."""

    def __init__(self, server: str, template: str) -> None:
        self.server = server
        self.template = template
        self._free: list[str] = []
        self._resetting: dict[str, concurrent.futures.Future[bool]] = {}
        self._made: set[str] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="pg-pool", daemon=True)
        self._thread.start()
        self._fingerprint = ""

    def sibling(self) -> DatabasePool:
        """Another pool over the same template, with databases of its own (close it after)."""
        pool = DatabasePool(self.server, self.template)
        pool._fingerprint = self._fingerprint
        return pool

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(BOUND * 2)

    def remember_template(self) -> None:
        """Take the template's fingerprint (call before it is closed to connections)."""
        self._fingerprint = self._run(self._fingerprint_of(self.template))

    async def _fingerprint_of(self, name: str) -> str:
        conn = await asyncpg.connect(f"{self.server}/{name}", timeout=BOUND)
        try:
            return f"{await conn.fetchval(FINGERPRINT)}/{await conn.fetchval(MIGRATIONS)}"
        finally:
            await conn.close()

    @contextlib.contextmanager
    def database(self) -> Iterator[str]:
        name = self._take()
        try:
            yield f"{self.server}/{name}"
        finally:
            # Brought back while the next tests run; the next one to need a database
            # waits for it only if none is free by then.
            self._resetting[name] = asyncio.run_coroutine_threadsafe(self._reset_or_drop(name), self._loop)

    def _take(self) -> str:
        if self._free:
            return self._free.pop()
        while self._resetting:
            done, _ = concurrent.futures.wait(
                self._resetting.values(), timeout=BOUND * 2, return_when=concurrent.futures.FIRST_COMPLETED
            )
            if not done:
                raise TimeoutError("no test database came back in time")
            for name, future in list(self._resetting.items()):
                if future.done():
                    del self._resetting[name]
                    if future.result():
                        self._free.append(name)
            if self._free:
                return self._free.pop()
        return self._create()

    async def _reset_or_drop(self, name: str) -> bool:
        if await self._reset(name):
            return True
        await self._admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        self._made.discard(name)
        return False

    def _create(self) -> str:
        name = f"interlock_test_{os.getpid()}_{secrets.token_hex(4)}"
        self._run(self._admin(f"CREATE DATABASE {name} TEMPLATE {self.template}"))
        self._made.add(name)
        return name

    def _drop(self, name: str) -> None:
        self._run(self._admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        self._made.discard(name)

    async def _admin(self, sql: str) -> None:
        conn = await asyncpg.connect(f"{self.server}/postgres", timeout=BOUND)
        try:
            await conn.execute(sql, timeout=BOUND)
        finally:
            await conn.close()

    async def _reset(self, name: str) -> bool:
        """Bring `name` back to the template's state; False when it cannot be (drop it)."""
        try:
            conn = await asyncpg.connect(f"{self.server}/{name}", timeout=BOUND)
        except (OSError, asyncpg.PostgresError, TimeoutError):
            return False
        try:
            others = "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            for _ in range(BOUND * 50):  # bounded: a terminated backend exits within moments
                # Ended again each time: a connection the test left may have come in since.
                if not await conn.fetchval(f"SELECT count(pg_terminate_backend(pid)) FROM ({others}) AS o"):
                    break
                await asyncio.sleep(0.02)
            else:
                return False
            if f"{await conn.fetchval(FINGERPRINT)}/{await conn.fetchval(MIGRATIONS)}" != self._fingerprint:
                return False  # the test changed the schema: this database is not reused
            used = [row["name"] for row in await conn.fetch(USER_TABLES) if row["size"] > 0]
            async with conn.transaction():
                await conn.execute("SET LOCAL lock_timeout = '20s'")
                await conn.execute("SET LOCAL synchronous_commit = off")  # nothing here must survive a crash
                if used:
                    await conn.execute(f"TRUNCATE {', '.join(used)} CASCADE")  # tables that refer to them too
                for (sequence,) in await conn.fetch(
                    "SELECT format('%I.%I', schemaname, sequencename) FROM pg_sequences"
                ):
                    await conn.execute(f"ALTER SEQUENCE {sequence} RESTART")
                # The planner's statistics of every relation a user made (oids from 16384 up).
                await conn.execute("DELETE FROM pg_statistic WHERE starelid >= 16384")
            await conn.execute("SELECT pg_stat_reset()")
            return True
        except (asyncpg.PostgresError, OSError, TimeoutError):
            return False
        finally:
            await conn.close()

    def close(self) -> None:
        """Drop every database this pool made."""
        try:
            concurrent.futures.wait(self._resetting.values(), timeout=BOUND * 2)
            for name in list(self._made):
                self._drop(name)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(BOUND)
            self._loop.close()
