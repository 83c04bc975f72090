"""Finding: run ids were one namespace for every principal of a server.

An agent could tell whether another agent's run of a guessed id existed (starting it
answered 403 "started by someone else", reading it 403 rather than 404), and could take an
id another agent would use (a thread id, as the framework adapters pass) ahead of it, so
that agent's run never started. Now an agent's own run ids are its own (the server keeps
the run as `{agent}:{run_id}`): two agents' `thread-1` are two runs, neither sees nor
blocks the other, a restart finds its own run, and every refusal of a run one may not
see reads as one of an id that no run has. Tried over the HTTP API of a server with auth,
with the Python client and with the pydantic-ai adapter, and in the web inbox.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.messages import ModelResponse as PaiResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

import interlock
from asgi_support import InProcessServer, serve_in_process
from interlock import Broker, Confirm, NotFound
from interlock.agent import ApprovalGate
from interlock.integrations.pydantic_ai import PydanticAIRuns
from interlock.model import RunStatus
from interlock.principals import Principal, issue_token
from interlock.runs import Worker

pytestmark = pytest.mark.anyio

BOUND = 10
APPROVAL = {"kind": "approval", "asks": [{"type": "confirm", "id": "ok", "prompt": "Deploy?"}]}
PEOPLE = (
    Principal("alice", "human"),
    Principal("bob", "human"),
    Principal("alice-bot", "agent", owner="alice"),
    Principal("bob-bot", "agent", owner="bob"),
)


@dataclass
class World:
    db: str
    server: InProcessServer
    tokens: dict[str, str]

    def client(self, who: str) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        return self.server.client("/api/v1", headers=headers, timeout=BOUND)

    def connect(self, who: str) -> Broker:
        return self.server.connect(token=self.tokens[who])


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    tokens: dict[str, str] = {}
    async with interlock.connect(db) as broker:
        for principal in PEOPLE:
            await broker.store.save_principal(principal)
            token = issue_token(principal.name, datetime.now(UTC))
            await broker.store.save_token(token)
            tokens[principal.name] = token.secret
    async with serve_in_process(db, auth=True) as server:
        yield World(db, server, tokens)


async def start(client: httpx.AsyncClient, run_id: str, *, to: str) -> tuple[dict[str, Any], str]:
    """Start the run `run_id`, ask `to` to approve in it and park on that: the run and the request's id."""
    started = await client.post("/runs", json={"agent": "deployer", "run_id": run_id, "session": run_id})
    assert started.status_code in (200, 201), started.text
    run = started.json()
    made = await client.post("/requests", json={**APPROVAL, "to": to, "origin": {"run": run["id"]}})
    assert made.status_code == 201, made.text
    parked = await client.post(f"/runs/{run['id']}/park", json={"state": {"n": 1}, "waiting_on": [made.json()["id"]]})
    assert parked.status_code == 200, parked.text
    return parked.json(), made.json()["id"]


def without(body: dict[str, Any], run_id: str) -> dict[str, Any]:
    """A problem body with the run id it names taken out, to compare two refusals."""
    return {k: (v.replace(run_id, "RUN") if isinstance(v, str) else v) for k, v in body.items()}


async def test_two_agents_each_start_their_own_run_of_the_same_id(world: World) -> None:
    alice_bot, bob_bot = world.client("alice-bot"), world.client("bob-bot")
    async with alice_bot, bob_bot:
        mine, mine_request = await start(alice_bot, "thread-1", to="alice")
        theirs, their_request = await start(bob_bot, "thread-1", to="bob")  # not refused, not alice-bot's run
        assert (mine["id"], theirs["id"]) == ("alice-bot:thread-1", "bob-bot:thread-1")
        assert mine["session"] == theirs["session"] == "thread-1"
        assert (mine["requester"], theirs["requester"]) == ("alice-bot", "bob-bot")

        # A restart finds its own run, by the id it chose or the id it read back.
        for given in ("thread-1", "alice-bot:thread-1"):
            again = await alice_bot.post("/runs", json={"agent": "deployer", "run_id": given})
            assert again.status_code == 200 and again.json()["id"] == mine["id"], again.text
            assert again.json()["waiting_on"] == [mine_request] and again.json()["state"] == {"n": 1}
        # Each agent's own id names its own run, everywhere it names a run.
        assert (await alice_bot.get("/runs/thread-1")).json()["waiting_on"] == [mine_request]
        assert (await bob_bot.get("/runs/thread-1")).json()["waiting_on"] == [their_request]
        asked = (await alice_bot.get("/requests", params={"run": "thread-1"})).json()["items"]
        assert [r["id"] for r in asked] == [mine_request]
        events = (await bob_bot.get("/events", params={"run": "thread-1"})).json()["events"]
        assert {e["data"].get("run") or e["request"]["origin"]["run"] for e in events} == {theirs["id"]}
        update = await bob_bot.post("/inform", json={"message": "working", "to": "bob", "run": "thread-1"})
        assert update.status_code == 201 and update.json()["data"]["run"] == theirs["id"], update.text
        listed = (await alice_bot.get("/runs")).json()["items"]
        assert [r["id"] for r in listed] == [mine["id"]]


