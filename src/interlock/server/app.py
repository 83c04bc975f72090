"""The server's ASGI app: `create_app` composes the HTTP API (`api`, under /api/v1) and the
web inbox (`web`) over one state, with health, metrics, middleware and error handlers, and
the MCP tools at /mcp (`interlock.mcp`, calling the API in process with the caller's token;
when the `mcp` extra is installed, else /mcp says how to get it).

Every route goes through the Broker, so the rules are the same as in-process; the routes
add who may do what (`interlock.principals`) and the wire formats. Errors are RFC 9457
problem details with a stable `code`, each in the wire table (`interlock.wire`) with its
status, its exception and what it means.

A request body is read up to `max_body_size` bytes (1 MiB by default) and refused with 413
`too_large` past that, whatever its Content-Length says; the parts of a request are then
held to the broker's `Limits`.

A store that cannot serve a call for now (`interlock.errors.Unavailable`, whatever its
driver) is answered 503 `unavailable` with `Retry-After` on every route (a page of the web
inbox: a page that says so), and logged as a warning, not as a failure with a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import importlib.util
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.routing import APIRoute
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..broker import LocalBroker, connect
from ..channels import ChannelContext, ChannelError
from ..channels.delivery import DeliveryLoop, send_limits
from ..errors import NewerDatabase, Unavailable
from ..grant_tokens import GrantSigner
from ..model import GrantPolicy, Limits
from ..routing import Routing, load_routing
from ..secret_key import too_short
from ..wire import WIRE_ERRORS, code_for_status, problem_of, retry_after_of
from . import (
    api,
    deliveries,
    email_signin,
    followups,
    grants,
    inbound,
    interactions,
    policies,
    runs,
    teams,
    web_deliveries,
)
from .api_docs import install_api_docs
from .auth import Auth, loopback_host, same_origin
from .common import (
    PROBLEM_REF,
    UNREADABLE,
    ApiError,
    AppState,
    Quotas,
    State,
    TheBroker,
    _caller_dependency,
    describe,
    event_to_dict,
    include,
    known_query_only,
    parse_event_id,
    problem,
    problems_for,
)
from .examples import add_examples
from .pages import install_pages
from .quotas import DEFAULT_QUOTA, DEFAULT_STREAMS, Quota, TooMany
from .schemas import Problem

if TYPE_CHECKING:
    from ..mcp import HttpEndpoint
from .web import install_web, refusal

__all__ = [
    "DEFAULT_MAX_BODY_SIZE",
    "ApiCors",
    "BodyLimit",
    "NoStore",
    "StartupRefused",
    "cors_checked",
    "create_app",
    "event_to_dict",
    "parse_event_id",
]


class StartupRefused(RuntimeError):
    """The app cannot start as its store is set up, for a reason its operator can fix (the
    message says which): the store cannot be opened (a folder or a database not there, a
    password refused, its server down), the other nodes on it sign with another secret key
    or grant key (`interlock.secret_key`), or the routing kept in it names a channel this
    server cannot make. The app's state keeps the message too (`refused`), for a server to
    say it in place of the start-up's traceback."""


log = logging.getLogger("interlock.server")

