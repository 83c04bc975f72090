"""Email through a real SMTP server (aiosmtpd): the question in an HTML and plain-text
message, one-click answers that are signed, bound, expiring, single-use and spent once a
request is answered, recorded `via: email`; a link to the inbox for what one click cannot answer."""

from __future__ import annotations

import asyncio
import email
import email.policy
import html
import re
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiosmtpd.controller import Controller

import interlock
from asgi_support import serving
from interlock import Choice, Confirm, Form
from interlock.broker import LocalBroker
from interlock.channels.links import AnswerLinks, InvalidLink
from interlock.model import build_request
from interlock.principals import Principal, issue_token
from interlock.routing import routing_from_dict
from interlock.server.app import create_app

from .receiver import eventually

pytestmark = pytest.mark.anyio


@dataclass
class Mailbox:
    port: int = 0
    messages: list[EmailMessage] = field(default_factory=list)
    envelopes: list[tuple[str, list[str]]] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def until(self, count: int, timeout: float = 20.0) -> list[EmailMessage]:
        async with asyncio.timeout(timeout):
            while len(self.messages) < count:
                self.arrived.clear()
                if len(self.messages) >= count:
                    break
                await self.arrived.wait()
        return self.messages[:count]


class _Handler:
    def __init__(self, box: Mailbox, loop: asyncio.AbstractEventLoop) -> None:
        self.box, self.loop = box, loop

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # aiosmtpd calls it by this name
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)

        def record() -> None:
            self.box.messages.append(parsed)
            self.box.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
            self.box.arrived.set()

        self.loop.call_soon_threadsafe(record)
        return "250 OK"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def mailbox() -> AsyncIterator[Mailbox]:
    box = Mailbox(port=free_port())
    controller = Controller(_Handler(box, asyncio.get_running_loop()), hostname="127.0.0.1", port=box.port)
    await asyncio.to_thread(controller.start)
    try:
        yield box
    finally:
        await asyncio.to_thread(controller.stop)


def routing_doc(port: int, address: str = "alice@example.com") -> dict[str, Any]:
    return {
        "inbox_url": "http://inbox.example",
        "retry_first": 0.05,
        "retry_cap": 0.1,
        "channels": {"mail": {"type": "email", "host": "127.0.0.1", "port": port, "from": "interlock@example.com"}},
        "recipients": {
            "alice": {"channels": ["mail"], "addresses": {"mail": address}},
            "bob": {"channels": ["mail"]},
        },
    }


@dataclass
class Server:
    base: str
    db: str


@pytest.fixture
def server(tmp_path: Path, serve: Callable[..., AbstractContextManager[str]], mailbox: Mailbox) -> Iterator[Server]:
    db = f"sqlite:///{tmp_path / 'mail.db'}"
    with serve(db, auth=False, routing=routing_from_dict(routing_doc(mailbox.port))) as base:
        yield Server(base, db)


def parts(message: EmailMessage) -> tuple[str, str]:
    plain = message.get_body(("plain",))
    rich = message.get_body(("html",))
    assert plain is not None and rich is not None
    return plain.get_content().replace("\r\n", "\n"), rich.get_content().replace("\r\n", "\n")


def answer_links(text: str) -> dict[str, str]:
    """The one-click links in the plain-text part, by label, as paths on the server."""
    return {m[1]: m[2] for m in re.finditer(r"^  (\w+): http://inbox\.example(/answer/\S+)$", text, re.MULTILINE)}


async def create(server: Server, body: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server.base, timeout=20) as client:
        response = await client.post("/api/v1/requests", json=body)
        assert response.status_code == 201, response.text
        return dict(response.json())


