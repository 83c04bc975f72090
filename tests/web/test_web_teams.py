# ruff: noqa: F811  (the fixtures imported from test_web_inbox are parameters here)
"""Teams in the web inbox, in a real headless Chromium against a real server: a request to
a team in each member's inbox and in no one else's, a claim seen live by the other member,
given up again, the first answer winning, the claim and views on the request's page, the
claim without JavaScript, and the dashboard per team."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from playwright.sync_api import Page, expect

from interlock import Confirm, Status
from interlock.principals import Principal, issue_token

from .test_web_inbox import (  # noqa: F401 - the fixtures
    CHROMIUM,
    Server,
    ask,
    history_item,
    pending_card,
    server,
    sign_in,
    stored,
)

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")


@pytest.fixture
def team(server: Server) -> Server:
    """alice and bob in the team `ops`; carol outside it."""

    async def add() -> str:
        await server.broker.store.save_principal(Principal("carol", "human"))
        token = issue_token("carol", datetime.now(UTC))
        await server.broker.store.save_token(token)
        await server.broker.store.save_team("ops", ["alice", "bob"])
        return token.secret

    server.tokens["carol"] = server.run(add())
    return server


@pytest.fixture
def bob_page(other_page: Page) -> Page:
    """Bob's browser."""
    return other_page


def test_a_claim_shows_live_to_the_other_member_and_can_be_given_up(team: Server, page: Page, bob_page: Page) -> None:
    sign_in(page, team, "alice")
    sign_in(bob_page, team, "bob")
    request_id = ask(team, Confirm("Rotate the keys?"), to="ops")
    alice_card, bob_card = pending_card(page, request_id), pending_card(bob_page, request_id)
    expect(alice_card).to_contain_text("nobody has claimed it yet")
    expect(bob_card).to_contain_text("To the team ops")

    alice_card.get_by_role("button", name="Claim").click()
    expect(alice_card.locator(".claim-state")).to_contain_text("claimed by alice")
    expect(alice_card.get_by_role("button", name="Give up my claim")).to_be_visible()
    expect(bob_card.locator(".claim-state")).to_contain_text("claimed by alice")  # live, through the stream
    expect(bob_card.get_by_role("button", name="Claim")).to_have_count(0)

    alice_card.get_by_role("button", name="Give up my claim").click()
    expect(bob_card.get_by_role("button", name="Claim")).to_be_visible()
    bob_card.get_by_role("button", name="Claim").click()
    expect(alice_card.locator(".claim-state")).to_contain_text("claimed by bob")


def test_claiming_with_the_keyboard_keeps_the_focus_in_the_card(team: Server, page: Page, bob_page: Page) -> None:
    sign_in(page, team, "alice")
    sign_in(bob_page, team, "bob")
    request_id = ask(team, Confirm("Rotate the keys?"), to="ops")
    alice_card, bob_card = pending_card(page, request_id), pending_card(bob_page, request_id)
    bob_card.get_by_role("button", name="Claim").focus()  # bob is about to claim it too
    alice_card.get_by_role("button", name="Claim").focus()
    page.keyboard.press("Enter")
    expect(alice_card.get_by_role("button", name="Give up my claim")).to_be_focused()
    expect(bob_card.locator(".claim-state")).to_contain_text("claimed by alice")  # live: no button left for bob
    expect(bob_card.locator("h3")).to_be_focused()  # not thrown back to the top of the page
    page.keyboard.press("Enter")
    expect(alice_card.get_by_role("button", name="Claim")).to_be_focused()


def test_the_first_member_to_answer_wins_whoever_claimed(team: Server, page: Page, bob_page: Page) -> None:
    sign_in(page, team, "alice")
    sign_in(bob_page, team, "bob")
    request_id = ask(team, Confirm("Roll back?"), to="ops")
    pending_card(bob_page, request_id).get_by_role("button", name="Claim").click()
    expect(pending_card(page, request_id).locator(".claim-state")).to_contain_text("claimed by bob")
    pending_card(page, request_id).get_by_role("radio", name="Yes").check()
    pending_card(page, request_id).get_by_role("button", name="Send answer").click()
    expect(history_item(page, request_id)).to_contain_text("alice")
    expect(history_item(bob_page, request_id)).to_be_visible()  # gone from bob's pending, live
    expect(pending_card(bob_page, request_id)).to_have_count(0)
    settled = stored(team, request_id)
    assert settled.status is Status.ANSWERED and settled.response is not None and settled.response.by == "alice"


