"""The HTTP API under /api/v1: requests, answers, the event log and its live stream.

Each route takes what it needs (the broker, the app's state, the caller) as FastAPI
dependencies that read the app's state, so the router is a module-level one that
`create_app` includes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse
from pydantic import AwareDatetime, BaseModel, Field, TypeAdapter, ValidationError
from sse_starlette import EventSourceResponse, ServerSentEvent

from ..approvals import mark, unmarked
from ..broker import MAX_DASHBOARD_WINDOW, MAX_EVENT_ID, LocalBroker
from ..cursors import issued, taken
from ..dashboard import DASHBOARD_WINDOW, dashboard_to_dict
from ..errors import AlreadySettled, Forbidden, InvalidAnswer, InvalidRequest, NotFound
from ..grants import asks_own_inbox, may_ask
from ..model import Event, Origin, Status, check_text, claim_to_dict, origin_from_dict, request_to_dict
from ..model import Request as HumanRequest
from ..principals import Principal, can_answer, can_cancel, can_claim, can_read
from ..wire import problem_of
from .answers import decide
from .common import (
    LAST_EVENT_ID_QUERY,
    NOVO_REFUSAL,
    UNREADABLE,
    ApiError,
    AppState,
    Caller,
    State,
    Surface,
    TheBroker,
    app_state,
    can_see,
    check_filters,
    describe,
    event_to_dict,
    member_teams,
    own_run_named,
    parse_event_id,
    problems_for,
    rate_limited,
    run_id_of,
    seen_by,
    seen_event_replay,
    surface_of,
    unless,
)
from .schemas import (
    AnswerBody,
    BatchAnswerBody,
    BatchResult,
    CancelBody,
    CloseBody,
    ConsumeBody,
    ConsumeResult,
    CreateBody,
    DashboardModel,
    EventModel,
    EventPage,
    InformBody,
    ListParams,
    Problem,
    RejectBody,
    ReopenBody,
    Reopened,
    RequestModel,
    RequestPage,
    WhoamiModel,
    list_filters,
)
from .stream import Dropped

__all__ = ["PROBLEMS", "router"]

PROBLEMS = {
    400: ("invalid_request", "invalid_answer"),
    409: ("already_settled", "closed", "already_claimed"),
    422: ("invalid_request", "invalid_answer"),
}
"""The codes the requests API sends where they differ from `PROBLEM_CODES`."""

_problems = problems_for(PROBLEMS)
_create_problems = problems_for({**PROBLEMS, 422: ("invalid_request", "idempotency_key_reused")})

IDEMPOTENCY_KEY_HEADER = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "minLength": 1},
    "description": (
        "The request's idempotency key, as `idempotency_key` in the body is (give either, or both the same). "
        "Sent again with the same request, the first one is answered (200); on `POST /requests`, with a "
        "request that differs in kind, recipient, asks, title, details or context, 422 "
        "`idempotency_key_reused` and nothing changes (`POST /approvals`, an approval gate's, answers with "
        "the approval made for the key whatever it asks)."
    ),
}
"""The `Idempotency-Key` header of the create routes, as the OpenAPI document shows it (the
routes read it from the request themselves: a FastAPI parameter costs every call)."""


router = APIRouter()


def out(request: HumanRequest) -> JSONResponse:
    return JSONResponse(request_to_dict(request))


async def visible(broker: LocalBroker, request_id: str, principal: Principal) -> HumanRequest:
    request = await broker.get(request_id)
    if not can_read(principal, request):
        raise ApiError("forbidden", "this request is neither to you nor from you")
    return request


Rule = Callable[[Principal, HumanRequest], bool]


async def _acting(broker: LocalBroker, request_id: str, caller: Principal, may: Rule, refused: str) -> str | None:
    """Who to record as settling a request `caller` `may` settle: the caller (None for an
    admin, the operator). `NotFound` for an unknown request, a 403 for one they may not
    read, or (`refused`) may not settle."""
    request = await visible(broker, request_id, caller)
    if not may(caller, request):
        raise ApiError("forbidden", refused)
    return None if caller.kind == "admin" else caller.name


async def settled_or_conflict(broker: LocalBroker, request_id: str, done: bool) -> HumanRequest:
    current = await broker.get(request_id)
    if not done:
        raise AlreadySettled(request_id, current.status.value)
    return current


@router.post(
    "/requests",
    status_code=201,
    response_model=RequestModel,
    responses={
        200: {"model": RequestModel, "description": "the first request with this idempotency key"},
        **_create_problems(400, 409, 413, 422, 429),
    },
    dependencies=[Depends(rate_limited("creates", "requests created"))],
    openapi_extra={"parameters": [IDEMPOTENCY_KEY_HEADER]},
    tags=["requests"],
)
async def create_request(
    body: CreateBody,
    caller: Caller,
    http: Request,
    wait: Annotated[
        float | None,
        Query(
            ge=0,
            le=300,
            allow_inf_nan=False,
            description="hold the call up to this many seconds for the request to settle",
        ),
    ] = None,
) -> JSONResponse:
    """Ask a person. Without `to` the request goes to the caller's own inbox: an agent's
    owner's, or the person's own. With `wait`, a long poll: the answer is the request
    once it settles, or as it is (pending) when `wait` runs out; a client that hangs up
    meanwhile withdraws it, as a waiting call that is cut does (unless it outlives its
    waiter: made with an idempotency key, or for a run). An idempotency key used
    already gives the first request back (200), whatever became of its run since; a new
    request for a run that has ended is 409 `run_conflict`."""
    # The hot routes read the app's state from the request rather than through further
    # dependencies: each one costs FastAPI's dependency solving on every call.
    state = app_state(http)
    request, created = await create(state, _keyed(body, http), caller)
    if wait is not None and wait > 0 and request.status is Status.PENDING:
        request = await _watch_unless_gone(state, http, request.id, wait, keeps_run=can_cancel(caller, request))
    return JSONResponse(request_to_dict(request), status_code=201 if created else 200)


def _keyed(body: CreateBody, http: Request) -> CreateBody:
    """`body` with the `Idempotency-Key` header's key as its `idempotency_key`; 422 when the
    body names another, or the header is empty."""
    header = http.headers.get("idempotency-key")
    if header is None or header == body.idempotency_key:
        return body
    if not header.strip():
        raise ApiError("invalid_request", "Idempotency-Key: the header is empty; leave it out or give a key")
    if body.idempotency_key is not None:
        raise ApiError(
            "invalid_request",
            f"Idempotency-Key: the header's key {header!r} is not the body's idempotency_key "
            f"{body.idempotency_key!r}; give one of them, or both the same",
        )
    return body.model_copy(update={"idempotency_key": header})


async def _may_reach(state: AppState, caller: Principal, to: str | None, *, answered: bool = True) -> None:
    """Refuse a request (`answered`) or an update for `to` unless `to` names someone here
    (any name with open recipients) and `caller` may ask them: anyone else's inbox needs
    their grant (`may_ask`). A name that is no principal here (accepted with open
    recipients) has no inbox here to protect. A team only the routing names is someone here
    too, asked by its members and their agents only (it gives no grants), with open inboxes
    by anyone. A request to an agent is refused: only people answer, so nobody could."""
    if to is None:
        return
    broker = state.broker
    check_text(to, "to", broker.limits.max_name_length)  # before it is looked up
    known = to in state.known_recipients
    principal = None if known else await broker.get_principal(to)
    if principal is not None and principal.kind == "agent":  # (looked up each time: asked, it is refused)
        if answered:
            raise ApiError(
                "invalid_request",
                f"to: {to!r} is an agent, and only people answer requests: ask a person or a team "
                "(an agent's requests go to its owner when they name nobody)",
            )
    elif principal is not None:
        if principal.kind != "team":  # (a team may be deleted, on any node: looked up each time)
            state.known_recipients.add(to)
    elif not known and not state.open_recipients and to not in state.auth.routing_teams():
        # (a routing's team is not kept as known: it may change)
        raise ApiError("invalid_request", f"to: there is no human or agent named {to!r} here")
    if state.open_inboxes or asks_own_inbox(caller, to):
        return
    if known or principal is not None:
        await may_ask(broker, caller, to)
    elif to in state.auth.routing_teams():
        mine = "your owner's teams" if caller.kind == "agent" else "your teams"
        raise ApiError(
            "forbidden", f"{to!r} is a team, and only its members and their agents ask it: not one of {mine}"
        )


async def create(
    state: AppState, body: CreateBody, caller: Principal, *, gate: bool = False
) -> tuple[HumanRequest, bool]:
    """Store a request from `caller`; with `gate`, one marked as an approval gate's own.
    The request stored, and whether it is new (not an idempotent repeat)."""
    broker = state.broker
    to = body.to
    if to is None and caller.kind == "agent":
        to = caller.owner
    elif to is None and caller.kind == "human":
        to = caller.name
    if caller.kind != "admin" and not to:
        raise ApiError("invalid_request", "name the recipient in `to`")
    await _may_reach(state, caller, to)
    asks = await broker.build_asks([a.model_dump(by_alias=True) for a in body.asks])
    origin = await _origin_of(broker, caller, origin_from_dict(body.origin.model_dump(exclude_none=True)))
    prepared = broker.prepare(
        asks,
        kind=body.kind,
        to=to,
        title=body.title,
        details=body.details,
        context=body.context,
        timeout=body.timeout,
        expires_at=body.expires_at,
        requester=body.requester if caller.kind == "admin" else caller.name,
        idempotency_key=body.idempotency_key,
        origin=origin,
    )
    if body.detached:
        prepared = replace(prepared, detached=True)
    # A client's retry must repeat its request; a gate finds its call's approval by key alone.
    return await broker.submit(mark(prepared) if gate else prepared)


async def _origin_of(broker: LocalBroker, caller: Principal, origin: Origin) -> Origin:
    """The origin `caller` may give a request: an agent asks as itself (its name filled in),
    and no one but an admin names another agent here as theirs or puts a request into a
    run they did not start (it would let them see, message and cancel that run)."""
    if caller.kind == "admin":
        return origin
    if caller.kind == "agent" and origin.agent is None:
        origin = replace(origin, agent=caller.name)
    elif origin.agent is not None and origin.agent != caller.name:
        named = await broker.get_principal(origin.agent)
        if named is not None and not (named.kind == "agent" and named.owner == caller.name):
            raise ApiError("forbidden", f"origin.agent: {origin.agent!r} is another agent here, not yours to ask as")
    if origin.run is not None:
        origin = replace(origin, run=await _started_by(broker, caller, origin.run, "origin.run"))
    return origin


async def _started_by(broker: LocalBroker, caller: Principal, run_id: str, field: str) -> str:
    """The id of the run `caller` names `run_id` in `field` (an agent's own id of its
    choosing means its own run), refused unless `caller` started it (an admin: any run).
    No such run and another's are refused alike: an id may be guessed, and the refusal
    must not tell whether someone else has a run of it."""
    if caller.kind == "admin":
        return run_id
    run = await own_run_named(broker, caller, run_id)
    if run is None and caller.kind != "agent":  # a person starts no run, but one may be recorded as theirs
        with contextlib.suppress(NotFound):
            run = await broker.get_run(run_id)
    if run is None or run.requester != caller.name:
        raise ApiError("forbidden", f"{field}: {run_id!r} is not a run you started")
    return run.id


@router.post(
    "/approvals",
    status_code=201,
    response_model=RequestModel,
    responses={
        200: {"model": RequestModel, "description": "the first request with this idempotency key"},
        **_create_problems(400, 409, 413, 422, 429),
    },
    dependencies=[Depends(rate_limited("creates", "requests created"))],
    openapi_extra={"parameters": [IDEMPOTENCY_KEY_HEADER]},
    tags=["requests"],
)
async def create_approval(body: CreateBody, caller: Caller, state: State, http: Request) -> JSONResponse:
    """Ask approval for a tool call as an approval gate does (`interlock.connect(url)` in
    an agent's process sends its gate's requests here). The server marks the request as a
    gate approval (`context.kind` = `interlock.approval`, which `POST /requests` refuses)
    and records you as its requester; a gate trusts only the approvals its own principal
    made. `kind` must be `approval` and `context` an object."""
    if body.kind != "approval":
        raise ApiError("invalid_request", "kind: a gate approval has kind 'approval'")
    request, created = await create(
        state, _keyed(body, http).model_copy(update={"context": unmarked(body.context)}), caller, gate=True
    )
    return JSONResponse(request_to_dict(request), status_code=201 if created else 200)


@router.post(
    "/requests/{request_id}/consume",
    response_model=ConsumeResult,
    responses=_problems(400, 404, 422),
    tags=["requests"],
)
async def consume_request(
    request_id: str, caller: Caller, broker: TheBroker, body: ConsumeBody | None = None
) -> dict[str, Any]:
    """Spend an answered request you made, once: `consumed` is true for the one call, on
    any node, that does, and false when it is not answered or was consumed already. An
    approval gate runs a tool call only on an approval it consumed."""
    request = await visible(broker, request_id, caller)
    if caller.kind != "admin" and caller.name != request.requester:
        raise ApiError("forbidden", "only whoever made the request may consume it")
    by = (body.by if body is not None else None) if caller.kind == "admin" else caller.name
    return {"id": request_id, "consumed": await broker.consume(request_id, by=by)}


_DATE_TIME = {"format": "date-time"}
_AWARE = TypeAdapter(AwareDatetime)


def _instant(name: str, value: str | None) -> datetime | None:
    """A query parameter's RFC 3339 time with its offset; 422 for anything else (a bare
    number included, which pydantic would read as a Unix time)."""
    if value is None:
        return None
    try:
        if value.strip().lstrip("+-").replace(".", "", 1).isdigit():
            raise ValueError
        return _AWARE.validate_python(value)
    except (ValueError, ValidationError):
        raise ApiError("invalid_request", f"{name}: a time such as 2026-12-01T09:30:00Z") from None


@router.get("/requests", response_model=RequestPage, responses=_problems(422), tags=["requests"])
async def list_requests(caller: Caller, broker: TheBroker, params: Annotated[ListParams, Query()]) -> JSONResponse:
    """Your inbox (requests to you and to the teams you belong to) or, with `requester`
    set to you, what you asked; `recipient` one of your teams for that team's alone."""
    filters = list_filters(params)
    recipient, requester = filters["recipient"], filters["requester"]
    teams: tuple[str, ...] = ()
    if caller.kind != "admin":
        if requester is None and recipient is None:
            if caller.kind == "agent":
                requester = caller.name
            else:
                recipient = caller.name
        team = recipient is not None and recipient in member_teams(caller)
        if (recipient is not None and recipient != caller.name and not team) or (
            requester is not None and requester != caller.name
        ):
            raise ApiError("forbidden", "you may list only requests to you (or your teams) or from you")
        if recipient == caller.name:  # a member's inbox holds their teams' requests too
            teams = member_teams(caller)
    filters |= {"recipient": recipient, "requester": requester, "teams": teams}
    if filters.get("run") is not None:  # an agent's own run id names its run
        filters["run"] = await run_id_of(broker, caller, filters["run"])
    filters |= {"since": _instant("since", filters["since"]), "until": _instant("until", filters["until"])}
    filters["after"] = taken("requests", filters["after"])
    page = await broker.list(**filters)
    items = [request_to_dict(r) for r in page.items]
    return JSONResponse({"items": items, "next_cursor": issued("requests", page.next_cursor)})


