"""The outbox over HTTP, under /api/v1: a request's deliveries (for whoever may read the
request, its requester included), the dead letters and their retry (for an admin), and
the routing (read by an admin with its secrets masked, replaced by an admin: kept in the
store, so it survives restarts and every node's delivery loop takes it up)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query
from fastapi.responses import JSONResponse
from prometheus_client import Counter
from pydantic import BaseModel, Field

from ..channels import Channel, ChannelContext, ChannelError, open_channels, routing_dropped, routing_left
from ..channels.delivery import DeliveryLoop
from ..channels.links import AnswerLinks
from ..cursors import CURSOR, issued, taken
from ..errors import InvalidRequest, NotFound, Unavailable
from ..outbox import Delivery, delivery_to_dict
from ..principals import TEAM_LEFT, Principal, can_read
from ..routing import Routing, RoutingError, masked, routing_from_dict
from .common import (
    ApiError,
    AppState,
    Caller,
    State,
    TheBroker,
    deliveries_filter,
    delivery_seen_by,
    may_see_delivery,
    problems_for,
)

__all__ = [
    "ROUTING_CHECK",
    "DeliveryModel",
    "DeliveryPage",
    "install_access",
    "install_metrics",
    "keep_teams",
    "kept_teams",
    "router",
    "use_routing",
]

log = logging.getLogger("interlock.server")

ROUTING_CHECK = 5.0
"""How often (seconds) a server's delivery loop looks for a routing changed in the store."""

router = APIRouter()

problems = problems_for()


class DeliveryModel(BaseModel):
    """One notice to one channel and address; `id` is its idempotency key."""

    id: str
    request_id: str
    kind: Literal["request", "settled", "reminder", "escalation"]
    event: str
    recipient: str
    channel: str
    address: str | None = Field(
        description="where it went (an email address, a Slack id, a webhook URL): shown to its recipient and "
        "an admin only, null to anyone else"
    )
    status: Literal["pending", "delivered", "dead", "skipped"]
    attempts: int
    due_at: str
    created_at: str
    delivered_at: str | None
    last_error: str | None = Field(
        description="why its last attempt failed, or, `skipped`, why it was not sent (its recipient is a person "
        "`interlock token revoke` cut off, or its request settled before a reminder or escalation fell due); to "
        "anyone but its recipient and an admin, without the address"
    )
    reference: str | None


class DeliveryPage(BaseModel):
    items: list[DeliveryModel]
    next_cursor: str | None = Field(None, description="the next page's `cursor`; null on the last page")
    next: str | None = Field(None, description="`next_cursor` again, under its earlier name", deprecated=True)


def install_metrics(state: AppState) -> None:
    """Count the delivery loop's outcomes in the server's /metrics, by channel: delivered,
    retry (failed, to be tried again), dead, skipped."""
    loop = state.delivery
    if loop is None:
        return
    outcomes = Counter(
        "interlock_deliveries",
        "Delivery attempts by channel and outcome",
        ["channel", "outcome"],
        registry=state.metrics.registry,
    )

    def observe(delivery: Delivery) -> None:
        outcome = "retry" if delivery.status == "pending" else delivery.status
        outcomes.labels(delivery.channel, outcome).inc()

    loop.on_outcome.append(observe)


def install_access(state: AppState) -> None:
    """Count a routing change that takes someone out of a team (one only the routing
    names, whose members are as it lists them: `interlock.channels.routing_left`) as a
    change of access on this node, as a `team_left` event is: their open streams end
    ("you left the team ops"; a reconnect shows only what they may see now) and their long
    polls check their caller again. The node where the routing is set does it at once;
    every other one as its delivery loop takes the change up from the store."""
    loop = state.delivery
    if loop is None:
        return

    async def changed(before: Routing, after: Routing) -> None:
        try:
            left = await routing_left(state.broker, before.teams, after.teams)
        except Exception as exc:  # anyone the routing no longer lists counts as gone, to be safe
            left = routing_dropped(before.teams, after.teams)
            if isinstance(exc, Unavailable):  # the store is away for now: no bug to trace
                log.warning(
                    "who a routing change took out of its teams could not be looked up (%s); the streams of "
                    "everyone it no longer lists end (%s), and they reconnect to what they may see now",
                    exc,
                    ", ".join(f"{team}: {', '.join(sorted(names))}" for team, names in sorted(left.items())),
                )
            else:
                log.exception("who a routing change took out of its teams could not be looked up")
        for team, names in sorted(left.items()):
            state.hub.end_streams(TEAM_LEFT, {"team": team, "principals": sorted(names)})

    loop.on_routing.append(changed)


