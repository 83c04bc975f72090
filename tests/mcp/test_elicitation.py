"""MCP elicitation routed to a person: a real MCP server built with the SDK elicits, the
official client's handler (`InboxElicitation`) asks the person through their inbox, and
the person answers through the HTTP API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client, MCPError
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult
from mcp_support import BOUND, World, next_created
from pydantic import BaseModel

import interlock
from interlock import Broker
from interlock.mcp import InboxElicitation

pytestmark = pytest.mark.anyio


class Deploy(BaseModel):
    approve: bool
    note: str


SCHEMA = {
    "type": "object",
    "properties": {"approve": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approve", "note"],
}


def legacy_server() -> MCPServer:
    """A server of the 2025 protocol era: it elicits with a request to the client."""
    server = MCPServer("deployer")

    @server.tool()
    async def deploy(ctx: Context) -> str:
        answer = await ctx.elicit("Deploy build 42 to production?", Deploy)
        if answer.action == "accept":
            return f"accept approve={answer.data.approve} note={answer.data.note}"
        return answer.action

    return server


def modern_server() -> MCPServer:
    """A server of the 2026 era: it answers input_required and reads the answer on the retry."""
    server = MCPServer("deployer")

    @server.tool()
    async def deploy(ctx: Context) -> str | InputRequiredResult:
        responses = ctx.input_responses or {}
        if "go" not in responses:
            params = ElicitRequestFormParams(message="Deploy build 42 to production?", requested_schema=SCHEMA)
            return InputRequiredResult(input_requests={"go": ElicitRequest(params=params)})
        answer: Any = responses["go"]
        content = answer.content or {}
        return f"{answer.action} approve={content.get('approve')} note={content.get('note')}"

    return server


ERAS = {"legacy": (legacy_server, "legacy"), "modern": (modern_server, "auto")}


@pytest.fixture
async def bot(world: World) -> AsyncIterator[Broker]:
    async with interlock.connect(world.base, token=world.tokens["alice-bot"]) as broker:
        yield broker


async def call_while(client: Client, person: Any) -> str:
    """Call `deploy` and, beside it, let `person()` act in the inbox; the tool's text."""
    out: dict[str, str] = {}

    async def call() -> None:
        called = await client.call_tool("deploy", {})
        assert not called.is_error, called.content[0].text  # type: ignore[union-attr]
        out["text"] = called.content[0].text  # type: ignore[union-attr]

    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await person()
    return out["text"]


@pytest.mark.parametrize("era", list(ERAS))
async def test_an_answer_in_the_inbox_accepts_with_the_checked_content(world: World, bot: Broker, era: str) -> None:
    make, mode = ERAS[era]
    elicit = InboxElicitation(bot, title="deployer")

    async def alice() -> None:
        request = await next_created(world, "alice")
        assert request["asks"][0]["type"] == "form" and request["title"] == "deployer"
        async with world.api("alice") as api:
            bad = await api.post(f"/requests/{request['id']}/answer", json={"answer": {"approve": "yes"}})
            assert bad.status_code == 422 and bad.json()["code"] == "invalid_answer"  # still open
            good = await api.post(f"/requests/{request['id']}/answer", json={"answer": {"approve": True, "note": "ok"}})
            assert good.status_code == 200, good.text

    async with Client(make(), elicitation_callback=elicit, mode=mode) as client:
        assert await call_while(client, alice) == "accept approve=True note=ok"


@pytest.mark.parametrize("era", list(ERAS))
async def test_a_rejection_declines(world: World, bot: Broker, era: str) -> None:
    make, mode = ERAS[era]

    async def alice() -> None:
        request = await next_created(world, "alice")
        async with world.api("alice") as api:
            rejected = await api.post(f"/requests/{request['id']}/reject", json={"reason": "not today"})
            assert rejected.status_code == 200

    async with Client(make(), elicitation_callback=InboxElicitation(bot), mode=mode) as client:
        assert (await call_while(client, alice)).startswith("decline")


async def test_expiry_cancels(world: World, bot: Broker) -> None:
    async def nobody() -> None:
        pass

    elicit = InboxElicitation(bot, timeout=0.5)
    async with Client(legacy_server(), elicitation_callback=elicit, mode="legacy") as client:
        assert await call_while(client, nobody) == "cancel"
    async with world.api("alice") as api:
        assert (await api.get("/requests", params={"status": "expired"})).json()["items"]


async def test_a_withdrawn_request_cancels(world: World, bot: Broker) -> None:
    async def requester_withdraws() -> None:
        request = await next_created(world, "alice")
        async with httpx.AsyncClient(base_url=f"{world.base}/api/v1", timeout=BOUND) as http:
            headers = {"Authorization": f"Bearer {world.tokens['alice-bot']}"}
            cancelled = await http.post(f"/requests/{request['id']}/cancel", json={}, headers=headers)
            assert cancelled.status_code == 200, cancelled.text

    async with Client(legacy_server(), elicitation_callback=InboxElicitation(bot), mode="legacy") as client:
        assert await call_while(client, requester_withdraws) == "cancel"


def test_a_bridge_needs_a_positive_timeout() -> None:
    with pytest.raises(ValueError, match="positive"):
        InboxElicitation(interlock.connect("memory://"), timeout=0)


async def test_a_server_that_gives_up_withdraws_the_request_from_the_inbox(world: World, bot: Broker) -> None:
    server = MCPServer("impatient")

    @server.tool()
    async def deploy(ctx: Context) -> str:
        with anyio.move_on_after(1):
            return (await ctx.elicit("Deploy build 42?", Deploy)).action
        return "gave up"

    async def alice_sees_it_withdrawn() -> None:
        request = await next_created(world, "alice")
        async with world.api("alice") as api:
            settled = await api.get(f"/requests/{request['id']}/wait", params={"timeout": BOUND - 5})
        assert (settled.json()["status"], settled.json()["response"]["cause"]) == ("cancelled", "withdrawn")

    async with Client(server, elicitation_callback=InboxElicitation(bot), mode="legacy") as client:
        assert await call_while(client, alice_sees_it_withdrawn) == "gave up"


@pytest.mark.parametrize("era", list(ERAS))
async def test_an_elicitation_the_inbox_refuses_is_an_error_the_server_reads_not_a_crash(
    world: World, bot: Broker, era: str
) -> None:
    make, mode = ERAS[era]
    elicit = InboxElicitation(bot, to="bob")  # alice-bot may ask only its owner
    async with Client(make(), elicitation_callback=elicit, mode=mode) as client:
        with anyio.fail_after(BOUND), pytest.raises(MCPError) as refused:
            await client.call_tool("deploy", {})
        assert "the inbox refused this elicitation" in refused.value.error.message
        assert "bob" in refused.value.error.message
        async with world.api("bob") as api:
            assert (await api.get("/requests")).json()["items"] == []