@router.get("/dashboard", response_model=DashboardModel, responses=_problems(403, 422), tags=["requests"])
async def dashboard_figures(
    caller: Caller,
    broker: TheBroker,
    recipient: Annotated[
        str | None, Query(description="one person's or team's figures: yours, a team of yours, anyone's for an admin")
    ] = None,
    teams: Annotated[
        list[str], Query(alias="team", description="with `recipient`, also these teams' requests (an admin's choice)")
    ] = [],  # noqa: B006  (FastAPI copies a default)
    window: Annotated[
        float,
        Query(
            gt=0, le=MAX_DASHBOARD_WINDOW.total_seconds(), allow_inf_nan=False, description="how far back, in seconds"
        ),
    ] = DASHBOARD_WINDOW.total_seconds(),
) -> JSONResponse:
    """The dashboard's figures over your inbox (your requests and your teams'), or over
    everyone's for an admin: what waits now, by agent and age, and for each person and
    team how they answered over the window."""
    if caller.kind != "admin":
        teams = []
        if caller.kind != "human":
            raise ApiError("forbidden", "the dashboard is a person's view")
        if recipient is None or recipient == caller.name:
            recipient, teams = caller.name, list(member_teams(caller))
        elif recipient not in member_teams(caller):
            raise ApiError("forbidden", "you may see only your own figures and your teams'")
    board = await broker.dashboard(recipient=recipient, teams=teams, window=timedelta(seconds=window))
    return JSONResponse(dashboard_to_dict(board))


