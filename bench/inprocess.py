"""In-process benchmark: interlock ``memory://`` vs RoomKit's HumanInputHandler
vs a raw ``asyncio.Future`` baseline.

Two measurements, all three contenders in the same run, same interpreter:

1. **Ping-pong** -- one asking task loops ``create -> hand the id to an
   answering task through an asyncio.Queue -> wait``; the answering task calls
   ``resolve(id, "blue")``, which wakes the asker.  Reported as cycles/s
   (median of the repetitions).
2. **10,000 concurrent waiters** -- create 10k requests, start one task per
   request blocked in ``wait``, let them all park, resolve them all from the
   main task, and gather every waiter.  Reported as total wall time (median),
   with the phase split, plus memory per waiter measured in a fresh
   subprocess per contender (tracemalloc, and RSS delta as a cross-check).

The targets, the recorded figures and their history are in docs/explanation/benchmarks.md.

Run (needs Python >= 3.12 for RoomKit 0.109):

    bash bench/run.sh inprocess            # creates the Python 3.12 bench venv if missing
    # or, inside a venv with roomkit==0.109.* and interlock installed:
    python bench/inprocess.py [--cycles 20000] [--waiters 10000] [--reps 7]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Awaitable, Callable
from uuid import uuid4

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (
    collect,
    environment,
    full_collections,
    median,
    paired,
    perf,
    rounds,
    rss_kb,
    table,
    verdict,
)

ANSWER = "blue"
QUESTION = "What colour?"

# --------------------------------------------------------------------------
# Contender adapters.  Each exposes:
#   pingpong(n) -> seconds for n cycles
#   waiters(n)  -> dict of phase timings (seconds)
#   park(n)     -> async context used by the memory probe: creates n requests
#                  and n parked waiters, yields, then resolves and drains.
# The per-cycle code is written out for each contender (no shared adapter
# layer in the hot loop) so no contender pays for an extra indirection.
# --------------------------------------------------------------------------


async def _settle() -> None:
    """Give every freshly created task its first step, so it parks in wait()."""
    for _ in range(3):
        await asyncio.sleep(0)


# ---- raw asyncio.Future baseline -----------------------------------------


class FutureBroker:
    """The floor: a dict of id -> Future, same awaitable create/resolve/wait
    shape as the brokers, uuid4 ids."""

    def __init__(self) -> None:
        self._futs: dict[str, asyncio.Future[str]] = {}

    async def create(self) -> str:
        rid = uuid4().hex
        self._futs[rid] = asyncio.get_running_loop().create_future()
        return rid

    async def resolve(self, rid: str, value: str) -> bool:
        fut = self._futs.get(rid)
        if fut is None or fut.done():
            return False
        fut.set_result(value)
        return True

    async def wait(self, rid: str) -> str:
        try:
            return await self._futs[rid]
        finally:
            self._futs.pop(rid, None)


async def future_pingpong(n: int) -> float:
    broker = FutureBroker()
    q: asyncio.Queue[str | None] = asyncio.Queue()

    async def answerer() -> None:
        resolve = broker.resolve
        while (rid := await q.get()) is not None:
            await resolve(rid, ANSWER)

    task = asyncio.create_task(answerer())
    create, wait = broker.create, broker.wait
    result = None
    t0 = perf()
    for _ in range(n):
        rid = await create()
        q.put_nowait(rid)
        result = await wait(rid)
    elapsed = perf() - t0
    assert result == ANSWER, result
    q.put_nowait(None)
    await task
    return elapsed


async def future_waiters(n: int) -> dict[str, float]:
    broker = FutureBroker()
    t0 = perf()
    ids = [await broker.create() for _ in range(n)]
    t1 = perf()
    tasks = [asyncio.create_task(broker.wait(rid)) for rid in ids]
    await _settle()
    t2 = perf()
    for rid in ids:
        await broker.resolve(rid, ANSWER)
    results = await asyncio.gather(*tasks)
    t3 = perf()
    assert len(results) == n and results[-1] == ANSWER
    return {"create": t1 - t0, "park": t2 - t1, "wake": t3 - t2, "total": t3 - t0}


async def future_park(n: int, probe: Callable[[], Awaitable[None]]) -> None:
    broker = FutureBroker()
    await _waiters_with_probe(
        n,
        create=broker.create,
        wait=broker.wait,
        resolve=lambda rid: broker.resolve(rid, ANSWER),
        probe=probe,
    )


# ---- RoomKit 0.109 HumanInputHandler (the peer whose lifecycle interlock keeps) -------------


def _roomkit_handler():  # type: ignore[no-untyped-def]
    from roomkit.tools.human_input import HumanInputHandler

    return HumanInputHandler()  # default retention=128


ROOMKIT_TOOL = "AskUserQuestion"
ROOMKIT_ARGS = {"question": QUESTION}


async def roomkit_pingpong(n: int) -> float:
    handler = _roomkit_handler()
    q: asyncio.Queue[str | None] = asyncio.Queue()

    async def answerer() -> None:
        resolve = handler.resolve  # synchronous in RoomKit
        while (rid := await q.get()) is not None:
            resolve(rid, ANSWER)

    task = asyncio.create_task(answerer())
    create, wait = handler.create, handler.wait
    result = None
    t0 = perf()
    for _ in range(n):
        pending = await create(ROOMKIT_TOOL, ROOMKIT_ARGS)
        q.put_nowait(pending.pending_id)
        result = await wait(pending.pending_id)  # default timeout=300
    elapsed = perf() - t0
    assert result == ANSWER, result
    q.put_nowait(None)
    await task
    await handler.close()
    return elapsed


async def roomkit_waiters(n: int) -> dict[str, float]:
    handler = _roomkit_handler()
    t0 = perf()
    ids = [(await handler.create(ROOMKIT_TOOL, ROOMKIT_ARGS)).pending_id for _ in range(n)]
    t1 = perf()
    tasks = [asyncio.create_task(handler.wait(rid)) for rid in ids]
    await _settle()
    t2 = perf()
    for rid in ids:
        handler.resolve(rid, ANSWER)
    results = await asyncio.gather(*tasks)
    t3 = perf()
    assert len(results) == n and results[-1] == ANSWER
    await handler.close()
    return {"create": t1 - t0, "park": t2 - t1, "wake": t3 - t2, "total": t3 - t0}


async def roomkit_park(n: int, probe: Callable[[], Awaitable[None]]) -> None:
    handler = _roomkit_handler()

    async def create() -> str:
        return (await handler.create(ROOMKIT_TOOL, ROOMKIT_ARGS)).pending_id

    async def resolve(rid: str) -> bool:
        return handler.resolve(rid, ANSWER)

    await _waiters_with_probe(n, create=create, wait=handler.wait, resolve=resolve, probe=probe)
    await handler.close()


# ---- interlock memory:// --------------------------------------------------

INTERLOCK_URL = "memory://"
INTERLOCK_KW = {"retention": 128}  # same bounded retention as RoomKit's default


def _interlock_connect():  # type: ignore[no-untyped-def]
    import interlock

    return interlock.connect(INTERLOCK_URL, **INTERLOCK_KW)


async def interlock_pingpong(n: int) -> float:
    from interlock import Text

    async with _interlock_connect() as broker:
        q: asyncio.Queue[str | None] = asyncio.Queue()

        async def answerer() -> None:
            resolve = broker.resolve
            while (rid := await q.get()) is not None:
                await resolve(rid, ANSWER)

        task = asyncio.create_task(answerer())
        create, wait = broker.create, broker.wait
        resp = None
        t0 = perf()
        for _ in range(n):
            req = await create(Text(QUESTION))
            q.put_nowait(req.id)
            resp = await wait(req.id)
        elapsed = perf() - t0
        assert resp is not None and resp.answers == {"text": ANSWER}, resp
        q.put_nowait(None)
        await task
    return elapsed


async def interlock_waiters(n: int) -> dict[str, float]:
    from interlock import Text

    async with _interlock_connect() as broker:
        t0 = perf()
        ids = [(await broker.create(Text(QUESTION))).id for _ in range(n)]
        t1 = perf()
        tasks = [asyncio.create_task(broker.wait(rid)) for rid in ids]
        await _settle()
        t2 = perf()
        for rid in ids:
            await broker.resolve(rid, ANSWER)
        results = await asyncio.gather(*tasks)
        t3 = perf()
        assert len(results) == n and results[-1].answers == {"text": ANSWER}
    return {"create": t1 - t0, "park": t2 - t1, "wake": t3 - t2, "total": t3 - t0}


async def interlock_park(n: int, probe: Callable[[], Awaitable[None]]) -> None:
    from interlock import Text

    async with _interlock_connect() as broker:

        async def create() -> str:
            return (await broker.create(Text(QUESTION))).id

        async def resolve(rid: str) -> bool:
            return await broker.resolve(rid, ANSWER)

        await _waiters_with_probe(n, create=create, wait=broker.wait, resolve=resolve, probe=probe)


# ---- memory probe (runs in a child process per contender) ----------------


async def _waiters_with_probe(n, *, create, wait, resolve, probe) -> None:  # type: ignore[no-untyped-def]
    ids = [await create() for _ in range(n)]
    tasks = [asyncio.create_task(wait(rid)) for rid in ids]
    await _settle()
    await probe()  # everything created, every waiter parked
    for rid in ids:
        await resolve(rid)
    await asyncio.gather(*tasks)


PARK = {"future": future_park, "roomkit": roomkit_park, "interlock": interlock_park}


def child_memory(name: str, n: int, mode: str) -> dict[str, float]:
    """Bytes per parked waiter, measured in this (fresh) process."""
    park = PARK[name]

    async def noop() -> None:
        return None

    async def main() -> dict[str, float]:
        # Warm-up: import paths, caches, interned strings, freelists.
        await park(200, noop)
        collect()
        out: dict[str, float] = {}
        if mode == "tracemalloc":
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]

            async def probe() -> None:
                out["bytes"] = tracemalloc.get_traced_memory()[0] - base

            await park(n, probe)
            tracemalloc.stop()
        else:
            base = rss_kb()

            async def probe() -> None:
                out["bytes"] = (rss_kb() - base) * 1024

            await park(n, probe)
        out["per_waiter_kb"] = out["bytes"] / n / 1024
        return out

    return asyncio.run(main())


def memory_in_child(name: str, n: int, mode: str) -> float | None:
    cmd = [sys.executable, os.path.abspath(__file__), "--child-memory", name, "--mode", mode, "--waiters", str(n)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        print(f"  [memory probe for {name} failed]\n{proc.stderr}", file=sys.stderr)
        return None
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["per_waiter_kb"])


# ---- driver ---------------------------------------------------------------

PINGPONG = {"interlock": interlock_pingpong, "roomkit": roomkit_pingpong, "future": future_pingpong}
WAITERS = {"interlock": interlock_waiters, "roomkit": roomkit_waiters, "future": future_waiters}
LABEL = {"interlock": "interlock memory://", "roomkit": "RoomKit HumanInputHandler", "future": "raw asyncio.Future"}


def available() -> list[str]:
    names = []
    try:
        import interlock

        interlock.connect  # noqa: B018
        names.append("interlock")
    except Exception as exc:
        print(f"!! interlock not importable ({exc!r}); benchmarking the others only")
    try:
        import roomkit.tools.human_input  # noqa: F401

        names.append("roomkit")
    except Exception as exc:
        print(f"!! roomkit not importable ({exc!r}); skipping it")
    names.append("future")
    return names


def run(args: argparse.Namespace) -> int:
    names = [n for n in available() if not args.only or n in args.only]
    print(environment(["interlock", "roomkit"]))
    print(f"event loop: {type(asyncio.new_event_loop()).__name__} (default asyncio)")
    print()

    # ---- ping-pong
    pp: dict[str, list[float]] = {n: [] for n in names}
    for n in names:  # warm-up
        asyncio.run(PINGPONG[n](args.warmup))
    for order in rounds(names, args.reps):
        for n in order:
            collect()
            elapsed = asyncio.run(PINGPONG[n](args.cycles))
            pp[n].append(args.cycles / elapsed)
    pp_med = {n: median(v) for n, v in pp.items()}

    print(
        f"## Ping-pong: create -> resolve from another task -> waiter wakes "
        f"({args.cycles:,} cycles x {args.reps} reps; median, ratios = median of per-round ratios)"
    )
    rows = []
    for n in names:
        rows.append(
            [
                LABEL[n],
                pp_med[n],
                min(pp[n]),
                max(pp[n]),
                1e6 / pp_med[n],
                _pratio(pp, n, "roomkit"),
                _pratio(pp, n, "future"),
            ]
        )
    print(table(["contender", "cycles/s", "min", "max", "us/cycle", "x RoomKit", "x Future"], rows))
    print()

    # ---- 10k waiters
    wt: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for n in names:
        asyncio.run(WAITERS[n](min(1000, args.waiters)))
    for order in rounds(names, args.reps):
        for n in order:
            collect()
            with full_collections() as counted:
                wt[n].append(asyncio.run(WAITERS[n](args.waiters)))
            wt[n][-1]["full_gcs"] = counted[0]
    wt_med = {n: {k: median([r[k] for r in v]) for k in v[0]} for n, v in wt.items()}

    mem_tm = {n: memory_in_child(n, args.waiters, "tracemalloc") for n in names}
    mem_rss = {n: memory_in_child(n, args.waiters, "rss") for n in names}

    print(
        f"## {args.waiters:,} concurrent waiters: create all -> all parked in wait() -> "
        f"resolve all -> all woken ({args.reps} reps; median ms, time ratio = median of per-round ratios)"
    )
    rows = []
    for n in names:
        m = wt_med[n]
        rows.append(
            [
                LABEL[n],
                m["total"] * 1e3,
                m["create"] * 1e3,
                m["park"] * 1e3,
                m["wake"] * 1e3,
                f"{m['full_gcs']:g}",
                _pratio({k: [r["total"] for r in v] for k, v in wt.items()}, n, "roomkit"),
                _fmtkb(mem_tm[n]),
                _fmtkb(mem_rss[n]),
                _ratio(mem_tm[n], mem_tm.get("roomkit")),
            ]
        )
    print(
        table(
            [
                "contender",
                "total ms",
                "create ms",
                "park ms",
                "resolve+wake ms",
                "full GCs",
                "time x RoomKit",
                "KB/waiter (tracemalloc)",
                "KB/waiter (RSS)",
                "mem x RoomKit",
            ],
            rows,
        )
    )
    print()

    if "interlock" in names and "roomkit" in names:
        # Targets use the median of per-round ratios (see _common.paired).
        r_pp = paired(pp["interlock"], pp["roomkit"])
        r_wt = paired([r["total"] for r in wt["interlock"]], [r["total"] for r in wt["roomkit"]])
        print("## Targets (ratios: median of per-round ratios)")
        print(
            table(
                ["target", "measured", "verdict"],
                [
                    ["ping-pong >= 1.2x RoomKit cycles/s", f"{r_pp:.2f}x", verdict(r_pp >= 1.2)],
                    [f"{args.waiters:,} waiters <= RoomKit time", f"{r_wt:.2f}x", verdict(r_wt <= 1.0)],
                    _mem_target(mem_tm, "tracemalloc"),
                    _mem_target(mem_rss, "RSS"),
                ],
            )
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(
                {
                    "pingpong": pp,
                    "waiters": wt,
                    "mem_tracemalloc_kb": mem_tm,
                    "mem_rss_kb": mem_rss,
                    "args": vars(args),
                },
                fh,
                indent=1,
            )
    return 0


def _mem_target(mem: dict[str, float | None], how: str) -> list[str]:
    a, b = mem.get("interlock"), mem.get("roomkit")
    if a is None or b is None:
        return [f"KB/waiter <= RoomKit ({how})", "n/a", "n/a"]
    return [f"KB/waiter <= RoomKit ({how})", f"{a:.2f} vs {b:.2f} KB ({a / b:.2f}x)", verdict(a <= b)]


def _pratio(samples: dict[str, list[float]], a: str, b: str) -> str:
    if a not in samples or b not in samples:
        return "-"
    return f"{paired(samples[a], samples[b]):.2f}x"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}x"


def _fmtkb(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cycles", type=int, default=20_000, help="ping-pong cycles per rep")
    p.add_argument("--waiters", type=int, default=10_000)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--warmup", type=int, default=2_000, help="ping-pong warm-up cycles")
    p.add_argument("--only", nargs="*", choices=list(PINGPONG), help="subset of contenders")
    p.add_argument("--json", help="also write raw samples to this file")
    p.add_argument("--child-memory", choices=list(PARK), help=argparse.SUPPRESS)
    p.add_argument("--mode", choices=["tracemalloc", "rss"], default="tracemalloc", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child_memory:
        print(json.dumps(child_memory(args.child_memory, args.waiters, args.mode)))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
