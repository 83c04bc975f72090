"""The delivery loop: route the outbox's notices and send their deliveries, at least once.

Each cycle claims unrouted notices (under a lease), routes each into its deliveries (see
`Routing.plan`), then claims as many due deliveries as it has sends free and starts them
through their channels. It does not wait for them: while a receiver is slow to answer, new
notices are routed and the other deliveries go out beside its sends. Of the sends the loop
runs at a time (`concurrency`), one channel takes no more than `per_channel`: the claim
passes over a channel that has as many under way from this loop, and leaves its deliveries
as they are (due, no attempt counted) until one of its sends ends, so a burst to a receiver
that hangs leaves the other sends free for everyone else.
A delivery that fails is tried again after a delay that doubles with each attempt, with
jitter (`outbox.retry_delay`); after `max_attempts` it becomes a dead letter. A reminder
or escalation whose request settled meanwhile is skipped, and so is every delivery to a
person `token revoke` cut off, saying so (the store is asked once for each batch claimed,
`DeliveryPort.cut_off`): nothing goes to them while they are cut off. A message offers answers only to
whom it is addressed to if they may give them (`Message.may_answer`: an escalation to
someone who is not the request's recipient, nor in its team, does not), and says when it
goes to a team's own address (`Message.to_team`), whose members answer each as
themselves. Everything it does is in the store, so a loop that stops (or a node that
dies) leaves nothing behind: its leases (the routing's `lease`) run out and another loop,
or the same one restarted, carries on, sending again what the dead one may have sent (with
the same idempotency key). Every node (on PostgreSQL, or every process on one SQLite file)
may run one; claims skip each other's rows, and each loop has its own `per_channel` sends
through a channel.

It runs inside `interlock serve` (woken by every new event) or standalone
(`interlock deliver`), polling the store every `poll_interval` seconds; both commands take
its `concurrency` and `per_channel` (`--concurrency`, `--per-channel`).

The routing in use is kept in the store (the `routing` setting), so that it survives
restarts and every node's loop uses the same: a routing file gives its first value
(`LocalBroker.settle_routing`: the file wins when it changed since it last did, else what
was set through the API stays), `Broker.set_routing` replaces it, and each loop picks up a
change within `routing_check` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta

import httpx

from .._backoff import Outage
from ..broker import NEWER_DATABASE_RETRY, routing_since, stored_routing
from ..errors import InvalidRequest, NewerDatabase, Unavailable
from ..model import Request, Status
from ..outbox import Delivery, Notice, retry_delay
from ..principals import can_answer, can_read
from ..routing import Routing, RoutingError, routing_from_dict
from ..store import DeliveryPort
from . import Channel, ChannelContext, ChannelError, Message, PermanentFailure, addressee, open_channels

__all__ = ["DeliveryLoop", "send_limits"]

log = logging.getLogger("interlock.delivery")

_MAX_ERROR = 1000  # characters of an error kept with a delivery


def send_limits(concurrency: int, per_channel: int | None = None) -> tuple[int, int]:
    """A delivery loop's sends at a time and one channel's share of them (by default a
    quarter, at least 1), as `DeliveryLoop` takes them. Raises ValueError saying which is
    wrong: `concurrency` under 1, `per_channel` under 1 or above `concurrency` (a channel
    cannot have more sends under way than the loop has)."""
    if concurrency < 1:
        raise ValueError(f"concurrency: at least 1 send at a time, not {concurrency}")
    if per_channel is None:
        return concurrency, max(1, concurrency // 4)
    if per_channel < 1:
        raise ValueError(f"per_channel: at least 1 send at a time, not {per_channel}")
    if per_channel > concurrency:
        raise ValueError(
            f"per_channel: at most the {concurrency} sends at a time (concurrency) the loop has, not {per_channel}"
        )
    return concurrency, per_channel


class DeliveryLoop:
    """Routes notices and sends deliveries for one store (its outbox: `LocalBroker.outbox`),
    with one routing."""

    def __init__(
        self,
        outbox: DeliveryPort,
        routing: Routing,
        *,
        channels: Mapping[str, Channel] | None = None,
        context: ChannelContext | None = None,
        owner: str | None = None,
        lease: float = 60.0,
        poll_interval: float = 1.0,
        batch: int = 100,
        concurrency: int = 16,
        per_channel: int | None = None,
        send_timeout: float = 30.0,
        routing_check: float | None = None,
    ) -> None:
        self.outbox = outbox
        self.routing = routing
        self.context = context or ChannelContext(inbox_url=routing.inbox_url)
        self.channels: dict[str, Channel] = (
            dict(channels) if channels is not None else open_channels(routing.channels, self.context)
        )
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.poll_interval = poll_interval
        self.batch = batch
        self.routing_check = routing_check
        """Every this many seconds, use the routing kept in the store if it changed (None: never)."""
        self._routing_checked = time.monotonic()
        self._since: datetime | None = None
        self._since_read = False  # `routing_since`, read from the store at the first round
        self.concurrency, self.per_channel = send_limits(concurrency, per_channel)
        """The most sends one channel (a routing's, by name) has under way from this loop at a
        time: by default a quarter of `concurrency`, 4 of 16. Counted by the store from the
        deliveries this loop holds (`claim_deliveries`), so it holds for this loop alone:
        each loop sharing a store sends its own share."""
        self.delivery_batch = min(batch, concurrency * 2)
        self._rounds = -(-self.delivery_batch // concurrency)  # of sends, to send a claimed batch
        self._own_lease, self._own_send_timeout = lease, send_timeout
        self.lease = self.delivery_lease = self.send_timeout = 0.0
        self._time()
        self._slots = asyncio.Semaphore(concurrency)
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._sending: dict[Channel, int] = {}  # attempts under way, by channel
        self._under_way: set[asyncio.Task[None]] = set()  # the sends `run` started and has not seen end
        self._outage = Outage(log, "the delivery loop")
        self._sends_outage = Outage(log, "storing a delivery's outcome")  # the sends' own, apart from the rounds
        self._retired: list[Channel] = []  # channels replaced while an attempt still used them
        self._failing: dict[str, int] = {}  # attempts failed for now, by channel, since one went through it
        self.on_change: list[Callable[[], None]] = []
        """Called after each notice is routed and each attempt's outcome is stored."""
        self.on_outcome: list[Callable[[Delivery], None]] = []
        """Called with each attempt's outcome once stored (metrics)."""
        self.on_routing: list[Callable[[Routing, Routing], Awaitable[None]]] = []
        """Awaited with the routing used before and the one used now, each time this loop
        takes another (`replace`, `refresh_routing`): a server counts who the change took
        out of a team as a change of access. They must not raise: one that does leaves the
        new routing in use but its old channels open and the hooks after it uncalled."""

    # -- life cycle ----------------------------------------------------------------------

    def _time(self) -> None:
        """Set the leases and the time a send is given: from the routing's `lease`, or else
        this loop's own. Deliveries are claimed a few rounds of sends at a time, under a
        lease that outlasts the slowest such rounds (every send timing out), so that no other
        loop takes one while this one may still be sending it: with a routing's lease, each
        send is cut short to fit."""
        lease = self.routing.lease
        if lease is None:
            self.lease, self.send_timeout = self._own_lease, self._own_send_timeout
            self.delivery_lease = max(self.lease, (self._rounds + 1) * self.send_timeout)
        else:
            self.lease = self.delivery_lease = lease
            self.send_timeout = min(self._own_send_timeout, lease / (self._rounds + 1))

    def wake(self) -> None:
        """Look for work now (a new event was appended)."""
        self._wake.set()

    def start(self) -> None:
        if self._task is None:
            self._stopping = False
            self._task = asyncio.get_running_loop().create_task(self.run(), name="interlock-delivery")

    async def stop(self, grace: float = 5.0) -> None:
        """Stop delivering. The attempts under way are given `grace` seconds to finish and
        store their outcome (a delivery sent but not recorded would be sent again after a
        restart); whatever is still running then is cancelled and left to its lease."""
        # (`run` waits for its sends once it stops taking work, and cancels them when cancelled.)
        task, self._task = self._task, None
        if task is not None:
            self._stopping = True
            self._wake.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), grace)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for channel in [*self.channels.values(), *self._retired]:
            await _close(channel)
        self._retired.clear()

    async def replace(self, routing: Routing, channels: Mapping[str, Channel], context: ChannelContext) -> None:
        """Use another routing from now on (what is routed already keeps its deliveries),
        and tell `on_routing` at once. An old channel is closed once the attempts it is
        sending have ended: closing it under a send would make a delivery the receiver got
        count as failed, and be sent again."""
        old, before = self.channels, self.routing
        self.routing, self.channels, self.context = routing, dict(channels), context
        self._time()
        for hook in self.on_routing:
            await hook(before, routing)
        for channel in old.values():
            if self._sending.get(channel):
                self._retired.append(channel)
            else:
                await _close(channel)
        self.wake()

    async def refresh_routing(self) -> bool:
        """Use the routing kept in the store if it differs from this loop's; True if it
        did. A stored routing that does not check out here is logged and left unused."""
        self._routing_checked = time.monotonic()
        document = await stored_routing(self.outbox)
        if document is None or dict(document) == dict(self.routing.source):
            return False
        try:
            routing = routing_from_dict(document)
            context = ChannelContext(routing.inbox_url, self.context.answer_links)
            channels = open_channels(routing.channels, context)
        except (RoutingError, ChannelError):
            log.exception("the routing in the store cannot be used here; keeping the one in use")
            return False
        await self.replace(routing, channels, context)
        log.info("using the routing changed in the store")
        return True

    async def run(self) -> None:
        """Deliver until cancelled (or `stop`); a failing store is logged and tried again."""
        try:
            await self._run()
            if self._under_way:  # stopped: the sends under way may still store their outcome
                await asyncio.wait(set(self._under_way))
        finally:
            for task in self._under_way:
                task.cancel()
            await asyncio.gather(*self._under_way, return_exceptions=True)

    async def _run(self) -> None:
        failures = 0
        outage = self._outage
        while not self._stopping:
            self._wake.clear()
            try:
                check = self.routing_check
                if check is not None and time.monotonic() - self._routing_checked >= check:
                    await self.refresh_routing()
                busy = await self._round()
                failures = 0
                outage.ended()
                due = None if busy or self._stopping else await self.outbox.next_outbox_due()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                pause = min(30.0, 0.5 * 2 ** min(failures, 6))
                if isinstance(exc, NewerDatabase):  # no write goes through until a restart: say so once
                    if failures == 1:
                        log.error("this process delivers no notice any more: %s", exc)
                    pause = NEWER_DATABASE_RETRY
                elif isinstance(exc, Unavailable):  # the store is away for now: no bug to trace
                    outage.failed(exc, f"trying again in {pause:g} s")
                else:
                    log.exception("the delivery loop failed; trying again")
                await asyncio.sleep(pause)
                continue
            if busy or self._stopping:
                continue
            delay = self.poll_interval
            ahead = None if due is None else (due - datetime.now(UTC)).total_seconds()
            # (a time past and not claimed: another loop holds it, or its channel is full)
            if ahead is not None and ahead > 0:
                delay = min(delay, ahead)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay if math.isfinite(delay) else None):
                    await self._wake.wait()

    # -- one cycle -------------------------------------------------------------------------

    def _stale(self, notice: Notice, request: Request) -> bool:
        """Whether `notice` is from before the store had a routing and is news no more: of
        that time, only a request still pending is announced (its `created` notice)."""
        if self._since is None or notice.at >= self._since:
            return False
        return notice.type != "created" or request.status is not Status.PENDING

    async def run_once(self, now: datetime | None = None) -> bool:
        """Route what is unrouted and send what is due, waiting for those sends; True if
        there was work (there may be more)."""
        now = now or datetime.now(UTC)
        routed = await self._route(now)
        due = await self.outbox.claim_deliveries(
            self.owner, now, self.delivery_lease, self.delivery_batch, per_channel=self.per_channel
        )
        if due:
            cut = await self.outbox.cut_off({d.recipient for d in due})
            await asyncio.gather(*(self._deliver(d, d.recipient in cut) for d in due))
        # deliveries routed above and due now were claimed just after: a full batch of
        # either, or a channel's full share, is the only sign of more work waiting
        taken = Counter(d.channel for d in due)
        full = max(taken.values(), default=0) >= self.per_channel
        return routed == self.batch or len(due) == self.delivery_batch or full

    async def _round(self) -> bool:
        """`run`'s cycle: route what is unrouted, and start sending as many due deliveries
        as there are sends free, no more of one channel than its share (`per_channel`),
        without waiting for them (each one that ends wakes the loop, to take another). True
        if there may be more work now: a channel that is full is looked at again only once
        one of its sends ends (or at the next poll), not over and over meanwhile."""
        now = datetime.now(UTC)
        routed = await self._route(now)
        free = self.concurrency - len(self._under_way)
        due = (
            []
            if free <= 0
            else await self.outbox.claim_deliveries(
                self.owner, now, self.delivery_lease, free, per_channel=self.per_channel
            )
        )
        cut = await self.outbox.cut_off({d.recipient for d in due}) if due else frozenset()
        for delivery in due:
            task = asyncio.get_running_loop().create_task(
                self._send_apart(delivery, delivery.recipient in cut), name="interlock-delivery-send"
            )
            self._under_way.add(task)
            task.add_done_callback(self._ended)
        return routed == self.batch or (free > 0 and len(due) == free)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._under_way.discard(task)
        self._wake.set()  # a send is free again

    async def _send_apart(self, delivery: Delivery, cut_off: bool) -> None:
        """`_deliver`, started by `run` and not waited for: what goes wrong is logged here
        (the delivery's lease runs out and it is sent again)."""
        try:
            await self._deliver(delivery, cut_off)
        except asyncio.CancelledError:
            raise
        except Unavailable as exc:
            self._sends_outage.failed(exc, f"delivery {delivery.id} is sent again once its lease runs out")
        except Exception:
            log.exception(
                "the delivery loop failed on delivery %s (an outcome it could not store is sent again once its "
                "lease runs out)",
                delivery.id,
            )
        else:
            self._sends_outage.ended()

    async def _route(self, now: datetime) -> int:
        """Route the unrouted notices (a batch of them) into their deliveries: how many."""
        if not self._since_read:
            self._since, self._since_read = await routing_since(self.outbox), True
        notices = await self.outbox.claim_notices(self.owner, now, self.lease, self.batch)
        for notice in notices:
            request = await self.outbox.get(notice.request_id)
            planned = [] if request is None or self._stale(notice, request) else self.routing.plan(notice, request, now)
            if planned and request is not None:
                planned = await self._members_now(planned, request)
            await self.outbox.route_notice(notice, planned, self.owner, now)
            self._changed()
        return len(notices)

    async def _members_now(self, planned: list[Delivery], request: Request) -> list[Delivery]:
        """`planned` without the messages to members the routing lists in the team the
        request is to, when the store keeps that team without them (taken out with
        `interlock team rm`): they may no longer read it, so they are not told of it either.
        A team only the routing names has the routing's members; an escalation goes where
        the routing sends it."""
        team = request.to
        listed = self.routing.teams.get(team) if team is not None else None
        if not listed or team is None or self.routing.route_of(team) is not None:  # (a team's own route: its place)
            return planned
        kept = await self.outbox.team_members(team)
        if kept is None:
            return planned
        return [d for d in planned if d.kind == "escalation" or d.recipient not in listed or d.recipient in kept]

    async def _deliver(self, delivery: Delivery, cut_off: bool = False) -> None:
        """Attempt `delivery` and store the outcome; `cut_off`: its recipient is a person
        `token revoke` cut off (asked once for the batch it was claimed in), to whom it is
        not sent."""
        async with self._slots:
            outcome = _withheld(delivery) if cut_off else await self._attempt(delivery)
        if not await self.outbox.finish_delivery(outcome, self.owner):
            log.warning("delivery %s: the lease ran out before its outcome was stored", delivery.id)
        else:
            for callback in self.on_outcome:
                callback(outcome)
        self._changed()

    async def _sent(self, channel: Channel) -> None:
        """An attempt through `channel` ended: close it if it was replaced meanwhile."""
        left = self._sending[channel] - 1
        if left:
            self._sending[channel] = left
            return
        del self._sending[channel]
        if channel in self._retired:
            self._retired.remove(channel)
            await _close(channel)

    def _changed(self) -> None:
        for callback in self.on_change:
            callback()

    async def _allowed(self, delivery: Delivery, request: Request) -> tuple[bool, bool, bool]:
        """Whether whom `delivery` is addressed to may answer `request` and open it in the
        inbox, by the rules the server applies to an answer through a channel (`addressee`),
        and whether it is a team: an escalation's person who may not gets a message with no
        answers to offer, and nobody is offered answers once the request settled. A team
        with a route of its own stands for its members, who may answer when the request is
        to it (each as themselves), and open it in the inbox if one of them is a person
        there (a team only the routing names has the routing's members, some of whom may
        be no one the store knows)."""
        settled = delivery.kind == "settled"
        try:
            who = await addressee(self.outbox, self.routing.teams, delivery.recipient, request)
        except InvalidRequest:  # a name no principal can have: no answer is taken as it
            return False, settled, False
        if who.kind == "team":
            theirs = request.to == who.name
            kept = await self.outbox.team_members(who.name)
            members = kept if kept is not None else self.routing.teams.get(who.name, ())
            readers = [
                m for m in members if (p := await self.outbox.get_principal(m)) is not None and p.kind == "human"
            ]
            return theirs and not settled, theirs and bool(readers), True
        return can_answer(who, request) and not settled, can_read(who, request), False

    async def _attempt(self, delivery: Delivery) -> Delivery:
        now = datetime.now(UTC)
        attempts = delivery.attempts + 1
        # a new request's message may show it from the cache; the others must see whether
        # (and how) it settled, which may have happened in another process
        request = await self.outbox.get(delivery.request_id, fresh=delivery.kind != "request")
        if request is None:
            _log_dead(delivery, "the request is gone", retry=False)
            return delivery.with_state(status="dead", attempts=attempts, last_error="the request is gone", due_at=now)
        if delivery.kind in ("reminder", "escalation") and request.status is not Status.PENDING:
            return delivery.with_state(status="skipped", last_error=f"the request was {request.status.value} first")
        channel = self.channels.get(delivery.channel)
        if channel is None:
            error = f"no channel named {delivery.channel!r} is configured"
            _log_dead(delivery, f"{error} (the routing in use has {', '.join(sorted(self.channels)) or 'none'})")
            return delivery.with_state(status="dead", attempts=attempts, last_error=error, due_at=now)
        earlier: tuple[Delivery, ...] = ()
        if delivery.kind != "request":
            found = await self.outbox.list_deliveries(request_id=delivery.request_id, limit=1000)
            earlier = tuple(d for d in found if d.channel == delivery.channel and d.id != delivery.id)
        may_answer, may_read, to_team = await self._allowed(delivery, request)
        message = Message(delivery, request, self.context, earlier, may_answer, may_read, to_team)
        started = time.monotonic()
        self._sending[channel] = self._sending.get(channel, 0) + 1
        try:
            async with asyncio.timeout(self.send_timeout):
                reference = await channel.send(message)
        except PermanentFailure as exc:
            _log_dead(delivery, f"refused for good: {_error(exc)}")
            return _dead(delivery, attempts, exc)
        except Exception as exc:
            if isinstance(exc, TimeoutError) and time.monotonic() - started >= self.send_timeout:
                exc = TimeoutError(f"no answer within {self.send_timeout:g}s")
            failed = self._failing[delivery.channel] = self._failing.get(delivery.channel, 0) + 1
            if attempts >= self.routing.max_attempts:
                _log_dead(delivery, f"failed {attempts} times, the last: {_error(exc)}")
                return _dead(delivery, attempts, exc)
            wait = retry_delay(attempts, first=self.routing.retry_first, cap=self.routing.retry_cap)
            # One warning as a channel begins to fail, not one for each attempt through it
            # while it does (a receiver that is down fails them all): those are debug lines.
            log.log(
                logging.WARNING if failed == 1 else logging.DEBUG,
                "delivery %s of request %s to %s through %s failed (attempt %d of %d): %s; trying again in %.1f s%s",
                delivery.id,
                delivery.request_id,
                delivery.recipient,
                delivery.channel,
                attempts,
                self.routing.max_attempts,
                _error(exc),
                wait,
                "; until one goes through it, the next failures through it are logged at debug level"
                if failed == 1
                else "",
            )
            return delivery.with_state(attempts=attempts, last_error=_error(exc), due_at=now + timedelta(seconds=wait))
        finally:
            await self._sent(channel)
        failed = self._failing.pop(delivery.channel, 0)
        if failed:
            log.info(
                "channel %s delivers again (delivery %s), after %d failed attempts",
                delivery.channel,
                delivery.id,
                failed,
            )
        return delivery.with_state(
            status="delivered", attempts=attempts, delivered_at=datetime.now(UTC), last_error=None, reference=reference
        )


