"""Durable benchmark: interlock ``sqlite://`` vs raw sqlite3 vs LangGraph
interrupt/resume with ``SqliteSaver``.

Contenders, all in the same run, each repetition on a fresh database file in a
fresh temporary directory:

* **interlock sqlite://, answer from another task** -- the asking task does
  ``create``, hands the id to an answering task through an asyncio.Queue, and
  ``wait``s; the answering task calls ``resolve(id, "blue")``.  (Headline.)
* **interlock sqlite://, same task** -- ``create``; ``resolve``; ``wait`` in one
  task (no queue hop, the wait finds the request already answered).
* **raw sqlite3** -- the floor: the same two commits per cycle with the same
  pragmas (journal_mode=WAL, synchronous=NORMAL), synchronous calls, one
  connection: (1) INSERT request row + INSERT event row; (2) UPDATE request
  ``WHERE id=? AND status='pending'`` + INSERT event row.
* **raw sqlite3, interlock's own statements** -- the two statements interlock's
  cycle runs (the create, whose trigger writes the row and its event; the
  settlement, whose trigger appends its event), each its own transaction, on a
  database interlock made, with the documents it writes and its ids, and nothing
  around them (informational: how much of interlock's cycle is SQLite's work
  on interlock's schema).
* **raw sqlite3 via asyncio.to_thread** -- the same, each transaction run in the
  default thread pool from an event loop (informational: the cost of the
  thread hop an asyncio library pays when it offloads sqlite).
* **LangGraph + SqliteSaver** -- a one-node graph whose node calls
  ``interrupt()``; each cycle ``invoke``s it on a new thread_id (it stops at the
  interrupt), then resumes it with ``Command(resume="blue")``.  Its connection
  gets the same pragmas (SqliteSaver itself only sets WAL).

Then the concurrency check: 100 agents, each an asking task paired with an
answering task, all looping create -> answer-from-the-other-task -> wait on one
interlock sqlite broker; total cycles/s vs the 1-agent (serial) rate measured
in the same run.

The targets, the recorded figures and their history are in docs/explanation/benchmarks.md.

Run:

    bash bench/run.sh durable
    # or, inside a venv with langgraph, langgraph-checkpoint-sqlite and interlock:
    python bench/durable.py [--seconds 1.5] [--reps 5] [--agents 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any
from uuid import uuid4

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import collect, environment, median, paired, perf, rounds, table, verdict

ANSWER = "blue"
QUESTION = "What colour?"

# A contender is run(db_path, n) -> seconds for n cycles (setup excluded).
Runner = Callable[[str, int], float]


# ---- raw sqlite3 ------------------------------------------------------------

SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    id          TEXT PRIMARY KEY,
    status      TEXT NOT NULL,
    kind        TEXT NOT NULL,
    payload     TEXT NOT NULL,
    response    TEXT,
    created_at  TEXT NOT NULL,
    settled_at  TEXT
);
CREATE TABLE IF NOT EXISTS events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    type        TEXT NOT NULL,
    request_id  TEXT NOT NULL,
    at          TEXT NOT NULL,
    data        TEXT NOT NULL
);
"""
PAYLOAD = json.dumps({"kind": "text", "prompt": QUESTION})
RESPONSE = json.dumps({"answers": {"text": ANSWER}})


def _raw_connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(SCHEMA)
    return conn


def _raw_create(conn: sqlite3.Connection) -> str:
    rid = uuid4().hex
    now = time.time()
    conn.execute("BEGIN")
    conn.execute(
        "INSERT INTO requests (id, status, kind, payload, created_at) VALUES (?, 'pending', 'text', ?, ?)",
        (rid, PAYLOAD, now),
    )
    conn.execute(
        "INSERT INTO events (type, request_id, at, data) VALUES ('created', ?, ?, ?)",
        (rid, now, PAYLOAD),
    )
    conn.execute("COMMIT")
    return rid


