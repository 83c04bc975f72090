"""The history's filters through the Broker on every backend (memory, SQLite, PostgreSQL,
a server over HTTP): settled requests only, words of their texts, creation dates."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from interlock import Broker, Choice, Confirm, Form, InvalidRequest, Text

pytestmark = pytest.mark.anyio


async def test_history_finds_settled_requests_by_the_words_of_their_prompts_and_answers(
    connect: Callable[..., Broker],
) -> None:
    async with connect() as broker:
        ship = await broker.create(Confirm("Ship the release to production?"), to="alice", details="Canary is green")
        region = await broker.create(Choice("Which région first?", ["europe", "america"]), to="alice")
        note = await broker.create(Text("Anything to watch?"), to="bob", title="Night shift")
        pending = await broker.create(Text("Ship the docs too?"), to="alice")
        await broker.resolve(ship.id, True, by="alice")
        await broker.resolve(region.id, "europe", by="alice")
        await broker.reject(note.id, "too busy for the postmortem", by="bob")

        async def found(**filters: object) -> list[str]:
            page = await broker.list(settled=True, **filters)  # type: ignore[arg-type]
            return [r.id for r in page.items]

        assert await found() == [note.id, region.id, ship.id]  # settled only, newest first
        assert await found(text="ship") == [ship.id]  # the pending "Ship the docs" is not history
        assert await found(text="SHIP prod") == [ship.id]  # every word, as a prefix, any case
        assert await found(text="canary") == [ship.id]  # the details
        assert await found(text="europe") == [region.id]  # the answer (and an option)
        assert await found(text="région") == [region.id]
        assert await found(text="postmortem") == [note.id]  # the reason of a rejection
        assert await found(text="night") == [note.id]  # the title
        assert await found(text="ship europe") == []
        assert await found(text="ship", recipient="bob") == []
        assert await found(text="'\"*) OR 1=1 --") == []  # no query syntax gets through
        assert await found(status="rejected") == [note.id]

        page = await broker.list(settled=True, limit=2)
        assert [r.id for r in page.items] == [note.id, region.id] and page.next_cursor == region.id
        rest = await broker.list(settled=True, limit=2, after=page.next_cursor)
        assert [r.id for r in rest.items] == [ship.id] and rest.next_cursor is None

        now = datetime.now(UTC)
        assert await found(since=now - timedelta(hours=1)) == [note.id, region.id, ship.id]
        assert await found(since=now + timedelta(minutes=1)) == []
        assert await found(until=ship.created_at) == []
        assert await found(until=now + timedelta(minutes=1), text="watch") == [note.id]
        assert pending.id in [r.id for r in (await broker.list(text="docs")).items]

        with pytest.raises(InvalidRequest, match="time zone"):
            await broker.list(since=datetime(2026, 1, 1))
        with pytest.raises(InvalidRequest):
            await broker.list(text="x" * 501)


async def test_a_time_window_finds_exactly_the_requests_made_in_it(connect: Callable[..., Broker]) -> None:
    # Read along the ids, a window starts and ends where its ids do: what is made at its
    # first moment is in it, what is made at its end is not, oldest first as newest first.
    async with connect() as broker:
        made = [await broker.create(Text(f"Q{i}?"), to=f"person{i}") for i in range(5)]

        async def found(**filters: Any) -> list[str]:
            return [r.id for r in (await broker.list(**filters)).items]

        ids = [r.id for r in made]
        at = [r.created_at for r in made]
        assert await found(since=at[1], until=at[3]) == [ids[2], ids[1]]
        assert await found(since=at[1], until=at[3], order="asc") == [ids[1], ids[2]]
        assert await found(since=at[4]) == [ids[4]]
        assert await found(until=at[0]) == []
        assert await found(until=at[1], order="asc") == [ids[0]]
        assert await found(since=at[0], until=at[4], limit=2) == [ids[3], ids[2]]
        assert await found(since=at[0], until=at[4], after=ids[2]) == [ids[1], ids[0]]
        far = (datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, tzinfo=UTC))
        assert await found(since=far[0], until=far[1]) == ids[::-1]
        assert await found(since=far[1]) == [] and await found(until=far[0]) == []


async def test_a_yes_or_no_answer_is_found_by_the_word_the_history_shows(connect: Callable[..., Broker]) -> None:
    async with connect() as broker:
        shipped = await broker.create(Confirm("Ship the release?"), to="alice")
        held = await broker.create(Confirm("Ship the hotfix?"), to="alice")
        deploy = await broker.create(Confirm("Deploy web?"), kind="approval", to="alice")
        form = await broker.create(Form("Flags?", {"type": "object", "properties": {"dark": {"type": "boolean"}}}))
        await broker.resolve(shipped.id, True, by="alice")
        await broker.resolve(held.id, False, by="alice")
        await broker.resolve(deploy.id, "yes", by="alice")
        await broker.resolve(form.id, {"dark": False}, by="alice")

        async def found(text: str) -> set[str]:
            return {r.id for r in (await broker.list(text=text, settled=True)).items}

        assert await found("yes") == {shipped.id, deploy.id}
        assert await found("no") == {held.id, form.id}
        assert await found("ship yes") == {shipped.id}
        assert await found("true") == await found("false") == set()


async def test_a_member_s_search_finds_their_own_and_their_teams_requests_only(
    connect: Callable[..., Broker], backend: str
) -> None:
    if backend == "http":
        pytest.skip("through a server the caller's teams are the server's to name (see test_server_auth)")
    async with connect() as broker:
        made = {}
        for to in ("alice", "ops", "bob", "night-ops", None):
            request = await broker.create(Text(f"Rotate the keys for {to}?"), to=to)
            await broker.resolve(request.id, "rotated", by="someone")
            made[to] = request.id

        async def found(**filters: object) -> set[str]:
            return {r.id for r in (await broker.list(settled=True, text="rotate", **filters)).items}  # type: ignore[arg-type]

        assert await found(recipient="alice") == {made["alice"]}
        assert await found(recipient="alice", teams=["ops"]) == {made["alice"], made["ops"]}
        assert await found(recipient="ops") == {made["ops"]}  # not night-ops: a name is a whole token
        assert await found() == set(made.values())
        assert await found(recipient="carol") == set()
        token = "x" + b"alice".hex()  # how a store may index whom a request is to
        assert {r.id for r in (await broker.list(text=token[:5])).items} == set()  # never a word of the texts


@pytest.mark.parametrize("channel", [None, "fleet"], ids=["searched", "searched-in-a-channel"])
async def test_a_search_pages_newest_first_or_oldest_first_and_a_cursor_goes_on_from_its_request(
    connect: Callable[..., Broker], channel: str | None
) -> None:
    # On SQLite a search is read from the text index first; narrowed to a channel, along the
    # channel's index: the pages are the same either way, and on every store.
    where = {} if channel is None else {"channel": channel}
    async with connect() as broker:
        made = []
        for i in range(6):
            to = ("bob", "alice", "ops")[i % 3]
            text = f"Restart worker {i}?" if i % 2 else f"Drain node {i}?"
            request = await broker.create(Text(text), to=to, **where)  # type: ignore[arg-type]
            await broker.resolve(request.id, "ok", by="someone")
            made.append(request.id)
        restarts = [made[1], made[3], made[5]]  # to alice, bob and ops

        async def ids(**filters: Any) -> tuple[list[str], str | None]:
            page = await broker.list(settled=True, text="restart", **where, **filters)  # type: ignore[arg-type]
            return [r.id for r in page.items], page.next_cursor

        assert await ids(recipient="ops") == ([made[5]], None)
        assert await ids(recipient="alice") == ([made[1]], None)
        assert await ids(limit=2) == ([made[5], made[3]], made[3])
        assert await ids(after=made[3]) == ([made[1]], None)
        assert await ids() == (restarts[::-1], None)
        assert await ids(order="asc", limit=2) == (restarts[:2], restarts[1])
        assert await ids(order="asc", after=restarts[1]) == (restarts[2:], None)
        assert await ids(after=made[4]) == ([made[3], made[1]], None)  # a cursor that is no match
        assert await ids(after="f" * 32) == (restarts[::-1], None)  # a cursor past every request
        assert await ids(after="0" * 32) == ([], None)


async def test_a_search_word_finds_every_word_it_begins_however_many_they_are(connect: Callable[..., Broker]) -> None:
    async with connect() as broker:
        made: dict[str, str] = {}
        for text in ("Deploy now?", "Deploys queued?", "Deployed yesterday?", "Redeploy?", "Café ouvert?"):
            made[text] = (await broker.create(Text(text))).id
        # forty words beginning "topic": more than a search asks the index for one by one
        topics = [(await broker.create(Text(f"Read topic{i} first?"))).id for i in range(40)]

        async def found(text: str) -> set[str]:
            return {r.id for r in (await broker.list(text=text, limit=100)).items}

        deploys = {made["Deploy now?"], made["Deploys queued?"], made["Deployed yesterday?"]}
        assert await found("deploy") == deploys  # not "Redeploy": a word begins with it
        assert await found("deploye") == {made["Deployed yesterday?"]}
        assert await found("deploy queued") == {made["Deploys queued?"]}  # every word, each a prefix
        assert await found("café") == await found("CAF") == {made["Café ouvert?"]}
        assert await found("topic") == set(topics)
        assert await found("topic3") == {topics[3], *topics[30:40]}
        assert await found("topic39 read") == {topics[39]}
        assert await found("nowhere") == set()
        assert await found("deploy nowhere") == set()
        answered = made["Redeploy?"]
        await broker.resolve(answered, "Zanzibar")  # an answer's words are searched too
        assert await found("zanz") == {answered}


async def test_a_search_reads_the_words_a_person_reads_not_the_requests_ids_times_or_names(
    connect: Callable[..., Broker],
) -> None:
    # The texts a search reads (`Query.text`): the title, the details, the prompts, the
    # options' labels and descriptions, a form's field titles and descriptions, the answers
    # and the reason; the same on every store.
    street = {"type": "string", "title": "Street name", "description": "As written on the door"}
    async with connect() as broker:
        tier = await broker.create(
            Choice("Which tier?", [{"id": "t7", "label": "Gold plan", "description": "Priority support"}]),
            to="alice",
            requester="billing-bot",
            agent="billing-agent",
            title="Renewal",
            details="Due soon",
            tool_name="send_invoice",
            session="s-42",
        )
        address = await broker.create(Form("Shipping?", {"type": "object", "properties": {"street": street}}))
        await broker.resolve(tier.id, "t7", by="alice", comment="cheapest that fits")
        await broker.resolve(address.id, {"street": "Rue Mouffetard"}, by="alice")

        async def found(text: str) -> set[str]:
            return {r.id for r in (await broker.list(text=text, limit=100)).items}

        for word in ("renewal", "due", "tier", "gold", "priority", "t7", "cheapest"):
            assert await found(word) == {tier.id}, word
        for word in ("shipping", "street", "door", "mouffetard"):
            assert await found(word) == {address.id}, word
        made = tier.created_at
        nobody_reads = [
            tier.id,  # ids
            tier.id[:8],
            str(made.year),  # times
            f"{made.month:02d}",
            "question",  # the kind, the status, the ask types and ids
            "pending",
            "answered",
            "choice",
            "form",
            "python",  # the surface it was answered on
            "alice",  # names
            "billing",
            "invoice",  # the origin
            "42",
        ]
        for word in nobody_reads:
            assert await found(word) == set(), word