@router.get("/requests/{request_id}", response_model=RequestModel, responses=_problems(404), tags=["requests"])
async def get_request(request_id: str, caller: Caller, broker: TheBroker) -> JSONResponse:
    """The request. A person reading it who did not ask it is recorded on its timeline as
    having viewed it, the first time only."""
    request = await visible(broker, request_id, caller)
    if caller.kind == "human":
        await broker.note_viewed(request, by=caller.name)
    return out(request)


class ClaimModel(BaseModel):
    """Who has taken a request to a team, and since when."""

    request_id: str
    by: str
    at: datetime


class ClaimConflict(Problem):
    """The 409 of a claim: `already_claimed` with the standing `claim` when another member
    holds the request, `already_settled` once it is settled."""

    claim: ClaimModel | None = Field(None, description="`already_claimed`: who holds the request, since when")


class ClaimPage(BaseModel):
    items: list[ClaimModel]


class Unclaimed(BaseModel):
    removed: ClaimModel | None


@router.post(
    "/requests/{request_id}/claim",
    response_model=ClaimModel,
    responses={**_problems(404, 409), 409: {"model": ClaimConflict, "description": describe(409, PROBLEMS[409])}},
    tags=["answers"],
)
async def claim_request(request_id: str, caller: Caller, broker: TheBroker) -> JSONResponse:
    """Take a pending request to one of your teams, so the other members see it is yours.
    409 `already_claimed` (with the standing `claim`) when another member holds it, 409
    `already_settled` once it is settled; claiming one you hold already changes nothing.
    A claim does not stop the others from answering: the first answer wins."""
    request = await visible(broker, request_id, caller)
    if not can_claim(caller, request):
        raise ApiError("forbidden", "only a member of the team a request is addressed to may claim it")
    by = caller.name
    claim = await broker.claim(request.id, by=by)
    if claim.by != by:
        raise ApiError(
            "already_claimed",
            f"already claimed by {claim.by} at {claim.at.isoformat(timespec='seconds')}",
            claim=claim_to_dict(claim),
        )
    return JSONResponse(claim_to_dict(claim))


