"""Quotas: how fast one principal may create requests and send updates, how many event
streams it may hold open at once, and how often sign-in links are mailed to one address
or asked for from one client.

Both are per server process and per principal (every token and web session of a human
or agent counts together). With several nodes behind a load balancer a principal gets a
node's quota on each: the quotas keep one caller from starving the others on a node, they
are not billing.

The rate is a token bucket per principal: `burst` tokens, refilled at `rate` a second,
one taken per call; an empty bucket answers 429 `rate_limited` with `Retry-After` (the
seconds until a token is back). It is a dozen lines of arithmetic on a monotonic clock,
kept here rather than taken from a rate-limiting library: those (limits, pyrate-limiter)
are built for shared backends and expire their in-memory keys with a timer thread or a
task per call, which an in-process bucket does not need.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sse_starlette import EventSourceResponse
from starlette.types import Receive, Scope, Send

__all__ = [
    "DEFAULT_QUOTA",
    "DEFAULT_STREAMS",
    "SIGNIN_MAIL_PER_ADDRESS",
    "SIGNIN_MAIL_PER_CLIENT",
    "Quota",
    "RateLimiter",
    "StreamSlots",
    "TooMany",
]


@dataclass(frozen=True, slots=True)
class Quota:
    """`rate` calls a second on average, up to `burst` at once."""

    rate: float
    burst: int

    def __post_init__(self) -> None:
        if not (self.rate > 0 and math.isfinite(self.rate)) or self.burst < 1:
            raise ValueError("a quota needs a positive, finite rate and a burst of at least 1")


DEFAULT_QUOTA = Quota(rate=20.0, burst=200)
"""Creates (and, separately, updates) per principal: 200 at once, then 20 a second. A
person cannot read that many; an agent that goes past it is looping."""

DEFAULT_STREAMS = 32
"""Open event streams per principal (API and web inbox together): a browser tab or a
client each hold one."""

SIGNIN_MAIL_PER_ADDRESS = Quota(rate=1 / 300, burst=3)
"""Sign-in links mailed to one address (asked for on the sign-in page): 3 at once, then
one every 5 minutes, whether the address is known or not."""

SIGNIN_MAIL_PER_CLIENT = Quota(rate=1 / 60, burst=10)
"""Sign-in links asked for from one client address: 10 at once, then one a minute."""

_PRUNE_AT = 10_000  # buckets kept before the full ones are forgotten


class TooMany(Exception):
    """A quota is used up: answered 429 with `Retry-After: retry_after` (whole seconds)."""

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after = retry_after


class RateLimiter:
    """A token bucket per key."""

    def __init__(self, quota: Quota, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.quota = quota
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, when counted)

    def wait_for(self, key: str) -> float:
        """Take a token for `key`: 0.0 if there was one, else the seconds until there is
        (and nothing is taken)."""
        rate, burst = self.quota.rate, self.quota.burst
        now = self._clock()
        tokens, then = self._buckets.get(key, (burst, now))
        tokens = min(burst, tokens + (now - then) * rate)
        if tokens >= 1:
            self._buckets[key] = (tokens - 1, now)
            if len(self._buckets) > _PRUNE_AT:
                self._prune(now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1 - tokens) / rate

    def take(self, key: str, what: str) -> None:
        """Take a token for `key` or raise `TooMany` saying what was refused."""
        wait = self.wait_for(key)
        if wait > 0:
            raise TooMany(
                f"too many {what}: at most {self.quota.burst} at once and {self.quota.rate:g} a second; "
                f"try again in {math.ceil(wait)} s",
                math.ceil(wait),
            )

    def _prune(self, now: float) -> None:
        """Forget the buckets that are full again (they hold nothing a new one would not)."""
        rate, burst = self.quota.rate, self.quota.burst
        self._buckets = {k: v for k, v in self._buckets.items() if v[0] + (now - v[1]) * rate < burst}


class StreamSlots:
    """How many event streams each principal holds open, capped at `limit` each."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}

    def count(self, key: str) -> int:
        return self._open.get(key, 0)

    def hold(self, key: str) -> Callable[[], None]:
        """Take a slot for `key` (or raise `TooMany`); call what it returns to give it back."""
        held = self._open.get(key, 0)
        if self.limit is not None and held >= self.limit:
            raise TooMany(f"you have {held} event streams open, at most {self.limit} allowed: close one first", 5)
        self._open[key] = held + 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            left = self._open.get(key, 1) - 1
            if left > 0:
                self._open[key] = left
            else:
                self._open.pop(key, None)

        return release

    def response(self, key: str, *args: Any, **kwargs: Any) -> EventSourceResponse:
        """An `EventSourceResponse` that holds a slot of `key` until it ends, however it ends."""
        return _HeldStream(self.hold(key), *args, **kwargs)


class _HeldStream(EventSourceResponse):
    def __init__(self, release: Callable[[], None], *args: Any, **kwargs: Any) -> None:
        try:
            super().__init__(*args, **kwargs)
        except BaseException:
            release()
            raise
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()
