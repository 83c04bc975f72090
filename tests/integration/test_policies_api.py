"""The approval policies API against a real server with auth on: who may set, read and
delete an agent's policy, the refusal of bad policies (nothing changes), the secret shown
only to the agent's gate, and a remote agent's gate applying what its owner stored."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

import interlock
from interlock.agent import ApprovalGate, ToolCall
from interlock.broker import LocalBroker
from interlock.errors import Forbidden
from interlock.principals import Principal, issue_token

pytestmark = pytest.mark.anyio
BOUND = 10
SECRET = "hook-secret-0123456789"
POLICY = {
    "approval": "always",
    "gatedTools": ["deploy"],
    "autoAllow": ["read_file"],
    "hook": {"url": "https://hooks.example.com/approve", "secret": SECRET, "onHookError": "pause"},
}


@dataclass
class World:
    base: str
    tokens: dict[str, str]

    def client(self, who: str) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        return httpx.AsyncClient(base_url=f"{self.base}/api/v1", headers=headers, timeout=BOUND)

    def broker(self, who: str) -> interlock.Broker:
        return interlock.connect(self.base, token=self.tokens[who])


@pytest.fixture
def world(
    tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]
) -> Callable[..., AbstractAsyncContextManager[World]]:
    """A server with auth on; alice and carol (people) and bot (alice's agent), each with a
    token. (The operator of a server without auth is its admin: the gate's suite runs as it.)"""

    @asynccontextmanager
    async def make(**options: Any) -> AsyncIterator[World]:
        db = f"sqlite:///{tmp_path / f'policies-{time.monotonic_ns()}.db'}"
        tokens: dict[str, str] = {}
        async with interlock.connect(db) as broker:
            assert isinstance(broker, LocalBroker)
            for principal in (
                Principal("alice", "human"),
                Principal("carol", "human"),
                Principal("bot", "agent", owner="alice"),
            ):
                await broker.store.save_principal(principal)
                token = issue_token(principal.name, datetime.now(UTC))
                await broker.store.save_token(token)
                tokens[principal.name] = token.secret
        with serve(db, auth=True, **options) as base:
            yield World(base, tokens)

    return make


async def test_the_owner_stores_the_policy_and_reads_it_back_without_the_secret(
    world: Callable[..., AbstractAsyncContextManager[World]],
) -> None:
    async with world() as w, w.client("alice") as alice:
        put = await alice.put("/approval-policies/bot", json=POLICY)
        assert put.status_code == 200, put.text
        got = (await alice.get("/approval-policies/bot")).json()
        assert (got["agent"], got["server"], got["approval"], got["version"], got["updatedBy"]) == (
            "bot",
            None,
            "always",
            1,
            "alice",
        )
        assert (got["gatedTools"], got["autoAllow"]) == (["deploy"], ["read_file"])
        assert got["hook"] == {
            "url": POLICY["hook"]["url"],
            "onHookError": "pause",
            "timeout": 10.0,
            "hasSecret": True,
            "secret": None,
        }
        server = await alice.put("/approval-policies/bot/servers/github", json={"approval": "never"})
        assert server.json()["server"] == "github"
        listed = (await alice.get("/approval-policies")).json()["items"]
        assert [(p["agent"], p["server"]) for p in listed] == [("bot", None), ("bot", "github")]
        assert SECRET not in put.text + server.text + str(listed)


async def test_nobody_but_the_owner_or_an_admin_changes_an_agents_policy(
    world: Callable[..., AbstractAsyncContextManager[World]],
) -> None:
    async with world() as w, w.client("alice") as alice, w.client("carol") as carol, w.client("bot") as bot:
        await alice.put("/approval-policies/bot", json=POLICY)
        loosen = {"approval": "never"}
        for who, client in (("carol", carol), ("bot", bot)):
            for response in (
                await client.put("/approval-policies/bot", json=loosen),
                await client.post("/approval-policies", json={"agent": "bot", **loosen}),
                await client.delete("/approval-policies/bot"),
            ):
                assert response.status_code == 403, (who, response.text)
                assert response.json()["code"] == "forbidden"
        assert (await carol.get("/approval-policies/bot")).status_code == 403
        assert (await carol.get("/approval-policies")).json()["items"] == []
        assert (await carol.put("/approval-policies/carol", json=loosen)).status_code == 403  # not an agent
        got = (await alice.get("/approval-policies/bot")).json()
        assert (got["approval"], got["version"]) == ("always", 1)
        assert (await alice.delete("/approval-policies/bot")).json()["deleted"] is True
        assert (await alice.delete("/approval-policies/bot")).json()["deleted"] is False
        assert (await alice.get("/approval-policies/bot")).status_code == 404


async def test_the_agent_reads_its_policy_and_only_it_gets_the_secret_to_sign_with(
    world: Callable[..., AbstractAsyncContextManager[World]],
) -> None:
    async with world() as w, w.client("alice") as alice, w.client("bot") as bot:
        await alice.put("/approval-policies/bot", json=POLICY)
        assert (await bot.get("/approval-policies/bot")).json()["hook"]["secret"] is None
        assert [p["agent"] for p in (await bot.get("/approval-policies")).json()["items"]] == ["bot"]
        effective = (await bot.get("/approval-policies/bot/effective", params={"server": "github"})).json()
        assert effective["policy"]["hook"]["secret"] == SECRET
        assert (await alice.get("/approval-policies/bot/effective")).status_code == 403


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"approval": "sometimes"}, "approval"),
        ({"gatedTools": "deploy"}, "gatedTools"),
        ({"hook": {"url": "http://hooks.example.com/x", "secret": SECRET}}, "hook.url"),
        ({"hook": {"url": "not a url", "secret": SECRET}}, "hook.url"),
        ({"autoAllow": ["ok"], "approvalMode": "once"}, "approvalMode"),
        ({"approval": "never", "server": "github"}, "server"),  # the whole toolset's route: no server
    ],
)
async def test_a_bad_policy_is_refused_with_the_field_named_and_changes_nothing(
    world: Callable[..., AbstractAsyncContextManager[World]], body: dict[str, Any], field: str
) -> None:
    async with world() as w, w.client("alice") as alice:
        await alice.put("/approval-policies/bot", json=POLICY)
        response = await alice.put("/approval-policies/bot", json=body)
        assert response.status_code == 422, response.text
        assert response.json()["code"] == "invalid_request"
        assert response.json()["detail"].startswith(field)
        got = (await alice.get("/approval-policies/bot")).json()
        assert (got["approval"], got["version"]) == ("always", 1)
        json_type = {"Content-Type": "application/json"}
        broken = await alice.put("/approval-policies/bot", content=b"{nope", headers=json_type)
        assert broken.status_code == 400