@router.delete(
    "/requests/{request_id}/claim", response_model=Unclaimed, responses=_problems(404, 409), tags=["answers"]
)
async def unclaim_request(request_id: str, caller: Caller, broker: TheBroker) -> JSONResponse:
    """Give up your claim on a pending request (an admin: anyone's); `removed` is the
    claim given up, null when you held none; 409 `already_settled` once it is settled."""
    request = await visible(broker, request_id, caller)
    if not can_claim(caller, request):
        raise ApiError("forbidden", "only a member of the team a request is addressed to may give up a claim")
    removed = await broker.unclaim(request.id, by=None if caller.kind == "admin" else caller.name)
    return JSONResponse({"removed": claim_to_dict(removed) if removed else None})


@router.get("/claims", response_model=ClaimPage, responses=_problems(422), tags=["answers"])
async def list_claims(
    caller: Caller,
    broker: TheBroker,
    request: Annotated[list[str], Query(max_length=200, description="request ids (at most 200)")],
) -> JSONResponse:
    """Who has claimed which of these requests (those you may read; the others left out)."""
    found = await broker.claims(request, **seen_by(caller))
    return JSONResponse({"items": [claim_to_dict(claim) for claim in found.values()]})


@router.get(
    "/requests/{request_id}/wait",
    response_model=RequestModel,
    responses=_problems(404, 408, 422),
    tags=["requests"],
)
async def wait_request(
    request_id: str,
    caller: Caller,
    http: Request,
    timeout: Annotated[float, Query(ge=0, le=300, allow_inf_nan=False)] = 30,
    keep_run: Annotated[
        bool,
        Query(
            description="the request's maker, waiting on it in its run's process: while the poll lasts, the "
            "request's run (running in that process) is kept from being given up as abandoned"
        ),
    ] = False,
) -> JSONResponse:
    """Long poll: the request once it settles, or 408 `pending` when `timeout` passes (or
    the server begins to stop; a poll that comes once it has is 503 `unavailable`)."""
    state = app_state(http)
    state.refuse_if_stopping()
    broker = state.broker
    found = await visible(broker, request_id, caller)
    # Its maker's wait (the Python client's `wait`, not its `watch`) is its run's process alive.
    keeps_run = keep_run and can_cancel(caller, found)
    watching = state.held(
        http, broker.watch(request_id, timeout=timeout, keeps_run=keeps_run), still=lambda now: can_read(now, found)
    )
    # A process that stops waiting (cut, closed, dead) hangs up: its run is kept no longer.
    request = await (unless(watching, _disconnected(http)) if keeps_run else watching)
    if request is None or request.status is Status.PENDING:
        raise ApiError("pending", f"request {request_id} is still pending", current_status="pending")
    return out(request)


