"""Runs on PostgreSQL under concurrency: what the trigger and the locks are there for."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import anyio
import asyncpg  # type: ignore[import-untyped]
import pytest
from pg_support import database_of, psql

import interlock
from interlock import Confirm, RunConflict, RunStatus, Text
from interlock.model import Response, response_to_dict
from interlock.store.postgres import Connections, PostgresStore

pytestmark = pytest.mark.anyio

BOUND = 30


def pool(broker: interlock.Broker) -> Connections:
    store = broker.store
    assert isinstance(store, PostgresStore)
    return store.pool


async def test_two_requests_of_a_run_answered_at_once_on_two_nodes_make_it_ready(pg_url: str) -> None:
    # Without the run's row lock, each settling transaction would see the other request
    # still pending, and neither would make the run ready.
    async with interlock.connect(pg_url) as one, interlock.connect(pg_url) as two:
        for round_ in range(25):
            run = await one.start_run("helper")
            first = await one.create(Text("Name?"), to="alice", run=run.id)
            second = await one.create(Text("Age?"), to="alice", run=run.id)
            await one.park(run.id, state={"round": round_}, waiting_on=[first.id, second.id])
            with anyio.fail_after(BOUND):
                await asyncio.gather(one.resolve(first.id, "Ada", by="alice"), two.resolve(second.id, "36", by="alice"))
            assert (await two.get_run(run.id)).ready, f"round {round_}: the run was not made ready"


async def test_an_answer_racing_the_park_is_never_missed(pg_url: str) -> None:
    async with interlock.connect(pg_url) as agent, interlock.connect(pg_url) as person:
        for round_ in range(25):
            run = await agent.start_run("helper")
            request = await agent.create(Confirm("Go?"), kind="approval", to="alice", run=run.id)
            with anyio.fail_after(BOUND):
                await asyncio.gather(
                    agent.park(run.id, state=None, waiting_on=[request.id]),
                    person.resolve(request.id, True, by="alice"),
                )
            parked = await person.get_run(run.id)
            assert parked.status is RunStatus.WAITING_FOR_APPROVAL and parked.ready, f"round {round_}"


async def test_workers_on_many_nodes_claim_each_run_once(pg_url: str) -> None:
    brokers = [interlock.connect(pg_url) for _ in range(4)]
    for broker in brokers:
        await broker.open()
    try:
        ids = []
        for _ in range(30):
            run = await brokers[0].start_run("deployer")
            request = await brokers[0].create(Confirm("Go?"), kind="approval", to="alice", run=run.id)
            await brokers[0].park(run.id, state=None, waiting_on=[request.id])
            await brokers[0].resolve(request.id, True, by="alice")
            ids.append(run.id)

        async def drain(broker: interlock.Broker, name: str) -> list[str]:
            got = []
            while (run := await broker.claim_run(["deployer"], worker=name)) is not None:
                got.append(run.id)
            return got

        with anyio.fail_after(BOUND):
            claims = await asyncio.gather(*(drain(b, f"node-{i}") for i, b in enumerate(brokers)))
        assert sorted(run_id for got in claims for run_id in got) == sorted(ids)
    finally:
        for broker in brokers:
            await broker.aclose()


async def test_an_answer_that_hands_its_run_to_a_waiting_worker_writes_the_runs_row_once(pg_url: str) -> None:
    # Straight from parked to running: not marked ready first and claimed after, which
    # would be two new versions of the row in each of its indexes.
    async with interlock.connect(pg_url) as broker:
        request = broker.prepare(Confirm("Deploy?"), kind="approval", to="alice")
        run = await broker.start_parked("deployer", [request], state={"step": 1})
        answer = Response(datetime.now(UTC), answers={request.asks[0].id: True}, by="alice")
        conn = await pool(broker).acquire()
        try:
            async with conn.transaction():
                settled, claimed = await conn.fetchrow(
                    "SELECT settled, claimed FROM interlock_settle_claiming("
                    "$1, 'answered', now(), $2, NULL, 'w1', now() + interval '1 minute', now(), NULL)",
                    request.id,
                    json.dumps(response_to_dict(answer)),
                )
                written = await conn.fetchval("SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'runs'")
        finally:
            pool(broker).release(conn)
        assert settled and claimed["id"] == run.id and claimed["status"] == "running" and claimed["worker"] == "w1"
        assert not claimed["ready"] and claimed["attempts"] == 1
        assert written == 1
        events = [event.type for event in await broker.find_events(run=run.id)]
        assert events == ["run_started", "created", "input_requested", "answered", "run_claimed"]


async def test_a_search_first_brings_the_search_text_up_to_date_with_every_create_and_answer(pg_url: str) -> None:
    async with interlock.connect(pg_url) as broker:
        first = await broker.create(Text("Who reviews the release notes?"), to="alice")
        second = await broker.create(Confirm("Ship 1.4.2?"), kind="approval", to="alice")
        third = await broker.create(Text("Anything else?"), to="alice")
        found = await broker.list(text="release notes")
        assert [request.id for request in found.items] == [first.id]
        await broker.resolve(first.id, "Ada Lovelace, after lunch", by="alice")
        await broker.reject(second.id, by="alice", reason="the changelog is missing")
        await broker.cancel(third.id)
        found = await broker.list(text="lovelace lunch")
        assert [request.id for request in found.items] == [first.id]
        same = await pool(broker).fetch(
            "SELECT t.body = interlock_request_text(r.doc, r.response) "
            "FROM requests r LEFT JOIN request_texts t USING (id)"
        )
        assert [row[0] for row in same] == [True, True, True]


async def test_the_search_text_catches_up_shortly_after_a_write_without_a_search(pg_url: str) -> None:
    async with interlock.connect(pg_url) as broker:
        request = await broker.create(Text("Who reviews the release notes?"), to="alice")
        await broker.resolve(request.id, "Ada Lovelace", by="alice")
        with anyio.fail_after(BOUND):
            while True:
                sql = "SELECT body @@ to_tsquery('simple', 'lovelace') FROM request_texts WHERE id = $1"
                if await pool(broker).fetchval(sql, request.id):
                    break
                await anyio.sleep(0.05)  # the store's catch-up runs 0.2 s after its own events
        assert await pool(broker).fetchval("SELECT upto FROM derived WHERE name = 'search'") == 2


async def test_a_pause_that_ran_out_while_every_node_was_down_is_given_up_once_when_two_start(pg_url: str) -> None:
    async with interlock.connect(pg_url) as first:
        run = await first.start_run("auditor")
        answered = await first.create(Text("Scope?"), to="alice", run=run.id)
        left = await first.create(Text("Sign?"), to="alice", run=run.id)
        await first.park(run.id, state=None, waiting_on=[answered.id, left.id])
        await first.resolve(answered.id, "all", by="alice")
    psql(f"UPDATE runs SET expires_at = now() - interval '1 second' WHERE id = '{run.id}'", database_of(pg_url))
    nodes = [interlock.connect(pg_url) for _ in range(2)]
    await asyncio.gather(*(node.open() for node in nodes))
    try:
        with anyio.fail_after(BOUND):
            async for event in nodes[1].events(follow=True):
                if event.type == "run_cancelled":
                    break
        ended = await nodes[0].get_run(run.id)
        assert (ended.status, ended.terminal_reason) == (RunStatus.CANCELLED, "interaction_timeout")
        withdrawn = await nodes[0].get(left.id)
        assert withdrawn.response is not None and withdrawn.response.reason == "interaction_timeout"
        assert (await nodes[0].get(answered.id)).answer == "all"  # the answer stands
    finally:
        for node in nodes:
            await node.aclose()
    async with interlock.connect(pg_url) as reader:
        events = [e async for e in reader.events()]
    assert [e.type for e in events if e.type in ("cancelled", "run_cancelled")] == ["cancelled", "run_cancelled"]
    assert next(e for e in events if e.type == "cancelled").request_id == left.id


async def test_an_exclusive_start_waiting_on_another_s_uncommitted_one_is_refused_once_that_commits(
    pg_url: str,
) -> None:
    """Two starts at once on one session both look before either has committed, and find no
    run there: the second is refused all the same, once the first commits (the index of
    unended exclusive runs; a look alone would let both in)."""
    other = await asyncpg.connect(pg_url)
    try:
        async with interlock.connect(pg_url) as broker:
            first = other.transaction()
            await first.start()
            await other.execute(
                "INSERT INTO runs (id, agent, session, status, created_at, updated_at, sole)"
                " VALUES ('run-1', 'mailer', 'thread-1', 'running', now(), now(), true)"
            )
            second = asyncio.ensure_future(
                broker.start_run("mailer", session="thread-1", run_id="run-2", exclusive=True)
            )
            blocked = (
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND query LIKE '%sole%'"
            )
            with anyio.fail_after(BOUND):
                while True:  # until the second start waits on the first (or is done: it did not wait)
                    if second.done() or psql(blocked, database_of(pg_url)) != "0":
                        break
                    await anyio.sleep(0.01)
            await first.commit()
            with anyio.fail_after(BOUND), pytest.raises(RunConflict) as refused:
                await second
            assert (refused.value.run_id, refused.value.status) == ("run-1", "running")
            assert [r.id for r in (await broker.list_runs(session="thread-1")).items] == ["run-1"]
    finally:
        await other.close()
