"""One Playwright driver and one headless Chromium for the web package's tests, each test
in a browser context of its own (its own cookies and storage: a fresh browser profile).

Starting Playwright's driver (a Node process) takes about two seconds, and the browser
half a second more: once per module, it was paid six times over. The sync API runs an
event loop of its own in this thread for as long as it is started, so no async test may
run meanwhile: the package's tests are all sync, and pytest stops the driver before it
runs a test from another package (it tears a package's fixtures down as it leaves it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Playwright, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="package")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="package")
def browser(playwright: Playwright) -> Iterator[Browser]:
    b = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    yield b
    b.close()