def answer_links(state: AppState, routing: Routing) -> AnswerLinks | None:
    """What signs the one-click answer links of a routing's messages (None without an inbox_url)."""
    return AnswerLinks(state.links_secret, routing.inbox_url) if routing.inbox_url is not None else None


def _context(state: AppState, routing: Routing) -> ChannelContext:
    return ChannelContext(routing.inbox_url, answer_links(state, routing))


async def use_routing(
    state: AppState,
    routing: Routing,
    *,
    channels: Mapping[str, Channel] | None = None,
    start: bool = False,
    before: Mapping[str, Sequence[str]] | Literal["in use"] | None = "in use",
) -> None:
    """Deliver as `routing` says from now on: the server's delivery loop takes it, or one
    is made (and started with `start`). The teams it names with their members are kept in
    the store too, where their members can see their requests; a team naming someone who
    is no person here is left out of the store (and logged). Raises `ChannelError` when a
    channel cannot be made."""
    context = _context(state, routing)
    if channels is None:
        channels = open_channels(routing.channels, context)
    if before == "in use":  # the teams of the routing this one replaces (see `keep_teams`)
        before = state.delivery.routing.teams if state.delivery is not None else None
    if state.delivery is None:
        concurrency, per_channel = state.send_limits
        state.delivery = DeliveryLoop(
            state.broker.outbox,
            routing,
            channels=channels,
            context=context,
            routing_check=ROUTING_CHECK,
            concurrency=concurrency,
            per_channel=per_channel,
        )
        install_metrics(state)
        install_access(state)
        if start:
            state.delivery.start()
    else:
        await state.delivery.replace(routing, channels, context)
    await keep_teams(state, routing, before)


async def kept_teams(broker: TheBroker) -> Mapping[str, Sequence[str]] | None:
    """The teams of the routing kept in the store (None: none is, or it cannot be read)."""
    document = await broker.routing()
    if document is None:
        return None
    try:
        return routing_from_dict(document).teams
    except RoutingError:
        return None


async def keep_teams(state: AppState, routing: Routing, before: Mapping[str, Sequence[str]] | None) -> None:
    """Keep the routing's teams and their members in the store (see `use_routing`): a
    team the store does not keep yet is made with them; one it keeps is given those the
    routing lists that `before` (the teams of the routing taken before this one; None:
    none was) did not. So someone taken out with `interlock team rm` stays out when a
    server starts again with the same routing, or takes a routing that still lists them;
    only a routing that newly lists them adds them back."""
    for team, members in routing.teams.items():
        kept = await state.broker.team_members(team)
        listed_before = () if before is None else before.get(team, ())
        new = list(members) if kept is None else [m for m in members if m not in listed_before and m not in kept]
        if kept is not None and not new:
            continue
        try:
            await state.broker.add_team_members(team, new)
        except InvalidRequest as exc:
            log.warning("the routing's team %r is not kept as a team here: %s", team, exc)


def shown_to(caller: Principal, delivery: Delivery) -> dict[str, Any]:
    """A delivery's JSON as `caller` may read it (`delivery_seen_by`)."""
    return delivery_to_dict(delivery_seen_by(caller, delivery))


def _admin(caller: Principal, what: str) -> None:
    if caller.kind != "admin":
        raise ApiError("forbidden", f"only an admin may {what}")


def _loop(state: AppState) -> Any:
    if state.delivery is None:
        raise ApiError("not_found", "no routing is configured on this server (start it with --routing FILE)")
    return state.delivery


@router.get(
    "/requests/{request_id}/deliveries", response_model=DeliveryPage, responses=problems(404), tags=["deliveries"]
)
async def request_deliveries(request_id: str, caller: Caller, broker: TheBroker) -> JSONResponse:
    """How the people concerned were told about a request: each delivery, its recipient,
    channel and state (pending, delivered, dead, skipped), its attempts and last error
    (for one skipped, why it was not sent)."""
    try:
        request = await broker.get(request_id)
    except NotFound as exc:
        raise ApiError("not_found", str(exc)) from None
    if not can_read(caller, request):
        raise ApiError("forbidden", "this request is neither to you nor from you")
    found = await broker.list_deliveries(request_id=request_id, limit=1000)
    return JSONResponse({"items": [shown_to(caller, d) for d in found]})


