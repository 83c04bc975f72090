"""The two ways an MCP client reaches the tools: stdio (`interlock mcp`) and streamable HTTP
(`/mcp` on `interlock serve`).

Over stdio, the server runs as the desktop host's subprocess with one broker for its life:
on a store URL the caller is this machine's user (as with the CLI), on a server's URL the
caller is the token's principal and the server applies its rules.

Over HTTP, `/mcp` takes the API's bearer tokens: no token (or a revoked one) is refused with
401 before any MCP message is read, unless the server runs without auth (loopback only).
Each tool call then runs as the API itself, through a remote broker over an in-process
transport carrying the caller's own token, so every rule of the API (who may read, answer
or ask whom, quotas, size limits) holds for MCP callers unchanged. The endpoint is
stateless: any node of a cluster answers any call.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import httpx
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..broker import Broker, connect
from ..principals import ANONYMOUS, Principal, hash_token
from ..remote import RemoteBroker
from ..wire import SURFACE
from .server import Access, Seat, build_server

__all__ = ["HttpEndpoint", "fixed_access", "serve_stdio"]


def fixed_access(seat: Seat) -> Access:
    """Every call runs with the same broker and caller (one stdio client)."""

    @contextlib.asynccontextmanager
    async def enter(ctx: Context) -> AsyncIterator[Seat]:
        yield seat

    return enter


async def caller_of(broker: Broker) -> Principal:
    """Who the tools act as through `broker`: a token's principal on a server, else the
    anonymous local user."""
    if not isinstance(broker, RemoteBroker):
        return ANONYMOUS
    me = await broker.whoami()
    if me.get("kind") in (None, "admin"):
        return ANONYMOUS
    return Principal(str(me["name"]), me["kind"], me.get("owner"))


async def serve_stdio(url: str | None = None, *, token: str | None = None, person: str | None = None) -> None:
    """Serve the tools over stdin/stdout on the store or server at `url` until the client
    hangs up; on a store, as `person` (see `run_stdio`)."""
    options = {"token": token} if token else {}
    async with connect(url, **options) as broker:
        await run_stdio(broker, person=person)


async def run_stdio(broker: Broker, *, person: str | None = None) -> None:
    """Serve the tools over stdin/stdout as `broker`'s caller until the client hangs up
    (`interlock mcp` opens the broker itself, to explain a failure to reach it). On a
    store, the caller is `person` (this machine's user, for `interlock mcp`): asked when a
    request names nobody, and recorded as who answered; through a server, the token's."""
    caller = await caller_of(broker)
    seat = Seat(broker, caller, person if not isinstance(broker, RemoteBroker) else None)
    await build_server(fixed_access(seat)).run_stdio_async()


MAX_SEATS = 256
"""How many callers' brokers `/mcp` keeps open; past it, the least recently used that no
call is using is closed."""

PrincipalOf = Callable[[str], Awaitable[Principal | None]]
Refused = Callable[[Request, str, str], None]
"""Told of a call refused for its credential: the request, what was refused, the credential
(`Auth.refused`, which logs it as the API's refusals are)."""


class HttpEndpoint:
    """The ASGI endpoint of `/mcp` on an interlock server: bearer auth, then MCP.

    `api` is the server's own ASGI app; tool calls reach its HTTP API in process.
    `principal_of(token)` finds a live token's principal; with `auth` off every caller is
    the anonymous local user, as on the API. `refused` is told of each call refused for an
    unknown or revoked token.
    """

    def __init__(self, api: ASGIApp, principal_of: PrincipalOf, *, auth: bool, refused: Refused | None = None) -> None:
        self.api = _through_mcp(api)
        self.principal_of = principal_of
        self.auth = auth
        self.refused = refused
        self._seats: OrderedDict[str, Seat] = OrderedDict()
        self._using: dict[str, int] = {}  # the calls under way on each seat: it is not closed under them
        self._seating = asyncio.Lock()
        self.server: MCPServer = build_server(self._access)
        # Only to build the SDK's session manager; the route is this object.
        self.server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            # the interlock app keeps other sites out itself (tokens, or loopback only)
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run the endpoint's session manager; enter it in the app's lifespan."""
        try:
            async with self.server.session_manager.run():
                yield
        finally:
            seats, self._seats = list(self._seats.values()), OrderedDict()
            for seat in seats:
                await seat.broker.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.auth:
            token = _bearer(scope)
            refusal = await self._refusal(token)
            if refusal is not None:
                if token and self.refused is not None:
                    self.refused(Request(scope), "an unknown or revoked token", token)
                await _unauthorized(refusal)(scope, receive, send)
                return
        if scope["type"] != "http":
            await self.server.session_manager.handle_request(scope, receive, send)
            return
        await _cut_when_gone(self.server.session_manager.handle_request, scope, receive, send)

    async def _refusal(self, token: str) -> str | None:
        if not token:
            return "send Authorization: Bearer <token>"
        if await self.principal_of(token) is None:
            return "the token is unknown or revoked"
        return None

    @contextlib.asynccontextmanager
    async def _access(self, ctx: Context) -> AsyncIterator[Seat]:
        headers = ctx.headers or {}
        scheme, _, token = str(headers.get("authorization", "")).partition(" ")
        key, seat = await self._seat(token.strip() if scheme.lower() == "bearer" else "")
        try:
            yield seat
        finally:
            left = self._using[key] - 1
            if left:
                self._using[key] = left
            else:
                del self._using[key]

    async def _seat(self, token: str) -> tuple[str, Seat]:
        """The seat of a token, counted as used by one more call (until `_access` ends it): a
        remote broker on the API in process, kept for the token's next calls (the API checks
        the token on every call, so a revoked one stops at once)."""
        key = hash_token(token)
        async with self._seating:
            seat = self._seats.get(key)
            if seat is None:
                transport = httpx.ASGITransport(app=self.api)
                broker = await RemoteBroker("http://localhost", token=token or None, transport=transport).open()
                try:
                    seat = Seat(broker, await caller_of(broker))
                except BaseException:
                    await broker.aclose()
                    raise
                self._seats[key] = seat
                await self._close_unused(but=key)
            self._seats.move_to_end(key)
            self._using[key] = self._using.get(key, 0) + 1
            return key, seat

    async def _close_unused(self, *, but: str) -> None:
        """Past `MAX_SEATS`, close the least recently used seats no call is using, down to
        `MAX_SEATS` (with more in use, the rest stay open until their calls end and a later
        seat closes them)."""
        unused = [key for key in self._seats if key != but and not self._using.get(key)]  # oldest first
        for key in unused[: max(len(self._seats) - MAX_SEATS, 0)]:
            await self._seats.pop(key).broker.aclose()


async def _cut_when_gone(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Run `app` on an HTTP request, cancelling it when the client hangs up before its
    answer: a tool call waiting on a person (`request_human_input`) is cut, as over stdio,
    and withdraws its question rather than leave it for nobody. Once the app has read the
    whole body, the next message the server has is the disconnect."""
    read = anyio.Event()

    async def receiving() -> Message:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            read.set()
        return message

    failed: Exception | None = None
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            await read.wait()
            while (await receive())["type"] != "http.disconnect":
                pass
            group.cancel_scope.cancel()

        group.start_soon(watch)
        try:
            await app(scope, receiving, send)
        except Exception as exc:  # raised as it is (a 413 from the body's limit), not in a group
            failed = exc
        group.cancel_scope.cancel()  # answered: nothing more to watch
    if failed is not None:
        raise failed


def _bearer(scope: Scope) -> str:
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return ""


def _unauthorized(detail: str) -> JSONResponse:
    body = {"type": "about:blank", "title": "Unauthorized", "status": 401, "code": "unauthorized", "detail": detail}
    return JSONResponse(
        body, status_code=401, media_type="application/problem+json", headers={"WWW-Authenticate": "Bearer"}
    )


def _through_mcp(api: ASGIApp) -> ASGIApp:
    """The API as `/mcp`'s tools call it: each call's scope says it came through MCP
    (`wire.SURFACE`), so the answers and cancels it records are `via: mcp`."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await api({**scope, SURFACE: "mcp"}, receive, send)

    return app