async def test_a_confirm_request_is_answered_with_one_click_from_the_email(server: Server, mailbox: Mailbox) -> None:
    request = await create(
        server, {"to": "alice", "title": "Deploy", "asks": [{"type": "confirm", "prompt": "Ship <it>?"}]}
    )
    [message] = await mailbox.until(1)
    assert mailbox.envelopes[0] == ("interlock@example.com", ["alice@example.com"])
    assert message["To"] == "alice@example.com" and "Deploy" in message["Subject"]
    text, rich = parts(message)
    assert "Ship <it>?" in text and "Ship &lt;it&gt;?" in rich
    links = answer_links(text)
    assert set(links) == {"Yes", "No"}
    assert f"http://inbox.example/requests/{request['id']}" in text
    async with httpx.AsyncClient(base_url=server.base, timeout=20) as client:
        page = await client.get(links["Yes"])  # a mail scanner fetching the link answers nothing
        assert page.status_code == 200 and "<button" in page.text and "alice" in page.text
        assert (await client.get(f"/api/v1/requests/{request['id']}")).json()["status"] == "pending"
        assert "/static/inbox.css" in page.text and page.headers["referrer-policy"] == "same-origin"  # the inbox's look
        done = await client.post(links["Yes"])
        assert done.status_code == 200 and "Answer recorded" in done.text
        for twice in (await client.post(links["Yes"]), await client.get(links["Yes"])):  # single-use
            assert twice.status_code == 409 and "This link was already used, by alice at" in twice.text
        settled = (await client.get(f"/api/v1/requests/{request['id']}")).json()
        assert settled["status"] == "answered"
        assert (settled["response"]["by"], settled["response"]["via"]) == ("alice", "email")
        assert list(settled["response"]["answers"].values()) == [True]
        spent = await client.post(links["No"])
        assert spent.status_code == 409 and "already answered by alice at" in spent.text
        forged = links["No"][:-3] + ("AAA" if not links["No"].endswith("AAA") else "BBB")
        assert (await client.post(forged)).status_code == 400
    [_, ended] = await mailbox.until(2)
    assert ended["Subject"].startswith("No longer waiting for you (answered)")
    assert answer_links(parts(ended)[0]) == {}


SECRET_KEY = "the-test-servers-secret-key-for-links"


def mailed_about(messages: list[EmailMessage], to: str, request_id: str) -> EmailMessage:
    [found] = [m for m in messages if m["To"] == to and m["X-Interlock-Request"] == request_id]
    return found


async def test_an_escalation_to_someone_who_may_not_answer_offers_no_answers_and_says_whom_it_waits_on(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], mailbox: Mailbox
) -> None:
    """bob's request is escalated to alice, who may neither answer nor open it: her email
    has no answer links and no link to a page that would refuse her; it says it waits on
    bob, since when, and whom to remind. A link signed for her anyway (as the email once
    carried) is refused and changes nothing; bob's own link answers."""
    db = f"sqlite:///{tmp_path / 'mail.db'}"
    doc = routing_doc(mailbox.port)
    doc["recipients"] = {
        "alice": {"channels": ["mail"], "addresses": {"mail": "alice@example.com"}},
        "bob": {
            "channels": ["mail"],
            "addresses": {"mail": "bob@example.com"},
            "escalate_after": "0.2s",
            "escalate_to": "alice",
        },
    }
    confirm = {"type": "confirm", "prompt": "Rotate the keys?"}
    async with (
        serve_apart(db, auth=False, routing=routing_from_dict(doc), secret_key=SECRET_KEY) as base,
        httpx.AsyncClient(base_url=base, timeout=20) as client,
    ):
        to_bob = (await client.post("/api/v1/requests", json={"to": "bob", "asks": [confirm]})).json()
        messages = await mailbox.until(2)
        escalated = mailed_about(messages, "alice@example.com", to_bob["id"])
        assert escalated["Subject"] == "Nobody has answered yet: Rotate the keys?"
        text, rich = parts(escalated)
        since = datetime.fromisoformat(to_bob["created_at"]).strftime("%Y-%m-%d %H:%M UTC")
        said = (
            f"it waits on bob since {since}, and was escalated to you (alice). It is not yours to answer: "
            "only bob can. Nor may you open it in the inbox: remind bob."
        )
        assert said in text and said in rich
        assert "Rotate the keys?" in text
        assert answer_links(text) == {} and "/answer/" not in rich
        assert "http://inbox.example" not in text + rich  # its page would refuse her

        async with interlock.connect(db) as broker:
            request = await broker.get(to_bob["id"])
        signed_for_alice = AnswerLinks(SECRET_KEY, "http://inbox.example").link(request, "alice", True)
        forged = signed_for_alice.removeprefix("http://inbox.example")
        for refused in (await client.get(forged), await client.post(forged)):
            assert refused.status_code == 403 and "Not yours to answer" in refused.text
        assert (await client.get(f"/api/v1/requests/{to_bob['id']}")).json()["status"] == "pending"

        bobs = answer_links(parts(mailed_about(messages, "bob@example.com", to_bob["id"]))[0])
        done = await client.post(bobs["Yes"])
        assert done.status_code == 200 and "Answer recorded" in done.text


