"""A long poll is a stream of one answer: a token revoked while it is held open ends it at
once with 401, and what it waited for (an answer, a run to resume with its state) goes to
nobody. Before, a wait, a create with `wait` and a worker's claim opened just before the
revocation went on and handed the answer, or the run, to the revoked token; through MCP a
`hitl_status` with `wait` did the same."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from poll_support import Entered

import interlock
from interlock.broker import LocalBroker
from interlock.principals import Principal, issue_token
from interlock.server.common import AppState

pytestmark = pytest.mark.anyio
BOUND = 20
HELD = 120  # seconds a long poll asks to be held: far past BOUND, so only the revocation ends it in time
TEXT = {"asks": [{"type": "text", "id": "t", "prompt": "The launch code?"}]}


@dataclass
class World:
    base: str
    db: str
    tokens: dict[str, str]
    ids: dict[str, str]

    def api(self, who: str) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        return httpx.AsyncClient(base_url=f"{self.base}/api/v1", headers=headers, timeout=HELD + BOUND)


async def add_people(db: str) -> tuple[dict[str, str], dict[str, str]]:
    tokens, ids = {}, {}
    async with interlock.connect(db) as broker:
        for principal in (Principal("alice", "human"), Principal("bot", "agent", "alice")):
            await broker.store.save_principal(principal)
        for key, name in (("alice", "alice"), ("bot", "bot"), ("bot-2", "bot")):
            token = issue_token(name, datetime.now(UTC))
            await broker.store.save_token(token)
            tokens[key], ids[key] = token.secret, token.id
    return tokens, ids


@pytest.fixture
def world(tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]) -> Iterator[World]:
    db = f"sqlite:///{tmp_path / 'polls.db'}"
    tokens, ids = anyio.run(add_people, db)
    with serve(db, auth=True) as base:
        yield World(base, db, tokens, ids)


@pytest.fixture
async def clients(world: World) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    made = {who: world.api(who) for who in world.tokens}
    yield made
    for client in made.values():
        await client.aclose()


async def revoke(world: World, key: str) -> None:
    """Revoke one token as `interlock token revoke` does: on the store, from another broker."""
    async with interlock.connect(world.db) as broker:
        assert await broker.revoke_tokens(token_id=world.ids[key]) == 1


async def test_a_wait_a_create_with_wait_and_a_claim_held_open_end_with_401_when_the_token_is_revoked(
    world: World, clients: dict[str, httpx.AsyncClient], entered: Entered
) -> None:
    bot, alice = clients["bot"], clients["alice"]
    waited = (await bot.post("/requests", json=TEXT)).json()["id"]
    assert (await bot.post("/runs", json={"agent": "bot", "run_id": "launch"})).status_code == 201
    of_run = (await bot.post("/requests", json={**TEXT, "origin": {"run": "launch"}})).json()["id"]
    parked = await bot.post("/runs/launch/park", json={"waiting_on": [of_run], "state": {"step": "secret"}})
    assert parked.status_code == 200, parked.text
    ended: dict[str, httpx.Response] = {}

    async def hold(name: str, method: str, path: str, **options: Any) -> None:
        ended[name] = await bot.request(method, path, **options)

    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as polls:
            polls.start_soon(partial(hold, "wait", "GET", f"/requests/{waited}/wait", params={"timeout": HELD}))
            polls.start_soon(partial(hold, "create", "POST", "/requests", params={"wait": HELD}, json=TEXT))
            polls.start_soon(
                partial(hold, "claim", "POST", "/runs/claim", params={"wait": HELD}, json={"worker": "w1"})
            )
            await entered.reach(3)
            await revoke(world, "bot")
    for name in ("wait", "create", "claim"):
        assert ended[name].status_code == 401, (name, ended[name].text)
        assert ended[name].json()["detail"] == "the token was revoked"
    # Nothing was answered meanwhile; what the revoked token waited for now goes to nobody.
    pending = (await alice.get("/requests", params={"status": "pending"})).json()["items"]
    assert sorted(r["id"] for r in pending) == sorted([waited, of_run])  # the create's was withdrawn
    for request_id in (waited, of_run):
        answered = await alice.post(f"/requests/{request_id}/answer", json={"answers": {"t": "0000"}})
        assert answered.status_code == 200, answered.text
    # The run was not claimed for the revoked token: the agent's live token claims it.
    claimed = await clients["bot-2"].post("/runs/claim", params={"wait": BOUND}, json={"worker": "w2"})
    assert claimed.status_code == 200, claimed.text
    assert claimed.json()["id"] == "bot:launch" and claimed.json()["worker"] == "w2"


async def test_an_mcp_hitl_status_held_open_ends_with_an_error_when_the_token_is_revoked(
    world: World, clients: dict[str, httpx.AsyncClient], entered: Entered
) -> None:
    headers = {"Authorization": f"Bearer {world.tokens['bot']}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=HELD + BOUND) as http,
        Client(streamable_http_client(f"{world.base}/mcp", http_client=http)) as mcp,
    ):
        asked = {"asks": [{"type": "text", "prompt": "The launch code?"}]}
        job = (await mcp.call_tool("hitl_request", asked)).structured_content
        assert job is not None
        outcome: dict[str, Any] = {}

        async def status() -> None:
            outcome["called"] = await mcp.call_tool("hitl_status", {"job": job["job"], "wait": 300})

        with anyio.fail_after(BOUND):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(status)
                await entered.reach(1)
                await revoke(world, "bot")
    called = outcome["called"]
    assert called.is_error, called.structured_content
    assert "revoked" in called.content[0].text
    pending = (await clients["alice"].get(f"/requests/{job['job']}")).json()
    assert pending["status"] == "pending"


async def test_a_claim_made_as_its_token_is_revoked_gives_its_run_back_at_once(
    world: World, clients: dict[str, httpx.AsyncClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    bot, alice = clients["bot"], clients["alice"]
    assert (await bot.post("/runs", json={"agent": "bot", "run_id": "launch"})).status_code == 201
    of_run = (await bot.post("/requests", json={**TEXT, "origin": {"run": "launch"}})).json()["id"]
    parked = await bot.post("/runs/launch/park", json={"waiting_on": [of_run], "state": {"step": "secret"}})
    assert parked.status_code == 200, parked.text
    answered = await alice.post(f"/requests/{of_run}/answer", json={"answers": {"t": "0000"}})
    assert answered.status_code == 200, answered.text

    # The store claims the run for the worker at the very moment its token is revoked: the
    # revocation reaches the server's hub before the claim's answer goes out.
    apps: list[AppState] = []
    held, claim_run = AppState.held, LocalBroker.claim_run

    async def holding(self: AppState, *args: Any, **options: Any) -> Any:
        apps.append(self)
        return await held(self, *args, **options)

    async def claimed_as_revoked(self: LocalBroker, *args: Any, **options: Any) -> Any:
        run = await claim_run(self, *args, **options)
        if run is not None and options["worker"] == "w1":
            assert await self.revoke_tokens(token_id=world.ids["bot"]) == 1
            data = {"principal": "bot", "tokens": [world.ids["bot"]]}
            apps[-1].hub.end_streams("token_revoked", data)  # as the hub does when the event reaches it
        return run

    monkeypatch.setattr(AppState, "held", holding)
    monkeypatch.setattr(LocalBroker, "claim_run", claimed_as_revoked)
    with anyio.fail_after(BOUND):
        refused = await bot.post("/runs/claim", json={"worker": "w1", "lease": 3600})
    assert refused.status_code == 401, refused.text
    assert refused.json()["detail"] == "the token was revoked"

    # The run went to nobody and is not held for the hour of that claim's lease: the
    # agent's live token claims it at once.
    claimed = await clients["bot-2"].post("/runs/claim", json={"worker": "w2"})
    assert claimed.status_code == 200, claimed.text
    run = claimed.json()
    assert (run["id"], run["worker"], run["state"]) == ("bot:launch", "w2", {"step": "secret"})
