"""`interlock runs`, `interlock run ...` and `interlock worker` as a person and an agent use
them against a real server with auth: a page at a time or all of them, with `--token` as
every other command takes it, and `run show` saying how to answer each pending request
exactly as `interlock show` does."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

import interlock
from cli_support import invoke
from interlock import Request, Status
from interlock.agent import ApprovalGate, ToolCall

pytestmark = pytest.mark.anyio

INTERLOCK = [sys.executable, "-m", "interlock"]
SCHEMA = {
    "type": "object",
    "properties": {"env": {"enum": ["staging", "prod"]}, "replicas": {"type": "integer", "maximum": 10}},
    "required": ["env", "replicas"],
    "additionalProperties": False,
}
HANDLERS = """
def handlers(broker):
    async def resume(run, requests):
        return {"approved": [r.response.answers["approve"] for r in requests.values()]}

    return {"scaler": resume}
"""


def environment(url: str | None) -> dict[str, str]:
    """Neither INTERLOCK_URL nor INTERLOCK_TOKEN set: only what the options say."""
    env = {k: v for k, v in os.environ.items() if k not in ("INTERLOCK_URL", "INTERLOCK_TOKEN")}
    if url is not None:
        env["INTERLOCK_URL"] = url
    return env


def cli(*args: str, cwd: Path, url: str | None = None) -> subprocess.CompletedProcess[str]:
    """The command, run in process (cli_support)."""
    return invoke(*args, env=environment(url), cwd=cwd)


def process(*args: str, cwd: Path, url: str | None = None) -> subprocess.CompletedProcess[str]:
    """The command in a process of its own (the worker imports the handlers' module from cwd)."""
    return subprocess.run(
        [*INTERLOCK, *args], capture_output=True, text=True, env=environment(url), cwd=cwd, timeout=60
    )


def how_to_lines(stderr: str) -> list[str]:
    """The lines of `interlock show` that say how to answer."""
    return [line.strip() for line in stderr.splitlines() if "interlock answer" in line]


@pytest.fixture
def server(tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]) -> Iterator[tuple[str, str, str]]:
    """A server with auth on a SQLite file: its URL, a person's token and an agent's."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    alice = cli("token", "create", "alice", "--human", "--db", db, cwd=tmp_path)
    agent = cli("token", "create", "scaler", "--agent", "--owner", "alice", "--db", db, cwd=tmp_path)
    assert alice.returncode == 0 and agent.returncode == 0, alice.stderr + agent.stderr
    with serve(db) as url:
        yield url, alice.stdout.strip(), agent.stdout.strip()


async def park_gated_call(url: str, token: str, run_id: str) -> Request:
    """A run of the agent parked on its gate's approval of a call whose tool has an
    argument schema (so the approval has two asks: approve, and an optional edit)."""
    async with interlock.connect(url, token=token) as broker:
        await broker.start_run("scaler", run_id=run_id)
        gate = ApprovalGate(broker, policies={"scale": "always"}, to="alice")
        call = ToolCall("scale", {"env": "prod", "replicas": 3}, id=f"{run_id}-call", agent="scaler", run=run_id)
        request = await gate.begin(call, schema=SCHEMA)
        assert isinstance(request, Request) and [a.id for a in request.asks] == ["approve", "arguments"]
        await broker.park(run_id, state={"call": call.id}, waiting_on=[request.id])
        return request


async def test_run_show_says_how_to_answer_a_gate_approval_exactly_as_show_does(
    server: tuple[str, str, str], tmp_path: Path
) -> None:
    url, alice, agent = server
    request = await park_gated_call(url, agent, "run-gated")
    shown = cli("show", request.id, "--server", url, "--token", alice, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    expected = how_to_lines(shown.stderr)
    assert f"approve: interlock answer {request.id} yes --server {url}" in expected  # the server it was given
    assert any(line.startswith("edit arguments and approve:") for line in expected)

    run = cli("run", "show", "scaler:run-gated", "--server", url, "--token", alice, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["status"] == "waiting_for_approval"
    assert how_to_lines(run.stderr) == expected

    answered = cli("answer", request.id, "yes", "--server", url, "--token", alice, cwd=tmp_path)
    assert answered.returncode == 0, answered.stderr
    settled = cli("run", "show", "scaler:run-gated", "--server", url, "--token", alice, cwd=tmp_path)
    assert settled.returncode == 0 and how_to_lines(settled.stderr) == []  # nothing left to answer


async def test_runs_lists_a_page_at_a_time_with_the_next_cursor_or_every_page(
    server: tuple[str, str, str], tmp_path: Path
) -> None:
    url, alice, agent = server
    for n in range(5):
        await park_gated_call(url, agent, f"run-{n}")

    def listed(*options: str) -> tuple[list[str], str]:
        done = cli("runs", "--json", "--server", url, "--token", alice, *options, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return [json.loads(line)["id"] for line in done.stdout.splitlines()], done.stderr

    def cursor(said: str) -> str:
        found = re.search(r"--after (\S+)", said)
        assert found is not None, said
        return found[1]

    first, said = listed("--limit", "2")
    # the agent's own ids, "run-N", kept as its: "scaler:run-N"
    assert first == ["scaler:run-4", "scaler:run-3"]  # newest first
    after_first = cursor(said)
    assert after_first.endswith(".scaler:run-3")  # when it was made, then its id
    second, said = listed("--limit", "2", "--after", after_first)
    assert second == ["scaler:run-2", "scaler:run-1"]
    last, said = listed("--limit", "2", "--after", cursor(said))
    assert last == ["scaler:run-0"] and "--after" not in said
    every, said = listed("--limit", "2", "--all")
    assert every == [f"scaler:run-{n}" for n in reversed(range(5))] and "--after" not in said
    rest, _ = listed("--limit", "2", "--all", "--after", after_first)
    assert rest == ["scaler:run-2", "scaler:run-1", "scaler:run-0"]
    mistyped = cli("runs", "--server", url, "--token", alice, "--after", "run-3", cwd=tmp_path)
    assert mistyped.returncode == 4 and "is not one a page of runs gave" in mistyped.stderr


@pytest.mark.slow
async def test_run_commands_and_the_worker_take_a_token_as_every_other_command_does(
    server: tuple[str, str, str], tmp_path: Path
) -> None:
    url, alice, agent = server
    cancel_me = await park_gated_call(url, agent, "run-cancel")
    resume_me = await park_gated_call(url, agent, "run-resume")

    for command in (["runs"], ["run", "show", "scaler:run-cancel"], ["run", "cancel", "scaler:run-cancel"]):
        refused = cli(*command, "--server", url, cwd=tmp_path)
        assert refused.returncode == 4 and "no token for the server" in refused.stderr, refused.stderr
    shown = cli("run", "show", "scaler:run-cancel", "--state", "--server", url, "--token", alice, cwd=tmp_path)
    assert json.loads(shown.stdout)["state"] is None  # a person's client is not shown the agent's state, and is told
    assert "shows it only to the agent that started it" in " ".join(shown.stderr.split()), shown.stderr
    cancelled = cli("run", "cancel", "scaler:run-cancel", "--server", url, "--token", alice, cwd=tmp_path)
    assert cancelled.returncode == 0, cancelled.stderr
    again = cli("run", "cancel", "scaler:run-cancel", "--token", alice, cwd=tmp_path, url=url)  # the URL from the env
    assert again.returncode == 3

    (tmp_path / "scaler_worker.py").write_text(textwrap.dedent(HANDLERS))
    answered = cli("answer", resume_me.id, "yes", "--server", url, "--token", alice, cwd=tmp_path)
    assert answered.returncode == 0, answered.stderr
    worked = process("worker", "scaler_worker:handlers", "--once", "--server", url, "--token", agent, cwd=tmp_path)
    assert worked.returncode == 0 and "resumed 1 run(s)" in worked.stderr, worked.stderr

    async with interlock.connect(url, token=alice) as broker:
        assert (await broker.get(cancel_me.id)).status is Status.CANCELLED
        assert (await broker.get_run("scaler:run-cancel")).terminal_reason == "cancelled_by_user"
        resumed = await broker.get_run("scaler:run-resume")
        assert (resumed.status.value, resumed.result) == ("completed", {"approved": [True]})


async def parked_on_alice(broker: interlock.Broker, run_id: str) -> str:
    """A run parked on one question to alice; the question's id."""
    run = await broker.start_run("scaler", run_id=run_id)
    asked = await broker.create(interlock.Confirm("Scale?"), to="alice", run=run.id)
    await broker.park(run.id, state={}, waiting_on=[asked.id])
    return asked.id


