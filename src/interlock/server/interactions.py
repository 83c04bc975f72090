"""Novo-compatible interactions: the same requests, in the shape Novo clients read.

A Novo client knows a pause for a person as an *interaction*: an `approval_request` whose
options are exactly approve and deny, with the tool call's input and a rendered preview,
or a `question` whose prompts sit in `details.questions[]`, each with its own options. This
module serves interlock's requests in that shape, beside the native API, over the same
broker and the same rules of who may read and answer what:

- `GET /interactions` (filter by status and kind) and `GET /interactions/{id}`;
- `POST /interactions/{id}/resolve` with `inputResponses`, `reason` and `cancel` (the
  person it is to, or its requester, ends it unanswered), and
  `POST /interactions/resolve` for several at once, with Novo's rules: a body that does
  not fit its request is a 400 and changes nothing;
- `GET /interactions/stream`: a `data-novo-input-requested` event per pause and a
  `data-novo-input-resolved` event when it settles. Every pause still pending is sent
  again when a client connects or reconnects (with `Last-Event-ID`, the events it missed
  follow), so a handler keyed by the interaction id is idempotent. A message held for a
  busy run and then delivered to its agent as the next user turn comes as a
  `data-novo-followup-replayed` event (its id and verbatim text), to whoever sent it and
  to the run's agent: the cue to show the message in the transcript.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal, TypedDict

from fastapi import APIRouter, Header, Query
from fastapi import Request as HttpRequest
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette import EventSourceResponse, ServerSentEvent

from ..broker import LocalBroker
from ..cursors import CURSOR, issued, taken
from ..errors import InterlockError, Unavailable
from ..model import Ask, Event, Request, Status, ask_to_dict, decision_ask
from ..principals import Principal, can_read
from ..wire import problem_of
from .api import answer_one, event_filter
from .common import (
    LAST_EVENT_ID_QUERY,
    NOVO_REFUSAL,
    UNREADABLE,
    ApiError,
    Caller,
    State,
    TheBroker,
    check_filters,
    parse_event_id,
    problems_for,
    run_id_of,
    seen_event_replay,
)
from .schemas import AnswerBody, InputResponse
from .stream import Dropped

__all__ = ["interaction", "router"]

router = APIRouter(tags=["interactions"])

_problems = problems_for({400: ("invalid_answer", "invalid_request")})

APPROVAL_OPTIONS = ({"id": "approve", "label": "Approve"}, {"id": "deny", "label": "Deny"})


def interaction(request: Request) -> dict[str, Any]:
    """`request` as a Novo interaction: its id, kind, status and the `request` payload."""
    origin = request.origin
    context = request.context if isinstance(request.context, dict) else {}
    # An approval decided by a yes/no is an approval request; any other (an "approval" of
    # a text or a required form) is shown, and answered, as the questions it asks.
    approval = decision_ask(request) is not None
    out: dict[str, Any] = {
        "id": request.id,
        "kind": "approval_request" if approval else "question",
        "status": request.status.value,
        "toolName": context.get("tool", origin.tool_name),
        "toolCallId": origin.tool_call_id,
        "runId": origin.run,
        "threadId": origin.session,
        "createdAt": request.created_at.isoformat(),
        # Present only while pending: the moment this pause gives up.
        "expiresAt": request.expires_at.isoformat()
        if request.status is Status.PENDING and request.expires_at
        else None,
        "request": _approval(request, context) if approval else _question(request),
    }
    if request.status is not Status.PENDING and request.response is not None:
        out["resolution"] = _resolution(request)
    return out


def _approval(request: Request, context: dict[str, Any]) -> dict[str, Any]:
    arguments = context.get("arguments", request.origin.arguments)
    payload: dict[str, Any] = {
        "requestId": request.id,
        "kind": "approval_request",
        "display": "confirmation",
        "title": request.title,
        "options": list(APPROVAL_OPTIONS),
        "allowFreeform": False,
        "input": dict(arguments) if arguments is not None else {},
    }
    preview = context.get("preview")
    if isinstance(preview, str) and preview:
        payload["preview"] = preview
    return payload


def _question(request: Request) -> dict[str, Any]:
    questions = [_prompt(ask) for ask in request.asks]
    single_select = len(questions) == 1 and "options" in questions[0] and not questions[0]["allowOther"]
    details: dict[str, Any] = {"title": request.title or request.asks[0].prompt, "questions": questions}
    if request.details:
        details["details"] = request.details
    return {
        "requestId": request.id,
        "kind": "question",
        "display": "select" if single_select else "text",
        "details": details,
    }


def _prompt(ask: Ask) -> dict[str, Any]:
    """One prompt of a question, from an ask's JSON shape (every kind has one) and the
    options an input response picks from by id (`input_options`)."""
    shape = ask_to_dict(ask)
    entry: dict[str, Any] = {
        "id": ask.id,
        "question": ask.prompt,
        "type": ask.type,
        "required": ask.required,
        "multiline": bool(shape.get("multiline", False)),
        "allowOther": bool(ask.allow_other),
        "multiple": ask.picks_several,
    }
    options = ask.input_options()
    if options is not None:
        entry["options"] = [{"id": option_id, "label": label} for option_id, label in options]
    if ask.picks_several:  # how many of its options may be picked
        entry["min"], entry["max"] = shape.get("min", 0), shape.get("max")
    if "schema" in shape:  # a form: answered with its JSON object as text
        entry["schema"] = shape["schema"]
        entry["multiline"] = True
    return entry


def _resolution(request: Request) -> dict[str, Any]:
    response = request.response
    assert response is not None
    decision = decision_ask(request)
    if request.status is Status.ANSWERED:
        if decision is not None:
            outcome = "approve" if response.answers.get(decision.id) is True else "deny"
        else:
            outcome = "answered"
    else:
        outcome = {Status.REJECTED: "deny" if decision is not None else "rejected"}.get(
            request.status, request.status.value
        )
    return {
        "outcome": outcome,
        "answers": dict(response.answers),
        "reason": response.reason,
        "by": response.by,
        "via": response.via,
        "at": response.at.isoformat(),
    }


class OptionModel(BaseModel):
    id: str
    label: str


class PromptModel(BaseModel):
    """One prompt of a question, by its ask's id."""

    id: str
    question: str
    type: Literal["text", "confirm", "choice", "multi_choice", "form"]
    required: bool
    multiline: bool
    allowOther: bool
    multiple: bool
    options: list[OptionModel] | None = Field(None, description="what an optionId picks from (choices, confirms)")
    min: int | None = Field(None, description="a multi-choice's fewest picks")
    max: int | None = Field(None, description="a multi-choice's most picks; null: any number")
    schema_: dict[str, Any] | None = Field(
        None, alias="schema", description="a form's JSON Schema: its answer is that object as JSON text"
    )


