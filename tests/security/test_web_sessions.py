"""Web sessions live on the server: signing out ends one for good, the cookie carries no
token material, sessions expire, and the cookie is `Secure` behind a TLS proxy only when
the operator says which proxies to believe."""

from __future__ import annotations

import base64
import binascii
import json
import re
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from httpx_sse import aconnect_sse

import interlock
from interlock import Text
from interlock.principals import Principal, hash_token, issue_session, issue_token
from interlock.server.app import create_app
from interlock.signin import mint_signin_link
from serve_support import serve

pytestmark = pytest.mark.anyio
BOUND = 20
SESSION_COOKIE = "interlock_session"


async def add_people(db: str) -> dict[str, str]:
    tokens = {}
    async with interlock.connect(db) as broker:
        for principal in (Principal("alice", "human"), Principal("bot", "agent", "alice")):
            await broker.store.save_principal(principal)
            token = issue_token(principal.name, datetime.now(UTC))
            await broker.store.save_token(token)
            tokens[principal.name] = token.secret
    return tokens


def csrf_in(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html
    return found[1]


async def sign_in(client: httpx.AsyncClient, token: str, **headers: str) -> httpx.Response:
    """Sign in as a browser would: the answer to the sign-in form (a redirect that sets the cookie)."""
    form = await client.get("/signin", headers=headers)
    # Sent by hand: a client on plain HTTP keeps a `Secure` cookie to itself, as a browser would.
    set_cookies = form.headers.get_list("set-cookie")
    signin_cookie = next(c.split(";")[0] for c in set_cookies if c.startswith("interlock_signin="))
    fields = {"token": token, "csrf": csrf_in(form.text)}
    done = await client.post("/signin", data=fields, headers={**headers, "Cookie": signin_cookie})
    assert done.status_code == 303, done.text
    return done


@pytest.fixture
def world(
    tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]
) -> Iterator[tuple[str, str, dict[str, str]]]:
    db = f"sqlite:///{tmp_path / 'web.db'}"
    tokens = anyio.run(add_people, db)
    with serve(db, auth=True, secret_key="fixed-secret-key-of-32-characters!") as base:
        yield base, db, tokens


async def test_signing_out_ends_the_session_on_the_server_so_the_old_cookie_opens_nothing(
    world: tuple[str, str, dict[str, str]],
) -> None:
    base, db, tokens = world
    async with interlock.connect(db) as broker:
        request = await broker.create(Text("Which branch?"), to="alice")
    async with httpx.AsyncClient(base_url=base, timeout=BOUND) as browser:
        await sign_in(browser, tokens["alice"])
        page = await browser.get("/")
        assert page.status_code == 200 and request.id in page.text
        cookie, csrf = browser.cookies[SESSION_COOKIE], csrf_in(page.text)

        signed_out = await browser.post("/signout", data={"csrf": csrf})
        assert signed_out.status_code == 303

    # Whoever kept a copy of the cookie (and the page's CSRF token) gets nothing with it.
    async with httpx.AsyncClient(base_url=base, cookies={SESSION_COOKIE: cookie}, timeout=BOUND) as thief:
        assert (await thief.get("/")).headers["location"].endswith("/signin")
        card = await thief.get(f"/inbox/requests/{request.id}", headers={"x-interlock-fragment": "1"})
        assert card.status_code == 401
        assert (await thief.get("/inbox/stream")).status_code == 401
        answer = await thief.post(f"/inbox/requests/{request.id}", data={"a0": "main", "csrf": csrf})
        assert answer.status_code == 303 and "/signin?next=" in answer.headers["location"]
    async with interlock.connect(db) as broker:
        assert (await broker.get(request.id)).status.value == "pending"

    # Signing in again makes a new session, with a CSRF token of its own.
    async with httpx.AsyncClient(base_url=base, timeout=BOUND) as browser:
        await sign_in(browser, tokens["alice"])
        assert browser.cookies[SESSION_COOKIE] != cookie
        stale = await browser.post(f"/inbox/requests/{request.id}", data={"a0": "main", "csrf": csrf})
        assert stale.status_code == 403


async def test_a_sign_in_link_s_session_leaves_no_live_token_behind_once_signed_out(
    world: tuple[str, str, dict[str, str]],
) -> None:
    # Each sign-in link opens its session with a token of its own (which nobody holds): a
    # person who signs in by email every day had left one more live token each time.
    base, db, _ = world
    async with interlock.connect(db) as broker:
        before = {t.id for t in await broker.list_tokens()}
    for _ in range(3):
        async with interlock.connect(db) as broker:
            code = re.search(r"code=([^&]+)", await mint_signin_link(broker, "alice", base))
        assert code is not None
        async with httpx.AsyncClient(base_url=base, timeout=BOUND) as browser:
            form = await browser.get("/signin/link", params={"code": code[1]})
            signed_in = await browser.post("/signin/link", data={"code": code[1], "csrf": csrf_in(form.text)})
            assert signed_in.status_code == 303 and SESSION_COOKIE in browser.cookies
            async with interlock.connect(db) as broker:
                assert len(await broker.list_tokens()) == len(before) + 1  # the session's, while it lasts
            page = await browser.get("/")
            assert (await browser.post("/signout", data={"csrf": csrf_in(page.text)})).status_code == 303
    async with interlock.connect(db) as broker:
        assert {t.id for t in await broker.list_tokens()} == before


def _decoded_parts(value: str) -> list[bytes]:
    """Every piece of a cookie value that decodes as base64 (what a signed cookie is made of)."""
    out = [value.encode()]
    for part in re.split(r"[._]", value):
        padded = part + "=" * (-len(part) % 4)
        try:
            out.append(base64.urlsafe_b64decode(padded))
        except (binascii.Error, ValueError):
            continue
    return out


