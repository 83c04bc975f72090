"""The interactive API page, `/docs`, in a real headless Chromium against a real server with
no way out: every request the page makes off the server's own origin is recorded and
refused, as on a machine without internet (or where a CDN is not to be trusted). The page
renders the API from what the server itself serves, under its Content-Security-Policy, and
asks nothing of anywhere else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import ConsoleMessage, Page, Route, expect

from .conftest import CHROMIUM
from .test_web_inbox import Server, serve

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)"
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with serve(tmp_path / "docs.db") as s:
        yield s


def origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def test_docs_renders_the_api_from_the_server_alone(server: Server, page: Page) -> None:
    own = origin(server.url)
    elsewhere: list[str] = []
    complaints: list[str] = []

    def no_way_out(route: Route) -> None:  # sees every request the page makes
        if origin(route.request.url) == own or route.request.url.startswith("data:"):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort("internetdisconnected")

    def complaint(message: ConsoleMessage) -> None:
        if message.type == "error":  # a refused script or style, a file not found, ...
            complaints.append(message.text)

    page.route("**/*", no_way_out)
    page.on("console", complaint)
    page.goto(f"{server.url}/docs")  # loaded: every script and style it names has come, or failed
    assert not elsewhere, f"the page asked for what its server does not serve: {elsewhere}"

    expect(page.get_by_role("heading", name="interlock")).to_be_visible()
    create = page.locator("#operations-requests-create_request")
    expect(create).to_be_visible()
    expect(create).to_contain_text("/api/v1/requests")
    expect(create.get_by_text("create_request", exact=True)).to_be_visible()  # the id a client names it by
    create.locator("button.opblock-summary-control").click()  # open: its body, from the document
    expect(create.get_by_role("button", name="Try it out")).to_be_visible()
    expect(create.get_by_text("Request body")).to_be_visible()

    assert not elsewhere, f"the page asked for what its server does not serve: {elsewhere}"
    assert not complaints, f"the page's console: {complaints}"
