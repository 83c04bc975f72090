"""One Playwright driver, one headless Chromium and two browsers' worth of profile for the
web package's tests: a person's (`context`, `page`) and another person's (`other_page`).

Starting Playwright's driver (a Node process) takes about two seconds, and the browser
half a second more: once per module, it was paid six times over. The sync API runs an
event loop of its own in this thread for as long as it is started, so no async test may
run meanwhile: the package's tests are all sync, and pytest stops the driver before it
runs a test from another package (it tears a package's fixtures down as it leaves it).

A new tab of its own costs Chromium a renderer process started and set up, about a second
of CPU on these machines and most of a browser test's cost. So the package keeps the two
browser profiles (contexts) open, and each test's `page` is a new tab opened from a blank
tab kept in its profile, which Chromium hosts in the process it already has (about a
quarter of the cost). Each test still gets a tab of its own, with no cookies: they are
cleared when the test ends and every tab it opened is closed. Nothing else of a profile
outlives a test, since each test serves on a port of its own and the inbox keeps nothing in
the browser's storage. A test that needs a profile of other settings (no JavaScript, a
phone, a dark scheme, another time zone) opens a context of its own from `browser`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, sync_playwright

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
TIMEOUT_MS = 10_000
VIEWPORT = {"width": 1000, "height": 900}


@pytest.fixture(scope="package")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="package")
def browser(playwright: Playwright) -> Iterator[Browser]:
    b = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    yield b
    b.close()


def _profile(browser: Browser) -> Iterator[BrowserContext]:
    """A browser context kept for the package, with its blank opener tab."""
    ctx = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    ctx.set_default_timeout(TIMEOUT_MS)
    ctx.new_page()  # about:blank, never navigated: the tabs below are opened from it
    yield ctx
    ctx.close()


@pytest.fixture(scope="package")
def _first_profile(browser: Browser) -> Iterator[BrowserContext]:
    yield from _profile(browser)


@pytest.fixture(scope="package")
def _second_profile(browser: Browser) -> Iterator[BrowserContext]:
    yield from _profile(browser)


def _tab(profile: BrowserContext) -> Iterator[Page]:
    """A new tab in `profile`, opened from its blank tab; when the test is done with it,
    it and every other tab the test opened are closed, the profile's cookies cleared, and
    any error the page raised fails the test."""
    opener = profile.pages[0]
    with profile.expect_page() as opened:
        opener.evaluate("window.open('about:blank')")
    tab = opened.value
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield tab
    finally:
        for left in profile.pages[1:]:
            left.close()
        profile.clear_cookies()
    assert not errors, f"the page raised: {errors}"


@pytest.fixture
def context(_first_profile: BrowserContext) -> BrowserContext:
    """A person's browser: the package's first profile, with no cookies."""
    return _first_profile


@pytest.fixture
def page(context: BrowserContext) -> Iterator[Page]:
    """A tab of its own in a person's browser."""
    yield from _tab(context)


@pytest.fixture
def other_page(_second_profile: BrowserContext) -> Iterator[Page]:
    """A tab in another person's browser (cookies of its own)."""
    yield from _tab(_second_profile)
