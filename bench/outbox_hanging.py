"""The delivery loop beside a receiver that hangs with a large backlog: what it costs while
it waits, and how soon another channel's messages go through.

    python bench/outbox_hanging.py                     # SQLite, 5000 waiting for the receiver that hangs
    python bench/outbox_hanging.py --db postgresql://postgres@127.0.0.1:5432/bench_hanging --backlog 20000

A "pager" webhook accepts each connection and never answers (a socket in this process);
a "hook" webhook answers 200 at once (a separate process, as in `outbox.py`). The backlog
is made to the pager before the loop starts, with the server's defaults (16 sends at
once, a poll a second, a webhook's 10 s timeout). Then, for `--seconds`, nothing else
happens: the process's CPU time, the loop's rounds and its claims (and their mean time)
are counted. Then `--others` requests to someone on the hook are made a quarter of a
second apart, waking the loop as the server's event hub does; the delay of each is from
its `created_at` to its arrival.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import environment
from outbox import RECEIVER, free_port, wait_for

import interlock
from interlock import Confirm
from interlock.broker import LocalBroker
from interlock.channels.delivery import DeliveryLoop
from interlock.routing import routing_from_dict


class Hanging:
    """A server that takes every connection and answers nothing."""

    def __init__(self) -> None:
        self.held = 0
        self.seen = 0
        self.changed = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.held += 1
        self.seen += 1
        self.changed.set()
        try:
            while await reader.read(65536):
                pass
        finally:
            self.held -= 1
            writer.close()


def counted(calls: list[float], method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await method(*args, **kwargs)
        finally:
            calls.append(time.perf_counter() - started)

    return wrapper


async def run(db: str, backlog: int, seconds: float, others: int) -> dict[str, object]:
    hanging = Hanging()
    pager = await asyncio.start_server(hanging.serve, "127.0.0.1", 0)
    pager_port = pager.sockets[0].getsockname()[1]
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="outbox-hanging-"))
    log = workdir / "arrivals.txt"
    log.touch()
    receiver = await asyncio.create_subprocess_exec(sys.executable, "-c", RECEIVER, str(port), str(log))
    try:
        deadline = time.monotonic() + 20
        while not await _up(port):
            if time.monotonic() > deadline:
                raise RuntimeError("the receiver did not start")
            await asyncio.sleep(0.02)
        routing = routing_from_dict(
            {
                "channels": {
                    "pager": {"type": "webhook", "url": f"http://127.0.0.1:{pager_port}/hook", "secret": "p" * 32},
                    "hook": {"type": "webhook", "url": f"http://127.0.0.1:{port}/hook", "secret": "b" * 32},
                },
                "recipients": {"alice": {"channels": ["pager"]}},
                "default": {"channels": ["hook"]},
            }
        )
        url = db if db != "sqlite" else f"sqlite:///{workdir / 'bench.db'}"
        async with interlock.connect(url) as broker:
            assert isinstance(broker, LocalBroker)
            started = time.monotonic()
            for i in range(backlog):
                await broker.create(Confirm(f"Page {i}?"), to="alice", requester="bench")
            made_in = time.monotonic() - started
            loop = DeliveryLoop(broker.outbox, routing)
            rounds: list[float] = []
            claims: list[float] = []
            loop._round = counted(rounds, loop._round)  # type: ignore[method-assign]
            loop.outbox.claim_deliveries = counted(claims, loop.outbox.claim_deliveries)  # type: ignore[method-assign]
            changed, routed = asyncio.Event(), [0]

            def seen() -> None:  # a notice routed (or an outcome stored)
                routed[0] += 1
                changed.set()

            loop.on_change.append(seen)
            loop.start()
            # every notice routed and the pager's sends under way (all it will take)
            async with asyncio.timeout(300):
                while routed[0] < backlog:
                    changed.clear()
                    await changed.wait()
                while hanging.held < min(16, getattr(loop, "per_channel", 16)):
                    hanging.changed.clear()
                    await hanging.changed.wait()
            # -- idle beside the hanging receiver -----------------------------------------
            rounds.clear()
            claims.clear()
            cpu, wall = time.process_time(), time.monotonic()
            await asyncio.sleep(seconds)
            cpu, wall = time.process_time() - cpu, time.monotonic() - wall
            idle = {
                "idle_s": round(wall, 2),
                "idle_cpu_ms_per_s": round(cpu * 1000 / wall, 2),
                "idle_rounds_per_s": round(len(rounds) / wall, 2),
                "idle_claims_per_s": round(len(claims) / wall, 2),
                "claim_ms_mean": round(statistics.mean(claims) * 1000, 3) if claims else None,
                "pager_sends_at_once": hanging.held,
            }
            # -- another channel's messages meanwhile ---------------------------------------
            created: dict[str, float] = {}
            for i in range(others):
                request = await broker.create(Confirm(f"Other {i}?"), to=f"bob-{i}", requester="bench")
                loop.wake()  # as the server's event hub does on every event
                created[request.id] = request.created_at.timestamp()
                await asyncio.sleep(0.25)
            got = await wait_for(log, set(created), timeout=60)
            delays = [(got[i] - at) * 1000 for i, at in created.items() if i in got]
            await loop.stop(grace=0.1)
        return {
            "store": url.split(":", 1)[0],
            "backlog": backlog,
            "backlog_made_s": round(made_in, 1),
            "per_channel": getattr(loop, "per_channel", None),
            **idle,
            "others": others,
            "others_delivered": len(delays),
            "others_delay_p50_ms": round(statistics.median(delays), 1) if delays else None,
            "others_delay_max_ms": round(max(delays), 1) if delays else None,
            "pager_connections_made": hanging.seen,
        }
    finally:
        pager.close()
        receiver.terminate()
        await asyncio.wait_for(receiver.wait(), 10)


async def _up(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default="sqlite", help="sqlite (a fresh file) or a postgresql:// URL")
    parser.add_argument("--backlog", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--others", type=int, default=20)
    args = parser.parse_args()
    print(environment(["httpx", "uvicorn", "asyncpg"]))
    print(f"run at {datetime.now(UTC).isoformat(timespec='seconds')}, pid {os.getpid()}")
    result = asyncio.run(run(args.db, args.backlog, args.seconds, args.others))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
