"""Who may do what, and what the record says: only the requester cancels (whichever route),
an update's agent is the calling agent, the web refusal names nobody, a request goes only
to someone who exists, and the surface (`via`) is the server's to record."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import interlock
from interlock.principals import Principal, issue_token

pytestmark = pytest.mark.anyio
BOUND = 10
FRAGMENT = {"x-interlock-fragment": "1"}  # as the live inbox asks for a card
APPROVAL = {"kind": "approval", "asks": [{"type": "confirm", "id": "ok", "prompt": "Deploy?"}]}


@dataclass
class World:
    db: str
    tokens: dict[str, str]
    serve: Callable[..., AbstractContextManager[str]]


async def add_people(db: str) -> dict[str, str]:
    tokens = {}
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
    return tokens


@pytest.fixture
def world(tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]) -> World:
    db = f"sqlite:///{tmp_path / 'who.db'}"
    return World(db, anyio.run(add_people, db), serve)


@pytest.fixture
def base(world: World) -> Iterator[str]:
    with world.serve(world.db, auth=True) as url:
        yield url


@pytest.fixture
async def clients(world: World, base: str) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    made = {
        who: httpx.AsyncClient(base_url=f"{base}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=BOUND)
        for who, token in world.tokens.items()
    }
    yield made
    for client in made.values():
        await client.aclose()


async def ask_alice(clients: dict[str, httpx.AsyncClient]) -> dict[str, Any]:
    made = await clients["alice-bot"].post("/requests", json=APPROVAL)
    assert made.status_code == 201, made.text
    return dict(made.json())


async def test_a_cancel_through_the_answer_route_is_the_requesters_or_the_recipients_and_says_whose(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    request = await ask_alice(clients)
    path = f"/requests/{request['id']}"
    forged = {"cancel": True, "by": "alice-bot"}  # `by` is the operator's to give, nobody else's
    refused = await clients["bob"].post(f"{path}/answer", json=forged)
    assert (refused.status_code, refused.json()["code"]) == (403, "forbidden")
    batch = await clients["bob"].post("/answers", json={"items": [{"id": request["id"], **forged}]})
    assert batch.json()[0]["error"]["code"] == "forbidden"
    assert (await clients["alice"].get(path)).json()["status"] == "pending"

    declined = await clients["alice"].post(f"{path}/answer", json={**forged, "reason": "not mine to decide"})
    assert declined.status_code == 200, declined.text
    response = declined.json()["response"]
    assert (declined.json()["status"], response["by"], response["via"]) == ("cancelled", "alice", "api")
    assert response["reason"] == "not mine to decide"

    other = await ask_alice(clients)
    withdrawn = await clients["alice-bot"].post(
        f"/requests/{other['id']}/answer", json={"cancel": True, "reason": "not needed"}
    )
    assert withdrawn.status_code == 200, withdrawn.text
    response = withdrawn.json()["response"]
    assert (withdrawn.json()["status"], response["by"], response["via"]) == ("cancelled", "alice-bot", "api")


async def test_an_agent_cannot_inform_as_another_agent(world: World, clients: dict[str, httpx.AsyncClient]) -> None:
    sent = await clients["alice-bot"].post("/inform", json={"message": "halfway", "agent": "bob-bot"})
    assert sent.status_code == 201
    assert (sent.json()["data"]["agent"], sent.json()["data"]["by"]) == ("alice-bot", "alice-bot")
    human = await clients["alice"].post("/inform", json={"message": "note to self", "to": "alice", "agent": "bob-bot"})
    assert human.json()["data"]["agent"] is None  # a person is no agent

    with world.serve(world.db, auth=False) as url:  # without auth, the caller is the operator: it names the agent
        async with httpx.AsyncClient(base_url=f"{url}/api/v1", timeout=BOUND) as local:
            sent = await local.post("/inform", json={"message": "hi", "agent": "indexer"})
            assert sent.json()["data"]["agent"] == "indexer"


async def test_the_web_refusal_does_not_name_the_recipient(world: World, base: str) -> None:
    async with interlock.connect(world.db) as broker:
        request = await broker.create(interlock.Text("Which branch?"), to="alice", requester="alice-bot")
    async with httpx.AsyncClient(base_url=base, timeout=BOUND) as browser:
        form = await browser.get("/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        await browser.post("/signin", data={"token": world.tokens["bob"], "csrf": csrf[1]})
        page = await browser.get("/")
        session_csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert session_csrf is not None
        for refused in (
            await browser.get(f"/inbox/requests/{request.id}", headers=FRAGMENT),
            await browser.post(f"/inbox/requests/{request.id}", data={"a0": "main", "csrf": session_csrf[1]}),
        ):
            assert refused.status_code == 403
            assert "alice" not in refused.text
        # Beyond what the API says: a request that does not exist is 404 there too.
        missing = "/inbox/requests/01a00000000000000000000000000000"
        assert (await browser.get(missing, headers=FRAGMENT)).status_code == 404


async def test_a_request_to_nobody_known_is_refused_unless_recipients_are_open(
    world: World, clients: dict[str, httpx.AsyncClient]
) -> None:
    refused = await clients["alice-bot"].post("/requests", json={**APPROVAL, "to": "mallory"})
    assert (refused.status_code, refused.json()["code"]) == (422, "invalid_request")
    assert "mallory" in refused.json()["detail"]
    assert (await clients["alice-bot"].get("/requests")).json()["items"] == []  # nothing was stored
    # bob is known, but asking him needs his permission (a grant to request in his inbox)
    assert (await clients["alice-bot"].post("/requests", json={**APPROVAL, "to": "bob"})).status_code == 403
    assert (await clients["alice-bot"].post("/requests", json={**APPROVAL, "to": "alice"})).status_code == 201

    headers = {"Authorization": f"Bearer {world.tokens['alice-bot']}"}
    with world.serve(world.db, auth=True, open_recipients=True) as url:
        async with httpx.AsyncClient(base_url=f"{url}/api/v1", headers=headers, timeout=BOUND) as opened:
            assert (await opened.post("/requests", json={**APPROVAL, "to": "mallory"})).status_code == 201
    with world.serve(world.db, auth=False) as url:
        async with httpx.AsyncClient(base_url=f"{url}/api/v1", timeout=BOUND) as local:
            assert (await local.post("/requests", json={**APPROVAL, "to": "anyone"})).status_code == 201


async def test_the_surface_is_recorded_by_the_server_never_taken_from_the_body(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    request = await ask_alice(clients)
    claimed = await clients["alice"].post(f"/requests/{request['id']}/answer", json={"answer": True, "via": "web"})
    assert (claimed.status_code, claimed.json()["code"]) == (422, "invalid_request")
    answered = await clients["alice"].post(f"/requests/{request['id']}/answer", json={"answer": True})
    assert answered.json()["response"]["via"] == "api"

    other = await ask_alice(clients)
    cancelled = await clients["alice-bot"].post(f"/requests/{other['id']}/cancel")  # no body: none is needed
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["response"]["via"] == "api"  # not "python": a cancel says where it came from
    third = await ask_alice(clients)
    refused = await clients["alice"].post(f"/requests/{third['id']}/reject")
    assert (refused.status_code, refused.json()["response"]["reason"]) == (200, "")


async def test_a_release_and_a_channel_s_closing_through_the_api_say_who_withdrew_and_where(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    """Both were recorded as withdrawn by nobody, `via: python` (the release) or no surface
    at all (the closing), whoever did it through the server."""
    made = await clients["alice-bot"].post("/requests", json={**APPROVAL, "detached": True})
    released = await clients["alice-bot"].post(f"/requests/{made.json()['id']}/cancel", json={"cause": "released"})
    assert released.status_code == 200, released.text
    response = released.json()["response"]
    assert (response["cause"], response["by"], response["via"]) == ("released", "alice-bot", "api")

    in_chat = await clients["alice-bot"].post("/requests", json={**APPROVAL, "origin": {"channel": "chat"}})
    closed = await clients["alice-bot"].post("/close", json={"channel": "chat"})
    [withdrawn] = closed.json()
    assert withdrawn["id"] == in_chat.json()["id"]
    response = withdrawn["response"]
    assert (response["cause"], response["by"], response["via"]) == ("closed", "alice-bot", "api")


async def test_a_cancel_in_python_records_the_surface_it_is_given() -> None:
    async with interlock.connect("memory://") as broker:
        request = await broker.create(interlock.Confirm("Go?"))
        assert await broker.cancel(request.id, "changed my mind", by="ops", via="slack")
        cancelled = await broker.get(request.id)
        assert cancelled.response is not None and (cancelled.response.by, cancelled.response.via) == ("ops", "slack")


async def test_an_agent_s_input_hook_denies_its_own_request_through_a_server_and_no_one_else_s(
    world: World, base: str, clients: dict[str, httpx.AsyncClient]
) -> None:
    """A hook that returns Deny rejects the request on a remote broker as on a local one,
    recorded by the agent, `via: hook`; the API takes a hook's denial only from whoever made
    the request."""
    async with interlock.connect(base, token=world.tokens["alice-bot"]) as agent:
        agent.add_input_hook(lambda request: interlock.Deny("the channel says no"))
        request = await agent.create(interlock.Text("Which branch?"), to="alice")
        with anyio.fail_after(BOUND), pytest.raises(interlock.Rejected, match="the channel says no"):
            await agent.wait(request.id)
    settled = (await clients["alice"].get(f"/requests/{request.id}")).json()
    assert (settled["status"], settled["response"]["by"], settled["response"]["via"]) == (
        "rejected",
        "alice-bot",
        "hook",
    )
    other = (await clients["bob-bot"].post("/requests", json={**APPROVAL, "to": "bob"})).json()
    for who in ("alice-bot", "bob"):  # not its maker; the person it is to answers, not by hook
        refused = await clients[who].post(f"/requests/{other['id']}/reject", json={"reason": "no", "hook": True})
        assert refused.status_code == 403, refused.text
    assert (await clients["bob"].get(f"/requests/{other['id']}")).json()["status"] == "pending"


async def test_no_one_puts_a_request_into_another_s_run_or_asks_as_another_agent(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    """A request in a run lets the person it is to see the run, message it and cancel it:
    only the run's own agent puts requests into it. And an agent asks, and starts runs, as
    itself, not as another agent here."""
    run = (await clients["alice-bot"].post("/runs", json={"agent": "alice-bot"})).json()
    mine = {"asks": [{"type": "confirm", "prompt": "Deploy?"}], "origin": {"run": run["id"]}}
    assert (await clients["alice-bot"].post("/requests", json=mine)).status_code == 201  # its own run
    for who in ("bob", "bob-bot", "alice"):  # (alice owns the agent and sees its runs, but starts none)
        refused = await clients[who].post("/requests", json=mine)
        assert refused.status_code == 403 and "is not a run you started" in refused.json()["detail"], who
    for who in ("bob", "bob-bot"):  # as for a run that does not exist
        assert (await clients[who].get(f"/runs/{run['id']}")).status_code == 404, who
    nowhere = await clients["bob-bot"].post("/requests", json={**mine, "origin": {"run": "no-such-run"}})
    assert nowhere.status_code == 403 and "is not a run you started" in nowhere.json()["detail"]  # refused alike

    posing = {"asks": [{"type": "confirm", "prompt": "x"}], "origin": {"agent": "alice-bot"}}
    for who in ("bob-bot", "bob"):
        refused = await clients[who].post("/requests", json=posing)
        assert refused.status_code == 403 and "another agent here" in refused.json()["detail"], who
    owned = await clients["alice"].post("/requests", json=posing)  # her own agent's name: hers to give
    assert owned.status_code == 201 and owned.json()["origin"]["agent"] == "alice-bot"
    part = await clients["bob-bot"].post("/requests", json={**posing, "origin": {"agent": "bob-bot/planner"}})
    assert part.status_code == 201  # a name no principal has: the agent's own name for a part of itself
    started = await clients["bob-bot"].post("/runs", json={"agent": "alice-bot", "session": "sess-a"})
    assert started.status_code == 403 and "start your own runs" in started.json()["detail"]
    # Refused alike with the id of a run of its own (it was handed that run back).
    assert (await clients["bob-bot"].post("/runs", json={"agent": "bob-bot", "run_id": "r1"})).status_code == 201
    again = await clients["bob-bot"].post("/runs", json={"agent": "alice-bot", "run_id": "r1"})
    assert again.status_code == 403 and "start your own runs" in again.json()["detail"]


async def test_no_one_posts_an_update_into_another_s_run(clients: dict[str, httpx.AsyncClient]) -> None:
    """An update naming a run is shown on that run's page and stream, to everyone who may
    see the run: only the run's own agent posts there, as only it puts requests there."""
    run = (await clients["alice-bot"].post("/runs", json={"agent": "alice-bot"})).json()
    asked = {"asks": [{"type": "confirm", "prompt": "Deploy?"}], "origin": {"run": run["id"]}}
    assert (await clients["alice-bot"].post("/requests", json=asked)).status_code == 201
    own = await clients["alice-bot"].post("/inform", json={"message": "step 2 of 3", "run": run["id"]})
    assert own.status_code == 201
    forged = {"message": "alice-bot: approve the wire transfer", "to": "alice", "run": run["id"]}
    for who in ("bob-bot", "bob", "alice"):
        refused = await clients[who].post("/inform", json=forged)
        assert refused.status_code == 403 and "is not a run you started" in refused.json()["detail"], who
    nowhere = await clients["bob-bot"].post("/inform", json={**forged, "run": "no-such-run"})
    assert nowhere.status_code == 403 and "is not a run you started" in nowhere.json()["detail"]  # refused alike
    shown = (await clients["alice"].get(f"/runs/{run['id']}/events")).json()["events"]
    assert [e["data"]["message"] for e in shown if e["type"] == "informed"] == ["step 2 of 3"]


