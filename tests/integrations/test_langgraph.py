"""LangGraph: interrupts park a run as interlock requests; a claim resumes it with the answers."""

from __future__ import annotations

import asyncio
import logging
import operator
from typing import Annotated, Any, TypedDict

import anyio
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

import interlock
from interlock import Broker, Choice, Confirm, RunConflict, Status
from interlock.agent import ApprovalGate
from interlock.integrations.langgraph import LangGraphAgent, approval, approve, ask
from interlock.model import RunStatus
from interlock.runs import Worker

pytestmark = pytest.mark.anyio
BOUND = 10  # seconds: the most a wait here may take

SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "subject": {"type": "string"}},
    "required": ["to", "subject"],
    "additionalProperties": False,
}


class State(TypedDict, total=False):
    to: str
    sent: Annotated[list[dict[str, Any]], operator.add]
    notes: Annotated[list[str], operator.add]


class Mailer:
    """A graph whose one node sends a mail once approved (to nobody@..., it raises first);
    `sent` records every real send."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def graph(self, saver: Any = None) -> Any:
        def send(state: State) -> dict[str, Any]:
            if state["to"].startswith("nobody@"):
                raise ValueError("no such mailbox")
            arguments = approve("send_mail", {"to": state["to"], "subject": "release 1.4"}, schema=SCHEMA)
            self.sent.append(arguments)
            return {"sent": [arguments]}

        builder = StateGraph(State)
        builder.add_node("send", send)
        builder.add_edge(START, "send")
        builder.add_edge("send", END)
        return builder.compile(checkpointer=saver or InMemorySaver())


def routed_mailer() -> Any:
    """A graph that routes a denial back to its state (`approval`), rather than failing."""

    def send(state: State) -> dict[str, Any]:
        decision = approval("send_mail", {"to": state["to"]})
        return {"notes": [f"denied: {decision['reason']}"] if not decision["approved"] else ["sent"]}

    builder = StateGraph(State)
    builder.add_node("send", send)
    builder.add_edge(START, "send")
    builder.add_edge("send", END)
    return builder.compile(checkpointer=InMemorySaver())


async def claim_and_resume(broker: Broker, agent: LangGraphAgent) -> Any:
    run = await Worker(broker, agent.handlers(), name="w1").run_once()
    assert run is not None
    return run


async def test_an_approved_call_runs_once_with_the_approvers_edited_arguments(broker: Broker) -> None:
    mailer = Mailer()
    agent = LangGraphAgent(broker, mailer.graph(), name="mailer", to="alice")
    run = await agent.start({"to": "ops@example.com"})
    assert run.status is RunStatus.WAITING_FOR_APPROVAL and mailer.sent == []
    (request_id,) = run.waiting_on
    request = await broker.get(request_id)
    assert request.kind == "approval" and request.to == "alice" and request.origin.run == run.id
    assert request.context["arguments"] == {"to": "ops@example.com", "subject": "release 1.4"}
    assert await broker.claim_run(["mailer"], worker="w1") is None  # not ready before the answer
    edited = {"to": "ops@example.com", "subject": "release 1.4.1"}
    assert await broker.resolve(request_id, {"approve": True, "arguments": edited}, by="alice")
    done = await claim_and_resume(broker, agent)
    assert done.status is RunStatus.COMPLETED
    assert mailer.sent == [edited]
    assert done.result["sent"] == [edited]
    assert await broker.claim_run(["mailer"], worker="w2") is None  # resumed exactly once


async def test_a_denial_reaches_the_node_with_the_persons_reason(broker: Broker) -> None:
    agent = LangGraphAgent(broker, routed_mailer(), name="mailer", to="alice")
    run = await agent.start({"to": "all@example.com"})
    await broker.resolve(run.waiting_on[0], {"approve": False}, by="alice", comment="not to everyone")
    done = await claim_and_resume(broker, agent)
    assert done.status is RunStatus.COMPLETED
    assert done.result["notes"] == ["denied: not to everyone"]


async def test_the_gates_policies_apply_a_call_it_lets_through_needs_nobody(broker: Broker) -> None:
    mailer = Mailer()
    gate = ApprovalGate(broker, policies={"send_*": "never"})
    agent = LangGraphAgent(broker, mailer.graph(), name="mailer", to="alice", gate=gate)
    run = await agent.start({"to": "ops@example.com"})
    assert run.status is RunStatus.COMPLETED
    assert mailer.sent == [{"to": "ops@example.com", "subject": "release 1.4"}]
    assert (await broker.list()).items == []


async def test_interrupts_of_one_step_are_asked_together_and_answered_together(broker: Broker) -> None:
    def region(state: State) -> dict[str, Any]:
        return {"notes": [ask(Choice("Which region?", ["eu", "us"], id="region"))]}

    def comment(state: State) -> dict[str, Any]:
        return {"notes": [interrupt("Anything to add to the release notes?")]}

    def ready(state: State) -> dict[str, Any]:
        return {"notes": ["yes" if interrupt({"question": "Ship it?", "confirm": True}) else "no"]}

    builder = StateGraph(State)
    for name, node in (("region", region), ("comment", comment), ("ready", ready)):
        builder.add_node(name, node)
        builder.add_edge(START, name)
        builder.add_edge(name, END)
    agent = LangGraphAgent(broker, builder.compile(checkpointer=InMemorySaver()), name="release", to="bob")
    run = await agent.start({"notes": []})
    assert run.status is RunStatus.WAITING_FOR_INPUT and len(run.waiting_on) == 3
    requests = {(await broker.get(i)).asks[0].type: i for i in run.waiting_on}
    assert set(requests) == {"choice", "text", "confirm"}
    # What the lists show of each (its title, else its first prompt): not "release asks" thrice.
    shown = {r.title or r.asks[0].prompt for r in [await broker.get(i) for i in run.waiting_on]}
    assert shown == {"Which region?", "Anything to add to the release notes?", "Ship it?"}
    await broker.resolve(requests["choice"], "eu", by="bob")
    await broker.resolve(requests["text"], "no breaking changes", by="bob")
    assert await broker.claim_run(["release"], worker="w1") is None  # one still waits
    await broker.resolve(requests["confirm"], True, by="bob")
    done = await claim_and_resume(broker, agent)
    assert done.status is RunStatus.COMPLETED
    assert sorted(done.result["notes"]) == ["eu", "no breaking changes", "yes"]


async def test_a_rejected_question_resumes_the_node_with_the_reason(broker: Broker) -> None:
    def confirm(state: State) -> dict[str, Any]:
        answer = ask(Confirm("Rotate the keys?"))
        return {"notes": [f"rejected: {answer['reason']}" if isinstance(answer, dict) else str(answer)]}

    builder = StateGraph(State)
    builder.add_node("confirm", confirm)
    builder.add_edge(START, "confirm")
    builder.add_edge("confirm", END)
    agent = LangGraphAgent(broker, builder.compile(checkpointer=InMemorySaver()), name="keys", to="bob")
    run = await agent.start({})
    await broker.reject(run.waiting_on[0], "ask security first", by="bob")
    done = await claim_and_resume(broker, agent)
    assert done.result["notes"] == ["rejected: ask security first"]


async def test_a_question_withdrawn_on_its_own_resumes_the_node_with_a_refusal_it_reads(broker: Broker) -> None:
    # As the pydantic-ai and OpenAI Agents adapters hand their model a declined question:
    # the run goes on, rather than fail on a question nobody answered.
    def confirm(state: State) -> dict[str, Any]:
        answer = ask(Confirm("Rotate the keys?"))
        return {"notes": [f"rejected: {answer['reason']}" if isinstance(answer, dict) else str(answer)]}

    builder = StateGraph(State)
    builder.add_node("confirm", confirm)
    builder.add_edge(START, "confirm")
    builder.add_edge("confirm", END)
    agent = LangGraphAgent(broker, builder.compile(checkpointer=InMemorySaver()), name="keys", to="bob")
    run = await agent.start({}, thread_id="t-withdrawn")
    assert await broker.cancel(run.waiting_on[0], "asked the wrong person")
    done = await claim_and_resume(broker, agent)
    assert done.status is RunStatus.COMPLETED
    assert done.result["notes"] == ["rejected: asked the wrong person"]

    run = await agent.start({}, thread_id="t-withdrawn-no-reason")
    assert await broker.cancel(run.waiting_on[0])
    done = await claim_and_resume(broker, agent)
    assert done.status is RunStatus.COMPLETED
    assert done.result["notes"] == ["rejected: Nobody answered: the question was cancelled."]


async def test_starting_the_same_run_again_makes_no_second_request(broker: Broker) -> None:
    mailer = Mailer()
    graph = mailer.graph()
    run = await LangGraphAgent(broker, graph, name="mailer", to="alice").start({"to": "a@example.com"}, run_id="r-1")
    again = await LangGraphAgent(broker, graph, name="mailer", to="alice").start({"to": "a@example.com"}, run_id="r-1")
    assert again.id == run.id and again.waiting_on == run.waiting_on
    assert len((await broker.list(kind="approval")).items) == 1
    assert (await broker.get(run.waiting_on[0])).status is Status.PENDING
    assert mailer.sent == []


async def test_starting_again_on_the_same_thread_finds_its_pause_and_a_later_turn_is_a_new_run(
    broker: Broker,
) -> None:
    # A restarted process knows its thread, not interlock's run id: each start made a run of
    # its own and asked the person again for the same interrupt.
    mailer = Mailer()
    graph = mailer.graph()
    agent = LangGraphAgent(broker, graph, name="mailer", to="alice")
    run = await agent.start({"to": "a@example.com"}, thread_id="t-9")
    again = await LangGraphAgent(broker, graph, name="mailer", to="alice").start(
        {"to": "a@example.com"}, thread_id="t-9"
    )
    assert (again.id, again.waiting_on) == (run.id, run.waiting_on)
    assert len((await broker.list(kind="approval")).items) == 1
    await broker.resolve(run.waiting_on[0], {"approve": True}, by="alice")
    assert (await claim_and_resume(broker, agent)).status is RunStatus.COMPLETED
    later = await agent.start({"to": "b@example.com"}, thread_id="t-9")  # the thread's next turn
    assert later.id != run.id and later.status is RunStatus.WAITING_FOR_APPROVAL
    assert len((await broker.list(kind="approval")).items) == 2


async def test_a_turn_after_a_run_ended_at_an_interrupt_runs_on_its_own_input_not_the_old_call(
    broker: Broker,
) -> None:
    """A run cancelled, or failed on a denial, leaves the thread stopped at its interrupt.
    The thread's next turn asked that call again, with the old arguments, and dropped its
    own input: approved, it sent the mail the person had cancelled."""
    mailer = Mailer()
    agent = LangGraphAgent(broker, mailer.graph(), name="mailer", to="alice")
    first = await agent.start({"to": "ops@example.com"}, thread_id="t-9")
    assert await broker.cancel_run(first.id, by="alice")
    second = await agent.start({"to": "ceo@example.com"}, thread_id="t-9")
    assert second.id != first.id and second.status is RunStatus.WAITING_FOR_APPROVAL
    asked = await broker.get(second.waiting_on[0])
    assert asked.context["arguments"] == {"to": "ceo@example.com", "subject": "release 1.4"}
    await broker.resolve(asked.id, False, by="alice", comment="wrong list")
    assert (await claim_and_resume(broker, agent)).status is RunStatus.FAILED
    third = await agent.start({"to": "team@example.com"}, thread_id="t-9")
    asked = await broker.get(third.waiting_on[0])
    assert asked.context["arguments"] == {"to": "team@example.com", "subject": "release 1.4"}
    await broker.resolve(asked.id, True, by="alice")
    done = await claim_and_resume(broker, agent)
    assert done.status is RunStatus.COMPLETED
    assert mailer.sent == [{"to": "team@example.com", "subject": "release 1.4"}]


class Killed(BaseException):
    """The process dying: nothing catches it, and nothing after it runs."""


class DiesAtItsNextCheckpoint(InMemorySaver):
    """A checkpointer whose process is killed as LangGraph writes a checkpoint, once armed:
    what the run did before is recorded, that checkpoint and everything after are not."""

    armed = False

    def put(self, *args: Any, **kwargs: Any) -> Any:
        if self.armed:
            raise Killed
        return super().put(*args, **kwargs)


class DiesAsItAsks(ApprovalGate):
    """A gate whose process is killed as it is about to ask for an approval."""

    async def begin(self, call: Any, **options: Any) -> Any:
        raise Killed


@pytest.mark.parametrize("unended", ["parked", "running"])
async def test_a_new_run_id_on_a_thread_whose_run_has_not_ended_is_refused_and_nothing_is_made(
    broker: Broker, unended: str
) -> None:
    """A start naming a new run id on a thread whose run had not ended made a second run on
    the thread: each run's turn wrote its checkpoints over the other's, and either could
    then resume or complete from the other's state."""
    mailer = Mailer()
    saver = InMemorySaver()
    if unended == "parked":
        first = await LangGraphAgent(broker, mailer.graph(saver), name="mailer", to="alice").start(
            {"to": "ops@example.com"}, thread_id="t-9"
        )
    else:  # its process died as it was about to ask: the run is still running
        with pytest.raises(Killed):
            await LangGraphAgent(broker, mailer.graph(saver), name="mailer", gate=DiesAsItAsks(broker)).start(
                {"to": "ops@example.com"}, thread_id="t-9"
            )
        [first] = (await broker.list_runs(agent="mailer")).items
    status = RunStatus.WAITING_FOR_APPROVAL if unended == "parked" else RunStatus.RUNNING
    assert first.status is status
    checkpoints = len(list(saver.list({"configurable": {"thread_id": "t-9"}})))
    asked = len((await broker.list()).items)

    agent = LangGraphAgent(broker, mailer.graph(saver), name="mailer", to="alice")
    with pytest.raises(RunConflict) as refused:
        await agent.start({"to": "ceo@example.com"}, thread_id="t-9", run_id="r-2")
    assert (refused.value.run_id, refused.value.status) == (first.id, status.value)
    said = str(refused.value)
    assert "'t-9'" in said and repr(first.id) in said and status.value in said
    assert "thread_id" in said and "cancel" in said  # how to go on: resume that run, or cancel it
    assert [r.id for r in (await broker.list_runs(agent="mailer")).items] == [first.id]  # no run r-2
    assert len((await broker.list()).items) == asked  # nothing asked
    assert len(list(saver.list({"configurable": {"thread_id": "t-9"}}))) == checkpoints  # nothing run
    assert mailer.sent == []

    # The thread's run goes on; once it has ended, the new run id is the thread's next turn.
    again = await agent.start({"to": "ops@example.com"}, thread_id="t-9")
    assert again.id == first.id and again.status is RunStatus.WAITING_FOR_APPROVAL
    await broker.resolve(again.waiting_on[0], True, by="alice")
    assert (await claim_and_resume(broker, agent)).status is RunStatus.COMPLETED
    later = await agent.start({"to": "ceo@example.com"}, thread_id="t-9", run_id="r-2")
    assert later.status is RunStatus.WAITING_FOR_APPROVAL
    assert (await broker.get(later.waiting_on[0])).context["arguments"]["to"] == "ceo@example.com"


