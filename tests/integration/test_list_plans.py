"""The query plans of every list the API and the web inbox issue, on SQLite and PostgreSQL:
each reads one index range in the order of the page (so it stops at the page's size) and
neither sorts nor scans the whole table, whatever the number of rows.

The statements are the ones the stores issue (recorded from `Store.list`, `list_runs`,
`list_deliveries`), explained on a small store. SQLite plans the same with or without
rows (it keeps no statistics unless told to); PostgreSQL's planner would rightly scan a
table of a few rows, so there sequential scans and sorts are priced out of reach: a plan
that still sorts or scans is one with no index to read instead.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from interlock.model import RunStatus, Status
from interlock.store import EventQuery, Query, RunQuery, Store
from interlock.store._sql import positional, runs_sql
from interlock.store.sqlite import SqliteStore

pytestmark = pytest.mark.anyio

WEEK_AGO = datetime.now(UTC) - timedelta(days=7)

# (what the list is, the call, the index its plan must read: "sqlite's|postgresql's" where
# they differ; PostgreSQL reads pending requests from a table of their own)
REQUEST_LISTS: list[tuple[str, Query, str]] = [
    (
        "inbox: pending to a person",
        Query(recipient="ann", status=Status.PENDING, limit=50),
        "requests_pending_to|pending_requests_to",
    ),
    ("inbox: answered to a person", Query(recipient="ann", status=Status.ANSWERED, limit=30), "requests_by_recipient"),
    ("inbox: all pending (admin)", Query(status=Status.PENDING, limit=50), "requests_pending|pending_requests_pkey"),
    ("a person's requests", Query(recipient="ann"), "requests_by_recipient"),
    ("an agent's requests", Query(requester="bot"), "requests_by_requester"),
    (
        "an agent's pending requests",
        Query(requester="bot", status=Status.PENDING),
        "requests_pending_from|pending_requests_from",
    ),
    ("an agent's answered requests", Query(requester="bot", status=Status.ANSWERED), "requests_by_requester"),
    ("a session's requests", Query(session="s1"), "requests_by_session"),
    ("a session's pending requests", Query(session="s1", status=Status.PENDING), "requests_by_session"),
    ("a channel's requests", Query(channel="c1"), "requests_by_channel"),
    ("a run's requests, oldest first", Query(run="r1", order="asc"), "requests_by_run"),
    ("history: a person's settled", Query(recipient="ann", settled=True, limit=25), "requests_by_recipient"),
    (
        "history: a person's expired in the last week",
        Query(recipient="ann", settled=True, status=Status.EXPIRED, since=WEEK_AGO, limit=25),
        "requests_by_recipient",
    ),
    ("history: a later page", Query(recipient="ann", settled=True, after="0" * 32, limit=25), "requests_by_recipient"),
    ("every request (admin)", Query(), "PRIMARY KEY"),
    ("the approvals (admin)", Query(kind="approval"), "requests_approvals"),
    ("the approvals of a week (admin)", Query(kind="approval", since=WEEK_AGO), "requests_approvals"),
    ("the questions (admin)", Query(kind="question"), "PRIMARY KEY"),
    ("an agent's requests, by its name (admin)", Query(agent="bot"), "requests_by_agent"),
    (
        "an agent's approvals, by its name (admin)",
        Query(agent="bot", kind="approval"),
        "requests_by_agent|requests_approvals",
    ),
    (
        "a person's approvals",
        Query(recipient="ann", kind="approval"),
        "requests_by_recipient|requests_approvals",  # (PostgreSQL: whichever its statistics say is narrower)
    ),
    (
        "a person's pending approvals",
        Query(recipient="ann", kind="approval", status=Status.PENDING),
        "requests_pending_to|pending_requests_to",
    ),
    (
        "an agent's requests, with the agent's name",
        Query(requester="bot", agent="bot"),
        "requests_by_requester|requests_by_agent",
    ),
    ("every settled request in a week (admin)", Query(settled=True, since=WEEK_AGO, limit=1000), "PRIMARY KEY"),
]

# The dashboard's reads (`Store.outlines`): the same ranges, a few columns of each row
# (PostgreSQL reads the settled requests, everyone's or a person's, from a table of their own).
DASHBOARD_READS: list[tuple[str, Query, str]] = [
    (
        "pending to a person",
        Query(recipient="ann", status=Status.PENDING, limit=1000),
        "requests_pending_to|pending_requests_to",
    ),
    (
        "settled in a week, a person",
        Query(recipient="ann", settled=True, since=WEEK_AGO, limit=1000),
        "requests_by_recipient|settled_requests_to",
    ),
    ("pending (admin)", Query(status=Status.PENDING, limit=1000), "requests_pending|pending_requests_pkey"),
    (
        "settled in a week (admin)",
        Query(settled=True, since=WEEK_AGO, limit=1000),
        "sqlite_autoindex_requests_1|settled_requests_by_id",
    ),
]

RUN_LISTS: list[tuple[str, RunQuery, str]] = [
    ("an agent's runs", RunQuery(agent="bot"), "runs_by_agent"),
    ("runs waiting for input", RunQuery(status=RunStatus.WAITING_FOR_INPUT), "runs_by_status"),
    ("a session's runs", RunQuery(session="s1"), "runs_by_session"),
    ("every run (admin)", RunQuery(), "runs_by_created"),
    ("an agent's next page", RunQuery(agent="bot", after=(datetime(2026, 1, 5, tzinfo=UTC), "r1")), "runs_by_agent"),
    ("every run's next page", RunQuery(after=(datetime(2026, 1, 5, tzinfo=UTC), "r1")), "runs_by_created"),
]

DELIVERY_LISTS: list[tuple[str, dict[str, Any], str]] = [
    ("a person's deliveries", {"recipient": "ann"}, "deliveries_by_recipient"),
    ("a person's dead letters", {"recipient": "ann", "status": "dead"}, "deliveries_by_recipient_status"),
    ("every dead letter (admin)", {"status": "dead"}, "deliveries_by_status"),
    ("a request's deliveries", {"request_id": "r1"}, "deliveries_by_request"),
]

DEAD_LETTER_LISTS: list[tuple[str, dict[str, Any], str]] = [
    ("a person's dead letters, newest first", {"recipient": "ann"}, "deliveries_dead_to"),
    ("every dead letter, newest first (admin)", {}, "deliveries_dead"),
    (
        "a person's older dead letters",
        {"recipient": "ann", "before": (datetime(2026, 1, 5, tzinfo=UTC), "dlv_1")},
        "deliveries_dead_to",
    ),
    ("everyone's older dead letters", {"before": (datetime(2026, 1, 5, tzinfo=UTC), "dlv_1")}, "deliveries_dead"),
]


@pytest.fixture(params=["sqlite", "postgresql"], ids=["sqlite-store", "postgresql-store"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Which store, and where: a file of its own, or a database cloned from the template."""
    if request.param == "sqlite":
        yield "sqlite", str(tmp_path / "plans.db")
        return
    databases: Callable[[], AbstractContextManager[str]] = request.getfixturevalue("pg_databases")
    with databases() as url:
        yield "postgresql", url


