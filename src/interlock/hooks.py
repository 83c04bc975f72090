"""The one hook runner: prioritised, time-bounded, logged.

Every hook mechanism of interlock runs on it: the broker's on-input-required hooks, and
on the agent side `before_tool_use`, the approval gate's hook, a stored approval
policy's hook by URL and the `on_tool_call` observers. A `Hooks` holds the hooks
registered for one purpose and runs them in priority order (lower first, then in the
order they were added), each call bounded by its own timeout. A hook that raises or
overruns is logged with its name and the subject it ran on, and the run goes on; what a
verdict, a failure or an overrun means is for the caller to decide (the broker rejects
on `Deny` and ignores a failure; `before_tool_use` refuses the call on a failure).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

__all__ = ["DEFAULT_HOOK_TIMEOUT", "Hook", "Hooks", "Outcome"]

log = logging.getLogger("interlock")

DEFAULT_HOOK_TIMEOUT = 30.0
"""Seconds a hook may run when it is registered without a timeout of its own."""

S = TypeVar("S")
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Hook(Generic[S, V]):
    """One registered hook: the function, its priority, its bound in seconds, its name, and
    `when`, which subjects it runs on (all of them when None)."""

    fn: Callable[[S], Awaitable[V] | V]
    priority: int
    timeout: float
    name: str
    when: Callable[[S], bool] | None = None


@dataclass(frozen=True, slots=True)
class Outcome(Generic[V]):
    """How one hook call ended: with a `verdict`, by raising `error`, or by overrunning its bound."""

    hook: Hook[Any, V]
    verdict: V | None = None
    error: Exception | None = None
    timed_out: bool = False

    @property
    def failed(self) -> bool:
        """Whether the hook raised or overran its bound (its verdict is then None)."""
        return self.timed_out or self.error is not None


def _name_of(fn: Callable[..., Any]) -> str:
    """How logs name a hook: its qualified name, or its class's for a callable object."""
    name = getattr(fn, "__qualname__", None)
    if not isinstance(name, str):
        name = type(fn).__qualname__
    module = getattr(fn, "__module__", None)
    return f"{module}.{name}" if isinstance(module, str) else name


class Hooks(Generic[S, V]):
    """The hooks registered for one purpose, run in priority order, each call bounded.

    `what` names them in logs ("input hook", "on_tool_call observer"); `describe` names
    the subject a hook ran on ("request r1"). Empty, a `Hooks` is false, so a caller keeps
    a fast path that pays nothing when no hook is registered.
    """

    __slots__ = ("_describe", "_hooks", "what")

    def __init__(self, what: str, describe: Callable[[S], str]) -> None:
        self.what = what
        self._describe = describe
        self._hooks: list[Hook[S, V]] = []

    def add(
        self,
        fn: Callable[[S], Awaitable[V] | V],
        *,
        priority: int = 0,
        timeout: float,
        when: Callable[[S], bool] | None = None,
    ) -> Hook[S, V]:
        """Register `fn` (sync or async) to run within `timeout` seconds; lower priority runs
        first. With `when`, `run` calls it only on the subjects for which `when` is true."""
        if not timeout > 0:
            raise ValueError("a hook's timeout must be a positive number of seconds")
        hook = Hook(fn, priority, timeout, _name_of(fn), when)
        self._hooks.append(hook)
        self._hooks.sort(key=lambda h: h.priority)  # stable: equal priorities keep their order
        return hook

    def __bool__(self) -> bool:
        return bool(self._hooks)

    def __len__(self) -> int:
        return len(self._hooks)

    def __iter__(self) -> Iterator[Hook[S, V]]:
        """The hooks in the order they run (a copy: adding one meanwhile changes nothing here)."""
        return iter(tuple(self._hooks))

    async def call(self, hook: Hook[S, V], subject: S) -> Outcome[V]:
        """Run one hook on `subject` within its bound; log a raise or an overrun.

        The hook need not be registered: a stored approval policy's hook, read afresh for
        each decision, is made into a `Hook` and run here. A cancellation of the caller goes
        on as usual; the hook is cancelled with it.
        """
        try:
            async with asyncio.timeout(hook.timeout) as bound:
                value = hook.fn(subject)
                if inspect.isawaitable(value):
                    value = await value
        except TimeoutError as exc:
            if not bound.expired():  # the hook raised TimeoutError itself: a failure like any other
                log.exception("%s %s failed on %s", self.what, hook.name, self._describe(subject))
                return Outcome(hook, error=exc)
            log.warning(
                "%s %s timed out after %ss on %s", self.what, hook.name, f"{hook.timeout:g}", self._describe(subject)
            )
            return Outcome(hook, timed_out=True)
        except Exception as exc:
            log.exception("%s %s failed on %s", self.what, hook.name, self._describe(subject))
            return Outcome(hook, error=exc)
        return Outcome(hook, verdict=cast(V, value))

    async def run(self, subject: S, *, until: Callable[[V], bool] | None = None) -> list[Outcome[V]]:
        """Run every hook on `subject` in order and return their outcomes.

        With `until`, stop after the first verdict for which `until(verdict)` is true (it is
        then the last outcome). A failed hook never stops the run. A hook whose `when`
        refuses the subject is skipped and has no outcome.
        """
        outcomes: list[Outcome[V]] = []
        for hook in self:
            if hook.when is not None and not hook.when(subject):
                continue
            outcome = await self.call(hook, subject)
            outcomes.append(outcome)
            if until is not None and not outcome.failed and until(cast(V, outcome.verdict)):
                break
        return outcomes
