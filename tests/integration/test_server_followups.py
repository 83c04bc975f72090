"""Follow-up messages over HTTP against a real server with auth on: what a message sent to
a busy run becomes (decides its approval, is held, or is not held), the answers in Novo's
shape, withdrawing, delivery with its event, read-only leftovers on an ended run, and who
may send, withdraw and take."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import interlock
from api_support import World
from interlock.principals import Principal, issue_token

pytestmark = pytest.mark.anyio
RUN = "alice-bot:run-1"  # alice-bot's run "run-1", as the server keeps it (people name it so)
BOUND = 10
APPROVAL = {"kind": "approval", "to": "alice", "asks": [{"type": "confirm", "id": "ok", "prompt": "Deploy?"}]}
QUESTION = {"kind": "question", "to": "alice", "asks": [{"type": "text", "id": "region", "prompt": "Region?"}]}
PEOPLE = (
    Principal("alice", "human"),
    Principal("bob", "human"),
    Principal("alice-bot", "agent", owner="alice"),
    Principal("bob-bot", "agent", owner="bob"),
)


def _principals(db: str) -> dict[str, str]:
    tokens: dict[str, str] = {}

    async def setup() -> None:
        async with interlock.connect(db) as broker:
            for principal in PEOPLE:
                await broker.store.save_principal(principal)
                token = issue_token(principal.name, datetime.now(UTC))
                await broker.store.save_token(token)
                tokens[principal.name] = token.secret

    anyio.run(setup)
    return tokens


@pytest.fixture
def world(tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]) -> Iterator[World]:
    db = f"sqlite:///{tmp_path / 'followups.db'}"
    tokens = _principals(db)
    with serve(db, auth=True) as base:
        yield World(base, tokens)


@pytest.fixture
async def clients(world: World) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    made = {p.name: world.client(p.name) for p in PEOPLE}
    yield made
    for client in made.values():
        await client.aclose()


async def start(bot: httpx.AsyncClient, run_id: str = "run-1") -> None:
    started = await bot.post("/runs", json={"agent": "deployer", "run_id": run_id, "session": "t1"})
    assert started.status_code == 201, started.text


async def parked(bot: httpx.AsyncClient, ask: dict[str, Any] = APPROVAL, run_id: str = "run-1") -> str:
    await start(bot, run_id)
    created = await bot.post("/requests", json={**ask, "origin": {"run": run_id}})
    assert created.status_code == 201, created.text
    request_id: str = created.json()["id"]
    park = await bot.post(f"/runs/{run_id}/park", json={"state": {"step": 1}, "waiting_on": [request_id]})
    assert park.status_code == 200, park.text
    return request_id


async def send(client: httpx.AsyncClient, text: str, run_id: str = RUN) -> httpx.Response:
    return await client.post(f"/runs/{run_id}/messages", json={"text": text})


def busy(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 409, response.text
    body = response.json()
    assert body["code"] == "thread_busy", body
    details: dict[str, Any] = body["details"]
    return details


@pytest.mark.parametrize("word", ["approve", "1", " Approve\n"])
async def test_approve_sent_to_an_approval_pause_decides_it(clients: dict[str, httpx.AsyncClient], word: str) -> None:
    request_id = await parked(clients["alice-bot"])
    details = busy(await send(clients["alice"], word))
    assert details == {"resolved_interaction_id": request_id}
    request = (await clients["alice"].get(f"/requests/{request_id}")).json()
    assert request["status"] == "answered" and request["response"]["by"] == "alice"
    run = (await clients["alice"].get(f"/runs/{RUN}")).json()
    assert run["ready"] is True and run["queuedFollowups"] == []


@pytest.mark.parametrize("word", ["deny", "2"])
async def test_deny_sent_to_an_approval_pause_records_a_denial(
    clients: dict[str, httpx.AsyncClient], word: str
) -> None:
    request_id = await parked(clients["alice-bot"])
    assert busy(await send(clients["alice"], word)) == {"resolved_interaction_id": request_id}
    request = (await clients["alice"].get(f"/requests/{request_id}")).json()
    assert request["status"] == "rejected"


async def test_other_text_at_an_approval_pause_is_held_and_listed_on_the_run(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    request_id = await parked(clients["alice-bot"])
    first = busy(await send(clients["alice"], "approve it, but deploy to eu first"))
    assert first["queued"] is True and first["followup_id"]
    forged = {"text": "and tell me when it is done", "by": "bob"}  # a person cannot send as someone else
    second = busy(await clients["alice"].post(f"/runs/{RUN}/messages", json=forged))
    run = (await clients["alice"].get(f"/runs/{RUN}")).json()
    assert [(f["id"], f["text"]) for f in run["queuedFollowups"]] == [
        (first["followup_id"], "approve it, but deploy to eu first"),
        (second["followup_id"], "and tell me when it is done"),
    ]
    assert run["queuedFollowups"][0]["queuedAt"] <= run["queuedFollowups"][1]["queuedAt"]
    listed = (await clients["alice-bot"].get(f"/runs/{RUN}/followups")).json()["items"]
    assert [(f["id"], f["by"]) for f in listed] == [(first["followup_id"], "alice"), (second["followup_id"], "alice")]
    assert (await clients["alice"].get(f"/requests/{request_id}")).json()["status"] == "pending"


async def test_a_question_pause_holds_even_approve(clients: dict[str, httpx.AsyncClient]) -> None:
    request_id = await parked(clients["alice-bot"], QUESTION)
    details = busy(await send(clients["alice"], "approve"))
    assert details["queued"] is True
    assert (await clients["alice"].get(f"/requests/{request_id}")).json()["status"] == "pending"


async def test_a_working_run_holds_messages_as_steering(clients: dict[str, httpx.AsyncClient]) -> None:
    await start(clients["alice-bot"])
    details = busy(await send(clients["alice-bot"], "actually, make it vegetarian"))
    assert details["queued"] is True
    held = (await clients["alice-bot"].get(f"/runs/{RUN}")).json()["queuedFollowups"]
    assert [f["text"] for f in held] == ["actually, make it vegetarian"]


async def test_an_agent_saying_approve_cannot_decide_the_approval_it_asked_for(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    request_id = await parked(clients["alice-bot"])
    assert busy(await send(clients["alice-bot"], "approve"))["queued"] is True
    assert (await clients["alice"].get(f"/requests/{request_id}")).json()["status"] == "pending"


async def test_a_held_message_is_withdrawn_once_then_followup_not_found(clients: dict[str, httpx.AsyncClient]) -> None:
    await parked(clients["alice-bot"])
    held = busy(await send(clients["alice"], "wait, not yet"))["followup_id"]
    withdrawn = await clients["alice"].delete(f"/runs/{RUN}/followups/{held}")
    assert withdrawn.status_code == 200 and withdrawn.json()["text"] == "wait, not yet"
    again = await clients["alice"].delete(f"/runs/{RUN}/followups/{held}")
    assert again.status_code == 404 and again.json()["code"] == "followup_not_found"
    assert (await clients["alice"].get(f"/runs/{RUN}")).json()["queuedFollowups"] == []


async def test_taken_messages_are_delivered_once_with_a_replayed_event_each(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    bot = clients["alice-bot"]
    await start(bot)
    ids = [busy(await send(clients["alice-bot"], text))["followup_id"] for text in ("one", "two")]
    taken = await bot.post(f"/runs/{RUN}/followups/take", json={})
    assert taken.status_code == 200 and [(f["id"], f["text"]) for f in taken.json()["items"]] == list(
        zip(ids, ["one", "two"], strict=True)
    )
    assert (await bot.post(f"/runs/{RUN}/followups/take")).json()["items"] == []
    gone = await bot.delete(f"/runs/{RUN}/followups/{ids[0]}")
    assert gone.status_code == 404 and gone.json()["code"] == "followup_not_found"
    events = (await bot.get(f"/runs/{RUN}/events")).json()["events"]
    replayed = [(e["data"]["followup_id"], e["data"]["text"]) for e in events if e["type"] == "followup_replayed"]
    assert replayed == [(ids[0], "one"), (ids[1], "two")]


async def test_everyone_who_may_see_the_run_sees_its_messages_delivered(clients: dict[str, httpx.AsyncClient]) -> None:
    bot = clients["alice-bot"]
    request_id = await parked(bot)
    held = busy(await send(bot, "status: the build is green"))["followup_id"]
    assert busy(await send(clients["alice"], "approve")) == {"resolved_interaction_id": request_id}
    claimed = await bot.post("/runs/claim", json={"agents": ["deployer"], "worker": "w1"})
    assert claimed.status_code == 200 and claimed.json()["id"] == RUN
    # Not its holder, nor its agent without a worker: 409, and the message stays w1's.
    other = await bot.post(f"/runs/{RUN}/followups/take", json={"worker": "w2"})
    assert other.status_code == 409 and other.json()["code"] == "run_conflict"
    agent = await bot.post(f"/runs/{RUN}/followups/take")
    assert agent.status_code == 409 and agent.json()["current_status"] == "running"
    assert "held by worker w1, which resumes it" in agent.json()["detail"]
    taken = await bot.post(f"/runs/{RUN}/followups/take", json={"worker": "w1"})
    assert [f["id"] for f in taken.json()["items"]] == [held]
    events = (await clients["alice"].get(f"/runs/{RUN}/events")).json()["events"]
    kinds = [(e["type"], e["data"].get("followup_id")) for e in events if e["type"].startswith("followup_")]
    assert kinds == [("followup_queued", held), ("followup_replayed", held)]
    assert [e["data"]["text"] for e in events if e["type"] == "followup_replayed"] == ["status: the build is green"]


async def test_on_an_ended_run_held_messages_stay_read_only_and_nothing_more_is_held(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    await parked(clients["alice-bot"])
    held = busy(await send(clients["alice"], "use the blue-green switch"))["followup_id"]
    assert (await clients["alice"].post(f"/runs/{RUN}/cancel", json={})).status_code == 200
    run = (await clients["alice"].get(f"/runs/{RUN}")).json()
    assert run["status"] == "cancelled" and [f["id"] for f in run["queuedFollowups"]] == [held]
    refused = await clients["alice"].delete(f"/runs/{RUN}/followups/{held}")
    assert refused.status_code == 404 and refused.json()["code"] == "followup_not_found"
    late = await send(clients["alice"], "hello?")
    assert late.status_code == 409 and late.json()["code"] == "run_conflict"
    assert late.json()["current_status"] == "cancelled"
    assert [f["id"] for f in (await clients["alice"].get(f"/runs/{RUN}/followups")).json()["items"]] == [held]


async def test_only_those_who_may_see_the_run_send_and_withdraw_and_only_its_agent_takes(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    await parked(clients["alice-bot"])
    held = busy(await send(clients["alice"], "note for later"))["followup_id"]
    for stranger in ("bob", "bob-bot"):
        # a stranger is told no more than of a run that does not exist
        assert (await send(clients[stranger], "approve")).status_code == 404
        assert (await clients[stranger].get(f"/runs/{RUN}/followups")).status_code == 404
        assert (await clients[stranger].delete(f"/runs/{RUN}/followups/{held}")).status_code == 404
    assert (await clients["alice"].post(f"/runs/{RUN}/followups/take", json={})).status_code == 403
    assert (await clients["bob-bot"].post(f"/runs/{RUN}/followups/take", json={})).status_code == 404
    run = (await clients["alice-bot"].get(f"/runs/{RUN}")).json()
    assert run["status"] == "waiting_for_approval" and [f["id"] for f in run["queuedFollowups"]] == [held]


async def test_a_message_to_a_thread_goes_to_its_busy_run_and_an_idle_thread_starts_nothing(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    bot = clients["alice-bot"]
    await start(bot, "run-old")
    assert (await bot.post("/runs/run-old/complete", json={"result": "done"})).status_code == 200
    request_id = await parked(bot, run_id="run-new")  # the same thread, t1
    to_thread = await clients["alice"].post("/threads/t1/messages", json={"text": "deny"})
    assert busy(to_thread) == {"resolved_interaction_id": request_id}
    held = busy(await clients["alice"].post("/threads/t1/messages", json={"text": "and why?"}))
    assert held["queued"] is True
    assert [f["id"] for f in (await bot.get("/runs/run-new/followups")).json()["items"]] == [held["followup_id"]]
    assert (await bot.get("/runs/run-old/followups")).json()["items"] == []
    for who, thread in (("bob", "t1"), ("alice", "no-such-thread")):  # bob sees no run of t1
        idle = await clients[who].post(f"/threads/{thread}/messages", json={"text": "hello"})
        assert idle.status_code == 404 and "no run of thread" in idle.json()["detail"]
    assert (await bot.post("/runs/run-new/cancel", json={})).status_code == 200
    ended = await clients["alice"].post("/threads/t1/messages", json={"text": "hello?"})
    assert ended.status_code == 404
    runs = (await bot.get("/runs", params={"session": "t1"})).json()["items"]
    assert sorted(r["id"] for r in runs) == ["alice-bot:run-new", "alice-bot:run-old"]  # nothing was started


async def test_the_python_client_sends_to_a_thread_as_the_route_does_to_the_person_s_own_agent_first(
    world: World, clients: dict[str, httpx.AsyncClient]
) -> None:
    """`broker.send_to_thread` through a server picked the newest run of the thread the
    person may see: another agent's run asking them on the same thread took the message
    meant for their own agent, where `POST /threads/{id}/messages` gives it to their own."""
    await start(clients["alice-bot"], "mine")  # alice's own agent, working on t1
    async with interlock.connect(world.base, token=world.tokens["alice"]) as alice:
        await alice.give_grant("bob-bot", "interlock:inbox/alice", "hitl/request")
        await parked(clients["bob-bot"], QUESTION, run_id="theirs")  # later, bob's agent asks alice on t1 too
        sent = await alice.send_to_thread("t1", "use the staging cluster")
    assert sent.run == "alice-bot:mine" and sent.followup is not None
    held = (await clients["alice-bot"].get("/runs/mine/followups")).json()["items"]
    assert [f["text"] for f in held] == ["use the staging cluster"]
    assert (await clients["bob-bot"].get("/runs/theirs/followups")).json()["items"] == []


async def test_bad_sends_are_refused_and_hold_nothing(clients: dict[str, httpx.AsyncClient]) -> None:
    await parked(clients["alice-bot"])
    alice = clients["alice"]
    assert (await alice.post(f"/runs/{RUN}/messages", json={"text": ""})).status_code == 422
    assert (await alice.post(f"/runs/{RUN}/messages", json={"text": "   "})).status_code == 422
    assert (await alice.post(f"/runs/{RUN}/messages", json={"text": 5})).status_code == 422
    assert (await alice.post(f"/runs/{RUN}/messages", json={"text": "x", "extra": 1})).status_code == 422
    bad_json = await alice.post(f"/runs/{RUN}/messages", content=b"{", headers={"content-type": "application/json"})
    assert bad_json.status_code == 400
    missing = await send(alice, "hello", run_id="no-such-run")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    unknown = await alice.delete(f"/runs/{RUN}/followups/f-unknown")
    assert unknown.status_code == 404 and unknown.json()["code"] == "followup_not_found"
    assert (await alice.get(f"/runs/{RUN}")).json()["queuedFollowups"] == []


@pytest.fixture
def small_world(tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]) -> Iterator[World]:
    """A server whose runs hold two messages at most."""
    db = f"sqlite:///{tmp_path / 'full.db'}"
    tokens = _principals(db)
    with serve(db, max_followups=2, auth=True) as base:
        yield World(base, tokens)


async def test_a_full_queue_says_so_with_a_plain_thread_busy(small_world: World) -> None:
    async with small_world.client("alice-bot") as bot, small_world.client("alice") as alice:
        await parked(bot)
        assert busy(await send(alice, "one"))["queued"] is True
        assert busy(await send(alice, "two"))["queued"] is True
        full = await send(alice, "three")
        assert busy(full) == {}
        assert "nothing was held" in full.json()["detail"]
        held = (await alice.get(f"/runs/{RUN}")).json()["queuedFollowups"]
        assert [f["text"] for f in held] == ["one", "two"]