async def answer_one(
    broker: LocalBroker, request_id: str, body: AnswerBody, caller: Principal, via: str = "api"
) -> HumanRequest:
    request = await visible(broker, request_id, caller)
    if body.cancel:
        # Novo's `cancel: true`, from either side: the requester withdraws the request, or
        # the person it is to declines it without answering (recorded as cancelled by them).
        if not (can_cancel(caller, request) or can_answer(caller, request)):
            raise ApiError("forbidden", "only whoever made the request, or the person it is to, may cancel it")
    elif not can_answer(caller, request):
        raise ApiError("forbidden", "only the human the request is to may answer it")
    if request.status is not Status.PENDING:
        raise AlreadySettled(request_id, request.status.value)
    try:
        decision = decide(request, body)
    except InvalidAnswer as exc:
        raise ApiError("invalid_answer", str(exc), status=NOVO_REFUSAL, ask_id=exc.ask_id) from None
    by = body.by if caller.kind == "admin" else caller.name
    if decision.cancel:
        if by is not None and by != caller.name and await broker.tokens_all_revoked(by):  # (an answer checks it)
            raise ApiError("forbidden", f"by: every token of {by!r} is revoked, so nothing is declined in their name")
        done = await broker.cancel(request_id, body.reason, by=by, via=via)
    else:
        echo = None if body.grants is None else [g.model_dump(by_alias=True) for g in body.grants]
        try:
            done = await broker.resolve(request_id, decision.value, by=by, via=via, comment=body.reason, grants=echo)
        except InvalidAnswer as exc:
            if body.input_responses is None:
                raise  # the native body: 422, as every other answer that does not fit
            # Novo's rules: an inputResponses body that does not fit its request is a 400.
            raise ApiError("invalid_answer", str(exc), status=NOVO_REFUSAL, ask_id=exc.ask_id) from None
    return await settled_or_conflict(broker, request_id, done)


