"""The worker: resumes each ready run once, by its agent's handler, on every store."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

import interlock
from interlock import Broker, Confirm, RateLimited, Request, Status, Text, Unavailable
from interlock import runs as runs_module
from interlock.errors import ApprovalDenied
from interlock.model import DEFAULT_PAUSE_TIMEOUT, Run, RunStatus
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


async def test_a_handler_that_raises_fails_the_run_with_its_error(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    async def resume(run: Run, requests: Mapping[str, Request]) -> Any:
        raise RuntimeError("the cluster is down")

    run, request = await park_on(broker, "deployer")
    await broker.reject(request.id, "not today", by="alice")
    failed = await Worker(broker, {"deployer": resume}).run_once()
    assert failed is not None
    assert (failed.status, failed.terminal_reason, failed.error) == (
        RunStatus.FAILED,
        "error",
        "RuntimeError: the cluster is down",
    )
    (logged,) = [r for r in caplog.records if run.id in r.getMessage()]
    assert logged.levelname == "ERROR" and logged.exc_info is not None  # a fault: its traceback


async def test_a_denied_approval_that_fails_the_run_is_one_warning_without_a_traceback(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    # A person's no is the run's outcome, not a fault: a traceback through the framework's
    # frames at ERROR sent an operator looking for a bug that was not there.
    async def resume(run: Run, requests: Mapping[str, Request]) -> Any:
        try:
            raise ApprovalDenied(request.id, "not on a Friday")
        except ApprovalDenied as denied:
            raise RuntimeError("the graph stopped") from denied  # as a framework may wrap it

    run, request = await park_on(broker, "deployer")
    await broker.reject(request.id, "not on a Friday", by="alice")
    failed = await Worker(broker, {"deployer": resume}).run_once()
    assert failed is not None and failed.status is RunStatus.FAILED
    (logged,) = [r for r in caplog.records if run.id in r.getMessage()]
    assert (logged.levelname, logged.exc_info) == ("WARNING", None)
    assert logged.getMessage() == f"run {run.id} of agent deployer failed: RuntimeError: the graph stopped"


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


async def test_draining_resumes_as_many_runs_at_a_time_as_its_concurrency(broker: Broker) -> None:
    """`interlock worker --once --concurrency 4` resumed the runs ready one at a time: a
    worker's `drain` ignored its concurrency."""
    parked = [await park_on(broker, "deployer", f"Deploy {i}?") for i in range(2)]
    for _, request in parked:
        await broker.resolve(request.id, True, by="alice")
    both = asyncio.Barrier(2)  # each handler goes on only once the other has begun too

    async def resume(run: Run, requests: Mapping[str, Request]) -> Any:
        async with asyncio.timeout(1):  # one at a time, the other never begins: the run fails
            await both.wait()
        return "deployed"

    with anyio.fail_after(BOUND):
        assert await Worker(broker, {"deployer": resume}, name="w1", concurrency=2).drain() == 2
    for run, _ in parked:
        assert (await broker.get_run(run.id)).status is RunStatus.COMPLETED


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


async def test_cancelling_a_run_a_worker_resumes_stops_its_handler_at_the_next_renewal(broker: Broker) -> None:
    """What the handler would do after the cancel (a deploy) is not done: it is cancelled
    at its next await once a renewal finds the run no longer the worker's."""
    run = await ready_run(broker)
    slow = Held("deployed")
    stopped: list[str] = []

    async def deploy(run: Run, requests: Mapping[str, Request]) -> Any:
        try:
            return await slow(run, requests)
        except asyncio.CancelledError:
            stopped.append(run.id)
            raise

    worker = Worker(broker, {"deployer": deploy}, name="w1", lease=LEASE)
    working = asyncio.create_task(worker.run_once())
    with anyio.fail_after(BOUND):
        await slow.started.wait()
        await broker.cancel_run(run.id)
        ended = await working  # at the next renewal, within a third of the lease
    assert ended is not None and (ended.status, ended.terminal_reason) == (RunStatus.CANCELLED, "cancelled_by_user")
    assert stopped == [run.id] and not slow.release.is_set()


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


