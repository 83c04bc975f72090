"""An interlock server served in-process: the app over an httpx transport, no socket.

httpx's own `ASGITransport` hands a response over only once the app has finished it, so
an event stream (which never finishes) cannot be read through it, and a client that hangs
up is never seen by the app. `StreamingASGITransport` runs each call of the app in its own
task, the way a server does: the response comes back as soon as its head is sent, its body
streams chunk by chunk, and closing the response early, or cancelling the call before the
head arrives, is a disconnect the app receives (`http.disconnect`), as over a socket.

Tests whose point is the socket (other processes, the CLI, the browser) use a real server.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import httpx
from starlette.types import ASGIApp, Message

import interlock
from interlock import Broker

BASE_URL = "http://127.0.0.1"  # a loopback name: a server without auth answers only to those
_END = object()


class StreamingASGITransport(httpx.AsyncBaseTransport):
    """Call an ASGI app in this event loop, streaming responses both ways of ending."""

    def __init__(self, app: ASGIApp, *, client: tuple[str, int] = ("127.0.0.1", 50000)) -> None:
        self.app = app
        self.client = client
        self._calls: set[asyncio.Task[None]] = set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        body = [chunk async for chunk in request.stream if chunk]  # handed to the app as sent
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": request.method,
            "headers": [(k.lower(), v) for k, v in request.headers.raw],
            "scheme": request.url.scheme,
            "path": unquote(request.url.path),
            "raw_path": request.url.raw_path.split(b"?", 1)[0],
            "query_string": request.url.query,
            "root_path": "",
            "server": (request.url.host, request.url.port or 80),
            "client": self.client,
        }
        call = _Call(request)
        task = asyncio.get_running_loop().create_task(call.run(self.app, scope, body))
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)
        try:
            status, headers = await asyncio.shield(call.head)
        except asyncio.CancelledError:
            call.hang_up()  # the caller gave up before the answer: the app sees a disconnect
            raise
        return httpx.Response(status, headers=headers, stream=_Body(call), request=request)

    async def aclose(self) -> None:
        """Nothing: one transport serves every client of a test; `stop()` ends the calls."""

    async def stop(self, bound: float = 10.0) -> None:
        """Hang up on every call still running and wait (bounded) for the app to finish them."""
        calls = list(self._calls)
        for task in calls:
            task.cancel()
        if calls:
            await asyncio.wait(calls, timeout=bound)


@dataclass
class _Call:
    request: httpx.Request
    head: asyncio.Future[tuple[int, list[tuple[bytes, bytes]]]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    chunks: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    gone: asyncio.Event = field(default_factory=asyncio.Event)

    def hang_up(self) -> None:
        self.gone.set()

    async def run(self, app: ASGIApp, scope: dict[str, Any], body: list[bytes]) -> None:
        chunks = iter(body or [b""])
        left = len(body or [b""])

        async def receive() -> Message:
            nonlocal left
            if left:
                left -= 1
                return {"type": "http.request", "body": next(chunks), "more_body": left > 0}
            await self.gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if self.gone.is_set():
                return  # nobody is listening any more (a server drops the bytes too)
            if message["type"] == "http.response.start":
                self.head.set_result((message["status"], list(message.get("headers", []))))
            elif message["type"] == "http.response.body":
                if message.get("body"):
                    self.chunks.put_nowait(message["body"])
                if not message.get("more_body", False):
                    self.chunks.put_nowait(_END)

        try:
            await app(scope, receive, send)
        except Exception as exc:
            if not self.head.done():
                self.head.set_exception(exc)
            else:
                self.chunks.put_nowait(exc)
        except BaseException:
            self.head.cancel()  # stopped (`StreamingASGITransport.stop`): no answer comes
            raise
        else:
            if not self.head.done():
                if self.gone.is_set():
                    self.head.cancel()  # it saw the caller hang up: nobody waits for an answer
                else:
                    self.head.set_exception(RuntimeError("the app returned without a response"))
        finally:
            self.chunks.put_nowait(_END)


class _Body(httpx.AsyncByteStream):
    def __init__(self, call: _Call) -> None:
        self.call = call

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            chunk = await self.call.chunks.get()
            if chunk is _END:
                return
            if isinstance(chunk, BaseException):
                raise httpx.ReadError(f"the app failed mid-response: {chunk!r}", request=self.call.request)
            yield chunk

    async def aclose(self) -> None:
        self.call.hang_up()


@dataclass
class InProcessServer:
    """A server's app, started (lifespan), reached through `transport` at `url`."""

    app: Any
    transport: StreamingASGITransport
    url: str = BASE_URL

    def connect(self, **options: Any) -> Broker:
        """`interlock.connect(url)` to this server, over the in-process transport."""
        return interlock.connect(self.url, transport=self.transport, **options)

    def client(self, path: str = "", **options: Any) -> httpx.AsyncClient:
        """An httpx client of this server (`path`: a prefix of every call, as /api/v1)."""
        return httpx.AsyncClient(base_url=f"{self.url}{path}", transport=self.transport, **options)


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[InProcessServer]:
    """Run `app`'s lifespan around an in-process server of it."""
    transport = StreamingASGITransport(app)
    async with app.router.lifespan_context(app):
        try:
            yield InProcessServer(app, transport)
        finally:
            await transport.stop()


def serve_in_process(store_url: str | None, **options: Any) -> contextlib.AbstractAsyncContextManager[InProcessServer]:
    """`async with serve_in_process(store_url, auth=False) as server:` `interlock serve`'s
    app on that store, in-process (the in-process twin of conftest's `serve`)."""
    from interlock.server.app import create_app

    return serving(create_app(store_url, **options))
