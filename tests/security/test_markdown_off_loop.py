"""A request's details are rendered as Markdown off the event loop, within a time budget,
and kept: 50 pending requests with 100,000 characters of `[*[*...` each held the loop (so
every other user of the server) for 97 s whenever their person opened the inbox."""

from __future__ import annotations

import re
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import interlock
from interlock import Text
from interlock.broker import LocalBroker
from interlock.principals import Principal
from interlock.server import markdown
from interlock.server.app import create_app
from interlock.signin import mint_signin_link

pytestmark = pytest.mark.anyio
BASE = "http://127.0.0.1:8765"


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[LocalBroker, httpx.AsyncClient]]:
    broker = interlock.connect(f"sqlite:///{tmp_path / 'md.db'}")
    assert isinstance(broker, LocalBroker)
    await broker.open()
    await broker.save_principal(Principal("alice", "human"))
    app = create_app(broker=broker, secret_key="markdown-secret-key-of-32-characters")
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url=BASE) as client:
        shown = await client.get(await mint_signin_link(broker, "alice", BASE))
        fields = {name: re.search(rf'name="{name}" value="([^"]*)"', shown.text) for name in ("csrf", "code")}
        signed = await client.post("/signin/link", data={k: v[1] for k, v in fields.items() if v is not None})
        assert signed.status_code == 303, signed.text
        yield broker, client
    await broker.aclose()


class Recording:
    """The Markdown renderer, noting the thread each rendering ran on."""

    def __init__(self, renderer: Any) -> None:
        self.renderer = renderer
        self.threads: list[threading.Thread] = []

    def render(self, text: str) -> str:
        self.threads.append(threading.current_thread())
        return str(self.renderer.render(text))


async def test_details_are_rendered_off_the_event_loop_on_every_page_that_shows_them(
    world: tuple[LocalBroker, httpx.AsyncClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    broker, client = world
    recording = Recording(markdown._renderer)
    monkeypatch.setattr(markdown, "_renderer", recording)
    loop_thread = threading.current_thread()  # the app runs on this test's loop
    for n, path in enumerate(("/", "/requests/{id}", "/inbox/requests/{id}")):
        request = await broker.create(Text("Which branch?"), to="alice", details=f"**bold {n}** [*[*[*")
        headers = {"x-interlock-fragment": "1"} if path.startswith("/inbox") else {}
        shown = await client.get(path.format(id=request.id), headers=headers)
        assert shown.status_code == 200 and f"<strong>bold {n}</strong>" in shown.text, path
    assert len(recording.threads) == 3
    assert all(thread is not loop_thread for thread in recording.threads)


async def test_past_the_budget_the_rest_is_shown_as_plain_text_and_rendered_on_a_later_visit(
    world: tuple[LocalBroker, httpx.AsyncClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    broker, client = world
    monkeypatch.setattr(markdown, "PRERENDER_SECONDS", 0.0)
    for n in range(3):
        await broker.create(Text("Which branch?"), to="alice", details=f"**budget {n}** <b>")
    first = (await client.get("/")).text
    rendered = [n for n in range(3) if f"<strong>budget {n}</strong>" in first]
    plain = [n for n in range(3) if f"<pre>**budget {n}** &lt;b&gt;</pre>" in first]
    assert len(rendered) == 1 and len(plain) == 2  # one rendering, then the budget is spent
    for _ in range(2):  # each visit renders one more (the budget is nil here), and keeps it
        later = (await client.get("/")).text
    assert all(f"<strong>budget {n}</strong>" in later for n in range(3))
