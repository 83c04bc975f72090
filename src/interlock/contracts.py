"""Resolution contracts: how a request made for an agent gets settled (seed 003).

Whichever contract settles it, a request is first recorded by the broker, so the inbox,
the event log and the audit trail show what was asked, what was decided and by whom. A
contract only decides where the answer comes from:

- `broker` (the default, `BrokerContract`): the request waits in the person's inbox and
  any surface (CLI, HTTP, a chat bridge) answers it; the call waits.
- `auto_resolve` (`AutoResolveContract`): answered at once with a configured decision
  (`approve` by default), for unattended runs and benchmarks. Setting the environment
  variable `INTERLOCK_AUTO_RESOLVE` (`1`, `approve` or `deny`) switches it on for every
  agent, whatever else is configured, so a run can be made unattended from outside.
- `terminal` (`TerminalContract`): the request is put on a terminal and the typed line
  answers it; choices are matched case-insensitively and other text is passed through.
  An answer that arrives from the inbox first still counts.

`Contracts` chooses one per agent: by name (`"auto_resolve"`), by `{"type": name,
"params": {...}}` as an agent manifest would say it, or as an object. Any object with an
async `settle(broker, request)` method is a contract.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, TextIO, TypeAlias, runtime_checkable

from .broker import Broker
from .errors import InvalidAnswer
from .model import Answers, Ask, Choice, Confirm, Form, MultiChoice, Option, Request, Response, Text, options_of

__all__ = [
    "AUTO_RESOLVE_ENV",
    "AutoResolveContract",
    "BrokerContract",
    "Contract",
    "ContractSpec",
    "Contracts",
    "TerminalContract",
    "auto_resolve_from_env",
    "contract_from",
]

log = logging.getLogger("interlock")

AUTO_RESOLVE_ENV = "INTERLOCK_AUTO_RESOLVE"

APPROVE_WORDS = frozenset({"approve", "approved", "yes", "y", "true", "allow", "ok", "accept", "1"})
DENY_WORDS = frozenset({"deny", "denied", "no", "n", "false", "reject", "refuse", "0"})


@runtime_checkable
class Contract(Protocol):
    """Gets a recorded request settled. Raise as `Broker.wait` does for other outcomes."""

    async def settle(self, broker: Broker, request: Request) -> Response:
        """Return the response of `request` once it is answered; raise `Rejected`,
        `Expired` or `Cancelled` when it ends otherwise."""
        ...


ContractSpec: TypeAlias = "str | Contract | Mapping[str, Any]"


class BrokerContract:
    """The request waits in the person's inbox until someone answers it there."""

    name: ClassVar[str] = "broker"

    async def settle(self, broker: Broker, request: Request) -> Response:
        return await broker.wait(request.id)

    def __repr__(self) -> str:
        return "BrokerContract()"


class _NoAnswer(Exception):
    """The configured decision does not answer an ask."""


def _decision_bool(decision: str | bool) -> bool | None:
    if isinstance(decision, bool):
        return decision
    word = decision.strip().lower()
    if word in APPROVE_WORDS:
        return True
    if word in DENY_WORDS:
        return False
    return None


