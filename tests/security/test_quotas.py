"""Quotas and the cost of cheap requests: per-principal rate limits on creates and updates,
a cap on open event streams, a page of events that reads an index range rather than the
whole log, and a web inbox that pages its pending requests."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import aconnect_sse
from limits_support import BOUND, TEXT, api, issue_tokens

import interlock
from interlock import Broker, Text

# The quota and event-query names are imported inside the tests that use them, so that
# each test fails on its own on a server without them.

pytestmark = pytest.mark.anyio


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'quotas.db'}"


# -- rates -------------------------------------------------------------------------------


async def test_creating_past_the_rate_limit_answers_429_with_retry_after_and_spares_others(
    db: str, serve_apart: Callable[..., AbstractAsyncContextManager[str]]
) -> None:
    from interlock.server.quotas import Quota

    tokens = await issue_tokens(db)
    async with serve_apart(db, auth=True, rate_limit=Quota(rate=0.5, burst=3)) as base:
        async with api(base, tokens["alice-bot"]) as bot, api(base, tokens["bob-bot"]) as other:
            for _ in range(3):
                assert (await bot.post("/requests", json=TEXT)).status_code == 201
            refused = await bot.post("/requests", json=TEXT)
            assert refused.status_code == 429
            assert refused.headers["content-type"] == "application/problem+json"
            assert refused.json()["code"] == "rate_limited"
            assert 1 <= int(refused.headers["Retry-After"]) <= 2
            assert (await other.post("/requests", json=TEXT)).status_code == 201  # a quota of its own
            listed = await bot.get("/requests", params={"requester": "alice-bot"})
            assert len(listed.json()["items"]) == 3  # the refused create stored nothing

            update = {"message": "Halfway there"}
            for _ in range(3):
                assert (await bot.post("/inform", json=update)).status_code == 201  # updates count apart
            refused = await bot.post("/inform", json=update)
            assert refused.status_code == 429 and refused.json()["code"] == "rate_limited"
            assert int(refused.headers["Retry-After"]) >= 1

        # Runs and the messages sent to them count too: a looping agent fills no disk with them.
        async with api(base, tokens["bob-bot"]) as runner:
            started = [(await runner.post("/runs", json={"agent": "bob-bot"})).status_code for _ in range(4)]
            assert started == [201, 201, 429, 429]  # (bob-bot made one request above: 2 tokens left)
            sent = [
                (await runner.post("/runs/nope/messages", json={"text": "also this"})).status_code for _ in range(4)
            ]
            assert sent == [404, 404, 404, 429]

        # The Python client raises it as interlock's own error, saying when to try again.
        async with interlock.connect(base, token=tokens["alice-bot"]) as agent:
            with pytest.raises(interlock.RateLimited, match="too many requests created") as caught:
                await agent.create(Text("Name?"), to="alice")
            assert caught.value.retry_after is not None and 1 <= caught.value.retry_after <= 2


async def test_the_rate_limit_is_on_by_default_with_auth_and_can_be_turned_off(
    db: str, serve_apart: Callable[..., AbstractAsyncContextManager[str]]
) -> None:
    from interlock.server.app import create_app
    from interlock.server.quotas import DEFAULT_QUOTA

    assert create_app(db, auth=True).state.interlock.quotas.updates.quota == DEFAULT_QUOTA
    assert create_app(db, auth=False).state.interlock.quotas.updates is None
    tokens = await issue_tokens(db)
    async with serve_apart(db, auth=True) as base:
        async with api(base, tokens["alice-bot"]) as bot:
            # The bucket refills while the calls go out, so call until it runs dry: a
            # server that answers more than 20 calls a second gets there, bounded here.
            codes: list[int] = []
            while 429 not in codes and len(codes) < 5_000:
                codes.append((await bot.post("/inform", json={"message": "tick"})).status_code)
        assert codes[-1] == 429 and set(codes[:-1]) == {201} and len(codes) > DEFAULT_QUOTA.burst
    async with serve_apart(db, auth=True, rate_limit=None) as base:
        async with api(base, tokens["alice-bot"]) as bot:
            codes = [(await bot.post("/inform", json={"message": "tick"})).status_code for _ in range(220)]
        assert set(codes) == {201}


# -- open streams --------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def api_stream(client: httpx.AsyncClient) -> AsyncIterator[int]:
    """Open the API's event stream; yield its status (reading the first frame when 200)."""
    async with aconnect_sse(client, "GET", "/events/stream") as source:
        events = source.aiter_sse()  # kept until the end: dropping it closes the stream
        if source.response.status_code == 200:
            with anyio.fail_after(BOUND):
                await anext(events)  # the server has taken the slot by now
        yield source.response.status_code
        await events.aclose()


