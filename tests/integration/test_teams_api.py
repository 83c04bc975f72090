"""Teams over HTTP, with auth on (in-process server on a SQLite file): who sees a request
to a team, who may claim and answer it, the first answer winning, the claim and the first
view on its timeline, and who manages teams."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import aconnect_sse

import interlock
from asgi_support import InProcessServer, serve_in_process
from interlock.principals import Principal, issue_token

pytestmark = pytest.mark.anyio
BOUND = 10
PEOPLE = ("alice", "bob", "carol", "alice-bot", "carol-bot")
QUESTION = {"to": "ops", "asks": [{"type": "confirm", "id": "ok", "prompt": "Restart the database?"}]}


@dataclass
class World:
    server: InProcessServer
    clients: dict[str, httpx.AsyncClient]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    db = f"sqlite:///{tmp_path / 'teams.db'}"
    tokens: dict[str, str] = {}
    async with interlock.connect(db) as broker:
        for principal in (
            Principal("alice", "human"),
            Principal("bob", "human"),
            Principal("carol", "human"),
            Principal("alice-bot", "agent", owner="alice"),
            Principal("carol-bot", "agent", owner="carol"),
        ):
            await broker.store.save_principal(principal)
            token = issue_token(principal.name, datetime.now(UTC))
            await broker.store.save_token(token)
            tokens[principal.name] = token.secret
        await broker.store.save_team("ops", ["alice", "bob"])
    async with serve_in_process(db, auth=True) as server:
        clients = {
            who: server.client("/api/v1", headers={"Authorization": f"Bearer {tokens[who]}"}, timeout=BOUND)
            for who in PEOPLE
        }
        try:
            yield World(server, clients)
        finally:
            for client in clients.values():
                await client.aclose()


async def ask_ops(world: World) -> dict[str, Any]:
    response = await world.clients["alice-bot"].post("/requests", json=QUESTION)
    assert response.status_code == 201, response.text
    return dict(response.json())


async def test_a_request_to_a_team_is_in_each_member_s_inbox_and_nobody_else_s(world: World) -> None:
    request = await ask_ops(world)
    c = world.clients
    for member in ("alice", "bob"):
        listed = (await c[member].get("/requests")).json()["items"]
        assert [r["id"] for r in listed] == [request["id"]]
        assert (await c[member].get(f"/requests/{request['id']}")).status_code == 200
        team_only = (await c[member].get("/requests", params={"recipient": "ops"})).json()["items"]
        assert [r["id"] for r in team_only] == [request["id"]]
    assert (await c["carol"].get("/requests")).json()["items"] == []
    assert (await c["carol"].get(f"/requests/{request['id']}")).status_code == 403
    assert (await c["carol"].get("/requests", params={"recipient": "ops"})).status_code == 403
    assert (await c["alice-bot"].get(f"/requests/{request['id']}")).status_code == 200  # whoever asked


async def test_only_members_and_their_agents_may_ask_a_team(world: World) -> None:
    refused = await world.clients["carol-bot"].post("/requests", json=QUESTION)
    assert refused.status_code == 403
    assert "only its members and their agents ask it: it is not one of your owner's teams" in refused.json()["detail"]
    refused = await world.clients["carol"].post("/requests", json=QUESTION)
    assert refused.status_code == 403 and "it is not one of your teams" in refused.json()["detail"]
    assert (await world.clients["bob"].post("/requests", json=QUESTION)).status_code == 201


async def test_one_member_claims_the_others_see_who_and_the_first_answer_wins(world: World) -> None:
    request = await ask_ops(world)
    c, rid = world.clients, request["id"]
    claimed = await c["bob"].post(f"/requests/{rid}/claim")
    assert claimed.status_code == 200 and claimed.json()["by"] == "bob"
    assert (await c["bob"].post(f"/requests/{rid}/claim")).json()["by"] == "bob"  # again: unchanged
    taken = await c["alice"].post(f"/requests/{rid}/claim")
    assert (taken.status_code, taken.json()["code"]) == (409, "already_claimed")
    assert taken.json()["detail"].startswith("already claimed by bob at ")
    assert taken.json()["claim"]["by"] == "bob"
    for outsider in ("carol", "alice-bot"):
        assert (await c[outsider].post(f"/requests/{rid}/claim")).status_code == 403
    seen = (await c["alice"].get("/claims", params={"request": rid})).json()["items"]
    assert [(x["request_id"], x["by"]) for x in seen] == [(rid, "bob")]
    assert (await c["carol"].get("/claims", params={"request": rid})).json()["items"] == []
    # a claim does not stop another member: alice answers first, and wins
    answered = await c["alice"].post(f"/requests/{rid}/answer", json={"answer": True})
    assert answered.status_code == 200 and answered.json()["response"]["by"] == "alice"
    late = await c["bob"].post(f"/requests/{rid}/answer", json={"answer": False})
    assert late.status_code == 409
    assert (await c["carol"].post(f"/requests/{rid}/answer", json={"answer": False})).status_code == 403


async def test_a_claim_is_given_up_by_its_holder_only(world: World) -> None:
    request = await ask_ops(world)
    c, rid = world.clients, request["id"]
    await c["bob"].post(f"/requests/{rid}/claim")
    kept = await c["alice"].delete(f"/requests/{rid}/claim")
    assert kept.status_code == 200 and kept.json() == {"removed": None}
    given = await c["bob"].delete(f"/requests/{rid}/claim")
    assert given.json()["removed"]["by"] == "bob"
    assert (await c["alice"].post(f"/requests/{rid}/claim")).json()["by"] == "alice"


async def test_a_settled_request_is_claimed_or_given_up_by_nobody_and_keeps_its_claim(world: World) -> None:
    request = await ask_ops(world)
    c, rid = world.clients, request["id"]
    held = (await c["bob"].post(f"/requests/{rid}/claim")).json()
    assert (await c["alice"].post(f"/requests/{rid}/answer", json={"answer": True})).status_code == 200
    for member in ("bob", "alice"):  # its holder, and the member who answered
        for claiming in (c[member].post, c[member].delete):
            refused = await claiming(f"/requests/{rid}/claim")
            assert (refused.status_code, refused.json()["code"]) == (409, "already_settled"), refused.text
            assert refused.json()["current_status"] == "answered"
    assert (await c["alice"].get("/claims", params={"request": rid})).json()["items"] == [held]


async def test_a_claim_is_given_up_when_its_holder_leaves_the_team(world: World, tmp_path: Path) -> None:
    request = await ask_ops(world)
    c, rid = world.clients, request["id"]
    assert (await c["bob"].post(f"/requests/{rid}/claim")).json()["by"] == "bob"
    async with interlock.connect(f"sqlite:///{tmp_path / 'teams.db'}") as admin:  # `interlock team rm ops bob`
        assert await admin.remove_team_member("ops", "bob")
        assert await admin.claims([rid]) == {}
        timeline = [e.type for e in await admin.find_events(request=rid)]
    assert timeline[-2:] == ["claimed", "unclaimed"]  # the other members see he is no longer on it
    assert (await c["alice"].post(f"/requests/{rid}/claim")).json()["by"] == "alice"


async def test_claims_and_first_views_by_people_are_on_the_timeline(world: World) -> None:
    request = await ask_ops(world)
    c, rid = world.clients, request["id"]
    await c["alice-bot"].get(f"/requests/{rid}")  # the asking agent: not a view
    for _ in range(2):
        await c["bob"].get(f"/requests/{rid}")  # recorded once
    await c["bob"].post(f"/requests/{rid}/claim")
    events = (await c["bob"].get("/events", params={"request": rid})).json()["events"]
    assert [(e["type"], e["data"].get("by")) for e in events] == [
        ("created", None),
        ("viewed", "bob"),
        ("claimed", "bob"),
    ]


async def test_a_person_reading_back_what_she_asked_is_not_a_view(world: World) -> None:
    c = world.clients
    asked = await c["alice"].post("/requests", json=QUESTION)  # a member asks her team herself
    assert asked.status_code == 201, asked.text
    rid = asked.json()["id"]
    await c["alice"].get(f"/requests/{rid}")  # she checks on it: who has seen it yet?
    await c["bob"].get(f"/requests/{rid}")
    events = (await c["alice"].get("/events", params={"request": rid})).json()["events"]
    assert [(e["type"], e["data"].get("by")) for e in events] == [("created", None), ("viewed", "bob")]


async def test_a_member_s_event_stream_carries_the_team_s_requests_and_claims(world: World) -> None:
    c = world.clients
    with anyio.fail_after(BOUND):
        async with aconnect_sse(c["bob"], "GET", "/events/stream") as stream:
            events = stream.aiter_sse()
            await anext(events)  # connected
            request = await ask_ops(world)
            await c["alice"].post(f"/requests/{request['id']}/claim")
            informed = await c["alice-bot"].post("/inform", json={"message": "rollout at 50%", "to": "ops"})
            assert informed.status_code == 201, informed.text
            seen = [await anext(events), await anext(events), await anext(events)]
    assert [(s.event, json.loads(s.data)["request_id"]) for s in seen] == [
        ("created", request["id"]),
        ("claimed", request["id"]),
        ("informed", None),  # an update to the team, as the member's page of events shows it
    ]
    page = (await c["bob"].get("/events", params={"after": json.loads(seen[0].data)["id"] - 1})).json()["events"]
    assert [e["type"] for e in page][-1] == "informed"


async def test_the_python_client_claims_and_sees_claims(world: World) -> None:
    request = await ask_ops(world)
    async with (
        world.server.connect(token=_token(world, "bob")) as bob,
        world.server.connect(token=_token(world, "alice")) as alice,
    ):
        mine = await bob.claim(request["id"], by="bob")
        assert mine.by == "bob"
        theirs = await alice.claim(request["id"], by="alice")
        assert theirs == mine  # the standing claim is bob's
        assert (await alice.claims([request["id"]]))[request["id"]].by == "bob"
        assert await alice.unclaim(request["id"], by="alice") is None
        assert (await bob.unclaim(request["id"], by="bob")) == mine


async def test_only_an_admin_manages_teams(world: World, tmp_path: Path) -> None:
    c = world.clients
    assert (await c["alice"].post("/teams/sre/members", json={"members": ["alice"]})).status_code == 403
    assert (await c["alice"].delete("/teams/ops")).status_code == 403
    mine = (await c["alice"].get("/teams")).json()["items"]
    assert mine == [{"name": "ops", "members": ["alice", "bob"]}]
    assert (await c["carol"].get("/teams")).json()["items"] == []
    assert (await c["alice"].get("/teams/ops")).json() == {"name": "ops", "members": ["alice", "bob"]}

    async with serve_in_process(f"sqlite:///{tmp_path / 'open.db'}", auth=False) as server:
        async with interlock.connect(f"sqlite:///{tmp_path / 'open.db'}") as broker:
            for name in ("dan", "erin"):
                await broker.store.save_principal(Principal(name, "human"))
        async with server.client("/api/v1", timeout=BOUND) as admin:
            made = await admin.post("/teams/sre/members", json={"members": ["dan", "erin"]})
            assert made.json() == {"name": "sre", "members": ["dan", "erin"]}
            bad = await admin.post("/teams/sre/members", json={"members": ["nobody"]})
            assert bad.status_code == 422
            assert bad.json()["detail"] == "'nobody' is no person here: a team's members are people"
            clash = await admin.post("/teams/dan/members", json={"members": []})
            assert clash.status_code == 422
            assert (await admin.delete("/teams/sre/members/dan")).json()["members"] == ["erin"]
            assert (await admin.delete("/teams/sre/members/dan")).status_code == 404
            assert (await admin.delete("/teams/sre")).status_code == 204
            assert (await admin.get("/teams/sre")).status_code == 404


async def test_a_team_deleted_on_one_node_is_asked_on_no_other(tmp_path: Path) -> None:
    # Two servers on one store: node b had taken a request to ops, so it knew the name, and
    # went on taking requests to it after node a deleted the team (nobody but their
    # requesters could read them).
    db = f"sqlite:///{tmp_path / 'nodes.db'}"
    async with interlock.connect(db) as broker:
        for principal in (Principal("alice", "human"), Principal("alice-bot", "agent", owner="alice")):
            await broker.store.save_principal(principal)
        token = issue_token("alice-bot", datetime.now(UTC))
        await broker.store.save_token(token)
        await broker.store.save_team("ops", ["alice"])
    # node a: the admin's (a server without auth, on loopback, takes its caller as one)
    async with serve_in_process(db, auth=False) as a, serve_in_process(db, auth=True) as b:
        bot = b.client("/api/v1", headers={"Authorization": f"Bearer {token.secret}"}, timeout=BOUND)
        admin = a.client("/api/v1", timeout=BOUND)
        async with bot, admin:
            assert (await bot.post("/requests", json=QUESTION)).status_code == 201
            assert (await admin.delete("/teams/ops")).status_code == 204
            refused = await bot.post("/requests", json=QUESTION)
            assert refused.status_code == 422, refused.text
            assert refused.json()["detail"] == "to: there is no human or agent named 'ops' here"
            assert (await admin.post("/teams/ops/members", json={"members": ["alice"]})).status_code == 200
            assert (await bot.post("/requests", json=QUESTION)).status_code == 201  # made again: asked again


def _token(world: World, who: str) -> str:
    return world.clients[who].headers["Authorization"].removeprefix("Bearer ")


async def test_a_run_asking_a_team_is_in_each_member_s_list_of_runs_and_nobody_else_s(world: World) -> None:
    c = world.clients
    started = await c["alice-bot"].post("/runs", json={"agent": "deployer", "run_id": "restart-db"})
    assert started.status_code == 201, started.text
    run_id = started.json()["id"]
    asked = await c["alice-bot"].post("/requests", json={**QUESTION, "origin": {"run": "restart-db"}})
    assert asked.status_code == 201, asked.text
    for member in ("alice", "bob"):
        listed = (await c[member].get("/runs")).json()["items"]
        assert [r["id"] for r in listed] == [run_id]  # as the run's page, which they may open
        assert (await c[member].get(f"/runs/{run_id}")).status_code == 200
    assert (await c["carol"].get("/runs")).json()["items"] == []
    assert (await c["carol"].get(f"/runs/{run_id}")).status_code == 404


async def test_a_member_s_message_to_a_thread_reaches_the_run_asking_their_team(world: World) -> None:
    c = world.clients
    started = await c["alice-bot"].post("/runs", json={"agent": "deployer", "run_id": "db-1", "session": "ops-thread"})
    assert started.status_code == 201, started.text
    asked = await c["alice-bot"].post("/requests", json={**QUESTION, "origin": {"run": "db-1"}})
    assert asked.status_code == 201, asked.text
    held = await c["bob"].post("/threads/ops-thread/messages", json={"text": "wait for the backup first"})
    assert held.status_code == 409 and held.json()["code"] == "thread_busy", held.text
    assert held.json()["details"]["queued"] is True  # held for the run that asks bob's team
    outside = await c["carol"].post("/threads/ops-thread/messages", json={"text": "hello"})
    assert outside.status_code == 404, outside.text


@pytest.mark.parametrize("path", ["/events/stream", "/runs/carol-bot:r1/events/stream"])
async def test_a_stream_opened_after_joining_a_team_carries_its_requests_beside_one_opened_before(
    world: World, tmp_path: Path, path: str
) -> None:
    # Streams alike share one decision per event: a stream carol opened before she joined
    # ops and one she opened after are not alike, whichever of them is offered an event first.
    c = world.clients
    started = await c["carol-bot"].post("/runs", json={"agent": "deployer", "run_id": "r1"})
    assert started.status_code == 201, started.text

    async def ask(to: str | None) -> str:
        asked = await c["carol-bot"].post("/requests", json={**QUESTION, "to": to, "origin": {"run": "r1"}})
        assert asked.status_code == 201, asked.text
        return str(asked.json()["id"])

    with anyio.fail_after(BOUND):
        async with aconnect_sse(c["carol"], "GET", path) as before:
            old = before.aiter_sse()
            await anext(old)  # connected
            async with interlock.connect(f"sqlite:///{tmp_path / 'teams.db'}") as broker:
                await broker.add_team_members("ops", ["carol"])
            async with aconnect_sse(c["carol"], "GET", path) as after:
                new = after.aiter_sse()
                await anext(new)  # connected
                to_ops, to_carol = await ask("ops"), await ask(None)
                assert [json.loads((await anext(new)).data)["request_id"] for _ in range(2)] == [to_ops, to_carol]
                assert json.loads((await anext(old)).data)["request_id"] == to_carol
