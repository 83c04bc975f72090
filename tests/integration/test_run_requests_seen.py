"""What a person sees of a run's requests on its page (`server.common.requests_of_run`):
exactly those they may read, as `can_read` rules it, newest first and each once over
every page, whatever the page's size."""

from __future__ import annotations

import pytest

import interlock
from interlock import Confirm
from interlock.principals import Principal, can_read
from interlock.server.common import requests_of_run

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("limit", [1, 2, 3, 50])
async def test_a_run_s_requests_are_the_person_s_their_teams_and_those_they_made_page_by_page(limit: int) -> None:
    alice = Principal("alice", "human", teams=frozenset({"ops"}))
    async with interlock.connect("memory://") as broker:
        run = await broker.start_run("deployer", run_id="r1", requester="alice")
        made = []
        for i in range(4):
            for to, requester in (("alice", "bot"), ("ops", "bot"), ("bob", "alice"), ("carol", "bot")):
                made.append(await broker.create(Confirm(f"{i}?"), to=to, requester=requester, run=run.id))
            await broker.create(Confirm("Elsewhere?"), to="alice", requester="bot")  # of no run
        seen: list[str] = []
        after = None
        for _ in range(40):  # bounded: 12 readable requests, at least one a page
            page = await requests_of_run(broker, alice, run.id, after=after, limit=limit)  # type: ignore[arg-type]
            assert len(page.items) <= limit
            seen.extend(r.id for r in page.items)
            after = page.next_cursor
            if after is None:
                break
        assert seen == [r.id for r in reversed(made) if can_read(alice, r)]
        assert len(seen) == 12
        everything = await requests_of_run(broker, Principal("local", "admin"), run.id)  # type: ignore[arg-type]
        assert [r.id for r in everything.items] == [r.id for r in reversed(made)]
