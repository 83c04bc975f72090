"""How people are reached, in a real headless Chromium against a real server that mails
through a real SMTP server (aiosmtpd): a link in an email, opened signed out, goes through
the sign-in to the request's own page, where it is answered; the page's timeline says who
was notified through which channel, and its deliveries show a dead letter; a sign-in link
asked for by email; the one-click answer page, in the inbox's look and dark with the
system, used once."""

from __future__ import annotations

import email
import email.policy
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from playwright.sync_api import Browser, Page, expect

from interlock import Confirm, Text
from interlock.routing import Routing, routing_from_dict

from .test_web_inbox import (
    Server,
    ask,
    serve,
    sign_in,
    stored,
)

pytestmark = pytest.mark.skipif(
    not Path("/usr/bin/chromium").exists(), reason="needs Debian's chromium at /usr/bin/chromium"
)
BOUND = 20.0


@dataclass
class Mailbox:
    """What a real SMTP server on a loopback port received (its own thread writes it)."""

    port: int = 0
    messages: list[EmailMessage] = field(default_factory=list)
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def until(self, count: int) -> list[EmailMessage]:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.messages) >= count, BOUND), self.messages
            return self.messages[:count]

    def to(self, address: str, subject: str = "") -> EmailMessage:
        """The first message to `address` (whose subject starts so), once it came."""

        def found() -> EmailMessage | None:
            return next(
                (m for m in self.messages if m["To"] == address and m["Subject"].startswith(subject)),
                None,
            )

        with self.arrived:
            assert self.arrived.wait_for(lambda: found() is not None, BOUND), self.messages
            message = found()
            assert message is not None
            return message


class _Handler:
    def __init__(self, box: Mailbox) -> None:
        self.box = box

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # aiosmtpd calls it by this name
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        with self.box.arrived:
            self.box.messages.append(parsed)
            self.box.arrived.notify_all()
        return "250 OK"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    box = Mailbox(port=free_port())
    controller = Controller(_Handler(box), hostname="127.0.0.1", port=box.port)
    controller.start()
    try:
        yield box
    finally:
        controller.stop()


def routing_for(port: int) -> Callable[[str], Routing]:
    def make(url: str) -> Routing:
        return routing_from_dict(
            {
                "inbox_url": url,
                "max_attempts": 1,
                "channels": {
                    "mail": {"type": "email", "host": "127.0.0.1", "port": port, "from": "interlock@example.com"}
                },
                "recipients": {
                    "alice": {"channels": ["mail"], "addresses": {"mail": "alice@example.com"}},
                    "bob": {"channels": ["mail"]},  # no address: a dead letter at once
                },
            }
        )

    return make


@pytest.fixture
def server(tmp_path: Path, mailbox: Mailbox) -> Iterator[Server]:
    with serve(tmp_path / "reach.db", routing=routing_for(mailbox.port)) as s:
        yield s


def plain(message: EmailMessage) -> str:
    body = message.get_body(("plain",))
    assert body is not None
    return str(body.get_content())


def link_after(text: str, label: str) -> str:
    found = re.search(rf"{re.escape(label)}:?\s+(http://\S+)", text)
    assert found is not None, text
    return found[1]


def until_delivered(server: Server, request_id: str, count: int = 1) -> None:
    """Wait (bounded) until `count` deliveries of the request are no longer pending: the
    server's loop stores them on its own thread, which sends this one no signal."""
    deadline = time.monotonic() + BOUND
    while True:
        found = server.run(server.broker.store.list_deliveries(request_id=request_id))
        if len(found) >= count and all(d.status != "pending" for d in found):
            return
        assert time.monotonic() < deadline, found
        time.sleep(0.05)