@router.post(
    "/requests/{request_id}/answer",
    response_model=RequestModel,
    responses=_problems(400, 404, 409, 413, 422),
    tags=["answers"],
)
async def answer_request(
    request_id: str, body: AnswerBody, caller: Caller, http: Request, via: Surface
) -> JSONResponse:
    """Answer with `answers` by ask id, a bare `answer`, or Novo-compatible `inputResponses`;
    `cancel: true` ends it unanswered instead (its requester withdrawing it, or the person
    it is to declining it), recorded as cancelled with who did it and `via: "api"` (`"mcp"`
    for `/mcp`'s tools, which answer through this route in the server's process)."""
    return out(await answer_one(app_state(http).broker, request_id, body, caller, via))


@router.post("/answers", response_model=list[BatchResult], responses=_problems(400, 413, 422), tags=["answers"])
async def answer_batch(body: BatchAnswerBody, caller: Caller, broker: TheBroker, via: Surface) -> list[dict[str, Any]]:
    """Answer several requests; each result stands on its own."""
    results = []
    for item in body.items:
        fields = item.model_dump(exclude={"id"}, exclude_unset=True, by_alias=True)
        try:
            settled = await answer_one(broker, item.id, AnswerBody.model_validate(fields), caller, via)
            results.append({"id": item.id, "ok": True, "status": settled.status.value})
        except (ApiError, Forbidden, InvalidAnswer, InvalidRequest, NotFound, AlreadySettled) as exc:
            results.append({"id": item.id, "ok": False, "error": _error_of(exc)})
    return results


@router.post(
    "/requests/{request_id}/reject",
    response_model=RequestModel,
    responses=_problems(400, 404, 409, 413, 422),
    tags=["answers"],
)
async def reject_request(
    request_id: str, caller: Caller, broker: TheBroker, via: Surface, body: RejectBody | None = None
) -> JSONResponse:
    """Refuse a request, with a reason: the person it is to, or, with `hook: true`, the
    agent that made it, whose input hook denied it before anyone answered (as a hook on a
    local store does). The body may be left out: no reason."""
    body = body or RejectBody()
    if body.hook:
        by = await _acting(broker, request_id, caller, can_cancel, "only whoever made the request may deny it by hook")
        done = await broker.reject(request_id, body.reason, by=by or "hook", via="hook")
    else:
        by = await _acting(broker, request_id, caller, can_answer, "only the human the request is to may reject it")
        done = await broker.reject(request_id, body.reason, by=by, via=via)
    return out(await settled_or_conflict(broker, request_id, done))


@router.post(
    "/requests/{request_id}/cancel",
    response_model=RequestModel,
    responses=_problems(400, 404, 409, 413, 422),
    tags=["requests"],
)
async def cancel_request(
    request_id: str, caller: Caller, broker: TheBroker, via: Surface, body: CancelBody | None = None
) -> JSONResponse:
    """Withdraw a request you made (the body may be left out: no reason). With `cause:
    "released"`, free it as `release` does: a request created detached is dropped once,
    whichever client asks first (its answer kept, if it has one); a later release is a 409
    `already_settled`. `cause: "withdrawn"` is a waiting call's that was cut: a request
    that outlives its waiter (detached, made with an idempotency key, or a run's) stays
    pending, with a 409 `already_settled` saying so (`current_status: pending`)."""
    body = body or CancelBody()
    by = await _acting(broker, request_id, caller, can_cancel, "only whoever made the request may cancel it")
    if body.cause == "released":
        done = await broker.release(request_id, by=by, via=via)
    else:
        done = await broker.cancel(request_id, body.reason, by=by, cause=body.cause, via=via)
    if not done and body.cause == "withdrawn" and (await broker.get(request_id)).status is Status.PENDING:
        raise AlreadySettled(  # a 409 as for a request settled: the remote broker's cancel is False
            request_id,
            "pending",
            f"request {request_id!r} outlives its waiter (it is detached, made with an idempotency key, or a "
            "run's), so a waiting call's withdrawal leaves it pending: cancel it (cause \"cancelled\") to withdraw it",
        )
    return out(await settled_or_conflict(broker, request_id, done))


@router.post(
    "/requests/{request_id}/expire", response_model=RequestModel, responses=_problems(404, 409), tags=["requests"]
)
async def expire_request(request_id: str, caller: Caller, broker: TheBroker) -> JSONResponse:
    """Expire a request you made now (a waiting client whose own time ran out)."""
    await _acting(broker, request_id, caller, can_cancel, "only whoever made the request may expire it")
    return out(await settled_or_conflict(broker, request_id, await broker.expire(request_id)))


