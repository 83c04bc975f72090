"""Adversary benchmark: what one user's hostile answers cost everyone else.

Starts ``interlock serve --no-auth`` as a subprocess on 127.0.0.1 (a free port, a fresh
SQLite file in a temporary directory). Another user ("bob") lists his inbox,
``GET /api/v1/requests``, back to back the whole time; his latencies are recorded per phase:

* **quiet** -- nobody else is doing anything (``--seconds``);
* **backtracking answers** -- an adversary ("mallory") creates a form whose string
  property has ``"pattern": "^(a+)+$"`` and answers it ``--attacks`` times, one after the
  other, with 28 ``a``s and a ``!`` (catastrophic for a backtracking engine);
* **multi-MB schema** -- mallory creates a form whose schema has ``--properties``
  properties (about 7 MB of JSON with the default 60,000) and, if that was accepted,
  answers it once;
* **schemas near the limit** -- mallory creates ``--attacks`` forms whose schemas are just
  under the default 64 KiB schema limit (``--near-limit`` properties) and answers each;
* **slow lists** -- with ``--fill N`` (the file then holds N requests more, made as
  bench/scale.py makes them), mallory searches everyone's requests for ``0``, ``GET
  /api/v1/requests?text=0``, back to back for ``--seconds``: a word that begins the id of
  every request, and so a great many indexed words, whose matches SQLite's full-text
  index merges whole before the first (about 250 ms at 300,000 requests).

The adversary's load is bounded in count (``--attacks`` answers, one schema) and each of
its calls in time (``--timeout``); everything is on loopback. Only httpx runs in this
process: the server is whatever ``python -m interlock`` imports, so the same script
measures another checkout with ``PYTHONPATH=/path/to/other/src``.

    .venv/bin/python bench/adversary.py
    .venv/bin/python bench/adversary.py --fill 300000 --only "slow lists"
    PYTHONPATH=../before/src .venv/bin/python bench/adversary.py   # an older checkout (git worktree add ../before REV)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from typing import Any

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(db: str, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "interlock", "serve", "--no-auth", "--port", str(port), "--db", f"sqlite:///{db}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the server did not start")


def summary(name: str, samples: list[float]) -> dict[str, Any]:
    ms = sorted(s * 1000 for s in samples)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))] if ms else float("nan")
    return {
        "phase": name,
        "requests": len(ms),
        "p50_ms": round(statistics.median(ms), 2) if ms else float("nan"),
        "p99_ms": round(p99, 2),
        "max_ms": round(ms[-1], 2) if ms else float("nan"),
    }


async def victim(base: str, stop: asyncio.Event, samples: list[float]) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=120) as client:
        while not stop.is_set():
            start = time.perf_counter()
            response = await client.get("/api/v1/requests", params={"recipient": "bob", "limit": 50})
            samples.append(time.perf_counter() - start)
            response.raise_for_status()


async def phase(base: str, name: str, attack: Any, results: list[dict[str, Any]], log: list[str]) -> None:
    samples: list[float] = []
    stop = asyncio.Event()
    watcher = asyncio.create_task(victim(base, stop, samples))
    await asyncio.sleep(0.2)  # bob is listing before the adversary starts
    started = time.perf_counter()
    outcome = await attack()
    log.append(f"{name}: {outcome} ({time.perf_counter() - started:.2f} s)")
    await asyncio.sleep(0.2)
    stop.set()
    await watcher
    results.append(summary(name, samples))


def import_scale() -> Any:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import scale

    return scale


async def fill(db: str, rows: int) -> None:
    """`rows` requests in a new file, as bench/scale.py fills its own, their search index
    made before the server starts (so that the server has no catch-up to make)."""
    scale = import_scale()
    from interlock.store.sqlite import SqliteStore

    started = time.perf_counter()
    await scale.fill_new_sqlite(db, scale.Fill(rows, datetime.now(UTC)))
    store = SqliteStore(db)
    await store.open()
    await store.aclose()  # which brings the search index up to date
    print(f"filled and indexed {rows:,} requests in {time.perf_counter() - started:.0f} s", flush=True)


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        if args.fill:
            await fill(os.path.join(tmp, "adversary.db"), args.fill)
        server = start_server(os.path.join(tmp, "adversary.db"), port)
        try:
            async with httpx.AsyncClient(base_url=f"{base}/api/v1", timeout=args.timeout) as mallory:
                for i in range(20):  # bob's inbox
                    ask = {"type": "text", "prompt": f"Question {i}?"}
                    (await mallory.post("/requests", json={"to": "bob", "asks": [ask]})).raise_for_status()
                results: list[dict[str, Any]] = []
                log: list[str] = []

                async def quiet() -> str:
                    await asyncio.sleep(args.seconds)
                    return "no adversary"

                async def backtracking() -> str:
                    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a+)+$"}}}
                    ask = {"type": "form", "id": "f", "prompt": "Code?", "schema": schema}
                    created = await mallory.post("/requests", json={"to": "mallory", "asks": [ask]})
                    created.raise_for_status()
                    path = f"/requests/{created.json()['id']}/answer"
                    statuses = []
                    for _ in range(args.attacks):
                        answered = await mallory.post(path, json={"answer": {"code": "a" * 28 + "!"}})
                        statuses.append(answered.status_code)
                    return f"{args.attacks} answers, statuses {statuses}"

                # Encoded before the phases: encoding megabytes here would stall bob's client too.
                headers = {"content-type": "application/json"}
                properties = {
                    f"p{i}": {"type": "string", "title": f"Field {i}", "description": "x" * 24, "maxLength": 64}
                    for i in range(args.properties)
                }
                ask = {
                    "type": "form",
                    "id": "f",
                    "prompt": "Fill in",
                    "schema": {"type": "object", "properties": properties},
                }
                big_create = json.dumps({"to": "mallory", "asks": [ask]}).encode()
                big_answer = json.dumps({"answer": {f"p{i}": "x" for i in range(args.properties)}}).encode()

                def form_body(count: int) -> bytes:
                    props = {f"p{i}": {"type": "string", "maxLength": 64, "title": f"Field {i}"} for i in range(count)}
                    form = {
                        "type": "form",
                        "id": "f",
                        "prompt": "Fill in",
                        "schema": {"type": "object", "properties": props},
                    }
                    return json.dumps({"to": "mallory", "asks": [form]}).encode()

                near_limit = form_body(args.near_limit)
                near_answer = json.dumps({"answer": {f"p{i}": "x" for i in range(args.near_limit)}}).encode()

                async def schemas_near_the_limit() -> str:
                    statuses = []
                    for _ in range(args.attacks):
                        created = await mallory.post("/requests", content=near_limit, headers=headers)
                        statuses.append(created.status_code)
                        if created.status_code == 201:
                            path = f"/requests/{created.json()['id']}/answer"
                            statuses.append(
                                (await mallory.post(path, content=near_answer, headers=headers)).status_code
                            )
                    return f"{args.attacks} creates of {len(near_limit) / 1e3:.0f} kB and answers, statuses {statuses}"

                async def big_schema() -> str:
                    created = await mallory.post("/requests", content=big_create, headers=headers)
                    outcome = f"create of {len(big_create) / 1e6:.1f} MB: {created.status_code}"
                    if created.status_code == 201:
                        path = f"/requests/{created.json()['id']}/answer"
                        answered = await mallory.post(path, content=big_answer, headers=headers)
                        outcome += f", answer of {len(big_answer) / 1e6:.1f} MB: {answered.status_code}"
                    return outcome

                async def slow_lists() -> str:
                    if not args.fill:
                        return "skipped (no --fill)"
                    took = []
                    deadline = time.perf_counter() + args.seconds
                    while time.perf_counter() < deadline:
                        started = time.perf_counter()
                        (await mallory.get("/requests", params={"text": "0"})).raise_for_status()
                        took.append(time.perf_counter() - started)
                    each = statistics.median(took) * 1000
                    return f"{len(took)} searches of {args.fill:,} requests, {each:.0f} ms each"

                phases = [
                    ("quiet", quiet),
                    ("backtracking answers", backtracking),
                    ("multi-MB schema", big_schema),
                    ("schemas near the limit", schemas_near_the_limit),
                    ("slow lists", slow_lists),
                ]
                for name, attack in phases:
                    if not args.only or name in args.only or name == "quiet":
                        await phase(base, name, attack, results, log)
        finally:
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:  # (closing, it indexes the filled requests' texts)
                server.kill()
                server.wait(30)
    print("\n".join(log))
    print(f"{'phase':<24}{'requests':>10}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}")
    for row in results:
        print(f"{row['phase']:<24}{row['requests']:>10}{row['p50_ms']:>10}{row['p99_ms']:>10}{row['max_ms']:>10}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="length of the quiet phase")
    parser.add_argument("--attacks", type=int, default=3, help="backtracking answers the adversary sends")
    parser.add_argument("--properties", type=int, default=60_000, help="properties of the large schema")
    parser.add_argument("--near-limit", type=int, default=1000, help="properties of a schema just under 64 KiB")
    parser.add_argument("--timeout", type=float, default=120.0, help="bound on each adversary call, seconds")
    parser.add_argument("--fill", type=int, default=0, help="requests in the file before the server starts")
    parser.add_argument("--only", nargs="*", help="the phases to run (and the quiet one)")
    asyncio.run(main(parser.parse_args()))