async def test_runs_shows_when_a_pause_is_given_up_only_while_it_waits_on_a_person(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with interlock.connect(url) as broker:
        await parked_on_alice(broker, "waiting")
        answered = await parked_on_alice(broker, "ready")
        assert await broker.resolve(answered, True, by="alice")
    listed = cli("runs", cwd=tmp_path, url=url)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert rows["waiting"][-2:] == ["in", "14d"]  # given up in two weeks (to the nearest day)
    assert "ready" in rows["ready"] and "in" not in rows["ready"][-3:]  # its last column is empty
    none = cli("runs", "--agent", "nobody", cwd=tmp_path, url=url)  # no header over nothing
    assert (none.returncode, none.stdout, none.stderr.strip()) == (0, "", "no runs")
    every = cli("runs", "--status", "all", cwd=tmp_path, url=url)  # as `inbox --status all`
    assert every.returncode == 0, every.stderr
    assert without_ages(every.stdout) == without_ages(listed.stdout)  # a second may pass between the two
    mistyped = cli("runs", "--status", "waiting", cwd=tmp_path, url=url)
    assert mistyped.returncode == 4 and mistyped.stderr.rstrip().endswith("failed, cancelled or all"), mistyped.stderr


async def test_run_cancel_withdraws_its_requests_as_the_cli_and_you(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with interlock.connect(url) as broker:
        asked = await parked_on_alice(broker, "run-1")
    env = {**environment(url), "INTERLOCK_USER": "ops-lead"}
    done = invoke("run", "cancel", "run-1", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    async with interlock.connect(url) as broker:
        withdrawn = await broker.get(asked)
    assert withdrawn.status is Status.CANCELLED and withdrawn.response is not None
    assert (withdrawn.response.by, withdrawn.response.via) == ("ops-lead", "cli")


def test_a_worker_target_that_is_no_factory_of_the_broker_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "wrong_worker.py").write_text("def handlers():\n    return {}\n\nnot_callable = 3\n")
    db = f"sqlite:///{tmp_path / 'w.db'}"
    for target, said in (
        ("wrong_worker:handlers", "must take one argument, the broker"),
        ("wrong_worker:not_callable", "has no callable 'not_callable'"),
        ("no_such_module:handlers", "cannot import no_such_module"),
        ("wrong_worker", "expected module:factory"),
        # the file's name, as a shell completes it: the module is named without .py
        ("wrong_worker.py:handlers", "name the module without .py: wrong_worker:handlers"),
    ):
        refused = cli("worker", target, "--once", "--db", db, cwd=tmp_path)
        assert refused.returncode == 4 and said in " ".join(refused.stderr.split()), (target, refused.stderr)


def test_a_worker_on_a_store_that_is_not_there_says_it_made_an_empty_one(tmp_path: Path) -> None:
    # `interlock worker mail_agent:handlers` without --db, beside agents parking in
    # frameworks.db, made ./interlock.db and waited on it for good, saying nothing.
    (tmp_path / "my_agents.py").write_text("def handlers(broker):\n    return {'mailer': None}\n")
    done = cli("worker", "my_agents:handlers", "--once", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert f"note: there was no store at {tmp_path / 'interlock.db'}: made an empty one" in said
    assert "name the store your agents use with --db" in said
    again = cli("worker", "my_agents:handlers", "--once", cwd=tmp_path)  # there now: nothing to say
    assert again.returncode == 0 and "note:" not in again.stderr


def test_a_worker_run_in_process_leaves_interlock_s_logging_as_it_found_it(tmp_path: Path) -> None:
    # `worker` logs interlock's records at INFO to its stderr while it runs. Run in the
    # process of other code (a program calling the CLI, a test), it left its handler on a
    # stream closed since ("I/O operation on closed file" on every later record) and the
    # level at INFO, which let every later INFO record of interlock's through.
    logger = logging.getLogger("interlock")
    handlers, level = list(logger.handlers), logger.level
    (tmp_path / "my_agents.py").write_text("def handlers(broker):\n    return {'mailer': None}\n")
    done = cli("worker", "my_agents:handlers", "--once", "--db", f"sqlite:///{tmp_path / 'w.db'}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (logger.handlers, logger.level) == (handlers, level)


async def test_a_worker_serving_another_name_than_the_ready_runs_agent_says_so(tmp_path: Path) -> None:
    # A handler registered as "Deployer" for runs of "deployer": the worker waited, or
    # resumed 0 run(s), and nothing said why.
    db = f"sqlite:///{tmp_path / 'w.db'}"
    async with interlock.connect(db) as broker:
        run = await broker.start_run("deployer")
        request = await broker.create(interlock.Confirm("Deploy?"), to="alice", run=run.id)
        await broker.park(run.id, state={}, waiting_on=[request.id])
        await broker.resolve(request.id, True, by="alice")
    (tmp_path / "named.py").write_text("def handlers(broker):\n    return {'Deployer': None}\n")
    done = cli("worker", "named:handlers", "--once", "--db", db, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert "note: runs of deployer are ready to resume, and this worker serves Deployer" in said, said


OWN_WORKER = """
from interlock.runs import Worker

made = []


def worker(broker):
    async def resume(run, requests):
        serving = made[-1]
        return {"worker": run.worker, "concurrency": serving.concurrency, "lease": serving.lease}

    made.append(Worker(broker, {"scaler": resume}, name="made-by-factory", concurrency=2, lease=90))
    return made[-1]
"""


async def test_a_worker_a_factory_makes_takes_the_options_given_on_the_command_line(tmp_path: Path) -> None:
    # `interlock worker mod:factory --concurrency 4`, the factory returning a Worker of its
    # own, resumed one run at a time: --name, --lease and --concurrency were dropped silently.
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with interlock.connect(url) as broker:
        assert await broker.resolve(await parked_on_alice(broker, "as-made"), True, by="alice")
    (tmp_path / "own_worker.py").write_text(textwrap.dedent(OWN_WORKER))
    mine = ["--db", url, "--once"]
    as_made = cli("worker", "own_worker:worker", *mine, cwd=tmp_path)  # no options: the factory's worker as made
    assert as_made.returncode == 0 and "resumed 1 run(s)" in as_made.stderr, as_made.stderr
    options = ["--name", "night-shift", "--concurrency", "4", "--lease", "45s"]
    async with interlock.connect(url) as broker:
        assert (await broker.get_run("as-made")).result == {"worker": "made-by-factory", "concurrency": 2, "lease": 90}
        assert await broker.resolve(await parked_on_alice(broker, "as-told"), True, by="alice")
        told = cli("worker", "own_worker:worker", *mine, *options, cwd=tmp_path)
        assert told.returncode == 0 and "resumed 1 run(s)" in told.stderr, told.stderr
        assert (await broker.get_run("as-told")).result == {"worker": "night-shift", "concurrency": 4, "lease": 45}


LEAKY_HANDLERS = """
def handlers(broker):
    async def resume(run, requests):
        raise ConnectionError(
            "cannot reach postgresql://app:hunter2@db.internal/app?sslpassword=pw-2 as il_0123abcd_k3yK3yK3yK3yK3yK3y"
        )

    return {"scaler": resume}
"""


async def test_a_worker_logs_a_failed_run_by_its_id_with_the_credentials_in_its_error_masked(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with interlock.connect(url) as broker:
        answered = await parked_on_alice(broker, "run-1")
        assert await broker.resolve(answered, True, by="alice")
    (tmp_path / "leaky_worker.py").write_text(textwrap.dedent(LEAKY_HANDLERS))
    worked = process("worker", "leaky_worker:handlers", "--once", cwd=tmp_path, url=url)
    assert worked.returncode == 0 and "resuming run run-1 of agent scaler failed" in worked.stderr, worked.stderr
    # The traceback is there, as `interlock serve` logs one: with what it quotes masked.
    assert "postgresql://app:***@db.internal/app?sslpassword=***" in worked.stderr, worked.stderr
    assert "il_0123abcd_***" in worked.stderr, worked.stderr
    for secret in ("hunter2", "pw-2", "k3yK3y"):
        assert secret not in worked.stderr, worked.stderr


def without_ages(table: str) -> list[list[str]]:
    """A table's rows, word by word, without their ages ("1s ago"), which move with the clock."""
    return [re.sub(r"\b\d+[smhd] ago\b", "", line).split() for line in table.splitlines()]


@pytest.mark.parametrize("once", [[], ["--once", "--concurrency", "2"]])
def test_a_worker_the_server_refuses_says_so_and_ends_without_a_traceback(
    server: tuple[str, str, str], tmp_path: Path, once: list[str]
) -> None:
    """A person's token (or one revoked meanwhile) may not claim runs: the refusal ended a
    serving `interlock worker` with a traceback of the task group its loops run in."""
    url, alice, _ = server
    (tmp_path / "scaler_worker.py").write_text(textwrap.dedent(HANDLERS))
    command = cli if once else process  # (serving, it sets its signal handlers: a process of its own)
    refused = command("worker", "scaler_worker:handlers", *once, "--server", url, "--token", alice, cwd=tmp_path)
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 4 and "refused: only an agent claims runs" in said, refused.stderr