class QuestionDetailsModel(BaseModel):
    title: str
    questions: list[PromptModel]
    details: str | None = None


class PayloadModel(BaseModel):
    """What the person is asked: an approval of a tool call with its `input`, or a question."""

    requestId: str
    kind: Literal["approval_request", "question"]
    display: Literal["confirmation", "select", "text"]
    title: str | None = Field(None, description="an approval's title")
    options: list[OptionModel] | None = Field(None, description="an approval's: approve and deny")
    allowFreeform: bool | None = None
    input: dict[str, Any] | None = Field(None, description="an approval's tool arguments")
    preview: str | None = None
    details: QuestionDetailsModel | None = Field(None, description="a question's prompts")


class ResolutionModel(BaseModel):
    outcome: Literal["approve", "deny", "answered", "rejected", "expired", "cancelled"]
    answers: dict[str, Any]
    reason: str | None
    by: str | None
    via: str | None
    at: str


class InteractionModel(BaseModel):
    """A request as a pause of an agent's run: a Novo-compatible interaction."""

    id: str
    kind: Literal["approval_request", "question"]
    status: Literal["pending", "answered", "rejected", "expired", "cancelled"]
    toolName: str | None
    toolCallId: str | None
    runId: str | None
    threadId: str | None
    createdAt: str
    expiresAt: str | None = Field(description="while pending, when the pause is given up; null once settled")
    request: PayloadModel
    resolution: ResolutionModel | None = Field(None, description="once settled: how, by whom and when")


class InteractionPage(BaseModel):
    items: list[InteractionModel]
    next_cursor: str | None


class BatchErrorModel(BaseModel):
    status: int
    code: str
    detail: str = Field(description="what went wrong, as the one interaction's own route says it")


