"""The Broker: one API to ask a person and wait for the answer, the same on every store.

The broker is the only writer of request state. It checks what comes in, lets the store
make each change atomically (with its event), and wakes the waiters of this process: at
once for changes made here, and through the store's event log for changes made by other
processes (a wake-up hint, backed by a bounded poll).

The lifecycle it keeps: a request is answerable as soon as `create` returns, and the
on-input-required hooks run beside the wait, never in front of it; the first settlement
wins; `wait` replays a settled outcome; a wait that is cut withdraws its request (unless the
request outlives its waiter: made with an idempotency key, or for a run); leaving
`async with` only disconnects this process, while `close`, `release` and `cancel` withdraw.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import importlib
import json
import logging
import math
import os
import re
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Literal, Self, TypedDict, Unpack, cast, overload
from urllib.parse import urlsplit

from ._backoff import Outage
from .approval_policies import ApprovalPolicy, policy_from_dict, policy_to_dict
from .approvals import check_context, decision_ask, is_marked, refused_yes
from .dashboard import DASHBOARD_ROWS, DASHBOARD_WINDOW, Dashboard, layout
from .durations import LONGEST, SHORTEST
from .errors import (
    AlreadySettled,
    Cancelled,
    Closed,
    Expired,
    FollowupNotFound,
    Forbidden,
    IdempotencyKeyReused,
    InvalidAnswer,
    InvalidCursor,
    InvalidRequest,
    NewerDatabase,
    NotFound,
    Rejected,
    RunConflict,
    Unavailable,
)
from .followups import MAX_FOLLOWUP_LENGTH, MAX_QUEUED_FOLLOWUPS, Followup, Sent, approval_word
from .hooks import DEFAULT_HOOK_TIMEOUT, Hooks
from .model import (
    ASK_TYPES,
    DEFAULT_EXP,
    DEFAULT_GRANT_POLICY,
    DEFAULT_LIMITS,
    DEFAULT_PAUSE_TIMEOUT,
    MAX_STATE_BYTES,
    NO_ORIGIN,
    Answers,
    Ask,
    Choice,
    Claim,
    Confirm,
    Deny,
    Event,
    Form,
    Grant,
    GrantPolicy,
    InputHook,
    IssuedGrant,
    Limits,
    MultiChoice,
    Origin,
    Request,
    Response,
    Run,
    RunStatus,
    Status,
    Text,
    ask_from_dict,
    build_request,
    check_answers,
    check_echo,
    check_grant_giver,
    check_json,
    check_text,
    creation_time,
    derived_key,
    epoch_microseconds,
    evolve,
    from_epoch_microseconds,
    issue_grants,
    new_id,
    offered_grants,
    park_deadline,
    plain_id,
    request_to_dict,
    time_budget,
)
from .outbox import DELIVERY_ID_PREFIX, Delivery, DeliveryState, LinkUse
from .principals import (
    IssuedSession,
    IssuedSignInLink,
    IssuedToken,
    LiveToken,
    Principal,
    TokenInfo,
    WebSession,
    issue_token,
)
from .redact import redact_url
from .routing import Routing, RoutingError, masked, routing_from_dict, unmasked
from .secret_key import NO_KEY, OTHER_KEY, GrantKeyId, fingerprint, no_grant_key, other_grant_key
from .store import (
    DeliveryPort,
    EventQuery,
    GrantQuery,
    ImmediateRequests,
    Listed,
    ListFilters,
    OutboxStore,
    PendingFilters,
    Query,
    RunClaim,
    RunQuery,
    Store,
    UnknownOption,
)

__all__ = [
    "ROUTING_SETTING",
    "routing_since",
    "Broker",
    "CreateFields",
    "DeliveryPage",
    "GrantPage",
    "LocalBroker",
    "Page",
    "RunPage",
    "connect",
    "register_scheme",
    "stored_routing",
]

log = logging.getLogger("interlock")

DEFAULT_URL = "sqlite:///interlock.db"
MAX_EVENT_ID = 2**63 - 1
"""The largest event id a store can hold (a signed 64-bit integer)."""
_SETTLED_EVENTS = frozenset(s.value for s in Status if s is not Status.PENDING)
_MAY_MAKE_READY = _SETTLED_EVENTS | {"input_requested"}
"""Event types after which a run may be ready to claim (a request of it settled, it parked)."""


class OriginFields(TypedDict, total=False):
    """Where a request came from, given one by one to `Broker.create`."""

    session: str | None
    channel: str | None
    agent: str | None
    actor: str | None
    tool_call_id: str | None
    tool_name: str | None
    arguments: Mapping[str, Any] | None
    run: str | None
    correlation_id: str | None
    delegation: Sequence[str] | None
    channel_type: str | None


class CreateFields(OriginFields, total=False):
    """The keyword fields of `Broker.create`."""

    kind: Literal["question", "approval"]
    to: str | None
    title: str
    details: str
    context: Any
    timeout: float | timedelta | None
    expires_at: datetime | None
    requester: str | None
    idempotency_key: str | None
    origin: Origin | None


_ORIGIN_FIELDS = frozenset(Origin.__dataclass_fields__)
"""The keywords `create` takes one by one: the fields of `Origin` itself, so the two cannot
drift apart (a test pins `OriginFields` to the same names for type checkers)."""


@dataclass(frozen=True, slots=True)
class Page:
    """One page of `Broker.list`. Pass `next_cursor` as `after` for the next page.

    A page holds `limit` requests, or fewer where their stored JSON passes
    `interlock.store.PAGE_BYTES` (8 MiB; a few big requests), with a `next_cursor` to the
    rest all the same: the list is over only when `next_cursor` is None."""

    items: Sequence[Request]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of `Broker.list_runs`. Pass `next_cursor` as `after` for the next page."""

    items: Sequence[Run]
    next_cursor: str | None


DEFAULT_LEASE = 30.0
"""Seconds a worker holds a claimed run before another may take it (renew to keep it)."""

NEWER_DATABASE_RETRY = 60.0
"""Seconds between a background loop's tries on a store a later version migrated
(`NewerDatabase`): no write goes through until the process restarts, so it is said once
and tried seldom, in case an operator rolls the migration back."""


_UNKNOWN: Any = object()
_KNOWN_RUNS = 10_000
"""How many runs' `max_duration` a broker keeps, so that parking them reads nothing first."""


def _seconds(value: float | timedelta, name: str, longest: float | None = LONGEST) -> float:
    """A duration given as seconds or a timedelta, checked: positive, finite, at least the
    microsecond the stores count in (less would be kept as no time at all), and at most
    `longest` seconds."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0 or math.isinf(seconds):
        raise InvalidRequest(f"{name} must be a positive, finite number of seconds")
    if seconds < SHORTEST:
        raise InvalidRequest(f"{name} is {seconds:g} seconds, less than the microsecond times are kept in")
    if longest is not None and seconds > longest:
        raise InvalidRequest(f"{name} is {seconds:g} seconds, more than a thousand years")
    return float(seconds)


def _wait_seconds(timeout: float | None) -> float | None:
    """A waiter's own `timeout`, at least 0 (one already past expires the request at
    once); one that is no number, NaN included, is refused before it expires anything."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or math.isnan(timeout):
        raise InvalidRequest("timeout must be a number of seconds")
    return max(float(timeout), 0.0)


@dataclass(frozen=True, slots=True)
class GrantPage:
    """One page of `Broker.list_grants`, newest first. Pass `next_cursor` as `after` for the next."""

    items: Sequence[IssuedGrant]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class DeliveryPage:
    """One page of `Broker.dead_letters`, newest first. Pass `next_cursor` as `after` for the next."""

    items: Sequence[Delivery]
    next_cursor: str | None


MAX_DASHBOARD_WINDOW = timedelta(days=366)
"""The furthest back `Broker.dashboard` looks."""


def _about_request(request: Request) -> str:
    return f"request {request.id}"


def _denies(verdict: Deny | None) -> bool:
    return isinstance(verdict, Deny)


def _costly_to_check(data: object) -> bool:
    """Whether an ask's JSON shape is of a kind whose check is costly (`costly_to_check`)."""
    kind = data.get("type") if isinstance(data, Mapping) else None
    cls = ASK_TYPES.get(kind) if isinstance(kind, str) else None
    return cls is not None and cls.costly_to_check


