"""A LangGraph agent behind interlock across real processes: the graph parks on an approval
and its process exits; a person answers from the CLI or the HTTP API; a new process
(`interlock worker`) resumes it exactly once, in both orders, with interlock and LangGraph's
own checkpointer both on SQLite or both on PostgreSQL. The tool runs once, with the
arguments the person approved. A denial reaches the graph, on SQLite (its store side is
checked in process on every backend: tests/integrations/test_langgraph.py)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import anyio
import httpx
import pytest

import interlock
from cli_support import invoke
from interlock import Status
from interlock.model import RunStatus

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

INTERLOCK = [sys.executable, "-m", "interlock"]
BOUND = 90

AGENT = '''
"""An existing LangGraph graph that mails the release notes, put behind interlock."""
import asyncio
import json
import os
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

import interlock
from interlock.integrations.langgraph import LangGraphAgent, approve

HERE = Path(__file__).parent
CHECKPOINTS = os.environ["CHECKPOINTS"]  # a SQLite file, or a PostgreSQL URL
SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "subject": {"type": "string"}},
    "required": ["to", "subject"],
    "additionalProperties": False,
}


class State(TypedDict, total=False):
    to: str
    sent: dict[str, Any]


def send_mail(state: State) -> State:
    arguments = approve("send_mail", {"to": state["to"], "subject": "release 1.4"}, schema=SCHEMA)
    with open(HERE / "sent.txt", "a") as sent:  # the side effect: it must happen once
        sent.write(json.dumps(arguments) + "\\n")
    return {"sent": arguments}


async def checkpointer() -> Any:
    if CHECKPOINTS.startswith("postgresql://"):
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg import AsyncConnection
        from psycopg.rows import dict_row

        conn = await AsyncConnection.connect(CHECKPOINTS, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        saver = AsyncPostgresSaver(conn)  # its tables are made once, when it is deployed
    else:
        from langgraph.checkpoint.sqlite import SqliteSaver

        saver = SqliteSaver(sqlite3.connect(CHECKPOINTS, check_same_thread=False))  # its tables: as above
    if os.environ.get("KILLED_AT_FIRST_CHECKPOINT"):  # this process dies as the graph writes one
        def killed(*args: Any, **kwargs: Any) -> Any:
            os.kill(os.getpid(), signal.SIGKILL)

        saver.put = saver.aput = killed
    return saver


async def agent(broker: interlock.Broker) -> LangGraphAgent:
    builder = StateGraph(State)
    builder.add_node("send_mail", send_mail)
    builder.add_edge(START, "send_mail")
    builder.add_edge("send_mail", END)
    graph = builder.compile(checkpointer=await checkpointer())
    return LangGraphAgent(broker, graph, name="mailer", to="alice")


async def handlers(broker: interlock.Broker) -> Any:
    return (await agent(broker)).handlers()


async def start(run_id: str | None, to: str, thread: str | None) -> None:
    async with interlock.connect() as broker:
        mailer = await agent(broker)
        if os.environ.get("START_TOGETHER"):  # ready: start once the line that says go comes
            print("ready", flush=True)
            await asyncio.to_thread(sys.stdin.readline)
        try:
            run = await mailer.start({"to": to}, run_id=run_id, thread_id=thread)
        except interlock.RunConflict as exc:
            print(json.dumps({"refused": exc.run_id, "status": exc.status, "error": str(exc)}))
            return
        print(json.dumps({"run": run.id, "status": run.status.value, "waiting_on": list(run.waiting_on)}))


if __name__ == "__main__":  # mail_agent.py RUN_ID|- [TO [THREAD]]
    args = [*sys.argv[1:], "ops@example.com", None][:3]
    asyncio.run(start(None if args[0] == "-" else args[0], args[1], args[2]))
'''

EDITED = {"to": "ops@example.com", "subject": "release 1.4.1"}


@pytest.fixture(params=["sqlite", "postgresql", "http"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """interlock's store URL and LangGraph's checkpoints, on the same kind of database; or
    interlock reached over http:// (a server on its own SQLite file)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'interlock.db'}", str(tmp_path / "checkpoints.db")
        return
    if request.param == "http":
        serve: Callable[..., AbstractContextManager[str]] = request.getfixturevalue("serve")
        with serve(f"sqlite:///{tmp_path / 'server.db'}", auth=False) as base:
            yield base, str(tmp_path / "checkpoints.db")
        return
    databases: Callable[[], AbstractContextManager[str]] = request.getfixturevalue("pg_databases")
    with databases() as url, databases() as checkpoints:
        yield url, checkpoints


