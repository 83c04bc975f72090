"""The store ports, checked the same way on every implementation: requests and events
(`RequestStore`), principals, tokens and web sessions (`PrincipalStore`), runs (`RunStore`)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from interlock import Closed, Forbidden, Text
from interlock.dashboard import DASHBOARD_ROWS, Outline, count
from interlock.model import (
    IssuedGrant,
    Origin,
    Request,
    Response,
    Run,
    RunStatus,
    Status,
    build_request,
    new_id,
    run_event_data,
)
from interlock.principals import Principal, hash_token, issue_session, issue_token
from interlock.store import (
    EventQuery,
    GrantQuery,
    PrincipalStore,
    Query,
    RequestStore,
    RunClaim,
    RunQuery,
    RunStore,
    Store,
)

pytestmark = pytest.mark.anyio


def ask(*, to: str = "alice", requester: str = "bot", channel: str | None = None, **fields: object) -> Request:
    return build_request(
        Text("Name?"), to=to, requester=requester, origin=Origin(channel=channel, session="s1", run="r1"), **fields
    )  # type: ignore[arg-type]


def answered(request: Request, text: str, *, by: str = "alice") -> Request:
    return request.settle(Status.ANSWERED, Response(datetime.now(UTC), {"text": text}, by=by, via="api"))


# -- requests and events -------------------------------------------------------------------


async def test_a_store_is_each_port(store: Store) -> None:
    requests: RequestStore = store
    principals: PrincipalStore = store
    runs: RunStore = store
    assert requests is principals is runs


async def test_an_inserted_request_reads_back_and_makes_a_created_event(store: RequestStore) -> None:
    request = ask()
    stored, created = await store.insert(request)
    assert created and stored == request
    assert await store.get(request.id) == request
    assert await store.get("req_unknown") is None
    (event,) = await store.events()
    assert (event.type, event.request_id, event.request) == ("created", request.id, request)
    assert await store.last_event_id() == event.id


async def test_an_idempotency_key_stores_the_first_request_only(store: RequestStore) -> None:
    first, created = await store.insert(ask(idempotency_key="k"))
    again, created_again = await store.insert(ask(idempotency_key="k"))
    other, created_other = await store.insert(ask(idempotency_key="k", requester="other-bot"))
    assert created and not created_again and again == first
    assert created_other and other.id != first.id


async def test_a_request_is_found_by_its_requester_and_idempotency_key_as_stored_now(store: RequestStore) -> None:
    first, _ = await store.insert(ask(idempotency_key="k"))
    theirs, _ = await store.insert(ask(idempotency_key="k", requester="other-bot"))
    await store.insert(ask())
    assert await store.get_by_key("bot", "k") == first
    assert await store.get_by_key("other-bot", "k") == theirs
    assert await store.get_by_key("bot", "unused") is None
    assert await store.get_by_key(None, "k") is None
    answer = await store.settle(answered(first, "Ada"))
    assert answer is not None and await store.get_by_key("bot", "k") == answer
    nobody, _ = await store.insert(ask(idempotency_key="k", requester=None))  # type: ignore[arg-type]
    assert await store.get_by_key(None, "k") == nobody


async def test_the_first_settlement_wins_and_makes_one_event(store: RequestStore) -> None:
    request, _ = await store.insert(ask())
    assert await store.settle(answered(request, "Ada")) is not None
    assert await store.settle(answered(request, "Bob")) is None
    settled = await store.get(request.id)
    assert settled is not None and settled.status is Status.ANSWERED and settled.answer == "Ada"
    assert [e.type for e in await store.events()] == ["created", "answered"]
    created = (await store.events())[0].request
    assert created is not None and created.status is Status.PENDING


async def test_an_answer_is_consumed_once(store: RequestStore) -> None:
    request, _ = await store.insert(ask(kind="approval"))
    now = datetime.now(UTC)
    assert not await store.consume(request.id, "bot", now)  # pending: nothing to consume
    await store.settle(answered(request, "ok"))
    assert await store.consume(request.id, "bot", now)
    assert not await store.consume(request.id, "bot", now)
    assert not await store.consume("req_unknown", "bot", now)
    assert (await store.events())[-1].type == "consumed"


async def test_a_detached_or_pending_request_is_released_once(store: RequestStore) -> None:
    now = datetime.now(UTC)
    detached, _ = await store.insert(replace(ask(), detached=True))
    await store.settle(answered(detached, "Ada"))
    assert await store.release(detached.id, now)  # answered, but created detached: dropped
    assert not await store.release(detached.id, now)  # once
    plain, _ = await store.insert(ask())
    assert await store.release(plain.id, now)  # pending: dropped
    assert not await store.release(plain.id, now)
    settled, _ = await store.insert(ask())
    await store.settle(answered(settled, "Bo"))
    assert not await store.release(settled.id, now)  # settled and not detached: not the releaser's
    assert not await store.release("req_unknown", now)
    assert (await store.get(detached.id)).status is Status.ANSWERED  # type: ignore[union-attr]  # kept


async def test_overdue_requests_settle_and_the_next_expiry_is_known(store: RequestStore) -> None:
    now = datetime.now(UTC)
    soon, _ = await store.insert(ask(expires_at=now + timedelta(seconds=1)))
    later, _ = await store.insert(ask(expires_at=now + timedelta(hours=1)))
    assert await store.next_expiry() == soon.expires_at
    expired = await store.settle_pending(Status.EXPIRED, Response(now), due=now + timedelta(seconds=2))
    assert [r.id for r in expired] == [soon.id]
    assert await store.next_expiry() == later.expires_at


@pytest.mark.parametrize(
    "deadline",
    [
        datetime(2112, 9, 17, 23, 53, 47, 370495, tzinfo=UTC),  # 2**52 - 1 microseconds from 1970:
        datetime(2112, 9, 17, 23, 53, 47, 370496, tzinfo=UTC),  # SQLite reads these two two ways
        datetime(9000, 1, 1, 0, 0, 0, 123457, tzinfo=UTC),
        datetime.max.replace(tzinfo=UTC),
    ],
    ids=["last-read-through-a-float", "first-counted-out", "far-off", "the-last-instant"],
)
async def test_a_far_deadline_is_kept_to_the_microsecond(store: RequestStore, deadline: datetime) -> None:
    # SQLite counted its time columns through a float: a deadline in the year 9000 came back
    # 13 microseconds early, and the last instant there is (a "never" some clients give)
    # came back as the year 10000, which no datetime holds: the expiry loop failed on it.
    far, _ = await store.insert(ask(expires_at=deadline))
    assert await store.next_expiry() == deadline
    assert (await store.get(far.id)).expires_at == deadline  # type: ignore[union-attr]
    now = datetime.now(UTC)
    assert await store.settle_pending(Status.EXPIRED, Response(now), due=now) == []


async def test_a_closed_channel_cancels_its_requests_and_refuses_new_ones_until_reopened(store: RequestStore) -> None:
    inside, _ = await store.insert(ask(channel="c"))
    outside, _ = await store.insert(ask(channel="d"))
    closing = Response(datetime.now(UTC), cause="closed")
    assert [r.id for r in await store.close_channel("c", closing)] == [inside.id]
    with pytest.raises(Closed):
        await store.insert(ask(channel="c"))
    assert (await store.get(outside.id)) == outside
    assert await store.reopen_channel("c")
    assert not await store.reopen_channel("c")
    await store.insert(ask(channel="c"))


async def test_a_list_filters_and_pages_by_id(store: RequestStore) -> None:
    mine = [(await store.insert(ask()))[0] for _ in range(3)]
    await store.insert(ask(to="bob"))
    first = (await store.list(Query(recipient="alice", limit=2))).items
    assert [r.id for r in first] == [mine[2].id, mine[1].id]
    rest = (await store.list(Query(recipient="alice", after=first[-1].id, limit=2))).items
    assert [r.id for r in rest] == [mine[0].id]
    oldest = (await store.list(Query(recipient="alice", order="asc", limit=1, status=Status.PENDING))).items
    assert [r.id for r in oldest] == [mine[0].id]


async def test_events_are_found_by_who_and_by_request(store: RequestStore) -> None:
    theirs, _ = await store.insert(ask(to="bob", requester="bob-bot"))
    mine, _ = await store.insert(ask())
    await store.settle(answered(mine, "Ada"))
    involving = await store.find_events(EventQuery(involving="alice"))
    assert [(e.type, e.request_id) for e in involving] == [("created", mine.id), ("answered", mine.id)]
    # Asked by them: to someone else, or to themselves (once, though to and from them).
    asked, _ = await store.insert(ask(to="bob", requester="alice"))
    own, _ = await store.insert(ask(to="alice", requester="alice"))
    involving = await store.find_events(EventQuery(involving="alice"))
    assert [e.request_id for e in involving] == [mine.id, mine.id, asked.id, own.id]
    assert [e.request_id for e in await store.find_events(EventQuery(involving="alice", limit=3))] == [
        mine.id,
        mine.id,
        asked.id,
    ]
    about = await store.find_events(EventQuery(request=theirs.id))
    assert [e.request_id for e in about] == [theirs.id]
    changes = await store.changes()
    assert [(c[1], c[2]) for c in changes][:3] == [("created", theirs.id), ("created", mine.id), ("answered", mine.id)]


def outline_of(r: Request, now: datetime) -> Outline:
    """What the dashboard counts of `r`, worked out from the request itself."""
    response = r.response
    took, by = (None, None) if response is None else ((response.at - r.created_at).total_seconds(), response.by)
    return Outline(r.status, r.to, r.origin.agent or r.requester, (now - r.created_at).total_seconds(), took, by)


def rounded(outlines: Sequence[Outline]) -> list[Outline]:
    """Outlines with their seconds to the microsecond (a database works them out in floats)."""
    return [o._replace(age=round(o.age, 6), took=None if o.took is None else round(o.took, 6)) for o in outlines]


async def test_the_dashboard_figures_a_store_counts_are_those_counted_from_its_outlines(store: RequestStore) -> None:
    # A mix drawn at random: ages on and around each age column's edge, answerers and
    # recipients missing, teams, odd and even numbers of answers per person.
    rng = random.Random(20261202)
    now = datetime.now(UTC).replace(microsecond=0)  # whole seconds: an age on an edge is exactly on it
    edges = (30.0, 3599.5, 3600.0, 7200.0, 86_399.0, 86_400.0, 90_000.0, 500_000.0)
    for i in range(150):
        # on an edge or past it; the first few pending, each on an edge
        age = timedelta(seconds=edges[i] if i < len(edges) else rng.choice(edges) + rng.choice([0.0, rng.random()]))
        agent = rng.choice(["deployer", "reviewer", None])
        request = build_request(
            Text("Go?"),
            to=rng.choice(["alice", "bob", "ops", None]),
            requester=rng.choice(["bot", "cron"]),
            origin=Origin(agent=agent) if agent else None,
            now=now - age,
        )
        await store.insert(request)
        outcomes = [Status.PENDING, Status.ANSWERED, Status.ANSWERED, Status.REJECTED, Status.EXPIRED]
        status = Status.PENDING if i < len(edges) else rng.choice(outcomes)
        if status is not Status.PENDING:
            answers = {"text": "ok"} if status is Status.ANSWERED else {}
            by = rng.choice(["alice", "carol", None])
            at = request.created_at + age * rng.random()
            await store.settle(request.settle(status, Response(at, answers, by=by, via="api")))
    week = now - timedelta(days=7)
    for recipient, teams in ((None, ("ops",)), ("alice", ("ops",)), ("bob", ()), ("nobody", ())):
        mine = Query(recipient=recipient, teams=teams if recipient else (), limit=DASHBOARD_ROWS)
        pending, settled = replace(mine, status=Status.PENDING), replace(mine, settled=True, since=week)
        figures = await store.figures(pending, settled, now, set(teams))
        expected = count(await store.outlines(pending, now), await store.outlines(settled, now), teams=set(teams))
        assert figures == expected, recipient
        for read in (pending, settled):  # each outline says what its request says
            assert rounded(await store.outlines(read, now)) == rounded(
                [outline_of(r, now) for r in (await store.list(read)).items]
            ), (recipient, read)
    assert figures.pending_rows == figures.settled_rows == 0  # nobody's: nothing counted
    capped = Query(status=Status.PENDING, limit=3)
    assert (await store.figures(capped, replace(capped, status=None, settled=True), now, ())).pending_rows == 3


# -- principals, tokens and web sessions ---------------------------------------------------


async def test_principals_are_kept_and_changed_by_name(store: PrincipalStore) -> None:
    await store.save_principal(Principal("alice", "human"))
    await store.save_principal(Principal("bot", "agent", owner="alice"))
    await store.save_principal(Principal("bob", "human"))
    await store.save_principal(Principal("bot", "agent", owner="bob"))
    assert await store.get_principal("bot") == Principal("bot", "agent", owner="bob")
    assert await store.get_principal("nobody") is None
    assert [p.name for p in await store.list_principals()] == ["alice", "bob", "bot"]


async def test_a_token_is_live_until_revoked(store: PrincipalStore) -> None:
    await store.save_principal(Principal("carol", "human"))
    await store.save_principal(Principal("bot", "agent", owner="carol"))
    token = issue_token("bot", datetime.now(UTC))
    await store.save_token(token)
    with pytest.raises(ValueError, match="no principal"):
        await store.save_token(issue_token("nobody", datetime.now(UTC)))
    live = await store.live_token(hash_token(token.secret))
    assert live is not None and live.id == token.id and live.principal.name == "bot"
    later = issue_token("bot", datetime.now(UTC) + timedelta(seconds=1))
    await store.save_token(later)
    carols = issue_token("carol", datetime.now(UTC))
    await store.save_token(carols)
    listed = await store.list_tokens()  # by principal, then oldest first
    assert [(t.principal, t.id) for t in listed] == [("bot", token.id), ("bot", later.id), ("carol", carols.id)]
    assert listed[0].created_at == token.created_at
    assert await store.revoke_tokens(token_id=token.id) == 1
    assert await store.live_token(hash_token(token.secret)) is None
    assert [t.id for t in await store.list_tokens()] == [later.id, carols.id]
    assert await store.revoke_tokens(principal="bot") == 1


async def test_a_web_session_lasts_until_it_ends_expires_or_its_token_is_revoked(store: PrincipalStore) -> None:
    now = datetime.now(UTC)
    await store.save_principal(Principal("alice", "human"))
    token = issue_token("alice", now)
    await store.save_token(token)
    assert await store.start_session(hash_token("il_nothing"), issue_session(now)) is None
    session = issue_session(now, timedelta(hours=1))
    started = await store.start_session(token.hash, session)
    assert started is not None and started.id == session.id and started.principal.name == "alice"
    assert await store.get_session(session.hash, now) == started
    assert await store.get_session(session.hash, now + timedelta(hours=2)) is None
    ended = await store.end_session(session.hash)
    assert ended is not None and ended.id == session.id
    assert await store.get_session(session.hash, now) is None

    again = issue_session(now, timedelta(hours=1))
    assert await store.start_session(token.hash, again) is not None
    await store.revoke_tokens(token_id=token.id)
    assert await store.get_session(again.hash, now) is None


async def test_a_token_made_for_one_web_session_goes_with_it_when_signed_out_or_run_out(
    store: PrincipalStore,
) -> None:
    # A sign-in link opens its session with a token of its own, whose secret nobody keeps:
    # once the session is over it is of no use, and each sign-in would leave one more.
    now = datetime.now(UTC)
    await store.save_principal(Principal("alice", "human"))
    pasted = issue_token("alice", now)  # one she signs in with, and keeps using
    signed_out = issue_token("alice", now, for_session=True)
    ran_out = issue_token("alice", now, for_session=True)
    for token in (pasted, signed_out, ran_out):
        await store.save_token(token)
    sessions = {}
    hour, five_minutes = timedelta(hours=1), timedelta(minutes=5)
    for token, lasts in ((pasted, hour), (signed_out, hour), (ran_out, five_minutes)):
        sessions[token.id] = issue_session(now, lasts)
        assert await store.start_session(token.hash, sessions[token.id]) is not None
    assert {t.id: t.for_session for t in await store.list_tokens()} == {  # listed apart (`token list`)
        pasted.id: False,
        signed_out.id: True,
        ran_out.id: True,
    }

    assert await store.end_session(sessions[signed_out.id].hash) is not None
    assert {t.id for t in await store.list_tokens()} == {pasted.id, ran_out.id}
    assert await store.revoke_tokens(token_id=signed_out.id) == 0  # gone, not just revoked

    # The next sign-in after the short session ran out purges it, and its token with it.
    later = issue_session(now + timedelta(minutes=10), timedelta(hours=1))
    assert await store.start_session(pasted.hash, later) is not None
    assert {t.id for t in await store.list_tokens()} == {pasted.id}
    assert await store.revoke_tokens(token_id=ran_out.id) == 0

    # A token someone pasted outlives its sessions.
    assert await store.end_session(sessions[pasted.id].hash) is not None
    assert await store.end_session(later.hash) is not None
    assert [t.id for t in await store.list_tokens()] == [pasted.id]


# -- runs ------------------------------------------------------------------------------------


def new_run(run_id: str = "r1", *, agent: str = "deployer", requester: str = "bot") -> Run:
    now = datetime.now(UTC)
    return Run(run_id, agent, now, now, session="s1", requester=requester, max_duration=timedelta(hours=2))


async def park(store: RunStore, run_id: str, waiting_on: list[str], *, hours: float = 1) -> Run | None:
    now = datetime.now(UTC)
    deadline = now + timedelta(hours=hours)
    return await store.park_run(
        run_id,
        state={"history": ["a", "b"], "n": 1.5},
        waiting_on=waiting_on,
        status=RunStatus.WAITING_FOR_INPUT,
        expires_at=deadline,
        at=now,
    )


async def test_an_inserted_run_reads_back_once_and_makes_a_started_event(store: Store) -> None:
    run = new_run()
    stored, created = await store.insert_run(run)
    assert created and stored == run
    again, created_again = await store.insert_run(new_run(agent="other"))
    assert not created_again and again == run
    assert await store.get_run("r1") == run
    assert await store.get_run("r-unknown") is None
    (event,) = await store.find_events(EventQuery(run="r1"))
    assert event.type == "run_started" and event.data["run"] == "r1" and "state" not in event.data


async def test_an_exclusive_run_is_stored_only_while_no_run_of_its_agent_on_its_session_has_not_ended(
    store: Store,
) -> None:
    await store.insert_run(new_run("r1"))  # not exclusive
    newer, created = await store.insert_run(new_run("r2"))  # not exclusive either: both stored
    assert created
    met, created = await store.insert_run(new_run("r3"), exclusive=True)
    assert not created and met == newer  # the newest run in the way, as stored
    assert await store.get_run("r3") is None and not (await store.find_events(EventQuery(run="r3"))).items
    again, created = await store.insert_run(new_run("r2"), exclusive=True)
    assert not created and again == newer  # its own id: found, as without exclusive
    assert (await store.insert_run(new_run("r4", agent="other"), exclusive=True))[1]
    assert (await store.insert_run(new_run("r5", requester="another-bot"), exclusive=True))[1]  # its names its own
    met, created = await store.insert_run(new_run("r6", requester="another-bot"), exclusive=True)
    assert not created and met.id == "r5"

    at = datetime.now(UTC)
    for run_id in ("r1", "r2"):
        await store.end_run(run_id, status=RunStatus.COMPLETED, at=at)
    sole, created = await store.insert_run(new_run("r3"), exclusive=True)
    assert created and sole.id == "r3"
    met, created = await store.insert_run(new_run("r7"), exclusive=True)
    assert not created and met.id == "r3"
    assert (await store.insert_run(new_run("r8")))[1]  # not exclusive: never refused


async def test_a_run_started_parked_stores_the_run_its_requests_and_the_park_in_one_go(store: Store) -> None:
    run = new_run()
    first, second = ask(), ask(channel="ops")
    deadline = run.created_at + timedelta(hours=1)
    parked, created = await store.start_parked(
        run, [first, second], state={"n": 1}, status=RunStatus.WAITING_FOR_INPUT, expires_at=deadline
    )
    assert created and parked.status is RunStatus.WAITING_FOR_INPUT and not parked.ready
    assert (parked.waiting_on, parked.state, parked.expires_at) == ((first.id, second.id), {"n": 1}, deadline)
    assert await store.get_run("r1") == parked
    assert await store.get(first.id) == first and await store.get(second.id) == second
    types = [e.type for e in await store.find_events(EventQuery(run="r1"))]
    assert types == ["run_started", "created", "created", "input_requested"]

    again, created_again = await store.start_parked(
        new_run(agent="other"), [ask()], state=None, status=RunStatus.WAITING_FOR_INPUT, expires_at=deadline
    )
    assert not created_again and again == parked  # the run as stored; nothing else stored
    assert len((await store.list(Query(run="r1"))).items) == 2

    await store.settle(answered(first, "Ada"))
    await store.settle(answered(second, "Bob"))
    claimed = await store.claim_run(None, worker="w1", lease_expires_at=deadline, at=datetime.now(UTC))
    assert claimed is not None and claimed.id == "r1"


async def test_settling_the_last_request_of_a_run_can_hand_the_run_to_a_waiting_worker(store: Store) -> None:
    now = datetime.now(UTC)
    lease = now + timedelta(seconds=30)
    run = new_run()
    first, second = ask(), ask()
    await store.start_parked(run, [first, second], state={"n": 1}, status=RunStatus.WAITING_FOR_INPUT, expires_at=lease)
    writer = RunClaim("w1", lease, now, agents=("writer",))
    deployer = RunClaim("w1", lease, now, agents=("deployer",), requester="bot")

    stored, claimed = await store.settle_claiming(answered(first, "Ada"), deployer)
    assert stored is not None and claimed is None  # one request still pending: not ready
    stored, claimed = await store.settle_claiming(answered(second, "Bob"), writer)
    assert stored is not None and claimed is None  # ready, but not a run this claim takes
    assert (await store.get_run("r1")).ready  # type: ignore[union-attr]

    await store.end_run("r1", RunStatus.CANCELLED, at=now)
    await store.insert_run(new_run("r2"))
    third = build_request(Text("Name?"), to="alice", requester="bot", origin=Origin(run="r2"))
    await store.insert(third)
    await park(store, "r2", [third.id])
    stored, claimed = await store.settle_claiming(answered(third, "Cy"), deployer)
    assert stored is not None and stored.status is Status.ANSWERED
    assert claimed is not None and (claimed.id, claimed.worker, claimed.attempts) == ("r2", "w1", 1)
    assert claimed.status is RunStatus.RUNNING and claimed.state == {"history": ["a", "b"], "n": 1.5}
    assert await store.claim_run(None, worker="w2", lease_expires_at=lease, at=now) is None  # taken once
    types = [e.type for e in await store.find_events(EventQuery(run="r2"))]
    assert types[-2:] == ["answered", "run_claimed"]
    assert await store.settle_claiming(answered(third, "again"), deployer) == (None, None)


async def test_a_run_started_parked_in_a_closed_channel_stores_nothing(store: Store) -> None:
    now = datetime.now(UTC)
    await store.close_channel("ops", Response(now, reason="closed", cause="closed"))
    with pytest.raises(Closed):
        await store.start_parked(
            new_run(),
            [ask(), ask(channel="ops")],
            state=None,
            status=RunStatus.WAITING_FOR_INPUT,
            expires_at=now + timedelta(hours=1),
        )
    assert await store.get_run("r1") is None
    assert list((await store.list(Query(run="r1"))).items) == []
    assert [e.type for e in await store.find_events(EventQuery(run="r1"))] == []


async def test_a_parked_run_is_ready_in_the_transaction_that_settles_its_last_request(store: Store) -> None:
    await store.insert_run(new_run())
    first, _ = await store.insert(ask())  # its origin names run r1
    second, _ = await store.insert(ask())
    parked = await park(store, "r1", [first.id, second.id])
    assert parked is not None and parked.status is RunStatus.WAITING_FOR_INPUT and not parked.ready
    assert parked.state == {"history": ["a", "b"], "n": 1.5} and parked.waiting_on == (first.id, second.id)
    assert (await store.get_run("r1")) == parked

    await store.settle(answered(first, "Ada"))
    run = await store.get_run("r1")
    assert run is not None and not run.ready
    await store.settle(second.settle(Status.REJECTED, Response(datetime.now(UTC), reason="no")))
    run = await store.get_run("r1")
    assert run is not None and run.ready


async def test_a_run_claimed_once_then_by_another_worker_only_after_its_lease(store: Store) -> None:
    await store.insert_run(new_run())
    request, _ = await store.insert(ask())
    await park(store, "r1", [request.id])
    now = datetime.now(UTC)
    lease = now + timedelta(seconds=30)
    assert await store.claim_run(["deployer"], worker="w1", lease_expires_at=lease, at=now) is None
    await store.settle(answered(request, "Ada"))
    assert await store.claim_run(["writer"], worker="w1", lease_expires_at=lease, at=now) is None

    claimed = await store.claim_run(["deployer"], worker="w1", lease_expires_at=lease, at=now)
    assert claimed is not None and (claimed.status, claimed.worker, claimed.attempts) == (RunStatus.RUNNING, "w1", 1)
    assert claimed.lease_expires_at == lease and claimed.expires_at is None and not claimed.ready
    assert await store.claim_run(None, worker="w2", lease_expires_at=lease, at=now) is None
    later = lease + timedelta(seconds=1)
    again = await store.claim_run(None, worker="w2", lease_expires_at=later + timedelta(seconds=30), at=later)
    assert again is not None and (again.worker, again.attempts) == ("w2", 2)
    assert not await store.renew_lease("r1", worker="w1", lease_expires_at=later)
    assert await store.renew_lease("r1", worker="w2", lease_expires_at=later + timedelta(minutes=5))
    ended, _ = await store.end_run("r1", RunStatus.COMPLETED, at=later, result={"ok": True}, worker="w1")
    assert ended is None  # w1's lease is gone
    ended, _ = await store.end_run("r1", RunStatus.COMPLETED, at=later, result={"ok": True}, worker="w2")
    assert ended is not None and (ended.status, ended.result, ended.worker) == (RunStatus.COMPLETED, {"ok": True}, None)
    types = [e.type for e in await store.find_events(EventQuery(run="r1"))]
    assert types == [
        "run_started",
        "created",
        "input_requested",
        "answered",
        "run_claimed",
        "run_claimed",
        "run_completed",
    ]


async def test_a_held_run_is_completed_or_failed_only_by_its_worker_and_cancelled_by_anyone(store: Store) -> None:
    for run_id in ("r1", "r2"):
        await store.insert_run(new_run(run_id))
        request, _ = await store.insert(build_request(Text("Name?"), to="alice", origin=Origin(run=run_id)))
        await park(store, run_id, [request.id])
        await store.settle(answered(request, "Ada"))
        now = datetime.now(UTC)
        assert await store.claim_run(None, worker="w1", lease_expires_at=now + timedelta(seconds=30), at=now)
    for status, fields in ((RunStatus.COMPLETED, {"result": "agent"}), (RunStatus.FAILED, {"error": "agent"})):
        assert await store.end_run("r1", status, at=now, **fields) == (None, [])  # no worker: not under w1
    held = await store.get_run("r1")
    assert held is not None and (held.status, held.worker, held.result) == (RunStatus.RUNNING, "w1", None)
    ended, _ = await store.end_run("r1", RunStatus.COMPLETED, at=now, result="w1's", worker="w1")
    assert ended is not None and (ended.status, ended.result) == (RunStatus.COMPLETED, "w1's")
    cancelled, _ = await store.end_run("r2", RunStatus.CANCELLED, at=now, terminal_reason="cancelled_by_user")
    assert cancelled is not None and (cancelled.status, cancelled.worker) == (RunStatus.CANCELLED, None)
    # A running run no worker holds (the agent's own) ends without one.
    await store.insert_run(new_run("r3"))
    done, _ = await store.end_run("r3", RunStatus.COMPLETED, at=now, result="mine")
    assert done is not None and done.result == "mine"
    types = [e.type for e in await store.find_events(EventQuery(run="r1"))]
    assert (types.count("run_completed"), types.count("run_failed")) == (1, 0)


async def test_a_renewed_lease_keeps_the_run_past_its_old_deadline_and_a_claim_takes_the_oldest_ready(
    store: Store,
) -> None:
    for run_id in ("r1", "r2", "r3"):
        await store.insert_run(new_run(run_id))
        request, _ = await store.insert(build_request(Text("Name?"), to="alice", origin=Origin(run=run_id)))
        await park(store, run_id, [request.id])
        await store.settle(answered(request, "Ada"))
    now = datetime.now(UTC)
    # r3 ends before anyone claims it: never claimable again.
    ended, _ = await store.end_run("r3", RunStatus.CANCELLED, at=now)
    assert ended is not None
    lease = now + timedelta(seconds=30)
    first = await store.claim_run(None, worker="w1", lease_expires_at=lease, at=now)
    assert first is not None and first.id == "r1"  # the one ready first
    assert await store.renew_lease("r1", worker="w1", lease_expires_at=lease + timedelta(minutes=5))
    second = await store.claim_run(None, worker="w2", lease_expires_at=lease, at=now)
    assert second is not None and second.id == "r2"
    # Past r1's first deadline but within its renewal: nothing to take (r2's lease lapsed only).
    between = lease + timedelta(seconds=1)
    taken = await store.claim_run(None, worker="w3", lease_expires_at=between + timedelta(seconds=30), at=between)
    assert taken is not None and (taken.id, taken.worker, taken.attempts) == ("r2", "w3", 2)
    assert await store.claim_run(None, worker="w4", lease_expires_at=between, at=between) is None
    done, _ = await store.end_run("r2", RunStatus.COMPLETED, at=between, worker="w3")
    assert done is not None
    # Renewed again and again, then let lapse: taken once past the last lease only.
    for minutes in (10, 20, 30):
        assert await store.renew_lease("r1", worker="w1", lease_expires_at=now + timedelta(minutes=minutes))
    assert await store.claim_run(None, worker="w5", lease_expires_at=between, at=now + timedelta(minutes=25)) is None
    past = now + timedelta(minutes=31)
    last = await store.claim_run(None, worker="w5", lease_expires_at=past + timedelta(seconds=30), at=past)
    assert last is not None and (last.id, last.worker, last.attempts) == ("r1", "w5", 2)


async def test_ending_a_run_withdraws_its_pending_requests_in_the_same_change(store: Store) -> None:
    await store.insert_run(new_run())
    waited, _ = await store.insert(ask())
    other, _ = await store.insert(ask())
    await park(store, "r1", [waited.id])
    withdraw = Response(datetime.now(UTC), reason="stop", cause="cancelled")
    ended, cancelled = await store.end_run(
        "r1", RunStatus.CANCELLED, at=datetime.now(UTC), terminal_reason="cancelled_by_user", withdraw=withdraw
    )
    assert ended is not None and (ended.status, ended.terminal_reason) == (RunStatus.CANCELLED, "cancelled_by_user")
    assert not ended.ready and ended.expires_at is None
    assert sorted(r.id for r in cancelled) == sorted([waited.id, other.id])
    for request_id in (waited.id, other.id):
        request = await store.get(request_id)
        assert request is not None and request.status is Status.CANCELLED
    assert (await store.end_run("r1", RunStatus.FAILED, at=datetime.now(UTC))) == (None, [])


async def test_an_abandoned_pause_expires_but_a_ready_run_does_not(store: Store) -> None:
    await store.insert_run(new_run("abandoned"))
    await store.insert_run(new_run("answered"))
    left = build_request(Text("Name?"), to="alice", origin=Origin(run="abandoned"))
    done = build_request(Text("Name?"), to="alice", origin=Origin(run="answered"))
    await store.insert(left)
    await store.insert(done)
    await park(store, "abandoned", [left.id], hours=1)
    await park(store, "answered", [done.id], hours=2)
    await store.settle(answered(done, "Ada"))
    abandoned = await store.get_run("abandoned")
    assert abandoned is not None and await store.next_run_expiry() == abandoned.expires_at

    gone = Response(datetime.now(UTC), via="expiry", reason="interaction_timeout", cause="cancelled")
    expired = await store.expire_runs(datetime.now(UTC) + timedelta(hours=3), gone)
    assert [(run.id, run.terminal_reason, [r.id for r in cancelled]) for run, cancelled in expired] == [
        ("abandoned", "interaction_timeout", [left.id])
    ]
    assert await store.next_run_expiry() is None
    still = await store.get_run("answered")
    assert still is not None and still.status is RunStatus.WAITING_FOR_INPUT and still.ready


async def test_a_running_run_no_worker_holds_expires_at_its_deadline_unless_started_again(store: Store) -> None:
    now = datetime.now(UTC)
    for run_id in ("left", "restarted", "parked", "claimed"):
        await store.insert_run(replace(new_run(run_id, agent=run_id), expires_at=now + timedelta(hours=1)))
    left = build_request(Text("Name?"), to="alice", origin=Origin(run="left"))
    waited = build_request(Text("Name?"), to="alice", origin=Origin(run="parked"))
    await store.insert(left)
    await store.insert(waited)
    stored = await store.get_run("left")
    assert stored is not None and stored.expires_at == now + timedelta(hours=1)
    assert await store.next_run_expiry() == now + timedelta(hours=1)

    restarted = await store.restart_run("restarted", expires_at=now + timedelta(hours=4))
    assert restarted is not None and restarted.expires_at == now + timedelta(hours=4)
    await park(store, "parked", [waited.id], hours=5)
    await park(store, "claimed", [], hours=1)  # ready at once: a worker claims it
    taken = await store.claim_run(["claimed"], worker="w1", lease_expires_at=now + timedelta(hours=9), at=now)
    assert taken is not None and taken.id == "claimed" and taken.expires_at is None
    # Only a running run no worker holds is started again: not a parked one, a claimed one, an ended one.
    assert await store.restart_run("parked", expires_at=now + timedelta(hours=6)) is None
    assert await store.restart_run("claimed", expires_at=now + timedelta(hours=6)) is None
    assert await store.restart_run("unknown", expires_at=now + timedelta(hours=6)) is None

    gone = Response(now, via="expiry", reason="interaction_timeout", cause="cancelled")
    abandoned = Response(now, via="expiry", reason="abandoned", cause="cancelled")
    later = now + timedelta(hours=3)
    assert await store.expire_runs(later, gone) == []  # without `abandoned`: parked runs alone
    expired = await store.expire_runs(later, gone, abandoned=abandoned)
    found = sorted((run.id, run.terminal_reason, [r.id for r in cancelled]) for run, cancelled in expired)
    assert found == [("left", "abandoned", [left.id])]
    cancelled_request = await store.get(left.id)
    assert cancelled_request is not None and cancelled_request.status is Status.CANCELLED
    assert cancelled_request.response is not None and cancelled_request.response.reason == "abandoned"
    events = await store.find_events(EventQuery(run="left"))
    assert events[-1].type == "run_cancelled" and events[-1].data["terminal_reason"] == "abandoned"
    assert await store.next_run_expiry() == now + timedelta(hours=4)
    for run_id, status in (("restarted", RunStatus.RUNNING), ("claimed", RunStatus.RUNNING)):
        run = await store.get_run(run_id)
        assert run is not None and run.status is status


async def test_runs_list_by_filter_without_their_state(store: Store) -> None:
    for i in range(4):
        await store.insert_run(new_run(f"r{i}", agent="deployer" if i % 2 else "writer", requester=f"bot{i % 2}"))
    request = build_request(Text("Name?"), to="carol", origin=Origin(run="r2"))
    await store.insert(request)
    await park(store, "r2", [request.id])
    assert [r.id for r in await store.list_runs(RunQuery(agent="deployer"))] == ["r3", "r1"]
    assert [r.id for r in await store.list_runs(RunQuery(order="asc", limit=2))] == ["r0", "r1"]
    r2 = await store.get_run("r2")
    assert r2 is not None
    assert [r.id for r in await store.list_runs(RunQuery(after=(r2.created_at, "r2")))] == ["r1", "r0"]
    assert [r.id for r in await store.list_runs(RunQuery(status=RunStatus.WAITING_FOR_INPUT))] == ["r2"]
    assert [r.id for r in await store.list_runs(RunQuery(involving="carol"))] == ["r2"]
    assert [r.id for r in await store.list_runs(RunQuery(involving="bot1"))] == ["r3", "r1"]
    to_team = build_request(Text("Restart?"), to="ops", origin=Origin(run="r1"))
    await store.insert(to_team)
    assert [r.id for r in await store.list_runs(RunQuery(involving="dan"))] == []
    assert [r.id for r in await store.list_runs(RunQuery(involving="dan", teams=("ops",)))] == ["r1"]  # a member's
    assert [r.id for r in await store.list_runs(RunQuery(involving="carol", teams=("ops", "sre")))] == ["r2", "r1"]
    (listed,) = await store.list_runs(RunQuery(status=RunStatus.WAITING_FOR_INPUT))
    assert listed.state is None and listed.waiting_on == (request.id,)


async def test_a_persons_runs_hold_those_of_the_agents_they_own_whoever_those_ask(store: Store) -> None:
    for principal in (
        Principal("carol", "human"),
        Principal("dan", "human"),
        Principal("helper", "agent", owner="carol"),
        Principal("other", "agent", owner="dan"),
    ):
        await store.save_principal(principal)
    await store.insert_run(new_run("r1-quiet", requester="helper"))  # asks no one
    await store.insert_run(new_run("r2-asks-dan", requester="helper"))
    await store.insert_run(new_run("r3-dans", requester="other"))
    await store.insert(build_request(Text("Name?"), to="dan", requester="helper", origin=Origin(run="r2-asks-dan")))
    assert [r.id for r in await store.list_runs(RunQuery(involving="carol"))] == ["r2-asks-dan", "r1-quiet"]
    assert [r.id for r in await store.list_runs(RunQuery(involving="dan"))] == ["r3-dans", "r2-asks-dan"]
    assert [r.id for r in await store.list_runs(RunQuery(involving="carol", status=RunStatus.CANCELLED))] == []
    # The agent itself is involved in what it started only; it owns no one.
    assert [r.id for r in await store.list_runs(RunQuery(involving="helper"))] == ["r2-asks-dan", "r1-quiet"]
    quiet = await store.get_run("r1-quiet")
    assert quiet is not None
    later = await store.list_runs(RunQuery(involving="carol", after=(quiet.created_at, quiet.id), order="asc"))
    assert [r.id for r in later] == ["r2-asks-dan"]


@pytest.mark.parametrize("agents", [3, 40], ids=["a few agents", "more agents than are read a range each"])
async def test_an_owner_pages_through_the_runs_of_all_their_agents_newest_first(store: Store, agents: int) -> None:
    await store.save_principal(Principal("carol", "human"))
    names = [f"helper-{i:02d}" for i in range(agents)]
    for name in names:
        await store.save_principal(Principal(name, "agent", owner="carol"))
    made = []
    for n in range(2 * agents):  # the agents' runs interleaved, each made after the last
        run, _ = await store.insert_run(new_run(f"r{n:03d}", requester=names[n % agents]))
        made.append(run.id)
    await store.insert_run(new_run("not-hers", requester="bot"))
    seen: list[str] = []
    after = None
    while True:
        page = await store.list_runs(RunQuery(involving="carol", limit=3, after=after))
        seen += [r.id for r in page]
        if len(page) < 3:
            break
        after = (page[-1].created_at, page[-1].id)
    assert seen == made[::-1]
    completed = RunQuery(involving="carol", status=RunStatus.COMPLETED)
    assert await store.list_runs(completed) == []


async def test_each_run_event_carries_the_run_as_it_was_then_without_its_state(store: Store) -> None:
    run, _ = await store.insert_run(new_run())
    request, _ = await store.insert(ask())
    parked = await park(store, "r1", [request.id])
    await store.settle(answered(request, "Ada"))
    now = datetime.now(UTC)
    claimed = await store.claim_run(None, worker="w1", lease_expires_at=now + timedelta(seconds=30), at=now)
    ended, _ = await store.end_run("r1", RunStatus.FAILED, at=now, error="boom", terminal_reason="error", worker="w1")
    assert parked is not None and claimed is not None and ended is not None
    events = [e for e in await store.find_events(EventQuery(run="r1")) if e.request is None]
    assert [(e.type, dict(e.data)) for e in events] == [
        ("run_started", run_event_data(run)),
        ("input_requested", run_event_data(parked)),
        ("run_claimed", run_event_data(claimed)),
        ("run_failed", run_event_data(ended)),
    ]


# -- grants ----------------------------------------------------------------------------------


def _grant(**fields: object) -> IssuedGrant:
    base: dict[str, object] = {
        "id": new_id(),
        "with_": "repo:web",
        "can": "deploy",
        "issuer": "alice",
        "audience": "bot",
        "issued_at": datetime.now(UTC).replace(microsecond=0),
        "expires_at": datetime.now(UTC).replace(microsecond=0) + timedelta(days=7),
    }
    return IssuedGrant(**(base | fields))  # type: ignore[arg-type]


async def test_an_answer_and_its_grants_land_together_with_an_event_each(store: Store) -> None:
    request, _ = await store.insert(ask())
    grants = (_grant(request_id=request.id, ask_id="text"), _grant(can="read", expires_at=None, request_id=request.id))
    response = Response(datetime.now(UTC), {"text": "ok"}, by="alice", via="api", grants=grants)
    settled = request.settle(Status.ANSWERED, response)
    assert await store.settle_granting(settled) == settled
    again = await store.get(request.id)
    assert again is not None and again.response is not None and again.response.grants == grants
    assert [await store.get_grant(g.id) for g in grants] == list(grants)
    events = await store.events()
    assert [e.type for e in events] == ["created", "answered", "granted", "granted"]
    assert events[2].data["grant"]["id"] == grants[0].id
    assert (events[2].data["to"], events[2].data["by"], events[2].data["request"]) == ("bot", "alice", request.id)
    # The audience and the issuer each find the issuance in their own events.
    for who in ("bot", "alice"):
        found = await store.find_events(EventQuery(involving=who))
        assert "granted" in [e.type for e in found]
    assert [e.type for e in await store.find_events(EventQuery(involving="carol"))] == []


async def test_a_settlement_in_the_name_of_a_person_cut_off_is_refused_by_the_write_itself(store: Store) -> None:
    """Every way a store settles refuses an answer or a refusal decided as a person's whose
    every token is revoked (`by`; for an answer naming nobody, the issuer of its grants),
    with `Forbidden`, changing nothing: the write checks it, so no answer checked before a
    revocation lands after it. A withdrawal in their name is nobody's decision, and goes."""
    for person in ("alice", "bob"):
        await store.save_principal(Principal(person, "human"))
        await store.save_token(issue_token(person, datetime.now(UTC)))
    await store.revoke_tokens(principal="alice")
    run = new_run()
    question, approval = ask(), ask()
    await store.start_parked(run, [question, approval], state={}, status=RunStatus.WAITING_FOR_INPUT, expires_at=None)
    now = datetime.now(UTC)
    refusal = approval.settle(Status.REJECTED, Response(now, by="alice", via="api", reason="no"))
    nameless = Response(now, {"text": "ok"}, via="api", grants=(_grant(request_id=question.id, ask_id="text"),))
    claim = RunClaim("w1", now + timedelta(seconds=30), now)
    attempts = [
        lambda: store.settle(answered(question, "Ada")),
        lambda: store.settle(refusal),
        lambda: store.settle_claiming(answered(question, "Ada"), claim),
        lambda: store.settle_granting(question.settle(Status.ANSWERED, nameless)),  # issued as alice's
    ]
    for attempt in attempts:
        with pytest.raises(Forbidden, match="every token of 'alice' is revoked"):
            await attempt()
    for request in (question, approval):
        assert (await store.get(request.id, fresh=True)).status is Status.PENDING  # type: ignore[union-attr]
    assert await store.list_grants(GrantQuery()) == []
    assert [e.type for e in await store.events()][-1] != "answered"

    assert await store.settle(answered(question, "Bo", by="bob")) is not None  # bob is not cut off
    withdrawn = approval.settle(Status.CANCELLED, Response(now, by="alice", via="api"))
    assert await store.settle(withdrawn) is not None
    await store.save_token(issue_token("alice", datetime.now(UTC)))  # `token create alice`: back
    again = ask()
    await store.insert(again)
    assert await store.settle(answered(again, "Ada")) is not None


