"""The time of an exclusive start (`start_run(..., exclusive=True)`, the LangGraph adapter's
start on a thread) on a session that has many ended runs, on SQLite and PostgreSQL.

The ended runs (completed, of one agent and requester) are written straight into the runs
table, with `--others` as many runs on 1,000 other sessions (one in seven running) and as
many parked runs without a session beside them; then each start is timed (the run then
completed, not timed), and a start refused while that run is unended. On PostgreSQL, the
insert's own time on the server too (`EXPLAIN ANALYZE`, rolled back), with the indexes it
read. In the test venv:

    python bench/exclusive_start.py [--ended 10000] [--others 0] [--starts 300]

PostgreSQL at 127.0.0.1:5432 with trust auth (a database of its own, dropped after).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import interlock
from interlock.errors import RunConflict

SERVER = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")

FILL_SQLITE = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count)
INSERT INTO runs (id, agent, session, requester, status, created_at, updated_at)
SELECT printf('old%08d', i), 'chat', 'thread-1', 'bot', 'completed', 1700000000000000 + i, 1700000000000000 + i FROM n
"""
OTHERS_SQLITE = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count)
INSERT INTO runs (id, agent, session, requester, status, created_at, updated_at)
SELECT printf('oth%08d', i), 'chat', 'thread-' || (i % 1000 + 2), 'bot',
       CASE WHEN i % 7 = 0 THEN 'running' ELSE 'completed' END, 1700000000000000 + i, 1700000000000000 + i FROM n
UNION ALL
SELECT printf('prk%08d', i), 'mailer', NULL, 'bot', 'waiting_for_approval', 1700000000000000 + i, 1700000000000000 + i
FROM n
"""
FILL_PG = """
INSERT INTO runs (id, agent, session, requester, status, created_at, updated_at)
SELECT 'old' || lpad(i::text, 8, '0'), 'chat', 'thread-1', 'bot', 'completed',
       now() - interval '30 days' + i * interval '1 second', now() - interval '30 days' + i * interval '1 second'
FROM generate_series(1, $1::int) AS i
"""
OTHERS_PG = """
INSERT INTO runs (id, agent, session, requester, status, created_at, updated_at)
SELECT 'oth' || i, 'chat', 'thread-' || (i % 1000 + 2), 'bot',
       CASE WHEN i % 7 = 0 THEN 'running' ELSE 'completed' END, now(), now()
FROM generate_series(1, $1::int) AS i
UNION ALL
SELECT 'prk' || i, 'mailer', NULL, 'bot', 'waiting_for_approval', now(), now() FROM generate_series(1, $1::int) AS i
"""


def figures(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    return f"median {statistics.median(ordered) * 1e3:.3f} ms, p90 {ordered[int(len(ordered) * 0.9)] * 1e3:.3f} ms"


async def measure(url: str, fill: Callable[[Any], Awaitable[None]], starts: int) -> tuple[list[float], list[float]]:
    async with interlock.connect(url) as broker:
        await fill(broker)
        for _ in range(20):  # warm up
            run = await broker.start_run("chat", session="thread-1", requester="bot", exclusive=True)
            await broker.complete_run(run.id)
        took: list[float] = []
        refused: list[float] = []
        for _ in range(starts):
            t = time.perf_counter()
            run = await broker.start_run("chat", session="thread-1", requester="bot", exclusive=True)
            took.append(time.perf_counter() - t)
            t = time.perf_counter()
            try:
                await broker.start_run("chat", session="thread-1", requester="bot", exclusive=True)
            except RunConflict:
                refused.append(time.perf_counter() - t)
            else:
                raise AssertionError("an exclusive start was not refused")
            await broker.complete_run(run.id)
        if url.startswith("postgresql"):
            await insert_on_the_server(broker.store.dsn)  # type: ignore[attr-defined]
        return took, refused


async def insert_on_the_server(dsn: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    from interlock.store.postgres import Q

    conn = await asyncpg.connect(dsn)
    try:
        explained = await conn.prepare("EXPLAIN (ANALYZE, FORMAT JSON) " + Q["insert_sole_run"])
        times: list[float] = []
        read: set[str] = set()
        for i in range(100):
            undone = conn.transaction()
            await undone.start()
            try:
                args = (f"new{i}", "chat", "thread-1", "bot", "running", None, datetime.now(UTC), "{}", None)
                [plan] = json.loads(await explained.fetchval(*args))
            finally:
                await undone.rollback()
            times.append(plan["Execution Time"] / 1e3)
            text = json.dumps(plan)
            read |= set(re.findall(r'"Index Name": "([a-z_]+)"', text)) | (
                {"Seq Scan"} if "Seq Scan" in text else set()
            )
    finally:
        await conn.close()
    print(f"  postgresql insert_sole_run on the server: {figures(times)} (read: {', '.join(sorted(read))})")


async def admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(f"{SERVER}/postgres")
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ended", type=int, default=10000, help="ended runs on the session")
    parser.add_argument("--others", type=int, default=0, help="runs on other sessions, and parked runs on none")
    parser.add_argument("--starts", type=int, default=300)
    a = parser.parse_args()
    what = f"{a.ended} ended, {a.others} others"

    async def fill_sqlite(broker: Any) -> None:
        db = broker.store.db
        db.execute(FILL_SQLITE, {"count": a.ended})
        if a.others:
            db.execute(OTHERS_SQLITE, {"count": a.others})
        db.commit()

    async def fill_pg(broker: Any) -> None:
        import asyncpg

        conn = await asyncpg.connect(broker.store.dsn)
        try:
            await conn.execute(FILL_PG, a.ended)
            if a.others:
                await conn.execute(OTHERS_PG, a.others)
            await conn.execute("ANALYZE runs")
        finally:
            await conn.close()

    with tempfile.TemporaryDirectory() as where:
        took, refused = await measure(f"sqlite:///{where}/exclusive.db", fill_sqlite, a.starts)
    print(f"sqlite     {what}: start {figures(took)}; refused start {figures(refused)}")
    name = f"bench_exclusive_{os.getpid()}"
    await admin(f"CREATE DATABASE {name}")
    try:
        took, refused = await measure(f"{SERVER}/{name}", fill_pg, a.starts)
        print(f"postgresql {what}: start {figures(took)}; refused start {figures(refused)}")
    finally:
        await admin(f"DROP DATABASE {name} WITH (FORCE)")


if __name__ == "__main__":
    asyncio.run(main())
