"""What the server's API and web inbox share: the app's state (its broker, auth, hub,
quotas, metrics), problem responses, event ids from clients, who may see an event, and
an event's JSON. Both route modules import this one, and neither imports the other."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from email.utils import parseaddr
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from pydantic import BaseModel

from .. import wire
from ..broker import MAX_EVENT_ID, LocalBroker, Page
from ..channels.delivery import DeliveryLoop
from ..errors import InvalidRequest, NotFound, Unavailable
from ..followups import FOLLOWUP_EVENTS
from ..grant_tokens import GrantSigner
from ..model import RUN_EVENTS, Event, Run, Status, check_text, request_to_dict
from ..model import Request as HumanRequest
from ..outbox import Delivery
from ..principals import Principal, can_claim, can_read
from .auth import Auth
from .quotas import SIGNIN_MAIL_PER_ADDRESS, SIGNIN_MAIL_PER_CLIENT, Quota, RateLimiter, StreamSlots
from .stream import ACCESS_EVENTS, Hub

__all__ = [
    "LAST_EVENT_ID_QUERY",
    "NOVO_REFUSAL",
    "PROBLEM_CODES",
    "UNREADABLE",
    "ApiError",
    "AppState",
    "Caller",
    "Metrics",
    "Quotas",
    "State",
    "Surface",
    "TheBroker",
    "Values",
    "app_state",
    "can_see",
    "check_filters",
    "describe",
    "event_to_dict",
    "inbox_filter",
    "deliveries_filter",
    "known_query_only",
    "include",
    "unless",
    "delivery_seen_by",
    "may_resend",
    "may_see_delivery",
    "may_see_run",
    "may_withdraw",
    "member_teams",
    "named_run",
    "own_run_named",
    "requests_of_run",
    "run_id_of",
    "scoped_run_id",
    "parse_event_id",
    "run_event_filter",
    "run_event_replay",
    "runs_filter",
    "seen_by",
    "seen_event_replay",
    "problem",
    "problem_response",
    "problems_for",
    "rate_limited",
    "read_form",
    "set_cookie",
    "surface_of",
]


UNREADABLE = 400
"""The status of `invalid_request` for what the server cannot read at all: a body that is
not JSON, a Last-Event-ID that is no event id, a payload that does not parse (the table's
422 is for what reads but does not fit)."""

NOVO_REFUSAL = 400
"""The status of `invalid_answer` on Novo's routes (`inputResponses`, /interactions), as
Novo's clients expect it (the table's is 422)."""

_TITLES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 408: "Request Timeout"}
_TITLES |= {405: "Method Not Allowed", 409: "Conflict", 413: "Content Too Large", 422: "Unprocessable Content"}
_TITLES |= {415: "Unsupported Media Type", 429: "Too Many Requests", 503: "Service Unavailable"}


def problem(code: str, detail: str, *, status: int | None = None, **extra: Any) -> JSONResponse:
    """Problem details (RFC 9457) with a code of the wire table, at its status there
    unless `status` says otherwise (what an exception or the framework says: `ApiError`
    holds the routes to the statuses the table allows)."""
    default = wire.status_of(code)  # a code of the table, or ValueError
    status = default if status is None else status
    body = {"type": "about:blank", "title": _TITLES.get(status, "Error"), "status": status, "code": code}
    body |= {"detail": detail, **{k: v for k, v in extra.items() if v is not None}}
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(body, status_code=status, media_type="application/problem+json", headers=headers)


def _status(code: str, status: int | None) -> int:
    if status is None:
        return wire.status_of(code)
    wire.meaning(code, status)  # a status the table allows this code, or ValueError
    return status


LAST_EVENT_ID_QUERY = (
    "`Last-Event-ID` as a query parameter, for a client that cannot send the header (an "
    "EventSource polyfill reconnecting); the header wins"
)
"""The description of a stream's `lastEventId` query parameter."""


def parse_event_id(value: str | None) -> int | None:
    """An event id given by a client (`Last-Event-ID`): None when absent; a ValueError
    unless it is plain ASCII digits within a store's 64-bit range."""
    if not value:
        return None
    if not (value.isascii() and value.isdigit()) or int(value) > MAX_EVENT_ID:
        raise ValueError(f"Last-Event-ID must be an event id: ASCII digits, at most {MAX_EVENT_ID}")
    return int(value)


