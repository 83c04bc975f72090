"""The lists' page cursors: what a page gives as its `next_cursor` pages on, and any other
text is refused (`InvalidCursor`; over HTTP 422 `invalid_cursor`) instead of answering an
empty page or the first page again: on every store, through a server, and on each list of
the HTTP API, whose cursors are opaque and checked."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest

from asgi_support import InProcessServer, serving
from interlock import Broker, Text
from interlock.cursors import issued
from interlock.errors import InvalidCursor
from interlock.server.app import create_app

pytestmark = pytest.mark.anyio
BOUND = 10
GARBAGE = ("zzzz", "", "0" * 31, "G" * 32, "12.")


async def test_every_list_pages_on_from_its_cursor_and_refuses_any_other_on_every_store(broker: Broker) -> None:
    await pages_on(broker)
    for bad in GARBAGE:
        with pytest.raises(InvalidCursor, match="cursor"):
            await broker.list(after=bad)
        with pytest.raises(InvalidCursor):
            await broker.list_grants(after=bad)
        with pytest.raises(InvalidCursor):
            await broker.list_runs(after=bad)
        with pytest.raises(InvalidCursor):
            await broker.dead_letters(after=bad)
        with pytest.raises(InvalidCursor):
            await broker.list_deliveries(after=bad)


async def pages_on(broker: Broker) -> None:
    """A page's cursor is the last row's place, through a server too: the remote broker
    unwraps the server's opaque cursors, so a program pages alike wherever its store is."""
    asked = [await broker.create(Text(f"Q{i}?"), to="alice") for i in range(3)]
    given = [await broker.give_grant("bot", "repo:web", f"deploy-{i}", by="alice") for i in range(3)]
    started = [await broker.start_run("agent", run_id=f"run-{i}") for i in range(3)]
    first = await broker.list(limit=2)
    assert first.next_cursor == first.items[-1].id == asked[1].id
    assert [r.id for r in (await broker.list(after=first.next_cursor)).items] == [asked[0].id]
    grants = await broker.list_grants(audience="bot", limit=2)
    assert grants.next_cursor == given[1].id
    assert [g.id for g in (await broker.list_grants(audience="bot", after=grants.next_cursor)).items] == [given[0].id]
    runs = await broker.list_runs(agent="agent", limit=2)
    assert [r.id for r in runs.items] == [started[2].id, started[1].id] and runs.next_cursor is not None
    rest = await broker.list_runs(agent="agent", after=runs.next_cursor)
    assert [r.id for r in rest.items] == [started[0].id] and rest.next_cursor is None


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[InProcessServer]:
    async with serving(create_app(f"sqlite:///{tmp_path / 'cursors.db'}", auth=False)) as server:
        yield server


@pytest.fixture
async def api(server: InProcessServer) -> AsyncIterator[httpx.AsyncClient]:
    async with server.client("/api/v1", timeout=BOUND) as client:
        yield client


def refused(response: httpx.Response, match: str = "") -> None:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == "invalid_cursor" and match in problem["detail"], problem


LISTS = {"/requests": {}, "/interactions": {}, "/grants": {"audience": "bot"}, "/runs": {"agent": "agent"}}


async def test_each_list_of_the_api_refuses_a_cursor_it_never_gave_with_invalid_cursor(
    api: httpx.AsyncClient,
) -> None:
    for i in range(3):
        assert (
            await api.post("/requests", json={"to": "alice", "asks": [{"type": "text", "prompt": f"Q{i}?"}]})
        ).is_success
        grant = {"to": "bot", "with": "repo:web", "can": f"deploy-{i}", "by": "alice"}
        assert (await api.post("/grants", json=grant)).is_success
        assert (await api.post("/runs", json={"agent": "agent", "run_id": f"run-{i}"})).is_success
    firsts: dict[str, dict[str, Any]] = {}
    for path, params in LISTS.items():
        for bad in GARBAGE:
            refused(await api.get(path, params={**params, "cursor": bad}))
        first = (await api.get(path, params={**params, "limit": 2})).json()
        firsts[path] = first
        cursor = first["next_cursor"]
        assert cursor not in (None, first["items"][-1]["id"])  # opaque
        rest = (await api.get(path, params={**params, "cursor": cursor})).json()
        assert len(rest["items"]) == 1 and rest["next_cursor"] is None
        flipped = cursor[:10] + ("A" if cursor[10] != "A" else "B") + cursor[11:]
        refused(await api.get(path, params={**params, "cursor": flipped}))
        refused(await api.get(path, params={**params, "cursor": cursor[:-3]}))
        if path != "/runs":  # a row's id, as these lists gave their cursors before, is taken still
            plain = (await api.get(path, params={**params, "cursor": first["items"][-1]["id"]})).json()
            assert plain["items"] == rest["items"]
    refused(await api.get("/requests", params={"cursor": firsts["/grants"]["next_cursor"]}), "a cursor of grants")
    refused(await api.get("/interactions", params={"cursor": firsts["/requests"]["next_cursor"]}), "of requests")
    refused(await api.get("/runs", params={"agent": "agent", "cursor": firsts["/interactions"]["next_cursor"]}))
    for params in ({}, {"status": "dead", "order": "newest"}):
        for name in ("cursor", "after"):
            for bad in GARBAGE:
                refused(await api.get("/deliveries", params={**params, name: bad}))


