"""Finding 2: one approval runs one call, across processes and nodes.

Consuming an approval is a durable, conditional write in the store (`Broker.consume`):
the same behaviour on every backend, one winner when brokers race, and a gate that runs
a call only on an approval it consumed. The race is then run for real: two processes
handling the same delivered call, waiting on the same approval, 1,000 times.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import anyio
import httpx
import pytest

import interlock
from interlock import Broker, Confirm, Request, Response, Status
from interlock.agent import ApprovalGate, ToolCall
from interlock.errors import ApprovalRefused
from interlock.principals import Principal, issue_token

pytestmark = pytest.mark.anyio

BOUND = 10
T = TypeVar("T")


async def bounded(awaitable: Awaitable[T]) -> T:
    with anyio.fail_after(BOUND):
        return await awaitable


async def answered(broker: Broker, answer: bool = True) -> Request:
    request = await broker.create(Confirm("Deploy?", id="approve"), kind="approval", to="alice", requester="ops")
    assert await broker.resolve(request.id, {"approve": answer}, by="alice")
    return request


async def event_types(broker: Broker, request_id: str) -> list[str]:
    return [e.type async for e in broker.events() if e.request_id == request_id]


# -- the store's consume, on every backend -----------------------------------------------------


async def test_an_answered_request_is_consumed_once_with_an_event(
    broker: Broker, connect: Callable[..., Broker], backend: str
) -> None:
    request = await answered(broker)
    assert await broker.consume(request.id, by="ops")
    assert not await broker.consume(request.id, by="ops")
    if backend != "memory":  # another process on the same store
        async with connect() as other:
            assert not await other.consume(request.id, by="ops")
    assert await event_types(broker, request.id) == ["created", "answered", "consumed"]
    assert (await broker.get(request.id)).status is Status.ANSWERED


async def test_only_an_answered_request_can_be_consumed(broker: Broker) -> None:
    pending = await broker.create(Confirm("Deploy?", id="approve"), kind="approval", to="alice")
    rejected = await broker.create(Confirm("Deploy?", id="approve"), kind="approval", to="alice")
    await broker.reject(rejected.id, "no", by="alice")
    for request_id in (pending.id, rejected.id, "0000000000000000unknown"):
        assert not await broker.consume(request_id, by="ops")
    assert await broker.resolve(pending.id, {"approve": True}, by="alice")
    assert await broker.consume(pending.id, by="ops")  # answered after all: consumable once
    assert await event_types(broker, rejected.id) == ["created", "rejected"]


async def test_brokers_racing_to_consume_one_request_have_exactly_one_winner(
    broker: Broker, connect: Callable[..., Broker], backend: str
) -> None:
    requests = [await answered(broker) for _ in range(20)]
    async with connect() as second:
        other = broker if backend == "memory" else second  # memory: one store per process
        for request in requests:
            wins = await bounded(
                asyncio.gather(broker.consume(request.id, by="ops"), other.consume(request.id, by="ops"))
            )
            assert sorted(wins) == [False, True]


# -- the gate across processes ------------------------------------------------------------------


class Ran:
    def __init__(self) -> None:
        self.count = 0


async def authorize(gate: ApprovalGate, call: ToolCall, ran: Ran) -> str:
    try:
        await gate.authorize(call)
    except ApprovalRefused:
        return "refused"
    ran.count += 1
    return "ran"


class Announce:
    """The inbox contract, saying when it starts waiting."""

    def __init__(self) -> None:
        self.waiting = asyncio.Event()

    async def settle(self, broker: Broker, request: Request) -> Response:
        self.waiting.set()
        return await broker.wait(request.id)


async def test_two_processes_waiting_on_one_approval_run_the_call_once(
    broker: Broker, connect: Callable[..., Broker], backend: str
) -> None:
    call = ToolCall("deploy", {"env": "prod"}, "c1", session="s1", agent="ops")
    ran = Ran()
    async with connect() as second:
        other = broker if backend == "memory" else second  # memory: two gates on one store
        contracts = [Announce(), Announce()]
        tasks = []
        for on, contract in zip((broker, other), contracts, strict=True):
            gate = ApprovalGate(on, policies={"deploy": "always"}, to="alice", contracts=contract)
            tasks.append(asyncio.create_task(authorize(gate, call, ran)))  # the same call, delivered twice
            await bounded(contract.waiting.wait())
        (request,) = (await broker.list(kind="approval")).items
        assert await broker.resolve(request.id, {"approve": True}, by="alice")
        outcomes = await bounded(asyncio.gather(*tasks))
    assert sorted(outcomes) == ["ran", "refused"] and ran.count == 1


class AgentDied(Exception):
    pass


class DiesWhileWaiting:
    """A contract standing for an agent process that dies after asking, before the answer."""

    async def settle(self, broker: Broker, request: Request) -> Response:
        raise AgentDied


async def test_an_approval_given_while_the_agent_was_down_runs_the_call_once_after_a_restart(
    broker: Broker, connect: Callable[..., Broker], backend: str
) -> None:
    if backend == "memory":
        pytest.skip("a memory store does not outlive its process")
    call = ToolCall("deploy", {"env": "prod"}, "c1", session="s1", agent="ops")
    with pytest.raises(AgentDied):
        await ApprovalGate(broker, policies={"deploy": "always"}, to="alice", contracts=DiesWhileWaiting()).authorize(
            call
        )
    (request,) = (await broker.list(kind="approval")).items
    assert await broker.resolve(request.id, {"approve": True}, by="alice")
    ran = Ran()
    async with connect() as restarted, connect() as another:
        outcomes = [
            await bounded(authorize(ApprovalGate(b, policies={"deploy": "always"}, to="alice"), call, ran))
            for b in (restarted, another, broker)
        ]
    assert outcomes == ["ran", "refused", "refused"] and ran.count == 1


# -- over HTTP: only the requester consumes -------------------------------------------------------


@pytest.fixture
def tokens(tmp_path: Path) -> dict[str, str]:
    made: dict[str, str] = {}

    async def setup() -> None:
        async with interlock.connect(f"sqlite:///{tmp_path / 'auth.db'}") as broker:
            for principal in (Principal("alice", "human"), Principal("ops", "agent", owner="alice")):
                await broker.store.save_principal(principal)
                token = issue_token(principal.name, datetime.now(UTC))
                await broker.store.save_token(token)
                made[principal.name] = token.secret

    anyio.run(setup)
    return made


async def test_over_http_only_the_requester_consumes_and_the_server_records_who(
    tmp_path: Path, tokens: dict[str, str], serve_apart: Callable[..., AbstractAsyncContextManager[str]]
) -> None:
    db = f"sqlite:///{tmp_path / 'auth.db'}"
    async with serve_apart(db, auth=True) as base:
        client = {
            who: httpx.AsyncClient(
                base_url=f"{base}/api/v1", headers={"Authorization": f"Bearer {secret}"}, timeout=BOUND
            )
            for who, secret in tokens.items()
        }
        try:
            created = await client["ops"].post(
                "/requests", json={"kind": "approval", "asks": [{"type": "confirm", "id": "approve", "prompt": "Go?"}]}
            )
            request_id = created.json()["id"]
            early = await client["ops"].post(f"/requests/{request_id}/consume", json={})
            assert early.status_code == 200 and early.json() == {"id": request_id, "consumed": False}
            answer = await client["alice"].post(f"/requests/{request_id}/answer", json={"answers": {"approve": True}})
            assert answer.status_code == 200, answer.text
            refused = await client["alice"].post(f"/requests/{request_id}/consume", json={"by": "ops"})
            assert refused.status_code == 403 and refused.json()["code"] == "forbidden"
            first = await client["ops"].post(f"/requests/{request_id}/consume", json={"by": "alice"})
            assert first.json() == {"id": request_id, "consumed": True}
            again = await client["ops"].post(f"/requests/{request_id}/consume")
            assert again.json() == {"id": request_id, "consumed": False}
            missing = await client["ops"].post("/requests/nope/consume", json={})
            assert missing.status_code == 404
        finally:
            for c in client.values():
                await c.aclose()
    with contextlib.closing(sqlite3.connect(tmp_path / "auth.db")) as db_file, db_file:
        (consumed_by,) = db_file.execute("SELECT consumed_by FROM requests WHERE id = ?", (request_id,)).fetchone()
    assert consumed_by == "ops"  # the caller, not the `by` it sent


# -- 1,000 races between two real processes --------------------------------------------------------

TRIALS = 1000

WORKER = """
import asyncio, sys
import interlock
from interlock.agent import ApprovalGate, ToolCall
from interlock.errors import ApprovalRefused

