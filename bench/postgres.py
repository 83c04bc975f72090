"""PostgreSQL benchmark: interlock ``postgresql://`` against the raw drivers, raw NOTIFY,
and LangGraph interrupt/resume with ``PostgresSaver``.

Every repetition runs on a fresh database of the local server (created here, dropped at
the end). Contenders of the serial cycle (create -> answer -> wake):

* **interlock, answer from another task** -- ``create``; the id goes to an answering
  task over an asyncio.Queue, which calls ``resolve``; the asker ``wait``s. (Headline.)
* **interlock, same task** -- ``create``; ``resolve``; ``wait`` in one task.
* **raw asyncpg, interlock's functions** -- the same two commits with no library around
  them: ``SELECT interlock_insert(...)`` then ``SELECT interlock_settle(...)`` on
  interlock's own schema, one round trip each (the floor of interlock's design).
* **raw asyncpg, explicit transactions** -- the same rows in the same two transactions
  written the usual way on interlock's schema: BEGIN; INSERT request; INSERT event;
  COMMIT, then BEGIN; UPDATE ... WHERE status = 'pending'; INSERT event; COMMIT.
* **raw asyncpg / psycopg, plain schema** -- the same two transactions on a bare
  two-table schema (no indexes beyond the keys, no ordering trigger): what a driver
  does with nothing on top.
* **raw psycopg, interlock's functions** -- as the asyncpg row, through psycopg 3
  (async, autocommit): the driver comparison behind interlock's choice of asyncpg.
* **LangGraph + PostgresSaver** -- a one-node graph whose node calls ``interrupt()``:
  ``invoke`` on a new thread (it stops at the interrupt), then ``Command(resume=...)``.

Then: answer -> wake latency across processes (a waiting child process, the answer
given here), p50/p99, against raw LISTEN/NOTIFY between two processes, each run on a
fresh database after ``WARM_UP`` cycles that are not counted (the first ones open
connections and fill the server's caches); and throughput
with ``--agents`` concurrent agents (an asking and an answering task each) on one
broker, and split over two processes, against the serial rate.

The targets, the recorded figures and their history are in docs/explanation/benchmarks.md.

Run (a venv with interlock, asyncpg, psycopg[binary], psycopg-pool, langgraph and
langgraph-checkpoint-postgres; PostgreSQL on 127.0.0.1:5432 with trust auth):

    python bench/postgres.py [--seconds 1.5] [--reps 5] [--samples 2000] [--agents 64]
                             [--only interlock raw-fn ...] [--server postgresql://...] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any
from uuid import uuid4

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import collect, environment, median, paired, perf, rounds, table, verdict

# Nothing else is imported from bench/, whose http.py would shadow the standard library's
# `http` for everything imported later (LangGraph's dependencies among them).
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]

ANSWER = "blue"
QUESTION = "What colour?"
SERVER = "postgresql://postgres@127.0.0.1:5432"

PLAIN_SCHEMA = """
CREATE TABLE requests (
    id          text PRIMARY KEY,
    status      text NOT NULL,
    kind        text NOT NULL,
    payload     text NOT NULL,
    response    text,
    created_at  timestamptz NOT NULL,
    settled_at  timestamptz
);
CREATE TABLE events (
    id          bigserial PRIMARY KEY,
    type        text NOT NULL,
    request_id  text NOT NULL,
    at          timestamptz NOT NULL
);
"""
PAYLOAD = json.dumps({"kind": "text", "prompt": QUESTION})
RESPONSE = json.dumps({"answers": {"text": ANSWER}})
# Documents of the size interlock stores for a one-Text request.
DOC = json.dumps(
    {
        "id": "0" * 32,
        "kind": "question",
        "status": "pending",
        "asks": [
            {"type": "text", "id": "text", "prompt": QUESTION, "required": True, "multiline": False, "max_length": None}
        ],
        "title": "",
        "details": "",
        "context": None,
        "to": None,
        "requester": None,
        "origin": {},
        "created_at": "2026-01-01T00:00:00.000000+00:00",
        "expires_at": None,
        "idempotency_key": None,
        "response": None,
    },
    separators=(",", ":"),
)
ANSWERED = json.dumps(
    {"answers": {"text": ANSWER}, "by": None, "via": "python", "reason": "", "cause": None, "at": "2026-01-01"},
    separators=(",", ":"),
)

# A contender is run(database_url, n) -> seconds for n cycles (setup excluded).
Runner = Callable[[str, int], float]


# ---- databases --------------------------------------------------------------------------


def psql(sql: str, database: str = "postgres") -> str:
    done = subprocess.run(
        ["psql", f"{SERVER}/{database}", "-X", "-v", "ON_ERROR_STOP=1", "-Atqc", sql],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"psql failed on {sql!r}: {done.stderr.strip()}")
    return done.stdout.strip()


class Databases:
    """Fresh databases: interlock's schema (cloned from a template migrated once), a
    plain two-table schema, or empty; all dropped by `drop_all`."""

    def __init__(self) -> None:
        self.prefix = f"interlock_bench_{os.getpid()}_{secrets.token_hex(2)}"
        self.made: list[str] = []
        self.template: str | None = None

    def _new(self, template: str = "template0") -> str:
        name = f"{self.prefix}_{len(self.made)}"
        psql(f"CREATE DATABASE {name} TEMPLATE {template}")
        self.made.append(name)
        return name

    def interlock(self) -> str:
        if self.template is None:
            self.template = self._new()
            import interlock

            async def migrate() -> None:
                async with interlock.connect(f"{SERVER}/{self.template}"):
                    pass

            asyncio.run(migrate())
        return f"{SERVER}/{self._new(self.template)}"

    def plain(self) -> str:
        name = self._new()
        psql(PLAIN_SCHEMA, name)
        return f"{SERVER}/{name}"

    def empty(self) -> str:
        return f"{SERVER}/{self._new()}"

    def drop_all(self) -> None:
        for name in self.made:
            psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        self.made.clear()
        self.template = None


# ---- raw drivers ------------------------------------------------------------------------

INSERT_FN = (
    "SELECT created FROM interlock_insert($1, 'question', NULL, NULL, NULL, NULL, NULL, NULL, NULL, $2, NULL, $3)"
)
SETTLE_FN = "SELECT interlock_settle($1, 'answered', $2, $3)"
TX_INSERT_REQUEST = (
    "INSERT INTO requests (id, kind, status, created_at, doc) VALUES ($1, 'question', 'pending', $2, $3)"
)
TX_INSERT_EVENT = "INSERT INTO events (type, request_id, at) VALUES ($1, $2, $3)"
TX_SETTLE = (
    "UPDATE requests SET status = 'answered', settled_at = $1, response = $2 WHERE id = $3 AND status = 'pending'"
)
PLAIN_INSERT_REQUEST = (
    "INSERT INTO requests (id, status, kind, payload, created_at) VALUES ($1, 'pending', 'text', $2, $3)"
)
PLAIN_INSERT_EVENT = "INSERT INTO events (type, request_id, at) VALUES ($1, $2, $3)"
PLAIN_SETTLE = (
    "UPDATE requests SET status = 'answered', response = $1, settled_at = $2 WHERE id = $3 AND status = 'pending'"
)


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


def raw_asyncpg_fn(url: str, n: int) -> float:
    import asyncpg

    async def main() -> float:
        conn = await asyncpg.connect(url)
        try:
            t0 = perf()
            for _ in range(n):
                rid = uuid4().hex
                await conn.fetchval(INSERT_FN, rid, _now(), DOC)
                ok = await conn.fetchval(SETTLE_FN, rid, _now(), ANSWERED)
            elapsed = perf() - t0
            assert ok is not None
        finally:
            await conn.close()
        return elapsed

    return asyncio.run(main())


def raw_asyncpg_tx(url: str, n: int) -> float:
    import asyncpg

    async def main() -> float:
        conn = await asyncpg.connect(url)
        try:
            t0 = perf()
            for _ in range(n):
                rid = uuid4().hex
                now = _now()
                async with conn.transaction():
                    await conn.execute(TX_INSERT_REQUEST, rid, now, DOC)
                    await conn.execute(TX_INSERT_EVENT, "created", rid, now)
                now = _now()
                async with conn.transaction():
                    status = await conn.execute(TX_SETTLE, now, ANSWERED, rid)
                    if status == "UPDATE 1":
                        await conn.execute(TX_INSERT_EVENT, "answered", rid, now)
            elapsed = perf() - t0
            assert status == "UPDATE 1"
        finally:
            await conn.close()
        return elapsed

    return asyncio.run(main())


def raw_asyncpg_plain(url: str, n: int) -> float:
    import asyncpg

    async def main() -> float:
        conn = await asyncpg.connect(url)
        try:
            t0 = perf()
            for _ in range(n):
                rid = uuid4().hex
                now = _now()
                async with conn.transaction():
                    await conn.execute(PLAIN_INSERT_REQUEST, rid, PAYLOAD, now)
                    await conn.execute(PLAIN_INSERT_EVENT, "created", rid, now)
                now = _now()
                async with conn.transaction():
                    status = await conn.execute(PLAIN_SETTLE, RESPONSE, now, rid)
                    if status == "UPDATE 1":
                        await conn.execute(PLAIN_INSERT_EVENT, "answered", rid, now)
            elapsed = perf() - t0
            assert status == "UPDATE 1"
        finally:
            await conn.close()
        return elapsed

    return asyncio.run(main())


def _pg(query: str) -> str:
    """$n placeholders as psycopg's %s."""
    import re

    return re.sub(r"\$\d+", "%s", query)