@pytest.fixture
async def store(where: tuple[str, str]) -> AsyncIterator[Store]:
    made: Store
    if where[0] == "sqlite":
        made = SqliteStore(where[1])
    else:
        from interlock.store.postgres import PostgresStore

        made = PostgresStore(where[1])
    await made.open()
    try:
        yield made
    finally:
        await made.aclose()


class Recorder:
    """Records the statements a store builds (`_rows_of`) instead of running them."""

    def __init__(self, store: Any) -> None:
        self.statements: list[tuple[str, dict[str, Any]]] = []
        self.store = store
        store._rows_of = self._record

    async def _record(self, sql: str, params: dict[str, Any], **options: Any) -> list[Any]:
        self.statements.append((sql, params))
        return []

    def last(self) -> tuple[str, dict[str, Any]]:
        assert len(self.statements) == 1, self.statements
        return self.statements.pop()


async def plan_of(store: Any, sql: str, params: dict[str, Any], *, generic: bool = False) -> str:
    """The plan of one statement as text, one line a step. `generic`: on PostgreSQL, the
    plan made for any values, as a prepared statement gets from its sixth run."""
    if isinstance(store, SqliteStore):
        rows = store.db.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
        return "\n".join(row[3] for row in rows)
    import asyncpg  # type: ignore[import-untyped]

    text, args = positional(sql, params)
    conn = await asyncpg.connect(store.dsn)
    try:
        await conn.execute("SET enable_seqscan = off; SET enable_sort = off")
        if generic:
            await conn.execute("SET plan_cache_mode = force_generic_plan")
            await conn.execute(f"PREPARE listed AS {text}")
            values = ", ".join(f"'{a.isoformat() if isinstance(a, datetime) else a}'" for a in args)
            rows = await conn.fetch(f"EXPLAIN EXECUTE listed({values})")
        else:
            rows = await conn.fetch("EXPLAIN " + text, *args)
    finally:
        await conn.close()
    return "\n".join(row[0] for row in rows)


