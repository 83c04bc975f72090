"""Follow-up messages: what a person sends to a run that is busy, held until the run can
take it.

A message sent to a run that has not ended is never dropped. What happens to it depends
on where the run is:

- parked on an approval: the words `approve` / `deny` (or `1` / `2`, the options counted
  from one) decide that approval, as if answered in the inbox; any other text is held;
- parked on a question: the text is always held (a question is answered through its own
  structured answer, never by chat);
- working: the text is held as steering.

A held message is a `Followup`: listed on the run, oldest first, until it is delivered
(the agent's adapter takes the queue at its next turn boundary, each message becoming the
next user turn, with a `followup_replayed` event carrying its id and verbatim text) or
withdrawn by the person. A run holds at most `MAX_QUEUED_FOLLOWUPS` at a time; past that
a send holds nothing and says so. When a run ends with messages still held, they stay
listed on it, read-only, so a client can send them again to a new run.

This module is pure data: the broker decides, the stores keep the queue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

__all__ = [
    "FOLLOWUP_EVENTS",
    "MAX_FOLLOWUP_LENGTH",
    "MAX_QUEUED_FOLLOWUPS",
    "Followup",
    "Sent",
    "approval_word",
    "followup_event_data",
    "followup_from_dict",
    "followup_to_dict",
]

MAX_QUEUED_FOLLOWUPS = 20
"""How many messages a run holds at a time, by default."""

MAX_FOLLOWUP_LENGTH = 32_000
"""The longest message a run holds, in characters."""

FOLLOWUP_EVENTS: frozenset[str] = frozenset({"followup_queued", "followup_withdrawn", "followup_replayed"})
"""The events about a run's held messages, on the run's event stream: held, withdrawn by
the person, delivered to the agent as its next user turn."""

_APPROVE = frozenset({"approve", "1"})
_DENY = frozenset({"deny", "2"})


@dataclass(frozen=True, slots=True)
class Followup:
    """One message held for a run, until its agent takes it as its next user turn."""

    id: str
    run: str
    text: str
    queued_at: datetime
    by: str | None = None
    """Who sent it."""


@dataclass(frozen=True, slots=True)
class Sent:
    """What sending a message to a busy run did: exactly one of these, or neither.

    - `resolved`: the message decided the run's pending approval (this request id);
    - `followup`: the message is held, to be delivered at the run's next turn boundary;
    - neither: nothing was held (the run holds as many messages as it may); send it again
      once the run is done.
    """

    run: str
    resolved: str | None = None
    followup: Followup | None = None

    @property
    def outcome(self) -> Literal["resolved", "queued", "full"]:
        if self.resolved is not None:
            return "resolved"
        return "queued" if self.followup is not None else "full"


def approval_word(text: str) -> bool | None:
    """True for a message that approves (`approve`, `1`), False for one that denies (`deny`,
    `2`), None for any other text: case and surrounding blanks aside, the whole message."""
    word = text.strip().casefold()
    if word in _APPROVE:
        return True
    if word in _DENY:
        return False
    return None


def followup_to_dict(followup: Followup) -> dict[str, Any]:
    """A held message as a run lists it (`queuedFollowups`, Novo's names): id, verbatim
    text, when it was held, and who sent it."""
    return {"id": followup.id, "text": followup.text, "queuedAt": followup.queued_at.isoformat(), "by": followup.by}


def followup_from_dict(data: Mapping[str, Any], run: str) -> Followup:
    """A held message of `run` from its listed shape."""
    return Followup(str(data["id"]), run, str(data["text"]), datetime.fromisoformat(data["queuedAt"]), data.get("by"))


def followup_event_data(followup: Followup, *, agent: str, session: str | None, to: str | None) -> dict[str, Any]:
    """The data of a `followup_*` event: the run, whom the message is for (`to`: the agent
    that started the run) and from (`by`), its id and verbatim text."""
    return {
        "run": followup.run,
        "agent": agent,
        "session": session,
        "to": to,
        "by": followup.by,
        "followup_id": followup.id,
        "text": followup.text,
        "queued_at": followup.queued_at.isoformat(),
    }
