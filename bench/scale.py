"""List queries at scale: fill a store with N requests (a million by default), then time
every list query the API and the web inbox issue, on SQLite and PostgreSQL.

The fill is done once and kept (a SQLite file and a PostgreSQL database named after N),
and reused by later runs; opening a kept one with a newer checkout applies its new
migrations first, so the same data measures before and after a schema change. `--refill`
starts again.

What is filled, the same every time: N requests over the last 60 days, to 100 people from
50 agents (each person about 10,000 requests, each agent about 20,000); 10% still
pending, the rest answered (85%), rejected (7%), expired (5%) or cancelled (3%); half in
sessions of 20, 30% in one of 20 channels, 5% in runs of two requests; 30% with an
expiry. Each title holds a topic word drawn from 1,000 with a Zipf law (the word
searched as common is in 8.4% of the titles). Every request has its `created` event, every settled
one its settlement's event (and the outbox row either writes); one outbox row in three
has a delivery (1% of them dead letters). Settlements are applied with the same
conditional UPDATE the stores use, so PostgreSQL's statistics count them.

Each query runs `--reps` times (a tenth as many, at least 20, when its warm-up calls take
over 50 ms each) through the store's own methods (`Store.list`,
`list_runs`, `list_deliveries`, `find_events`), rotating over ten people or agents (the
busiest among them), after a warm-up of one call for each of them (the slowest of those
first calls is printed apart: a subject's rows not yet in the store's cache or SQLite's);
the time includes decoding the rows into requests.
It prints p50 and p99 (ms) of the wall time, the p99 of this process's CPU time per call
(on SQLite, which runs in the process, that is the work itself, whatever else the machine
runs; on PostgreSQL only the client's share), the p99 of the statement alone (its rows
not made into requests), the rows each call returned, database bytes per request,
and on PostgreSQL the share of settlements that were HOT updates, both over the fill and
over `--settle` requests created and answered through the store afterwards.

    python bench/scale.py [--rows 1000000] [--reps 300] [--only sqlite postgresql]
                          [--sqlite FILE] [--postgres postgresql://postgres@127.0.0.1:5432/interlock_scale]
                          [--settle 2000] [--refill] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import environment, table

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]

from interlock.dashboard import DASHBOARD_ROWS, layout  # noqa: E402
from interlock.model import RunStatus, Status, Text  # noqa: E402
from interlock.store import EventQuery, Query, RunQuery  # noqa: E402
from interlock.store._sql import encode_json, figures_sql  # noqa: E402

PEOPLE = 100
SUBJECTS = 10  # the people, agents, sessions, ... a query rotates over
AGENTS = 50
CHANNELS = 20
TOPICS = 1000
PENDING_LIMIT = 50  # the web inbox's page sizes (server/web.py, server/pages.py)
HISTORY_LIMIT = 30
HISTORY_PAGE = 25
SETTLED = (("answered", 0.85), ("rejected", 0.07), ("expired", 0.05), ("cancelled", 0.03))
WORDS = [
    f"{a}{b}"
    for a in ("deploy", "refund", "invoice", "rotate", "merge", "delete", "publish", "approve", "restart", "migrate")
    for b in ("", "s", "ed", "ing", "er", "al", "ion", "ure", "ant", "ive")
]


def topic(rank: int) -> str:
    """The topic word of a rank (0 the most common): a real word for the first hundred."""
    return WORDS[rank] if rank < len(WORDS) else f"topic{rank}"


ZIPF = [1 / (k + 1) ** 1.1 for k in range(TOPICS)]


def zipf_ranks(rng: random.Random, n: int) -> list[int]:
    return rng.choices(range(TOPICS), weights=ZIPF, k=n)


def share(rank: int) -> str:
    """The share of titles a search for the topic word of `rank` finds. A search is by
    prefix: a bare stem (ranks 0, 10, 20, ...) finds its nine other words too."""
    word = topic(rank)
    return f"{sum(z for k, z in enumerate(ZIPF) if topic(k).startswith(word)) / sum(ZIPF):.1%}"


def us(value: datetime) -> int:
    return int(value.timestamp() * 1_000_000)


class Fill:
    """The rows of N requests, made once from a fixed random state (the same for both stores)."""

    def __init__(self, rows: int, now: datetime) -> None:
        rng = random.Random(9)
        self.rows = rows
        self.now = now
        start = now - timedelta(days=60)
        step = timedelta(days=60) / rows
        ranks = zipf_ranks(rng, rows)
        ask = {"type": "text", "id": "text", "prompt": "Go ahead?", "required": True, "multiline": False}
        ask["max_length"] = None
        self.requests: list[tuple[Any, ...]] = []
        self.settlements: list[tuple[str, str, datetime, str]] = []
        statuses = [s for s, _ in SETTLED]
        weights = [w for _, w in SETTLED]
        for i in range(rows):
            created = start + step * i
            request_id = f"{int(created.timestamp() * 1000):012x}{rng.getrandbits(79):020x}"
            person = f"person-{rng.randrange(PEOPLE)}"
            agent = f"agent-{rng.randrange(AGENTS)}"
            session = f"session-{i // 20}" if i % 2 == 0 else None
            channel = f"channel-{rng.randrange(CHANNELS)}" if rng.random() < 0.3 else None
            run = f"run-{i // 2:08d}" if (i // 2) % 20 == 0 else None
            expires = created + timedelta(days=1) if rng.random() < 0.3 else None
            title = f"{topic(ranks[i]).capitalize()} request {i} for {person}"
            origin = {
                k: v for k, v in (("session", session), ("channel", channel), ("agent", agent), ("run", run)) if v
            }
            doc = {
                "id": request_id,
                "kind": "question",
                "status": "pending",
                "asks": [ask],
                "title": title,
                "details": f"Asked by {agent} about {topic(ranks[i])}.",
                "context": None,
                "to": person,
                "requester": agent,
                "origin": origin,
                "created_at": created.isoformat(),
                "expires_at": expires.isoformat() if expires else None,
                "settled_at": None,
                "idempotency_key": None,
                "response": None,
                "detached": False,
            }
            self.requests.append(
                (request_id, person, agent, session, channel, agent, run, created, expires, encode_json(doc))
            )
            if rng.random() >= 0.10:
                status = rng.choices(statuses, weights)[0]
                at = min(created + timedelta(seconds=rng.randrange(30, 7200)), now)
                answers = {"text": f"yes, {topic(rng.randrange(TOPICS))}"} if status == "answered" else {}
                response = {
                    "answers": answers,
                    "by": person if status in ("answered", "rejected") else None,
                    "via": "web",
                    "reason": "not now" if status == "rejected" else "",
                    "cause": None,
                    "at": at.isoformat(),
                }
                self.settlements.append((request_id, status, at, encode_json(response)))


# -- filling --------------------------------------------------------------------------------


def fill_sqlite(path: str, fill: Fill) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = OFF")
    db.execute("PRAGMA cache_size = -400000")
    db.execute("BEGIN")
    db.executemany(
        "INSERT INTO requests (id, kind, status, recipient, requester, session, channel, agent, run, "
        "created_at, expires_at, doc) VALUES (?, 'question', 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(r[0], r[1], r[2], r[3], r[4], r[5], r[6], us(r[7]), us(r[8]) if r[8] else None, r[9]) for r in fill.requests],
    )
    db.execute(
        "INSERT INTO events (type, request_id, at, recipient, requester, session, run) "
        "SELECT 'created', id, created_at, recipient, requester, session, run FROM requests ORDER BY rowid"
    )
    db.executemany(
        "UPDATE requests SET status = ?, settled_at = ?, response = ? WHERE id = ? AND status = 'pending'",
        [(s, us(at), resp, rid) for rid, s, at, resp in fill.settlements],
    )
    db.execute(
        "INSERT INTO events (type, request_id, at, recipient, requester, session, run) "
        "SELECT status, id, settled_at, recipient, requester, session, run FROM requests "
        "WHERE status <> 'pending' ORDER BY settled_at"
    )
    db.execute(_RUNS_SQL.format(now=us(fill.now), pending="'waiting_for_input'", done="'completed'"))
    # The outbox is derived from the event log after the fact (by the delivery loop): derive
    # it here with the store's own statement, so the deliveries below have notices to be of.
    from interlock.store.sqlite import Q

    (last,) = db.execute("SELECT ifnull(max(id), 0) FROM events").fetchone()
    db.execute(Q["derive_notices"], {"after": 0, "upto": last})
    db.execute(Q["set_derived"], {"name": "outbox", "upto": last})
    db.execute(_DELIVERIES_SQL)
    db.execute("UPDATE outbox SET routed_at = at")
    db.execute("COMMIT")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


_RUNS_SQL = (
    "INSERT INTO runs (id, agent, session, requester, status, created_at, updated_at) "
    "SELECT run, min(agent), min(session), min(requester), "
    "CASE WHEN max(status = 'pending') THEN {pending} ELSE {done} END, min(created_at), max(created_at) "
    "FROM requests WHERE run IS NOT NULL GROUP BY run"
)
_DELIVERIES_SQL = (
    "INSERT INTO deliveries (id, notice, request_id, kind, event, recipient, channel, address, status, attempts, "
    "due_at, created_at, delivered_at) "
    "SELECT 'delivery-' || id, id, request_id, 'notice', type, recipient, 'webhook', 'https://hooks.example/x', "
    "CASE WHEN id % 100 = 0 THEN 'dead' ELSE 'delivered' END, 1, at, at, at "
    "FROM outbox WHERE id % 3 = 0 AND recipient IS NOT NULL"
)


async def fill_postgres(conn: Any, fill: Fill) -> None:
    await conn.execute("SET synchronous_commit = off")
    await conn.copy_records_to_table(
        "requests",
        columns=(
            "id",
            "kind",
            "status",
            "recipient",
            "requester",
            "session",
            "channel",
            "agent",
            "run",
            "created_at",
            "expires_at",
            "doc",
        ),
        records=[(r[0], "question", "pending", *r[1:]) for r in fill.requests],
    )
    await conn.execute(
        "INSERT INTO events (type, request_id, at, recipient, requester, session, run) "
        "SELECT 'created', id, created_at, recipient, requester, session, run FROM requests ORDER BY id"
    )
    batch = 20_000
    for i in range(0, len(fill.settlements), batch):
        part = fill.settlements[i : i + batch]
        await conn.execute(
            "UPDATE requests r SET status = s.status, settled_at = s.at, response = s.response "
            "FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::json[]) AS s (id, status, at, response) "
            "WHERE r.id = s.id AND r.status = 'pending'",
            [p[0] for p in part],
            [p[1] for p in part],
            [p[2] for p in part],
            [p[3] for p in part],
        )
    await conn.execute(
        "INSERT INTO events (type, request_id, at, recipient, requester, session, run) "
        "SELECT status, id, settled_at, recipient, requester, session, run FROM requests "
        "WHERE status <> 'pending' ORDER BY settled_at"
    )
    await conn.execute(
        _RUNS_SQL.replace("max(status = 'pending')", "bool_or(status = 'pending')").format(
            now="now()", pending="'waiting_for_input'", done="'completed'"
        )
    )
    await conn.execute(_DELIVERIES_SQL.replace("id % 100", "id::bigint % 100"))
    await conn.execute("UPDATE outbox SET routed_at = at")
    await conn.execute("VACUUM ANALYZE")


# -- measuring ------------------------------------------------------------------------------


def percentile(xs: Sequence[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p * (len(s) - 1)))]


async def _items(listed: Awaitable[Any]) -> Sequence[Any]:
    """The requests of a store's page (`Store.list` returns them with whether it was cut)."""
    return (await listed).items