PROBLEM_CODES: Mapping[int, tuple[str, ...]] = {
    400: ("invalid_request",),
    401: ("unauthorized",),
    403: ("forbidden",),
    404: ("not_found",),
    408: ("pending",),
    409: ("already_settled",),
    413: ("too_large",),
    415: ("unsupported_media_type",),
    422: ("invalid_request",),
    429: ("rate_limited",),
    503: ("unavailable",),
}
"""The codes each status carries on most routes; a router names those that differ."""

Responses = dict[int | str, dict[str, Any]]

PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}


def problem_response(description: str) -> dict[str, Any]:
    """A route's `responses=` entry for a problem it answers with, `Problem` by reference:
    given as a model, FastAPI would build a field of it for each status of each route, in
    every app, on its first request (about 140 of the 180 fields an app built, half of its
    first request's 45 ms). The server's OpenAPI document publishes `Problem` once."""
    return {"description": description, "content": {"application/problem+json": {"schema": dict(PROBLEM_REF)}}}


def problems_for(codes: Mapping[int, Sequence[str]] | None = None) -> Callable[..., Responses]:
    """A router's `problems(*statuses)`: the `responses=` of a route for the problems it can
    answer with, each status described by the codes the router sends with it
    (`PROBLEM_CODES`, with `codes` instead where given) from the wire table."""
    table = {**PROBLEM_CODES, **(codes or {})}
    for status, named in table.items():
        describe(status, named)  # every code in the wire table, at a status it allows: or ValueError now

    def problems(*statuses: int) -> Responses:
        out: Responses = {}
        for status in statuses:
            out[status] = problem_response(describe(status, table[status]))
            if status in (429, 503):
                out[status]["headers"] = {
                    "Retry-After": {"description": "seconds to wait", "schema": {"type": "integer", "minimum": 1}}
                }
        return out

    return problems


def describe(status: int, codes: Sequence[str]) -> str:
    """What a status means on a route that sends these codes with it, from the wire table."""
    return "; ".join(f"`{code}`: {wire.meaning(code, status)}" for code in codes)


