"""The web inbox end to end: a real server (uvicorn on a free loopback port, a fresh SQLite
file per test) and a real headless Chromium (Debian's `chromium` driven by Playwright; no
downloaded browsers), with a person at the page."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

import pytest
import uvicorn
from playwright.sync_api import Browser, Dialog, Locator, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

import interlock
from interlock import Broker, Choice, Confirm, Form, MultiChoice, Status, Text
from interlock.model import Answers
from interlock.principals import Principal, issue_token
from interlock.routing import Routing
from interlock.server.app import create_app

from .conftest import CHROMIUM, TIMEOUT_MS

T = TypeVar("T")

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)"
)
SECRET_KEY = "web-tests-secret-key-of-32-characters"

expect.set_options(timeout=TIMEOUT_MS)


@dataclass
class Server:
    """A running server: its URL, its broker, and a way to call the broker on its loop."""

    url: str
    db_url: str
    broker: Broker
    loop: asyncio.AbstractEventLoop
    tokens: dict[str, str] = field(default_factory=dict)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a broker call on the server's event loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=10)


async def _add_people(broker: Broker) -> dict[str, str]:
    await broker.open()
    tokens = {}
    for principal in (Principal("alice", "human"), Principal("bob", "human"), Principal("bot", "agent", owner="alice")):
        await broker.store.save_principal(principal)
        token = issue_token(principal.name, datetime.now(UTC))
        await broker.store.save_token(token)
        tokens[principal.name] = token.secret
    return tokens


@contextlib.contextmanager
def serve(
    db: Path, *, auth: bool = True, routing: Callable[[str], Routing] | None = None, **options: Any
) -> Iterator[Server]:
    """Serve a fresh store with uvicorn on a thread running its own event loop (this thread
    runs the browser driver's). `routing` makes the routing from the server's URL."""
    db_url = f"sqlite:///{db}"
    broker = interlock.connect(db_url)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    on_loop = Server("", db_url, broker, loop)
    # A socket bound before the server starts: the browser's first connection waits in
    # the backlog until uvicorn accepts it, so nothing polls for readiness.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        tokens = on_loop.run(_add_people(broker))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        the_routing = routing(url) if routing is not None else None
        app = create_app(broker=broker, auth=auth, secret_key=SECRET_KEY, routing=the_routing, **options)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", ws="none", timeout_graceful_shutdown=2))
        serving = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), loop)
        try:
            yield Server(url, db_url, broker, loop, tokens)
        finally:
            server.should_exit = True
            serving.result(timeout=15)
            on_loop.run(_cut(server))
    finally:
        sock.close()
        on_loop.run(_wind_down(broker))
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def _cut(server: uvicorn.Server) -> None:
    """Close what the browser still held open once the server stopped (a stream past the
    graceful shutdown's bound): left to the closed loop, its socket was reported unclosed."""
    for connection in list(server.server_state.connections):
        connection.transport.abort()
    await asyncio.sleep(0)  # (the transports close on the loop's next turn)


async def _wind_down(broker: Broker) -> None:
    current = asyncio.current_task()
    leftover = [t for t in asyncio.all_tasks() if t is not current]  # e.g. sse-starlette's shutdown watcher
    for task in leftover:
        task.cancel()
    await asyncio.gather(*leftover, return_exceptions=True)
    await broker.aclose()
    await asyncio.get_running_loop().shutdown_asyncgens()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with serve(tmp_path / "inbox.db") as s:
        yield s


@pytest.fixture
def open_server(tmp_path: Path) -> Iterator[Server]:
    """A server run without auth, as on a developer's machine."""
    with serve(tmp_path / "inbox.db", auth=False) as s:
        yield s


# -- helpers ------------------------------------------------------------------------------


def sign_in(page: Page, server: Server, who: str = "alice") -> None:
    page.goto(server.url + "/")
    page.get_by_label("Token").fill(server.tokens[who])
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Waiting for you")).to_be_visible()
    expect(page.locator("body")).to_have_attribute("data-live", "open")


def pending_card(page: Page, request_id: str) -> Locator:
    return page.locator(f"#pending > [data-id='{request_id}']")


def history_item(page: Page, request_id: str) -> Locator:
    return page.locator(f"#history > [data-id='{request_id}']")


def ask(server: Server, asks: Any, **fields: Any) -> str:
    fields.setdefault("to", "alice")
    fields.setdefault("requester", "bot")
    return server.run(server.broker.create(asks, **fields)).id


def stored(server: Server, request_id: str) -> interlock.Request:
    return server.run(server.broker.get(request_id))


def elsewhere(server: Server, work: Any) -> None:
    """Run `work(broker)` on another connection to the same database, as another process
    would (in a thread of its own: this one runs the browser driver's loop)."""

    async def main() -> None:
        async with interlock.connect(server.db_url) as other:
            await work(other)

    failures: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(15)
    assert not thread.is_alive() and not failures, failures


def csrf_of(page: Page) -> str:
    value = page.locator("input[name=csrf]").first.get_attribute("value")
    assert value
    return value


# -- signing in ---------------------------------------------------------------------------


def test_a_person_signs_in_with_their_token_and_signs_out(server: Server, page: Page) -> None:
    sign_in(page, server)
    expect(page.locator(".who")).to_contain_text("Signed in as alice")
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    page.goto(server.url + "/")
    expect(page).to_have_url(server.url + "/signin")


def test_the_sign_in_page_opened_in_two_tabs_signs_in_from_the_first(server: Server, page: Page) -> None:
    # Each load set a new sign-in token in the browser's cookie: the first tab's form was
    # then refused as "stale or from another site".
    page.goto(server.url + "/signin")
    second = page.context.new_page()
    second.goto(server.url + "/signin")
    page.get_by_label("Token").fill(server.tokens["alice"])
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Waiting for you")).to_be_visible()
    second.close()


def test_an_unknown_token_and_an_agents_token_cannot_sign_in(server: Server, page: Page) -> None:
    page.goto(server.url + "/signin")
    page.get_by_label("Token").fill("il_0000_not-a-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("unknown or has been revoked")
    page.get_by_label("Token").fill(server.tokens["bot"])
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("agent's token")
    page.goto(server.url + "/")
    expect(page).to_have_url(server.url + "/signin")


# -- each kind of ask ---------------------------------------------------------------------


def test_a_text_answer_is_sent_with_enter(server: Server, page: Page) -> None:
    request_id = ask(server, Text("Which branch should I release from?", id="branch"))
    sign_in(page, server)
    field = pending_card(page, request_id).get_by_role("textbox", name="Which branch should I release from?")
    field.fill("release/2.4")
    field.press("Enter")
    expect(history_item(page, request_id)).to_contain_text("Answered by alice via web")
    expect(history_item(page, request_id)).to_contain_text("release/2.4")
    expect(pending_card(page, request_id)).to_have_count(0)
    done = stored(server, request_id)
    assert done.answer == "release/2.4"
    assert done.response is not None and (done.response.by, done.response.via) == ("alice", "web")


def test_a_multiline_answer_keeps_its_lines_and_the_comment(server: Server, page: Page) -> None:
    request_id = ask(server, Text("Release notes?", id="notes", multiline=True), title="Write the notes")
    sign_in(page, server)
    card = pending_card(page, request_id)
    card.get_by_role("textbox", name="Release notes?").fill("Faster start-up.\nFewer crashes.")
    card.get_by_label("Comment").fill("draft")
    card.get_by_role("textbox", name="Release notes?").press("Control+Enter")
    expect(history_item(page, request_id)).to_contain_text("Answered by alice")
    done = stored(server, request_id)
    assert done.answer == "Faster start-up.\nFewer crashes."
    assert done.response is not None and done.response.reason == "draft"


def test_a_confirm_is_answered_no_beside_another_ask(server: Server, page: Page) -> None:
    request_id = ask(
        server,
        [Confirm("Run the migrations first?", id="migrate"), Text("Anything else?", id="note", required=False)],
        title="Deploy 2.4",
    )
    sign_in(page, server)
    card = pending_card(page, request_id)
    card.get_by_role("radio", name="No").check()
    card.get_by_role("button", name="Send answer").click()
    expect(history_item(page, request_id)).to_contain_text("Run the migrations first?")
    assert stored(server, request_id).answer == {"migrate": False}


def test_a_choice_takes_an_other_answer(server: Server, page: Page) -> None:
    request_id = ask(server, Choice("Which region?", ["eu-west-1", "us-east-1"], id="region", allow_other=True))
    sign_in(page, server)
    card = pending_card(page, request_id)
    card.get_by_label("Other answer").fill("ap-southeast-2")
    expect(card.get_by_role("radio", name="Other")).to_be_checked()
    card.get_by_role("button", name="Send answer").click()
    expect(history_item(page, request_id)).to_contain_text("Other: ap-southeast-2")
    assert stored(server, request_id).answer == "ap-southeast-2"


def test_an_other_answer_typed_and_emptied_gives_the_pick_back(server: Server, page: Page) -> None:
    # Emptying the other answer took the pick to "Leave unanswered": the person's "us-east-1",
    # made before they began to type, was lost.
    optional = Choice("Which region?", ["eu-west-1", "us-east-1"], id="region", allow_other=True, required=False)
    request_id = ask(server, optional)
    sign_in(page, server)
    card = pending_card(page, request_id)
    card.get_by_role("radio", name="us-east-1").check()
    card.get_by_label("Other answer").fill("ap-southeast-2")
    expect(card.get_by_role("radio", name="Other")).to_be_checked()
    card.get_by_label("Other answer").fill("")
    expect(card.get_by_role("radio", name="us-east-1")).to_be_checked()
    card.get_by_role("button", name="Send answer").click()
    expect(history_item(page, request_id)).to_contain_text("us-east-1")
    assert stored(server, request_id).answer == "us-east-1"


def test_an_answer_over_the_body_limit_is_refused_in_words_and_kept(tmp_path: Path, page: Page) -> None:
    # Refused before any route reads it, as the API's problem details: the card said only
    # "The server answered 413."
    with serve(tmp_path / "small.db", max_body_size=16 * 1024) as server:
        request_id = ask(server, Text("Paste the log?", id="log", multiline=True))
        sign_in(page, server)
        card = pending_card(page, request_id)
        box = card.get_by_role("textbox", name="Paste the log?")
        box.evaluate("(el) => { el.value = 'x'.repeat(20_000); }")  # past the server's 16 KiB
        card.get_by_role("button", name="Send answer").click()
        expect(card.locator(".form-error")).to_contain_text("Too large to send: the request body is larger than 16 KiB")
        assert box.evaluate("(el) => el.value.length") == 20_000  # what was typed stays
        assert stored(server, request_id).status is Status.PENDING


def test_a_choice_is_made_with_the_keyboard_alone(server: Server, page: Page) -> None:
    request_id = ask(server, Choice("Which region?", ["eu-west-1", "us-east-1", "ap-south-1"], id="region"))
    sign_in(page, server)
    first = pending_card(page, request_id).get_by_role("radio", name="eu-west-1")
    first.focus()
    page.keyboard.press("Space")
    page.keyboard.press("ArrowDown")
    expect(pending_card(page, request_id).get_by_role("radio", name="us-east-1")).to_be_focused()
    page.keyboard.press("Enter")
    expect(history_item(page, request_id)).to_contain_text("us-east-1")
    assert stored(server, request_id).answer == "us-east-1"


def answered_through_the_broker(server: Server, asks: Any) -> interlock.Request:
    """A twin request answered with no value through `Broker.resolve`, as the API's
    `{"answers": {}}` is."""
    twin = ask(server, asks)
    assert server.run(server.broker.resolve(twin, Answers(), by="alice", via="api"))
    return stored(server, twin)


def test_an_optional_lone_confirm_picked_can_be_left_unanswered_with_the_keyboard(server: Server, page: Page) -> None:
    request_id = ask(server, Confirm("Tag the release too?", id="tag", required=False), title="Tag")
    sign_in(page, server)
    card = pending_card(page, request_id)
    unanswered = card.get_by_role("radio", name="Leave unanswered")
    expect(unanswered).to_be_checked()  # nothing picked yet, and it says so
    card.get_by_role("radio", name="Yes").check()
    expect(unanswered).not_to_be_checked()
    page.keyboard.press("ArrowRight")  # to No
    page.keyboard.press("ArrowRight")  # and back to no answer at all: a radio cannot be unpicked
    expect(unanswered).to_be_focused()
    expect(unanswered).to_be_checked()
    page.keyboard.press("Enter")
    expect(history_item(page, request_id)).to_contain_text("Answered by alice via web")
    done = stored(server, request_id)
    twin = answered_through_the_broker(server, Confirm("Tag the release too?", id="tag", required=False))
    assert done.status is Status.ANSWERED and done.response is not None and twin.response is not None
    assert done.response.answers == twin.response.answers == {}  # no value recorded, as the API records it
    assert done.answer is None


def test_an_optional_lone_choice_picked_can_be_left_unanswered(server: Server, page: Page) -> None:
    choice = Choice("Which region?", ["eu", "us", "-"], id="region", allow_other=True, required=False)
    request_id = ask(server, choice)
    sign_in(page, server)
    card = pending_card(page, request_id)
    card.get_by_role("radio", name="us").check()
    card.get_by_label("Other answer").fill("ap-south-1")
    expect(card.get_by_role("radio", name="Other")).to_be_checked()
    card.get_by_label("Other answer").fill("")  # emptied: the pick goes back to the one before
    expect(card.get_by_role("radio", name="us")).to_be_checked()
    card.get_by_role("radio", name="eu").check()
    card.get_by_role("radio", name="Leave unanswered").check()
    card.get_by_role("button", name="Send answer").click()
    expect(history_item(page, request_id)).to_contain_text("Answered by alice via web")
    done = stored(server, request_id)
    twin = answered_through_the_broker(server, choice)
    assert done.response is not None and twin.response is not None
    assert done.response.answers == twin.response.answers == {}


def test_an_optional_lone_choice_or_confirm_is_left_unanswered_without_javascript(
    server: Server, browser: Browser
) -> None:
    choice = Choice("Which region?", ["eu", "-"], id="region", required=False)
    confirm = Confirm("Tag it?", id="tag", required=False)
    ctx = browser.new_context(java_script_enabled=False)
    try:
        p = ctx.new_page()
        p.goto(server.url + "/")
        p.get_by_label("Token").fill(server.tokens["alice"])
        p.get_by_role("button", name="Sign in").click()
        for made in (choice, confirm):
            request_id = ask(server, made)
            p.goto(f"{server.url}/requests/{request_id}")
            p.get_by_role("radio", name="Yes" if made is confirm else "eu").check()
            p.get_by_role("radio", name="Leave unanswered").check()
            p.get_by_role("button", name="Send answer").click()
            expect(p).to_have_url(f"{server.url}/requests/{request_id}")
            expect(p.locator("#request-state")).to_have_text("answered")
            done = stored(server, request_id)
            assert done.response is not None and done.response.answers == {}
        required = ask(server, Choice("Which region?", ["eu", "-"], id="region"))
        refused = p.request.post(
            f"{server.url}/inbox/requests/{required}", form={"csrf": csrf_of(p), "a0": "--"}, max_redirects=0
        )
        assert refused.status == 422 and "An answer is required" in refused.text()
        assert stored(server, required).status is Status.PENDING
    finally:
        ctx.close()


def test_a_multi_choice_honours_its_limits(server: Server, page: Page) -> None:
    request_id = ask(server, MultiChoice("Notify whom?", ["email", "slack", "pager"], id="notify", min=1, max=2))
    sign_in(page, server)
    card = pending_card(page, request_id)
    expect(card.get_by_role("group", name="Notify whom?")).to_have_accessible_description("Pick 1 to 2.")
    card.get_by_role("checkbox", name="email").check()
    card.get_by_role("checkbox", name="pager").check()
    expect(card.get_by_role("checkbox", name="slack")).to_be_disabled()
    card.get_by_role("button", name="Send answer").click()
    expect(history_item(page, request_id)).to_contain_text("email, pager")
    assert stored(server, request_id).answer == ["email", "pager"]


INCIDENT = {
    "type": "object",
    "properties": {
        "summary": {"type": "string", "title": "Summary", "maxLength": 80},
        "severity": {"enum": ["low", "high", "critical"], "title": "Severity"},
        "users": {"type": "integer", "minimum": 0, "title": "Users affected"},
        "cost": {"type": "number", "title": "Cost"},
        "public": {"type": "boolean", "title": "Post on the status page"},
        "tags": {"type": "array", "items": {"type": "string"}, "title": "Tags"},
    },
    "required": ["summary", "severity"],
}


def test_a_form_is_generated_from_its_json_schema(server: Server, page: Page) -> None:
    counts = {"type": "object", "additionalProperties": {"type": "integer"}}
    request_id = ask(
        server,
        [Form("Describe the incident", schema=INCIDENT, id="incident"), Form("Counts by region", counts, id="counts")],
        title="Incident report",
    )
    sign_in(page, server)
    card = pending_card(page, request_id)
    expect(card.locator("label", has_text="Summary").locator("abbr.req")).to_be_visible()
    expect(card.locator("label", has_text="Users affected").locator("abbr.req")).to_have_count(0)
    card.get_by_label("Summary").fill("Login outage")
    card.get_by_label("Severity").select_option(label="high")
    card.get_by_label("Users affected").fill("120")
    card.get_by_label("Cost").fill("99.5")
    card.get_by_label("Post on the status page").check()
    card.get_by_label("Tags").fill('["auth", "web"]')
    card.get_by_label("Answer as JSON").fill('{"eu": 3}')
    card.get_by_role("button", name="Send answer").click()
    expect(history_item(page, request_id)).to_contain_text("Login outage")
    assert stored(server, request_id).answer == {
        "incident": {
            "summary": "Login outage",
            "severity": "high",
            "users": 120,
            "cost": 99.5,
            "public": True,
            "tags": ["auth", "web"],
        },
        "counts": {"eu": 3},
    }


def test_a_nested_field_taken_as_json_says_what_to_type(server: Server, page: Page) -> None:
    address = {
        "type": "object",
        "description": "Where to ship it.",
        "properties": {"street": {"type": "string"}, "zip": {"type": "string"}},
        "required": ["street"],
    }
    tags = {"type": "array", "items": {"type": "string"}}
    schema = {"type": "object", "properties": {"address": address, "tags": tags}}
    request_id = ask(server, Form("Shipping", schema, id="ship"))
    sign_in(page, server)
    card = pending_card(page, request_id)
    expect(card.get_by_label("address")).to_have_accessible_description(
        'Where to ship it. As JSON: an object with "street" (required), "zip".'  # it had said only the first
    )
    expect(card.get_by_label("tags")).to_have_accessible_description("As JSON: a list of strings.")
    card.get_by_label("address").fill('{"street": "Main St 1"}')
    card.get_by_label("tags").fill('["fragile"]')
    card.get_by_role("button", name="Send answer").click()
    expect(history_item(page, request_id)).to_be_visible()
    assert stored(server, request_id).answer == {"address": {"street": "Main St 1"}, "tags": ["fragile"]}


def test_an_approval_shows_the_tool_call_and_is_approved(server: Server, page: Page) -> None:
    request_id = ask(
        server,
        Confirm("Run this command?", id="ok"),
        kind="approval",
        tool_name="shell.run",
        arguments={"cmd": "rm -rf build/", "cwd": "/srv/app"},
        details="$ rm -rf build/\nremoves 1,204 files (38 MB)",
    )
    sign_in(page, server)
    card = pending_card(page, request_id)
    expect(card.locator(".tool-name")).to_have_text("shell.run")
    expect(card.locator(".arguments")).to_contain_text('"cmd": "rm -rf build/"')
    expect(card.locator(".preview")).to_contain_text("removes 1,204 files")
    card.get_by_role("button", name="Approve").click()
    expect(history_item(page, request_id)).to_contain_text("Approved by alice via web")
    assert stored(server, request_id).answer is True


def test_an_approval_is_denied_with_a_reason(server: Server, page: Page) -> None:
    request_id = ask(
        server, Confirm("Drop it?", id="ok"), kind="approval", tool_name="db.drop", arguments={"db": "prod"}
    )
    sign_in(page, server)
    card = pending_card(page, request_id)
    card.get_by_label("Reason").fill("not on a Friday")
    card.get_by_role("button", name="Deny").click()
    expect(history_item(page, request_id)).to_contain_text("Denied by alice via web")
    expect(history_item(page, request_id).locator(".reason")).to_have_text("not on a Friday")
    done = stored(server, request_id)
    assert done.status is Status.REJECTED  # an approval's no is a denial
    assert done.response is not None and done.response.reason == "not on a Friday"
    assert done.response.answers == {"ok": False}


def test_a_question_is_declined_with_a_reason(server: Server, page: Page) -> None:
    request_id = ask(server, Text("Which customer?", id="customer"), title="Refund")
    sign_in(page, server)
    card = pending_card(page, request_id)
    card.get_by_label("Comment").fill("ask support instead")
    card.get_by_role("button", name="Decline").click()  # the blank required answer does not block it
    expect(history_item(page, request_id)).to_contain_text("Declined by alice via web")
    done = stored(server, request_id)
    assert done.status is Status.REJECTED
    assert done.response is not None and done.response.reason == "ask support instead"


# -- live ---------------------------------------------------------------------------------


def test_a_new_request_and_an_update_arrive_without_a_reload(server: Server, page: Page) -> None:
    sign_in(page, server)
    expect(page.locator("#pending-empty")).to_be_visible()
    page.evaluate("window.sameDocument = true")
    request_id = ask(server, Text("Ship it?", id="ship"), title="Ship 2.4")
    card = pending_card(page, request_id)
    expect(card).to_contain_text("Ship 2.4")
    expect(page.locator("#pending-count")).to_have_text("1")
    expect(page.locator("#live")).to_contain_text("New request: Ship 2.4")
    newer = ask(server, Text("And 2.5?", id="ship"), title="Ship 2.5")
    expect(page.locator("#pending > li").first).to_have_attribute("data-id", newer)  # newest first
    server.run(server.broker.inform("Build 2.4 finished", to="alice", agent="bot"))
    expect(page.locator("#updates")).to_contain_text("Build 2.4 finished")
    assert page.evaluate("window.sameDocument") is True
    card.get_by_role("textbox", name="Ship it?").fill("yes")
    card.get_by_role("textbox", name="Ship it?").press("Enter")
    expect(history_item(page, request_id)).to_be_visible()


def test_the_count_says_when_more_wait_than_one_page_shows(server: Server, page: Page) -> None:
    from interlock.server.web import PENDING_LIMIT

    made = [ask(server, Text(f"Question {i}?", id="q")) for i in range(PENDING_LIMIT + 2)]
    sign_in(page, server)
    expect(page.locator("#pending > li")).to_have_count(PENDING_LIMIT)
    expect(page.locator("#pending-count")).to_have_text(f"{PENDING_LIMIT}+")  # not "all 50 there are"
    expect(page).to_have_title(f"({PENDING_LIMIT}+) Inbox · interlock")
    card = pending_card(page, made[-1])
    card.get_by_role("textbox", name=f"Question {PENDING_LIMIT + 1}?").fill("done")
    card.get_by_role("button", name="Send answer").click()
    expect(page.locator("#pending-count")).to_have_text(f"{PENDING_LIMIT - 1}+")
    page.get_by_role("link", name="Older requests").click()
    expect(page.locator("#pending > li")).to_have_count(2)
    expect(page.locator("#pending-count")).to_have_text("2+")  # the newer ones are on the first page
    expect(page.locator("body")).to_have_attribute("data-live", "open")
    newest = ask(server, Text("A new one?", id="q"))  # the first page's, not this one's

    async def settle(other: interlock.Broker) -> None:
        assert await other.resolve(made[0], "done", by="alice", via="api")

    elsewhere(server, settle)  # after it on the stream: once this card leaves, the new one was seen
    expect(pending_card(page, made[0])).to_have_count(0)
    expect(page.locator("#pending > li")).to_have_count(1)
    expect(pending_card(page, newest)).to_have_count(0)
    page.get_by_role("link", name="Newest requests").click()
    expect(pending_card(page, newest)).to_have_count(1)
    expect(page.locator("#pending-count")).to_have_text(f"{PENDING_LIMIT}+")


# Readers far from UTC and from each other, each with the manner of their locale: a 24-hour
# clock in Berlin (en-GB), a 12-hour one in Los Angeles (en-US).
READERS = [("Europe/Berlin", "en-GB"), ("America/Los_Angeles", "en-US")]
UTC_TEXT = "%Y-%m-%d %H:%M UTC"  # a time as the server writes it, where no script runs
ISO_UTC = "%Y-%m-%dT%H:%M:%SZ"


def local_text(at: datetime, zone: str, locale: str) -> re.Pattern[str]:
    """How a page shows `at` to a reader in `zone` with `locale`: the date and the time to the
    minute in their zone, the year only when it is not this one (a space of any width before
    AM or PM, as the browser's ICU has it; September is "Sept" in newer British English)."""
    mine = at.astimezone(ZoneInfo(zone))
    year = "" if mine.year == datetime.now(ZoneInfo(zone)).year else f" {mine.year}"
    month = "Sept?" if mine.month == 9 and locale == "en-GB" else mine.strftime("%b")
    if locale == "en-GB":
        return re.compile(rf"{mine.day} {month}{year}, {mine:%H:%M}")
    year = year and f",{year}"
    return re.compile(rf"{month} {mine.day}{year}, {mine.hour % 12 or 12}:{mine:%M}\s{mine:%p}")


def assert_local(time: Locator, at: datetime, zone: str, locale: str) -> None:
    """`time` says `at` in the reader's own zone, the instant in UTC in its `datetime`, and in
    its title the full date and time in their zone, then the time in UTC."""
    expect(time).to_have_text(local_text(at, zone, locale))
    expect(time).to_have_attribute("datetime", at.astimezone(UTC).strftime(ISO_UTC))
    mine = at.astimezone(ZoneInfo(zone))
    day = f"{mine.day} {mine:%B} {mine.year}" if locale == "en-GB" else f"{mine:%B} {mine.day}, {mine.year}"
    clock = f"{mine:%H:%M}:" if locale == "en-GB" else f"{mine.hour % 12 or 12}:{mine:%M}:"
    title = time.get_attribute("title") or ""
    assert day in title and clock in title, title
    assert mine.strftime("%Z") in title or "GMT" in title, title  # its zone: CET, PDT, ...
    assert title.endswith(f"({at.astimezone(UTC).strftime(UTC_TEXT)})"), title


@pytest.mark.parametrize(("zone", "locale"), READERS)
def test_times_read_in_the_reader_s_own_zone_on_the_inbox_and_a_request_s_page_alike(
    server: Server, browser: Browser, zone: str, locale: str
) -> None:
    # An expiry next year, at 22:30 UTC on 1 July: 2 July in Berlin, still 1 July in Los Angeles.
    expiry = datetime(datetime.now(UTC).year + 1, 7, 1, 22, 30, tzinfo=UTC)
    request_id = ask(server, Text("Which branch?", id="branch"), title="Release branch", expires_at=expiry)
    settled = ask(server, Text("Which tag?", id="tag"))
    server.run(server.broker.resolve(settled, "v2", by="alice"))
    made, answered = stored(server, request_id), stored(server, settled)
    assert answered.response is not None and made.expires_at == expiry
    ctx = browser.new_context(timezone_id=zone, locale=locale)
    try:
        p = ctx.new_page()
        sign_in(p, server)
        times = pending_card(p, request_id).locator(".meta time")
        assert_local(times.nth(0), made.created_at, zone, locale)
        assert_local(times.nth(1), expiry, zone, locale)  # with its year, not this one
        expect(times.nth(1)).to_have_text(re.compile(rf"\b{expiry.year}\b"))
        assert_local(history_item(p, settled).locator("time"), answered.response.at, zone, locale)

        # Inserted live: a card the stream brings, and the settled card an answer places.
        later = ask(server, Text("Which remote?", id="remote"))
        assert_local(pending_card(p, later).locator(".meta time").first, stored(server, later).created_at, zone, locale)
        card = pending_card(p, request_id)
        card.get_by_role("textbox", name="Which branch?").fill("main")
        card.get_by_role("button", name="Send answer").click()
        expect(history_item(p, request_id)).to_have_count(1)  # the answer stored: the click only sends it
        done = stored(server, request_id).response
        assert done is not None
        assert_local(history_item(p, request_id).locator("time"), done.at, zone, locale)

        p.goto(f"{server.url}/requests/{request_id}")  # its own page and its timeline alike
        assert_local(p.locator(".request-page .meta time").first, made.created_at, zone, locale)
        assert_local(p.locator(".timeline li[data-kind=created] time"), made.created_at, zone, locale)
        assert_local(p.locator(".timeline li[data-kind=settled] time"), done.at, zone, locale)
    finally:
        ctx.close()


def test_without_its_script_a_page_reads_its_times_in_utc(server: Server, browser: Browser) -> None:
    request_id = ask(server, Text("Which branch?", id="branch"))
    settled = ask(server, Text("Which tag?", id="tag"))
    server.run(server.broker.resolve(settled, "v2", by="alice"))
    made, answered = stored(server, request_id), stored(server, settled)
    assert answered.response is not None
    ctx = browser.new_context(timezone_id="Europe/Berlin", locale="en-GB", java_script_enabled=False)
    try:
        p = ctx.new_page()
        p.goto(server.url + "/signin")
        p.get_by_label("Token").fill(server.tokens["alice"])
        p.get_by_role("button", name="Sign in").click()
        expect(p.get_by_role("heading", name="Waiting for you")).to_be_visible()

        def as_written(time: Locator, at: datetime) -> None:  # in UTC, in the server's words
            expect(time).to_have_text(at.astimezone(UTC).strftime(UTC_TEXT))
            expect(time).to_have_attribute("datetime", at.astimezone(UTC).strftime(ISO_UTC))
            assert time.get_attribute("title") is None

        as_written(pending_card(p, request_id).locator(".meta time").first, made.created_at)
        as_written(history_item(p, settled).locator("time"), answered.response.at)
        p.goto(f"{server.url}/requests/{request_id}")
        as_written(p.locator(".request-page .meta time").first, made.created_at)
        as_written(p.locator(".timeline li[data-kind=created] time"), made.created_at)
    finally:
        ctx.close()


def test_a_request_settled_elsewhere_leaves_the_page(server: Server, page: Page) -> None:
    answered = ask(server, Text("Which branch?", id="branch"))
    withdrawn = ask(server, Confirm("Still needed?", id="ok"))
    sign_in(page, server)
    expect(page.locator("#pending > li")).to_have_count(2)
    pending_card(page, answered).get_by_role("textbox", name="Which branch?").fill("half-typed")

    async def settle(other: interlock.Broker) -> None:
        assert await other.resolve(answered, "main", by="alice", via="api")
        assert await other.cancel(withdrawn, "not any more", by="bot")

    elsewhere(server, settle)
    expect(pending_card(page, answered)).to_have_count(0)
    expect(pending_card(page, withdrawn)).to_have_count(0)
    expect(history_item(page, answered)).to_contain_text("Answered by alice via api")
    expect(history_item(page, withdrawn)).to_contain_text("Cancelled by bot")
    expect(page.locator("#pending-empty")).to_be_visible()


# -- refusals -----------------------------------------------------------------------------


def test_a_bad_answer_is_shown_beside_its_ask_and_the_request_stays_pending(server: Server, page: Page) -> None:
    schema = {
        "type": "object",
        "properties": {"ticket": {"type": "string", "title": "Ticket", "pattern": "^[A-Z]+-[0-9]+$"}},
        "required": ["ticket"],
    }
    request_id = ask(server, [Form("Which ticket?", schema=schema, id="ticket"), Text("Why?", id="why")])
    sign_in(page, server)
    card = pending_card(page, request_id)
    card.get_by_role("textbox", name="Ticket", exact=True).fill("ops twelve")
    card.get_by_role("textbox", name="Why?").fill("it broke")
    card.get_by_role("button", name="Send answer").click()
    error = card.locator("[data-ask='ticket'] .error")
    expect(error).to_contain_text("does not match")
    expect(card.get_by_role("textbox", name="Ticket", exact=True)).to_be_focused()
    expect(card.get_by_role("textbox", name="Why?")).to_have_value("it broke")  # what was typed is kept
    assert stored(server, request_id).status is Status.PENDING
    without_script = page.request.post(
        f"{server.url}/inbox/requests/{request_id}", form={"csrf": csrf_of(page), "a0.p0": "x", "a1": "y"}
    )
    assert without_script.status == 422 and "does not match" in without_script.text()
    card.get_by_role("textbox", name="Ticket", exact=True).fill("OPS-12")
    card.get_by_role("button", name="Send answer").click()
    expect(history_item(page, request_id)).to_contain_text("Answered by alice")
    assert stored(server, request_id).answer == {"ticket": {"ticket": "OPS-12"}, "why": "it broke"}


def test_a_post_without_the_csrf_token_is_refused(server: Server, page: Page) -> None:
    request_id = ask(server, Text("Which branch?", id="branch"))
    sign_in(page, server)
    url = f"{server.url}/inbox/requests/{request_id}"
    assert page.request.post(url, form={"a0": "main"}).status == 403
    assert page.request.post(url, form={"a0": "main", "csrf": "forged"}).status == 403
    assert stored(server, request_id).status is Status.PENDING
    assert page.request.post(url, form={"a0": "main", "csrf": csrf_of(page)}, max_redirects=0).status == 303


def test_another_person_cannot_see_or_answer_the_request(server: Server, page: Page) -> None:
    request_id = ask(server, Text("Which branch?", id="branch"))
    sign_in(page, server, "bob")
    expect(page.locator("#pending-empty")).to_be_visible()
    url = f"{server.url}/inbox/requests/{request_id}"
    assert page.request.get(url).status == 403
    refused = page.request.post(url, form={"a0": "main", "csrf": csrf_of(page)})
    assert refused.status == 403 and "not in your inbox" in refused.text()
    assert "alice" not in refused.text()  # the page does not say whose request it is
    assert stored(server, request_id).status is Status.PENDING


def test_answering_a_request_no_longer_pending_says_so(server: Server, page: Page) -> None:
    request_id = ask(server, Text("Which branch?", id="branch"))
    sign_in(page, server)
    server.run(server.broker.reject(request_id, "moot", by="alice", via="cli"))
    url = f"{server.url}/inbox/requests/{request_id}"
    late = page.request.post(url, form={"a0": "main", "csrf": csrf_of(page)})
    assert late.status == 409
    assert "no longer pending: declined by alice via cli" in late.text()


# -- without auth -------------------------------------------------------------------------


def test_without_auth_the_inbox_needs_no_sign_in_but_still_checks_csrf(open_server: Server, page: Page) -> None:
    request_id = ask(open_server, Text("Which branch?", id="branch"))
    page.goto(open_server.url + "/")
    expect(page.locator(".who")).to_contain_text("local")
    url = f"{open_server.url}/inbox/requests/{request_id}"
    assert page.request.post(url, form={"a0": "main"}).status == 403
    card = pending_card(page, request_id)
    card.get_by_role("textbox", name="Which branch?").fill("main")
    card.get_by_role("textbox", name="Which branch?").press("Enter")
    expect(history_item(page, request_id)).to_contain_text("Answered by local via web")
    assert stored(open_server, request_id).answer == "main"


# -- gate approvals: one click, with an optional edit of the arguments ------------------------

SCALE_SCHEMA = {
    "type": "object",
    "properties": {
        "service": {"type": "string"},
        "env": {"enum": ["staging", "prod"]},
        "replicas": {"type": "integer", "maximum": 10},
    },
    "required": ["service", "env", "replicas"],
    "additionalProperties": False,
}


class GatedScale:
    """An agent on the server's loop whose `scale` tool needs alice's approval."""

    def __init__(self, server: Server, arguments: dict[str, Any], schema: dict[str, Any] = SCALE_SCHEMA) -> None:
        from interlock.agent import ApprovalGate, ToolCall, ToolDefinition, ToolFunctions, ToolRunner

        self.ran: list[dict[str, Any]] = []

        async def scale(**given: Any) -> str:
            self.ran.append(given)
            return "scaled"

        async def call() -> Any:
            runner = ToolRunner(
                server.broker,
                [ToolFunctions({"scale": scale})],
                definitions=[ToolDefinition("scale", "Scale a service", schema)],
                gate=ApprovalGate(server.broker, policies={"scale": "always"}, to="alice"),
            )
            return await runner.run(ToolCall("scale", arguments, "c1", agent="bot"))

        self.outcome = asyncio.run_coroutine_threadsafe(call(), server.loop)
        self.request_id = server.run(_first_pending(server.broker))


async def _first_pending(broker: Broker) -> str:
    async with asyncio.timeout(10):
        async for event in broker.events(after=0, follow=True):
            if event.type == "created" and event.request is not None and event.request.kind == "approval":
                return event.request.id
    raise AssertionError("the event stream ended")


def test_a_gate_approval_with_an_argument_schema_is_approved_in_one_click(server: Server, page: Page) -> None:
    agent = GatedScale(server, {"service": "api", "env": "prod", "replicas": 3})
    sign_in(page, server)
    card = pending_card(page, agent.request_id)
    edit = card.locator("details.edit")
    expect(edit).to_be_visible()
    expect(edit).not_to_have_attribute("open", "")
    assert card.locator("[required]").count() == 0  # nothing to fill in before approving
    card.get_by_role("button", name="Approve").click()
    expect(history_item(page, agent.request_id)).to_contain_text("Approved by alice via web")
    assert agent.outcome.result(timeout=10).content == "scaled"
    assert agent.ran == [{"service": "api", "env": "prod", "replicas": 3}]


def test_the_arguments_are_prefilled_and_checked_only_when_changed(server: Server, page: Page) -> None:
    agent = GatedScale(server, {"service": "api", "env": "prod", "replicas": 3})
    sign_in(page, server)
    card = pending_card(page, agent.request_id)
    card.locator("details.edit > summary").click()
    replicas = card.get_by_label("replicas")
    expect(card.get_by_label("service")).to_have_value("api")
    expect(replicas).to_have_value("3")
    expect(card.get_by_label("env")).to_have_value("1")  # the option index of "prod"

    replicas.fill("50")  # changed, and over the schema's maximum: the browser holds it back
    card.get_by_role("button", name="Approve").click()
    assert replicas.evaluate("input => input.checkValidity()") is False
    assert stored(server, agent.request_id).status is Status.PENDING

    card.get_by_label("replicas").fill("4")
    card.get_by_role("button", name="Approve").click()
    expect(history_item(page, agent.request_id)).to_contain_text("Approved by alice via web")
    assert agent.outcome.result(timeout=10).content == "scaled"
    assert agent.ran == [{"service": "api", "env": "prod", "replicas": 4}]


def test_an_edit_opened_and_left_unchanged_approves_the_arguments_reviewed(server: Server, page: Page) -> None:
    agent = GatedScale(server, {"service": "api", "env": "prod", "replicas": 3})
    sign_in(page, server)
    card = pending_card(page, agent.request_id)
    card.locator("details.edit > summary").click()
    card.get_by_label("service").fill("api")  # typed over, the same text
    card.get_by_role("button", name="Approve").click()
    expect(history_item(page, agent.request_id)).to_contain_text("Approved by alice via web")
    assert agent.outcome.result(timeout=10).content == "scaled"
    assert agent.ran == [{"service": "api", "env": "prod", "replicas": 3}]
    done = stored(server, agent.request_id)
    assert done.response is not None and "arguments" not in done.response.answers


def test_an_argument_of_several_lines_approved_in_one_click_runs_as_reviewed(server: Server, page: Page) -> None:
    # Prefilled into a one-line input, its line breaks were stripped by the browser, which
    # posted it back as "api\r\nweb" -> "apiweb": an edit nobody made, and the call ran so.
    agent = GatedScale(server, {"service": "api\nweb", "env": "prod", "replicas": 3})
    sign_in(page, server)
    card = pending_card(page, agent.request_id)
    card.get_by_role("button", name="Approve").click()
    expect(history_item(page, agent.request_id)).to_contain_text("Approved by alice via web")
    assert agent.outcome.result(timeout=10).content == "scaled"
    assert agent.ran == [{"service": "api\nweb", "env": "prod", "replicas": 3}]
    done = stored(server, agent.request_id)
    assert done.response is not None and "arguments" not in done.response.answers


def test_an_edit_of_one_argument_keeps_the_others_as_reviewed(server: Server, page: Page) -> None:
    agent = GatedScale(server, {"service": "\napi\r\nweb\n", "env": "prod", "replicas": 3})
    sign_in(page, server)
    card = pending_card(page, agent.request_id)
    card.locator("details.edit > summary").click()
    expect(card.get_by_label("service")).to_have_value("\napi\nweb\n")  # shown whole, on its lines
    card.get_by_label("replicas").fill("4")
    card.get_by_role("button", name="Approve").click()
    expect(history_item(page, agent.request_id)).to_contain_text("Approved by alice via web")
    assert agent.outcome.result(timeout=10).content == "scaled"
    assert agent.ran == [{"service": "\napi\r\nweb\n", "env": "prod", "replicas": 4}]


def test_enter_in_an_argument_s_field_does_not_decide_the_approval(server: Server, page: Page) -> None:
    # Enter in a one-line field submits its form with the first button: Approve, before the
    # person had looked at the rest. Only a press of Approve or Deny decides.
    agent = GatedScale(server, {"service": "api", "env": "prod", "replicas": 3})
    sign_in(page, server)
    card = pending_card(page, agent.request_id)
    card.locator("details.edit > summary").click()
    card.get_by_label("replicas").fill("4")
    card.get_by_label("replicas").press("Enter")
    card.get_by_label("service").press("Enter")
    expect(card.get_by_role("button", name="Approve")).to_be_enabled()
    assert stored(server, agent.request_id).status is Status.PENDING
    card.get_by_role("button", name="Approve").click()
    expect(history_item(page, agent.request_id)).to_contain_text("Approved by alice via web")
    assert agent.outcome.result(timeout=10).content == "scaled"
    assert agent.ran == [{"service": "api", "env": "prod", "replicas": 4}]


def test_an_edit_keeps_the_arguments_the_schema_does_not_list(server: Server, page: Page) -> None:
    # The form shows what the schema lists; an argument it does not list (and allows) was
    # dropped from the edited call, though the person never saw it go: a `dry_run` lost so
    # makes the call run for real.
    listed = {"type": "object", "properties": {"service": {"type": "string"}, "replicas": {"type": "integer"}}}
    agent = GatedScale(server, {"service": "api", "replicas": 3, "dry_run": True, "region": "eu"}, listed)
    sign_in(page, server)
    card = pending_card(page, agent.request_id)
    card.locator("details.edit > summary").click()
    card.get_by_label("replicas").fill("4")
    card.get_by_role("button", name="Approve").click()
    expect(history_item(page, agent.request_id)).to_contain_text("Approved by alice via web")
    assert agent.outcome.result(timeout=10).content == "scaled"
    assert agent.ran == [{"service": "api", "replicas": 4, "dry_run": True, "region": "eu"}]


def test_an_argument_of_several_lines_is_edited_on_its_lines(server: Server, page: Page) -> None:
    agent = GatedScale(server, {"service": "api\nweb", "env": "prod", "replicas": 3})
    sign_in(page, server)
    card = pending_card(page, agent.request_id)
    card.locator("details.edit > summary").click()
    card.get_by_label("service").fill("api\nweb\nworker")
    card.get_by_role("button", name="Approve").click()
    expect(history_item(page, agent.request_id)).to_contain_text("Approved by alice via web")
    assert agent.outcome.result(timeout=10).content == "scaled"
    assert agent.ran == [{"service": "api\nweb\nworker", "env": "prod", "replicas": 3}]  # LF, as typed


def test_an_approval_shows_the_characters_a_reader_cannot_see_in_its_arguments(server: Server, page: Page) -> None:
    # A right-to-left override had made "api\u202ebew" read as "apiweb" in the arguments
    # and the preview the person approved.
    agent = GatedScale(server, {"service": "api\u202ebew\u200b", "env": "prod", "replicas": 3})
    sign_in(page, server)
    card = pending_card(page, agent.request_id)
    expect(card.locator("pre.arguments")).to_contain_text('"service": "api\\u202ebew\\u200b"')
    expect(card.locator("pre.preview")).to_contain_text('service="api\\u202ebew\\u200b"')


def test_an_approval_s_heading_and_prompt_show_the_characters_a_reader_cannot_see(server: Server, page: Page) -> None:
    # A tool named "deploy_\u202etxt.exe" had its heading read "Run deploy_exe.txt?", and
    # the approval's prompt reordered as the agent chose; a question's text is left as is.
    approval = ask(
        server, Confirm("Ship report\u202egnp.exe now?", id="ok"), kind="approval", tool_name="deploy_\u202etxt.exe"
    )
    question = ask(server, Text("Which emoji? \U0001f468\u200d\U0001f469", id="t"), title="Family \u200d")
    sign_in(page, server)
    card = pending_card(page, approval)
    expect(card.get_by_role("heading").first).to_have_text("Run deploy_\\u202etxt.exe?")
    expect(card.locator("p.prompt")).to_have_text("Ship report\\u202egnp.exe now?")
    expect(pending_card(page, question).get_by_role("heading").first).to_have_text("Family \u200d")


def test_without_sign_in_a_yes_to_someone_s_gate_approval_is_refused_before_it_is_stored(
    open_server: Server, page: Page
) -> None:
    # Recorded as answered by "local", the gate read it as a refusal: the page said
    # approved, and the call never ran. A no stops the call whoever says it.
    agent = GatedScale(open_server, {"service": "api", "env": "prod", "replicas": 3})
    page.goto(open_server.url + "/")
    card = pending_card(page, agent.request_id)
    card.get_by_role("button", name="Approve").click()
    expect(card.locator(".form-error, .error")).to_contain_text("This approval is for alice")
    expect(card).to_contain_text("runs without sign-in")
    assert stored(open_server, agent.request_id).status is Status.PENDING
    card = pending_card(page, agent.request_id)
    card.get_by_role("button", name="Deny").click()
    expect(history_item(page, agent.request_id)).to_contain_text("Denied by local via web")
    assert agent.outcome.result(timeout=10).denied and agent.ran == []


def test_a_gate_approval_is_denied_with_a_reason_the_agent_reads_verbatim(server: Server, page: Page) -> None:
    agent = GatedScale(server, {"service": "api", "env": "prod", "replicas": 3})
    sign_in(page, server)
    card = pending_card(page, agent.request_id)
    card.get_by_label("Reason").fill("Not during the sale.")
    card.get_by_role("button", name="Deny").click()
    expect(history_item(page, agent.request_id)).to_contain_text("Denied by alice via web")
    result = agent.outcome.result(timeout=10)
    assert (result.denied, result.content) == (True, "Not during the sale.")
    assert agent.ran == []


# -- runs ---------------------------------------------------------------------------------


def parked_run(server: Server, run_id: str = "run-7") -> str:
    async def park() -> str:
        run = await server.broker.start_run("deployer", run_id=run_id, requester="bot")
        request = await server.broker.create(
            Confirm("Deploy web to prod?"), kind="approval", to="alice", requester="bot", run=run.id, agent="deployer"
        )
        await server.broker.park(run.id, state={"secret": "framework state"}, waiting_on=[request.id])
        return request.id

    return server.run(park())


def test_a_runs_request_says_which_run_and_agent_and_links_the_runs_page(server: Server, page: Page) -> None:
    request_id = parked_run(server)
    sign_in(page, server)
    card = pending_card(page, request_id)
    expect(card.locator(".run")).to_contain_text("run run-7 of agent deployer")
    card.get_by_role("link", name="run-7").click()

    expect(page.get_by_role("heading", name="Run run-7")).to_be_visible()
    expect(page.locator(".run-status")).to_have_text("waiting for approval")
    expect(page.locator(".run-requests > li")).to_have_count(1)
    expect(page.locator(".run-requests > li")).to_contain_text("waited on")
    events = page.locator(".run-events > li")
    expect(events).to_have_count(3)
    expect(events.nth(2)).to_have_attribute("data-type", "input_requested")
    expect(page.locator("main")).not_to_contain_text("framework state")  # a person never sees the state
    page.get_by_role("list", name="Requests").get_by_role("link", name="Deploy web to prod?").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Deploy web to prod?")  # the run's request, to answer


def test_every_request_of_a_long_run_is_reached_through_its_page_s_older_links(server: Server, page: Page) -> None:
    async def make() -> list[str]:
        run = await server.broker.start_run("crawler", run_id="long", requester="bot")
        made = []
        for i in range(201):  # one more than the page had ever shown
            request = await server.broker.create(
                Text(f"Page {i} ok?", id="q"), to="alice", requester="bot", run=run.id, agent="crawler"
            )
            made.append(request.id)
        return made

    made = server.run(make())
    sign_in(page, server)
    page.goto(f"{server.url}/inbox/runs/long")
    rows = page.locator(".run-requests > li")
    seen: list[str] = []
    for _ in range(10):  # bounded: 201 requests are five pages
        page.wait_for_load_state()
        shown = rows.evaluate_all("rows => rows.map((row) => row.dataset.id)")
        seen.extend(shown)
        older = page.get_by_role("link", name="Older requests")
        if older.count() == 0:
            break
        older.click()
        expect(rows.first).not_to_have_attribute("data-id", shown[0])  # the next page is there
    assert seen == made[::-1]  # each once, newest first, as the inbox and the history list
    page.get_by_role("link", name="Newest requests").click()
    expect(page.locator(".run-requests > li").first).to_have_attribute("data-id", made[-1])


def test_every_event_of_a_long_run_is_reached_through_its_page_s_newer_links(server: Server, page: Page) -> None:
    async def make() -> list[int]:
        run = await server.broker.start_run("crawler", run_id="chatty", requester="bot")
        for i in range(520):  # more events than the page had ever shown (500)
            await server.broker.create(Text(f"Page {i} ok?", id="q"), to="alice", requester="bot", run=run.id)
        await server.broker.create(Text("Not of the run?"), to="alice", requester="bot")
        ids: list[int] = []
        while True:  # bounded: the log is finite, and each page moves on
            found = await server.broker.find_events(after=ids[-1] if ids else 0, run=run.id)
            ids.extend(e.id for e in found)
            if len(found) < 500 and not found.cut:
                return ids

    made = server.run(make())
    assert len(made) == 521  # its start, and each request asked
    sign_in(page, server)
    page.goto(f"{server.url}/inbox/runs/chatty")
    rows = page.locator(".run-events > li")
    seen: list[int] = []
    for _ in range(10):  # bounded: 521 events are three pages
        page.wait_for_load_state()
        shown = rows.evaluate_all("rows => rows.map((row) => Number(row.dataset.id))")
        seen.extend(shown)
        newer = page.get_by_role("link", name="Newer events")
        if newer.count() == 0:
            break
        newer.click()
        expect(rows.first).not_to_have_attribute("data-id", str(shown[0]))  # the next page is there
    assert seen == made  # each once, oldest first
    expect(page.locator(".run-requests > li")).to_have_count(50)
    page.get_by_role("link", name="Older requests").click()
    expect(page).to_have_url(re.compile(r"older=[\w-]+&events=\d+"))
    expect(rows.first).to_have_attribute("data-id", str(shown[0]))  # the events' page is kept
    page.get_by_role("link", name="Oldest events").click()
    expect(rows.first).to_have_attribute("data-id", str(made[0]))


def test_a_running_run_s_page_says_when_it_is_given_up_unless_its_process_goes_on(server: Server, page: Page) -> None:
    async def start() -> None:
        run = await server.broker.start_run("deployer", run_id="run-8", requester="bot")
        await server.broker.create(Text("Which region?"), to="alice", requester="bot", run=run.id, agent="deployer")

    server.run(start())
    sign_in(page, server)
    page.goto(f"{server.url}/inbox/runs/run-8")
    expect(page.locator(".run-status")).to_have_text("running")
    expect(page.locator(".run-facts")).to_contain_text("as abandoned at")
    expect(page.locator(".run-facts")).to_contain_text(
        "unless its agent's process parks it, starts it again, asks on it or waits on an answer first"
    )


def test_a_run_s_page_follows_the_run_as_it_goes_on_and_keeps_a_message_being_written(
    server: Server, page: Page
) -> None:
    request_id = parked_run(server)
    sign_in(page, server)
    page.goto(f"{server.url}/inbox/runs/run-7")
    expect(page.locator(".run-status")).to_have_text("waiting for approval")
    page.evaluate("window.sameDocument = true")  # the page is read again in place, not reloaded
    draft = page.get_by_role("textbox", name="Message the agent")
    draft.fill("and tell ops")

    assert server.run(server.broker.resolve(request_id, True, by="alice"))  # answered elsewhere: the CLI, say
    expect(page.locator(".run-requests > li")).to_have_attribute("data-status", "answered")
    expect(page.locator(".run-facts")).to_contain_text("a worker will resume it")
    expect(page.locator(".run-events > li").last).to_have_attribute("data-type", "answered")
    answered_at = page.locator(".run-events > li").last.locator("time")  # read again: in the reader's time too
    expect(answered_at).to_have_attribute("title", re.compile(r"\(\d{4}-\d\d-\d\d \d\d:\d\d UTC\)$"))
    expect(answered_at).not_to_have_text(re.compile("UTC"))
    expect(draft).to_have_value("and tell ops")
    expect(draft).to_be_focused()

    async def resume_and_complete() -> None:
        claimed = await server.broker.claim_run(["deployer"], worker="w1")
        assert claimed is not None
        await server.broker.complete_run(claimed.id, {"deployed": True}, worker="w1")

    server.run(resume_and_complete())
    expect(page.locator(".run-status")).to_have_text("completed")
    expect(page.get_by_role("status")).to_have_text("Run completed")  # said to a screen reader
    expect(page.locator(".run-page")).not_to_have_attribute("data-stream", re.compile("."))  # stopped following
    expect(page.get_by_role("button", name="Cancel this run")).to_have_count(0)
    assert page.evaluate("window.sameDocument") is True


def test_a_person_cancels_a_run_from_its_page_and_its_request_is_withdrawn(server: Server, page: Page) -> None:
    request_id = parked_run(server)
    sign_in(page, server)
    page.goto(f"{server.url}/inbox/runs/run-7")
    asked: list[str] = []

    def answer(dialog: Dialog) -> None:  # the first time no, then yes
        asked.append(dialog.message)
        (dialog.accept if len(asked) > 1 else dialog.dismiss)()

    page.on("dialog", answer)
    page.get_by_role("button", name="Cancel this run").click()
    assert asked == ["Cancel run run-7? Its pending requests are withdrawn, and it does not go on."]
    assert stored(server, request_id).status is Status.PENDING  # said no: nothing happened
    page.get_by_role("button", name="Cancel this run").click()
    expect(page.get_by_role("alert")).to_have_text("Cancelled: its pending requests were withdrawn.")
    expect(page.locator(".run-status")).to_have_text("cancelled (cancelled by user)")
    assert stored(server, request_id).status is Status.CANCELLED
    expect(page.get_by_role("button", name="Cancel this run")).to_have_count(0)


def test_a_run_not_waiting_on_you_is_not_shown(server: Server, page: Page) -> None:
    parked_run(server)
    sign_in(page, server, "bob")
    for run_id in ("run-7", "no-such-run"):  # one that is not bob's reads as one that is not there
        response = page.goto(f"{server.url}/inbox/runs/{run_id}")
        assert response is not None and response.status == 404
        expect(page.get_by_role("alert")).to_have_text("There is no such run.")


def test_a_person_messages_a_parked_run_sees_it_held_and_withdraws_it(server: Server, page: Page) -> None:
    request_id = parked_run(server)
    sign_in(page, server)
    page.goto(f"{server.url}/inbox/runs/run-7")
    message = page.get_by_role("textbox", name="Message the agent")
    expect(message).to_have_accessible_description(re.compile(r"^held for its next turn"))
    message.fill("deploy to eu first")
    page.get_by_role("button", name="Send").click()
    expect(page.get_by_role("alert")).to_have_text("Your message is held: the agent gets it at its next turn.")
    expect(page.locator(".run-followups li q")).to_have_text(["deploy to eu first"])
    assert [f.text for f in server.run(server.broker.list_followups("run-7"))] == ["deploy to eu first"]
    page.get_by_role("button", name="Withdraw “deploy to eu first”").click()  # which, said to a screen reader too
    expect(page.get_by_role("alert")).to_have_text("Your message was withdrawn.")
    expect(page.locator(".run-followups li")).to_have_count(0)
    assert stored(server, request_id).status is Status.PENDING


def test_approve_typed_to_a_run_decides_its_approval(server: Server, page: Page) -> None:
    request_id = parked_run(server)
    sign_in(page, server)
    page.goto(f"{server.url}/inbox/runs/run-7")
    page.get_by_label("Message the agent").fill("approve")
    page.get_by_role("button", name="Send").click()
    expect(page.get_by_role("alert")).to_have_text("Your message decided the approval the run waited on.")
    assert stored(server, request_id).status is Status.ANSWERED
    assert server.run(server.broker.list_followups("run-7")) == []


# -- grants offered beside their choices -------------------------------------------------------


def test_offered_grants_show_unticked_beside_their_choice_and_only_ticked_ones_are_issued(
    server: Server, page: Page
) -> None:
    from interlock.model import Option

    request_id = ask(
        server,
        [
            Choice(
                "Which access?",
                [Option("read", grants=[{"with": "repo:web", "can": "read", "exp": None}]), "none"],
                id="access",
            ),
            MultiChoice(
                "Extras?", [Option("logs", grants=[{"with": "logs:web", "can": "tail"}]), "metrics"], id="extras"
            ),
        ],
    )
    sign_in(page, server)
    card = pending_card(page, request_id)
    read = card.get_by_label("grant read on repo:web with no expiry")
    tail = card.get_by_label("grant tail on logs:web for the venue's default time")
    expect(read).not_to_be_checked()  # consent is a deliberate act
    expect(tail).not_to_be_checked()
    expect(card.locator("[data-ask='access'] .grants")).to_contain_text("if you pick read")
    card.get_by_label("read", exact=True).check()
    card.get_by_label("logs", exact=True).check()
    read.check()  # the tail grant stays unticked: it is not issued, though logs is picked
    card.get_by_role("button", name="Send answer").click()
    expect(history_item(page, request_id)).to_be_visible()
    done = stored(server, request_id)
    assert done.response is not None
    assert [(g.can, g.with_, g.audience, g.expires_at) for g in done.response.grants] == [
        ("read", "repo:web", "bot", None)
    ]


def test_the_grants_an_answer_issued_are_shown_with_it(server: Server, page: Page) -> None:
    from interlock.model import Option

    request_id = ask(
        server,
        [
            Confirm("Deploy web?", id="ok", grants=[{"with": "repo:web", "can": "deploy"}]),
            Choice("Which logs?", [Option("app", grants=[{"with": "logs:app", "can": "read", "exp": None}]), "none"]),
        ],
    )
    sign_in(page, server)
    card = pending_card(page, request_id)
    card.get_by_label("Yes", exact=True).check()
    card.get_by_label("app", exact=True).check()
    card.get_by_label("grant read on logs:app with no expiry").check()  # the deploy grant is not ticked
    card.get_by_role("button", name="Send answer").click()
    granted = ["Granted read on logs:app to bot with no expiry"]
    expect(history_item(page, request_id).get_by_role("list", name="Grants issued").locator("li")).to_have_text(granted)
    page.goto(f"{server.url}/requests/{request_id}")
    expect(page.get_by_role("list", name="Grants issued").locator("li")).to_have_text(granted)


def test_a_ticked_grant_whose_choice_was_not_made_refuses_the_answer(server: Server, page: Page) -> None:
    from interlock.model import Option

    request_id = ask(
        server, Choice("Which access?", [Option("write", grants=[{"with": "repo:web", "can": "write"}]), "read"])
    )
    sign_in(page, server)
    card = pending_card(page, request_id)
    card.get_by_label("read", exact=True).check()
    card.get_by_label("grant write on repo:web for the venue's default time").check()
    card.get_by_role("button", name="Send answer").click()
    expect(pending_card(page, request_id).locator(".form-error")).to_contain_text("not triggered")
    assert stored(server, request_id).status is Status.PENDING


def test_an_approval_offers_its_grant_beside_approve(server: Server, page: Page) -> None:
    request_id = ask(
        server,
        Confirm("Deploy web?", id="ok", grants=[{"with": "repo:web", "can": "deploy"}]),
        kind="approval",
        tool_name="deploy",
    )
    sign_in(page, server)
    card = pending_card(page, request_id)
    offer = card.get_by_label("grant deploy on repo:web for the venue's default time")
    expect(offer).not_to_be_checked()
    offer.check()
    card.get_by_role("button", name="Approve").click()
    expect(history_item(page, request_id)).to_contain_text("Approved by alice via web")
    done = stored(server, request_id)
    assert done.response is not None and [g.can for g in done.response.grants] == ["deploy"]


def test_sending_with_the_keyboard_keeps_the_focus_on_the_next_request(server: Server, page: Page) -> None:
    older = ask(server, Choice("Which region?", ["eu", "us"], id="region"))
    newer = ask(server, Choice("Which size?", ["s", "m"], id="size"))  # pending cards: newest first
    sign_in(page, server)
    card = pending_card(page, newer)
    card.get_by_role("radio", name="m").check()
    card.get_by_role("button", name="Send answer").focus()
    page.keyboard.press("Enter")
    expect(history_item(page, newer)).to_contain_text("m")
    heading = pending_card(page, older).get_by_role("heading", name="Which region?")
    expect(heading).to_be_focused()  # not back at the top of the page
    expect(heading).not_to_have_css("outline-style", "none")  # and seen there: it had no focus ring


def test_a_request_s_own_page_sends_a_multiline_answer_with_ctrl_enter(server: Server, page: Page) -> None:
    request_id = ask(server, Text("Release notes?", id="notes", multiline=True))
    sign_in(page, server)
    page.goto(f"{server.url}/requests/{request_id}")
    field = page.get_by_role("textbox", name="Release notes?")
    field.fill("Faster lists.")
    field.press("Control+Enter")
    expect(page.get_by_text("Faster lists.").first).to_be_visible()
    assert stored(server, request_id).answer == "Faster lists."


def test_no_page_scrolls_sideways_on_a_phone(server: Server, page: Page) -> None:
    ask(server, Text("A question with a long title that a phone has to wrap somewhere?", id="q"))
    columns = " | ".join(f"column {n}" for n in range(8))
    table = ask(server, Text("Go on?", id="q"), details=f"| {columns} |\n|{'---|' * 8}\n| {columns} |")
    sign_in(page, server)
    page.set_viewport_size({"width": 360, "height": 740})
    for path in ("/", "/history", "/dashboard", f"/requests/{table}"):
        page.goto(f"{server.url}{path}")
        assert page.evaluate("document.documentElement.scrollWidth") <= 360, path
    expect(page.locator(".markdown table")).to_contain_text("column 7")  # scrolled to within its card


def test_long_details_scroll_within_their_card_and_its_answer_stays_near(server: Server, page: Page) -> None:
    # 72,000 characters of details put the card's answer 45,000 px down a phone's page.
    details = "\n\n".join(f"Paragraph {n}: " + "the build log says more. " * 20 for n in range(150))
    request_id = ask(server, Text("Ship it anyway?", id="q"), details=details)
    sign_in(page, server)
    page.set_viewport_size({"width": 375, "height": 667})
    card = pending_card(page, request_id)
    top = card.bounding_box()
    button = card.get_by_role("button", name="Send answer").bounding_box()
    assert top is not None and button is not None and button["y"] - top["y"] < 1500
    expect(card.locator(".details")).to_contain_text("Paragraph 149")  # all there, scrolled to
    page.goto(f"{server.url}/requests/{request_id}")  # its own page shows them whole
    box = page.locator(".request-page .details").first.bounding_box()
    assert box is not None and box["height"] > 5000


def test_a_long_unbroken_word_wraps_instead_of_widening_the_page(server: Server, page: Page) -> None:
    url = "https://ci.example.com/builds/" + "0123456789abcdef" * 12
    pending = ask(server, Choice("Which artifact?", [url, "none"], id="a"), title="Ship " + "x" * 110)
    ask(server, Text("Look at it?", id="q"), title="A log", details=f"The build log: {url}")
    settled = ask(server, Text("Where is it?", id="q"))
    server.run(server.broker.resolve(settled, url, by="alice"))
    sign_in(page, server)
    for width in (1000, 360):
        page.set_viewport_size({"width": width, "height": 740})
        for path in ("/", "/history", f"/requests/{pending}", f"/requests/{settled}"):
            page.goto(f"{server.url}{path}")
            assert page.evaluate("document.documentElement.scrollWidth") <= width, (width, path)


def direction(locator: Locator) -> str:
    return str(locator.evaluate("el => getComputedStyle(el).direction"))


def test_right_to_left_text_reads_right_to_left(server: Server, page: Page) -> None:
    pending = ask(server, Choice("أي منطقة؟", ["أوروبا", "eu"], id="c"), title="هل ننشر الآن?", details="التفاصيل هنا.")
    settled = ask(server, Text("ما الاسم؟", id="q"), title="سؤال")
    server.run(server.broker.resolve(settled, "שלום", by="alice", comment="لأن"))
    sign_in(page, server)
    card = pending_card(page, pending)
    options = card.locator(".option span")
    for part in (card.locator("h3"), card.locator("legend"), card.locator(".details"), options.first):
        assert direction(part) == "rtl", part  # the "?" at the sentence's end, on its left
    assert direction(options.nth(1)) == "ltr"  # each on its own
    assert direction(card.get_by_label("Comment")) == "ltr"  # until something right-to-left is typed
    item = history_item(page, settled)
    for part in (item.locator(".item-title"), item.locator("dd"), item.locator(".reason")):
        assert direction(part) == "rtl", part


# Each answer's width as a share of its list's (a list not laid out, as a card leaving the
# pending list is, has no width to share).
ANSWER_SHARES = """dds => dds
    .map(dd => [dd.getBoundingClientRect().width, dd.parentElement.getBoundingClientRect().width])
    .filter(([, whole]) => whole > 0)
    .map(([part, whole]) => part / whole)"""


def expect_answers_at_least(page: Page, share: float, where: str) -> None:
    """Every answer on the page takes at least `share` of its list's width, once the page has
    laid out what it just received (an answer the inbox adds live is laid out a frame or
    more after it appears); fails with the narrowest share seen after TIMEOUT_MS."""
    try:
        page.wait_for_function(
            f"share => {{ const s = ({ANSWER_SHARES})([...document.querySelectorAll('dl.answers dd')]);"
            " return s.length > 0 && Math.min(...s) >= share; }",
            arg=share,
        )
    except PlaywrightTimeoutError:
        shares = page.eval_on_selector_all("dl.answers dd", ANSWER_SHARES)
        raise AssertionError(f"{where}: the narrowest answer takes {min(shares, default=0):.2f} of its list") from None


def test_an_approval_s_edited_arguments_are_readable_on_a_phone(server: Server, page: Page) -> None:
    agent = GatedScale(server, {"service": "api-gateway-production-eu-west", "env": "prod", "replicas": 3})
    sign_in(page, server)
    card = pending_card(page, agent.request_id)
    card.locator("details.edit > summary").click()
    card.get_by_label("replicas").fill("4")
    card.get_by_role("button", name="Approve").click()
    expect(history_item(page, agent.request_id)).to_contain_text("Approved by alice via web")
    expect_answers_at_least(page, 0.55, "/")  # the long prompt of the edit wraps in its own column
    page.set_viewport_size({"width": 360, "height": 740})
    for path in ("/history", f"/requests/{agent.request_id}"):
        page.goto(f"{server.url}{path}")
        expect_answers_at_least(page, 0.9, path)  # each answer under its prompt, the full width


def test_a_request_s_own_page_shows_an_answer_given_elsewhere_while_it_is_open(server: Server, page: Page) -> None:
    request_id = ask(server, Text("Which branch?", id="branch"))
    sign_in(page, server)
    page.goto(f"{server.url}/requests/{request_id}")
    page.get_by_role("textbox", name="Which branch?").fill("half-typed")

    async def settle(other: interlock.Broker) -> None:
        assert await other.resolve(request_id, "main", by="alice", via="api")

    elsewhere(server, settle)
    expect(page.locator(".request-page .outcome")).to_contain_text("Answered by alice via api")
    expect(page.get_by_role("textbox", name="Which branch?")).to_have_count(0)  # no form left to be refused
