"""The approval gate for a run that parks: decide without waiting, consume the settled approval later."""

from __future__ import annotations

from typing import Any

import pytest

from interlock import Broker, Cancelled, Request, Status
from interlock.agent import Allow, ApprovalGate, ToolCall
from interlock.errors import ApprovalDenied, ApprovalRefused, InvalidRequest

pytestmark = pytest.mark.anyio

SCHEMA = {
    "type": "object",
    "properties": {"env": {"enum": ["staging", "prod"]}},
    "required": ["env"],
    "additionalProperties": False,
}


@pytest.fixture(autouse=True)
async def run_1(broker: Broker) -> None:
    """The run the calls below belong to."""
    await broker.start_run("bot", run_id="run-1")


def deploy(env: str = "staging", *, call_id: str = "call-1") -> ToolCall:
    return ToolCall("deploy", {"env": env}, id=call_id, session="s1", agent="bot", to="alice", run="run-1")


async def test_a_call_nobody_need_approve_gets_its_arguments_at_once(broker: Broker) -> None:
    gate = ApprovalGate(broker, policies={"deploy": "never"}, auto_allow=["read_*"])
    assert await gate.begin(deploy()) == {"env": "staging"}
    assert await gate.begin(ToolCall("read_file", {"path": "a"}, session="s1")) == {"path": "a"}
    gate = ApprovalGate(broker, hook=lambda call: Allow())
    assert await gate.begin(deploy()) == {"env": "staging"}
    assert (await broker.list()).items == []


async def test_begin_leaves_a_pending_approval_without_waiting_and_finish_consumes_it_once(broker: Broker) -> None:
    gate = ApprovalGate(broker, policies={"deploy": "always"}, to="alice")
    request = await gate.begin(deploy(), schema=SCHEMA)
    assert isinstance(request, Request) and request.status is Status.PENDING
    assert request.kind == "approval" and request.origin.run == "run-1"
    assert request.expires_at is None  # a parked run's request takes the run's expiry
    with pytest.raises(InvalidRequest, match="not been decided yet"):
        await gate.finish(deploy(), request, schema=SCHEMA)
    assert await broker.resolve(request.id, {"approve": True, "arguments": {"env": "prod"}}, by="alice")
    settled = await broker.get(request.id)
    # a fresh gate: the process that resumes the run is not the one that parked it
    later = ApprovalGate(broker, policies={"deploy": "always"}, to="alice")
    assert await later.finish(deploy(), settled, schema=SCHEMA) == {"env": "prod"}
    with pytest.raises(ApprovalRefused, match="already decided once") as replayed:
        await ApprovalGate(broker, to="alice").finish(deploy(), settled, schema=SCHEMA)
    # A script run again with a fixed run or session id reads as a replay: it is told how to ask anew.
    assert "made again in the same run 'run-1': by a program started again, or by a worker" in str(replayed.value)
    assert "asks again under a new run or session" in str(replayed.value)


async def test_the_same_call_asked_again_finds_its_approval_instead_of_a_second_one(broker: Broker) -> None:
    gate = ApprovalGate(broker, policies={"deploy": "always"}, to="alice")
    first = await gate.begin(deploy())
    assert isinstance(first, Request)
    assert await broker.resolve(first.id, {"approve": True}, by="alice")
    again = await ApprovalGate(broker, policies={"deploy": "always"}, to="alice").begin(deploy())
    assert isinstance(again, Request) and again.id == first.id and again.status is Status.ANSWERED
    other = await gate.begin(deploy("prod"))  # other arguments: another approval
    assert isinstance(other, Request) and other.id != first.id
    assert len((await broker.list(kind="approval")).items) == 2


async def test_a_denial_or_rejection_carries_the_persons_reason_verbatim(broker: Broker) -> None:
    gate = ApprovalGate(broker, policies={"deploy": "always"}, to="alice")
    denied = await gate.begin(deploy(call_id="c1"))
    rejected = await gate.begin(deploy(call_id="c2"))
    cancelled = await gate.begin(deploy(call_id="c3"))
    assert isinstance(denied, Request) and isinstance(rejected, Request) and isinstance(cancelled, Request)
    await broker.resolve(denied.id, {"approve": False}, by="alice", comment="not on a Friday")
    await broker.reject(rejected.id, "freeze until Monday", by="alice")
    await broker.cancel(cancelled.id, "run cancelled")
    with pytest.raises(ApprovalDenied) as info:
        await gate.finish(deploy(call_id="c1"), await broker.get(denied.id))
    assert info.value.reason == "not on a Friday"
    with pytest.raises(ApprovalDenied) as info:
        await gate.finish(deploy(call_id="c2"), await broker.get(rejected.id))
    assert info.value.reason == "freeze until Monday"
    with pytest.raises(Cancelled):
        await gate.finish(deploy(call_id="c3"), await broker.get(cancelled.id))


async def test_an_approval_does_not_authorize_other_arguments(broker: Broker) -> None:
    gate = ApprovalGate(broker, policies={"deploy": "always"}, to="alice")
    request = await gate.begin(deploy())
    assert isinstance(request, Request)
    await broker.resolve(request.id, {"approve": True}, by="alice")
    with pytest.raises(ApprovalRefused, match="does not match"):
        await gate.finish(deploy("prod"), await broker.get(request.id))
    nothing: Any = await broker.get(request.id)
    assert nothing.status is Status.ANSWERED  # still unconsumed: the right call may take it
    assert await gate.finish(deploy(), nothing) == {"env": "staging"}