DEFAULT_MAX_BODY_SIZE = 1024 * 1024
HEALTH_TIMEOUT = 5.0
"""Seconds `/healthz` waits for the store before it answers 503: a database out of reach
without refusing (a network partition, a failover whose old address is gone) takes the
node out of a load balancer's rotation within this, not after the driver gives up."""


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
            await problem("too_large", self._too_large())(scope, receive, send)
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
    pause_timeout: float | None = None,
    max_followups: int | None = None,
    default_expiry: float | None = None,
    open_inboxes: bool = False,
    grant_policy: GrantPolicy | None = None,
    grant_key: GrantSigner | str | Path | None = None,
    on_ready: Callable[[LocalBroker], Awaitable[None]] | None = None,
    routing: Routing | str | None = None,
    delivery_concurrency: int = 16,
    delivery_per_channel: int | None = None,
    cors_origins: Sequence[str] = (),
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
    `pause_timeout` (seconds) is how long a parked run waits on a person before it is
    given up (about two weeks by default), and a run running in its agent's own process
    that neither parks it, starts it again nor asks (or waits on an answer) on it, for a
    broker made here; `max_followups` how many messages a busy run holds for its agent (20
    by default), likewise.
    `default_expiry` (seconds): a request that sets no timeout and belongs to no run
    expires this long after it is created (by default it never does), for a broker made here.
    `open_inboxes`: let anyone signed in ask anyone (an open organisation); by default a
    principal asks its own inbox (an agent: its owner's) and anyone else only with their
    grant to request (`interlock.grants`).
    `grant_policy`: how long grants last (the default for offers without `exp`, and a
    ceiling past which offers are refused), for a broker made here or the one you pass.
    `grant_key`: what signs the grants' tokens: a `GrantSigner`, or the path of an Ed25519
    private key in PEM; by default a key derived from `secret_key`, else one made at start
    (see `interlock.grant_tokens`). The servers on one store must sign with one grant key:
    the first with a key given or derived records its id (`kid`, public) there, and one
    with another, or with a key made at start beside servers that have one, is refused at
    start (`StartupRefused`; see `interlock.secret_key`).
    `secret_key` signs the one-click answer links of messages (and the grant tokens,
    without `grant_key`), and must be at least 32 characters (ValueError); by default a
    key is made at start. The servers on one store must
    share it: the first with a key records its fingerprint there, and one with another key,
    or with none beside servers that have one, is refused at start (`StartupRefused`; see
    `interlock.secret_key`).
    `on_ready` is awaited with the open broker once the app has started (`interlock serve`
    prints a sign-in link from there).
    `routing` (a `Routing`, or the path of a routing file) runs the outbox's delivery loop
    in the server: notices go out through the channels it names (see `interlock.routing`).
    `delivery_concurrency` and `delivery_per_channel` are that loop's sends at a time and
    one channel's share of them (`DeliveryLoop`'s `concurrency` and `per_channel`; by
    default 16, and a quarter of them), for a routing given here or set later (ValueError
    when one is under 1 or the share is above the sends).
    `cors_origins`: the origins (`https://app.example.com`, or `*` for any) of browser apps
    that may call the HTTP API with a token (CORS, on /api/ only; never with cookies); none
    by default, and only with auth.
    """
    if secret_key and (refusal := too_short(secret_key, "secret_key")) is not None:  # ("": none, as in serve)
        raise ValueError(refusal)
    origins = cors_checked(cors_origins, auth)
    sends = send_limits(delivery_concurrency, delivery_per_channel)
    options: dict[str, Any] = {"limits": limits} if limits is not None else {}
    if pause_timeout is not None:
        options["pause_timeout"] = pause_timeout
    if max_followups is not None:
        options["max_followups"] = max_followups
    if default_expiry is not None:
        options["default_expiry"] = default_expiry
    the_broker = broker or connect(url, **options)
    if grant_policy is not None:
        the_broker.grant_policy = grant_policy
    if not isinstance(the_broker, LocalBroker):
        raise ValueError("a server keeps its own store (memory://, sqlite:// or postgresql://), not another server's")
    the_routing = load_routing(routing) if isinstance(routing, str) else routing
    the_auth = Auth(the_broker, enabled=auth, secret_key=secret_key, trusted_proxies=trusted_proxies)
    state = AppState(the_broker, the_auth, queue_size, keepalive, open_recipients=open_recipients or not auth)
    state.open_inboxes = open_inboxes
    state.send_limits = sends
    if isinstance(grant_key, GrantSigner):
        state.grant_signer = grant_key
    elif grant_key is not None:
        state.grant_signer = GrantSigner.from_pem(Path(grant_key))
    else:
        state.grant_signer = GrantSigner.from_secret(secret_key) if secret_key else GrantSigner.generate()
    # the grant key's id, when the key outlives this start (given, or derived from the secret key)
    grant_kid = state.grant_signer.kid if grant_key is not None or secret_key else None
    grant_derived = grant_key is None and bool(secret_key)
    # one-click answers in messages are signed with this (a routing's inbox_url says where this server is)
    state.links_secret = secret_key or secrets.token_urlsafe(32)
    if the_routing is not None:  # channels are made now: a bad option fails at start, not at the first send
        context = ChannelContext(the_routing.inbox_url, deliveries.answer_links(state, the_routing))
        try:
            state.delivery = DeliveryLoop(
                the_broker.outbox,
                the_routing,
                context=context,
                routing_check=deliveries.ROUTING_CHECK,
                concurrency=sends[0],
                per_channel=sends[1],
            )
        except ChannelError as exc:
            raise ChannelError(f"{routing}: {exc}" if isinstance(routing, str) else str(exc)) from None
        deliveries.install_metrics(state)
        deliveries.install_access(state)
    state.quotas = Quotas(
        (DEFAULT_QUOTA if auth else None) if rate_limit == "default" else rate_limit,
        (DEFAULT_STREAMS if auth else None) if max_streams == "default" else max_streams,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.loop = asyncio.get_running_loop()  # where `stop_waits` wakes the long polls
        try:
            await the_broker.open()
        except Exception as exc:  # a folder or database not there, a password refused, a server down
            # (a store's own refusal, a ConnectionError, names the store and says why)
            state.refused = (
                str(exc)
                if isinstance(exc, ConnectionError)
                else f"the store cannot be opened: {type(exc).__name__}: {exc}"
            )
            raise StartupRefused(state.refused) from exc
        # Links and tokens signed here must be taken back by the other nodes on the store: both
        # keys are looked at before either is recorded, so a node refused records neither.
        for record in (False, True):
            state.refused = await the_broker.check_secret_key(secret_key, record=record)
            if state.refused is None:
                state.refused = await the_broker.check_grant_key(grant_kid, derived=grant_derived, record=record)
            if state.refused is not None:
                break
        if state.refused is not None:
            if broker is None:
                await the_broker.aclose()
            raise StartupRefused(state.refused)
        state.metrics.pending.set(len(await the_broker.pending()))
        await state.hub.start()
        # The routing kept in the store (set through the API), or the file's when it is new or changed.
        before = await deliveries.kept_teams(the_broker)
        in_use = await the_broker.settle_routing(the_routing)
        if in_use is not None and in_use is not the_routing:
            try:
                await deliveries.use_routing(state, in_use, before=before)
            except ChannelError as exc:  # e.g. a channel type this server cannot import
                state.refused = (
                    f"the routing kept in the store cannot be used here: {exc}; keep one it can use with "
                    "`interlock routing set FILE`, or start with a new --routing FILE"
                )
                await state.hub.stop()
                if broker is None:
                    await the_broker.aclose()
                raise StartupRefused(state.refused) from None
        elif in_use is not None:
            await deliveries.keep_teams(state, in_use, before)
        state.hub.on_event.append(lambda _: state.delivery.wake() if state.delivery is not None else None)
        if state.delivery is not None:
            state.delivery.start()
        try:
            async with mcp.running() if mcp is not None else contextlib.nullcontext():
                if on_ready is not None:
                    await on_ready(the_broker)
                yield
        finally:
            for task in list(state.tasks):  # a sign-in link being mailed, say
                task.cancel()
            await asyncio.gather(*state.tasks, return_exceptions=True)
            if state.delivery is not None:
                await state.delivery.stop()
            await state.hub.stop()
            if broker is None:
                await the_broker.aclose()

    app = FastAPI(
        title="interlock",
        version="1",
        summary="Durable human-in-the-loop requests for AI agents.",
        lifespan=lifespan,
        # On every route: who you are, and a store that is unavailable for now.
        responses=_every_route_s_problems(),
        generate_unique_id_function=_operation_id,
        # Not FastAPI's pages, which load their scripts from a CDN: /docs is served whole
        # from here (`api_docs`), and there is no /redoc.
        docs_url=None,
        redoc_url=None,
    )
    app.state.interlock = state
    app.add_middleware(BodyLimit, max_size=max_body_size)
    app.add_middleware(NoStore)
    _install_errors(app)
    if not auth:
        app.add_middleware(LoopbackOnly)
    if origins:
        app.add_middleware(ApiCors, origins=origins)
    _install_quota_errors(app)
    for router in API_ROUTERS:
        # A query parameter a route does not take is refused, but on the routes other
        # systems post to (an inbound channel's sender adds its own).
        checked = [] if router is inbound.router else [Depends(known_query_only)]
        include(app, router, prefix="/api/v1", dependencies=checked)
    include(app, inbound.pages)
    _document_problems(app, auth)

    include(app, operations)
    install_web(app, state)
    install_api_docs(app)
    include(app, web_deliveries.router)
    include(app, email_signin.router)
    mcp = _mcp_endpoint(app, the_auth, auth)  # MCP over streamable HTTP, same tokens
    if mcp is not None:
        app.router.routes.append(Route("/mcp", mcp, include_in_schema=False))
    else:
        app.router.routes.append(Route("/mcp", _no_mcp, methods=["GET", "POST", "DELETE"], include_in_schema=False))
    install_pages(app, state)
    return app


@functools.cache
def _every_route_s_problems() -> dict[int | str, dict[str, Any]]:
    """The problems every route can answer with (who you are, a store unavailable for now):
    one object for every app, so that apps share their routers' inclusions (`include`)."""
    return problems_for()(401, 403, 503)


