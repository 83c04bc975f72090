"""`interlock worker` processes while their PostgreSQL database refuses connections for a
few seconds, as it does while it restarts or fails over: the workers stay up, the one
resuming a run keeps it (its lease renewed once the database is back), the run is resumed
once, and the outage is logged as warnings, without a traceback. A worker had died of the
first claim refused (`CannotConnectNowError: the database system is starting up`), and a
refused renewal had stopped the renewals: the run went to another worker once the lease
ran out, and its handler ran twice."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from pathlib import Path

import anyio
import pytest
from pg_support import refusing_connections

import interlock
from interlock import Confirm
from interlock.model import Run, RunStatus

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

INTERLOCK = [sys.executable, "-m", "interlock"]
BOUND = 60
LEASE = 9  # seconds: the outage is shorter than the lease, and spans a renewal

AGENT = '''
"""A handler that says when it starts, then holds its run until the test lets it go."""
import asyncio
import json
import os
from pathlib import Path

HERE = Path(__file__).parent


def handlers(broker):
    async def resume(run, requests):
        with open(HERE / "calls.txt", "a") as calls:
            calls.write(json.dumps({"worker": run.worker, "attempts": run.attempts}) + "\\n")
        for _ in range(1200):  # bounded: 60 s at most
            if (HERE / "go").exists():
                break
            await asyncio.sleep(0.05)
        return {"done_by": run.worker}

    return {"deployer": resume}
'''


class Worker:
    """An `interlock worker` process and the lines it has printed so far."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.printed = asyncio.Event()
        assert proc.stderr is not None
        self.reader = asyncio.create_task(self._read(proc.stderr))

    async def _read(self, stream: asyncio.StreamReader) -> None:
        try:
            while line := await stream.readline():
                self.lines.append(line.decode())
                self.printed.set()
        finally:
            self.printed.set()  # it ended: whoever waits for a line looks once more

    async def says(self, words: str) -> None:
        """Wait until the worker has printed `words` (or it ended: then fail with what it printed)."""
        while not any(words in line for line in self.lines):
            if self.reader.done():  # (no more lines will come)
                pytest.fail(f"the worker ended before saying {words!r}:\n{self.text}")
            self.printed.clear()
            await self.printed.wait()

    @property
    def text(self) -> str:
        return "".join(self.lines)


@contextlib.asynccontextmanager
async def workers(db: str, cwd: Path, *names: str) -> AsyncIterator[dict[str, Worker]]:
    started: dict[str, Worker] = {}
    try:
        for name in names:
            proc = await asyncio.create_subprocess_exec(
                *INTERLOCK,
                "worker",
                "outage_agent:handlers",
                "--name",
                name,
                "--lease",
                str(LEASE),
                cwd=cwd,
                env={**os.environ, "INTERLOCK_URL": db},
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
            started[name] = Worker(proc)
        yield started
    finally:
        for worker in started.values():
            if worker.proc.returncode is None:
                worker.proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(BOUND):
            for worker in started.values():
                await worker.proc.wait()
                await worker.reader


async def until(condition: Callable[[], bool]) -> None:
    """Look again every 50 ms until `condition()` holds (the caller bounds the wait)."""
    while True:
        if condition():
            return
        await anyio.sleep(0.05)


def lease_of(run: Run) -> datetime:
    assert run.lease_expires_at is not None, run
    return run.lease_expires_at


async def test_workers_outlive_a_database_that_refuses_connections_and_a_run_is_resumed_once(
    pg_url: str, tmp_path: Path
) -> None:
    (tmp_path / "outage_agent.py").write_text(textwrap.dedent(AGENT))
    calls = tmp_path / "calls.txt"
    async with interlock.connect(pg_url) as broker:
        run = await broker.start_run("deployer", run_id="deploy-1")
        request = await broker.create(Confirm("Deploy?"), kind="approval", to="alice", run=run.id)
        await broker.park(run.id, state=None, waiting_on=[request.id])
        await broker.resolve(request.id, True, by="alice")

        async with workers(pg_url, tmp_path, "w1", "w2") as started:
            with anyio.fail_after(BOUND):
                for worker in started.values():
                    await worker.says("resuming runs of deployer")
                await until(calls.exists)
                held = await broker.get_run("deploy-1")
                assert held.worker in started
                holder = started[held.worker]
                other = next(worker for name, worker in started.items() if name != held.worker)

                async with refusing_connections(pg_url):
                    # The holder's renewal and the other's claim are refused; both go on.
                    await other.says("could not claim a run")
                    await holder.says("renewing the lease on run deploy-1 failed")

                # Once the database is back the holder renews its lease, and it still holds
                # the run once the lease it had when the database went away has run out.
                kept = await broker.get_run("deploy-1")
                while lease_of(kept) <= lease_of(held) + timedelta(seconds=LEASE):
                    await anyio.sleep(0.1)  # not renewed past it yet: look again (bounded above)
                    kept = await broker.get_run("deploy-1")
                assert (kept.status, kept.worker, kept.attempts) == (RunStatus.RUNNING, held.worker, 1)
                (tmp_path / "go").touch()
                done = await broker.get_run("deploy-1")
                while not done.status.ended:
                    await anyio.sleep(0.1)  # the handler is still finishing: look again (bounded above)
                    done = await broker.get_run("deploy-1")
            assert (done.status, done.result, done.attempts) == (RunStatus.COMPLETED, {"done_by": held.worker}, 1)
            assert [json.loads(line) for line in calls.read_text().splitlines()] == [
                {"worker": held.worker, "attempts": 1}
            ]
            assert holder.proc.returncode is None and other.proc.returncode is None, holder.text + other.text
    assert [worker.proc.returncode for worker in started.values()] == [0, 0], holder.text + other.text
    assert "resumed 1 run(s)" in holder.text and "resumed 0 run(s)" in other.text
    # The outage is logged as warnings: no failure with a traceback, once an attempt.
    assert "Traceback" not in holder.text + other.text, holder.text + other.text
