"""Resolution contracts: how a request made for an agent gets settled, and
the choice of one per agent.

Whichever contract settles it, a request is first recorded by the broker, so the inbox,
the event log and the audit trail show what was asked, what was decided and by whom. A
contract only decides where the answer comes from:

- `broker` (the default, `BrokerContract`): the request waits in the person's inbox and
  any surface (CLI, HTTP, a chat bridge) answers it; the call waits.
- `auto_resolve` (`AutoResolveContract`): answered at once with a configured decision
  (`approve` by default), for unattended runs and benchmarks. Setting the environment
  variable `INTERLOCK_AUTO_RESOLVE` (`1`, `approve` or `deny`) switches it on for every
  agent, whatever else is configured, so a run can be made unattended from outside.
- `terminal` (`TerminalContract`, in `interlock.agent.terminal`): the request is put on
  a terminal and the typed line answers it; choices are matched case-insensitively and
  other text is passed through. An answer that arrives from the inbox first still counts.

`Contracts` chooses one per agent: by name (`"auto_resolve"`), by `{"type": name,
"params": {...}}` as an agent manifest would say it, or as an object. Any object with an
async `settle(broker, request)` method is a contract.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, TypeAlias, runtime_checkable

from ..broker import Broker
from ..errors import InvalidAnswer
from ..model import Answers, Ask, Request, Response, yes_no
from .terminal import TerminalContract

__all__ = [
    "AUTO_RESOLVE_ENV",
    "AutoResolveContract",
    "BrokerContract",
    "Contract",
    "ContractSpec",
    "Contracts",
    "auto_resolve_from_env",
    "contract_from",
]

AUTO_RESOLVE_ENV = "INTERLOCK_AUTO_RESOLVE"


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


class AutoResolveContract:
    """Answers every request at once with `decision`, through the broker (`via="auto_resolve"`).

    How the decision answers each ask: a confirm is true only for an approving word
    (`approve`, `yes`, ...), so anything else answers no; a choice takes the option whose
    id or label is the decision (ignoring case), else the option named by a yes/no word
    matching the decision, else (for a decision that does not refuse) the decision itself
    when other answers are allowed, else the first option; a multi-choice takes the
    matching options, else none for a refusing decision (`deny`, where none may be
    ticked), else the first; a refusing decision picks no option of a choice; text
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
        decision = self.decision
        text = decision if isinstance(decision, str) else ("approve" if decision else "deny")
        try:
            value = ask.from_decision(text)
        except InvalidAnswer as exc:
            raise _NoAnswer(f"auto_resolve cannot fill {ask.type} {ask.id!r}: {exc}") from None
        if value is None:
            raise _NoAnswer(f"auto_resolve leaves the optional {ask.type} {ask.id!r} out")
        return value


# -- choosing a contract -------------------------------------------------------------------

_BY_NAME: dict[str, type[BrokerContract] | type[AutoResolveContract] | type[TerminalContract]] = {
    "broker": BrokerContract,
    "registry": BrokerContract,  # MAS's name for the same behaviour, accepted as is
    "auto_resolve": AutoResolveContract,
    "terminal": TerminalContract,
}
_OFFERED = ("broker", "auto_resolve", "terminal")  # the names an error suggests


def contract_from(spec: ContractSpec) -> Contract:
    """A contract from a name, a `{"type": name, "params": {...}}` mapping, or an object."""
    if isinstance(spec, str):
        cls = _BY_NAME.get(spec)
        if cls is None:
            raise ValueError(f"unknown contract {spec!r}; expected one of {', '.join(_OFFERED)} or an object")
        return cls()
    if isinstance(spec, Mapping):
        unknown = set(spec) - {"type", "params"}
        if unknown or not isinstance(spec.get("type"), str):
            raise ValueError('a contract mapping is {"type": name, "params": {...}}')
        cls = _BY_NAME.get(spec["type"])
        if cls is None:
            raise ValueError(f"unknown contract {spec['type']!r}; expected one of {', '.join(_OFFERED)}")
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
    if yes_no(word) is not None:
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
