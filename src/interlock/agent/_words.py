"""The yes/no words contracts understand (the core's one vocabulary), and matching a typed
word to an ask's options."""

from __future__ import annotations

from ..model import NO_WORDS, YES_WORDS, Option, yes_no

APPROVE_WORDS = YES_WORDS
DENY_WORDS = NO_WORDS
decision_bool = yes_no
"""True for an approving word, False for a denying one, None for anything else."""


def matching(options: tuple[Option, ...], text: str) -> list[str]:
    """The ids of the options whose id or label is `text`, ignoring case."""
    wanted = text.strip().casefold()
    return [opt.id for opt in options if wanted in (opt.id.casefold(), opt.label.casefold())]
