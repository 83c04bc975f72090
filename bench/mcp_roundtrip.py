"""MCP benchmark: what interlock's MCP tools cost on top of its HTTP API.

Starts ``interlock serve`` as a subprocess on 127.0.0.1 (a free port, a fresh SQLite file
in a temporary directory, a human "alice" and her agent "bot" with tokens), then, with the
official MCP client (``mcp.Client``):

* **/mcp call** -- ``hitl_status`` of one job over streamable HTTP, back to back: the cost
  of one tool call (auth, the stateless MCP request, the API call it makes in process);
* **/mcp ask + answer + wake** -- the bot's ``hitl_request``, then ``hitl_status`` with
  ``wait`` while alice answers through the API; the wake-up is measured from her answer's
  response to the status call's return;
* **HTTP API wait wake** -- the same wake-up through the API's long poll, for reference;
* **stdio start** -- ``interlock mcp --server URL`` as a subprocess until its first tool list.

Run:

    python bench/mcp_roundtrip.py [--calls 200] [--rounds 30] [--starts 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
from _common import environment, median, table
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

INTERLOCK = [sys.executable, "-m", "interlock"]
ASK = {"asks": [{"type": "approval", "id": "ok", "prompt": "Ship it?"}]}
API_ASK = {"asks": [{"type": "confirm", "id": "ok", "prompt": "Ship it?"}]}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def token(db: str, *args: str) -> str:
    command = [*INTERLOCK, "token", "create", *args, "--db", db]
    made = subprocess.run(command, capture_output=True, text=True, check=True)
    return made.stdout.strip()


async def healthy(url: str) -> None:
    with anyio.fail_after(30):
        async with httpx.AsyncClient() as client:
            while True:
                try:
                    if (await client.get(f"{url}/healthz")).status_code == 200:
                        return
                except httpx.TransportError:
                    await anyio.sleep(0.05)


def mcp_http(url: str, secret: str) -> Any:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=60)
    return http, Client(streamable_http_client(f"{url}/mcp", http_client=http), read_timeout_seconds=60)


async def run(url: str, tokens: dict[str, str], args: argparse.Namespace) -> list[list[Any]]:
    rows: list[list[Any]] = []
    http, client = mcp_http(url, tokens["bot"])
    api = httpx.AsyncClient(base_url=f"{url}/api/v1", timeout=60)
    alice = {"Authorization": f"Bearer {tokens['alice']}"}
    bot = {"Authorization": f"Bearer {tokens['bot']}"}
    async with http, client, api:
        job = (await client.call_tool("hitl_request", ASK)).structured_content
        assert job is not None
        calls = []
        for _ in range(args.calls):
            start = time.perf_counter()
            await client.call_tool("hitl_status", {"job": job["job"]})
            calls.append(time.perf_counter() - start)
        rows.append(["/mcp call (hitl_status)", args.calls, f"{median(calls) * 1000:.2f}", f"{1 / median(calls):.0f}"])

        wakes, cycles = [], []
        for _ in range(args.rounds):
            begin = time.perf_counter()
            job = (await client.call_tool("hitl_request", ASK)).structured_content
            assert job is not None
            answered = 0.0

            async def answer(request_id: str) -> None:
                nonlocal answered
                await anyio.sleep(0.05)  # let the status call start waiting
                await api.post(f"/requests/{request_id}/answer", json={"answer": True}, headers=alice)
                answered = time.perf_counter()

            async with anyio.create_task_group() as tg:
                tg.start_soon(answer, job["job"])
                done = (await client.call_tool("hitl_status", {"job": job["job"], "wait": 30})).structured_content
            end = time.perf_counter()
            assert done is not None and done["status"] == "COMPLETE"
            wakes.append(max(end - answered, 0.0))
            cycles.append(end - begin - 0.05)
        rows.append(["/mcp wake after the answer", args.rounds, f"{median(wakes) * 1000:.2f}", ""])
        rows.append(["/mcp ask + answer + wake (cycle)", args.rounds, f"{median(cycles) * 1000:.2f}", ""])

        api_wakes = []
        for _ in range(args.rounds):
            made = (await api.post("/requests", json=API_ASK, headers=bot)).json()
            answered = 0.0

            async def answer_api(request_id: str) -> None:
                nonlocal answered
                await anyio.sleep(0.05)
                await api.post(f"/requests/{request_id}/answer", json={"answer": True}, headers=alice)
                answered = time.perf_counter()

            async with anyio.create_task_group() as tg:
                tg.start_soon(answer_api, made["id"])
                await api.get(f"/requests/{made['id']}/wait", params={"timeout": 30}, headers=bot)
            api_wakes.append(max(time.perf_counter() - answered, 0.0))
        rows.append(["HTTP API long poll wake (reference)", args.rounds, f"{median(api_wakes) * 1000:.2f}", ""])

    starts = []
    env = {**os.environ, "INTERLOCK_TOKEN": tokens["bot"]}
    params = StdioServerParameters(command=sys.executable, args=["-m", "interlock", "mcp", "--server", url], env=env)
    for _ in range(args.starts):
        start = time.perf_counter()
        async with Client(params, read_timeout_seconds=60) as stdio:
            await stdio.list_tools()
        starts.append(time.perf_counter() - start)
    rows.append(["stdio start to first tool list", args.starts, f"{median(starts) * 1000:.0f}", ""])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--starts", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        db = f"sqlite:///{Path(work) / 'bench.db'}"
        tokens = {"alice": token(db, "alice", "--human"), "bot": token(db, "bot", "--agent", "--owner", "alice")}
        port = free_port()
        server = subprocess.Popen([*INTERLOCK, "serve", "--port", str(port), "--db", db, "--rate-limit", "0"])
        url = f"http://127.0.0.1:{port}"
        try:
            asyncio.run(healthy(url))
            rows = asyncio.run(run(url, tokens, args))
        finally:
            server.terminate()
            server.wait(20)
    print(environment(["interlock", "mcp"]))
    print(table(["what", "n", "median ms", "calls/s"], rows))


if __name__ == "__main__":
    main()
