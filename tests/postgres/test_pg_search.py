"""How PostgreSQL reads a search, chosen from how common its words are (`_text_plan`):
a common word from the requests in the page's order, a rare one from the GIN index's
matches first, narrowed for a person by a word of their name. Whichever way, a search
finds the same requests as it would the other way, page by page."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
from pg_support import database_of, empty_database, psql

import interlock
from interlock import Broker, Status, Text
from interlock.store import Query
from interlock.store._sql import TextPlan, load_migrations, positional
from interlock.store.postgres import PostgresStore, WordShares, recipient_word

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def rare_in_a_small_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a table of a few hundred requests a word in a handful of them is in about 1%:
    rare here is what is in fewer than 10% (at a million requests, 1%)."""
    monkeypatch.setattr("interlock.store.postgres.RARE_WORD", 0.1)


# Names the text search splits in different ways: one word, an address, a word and a
# number, letters outside ASCII, and a team.
PEOPLE = ["ann", "carol.smith@example.com", "dev-42", "Émile", "ops"]
CROWD = [f"member{i}" for i in range(30)]  # everyone else: every name is a rare word


@pytest.fixture
async def searched(pg_url: str) -> AsyncIterator[tuple[Broker, dict[str, list[str]]]]:
    """A store of 400 requests, every one about deploying, a few also about a zebra (each
    person's and two of the crowd's); settled but the last of each person's, and ANALYZEd."""
    zebras: dict[str, list[str]] = {name: [] for name in [*PEOPLE, "crowd"]}
    async with interlock.connect(pg_url) as broker:
        for i in range(400):
            to = PEOPLE[i % len(PEOPLE)] if i % 8 == 0 else CROWD[i % len(CROWD)]
            zebra = (i % 8 == 0 and i < 200) or i in (101, 303)
            request = await broker.create(Text(f"Deploy {'the zebra ' if zebra else ''}build {i}?"), to=to)
            if zebra:
                zebras[to if to in PEOPLE else "crowd"].append(request.id)
            if i < 390:
                await broker.resolve(request.id, "done")
        await store_of(broker)._catch_up()  # every text derived, for ANALYZE to sample
        psql("ANALYZE", database_of(pg_url))
        yield broker, zebras


def store_of(broker: Broker) -> PostgresStore:
    store = broker.store
    assert isinstance(store, PostgresStore)
    return store


async def pages(broker: Broker, **filters: Any) -> list[str]:
    """Every request the search finds, a page of one at a time."""
    found: list[str] = []
    after = None
    while True:
        page = (await broker.list(limit=1, after=after, **filters)).items
        found += [r.id for r in page]
        if not page:
            return found
        after = page[-1].id


async def plan_of(url: str, store: PostgresStore, query: Query) -> str:
    """The plan of the search's statement, with what the planner would rightly do over a
    few hundred rows (read them all: a scan, a sort, a merge or a hash of every row) priced out."""
    sql = await store._list_sql(query)
    assert sql is not None
    text, args = positional(*sql)
    conn = await asyncpg.connect(url)
    try:
        for setting in ("enable_seqscan", "enable_sort", "enable_mergejoin", "enable_hashjoin"):
            await conn.execute(f"SET {setting} = off")
        return "\n".join(row[0] for row in await conn.fetch("EXPLAIN " + text, *args))
    finally:
        await conn.close()


def reads_the_matches_first(plan: str) -> None:
    """The words' matches are read first, each one's request then read by its id."""
    lines = plan.splitlines()
    first = next(i for i, line in enumerate(lines) if " on request" in line)
    assert " on request_texts " in lines[first], plan
    assert "(id = t.id)" in plan, plan  # a match's request, by its id


async def test_a_person_s_search_for_a_rare_word_reads_the_matches_to_them_from_the_gin_index(
    pg_url: str, searched: tuple[Broker, dict[str, list[str]]]
) -> None:
    broker, zebras = searched
    store = store_of(broker)
    for person in PEOPLE:
        plan = await store._text_plan(Query(recipient=person, text="zebra"))
        assert plan.matches_first and plan.narrow is not None, (person, plan)
        # Every one of the person's requests about a zebra, newest first, and no one else's.
        assert await pages(broker, recipient=person, text="zebra") == zebras[person][::-1], person
        assert await pages(broker, recipient=person, text="zeb", order="asc") == zebras[person], person
    reads_the_matches_first(await plan_of(pg_url, store, Query(recipient="ann", settled=True, text="zebra", limit=25)))


