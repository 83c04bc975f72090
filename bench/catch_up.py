"""How long a SQLite store's catch-up of its search index holds the event loop.

Fills a file with N requests as bench/scale.py does (their events written, the search
index not), then, on a copy for each `DERIVE_HOLD`, opens a store and catches the index
up with the whole event log while a task on the same loop counts how long it waits
between two of its turns: those waits are what every other caller of the process would
wait. A hold of 1e9 is the fixed chunks of `DERIVE_CHUNK` events (as before the hold).

    python bench/catch_up.py                       # 200,000 requests, holds 1e9 and 0.02 s
    python bench/catch_up.py --rows 50000 --holds 1e9 0.05 0.02 0.01
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scale

from interlock.store import sqlite
from interlock.store.sqlite import SqliteStore


async def catch_up(path: str, hold: float) -> str:
    sqlite.DERIVE_HOLD = hold
    store = SqliteStore(path)
    await store.open()
    waits: list[float] = []
    work = asyncio.ensure_future(store._derive("search"))
    started = last = time.monotonic()
    while not work.done():
        await asyncio.sleep(0)
        now = time.monotonic()
        waits.append(now - last)
        last = now
    await work
    took = time.monotonic() - started
    size = store._derive_size.get("search")
    await store.aclose()
    waits.sort()
    ms = [waits[int(len(waits) * q)] * 1000 for q in (0.5, 0.99)] + [waits[-1] * 1000]
    return (
        f"hold {hold:g} s: caught up in {took:.1f} s; the loop waited p50 {ms[0]:.1f} ms, p99 {ms[1]:.1f} ms, "
        f"max {ms[2]:.1f} ms; last chunk size {size} events"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--holds", type=float, nargs="+", default=[1e9, 0.02])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="interlock-catch-up-") as root:
        base = os.path.join(root, "base.db")
        started = time.perf_counter()
        asyncio.run(scale.fill_new_sqlite(base, scale.Fill(args.rows, datetime.now(UTC))))
        print(f"filled {args.rows:,} requests in {time.perf_counter() - started:.0f} s", flush=True)
        for hold in args.holds:
            path = os.path.join(root, f"copy-{hold:g}.db")
            shutil.copyfile(base, path)
            print(asyncio.run(catch_up(path, hold)), flush=True)
            os.remove(path)


if __name__ == "__main__":
    main()
