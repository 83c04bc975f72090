"""A real HTTP webhook receiver on a loopback port, in the test's own event loop."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    url: str = ""
    received: list[Received] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    """Answers to give, in order; 200 once they run out."""
    arrived: asyncio.Condition = field(default_factory=asyncio.Condition)
    on_receive: Callable[[Received], None] | None = None
    hold: Callable[[Received], Awaitable[None]] | None = None
    """Awaited after an arrival is recorded, before it is answered (to hold a delivery open)."""

    async def until(self, count: int, timeout: float = 20.0) -> list[Received]:
        """The first `count` arrivals, waiting for them (bounded)."""
        async with asyncio.timeout(timeout):
            async with self.arrived:
                await self.arrived.wait_for(lambda: len(self.received) >= count)
        return self.received[:count]

    def accepted(self) -> list[Received]:
        return [r for r, s in zip(self.received, self._given, strict=False) if s < 300]

    _given: list[int] = field(default_factory=list)


@contextlib.asynccontextmanager
async def receiver(path: str = "/hook") -> AsyncIterator[Receiver]:
    state = Receiver()

    async def hook(request: Request) -> Response:
        got = Received({k.lower(): v for k, v in request.headers.items()}, await request.body())
        status = state.statuses.pop(0) if state.statuses else 200
        state._given.append(status)
        if state.on_receive is not None:
            state.on_receive(got)
        async with state.arrived:
            state.received.append(got)
            state.arrived.notify_all()
        if state.hold is not None:
            await state.hold(got)
        return Response(status_code=status)

    app = Starlette(routes=[Route(path, hook, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    async with asyncio.timeout(20):
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.005)
    port = server.servers[0].sockets[0].getsockname()[1]
    state.url = f"http://127.0.0.1:{port}{path}"
    try:
        yield state
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 20)


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 20.0, interval: float = 0.05) -> None:
    """Wait (bounded) until `check` holds, for state another process or thread writes,
    which sends this one no signal."""
    async with asyncio.timeout(timeout):
        while not await check():  # noqa: ASYNC110  # nothing to wait on across processes
            await asyncio.sleep(interval)
