"""Park-and-resume cycles per second, and the answer -> resumed latency.

One cycle: a run pauses on an approval, a person answers, a worker resumes the run and
completes it. Each contender does the same cycles in a child process of its own (DBOS is a
process-wide singleton), on SQLite and on PostgreSQL, contenders rotated between rounds:

* **interlock** -- `broker.start_parked("mailer", [approval], state=...)`: the run, its
  approval request (built with `broker.prepare(...)`) and the park in one transaction; an
  `interlock.runs.Worker` starts waiting for a ready run as the agent parks
  (`run_once(wait=30)`, a long-polling claim); the person answers with
  `broker.resolve(...)`, whose transaction hands the run to the waiting worker; the worker
  reads its request, calls the handler and completes the run. All in one process (one
  event loop), as a worker beside the agent.
* **LangGraph** -- a one-node graph whose node calls `interrupt({...})` before its side
  effect, compiled with LangGraph's own checkpointer (`SqliteSaver`, `PostgresSaver`: its fastest here);
  `invoke(input)` parks it, `invoke(Command(resume={interrupt_id: answer}))` resumes it. LangGraph
  has no store of answers of its own: the person's answer *is* the resume call.
* **DBOS Transact** -- a workflow that `DBOS.recv("answer")`s the person's message, then runs
  a step; the person `DBOS.send(workflow_id, ...)`s once the workflow waits. On SQLite DBOS
  polls for messages (`notification_listener_polling_interval_sec`, default 1 s, at which
  it manages one cycle a second): lowered here to `--dbos-poll` (0.001 s, its minimum).

On SQLite every contender runs with interlock's journal and durability (`journal_mode=WAL`,
`synchronous=NORMAL`: a commit survives a crash of the process, not a power cut); left to
their defaults LangGraph's saver and DBOS fsync each commit (FULL), which cost LangGraph
about 15% of its cycles here.

Latency: from the moment the person's answer is given (the call that records it starts)
to the moment the resumed code runs (the worker's handler, the node after `interrupt`, the
workflow after `recv`); p50/p99 over every cycle of every round.

    python bench/park_resume.py [--cycles 300] [--reps 3] [--backends sqlite postgres]
                                [--only interlock langgraph dbos] [--json out.json]

PostgreSQL at 127.0.0.1:5432 with trust auth (each contender gets a fresh database).
Needs `pip install -e ".[bench]"` (interlock with its server, postgres and langgraph extras,
and dbos).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any
from uuid import uuid4

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import environment, median, paired, perf, rounds, table, verdict

SERVER = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
CONTENDERS = ("interlock", "langgraph", "dbos")
LABELS = {
    "interlock": "interlock runs",
    "langgraph": "LangGraph interrupt + Command(resume)",
    "dbos": "DBOS Transact recv/send",
}
TARGETS = {"sqlite": 10.0, "postgres": 5.0}  # x LangGraph
P99_TARGET_MS = 10.0
ARGUMENTS = {"to": "ops@example.com", "subject": "deploy 1.4.2"}

Result = tuple[float, list[float]]  # seconds for n cycles, answer -> resumed latencies (s)


# ---- databases --------------------------------------------------------------------------


def psql(sql: str, database: str = "postgres") -> None:
    done = subprocess.run(
        ["psql", f"{SERVER}/{database}", "-X", "-v", "ON_ERROR_STOP=1", "-Atqc", sql],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"psql failed on {sql!r}: {done.stderr.strip()}")


class Place:
    """A fresh database for one contender's round: a SQLite file or a PostgreSQL database."""

    def __init__(self, backend: str, synchronous_commit: str = "on") -> None:
        self.backend = backend
        self.dir = tempfile.mkdtemp(prefix="interlock-park-")
        self.name = f"interlock_park_{os.getpid()}_{secrets.token_hex(3)}"
        if backend == "postgres":
            psql(f"CREATE DATABASE {self.name}")
            if synchronous_commit != "on":  # every contender's connections to it alike
                psql(f"ALTER DATABASE {self.name} SET synchronous_commit = {synchronous_commit}")

    def url(self) -> str:
        if self.backend == "sqlite":
            return os.path.join(self.dir, "bench.db")
        return f"{SERVER}/{self.name}"

    def drop(self) -> None:
        if self.backend == "postgres":
            psql(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")
        subprocess.run(["rm", "-rf", self.dir], check=False)


# ---- interlock --------------------------------------------------------------------------


def interlock_cycles(backend: str, where: str, n: int, warm: int) -> Result:
    import interlock
    from interlock import Confirm
    from interlock.model import RunStatus
    from interlock.runs import Worker

    url = {"sqlite": f"sqlite:///{where}", "memory": "memory://"}.get(backend, where)
    latencies: list[float] = []
    answered_at = [0.0]

    async def resume(run: Any, requests: Any) -> dict[str, Any]:
        latencies.append(perf() - answered_at[0])
        (request,) = requests.values()
        assert request.response.answers["approve"] is True, request
        return {"sent": dict(ARGUMENTS)}

    async def main() -> float:
        async with interlock.connect(url) as broker:
            worker = Worker(broker, {"mailer": resume}, name="bench-worker")

            async def cycle() -> None:
                request = broker.prepare(
                    Confirm("Send the release mail?", id="approve"),
                    kind="approval",
                    to="alice",
                    tool_name="send_mail",
                    arguments=ARGUMENTS,
                )
                # The worker waits for a ready run from the moment the agent parks, so it is
                # waiting when the person answers (as a worker serving beside agents is).
                resuming = asyncio.create_task(worker.run_once(wait=30.0))
                # It looks, finds nothing ready and waits, before the agent parks: each turn
                # of the loop this takes is counted in the cycle.
                while not broker.claims_waiting:  # noqa: ASYNC110 (a turn of the loop at a time, no time waited)
                    await asyncio.sleep(0)
                # The run, its approval and the park: one call, one transaction.
                await broker.start_parked("mailer", [request], state={"step": 1})
                answered_at[0] = perf()
                await broker.resolve(request.id, {"approve": True}, by="alice")
                done = await asyncio.wait_for(resuming, 60)
                assert done is not None and done.status is RunStatus.COMPLETED, done

            for _ in range(warm):
                await cycle()
            latencies.clear()
            t0 = perf()
            for _ in range(n):
                await cycle()
            return perf() - t0

    return asyncio.run(main()), latencies


# ---- LangGraph --------------------------------------------------------------------------


def langgraph_cycles(backend: str, where: str, n: int, warm: int) -> Result:
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command, interrupt

    latencies: list[float] = []
    answered_at = [0.0]

    class State(TypedDict, total=False):
        sent: dict[str, Any]

    def send_mail(state: State) -> dict[str, Any]:
        decision = interrupt({"tool": "send_mail", "arguments": ARGUMENTS})
        latencies.append(perf() - answered_at[0])
        assert decision == {"approved": True}, decision
        return {"sent": dict(ARGUMENTS)}

    builder = StateGraph(State)
    builder.add_node("send_mail", send_mail)
    builder.add_edge(START, "send_mail")
    builder.add_edge("send_mail", END)

    def cycle(graph: Any) -> None:
        config = {"configurable": {"thread_id": uuid4().hex}}
        parked = graph.invoke({}, config)
        (pause,) = parked["__interrupt__"]
        answered_at[0] = perf()
        out = graph.invoke(Command(resume={pause.id: {"approved": True}}), config)
        assert out["sent"] == ARGUMENTS, out

    def measure(saver: Any) -> float:
        graph = builder.compile(checkpointer=saver)
        for _ in range(warm):
            cycle(graph)
        latencies.clear()
        t0 = perf()
        for _ in range(n):
            cycle(graph)
        return perf() - t0

    # The sync savers: faster here than AsyncSqliteSaver / AsyncPostgresSaver (about 75 vs
    # 43 cycles/s on SQLite on this machine), so LangGraph is measured at its best.
    if backend == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(where, check_same_thread=False)
        conn.execute("PRAGMA synchronous = NORMAL")  # interlock's durability (the saver sets WAL)
        try:
            saver = SqliteSaver(conn)
            saver.setup()
            return measure(saver), latencies
        finally:
            conn.close()
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(where) as pg_saver:
        pg_saver.setup()
        return measure(pg_saver), latencies


# ---- DBOS Transact ----------------------------------------------------------------------


def unixepoch_subsec(modifier: str) -> float:
    if modifier != "subsec":
        raise ValueError(f"only unixepoch('subsec') is stood in for, not {modifier!r}")
    return time.time()


def dbos_cycles(backend: str, where: str, n: int, warm: int, poll: float) -> Result:
    import logging

    from dbos import DBOS, DBOSConfig

    logging.getLogger("dbos").setLevel(logging.WARNING)
    url = f"sqlite:///{where}" if backend == "sqlite" else where
    config: DBOSConfig = {
        "name": "park-resume-bench",
        "system_database_url": url,
        "notification_listener_polling_interval_sec": poll,
        "run_admin_server": False,
    }
    if backend == "sqlite":
        # interlock's journal and durability, on every connection DBOS's engine opens (its
        # default is a rollback journal with an fsync a commit).
        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        @event.listens_for(Engine, "connect")
        def same_pragmas(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.execute("PRAGMA journal_mode = WAL")
            dbapi_connection.execute("PRAGMA synchronous = NORMAL")
            if sqlite3.sqlite_version_info < (3, 42):
                # DBOS on Python 3.12 stamps rows with unixepoch('subsec'), which SQLite
                # learnt in 3.42: older libraries get that one form from Python.
                dbapi_connection.create_function("unixepoch", 1, unixepoch_subsec, deterministic=False)

    DBOS(config=config)
    latencies: list[float] = []
    answered_at = [0.0]
    waiting = threading.Event()

    @DBOS.step()
    def send_mail(arguments: dict[str, Any]) -> dict[str, Any]:
        return dict(arguments)

    @DBOS.workflow()
    def mailer() -> dict[str, Any]:
        waiting.set()
        answer = DBOS.recv("answer", timeout_seconds=60)
        latencies.append(perf() - answered_at[0])
        assert answer == {"approved": True}, answer
        return send_mail(ARGUMENTS)

    DBOS.launch()
    try:

        def cycle() -> None:
            waiting.clear()
            handle = DBOS.start_workflow(mailer)
            waiting.wait(60)
            answered_at[0] = perf()
            DBOS.send(handle.workflow_id, {"approved": True}, "answer")
            assert handle.get_result() == ARGUMENTS

        for _ in range(warm):
            cycle()
        latencies.clear()
        t0 = perf()
        for _ in range(n):
            cycle()
        return perf() - t0, latencies
    finally:
        DBOS.destroy()


# ---- driver -----------------------------------------------------------------------------


def child(args: argparse.Namespace) -> None:
    """Run one contender once, in this process, and print its result as JSON."""
    runners: dict[str, Callable[[], Result]] = {
        "interlock": lambda: interlock_cycles(args.backend, args.where, args.cycles, args.warm),
        "langgraph": lambda: langgraph_cycles(args.backend, args.where, args.cycles, args.warm),
        "dbos": lambda: dbos_cycles(args.backend, args.where, args.cycles, args.warm, args.dbos_poll),
    }
    seconds, latencies = runners[args.child]()
    print(json.dumps({"seconds": seconds, "latencies": latencies}))


def one_round(name: str, backend: str, args: argparse.Namespace) -> Result:
    place = Place(backend, args.pg_synchronous_commit)
    try:
        where = place.url()
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--child",
            name,
            "--backend",
            backend,
            "--where",
            where,
            "--cycles",
            str(args.cycles),
            "--warm",
            str(args.warm),
            "--dbos-poll",
            str(args.dbos_poll),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"{name} on {backend} failed:\n{done.stderr[-3000:]}")
        data = json.loads(done.stdout.strip().splitlines()[-1])
        return float(data["seconds"]), [float(x) for x in data["latencies"]]
    finally:
        place.drop()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--warm", type=int, default=20)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgres"], choices=["sqlite", "postgres"])
    parser.add_argument("--only", nargs="+", default=list(CONTENDERS), choices=CONTENDERS)
    parser.add_argument("--dbos-poll", type=float, default=0.001)
    parser.add_argument(
        "--pg-synchronous-commit",
        default="on",
        choices=["on", "off"],
        help="off: PostgreSQL commits without waiting for the WAL flush, for every contender (fsync-bound disks)",
    )
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument("--child", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "memory"], help=argparse.SUPPRESS)
    parser.add_argument("--where", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    dists = ["interlock", "langgraph", "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres", "dbos"]
    print(environment(dists))
    print(f"cycles per round {args.cycles} (after {args.warm} warm-up cycles), rounds {args.reps}", end="")
    print(f", PostgreSQL synchronous_commit={args.pg_synchronous_commit}\n")
    report: dict[str, Any] = {}
    for backend in args.backends:
        rates: dict[str, list[float]] = {name: [] for name in args.only}
        lat: dict[str, list[float]] = {name: [] for name in args.only}
        for order in rounds(args.only, args.reps):
            for name in order:
                seconds, latencies = one_round(name, backend, args)
                rates[name].append(args.cycles / seconds)
                lat[name].extend(latencies)
                print(f"  {backend:8} {name:10} {args.cycles / seconds:9.1f} cycles/s", flush=True)
        rows = []
        for name in args.only:
            ratio = paired(rates["interlock"], rates[name]) if "interlock" in rates else float("nan")
            rows.append(
                [
                    LABELS[name],
                    median(rates[name]),
                    min(rates[name]),
                    max(rates[name]),
                    pct(lat[name], 0.50) * 1000,
                    pct(lat[name], 0.99) * 1000,
                    f"{ratio:.2f}x" if name != "interlock" else "1.00x",
                ]
            )
        print(f"\n### {backend}\n")
        print(
            table(
                ["contender", "cycles/s (median)", "min", "max", "answer->resumed p50 ms", "p99 ms", "interlock x"],
                rows,
            )
        )
        if "interlock" in rates and "langgraph" in rates:
            ratio = paired(rates["interlock"], rates["langgraph"])
            p99 = pct(lat["interlock"], 0.99) * 1000
            target = TARGETS[backend]
            print(
                f"\ninterlock / LangGraph {ratio:.2f}x (target {target:.0f}x): {verdict(ratio >= target)};"
                f" interlock p99 {p99:.2f} ms (target < {P99_TARGET_MS:.0f} ms): {verdict(p99 < P99_TARGET_MS)}"
            )
        print()
        report[backend] = {"rates": rates, "latency_ms": {k: [x * 1000 for x in v] for k, v in lat.items()}}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh)


if __name__ == "__main__":
    main()