def _raw_answer(conn: sqlite3.Connection, rid: str) -> bool:
    now = time.time()
    conn.execute("BEGIN")
    cur = conn.execute(
        "UPDATE requests SET status='answered', response=?, settled_at=? WHERE id=? AND status='pending'",
        (RESPONSE, now, rid),
    )
    ok = cur.rowcount == 1
    if ok:
        conn.execute(
            "INSERT INTO events (type, request_id, at, data) VALUES ('answered', ?, ?, ?)",
            (rid, now, RESPONSE),
        )
    conn.execute("COMMIT")
    return ok


def raw_sqlite(path: str, n: int) -> float:
    conn = _raw_connect(path)
    try:
        t0 = perf()
        for _ in range(n):
            rid = _raw_create(conn)
            ok = _raw_answer(conn, rid)
        elapsed = perf() - t0
        assert ok
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 2 * n
    finally:
        conn.close()
    return elapsed


def interlock_database(path: str) -> tuple[str, str]:
    """A database file made by interlock (its schema, every migration) holding nothing,
    and the request document and response interlock writes for this benchmark's question
    and answer, as stored."""
    import interlock
    from interlock import Text

    async def make() -> str:
        async with interlock.connect(f"sqlite:///{path}") as broker:
            request = await broker.create(Text(QUESTION))
            await broker.resolve(request.id, ANSWER)
            return request.id

    request_id = asyncio.run(make())
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        doc, response = conn.execute("SELECT doc, response FROM requests WHERE id = ?", (request_id,)).fetchone()
        conn.execute("DELETE FROM events")
        conn.execute("DELETE FROM requests")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return doc, response


def interlock_statements(conn: sqlite3.Connection, n: int, doc: str, response: str) -> float:
    """Seconds for `n` cycles of interlock's own two statements on `conn`, nothing around
    them: the create (an insert into the `new_requests` view, whose trigger writes the row
    and its `created` event) and the settlement (one conditional UPDATE, whose trigger
    appends its event), each its own transaction, with interlock's documents and its
    time-ordered ids; each refused on a schema newer than the store knows, as the store's are."""
    from interlock.model import new_id
    from interlock.store._sql import load_migrations
    from interlock.store.sqlite import _INSERT_REQUEST_KNOWN, _SETTLE_REQUEST_KNOWN, _refuse_write

    conn.create_function("interlock_refuse_write", 0, _refuse_write)
    known = load_migrations("sqlite")[-1].version
    ex = conn.execute
    t0 = perf()
    for _ in range(n):
        rid = new_id()
        now = int(time.time() * 1_000_000)
        args = (known, rid, "question", "pending", None, None, None, None, None, None, None, now, None, doc)
        ex(_INSERT_REQUEST_KNOWN, args)
        now = int(time.time() * 1_000_000)
        ok = ex(_SETTLE_REQUEST_KNOWN, (known, "answered", now, response, None, rid)).rowcount == 1
    elapsed = perf() - t0
    assert ok
    return elapsed


def raw_sqlite_interlock_statements(path: str, n: int) -> float:
    """`interlock_statements` on a database interlock made, with the raw floor's pragmas
    (informational: how much of interlock's cycle is SQLite's work on its schema)."""
    doc, response = interlock_database(path)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    try:
        elapsed = interlock_statements(conn, n, doc, response)
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 2 * n
    finally:
        conn.close()
    return elapsed


def raw_sqlite_to_thread(path: str, n: int) -> float:
    async def main() -> float:
        conn = _raw_connect(path)
        try:
            t0 = perf()
            for _ in range(n):
                rid = await asyncio.to_thread(_raw_create, conn)
                ok = await asyncio.to_thread(_raw_answer, conn, rid)
            elapsed = perf() - t0
            assert ok
        finally:
            conn.close()
        return elapsed

    return asyncio.run(main())


# ---- LangGraph interrupt / resume with SqliteSaver ------------------------