API_ROUTERS: tuple[APIRouter, ...] = (
    api.router,
    interactions.router,
    runs.router,
    followups.router,
    grants.router,
    policies.router,
    deliveries.router,
    teams.router,
    inbound.router,
)
"""The HTTP API's routers, served under /api/v1 and described by /openapi.json."""


def _operation_id(route: APIRoute) -> str:
    """An operation's id in the OpenAPI document: its route's name (`create_request`), which
    a generated client names its method after; unique over the API (FastAPI warns otherwise)."""
    return route.name


operations = APIRouter(include_in_schema=False)
"""What an operator's tools read: whether the server is up, and its metrics."""


@operations.get("/healthz")
async def healthz(broker: TheBroker) -> dict[str, str]:
    # The store answers, and takes this version's writes: a node left on an older version
    # while a later one migrated the store answers 503 (`NewerDatabase`), so that a load
    # balancer sends its traffic to the nodes that can serve it. Within HEALTH_TIMEOUT: a
    # database that stops answering without refusing is a 503 then, not a probe held open.
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT):
            await broker.check_store()
    except TimeoutError:
        raise Unavailable(f"the store is unavailable for now: it did not answer within {HEALTH_TIMEOUT:g} s") from None
    return {"status": "ok"}


@operations.get("/metrics")
async def metrics(state: State) -> Response:
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


