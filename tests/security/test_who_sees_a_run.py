"""Who sees a run, over HTTP with auth on: who started it, that agent's owner, the people
its requests go to (themselves or through a team of theirs), and an admin. The agent of a
person a request goes to sees nothing of the run, and an agent is asked nothing (only
people answer), even on a server with `--open-inboxes`; an owner finds their agents' runs
in their list as well as by id."""

from __future__ import annotations

import json
import re
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
PEOPLE = ("alice", "bob")
AGENTS = {"alice-bot": "alice", "bob-bot": "bob"}


def question(**fields: Any) -> dict[str, Any]:
    return {"asks": [{"type": "text", "id": "t", "prompt": "Name?"}], **fields}


@pytest.fixture
def world(tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]) -> Iterator[World]:
    """A server with auth on where anyone signed in may ask anyone (`--open-inboxes`):
    alice and bob (people), each with an agent of their own."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    tokens: dict[str, str] = {}

    async def setup() -> None:
        async with interlock.connect(db) as broker:
            principals = [Principal(name, "human") for name in PEOPLE]
            principals += [Principal(name, "agent", owner=owner) for name, owner in AGENTS.items()]
            for principal in principals:
                await broker.store.save_principal(principal)
                token = issue_token(principal.name, datetime.now(UTC))
                await broker.store.save_token(token)
                tokens[principal.name] = token.secret

    anyio.run(setup)
    with serve(db, auth=True, open_inboxes=True) as base:
        yield World(base, tokens)


@pytest.fixture
async def clients(world: World) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    made = {who: world.client(who) for who in (*PEOPLE, *AGENTS)}
    yield made
    for client in made.values():
        await client.aclose()


async def started(bot: httpx.AsyncClient, run_id: str, *asked: str) -> tuple[str, list[str]]:
    """A run `bot` starts in the thread t1 (its id as the server keeps it), with a request
    to each of `asked`; the requests' ids."""
    run = await bot.post("/runs", json={"agent": "worker", "run_id": run_id, "session": "t1"})
    assert run.status_code == 201, run.text
    ids = []
    for to in asked:
        created = await bot.post("/requests", json=question(to=to, origin={"run": run_id}))
        assert created.status_code == 201, created.text
        ids.append(created.json()["id"])
    return run.json()["id"], ids