class BatchResultModel(BaseModel):
    id: str
    ok: bool
    interaction: InteractionModel | None = Field(None, description="the interaction as resolved, when ok")
    error: BatchErrorModel | None = Field(None, description="why it was not, when not ok")


class ResolveBody(BaseModel):
    """Novo's resolve body: the responses by prompt (an approval: its own id with
    `approve` or `deny`), a reason echoed back verbatim, or `cancel: true`."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    input_responses: list[InputResponse] | None = Field(None, alias="inputResponses")
    reason: str = ""
    cancel: bool = False


class BatchResolveItem(ResolveBody):
    id: str


class BatchResolveBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    items: list[BatchResolveItem] = Field(min_length=1, max_length=500)


def _answer_body(body: ResolveBody) -> AnswerBody:
    if body.cancel:
        return AnswerBody.model_validate({"cancel": True, "reason": body.reason})
    if body.input_responses is None:
        raise ApiError("invalid_answer", "give inputResponses, or cancel: true", status=NOVO_REFUSAL)
    return AnswerBody.model_construct(input_responses=body.input_responses, reason=body.reason)


async def _resolve(broker: LocalBroker, request_id: str, body: ResolveBody, caller: Principal) -> dict[str, Any]:
    return interaction(await answer_one(broker, request_id, _answer_body(body), caller))


@router.get("/interactions", response_model=InteractionPage, responses=_problems(422))
async def list_interactions(
    caller: Caller,
    broker: TheBroker,
    status: Literal["pending", "answered", "rejected", "expired", "cancelled"] | None = None,
    kind: Literal["approval_request", "question"] | None = None,
    cursor: Annotated[str | None, Query(description=CURSOR)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> JSONResponse:
    """Your interactions (requests to you; an agent's: the ones it made), newest first."""
    mine = _mine(caller)
    page = await broker.list(
        status=status,
        kind=None if kind is None else ("approval" if kind == "approval_request" else "question"),
        after=taken("interactions", cursor),
        limit=limit,
        **mine,
    )
    items = [interaction(r) for r in page.items]
    return JSONResponse({"items": items, "next_cursor": issued("interactions", page.next_cursor)})


@router.get(
    "/interactions/stream",
    response_class=EventSourceResponse,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "server-sent events"},
        **_problems(400, 422, 429),
    },
)
async def stream_interactions(
    caller: Caller,
    broker: TheBroker,
    state: State,
    http: HttpRequest,
    session: str | None = None,
    run: str | None = None,
    last_event_id: Annotated[str | None, Header()] = None,
    last_event_id_query: Annotated[str | None, Query(alias="lastEventId", description=LAST_EVENT_ID_QUERY)] = None,
) -> EventSourceResponse:
    """Pauses as server-sent events: `data-novo-input-requested` (the interaction) and
    `data-novo-input-resolved`; and `data-novo-followup-replayed` (`{id, text, runId,
    threadId}`) when a message held for a busy run is delivered to its agent. On connect,
    and on every reconnect, each pause still pending is sent first (without an id); then,
    with `Last-Event-ID`, the events missed since, then live ones."""
    try:
        start = parse_event_id(last_event_id if last_event_id is not None else last_event_id_query)
    except ValueError as exc:
        raise ApiError("invalid_request", str(exc), status=UNREADABLE) from None
    check_filters(broker, session=session, run=run)
    if start is None:
        start = await broker.last_event_id()
    run = None if run is None else await run_id_of(broker, caller, run)
    seen = event_filter(caller, None, session, run)
    mine = _mine(caller)

    def accept(event: Event) -> bool:
        if event.request is None:
            return event.type == "followup_replayed" and seen(event)
        return event.type in _SENT and seen(event)

    replay = seen_event_replay(broker, caller, session=session, run=run)

    async def generate() -> AsyncIterator[ServerSentEvent]:
        yield ServerSentEvent(comment="connected", retry=2000)
        after: str | None = None
        while True:  # every pause still pending, oldest first, again on each (re)connect
            page = await broker.list(
                status="pending", session=session, run=run, after=after, limit=500, order="asc", **mine
            )
            for request in page.items:
                yield ServerSentEvent(data=json.dumps(_requested(request)), event="data-novo-input-requested")
            if page.next_cursor is None:
                break
            after = page.next_cursor
        try:
            follow = state.hub.replay_then_follow(
                accept, start, replay, holder=state.auth.holder(http), lost=state.auth.stream_lost(http, caller)
            )
            async for event in follow:
                if event.request is None:  # a held message, delivered
                    data = _replayed(event)
                    yield ServerSentEvent(data=json.dumps(data), event="data-novo-followup-replayed", id=str(event.id))
                    continue
                name = "data-novo-input-requested" if event.type == "created" else "data-novo-input-resolved"
                yield ServerSentEvent(data=json.dumps(_requested(event.request)), event=name, id=str(event.id))
        except Dropped as exc:
            yield ServerSentEvent(data=json.dumps({"reason": str(exc)}), event="dropped")

    return state.quotas.streams.response(caller.name, generate(), ping=state.keepalive)


