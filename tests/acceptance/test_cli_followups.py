"""Follow-up messages from the CLI (run in process: cli_support): `interlock run send`, `run followups` and
`run withdraw` against a run parked by another process's broker, on SQLite."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import interlock
from cli_support import invoke
from interlock import Confirm, Status, Text

pytestmark = pytest.mark.anyio

BOUND = 60


def cli(*args: str, db: str) -> subprocess.CompletedProcess[str]:
    return invoke(*args, env={**os.environ, "INTERLOCK_URL": db, "USER": "alice"})


async def park(db: str, run_id: str, *, approval: bool) -> str:
    async with interlock.connect(db) as broker:
        run = await broker.start_run("deployer", run_id=run_id)
        if approval:
            request = await broker.create(Confirm("Deploy?"), kind="approval", to="alice", run=run.id)
        else:
            request = await broker.create(Text("Which region?"), to="alice", run=run.id)
        await broker.park(run.id, state=None, waiting_on=[request.id])
        return request.id


async def test_a_message_is_held_listed_and_withdrawn_from_the_cli(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    await park(db, "run-q", approval=False)
    sent = cli("run", "send", "run-q", "approve, and use eu-west", db=db)
    assert sent.returncode == 0, sent.stderr
    out = json.loads(sent.stdout)
    assert out["outcome"] == "queued" and out["run"] == "run-q"

    listed = cli("run", "followups", "run-q", "--json", db=db)
    assert listed.returncode == 0, listed.stderr
    (held,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert held["id"] == out["followup_id"] and held["text"] == "approve, and use eu-west" and held["by"] == "alice"

    withdrawn = cli("run", "withdraw", "run-q", held["id"], db=db)
    assert withdrawn.returncode == 0, withdrawn.stderr
    again = cli("run", "withdraw", "run-q", held["id"], db=db)
    assert again.returncode == 1 and "no follow-up" in again.stderr
    empty = cli("run", "followups", "run-q", db=db)
    assert empty.returncode == 0 and empty.stdout == "" and "no messages held" in empty.stderr


async def test_approve_from_the_cli_decides_the_approval_and_an_ended_run_refuses(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    request_id = await park(db, "run-a", approval=True)
    sent = cli("run", "send", "run-a", "approve", db=db)
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout) == {"run": "run-a", "outcome": "resolved", "resolved_interaction_id": request_id}
    async with interlock.connect(db) as broker:
        assert (await broker.get(request_id)).status is Status.ANSWERED
        assert await broker.cancel_run("run-a")
    late = cli("run", "send", "run-a", "hello?", db=db)
    assert late.returncode == 3 and "has ended" in late.stderr
    missing = cli("run", "send", "no-such-run", "hello", db=db)
    assert missing.returncode == 1 and "no run with id" in missing.stderr


async def park_on_a_gate_approval(db: str, run_id: str, to: str | None) -> str:
    from interlock.approvals import mark

    async with interlock.connect(db) as broker:
        run = await broker.start_run("deployer", run_id=run_id)
        asked = broker.prepare(
            Confirm("Allow deploy?", id="approve"), kind="approval", to=to, run=run.id, context={"tool": "deploy"}
        )
        request, _ = await broker.submit(mark(asked))
        await broker.park(run.id, state=None, waiting_on=[request.id])
        return request.id


async def test_a_message_decides_a_gate_approval_as_answer_would(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'gate.db'}"
    env = {**os.environ, "INTERLOCK_URL": db, "INTERLOCK_USER": "bob"}
    alices = await park_on_a_gate_approval(db, "run-a", "alice")
    held = invoke("run", "send", "run-a", "approve", env=env)  # bob's yes would not count: held
    assert held.returncode == 0 and json.loads(held.stdout)["outcome"] == "queued", held.stderr
    denied = invoke("run", "send", "run-a", "deny", env=env)  # a no stops the call whoever says it
    assert json.loads(denied.stdout).get("resolved_interaction_id") == alices, denied.stdout
    nobodys = await park_on_a_gate_approval(db, "run-b", None)
    approved = invoke("run", "send", "run-b", "approve", env=env)  # to no one: anyone's yes
    assert json.loads(approved.stdout).get("resolved_interaction_id") == nobodys, approved.stdout
    async with interlock.connect(db) as broker:
        statuses = [(await broker.get(i)).status for i in (alices, nobodys)]
    assert statuses == [Status.REJECTED, Status.ANSWERED]


async def test_a_message_decides_any_approval_only_for_whom_it_is_to(tmp_path: Path) -> None:
    """An approval a run waits on that no gate made (a plain `kind="approval"`): bob's
    `approve` to alice's is held, as through a server; alice's decides it."""
    db = f"sqlite:///{tmp_path / 'plain.db'}"
    async with interlock.connect(db) as broker:
        run = await broker.start_run("deployer", run_id="run-p")
        request = await broker.create(Confirm("Ship it?"), kind="approval", to="alice", run=run.id)
        await broker.park(run.id, state=None, waiting_on=[request.id])
    bobs = invoke("run", "send", "run-p", "APPROVE", "--by", "bob", env={**os.environ, "INTERLOCK_URL": db})
    assert bobs.returncode == 0 and json.loads(bobs.stdout)["outcome"] == "queued", bobs.stdout
    alices = invoke("run", "send", "run-p", "approve", "--by", "alice", env={**os.environ, "INTERLOCK_URL": db})
    assert json.loads(alices.stdout).get("resolved_interaction_id") == request.id, alices.stdout
    async with interlock.connect(db) as broker:
        answered = await broker.get(request.id)
    assert (answered.status, answered.response.by if answered.response else None) == (Status.ANSWERED, "alice")
