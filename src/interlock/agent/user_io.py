"""User-IO contracts: how each agent's progress updates (`inform_user`) reach the person.

An update is always recorded first, as an `informed` event in the broker's log, so the
inbox, the event streams and the audit trail show it whichever contract delivers it. A
contract only says where else it goes, chosen per agent as `Contracts` chooses how
questions are settled:

- `broker` (the default, `BrokerUserIO`): nowhere else; the person reads updates in the
  inbox or on a stream.
- `terminal` (`TerminalUserIO`): also printed on a terminal, one line per update, for an
  agent run in an interactive console.
- `log` (`LogUserIO`): also logged (logger `interlock.updates`, level INFO), for unattended
  runs whose output is a log.

`UserIOContracts` chooses one per agent: by name (`"terminal"`), by `{"type": name,
"params": {...}}` as an agent manifest would say it, or as an object. Any object with an
async `deliver(receipt)` method is a user-IO contract.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Protocol, TextIO, TypeAlias, runtime_checkable

__all__ = [
    "BrokerUserIO",
    "LogUserIO",
    "Receipt",
    "TerminalUserIO",
    "UserIOContract",
    "UserIOContracts",
    "UserIOSpec",
    "user_io_from",
]

updates_log = logging.getLogger("interlock.updates")


@dataclass(frozen=True, slots=True)
class Receipt:
    """Proof a progress update was recorded: the id of its `informed` event, and when."""

    id: int
    at: datetime
    message: str
    to: str | None = None
    session: str | None = None
    agent: str | None = None


@runtime_checkable
class UserIOContract(Protocol):
    """Delivers a recorded progress update to the person, beyond the event log."""

    async def deliver(self, receipt: Receipt) -> None: ...


UserIOSpec: TypeAlias = "str | UserIOContract | Mapping[str, Any]"


class BrokerUserIO:
    """The update is in the event log: the inbox and the streams show it. Nothing more."""

    name: ClassVar[str] = "broker"

    async def deliver(self, receipt: Receipt) -> None:
        return None

    def __repr__(self) -> str:
        return "BrokerUserIO()"


class TerminalUserIO:
    """Prints each update on a terminal (`output`, stdout by default, read when printing):
    `[agent] message`, or the message alone when no agent is named."""

    name: ClassVar[str] = "terminal"

    def __init__(self, output: TextIO | None = None) -> None:
        self._output = output

    async def deliver(self, receipt: Receipt) -> None:
        out = self._output if self._output is not None else sys.stdout
        prefix = f"[{receipt.agent}] " if receipt.agent else ""
        out.write(f"{prefix}{receipt.message}\n")
        out.flush()

    def __repr__(self) -> str:
        return "TerminalUserIO()"


class LogUserIO:
    """Logs each update on the `interlock.updates` logger at `level` (INFO by default)."""

    name: ClassVar[str] = "log"

    def __init__(self, level: int | str = logging.INFO) -> None:
        self.level = logging.getLevelName(level) if isinstance(level, str) else level
        if not isinstance(self.level, int):
            raise ValueError(f"unknown log level {level!r}")

    async def deliver(self, receipt: Receipt) -> None:
        updates_log.log(
            self.level,
            "update for %s from %s: %s",
            receipt.to or "(nobody named)",
            receipt.agent or "(no agent)",
            receipt.message,
        )

    def __repr__(self) -> str:
        return f"LogUserIO(level={logging.getLevelName(self.level)!r})"


_BY_NAME: dict[str, type[BrokerUserIO] | type[TerminalUserIO] | type[LogUserIO]] = {
    cls.name: cls for cls in (BrokerUserIO, TerminalUserIO, LogUserIO)
}


def user_io_from(spec: UserIOSpec) -> UserIOContract:
    """A user-IO contract from a name, a `{"type": name, "params": {...}}` mapping, or an object."""
    if isinstance(spec, str):
        cls = _BY_NAME.get(spec)
        if cls is None:
            raise ValueError(f"unknown user-IO contract {spec!r}; expected one of {', '.join(_BY_NAME)} or an object")
        return cls()
    if isinstance(spec, Mapping):
        if set(spec) - {"type", "params"} or not isinstance(spec.get("type"), str):
            raise ValueError('a user-IO contract mapping is {"type": name, "params": {...}}')
        cls = _BY_NAME.get(spec["type"])
        if cls is None:
            raise ValueError(f"unknown user-IO contract {spec['type']!r}; expected one of {', '.join(_BY_NAME)}")
        params = spec.get("params") or {}
        if not isinstance(params, Mapping):
            raise ValueError("a user-IO contract's params must be a mapping")
        try:
            return cls(**params)
        except TypeError as exc:
            raise ValueError(f"bad params for user-IO contract {spec['type']!r}: {exc}") from None
    if isinstance(spec, UserIOContract):
        return spec
    raise TypeError(f"not a user-IO contract: {spec!r}")


class UserIOContracts:
    """Which user-IO contract delivers the updates of each agent; `default` serves every
    agent not named in `agents`."""

    def __init__(self, default: UserIOSpec = "broker", *, agents: Mapping[str, UserIOSpec] | None = None) -> None:
        self.default = user_io_from(default)
        self.agents = {name: user_io_from(spec) for name, spec in (agents or {}).items()}

    def for_agent(self, agent: str | None) -> UserIOContract:
        """The contract for `agent` (None for an update no agent sent)."""
        if agent is not None and agent in self.agents:
            return self.agents[agent]
        return self.default

    @classmethod
    def of(cls, value: UserIOContracts | UserIOSpec | None) -> UserIOContracts:
        """`value` as a `UserIOContracts`: None is the default, a single spec serves every agent."""
        if isinstance(value, UserIOContracts):
            return value
        return cls() if value is None else cls(value)
