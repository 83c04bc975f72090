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

import httpx
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ..broker import Broker, connect
from ..principals import ANONYMOUS, Principal, hash_token
from ..remote import RemoteBroker
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


async def serve_stdio(url: str | None = None, *, token: str | None = None) -> None:
    """Serve the tools over stdin/stdout on the store or server at `url` until the client
    hangs up."""
    options = {"token": token} if token else {}
    async with connect(url, **options) as broker:
        await run_stdio(broker)


async def run_stdio(broker: Broker) -> None:
    """Serve the tools over stdin/stdout as `broker`'s caller until the client hangs up
    (`interlock mcp` opens the broker itself, to explain a failure to reach it)."""
    server = build_server(fixed_access(Seat(broker, await caller_of(broker))))
    await server.run_stdio_async()


MAX_SEATS = 256
"""How many callers' brokers `/mcp` keeps open; the least recently used is closed past it."""

PrincipalOf = Callable[[str], Awaitable[Principal | None]]


class HttpEndpoint:
    """The ASGI endpoint of `/mcp` on an interlock server: bearer auth, then MCP.

    `api` is the server's own ASGI app; tool calls reach its HTTP API in process.
    `principal_of(token)` finds a live token's principal; with `auth` off every caller is
    the anonymous local user, as on the API.
    """

    def __init__(self, api: ASGIApp, principal_of: PrincipalOf, *, auth: bool) -> None:
        self.api = api
        self.principal_of = principal_of
        self.auth = auth
        self._seats: OrderedDict[str, Seat] = OrderedDict()
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
            refusal = await self._refusal(_bearer(scope))
            if refusal is not None:
                await _unauthorized(refusal)(scope, receive, send)
                return
        await self.server.session_manager.handle_request(scope, receive, send)

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
        yield await self._seat(token.strip() if scheme.lower() == "bearer" else "")

    async def _seat(self, token: str) -> Seat:
        """The seat of a token: a remote broker on the API in process, kept for the token's
        next calls (the API checks the token on every call, so a revoked one stops at once)."""
        key = hash_token(token)
        async with self._seating:
            seat = self._seats.get(key)
            if seat is None:
                transport = httpx.ASGITransport(app=self.api)
                broker = await RemoteBroker("http://localhost", token=token or None, transport=transport).open()
                seat = self._seats[key] = Seat(broker, await caller_of(broker))
                if len(self._seats) > MAX_SEATS:
                    _, oldest = self._seats.popitem(last=False)
                    await oldest.broker.aclose()
            self._seats.move_to_end(key)
            return seat


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
