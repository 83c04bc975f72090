"""The worker: resumes each ready run once, by its agent's handler, on every store."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import pytest

from interlock import Broker, Confirm, Request, Status, Text
from interlock.model import Run, RunStatus
from interlock.runs import Park, Worker

pytestmark = pytest.mark.anyio

BOUND = 10


@pytest.fixture(params=["memory", "sqlite", "postgresql", "http"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def park_on(broker: Broker, agent: str, prompt: str = "Deploy?") -> tuple[Run, Request]:
    run = await broker.start_run(agent)
    request = await broker.create(Confirm(prompt), kind="approval", to="alice", run=run.id)
    return await broker.park(run.id, state={"asked": prompt}, waiting_on=[request.id]), request


async def test_a_worker_resumes_a_ready_run_with_its_state_and_answers(broker: Broker) -> None:
    seen: list[tuple[Any, dict[str, Any]]] = []

    async def resume(run: Run, requests: Mapping[str, Request]) -> Any:
        seen.append((run.state, {rid: r.answer for rid, r in requests.items()}))
        return {"deployed": all(r.answer for r in requests.values())}

    worker = Worker(broker, {"deployer": resume}, name="w1")
    _, request = await park_on(broker, "deployer")
    assert await worker.run_once() is None  # not answered yet
    await broker.resolve(request.id, True, by="alice")

    done = await worker.run_once()
    assert done is not None and (done.status, done.result) == (RunStatus.COMPLETED, {"deployed": True})
    assert seen == [({"asked": "Deploy?"}, {request.id: True})]
    assert await worker.run_once() is None  # resumed once


async def test_a_handler_parks_again_on_a_new_request_and_is_resumed_after_it(broker: Broker) -> None:
    async def resume(run: Run, requests: Mapping[str, Request]) -> Any:
        if run.state["step"] == 1:
            follow_up = await broker.create(Text("Which region?"), to="alice", run=run.id)
            return Park({"step": 2}, [follow_up.id])
        (answer,) = (r.answer for r in requests.values())
        return f"deployed to {answer}"

    worker = Worker(broker, {"deployer": resume})
    run = await broker.start_run("deployer")
    first = await broker.create(Confirm("Deploy?"), kind="approval", to="alice", run=run.id)
    await broker.park(run.id, state={"step": 1}, waiting_on=[first.id])
    await broker.resolve(first.id, True, by="alice")

    again = await worker.run_once()
    assert again is not None and again.status is RunStatus.WAITING_FOR_INPUT and again.state == {"step": 2}
    (follow_up,) = again.waiting_on
    await broker.resolve(follow_up, "eu-west", by="alice")
    done = await worker.run_once()
    assert done is not None and (done.status, done.result, done.attempts) == (
        RunStatus.COMPLETED,
        "deployed to eu-west",
        2,
    )


async def test_a_handler_that_raises_fails_the_run_with_its_error(broker: Broker) -> None:
    async def resume(run: Run, requests: Mapping[str, Request]) -> Any:
        raise RuntimeError("the cluster is down")

    _, request = await park_on(broker, "deployer")
    await broker.reject(request.id, "not today", by="alice")
    failed = await Worker(broker, {"deployer": resume}).run_once()
    assert failed is not None
    assert (failed.status, failed.terminal_reason, failed.error) == (
        RunStatus.FAILED,
        "error",
        "RuntimeError: the cluster is down",
    )


async def test_a_result_that_is_not_json_fails_the_run_instead_of_looping(broker: Broker) -> None:
    async def resume(run: Run, requests: Mapping[str, Request]) -> Any:
        return object()

    _, request = await park_on(broker, "deployer")
    await broker.resolve(request.id, True, by="alice")
    failed = await Worker(broker, {"deployer": resume}).run_once()
    assert failed is not None and failed.status is RunStatus.FAILED and "InvalidRequest" in (failed.error or "")


async def test_workers_serving_together_resume_each_run_exactly_once(
    broker: Broker, connect: Callable[..., Broker], backend: str
) -> None:
    resumed: list[str] = []
    all_done = asyncio.Event()
    count = 6

    async def resume(run: Run, requests: Mapping[str, Request]) -> Any:
        resumed.append(run.id)
        await asyncio.sleep(0.01)
        if len(resumed) >= count:
            all_done.set()
        return "ok"

    async with connect() as other:
        # On SQLite and PostgreSQL the second worker has a connection of its own, as
        # another process would; a memory store lives in one broker only.
        peer = broker if backend == "memory" else other
        workers = [Worker(broker, {"deployer": resume}, name="a"), Worker(peer, {"deployer": resume}, name="b")]
        stop = asyncio.Event()
        parked = [await park_on(broker, "deployer", f"Deploy {i}?") for i in range(count)]
        with anyio.fail_after(BOUND):
            async with asyncio.TaskGroup() as group:
                for worker in workers:
                    group.create_task(worker.run(stop=stop))
                for _, request in parked:
                    await broker.resolve(request.id, True, by="alice")
                await all_done.wait()
                stop.set()
    await asyncio.sleep(0.05)  # nothing more may come: every run was resumed once
    assert sorted(resumed) == sorted(run.id for run, _ in parked)
    for run, _ in parked:
        assert (await broker.get_run(run.id)).status is RunStatus.COMPLETED
    assert (await broker.get(parked[0][1].id)).status is Status.ANSWERED