def raw_psycopg_plain(url: str, n: int) -> float:
    import psycopg

    insert_request, insert_event, settle = _pg(PLAIN_INSERT_REQUEST), _pg(PLAIN_INSERT_EVENT), _pg(PLAIN_SETTLE)

    async def main() -> float:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        try:
            t0 = perf()
            for _ in range(n):
                rid = uuid4().hex
                now = _now()
                async with conn.transaction():
                    await conn.execute(insert_request, (rid, PAYLOAD, now))
                    await conn.execute(insert_event, ("created", rid, now))
                now = _now()
                async with conn.transaction():
                    cur = await conn.execute(settle, (RESPONSE, now, rid))
                    if cur.rowcount == 1:
                        await conn.execute(insert_event, ("answered", rid, now))
            elapsed = perf() - t0
            assert cur.rowcount == 1
        finally:
            await conn.close()
        return elapsed

    return asyncio.run(main())


def raw_psycopg_fn(url: str, n: int) -> float:
    import psycopg

    insert, settle = _pg(INSERT_FN), _pg(SETTLE_FN)

    async def main() -> float:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        try:
            t0 = perf()
            for _ in range(n):
                rid = uuid4().hex
                await (await conn.execute(insert, (rid, _now(), DOC))).fetchone()
                row = await (await conn.execute(settle, (rid, _now(), ANSWERED))).fetchone()
            elapsed = perf() - t0
            assert row is not None and row[0] is not None
        finally:
            await conn.close()
        return elapsed

    return asyncio.run(main())


