"""pydantic-ai and OpenAI Agents SDK agents that park on an approval and resume elsewhere.

Each test runs the agent program (frameworks_app.py) in a subprocess: it starts a run,
which parks on the deploy approval, and exits. A person answers with the CLI (or the
HTTP API), and `interlock worker` resumes the run in another subprocess, in both orders:
the answer before the worker starts, and the worker waiting before the answer. On
SQLite and PostgreSQL, and for an agent that reaches interlock over http:// (both orders
too). A denial reaches the model, and an agent killed after asking and restarted finds
its approval instead of making a second, on SQLite (those resumed by the worker command
in the test's process, as is the check that a second worker finds nothing left to
resume): what the store adds to those is
checked in process on every backend (tests/integration/test_framework_adapters.py), and
each process here imports its framework again (the Agents SDK takes two seconds). Each
checks that the tool ran exactly once, with the arguments the person approved.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import interlock
from cli_support import invoke
from interlock import Status
from interlock.model import Run, RunStatus, new_id

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

HERE = Path(__file__).parent
INTERLOCK = [sys.executable, "-m", "interlock"]
BOUND = 60.0
FRAMEWORKS = ["pydantic-ai", "openai-agents"]
ON_SQLITE = pytest.mark.parametrize("store", ["sqlite"], indirect=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
    else:
        with request.getfixturevalue("pg_databases")() as url:
            yield url


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "deploys.jsonl"


def env(log: Path) -> dict[str, str]:
    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "DEPLOY_LOG": str(log), "PYTHONPATH": path}


def agent_process(framework: str, url: str, log: Path, run_id: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """Run the agent program on run `run_id` to its end (or its death)."""
    return subprocess.run(
        [sys.executable, str(HERE / "frameworks_app.py"), framework, url, run_id],
        capture_output=True,
        text=True,
        env={**env(log), **extra},
        timeout=BOUND,
    )


def start_agent(framework: str, url: str, log: Path, run_id: str | None = None) -> dict[str, Any]:
    """Run the agent program: it starts a run, parks it and exits."""
    done = agent_process(framework, url, log, run_id or new_id())
    assert done.returncode == 0, done.stderr
    run: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert run["status"] == "waiting_for_approval", run
    return run


def factory(framework: str) -> str:
    return f"frameworks_app:{framework.replace('-', '_')}_factory"


def cli(url: str, log: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*INTERLOCK, *args, "--db", url], capture_output=True, text=True, env=env(log), timeout=BOUND, cwd=HERE
    )


def answer(url: str, log: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`interlock answer ARGS` in process (cli_support): the answer, not its process, is the point."""
    return invoke("answer", *args, "--db", url, env=env(log), cwd=HERE)


def resume_here(framework: str, url: str, log: Path) -> subprocess.CompletedProcess[str]:
    """`interlock worker FACTORY --once` in process (cli_support), where what the resume does
    is the point and a new process is not: the tests of both orders resume in one."""
    return invoke("worker", factory(framework), "--once", "--db", url, env=env(log), cwd=HERE)


def deploys(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def ended(url: str, run_id: str) -> Run:
    """The run once it has ended, followed on the event log (bounded)."""
    async with interlock.connect(url) as broker:
        with anyio.fail_after(BOUND):
            async for event in broker.events(after=0, follow=True):
                if event.type in ("run_completed", "run_failed", "run_cancelled") and event.data.get("run") == run_id:
                    break
        return await broker.get_run(run_id)


def spawn_worker(framework: str, store: str, log: Path) -> subprocess.Popen[str]:
    """`interlock worker` serving until SIGTERM, in a process of its own."""
    return subprocess.Popen(
        [*INTERLOCK, "worker", factory(framework), "--db", store],
        stderr=subprocess.PIPE,
        text=True,
        env=env(log),
        cwd=HERE,
    )


def approve_with(framework: str) -> tuple[list[str], dict[str, Any]]:
    """How the person approves, and the arguments the tool must run with: for pydantic-ai
    the person edits the version (it takes the edit as `override_args`); the Agents SDK
    runs a call with the model's own arguments, so there the approval is a plain yes."""
    if framework == "pydantic-ai":
        edited = {"env": "prod", "version": "2.4"}
        return ["--json", json.dumps({"approve": True, "arguments": edited})], edited
    return ["yes"], {"env": "prod", "version": "2.3"}


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_answered_before_the_worker_starts(framework: str, store: str, log: Path) -> None:
    run = start_agent(framework, store, log)
    assert deploys(log) == []
    (request_id,) = run["waiting_on"]
    words, expected = approve_with(framework)
    answered = answer(store, log, request_id, *words, "--by", "alice")
    assert answered.returncode == 0, answered.stderr

    resumed = cli(store, log, "worker", factory(framework), "--once")
    assert resumed.returncode == 0, resumed.stderr
    final = await ended(store, run["id"])
    assert final.status is RunStatus.COMPLETED, final.error
    assert final.result == f"deploy said: deployed {expected['version']} to prod"
    assert deploys(log) == [expected]

    again = resume_here(framework, store, log)  # nothing left to resume
    assert again.returncode == 0 and "resumed 0 run(s)" in again.stderr
    assert deploys(log) == [expected]


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_the_worker_waits_and_resumes_once_the_person_answers(framework: str, store: str, log: Path) -> None:
    worker = spawn_worker(framework, store, log)
    try:
        run = start_agent(framework, store, log)
        (request_id,) = run["waiting_on"]
        assert deploys(log) == []
        words, expected = approve_with(framework)
        answered = answer(store, log, request_id, *words, "--by", "alice")
        assert answered.returncode == 0, answered.stderr
        final = await ended(store, run["id"])
        assert final.status is RunStatus.COMPLETED, final.error
        assert deploys(log) == [expected]
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=BOUND)
    assert worker.returncode == 0, err
    assert "resumed 1 run(s)" in err


