"""Sign-in links by email, through a real SMTP server (aiosmtpd): asked for on the sign-in
page, mailed to a person known here at their routing address, working once and opening the
page they were going to; the same answer for an address nobody has (no mail then); capped
per address and per client; not offered without an email channel."""

from __future__ import annotations

import asyncio
import html
import logging
import re
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

import interlock
from asgi_support import InProcessServer, serving
from interlock.broker import LocalBroker
from interlock.principals import Principal, issue_token
from interlock.routing import routing_from_dict
from interlock.server.app import create_app

from .test_email import Mailbox, mailbox  # noqa: F401 - the fixture

pytestmark = pytest.mark.anyio
SIGN_IN_KEY = "email-sign-in-secret-key-of-32-characters"


def routing_doc(port: int) -> dict[str, Any]:
    return {
        "inbox_url": "http://inbox.example",
        "channels": {"mail": {"type": "email", "host": "127.0.0.1", "port": port, "from": "interlock@example.com"}},
        "recipients": {
            "alice": {"channels": ["mail"], "addresses": {"mail": "alice@example.com"}},
            "carol": {"channels": ["mail"], "addresses": {"mail": "carol@example.com"}},  # no person here
        },
    }


@dataclass
class World:
    server: InProcessServer
    broker: LocalBroker

    async def settled(self) -> None:
        """Wait (bounded) for the mails the server is sending in the background."""
        async with asyncio.timeout(20):
            await asyncio.gather(*self.server.app.state.interlock.tasks)


@pytest.fixture
async def world(tmp_path: Path, mailbox: Mailbox) -> AsyncIterator[World]:  # noqa: F811
    async with interlock.connect(f"sqlite:///{tmp_path / 'mail.db'}") as broker:
        assert isinstance(broker, LocalBroker)
        await broker.save_principal(Principal("alice", "human"))
        app = create_app(broker=broker, secret_key=SIGN_IN_KEY, routing=routing_from_dict(routing_doc(mailbox.port)))
        async with serving(app) as server:
            yield World(server, broker)


def hidden(page: str) -> dict[str, str]:
    found = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', page)
    return {name: html.unescape(value) for name, value in found}


async def ask_for_link(client: httpx.AsyncClient, address: str, next_path: str = "") -> httpx.Response:
    """Open the sign-in page (from `next_path`) and ask for a link by email, as a browser would."""
    form = await client.get("/signin", params={"next": next_path} if next_path else None)
    assert "Email me a sign-in link" in form.text
    email_form = form.text[form.text.index('action="http://127.0.0.1/signin/email"') :]
    return await client.post("/signin/email", data={**hidden(email_form), "email": address})


def link_in(message: Any) -> str:
    """The sign-in link of a mail, as a path on the server."""
    text = message.get_body(("plain",)).get_content()
    found = re.search(r"http://inbox\.example(/signin/link\?\S+)", text)
    assert found is not None, text
    return found[1]


async def follow(client: httpx.AsyncClient, path: str) -> httpx.Response:
    shown = await client.get(path)
    assert shown.status_code == 200, shown.text
    return await client.post("/signin/link", data=hidden(shown.text))


async def test_a_person_gets_a_link_by_email_that_signs_them_in_once_and_opens_their_page(
    world: World,
    mailbox: Mailbox,  # noqa: F811
) -> None:
    # alice asked it (so she may see it) of someone with no route (so nothing is mailed about it)
    request = await world.broker.create(interlock.Confirm("Ship it?"), to="bob", requester="alice")
    async with world.server.client() as browser:
        asked = await ask_for_link(browser, "Alice@Example.com", f"/requests/{request.id}")
        assert asked.status_code == 200
        assert "If Alice@Example.com is the address of someone here, a sign-in link is on its way" in asked.text
        [message] = await mailbox.until(1)
        assert mailbox.envelopes[0] == ("interlock@example.com", ["alice@example.com"])  # as the routing has it
        assert message["Subject"] == "Your sign-in link to interlock"
        assert "as alice" in message.get_body(("plain",)).get_content() and "15 minutes" in str(message)
        link = link_in(message)
        done = await follow(browser, link)
        assert done.status_code == 303 and done.headers["location"] == f"/requests/{request.id}"
        page = await browser.get(f"/requests/{request.id}")
        assert page.status_code == 200 and "Signed in as <strong>alice</strong>" in page.text
    async with world.server.client() as other:
        again = await follow(other, link)
        assert again.status_code == 400 and "used already or has expired" in again.text
        assert "Ask for a new one by email" in again.text