async def test_the_web_history_pages_with_checked_cursors_and_says_when_a_link_is_not_valid(
    server: InProcessServer,
) -> None:
    """The history's "Older" link carries the opaque cursor; a plain id (as older links
    carried) still pages on; a cursor cut short, changed, or of another list is a 400 page
    saying the link is not valid, not a 500 nor the first page shown as if it were asked for."""
    from interlock.server import pages

    broker = server.connect()
    made = []
    for i in range(3):
        made.append((await broker.create(Text(f"Question {i}?"), to="alice")).id)
        assert await broker.resolve(made[-1], "ok", by="alice")
    grant = await broker.give_grant("bot", "repo:web", "deploy", by="alice")
    async with server.client(timeout=BOUND) as web:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(pages, "HISTORY_PAGE", 2)
            first = await web.get("/history", params={"q": "question"})
            assert first.status_code == 200 and made[2] in first.text and made[0] not in first.text
            [older] = re.findall(r'href="[^"]*\?([^"]*)" rel="next">Older<', first.text)
            after = parse_qs(html.unescape(older))["after"][0]
            assert after not in made  # opaque
            rest = await web.get("/history", params={"q": "question", "after": after})
            assert rest.status_code == 200 and made[0] in rest.text and made[1] not in rest.text
            plain = await web.get("/history", params={"q": "question", "after": made[1]})  # an old link
            assert plain.status_code == 200 and made[0] in plain.text and made[1] not in plain.text
            flipped = after[:10] + ("A" if after[10] != "A" else "B") + after[11:]
            others = [issued("grants", grant.id), issued("runs", "1.x")]
            for bad in (flipped, after[:-3], "zzzz", "G" * 32, "x" * 5000, *others):
                refused = await web.get("/history", params={"q": "question", "after": bad})
                assert refused.status_code == 400, (bad, refused.text)
                assert refused.headers["content-type"].startswith("text/html")
                assert "This link to a page of the history is not valid" in refused.text
                assert made[0] not in refused.text and made[2] not in refused.text  # no page shown as if asked for
                assert 'href="http://127.0.0.1/history?q=question">Newest page of the history<' in refused.text


NO_CURSORS = ("x" * 5000, "a" * 300, "1." + "r" * 300, "1.run\x00", f"{'0' * 32}\x00")
"""Text too long to be any list's cursor, or holding what no position holds: no cursor
either, rather than text too long (`invalid_request`)."""


async def test_every_list_refuses_text_too_long_to_be_a_cursor_as_no_cursor_on_every_store(broker: Broker) -> None:
    await broker.start_run("agent", run_id="run-0")
    for bad in NO_CURSORS:
        for listing in (broker.list, broker.list_grants, broker.list_runs, broker.dead_letters, broker.list_deliveries):
            with pytest.raises(InvalidCursor, match="cursor"):
                await listing(after=bad)


async def test_each_list_of_the_api_refuses_text_too_long_to_be_a_cursor_with_invalid_cursor(
    api: httpx.AsyncClient,
) -> None:
    assert (await api.post("/runs", json={"agent": "agent", "run_id": "run-0"})).is_success
    deliveries = {"/deliveries": {}, "/deliveries ": {"status": "dead", "order": "newest"}}
    for path, params in (LISTS | deliveries).items():
        for bad in NO_CURSORS:
            for name in ("cursor", "after") if path.startswith("/deliveries") else ("cursor",):
                response = await api.get(path.strip(), params={**params, name: bad})
                refused(response)
                assert len(response.text) < 2000  # the cursor is not sent back whole


async def test_the_runs_page_on_past_a_run_whose_id_is_as_long_as_a_name_may_be(broker: Broker) -> None:
    """A runs cursor is the run's time and id, so longer than the id: a run whose id is a
    name's full length still has a next page (the cursor was refused as too long)."""
    longest = [await broker.start_run("agent", run_id=f"{i}" + "r" * 255) for i in range(2)]
    first = await broker.list_runs(agent="agent", limit=1)
    assert [r.id for r in first.items] == [longest[1].id] and first.next_cursor is not None
    rest = await broker.list_runs(agent="agent", after=first.next_cursor)
    assert [r.id for r in rest.items] == [longest[0].id] and rest.next_cursor is None