async def test_a_request_no_longer_pending_issues_no_grants(store: Store) -> None:
    request, _ = await store.insert(ask())
    await store.settle(answered(request, "first"))
    late = request.settle(
        Status.ANSWERED, Response(datetime.now(UTC), {"text": "late"}, grants=(_grant(request_id=request.id),))
    )
    assert await store.settle_granting(late) is None
    assert await store.list_grants(GrantQuery()) == []
    assert [e.type for e in await store.events()] == ["created", "answered"]


async def test_grants_list_by_audience_issuer_and_request_newest_first_a_page_at_a_time(store: Store) -> None:
    given = [_grant() for _ in range(3)] + [_grant(audience="other-bot"), _grant(issuer="bob")]
    for grant in given:
        await store.give_grant(grant)
    mine = await store.list_grants(GrantQuery(audience="bot", issuer="alice"))
    assert [g.id for g in mine] == [g.id for g in reversed(given[:3])]
    page = await store.list_grants(GrantQuery(audience="bot", issuer="alice", limit=2))
    rest = await store.list_grants(GrantQuery(audience="bot", issuer="alice", after=page[-1].id))
    assert [g.id for g in [*page, *rest]] == [g.id for g in mine]
    assert [g.id for g in await store.list_grants(GrantQuery(issuer="bob"))] == [given[4].id]
    assert await store.list_grants(GrantQuery(with_="repo:web", can="read")) == []
    assert await store.get_grant("unknown") is None