class AutoResolveContract:
    """Answers every request at once with `decision`, through the broker (`via="auto_resolve"`).

    How the decision answers each ask: a confirm is true only for an approving word
    (`approve`, `yes`, ...), so anything else answers no; a choice takes the option whose
    id or label is the decision (ignoring case), else the option named by a yes/no word
    matching the decision, else the decision itself when other answers are allowed, else
    the first option; a multi-choice takes the matching options, else the first; text
    takes the decision; a form takes its schema's defaults. An optional ask that cannot be
    answered is left out; a required one gets the request rejected with the reason.
    """

    name: ClassVar[str] = "auto_resolve"

    def __init__(self, decision: str | bool = "approve", *, by: str = "auto_resolve") -> None:
        if not isinstance(decision, bool) and (not isinstance(decision, str) or not decision.strip()):
            raise ValueError("an auto_resolve decision must be a non-empty string or a bool")
        self.decision = decision
        self.by = by

    def __repr__(self) -> str:
        return f"AutoResolveContract(decision={self.decision!r})"

    async def settle(self, broker: Broker, request: Request) -> Response:
        try:
            answer = self.answer_for(request)
        except _NoAnswer as exc:
            await broker.reject(request.id, str(exc), by=self.by, via="auto_resolve")
        else:
            try:
                await broker.resolve(request.id, answer, by=self.by, via="auto_resolve")
            except InvalidAnswer as exc:
                await broker.reject(request.id, f"auto_resolve could not answer: {exc}", by=self.by, via="auto_resolve")
        return await broker.wait(request.id)

    def answer_for(self, request: Request) -> Any:
        """The answers the decision gives `request`, by ask id."""
        answers: dict[str, Any] = {}
        for ask in request.asks:
            try:
                answers[ask.id] = self._answer(ask)
            except _NoAnswer:
                if ask.required:
                    raise
        return Answers(answers)

    def _answer(self, ask: Ask) -> Any:
        decision, verdict = self.decision, _decision_bool(self.decision)
        text = decision if isinstance(decision, str) else ("approve" if decision else "deny")
        if isinstance(ask, Confirm):
            return verdict is True
        if isinstance(ask, Text):
            return text
        if isinstance(ask, Choice | MultiChoice):
            options = options_of(ask)
            picked = _matching(options, text) or _matching_verdict(options, verdict)
            if isinstance(ask, Choice):
                if picked:
                    return picked[0]
                return text if ask.allow_other else options[0].id
            if not picked:
                picked = [opt.id for opt in options[: max(ask.min, 1)]]
            return picked[: ask.max] if ask.max is not None else picked
        return self._form_defaults(ask)

    def _form_defaults(self, ask: Form) -> dict[str, Any]:
        properties = ask.schema.get("properties", {})
        value = {
            name: prop["default"]
            for name, prop in properties.items()
            if isinstance(prop, Mapping) and "default" in prop
        }
        if not value and not ask.required:
            raise _NoAnswer(f"auto_resolve leaves the optional form {ask.id!r} out")
        try:
            return ask.check(value)
        except InvalidAnswer as exc:
            raise _NoAnswer(f"auto_resolve cannot fill form {ask.id!r}: {exc}") from None


def _matching(options: tuple[Option, ...], text: str) -> list[str]:
    wanted = text.strip().casefold()
    return [opt.id for opt in options if wanted in (opt.id.casefold(), opt.label.casefold())]


def _matching_verdict(options: tuple[Option, ...], verdict: bool | None) -> list[str]:
    if verdict is None:
        return []
    words = APPROVE_WORDS if verdict else DENY_WORDS
    return [opt.id for opt in options if opt.id.casefold() in words or opt.label.casefold() in words]


class _Skip:
    """An optional ask left unanswered at the terminal."""


_SKIP = _Skip()


