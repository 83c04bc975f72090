"""Durations written as text, in the one syntax taken wherever a person types one (the
command line's options, a routing file): a number of seconds, or a number with a unit,
`ms`, `s`, `m`, `h` or `d` (`250ms`, `90s`, `1.5h`, `1d`)."""

from __future__ import annotations

import math
import re

__all__ = ["DURATION_SYNTAX", "LONGEST", "SHORTEST", "duration_seconds"]

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