def reads_index_in_order(plan: str, index: str) -> None:
    """The plan reads `index` (or the primary key) and neither sorts nor scans a table."""
    assert "TEMP B-TREE" not in plan, plan  # SQLite: a sort
    assert "Sort" not in plan, plan  # PostgreSQL: a sort (disabled: chosen only with no index to read)
    assert "Seq Scan" not in plan, plan
    for line in plan.splitlines():
        if line.startswith("SCAN ") and " USING " not in line:  # SQLite: a full scan of a table
            pytest.fail(plan)
    if index == "PRIMARY KEY":
        assert any(name in plan for name in ("sqlite_autoindex", "_pkey", "INTEGER PRIMARY KEY")), plan
        return
    words = set(plan.replace("\n", " ").split())
    assert words & set(index.split("|")), plan


@pytest.mark.parametrize(("what", "query", "index"), REQUEST_LISTS, ids=[w for w, _, _ in REQUEST_LISTS])
async def test_a_request_list_reads_its_page_from_one_index_in_order(
    store: Store, what: str, query: Query, index: str
) -> None:
    recorder = Recorder(store)
    await store.list(query)
    reads_index_in_order(await plan_of(store, *recorder.last()), index)


async def settled_among_many(store: Store) -> None:
    """On PostgreSQL, `settled_requests` as at scale: a person's rows a few among
    everyone's, ANALYZEd (empty, either of its indexes reads a person's as cheaply)."""
    if isinstance(store, SqliteStore):
        return
    import asyncpg

    conn = await asyncpg.connect(store.dsn)  # type: ignore[attr-defined]
    try:
        await conn.execute(
            "INSERT INTO settled_requests (recipient, id, status, agent, created_at, settled_at) "
            "SELECT 'person-' || (n % 50), lpad(to_hex(n), 32, '0'), 'answered', 'bot', "
            "now() - n * interval '1 minute', now() FROM generate_series(1, 5000) AS n"
        )
        await conn.execute("ANALYZE settled_requests")
    finally:
        await conn.close()


@pytest.mark.parametrize(("what", "query", "index"), DASHBOARD_READS, ids=[w for w, _, _ in DASHBOARD_READS])
async def test_the_dashboard_reads_the_same_index_ranges_as_the_lists(
    store: Store, what: str, query: Query, index: str
) -> None:
    await settled_among_many(store)
    recorder = Recorder(store)
    await store.outlines(query, datetime.now(UTC))
    sql, params = recorder.last()
    assert " doc" not in sql, sql  # no request document is read
    plan = await plan_of(store, sql, params)
    reads_index_in_order(plan, index)
    if isinstance(store, SqliteStore) and "autoindex" not in index:  # a person's, or a pending one's
        assert "COVERING INDEX" in plan, plan  # from the index entries alone, no row visited
    elif "settled_requests" in index and not isinstance(store, SqliteStore):
        assert "Index Only Scan Backward using settled_requests_" in plan, plan  # no row visited
    elif "pending" in index:
        assert "JOIN" not in sql and "Nested Loop" not in plan, plan  # the pending rows alone
        if "pending_requests_to" in index:  # a person's: from the index entries alone
            assert "Index Only Scan Backward using pending_requests_to" in plan, plan