# ---- LangGraph interrupt / resume with PostgresSaver ------------------------------------


def langgraph_postgres(url: str, n: int) -> float:
    from typing import TypedDict

    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command, interrupt

    class State(TypedDict, total=False):
        question: str
        answer: str

    def ask(state: State) -> dict[str, Any]:
        return {"answer": interrupt(state["question"])}

    graph = StateGraph(State)
    graph.add_node("ask", ask)
    graph.add_edge(START, "ask")
    graph.add_edge("ask", END)

    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        app = graph.compile(checkpointer=saver)
        out: dict[str, Any] = {}
        t0 = perf()
        for _ in range(n):
            config = {"configurable": {"thread_id": uuid4().hex}}
            first = app.invoke({"question": QUESTION}, config)
            out = app.invoke(Command(resume=ANSWER), config)
        elapsed = perf() - t0
    assert "__interrupt__" in first, first
    assert out.get("answer") == ANSWER, out
    return elapsed


# ---- interlock postgresql:// --------------------------------------------------------------


async def _agent(broker: Any, n: int) -> Any:
    """One asking task + its answering task; n create -> resolve -> wait cycles."""
    from interlock import Text

    q: asyncio.Queue[str | None] = asyncio.Queue()

    async def answerer() -> None:
        resolve = broker.resolve
        while (rid := await q.get()) is not None:
            await resolve(rid, ANSWER)

    task = asyncio.create_task(answerer())
    create, wait = broker.create, broker.wait
    resp = None
    for _ in range(n):
        req = await create(Text(QUESTION))
        q.put_nowait(req.id)
        resp = await wait(req.id)
    q.put_nowait(None)
    await task
    return resp


