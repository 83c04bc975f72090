"""The worker: resumes each ready run once, by its agent's handler, on every store."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
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


async def test_a_serving_worker_stops_when_its_broker_is_closed(
    connect: Callable[..., Broker], caplog: pytest.LogCaptureFixture
) -> None:
    async def resume(run: Run, requests: Mapping[str, Request]) -> Any:
        return "ok"

    broker = connect()
    await broker.open()
    serving = asyncio.create_task(Worker(broker, {"deployer": resume}, concurrency=2).run())
    await asyncio.sleep(0.2)  # each of its loops waits to claim a run
    await broker.aclose()
    with anyio.fail_after(BOUND):
        await serving  # ends: neither an ExceptionGroup of `Closed` nor a retry
    assert "could not claim" not in caplog.text  # the server was never out of reach


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


# -- the lease, renewed while the handler works -------------------------------------------------

LEASE = 0.4  # seconds: short, so that a handler outlives several leases within the tests' bound


class Held:
    """A resume handler that holds its run until `release` is set, saying when it started."""

    def __init__(self, result: str) -> None:
        self.result = result
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.calls = 0
        self.started_at: datetime | None = None

    async def __call__(self, run: Run, requests: Mapping[str, Request]) -> Any:
        self.calls += 1
        self.started_at = datetime.now(UTC)
        self.started.set()
        await self.release.wait()
        return self.result


async def ready_run(broker: Broker) -> Run:
    run, request = await park_on(broker, "deployer")
    await broker.resolve(request.id, True, by="alice")
    return run


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_handler_that_outlives_its_lease_keeps_the_run_and_other_workers_off_it(
    broker: Broker, connect: Callable[..., Broker]
) -> None:
    run = await ready_run(broker)
    slow = Held("done by w1")
    first = Worker(broker, {"deployer": slow}, name="w1", lease=LEASE)
    working = asyncio.create_task(first.run_once())
    async with connect() as elsewhere:  # another process's connection to the same store
        other = Held("done by w2")
        second = Worker(elsewhere, {"deployer": other}, name="w2", lease=LEASE)
        with anyio.fail_after(BOUND):
            await slow.started.wait()
            claimed = (await elsewhere.get_run(run.id)).lease_expires_at
            assert claimed is not None
            # Until the handler has outlived its first lease by two more, the other worker keeps
            # asking (each a bounded long poll) and never gets the run: it is renewed.
            while datetime.now(UTC) < claimed + timedelta(seconds=2 * LEASE):
                assert await second.run_once(wait=LEASE / 4) is None
            held = await elsewhere.get_run(run.id)
            assert held.status is RunStatus.RUNNING and held.worker == "w1" and held.attempts == 1
            assert held.lease_expires_at is not None and held.lease_expires_at > claimed + timedelta(seconds=LEASE)
            slow.release.set()
            done = await working
    assert done is not None and (done.status, done.result, done.attempts) == (RunStatus.COMPLETED, "done by w1", 1)
    assert (slow.calls, other.calls) == (1, 0)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_worker_that_stops_renewing_loses_the_run_to_another_once_its_lease_runs_out(
    broker: Broker, connect: Callable[..., Broker]
) -> None:
    run = await ready_run(broker)
    slow = Held("done by w1")
    first = Worker(broker, {"deployer": slow}, name="w1", lease=LEASE)
    working = asyncio.create_task(first.run_once())
    async with connect() as elsewhere:
        other = Held("done by w2")
        other.release.set()
        second = Worker(elsewhere, {"deployer": other}, name="w2", lease=LEASE)
        with anyio.fail_after(BOUND):
            await slow.started.wait()
            # The first worker dies: its handler and its renewals stop with it.
            working.cancel()
            with pytest.raises(asyncio.CancelledError):
                await working
            last = (await elsewhere.get_run(run.id)).lease_expires_at
            assert last is not None
            taken = await second.run_once(wait=BOUND)
    assert taken is not None and (taken.status, taken.result, taken.attempts) == (
        RunStatus.COMPLETED,
        "done by w2",
        2,
    )
    assert other.started_at is not None and other.started_at >= last  # not before the dead worker's lease ran out
    assert (slow.calls, other.calls) == (1, 1)
    assert not await broker.renew_lease(run.id, worker="w1", lease=LEASE)  # the run is no longer w1's


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_a_store_failing_for_a_moment_as_the_handler_ends_does_not_resume_the_run_again(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Any driver's error, not only ConnectionError/OSError: a full disk, a database restarting.
    run = await ready_run(broker)
    complete_run = broker.complete_run
    failures = ["disk I/O error", "the database system is starting up"]

    async def flaky(run_id: str, result: Any = None, *, worker: str | None = None) -> Run:
        if failures:
            raise RuntimeError(failures.pop(0))
        return await complete_run(run_id, result, worker=worker)

    monkeypatch.setattr(broker, "complete_run", flaky)
    calls = []

    async def resume(run: Run, requests: Mapping[str, Request]) -> Any:
        calls.append(run.attempts)
        return "deployed"

    with anyio.fail_after(BOUND):
        done = await Worker(broker, {"deployer": resume}, name="w1", lease=LEASE * 10).run_once()
    assert done is not None and (done.id, done.status, done.result, done.attempts) == (
        run.id,
        RunStatus.COMPLETED,
        "deployed",
        1,
    )
    assert calls == [1] and not failures


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_a_renewal_that_fails_with_any_error_is_tried_again_and_keeps_the_run(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = await ready_run(broker)
    renew_lease = broker.renew_lease
    refused = []

    async def flaky(run_id: str, *, worker: str, lease: float = LEASE) -> bool:
        if not refused:
            refused.append(run_id)
            raise RuntimeError("the database system is starting up")  # not an OSError: a driver's own
        return await renew_lease(run_id, worker=worker, lease=lease)

    monkeypatch.setattr(broker, "renew_lease", flaky)
    slow = Held("done by w1")
    working = asyncio.create_task(Worker(broker, {"deployer": slow}, name="w1", lease=LEASE).run_once())
    with anyio.fail_after(BOUND):
        await slow.started.wait()
        claimed = (await broker.get_run(run.id)).lease_expires_at
        assert claimed is not None
        # Renewed again after the refusal, past the lease it was claimed with.
        held = await broker.get_run(run.id)
        while held.lease_expires_at is None or held.lease_expires_at <= claimed + timedelta(seconds=LEASE):
            await anyio.sleep(LEASE / 4)  # not renewed past it yet: look again (bounded above)
            held = await broker.get_run(run.id)
        slow.release.set()
        done = await working
    assert refused == [run.id] and held.worker == "w1"
    assert done is not None and (done.status, done.result, done.attempts) == (RunStatus.COMPLETED, "done by w1", 1)