class TerminalContract:
    """Puts each request on a terminal and answers it with the typed lines (`via="terminal"`).

    `input` and `output` default to the process's stdin and stdout, read when a prompt is
    shown; pass other streams to drive it from a test or a pty. One prompt is on the
    terminal at a time. A confirm takes yes/no words; a choice takes an option's number,
    id or label (ignoring case), and any other text is passed through as the answer (the
    broker checks it; a bad answer is shown and asked again); a multi-choice takes a
    comma-separated list; a form takes a JSON object. Denying an approval asks for a
    reason, which reaches the agent verbatim. End of input gives the request up.

    Lines are read on a daemon thread, so a prompt that an inbox answer made moot never
    holds the process open; a line typed before the next prompt shows is dropped, as it
    was meant for the request answered elsewhere.
    """

    name: ClassVar[str] = "terminal"

    def __init__(self, input: TextIO | None = None, output: TextIO | None = None, *, by: str | None = None) -> None:
        self._input = input
        self._output = output
        self.by = by
        self._lock = asyncio.Lock()
        self._reading: asyncio.Future[str] | None = None

    def __repr__(self) -> str:
        return "TerminalContract()"

    async def settle(self, broker: Broker, request: Request) -> Response:
        prompter = asyncio.ensure_future(self._converse(broker, request))
        try:
            return await broker.wait(request.id)
        finally:
            prompter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await prompter

    async def prompt(self, broker: Broker, request: Request) -> bool:
        """Put one request on the terminal and send the answer, without owning it: no wait,
        nothing withdrawn. True once answered here; False if it was settled first elsewhere.

        `interlock watch` uses it. End of input raises `EOFError` and changes nothing.
        """
        async with self._lock:
            if (await broker.get(request.id)).status.settled:
                return False
            self._show(request)
            while (answered := await self._answer_once(broker, request)) is None:
                pass
            return answered

    # -- the conversation ------------------------------------------------------------------

    async def _converse(self, broker: Broker, request: Request) -> None:
        try:
            async with self._lock:
                if (await broker.get(request.id)).status.settled:
                    return
                self._show(request)
                while await self._answer_once(broker, request) is None:
                    pass
        except EOFError:
            self._say("(end of input: the request is given up)")
            await broker.cancel(request.id, "the terminal reached the end of its input", by=self.by, via="terminal")
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("the terminal prompt for request %s failed", request.id)
            await broker.cancel(request.id, "the terminal prompt failed", by=self.by, via="terminal")

    async def _answer_once(self, broker: Broker, request: Request) -> bool | None:
        """Ask every ask once and send the answer: True if it settled the request, False if
        something else settled it first, None to ask again after a bad answer."""
        answers: dict[str, Any] = {}
        comment = ""
        denied = False
        for ask in request.asks:
            if denied and not ask.required:
                continue
            value = await self._ask(ask)
            if value is _SKIP:
                continue
            answers[ask.id] = value
            if isinstance(ask, Confirm) and value is False and request.kind == "approval":
                denied = True
                comment = await self._line("Reason (optional, shown to the agent as written): ")
        answer: Any = Answers(answers)  # by ask id, even when the one optional ask was skipped
        try:
            return await broker.resolve(request.id, answer, by=self.by or request.to, via="terminal", comment=comment)
        except InvalidAnswer as exc:
            self._say(f"  ! {exc}; please answer again")
            return None

    async def _ask(self, ask: Ask) -> Any:
        optional = "" if ask.required else " (optional: press enter to skip)"
        if isinstance(ask, Confirm):
            while True:
                line = (await self._line(f"{ask.prompt} [y/n]{optional} > ")).strip()
                if not line and not ask.required:
                    return _SKIP
                verdict = _decision_bool(line) if line else None
                if verdict is not None:
                    return verdict
                self._say("  ! please answer yes or no")
        if isinstance(ask, Choice | MultiChoice):
            options = options_of(ask)
            self._say(ask.prompt + optional)
            for number, opt in enumerate(options, 1):
                about = f" - {opt.description}" if opt.description else ""
                self._say(f"  {number}) {opt.label}{about}")
            several = isinstance(ask, MultiChoice)
            hint = "numbers or names, separated by commas" if several else "a number or a name, or your own answer"
            line = (await self._line(f"({hint}) > ")).strip()
            if not line and not ask.required:
                return _SKIP
            if several:
                return [_pick(options, part.strip()) for part in line.split(",") if part.strip()]
            return _pick(options, line)
        if isinstance(ask, Form):
            self._say(ask.prompt + optional)
            required = set(ask.schema.get("required", ()))
            for name, prop in ask.schema.get("properties", {}).items():
                about = (prop.get("description") or prop.get("type") or "") if isinstance(prop, Mapping) else ""
                self._say(f"  {name}{' (required)' if name in required else ''}{f': {about}' if about else ''}")
            while True:
                line = (await self._line("(a JSON object with those fields) > ")).strip()
                if not line and not ask.required:
                    return _SKIP
                try:
                    return json.loads(line)
                except json.JSONDecodeError as exc:
                    self._say(f"  ! not JSON: {exc.msg}")
        line = await self._line(f"{ask.prompt}{optional} > ")
        if not line.strip() and not ask.required:
            return _SKIP
        return line

    # -- terminal I/O ----------------------------------------------------------------------

    def _show(self, request: Request) -> None:
        label = "approval" if request.kind == "approval" else "question"
        asker = request.origin.agent or request.requester
        self._say(f"\n== interlock {label} {request.id}" + (f" from {asker}" if asker else ""))
        if request.title:
            self._say(request.title)
        if request.details:
            self._say(request.details)

    def _say(self, text: str) -> None:
        out = self._output or sys.stdout
        out.write(text + "\n")
        out.flush()

    async def _line(self, prompt: str) -> str:
        out = self._output or sys.stdout
        out.write(prompt)
        out.flush()
        pending = self._reader()
        if pending.done() and pending.result() != "":
            # typed before this prompt showed: meant for one answered elsewhere
            self._reading = None
            pending = self._reader()
        # Shielded: a prompt cut short leaves the read in flight for the next prompt.
        line = await asyncio.shield(pending)
        if self._reading is pending:  # another reader may have started the next read already
            self._reading = None
        if line == "":
            raise EOFError
        return line.rstrip("\r\n")

    def _reader(self) -> asyncio.Future[str]:
        """The read in flight on the input, started if there is none."""
        loop = asyncio.get_running_loop()
        pending = self._reading
        if pending is None or pending.get_loop() is not loop:
            pending = self._reading = loop.create_future()
            stream = self._input or sys.stdin
            reader = threading.Thread(
                target=_read_line, args=(stream, loop, pending), daemon=True, name="interlock-tty"
            )
            reader.start()
        return pending

    async def input_closed(self) -> None:
        """Return once the input reaches its end (Ctrl-D), even between prompts. Lines
        typed while no prompt shows are dropped, as they are meant for no request."""
        while True:
            pending = self._reader()
            line = await asyncio.shield(pending)
            if line == "":
                return
            if self._reading is pending:
                self._reading = None


