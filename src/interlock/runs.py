"""Resuming parked runs: a worker claims each run once its requests have settled and hands
it to the resume handler of its agent.

An agent that needs a person creates its requests with `run=run.id`, stores its
framework's state with `broker.park(...)`, and may exit. Once every request the run waits
on has settled (answered, refused, expired or withdrawn), the run is *ready*; a `Worker`
in any process claims it exactly once, under a lease it renews while the handler works,
and calls the handler of the run's agent:

    async def resume(run: Run, requests: Mapping[str, Request]) -> Any | Park

with the run (its `state` as parked) and the settled requests it waited on, by id. What
the handler does decides how the run goes on:

- it returns a value: the run is `completed` with it as `result` (JSON);
- it returns `Park(state, waiting_on)`: the run parks again on new requests (created with
  `run=run.id`), to be resumed once they settle;
- it raises `interlock.Unavailable`, "not now" (what the run needs is missing in this
  worker, an MCP server not connected here, or away for a while), or `RateLimited` (a
  quota of the caller's used up, its calls refused for a while): the run is handed back,
  kept out of every worker's hands for the error's `retry_after` seconds (else a delay
  that grows at each hand-back, 5 s to 5 min) and then claimed again, by this worker or
  another; the worker logs a warning and records the first hand-back on the run (an
  update). Nothing the handler did is undone, so it should raise before it does anything
  that lasts. A run handed back for longer than a pause waits for a person (the pause
  timeout, or its longer `max_duration`, from when its requests settled) is failed;
- it raises anything else: the run is `failed` with the error's text (`terminal_reason`
  "error").

If the worker dies meanwhile, its lease runs out and another worker claims the run again,
so a handler may run more than once for one pause (`run.attempts` counts the claims): it
should be safe to repeat. A tool call behind the approval gate runs at most once per
approval (an approval is spent once, durably); the framework adapters also record an
approved call's output on the run, so a repeated resume gives it back instead of
running the call again (`interlock.integrations._pauses`). A store that fails for a while
(a database restarting, a disk full) does not end a worker: it claims, renews and ends
runs again once the store is back.

`Worker(broker, handlers).run()` serves in a program that stays up; `interlock worker
module:factory` is the same as a process of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ._backoff import Backoff
from .broker import DEFAULT_LEASE, Broker, _seconds
from .errors import (
    ApprovalDenied,
    ApprovalRefused,
    Closed,
    InterlockError,
    InvalidRequest,
    RateLimited,
    RunConflict,
    Unavailable,
)
from .model import DEFAULT_PAUSE_TIMEOUT, Request, Run, RunStatus, park_deadline

__all__ = ["Park", "ResumeHandler", "Worker"]

log = logging.getLogger("interlock")


@dataclass(frozen=True, slots=True)
class Park:
    """Returned by a resume handler to park the run again on `waiting_on` (requests created
    with `run=run.id`), keeping `state`."""

    state: Any
    waiting_on: Sequence[str]
    status: RunStatus | str | None = None


ResumeHandler = Callable[[Run, Mapping[str, Request]], Awaitable[Any]]
"""Goes on with a claimed run: returns its result, or `Park(...)`; raises to fail it."""

CLAIM_WAIT = 30.0
"""Seconds one claim waits for a ready run before asking again (a long poll)."""

RETRY_CAP = 10.0
"""The longest a worker waits before asking a failing store (or server) again."""

HAND_BACK_FIRST = 5.0
"""Seconds a run handed back ("not now": its handler raised `Unavailable` without a
`retry_after`) is kept out of every worker's hands the first time; doubled at each hand-back
of it by the same worker, up to `HAND_BACK_CAP`."""

HAND_BACK_CAP = 300.0
"""The longest delay a worker's hand-backs of one run grow to."""

HAND_BACK_MOST = 3600.0
"""The longest a run is handed back for at once, whatever its handler's `retry_after` (a
server holds a run for at most an hour a lease)."""

_HANDED_BACK_KEPT = 1000
"""How many runs a worker keeps the back-off of (the oldest are forgotten)."""


def _a_decision(exc: BaseException) -> bool:
    """Whether `exc` is, or was raised from (a framework may wrap it), an approval denied
    or refused: what a person or the gate decided, logged as one line, not a traceback."""
    seen: BaseException | None = exc
    for _ in range(8):  # a chain of causes is short; never follow a cycle
        if seen is None:
            return False
        if isinstance(seen, ApprovalDenied | ApprovalRefused):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@dataclass(frozen=True, slots=True)