async def test_a_run_id_of_another_agent_s_run_is_refused_as_such_not_as_a_thread_held(broker: Broker) -> None:
    # The adapter said every refusal was the thread's: "thread 't-1' has a run of agent
    # 'mailer' that has not ended: run 'job-1' (completed)", and advised that same run id.
    await broker.complete_run((await broker.start_run("planner", run_id="job-1")).id)
    agent = LangGraphAgent(broker, Mailer().graph(InMemorySaver()), name="mailer", to="alice")
    for thread in ("t-1", None):
        with pytest.raises(RunConflict, match="run 'job-1' is a run of agent 'planner', not of 'mailer'"):
            await agent.start({"to": "ops@example.com"}, thread_id=thread, run_id="job-1")


@pytest.mark.parametrize("named_by", ["thread", "run_id"])
@pytest.mark.parametrize("ended", ["cancelled", "failed"])
async def test_a_new_run_killed_before_its_first_checkpoint_starts_again_on_its_own_input(
    broker: Broker, ended: str, named_by: str
) -> None:
    """A thread's next turn whose process died once its run was recorded, before LangGraph
    wrote the turn's first checkpoint: started again, the thread still stood where the ended
    run stopped, which the new run took as its own. It asked the cancelled call again, with
    its arguments, or ran the failed step again and failed with the ended run's error."""
    mailer = Mailer()
    saver = DiesAtItsNextCheckpoint()
    first = await LangGraphAgent(broker, mailer.graph(saver), name="mailer", to="alice").start(
        {"to": "ops@example.com" if ended == "cancelled" else "nobody@example.com"}, thread_id="t-9"
    )
    if ended == "cancelled":  # the thread stays at the call's interrupt
        assert await broker.cancel_run(first.id, by="alice")
    else:  # the thread stays before the step that raised
        assert first.status is RunStatus.FAILED
    named = {"thread_id": "t-9", "run_id": "r-2" if named_by == "run_id" else None}
    saver.armed = True
    with pytest.raises(Killed):
        await LangGraphAgent(broker, mailer.graph(saver), name="mailer", to="alice").start(
            {"to": "ceo@example.com"}, **named
        )
    saver.armed = False
    [killed] = [r for r in (await broker.list_runs(agent="mailer")).items if r.id != first.id]
    assert killed.status is RunStatus.RUNNING  # recorded, and nothing of its graph

    agent = LangGraphAgent(broker, mailer.graph(saver), name="mailer", to="alice")  # the process started again
    again = await agent.start({"to": "ceo@example.com"}, **named)
    assert again.id == killed.id and again.status is RunStatus.WAITING_FOR_APPROVAL
    asked = await broker.get(again.waiting_on[0])
    assert asked.context["arguments"] == {"to": "ceo@example.com", "subject": "release 1.4"}
    await broker.resolve(asked.id, True, by="alice")
    assert (await claim_and_resume(broker, agent)).status is RunStatus.COMPLETED
    assert mailer.sent == [{"to": "ceo@example.com", "subject": "release 1.4"}]


