# ruff: noqa: F811  (the fixtures imported from test_web_inbox are parameters here)
"""The web inbox's other screens in a real headless Chromium against a real server: the
one-time sign-in link, deep links through sign-in, a request's own page and its timeline,
the history's filters and search, the dashboard, Markdown details, and the dark theme."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, urlsplit
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Browser, Page, expect

from interlock import Choice, Confirm, Form, Text
from interlock.signin import mint_signin_link

from .test_web_inbox import (  # noqa: F401 - the fixtures
    Server,
    ask,
    history_item,
    server,
    sign_in,
    stored,
)

pytestmark = pytest.mark.skipif(
    not Path("/usr/bin/chromium").exists(), reason="needs Debian's chromium at /usr/bin/chromium"
)


def link_for(server: Server, who: str = "alice", next: str = "/") -> str:
    return server.run(mint_signin_link(server.broker, who, server.url, next=next))


# -- one-time sign-in links and deep links -------------------------------------------------


def test_a_signin_link_signs_in_once_without_a_token(server: Server, page: Page, other_page: Page) -> None:
    link = link_for(server)
    page.goto(link)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Waiting for you")).to_be_visible()
    expect(page.locator(".who")).to_contain_text("alice")

    other_page.goto(link)  # spent: a second browser gets nowhere with it
    other_page.get_by_role("button", name="Sign in").click()
    expect(other_page.get_by_role("alert")).to_contain_text("used already or has expired")
    expect(other_page.get_by_label("Token")).to_be_visible()


def test_following_a_link_spends_nothing_until_the_button_is_pressed(server: Server, page: Page) -> None:
    link = link_for(server)
    page.goto(link)  # what a mail scanner fetching links would do
    page.goto(link)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Waiting for you")).to_be_visible()


def test_a_deep_link_to_a_request_survives_the_token_sign_in(server: Server, page: Page) -> None:
    request_id = ask(server, Text("Which branch?"))
    page.goto(f"{server.url}/requests/{request_id}")
    expect(page).to_have_url(re.compile(r"/signin\?next="))
    page.get_by_label("Token").fill(server.tokens["alice"])
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{server.url}/requests/{request_id}")
    expect(page.get_by_role("heading", name="Which branch?")).to_be_visible()


def test_a_signin_link_to_a_request_opens_it_and_an_offsite_next_is_ignored(server: Server, page: Page) -> None:
    request_id = ask(server, Confirm("Ship it?"))
    page.goto(link_for(server, next=f"/requests/{request_id}"))
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{server.url}/requests/{request_id}")

    page.context.clear_cookies()
    page.goto(f"{server.url}/signin?next=//evil.example/x")
    page.get_by_label("Token").fill(server.tokens["alice"])
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{server.url}/")


# -- a request's own page ------------------------------------------------------------------


def test_a_request_page_is_answered_there_and_shows_its_timeline(server: Server, page: Page) -> None:
    request_id = ask(server, Choice("Which region first?", ["eu", "us"]), details="Traffic is **low** in eu now.")
    sign_in(page, server)
    page.goto(f"{server.url}/requests/{request_id}")
    expect(page.locator(".details strong")).to_have_text("low")  # Markdown, rendered
    page.get_by_label("us").check()
    page.get_by_role("button", name="Send answer").click()
    expect(page.locator("#request-state")).to_have_text("answered")
    expect(page.locator(".answers")).to_contain_text("us")
    timeline = page.locator(".timeline li")
    expect(timeline).to_have_count(3)
    expect(timeline.nth(0)).to_contain_text("Asked by bot to alice")
    expect(timeline.nth(1)).to_contain_text("Viewed by alice")  # the first opening only
    expect(timeline.nth(2)).to_contain_text("Answered by alice via web")
    assert list(stored(server, request_id).response.answers.values()) == ["us"]  # type: ignore[union-attr]


def test_a_pending_request_s_page_is_headed_by_its_title(server: Server, page: Page) -> None:
    request_id = ask(server, Text("Which branch?", id="branch"), title="Release branch")
    sign_in(page, server)
    page.goto(f"{server.url}/requests/{request_id}")
    expect(page.get_by_role("heading", level=1)).to_have_text("Release branch")  # one h1, the request's
    expect(page.get_by_role("heading", level=3)).to_have_count(0)  # nothing under an h2 that is not there
    inbox = page.get_by_role("link", name="← Inbox")
    inbox.click()
    expect(page.get_by_role("heading", level=3, name="Release branch")).to_be_visible()  # a card in the inbox


def test_a_request_page_works_without_javascript(server: Server, browser: object) -> None:
    request_id = ask(server, Confirm("Restart the queue?"))
    ctx = browser.new_context(java_script_enabled=False)  # type: ignore[attr-defined]
    try:
        p = ctx.new_page()
        p.goto(f"{server.url}/requests/{request_id}")
        p.get_by_label("Token").fill(server.tokens["alice"])
        p.get_by_role("button", name="Sign in").click()
        p.get_by_label("Yes").check()
        p.get_by_role("button", name="Send answer").click()
        expect(p).to_have_url(f"{server.url}/requests/{request_id}")  # back on the request's page
        expect(p.locator("#request-state")).to_have_text("answered")
    finally:
        ctx.close()


def test_without_javascript_a_bad_answer_on_a_request_page_is_shown_there_with_what_was_typed(
    server: Server, browser: object
) -> None:
    schema = {"type": "object", "properties": {"ticket": {"type": "string", "pattern": "^[A-Z]+-[0-9]+$"}}}
    asks = [Form("Which ticket?", schema=schema, id="ticket"), Text("Why?", id="why")]
    request_id = ask(server, asks, title="File it")
    own = f"{server.url}/requests/{request_id}"
    ctx = browser.new_context(java_script_enabled=False)  # type: ignore[attr-defined]
    try:
        p = ctx.new_page()
        p.goto(own)
        p.get_by_label("Token").fill(server.tokens["alice"])
        p.get_by_role("button", name="Sign in").click()
        p.get_by_role("textbox", name="ticket").fill("ops twelve")
        p.get_by_role("textbox", name="Why?").fill("it broke")
        with p.expect_response(own) as posted:  # the page posts to itself, and stays
            p.get_by_role("button", name="Send answer").click()
        assert posted.value.status == 422
        expect(p).to_have_url(own)
        expect(p).to_have_title("Error: File it · interlock")  # the first words a screen reader says
        refused = p.get_by_role("textbox", name="ticket")
        expect(refused).to_be_focused()  # not the top of the page: no script moved it there
        expect(refused).to_have_attribute("aria-invalid", "true")
        expect(refused).to_have_accessible_description(re.compile("does not match"))
        expect(p.get_by_role("heading", level=1)).to_have_text("File it")  # the request's page, not the inbox
        expect(p.get_by_role("heading", name="Waiting for you")).to_have_count(0)
        expect(p.locator("[data-ask='ticket'] .error")).to_contain_text("does not match")
        expect(p.get_by_role("textbox", name="ticket")).to_have_value("ops twelve")  # what was typed is kept
        expect(p.get_by_role("textbox", name="Why?")).to_have_value("it broke")
        expect(p.locator(".timeline li")).not_to_have_count(0)  # the whole page, timeline and all
        p.get_by_role("textbox", name="ticket").fill("OPS-12")
        p.get_by_role("button", name="Send answer").click()
        expect(p).to_have_url(own)
        expect(p.locator("#request-state")).to_have_text("answered")
        assert stored(server, request_id).answer == {"ticket": {"ticket": "OPS-12"}, "why": "it broke"}
    finally:
        ctx.close()


def test_without_javascript_an_answer_too_late_on_a_request_page_says_so_there(server: Server, browser: object) -> None:
    request_id = ask(server, Text("Which branch?", id="branch"), title="Release branch")
    ctx = browser.new_context(java_script_enabled=False)  # type: ignore[attr-defined]
    try:
        p = ctx.new_page()
        p.goto(f"{server.url}/requests/{request_id}")
        p.get_by_label("Token").fill(server.tokens["alice"])
        p.get_by_role("button", name="Sign in").click()
        p.get_by_role("textbox", name="Which branch?").fill("main")
        server.run(server.broker.reject(request_id, "moot", by="alice", via="cli"))
        p.get_by_role("button", name="Send answer").click()
        expect(p.get_by_role("alert")).to_have_text("This request is no longer pending: declined by alice via cli.")
        expect(p.get_by_role("heading", level=1)).to_have_text("Release branch")
        expect(p.locator("#request-state")).to_have_text("declined")
    finally:
        ctx.close()


def test_an_answer_leads_back_to_its_request_s_page_or_the_inbox_and_nowhere_else(server: Server, page: Page) -> None:
    sign_in(page, server)
    csrf = page.locator("input[name=csrf]").first.get_attribute("value") or ""
    for next_path, back in (
        ("/requests/{id}", "/requests/{id}"),  # a request's page rendered before it posted to itself
        ("/history", "/"),
        ("//evil.example/x", "/"),
        ("https://evil.example/", "/"),
        ("/requests/other", "/"),
    ):
        for posted_to, lands in (("/inbox/requests/{id}", back), ("/requests/{id}", "/requests/{id}")):
            request_id = ask(server, Text("Which branch?", id="branch"))
            url = server.url + posted_to.format(id=request_id)
            form = {"csrf": csrf, "a0": "main", "next": next_path.format(id=request_id)}
            sent = page.request.post(url, form=form, max_redirects=0)
            assert sent.status == 303
            where = urlsplit(sent.headers["location"])
            assert where.path == lands.format(id=request_id), (posted_to, next_path)
            assert where.netloc in ("", urlsplit(server.url).netloc)
            refused = page.request.post(url, form=form, max_redirects=0)
            assert refused.status == 409  # answered already: said on the page posted from, never elsewhere
            on_inbox = posted_to.startswith("/inbox")
            assert ("Waiting for you" in refused.text()) is on_inbox, (posted_to, next_path)
            assert "no longer pending" in refused.text(), (posted_to, next_path)
    no_such = page.request.post(f"{server.url}/requests/{'x' * 300}", form={"csrf": csrf, "a0": "main"})
    assert no_such.status == 404 and "There is no such request." in no_such.text()


def test_details_are_markdown_with_no_raw_html_and_only_safe_links(server: Server, page: Page) -> None:
    details = (
        "See [the runbook](https://example.com/runbook) and [this](javascript:alert(1)).\n\n"
        "<script>window.owned = 1</script><img src=x onerror='window.owned = 1'>\n\n- one\n- two"
    )
    request_id = ask(server, Text("Proceed?"), details=details)
    sign_in(page, server)
    body = page.locator(f"#req-{request_id} .details")
    expect(body.get_by_role("link", name="the runbook")).to_have_attribute("href", "https://example.com/runbook")
    expect(body.get_by_role("link", name="the runbook")).to_have_attribute("rel", "noopener noreferrer nofollow")
    expect(body.locator("li")).to_have_count(2)
    expect(body.get_by_role("link")).to_have_count(1)  # the javascript: one stays text
    expect(body).to_contain_text("<script>")  # shown as text, never run
    assert body.locator("script, img").count() == 0
    assert page.evaluate("window.owned") is None


def test_headings_in_details_sit_below_the_request_s_own(server: Server, page: Page) -> None:
    details = "# Summary\n\nThe disk is full.\n\n## Steps\n\n###### Notes"
    pending = ask(server, Text("Proceed?"), title="Disk full", details=details)
    settled = ask(server, Text("Proceed?"), title="Disk full again", details=details)
    server.run(server.broker.resolve(settled, "yes", by="alice"))
    sign_in(page, server)
    expect(page.get_by_role("heading", level=1)).to_have_count(1)  # the inbox's "Waiting for you"
    body = page.locator(f"#req-{pending} .details")
    expect(body.get_by_role("heading", level=4)).to_have_text("Summary")  # under the card's h3
    expect(body.get_by_role("heading", level=5)).to_have_text("Steps")
    expect(body.get_by_role("heading", level=6)).to_have_text("Notes")  # no deeper than h6
    for request_id in (pending, settled):
        page.goto(f"{server.url}/requests/{request_id}")
        expect(page.get_by_role("heading", level=1)).to_have_count(1)  # the request's title
        expect(page.locator(".details").get_by_role("heading", level=2)).to_have_text("Summary")


def test_another_person_cannot_open_a_request_page(server: Server, page: Page) -> None:
    request_id = ask(server, Text("Secret plan?"))
    sign_in(page, server, "bob")
    response = page.goto(f"{server.url}/requests/{request_id}")
    assert response is not None and response.status == 403
    expect(page.get_by_role("alert")).to_contain_text("neither to you nor from you")
    expect(page).to_have_title("Not allowed · interlock")  # the words of its heading, not "403"
    assert page.get_by_text("Secret plan?").count() == 0


# -- history -------------------------------------------------------------------------------


def test_history_filters_and_searches_settled_requests_a_page_at_a_time(server: Server, page: Page) -> None:
    ids = {}
    for name in ("alpha", "beta", "gamma"):
        ids[name] = ask(server, Text(f"Codename {name}?"), agent=f"agent-{name}")
        server.run(server.broker.resolve(ids[name], f"reply {name}", by="alice"))
    declined = ask(server, Confirm("Drop the table?"), kind="approval")
    server.run(server.broker.reject(declined, "never on a Friday", by="alice"))
    ask(server, Text("Codename pending?"))  # pending: not history
    ask(server, Text("Codename for bob?"), to="bob")
    server.run(server.broker.resolve(ids["alpha"], "again", by="alice"))  # no effect: settled already

    sign_in(page, server)
    page.get_by_role("link", name="History").click()
    expect(page.locator("#history > li")).to_have_count(4)

    page.get_by_label("Search prompts and answers").fill("reply beta")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#history > li")).to_have_count(1)
    expect(history_item(page, ids["beta"])).to_be_visible()

    page.goto(f"{server.url}/history?q=friday")  # the reason of a rejection
    expect(page.locator("#history > li")).to_have_count(1)
    expect(history_item(page, declined)).to_contain_text("denied")  # an approval refused is a denial

    page.goto(f"{server.url}/history?status=rejected&kind=approval")
    expect(page.locator("#history > li")).to_have_count(1)
    page.goto(f"{server.url}/history?agent=agent-gamma")
    expect(page.locator("#history > li")).to_have_count(1)
    expect(history_item(page, ids["gamma"])).to_be_visible()
    today = datetime.now(UTC).date().isoformat()
    page.goto(f"{server.url}/history?from={today}&to={today}&q=codename")
    expect(page.locator("#history > li")).to_have_count(3)
    page.goto(f"{server.url}/history?from=2001-01-01&to=2001-01-02")
    expect(page.locator("#history-empty")).to_be_visible()
    page.goto(f"{server.url}/history?from={today}&to=9999-12-31&q=codename")  # through the last day there is
    expect(page.locator("#history > li")).to_have_count(3)

    response = page.goto(f"{server.url}/history?from=yesterday")
    assert response is not None and response.status == 422
    expect(page.get_by_role("alert")).to_contain_text("not a date")
    # A search of no word (punctuation, an emoji) would list everything as if it matched.
    response = page.goto(f"{server.url}/history?q=%25")
    assert response is not None and response.status == 422
    expect(page.get_by_role("alert")).to_contain_text("Search has no word to look for (letters or digits)")
    response = page.goto(f"{server.url}/history?kind=bogus")
    assert response is not None and response.status == 422
    expect(page.get_by_role("alert")).to_contain_text("Kind is question or approval")


@pytest.mark.parametrize("zone", ["Pacific/Kiritimati", "Etc/GMT+12"])  # UTC+14 and UTC-12: never one day
def test_the_history_s_days_are_the_reader_s_own(server: Server, browser: Browser, zone: str) -> None:
    """From and To are days where the reader is (the page sends its time zone with the
    form), whose bounds are not UTC's: a request answered just now is found on the day it
    is there, and not on the day it is at the other end of the world. A link without the
    zone reads its days in UTC, and says so; a zone the server does not know is refused."""
    answered = ask(server, Text("Which tag?"))
    server.run(server.broker.resolve(answered, "v2", by="alice"))
    at = stored(server, answered).response.at  # type: ignore[union-attr]
    here = at.astimezone(ZoneInfo(zone)).date().isoformat()
    there = at.astimezone(ZoneInfo("Etc/GMT+12" if zone == "Pacific/Kiritimati" else "Pacific/Kiritimati")).date()
    ctx = browser.new_context(timezone_id=zone)
    try:
        p = ctx.new_page()
        sign_in(p, server)
        p.goto(f"{server.url}/history")
        expect(p.locator("#h-days")).to_have_text(f"Days in {zone}")
        for day, found in ((here, 1), (there.isoformat(), 0)):
            p.get_by_label("From").fill(day)
            p.get_by_label("To").fill(day)
            p.get_by_role("button", name="Search").click()
            expect(p).to_have_url(re.compile(r"tz=" + re.escape(quote(zone, safe=""))))
            expect(p.locator("#history > li")).to_have_count(found)
            expect(p.locator("#h-days")).to_have_text(f"Days in {zone}")
        utc_day = at.astimezone(UTC).date().isoformat()
        p.goto(f"{server.url}/history?from={utc_day}&to={utc_day}")  # a link made without the zone
        expect(p.locator("#history > li")).to_have_count(1)
        expect(p.locator("#h-days")).to_have_text("Days in UTC")
        response = p.goto(f"{server.url}/history?from={here}&tz=Mars/Olympus_Mons")
        assert response is not None and response.status == 422
        expect(p.get_by_role("alert")).to_contain_text("Days are read in UTC: this server does not know the time zone")
    finally:
        ctx.close()


def test_history_filters_by_run_and_finds_the_expired_and_the_cancelled(server: Server, page: Page) -> None:
    run = server.run(server.broker.start_run("deployer", requester="bot"))
    in_run = ask(server, Text("Deploy the canary?"), run=run.id)
    elsewhere = ask(server, Text("Deploy the docs?"))
    for answered in (in_run, elsewhere):
        server.run(server.broker.resolve(answered, "yes", by="alice"))
    late = ask(server, Text("Still there?"))
    server.run(server.broker.expire(late))
    dropped = ask(server, Text("Rotate the keys?"))
    server.run(server.broker.cancel(dropped, "done by hand"))

    sign_in(page, server)
    page.goto(f"{server.url}/history")
    expect(page.locator("#history > li")).to_have_count(4)
    page.goto(f"{server.url}/history?run={run.id}")
    expect(page.locator("#history > li")).to_have_count(1)
    expect(history_item(page, in_run)).to_be_visible()
    page.goto(f"{server.url}/history?status=expired")
    expect(page.locator("#history > li")).to_have_count(1)
    expect(history_item(page, late)).to_contain_text("expired")
    page.get_by_label("Status").select_option("cancelled")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#history > li")).to_have_count(1)
    expect(history_item(page, dropped)).to_contain_text("cancelled")


def test_history_pages_through_older_requests(server: Server, page: Page, monkeypatch: pytest.MonkeyPatch) -> None:
    from interlock.server import pages

    monkeypatch.setattr(pages, "HISTORY_PAGE", 2)
    made = []
    for i in range(3):
        made.append(ask(server, Text(f"Question {i}?")))
        server.run(server.broker.resolve(made[-1], "ok", by="alice"))
    sign_in(page, server)
    page.goto(f"{server.url}/history")
    expect(page.locator("#history > li")).to_have_count(2)
    page.get_by_role("link", name="Older").click()
    expect(page.locator("#history > li")).to_have_count(1)
    expect(history_item(page, made[0])).to_be_visible()
    page.get_by_role("link", name="Newest").click()
    expect(history_item(page, made[2])).to_be_visible()


# -- dashboard and theme -------------------------------------------------------------------


def test_the_dashboard_counts_pending_by_agent_and_answers_by_person(server: Server, page: Page) -> None:
    for _ in range(2):
        ask(server, Text("Deploy?"), agent="deployer")
    ask(server, Text("Review?"), agent="reviewer")
    answered = ask(server, Text("Done?"), agent="reviewer")
    server.run(server.broker.resolve(answered, "yes", by="alice"))
    ask(server, Text("Not alice's"), to="bob", agent="deployer")

    sign_in(page, server)
    page.get_by_role("link", name="Dashboard").click()
    expect(page.locator("#stat-pending")).to_have_text("3")
    expect(page.locator("#stat-answered")).to_have_text("1")
    expect(page.locator("#stat-median")).to_have_text(re.compile(r"^\d+s$"))
    rows = page.locator("#by-agent tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("deployer")
    expect(rows.nth(0).locator("td").nth(1)).to_have_text("2")  # both under an hour old
    expect(page.locator("#by-person")).to_contain_text("alice")
    expect(page.locator("#by-person")).not_to_contain_text("bob")
    expect(page.locator("#stat-expired")).to_have_text("0")


def test_the_dashboard_counts_what_expired_in_all_and_per_person(server: Server, page: Page) -> None:
    for prompt in ("Too late?", "Also too late?"):
        server.run(server.broker.expire(ask(server, Text(prompt))))
    server.run(server.broker.expire(ask(server, Text("Bob's, expired"), to="bob")))
    ask(server, Text("Still waiting?"))
    sign_in(page, server)
    page.goto(f"{server.url}/dashboard")
    expect(page.locator("#stat-expired")).to_have_text("2")  # alice's only
    expect(page.locator("#stat-pending")).to_have_text("1")
    row = page.locator("#by-person tbody tr", has_text="alice")
    expect(row.locator("td").nth(3)).to_have_text("2")


CONTRAST = """el => {
    const luminance = (css) => {
        const [r, g, b] = css.match(/\\d+(\\.\\d+)?/g).slice(0, 3).map((c) => {
            const v = Number(c) / 255;
            return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
        });
        return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    const style = getComputedStyle(el);
    const [a, b] = [luminance(style.color), luminance(style.backgroundColor)].sort((x, y) => y - x);
    return (a + 0.05) / (b + 0.05);
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_coloured_buttons_are_readable_in_either_scheme(server: Server, browser: object, scheme: str) -> None:
    ask(server, Confirm("Deploy?"), kind="approval")
    ctx = browser.new_context(color_scheme=scheme)  # type: ignore[attr-defined]
    try:
        p = ctx.new_page()
        sign_in(p, server)
        for name in ("Approve", "Deny"):
            ratio = p.get_by_role("button", name=name).evaluate(CONTRAST)
            assert ratio >= 4.5, (name, round(ratio, 2))  # WCAG AA for text of its size
    finally:
        ctx.close()


def test_the_pages_follow_a_dark_system_setting(server: Server, browser: object) -> None:
    ctx = browser.new_context(color_scheme="dark")  # type: ignore[attr-defined]
    try:
        p = ctx.new_page()
        sign_in(p, server)
        p.goto(f"{server.url}/dashboard")
        background = p.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(20, 23, 28)"
    finally:
        ctx.close()
