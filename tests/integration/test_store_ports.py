"""The store ports, checked the same way on every implementation: requests and events
(`RequestStore`), principals, tokens and web sessions (`PrincipalStore`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from interlock import Closed, Text
from interlock.model import Origin, Request, Response, Status, build_request
from interlock.principals import Principal, hash_token, issue_session, issue_token
from interlock.store import EventQuery, PrincipalStore, Query, RequestStore, Store
from interlock.store.memory import MemoryStore
from interlock.store.sqlite import SqliteStore

pytestmark = pytest.mark.anyio

IMPLEMENTATIONS = ["memory", "sqlite", "postgresql"]


@pytest.fixture(params=IMPLEMENTATIONS, ids=[f"{name}-store" for name in IMPLEMENTATIONS])
def implementation(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Which store, and where: a file of its own, or a database cloned from the template."""
    if request.param != "postgresql":
        yield request.param, str(tmp_path / "ports.db")
        return
    databases: Callable[[], AbstractContextManager[str]] = request.getfixturevalue("pg_databases")
    with databases() as pg_url:
        yield request.param, pg_url


@pytest.fixture
async def store(implementation: tuple[str, str]) -> AsyncIterator[Store]:
    name, where = implementation
    made: Store
    if name == "memory":
        made = MemoryStore()
    elif name == "sqlite":
        made = SqliteStore(where)
    else:
        from interlock.store.postgres import PostgresStore

        made = PostgresStore(where)
    await made.open()
    try:
        yield made
    finally:
        await made.aclose()


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
    assert requests is principals


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


async def test_overdue_requests_settle_and_the_next_expiry_is_known(store: RequestStore) -> None:
    now = datetime.now(UTC)
    soon, _ = await store.insert(ask(expires_at=now + timedelta(seconds=1)))
    later, _ = await store.insert(ask(expires_at=now + timedelta(hours=1)))
    assert await store.next_expiry() == soon.expires_at
    expired = await store.settle_pending(Status.EXPIRED, Response(now), due=now + timedelta(seconds=2))
    assert [r.id for r in expired] == [soon.id]
    assert await store.next_expiry() == later.expires_at


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
    first = await store.list(Query(recipient="alice", limit=2))
    assert [r.id for r in first] == [mine[2].id, mine[1].id]
    rest = await store.list(Query(recipient="alice", after=first[-1].id, limit=2))
    assert [r.id for r in rest] == [mine[0].id]
    oldest = await store.list(Query(recipient="alice", order="asc", limit=1, status=Status.PENDING))
    assert [r.id for r in oldest] == [mine[0].id]


async def test_events_are_found_by_who_and_by_request(store: RequestStore) -> None:
    theirs, _ = await store.insert(ask(to="bob", requester="bob-bot"))
    mine, _ = await store.insert(ask())
    await store.settle(answered(mine, "Ada"))
    involving = await store.find_events(EventQuery(involving="alice"))
    assert [(e.type, e.request_id) for e in involving] == [("created", mine.id), ("answered", mine.id)]
    about = await store.find_events(EventQuery(request=theirs.id))
    assert [e.request_id for e in about] == [theirs.id]
    changes = await store.changes()
    assert [(c[1], c[2]) for c in changes] == [("created", theirs.id), ("created", mine.id), ("answered", mine.id)]


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
    assert await store.revoke_tokens(token_id=token.id) == 1
    assert await store.live_token(hash_token(token.secret)) is None
    assert await store.revoke_tokens(principal="bot") == 0


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
