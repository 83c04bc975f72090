"""Email and Slack notices followed end to end, as people would, against a real
`interlock serve` process with a routing file: an agent asks through the API and waits;
the email arrives at a real SMTP server (aiosmtpd), its links are read the way a mail
program shows them, and the page one opens is answered through its form; the Slack
message arrives at a fake of Slack's Web API over real HTTP, and its button's click is
posted back signed as Slack signs it. The agent's wait returns the person's answer; what
must be refused (a link used again, a link for a request that is not its person's to
answer, a tampered or expired link; a forged or stale Slack signature) is refused clearly
and changes nothing."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import email
import email.policy
import json
import os
import re
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from email.message import EmailMessage
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import anyio
import httpx
import pytest
from aiosmtpd.controller import Controller

import interlock
from cli_support import invoke
from interlock import Confirm
from interlock.channels.links import AnswerLinks
from interlock.errors import Expired
from serve_support import Served, serve
from slack_support import FakeSlack, fake_slack

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
BOUND = 20  # seconds: the most any one step may take on a busy machine
SECRET_KEY = "the-servers-secret-key-for-answer-links"
SIGNING_SECRET = "the-slack-apps-signing-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- people, and a server that tells them -------------------------------------------------


@dataclass
class Site:
    """A served store: its address, a token for each person and agent, and its server,
    which `restart` stops and starts again on the same port."""

    url: str
    served: Served
    tokens: dict[str, str]
    args: list[str]
    env: dict[str, str]
    stack: contextlib.AsyncExitStack

    def agent(self, name: str) -> interlock.Broker:
        return interlock.connect(self.url, token=self.tokens[name])

    async def restart(self) -> None:
        self.served.proc.terminate()
        with anyio.fail_after(BOUND):
            await self.served.proc.wait()
        self.served = await self.stack.enter_async_context(serve(*self.args, env=self.env))
        assert self.served.url == self.url, self.served.stderr


def people(db: str) -> dict[str, str]:
    tokens = {}
    for args in (
        ["alice", "--human"],
        ["bob", "--human"],
        ["deployer", "--agent", "--owner", "alice"],
        ["rotator", "--agent", "--owner", "bob"],
    ):
        made = invoke("token", "create", *args, "--db", db)
        assert made.returncode == 0, made.stderr
        tokens[args[0]] = made.stdout.strip()
    return tokens


@contextlib.asynccontextmanager
async def served_with_routing(folder: Path, routing: Callable[[str], str]) -> AsyncIterator[Site]:
    """`interlock serve --routing routing.toml`, with auth and a secret key, whose
    `inbox_url` is the address it serves at: the port is chosen first, as an operator
    chooses it, and chosen again if another process took it meanwhile."""
    db = f"sqlite:///{folder / 'interlock.db'}"
    tokens = people(db)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")} | {"INTERLOCK_SECRET_KEY": SECRET_KEY}
    async with contextlib.AsyncExitStack() as stack:
        for attempt in range(3):
            url = f"http://127.0.0.1:{free_port()}"
            (folder / "routing.toml").write_text(routing(url))
            args = ["--port", url.rsplit(":", 1)[1], "--db", db, "--routing", str(folder / "routing.toml")]
            try:
                served = await stack.enter_async_context(serve(*args, env=env))
            except AssertionError as exc:  # it ended before serving
                if attempt == 2 or "address already in use" not in str(exc):
                    raise
            else:
                assert served.url == url, served.stderr
                yield Site(url, served, tokens, args, env, stack)
                return


# -- email -------------------------------------------------------------------------------


@dataclass
class Mailbox:
    """What a real SMTP server on a loopback port received (its own thread writes it)."""

    port: int
    loop: asyncio.AbstractEventLoop
    messages: list[EmailMessage] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # aiosmtpd calls it by this name
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)

        def record() -> None:
            self.messages.append(parsed)
            self.arrived.set()

        self.loop.call_soon_threadsafe(record)
        return "250 OK"

    async def first(self, to: str, subject: str = "", request: str | None = None) -> EmailMessage:
        """The first message to `to` whose subject starts with `subject` (about `request`,
        if given), once it came."""
        with anyio.fail_after(BOUND):
            while True:
                for message in self.messages:
                    if (
                        message["To"] == to
                        and message["Subject"].startswith(subject)
                        and request in (None, message["X-Interlock-Request"])
                    ):
                        return message
                self.arrived.clear()
                await self.arrived.wait()


@pytest.fixture
async def mailbox() -> AsyncIterator[Mailbox]:
    box = Mailbox(free_port(), asyncio.get_running_loop())
    controller = Controller(box, hostname="127.0.0.1", port=box.port)
    await asyncio.to_thread(controller.start)
    try:
        yield box
    finally:
        await asyncio.to_thread(controller.stop)


class _Page(HTMLParser):
    """The links (`<a href>` and its words) and the forms of an HTML document, as a mail
    program or a browser reads them."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self.forms: list[dict[str, str]] = []
        self.buttons: list[str] = []
        self._href: str | None = None
        self._words: list[str] = []
        self._in_button = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "a" and "href" in found:
            self._href, self._words = found["href"], []
        elif tag == "form":
            self.forms.append(found)
        elif tag == "button":
            self._in_button, self._words = True, []

    def handle_data(self, data: str) -> None:
        if self._href is not None or self._in_button:
            self._words.append(data)

    def handle_endtag(self, tag: str) -> None:
        words = " ".join("".join(self._words).split())
        if tag == "a" and self._href is not None:
            self.links.append((words, self._href))
            self._href = None
        elif tag == "button" and self._in_button:
            self.buttons.append(words)
            self._in_button = False