@pytest.mark.parametrize("person", [True, False], ids=["a person's", "admin"])
async def test_the_dashboard_counts_in_one_statement_over_those_ranges(store: Store, person: bool) -> None:
    (pending, pending_index), (settled, settled_index) = (
        (query, index) for what, query, index in DASHBOARD_READS if ("a person" in what) == person
    )
    await settled_among_many(store)
    recorder = Recorder(store)
    await store.figures(pending, settled, datetime.now(UTC), {"ops"})
    sql, params = recorder.last()
    assert " doc" not in sql, sql
    plan = await plan_of(store, sql, params)
    # The groups are sorted (a few hundred rows at most); the tables are only read by index.
    assert "Seq Scan" not in plan, plan
    for line in plan.splitlines():
        words = line.replace("SCAN ", "SCAN  ").split()
        if line.startswith("SCAN ") and words[1] in ("requests", "pending_requests") and " USING " not in line:
            pytest.fail(plan)
    names = set(plan.replace("\n", " ").split())
    for index in (pending_index, settled_index):
        if index == "PRIMARY KEY":
            assert any(name in plan for name in ("sqlite_autoindex", "_pkey", "INTEGER PRIMARY KEY")), plan
        else:
            assert names & set(index.split("|")), plan


@pytest.mark.parametrize(("what", "query", "index"), RUN_LISTS, ids=[w for w, _, _ in RUN_LISTS])
async def test_a_run_list_reads_its_page_from_one_index_in_order(
    store: Store, what: str, query: RunQuery, index: str
) -> None:
    recorder = Recorder(store)
    await store.list_runs(query)
    reads_index_in_order(await plan_of(store, *recorder.last()), index)


@pytest.mark.parametrize("teams", [(), ("ops", "sre")], ids=["a person's", "a team member's"])
async def test_a_person_s_runs_are_read_from_indexes_alone(store: Store, teams: tuple[str, ...]) -> None:
    """The runs a person may see: those they started, those of the agents they own, those
    with requests to them or their teams. The agents they own are read first, from an
    index of owners; then what each of them and the person started is an index range cut
    at the page (an owner of a busy agent reads a page of its runs, not all of them), and
    the runs asking them come from an index: no table is scanned."""
    recorder = Recorder(store)
    await store.list_runs(RunQuery(involving="ann", teams=teams))
    (owners, owners_params), _ = recorder.statements
    assert "principals_by_owner" in await plan_of(store, owners, owners_params)
    sql, params = runs_sql(RunQuery(involving="ann", teams=teams), store._stamp, ["bot-1", "bot-2"])
    plan = await plan_of(store, sql, params)
    assert "Seq Scan" not in plan, plan
    for line in plan.splitlines():  # SQLite: a full scan of a table (not of a range read, started_N)
        if line.startswith("SCAN ") and " USING " not in line and not line.startswith("SCAN started_"):
            pytest.fail(plan)
    words = set(plan.replace("\n", " ").split())
    assert "requests_runs_to" in words, plan
    assert words & {"runs_by_requester", "runs_by_created"}, plan
    assert sql.count("LIMIT :limit") == 4, sql  # ann's, bot-1's and bot-2's ranges, and the page


@pytest.mark.parametrize(("what", "filters", "index"), DELIVERY_LISTS, ids=[w for w, _, _ in DELIVERY_LISTS])
async def test_a_delivery_list_reads_its_page_from_one_index_in_order(
    store: Store, what: str, filters: dict[str, Any], index: str
) -> None:
    recorder = Recorder(store)
    await store.list_deliveries(**filters)
    reads_index_in_order(await plan_of(store, *recorder.last()), index)


async def test_a_person_s_events_are_two_index_ranges_cut_at_the_page(store: Store) -> None:
    recorder = Recorder(store)
    await store.find_events(EventQuery(involving="ann", limit=500))
    plan = await plan_of(store, *recorder.last())
    if isinstance(store, SqliteStore):
        assert "events_by_recipient" in plan, plan
    else:  # the events to them with no data and those with data have an index each
        assert "events_to_plain" in plan and "events_to_with_data" in plan, plan
    assert "events_by_requester" in plan, plan
    assert "Seq Scan" not in plan, plan


