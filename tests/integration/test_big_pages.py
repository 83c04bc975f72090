"""A page of a list is bounded by the size of its requests, not only by their number: the
stores stop reading and parsing where the requests' stored JSON passes `PAGE_BYTES`, and
the page ends there with a cursor to the rest (the security review's "large list pages
block the server": a thousand requests of 1 MiB each, within every per-field limit,
listed at once held the server for about a minute)."""

from __future__ import annotations

import json

import pytest

from interlock import Broker, Confirm, Request, Text
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
