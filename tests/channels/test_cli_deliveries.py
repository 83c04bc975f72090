"""`interlock deliver` (the delivery loop alone) and `interlock deliveries` (list, retry),
run in process (cli_support; `deliver`, which runs until stopped, in a subprocess) against
a SQLite file and a real webhook receiver."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import interlock
from cli_support import invoke
from interlock import Confirm
from interlock.broker import LocalBroker

from .receiver import eventually, receiver

pytestmark = pytest.mark.anyio
INTERLOCK = [sys.executable, "-m", "interlock"]


def run(*args: str, db: str) -> subprocess.CompletedProcess[str]:
    return invoke(*args, env={**os.environ, "INTERLOCK_URL": db})


def write_routing(path: Path, url: str) -> Path:
    path.write_text(
        f'max_attempts = 1\n[channels.hook]\ntype = "webhook"\nurl = "{url}"\n[recipients.alice]\nchannels = ["hook"]\n'
    )
    return path


@pytest.mark.slow
async def test_a_dead_letter_is_listed_and_retried_from_the_command_line(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    async with receiver() as hook:
        hook.statuses = [500]
        routing = write_routing(tmp_path / "routing.toml", hook.url)
        async with interlock.connect(db) as broker:
            assert isinstance(broker, LocalBroker)
            request = await broker.create(Confirm("Ship it?"), to="alice", requester="bot")
            proc = await asyncio.create_subprocess_exec(
                *INTERLOCK,
                "deliver",
                "--routing",
                str(routing),
                "--db",
                db,
                "--poll-interval",
                "0.1",
                stderr=asyncio.subprocess.PIPE,
            )
            try:
                await hook.until(1, timeout=30)

                async def dead_letter() -> bool:
                    return bool(await broker.store.list_deliveries(status="dead"))

                await eventually(dead_letter, timeout=30)
            finally:
                proc.terminate()
                await proc.wait()
    listed = run("deliveries", "list", "--status", "dead", "--json", db=db)
    assert listed.returncode == 0, listed.stderr
    [dead] = [json.loads(line) for line in listed.stdout.splitlines()]  # one object per line, as every --json
    assert dead["request_id"] == request.id and dead["last_error"] == "HTTP 500 from the receiver"
    table = run("deliveries", "list", "--request", request.id, db=db)
    assert "dead" in table.stdout and "hook" in table.stdout
    retried = run("deliveries", "retry", dead["id"], db=db)
    assert retried.returncode == 0 and "will be sent again" in retried.stderr
    assert json.loads(run("deliveries", "list", "--json", db=db).stdout.splitlines()[0])["status"] == "pending"
    again = run("deliveries", "retry", dead["id"], db=db)
    assert again.returncode == 1 and "no dead letter" in again.stderr


def test_a_bad_routing_file_is_refused_naming_the_field(tmp_path: Path) -> None:
    routing = tmp_path / "routing.toml"
    routing.write_text('[recipients.alice]\nchannels = ["sms"]\n')
    result = run("deliver", "--routing", str(routing), db=f"sqlite:///{tmp_path / 'x.db'}")
    assert result.returncode == 4
    assert "recipients.alice.channels: no channel named 'sms'" in result.stderr
    bad_status = run("deliveries", "list", "--status", "lost", db=f"sqlite:///{tmp_path / 'x.db'}")
    assert bad_status.returncode == 4 and "--status is one of" in bad_status.stderr
