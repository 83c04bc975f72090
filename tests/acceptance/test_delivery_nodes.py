"""Notifications from several real `interlock serve` nodes on one store (a SQLite file, a
PostgreSQL database), to a real webhook receiver: every notice arrives once, whichever
node took the call and whichever node sent it; a node killed (SIGKILL) while a receiver
holds its delivery open leaves it to the other node once its lease runs out, and the
receiver sees the same idempotency key again: at least once, with a key to drop the
repeat by, and nothing lost."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from channels.receiver import Received, eventually, receiver
from interlock.webhooks import verify
from serve_support import Served, serve_many

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

BOUND = 30  # seconds: the most any one wait on the nodes may take on a busy machine
SECRET = "a-long-random-shared-secret-0123456789"
TEXT = [{"type": "text", "prompt": "Deploy?"}]


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The one store both nodes open: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'nodes.db'}"
        return
    databases: Callable[[], AbstractContextManager[str]] = request.getfixturevalue("pg_databases")
    with databases() as url:
        yield url


def routing_file(folder: Path, hook: str, *lines: str) -> Path:
    """A routing that tells everyone through one signed webhook to `hook`."""
    path = folder / "routing.toml"
    top = "\n".join(lines)
    path.write_text(
        f'{top}\nretry_first = "1s"\n\n[channels.hook]\ntype = "webhook"\nurl = "{hook}"\nsecret = "{SECRET}"\n\n'
        '[default]\nchannels = ["hook"]\n'
    )
    return path


async def all_deliveries(http: httpx.AsyncClient, node: Served) -> list[dict[str, Any]]:
    """Every delivery record in the store, as `node` shows them (an admin sees all)."""
    out: list[dict[str, Any]] = []
    after: str | None = None
    while True:
        params = {"limit": "500", **({"after": after} if after else {})}
        page = (await http.get(f"{node.url}/api/v1/deliveries", params=params)).json()
        out += page["items"]
        after = page["next"]
        if after is None:
            return out


async def outcomes(http: httpx.AsyncClient, node: Served) -> dict[str, float]:
    """How many attempts `node` itself made, by outcome (delivered, retry, dead), from its /metrics."""
    text = (await http.get(f"{node.url}/metrics")).text
    found = re.findall(r'^interlock_deliveries_total\{channel="hook",outcome="(\w+)"\} (\S+)$', text, re.MULTILINE)
    return {outcome: float(value) for outcome, value in found}


def key_of(received: Received) -> str:
    """The delivery's idempotency key, after checking that the body is signed and says the same."""
    verify(SECRET, received.headers, received.body)
    key = received.headers["idempotency-key"]
    assert received.json["id"] == key
    return key


async def test_two_nodes_on_one_store_send_every_notice_once(store: str, tmp_path: Path) -> None:
    count = 30
    async with receiver() as hook:
        routing = routing_file(tmp_path, hook.url)
        async with (
            serve_many(2, "--db", store, "--no-auth", "--routing", str(routing)) as nodes,
            httpx.AsyncClient(timeout=BOUND) as http,
        ):
            made = []
            for n in range(count):  # through either node in turn
                node = nodes[n % 2]
                created = await http.post(f"{node.url}/api/v1/requests", json={"asks": TEXT, "to": "alice"})
                assert created.status_code == 201, created.text
                made.append(created.json()["id"])
            answered = made[::3]
            for n, request_id in enumerate(answered):  # each through the node that did not make it
                answer = await http.post(
                    f"{nodes[(n + 1) % 2].url}/api/v1/requests/{request_id}/answer", json={"answer": "go"}
                )
                assert answer.status_code == 200, answer.text
            expected = count + len(answered)  # each request's creation, and each answer

            await hook.until(expected, timeout=BOUND)

            async def recorded() -> bool:
                for node in nodes:
                    if sum(d["status"] == "delivered" for d in await all_deliveries(http, node)) < expected:
                        return False
                return True

            await eventually(recorded, timeout=BOUND)
            records = [await all_deliveries(http, node) for node in nodes]
            sent_by = [await outcomes(http, node) for node in nodes]
        sent = [key_of(r) for r in hook.received]  # the nodes have stopped: all that ever came

    assert records[0] == records[1]  # both nodes read the same records
    assert len(records[0]) == expected
    assert {d["status"] for d in records[0]} == {"delivered"}
    assert {d["attempts"] for d in records[0]} == {1}
    # each delivery arrived once: every key once, and nothing more came while the nodes stopped
    repeated = [key for key, times in Counter(sent).items() if times > 1]
    assert repeated == [] and len(sent) == expected
    assert set(sent) == {d["id"] for d in records[0]}
    # both nodes sent (each wakes on its own calls first), one attempt per delivery in all
    assert all(set(by) == {"delivered"} and by["delivered"] > 0 for by in sent_by), sent_by
    assert sum(by["delivered"] for by in sent_by) == expected
    kinds = Counter((r.json["request"]["id"], r.json["type"]) for r in hook.received)
    assert set(kinds) == {(i, "request.created") for i in made} | {(i, "request.answered") for i in answered}