async def test_a_page_of_events_reads_again_only_the_requests_not_held_settled(where: tuple[str, str]) -> None:
    import interlock
    from interlock import Text
    from interlock.store.postgres import PostgresStore

    kind, place = where
    async with interlock.connect(f"sqlite:///{place}" if kind == "sqlite" else place) as writer:
        made = [await writer.create(Text(f"Q{i}?"), to="ann") for i in range(3)]
        for request in made:
            await writer.resolve(request.id, "yes")
        waiting = await writer.create(Text("Still?"), to="ann")
        # Another process's store reads the pages: what it holds, it holds from its reads.
        reader: Any = SqliteStore(place) if kind == "sqlite" else PostgresStore(place)
        await reader.open()
        try:
            read: list[set[str]] = []  # the requests each statement reads by id
            rows, rows_of = reader._rows, reader._rows_of

            def noted(ids: Any) -> None:
                read.append(set(json.loads(ids) if isinstance(ids, str) else ids))

            async def counted(name: str, *args: Any) -> list[Any]:
                if name == "get_requests":
                    noted(args[0])
                return await rows(name, *args)

            async def counted_of(sql: str, params: dict[str, Any], **options: Any) -> list[Any]:
                if "ids" in params:  # (the requests a page of events carries)
                    noted(params["ids"])
                return await rows_of(sql, params, **options)

            reader._rows, reader._rows_of = counted, counted_of
            page = await reader.find_events(EventQuery(involving="ann"))
            ids = [r.id for r in made]
            assert [(e.type, e.request_id) for e in page] == [
                *(("created", i) for i in ids),
                *(("answered", i) for i in ids),
                ("created", waiting.id),
            ]
            assert read == [{*ids, waiting.id}]
            assert page[0].request is not None and page[0].request.status is Status.PENDING  # as it was created
            assert page[3].request is not None and page[3].request.answer == "yes"

            read.clear()
            assert await reader.find_events(EventQuery(involving="ann")) == page
            assert read == [{waiting.id}]  # the settled ones are held: only the pending one is read again

            await writer.resolve(waiting.id, "now")  # answered through the other process
            read.clear()
            latest = await reader.find_events(EventQuery(involving="ann"))
            assert read == [{waiting.id}]
            assert [(e.type, e.request_id) for e in latest[-2:]] == [("created", waiting.id), ("answered", waiting.id)]
            created, answered = (e.request for e in latest[-2:])
            assert created is not None and created.status is Status.PENDING and created.response is None
            assert answered is not None and answered.answer == "now"
            read.clear()
            await reader.find_events(EventQuery(involving="ann"))
            assert read == []  # every request of the page held, settled: no request read at all
        finally:
            await reader.aclose()


async def test_the_requests_of_a_page_of_events_are_read_by_their_ids(store: Store) -> None:
    ids = ["0" * 32, "1" * 32]
    if isinstance(store, SqliteStore):
        from interlock.store.sqlite import Q as sqlite_queries

        plan = await plan_of(store, sqlite_queries["get_requests"], {"ids": json.dumps(ids)})
        assert "SEARCH requests USING INDEX sqlite_autoindex_requests_1 (id=?)" in plan, plan
        return
    import asyncpg

    from interlock.store.postgres import Q as postgres_queries

    conn = await asyncpg.connect(store.dsn)  # type: ignore[attr-defined]
    try:
        await conn.execute("SET enable_seqscan = off")
        plan = "\n".join(row[0] for row in await conn.fetch("EXPLAIN " + postgres_queries["get_requests"], ids))
    finally:
        await conn.close()
    assert "requests_pkey" in plan and "Seq Scan" not in plan, plan


