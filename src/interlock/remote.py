"""The remote broker: a running interlock server, reached over its HTTP API.

`interlock.connect("http://host:8765", token=...)` gives this broker, so agent code does
not change when it moves from a laptop to a cluster. Each method is one call of the API
(create -> `POST /requests`, wait -> the long poll `/requests/{id}/wait`, resolve ->
`/answer`, ...). The server is the authority: it checks requests and answers, applies who
may do what, and expires requests on time, so this side keeps no expiry loop and checks no
answer; a problem response comes back as the exception the server raised (`interlock.wire`).

`ask()` is one call when no input hook is added and the answer comes soon: `POST
/requests?wait=...` creates the request and answers once it settles (or with it still
pending when the time runs out; the wait then goes on with the long poll by its id). Without
an idempotency key that first call is held `FIRST_POLL` seconds only: it cannot be sent
again, so a server lost during it raises.

A server whose store is unavailable for now answers 503 `unavailable` with `Retry-After`,
and a proxy in front of a server that is away answers a bare 502, 503 or 504: both raise
`interlock.errors.Unavailable`, its `retry_after` from the header. A server that cannot be
reached (a connection refused or reset, a call cut before its answer: a server restarting)
raises a `ConnectionError` that names it.

Through either outage, the calls that wait go on (`_through_outages`): `wait`, `watch`,
following the events (`events(follow=True)`), and the long poll of `claim_run` that a
worker makes ask again after a bounded back-off (`Retry-After`, or their own from
`UNAVAILABLE_FIRST` doubling to `UNAVAILABLE_CAP`) until their own deadline (a wait's
timeout, a claim's `wait`; without one, until the server is back or the broker is closed),
then raise the outage. One warning says an outage began, an info line that it ended. They
are safe to repeat: a wait only reads, and a claim whose answer was lost holds its run only
until its lease runs out. `ask()` with an `idempotency_key` goes on too: the server gives
back the request the key made however often it is sent. Every other call that changes
something raises at once, since its outcome may be unknown: retry it the way that is safe
(the same idempotency key for a create, the run's own id for `start_run`; an answer sent
again after it was taken returns False). A broker that never reached its server (a wrong
address) raises at once too.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import functools
import json
import logging
import math
import os
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Self, TypeVar, Unpack
from urllib.parse import quote

import httpx
from httpx_sse import aconnect_sse

from ._backoff import Backoff
from .approval_policies import ApprovalPolicy, policy_from_wire, policy_to_dict
from .approvals import is_marked
from .broker import (
    DEFAULT_LEASE,
    MADE_KEPT,
    MAX_EVENT_ID,
    Broker,
    CreateFields,
    DeliveryPage,
    GrantPage,
    Page,
    RunPage,
    _check_exclusive,
    _id_cursor,
    _outcome,
    _seconds,
    _wait_seconds,
)
from .cursors import taken
from .dashboard import DASHBOARD_WINDOW, Dashboard, dashboard_from_dict
from .errors import Closed, Forbidden, InvalidAnswer, InvalidRequest, NotFound, RateLimited, RunConflict, Unavailable
from .followups import Followup, Sent, followup_from_dict
from .hooks import DEFAULT_HOOK_TIMEOUT
from .model import (
    DEFAULT_EXP,
    MAX_STATE_BYTES,
    Answers,
    Ask,
    Claim,
    Event,
    GrantPolicy,
    IssuedGrant,
    Limits,
    Request,
    Response,
    Run,
    RunStatus,
    Status,
    ask_to_dict,
    check_json,
    check_text,
    claim_from_dict,
    issued_grant_from_dict,
    origin_to_dict,
    request_from_dict,
    run_from_dict,
)
from .outbox import DELIVERY_ID_PREFIX, Delivery, DeliveryState, delivery_from_dict
from .redact import redact_url
from .store import Listed, ListFilters, Query
from .store._url import UnknownOption, url_options
from .wire import error_from_problem

__all__ = ["RemoteBroker", "from_url"]

log = logging.getLogger("interlock")

LONG_POLL = 30.0
"""Seconds one long poll may hold a call open; a longer wait makes several."""
FIRST_POLL = 1.0
"""Seconds `ask()` without an idempotency key holds its create open for the answer: an
answer within it (a hook's, an automated answerer's) takes one call; a person's takes a
second, the wait by the request's id, which rides out a server restart. A create cut
before its answer raises (it may have made the request), so this is also the window in
which a server lost raises rather than being waited out."""
UNAVAILABLE_FIRST = 0.5
"""Seconds a wait pauses before it polls a server that answered `Unavailable` again (unless
its `Retry-After` says longer), doubling while it keeps answering so up to `UNAVAILABLE_CAP`."""
UNAVAILABLE_CAP = 10.0
"""The longest pause of a wait between two polls of a server that is unavailable (a
`Retry-After` that asks for longer is cut to this): a wait goes on within this long of the
server coming back."""
EXPIRY_GRACE = 2.0
"""Seconds past a request's `expires_at` that a wait on it without a timeout of its own
goes on through an outage: by then the server has expired it, unless it was answered
before; which, nobody here can tell while the server is away, so the outage is raised."""
TIMEOUTS_KEPT = 10_000
"""The most timeouts a broker remembers for the requests it prepared and has not sent
yet (a request is sent again, with its timeout, while its create's outcome is unknown)."""

T = TypeVar("T")

_OPTIONS = {"token": str}
_BROKER_OPTIONS = ("limits", "max_prompt_length", "hook_timeout", "transport", "grant_policy")


def from_url(url: str, **options: Any) -> RemoteBroker:
    """`http(s)://host:port`; `token=` (or `INTERLOCK_TOKEN`) authenticates. The broker's
    own options (`limits`, `max_prompt_length`, `hook_timeout`, `transport`) pass through."""
    broker_options = {k: options.pop(k) for k in _BROKER_OPTIONS if k in options}
    try:
        ours, _ = url_options(url, _OPTIONS, options)
    except UnknownOption as exc:
        raise UnknownOption(f"{exc}; or the broker's: {', '.join(sorted(_BROKER_OPTIONS))}") from None
    token = ours.pop("token", None) or os.environ.get("INTERLOCK_TOKEN")
    return RemoteBroker(url.split("?", 1)[0], token=token, **broker_options)


def _checked_token(token: str) -> str:
    """`token` without the white space around it (the end of a copied line); a ValueError
    that quotes none of it when it holds what no token has (more than the token was copied:
    `interlock token create`'s line before it, say), which no server could be sent."""
    token = token.strip()
    if not token or not all("!" <= c <= "~" for c in token):
        raise ValueError(
            "the token is not one: it holds white space, a line break or characters no token has "
            "(was more than the token copied?)"
        )
    return token


class RemoteBroker(Broker):
    """A broker whose methods are the calls of a server's HTTP API."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        max_prompt_length: int | None = None,
        hook_timeout: float = DEFAULT_HOOK_TIMEOUT,
        limits: Limits | None = None,
        grant_policy: GrantPolicy | None = None,
    ) -> None:
        super().__init__(
            max_prompt_length=max_prompt_length, hook_timeout=hook_timeout, limits=limits, grant_policy=grant_policy
        )
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {_checked_token(token)}"} if token else {}
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._caller: Mapping[str, Any] = {}  # the token's principal, from /whoami
        self._state: Literal["new", "open", "closed"] = "new"
        self._open_lock = asyncio.Lock()
        self._closed = False  # `close()` without a channel: this broker refuses creates
        # Tasks in `wait` or `claim_run` (`aclose` cuts them with `Closed`), or following events.
        self._waiting: set[asyncio.Task[Any]] = set()
        self._waits: dict[str, int] = {}  # the calls of this broker waiting on each request
        self._cut: set[asyncio.Task[Any]] = set()
        self._away_since: float | None = None  # when the server became unreachable, on the loop's clock
        # The timeouts given to `prepare`, by request id, with the instant given beside one.
        self._timeouts: dict[str, tuple[float, datetime | None]] = {}
        # When each pending request this broker made expires, if it does: what bounds a wait
        # on it without a timeout through an outage (`wait`); the newest `MADE_KEPT`.
        self._expiries: dict[str, datetime] = {}
        self._keeps_runs = True  # the server takes `keep_run` on a long poll (a server older than it refuses it)

    # -- life cycle ----------------------------------------------------------------------

    async def open(self) -> Self:
        """Reach the server and learn who the token is (a wrong address or token fails here)."""
        async with self._open_lock:
            if self._state == "open":
                return self
            if self._state == "closed":
                raise Closed(None, "this broker was closed; connect again")
            client = self._new_client(timeout=httpx.Timeout(30.0))
            self._client = client
            try:
                try:
                    whoami = await client.get("/whoami")
                except httpx.TransportError as exc:
                    raise _unreachable(self.base_url, exc) from exc
                if whoami.status_code == 404:  # (every interlock server answers it)
                    raise _not_interlock(self.base_url, whoami)
                if not whoami.is_success:
                    raise _error(whoami, "")
                self._caller = whoami.json()
            except BaseException:
                self._client = None
                await client.aclose()
                raise
            self._state = "open"
        return self

    def _new_client(self, *, timeout: httpx.Timeout) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=f"{self.base_url}/api/v1", headers=self._headers, timeout=timeout, transport=self._transport
        )

    async def aclose(self) -> None:
        """Disconnect. Pending requests stay pending on the server for others to answer."""
        if self._state != "open":
            self._state = "closed"
            return
        self._state = "closed"
        for task in list(self._waiting):
            self._cut.add(task)
            task.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _uncut(self, task: asyncio.Task[Any]) -> bool:
        """Whether `aclose` cancelled `task` (a wait, a claim's long poll, a follow of the
        events) to cut it; if so, the cancellation is taken back, for the task to end as
        disconnected rather than cancelled."""
        if task not in self._cut:
            return False
        self._cut.discard(task)
        task.uncancel()
        return True

    async def _ready(self) -> httpx.AsyncClient:
        if self._state != "open":
            await self.open()
        assert self._client is not None
        return self._client

    async def _send(
        self, method: str, path: str, *, json: Any = None, params: Any = None, timeout: float | None = None
    ) -> httpx.Response:
        client = await self._ready()
        extra: dict[str, Any] = {}
        if timeout is not None:
            extra["timeout"] = httpx.Timeout(30.0, read=timeout + 30.0)
        try:
            response = await client.request(method, path, json=json, params=params, **extra)
        except httpx.TransportError as exc:
            if self._state == "closed":  # `aclose` closed the client under this call
                raise Closed(None, "the broker was disconnected") from None
            raise _unreachable(self.base_url, exc) from exc
        if self._away_since is not None:
            self._answered(response)
        return response

    async def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Any = None,
        request_id: str = "",
        timeout: float | None = None,
    ) -> Any:
        """One API call: its JSON, or the exception its problem stands for."""
        response = await self._send(method, path, json=json, params=params, timeout=timeout)
        if response.is_success:
            return response.json()
        raise _error(response, request_id)

    # -- creating ------------------------------------------------------------------------

    def prepare(self, asks: Ask | Sequence[Ask], **fields: Unpack[CreateFields]) -> Request:
        """As `Broker.prepare`, remembering a `timeout` given so that it is sent as given:
        the server counts it from when it receives the request, by its own clock, where
        an `expires_at` is sent as the instant it is."""
        request = super().prepare(asks, **fields)
        timeout = fields.get("timeout")
        if timeout is not None:  # checked by now
            seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
            timeouts = self._timeouts
            timeouts[request.id] = (seconds, fields.get("expires_at"))
            if len(timeouts) > TIMEOUTS_KEPT:  # prepared and never sent
                del timeouts[next(iter(timeouts))]
        return request

    def _body(self, request: Request) -> dict[str, Any]:
        body: dict[str, Any] = {
            "asks": [ask_to_dict(a) for a in request.asks],
            "kind": request.kind,
            "to": request.to,
            "title": request.title,
            "details": request.details,
            "context": request.context,
            "idempotency_key": request.idempotency_key,
            "origin": origin_to_dict(request.origin),
            "requester": request.requester,
        }
        if request.detached:
            body["detached"] = True
        given = self._timeouts.get(request.id)
        if given is not None:
            body["timeout"], instant = given
            if instant is not None:  # the server takes the earlier, as `prepare` did here
                body["expires_at"] = instant.isoformat()
        elif request.expires_at is not None:  # as given, its offset and all (a past one too)
            body["expires_at"] = request.expires_at.isoformat()
        return body

    async def submit(self, request: Request) -> tuple[Request, bool]:
        return await self._submit(request)

    async def _submit(self, request: Request, *, wait: float | None = None) -> tuple[Request, bool]:
        await self._ready()
        if self._closed:
            raise Closed(None, "the broker is closed")
        # The approval gate's requests go through the one route that may mark them.
        path = "/approvals" if is_marked(request) else "/requests"
        params = {"wait": wait} if wait is not None else None
        response = await self._send("POST", path, json=self._body(request), params=params, timeout=wait)
        if not response.is_success:
            raise _error(response, "")
        stored = request_from_dict(response.json())
        self._timeouts.pop(request.id, None)  # sent: the server has it now
        if stored.expires_at is not None and stored.status is Status.PENDING:
            expiries = self._expiries
            expiries[stored.id] = stored.expires_at
            if len(expiries) > MADE_KEPT:
                del expiries[next(iter(expiries))]
        created = response.status_code == 201
        if created and stored.status is Status.PENDING:
            self._note_made(stored)
        if created and self._hooks:
            self._start_hooks(stored)
        return stored, created

    async def _asked(self, asks: Ask | Sequence[Ask], fields: CreateFields) -> tuple[Request, Response]:
        """Create a request and wait for its answer, in one call while it settles within
        a long poll (input hooks, which run beside the wait, make it two)."""
        if self._hooks:
            return await super()._asked(asks, fields)
        prepared = self.prepare(asks, **fields)
        if prepared.idempotency_key is None:  # a write whose outcome an outage leaves unknown: raised
            request, _ = await self._submit(prepared, wait=FIRST_POLL)  # so held only briefly
        else:  # sent again, the same key gives back the request the first one made
            asking = functools.partial(self._submit, prepared, wait=LONG_POLL)
            request, _ = await self._through_outages(asking, None, f"asking {prepared.idempotency_key!r}")
        response = await self.wait(request.id) if request.status is Status.PENDING else _outcome(request)
        return request, response

    # -- waiting -------------------------------------------------------------------------

    async def _poll(self, request_id: str, seconds: float, *, keep_run: bool = False) -> Request | None:
        """One long poll: the request once settled, or None while still pending. With
        `keep_run` (a `wait`: this process waits on it), the server keeps the request's run
        alive while the poll lasts, as a wait in its own process does."""
        path = f"{_request_path(request_id)}/wait"
        keep_run = keep_run and self._keeps_runs
        params: dict[str, Any] = {"timeout": seconds, "keep_run": "true"} if keep_run else {"timeout": seconds}
        response = await self._send("GET", path, params=params, timeout=seconds)
        if keep_run and _refused_keep_run(response):  # a server older than `keep_run`: wait as its clients do
            self._keeps_runs = False
            response = await self._send("GET", path, params={"timeout": seconds}, timeout=seconds)
        if response.status_code == 408:
            return None
        if not response.is_success:
            raise _error(response, request_id)
        return request_from_dict(response.json())

    async def wait(self, request_id: str, timeout: float | None = None) -> Response:
        """As `Broker.wait`; through an outage of the server, a wait with a timeout goes on
        until it, and one without until the request's expiry (`EXPIRY_GRACE` past it), for
        a request this broker made that expires: past that the outage is raised, rather than
        a wait held past the time the asker gave."""
        loop = asyncio.get_running_loop()
        seconds = _wait_seconds(timeout)
        deadline = None if seconds is None else loop.time() + seconds
        gave_up = _NOT_EXPIRED
        expires = self._expiries.get(request_id)
        if deadline is None and expires is not None:
            left = (expires - datetime.now(UTC)).total_seconds()
            deadline = loop.time() + max(left, 0.0) + EXPIRY_GRACE
            gave_up = (
                f"the server expires it at {expires.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC unless it was answered "
                "before: get it there once the server is back to know which"
            )
        me = asyncio.current_task()
        assert me is not None
        self._waiting.add(me)
        self._waits[request_id] = self._waits.get(request_id, 0) + 1
        try:
            while True:
                request = await self._poll_through_outages(request_id, deadline, gave_up, keep_run=True)
                if request is not None:
                    self._made.pop(request_id, None)
                    self._expiries.pop(request_id, None)
                    return _outcome(request)
                if deadline is not None and loop.time() >= deadline:
                    try:
                        await self.expire(request_id)  # the waiter's time ran out: so does the request's
                    except Forbidden:  # only its maker may expire it: said as this wait's own end
                        raise Forbidden(
                            f"the wait on request {request_id!r} ran out ({seconds:g} s), and only whoever made it "
                            "may make it expire: it is still pending (watch(id, timeout) waits without expiring it)"
                        ) from None
                    return _outcome(await self.get(request_id))
        except asyncio.CancelledError:
            if self._uncut(me):  # this broker was disconnected: the request stays pending
                raise Closed(request_id, "the broker was disconnected") from None
            alone = self._waits.get(request_id) == 1  # no other call here waits on it
            if self._state == "open" and request_id not in self._detached and alone:
                # Shielded: a cancel scope that cancels again must not cut the withdrawal short.
                withdrawal = self._spawn(self._withdraw(request_id))
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(withdrawal)
            raise
        finally:
            self._waiting.discard(me)
            left_waiting = self._waits.pop(request_id) - 1
            if left_waiting:
                self._waits[request_id] = left_waiting

    async def _withdraw(self, request_id: str) -> None:
        with contextlib.suppress(Exception):
            if (await self.get(request_id)).outlives_its_waiter:
                return  # its maker comes back for it (an idempotency key), or its run does
            await self.cancel(request_id, "the waiting call was cancelled", cause="withdrawn")

    async def _poll_through_outages(
        self, request_id: str, deadline: float | None, gave_up: str = "", *, keep_run: bool = False
    ) -> Request | None:
        """One long poll (`_poll`, for `LONG_POLL` seconds or up to `deadline`), asked
        again through an outage (`_through_outages`); `gave_up` says what is left as it was
        when the deadline passes during one."""
        loop = asyncio.get_running_loop()

        def poll() -> Awaitable[Request | None]:
            left = LONG_POLL if deadline is None else min(LONG_POLL, max(deadline - loop.time(), 0.0))
            return self._poll(request_id, left, keep_run=keep_run)

        return await self._through_outages(poll, deadline, f"waiting on {request_id}", gave_up=gave_up)

    async def _through_outages(
        self, call: Callable[[], Awaitable[T]], deadline: float | None, what: str, *, gave_up: str = ""
    ) -> T:
        """`call()`, made again while the server cannot be reached (a connection refused,
        reset or cut mid-answer: a server restarting) or answers `Unavailable`, after a
        pause (`_pause_in_outage`), until `deadline` (None: until it is back, or this broker
        is closed). Only for a call that is harmless to repeat: one that reads, or a write
        the API makes once however often it is sent. A broker that never reached its
        server (a wrong address) fails at once."""
        await self._ready()
        backoff: Backoff | None = None  # made at the first failure only
        while True:
            try:
                return await call()
            except ConnectionError as exc:  # `Unavailable` too
                backoff = backoff or Backoff(UNAVAILABLE_FIRST, UNAVAILABLE_CAP)
                await self._pause_in_outage(exc, backoff, deadline, what, gave_up)

    async def _pause_in_outage(
        self, exc: ConnectionError, backoff: Backoff, deadline: float | None, what: str, gave_up: str
    ) -> None:
        """Pause a call that met an outage: for what `Retry-After` says or the back-off's
        next delay, whichever is longer (at most `UNAVAILABLE_CAP`), and never past the
        call's `deadline`; once that has passed, the outage is raised (a wait is bounded by
        its own timeout, not by the server's coming back). A warning when an outage begins,
        not at each try (`_outage`)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        delay = min(backoff.next_after(getattr(exc, "retry_after", None)), UNAVAILABLE_CAP)
        began = self._outage(exc, what, None if deadline is None else deadline - now)
        if deadline is not None:
            if now >= deadline:
                if isinstance(exc, Unavailable):
                    raise exc
                tried = f"after {now - began:.1f} s of trying" if now > began else "at once"
                raise ConnectionError(
                    f"{exc}; gave up {what} when its time ran out, {tried}" + (f" ({gave_up})" if gave_up else "")
                ) from exc
            delay = min(delay, deadline - now)
        log.debug("%s: %s; trying again in %.1f s", what, exc, delay)
        await asyncio.sleep(delay)

    def _outage(self, exc: ConnectionError, what: str, left: float | None) -> float:
        """Note that a call met an outage of the server: a warning if this begins one (not
        again for the other calls and tries until the server answers, `_send`). When the
        outage began, on the loop's clock."""
        began = self._away_since
        if began is not None:
            return began
        self._away_since = began = asyncio.get_running_loop().time()
        until = "it is back" if left is None else f"it is back or {max(left, 0.0):.1f} s have passed"
        log.warning("%s: %s; trying again until %s", what, exc, until)
        return began

    def _answered(self, response: httpx.Response) -> None:
        """The server answered (not as unavailable): an outage it was in is over."""
        began = self._away_since
        if began is not None and response.status_code not in _UNAVAILABLE:
            self._away_since = None
            away = asyncio.get_running_loop().time() - began
            log.info("the interlock server at %s answers again, after %.1f s", redact_url(self.base_url), away)

    async def watch(self, request_id: str, timeout: float | None = None) -> Request:
        loop = asyncio.get_running_loop()
        seconds = _wait_seconds(timeout)  # NaN had waited forever
        deadline = None if seconds is None else loop.time() + seconds
        while True:
            request = await self._poll_through_outages(request_id, deadline)
            if request is not None:
                return request
            if deadline is not None and loop.time() >= deadline:
                return await self.get(request_id)

    # -- settling ------------------------------------------------------------------------

    async def _settle(self, request_id: str, action: str, body: Mapping[str, Any] | None = None) -> bool:
        """POST a settlement; False when the request is unknown or no longer pending."""
        try:
            path = f"{_request_path(request_id)}/{action}"
        except NotFound:
            return False
        response = await self._send("POST", path, json=body)
        if response.is_success:
            self._made.pop(request_id, None)  # settled: nothing for `close()` to withdraw
            return True
        if response.status_code in (404, 409) and _code(response) in ("not_found", "already_settled"):
            self._made.pop(request_id, None)
            return False
        error = _error(response, request_id)
        if action == "answer" and _code(response) == "too_large":
            raise InvalidAnswer(str(error))  # an answer too large, as a local broker says it
        raise error

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
        # No `via`: the server records the surface itself ("api"). It checks the answer
        # against the request and the echoed grants against the offers, and issues them;
        # the arguments themselves are checked here as a local broker checks them, in its
        # words, and so is what JSON cannot carry.
        self._check_answering(by, via, comment, grants)
        check_json(answer, "the answer", self.limits.max_answer_bytes, error=InvalidAnswer)
        body: dict[str, Any] = {"reason": comment, "by": by}
        if isinstance(answer, Answers):
            body["answers"] = dict(answer)
        else:
            body["answer"] = answer
        if grants is not None:
            body["grants"] = [dict(g) for g in grants]
        return await self._settle(request_id, "answer", body)

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
        if not 1 <= limit <= 1000:
            raise ValueError("limit must be between 1 and 1000")
        params: dict[str, Any] = {"limit": limit, "live": live}
        given = {"audience": audience, "issuer": issuer, "request": request, "cursor": after}
        params |= {name: value for name, value in given.items() if value is not None}
        page = await self._call("GET", "/grants", params=params)
        return GrantPage([issued_grant_from_dict(g) for g in page["items"]], taken("grants", page["next_cursor"]))

    async def get_grant(self, grant_id: str) -> IssuedGrant:
        return issued_grant_from_dict(await self._call("GET", f"/grants/{grant_id}", request_id=grant_id))

    async def grant_token(self, grant_id: str) -> str:
        """The signed token of a grant you hold or issued (see `interlock.grant_tokens`)."""
        return str((await self._call("GET", f"/grants/{grant_id}", request_id=grant_id))["token"])

    async def check_grant(
        self, audience: str | None, with_: str, can: str, *, issuer: str | None = None
    ) -> IssuedGrant | None:
        body = {"audience": audience, "with": with_, "can": can, "issuer": issuer}
        found = await self._call("POST", "/grants/check", json=body)
        return issued_grant_from_dict(found["grant"]) if found["granted"] else None

    async def revoke_grant(self, grant_id: str, *, by: str | None = None) -> bool:
        response = await self._send("POST", f"/grants/{grant_id}/revoke", json={"by": by})
        if response.is_success:
            return bool(response.json()["revoked"])
        if response.status_code == 404:
            return False
        raise _error(response, grant_id)

    async def give_grant(
        self,
        to: str,
        with_: str,
        can: str,
        *,
        exp: int | Literal["default"] | None = DEFAULT_EXP,
        by: str | None = None,
    ) -> IssuedGrant:
        body: dict[str, Any] = {"to": to, "with": with_, "can": can, "by": by}
        if exp != DEFAULT_EXP:
            body["exp"] = exp
        return issued_grant_from_dict(await self._call("POST", "/grants", json=body))

    # -- approval policies -----------------------------------------------------------------

    async def set_approval_policy(
        self, policy: ApprovalPolicy | Mapping[str, Any], *, by: str | None = None
    ) -> ApprovalPolicy:
        """Create or replace a policy on the server (as its agent's owner or an admin); the
        server records the caller as who changed it."""
        data = policy_to_dict(policy, secrets=True) if isinstance(policy, ApprovalPolicy) else dict(policy)
        return policy_from_wire(await self._call("POST", "/approval-policies", json=data))

    async def get_approval_policy(self, agent: str, server: str = "") -> ApprovalPolicy:
        return policy_from_wire(await self._call("GET", _policy_path(agent, server), request_id=agent))

    async def list_approval_policies(self, agent: str | None = None) -> list[ApprovalPolicy]:
        params = {"agent": agent} if agent is not None else None
        found = await self._call("GET", "/approval-policies", params=params)
        return [policy_from_wire(p) for p in found["items"]]

    async def delete_approval_policy(self, agent: str, server: str = "", *, by: str | None = None) -> bool:
        found = await self._call("DELETE", _policy_path(agent, server), request_id=agent)
        return bool(found["deleted"])

    async def approval_policy_for(self, agent: str, server: str = "") -> ApprovalPolicy | None:
        params = {"server": server} if server else None
        found = await self._call("GET", f"{_policy_path(agent, '')}/effective", params=params, request_id=agent)
        return None if found["policy"] is None else policy_from_wire(found["policy"])

    async def reject(self, request_id: str, reason: str = "", *, by: str | None = None, via: str = "python") -> bool:
        # The server records who: the person it is to, or, for this broker's input hooks'
        # denials (`via="hook"`), the agent that made the request.
        self._check_giving_up(reason, by, via)
        body: dict[str, Any] = {"reason": reason, "hook": True} if via == "hook" else {"reason": reason}
        return await self._settle(request_id, "reject", body)

    async def cancel(
        self,
        request_id: str,
        reason: str = "",
        *,
        by: str | None = None,
        cause: Literal["cancelled", "withdrawn", "closed"] = "cancelled",
        via: str = "python",
    ) -> bool:
        self._check_giving_up(reason, by, via)
        return await self._settle(request_id, "cancel", {"reason": reason, "cause": cause})

    async def expire(self, request_id: str) -> bool:
        return await self._settle(request_id, "expire")

    async def release(self, request_id: str, *, by: str | None = None, via: str = "python") -> bool:
        # The server's store says whether this is the first release, from any client; it
        # records its caller, through its API.
        self._check_giving_up("", by, via)
        self._detached.discard(request_id)
        return await self._settle(request_id, "cancel", {"cause": "released"})

    async def consume(self, request_id: str, *, by: str | None = None) -> bool:
        self._check_names(by=by)
        try:
            path = f"{_request_path(request_id)}/consume"
        except NotFound:
            return False
        response = await self._send("POST", path, json={"by": by})
        if response.status_code == 404:
            return False
        if not response.is_success:
            raise _error(response, request_id)
        return bool(response.json()["consumed"])

    async def claim(self, request_id: str, *, by: str) -> Claim:
        # The server claims for the token's principal; `by` is its business.
        response = await self._send("POST", f"{_request_path(request_id)}/claim")
        body = response.json() if response.headers.get("content-type", "").endswith("json") else None
        if response.status_code == 409 and isinstance(body, Mapping) and isinstance(body.get("claim"), Mapping):
            return claim_from_dict(body["claim"])
        if not response.is_success:
            raise _error(response, request_id)
        return claim_from_dict(response.json())

    async def unclaim(self, request_id: str, *, by: str | None) -> Claim | None:
        response = await self._send("DELETE", f"{_request_path(request_id)}/claim")
        if not response.is_success:
            raise _error(response, request_id)
        found = response.json().get("removed")
        return claim_from_dict(found) if found else None

    async def claims(self, request_ids: Sequence[str]) -> Mapping[str, Claim]:
        if len(request_ids) > 1000:
            raise InvalidRequest("ask for the claims of at most 1000 requests at a time")
        out: dict[str, Claim] = {}
        for start in range(0, len(request_ids), _CLAIMS_PAGE):  # as many ids as one call takes
            chunk = list(request_ids[start : start + _CLAIMS_PAGE])
            found = await self._call("GET", "/claims", params={"request": chunk})
            out.update((c["request_id"], claim_from_dict(c)) for c in found["items"])
        return out

    async def whoami(self) -> Mapping[str, Any]:
        """The token's principal as the server knows it: `name`, `kind` and `owner`."""
        await self._ready()
        return dict(self._caller)

    async def requester_of(self, requester: str | None) -> str | None:
        await self._ready()
        if self._caller.get("kind") in (None, "admin"):
            return requester  # a server without auth records the requester it is given
        return str(self._caller["name"])

    async def close(self, channel: str | None = None, *, requester: str | None = None, via: str = "python") -> None:
        """Close `channel` on the server (for everyone when the caller is an admin, else for
        the caller's requests); without one, withdraw the pending requests this broker made
        (not those that outlive their waiter, nor anyone else's) and refuse later creates
        through it."""
        self._check_names(channel=channel, requester=requester, via=via)
        await self._ready()
        self._cancel_hooks(channel, None)  # this broker's hooks run for its caller's requests only
        if channel is not None:
            await self._call("POST", "/close", json={"channel": channel})
            return
        self._closed = True
        made, self._made = list(self._made), {}
        for request_id in made:
            with contextlib.suppress(NotFound):
                await self.cancel(request_id, "the broker was closed", cause="closed")

    async def reopen(self, channel: str, *, requester: str | None = None) -> bool:
        self._check_names(channel=channel)
        return bool((await self._call("POST", "/reopen", json={"channel": channel}))["reopened"])

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
        if not isinstance(message, str) or not message.strip():
            raise InvalidRequest("an update needs a non-empty message")
        check_text(message, "the message")
        self._check_names(to=to, session=session, agent=agent, run=run, by=by)
        if data is not None:
            check_json(data, "data")
        body = {"message": message, "to": to, "session": session, "agent": agent, "run": run, "data": data}
        return _event(await self._call("POST", "/inform", json=body))

    # -- reading -------------------------------------------------------------------------

    async def get(self, request_id: str) -> Request:
        request = request_from_dict(await self._call("GET", _request_path(request_id), request_id=request_id))
        if request.status is not Status.PENDING:
            self._made.pop(request_id, None)  # settled: nothing for `close()` to withdraw
        return request

    async def list(self, **filters: Unpack[ListFilters]) -> Page:
        # The server lists a member's teams' requests with their own; `teams` is its business.
        query = Query.of(filters)
        query.check()
        page = await self._call("GET", "/requests", params=_query_params(query))
        return Page([request_from_dict(r) for r in page["items"]], taken("requests", page["next_cursor"]))

    async def dashboard(
        self, *, recipient: str | None = None, teams: Sequence[str] = (), window: timedelta = DASHBOARD_WINDOW
    ) -> Dashboard:
        # The server counts a member's teams' requests with their own; an admin names them.
        params: dict[str, Any] = {"window": window.total_seconds(), "team": list(teams)}
        if recipient is not None:
            params["recipient"] = recipient
        return dashboard_from_dict(await self._call("GET", "/dashboard", params=params))

    async def events(self, after: int | None = None, *, follow: bool = False) -> AsyncGenerator[Event, None]:
        cursor = after or 0
        if not 0 <= cursor <= MAX_EVENT_ID:
            raise InvalidRequest(f"after must be an event id between 0 and {MAX_EVENT_ID}")
        while True:
            params = {"after": cursor, "limit": 500}
            if follow:  # following: read through an outage, as the stream after it does
                read = functools.partial(self._call, "GET", "/events", params=params)
                page = await self._through_outages(read, None, "reading the events")
            else:
                page = await self._call("GET", "/events", params=params)
            for item in page["events"]:
                event = _event(item)
                cursor = event.id
                yield event
            if len(page["events"]) < 500 and not page.get("cut"):  # (a page cut by size has more after it)
                break
        if not follow:
            return
        async for event in self._follow(cursor):
            yield event

    async def _follow(self, cursor: int) -> AsyncGenerator[Event, None]:
        """The server's event stream after `cursor`, reconnecting (with Last-Event-ID, so
        nothing is missed or repeated) until this broker is closed."""
        backoff = Backoff(0.1, 5.0)
        failing = False  # the last connection failed (rather than dropped after working)
        me = asyncio.current_task()
        assert me is not None
        async with self._new_client(timeout=httpx.Timeout(30.0, read=None)) as client:
            while self._state == "open":
                # While it waits on the server (not while the caller holds an event), `aclose`
                # cuts it as it cuts a `wait`: the stream then ends, as a local broker's does.
                self._waiting.add(me)
                try:
                    asked: float | None = None  # what a server that is unavailable asks to wait
                    try:
                        headers = {"Last-Event-ID": str(cursor)}
                        async with aconnect_sse(client, "GET", "/events/stream", headers=headers) as source:
                            if not source.response.is_success:
                                await source.response.aread()
                                raise _error(source.response, "")
                            if self._away_since is not None:
                                self._answered(source.response)
                            backoff.reset()
                            failing = False
                            async for sse in source.aiter_sse():
                                if not sse.id or sse.event == "dropped":
                                    continue
                                event = _event(json.loads(sse.data))
                                cursor = event.id
                                self._waiting.discard(me)
                                yield event
                                self._waiting.add(me)
                    except httpx.TransportError as exc:  # dropped, or not reached: an outage once it fails again
                        dropped = _unreachable(self.base_url, exc)
                        if failing:
                            self._outage(dropped, "following the events", None)
                        else:
                            log.debug("following the events: %s; reconnecting", dropped)
                    except (httpx.HTTPError, ValueError) as exc:
                        log.debug("event stream from %s dropped (%s); reconnecting", redact_url(self.base_url), exc)
                    except Unavailable as exc:
                        self._outage(exc, "following the events", None)
                        asked = exc.retry_after
                    failing = True
                    # back off before reconnecting: at most 5 s, or what the server asks up to UNAVAILABLE_CAP
                    await asyncio.sleep(min(backoff.next_after(asked), UNAVAILABLE_CAP))
                except asyncio.CancelledError:
                    if not self._uncut(me):
                        raise
                    return
                finally:
                    self._waiting.discard(me)

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
        # The server applies who may see what from the token; `involving` is its business.
        if not 0 <= limit <= 1000:
            raise ValueError("limit must be between 0 and 1000")
        if not 0 <= after <= MAX_EVENT_ID:
            raise InvalidRequest(f"after must be an event id between 0 and {MAX_EVENT_ID}")
        params: dict[str, Any] = {"after": after, "limit": limit}
        params |= {k: v for k, v in (("request", request), ("session", session), ("run", run)) if v is not None}
        page = await self._call("GET", "/events", params=params)
        events = [e for e in map(_event, page["events"]) if until is None or e.id <= until]
        # Cut by the size of its requests, as the server says (not when it reached past `until`).
        return Listed(events, cut=bool(page.get("cut")) and len(events) == len(page["events"]))

    async def last_event_id(self) -> int:
        return int((await self._call("GET", "/events", params={"limit": 0}))["last_event_id"])

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
        self._check_run(agent, session=session, run_id=run_id, requester=requester)
        _check_exclusive(exclusive, session)
        seconds = None if max_duration is None else _seconds(max_duration, "max_duration")  # JSON takes no NaN
        body = {"agent": agent, "session": session, "run_id": run_id, "max_duration": seconds, "requester": requester}
        if exclusive:  # (only then: a server from before takes no such field)
            body["exclusive"] = True
        return run_from_dict(await self._call("POST", "/runs", json=body))

    async def park(
        self,
        run_id: str,
        *,
        state: Any,
        waiting_on: Sequence[str],
        status: RunStatus | str | None = None,
        worker: str | None = None,
    ) -> Run:
        check_json(state, "state", MAX_STATE_BYTES)  # what cannot be sent is refused here, as a local broker does
        body = {
            "state": state,
            "waiting_on": list(waiting_on) if not isinstance(waiting_on, str) else waiting_on,
            "status": RunStatus(status).value if status is not None else None,
            "worker": worker,
        }
        return run_from_dict(await self._call("POST", f"{_run_path(run_id)}/park", json=body, request_id=run_id))

    async def claim_run(
        self,
        agents: Sequence[str] | None = None,
        *,
        worker: str,
        lease: float = DEFAULT_LEASE,
        wait: float = 0.0,
    ) -> Run | None:
        if isinstance(agents, str):
            agents = [agents]
        lease = _seconds(lease, "lease")
        body = {"agents": None if agents is None else list(agents), "worker": worker, "lease": lease}
        wait = min(max(float(wait), 0.0), LONG_POLL)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait

        async def claim() -> httpx.Response:
            left = max(deadline - loop.time(), 0.0)
            response = await self._send("POST", "/runs/claim", json=body, params={"wait": left}, timeout=left)
            if response.status_code in _UNAVAILABLE and isinstance(error := _error(response, ""), Unavailable):
                raise error
            return response

        me = asyncio.current_task()
        assert me is not None
        self._waiting.add(me)  # a long poll: `aclose` cuts it, as it cuts a `wait`
        try:
            # Asked again through an outage within `wait`: a claim whose answer was lost
            # holds its run only until the lease runs out, then any worker claims it.
            response = await self._through_outages(claim, deadline, f"worker {worker} claiming a run")
        except asyncio.CancelledError:
            if not self._uncut(me):
                raise
            raise Closed(None, "the broker was disconnected") from None
        finally:
            self._waiting.discard(me)
        if response.status_code == 204:
            return None
        if not response.is_success:
            raise _error(response, "")
        claimed = response.json()
        horizon = claimed.get("pause_timeout")  # the server's: how long a worker may hand the run back
        if isinstance(horizon, int | float) and not isinstance(horizon, bool) and 0 < horizon < math.inf:
            self.pause_timeout = timedelta(seconds=horizon)
        return run_from_dict(claimed)

    async def renew_lease(self, run_id: str, *, worker: str, lease: float = DEFAULT_LEASE) -> bool:
        body = {"worker": worker, "lease": _seconds(lease, "lease")}
        return bool((await self._call("POST", f"{_run_path(run_id)}/lease", json=body, request_id=run_id))["renewed"])

    async def complete_run(self, run_id: str, result: Any = None, *, worker: str | None = None) -> Run:
        check_json(result, "result", MAX_STATE_BYTES)
        body = {"result": result, "worker": worker}
        return run_from_dict(await self._call("POST", f"{_run_path(run_id)}/complete", json=body, request_id=run_id))

    async def fail_run(self, run_id: str, error: str, *, worker: str | None = None) -> Run:
        body = {"error": error, "worker": worker}
        return run_from_dict(await self._call("POST", f"{_run_path(run_id)}/fail", json=body, request_id=run_id))

    async def cancel_run(
        self, run_id: str, reason: str = "cancelled_by_user", *, by: str | None = None, via: str = "python"
    ) -> bool:
        # No `by` or `via`: the server records the token's principal, and "api".
        response = await self._send("POST", f"{_run_path(run_id)}/cancel", json={"reason": reason})
        if response.is_success:
            return True
        error = _error(response, run_id)
        if isinstance(error, RunConflict):
            return False
        raise error

    async def get_run(self, run_id: str) -> Run:
        return run_from_dict(await self._call("GET", _run_path(run_id), request_id=run_id))

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
        # The server keeps to the runs the token may see; `involving` and `teams` are its business.
        if not 1 <= limit <= 1000:
            raise ValueError("limit must be between 1 and 1000")
        params: dict[str, Any] = {"limit": limit, "order": order}
        given = {"agent": agent, "session": session, "requester": requester, "cursor": after}
        params |= {name: value for name, value in given.items() if value is not None}
        if status is not None:
            try:
                params["status"] = RunStatus(status).value
            except ValueError:
                raise InvalidRequest(f"unknown run status {status!r}") from None
        page = await self._call("GET", "/runs", params=params)
        return RunPage([run_from_dict(r) for r in page["items"]], taken("runs", page["next_cursor"]))

    # -- follow-up messages ------------------------------------------------------------------

    async def send_message(
        self,
        run_id: str,
        text: str,
        *,
        by: str | None = None,
        may_answer: Callable[[Request], bool] | None = None,
    ) -> Sent:
        # The server records its token's principal as the sender (`by` is the operator's to
        # give), and decides who may answer what.
        body = {"text": text} if by is None else {"text": text, "by": by}
        response = await self._send("POST", f"{_run_path(run_id)}/messages", json=body)
        if response.status_code == 409 and _code(response) == "thread_busy":
            return await self._sent(response, run_id, text, by)
        raise _error(response, run_id)

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
        # The server chooses the thread's busy run the token may see (a person's own
        # agents' first), as its route does for any client; who may see and answer what
        # is its business.
        segment = _segment(session)
        if segment is None:  # a thread no path can name (a slash in it): chosen here among the runs listed
            return await super().send_to_thread(session, text, by=by)
        body = {"text": text} if by is None else {"text": text, "by": by}
        response = await self._send("POST", f"/threads/{segment}/messages", json=body)
        if response.status_code == 409 and _code(response) == "thread_busy":
            return await self._sent(response, None, text, by, session=session)
        raise _error(response, session)

    async def _sent(
        self, response: httpx.Response, run_id: str | None, text: str, by: str | None, *, session: str = ""
    ) -> Sent:
        """What a send answered with 409 `thread_busy` did, to run `run_id` (None: sent to a
        thread of `session`, the run the server chose: the one of the approval decided, or
        the busy run that holds the message; when nothing was held, the newest busy one)."""
        details = response.json().get("details") or {}
        resolved = details.get("resolved_interaction_id")
        if run_id is None and resolved is not None:
            run_id = (await self.get(resolved)).origin.run
        if run_id is None:
            busy = [run for run in (await self.list_runs(session=session, limit=100)).items if not run.status.ended]
            kept = details.get("followup_id")
            for run in busy:
                if kept is not None and any(f.id == kept for f in await self.list_followups(run.id)):
                    run_id = run.id
                    break
            else:
                run_id = busy[0].id if busy else session
        followup = None
        if details.get("queued"):
            held = next((f for f in await self.list_followups(run_id) if f.id == details["followup_id"]), None)
            followup = held or Followup(str(details["followup_id"]), run_id, text, datetime.now(UTC), by)
        return Sent(run_id, resolved=resolved, followup=followup)

    async def list_followups(self, run_id: str) -> Sequence[Followup]:
        page = await self._call("GET", f"{_run_path(run_id)}/followups", request_id=run_id)
        return [followup_from_dict(item, run_id) for item in page["items"]]

    async def withdraw_followup(self, run_id: str, followup_id: str, *, by: str | None = None) -> Followup:
        response = await self._send("DELETE", f"{_run_path(run_id)}/followups/{followup_id}")
        if response.is_success:
            return followup_from_dict(response.json(), run_id)
        raise _error(response, followup_id)

    async def take_followups(self, run_id: str, *, worker: str | None = None) -> Sequence[Followup]:
        page = await self._call(
            "POST", f"{_run_path(run_id)}/followups/take", json={"worker": worker}, request_id=run_id
        )
        return [followup_from_dict(item, run_id) for item in page["items"]]

    # -- teams ---------------------------------------------------------------------------

    async def list_teams(self) -> Mapping[str, Sequence[str]]:
        # The server shows an admin every team, anyone else the teams they are in.
        found = await self._call("GET", "/teams")
        return {t["name"]: tuple(t["members"]) for t in found["items"]}

    async def team_members(self, team: str) -> Sequence[str] | None:
        response = await self._send("GET", _team_path(team))
        if response.status_code == 404 and _code(response) == "not_found":
            return None
        if not response.is_success:
            raise _error(response, team)
        return tuple(response.json()["members"])

    async def add_team_members(self, team: str, members: Sequence[str] = ()) -> Sequence[str]:
        found = await self._call("POST", f"{_team_path(team)}/members", json={"members": list(members)})
        return tuple(found["members"])

    async def remove_team_member(self, team: str, member: str) -> bool:
        response = await self._send("DELETE", f"{_team_path(team)}/members/{quote(member, safe='')}")
        if response.status_code == 404 and _code(response) == "not_found":
            return False
        if not response.is_success:
            raise _error(response, team)
        return True

    async def delete_team(self, team: str) -> bool:
        response = await self._send("DELETE", _team_path(team))
        if response.status_code == 404 and _code(response) == "not_found":
            return False
        if not response.is_success:
            raise _error(response, team)
        return True

    # -- the outbox ----------------------------------------------------------------------

    async def list_deliveries(
        self,
        *,
        request_id: str | None = None,
        status: DeliveryState | None = None,
        recipient: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> Sequence[Delivery]:
        # The server keeps to the deliveries the token may see; `recipient` is its business.
        if not 1 <= limit <= 1000:
            raise ValueError("limit must be between 1 and 1000")
        if request_id is not None:  # a request's deliveries come whole, in one call
            _id_cursor(after, "deliveries", prefix=DELIVERY_ID_PREFIX)  # as the server would
            try:
                page = await self._call("GET", f"{_request_path(request_id)}/deliveries", request_id=request_id)
            except NotFound:
                return []  # no such request: none of its deliveries, as a local store lists them
            items = [delivery_from_dict(d) for d in page["items"]]
            kept = [d for d in items if (status is None or d.status == status) and (after is None or d.id > after)]
            return kept[:limit]
        return (await self._deliveries("deliveries", {} if status is None else {"status": status}, after, limit))[0]

    async def _deliveries(
        self, of: Literal["deliveries", "dead_letters"], params: dict[str, Any], after: str | None, limit: int
    ) -> tuple[Sequence[Delivery], str | None]:
        """`GET /deliveries` with `params`, from `after`, a page of the server's (at most
        `_DELIVERY_PAGE`) after another until `limit` are found or none is left: those,
        and the position after them (None at the end). It sends the position as `after`,
        which every server takes (an older one knows no `cursor`)."""
        found: list[Delivery] = []
        while True:
            asked = params | {"limit": min(_DELIVERY_PAGE, limit - len(found))}
            page = await self._call("GET", "/deliveries", params=asked if after is None else asked | {"after": after})
            found.extend(delivery_from_dict(d) for d in page["items"])
            after = taken(of, page.get("next_cursor", page.get("next")) or None)  # `next`: an older server's
            if after is None or len(found) >= limit:
                return found, after

    async def dead_letters(
        self, *, recipient: str | None = None, after: str | None = None, limit: int = 50
    ) -> DeliveryPage:
        # The server keeps to the caller's dead letters; `recipient` is its business.
        if not 1 <= limit <= 1000:
            raise ValueError("limit must be between 1 and 1000")
        return DeliveryPage(
            *await self._deliveries("dead_letters", {"status": "dead", "order": "newest"}, after, limit)
        )

    async def get_delivery(self, delivery_id: str) -> Delivery:
        path = f"/deliveries/{quote(delivery_id, safe='')}"
        return delivery_from_dict(await self._call("GET", path, request_id=delivery_id))

    async def retry_delivery(self, delivery_id: str) -> Delivery:
        path = f"/deliveries/{quote(delivery_id, safe='')}/retry"
        return delivery_from_dict(await self._call("POST", path, request_id=delivery_id))

    async def routing(self) -> dict[str, Any] | None:
        """The routing in use on the server, its secrets masked (an admin's); None when the
        server has none."""
        response = await self._send("GET", "/routing")
        if response.status_code == 404 and _code(response) == "not_found":
            return None
        if not response.is_success:
            raise _error(response, "")
        document: dict[str, Any] = response.json()
        return document

    async def set_routing(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """Replace the server's routing (an admin's): the server checks it, channels and
        all, and every node's delivery loop takes it up."""
        kept: dict[str, Any] = await self._call("PUT", "/routing", json=dict(document))
        return kept


_NOT_EXPIRED = "the request stays pending there: the server could not be told to expire it"

_DELIVERY_PAGE = 500
_CLAIMS_PAGE = 200
"""The most request ids one `GET /claims` takes."""
"""The most deliveries the API lists in one page."""


def _team_path(team: str) -> str:
    return f"/teams/{quote(team, safe='')}"


def _query_params(query: Query) -> dict[str, Any]:
    """A list's query string: each filter given, under its parameter's name, as the API reads it."""
    params: dict[str, Any] = {}
    for spec in fields(query):
        wire = spec.metadata.get("wire", None)
        value = getattr(query, spec.name)
        if wire is None or value is None or value is False:  # not a parameter, or not given
            continue
        if isinstance(value, datetime):
            value = value.isoformat()
        elif value is True:
            value = "true"
        params[wire or spec.name] = value.value if isinstance(value, Status) else value
    return params


def _event(data: Mapping[str, Any]) -> Event:
    request = data.get("request")
    return Event(
        id=int(data["id"]),
        type=data["type"],
        at=datetime.fromisoformat(data["at"]),
        request_id=data.get("request_id"),
        request=request_from_dict(request) if request else None,
        data=data.get("data") or {},
    )


def _code(response: httpx.Response) -> str:
    with contextlib.suppress(ValueError, AttributeError):
        return str(response.json().get("code", ""))
    return ""


def _policy_path(agent: str, server: str) -> str:
    path = f"/approval-policies/{quote(agent, safe='')}"
    return f"{path}/servers/{quote(server, safe='')}" if server else path


def _segment(item_id: str) -> str | None:
    """`item_id` as one quoted path segment; None for an id no segment can carry (empty, a
    dot segment, one with a slash): no request's or run's, rather than another route's."""
    if item_id in ("", ".", "..") or "/" in item_id:
        return None
    return quote(item_id, safe="")


def _run_path(run_id: str) -> str:
    """The path of a run (a run id of an agent's choosing, as a server keeps it, reads
    `agent:id`). An id no path segment can carry is no run's."""
    segment = _segment(run_id)
    if segment is None:
        raise NotFound(run_id, message=f"no run with id {run_id!r}")
    return f"/runs/{segment}"


def _request_path(request_id: str) -> str:
    """The path of a request. An id no path segment can carry is no request's: `NotFound`,
    as a local store says."""
    segment = _segment(request_id)
    if segment is None:
        raise NotFound(request_id)
    return f"/requests/{segment}"


def _unreachable(base_url: str, exc: httpx.TransportError) -> ConnectionError:
    """A call that did not reach the server, or was cut before its answer came (refused,
    reset, a server that stopped mid-answer, no answer in time), naming the server."""
    return ConnectionError(
        f"cannot reach the interlock server at {redact_url(base_url)}: {str(exc) or type(exc).__name__}"
    )


def _not_interlock(base_url: str, response: httpx.Response) -> ConnectionError:
    """The base URL is not an interlock server's own address: `whoami`, which every one
    answers, was not found there."""
    return ConnectionError(
        f"{redact_url(base_url)} is not an interlock server's own address: {response.request.method} "
        f"{response.request.url.path} answered 404 Not Found (an interlock server answers it at /api/v1/whoami of "
        "the address `interlock serve` prints)"
    )


_UNAVAILABLE = frozenset({502, 503, 504})
"""What a proxy answers for a server it cannot reach, or that does not answer in time."""


def _refused_keep_run(response: httpx.Response) -> bool:
    """Whether `response` is a server's refusal of the query parameter `keep_run`, which a
    server older than it refuses as any parameter its long poll does not take."""
    if response.status_code != 422:
        return False
    body: Any = None
    with contextlib.suppress(ValueError):
        body = response.json()
    message = body.get("message", body.get("detail")) if isinstance(body, Mapping) else None
    return isinstance(message, str) and "unknown query parameter 'keep_run'" in message


def _error(response: httpx.Response, request_id: str) -> Exception:
    """The exception a problem response stands for (`interlock.wire`), a `RateLimited` or
    `Unavailable` with its `Retry-After`; a 502, 503 or 504 with no problem of the table
    (a proxy's), `Unavailable`; for anything else, httpx's own status error."""
    body: Any = None
    with contextlib.suppress(ValueError):
        body = response.json()
    if isinstance(body, Mapping):
        found = error_from_problem(body, request_id=request_id)
        if isinstance(found, RateLimited | Unavailable):
            found.retry_after = _retry_after(response, found.retry_after)
        if found is not None:
            return found
    if response.status_code in _UNAVAILABLE:
        return Unavailable(
            f"the server is unavailable for now: {response.status_code} {response.reason_phrase}",
            retry_after=_retry_after(response, None),
        )
    if response.status_code == 404:
        return NotFound(request_id)
    detail = body.get("detail") if isinstance(body, Mapping) else response.text
    return httpx.HTTPStatusError(
        f"{response.status_code} {response.reason_phrase}: {detail}", request=response.request, response=response
    )


def _retry_after(response: httpx.Response, given: float | None) -> float | None:
    """The seconds a response's `Retry-After` asks to wait (a number of seconds, or an
    HTTP date), else `given` (what its problem said)."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return given
    with contextlib.suppress(ValueError):
        seconds = float(value)
        return seconds if math.isfinite(seconds) and seconds >= 0 else given
    with contextlib.suppress(TypeError, ValueError, IndexError):
        when = email.utils.parsedate_to_datetime(value)
        if when.tzinfo is not None:
            return max((when - datetime.now(UTC)).total_seconds(), 0.0)
    return given