async def test_an_escalation_to_a_member_of_the_request_s_team_keeps_its_answers_and_they_answer(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], mailbox: Mailbox
) -> None:
    """A request to the team ops nobody answered is escalated to carol, one of its members:
    she may answer it, so her email has its one-click answers and a link to it in the
    inbox, and says whom it waits on; her Yes answers it, by her."""
    db = f"sqlite:///{tmp_path / 'mail.db'}"
    async with interlock.connect(db) as broker:
        assert isinstance(broker, LocalBroker)
        for name in ("alice", "carol"):
            await broker.save_principal(Principal(name, "human"))
    doc = routing_doc(mailbox.port)
    doc["recipients"] = {"carol": {"channels": ["mail"], "addresses": {"mail": "carol@example.com"}}}
    doc["teams"] = {
        "ops": {
            "members": ["alice", "carol"],
            "channels": ["mail"],
            "addresses": {"mail": "ops@example.com"},
            "escalate_after": "0.2s",
            "escalate_to": "carol",
        }
    }
    confirm = {"type": "confirm", "prompt": "Restart the workers?"}
    async with (
        serve_apart(db, auth=False, routing=routing_from_dict(doc), secret_key=SECRET_KEY) as base,
        httpx.AsyncClient(base_url=base, timeout=20) as client,
    ):
        to_ops = (await client.post("/api/v1/requests", json={"to": "ops", "asks": [confirm]})).json()
        messages = await mailbox.until(2)
        escalated = mailed_about(messages, "carol@example.com", to_ops["id"])
        text = parts(escalated)[0]
        assert "it waits on ops since" in text and "escalated to you (carol)." in text
        assert "not yours to answer" not in text
        links = answer_links(text)
        assert set(links) == {"Yes", "No"}
        assert f"Or answer in the inbox: http://inbox.example/requests/{to_ops['id']}" in text
        done = await client.post(links["Yes"])
        assert done.status_code == 200 and "Answer recorded" in done.text
        settled = (await client.get(f"/api/v1/requests/{to_ops['id']}")).json()
        assert (settled["status"], settled["response"]["by"], settled["response"]["via"]) == (
            "answered",
            "carol",
            "email",
        )


async def test_a_team_s_email_link_answers_nothing_once_its_person_left_the_team(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], mailbox: Mailbox
) -> None:
    """A team's request was mailed to alice before she left the team: its links answer
    nothing then, as no other surface lets her."""
    db = f"sqlite:///{tmp_path / 'mail.db'}"
    async with interlock.connect(db) as broker:
        assert isinstance(broker, LocalBroker)
        await broker.save_principal(Principal("alice", "human"))
        await broker.add_team_members("ops", ["alice"])
    doc = routing_doc(mailbox.port)
    doc["teams"] = {"ops": {"members": ["alice"]}}
    confirm = {"type": "confirm", "prompt": "Ship it?"}
    async with (
        serve_apart(db, auth=False, routing=routing_from_dict(doc)) as base,
        httpx.AsyncClient(base_url=base, timeout=20) as client,
    ):
        to_ops = (await client.post("/api/v1/requests", json={"to": "ops", "asks": [confirm]})).json()
        [message] = await mailbox.until(1)
        link = answer_links(parts(message)[0])["Yes"]
        async with interlock.connect(db) as broker:
            assert await broker.remove_team_member("ops", "alice")
        for refused in (await client.get(link), await client.post(link)):
            assert refused.status_code == 403 and "Not yours to answer" in refused.text
        assert (await client.get(f"/api/v1/requests/{to_ops['id']}")).json()["status"] == "pending"


async def test_an_email_link_answers_nothing_once_every_token_of_its_person_is_revoked(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], mailbox: Mailbox
) -> None:
    """`interlock token revoke alice` cuts her off: a link mailed to her before answers
    nothing, as her revoked tokens do not; `token create alice` gives her them back."""
    db = f"sqlite:///{tmp_path / 'mail.db'}"
    async with interlock.connect(db) as broker:
        assert isinstance(broker, LocalBroker)
        await broker.save_principal(Principal("alice", "human"))
        await broker.save_token(issue_token("alice", datetime.now(UTC)))
    confirm = {"type": "confirm", "prompt": "Ship it?"}
    async with (
        serve_apart(db, auth=False, routing=routing_from_dict(routing_doc(mailbox.port))) as base,
        httpx.AsyncClient(base_url=base, timeout=20) as client,
    ):
        request = (await client.post("/api/v1/requests", json={"to": "alice", "asks": [confirm]})).json()
        [message] = await mailbox.until(1)
        link = answer_links(parts(message)[0])["Yes"]
        async with interlock.connect(db) as broker:
            assert isinstance(broker, LocalBroker)
            await broker.revoke_tokens(principal="alice")
        for refused in (await client.get(link), await client.post(link)):
            assert refused.status_code == 403 and "Not yours to answer" in refused.text
            assert "Every token of alice&#39;s is revoked here" in refused.text
        assert (await client.get(f"/api/v1/requests/{request['id']}")).json()["status"] == "pending"
        async with interlock.connect(db) as broker:
            assert isinstance(broker, LocalBroker)
            await broker.save_token(issue_token("alice", datetime.now(UTC)))
        assert (await client.post(link)).status_code == 200
        assert (await client.get(f"/api/v1/requests/{request['id']}")).json()["status"] == "answered"


