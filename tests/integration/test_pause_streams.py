"""The streams a client follows a pause on, as a client that connects for the first time
meets them: a run's event stream and the Novo-compatible interactions stream both start
with the pause still pending (so a late client learns of it, and a handler may act
twice), then go on with what happens from then on; a message held for a busy run and
delivered to its agent shows on the interactions stream as Novo's
`data-novo-followup-replayed`. In process, with auth on, over a transport that streams."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import ServerSentEvent, aconnect_sse

import interlock
from asgi_support import InProcessServer, serve_in_process
from interlock.principals import Principal, issue_token

pytestmark = pytest.mark.anyio
BOUND = 10
APPROVAL = {"kind": "approval", "to": "alice", "asks": [{"type": "confirm", "id": "ok", "prompt": "Deploy?"}]}
QUESTION = {"to": "alice", "asks": [{"type": "text", "id": "region", "prompt": "Region?"}]}


@pytest.fixture
async def clients(tmp_path: Path) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    """Clients of an in-process server with auth: alice, bob and their agents."""
    db = f"sqlite:///{tmp_path / 'streams.db'}"
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
    server: InProcessServer
    async with serve_in_process(db, auth=True, keepalive=0.2) as server:
        made = {
            who: server.client("/api/v1", headers={"Authorization": f"Bearer {secret}"}, timeout=BOUND)
            for who, secret in tokens.items()
        }
        yield made
        for client in made.values():
            await client.aclose()


async def park(bot: httpx.AsyncClient, run_id: str, ask: dict[str, Any] = APPROVAL) -> str:
    started = await bot.post("/runs", json={"agent": "deployer", "run_id": run_id, "session": "t1"})
    assert started.status_code == 201, started.text
    created = await bot.post("/requests", json={**ask, "origin": {"run": run_id, "session": "t1"}})
    assert created.status_code == 201, created.text
    request_id: str = created.json()["id"]
    parked = await bot.post(f"/runs/{run_id}/park", json={"state": {"step": 1}, "waiting_on": [request_id]})
    assert parked.status_code == 200, parked.text
    return request_id


async def next_with(events: AsyncIterator[ServerSentEvent], *names: str) -> ServerSentEvent:
    async for sse in events:
        if sse.event in names:
            return sse
    raise AssertionError("the stream ended")


async def test_a_new_client_of_a_parked_runs_stream_gets_the_pending_pause_then_what_happens_next(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    bot, alice = clients["alice-bot"], clients["alice"]
    request_id = await park(bot, "run-1")
    stored = (await alice.get("/runs/alice-bot:run-1/events")).json()["events"]
    pause = next(e for e in stored if e["type"] == "input_requested")
    newest = (await alice.get("/events", params={"limit": 0})).json()["last_event_id"]
    with anyio.fail_after(BOUND):
        async with aconnect_sse(alice, "GET", "/runs/alice-bot:run-1/events/stream") as source:  # no Last-Event-ID
            events = source.aiter_sse()
            first = await anext(events)
            while not first.id:  # the `connected` comment
                first = await anext(events)
            assert first.event == "input_requested" and json.loads(first.data)["id"] == pause["id"]
            assert int(first.id) == newest  # where this client's stream starts
            assert json.loads(first.data)["data"]["waiting_on"] == [request_id]
            answered = await alice.post(f"/requests/{request_id}/answer", json={"answer": True})
            assert answered.status_code == 200, answered.text
            after = await next_with(events, "answered", "run_started", "created", "input_requested")
            assert after.event == "answered"  # nothing older came: the stream goes on from now


async def first_sent(client: httpx.AsyncClient, url: str, last_event_id: int) -> ServerSentEvent:
    """The first event a reconnect with `last_event_id` is sent."""
    with anyio.fail_after(BOUND):
        async with aconnect_sse(client, "GET", url, headers={"Last-Event-ID": str(last_event_id)}) as source:
            async for sse in source.aiter_sse():
                if sse.event not in ("", "message"):
                    return sse
    raise AssertionError("the stream ended")


async def test_a_reconnect_is_reminded_of_the_pause_without_its_last_event_id_going_back(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    # A run parked on two requests, one answered since: the pause comes before the answer.
    bot, alice = clients["alice-bot"], clients["alice"]
    await bot.post("/runs", json={"agent": "deployer", "run_id": "run-2", "session": "t1"})
    origin = {"run": "run-2", "session": "t1"}
    made = [(await bot.post("/requests", json={**APPROVAL, "origin": origin})).json()["id"] for _ in range(2)]
    assert (await bot.post("/runs/alice-bot:run-2/park", json={"state": {}, "waiting_on": made})).status_code == 200
    assert (await alice.post(f"/requests/{made[0]}/answer", json={"answer": True})).status_code == 200
    answered = (await alice.get("/runs/alice-bot:run-2/events")).json()["events"][-1]
    assert answered["type"] == "answered"

    reminder = await first_sent(alice, "/runs/alice-bot:run-2/events/stream", answered["id"])
    assert reminder.event == "input_requested" and json.loads(reminder.data)["id"] < answered["id"]
    assert int(reminder.id) == answered["id"]  # the client's place, not the pause's older id
    # An EventSource reconnects with the last id it was sent: nothing it has seen comes
    # again, only the reminder (which is no new event).
    again = await first_sent(alice, "/runs/alice-bot:run-2/events/stream", int(reminder.id))
    assert (again.event, again.id) == ("input_requested", reminder.id)


async def test_a_new_client_of_a_run_that_waits_on_nobody_gets_only_what_happens_next(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    bot, alice = clients["alice-bot"], clients["alice"]
    request_id = await park(bot, "run-1")
    assert (await alice.post(f"/requests/{request_id}/answer", json={"answer": True})).status_code == 200
    with anyio.fail_after(BOUND):
        async with aconnect_sse(alice, "GET", "/runs/alice-bot:run-1/events/stream") as source:
            events = source.aiter_sse()
            assert (await anext(events)).id in ("", None)  # connected
            claimed = await bot.post("/runs/claim", json={"worker": "w1"})
            assert claimed.status_code == 200, claimed.text
            seen = await next_with(events, "input_requested", "answered", "run_claimed")
            assert seen.event == "run_claimed"  # the pause is over: it is not sent again


async def test_a_new_client_of_the_interactions_stream_gets_the_runs_pending_pause_first(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    bot, alice = clients["alice-bot"], clients["alice"]
    request_id = await park(bot, "run-1")
    with anyio.fail_after(BOUND):
        async with aconnect_sse(alice, "GET", "/interactions/stream", params={"run": "alice-bot:run-1"}) as source:
            events = source.aiter_sse()
            sent = await next_with(events, "data-novo-input-requested", "data-novo-input-resolved")
            assert sent.event == "data-novo-input-requested" and not sent.id
            interaction = json.loads(sent.data)
            assert (interaction["id"], interaction["runId"], interaction["status"]) == (
                request_id,
                "alice-bot:run-1",
                "pending",
            )
            await alice.post(f"/requests/{request_id}/answer", json={"answer": True})
            resolved = await next_with(events, "data-novo-input-requested", "data-novo-input-resolved")
            assert resolved.event == "data-novo-input-resolved" and json.loads(resolved.data)["id"] == request_id


async def test_a_delivered_message_is_a_followup_replayed_chunk_on_the_interactions_stream(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    bot, alice, bob = clients["alice-bot"], clients["alice"], clients["bob"]
    request_id = await park(bot, "run-1", QUESTION)
    sent = await alice.post("/runs/alice-bot:run-1/messages", json={"text": "actually, make it eu-west"})
    assert sent.status_code == 409 and sent.json()["details"]["queued"] is True, sent.text
    followup_id = sent.json()["details"]["followup_id"]
    await alice.post(f"/requests/{request_id}/answer", json={"answer": "us-east"})
    assert (await bot.post("/runs/claim", json={"worker": "w1"})).status_code == 200

    async def first_replayed(client: httpx.AsyncClient, headers: dict[str, str]) -> ServerSentEvent:
        async with aconnect_sse(client, "GET", "/interactions/stream", headers=headers) as source:
            return await next_with(source.aiter_sse(), "data-novo-followup-replayed")

    with anyio.fail_after(BOUND):
        async with aconnect_sse(alice, "GET", "/interactions/stream") as source:
            events = source.aiter_sse()
            await anext(events)  # connected: from here on
            taken = await bot.post("/runs/alice-bot:run-1/followups/take", json={"worker": "w1"})
            assert [f["id"] for f in taken.json()["items"]] == [followup_id]
            live = await next_with(events, "data-novo-followup-replayed")
        assert json.loads(live.data) == {
            "id": followup_id,
            "text": "actually, make it eu-west",
            "runId": "alice-bot:run-1",
            "threadId": "t1",
        }
        assert live.id
        # A client that reconnects from before it gets the same chunk again (the agent too).
        for client in (alice, bot):
            again = await first_replayed(client, {"Last-Event-ID": str(int(live.id) - 1)})
            assert (again.id, again.data) == (live.id, live.data)
    # Someone it is not about never sees it.
    with anyio.fail_after(BOUND):
        async with aconnect_sse(bob, "GET", "/interactions/stream", headers={"Last-Event-ID": "0"}) as source:
            events = source.aiter_sse()
            await anext(events)
            ping = await clients["bob-bot"].post(
                "/requests", json={"to": "bob", "asks": [{"type": "text", "prompt": "Lunch?"}]}
            )
            assert ping.status_code == 201, ping.text
            seen = await next_with(events, "data-novo-followup-replayed", "data-novo-input-requested", "dropped")
            assert seen.event != "data-novo-followup-replayed"
