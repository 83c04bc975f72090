"""What the MCP tests share: the people and their tokens, and the official MCP client reaching
interlock's tools three ways: in process, `interlock mcp` as a stdio subprocess, and `/mcp` on
a running server (the fixtures that use these are in conftest.py)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

import interlock
from interlock.mcp import Seat, build_server, fixed_access
from interlock.mcp.transports import caller_of
from interlock.model import request_to_dict
from interlock.principals import Principal, issue_token

BOUND = 30
PEOPLE = (
    Principal("alice", "human"),
    Principal("bob", "human"),
    Principal("alice-bot", "agent", owner="alice"),
)

MCP = Callable[[str], AbstractAsyncContextManager[Client]]


@dataclass
class World:
    base: str
    db: str
    tokens: dict[str, str]

    def api(self, who: str) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        return httpx.AsyncClient(base_url=f"{self.base}/api/v1", headers=headers, timeout=BOUND)


async def add_people(db: str) -> dict[str, str]:
    """The humans and agents of the tests, each with a token, in the store at `db`."""
    tokens: dict[str, str] = {}
    async with interlock.connect(db) as broker:
        for principal in PEOPLE:
            await broker.store.save_principal(principal)
            token = issue_token(principal.name, datetime.now(UTC))
            await broker.store.save_token(token)
            tokens[principal.name] = token.secret
    return tokens


def stdio_params(*args: str, token: str | None = None, user: str | None = None) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if k not in ("INTERLOCK_URL", "INTERLOCK_TOKEN")}
    if token is not None:
        env["INTERLOCK_TOKEN"] = token
    if user is not None:
        env["INTERLOCK_USER"] = user
    return StdioServerParameters(command=sys.executable, args=["-m", "interlock", "mcp", *args], env=env)


@contextlib.asynccontextmanager
async def in_process(world: World, who: str) -> AsyncIterator[Client]:
    async with interlock.connect(world.base, token=world.tokens[who]) as broker:
        seat = Seat(broker, await caller_of(broker))
        async with Client(build_server(fixed_access(seat)), read_timeout_seconds=BOUND) as client:
            yield client


@contextlib.asynccontextmanager
async def over_stdio(world: World, who: str) -> AsyncIterator[Client]:
    params = stdio_params("--server", world.base, token=world.tokens[who])
    async with Client(params, read_timeout_seconds=BOUND) as client:
        yield client


@contextlib.asynccontextmanager
async def over_http(world: World, who: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {world.tokens[who]}"}
    async with httpx2.AsyncClient(headers=headers, timeout=BOUND) as http:
        transport = streamable_http_client(f"{world.base}/mcp", http_client=http)
        async with Client(transport, read_timeout_seconds=BOUND) as client:
            yield client


WAYS = {"in_process": in_process, "stdio": over_stdio, "http": over_http}
# Each tool's behaviour is checked in process and over /mcp (`mcp_as`'s own params). Over
# stdio each client is an `interlock mcp` subprocess (a second or two to start), and what it
# adds is the same for every tool: the CLI's wiring of the server and the token. So the
# tests marked EVERY_WAY run over stdio too: the tools listed, a whole job between two
# principals, who may answer, a call held open until the answer, a grant issued.
EVERY_WAY = pytest.mark.parametrize("mcp_as", list(WAYS), indirect=True)


def result(called: Any) -> Any:
    """A tool call's structured result; fails the test on a tool error."""
    assert not called.is_error, called.content[0].text
    return called.structured_content


def error(called: Any) -> str:
    """A tool call's error text; fails the test if the call succeeded."""
    assert called.is_error, f"expected an error, got {called.structured_content}"
    return str(called.content[0].text)


async def next_created(world: World, who: str) -> dict[str, Any]:
    """The next request created for `who`, as the API shows it (follows the event stream)."""
    async with interlock.connect(world.base, token=world.tokens[who]) as broker:
        async for event in broker.events(after=0, follow=True):
            if event.type == "created" and event.request is not None and event.request.to == who:
                return request_to_dict(event.request)
    raise AssertionError("the event stream ended")
