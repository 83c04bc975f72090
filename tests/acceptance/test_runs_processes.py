"""Runs across real processes: an agent parks and exits, a person answers from the CLI,
`interlock worker` resumes the run in a new process, exactly once; in both orders, on
SQLite and PostgreSQL. And Ctrl-C on a waiting agent leaves its run's request pending."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import anyio
import pytest

import interlock
from cli_support import invoke
from interlock import Status
from interlock.model import RunStatus
from serve_support import DATED

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

INTERLOCK = [sys.executable, "-m", "interlock"]
BOUND = 60

AGENT = '''
"""An agent that asks approval to deploy, parks its run and exits; `handlers` resumes it."""
import asyncio
import faulthandler
import json
import os
import sys
from pathlib import Path

import interlock
from interlock import Confirm

HERE = Path(__file__).parent
# Aborted by a test that finds it stuck, it writes where each thread was.
faulthandler.enable(file=open(HERE / "threads.txt", "w"))


async def park(run_id: str) -> None:
    async with interlock.connect() as broker:
        run = await broker.start_run("deployer", run_id=run_id, session="thread-1")
        request = await broker.create(
            Confirm("Deploy web to prod?"), kind="approval", to="alice", run=run.id, agent="deployer",
            idempotency_key=f"{run.id}:deploy",
        )
        await broker.park(run.id, state={"target": "prod", "call": "deploy"}, waiting_on=[request.id])
        print(request.id)


async def wait_on_request(run_id: str | None) -> None:
    async with interlock.connect() as broker:
        fields = {}
        if run_id:
            run = await broker.start_run("deployer", run_id=run_id)
            fields["run"] = run.id
        request = await broker.create(Confirm("Deploy?"), kind="approval", to="alice", **fields)
        waiting = asyncio.create_task(broker.wait(request.id))
        await asyncio.sleep(0)  # its first step: registered, it waits for the settlement
        print(request.id, flush=True)
        await waiting


def handlers(broker):
    async def resume(run, requests):
        (request,) = requests.values()
        if request.answer is True:
            with open(HERE / "deployed.txt", "a") as ran:  # the tool: it must run once
                ran.write(json.dumps(run.state) + "\\n")
            return {"deployed": run.state["target"]}
        return {"deployed": None, "reason": request.response.reason if request.response else ""}

    return {"deployer": resume}


if __name__ == "__main__":
    if sys.argv[1] == "park":
        asyncio.run(park(sys.argv[2]))
    else:
        try:
            asyncio.run(wait_on_request(sys.argv[2] if len(sys.argv) > 2 else None))
        except KeyboardInterrupt:
            sys.exit(130)
'''


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
        return
    databases: Callable[[], AbstractContextManager[str]] = request.getfixturevalue("pg_databases")
    with databases() as url:
        yield url


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "agent"
    folder.mkdir()
    (folder / "deploy_agent.py").write_text(textwrap.dedent(AGENT))
    return folder


def run(args: list[str], db: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "INTERLOCK_URL": db}
    return subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd, timeout=BOUND)


def cli(args: list[str], db: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`interlock ARGS` in process (cli_support): the answer, not its process, is the point."""
    return invoke(*args, env={**os.environ, "INTERLOCK_URL": db}, cwd=cwd)


def park_in_a_process(db: str, agent_dir: Path, run_id: str) -> str:
    done = run([sys.executable, "deploy_agent.py", "park", run_id], db, agent_dir)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def deployed(agent_dir: Path) -> list[dict[str, str]]:
    path = agent_dir / "deployed.txt"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_answered_before_the_worker_starts_the_run_resumes_once(db: str, agent_dir: Path) -> None:
    request_id = park_in_a_process(db, agent_dir, "run-1")
    assert park_in_a_process(db, agent_dir, "run-1") == request_id  # a restarted agent finds its own request

    answered = cli(["answer", request_id, "yes"], db, agent_dir)
    assert answered.returncode == 0, answered.stderr

    worked = run([*INTERLOCK, "worker", "deploy_agent:handlers", "--once"], db, agent_dir)
    assert worked.returncode == 0, worked.stderr
    assert "resumed 1 run(s)" in worked.stderr
    (logged,) = [line for line in worked.stderr.splitlines() if "resumed run run-1" in line]
    assert (found := DATED.match(logged)) and found["level"] == "INFO", logged  # a log kept in a file says when
    again = run([*INTERLOCK, "worker", "deploy_agent:handlers", "--once"], db, agent_dir)
    assert "resumed 0 run(s)" in again.stderr
    assert deployed(agent_dir) == [{"target": "prod", "call": "deploy"}]

    async with interlock.connect(db) as broker:
        finished = await broker.get_run("run-1")
    assert (finished.status, finished.result) == (RunStatus.COMPLETED, {"deployed": "prod"})


