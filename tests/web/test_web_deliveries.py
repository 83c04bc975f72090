# ruff: noqa: F811  (the server fixture imported from test_web_inbox is a parameter here)
"""The outbox's pages in the web inbox, in headless Chromium: a person's dead letters with a
button to send each again, and how people were told about one request, for those who may
read it only."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

import interlock
from interlock import Confirm
from interlock.broker import LocalBroker
from interlock.outbox import Delivery, delivery_id
from interlock.principals import Principal, issue_token
from interlock.routing import routing_from_dict

from .test_web_inbox import Server, server  # noqa: F401 - the fixture

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
SECRET_KEY = "web-tests-secret-key-of-32-characters"

ROUTING = {
    "max_attempts": 1,
    # nothing listens on the discard port: every attempt fails, and the first is the last
    "channels": {"hook": {"type": "webhook", "url": "http://127.0.0.1:9/hook"}},
    "recipients": {"alice": {"channels": ["hook"]}},
}


@pytest.fixture
def world(tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]) -> Iterator[tuple[str, dict[str, str]]]:
    db = f"sqlite:///{tmp_path / 'web.db'}"
    tokens: dict[str, str] = {}

    async def setup() -> None:
        async with interlock.connect(db) as broker:
            assert isinstance(broker, LocalBroker)
            for p in (Principal("alice", "human"), Principal("bob", "human"), Principal("bot", "agent", "alice")):
                await broker.store.save_principal(p)
                token = issue_token(p.name, datetime.now(UTC))
                await broker.store.save_token(token)
                tokens[p.name] = token.secret

    with ThreadPoolExecutor(1) as pool:  # this thread runs the browser driver's event loop
        pool.submit(asyncio.run, setup()).result(30)
    with serve(db, auth=True, secret_key=SECRET_KEY, routing=routing_from_dict(ROUTING)) as base:
        yield base, tokens


def dead_letter(base: str, tokens: dict[str, str]) -> str:
    """Ask alice something; return the request id once its webhook is a dead letter."""
    auth = {"Authorization": f"Bearer {tokens['bot']}"}
    with httpx.Client(base_url=f"{base}/api/v1", timeout=20) as client:
        created = client.post("/requests", json={"asks": [{"type": "confirm", "prompt": "Ship?"}]}, headers=auth)
        request_id = str(created.json()["id"])
        deadline = time.monotonic() + 20
        while True:  # the server's loop runs in another thread, which sends this one no signal
            items = client.get(f"/requests/{request_id}/deliveries", headers=auth).json()["items"]
            if items and items[0]["status"] == "dead":
                return request_id
            assert time.monotonic() < deadline, items
            time.sleep(0.05)


def sign_in(page: Page, base: str, token: str) -> None:
    page.goto(base + "/")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Waiting for you").wait_for()


def test_a_person_sees_their_dead_letters_and_sends_one_again(world: tuple[str, dict[str, str]], page: Page) -> None:
    base, tokens = world
    request_id = dead_letter(base, tokens)
    sign_in(page, base, tokens["alice"])
    page.goto(base + "/inbox/deliveries")
    table = page.get_by_role("table", name="Dead letters")
    expect(table.get_by_role("columnheader", name="Send again")).to_be_attached()  # the buttons' column, named
    row = page.locator("table.deliveries tbody tr")
    assert row.count() == 1 and row.first.get_attribute("data-status") == "dead"
    assert "hook" in row.first.inner_text()
    link = row.first.get_by_role("link", name="Ship?")  # which request it was, and the way to it
    assert link.get_attribute("href") == f"{base}/requests/{request_id}"
    page.get_by_role("button", name="Send again").click()
    page.get_by_role("status").filter(has_text="It will be sent again.").wait_for()
    page.goto(f"{base}/inbox/deliveries?request={request_id}")
    page.get_by_role("heading", name="How people were told").wait_for()
    assert page.locator("table.deliveries tbody tr").count() == 1


def test_the_dead_letters_are_listed_newest_first_with_when_each_failed(
    world: tuple[str, dict[str, str]], page: Page
) -> None:
    base, tokens = world
    made = [dead_letter(base, tokens) for _ in range(4)]  # each a dead letter before the next is asked
    sign_in(page, base, tokens["alice"])
    page.goto(base + "/inbox/deliveries")
    assert page.locator("table.deliveries thead th").nth(1).inner_text() == "When"
    rows = page.locator("table.deliveries tbody tr")
    assert rows.count() == 4
    shown = [str(a.get_attribute("href")).rsplit("/", 1)[1] for a in rows.locator("td:first-child a").all()]
    assert shown == made[::-1]
    stamps = [t.get_attribute("datetime") for t in rows.locator("td > time").all()]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", str(t)) for t in stamps), stamps
    shown = rows.first.locator("td > time").inner_text()  # in the reader's own time zone
    # Said with what it sends again, its time as the row shows it.
    again = rows.first.get_by_role("button", name=f"Send again: Ship?, request to alice via hook, {shown}", exact=True)
    expect(again).to_have_count(1)


def test_every_dead_letter_is_reached_newest_first_through_the_older_links(server: Server, page: Page) -> None:
    async def make() -> list[str]:  # straight into the outbox: this server runs no delivery loop
        store = server.broker.store
        request = await server.broker.create(Confirm("Ship?"), to="alice", requester="bot")
        t = datetime.now(UTC)
        [notice] = await store.claim_notices("test", t, 30)
        channels = [f"hook-{i}" for i in range(501)]  # one more than the page had ever shown
        made = [
            Delivery(
                delivery_id(notice.event_id, "request", "alice", c, None),
                *(notice.id, request.id, "request", "created", "alice", c, None, t, t),
            )
            for c in channels
        ]
        await store.route_notice(notice, made, "test", t)
        dead = []
        for i, d in enumerate(await store.claim_deliveries("test", t, 30, limit=1000)):
            when = t - timedelta(seconds=i // 2)  # two by two at one time: then by id
            dead.append(d.with_state(status="dead", attempts=1, due_at=when, last_error="refused"))
            assert await store.finish_delivery(dead[-1], "test")
        return [d.id for d in sorted(dead, key=lambda d: (d.due_at, d.id), reverse=True)]

    made = server.run(make())
    assert len(made) == 501
    sign_in(page, server.url, server.tokens["alice"])
    page.goto(server.url + "/inbox/deliveries")
    rows = page.locator("table.deliveries tbody tr")
    seen: list[str] = []
    for _ in range(20):  # bounded: 501 dead letters are eleven pages
        page.wait_for_load_state()
        shown = rows.evaluate_all("rows => rows.map((row) => row.dataset.id)")
        assert 0 < len(shown) <= 50
        seen.extend(shown)
        older = page.get_by_role("link", name="Older dead letters")
        if older.count() == 0:
            break
        older.click()
        expect(rows.first).not_to_have_attribute("data-id", shown[0])  # the next page is there
    assert seen == made  # each once, newest first
    page.get_by_role("link", name="Newest dead letters").click()
    expect(rows.first).to_have_attribute("data-id", made[0])


def test_someone_else_sees_neither_the_dead_letters_nor_the_request_s_deliveries(
    world: tuple[str, dict[str, str]], page: Page
) -> None:
    base, tokens = world
    request_id = dead_letter(base, tokens)
    sign_in(page, base, tokens["bob"])
    page.goto(base + "/inbox/deliveries")
    page.get_by_text("None: every notification went out.").wait_for()
    response = page.goto(f"{base}/inbox/deliveries?request={request_id}")
    assert response is not None and response.status == 403
