"""A gate approval whose tool has an argument schema, answered from every surface.

The gate's approval asks "approve?" and offers an optional edit of the arguments. Each
surface approves it in one step with the arguments reviewed (the edit left out), denies it
with a reason the agent reads verbatim, and says how to answer it: the HTTP API's
`inputResponses` with `optionId` approve / deny, and `interlock answer ID yes|no --reason`.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import interlock
from cli_support import invoke
from interlock import Broker, Request, Status
from interlock.agent import ApprovalGate, ToolCall, ToolDefinition, ToolFunctions, ToolResult, ToolRunner

pytestmark = pytest.mark.anyio
BOUND = 30
INTERLOCK = [sys.executable, "-m", "interlock"]
SCHEMA = {
    "type": "object",
    "properties": {"env": {"enum": ["staging", "prod"]}, "replicas": {"type": "integer", "maximum": 10}},
    "required": ["env", "replicas"],
    "additionalProperties": False,
}


class Agent:
    """An agent whose `scale` tool needs approval, recording what actually ran."""

    def __init__(self, broker: Broker) -> None:
        self.ran: list[dict[str, Any]] = []

        async def scale(**arguments: Any) -> str:
            self.ran.append(arguments)
            return "scaled"

        self.runner = ToolRunner(
            broker,
            [ToolFunctions({"scale": scale})],
            definitions=[ToolDefinition("scale", "Scale a service", SCHEMA)],
            gate=ApprovalGate(broker, policies={"scale": "always"}, to="alice"),
        )

    async def call(self, broker: Broker, answer: Callable[[Request], Any]) -> ToolResult:
        after = await broker.last_event_id()
        task = asyncio.create_task(self.runner.run(ToolCall("scale", {"env": "prod", "replicas": 3}, "c1")))
        with anyio.fail_after(BOUND):
            async for event in broker.events(after=after, follow=True):
                if event.type == "created" and event.request is not None:
                    request = event.request
                    break
            assert [ask.id for ask in request.asks] == ["approve", "arguments"]
            outcome = answer(request)
            if asyncio.iscoroutine(outcome):
                await outcome
            return await task


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'gate.db'}"


@pytest.fixture
def base(db: str, serve: Callable[..., AbstractContextManager[str]]) -> Iterator[str]:
    with serve(db, auth=False) as url:
        yield url


@pytest.fixture
async def api(base: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=f"{base}/api/v1", timeout=BOUND) as client:
        yield client


@pytest.mark.parametrize("option", ["approve", "deny"])
async def test_input_responses_approve_or_deny_a_gate_approval_with_an_argument_schema(
    base: str, api: httpx.AsyncClient, option: str
) -> None:
    async with interlock.connect(base) as broker:
        agent = Agent(broker)

        async def answer(request: Request) -> None:
            body = {
                "inputResponses": [{"requestId": request.id, "optionId": option}],
                "reason": "on-call said so",
                "by": "alice",
            }
            response = await api.post(f"/requests/{request.id}/answer", json=body)
            assert response.status_code == 200, response.text

        result = await agent.call(broker, answer)
    if option == "approve":
        assert result.content == "scaled"
        assert agent.ran == [{"env": "prod", "replicas": 3}]
    else:
        assert (result.denied, result.content) == (True, "on-call said so")
        assert agent.ran == []


async def test_input_responses_still_refuse_a_wrong_option_and_change_nothing(api: httpx.AsyncClient) -> None:
    body = {"kind": "approval", "to": "alice", "asks": [{"type": "confirm", "id": "approve", "prompt": "Go?"}]}
    body["asks"].append({"type": "form", "id": "edit", "prompt": "Edit", "schema": SCHEMA, "required": False})
    created = (await api.post("/requests", json=body)).json()
    wrong = {"inputResponses": [{"requestId": created["id"], "optionId": "maybe"}]}
    response = await api.post(f"/requests/{created['id']}/answer", json=wrong)
    assert response.status_code == 400, response.text
    assert (await api.get(f"/requests/{created['id']}")).json()["status"] == "pending"


def cli(*args: str, db: str) -> subprocess.CompletedProcess[str]:
    return invoke(*args, env={**os.environ, "INTERLOCK_URL": db})


async def answer_in_a_terminal(db: str, *words: str, says: str = "answered") -> Callable[[Request], Any]:
    async def answer(request: Request) -> None:
        shown = await asyncio.to_thread(cli, "show", request.id, db=db)
        assert f"interlock answer {request.id} yes" in shown.stderr
        assert f"interlock answer {request.id} no --reason" in shown.stderr
        done = await asyncio.to_thread(cli, "answer", request.id, *words, db=db)
        assert done.returncode == 0, done.stderr
        assert done.stderr.strip() == f"{says} {request.id}"  # an approval's no is a denial

    return answer


async def test_interlock_answer_yes_approves_a_gate_approval_as_reviewed(db: str) -> None:
    async with interlock.connect(db) as broker:
        agent = Agent(broker)
        result = await agent.call(broker, await answer_in_a_terminal(db, "yes", "--by", "alice"))
    assert result.content == "scaled"
    assert agent.ran == [{"env": "prod", "replicas": 3}]


async def test_interlock_answer_no_with_a_reason_denies_it_verbatim(db: str) -> None:
    async with interlock.connect(db) as broker:
        agent = Agent(broker)
        answer = await answer_in_a_terminal(
            db, "no", "--reason", "Not during the sale.", "--by", "alice", says="denied"
        )
        result = await agent.call(broker, answer)
        (request,) = (await broker.list(kind="approval")).items
    assert (result.denied, result.content) == (True, "Not during the sale.")
    assert request.status is Status.REJECTED and request.response is not None  # a denial
    assert request.response.via == "cli"
    assert agent.ran == []


async def test_interlock_answer_can_edit_the_arguments_as_json(db: str) -> None:
    async with interlock.connect(db) as broker:
        agent = Agent(broker)
        edit = '{"approve": true, "arguments": {"env": "staging", "replicas": 2}}'
        result = await agent.call(broker, await answer_in_a_terminal(db, "--json", edit, "--by", "alice"))
    assert result.content == "scaled"
    assert agent.ran == [{"env": "staging", "replicas": 2}]


async def test_on_a_local_store_interlock_answer_answers_as_you(db: str) -> None:
    # No --by: the answer is the local person's ($INTERLOCK_USER, else the login name).
    async with interlock.connect(db) as broker:
        agent = Agent(broker)

        async def as_alice(request: Request) -> None:
            env = {**os.environ, "INTERLOCK_URL": db, "INTERLOCK_USER": "alice"}
            done = await asyncio.to_thread(invoke, "answer", request.id, "yes", env=env)
            assert done.returncode == 0, done.stderr

        result = await agent.call(broker, as_alice)
        (request,) = (await broker.list(kind="approval")).items
    assert result.content == "scaled"
    assert request.response is not None and request.response.by == "alice"


async def test_a_yes_the_gate_would_not_take_is_refused_before_anything_is_recorded(db: str) -> None:
    async with interlock.connect(db) as broker:
        agent = Agent(broker)
        refusals: list[str] = []

        async def as_bob_then_no(request: Request) -> None:
            env = {**os.environ, "INTERLOCK_URL": db, "INTERLOCK_USER": "bob"}
            refused = await asyncio.to_thread(invoke, "answer", request.id, "yes", env=env)
            refusals.append(refused.stderr)
            assert refused.returncode == 4, refused.stderr
            assert (await broker.get(request.id)).status is Status.PENDING  # nothing recorded
            # A no stops the call whoever says it: bob may still deny.
            denied = await asyncio.to_thread(invoke, "answer", request.id, "no", "--reason", "Not now.", env=env)
            assert denied.returncode == 0, denied.stderr

        result = await agent.call(broker, as_bob_then_no)
    assert "an approval for alice" in " ".join(refusals[0].split())
    assert "--by alice" in refusals[0]
    assert (result.denied, result.content, agent.ran) == (True, "Not now.", [])


def test_reason_and_comment_together_are_a_usage_error(db: str) -> None:
    done = cli("answer", "01abc", "yes", "--reason", "a", "--comment", "b", db=db)
    assert done.returncode != 0 and "not both" in done.stderr
    both = cli("answer", "01abc", "ok=yes", "--json", '{"ok": true}', db=db)
    assert both.returncode == 4 and "words or as --json, not both" in both.stderr
