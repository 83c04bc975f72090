"""The argument schemas an MCP client reads for each tool stay the ones MCP clients were
written against (Covia's adapter, MAS's request_human_input): tool_schemas.json holds them.

A deliberate change of a tool's arguments rewrites the file: `python tests/mcp/test_tool_schemas.py`.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

import interlock
from interlock.mcp import Seat, build_server, fixed_access
from interlock.principals import ANONYMOUS

pytestmark = pytest.mark.anyio

PINNED = Path(__file__).with_name("tool_schemas.json")


async def input_schemas() -> dict[str, Any]:
    """Each tool's input schema, as the official MCP client lists it."""
    async with interlock.connect("memory://") as broker:
        server = build_server(fixed_access(Seat(broker, ANONYMOUS)))
        async with Client(server) as client:
            return {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}


async def test_every_tools_argument_schema_is_the_pinned_one() -> None:
    pinned = json.loads(PINNED.read_text("utf-8"))
    listed = await input_schemas()
    assert sorted(listed) == sorted(pinned)
    for name, schema in listed.items():
        assert schema == pinned[name], f"{name}'s arguments changed: {json.dumps(schema, indent=1, sort_keys=True)}"


if __name__ == "__main__":
    schemas = asyncio.run(input_schemas())
    PINNED.write_text(json.dumps(schemas, indent=2, sort_keys=True) + "\n", "utf-8")
    sys.exit(0)