class ApiError(Exception):
    """A problem to answer with: a code of the wire table (`interlock.wire`), at its status
    there unless `status` names another the table allows it (a route's own, named where it
    is raised: `UNREADABLE`, `NOVO_REFUSAL`)."""

    def __init__(self, code: str, detail: str, *, status: int | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail, self.extra = _status(code, status), code, detail, extra


def event_to_dict(event: Event) -> dict[str, Any]:
    return {
        "id": event.id,
        "type": event.type,
        "at": event.at.isoformat(),
        "request_id": event.request_id,
        "request": request_to_dict(event.request) if event.request is not None else None,
        "data": dict(event.data),
    }


def can_see(principal: Principal, event: Event) -> bool:
    if event.request is not None:
        return can_read(principal, event.request)
    if event.type in ACCESS_EVENTS:  # revocations and sign-outs: nobody's business but the operator's
        return principal.kind == "admin"
    to = event.data.get("to")
    # An update to a team is its members' (a person's teams), as the event pages show it.
    member = principal.kind == "human" and isinstance(to, str) and to in principal.teams
    return principal.kind == "admin" or member or principal.name in (to, event.data.get("by"))


def member_teams(principal: Principal) -> tuple[str, ...]:
    """The teams whose requests `principal` sees: a person's own teams (an agent sees none)."""
    return tuple(sorted(principal.teams)) if principal.kind == "human" else ()


def seen_by(principal: Principal) -> dict[str, Any]:
    """The keywords (`involving`, `teams`) of `find_events` and `claims` that keep to what
    `principal` may see, read from the store's indexes: what is to or from them or to their
    teams (everything, for an admin)."""
    return {"involving": None if principal.kind == "admin" else principal.name, "teams": member_teams(principal)}


def runs_filter(principal: Principal) -> dict[str, Any]:
    """The keywords of `Broker.list_runs` for the runs `principal` may see (`may_see_run`):
    an agent's own; a person's, their own agents' and those asking them or a team of
    theirs; every run for an admin."""
    if principal.kind == "admin":
        return {}
    if principal.kind == "agent":
        return {"requester": principal.name}
    return {"involving": principal.name, "teams": member_teams(principal)}


def inbox_filter(principal: Principal) -> dict[str, Any]:
    """The keywords of `Broker.list` for a principal's inbox: the requests to them and to
    their teams (none for an admin: everyone's)."""
    if principal.kind == "admin":
        return {}
    return {"recipient": principal.name, "teams": list(member_teams(principal))}


def deliveries_filter(principal: Principal) -> dict[str, Any]:
    """The keywords of `LocalBroker.list_deliveries` and `dead_letters` for the deliveries
    `principal` lists: those to them and those of the requests to their teams, which they
    may read and answer (none for an admin: everyone's)."""
    if principal.kind == "admin":
        return {}
    return {"recipient": principal.name, "teams": member_teams(principal)}


async def requests_of_run(
    broker: LocalBroker, principal: Principal, run_id: str, *, after: str | None = None, limit: int = 50
) -> Page:
    """The requests of a run that `principal` may read (`can_read`), newest first, a page
    at a time (`after`: a page's `next_cursor`): those to them and to their teams, and
    those they made; every one for an admin. Two keyset lists merged by id, each cut
    where the other may not have reached: a page costs two pages' reads."""
    if principal.kind == "admin":
        return await broker.list(run=run_id, after=after, limit=limit)
    pages = [
        await broker.list(run=run_id, **inbox_filter(principal), after=after, limit=limit),
        await broker.list(run=run_id, requester=principal.name, after=after, limit=limit),
    ]
    # A list with more to come has read down to its last id only: nothing past it is shown.
    ends = [page.items[-1].id for page in pages if page.next_cursor is not None and page.items]
    floor = max(ends, default=None)
    merged = sorted({r.id: r for page in pages for r in page.items}.values(), key=lambda r: r.id, reverse=True)
    kept = [r for r in merged if floor is None or r.id >= floor]
    items = kept[:limit]
    more = floor is not None or len(kept) > limit
    return Page(items, items[-1].id if more and items else None)


async def may_see_run(broker: LocalBroker, principal: Principal, run: Run) -> bool:
    """Who may see a run (and so follow and cancel it, and send it messages): who started
    it, that agent's owner, and the people its requests go to, themselves or through a
    team of theirs (the operator of a server without auth too). Among those its requests
    go to, only people: an agent asked in another agent's run (`--open-inboxes`) reads
    that request, and sees only the runs it started itself."""
    if principal.kind == "admin" or principal.name == run.requester:
        return True
    if principal.kind != "human":
        return False
    if run.requester is not None:
        starter = await broker.get_principal(run.requester)
        if starter is not None and starter.owner == principal.name:
            return True
    return bool((await broker.list(run=run.id, **inbox_filter(principal), limit=1)).items)


def scoped_run_id(agent: str, run_id: str) -> str:
    """The id under which a server keeps a run an agent starts with an id of its own
    choosing: the agent's name, a colon, that id (an id that reads so already is kept, so
    an agent may give back the id it read). A principal's name holds no colon, so each
    agent's ids are a namespace of their own: two agents' `thread-1` are two runs, and no
    agent can take or probe an id another one will use."""
    prefix = f"{agent}:"
    return run_id if run_id.startswith(prefix) else prefix + run_id


async def run_id_of(broker: LocalBroker, principal: Principal, run_id: str) -> str:
    """The id of the run `principal` means by `run_id`: for an agent, its own run of that
    name (`own_run_named`), if it has one; else `run_id` as given."""
    own = await own_run_named(broker, principal, run_id)
    return run_id if own is None else own.id


async def own_run_named(broker: LocalBroker, principal: Principal, run_id: str) -> Run | None:
    """An agent's own run that it names `run_id`: the run of that id, if it is the
    agent's (an id the server made, or one from before ids were scoped), else the run it
    started with `run_id` as an id of its choosing (kept under `scoped_run_id`). None
    for anyone else, and when the agent has no run of that name."""
    if principal.kind != "agent":
        return None
    scoped = scoped_run_id(principal.name, run_id)
    for candidate in dict.fromkeys((run_id, scoped)):
        try:
            run = await broker.get_run(candidate)
        except NotFound:
            continue
        except InvalidRequest:
            if candidate == run_id:
                raise  # an id no run can have: refused as such
            continue  # too long once scoped: no run of the agent's has it
        if run.requester == principal.name:
            return run
    return None


async def named_run(broker: LocalBroker, principal: Principal, run_id: str) -> Run:
    """The run `principal` names `run_id` (an agent: its own run of that name first), if
    they may see it. Raises `NotFound`, worded as for an id that no run has, for a run
    they may not see: run ids may be chosen by their agents, so a refusal that differed
    would tell anyone whether another agent has a run of an id they guessed."""
    run = await own_run_named(broker, principal, run_id)
    if run is not None:
        return run
    try:
        run = await broker.get_run(run_id)
    except NotFound:
        raise _no_run(principal, run_id) from None
    if not await may_see_run(broker, principal, run):
        raise _no_run(principal, run_id)
    return run


def _no_run(principal: Principal, run_id: str) -> NotFound:
    """No run `principal` may see has `run_id`, worded alike whether one does or not. To a
    person naming a run by the id its agent chose, how the server names it."""
    hint = ""
    if principal.kind != "agent" and ":" not in run_id:
        hint = (
            f" (a run an agent started is named with that agent's name first, as 'AGENT:{run_id}' for the id "
            f"{run_id!r} it chose; the list of runs gives each one's id)"
        )
    return NotFound(run_id, message=f"no run with id {run_id!r}{hint}")


async def may_withdraw(broker: LocalBroker, caller: Principal, run_id: str, followup_id: str) -> bool:
    """Whether `caller` may withdraw a message held for a run they may see: the one they
    sent (an admin: any). A message not held (any more) is the broker's to refuse (404)."""
    if caller.kind == "admin":
        return True
    held = next((f for f in await broker.list_followups(run_id) if f.id == followup_id), None)
    return held is None or held.by == caller.name


async def may_see_delivery(broker: LocalBroker, principal: Principal, delivery: Delivery) -> bool:
    """Whether `principal` may see a delivery and send it again (see `may_resend`)."""
    if principal.kind == "admin" or principal.name == delivery.recipient:
        return True
    try:
        request = await broker.get(delivery.request_id)
    except NotFound:
        return False
    return may_resend(principal, request, delivery)


def may_resend(principal: Principal, request: HumanRequest | None, delivery: Delivery) -> bool:
    """Who may see a delivery and send it again: its recipient, whoever made its request
    (`request`, None if it is gone), a member of the team the request is addressed to (who
    may answer it as its recipient does; not its escalations, which go over the team to
    someone else), and an admin."""
    if principal.kind == "admin" or principal.name == delivery.recipient:
        return True
    if request is None:
        return False
    return request.requester == principal.name or (can_claim(principal, request) and delivery.kind != "escalation")


def delivery_seen_by(principal: Principal, delivery: Delivery) -> Delivery:
    """A delivery as `principal` may read it: where it went (a person's email address,
    Slack id, or a webhook URL that may carry its own secret) is its recipient's and an
    admin's to see, not the asking agent's or a teammate's; to them it has no address, and
    its last error names none either (a mail server's refusal names the address)."""
    if principal.kind == "admin" or principal.name == delivery.recipient:
        return delivery
    error, address = delivery.last_error, delivery.address
    if error and address:
        # The address as given, and the mailbox of an email address given with a name
        # ("Alice <alice@example.com>"), which a mail server names alone.
        mailbox = parseaddr(address)[1] if "<" in address else ""
        for text in (address, mailbox) if "@" in mailbox else (address,):
            error = re.sub(re.escape(text), "(their address)", error, flags=re.IGNORECASE)
    return replace(delivery, address=None, last_error=error)


def _event_replay(broker: LocalBroker, **filters: Any) -> Callable[[int], AsyncIterator[Event]]:
    """A stream's replay of the stored events matching `filters` (`find_events`'s) after a
    cursor, a page at a time from their indexes (`Hub.replay_then_follow`'s `replay`)."""

    async def replay(cursor: int) -> AsyncIterator[Event]:
        while True:
            page = await broker.find_events(after=cursor, limit=500, **filters)
            for event in page:
                yield event
            if len(page) < 500 and not page.cut:  # caught up (a page cut by size is not)
                return
            cursor = page[-1].id

    return replay


def run_event_replay(broker: LocalBroker, run_id: str) -> Callable[[int], AsyncIterator[Event]]:
    """A stream's replay of a run's stored events after a cursor (`_event_replay`): the
    API's run stream and the web inbox's run page read them alike."""
    return _event_replay(broker, run=run_id)


def check_filters(broker: LocalBroker, **filters: str | None) -> None:
    """Refuse a stream's filter that no store could hold (a NUL, a name too long) with 422
    `invalid_request`, before the stream's 200 goes out: its reads come after it, where a
    refusal could only end the stream."""
    for name, value in filters.items():
        check_text(value, name, broker.limits.max_name_length)


def seen_event_replay(
    broker: LocalBroker,
    principal: Principal,
    *,
    request: str | None = None,
    session: str | None = None,
    run: str | None = None,
) -> Callable[[int], AsyncIterator[Event]]:
    """A stream's replay of the stored events after a cursor that `principal` may see (of
    one `request`, `session` or `run`, when given), a page at a time from their indexes
    (`Hub.replay_then_follow`'s `replay`): those to or from them and to their teams, not
    the whole log (every event, for an admin). The API's event stream and the web inbox's
    stream read them alike."""
    return _event_replay(broker, request=request, session=session, run=run, **seen_by(principal))


def run_event_filter(principal: Principal, run_id: str) -> Callable[[Event], bool]:
    """A run's events as one who may see the run sees them: the run's own (its held
    messages' too), and those of its requests (and updates) that are theirs to read."""

    def accept(event: Event) -> bool:
        if event.request is not None:
            return event.request.origin.run == run_id and can_read(principal, event.request)
        data = event.data
        if data.get("run") != run_id:
            return False
        return (
            event.type in RUN_EVENTS
            or event.type in FOLLOWUP_EVENTS  # a run's held messages are for all who may see the run
            or principal.kind == "admin"
            or principal.name in (data.get("to"), data.get("by"))
        )

    return accept


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.pending = Gauge("interlock_pending_requests", "Requests waiting for a person", registry=self.registry)
        self.created = Counter("interlock_requests_created", "Requests created", registry=self.registry)
        self.settled = Counter(
            "interlock_requests_settled", "Requests settled, by outcome", ["outcome"], registry=self.registry
        )
        self.claims_waiting = Gauge(
            "interlock_claims_waiting",
            "Workers waiting on this server for a run to resume (none: no worker serves here now)",
            registry=self.registry,
        )
        self.time_to_answer = Histogram(
            "interlock_time_to_answer_seconds",
            "From creation to answer",
            buckets=(0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 24 * 3600, float("inf")),
            registry=self.registry,
        )

    def observe(self, event: Event) -> None:
        request = event.request
        if request is None:
            return
        if event.type == "created":
            self.created.inc()
            self.pending.inc()
        elif event.type in {s.value for s in Status if s is not Status.PENDING}:
            self.settled.labels(event.type).inc()
            self.pending.dec()
            if event.type == "answered" and request.response is not None:
                self.time_to_answer.observe((request.response.at - request.created_at).total_seconds())


class Quotas:
    def __init__(self, rate: Quota | None, streams: int | None) -> None:
        self.creates = RateLimiter(rate) if rate is not None else None
        self.updates = RateLimiter(rate) if rate is not None else None
        self.streams = StreamSlots(streams)
        self.signin_mail = RateLimiter(SIGNIN_MAIL_PER_ADDRESS)  # by address, known or not
        self.signin_mail_clients = RateLimiter(SIGNIN_MAIL_PER_CLIENT)  # by client address


T = TypeVar("T")

log = logging.getLogger("interlock.server")

REFUSALS_APART = 60.0
"""Seconds without a call answered 503 after which the next one is logged as a warning
again (the start of another outage), not at debug level."""


class AppState:
    quotas: Quotas
    templates: Jinja2Templates  # the web inbox's, set when it is installed
    grant_signer: GrantSigner  # signs the issued grants' tokens, set by the app
    open_inboxes: bool = False  # anyone signed in may ask anyone (an open organisation)
    delivery: DeliveryLoop | None = None  # the outbox's delivery loop, when a routing is configured
    send_limits: tuple[int, int] = (16, 4)  # its sends at a time and one channel's share (`create_app`)
    links_secret: str  # signs the one-click answer links in messages, set by the app
    refused: str | None = None  # why the app could not start, for its operator (see StartupRefused)

    def __init__(
        self, broker: LocalBroker, auth: Auth, queue_size: int, keepalive: float, *, open_recipients: bool = False
    ) -> None:
        self.broker = broker
        self.auth = auth
        self.open_recipients = open_recipients
        # People and agents are never deleted, so a name found stays valid; a team may be
        # deleted on any node, so it is looked up each time it is asked.
        self.known_recipients: set[str] = set()
        self.hub = Hub(broker, queue_size=queue_size, encode=lambda event: json.dumps(event_to_dict(event)))
        auth.access_changes = lambda: self.hub.access_changes
        auth.routing_teams = lambda: self.delivery.routing.teams if self.delivery is not None else {}
        self.metrics = Metrics()
        self.metrics.claims_waiting.set_function(lambda: broker.claims_waiting)
        self.hub.on_event.append(self.metrics.observe)
        self.keepalive = keepalive
        self.tasks: set[asyncio.Task[None]] = set()  # work no response waits for (mailing a sign-in link)
        self.stopping = asyncio.Event()  # set as the server begins to stop: its long polls end
        self.loop: asyncio.AbstractEventLoop | None = None  # the app's, once it runs
        self.last_refusal = -math.inf  # when a call was last answered 503 (`refused_for_now`)

    def refused_for_now(self, method: str, path: str, why: object) -> None:
        """Log a call answered 503 (`Unavailable`): a warning for the first of an outage,
        debug lines for the next while they come less than `REFUSALS_APART` seconds apart,
        so a store away for an hour, with agents polling, is one warning and not one a call
        (the line that the store works again comes from the loops that met it)."""
        now = time.monotonic()
        if now - self.last_refusal > REFUSALS_APART:
            log.warning(
                "%s %s answered 503: %s (the next calls answered 503 are logged at debug level while they come "
                "less than %g s apart)",
                method,
                path,
                why,
                REFUSALS_APART,
            )
        else:
            log.debug("%s %s answered 503: %s", method, path, why)
        self.last_refusal = now

    def stop_waits(self) -> None:
        """The server begins to stop: end its long polls now (a wait answers that the
        request is still pending, a worker's claim that no run is ready), so that their
        clients go on with a server that answers rather than being cut, with a 500, when
        the shutdown's grace runs out. Safe from a signal handler."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.stopping.set)

    def refuse_if_stopping(self) -> None:
        """Refuse a new long poll once the server has begun to stop: 503 `unavailable`, so
        that its client waits a moment, or asks another node, rather than polling a server
        that answers each poll at once as it stops (a poll open as it began gets its 408)."""
        if self.stopping.is_set():
            raise Unavailable(
                "the interlock server is stopping: ask another node, or this one once it is back", retry_after=1
            )

    async def unless_stopping(self, work: Awaitable[T]) -> T | None:
        """`work`'s result; or None, `work` cancelled, once the server begins to stop."""
        return await unless(work, self.stopping.wait())

    async def held(
        self, http: Request, work: Awaitable[T], *, still: Callable[[Principal], bool] | None = None
    ) -> T | None:
        """`work`'s result for a long poll made with `http`'s credential (None once the
        server begins to stop, as `unless_stopping`). The poll ends at once, `work`
        cancelled, with 401 when its token is revoked meanwhile (on any node: the hub
        follows the event log), and with 403 when the caller as they are now no longer
        passes `still` (a team left meanwhile, in the store or the routing); it is checked
        once more when `work` is done, so its result goes only to a credential that is
        live now and, with `still`, that the caller still passes.
        "Now" is as far as this node knows: the credential is looked up in the store only
        if a change of access reached this node since the call found its caller (a
        revocation made on another node a moment before counts once this node's hub has
        it, as for the event streams); most long polls look nothing up."""
        holder = self.auth.holder(http)
        if holder is None:  # without auth: the operator
            return await self.unless_stopping(work)
        doing = asyncio.ensure_future(self.unless_stopping(work))
        try:
            while not doing.done():
                watch = self.hub.subscribe(_nothing, holder)  # ended by a revocation, a sign-out, a team left
                ended = asyncio.ensure_future(watch.next())
                try:
                    # Once subscribed, a change of access the hub handled since the caller
                    # was found (none, mostly: then nothing to look up) is looked up instead.
                    now = self.auth.found_unchanged(http) or await self.auth.caller_now(http)
                    if now is None or (still is not None and not still(now)):
                        break
                    await asyncio.wait((doing, ended), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    ended.cancel()
                    self.hub.unsubscribe(watch)
        finally:
            if not doing.done():
                doing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await doing
        now = self.auth.found_unchanged(http) or await self.auth.caller_now(http)
        if now is None:
            raise ApiError("unauthorized", "the token was revoked")
        if still is not None and not still(now):
            raise ApiError("forbidden", "this request is neither to you nor from you (any more)")
        return doing.result()


def _nothing(event: Event) -> bool:
    """The events a long poll's watch on its credential passes on: none (the hub ends it)."""
    return False


_INCLUSIONS: dict[tuple[Any, ...], tuple[object, Any]] = {}


def include(app: FastAPI, router: APIRouter, *, prefix: str = "", dependencies: Sequence[Any] = ()) -> None:
    """Serve `router`'s routes in `app`, as `app.include_router(router, prefix=...,
    dependencies=...)` does, with one inclusion shared by every app of the process.

    FastAPI works out an included route's parameters, body and responses the first time a
    request is matched against its router, once for each inclusion: each app made in a
    process (a test suite makes thousands) paid about 3 ms a route again. The inclusion is
    made here once, into a router with the app's own router-wide settings (its `responses`
    and its operation ids), and each app serves that same inclusion. Two things of
    `include_router` it does not do, neither used by interlock's routers: an app's
    `dependency_overrides` do not reach the routes, and a router's own startup and
    shutdown handlers are not added to the app."""
    parent = app.router
    ids = (id(router), prefix, tuple(d.dependency for d in dependencies), id(parent.responses))
    key = (*ids, parent.generate_unique_id_function)
    made = _INCLUSIONS.get(key)
    if made is None:
        holder = APIRouter(responses=parent.responses, generate_unique_id_function=parent.generate_unique_id_function)
        holder.include_router(router, prefix=prefix, dependencies=dependencies)
        # (what the key names by id is kept with the inclusion, so that no other object takes its id)
        made = _INCLUSIONS[key] = ((router, parent.responses), holder.routes[-1])
    parent.routes.append(made[1])


async def unless(work: Awaitable[T], ending: Awaitable[object]) -> T | None:
    """`work`'s result; or None, `work` cancelled (and waited out), if `ending` comes first
    (the server begins to stop, the client hangs up)."""
    doing = asyncio.ensure_future(work)
    ended = asyncio.ensure_future(ending)
    try:
        await asyncio.wait((doing, ended), return_when=asyncio.FIRST_COMPLETED)
    finally:
        ended.cancel()
        if not doing.done():
            doing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await doing
    return None if doing.cancelled() else doing.result()


def app_state(request: Request) -> AppState:
    """The app's state (routes take it as the dependency `State`)."""
    state: AppState = request.app.state.interlock
    return state


# The dependencies are coroutines: FastAPI runs a plain function dependency in a worker
# thread, a thread hop per dependency per call (most of a cycle's latency on loopback).
async def _state_dependency(request: Request) -> AppState:
    return app_state(request)


async def _broker_dependency(request: Request) -> LocalBroker:
    return app_state(request).broker


async def _caller_dependency(request: Request) -> Principal:
    return await app_state(request).auth.api_principal(request)


async def _surface_dependency(request: Request) -> str:
    return surface_of(request)


def surface_of(request: Request) -> str:
    """What a call came through, recorded as an answer's or a cancel's `via`: "api", or the
    surface of the server's own process that called the API in process (`/mcp`'s tools:
    "mcp", named in the call's scope, `wire.SURFACE`, which no client can set)."""
    surface = request.scope.get(wire.SURFACE)
    return surface if isinstance(surface, str) else "api"


State = Annotated[AppState, Depends(_state_dependency)]
TheBroker = Annotated[LocalBroker, Depends(_broker_dependency)]
Caller = Annotated[Principal, Depends(_caller_dependency)]
Surface = Annotated[str, Depends(_surface_dependency)]


async def known_query_only(request: Request) -> None:
    """A router dependency that refuses (422) a query parameter its route does not take,
    as the body's unknown fields are: a misspelt filter (`?stauts=pending`) would otherwise
    be dropped, and the whole list come back as if it had been asked for."""
    route = request.scope.get("route")
    if request.query_params and isinstance(route, APIRoute):
        takes = _query_names(route)
        unknown = sorted(request.query_params.keys() - takes)
        if unknown:
            await _caller_dependency(request)  # who calls first, as everywhere: a 401 before this 422
            names = ", ".join(repr(name) for name in unknown)
            some = f"takes {', '.join(sorted(takes))}" if takes else "takes none"
            raise ApiError("invalid_request", f"unknown query parameter {names}: this route {some}")


def _query_names(route: APIRoute) -> frozenset[str]:
    """The names of the query parameters `route` takes, its dependencies' included, and each
    field of a model of query parameters (`ListParams`) by its alias."""
    names: set[str] = set()
    pending = [route.dependant]
    while pending:
        dependant = pending.pop()
        pending.extend(dependant.dependencies)
        for field in dependant.query_params:
            model = field.field_info.annotation
            if isinstance(model, type) and issubclass(model, BaseModel):
                names.update(info.alias or name for name, info in model.model_fields.items())
            else:
                names.add(field.alias)
    return frozenset(names)


def rate_limited(which: Literal["creates", "updates"], what: str) -> Callable[..., Any]:
    """A route dependency that takes one of the caller's `which` tokens, or answers 429
    (`what` names what was refused: "requests created")."""

    async def check(request: Request, caller: Caller) -> None:
        limiter = getattr(app_state(request).quotas, which)
        if limiter is not None:
            limiter.take(caller.name, what)

    return check


"""The caller of an API route, from its bearer token (401 without a valid one)."""


# -- the web pages' forms and cookies ---------------------------------------------------------


class Values:
    """The fields of a posted form, to read an answer from and to fill the form again."""

    def __init__(self, items: Sequence[tuple[str, str]] = ()) -> None:
        self._by_name: dict[str, list[str]] = {}
        for name, value in items:
            self._by_name.setdefault(name, []).append(value)

    def get(self, name: str, default: str = "") -> str:
        found = self._by_name.get(name)
        return found[-1] if found else default

    def all(self, name: str) -> list[str]:
        return list(self._by_name.get(name, ()))

    def has(self, name: str) -> bool:
        return name in self._by_name

    def __bool__(self) -> bool:
        return bool(self._by_name)


async def read_form(http: Request) -> Values:
    """The text fields of a posted form (files left out)."""
    form = await http.form()
    return Values([(k, v) for k, v in form.multi_items() if isinstance(v, str)])


def set_cookie(
    response: Response, name: str, value: str, max_age: int, samesite: Literal["lax", "strict"], path: str, secure: bool
) -> None:
    """Set a cookie the page's scripts cannot read (`HttpOnly`), `Secure` over HTTPS."""
    response.set_cookie(name, value, max_age=max_age, path=path, httponly=True, samesite=samesite, secure=secure)
