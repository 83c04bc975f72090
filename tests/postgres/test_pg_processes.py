"""Real processes and real `interlock serve` nodes on one PostgreSQL database."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import aconnect_sse
from pg_support import BOUND, nodes, read_line, send, spawn

import interlock
from interlock import Status, Text

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TEXT = [{"type": "text", "prompt": "Deploy?"}]


async def sse(client: httpx.AsyncClient, url: str, last_event_id: int | None = None) -> AsyncIterator[dict[str, Any]]:
    """The events of a node's live stream, as dicts, from now (or after `last_event_id`)."""
    headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
    async with aconnect_sse(client, "GET", f"{url}/api/v1/events/stream", headers=headers) as source:
        async for message in source.aiter_sse():
            if message.event in ("", "message") or not message.data:
                continue
            yield json.loads(message.data)


async def collect(stream: AsyncIterator[dict[str, Any]], count: int, into: list[dict[str, Any]]) -> None:
    async for event in stream:
        into.append(event)
        if len(into) == count:
            return


async def test_an_agent_on_node_a_gets_the_answer_posted_to_node_b_and_node_c_streams_it_all(pg_url: str) -> None:
    async with (
        nodes(pg_url, 3) as [(a, _), (b, _), (c, _)],
        httpx.AsyncClient(timeout=BOUND) as http,
        interlock.connect(a) as agent,
    ):
        # The stream on C starts from the log's current end: nothing made from here on is missed.
        start = (await http.get(f"{c}/api/v1/events")).json()["last_event_id"]
        seen_on_c: list[dict[str, Any]] = []
        stream_c = asyncio.create_task(collect(sse(http, c, last_event_id=start), 5, seen_on_c))

        request = await agent.create(Text("Deploy v2?"), to="alice", title="Roll-out")
        waiter = asyncio.create_task(agent.wait(request.id))
        answered = await http.post(f"{b}/api/v1/requests/{request.id}/answer", json={"answer": "ship it"})
        assert answered.status_code == 200, answered.text
        with anyio.fail_after(BOUND):
            assert (await waiter).answers == {"text": "ship it"}  # the agent, on node A, woke

        other = await agent.create(Text("And v3?"), to="alice")
        assert (await http.post(f"{c}/api/v1/requests/{other.id}/reject", json={"reason": "later"})).is_success
        await http.post(f"{a}/api/v1/inform", json={"message": "done", "to": "alice"})
        with anyio.fail_after(BOUND):
            await stream_c
        assert [(e["type"], e["request_id"]) for e in seen_on_c] == [
            ("created", request.id),
            ("answered", request.id),
            ("created", other.id),
            ("rejected", other.id),
            ("informed", None),
        ]
        ids = [e["id"] for e in seen_on_c]
        assert ids == sorted(ids)
        assert seen_on_c[1]["request"]["response"]["answers"] == {"text": "ship it"}

        # Node A's log is the same log: C's stream and A's page agree, id for id.
        page = (await http.get(f"{a}/api/v1/events", params={"after": start})).json()
        assert [e["id"] for e in page["events"]] == ids

        # Reconnecting to another node with Last-Event-ID replays exactly what was missed.
        resumed: list[dict[str, Any]] = []
        with anyio.fail_after(BOUND):
            await collect(sse(http, a, last_event_id=ids[1]), 3, resumed)
        assert [e["id"] for e in resumed] == ids[2:5]

        # Two nodes answering one request at once: one 200, one 409 already_settled.
        for _ in range(10):
            made = (await http.post(f"{a}/api/v1/requests", json={"asks": TEXT, "to": "alice"})).json()
            replies = await asyncio.gather(
                http.post(f"{a}/api/v1/requests/{made['id']}/answer", json={"answer": "from a"}),
                http.post(f"{b}/api/v1/requests/{made['id']}/answer", json={"answer": "from b"}),
            )
            assert sorted(r.status_code for r in replies) == [200, 409]
            loser = next(r for r in replies if r.status_code == 409)
            assert loser.json()["code"] == "already_settled"


RACER = """
    import asyncio, sys, interlock

    async def main():
        name = sys.argv[2]
        loop = asyncio.get_running_loop()
        lines = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(lines), sys.stdin)
        async with interlock.connect(sys.argv[1]) as broker:
            print("ready", flush=True)
            while line := (await lines.readline()).decode().split():
                command, request_id = line
                if command == "get":  # read it first: then the race is on the settlement alone
                    await broker.get(request_id)
                    print("got", flush=True)
                else:
                    print("won" if await broker.resolve(request_id, name) else "lost", flush=True)

    asyncio.run(main())
"""