@router.get("/deliveries", response_model=DeliveryPage, responses=problems(422), tags=["deliveries"])
async def list_deliveries(
    caller: Caller,
    broker: TheBroker,
    status: Literal["pending", "delivered", "dead", "skipped"] | None = None,
    cursor: Annotated[str | None, Query(description=CURSOR)] = None,
    after: Annotated[str | None, Query(description="`cursor` under its earlier name", deprecated=True)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    order: Annotated[
        Literal["id", "newest"],
        Query(description="`newest`: the dead letters newest first (by when each became one), with `status=dead`"),
    ] = "id",
) -> JSONResponse:
    """The deliveries to the caller and those of the requests to their teams (every one,
    for an admin), `status=dead` for the dead letters, a page at a time (pass `next_cursor` as `cursor`): by id, or with
    `order=newest` the dead letters newest first. `after` and `next` are `cursor` and
    `next_cursor` under their earlier names, still taken and sent."""
    if cursor is not None and after is not None and cursor != after:
        raise ApiError("invalid_request", "cursor and after name the same thing: give one (cursor)")
    cursor = cursor if cursor is not None else after
    seen = deliveries_filter(caller)
    if order == "newest":
        if status != "dead":
            raise ApiError("invalid_request", "order=newest lists the dead letters: give status=dead with it")
        page = await broker.dead_letters(after=taken("dead_letters", cursor), limit=limit, **seen)
        return _page(caller, page.items, issued("dead_letters", page.next_cursor))
    found = await broker.list_deliveries(status=status, after=taken("deliveries", cursor), limit=limit, **seen)
    return _page(caller, found, issued("deliveries", found[-1].id if len(found) == limit else None))


def _page(caller: Principal, found: Sequence[Delivery], next_cursor: str | None) -> JSONResponse:
    items = [shown_to(caller, d) for d in found]
    return JSONResponse({"items": items, "next_cursor": next_cursor, "next": next_cursor})


@router.get("/deliveries/{delivery_id}", response_model=DeliveryModel, responses=problems(404), tags=["deliveries"])
async def get_delivery(delivery_id: str, caller: Caller, broker: TheBroker) -> JSONResponse:
    """One delivery: for its recipient, whoever made its request, a member of the team it
    is addressed to, or an admin."""
    known = await broker.get_delivery(delivery_id)
    if not await may_see_delivery(broker, caller, known):
        raise ApiError("forbidden", "this delivery is neither to you nor about a request of yours or your team's")
    return JSONResponse(shown_to(caller, known))


@router.post(
    "/deliveries/{delivery_id}/retry", response_model=DeliveryModel, responses=problems(404, 409), tags=["deliveries"]
)
async def retry_delivery(delivery_id: str, caller: Caller, broker: TheBroker, state: State) -> JSONResponse:
    """Send a dead letter again: pending, due now, its attempts counted afresh. For its
    recipient, whoever made its request, a member of the team it is addressed to (who may
    answer it), or an admin."""
    known = await broker.get_delivery(delivery_id)
    if not await may_see_delivery(broker, caller, known):
        raise ApiError("forbidden", "this delivery is neither to you nor about a request of yours or your team's")
    again = await broker.retry_delivery(delivery_id)  # AlreadySettled (409) for one that is no dead letter
    if state.delivery is not None:
        state.delivery.wake()
    return JSONResponse(shown_to(caller, again))


@router.get("/routing", response_model=dict[str, Any], responses=problems(404), tags=["deliveries"])
async def get_routing(caller: Caller, state: State) -> JSONResponse:
    """The routing in use (as kept in the store), with the channels' secrets masked."""
    _admin(caller, "read the routing")
    document = await state.broker.routing()
    return JSONResponse(document if document is not None else masked(_loop(state).routing.source))


@router.put("/routing", response_model=dict[str, Any], responses=problems(400, 413, 422), tags=["deliveries"])
async def put_routing(caller: Caller, state: State, document: Annotated[dict[str, Any], Body()]) -> JSONResponse:
    """Replace the routing (the routing file's document, as JSON), checked as the file
    is: a document that does not check out is refused with 422 and changes nothing. It is
    kept in the store, so it survives restarts (an unchanged routing file does not undo
    it) and the other nodes' delivery loops take it up within seconds; a server that ran
    without one starts delivering. A secret given as `***`, as `GET /routing` shows it,
    keeps the secret that channel has now; one with no such secret behind it is refused."""
    _admin(caller, "change the routing")
    try:
        routing = routing_from_dict(await state.broker.with_secrets_kept(document))
        channels = open_channels(routing.channels, _context(state, routing))  # every channel can be made
    except (RoutingError, ChannelError) as exc:
        raise ApiError("invalid_request", str(exc)) from None
    await state.broker.set_routing(routing.source)
    await use_routing(state, routing, channels=channels, start=True)
    return JSONResponse(masked(routing.source))