def renewals_failing(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """The store refusing every renewal of a lease while the event returned is set (it is,
    at first); clear it and renewals go through again."""
    renew_lease = broker.renew_lease
    outage = asyncio.Event()
    outage.set()

    async def away(run_id: str, *, worker: str, lease: float = LEASE) -> bool:
        if outage.is_set():
            raise RuntimeError("the database system is starting up")
        return await renew_lease(run_id, worker=worker, lease=lease)

    monkeypatch.setattr(broker, "renew_lease", away)
    return outage


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_a_run_taken_over_by_another_loop_of_the_same_worker_stops_the_handler_that_lost_it(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One worker serving several runs at a time claims under one name: once its renewals of
    a run failed past the lease and another of its loops claimed the run again, the first
    handler is stopped, as it would be for another worker's takeover (a renewal of the same
    name succeeds, so it cannot tell): the handler does not run twice at once."""
    run = await ready_run(broker)
    outage = renewals_failing(broker, monkeypatch)
    attempts: list[int] = []
    stopped: list[int] = []
    second, lost = asyncio.Event(), asyncio.Event()
    release = asyncio.Event()

    async def deploy(run: Run, requests: Mapping[str, Request]) -> Any:
        attempts.append(run.attempts)
        if run.attempts == 2:
            second.set()
        try:
            await release.wait()
        except asyncio.CancelledError:
            stopped.append(run.attempts)
            lost.set()
            raise
        return f"deployed by attempt {run.attempts}"

    stop = asyncio.Event()
    worker = Worker(broker, {"deployer": deploy}, name="w1", lease=LEASE, concurrency=2)
    with anyio.fail_after(BOUND):
        async with asyncio.TaskGroup() as group:
            group.create_task(worker.run(stop=stop))
            await second.wait()  # the lease ran out while renewals failed: the other loop claimed it
            outage.clear()  # the store is back: the first handler's renewal goes through again
            with anyio.move_on_after(LEASE):  # within a renewal of the first handler's
                await lost.wait()
            assert attempts == [1, 2] and stopped == [1]  # the first stopped before the second ends the run
            release.set()
            stop.set()  # the worker stops once the handler at work has ended its run
    assert attempts == [1, 2] and stopped == [1]
    assert (await broker.get_run(run.id)).result == "deployed by attempt 2"


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_two_workers_of_one_process_named_by_default_do_not_run_one_run_s_handler_at_once(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each worker named by default was `host:pid`, the same for every worker of a process:
    once renewals of a run failed past the lease and the other worker claimed it, the first
    one's renewal succeeded under the shared name, and both handlers went on."""
    run = await ready_run(broker)
    outage = renewals_failing(broker, monkeypatch)
    started, again, lost, release = asyncio.Event(), asyncio.Event(), asyncio.Event(), asyncio.Event()
    stopped: list[int] = []

    async def deploy(run: Run, requests: Mapping[str, Request]) -> Any:
        (started if run.attempts == 1 else again).set()
        try:
            await release.wait()
        except asyncio.CancelledError:
            stopped.append(run.attempts)
            lost.set()
            raise
        return f"deployed by attempt {run.attempts}"

    first, second = Worker(broker, {"deployer": deploy}, lease=LEASE), Worker(broker, {"deployer": deploy}, lease=LEASE)
    with anyio.fail_after(BOUND):
        working = asyncio.create_task(first.run_once())
        await started.wait()
        taken = asyncio.create_task(second.run_once(wait=BOUND))  # once the first one's lease ran out
        await again.wait()
        outage.clear()  # the store is back: the first worker's next renewal goes through
        with anyio.move_on_after(LEASE):  # within a renewal of the first worker's
            await lost.wait()
        assert stopped == [1]
        release.set()
        await working
        done = await taken
    assert done is not None and (done.id, done.status, done.result) == (
        run.id,
        RunStatus.COMPLETED,
        "deployed by attempt 2",
    )


# -- "not now": a handler hands its run back ------------------------------------------------


class NotNowThen:
    """A resume handler that says "not now" (`Unavailable`) `times` times, then deploys;
    it records each call's claim count and when it started."""

    def __init__(
        self,
        times: int,
        retry_after: float | None = None,
        result: str = "deployed",
        error: type[Unavailable | RateLimited] = Unavailable,
    ) -> None:
        self.times = times
        self.error = error
        self.retry_after = retry_after
        self.result = result
        self.calls: list[int] = []
        self.started_at: list[datetime] = []

    async def __call__(self, run: Run, requests: Mapping[str, Request]) -> Any:
        self.calls.append(run.attempts)
        self.started_at.append(datetime.now(UTC))
        if len(self.calls) <= self.times:
            raise self.error("the deploy service is down", retry_after=self.retry_after)
        return self.result


async def hand_backs(broker: Broker, run_id: str) -> list[dict[str, Any]]:
    """The records of the run's hand-backs (updates on the run)."""
    events = await broker.find_events(run=run_id)
    return [
        dict(e.data["data"])
        for e in events
        if e.type == "informed" and e.data.get("data", {}).get("outcome") == "handed_back"
    ]


async def test_a_handler_that_says_not_now_hands_the_run_back_and_a_later_claim_completes_it(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    run, request = await park_on(broker, "deployer")
    await broker.resolve(request.id, True, by="alice")
    handler = NotNowThen(1, retry_after=LEASE)
    worker = Worker(broker, {"deployer": handler}, name="w1")
    with anyio.fail_after(BOUND):
        back = await worker.run_once()
    # Not failed: held out of every worker's hands for the delay, its state and requests as parked.
    assert back is not None and back.id == run.id
    assert (back.status, back.error, back.terminal_reason, back.worker) == (RunStatus.RUNNING, None, None, "w1")
    assert back.state == {"asked": "Deploy?"} and back.waiting_on == (request.id,)
    assert (await broker.get(request.id)).status is Status.ANSWERED
    (warning,) = [r for r in caplog.records if r.levelname == "WARNING" and run.id in r.getMessage()]
    assert "handed run" in warning.getMessage() and "the deploy service is down" in warning.getMessage()
    (record,) = await hand_backs(broker, run.id)
    assert (record["worker"], record["reason"]) == ("w1", "Unavailable: the deploy service is down")
    assert "resuming run" not in caplog.text  # no error logged: nothing failed

    with anyio.fail_after(BOUND):
        done = await worker.run_once(wait=BOUND)
    assert done is not None and (done.id, done.status, done.result, done.attempts) == (
        run.id,
        RunStatus.COMPLETED,
        "deployed",
        2,
    )
    assert handler.calls == [1, 2]
    assert not [e for e in await broker.find_events(run=run.id) if e.type == "run_failed"]


async def test_a_handler_whose_calls_meet_a_used_up_quota_hands_the_run_back_too(broker: Broker) -> None:
    # A quota of the caller's (429 through a server) is used up for a while, not for good:
    # the run waits for its retry_after instead of failing.
    run, request = await park_on(broker, "deployer")
    await broker.resolve(request.id, True, by="alice")
    handler = NotNowThen(1, retry_after=LEASE, error=RateLimited)
    worker = Worker(broker, {"deployer": handler}, name="w1")
    with anyio.fail_after(BOUND):
        back = await worker.run_once()
        assert back is not None and (back.status, back.error) == (RunStatus.RUNNING, None)
        (record,) = await hand_backs(broker, run.id)
        assert record["reason"] == "RateLimited: the deploy service is down"
        done = await worker.run_once(wait=BOUND)
    assert done is not None and (done.status, done.result, handler.calls) == (RunStatus.COMPLETED, "deployed", [1, 2])


async def test_a_run_handed_back_is_claimed_by_another_worker_only_once_the_delay_is_over(
    broker: Broker, connect: Callable[..., Broker], backend: str
) -> None:
    run = await ready_run(broker)
    lacking = NotNowThen(1_000, retry_after=1.0)
    first = Worker(broker, {"deployer": lacking}, name="w1")
    async with connect() as other:
        peer = broker if backend == "memory" else other  # another process's connection (or client)
        able = NotNowThen(0, result="deployed by w2")
        second = Worker(peer, {"deployer": able}, name="w2")
        with anyio.fail_after(BOUND):
            back = await first.run_once()
            assert back is not None and back.lease_expires_at is not None
            until = back.lease_expires_at
            assert await second.run_once() is None  # out of every worker's hands until then
            done = await second.run_once(wait=BOUND)
    assert done is not None and (done.id, done.status, done.result, done.attempts) == (
        run.id,
        RunStatus.COMPLETED,
        "deployed by w2",
        2,
    )
    assert (lacking.calls, able.calls) == ([1], [2])
    assert able.started_at[0] >= until  # not before the delay the hand-back asked for was over


async def test_a_worker_hands_a_run_back_for_longer_each_time_and_records_it_once(
    broker: Broker, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runs_module, "HAND_BACK_FIRST", LEASE / 2)  # 5 s in a worker, shorter here
    run = await ready_run(broker)
    handler = NotNowThen(2)  # no retry_after: the worker's own back-off
    worker = Worker(broker, {"deployer": handler}, name="w1")
    with anyio.fail_after(BOUND):
        await worker.run_once()
        await worker.run_once(wait=BOUND)
        done = await worker.run_once(wait=BOUND)
    assert done is not None and (done.status, done.attempts) == (RunStatus.COMPLETED, 3)
    delays = [r.getMessage().split(" in ")[1].split(" s:")[0] for r in caplog.records if "handed run" in r.getMessage()]
    assert delays == [f"{LEASE / 2:.1f}", f"{LEASE:.1f}"]
    (record,) = await hand_backs(broker, run.id)  # the first of them; the next ones are logged only
    assert record["delay"] == LEASE / 2


async def test_a_worker_through_a_server_gives_a_handed_back_run_up_at_the_server_s_pause_timeout(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]]
) -> None:
    async with (
        serve_apart(f"sqlite:///{tmp_path / 'brief.db'}", auth=False, pause_timeout=1.0) as base,
        interlock.connect(base) as broker,
    ):
        run = await ready_run(broker)
        handler = NotNowThen(1_000, retry_after=0.2)
        worker = Worker(broker, {"deployer": handler}, name="w1")
        assert worker.pause_timeout == DEFAULT_PAUSE_TIMEOUT  # nothing claimed yet
        with anyio.fail_after(BOUND):
            back = await worker.run_once()
            assert back is not None and back.status is RunStatus.RUNNING  # handed back, not failed
            assert worker.pause_timeout == timedelta(seconds=1)  # what the claim's answer said
            while back is not None and back.status is RunStatus.RUNNING:
                back = await worker.run_once(wait=BOUND)
    # Given up a second after its request was answered, as the server's pause timeout says;
    # not after the 14 days a worker without it would count.
    assert back is not None and (back.id, back.status) == (run.id, RunStatus.FAILED)
    assert back.error == (
        "Unavailable: the deploy service is down (handed back since its requests settled; given up after 1 s)"
    )
    assert 2 <= len(handler.calls) < 100


async def test_a_run_handed_back_for_as_long_as_a_pause_waits_is_failed_with_the_handler_s_reason(
    broker: Broker,
) -> None:
    run = await ready_run(broker)
    handler = NotNowThen(1_000, retry_after=1.0)
    worker = Worker(broker, {"deployer": handler}, name="w1")
    late = datetime.now(UTC) + DEFAULT_PAUSE_TIMEOUT + timedelta(hours=1)
    worker._now = lambda: late  # two weeks after its request was answered, handed back all along
    with anyio.fail_after(BOUND):
        failed = await worker.run_once()
    assert failed is not None and (failed.id, failed.status, failed.terminal_reason) == (
        run.id,
        RunStatus.FAILED,
        "error",
    )
    assert failed.error == (
        "Unavailable: the deploy service is down (handed back since its requests settled; given up after 14 days)"
    )
    assert handler.calls == [1]