async def _close(channel: Channel) -> None:
    try:
        await channel.aclose()
    except Exception:
        log.exception("closing a channel failed")


def _withheld(delivery: Delivery) -> Delivery:
    """`delivery`, not sent because its recipient is cut off: skipped, saying why (as
    `interlock deliveries` and the request's page show it). Its answers would be refused
    (`token revoke` withdrew the person's say), and nothing reaches them while they are cut
    off; once `token create` gives them a token again, the deliveries that fall due after
    reach them (this one stays skipped: the request waits in the inbox)."""
    name = delivery.recipient
    log.info("delivery %s of request %s to %s is not sent: they are cut off", delivery.id, delivery.request_id, name)
    return delivery.with_state(
        status="skipped",
        last_error=f"not sent: every token of {name!r} is revoked (`interlock token revoke {name}`), and nothing "
        f"goes to a person cut off until `interlock token create {name} --human` gives them one again",
    )


def _log_dead(delivery: Delivery, why: str, *, retry: bool = True) -> None:
    """A warning that `delivery` died, saying why, and how to send it again if it may be."""
    log.warning(
        "delivery %s of request %s to %s through %s is a dead letter: %s%s",
        delivery.id,
        delivery.request_id,
        delivery.recipient,
        delivery.channel,
        why,
        f"; once that is fixed, send it again with `interlock deliveries retry {delivery.id}`" if retry else "",
    )


def _dead(delivery: Delivery, attempts: int, exc: BaseException) -> Delivery:
    """A dead letter, due when it died: the time its request's timeline shows."""
    return delivery.with_state(status="dead", attempts=attempts, last_error=_error(exc), due_at=datetime.now(UTC))


def _error(exc: BaseException) -> str:
    """What went wrong, for people (the deliveries pages show it): the exception's own
    words, or for one that has none, what kind of failure it was."""
    text = str(exc)
    if not text:
        if isinstance(exc, TimeoutError | httpx.TimeoutException):
            text = "no answer in time"
        elif isinstance(exc, ConnectionError | httpx.TransportError):
            text = "the connection failed"
        else:
            text = "the send failed without saying why"
    return text[:_MAX_ERROR]
