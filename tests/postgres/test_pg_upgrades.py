"""A database made by an earlier version, upgraded: what it held before is read the new
way (the dashboard's narrow rows of settled requests, a person's texts in id order)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg  # type: ignore[import-untyped]
import pytest
from pg_support import empty_database

import interlock
from interlock import RunConflict, Text
from interlock.broker import LocalBroker
from interlock.dashboard import NOBODY, UNKNOWN
from interlock.secret_key import GrantKeyId
from interlock.store import NewerDatabase, Query
from interlock.store._sql import Migration, load_migrations
from interlock.store.postgres import PostgresStore

pytestmark = pytest.mark.anyio


def before(name: str) -> list[Migration]:
    """The migrations of the version before the one named: those that came before it (a
    later one may build on it)."""
    migrations = load_migrations("postgresql")
    names = [m.name for m in migrations]
    assert name in names, name
    return migrations[: names.index(name)]


async def test_an_upgrade_counts_the_settled_requests_to_no_one_made_before(monkeypatch: pytest.MonkeyPatch) -> None:
    import interlock.store.postgres as postgres_store

    with empty_database() as url:
        with monkeypatch.context() as patch:  # a database of the version before
            patch.setattr(postgres_store, "load_migrations", lambda dialect: before("settled_rows_for_everyone"))
            async with interlock.connect(url) as broker:
                anyone = await broker.create(Text("Anyone?"), agent="pager")
                await broker.resolve(anyone.id, "me")
                await broker.expire((await broker.create(Text("Anyone, in time?"), agent="pager")).id)
                ann = await broker.create(Text("Ann?"), to="ann")
                await broker.resolve(ann.id, "yes")
                await broker.create(Text("Waiting?"), agent="pager")
        async with interlock.connect(url) as broker:
            dashboard = await broker.dashboard()
            assert (dashboard.pending_count, dashboard.answered_count, dashboard.expired_count) == (1, 2, 1)
            assert {p.person: (p.answered, p.expired) for p in dashboard.people} == {
                NOBODY: (0, 1),  # expired, to no one
                "ann": (1, 0),
                UNKNOWN: (1, 0),  # answered by no one named, to no one
            }
            # A request settled now has its row too, and loses it with its request.
            later = await broker.create(Text("Anyone, later?"))
            await broker.resolve(later.id, "me too")
            assert (await broker.dashboard()).answered_count == 3
            conn = await asyncpg.connect(url)
            try:
                rows = await conn.fetchval("SELECT count(*) FROM settled_requests WHERE recipient IS NULL")
                assert rows == 3
                await conn.execute("DELETE FROM requests WHERE id = $1", later.id)
                assert await conn.fetchval("SELECT count(*) FROM settled_requests WHERE id = $1", later.id) == 0
            finally:
                await conn.close()


async def test_an_upgrade_reads_a_person_s_texts_made_before_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    import interlock.store.postgres as postgres_store

    with empty_database() as url:
        with monkeypatch.context() as patch:
            patch.setattr(postgres_store, "load_migrations", lambda dialect: before("a_persons_texts_in_order"))
            async with interlock.connect(url) as broker:
                old = [await broker.create(Text(f"Deploy build {i}?"), to="ann") for i in range(3)]
                await broker.resolve(old[0].id, "done")
                await broker.create(Text("Deploy build 9?"), to="bob")
                store = broker.store
                assert isinstance(store, PostgresStore)
                await store._catch_up()
        async with interlock.connect(url) as broker:
            new = await broker.create(Text("Deploy build 3?"), to="ann")
            store = broker.store
            assert isinstance(store, PostgresStore)
            query = Query(recipient="ann", text="deploy")
            assert (await store._text_plan(query)).along == " to ann"
            assert [r.id for r in (await store.list(query)).items] == [new.id, *(r.id for r in old[::-1])]
            settled = (await store.list(Query(recipient="ann", text="build", settled=True))).items
            assert [r.id for r in settled] == [old[0].id]


async def test_an_upgrade_keeps_the_events_to_someone_with_data_of_any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    import interlock.store.postgres as postgres_store
    from interlock.followups import MAX_FOLLOWUP_LENGTH

    text = "".join(f"{i % 10}" for i in range(MAX_FOLLOWUP_LENGTH))
    with empty_database() as url:
        with monkeypatch.context() as patch:
            patch.setattr(postgres_store, "load_migrations", lambda dialect: before("events_to_them_from_the_index"))
            async with interlock.connect(url) as broker:
                asked = await broker.create(Text("Lunch?"), to="alice")
                run = await broker.start_run("deployer", run_id="run-1")
                await broker.send_message(run.id, text, by="alice")
        async with interlock.connect(url) as broker:  # the upgrade builds the new indexes over them
            later = await broker.send_message(run.id, "!" + text[1:], by="alice")
            assert later.followup is not None
            page = await broker.find_events(involving="alice")
            assert [(e.type, e.request_id) for e in page] == [
                ("created", asked.id),
                ("followup_queued", None),
                ("followup_queued", None),
            ]
            assert [e.data.get("text") for e in page] == [None, text, "!" + text[1:]]


async def test_an_upgrade_searches_the_texts_made_before_by_the_words_people_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import interlock.store.postgres as postgres_store

    with empty_database() as url:
        with monkeypatch.context() as patch:  # the version before: every string of a request
            patch.setattr(postgres_store, "load_migrations", lambda dialect: before("search_the_words_people_read"))
            async with interlock.connect(url) as broker:
                answered = await broker.create(Text("Deploy the build?"), to="ann", agent="deployer")
                # (naming nobody: this version asks the tokens table as it is now of a `by`, which that schema lacks)
                await broker.resolve(answered.id, "Zanzibar")
                waiting = await broker.create(Text("Rotate the keys?"), to="ann", agent="deployer")
                store = broker.store
                assert isinstance(store, PostgresStore)
                await store._catch_up()
                assert {r.id for r in (await broker.list(text="deployer")).items} == {answered.id, waiting.id}
        async with interlock.connect(url) as broker:

            async def found(text: str, **filters: str) -> set[str]:
                return {r.id for r in (await broker.list(text=text, **filters)).items}  # type: ignore[arg-type]

            assert await found("zanzibar") == await found("deploy build") == {answered.id}
            assert await found("rotate", recipient="ann") == {waiting.id}  # still narrowed by the name's word
            for word in ("ann", "deployer", "pending", "python", str(answered.created_at.year), answered.id):
                assert await found(word) == set(), word
            await broker.resolve(waiting.id, "Tonight", by="ann")
            assert await found("tonight") == await found("rotate") == {waiting.id}
            conn = await asyncpg.connect(url)
            try:  # the indexes and settings the texts had are made again
                indexes = await conn.fetch("SELECT indexname FROM pg_indexes WHERE tablename = 'request_texts'")
                assert {r[0] for r in indexes} == {"request_texts_pkey", "request_texts_body", "request_texts_to"}
                target = await conn.fetchval(
                    "SELECT attstattarget FROM pg_attribute"
                    " WHERE attrelid = 'request_texts'::regclass AND attname = 'body'"
                )
                assert target == 1000
            finally:
                await conn.close()


async def test_an_upgrade_records_the_grant_key_of_the_first_node_and_guards_its_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import interlock.store.postgres as postgres_store

    with empty_database() as url:
        with monkeypatch.context() as patch:  # nodes of the version before, on one secret key
            patch.setattr(postgres_store, "load_migrations", lambda dialect: before("grant_key_id"))
            async with interlock.connect(url) as broker:
                assert isinstance(broker, LocalBroker)
                assert await broker.check_secret_key("the-nodes-key-0123456789") is None
        async with interlock.connect(url) as broker:
            assert isinstance(broker, LocalBroker)
            assert await broker.store.grant_key_id() is None  # none recorded before: the first node's stands
            assert await broker.check_grant_key("kid-derived", derived=True) is None
            assert await broker.check_grant_key("kid-file") is not None
            assert await broker.store.grant_key_id() == GrantKeyId("kid-derived", derived=True)
            conn = await asyncpg.connect(url)
            try:  # a node of the version before may not write it (0038's guard)
                await conn.execute("SET interlock.schema_version = 40")
                with pytest.raises(asyncpg.PostgresError, match="later version of interlock"):
                    await conn.execute("DELETE FROM grant_key_id")
            finally:
                await conn.close()


async def test_runs_started_before_the_upgrade_that_holds_a_session_keep_an_exclusive_start_off_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import interlock.store.postgres as postgres_store

    with empty_database() as url:
        with monkeypatch.context() as patch:  # a database of the version before, two runs on one thread at once
            patch.setattr(postgres_store, "load_migrations", lambda dialect: before("one_unended_run_per_thread"))
            async with interlock.connect(url) as broker:
                await broker.start_run("mailer", session="t-9", run_id="r-1")
                await broker.start_run("mailer", session="t-9", run_id="r-2")
        async with interlock.connect(url) as broker:  # the upgrade takes them as they are
            with pytest.raises(RunConflict) as refused:
                await broker.start_run("mailer", session="t-9", run_id="r-3", exclusive=True)
            assert (refused.value.run_id, refused.value.status) == ("r-2", "running")
            await broker.complete_run("r-2")
            with pytest.raises(RunConflict) as refused:
                await broker.start_run("mailer", session="t-9", run_id="r-3", exclusive=True)
            assert refused.value.run_id == "r-1"
            await broker.complete_run("r-1")
            assert (await broker.start_run("mailer", session="t-9", run_id="r-3", exclusive=True)).id == "r-3"


async def test_a_database_migrated_by_a_later_version_is_refused_and_left_as_it_was() -> None:
    with empty_database() as url:
        async with interlock.connect(url):
            pass
        known = len(load_migrations("postgresql"))
        conn = await asyncpg.connect(url)
        try:  # what a later version's migration leaves behind
            await conn.execute(
                "INSERT INTO interlock_migrations (version, name) VALUES ($1, 'from_the_future')", known + 1
            )
        finally:
            await conn.close()
        with pytest.raises(
            NewerDatabase, match=rf"migrations \[{known + 1}\] are unknown to this one, which knows 1 to"
        ):
            async with interlock.connect(url):
                pass
        conn = await asyncpg.connect(url)
        try:
            assert await conn.fetchval("SELECT max(version) FROM interlock_migrations") == known + 1
            assert await conn.fetchval("SELECT count(*) FROM requests") == 0
        finally:
            await conn.close()


async def test_runs_left_running_before_the_upgrade_that_gives_them_up_get_the_default_window_from_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import interlock.store.postgres as postgres_store

    with empty_database() as url:
        with monkeypatch.context() as patch:  # a database of the version before: a running run had no deadline
            patch.setattr(
                postgres_store, "load_migrations", lambda dialect: before("a_running_run_given_up_when_abandoned")
            )
            async with interlock.connect(url) as broker:
                await broker.start_run("mailer", run_id="plain")
                await broker.start_run("mailer", run_id="long", max_duration=timedelta(days=30))
                run = await broker.start_run("mailer", run_id="parked")
                request = await broker.create(Text("Send?"), run=run.id)
                parked = await broker.park(run.id, state=None, waiting_on=[request.id])
            conn = await asyncpg.connect(url)
            try:
                await conn.execute("UPDATE runs SET expires_at = NULL WHERE status = 'running'")
            finally:
                await conn.close()
        since = datetime.now(UTC)
        async with interlock.connect(url) as broker:
            until = datetime.now(UTC)
            plain, long = await broker.get_run("plain"), await broker.get_run("long")
            assert plain.expires_at is not None
            assert since + timedelta(days=14) <= plain.expires_at <= until + timedelta(days=14)
            assert long.expires_at is not None
            assert since + timedelta(days=30) <= long.expires_at <= until + timedelta(days=30)
            assert (await broker.get_run("parked")).expires_at == parked.expires_at  # a pause's deadline, as it was