def test_an_update_to_the_team_is_in_each_members_inbox_and_live(team: Server, page: Page, bob_page: Page) -> None:
    team.run(team.broker.inform("Backups are running", to="ops", by="bot"))
    sign_in(page, team, "alice")
    expect(page.locator("#updates")).to_contain_text("Backups are running")  # with the page
    sign_in(bob_page, team, "bob")
    team.run(team.broker.inform("Backups are done", to="ops", by="bot"))
    expect(bob_page.locator("#updates")).to_contain_text("Backups are done")  # live
    expect(page.locator("#updates")).to_contain_text("Backups are done")


def test_someone_outside_the_team_neither_sees_nor_opens_it(team: Server, page: Page) -> None:
    request_id = ask(team, Confirm("Drop the cache?"), to="ops")
    sign_in(page, team, "carol")
    expect(page.locator("#pending-empty")).to_be_visible()
    page.goto(f"{team.url}/requests/{request_id}")
    expect(page.locator("main")).to_contain_text("neither to you nor from you")


def test_a_run_s_page_shows_a_member_the_run_s_requests_to_the_team_and_others_not(team: Server, page: Page) -> None:
    async def make() -> tuple[str, str]:
        run = await team.broker.start_run("deployer", run_id="rollout", requester="bot")
        to_ops = await team.broker.create(Confirm("Drain node 3?"), to="ops", requester="bot", run=run.id)
        to_carol = await team.broker.create(Confirm("Page the vendor?"), to="carol", requester="bot", run=run.id)
        return to_ops.id, to_carol.id

    to_ops, to_carol = team.run(make())
    rows = page.locator(".run-requests > li")
    sign_in(page, team, "bob")  # in ops, and asked nothing himself
    page.goto(f"{team.url}/inbox/runs/rollout")
    expect(page.get_by_role("heading", name="Run rollout")).to_be_visible()
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-id", to_ops)
    expect(page.locator(".run-events")).not_to_contain_text("Page the vendor?")

    page.get_by_role("button", name="Sign out").click()
    sign_in(page, team, "carol")  # outside ops
    page.goto(f"{team.url}/inbox/runs/rollout")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-id", to_carol)
    expect(page.locator("main")).not_to_contain_text("Drain node 3?")


def test_the_request_page_shows_views_and_the_claim_and_claims_without_javascript(
    team: Server, browser: object
) -> None:
    request_id = ask(team, Confirm("Resize the pool?"), to="ops")
    ctx = browser.new_context(java_script_enabled=False)  # type: ignore[attr-defined]
    try:
        p = ctx.new_page()
        p.goto(team.url + "/signin")
        p.get_by_label("Token").fill(team.tokens["bob"])
        p.get_by_role("button", name="Sign in").click()
        p.goto(f"{team.url}/requests/{request_id}")
        p.get_by_role("button", name="Claim").click()
        p.goto(f"{team.url}/requests/{request_id}")
        expect(p.locator(".claim-state")).to_contain_text("claimed by bob")
        timeline = p.locator(".timeline li")
        expect(timeline).to_have_count(3)
        expect(timeline.nth(0)).to_contain_text("Asked by bot to ops")
        expect(timeline.nth(1)).to_contain_text("Viewed by bob")
        expect(timeline.nth(2)).to_contain_text("Claimed by bob")
    finally:
        ctx.close()


def test_without_javascript_a_claim_taken_meanwhile_is_said_on_the_request_page(team: Server, browser: object) -> None:
    request_id = ask(team, Confirm("Resize the pool?"), to="ops", title="Resize")
    ctx = browser.new_context(java_script_enabled=False)  # type: ignore[attr-defined]
    try:
        p = ctx.new_page()
        p.goto(f"{team.url}/requests/{request_id}")
        p.get_by_label("Token").fill(team.tokens["bob"])
        p.get_by_role("button", name="Sign in").click()
        team.run(team.broker.claim(request_id, by="alice"))
        p.get_by_role("button", name="Claim").click()
        expect(p.get_by_role("alert")).to_contain_text("Already claimed by alice")
        expect(p.get_by_role("heading", level=1)).to_have_text("Resize")  # still the request's page
        expect(p.locator(".claim-state")).to_contain_text("claimed by alice")
    finally:
        ctx.close()


def test_the_dashboard_has_a_row_per_team(team: Server, page: Page) -> None:
    ask(team, Confirm("One?"), to="ops")
    answered = ask(team, Confirm("Two?"), to="ops")
    team.run(team.broker.resolve(answered, True, by="bob"))
    sign_in(page, team, "alice")
    page.goto(team.url + "/dashboard")
    row = page.locator("#by-team tbody tr")
    expect(row).to_have_count(1)
    expect(row.locator("td")).to_have_text(["ops", "1", "0s", "0", "1"])