async def test_an_address_nobody_here_has_gets_the_same_answer_and_no_mail(
    world: World,
    mailbox: Mailbox,  # noqa: F811
) -> None:
    async with world.server.client() as browser:
        answers = {}
        for address in ("nobody@example.com", "carol@example.com", "alice@example.com"):
            response = await ask_for_link(browser, address)
            answers[address] = (response.status_code, response.text.count("is on its way"))
        await world.settled()
    assert set(answers.values()) == {(200, 1)}
    [message] = await mailbox.until(1)
    assert message["To"] == "alice@example.com" and len(mailbox.messages) == 1  # carol is no person here


async def test_links_are_capped_per_address_whether_known_or_not_and_per_client(
    world: World,
    mailbox: Mailbox,  # noqa: F811
) -> None:
    async with world.server.client() as browser:
        for address in ("alice@example.com", "nobody@example.com"):
            statuses = [(await ask_for_link(browser, address)).status_code for _ in range(4)]
            assert statuses == [200, 200, 200, 429], address
        capped = await ask_for_link(browser, "nobody@example.com")
        assert "Too many sign-in links were asked for. Try again in 5 minutes." in capped.text
        # nine asks from this client so far: one more (for another address) is its tenth and last
        assert (await ask_for_link(browser, "someone@example.com")).status_code == 200
        assert (await ask_for_link(browser, "someone-else@example.com")).status_code == 429
        await world.settled()
    assert len(mailbox.messages) == 3


async def test_a_bad_address_or_a_forged_form_is_refused(world: World) -> None:
    async with world.server.client() as browser:
        assert (await ask_for_link(browser, "not an address")).status_code == 422
        forged = await browser.post("/signin/email", data={"email": "alice@example.com", "csrf": "made-up"})
        assert forged.status_code == 403
    assert not world.server.app.state.interlock.tasks


async def test_there_is_no_link_by_email_without_an_email_channel(tmp_path: Path) -> None:
    routing = routing_from_dict({"channels": {"hook": {"type": "webhook", "url": "http://127.0.0.1:9/"}}})
    app = create_app(f"sqlite:///{tmp_path / 'x.db'}", secret_key=SIGN_IN_KEY, routing=routing)
    async with serving(app) as server, server.client() as browser:
        page = await browser.get("/signin")
        assert "Email me" not in page.text
        refused = await browser.post("/signin/email", data={**hidden(page.text), "email": "alice@example.com"})
        assert refused.status_code == 404 and "no sign-in links by email" in refused.text


async def test_the_mailed_link_is_to_the_routing_s_inbox_url_whatever_host_the_browser_named(
    world: World,
    mailbox: Mailbox,  # noqa: F811
) -> None:
    async with world.server.client() as browser:
        form = await browser.get("/signin")
        data = {**hidden(form.text), "email": "alice@example.com"}
        assert (await browser.post("/signin/email", data=data, headers={"Host": "evil.example"})).status_code == 200
    [message] = await mailbox.until(1)
    assert "evil.example" not in str(message)
    assert link_in(message).startswith("/signin/link?code=")