def langgraph_sqlite(path: str, n: int) -> float:
    from typing import TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
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

    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    saver = SqliteSaver(conn)
    saver.setup()
    app = graph.compile(checkpointer=saver)
    try:
        out: dict[str, Any] = {}
        t0 = perf()
        for _ in range(n):
            config = {"configurable": {"thread_id": uuid4().hex}}
            first = app.invoke({"question": QUESTION}, config)
            out = app.invoke(Command(resume=ANSWER), config)
        elapsed = perf() - t0
        assert "__interrupt__" in first, first
        assert out.get("answer") == ANSWER, out
    finally:
        conn.close()
    return elapsed


# ---- interlock sqlite:// ----------------------------------------------------


def _interlock_connect(path: str):  # type: ignore[no-untyped-def]
    import interlock

    return interlock.connect(f"sqlite:///{path}")  # path is absolute: sqlite:////tmp/...


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


def interlock_pingpong(path: str, n: int) -> float:
    async def main() -> float:
        async with _interlock_connect(path) as broker:
            t0 = perf()
            resp = await _agent(broker, n)
            elapsed = perf() - t0
            assert resp is not None and resp.answers == {"text": ANSWER}, resp
        return elapsed

    return asyncio.run(main())


def interlock_same_task(path: str, n: int) -> float:
    async def main() -> float:
        from interlock import Text

        async with _interlock_connect(path) as broker:
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


def interlock_agents(path: str, agents: int, per_agent: int) -> float:
    async def main() -> float:
        async with _interlock_connect(path) as broker:
            t0 = perf()
            resps = await asyncio.gather(*(_agent(broker, per_agent) for _ in range(agents)))
            elapsed = perf() - t0
            assert all(r is not None and r.answers == {"text": ANSWER} for r in resps)
        return elapsed

    return asyncio.run(main())


# ---- driver -----------------------------------------------------------------

SERIAL: dict[str, Runner] = {
    "interlock": interlock_pingpong,
    "interlock-same-task": interlock_same_task,
    "raw": raw_sqlite,
    "raw-schema": raw_sqlite_interlock_statements,
    "raw-thread": raw_sqlite_to_thread,
    "langgraph": langgraph_sqlite,
}
LABEL = {
    "interlock": "interlock sqlite:// (answer from another task)",
    "interlock-same-task": "interlock sqlite:// (create; resolve; wait in one task)",
    "raw": "raw sqlite3 (same 2 commits/cycle, sync)",
    "raw-schema": "raw sqlite3, interlock's own 2 statements on its schema",
    "raw-thread": "raw sqlite3, each tx via asyncio.to_thread",
    "langgraph": "LangGraph interrupt/resume + SqliteSaver",
}


class DBs:
    """Fresh database file for every run, all under one temporary directory."""

    def __init__(self, root: str) -> None:
        self.root, self.i = root, 0

    def new(self, tag: str) -> str:
        self.i += 1
        return os.path.join(self.root, f"{tag}-{self.i}.db")


def available(wanted: list[str] | None) -> list[str]:
    names = list(SERIAL)
    try:
        import interlock

        interlock.connect  # noqa: B018
    except Exception as exc:
        print(f"!! interlock not importable ({exc!r}); benchmarking the others only")
        names = [n for n in names if not n.startswith("interlock") and n != "raw-schema"]
    try:
        import langgraph.checkpoint.sqlite
        import langgraph.graph  # noqa: F401
    except Exception as exc:
        print(f"!! langgraph not importable ({exc!r}); skipping it")
        names.remove("langgraph")
    return [n for n in names if not wanted or n in wanted]