async def test_another_agents_run_is_refused_as_a_run_that_does_not_exist(world: World) -> None:
    alice_bot, bob_bot, bob = world.client("alice-bot"), world.client("bob-bot"), world.client("bob")
    async with alice_bot, bob_bot, bob:
        run, _ = await start(alice_bot, "thread-1", to="alice")
        taken, missing = run["id"], "alice-bot:thread-2"
        for who in (bob_bot, bob):
            for method, path, body in (
                ("GET", "", None),
                ("GET", "/events", None),
                ("GET", "/events/stream", None),
                ("GET", "/followups", None),
                ("POST", "/cancel", {}),
                ("POST", "/messages", {"text": "approve"}),
                ("POST", "/park", {"state": None, "waiting_on": ["0" * 32]}),
                ("POST", "/complete", {}),
                ("POST", "/fail", {"error": "x"}),
                ("POST", "/lease", {"worker": "w"}),
                ("POST", "/followups/take", {}),
                ("DELETE", "/followups/" + "0" * 32, None),
            ):
                answers = [await who.request(method, f"/runs/{run_id}{path}", json=body) for run_id in (taken, missing)]
                # 403 only for what a person's client never does, whatever the run: an agent's routes
                driving = who is bob and path in ("/park", "/complete", "/fail", "/lease", "/followups/take")
                assert answers[0].status_code == (403 if driving else 404), (method, path, answers[0].text)
                assert answers[0].status_code == answers[1].status_code, (method, path, answers[0].text)
                assert without(answers[0].json(), taken) == without(answers[1].json(), missing), (method, path)

        # Nor may bob-bot put a request or an update into it, told anything it could not guess.
        for run_id in (taken, missing):
            made = await bob_bot.post("/requests", json={**APPROVAL, "origin": {"run": run_id}})
            assert (
                made.status_code == 403 and made.json()["detail"] == f"origin.run: {run_id!r} is not a run you started"
            )
            update = await bob_bot.post("/inform", json={"message": "hi", "run": run_id})
            assert update.status_code == 403 and update.json()["detail"] == f"run: {run_id!r} is not a run you started"
        assert (await bob_bot.get("/events", params={"run": taken})).json()["events"] == []
        assert (await alice_bot.get(f"/runs/{taken}")).json()["status"] == "waiting_for_approval"  # untouched


async def test_agents_on_one_thread_id_park_and_resume_apart_through_the_python_client(world: World) -> None:
    async with world.connect("alice-bot") as alice_bot, world.connect("bob-bot") as bob_bot:
        runs = {}
        for agent, person in ((alice_bot, "alice"), (bob_bot, "bob")):
            run = await agent.start_parked(
                "deployer",
                [agent.prepare(Confirm("Deploy?"), kind="approval", to=person)],
                state={"for": person},
                run_id="thread-1",
                session="thread-1",
            )
            runs[person] = run
            assert (await agent.get_run("thread-1")).id == run.id  # its own id reads its own run
            again = await agent.start_run("deployer", run_id="thread-1")  # a restart: the same run, nothing new
            assert again.id == run.id and again.waiting_on == run.waiting_on
        assert runs["alice"].id != runs["bob"].id
        with pytest.raises(NotFound):
            await bob_bot.get_run(runs["alice"].id)

        async with world.connect("alice") as alice, world.connect("bob") as bob:
            await alice.resolve(runs["alice"].waiting_on[0], True)
            await bob.resolve(runs["bob"].waiting_on[0], True)
            assert [r.id for r in (await alice.list_runs()).items] == [runs["alice"].id]

        async def resume(run: Any, requests: Any) -> Any:
            return run.state

        for agent, person in ((alice_bot, "alice"), (bob_bot, "bob")):
            with anyio.fail_after(BOUND):
                done = await Worker(agent, {"deployer": resume}).run_once(wait=BOUND)
            assert done is not None and (done.id, done.result) == (runs[person].id, {"for": person})


