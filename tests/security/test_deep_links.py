"""Every page a person may be sent a link to keeps its address through the sign-in: opened
signed out, it sends the browser to sign in with `next` set to it, and the sign-in comes
back to it (a form posted signed out comes back to the page it was posted from)."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

import interlock
from interlock import Confirm
from interlock.broker import LocalBroker
from interlock.principals import Principal, issue_token
from interlock.server.app import create_app

pytestmark = pytest.mark.anyio
BASE = "http://127.0.0.1:8765"


class World:
    def __init__(self, broker: LocalBroker, client: httpx.AsyncClient, token: str) -> None:
        self.broker, self.client, self.token = broker, client, token


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    broker = interlock.connect(f"sqlite:///{tmp_path / 'links.db'}")
    assert isinstance(broker, LocalBroker)
    await broker.open()
    await broker.save_principal(Principal("alice", "human"))
    token = issue_token("alice", datetime.now(UTC))
    await broker.save_token(token)
    app = create_app(broker=broker, secret_key="deep-links-secret-key-of-32-characters")
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url=BASE) as client:
        yield World(broker, client, token.secret)
    await broker.aclose()


def next_of(response: httpx.Response) -> str | None:
    """The `next` of a redirect to the sign-in page (None when it has none)."""
    assert response.status_code == 303, response.text
    where = urlsplit(response.headers["location"])
    assert where.path == "/signin"
    return parse_qs(where.query).get("next", [None])[0]


async def sign_in_to(world: World, next_path: str | None) -> httpx.Response:
    """Fill the sign-in form as the redirect left it, with alice's token."""
    form = await world.client.get("/signin", params={"next": next_path} if next_path else None)
    found = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', form.text)
    fields = {name: html.unescape(value) for name, value in found}
    return await world.client.post("/signin", data={**fields, "token": world.token})


async def pages(world: World) -> list[str]:
    request = await world.broker.create(Confirm("Ship it?"), to="alice", requester="alice")
    run = await world.broker.start_run("deployer", requester="alice")
    await world.broker.create(Confirm("Also this?"), to="alice", run=run.id)
    return [
        f"/requests/{request.id}",
        "/history?status=expired&q=ship",
        "/dashboard",
        f"/inbox/runs/{run.id}",
        "/inbox/deliveries",
        f"/inbox/deliveries?request={request.id}",
        "/?older=" + request.id,
    ]


async def test_each_page_opened_signed_out_comes_back_after_the_sign_in(world: World) -> None:
    for path in await pages(world):
        world.client.cookies.clear()
        response = await world.client.get(path)
        assert next_of(response) == path, path
        done = await sign_in_to(world, next_of(response))
        assert done.status_code == 303 and done.headers["location"] == path, path
        assert (await world.client.get(path)).status_code == 200, path


async def test_the_inbox_itself_signs_in_without_a_next(world: World) -> None:
    assert next_of(await world.client.get("/")) is None


async def test_an_old_link_to_a_card_leads_to_the_request_page_through_the_sign_in(world: World) -> None:
    request = await world.broker.create(Confirm("Ship it?"), to="alice")
    response = await world.client.get(f"/inbox/requests/{request.id}")
    assert next_of(response) == f"/requests/{request.id}"
    await sign_in_to(world, f"/requests/{request.id}")
    again = await world.client.get(f"/inbox/requests/{request.id}")
    assert again.status_code == 303 and again.headers["location"] == f"/requests/{request.id}"
    card = await world.client.get(f"/inbox/requests/{request.id}", headers={"x-interlock-fragment": "1"})
    assert card.status_code == 200 and card.text.lstrip().startswith("<li")  # the live inbox's card


async def test_a_form_posted_signed_out_comes_back_to_its_page(world: World) -> None:
    request = await world.broker.create(Confirm("Ship it?"), to="alice")
    run = await world.broker.start_run("deployer", requester="alice")
    posted = {
        f"/inbox/requests/{request.id}": f"/requests/{request.id}",
        f"/inbox/requests/{request.id}/claim": f"/requests/{request.id}",
        f"/requests/{request.id}": f"/requests/{request.id}",
        f"/requests/{request.id}/claim": f"/requests/{request.id}",
        f"/inbox/runs/{run.id}/cancel": f"/inbox/runs/{run.id}",
        f"/inbox/runs/{run.id}/messages": f"/inbox/runs/{run.id}",
        "/inbox/deliveries/dlv_x/retry": "/inbox/deliveries",
    }
    for path, back in posted.items():
        assert next_of(await world.client.post(path, data={"csrf": "x"})) == back, path
    assert (await world.broker.get(request.id)).status.value == "pending"