def queries(store: Any, now: datetime) -> list[tuple[str, Callable[[int], Awaitable[Sequence[Any]]]]]:
    """Each list query the API and the inbox issue: (what, one call with the i-th subject)."""
    people = [f"person-{k}" for k in range(0, PEOPLE, PEOPLE // SUBJECTS)]
    agents = [f"agent-{k}" for k in range(0, AGENTS, AGENTS // SUBJECTS)]
    sessions = [f"session-{k * 2000}" for k in range(SUBJECTS)]
    channels = [f"channel-{k}" for k in range(SUBJECTS)]
    runs = [f"run-{k * 2000:08d}" for k in range(SUBJECTS)]
    week = now - timedelta(days=7)
    month_back = (now - timedelta(days=35), now - timedelta(days=28))

    def statement(kw: dict[str, Any]) -> Callable[[int], Awaitable[tuple[str, dict[str, Any]]]]:
        """The statement a call issues, as the store builds it (a search's plan included)."""

        async def built(i: int) -> tuple[str, dict[str, Any]]:
            query = Query(**{k: (v[i % len(v)] if isinstance(v, list) else v) for k, v in kw.items()})
            sql = await store._list_sql(query)
            assert sql is not None, query  # every search here has matches
            return sql

        return built

    def q(**kw: Any) -> Callable[[int], Awaitable[Sequence[Any]]]:
        def call(i: int) -> Awaitable[Sequence[Any]]:
            fields = {k: (v[i % len(v)] if isinstance(v, list) else v) for k, v in kw.items()}
            return _items(store.list(Query(**fields)))

        call.statement = statement(kw)  # type: ignore[attr-defined]
        return call

    def dashboard(who: list[str] | None) -> Callable[[int], Awaitable[Sequence[Any]]]:
        """The whole page's figures, as `Broker.dashboard` counts them: one statement of
        counts (`Store.figures`) over the newest pending and settled requests, laid out."""

        def reads(i: int) -> tuple[Query, Query]:
            mine = {} if who is None else {"recipient": who[i % len(who)]}
            return (
                Query(**mine, status=Status.PENDING, limit=DASHBOARD_ROWS),
                Query(**mine, settled=True, since=week, limit=DASHBOARD_ROWS),
            )

        async def call(i: int) -> Sequence[Any]:
            figures = await store.figures(*reads(i), now, set())
            layout(figures, teams=set())
            return [None] * (figures.pending_rows + figures.settled_rows)  # the rows counted

        async def built(i: int) -> tuple[str, dict[str, Any]]:
            return figures_sql(*reads(i), now, set(), store.dialect, store._stamp)

        call.statement = built  # type: ignore[attr-defined]
        return call

    def runs_of(**kw: Any) -> Callable[[int], Awaitable[Sequence[Any]]]:
        def call(i: int) -> Awaitable[Sequence[Any]]:
            fields = {k: (v[i % len(v)] if isinstance(v, list) else v) for k, v in kw.items()}
            return store.list_runs(RunQuery(**fields))

        return call

    def deliveries(**kw: Any) -> Callable[[int], Awaitable[Sequence[Any]]]:
        def call(i: int) -> Awaitable[Sequence[Any]]:
            fields = {k: (v[i % len(v)] if isinstance(v, list) else v) for k, v in kw.items()}
            return store.list_deliveries(**fields)

        return call

    def events(**kw: Any) -> Callable[[int], Awaitable[Sequence[Any]]]:
        def call(i: int) -> Awaitable[Sequence[Any]]:
            fields = {k: (v[i % len(v)] if isinstance(v, list) else v) for k, v in kw.items()}
            return store.find_events(EventQuery(**fields))

        return call

    pending = Status.PENDING
    out: list[tuple[str, Callable[[int], Awaitable[Sequence[Any]]]]] = [
        ("inbox: pending to a person (50)", q(recipient=people, status=pending, limit=PENDING_LIMIT)),
        ("inbox: all pending, admin (50)", q(status=pending, limit=PENDING_LIMIT)),
    ]
    for status in (Status.ANSWERED, Status.REJECTED, Status.EXPIRED, Status.CANCELLED):
        out.append((f"inbox: {status.value} to a person (30)", q(recipient=people, status=status, limit=HISTORY_LIMIT)))
    out += [
        ("API: list(recipient=...) (50)", q(recipient=people)),
        ("API: list(requester=...) (50)", q(requester=agents)),
        ("API: list(requester=..., status=pending)", q(requester=agents, status=pending)),
        ("API: list(status=answered), admin", q(status=Status.ANSWERED)),
        ("API: list(), admin, oldest first", q(order="asc")),
        ("API: list(session=...)", q(session=sessions)),
        ("API: list(channel=...)", q(channel=channels)),
        ("API: list(run=...)", q(run=runs)),
        ("API: list(kind=approval), admin (none held)", q(kind="approval")),
        ("API: list(agent=...), admin", q(agent=agents)),
        ("API: list(recipient=..., kind=approval) (none held)", q(recipient=people, kind="approval")),
        ("history: settled, a person (25)", q(recipient=people, settled=True, limit=HISTORY_PAGE)),
        ("history: status=expired", q(recipient=people, settled=True, status=Status.EXPIRED, limit=HISTORY_PAGE)),
        ("history: last 7 days", q(recipient=people, settled=True, since=week, limit=HISTORY_PAGE)),
        (
            "history: a week a month back",
            q(recipient=people, settled=True, since=month_back[0], until=month_back[1], limit=HISTORY_PAGE),
        ),
        ("API: list(since=..., until=...), a week a month back, admin", q(since=month_back[0], until=month_back[1])),
        *(
            (
                f"history: search, {what} ({share(rank)} of titles)",
                q(recipient=people, settled=True, text=topic(rank), limit=25),
            )
            for what, rank in (
                ("a common word", 1),
                ("a word", 41),
                ("a prefix of ten words", 40),
                ("a rare word", 900),
            )
        ),
        (f"history: search, admin ({share(1)} of titles)", q(settled=True, text=topic(1), limit=25)),
        ("dashboard: the page's figures, a person (up to 2,000 requests counted)", dashboard(people)),
        ("dashboard: the page's figures, admin (2,000 requests counted)", dashboard(None)),
        ("runs: involving a person", runs_of(involving=people)),
        ("runs: of an agent", runs_of(agent=agents)),
        ("runs: waiting for input", runs_of(status=RunStatus.WAITING_FOR_INPUT)),
        ("runs: all, admin", runs_of()),
        ("deliveries: a person's", deliveries(recipient=people)),
        ("deliveries: a person's dead letters", deliveries(recipient=people, status="dead", limit=500)),
        ("deliveries: all dead letters, admin", deliveries(status="dead", limit=500)),
        ("events: involving a person (500)", events(involving=people, limit=500)),
        ("events: a session's", events(session=sessions)),
    ]
    return out


async def measure(store: Any, now: datetime, reps: int, only: Sequence[str] | None) -> list[dict[str, Any]]:
    gc.collect()  # what a fill left behind is not collected in the middle of a measured call
    results = []
    for name, call in queries(store, now):
        if only and not any(o in name for o in only):
            continue
        # Warm-up: one call for each of the ten subjects, so that every call measured is one
        # a running process makes again; the slowest of them (a subject's first call, its
        # rows not yet in the store's cache nor SQLite's) is reported apart.
        first = []
        for i in range(SUBJECTS):
            t0 = time.perf_counter()
            await call(i)
            first.append(time.perf_counter() - t0)
        slow = sum(first) / len(first) > 0.05  # a slow query gets fewer calls: p99 is then the max
        count = max(20, reps // 10) if slow else reps
        times, cpu, rows = [], [], 0
        for i in range(count):
            c0, t0 = time.process_time(), time.perf_counter()
            found = await call(i)
            times.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
            rows += len(found)
        db_times = []
        statement = getattr(call, "statement", None)
        if statement is not None:  # the statement alone, its rows not made into requests
            for i in range(count):
                sql, params = await statement(i)
                t0 = time.perf_counter()
                await store._rows_of(sql, params)
                db_times.append((time.perf_counter() - t0) * 1000)
        results.append(
            {
                "query": name,
                "p50_ms": percentile(times, 0.5),
                "p99_ms": percentile(times, 0.99),
                "max_ms": max(times),
                "first_max_ms": max(first) * 1000,
                "cpu_p99_ms": percentile(cpu, 0.99),
                "db_p99_ms": percentile(db_times, 0.99) if db_times else None,
                "rows": rows / count,
                "calls": count,
            }
        )
        row = results[-1]
        db = f"  statement alone p99 {row['db_p99_ms']:7.2f}" if db_times else ""
        print(
            f"  {name:50} p50 {row['p50_ms']:7.2f}  p99 {row['p99_ms']:7.2f}  cpu p99 {row['cpu_p99_ms']:7.2f} ms{db}"
            f"  first calls max {row['first_max_ms']:7.2f}",
            flush=True,
        )
    return results


async def settle_through_store(url: str, count: int) -> None:
    """Create and answer `count` requests through a broker on the store, each title with a
    topic word drawn as the fill's are (the newest requests of a kept store, which a later
    run's searches read first, hold the words in the same shares)."""
    import interlock

    ranks = zipf_ranks(random.Random(count), count)
    async with interlock.connect(url) as broker:
        for i in range(count):
            title = f"{topic(ranks[i]).capitalize()}: go ahead?"
            r = await broker.create(Text(title), to=f"person-{i % PEOPLE}", requester=f"agent-{i % AGENTS}")
            await broker.resolve(r.id, "yes", by=f"person-{i % PEOPLE}")


# -- the two stores -------------------------------------------------------------------------


def sqlite_file(args: argparse.Namespace) -> tuple[str, bool]:
    """The kept file's path, and whether it is to be filled (new, or `--refill`)."""
    path = args.sqlite or os.path.join(tempfile.gettempdir(), f"interlock-scale-{args.rows}.db")
    if args.refill:
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)
    return path, not os.path.exists(path)


async def fill_new_sqlite(path: str, fill: Fill) -> None:
    """A new file at `path`: interlock's schema, made by its own store, then `fill`'s rows
    (their search index not made: the store's first search or close makes it)."""
    from interlock.store.sqlite import SqliteStore

    store = SqliteStore(path)
    await store.open()
    await store.aclose()
    fill_sqlite(path, fill)


async def run_sqlite(args: argparse.Namespace, fill: Callable[[], Fill], now: datetime) -> dict[str, Any]:
    from interlock.store.sqlite import SqliteStore

    path, fresh = sqlite_file(args)
    if fresh:
        t0 = time.perf_counter()
        await fill_new_sqlite(path, fill())
        print(f"sqlite: filled {args.rows:,} requests in {time.perf_counter() - t0:.0f} s", flush=True)
    t0 = time.perf_counter()
    store = SqliteStore(path)
    await store.open()  # applies newer migrations to a kept file
    print(f"sqlite: {path} ({'new' if fresh else 'kept'}), opened in {time.perf_counter() - t0:.1f} s", flush=True)
    count = store.db.execute("SELECT count(*) FROM requests").fetchone()[0]
    size = store.db.execute("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()").fetchone()[0]
    results = await measure(store, now, args.reps, args.queries)
    await store.aclose()
    return {"store": "sqlite", "requests": count, "bytes_per_request": size / count, "queries": results}


async def run_postgres(args: argparse.Namespace, fill: Callable[[], Fill], now: datetime) -> dict[str, Any]:
    import asyncpg  # type: ignore[import-untyped]

    from interlock.store.postgres import PostgresStore

    url = args.postgres or f"postgresql://postgres@127.0.0.1:5432/interlock_scale_{args.rows}"
    server, name = url.rsplit("/", 1)
    admin = await asyncpg.connect(server + "/postgres")
    if args.refill:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
    fresh = not await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
    if fresh:
        await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    t0 = time.perf_counter()
    store = PostgresStore(url)
    await store.open()
    print(f"postgresql: {name} ({'new' if fresh else 'kept'}), opened in {time.perf_counter() - t0:.1f} s", flush=True)
    conn = await asyncpg.connect(url)
    if fresh:
        t0 = time.perf_counter()
        await fill_postgres(conn, fill())
        print(f"postgresql: filled {args.rows:,} requests in {time.perf_counter() - t0:.0f} s", flush=True)
        # The search text, as the store derives it after the writes, and its statistics,
        # as autovacuum would gather them (a search is planned by how common its words are).
        t0 = time.perf_counter()
        await store._catch_up()
        await conn.execute("ANALYZE request_texts")
        print(f"postgresql: derived the search text in {time.perf_counter() - t0:.0f} s", flush=True)
    else:
        await conn.execute("ANALYZE")
    stats = "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'requests'"
    upd, hot = await conn.fetchrow(stats)
    count = await conn.fetchval("SELECT count(*) FROM requests")
    size = await conn.fetchval(
        "SELECT sum(pg_total_relation_size(relid))::bigint FROM pg_stat_user_tables "
        "WHERE relname IN ('requests', 'events', 'outbox', 'deliveries', 'runs', 'run_waits', "
        "'pending_requests', 'request_texts')"
    )
    results = await measure(store, now, args.reps, args.queries)
    settled_hot = None
    if args.settle:
        before = await conn.fetchrow(stats)
        await settle_through_store(url, args.settle)
        deadline = time.monotonic() + 10  # statistics reach the view within a second or so
        after = await conn.fetchrow(stats)
        while after[0] - before[0] < args.settle and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            after = await conn.fetchrow(stats)
        settled_hot = (after[1] - before[1]) / max(after[0] - before[0], 1)
    await conn.close()
    await store.aclose()
    return {
        "store": "postgresql",
        "requests": count,
        "bytes_per_request": size / count,
        "hot_fill": hot / upd if upd else None,
        "hot_settle": settled_hot,
        "queries": results,
    }


def save(path: str, results: list[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--only", nargs="*", choices=("sqlite", "postgresql"), default=None)
    parser.add_argument("--queries", nargs="*", default=None, help="only the queries whose name holds one of these")
    parser.add_argument("--sqlite", help="the kept SQLite file (default: interlock-scale-N.db in the temp folder)")
    parser.add_argument("--postgres", help="the kept database's URL (default: interlock_scale_N on 127.0.0.1)")
    parser.add_argument("--settle", type=int, default=2000, help="requests created and answered for the HOT ratio")
    parser.add_argument("--refill", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    print(environment(["asyncpg"]))
    now = datetime.now(UTC).replace(microsecond=0)
    kinds = args.only or ["sqlite", "postgresql"]
    out = []

    def fill() -> Fill:
        # The rows, only if a store needs them: the same for both stores (a fixed random
        # state), and made again for the second rather than kept, so that no store is
        # measured with a million rows' worth of objects in the heap for the collector.
        return Fill(args.rows, now)

    for kind in kinds:
        run = run_sqlite if kind == "sqlite" else run_postgres
        out.append(await run(args, fill, now))
    by_query: dict[str, dict[str, Any]] = {}
    for result in out:
        for row in result["queries"]:
            by_query.setdefault(row["query"], {})[result["store"]] = row
    headers = ["query", *[f"{r['store']} p50 / p99 / cpu p99 (statement p99) ms" for r in out], "rows"]
    rows = []

    def cell(row: dict[str, Any]) -> str:
        alone = f" ({row['db_p99_ms']:.2f})" if row.get("db_p99_ms") is not None else ""
        return f"{row['p50_ms']:.2f} / {row['p99_ms']:.2f} / {row['cpu_p99_ms']:.2f}{alone}"

    for name, per in by_query.items():
        cells = [cell(per[r["store"]]) for r in out if r["store"] in per]
        rows.append([name, *cells, f"{next(iter(per.values()))['rows']:.0f}"])
    print()
    print(table(headers, rows))
    print()
    for result in out:
        line = (
            f"{result['store']}: {result['requests']:,} requests, {result['bytes_per_request']:,.0f} bytes per request"
        )
        if result["store"] == "postgresql":
            fill_hot = "n/a" if result["hot_fill"] is None else f"{result['hot_fill']:.0%}"
            settle_hot = "n/a" if result["hot_settle"] is None else f"{result['hot_settle']:.0%}"
            line += (
                f"; HOT updates: {fill_hot} of the fill's settlements, {settle_hot} of {args.settle} through the store"
            )
        worst = max(result["queries"], key=lambda r: r["p99_ms"]) if result["queries"] else None
        if worst:
            line += f"; slowest p99: {worst['query']} {worst['p99_ms']:.1f} ms"
        print(line)
    if args.json:
        save(args.json, out)


if __name__ == "__main__":
    asyncio.run(main())
