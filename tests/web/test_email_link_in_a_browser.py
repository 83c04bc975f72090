# ruff: noqa: F811  (the fixtures imported from test_web_inbox and test_web_reach are parameters here)
"""An email's one-click answer followed in a real headless Chromium, against a real
`interlock serve --no-auth` process (a person's own machine) that mails through a real SMTP
server, while the agent waits in a real `interlock ask` process: the link opened from the
email's HTML part, its button pressed, the agent's wait ends with the answer."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from email.message import EmailMessage
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from .test_web_reach import BOUND, Mailbox, free_port, mailbox  # noqa: F401 - the fixture

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]
INTERLOCK = [sys.executable, "-m", "interlock"]


def html_link(message: EmailMessage, words: str) -> str:
    """The href of the HTML part's link that shows `words`, as a mail program shows it."""
    rich = message.get_body(("html",))
    assert rich is not None
    found: dict[str, str] = {}

    class Links(HTMLParser):
        href: str | None = None

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.href = dict(attrs).get("href") if tag == "a" else self.href

        def handle_data(self, data: str) -> None:
            if self.href is not None and data.strip():
                found[data.strip()] = self.href
                self.href = None

    Links().feed(rich.get_content())
    assert words in found, found
    return found[words]


@pytest.fixture
def served(tmp_path: Path, mailbox: Mailbox) -> Iterator[str]:
    """`interlock serve --no-auth --routing routing.toml` on the port its routing's
    inbox_url names."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    (tmp_path / "routing.toml").write_text(
        f'inbox_url = "{url}"\n'
        f'[channels.mail]\ntype = "email"\nhost = "127.0.0.1"\nport = {mailbox.port}\nfrom = "interlock@example.com"\n'
        '[recipients.alice]\nchannels = ["mail"]\naddresses = { mail = "alice@example.com" }\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")} | {"INTERLOCK_USER": "alice"}
    args = ["--db", f"sqlite:///{tmp_path / 'interlock.db'}", "--routing", str(tmp_path / "routing.toml")]
    log = tmp_path / "serve.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen([*INTERLOCK, "serve", "--port", str(port), "--no-auth", *args], env=env, stderr=stderr)
    try:
        deadline = time.monotonic() + 60  # imports and the store's migrations, on a busy machine
        while True:  # bounded: healthy, or the server ended, or the deadline passed
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/healthz", timeout=BOUND).status_code == 200:
                    break
            time.sleep(0.05)
        assert f"serving {url} on" in log.read_text()
        yield url
    finally:
        proc.terminate()
        proc.wait(BOUND)


def test_an_emailed_answer_pressed_in_a_browser_ends_the_agents_wait_on_a_server_without_auth(
    served: str, mailbox: Mailbox, page: Page, tmp_path: Path
) -> None:
    """The answer page had told the browser to send no referrer, so Chromium posted its
    form with `Origin: null`, which a server without auth refuses as a change from another
    site: the person saw a 403 in JSON and the agent went on waiting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    agent = subprocess.Popen(
        [*INTERLOCK, "ask", "Ship v2 to production?", "--confirm", "--title", "Deploy v2", "--to", "alice"],
        env=env | {"INTERLOCK_URL": served},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        [message] = mailbox.until(1)
        page.goto(html_link(message, "Yes"))
        expect(page.get_by_text("Answer as alice")).to_be_visible()
        page.get_by_role("button", name="Yes").click()
        expect(page.get_by_role("heading", name="Answer recorded")).to_be_visible()
        out, err = agent.communicate(timeout=BOUND)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.communicate(timeout=BOUND)
    assert agent.returncode == 0, err
    assert json.loads(out) is True  # what `interlock ask` prints: the answer
    settled = httpx.get(f"{served}/api/v1/requests/{message['X-Interlock-Request']}", timeout=BOUND).json()
    assert (settled["status"], settled["response"]["by"], settled["response"]["via"]) == ("answered", "alice", "email")
    page.goto(html_link(message, "No"))  # the other answer, once one was given
    expect(page.get_by_role("alert")).to_contain_text("This request was already answered by alice at")
    expect(page.get_by_role("button")).to_have_count(0)