def test_a_link_in_an_email_leads_through_the_sign_in_to_the_request_answered_there(
    server: Server, mailbox: Mailbox, page: Page
) -> None:
    request_id = ask(server, Text("Which branch should I release from?"), title="Release 2.4")
    message = mailbox.to("alice@example.com")
    link = link_after(plain(message), "Answer in the inbox")
    assert link == f"{server.url}/requests/{request_id}"

    page.goto(link)  # signed out, as from a mail program
    expect(page).to_have_url(re.compile(r"/signin\?next=%2Frequests%2F"))
    page.get_by_label("Token").fill(server.tokens["alice"])
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(link)
    page.get_by_role("textbox", name="Which branch should I release from?").fill("release/2.4")
    page.get_by_role("button", name="Send answer").click()
    expect(page.locator("#request-state")).to_have_text("answered")
    assert stored(server, request_id).answer == "release/2.4"

    until_delivered(server, request_id, 2)  # the notice, and that it was answered
    page.reload()
    timeline = page.locator(".timeline li")
    expect(timeline.filter(has_text="Notified alice via mail (email)")).to_have_count(1)
    expect(timeline.filter(has_text="Told alice via mail (email) that it was answered")).to_have_count(1)
    rows = page.locator("table.deliveries tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first).to_have_attribute("data-status", "delivered")


def test_a_dead_letter_is_on_the_request_page_and_the_nav_leads_to_the_dead_letters(
    server: Server, mailbox: Mailbox, page: Page
) -> None:
    request_id = ask(server, Confirm("Restart the queue?"), to="bob")
    until_delivered(server, request_id)
    sign_in(page, server, "bob")
    page.goto(f"{server.url}/requests/{request_id}")
    dead = page.locator(".timeline li[data-kind=undelivered]")
    expect(dead).to_contain_text("Could not notify bob via mail (email)")
    expect(dead).to_contain_text("no email address for 'bob'")
    row = page.locator("table.deliveries tbody tr[data-status=dead]")
    expect(row).to_contain_text("mail")
    expect(row.get_by_role("button", name="Send again")).to_be_visible()
    page.get_by_role("navigation", name="Views").get_by_role("link", name="Dead letters").click()
    expect(page.get_by_role("heading", name="Dead letters")).to_be_visible()
    expect(page.locator("table.deliveries tbody tr")).to_have_count(1)


def test_a_sign_in_link_asked_for_by_email_opens_the_page_the_person_was_going_to(
    server: Server, mailbox: Mailbox, page: Page
) -> None:
    request_id = ask(server, Text("Anything to add?"), to="carol", requester="alice")  # nothing mailed about it
    page.goto(f"{server.url}/requests/{request_id}")
    expect(page).to_have_url(re.compile(r"/signin\?next="))
    page.get_by_label("Email address").fill("alice@example.com")
    page.get_by_role("button", name="Email me a sign-in link").click()
    expect(page.get_by_role("status")).to_contain_text("a sign-in link is on its way")
    link = link_after(plain(mailbox.to("alice@example.com", "Your sign-in link")), "within 15 minutes")
    page.goto(link)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{server.url}/requests/{request_id}")
    expect(page.locator(".who")).to_contain_text("alice")


def test_the_one_click_answer_page_looks_like_the_inbox_follows_a_dark_system_and_works_once(
    server: Server, mailbox: Mailbox, browser: Browser
) -> None:
    request_id = ask(server, Confirm("Ship it?"), title="Deploy")
    yes = link_after(plain(mailbox.to("alice@example.com")), "Yes")
    ctx = browser.new_context(color_scheme="dark")
    try:
        p = ctx.new_page()
        p.goto(yes)
        expect(p.get_by_role("heading", name="Deploy")).to_be_visible()
        assert p.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(20, 23, 28)"
        expect(p.get_by_text("Answer as alice")).to_be_visible()
        p.get_by_role("button", name="Yes").click()
        expect(p.get_by_role("heading", name="Answer recorded")).to_be_visible()
        assert stored(server, request_id).response.via == "email"  # type: ignore[union-attr]
        p.goto(yes)  # the same link again
        expect(p.get_by_role("alert")).to_contain_text("This link was already used, by alice at")
        p.get_by_role("link", name="Open the request in the inbox").click()
        expect(p).to_have_url(re.compile(r"/signin\?next=%2Frequests%2F"))
    finally:
        ctx.close()