async def test_a_member_s_search_for_a_rare_word_finds_theirs_and_their_teams(
    searched: tuple[Broker, dict[str, list[str]]],
) -> None:
    broker, zebras = searched
    query = Query(recipient="ann", teams=("ops",), text="zebra")
    plan = await store_of(broker)._text_plan(query)
    assert plan.matches_first and plan.narrow is not None and " | " in plan.narrow, plan
    found = [r.id for r in (await store_of(broker).list(query)).items]
    assert found == sorted(zebras["ann"] + zebras["ops"], reverse=True)


async def test_everyone_s_search_for_a_rare_word_reads_its_matches_first(
    pg_url: str, searched: tuple[Broker, dict[str, list[str]]]
) -> None:
    broker, zebras = searched
    store = store_of(broker)
    assert await store._text_plan(Query(text="zebra")) == TextPlan(matches_first=True)
    every = sorted(id_ for ids in zebras.values() for id_ in ids)
    assert await pages(broker, text="zebra") == every[::-1]
    assert await pages(broker, text="zebra", settled=True) == [
        r.id for r in (await broker.list(text="zebra", limit=100)).items if r.status.value != "pending"
    ]
    reads_the_matches_first(await plan_of(pg_url, store, Query(settled=True, text="zebra", limit=25)))


async def test_a_search_for_a_common_word_checks_the_requests_in_order(
    pg_url: str, searched: tuple[Broker, dict[str, list[str]]]
) -> None:
    broker, _ = searched
    store = store_of(broker)
    assert await store._text_plan(Query(text="deploy build")) == TextPlan(matches_first=False)
    # A person's: along their texts (a short word may stand for many: read in order too).
    for query in (Query(recipient="ann", text="deploy"), Query(recipient="ann", text="ze")):
        assert await store._text_plan(query) == TextPlan(matches_first=False, along=" to ann"), query
    ann = [r.id for r in (await broker.list(recipient="ann", limit=100)).items]
    assert await pages(broker, recipient="ann", text="deploy") == ann
    shown = await plan_of(pg_url, store, Query(text="deploy", settled=True, limit=25))
    assert "Index Scan Backward using requests_pkey" in shown, shown  # in the page's order
    assert "SubPlan" in shown and "Sort" not in shown, shown  # each request's text checked


async def test_a_person_s_search_for_a_common_word_reads_their_texts_in_order(
    pg_url: str, searched: tuple[Broker, dict[str, list[str]]]
) -> None:
    # Their texts, from the index of the word that holds whom each is to: not every request
    # of theirs read, then its text looked up by id. Only a match's request is read.
    broker, _ = searched
    store = store_of(broker)
    for person in PEOPLE:
        requests = (await broker.list(recipient=person, limit=100)).items
        theirs = [r.id for r in requests]
        assert theirs and await pages(broker, recipient=person, text="deploy") == theirs, person
        assert await pages(broker, recipient=person, text="build", order="asc") == theirs[::-1], person
        settled = [r.id for r in requests if r.status is not Status.PENDING]
        assert await pages(broker, recipient=person, text="deploy", settled=True) == settled, person
    assert any(r.status is Status.PENDING for r in (await broker.list(recipient="dev-42")).items)
    shown = await plan_of(pg_url, store, Query(recipient="ann", settled=True, text="deploy", limit=25))
    assert "Index Scan Backward using request_texts_to" in shown, shown  # their texts, in the page's order
    assert "(id = t.id)" in shown and "Sort" not in shown, shown  # a match's request, by its id
    assert "requests_by_recipient" not in shown and "request_texts_body" not in shown, shown


