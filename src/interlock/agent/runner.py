"""Running tool calls: the `ToolRunner` and its hook chain, and the plain handlers.

`ToolRunner` runs each call through `before_tool_use` (allow, deny or rewrite the
arguments; a rewrite is checked against the tool's JSON Schema), the approval gate, the
handlers, then the `on_tool_call` observers, who see each call exactly once as
completed, failed, refused or cancelled. `on_input_required` hooks run beside each wait
for a person (they are the broker's input hooks). Every hook runs on the core's hook
runner (`interlock.hooks`).

A handler serves the calls it knows and returns None for the others: `HumanInputTools`,
`ToolFunctions` for plain async functions, `compose` to chain several.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from ..broker import Broker
from ..errors import ApprovalDenied, ApprovalRefused, Cancelled, Expired, RunFailed, ToolFailed, ToolRefused
from ..hooks import DEFAULT_HOOK_TIMEOUT, Hooks
from ..model import Deny, InputHook
from ._background import keep
from ._results import about_call, as_content, error_content, failure, refusal, seconds
from ._schemas import make_validator, schema_problem
from .calls import ToolCall, ToolDefinition, ToolHandler, ToolResult, _current_call
from .gate import ApprovalGate
from .hooks import Allow, BeforeToolUse, BeforeVerdict, Rewrite, ToolCallObserver, ToolCallReport
from .human_input import HumanInputTools

__all__ = ["ToolFunctions", "ToolRunner", "compose"]

log = logging.getLogger("interlock")


class ToolRunner:
    """Runs tool calls through the hook chain and the approval gate, reporting each once.

    `handlers` are tried in order for each call (a `HumanInputTools`, a `ToolFunctions`,
    any `ToolHandler`); the first to return a result serves it. `definitions` are the
    agent's own tools; `self.definitions` adds those of the handlers that carry a
    `definitions` attribute (the human-input tools, `InformUserTool`), and is what to
    offer the model. A call whose arguments do not fit its tool's schema fails
    without running; a handler that raises fails the call with a generic message (raise
    `ToolFailed` or `ToolRefused` to say more). Human-input tools skip the gate: they ask
    a person anyway.
    """

    def __init__(
        self,
        broker: Broker,
        handlers: Sequence[ToolHandler],
        *,
        definitions: Iterable[ToolDefinition] = (),
        gate: ApprovalGate | None = None,
        hook_timeout: float = DEFAULT_HOOK_TIMEOUT,
        channels: Iterable[str] | None = None,
    ) -> None:
        if isinstance(channels, str):
            raise TypeError("channels is a collection of channel names, not one string")
        self.broker = broker
        self.handlers = tuple(handlers)
        self.channels = frozenset(channels) if channels is not None else None
        self.gate = gate
        self.hook_timeout = hook_timeout
        human = [h for h in self.handlers if isinstance(h, HumanInputTools)]
        by_name: dict[str, ToolDefinition] = {}
        for definition in [d for h in self.handlers for d in _definitions_of(h)] + list(definitions):
            known = by_name.get(definition.name)
            if known is not None and known.parameters != definition.parameters:
                raise ValueError(f"tool {definition.name!r} is defined twice, with different parameters")
            by_name.setdefault(definition.name, definition)
        self.definitions = tuple(by_name.values())
        self._schemas = {d.name: d.parameters for d in self.definitions}
        self._validators = {d.name: make_validator(d.name, d.parameters) for d in self.definitions}
        self._human_names = frozenset(n for h in human for n in h.tool_names)
        for handler in self.handlers:
            if isinstance(handler, HumanInputTools):
                continue
            claimed = self._human_names & _names_served_by(handler)
            if claimed:
                raise ValueError(
                    f"tool {sorted(claimed)[0]!r} is a human-input tool: a host handler cannot serve it too"
                )
        # A human-input tool the agent never offers is not one the model may call: a call to
        # it is the host's (the handlers after the human-input tools), and is warned of.
        self._unoffered = self._human_names - {d.name for d in self.definitions}
        self._warned: set[tuple[str | None, str]] = set()
        self._before: Hooks[ToolCall, BeforeVerdict] = Hooks("before_tool_use hook", about_call)
        self._observers: Hooks[ToolCallReport, None] = Hooks("on_tool_call observer", _about_report)

    # -- hooks ------------------------------------------------------------------------------

    def before_tool_use(self, hook: BeforeToolUse, *, priority: int = 0, timeout: float | None = None) -> BeforeToolUse:
        """Run `hook(call)` before each call; lower priority first. Returns the hook.

        `Deny(reason)` refuses the call; `Rewrite(arguments)` replaces its arguments (the
        next hooks see them) once they pass the tool's schema, else the call is refused;
        None or `Allow()` goes on. A hook that raises or overruns its bound refuses the call:
        a gate that cannot decide fails closed.
        """
        self._before.add(hook, priority=priority, timeout=self._bound(timeout))
        return hook

    def on_input_required(self, hook: InputHook, *, priority: int = 0, timeout: float | None = None) -> InputHook:
        """Run `hook(request)` beside each wait for a person; `Deny(reason)` rejects the request.

        It is the broker's input hook. A runner made with `channels` hears only of requests
        created in those channels, so two agents sharing a broker each see their own; without
        `channels` it sees every request the broker creates (the request's origin names the
        session, channel, agent, actor and tool call). Returns the hook.
        """
        self.broker.add_input_hook(hook, priority=priority, timeout=timeout, channels=self.channels)
        return hook

    def on_tool_call(
        self, observer: ToolCallObserver, *, priority: int = 0, timeout: float | None = None
    ) -> ToolCallObserver:
        """Have `observer(report)` told of each call once it is over. Returns the observer.

        An observer that raises or overruns its bound is logged; the others still run and
        the result does not change.
        """
        self._observers.add(observer, priority=priority, timeout=self._bound(timeout))
        return observer

    def _bound(self, timeout: float | None) -> float:
        return self.hook_timeout if timeout is None else timeout

    # -- running ----------------------------------------------------------------------------

    async def run(self, call: ToolCall) -> ToolResult:
        """Run one call through the chain and return what the model reads.

        Cancelled (the turn was cut), the call is reported `cancelled` and the cancellation
        goes on; a request it was waiting on is withdrawn by the broker.
        """
        token = _current_call.set(call)
        try:
            try:
                result, ran = await self._run(call)
            except asyncio.CancelledError:
                await self._report(ToolCallReport(call, "cancelled", detail="the turn was cancelled"))
                raise
            except RunFailed as exc:
                await self._report(ToolCallReport(call, "failed", detail=str(exc)))
                raise
            await self._report(ToolCallReport(ran, result.status, result, result.detail))
            return result
        finally:
            _current_call.reset(token)

    async def run_all(self, calls: Sequence[ToolCall]) -> list[ToolResult]:
        """Run the calls of one turn concurrently; results in the order of `calls`.

        A call waiting for a person holds only itself: the others complete meanwhile. If
        the turn is cancelled, every call still running is cancelled (and reported so,
        once). A `RunFailed` cancels the other calls and is raised.
        """
        tasks = [asyncio.ensure_future(self.run(call)) for call in calls]
        if not tasks:
            return []
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            failed = next((t for t in tasks if t in done and not t.cancelled() and t.exception()), None)
            if failed is not None:
                raise cast(BaseException, failed.exception())
            return [t.result() for t in tasks]
        finally:
            for task in tasks:
                task.cancel()
            # Let each cancelled call withdraw its request and report itself, even if this
            # turn is cancelled again meanwhile.
            await self._shielded(asyncio.gather(*tasks, return_exceptions=True))

    async def _run(self, call: ToolCall) -> tuple[ToolResult, ToolCall]:
        validator = self._validators.get(call.name)
        if validator is not None:
            problem = schema_problem(validator, call.arguments)
            if problem is not None:
                return ToolResult(
                    error_content(f"Invalid arguments for tool '{call.name}': {problem}"), is_error=True
                ), call
        checked = await self._before_tool_use(call)
        if isinstance(checked, ToolResult):
            return checked, call
        call = checked
        human = call.name in self._human_names
        if human and call.name in self._unoffered:
            self._warn_unoffered(call)
            human = False
        if self.gate is not None and not human:
            gated = await self._authorize(call)
            if isinstance(gated, ToolResult):
                return gated, call
            call = gated
        return await self._dispatch(call, human=human), call

    def _warn_unoffered(self, call: ToolCall) -> None:
        key = (call.channel, call.name)
        if key in self._warned:
            return
        self._warned.add(key)
        where = f"on channel {call.channel!r}" if call.channel is not None else "with no channel"
        log.warning(
            "tool %r was called %s: it is served as a human-input tool but the agent never offers it, "
            "so nobody is asked and the call goes to the host's handlers; add its definition",
            call.name,
            where,
        )

    async def _before_tool_use(self, call: ToolCall) -> ToolCall | ToolResult:
        for hook in self._before:
            outcome = await self._before.call(hook, call)
            if outcome.timed_out:
                return refusal(
                    f"The call to '{call.name}' was blocked: its check did not finish",
                    detail=f"before_tool_use hook {hook.name} timed out after {seconds(hook.timeout)}s",
                )
            if outcome.error is not None:
                return refusal(
                    f"The call to '{call.name}' was blocked: its check failed",
                    detail=f"{type(outcome.error).__name__}: {outcome.error}",
                )
            verdict = outcome.verdict
            if verdict is None or isinstance(verdict, Allow):
                continue
            if isinstance(verdict, Deny):
                return refusal(verdict.reason)
            if isinstance(verdict, Rewrite):
                validator = self._validators.get(call.name)
                problem = (
                    "the tool declares no schema to check them against"
                    if validator is None
                    else schema_problem(validator, verdict.arguments)
                )
                if problem is not None:
                    return refusal(
                        f"The rewritten arguments for '{call.name}' are invalid: {problem}",
                        detail=f"rewrite by {hook.name}",
                    )
                call = call.with_arguments(verdict.arguments)
                continue
            return refusal(
                f"The call to '{call.name}' was blocked: its check gave no clear answer",
                detail=f"before_tool_use hook {hook.name} returned {verdict!r}",
            )
        return call

    async def _authorize(self, call: ToolCall) -> ToolCall | ToolResult:
        assert self.gate is not None
        try:
            arguments = await self.gate.authorize(call, schema=self._schemas.get(call.name))
        except ApprovalDenied as exc:
            reason = exc.reason or f"The call to '{call.name}' was denied"
            return refusal(reason, denied=True, detail=f"approval {exc.request_id or '(hook)'} denied")
        except ApprovalRefused as exc:
            return refusal(exc.reason, detail=exc.detail)
        except Expired as exc:
            bound = self.gate.timeout
            after = f" after {seconds(bound)}s" if bound is not None else ""
            return ToolResult(
                error_content(f"Approval timed out{after} for tool '{call.name}'"), is_error=True, detail=str(exc)
            )
        except Cancelled as exc:
            return failure(call.name, f"approval: {type(exc).__name__}: {exc}")
        except (RunFailed, asyncio.CancelledError):
            raise
        except Exception as exc:  # the call must not run on an approval nobody saw through
            log.exception("the approval gate failed on tool call %s (%s)", call.id, call.name)
            return failure(call.name, f"approval gate: {type(exc).__name__}: {exc}")
        return call.with_arguments(arguments)

    async def _dispatch(self, call: ToolCall, *, human: bool = False) -> ToolResult:
        for handler in self.handlers:
            if not human and isinstance(handler, HumanInputTools):
                continue
            try:
                result = await handler(call)
            except ToolFailed as exc:
                return ToolResult(error_content(str(exc)), is_error=True, detail=str(exc))
            except ToolRefused as exc:
                return refusal(exc.reason)
            except Exception as exc:
                log.exception("tool %r failed on call %s", call.name, call.id)
                return failure(call.name, f"{type(exc).__name__}: {exc}")
            if result is not None:
                return result
        return ToolResult(error_content(f"Unknown tool '{call.name}'"), is_error=True, detail="no handler serves it")

    async def _report(self, report: ToolCallReport) -> None:
        """Tell every observer, shielded: a turn cut meanwhile does not cut the report short."""
        if not self._observers:
            return
        await self._shielded(asyncio.ensure_future(self._tell_observers(report)))

    async def _shielded(self, future: asyncio.Future[Any]) -> None:
        """Await `future` so that cancelling the waiter leaves it running (and referenced)."""
        await asyncio.shield(keep(future))

    async def _tell_observers(self, report: ToolCallReport) -> None:
        await self._observers.run(report)


def compose(*handlers: ToolHandler) -> ToolHandler:
    """One handler trying each of `handlers` in order; the first that serves the call answers."""

    async def composed(call: ToolCall) -> ToolResult | None:
        for handler in handlers:
            result = await handler(call)
            if result is not None:
                return result
        return None

    return composed


class ToolFunctions:
    """A handler for plain async functions by tool name: `fn(**arguments)` is the call.

    A string return value is the content as is; anything else is sent as JSON.
    """

    def __init__(self, functions: Mapping[str, Callable[..., Awaitable[Any]]]) -> None:
        self.functions = dict(functions)

    async def __call__(self, call: ToolCall) -> ToolResult | None:
        fn = self.functions.get(call.name)
        if fn is None:
            return None
        return ToolResult(as_content(await fn(**call.arguments)))


def _names_served_by(handler: ToolHandler) -> set[str]:
    """The tool names a host handler says it serves: its functions' or its definitions'."""
    names = {d.name for d in _definitions_of(handler)}
    if isinstance(handler, ToolFunctions):
        names |= set(handler.functions)
    return names


def _definitions_of(handler: ToolHandler) -> tuple[ToolDefinition, ...]:
    found = getattr(handler, "definitions", ())
    return tuple(d for d in found if isinstance(d, ToolDefinition))


def _about_report(report: ToolCallReport) -> str:
    return about_call(report.call)