class Broker(ABC):
    """Create, wait for, answer and withdraw human-input requests. Use with `async with`.

    The seam between the agent side (and every surface) and where requests live: a
    `LocalBroker` over a store in this process, or a `RemoteBroker` whose methods are the
    calls of a running server's HTTP API. `connect(url)` gives the one the URL names.
    """

    pause_timeout: timedelta | None = None
    """How long a parked run waits on a person before it is given up (its `max_duration`
    when longer), as a run running in its agent's own process that neither parks it nor
    starts it again is; None while not known here (a remote broker learns its server's from the
    first run it claims)."""

    def __init__(
        self,
        *,
        max_prompt_length: int | None = None,
        hook_timeout: float = DEFAULT_HOOK_TIMEOUT,
        limits: Limits | None = None,
        grant_policy: GrantPolicy | None = None,
    ) -> None:
        self.grant_policy = grant_policy or DEFAULT_GRANT_POLICY
        """How long issued grants last here: the default for offers without `exp`, and the
        ceiling past which offers are refused at create."""
        limits = limits or DEFAULT_LIMITS
        if max_prompt_length is not None:
            limits = replace(limits, max_prompt_length=max_prompt_length)
        self.limits = limits
        """How large requests, answers and updates may be, on every surface."""
        self.max_prompt_length = limits.max_prompt_length
        self.hook_timeout = hook_timeout
        self._hooks: Hooks[Request, Deny | None] | None = None  # made by the first add_input_hook
        self._detached: set[str] = set()
        # The requests this broker made that `close()` withdraws (none that outlives its
        # waiter), while pending; the newest `MADE_KEPT` (one settled elsewhere unseen
        # here is let go with the oldest).
        self._made: dict[str, None] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._hook_runs: dict[asyncio.Task[None], Request] = {}  # input hooks still running

    # -- life cycle ----------------------------------------------------------------------

    @abstractmethod
    async def open(self) -> Self:
        """Connect (open the store, or reach the server) and start any background work."""

    @abstractmethod
    async def aclose(self) -> None:
        """Disconnect this process. Pending requests stay pending for others to answer."""

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- the arguments every broker checks alike (one wording, local or remote) -----------

    def _check_answering(
        self, by: str | None, via: str, comment: str, grants: Sequence[Mapping[str, Any]] | None
    ) -> None:
        """Refuse what an answer's own arguments get wrong, before its request is read."""
        limits = self.limits
        check_text(by, "by", limits.max_name_length)
        if via != "python":
            check_text(via, "via", limits.max_name_length)
        if comment:
            check_text(comment, "the comment", limits.max_reason_length, error=InvalidAnswer)
        if grants is not None:
            check_echo(grants, limits.max_options)

    def _check_giving_up(self, reason: str, by: str | None, via: str = "python") -> None:
        """Refuse what a rejection's or a withdrawal's own arguments get wrong."""
        limits = self.limits
        check_text(reason, "reason", limits.max_reason_length)
        check_text(by, "by", limits.max_name_length)
        check_text(via, "via", limits.max_name_length)

    def _check_names(self, **names: str | None) -> None:
        """Refuse a name (who, a channel, a session...) that is not a string a name may be."""
        for field_name, value in names.items():
            check_text(value, field_name, self.limits.max_name_length)

    def _check_run(self, agent: str, **names: str | None) -> None:
        """Refuse a run's agent and names as `start_run` does."""
        if not isinstance(agent, str) or not agent:
            raise InvalidRequest("a run needs an agent name")
        self._check_names(agent=agent, **names)
        run_id = names.get("run_id")
        if run_id is not None and not run_id:
            raise InvalidRequest("run_id must be a non-empty string")

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- hooks ---------------------------------------------------------------------------

    def add_input_hook(
        self,
        hook: InputHook,
        *,
        priority: int = 0,
        timeout: float | None = None,
        channels: Iterable[str] | None = None,
    ) -> None:
        """Run `hook(request)`, sync or async, after each create, beside the wait. Lower
        priority runs first.

        A hook returning `Deny(reason)` rejects the request; one that raises or overruns
        its timeout (30 s by default) is logged and the request stays answerable. With
        `channels`, the hook sees only requests created in one of those channels (an agent
        serving its own channels on a shared broker hears only of its own requests).
        Closing a channel cancels the hooks still running for its requests.
        """
        if self._hooks is None:
            self._hooks = Hooks("input hook", _about_request)
        if isinstance(channels, str):
            raise TypeError("channels is a collection of channel names, not one string")
        when = None
        if channels is not None:
            scope = frozenset(channels)

            def when(request: Request) -> bool:
                return request.origin.channel in scope

        self._hooks.add(hook, priority=priority, timeout=self.hook_timeout if timeout is None else timeout, when=when)

    def _start_hooks(self, request: Request) -> None:
        """Run the input hooks for a new request in the background, tracked by request so
        that closing its channel (or this broker) cancels them."""
        task = self._spawn(self._run_hooks(request))
        self._hook_runs[task] = request
        task.add_done_callback(self._hook_runs.pop)

    def _cancel_hooks(self, channel: str | None, requester: str | None) -> None:
        for task, request in list(self._hook_runs.items()):
            if channel is None or (
                request.origin.channel == channel and (requester is None or request.requester == requester)
            ):
                task.cancel()

    async def _run_hooks(self, request: Request) -> None:
        assert self._hooks is not None
        outcomes = await self._hooks.run(request, until=_denies)
        if outcomes and isinstance(denied := outcomes[-1].verdict, Deny):
            await self.reject(request.id, denied.reason, by="hook", via="hook")

    def prepare(
        self,
        asks: Ask | Sequence[Ask],
        *,
        kind: Literal["question", "approval"] = "question",
        to: str | None = None,
        title: str = "",
        details: str = "",
        context: Any = None,
        timeout: float | timedelta | None = None,
        expires_at: datetime | None = None,
        requester: str | None = None,
        idempotency_key: str | None = None,
        origin: Origin | None = None,
        **where: Unpack[OriginFields],
    ) -> Request:
        """Check the parts of a request and build it, pending, without storing it.

        `timeout` (seconds) sets `expires_at`: the request expires then even if nobody
        waits. The origin fields may be given one by one or as an `Origin`. A `context`
        whose `kind` is in the reserved `interlock.` namespace is refused: only the
        approval gate marks its requests (`interlock.approvals`).
        """
        now = datetime.now(UTC)
        if context is not None:
            check_context(context)
        if timeout is not None:
            # As long as the last date there is allows (`due` below), unlike the durations
            # an operator sets; not text, nor True (taken as one second).
            seconds = _seconds(timeout, "timeout", longest=None)
            try:
                due = now + timedelta(seconds=seconds)
            except OverflowError:
                raise InvalidRequest(f"timeout is {seconds:g} seconds, past the last date that can be stored") from None
            expires_at = due if expires_at is None else min(due, expires_at)
        if where:
            if not where.keys() <= _ORIGIN_FIELDS:
                unknown = ", ".join(sorted(where.keys() - _ORIGIN_FIELDS))
                raise TypeError(f"create() got unknown field(s): {unknown}")
            given: dict[str, Any] = {k: v for k, v in where.items() if v is not None}
            if "delegation" in given:
                given["delegation"] = tuple(given["delegation"])
            origin = replace(origin or NO_ORIGIN, **given) if given else origin
        request = build_request(
            asks,
            kind=kind,
            to=to,
            title=title,
            details=details,
            context=context,
            requester=requester,
            idempotency_key=idempotency_key,
            origin=origin,
            expires_at=expires_at,
            limits=self.limits,
            now=now,
        )
        for ask_id, option, grant in offered_grants(request):
            place = f"ask {ask_id!r}" + (f", option {option!r}" if option is not None else "")
            self.grant_policy.check_offer(grant, place, now)
        return request

    async def build_asks(self, data: Sequence[Mapping[str, Any]]) -> list[Ask]:
        """Asks from their JSON shape (`model.ask_from_dict`), for surfaces that receive
        them as data. Checking a form schema costs about 2.5 ms a KiB, so asks with a form
        are built in a worker thread, within `limits.check_seconds`."""
        limits = self.limits
        if len(data) > limits.max_asks:
            raise InvalidRequest(f"asks: {len(data)} asks, at most {limits.max_asks} allowed")

        def build() -> list[Ask]:
            return [ask_from_dict(item, limits=limits) for item in data]

        if not any(_costly_to_check(item) for item in data):
            return build()

        def build_in_thread() -> list[Ask]:
            with time_budget(limits.check_seconds):
                return build()

        return await asyncio.to_thread(build_in_thread)

    async def create(self, asks: Ask | Sequence[Ask], **fields: Unpack[CreateFields]) -> Request:
        """Store a new pending request and return it; it is answerable from this moment.

        Fields: `kind` ("question" or "approval"), `to`, `title`, `details` (markdown),
        `context` (JSON), `timeout` (seconds or a timedelta until it expires, at least a
        microsecond) or `expires_at` (a timezone-aware datetime, kept with its offset; the
        earlier of the two when both are given), `requester`, `idempotency_key`, and
        where it came from: `origin=Origin(...)` or `session`, `channel`, `agent`,
        `actor`, `tool_call_id`, `tool_name`, `arguments`, `run`, `correlation_id`,
        `delegation` one by one.

        Raises `Closed` in a channel closed by `close(channel)` (on any process sharing the
        store) or after `close()` on this broker.
        """
        request, _ = await self.submit(self.prepare(asks, **fields))
        return request

    async def create_detached(self, asks: Ask | Sequence[Ask], **fields: Unpack[CreateFields]) -> Request:
        """Like `create`, for a request nobody will `wait` on; free it with `release`.

        The request is marked `detached`: a waiting call on it that is cancelled leaves it
        pending (its creator owns it), in this process or any other.
        """
        request, _ = await self.submit(replace(self.prepare(asks, **fields), detached=True))
        self._detached.add(request.id)
        return request

    def _note_made(self, request: Request) -> None:
        """Remember a request this broker just made, for `close()` to withdraw, unless it
        outlives its waiter."""
        if not request.outlives_its_waiter:
            made = self._made
            made[request.id] = None
            if len(made) > MADE_KEPT:
                del made[next(iter(made))]

    @overload
    async def ask(self, asks: Confirm, **fields: Unpack[CreateFields]) -> bool | None: ...
    @overload
    async def ask(self, asks: Text | Choice, **fields: Unpack[CreateFields]) -> str | None: ...
    @overload
    async def ask(self, asks: MultiChoice, **fields: Unpack[CreateFields]) -> list[str] | None: ...
    @overload
    async def ask(self, asks: Form, **fields: Unpack[CreateFields]) -> dict[str, Any] | None: ...
    @overload
    async def ask(self, asks: Ask | Sequence[Ask], **fields: Unpack[CreateFields]) -> Any: ...
    async def ask(self, asks: Ask | Sequence[Ask], **fields: Unpack[CreateFields]) -> Any:
        """Create a request (taking `create`'s fields), wait for it and return the answer:
        the bare value for one ask, else a dict by ask id. Other outcomes raise, as `wait`
        does; `timeout=` bounds the wait through the request's expiry.

        One ask's value is of its kind (`Confirm` a bool, `Text` and `Choice` a str,
        `MultiChoice` a list of option ids, `Form` a dict), and None when the ask is
        optional (`required=False`) and was left unanswered; type checkers see as much."""
        request, response = await self._asked(asks, fields)
        if len(request.asks) == 1:
            return response.answers.get(request.asks[0].id)
        return dict(response.answers)

    async def _asked(self, asks: Ask | Sequence[Ask], fields: CreateFields) -> tuple[Request, Response]:
        """`ask`'s request, created, and its response, waited for."""
        request = await self.create(asks, **fields)
        return request, await self.wait(request.id)

    async def pending(self, **filters: Unpack[PendingFilters]) -> dict[str, Request]:
        """A snapshot of the pending requests (matching `list`'s filters), by id, oldest first."""
        out: dict[str, Request] = {}
        after: str | None = None
        while True:
            page = await self.list(status=Status.PENDING, after=after, limit=1000, order="asc", **filters)
            out.update((r.id, r) for r in page.items)
            if page.next_cursor is None:
                return out
            after = page.next_cursor

    @abstractmethod
    async def submit(self, request: Request) -> tuple[Request, bool]:
        """Store a prepared request. With an idempotency key already used by the same
        requester, return the first request and False instead, whatever became of its run
        since. A new request for a run that has ended raises `RunConflict`."""

    # -- waiting -------------------------------------------------------------------------

    @abstractmethod
    async def wait(self, request_id: str, timeout: float | None = None) -> Response:
        """Wait for the request to settle and return its response.

        Raises `Rejected`, `Expired`, `Cancelled` or `Closed` for the other outcomes, the
        same on every later call. When `timeout` passes first, the request expires. When
        the waiting call itself is cancelled and no other call of this broker waits on it,
        the request is withdrawn, unless it is detached or outlives its waiter
        (`Request.outlives_its_waiter`: an idempotency key, a run).
        """

    @abstractmethod
    async def watch(self, request_id: str, timeout: float | None = None) -> Request:
        """Wait until the request settles or `timeout` passes, and return it as it is then;
        changes nothing."""

    # -- settling ------------------------------------------------------------------------

    @abstractmethod
    async def resolve(
        self,
        request_id: str,
        answer: Any,
        *,
        by: str | None = None,
        via: str = "python",
        comment: str = "",
        grants: Sequence[Mapping[str, Any]] | None = None,
    ) -> bool:
        """Answer a pending request. False if it is unknown or no longer pending; an answer
        that does not fit raises `InvalidAnswer` and changes nothing.

        `grants` echoes the offered grants the person approves (`{with, can}` each): the
        grants issued are exactly those the answer's choices trigger and the echo names
        (`model.issue_grants`); echoing one the choices did not trigger refuses the whole
        answer with `InvalidAnswer`, issues nothing and leaves the request pending.

        An answer `by` a person `interlock token revoke` cut off (every token of theirs
        revoked) is refused with `Forbidden` (403 over HTTP) and changes nothing, whoever
        records it, until `token create` gives them a token again."""

    # -- grants --------------------------------------------------------------------------

    @abstractmethod
    async def list_grants(
        self,
        *,
        audience: str | None = None,
        issuer: str | None = None,
        request: str | None = None,
        live: bool = False,
        after: str | None = None,
        limit: int = 50,
    ) -> GrantPage:
        """Issued grants matching every filter given, newest first; `live` keeps only those
        neither revoked nor expired, nor given by a person `token revoke` cut off. Without
        it, a grant given by a person cut off is listed marked `issuer_cut_off`: it
        authorizes nothing while they are, and `token create ISSUER --human` restores it."""

    @abstractmethod
    async def get_grant(self, grant_id: str) -> IssuedGrant:
        """The grant by id, marked `issuer_cut_off` while whoever gave it is a person `token
        revoke` cut off. Raises `NotFound` for an unknown id."""

    @abstractmethod
    async def check_grant(
        self, audience: str | None, with_: str, can: str, *, issuer: str | None = None
    ) -> IssuedGrant | None:
        """A live grant letting `audience` do `can` on `with_` (issued by `issuer`, when
        given), or None. A grant given by a person `interlock token revoke` cut off is not
        live while they are: their authority went with their tokens (`token create` gives
        it back), though the grant itself is not revoked."""

    @abstractmethod
    async def revoke_grant(self, grant_id: str, *, by: str | None = None) -> bool:
        """Revoke a grant; False when it is unknown or revoked already."""

    @abstractmethod
    async def give_grant(
        self,
        to: str,
        with_: str,
        can: str,
        *,
        exp: int | Literal["default"] | None = DEFAULT_EXP,
        by: str | None = None,
    ) -> IssuedGrant:
        """Give a grant directly, without a request (a delegation): `by` lets `to` do
        `can` on `with_` until `exp` (unix seconds; None for no expiry; by default the
        venue's default time). The venue's ceiling applies, as to offers."""

    # -- approval policies -----------------------------------------------------------------

    @abstractmethod
    async def set_approval_policy(
        self, policy: ApprovalPolicy | Mapping[str, Any], *, by: str | None = None
    ) -> ApprovalPolicy:
        """Create or replace an agent's approval policy (for one tool server when it names
        one), as an `ApprovalPolicy` or its JSON (Novo's field names: `approval`,
        `gatedTools`, `autoAllow`, `hook`). A bad policy raises `InvalidRequest` naming the
        field and changes nothing. Returns it as stored, with its version."""

    @abstractmethod
    async def get_approval_policy(self, agent: str, server: str = "") -> ApprovalPolicy:
        """The stored policy of `agent` (for `server`; "" for its whole toolset). Raises
        `NotFound` when there is none. Through a server, the hook's secret is not shown."""

    @abstractmethod
    async def list_approval_policies(self, agent: str | None = None) -> list[ApprovalPolicy]:
        """The stored policies (of `agent`, when given) the caller may read, by agent then server."""

    @abstractmethod
    async def delete_approval_policy(self, agent: str, server: str = "", *, by: str | None = None) -> bool:
        """Delete a stored policy; False when there was none."""

    @abstractmethod
    async def approval_policy_for(self, agent: str, server: str = "") -> ApprovalPolicy | None:
        """The policy that applies to a call of `agent`'s tool from `server`: the one stored
        for that server, else the agent's own, else None. The approval gate reads it for
        each decision, so a change applies at once; it carries the hook's secret (the gate
        signs the hook's calls), so through a server only the agent itself or an admin
        may read it."""

    @abstractmethod
    async def reject(self, request_id: str, reason: str = "", *, by: str | None = None, via: str = "python") -> bool:
        """Refuse a pending request; its waiters get `Rejected(reason)`. A refusal `by` a
        person `token revoke` cut off is refused with `Forbidden`, as an answer is."""

    @abstractmethod
    async def cancel(
        self,
        request_id: str,
        reason: str = "",
        *,
        by: str | None = None,
        cause: Literal["cancelled", "withdrawn", "closed"] = "cancelled",
        via: str = "python",
    ) -> bool:
        """Withdraw a pending request; waiters get `Cancelled`, or `Closed` for "closed"."""

    @abstractmethod
    async def expire(self, request_id: str) -> bool:
        """Expire a pending request now, as if its deadline had passed."""

    @abstractmethod
    async def release(self, request_id: str, *, by: str | None = None, via: str = "python") -> bool:
        """Free a detached request; still pending, it is withdrawn (recorded as `by`,
        `via` the surface)."""

    @abstractmethod
    async def consume(self, request_id: str, *, by: str | None = None) -> bool:
        """Spend an answered request once: True for the one call, in any process, that does."""

    @abstractmethod
    async def claim(self, request_id: str, *, by: str) -> Claim:
        """Take a pending request to a team for `by`, one of its members, unless another
        member holds it. Returns the claim that stands: `by`'s, or the other member's.
        Raises `NotFound`, or `AlreadySettled` for a settled request (which keeps the
        claim it had)."""

    @abstractmethod
    async def unclaim(self, request_id: str, *, by: str | None) -> Claim | None:
        """Give up `by`'s claim on a pending request (anyone's when None); the claim
        removed, or None when there was none of theirs. Raises `NotFound`, or
        `AlreadySettled` for a settled request."""

    @abstractmethod
    async def claims(self, request_ids: Sequence[str]) -> Mapping[str, Claim]:
        """Who has claimed which of these requests, by request id."""

    @abstractmethod
    async def requester_of(self, requester: str | None) -> str | None:
        """Who a request created with `requester` is recorded as made by."""

    @abstractmethod
    async def close(self, channel: str | None = None, *, requester: str | None = None, via: str = "python") -> None:
        """Close `channel` (withdraw its pending requests, recorded as withdrawn by
        `requester` `via` the surface, and refuse creates there until `reopen`), or without
        one this broker (its own requests withdrawn as a process's shutting down)."""

    @abstractmethod
    async def reopen(self, channel: str, *, requester: str | None = None) -> bool:
        """Let requests be created in a closed channel again. True if it was closed."""

    @abstractmethod
    async def inform(
        self,
        message: str,
        *,
        to: str | None = None,
        session: str | None = None,
        agent: str | None = None,
        run: str | None = None,
        data: Mapping[str, Any] | None = None,
        by: str | None = None,
    ) -> Event:
        """Record a progress update for a person, without waiting for anything."""

    # -- reading -------------------------------------------------------------------------

    @abstractmethod
    async def get(self, request_id: str) -> Request:
        """The request as stored now. Raises `NotFound` for an unknown id."""

    @abstractmethod
    async def list(self, **filters: Unpack[ListFilters]) -> Page:
        """Requests matching every filter given, newest first by default, a page at a time:
        the filters and the page (`after`, `limit`, `order`) are the keyword arguments
        `interlock.store.ListFilters` describes. A page of big requests ends before `limit`
        where their JSON passes `interlock.store.PAGE_BYTES`, with a `next_cursor` to the
        rest (see `Page`)."""

    @abstractmethod
    async def dashboard(
        self, *, recipient: str | None = None, teams: Sequence[str] = (), window: timedelta = DASHBOARD_WINDOW
    ) -> Dashboard:
        """The dashboard's figures over the requests to `recipient` and its `teams`
        (everyone's when no recipient is named): what waits now, by agent and age, and for
        each person and team how they answered over the `window` up to now. Counted over
        the newest `DASHBOARD_ROWS` pending requests and as many settled ones (`capped`
        says there were more). Through a server: the caller's own inbox and teams', or
        everyone's for an admin."""

    @abstractmethod
    def events(self, after: int | None = None, *, follow: bool = False) -> AsyncGenerator[Event, None]:
        """The event log after event id `after`, oldest first; with `follow`, keep going.
        An async generator: `contextlib.aclosing` closes one left before its end at once."""

    @abstractmethod
    async def find_events(
        self,
        *,
        after: int = 0,
        until: int | None = None,
        limit: int = 500,
        involving: str | None = None,
        request: str | None = None,
        session: str | None = None,
        run: str | None = None,
        teams: Sequence[str] = (),
    ) -> Listed[Event]:
        """One page of the event log after `after` (and up to `until`) matching the filters:
        at most `limit` events, or fewer where the requests they carry pass
        `interlock.store.PAGE_BYTES` (`Listed.cut`; the page reads as its events). Page on
        from the last event's id while a page is full or cut."""

    @abstractmethod
    async def last_event_id(self) -> int:
        """The id of the newest event: pass it as `events(after=...)` to follow from now on."""

    # -- runs ----------------------------------------------------------------------------

    @abstractmethod
    async def start_run(
        self,
        agent: str,
        *,
        session: str | None = None,
        run_id: str | None = None,
        max_duration: float | timedelta | None = None,
        requester: str | None = None,
        exclusive: bool = False,
    ) -> Run:
        """Record a new run of `agent`, `running`. With `run_id` given, a run with that id
        already stored is returned as it is (a restarted agent finds its own run); with
        `exclusive`, a new run is refused while a run of `agent` on `session` has not ended.

        A run running in its agent's own process (no worker holds it) is given up once that
        process shows no sign of life for the broker's `pause_timeout` (or the run's longer
        `max_duration`): unless it parks the run, starts it again (by its `run_id`, which
        gives it a new deadline), makes a request on it or waits on one (`wait`, `ask`, an
        approval gate: each moves the deadline on once less than half the window is left,
        the wait for as long as it waits) first, the run ends `cancelled` with
        `terminal_reason` "abandoned", its pending requests are cancelled and its session is
        freed. Its `expires_at` says when, while it runs so. A process that works that long
        without any of these sets a longer `max_duration`.

        With `exclusive`, the run holds its `session` (which it must name), as a framework's
        thread that two runs at once would write over: while a run of `agent` on that
        session has not ended (one of the same `requester`: through a server, the same
        caller's), a new run is refused with `RunConflict` naming that run (`run_id`,
        `status`) and nothing is stored. The store decides as it stores the run, so of
        several exclusive starts at once on one session (in any processes), one makes its
        run and the others are refused. A start without `exclusive` is never refused, and
        may make a run beside an exclusive one."""

    async def start_parked(
        self,
        agent: str,
        requests: Sequence[Request],
        *,
        state: Any,
        status: RunStatus | str | None = None,
        session: str | None = None,
        run_id: str | None = None,
        max_duration: float | timedelta | None = None,
        requester: str | None = None,
    ) -> Run:
        """Start a run of `agent` parked at once on new `requests`, keeping `state`: what
        `start_run`, a `create` for each request and `park` do, in one call (and, on a
        store, in one transaction: the run and its requests are stored together or not at
        all). Build the requests with `prepare(...)`; each becomes a request of the run
        (its session and agent, when it names none). The run's `waiting_on` lists their
        ids in order. With `run_id` of a run already stored, that run is returned as it is
        and nothing is created (a restarted agent finds its own run); through a server, where
        these are calls of their own, one started again before it parked finds the requests
        it made already, and one that asks something else at a place raises
        `IdempotencyKeyReused` (its `request_id` the request made there before): cancel that
        run or start a new one. Raises `Closed` if a request's channel is closed,
        `InvalidRequest` for requests that are not new."""
        checked = _new_requests(requests, run_id, self.limits.max_name_length)
        run = await self.start_run(
            agent, session=session, run_id=run_id, max_duration=max_duration, requester=requester
        )
        if run.status is not RunStatus.RUNNING or run.waiting_on or run.attempts:
            return run  # found as stored: a restarted agent's run goes on as it is
        # One call after another (a server's): an agent that died between them and starts
        # again finds the requests it made already, each keyed by the run and its place,
        # rather than asking the person a second time.
        made = [
            evolve(request, idempotency_key=derived_key("start_parked", run.id, str(place)))
            for place, request in enumerate(_of_run(run, checked))
        ]
        ids: list[str] = []
        for place, request in enumerate(made):
            try:
                ids.append((await self.submit(request))[0].id)
            except IdempotencyKeyReused as exc:  # the key is ours, not the caller's: say what it means
                raise IdempotencyKeyReused(
                    f"run {run.id!r} already asked something else as its request {place + 1} "
                    f"(request {exc.request_id}) before it was started again: a run started again asks "
                    f"what it asked before. Cancel the run (interlock run cancel {run.id}) or start a new "
                    "one (another run_id)",
                    request_id=exc.request_id,
                ) from None
        return await self.park(run.id, state=state, waiting_on=ids, status=status)

    @abstractmethod
    async def park(
        self,
        run_id: str,
        *,
        state: Any,
        waiting_on: Sequence[str],
        status: RunStatus | str | None = None,
        worker: str | None = None,
    ) -> Run:
        """Park a running run on the requests it waits on (created with `run=run_id`),
        keeping its framework `state`; the calling process may exit then. Once every one
        of them has settled, a worker claims the run (`claim_run`) and goes on from
        `state`. `status` defaults to `waiting_for_approval` if any of them is an
        approval, else `waiting_for_input`. A run whose last park was on the same requests
        is returned as it is (parked still, being resumed by a worker, or ended since): an
        agent that restarts changes nothing. Raises `RunConflict` if the run is not
        running, or is held by a worker other than `worker` (without `worker`: by any
        worker, so a claimed run is never taken from the worker resuming it)."""

    @abstractmethod
    async def claim_run(
        self,
        agents: Sequence[str] | None = None,
        *,
        worker: str,
        lease: float = DEFAULT_LEASE,
        wait: float = 0.0,
    ) -> Run | None:
        """Claim one run of `agents` (any when None) that is ready to go on, for `worker`,
        waiting up to `wait` seconds for one. Exactly one worker gets each run; it holds
        it for `lease` seconds (`renew_lease` to keep it), after which another may claim
        it again, as when the worker died. None if there was none."""

    @abstractmethod
    async def renew_lease(self, run_id: str, *, worker: str, lease: float = DEFAULT_LEASE) -> bool:
        """Hold a claimed run `lease` seconds more. False if `worker` holds it no longer."""

    @abstractmethod
    async def complete_run(self, run_id: str, result: Any = None, *, worker: str | None = None) -> Run:
        """End a running run as `completed` with its `result` (JSON). A run a worker holds
        is ended only by that worker (`worker`): without `worker`, only a run no worker
        holds (an agent's own, going on in its process). Raises `RunConflict` if the run is
        not running, or is held by a worker other than `worker` (`cancel_run` stops a run
        whoever holds it)."""

    @abstractmethod
    async def fail_run(self, run_id: str, error: str, *, worker: str | None = None) -> Run:
        """End a running run as `failed` (`terminal_reason` "error") with `error`. Like
        `complete_run`, only the worker holding a run ends it; without `worker`, only a
        run no worker holds."""

    @abstractmethod
    async def cancel_run(
        self, run_id: str, reason: str = "cancelled_by_user", *, by: str | None = None, via: str = "python"
    ) -> bool:
        """End a run that has not ended as `cancelled` (`terminal_reason` is `reason`) and
        withdraw its pending requests (recorded as withdrawn `by`, `via` the surface).
        False if it had ended already."""

    @abstractmethod
    async def get_run(self, run_id: str) -> Run:
        """The run as stored now, with its state. Raises `NotFound` for an unknown id."""

    @abstractmethod
    async def list_runs(
        self,
        *,
        agent: str | None = None,
        session: str | None = None,
        status: RunStatus | str | None = None,
        requester: str | None = None,
        involving: str | None = None,
        teams: Sequence[str] = (),
        after: str | None = None,
        limit: int = 50,
        order: Literal["asc", "desc"] = "desc",
    ) -> RunPage:
        """Runs matching every filter given, newest first by default (by when each was
        made, then by id), a page at a time; `after` is a page's `next_cursor`.
        `involving` keeps the runs a person may see: those the name started, those the
        agents it owns started and those with requests to it, and with `teams` those with
        requests to one of these teams (a member's)."""

    # -- follow-up messages ------------------------------------------------------------------

    @abstractmethod
    async def send_message(
        self,
        run_id: str,
        text: str,
        *,
        by: str | None = None,
        may_answer: Callable[[Request], bool] | None = None,
    ) -> Sent:
        """Send a person's message to a run that has not ended; it is never dropped.

        Parked on an approval, `approve` / `deny` (or `1` / `2`) decides the run's oldest
        pending approval (`Sent.resolved`; only one `may_answer` accepts, when given);
        any other message, and every message to a run parked on a question or working,
        is held (`Sent.followup`) until the run's agent takes it at its next turn
        boundary. Neither when the run holds as many messages as it may. Raises
        `RunConflict` for a run that has ended (nothing is held: start a new run)."""

    async def send_to_thread(
        self,
        session: str,
        text: str,
        *,
        by: str | None = None,
        requester: str | None = None,
        involving: str | None = None,
        teams: Sequence[str] = (),
        may_answer: Callable[[Request], bool] | None = None,
        prefer: Callable[[Run], Awaitable[bool]] | None = None,
    ) -> Sent:
        """Send a message to the busy run of a session (thread): its newest run that has not
        ended (of those `requester` started, and of those `involving` a name, as `list_runs`
        keeps them, when given; the newest that `prefer` takes, when given and one does), as
        `send_message` does. Raises `NotFound` when no run of the
        session is busy: nothing is held, no run is started."""
        check_text(session, "session", DEFAULT_LIMITS.max_name_length)
        newest: Run | None = None
        cursor: str | None = None
        while True:
            page = await self.list_runs(
                session=session, requester=requester, involving=involving, teams=teams, after=cursor, limit=100
            )
            for run in page.items:
                if run.status.ended:
                    continue
                if prefer is None or await prefer(run):
                    return await self.send_message(run.id, text, by=by, may_answer=may_answer)
                newest = newest or run
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        if newest is None:
            raise NotFound(session, message=f"no run of thread {session!r} is busy: nothing was held")
        return await self.send_message(newest.id, text, by=by, may_answer=may_answer)

    @abstractmethod
    async def list_followups(self, run_id: str) -> Sequence[Followup]:
        """The messages held for a run, oldest first; on an ended run, those it never
        delivered (read-only)."""

    @abstractmethod
    async def withdraw_followup(self, run_id: str, followup_id: str, *, by: str | None = None) -> Followup:
        """Withdraw a held message before it is delivered. Raises `FollowupNotFound` once
        it is gone: withdrawn, taken for delivery, or read-only on an ended run."""

    @abstractmethod
    async def take_followups(self, run_id: str, *, worker: str | None = None) -> Sequence[Followup]:
        """At a turn boundary of a running run: take every held message for delivery,
        oldest first, each with its `followup_replayed` event. The caller hands each to its
        agent as the next user turn. A run a worker holds gives its messages only to that
        worker (`worker`): without `worker`, only a run no worker holds (an agent's own,
        going on in its process). Raises `RunConflict` if a worker other than `worker`
        holds the run (without `worker`: any worker, which resumes it); nothing when the
        run is not running."""

    # -- teams ---------------------------------------------------------------------------

    @abstractmethod
    async def list_teams(self) -> Mapping[str, Sequence[str]]:
        """Every team and its members, by name. Through a server, an admin's view: anyone
        else sees the teams they are in."""

    @abstractmethod
    async def team_members(self, team: str) -> Sequence[str] | None:
        """A team's members, by name; None when there is no such team."""

    @abstractmethod
    async def add_team_members(self, team: str, members: Sequence[str] = ()) -> Sequence[str]:
        """Make the team if it is new and add these people to it; its members now. A name
        that is a person's or an agent's, or a member who is no person here, raises
        `InvalidRequest` and changes nothing."""

    @abstractmethod
    async def remove_team_member(self, team: str, member: str) -> bool:
        """Take a person out of a team; False when they were not in it (or there is no
        such team)."""

    @abstractmethod
    async def delete_team(self, team: str) -> bool:
        """Delete a team and its memberships (its requests stay); False if there was none."""

    # -- the outbox ----------------------------------------------------------------------

    @abstractmethod
    async def list_deliveries(
        self,
        *,
        request_id: str | None = None,
        status: DeliveryState | None = None,
        recipient: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> Sequence[Delivery]:
        """Deliveries by id, a page after the id `after`: of one request, in one state
        (`dead`: the dead letters), to one recipient. Through a server, those the token
        may see (a request's, for whoever may read it; else the caller's own and, for a
        person, those of the requests to their teams; every one for an admin), so
        `recipient` is the server's business."""

    @abstractmethod
    async def dead_letters(
        self, *, recipient: str | None = None, after: str | None = None, limit: int = 50
    ) -> DeliveryPage:
        """The dead letters (to one recipient), newest first: by when each became one,
        then by id, a page at a time; `after` is a page's `next_cursor` (any other text
        raises `InvalidRequest`). Through a server, the caller's own and, for a person,
        those of the requests to their teams (every one for an admin), so `recipient` is
        the server's business."""

    @abstractmethod
    async def get_delivery(self, delivery_id: str) -> Delivery:
        """The delivery by id. Raises `NotFound` for an unknown id."""

    @abstractmethod
    async def retry_delivery(self, delivery_id: str) -> Delivery:
        """Send a dead letter again: pending, due now, its attempts counted afresh. Raises
        `NotFound` for an unknown id, `AlreadySettled` for a delivery that is no dead letter."""

    @abstractmethod
    async def routing(self) -> dict[str, Any] | None:
        """The routing document in use (as kept in the store, where every node's delivery
        loop reads it), the channels' secrets masked; None when there is none."""

    @abstractmethod
    async def set_routing(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """Replace the routing in use with `document` (a routing file's, as JSON): it
        survives restarts, and every delivery loop on the store takes it up within seconds.
        A document that does not check out raises `InvalidRequest` and changes nothing.
        A secret given as `***`, as `routing` shows it, keeps the secret that channel has
        now. Returns it as kept, the channels' secrets masked."""


@dataclass(slots=True, eq=False)
class _Waiting:
    """A claim waiting in this broker for a ready run (see `LocalBroker._settle_handing`)."""

    agents: tuple[str, ...] | None
    requester: str | None
    worker: str
    lease: float
    handed: asyncio.Future[Run | None] | None = None


@dataclass(slots=True, eq=False)
class _Kept:
    """A run whose pending requests calls in this process wait on (see `LocalBroker._keep_loop`)."""

    waits: int  # how many such calls wait now
    look_at: datetime  # when to look at its deadline next


class LocalBroker(Broker):
    """The broker over a store: this process keeps the waiters, runs expiry and follows
    the store's event log for what other processes change."""

    pause_timeout: timedelta

    def __init__(
        self,
        store: Store,
        *,
        max_prompt_length: int | None = None,
        hook_timeout: float = DEFAULT_HOOK_TIMEOUT,
        limits: Limits | None = None,
        pause_timeout: float | timedelta = DEFAULT_PAUSE_TIMEOUT,
        grant_policy: GrantPolicy | None = None,
        allow_http_hooks: bool = False,
        max_followups: int = MAX_QUEUED_FOLLOWUPS,
        default_expiry: float | timedelta | None = None,
    ) -> None:
        super().__init__(
            max_prompt_length=max_prompt_length, hook_timeout=hook_timeout, limits=limits, grant_policy=grant_policy
        )
        self.allow_http_hooks = allow_http_hooks
        """Whether a stored policy's hook may be a plain http:// URL to any host (by default
        only https://, or http:// to a loopback address)."""
        self.pause_timeout = timedelta(seconds=_seconds(pause_timeout, "pause_timeout"))
        """How long a parked run waits on a person before it is given up (its
        `max_duration` when longer): about two weeks by default. A run running in its
        agent's own process (no worker holds it) that neither parks it, starts it again,
        makes a request on it nor waits on one (`wait`, `ask`) for as long is given up too,
        `cancelled` with `terminal_reason` "abandoned"."""
        if isinstance(max_followups, bool) or not isinstance(max_followups, int) or max_followups < 1:
            raise ValueError("max_followups must be a whole number, at least 1")
        self.max_followups = max_followups
        """How many messages a run holds for its agent at a time."""
        self.default_expiry = (
            None if default_expiry is None else timedelta(seconds=_seconds(default_expiry, "default_expiry"))
        )
        """How long a request that sets no timeout and belongs to no run stays pending
        before it expires; None (the default): such a request never expires by itself."""
        self.store = store
        """Where this broker keeps everything (the surfaces reach it only through the
        broker's methods: its principals, tokens and sessions through the local ones)."""
        self._now: ImmediateRequests | None = store if isinstance(store, ImmediateRequests) else None  # never waits
        # the futures waiting on each request: one future (the common case, with no list
        # to make and collect per wait), or a list of them
        self._waiters: dict[str, asyncio.Future[Request] | list[asyncio.Future[Request]]] = {}
        self._viewed: dict[tuple[str, str], None] = {}  # (request, person) noted as viewed here, oldest first
        self._closed = False  # `close()` without a channel: this broker refuses creates
        self._state: Literal["new", "open", "closed"] = "new"
        self._open_lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._followers = 0
        self._ready = asyncio.Event()  # set when a run may have become ready to claim
        self._ready_count = 0  # how many times a run may have become ready: what a claim's look saw
        # The last claim that found no run: its filter (agents, requester), `_ready_count`
        # before it looked, and when (the loop's clock). See `claim_run`.
        self._found_none: tuple[tuple[tuple[str, ...] | None, str | None], int, float] | None = None
        self._claimers = 0
        self._waiting: deque[_Waiting] = deque()  # claims waiting here, which an answer may hand a run
        self._durations: dict[str, timedelta | None] = {}  # max_duration of runs started or claimed here
        self._expiry_kick = asyncio.Event()
        self._next_due: datetime | None = None
        self._hint = asyncio.Event()
        self._kept: dict[str, _Kept] = {}  # runs waited on here, which their waits keep alive
        # When to look at each of them, earliest first: a heap of (look_at, run id), where an
        # entry whose look_at is not its run's `_Kept.look_at` any more is skipped
        self._looks: list[tuple[datetime, str]] = []
        self._keep_kick = asyncio.Event()  # a run is newly waited on here: look at its deadline

    # -- life cycle ----------------------------------------------------------------------

    async def open(self) -> Self:
        """Open the store, expire what fell due while nobody watched, start background work."""
        async with self._open_lock:
            if self._state == "open":
                return self
            if self._state == "closed":
                raise Closed(None, "this broker was closed; connect again")
            await self.store.open()
            self._state = "open"
            await self._expire_due()  # what fell due while no process watched
            self._spawn(self._expiry_loop())
            self._spawn(self._keep_loop())
            if self.store.shared:
                self.store.on_foreign_change(self._hint.set, self._settled_elsewhere)
                self._spawn(self._follow_loop(await self.store.last_event_id()))
        return self

    async def aclose(self) -> None:
        """Disconnect this process. Pending requests stay pending for others to answer."""
        if self._state != "open":
            self._state = "closed"
            return
        self._state = "closed"
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for request_id in list(self._waiters):
            for fut in self._pop_waiters(request_id):
                if not fut.done():
                    fut.set_exception(Closed(request_id, "the broker was disconnected"))
        self._changed.set()
        self._ready.set()
        await self.store.aclose()

    async def submit(self, request: Request) -> tuple[Request, bool]:
        """Store a prepared request. With an idempotency key already used by the same
        requester, return the first request and False instead, if this one asks the same
        (its kind, recipient, asks, title, details and context: a retry repeats its
        request), else raise `IdempotencyKeyReused` and change nothing. An approval gate's
        request (`approvals.mark`) is matched by its key alone: the gate finds the approval
        it made for a call whatever it asks now (its edit form, say, left out). The key
        counts before the run's state: a retry for a run that has ended since gets its
        first request back; a new request for it raises `RunConflict` (for a run that is
        not here, `InvalidRequest`)."""
        if self._state != "open":
            await self.open()
        if self._closed:
            raise Closed(None, "the broker is closed")
        if self.default_expiry is not None:
            request = self._with_default_expiry(request)
        run_id = request.origin.run
        if run_id is not None:  # before the insert: a request refused here changes nothing
            run = await self.store.get_run(run_id)
            if run is None or run.status.ended:
                # Its key is looked up before its run's state counts: a retry gets the
                # request it made back, whatever became of the run since (as a retry of
                # an answered request does); only a new request is refused. (Looked up
                # only here: the insert finds a key already used for a run not ended.)
                key = request.idempotency_key
                first = None if key is None else await self.store.get_by_key(request.requester, key)
                if first is not None:
                    _same_request(first, request)
                    return first, False
                if run is None:  # its requests would follow no run's pause, and expire never
                    raise InvalidRequest(f"origin.run: there is no run {run_id!r} here")
                raise _no_request_for(run_id, run.status)
        # A closed channel is refused by the store, inside the insert's transaction.
        now = self._now
        asked = request
        request, created = now.insert_now(request) if now is not None else await self.store.insert(request)
        if not created:
            _same_request(request, asked)
            return request, False
        if self._closed:  # close() ran while the insert was in flight
            await self._withdraw(request, "closed", "the broker was closed")
            raise Closed(request.id, "the broker is closed")
        if run_id is not None:
            # Read again after the insert: a run cancelled meanwhile either withdrew this
            # request with its own or is seen ended here.
            run = await self.store.get_run(run_id)
            status = RunStatus.CANCELLED if run is None else run.status
            if status.ended:
                await self._withdraw(request, "cancelled", f"run {run_id!r} has ended ({status.value})")
                raise _no_request_for(run_id, status)
            assert run is not None
            await self._alive(run, when_half_gone=True)
        self._note_made(request)
        if self._followers:
            self._changed_now()
        if request.expires_at is not None and (self._next_due is None or request.expires_at < self._next_due):
            self._expiry_kick.set()
        if self._hooks:
            self._start_hooks(request)
        return request, True

    async def _alive(self, run: Run, *, when_half_gone: bool = False) -> Run:
        """A run running in its agent's own process (no worker holds it) whose process
        shows it is alive: the run's deadline moves on to a whole window from now. Started
        again, at once; with `when_half_gone` (it made a request on the run), only once less
        than half the window is left (a write a half window, none on the others). Returns
        the run as it is then; any other run as it is given."""
        if run.status is not RunStatus.RUNNING or run.worker is not None:
            return run
        now = datetime.now(UTC)
        renewed = run.park_deadline(now, self.pause_timeout)
        if when_half_gone and (run.expires_at is None or run.expires_at - now >= (renewed - now) / 2):
            return run
        return await self.store.restart_run(run.id, expires_at=renewed) or await self._current_run(run.id)

    def _with_default_expiry(self, request: Request) -> Request:
        """The operator's `default_expiry` applied to a request that set no timeout and
        belongs to no run (a run's requests are bounded by its pause instead)."""
        if self.default_expiry is None or request.expires_at is not None or request.origin.run is not None:
            return request
        try:
            return evolve(request, expires_at=request.created_at + self.default_expiry)
        except OverflowError:
            return request  # past the last date that can be stored: as good as never

    # -- waiting -------------------------------------------------------------------------

    async def wait(self, request_id: str, timeout: float | None = None) -> Response:
        """Wait for the request to settle and return its response.

        Raises `Rejected`, `Expired`, `Cancelled` or `Closed` for the other outcomes, the
        same on every later call. When `timeout` passes first, the request expires. When
        the waiting call itself is cancelled and no other call here waits on it, the request
        is withdrawn, unless it is detached or outlives its waiter
        (`Request.outlives_its_waiter`: an idempotency key, a run).
        """
        if self._state != "open":
            await self.open()
        fut: asyncio.Future[Request] = asyncio.get_running_loop().create_future()
        request_id = _check_id(request_id)
        wait_seconds = _wait_seconds(timeout)
        self._add_waiter(request_id, fut)  # before reading, so a settlement seen meanwhile is not missed
        try:
            # A cached pending copy is enough: a settlement this process has not seen yet
            # reaches the follow loop later, and the future registered above wakes then.
            now = self._now
            request = now.get_now(request_id) if now is not None else await self.store.get(request_id, fresh=False)
            if request is None:
                raise NotFound(request_id)
            if request.status is Status.PENDING:
                delay = wait_seconds
                if request.expires_at is not None:
                    until_due = (request.expires_at - datetime.now(UTC)).total_seconds()
                    delay = until_due if delay is None else min(delay, until_due)
                run_id = request.origin.run
                if run_id is not None:
                    self._keep(run_id)  # its process is alive while it waits: so is its run
                try:
                    if delay is None:  # the common case, without a coroutine more
                        try:
                            request = await fut
                        except asyncio.CancelledError:
                            await self._waiter_cancelled(request)
                            raise
                    else:
                        request = await self._await_settled(request, fut, delay)
                finally:
                    if run_id is not None:
                        self._unkeep(run_id)
        finally:
            if request_id in self._waiters:  # not woken (a settlement pops its waiters)
                self._drop_waiter(request_id, fut)
        self.store.note_read(request.id)
        return _outcome(request)

    async def _await_settled(self, request: Request, fut: asyncio.Future[Request], delay: float) -> Request:
        try:
            async with asyncio.timeout(max(delay, 0.0)):
                return await fut
        except TimeoutError:
            if fut.done() and not fut.cancelled():
                return fut.result()  # settled just as the time ran out
            expired = request.settle(Status.EXPIRED, Response(at=datetime.now(UTC), via="expiry"))
            if await self._settle(expired):
                return expired
            return await self._current(request.id)
        except asyncio.CancelledError:
            await self._waiter_cancelled(request)
            raise

    async def _waiter_cancelled(self, request: Request) -> None:
        """A waiting call was cancelled: withdraw its request, unless someone else owns it or
        another call here still waits on it (its own future is cancelled by now)."""
        present = self._waiters.get(request.id)
        waiting = present if isinstance(present, list) else () if present is None else (present,)
        if any(not f.done() for f in waiting):
            return
        if self._state == "open" and not request.outlives_its_waiter:
            # Shielded: a cancel scope that cancels again must not cut the withdrawal short.
            withdrawal = self._spawn(self._withdraw(request, "withdrawn", "the waiting call was cancelled"))
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(withdrawal)

    async def watch(self, request_id: str, timeout: float | None = None, *, keeps_run: bool = False) -> Request:
        """Wait until the request settles or `timeout` passes, and return it as it is then.

        Unlike `wait`, watching changes nothing: the time running out leaves the request
        pending, and a cancelled watch does not withdraw it. Long polls and inboxes use it.
        With `keeps_run` (the server's long poll of the request's maker, its run's process
        waiting on it through the server), the request's run is kept alive while the watch
        lasts, as while a `wait` in this process waits.
        """
        if self._state != "open":
            await self.open()
        request_id = _check_id(request_id)
        timeout = _wait_seconds(timeout)  # NaN had waited forever
        fut: asyncio.Future[Request] = asyncio.get_running_loop().create_future()
        self._add_waiter(request_id, fut)
        try:
            request = await self._current(request_id)
            if request.status is Status.PENDING:
                run_id = request.origin.run if keeps_run else None
                if run_id is not None:
                    self._keep(run_id)
                try:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(timeout):
                            return await fut
                finally:
                    if run_id is not None:
                        self._unkeep(run_id)
                return await self._current(request_id)
            return request
        finally:
            self._drop_waiter(request_id, fut)

    def _keep(self, run_id: str) -> None:
        """A call here begins to wait on a pending request of run `run_id`: while such a
        call waits, its process is alive, and `_keep_loop` moves the run's deadline on."""
        kept = self._kept.get(run_id)
        if kept is not None:
            kept.waits += 1
            return
        now = datetime.now(UTC)
        self._kept[run_id] = _Kept(1, now)  # its deadline looked at at once
        heapq.heappush(self._looks, (now, run_id))
        self._keep_kick.set()

    def _unkeep(self, run_id: str) -> None:
        """A call that waited on a request of run `run_id` ended (answered, cut, closed)."""
        kept = self._kept.get(run_id)
        if kept is None:
            return
        kept.waits -= 1
        if kept.waits <= 0:
            del self._kept[run_id]  # no call waits on it here any more: its deadline stays
            if len(self._looks) > 2 * len(self._kept) + 64:  # mostly skipped entries: keep it small
                self._looks = [(other.look_at, other_id) for other_id, other in self._kept.items()]
                heapq.heapify(self._looks)

    def _add_waiter(self, request_id: str, fut: asyncio.Future[Request]) -> None:
        present = self._waiters.get(request_id)
        if present is None:
            self._waiters[request_id] = fut
        elif isinstance(present, list):
            present.append(fut)
        else:
            self._waiters[request_id] = [present, fut]

    def _pop_waiters(self, request_id: str) -> Sequence[asyncio.Future[Request]]:
        present = self._waiters.pop(request_id, None)
        if present is None:
            return ()
        return present if isinstance(present, list) else (present,)

    def _drop_waiter(self, request_id: str, fut: asyncio.Future[Request]) -> None:
        present = self._waiters.get(request_id)
        if present is fut:
            del self._waiters[request_id]
        elif isinstance(present, list):
            with contextlib.suppress(ValueError):
                present.remove(fut)
            if not present:
                del self._waiters[request_id]

    async def _current(self, request_id: str) -> Request:
        request_id = _check_id(request_id)
        request = await self.store.get(request_id)
        if request is None:
            raise NotFound(request_id)
        return request

    # -- settling ------------------------------------------------------------------------

    async def resolve(
        self,
        request_id: str,
        answer: Any,
        *,
        by: str | None = None,
        via: str = "python",
        comment: str = "",
        grants: Sequence[Mapping[str, Any]] | None = None,
    ) -> bool:
        """Answer a pending request. False if it is unknown or no longer pending.

        An answer that does not fit raises `InvalidAnswer` and changes nothing. `grants`
        echoes the offered grants the person approves: exactly those the choices trigger
        and the echo names are issued, with the answer, in one transaction. An answer in the
        name of a person `token revoke` cut off (`by`, or for an answer naming nobody that
        issues grants, the recipient) raises `Forbidden` and changes nothing.
        """
        if self._state != "open":
            await self.open()
        request_id = _check_id(request_id)
        self._check_answering(by, via, comment, grants)
        store = self._now
        request = store.get_now(request_id) if store is not None else await self.store.get(request_id, fresh=False)
        if request is None or request.status is not Status.PENDING:
            return False
        if _cheap_to_check(request.asks):  # checked here, without a coroutine more (see check_answers)
            answers = check_answers(request, answer, limits=self.limits)
        else:
            answers = await self.check_answers(request, answer)
        now = datetime.now(UTC)
        decision = decision_ask(request) if request.kind == "approval" else None
        if decision is not None and by is None and request.to is not None and answers.get(decision.id) is True:
            await self._refuse_nameless_yes(request)
        if decision is not None and answers.get(decision.id) is False:
            if grants:  # a no issues nothing: an echo names grants it did not trigger
                named = check_echo(grants)[0]
                raise InvalidAnswer(
                    f"grants: {named.can!r} on {named.with_!r} was echoed on a denial, which issues no grant; "
                    "nothing was answered or issued"
                )
            # Denying an approval is a denial, recorded as one: the request is rejected with
            # the reason (a person's no to a tool call, whichever surface said it), so the
            # gate, a parked run's resume and a Novo client all read the same outcome.
            denial = Response(at=now, answers=answers, by=by, via=via, reason=comment)
            return await self._settle(request.settle(Status.REJECTED, denial))
        issued = (
            ()
            if grants is None
            else issue_grants(request, answers, grants, issuer=by or request.to, now=now, policy=self.grant_policy)
        )
        settled = request.settle(Status.ANSWERED, Response._make(now, answers, by, via, comment, None, issued))
        done = self._settle_now(settled)
        return done if done is not None else await self._settle(settled)

    async def _refuse_nameless_yes(self, request: Request) -> None:
        """Refuse, before anything is recorded, a yes to an approval gate's request that
        names nobody as its answerer: the gate takes a yes only as its approver's (any
        member's, for a team, or a contract's answering for them as its own `by`), so
        stored, it would be read as a refusal when the agent goes on. A yes from someone
        else by name the surfaces refuse themselves (`approvals.not_the_approver`): the
        broker cannot tell a contract the gate answers through from anyone else."""
        refused = await refused_yes(self, request, None)
        if refused is not None:
            said, example = refused
            raise InvalidAnswer(f"{said}; answer as them (by={example!r}; --by {example} on the command line)")

    async def check_answers(self, request: Request, answer: Any) -> dict[str, Any]:
        """Check an answer against the request (see `model.check_answers`) and return the
        answers by ask id. A request with a form is checked in a worker thread, within
        `limits.check_seconds`, so a costly schema never holds up the event loop; the
        other asks are cheap and checked right here."""
        if not _cheap_to_check(request.asks):
            return await asyncio.to_thread(self._check_in_thread, request, answer)
        return check_answers(request, answer, limits=self.limits)

    def _check_in_thread(self, request: Request, answer: Any) -> dict[str, Any]:
        with time_budget(self.limits.check_seconds):
            return check_answers(request, answer, limits=self.limits)

    async def reject(self, request_id: str, reason: str = "", *, by: str | None = None, via: str = "python") -> bool:
        """Refuse a pending request; its waiters get `Rejected(reason)`. Refused with
        `Forbidden`, changing nothing, when `by` is a person `token revoke` cut off."""
        self._check_giving_up(reason, by, via)
        return await self._give_up(
            request_id, Status.REJECTED, Response(datetime.now(UTC), by=by, via=via, reason=reason)
        )

    async def cancel(
        self,
        request_id: str,
        reason: str = "",
        *,
        by: str | None = None,
        cause: Literal["cancelled", "withdrawn", "closed"] = "cancelled",
        via: str = "python",
    ) -> bool:
        """Withdraw a pending request (the requester changed its mind); waiters get
        `Cancelled`, or `Closed` when `cause` is "closed". `via` records the surface it
        was withdrawn on, as for an answer.

        A request that outlives its waiter (`Request.outlives_its_waiter`: detached, made
        with an idempotency key, or a run's) is not "withdrawn" by a waiting call that was
        cut (Ctrl-C, a client hanging up): that returns False and leaves it pending;
        cancelling it, or its run, withdraws it."""
        self._check_giving_up(reason, by, via)
        if cause not in _CANCEL_CAUSES:  # as the API refuses it
            raise InvalidRequest(f"cause must be one of {', '.join(_CANCEL_CAUSES)}, not {cause!r}")
        response = Response(datetime.now(UTC), by=by, via=via, reason=reason, cause=cause)
        # A waiting call that was cut withdraws its request, unless the request outlives its
        # waiter (detached, idempotent, a run's), whichever process waited.
        return await self._give_up(request_id, Status.CANCELLED, response, spare=cause == "withdrawn")

    async def expire(self, request_id: str) -> bool:
        """Expire a pending request now, as if its deadline had passed."""
        return await self._give_up(request_id, Status.EXPIRED, Response(datetime.now(UTC), via="expiry"))

    async def release(self, request_id: str, *, by: str | None = None, via: str = "python") -> bool:
        """Free a detached request. Still pending, it is withdrawn so a stray waiter unblocks
        (recorded as withdrawn `by`, `via` the surface).

        True if this call dropped one: the request was created detached (or was still
        pending) and nobody had released it yet, from any process or node sharing the
        store (the store marks it released, one caller winning); an answered detached
        request is dropped too, its answer kept. A second release, anywhere, returns
        False. Settled records are kept (durably, or in the memory retention as read
        outcomes), so a late `wait` still replays them.
        """
        self._check_giving_up("", by, via)
        if self._state != "open":
            await self.open()
        request_id = _check_id(request_id)
        self._detached.discard(request_id)
        now = datetime.now(UTC)
        dropped = await self.store.release(request_id, now)
        response = Response(now, by=by, via=via, reason="released by its creator", cause="released")
        await self._give_up(request_id, Status.CANCELLED, response)  # still pending: withdrawn
        self.store.note_read(request_id)
        return dropped

    async def consume(self, request_id: str, *, by: str | None = None) -> bool:
        """Spend an answered request once: True for the one call, in any process, that does.

        A durable, conditional write (with a `consumed` event): False when the request is
        not answered, unknown, or consumed already. The approval gate runs a tool only on
        an approval it has consumed, so one approval never runs a call twice.
        """
        self._check_names(by=by)
        if self._state != "open":
            await self.open()
        done = await self.store.consume(_check_id(request_id), by, datetime.now(UTC))
        if done:
            self._changed_now()
        return done

    async def claim(self, request_id: str, *, by: str) -> Claim:
        """Take a pending request to a team for `by`, one of its members, unless another
        member holds it: a conditional write with a `claimed` event, so one member wins
        across every node. Returns the claim that stands (`by`'s, or the other member's).
        Who may claim is the caller's to check (`interlock.principals.can_claim`). A
        settled request raises `AlreadySettled`, though it keeps the claim it had."""
        if self._state != "open":
            await self.open()
        request = await self.get(request_id)
        if request.status is not Status.PENDING:
            raise AlreadySettled(request.id, request.status.value)
        claim = await self.store.claim(request.id, by, datetime.now(UTC))
        if claim is None:
            raise AlreadySettled(request.id, (await self.get(request.id)).status.value)
        if claim.by == by:
            self._changed_now()
        return claim

    async def unclaim(self, request_id: str, *, by: str | None) -> Claim | None:
        """Give up `by`'s claim (anyone's when None) on a pending request, with an
        `unclaimed` event; the claim removed, or None when there was none of theirs. A
        settled request raises `AlreadySettled`: its claim stays as it was."""
        if self._state != "open":
            await self.open()
        request = await self.get(request_id)
        if request.status is not Status.PENDING:
            raise AlreadySettled(request.id, request.status.value)
        claim = await self.store.unclaim(request.id, by, datetime.now(UTC))
        if claim is not None:
            self._changed_now()
        return claim

    async def claims(
        self, request_ids: Sequence[str], *, involving: str | None = None, teams: Sequence[str] = ()
    ) -> Mapping[str, Claim]:
        """Who has claimed which of these requests (at most 1000), by request id; with
        `involving`, only of those to or from that name or to one of `teams` (a person's
        own teams), decided from the store's index of requests, none read whole."""
        if self._state != "open":
            await self.open()
        if len(request_ids) > 1000:
            raise InvalidRequest("ask for the claims of at most 1000 requests at a time")
        ids = [_check_id(i) for i in request_ids]
        return await self.store.claims(ids, involving=involving, teams=teams)

    async def note_viewed(self, request: Request, *, by: str) -> bool:
        """Record that the person `by` has opened `request`: a `viewed` event the first time
        only (once per person, across every node). True when this was the first. Whoever
        asked it is not a viewer: the timeline tells the asker who has seen it. On a store a
        later version has migrated, which this process may only read, the view goes
        unrecorded (False) and the read on."""
        if self._state != "open":
            await self.open()
        key = (request.id, by)
        if by == request.requester or key in self._viewed:
            return False
        try:
            first = await self.store.note_viewed(request.id, by, datetime.now(UTC))
        except NewerDatabase:
            return False
        self._viewed[key] = None
        if len(self._viewed) > 10_000:
            self._viewed.pop(next(iter(self._viewed)))
        if first:
            self._changed_now()
        return first

    async def requester_of(self, requester: str | None) -> str | None:
        """Who a request created with `requester` is recorded as made by: `requester` itself,
        except through a server with auth, which records the token's principal."""
        if self._state != "open":
            await self.open()
        return self.store.requester_of(requester)

    async def _give_up(self, request_id: str, status: Status, response: Response, *, spare: bool = False) -> bool:
        """Settle a pending request as given up; with `spare`, not one that outlives its waiter."""
        if self._state != "open":
            await self.open()
        request_id = _check_id(request_id)
        request = await self.store.get(request_id, fresh=False)
        if request is None or request.status is not Status.PENDING or (spare and request.outlives_its_waiter):
            return False
        return await self._settle(request.settle(status, response))

    async def _withdraw(self, request: Request, cause: str, reason: str) -> None:
        await self._settle(request.settle(Status.CANCELLED, Response(datetime.now(UTC), reason=reason, cause=cause)))

    async def close(self, channel: str | None = None, *, requester: str | None = None, via: str = "python") -> None:
        """Withdraw every pending request in `channel` and refuse later creates there with
        `Closed`, until `reopen(channel)`. Other channels go on. The channel's requests are
        recorded as withdrawn by `requester` (by nobody without one: the operator), `via`
        the surface.

        A channel's closure is kept in the store, so every broker on it (other processes,
        other PostgreSQL nodes, clients of the same server) refuses creates there too. With
        `requester`, the channel is closed only for that requester's requests (what a
        server does when one of its principals closes a channel name others may share).

        Without a channel, this broker is closed: the pending requests it made are
        withdrawn and it refuses later creates. That is a process shutting down, so it is
        not kept in the store: other brokers, and this one after `connect` again, go on,
        and what other processes made stays pending. So does what outlives its waiter
        (`Request.outlives_its_waiter`: a detached request, one with an idempotency key, a
        run's), as when a waiting call is cancelled.
        """
        self._check_names(channel=channel, requester=requester, via=via)
        if self._state != "open":
            await self.open()
        self._cancel_hooks(channel, requester)
        if channel is None:
            self._closed = True
            for request_id in list(self._made):
                request = await self.store.get(request_id)
                if request is not None and request.status is Status.PENDING:
                    await self._withdraw(request, "closed", "the broker was closed")  # (it wakes its waiters)
            return
        response = Response(
            datetime.now(UTC), by=requester, via=via, reason=f"channel {channel!r} was closed", cause="closed"
        )
        settled = await self.store.close_channel(channel, response, requester=requester)
        for request in settled:
            self._wake(request)
        self._changed_now()
        if any(request.origin.run is not None for request in settled):
            self._runs_ready_now()

    async def reopen(self, channel: str, *, requester: str | None = None) -> bool:
        """Let requests be created in a channel closed by `close(channel)` again (hosts
        reuse channel names). With `requester`, take back only that requester's closure;
        without, every closure of the channel. True if the channel was closed."""
        self._check_names(channel=channel)
        if self._state != "open":
            await self.open()
        return await self.store.reopen_channel(channel, requester=requester)

    async def _settle(self, settled: Request) -> bool:
        done = self._settle_now(settled)
        if done is not None:
            return done
        granting = settled.response is not None and settled.response.grants
        # (`_settle_handing` marks the claim it takes off the queue handed, before it waits.)
        waiting = self._waiting.popleft() if self._waiting and settled.origin.run and not granting else None
        if waiting is not None:
            stored, handed = await self._settle_handing(settled, waiting)
            # A run handed over is running again: nothing became ready for another claim.
            return self._settled(stored, ready=not handed)
        stored = await (self.store.settle_granting(settled) if granting else self.store.settle(settled))
        return self._settled(stored)

    def _settle_now(self, settled: Request) -> bool | None:
        """`_settle` on a store whose writes never wait, when nothing else must be done
        with it (no grants to issue, no claim waiting here for a run): whether it settled.
        None when it must be done the general way."""
        now = self._now
        if (
            now is None
            or (settled.response is not None and settled.response.grants)
            or (self._waiting and settled.origin.run)
        ):
            return None
        return self._settled(now.settle_now(settled))

    def _settled(self, stored: Request | None, *, ready: bool = True) -> bool:
        """Wake whoever a settlement concerns here; False if it did not settle."""
        if stored is None:
            return False
        self._wake(stored)
        if self._followers:
            self._changed_now()
        if ready and stored.origin.run is not None:
            self._runs_ready_now()  # its run may be ready now (the store marked it so)
        return True

    async def _settle_handing(self, settled: Request, waiting: _Waiting) -> tuple[Request | None, bool]:
        """Settle a request of a run while a claim waits here: if that makes the run ready
        (and it is one the claim takes), the same transaction claims it for the waiting
        worker, which resumes it without a claim of its own. The settled request (None if
        it was not pending), and whether its run was handed over."""
        handed: asyncio.Future[Run | None] = asyncio.get_running_loop().create_future()
        waiting.handed = handed
        run: Run | None = None
        try:
            now = datetime.now(UTC)
            claim = RunClaim(
                waiting.worker, now + timedelta(seconds=waiting.lease), now, waiting.agents, waiting.requester
            )
            stored, run = await self.store.settle_claiming(settled, claim)
        finally:
            handed.set_result(run)  # the claim takes it, or looks again (None)
        if run is not None:
            self._know(run)
            self._wake_claims()  # the one it was handed to takes it; the others wait on
        return stored, run is not None

    # -- grants --------------------------------------------------------------------------

    async def list_grants(
        self,
        *,
        audience: str | None = None,
        issuer: str | None = None,
        request: str | None = None,
        live: bool = False,
        after: str | None = None,
        limit: int = 50,
    ) -> GrantPage:
        """Issued grants matching every filter given, newest first, a page at a time."""
        if self._state != "open":
            await self.open()
        if not 1 <= limit <= 1000:
            raise ValueError("limit must be between 1 and 1000")
        if isinstance(after, str):  # first: text too long to be a grant's id is no cursor either
            _id_cursor(after, "grants")
        for name, value in (("audience", audience), ("issuer", issuer), ("request", request), ("cursor", after)):
            check_text(value, name, self.limits.max_name_length)
        query = GrantQuery(
            audience=audience,
            issuer=issuer,
            request=request,
            live_at=datetime.now(UTC) if live else None,
            after=after,
            limit=limit + 1,
        )
        rows = list(await self.store.list_grants(query))
        items = rows[:limit]
        return GrantPage(await self._standing(items), items[-1].id if len(rows) > limit else None)

    async def grants_issued(self, request_ids: Sequence[str]) -> list[IssuedGrant]:
        """The grants the answers of these requests issued, newest first, as they are now
        (revoked, or `issuer_cut_off`): for a page of requests, in one query (and one for
        their issuers), however many of them issued grants."""
        if self._state != "open":
            await self.open()
        ids = tuple(dict.fromkeys(_check_id(i) for i in request_ids))
        if not ids:
            return []
        query = GrantQuery(requests=ids, limit=1000 * len(ids))  # (a thousand a request, as a listing of one reads)
        return await self._standing(await self.store.list_grants(query))

    async def _standing(self, grants: Sequence[IssuedGrant]) -> list[IssuedGrant]:
        """`grants`, each given by a person `token revoke` cut off marked so
        (`issuer_cut_off`), asked of the store in one query: they authorize nothing while
        their issuer is cut off, though what is stored of them says nothing of it."""
        cut = await self.store.cut_off({g.issuer for g in grants if g.issuer is not None}) if grants else frozenset()
        return [replace(g, issuer_cut_off=True) if g.issuer in cut else g for g in grants]

    async def get_grant(self, grant_id: str) -> IssuedGrant:
        if self._state != "open":
            await self.open()
        check_text(grant_id, "the grant id", self.limits.max_name_length)
        grant = await self.store.get_grant(grant_id)
        if grant is None:
            raise NotFound(grant_id, message=f"no grant {grant_id}")
        return (await self._standing([grant]))[0]

    async def check_grant(
        self, audience: str | None, with_: str, can: str, *, issuer: str | None = None
    ) -> IssuedGrant | None:
        """A live grant letting `audience` do `can` on `with_` (the newest), or None."""
        if self._state != "open":
            await self.open()
        for name, value in (("audience", audience), ("with", with_), ("can", can)):
            check_text(value, name, self.limits.max_prompt_length)
        now = datetime.now(UTC)
        query = GrantQuery(audience=audience, issuer=issuer, with_=with_, can=can, live_at=now, limit=1)
        found = await self.store.list_grants(query)
        return found[0] if found else None

    async def revoke_grant(self, grant_id: str, *, by: str | None = None) -> bool:
        if self._state != "open":
            await self.open()
        check_text(grant_id, "the grant id", self.limits.max_name_length)
        check_text(by, "by", self.limits.max_name_length)
        done = await self.store.revoke_grant(grant_id, by, datetime.now(UTC)) is not None
        if done:
            self._changed_now()
        return done

    async def give_grant(
        self,
        to: str,
        with_: str,
        can: str,
        *,
        exp: int | Literal["default"] | None = DEFAULT_EXP,
        by: str | None = None,
    ) -> IssuedGrant:
        if self._state != "open":
            await self.open()
        check_text(to, "to", self.limits.max_name_length)
        check_text(by, "by", self.limits.max_name_length)
        if not isinstance(to, str) or not to:
            raise InvalidRequest("to: name who the grant is for")
        offer = Grant(with_, can, exp)
        check_text(offer.with_, "with", self.limits.max_prompt_length)
        check_text(offer.can, "can", self.limits.max_prompt_length)
        check_grant_giver(offer.with_, by, Forbidden)
        now = datetime.now(UTC)
        self.grant_policy.check_offer(offer, "the grant", now)
        grant = IssuedGrant(
            id=new_id(),
            with_=offer.with_,
            can=offer.can,
            issuer=by,
            audience=to,
            issued_at=now,
            expires_at=self.grant_policy.expiry(offer, now),
        )
        await self.store.give_grant(grant)
        self._changed_now()
        return grant

    # -- approval policies -----------------------------------------------------------------

    async def set_approval_policy(
        self, policy: ApprovalPolicy | Mapping[str, Any], *, by: str | None = None
    ) -> ApprovalPolicy:
        if self._state != "open":
            await self.open()
        check_text(by, "by", self.limits.max_name_length)
        data = policy_to_dict(policy, secrets=True) if isinstance(policy, ApprovalPolicy) else policy
        checked = policy_from_dict(data, allow_http=self.allow_http_hooks, max_name_length=self.limits.max_name_length)
        stored = await self.store.put_policy(checked, datetime.now(UTC), by)
        self._changed_now()
        return stored

    async def get_approval_policy(self, agent: str, server: str = "") -> ApprovalPolicy:
        if self._state != "open":
            await self.open()
        self._check_policy_key(agent, server)
        found = await self.store.get_policy(agent, server)
        if found is None:
            where = f" for server {server!r}" if server else ""
            raise NotFound(agent, message=f"no approval policy for agent {agent!r}{where}")
        return found

    async def list_approval_policies(self, agent: str | None = None) -> list[ApprovalPolicy]:
        if self._state != "open":
            await self.open()
        check_text(agent, "agent", self.limits.max_name_length)
        return list(await self.store.list_policies(agent))

    async def delete_approval_policy(self, agent: str, server: str = "", *, by: str | None = None) -> bool:
        if self._state != "open":
            await self.open()
        self._check_policy_key(agent, server)
        check_text(by, "by", self.limits.max_name_length)
        gone = await self.store.delete_policy(agent, server, by, datetime.now(UTC))
        if gone is not None:
            self._changed_now()
        return gone is not None

    async def approval_policy_for(self, agent: str, server: str = "") -> ApprovalPolicy | None:
        if self._state != "open":
            await self.open()
        self._check_policy_key(agent, server)
        if server:
            found = await self.store.get_policy(agent, server)
            if found is not None:
                return found
        return await self.store.get_policy(agent, "")

    def _check_policy_key(self, agent: str, server: str) -> None:
        if not isinstance(agent, str) or not agent:
            raise InvalidRequest("agent: name the agent the policy is for")
        check_text(agent, "agent", self.limits.max_name_length)
        check_text(server, "server", self.limits.max_name_length)

    def _settled_elsewhere(self, request: Request) -> None:
        """Another process settled a request this one waits on, and the store heard how
        with its notification: wake the waiters now (the follow loop reads its event later,
        in order, for the streams and the runs)."""
        if request.id in self._waiters:
            self._wake(request)

    def _wake(self, request: Request) -> None:
        if self._made:
            self._made.pop(request.id, None)
        present = self._waiters.pop(request.id, None)
        if present is None:
            return
        if isinstance(present, list):
            for fut in present:
                if not fut.done():
                    fut.set_result(request)
        elif not present.done():
            present.set_result(request)

    async def inform(
        self,
        message: str,
        *,
        to: str | None = None,
        session: str | None = None,
        agent: str | None = None,
        run: str | None = None,
        data: Mapping[str, Any] | None = None,
        by: str | None = None,
    ) -> Event:
        """Record a progress update for a person, without waiting for anything.

        It becomes an `informed` event, so inboxes and streams show it; the event is the
        receipt.
        """
        if self._state != "open":
            await self.open()
        if not isinstance(message, str) or not message.strip():
            raise InvalidRequest("an update needs a non-empty message")
        limits = self.limits
        if len(message) > limits.max_message_length:
            raise InvalidRequest(
                f"the message is {len(message)} characters, at most {limits.max_message_length} allowed"
            )
        check_text(message, "the message")
        for name, value in (("to", to), ("session", session), ("agent", agent), ("run", run), ("by", by)):
            check_text(value, name, limits.max_name_length)
        if data is not None:
            check_json(data, "data", limits.max_data_bytes)
        payload: dict[str, Any] = {
            "message": message,
            "to": to,
            "by": by,
            "session": session,
            "agent": agent,
            "run": run,
        }
        if data is not None:
            payload["data"] = dict(data)
        event = await self.store.append_event("informed", payload)
        self._changed_now()
        return event

    # -- reading -------------------------------------------------------------------------

    async def get(self, request_id: str) -> Request:
        """The request as stored now. Raises `NotFound` for an unknown id.

        A pending request of a parked run shows, as `expires_at`, when the run's pause
        is given up (if that comes before its own expiry): the time it will be withdrawn.
        So does one of a run running in its agent's own process, when the run is given up
        as abandoned unless that process parks it, starts it again or asks on it first
        (while it waits on a request of the run, the run's deadline moves on).
        """
        if self._state != "open":
            await self.open()
        (request,) = await self._with_run_deadlines([await self._current(request_id)])
        return request

    async def _with_run_deadlines(self, requests: list[Request]) -> list[Request]:
        runs = {r.origin.run for r in requests if r.status is Status.PENDING and r.origin.run is not None}
        if not runs:
            return requests
        deadlines: dict[str, datetime] = {}
        for run_id in runs:
            run = await self.store.get_run(run_id)
            if run is not None and run.deadline is not None:
                deadlines[run_id] = run.deadline
        out = []
        for request in requests:
            due = deadlines.get(request.origin.run or "") if request.status is Status.PENDING else None
            if due is not None and (request.expires_at is None or due < request.expires_at):
                request = evolve(request, expires_at=due)
            out.append(request)
        return out

    async def list(self, **filters: Unpack[ListFilters]) -> Page:
        if self._state != "open":
            await self.open()
        query = Query.of(filters)
        if isinstance(query.after, str):  # first: a cursor too long to be a name is no cursor either
            _id_cursor(query.after, "requests")
        query = self._checked(query)
        # One more than the page: is there a next one? A page the store cut where its
        # requests' JSON passed `PAGE_BYTES` has one too, after its last request.
        listed = await self.store.list(replace(query, limit=query.limit + 1))
        rows = list(listed.items)
        more = listed.cut or len(rows) > query.limit
        items = await self._with_run_deadlines(rows[: query.limit])
        return Page(items, items[-1].id if more and items else None)

    def _checked(self, query: Query) -> Query:
        """The query, once its filters are checked (names and text bounded as the limits say)."""
        query.check()
        for name, value, longest in query.texts():
            check_text(value, name, longest if longest is not None else self.limits.max_name_length)
        return query

    async def dashboard(
        self, *, recipient: str | None = None, teams: Sequence[str] = (), window: timedelta = DASHBOARD_WINDOW
    ) -> Dashboard:
        if self._state != "open":
            await self.open()
        if not timedelta(0) < window <= MAX_DASHBOARD_WINDOW:
            raise InvalidRequest(f"window must be more than nothing and at most {MAX_DASHBOARD_WINDOW.days} days")
        if teams and recipient is None:
            raise InvalidRequest("teams: only with recipient (a member's inbox and their teams')")
        query = self._checked(Query(recipient=recipient, teams=tuple(teams), limit=DASHBOARD_ROWS))
        if recipient is None:  # everyone's: every team has its row
            teams = [p.name for p in await self.store.list_principals() if p.kind == "team"]
        now = datetime.now(UTC)
        pending, settled = replace(query, status=Status.PENDING), replace(query, settled=True, since=now - window)
        named = set(teams)
        return layout(await self.store.figures(pending, settled, now, named), teams=named, window=window)

    async def events(self, after: int | None = None, *, follow: bool = False) -> AsyncGenerator[Event, None]:
        """The event log after event id `after`, oldest first. With `follow`, keep going
        with new events as they are appended, until the broker is closed."""
        if self._state != "open":
            await self.open()
        cursor = after or 0
        if not 0 <= cursor <= MAX_EVENT_ID:
            raise InvalidRequest(f"after must be an event id between 0 and {MAX_EVENT_ID}")
        self._followers += follow
        try:
            while True:
                changed = self._changed
                batch = await self.store.events(cursor, 500)
                for event in batch:
                    cursor = event.id
                    yield event
                if len(batch) == 500 or batch.cut:  # a page cut by the size of its requests: more follow
                    continue
                if not follow or self._state != "open":
                    return
                poll = None if math.isinf(self.store.poll_interval) else self.store.poll_interval
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(poll):
                        await changed.wait()
                if self._state != "open":
                    return  # closed while it waited: the store may be closed too
        finally:
            self._followers -= follow

    async def find_events(
        self,
        *,
        after: int = 0,
        until: int | None = None,
        limit: int = 500,
        involving: str | None = None,
        request: str | None = None,
        session: str | None = None,
        run: str | None = None,
        teams: Sequence[str] = (),
    ) -> Listed[Event]:
        """One page of the event log after `after` (and up to `until`), oldest first, with
        only the events that match every filter given: `involving` a name (requests to or
        from them, updates to or by them), of one `request`, `session` or `run`. The store
        answers from indexes: a page costs about its size, however long the log. A page
        ends before `limit` where the requests its events carry pass
        `interlock.store.PAGE_BYTES` (`Listed.cut`): page on while a page is full or cut."""
        if self._state != "open":
            await self.open()
        if not 0 <= limit <= 1000:
            raise ValueError("limit must be between 0 and 1000")
        if not 0 <= after <= MAX_EVENT_ID:
            raise InvalidRequest(f"after must be an event id between 0 and {MAX_EVENT_ID}")
        self._check_names(involving=involving, request=request, session=session, run=run)
        if limit == 0:
            return Listed([])
        query = EventQuery(after, until, limit, involving, request, session, run, tuple(teams))
        return await self.store.find_events(query)

    async def last_event_id(self) -> int:
        """The id of the newest event: pass it as `events(after=...)` to follow from now on."""
        if self._state != "open":
            await self.open()
        return await self.store.last_event_id()

    async def check_store(self) -> None:
        """Raise if the store cannot serve this process now: `Unavailable` while it cannot
        be reached, `NewerDatabase` once a later version of interlock has migrated it (every
        write of this process is then refused). One read, changing nothing."""
        if self._state != "open":
            await self.open()
        await self.store.check_schema()

    # -- runs ----------------------------------------------------------------------------

    async def start_run(
        self,
        agent: str,
        *,
        session: str | None = None,
        run_id: str | None = None,
        max_duration: float | timedelta | None = None,
        requester: str | None = None,
        exclusive: bool = False,
    ) -> Run:
        """Record a new run of `agent`, `running`. With `run_id` given, a run with that id
        already stored is returned as it is (a restarted agent finds its own run). With
        `exclusive`, refused while a run of `agent` on `session` has not ended: see
        `Broker.start_run`."""
        if self._state != "open":
            await self.open()
        _check_exclusive(exclusive, session)
        run = self._new_run(agent, session=session, run_id=run_id, max_duration=max_duration, requester=requester)
        # Until its process parks it (or starts it again), the run is given up once that
        # process has given no sign of life for as long as a pause waits on a person.
        run = evolve(run, expires_at=run.park_deadline(run.created_at, self.pause_timeout))
        stored, created = await self.store.insert_run(run, exclusive=exclusive)
        if stored.id != run.id:
            raise _session_held(stored)
        _same_agent(stored, agent)
        if not created:  # its process started it again: alive (a write only on a restart)
            stored = await self._alive(stored)
        self._know(stored)
        if created:
            self._changed_now()
        if stored.status is RunStatus.RUNNING and stored.expires_at is not None:
            self._due(stored.expires_at)
        return stored

    async def start_parked(
        self,
        agent: str,
        requests: Sequence[Request],
        *,
        state: Any,
        status: RunStatus | str | None = None,
        session: str | None = None,
        run_id: str | None = None,
        max_duration: float | timedelta | None = None,
        requester: str | None = None,
    ) -> Run:
        """Start a run of `agent` parked at once on new `requests` (built with `prepare`),
        in one transaction: the run, its requests and the park are stored together or not
        at all. See `Broker.start_parked`."""
        run = self._new_run(agent, session=session, run_id=run_id, max_duration=max_duration, requester=requester)
        if self._state != "open":
            await self.open()
        if self._closed:
            raise Closed(None, "the broker is closed")
        made = _of_run(run, _new_requests(requests, run.id, self.limits.max_name_length))
        check_json(state, "state", MAX_STATE_BYTES)
        if status is None:
            approval = any(request.kind == "approval" for request in made)
            status = RunStatus.WAITING_FOR_APPROVAL if approval else RunStatus.WAITING_FOR_INPUT
        status = RunStatus(status)
        if not status.waiting:
            raise InvalidRequest("a parked run's status is waiting_for_input or waiting_for_approval")
        deadline = run.park_deadline(run.created_at, self.pause_timeout)
        stored, created = await self.store.start_parked(run, made, state=state, status=status, expires_at=deadline)
        _same_agent(stored, agent)
        if not created:  # started again by its process, as `start_run` would be: alive
            stored = await self._alive(stored)
            if stored.status is RunStatus.RUNNING and stored.expires_at is not None:
                self._due(stored.expires_at)
        self._know(stored)
        if not created:
            return stored
        self._changed_now()
        for request in made:
            if request.expires_at is not None:
                self._due(request.expires_at)
            if self._hooks:
                self._start_hooks(request)
        self._parked(stored)
        return stored

    def _new_run(
        self,
        agent: str,
        *,
        session: str | None,
        run_id: str | None,
        max_duration: float | timedelta | None,
        requester: str | None,
    ) -> Run:
        """A new run of `agent`, running, checked but not stored."""
        self._check_run(agent, session=session, run_id=run_id, requester=requester)
        duration = None if max_duration is None else timedelta(seconds=_seconds(max_duration, "max_duration"))
        now = creation_time()  # later than any run made before it here: the newest list first
        return Run(
            id=run_id or new_id(),
            agent=agent,
            created_at=now,
            updated_at=now,
            session=session,
            requester=self.store.requester_of(requester),
            max_duration=duration,
        )

    async def park(
        self,
        run_id: str,
        *,
        state: Any,
        waiting_on: Sequence[str],
        status: RunStatus | str | None = None,
        worker: str | None = None,
    ) -> Run:
        """Park a running run on the requests it waits on (created with `run=run_id`),
        keeping its framework `state`; the calling process may exit then.

        Once every one of them has settled, the run is ready and a worker claims it
        (`claim_run`) to go on from `state`. `status` defaults to `waiting_for_approval`
        if any of them is an approval, else `waiting_for_input`. The pause is given up
        after `pause_timeout` (or the run's longer `max_duration`): the run is then
        cancelled with `terminal_reason` "interaction_timeout" and its requests withdrawn.
        A run whose last park was on the same requests is returned as it is, parked still,
        being resumed by a worker or ended since, so an agent that restarts and parks again
        (finding its requests by idempotency key) changes nothing, and takes nothing from a
        worker. Raises `RunConflict` if the run is not running, or is held by a worker other
        than `worker` (without `worker`: by any worker; only the worker holding a claimed
        run parks it again), `InvalidRequest` for requests that are not the run's.
        """
        if self._state != "open":
            await self.open()
        check_text(run_id, "the run id", DEFAULT_LIMITS.max_name_length)
        # What the deadline needs of the run (its max_duration) is known for a run this
        # broker started or claimed: then the park is one conditional write, and the run
        # is read only when that write finds it not running (parked already, or ended).
        known = self._durations.get(run_id, _UNKNOWN)
        run = await self._current_run(run_id) if known is _UNKNOWN else None
        if isinstance(waiting_on, str) or not isinstance(waiting_on, Sequence) or not waiting_on:
            raise InvalidRequest("waiting_on must list the ids of the requests the run waits on")
        if len(waiting_on) > 1000:
            raise InvalidRequest(f"waiting_on: {len(waiting_on)} requests, at most 1000 allowed")
        check_json(state, "state", MAX_STATE_BYTES)
        kinds = set()
        for request_id in dict.fromkeys(waiting_on):
            if not isinstance(request_id, str):
                raise InvalidRequest("waiting_on must list request ids (strings)")
            _check_id(request_id)
            request = await self.store.get(request_id, fresh=False)
            if request is None:
                raise InvalidRequest(f"waiting_on: no request with id {request_id!r}")
            if request.origin.run != run_id:
                raise InvalidRequest(f"waiting_on: request {request_id!r} is not a request of run {run_id!r}")
            kinds.add(request.kind)
        if run is not None and (parked_already := self._parked_already(run, waiting_on, worker)) is not None:
            return parked_already
        if status is None:
            status = RunStatus.WAITING_FOR_APPROVAL if "approval" in kinds else RunStatus.WAITING_FOR_INPUT
        status = RunStatus(status)
        if not status.waiting:
            raise InvalidRequest("a parked run's status is waiting_for_input or waiting_for_approval")
        now = datetime.now(UTC)
        if run is not None:
            deadline = run.park_deadline(now, self.pause_timeout)
        else:
            deadline = park_deadline(now, self.pause_timeout, cast("timedelta | None", known))
        parked = await self.store.park_run(
            run_id,
            state=state,
            waiting_on=list(dict.fromkeys(waiting_on)),
            status=status,
            expires_at=deadline,
            at=now,
            worker=worker,
        )
        if parked is None:
            current = await self._current_run(run_id)
            if (parked_already := self._parked_already(current, waiting_on, worker)) is not None:
                return parked_already
            raise await self._run_conflict(run_id, worker, "parks it again")
        self._parked(parked)
        return parked

    @staticmethod
    def _parked_already(run: Run, waiting_on: Sequence[str], worker: str | None) -> Run | None:
        """The run, if its last park was on these requests and it is parked on them still,
        is being resumed by a worker that claimed it since, or has ended since: a restarted
        agent parking again changes nothing, as its creates with their keys do. (A park by
        a worker, `worker`, is its own.)"""
        if (
            worker is None
            and (run.status.waiting or run.status.ended or run.worker is not None)
            and run.waiting_on
            and set(run.waiting_on) == set(waiting_on)
        ):
            return run
        return None

    def _parked(self, parked: Run) -> None:
        """After a park: wake the waiting claims if it is ready already, and the expiry loop
        if its deadline comes first."""
        self._changed_now()
        if parked.ready:
            self._runs_ready_now()
        if parked.expires_at is not None:
            self._due(parked.expires_at)

    def _due(self, deadline: datetime) -> None:
        """Wake the expiry loop for a new deadline only if it would sleep past it: not for
        one after the loop's next look (its next due, or its next bounded poll)."""
        if self._next_due is not None and deadline >= self._next_due:
            return
        poll = self.store.poll_interval
        if not math.isinf(poll) and deadline > datetime.now(UTC) + timedelta(seconds=poll):
            return  # the loop looks again within `poll` seconds and finds it then
        self._expiry_kick.set()

    def _know(self, run: Run) -> None:
        """Keep what a later park of this run needs (bounded: the oldest are forgotten)."""
        durations = self._durations
        durations[run.id] = run.max_duration
        if len(durations) > _KNOWN_RUNS:
            del durations[next(iter(durations))]

    @property
    def claims_waiting(self) -> int:
        """How many claims wait in this broker for a run to become ready: its idle workers,
        or a server's workers long-polling for runs. An answer given through this broker
        that makes a run ready hands it to the first of them, in the answer's own
        transaction, so that one resumes it without a claim of its own."""
        return len(self._waiting)

    async def claim_run(
        self,
        agents: Sequence[str] | None = None,
        *,
        worker: str,
        lease: float = DEFAULT_LEASE,
        wait: float = 0.0,
        requester: str | None = None,
    ) -> Run | None:
        """Claim one run of `agents` (any when None) that is ready to go on, for `worker`,
        waiting up to `wait` seconds for one (with `requester`, only runs it started: what
        a server gives an agent's token).

        Exactly one worker, in any process, gets each run: a parked run whose requests
        have all settled, or a running one whose worker's lease ran out (it died). The
        run is `running` again, held by `worker` for `lease` seconds.
        """
        if self._state != "open":
            await self.open()
        if isinstance(agents, str):
            agents = [agents]
        for name in [*(agents or ()), worker]:
            check_text(name, "an agent or worker name", self.limits.max_name_length)
        if not worker:
            raise InvalidRequest("a worker needs a name")
        seconds = _seconds(lease, "lease")
        clock = asyncio.get_running_loop().time
        deadline = clock() + max(float(wait), 0.0)
        key = (None if agents is None else tuple(agents), requester)
        # Woken when a run may have become ready (a request of a run settled, a run parked
        # ready, another process's settlements); a lease running out writes nothing, so a
        # waiting claim looks again `period` seconds after its last look. A claim that may
        # wait need not look at all if a claim of the same runs found none less than
        # `period` ago and nothing has happened since that may make one ready: it waits
        # from where that look left off, as a claim that had kept waiting would. So a
        # worker handed run after run by the answers looks once, not once a run.
        period = min(self.store.poll_interval, 1.0)
        found_none = self._found_none
        count = self._ready_count  # as the last look saw it
        looked: float | None = None
        if wait > 0 and found_none is not None and found_none[:2] == (key, count) and clock() - found_none[2] < period:
            looked = found_none[2]
        self._claimers += 1  # so a run that may be ready wakes `_ready`
        try:
            while True:
                ready = self._ready
                if looked is None:
                    count = self._ready_count
                    now = datetime.now(UTC)
                    looking = self.store.claim_run(
                        None if agents is None else list(agents),
                        worker=worker,
                        lease_expires_at=now + timedelta(seconds=seconds),
                        at=now,
                        requester=requester,
                    )
                    if self._now is not None:  # a store whose calls never wait: no cancel comes in between
                        run = await looking
                    else:
                        claiming = asyncio.ensure_future(looking)
                        try:
                            run = await asyncio.shield(claiming)
                        except asyncio.CancelledError:
                            self._give_back_if_claimed(claiming)
                            raise
                    if run is not None:
                        self._know(run)
                        self._changed_now()
                        return run
                    looked = clock()
                    self._found_none = (key, count, looked)
                remaining = deadline - clock()
                if remaining <= 0 or self._state != "open":
                    return None
                # Meanwhile an answer given through this broker may hand this claim its run
                # in its own transaction.
                waiting = _Waiting(key[0], requester, worker, seconds)
                self._waiting.append(waiting)
                try:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(min(remaining, max(looked + period - clock(), 0.0))):
                            await ready.wait()
                finally:
                    if waiting.handed is None:  # else an answer took it off the queue already
                        self._waiting.remove(waiting)
                if self._ready_count != count or clock() - looked >= period:
                    looked = None  # a run may be ready, or it is time to look again anyway
                if waiting.handed is not None:  # an answer is handing this claim a run: take it
                    try:
                        handed = await asyncio.shield(waiting.handed)
                    except asyncio.CancelledError:
                        self._give_back_if_claimed(waiting.handed)
                        raise
                    if handed is not None:
                        self._changed_now()
                        return handed
        finally:
            self._claimers -= 1

    def _give_back_if_claimed(self, claiming: asyncio.Future[Run | None]) -> None:
        """A claim cancelled while the store claimed a run for it (its caller gone: a worker
        stopping, a server's long poll whose client hung up or whose token was revoked):
        the run it claimed all the same, if any, is given back once the store has answered,
        rather than held by nobody until its lease runs out."""

        def claimed(done: asyncio.Future[Run | None]) -> None:
            if done.cancelled() or done.exception() is not None:
                return
            run = done.result()
            if run is not None and run.worker is not None:
                self._spawn(self._give_back(run.id, run.worker, "its claim was cancelled"))

        claiming.add_done_callback(claimed)

    async def _give_back(self, run_id: str, worker: str, why: str) -> None:
        try:
            if await self.release_claim(run_id, worker=worker):
                log.info("run %s claimed for worker %s was given back: %s", run_id, worker, why)
        except Exception as exc:  # its lease hands it on all the same
            log.warning(
                "could not give back run %s claimed for worker %s (%s: %s)", run_id, worker, type(exc).__name__, exc
            )

    async def release_claim(self, run_id: str, *, worker: str) -> bool:
        """Give back a run claimed for `worker` that it will not resume (the claim's caller
        was gone when it was made): its lease ends now, so any worker claims it at once, as
        it would once the lease had run out. False if `worker` holds it no longer."""
        if self._state != "open":
            await self.open()
        _check_id(run_id)
        released = await self.store.renew_lease(run_id, worker=worker, lease_expires_at=datetime.now(UTC))
        if released:
            self._runs_ready_now()  # the claims waiting here look again now
        return released

    async def renew_lease(self, run_id: str, *, worker: str, lease: float = DEFAULT_LEASE) -> bool:
        """Hold a claimed run `lease` seconds more. False if `worker` holds it no longer."""
        if self._state != "open":
            await self.open()
        _check_id(run_id)
        until = datetime.now(UTC) + timedelta(seconds=_seconds(lease, "lease"))
        return await self.store.renew_lease(run_id, worker=worker, lease_expires_at=until)

    async def complete_run(self, run_id: str, result: Any = None, *, worker: str | None = None) -> Run:
        """End a running run as `completed` with its `result` (JSON): a run `worker` holds,
        or without `worker`, a run no worker holds (an agent's own, going on in its
        process). Raises `RunConflict` if it is not running, or a worker other than
        `worker` holds it (without `worker`: any worker, which resumes it and ends it;
        `cancel_run` stops it whoever holds it)."""
        check_json(result, "result", MAX_STATE_BYTES)
        return await self._end(run_id, RunStatus.COMPLETED, worker, "completes it", result=result)

    async def fail_run(self, run_id: str, error: str, *, worker: str | None = None) -> Run:
        """End a running run as `failed` (`terminal_reason` "error") with `error`: a run
        `worker` holds, or without `worker`, a run no worker holds. Raises `RunConflict`
        as `complete_run` does."""
        if not isinstance(error, str):
            raise InvalidRequest("error must be a string")
        check_text(error, "error", self.limits.max_reason_length)
        return await self._end(run_id, RunStatus.FAILED, worker, "fails it", error=error, terminal_reason="error")

    async def _end(self, run_id: str, status: RunStatus, worker: str | None, does: str, **fields: Any) -> Run:
        if self._state != "open":
            await self.open()
        check_text(run_id, "the run id", DEFAULT_LIMITS.max_name_length)
        # The store's conditional write checks that the run is running and held by `worker`
        # (without one: by no worker, so an agent never ends a run a worker is resuming).
        # Requests of it still pending (made and never waited on) are withdrawn: nobody
        # would read their answers.
        now = datetime.now(UTC)
        withdraw = Response(now, by=worker, via="python", reason=f"the run {status.value}", cause="withdrawn")
        ended, cancelled = await self.store.end_run(run_id, status, at=now, worker=worker, withdraw=withdraw, **fields)
        for request in cancelled:
            self._wake(request)
        if ended is None:
            raise await self._run_conflict(run_id, worker, does)
        self._durations.pop(run_id, None)
        self._changed_now()
        return ended

    async def cancel_run(
        self, run_id: str, reason: str = "cancelled_by_user", *, by: str | None = None, via: str = "python"
    ) -> bool:
        """End a run that has not ended as `cancelled` (`terminal_reason` is `reason`) and
        withdraw its pending requests, in one transaction. False if it had ended already;
        raises `NotFound` for an unknown run."""
        if self._state != "open":
            await self.open()
        check_text(reason, "reason", self.limits.max_name_length)
        check_text(by, "by", self.limits.max_name_length)
        check_text(via, "via", self.limits.max_name_length)
        if not reason:
            raise InvalidRequest("a cancelled run needs a reason")
        run = await self._current_run(run_id)
        now = datetime.now(UTC)
        withdraw = Response(now, by=by, via=via, reason=f"the run was cancelled ({reason})", cause="cancelled")
        ended, cancelled = await self.store.end_run(
            run.id, RunStatus.CANCELLED, at=now, terminal_reason=reason, withdraw=withdraw
        )
        for request in cancelled:
            self._wake(request)
        if ended is None:
            return False
        self._changed_now()
        return True

    async def get_run(self, run_id: str) -> Run:
        """The run as stored now, with its state. Raises `NotFound` for an unknown id."""
        if self._state != "open":
            await self.open()
        return await self._current_run(run_id)

    async def list_runs(
        self,
        *,
        agent: str | None = None,
        session: str | None = None,
        status: RunStatus | str | None = None,
        requester: str | None = None,
        involving: str | None = None,
        teams: Sequence[str] = (),
        after: str | None = None,
        limit: int = 50,
        order: Literal["asc", "desc"] = "desc",
    ) -> RunPage:
        """Runs matching every filter given, newest first by default (by when each was
        made, then by id), a page at a time; `after` is a page's `next_cursor`.
        `involving` keeps the runs a person may see: those the name started, those the
        agents it owns started and those with requests to it, and with `teams` those with
        requests to one of these teams (a member's)."""
        if self._state != "open":
            await self.open()
        if not 1 <= limit <= 1000:
            raise ValueError("limit must be between 1 and 1000")
        if order not in ("asc", "desc"):
            raise ValueError("order must be 'asc' or 'desc'")
        # First the cursor: text too long to be one is no cursor either (a run's id is at
        # most a name long; the cursor is longer by its time).
        before = _keyset(after, "runs", self.limits.max_name_length) if isinstance(after, str) else None
        filters = {"agent": agent, "session": session, "requester": requester, "involving": involving}
        for name, value in filters.items():
            check_text(value, name, self.limits.max_name_length)
        check_text(after, "cursor")
        try:
            wanted = RunStatus(status) if status is not None else None
        except ValueError:
            raise InvalidRequest(f"unknown run status {status!r}") from None
        for team in teams:
            check_text(team, "team", self.limits.max_name_length)
        query = RunQuery(
            **filters,
            teams=tuple(teams),
            status=wanted,
            after=before,
            limit=limit + 1,
            order=order,
        )
        rows = list(await self.store.list_runs(query))
        more = len(rows) > limit
        items = rows[:limit]
        return RunPage(items, _run_cursor(items[-1]) if more else None)

    # -- follow-up messages ------------------------------------------------------------------

    async def send_message(
        self,
        run_id: str,
        text: str,
        *,
        by: str | None = None,
        may_answer: Callable[[Request], bool] | None = None,
    ) -> Sent:
        """Send a person's message to a run that has not ended; it is never dropped.

        Parked on an approval, `approve` / `deny` (or `1` / `2`) decides the run's oldest
        pending approval (`Sent.resolved`; only one `may_answer` accepts, when given);
        any other message, and every message to a run parked on a question or working,
        is held (`Sent.followup`) until the run's agent takes it at its next turn
        boundary. Neither when the run holds `max_followups` messages already. Raises
        `RunConflict` for a run that has ended (nothing is held: start a new run),
        `InvalidRequest` for an empty or too long message.
        """
        if self._state != "open":
            await self.open()
        if not isinstance(text, str) or not text.strip():
            raise InvalidRequest("a message needs some text")
        check_text(text, "the message", MAX_FOLLOWUP_LENGTH)
        check_text(by, "by", self.limits.max_name_length)
        run = await self._current_run(run_id)
        if run.status.ended:
            raise RunConflict(
                run.id, run.status.value, f"run {run.id!r} has ended ({run.status.value}): nothing was held"
            )
        decision = approval_word(text) if run.status is RunStatus.WAITING_FOR_APPROVAL else None
        if decision is not None:
            resolved = await self._decide_by_message(run, decision, by, may_answer)
            if resolved is not None:
                return Sent(run.id, resolved=resolved)
        followup = Followup(new_id(), run.id, text, datetime.now(UTC), by)
        held = await self.store.enqueue_followup(followup, limit=self.max_followups)
        if held is None:
            current = await self._current_run(run.id)
            if current.status.ended:  # it ended meanwhile
                raise RunConflict(
                    run.id, current.status.value, f"run {run.id!r} has ended ({current.status.value}): nothing was held"
                )
        else:
            self._changed_now()  # its `followup_queued` event: wake the streams that follow
        return Sent(run.id, followup=held)

    async def _decide_by_message(
        self, run: Run, approve: bool, by: str | None, may_answer: Callable[[Request], bool] | None
    ) -> str | None:
        """Decide the run's oldest pending approval that `by` may answer; its id, or None."""
        for request_id in run.waiting_on:
            request = await self.store.get(request_id)
            if request is None or request.status is not Status.PENDING:
                continue
            decision = decision_ask(request)  # the yes/no ask; the others (edits) are optional
            if decision is None or (may_answer is not None and not may_answer(request)):
                continue
            try:
                if await self.resolve(request.id, Answers({decision.id: approve}), by=by, via="message"):
                    return request.id
            except InvalidAnswer:  # an approval that a bare yes or no does not answer: hold the message
                continue
        return None

    async def list_followups(self, run_id: str) -> Sequence[Followup]:
        """The messages held for a run, oldest first; on an ended run, those it never
        delivered (read-only). Raises `NotFound` for an unknown run."""
        if self._state != "open":
            await self.open()
        run = await self._current_run(run_id)
        return list(await self.store.list_followups(run.id))

    async def withdraw_followup(self, run_id: str, followup_id: str, *, by: str | None = None) -> Followup:
        """Withdraw a held message before it is delivered. Raises `FollowupNotFound` once
        it is gone: withdrawn, taken for delivery, or read-only on an ended run."""
        if self._state != "open":
            await self.open()
        check_text(followup_id, "the follow-up id", self.limits.max_name_length)
        run = await self._current_run(run_id)
        withdrawn = await self.store.withdraw_followup(run.id, followup_id, at=datetime.now(UTC))
        if withdrawn is None:
            raise FollowupNotFound(followup_id)
        self._changed_now()
        return withdrawn

    async def take_followups(self, run_id: str, *, worker: str | None = None) -> Sequence[Followup]:
        """At a turn boundary of a running run held by `worker` (without `worker`: by no
        worker, an agent's own): take every held message for delivery, oldest first, each
        with its `followup_replayed` event. Nothing when the run is not running. Raises
        `RunConflict` if a worker other than `worker` holds it (without `worker`: any
        worker, which resumes it and takes its messages), whether or not any are held."""
        if self._state != "open":
            await self.open()
        check_text(worker, "worker", self.limits.max_name_length)
        run = await self._current_run(run_id)
        # The store's conditional take checks who holds the run, in the same transaction.
        claimed = await self.store.claim_followups(run.id, at=datetime.now(UTC), worker=worker)
        if claimed is None:
            raise await self._run_conflict(run.id, worker, "takes its messages")
        taken = list(claimed)
        if taken:
            self._changed_now()
        return taken

    # -- teams ---------------------------------------------------------------------------

    async def list_teams(self) -> Mapping[str, Sequence[str]]:
        if self._state != "open":
            await self.open()
        store = self.store
        names = [p.name for p in await store.list_principals() if p.kind == "team"]
        return {name: tuple(await store.team_members(name) or ()) for name in names}

    async def team_members(self, team: str) -> Sequence[str] | None:
        if self._state != "open":
            await self.open()
        self._check_names(team=team)
        return await self.store.team_members(team)

    async def add_team_members(self, team: str, members: Sequence[str] = ()) -> Sequence[str]:
        if self._state != "open":
            await self.open()
        store = self.store
        try:
            await store.save_team(team, members)
        except ValueError as exc:  # the store's words for a name taken, or a member who is no person
            if isinstance(exc, InvalidRequest):
                raise
            raise InvalidRequest(str(exc)) from None
        return await store.team_members(team) or ()

    async def remove_team_member(self, team: str, member: str) -> bool:
        if self._state != "open":
            await self.open()
        if not await self.store.remove_team_members(team, [member]):
            return False
        await self._release_claims(team, {member})
        self._changed_now()  # its `team_left` event ends their streams here too, at once
        return True

    async def delete_team(self, team: str) -> bool:
        if self._state != "open":
            await self.open()
        members = set(await self.store.team_members(team) or ())
        if not await self.store.delete_team(team):
            return False
        await self._release_claims(team, members)
        self._changed_now()
        return True

    async def _release_claims(self, team: str, left: set[str]) -> None:
        """Give up (with `unclaimed` events) the claims that people who left `team` held on
        its pending requests: a claim tells the other members who is on it, and they are not."""
        if not left:
            return
        now = datetime.now(UTC)
        after: str | None = None
        while True:
            page = await self.list(recipient=team, status=Status.PENDING, after=after, limit=1000)
            for request_id, claim in (await self.store.claims([r.id for r in page.items])).items():
                if claim.by in left:
                    await self.store.unclaim(request_id, claim.by, now)
            if page.next_cursor is None:
                return
            after = page.next_cursor

    # -- the outbox ----------------------------------------------------------------------

    async def list_deliveries(
        self,
        *,
        request_id: str | None = None,
        status: DeliveryState | None = None,
        recipient: str | None = None,
        after: str | None = None,
        limit: int = 100,
        teams: Sequence[str] = (),
    ) -> Sequence[Delivery]:
        """As `Broker.list_deliveries`; with `teams` beside `recipient`, also the
        deliveries of the requests addressed to those teams (a member's view: a server
        lists a person's own and their teams')."""
        if not 1 <= limit <= 1000:
            raise ValueError("limit must be between 1 and 1000")
        if self._state != "open":
            await self.open()
        if isinstance(after, str):  # first: text too long to be a delivery's id is no cursor either
            _id_cursor(after, "deliveries", prefix=DELIVERY_ID_PREFIX)
        check_text(after, "cursor")
        self._check_names(request=request_id, recipient=recipient)
        for team in teams:
            self._check_names(teams=team)
        return await self.store.list_deliveries(
            request_id=request_id, status=status, recipient=recipient, teams=tuple(teams), after=after, limit=limit
        )

    async def dead_letters(
        self, *, recipient: str | None = None, after: str | None = None, limit: int = 50, teams: Sequence[str] = ()
    ) -> DeliveryPage:
        """As `Broker.dead_letters`; with `teams` beside `recipient`, also the dead letters
        of the requests addressed to those teams (see `list_deliveries`)."""
        if not 1 <= limit <= 1000:
            raise ValueError("limit must be between 1 and 1000")
        if self._state != "open":
            await self.open()
        # First the cursor: text too long to be one is no cursor either.
        before = _keyset(after, "dead letters", self.limits.max_name_length) if isinstance(after, str) else None
        for name, value in (("recipient", recipient), ("cursor", after)):
            check_text(value, name, None if name == "cursor" else self.limits.max_name_length)
        rows = list(
            await self.store.list_dead_letters(recipient=recipient, teams=tuple(teams), before=before, limit=limit + 1)
        )
        items = rows[:limit]
        return DeliveryPage(items, _cursor(items[-1].due_at, items[-1].id) if len(rows) > limit else None)

    async def get_delivery(self, delivery_id: str) -> Delivery:
        if self._state != "open":
            await self.open()
        # An id no store could hold (a NUL, which PostgreSQL's text cannot) is refused alike on every store.
        check_text(delivery_id, "the delivery id", DEFAULT_LIMITS.max_name_length)
        found = await self.store.get_delivery(delivery_id)
        if found is None:
            raise NotFound(delivery_id, message=f"no delivery {delivery_id}")
        return found

    async def retry_delivery(self, delivery_id: str) -> Delivery:
        known = await self.get_delivery(delivery_id)
        again = await self.store.retry_delivery(delivery_id, datetime.now(UTC))
        if again is None:
            raise AlreadySettled(
                delivery_id, known.status, f"delivery {delivery_id} is {known.status}, not a dead letter"
            )
        return again

    async def routing(self) -> dict[str, Any] | None:
        if self._state != "open":
            await self.open()
        document = await stored_routing(self.store)
        return None if document is None else masked(document)

    async def with_secrets_kept(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """A routing document to replace the one in use, with each secret given as `***`
        (as `routing` shows it) put back from the routing in use; `RoutingError` for a
        `***` with no such secret behind it (see `interlock.routing.unmasked`)."""
        if self._state != "open":
            await self.open()
        return unmasked(document, await stored_routing(self.store))

    async def set_routing(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """Replace the routing in use, checked as a routing file is (its channels are made,
        and so checked further, by the loops that use it, and by a server's API before it
        keeps one). A secret given as `***` keeps the secret that channel has now
        (`with_secrets_kept`)."""
        try:
            routing = routing_from_dict(await self.with_secrets_kept(document))
        except RoutingError as exc:
            raise InvalidRequest(str(exc)) from None
        store = self.store
        stored = await store.load_setting(ROUTING_SETTING)
        digest = stored.get("file_digest") if isinstance(stored, Mapping) else None  # a file unchanged does not undo it
        document = {"document": dict(routing.source), "file_digest": digest, "since": _since(stored)}
        await store.save_setting(ROUTING_SETTING, document)
        return masked(routing.source)

    # -- what only a local broker does: its store's outbox, principals, tokens and sessions --

    @property
    def outbox(self) -> DeliveryPort:
        """The outbox of this broker's store, for a delivery loop run in this process
        (`interlock serve --routing`, `interlock deliver`): the loop leases its notices and
        deliveries there. A remote broker has none: its server runs its own loop."""
        return self.store

    async def settle_routing(self, file: Routing | None) -> Routing | None:
        """The routing a delivery loop starting here uses. A routing file (`file`) replaces
        the stored routing when there is none or when the file changed since it last did;
        otherwise the stored one (as `set_routing` last made it) is used. None when there is
        neither."""
        if self._state != "open":
            await self.open()
        store = self.store
        stored = await store.load_setting(ROUTING_SETTING)
        if file is not None:
            digest = _digest(file.source)
            if not isinstance(stored, Mapping) or stored.get("file_digest") != digest:
                kept = {"document": dict(file.source), "file_digest": digest, "since": _since(stored)}
                await store.save_setting(ROUTING_SETTING, kept)
                return file
        document = await stored_routing(store)
        if document is None:
            return None
        if file is not None and dict(document) == dict(file.source):
            return file
        return routing_from_dict(document)

    async def get_principal(self, name: str) -> Principal | None:
        """The human, agent or team of that name in this store."""
        if self._state != "open":
            await self.open()
        return await self.store.get_principal(name)

    async def list_principals(self) -> Sequence[Principal]:
        """Every human, agent and team in this store, by name."""
        if self._state != "open":
            await self.open()
        return await self.store.list_principals()

    async def save_principal(self, principal: Principal) -> None:
        """Add a human or an agent, or change the kind and owner of one of that name."""
        if self._state != "open":
            await self.open()
        await self.store.save_principal(principal)

    async def teams_of(self, name: str) -> frozenset[str]:
        """The teams `name` is a member of."""
        if self._state != "open":
            await self.open()
        return await self.store.teams_of(name)

    async def save_token(self, token: IssuedToken) -> None:
        """Keep a token issued for a principal of this store (by its hash)."""
        if self._state != "open":
            await self.open()
        await self.store.save_token(token)

    async def live_token(self, token_hash: str) -> LiveToken | None:
        """The id and principal of the live (unrevoked) token of this hash."""
        if self._state != "open":
            await self.open()
        return await self.store.live_token(token_hash)

    async def list_tokens(self) -> Sequence[TokenInfo]:
        """Every live token here (its id, never its secret), by principal, oldest first."""
        if self._state != "open":
            await self.open()
        return await self.store.list_tokens()

    async def tokens_all_revoked(self, principal: str) -> bool:
        """Whether `principal` had tokens of their own and every one is revoked (`token
        revoke NAME` cut them off): no sign-in link signs them in, by email or otherwise."""
        if self._state != "open":
            await self.open()
        return await self.store.tokens_all_revoked(principal)

    async def revoke_tokens(self, *, token_id: str | None = None, principal: str | None = None) -> int:
        """Revoke one token by id, or every token of a principal, with the web sessions
        opened with them (a `token_revoked` event ends their streams on every node); how
        many were revoked. A person revoked by name is cut off (`tokens_all_revoked`) even
        with no token of their own (one who signs in by links only, the person `serve` made
        at the first start): a token of theirs is kept revoked, whose secret nobody ever
        had, until `token create` gives them a live one."""
        if self._state != "open":
            await self.open()
        revoked = await self.store.revoke_tokens(token_id=token_id, principal=principal)
        if token_id is None and principal is not None and not await self.store.tokens_all_revoked(principal):
            found = await self.store.get_principal(principal)
            if found is not None and found.kind == "human":
                marker = issue_token(principal, datetime.now(UTC))
                await self.store.save_token(marker)
                await self.store.revoke_tokens(token_id=marker.id)
        self._changed_now()
        return revoked

    async def start_session(self, token_hash: str, session: IssuedSession) -> WebSession | None:
        """Keep a web inbox session opened with the live token of this hash; None if there
        is none."""
        if self._state != "open":
            await self.open()
        return await self.store.start_session(token_hash, session)

    async def get_session(self, session_hash: str, now: datetime) -> WebSession | None:
        """The web inbox session of this hash, while unexpired and its token is live."""
        if self._state != "open":
            await self.open()
        return await self.store.get_session(session_hash, now)

    async def end_session(self, session_hash: str) -> WebSession | None:
        """End a web inbox session (a `signed_out` event ends its streams on every node)."""
        if self._state != "open":
            await self.open()
        ended = await self.store.end_session(session_hash)
        self._changed_now()
        return ended

    async def save_signin_link(self, link: IssuedSignInLink) -> None:
        """Keep a one-time sign-in link (by its hash) for a person of this store."""
        if self._state != "open":
            await self.open()
        await self.store.save_signin_link(link)

    async def use_signin_link(self, link_hash: str, now: datetime) -> Principal | None:
        """Spend the one-time sign-in link of this hash: whom it signs in, for the one
        caller on any node that spends it; None for a link unknown, used or expired."""
        if self._state != "open":
            await self.open()
        return await self.store.use_signin_link(link_hash, now)

    async def check_secret_key(self, secret: str | None, *, record: bool = True) -> str | None:
        """Whether a node that signs with `secret` (None or "": with a key it makes at start)
        signs as the other nodes on this store do, so that they take back the links and
        tokens it hands out (`interlock.secret_key`). The first with a key records the
        key's fingerprint (unless `record` is false: a look that changes nothing, for a
        node that checks its other keys before it records any). None when it does, or when
        no node with a key came before; otherwise why not, on one line that says what to do."""
        if self._state != "open":
            await self.open()
        if not secret:
            return NO_KEY if await self.store.key_fingerprint() is not None else None
        mine = fingerprint(secret)
        if not record:
            return None if await self.store.key_fingerprint() in (None, mine) else OTHER_KEY
        return None if await self.store.keep_key_fingerprint(mine, datetime.now(UTC)) == mine else OTHER_KEY

    async def rotate_secret_key(self, secret: str | None) -> bool:
        """Make `secret` the key the nodes on this store sign with from now on: nodes with
        another are refused at start (`check_secret_key`). None records no key: nodes
        without one start again, until one with a key records its own. A grant key
        recorded as derived from the secret key is forgotten with it: the first node
        started with the new key records the grant key it derives (`check_grant_key`).
        Whether this changed the key recorded."""
        if self._state != "open":
            await self.open()
        before = await self.store.key_fingerprint()
        after = fingerprint(secret) if secret else None
        if after != before:
            at = datetime.now(UTC)
            await self.store.replace_key_fingerprint(after, at)
            grant_key = await self.store.grant_key_id()
            if grant_key is not None and grant_key.derived:
                await self.store.replace_grant_key_id(None, at)
        return after != before

    async def check_grant_key(self, kid: str | None, *, derived: bool = False, record: bool = True) -> str | None:
        """Whether a node that signs grant tokens with the key of id `kid` (`GrantSigner.kid`;
        None: with a key it makes at start; `derived`: with the key derived from its secret
        key) signs them as the other nodes on this store do, so that the tokens it hands
        out verify against any node's key set (`interlock.secret_key`). The first with a
        stable key records its id (unless `record` is false, as for `check_secret_key`).
        None when it does, or when no node with a stable key came before; otherwise why
        not, on one line that names both ids and says what to do."""
        if self._state != "open":
            await self.open()
        if not kid or not record:
            kept = await self.store.grant_key_id()
            if kept is None or kept.kid == kid:
                return None
            return other_grant_key(kept, GrantKeyId(kid, derived)) if kid else no_grant_key(kept)
        mine = GrantKeyId(kid, derived)
        kept = await self.store.keep_grant_key_id(mine, datetime.now(UTC))
        return None if kept.kid == mine.kid else other_grant_key(kept, mine)

    async def rotate_grant_key(self, kid: str | None, *, derived: bool = False) -> bool:
        """Make the key of id `kid` (`GrantSigner.kid`; `derived`: the key derived from
        the secret key) the one the nodes on this store sign grant tokens with from now on:
        nodes with another are refused at start (`check_grant_key`). None records no key:
        nodes that make theirs at start are admitted again, until one with a stable key
        records its own. Whether this changed the key recorded."""
        if self._state != "open":
            await self.open()
        before = await self.store.grant_key_id()
        after = GrantKeyId(kid, derived) if kid else None
        if after != before:
            await self.store.replace_grant_key_id(after, datetime.now(UTC))
        return after != before

    async def use_answer_link(self, use: LinkUse, expires_at: datetime) -> tuple[LinkUse, bool]:
        """Record the use of a one-click answer link unless it was used already: the use
        that stands, and whether it is this one (one caller on any node records its use)."""
        if self._state != "open":
            await self.open()
        return await self.store.use_answer_link(use, expires_at)

    async def answer_link_use(self, link: str) -> LinkUse | None:
        """The recorded use of the one-click answer link of this id, if it was used."""
        if self._state != "open":
            await self.open()
        return await self.store.answer_link_use(link)

    async def _current_run(self, run_id: str) -> Run:
        check_text(run_id, "the run id", DEFAULT_LIMITS.max_name_length)
        run = await self.store.get_run(run_id)
        if run is None:
            raise NotFound(run_id, message=f"no run with id {run_id!r}")
        return run

    async def _run_conflict(self, run_id: str, worker: str | None, does: str) -> RunConflict:
        """Why `worker` (None: not a worker, an agent) may not do what it `does` to a run:
        the run is not running (parked, or ended), or another worker holds it."""
        run = await self._current_run(run_id)
        if run.status is RunStatus.RUNNING and worker is None and run.worker is not None:
            return RunConflict(
                run.id,
                run.status.value,
                f"run {run.id!r} is held by worker {run.worker}, which resumes it: only that worker {does}",
            )
        if run.status is RunStatus.RUNNING and worker is not None and run.worker != worker:
            return RunConflict(run.id, run.status.value, f"run {run.id!r} is held by another worker now")
        return RunConflict(run.id, run.status.value, f"run {run.id!r} is {run.status.value}, not running")

    def _changed_now(self) -> None:
        if self._followers:
            self._changed.set()
            self._changed = asyncio.Event()

    def _runs_ready_now(self) -> None:
        """A run may have become ready to claim: wake the claims waiting for one."""
        self._ready_count += 1
        self._wake_claims()

    def _wake_claims(self) -> None:
        if self._claimers:
            self._ready.set()
            self._ready = asyncio.Event()

    # -- background work -----------------------------------------------------------------

    async def _expire_due(self) -> None:
        now = datetime.now(UTC)
        # Abandoned pauses first: a run given up cancels its requests, which may fall due now too.
        gone = Response(now, via="expiry", reason="interaction_timeout", cause="cancelled")
        abandoned = Response(now, via="expiry", reason="abandoned", cause="cancelled")
        for _, cancelled in await self.store.expire_runs(now, gone, abandoned=abandoned):
            for request in cancelled:
                self._wake(request)
            self._changed_now()
        expired = await self.store.settle_pending(Status.EXPIRED, Response(now, via="expiry"), due=now)
        for request in expired:
            self._wake(request)
        if expired:
            self._changed_now()
            if any(request.origin.run is not None for request in expired):
                self._runs_ready_now()
        dues = [due for due in (await self.store.next_expiry(), await self.store.next_run_expiry()) if due is not None]
        self._next_due = min(dues) if dues else None

    async def _expiry_loop(self) -> None:
        """Expire overdue requests, whether or not anyone waits on them."""
        poll = None if math.isinf(self.store.poll_interval) else self.store.poll_interval
        refused = False
        outage = Outage(log, "expiring overdue requests")
        while True:
            delay = poll
            if self._next_due is not None:
                until = max((self._next_due - datetime.now(UTC)).total_seconds(), 0.0)
                delay = until if delay is None else min(delay, until)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._expiry_kick.wait()
            self._expiry_kick.clear()
            try:
                await self._expire_due()
                outage.ended()
            except NewerDatabase as exc:  # no write goes through until a restart: say so once
                if not refused:
                    log.error("this process expires no request any more: %s", exc)
                    refused = True
                self._next_due = datetime.now(UTC) + timedelta(seconds=NEWER_DATABASE_RETRY)
            except Unavailable as exc:  # the store is away for now: no bug to trace
                outage.failed(exc, "trying again in 1 s")
                self._next_due = datetime.now(UTC) + timedelta(seconds=1)
            except Exception:
                log.exception("expiring overdue requests failed; trying again")
                self._next_due = datetime.now(UTC) + timedelta(seconds=1)

    async def _keep_loop(self) -> None:
        """Keep alive the runs that calls in this process wait on (`wait`, `ask`, an approval
        gate waiting in its process, and through the server its maker's long poll with
        `keep_run`, as the Python client's `wait` makes: `watch(keeps_run=True)`):
        one timer for them all. Each such run running in its agent's own process has its
        deadline moved on, as a request made on it does, once less than half its window is
        left: a read when a call begins to wait on it, and a read and a write each half
        window while one waits. Once no call waits on it here (its process answered, cut
        its wait, was closed or died), its deadline stays, and it is given up when that
        comes, as any run whose process gave no sign of life."""
        outage = Outage(log, "keeping waited-on runs alive")
        while True:
            delay = None
            if self._looks:
                delay = max((self._looks[0][0] - datetime.now(UTC)).total_seconds(), 0.0)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._keep_kick.wait()
            self._keep_kick.clear()
            while self._looks and self._looks[0][0] <= datetime.now(UTC):
                due, run_id = heapq.heappop(self._looks)
                kept = self._kept.get(run_id)
                if kept is None or kept.look_at != due:
                    continue  # no call waits on it any more, or its look moved
                try:
                    look_at = await self._keep_alive(run_id)
                    outage.ended()
                except NewerDatabase:  # no write goes through until a restart: the expiry loop says so
                    look_at = datetime.now(UTC) + timedelta(seconds=NEWER_DATABASE_RETRY)
                except Unavailable as exc:  # the store is away for now: no bug to trace
                    outage.failed(exc, "trying again in 1 s")
                    look_at = datetime.now(UTC) + timedelta(seconds=1)
                except Exception:
                    log.exception("keeping run %s alive failed; trying again in 1 s", run_id)
                    look_at = datetime.now(UTC) + timedelta(seconds=1)
                if self._kept.get(run_id) is kept:  # still waited on (by the same calls or more)
                    kept.look_at = look_at
                    heapq.heappush(self._looks, (look_at, run_id))

    async def _keep_alive(self, run_id: str) -> datetime:
        """Move on the deadline of run `run_id`, which a call here waits on, if less than
        half its window is left; when to look at it again."""
        run = await self.store.get_run(run_id)
        now = datetime.now(UTC)
        if run is None:
            return now + self.pause_timeout  # gone: its waiters are woken by its requests' end
        window = run.park_deadline(now, self.pause_timeout) - now
        if run.status is not RunStatus.RUNNING or run.worker is not None or run.expires_at is None:
            return now + window / 2  # parked, held by a worker, ended: no deadline of its process
        if run.expires_at - now <= window / 2:
            run = await self._alive(run)
        if run.status is not RunStatus.RUNNING or run.worker is not None or run.expires_at is None:
            return now + window / 2
        return run.expires_at - window / 2

    async def _follow_loop(self, cursor: int) -> None:
        """Follow the event log for changes other processes made: wake our waiters."""
        poll = self.store.poll_interval
        outage = Outage(log, "reading the event log")
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(poll):
                    await self._hint.wait()
            self._hint.clear()
            try:
                while True:
                    batch = await self.store.changes(cursor, 500)
                    for event_id, type_, request_id in batch:
                        cursor = event_id
                        if type_ in _SETTLED_EVENTS and request_id in self._waiters:
                            request = await self.store.get(request_id)
                            if request is not None and request.status is not Status.PENDING:
                                self._wake(request)
                    if batch:
                        self._changed_now()
                        if any(type_ in _MAY_MAKE_READY for _, type_, _ in batch):
                            self._runs_ready_now()  # another process settled or parked
                    if len(batch) < 500:
                        break
                outage.ended()
            except Unavailable as exc:  # the store is away for now: no bug to trace
                outage.failed(exc, "trying again at the next poll")
            except Exception:
                log.exception("reading the event log failed; retrying")


def _new_requests(requests: Sequence[Request], run_id: str | None, max_name: int) -> list[Request]:
    """Check the requests a run starts parked on: each one pending, prepared, of no other
    run, and without an idempotency key (a restarted agent finds them through its run's id)."""
    if isinstance(requests, Request) or not isinstance(requests, Sequence) or not requests:
        raise InvalidRequest("requests must list the new requests the run waits on (made with prepare)")
    if len(requests) > 1000:
        raise InvalidRequest(f"requests: {len(requests)} of them, at most 1000 allowed")
    seen: set[str] = set()
    for request in requests:
        if not isinstance(request, Request):
            raise InvalidRequest("requests must be requests made with prepare(...)")
        if request.status is not Status.PENDING or request.id in seen:
            raise InvalidRequest(f"requests: {request.id!r} is not a new pending request")
        if request.origin.run is not None and request.origin.run != run_id:
            raise InvalidRequest(f"requests: {request.id!r} belongs to run {request.origin.run!r}")
        if request.idempotency_key is not None or request.detached:
            raise InvalidRequest(
                f"requests: {request.id!r} has an idempotency key or is detached; a run's requests are found by its id"
            )
        check_text(request.id, "a request id", max_name)
        seen.add(request.id)
    return list(requests)


_SAME_FIELDS = ("kind", "to", "asks", "title", "details", "context")
"""What a request made again with the first one's idempotency key must repeat: what is
asked, of whom, and what they are shown. Its timeout, origin and detachment may differ (a
retry's deadline counts from when it is sent); the first request's are kept."""


def _same_request(first: Request, again: Request) -> None:
    """Refuse `again`, made with `first`'s idempotency key, unless it asks the same
    (`_SAME_FIELDS`, compared as JSON): `IdempotencyKeyReused`, naming the first field
    that differs. An approval gate's request matches by its key alone (the gate finds the
    approval it made for a call whatever it asks now), but only an approval gate's."""
    if is_marked(again) or is_marked(first):
        if is_marked(again) != is_marked(first):
            made = "an approval gate's" if is_marked(first) else "not an approval gate's"
            raise IdempotencyKeyReused(
                f"idempotency key {first.idempotency_key!r} was used for request {first.id!r}, which is {made}; "
                "use a new key",
                request_id=first.id,
            )
        return
    was, now = request_to_dict(first), request_to_dict(again)
    for name in _SAME_FIELDS:
        if json.dumps(was[name], sort_keys=True, default=str) != json.dumps(now[name], sort_keys=True, default=str):
            raise IdempotencyKeyReused(
                f"{name}: idempotency key {first.idempotency_key!r} was used for request {first.id!r}, which "
                f"differs in {name}; send the same request to retry it, or use a new key",
                request_id=first.id,
            )


def _cursor(at: datetime, row_id: str) -> str:
    """The cursor of the page after a row listed by a time, then its id: the time
    (microseconds) and the id (a run's creation, a dead letter's due time)."""
    return f"{epoch_microseconds(at)}.{row_id}"


def _run_cursor(run: Run) -> str:
    """The cursor of the page after `run`: when it was made (microseconds) and its id."""
    return _cursor(run.created_at, run.id)


def _keyset(cursor: str | None, of: str, longest: int) -> tuple[datetime, str] | None:
    """The (time, id) a cursor of `_cursor` names; `InvalidCursor` for any other text, so
    that a mistyped cursor is an error, not another page (`of`: what the list is of), and
    for an id no row can have (longer than `longest`, or holding what no store keeps), so
    that text too long to be a cursor is no cursor either."""
    if cursor is None:
        return None
    stamp, dot, row_id = cursor.partition(".")
    if dot and row_id and stamp.isascii() and stamp.isdigit() and len(stamp) <= 18 and _storable(row_id, longest):
        with contextlib.suppress(OverflowError):  # past the year 9999
            return from_epoch_microseconds(int(stamp)), row_id
    raise InvalidCursor(f"cursor {_shown(cursor)} is not one a page of {of} gave (its next_cursor)")


def _storable(name: str, longest: int) -> bool:
    """Whether `name` could be a row's id: at most `longest` characters, all storable."""
    try:
        check_text(name, "id", longest)
    except InvalidRequest:
        return False
    return True


def _shown(cursor: str) -> str:
    """A cursor as an error quotes it: whole, or the start of a long one."""
    return repr(cursor) if len(cursor) <= 80 else f"{cursor[:40]!r}... ({len(cursor)} characters)"


def _id_cursor(cursor: str | None, of: str, *, prefix: str = "") -> None:
    """Refuse a cursor that is no id of a row of the list (`prefix` and 32 hex digits, as
    `new_id` and `outbox.delivery_id` make them) with `InvalidCursor`, so that a mistyped
    or cut cursor is an error, not another page or the whole list again. An id that is
    not stored is a place all the same (where it would be): a keyset page goes on from it."""
    if cursor is None:
        return
    digits = cursor.removeprefix(prefix)
    if len(cursor) != len(prefix) + 32 or not cursor.startswith(prefix) or not _HEX.fullmatch(digits):
        raise InvalidCursor(
            f"cursor {_shown(cursor)} is not one a page of {of} gave (its next_cursor, the id of the last seen)"
        )


_HEX = re.compile("[0-9a-f]{32}")


def _of_run(run: Run, requests: Sequence[Request]) -> list[Request]:
    """The requests made the run's, with its session and agent where they name none."""
    made = []
    for request in requests:
        o = request.origin
        origin = replace(
            o,
            run=run.id,
            session=o.session if o.session is not None else run.session,
            agent=o.agent if o.agent is not None else run.agent,
        )
        made.append(evolve(request, origin=origin))
    return made


def _cheap_to_check(asks: Sequence[Ask]) -> bool:
    """Whether an answer to these asks is checked on the event loop (no form schema)."""
    if len(asks) == 1:
        return not asks[0].costly_to_check
    return not any(ask.costly_to_check for ask in asks)


MADE_KEPT = 100_000
"""The pending requests a broker remembers making, for `close()` to withdraw."""


def _check_exclusive(exclusive: object, session: str | None) -> None:
    """Refuse an `exclusive` that is no bool, or that holds no session."""
    if not isinstance(exclusive, bool):
        raise InvalidRequest("exclusive must be true or false")
    if exclusive and session is None:
        raise InvalidRequest("an exclusive run holds its session: name one (session=...)")


def _same_agent(stored: Run, agent: str) -> None:
    """Refuse a start whose `run_id` names a run of another agent (it was handed back as
    if it were the caller's own, which that agent's workers would never resume)."""
    if stored.agent != agent:
        raise RunConflict(
            stored.id,
            stored.status.value,
            f"run {stored.id!r} is a run of agent {stored.agent!r}, not of {agent!r}: give this run an id of its own",
        )


def _session_held(run: Run) -> RunConflict:
    """The refusal of an exclusive start on the session `run` holds (it has not ended)."""
    status = run.status.value
    return RunConflict(
        run.id,
        status,
        f"run {run.id!r} of agent {run.agent!r} on session {run.session!r} has not ended ({status}): go on "
        f"with that run, or cancel it (cancel_run), before another run of the agent starts on the session",
    )


def _no_request_for(run_id: str, status: RunStatus) -> RunConflict:
    """The refusal of a request for a run that has ended: nothing would read its answer."""
    return RunConflict(run_id, status.value, f"run {run_id!r} has ended ({status.value}): no request is made for it")


def _check_id(request_id: str) -> str:
    """The id as stored: an id that no store could hold is refused the same way on every
    store, and one written as a hex number (`0x...`, as some clients send ids) loses its prefix."""
    if type(request_id) is str and len(request_id) == 32 and request_id.isalnum() and request_id.isascii():
        return request_id  # an id as this package makes them (or one as harmless): nothing to change
    check_text(request_id, "the request id", DEFAULT_LIMITS.max_name_length)
    return plain_id(request_id)


def _outcome(request: Request) -> Response:
    response = request.response
    if request.status is Status.ANSWERED and response is not None:
        return response
    reason = response.reason if response is not None else ""
    if request.status is Status.REJECTED:
        raise Rejected(request.id, reason)
    if request.status is Status.EXPIRED:
        raise Expired(request.id)
    if response is not None and response.cause == "closed":
        raise Closed(request.id, reason)
    raise Cancelled(request.id, reason)


StoreFactory = Callable[..., "Store | Broker"]
"""Makes a store (or a broker of its own) from a URL and keyword options: the store module
parses its URL and knows its options and their types."""

_SCHEMES: dict[str, tuple[str | StoreFactory, bool]] = {
    "memory": ("interlock.store.memory:from_url", False),
    "sqlite": ("interlock.store.sqlite:from_url", False),
    "postgresql": ("interlock.store.postgres:from_url", False),
    "postgres": ("interlock.store.postgres:from_url", False),
    "http": ("interlock.remote:from_url", True),
    "https": ("interlock.remote:from_url", True),
}
"""URL scheme -> its factory (or "module:name" of one, imported only when used, so a
driver is imported only by a URL that needs it), and whether it makes a broker."""

_CANCEL_CAUSES = ("cancelled", "released", "withdrawn", "closed")
"""The causes a cancel records (`released`: `release`'s), as the API's cancel takes them."""

_BROKER_OPTIONS = (
    "max_prompt_length",
    "hook_timeout",
    "limits",
    "pause_timeout",
    "grant_policy",
    "allow_http_hooks",
    "max_followups",
    "default_expiry",
)


ROUTING_SETTING = "routing"
"""The store's setting that holds the routing in use: `{"document": ..., "file_digest": ...}`."""


async def stored_routing(outbox: OutboxStore) -> Mapping[str, Any] | None:
    """The routing document kept in the store, if any (its secrets as given)."""
    stored = await outbox.load_setting(ROUTING_SETTING)
    document = stored.get("document") if isinstance(stored, Mapping) else None
    return document if isinstance(document, Mapping) else None


async def routing_since(outbox: OutboxStore) -> datetime | None:
    """When the store first had a routing (None: before this was recorded). A store that
    takes its first routing tells people of what waits for them now, not of every request
    it ever held: of what happened before, only the requests still pending are announced."""
    stored = await outbox.load_setting(ROUTING_SETTING)
    since = stored.get("since") if isinstance(stored, Mapping) else None
    try:
        return datetime.fromisoformat(since) if isinstance(since, str) else None
    except ValueError:
        return None


def _since(stored: Any) -> str:
    """The `since` of a routing about to be kept: the one kept already, else now."""
    since = stored.get("since") if isinstance(stored, Mapping) else None
    return since if isinstance(since, str) else datetime.now(UTC).isoformat()


def _digest(document: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()


def register_scheme(scheme: str, factory: str | StoreFactory, *, makes_broker: bool = False) -> None:
    """Have `connect` open URLs of `scheme` with `factory(url, **options)`. It returns a
    store, which `connect` puts a `LocalBroker` on; or, with `makes_broker`, a broker of
    its own, and then it takes the broker's options (`limits`, ...) too."""
    _SCHEMES[scheme.lower()] = (factory, makes_broker)


def _factory(scheme: str, url: str) -> tuple[StoreFactory, bool]:
    found = _SCHEMES.get(scheme.lower())
    if found is None:
        known = ", ".join(f"{name}://" for name in sorted(_SCHEMES))
        # A bare path (`--db tutorial.db`) is the likeliest slip: say the URL that names it.
        meant = f"; a SQLite file is named sqlite:///{redact_url(url)}" if not scheme and url.strip() else ""
        raise ValueError(f"unsupported store URL {redact_url(url)!r}: the schemes are {known}{meant}")
    factory, makes_broker = found
    if isinstance(factory, str):
        module, _, name = factory.partition(":")
        factory = getattr(importlib.import_module(module), name)
        _SCHEMES[scheme.lower()] = (factory, makes_broker)
    return factory, makes_broker


def connect(url: str | None = None, **options: Any) -> Broker:
    """A broker on the store the URL names; open it with `async with`.

    - `memory://` — in this process only (`retention=128` settled outcomes kept)
    - `sqlite:///path.db` — the embedded default: a durable file (`sqlite:////abs/path.db`)
    - `postgresql://user@host/db` — several processes and nodes share one database
      (options such as `poll_interval` or `max_size` as query parameters)
    - `http://host:8765` (or https) — a running `interlock serve`; `token=` or
      `INTERLOCK_TOKEN` authenticates

    With no URL, `INTERLOCK_URL` from the environment, else `sqlite:///interlock.db`.
    Options are the broker's (`limits`, `max_prompt_length`, `hook_timeout`) and the store's; a
    store's options may also be given as query parameters of the URL. Each scheme's store
    reads its own options (see `register_scheme`).
    """
    url = url or os.environ.get("INTERLOCK_URL") or DEFAULT_URL
    factory, makes_broker = _factory(urlsplit(url).scheme, url)
    if makes_broker:
        made = factory(url, **options)
        if not isinstance(made, Broker):
            raise TypeError(f"the factory of {urlsplit(url).scheme}:// made no broker")
        return made
    # connect(url, token=os.environ.get("INTERLOCK_TOKEN")) works whatever the URL: no token
    # is no option; a token given to a store that opens its own database is refused.
    if "token" in options and options.pop("token") is not None:
        scheme = urlsplit(url).scheme
        raise ValueError(f"token= is for a server (http:// or https://): {scheme}:// opens its store itself")
    broker_options = {k: options.pop(k) for k in _BROKER_OPTIONS if k in options}
    try:
        store = factory(url, **options)
    except UnknownOption as exc:
        raise UnknownOption(f"{exc}; or the broker's: {', '.join(sorted(_BROKER_OPTIONS))}") from None
    if isinstance(store, Broker):
        raise TypeError(f"the factory of {urlsplit(url).scheme}:// made a broker: register it with makes_broker=True")
    return LocalBroker(store, **broker_options)