def team_routing(port: int, members: list[str]) -> dict[str, Any]:
    """The ops team, of `members`, with its own address (a shared mailbox), and alice."""
    doc = routing_doc(port)
    doc["teams"] = {"ops": {"members": members, "channels": ["mail"], "addresses": {"mail": "ops@example.com"}}}
    return doc


def signed_for(db_request: Any, name: str, answer: Any = True) -> str:
    """A link signed with the server's key for `name`, as a path on the server."""
    return (
        AnswerLinks(SECRET_KEY, "http://inbox.example")
        .link(db_request, name, answer)
        .removeprefix("http://inbox.example")
    )


async def test_an_email_to_a_team_s_own_address_offers_no_one_click_answers_and_sends_members_to_the_inbox(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], mailbox: Mailbox
) -> None:
    """The store keeps the team ops (alice, carol), whose route mails ops@, a mailbox they
    share: a link there would answer for whoever pressed it, which interlock cannot name,
    so the email has no answer links; it says so and links to the request in the inbox,
    where its members answer as themselves. A link signed for ops anyway is refused and
    changes nothing; alice's own email still answers with one click."""
    db = f"sqlite:///{tmp_path / 'mail.db'}"
    async with interlock.connect(db) as broker:
        assert isinstance(broker, LocalBroker)
        for name in ("alice", "carol"):
            await broker.save_principal(Principal(name, "human"))
    doc = team_routing(mailbox.port, ["alice", "carol"])
    confirm = {"type": "confirm", "prompt": "Restart the workers?"}
    async with (
        serve_apart(db, auth=False, routing=routing_from_dict(doc), secret_key=SECRET_KEY) as base,
        httpx.AsyncClient(base_url=base, timeout=20) as client,
    ):
        assert (await client.get("/api/v1/teams/ops")).json()["members"] == ["alice", "carol"]
        to_ops = (await client.post("/api/v1/requests", json={"to": "ops", "asks": [confirm]})).json()
        [message] = await mailbox.until(1)
        assert (message["To"], message["Subject"]) == ("ops@example.com", "An agent asks: Restart the workers?")
        text, rich = parts(message)
        assert answer_links(text) == {} and "/answer/" not in text + rich
        said = (
            "This went to the ops team's shared address, so it has no one-click answers: interlock records "
            "who answers, and a click here could not say which of you it was. Answer it in the inbox, signed "
            "in as yourself."
        )
        assert said in text and html.escape(said) in rich
        page = f"http://inbox.example/requests/{to_ops['id']}"
        assert f"Answer in the inbox as yourself: {page}" in text
        assert f'<a href="{page}">Answer in the inbox as yourself</a>' in rich

        async with interlock.connect(db) as broker:
            request = await broker.get(to_ops["id"])
        forged = signed_for(request, "ops")  # as the email had before, signed with the server's key
        for refused in (await client.get(forged), await client.post(forged)):
            assert refused.status_code == 403 and "Not yours to answer" in refused.text
            assert "would answer as the team ops" in refused.text and "<button" not in refused.text
        assert (await client.get(f"/api/v1/requests/{to_ops['id']}")).json()["status"] == "pending"
        async with interlock.connect(db) as broker:
            assert await broker.answer_link_use(AnswerLinks(SECRET_KEY, base).read(forged.split("/")[-1]).link) is None

        to_alice = (await client.post("/api/v1/requests", json={"to": "alice", "asks": [confirm]})).json()
        mine = mailed_about(await mailbox.until(2), "alice@example.com", to_alice["id"])
        links = answer_links(parts(mine)[0])
        assert set(links) == {"Yes", "No"}
        assert (await client.post(links["Yes"])).status_code == 200
        settled = (await client.get(f"/api/v1/requests/{to_alice['id']}")).json()
        assert (settled["status"], settled["response"]["by"], settled["response"]["via"]) == (
            "answered",
            "alice",
            "email",
        )