async def test_the_web_inbox_and_a_run_page_page_with_checked_cursors_and_say_when_a_link_is_not_valid(
    server: InProcessServer,
) -> None:
    """The inbox's and a run page's "Older requests" links carry the opaque cursor; a
    plain id (as older links carried) still pages on; a cursor cut short, changed, of
    another list or too long is a 400 page saying the link is not valid, with a link to
    the newest page, not the first page shown as if it were the one asked for."""
    from interlock.server import web

    broker = server.connect()
    run = await broker.start_run("agent", run_id="run-web")
    made = [(await broker.create(Text(f"Question {i}?"), to="alice", run=run.id)).id for i in range(3)]
    grant = await broker.give_grant("bot", "repo:web", "deploy", by="alice")
    run_page = f"/inbox/runs/{run.id}"
    async with server.client(timeout=BOUND) as web_client:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(web, "PENDING_LIMIT", 2)
            patch.setattr(web, "RUN_REQUESTS_LIMIT", 2)
            for path, newest in (("/", "Newest requests"), (run_page, "Newest requests of this run")):
                first = await web_client.get(path)
                assert first.status_code == 200 and made[2] in first.text and made[0] not in first.text
                [older] = re.findall(r'href="[^"]*\?([^"#]*)[^"]*" rel="next">Older requests<', first.text)
                cursor = parse_qs(html.unescape(older))["older"][0]
                assert cursor not in made  # opaque
                rest = await web_client.get(path, params={"older": cursor})
                assert rest.status_code == 200 and made[0] in rest.text and made[1] not in rest.text, path
                plain = await web_client.get(path, params={"older": made[1]})  # an old link
                assert plain.status_code == 200 and made[0] in plain.text and made[1] not in plain.text, path
                flipped = cursor[:10] + ("A" if cursor[10] != "A" else "B") + cursor[11:]
                others = [issued("grants", grant.id), issued("runs", "1.x")]
                for bad in (flipped, cursor[:-3], "zzzz", "G" * 32, "x" * 5000, *others):
                    refused = await web_client.get(path, params={"older": bad})
                    assert refused.status_code == 400, (path, bad, refused.text)
                    assert refused.headers["content-type"].startswith("text/html")
                    assert "This link to a page of " in refused.text and "is not valid" in refused.text
                    assert made[0] not in refused.text and made[2] not in refused.text  # no page as if asked for
                    assert f'href="http://127.0.0.1{path}">{newest}<' in refused.text
            kept = await web_client.get(run_page, params={"older": "zzzz", "events": "1"})  # the events' page kept
            assert kept.status_code == 400
            assert f'href="http://127.0.0.1{run_page}?events=1">Newest requests of this run<' in kept.text


async def test_a_run_page_says_when_its_events_link_is_not_an_event_position(server: InProcessServer) -> None:
    """A run page's events link carries an event id, as the API's `after` of a run's
    events does: its "Newer events" link pages on, and text that is no event id (not
    digits, or past the largest one a store holds) is a 400 page saying the link is not
    valid, with a link to the run's oldest events (the requests' page kept), not the first
    events shown as if they were the ones asked for."""
    from interlock.server import web

    broker = server.connect()
    run = await broker.start_run("agent", run_id="run-events")
    made = [(await broker.create(Text(f"Question {i}?"), to="alice", run=run.id)).id for i in range(4)]
    run_page = f"/inbox/runs/{run.id}"
    events = re.compile(r'<li data-id="(\d+)" data-type="([a-z_]+)">')
    async with server.client(timeout=BOUND) as web_client:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(web, "RUN_EVENTS_LIMIT", 2)
            patch.setattr(web, "RUN_REQUESTS_LIMIT", 2)
            first = await web_client.get(run_page)
            assert first.status_code == 200
            shown = events.findall(first.text)
            assert len(shown) == 2
            [newer] = re.findall(r'href="[^"]*\?([^"#]*)[^"]*" rel="next">Newer events<', first.text)
            position = parse_qs(html.unescape(newer))["events"][0]
            assert position == shown[-1][0]
            rest = await web_client.get(run_page, params={"events": position})
            assert rest.status_code == 200
            later = events.findall(rest.text)
            assert later and int(later[0][0]) > int(position)
            for good in ("0", "", "0" * 30 + position, str(2**63 - 1)):  # event positions, as the API takes them
                assert (await web_client.get(run_page, params={"events": good})).status_code == 200, good
            [older] = re.findall(r'href="[^"]*\?([^"#]*)[^"]*" rel="next">Older requests<', first.text)
            cursor = parse_qs(html.unescape(older))["older"][0]
            bad_ones = (
                "zzzz",
                "-1",
                "+1",
                " 1",
                "1.5",
                "1e3",
                "\u0661",
                "\u00b2",
                str(2**63),
                "9" * 5000,
                position + "x",
            )
            for bad in bad_ones:
                for params, back in (({}, run_page), ({"older": cursor}, f"{run_page}?older={cursor}")):
                    refused = await web_client.get(run_page, params={**params, "events": bad})
                    assert refused.status_code == 400, (bad, refused.text)
                    assert refused.headers["content-type"].startswith("text/html")
                    assert "This link to a page of this run&#39;s events is not valid" in refused.text, refused.text
                    assert "Start again from the oldest page." in refused.text
                    assert not events.findall(refused.text) and made[0] not in refused.text  # no page as if asked for
                    assert f'href="http://127.0.0.1{back}">Oldest events of this run<' in refused.text
            both = await web_client.get(run_page, params={"older": "zzzz", "events": "zzzz"})  # the link drops both
            assert both.status_code == 400
            assert f'href="http://127.0.0.1{run_page}">Newest requests of this run<' in both.text
