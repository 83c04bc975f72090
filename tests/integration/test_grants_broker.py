"""Grants through the Broker, the same on every backend: memory, SQLite, PostgreSQL and
a server reached over HTTP (the remote broker)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from interlock import Broker, Confirm
from interlock.errors import Forbidden, InvalidAnswer, InvalidRequest, NotFound
from interlock.model import Choice, GrantPolicy, MultiChoice, Option, Status, Text

pytestmark = pytest.mark.anyio
BOUND = 10
DEPLOY = {"with": "repo:web", "can": "deploy"}


async def test_an_approved_and_echoed_grant_is_issued_to_the_requester(broker: Broker) -> None:
    request = await broker.create(Confirm("Deploy?", grants=[DEPLOY]), to="alice", requester="bot")
    assert await broker.resolve(request.id, True, by="alice", grants=[DEPLOY])
    response = await broker.wait(request.id, timeout=BOUND)
    (grant,) = response.grants
    assert (grant.with_, grant.can, grant.issuer, grant.audience) == ("repo:web", "deploy", "alice", "bot")
    assert grant.expires_at is not None
    assert abs((grant.expires_at - grant.issued_at) - timedelta(days=7)) < timedelta(seconds=1)
    assert await broker.get_grant(grant.id) == grant
    assert (await broker.list_grants(audience="bot")).items == [grant]
    assert await broker.check_grant("bot", "repo:web", "deploy") == grant
    types = [e.type async for e in broker.events()]
    assert types[-2:] == ["answered", "granted"]


async def test_an_untriggered_echo_refuses_the_answer_and_leaves_the_request_pending(broker: Broker) -> None:
    ask = MultiChoice(
        "Which?", [Option("logs", grants=[{"with": "logs", "can": "tail", "exp": None}]), "metrics"], id="m"
    )
    request = await broker.create([ask, Confirm("Deploy?", id="ok", grants=[DEPLOY])], to="alice", requester="bot")
    with pytest.raises(InvalidAnswer, match="not triggered"):
        await broker.resolve(
            request.id, {"m": ["metrics"], "ok": True}, by="alice", grants=[DEPLOY, {"with": "logs", "can": "tail"}]
        )
    with pytest.raises(InvalidAnswer, match="not triggered"):
        await broker.resolve(request.id, {"m": ["logs"], "ok": False}, by="alice", grants=[DEPLOY])
    assert (await broker.get(request.id)).status is Status.PENDING
    assert (await broker.list_grants(audience="bot")).items == []
    assert await broker.resolve(
        request.id, {"m": ["logs", "metrics"], "ok": False}, by="alice", grants=[{"with": "logs", "can": "tail"}]
    )
    (grant,) = (await broker.get(request.id)).response.grants  # type: ignore[union-attr]
    assert (grant.can, grant.option_id, grant.expires_at) == ("tail", "logs", None)


async def test_an_echo_on_an_approval_s_denial_refuses_the_answer_and_leaves_it_pending(broker: Broker) -> None:
    """A no issues no grant, so a grant echoed with one refuses the whole answer, as every
    other echo the choices did not trigger does (it was taken as a plain denial)."""
    request = await broker.create(Confirm("Deploy?", grants=[DEPLOY]), kind="approval", to="alice", requester="bot")
    with pytest.raises(InvalidAnswer, match="'deploy' on 'repo:web' was echoed on a denial, which issues no grant"):
        await broker.resolve(request.id, False, by="alice", comment="not now", grants=[DEPLOY])
    assert (await broker.get(request.id)).status is Status.PENDING
    assert await broker.resolve(request.id, False, by="alice", comment="not now", grants=[])
    assert (await broker.get(request.id)).status is Status.REJECTED
    assert (await broker.list_grants(audience="bot")).items == []


async def test_without_an_echo_nothing_is_issued(broker: Broker) -> None:
    request = await broker.create(Choice("Access?", [Option("read", grants=[DEPLOY])]), to="alice", requester="bot")
    assert await broker.resolve(request.id, "read", by="alice")
    assert (await broker.get(request.id)).response.grants == ()  # type: ignore[union-attr]
    assert (await broker.list_grants(audience="bot")).items == []


async def test_grants_on_a_text_ask_are_refused_and_nothing_is_stored(broker: Broker) -> None:
    with pytest.raises(InvalidRequest, match="grants may be offered only on confirm"):
        await broker.create(
            await broker.build_asks([{"type": "text", "prompt": "Name?", "grants": [DEPLOY]}]), to="alice"
        )
    assert (await broker.list(recipient="alice")).items == []


async def test_a_grant_past_the_last_date_is_refused_when_offered_or_given(broker: Broker) -> None:
    """An exp no date holds had been stored, and then broke every page that showed it."""
    far = {**DEPLOY, "exp": 10**15}
    with pytest.raises(InvalidRequest, match="past the last date there is"):
        await broker.create(
            await broker.build_asks([{"type": "confirm", "prompt": "Deploy?", "grants": [far]}]), to="alice"
        )
    with pytest.raises(InvalidRequest, match="past the last date there is"):
        await broker.give_grant("bot", "repo:web", "deploy", exp=10**15, by="alice")
    assert (await broker.list(recipient="alice")).items == []
    assert (await broker.list_grants(audience="bot")).items == []
    last = await broker.give_grant("bot", "repo:web", "deploy", exp=253_402_300_799, by="alice")
    assert last.expires_at == datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)


async def test_a_ceiling_refuses_offers_beyond_it_before_anything_is_stored(
    connect: Callable[..., Broker], backend: str
) -> None:
    if backend == "http":
        pytest.skip("a server applies its own ceiling: see test_grants_api")
    async with connect(grant_policy=GrantPolicy(ceiling_seconds=86400)) as broker:
        beyond = int((datetime.now(UTC) + timedelta(days=2)).timestamp())
        for grant in ({"with": "a", "can": "x", "exp": None}, {"with": "a", "can": "x", "exp": beyond}):
            with pytest.raises(InvalidRequest, match=r"ceiling|no expiry"):
                await broker.create(Confirm("Ok?", grants=[grant]), to="alice")
        assert (await broker.list(recipient="alice")).items == []
        request = await broker.create(Confirm("Ok?", grants=[DEPLOY]), to="alice", requester="bot")
        await broker.resolve(request.id, True, by="alice", grants=[DEPLOY])
        (grant,) = (await broker.get(request.id)).response.grants  # type: ignore[union-attr]
        assert grant.expires_at is not None and grant.expires_at - grant.issued_at <= timedelta(days=1)


async def test_a_grant_is_given_directly_revoked_once_and_then_no_longer_checks(broker: Broker) -> None:
    given = await broker.give_grant("bot", "interlock:inbox/alice", "hitl/request", by="alice")
    assert await broker.check_grant("bot", "interlock:inbox/alice", "hitl/request", issuer="alice") == given
    assert await broker.check_grant("bot", "interlock:inbox/alice", "hitl/request", issuer="bob") is None
    assert await broker.revoke_grant(given.id, by="alice")
    assert not await broker.revoke_grant(given.id, by="alice")
    assert await broker.check_grant("bot", "interlock:inbox/alice", "hitl/request") is None
    revoked = await broker.get_grant(given.id)
    assert revoked.revoked_at is not None
    assert (await broker.list_grants(audience="bot", live=True)).items == []
    assert [g.id for g in (await broker.list_grants(audience="bot")).items] == [given.id]
    with pytest.raises(NotFound):
        await broker.get_grant("no-such-grant")


async def test_a_grant_on_someone_s_inbox_is_theirs_alone_to_give_or_to_issue_by_answering(broker: Broker) -> None:
    # A grant on bob's inbox lets its holder ask bob: given by alice, or by nobody named,
    # a check (and a venue reading its token) would take it for bob's permission.
    for by in ("alice", None):
        with pytest.raises(Forbidden, match="is bob's alone to give"):
            await broker.give_grant("bot", "interlock:inbox/bob", "hitl/request", by=by)
    offered = {"with": "interlock:inbox/bob", "can": "hitl/request"}
    request = await broker.create(Confirm("Let bot ask bob?", grants=[offered]), to="alice", requester="bot")
    with pytest.raises(InvalidAnswer, match="not alice's"):
        await broker.resolve(request.id, True, by="alice", grants=[offered])
    assert (await broker.get(request.id)).status is Status.PENDING  # nothing answered
    assert (await broker.list_grants(audience="bot")).items == []  # nor issued
    assert await broker.resolve(request.id, True, by="bob", grants=[offered])  # bob may
    assert await broker.check_grant("bot", "interlock:inbox/bob", "hitl/request", issuer="bob") is not None


async def test_grants_page_newest_first(broker: Broker) -> None:
    given = [await broker.give_grant("bot", f"thing:{i}", "use", by="alice") for i in range(5)]
    first = await broker.list_grants(audience="bot", limit=2)
    assert [g.id for g in first.items] == [given[4].id, given[3].id] and first.next_cursor is not None
    rest = await broker.list_grants(audience="bot", after=first.next_cursor, limit=10)
    assert [g.id for g in rest.items] == [g.id for g in reversed(given[:3])] and rest.next_cursor is None


async def test_text_answers_issue_nothing(broker: Broker) -> None:
    request = await broker.create(Text("Name?"), to="alice")
    with pytest.raises(InvalidAnswer, match="does not offer"):
        await broker.resolve(request.id, "Ada", by="alice", grants=[DEPLOY])
    assert (await broker.get(request.id)).status is Status.PENDING


async def test_an_echo_is_bounded_by_count(broker: Broker) -> None:
    request = await broker.create(Confirm("Deploy?", grants=[DEPLOY]), to="alice", requester="bot")
    with pytest.raises(InvalidAnswer, match="at most"):
        await broker.resolve(request.id, True, by="alice", grants=[DEPLOY] * (broker.limits.max_options + 1))
    assert (await broker.get(request.id)).status is Status.PENDING
