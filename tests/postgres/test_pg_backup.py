"""A backup of a live PostgreSQL store, restored into a new database, with the commands of
docs/how-to/nodes.md (Backing up and restoring): a node on the copy serves the same inbox,
an agent's wait and a parked run go on there, a stream resumed with a Last-Event-ID from
before the backup gets what came after it once, and new events take ids never handed out."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import aconnect_sse
from pg_support import BOUND, database_of, empty_database, psql

import interlock
from interlock import Confirm, Text
from serve_support import serve

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=BOUND)
    assert done.returncode == 0, done.stderr


async def events_after(http: httpx.AsyncClient, node: str, last_event_id: int, count: int) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    headers = {"Last-Event-ID": str(last_event_id)}
    async with aconnect_sse(http, "GET", f"{node}/api/v1/events/stream", headers=headers) as source:
        async for message in source.aiter_sse():
            if message.event not in ("", "message") and message.data:
                got.append(json.loads(message.data))
                if len(got) == count:
                    return got
    raise AssertionError(f"the stream ended after {got}")


async def test_a_live_store_dumped_and_restored_serves_on_from_where_the_backup_was_taken(
    pg_url: str, tmp_path: Path
) -> None:
    async with interlock.connect(pg_url) as live:  # the store in use while it is backed up
        pending = await live.create(Text("Still waiting?"), to="alice")
        answered = await live.create(Text("Answered?"), to="alice")
        await live.resolve(answered.id, "yes", by="alice")
        parked = await live.start_parked("deployer", [live.prepare(Confirm("Deploy?"), to="alice")], state={"at": 1})
        ready = await live.start_parked("deployer", [live.prepare(Text("Tag?"), to="alice")], state={"at": 2})
        await live.resolve(ready.waiting_on[0], "v2", by="alice")
        seen = await live.last_event_id()  # a stream client had read up to here

        dump = tmp_path / "interlock.dump"
        run("pg_dump", "--format=custom", f"--file={dump}", pg_url)  # (the commands of nodes.md)
        await live.create(Text("Made after the backup?"), to="alice")  # lost with the old database

        with empty_database() as copy:
            run("pg_restore", "--exit-on-error", f"--dbname={copy}", str(dump))
            last_in_copy = int(psql("SELECT max(id) FROM events", database_of(copy)))
            assert last_in_copy == seen
            async with serve("--db", copy, "--no-auth") as node, httpx.AsyncClient(timeout=BOUND) as http:
                inbox = (await http.get(f"{node.url}/api/v1/requests", params={"status": "pending"})).json()
                assert {r["id"] for r in inbox["items"]} == {pending.id, parked.waiting_on[0]}
                async with interlock.connect(node.url) as agent:
                    waiting = asyncio.create_task(agent.wait(pending.id))
                    streamed = asyncio.create_task(events_after(http, node.url, seen - 2, 3))
                    answer = await http.post(f"{node.url}/api/v1/requests/{pending.id}/answer", json={"answer": "now"})
                    assert answer.status_code == 200, answer.text
                    with anyio.fail_after(BOUND):
                        assert (await waiting).answers == {"text": "now"}
                        events = await streamed
                ids = [e["id"] for e in events]
                assert ids[:2] == [seen - 1, seen]  # from before the backup, each once
                assert ids[2] > seen and events[2]["type"] == "answered"  # a new id, never one handed out
            async with interlock.connect(copy) as worker:
                claimed = await worker.claim_run(["deployer"], worker="w1")
                assert claimed is not None and (claimed.id, claimed.state) == (ready.id, {"at": 2})
