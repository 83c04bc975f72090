"""The runs API against a real server with auth on: who may do what with a run, a run's
state kept from people, and the run's event stream replaying a pending pause."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import aconnect_sse

import interlock
from api_support import World
from interlock.principals import Principal, issue_token

pytestmark = pytest.mark.anyio
BOUND = 10
APPROVAL = {"kind": "approval", "asks": [{"type": "confirm", "id": "ok", "prompt": "Deploy?"}]}
RUN = "alice-bot:run-1"  # alice-bot's run of the id it chose, "run-1", as the server keeps it
STATE = {"messages": [{"role": "user", "content": "deploy web"}], "pending_call": "call-7"}


@pytest.fixture
def world(tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]) -> Iterator[World]:
    yield from served(tmp_path, serve)


@pytest.fixture
def quick(tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]) -> Iterator[World]:
    """A world whose runs are given up after a fraction of a second without a sign of life."""
    yield from served(tmp_path, serve, pause_timeout=0.3)


def served(tmp_path: Path, serve: Callable[..., AbstractContextManager[str]], **options: Any) -> Iterator[World]:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    tokens: dict[str, str] = {}

    async def setup() -> None:
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

    anyio.run(setup)
    with serve(db, auth=True, keepalive=0.2, **options) as base:
        yield World(base, tokens)


@pytest.fixture
async def clients(world: World) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    made = {who: world.client(who) for who in ("alice", "bob", "alice-bot", "bob-bot")}
    yield made
    for client in made.values():
        await client.aclose()


async def parked(bot: httpx.AsyncClient, run_id: str = "run-1") -> tuple[dict[str, Any], str]:
    started = await bot.post("/runs", json={"agent": "deployer", "run_id": run_id, "session": "t1"})
    assert started.status_code == 201, started.text
    created = await bot.post("/requests", json={**APPROVAL, "origin": {"run": run_id}})
    assert created.status_code == 201, created.text
    request_id = created.json()["id"]
    park = await bot.post(f"/runs/{run_id}/park", json={"state": STATE, "waiting_on": [request_id]})
    assert park.status_code == 200, park.text
    return park.json(), request_id


async def test_the_agent_sees_its_runs_state_and_the_person_it_waits_on_does_not(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    run, request_id = await parked(clients["alice-bot"])
    assert run["state"] == STATE and run["status"] == "waiting_for_approval" and run["requester"] == "alice-bot"
    assert run["id"] == RUN

    seen = (await clients["alice"].get(f"/runs/{RUN}")).json()
    assert "state" not in seen or seen["state"] is None
    assert seen["waiting_on"] == [request_id] and seen["expires_at"] is not None
    listed = (await clients["alice"].get("/runs")).json()
    assert [r["id"] for r in listed["items"]] == [RUN] and listed["items"][0].get("state") is None
    request = (await clients["alice"].get(f"/requests/{request_id}")).json()
    assert request["expires_at"] == seen["expires_at"]  # the pause's deadline, shown on its request

    # Neither another person nor another agent learns that the run exists.
    assert (await clients["bob"].get(f"/runs/{RUN}")).status_code == 404
    assert (await clients["bob-bot"].get(f"/runs/{RUN}")).status_code == 404
    assert (await clients["bob-bot"].get("/runs/run-1")).status_code == 404
    assert (await clients["bob"].get("/runs")).json()["items"] == []
    assert (await clients["alice"].get("/runs/no-such-run")).status_code == 404


async def test_a_running_run_shows_when_it_is_given_up_and_a_restart_by_its_agent_moves_that_on(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    bot = clients["alice-bot"]
    started = await bot.post("/runs", json={"agent": "deployer", "run_id": "run-1", "session": "t1"})
    assert started.status_code == 201, started.text
    first = started.json()
    assert first["status"] == "running" and first["worker"] is None and first["expires_at"] is not None
    created = await bot.post("/requests", json={**APPROVAL, "to": "alice", "origin": {"run": "run-1"}})
    assert created.status_code == 201, created.text
    seen = (await clients["alice"].get(f"/runs/{RUN}")).json()  # the person asked sees the deadline too
    assert seen["expires_at"] == first["expires_at"]
    asked = (await clients["alice"].get(f"/requests/{created.json()['id']}")).json()
    assert asked["expires_at"] == first["expires_at"]

    again = await bot.post("/runs", json={"agent": "deployer", "run_id": "run-1", "session": "t1"})
    assert again.status_code == 200, again.text  # the run as stored, its process alive: a new deadline
    assert again.json()["id"] == RUN and again.json()["expires_at"] > first["expires_at"]
    assert (await bot.get(f"/runs/{RUN}")).json()["expires_at"] == again.json()["expires_at"]

    park = await bot.post("/runs/run-1/park", json={"state": STATE, "waiting_on": [created.json()["id"]]})
    assert park.status_code == 200, park.text
    parked = await bot.post("/runs", json={"agent": "deployer", "run_id": "run-1"})  # parked: as it is
    assert parked.status_code == 200 and parked.json()["expires_at"] == park.json()["expires_at"]


async def test_a_persons_client_never_sends_a_runs_state_nor_drives_it(clients: dict[str, httpx.AsyncClient]) -> None:
    _, request_id = await parked(clients["alice-bot"])
    alice = clients["alice"]
    for path, body in (
        ("/runs", {"agent": "deployer"}),
        (f"/runs/{RUN}/park", {"state": {"forged": True}, "waiting_on": [request_id]}),
        ("/runs/claim", {"worker": "w"}),
        (f"/runs/{RUN}/complete", {"result": "done"}),
        (f"/runs/{RUN}/fail", {"error": "no"}),
        (f"/runs/{RUN}/lease", {"worker": "w"}),
    ):
        response = await alice.post(path, json=body)
        assert response.status_code == 403, (path, response.text)
    run = (await clients["alice-bot"].get("/runs/run-1")).json()
    assert run["state"] == STATE and run["status"] == "waiting_for_approval"
    # another agent cannot park, finish or claim it either
    other = clients["bob-bot"]
    assert (await other.post(f"/runs/{RUN}/complete", json={})).status_code == 404
    assert (await other.post("/runs/claim", json={"worker": "w"})).status_code == 204


async def test_metrics_count_the_workers_waiting_and_an_answer_hands_one_its_run(
    world: World, clients: dict[str, httpx.AsyncClient]
) -> None:
    bot = clients["alice-bot"]
    _, request_id = await parked(bot)

    async def waiting() -> float:
        text = (await bot.get(f"{world.base}/metrics")).text
        (line,) = [line for line in text.splitlines() if line.startswith("interlock_claims_waiting ")]
        return float(line.split()[1])

    assert await waiting() == 0  # no worker serves here yet
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            claimed: list[httpx.Response] = []

            async def claim() -> None:
                claimed.append(await bot.post("/runs/claim", params={"wait": BOUND}, json={"worker": "w1"}))

            tg.start_soon(claim)
            while await waiting() != 1:  # the worker's long poll is waiting on the server
                pass
            answered = await clients["alice"].post(f"/requests/{request_id}/answer", json={"answer": True})
            assert answered.status_code == 200, answered.text
    assert claimed[0].status_code == 200 and claimed[0].json()["worker"] == "w1"
    assert await waiting() == 0


async def test_an_answer_makes_the_run_claimable_once_by_its_agent(clients: dict[str, httpx.AsyncClient]) -> None:
    bot = clients["alice-bot"]
    _, request_id = await parked(bot)
    assert (await bot.post("/runs/claim", json={"worker": "w1"})).status_code == 204
    answered = await clients["alice"].post(f"/requests/{request_id}/answer", json={"answer": True})
    assert answered.status_code == 200, answered.text
    assert answered.json()["expires_at"] is None and answered.json()["settled_at"] is not None

    claimed = await bot.post("/runs/claim", json={"agents": ["deployer"], "worker": "w1"})
    assert claimed.status_code == 200 and claimed.json()["state"] == STATE and claimed.json()["worker"] == "w1"
    assert (await bot.post("/runs/claim", json={"worker": "w2"})).status_code == 204
    late = await bot.post("/runs/run-1/complete", json={"result": 1, "worker": "w2"})
    assert late.status_code == 409 and late.json()["code"] == "run_conflict"
    done = await bot.post("/runs/run-1/complete", json={"result": {"ok": True}, "worker": "w1"})
    assert done.status_code == 200 and done.json()["status"] == "completed"


async def test_an_exclusive_run_holds_its_session_against_its_own_agent_s_starts_only(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    bot, other = clients["alice-bot"], clients["bob-bot"]
    await parked(bot)  # alice-bot's run-1 of deployer on t1, parked
    start = {"agent": "deployer", "session": "t1", "exclusive": True}
    refused = await bot.post("/runs", json={**start, "run_id": "run-2"})
    assert refused.status_code == 409, refused.text
    problem = refused.json()
    assert (problem["code"], problem["run_id"], problem["current_status"]) == (
        "run_conflict",
        RUN,
        "waiting_for_approval",
    )
    assert RUN in problem["detail"] and "'t1'" in problem["detail"]
    assert (await bot.get("/runs/run-2")).status_code == 404
    # Another agent's names are its own: its thread t1 is not alice-bot's.
    theirs = await other.post("/runs", json={**start, "run_id": "run-2"})
    assert theirs.status_code == 201, theirs.text
    assert (await bot.post("/runs", json={**start, "run_id": "run-1"})).status_code == 200  # its own, as it is
    alone = await bot.post("/runs", json={"agent": "deployer", "exclusive": True})
    assert alone.status_code == 422 and "session" in alone.json()["detail"]


async def test_the_person_waited_on_may_cancel_the_run_which_withdraws_its_requests(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    _, request_id = await parked(clients["alice-bot"])
    assert (await clients["bob"].post(f"/runs/{RUN}/cancel", json={})).status_code == 404
    cancelled = await clients["alice"].post(f"/runs/{RUN}/cancel", json={})
    assert cancelled.status_code == 200, cancelled.text
    assert (cancelled.json()["status"], cancelled.json()["terminal_reason"]) == ("cancelled", "cancelled_by_user")
    request = (await clients["alice"].get(f"/requests/{request_id}")).json()
    assert request["status"] == "cancelled"
    again = await clients["alice"].post(f"/runs/{RUN}/cancel", json={})
    assert again.status_code == 409 and again.json()["code"] == "run_conflict"


async def test_a_person_naming_a_run_by_the_id_its_agent_chose_is_told_how_the_server_names_it(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    await parked(clients["alice-bot"])  # kept as "alice-bot:run-1"
    hint = "a run an agent started is named with that agent's name first, as 'AGENT:run-1' for the id 'run-1' it chose"
    for who in ("alice", "bob"):  # the same words whether the person may see the run or not
        for run_id in ("run-1", "no-such-run"):
            answered = await clients[who].get(f"/runs/{run_id}")
            assert answered.status_code == 404, answered.text
            assert answered.json()["detail"] == f"no run with id {run_id!r}" + (
                f" ({hint.replace('run-1', run_id)}; the list of runs gives each one's id)"
            )
    assert (await clients["alice"].get(f"/runs/{RUN}")).status_code == 200
    as_agent = await clients["bob-bot"].get("/runs/run-1")  # an agent names its own runs by its own ids
    assert as_agent.status_code == 404 and as_agent.json()["detail"] == "no run with id 'run-1'"


async def first_events(client: httpx.AsyncClient, run_id: str, count: int, headers: dict[str, str]) -> list[Any]:
    seen: list[Any] = []
    with anyio.fail_after(BOUND):
        async with aconnect_sse(client, "GET", f"/runs/{run_id}/events/stream", headers=headers) as source:
            async for sse in source.aiter_sse():
                if sse.id:
                    seen.append((int(sse.id), sse.event, json.loads(sse.data)))
                if len(seen) == count:
                    return seen
    raise AssertionError("the stream ended early")


async def test_a_reconnecting_client_gets_the_pending_pause_again_then_what_it_missed(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    bot, alice = clients["alice-bot"], clients["alice"]
    _, request_id = await parked(bot)
    events = (await alice.get(f"/runs/{RUN}/events")).json()["events"]
    assert [e["type"] for e in events] == ["run_started", "created", "input_requested"]
    assert all("state" not in e["data"] for e in events)
    pause = events[-1]

    # Reconnecting after the pause: the pause comes again first (a handler may act twice).
    (again,) = await first_events(alice, RUN, 1, {"Last-Event-ID": str(pause["id"])})
    assert again[0] == pause["id"] and again[1] == "input_requested"
    assert again[2]["data"]["waiting_on"] == [request_id]

    # Reconnecting from before the pause: each missed event once, in order.
    replayed = await first_events(alice, RUN, 2, {"Last-Event-ID": str(events[0]["id"])})
    assert [(i, t) for i, t, _ in replayed] == [(e["id"], e["type"]) for e in events[1:]]

    # Once answered, the pause is over: nothing is sent again, the answer follows.
    await alice.post(f"/requests/{request_id}/answer", json={"answer": True})
    (answered,) = await first_events(alice, RUN, 1, {"Last-Event-ID": str(pause["id"])})
    assert answered[1] == "answered"


async def test_bad_claims_and_stream_cursors_are_refused(clients: dict[str, httpx.AsyncClient]) -> None:
    bot = clients["alice-bot"]
    await parked(bot)
    for params, body in (
        ({}, {}),  # no worker
        ({}, {"worker": "w", "lease": 0}),
        ({}, {"worker": "w", "agents": "deployer"}),
        ({"wait": -1}, {"worker": "w"}),
        ({"wait": 301}, {"worker": "w"}),
    ):
        response = await bot.post("/runs/claim", params=params, json=body)
        assert response.status_code == 422, (params, body, response.text)
    garbled = await bot.post("/runs/claim", content=b"\x00", headers={"Content-Type": "application/json"})
    assert garbled.status_code == 400
    stream = await bot.get("/runs/run-1/events/stream", headers={"Last-Event-ID": "-1"})
    assert stream.status_code == 400 and stream.json()["code"] == "invalid_request"
    assert (await bot.get("/runs/no-such-run/events/stream")).status_code == 404
    assert (await clients["bob"].get(f"/runs/{RUN}/events/stream")).status_code == 404
    assert (await bot.get("/runs/run-1")).json()["status"] == "waiting_for_approval"  # nothing changed


async def given_up(bot: httpx.AsyncClient, run_id: str) -> None:
    """Start a run nobody keeps alive and return once it is given up as abandoned: by then
    the server's expiry has run past the deadline of every run started before it."""
    assert (await bot.post("/runs", json={"agent": "clock", "run_id": run_id})).status_code == 201
    created = await bot.post("/requests", json={**APPROVAL, "to": "alice", "origin": {"run": run_id}})
    assert created.status_code == 201, created.text
    with anyio.fail_after(BOUND):
        settled = await bot.get(f"/requests/{created.json()['id']}/wait", params={"timeout": BOUND})
    assert settled.status_code == 200 and settled.json()["status"] == "cancelled"  # its maker's poll kept nothing