async def test_a_thousand_races_between_two_processes_each_have_exactly_one_winner(pg_url: str) -> None:
    racers = [await spawn(RACER, pg_url, name) for name in ("left", "right")]
    winners: dict[str, str] = {}
    try:
        for racer in racers:
            assert await read_line(racer) == "ready"
        async with interlock.connect(pg_url) as broker:
            for _ in range(1000):
                request = await broker.create(Text("Who?"))
                send(racers, f"get {request.id}")
                for racer in racers:
                    assert await read_line(racer) == "got"
                send(racers, f"go {request.id}")  # both at once
                results = [await read_line(racer) for racer in racers]
                assert sorted(results) == ["lost", "won"]
                winners[request.id] = "left" if results[0] == "won" else "right"

            events = [e async for e in broker.events()]
            answered = [e.request_id for e in events if e.type == "answered"]
            assert sorted(answered) == sorted(winners)  # one `answered` event each, no more
            for request_id, winner in winners.items():
                assert (await broker.get(request_id)).answer == winner
    finally:
        for racer in racers:
            assert racer.stdin is not None
            racer.stdin.close()
        for racer in racers:
            with anyio.fail_after(BOUND):
                await racer.wait()
    wins = list(winners.values())
    print(f"left won {wins.count('left')}, right won {wins.count('right')}")


async def test_killing_a_node_mid_stream_loses_nothing_acknowledged_and_other_nodes_waiters_wake(
    pg_url: str,
) -> None:
    async with nodes(pg_url, 3) as [(a, node_a), (b, _), (c, _)], httpx.AsyncClient(timeout=BOUND) as http:
        # Ten long polls wait on node B: half answered through A before it dies, half through C after.
        watched = [(await http.post(f"{c}/api/v1/requests", json={"asks": TEXT})).json()["id"] for _ in range(10)]
        polls = [
            asyncio.create_task(http.get(f"{b}/api/v1/requests/{i}/wait", params={"timeout": BOUND})) for i in watched
        ]
        acked: list[tuple[str, str]] = []
        enough = asyncio.Event()

        async def churn(worker: int) -> None:
            n = 0
            try:
                while True:
                    made = await http.post(f"{a}/api/v1/requests", json={"asks": TEXT, "title": f"{worker}-{n}"})
                    assert made.status_code == 201
                    request_id = made.json()["id"]
                    acked.append(("created", request_id))
                    answered = await http.post(f"{a}/api/v1/requests/{request_id}/answer", json={"answer": "ok"})
                    assert answered.status_code == 200
                    acked.append(("answered", request_id))
                    n += 1
                    if len(acked) >= 300:
                        enough.set()
            except httpx.TransportError:
                return  # node A is gone: what was in flight was never acknowledged

        for request_id in watched[:5]:
            assert (await http.post(f"{a}/api/v1/requests/{request_id}/answer", json={"answer": "a"})).is_success
        churners = [asyncio.create_task(churn(w)) for w in range(4)]
        with anyio.fail_after(60):
            await enough.wait()
            os.kill(node_a.pid, signal.SIGKILL)  # in the middle of creates and answers
            await asyncio.gather(*churners)
        assert await node_a.wait() == -signal.SIGKILL

        for request_id in watched[5:]:
            assert (await http.post(f"{c}/api/v1/requests/{request_id}/answer", json={"answer": "c"})).is_success
        with anyio.fail_after(BOUND):
            replies = await asyncio.gather(*polls)
        assert [r.status_code for r in replies] == [200] * 10
        assert [r.json()["response"]["answers"]["text"] for r in replies] == ["a"] * 5 + ["c"] * 5

    async with interlock.connect(pg_url) as broker:
        for what, request_id in acked:
            request = await broker.get(request_id)
            if what == "answered":
                assert request.status is Status.ANSWERED and request.answer == "ok"
        events = [e async for e in broker.events()]
        created = {e.request_id for e in events if e.type == "created"}
        answered = {e.request_id for e in events if e.type == "answered"}
        assert {rid for what, rid in acked if what == "created"} <= created
        assert {rid for what, rid in acked if what == "answered"} <= answered
        assert len(acked) >= 300


WAITER = """
    import asyncio, json, sys, time, interlock

    async def main():
        async with interlock.connect(sys.argv[1]) as broker:
            task = asyncio.create_task(broker.wait(sys.argv[2]))
            for _ in range(3):
                await asyncio.sleep(0)  # let the wait register and block
            print("waiting", flush=True)
            response = await task
            print(json.dumps({"answers": response.answers, "woke": time.time()}), flush=True)

    asyncio.run(main())
"""


async def test_a_waiter_in_another_process_wakes_on_the_notification_not_the_poll(pg_url: str) -> None:
    async with interlock.connect(pg_url) as broker:
        request = await broker.create(Text("Name?"))
        # The child polls once an hour, so within the bound only a NOTIFY can wake it.
        child = await spawn(WAITER, f"{pg_url}?poll_interval=3600", request.id)
        assert await read_line(child) == "waiting"
        sent = time.time()
        assert await broker.resolve(request.id, "Ada")
        result = json.loads(await read_line(child))
        assert result["answers"] == {"text": "Ada"}
        assert result["woke"] >= sent
        with anyio.fail_after(BOUND):
            assert await child.wait() == 0