async def test_a_principal_cannot_hold_more_event_streams_open_than_the_cap(
    db: str, serve_apart: Callable[..., AbstractAsyncContextManager[str]]
) -> None:
    tokens = await issue_tokens(db)
    async with (
        serve_apart(db, auth=True, max_streams=2) as base,
        api(base, tokens["alice"]) as alice,
        api(base, tokens["bob"]) as bob,
    ):
        async with api_stream(alice) as one, api_stream(alice) as two:
            assert (one, two) == (200, 200)
            refused = await alice.get("/events/stream")
            assert refused.status_code == 429 and refused.json()["code"] == "rate_limited"
            assert int(refused.headers["Retry-After"]) >= 1
            async with api_stream(bob) as theirs:
                assert theirs == 200  # a cap of their own
            async with signed_in(base, tokens["alice"]) as web:
                assert (await web.get("/inbox/stream")).status_code == 429  # the web inbox counts too
        with anyio.fail_after(BOUND):  # closed streams give their slots back
            while True:
                async with api_stream(alice) as again:
                    if again == 200:
                        break
                await anyio.sleep(0.05)


@contextlib.asynccontextmanager
async def signed_in(base: str, token: str) -> AsyncIterator[httpx.AsyncClient]:
    """A browser signed in to the web inbox with `token`."""
    async with httpx.AsyncClient(base_url=base, timeout=BOUND) as client:
        page = await client.get("/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        signed = await client.post("/signin", data={"token": token, "csrf": csrf[1]})
        assert signed.status_code == 303
        yield client


# -- a page of events ---------------------------------------------------------------------


def plan(db_path: Path, query: Any) -> str:
    from interlock.store._sql import find_events_sql

    sql, params = find_events_sql(query, indexed_by=True)
    with contextlib.closing(sqlite3.connect(db_path)) as conn:
        return "\n".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))


async def fill(broker: Broker, count: int, **origin: Any) -> None:
    for i in range(count):
        await broker.create(Text(f"Q{i}?"), to="carol", requester="carol-bot", **origin)


async def test_a_page_of_a_principals_events_reads_index_ranges_not_the_log(tmp_path: Path) -> None:
    from interlock.store import EventQuery

    path = tmp_path / "plan.db"
    async with interlock.connect(f"sqlite:///{path}") as broker:
        mine = await broker.create(Text("Mine?"), to="alice", requester="alice-bot", session="s1")
        await fill(broker, 300)
        page = await broker.find_events(limit=1, involving="alice")
        assert [e.request_id for e in page] == [mine.id]
        assert [e.request_id for e in await broker.find_events(after=page[0].id, involving="alice")] == []
        assert len(await broker.find_events(limit=5, session="s1", involving="carol")) == 0

    for query in (
        EventQuery(limit=1, involving="alice"),
        EventQuery(limit=1, until=10, involving="alice"),
        EventQuery(limit=1, involving="alice", session="s1"),
        EventQuery(limit=1, involving="alice", run="r1"),
        EventQuery(limit=1, involving="alice", request=mine.id),
        EventQuery(limit=1),
    ):
        shown = plan(path, query)
        assert "SCAN e\n" not in shown + "\n" and "SCAN events" not in shown, shown
        assert re.search(r"SEARCH (e|events) USING", shown), shown


