"""The host configurations in docs/how-to/mcp.md work as written, with this server's URL and a
real token put in: the stdio ones start `interlock mcp`, the HTTP one reaches /mcp."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_support import BOUND, World, over_http, result

sys.path.insert(0, str(Path(__file__).parents[1] / "acceptance"))
from doc_blocks import blocks

pytestmark = pytest.mark.anyio
PAGE = Path(__file__).parents[2] / "docs" / "how-to" / "mcp.md"
EXAMPLE_URL = "https://interlock.example.com"


def configs() -> list[dict[str, Any]]:
    found = []
    for lang, code, _, reason in blocks(PAGE.read_text()):
        if lang == "json" and not reason and "mcpServers" in (parsed := json.loads(code)):
            found.extend(parsed["mcpServers"].values())
    return found


def filled(value: Any, world: World, token: str) -> Any:
    """The config with the example URL and token replaced by the test server's."""
    text = json.dumps(value).replace(EXAMPLE_URL, world.base).replace("il_your_token", token)
    return json.loads(text)


def test_the_page_configures_hosts_over_stdio_and_over_http() -> None:
    kinds = sorted("command" if "command" in c else "url" for c in configs())
    assert kinds == ["command", "command", "url"]


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(configs())))
async def test_each_host_configuration_reaches_the_tools_as_the_tokens_principal(world: World, index: int) -> None:
    config = filled(configs()[index], world, world.tokens["alice"])
    if "command" in config:
        command = shutil.which(config["command"], path=os.path.dirname(sys.executable)) or config["command"]
        params = StdioServerParameters(command=command, args=config["args"], env={**os.environ, **config["env"]})
        async with Client(params, read_timeout_seconds=BOUND) as client:
            made = result(await client.call_tool("hitl_request", {"asks": [{"type": "text", "prompt": "Hi?"}]}))
    else:
        async with (
            httpx2.AsyncClient(headers=config["headers"], timeout=BOUND) as http,
            Client(streamable_http_client(config["url"], http_client=http), read_timeout_seconds=BOUND) as client,
        ):
            made = result(await client.call_tool("hitl_request", {"asks": [{"type": "text", "prompt": "Hi?"}]}))
    assert made["user"] == "alice"  # a person asking without `user` asks herself


def tool_arguments(key: str, mentioning: str = "") -> dict[str, Any]:
    """The page's example arguments of a tool: the JSON block that has `key` (and whose
    text has `mentioning`)."""
    for lang, code, _, reason in blocks(PAGE.read_text()):
        if lang == "json" and not reason and mentioning in code and key in (parsed := json.loads(code)):
            return dict(parsed)
    raise AssertionError(f"no example with {key!r} in {PAGE.name}")


def inline_arguments(tool: str) -> dict[str, Any]:
    """The page's example arguments of a tool given inline: `` `{...}` `` after "in `tool`"."""
    found = re.search(rf"in `{tool}`: `(\{{.*?\}})`", PAGE.read_text())
    assert found is not None, f"no inline example for {tool} in {PAGE.name}"
    return dict(json.loads(found[1]))


async def test_the_pages_grant_example_issues_exactly_the_echoed_grant(world: World) -> None:
    async with over_http(world, "alice-bot") as bot, over_http(world, "alice") as alice:
        job = result(await bot.call_tool("hitl_request", tool_arguments("asks", mentioning="grants")))
        reply = {**tool_arguments("answers"), "id": job["job"]}
        result(await alice.call_tool("hitl_respond", reply))
        done = result(await bot.call_tool("hitl_status", {"job": job["job"]}))
    assert [(g["with"], g["can"]) for g in done["response"]["grants"]] == [("repo:acme/web", "push")]


async def test_the_pages_form_example_is_asked_and_its_answer_completes_the_job(world: World) -> None:
    async with over_http(world, "alice-bot") as bot, over_http(world, "alice") as alice:
        job = result(await bot.call_tool("hitl_request", tool_arguments("asks", mentioning='"form"')))
        reply = {**inline_arguments("hitl_respond"), "id": job["job"]}
        result(await alice.call_tool("hitl_respond", reply))
        done = result(await bot.call_tool("hitl_status", {"job": job["job"]}))
    assert done["status"] == "COMPLETE"
    assert done["response"]["answers"] == {"release": {"version": "1.2", "replicas": 3}}
