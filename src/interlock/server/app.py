"""The HTTP API: requests, answers, the event log and its live stream, health and metrics.

Every route goes through the Broker, so the rules are the same as in-process; this layer
adds who may do what (`interlock.principals`) and the wire formats. Errors are RFC 9457
problem details with a stable `code`: invalid_request, invalid_answer, not_found,
already_settled, closed, unauthorized, forbidden, pending, too_large.

A request body is read up to `max_body_size` bytes (1 MiB by default) and refused with 413
`too_large` past that, whatever its Content-Length says; the parts of a request are then
held to the broker's `Limits`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from ..approvals import mark, unmarked
from ..broker import MAX_EVENT_ID, LocalBroker, connect
from ..errors import AlreadySettled, InvalidAnswer, InvalidRequest, NotFound
from ..model import Event, Limits, Status, origin_from_dict, request_to_dict
from ..model import Request as HumanRequest
from ..principals import Principal, can_answer, can_cancel, can_read
from ..wire import WIRE_ERRORS, problem_of
from .answers import decide
from .auth import Auth, loopback_host, same_origin
from .common import ApiError, AppState, Quotas, can_see, event_to_dict, parse_event_id, problem
from .quotas import DEFAULT_QUOTA, DEFAULT_STREAMS, Quota, TooMany
from .schemas import (
    AnswerBody,
    BatchAnswerBody,
    BatchResult,
    CancelBody,
    CloseBody,
    ConsumeBody,
    ConsumeResult,
    CreateBody,
    EventModel,
    EventPage,
    InformBody,
    Problem,
    RejectBody,
    ReopenBody,
    Reopened,
    RequestModel,
    RequestPage,
)
from .stream import Dropped
from .web import install_web

__all__ = ["DEFAULT_MAX_BODY_SIZE", "BodyLimit", "create_app", "event_to_dict", "parse_event_id"]

log = logging.getLogger("interlock.server")

DEFAULT_MAX_BODY_SIZE = 1024 * 1024
_CODES = {400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 409: "already_settled"}
_CODES |= {405: "method_not_allowed", 413: "too_large", 429: "rate_limited"}


class BodyLimit:
    """ASGI middleware: refuse a request body over `max_size` bytes with 413 `too_large`.

    A Content-Length over the limit is refused before anything is read; otherwise the
    body is counted as it arrives (chunked bodies included, and a Content-Length that
    understates the body), and reading past the limit fails the route with the same 413.
    """

    def __init__(self, app: Any, max_size: int = DEFAULT_MAX_BODY_SIZE) -> None:
        if max_size < 1:
            raise ValueError("max_body_size must be at least 1 byte")
        self.app = app
        self.max_size = max_size

    def _too_large(self) -> str:
        return f"the request body is larger than {_bytes(self.max_size)}"

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_size:
            await problem(413, "too_large", self._too_large())(scope, receive, send)
            return
        received = 0

        async def counted() -> Any:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_size:
                    # an HTTPException: it passes through the body parsing untouched
                    # and the app's handler answers it as problem details.
                    raise StarletteHTTPException(413, self._too_large())
            return message

        await self.app(scope, counted, send)


def _bytes(size: int) -> str:
    for unit, scale in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} bytes"


def create_app(
    url: str | None = None,
    *,
    broker: LocalBroker | None = None,
    auth: bool = True,
    secret_key: str | None = None,
    queue_size: int = 1000,
    keepalive: float = 15.0,
    trusted_proxies: Sequence[str] = (),
    open_recipients: bool = False,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    limits: Limits | None = None,
    rate_limit: Quota | Literal["default"] | None = "default",
    max_streams: int | Literal["default"] | None = "default",
) -> FastAPI:
    """The ASGI app on the store at `url` (or on a broker you opened yourself).

    `trusted_proxies`: addresses or networks of proxies whose X-Forwarded-Proto says the
    browser used HTTPS (the session cookie is then `Secure`); none by default.
    `open_recipients`: with auth, accept requests to names that are no principal here
    (by default they are refused with 422); without auth any name is accepted.
    `max_body_size` caps every request body (413 past it); `limits` (see `Limits`) caps
    the parts of requests, answers and updates, for a broker made here (a broker you pass
    keeps its own).
    `rate_limit` caps how fast each principal creates requests and, separately, sends
    updates (429 past it); `max_streams` how many event streams each holds open. None
    turns either off; by default both are on with auth (`quotas.DEFAULT_QUOTA`,
    `quotas.DEFAULT_STREAMS`) and off without it, where the only caller is this machine's
    user.
    """
    the_broker = broker or connect(url, **({"limits": limits} if limits is not None else {}))
    if not isinstance(the_broker, LocalBroker):
        raise ValueError("a server keeps its own store (memory://, sqlite:// or postgresql://), not another server's")
    the_auth = Auth(the_broker.principals, enabled=auth, secret_key=secret_key, trusted_proxies=trusted_proxies)
    state = AppState(the_broker, the_auth, queue_size, keepalive, open_recipients=open_recipients or not auth)
    state.quotas = Quotas(
        (DEFAULT_QUOTA if auth else None) if rate_limit == "default" else rate_limit,
        (DEFAULT_STREAMS if auth else None) if max_streams == "default" else max_streams,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await the_broker.open()
        state.metrics.pending.set(len(await the_broker.pending()))
        await state.hub.start()
        try:
            yield
        finally:
            await state.hub.stop()
            if broker is None:
                await the_broker.aclose()

    app = FastAPI(
        title="interlock",
        version="1",
        summary="Durable human-in-the-loop requests for AI agents.",
        lifespan=lifespan,
        responses={401: {"model": Problem}, 403: {"model": Problem}},
    )
    app.state.interlock = state
    app.add_middleware(BodyLimit, max_size=max_body_size)
    _install_errors(app)
    if not auth:
        app.add_middleware(LoopbackOnly)
    _install_quota_errors(app)
    app.include_router(_api_router(state), prefix="/api/v1")
    _document_problems(app)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        await the_broker.last_event_id()  # the store answers
        return {"status": "ok"}

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    install_web(app, state)
    return app


_UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class LoopbackOnly:
    """Without auth, serve this machine's own pages and clients only.

    A page on another site can reach a loopback server too: through DNS rebinding (its
    name made to resolve to 127.0.0.1, so the browser sends `Host: evil.example`), or by
    posting a form across sites. So every request must name a loopback host (localhost,
    127.0.0.1, [::1], any port), and a state-changing one that carries an `Origin` must
    come from this server's own origin; otherwise 403 with problem details.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = Headers(scope=scope)
            host = headers.get("host", "")
            refusal = None
            if not loopback_host(host):
                refusal = "without auth, this server answers only to localhost, 127.0.0.1 or [::1] in the Host header"
            elif (
                scope.get("method", "GET") in _UNSAFE_METHODS
                and "origin" in headers
                and not same_origin(headers["origin"], scope.get("scheme", "http"), host)
            ):
                refusal = "without auth, this server refuses changes sent from pages of other origins"
            if refusal is not None:
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await problem(403, "forbidden", refusal)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _install_errors(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return problem(exc.status, exc.code, exc.detail, **exc.extra)

    @app.exception_handler(StarletteHTTPException)  # the app's own, and unknown routes (404, 405)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        response = problem(exc.status_code, _CODES.get(exc.status_code, "error"), str(exc.detail))
        response.headers.update(exc.headers or {})
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        status = 400 if first.get("type") == "json_invalid" else 422
        return problem(status, "invalid_request", f"{where}: {first.get('msg', 'invalid')}" if where else "invalid")

    async def wire_error(request: Request, exc: Exception) -> JSONResponse:
        found = problem_of(exc)
        assert found is not None  # registered for the table's exceptions only
        status, code, extra = found
        return problem(status, code, str(exc), **extra)

    for error in dict.fromkeys(row.error for row in WIRE_ERRORS):
        app.add_exception_handler(error, wire_error)


_PROBLEMS = {
    400: "the body is not valid JSON, or (an answer) does not fit its asks",
    404: "no such request",
    408: "still pending when the time ran out",
    409: "the request is no longer pending (`already_settled`), or its channel is closed (`closed`)",
    413: "the body is too large",
    422: "the body or a parameter does not fit the schema, or is refused (`invalid_request`)",
    429: "a quota of yours is used up (`rate_limited`); `Retry-After` says when to try again",
}


def _problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of a route for the problems it can answer with."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        out[status] = {"model": Problem, "description": _PROBLEMS[status]}
        if status == 429:
            out[status]["headers"] = {
                "Retry-After": {"description": "seconds to wait", "schema": {"type": "integer", "minimum": 1}}
            }
    return out


def _document_problems(app: FastAPI) -> None:
    """Publish every error response as what the server sends: `application/problem+json`
    with the `Problem` schema, FastAPI's own 422 shape included (the handlers above
    answer validation errors as problems too)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        problem_ref = {"$ref": "#/components/schemas/Problem"}
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                for status, response in operation.get("responses", {}).items():
                    if status.isdigit() and int(status) >= 400:
                        response["content"] = {"application/problem+json": {"schema": problem_ref}}
                        if status == "422":
                            response["description"] = _PROBLEMS[422]
        components = schema.get("components", {}).get("schemas", {})
        for unused in ("HTTPValidationError", "ValidationError"):
            components.pop(unused, None)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to customize the schema


def _rate_limited(which: Literal["creates", "updates"], what: str) -> Callable[..., Any]:
    """A route dependency that takes one of the caller's `which` tokens, or answers 429."""

    async def check(request: Request, caller: Caller) -> None:
        state: AppState = request.app.state.interlock
        limiter = getattr(state.quotas, which)
        if limiter is not None:
            limiter.take(caller.name, what)

    return check


def _install_quota_errors(app: FastAPI) -> None:
    @app.exception_handler(TooMany)
    async def too_many(request: Request, exc: TooMany) -> JSONResponse:
        response = problem(429, "rate_limited", exc.detail)
        response.headers["Retry-After"] = str(exc.retry_after)
        return response


async def _caller(request: Request) -> Principal:
    state: AppState = request.app.state.interlock
    return await state.auth.api_principal(request)


Caller = Annotated[Principal, Depends(_caller)]


def _api_router(state: AppState) -> APIRouter:
    router = APIRouter()
    broker = state.broker

    def out(request: HumanRequest) -> JSONResponse:
        return JSONResponse(request_to_dict(request))

    async def visible(request_id: str, principal: Principal) -> HumanRequest:
        request = await broker.get(request_id)
        if not can_read(principal, request):
            raise ApiError(403, "forbidden", "this request is neither to you nor from you")
        return request

    async def settled_or_conflict(request_id: str, done: bool) -> HumanRequest:
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
            **_problems(400, 409, 413, 422, 429),
        },
        dependencies=[Depends(_rate_limited("creates", "requests created"))],
        tags=["requests"],
    )
    async def create_request(
        body: CreateBody,
        caller: Caller,
        http: Request,
        wait: Annotated[
            float | None,
            Query(ge=0, le=300, description="hold the call up to this many seconds for the request to settle"),
        ] = None,
    ) -> JSONResponse:
        """Ask a person. Without `to` the request goes to the caller's own inbox: an agent's
        owner's, or the person's own. With `wait`, a long poll: the answer is the request
        once it settles, or as it is (pending) when `wait` runs out; a client that hangs up
        meanwhile withdraws it, as a waiting call that is cut does."""
        response = await create(body, caller)
        if wait is None or wait <= 0:
            return response
        created = json.loads(bytes(response.body))
        if created["status"] != Status.PENDING:
            return response
        settled = await _watch_unless_gone(broker, http, created["id"], wait)
        return JSONResponse(request_to_dict(settled), status_code=response.status_code)

    async def create(body: CreateBody, caller: Principal, *, gate: bool = False) -> JSONResponse:
        """Store a request from `caller`; with `gate`, one marked as an approval gate's own."""
        to = body.to
        if to is None and caller.kind == "agent":
            to = caller.owner
        elif to is None and caller.kind == "human":
            to = caller.name
        if caller.kind != "admin" and not to:
            raise ApiError(422, "invalid_request", "name the recipient in `to`")
        if to is not None and not state.open_recipients and to not in state.known_recipients:
            if await broker.principals.get_principal(to) is None:
                raise ApiError(422, "invalid_request", f"to: there is no human or agent named {to!r} here")
            state.known_recipients.add(to)
        asks = await broker.build_asks([a.model_dump(by_alias=True) for a in body.asks])
        origin = origin_from_dict(body.origin.model_dump(exclude_none=True))
        if caller.kind == "agent" and origin.agent is None:
            origin = replace(origin, agent=caller.name)
        prepared = broker.prepare(
            asks,
            kind=body.kind,
            to=to,
            title=body.title,
            details=body.details,
            context=body.context,
            timeout=body.timeout,
            requester=body.requester if caller.kind == "admin" else caller.name,
            idempotency_key=body.idempotency_key,
            origin=origin,
        )
        request, created = await broker.submit(mark(prepared) if gate else prepared)
        return JSONResponse(request_to_dict(request), status_code=201 if created else 200)

    @router.post(
        "/approvals",
        status_code=201,
        response_model=RequestModel,
        responses={
            200: {"model": RequestModel, "description": "the first request with this idempotency key"},
            **_problems(400, 409, 413, 422, 429),
        },
        dependencies=[Depends(_rate_limited("creates", "requests created"))],
        tags=["requests"],
    )
    async def create_approval(body: CreateBody, caller: Caller) -> JSONResponse:
        """Ask approval for a tool call as an approval gate does (`interlock.connect(url)` in
        an agent's process sends its gate's requests here). The server marks the request as a
        gate approval (`context.kind` = `interlock.approval`, which `POST /requests` refuses)
        and records you as its requester; a gate trusts only the approvals its own principal
        made. `kind` must be `approval` and `context` an object."""
        if body.kind != "approval":
            raise ApiError(422, "invalid_request", "kind: a gate approval has kind 'approval'")
        return await create(body.model_copy(update={"context": unmarked(body.context)}), caller, gate=True)

    @router.post(
        "/requests/{request_id}/consume",
        response_model=ConsumeResult,
        responses=_problems(400, 404, 422),
        tags=["requests"],
    )
    async def consume_request(request_id: str, caller: Caller, body: ConsumeBody | None = None) -> dict[str, Any]:
        """Spend an answered request you made, once: `consumed` is true for the one call, on
        any node, that does, and false when it is not answered or was consumed already. An
        approval gate runs a tool call only on an approval it consumed."""
        request = await visible(request_id, caller)
        if caller.kind != "admin" and caller.name != request.requester:
            raise ApiError(403, "forbidden", "only whoever made the request may consume it")
        by = (body.by if body is not None else None) if caller.kind == "admin" else caller.name
        return {"id": request_id, "consumed": await broker.consume(request_id, by=by)}

    @router.get("/requests", response_model=RequestPage, responses=_problems(422), tags=["requests"])
    async def list_requests(
        caller: Caller,
        status: Annotated[Literal["pending", "answered", "rejected", "expired", "cancelled"] | None, Query()] = None,
        kind: Annotated[Literal["question", "approval"] | None, Query()] = None,
        recipient: str | None = None,
        requester: str | None = None,
        session: str | None = None,
        channel: str | None = None,
        agent: str | None = None,
        run: str | None = None,
        cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 50,
        order: Literal["desc", "asc"] = "desc",
    ) -> JSONResponse:
        """Your inbox (requests to you) or, with `requester` set to you, what you asked."""
        if caller.kind != "admin":
            if requester is None and recipient is None:
                if caller.kind == "agent":
                    requester = caller.name
                else:
                    recipient = caller.name
            if (recipient is not None and recipient != caller.name) or (
                requester is not None and requester != caller.name
            ):
                raise ApiError(403, "forbidden", "you may list only requests to you or from you")
        page = await broker.list(
            recipient=recipient,
            requester=requester,
            status=status,
            kind=kind,
            session=session,
            channel=channel,
            agent=agent,
            run=run,
            after=cursor,
            limit=limit,
            order=order,
        )
        return JSONResponse({"items": [request_to_dict(r) for r in page.items], "next_cursor": page.next_cursor})

    @router.get("/requests/{request_id}", response_model=RequestModel, responses=_problems(404), tags=["requests"])
    async def get_request(request_id: str, caller: Caller) -> JSONResponse:
        return out(await visible(request_id, caller))

    @router.get(
        "/requests/{request_id}/wait",
        response_model=RequestModel,
        responses=_problems(404, 408, 422),
        tags=["requests"],
    )
    async def wait_request(
        request_id: str, caller: Caller, timeout: Annotated[float, Query(ge=0, le=300)] = 30
    ) -> JSONResponse:
        """Long poll: the request once it settles, or 408 `pending` when `timeout` passes."""
        await visible(request_id, caller)
        request = await broker.watch(request_id, timeout=timeout)
        if request.status is Status.PENDING:
            raise ApiError(408, "pending", f"request {request_id} is still pending", current_status="pending")
        return out(request)

    async def answer_one(request_id: str, body: AnswerBody, caller: Principal) -> HumanRequest:
        request = await visible(request_id, caller)
        if body.cancel:  # a Novo-style withdrawal: the requester's to make, like /cancel
            if not can_cancel(caller, request):
                raise ApiError(403, "forbidden", "only whoever made the request may cancel it")
        elif not can_answer(caller, request):
            raise ApiError(403, "forbidden", "only the human the request is to may answer it")
        if request.status is not Status.PENDING:
            raise AlreadySettled(request_id, request.status.value)
        try:
            decision = decide(request, body)
        except InvalidAnswer as exc:
            raise ApiError(400, "invalid_answer", str(exc), ask_id=exc.ask_id) from None
        by = body.by if caller.kind == "admin" else caller.name
        if decision.cancel:
            done = await broker.cancel(request_id, body.reason, by=by, via="api")
        else:
            done = await broker.resolve(request_id, decision.value, by=by, via="api", comment=body.reason)
        return await settled_or_conflict(request_id, done)

    @router.post(
        "/requests/{request_id}/answer",
        response_model=RequestModel,
        responses=_problems(400, 404, 409, 413, 422),
        tags=["answers"],
    )
    async def answer_request(request_id: str, body: AnswerBody, caller: Caller) -> JSONResponse:
        """Answer with `answers` by ask id, a bare `answer`, or Novo-compatible `inputResponses`;
        `cancel: true` withdraws it instead."""
        return out(await answer_one(request_id, body, caller))

    @router.post("/answers", response_model=list[BatchResult], responses=_problems(400, 413, 422), tags=["answers"])
    async def answer_batch(body: BatchAnswerBody, caller: Caller) -> list[dict[str, Any]]:
        """Answer several requests; each result stands on its own."""
        results = []
        for item in body.items:
            fields = item.model_dump(exclude={"id"}, exclude_unset=True, by_alias=True)
            try:
                settled = await answer_one(item.id, AnswerBody.model_validate(fields), caller)
                results.append({"id": item.id, "ok": True, "status": settled.status.value})
            except (ApiError, InvalidAnswer, InvalidRequest, NotFound, AlreadySettled) as exc:
                results.append({"id": item.id, "ok": False, "error": _error_of(exc)})
        return results

    @router.post(
        "/requests/{request_id}/reject",
        response_model=RequestModel,
        responses=_problems(400, 404, 409, 413, 422),
        tags=["answers"],
    )
    async def reject_request(request_id: str, body: RejectBody, caller: Caller) -> JSONResponse:
        request = await visible(request_id, caller)
        if not can_answer(caller, request):
            raise ApiError(403, "forbidden", "only the human the request is to may reject it")
        by = None if caller.kind == "admin" else caller.name
        done = await broker.reject(request_id, body.reason, by=by, via="api")
        return out(await settled_or_conflict(request_id, done))

    @router.post(
        "/requests/{request_id}/cancel",
        response_model=RequestModel,
        responses=_problems(400, 404, 409, 413, 422),
        tags=["requests"],
    )
    async def cancel_request(request_id: str, body: CancelBody, caller: Caller) -> JSONResponse:
        """Withdraw a request you made."""
        request = await visible(request_id, caller)
        if not can_cancel(caller, request):
            raise ApiError(403, "forbidden", "only whoever made the request may cancel it")
        by = None if caller.kind == "admin" else caller.name
        if body.cause == "released":
            done = await broker.release(request_id)
        else:
            done = await broker.cancel(request_id, body.reason, by=by, cause=body.cause, via="api")
        return out(await settled_or_conflict(request_id, done))

    @router.post(
        "/requests/{request_id}/expire", response_model=RequestModel, responses=_problems(404, 409), tags=["requests"]
    )
    async def expire_request(request_id: str, caller: Caller) -> JSONResponse:
        """Expire a request you made now (a waiting client whose own time ran out)."""
        request = await visible(request_id, caller)
        if not can_cancel(caller, request):
            raise ApiError(403, "forbidden", "only whoever made the request may expire it")
        return out(await settled_or_conflict(request_id, await broker.expire(request_id)))

    @router.post("/close", response_model=list[RequestModel], responses=_problems(400, 413, 422), tags=["requests"])
    async def close_channel(body: CloseBody, caller: Caller) -> list[dict[str, Any]]:
        """Close a channel: withdraw its pending requests and refuse later creates there,
        on every node, until `/reopen`. An admin (a server without auth) closes it for
        everyone; anyone else closes it for their own requests. Without a channel, withdraw
        the pending requests (all of them for an admin, else yours) and refuse nothing."""
        requester = None if caller.kind == "admin" else caller.name
        if body.channel is not None:
            before = await broker.pending(channel=body.channel, **({"requester": requester} if requester else {}))
            await broker.close(body.channel, requester=requester)
            return [request_to_dict(r) for i in before if (r := await broker.get(i)).status is not Status.PENDING]
        withdrawn = []
        for request_id in await broker.pending(**({"requester": requester} if requester else {})):
            if await broker.cancel(request_id, "the channel was closed", by=requester, cause="closed", via="api"):
                withdrawn.append(request_to_dict(await broker.get(request_id)))
        return withdrawn

    @router.post("/reopen", response_model=Reopened, responses=_problems(400, 413, 422), tags=["requests"])
    async def reopen_channel(body: ReopenBody, caller: Caller) -> dict[str, Any]:
        """Take back a `/close` of the channel (yours; every closure of it for an admin), so
        requests can be created there again."""
        requester = None if caller.kind == "admin" else caller.name
        return {"channel": body.channel, "reopened": await broker.reopen(body.channel, requester=requester)}

    @router.post(
        "/inform",
        status_code=201,
        response_model=EventModel,
        responses=_problems(400, 413, 422, 429),
        dependencies=[Depends(_rate_limited("updates", "updates sent"))],
        tags=["events"],
    )
    async def inform(body: InformBody, caller: Caller) -> dict[str, Any]:
        """Record a progress update for a person; nothing waits for it. The update's
        `agent` is the calling agent (the body's is honoured only without auth)."""
        to = body.to or (caller.owner if caller.kind == "agent" else None)
        agent = body.agent if caller.kind == "admin" else (caller.name if caller.kind == "agent" else None)
        event = await broker.inform(
            body.message,
            to=to,
            session=body.session,
            agent=agent,
            run=body.run,
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

    @router.get("/events", response_model=EventPage, responses=_problems(422), tags=["events"])
    async def events(
        caller: Caller,
        after: Annotated[int, Query(ge=0, le=MAX_EVENT_ID)] = 0,
        limit: Annotated[int, Query(ge=0, le=1000)] = 500,
        request: str | None = None,
        session: str | None = None,
        run: str | None = None,
    ) -> dict[str, Any]:
        """The event log after `after`, oldest first, as far as you may see it."""
        last = await broker.last_event_id()
        page = await broker.find_events(
            after=after,
            until=last,
            limit=limit,
            involving=None if caller.kind == "admin" else caller.name,
            request=request,
            session=session,
            run=run,
        )
        if limit > 0 and len(page) == limit:
            last = page[-1].id  # a full page: continue from here
        return {"events": [event_to_dict(e) for e in page], "last_event_id": last}

    @router.get(
        "/events/stream",
        response_class=EventSourceResponse,
        responses={
            200: {"content": {"text/event-stream": {}}, "description": "server-sent events"},
            **_problems(422, 429),
        },
        tags=["events"],
    )
    async def stream(
        caller: Caller,
        http: Request,
        request: str | None = None,
        session: str | None = None,
        run: str | None = None,
        after: Annotated[
            int | None, Query(ge=0, le=MAX_EVENT_ID, description="replay from here; Last-Event-ID wins")
        ] = None,
        last_event_id: Annotated[str | None, Header()] = None,
    ) -> EventSourceResponse:
        """Live events as server-sent events. Each `id` is the event's id: reconnect with
        `Last-Event-ID` and exactly the missed events are replayed, in order, once."""
        try:  # here, before the stream's 200 goes out
            start = parse_event_id(last_event_id)
        except ValueError as exc:
            raise ApiError(400, "invalid_request", str(exc)) from None
        start = after if start is None else start
        accept = event_filter(caller, request, session, run)
        holder = state.auth.holder(http)
        token = http.headers.get("authorization", "").partition(" ")[2].strip()

        async def still_valid() -> bool:
            return await state.auth.from_token(token) is not None

        async def replay(cursor: int) -> AsyncIterator[Event]:
            """The stored events this stream shows, a page at a time from indexes."""
            involving = None if caller.kind == "admin" else caller.name
            while True:
                page = await broker.find_events(
                    after=cursor, limit=500, involving=involving, request=request, session=session, run=run
                )
                for event in page:
                    yield event
                if len(page) < 500:
                    return
                cursor = page[-1].id

        async def generate() -> AsyncIterator[ServerSentEvent]:
            yield ServerSentEvent(comment="connected", retry=2000)
            try:
                follow = state.hub.replay_then_follow(
                    accept, start, replay, holder=holder, still_valid=still_valid if holder is not None else None
                )
                async for event in follow:
                    yield ServerSentEvent(data=state.hub.encoded(event), event=event.type, id=str(event.id))
            except Dropped as exc:
                yield ServerSentEvent(data=json.dumps({"reason": str(exc)}), event="dropped")

        # No per-send timeout: it costs a cancel scope per event per subscriber, and a
        # subscriber that stops reading is dropped by its bounded queue instead.
        return state.quotas.streams.response(caller.name, generate(), ping=state.keepalive)

    @router.get("/whoami", tags=["principals"])
    async def whoami(caller: Caller) -> dict[str, Any]:
        return {"name": caller.name, "kind": caller.kind, "owner": caller.owner}

    return router


async def _watch_unless_gone(broker: LocalBroker, http: Request, request_id: str, timeout: float) -> HumanRequest:
    """Watch a request for up to `timeout` seconds; if the client hangs up first, withdraw it."""
    watching = asyncio.ensure_future(broker.watch(request_id, timeout=timeout))
    gone = asyncio.ensure_future(_disconnected(http))
    try:
        await asyncio.wait((watching, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not watching.done():
            watching.cancel()
    if watching.done() and not watching.cancelled():
        return watching.result()
    await broker.cancel(request_id, "the waiting call was cancelled", cause="withdrawn", via="api")
    return await broker.get(request_id)


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