def pydantic_agent() -> Agent[None, str]:
    """An agent that deploys (a call the gate asks about), then reports what the call returned."""

    def decide(messages: list[ModelMessage], info: AgentInfo) -> PaiResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return PaiResponse(parts=[ToolCallPart("deploy", {"env": "prod"}, tool_call_id="c1")])
        return PaiResponse(parts=[TextPart(str(returns[0].content))])

    agent = Agent(FunctionModel(decide))

    @agent.tool_plain(requires_approval=True)
    def deploy(env: str) -> str:
        return f"deployed to {env}"

    return agent


async def test_a_framework_agent_cannot_be_kept_from_starting_by_another_taking_its_thread_id(world: World) -> None:
    async with world.connect("bob-bot") as squatter:
        await squatter.start_run("squat", run_id="thread-7")  # bob-bot takes the id first
    async with world.connect("alice-bot") as broker:
        runs = PydanticAIRuns(broker, pydantic_agent(), name="ops", gate=ApprovalGate(broker, to="alice"))
        run = await runs.start("ship", run_id="thread-7", session="thread-7")
        assert run.status is RunStatus.WAITING_FOR_APPROVAL and run.requester == "alice-bot"
        again = await runs.start("ship", run_id="thread-7", session="thread-7")  # restarted: asks once
        assert again.id == run.id and again.waiting_on == run.waiting_on
        async with world.connect("alice") as alice:
            await alice.resolve(run.waiting_on[0], {"approve": True})
        with anyio.fail_after(BOUND):
            done = await Worker(broker, runs.handlers()).run_once(wait=BOUND)
        assert done is not None and (done.id, done.status, done.result) == (
            run.id,
            RunStatus.COMPLETED,
            "deployed to prod",
        )


async def test_an_agents_run_started_before_ids_were_scoped_is_still_found_by_its_id(world: World) -> None:
    async with interlock.connect(world.db) as store:  # as stored by a server before this change
        old = await store.start_run("deployer", run_id="legacy-1", requester="alice-bot")
        await store.start_run("deployer", run_id="legacy-2", requester="bob-bot")
    alice_bot = world.client("alice-bot")
    async with alice_bot:
        again = await alice_bot.post("/runs", json={"agent": "deployer", "run_id": "legacy-1"})
        assert again.json()["id"] == old.id == "legacy-1"
        # Started again, so its process is alive: a new deadline, as under a scoped id.
        assert old.expires_at is not None and datetime.fromisoformat(again.json()["expires_at"]) > old.expires_at
        assert (await alice_bot.get("/runs/legacy-1")).json()["requester"] == "alice-bot"
        # bob-bot's old run does not stop alice-bot starting its own of that id
        mine = await alice_bot.post("/runs", json={"agent": "deployer", "run_id": "legacy-2"})
        assert mine.status_code == 201 and mine.json()["id"] == "alice-bot:legacy-2"


async def signed_in(server: InProcessServer, token: str) -> httpx.AsyncClient:
    client = server.client(timeout=BOUND)
    page = await client.get("/signin")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    signed = await client.post("/signin", data={"token": token, "csrf": csrf[1]})
    assert signed.status_code == 303
    return client


async def test_the_web_inbox_shows_a_run_to_its_person_and_refuses_anyone_else_as_no_such_run(world: World) -> None:
    alice_bot = world.client("alice-bot")
    async with alice_bot:
        run, _ = await start(alice_bot, "thread-1", to="alice")
    alice, bob = (
        await signed_in(world.server, world.tokens["alice"]),
        await signed_in(world.server, world.tokens["bob"]),
    )
    try:
        shown = await alice.get(f"/inbox/runs/{run['id']}")
        assert shown.status_code == 200 and "alice-bot:thread-1" in shown.text
        inbox = await alice.get("/")  # the request links its run's page
        link = re.search(r'href="([^"]*/inbox/runs/[^"]+)"', inbox.text)
        assert link is not None and (await alice.get(link[1])).status_code == 200, inbox.text
        refused = await bob.get(f"/inbox/runs/{run['id']}")
        absent = await bob.get("/inbox/runs/alice-bot:thread-2")
        assert refused.status_code == absent.status_code == 404
        assert "There is no such run." in refused.text and "There is no such run." in absent.text
    finally:
        await alice.aclose()
        await bob.aclose()