async def test_a_claim_of_deliveries_reads_no_delivery_waiting_in_a_full_channel(store: Store) -> None:
    """However many deliveries wait in a channel whose share of the sends is full (a burst
    to a receiver that hangs), a claim reads none of them: it walks the channels that have
    pending deliveries along an index, counts what its loop holds of each from the leased
    ones, and reads a channel's due ones from the front of its range, as many as it may
    take (`claim_deliveries`' per_channel). Neither sorts a channel's range nor scans. When
    the loop looks for the next delivery due, it reads one index entry."""
    now = datetime.now(UTC)
    if isinstance(store, SqliteStore):
        from interlock.store.sqlite import Q as sqlite_queries

        due = await plan_of(store, sqlite_queries["next_delivery_due"], {})
        assert due == "SEARCH deliveries USING INDEX deliveries_due", due  # (min: its first entry)
        at = store._stamp(now)
        channels = {"owner": "loop-1", "now": at, "limit": 16, "per_channel": 4}
        plan = await plan_of(store, sqlite_queries["claimable_channels"], channels)
        of = {"channel": "pager", "now": at, "limit": 4}
        plan += "\n" + await plan_of(store, sqlite_queries["due_deliveries_of"], of)
        for line in plan.splitlines():
            if line.startswith("SCAN deliveries") or "deliveries_by_status" in line:  # all, or every pending one
                pytest.fail(plan)
        assert "TEMP B-TREE" not in plan, plan
        assert "deliveries_pending_by_channel (status=? AND channel>?)" in plan, plan  # the walk
        assert "deliveries_pending_by_channel (status=? AND channel=? AND due_at<?)" in plan, plan
        assert "deliveries_leased (lease_owner=? AND channel=?)" in plan, plan
        return
    import asyncpg

    from interlock import Text
    from interlock.model import build_request
    from interlock.outbox import Delivery, delivery_id
    from interlock.store.postgres import Q as postgres_queries

    # PostgreSQL plans by its statistics: a backlog of 2,000 to one channel, ANALYZEd
    request, _ = await store.insert(build_request(Text("Page?"), to="alice", requester="bot"))
    [notice] = await store.claim_notices("loop-1", now, 30)
    backlog = [
        Delivery(
            delivery_id(notice.event_id, "request", f"r{i}", "pager", None),
            *(notice.id, request.id, "request", "created", f"r{i}", "pager", None, now, now),
        )
        for i in range(2000)
    ]
    assert await store.route_notice(notice, backlog, "loop-1", now) == 2000
    conn = await asyncpg.connect(store.dsn)  # type: ignore[attr-defined]
    try:
        await conn.execute("ANALYZE deliveries")
        await conn.execute("SET enable_seqscan = off; SET plan_cache_mode = force_generic_plan")
        await conn.execute(
            "PREPARE claim(text, timestamptz, timestamptz, bigint, bigint) AS " + postgres_queries["claim_deliveries"]
        )
        rows = await conn.fetch("EXPLAIN EXECUTE claim('loop-1', now(), now() + interval '90 s', 16, 4)")
        due = "\n".join(row[0] for row in await conn.fetch("EXPLAIN " + postgres_queries["next_outbox_due"]))
    finally:
        await conn.close()
    plan = "\n".join(row[0] for row in rows)
    assert "Seq Scan" not in plan and "deliveries_by_status" not in plan, plan
    assert "Index Only Scan using deliveries_pending_by_channel" in plan, plan  # the walk
    assert "Index Scan using deliveries_pending_by_channel" in plan, plan  # a channel's range
    assert "Index Scan using deliveries_leased" in plan, plan
    assert "Index Only Scan using deliveries_due" in due and "Seq Scan" not in due, due
    sorts = [line.strip() for line in plan.splitlines() if "Sort Key" in line]
    assert sorts == ["Sort Key: due.due_at, due.id"], plan  # only what was picked: a share of each channel


@pytest.mark.parametrize(
    "query",
    [
        Query(settled=True, since=WEEK_AGO - timedelta(days=30), until=WEEK_AGO - timedelta(days=23), limit=25),
        Query(until=WEEK_AGO, limit=50),
        Query(since=WEEK_AGO, order="asc", limit=50),
    ],
    ids=["a week a month back", "before a week ago", "since a week ago, oldest first"],
)
async def test_everyone_s_requests_in_a_time_window_are_the_ids_of_that_window(store: Store, query: Query) -> None:
    # An admin's window read along the primary key starts and ends where the window's ids
    # do, not at the newest or oldest request (at a million requests, 350-550 ms -> 1 ms).
    recorder = Recorder(store)
    await store.list(query)
    plan = await plan_of(store, *recorder.last(), generic=True)
    reads_index_in_order(plan, "PRIMARY KEY")
    bounds = [b for b, t in (("id>", query.since), ("id<", query.until)) if t is not None]
    if isinstance(store, SqliteStore):
        searched = plan.split("(", 1)[1] if "(" in plan else ""
        assert plan.startswith("SEARCH requests USING INDEX sqlite_autoindex_requests_1"), plan
        assert all(bound in searched for bound in bounds), plan
    else:
        condition = next((line for line in plan.splitlines() if "Index Cond" in line), "")
        assert all(bound.replace("id", "id ") in condition for bound in bounds), plan