def read_html(text: str) -> _Page:
    parsed = _Page()
    parsed.feed(text)
    return parsed


def shown_links(message: EmailMessage) -> dict[str, str]:
    """The links of the message's HTML part by their words, as a mail program shows them;
    the plain-text part gives the same ones."""
    rich, plain = message.get_body(("html",)), message.get_body(("plain",))
    assert rich is not None and plain is not None
    links = dict(read_html(rich.get_content()).links)
    text = plain.get_content()
    for url in links.values():
        assert url in text, (url, text)
    return links


@dataclass
class Opened:
    """A page a link opened, and what pressing its one button sends."""

    status: int
    text: str
    press: Callable[[], Any]


async def open_link(client: httpx.AsyncClient, url: str) -> Opened:
    """GET `url` as a browser does; pressing the page's button submits its form as a
    browser would: its method, to its action resolved against the page, from the page's
    origin."""
    page = await client.get(url)
    parsed = read_html(page.text)

    async def press() -> httpx.Response:
        [form] = parsed.forms
        assert form.get("method", "get").lower() == "post", form
        target = urljoin(url, form.get("action", ""))
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
        headers = {"Origin": origin, "Content-Type": "application/x-www-form-urlencoded"}
        return await client.post(target, content=b"", headers=headers)

    return Opened(page.status_code, page.text, press)


def tampered(link: str, request_id: str) -> str:
    """The link with its claim's request id changed and its signature kept."""
    base, _, token = link.rpartition("/")
    body, _, signature = token.partition(".")
    claim = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claim["r"] = request_id
    forged = base64.urlsafe_b64encode(json.dumps(claim, separators=(",", ":")).encode()).rstrip(b"=").decode()
    return f"{base}/{forged}.{signature}"


def email_routing(smtp_port: int) -> Callable[[str], str]:
    def make(url: str) -> str:
        return f"""
inbox_url = "{url}"
retry_first = "1s"

[channels.mail]
type = "email"
host = "127.0.0.1"
port = {smtp_port}
from = "interlock@example.com"

[recipients.alice]
channels = ["mail"]
addresses = {{ mail = "alice@example.com" }}

[recipients.bob]
channels = ["mail"]
addresses = {{ mail = "bob@example.com" }}
escalate_after = "1s"
escalate_to = "alice"
"""

    return make