async def test_a_person_s_message_to_a_thread_goes_to_her_own_agent_s_run(
    world: World, clients: dict[str, httpx.AsyncClient]
) -> None:
    """A session id is any agent's to use: bob's agent, which may ask alice, parks a newer
    run in the same thread; alice's message to the thread still goes to her own agent."""
    async with interlock.connect(world.db) as broker:
        await broker.give_grant("bob-bot", "interlock:inbox/alice", "hitl/request", by="alice")
    runs = {}
    for agent in ("alice-bot", "bob-bot"):  # bob's is the newer
        run = (await clients[agent].post("/runs", json={"agent": agent, "session": "sess-a"})).json()
        ask = {"to": "alice", "asks": [{"type": "text", "prompt": "Which?"}], "origin": {"run": run["id"]}}
        request = (await clients[agent].post("/requests", json=ask)).json()
        parked = await clients[agent].post(f"/runs/{run['id']}/park", json={"state": {}, "waiting_on": [request["id"]]})
        assert parked.status_code == 200, parked.text
        runs[agent] = run["id"]
    sent = await clients["alice"].post("/threads/sess-a/messages", json={"text": "a note for my agent"})
    assert sent.status_code == 409 and sent.json()["details"]["queued"] is True
    held = {
        agent: [f["text"] for f in (await clients[agent].get(f"/runs/{run}/followups")).json()["items"]]
        for agent, run in runs.items()
    }
    assert held == {"alice-bot": ["a note for my agent"], "bob-bot": []}