async def made_with_words(path: Path) -> None:
    """A store with requests whose texts hold the words the plans below search for."""
    import interlock
    from interlock import Text

    async with interlock.connect(f"sqlite:///{path}") as broker:
        await broker.create(Text("Deploy the build?"), to="ann")


@pytest.mark.parametrize(
    "query",
    [
        Query(settled=True, text="deploy", limit=2),
        Query(settled=True, text="deploy", recipient="ann", teams=("ops",), limit=2),
        Query(status=Status.PENDING, text="deploy", recipient="ann", limit=2),
        Query(text="deploy build", kind="question", since=WEEK_AGO, limit=2),
        Query(settled=True, text="deploy", after="f" * 32, limit=2),
        Query(settled=True, text="deploy", after="0" * 32, order="asc", limit=2),
    ],
    ids=["everyone's", "a member's", "a person's pending", "filtered", "a later page", "oldest first"],
)
async def test_a_search_on_sqlite_reads_the_text_index_first_in_order_and_stops_at_the_page(
    tmp_path: Path, query: Query
) -> None:
    # However common its words, a search reads its matches from the full-text index in the
    # order of the page, checks each one's row, and stops once the page is full: no sort of
    # every match, nor a read of every request.
    await made_with_words(tmp_path / "search.db")
    store = SqliteStore(str(tmp_path / "search.db"))
    await store.open()
    try:
        recorder = Recorder(store)
        await store.list(query)
        plan = await plan_of(store, *recorder.last())
    finally:
        await store.aclose()
    first, *rest = plan.splitlines()
    assert first.startswith("SCAN t VIRTUAL TABLE INDEX"), plan  # the matches, from the index, in order
    assert "SEARCH r USING INTEGER PRIMARY KEY (rowid=?)" in rest, plan  # each match's own row
    assert "TEMP B-TREE" not in plan, plan
    assert not [line for line in rest if line.startswith("SCAN ")], plan


async def test_a_search_on_sqlite_narrowed_by_a_session_reads_along_the_session(tmp_path: Path) -> None:
    await made_with_words(tmp_path / "search.db")
    store = SqliteStore(str(tmp_path / "search.db"))
    await store.open()
    try:
        recorder = Recorder(store)
        await store.list(Query(session="s1", text="deploy"))
        plan = await plan_of(store, *recorder.last())
    finally:
        await store.aclose()
    first, *_ = plan.splitlines()
    assert first.startswith("SEARCH requests USING INDEX requests_by_session"), plan  # its requests, in order
    assert "TEMP B-TREE" not in plan, plan


@pytest.mark.parametrize(("what", "filters", "index"), DEAD_LETTER_LISTS, ids=[w for w, _, _ in DEAD_LETTER_LISTS])
async def test_a_dead_letter_list_reads_its_page_from_one_index_in_order(
    store: Store, what: str, filters: dict[str, Any], index: str
) -> None:
    recorder = Recorder(store)
    await store.list_dead_letters(**filters)
    reads_index_in_order(await plan_of(store, *recorder.last()), index)