async def test_along_their_texts_only_those_with_the_words_are_found(
    searched: tuple[Broker, dict[str, list[str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A rare word read along their texts anyway (as a common one is): only their requests
    # whose texts hold it, page by page, each checked.
    broker, zebras = searched
    store = store_of(broker)

    async def along(query: Query) -> TextPlan:
        assert query.recipient is not None
        return TextPlan(matches_first=False, along=f" to {query.recipient}")

    monkeypatch.setattr(store, "_text_plan", along)
    for person in PEOPLE:
        assert await pages(broker, recipient=person, text="zebra") == zebras[person][::-1], person
        assert await pages(broker, recipient=person, text="zeb", order="asc") == zebras[person], person
        assert await pages(broker, recipient=person, text="zebra deploy", settled=True) == [
            r.id
            for r in (await broker.list(recipient=person, text="zebra", limit=100)).items
            if r.status is not Status.PENDING
        ], person


async def test_a_person_s_search_along_their_texts_keeps_every_other_filter(
    searched: tuple[Broker, dict[str, list[str]]],
) -> None:
    broker, _ = searched
    store = store_of(broker)
    mine = (await broker.list(recipient="ann", limit=100)).items
    middle = mine[len(mine) // 2].created_at
    for filters in (
        {"status": "answered"},
        {"kind": "question"},
        {"since": middle},
        {"until": middle},
        {"settled": True, "since": middle},
    ):
        query = Query(recipient="ann", text="deploy", **filters)
        assert (await store._text_plan(query)).along == " to ann", filters
        expected = [r.id for r in (await broker.list(recipient="ann", limit=100, **filters)).items]
        assert expected and await pages(broker, recipient="ann", text="deploy", **filters) == expected, filters
    # Filters read by an index of their own, and a member's search with their teams', are
    # read as before, request by request.
    for query in (
        Query(recipient="ann", teams=("ops",), text="deploy"),
        Query(recipient="ann", status=Status.PENDING, text="deploy"),
        Query(recipient="ann", requester="bot", text="deploy"),
        Query(recipient="ann", kind="approval", text="deploy"),
    ):
        assert await store._text_plan(query) == TextPlan(matches_first=False), query


async def test_the_rarest_word_of_a_search_chooses_how_it_is_read(
    searched: tuple[Broker, dict[str, list[str]]],
) -> None:
    broker, zebras = searched
    query = Query(recipient="ann", text="deploy zebra")
    assert (await store_of(broker)._text_plan(query)).matches_first
    assert [r.id for r in (await store_of(broker).list(query)).items] == zebras["ann"][::-1]


async def test_before_the_first_analyze_a_search_checks_the_requests_in_order(pg_url: str) -> None:
    async with interlock.connect(pg_url) as broker:
        made = await broker.create(Text("Feed the zebra?"), to="ann")
        store = store_of(broker)
        plan = await store._text_plan(Query(recipient="ann", text="zebra"))
        assert plan == TextPlan(matches_first=False, along=" to ann")
        assert [r.id for r in (await broker.list(recipient="ann", text="zebra")).items] == [made.id]


async def test_a_name_whose_every_word_is_common_narrows_the_matches_as_a_whole(pg_url: str) -> None:
    # Every request is to someone named "team-N": "team" is in every request's text, and
    # each number in one request of ten (and in its dates). The name, whole, is one word
    # of the text of the requests to it alone: the matches read are theirs.
    async with interlock.connect(pg_url) as broker:
        zebra = []
        for i in range(200):
            title = f"Deploy {'the zebra ' if i % 25 == 0 else ''}{i}?"
            request = await broker.create(Text(title), to=f"team-{i % 10}")
            if i % 50 == 0:
                zebra.append(request.id)
        store = store_of(broker)
        await store._catch_up()
        psql("ANALYZE", database_of(pg_url))
        query = Query(recipient="team-0", text="zebra")
        assert await store._text_plan(query) == TextPlan(matches_first=True, narrow="' to team-0'")
        assert [r.id for r in (await broker.list(recipient="team-0", text="zebra")).items] == zebra[::-1]
        # The GIN index gives only team-0's matches: 4 of the word's 8.
        conn = await asyncpg.connect(pg_url)
        try:
            text, args = positional(*await store._list_sql(query))
            for setting in ("enable_seqscan", "enable_indexscan"):  # a bitmap of the GIN index's matches
                await conn.execute(f"SET {setting} = off")
            plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN (ANALYZE, TIMING off) " + text, *args))
        finally:
            await conn.close()
        matches = next(line for line in plan.splitlines() if "Bitmap Index Scan on request_texts" in line)
        assert "actual rows=4 " in matches, plan


async def test_no_search_finds_a_request_by_the_word_its_recipient_is_held_as(
    searched: tuple[Broker, dict[str, list[str]]],
) -> None:
    # The recipient's word begins with a space: "to" (or " to ann", any prefix of it, as
    # typed) finds only what says it, here nothing; nor is the name a word of the text (a
    # person's requests are those `to` them, a filter of its own).
    broker, _ = searched
    for text in ("to", "to ann", "' to ann'", " to", "ann"):
        assert (await broker.list(text=text)).items == [], text


async def test_an_upgrade_adds_the_recipient_to_the_search_texts_made_before(monkeypatch: pytest.MonkeyPatch) -> None:
    import interlock.store.postgres as postgres_store

    migrations = load_migrations("postgresql")
    before = migrations[: [m.name for m in migrations].index("recipient_in_search_text")]  # and those after it
    with empty_database() as url:
        with monkeypatch.context() as patch:  # a database of the version before
            patch.setattr(postgres_store, "load_migrations", lambda dialect: before)
            async with interlock.connect(url) as broker:
                old = [await broker.create(Text(f"Feed the zebra {i}?"), to="dev-42") for i in range(3)]
                await broker.resolve(old[0].id, "fed")
                await broker.create(Text("Feed the zebra, anyone?"))
                await store_of(broker)._catch_up()
        async with interlock.connect(url) as broker:
            new = await broker.create(Text("Feed the zebra again?"), to="dev-42")
            store = store_of(broker)
            narrowed = TextPlan(matches_first=True, narrow="' to dev-42'")

            async def plan(query: Query) -> TextPlan:
                return narrowed

            monkeypatch.setattr(store, "_text_plan", plan)  # as ANALYZE would have it at scale
            found = (await store.list(Query(recipient="dev-42", text="zebra"))).items
            assert [r.id for r in found] == [new.id, *(r.id for r in old[::-1])]


async def test_a_word_that_begins_many_rare_words_is_read_request_by_request(
    searched: tuple[Broker, dict[str, list[str]]],
) -> None:
    # A word of one or two letters begins many words, each in a request or two: `3` and
    # `39` begin the builds 3, 30-39, 300-399 and 39, 390-399. The GIN index would gather
    # all their matches first; the newest requests match at once.
    broker, zebras = searched
    store = store_of(broker)
    newest = [r.id for r in (await broker.list(limit=3)).items]
    for word in ("3", "39"):
        assert await store._text_plan(Query(text=word)) == TextPlan(matches_first=False), word
        assert [r.id for r in (await broker.list(text=word, limit=3)).items] == newest
    # A word of one or two letters beside a rare one: read request by request too.
    assert not (await store._text_plan(Query(recipient="ann", text="zebra bu"))).matches_first
    assert [r.id for r in (await store.list(Query(recipient="ann", text="zebra bu"))).items] == zebras["ann"][::-1]
    # A whole id is no word of a request's text (nor are its first digits).
    some = zebras["ann"][0]
    assert (await broker.list(text=some)).items == []
    assert (await broker.list(text=some[:6])).items == []


async def test_a_name_too_long_for_one_word_is_held_by_its_digest(pg_url: str) -> None:
    # An operator may allow names longer than a text search word can be (2,047 bytes): the
    # recipient is then held as its MD5, and a search of theirs is narrowed by that.
    long_name = "€" * 700  # 2,100 bytes
    async with interlock.connect(pg_url, limits=interlock.Limits(max_name_length=1000)) as broker:
        theirs = await broker.create(Text("Feed the zebra?"), to=long_name)
        await broker.create(Text("Feed the zebra too?"), to="ann")
        store = store_of(broker)
        await store._catch_up()  # derives both texts
        narrowed = TextPlan(matches_first=True, narrow=recipient_word(long_name))
        assert narrowed.narrow is not None and narrowed.narrow.startswith("' to md5 ")

        async def plan(query: Query) -> TextPlan:
            return narrowed

        store._text_plan = plan  # type: ignore[method-assign]  # as ANALYZE would have it at scale
        assert [r.id for r in (await store.list(Query(recipient=long_name, text="zebra"))).items] == [theirs.id]


def test_a_prefix_s_share_adds_the_words_it_begins() -> None:
    shares = WordShares({"deploy": 0.04, "deployed": 0.02, "deploys": 0.01, "delete": 0.5, "dep": 0.001, "x": 0.3})
    assert shares.of_prefix("deploy") == pytest.approx(0.07)
    assert shares.of_prefix("deployed") == pytest.approx(0.02)
    assert shares.of_prefix("dep") == pytest.approx(0.071)
    assert shares.of_prefix("de") == pytest.approx(0.571)
    assert shares.of_prefix("zebra") == 0 and shares.of_prefix("deployer") == 0
    assert not WordShares({}) and shares


async def test_analyze_lists_the_search_texts_words_down_to_a_fine_share(pg_url: str) -> None:
    # Statistics target 1,000 for the texts' words: ANALYZE lists about 2,000 of them, so a
    # prefix's share is summed from the words it begins however the sample fell.
    conn = await asyncpg.connect(pg_url)
    try:
        async with interlock.connect(pg_url):
            target = await conn.fetchval(
                "SELECT attstattarget FROM pg_attribute WHERE attrelid = 'request_texts'::regclass AND attname = 'body'"
            )
        assert target == 1000
    finally:
        await conn.close()