async def test_the_agent_of_a_person_asked_in_another_agents_run_sees_nothing_of_it(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    run, (request_id,) = await started(clients["alice-bot"], "run-1", "bob")
    bob_bot = clients["bob-bot"]
    assert (await bob_bot.get(f"/requests/{request_id}")).status_code == 403  # bob's, not his agent's

    for method, path, body in (
        ("GET", f"/runs/{run}", None),
        ("GET", f"/runs/{run}/events", None),
        ("GET", f"/runs/{run}/events/stream", None),
        ("GET", f"/runs/{run}/followups", None),
        ("POST", f"/runs/{run}/messages", {"text": "stop that"}),
        ("POST", f"/runs/{run}/cancel", {}),
    ):
        response = await bob_bot.request(method, path, json=body)
        assert response.status_code == 404, (method, path, response.text)
        assert response.json()["code"] == "not_found", (path, response.text)
    assert (await bob_bot.get("/runs")).json()["items"] == []
    assert (await bob_bot.get("/runs", params={"requester": "alice-bot"})).json()["items"] == []
    thread = await bob_bot.post("/threads/t1/messages", json={"text": "stop that"})
    assert thread.status_code == 404 and thread.json()["code"] == "not_found", thread.text

    # The run ran on, holding nothing from it; its own agent and its owner see it as ever.
    for who in ("alice-bot", "alice"):
        seen = await clients[who].get(f"/runs/{run}")
        assert seen.status_code == 200, seen.text
        assert (seen.json()["status"], seen.json()["queuedFollowups"]) == ("running", [])
    # A person asked in it sees, lists and messages it, as the rule says.
    bob = clients["bob"]
    assert (await bob.get(f"/runs/{run}")).status_code == 200
    assert [r["id"] for r in (await bob.get("/runs")).json()["items"]] == [run]
    sent = await bob.post("/threads/t1/messages", json={"text": "use the staging box"})
    assert sent.status_code == 409 and sent.json()["details"]["queued"] is True, sent.text


async def test_an_agent_lists_only_the_runs_it_started(clients: dict[str, httpx.AsyncClient]) -> None:
    mine, _ = await started(clients["bob-bot"], "mine")
    await started(clients["alice-bot"], "theirs", "bob")
    listed = await clients["bob-bot"].get("/runs")
    assert [r["id"] for r in listed.json()["items"]] == [mine]
    assert [
        r["id"] for r in (await clients["bob-bot"].get("/runs", params={"requester": "bob-bot"})).json()["items"]
    ] == [mine]


async def test_an_owner_lists_the_runs_of_their_agents_whoever_those_ask(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    quiet, _ = await started(clients["alice-bot"], "quiet")  # asks no one yet
    asking_bob, _ = await started(clients["alice-bot"], "asking-bob", "bob")
    others, _ = await started(clients["bob-bot"], "bobs")
    alice = clients["alice"]
    for run in (quiet, asking_bob):
        assert (await alice.get(f"/runs/{run}")).status_code == 200  # hers to open, as before

    listed = [r["id"] for r in (await alice.get("/runs")).json()["items"]]
    assert listed == [asking_bob, quiet]
    by_agent = await alice.get("/runs", params={"requester": "alice-bot", "limit": 1})
    assert [r["id"] for r in by_agent.json()["items"]] == [asking_bob]
    rest = await alice.get("/runs", params={"requester": "alice-bot", "cursor": by_agent.json()["next_cursor"]})
    assert [r["id"] for r in rest.json()["items"]] == [quiet]
    assert others not in listed  # another owner's agent's run, asking no one of hers
    assert [r["id"] for r in (await clients["bob"].get("/runs")).json()["items"]] == [others, asking_bob]


async def test_an_owner_messages_the_thread_of_their_agents_run_that_asks_no_one(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    run, _ = await started(clients["alice-bot"], "quiet")
    sent = await clients["alice"].post("/threads/t1/messages", json={"text": "and the docs too"})
    assert sent.status_code == 409 and sent.json()["details"]["queued"] is True, sent.text
    held = (await clients["alice-bot"].get(f"/runs/{run}")).json()["queuedFollowups"]
    assert [(f["text"], f["by"]) for f in held] == [("and the docs too", "alice")]


async def test_an_agent_is_asked_nothing_for_nobody_could_answer_and_an_update_still_reaches_it(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    """Only people answer: a request to an agent (another's, or the asking agent itself)
    stayed pending for good, read by that agent alone. It is refused, and stores nothing."""
    for to in ("bob-bot", "alice-bot"):
        refused = await clients["alice-bot"].post("/requests", json=question(to=to))
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"] == (
            f"to: {to!r} is an agent, and only people answer requests: ask a person or a team "
            "(an agent's requests go to its owner when they name nobody)"
        )
    assert (await clients["alice"].get("/requests")).json()["items"] == []
    assert (await clients["bob-bot"].get("/requests")).json()["items"] == []
    told = await clients["alice-bot"].post("/inform", json={"message": "deploy done", "to": "bob-bot"})
    assert told.status_code == 201, told.text


async def test_a_run_s_page_follows_only_the_run_s_events_its_person_may_see(
    world: World, clients: dict[str, httpx.AsyncClient]
) -> None:
    """The web page of a run follows the run's events (`/inbox/runs/ID/stream`): for a
    person who may see the run, those of its requests that are theirs to read; a run they
    may not see is one that is not there; without a session, nothing."""
    run, (to_bob,) = await started(clients["alice-bot"], "run-1", "bob")
    hidden, _ = await started(clients["alice-bot"], "run-2")  # asks bob nothing: not his to see
    async with httpx.AsyncClient(base_url=world.base, timeout=httpx.Timeout(BOUND, read=None)) as browser:
        stream = f"/inbox/runs/{run}/stream"
        assert (await browser.get(stream)).status_code == 401
        form = await browser.get("/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None, form.text
        done = await browser.post("/signin", data={"token": world.tokens["bob"], "csrf": csrf[1]})
        assert done.status_code == 303, done.text
        assert (await browser.get(f"/inbox/runs/{hidden}/stream")).status_code == 404

        with anyio.fail_after(BOUND):
            async with aconnect_sse(browser, "GET", stream, params={"after": 0}) as events:
                assert events.response.status_code == 200
                # The run's own events (started), and those of its requests that are his.
                seen = (json.loads(e.data) async for e in events.aiter_sse() if e.data)
                first = await anext(e async for e in seen if e["request_id"] is not None)
                assert (first["type"], first["request_id"]) == ("created", to_bob)
                to_alice = await clients["alice-bot"].post("/requests", json=question(to="alice", origin={"run": run}))
                assert to_alice.status_code == 201, to_alice.text
                answered = await clients["bob"].post(f"/requests/{to_bob}/answer", json={"answers": {"t": "Ada"}})
                assert answered.status_code == 200, answered.text
                # The request to alice in the same run is not his to read: its event never comes.
                then = await anext(e async for e in seen if e["request_id"] is not None)
                assert (then["type"], then["request_id"]) == ("answered", to_bob)
