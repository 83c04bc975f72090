"""One back-off for every retry loop: a store locked by another process, a listener or an
event stream reconnecting. Only the first delay and the cap differ, by what is retried."""

from __future__ import annotations

__all__ = ["Backoff"]


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
