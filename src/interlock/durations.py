"""Durations written as text, in the one syntax taken wherever a person types one (the
command line's options, a routing file): a number of seconds, or a number with a unit,
`ms`, `s`, `m`, `h` or `d` (`250ms`, `90s`, `1.5h`, `1d`); and instants written as text,
as RFC 3339 writes them, wherever a client sends one (the API, MCP's tools)."""

from __future__ import annotations

import math
import re
from datetime import datetime

__all__ = ["DURATION_SYNTAX", "LONGEST", "SHORTEST", "NoOffset", "duration_seconds", "instant"]

DURATION_SYNTAX = "seconds, or a number with a unit: 250ms, 30s, 10m, 2h, 1d"
"""The syntax, as the help and the refusals say it."""

SHORTEST = 1e-6
"""The shortest duration taken, in seconds: times are kept to the microsecond, so less
would be kept as no time at all."""
LONGEST = 365 * 1000 * 86400.0
"""The longest duration an operator sets (a thousand years): past it, the dates it leads
to stop being storable."""

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def duration_seconds(text: str) -> float:
    """The seconds `text` says, 0 or more and finite; ValueError, naming the syntax, for
    any other text (a sign, an exponent, another unit). Each caller bounds the result."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration: give {DURATION_SYNTAX}")
    seconds = float(match[1]) * _UNITS[match[2]]
    if not math.isfinite(seconds):  # digits past what a float holds
        raise ValueError(f"{text!r} is longer than any duration kept")
    return seconds


class NoOffset(ValueError):
    """An instant written without its offset (`instant`)."""


def instant(text: object) -> datetime:
    """The instant `text` names: an RFC 3339 date-time with its offset, read as Python
    reads ISO 8601 and kept with that offset. ValueError, saying how to write one, for
    anything else; `NoOffset` for a time without an offset, whose instant would depend on
    whose clock reads it."""
    try:
        if not isinstance(text, str):
            raise ValueError("not text")
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a date and time: give one as text, as RFC 3339 writes it, like "
            "2030-01-31T17:00:00Z or 2030-01-31T12:00:00-05:00"
        ) from None
    if when.utcoffset() is None:
        raise NoOffset(f"{text!r} has no offset: add Z for UTC, or its offset (like +05:30), as RFC 3339 requires")
    return when