async def test_a_link_the_mail_server_did_not_take_is_one_warning_naming_whom_and_the_channel(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as held:  # a port nothing listens on: the mail server is down
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
    async with interlock.connect(f"sqlite:///{tmp_path / 'down.db'}") as broker:
        assert isinstance(broker, LocalBroker)
        await broker.save_principal(Principal("alice", "human"))
        app = create_app(broker=broker, secret_key=SIGN_IN_KEY, routing=routing_from_dict(routing_doc(port)))
        async with serving(app) as server, server.client() as browser:
            assert (await ask_for_link(browser, "alice@example.com")).status_code == 200  # the same answer
            await World(server, broker).settled()
    [line] = [r for r in caplog.records if "sign-in link" in r.getMessage()]
    assert line.levelno == logging.WARNING and line.exc_info is None  # the mail server down: no bug to trace
    assert line.getMessage().startswith("mailing alice a sign-in link through mail failed: ")
    assert f"port {port}" in line.getMessage() and "ilk_" not in line.getMessage()


async def test_a_person_whose_every_token_is_revoked_is_mailed_no_link_and_one_mailed_before_signs_nobody_in(
    world: World,
    mailbox: Mailbox,  # noqa: F811
) -> None:
    token = issue_token("alice", datetime.now(UTC))
    await world.broker.save_token(token)
    async with world.server.client() as browser:
        await ask_for_link(browser, "alice@example.com")
        [message] = await mailbox.until(1)
        await world.broker.revoke_tokens(principal="alice")  # `interlock token revoke alice`
        refused = await follow(browser, link_in(message))  # mailed before: it signs her in no more
        assert refused.status_code == 400, refused.text
        assert "Signed in as" not in (await browser.get("/", follow_redirects=True)).text
        asked = await ask_for_link(browser, "alice@example.com")
        assert asked.status_code == 200 and "is on its way" in asked.text  # the same answer for any address
        await world.settled()
    assert len(mailbox.messages) == 1  # and no link mailed to her
    await world.broker.save_token(issue_token("alice", datetime.now(UTC)))  # `token create alice`: back
    async with world.server.client() as browser:
        await ask_for_link(browser, "alice@example.com")
        [_, message] = await mailbox.until(2)
        assert (await follow(browser, link_in(message))).status_code == 303


async def test_a_token_revoke_landing_between_the_check_and_the_session_token_signs_nobody_in(
    world: World,
    mailbox: Mailbox,  # noqa: F811
) -> None:
    await world.broker.save_token(issue_token("alice", datetime.now(UTC)))  # a token of her own
    broker = world.broker
    checked = broker.tokens_all_revoked

    async def then_revoked(name: str) -> bool:  # `token revoke alice` (another node, the CLI) lands right after
        result = await checked(name)
        await broker.revoke_tokens(principal=name)
        return result

    async with world.server.client() as browser:
        await ask_for_link(browser, "alice@example.com")
        [message] = await mailbox.until(1)
        broker.tokens_all_revoked = then_revoked  # type: ignore[method-assign]
        try:
            done = await follow(browser, link_in(message))
        finally:
            del broker.tokens_all_revoked
        assert await broker.tokens_all_revoked("alice")
        assert done.status_code == 400, done.text
        assert "Signed in as" not in (await browser.get("/", follow_redirects=True)).text
    assert not [t for t in await broker.list_tokens() if t.principal == "alice"]  # no live session token left


async def test_a_person_who_signs_in_by_email_only_is_cut_off_by_token_revoke(
    world: World,
    mailbox: Mailbox,  # noqa: F811
) -> None:
    async with world.server.client() as browser:
        await ask_for_link(browser, "alice@example.com")
        [message] = await mailbox.until(1)
        assert (await follow(browser, link_in(message))).status_code == 303  # a session token, for_session
    assert await world.broker.revoke_tokens(principal="alice") == 1  # `interlock token revoke alice`: "revoked 1"
    async with world.server.client() as browser:
        await ask_for_link(browser, "alice@example.com")
        await world.settled()
    assert len(mailbox.messages) == 1  # no link mailed to her
    assert await world.broker.revoke_tokens(principal="alice") == 0  # again: nothing left to revoke
    assert await world.broker.tokens_all_revoked("alice")
    await world.broker.save_token(issue_token("alice", datetime.now(UTC)))  # `token create alice`: back
    assert not await world.broker.tokens_all_revoked("alice")
