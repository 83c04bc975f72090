"""The MCP tests' fixtures: a server with people and agents (`world`), and the MCP client of a
principal reached one way or another (`mcp_as`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp_support import MCP, WAYS, World, add_people


@pytest.fixture
def world(tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]) -> Iterator[World]:
    db = f"sqlite:///{tmp_path / 'mcp.db'}"
    tokens = anyio.run(add_people, db)
    with serve(db, auth=True) as base:
        yield World(base, db, tokens)


@pytest.fixture(params=["in_process", "http"])
def mcp_as(request: pytest.FixtureRequest, world: World) -> MCP:
    """`async with mcp_as("alice") as client:` the MCP client of that principal, one way
    (over stdio too for a test marked EVERY_WAY: see mcp_support)."""
    way = WAYS[str(request.param)]

    def open_as(who: str) -> AbstractAsyncContextManager[Client]:
        return way(world, who)

    return open_as
