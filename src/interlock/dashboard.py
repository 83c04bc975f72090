"""The dashboard's figures: what waits, by agent and age, and how fast people answer.

A store counts the figures (`Figures`) over the same indexed ranges as a list of
requests: an SQL store in its own engine, in one statement, so no row of the thousands a
dashboard covers is made in Python; the memory store from the few columns each figure
needs (`Outline`) with `count`. `layout` makes the dashboard of them. The figures cover
the newest requests only when there are more than a dashboard reads
(`Dashboard.capped`): a page, not a report.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NamedTuple

from .model import Status

__all__ = [
    "AGES",
    "AGE_LIMITS",
    "AgentRow",
    "Answered",
    "DASHBOARD_ROWS",
    "DASHBOARD_WINDOW",
    "Dashboard",
    "Figures",
    "NOBODY",
    "Outline",
    "PersonRow",
    "UNKNOWN",
    "count",
    "dashboard_from_dict",
    "dashboard_to_dict",
    "layout",
    "tally",
]

DASHBOARD_WINDOW = timedelta(days=7)
"""How far back the settled figures look."""

DASHBOARD_ROWS = 1000
"""The most pending requests, and the most settled ones, the figures are counted over."""

AGES: tuple[tuple[str, timedelta], ...] = (
    ("under an hour", timedelta(hours=1)),
    ("under a day", timedelta(days=1)),
    ("older", timedelta.max),
)
"""The age columns of the waiting table: a label and the age it stops below."""


class Outline(NamedTuple):
    """What the dashboard counts of one request: its state, whom it is to and which agent
    asked, how long ago it was made, how long it took to settle, and who settled it.
    (Seconds, as a store works them out: no timestamps are made for a count.)"""

    status: Status
    to: str | None
    agent: str | None  # the agent named in its origin, else its requester
    age: float  # seconds since it was made
    took: float | None = None  # seconds from made to settled
    by: str | None = None


@dataclass(frozen=True, slots=True)
class AgentRow:
    """What waits on people for one agent: how many requests of each age (`AGES`), and
    how long the oldest has waited."""

    agent: str
    by_age: tuple[int, ...]
    oldest: timedelta

    @property
    def total(self) -> int:
        return sum(self.by_age)


@dataclass(frozen=True, slots=True)
class PersonRow:
    """One person or team over the window: requests answered (or rejected) and the median
    time to do so, requests that expired unanswered, and requests waiting now."""

    person: str
    answered: int
    median: timedelta | None
    expired: int
    pending: int


@dataclass(frozen=True, slots=True)
class Dashboard:
    """The figures of one dashboard: the totals, what waits per agent, and how each
    person and team answered over the window."""

    pending_count: int
    answered_count: int
    median: timedelta | None  # the median time to answer, over everyone
    expired_count: int
    agents: tuple[AgentRow, ...]
    people: tuple[PersonRow, ...]
    teams: tuple[PersonRow, ...]
    window: timedelta
    capped: bool  # more requests than were counted: the figures are of the newest


class Answered(NamedTuple):
    """How one person, one team or everyone answered: how many, and the median seconds."""

    number: int
    median: float | None


class Figures(NamedTuple):
    """What a store counts for a dashboard, before it is laid out (`layout`): the
    pending requests per agent by age column (`AGES`) with the oldest age, and per
    recipient; the answered (or rejected) ones per answerer, per team and over everyone;
    the expired ones per recipient; and how many rows of each kind were counted."""

    ages: Mapping[str, Sequence[int]]  # agent: requests per age column
    oldest: Mapping[str, float]  # agent: the oldest age, seconds
    waiting: Mapping[str, int]  # recipient: pending requests
    answered: Mapping[str, Answered]  # answerer (else the recipient)
    team_answered: Mapping[str, Answered]  # team (the request's recipient), whoever answered
    everyone: Answered
    expired: Mapping[str, int]  # recipient: requests that expired unanswered
    pending_rows: int
    settled_rows: int


AGE_LIMITS = tuple(upper.total_seconds() if upper != timedelta.max else math.inf for _, upper in AGES)
"""Where each age column stops, in seconds: an age falls in the first column it is below."""

NOBODY = "(nobody named)"
"""The row of requests that name no agent, or no recipient."""

UNKNOWN = "(unknown)"
"""The answerer of a settled request that names neither who settled it nor whom it was to."""


def _answered(seconds: Sequence[float]) -> Answered:
    return Answered(len(seconds), statistics.median(seconds) if seconds else None)


def count(pending: Iterable[Outline], settled: Iterable[Outline], *, teams: Collection[str]) -> Figures:
    """The figures of the pending requests and of those settled in the window, counted
    here (a store that can count in its own engine does the same there: `Store.figures`)."""
    ages: dict[str, list[int]] = {}
    oldest: dict[str, float] = {}
    waiting: Counter[str] = Counter()
    column_of, limits, last = bisect.bisect_right, AGE_LIMITS, len(AGES) - 1
    for _, to, agent, age, _, _ in pending:  # (a thousand rows a page: the loop is kept lean)
        agent = agent or NOBODY
        counts = ages.get(agent)
        if counts is None:
            counts = ages[agent] = [0] * len(AGES)
            oldest[agent] = age
        elif age > oldest[agent]:
            oldest[agent] = age
        counts[min(column_of(limits, age), last)] += 1
        to = to or NOBODY
        waiting[to] = waiting.get(to, 0) + 1

    times: dict[str, list[float]] = defaultdict(list)  # per answerer
    team_times: dict[str, list[float]] = defaultdict(list)
    expired: Counter[str] = Counter()
    everyone: list[float] = []
    answered, rejected, lapsed = Status.ANSWERED, Status.REJECTED, Status.EXPIRED
    settled_rows = 0
    for status, to, _, _, took, by in settled:
        settled_rows += 1
        if (status is answered or status is rejected) and took is not None:
            times[by or to or UNKNOWN].append(took)
            everyone.append(took)
            if to is not None and to in teams:
                team_times[to].append(took)
        elif status is lapsed:
            expired[to or NOBODY] += 1
    return Figures(
        ages=ages,
        oldest=oldest,
        waiting=waiting,
        answered={name: _answered(took) for name, took in times.items()},
        team_answered={name: _answered(took) for name, took in team_times.items()},
        everyone=_answered(everyone),
        expired=expired,
        pending_rows=sum(waiting.values()),
        settled_rows=settled_rows,
    )


def layout(figures: Figures, *, teams: Collection[str], window: timedelta = DASHBOARD_WINDOW) -> Dashboard:
    """The dashboard of `figures`: per agent what waits, busiest first; per person and
    per team (`teams`: the names that are teams) how they answer, by name. A team's row
    counts its requests whoever of its members answered; a person's counts what they
    answered, what expired addressed to them, and what waits for them. `capped` when
    either count reached `DASHBOARD_ROWS`."""
    oldest = figures.oldest
    agents = sorted(
        (AgentRow(agent, tuple(counts), timedelta(seconds=oldest[agent])) for agent, counts in figures.ages.items()),
        key=lambda row: (-row.total, row.agent),
    )
    expired, waiting = figures.expired, figures.waiting
    nobody = Answered(0, None)

    def row(name: str, answered: Mapping[str, Answered]) -> PersonRow:
        took = answered.get(name, nobody)
        return PersonRow(name, took.number, _span(took.median), expired.get(name, 0), waiting.get(name, 0))

    people = sorted((set(figures.answered) | set(expired) | set(waiting)) - set(teams))
    named_teams = sorted(t for t in teams if t in figures.team_answered or t in expired or t in waiting)
    return Dashboard(
        pending_count=sum(waiting.values()),
        answered_count=figures.everyone.number,
        median=_span(figures.everyone.median),
        expired_count=sum(expired.values()),
        agents=tuple(agents),
        people=tuple(row(p, figures.answered) for p in people),
        teams=tuple(row(t, figures.team_answered) for t in named_teams),
        window=window,
        capped=DASHBOARD_ROWS in (figures.pending_rows, figures.settled_rows),
    )


def tally(
    pending: Iterable[Outline],
    settled: Iterable[Outline],
    *,
    teams: Collection[str],
    window: timedelta = DASHBOARD_WINDOW,
) -> Dashboard:
    """The dashboard of the pending requests and of those settled in the window
    (`count`, then `layout`)."""
    return layout(count(pending, settled, teams=teams), teams=teams, window=window)


# -- on the wire ----------------------------------------------------------------------------


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def _span(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)


def _person_to_dict(row: PersonRow) -> dict[str, Any]:
    return {
        "name": row.person,
        "answered": row.answered,
        "median_seconds": _seconds(row.median),
        "expired": row.expired,
        "pending": row.pending,
    }


def _person_from_dict(data: Mapping[str, Any]) -> PersonRow:
    return PersonRow(data["name"], data["answered"], _span(data["median_seconds"]), data["expired"], data["pending"])


def dashboard_to_dict(board: Dashboard) -> dict[str, Any]:
    """The dashboard as the API returns it: durations in seconds."""
    return {
        "pending": board.pending_count,
        "answered": board.answered_count,
        "median_seconds": _seconds(board.median),
        "expired": board.expired_count,
        "ages": [label for label, _ in AGES],
        "agents": [
            {"agent": a.agent, "by_age": list(a.by_age), "oldest_seconds": a.oldest.total_seconds()}
            for a in board.agents
        ],
        "people": [_person_to_dict(p) for p in board.people],
        "teams": [_person_to_dict(t) for t in board.teams],
        "window_seconds": board.window.total_seconds(),
        "capped": board.capped,
    }


def dashboard_from_dict(data: Mapping[str, Any]) -> Dashboard:
    return Dashboard(
        pending_count=data["pending"],
        answered_count=data["answered"],
        median=_span(data["median_seconds"]),
        expired_count=data["expired"],
        agents=tuple(
            AgentRow(a["agent"], tuple(a["by_age"]), timedelta(seconds=a["oldest_seconds"])) for a in data["agents"]
        ),
        people=tuple(_person_from_dict(p) for p in data["people"]),
        teams=tuple(_person_from_dict(t) for t in data["teams"]),
        window=timedelta(seconds=data["window_seconds"]),
        capped=data["capped"],
    )