class Announce:
    # Waits in the inbox like the default contract, first saying which request it waits on.
    async def settle(self, broker, request):
        print("wait", request.id, flush=True)
        return await broker.wait(request.id)

async def main(url, trials):
    async with interlock.connect(url) as broker:
        gate = ApprovalGate(broker, policies={"deploy": "always"}, to="alice", contracts=Announce())
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        for n in range(trials):
            call = ToolCall("deploy", {"n": n}, f"call-{n}", session="race", agent="ops")
            try:
                await gate.authorize(call)
            except ApprovalRefused:
                print("refused", n, flush=True)
            else:
                print("ran", n, flush=True)

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_two_processes_racing_on_one_approval_run_the_call_exactly_once_in_1000_trials(
    url: str, tmp_path: Path
) -> None:
    """Each trial: both processes get the same call, both ask (one creates the approval,
    the other finds it by its idempotency key), both wait; alice approves once; both wake
    and try to consume it. Exactly one may run the call."""
    async with interlock.connect(url) as alice:  # migrated before the workers start
        logs = [(tmp_path / f"worker-{i}.log").open("w") for i in range(2)]
        workers = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                WORKER,
                url,
                str(TRIALS),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
            )
            for log in logs
        ]
        runs: dict[int, int] = dict.fromkeys(range(TRIALS), 0)
        wins = [0, 0]
        try:
            with anyio.fail_after(120):
                for worker in workers:
                    assert await _line(worker) == ["ready"]
                for worker in workers:  # released together
                    assert worker.stdin is not None
                    worker.stdin.write(b"go\n")
                    await worker.stdin.drain()
                for n in range(TRIALS):
                    waiting = []
                    for worker in workers:
                        line = await _line(worker)
                        assert line[0] == "wait", (n, line)
                        waiting.append((worker, line[1]))
                    # Both wait on the one approval: the race below is real each time.
                    assert len(waiting) == 2 and waiting[0][1] == waiting[1][1], (n, waiting)
                    assert await alice.resolve(waiting[0][1], {"approve": True}, by="alice")
                    for worker, _ in waiting:
                        if _count(runs, n, await _line(worker)):
                            wins[workers.index(worker)] += 1
                for worker in workers:
                    assert await worker.wait() == 0
        finally:
            for worker in workers:
                if worker.returncode is None:
                    worker.kill()
                    await worker.wait()
            for log in logs:
                log.close()
    twice = [n for n, count in runs.items() if count > 1]
    never = [n for n, count in runs.items() if count == 0]
    assert (twice, never) == ([], []), f"runs won by each worker: {wins}"
    print(f"runs won by each worker: {wins}")


async def _line(worker: asyncio.subprocess.Process) -> list[str]:
    assert worker.stdout is not None
    raw = await worker.stdout.readline()
    if not raw:
        raise AssertionError(f"a worker ended early (exit code {await worker.wait()})")
    return raw.decode().split()


def _count(runs: dict[int, int], n: int, line: list[str]) -> bool:
    """Count a worker's outcome of trial `n`; whether it ran the call."""
    outcome, trial = line
    assert int(trial) == n and outcome in ("ran", "refused"), (n, line)
    runs[n] += outcome == "ran"
    return outcome == "ran"