async def test_a_thread_whose_run_s_process_died_before_parking_is_freed_once_the_run_is_given_up() -> None:
    """A run killed before it parked, never started again, held its thread for good: every
    new run on it was refused. It is given up after the pause timeout, and the thread is free."""
    async with interlock.connect("memory://", pause_timeout=0.3) as broker:
        mailer = Mailer()
        saver = DiesAtItsNextCheckpoint()
        saver.armed = True
        with pytest.raises(Killed):
            await LangGraphAgent(broker, mailer.graph(saver), name="mailer", to="alice").start(
                {"to": "ops@example.com"}, thread_id="t-1"
            )
        saver.armed = False
        [killed] = (await broker.list_runs(agent="mailer")).items
        assert killed.status is RunStatus.RUNNING and killed.expires_at is not None
        agent = LangGraphAgent(broker, mailer.graph(saver), name="mailer", to="alice")
        with pytest.raises(RunConflict):
            await agent.start({"to": "ceo@example.com"}, thread_id="t-1", run_id="r-2")

        with anyio.fail_after(BOUND):
            async for event in broker.events(follow=True):
                if event.type == "run_cancelled" and event.data["run"] == killed.id:
                    break
        assert (await broker.get_run(killed.id)).terminal_reason == "abandoned"
        started = await agent.start({"to": "ceo@example.com"}, thread_id="t-1", run_id="r-2")
        assert (started.id, started.status) == ("r-2", RunStatus.WAITING_FOR_APPROVAL)


