"""Where a park-and-resume cycle's time goes: each phase's wall time, the client's CPU
time a cycle and, on PostgreSQL, the server's time in each of interlock's functions.

The cycle is bench/park_resume.py's interlock one: a worker waits for a ready run
(`run_once(wait=30)`), the agent parks (`start_parked`), the person answers (`resolve`,
whose transaction hands the run to the waiting worker), the worker resumes and
completes it. Phases: park (the `start_parked` call), answer (the `resolve` call) and
resume (from the answer's return to the completed run).

    python bench/park_phases.py sqlite     [--cycles 2000]
    python bench/park_phases.py postgres   [--cycles 1000]
    python bench/park_phases.py memory     [--cycles 2000]   # the same cycle with no database: its Python
    python bench/park_phases.py sqlite --statements          # and the time in each SQLite statement
    python bench/park_phases.py sqlite --pages               # and the pages a cycle writes, by b-tree

`--statements` times each `execute` of the store's connections (the checkpoints' in
their worker thread, beside the cycle, not in it), which adds a little to every cycle.

PostgreSQL at 127.0.0.1:5432 (`BENCH_PG`), trust auth; a fresh database each run, with
`track_functions = 'all'` so `pg_stat_user_functions` says what each function cost
(self time excludes the functions and triggers it called). Times move with the machine's
load; what does not: the rows written a cycle in each table (inserted, updated, of those
HOT, deleted) and the WAL records and bytes of the cycle's database (`pg_walinspect`, a
superuser's extension: what the cycles' writes cost in pages and index entries).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import secrets
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import environment, median

SERVER = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
ARGUMENTS = {"to": "ops@example.com", "subject": "deploy 1.4.2"}
WARM = 50


def psql(url: str, sql: str) -> str:
    done = subprocess.run(["psql", url, "-X", "-v", "ON_ERROR_STOP=1", "-c", sql], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip())
    return done.stdout


async def cycles(url: str, n: int, measured: Any = None) -> dict[str, Any]:
    import interlock
    from interlock import Confirm
    from interlock.runs import Worker

    phases: dict[str, list[float]] = {"park": [], "answer": [], "resume": []}

    async def resume(run: Any, requests: Any) -> dict[str, Any]:
        return {"sent": dict(ARGUMENTS)}

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
            resuming = asyncio.create_task(worker.run_once(wait=30.0))
            # It looks, finds nothing ready and waits, before the agent parks: each turn
            # of the loop this takes is counted in the cycle.
            while not broker.claims_waiting:  # noqa: ASYNC110 (a turn of the loop at a time, no time waited)
                await asyncio.sleep(0)
            t0 = time.perf_counter()
            await broker.start_parked("mailer", [request], state={"step": 1})
            t1 = time.perf_counter()
            await broker.resolve(request.id, {"approve": True}, by="alice")
            t2 = time.perf_counter()
            done = await asyncio.wait_for(resuming, 60)
            t3 = time.perf_counter()
            assert done is not None and done.status.value == "completed", done
            phases["park"].append(t1 - t0)
            phases["answer"].append(t2 - t1)
            phases["resume"].append(t3 - t2)

        for _ in range(WARM):
            await cycle()
        for values in phases.values():
            values.clear()
        start = await asyncio.to_thread(measured.start) if measured is not None else None
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(n):
            await cycle()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        writes = await asyncio.to_thread(measured.stop, start) if measured is not None else ""
    return {"cycles/s": n / wall, "cpu_us": cpu / n * 1e6, "phases": phases, "writes": writes}


class Writes:
    """What the measured cycles wrote: rows by table and WAL, from the statistics and the
    WAL of the database (the statistics reach the views about a second after a write)."""

    def __init__(self, url: str, n: int) -> None:
        self.url, self.n = url, n

    def start(self) -> tuple[str, str]:
        psql(self.url, "CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        time.sleep(1.5)
        rows = psql(self.url, f"COPY ({ROWS}) TO STDOUT")
        return rows, psql(self.url, "COPY (SELECT pg_current_wal_lsn()) TO STDOUT").strip()

    def stop(self, start: tuple[str, str]) -> str:
        lsn = psql(self.url, "COPY (SELECT pg_current_wal_lsn()) TO STDOUT").strip()
        time.sleep(1.5)
        before = {line.split("\t")[0]: line.split("\t")[1:] for line in start[0].splitlines()}
        out = [f"  {'table':18} {'inserted':>9} {'updated':>9} {'HOT':>9} {'deleted':>9}  a cycle"]
        for line in psql(self.url, f"COPY ({ROWS}) TO STDOUT").splitlines():
            name, *now = line.split("\t")
            was = before.get(name, ["0"] * len(now))
            counts = [(int(a) - int(b)) / self.n for a, b in zip(now, was, strict=True)]
            if any(counts):
                out.append(f"  {name:18} " + " ".join(f"{c:9.2f}" for c in counts))
        wal = (
            "COPY (SELECT count(*), coalesce(sum(record_length), 0) "
            f"FROM pg_get_wal_records_info('{start[1]}', '{lsn}') "
            "WHERE block_ref LIKE '%/' || (SELECT oid FROM pg_database WHERE datname = current_database()) || '/%') "
            "TO STDOUT"
        )
        records, size = (int(v) / self.n for v in psql(self.url, wal).split())
        out.append(f"  WAL of this database: {records:.1f} records, {size:.0f} bytes a cycle")
        return "\n".join(out)


class Statements:
    """The time in each SQLite statement the store runs, summed by its first words: every
    connection the SQLite store opens times its `execute`s (see `--statements`)."""

    def __init__(self) -> None:
        import sqlite3

        self.spent: dict[str, list[float]] = {}
        spent, connect = self.spent, sqlite3.connect

        class Timed(sqlite3.Connection):
            def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:  # type: ignore[override]
                t0 = time.perf_counter()
                try:
                    return super().execute(sql, *args)
                finally:
                    words = " ".join(line for line in sql.splitlines() if not line.lstrip().startswith("--")).split()
                    entry = spent.setdefault(" ".join(words)[:70], [0, 0.0])
                    entry[0] += 1
                    entry[1] += time.perf_counter() - t0

        sqlite3.connect = lambda *args, **kwargs: connect(*args, factory=Timed, **kwargs)  # type: ignore[assignment]

    def report(self, n: int) -> str:
        out = [f"  {'a cycle':>9} {'us':>7}  statement"]
        for sql, (count, seconds) in sorted(self.spent.items(), key=lambda kv: -kv[1][1])[:15]:
            out.append(f"  {count / n:9.2f} {seconds / n * 1e6:7.1f}  {sql}")
        return "\n".join(out)


class Pages:
    """The pages the measured cycles wrote to SQLite's write-ahead log, by the table or
    index each belongs to (`--pages`): each page a commit changed is written to the log
    whole, and a cycle's commits cost about in proportion to them. The store's checkpoints
    are held off while it measures (so the log keeps every frame the cycles wrote), which
    moves the cycles' time: read its counts, not its speed."""

    def __init__(self, path: str, n: int) -> None:
        import interlock.store.sqlite as sqlite_store

        sqlite_store.CHECKPOINT_COMMITS = sqlite_store.CHECKPOINT_CHANGES = 2**62
        sqlite_store.AUTOCHECKPOINT_PAGES = 2**31 - 1
        self.path, self.n = path, n

    def frames(self) -> list[tuple[int, bool]]:
        """Each frame in the log: its page number, and whether it ends a commit."""
        data = Path(self.path + "-wal").read_bytes()
        size = struct.unpack(">I", data[8:12])[0]
        out = []
        for at in range(32, len(data) - 24 - size + 1, 24 + size):
            page, commit = struct.unpack(">II", data[at : at + 8])
            out.append((page, commit != 0))
        return out

    def start(self) -> int:
        return len(self.frames())

    def stop(self, start: int) -> str:
        import sqlite3

        written = self.frames()[start:]
        with contextlib.closing(sqlite3.connect(self.path)) as db:
            names = dict(db.execute("SELECT pageno, name FROM dbstat"))
        by_name = collections.Counter(names.get(page, "(freed since)") for page, _ in written)
        commits = sum(commit for _, commit in written)
        out = [f"  {len(written) / self.n:.1f} pages a cycle in {commits / self.n:.2f} commits", "  a cycle  b-tree"]
        out += [f"  {count / self.n:7.2f}  {name}" for name, count in by_name.most_common()]
        return "\n".join(out)