def interlock_pingpong(url: str, n: int) -> float:
    import interlock

    async def main() -> float:
        async with interlock.connect(url) as broker:
            t0 = perf()
            resp = await _agent(broker, n)
            elapsed = perf() - t0
            assert resp is not None and resp.answers == {"text": ANSWER}, resp
        return elapsed

    return asyncio.run(main())


def interlock_same_task(url: str, n: int) -> float:
    import interlock
    from interlock import Text

    async def main() -> float:
        async with interlock.connect(url) as broker:
            create, resolve, wait = broker.create, broker.resolve, broker.wait
            resp = None
            t0 = perf()
            for _ in range(n):
                req = await create(Text(QUESTION))
                await resolve(req.id, ANSWER)
                resp = await wait(req.id)
            elapsed = perf() - t0
            assert resp is not None and resp.answers == {"text": ANSWER}, resp
        return elapsed

    return asyncio.run(main())


def interlock_agents(url: str, agents: int, per_agent: int, max_size: int) -> float:
    import interlock

    async def main() -> float:
        async with interlock.connect(url, max_size=max_size) as broker:
            t0 = perf()
            resps = await asyncio.gather(*(_agent(broker, per_agent) for _ in range(agents)))
            elapsed = perf() - t0
            assert all(r is not None and r.answers == {"text": ANSWER} for r in resps)
        return elapsed

    return asyncio.run(main())


AGENTS_CHILD = """
    import asyncio, sys, time, interlock
    from interlock import Text

    async def agent(broker, n):
        q = asyncio.Queue()

        async def answerer():
            while (rid := await q.get()) is not None:
                await broker.resolve(rid, "blue")

        task = asyncio.create_task(answerer())
        for _ in range(n):
            request = await broker.create(Text("What colour?"))
            q.put_nowait(request.id)
            await broker.wait(request.id)
        q.put_nowait(None)
        await task

    async def main():
        agents, per_agent = int(sys.argv[2]), int(sys.argv[3])
        async with interlock.connect(sys.argv[1], max_size=int(sys.argv[4])) as broker:
            print("ready", flush=True)
            sys.stdin.readline()  # go
            await asyncio.gather(*(agent(broker, per_agent) for _ in range(agents)))
        print("done", flush=True)

    asyncio.run(main())
"""