async def test_a_remote_agents_gate_applies_what_its_owner_stored_at_its_next_decision(
    world: Callable[..., AbstractAsyncContextManager[World]],
) -> None:
    async with world() as w, w.broker("alice") as alice, w.broker("bot") as bot:
        stored = await alice.set_approval_policy({"agent": "bot", "approval": "never"})
        assert stored.updated_by == "alice"
        with pytest.raises(Forbidden):
            await bot.set_approval_policy({"agent": "bot", "approval": "never"})
        gate = ApprovalGate(bot)
        deploy = ToolCall("deploy", {"env": "prod"}, "c1", session="s1")
        assert await asyncio.wait_for(gate.authorize(deploy), BOUND) == {"env": "prod"}
        (update,) = [e for e in await alice.find_events() if e.type == "informed"]
        assert update.data["to"] == "alice" and update.data["data"]["decision"] == "allow"

        await alice.set_approval_policy({"agent": "bot", "approval": "always"})
        after = await alice.last_event_id()
        task = asyncio.create_task(gate.authorize(ToolCall("deploy", {"env": "prod"}, "c2", session="s1")))
        async with asyncio.timeout(BOUND):
            async for event in alice.events(after, follow=True):
                if event.type == "created" and event.request is not None:
                    break
        assert event.request is not None and event.request.to == "alice"
        await alice.resolve(event.request.id, {"approve": True})
        assert await asyncio.wait_for(task, BOUND) == {"env": "prod"}
        assert [p.version for p in await alice.list_approval_policies("bot")] == [2]
        assert (await alice.get_approval_policy("bot")).approval == "always"
        assert await alice.delete_approval_policy("bot")
