"""Runs on every backend: start, park on people, resume once in any process, expire."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

import interlock
from interlock import Broker, Cancelled, Closed, Confirm, InvalidRequest, NotFound, Response, Status, Text
from interlock.broker import LocalBroker
from interlock.errors import IdempotencyKeyReused, RunConflict
from interlock.model import RunStatus, evolve, request_to_dict

pytestmark = pytest.mark.anyio

BOUND = 10  # seconds: the most any single wait in these tests may take
READY_BACKENDS = ["memory", "sqlite", "postgresql", "http"]


@pytest.fixture(params=READY_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def quick(
    backend: str,
    connect: Callable[..., Broker],
    serve_apart: Callable[..., AbstractAsyncContextManager[str]],
    tmp_path: Path,
) -> AsyncIterator[Broker]:
    """A broker whose parked runs are given up after a fraction of a second (for http, a
    server of its own configured so)."""
    if backend != "http":
        async with connect(pause_timeout=0.3) as made:
            yield made
        return
    async with (
        serve_apart(f"sqlite:///{tmp_path / 'quick.db'}", auth=False, pause_timeout=0.3) as base,
        interlock.connect(base) as made,
    ):
        yield made


@pytest.fixture
async def lapsing(
    backend: str,
    connect: Callable[..., Broker],
    serve_apart: Callable[..., AbstractAsyncContextManager[str]],
    tmp_path: Path,
) -> AsyncIterator[Broker]:
    """A broker whose operator set a default expiry of a fraction of a second (for http, a
    server of its own configured so)."""
    if backend != "http":
        async with connect(default_expiry=0.3) as made:
            yield made
        return
    async with (
        serve_apart(f"sqlite:///{tmp_path / 'lapsing.db'}", auth=False, default_expiry=0.3) as base,
        interlock.connect(base) as made,
    ):
        yield made


async def parked_on_approval(broker: Broker, agent: str = "deployer") -> tuple[str, str]:
    run = await broker.start_run(agent, session="thread-1")
    request = await broker.create(Confirm("Deploy to prod?"), kind="approval", to="alice", run=run.id, agent=agent)
    await broker.park(run.id, state={"step": 3, "messages": ["hi"]}, waiting_on=[request.id])
    return run.id, request.id


async def test_a_run_id_another_agent_uses_is_not_handed_back_as_ones_own(broker: Broker) -> None:
    # It was: agent-two's start returned agent-one's run, which agent-two's workers never resume.
    first = await broker.start_run("agent-one", run_id="shared")
    requests = [broker.prepare(Text("Name?"), to="alice")]
    with pytest.raises(RunConflict, match="run 'shared' is a run of agent 'agent-one', not of 'agent-two'"):
        await broker.start_run("agent-two", run_id="shared")
    with pytest.raises(RunConflict, match="not of 'agent-two'"):
        await broker.start_parked("agent-two", requests, state=None, run_id="shared")
    assert (await broker.list()).items == []  # the parked start's request was not made
    assert await broker.get_run(first.id) == first
    # (Through a server with auth, each agent's run ids are its own: tests/security/test_run_ids.py.)


async def test_a_started_run_is_running_and_a_restart_with_its_id_finds_it(broker: Broker) -> None:
    run = await broker.start_run("deployer", session="thread-1", run_id="run-42", max_duration=60)
    assert (run.id, run.agent, run.session, run.status) == ("run-42", "deployer", "thread-1", RunStatus.RUNNING)
    assert run.max_duration == timedelta(seconds=60)

    again = await broker.start_run("deployer", run_id="run-42")
    assert evolve(again, expires_at=None) == evolve(run, expires_at=None)
    assert run.expires_at is not None and again.expires_at is not None
    assert again.expires_at > run.expires_at  # started again, so alive: a new deadline
    assert await broker.get_run("run-42") == again
    with pytest.raises(NotFound):
        await broker.get_run("no-such-run")


async def test_an_exclusive_run_holds_its_session_until_it_ends(broker: Broker) -> None:
    before = await broker.start_run("deployer", session="thread-1", run_id="run-1")  # not exclusive: from before
    after = await broker.last_event_id()
    with pytest.raises(RunConflict) as refused:
        await broker.start_run("deployer", session="thread-1", run_id="run-2", exclusive=True)
    assert (refused.value.run_id, refused.value.status) == (before.id, "running")
    assert "'thread-1'" in str(refused.value) and "cancel" in str(refused.value)
    with pytest.raises(NotFound):
        await broker.get_run("run-2")
    assert await broker.last_event_id() == after  # nothing stored, not even an event

    # Another agent's run on the session, or this agent's on another, are not held by it.
    assert (await broker.start_run("writer", session="thread-1", exclusive=True)).status is RunStatus.RUNNING
    assert (await broker.start_run("deployer", session="thread-2", exclusive=True)).status is RunStatus.RUNNING

    await broker.complete_run(before.id, "done")
    held = await broker.start_run("deployer", session="thread-1", run_id="run-2", exclusive=True)
    assert (held.id, held.status) == ("run-2", RunStatus.RUNNING)
    restarted = await broker.start_run("deployer", session="thread-1", run_id="run-2", exclusive=True)
    assert evolve(restarted, expires_at=held.expires_at) == held  # the same run, with a new deadline
    request = await broker.create(Confirm("Deploy?"), kind="approval", to="alice", run=held.id, agent="deployer")
    await broker.park(held.id, state={"step": 1}, waiting_on=[request.id])
    with pytest.raises(RunConflict) as refused:
        await broker.start_run("deployer", session="thread-1", exclusive=True)
    assert (refused.value.run_id, refused.value.status) == (held.id, "waiting_for_approval")

    assert await broker.cancel_run(held.id)
    third = await broker.start_run("deployer", session="thread-1", exclusive=True)
    assert third.status is RunStatus.RUNNING
    beside = await broker.start_run("deployer", session="thread-1")  # a start that is not exclusive: never refused
    assert beside.status is RunStatus.RUNNING
    with pytest.raises(InvalidRequest, match="session"):
        await broker.start_run("deployer", exclusive=True)
    assert len((await broker.list_runs(agent="deployer", session="thread-1")).items) == 4


async def test_a_thread_of_many_ended_runs_is_held_by_its_one_unended_run(broker: Broker) -> None:
    # The store finds the run holding a thread among the unended runs with a session alone
    # (an index of them): a run leaves it as it ends, however it ends, and stays in it
    # while parked, resumed by a worker, or started parked.
    for turn in range(12):
        run = await broker.start_run("chat", session="thread-1", run_id=f"turn-{turn}", exclusive=True)
        if turn % 3 == 0:
            await broker.complete_run(run.id, "ok")
        elif turn % 3 == 1:
            await broker.fail_run(run.id, "no")
        else:
            await broker.cancel_run(run.id)
    await broker.start_run("chat", run_id="no-thread")  # unended, on no session: holds none
    request = broker.prepare(Confirm("Send?"), kind="approval", to="alice")
    parked = await broker.start_parked("chat", [request], state={"step": 1}, session="thread-1", run_id="parked")
    with pytest.raises(RunConflict) as refused:
        await broker.start_run("chat", session="thread-1", exclusive=True)
    assert (refused.value.run_id, refused.value.status) == (parked.id, "waiting_for_approval")
    await broker.resolve(parked.waiting_on[0], True, by="alice")  # (through a server, the server gives the ids)
    claimed = await broker.claim_run(["chat"], worker="w1")
    assert claimed is not None and claimed.id == parked.id
    with pytest.raises(RunConflict) as refused:
        await broker.start_run("chat", session="thread-1", exclusive=True)
    assert (refused.value.run_id, refused.value.status) == (parked.id, "running")
    await broker.complete_run(parked.id, "sent", worker="w1")
    held = await broker.start_run("chat", session="thread-1", run_id="turn-next", exclusive=True)
    assert (held.id, held.status) == ("turn-next", RunStatus.RUNNING)
    assert len((await broker.list_runs(agent="chat", session="thread-1", limit=100)).items) == 14


async def test_exclusive_starts_at_once_on_one_session_make_one_run(
    backend: str, broker: Broker, connect: Callable[..., Broker]
) -> None:
    """Several processes start a run on one session at the same moment (each its own
    broker, so each its own connections): one run is made, and each other start is refused
    naming it."""
    async with contextlib.AsyncExitStack() as stack:
        others = [] if backend == "memory" else [await stack.enter_async_context(connect()) for _ in range(2)]
        brokers = [broker, *others] * (6 // (1 + len(others)))
        with anyio.fail_after(BOUND):
            started = await asyncio.gather(
                *(
                    b.start_run("deployer", session="thread-1", run_id=f"run-{i}", exclusive=True)
                    for i, b in enumerate(brokers)
                ),
                return_exceptions=True,
            )
    [made] = [r for r in started if not isinstance(r, BaseException)]
    refused = [r for r in started if isinstance(r, BaseException)]
    assert len(refused) == 5 and all(isinstance(r, RunConflict) and r.run_id == made.id for r in refused), refused
    assert [r.id for r in (await broker.list_runs(session="thread-1")).items] == [made.id]


async def test_a_run_started_parked_in_one_call_resumes_once_its_requests_are_answered(broker: Broker) -> None:
    approval = broker.prepare(Confirm("Deploy to prod?"), kind="approval", to="alice")
    question = broker.prepare(Text("Which region?"), to="bob")
    run = await broker.start_parked(
        "deployer", [approval, question], state={"step": 3}, session="thread-1", max_duration=60
    )
    assert (run.agent, run.session, run.status) == ("deployer", "thread-1", RunStatus.WAITING_FOR_APPROVAL)
    assert len(run.waiting_on) == 2 and not run.ready  # in order (a server gives the ids)
    assert await broker.get_run(run.id) == run
    made = [await broker.get(request_id) for request_id in run.waiting_on]
    assert [(r.kind, r.to, r.asks) for r in made] == [(p.kind, p.to, p.asks) for p in (approval, question)]
    for request in made:
        assert (request.origin.run, request.origin.session, request.origin.agent) == (run.id, "thread-1", "deployer")
        assert request.expires_at == run.expires_at  # the pause's deadline
    assert [e.type for e in await broker.find_events(run=run.id)][:1] == ["run_started"]
    assert await broker.claim_run(["deployer"], worker="w1") is None

    assert await broker.resolve(made[0].id, True, by="alice")
    assert await broker.claim_run(["deployer"], worker="w1") is None  # one of two answered
    assert await broker.resolve(made[1].id, {"text": "eu-west"}, by="bob")
    claimed = await broker.claim_run(["deployer"], worker="w1")
    assert claimed is not None and (claimed.id, claimed.state) == (run.id, {"step": 3})
    done = await broker.complete_run(run.id, {"deployed": True}, worker="w1")
    assert (done.status, done.result) == (RunStatus.COMPLETED, {"deployed": True})


async def test_a_worker_waiting_when_the_answer_comes_resumes_the_run_once(broker: Broker) -> None:
    run = await broker.start_parked(
        "deployer", [broker.prepare(Confirm("Deploy?"), kind="approval", to="alice")], state={"step": 1}
    )
    with anyio.fail_after(BOUND):
        writer = asyncio.create_task(broker.claim_run(["writer"], worker="w0", wait=BOUND))
        first = asyncio.create_task(broker.claim_run(["deployer"], worker="w1", wait=BOUND))
        await asyncio.sleep(0)  # both start their claims (found nothing) before the answer
        assert await broker.resolve(run.waiting_on[0], True, by="alice")
        claimed = await first
        assert claimed is not None and (claimed.id, claimed.worker, claimed.attempts) == (run.id, "w1", 1)
        assert claimed.state == {"step": 1}
        assert await broker.claim_run(["deployer"], worker="w2") is None  # once only
        writer.cancel()
    types = [e.type for e in await broker.find_events(run=run.id)]
    assert types.count("run_claimed") == 1 and types[-2:] == ["answered", "run_claimed"]
    done = await broker.complete_run(run.id, "ok", worker="w1")
    assert done.status is RunStatus.COMPLETED


async def test_a_restarted_agent_starting_parked_with_its_run_id_finds_its_run(broker: Broker) -> None:
    first = await broker.start_parked("deployer", [broker.prepare(Text("Name?"), to="alice")], state=1, run_id="run-7")
    again = await broker.start_parked("deployer", [broker.prepare(Text("Name?"), to="alice")], state=2, run_id="run-7")
    assert again == first
    assert len((await broker.list(run="run-7")).items) == 1


async def test_an_agent_that_died_midway_through_starting_parked_asks_nothing_twice_when_it_starts_again(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over HTTP the run, each request and the park are calls of their own: an agent that
    died after its first request and started again made that request a second time (the
    person asked twice, the first copy left pending) before it parked."""

    class Killed(BaseException):
        """The agent's process dying between two calls."""

    def asks() -> list[Any]:
        return [
            broker.prepare(Text("Name?"), to="alice"),
            broker.prepare(Confirm("Deploy?"), kind="approval", to="alice"),
        ]

    submit = broker.submit
    made: list[str] = []

    async def dies_after_one(request: Any) -> Any:
        if made:
            raise Killed
        stored = await submit(request)
        made.append(stored[0].id)
        return stored

    with monkeypatch.context() as patched:
        patched.setattr(broker, "submit", dies_after_one)
        with contextlib.suppress(Killed):  # local stores do it in one transaction: nothing to die between
            await broker.start_parked("deployer", asks(), state={"step": 1}, run_id="run-9")
    again = await broker.start_parked("deployer", asks(), state={"step": 1}, run_id="run-9")
    assert again.status is RunStatus.WAITING_FOR_APPROVAL and len(again.waiting_on) == 2
    asked = (await broker.list(run=again.id)).items
    assert sorted(r.id for r in asked) == sorted(again.waiting_on)  # each asked once, each waited on
    assert made == [] or made[0] == again.waiting_on[0]