_SENT = frozenset({"created", "answered", "rejected", "expired", "cancelled"})


def _requested(request: Request) -> dict[str, Any]:
    """A stream event's data: the interaction, with its payload as `request` (Novo reads
    `event.data.id`, `event.data.toolName` and `event.data.request`)."""
    return interaction(request)


def _replayed(event: Event) -> dict[str, Any]:
    """A `followup_replayed` event as Novo's `data-novo-followup-replayed` chunk: the held
    message's id and verbatim text, and the run and thread it went to."""
    data = event.data
    return {"id": data["followup_id"], "text": data["text"], "runId": data["run"], "threadId": data.get("session")}


@router.get("/interactions/{interaction_id}", response_model=InteractionModel, responses=_problems(403, 404, 422))
async def get_interaction(interaction_id: str, caller: Caller, broker: TheBroker) -> JSONResponse:
    """One interaction: a request to you or one you made, as a Novo client reads it."""
    request = await broker.get(interaction_id)
    if not can_read(caller, request):
        raise ApiError("forbidden", "this interaction is neither to you nor from you")
    return JSONResponse(interaction(request))


@router.post(
    "/interactions/resolve",
    name="resolve_interactions",
    response_model=list[BatchResultModel],
    responses=_problems(400, 413, 422),
)
async def resolve_batch(body: BatchResolveBody, caller: Caller, broker: TheBroker) -> JSONResponse:
    """Resolve several interactions, each on its own: one that fails does not stop the
    others; each item says how it went."""
    results: list[dict[str, Any]] = []
    for item in body.items:
        try:
            results.append({"id": item.id, "ok": True, "interaction": await _resolve(broker, item.id, item, caller)})
        except ApiError as exc:
            error = {"status": exc.status, "code": exc.code, "detail": exc.detail}
            results.append({"id": item.id, "ok": False, "error": error})
        except Unavailable:
            raise  # the store is away: so it is for the items after this one too (503, Retry-After)
        except InterlockError as exc:
            found = problem_of(exc)
            if found is None:
                raise
            error = {"status": found[0], "code": found[1], "detail": str(exc)}
            results.append({"id": item.id, "ok": False, "error": error})
    return JSONResponse(results)


@router.post(
    "/interactions/{interaction_id}/resolve",
    name="resolve_interaction",
    response_model=InteractionModel,
    responses=_problems(400, 403, 404, 409, 413, 422),
)
async def resolve(interaction_id: str, body: ResolveBody, caller: Caller, broker: TheBroker) -> JSONResponse:
    """Resolve one pause: `inputResponses` (an approval: `[{requestId: <its id>, optionId:
    "approve" | "deny"}]`; a question: one entry per prompt, by the prompt's id), or
    `cancel: true` to end it unanswered (by the person it is to, or its requester:
    recorded as cancelled by them; neither a denial nor an answer). `reason` is kept and
    echoed back verbatim."""
    return JSONResponse(await _resolve(broker, interaction_id, body, caller))


class _Mine(TypedDict, total=False):
    recipient: str
    requester: str
    teams: tuple[str, ...]


def _mine(caller: Principal) -> _Mine:
    """Whose requests a caller's interactions are: a person's inbox (with their teams',
    as `GET /requests` and the stream's events show them), an agent's own asks."""
    if caller.kind == "admin":
        return {}
    if caller.kind == "agent":
        return {"requester": caller.name}
    return {"recipient": caller.name, "teams": tuple(sorted(caller.teams))}
