"""Runs on PostgreSQL under concurrency: what the trigger and the locks are there for."""

from __future__ import annotations

import asyncio

import anyio
import pytest

import interlock
from interlock import Confirm, RunStatus, Text

pytestmark = pytest.mark.anyio

BOUND = 30


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
