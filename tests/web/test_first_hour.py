"""The README's first hour, for real: `interlock serve` in a fresh folder prints a sign-in
link; a browser (headless Chromium) follows it; `interlock ask "Ship it?" --confirm` in a
second process appears in that browser without a reload, and clicking the answer unblocks it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from serve_support import SIGNIN_LINK, on_a_terminal

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]
INTERLOCK = [sys.executable, "-m", "interlock"]


def test_the_first_hour_from_serve_to_an_answer_clicked_in_the_browser(tmp_path: Path, page: Page) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("INTERLOCK_URL", "INTERLOCK_TOKEN")}
    env["INTERLOCK_USER"] = "newcomer"
    asking: subprocess.Popen[str] | None = None
    # In a terminal, as the README runs it: a sign-in link is printed only there.
    with on_a_terminal([*INTERLOCK, "serve", "--port", "0"], cwd=tmp_path, env=env, bound=300) as (_, next_line):
        try:
            link = ""
            while not link:
                line = next_line()
                assert line, "interlock serve ended without printing a sign-in link"
                assert "sign in as" not in line or "newcomer" in line
                link = found.group(1) if (found := SIGNIN_LINK.search(line)) else ""
            page.goto(link)  # the server answers once it is up: the socket is bound before the link is printed
            page.get_by_role("button", name="Sign in").click()
            expect(page.get_by_role("heading", name="Waiting for you")).to_be_visible()
            expect(page.locator("body")).to_have_attribute("data-live", "open")

            asking = subprocess.Popen(
                [*INTERLOCK, "ask", "Ship it?", "--confirm"],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            card = page.locator("#pending > li", has_text="Ship it?")
            expect(card).to_be_visible(timeout=30_000)  # live, no reload
            card.get_by_label("Yes").check()
            card.get_by_role("button", name="Send answer").click()
            out, err = asking.communicate(timeout=60)
            assert asking.returncode == 0 and out.strip() == "true", err
            expect(page.locator("#history > li", has_text="Ship it?")).to_contain_text("Answered by newcomer via web")
        finally:
            if asking is not None:
                asking.kill()
                asking.communicate(timeout=20)
