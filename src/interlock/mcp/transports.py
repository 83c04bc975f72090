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

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ..broker import Broker, connect
from ..principals import ANONYMOUS, Principal
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
        server = build_server(fixed_access(Seat(broker, await caller_of(broker))))
        await server.run_stdio_async()


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
        self.server: MCPServer = build_server(self._access)
        # Only to build the SDK's session manager; the route is this object.
        self.server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            # the interlock app keeps other sites out itself (tokens, or loopback only)
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )

    def running(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Run the endpoint's session manager; enter it in the app's lifespan."""
        return self.server.session_manager.run()

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
        token = token.strip() if scheme.lower() == "bearer" else ""
        transport = httpx.ASGITransport(app=self.api)
        broker = RemoteBroker("http://localhost", token=token or None, transport=transport)
        async with broker:
            yield Seat(broker, await caller_of(broker))


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