async def test_an_emailed_link_answers_the_agents_wait_once_and_refuses_what_is_not_its_to_answer(
    tmp_path: Path, mailbox: Mailbox
) -> None:
    """alice answers the deployer's question from her email; the agent's wait returns her
    answer. The link used again, the other answer's link and a link whose request id was
    changed are refused on a page that says why, and change nothing. The escalation that
    tells her of bob's request offers her no answer and says whom it waits on; a link
    signed for her for it is refused all the same."""
    async with (
        served_with_routing(tmp_path, email_routing(mailbox.port)) as site,
        site.agent("deployer") as deployer,
        site.agent("rotator") as rotator,
        httpx.AsyncClient(timeout=BOUND) as browser,
    ):
        asked = await deployer.create(Confirm("Ship v2 to production?"), to="alice", title="Deploy v2")
        waiting = asyncio.create_task(deployer.wait(asked.id))
        links = shown_links(await mailbox.first("alice@example.com", "deployer asks: Deploy v2"))
        assert set(links) == {"Yes", "No", "Or answer in the inbox"}
        assert links["Or answer in the inbox"] == f"{site.url}/requests/{asked.id}"

        opened = await open_link(browser, links["Yes"])  # opening answers nothing
        assert opened.status == 200 and "Answer as <strong>alice</strong>" in opened.text
        assert read_html(opened.text).buttons == ["Yes"]
        assert not waiting.done() and (await deployer.get(asked.id)).status.value == "pending"
        recorded = await opened.press()
        assert recorded.status_code == 200 and "You answered Yes." in recorded.text
        with anyio.fail_after(BOUND):
            response = await waiting
        assert (list(response.answers.values()), response.by, response.via) == ([True], "alice", "email")

        again = await opened.press()
        assert again.status_code == 409 and "This link was already used, by alice at" in again.text
        other = await open_link(browser, links["No"])
        assert other.status == 409 and "This request was already answered by alice at" in other.text
        assert (await browser.post(links["No"])).status_code == 409
        assert (await deployer.get(asked.id)).response == response
        ended = await mailbox.first("alice@example.com", "No longer waiting for you (answered)")
        assert set(shown_links(ended)) == {"See it in the inbox"}

        theirs = await rotator.create(Confirm("Rotate the signing keys?"), to="bob")
        escalation = await mailbox.first("alice@example.com", "Nobody has answered yet", theirs.id)
        assert shown_links(escalation) == {}  # no answer she may not give, no page that would refuse her
        plain = escalation.get_body(("plain",))
        assert plain is not None
        since = theirs.created_at.strftime("%Y-%m-%d %H:%M UTC")
        assert " ".join(plain.get_content().split()).startswith(
            f"Nobody has answered this request yet: it waits on bob since {since}, and was escalated to you "
            "(alice). It is not yours to answer: only bob can. Nor may you open it in the inbox: remind bob, "
            "or rotator, who asked for it. Rotate the signing keys?"
        )
        signed_for_her = AnswerLinks(SECRET_KEY, site.url).link(theirs, "alice", True)  # as her email once had
        refused = await open_link(browser, signed_for_her)
        assert refused.status == 403 and "Not yours to answer" in refused.text
        assert read_html(refused.text).forms == []
        assert (await browser.post(signed_for_her)).status_code == 403
        forged = await open_link(browser, tampered(links["No"], theirs.id))
        assert forged.status == 400 and "not valid (damaged, or not from this server)" in forged.text
        assert (await browser.post(tampered(links["No"], theirs.id))).status_code == 400
        assert (await rotator.get(theirs.id)).status.value == "pending"

        bobs = shown_links(await mailbox.first("bob@example.com", "rotator asks"))
        assert (await (await open_link(browser, bobs["No"])).press()).status_code == 200
        with anyio.fail_after(BOUND):
            bobs_answer = await rotator.wait(theirs.id)
        assert (list(bobs_answer.answers.values()), bobs_answer.by, bobs_answer.via) == ([False], "bob", "email")


def team_email_routing(smtp_port: int) -> Callable[[str], str]:
    """alice's own address, and the team ops (alice and bob) with an address of its own:
    a mailbox they share."""

    def make(url: str) -> str:
        return f"""
inbox_url = "{url}"
retry_first = "1s"

[channels.mail]
type = "email"
host = "127.0.0.1"
port = {smtp_port}
from = "interlock@example.com"

[teams.ops]
members = ["alice", "bob"]
channels = ["mail"]
addresses = {{ mail = "ops@example.com" }}

[recipients.alice]
channels = ["mail"]
addresses = {{ mail = "alice@example.com" }}
"""

    return make


def answer_form(page: str) -> tuple[str, dict[str, str]]:
    """Where the page's answer form posts, and its hidden fields."""
    start = page.index('<form class="answer"')
    form = page[start : page.index("</form>", start)]
    action = re.search(r'action="([^"]+)"', form)
    assert action is not None, form
    return action[1], dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', form))