async def sending_node(store: str, delivery_id: str, nodes: list[Served]) -> Served | None:
    """The node whose delivery loop holds the lease of a delivery now (its owner names its
    process), or None if no loop holds it."""
    query = "SELECT lease_owner FROM deliveries WHERE id = "
    if store.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(store.removeprefix("sqlite:///"))) as db:
            row = db.execute(query + "?", (delivery_id,)).fetchone()
        owner = row[0] if row else None
    else:
        db = await asyncpg.connect(store)
        try:
            owner = await db.fetchval(query + "$1", delivery_id)
        finally:
            await db.close()
    if owner is None:
        return None
    pid = int(owner.split(":")[-2])  # host:pid:loop
    return next(node for node in nodes if node.proc.pid == pid)


async def test_a_delivery_held_open_by_a_node_killed_goes_out_from_the_other_with_the_same_key(
    store: str, tmp_path: Path
) -> None:
    let_go = asyncio.Event()
    async with receiver() as hook:

        async def hold_the_first(got: Received) -> None:
            if got is hook.received[0]:
                await let_go.wait()  # answered only once the test ends: its sender is killed first

        hook.hold = hold_the_first
        routing = routing_file(tmp_path, hook.url, 'lease = "3s"')
        try:
            async with (
                serve_many(2, "--db", store, "--no-auth", "--routing", str(routing)) as nodes,
                httpx.AsyncClient(timeout=BOUND) as http,
            ):
                created = await http.post(f"{nodes[0].url}/api/v1/requests", json={"asks": TEXT, "to": "alice"})
                assert created.status_code == 201, created.text
                [first] = await hook.until(1, timeout=BOUND)
                held = key_of(first)
                sender = await sending_node(store, held, nodes)
                assert sender is not None, "the delivery was not in flight when the receiver held it"
                os.kill(sender.proc.pid, signal.SIGKILL)
                await asyncio.wait_for(sender.proc.wait(), BOUND)
                arrived_before = len(hook.received)
                [survivor] = [node for node in nodes if node is not sender]

                more = []
                for _ in range(5):  # and the store goes on taking calls, and telling people
                    made = await http.post(f"{survivor.url}/api/v1/requests", json={"asks": TEXT, "to": "alice"})
                    more.append(made.json()["id"])
                await hook.until(arrived_before + 1 + len(more), timeout=BOUND)

                async def recorded() -> bool:
                    found = await all_deliveries(http, survivor)
                    return len(found) == 1 + len(more) and all(d["status"] == "delivered" for d in found)

                await eventually(recorded, timeout=BOUND)
                records = {d["id"]: d for d in await all_deliveries(http, survivor)}
                sent_by_survivor = await outcomes(http, survivor)
        finally:
            let_go.set()
        sent = [key_of(r) for r in hook.received]

    # the receiver saw the held delivery again, once its sender was gone, with the same key:
    # at least once, and a key to drop the repeat by; every other delivery once
    assert sent[:arrived_before] == [held]
    assert Counter(sent) == {held: 2} | {key: 1 for key in records if key != held}
    again = hook.received[sent.index(held, 1)]
    assert again.json["request"]["id"] == first.json["request"]["id"] == created.json()["id"]
    assert again.json["type"] == first.json["type"] == "request.created"
    # nothing lost: every delivery arrived, and the store says each was delivered
    assert set(sent) == set(records) and {d["status"] for d in records.values()} == {"delivered"}
    assert {r.json["request"]["id"] for r in hook.received} == {created.json()["id"], *more}
    # the attempt killed in flight left no trace in the record: the survivor's was its one attempt
    assert records[held]["attempts"] == 1
    assert sent_by_survivor == {"delivered": 1 + len(more)}
    assert "Traceback" not in survivor.stderr and "WARNING" not in survivor.stderr.upper(), survivor.stderr
