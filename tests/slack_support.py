"""A fake of Slack for the tests that deliver to it: its Web API (`chat.postMessage`,
`chat.update`, `views.open`, ...) and an interaction's `response_url`, served over real
HTTP on a loopback port (no network), recording each call with its headers; and what
Slack posts back to an app, signed as Slack signs it.

`fake_slack(token, signing_secret)` serves one for the length of a test; the tests name
its `api_url` in their routing and post `signed` payloads to interlock's interactive
endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import urlencode

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

BOUND = 20  # seconds: the most a wait for Slack's calls, or its server's start and stop, may take


class Call(NamedTuple):
    """One call Slack received: a Web API method's name (`response` for a `response_url`),
    its JSON body, and its headers."""

    method: str
    body: dict[str, Any]
    headers: Mapping[str, str]


@dataclass
class FakeSlack:
    token: str
    """The bot token Slack's Web API methods take (checked); a `response_url` takes none."""
    signing_secret: str
    """The app's signing secret, which signs what Slack posts to the app."""
    url: str = ""
    calls: list[Call] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    """Slack errors to answer with, by method."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def api_url(self) -> str:
        """Where the Web API's methods are: a routing's Slack channel's `api_url`."""
        return f"{self.url}/api"

    @property
    def channel(self) -> dict[str, Any]:
        """A routing's Slack channel that delivers to this fake, with its token and secret."""
        return {"type": "slack", "token": self.token, "signing_secret": self.signing_secret, "api_url": self.api_url}

    @property
    def response_url(self) -> str:
        """The `response_url` of the interactions Slack posts."""
        return f"{self.url}/api/response"

    async def calls_until(self, method: str, count: int = 1) -> list[Call]:
        """The calls to `method` so far, once there are at least `count` (bounded)."""
        with anyio.fail_after(BOUND):
            while len(found := [call for call in self.calls if call.method == method]) < count:
                self.changed.clear()
                await self.changed.wait()
        return found

    async def until(self, method: str, count: int = 1) -> list[dict[str, Any]]:
        """The bodies of the calls to `method` so far, once there are at least `count`."""
        return [call.body for call in await self.calls_until(method, count)]

    def signed(self, payload: dict[str, Any], secret: str | None = None, at: float | None = None) -> dict[str, Any]:
        """What Slack POSTs to the app, as `httpx` `post` arguments: the payload
        form-encoded, signed with v0 HMAC-SHA256 of `v0:{timestamp}:{body}` with the app's
        signing secret (or `secret`), stamped now (or `at`)."""
        body = urlencode({"payload": json.dumps(payload)}).encode()
        stamp = str(int(time.time() if at is None else at))
        key = (self.signing_secret if secret is None else secret).encode()
        digest = hmac.new(key, b"v0:" + stamp.encode() + b":" + body, hashlib.sha256).hexdigest()
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": f"v0={digest}",
        }
        return {"content": body, "headers": headers}


@contextlib.asynccontextmanager
async def fake_slack(token: str, signing_secret: str) -> AsyncIterator[FakeSlack]:
    """A `FakeSlack` served on a free loopback port, stopped after."""
    state = FakeSlack(token, signing_secret)

    async def method(request: Request) -> JSONResponse:
        name = request.path_params["method"]
        body = await request.json()
        # the bot token goes to the Web API's methods, never to an interaction's response_url
        assert (request.headers.get("authorization") == f"Bearer {state.token}") == (name != "response")
        state.calls.append(Call(name, body, dict(request.headers)))
        state.changed.set()
        if name in state.errors:
            return JSONResponse({"ok": False, "error": state.errors[name]})
        count = len(state.calls)
        return JSONResponse({"ok": True, "channel": body.get("channel", "D0"), "ts": f"1700000000.{count:06d}"})

    app = Starlette(routes=[Route("/api/{method}", method, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    with anyio.fail_after(BOUND):
        while not server.started:  # noqa: ASYNC110  # uvicorn offers no event for it
            await asyncio.sleep(0.005)
    state.url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    try:
        yield state
    finally:
        server.should_exit = True
        with anyio.fail_after(BOUND):
            await task