async def test_a_page_of_a_principals_events_reads_index_ranges_on_postgresql(
    pg_databases: Callable[[], AbstractContextManager[str]],
) -> None:
    from interlock.store import EventQuery
    from interlock.store._sql import find_events_sql, positional

    with pg_databases() as url:
        async with interlock.connect(url) as broker:
            mine = await broker.create(Text("Mine?"), to="alice", requester="alice-bot")
            pool = broker.store.pool  # type: ignore[attr-defined]
            # Many events for someone else, written straight into the log.
            await pool.execute(
                "INSERT INTO events (type, at, data, recipient, requester, session) "
                "SELECT 'informed', now(), '{}'::json, 'carol', 'carol-bot', 's' || (n % 50) "
                "FROM generate_series(1, 20000) AS n"
            )
            await pool.execute("ANALYZE events")
            page = await broker.find_events(limit=1, involving="alice")
            assert [e.request_id for e in page] == [mine.id]
            for query in (EventQuery(limit=1, involving="alice"), EventQuery(limit=1, involving="carol", session="s7")):
                sql, params = positional(*find_events_sql(query, rows_to_them=True))
                explained = json.loads(await pool.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", *params))
                nodes = list(_plan_nodes(explained[0]["Plan"]))
                assert not [n for n in nodes if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "events"]
                read = sum(n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0) for n in nodes)
                assert read < 50, nodes  # about a page, not 20,000 rows
            # The events to them that carry no data, from the index's entries alone: no row
            # looked up by id.
            await pool.execute("VACUUM events")  # (as autovacuum soon does: the pages all-visible)
            for _ in range(2):
                await broker.resolve((await broker.create(Text("Again?"), to="alice")).id, "yes")
            sql, params = positional(*find_events_sql(EventQuery(limit=4, involving="alice"), rows_to_them=True))
            explained = json.loads(await pool.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", *params))
            nodes = list(_plan_nodes(explained[0]["Plan"]))
            shown = [(n["Node Type"], n.get("Index Name"), n.get("Actual Loops")) for n in nodes]
            to_alice = [n for n in nodes if n.get("Index Name") == "events_to_plain"]
            assert [n["Node Type"] for n in to_alice] == ["Index Only Scan"], shown
            assert sum(n.get("Actual Rows", 0) for n in to_alice) == 4, shown
            assert not [n for n in nodes if n.get("Index Name") == "events_pkey" and n.get("Actual Loops")], shown


class CountingReads:
    """Counts the work SQLite does on this broker's connection, in thousands of virtual
    machine steps: a measure of rows read that does not depend on time."""

    def __init__(self, broker: Broker) -> None:
        self.thousands = 0
        broker.store.db.set_progress_handler(self._step, 1000)  # type: ignore[attr-defined]

    def _step(self) -> int:
        self.thousands += 1
        return 0  # go on


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _plan_nodes(child)


async def test_the_events_route_pages_what_the_caller_may_see_from_index_ranges(
    db: str, serve_apart: Callable[..., AbstractAsyncContextManager[str]]
) -> None:
    tokens = await issue_tokens(db)
    async with interlock.connect(db) as broker:
        await fill(broker, 300)  # other people's events, before and between
        await broker.create(Text("For bob?"), to="bob", requester="bob-bot")
        first = await broker.create(Text("For alice?"), to="alice", requester="alice-bot", session="s1")
        await broker.create(Text("For bob again?"), to="bob", requester="bob-bot", session="s1")
        await broker.inform("for alice", to="alice", session="s1")
        await broker.inform("for bob", to="bob")
        await broker.start_run("alice-bot", run_id="r1")
        second = await broker.create(Text("For alice too?"), to="alice", requester="alice-bot", run="r1")
        await fill(broker, 300)
        work = CountingReads(broker)
        page = await broker.find_events(limit=1, involving="alice")
        assert [e.request_id for e in page] == [first.id]
        assert work.thousands <= 2  # a scan of the 600 other events takes tens of thousands of steps
    async with serve_apart(db, auth=True) as base, api(base, tokens["alice"]) as alice:
        one = (await alice.get("/events", params={"limit": 1})).json()
        assert [e["request_id"] for e in one["events"]] == [first.id]
        assert one["last_event_id"] == one["events"][0]["id"]
        rest = (await alice.get("/events", params={"after": one["last_event_id"]})).json()
        assert [(e["type"], e["request_id"]) for e in rest["events"]] == [
            ("informed", None),
            ("created", second.id),
        ]
        in_session = (await alice.get("/events", params={"session": "s1"})).json()["events"]
        assert [e["type"] for e in in_session] == ["created", "informed"]
        in_run = (await alice.get("/events", params={"run": "r1"})).json()["events"]
        assert [e["request_id"] for e in in_run] == [second.id]
        of_request = (await alice.get("/events", params={"request": first.id})).json()["events"]
        assert [e["request_id"] for e in of_request] == [first.id]


@pytest.mark.parametrize(
    ("client", "stream"), [(api, "/events/stream"), (signed_in, "/inbox/stream")], ids=["api", "web inbox"]
)
async def test_a_stream_replayed_from_the_start_reads_only_what_the_caller_may_see(
    db: str,
    serve_apart: Callable[..., AbstractAsyncContextManager[str]],
    client: Callable[[str, str], AbstractAsyncContextManager[httpx.AsyncClient]],
    stream: str,
) -> None:
    # The API's stream and the web inbox's alike (the latter read the whole log once).
    tokens = await issue_tokens(db)
    async with interlock.connect(db) as broker:
        await fill(broker, 2000)
        mine = await broker.create(Text("For alice?"), to="alice", requester="alice-bot")
    server_broker = interlock.connect(db)
    async with serve_apart(None, broker=server_broker, auth=True) as base, client(base, tokens["alice"]) as alice:
        work = CountingReads(server_broker)
        headers = {"Last-Event-ID": "0"}
        async with aconnect_sse(alice, "GET", stream, headers=headers) as source:
            events = source.aiter_sse()
            with anyio.fail_after(BOUND):
                first = await anext(e async for e in events if e.id)
            assert json.loads(first.data)["request_id"] == mine.id
            await events.aclose()
        assert work.thousands <= 5, work.thousands  # reading the 2,000 other events takes tens of thousands
    await server_broker.aclose()


class ParsedRequests:
    """Counts the requests an SQL store parses from their stored JSON: the work of reading
    a request that SQLite's steps leave out (a document of a megabyte is read in as few
    steps as a small one, and parsed in tens of milliseconds)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import interlock.store._sql as sql

        self.count = 0
        parse = sql.request_from_dict

        def counted(data: Any) -> Any:
            self.count += 1
            return parse(data)

        monkeypatch.setattr(sql, "request_from_dict", counted)


async def test_the_claims_route_leaves_out_the_requests_the_caller_may_not_read_without_reading_them(
    db: str, serve_apart: Callable[..., AbstractAsyncContextManager[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`GET /claims` took up to 200 request ids and read each claimed request whole, to
    decide whether the caller may read it: another team's claimed requests, with a long
    context, cost the server a parse each (tens of milliseconds at the limits) to show
    nothing. Whom a request is to and from decides it, as the store indexes them."""
    tokens = await issue_tokens(db)
    context = {"rows": [[i] for i in range(2000)]}
    async with interlock.connect(db) as broker:
        await broker.store.save_team("ops", ["alice"])
        theirs = [
            (await broker.create(Text(f"Q{i}?"), to="ops", requester="ops-bot", context=context)).id for i in range(5)
        ]
        bobs = (await broker.create(Text("Bob's?"), to="ops", requester="bob")).id
        for request_id in (*theirs, bobs):
            await broker.claim(request_id, by="alice")
    server_broker = interlock.connect(db)
    async with (
        serve_apart(None, broker=server_broker, auth=True) as base,
        api(base, tokens["bob"]) as bob,
        api(base, tokens["alice"]) as alice,
    ):
        parsed = ParsedRequests(monkeypatch)
        shown = await bob.get("/claims", params={"request": [*theirs, bobs]})
        assert shown.status_code == 200, shown.text
        assert [(c["request_id"], c["by"]) for c in shown.json()["items"]] == [(bobs, "alice")]
        assert parsed.count == 0  # none of the requests read whole, not even bob's own
        everyone = (await alice.get("/claims", params={"request": [*theirs, bobs]})).json()["items"]
        assert sorted(c["request_id"] for c in everyone) == sorted([*theirs, bobs])
        assert parsed.count == 0
    await server_broker.aclose()


# -- the web inbox ------------------------------------------------------------------------


async def test_the_web_inbox_reads_the_updates_it_shows_from_the_person_s_own_events(
    db: str, serve_apart: Callable[..., AbstractAsyncContextManager[str]]
) -> None:
    tokens = await issue_tokens(db)
    async with interlock.connect(db) as broker:
        await broker.inform("Halfway there", to="alice", agent="alice-bot")
        await fill(broker, 450)  # other people's requests, after it: among the log's last 500 events
    server_broker = interlock.connect(db)
    async with serve_apart(None, broker=server_broker, auth=True) as base, signed_in(base, tokens["alice"]) as browser:
        await browser.get("/")  # (the session and the templates, read once)
        work = CountingReads(server_broker)
        page = await browser.get("/")
        assert page.status_code == 200
        assert "Halfway there" in page.text
        assert work.thousands <= 2, work.thousands  # reading the 450 other events takes about ten thousand
    await server_broker.aclose()


async def test_the_web_inbox_pages_its_pending_requests_with_links_that_need_no_javascript(
    db: str, serve_apart: Callable[..., AbstractAsyncContextManager[str]]
) -> None:
    async with interlock.connect(db) as broker:
        made = [(await broker.create(Text(f"Question {i}?"), to="alice")).id for i in range(120)]
    newest_first = made[::-1]
    async with serve_apart(db, auth=False) as base, httpx.AsyncClient(base_url=base, timeout=BOUND) as browser:
        shown: list[str] = []
        url = "/"
        for _ in range(10):
            page = await browser.get(url)
            assert page.status_code == 200
            cards = re.findall(r'<li[^>]*data-id="([0-9a-f]+)"[^>]*data-status="pending"', page.text)
            if not cards:
                cards = re.findall(r'<li[^>]*data-status="pending"[^>]*data-id="([0-9a-f]+)"', page.text)
            assert 0 < len(cards) <= 50
            shown += cards
            older = re.search(r'href="([^"]*\?older=[\w-]+)"', page.text)
            if older is None:
                break
            url = older[1].replace("&amp;", "&")
        assert shown == newest_first


async def test_the_web_inbox_refuses_another_s_update_without_reading_the_request_it_names(
    db: str, serve_apart: Callable[..., AbstractAsyncContextManager[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`/inbox/updates/{id}` read the event of any id with the request it carries, whole,
    before it refused one that is not an update to the person: the id of another's
    request's `created` event made the server parse that request (tens of milliseconds
    at the limits) for a 404. It reads the event from the person's own index ranges."""
    tokens = await issue_tokens(db)
    context = {"rows": [[i] for i in range(2000)]}
    async with interlock.connect(db) as broker:
        made = await broker.create(Text("Carol's?"), to="carol", requester="carol-bot", context=context)
        [created] = await broker.find_events(request=made.id)
        update = await broker.inform("Halfway there", to="alice", agent="alice-bot")
    server_broker = interlock.connect(db)
    async with serve_apart(None, broker=server_broker, auth=True) as base, signed_in(base, tokens["alice"]) as browser:
        parsed = ParsedRequests(monkeypatch)
        refused = await browser.get(f"/inbox/updates/{created.id}")
        assert refused.status_code == 404
        assert parsed.count == 0
        shown = await browser.get(f"/inbox/updates/{update.id}")
        assert shown.status_code == 200 and "Halfway there" in shown.text
    await server_broker.aclose()
