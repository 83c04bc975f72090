"""Fan the event log out to server-sent-event subscribers.

One task per server process follows the broker's event log and offers each event to every
subscriber's bounded queue. A subscriber that falls `queue_size` events behind is dropped
with a reason instead of slowing the others; it reconnects with `Last-Event-ID` and the
missed events are replayed from the store.

Fan-out costs the server as little per subscriber as it can: each event is encoded once,
as the complete SSE frame every subscriber is sent (`Hub.frame`), and whether a
subscriber may see it is decided once per event for all subscribers with the same
`audience` (the same principal, with the same teams, and the same filters), not once per
subscriber.

A subscriber opened with a credential (`Holder`) ends when the event log says the
credential is gone: a `token_revoked` event ends the streams of those tokens, a
`signed_out` event those of that web session. Every node follows the same log, so a
revocation made anywhere (the CLI on another machine, say) ends the streams on all nodes.

A store that is unavailable for a while (`interlock.errors.Unavailable`: a database
restarting, a lock held past its timeout) ends no stream and no process: the hub follows
the event log again after a bounded back-off (`STORE_RETRY_FIRST` doubling to
`STORE_RETRY_CAP`), from the last event it passed on, and a stream replaying stored events
reads on from its last one the same way, while its client stays connected (keep-alive
comments still go out). Nothing is missed or sent twice; the client only sees a pause.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping
from typing import Any, TypeVar

from sse_starlette import ServerSentEvent

from .._backoff import Backoff, Outage
from ..broker import Broker
from ..errors import Unavailable
from ..model import Event
from ..principals import TEAM_LEFT
from .auth import Holder

__all__ = ["ACCESS_EVENTS", "STORE_RETRY_CAP", "STORE_RETRY_FIRST", "Hub", "Subscriber", "patiently"]

log = logging.getLogger("interlock.server")

ACCESS_EVENTS = frozenset({"token_revoked", "signed_out", TEAM_LEFT})
"""Events about credentials and memberships, not requests: they end streams and are shown
to no principal."""

STORE_RETRY_FIRST = 0.5
"""Seconds before a stream (or the hub) reads a store that was unavailable again, doubling
on each failure in a row up to `STORE_RETRY_CAP` (or what `Unavailable.retry_after` says,
if longer)."""
STORE_RETRY_CAP = 5.0
"""The longest pause between two reads of a store that stays unavailable: a stream resumes
within this long of the store coming back."""

T = TypeVar("T")


async def patiently(read: Callable[[], Awaitable[T]], what: str) -> T:
    """`read()`, read again after `Unavailable` with a bounded back-off until it answers:
    for a stream's own reads after its 200 went out, while its client stays connected (a
    client that hangs up cancels it). `what` names the read in the log."""
    backoff: Backoff | None = None
    outage = Outage(log, f"{what} reading the store")
    while True:
        try:
            read_now = await read()
        except Unavailable as exc:
            backoff = backoff or Backoff(STORE_RETRY_FIRST, STORE_RETRY_CAP)
            delay = backoff.next_after(exc.retry_after)
            outage.failed(exc, f"trying again in {delay:g} s")
            await asyncio.sleep(delay)
        else:
            outage.ended()
            return read_now


class Subscriber:
    """One stream's place in the fan-out: a bounded queue of the events it accepted, and
    the one task that sends them, woken by a bare future (no per-event timer or lock)."""

    def __init__(
        self,
        hub: Hub,
        accept: Callable[[Event], bool],
        queue_size: int,
        holder: Holder | None,
        audience: Hashable | None = None,
    ) -> None:
        self.hub = hub
        self.accept = accept
        self.holder = holder
        self.audience = audience  # subscribers with the same audience accept the same events
        self.queue: deque[Event] = deque()
        self.queue_size = queue_size
        self.dropped: str | None = None
        self._waiter: asyncio.Future[None] | None = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def offer(self, event: Event, decided: dict[Hashable, bool] | None = None) -> None:
        """Queue `event` if this subscriber accepts it; `decided` holds the decisions
        already made about this event, by audience."""
        if self.dropped is not None:
            return
        if decided is None or self.audience is None:
            accepted: bool | None = self.accept(event)
        else:
            accepted = decided.get(self.audience)
            if accepted is None:
                accepted = decided[self.audience] = self.accept(event)
        if not accepted:
            return
        if len(self.queue) >= self.queue_size:
            self.dropped = f"fell more than {self.queue_size} events behind; reconnect with Last-Event-ID"
            self.hub.unsubscribe(self)
        else:
            self.queue.append(event)
        self._wake()

    def end(self, reason: str) -> None:
        """Stop now: what is queued is not sent (the credential is gone)."""
        self.queue.clear()
        self.stop(reason)

    def stop(self, reason: str) -> None:
        """Stop after what is queued."""
        self.dropped = reason
        self.hub.unsubscribe(self)
        self._wake()

    async def pause(self, seconds: float) -> None:
        """Wait `seconds`, or until this subscriber is dropped (the server stopping, its
        credential gone); an event queued meanwhile stays queued."""
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        while self.dropped is None and (left := until - loop.time()) > 0:
            self._waiter = loop.create_future()
            try:
                await asyncio.wait((self._waiter,), timeout=left)
            finally:
                self._waiter = None

    async def next(self) -> Event | None:
        """The next live event, or None once dropped (after what was queued)."""
        while True:
            if self.queue:
                return self.queue.popleft()
            if self.dropped is not None:
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None


FRAME_CACHE_CHARS = 16 * 1024 * 1024
"""What the encoded events kept for the subscribers may add up to, in characters."""


class Hub:
    def __init__(self, broker: Broker, *, queue_size: int = 1000, encode: Callable[[Event], str] | None = None) -> None:
        self.broker = broker
        self.queue_size = queue_size
        self.subscribers: set[Subscriber] = set()
        self._task: asyncio.Task[None] | None = None
        self.on_event: list[Callable[[Event], None]] = []
        self._encode = encode or (lambda event: str(event.id))
        self._frames: OrderedDict[int, bytes] = OrderedDict()
        self._frame_chars = 0
        self.access_changes = 0
        """How many changes of access (`ACCESS_EVENTS`: a token revoked, a sign-out, a team
        left) this hub has handled: a long poll whose caller was found before the last of
        them looks its credential up again (`AppState.held`)."""

    def frame(self, event: Event) -> bytes:
        """The event as the SSE frame every subscriber is sent (`id`, `event` and its
        `data`), encoded once however many subscribers send it; the frames kept are
        bounded in number and in size (`FRAME_CACHE_CHARS`)."""
        frame = self._frames.get(event.id)
        if frame is None:
            sse = ServerSentEvent(data=self._encode(event), event=event.type, id=str(event.id))
            frame = self._frames[event.id] = sse.encode()
            self._frame_chars += len(frame)
            while self._frames and (len(self._frames) > 2 * self.queue_size or self._frame_chars > FRAME_CACHE_CHARS):
                self._frame_chars -= len(self._frames.popitem(last=False)[1])
        return frame

    def frame_at(self, event: Event, position: int) -> bytes:
        """The event as a frame sent again out of order (a pause a client is reminded
        of): its SSE `id` is `position`, where the client's stream is, so that its
        `Last-Event-ID` does not go back and replay what it has seen; the event's own id
        is in its data."""
        return ServerSentEvent(data=self._encode(event), event=event.type, id=str(position)).encode()

    async def start(self) -> None:
        after = await self.broker.last_event_id()
        self._task = asyncio.get_running_loop().create_task(self._run(after))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for sub in list(self.subscribers):
            sub.stop("the server is shutting down")
        self.subscribers.clear()

    async def _run(self, after: int) -> None:
        backoff = Backoff(STORE_RETRY_FIRST, STORE_RETRY_CAP)
        outage = Outage(log, "following the event log")
        failed_at: int | None = None  # the event after which the last failure came
        while True:
            try:
                if outage.ongoing:
                    # Read what is there once, without following: when that works the store
                    # is back, whether or not anything was appended meanwhile.
                    async for event in self.broker.events(after=after):
                        after = self._pass_on(event)
                    outage.ended()
                async for event in self.broker.events(after=after, follow=True):
                    after = self._pass_on(event)
                return  # the broker was closed
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if after != failed_at:  # events were passed on since the last failure: a new outage
                    backoff.reset()
                failed_at = after
                if isinstance(exc, Unavailable):  # the store is away for now: no bug to trace
                    delay = backoff.next_after(exc.retry_after)
                    outage.failed(exc, f"resuming after event {after} in {delay:g} s")
                else:
                    delay = backoff.next()
                    log.exception("following the event log failed; resuming after event %s in %g s", after, delay)
                await asyncio.sleep(delay)

    def _pass_on(self, event: Event) -> int:
        """Hand one event of the log to the hooks and the subscribers; its id."""
        if event.type in ACCESS_EVENTS:
            self.end_streams(event.type, event.data)
        for hook in self.on_event:
            hook(event)
        decided: dict[Hashable, bool] = {}
        for sub in list(self.subscribers):
            sub.offer(event, decided)
        return event.id

    def subscribe(
        self, accept: Callable[[Event], bool], holder: Holder | None = None, audience: Hashable | None = None
    ) -> Subscriber:
        """A new subscriber; `audience`, when given, names everything `accept` depends on
        (who, with their teams as the stream found them, and which filters), so that one
        decision per event serves all alike."""
        sub = Subscriber(self, accept, self.queue_size, holder, audience)
        self.subscribers.add(sub)
        return sub

    def end_streams(self, type_: str, data: Mapping[str, Any]) -> None:
        """End the streams whose credential a `token_revoked` or `signed_out` event
        (its type and data) names; this node may call it early for its own sign-outs."""
        self.access_changes += 1
        if type_ == TEAM_LEFT:  # what their streams show was decided with the team in it
            left = set(data.get("principals") or ())
            for sub in list(self.subscribers):
                if sub.holder is not None and sub.holder.principal in left:
                    sub.end(f"you left the team {data.get('team')}")
            return
        principal = data.get("principal")
        tokens = set(data.get("tokens") or ()) if type_ == "token_revoked" else set()
        every = type_ == "token_revoked" and data.get("all") is True
        session = data.get("session") if type_ == "signed_out" else None
        for sub in list(self.subscribers):
            holder = sub.holder
            if holder is None or holder.principal != principal:
                continue
            if every or holder.token in tokens:
                sub.end("the token was revoked")
            elif session is not None and holder.session == session:
                sub.end("signed out")

    def end_holder(self, holder: Holder, reason: str) -> None:
        """End the streams opened with `holder` now, for `reason` (a web session that ran
        out: no event says so, each stream's own timer does)."""
        for sub in list(self.subscribers):
            if sub.holder == holder:
                sub.end(reason)

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)

    async def replay_then_follow(
        self,
        accept: Callable[[Event], bool],
        after: int | None,
        replay: Callable[[int], AsyncIterator[Event]] | None = None,
        *,
        holder: Holder | None = None,
        lost: Callable[[], Awaitable[str | None]] | None = None,
        audience: Hashable | None = None,
    ) -> AsyncIterator[Event]:
        """Events after `after` from the store, then live ones: each once, in order.

        With `after` None, only events from now on. `replay(after)`, when given, reads the
        stored events already narrowed to (at least) what `accept` takes, from indexes,
        instead of the whole log after `after`. With a `holder`, the stream ends when
        its credential is revoked or its person leaves a team. `lost` is asked once after
        subscribing and says why the stream may no longer run (None: it may), so that a
        revocation or a team left between the caller's check and the subscription, whose
        event this hub handled before the subscriber existed, counts too.
        `audience`: see `subscribe`.

        A store unavailable for now (`lost`, the replay) is read again after a bounded
        back-off, the replay from the last event it read, while the client stays
        connected: a stream ends only as `Dropped`, or when its client hangs up.
        """
        sub = self.subscribe(accept, holder, audience)  # first, so nothing committed from here on is missed
        try:
            seen = 0
            checked = lost is None
            backoff: Backoff | None = None  # made at the first failure only
            outage = Outage(log, "a stream reading the store")
            while sub.dropped is None:
                try:
                    if not checked:
                        assert lost is not None
                        if (reason := await lost()) is not None:
                            sub.end(reason)
                            break
                        checked = True
                    if after is not None:
                        start = max(after, seen)  # (after a failure: on from the last event read)
                        async for event in replay(start) if replay is not None else self.broker.events(after=start):
                            if sub.dropped is not None:
                                break
                            seen = event.id
                            if accept(event):
                                yield event
                    outage.ended()
                    break
                except Unavailable as exc:
                    backoff = backoff or Backoff(STORE_RETRY_FIRST, STORE_RETRY_CAP)
                    delay = backoff.next_after(exc.retry_after)
                    outage.failed(exc, f"trying again in {delay:g} s")
                    await sub.pause(delay)
            while (live := await sub.next()) is not None:
                if live.id > seen:
                    yield live
            raise Dropped(sub.dropped or "dropped")
        finally:
            self.unsubscribe(sub)


class Dropped(Exception):
    """The subscriber fell behind (or the server is stopping); `args[0]` says why."""