@router.post("/close", response_model=list[RequestModel], responses=_problems(400, 413, 422), tags=["requests"])
async def close_channel(body: CloseBody, caller: Caller, broker: TheBroker, via: Surface) -> JSONResponse:
    """Close a channel: withdraw its pending requests and refuse later creates there,
    on every node, until `/reopen`. An admin (a server without auth) closes it for
    everyone; anyone else closes it for their own requests. Without a channel, withdraw
    the pending requests (all of them for an admin, else yours) and refuse nothing."""
    requester = None if caller.kind == "admin" else caller.name
    if body.channel is not None:
        before = await broker.pending(channel=body.channel, requester=requester)
        await broker.close(body.channel, requester=requester, via=via)
        closed = [request_to_dict(r) for i in before if (r := await broker.get(i)).status is not Status.PENDING]
        return JSONResponse(closed)  # (each request as every other route writes it)
    withdrawn = []
    for request_id in await broker.pending(requester=requester):
        if await broker.cancel(request_id, "the channel was closed", by=requester, cause="closed", via=via):
            withdrawn.append(request_to_dict(await broker.get(request_id)))
    return JSONResponse(withdrawn)


@router.post("/reopen", response_model=Reopened, responses=_problems(400, 413, 422), tags=["requests"])
async def reopen_channel(body: ReopenBody, caller: Caller, broker: TheBroker) -> dict[str, Any]:
    """Take back a `/close` of the channel (yours; every closure of it for an admin), so
    requests can be created there again."""
    requester = None if caller.kind == "admin" else caller.name
    return {"channel": body.channel, "reopened": await broker.reopen(body.channel, requester=requester)}


@router.post(
    "/inform",
    status_code=201,
    response_model=EventModel,
    responses=_problems(400, 403, 413, 422, 429),
    dependencies=[Depends(rate_limited("updates", "updates sent"))],
    tags=["events"],
)
async def inform(body: InformBody, caller: Caller, state: State) -> dict[str, Any]:
    """Record a progress update for a person; nothing waits for it. The update's
    `agent` is the calling agent (the body's is honoured only without auth). A `run`
    must be one you started (403 otherwise, and for no such run alike): an update there
    is shown on that run's page and stream. An agent's own `run_id` (as it started the
    run with) names its run. `to` is whom the update is for (an agent's owner by default),
    who may be sent one as they may be asked: anyone else needs their grant (403)."""
    broker = state.broker
    run = None if body.run is None else await _started_by(broker, caller, body.run, "run")
    to = body.to or (caller.owner if caller.kind == "agent" else None)
    await _may_reach(state, caller, to, answered=False)
    agent = body.agent if caller.kind == "admin" else (caller.name if caller.kind == "agent" else None)
    event = await broker.inform(
        body.message,
        to=to,
        session=body.session,
        agent=agent,
        run=run,
        data=body.data,
        by=None if caller.kind == "admin" else caller.name,
    )
    return event_to_dict(event)


def event_filter(
    caller: Principal, request: str | None, session: str | None, run: str | None
) -> Callable[[Event], bool]:
    def accept(event: Event) -> bool:
        if not can_see(caller, event):
            return False
        origin = event.request.origin if event.request is not None else None
        if request is not None and event.request_id != request:
            return False
        if session is not None and (origin.session if origin else event.data.get("session")) != session:
            return False
        return run is None or (origin.run if origin else event.data.get("run")) == run

    return accept


@router.get("/events", name="list_events", response_model=EventPage, responses=_problems(422), tags=["events"])
async def events(
    caller: Caller,
    broker: TheBroker,
    after: Annotated[int, Query(ge=0, le=MAX_EVENT_ID)] = 0,
    limit: Annotated[int, Query(ge=0, le=1000)] = 500,
    request: str | None = None,
    session: str | None = None,
    run: str | None = None,
) -> JSONResponse:
    """The event log after `after`, oldest first, as far as you may see it. Pass
    `last_event_id` as `after` for the next page. A page ends before `limit` where the
    requests its events carry pass 8 MiB of JSON (`cut`), at its last event. `limit=0`
    reads no event, only where the log ends now (`last_event_id`): to follow it from
    there, skipping what came before."""
    run = None if run is None else await run_id_of(broker, caller, run)
    last = await broker.last_event_id()
    page = await broker.find_events(
        after=after,
        until=last,
        limit=limit,
        involving=None if caller.kind == "admin" else caller.name,
        teams=member_teams(caller),
        request=request,
        session=session,
        run=run,
    )
    if limit > 0 and (len(page) == limit or page.cut):
        last = page[-1].id  # a full page, or one cut by size: continue from here
    # (each request as every other route writes it: not filled out by the response's model)
    return JSONResponse({"events": [event_to_dict(e) for e in page], "last_event_id": last, "cut": page.cut})


