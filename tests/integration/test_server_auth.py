"""Who may read and answer what: every denial, against the server with auth on (in-process)."""

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
from interlock import Confirm, Forbidden
from interlock.principals import Principal, issue_token

pytestmark = pytest.mark.anyio
BOUND = 10


@dataclass
class World:
    server: InProcessServer
    db: str
    tokens: dict[str, str]

    def client(self, who: str | None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}
        return self.server.client("/api/v1", headers=headers, timeout=BOUND)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    db = f"sqlite:///{tmp_path / 'auth.db'}"
    tokens: dict[str, str] = {}

    async with interlock.connect(db) as broker:
        for principal in (
            Principal("alice", "human"),
            Principal("bob", "human"),
            Principal("alice-bot", "agent", owner="alice"),
            Principal("bob-bot", "agent", owner="bob"),
        ):
            await broker.store.save_principal(principal)
            token = issue_token(principal.name, datetime.now(UTC))
            await broker.store.save_token(token)
            tokens[principal.name] = token.secret
        await broker.add_team_members("ops", ["bob"])
    async with serve_in_process(db, auth=True) as server:
        yield World(server, db, tokens)


@pytest.fixture
async def clients(world: World) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    made = {who: world.client(who) for who in ("alice", "bob", "alice-bot", "bob-bot")}
    made["nobody"] = world.client(None)
    yield made
    for client in made.values():
        await client.aclose()


APPROVAL = {"kind": "approval", "asks": [{"type": "confirm", "id": "ok", "prompt": "Deploy?"}]}


async def ask_alice(clients: dict[str, httpx.AsyncClient]) -> dict[str, Any]:
    response = await clients["alice-bot"].post("/requests", json=APPROVAL)
    assert response.status_code == 201, response.text
    return dict(response.json())


async def test_no_token_a_wrong_token_and_a_revoked_token_are_401(world: World) -> None:
    async with world.client(None) as anonymous:
        response = await anonymous.get("/requests")
        assert (response.status_code, response.json()["code"]) == (401, "unauthorized")
        assert response.headers["www-authenticate"] == "Bearer"
        wrong = await anonymous.get("/requests", headers={"Authorization": "Bearer il_00000000_guess"})
        assert wrong.status_code == 401

    async with interlock.connect(world.db) as broker:
        assert await broker.store.revoke_tokens(principal="bob") == 1
    async with world.client("bob") as bob:
        assert (await bob.get("/requests")).status_code == 401