async def test_a_worker_serving_before_the_answer_resumes_the_run_once_it_comes(db: str, agent_dir: Path) -> None:
    env = {**os.environ, "INTERLOCK_URL": db}
    worker = await asyncio.create_subprocess_exec(
        *INTERLOCK,
        "worker",
        "deploy_agent:handlers",
        cwd=agent_dir,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        request_id = park_in_a_process(db, agent_dir, "run-2")
        async with interlock.connect(db) as broker:
            after = await broker.last_event_id()
            denied = cli(["reject", request_id, "--reason", "not on a Friday"], db, agent_dir)
            assert denied.returncode == 0, denied.stderr
            with anyio.fail_after(BOUND):
                async for event in broker.events(after=after, follow=True):
                    if event.type == "run_completed" and event.data.get("run") == "run-2":
                        break
            finished = await broker.get_run("run-2")
        assert finished.result == {"deployed": None, "reason": "not on a Friday"}
        assert deployed(agent_dir) == []  # denied: the tool never ran
    finally:
        worker.send_signal(signal.SIGTERM)
        with anyio.fail_after(BOUND):
            _, err = await worker.communicate()
    stderr = err.decode()
    assert worker.returncode == 0, stderr
    assert "resumed 1 run(s)" in stderr


async def test_ctrl_c_sigterm_or_a_crash_leave_a_runs_request_pending_only_ctrl_c_withdraws_a_plain_one(
    db: str, agent_dir: Path
) -> None:
    env = {**os.environ, "INTERLOCK_URL": db}
    outcomes = {}
    cases = [
        ("run-ctrl-c", signal.SIGINT),
        ("run-sigterm", signal.SIGTERM),
        ("run-crash", signal.SIGKILL),
        (None, signal.SIGINT),
        (None, signal.SIGTERM),
        (None, signal.SIGKILL),
    ]
    for run_id, signum in cases:
        args = [sys.executable, "deploy_agent.py", "wait", *([run_id] if run_id else [])]
        proc = await asyncio.create_subprocess_exec(
            *args,
            cwd=agent_dir,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            preexec_fn=_ctrl_c_as_in_a_terminal,
        )
        assert proc.stdout is not None
        with anyio.fail_after(BOUND):
            request_id = (await proc.stdout.readline()).decode().strip()  # printed once it waits
        proc.send_signal(signum)
        await ends(proc, agent_dir, f"{run_id or 'a plain wait'} after {signum.name}")
        async with interlock.connect(db) as broker:
            outcomes[run_id or "plain", signum.name] = (await broker.get(request_id)).status
    assert outcomes == {
        ("run-ctrl-c", "SIGINT"): Status.PENDING,
        ("run-sigterm", "SIGTERM"): Status.PENDING,
        ("run-crash", "SIGKILL"): Status.PENDING,
        ("plain", "SIGINT"): Status.CANCELLED,  # a plain wait cut by Ctrl-C withdraws its request
        ("plain", "SIGTERM"): Status.PENDING,  # the process ends without unwinding: nothing withdraws it
        ("plain", "SIGKILL"): Status.PENDING,
    }


def _ctrl_c_as_in_a_terminal() -> None:
    """Start the agent with Ctrl-C's default disposition, as a terminal starts a program. A
    suite run as a background job (`pytest ... &` in a script) ignores SIGINT, and its
    children would inherit that: Python then installs no KeyboardInterrupt handler at all."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def ends(proc: asyncio.subprocess.Process, cwd: Path, what: str) -> None:
    """Wait, bounded, for an agent's process to end; one that does not is aborted, and the
    test fails with where its threads were."""
    with anyio.move_on_after(BOUND):
        await proc.communicate()
        return
    proc.send_signal(signal.SIGABRT)  # its fault handler writes the threads' stacks, then it ends
    with anyio.fail_after(BOUND):
        await proc.wait()
    threads = await anyio.Path(cwd, "threads.txt").read_text()
    pytest.fail(f"the agent did not end ({what}); where its threads were:\n{threads}")


async def test_runs_are_listed_shown_and_cancelled_from_the_cli(db: str, agent_dir: Path) -> None:
    request_id = park_in_a_process(db, agent_dir, "run-4")
    listed = cli(["runs", "--json"], db, agent_dir)
    assert listed.returncode == 0, listed.stderr
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (row["id"], row["status"], row["waiting_on"]) == ("run-4", "waiting_for_approval", [request_id])
    assert "state" not in row

    shown = cli(["run", "show", "run-4"], db, agent_dir)
    assert shown.returncode == 0 and json.loads(shown.stdout)["agent"] == "deployer"
    assert f"interlock answer {request_id}" in shown.stderr

    cancelled = cli(["run", "cancel", "run-4"], db, agent_dir)
    assert cancelled.returncode == 0, cancelled.stderr
    again = cli(["run", "cancel", "run-4"], db, agent_dir)
    assert again.returncode == 3
    async with interlock.connect(db) as broker:
        assert (await broker.get(request_id)).status is Status.CANCELLED
        assert (await broker.get_run("run-4")).terminal_reason == "cancelled_by_user"
    missing = cli(["run", "show", "no-such-run"], db, agent_dir)
    assert missing.returncode != 0 and "no run with id" in missing.stderr