@pytest.mark.parametrize("backend", ["http"], indirect=True)
async def test_an_agent_that_starts_parked_again_asking_something_else_is_told_so_in_its_own_terms(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over HTTP each request of the run is keyed by the run and its place: a restarted
    agent that asks something else there is refused, in words about the run it started,
    not an idempotency key it never gave; nothing changes."""

    class Killed(BaseException):
        """The agent's process dying between two calls."""

    submit = broker.submit

    async def dies_after_one(request: Any) -> Any:
        await submit(request)
        raise Killed

    with monkeypatch.context() as patched:
        patched.setattr(broker, "submit", dies_after_one)
        with pytest.raises(Killed):
            await broker.start_parked("deployer", [broker.prepare(Text("Name?"), to="alice")], state={}, run_id="r-5")
    with pytest.raises(IdempotencyKeyReused) as refused:
        await broker.start_parked("deployer", [broker.prepare(Text("Region?"), to="alice")], state={}, run_id="r-5")
    message = str(refused.value)
    assert "idempotency" not in message.lower()
    assert "run 'r-5' already asked something else" in message
    assert "cancel the run" in message.lower() and "start a new one" in message
    (first,) = (await broker.list(run="r-5")).items
    assert refused.value.request_id == first.id and first.status is Status.PENDING and first.asks[0].prompt == "Name?"
    assert (await broker.get_run("r-5")).status is RunStatus.RUNNING  # not parked on the other question


async def test_starting_parked_refuses_what_is_not_a_new_request_of_the_run(broker: Broker) -> None:
    keyed = broker.prepare(Text("Name?"), to="alice", idempotency_key="k1")
    other = broker.prepare(Text("Name?"), to="alice", run="someone-elses")
    for requests in ([], [keyed], [other], ["not a request"]):
        with pytest.raises(InvalidRequest, match="requests"):
            await broker.start_parked("deployer", requests, state=None, run_id="refused")  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        await broker.get_run("refused")


async def test_starting_parked_in_a_closed_channel_stores_no_run_and_no_request(backend: str, broker: Broker) -> None:
    if backend == "http":
        pytest.skip("over HTTP the calls are made one by one: the run is stored before the create is refused")
    await broker.close("ops")
    fine = broker.prepare(Text("Name?"), to="alice")
    closed = broker.prepare(Text("Name?"), to="alice", channel="ops")
    with pytest.raises(Closed):
        await broker.start_parked("deployer", [fine, closed], state=None, run_id="shut")
    with pytest.raises(NotFound):
        await broker.get_run("shut")
    with pytest.raises(NotFound):
        await broker.get(fine.id)
    assert not (await broker.list(channel="ops")).items


async def test_a_parked_run_resumes_once_its_request_is_answered_with_its_state(broker: Broker) -> None:
    run_id, request_id = await parked_on_approval(broker)
    parked = await broker.get_run(run_id)
    assert parked.status is RunStatus.WAITING_FOR_APPROVAL
    assert parked.waiting_on == (request_id,)
    assert not parked.ready
    assert await broker.claim_run(["deployer"], worker="w1") is None  # nobody answered yet

    assert await broker.resolve(request_id, True, by="alice")
    claimed = await broker.claim_run(["deployer"], worker="w1")
    assert claimed is not None and claimed.id == run_id
    assert claimed.status is RunStatus.RUNNING
    assert claimed.state == {"step": 3, "messages": ["hi"]}
    assert (claimed.worker, claimed.attempts) == ("w1", 1)
    assert (await broker.get(request_id)).answer is True
    assert await broker.claim_run(["deployer"], worker="w2") is None  # claimed once only

    done = await broker.complete_run(run_id, {"deployed": True}, worker="w1")
    assert (done.status, done.result, done.terminal_reason) == (RunStatus.COMPLETED, {"deployed": True}, None)
    types = [e.type for e in await broker.find_events(run=run_id)]
    assert types == [
        "run_started",
        "created",
        "input_requested",
        "answered",
        "run_claimed",
        "run_completed",
    ]


async def test_a_run_parked_after_its_requests_settled_is_ready_at_once(broker: Broker) -> None:
    run = await broker.start_run("helper")
    question = await broker.create(Text("Name?"), to="alice", run=run.id)
    await broker.resolve(question.id, "Ada", by="alice")

    parked = await broker.park(run.id, state=["history"], waiting_on=[question.id])
    assert parked.status is RunStatus.WAITING_FOR_INPUT and parked.ready
    claimed = await broker.claim_run(worker="w1")
    assert claimed is not None and claimed.id == run.id


async def test_a_run_waits_for_every_request_it_parked_on(broker: Broker) -> None:
    run = await broker.start_run("helper")
    first = await broker.create(Text("Name?"), to="alice", run=run.id)
    second = await broker.create(Text("Age?"), to="alice", run=run.id)
    await broker.park(run.id, state=None, waiting_on=[first.id, second.id])

    await broker.resolve(first.id, "Ada", by="alice")
    assert await broker.claim_run(worker="w1") is None
    await broker.reject(second.id, "rather not", by="alice")  # settled, even though refused
    claimed = await broker.claim_run(worker="w1")
    assert claimed is not None and claimed.id == run.id


async def test_park_refuses_requests_that_are_not_the_runs_and_changes_nothing(broker: Broker) -> None:
    run = await broker.start_run("helper")
    other = await broker.create(Text("Name?"), to="alice", run=(await broker.start_run("helper")).id)
    plain = await broker.create(Text("Name?"), to="alice")
    for waiting_on in ([other.id], [plain.id], [], ["no-such-request"]):
        with pytest.raises(InvalidRequest):
            await broker.park(run.id, state=None, waiting_on=waiting_on)
    with pytest.raises(InvalidRequest):
        await broker.park(run.id, state={"not json": object()}, waiting_on=[other.id])
    assert (await broker.get_run(run.id)).status is RunStatus.RUNNING


async def test_only_a_running_run_parks_completes_or_fails(broker: Broker) -> None:
    run_id, request_id = await parked_on_approval(broker)
    with pytest.raises(RunConflict):
        await broker.complete_run(run_id)
    another = await broker.create(Text("Why?"), to="alice", run=run_id)
    with pytest.raises(RunConflict):
        await broker.park(run_id, state=None, waiting_on=[request_id, another.id])
    with pytest.raises(NotFound):
        await broker.fail_run("no-such-run", "boom")


async def test_many_workers_racing_claim_each_ready_run_exactly_once(broker: Broker) -> None:
    ids = []
    for _ in range(5):
        run_id, request_id = await parked_on_approval(broker)
        await broker.resolve(request_id, True, by="alice")
        ids.append(run_id)

    async def worker(name: str) -> list[str]:
        got = []
        while (run := await broker.claim_run(["deployer"], worker=name)) is not None:
            got.append(run.id)
        return got

    with anyio.fail_after(BOUND):
        claims = await asyncio.gather(*(worker(f"w{i}") for i in range(8)))
    flat = [run_id for got in claims for run_id in got]
    assert sorted(flat) == sorted(ids)


async def test_a_run_whose_worker_died_is_claimed_again_after_its_lease(broker: Broker) -> None:
    run_id, request_id = await parked_on_approval(broker)
    await broker.resolve(request_id, True, by="alice")
    first = await broker.claim_run(["deployer"], worker="dead", lease=0.2)
    assert first is not None
    assert await broker.claim_run(["deployer"], worker="w2") is None  # still held

    with anyio.fail_after(BOUND):
        second = await broker.claim_run(["deployer"], worker="w2", wait=BOUND)
    assert second is not None and (second.id, second.worker, second.attempts) == (run_id, "w2", 2)
    assert second.state == first.state
    with pytest.raises(RunConflict):
        await broker.complete_run(run_id, worker="dead")  # the dead worker's late word is refused
    assert not await broker.renew_lease(run_id, worker="dead")
    assert await broker.renew_lease(run_id, worker="w2", lease=60)
    assert (await broker.complete_run(run_id, worker="w2")).status is RunStatus.COMPLETED


async def test_a_claim_cancelled_while_the_store_claims_gives_the_run_back_at_once(
    backend: str, broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend == "http":
        pytest.skip("a server's claims: tests/security/test_long_polls_after_revocation.py")
    if backend == "memory":
        pytest.skip("a memory store's claim never waits: no cancel can come while it claims")
    assert isinstance(broker, LocalBroker)
    run_id, request_id = await parked_on_approval(broker)
    assert await broker.resolve(request_id, True, by="alice")
    claim_run = broker.store.claim_run
    entered, go, made = asyncio.Event(), asyncio.Event(), asyncio.Event()
    claimed: list[interlock.Run | None] = []

    async def slow_claim(*args: Any, **options: Any) -> interlock.Run | None:
        if options["worker"] != "gone":
            return await claim_run(*args, **options)
        entered.set()
        await go.wait()
        claimed.append(await claim_run(*args, **options))
        made.set()
        return claimed[-1]

    monkeypatch.setattr(broker.store, "claim_run", slow_claim)
    with anyio.fail_after(BOUND):
        # Its caller gone (a worker stopping) while the store claims the run for it: the
        # run claimed all the same is given back, not held for the hour of its lease.
        gone = asyncio.create_task(broker.claim_run(["deployer"], worker="gone", lease=3600))
        await entered.wait()
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        go.set()
        await made.wait()
        assert [(run.id, run.worker) for run in claimed if run is not None] == [(run_id, "gone")]
        again = await broker.claim_run(["deployer"], worker="w2", wait=BOUND / 2)
    assert again is not None and (again.id, again.worker, again.attempts) == (run_id, "w2", 2), again


async def test_a_waiting_worker_wakes_when_the_person_answers(broker: Broker) -> None:
    run_id, request_id = await parked_on_approval(broker)

    async def answer_soon() -> None:
        await asyncio.sleep(0.05)
        await broker.resolve(request_id, True, by="alice")

    with anyio.fail_after(BOUND):
        answering = asyncio.ensure_future(answer_soon())
        claimed = await broker.claim_run(["deployer"], worker="w1", wait=BOUND)
        await answering
    assert claimed is not None and claimed.id == run_id


async def test_a_worker_handed_runs_by_answers_resumes_each_and_still_sees_other_brokers_runs(
    backend: str, broker: Broker, connect: Callable[..., Broker], request: pytest.FixtureRequest
) -> None:
    # A worker handed one run after another by the answers given beside it, then a run
    # made ready by another broker on the same store (another process), which it must
    # still find: at once when it does not wait, within its wait when it does.
    # Where its claim waits: this broker, or the server this one reaches.
    local = request.getfixturevalue("http_server").app.state.interlock.broker if backend == "http" else broker
    assert isinstance(local, LocalBroker)
    for step in range(3):
        run = await broker.start_parked(
            "deployer", [broker.prepare(Confirm("Deploy?"), kind="approval", to="alice")], state={"step": step}
        )
        with anyio.fail_after(BOUND):
            claiming = asyncio.create_task(broker.claim_run(["deployer"], worker="w1", wait=BOUND))
            while not local.claims_waiting:  # waiting before the answer comes, which hands it the run
                await anyio.wait_all_tasks_blocked()
            assert await broker.resolve(run.waiting_on[0], True, by="alice")
            claimed = await claiming
            assert local.claims_waiting == 0
        assert claimed is not None and (claimed.id, claimed.state) == (run.id, {"step": step})
        await broker.complete_run(run.id, step, worker="w1")
    if backend == "memory":
        return  # no other broker shares a memory store
    async with connect() as other:
        for wait in (0.0, BOUND):
            run_id, request_id = await parked_on_approval(other)
            await other.resolve(request_id, True, by="alice")
            with anyio.fail_after(BOUND):
                claimed = await broker.claim_run(["deployer"], worker="w1", wait=wait)
            assert claimed is not None and claimed.id == run_id
            await broker.complete_run(run_id, "done", worker="w1")
            assert await broker.claim_run(["deployer"], worker="w1") is None  # found none: looked just now


async def test_a_worker_claims_only_the_agents_it_knows(broker: Broker) -> None:
    run_id, request_id = await parked_on_approval(broker, agent="deployer")
    await broker.resolve(request_id, True, by="alice")
    assert await broker.claim_run(["writer"], worker="w1") is None
    claimed = await broker.claim_run(["writer", "deployer"], worker="w1")
    assert claimed is not None and claimed.id == run_id


async def test_cancelling_a_run_withdraws_its_pending_requests(broker: Broker) -> None:
    run_id, request_id = await parked_on_approval(broker)
    assert await broker.cancel_run(run_id, by="alice")
    run = await broker.get_run(run_id)
    assert (run.status, run.terminal_reason) == (RunStatus.CANCELLED, "cancelled_by_user")
    request = await broker.get(request_id)
    assert request.status is Status.CANCELLED
    with pytest.raises(Cancelled):
        await broker.wait(request_id)
    assert not await broker.cancel_run(run_id)  # ended already
    assert await broker.claim_run(worker="w1") is None


async def test_completing_or_failing_a_run_withdraws_the_requests_it_left_pending(broker: Broker) -> None:
    # An agent asks a side question it never waits on, and finishes: nobody would read the
    # answer, so the question leaves the person's inbox rather than waiting there for good.
    for end, ended in (("complete", "completed"), ("fail", "failed")):
        run = await broker.start_run("helper")
        answered = await broker.create(Text("Which region?"), to="alice", run=run.id)
        assert await broker.resolve(answered.id, "eu", by="alice")
        aside = await broker.create(Text("Anything else?"), to="alice", run=run.id)
        waiting = asyncio.ensure_future(broker.wait(aside.id))
        if end == "complete":
            await broker.complete_run(run.id, {"done": True})
        else:
            await broker.fail_run(run.id, "the deploy broke")
        with pytest.raises(Cancelled) as withdrawn:
            with anyio.fail_after(BOUND):
                await waiting
        left = await broker.get(aside.id)
        assert left.status is Status.CANCELLED and left.response is not None
        assert (left.response.cause, left.response.reason) == ("withdrawn", f"the run {ended}")
        assert f"the run {ended}" in str(withdrawn.value)
        assert (await broker.get(answered.id)).answer == "eu"  # what was answered stays answered
        assert not (await broker.list(run=run.id, status=Status.PENDING)).items


async def test_a_request_for_a_run_that_has_ended_is_refused_and_left_pending_nowhere(broker: Broker) -> None:
    # A worker whose run was cancelled while its handler ran asks the next question: it
    # would wait forever in the person's inbox (a run's requests expire with its pause).
    run = await broker.start_run("helper")
    assert await broker.cancel_run(run.id, by="alice")
    with pytest.raises(RunConflict) as refused:
        await broker.create(Text("Which region?"), to="alice", run=run.id)
    assert refused.value.status == "cancelled"
    assert not (await broker.list(run=run.id)).items  # refused before anything was stored
    done = await broker.start_run("helper")
    await broker.complete_run(done.id, "ok")
    with pytest.raises(RunConflict):
        await broker.create(Confirm("Deploy?"), kind="approval", to="alice", run=done.id)
    assert not (await broker.list(run=done.id)).items


async def test_a_request_for_a_run_that_is_not_here_is_refused_and_changes_nothing(broker: Broker) -> None:
    # It would follow no run's pause: no expiry, the operator's default one included.
    with pytest.raises(InvalidRequest, match="there is no run 'made-up' here"):
        await broker.create(Text("Which region?"), to="alice", run="made-up")
    assert not (await broker.list()).items


async def test_a_run_ended_while_its_request_was_stored_withdraws_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with interlock.connect(url) as broker, interlock.connect(url) as other:
        run = await broker.start_run("helper")
        insert = broker.store.insert

        async def cancelled_meanwhile(request: interlock.Request) -> tuple[interlock.Request, bool]:
            assert await other.cancel_run(run.id, by="alice")  # after the check, before the insert
            return await insert(request)

        broker.store.insert = cancelled_meanwhile  # type: ignore[method-assign]
        with pytest.raises(RunConflict):
            await broker.create(Text("Which region?"), to="alice", run=run.id)
        (request,) = (await broker.list(run=run.id)).items
        assert request.status is Status.CANCELLED


async def test_a_cut_wait_leaves_a_runs_request_pending_but_withdraws_a_plain_one(broker: Broker) -> None:
    run = await broker.start_run("helper")
    owned = await broker.create(Text("Name?"), to="alice", run=run.id)
    plain = await broker.create(Text("Name?"), to="alice")
    for request in (owned, plain):
        waiting = asyncio.ensure_future(broker.wait(request.id))
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    assert (await broker.get(owned.id)).status is Status.PENDING
    with anyio.fail_after(BOUND):
        assert (await broker.watch(plain.id, timeout=BOUND)).status is Status.CANCELLED
    assert not await broker.cancel(owned.id, "cut", cause="withdrawn")
    assert await broker.cancel(owned.id, "no longer needed")  # cancelling the request itself does


async def test_an_abandoned_pause_ends_the_run_cancelled_by_interaction_timeout(quick: Broker) -> None:
    run_id, request_id = await parked_on_approval(quick)
    parked = await quick.get_run(run_id)
    assert parked.expires_at is not None
    assert parked.expires_at - parked.updated_at == timedelta(seconds=0.3)

    with anyio.fail_after(BOUND):
        request = await quick.watch(request_id, timeout=BOUND)
    assert request.status is Status.CANCELLED
    run = await quick.get_run(run_id)
    assert (run.status, run.terminal_reason) == (RunStatus.CANCELLED, "interaction_timeout")
    assert request.response is not None and request.response.reason == "interaction_timeout"
    assert [e.type for e in await quick.find_events(run=run_id)][-2:] == ["cancelled", "run_cancelled"]


async def test_a_run_whose_process_never_parks_it_is_given_up_as_abandoned(quick: Broker) -> None:
    run = await quick.start_run("helper", session="thread-1")
    assert run.status is RunStatus.RUNNING and run.worker is None
    assert run.expires_at is not None and run.expires_at - run.created_at == timedelta(seconds=0.3)
    request = await quick.create(Text("Name?"), to="alice", run=run.id)  # awaited in the process that then died
    assert (await quick.get(request.id)).expires_at == run.expires_at  # what a person's inbox shows
    (listed,) = (await quick.list_runs(agent="helper")).items
    assert listed.expires_at == run.expires_at

    with anyio.fail_after(BOUND):
        request = await quick.watch(request.id, timeout=BOUND)
    assert request.status is Status.CANCELLED
    assert request.response is not None and request.response.reason == "abandoned"
    ended = await quick.get_run(run.id)
    assert (ended.status, ended.terminal_reason, ended.expires_at) == (RunStatus.CANCELLED, "abandoned", None)
    events = await quick.find_events(run=run.id)
    assert [e.type for e in events][-2:] == ["cancelled", "run_cancelled"]
    assert events[-1].data["terminal_reason"] == "abandoned"


async def test_an_abandoned_exclusive_run_frees_its_thread(quick: Broker) -> None:
    held = await quick.start_run("graph", session="thread-1", run_id="first", exclusive=True)
    with pytest.raises(RunConflict):
        await quick.start_run("graph", session="thread-1", run_id="second", exclusive=True)
    request = await quick.create(Text("Name?"), to="alice", run=held.id)
    with anyio.fail_after(BOUND):
        assert (await quick.watch(request.id, timeout=BOUND)).status is Status.CANCELLED
    assert (await quick.get_run(held.id)).terminal_reason == "abandoned"

    second = await quick.start_run("graph", session="thread-1", run_id="second", exclusive=True)
    assert (second.id, second.status) == ("second", RunStatus.RUNNING)


async def test_a_run_started_again_before_its_deadline_gets_a_new_one(
    backend: str, connect: Callable[..., Broker]
) -> None:
    if backend == "http":
        pytest.skip("the server's expiry, started again over HTTP: tests/integration/test_server_runs.py")
    async with connect(pause_timeout=3600) as broker:
        assert isinstance(broker, LocalBroker)
        run = await broker.start_run("helper", run_id="run-1")
        request = await broker.create(Text("Name?"), to="alice", run=run.id)
        again = await broker.start_run("helper", run_id="run-1")  # its process, started again
        assert run.expires_at is not None and again.expires_at is not None and again.expires_at > run.expires_at
        # Started again parked on a request (its process, restarted, asking anew) is a sign of life too.
        parked_start = await broker.start_parked(
            "helper", [broker.prepare(Text("Age?"), to="alice")], state=None, run_id="run-1"
        )
        assert parked_start.status is RunStatus.RUNNING and parked_start.expires_at is not None
        assert parked_start.expires_at > again.expires_at
        again = parked_start
        gone = Response(datetime.now(UTC), via="expiry", reason="interaction_timeout", cause="cancelled")
        abandoned = Response(datetime.now(UTC), via="expiry", reason="abandoned", cause="cancelled")

        # The expiry, as it runs at the first deadline, leaves it; at the new one, gives it up.
        assert await broker.store.expire_runs(run.expires_at, gone, abandoned=abandoned) == []
        assert (await broker.get_run(run.id)).status is RunStatus.RUNNING
        assert (await broker.get(request.id)).status is Status.PENDING
        ((ended, cancelled),) = await broker.store.expire_runs(again.expires_at, gone, abandoned=abandoned)
        assert (ended.id, ended.status, ended.terminal_reason) == (run.id, RunStatus.CANCELLED, "abandoned")
        assert [r.id for r in cancelled] == [request.id]


async def test_a_run_its_process_keeps_asking_on_is_not_given_up(backend: str, connect: Callable[..., Broker]) -> None:
    if backend == "http":
        pytest.skip("the deadline is moved by the server's broker; the store is not reached from here")
    async with connect(pause_timeout=3600) as broker:
        assert isinstance(broker, LocalBroker)
        run = await broker.start_run("helper", run_id="run-1")
        # With more than half its window left, a request on it moves nothing (no write).
        await broker.create(Text("Name?"), to="alice", run=run.id)
        assert (await broker.get_run(run.id)).expires_at == run.expires_at

        # Less than half left (as after a week of work), a request on it is a sign of life.
        soon = datetime.now(UTC) + timedelta(seconds=1000)
        assert await broker.store.restart_run(run.id, expires_at=soon) is not None
        before = datetime.now(UTC)
        asked = await broker.create(Text("Age?"), to="alice", run=run.id)
        moved = await broker.get_run(run.id)
        assert moved.status is RunStatus.RUNNING and moved.expires_at is not None
        assert moved.expires_at >= before + timedelta(seconds=3600)
        shown = await broker.get(asked.id)
        assert shown.expires_at == moved.expires_at  # its pending requests show the new one

        gone = Response(datetime.now(UTC), via="expiry", reason="interaction_timeout", cause="cancelled")
        abandoned = Response(datetime.now(UTC), via="expiry", reason="abandoned", cause="cancelled")
        assert await broker.store.expire_runs(soon, gone, abandoned=abandoned) == []
        assert (await broker.get(asked.id)).status is Status.PENDING


async def given_up(broker: Broker, agent: str = "clock") -> None:
    """Start a run of `agent` that nobody keeps alive and return once it is given up as
    abandoned: by then the expiry has run past every deadline of a run started before it."""
    run = await broker.start_run(agent)
    request = await broker.create(Text("Name?"), to="alice", run=run.id)
    with anyio.fail_after(BOUND):
        assert (await broker.watch(request.id, timeout=BOUND)).status is Status.CANCELLED
    assert (await broker.get_run(run.id)).terminal_reason == "abandoned"


async def test_a_run_whose_process_waits_on_its_request_is_kept_until_it_stops_waiting(quick: Broker) -> None:
    # It was given up after the pause timeout, its request cancelled and the waiting
    # process told Cancelled, although that process was alive, waiting, all along.
    run = await quick.start_run("helper")
    request = await quick.create(Text("Name?"), to="alice", run=run.id)
    waiting = asyncio.ensure_future(quick.wait(request.id))
    await given_up(quick)  # past the run's first deadline
    await given_up(quick)  # and past a second window: its deadline moved on while it waited
    assert not waiting.done()
    kept = await quick.get_run(run.id)
    assert kept.status is RunStatus.RUNNING and kept.expires_at is not None and run.expires_at is not None
    assert kept.expires_at > run.expires_at
    assert (await quick.get(request.id)).status is Status.PENDING

    waiting.cancel()  # the process stops waiting (as one that crashed): its run is given up
    with pytest.raises(asyncio.CancelledError):
        await waiting
    with anyio.fail_after(BOUND):
        ended = await quick.watch(request.id, timeout=BOUND)
    assert ended.status is Status.CANCELLED
    assert ended.response is not None and ended.response.reason == "abandoned"
    assert (await quick.get_run(run.id)).terminal_reason == "abandoned"


async def test_a_run_asked_on_in_its_process_is_kept_while_the_ask_waits(quick: Broker) -> None:
    run = await quick.start_run("helper")
    asking = asyncio.ensure_future(quick.ask(Text("Name?"), to="alice", run=run.id))
    await given_up(quick)
    await given_up(quick)
    assert not asking.done()
    (request,) = (await quick.list(run=run.id, status=Status.PENDING)).items
    assert await quick.resolve(request.id, "Alice", by="alice")
    with anyio.fail_after(BOUND):
        assert await asking == "Alice"
    assert (await quick.get_run(run.id)).status is RunStatus.RUNNING


async def test_a_run_whose_waiting_process_exits_is_given_up(backend: str, connect: Callable[..., Broker]) -> None:
    if backend not in ("sqlite", "postgresql"):
        pytest.skip("two processes on one store; over http, a wait cut is its client hanging up (above)")
    async with connect(pause_timeout=0.3) as other, connect(pause_timeout=0.3) as agent:
        run = await agent.start_run("helper")
        request = await agent.create(Text("Name?"), to="alice", run=run.id)
        waiting = asyncio.ensure_future(agent.wait(request.id))
        await given_up(other)  # the other process's expiry passed its first deadline: kept by the wait
        assert not waiting.done()

        await agent.aclose()  # its process exits while it waits
        with pytest.raises(Closed):
            await waiting
        with anyio.fail_after(BOUND):
            ended = await other.watch(request.id, timeout=BOUND)
        assert ended.status is Status.CANCELLED
        assert ended.response is not None and ended.response.reason == "abandoned"


async def test_a_process_waiting_on_its_parked_run_does_not_keep_the_pause_open(quick: Broker) -> None:
    run_id, request_id = await parked_on_approval(quick)
    waiting = asyncio.ensure_future(quick.wait(request_id))  # its deadline is a person's, not the process's
    with anyio.fail_after(BOUND), pytest.raises(Cancelled):
        await waiting
    run = await quick.get_run(run_id)
    assert (run.status, run.terminal_reason) == (RunStatus.CANCELLED, "interaction_timeout")


async def test_a_run_a_worker_holds_is_not_given_up_under_its_live_lease(quick: Broker) -> None:
    run_id, request_id = await parked_on_approval(quick)
    assert await quick.resolve(request_id, True, by="alice")
    claimed = await quick.claim_run(["deployer"], worker="w1", lease=3600)
    assert claimed is not None and (claimed.id, claimed.worker, claimed.expires_at) == (run_id, "w1", None)

    # Another run, started after it was claimed and never parked, is given up: the expiry
    # has looked past any deadline the claimed run could have had.
    other = await quick.start_run("helper")
    request = await quick.create(Text("Name?"), to="alice", run=other.id)
    with anyio.fail_after(BOUND):
        assert (await quick.watch(request.id, timeout=BOUND)).status is Status.CANCELLED
    held = await quick.get_run(run_id)
    assert (held.status, held.worker, held.terminal_reason) == (RunStatus.RUNNING, "w1", None)


async def test_a_longer_max_duration_keeps_the_pause_open_that_long(quick: Broker) -> None:
    run = await quick.start_run("helper", max_duration=timedelta(hours=1))
    request = await quick.create(Text("Name?"), to="alice", run=run.id)
    parked = await quick.park(run.id, state=None, waiting_on=[request.id])
    assert parked.expires_at is not None
    assert parked.expires_at - datetime.now(UTC) > timedelta(minutes=59)
    await asyncio.sleep(0.5)
    assert (await quick.get_run(run.id)).status is RunStatus.WAITING_FOR_INPUT


async def test_a_plain_request_with_no_timeout_never_expires_unless_the_operator_sets_a_default(
    broker: Broker, lapsing: Broker
) -> None:
    assert (await broker.create(Text("Name?"), to="alice")).expires_at is None

    plain = await lapsing.create(Text("Name?"), to="alice")
    assert plain.expires_at is not None and plain.expires_at - plain.created_at == timedelta(seconds=0.3)
    own = await lapsing.create(Text("Age?"), to="alice", timeout=60)
    assert own.expires_at is not None and own.expires_at - own.created_at == timedelta(seconds=60)
    run = await lapsing.start_run("helper")
    of_run = await lapsing.create(Text("Colour?"), to="alice", run=run.id)
    assert of_run.expires_at is None  # a run's request lasts as long as the run's pause
    with anyio.fail_after(BOUND):
        assert (await lapsing.watch(plain.id, timeout=BOUND)).status is Status.EXPIRED
    assert (await lapsing.get(own.id)).status is Status.PENDING
    assert (await lapsing.get(of_run.id)).status is Status.PENDING


async def test_a_default_expiry_must_be_a_positive_duration(backend: str, connect: Callable[..., Broker]) -> None:
    if backend == "http":
        pytest.skip("a server's operator sets it: `interlock serve --default-expiry`")
    for bad in (0, -1, float("inf"), "7d"):
        with pytest.raises(InvalidRequest, match="default_expiry"):
            connect(default_expiry=bad)


async def test_runs_list_by_filter_a_page_at_a_time(broker: Broker) -> None:
    made = [await broker.start_run("deployer", session=f"t{i % 2}") for i in range(5)]
    await broker.start_run("writer")
    first = await broker.list_runs(agent="deployer", limit=2)
    assert [r.id for r in first.items] == [made[4].id, made[3].id]
    second = await broker.list_runs(agent="deployer", limit=2, after=first.next_cursor)
    third = await broker.list_runs(agent="deployer", limit=2, after=second.next_cursor)
    assert [r.id for r in [*first.items, *second.items, *third.items]] == [r.id for r in reversed(made)]
    assert third.next_cursor is None
    assert {r.id for r in (await broker.list_runs(session="t1")).items} == {made[1].id, made[3].id}
    await broker.cancel_run(made[0].id)
    assert [r.id for r in (await broker.list_runs(status="cancelled")).items] == [made[0].id]
    with pytest.raises(InvalidRequest):
        await broker.list_runs(status="sleeping")


async def test_an_answered_pause_waits_for_a_worker_past_its_deadline(quick: Broker) -> None:
    run_id, request_id = await parked_on_approval(quick)
    await quick.resolve(request_id, True, by="alice")
    await asyncio.sleep(0.6)  # past the 0.3 s pause window: nothing to wait for but time
    claimed = await quick.claim_run(["deployer"], worker="w1")
    assert claimed is not None and claimed.id == run_id


async def test_a_pending_request_of_a_parked_run_shows_when_the_pause_expires(broker: Broker) -> None:
    run_id, request_id = await parked_on_approval(broker)
    run = await broker.get_run(run_id)
    request = await broker.get(request_id)
    assert request.expires_at == run.expires_at
    (listed,) = (await broker.list(run=run_id)).items
    assert listed.expires_at == run.expires_at
    await broker.resolve(request_id, True, by="alice")
    settled = await broker.get(request_id)
    assert settled.response is not None
    shown = request_to_dict(settled)
    assert shown["expires_at"] is None and shown["settled_at"] == settled.response.at.isoformat()


async def test_a_restarted_agent_parking_again_on_its_requests_changes_nothing(broker: Broker) -> None:
    run_id, request_id = await parked_on_approval(broker)
    before = await broker.get_run(run_id)
    again = await broker.start_run("deployer", run_id=run_id)
    assert again == before
    assert await broker.park(run_id, state={"step": 3, "messages": ["hi"]}, waiting_on=[request_id]) == before
    assert [e.type for e in await broker.find_events(run=run_id)].count("input_requested") == 1


async def test_an_agent_parking_again_while_a_worker_resumes_its_run_takes_nothing_from_that_worker(
    broker: Broker,
) -> None:
    run_id, request_id = await parked_on_approval(broker)
    started = await broker.start_parked(
        "deployer", [broker.prepare(Text("Name?"), to="alice")], state={"step": 1}, run_id="run-7"
    )
    for request in (request_id, *started.waiting_on):
        assert await broker.resolve(request, True if request == request_id else {"text": "Ada"}, by="alice")
    held = {}
    for _ in range(2):
        claimed = await broker.claim_run(["deployer"], worker="w1")
        assert claimed is not None
        held[claimed.id] = claimed
    assert sorted(held) == sorted([run_id, "run-7"])

    # The agent's process, restarted meanwhile, goes through its steps again: the runs are
    # returned as they are, still the resuming worker's, and no other worker may claim them.
    again = await broker.park(run_id, state={"step": 3, "messages": ["hi"]}, waiting_on=[request_id])
    assert (again.status, again.worker, again.attempts) == (RunStatus.RUNNING, "w1", 1)
    assert again == await broker.get_run(run_id)
    restarted = await broker.start_parked(
        "deployer", [broker.prepare(Text("Name?"), to="alice")], state=2, run_id="run-7"
    )
    assert (restarted.status, restarted.worker, restarted.state) == (RunStatus.RUNNING, "w1", {"step": 1})
    assert await broker.claim_run(["deployer"], worker="w2") is None

    # Parked by anyone but its worker on other requests, it is refused and stays the worker's.
    other = await broker.create(Text("Why?"), to="alice", run=run_id)
    with pytest.raises(RunConflict, match="held by worker w1") as refused:
        await broker.park(run_id, state={"step": 4}, waiting_on=[other.id])
    assert (refused.value.run_id, refused.value.status) == (run_id, "running")
    assert await broker.resolve(other.id, {"text": "because"}, by="alice")
    assert await broker.claim_run(["deployer"], worker="w2") is None
    assert (await broker.get_run(run_id)).state == {"step": 3, "messages": ["hi"]}

    # The worker's own outcome lands, once: each run was claimed once and parked once.
    for run in held:
        assert (await broker.complete_run(run, "ok", worker="w1")).status is RunStatus.COMPLETED
        types = [e.type for e in await broker.find_events(run=run)]
        assert (types.count("run_claimed"), types.count("input_requested")) == (1, 1)


async def test_an_agent_completing_or_failing_a_run_a_worker_resumes_is_refused_and_the_worker_ends_it(
    broker: Broker,
) -> None:
    run_id, request_id = await parked_on_approval(broker)
    assert await broker.resolve(request_id, True, by="alice")
    claimed = await broker.claim_run(["deployer"], worker="w1")
    assert claimed is not None and claimed.id == run_id

    # The agent's process (restarted, or never told) ends the run while w1 resumes it:
    # refused, naming the worker, and the run stays w1's, running, its state as claimed.
    with pytest.raises(RunConflict, match="held by worker w1") as refused:
        await broker.complete_run(run_id, "the agent's")
    assert (refused.value.run_id, refused.value.status) == (run_id, "running")
    with pytest.raises(RunConflict, match="held by worker w1"):
        await broker.fail_run(run_id, "the agent gave up")
    with pytest.raises(RunConflict, match="held by another worker"):
        await broker.complete_run(run_id, "w2's", worker="w2")
    now = await broker.get_run(run_id)
    assert (now.status, now.worker, now.result, now.error) == (RunStatus.RUNNING, "w1", None, None)
    assert await broker.claim_run(["deployer"], worker="w2") is None
    assert await broker.renew_lease(run_id, worker="w1")

    # The resumed code's outcome is the run's, stored once.
    done = await broker.complete_run(run_id, {"deployed": True}, worker="w1")
    assert (done.status, done.result) == (RunStatus.COMPLETED, {"deployed": True})
    types = [e.type for e in await broker.find_events(run=run_id)]
    assert (types.count("run_completed"), types.count("run_failed")) == (1, 0)

    # An agent still ends its own run that no worker holds, as it goes on in its process.
    own = await broker.start_run("deployer")
    assert (await broker.complete_run(own.id, "mine")).result == "mine"
    failing = await broker.start_run("deployer")
    assert (await broker.fail_run(failing.id, "boom")).error == "boom"

    # A cancellation stops a held run all the same; its worker's end then finds it ended.
    held_id, held_request = await parked_on_approval(broker)
    assert await broker.resolve(held_request, True, by="alice")
    assert (await broker.claim_run(["deployer"], worker="w1")).id == held_id  # type: ignore[union-attr]
    assert await broker.cancel_run(held_id)
    with pytest.raises(RunConflict, match="cancelled, not running"):
        await broker.fail_run(held_id, "boom", worker="w1")
    cancelled = await broker.get_run(held_id)
    assert (cancelled.status, cancelled.terminal_reason) == (RunStatus.CANCELLED, "cancelled_by_user")


async def park_deploy(broker: Broker, run_id: str) -> tuple[interlock.Run, interlock.Request, interlock.Run]:
    """The runs guide's agent from the top: start its run, ask with a key, park."""
    run = await broker.start_run("deployer", run_id=run_id)
    approval = await broker.create(
        Confirm("Deploy web to prod?"), kind="approval", to="alice", run=run.id, idempotency_key=f"{run.id}:deploy"
    )
    parked = await broker.park(run.id, state={"step": 3}, waiting_on=[approval.id])
    return run, approval, parked


async def end(broker: Broker, run_id: str, how: str) -> interlock.Run:
    """End a parked run as `how`: completed or failed by the worker that resumed it after
    its approval, or cancelled by a person while it waited."""
    if how == "cancelled":
        assert await broker.cancel_run(run_id, by="alice")
        return await broker.get_run(run_id)
    (request_id,) = (await broker.get_run(run_id)).waiting_on
    assert await broker.resolve(request_id, True, by="alice")
    claimed = await broker.claim_run(["deployer"], worker="w1")
    assert claimed is not None and claimed.id == run_id
    if how == "completed":
        return await broker.complete_run(run_id, {"deployed": True}, worker="w1")
    return await broker.fail_run(run_id, "the registry is gone", worker="w1")


@pytest.mark.parametrize("how", ["completed", "failed", "cancelled"])
async def test_an_agent_restarted_after_its_run_ended_gets_what_it_made_and_asks_nothing_new(
    broker: Broker, how: str
) -> None:
    _, approval, _ = await park_deploy(broker, "deploy-1")
    ended = await end(broker, "deploy-1", how)
    assert ended.status.value == how
    settled = await broker.get(approval.id)
    assert settled.status is (Status.CANCELLED if how == "cancelled" else Status.ANSWERED)

    # From the top again: the run as it is, its request as it is, the park as it was.
    run, again, parked = await park_deploy(broker, "deploy-1")
    assert run == ended and parked == ended
    assert again == settled
    assert [r.id for r in (await broker.list(run="deploy-1")).items] == [approval.id]
    assert [e.type for e in await broker.find_events(run="deploy-1")].count("input_requested") == 1
    # start_parked with the run's own id finds it too, and makes nothing.
    restarted = await broker.start_parked(
        "deployer",
        [broker.prepare(Confirm("Deploy web to prod?"), kind="approval", to="alice")],
        state=1,
        run_id="deploy-1",
    )
    assert restarted == ended
    assert len((await broker.list(run="deploy-1")).items) == 1

    # The key asking something else is refused as ever; a new request for the run, too.
    with pytest.raises(IdempotencyKeyReused):
        await broker.create(
            Confirm("Deploy db to prod?"),
            kind="approval",
            to="alice",
            run="deploy-1",
            idempotency_key="deploy-1:deploy",
        )
    for key in (None, "deploy-1:rollback"):
        with pytest.raises(RunConflict, match=f"has ended \\({how}\\)") as refused:
            await broker.create(Text("Why?"), to="alice", run="deploy-1", idempotency_key=key)
        assert (refused.value.run_id, refused.value.status) == ("deploy-1", how)
    assert len((await broker.list(run="deploy-1")).items) == 1


async def test_bad_run_input_is_refused_and_changes_nothing(broker: Broker) -> None:
    for bad in ({"max_duration": 1e308}, {"max_duration": -1}, {"max_duration": float("nan")}, {"session": "a\x00b"}):
        with pytest.raises(InvalidRequest):
            await broker.start_run("helper", **bad)  # type: ignore[arg-type]
    for agent in ("", "x" * 10_000):
        with pytest.raises(InvalidRequest):
            await broker.start_run(agent)
    assert (await broker.list_runs()).items == []
    run = await broker.start_run("helper")
    with pytest.raises(InvalidRequest):
        await broker.claim_run(["helper"], worker="w", lease=1e308)
    with pytest.raises(InvalidRequest):
        await broker.cancel_run(run.id, "")
    with pytest.raises(InvalidRequest):
        await broker.fail_run(run.id, "e" * 100_000)
    assert (await broker.get_run(run.id)).status is RunStatus.RUNNING


async def test_runs_are_listed_newest_first_whatever_their_ids(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    # All made within the same microsecond of the clock: still listed in the order made.
    frozen = time.time_ns()
    monkeypatch.setattr(time, "time_ns", lambda: frozen)
    for run_id in ("zeta-first", "alpha-second", "mid-third"):  # an agent's own ids: no age in them
        await broker.start_run("scaler", run_id=run_id)
    made = (await broker.start_run("scaler")).id  # an id interlock makes
    pages = [await broker.list_runs(limit=2)]
    pages.append(await broker.list_runs(limit=2, after=pages[0].next_cursor))
    oldest_first = await broker.list_runs(order="asc")
    assert [r.id for page in pages for r in page.items] == [made, "mid-third", "alpha-second", "zeta-first"]
    assert pages[1].next_cursor is None
    assert [r.id for r in oldest_first.items] == ["zeta-first", "alpha-second", "mid-third", made]


@pytest.mark.parametrize("cursor", ["run-3", "12.", ".run-3", "999999999999999999.x", "١٢.run-3"])
async def test_a_runs_cursor_no_page_gave_is_refused(broker: Broker, cursor: str) -> None:
    await broker.start_run("scaler", run_id="run-3")
    with pytest.raises(InvalidRequest, match="is not one a page of runs gave"):
        await broker.list_runs(after=cursor)
