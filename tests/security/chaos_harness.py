"""A chaos harness: processes that create and answer requests on one store while a seeded
schedule kills them (SIGKILL), then a check of what the store holds.

Each worker logs every write it saw acknowledged (after the call returned) to its own
append-only file, fsynced line by line, so the logs are the ground truth of what was
promised. The check then asks of the store:

- every acknowledged create is there (a row and its `created` event), and every
  acknowledged answer is there (the request answered, with its `answered` event);
- nothing settled twice: one `created` event and at most one settling event a request,
  the settling event's type the request's status, and none while it is pending;
- every event about a request names a request that exists, and says who it concerns as
  the request does;
- on SQLite, `PRAGMA integrity_check` answers ok.

Used by `tests/security/test_chaos.py` (short, on SQLite, in CI) and `bench/chaos.py`
(longer, on SQLite and on three `interlock serve` nodes sharing one PostgreSQL database).
Run a worker by hand with `python chaos_harness.py worker URL LOG SEED NAME`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
SETTLED = {"answered", "rejected", "expired", "cancelled"}


# -- a worker ------------------------------------------------------------------------------


async def work(url: str, log: Path, seed: int, name: str) -> None:
    """Create requests and answer pending ones (its own and others', racing the other
    workers) until killed; log each acknowledged write, fsynced, before the next call."""
    import interlock
    from interlock import Status, Text

    rng = random.Random(seed)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def ack(line: str) -> None:
        os.write(fd, f"{line}\n".encode())
        os.fsync(fd)

    broker = interlock.connect(url)
    for _ in range(300):  # a node killed a moment ago may still be starting again
        try:
            await broker.open()
            break
        except (ConnectionError, OSError):
            await asyncio.sleep(0.1)
    async with broker:
        mine: list[str] = []
        n = 0
        while True:
            n += 1
            request = await broker.create(Text(f"{name} asks {n}?"), to="alice", requester=name, session=name)
            ack(f"created {request.id}")
            mine.append(request.id)
            roll = rng.random()
            if roll < 0.5 and mine:  # answer one of its own
                target = mine.pop(rng.randrange(len(mine)))
            elif roll < 0.8:  # race the others for one of theirs
                page = await broker.list(status=Status.PENDING, limit=8, order="asc")
                target = rng.choice(page.items).id if page.items else ""
            else:
                continue
            if target and await broker.resolve(target, f"{name} answers", by="alice", via="chaos"):
                ack(f"answered {target}")


# -- the run ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What a run did and what the check found."""

    store: str
    seconds: float = 0.0
    created: int = 0
    answered: int = 0
    kills: int = 0
    restarts: int = 0
    lost: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    rows: int = 0
    events: int = 0

    @property
    def operations(self) -> int:
        return self.created + self.answered

    def summary(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "seconds": round(self.seconds, 1),
            "operations": self.operations,
            "created": self.created,
            "answered": self.answered,
            "kills": self.kills,
            "restarts": self.restarts,
            "losses": len(self.lost),
            "violations": len(self.violations),
            "requests": self.rows,
            "events": self.events,
        }


class Process:
    """A child started from a command line, restartable after it is killed."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.name, self.argv, self.env = name, argv, env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=self.env
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        self.kill()


def worker_process(url: str, log: Path, seed: int, name: str) -> Process:
    return Process(name, [sys.executable, str(HERE), "worker", url, str(log), str(seed), name])


def run(
    url: str,
    folder: Path,
    *,
    seconds: float,
    workers: int = 4,
    seed: int = 8,
    kill_every: tuple[float, float] = (0.3, 1.2),
    nodes: list[Process] | None = None,
    node_urls: list[str] | None = None,
) -> Outcome:
    """Run `workers` workers on the store at `url` (or spread over `node_urls`, the HTTP
    addresses of `nodes`) for `seconds`, killing one process at a time at random moments
    (seeded), restarting whatever is dead; then stop everything and check the store."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    outcome = Outcome("postgresql, 3 nodes" if nodes else "sqlite")
    targets = node_urls or [url]
    crew = [
        worker_process(targets[i % len(targets)], folder / f"worker-{i}.log", seed * 1000 + i, f"worker-{i}")
        for i in range(workers)
    ]
    every = [*(nodes or []), *crew]
    started = time.monotonic()
    try:
        for process in every:
            process.start()
        deadline = started + seconds
        next_kill = started + rng.uniform(*kill_every)
        while (now := time.monotonic()) < deadline:
            for process in every:
                if not process.alive():
                    if process.proc is not None:
                        outcome.restarts += 1
                    process.start()
            if now >= next_kill:
                victim = rng.choice(every)
                if victim.alive():
                    victim.kill()
                    outcome.kills += 1
                next_kill = now + rng.uniform(*kill_every)
            time.sleep(0.05)  # the schedule's tick
    finally:
        for process in every:
            process.stop()
    outcome.seconds = time.monotonic() - started
    return outcome