async def test_an_email_to_a_team_s_shared_address_sends_its_members_to_answer_in_the_inbox_as_themselves(
    tmp_path: Path, mailbox: Mailbox
) -> None:
    """The deployer asks the team ops, whose email goes to ops@, a mailbox alice and bob
    share. A link there could only answer for whoever pressed it, and interlock records
    who answers, so the email has no one-click answers: it says so and links to the
    request in the inbox, where bob signs in and answers it as himself; the agent's wait
    returns his answer. A link signed for ops with the server's key (as the email once
    carried, which the server then refused) is refused and changes nothing. alice's own
    email keeps its one-click answers, which answer as her."""
    async with (
        served_with_routing(tmp_path, team_email_routing(mailbox.port)) as site,
        site.agent("deployer") as deployer,
        httpx.AsyncClient(timeout=BOUND) as browser,
    ):
        asked = await deployer.create(Confirm("Restart the workers?"), to="ops", title="Restart")
        waiting = asyncio.create_task(deployer.wait(asked.id))
        shared = await mailbox.first("ops@example.com", "deployer asks: Restart")
        page = f"{site.url}/requests/{asked.id}"
        assert shown_links(shared) == {"Answer in the inbox as yourself": page}
        plain = shared.get_body(("plain",))
        assert plain is not None
        assert (
            "This went to the ops team's shared address, so it has no one-click answers: interlock records who "
            "answers, and a click here could not say which of you it was. Answer it in the inbox, signed in as "
            "yourself."
        ) in " ".join(plain.get_content().split())

        signed_for_ops = AnswerLinks(SECRET_KEY, site.url).link(asked, "ops", True)
        refused = await open_link(browser, signed_for_ops)
        assert refused.status == 403 and "Not yours to answer" in refused.text
        assert "would answer as the team ops" in refused.text and read_html(refused.text).forms == []
        assert (await browser.post(signed_for_ops)).status_code == 403
        assert not waiting.done() and (await deployer.get(asked.id)).status.value == "pending"

        to_signin = await browser.get(page)  # bob follows the link: the inbox asks him to sign in first
        assert to_signin.status_code == 303
        signin = await browser.get(urljoin(page, to_signin.headers["location"]))
        fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', signin.text))
        signed_in = await browser.post(f"{site.url}/signin", data={**fields, "token": site.tokens["bob"]})
        assert signed_in.status_code == 303 and signed_in.headers["location"] == f"/requests/{asked.id}"
        opened = await browser.get(page)
        assert opened.status_code == 200 and "Restart the workers?" in opened.text
        action, fields = answer_form(opened.text)
        assert urljoin(page, action) == page  # the page posts its answer to itself
        answered = await browser.post(page, data={**fields, "a0": "yes"}, headers={"Origin": site.url})
        assert answered.status_code == 303, answered.text
        with anyio.fail_after(BOUND):
            response = await waiting
        assert (list(response.answers.values()), response.by, response.via) == ([True], "bob", "web")

        hers = await deployer.create(Confirm("Ship v2 to production?"), to="alice", title="Deploy v2")
        links = shown_links(await mailbox.first("alice@example.com", "deployer asks: Deploy v2"))
        assert set(links) == {"Yes", "No", "Or answer in the inbox"}
        browser.cookies.clear()  # her link needs no session
        assert (await (await open_link(browser, links["Yes"])).press()).status_code == 200
        with anyio.fail_after(BOUND):
            her_answer = await deployer.wait(hers.id)
        assert (list(her_answer.answers.values()), her_answer.by, her_answer.via) == ([True], "alice", "email")


async def test_an_emailed_link_outlives_a_restart_and_expires_with_its_request(
    tmp_path: Path, mailbox: Mailbox
) -> None:
    """With INTERLOCK_SECRET_KEY set, a link mailed before the server restarted answers
    after it, to the agent waiting on it; the link of a request that expired meanwhile is
    refused as expired."""
    async with (
        served_with_routing(tmp_path, email_routing(mailbox.port)) as site,
        site.agent("deployer") as deployer,
        httpx.AsyncClient(timeout=BOUND) as browser,
    ):
        soon = await deployer.create(Confirm("Ship it today?"), to="alice", timeout=2)
        later = await deployer.create(Confirm("Ship it this week?"), to="alice")
        expiring = shown_links(await mailbox.first("alice@example.com", "deployer asks", soon.id))
        lasting = shown_links(await mailbox.first("alice@example.com", "deployer asks", later.id))
        await site.restart()
        waiting = asyncio.create_task(deployer.wait(later.id))

        with anyio.fail_after(BOUND), pytest.raises(Expired):
            await deployer.wait(soon.id)
        expired = await open_link(browser, expiring["Yes"])
        assert expired.status == 400 and "This answer link has expired." in expired.text
        assert (await browser.post(expiring["Yes"])).status_code == 400
        assert (await deployer.get(soon.id)).status.value == "expired"

        recorded = await (await open_link(browser, lasting["Yes"])).press()
        assert recorded.status_code == 200 and "You answered Yes." in recorded.text
        with anyio.fail_after(BOUND):
            response = await waiting
        assert (list(response.answers.values()), response.by, response.via) == ([True], "alice", "email")