def interlock_agents_processes(url: str, procs: int, agents: int, per_agent: int, max_size: int) -> float:
    """`agents` agents split over `procs` processes on one database: wall time from "go"
    until the last one is done."""
    children = [Child(AGENTS_CHILD, url, str(agents // procs), str(per_agent), str(max_size)) for _ in range(procs)]
    t0 = perf()
    for child in children:
        child.send("go")
    for child in children:
        assert child.readline() == "done"
    elapsed = perf() - t0
    for child in children:
        child.close()
    return elapsed


# ---- answer -> wake latency across processes ----------------------------------------------

WAITER_CHILD = """
    import asyncio, sys, time, interlock

    async def main():
        loop = asyncio.get_running_loop()
        lines = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(lines), sys.stdin)
        # Polls once an hour: every wake-up measured comes through NOTIFY.
        async with interlock.connect(sys.argv[1] + "?poll_interval=3600") as broker:
            print("ready", flush=True)
            while request_id := (await lines.readline()).decode().strip():
                task = asyncio.create_task(broker.wait(request_id))
                for _ in range(3):
                    await asyncio.sleep(0)
                print("waiting", flush=True)
                await task
                print(time.perf_counter_ns(), flush=True)

    asyncio.run(main())
"""

NOTIFY_CHILD = """
    import asyncio, sys, time, asyncpg

    async def main():
        loop = asyncio.get_running_loop()
        lines = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(lines), sys.stdin)
        conn = await asyncpg.connect(sys.argv[1])
        woke = asyncio.Queue()
        # The answer's commit sends the settlement's own note instead of its event's bare
        # notification: the note is the wake-up measured.
        settled = sys.argv[2] == "interlock"

        def heard(conn, pid, channel, payload):
            if payload or not settled:
                woke.put_nowait(time.perf_counter_ns())

        await conn.add_listener(sys.argv[2], heard)
        print("ready", flush=True)
        while (await lines.readline()).strip():
            print("waiting", flush=True)
            print(await woke.get(), flush=True)

    asyncio.run(main())
"""


class Child:
    def __init__(self, code: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        assert self.readline() == "ready"

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def readline(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the child process ended early")
        return line.strip()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)


WARM_UP = 20
"""Cycles each latency run makes before it counts any."""


def latency_interlock(url: str, samples: int) -> tuple[list[float], list[float]]:
    """(answer call -> wake, commit acknowledged -> wake) in microseconds."""
    import interlock
    from interlock import Text

    child = Child(WAITER_CHILD, url)
    from_call: list[float] = []
    from_ack: list[float] = []

    async def main() -> None:
        async with interlock.connect(url) as broker:
            for i in range(WARM_UP + samples):
                request = await broker.create(Text(QUESTION))
                child.send(request.id)
                assert child.readline() == "waiting"
                t0 = time.perf_counter_ns()
                assert await broker.resolve(request.id, ANSWER)
                t1 = time.perf_counter_ns()
                woke = int(child.readline())
                if i >= WARM_UP:
                    from_call.append((woke - t0) / 1000)
                    from_ack.append((woke - t1) / 1000)

    try:
        asyncio.run(main())
    finally:
        child.close()
    return from_call, from_ack


def latency_notify(url: str, samples: int, *, durable: bool = False) -> tuple[list[float], list[float]]:
    """Raw asyncpg: a bare `NOTIFY` or, `durable`, the very commit interlock makes for an
    answer (`interlock_settle`, whose event insert NOTIFYs), to a listener callback in
    another process."""
    import asyncpg

    child = Child(NOTIFY_CHILD, url, "interlock" if durable else "bench")
    from_call: list[float] = []
    from_ack: list[float] = []

    async def main() -> None:
        conn = await asyncpg.connect(url)
        try:
            for i in range(WARM_UP + samples):
                rid = uuid4().hex
                if durable:  # the row alone: no event, so no notification before the one measured
                    await conn.execute(TX_INSERT_REQUEST, rid, _now(), DOC)
                child.send("go")
                assert child.readline() == "waiting"
                t0 = time.perf_counter_ns()
                if durable:
                    await conn.fetchval(SETTLE_FN, rid, _now(), ANSWERED)
                else:
                    await conn.execute("NOTIFY bench")
                t1 = time.perf_counter_ns()
                woke = int(child.readline())
                if i >= WARM_UP:
                    from_call.append((woke - t0) / 1000)
                    from_ack.append((woke - t1) / 1000)
        finally:
            await conn.close()

    try:
        asyncio.run(main())
    finally:
        child.close()
    return from_call, from_ack


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---- driver ------------------------------------------------------------------------------

SERIAL: dict[str, tuple[Runner, str]] = {
    "interlock": (interlock_pingpong, "interlock"),
    "interlock-same-task": (interlock_same_task, "interlock"),
    "raw-fn": (raw_asyncpg_fn, "interlock"),
    "raw-tx": (raw_asyncpg_tx, "interlock"),
    "raw-plain": (raw_asyncpg_plain, "plain"),
    "psycopg-plain": (raw_psycopg_plain, "plain"),
    "psycopg-fn": (raw_psycopg_fn, "interlock"),
    "langgraph": (langgraph_postgres, "empty"),
}
LABEL = {
    "interlock": "interlock postgresql:// (answer from another task)",
    "interlock-same-task": "interlock postgresql:// (create; resolve; wait in one task)",
    "raw-fn": "raw asyncpg, interlock's functions (1 round trip per commit)",
    "raw-tx": "raw asyncpg, interlock's schema, BEGIN..COMMIT",
    "raw-plain": "raw asyncpg, plain schema, BEGIN..COMMIT",
    "psycopg-plain": "raw psycopg 3, plain schema, BEGIN..COMMIT",
    "psycopg-fn": "raw psycopg 3, interlock's functions",
    "langgraph": "LangGraph interrupt/resume + PostgresSaver",
}
PROBE = {"langgraph": 30}


def available(wanted: list[str] | None) -> list[str]:
    names = list(SERIAL)
    for module, dependents in (
        ("psycopg", ["psycopg-plain", "psycopg-fn"]),
        ("langgraph.checkpoint.postgres", ["langgraph"]),
    ):
        try:
            __import__(module)
        except ImportError as exc:
            print(f"!! {module} not importable ({exc!r}); skipping {', '.join(dependents)}")
            names = [n for n in names if n not in dependents]
    return [n for n in names if not wanted or n in wanted]


def run(args: argparse.Namespace) -> int:
    global SERVER
    SERVER = args.server
    names = available(args.only)
    print(
        environment(
            ["interlock", "asyncpg", "psycopg", "langgraph", "langgraph-checkpoint", "langgraph-checkpoint-postgres"]
        )
    )
    print(
        f"postgresql {psql('SHOW server_version')}, synchronous_commit={psql('SHOW synchronous_commit')}, "
        f"fsync={psql('SHOW fsync')}, {SERVER}"
    )
    print()
    dbs = Databases()
    results: dict[str, Any] = {"args": vars(args)}
    targets: list[list[Any]] = []
    try:
        if "serial" not in args.skip:
            samples = serial_section(args, names, dbs)
            results["serial"] = samples
            for base in ("raw-fn", "raw-tx", "raw-plain"):
                if "interlock" in samples and base in samples:
                    r = paired(samples["interlock"], samples[base])
                    targets.append([f"interlock >= 80% of {LABEL[base]}", f"{r:.0%}", verdict(r >= 0.8)])
        if args.samples and "latency" not in args.skip:
            lat = latency_section(args, dbs)
            results["latency"] = lat
            p99 = pct(lat["interlock"][0], 0.99)
            targets.append(
                ["answer -> wake p99 <= 2 ms (from the resolve call)", f"{p99 / 1000:.2f} ms", verdict(p99 <= 2000)]
            )
            p99 = pct(lat["interlock"][1], 0.99)
            targets.append(
                ["answer -> wake p99 <= 2 ms (from its commit)", f"{p99 / 1000:.2f} ms", verdict(p99 <= 2000)]
            )
        if args.agents and "agents" not in args.skip:
            results["agents"] = agents_section(args, dbs)
        if targets:
            print("## Targets (ratios: median of per-round ratios)")
            print(table(["target", "measured", "verdict"], targets))
    finally:
        dbs.drop_all()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)
    return 0


def serial_section(args: argparse.Namespace, names: list[str], dbs: Databases) -> dict[str, list[float]]:
    fresh = {"interlock": dbs.interlock, "plain": dbs.plain, "empty": dbs.empty}
    counts: dict[str, int] = {}
    for n in names:
        fn, kind = SERIAL[n]
        probe = PROBE.get(n, 300)
        fn(fresh[kind](), max(5, probe // 10))  # warm-up
        counts[n] = max(20, int(probe / fn(fresh[kind](), probe) * args.seconds))
    samples: dict[str, list[float]] = {n: [] for n in names}
    for order in rounds(names, args.reps):
        for n in order:
            fn, kind = SERIAL[n]
            url = fresh[kind]()
            collect()
            samples[n].append(counts[n] / fn(url, counts[n]))
        dbs.drop_all()
    med = {n: median(v) for n, v in samples.items()}
    print(
        f"## Durable cycle, serial: create -> answer -> wake ({args.reps} reps of ~{args.seconds}s, "
        "fresh database per rep; median, ratios = median of per-round ratios)"
    )
    rows = [
        [LABEL[n], med[n], min(samples[n]), max(samples[n]), 1e6 / med[n], counts[n]]
        + [_pratio(samples, n, b) for b in ("raw-fn", "raw-tx", "raw-plain", "langgraph")]
        for n in names
    ]
    headers = ["contender", "cycles/s", "min", "max", "us/cycle", "cycles/rep"]
    print(table([*headers, "x raw fn", "x raw tx", "x raw plain", "x LangGraph"], rows))
    print()
    return samples


def latency_section(args: argparse.Namespace, dbs: Databases) -> dict[str, tuple[list[float], list[float]]]:
    chunk = max(1, args.samples // args.reps)
    paths: dict[str, Callable[[str, int], tuple[list[float], list[float]]]] = {
        "interlock": latency_interlock,
        "commit": lambda url, n: latency_notify(url, n, durable=True),
        "notify": latency_notify,
    }
    lat: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in paths}
    for order in rounds(list(paths), args.reps):
        for which in order:
            got = paths[which](dbs.interlock(), chunk)
            lat[which][0].extend(got[0])
            lat[which][1].extend(got[1])
        dbs.drop_all()
    print(
        f"## Answer -> wake across processes ({len(lat['interlock'][0])} samples each, in {args.reps} "
        "rotating runs; microseconds)"
    )
    rows = []
    for which, label in (
        ("interlock", "interlock: resolve() -> wait() returns in the other process"),
        ("commit", "raw asyncpg: the same answer commit (interlock_settle) -> LISTEN callback"),
        ("notify", "raw asyncpg: bare NOTIFY -> LISTEN callback in the other process"),
    ):
        call, ack = lat[which]
        rows.append([label, pct(call, 0.5), pct(call, 0.99), max(call), pct(ack, 0.5), pct(ack, 0.99)])
    print(table(["path", "p50", "p99", "max", "p50 after commit ack", "p99 after commit ack"], rows))
    print()
    return lat


def agents_section(args: argparse.Namespace, dbs: Databases) -> dict[str, list[float]]:
    rate = 200 / interlock_pingpong(dbs.interlock(), 200)
    per_agent = max(2, int(rate * args.seconds * 2 / args.agents))
    total = per_agent * args.agents
    interlock_agents(dbs.interlock(), args.agents, max(1, per_agent // 5), args.pool)  # warm-up
    conc: list[float] = []
    conc2: list[float] = []
    serial: list[float] = []
    for _ in range(args.reps):
        collect()
        conc.append(total / interlock_agents(dbs.interlock(), args.agents, per_agent, args.pool))
        conc2.append(total / interlock_agents_processes(dbs.interlock(), 2, args.agents, per_agent, args.pool))
        collect()
        serial.append(total / interlock_pingpong(dbs.interlock(), total))
        dbs.drop_all()
    print(
        f"## interlock postgresql://, {args.agents} concurrent agents vs 1 ({args.agents} x {per_agent} = "
        f"{total:,} cycles per rep, {args.reps} reps, pool max_size={args.pool}, median)"
    )
    rows = [
        ["1 agent (serial)", median(serial), min(serial), max(serial), "1.00x"],
        [f"{args.agents} agents, one process", median(conc), min(conc), max(conc), f"{paired(conc, serial):.2f}x"],
        [
            f"{args.agents} agents, two processes",
            median(conc2),
            min(conc2),
            max(conc2),
            f"{paired(conc2, serial):.2f}x",
        ],
    ]
    print(table(["mode", "cycles/s", "min", "max", "x serial"], rows))
    print()
    return {"one_process": conc, "two_processes": conc2, "serial": serial}


def _pratio(samples: dict[str, list[float]], a: str, b: str) -> str:
    if a not in samples or b not in samples:
        return "-"
    return f"{paired(samples[a], samples[b]):.2f}x"


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=1.5, help="target duration of one rep")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--samples", type=int, default=2000, help="latency samples per path; 0 skips")
    p.add_argument("--agents", type=int, default=64, help="0 skips the concurrency run")
    p.add_argument("--pool", type=int, default=10, help="pool max_size for the concurrency run")
    p.add_argument("--only", nargs="*", choices=list(SERIAL), help="contenders of the serial cycle")
    p.add_argument(
        "--skip", nargs="*", default=[], choices=["serial", "latency", "agents"], help="sections to leave out"
    )
    p.add_argument("--server", default=SERVER, help="the PostgreSQL server (its databases are made and dropped)")
    p.add_argument("--json", help="also write raw samples to this file")
    return run(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
