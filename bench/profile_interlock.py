"""cProfile interlock's hot paths, to see where a benchmark cycle's time goes.

    python bench/profile_interlock.py memory   [--cycles 20000] [--top 25]
    python bench/profile_interlock.py sqlite   [--cycles 3000]  [--top 25]
    python bench/profile_interlock.py waiters  [--waiters 10000]
    python bench/profile_interlock.py ops      [--cycles 20000]

``ops`` times each broker call on its own, without the profiler (median of 5
rounds, microseconds per call) on ``memory://`` and ``sqlite://``, next to a
bare ``asyncio.Future`` round trip: a budget sheet for the ping-pong.

``memory`` and ``sqlite`` profile the ping-pong of bench/inprocess.py and
bench/durable.py (create -> resolve from another task -> wait); ``waiters``
profiles one 10k-waiter round.  Prints the top functions by own time and by
cumulative time; ``--out FILE`` also saves the raw stats for snakeviz/pstats.
Profiling inflates Python-level call costs, so read ratios, not absolute times.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import durable
import inprocess


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=["memory", "sqlite", "waiters", "ops"])
    p.add_argument("--cycles", type=int, default=None)
    p.add_argument("--waiters", type=int, default=10_000)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--out")
    args = p.parse_args()
    if args.what == "ops":
        return ops(args.cycles or 20_000)

    prof = cProfile.Profile()
    with tempfile.TemporaryDirectory(prefix="interlock-prof-") as root:
        if args.what == "memory":
            n = args.cycles or 20_000
            asyncio.run(inprocess.interlock_pingpong(1_000))  # warm-up
            prof.enable()
            asyncio.run(inprocess.interlock_pingpong(n))
            prof.disable()
        elif args.what == "waiters":
            n = args.waiters
            asyncio.run(inprocess.interlock_waiters(1_000))
            prof.enable()
            asyncio.run(inprocess.interlock_waiters(n))
            prof.disable()
        else:
            n = args.cycles or 3_000
            durable.interlock_pingpong(os.path.join(root, "warm.db"), 200)
            path = os.path.join(root, "prof.db")
            prof.enable()
            durable.interlock_pingpong(path, n)
            prof.disable()

    if args.out:
        prof.dump_stats(args.out)
    stats = pstats.Stats(prof)
    stats.strip_dirs()
    print(f"=== {args.what}: {n:,} {'waiters' if args.what == 'waiters' else 'cycles'}; top {args.top} by own time ===")
    stats.sort_stats("tottime").print_stats(args.top)
    print(f"=== top {args.top} by cumulative time ===")
    stats.sort_stats("cumulative").print_stats(args.top)
    return 0


def ops(n: int) -> int:
    """Microseconds per call of each broker operation, measured separately."""
    import statistics
    import time

    import interlock
    from interlock import Text

    async def one_round(url: str, k: int) -> dict[str, float]:
        out: dict[str, float] = {}
        perf = time.perf_counter
        kw = {"retention": k} if url.startswith("memory") else {}
        async with interlock.connect(url, **kw) as broker:
            t0 = perf()
            for _ in range(k):
                Text("What colour?")
            out["Text(...) construction"] = perf() - t0
            t0 = perf()
            ids = [(await broker.create(Text("What colour?"))).id for _ in range(k)]
            out["create(Text(...))"] = perf() - t0
            t0 = perf()
            for rid in ids:
                await broker.resolve(rid, "blue")
            out["resolve(id, 'blue')"] = perf() - t0
            t0 = perf()
            for rid in ids:
                await broker.wait(rid)
            out["wait(id), already answered"] = perf() - t0
            t0 = perf()
            for rid in ids:
                await broker.get(rid)
            out["get(id)"] = perf() - t0
            loop = asyncio.get_running_loop()
            t0 = perf()
            for _ in range(k):
                fut = loop.create_future()
                loop.call_soon(fut.set_result, 1)
                await fut
            out["bare Future round trip (call_soon)"] = perf() - t0
        return {key: v / k * 1e6 for key, v in out.items()}

    with tempfile.TemporaryDirectory(prefix="interlock-ops-") as root:
        # memory:// keeps at most 10,000 outcomes nobody has read: a round waits on no more
        for url, k in (("memory://", min(n, 10_000)), (f"sqlite:///{root}/ops-{{}}.db", max(500, n // 10))):
            rounds = [asyncio.run(one_round(url.format(i), k)) for i in range(6)][1:]  # first: warm-up
            print(f"=== {url.split(':')[0]}: us per call, median of {len(rounds)} rounds of {k:,} ===")
            for key in rounds[0]:
                print(f"  {key:38} {statistics.median(r[key] for r in rounds):8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
