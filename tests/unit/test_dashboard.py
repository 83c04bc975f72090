"""The dashboard's counting, on outlines made by hand, and its cap on a real broker."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

import interlock
from interlock import Text
from interlock.dashboard import (
    DASHBOARD_ROWS,
    Outline,
    dashboard_from_dict,
    dashboard_to_dict,
    tally,
)
from interlock.model import Status
from interlock.server.schemas import DashboardModel


def waiting(agent: str | None, age: timedelta, to: str = "ann") -> Outline:
    return Outline(Status.PENDING, to, agent, age.total_seconds())


def settled(status: Status, took: timedelta, by: str | None, to: str = "ann") -> Outline:
    return Outline(status, to, "bot", 86_400.0, took.total_seconds(), by)


def test_waiting_requests_fall_into_age_columns_per_agent_busiest_first() -> None:
    board = tally(
        [
            waiting("deploy", timedelta(minutes=5)),
            waiting("deploy", timedelta(hours=3)),
            waiting("deploy", timedelta(days=2)),
            waiting("deploy", timedelta(days=9)),
            waiting("review", timedelta(minutes=59, seconds=59)),
            waiting(None, timedelta(hours=1)),  # exactly an hour: no longer "under an hour"
        ],
        [],
        teams=set(),
    )
    assert [(a.agent, a.by_age, a.oldest) for a in board.agents] == [
        ("deploy", (1, 1, 2), timedelta(days=9)),
        ("(nobody named)", (0, 1, 0), timedelta(hours=1)),
        ("review", (1, 0, 0), timedelta(minutes=59, seconds=59)),
    ]
    assert board.pending_count == 6 and board.answered_count == 0 and board.median is None


def test_answer_times_are_a_median_per_answerer_and_a_team_counts_whoever_answered() -> None:
    board = tally(
        [waiting("bot", timedelta(minutes=1), to="ops"), waiting("bot", timedelta(minutes=1), to="ann")],
        [
            settled(Status.ANSWERED, timedelta(minutes=1), "ann"),
            settled(Status.REJECTED, timedelta(minutes=3), "ann"),
            settled(Status.ANSWERED, timedelta(minutes=10), "ann"),
            settled(Status.ANSWERED, timedelta(minutes=4), "bob", to="ops"),
            settled(Status.EXPIRED, timedelta(days=1), None),
            settled(Status.EXPIRED, timedelta(days=1), None, to="ops"),
            settled(Status.CANCELLED, timedelta(minutes=2), "bot"),  # withdrawn: not an answer
        ],
        teams={"ops", "quiet"},
    )
    rows = {p.person: (p.answered, p.median, p.expired, p.pending) for p in board.people}
    assert rows == {
        "ann": (3, timedelta(minutes=3), 1, 1),
        "bob": (1, timedelta(minutes=4), 0, 0),
    }
    assert [(t.person, t.answered, t.median, t.expired, t.pending) for t in board.teams] == [
        ("ops", 1, timedelta(minutes=4), 1, 1)  # a team with nothing to count has no row
    ]
    assert board.answered_count == 4 and board.expired_count == 2
    assert board.median == timedelta(minutes=3, seconds=30)


def test_the_figures_survive_the_wire_and_match_the_published_schema() -> None:
    board = replace(
        tally(
            [waiting("deploy", timedelta(hours=2))],
            [settled(Status.ANSWERED, timedelta(seconds=90), "ann")],
            teams=set(),
        ),
        capped=True,
    )
    wire = dashboard_to_dict(board)
    DashboardModel.model_validate(wire)  # no field the schema lacks, none it wants missing
    assert dashboard_from_dict(wire) == board


@pytest.mark.anyio
async def test_a_dashboard_over_more_requests_than_it_reads_says_it_is_capped() -> None:
    async with interlock.connect("memory://") as broker:
        for _ in range(DASHBOARD_ROWS):
            await broker.create(Text("Go?"), to="ann", agent="bot")
        board = await broker.dashboard(recipient="ann")
        assert board.pending_count == DASHBOARD_ROWS and board.capped
        await broker.create(Text("One more?"), to="ann", agent="bot")
        assert (await broker.dashboard(recipient="ann")).pending_count == DASHBOARD_ROWS  # the newest only
        assert not (await broker.dashboard(recipient="bob")).capped