@pytest.mark.parametrize("named_by", ["thread", "run_id"])
async def test_a_run_killed_once_its_graph_ended_completes_when_started_again_without_running_it_twice(
    broker: Broker, named_by: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The graph ran to its end (the mail sent: the gate lets it through) and the process
    died before the run was recorded complete: started again, the run ran its graph on its
    input once more, and the mail went out twice."""
    mailer = Mailer()
    graph = mailer.graph()
    gate = ApprovalGate(broker, policies={"send_*": "never"})
    named = {"thread_id": "t-9", "run_id": "r-2" if named_by == "run_id" else None}

    async def killed(*args: Any, **kwargs: Any) -> Any:
        raise Killed

    with monkeypatch.context() as patched:
        patched.setattr(broker, "complete_run", killed)
        with pytest.raises(Killed):
            await LangGraphAgent(broker, graph, name="mailer", gate=gate).start({"to": "ops@example.com"}, **named)
    assert mailer.sent == [{"to": "ops@example.com", "subject": "release 1.4"}]
    [stopped] = (await broker.list_runs(agent="mailer")).items
    assert stopped.status is RunStatus.RUNNING

    run = await LangGraphAgent(broker, graph, name="mailer", gate=gate).start({"to": "ops@example.com"}, **named)
    assert (run.id, run.status) == (stopped.id, RunStatus.COMPLETED)
    assert run.result["sent"] == [{"to": "ops@example.com", "subject": "release 1.4"}]
    assert mailer.sent == [{"to": "ops@example.com", "subject": "release 1.4"}]


@pytest.mark.parametrize("named_by", ["thread", "run_id"])
async def test_a_start_again_while_a_worker_resumes_the_run_returns_it_as_it_is_and_runs_nothing(
    broker: Broker, named_by: str
) -> None:
    """A program started again on its thread (or run id) as a worker resumes the run went on
    with the graph from the worker's checkpoint, beside the worker: the step the worker was
    in ran a second time, and the start then raised `RunConflict` (held by the worker)."""
    worked: list[str] = []
    working, release = asyncio.Event(), asyncio.Event()

    def ask(state: State) -> dict[str, Any]:
        approve("send_mail", {"to": state["to"]})
        return {}

    async def send(state: State) -> dict[str, Any]:
        worked.append(state["to"])
        if len(worked) == 1:  # the worker's: it is in this step while the program starts again
            working.set()
            await release.wait()
        return {"notes": ["sent"]}

    builder = StateGraph(State)
    builder.add_node("ask", ask)
    builder.add_node("send", send)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", "send")
    builder.add_edge("send", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    named = {"thread_id": "t-7", "run_id": "r-7" if named_by == "run_id" else None}
    run = await LangGraphAgent(broker, graph, name="mailer", to="alice").start({"to": "ops@example.com"}, **named)
    await broker.resolve(run.waiting_on[0], {"approve": True}, by="alice")
    resuming = asyncio.create_task(Worker(broker, LangGraphAgent(broker, graph, name="mailer").handlers()).run_once())
    with anyio.fail_after(BOUND):
        await working.wait()
        again = await LangGraphAgent(broker, graph, name="mailer", to="alice").start({"to": "ops@example.com"}, **named)
        assert (again.id, again.status, again.attempts) == (run.id, RunStatus.RUNNING, 1)
        assert again.worker is not None and worked == ["ops@example.com"]  # the worker's, as it is
        release.set()
        done = await resuming
    assert done is not None and (done.status, done.result["notes"]) == (RunStatus.COMPLETED, ["sent"])
    assert worked == ["ops@example.com"]


async def test_a_run_whose_process_stopped_before_parking_parks_on_the_same_interrupt(broker: Broker) -> None:
    mailer = Mailer()
    graph = mailer.graph()
    # The agent's process got as far as the graph's interrupt, then died before asking anyone.
    with pytest.raises(Killed):
        await LangGraphAgent(broker, graph, name="mailer", to="alice", gate=DiesAsItAsks(broker)).start(
            {"to": "a@example.com"}, thread_id="r-2", run_id="r-2"
        )
    assert (await broker.get_run("r-2")).status is RunStatus.RUNNING and (await broker.list()).items == []
    agent = LangGraphAgent(broker, graph, name="mailer", to="alice")
    run = await agent.start({"to": "someone-else@example.com"}, thread_id="r-2", run_id="r-2")
    assert run.status is RunStatus.WAITING_FOR_APPROVAL
    request = await broker.get(run.waiting_on[0])
    assert request.context["arguments"]["to"] == "a@example.com"  # the interrupted call, not a new input
    await broker.resolve(request.id, {"approve": True}, by="alice")
    done = await claim_and_resume(broker, agent)
    assert done.status is RunStatus.COMPLETED and mailer.sent == [{"to": "a@example.com", "subject": "release 1.4"}]


async def test_a_graph_that_raises_while_starting_fails_its_run_rather_than_leave_it_running(broker: Broker) -> None:
    # Left running, the run would be listed as busy for good: no worker claims a running
    # run and only a parked one is ever given up.
    def broken_check(call: Any) -> Any:
        raise RuntimeError("policy service down")

    gate = ApprovalGate(broker, hook=broken_check)  # fails closed: the gate refuses the call
    agent = LangGraphAgent(broker, Mailer().graph(), name="mailer", to="alice", gate=gate)
    run = await agent.start({"to": "ops@example.com"}, run_id="r-3")  # approve() raises the denial
    assert run.status is RunStatus.FAILED
    assert run.error is not None and "The call to 'send_mail' was refused: its approval check failed" in run.error

    agent = LangGraphAgent(broker, exploding_graph(), name="mailer", to="alice")
    run = await agent.start({"to": "ops@example.com"})
    assert (run.status, run.error) == (RunStatus.FAILED, "ValueError: no such mailbox")
    assert [r.status for r in (await broker.list_runs(agent="mailer")).items] == [RunStatus.FAILED] * 2


def exploding_graph() -> Any:
    """A graph whose one node raises (in `explodes`, the frame a traceback names)."""

    def explodes(state: State) -> dict[str, Any]:
        raise ValueError("no such mailbox")

    builder = StateGraph(State)
    builder.add_node("send", explodes)
    builder.add_edge(START, "send")
    builder.add_edge("send", END)
    return builder.compile(checkpointer=InMemorySaver())


async def test_a_run_that_fails_as_it_starts_leaves_its_traceback_in_the_log_by_the_run_s_id(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    # The run keeps "ValueError: no such mailbox"; where in the graph it was raised is in the log.
    agent = LangGraphAgent(broker, exploding_graph(), name="mailer", to="alice")
    run = await agent.start({"to": "ops@example.com"}, run_id="r-9")
    assert run.status is RunStatus.FAILED
    [logged] = [r for r in caplog.records if r.getMessage() == f"starting run {run.id} of agent mailer failed"]
    assert logged.levelno == logging.ERROR and logged.exc_info is not None
    assert "in explodes" in caplog.text  # the frame that raised


async def test_a_gate_that_fails_closed_or_an_approval_withdrawn_is_a_denial_the_node_reads(broker: Broker) -> None:
    # As the pydantic-ai and OpenAI Agents adapters hand them to their models.
    def broken_check(call: Any) -> Any:
        raise RuntimeError("policy service down")

    gate = ApprovalGate(broker, hook=broken_check)
    agent = LangGraphAgent(broker, routed_mailer(), name="mailer", to="alice", gate=gate)
    run = await agent.start({"to": "ops@example.com"})
    assert run.status is RunStatus.COMPLETED
    assert run.result["notes"] == ["denied: The call to 'send_mail' was refused: its approval check failed"]

    agent = LangGraphAgent(broker, routed_mailer(), name="mailer", to="alice")
    run = await agent.start({"to": "all@example.com"})
    assert await broker.cancel(run.waiting_on[0], "not now")
    done = await claim_and_resume(broker, agent)
    assert done.status is RunStatus.COMPLETED
    assert done.result["notes"] == ["denied: not now"]