async def test_an_email_to_the_address_of_a_team_only_the_routing_names_answers_nothing_as_the_team(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], mailbox: Mailbox
) -> None:
    """The routing's team ops names people the store does not know, so the store keeps no
    team ops: its email has no answer links either, and no link to a page that would
    refuse its members; it says why. A link signed for ops (which such an email once
    carried, and the server took as an answer by ops) is refused and changes nothing."""
    db = f"sqlite:///{tmp_path / 'mail.db'}"
    doc = team_routing(mailbox.port, ["dave", "erin"])
    confirm = {"type": "confirm", "prompt": "Restart the workers?"}
    async with (
        serve_apart(db, auth=False, routing=routing_from_dict(doc), secret_key=SECRET_KEY) as base,
        httpx.AsyncClient(base_url=base, timeout=20) as client,
    ):
        assert (await client.get("/api/v1/teams/ops")).status_code == 404
        to_ops = (await client.post("/api/v1/requests", json={"to": "ops", "asks": [confirm]})).json()
        [message] = await mailbox.until(1)
        text, rich = parts(message)
        assert answer_links(text) == {} and "/answer/" not in rich
        assert "http://inbox.example" not in text + rich
        said = (
            "a click here could not say which of you it was. Nor can you open it in the inbox: none of the ops "
            "team's members is a person interlock knows. Ask whoever runs interlock to add you."
        )
        assert said in " ".join(text.split())

        async with interlock.connect(db) as broker:
            request = await broker.get(to_ops["id"])
        forged = signed_for(request, "ops")
        for refused in (await client.get(forged), await client.post(forged)):
            assert refused.status_code == 403 and "would answer as the team ops" in refused.text
        assert (await client.get(f"/api/v1/requests/{to_ops['id']}")).json()["status"] == "pending"

        answered = await client.post(f"/api/v1/requests/{to_ops['id']}/answer", json={"answer": True})
        assert answered.status_code == 200, answered.text
        [_, ended] = await mailbox.until(2)
        assert ended["Subject"].startswith("No longer waiting for you (answered)")
        assert "http://inbox.example" not in "".join(parts(ended))  # nor once it settled


async def test_a_choice_request_gets_a_link_per_option(server: Server, mailbox: Mailbox) -> None:
    ask = {"type": "choice", "prompt": "Which region?", "options": [{"id": "eu", "label": "Europe"}, "us"]}
    request = await create(server, {"to": "alice", "asks": [ask]})
    [message] = await mailbox.until(1)
    links = answer_links(parts(message)[0])
    assert set(links) == {"Europe", "us"}
    async with httpx.AsyncClient(base_url=server.base, timeout=20) as client:
        assert (await client.post(links["Europe"])).status_code == 200
        settled = (await client.get(f"/api/v1/requests/{request['id']}")).json()
        assert list(settled["response"]["answers"].values()) == ["eu"]


async def test_a_form_is_answered_in_the_inbox_through_its_link(server: Server, mailbox: Mailbox) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    request = await create(server, {"to": "alice", "asks": [{"type": "form", "prompt": "How many?", "schema": schema}]})
    [message] = await mailbox.until(1)
    text, rich = parts(message)
    assert answer_links(text) == {}
    assert f"Answer in the inbox: http://inbox.example/requests/{request['id']}" in text
    assert f'href="http://inbox.example/requests/{request["id"]}"' in rich


async def test_a_recipient_without_an_address_is_a_dead_letter_at_once(server: Server, mailbox: Mailbox) -> None:
    await create(server, {"to": "bob", "asks": [{"type": "confirm", "prompt": "Ship?"}]})
    async with interlock.connect(server.db) as broker:
        assert isinstance(broker, LocalBroker)

        async def dead() -> bool:
            return bool(await broker.store.list_deliveries(status="dead"))

        await eventually(dead)
        [letter] = await broker.store.list_deliveries(status="dead")
        assert letter.attempts == 1 and "no email address for 'bob'" in (letter.last_error or "")
    assert mailbox.messages == []


