"""A number a client sends as text (a form's choice among a select's values, an offered
grant ticked, Slack's request timestamp, an option's number typed at the terminal) is read
from ASCII digits only, and is refused like any other wrong value when it is not one:
`str.isdigit` takes `²` and a number of 5,000 digits, which `int` refuses with ValueError,
which answered 500 (to a person's answer in the web inbox, and to anyone at all on the
Slack endpoint) and ended `interlock watch`."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator

import httpx
import pytest

import interlock
from interlock import Choice, Confirm, Form, Status
from interlock.broker import LocalBroker
from interlock.channels.slack import SlackSignatureError, verify_slack
from interlock.server.app import create_app

pytestmark = pytest.mark.anyio
BASE = "http://127.0.0.1:8765"
NOT_A_NUMBER_INT_READS = ("²", "1" * 5000)


@pytest.fixture
async def broker() -> AsyncIterator[LocalBroker]:
    opened = interlock.connect("memory://")
    assert isinstance(opened, LocalBroker)
    await opened.open()
    yield opened
    await opened.aclose()


@pytest.fixture
async def browser(broker: LocalBroker) -> AsyncIterator[httpx.AsyncClient]:
    """The web inbox of a server without auth (this machine's user), in a browser."""
    app = create_app(broker=broker, auth=False)
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url=BASE) as client:
        yield client


async def csrf_of(browser: httpx.AsyncClient) -> str:
    page = await browser.get("/")
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None
    return found[1]


@pytest.mark.parametrize("posted", NOT_A_NUMBER_INT_READS, ids=["superscript", "5000 digits"])
async def test_a_select_posted_with_digits_int_does_not_read_is_refused_beside_its_ask(
    broker: LocalBroker, browser: httpx.AsyncClient, posted: str
) -> None:
    schema = {"type": "object", "properties": {"size": {"enum": ["s", "m", "l"]}}}
    request = await broker.create(Form("Which size?", schema=schema, id="f"), to="local")
    csrf = await csrf_of(browser)
    assert 'name="a0.p0"' in (await browser.get("/")).text  # the select of `size`

    refused = await browser.post(f"/inbox/requests/{request.id}", data={"csrf": csrf, "a0.p0": posted})
    assert refused.status_code == 422, refused.text
    assert "is not a valid enum" in refused.text
    assert (await broker.get(request.id)).status is Status.PENDING

    taken = await browser.post(f"/inbox/requests/{request.id}", data={"csrf": csrf, "a0.p0": "1"})
    assert taken.status_code == 303
    settled = await broker.get(request.id)
    assert settled.response is not None and settled.response.answers == {"f": {"size": "m"}}


@pytest.mark.parametrize("posted", NOT_A_NUMBER_INT_READS, ids=["superscript", "5000 digits"])
async def test_a_ticked_grant_posted_as_digits_int_does_not_read_is_refused_and_issues_nothing(
    broker: LocalBroker, browser: httpx.AsyncClient, posted: str
) -> None:
    offered = Confirm("Deploy?", id="ok", grants=[{"with": "repo:web", "can": "deploy"}])
    request = await broker.create(offered, to="local", kind="approval")
    csrf = await csrf_of(browser)

    form = {"csrf": csrf, "action": "approve", "grant": posted}
    refused = await browser.post(f"/inbox/requests/{request.id}", data=form)
    assert refused.status_code == 422, refused.text
    assert "a ticked grant is not one this request offers" in refused.text
    assert (await broker.get(request.id)).status is Status.PENDING

    taken = await browser.post(f"/inbox/requests/{request.id}", data=form | {"grant": "0"})
    assert taken.status_code == 303
    settled = await broker.get(request.id)
    assert settled.response is not None
    assert [(g.with_, g.can) for g in settled.response.grants] == [("repo:web", "deploy")]


@pytest.mark.parametrize("stamp", NOT_A_NUMBER_INT_READS, ids=["superscript", "5000 digits"])
def test_a_slack_timestamp_of_digits_int_does_not_read_does_not_check_out(stamp: str) -> None:
    headers = {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": "v0=abc"}
    with pytest.raises(SlackSignatureError, match="timestamp is not a Unix time"):
        verify_slack("signing-secret", headers, b"payload=%7B%7D")
    fresh = {"X-Slack-Request-Timestamp": str(int(time.time())), "X-Slack-Signature": "v0=abc"}
    with pytest.raises(SlackSignatureError, match="does not match"):  # a timestamp read, as before
        verify_slack("signing-secret", fresh, b"payload=%7B%7D")


@pytest.mark.parametrize("typed", NOT_A_NUMBER_INT_READS, ids=["superscript", "5000 digits"])
def test_an_option_number_typed_at_the_terminal_as_digits_int_does_not_read_is_taken_as_typed(typed: str) -> None:
    ask = Choice("Which one?", ["red", "green"], id="c")
    assert ask.from_line(typed) == typed  # no option's number, id or label: the broker refuses it as an answer
    assert ask.from_line("2") == ask.from_line("02") == "green"
    assert ask.from_line("0") == "0"
