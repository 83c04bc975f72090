# ruff: noqa: F811  (the fixtures imported from test_web_inbox are parameters here)
"""The web inbox for a person on the keyboard alone, with a screen reader, or on a phone.

axe-core's rules for WCAG 2.2 AA and its best practices run over every screen (axe.min.js
as axe-playwright-python bundles it: nothing is fetched). What axe cannot judge is checked
by roles and names: the headings a screen reader lists, a new request announced while the
focus stays where the person is typing, the keys a field takes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import APIResponse, Browser, Page, Route, expect

from interlock import Choice, Confirm, Form, MultiChoice, Text

from .test_web_inbox import (  # noqa: F401 - the fixtures
    INCIDENT,
    GatedScale,
    Server,
    ask,
    history_item,
    parked_run,
    pending_card,
    server,
    sign_in,
    stored,
)

pytestmark = pytest.mark.skipif(
    not Path("/usr/bin/chromium").exists(), reason="needs Debian's chromium at /usr/bin/chromium"
)

AXE_OPTIONS = {
    "runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]},
    "resultTypes": ["violations"],
}


def violations(page: Page) -> list[str]:
    """What axe-core finds wrong with the page as it is now, one line each."""
    found: list[dict[str, Any]] = Axe().run(page, options=AXE_OPTIONS).response["violations"]
    return [f"{v['id']} ({v['help']}) at {[n['target'] for n in v['nodes']]}" for v in found]


def heading_levels(page: Page) -> list[int]:
    """The levels of the headings a screen reader lists, in the page's order."""
    levels: list[int] = page.get_by_role("heading").evaluate_all("hs => hs.map(h => Number(h.tagName[1]))")
    return levels


def test_every_screen_passes_axe_core_on_a_phone(server: Server, browser: Browser) -> None:
    ticket = {
        "type": "object",
        "properties": {"ticket": {"type": "string", "title": "Ticket", "pattern": "^[A-Z]+-[0-9]+$"}},
    }
    ask(server, Text("Which branch?", id="branch", multiline=True), title="Release branch")
    ask(server, [Confirm("Proceed?", id="ok"), Choice("Which env?", ["staging", "prod"], id="env", allow_other=True)])
    ask(server, MultiChoice("Notify whom?", ["email", "slack", "pager"], id="notify", min=1, max=2))
    ask(server, [Form("Describe the incident", schema=INCIDENT, id="incident")], title="Incident")
    refused = ask(server, Form("Which ticket?", schema=ticket, id="ticket"), title="File it")
    ask(
        server,
        Confirm("Run it?", id="ok"),
        kind="approval",
        tool_name="shell.run",
        arguments={"cmd": "ls"},
        details="$ ls",
    )
    gated = GatedScale(server, {"service": "api", "env": "prod", "replicas": 3})
    settled = ask(server, Text("Which tag?", id="tag"))
    server.run(server.broker.resolve(settled, "v2", by="alice"))
    parked_run(server)
    found: dict[str, list[str]] = {}
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    try:
        p = ctx.new_page()
        p.goto(server.url + "/signin")
        found["sign-in"] = violations(p)
        p.get_by_label("Token").fill("il_0000_not-a-token")
        p.get_by_role("button", name="Sign in").click()
        expect(p.get_by_role("alert")).to_be_visible()
        found["sign-in refused"] = violations(p)
        sign_in(p, server)
        found["inbox"] = violations(p)
        card = pending_card(p, refused)
        card.get_by_role("textbox", name="Ticket").fill("ops twelve")
        card.get_by_role("button", name="Send answer").click()
        expect(card.get_by_role("textbox", name="Ticket")).to_be_focused()
        found["inbox, an answer refused"] = violations(p)
        for name, path in (
            ("a gated call's page", f"/requests/{gated.request_id}"),
            ("a settled request's page", f"/requests/{settled}"),
            ("a run's page", "/inbox/runs/run-7"),
            ("history", "/history"),
            ("dashboard", "/dashboard"),
            ("not found", "/requests/nope"),
        ):
            p.goto(server.url + path)
            found[name] = violations(p)
    finally:
        ctx.close()
    assert {name: v for name, v in found.items() if v} == {}


def test_a_screen_reader_meets_the_inbox_s_headings_in_order_and_hears_a_new_request_while_typing(
    server: Server, page: Page
) -> None:
    ask(
        server,
        Confirm("Run it?", id="ok"),
        kind="approval",
        tool_name="shell.run",
        arguments={"cmd": "ls"},
        details="$ ls",
    )
    notes = ask(server, Text("Release notes?", id="notes", multiline=True), title="Release 2.4")
    sign_in(page, server)
    expect(page.get_by_role("heading", level=1)).to_have_text("Inbox")
    # the page, its waiting requests, each one (with its preview below it), then the history
    assert heading_levels(page) == [1, 2, 3, 3, 4, 2]  # the cards' h3s had followed the h1
    field = pending_card(page, notes).get_by_role("textbox", name="Release notes?")
    expect(field).to_have_accessible_description("Ctrl+Enter sends.")
    expect(field).to_have_attribute("aria-keyshortcuts", "Control+Enter")
    field.fill("Faster lists.")
    ask(server, Text("And 2.5?", id="ship"), title="Release 2.5")
    expect(page.get_by_role("status")).to_have_text("New request: Release 2.5")
    expect(field).to_be_focused()  # announced, and the person is still where they were typing
    expect(field).to_have_value("Faster lists.")
    field.press("Control+Enter")
    expect(history_item(page, notes)).to_be_visible()
    expect(page.get_by_role("status")).to_have_text("Answered by alice via web.")
    assert stored(server, notes).answer == "Faster lists."


def test_an_answer_sent_from_the_page_is_announced_once_whenever_the_stream_brings_it(
    server: Server, page: Page
) -> None:
    """The stream's news of the answer comes while the answer's own response is still on its
    way, and the card it fetches after that: the page says "Answered by ..." once, and the
    stream's news of the same answer says nothing more."""
    notes = ask(server, Text("Release notes?", id="notes"), title="Release 2.4")
    sign_in(page, server)
    held_card: list[Route] = []
    held_answer: list[tuple[Route, APIResponse]] = []

    def hold(route: Route) -> None:
        if route.request.method == "GET":  # the card the stream's news fetches
            held_card.append(route)
        else:  # the answer: made, its response held back
            held_answer.append((route, route.fetch()))

    page.route(f"**/inbox/requests/{notes}", hold)
    field = pending_card(page, notes).get_by_role("textbox", name="Release notes?")
    field.fill("Faster lists.")
    with page.expect_request(lambda r: r.method == "GET" and r.url.endswith(f"/inbox/requests/{notes}")):
        field.press("Enter")
    (answered, response), *_ = held_answer
    answered.fulfill(response=response)
    expect(history_item(page, notes)).to_be_visible()
    expect(page.get_by_role("status")).to_have_text("Answered by alice via web.")
    history_item(page, notes).evaluate("el => { el.dataset.placedByTheAnswer = 'yes'; }")
    assert len(held_card) == 1
    held_card[0].continue_()
    placed_again = "id => { const el = document.querySelector(`#history [data-id='${id}']`); "
    placed_again += "return el !== null && !el.dataset.placedByTheAnswer; }"
    page.wait_for_function(placed_again, arg=notes)  # the stream's card, in its place
    assert page.get_by_role("status").text_content() == "Answered by alice via web."