async def a_long_thread(store: Store, ended: int) -> None:
    """A session with `ended` ended runs of one agent and requester (a chat thread of as
    many turns), beside other sessions' runs, some unended, and unended runs without a
    session (parked ones of a worker); statistics gathered, on both stores."""
    if isinstance(store, SqliteStore):
        db = store.db
        db.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :ended) "
            "INSERT INTO runs (id, agent, session, requester, status, created_at, updated_at) "
            "SELECT 'turn-' || i, 'chat', 'thread-1', 'bot', 'completed', i, i FROM n "
            "UNION ALL SELECT 'other-' || i, 'chat', 'thread-' || (i % 100 + 2), 'bot', "
            "CASE WHEN i % 7 = 0 THEN 'running' ELSE 'completed' END, i, i FROM n "
            "UNION ALL SELECT 'parked-' || i, 'mailer', NULL, 'bot', 'waiting_for_approval', i, i FROM n",
            {"ended": ended},
        )
        db.execute("ANALYZE")
        db.commit()
        return
    import asyncpg

    conn = await asyncpg.connect(store.dsn)  # type: ignore[attr-defined]
    try:
        await conn.execute(
            "INSERT INTO runs (id, agent, session, requester, status, created_at, updated_at) "
            "SELECT 'turn-' || i, 'chat', 'thread-1', 'bot', 'completed', t, t "
            "FROM generate_series(1, $1::int) AS i, LATERAL (SELECT now() - i * interval '1 minute' AS t) AS at "
            "UNION ALL SELECT 'other-' || i, 'chat', 'thread-' || (i % 100 + 2), 'bot', "
            "CASE WHEN i % 7 = 0 THEN 'running' ELSE 'completed' END, now(), now() "
            "FROM generate_series(1, $1::int) AS i "
            "UNION ALL SELECT 'parked-' || i, 'mailer', NULL, 'bot', 'waiting_for_approval', now(), now() "
            "FROM generate_series(1, $1::int) AS i",
            ended,
        )
        await conn.execute("ANALYZE runs")
    finally:
        await conn.close()


@pytest.mark.parametrize("requester", ["bot", None], ids=["an agent's", "no requester"])
async def test_an_exclusive_start_reads_one_index_entry_whatever_the_thread_s_history(
    store: Store, requester: str | None
) -> None:
    # An exclusive start looks for an unended run of its agent and requester on its session
    # (`insert_sole_run`, and `unended_run_on_session` for the run it met): one probe of the
    # index of unended runs with a session, not a read along the session's 5,000 ended runs
    # (a chat thread's turns, each one more to read on the next start) nor of the table.
    await a_long_thread(store, 5000)
    if isinstance(store, SqliteStore):
        from interlock.store.sqlite import Q as sqlite_queries

        start = datetime.now(UTC)
        row = {
            "id": "turn-new",
            "agent": "chat",
            "session": "thread-1",
            "requester": requester,
            "status": "running",
            "max_duration": None,
            "created_at": store._stamp(start),
            "updated_at": store._stamp(start),
            "expires_at": None,
        }
        for name in ("insert_sole_run", "unended_run_on_session"):
            plan = await plan_of(store, sqlite_queries[name], row)
            assert "SEARCH runs USING INDEX runs_unended_by_session (session=? AND agent=? AND <expr>=?)" in plan, plan
            assert "runs_by_session" not in plan and "TEMP B-TREE" not in plan, plan
            assert not [line for line in plan.splitlines() if line.startswith("SCAN runs")], plan
        return
    import asyncpg

    from interlock.store.postgres import Q as postgres_queries

    now = datetime.now(UTC)
    statements = [
        ("insert_sole_run", ("turn-new", "chat", "thread-1", requester, "running", None, now, "{}", None)),
        ("unended_run_on_session", ("chat", "thread-1", requester)),
    ]
    conn = await asyncpg.connect(store.dsn)  # type: ignore[attr-defined]
    try:
        for mode in ("force_custom_plan", "force_generic_plan"):  # planned for its values, and for any
            await conn.execute(f"SET plan_cache_mode = {mode}")
            for name, args in statements:
                undone = conn.transaction()  # the insert is explained as it runs: then undone
                await undone.start()
                try:
                    explained = await conn.prepare("EXPLAIN (ANALYZE, COSTS OFF) " + postgres_queries[name])
                    plan = "\n".join(row[0] for row in await explained.fetch(*args))
                finally:
                    await undone.rollback()
                assert "using runs_unended_by_session on runs" in plan, (mode, plan)
                assert "runs_by_session" not in plan and "Seq Scan" not in plan and "Sort" not in plan, (mode, plan)
                assert "Rows Removed by Filter" not in plan, (mode, plan)  # the index's entries are the matches
    finally:
        await conn.close()
