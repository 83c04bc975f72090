"""One back-off for every retry loop: a store locked by another process, a listener or an
event stream reconnecting. Only the first delay and the cap differ, by what is retried.
And one way for such a loop to log an outage (`Outage`): once as it begins, once as it ends."""

from __future__ import annotations

import logging
import time

__all__ = ["Backoff", "Outage"]


class Backoff:
    """Delays that double from `first` up to `cap`; `reset()` starts over after a success.

    With `immediate`, the first retry after a reset comes at once (a connection that was
    up a while and dropped is tried again right away; only repeated failures wait).
    """

    __slots__ = ("_fresh", "_next", "cap", "first", "immediate")

    def __init__(self, first: float, cap: float, *, immediate: bool = False) -> None:
        if not 0 < first <= cap:
            raise ValueError("a back-off needs 0 < first <= cap")
        self.first = first
        self.cap = cap
        self.immediate = immediate
        self._next = first
        self._fresh = True

    def next(self) -> float:
        """The delay before the next try."""
        if self._fresh and self.immediate:
            self._fresh = False
            return 0.0
        self._fresh = False
        delay, self._next = self._next, min(self._next * 2, self.cap)
        return delay

    def next_after(self, asked: float | None) -> float:
        """The delay before the next try, or what the other side asked to wait (a server's
        `Retry-After`), whichever is longer."""
        return max(asked or 0.0, self.next())

    def reset(self) -> None:
        self._next = self.first
        self._fresh = True


class Outage:
    """The failures for now of one background loop (the store away, say), logged as an
    operator reads them: a warning when they begin, debug lines while they go on, and an
    info line once the loop works again. A store down for an hour is two lines in the log
    of each loop that met it, not one a try."""

    __slots__ = ("_log", "_since", "what")

    def __init__(self, log: logging.Logger, what: str) -> None:
        self._log = log
        self.what = what
        """What failed, as the log names it ("expiring overdue requests")."""
        self._since: float | None = None

    @property
    def ongoing(self) -> bool:
        """Whether the loop has failed since it last worked."""
        return self._since is not None

    def failed(self, why: object, then: str) -> None:
        """Log a failure: `why` it failed, and what the loop does `then` ("trying again in 1 s")."""
        if self._since is None:
            self._since = time.monotonic()
            self._log.warning(
                "%s failed (%s); %s (its next failures are logged at debug level until it works again)",
                self.what,
                why,
                then,
            )
        else:
            self._log.debug("%s failed (%s); %s", self.what, why, then)

    def ended(self) -> None:
        """The loop worked: an outage it was in is over."""
        if self._since is not None:
            away, self._since = time.monotonic() - self._since, None
            self._log.info("%s works again, after %.1f s", self.what, away)