async def test_only_the_makers_waiting_long_poll_keeps_its_run_alive(quick: World) -> None:
    bot, alice = quick.client("alice-bot"), quick.client("alice")
    async with bot, alice:
        assert (await bot.post("/runs", json={"agent": "deployer", "run_id": "run-1"})).status_code == 201
        created = await bot.post("/requests", json={**APPROVAL, "to": "alice", "origin": {"run": "run-1"}})
        request_id = created.json()["id"]
        path = f"/requests/{request_id}/wait"

        # The maker's process waiting on it (keep_run, as the Python client's wait asks):
        # past two windows, the run is still running and its request pending.
        async with anyio.create_task_group() as tasks:
            polled: list[httpx.Response] = []

            async def poll() -> None:
                polled.append(await bot.get(path, params={"timeout": BOUND, "keep_run": "true"}))

            tasks.start_soon(poll)
            await given_up(bot, "clock-1")
            await given_up(bot, "clock-2")
            assert not polled
            run = (await bot.get(f"/runs/{RUN}")).json()
            assert run["status"] == "running" and run["terminal_reason"] is None
            tasks.cancel_scope.cancel()  # the process hangs up (cut, closed, dead)

        # Asked by the person it is to, keep_run keeps nothing: the run is given up.
        with anyio.fail_after(BOUND):
            settled = await alice.get(path, params={"timeout": BOUND, "keep_run": "true"})
        assert settled.status_code == 200 and settled.json()["status"] == "cancelled"
        assert settled.json()["response"]["reason"] == "abandoned"
        assert (await bot.get(f"/runs/{RUN}")).json()["terminal_reason"] == "abandoned"


async def test_a_create_that_waits_keeps_its_run_alive_while_it_waits(quick: World) -> None:
    bot = quick.client("alice-bot")
    async with bot:
        assert (await bot.post("/runs", json={"agent": "deployer", "run_id": "run-1"})).status_code == 201
        async with anyio.create_task_group() as tasks:
            made: list[httpx.Response] = []

            async def ask() -> None:
                body = {**APPROVAL, "to": "alice", "origin": {"run": "run-1"}}
                made.append(await bot.post("/requests", json=body, params={"wait": BOUND}))

            tasks.start_soon(ask)
            await given_up(bot, "clock-1")
            await given_up(bot, "clock-2")
            assert not made
            assert (await bot.get(f"/runs/{RUN}")).json()["status"] == "running"
            tasks.cancel_scope.cancel()