def _read_line(stream: TextIO, loop: asyncio.AbstractEventLoop, into: asyncio.Future[str]) -> None:
    """Read one line on this (daemon) thread and hand it to the loop."""
    try:
        line = stream.readline()
    except Exception as exc:
        error = exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(_set_exception, into, error)
        return
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_set_result, into, line)


def _set_result(future: asyncio.Future[str], line: str) -> None:
    if not future.done():
        future.set_result(line)


def _set_exception(future: asyncio.Future[str], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def _pick(options: tuple[Option, ...], text: str) -> str:
    if text.isdigit() and 1 <= int(text) <= len(options):
        return options[int(text) - 1].id
    matched = _matching(options, text)
    return matched[0] if matched else text


# -- choosing a contract -------------------------------------------------------------------

_BY_NAME: dict[str, type[BrokerContract] | type[AutoResolveContract] | type[TerminalContract]] = {
    "broker": BrokerContract,
    "registry": BrokerContract,  # seed 003's name for the same behaviour
    "auto_resolve": AutoResolveContract,
    "terminal": TerminalContract,
}


def contract_from(spec: ContractSpec) -> Contract:
    """A contract from a name, a `{"type": name, "params": {...}}` mapping, or an object."""
    if isinstance(spec, str):
        cls = _BY_NAME.get(spec)
        if cls is None:
            raise ValueError(f"unknown contract {spec!r}; expected one of {', '.join(_BY_NAME)} or an object")
        return cls()
    if isinstance(spec, Mapping):
        unknown = set(spec) - {"type", "params"}
        if unknown or not isinstance(spec.get("type"), str):
            raise ValueError('a contract mapping is {"type": name, "params": {...}}')
        cls = _BY_NAME.get(spec["type"])
        if cls is None:
            raise ValueError(f"unknown contract {spec['type']!r}; expected one of {', '.join(_BY_NAME)}")
        params = spec.get("params") or {}
        if not isinstance(params, Mapping):
            raise ValueError("a contract's params must be a mapping")
        try:
            return cls(**params)
        except TypeError as exc:
            raise ValueError(f"bad params for contract {spec['type']!r}: {exc}") from None
    if isinstance(spec, Contract):
        return spec
    raise TypeError(f"not a contract: {spec!r}")


def auto_resolve_from_env(environ: Mapping[str, str] | None = None) -> AutoResolveContract | None:
    """The contract `INTERLOCK_AUTO_RESOLVE` asks for, or None when it is unset or off.

    `1`/`true`/`yes`/`on` approve; `approve` or `deny` (or another yes/no word) is the
    decision; empty, `0`, `false`, `no` and `off` leave it off. Anything else raises
    `ValueError`: an unattended run must not guess what it was told.
    """
    raw = (os.environ if environ is None else environ).get(AUTO_RESOLVE_ENV, "")
    word = raw.strip().lower()
    if word in ("", "0", "false", "no", "off"):
        return None
    if word in ("1", "true", "yes", "on"):
        return AutoResolveContract()
    if word in APPROVE_WORDS or word in DENY_WORDS:
        return AutoResolveContract(decision=word)
    raise ValueError(f"{AUTO_RESOLVE_ENV}={raw!r}: expected 1, approve or deny (or 0 to switch it off)")


class Contracts:
    """Which contract settles the requests of each agent.

    `default` serves every agent not named in `agents`. The `INTERLOCK_AUTO_RESOLVE`
    environment variable (read from `environ`, by default `os.environ`, when this is made)
    overrides both, so an unattended run never blocks on a person or a terminal.
    """

    def __init__(
        self,
        default: ContractSpec = "broker",
        *,
        agents: Mapping[str, ContractSpec] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.default = contract_from(default)
        self.agents = {name: contract_from(spec) for name, spec in (agents or {}).items()}
        self.override = auto_resolve_from_env(environ)

    def for_agent(self, agent: str | None) -> Contract:
        """The contract for `agent` (None for a request no agent made)."""
        if self.override is not None:
            return self.override
        if agent is not None and agent in self.agents:
            return self.agents[agent]
        return self.default

    @classmethod
    def of(cls, value: Contracts | ContractSpec | None) -> Contracts:
        """`value` as a `Contracts`: None is the default, a single spec serves every agent."""
        if isinstance(value, Contracts):
            return value
        return cls() if value is None else cls(value)
