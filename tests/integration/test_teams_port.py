"""Teams, claims, views and shared settings in the store ports, checked the same way on
every implementation (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from interlock import Text
from interlock.model import Origin, Request, Response, Status, build_request
from interlock.principals import Principal
from interlock.store import EventQuery, Query, Store

pytestmark = pytest.mark.anyio

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def ask(to: str = "ops", requester: str = "bot") -> Request:
    return build_request(Text("Deploy?"), to=to, requester=requester, origin=Origin(session="s1"))


async def people(store: Store, *names: str) -> None:
    for name in names:
        await store.save_principal(Principal(name, "human"))


async def test_a_team_keeps_its_members_and_is_a_principal_of_kind_team(store: Store) -> None:
    await people(store, "alice", "bob", "carol")
    await store.save_team("ops", ["alice", "bob"])
    await store.save_team("ops", ["bob"])  # adding again changes nothing
    await store.save_team("sre", ["alice"])
    assert await store.team_members("ops") == ["alice", "bob"]
    assert await store.teams_of("alice") == {"ops", "sre"}
    assert await store.teams_of("carol") == frozenset()
    assert await store.get_principal("ops") == Principal("ops", "team")
    assert [p.name for p in await store.list_principals() if p.kind == "team"] == ["ops", "sre"]
    assert await store.remove_team_members("ops", ["bob", "carol"]) == 1
    assert await store.team_members("ops") == ["alice"]
    assert await store.delete_team("sre") is True
    assert await store.delete_team("sre") is False
    assert await store.team_members("sre") is None
    assert await store.teams_of("alice") == {"ops"}


async def test_leaving_a_team_is_an_event_naming_who_left(store: Store) -> None:
    await people(store, "alice", "bob", "carol")
    await store.save_team("ops", ["alice", "bob"])
    await store.save_team("sre", ["alice", "carol"])
    start = await store.last_event_id()
    assert await store.remove_team_members("ops", ["carol"]) == 0  # no one left: no event
    assert await store.remove_team_members("ops", ["bob", "bob", "carol"]) == 1
    assert await store.delete_team("sre") is True
    assert await store.delete_team("sre") is False
    left = [(e.type, dict(e.data)) for e in await store.events(after=start)]
    assert left == [
        ("team_left", {"team": "ops", "principals": ["bob"]}),
        ("team_left", {"team": "sre", "principals": ["alice", "carol"]}),
    ]


async def test_a_team_refuses_names_of_people_and_members_who_are_no_people(store: Store) -> None:
    await people(store, "alice")
    await store.save_principal(Principal("bot", "agent", owner="alice"))
    with pytest.raises(ValueError, match="'alice' is a person or an agent"):
        await store.save_team("alice", [])
    with pytest.raises(ValueError, match="'bot' is no person"):
        await store.save_team("ops", ["bot"])
    with pytest.raises(ValueError, match="'zed' is no person"):
        await store.save_team("ops", ["alice", "zed"])
    assert await store.team_members("ops") is None  # nothing changed
    await store.save_team("ops", ["alice"])
    with pytest.raises(ValueError, match="'ops' is a team"):
        await store.save_principal(Principal("ops", "human"))


async def test_a_member_s_list_holds_their_own_and_their_teams_requests(store: Store) -> None:
    mine, ops, other = ask(to="alice"), ask(to="ops"), ask(to="sre")
    for request in (mine, ops, other):
        await store.insert(request)
    found = (await store.list(Query(recipient="alice", teams=("ops",), order="asc"))).items
    assert [r.id for r in found] == [mine.id, ops.id]
    assert [r.id for r in (await store.list(Query(recipient="alice", order="asc"))).items] == [mine.id]
    events = await store.find_events(EventQuery(involving="alice", teams=("ops",)))
    assert [e.request_id for e in events] == [mine.id, ops.id]
    events = await store.find_events(EventQuery(involving="alice", teams=("ops",), session="s1"))
    assert [e.request_id for e in events] == [mine.id, ops.id]
    # One she asked of her own team: once, though both to her team and from her.
    asked = ask(to="ops", requester="alice")
    await store.insert(asked)
    events = await store.find_events(EventQuery(involving="alice", teams=("ops",)))
    assert [e.request_id for e in events] == [mine.id, ops.id, asked.id]
    # A team named twice, or her own name among them: each event once all the same.
    events = await store.find_events(EventQuery(involving="alice", teams=("ops", "ops", "alice")))
    assert [e.request_id for e in events] == [mine.id, ops.id, asked.id]


async def test_one_member_claims_a_pending_request_and_the_claim_is_on_its_timeline(store: Store) -> None:
    request = ask()
    await store.insert(request)
    claim = await store.claim(request.id, "alice", NOW)
    assert claim is not None and (claim.by, claim.at) == ("alice", NOW)
    again = await store.claim(request.id, "bob", NOW + timedelta(seconds=1))
    assert again == claim  # the first claim stands
    assert await store.claims([request.id, "req_none"]) == {request.id: claim}
    assert await store.unclaim(request.id, "bob", NOW) is None  # not bob's to give up
    assert await store.unclaim(request.id, "alice", NOW + timedelta(seconds=2)) == claim
    taken = await store.claim(request.id, "bob", NOW + timedelta(seconds=3))
    assert taken is not None and taken.by == "bob"
    events = await store.find_events(EventQuery(request=request.id))
    assert [(e.type, dict(e.data)) for e in events] == [
        ("created", {}),
        ("claimed", {"by": "alice"}),
        ("unclaimed", {"by": "alice"}),
        ("claimed", {"by": "bob"}),
    ]
    assert all(e.request is not None and e.request.id == request.id for e in events)


async def test_the_claims_seen_by_a_name_are_those_of_requests_to_or_from_it_or_to_its_teams(store: Store) -> None:
    """`claims(..., involving=, teams=)` keeps the claims a caller may read from whom each
    request is to and from (the server's `GET /claims` lists them so)."""
    to_ops, to_dev, from_bob, to_bob = ask("ops"), ask("dev"), ask("dev", requester="bob"), ask("bob", "bot")
    for request in (to_ops, to_dev, from_bob, to_bob):
        await store.insert(request)
        await store.claim(request.id, "alice", NOW)
    ids = [to_ops.id, to_dev.id, from_bob.id, to_bob.id, "req_none"]
    assert set(await store.claims(ids)) == {to_ops.id, to_dev.id, from_bob.id, to_bob.id}
    assert set(await store.claims(ids, involving="bob", teams=["ops"])) == {to_ops.id, from_bob.id, to_bob.id}
    assert set(await store.claims(ids, involving="bob")) == {from_bob.id, to_bob.id}
    assert await store.claims(ids, involving="carol", teams=["qa"]) == {}


async def test_a_settled_request_cannot_be_claimed_but_keeps_its_claim(store: Store) -> None:
    free, held = ask(), ask()
    for request in (free, held):
        await store.insert(request)
    claim = await store.claim(held.id, "alice", NOW)
    for request in (free, held):
        await store.settle(request.settle(Status.ANSWERED, Response(NOW, {"a1": "yes"}, by="bob", via="api")))
    assert await store.claim(free.id, "alice", NOW) is None
    assert await store.claim(held.id, "bob", NOW) == claim
    assert await store.unclaim(held.id, None, NOW) is None
    assert await store.claim("req_unknown", "alice", NOW) is None


async def test_a_view_is_recorded_once_per_person(store: Store) -> None:
    request = ask()
    await store.insert(request)
    assert await store.note_viewed(request.id, "alice", NOW) is True
    assert await store.note_viewed(request.id, "alice", NOW) is False
    assert await store.note_viewed(request.id, "bob", NOW) is True
    assert await store.note_viewed("req_unknown", "bob", NOW) is False
    events = await store.find_events(EventQuery(request=request.id))
    assert [(e.type, dict(e.data)) for e in events] == [
        ("created", {}),
        ("viewed", {"by": "alice"}),
        ("viewed", {"by": "bob"}),
    ]


async def test_a_shared_setting_reads_back_as_saved_and_is_replaced_whole(store: Store) -> None:
    assert await store.load_setting("routing") is None
    doc = {"channels": {"hook": {"type": "webhook", "url": "http://x.test"}}, "max_attempts": 3}
    await store.save_setting("routing", doc)
    assert await store.load_setting("routing") == doc
    await store.save_setting("routing", {"max_attempts": 4})
    assert await store.load_setting("routing") == {"max_attempts": 4}


@pytest.mark.parametrize("url", ["memory://", "sqlite"])
async def test_leaving_a_team_reaches_those_following_the_log_at_once(url: str, tmp_path: Any) -> None:
    import anyio

    import interlock

    async with interlock.connect(url if url == "memory://" else f"sqlite:///{tmp_path / 'left.db'}") as broker:
        for name in ("alice", "bob"):
            await broker.save_principal(Principal(name, "human"))
        await broker.add_team_members("ops", ["alice", "bob"])
        after = await broker.last_event_id()
        seen = []

        async def follow() -> None:
            async for event in broker.events(after=after, follow=True):
                seen.append(event.type)
                return

        with anyio.fail_after(2):  # the memory store never polls: only a wake-up brings it
            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                await anyio.wait_all_tasks_blocked()
                assert await broker.remove_team_member("ops", "bob")
    assert seen == ["team_left"]
