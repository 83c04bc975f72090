"""LangGraph: each `interrupt(value)` of a graph becomes an interlock request; the run parks.

A compiled graph with a checkpointer (LangGraph's own SQLite or PostgreSQL one) is put
behind a `LangGraphAgent`. `start` runs the graph until it finishes or interrupts; each
pending interrupt becomes a request in the person's inbox (its payload rendered as the
right ask: confirm, choice, multi-choice, form, text; free-form text otherwise), the run
parks with the thread's id as its state, and the process may exit. Once every request is
settled, a worker calls `resume`, which answers all the step's interrupts together with
`Command(resume={interrupt_id: value})` and runs the graph on, to its end or its next pause.

Inside a node, `approve(tool, arguments)` asks for approval of a tool call through the
agent's `ApprovalGate` (its policies, auto-allow, hook and argument digest apply as they
do anywhere), and `ask(*asks)` asks interlock's own ask types. An agent made with
LangChain's `create_agent` and `HumanInTheLoopMiddleware` needs no change: each call the
middleware holds goes through the gate, and the person's answer returns as its decision. A plain `interrupt(value)`
works too; see `asks_for` for how a payload is rendered and `resume_value` for what the
node gets back.

Messages a person sends to the run while it is busy (`broker.send_message`) are delivered
at its turn boundaries, as the graph's input through `followup_input` (by default, user
messages appended to the state's `messages`, as `MessagesState` and `add_messages` read
them): with the answers when a parked run resumes (`Command(resume=..., update=...)`),
and, once the graph has ended, as the input of its next turn on the same thread, so the
run completes only once nothing is held for it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Required, TypedDict, cast

from langgraph.types import Command, Interrupt, interrupt

from ..agent.calls import ToolCall
from ..agent.gate import ApprovalGate
from ..broker import Broker
from ..errors import ApprovalDenied, ApprovalRefused, Cancelled, Expired, InvalidRequest, NotFound, RunConflict
from ..model import (
    ASK_TYPES,
    Ask,
    Choice,
    Confirm,
    Form,
    MultiChoice,
    Request,
    Run,
    RunStatus,
    Status,
    Text,
    ask_from_dict,
    ask_to_dict,
    derived_key,
)
from ..runs import Park, ResumeHandler
from ._pauses import failed_start, take_followups

__all__ = [
    "APPROVAL",
    "QUESTION",
    "Decision",
    "LangGraphAgent",
    "approval",
    "approve",
    "ask",
    "asks_for",
    "messages_input",
    "resume_value",
]

APPROVAL = "interlock.langgraph.approval"
"""The `kind` of an interrupt payload made by `approval`: a tool call to approve."""
QUESTION = "interlock.langgraph.question"
"""The `kind` of an interrupt payload made by `ask`: interlock asks in their JSON shape."""

_RUN_KEY = "interlock_run"
"""The key of a checkpoint's metadata that names the interlock run whose graph wrote it
(not LangGraph's own `run_id`, which makes an input on a checkpoint of the same id a resume)."""

_PROMPT_LIMIT = 500  # a longer text payload goes to the details, under a short prompt


class Decision(TypedDict, total=False):
    """What `approval` returns: approved with the arguments to run with, or the person's reason.

    `approved` is always there; `arguments` when it is true, `reason` when it is false."""

    approved: Required[bool]
    arguments: dict[str, Any]
    reason: str


def messages_input(texts: Sequence[str]) -> dict[str, Any]:
    """The graph input that delivers held messages: each a user message appended to the
    state's `messages` (LangGraph's `MessagesState`, `add_messages`)."""
    return {"messages": [{"role": "user", "content": text} for text in texts]}


# -- inside a node -----------------------------------------------------------------------


def approval(tool: str, arguments: Mapping[str, Any], *, schema: Mapping[str, Any] | None = None) -> Decision:
    """Ask for approval of calling `tool` with `arguments`, from inside a graph node.

    The agent's `ApprovalGate` decides: a call it lets through (auto-allow, policy `never`,
    a hook's `Allow`) is approved without a person; otherwise the run parks until the
    person answers. Returns `{"approved": True, "arguments": ...}` (the person may have
    edited them, checked against `schema`) or `{"approved": False, "reason": ...}`.
    """
    payload: dict[str, Any] = {"kind": APPROVAL, "tool": tool, "arguments": dict(arguments)}
    if schema is not None:
        payload["schema"] = dict(schema)
    return cast(Decision, interrupt(payload))


def approve(tool: str, arguments: Mapping[str, Any], *, schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Like `approval`, returning the approved arguments; a denial raises `ApprovalDenied`."""
    decision = approval(tool, arguments, schema=schema)
    if not decision.get("approved"):
        raise ApprovalDenied("", decision.get("reason", ""))
    return decision.get("arguments", dict(arguments))


def ask(*asks: Ask, title: str = "", details: str = "") -> Any:
    """Ask a person interlock's own asks from inside a node; returns the answer (the bare
    value for one ask, else a dict by ask id), as `Broker.ask` does."""
    if not asks:
        raise InvalidRequest("ask() needs at least one ask")
    return interrupt({"kind": QUESTION, "asks": [ask_to_dict(a) for a in asks], "title": title, "details": details})


# -- rendering an interrupt --------------------------------------------------------------


def asks_for(value: Any, response_schema: Mapping[str, Any] | None = None) -> tuple[list[Ask], str, str]:
    """The asks, title and details that put an interrupt's payload in front of a person.

    - `ask(...)`'s payload: those asks. A mapping with an ask `type` (`{"type": "choice",
      "prompt": ..., "options": [...]}`): that ask.
    - A `response_schema` (LangGraph's own typed interrupts) chooses the ask: an object
      schema is a form, a boolean a confirm, a string enum a choice, an array of an enum
      a multi-choice, a string free text.
    - A mapping with a `question` (or `prompt`) and `options`: a choice (a multi-choice
      with `"multiple": true`); with `"confirm": true`, a confirm; else free text.
    - A string: free text with that prompt. Anything else: free text, the payload shown as
      JSON in the details.
    """
    if isinstance(value, Mapping) and value.get("kind") == QUESTION:
        raw = value.get("asks")
        if not isinstance(raw, list) or not raw:
            raise InvalidRequest("an ask() payload needs a list of asks")
        return [ask_from_dict(a) for a in raw], str(value.get("title", "")), str(value.get("details", ""))
    if isinstance(value, Mapping) and value.get("type") in ASK_TYPES:
        return [ask_from_dict(value)], "", ""
    prompt, details = _prompt_of(value)
    if response_schema is not None:
        typed = _ask_from_schema(prompt, response_schema)
        if typed is not None:
            return [typed], "", details
    if isinstance(value, Mapping):
        options = value.get("options")
        if isinstance(options, list) and options:
            cls = MultiChoice if value.get("multiple") else Choice
            return [cls(prompt, options)], "", details
        if value.get("confirm") is True:
            return [Confirm(prompt)], "", details
    return [Text(prompt, multiline=True)], "", details


def _prompt_of(value: Any) -> tuple[str, str]:
    """The prompt of a payload, and what else it says (as JSON) for the details."""
    if isinstance(value, str):
        if value.strip() and len(value) <= _PROMPT_LIMIT:
            return value, ""
        return "The agent asks for your input", value
    if isinstance(value, Mapping):
        for key in ("question", "prompt", "message", "description"):
            text = value.get(key)
            if isinstance(text, str) and text.strip() and len(text) <= _PROMPT_LIMIT:
                rest = {k: v for k, v in value.items() if k not in (key, "options", "multiple", "confirm")}
                return text, _as_json(rest) if rest else ""
    return "The agent asks for your input", _as_json(value)


def _as_json(value: Any) -> str:
    return "```json\n" + json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=repr) + "\n```"


def _ask_from_schema(prompt: str, schema: Mapping[str, Any]) -> Ask | None:
    kind = schema.get("type")
    if kind == "object":
        return Form(prompt, schema=schema)
    if kind == "boolean":
        return Confirm(prompt)
    enum = schema.get("enum")
    if kind == "string" and isinstance(enum, list) and enum and all(isinstance(e, str) for e in enum):
        return Choice(prompt, enum)
    items = schema.get("items")
    if kind == "array" and isinstance(items, Mapping):
        values = items.get("enum")
        if isinstance(values, list) and values and all(isinstance(e, str) for e in values):
            return MultiChoice(prompt, values)
    if kind == "string":
        return Text(prompt, multiline=True)
    return None


def resume_value(request: Request) -> Any:
    """What the node's `interrupt(...)` returns for a settled question: the answer (the bare
    value for one ask, else a dict by ask id); for a question nobody answered,
    `{"rejected": True, "reason": ...}`: the person's reason for one they rejected; for one
    withdrawn on its own (`broker.cancel(id)`, its requester over the API) or expired, the
    reason it was cancelled with, else `"Nobody answered: the question was cancelled."`
    (or `"... expired."`), as the other frameworks' adapters hand their model a declined question.
    The node reads it and the run goes on. (A question cancelled with its run is not
    resumed: the run has ended.)"""
    if request.status is Status.ANSWERED:
        return request.answer
    reason = request.response.reason if request.response is not None else ""
    if request.status is Status.REJECTED:
        return {"rejected": True, "reason": reason}
    if request.status is Status.CANCELLED:
        return {"rejected": True, "reason": reason or "Nobody answered: the question was cancelled."}
    if request.status is Status.EXPIRED:
        return {"rejected": True, "reason": reason or "Nobody answered: the question expired."}
    raise InvalidRequest(f"request {request.id} is {request.status.value}; there is no answer to resume with")


# -- the agent ---------------------------------------------------------------------------


class LangGraphAgent:
    """A compiled LangGraph graph whose interrupts park a run in interlock.

    `graph` must be compiled with a checkpointer (the thread's state lives there; the
    run keeps only the thread id and which request answers which interrupt). `name` is the
    agent's name (a worker resumes the runs of the names it knows); `to` the person asked;
    `gate` decides on the tool calls to approve (`approval(...)` in a node, and LangChain's
    `HumanInTheLoopMiddleware` requests); by default every one of them asks.
    `followup_input` turns the messages a person sent while the run was busy into the
    graph's input (`messages_input` by default).

    A worker that dies while it resumes a run leaves the run to another once its lease
    runs out; an approval the first worker consumed already is not consumed again, so that
    run fails ("already decided once") rather than run the tool twice.
    """

    def __init__(
        self,
        broker: Broker,
        graph: Any,
        *,
        name: str,
        to: str | None = None,
        gate: ApprovalGate | None = None,
        followup_input: Callable[[Sequence[str]], Any] = messages_input,
    ) -> None:
        if getattr(graph, "checkpointer", None) is None:
            raise ValueError("the graph needs a checkpointer: compile it with checkpointer=... to park and resume it")
        self.broker = broker
        self.graph = graph
        self.name = name
        self.to = to
        self.gate = gate or ApprovalGate(broker, policies={"*": "always"}, to=to)
        self.followup_input = followup_input
        self._sync: bool | None = None  # whether the checkpointer only has the sync API

    async def start(
        self,
        input: Any,
        *,
        thread_id: str | None = None,
        run_id: str | None = None,
        max_duration: float | timedelta | None = None,
    ) -> Run:
        """Start a run of the graph on `input` and return it: completed with the graph's final
        values, or parked on the requests its interrupts became (the process may exit then).

        With the `run_id` of a run started before, nothing runs twice: a parked or ended run
        is returned as it is, and a run whose process stopped before it parked goes on from
        the thread's last checkpoint when its own graph wrote it (each checkpoint's metadata
        names the run it is of, as `interlock_run`), and completes with the graph's values
        if the graph had ended; a run stopped before its graph wrote one runs on `input`, as
        it would have; a run a worker is resuming is returned as it is, the graph left to
        that worker. With a `thread_id` alone, a run of this agent
        on that thread that has not ended is that run (a restarted process names the thread
        it knows): its pause is returned as it is, not asked of the person a second time. Once
        the thread's runs have all ended, a start is its next turn: a new run of the graph on
        `input`, whatever interrupt an ended run left the thread stopped at (cancelled, given
        up, or failed on a denial: that interrupt is not asked again). If the graph raises (a
        node, or the gate refusing a call it cannot decide), the run is returned `failed`
        with the error.

        A thread holds one run at a time, since two would write their checkpoints over each
        other's: a new `run_id` on a thread whose run has not ended raises `RunConflict`
        naming that run and its status, and nothing is stored or run (go on with that run,
        by the thread alone or its id, or cancel it first). The store decides as it records
        the run, so of several processes starting a new run on the same thread at once, one
        starts its run and the others get `RunConflict`. A start naming the thread alone
        takes the thread's unended run as its own (a program started again after its
        process died), which a process still running it cannot be told from: start a
        thread from one live process at a time.
        """
        # A run started before goes on: the thread's run not ended, or a run_id stored already.
        if run_id is None and thread_id is not None:
            run_id = await self._unended_run_on(thread_id)
            again = run_id is not None
        else:
            again = run_id is not None and await self._known(run_id)
        try:
            run = await self.broker.start_run(
                self.name, session=thread_id, run_id=run_id, max_duration=max_duration, exclusive=thread_id is not None
            )
        except RunConflict as exc:
            if thread_id is None or exc.run_id == run_id:  # not the thread's: the run id's own (another agent's)
                raise
            raise self._thread_held(exc, thread_id, run_id) from None
        if run.status is not RunStatus.RUNNING or run.worker is not None:
            return run  # parked, ended, or a worker's to go on with (its checkpoints are the worker's)
        thread = thread_id or run.id
        try:
            # Where the thread stopped is this run's only when this run's graph wrote its last
            # checkpoint (the run was started before, and its process stopped): the thread of
            # a new run, or of one killed before its first checkpoint, stands where an ended
            # run left it.
            snapshot = await self._snapshot(thread)
            mine = again and _run_of(snapshot) == run.id
            if mine and snapshot.interrupts:
                outcome = await self._advance(run, thread, None, invoke=False)
            elif mine and snapshot.next:
                outcome = await self._advance(run, thread, None)  # stopped mid-step: go on from the checkpoint
            elif mine:  # its graph ended: its values are the result, the graph does not run again
                outcome = await self._advance(run, thread, None, invoke=False)
            else:
                outcome = await self._advance(run, thread, self._closing(snapshot.values, input))
        except Exception as exc:  # a node, or the gate failing closed: the run fails (it would stay running)
            return await failed_start(self.broker, run, self.name, exc)
        if isinstance(outcome, Park):
            return await self.broker.park(run.id, state=outcome.state, waiting_on=outcome.waiting_on)
        return await self.broker.complete_run(run.id, outcome)

    def _thread_held(self, exc: RunConflict, thread: str, run_id: str | None) -> RunConflict:
        """The refusal of a run on a thread whose run has not ended, said as how to go on."""
        held, status = exc.run_id, exc.status
        started = f"run {run_id!r} was" if run_id is not None else "no run was"
        return RunConflict(
            held,
            status,
            f"thread {thread!r} has a run of agent {self.name!r} that has not ended: run {held!r} ({status}). "
            f"Two runs on one thread write their checkpoints over each other's, so {started} not started: start "
            f"with thread_id={thread!r} alone (or run_id={held!r}) to go on with that run, or cancel it "
            f"(broker.cancel_run({held!r})) and start again",
        )

    @staticmethod
    def _closing(values: Any, input: Any) -> Any:
        """A new turn's `input`, closing the tool calls an ended run left without a result in
        the `messages` of the thread's `values` (a LangChain agent stopped at its approval):
        each gets a tool message saying no result was recorded, before the turn's own
        messages, as a chat model requires a result for every call it made. Calls the input
        answers itself are left to it, and an input that removes messages is taken as it is."""
        if not isinstance(input, Mapping):
            return input
        messages = values.get("messages") if isinstance(values, Mapping) else None
        if not isinstance(messages, list) or not messages:
            return input
        try:
            from langchain_core.messages import AIMessage, RemoveMessage, ToolMessage
        except ImportError:  # no LangChain messages, so no calls to close
            return input
        given = input.get("messages", [])
        given = list(given) if isinstance(given, list | tuple) else [given]
        if any(isinstance(m, RemoveMessage) for m in given):
            return input
        answered: set[object] = {m.tool_call_id for m in [*messages, *given] if isinstance(m, ToolMessage)}
        answered |= {m.get("tool_call_id") for m in given if isinstance(m, Mapping) and m.get("role") == "tool"}
        closed = [
            ToolMessage(
                "No result was recorded for this call: the run that made it ended first (it may not have run).",
                tool_call_id=call["id"],
                name=call["name"],
                status="error",
            )
            for m in messages
            if isinstance(m, AIMessage)
            for call in m.tool_calls
            if call.get("id") and call["id"] not in answered
        ]
        if not closed:
            return input
        return {**input, "messages": [*closed, *given]}

    async def _known(self, run_id: str) -> bool:
        try:
            await self.broker.get_run(run_id)
        except NotFound:
            return False
        return True

    async def _unended_run_on(self, thread: str) -> str | None:
        """The id of this agent's newest run on `thread` that has not ended, if any."""
        after = None
        while True:
            page = await self.broker.list_runs(agent=self.name, session=thread, after=after, limit=50)
            for run in page.items:
                if not run.status.ended:
                    return run.id
            if page.next_cursor is None:
                return None
            after = page.next_cursor

    def handlers(self) -> dict[str, ResumeHandler]:
        """This agent's resume handler by its name, for a `Worker` or `interlock worker`."""
        return {self.name: self.resume}

    async def resume(self, run: Run, requests: Mapping[str, Request]) -> Any:
        """A worker's resume handler: answer the step's interrupts together with
        `Command(resume={interrupt_id: value})` and run the graph on. Returns the graph's
        final values (the run's result), or `Park(...)` when it interrupts again."""
        state = run.state
        if not isinstance(state, Mapping) or not isinstance(state.get("thread_id"), str):
            raise InvalidRequest(f"run {run.id} has no LangGraph thread in its state")
        thread = cast(str, state["thread_id"])
        questions = cast(Mapping[str, str], state.get("questions", {}))
        approvals = cast(Mapping[str, str], state.get("approvals", {}))
        decided = cast(Mapping[str, Decision], state.get("decided", {}))
        values: dict[str, Any] = {}
        for it in await self._interrupts(thread):
            gated = self._gated(run.id, thread, it)
            if gated is None:
                request_id = questions.get(it.id)
                if request_id is not None:
                    values[it.id] = resume_value(requests.get(request_id) or await self.broker.get(request_id))
                continue
            outcomes: list[Decision] = []
            for call, schema in gated.calls:
                if call.id in decided:
                    outcomes.append(decided[call.id])
                    continue
                request_id = approvals.get(call.id)
                if request_id is None:  # not asked when the run parked: ask now, answered next time
                    break
                request = requests.get(request_id) or await self.broker.get(request_id)
                outcomes.append(await self._finish(call, request, schema))
            else:
                values[it.id] = gated.render(outcomes)
        followups = await take_followups(self.broker, run)  # a resumed pause: a turn boundary
        if followups:
            return await self._advance(run, thread, Command(resume=values, update=self.followup_input(followups)))
        return await self._advance(run, thread, Command(resume=values))

    # -- driving the graph ---------------------------------------------------------------

    async def _advance(self, run: Run, thread: str, payload: Any, *, invoke: bool = True) -> Any:
        """Run the graph on `payload` until it ends (its final values, the run's result) or
        interrupts for a person (`Park` on the requests made for them); interrupts the gate
        decides at once are answered at once, and messages held meanwhile start another turn."""
        run_id = run.id
        while True:
            if invoke:
                await self._invoke(payload, thread, run_id)
            invoke = True
            snapshot = await self._snapshot(thread)
            interrupts: tuple[Interrupt, ...] = tuple(snapshot.interrupts)
            if not interrupts:
                followups = await take_followups(self.broker, run)  # the graph ended: held messages go in now
                if followups:
                    payload = self.followup_input(followups)
                    continue
                return _jsonable(snapshot.values)
            answered: dict[str, Any] = {}
            questions: dict[str, str] = {}
            approvals: dict[str, str] = {}
            decided: dict[str, Decision] = {}
            for it in interrupts:
                gated = self._gated(run_id, thread, it)
                if gated is None:
                    questions[it.id] = (await self._question(run_id, thread, it)).id
                    continue
                outcomes: list[Decision] = []
                for call, schema in gated.calls:
                    outcome = await self._begin(call, schema)
                    if isinstance(outcome, Request):
                        approvals[call.id] = outcome.id
                    else:
                        decided[call.id] = outcome
                        outcomes.append(outcome)
                if len(outcomes) == len(gated.calls):
                    answered[it.id] = gated.render(outcomes)
            if not questions and not approvals:
                payload = Command(resume=answered)
                continue
            state = {"thread_id": thread, "questions": questions, "approvals": approvals, "decided": decided}
            return Park(state, [*questions.values(), *approvals.values()])

    async def _invoke(self, payload: Any, thread: str, run_id: str) -> None:
        # Every checkpoint the graph writes keeps the config's metadata: the run it is of.
        config = {**_config(thread), "metadata": {_RUN_KEY: run_id}}
        if self._sync is None:
            await self._probe(thread)
        if self._sync:
            await asyncio.to_thread(self.graph.invoke, payload, config)
        else:
            await self.graph.ainvoke(payload, config)

    async def _snapshot(self, thread: str) -> Any:
        config = _config(thread)
        if self._sync is None:
            await self._probe(thread)
        if self._sync:
            return await asyncio.to_thread(self.graph.get_state, config)
        return await self.graph.aget_state(config)

    async def _interrupts(self, thread: str) -> tuple[Interrupt, ...]:
        return tuple((await self._snapshot(thread)).interrupts)

    async def _probe(self, thread: str) -> None:
        """Learn whether the checkpointer has the async API (SqliteSaver and PostgresSaver
        have only the sync one: their graph then runs in a thread)."""
        try:
            await self.graph.aget_state(_config(thread))
            self._sync = False
        except NotImplementedError:
            self._sync = True

    # -- requests ------------------------------------------------------------------------

    async def _question(self, run_id: str, thread: str, it: Interrupt) -> Request:
        schema = getattr(it, "response_schema", None)
        asks, title, details = asks_for(it.value, schema if isinstance(schema, Mapping) else None)
        return await self.broker.create(
            asks,
            to=self.to,
            title=title,  # none given: the lists show the first ask's prompt
            details=details,
            requester=self.name,
            idempotency_key=derived_key("langgraph", run_id, it.id, spelled=f"langgraph:{run_id}:{it.id}"),
            session=thread,
            agent=self.name,
            run=run_id,
        )

    def _gated(self, run_id: str, thread: str, it: Interrupt) -> _Gated | None:
        """The tool calls an interrupt asks to approve, or None for a question: `approval()`'s
        payload, and LangChain's `HumanInTheLoopMiddleware` requests (one per call, or one
        per model turn listing every gated call)."""
        value = it.value
        if not isinstance(value, Mapping):
            return None

        def call(name: Any, arguments: Any, call_id: str) -> ToolCall:
            if not isinstance(name, str) or not isinstance(arguments, Mapping):
                raise InvalidRequest(f"the approval interrupt {it.id} needs a tool name and an arguments object")
            return ToolCall(name, dict(arguments), id=call_id, session=thread, agent=self.name, to=self.to, run=run_id)

        if value.get("kind") == APPROVAL:
            schema = value.get("schema")
            one = call(value.get("tool"), value.get("arguments"), it.id)
            return _Gated("interlock", [(one, schema if isinstance(schema, Mapping) else None)])
        if value.get("type") == "tool_approval":
            call_id = value.get("tool_call_id")
            one = call(value.get("name"), value.get("args"), call_id if isinstance(call_id, str) and call_id else it.id)
            return _Gated("tool_approval", [(one, _edit_schema(getattr(it, "response_schema", None)))])
        actions = value.get("action_requests")
        if isinstance(actions, list) and actions:
            configs = {c.get("action_name"): c for c in value.get("review_configs") or () if isinstance(c, Mapping)}
            calls: list[tuple[ToolCall, Mapping[str, Any] | None]] = []
            for index, action in enumerate(actions):
                if not isinstance(action, Mapping):
                    raise InvalidRequest(f"the approval interrupt {it.id} has an action that is not an object")
                config = configs.get(action.get("name"), {})
                editable = "edit" in (config.get("allowed_decisions") or ())
                schema = config.get("args_schema") if editable else None
                item = call(action.get("name"), action.get("args"), f"{it.id}:{index}")
                calls.append((item, schema if isinstance(schema, Mapping) else _ANY_OBJECT if editable else None))
            return _Gated("batched", calls)
        return None

    async def _begin(self, call: ToolCall, schema: Mapping[str, Any] | None) -> Request | Decision:
        """The gate's decision before anyone is asked. A gate that fails closed (its hook
        failed, the arguments are not JSON) refuses the call as a denial, as the other
        frameworks' adapters do: the node reads why."""
        try:
            outcome = await self.gate.begin(call, schema=schema)
        except ApprovalDenied as exc:
            return {"approved": False, "reason": exc.reason}
        except ApprovalRefused as exc:
            return {"approved": False, "reason": str(exc)}
        if isinstance(outcome, Request):
            return outcome
        return {"approved": True, "arguments": outcome}

    async def _finish(self, call: ToolCall, request: Request, schema: Mapping[str, Any] | None) -> Decision:
        """The person's decision. An approval withdrawn or expired is a no, with its reason
        (the call does not run). A refusal of the approval itself (used already, edited
        arguments the schema refuses) stops the run: whether the call ran is not known."""
        try:
            arguments = await self.gate.finish(call, request, schema=schema)
        except ApprovalDenied as exc:
            return {"approved": False, "reason": exc.reason}
        except (Expired, Cancelled) as exc:
            return {"approved": False, "reason": str(exc)}
        return {"approved": True, "arguments": arguments}


_ANY_OBJECT: Mapping[str, Any] = {"type": "object"}
"""The edit schema of a LangChain action that may be edited but names no schema of its own."""


class _Gated:
    """The tool calls one interrupt asks to approve, and how its resume value is shaped."""

    def __init__(self, shape: str, calls: list[tuple[ToolCall, Mapping[str, Any] | None]]) -> None:
        self.shape = shape
        self.calls = calls

    def render(self, outcomes: list[Decision]) -> Any:
        """The resume value: `approval()`'s decision, or LangChain's decision(s)."""
        if self.shape == "interlock":
            return outcomes[0]
        decisions = [
            _langchain_decision(call, outcome) for (call, _), outcome in zip(self.calls, outcomes, strict=True)
        ]
        return decisions[0] if self.shape == "tool_approval" else {"decisions": decisions}


def _langchain_decision(call: ToolCall, outcome: Decision) -> dict[str, Any]:
    """A `HumanInTheLoopMiddleware` decision: approve, edit (the person changed the
    arguments), or reject with the person's reason as its message."""
    if not outcome.get("approved"):
        reason = outcome.get("reason", "")
        return {"type": "reject", "message": reason} if reason else {"type": "reject"}
    arguments = outcome.get("arguments", dict(call.arguments))
    if arguments == dict(call.arguments):
        return {"type": "approve"}
    return {"type": "edit", "edited_action": {"name": call.name, "args": arguments}}


def _edit_schema(response_schema: Any) -> Mapping[str, Any] | None:
    """The arguments' schema inside a per-call approval's `response_schema`, when it allows
    an edit: the `args` of its `edited_action` (else no edit is offered)."""
    found: list[Mapping[str, Any]] = []

    def walk(node: Any, defs: Mapping[str, Any]) -> None:
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                node = defs.get(ref.removeprefix("#/$defs/"), {})
            props = node.get("properties") if isinstance(node, Mapping) else None
            if isinstance(props, Mapping) and "edited_action" in props:
                action = props["edited_action"]
                if isinstance(action, Mapping) and isinstance(action.get("$ref"), str):
                    action = defs.get(action["$ref"].removeprefix("#/$defs/"), {})
                args = action.get("properties", {}).get("args") if isinstance(action, Mapping) else None
                if isinstance(args, Mapping):
                    found.append(args)
                return
            for child in node.values() if isinstance(node, Mapping) else ():
                walk(child, defs)
        elif isinstance(node, list):
            for child in node:
                walk(child, defs)

    if isinstance(response_schema, Mapping):
        defs = response_schema.get("$defs", {})
        walk({k: v for k, v in response_schema.items() if k != "$defs"}, defs if isinstance(defs, Mapping) else {})
    if not found:
        return None
    args = found[0]
    return args if args.get("type") == "object" and "$ref" not in json.dumps(args) else _ANY_OBJECT


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def _run_of(snapshot: Any) -> str | None:
    """The interlock run whose graph wrote the checkpoint of a thread's state (`_RUN_KEY` in
    its metadata); None for none, or one written otherwise."""
    metadata = getattr(snapshot, "metadata", None)
    run = metadata.get(_RUN_KEY) if isinstance(metadata, Mapping) else None
    return run if isinstance(run, str) else None


def _jsonable(value: Any) -> Any:
    """The graph's final values as plain JSON for the run's result: pydantic models (a
    LangChain message, say) as their JSON dump, anything else unknown as its repr."""
    return json.loads(json.dumps(value, default=_plain))


def _plain(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return dump(mode="json")
        except Exception:  # a model that cannot dump itself: its repr, as for the rest
            return repr(value)
    return repr(value)
