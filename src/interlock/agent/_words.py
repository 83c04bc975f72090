"""The yes/no words contracts understand, and matching a typed word to an ask's options."""

from __future__ import annotations

from ..model import Option

APPROVE_WORDS = frozenset({"approve", "approved", "yes", "y", "true", "allow", "ok", "accept", "1"})
DENY_WORDS = frozenset({"deny", "denied", "no", "n", "false", "reject", "refuse", "0"})


def decision_bool(decision: str | bool) -> bool | None:
    """True for an approving word, False for a denying one, None for anything else."""
    if isinstance(decision, bool):
        return decision
    word = decision.strip().lower()
    if word in APPROVE_WORDS:
        return True
    if word in DENY_WORDS:
        return False
    return None


def matching(options: tuple[Option, ...], text: str) -> list[str]:
    """The ids of the options whose id or label is `text`, ignoring case."""
    wanted = text.strip().casefold()
    return [opt.id for opt in options if wanted in (opt.id.casefold(), opt.label.casefold())]