@ON_SQLITE
@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_denial_reaches_the_model_with_the_reason_and_the_tool_never_runs(
    framework: str, store: str, log: Path
) -> None:
    run = start_agent(framework, store, log)
    (request_id,) = run["waiting_on"]
    denied = answer(store, log, request_id, "no", "--reason", "Not during the sale.", "--by", "alice")
    assert denied.returncode == 0, denied.stderr
    assert resume_here(framework, store, log).returncode == 0
    final = await ended(store, run["id"])
    assert final.status is RunStatus.COMPLETED, final.error
    assert final.result == "deploy said: Not during the sale."
    assert deploys(log) == []


@pytest.fixture
def server(tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]) -> Iterator[str]:
    with serve(f"sqlite:///{tmp_path / 'server.db'}", auth=False) as base:
        yield base


@ON_SQLITE
@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_restarted_agent_finds_its_approval_instead_of_making_a_second(
    framework: str, store: str, log: Path
) -> None:
    run_id = new_id()
    killed = agent_process(framework, store, log, run_id, DIE_BEFORE_PARKING="1")
    assert killed.returncode == 3, killed.stderr  # died with its approval made, its run not parked
    async with interlock.connect(store) as broker:
        (made,) = (await broker.list(kind="approval")).items
        assert (await broker.get_run(run_id)).status is RunStatus.RUNNING
    parked = start_agent(framework, store, log, run_id)  # the program starts again, from the top
    assert parked["waiting_on"] == [made.id]
    assert start_agent(framework, store, log, run_id) == parked  # and again, once parked
    async with interlock.connect(store) as broker:
        assert [a.id for a in (await broker.list(kind="approval")).items] == [made.id]
    words, expected = approve_with(framework)
    assert answer(store, log, made.id, *words, "--by", "alice").returncode == 0
    assert resume_here(framework, store, log).returncode == 0
    final = await ended(store, run_id)
    assert final.status is RunStatus.COMPLETED, final.error
    assert deploys(log) == [expected]


async def answer_over_http(server: str, request_id: str, run_id: str) -> None:
    """Alice approves with the Novo-compatible inputResponses, after checking what she approves."""
    async with httpx.AsyncClient(base_url=f"{server}/api/v1", timeout=BOUND) as api:
        shown = (await api.get(f"/requests/{request_id}")).json()
        assert (shown["kind"], shown["origin"]["run"], shown["origin"]["tool_call_id"]) == (
            "approval",
            run_id,
            "call_deploy_1",
        )
        body = {"inputResponses": [{"requestId": request_id, "optionId": "approve"}], "by": "alice"}
        answered = await api.post(f"/requests/{request_id}/answer", json=body)
        assert answered.status_code == 200, answered.text


@pytest.mark.parametrize("order", ["answered-first", "worker-first"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_an_agent_reaching_interlock_over_http_parks_and_resumes_the_same(
    framework: str, order: str, server: str, log: Path
) -> None:
    worker = spawn_worker(framework, server, log) if order == "worker-first" else None
    try:
        run = start_agent(framework, server, log)
        (request_id,) = run["waiting_on"]
        assert deploys(log) == []
        await answer_over_http(server, request_id, run["id"])
        if worker is None:
            resumed = cli(server, log, "worker", factory(framework), "--once")
            assert resumed.returncode == 0, resumed.stderr
        final = await ended(server, run["id"])
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            _, err = worker.communicate(timeout=BOUND)
    if worker is not None:
        assert worker.returncode == 0, err
        assert "resumed 1 run(s)" in err
    assert final.status is RunStatus.COMPLETED, final.error
    assert final.result == "deploy said: deployed 2.3 to prod"
    assert deploys(log) == [{"env": "prod", "version": "2.3"}]
    async with interlock.connect(server) as broker:
        approval = await broker.get(request_id)
        assert approval.status is Status.ANSWERED
