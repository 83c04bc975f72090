"""Helpers for the agent-side suite: a person at the inbox, and a recorder of tool-call reports."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import anyio

from interlock import Broker, Request
from interlock.agent import ToolCallReport

BOUND = 10  # seconds: the most any single wait in these tests may take

T = TypeVar("T")


class Inbox:
    """Reads the requests a broker creates, in order, as a person at their inbox would."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.cursor = 0

    async def next(self) -> Request:
        """The next request created after the last one returned (waits for it, bounded)."""
        with anyio.fail_after(BOUND):
            async for event in self.broker.events(after=self.cursor, follow=True):
                self.cursor = event.id
                if event.type == "created" and event.request is not None:
                    return event.request
        raise AssertionError("the event stream ended")

    async def created_since(self) -> list[Request]:
        """Every request created after the last one returned, without waiting."""
        found = []
        async for event in self.broker.events(after=self.cursor):
            self.cursor = event.id
            if event.type == "created" and event.request is not None:
                found.append(event.request)
        return found


class Reports:
    """An `on_tool_call` observer that keeps every report, and can wait for the n-th."""

    def __init__(self) -> None:
        self.items: list[ToolCallReport] = []
        self._changed = asyncio.Event()

    async def __call__(self, report: ToolCallReport) -> None:
        self.items.append(report)
        self._changed.set()

    async def wait_for(self, count: int) -> list[ToolCallReport]:
        with anyio.fail_after(BOUND):
            while len(self.items) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.items

    def statuses(self) -> list[tuple[str, str]]:
        return [(r.call.id, r.status) for r in self.items]


async def bounded(awaitable: Awaitable[T]) -> T:
    """Await something that should finish soon, failing the test if it does not."""
    with anyio.fail_after(BOUND):
        return await awaitable