async def test_the_session_cookie_carries_no_token_material(world: tuple[str, str, dict[str, str]]) -> None:
    base, db, tokens = world
    token = tokens["alice"]
    async with httpx.AsyncClient(base_url=base, timeout=BOUND) as browser:
        await sign_in(browser, token)
        value = browser.cookies[SESSION_COOKIE]
    secrets = (token.encode(), hash_token(token).encode(), token.split("_")[1].encode())
    for part in _decoded_parts(value):
        for secret in secrets:
            assert secret not in part
    # The store keeps the session's hash, not the cookie's value.
    async with interlock.connect(db) as broker:
        assert await broker.store.get_session(hash_token(value), datetime.now(UTC)) is not None
        assert await broker.store.get_session(value, datetime.now(UTC)) is None


@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgresql"])
async def test_a_session_ends_when_it_expires_when_its_token_is_revoked_or_when_it_is_ended(url: str) -> None:
    async with interlock.connect(url) as broker:
        store = broker.store
        await store.save_principal(Principal("alice", "human"))
        first, second = issue_token("alice", datetime.now(UTC)), issue_token("alice", datetime.now(UTC))
        await store.save_token(first)
        await store.save_token(second)
        now = datetime.now(UTC)

        session = issue_session(now)
        assert session.expires_at - now == timedelta(days=7)
        started = await store.start_session(first.hash, session)
        assert started is not None and (started.principal.name, started.token) == ("alice", first.id)
        assert await store.get_session(session.hash, now + timedelta(days=6, hours=23)) == started
        assert await store.get_session(session.hash, now + timedelta(days=7)) is None  # expired
        assert await store.start_session(hash_token("il_00000000_guess"), issue_session(now)) is None

        ended = issue_session(now)
        assert await store.start_session(second.hash, ended) is not None
        assert await store.end_session(ended.hash) is not None
        assert await store.get_session(ended.hash, now) is None
        assert await store.end_session(ended.hash) is None

        assert await store.revoke_tokens(token_id=first.id) == 1
        assert await store.get_session(session.hash, now) is None  # its token was revoked
        assert await store.start_session(first.hash, issue_session(now)) is None


# -- Secure behind a proxy ---------------------------------------------------------------


@asynccontextmanager
async def plain_server(db: str, **options: Any) -> AsyncIterator[str]:
    """The app under uvicorn without uvicorn's own proxy-header handling, so only the
    app's `trusted_proxies` decide (as under any ASGI server). The socket listens before
    the server starts: the first connection waits in its backlog, so nothing polls."""
    app = create_app(db, **options)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", proxy_headers=False))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{sock.getsockname()[1]}"
        finally:
            server.should_exit = True
            await anyio.to_thread.run_sync(thread.join, BOUND)


def session_cookie_header(response: httpx.Response) -> str:
    found = [h for h in response.headers.get_list("set-cookie") if h.startswith(f"{SESSION_COOKIE}=")]
    assert len(found) == 1, response.headers
    return found[0].lower()


async def test_the_cookie_is_secure_behind_a_tls_proxy_only_when_the_proxy_is_trusted(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'proxy.db'}"
    tokens = await add_people(db)
    forwarded = {"X-Forwarded-Proto": "https"}
    for trusted, secure in (((), False), (["10.0.0.0/8"], False), (["127.0.0.1"], True), (["127.0.0.0/8"], True)):
        async with plain_server(db, auth=True, trusted_proxies=trusted) as base:
            async with httpx.AsyncClient(base_url=base, timeout=BOUND) as browser:
                done = await sign_in(browser, tokens["alice"], **forwarded)
                assert ("; secure" in session_cookie_header(done)) is secure, trusted
            async with httpx.AsyncClient(base_url=base, timeout=BOUND) as browser:
                plain = await sign_in(browser, tokens["alice"])  # no header: plain HTTP
                assert "; secure" not in session_cookie_header(plain)
    with pytest.raises(ValueError, match="not an IP address"):
        create_app("memory://", trusted_proxies=["proxy.example"])


@pytest.mark.slow
async def test_interlock_serve_believes_forwarded_https_only_from_the_proxies_it_is_told(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'served.db'}"
    tokens = await add_people(db)
    for args, secure in (((), False), (("--trusted-proxy", "127.0.0.1"), True)):
        async with serve("--db", db, *args) as served, httpx.AsyncClient(base_url=served.url, timeout=BOUND) as browser:
            done = await sign_in(browser, tokens["alice"], **{"X-Forwarded-Proto": "https"})
            assert ("; secure" in session_cookie_header(done)) is secure, args


async def test_an_inbox_stream_ends_when_its_session_runs_out(world: tuple[str, str, dict[str, str]]) -> None:
    """A session is 7 days old at most: its live stream, opened before, ends then too, as
    at a sign-out, rather than running on with nothing that lets it (a session made short here)."""
    base, db, tokens = world
    async with interlock.connect(db) as broker:
        session = issue_session(datetime.now(UTC), lifetime=timedelta(seconds=2))
        assert await broker.store.start_session(hash_token(tokens["alice"]), session) is not None
    cookies = {SESSION_COOKIE: session.secret}
    async with httpx.AsyncClient(base_url=base, cookies=cookies, timeout=BOUND) as browser:
        with anyio.fail_after(BOUND):
            async with aconnect_sse(browser, "GET", "/inbox/stream") as stream:
                assert stream.response.status_code == 200
                events = stream.aiter_sse()
                ended = await anext(e async for e in events if e.event == "dropped")
                assert json.loads(ended.data) == {"reason": "your session ended"}
        assert (await browser.get("/inbox/stream")).status_code == 401
