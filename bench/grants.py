"""What echo consent costs an answer: create + answer cycles, on one store, without
grants and with one grant offered, echoed and issued (stored with its event in the
answer's transaction).

Run:

    .venv/bin/python bench/grants.py [--url sqlite:///bench-grants.db] [--cycles 2000] [--reps 5]

Prints the median microseconds per cycle of each variant (the file is made fresh).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import interlock
from interlock import Confirm

DEPLOY = {"with": "repo:web", "can": "deploy"}


async def cycles(url: str, count: int, *, granting: bool) -> float:
    ask = Confirm("Deploy?", grants=[DEPLOY]) if granting else Confirm("Deploy?")
    echo = {"grants": [DEPLOY]} if granting else {}
    async with interlock.connect(url) as broker:
        started = time.perf_counter()
        for _ in range(count):
            request = await broker.create(ask, to="alice", requester="bot")
            assert await broker.resolve(request.id, True, by="alice", **echo)
        return (time.perf_counter() - started) / count * 1e6


def fresh(path: str) -> None:
    """Remove the SQLite file and its WAL, so each run starts from nothing."""
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="sqlite:///bench-grants.db")
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--no-grants", action="store_true", help="only the variant without grants")
    args = parser.parse_args()
    results: dict[str, list[float]] = {"no grant": [], "one grant echoed": []}
    for _ in range(args.reps):
        for name, granting in (("no grant", False), ("one grant echoed", True)):
            if granting and args.no_grants:
                continue
            if args.url.startswith("sqlite:///"):
                fresh(args.url.removeprefix("sqlite:///"))
            results[name].append(await cycles(args.url, args.cycles, granting=granting))
    for name, runs in results.items():
        if not runs:
            continue
        print(f"{name:18} {statistics.median(runs):8.1f} us per create + answer (median of {args.reps})")


if __name__ == "__main__":
    asyncio.run(main())