async def test_an_agents_request_goes_to_its_owner_and_records_who_asked(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    request = await ask_alice(clients)
    assert (request["to"], request["requester"], request["origin"]["agent"]) == ("alice", "alice-bot", "alice-bot")
    spoofed = await clients["alice-bot"].post("/requests", json={**APPROVAL, "requester": "bob-bot"})
    assert spoofed.json()["requester"] == "alice-bot"  # the server says who asked, not the body


async def test_only_the_recipient_and_the_requester_may_read_a_request(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    request = await ask_alice(clients)
    path = f"/requests/{request['id']}"
    assert (await clients["alice"].get(path)).status_code == 200
    assert (await clients["alice-bot"].get(path)).status_code == 200
    for outsider in ("bob", "bob-bot"):
        response = await clients[outsider].get(path)
        assert (response.status_code, response.json()["code"]) == (403, "forbidden")
        assert (await clients[outsider].get(f"{path}/wait", params={"timeout": 0})).status_code == 403


async def test_only_the_human_recipient_may_answer_or_reject_never_an_agent(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    request = await ask_alice(clients)
    path = f"/requests/{request['id']}"
    for who in ("bob", "alice-bot", "bob-bot"):  # the agent may not answer even its owner's inbox
        assert (await clients[who].post(f"{path}/answer", json={"answer": True})).status_code == 403
        assert (await clients[who].post(f"{path}/reject", json={"reason": "x"})).status_code == 403
        batch = await clients[who].post("/answers", json={"items": [{"id": request["id"], "answer": True}]})
        assert batch.json()[0]["error"]["code"] == "forbidden"
    assert (await clients["alice"].get(path)).json()["status"] == "pending"

    answered = await clients["alice"].post(f"{path}/answer", json={"answer": True, "by": "mallory"})
    assert answered.status_code == 200
    assert answered.json()["response"]["by"] == "alice"  # the server says who answered, not the body


async def test_only_the_requester_may_cancel(clients: dict[str, httpx.AsyncClient]) -> None:
    request = await ask_alice(clients)
    path = f"/requests/{request['id']}"
    for who in ("alice", "bob", "bob-bot"):
        assert (await clients[who].post(f"{path}/cancel", json={})).status_code == 403
        assert (await clients[who].post(f"{path}/expire")).status_code == 403
    assert (await clients["alice-bot"].post(f"{path}/cancel", json={})).json()["status"] == "cancelled"


async def test_nobody_lists_another_persons_inbox(clients: dict[str, httpx.AsyncClient]) -> None:
    request = await ask_alice(clients)
    mine = (await clients["alice"].get("/requests")).json()["items"]
    assert [r["id"] for r in mine] == [request["id"]]
    assert (await clients["bob"].get("/requests")).json()["items"] == []
    assert (await clients["bob"].get("/requests", params={"recipient": "alice"})).status_code == 403
    assert (await clients["bob-bot"].get("/requests", params={"requester": "alice-bot"})).status_code == 403
    asked = (await clients["alice-bot"].get("/requests")).json()["items"]
    assert [r["id"] for r in asked] == [request["id"]]
    assert (await clients["bob-bot"].get("/requests")).json()["items"] == []


async def test_the_dashboard_counts_only_the_caller_s_inbox_and_teams(clients: dict[str, httpx.AsyncClient]) -> None:
    await ask_alice(clients)
    for to in ("bob", "ops"):
        response = await clients["bob-bot"].post("/requests", json=APPROVAL | {"to": to})
        assert response.status_code == 201, response.text

    def waiting(board: httpx.Response) -> dict[str, int]:
        assert board.status_code == 200, board.text
        return {p["name"]: p["pending"] for p in board.json()["people"] + board.json()["teams"]}

    assert waiting(await clients["alice"].get("/dashboard")) == {"alice": 1}
    assert waiting(await clients["bob"].get("/dashboard")) == {"bob": 1, "ops": 1}  # and his team's
    assert waiting(await clients["bob"].get("/dashboard", params={"recipient": "ops"})) == {"ops": 1}
    for who, params in (("bob", {"recipient": "alice"}), ("alice", {"recipient": "ops"}), ("alice-bot", {})):
        refused = await clients[who].get("/dashboard", params=params)
        assert refused.status_code == 403 and refused.json()["code"] == "forbidden", (who, refused.text)
    for params in ({"window": "0"}, {"window": "-5"}, {"window": "1e12"}, {"window": "soon"}):
        assert (await clients["bob"].get("/dashboard", params=params)).status_code == 422, params
    assert (await clients["nobody"].get("/dashboard")).status_code == 401


async def test_the_event_log_and_stream_show_only_what_the_caller_may_see(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    request = await ask_alice(clients)
    await clients["alice-bot"].post("/inform", json={"message": "halfway there"})
    for who, expected in (("alice", 2), ("alice-bot", 2), ("bob", 0), ("bob-bot", 0)):
        events = (await clients[who].get("/events")).json()["events"]
        assert len(events) == expected, who
    informed = (await clients["alice"].get("/events")).json()["events"][1]
    assert (informed["type"], informed["data"]["message"], informed["data"]["to"]) == (
        "informed",
        "halfway there",
        "alice",
    )

    with anyio.fail_after(BOUND):
        async with aconnect_sse(clients["bob"], "GET", "/events/stream") as bob_stream:
            bob_events = bob_stream.aiter_sse()
            await anext(bob_events)  # connected
            async with aconnect_sse(clients["alice"], "GET", "/events/stream") as alice_stream:
                alice_events = alice_stream.aiter_sse()
                await anext(alice_events)
                await clients["alice"].post(f"/requests/{request['id']}/answer", json={"answer": True})
                bob_request = await clients["bob-bot"].post("/requests", json=APPROVAL)
                seen = await anext(alice_events)
                assert (seen.event, json.loads(seen.data)["request_id"]) == ("answered", request["id"])
            seen = await anext(bob_events)  # bob's first event is his own request, not alice's answer
            assert (seen.event, json.loads(seen.data)["request_id"]) == ("created", bob_request.json()["id"])


async def test_the_python_client_gets_the_same_rules(world: World) -> None:
    async with (
        world.server.connect(token=world.tokens["alice-bot"]) as agent,
        world.server.connect(token=world.tokens["alice"]) as alice,
        world.server.connect(token=world.tokens["bob"]) as bob,
    ):
        request = await agent.create(Confirm("Deploy?"))
        assert request.to == "alice"
        with pytest.raises(Forbidden):
            await bob.get(request.id)
        with pytest.raises(Forbidden):
            await agent.resolve(request.id, True)
        async with anyio.create_task_group() as tg:
            tg.start_soon(alice.resolve, request.id, True)
            with anyio.fail_after(BOUND):
                response = await agent.wait(request.id)
        assert (response.answers, response.by) == ({"confirm": True}, "alice")
    with pytest.raises(Forbidden):
        async with world.server.connect(token="il_00000000_wrong"):
            pass


async def test_a_person_s_wait_that_runs_out_says_so_and_leaves_the_request_pending(
    world: World, clients: dict[str, httpx.AsyncClient]
) -> None:
    # Only its maker may make a request expire: a person's wait on one to her said "only
    # whoever made the request may expire it", an expiry she had not asked for.
    request = await ask_alice(clients)
    async with world.server.connect(token=world.tokens["alice"]) as alice:
        with pytest.raises(interlock.Forbidden, match=r"the wait on request .* ran out \(0\.05 s\)") as ran_out:
            await alice.wait(request["id"], timeout=0.05)
        assert "watch(id, timeout) waits without expiring it" in str(ran_out.value)
        assert (await alice.get(request["id"])).status is interlock.Status.PENDING


async def test_who_calls_is_checked_before_what_the_query_asks(clients: dict[str, httpx.AsyncClient]) -> None:
    # An unknown query parameter was refused (422, naming the route's parameters) before
    # the token was checked, where every other refusal comes after it.
    unknown = await clients["nobody"].get("/requests", params={"stauts": "pending"})
    assert (unknown.status_code, unknown.json()["code"]) == (401, "unauthorized"), unknown.text
    signed = await clients["alice"].get("/requests", params={"stauts": "pending"})
    assert (signed.status_code, signed.json()["code"]) == (422, "invalid_request"), signed.text


async def test_an_admin_records_no_answer_nor_decline_in_the_name_of_a_person_cut_off(tmp_path: Path) -> None:
    # An admin's `by` names who answers; a person `token revoke` cut off answers nothing,
    # whoever names them: 403, and the request stays pending.
    db = f"sqlite:///{tmp_path / 'admin.db'}"
    async with interlock.connect(db) as broker:
        await broker.store.save_principal(Principal("alice", "human"))  # type: ignore[attr-defined]
        await broker.store.save_token(issue_token("alice", datetime.now(UTC)))  # type: ignore[attr-defined]
        await broker.revoke_tokens(principal="alice")  # type: ignore[attr-defined]
        request = await broker.create(Confirm("Deploy?"), to="alice")
    async with serve_in_process(db, auth=False) as server, server.client("/api/v1", timeout=BOUND) as admin:
        for body in ({"answer": True, "by": "alice"}, {"cancel": True, "by": "alice", "reason": "not now"}):
            refused = await admin.post(f"/requests/{request.id}/answer", json=body)
            assert refused.status_code == 403, refused.text
            assert "every token of 'alice' is revoked" in refused.json()["detail"]
        assert (await admin.get(f"/requests/{request.id}")).json()["status"] == "pending"
        other = await admin.post("/requests", json={**APPROVAL, "to": "alice"})
        items = [{"id": request.id, "answer": True, "by": "alice"}, {"id": other.json()["id"], "answer": True}]
        batch = (await admin.post("/answers", json={"items": items})).json()  # each result stands on its own
        assert (batch[0]["ok"], batch[0]["error"]["status"], batch[1]["ok"]) == (False, 403, True), batch
        assert "every token of 'alice' is revoked" in batch[0]["error"]["detail"]
        assert (await admin.get(f"/requests/{request.id}")).json()["status"] == "pending"
        answered = await admin.post(f"/requests/{request.id}/answer", json={"answer": True, "by": "bob"})
        assert answered.status_code == 200, answered.text