@pytest.fixture
def agent_dir(tmp_path: Path, stores: tuple[str, str]) -> Path:
    """The agent's folder, and its checkpointer's tables made once, before any agent process
    runs (as a deployment would: two processes making them at once race, on PostgreSQL and
    on a new SQLite file, which both would switch to WAL; LangGraph's own setup, from this
    process)."""
    folder = tmp_path / "agent"
    folder.mkdir()
    (folder / "mail_agent.py").write_text(textwrap.dedent(AGENT))
    if stores[1].startswith("postgresql://"):
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(stores[1]) as saver:
            saver.setup()
    else:
        from langgraph.checkpoint.sqlite import SqliteSaver

        with contextlib.closing(sqlite3.connect(stores[1])) as db:
            SqliteSaver(db).setup()
    return folder


def environment(stores: tuple[str, str], **more: str) -> dict[str, str]:
    return {**os.environ, "INTERLOCK_URL": stores[0], "CHECKPOINTS": stores[1], **more}


def run(args: list[str], stores: tuple[str, str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, env=environment(stores, **env), cwd=cwd, timeout=BOUND)


def cli(args: list[str], stores: tuple[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`interlock ARGS` in process (cli_support): the answer, not its process, is the point."""
    return invoke(*args, env=environment(stores), cwd=cwd)


def start_in_a_process(stores: tuple[str, str], agent_dir: Path, run_id: str, *more: str) -> dict[str, object]:
    """`mail_agent.py RUN_ID|- [TO [THREAD]]`: what its start returned."""
    done = run([sys.executable, "mail_agent.py", run_id, *more], stores, agent_dir)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def sent(agent_dir: Path) -> list[dict[str, str]]:
    path = agent_dir / "sent.txt"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_answered_from_the_cli_while_no_process_runs_then_resumed_once(
    stores: tuple[str, str], agent_dir: Path
) -> None:
    parked = start_in_a_process(stores, agent_dir, "run-1")
    assert parked["status"] == "waiting_for_approval"
    (request_id,) = parked["waiting_on"]  # type: ignore[misc]
    assert start_in_a_process(stores, agent_dir, "run-1") == parked  # restarted: no second approval
    assert sent(agent_dir) == []

    answer = json.dumps({"approve": True, "arguments": EDITED})
    answered = cli(["answer", request_id, "--json", answer, "--by", "alice"], stores, agent_dir)
    assert answered.returncode == 0, answered.stderr

    worked = run([*INTERLOCK, "worker", "mail_agent:handlers", "--once"], stores, agent_dir)
    assert worked.returncode == 0, worked.stderr
    assert "resumed 1 run(s)" in worked.stderr
    again = run([*INTERLOCK, "worker", "mail_agent:handlers", "--once"], stores, agent_dir)
    assert "resumed 0 run(s)" in again.stderr
    assert sent(agent_dir) == [EDITED]

    async with interlock.connect(stores[0]) as broker:
        finished = await broker.get_run("run-1")
        approvals = (await broker.list(kind="approval")).items
    assert finished.status is RunStatus.COMPLETED
    assert finished.result["sent"] == EDITED
    assert [a.id for a in approvals] == [request_id]


async def test_a_worker_serving_before_the_answer_resumes_when_the_api_approves(
    stores: tuple[str, str], agent_dir: Path, serve: Callable[..., AbstractContextManager[str]]
) -> None:
    serve = functools.partial(serve, auth=False)
    worker = await asyncio.create_subprocess_exec(
        *INTERLOCK,
        "worker",
        "mail_agent:handlers",
        cwd=agent_dir,
        env=environment(stores),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        parked = start_in_a_process(stores, agent_dir, "run-2")
        (request_id,) = parked["waiting_on"]  # type: ignore[misc]
        async with interlock.connect(stores[0]) as broker:
            after = await broker.last_event_id()
            with contextlib.nullcontext(stores[0]) if stores[0].startswith("http") else serve(stores[0]) as base:
                async with httpx.AsyncClient(base_url=base) as client:
                    response = await client.post(
                        f"/api/v1/requests/{request_id}/answer", json={"answers": {"approve": True}, "by": "alice"}
                    )
                assert response.status_code == 200, response.text
                with anyio.fail_after(BOUND):
                    async for event in broker.events(after=after, follow=True):
                        if event.type in ("run_completed", "run_failed") and event.data.get("run") == "run-2":
                            break
            finished = await broker.get_run("run-2")
        assert finished.status is RunStatus.COMPLETED, finished.error
        assert sent(agent_dir) == [{"to": "ops@example.com", "subject": "release 1.4"}]
        assert finished.result["sent"] == sent(agent_dir)[0]
    finally:
        worker.send_signal(signal.SIGTERM)
        with anyio.fail_after(BOUND):
            _, err = await worker.communicate()
    assert worker.returncode == 0, err.decode()
    assert "resumed 1 run(s)" in err.decode()


@pytest.mark.parametrize("stores", ["sqlite"], indirect=True)
async def test_a_denial_reaches_the_graph_and_the_tool_never_runs(stores: tuple[str, str], agent_dir: Path) -> None:
    parked = start_in_a_process(stores, agent_dir, "run-3")
    (request_id,) = parked["waiting_on"]  # type: ignore[misc]
    denied = cli(["reject", request_id, "--reason", "not on a Friday"], stores, agent_dir)
    assert denied.returncode == 0, denied.stderr
    worked = run([*INTERLOCK, "worker", "mail_agent:handlers", "--once"], stores, agent_dir)
    assert worked.returncode == 0, worked.stderr
    async with interlock.connect(stores[0]) as broker:
        finished = await broker.get_run("run-3")
        request = await broker.get(request_id)
    assert request.status is Status.REJECTED
    assert finished.status is RunStatus.FAILED  # approve() raised ApprovalDenied in the node
    assert "not on a Friday" in (finished.error or "")
    assert sent(agent_dir) == []


@pytest.mark.parametrize("stores", ["sqlite", "postgresql"], indirect=True)
async def test_a_turn_killed_before_its_first_checkpoint_asks_its_own_call_when_started_again(
    stores: tuple[str, str], agent_dir: Path
) -> None:
    """The thread's first run is cancelled at its approval; its next turn's process is killed
    once its run is recorded, as LangGraph writes the turn's first checkpoint. Started again,
    the turn took the thread's interrupt, the cancelled run's, as its own: it asked for the
    cancelled mail, and a yes sent it."""
    first = start_in_a_process(stores, agent_dir, "-", "ops@example.com", "t-1")
    assert first["status"] == "waiting_for_approval"
    async with interlock.connect(stores[0]) as broker:
        assert await broker.cancel_run(str(first["run"]), by="alice")
    turn = [sys.executable, "mail_agent.py", "-", "team@example.com", "t-1"]
    killed = run(turn, stores, agent_dir, KILLED_AT_FIRST_CHECKPOINT="1")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    async with interlock.connect(stores[0]) as broker:
        [recorded] = [r for r in (await broker.list_runs(agent="mailer")).items if r.id != first["run"]]
    assert recorded.status is RunStatus.RUNNING

    again = start_in_a_process(stores, agent_dir, "-", "team@example.com", "t-1")
    assert (again["run"], again["status"]) == (recorded.id, "waiting_for_approval")
    (request_id,) = again["waiting_on"]  # type: ignore[misc]
    async with interlock.connect(stores[0]) as broker:
        asked = await broker.get(str(request_id))
    assert asked.context["arguments"] == {"to": "team@example.com", "subject": "release 1.4"}
    answered = cli(["answer", str(request_id), "yes", "--by", "alice"], stores, agent_dir)
    assert answered.returncode == 0, answered.stderr
    worked = run([*INTERLOCK, "worker", "mail_agent:handlers", "--once"], stores, agent_dir)
    assert worked.returncode == 0, worked.stderr
    assert sent(agent_dir) == [{"to": "team@example.com", "subject": "release 1.4"}]


def checkpoint_runs(stores: tuple[str, str], thread: str) -> set[object]:
    """The interlock runs that wrote the thread's checkpoints (each one's `interlock_run`)."""
    config = {"configurable": {"thread_id": thread}}
    if stores[1].startswith("postgresql://"):
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(stores[1]) as saver:
            return {c.metadata.get("interlock_run") for c in saver.list(config)}
    from langgraph.checkpoint.sqlite import SqliteSaver

    with contextlib.closing(sqlite3.connect(stores[1])) as db:
        return {c.metadata.get("interlock_run") for c in SqliteSaver(db).list(config)}


async def test_processes_starting_new_runs_on_one_thread_at_once_make_one_run_there(
    stores: tuple[str, str], agent_dir: Path
) -> None:
    """Three processes start a run of their own on one thread at the same moment. Each made
    its run, and the three graphs wrote their checkpoints over each other's on the thread:
    now one run is made, the other starts are refused naming it, and only its graph ran."""
    tos = [f"team-{i}@example.com" for i in range(3)]
    starting = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "mail_agent.py",
            f"run-{i}",
            to,
            "t-1",
            cwd=agent_dir,
            env=environment(stores, START_TOGETHER="1"),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for i, to in enumerate(tos)
    ]
    try:
        with anyio.fail_after(BOUND):
            for process in starting:
                assert process.stdout is not None
                ready = await process.stdout.readline()
                assert ready == b"ready\n", ready + (await process.communicate())[1]
            for process in starting:  # all at once
                assert process.stdin is not None
                process.stdin.write(b"go\n")
                await process.stdin.drain()
            done = [await process.communicate() for process in starting]
    finally:
        for process in starting:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert all(process.returncode == 0 for process in starting), [err.decode() for _, err in done]
    said = [json.loads(out.decode().strip().splitlines()[-1]) for out, _ in done]
    [made] = [s for s in said if "run" in s]
    refused = [s for s in said if "refused" in s]
    assert made["status"] == "waiting_for_approval"
    assert len(refused) == 2 and all(r["refused"] == made["run"] for r in refused), refused
    assert all(r["status"] in ("running", "waiting_for_approval") and "'t-1'" in r["error"] for r in refused)

    async with interlock.connect(stores[0]) as broker:
        assert [r.id for r in (await broker.list_runs(agent="mailer")).items] == [made["run"]]
        assert [a.id for a in (await broker.list(kind="approval")).items] == made["waiting_on"]
    assert checkpoint_runs(stores, "t-1") == {made["run"]}  # only its graph wrote on the thread
    (request_id,) = made["waiting_on"]
    answered = cli(["answer", str(request_id), "yes", "--by", "alice"], stores, agent_dir)
    assert answered.returncode == 0, answered.stderr
    worked = run([*INTERLOCK, "worker", "mail_agent:handlers", "--once"], stores, agent_dir)
    assert worked.returncode == 0, worked.stderr
    assert sent(agent_dir) == [{"to": tos[int(str(made["run"]).removeprefix("run-"))], "subject": "release 1.4"}]
