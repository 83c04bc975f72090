"""Fan the event log out to server-sent-event subscribers.

One task per server process follows the broker's event log and offers each event to every
subscriber's bounded queue. A subscriber that falls `queue_size` events behind is dropped
with a reason instead of slowing the others; it reconnects with `Last-Event-ID` and the
missed events are replayed from the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable

from ..broker import Broker
from ..model import Event

__all__ = ["Hub", "Subscriber"]

log = logging.getLogger("interlock.server")


class Subscriber:
    def __init__(self, hub: Hub, accept: Callable[[Event], bool], queue_size: int) -> None:
        self.hub = hub
        self.accept = accept
        self.queue: asyncio.Queue[Event] = asyncio.Queue(queue_size)
        self.dropped: str | None = None
        self.wakeup = asyncio.Event()

    def offer(self, event: Event) -> None:
        if self.dropped is not None or not self.accept(event):
            return
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped = f"fell more than {self.queue.maxsize} events behind; reconnect with Last-Event-ID"
            self.hub.unsubscribe(self)
        self.wakeup.set()

    async def next(self) -> Event | None:
        """The next live event, or None once dropped (after what was queued)."""
        while True:
            if not self.queue.empty():
                return self.queue.get_nowait()
            if self.dropped is not None:
                return None
            self.wakeup.clear()
            await self.wakeup.wait()


class Hub:
    def __init__(self, broker: Broker, *, queue_size: int = 1000, encode: Callable[[Event], str] | None = None) -> None:
        self.broker = broker
        self.queue_size = queue_size
        self.subscribers: set[Subscriber] = set()
        self._task: asyncio.Task[None] | None = None
        self.on_event: list[Callable[[Event], None]] = []
        self._encode = encode or (lambda event: str(event.id))
        self._frames: OrderedDict[int, str] = OrderedDict()

    def encoded(self, event: Event) -> str:
        """The event's wire form, encoded once however many subscribers send it."""
        frame = self._frames.get(event.id)
        if frame is None:
            frame = self._frames[event.id] = self._encode(event)
            if len(self._frames) > 2 * self.queue_size:
                self._frames.popitem(last=False)
        return frame

    async def start(self) -> None:
        after = await self.broker.last_event_id()
        self._task = asyncio.get_running_loop().create_task(self._run(after))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for sub in list(self.subscribers):
            sub.dropped = "the server is shutting down"
            sub.wakeup.set()
        self.subscribers.clear()

    async def _run(self, after: int) -> None:
        while True:
            try:
                async for event in self.broker.events(after=after, follow=True):
                    after = event.id
                    for hook in self.on_event:
                        hook(event)
                    for sub in list(self.subscribers):
                        sub.offer(event)
                return  # the broker was closed
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("following the event log failed; resuming after event %s", after)

    def subscribe(self, accept: Callable[[Event], bool]) -> Subscriber:
        sub = Subscriber(self, accept, self.queue_size)
        self.subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)

    async def replay_then_follow(
        self,
        accept: Callable[[Event], bool],
        after: int | None,
        replay: Callable[[int], AsyncIterator[Event]] | None = None,
    ) -> AsyncIterator[Event]:
        """Events after `after` from the store, then live ones: each once, in order.

        With `after` None, only events from now on. `replay(after)`, when given, reads the
        stored events already narrowed to (at least) what `accept` takes, from indexes,
        instead of the whole log after `after`.
        """
        sub = self.subscribe(accept)  # first, so nothing committed from here on is missed
        try:
            seen = 0
            if after is not None:
                async for event in replay(after) if replay is not None else self.broker.events(after=after):
                    seen = event.id
                    if accept(event):
                        yield event
            while (live := await sub.next()) is not None:
                if live.id > seen:
                    yield live
            raise Dropped(sub.dropped or "dropped")
        finally:
            self.unsubscribe(sub)


class Dropped(Exception):
    """The subscriber fell behind (or the server is stopping); `args[0]` says why."""
