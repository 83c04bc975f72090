"""One-time sign-in links: only a person's, spent once, never from another site's form,
never sending the browser elsewhere, revoked with the person's tokens, kept out of logs."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

import interlock
from interlock.broker import LocalBroker
from interlock.principals import Principal
from interlock.redact import redact
from interlock.server.app import create_app
from interlock.signin import mint_signin_link, safe_next

pytestmark = pytest.mark.anyio
BASE = "http://127.0.0.1:8765"


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[LocalBroker, httpx.AsyncClient]]:
    broker = interlock.connect(f"sqlite:///{tmp_path / 'links.db'}")
    assert isinstance(broker, LocalBroker)
    await broker.open()
    await broker.save_principal(Principal("alice", "human"))
    await broker.save_principal(Principal("bot", "agent", "alice"))
    app = create_app(broker=broker, secret_key="links-secret-key-of-32-characters!")
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url=BASE) as client:
        yield broker, client
    await broker.aclose()


async def follow(client: httpx.AsyncClient, link: str) -> httpx.Response:
    """Open the link and press its button, as a browser would."""
    shown = await client.get(link)
    assert shown.status_code == 200, shown.text
    fields = {name: re.search(rf'name="{name}" value="([^"]*)"', shown.text) for name in ("csrf", "code", "next")}
    data = {name: found[1] for name, found in fields.items() if found is not None}
    return await client.post("/signin/link", data=data)


async def test_a_link_opens_one_session_and_is_then_spent(world: tuple[LocalBroker, httpx.AsyncClient]) -> None:
    broker, client = world
    link = await mint_signin_link(broker, "alice", BASE)
    done = await follow(client, link)
    assert done.status_code == 303 and done.headers["location"] == f"{BASE}/"
    assert "Signed in as" in (await client.get("/")).text
    client.cookies.clear()
    again = await follow(client, link)
    assert again.status_code == 400 and "used already" in again.text
    assert "interlock_session" not in again.cookies


async def test_only_people_get_links_and_a_guessed_code_opens_nothing(
    world: tuple[LocalBroker, httpx.AsyncClient],
) -> None:
    broker, client = world
    for who in ("bot", "nobody"):
        with pytest.raises(ValueError, match="only people sign in"):
            await mint_signin_link(broker, who, BASE)
    guessed = await follow(client, f"{BASE}/signin/link?code=ilk_{'A' * 43}")
    assert guessed.status_code == 400 and "interlock_session" not in guessed.cookies


async def test_a_post_from_another_site_cannot_sign_the_browser_in(
    world: tuple[LocalBroker, httpx.AsyncClient],
) -> None:
    broker, client = world
    link = await mint_signin_link(broker, "alice", BASE)
    code = link.split("code=")[1]
    forged = await client.post("/signin/link", data={"code": code, "csrf": "made-up"})  # no sign-in cookie
    assert "interlock_session" not in forged.cookies and "stale or came from another site" in forged.text
    assert (await follow(client, link)).status_code == 303  # not spent by the forgery


async def test_the_next_page_stays_on_this_server(world: tuple[LocalBroker, httpx.AsyncClient]) -> None:
    broker, client = world
    link = await mint_signin_link(broker, "alice", BASE, next="/requests/abc?x=1")
    assert (await follow(client, link)).headers["location"] == "/requests/abc?x=1"
    for bad in ("//evil.example/x", "https://evil.example/", "/\\evil.example", "javascript:alert(1)", "/a b"):
        assert not safe_next(bad)
        client.cookies.clear()
        sneaky = f"{BASE}/signin/link?code={(await mint_signin_link(broker, 'alice', BASE)).split('code=')[1]}"
        done = await follow(client, f"{sneaky}&next={httpx.QueryParams({'n': bad})['n']}")
        assert done.headers["location"] == f"{BASE}/"


async def test_revoking_the_persons_tokens_ends_a_link_session(world: tuple[LocalBroker, httpx.AsyncClient]) -> None:
    broker, client = world
    await follow(client, await mint_signin_link(broker, "alice", BASE))
    assert "Signed in as" in (await client.get("/")).text
    assert await broker.revoke_tokens(principal="alice") == 1
    assert (await client.get("/")).status_code == 303


def test_a_link_in_a_log_line_is_masked() -> None:
    line = f"GET {BASE}/signin/link?code=ilk_secretsecretsecret&next=%2F HTTP/1.1"
    assert "secretsecret" not in redact(line)


async def test_a_refused_token_or_link_is_logged_without_it_one_warning_an_address_a_minute(
    world: tuple[LocalBroker, httpx.AsyncClient], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, client = world
    caplog.set_level(logging.DEBUG, logger="interlock.server")  # the refusals it only counts too
    forged = f"il_0badc0de_{'S' * 43}"
    for _ in range(3):  # a client stuck on a revoked token, or guessing
        refused = await client.get("/api/v1/requests", headers={"Authorization": f"Bearer {forged}"})
        assert refused.status_code == 401
    assert (await follow(client, f"{BASE}/signin/link?code=ilk_{'A' * 43}")).status_code == 400
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "refused" in r.getMessage()]
    assert warned == ["refused an unknown or revoked token (il_0badc0de_***) from 127.0.0.1: GET /api/v1/requests"]

    monkeypatch.setattr("interlock.server.auth.REFUSALS_QUIET", 0.0)  # the minute has passed
    form = await client.get("/signin")
    csrf = re.search(r'name="csrf" value="([^"]*)"', form.text)
    assert csrf is not None
    typed = await client.post("/signin", data={"token": "xoxb-pasted-the-wrong-secret", "csrf": csrf[1]})
    assert typed.status_code == 401
    last = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "refused" in r.getMessage()][-1]
    assert last.startswith(
        "refused an unknown or revoked token from 127.0.0.1: POST /signin (3 more refused from there"
    )
    for record in caplog.records:  # not the token, nor the link's code, nor what was typed
        assert "SSSS" not in record.getMessage() and "AAAA" not in record.getMessage()
        assert "xoxb" not in record.getMessage()
