"""Follow-up messages on every backend, through the Broker API (in process, and over HTTP
with the remote broker): a message to a busy run is never dropped."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import anyio
import pytest

from interlock import Broker, Confirm, Event, Form, Text
from interlock.errors import FollowupNotFound, NotFound, RunConflict
from interlock.model import Request, Run, Status
from interlock.runs import Worker

pytestmark = pytest.mark.anyio


async def parked_on(broker: Broker, ask: Confirm | Text, kind: str, run_id: str = "run-1") -> str:
    run = await broker.start_run("deployer", run_id=run_id, session="thread-1")
    request = await broker.create(ask, kind=kind, to="alice", run=run.id)  # type: ignore[call-overload]
    await broker.park(run.id, state={"step": 1}, waiting_on=[request.id])
    return request.id


async def test_messages_to_a_working_run_are_held_then_taken_once_oldest_first(broker: Broker) -> None:
    run = await broker.start_run("deployer", run_id="run-1")
    first = await broker.send_message(run.id, "actually, make it vegetarian", by="alice")
    second = await broker.send_message(run.id, "approve", by="alice")  # just a message while it works
    assert first.outcome == second.outcome == "queued"
    assert first.followup is not None and second.followup is not None
    held = await broker.list_followups(run.id)
    assert [(f.id, f.text) for f in held] == [(first.followup.id, first.followup.text), (second.followup.id, "approve")]
    taken = await broker.take_followups(run.id)
    assert [f.text for f in taken] == ["actually, make it vegetarian", "approve"]
    assert await broker.take_followups(run.id) == []
    assert await broker.list_followups(run.id) == []
    events = await broker.find_events(run=run.id)
    assert [(e.data["followup_id"], e.data["text"]) for e in events if e.type == "followup_replayed"] == [
        (f.id, f.text) for f in taken
    ]


async def test_approve_and_deny_decide_an_approval_pause(broker: Broker) -> None:
    approved = await parked_on(broker, Confirm("Deploy?"), "approval", "run-a")
    sent = await broker.send_message("run-a", "Approve", by="alice")
    assert sent.outcome == "resolved" and sent.resolved == approved
    assert (await broker.get(approved)).status is Status.ANSWERED
    assert (await broker.get_run("run-a")).ready

    denied = await parked_on(broker, Confirm("Drop the table?"), "approval", "run-d")
    assert (await broker.send_message("run-d", "2", by="alice")).resolved == denied
    assert (await broker.get(denied)).status is Status.REJECTED
    assert await broker.list_followups("run-d") == []


async def test_approve_decides_an_approval_whose_arguments_may_be_edited(broker: Broker) -> None:
    # A gated tool with an argument schema asks yes/no and offers the arguments to edit.
    run = await broker.start_run("deployer", run_id="run-e", session="thread-1")
    schema = {"type": "object", "properties": {"env": {"type": "string"}}}
    asks = [Confirm("Deploy?", id="approve"), Form("Edit the arguments", schema, id="arguments", required=False)]
    request = await broker.create(asks, kind="approval", to="alice", run=run.id)
    await broker.park(run.id, state={"step": 1}, waiting_on=[request.id])
    sent = await broker.send_message(run.id, "approve", by="alice")
    assert (sent.outcome, sent.resolved) == ("resolved", request.id)
    answered = await broker.get(request.id)
    assert answered.status is Status.ANSWERED and answered.response is not None
    assert dict(answered.response.answers) == {"approve": True}
    assert await broker.list_followups(run.id) == []


async def test_a_question_pause_holds_every_message(broker: Broker) -> None:
    question = await parked_on(broker, Text("Which region?"), "question")
    sent = await broker.send_message("run-1", "1", by="alice")
    assert sent.outcome == "queued"
    assert (await broker.get(question)).status is Status.PENDING


async def test_a_withdrawn_message_is_gone(broker: Broker) -> None:
    await parked_on(broker, Confirm("Deploy?"), "approval")
    sent = await broker.send_message("run-1", "hold on, not friday", by="alice")
    assert sent.followup is not None
    withdrawn = await broker.withdraw_followup("run-1", sent.followup.id)
    assert withdrawn.text == "hold on, not friday"
    with pytest.raises(FollowupNotFound):
        await broker.withdraw_followup("run-1", sent.followup.id)
    assert await broker.list_followups("run-1") == []


async def test_an_ended_run_holds_nothing_new_and_keeps_what_it_never_delivered(broker: Broker) -> None:
    await parked_on(broker, Confirm("Deploy?"), "approval")
    sent = await broker.send_message("run-1", "use canary", by="alice")
    assert sent.followup is not None
    assert await broker.cancel_run("run-1")
    with pytest.raises(RunConflict):
        await broker.send_message("run-1", "still there?", by="alice")
    assert [f.id for f in await broker.list_followups("run-1")] == [sent.followup.id]
    with pytest.raises(FollowupNotFound):
        await broker.withdraw_followup("run-1", sent.followup.id)


async def test_a_resume_handler_takes_the_messages_held_while_the_run_was_parked(broker: Broker) -> None:
    question = await parked_on(broker, Text("Which region?"), "question")
    await broker.send_message("run-1", "and keep the old one warm", by="alice")
    await broker.resolve(question, "eu-west", by="alice")
    seen: list[list[str]] = []

    async def resume(run: Run, requests: Mapping[str, Request]) -> Any:
        taken = await broker.take_followups(run.id, worker=run.worker)
        seen.append([f.text for f in taken])
        return {"region": requests[question].answer, "notes": seen[-1]}

    done = await Worker(broker, {"deployer": resume}).run_once()
    assert done is not None and done.result == {"region": "eu-west", "notes": ["and keep the old one warm"]}
    assert await broker.list_followups("run-1") == []


async def test_the_messages_of_a_run_a_worker_resumes_are_that_workers_and_an_agent_taking_them_is_refused(
    broker: Broker,
) -> None:
    question = await parked_on(broker, Text("Which region?"), "question")
    await broker.resolve(question, "eu-west", by="alice")
    claimed = await broker.claim_run(["deployer"], worker="w1")
    assert claimed is not None and claimed.worker == "w1"

    # Nothing held yet: the agent's take is refused all the same, naming the worker.
    with pytest.raises(RunConflict, match="held by worker w1, which resumes it: only that worker takes its messages"):
        await broker.take_followups("run-1")
    sent = await broker.send_message("run-1", "and keep the old one warm", by="alice")
    assert sent.outcome == "queued" and sent.followup is not None

    # The agent's process (restarted, or never told) takes the messages at its own turn
    # boundary: refused; another worker too; the message stays held for w1.
    with pytest.raises(RunConflict, match="held by worker w1") as refused:
        await broker.take_followups("run-1")
    assert (refused.value.run_id, refused.value.status) == ("run-1", "running")
    with pytest.raises(RunConflict, match="held by another worker"):
        await broker.take_followups("run-1", worker="w2")
    assert [f.id for f in await broker.list_followups("run-1")] == [sent.followup.id]
    types = [e.type for e in await broker.find_events(run="run-1")]
    assert "followup_replayed" not in types

    # The worker resuming the run takes it, once.
    taken = await broker.take_followups("run-1", worker="w1")
    assert [f.text for f in taken] == ["and keep the old one warm"]
    assert await broker.take_followups("run-1", worker="w1") == []
    await broker.complete_run("run-1", "done", worker="w1")
    types = [e.type for e in await broker.find_events(run="run-1")]
    assert types.count("followup_replayed") == 1

    # An agent's own run, no worker holding it, gives its messages without a worker; a
    # parked run gives nothing to anyone, as before.
    own = await broker.start_run("deployer", run_id="run-2")
    await broker.send_message(own.id, "vegetarian", by="alice")
    assert [f.text for f in await broker.take_followups(own.id)] == ["vegetarian"]
    await parked_on(broker, Text("Which day?"), "question", "run-3")
    await broker.send_message("run-3", "not friday", by="alice")
    assert await broker.take_followups("run-3") == []
    assert await broker.take_followups("run-3", worker="w1") == []
    assert [f.text for f in await broker.list_followups("run-3")] == ["not friday"]


async def test_a_message_to_a_thread_goes_to_its_newest_busy_run(broker: Broker) -> None:
    older = await broker.start_run("deployer", run_id="run-1", session="thread-9")
    await broker.complete_run(older.id, "done")
    newer = await broker.start_run("deployer", run_id="run-2", session="thread-9")
    sent = await broker.send_to_thread("thread-9", "and the docs too", by="alice")
    assert sent.run == newer.id and sent.outcome == "queued"
    await broker.complete_run(newer.id, "done")
    with pytest.raises(NotFound):
        await broker.send_to_thread("thread-9", "anyone?", by="alice")
    assert len((await broker.list_runs(session="thread-9")).items) == 2


async def test_a_held_message_wakes_whoever_follows_the_event_log(broker: Broker) -> None:
    run = await broker.start_run("deployer", run_id="run-1")
    start = await broker.last_event_id()

    async def first_held() -> Event:
        async for event in broker.events(after=start, follow=True):
            if event.type == "followup_queued":
                return event
        raise AssertionError("the log ended")

    following = asyncio.ensure_future(first_held())
    await asyncio.sleep(0)  # yield once: the follower reads the log and waits, so a wake-up must end it
    sent = await broker.send_message(run.id, "are we there yet?", by="alice")
    with anyio.fail_after(10):
        event = await following
    assert sent.followup is not None
    assert (event.data["followup_id"], event.data["text"], event.data["run"]) == (
        sent.followup.id,
        "are we there yet?",
        run.id,
    )


async def test_a_message_as_long_as_allowed_is_held_and_on_the_sender_s_page_of_events(broker: Broker) -> None:
    # The longest message there may be, and its event's data with it: more than an index
    # entry may hold, so no index of the events may hold the data.
    from interlock.followups import MAX_FOLLOWUP_LENGTH

    run = await broker.start_run("deployer", run_id="run-1")
    text = "".join(f"{i % 10}" for i in range(MAX_FOLLOWUP_LENGTH))
    sent = await broker.send_message(run.id, text, by="alice")
    assert sent.outcome == "queued" and sent.followup is not None and sent.followup.text == text
    mine = [e for e in await broker.find_events(involving="alice") if e.type == "followup_queued"]
    assert [e.data["text"] for e in mine] == [text]
    # Her page in order, with the events that carry no data around it.
    asked = await broker.create(Text("Lunch?"), to="alice")
    page = await broker.find_events(involving="alice")
    assert [(e.type, e.request_id) for e in page][-2:] == [("followup_queued", None), ("created", asked.id)]
    assert page[-1].data == {} and page[-2].data["text"] == text
