"""What the server's API and web inbox share: the app's state (its broker, auth, hub,
quotas, metrics), problem responses, event ids from clients, who may see an event, and
an event's JSON. Both route modules import this one, and neither imports the other."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.responses import JSONResponse
from fastapi.templating import Jinja2Templates
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ..broker import MAX_EVENT_ID, LocalBroker
from ..channels.delivery import DeliveryLoop
from ..errors import NotFound
from ..followups import FOLLOWUP_EVENTS
from ..grant_tokens import GrantSigner
from ..model import RUN_EVENTS, Event, Run, Status, request_to_dict
from ..outbox import Delivery
from ..principals import Principal, can_read
from .auth import Auth
from .quotas import SIGNIN_MAIL_PER_ADDRESS, SIGNIN_MAIL_PER_CLIENT, Quota, RateLimiter, StreamSlots
from .schemas import Problem
from .stream import ACCESS_EVENTS, Hub

__all__ = [
    "ApiError",
    "AppState",
    "Metrics",
    "Quotas",
    "State",
    "TheBroker",
    "app_state",
    "can_see",
    "event_to_dict",
    "may_see_delivery",
    "may_see_run",
    "parse_event_id",
    "run_event_filter",
    "problem",
]


def problem(status: int, code: str, detail: str, **extra: Any) -> JSONResponse:
    titles = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 408: "Request Timeout"}
    titles |= {405: "Method Not Allowed", 409: "Conflict", 413: "Content Too Large", 422: "Unprocessable Content"}
    titles |= {429: "Too Many Requests"}
    body = {"type": "about:blank", "title": titles.get(status, "Error"), "status": status, "code": code}
    body |= {"detail": detail, **{k: v for k, v in extra.items() if v is not None}}
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(body, status_code=status, media_type="application/problem+json", headers=headers)


def parse_event_id(value: str | None) -> int | None:
    """An event id given by a client (`Last-Event-ID`): None when absent; a ValueError
    unless it is plain ASCII digits within a store's 64-bit range."""
    if not value:
        return None
    if not (value.isascii() and value.isdigit()) or int(value) > MAX_EVENT_ID:
        raise ValueError(f"Last-Event-ID must be an event id: ASCII digits, at most {MAX_EVENT_ID}")
    return int(value)


def problem_responses(descriptions: Mapping[int, str], *statuses: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of a route for the problems it can answer with, described by its
    router's `descriptions`; a 429 says `Retry-After` when to try again."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        out[status] = {"model": Problem, "description": descriptions.get(status, "")}
        if status == 429:
            out[status]["headers"] = {
                "Retry-After": {"description": "seconds to wait", "schema": {"type": "integer", "minimum": 1}}
            }
    return out


class ApiError(Exception):
    def __init__(self, status: int, code: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail, self.extra = status, code, detail, extra


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
    return principal.kind == "admin" or principal.name in (event.data.get("to"), event.data.get("by"))


async def may_see_run(broker: LocalBroker, principal: Principal, run: Run) -> bool:
    """Who may see a run (and so follow and cancel it): who started it, that agent's owner,
    and the people its requests go to (the operator of a server without auth too)."""
    if principal.kind == "admin" or principal.name == run.requester:
        return True
    if run.requester is not None:
        starter = await broker.get_principal(run.requester)
        if starter is not None and starter.owner == principal.name:
            return True
    return bool((await broker.list(run=run.id, recipient=principal.name, limit=1)).items)


async def may_see_delivery(broker: LocalBroker, principal: Principal, delivery: Delivery) -> bool:
    """Who may see a delivery and send it again: its recipient, whoever made its request,
    and an admin."""
    if principal.kind == "admin" or principal.name == delivery.recipient:
        return True
    try:
        request = await broker.get(delivery.request_id)
    except NotFound:
        return False
    return request.requester == principal.name


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


class AppState:
    quotas: Quotas
    templates: Jinja2Templates  # the web inbox's, set when it is installed
    grant_signer: GrantSigner  # signs the issued grants' tokens, set by the app
    open_inboxes: bool = False  # anyone signed in may ask anyone (an open organisation)
    delivery: DeliveryLoop | None = None  # the outbox's delivery loop, when a routing is configured
    links_secret: str  # signs the one-click answer links in messages, set by the app

    def __init__(
        self, broker: LocalBroker, auth: Auth, queue_size: int, keepalive: float, *, open_recipients: bool = False
    ) -> None:
        self.broker = broker
        self.auth = auth
        self.open_recipients = open_recipients
        self.known_recipients: set[str] = set()  # principals are never deleted, so a name found stays valid
        self.hub = Hub(broker, queue_size=queue_size, encode=lambda event: json.dumps(event_to_dict(event)))
        self.metrics = Metrics()
        self.hub.on_event.append(self.metrics.observe)
        self.keepalive = keepalive
        self.tasks: set[asyncio.Task[None]] = set()  # work no response waits for (mailing a sign-in link)


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


State = Annotated[AppState, Depends(_state_dependency)]
TheBroker = Annotated[LocalBroker, Depends(_broker_dependency)]