def test_an_answer_link_is_bound_to_its_request_recipient_and_answer_and_expires() -> None:
    links = AnswerLinks("a-secret-of-some-length", "http://x.example")
    now = datetime.now(UTC)
    request = build_request(Confirm("Ship?"), to="alice", expires_at=now + timedelta(hours=1))
    token = links.token(request, "alice", True, now)
    claim = links.read(token, now)
    assert (claim.request_id, claim.recipient, claim.answer) == (request.id, "alice", True)
    assert claim.expires_at <= request.expires_at  # type: ignore[operator]
    with pytest.raises(InvalidLink, match="expired"):
        links.read(token, now + timedelta(hours=2))
    body, _, signature = token.partition(".")
    other = links.token(build_request(Confirm("Other?"), to="alice"), "mallory", False, now)
    with pytest.raises(InvalidLink, match="not valid"):
        links.read(other.partition(".")[0] + "." + signature, now)
    with pytest.raises(InvalidLink, match="not valid"):
        AnswerLinks("another-secret-entirely", "http://x.example").read(token, now)
    assert body


def test_only_one_confirm_or_one_choice_ask_has_one_click_answers() -> None:
    from interlock.channels.links import quick_answers

    assert quick_answers(build_request(Confirm("Ship?"))) == [("Yes", True), ("No", False)]
    assert quick_answers(build_request(Choice("Pick", options=["a", "b"]))) == [("a", "a"), ("b", "b")]
    assert quick_answers(build_request([Confirm("A?", id="a"), Confirm("B?", id="b")])) is None
    assert quick_answers(build_request(Form("F", schema={"type": "object"}))) is None


class _Refusing:
    """A mail server that refuses every recipient, naming them, as real ones do."""

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: Any) -> str:
        return f"550 5.1.1 <{address}>: Recipient address rejected: User unknown"


@pytest.mark.parametrize("given", ["alice@example.com", "Alice Smith <alice@example.com>"], ids=["plain", "named"])
async def test_a_refused_address_is_shown_to_its_person_and_an_admin_only_its_last_error_too(
    tmp_path: Path, given: str
) -> None:
    """Where a delivery went is its recipient's (and an admin's) to read: a dead letter
    whose mail server refused the address says so to whoever asked, over the API and on
    the request's pages, without the address (nor, for an address given with a name, the
    mailbox the server names alone)."""
    port = free_port()
    controller = Controller(_Refusing(), hostname="127.0.0.1", port=port)
    await asyncio.to_thread(controller.start)
    try:
        async with interlock.connect(f"sqlite:///{tmp_path / 'mail.db'}") as broker:
            assert isinstance(broker, LocalBroker)
            tokens = {}
            for p in (Principal("alice", "human"), Principal("bob", "human")):
                await broker.save_principal(p)
                token = issue_token(p.name, datetime.now(UTC))
                await broker.save_token(token)
                tokens[p.name] = token.secret
            app = create_app(
                broker=broker,
                secret_key=SECRET_KEY,
                open_inboxes=True,
                routing=routing_from_dict(routing_doc(port, given)),
            )
            async with serving(app) as server:
                request = await broker.create(Confirm("Ship it?"), to="alice", requester="bob")

                async def dead() -> bool:
                    return bool(await broker.store.list_deliveries(request_id=request.id, status="dead"))

                await eventually(dead)
                address = "alice@example.com"
                [letter] = await broker.store.list_deliveries(request_id=request.id, status="dead")
                assert address in (letter.last_error or "")  # as the operator reads it
                for who, shown in (("alice", True), ("bob", False)):
                    headers = {"Authorization": f"Bearer {tokens[who]}"}
                    async with server.client("/api/v1", headers=headers) as api:
                        for path in (f"/requests/{request.id}/deliveries", f"/deliveries/{letter.id}"):
                            got = (await api.get(path)).json()
                            [item] = got.get("items", [got])
                            assert "refused" in item["last_error"]
                            assert (address in item["last_error"], item["address"] == given) == (shown, shown)
                    async with server.client(follow_redirects=False) as browser:
                        form = await browser.get("/signin")
                        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
                        assert csrf is not None
                        signed_in = await browser.post("/signin", data={"csrf": csrf[1], "token": tokens[who]})
                        assert signed_in.status_code == 303, signed_in.text
                        for path in (f"/requests/{request.id}", f"/inbox/deliveries?request={request.id}"):
                            page = await browser.get(path)
                            assert page.status_code == 200 and "refused" in page.text
                            assert (address in page.text) == shown
    finally:
        await asyncio.to_thread(controller.stop)