@router.get(
    "/events/stream",
    name="stream_events",
    response_class=EventSourceResponse,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "server-sent events"},
        **_problems(400, 422, 429),
    },
    tags=["events"],
)
async def stream(
    caller: Caller,
    broker: TheBroker,
    state: State,
    http: Request,
    request: str | None = None,
    session: str | None = None,
    run: str | None = None,
    after: Annotated[
        int | None, Query(ge=0, le=MAX_EVENT_ID, description="replay from here; Last-Event-ID wins")
    ] = None,
    last_event_id: Annotated[str | None, Header()] = None,
    last_event_id_query: Annotated[str | None, Query(alias="lastEventId", description=LAST_EVENT_ID_QUERY)] = None,
) -> EventSourceResponse:
    """Live events as server-sent events. Each `id` is the event's id: reconnect with
    `Last-Event-ID` and exactly the missed events are replayed, in order, once."""
    try:  # here, before the stream's 200 goes out
        start = parse_event_id(last_event_id if last_event_id is not None else last_event_id_query)
    except ValueError as exc:
        raise ApiError("invalid_request", str(exc), status=UNREADABLE) from None
    start = after if start is None else start
    check_filters(broker, request=request, session=session, run=run)
    run = None if run is None else await run_id_of(broker, caller, run)
    accept = event_filter(caller, request, session, run)
    holder = state.auth.holder(http)
    replay = seen_event_replay(broker, caller, request=request, session=session, run=run)

    async def generate() -> AsyncIterator[ServerSentEvent | bytes]:
        yield ServerSentEvent(comment="connected", retry=2000)
        try:
            follow = state.hub.replay_then_follow(
                accept,
                start,
                replay,
                holder=holder,
                lost=state.auth.stream_lost(http, caller),
                audience=("api", caller.name, caller.kind, member_teams(caller), request, session, run),
            )
            frame = state.hub.frame
            async for event in follow:
                yield frame(event)  # the same bytes for every subscriber
        except Dropped as exc:
            yield ServerSentEvent(data=json.dumps({"reason": str(exc)}), event="dropped")

    # No per-send timeout: it costs a cancel scope per event per subscriber, and a
    # subscriber that stops reading is dropped by its bounded queue instead.
    return state.quotas.streams.response(caller.name, generate(), ping=state.keepalive)


@router.get("/whoami", response_model=WhoamiModel, tags=["principals"])
async def whoami(caller: Caller) -> dict[str, Any]:
    """Who the token you send names."""
    return {"name": caller.name, "kind": caller.kind, "owner": caller.owner}


async def _watch_unless_gone(
    state: AppState, http: Request, request_id: str, timeout: float, *, keeps_run: bool = False
) -> HumanRequest:
    """Watch a request for up to `timeout` seconds; if the client hangs up first, or its
    token is revoked meanwhile (then 401), withdraw it. A server that begins to stop
    answers with it pending: the client's wait goes on. With `keeps_run` (its maker
    waits), the watch keeps the request's run alive."""
    broker = state.broker
    watching = asyncio.ensure_future(state.held(http, broker.watch(request_id, timeout=timeout, keeps_run=keeps_run)))
    gone = asyncio.ensure_future(_disconnected(http))
    try:
        await asyncio.wait((watching, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not watching.done():
            watching.cancel()
    cut = None  # the refusal of a caller whose token was revoked meanwhile
    if watching.done() and not watching.cancelled():
        cut = watching.exception()
        if not isinstance(cut, ApiError):
            return watching.result() or await broker.get(request_id)
    current = await broker.get(request_id)
    if not current.outlives_its_waiter:  # an idempotency key, a run: its maker comes back for it
        await broker.cancel(request_id, "the waiting call was cancelled", cause="withdrawn", via=surface_of(http))
        current = await broker.get(request_id)
    if cut is not None:
        raise cut
    return current


async def _disconnected(http: Request) -> None:
    """Return when the client hangs up (the body was read already: only a disconnect comes)."""
    while (await http.receive())["type"] != "http.disconnect":
        pass


def _error_of(exc: Exception) -> dict[str, Any]:
    if isinstance(exc, ApiError):
        return {"code": exc.code, "status": exc.status, "detail": exc.detail, **exc.extra}
    found = problem_of(exc)
    assert found is not None  # the batch catches the table's exceptions only
    status, code, extra = found
    return {"code": code, "status": status, "detail": str(exc), **extra}
