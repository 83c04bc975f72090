"""A page of a list is bounded by the size of its requests, not only by their number: the
stores stop reading and parsing where the requests' stored JSON passes `PAGE_BYTES`, and
the page ends there with a cursor to the rest (the security review's "large list pages
block the server": a thousand requests of 1 MiB each, within every per-field limit,
listed at once held the server for about a minute)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import aconnect_sse

from asgi_support import InProcessServer, serve_in_process
from interlock import Broker, Confirm, Event, Request, Text
from interlock.model import request_to_dict, response_to_dict
from interlock.store import PAGE_BYTES, PageBudget, stored_size

pytestmark = pytest.mark.anyio

_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def size_of(request: Request) -> int:
    """What a request counts on a page, as the stores count it."""
    size = stored_size(_JSON(request_to_dict(request.as_created())))
    return size + (stored_size(_JSON(response_to_dict(request.response))) if request.response else 0)


async def make_big(broker: Broker, i: int, items: int = 10_000, part: object = None) -> Request:
    """An approval of a few MiB as a page counts it, every field within its limit: tool
    arguments and context of many small nested arrays (what costs most to parse)."""
    return await broker.create(
        Confirm(f"Run step {i}?"),
        kind="approval",
        to="ann",
        tool_name="shell",
        arguments={"batch": [part if part is not None else [[i]]] * items},
        context={"rows": [[0]] * 4000},
    )


def pages_by_size(requests: list[Request], limit: int) -> list[list[str]]:
    """The pages a list of `requests` (in its order) makes: `limit` at most, cut by size."""
    pages: list[list[str]] = []
    rest = list(requests)
    while rest:
        budget, page = PageBudget(), []
        for request in rest[:limit]:
            if not budget.takes(size_of(request)):
                break
            page.append(request.id)
        pages.append(page)
        rest = rest[len(page) :]
    return pages


async def test_a_page_of_big_requests_ends_by_size_and_its_cursor_reaches_every_one(broker: Broker) -> None:
    made: list[Request] = []
    for i in range(7):
        made.append(await make_big(broker, i))
        made.append(await broker.create(Text(f"Small {i}?"), to="ann"))
    await broker.resolve(made[2].id, True)  # an answered one counts its response too
    made[2] = await broker.get(made[2].id)
    assert all(2 * 1024 * 1024 < size_of(r) < PAGE_BYTES for r in made[::2])  # a few on a page

    for order in ("desc", "asc"):
        expected = pages_by_size(sorted(made, key=lambda r: r.id, reverse=order == "desc"), 50)
        assert 3 <= len(expected) < len(made)  # pages of a few, not of one, nor all on one
        seen: list[list[str]] = []
        cursor: str | None = None
        while True:
            page = await broker.list(recipient="ann", order=order, after=cursor, limit=50)
            seen.append([r.id for r in page.items])
            assert sum(size_of(r) for r in page.items) <= PAGE_BYTES
            if page.next_cursor is None:
                break
            assert page.next_cursor == page.items[-1].id
            cursor = page.next_cursor
        assert seen == expected  # the same pages on every store, through a server too
        assert sorted(i for page in seen for i in page) == sorted(r.id for r in made)  # each once

    # A page the limit ends first is as it was, and one of small requests holds them all.
    first = await broker.list(recipient="ann", limit=1)
    assert [r.id for r in first.items] == [max(r.id for r in made)] and first.next_cursor == first.items[0].id
    small = await broker.list(recipient="ann", kind="question", limit=1000)
    assert len(small.items) == 7 and small.next_cursor is None
    # A request larger than the whole budget is a page of its own (a page always moves on).
    huge = await make_big(broker, 99, items=70_000, part={})  # (an object counts most)
    assert size_of(huge) > PAGE_BYTES
    page = await broker.list(recipient="ann", limit=1000)
    assert [r.id for r in page.items] == [huge.id] and page.next_cursor == huge.id
    # The requests of one process's pages are found by the pending of another's session.
    assert len(await broker.pending(recipient="ann")) == len(made)  # (one answered; the huge one new)


# -- pages of events -----------------------------------------------------------------------


async def every_event(broker: Broker) -> list[Event]:
    """The event log, one event a page (a page always holds one: nothing cut away)."""
    events: list[Event] = []
    while page := await broker.find_events(after=events[-1].id if events else 0, limit=1):
        events += page
    return events


async def make_big_log(broker: Broker) -> list[Event]:
    """Big approvals and small questions to ann, one of each answered: their event log."""
    made: list[Request] = []
    for i in range(6):
        made.append(await make_big(broker, i))
        made.append(await broker.create(Text(f"Small {i}?"), to="ann"))
    await broker.resolve(made[2].id, True)
    await broker.resolve(made[3].id, "fine")
    return await every_event(broker)


async def event_pages_by_size(broker: Broker, events: list[Event], limit: int) -> list[list[int]]:
    """The pages of event ids that `events` (the log, in order) make: `limit` at most, cut
    where the requests they carry (each event its request's size as it is now) pass the budget."""
    sizes = {e.request_id: size_of(await broker.get(e.request_id)) for e in events if e.request_id is not None}
    pages: list[list[int]] = []
    rest = list(events)
    while rest:
        budget, page = PageBudget(), []
        for event in rest[:limit]:
            if not budget.takes(0 if event.request_id is None else sizes[event.request_id]):
                break
            page.append(event.id)
        pages.append(page)
        rest = rest[len(page) :]
    return pages


async def test_a_page_of_events_about_big_requests_ends_by_size_and_its_cursor_reaches_every_one(
    broker: Broker,
) -> None:
    log = await make_big_log(broker)
    expected = await event_pages_by_size(broker, log, 1000)
    assert 3 <= len(expected) < len(log)  # pages of a few, not of one, nor all on one

    seen: list[list[int]] = []
    cursor = 0
    while True:
        page = await broker.find_events(after=cursor, limit=1000)
        seen.append([e.id for e in page])
        assert page.cut == (len(seen) < len(expected))  # cut short of the limit: more follow
        if not page.cut and len(page) < 1000:
            break
        cursor = page[-1].id
    assert seen == expected  # the same pages on every store, through a server too
    assert [i for page in seen for i in page] == [e.id for e in log]  # every event once, in order
    # The requests the events carry are as every page gives them.
    assert [(e.type, e.request) async for e in broker.events()] == [(e.type, e.request) for e in log]
    # A page the limit ends first is as it was; the events of a small request fit on one.
    first = await broker.find_events(limit=1)
    assert [e.id for e in first] == [log[0].id] and not first.cut
    small = next(e.request_id for e in log if e.request is not None and e.request.kind == "question")
    about = await broker.find_events(request=small)
    assert [e.id for e in about] == [e.id for e in log if e.request_id == small] and not about.cut


@pytest.fixture
async def server(implementation: tuple[str, str]) -> AsyncIterator[InProcessServer]:
    """A server (no auth) over each store in turn."""
    name, where = implementation
    url = {"memory": "memory://", "sqlite": f"sqlite:///{where}"}.get(name, where)
    async with serve_in_process(url, auth=False, keepalive=0.2) as server:
        yield server


async def read_stream(api: httpx.AsyncClient, count: int, **headers: str) -> list[dict[str, Any]]:
    """The first `count` events of `/events/stream`."""
    got: list[dict[str, Any]] = []
    async with aconnect_sse(api, "GET", "/events/stream", headers=headers) as source:
        async for sse in source.aiter_sse():
            if sse.id and sse.data:  # (not a keepalive)
                got.append(json.loads(sse.data))
                if len(got) == count:
                    return got
    raise AssertionError("the stream ended early")


async def test_the_api_pages_events_by_size_and_its_last_event_id_reaches_every_one(server: InProcessServer) -> None:
    with anyio.fail_after(120):
        async with server.connect() as broker, server.client("/api/v1", timeout=60) as api:
            log = await make_big_log(broker)
            expected = await event_pages_by_size(broker, log, 1000)
            assert len(expected) >= 3
            pages: list[list[int]] = []
            after = 0
            while True:
                body = (await api.get("/events", params={"after": after, "limit": 1000})).json()
                pages.append([e["id"] for e in body["events"]])
                assert body["cut"] == (len(pages) < len(expected))
                if body["cut"]:  # the next page begins right after this one's last event
                    assert body["last_event_id"] == body["events"][-1]["id"]
                after = body["last_event_id"]
                if not body["cut"] and len(body["events"]) < 1000:
                    break
            assert pages == expected
            assert [i for page in pages for i in page] == [e.id for e in log]  # every event once, in order


async def test_a_reconnected_stream_replays_every_missed_event_across_pages_cut_by_size(
    server: InProcessServer,
) -> None:
    with anyio.fail_after(120):
        async with server.connect() as broker, server.client("/api/v1", timeout=60) as api:
            await broker.create(Text("First?"), to="ann")
            (seen,) = await read_stream(api, 1, **{"Last-Event-ID": "0"})
            # the stream is gone; meanwhile, events about big requests, more than a page holds:
            log = await make_big_log(broker)
            assert (await broker.find_events(after=seen["id"], limit=500)).cut
            missed = [e.id for e in log if e.id > seen["id"]]
            replayed = await read_stream(api, len(missed), **{"Last-Event-ID": str(seen["id"])})
            assert [e["id"] for e in replayed] == missed  # each once, in order, across the cuts