class NoStore:
    """ASGI middleware: every response of the HTTP API (/api/...) says `Cache-Control:
    no-store` unless its route set its own, so that no browser, proxy or client cache keeps
    what it carries: answers, a grant's token, a hook's secret, who may do what."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/api/"):
            await self.app(scope, receive, send)
            return

        async def send_no_store(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("cache-control", "no-store")
            await send(message)

        await self.app(scope, receive, send_no_store)


CORS_HEADERS = ("Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID")
"""The request headers a browser app on an allowed origin may send to the API."""
CORS_EXPOSED = ("Retry-After", "WWW-Authenticate", "Allow")
"""The response headers its scripts may read, besides the CORS-safelisted ones."""


def cors_checked(origins: Sequence[str], auth: bool) -> tuple[str, ...]:
    """The origins a browser app may call the API from, each as a browser sends it in
    `Origin` (`scheme://host[:port]`, no path), or `*`; ValueError for anything else, and
    for any origin on a server without auth (which answers its own pages only)."""
    checked = []
    for origin in origins:
        parts = urlsplit(origin)
        plain = parts.scheme in ("http", "https") and parts.netloc and not (parts.path or parts.query or parts.fragment)
        if origin != "*" and not (plain and "@" not in parts.netloc):
            raise ValueError(
                f"CORS origin {origin!r}: give scheme://host[:port], such as https://app.example.com, or *"
            )
        checked.append(origin.lower())
    if checked and not auth:
        raise ValueError("CORS origins need auth: without it, the server answers only to its own pages")
    return tuple(checked)


class ApiCors:
    """ASGI middleware: CORS for the HTTP API (/api/...) alone, for the origins an operator
    allowed. Browser apps there call it with a bearer token; no cookie is ever allowed
    across origins (no `Access-Control-Allow-Credentials`), so the web inbox's session
    stays its own. Preflights are answered here; every other path is untouched."""

    def __init__(self, app: ASGIApp, origins: Sequence[str]) -> None:
        self.app = app
        self.cors = CORSMiddleware(
            app,
            allow_origins=list(origins),
            allow_methods=["GET", "POST", "PUT", "DELETE"],
            allow_headers=list(CORS_HEADERS),
            expose_headers=list(CORS_EXPOSED),
            max_age=600,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/api/"):
            await self.cors(scope, receive, send)
        else:
            await self.app(scope, receive, send)


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
                await problem("forbidden", refusal)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def mcp_installed() -> bool:
    """Whether the MCP SDK (the `mcp` extra) is installed: `/mcp` is served only then."""
    return importlib.util.find_spec("mcp") is not None


def _mcp_endpoint(app: FastAPI, auth: Auth, enabled: bool) -> McpOnFirstCall | None:
    """The MCP tools over streamable HTTP, when the MCP SDK (the `mcp` extra) is installed."""
    if not mcp_installed():
        return None
    return McpOnFirstCall(app, auth, enabled)


class McpOnFirstCall:
    """`/mcp`, made on its first call: a server loads the MCP SDK (a third of the CPU
    `interlock serve` spends starting) only once a client uses MCP.

    Enter `running()` in the app's lifespan: the endpoint made on the first call runs in a
    task of the lifespan's (its session manager's task group lives there) until shutdown.
    """

    def __init__(self, app: FastAPI, auth: Auth, enabled: bool) -> None:
        self._app = app
        self._auth = auth
        self._enabled = enabled
        self._endpoint: HttpEndpoint | None = None
        self._failure: Exception | None = None
        self._running = False
        self._wanted = asyncio.Event()  # the first call came (or the lifespan ends)
        self._ready = asyncio.Event()  # the endpoint runs, or could not be made
        self._stop = asyncio.Event()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        task = asyncio.create_task(self._serve())
        self._running = True
        try:
            yield
        finally:
            self._running = False
            self._stop.set()
            self._wanted.set()
            await task

    async def _serve(self) -> None:
        await self._wanted.wait()
        if self._stop.is_set():
            return
        try:
            from ..mcp import HttpEndpoint

            endpoint = HttpEndpoint(self._app, self._auth.from_token, auth=self._enabled, refused=self._auth.refused)
        except Exception as exc:  # said to each caller (a 500, logged) instead of ending the lifespan
            self._failure = exc
            self._ready.set()
            return
        try:
            async with endpoint.running():
                self._endpoint = endpoint
                self._ready.set()
                await self._stop.wait()
        finally:
            self._endpoint = None
            self._ready.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._running:
            raise RuntimeError("/mcp is served only while the app's lifespan runs")
        self._wanted.set()
        await self._ready.wait()  # bounded by making the endpoint: an import and a constructor
        if self._failure is not None:
            raise RuntimeError("the MCP endpoint could not be made") from self._failure
        if self._endpoint is None:  # the server is stopping
            raise RuntimeError("/mcp is served only while the app's lifespan runs")
        await self._endpoint(scope, receive, send)


async def _no_mcp(request: Request) -> Response:
    return problem(
        "not_found",
        "this server has no MCP endpoint: install interlock with the mcp extra (pip install -e '.[server,mcp]')",
    )


def _install_errors(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return problem(exc.code, exc.detail, status=exc.status, **exc.extra)

    @app.exception_handler(StarletteHTTPException)  # the app's own, and unknown routes (404, 405)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        response = problem(code_for_status(exc.status_code), str(exc.detail), status=exc.status_code)
        response.headers.update(exc.headers or {})
        if exc.status_code == 405:  # every method the path takes, not the first route's alone
            response.headers["Allow"] = ", ".join(_methods_of(request.app, request.scope))
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        unreadable = first.get("type") == "json_invalid"
        sent_as = request.headers.get("content-type")
        # A body FastAPI left as bytes was not read as JSON: its Content-Type names no JSON.
        if first.get("loc", ())[:1] == ("body",) and isinstance(exc.body, bytes) and exc.body:
            return problem(
                "unsupported_media_type",
                f"the body is sent as {sent_as or 'no Content-Type'}: send JSON, with Content-Type: application/json",
            )
        if unreadable:
            reason = first.get("ctx", {}).get("error") or first.get("msg", "invalid")
            at = f" at character {where}" if where.isdigit() else ""
            return problem("invalid_request", f"the body is not valid JSON{at}: {reason}", status=UNREADABLE)
        if first.get("type") == "extra_forbidden" and first.get("loc", ())[-1:] == ("grants",):
            detail = (
                "grants may be offered only on confirm (approval) asks and on the options of choice and "
                "multi-choice asks"
            )
            return problem("invalid_request", f"{where}: {detail}", status=UNREADABLE if unreadable else None)
        if first.get("type") == "finite_number":  # said as the body's other NaNs are (`model.check_json`)
            given = first.get("input")
            what = "a number" if str(given).lower() == "nan" else "a finite number"
            return problem("invalid_request", f"{where}: {given} is not {what} (NaN and Infinity are refused)")
        text = f"{where or 'the body'}: {first.get('msg', 'invalid')}"
        return problem("invalid_request", text, status=UNREADABLE if unreadable else None)

    async def wire_error(request: Request, exc: Exception) -> JSONResponse:
        found = problem_of(exc)
        assert found is not None  # registered for the table's exceptions only
        status, code, extra = found
        return problem(code, str(exc), status=status, **extra)

    for error in dict.fromkeys(row.error for row in WIRE_ERRORS if row.error is not None):
        if error is not Unavailable:
            app.add_exception_handler(error, wire_error)

    @app.exception_handler(Unavailable)
    async def unavailable(request: Request, exc: Unavailable) -> Response:
        seconds = retry_after_of(exc)
        request.app.state.interlock.refused_for_now(request.method, request.url.path, exc)
        response: Response
        if _a_page(request):
            message = "The store is unavailable for now: try again shortly."
            response = refusal(request.app.state.interlock, request, 503, message)
        else:
            response = problem("unavailable", str(exc), retry_after=seconds)
        response.headers["Retry-After"] = str(seconds)
        return response

    @app.exception_handler(NewerDatabase)
    async def newer_database(request: Request, exc: NewerDatabase) -> Response:
        # A later version migrated the store while this server ran: this one writes nothing
        # more, and says so (another node, or this one restarted on that version, will).
        return await unavailable(request, Unavailable(str(exc)))


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _methods_of(app: Any, scope: Any) -> list[str]:
    """The methods some route of the app takes at `scope`'s path (each tried as the router
    would: a route, or a router included with its prefix, that matches it fully)."""
    return [
        method
        for method in _METHODS
        if any(route.matches({**scope, "method": method})[0] is Match.FULL for route in app.router.routes)
    ]


def _a_page(request: Request) -> bool:
    """Whether a call is the web inbox's, answered with a page: a route of its pages (not
    of the API, an event stream or an operator's tool), or one a browser navigates to."""
    if request.url.path.startswith("/api/"):
        return False
    route = request.scope.get("route")
    if getattr(route, "response_class", None) is HTMLResponse:
        return True
    return "text/html" in request.headers.get("accept", "")