ROWS = "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables ORDER BY relname"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store", choices=("sqlite", "postgres", "memory"))
    parser.add_argument("--cycles", type=int, default=None)
    parser.add_argument("--statements", action="store_true", help="SQLite: the time in each statement a cycle")
    parser.add_argument("--pages", action="store_true", help="SQLite: the pages a cycle writes, by table and index")
    args = parser.parse_args()
    statements = Statements() if args.statements and args.store == "sqlite" else None
    print(environment(["asyncpg"]))
    n = args.cycles or (1000 if args.store == "postgres" else 2000)
    name = f"interlock_phases_{os.getpid()}_{secrets.token_hex(3)}"
    if args.store == "postgres":
        psql(f"{SERVER}/postgres", f"CREATE DATABASE {name}")
        psql(f"{SERVER}/postgres", f"ALTER DATABASE {name} SET track_functions = 'all'")
        url = f"{SERVER}/{name}"
    elif args.store == "memory":
        url = "memory://"
    else:
        url = f"sqlite:///{tempfile.mkdtemp(prefix='interlock-phases-')}/bench.db"
    try:
        measured: Writes | Pages | None = None
        if args.store == "postgres":
            measured = Writes(url, n)
        elif args.store == "sqlite" and args.pages:
            measured = Pages(url.removeprefix("sqlite:///"), n)
        out = asyncio.run(cycles(url, n, measured))
        print(f"\n{args.store}: {out['cycles/s']:.1f} cycles/s, client CPU {out['cpu_us']:.0f} us a cycle")
        for phase, values in out["phases"].items():
            print(f"  {phase:7} p50 {median(values) * 1e6:7.0f} us")
        if args.store == "postgres":
            counts = (
                f"SELECT funcname, calls, round((total_time / {n + WARM})::numeric * 1000) AS total_us_a_cycle, "
                f"round((self_time / {n + WARM})::numeric * 1000) AS self_us_a_cycle "
                "FROM pg_stat_user_functions WHERE funcname LIKE 'interlock%' ORDER BY total_time DESC"
            )
            print()
            print(psql(url, counts))
            print(out["writes"])
        if isinstance(measured, Pages):
            print(f"\nSQLite write-ahead log ({n} cycles, checkpoints held off):")
            print(out["writes"])
        if statements is not None:
            print(f"\nSQLite statements ({n + WARM} cycles, warm-up included):")
            print(statements.report(n + WARM))
    finally:
        if args.store == "postgres":
            psql(f"{SERVER}/postgres", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


if __name__ == "__main__":
    main()