def calibrate(fn: Runner, dbs: DBs, tag: str, seconds: float, probe: int) -> int:
    """Warm up, then pick a cycle count that takes about `seconds` per rep."""
    fn(dbs.new(tag), max(5, probe // 10))  # warm-up: imports, first-use caches
    rate = probe / fn(dbs.new(tag), probe)
    return max(20, int(rate * seconds))


def run(args: argparse.Namespace) -> int:
    names = available(args.only)
    print(environment(["interlock", "langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite"]))
    print(f"pragmas: journal_mode=WAL, synchronous=NORMAL; db files under {tempfile.gettempdir()}")
    print()

    with tempfile.TemporaryDirectory(prefix="interlock-bench-") as root:
        dbs = DBs(root)
        probe = {"langgraph": 30, "raw": 2000, "raw-schema": 1000, "raw-thread": 500}
        counts = {n: calibrate(SERIAL[n], dbs, n, args.seconds, probe.get(n, 300)) for n in names}
        samples: dict[str, list[float]] = {n: [] for n in names}
        for order in rounds(names, args.reps):
            for n in order:
                collect()
                samples[n].append(counts[n] / SERIAL[n](dbs.new(n), counts[n]))
        med = {n: median(v) for n, v in samples.items()}

        print(
            f"## Durable cycle, serial: create -> answer -> wake ({args.reps} reps of "
            f"~{args.seconds}s, fresh db per rep; median, ratios = median of per-round ratios)"
        )
        rows = [
            [
                LABEL[n],
                med[n],
                min(samples[n]),
                max(samples[n]),
                1e6 / med[n],
                counts[n],
                _pratio(samples, n, "raw"),
                _pratio(samples, n, "langgraph"),
            ]
            for n in names
        ]
        print(
            table(
                ["contender", "cycles/s", "min", "max", "us/cycle", "cycles/rep", "x raw sqlite3", "x LangGraph"], rows
            )
        )
        print()

        conc: list[float] = []
        serial: list[float] = []
        if "interlock" in names and args.agents:
            per_agent = max(2, int(med["interlock"] * args.seconds / args.agents))
            total = per_agent * args.agents
            interlock_agents(dbs.new("agents"), args.agents, max(1, per_agent // 5))  # warm-up
            for _ in range(args.reps):
                collect()
                conc.append(total / interlock_agents(dbs.new("agents"), args.agents, per_agent))
                collect()
                serial.append(total / interlock_pingpong(dbs.new("serial"), total))
            c, s = median(conc), median(serial)
            cs = paired(conc, serial)
            print(
                f"## interlock sqlite://, {args.agents} concurrent agents vs 1 "
                f"({args.agents} x {per_agent} = {total:,} cycles per rep, {args.reps} reps, "
                f"median, alternating)"
            )
            print(
                table(
                    ["mode", "cycles/s", "min", "max", "x serial"],
                    [
                        ["1 agent (serial)", s, min(serial), max(serial), "1.00x"],
                        [f"{args.agents} agents (one broker)", c, min(conc), max(conc), f"{cs:.2f}x"],
                    ],
                )
            )
            print()

        if "interlock" in names and "raw" in names:
            # Targets use the median of per-round ratios (see _common.paired).
            r = paired(samples["interlock"], samples["raw"])
            rows = [["interlock >= 60% of raw sqlite3 (answer from another task)", f"{r:.0%}", verdict(r >= 0.6)]]
            if "interlock-same-task" in med:
                r2 = paired(samples["interlock-same-task"], samples["raw"])
                rows.append(["interlock >= 60% of raw sqlite3 (same task)", f"{r2:.0%}", verdict(r2 >= 0.6)])
            if conc:
                c, s = paired(conc, serial), 1.0
                # Rep-to-rep spread on this machine is several percent; say so
                # instead of calling 0.99x a miss or 1.01x a clear win.
                tag = verdict(c >= s) if abs(c / s - 1) > 0.05 else f"{verdict(c >= s)} (within the +-5% noise)"
                rows.append([f"{args.agents} agents >= serial rate", f"{c / s:.2f}x", tag])
            print("## Targets (ratios: median of per-round ratios)")
            print(table(["target", "measured", "verdict"], rows))

    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(
                {"serial": samples, "counts": counts, "agents": conc, "agents_serial": serial, "args": vars(args)},
                fh,
                indent=1,
            )
    return 0


def _pratio(samples: dict[str, list[float]], a: str, b: str) -> str:
    if a not in samples or b not in samples:
        return "-"
    return f"{paired(samples[a], samples[b]):.2f}x"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=1.5, help="target duration of one rep")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--agents", type=int, default=100, help="0 skips the concurrency run")
    p.add_argument("--only", nargs="*", choices=list(SERIAL))
    p.add_argument("--json", help="also write raw samples to this file")
    return run(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
