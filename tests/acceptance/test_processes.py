"""Real processes on one SQLite file: durability through SIGKILL, and wake-ups across them."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

import interlock
from interlock import Status, Text

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def spawn(code: str, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        textwrap.dedent(code),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def read_line(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    with anyio.fail_after(20):
        line = await proc.stdout.readline()
    if not line:
        assert proc.stderr is not None
        raise AssertionError("the child ended early: " + (await proc.stderr.read()).decode())
    return line.decode().strip()


CHURN = """
    import asyncio, sys, interlock
    from interlock import Text

    async def main():
        async with interlock.connect(sys.argv[1]) as broker:
            for i in range(100_000):
                request = await broker.create(Text(f"Question {i}?"))
                print("created", request.id, flush=True)
                await broker.resolve(request.id, f"answer {i}")
                print("answered", request.id, flush=True)

    asyncio.run(main())
"""


async def test_every_acknowledged_create_and_answer_survives_sigkill(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    child = await spawn(CHURN, url)
    acked: list[tuple[str, str]] = []
    while len(acked) < 400:
        what, request_id = (await read_line(child)).split()
        acked.append((what, request_id))
    child.send_signal(signal.SIGKILL)
    assert child.stdout is not None
    # What it acknowledged before dying: whole lines only (the kill may cut the last one).
    rest = (await child.stdout.read()).decode().split("\n")[:-1]
    acked += [tuple(line.split()) for line in rest if line.strip()]  # type: ignore[misc]
    assert await child.wait() == -signal.SIGKILL

    async with interlock.connect(url) as broker:
        for what, request_id in acked:
            request = await broker.get(request_id)
            if what == "answered":
                assert request.status is Status.ANSWERED
                assert request.asks[0].prompt == f"Question {request.answer.split()[1]}?"
        answered = {rid for what, rid in acked if what == "answered"}
        events = [e async for e in broker.events()]
        assert answered <= {e.request_id for e in events if e.type == "answered"}
        assert {rid for _, rid in acked} <= {e.request_id for e in events if e.type == "created"}


WAITER = """
    import asyncio, json, sys, time, interlock

    async def main():
        async with interlock.connect(sys.argv[1]) as broker:
            task = asyncio.create_task(broker.wait(sys.argv[2]))
            for _ in range(3):
                await asyncio.sleep(0)  # let the wait register and block
            print("waiting", flush=True)
            response = await task
            print(json.dumps({"answers": response.answers, "woke": time.time()}), flush=True)

    asyncio.run(main())
"""


async def test_a_waiter_in_another_process_wakes_on_the_hint_not_the_poll(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    # The child polls only once an hour, so within the bound only the wake-up hint can wake it.
    child_url = f"sqlite:///{path}?poll_interval=3600"
    async with interlock.connect(f"sqlite:///{path}") as broker:
        request = await broker.create(Text("Name?"))
        child = await spawn(WAITER, child_url, request.id)
        assert await read_line(child) == "waiting"
        sent = time.time()
        assert await broker.resolve(request.id, "Ada")
        result = json.loads(await read_line(child))
        assert result["answers"] == {"text": "Ada"}
        assert result["woke"] >= sent
        with anyio.fail_after(20):
            assert await child.wait() == 0


async def test_a_stale_socket_of_a_dead_process_does_not_stop_the_hints(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    async with interlock.connect(f"sqlite:///{path}") as broker:
        first = await broker.create(Text("Name?"))
        dead = await spawn(WAITER, f"sqlite:///{path}?poll_interval=3600", first.id)
        assert await read_line(dead) == "waiting"
        dead.send_signal(signal.SIGKILL)
        await dead.wait()

        second = await broker.create(Text("Name?"))
        child = await spawn(WAITER, f"sqlite:///{path}?poll_interval=3600", second.id)
        assert await read_line(child) == "waiting"
        assert await broker.resolve(second.id, "Ada")
        assert json.loads(await read_line(child))["answers"] == {"text": "Ada"}
        with anyio.fail_after(20):
            assert await child.wait() == 0