BEARER = {
    "type": "http",
    "scheme": "bearer",
    "description": (
        "A token of a person or an agent (`interlock token create NAME --human` or `--agent --owner NAME`), "
        "sent as `Authorization: Bearer <token>`; 401 `unauthorized` without a valid one."
    ),
}
"""The security scheme of the routes that take a token, as the OpenAPI document names it."""


def _needs_token(route: APIRoute) -> bool:
    """Whether a route reads its caller from a bearer token (the `Caller` dependency,
    directly or through another dependency)."""
    pending = list(route.dependant.dependencies)
    while pending:
        dependency = pending.pop()
        if dependency.call is _caller_dependency:
            return True
        pending.extend(dependency.dependencies)
    return False


_FASTAPI_422 = "#/components/schemas/HTTPValidationError"


def _document_problems(app: FastAPI, auth: bool) -> None:
    """Publish every error response as what the server sends: `application/problem+json`
    with the `Problem` schema (or the route's own, a `Problem` with members of its own,
    such as a message's 409 `thread_busy` with its `details`), FastAPI's own 422 shape included (the handlers above
    answer validation errors as problems too), and 415 on every route that takes a JSON
    body. With auth, say which routes take a bearer token (`security`) and which take
    none (`security: []`: the grants' public keys, a webhook's own signature)."""
    build = app.openapi
    token_routes = {
        route.name: _needs_token(route)
        for router in API_ROUTERS
        for route in router.routes
        if isinstance(route, APIRoute)
    }

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        _publish_problem(schema)
        problem_ref = dict(PROBLEM_REF)
        if auth:
            schema.setdefault("components", {})["securitySchemes"] = {"bearer": BEARER}
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                if auth:
                    operation["security"] = [{"bearer": []}] if token_routes.get(operation["operationId"]) else []
                if "application/json" in operation.get("requestBody", {}).get("content", {}):
                    operation["responses"].setdefault(
                        "415", {"description": describe(415, ("unsupported_media_type",))}
                    )
                for status, response in operation.get("responses", {}).items():
                    if status.isdigit() and int(status) >= 400:
                        # a route's own problem model (a `Problem` with members of its own) stays
                        own = response.get("content", {}).get("application/json", {}).get("schema")
                        kept = own if own is not None and own.get("$ref") not in (None, _FASTAPI_422) else problem_ref
                        response["content"] = {"application/problem+json": {"schema": kept}}
                        if status == "422" and response.get("description") == "Validation Error":  # FastAPI's own
                            response["description"] = describe(422, ("invalid_request",))
        components = schema.get("components", {}).get("schemas", {})
        for unused in ("HTTPValidationError", "ValidationError"):
            components.pop(unused, None)
        add_examples(schema)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to customize the schema


@functools.cache
def _problem_schemas() -> dict[str, Any]:
    """`Problem`'s schema (with any it refers to) as FastAPI writes a route's model into a
    document: read off a document of one route that names it as a model."""
    holder = APIRouter()

    @holder.get("/", responses={400: {"model": Problem}})
    async def problem_holder() -> None:  # pragma: no cover - never called
        pass

    schemas: dict[str, Any] = get_openapi(title="", version="", routes=holder.routes)["components"]["schemas"]
    return schemas


def _publish_problem(schema: dict[str, Any]) -> None:
    """Put `Problem` among the document's schemas, as FastAPI puts a route's models there:
    the routes name it by reference only (`common.problem_response`)."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.update(copy.deepcopy(_problem_schemas()))
    schema["components"]["schemas"] = dict(sorted(components.items()))


def _install_quota_errors(app: FastAPI) -> None:
    @app.exception_handler(TooMany)
    async def too_many(request: Request, exc: TooMany) -> JSONResponse:
        response = problem("rate_limited", exc.detail, retry_after=exc.retry_after)
        response.headers["Retry-After"] = str(exc.retry_after)
        return response