def acknowledged(folder: Path) -> tuple[set[str], set[str]]:
    """The creates and answers the workers logged (a torn last line is no promise)."""
    created: set[str] = set()
    answered: set[str] = set()
    for log in sorted(folder.glob("worker-*.log")):
        for line in log.read_text().split("\n")[:-1]:  # the part after the last newline is torn
            what, _, request_id = line.partition(" ")
            (created if what == "created" else answered).add(request_id)
    return created, answered


def check(outcome: Outcome, folder: Path, requests: dict[str, tuple[str, str | None, str | None]], events: Any) -> None:
    """Hold the logs against the store: `requests` maps id to (status, recipient,
    requester); `events` is every (id, type, request_id, recipient, requester) in order."""
    created, answered = acknowledged(folder)
    outcome.created, outcome.answered = len(created), len(answered)
    outcome.rows = len(requests)
    made: Counter[str] = Counter()
    settled: Counter[str] = Counter()
    last_type: dict[str, str] = {}
    previous = 0
    for event_id, type_, request_id, recipient, requester in events:
        outcome.events += 1
        if event_id <= previous:
            outcome.violations.append(f"event {event_id} out of order after {previous}")
        previous = event_id
        if request_id is None:
            continue
        row = requests.get(request_id)
        if row is None:
            outcome.violations.append(f"event {event_id} ({type_}) names no stored request {request_id}")
            continue
        if (recipient, requester) != row[1:]:
            outcome.violations.append(f"event {event_id} says {recipient}/{requester}, the request {row[1:]}")
        if type_ == "created":
            made[request_id] += 1
        elif type_ in SETTLED:
            settled[request_id] += 1
            last_type[request_id] = type_
    for request_id, (status, _, _) in requests.items():
        if made[request_id] != 1:
            outcome.violations.append(f"request {request_id} has {made[request_id]} created events")
        if status == "pending" and settled[request_id]:
            outcome.violations.append(f"pending request {request_id} has a settling event")
        if status != "pending" and (settled[request_id] != 1 or last_type.get(request_id) != status):
            count, kind = settled[request_id], last_type.get(request_id)
            outcome.violations.append(f"request {request_id} is {status} with {count} settling events ({kind})")
    for request_id in created:
        if request_id not in requests or not made[request_id]:
            outcome.lost.append(f"created {request_id}")
    for request_id in answered:
        if requests.get(request_id, ("",))[0] != "answered":
            outcome.lost.append(f"answered {request_id}")


def check_sqlite(outcome: Outcome, folder: Path, path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db:
        integrity = db.execute("PRAGMA integrity_check").fetchall()
        if integrity != [("ok",)]:
            outcome.violations.append(f"integrity_check: {integrity}")
        requests = {row[0]: (row[1], row[2], row[3]) for row in db.execute(REQUESTS_SQL)}
        events = db.execute(EVENTS_SQL).fetchall()
    check(outcome, folder, requests, events)


def check_postgres(outcome: Outcome, folder: Path, url: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    async def read() -> tuple[dict[str, tuple[str, str | None, str | None]], list[Any]]:
        conn = await asyncpg.connect(url)
        try:
            requests = {row[0]: (row[1], row[2], row[3]) for row in await conn.fetch(REQUESTS_SQL)}
            events = [tuple(row) for row in await conn.fetch(EVENTS_SQL)]
        finally:
            await conn.close()
        return requests, events

    requests, events = asyncio.run(read())
    check(outcome, folder, requests, events)


REQUESTS_SQL = "SELECT id, status, recipient, requester FROM requests"
EVENTS_SQL = "SELECT id, type, request_id, recipient, requester FROM events ORDER BY id"


# -- several `interlock serve` nodes ----------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_nodes(url: str, count: int) -> tuple[list[Process], list[str]]:
    """`count` `interlock serve --no-auth` processes on the store at `url` (not started)."""
    processes, urls = [], []
    for i in range(count):
        port = free_port()
        argv = [sys.executable, "-m", "interlock", "serve", "--port", str(port), "--db", url, "--no-auth"]
        processes.append(Process(f"node-{i}", argv))
        urls.append(f"http://127.0.0.1:{port}")
    return processes, urls


def wait_healthy(urls: list[str], timeout: float = 30) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    for base in urls:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{base} did not become healthy")
            time.sleep(0.05)


def lines(outcome: Outcome) -> Iterator[str]:
    yield json.dumps(outcome.summary())
    for problem in [*outcome.lost[:20], *outcome.violations[:20]]:
        yield f"  {problem}"


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        _, _, store_url, log_path, seed_text, worker_name = sys.argv
        asyncio.run(work(store_url, Path(log_path), int(seed_text), worker_name))
    else:
        sys.exit("usage: chaos_harness.py worker URL LOG SEED NAME")
