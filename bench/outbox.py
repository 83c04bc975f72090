"""The outbox's delivery throughput and delay, to a local webhook receiver.

    python bench/outbox.py                         # SQLite, burst of 2000 + steady 100/s for 10 s
    python bench/outbox.py --db postgresql://postgres@127.0.0.1:5432/bench_outbox
    python bench/outbox.py --burst 5000 --rate 200 --seconds 10

The receiver is a separate process (uvicorn + Starlette, answering 200 and writing the
request id and arrival time of each webhook to a file), so it does not share the event
loop or the GIL with the delivery loop. The delivery loop runs in this process with the
default settings of `interlock serve` (batch 100, 16 sends at once), woken by each
created request the way the server's event hub wakes it.

- burst: N requests created as fast as the store takes them, then delivered; the
  throughput is N over the time from the first creation to the last arrival.
- steady: requests created at a fixed rate; the delay of each is from its `created_at`
  to its arrival at the receiver; p50 and p99 of those.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import environment

import interlock
from interlock import Confirm
from interlock.broker import LocalBroker
from interlock.channels.delivery import DeliveryLoop
from interlock.routing import routing_from_dict

RECEIVER = """
import sys, time, json
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route
import uvicorn
out = open(sys.argv[2], "a", buffering=1)
async def hook(request):
    body = json.loads(await request.body())
    out.write(f"{body['request']['id']} {time.time()}\\n")
    return Response(status_code=200)
app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", lifespan="off")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def arrivals(path: Path) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in path.read_text().splitlines():
        request_id, at = line.split()
        found.setdefault(request_id, float(at))
    return found


async def wait_for(path: Path, ids: set[str], timeout: float) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        got = arrivals(path)
        if ids <= got.keys() or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.05)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(db: str, burst: int, rate: float, seconds: float) -> dict[str, object]:
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="outbox-bench-"))
    log = workdir / "arrivals.txt"
    log.touch()
    receiver = await asyncio.create_subprocess_exec(sys.executable, "-c", RECEIVER, str(port), str(log))
    try:
        deadline = time.monotonic() + 20
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("the receiver did not start")
            await asyncio.sleep(0.02)
        routing = routing_from_dict(
            {
                "channels": {"hook": {"type": "webhook", "url": f"http://127.0.0.1:{port}/hook", "secret": "b" * 32}},
                "default": {"channels": ["hook"]},
            }
        )
        url = db if db != "sqlite" else f"sqlite:///{workdir / 'bench.db'}"
        async with interlock.connect(url) as broker:
            assert isinstance(broker, LocalBroker)
            loop = DeliveryLoop(broker.outbox, routing)
            # -- burst -----------------------------------------------------------------
            started = time.time()
            ids = set()
            for i in range(burst):
                ids.add((await broker.create(Confirm(f"Ship {i}?"), to="alice", requester="bench")).id)
            created_in = time.time() - started
            loop.start()
            got = await wait_for(log, ids, timeout=300)
            burst_seconds = max(got[i] for i in ids) - started
            delivered_in = max(got[i] for i in ids) - (started + created_in)
            # -- steady ----------------------------------------------------------------
            created: dict[str, float] = {}
            count = int(rate * seconds)
            t0 = time.monotonic()
            for i in range(count):
                target = t0 + i / rate
                pause = target - time.monotonic()
                if pause > 0:
                    await asyncio.sleep(pause)
                request = await broker.create(Confirm(f"Steady {i}?"), to="alice", requester="bench")
                loop.wake()  # as the server's event hub does on every event
                created[request.id] = request.created_at.timestamp()
            got = await wait_for(log, set(created), timeout=120)
            delays = [(got[i] - at) * 1000 for i, at in created.items() if i in got]
            await loop.stop()
        return {
            "store": url.split(":", 1)[0],
            "burst": burst,
            "burst_create_s": round(created_in, 3),
            "burst_deliver_only_s": round(delivered_in, 3),
            "burst_throughput_per_s": round(burst / delivered_in, 1),
            "burst_end_to_end_per_s": round(burst / burst_seconds, 1),
            "steady_rate_per_s": rate,
            "steady_count": count,
            "steady_delivered": len(delays),
            "delay_p50_ms": round(statistics.median(delays), 1),
            "delay_p99_ms": round(percentile(delays, 0.99), 1),
            "delay_max_ms": round(max(delays), 1),
        }
    finally:
        receiver.terminate()
        await asyncio.wait_for(receiver.wait(), 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default="sqlite", help="sqlite (a fresh file) or a postgresql:// URL")
    parser.add_argument("--burst", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    print(environment(["httpx", "uvicorn", "asyncpg"]))
    print(f"run at {datetime.now(UTC).isoformat(timespec='seconds')}, pid {os.getpid()}")
    result = asyncio.run(run(args.db, args.burst, args.rate, args.seconds))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
