"""The runs API under /api/v1/runs: start, park, claim, finish and cancel runs, list and
read them, and follow a run's events with replay on reconnect.

Who may do what: an agent (or the operator of a server without auth) starts runs, parks
them, claims them and finishes them; only the principal that started a run, or its
owner, or a person one of its requests goes to may read it, follow it and cancel it. A
run's framework state is shown only to the agent that started it (and the operator), and
taken only from it: a person's client never sees or sends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from sse_starlette import EventSourceResponse, ServerSentEvent

from ..broker import DEFAULT_LEASE, MAX_EVENT_ID, LocalBroker
from ..cursors import CURSOR, issued, taken
from ..errors import NotFound, RunConflict
from ..followups import followup_to_dict
from ..model import Event, Run, RunStatus, run_to_dict
from ..principals import Principal
from .common import (
    LAST_EVENT_ID_QUERY,
    UNREADABLE,
    ApiError,
    Caller,
    State,
    TheBroker,
    event_to_dict,
    member_teams,
    named_run,
    parse_event_id,
    problems_for,
    rate_limited,
    run_event_filter,
    run_event_replay,
    runs_filter,
    scoped_run_id,
)
from .schemas import EventPage, Strict
from .stream import Dropped, patiently

__all__ = ["router"]

router = APIRouter(tags=["runs"])
log = logging.getLogger("interlock.server")

_problems = problems_for({409: ("run_conflict",)})


# -- shapes ----------------------------------------------------------------------------------


class StartBody(Strict):
    agent: str = Field(description="the agent whose run this is: a worker with its handler resumes it")
    session: str | None = Field(None, description="the session or thread the run belongs to")
    run_id: str | None = Field(
        None,
        description="an id of the caller's choosing (a thread id, say): starting it again returns the stored run. "
        "An agent's ids are its own: the run is kept as `{agent}:{run_id}` (its `id`, also accepted as `run_id`), "
        "and wherever the agent names a run, its own `run_id` means that run",
    )
    max_duration: float | None = Field(
        None, gt=0, description="seconds: a pause stays open at least this long before it is given up"
    )
    requester: str | None = Field(None, description="who starts it (the operator only; else the token's principal)")
    exclusive: bool = Field(
        False,
        description="the run holds its `session` (which it must name), as a framework's thread that two runs would "
        "write over: while a run of the agent on that session started by the caller has not ended, the start is "
        "refused (409 `run_conflict`, naming that run and its status) and nothing is stored",
    )


class ParkBody(Strict):
    state: Any = Field(None, description="the framework's state to go on from (JSON, opaque to interlock)")
    waiting_on: list[str] = Field(description="the requests (created with this run's id) the run waits on")
    status: Literal["waiting_for_input", "waiting_for_approval"] | None = None
    worker: str | None = Field(None, description="the worker holding the run, when a worker parks it again")


class ClaimBody(Strict):
    agents: list[str] | None = Field(None, description="the agents this worker resumes; any when null")
    worker: str = Field(description="the worker's name, which holds the run until its lease runs out")
    lease: float = Field(DEFAULT_LEASE, gt=0, le=3600)


class LeaseBody(Strict):
    worker: str
    lease: float = Field(DEFAULT_LEASE, gt=0, le=3600)


class CompleteBody(Strict):
    result: Any = None
    worker: str | None = None


class FailBody(Strict):
    error: str
    worker: str | None = None


class CancelRunBody(Strict):
    reason: str = Field("cancelled_by_user", description="the run's `terminal_reason`")


class RunModel(BaseModel):
    id: str
    agent: str
    session: str | None
    requester: str | None
    status: Literal["running", "waiting_for_input", "waiting_for_approval", "completed", "failed", "cancelled"]
    terminal_reason: str | None = Field(
        description="why it ended: `interaction_timeout` (its pause ran out), `abandoned` (running in its agent's "
        "own process, which neither parked it, started it again nor asked on it in time), `cancelled_by_user` or "
        "the reason a "
        "cancel gave, `error` (failed)"
    )
    created_at: str
    updated_at: str
    expires_at: str | None = Field(
        description="while parked on a person: when the pause is given up (`interaction_timeout`); while running "
        "with no worker holding it (in its agent's own process): when it is given up as `abandoned` unless that "
        "process parks it, starts it again or makes a request on it first (or waits on one: a long poll of "
        "`/requests/{id}/wait` with `keep_run` moves it on while it lasts)"
    )
    max_duration: float | None
    waiting_on: list[str]
    ready: bool = Field(description="every request the run waits on has settled: a worker may claim it")
    result: Any
    error: str | None
    worker: str | None
    lease_expires_at: str | None
    attempts: int
    state: Any = Field(None, description="shown only to the agent that started the run")
    queuedFollowups: list[dict[str, Any]] | None = Field(  # Novo's name on the wire
        None,
        description="reading one run: the messages held for it, oldest first (`{id, text, queuedAt, by}`); "
        "on an ended run, those never delivered, read-only",
    )


class ClaimedRunModel(RunModel):
    pause_timeout: float = Field(
        description="seconds a pause waits for a person on this server (`interlock serve --pause-timeout`): a "
        'worker whose handler keeps handing the run back ("not now") gives it up, failed, once it has been '
        "handed back that long since its requests settled (or for its longer `max_duration`)"
    )


class RunPageModel(BaseModel):
    items: list[RunModel]
    next_cursor: str | None


class Renewed(BaseModel):
    renewed: bool


# -- who may do what ---------------------------------------------------------------------------


def _keeps_state(caller: Principal, run: Run) -> bool:
    return caller.kind == "admin" or (caller.kind == "agent" and caller.name == run.requester)


def out(caller: Principal, run: Run, status_code: int = 200) -> JSONResponse:
    return JSONResponse(run_to_dict(run, state=_keeps_state(caller, run)), status_code=status_code)


def _agent_only(caller: Principal, what: str) -> None:
    if caller.kind == "human":
        raise ApiError("forbidden", f"only an agent {what}; a person's client does not")


async def visible_run(broker: LocalBroker, caller: Principal, run_id: str) -> Run:
    """The run the caller names `run_id` (an agent: its own run of the id it chose, first),
    if they may see it; 404, as for no such run, if they may not."""
    return await named_run(broker, caller, run_id)


async def own_run(broker: LocalBroker, caller: Principal, run_id: str, what: str) -> Run:
    """The caller's own run of that name, to drive: 404 for a run they may not see (an
    agent sees only its own), 403 for one they see but did not start."""
    _agent_only(caller, what)
    run = await named_run(broker, caller, run_id)
    if caller.kind != "admin" and caller.name != run.requester:
        raise ApiError("forbidden", "this run was started by someone else")
    return run


# -- routes ------------------------------------------------------------------------------------


@router.post(
    "/runs",
    status_code=201,
    response_model=RunModel,
    responses={
        200: {"model": RunModel, "description": "the run with this id, already stored"},
        **_problems(400, 403, 409, 413, 422, 429),
    },
    dependencies=[Depends(rate_limited("creates", "runs started"))],
)
async def start_run(body: StartBody, caller: Caller, broker: TheBroker) -> JSONResponse:
    """Start a run of an agent (status `running`). Create its requests with
    `origin.run` set to its id, then park it on them. An agent's `run_id` is scoped to it:
    the run's `id` is `{agent}:{run_id}`, which no other agent's run can hold or block,
    and starting the same `run_id` again returns that run as it is (one still `running`
    with no worker holding it gets a new `expires_at`: its process is alive). With `exclusive`, a
    new run is refused (409 `run_conflict`) while a run of the agent on its `session`
    started by the caller has not ended."""
    _agent_only(caller, "starts runs")
    # (before a run of the id is looked up: a restart names the agent as the first start did)
    if caller.kind != "admin" and body.agent != caller.name:
        named = await broker.get_principal(body.agent)
        if named is not None:  # an agent's own names for its parts are its own; another principal's is not
            raise ApiError("forbidden", f"agent: {body.agent!r} is another principal here: start your own runs")
    run_id = chosen = body.run_id
    if chosen is not None:
        run_id = chosen if caller.kind == "admin" else scoped_run_id(caller.name, chosen)
        limit = broker.limits.max_name_length
        if run_id != chosen and len(run_id) > limit:  # the id with the agent's name before it must fit
            raise ApiError("invalid_request", f"run_id: at most {limit - len(caller.name) - 1} characters here")
        existing = await _existing(broker, run_id)
        if existing is None and run_id != chosen:
            # A run the agent started under this very id before ids were scoped is still its own.
            legacy = await _existing(broker, chosen)
            if legacy is not None and legacy.requester == caller.name and legacy.agent == body.agent:
                return out(caller, await _started_again(broker, legacy))
        if existing is not None:
            if caller.kind != "admin" and existing.requester != caller.name:
                # Only the operator could have stored a run under an agent's own name.
                raise ApiError("forbidden", "a run with this id was started by someone else")
            if existing.agent == body.agent:  # (another agent's: the start below refuses it)
                return out(caller, await _started_again(broker, existing))
    requester = body.requester if caller.kind == "admin" else caller.name
    # (exclusive: refused only for a run of the same requester, so the caller's own, which it sees)
    run = await broker.start_run(
        body.agent,
        session=body.session,
        run_id=run_id,
        max_duration=body.max_duration,
        requester=requester,
        exclusive=body.exclusive,
    )
    if caller.kind != "admin" and run.requester != caller.name:  # stored meanwhile by someone else
        raise ApiError("forbidden", "a run with this id was started by someone else")
    return out(caller, run, 201)


async def _started_again(broker: LocalBroker, run: Run) -> Run:
    """A run of the caller's found by the id a start names: one still `running` with no
    worker holding it gets a new deadline (its process started it again, so is alive),
    under the id it is stored by (a legacy, unscoped id too); any other as it is."""
    if run.status is RunStatus.RUNNING and run.worker is None:
        return await broker.start_run(run.agent, session=run.session, run_id=run.id, requester=run.requester)
    return run


async def _existing(broker: LocalBroker, run_id: str) -> Run | None:
    try:
        return await broker.get_run(run_id)
    except NotFound:
        return None


@router.get("/runs", response_model=RunPageModel, responses=_problems(422))
async def list_runs(
    caller: Caller,
    broker: TheBroker,
    agent: str | None = None,
    session: str | None = None,
    status: RunStatus | None = None,
    requester: str | None = None,
    cursor: Annotated[str | None, Query(description=CURSOR)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    order: Literal["asc", "desc"] = "desc",
) -> dict[str, Any]:
    """The runs you may see, newest first (by when each was made), a page at a time (pass
    `next_cursor` as `cursor`; any other cursor is refused with 422): an agent's, those it
    started; a person's, those of the agents they own and those that wait on them (or on a
    team of theirs). A list shows no state."""
    after = taken("runs", cursor)
    filters = {"requester": requester, **runs_filter(caller)}
    if requester not in (None, filters["requester"]):
        return {"items": [], "next_cursor": None}  # an agent lists its own runs only
    page = await broker.list_runs(
        agent=agent,
        session=session,
        status=status,
        **filters,
        after=after,
        limit=limit,
        order=order,
    )
    items = [run_to_dict(run, state=False) for run in page.items]
    return {"items": items, "next_cursor": issued("runs", page.next_cursor)}


@router.post(
    "/runs/claim",
    response_model=ClaimedRunModel,
    responses={204: {"description": "no run was ready in time"}, **_problems(400, 403, 413, 422)},
)
async def claim_run(
    body: ClaimBody,
    caller: Caller,
    state: State,
    http: Request,
    wait: Annotated[
        float, Query(ge=0, le=300, allow_inf_nan=False, description="seconds to wait for a ready run")
    ] = 0.0,
) -> Response:
    """Claim one ready run for a worker, exactly once across workers: a parked run whose
    requests have all settled, or one whose worker's lease ran out. An agent's token
    claims only the runs it started. A server that begins to stop ends the wait: 204.
    A run claimed as the caller's token is revoked (401) or as it hangs up goes to
    nobody: it is given back at once, for any worker to claim. With the run comes this
    server's `pause_timeout`: how long the worker may hand it back. A claim that comes once
    the server has begun to stop is 503 `unavailable`."""
    _agent_only(caller, "claims runs")
    state.refuse_if_stopping()
    claimed: Run | None = None

    async def claim() -> Run | None:
        nonlocal claimed
        claimed = await state.broker.claim_run(
            body.agents,
            worker=body.worker,
            lease=body.lease,
            wait=wait,
            requester=None if caller.kind == "admin" else caller.name,
        )
        return claimed

    claiming = asyncio.ensure_future(state.held(http, claim()))
    gone = asyncio.ensure_future(_disconnected(http))
    run: Run | None = None
    try:
        try:
            await asyncio.wait((claiming, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not claiming.done():
                claiming.cancel()  # the worker hung up: claim nothing for it
                with contextlib.suppress(asyncio.CancelledError):
                    await claiming
        run = None if claiming.cancelled() else claiming.result()
    finally:
        if claimed is not None and run is None:
            # Claimed, but not handed to the caller: its token was revoked (401) or it hung
            # up as the claim was made. The run is given back, not held until its lease ends.
            try:
                if await state.broker.release_claim(claimed.id, worker=body.worker):
                    log.info("run %s claimed for worker %s went to nobody: given back", claimed.id, body.worker)
            except Exception as exc:  # its lease hands it on all the same
                log.warning("could not give back run %s (%s: %s)", claimed.id, type(exc).__name__, exc)
    if run is None:
        return Response(status_code=204)
    shape = run_to_dict(run, state=_keeps_state(caller, run))
    shape["pause_timeout"] = state.broker.pause_timeout.total_seconds()
    return JSONResponse(shape)


async def _disconnected(http: Request) -> None:
    """Return when the client hangs up (the body was read already: only a disconnect comes)."""
    while (await http.receive())["type"] != "http.disconnect":
        pass


@router.get("/runs/{run_id}", response_model=RunModel, responses=_problems(403, 404, 422))
async def get_run(run_id: str, caller: Caller, broker: TheBroker) -> JSONResponse:
    """The run as it is now (its state only to the agent that started it), with the
    messages held for it (`queuedFollowups`, oldest first)."""
    run = await visible_run(broker, caller, run_id)
    shape = run_to_dict(run, state=_keeps_state(caller, run))
    shape["queuedFollowups"] = [followup_to_dict(f) for f in await broker.list_followups(run.id)]
    return JSONResponse(shape)


@router.post("/runs/{run_id}/park", response_model=RunModel, responses=_problems(400, 403, 404, 409, 413, 422))
async def park_run(run_id: str, body: ParkBody, caller: Caller, broker: TheBroker) -> JSONResponse:
    """Park a running run on requests of its own with the framework's state; the agent's
    process may exit then. A worker claims it once they have all settled. Parked again
    on the requests of its last park, the run is returned as it is (parked still, being
    resumed by a worker, or ended since): a restarted agent changes nothing. A run a
    worker holds is parked only by that worker (`worker`): 409 `run_conflict` otherwise."""
    run_id = (await own_run(broker, caller, run_id, "parks runs")).id
    run = await broker.park(
        run_id, state=body.state, waiting_on=body.waiting_on, status=body.status, worker=body.worker
    )
    return out(caller, run)


@router.post("/runs/{run_id}/lease", response_model=Renewed, responses=_problems(400, 403, 404, 413, 422))
async def renew_lease(run_id: str, body: LeaseBody, caller: Caller, broker: TheBroker) -> dict[str, bool]:
    """Hold a claimed run longer; `renewed` is false once the worker holds it no more."""
    run_id = (await own_run(broker, caller, run_id, "holds runs")).id
    return {"renewed": await broker.renew_lease(run_id, worker=body.worker, lease=body.lease)}


@router.post("/runs/{run_id}/complete", response_model=RunModel, responses=_problems(400, 403, 404, 409, 413, 422))
async def complete_run(run_id: str, body: CompleteBody, caller: Caller, broker: TheBroker) -> JSONResponse:
    """End a running run as `completed` with its result. A run a worker holds is ended
    only by that worker (`worker`): 409 `run_conflict` otherwise, naming the worker
    (`/cancel` stops it whoever holds it)."""
    run_id = (await own_run(broker, caller, run_id, "finishes runs")).id
    return out(caller, await broker.complete_run(run_id, body.result, worker=body.worker))


@router.post("/runs/{run_id}/fail", response_model=RunModel, responses=_problems(400, 403, 404, 409, 413, 422))
async def fail_run(run_id: str, body: FailBody, caller: Caller, broker: TheBroker) -> JSONResponse:
    """End a running run as `failed` (`terminal_reason` "error") with the error. A run a
    worker holds is ended only by that worker (`worker`): 409 `run_conflict` otherwise."""
    run_id = (await own_run(broker, caller, run_id, "finishes runs")).id
    return out(caller, await broker.fail_run(run_id, body.error, worker=body.worker))


@router.post("/runs/{run_id}/cancel", response_model=RunModel, responses=_problems(400, 403, 404, 409, 413, 422))
async def cancel_run(run_id: str, caller: Caller, broker: TheBroker, body: CancelRunBody | None = None) -> JSONResponse:
    """Stop a run: it ends `cancelled` (`terminal_reason`, `cancelled_by_user` by default)
    and its pending requests are withdrawn. 409 `run_conflict` if it had ended."""
    run_id = (await visible_run(broker, caller, run_id)).id
    reason = body.reason if body is not None else "cancelled_by_user"
    if not await broker.cancel_run(run_id, reason, by=caller.name, via="api"):
        current = await broker.get_run(run_id)
        raise RunConflict(run_id, current.status.value, f"run {run_id!r} has ended ({current.status.value})")
    return out(caller, await broker.get_run(run_id))


@router.get("/runs/{run_id}/events", response_model=EventPage, responses=_problems(403, 404, 422))
async def run_events(
    run_id: str,
    caller: Caller,
    broker: TheBroker,
    after: Annotated[int, Query(ge=0, le=MAX_EVENT_ID)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
) -> JSONResponse:
    """A page of the run's events after `after`, oldest first; `last_event_id` is where
    the next begins. A page ends before `limit` where the requests its events carry pass
    8 MiB of JSON (`cut`)."""
    run_id = (await visible_run(broker, caller, run_id)).id
    accept = run_event_filter(caller, run_id)
    page = await broker.find_events(after=after, limit=limit, run=run_id)
    last = page[-1].id if page else after
    events = [event_to_dict(e) for e in page if accept(e)]
    return JSONResponse({"events": events, "last_event_id": last, "cut": page.cut})


@router.get(
    "/runs/{run_id}/events/stream",
    response_class=EventSourceResponse,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "server-sent events"},
        **_problems(400, 403, 404, 422, 429),
    },
)
async def run_stream(
    run_id: str,
    caller: Caller,
    broker: TheBroker,
    state: State,
    http: Request,
    after: Annotated[
        int | None, Query(ge=0, le=MAX_EVENT_ID, description="replay from here; Last-Event-ID wins")
    ] = None,
    last_event_id: Annotated[str | None, Header()] = None,
    last_event_id_query: Annotated[str | None, Query(alias="lastEventId", description=LAST_EVENT_ID_QUERY)] = None,
) -> EventSourceResponse:
    """The run's events as server-sent events, each `id` the event's id. While the run is
    parked on a person, its `input_requested` event reaches every connection: sent first
    to a new one (then the events from now on) and to a reconnect with `Last-Event-ID`
    from after it (then exactly the events missed); a reconnect from before it gets it in
    its place among the events missed. So a handler that acts on it may simply act again
    (it is idempotent) and a client that connects late still learns of the pause. That reminder
    carries the stream's position as its `id` (the Last-Event-ID given, or the newest
    event's for a new client), and the event's own id in its data, so the client's next
    reconnect neither repeats nor misses an event."""
    try:
        start = parse_event_id(last_event_id if last_event_id is not None else last_event_id_query)
    except ValueError as exc:
        raise ApiError("invalid_request", str(exc), status=UNREADABLE) from None
    start = after if start is None else start
    run_id = (await visible_run(broker, caller, run_id)).id
    # A new client: the events from now on (after the pause the run waits on, if any).
    begin = start if start is not None else await broker.last_event_id()
    accept = run_event_filter(caller, run_id)
    holder = state.auth.holder(http)

    async def generate() -> AsyncIterator[ServerSentEvent | bytes]:
        yield ServerSentEvent(comment="connected", retry=2000)
        pause = await patiently(lambda: _pending_pause(broker, run_id, begin), "a run's stream")
        if pause is not None:
            yield state.hub.frame_at(pause, begin)
        try:
            follow = state.hub.replay_then_follow(
                accept,
                begin,
                run_event_replay(broker, run_id),
                holder=holder,
                lost=state.auth.stream_lost(http, caller),
                audience=("run", caller.name, caller.kind, member_teams(caller), run_id),
            )
            async for event in follow:
                yield state.hub.frame(event)
        except Dropped as exc:
            yield ServerSentEvent(data=json.dumps({"reason": str(exc)}), event="dropped")

    return state.quotas.streams.response(caller.name, generate(), ping=state.keepalive)


async def _pending_pause(broker: LocalBroker, run_id: str, seen: int) -> Event | None:
    """The `input_requested` event of the run's current pause, if the run is still parked
    on a person and the client has seen that event already (else the replay sends it)."""
    run = await broker.get_run(run_id)
    if not run.status.waiting or run.ready:
        return None
    last: Event | None = None
    cursor = 0
    while True:
        page = await broker.find_events(after=cursor, until=seen, limit=500, run=run_id)
        last = next((e for e in reversed(page) if e.type == "input_requested"), last)
        if len(page) < 500 and not page.cut:
            return last
        cursor = page[-1].id
