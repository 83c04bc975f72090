"""What a stored approval policy costs the approval gate: microseconds per decision of a
call that runs without a person, on one store.

Variants, each a fresh file:

- `gate only`: `ApprovalGate(stored_policies=False)`, the tool on its `auto_allow` list
  (the gate before stored policies: no store read);
- `no policy stored`: stored policies on, none stored (one store read a decision);
- `stored autoAllow`: the agent's stored policy lists the tool (a read, and the decision
  recorded as an update: one event written);
- `hook allows`: the stored policy's hook by URL (a loopback server, signed both ways)
  answers allow (a read, one signed HTTP round trip, one event);
- `HTTP floor`: no gate, the same signed POST to the same hook through one kept-alive
  httpx client: what one round trip costs on this machine.

Run:

    .venv/bin/python bench/gate_policy.py [--url sqlite:///bench-gate-policy.db] [--calls 2000] [--reps 5]

Prints the median microseconds per decision of each variant, and its ratio to `gate only`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import interlock
from interlock.agent import ApprovalGate, ToolCall
from interlock.webhooks import signed_headers, verify

SECRET = "bench-secret-0123456789"


@asynccontextmanager
async def hook_server() -> AsyncIterator[str]:
    async def approve(request: Request) -> Response:
        body = await request.body()
        verify(SECRET, request.headers, body)
        answer = json.dumps({"decision": "allow", "callKey": json.loads(body).get("callKey")}).encode()
        return Response(answer, media_type="application/json", headers=signed_headers(SECRET, answer))

    app = Starlette(routes=[Route("/approve", approve, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    async with asyncio.timeout(20):
        while not server.started:  # noqa: ASYNC110  # uvicorn signals its start with a flag only
            await asyncio.sleep(0.01)  # uvicorn signals its start with a flag only
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}/approve"
    finally:
        server.should_exit = True
        await task


async def decisions(url: str, count: int, variant: str, hook_url: str) -> float:
    async with interlock.connect(url) as broker:
        if variant == "stored autoAllow":
            await broker.set_approval_policy({"agent": "bot", "autoAllow": ["read_file"]})
        elif variant == "hook allows":
            await broker.set_approval_policy({"agent": "bot", "hook": {"url": hook_url, "secret": SECRET}})
        if variant == "gate only":
            gate = ApprovalGate(broker, to="alice", auto_allow=["read_file"], stored_policies=False)
        else:
            gate = ApprovalGate(broker, to="alice")
        started = time.perf_counter()
        for n in range(count):
            await gate.authorize(ToolCall("read_file", {"path": f"f{n}"}, f"c{n}", session="s", agent="bot"))
        return (time.perf_counter() - started) / count * 1e6


async def floor(hook_url: str, count: int) -> float:
    body = json.dumps({"toolName": "read_file"}).encode()
    async with httpx.AsyncClient() as client:
        started = time.perf_counter()
        for _ in range(count):
            response = await client.post(hook_url, content=body, headers=signed_headers(SECRET, body))
            verify(SECRET, response.headers, response.content)
        return (time.perf_counter() - started) / count * 1e6


def fresh(path: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="sqlite:///bench-gate-policy.db")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    variants = ["gate only", "no policy stored", "stored autoAllow", "hook allows"]
    results: dict[str, list[float]] = {name: [] for name in variants}
    async with hook_server() as hook_url:
        for _ in range(args.reps):
            for name in variants:
                if args.url.startswith("sqlite:///"):
                    fresh(args.url.removeprefix("sqlite:///"))
                calls = args.calls if name != "hook allows" else max(1, args.calls // 10)
                results[name].append(await decisions(args.url, calls, name, hook_url))
            results.setdefault("HTTP floor", []).append(await floor(hook_url, max(1, args.calls // 10)))
    base = statistics.median(results["gate only"])
    print(f"{args.url}, {args.calls} calls x {args.reps} reps (the hook variant: a tenth of the calls)")
    print("| variant | us per decision (median) | x gate only |")
    print("|---|---:|---:|")
    for name, runs in results.items():
        median = statistics.median(runs)
        print(f"| {name} | {median:.1f} | {median / base:.2f} |")
    if args.url.startswith("sqlite:///"):
        fresh(args.url.removeprefix("sqlite:///"))


if __name__ == "__main__":
    asyncio.run(main())
