"""A secret compared with what a client sent refuses text that is not ASCII (a CSRF token,
a webhook's or Slack's signature, an answer link's signature) as it refuses any other
wrong value: `hmac.compare_digest` raises TypeError on non-ASCII strings, which answered
500 to anyone, signed in or not."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

import interlock
from interlock.broker import LocalBroker
from interlock.channels.links import AnswerLinks, InvalidLink
from interlock.channels.slack import SlackSignatureError, verify_slack
from interlock.server.app import create_app
from interlock.webhooks import InvalidSignature, verify

pytestmark = pytest.mark.anyio
BASE = "http://127.0.0.1:8765"


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    broker = interlock.connect(f"sqlite:///{tmp_path / 'ascii.db'}")
    assert isinstance(broker, LocalBroker)
    await broker.open()
    app = create_app(broker=broker, secret_key="non-ascii-secret-key-of-32-characters")
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url=BASE) as client:
        yield client
    await broker.aclose()


async def test_a_csrf_token_that_is_not_ascii_is_refused_as_stale_not_a_500(client: httpx.AsyncClient) -> None:
    answer = await client.post("/signin", data={"csrf": "é", "token": "x"}, headers={"Cookie": "interlock_signin=abc"})
    assert answer.status_code == 403 and "stale or came from another site" in answer.text


def test_a_webhook_signature_that_is_not_ascii_does_not_check_out() -> None:
    headers = {"Interlock-Timestamp": str(int(time.time())), "Interlock-Signature": "v1=é"}
    with pytest.raises(InvalidSignature, match="does not match"):
        verify("a-long-random-shared-secret", headers, b"{}")


def test_a_slack_signature_that_is_not_ascii_does_not_check_out() -> None:
    headers = {"X-Slack-Request-Timestamp": str(int(time.time())), "X-Slack-Signature": "v0=é"}
    with pytest.raises(SlackSignatureError, match="does not match"):
        verify_slack("signing-secret", headers, b"payload=%7B%7D")


def test_an_answer_link_whose_signature_is_not_ascii_is_not_valid() -> None:
    links = AnswerLinks("a secret of sixteen characters", BASE)
    with pytest.raises(InvalidLink, match="not valid"):
        links.read("eyJyIjoiMSJ9.é")