# -- Slack -------------------------------------------------------------------------------


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with fake_slack("xoxb-the-bot-token", SIGNING_SECRET) as fake:
        yield fake


def slack_routing(api: str) -> Callable[[str], str]:
    def make(url: str) -> str:
        return f"""
inbox_url = "{url}"

[channels.slack]
type = "slack"
token = "xoxb-the-bot-token"
signing_secret = "{SIGNING_SECRET}"
api_url = "{api}"

[recipients.alice]
channels = ["slack"]
addresses = {{ slack = "U0ALICE" }}

[recipients.bob]
channels = ["slack"]
addresses = {{ slack = "U0BOB" }}
"""

    return make


def clicked(posted: dict[str, Any], label: str, user: str, response_url: str) -> dict[str, Any]:
    """The `block_actions` payload Slack sends when `user` presses the button `label` of
    the message interlock posted."""
    [actions] = [b for b in posted["blocks"] if b["type"] == "actions"]
    [button] = [e for e in actions["elements"] if e["text"]["text"] == label]
    return {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "team_id": "T0TEAM"},
        "api_app_id": "A0APP",
        "token": "a-verification-token-nobody-checks",
        "container": {"type": "message", "message_ts": posted["ts"], "channel_id": posted["channel"]},
        "trigger_id": "1234567890.0987654321.abcdef0123456789",
        "team": {"id": "T0TEAM", "domain": "example"},
        "channel": {"id": posted["channel"], "name": "directmessage"},
        "message": {"type": "message", "ts": posted["ts"], "text": posted["text"], "blocks": posted["blocks"]},
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [
            {
                "action_id": button["action_id"],
                "block_id": actions["block_id"],
                "text": button["text"],
                "value": button["value"],
                "type": "button",
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }


async def test_a_slack_button_click_signed_as_slack_signs_it_answers_the_agents_wait_and_updates_the_message(
    tmp_path: Path, slack: FakeSlack
) -> None:
    async with (
        served_with_routing(tmp_path, slack_routing(slack.api_url)) as site,
        site.agent("deployer") as deployer,
        httpx.AsyncClient(base_url=site.url, timeout=BOUND) as slack_side,
    ):
        asked = await deployer.create(Confirm("Ship v2 to production?"), to="alice", title="Deploy v2")
        waiting = asyncio.create_task(deployer.wait(asked.id))
        [(_, message, headers)] = await slack.calls_until("chat.postMessage")
        assert message["channel"] == "U0ALICE" and headers["authorization"] == "Bearer xoxb-the-bot-token"
        posted = message | {"ts": "1700000000.000001"}
        callback = "/slack/interactive/slack"
        response_url = slack.response_url
        yes = clicked(posted, "Yes", "U0ALICE", response_url)

        forged = await slack_side.post(callback, **slack.signed(yes, secret="not-the-apps-signing-secret"))
        assert forged.status_code == 401 and "the Slack signature does not match" in forged.text
        stale = await slack_side.post(callback, **slack.signed(yes, at=time.time() - 6 * 60))
        assert stale.status_code == 401 and "outside the replay window" in stale.text
        bobs = await slack_side.post(callback, **slack.signed(clicked(posted, "Yes", "U0BOB", response_url)))
        assert bobs.status_code == 200
        [(_, told, told_headers)] = await slack.calls_until("response")
        assert told == {
            "response_type": "ephemeral",
            "replace_original": False,
            "text": "This request is not yours to answer.",
        }
        assert "authorization" not in told_headers  # the bot token goes to Slack's Web API only
        assert not waiting.done() and (await deployer.get(asked.id)).status.value == "pending"

        assert (await slack_side.post(callback, **slack.signed(yes))).status_code == 200
        with anyio.fail_after(BOUND):
            response = await waiting
        assert (list(response.answers.values()), response.by, response.via) == ([True], "alice", "slack")
        [update] = await slack.until("chat.update")
        assert (update["channel"], update["ts"]) == ("U0ALICE", posted["ts"])
        assert not [b for b in update["blocks"] if b["type"] == "actions"]
        assert "*Answered* by alice via slack\\nShip v2 to production?: Yes" in json.dumps(update["blocks"])

        assert (
            await slack_side.post(callback, **slack.signed(clicked(posted, "No", "U0ALICE", response_url)))
        ).status_code == 200
        [_, again] = await slack.until("response", 2)
        assert again["text"].startswith("This request was already answered by alice at")
        assert (await deployer.get(asked.id)).response == response