class _HandBack:
    """What a worker does with a run whose handler said "not now": hand it back for
    `delay` seconds, `why`; `first` if it is the first hand-back of it in a row here."""

    why: str
    delay: float
    first: bool


def default_worker_name() -> str:
    """host:pid, so a worker's claims say which process holds them; a later worker of the
    same process gets `host:pid:2`, `:3`...: a worker knows a claim as its own by its name,
    so two workers under one name could not tell that the other took a run over."""
    global _workers_named
    _workers_named += 1
    name = f"{socket.gethostname()}:{os.getpid()}"
    return name if _workers_named == 1 else f"{name}:{_workers_named}"


_workers_named = 0
"""How many workers of this process were named by default."""


class Worker:
    """Claims the ready runs of the agents it has a handler for, and resumes each once.

    `concurrency` runs are resumed at a time. Each claim holds its run for `lease` (seconds
    or a `timedelta`), renewed every third of that while the handler works; a worker that dies
    stops renewing, and another worker takes the run over once the lease has run out.
    The renewals run on the event loop: a handler that blocks it (a synchronous call)
    longer than the lease loses its run to another worker; await blocking work with
    `asyncio.to_thread`. A worker knows its claims by its `name` (by default `host:pid`,
    and `host:pid:2`... for the next workers of the process): give each one a name of its
    own, since two workers under one name cannot tell that the other took a run over.
    """

    def __init__(
        self,
        broker: Broker,
        handlers: Mapping[str, ResumeHandler],
        *,
        name: str | None = None,
        lease: float | timedelta = DEFAULT_LEASE,
        concurrency: int = 1,
    ) -> None:
        if not handlers:
            raise ValueError("a worker needs a resume handler for at least one agent")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.broker = broker
        self.handlers = dict(handlers)
        self.name = name or default_worker_name()
        self.lease = _seconds(lease, "lease")  # refused here, not at the first claim (`inf`, say)
        self.concurrency = concurrency
        self.resumed = 0
        """How many runs this worker has resumed (whatever their outcome)."""
        self._failing_since: float | None = None  # when its claims began to fail, on the loop's clock
        self._pause_timeout: timedelta | None = None  # set here, else the broker's
        self._handed_back: dict[str, Backoff] = {}
        self._resuming: dict[str, _Renewal] = {}  # the runs being resumed here, by id
        self._now: Callable[[], datetime] = _utc_now

    @property
    def pause_timeout(self) -> timedelta:
        """How long a run may be handed back, from when its requests settled (with its longer
        `max_duration`): as long as a pause waits for a person, the broker's pause timeout
        (through a server, the server's, which each claim's answer says), unless set here."""
        return self._pause_timeout or self.broker.pause_timeout or DEFAULT_PAUSE_TIMEOUT

    @pause_timeout.setter
    def pause_timeout(self, value: timedelta) -> None:
        self._pause_timeout = value

    async def run_once(self, *, wait: float = 0.0) -> Run | None:
        """Claim one ready run (waiting up to `wait` seconds for one) and resume it; return
        the run as the handler left it, or None if there was none."""
        run = await self.broker.claim_run(list(self.handlers), worker=self.name, lease=self.lease, wait=wait)
        if run is None:
            return None
        return await self.resume(run)

    async def drain(self) -> int:
        """Resume ready runs, `concurrency` at a time, until there is none left; how many it
        resumed."""
        count = 0

        async def resume_until_none() -> None:
            nonlocal count
            while await self.run_once() is not None:
                count += 1

        await self._loops(resume_until_none)
        return count

    async def run(self, *, stop: asyncio.Event | None = None) -> None:
        """Resume runs as they become ready, until `stop` is set, the broker is closed (or
        the task is cancelled). A run being resumed when it stops is left to its lease, and
        so to another worker."""
        stop = stop or asyncio.Event()
        await self._loops(lambda: self._loop(stop))

    async def _loops(self, loop: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """`concurrency` of `loop` at once. One that fails (a refusal: a token revoked, agents
        it may not serve) ends the others, and its error is raised as it is, not in a group."""
        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(self.concurrency):
                    group.create_task(loop())
        except ExceptionGroup as failed:
            raise failed.exceptions[0] from None

    async def _loop(self, stop: asyncio.Event) -> None:
        backoff = Backoff(1.0, RETRY_CAP)
        while not stop.is_set():
            claiming = asyncio.ensure_future(
                self.broker.claim_run(list(self.handlers), worker=self.name, lease=self.lease, wait=CLAIM_WAIT)
            )
            stopping = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait((claiming, stopping), return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopping.cancel()
            if not claiming.done():
                claiming.cancel()
                try:
                    run = await claiming
                except (asyncio.CancelledError, Exception):
                    return
                if run is not None:  # claimed just as we stopped: resume it rather than wait out its lease
                    await self.resume(run)
                return
            try:
                run = claiming.result()
            except Closed:
                return  # its broker was closed: there is nothing more to claim through it
            except RateLimited as exc:
                await _pause(backoff.next_after(exc.retry_after), stop)
                continue
            except Unavailable as exc:  # the store, or the server's, away for now: ask again
                await _pause(self._failed_to_claim(exc, backoff.next_after(exc.retry_after)), stop)
                continue
            except InterlockError:
                raise  # refused (a token revoked, agents it may not serve): asking again changes nothing
            except Exception as exc:
                # The store or the server failing for now: unreachable, restarting ("the
                # database system is starting up"), answering 500, its disk full. The
                # worker outlives it and asks again.
                await _pause(self._failed_to_claim(exc, backoff.next()), stop)
                continue
            backoff.reset()
            if self._failing_since is not None:
                away = asyncio.get_running_loop().time() - self._failing_since
                self._failing_since = None
                log.info("worker %s claims runs again, after %.0f s", self.name, away)
            if run is not None:
                try:
                    await self.resume(run)
                except Unavailable as exc:  # the store away (longer than the lease, or before the handler ran)
                    log.warning(
                        "worker %s could not resume run %s or store how it ended (%s); its lease hands it on",
                        self.name,
                        run.id,
                        exc,
                    )
                except Exception:  # e.g. the store unreachable: the lease hands the run on
                    log.exception("worker %s could not finish run %s", self.name, run.id)

    def _failed_to_claim(self, exc: Exception, delay: float) -> float:
        """Log a claim that failed for now: a warning when it begins an outage, not again
        at each try (nor for each of the `concurrency` loops) until a claim goes through."""
        text = f"{exc}" if isinstance(exc, InterlockError) else f"{type(exc).__name__}: {exc}"
        if self._failing_since is None:
            self._failing_since = asyncio.get_running_loop().time()
            log.warning("worker %s could not claim a run (%s); trying again until it can", self.name, text)
        else:
            log.debug("worker %s could not claim a run (%s); trying again in %.1f s", self.name, text, delay)
        return delay

    async def resume(self, run: Run) -> Run:
        """Resume a run this worker has claimed: call its agent's handler with the settled
        requests it waited on, then complete, park, fail or hand it back by what the handler did."""
        self.resumed += 1
        handler = self.handlers.get(run.agent)
        if handler is None:  # claimed for an agent we have no handler for: not ours to guess
            return await self.broker.fail_run(run.id, f"no resume handler for agent {run.agent!r}", worker=self.name)
        renewing = _Renewal(self, run.id)
        # Claimed again while this worker still resumes it (another of its loops, once the
        # lease ran out as renewals failed): the claim is under the same name, so the earlier
        # resume's renewals would still succeed. It lost the run to this claim: stop it.
        earlier = self._resuming.get(run.id)
        if earlier is not None:
            earlier.lose()
        self._resuming[run.id] = renewing
        failure: str | None = None
        outcome: Any = None
        try:
            requests = {request_id: await self.broker.get(request_id) for request_id in run.waiting_on}
            # A task of its own, which a renewal that finds the run no longer this worker's
            # (cancelled, or taken over once the lease ran out) cancels: what it does next is
            # no longer the run's. (Cancelling this worker's task cancels it too.)
            handling = renewing.handling = asyncio.ensure_future(handler(run, requests))
            if renewing.lost:  # taken over as it read the requests: the handler does not run
                handling.cancel()
            try:
                outcome = await handling
            except asyncio.CancelledError:
                me = asyncio.current_task()
                if renewing.lost and me is not None and not me.cancelling():
                    log.warning(
                        "worker %s stopped resuming run %s of agent %s: the run was cancelled or taken over",
                        self.name,
                        run.id,
                        run.agent,
                    )
                    return await self.broker.get_run(run.id)
                raise
            except (Unavailable, RateLimited) as exc:  # "not now": what it needs is missing here, or away
                failure, outcome = self._not_now(run, requests, exc)
            except Exception as exc:
                failure = f"{type(exc).__name__}: {exc}"
                if _a_decision(exc):  # a person's no, or a gate failing closed: the run's outcome, not a fault
                    log.warning("run %s of agent %s failed: %s", run.id, run.agent, failure)
                else:
                    log.exception("resuming run %s of agent %s failed", run.id, run.agent)
        finally:
            await renewing.stop()
            if self._resuming.get(run.id) is renewing:
                del self._resuming[run.id]
        if renewing.lost:  # taken over as the handler ended: how it ended is not the run's
            log.warning("run %s was taken over while worker %s resumed it", run.id, self.name)
            return await self.broker.get_run(run.id)
        if not isinstance(outcome, _HandBack):
            self._handed_back.pop(run.id, None)
        return await self._finish(run, failure, outcome)

    def _not_now(
        self, run: Run, requests: Mapping[str, Request], exc: Unavailable | RateLimited
    ) -> tuple[str | None, _HandBack | None]:
        """How to hand back a run whose handler said "not now": for how long, or (the
        failure) not at all, once it has waited for a worker able to resume it as long as
        a pause waits for a person."""
        why = _why(exc)
        settled = [request.response.at for request in requests.values() if request.response is not None]
        since = max(settled, default=run.created_at)
        deadline = park_deadline(since, self.pause_timeout, run.max_duration)
        now = self._now()
        if now >= deadline:
            self._handed_back.pop(run.id, None)
            log.warning(
                "worker %s gives run %s of agent %s up, handed back too long: %s", self.name, run.id, run.agent, why
            )
            waited = _duration(deadline - since)
            return f"{why} (handed back since its requests settled; given up after {waited})", None
        backoff = self._handed_back.pop(run.id, None)
        first = backoff is None
        if backoff is None:
            backoff = Backoff(HAND_BACK_FIRST, HAND_BACK_CAP)
        self._handed_back[run.id] = backoff  # the newest last, so the oldest is forgotten first
        if len(self._handed_back) > _HANDED_BACK_KEPT:
            del self._handed_back[next(iter(self._handed_back))]
        asked = exc.retry_after
        if isinstance(asked, int | float) and not isinstance(asked, bool) and asked > 0:
            delay = float(asked)
        else:
            delay = backoff.next()
        # One more try at the deadline, rather than a hand-back past it.
        delay = max(min(delay, HAND_BACK_MOST, (deadline - now).total_seconds()), 0.001)
        return None, _HandBack(why, delay, first)

    async def _finish(self, run: Run, failure: str | None, outcome: Any) -> Run:
        """Store how the handler left the run. A store that fails for now is asked again
        for as long as the lease would have held the run (after that, another worker may
        hold it, and the store answers that it does): the handler's work is not done again
        for a store that was away for a moment. Storing it twice is harmless: each write
        is made only while this worker holds the run."""
        backoff = Backoff(0.25, RETRY_CAP)
        clock = asyncio.get_running_loop().time
        until = clock() + self.lease
        while True:
            try:
                return await self._store_outcome(run, failure, outcome)
            except Exception as exc:
                if isinstance(exc, InterlockError) and not isinstance(exc, RateLimited | Unavailable):
                    raise  # refused: asking again changes nothing
                delay = backoff.next_after(getattr(exc, "retry_after", None))
                if clock() + delay > until:
                    raise
                log.warning(
                    "worker %s could not store how run %s ended (%s: %s); trying again in %.1f s",
                    self.name,
                    run.id,
                    type(exc).__name__,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)

    async def _store_outcome(self, run: Run, failure: str | None, outcome: Any) -> Run:
        try:
            if isinstance(outcome, _HandBack):
                return await self._hand_back(run, outcome)
            if failure is not None:
                ended = await self.broker.fail_run(run.id, failure, worker=self.name)
            elif isinstance(outcome, Park):
                ended = await self.broker.park(
                    run.id, state=outcome.state, waiting_on=outcome.waiting_on, status=outcome.status, worker=self.name
                )
            else:
                ended = await self.broker.complete_run(run.id, outcome, worker=self.name)
            log.info("worker %s resumed run %s of agent %s: %s", self.name, run.id, run.agent, ended.status.value)
            return ended
        except RunConflict:
            log.warning("run %s was taken over or ended while worker %s resumed it", run.id, self.name)
            return await self.broker.get_run(run.id)
        except InvalidRequest as exc:  # a result or state that cannot be stored, requests not the run's
            log.error("run %s of agent %s could not be stored as its handler left it: %s", run.id, run.agent, exc)
            return await self.broker.fail_run(run.id, f"InvalidRequest: {exc}", worker=self.name)

    async def _hand_back(self, run: Run, back: _HandBack) -> Run:
        """Keep the run out of every worker's hands for `back.delay` seconds, and so ready
        for any worker after that: this worker's lease on it, cut (or stretched) to the
        delay. The run stays as it was claimed, its state and requests as they were parked."""
        if not await self.broker.renew_lease(run.id, worker=self.name, lease=back.delay):
            log.warning("run %s was taken over or ended while worker %s resumed it", run.id, self.name)
            return await self.broker.get_run(run.id)
        log.warning(
            "worker %s handed run %s of agent %s back, to be resumed in %.1f s: %s",
            self.name,
            run.id,
            run.agent,
            back.delay,
            back.why,
        )
        if back.first:  # on the run's page and stream; not again while it keeps being handed back here
            message = (
                f"Worker {self.name} could not resume the run now and handed it back, to be resumed "
                f"in {back.delay:.0f} s, by this worker or another: {back.why}"
            )
            data = {"outcome": "handed_back", "worker": self.name, "reason": back.why, "delay": back.delay}
            try:
                await self.broker.inform(message, session=run.session, agent=run.agent, run=run.id, data=data)
            except Exception as exc:  # the hand-back holds all the same; only its record is missing
                log.warning(
                    "could not record on run %s that it was handed back (%s: %s)", run.id, type(exc).__name__, exc
                )
        return await self.broker.get_run(run.id)


class _Renewal:
    """Renews a worker's lease on a run every third of the lease while its handler works:
    a timer, and a task only while a renewal is under way (most handlers finish first)."""

    def __init__(self, worker: Worker, run_id: str) -> None:
        self.worker = worker
        self.run_id = run_id
        self.loop = asyncio.get_running_loop()
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = self.loop.call_later(worker.lease / 3, self._due)
        self.handling: asyncio.Future[Any] | None = None
        """The handler at work, cancelled once the run is found no longer this worker's."""
        self.lost = False

    def _due(self) -> None:
        self.timer = None
        self.task = self.loop.create_task(self._renew())

    async def _renew(self) -> None:
        worker = self.worker
        delay = worker.lease / 3
        try:
            if not await worker.broker.renew_lease(self.run_id, worker=worker.name, lease=worker.lease):
                log.warning("worker %s lost its hold on run %s: stopping its handler", worker.name, self.run_id)
                self.lose()
                return
        except Exception as exc:  # the store failing for now (any error of its driver): renew again soon
            delay = worker.lease / 10
            log.warning(
                "renewing the lease on run %s failed (%s: %s); trying again in %.1f s",
                self.run_id,
                type(exc).__name__,
                exc,
                delay,
            )
        self.timer = self.loop.call_later(delay, self._due)

    def lose(self) -> None:
        """The run is this worker's no longer (cancelled, or claimed again): stop its handler."""
        self.lost = True
        if self.handling is not None:
            self.handling.cancel()

    async def stop(self) -> None:
        """No more renewals; waits for one under way to end."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        task, self.task = self.task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.timer is not None:  # set again by the renewal as it ended
            self.timer.cancel()
            self.timer = None


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _why(exc: BaseException) -> str:
    """The error's type and text, on one line and cut short enough for a run's record."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= 500 else text[:499] + "…"


def _duration(span: timedelta) -> str:
    """A span as a person reads it: in days, hours, minutes or seconds."""
    seconds = span.total_seconds()
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


async def _pause(seconds: float, stop: asyncio.Event) -> None:
    """Wait `seconds`, or until `stop` is set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()