async def test_grants_list_by_any_of_several_requests_in_one_query(store: Store) -> None:
    """What a web page reads for the answers it shows: the grants any of its requests
    issued, newest first, in one query."""
    first, second, other = [(await store.insert(ask()))[0].id for _ in range(3)]
    given = [_grant(request_id=first), _grant(request_id=second), _grant(request_id=second)]
    for grant in [*given, _grant(request_id=other), _grant()]:
        await store.give_grant(grant)
    found = await store.list_grants(GrantQuery(requests=(first, second)))
    assert [g.id for g in found] == sorted((g.id for g in given), reverse=True)
    assert [g.id for g in await store.list_grants(GrantQuery(requests=(second,), limit=1))] == [given[2].id]
    assert await store.list_grants(GrantQuery(requests=())) == []


async def test_a_revoked_or_expired_grant_is_not_live(store: Store) -> None:
    now = datetime.now(UTC)
    live, old = _grant(), _grant(expires_at=now - timedelta(seconds=1), issued_at=now - timedelta(days=1))
    forever = _grant(expires_at=None)
    for grant in (live, old, forever):
        await store.give_grant(grant)
    assert {g.id for g in await store.list_grants(GrantQuery(live_at=now))} == {live.id, forever.id}
    revoked = await store.revoke_grant(live.id, "alice", now)
    assert revoked is not None and revoked.revoked_at is not None and revoked.revoked_by == "alice"
    assert await store.revoke_grant(live.id, "alice", now) is None  # once
    assert await store.revoke_grant("unknown", "alice", now) is None
    assert {g.id for g in await store.list_grants(GrantQuery(live_at=now))} == {forever.id}
    assert (await store.get_grant(live.id)) == revoked
    last = (await store.events())[-1]
    assert (last.type, last.data["grant"]["id"], last.data["grant"]["revoked_by"]) == (
        "grant_revoked",
        live.id,
        "alice",
    )


# -- one-time sign-in links ----------------------------------------------------------------


async def test_a_signin_link_signs_its_person_in_once_and_only_until_it_expires(store: PrincipalStore) -> None:
    from interlock.principals import issue_signin_link

    await store.save_principal(Principal("alice", "human"))
    now = datetime.now(UTC)
    link = issue_signin_link("alice", now)
    await store.save_signin_link(link)
    assert await store.use_signin_link(hash_token("ilk_unknown"), now) is None
    assert await store.use_signin_link(link.hash, now) == Principal("alice", "human")
    assert await store.use_signin_link(link.hash, now) is None  # spent

    short = issue_signin_link("alice", now, timedelta(minutes=5))
    await store.save_signin_link(short)
    assert await store.use_signin_link(short.hash, now + timedelta(minutes=5)) is None  # expired
    with pytest.raises(ValueError, match="nobody"):
        await store.save_signin_link(issue_signin_link("nobody", now))
