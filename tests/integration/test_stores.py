"""What differs between stores: memory retention, SQLite durability and migrations."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

import interlock
from asgi_support import serve_in_process
from interlock import (
    Broker,
    Choice,
    Closed,
    Confirm,
    Expired,
    Form,
    MultiChoice,
    NotFound,
    Rejected,
    RunConflict,
    Status,
    Text,
)
from interlock.broker import _SCHEMES, LocalBroker, register_scheme
from interlock.model import build_request
from interlock.store import NewerDatabase, memory
from interlock.store import sqlite as sqlite_store
from interlock.store._sql import Migration, load_migrations
from interlock.store.memory import MemoryStore
from interlock.store.sqlite import SqliteStore
from later_version_support import loops_say_once_they_write_no_more, retry_soon

pytestmark = pytest.mark.anyio


async def test_memory_keeps_only_the_last_n_read_outcomes() -> None:
    async with interlock.connect("memory://", retention=2) as broker:
        ids = []
        for name in ("a", "b", "c"):
            request = await broker.create(Text("Name?"))
            await broker.resolve(request.id, name)
            ids.append(request.id)
        for request_id, name in zip(ids, "abc", strict=True):  # reading each counts it against the retention
            assert (await broker.wait(request_id)).answers == {"text": name}
        with pytest.raises(NotFound):
            await broker.wait(ids[0])
        assert (await broker.wait(ids[1])).answers == {"text": "b"}
        assert (await broker.wait(ids[2])).answers == {"text": "c"}


async def test_a_later_answer_never_evicts_an_unread_one() -> None:
    async with interlock.connect("memory://", retention=1) as broker:
        first = await broker.create(Text("Name?"))
        second = await broker.create(Text("Name?"))
        await broker.resolve(first.id, "Ada")
        await broker.resolve(second.id, "Grace")
        assert (await broker.wait(first.id)).answers == {"text": "Ada"}
        assert (await broker.wait(second.id)).answers == {"text": "Grace"}
        # Both read now: the retention of one keeps the later.
        with pytest.raises(NotFound):
            await broker.wait(first.id)
        assert (await broker.wait(second.id)).answers == {"text": "Grace"}


async def test_with_no_retention_an_answer_given_before_the_wait_is_read_once() -> None:
    async with interlock.connect("memory://?retention=0") as broker:
        request = await broker.create(Text("Name?"))
        await broker.resolve(request.id, "Ada")
        assert (await broker.wait(request.id)).answers == {"text": "Ada"}
        with pytest.raises(NotFound):
            await broker.wait(request.id)


async def test_memory_retention_zero_replays_nothing_but_still_wakes_waiters() -> None:
    async with interlock.connect("memory://?retention=0") as broker:
        request = await broker.create(Text("Name?"))
        waiter = asyncio.create_task(broker.wait(request.id))
        await anyio.wait_all_tasks_blocked()
        await broker.resolve(request.id, "Ada")
        with anyio.fail_after(10):
            assert (await waiter).answers == {"text": "Ada"}
        with pytest.raises(NotFound):
            await broker.wait(request.id)


async def test_the_memory_event_log_keeps_its_last_events_with_each_request_as_it_was_then() -> None:
    async with interlock.connect("memory://", event_retention=4) as broker:
        first = await broker.create(Text("Name?"))
        await broker.resolve(first.id, "Ada")
        second = await broker.create(Text("Age?"))
        await broker.reject(second.id, "not asked")
        third = await broker.create(Text("City?"))
        events = [e async for e in broker.events(after=0)]
        # The first request's created event fell out of the window of four.
        assert [(e.type, e.request_id) for e in events] == [
            ("answered", first.id),
            ("created", second.id),
            ("rejected", second.id),
            ("created", third.id),
        ]
        answered, created, rejected, _ = events
        assert answered.request is not None and answered.request.response is not None
        assert answered.request.response.answers == {"text": "Ada"}
        # A created event reads its request as created, even once it has settled since.
        assert created.request == second
        assert created.request is not None and created.request.status is Status.PENDING
        assert created.request.response is None
        assert rejected.request is not None and rejected.request.status is Status.REJECTED
        assert events[3].request == third
        for _ in range(4):  # every event of the first three requests falls out
            await broker.create(Text("More?"))
        events = [e async for e in broker.events(after=0)]
        assert [e.type for e in events] == ["created"] * 4
        assert third.id not in {e.request_id for e in events}


async def test_a_memory_notice_outlives_the_event_logs_copy_of_its_request() -> None:
    """A notice is the entry of its event in the log: once the log has let the event and
    its request go, the outbox still reads whom the request was to, and when."""
    store = MemoryStore(event_retention=2)
    first, _ = await store.insert(build_request(Text("Ship?"), to="alice", requester="bot"))
    for _ in range(3):
        await store.insert(build_request(Text("Merge?"), to="bob", requester="bot"))
    assert first.id not in {e.request_id for e in await store.events(after=0)}
    assert await store.next_outbox_due() == first.created_at
    notices = await store.claim_notices("loop-1", datetime.now(UTC), 30)
    assert [(n.type, n.recipient) for n in notices] == [("created", "alice")] + [("created", "bob")] * 3
    assert (notices[0].request_id, notices[0].at, notices[0].event_id) == (first.id, first.created_at, 1)


async def test_the_memory_event_log_reads_a_request_the_retention_let_go_as_it_was() -> None:
    asks = [
        Text("Name?", id="name", max_length=40),
        Confirm("Ship?", id="ship", grants=[{"with": "repo", "can": "push"}]),
        Choice("Pick", ["a", "b"], id="pick"),
        MultiChoice("Which?", ["x", "y"], id="which", required=False),
        Form("Form", {"type": "object", "properties": {"n": {"type": "integer"}}}, id="form", required=False),
    ]
    async with interlock.connect("memory://", retention=1) as broker:
        plain = await broker.create(Text("Colour?"))
        await broker.start_run("deployer", run_id="r1")
        full = await broker.create(
            asks, to="alice", title="t", context={"kind": "deploy", "tags": ["a"]}, session="s1", run="r1"
        )
        answer = {"name": "Ada", "ship": True, "pick": "a", "which": ["x", "y"], "form": {"n": 3}}
        await broker.resolve(plain.id, "blue", comment="c")
        await broker.resolve(full.id, answer, by="alice", grants=[{"with": "repo", "can": "push"}])
        settled = [await broker.get(plain.id), await broker.get(full.id)]
        for request in (plain, full):
            await broker.wait(request.id)
        for _ in range(3):  # the retention of one lets both go; their events stay
            other = await broker.create(Text("More?"))
            await broker.resolve(other.id, "x")
            await broker.wait(other.id)
        with pytest.raises(NotFound):
            await broker.get(plain.id)
        events = [e async for e in broker.events(after=0) if e.request_id in (plain.id, full.id)]
        assert [e.request for e in events] == [plain, full, settled[0], settled[1]]
        assert await broker.consume(full.id) and not await broker.consume(full.id)
        found = await broker.find_events(involving="alice")  # read by whom each request concerns
        assert [e.type for e in found if e.request_id is not None] == ["created", "answered", "consumed"]
        assert {e.request_id for e in found} == {full.id, None}  # and the grant issued


async def test_concurrent_sqlite_writes_commit_together_and_a_refused_one_changes_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'group.db'}"
    async with interlock.connect(url) as broker:
        await broker.close("shut")
        results = await asyncio.gather(
            *(broker.create(Text(f"Question {i}?"), channel="shut" if i == 5 else "open") for i in range(20)),
            return_exceptions=True,
        )
        assert isinstance(results[5], Closed)
        made = [r for r in results if not isinstance(r, BaseException)]
        assert len(made) == 19
        answered = await asyncio.gather(*(broker.resolve(r.id, "yes") for r in made))
        assert answered == [True] * 19
    async with interlock.connect(url) as again:  # what was acknowledged is in the file
        page = await again.list(channel="open", limit=100)
        assert sorted(r.id for r in page.items) == sorted(r.id for r in made)
        assert {r.status for r in page.items} == {Status.ANSWERED}
        assert (await again.list(channel="shut", limit=100)).items == []


async def test_settled_outcomes_replay_after_the_process_reconnects(
    connect: Callable[..., Broker], backend: str
) -> None:
    if backend == "memory":
        pytest.skip("a memory store does not outlive its process")
    async with connect() as broker:
        answered = await broker.create(Text("Name?"))
        await broker.resolve(answered.id, "Ada", by="alice")
        rejected = await broker.create(Text("Name?"))
        await broker.reject(rejected.id, "no")
        expired = await broker.create(Text("Name?"))
        with pytest.raises(Expired):
            await broker.wait(expired.id, timeout=0)
    async with connect() as broker:
        response = await broker.wait(answered.id)
        assert (response.answers, response.by) == ({"text": "Ada"}, "alice")
        with pytest.raises(Rejected, match="no"):
            await broker.wait(rejected.id)
        with pytest.raises(Expired):
            await broker.wait(expired.id)
        assert [e.type for e in [e async for e in broker.events()]] == [
            "created",
            "answered",
            "created",
            "rejected",
            "created",
            "expired",
        ]


async def test_sqlite_migrations_run_once_even_when_processes_open_together(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    brokers = [interlock.connect(url) for _ in range(5)]
    await asyncio.gather(*(b.open() for b in brokers))
    await brokers[0].create(Text("ok?"))
    for b in brokers:
        await b.aclose()
    with contextlib.closing(sqlite3.connect(tmp_path / "x.db")) as db, db:
        applied = db.execute("SELECT version, name FROM interlock_migrations ORDER BY version").fetchall()
        assert applied == [(m.version, m.name) for m in load_migrations("sqlite")]
        assert len(applied) >= 2
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_the_default_store_is_a_sqlite_file_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("INTERLOCK_URL", raising=False)
    async with interlock.connect() as broker:
        request = await broker.create(Text("Name?"))
    assert (tmp_path / "interlock.db").exists()
    monkeypatch.setenv("INTERLOCK_URL", f"sqlite:///{tmp_path / 'other.db'}")
    async with interlock.connect() as broker:
        with pytest.raises(NotFound):
            await broker.get(request.id)
    assert (tmp_path / "other.db").exists()


def test_an_unknown_store_url_is_refused() -> None:
    with pytest.raises(ValueError, match="unsupported store URL") as refused:
        interlock.connect("redis://localhost")
    assert "memory://" in str(refused.value) and "sqlite://" in str(refused.value)
    with pytest.raises(ValueError, match="needs a path"):
        interlock.connect("sqlite://")


@pytest.mark.parametrize("url", ["memory://", "sqlite:///x.db", "postgresql://nobody@127.0.0.1/x"])
def test_no_token_is_no_option_and_a_token_is_for_a_server_only(url: str) -> None:
    # One line for every URL: connect(url, token=os.environ.get("INTERLOCK_TOKEN")).
    assert isinstance(interlock.connect(url, token=None), interlock.Broker)
    with pytest.raises(ValueError, match=r"token= is for a server \(http:// or https://\)"):
        interlock.connect(url, token="itk_secret")


def test_each_store_reads_its_own_options_from_its_url() -> None:
    with pytest.raises(ValueError, match="retention"):
        interlock.connect("memory://?retention=many")
    with pytest.raises(ValueError, match="unknown store option 'colour'"):
        interlock.connect("sqlite:///x.db?colour=red")
    store = interlock.connect("sqlite:///x.db?poll_interval=0.25&synchronous=full", cache_bytes=1024).store
    assert isinstance(store, SqliteStore)
    assert (store.poll_interval, store.synchronous, store._cache.max_bytes) == (0.25, "FULL", 1024)


@pytest.mark.parametrize(
    ("url", "broker_option"),
    [("memory://", "pause_timeout"), ("sqlite:///x.db", "default_expiry"), ("http://127.0.0.1:1", "hook_timeout")],
)
def test_a_misspelt_option_is_told_the_brokers_options_too(url: str, broker_option: str) -> None:
    # `pause_timout=` had been answered "use event_retention, retention" (the memory
    # store's alone), as if `pause_timeout` were no option.
    with pytest.raises(ValueError, match=rf"unknown store option\(s\) pause_timout: .*{broker_option}"):
        interlock.connect(url, pause_timout=3)


async def test_a_registered_scheme_opens_with_its_own_factory() -> None:
    seen: list[tuple[str, dict[str, object]]] = []

    def factory(url: str, **options: object) -> MemoryStore:
        seen.append((url, options))
        return MemoryStore()

    register_scheme("scratch", factory)
    try:
        async with interlock.connect("scratch://here", hook_timeout=1.0, colour="red") as broker:
            assert isinstance(broker.store, MemoryStore)
    finally:
        del _SCHEMES["scratch"]
    assert seen == [("scratch://here", {"colour": "red"})]


async def test_a_second_connection_sees_the_first_ones_requests(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    async with interlock.connect(url) as a, interlock.connect(url) as b:
        request = await a.create(Text("Name?"), to="alice")
        assert list(await b.pending(recipient="alice")) == [request.id]
        waiter = asyncio.create_task(a.wait(request.id))
        await anyio.wait_all_tasks_blocked()
        assert await b.resolve(request.id, "Ada")
        with anyio.fail_after(10):
            assert (await waiter).answers == {"text": "Ada"}
        assert (await a.get(request.id)).status is Status.ANSWERED


@pytest.mark.parametrize("url", ["memory://", "sqlite"], indirect=False)
async def test_principals_and_tokens_are_kept_and_revoked(url: str, tmp_path: Path) -> None:
    if url == "sqlite":
        url = f"sqlite:///{tmp_path / 'x.db'}"
    from datetime import UTC, datetime

    from interlock.principals import Principal, hash_token, issue_token

    async with interlock.connect(url) as broker:
        store = broker.store
        await store.save_principal(Principal("alice", "human"))
        await store.save_principal(Principal("bot", "agent", owner="alice"))
        first = issue_token("bot", datetime.now(UTC))
        second = issue_token("bot", datetime.now(UTC))
        await store.save_token(first)
        await store.save_token(second)
        with pytest.raises(ValueError, match="no principal"):
            await store.save_token(issue_token("nobody", datetime.now(UTC)))

        assert await store.principal_for_token(hash_token(first.secret)) == Principal("bot", "agent", owner="alice")
        assert await store.principal_for_token(hash_token("il_guess")) is None
        assert [p.name for p in await store.list_principals()] == ["alice", "bot"]

        assert await store.revoke_tokens(token_id=first.id) == 1
        assert await store.principal_for_token(hash_token(first.secret)) is None
        assert await store.principal_for_token(hash_token(second.secret)) is not None
        assert await store.revoke_tokens(principal="bot") == 1
        assert await store.principal_for_token(hash_token(second.secret)) is None


async def test_a_sqlite_file_migrated_by_a_later_version_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    first = SqliteStore(str(path))
    await first.open()
    await first.aclose()
    known = len(load_migrations("sqlite"))
    with contextlib.closing(sqlite3.connect(path)) as db, db:  # what a later version's migration leaves behind
        db.execute("INSERT INTO interlock_migrations VALUES (?, 'from_the_future', 0)", (known + 1,))
    store = SqliteStore(str(path))
    with pytest.raises(NewerDatabase, match=rf"migrations \[{known + 1}\] are unknown to this one"):
        await store.open()
    with pytest.raises(RuntimeError, match="not open"):
        store.db  # noqa: B018  # the refused file is not held open
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        assert db.execute("SELECT max(version) FROM interlock_migrations").fetchone() == (known + 1,)
    with pytest.raises(NewerDatabase):  # through connect() too, before anything is written
        async with interlock.connect(f"sqlite:///{path}"):
            pass


async def test_a_sqlite_create_and_settlement_each_one_statement_still_write_their_events(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    async with interlock.connect(f"sqlite:///{path}") as broker:
        assert isinstance(broker, LocalBroker)
        plain = await broker.create(Text("Colour?"), to="alice")  # a lone write: no BEGIN of its own
        keyed = await broker.create(Text("Size?"), idempotency_key="k", channel="c")
        # several writes in one turn of the loop: one group commit, each in its savepoint
        together = await asyncio.gather(*(broker.create(Text(f"Shape {i}?"), to="bob") for i in range(3)))
        assert await broker.resolve(plain.id, "blue", by="alice")
        assert await broker.reject(keyed.id, "no")
        assert not await broker.resolve(plain.id, "red")  # settled already: no second event
        settled = await asyncio.gather(*(broker.cancel(r.id) for r in together))
        assert all(settled)
        events = [(e.type, e.request_id) for e in await broker.store.events()]
    ids = [plain.id, keyed.id, *(r.id for r in together)]
    assert events == [
        *(("created", i) for i in ids),
        ("answered", plain.id),
        ("rejected", keyed.id),
        *(("cancelled", r.id) for r in together),
    ]
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        rows = db.execute("SELECT type, request_id, recipient, at FROM events ORDER BY id").fetchall()
        times = dict(db.execute("SELECT id, created_at FROM requests").fetchall())
        settled_at = dict(db.execute("SELECT id, settled_at FROM requests").fetchall())
        assert db.execute("SELECT settled_by FROM requests WHERE id = ?", (plain.id,)).fetchone() == ("alice",)
    assert [(t, i, to) for t, i, to, _ in rows[:2]] == [("created", plain.id, "alice"), ("created", keyed.id, None)]
    assert [at for t, i, _, at in rows if t == "created"] == [times[i] for i in ids]
    assert [at for t, i, _, at in rows if t != "created"] == [settled_at[i] for i in ids]


async def test_an_upgrade_from_the_trigger_kept_outbox_and_index_loses_and_repeats_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import interlock.store.sqlite as sqlite_store

    path = tmp_path / "upgraded.db"
    derived = next(m for m in load_migrations("sqlite") if m.name == "derived_from_events")
    # ... and the column and triggers today's create and settlement statements use (made
    # later, and independent)
    today = ("dashboard_from_indexes", "one_statement_writes")
    before = [m for m in load_migrations("sqlite") if m.version < derived.version or m.name in today]
    with monkeypatch.context() as patch:  # a file made before the outbox and index were derived
        patch.setattr(sqlite_store, "load_migrations", lambda dialect: before)
        async with interlock.connect(f"sqlite:///{path}") as broker:
            old = [await broker.create(Text(f"Ship release {i}?"), to="alice") for i in range(3)]
            await broker.resolve(old[0].id, "canary green")
    async with interlock.connect(f"sqlite:///{path}") as broker:
        assert isinstance(broker, LocalBroker)
        await broker.resolve(old[1].id, "canary too")  # indexed by a trigger while pending
        new = await broker.create(Text("Ship the hotfix?"), to="alice")
        assert {r.id for r in (await broker.list(text="ship")).items} == {*(r.id for r in old), new.id}
        assert {r.id for r in (await broker.list(text="canary")).items} == {old[0].id, old[1].id}
        notices = await broker.store.claim_notices("loop", datetime.now(UTC), 60.0, limit=100)
        assert [(n.type, n.request_id) for n in notices] == [
            ("created", old[0].id),
            ("created", old[1].id),
            ("created", old[2].id),
            ("answered", old[0].id),
            ("answered", old[1].id),
            ("created", new.id),
        ]
        assert len({n.event_id for n in notices}) == len(notices)


async def test_a_run_parked_before_the_upgrade_that_dropped_its_waits_rows_is_ready_once_all_are_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import interlock.store.sqlite as sqlite_store

    path = tmp_path / "upgraded.db"
    before = [m for m in load_migrations("sqlite") if m.name != "runs_without_waits_rows"]
    assert len(before) == len(load_migrations("sqlite")) - 1
    with monkeypatch.context() as patch:  # a file of the version that kept `run_waits`
        patch.setattr(sqlite_store, "load_migrations", lambda dialect: before)
        async with interlock.connect(f"sqlite:///{path}") as broker:
            run = await broker.start_run("deployer")
            asks = [await broker.create(Confirm(f"Deploy to region {i}?"), run=run.id) for i in range(2)]
            await broker.park(run.id, state={"step": 1}, waiting_on=[r.id for r in asks])
        # the rows that version's park wrote beside `waiting_on`
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            db.executemany("INSERT INTO run_waits VALUES (?, ?)", [(run.id, r.id) for r in asks])
        async with interlock.connect(f"sqlite:///{path}") as broker:  # one answered before the upgrade
            assert await broker.resolve(asks[0].id, True)
            assert not (await broker.get_run(run.id)).ready
    async with interlock.connect(f"sqlite:///{path}") as broker:
        assert not (await broker.get_run(run.id)).ready
        assert await broker.resolve(asks[1].id, True)
        assert (await broker.get_run(run.id)).ready
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        assert db.execute("SELECT name FROM sqlite_master WHERE name = 'run_waits'").fetchall() == []


async def test_runs_started_before_the_upgrade_that_holds_a_session_keep_an_exclusive_start_off_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import interlock.store.sqlite as sqlite_store

    path = tmp_path / "upgraded.db"
    before = [m for m in load_migrations("sqlite") if m.name != "one_unended_run_per_thread"]
    assert len(before) == len(load_migrations("sqlite")) - 1
    with monkeypatch.context() as patch:  # a file of the version before, two runs on one thread at once
        patch.setattr(sqlite_store, "load_migrations", lambda dialect: before)
        async with interlock.connect(f"sqlite:///{path}") as broker:
            await broker.start_run("mailer", session="t-9", run_id="r-1")
            await broker.start_run("mailer", session="t-9", run_id="r-2")
    async with interlock.connect(f"sqlite:///{path}") as broker:  # the upgrade takes them as they are
        with pytest.raises(RunConflict) as refused:
            await broker.start_run("mailer", session="t-9", run_id="r-3", exclusive=True)
        assert (refused.value.run_id, refused.value.status) == ("r-2", "running")
        await broker.complete_run("r-2")
        with pytest.raises(RunConflict) as refused:
            await broker.start_run("mailer", session="t-9", run_id="r-3", exclusive=True)
        assert refused.value.run_id == "r-1"
        await broker.complete_run("r-1")
        assert (await broker.start_run("mailer", session="t-9", run_id="r-3", exclusive=True)).id == "r-3"


async def test_runs_left_running_before_the_upgrade_that_gives_them_up_get_the_default_window_from_then(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import interlock.store.sqlite as sqlite_store

    path = tmp_path / "upgraded.db"
    before = [m for m in load_migrations("sqlite") if m.name != "a_running_run_given_up_when_abandoned"]
    assert len(before) == len(load_migrations("sqlite")) - 1
    with monkeypatch.context() as patch:  # a file of the version before: a running run had no deadline
        patch.setattr(sqlite_store, "load_migrations", lambda dialect: before)
        async with interlock.connect(f"sqlite:///{path}") as broker:
            await broker.start_run("mailer", run_id="plain")
            await broker.start_run("mailer", run_id="long", max_duration=timedelta(days=30))
            run = await broker.start_run("mailer", run_id="parked")
            request = await broker.create(Text("Send?"), run=run.id)
            parked = await broker.park(run.id, state=None, waiting_on=[request.id])
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            db.execute("UPDATE runs SET expires_at = NULL WHERE status = 'running'")
    since = datetime.now(UTC).replace(microsecond=0)  # (the migration counts whole seconds)
    async with interlock.connect(f"sqlite:///{path}") as broker:
        until = datetime.now(UTC)
        plain, long = await broker.get_run("plain"), await broker.get_run("long")
        assert plain.expires_at is not None and since + timedelta(days=14) <= plain.expires_at <= until + timedelta(
            days=14
        )
        assert long.expires_at is not None and since + timedelta(days=30) <= long.expires_at <= until + timedelta(
            days=30
        )
        assert (await broker.get_run("parked")).expires_at == parked.expires_at  # a pause's deadline, as it was


async def test_the_sqlite_history_index_kept_up_with_the_event_log_matches_one_rebuilt_from_it(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    async with interlock.connect(f"sqlite:///{path}") as broker:
        made = [await broker.create(Text(f"Ship release {i}?"), title="Nightly") for i in range(6)]
        # a search takes the pending requests into the index; their answers come after it
        assert len((await broker.list(text="ship")).items) == 6
        for i, request in enumerate(made[:4]):
            await broker.resolve(request.id, "canary green" if i % 2 else "blocked")
        await broker.cancel(made[4].id)
        assert {r.id for r in (await broker.list(text="canary")).items} == {made[1].id, made[3].id}
        await broker.resolve((await broker.create(Text("Ship the hotfix?"))).id, "canary first")
    # closing took the last answer in too

    def matches(db: sqlite3.Connection) -> dict[str, list[int]]:
        words = ("ship", "nightly", "canary", "blocked", "release", "hotfix", "first")
        return {
            w: sorted(r[0] for r in db.execute("SELECT rowid FROM requests_text WHERE requests_text MATCH ?", (w,)))
            for w in words
        }

    db = sqlite3.connect(path)
    try:
        kept = matches(db)
        assert [len(kept[w]) for w in ("ship", "canary", "blocked", "hotfix", "first")] == [7, 3, 2, 1, 1]
        db.execute("INSERT INTO requests_text (requests_text, rank) VALUES ('integrity-check', 0)")
        # an index derived from the whole event log at once finds the same rows
        with db:
            db.execute("INSERT INTO requests_text (requests_text) VALUES ('delete-all')")
            db.execute("UPDATE derived SET event_id = 0 WHERE name = 'search'")
    finally:
        db.close()
    async with interlock.connect(f"sqlite:///{path}") as broker:
        assert len((await broker.list(text="hotfix")).items) == 1
    db = sqlite3.connect(path)
    try:
        assert matches(db) == kept
        db.execute("INSERT INTO requests_text (requests_text, rank) VALUES ('integrity-check', 0)")
    finally:
        db.close()


async def test_the_sqlite_store_keeps_temporary_data_in_memory_and_its_search_still_catches_up(
    tmp_path: Path,
) -> None:
    # A park's insert (with triggers, inside a larger transaction) needs a statement journal;
    # in a file, that cost a file created, written and unlinked every few cycles.
    async with interlock.connect(f"sqlite:///{tmp_path / 'temp.db'}") as broker:
        assert isinstance(broker, LocalBroker) and isinstance(broker.store, SqliteStore)
        assert broker.store.db.execute("PRAGMA temp_store").fetchone() == (2,)  # MEMORY
        request = broker.prepare(Confirm("Ship the hotfix?"), kind="approval", to="alice")
        run = await broker.start_parked("shipper", [request], state={"step": 1})
        assert run.waiting_on == (request.id,)
        # the catch-up's temporary tables were made in memory, and it still works
        assert [r.id for r in (await broker.list(text="hotfix")).items] == [request.id]


async def test_the_sqlite_log_is_checkpointed_in_a_worker_thread_not_in_the_commits(tmp_path: Path) -> None:
    from interlock.store.sqlite import AUTOCHECKPOINT_PAGES, CHECKPOINT_COMMITS

    path = tmp_path / "log.db"
    async with interlock.connect(f"sqlite:///{path}") as broker:
        assert isinstance(broker, LocalBroker) and isinstance(broker.store, SqliteStore)
        store = broker.store
        # SQLite's own checkpoint (in the commit that crosses its threshold) is only a backstop
        assert store.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == AUTOCHECKPOINT_PAGES
        before = path.stat().st_size
        for _ in range(CHECKPOINT_COMMITS * 2):
            request = await broker.create(Text("Name?"))
            await broker.resolve(request.id, "blue")
        if store._checkpointing is not None:
            await store._checkpointing
        # the pages reached the database file, long before the backstop's threshold
        assert path.stat().st_size > before
        assert len((await broker.list(limit=1000)).items) == CHECKPOINT_COMMITS * 2


async def test_a_few_large_sqlite_transactions_start_a_checkpoint_before_the_count_of_commits(tmp_path: Path) -> None:
    # Overdue requests expired in bulk (or a catch-up) write many rows in a few commits: the
    # worker thread checkpoints after `CHECKPOINT_CHANGES` rows, so SQLite's own checkpoint
    # does not come to run inside their commits.
    from interlock.store.sqlite import CHECKPOINT_CHANGES, CHECKPOINT_COMMITS

    path = tmp_path / "bulk.db"
    async with interlock.connect(f"sqlite:///{path}") as broker:
        assert isinstance(broker, LocalBroker) and isinstance(broker.store, SqliteStore)
        store = broker.store
        every = [await broker.create(Text(f"Name {i}?"), channel="bulk") for i in range(CHECKPOINT_CHANGES)]
        if store._checkpointing is not None:  # the creates' own commits may have started one
            await store._checkpointing
        store._commits = 0
        before = path.stat().st_size
        checkpoints: list[int] = []
        checkpoint = store._checkpoint

        def counted() -> None:  # the worker thread's checkpoint, counted once it has run
            checkpoint()
            checkpoints.append(1)

        store._checkpoint = counted  # type: ignore[method-assign]
        await broker.close("bulk")  # one transaction: every request withdrawn, with its event
        assert store._commits < CHECKPOINT_COMMITS
        if store._checkpointing is not None:  # it may be over already: its callback clears this
            await store._checkpointing
        assert checkpoints  # started by the rows, not the commits
        assert path.stat().st_size > before  # the pages reached the database file
        listed = (await broker.list(channel="bulk", limit=1000)).items
        assert sorted(r.id for r in listed) == sorted(r.id for r in every)
        assert {r.status for r in listed} == {Status.CANCELLED}


async def test_a_memory_store_without_an_outbox_keeps_only_the_newest_unrouted_notices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Nothing routes notices in a process that runs no outbox: a long-lived one must not
    # keep two for every request it ever made.
    monkeypatch.setattr(memory, "_UNROUTED", 3)
    store = MemoryStore()
    async with LocalBroker(store) as broker:
        first = await broker.create(Text("Name?"))
        await broker.resolve(first.id, "Ada")
        second = await broker.create(Text("Age?"))
        await broker.resolve(second.id, "36")
        now = datetime.now(UTC)
        claimed = await store.claim_notices("outbox", now, lease=30)
        # The oldest notice (the first request's creation) was dropped; the newest three are kept.
        assert [(n.type, n.request_id) for n in claimed] == [
            ("answered", first.id),
            ("created", second.id),
            ("answered", second.id),
        ]
        third = await broker.create(Text("City?"))  # drops the oldest, claimed, and its lease
        later = now + timedelta(seconds=60)  # every lease run out: a claim sees every notice kept
        assert [(n.type, n.request_id) for n in await store.claim_notices("other", later, lease=30)] == [
            ("created", second.id),
            ("answered", second.id),
            ("created", third.id),
        ]
        assert await store.route_notice(claimed[0], [], "outbox", later) == 0  # dropped: nothing to route


def _indexed_words(path: Path) -> set[str]:
    """The words of the texts in SQLite's search index, read from the index itself."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("CREATE VIRTUAL TABLE temp.words USING fts5vocab(main, requests_text, col)")
        return {row[0] for row in db.execute("SELECT term FROM temp.words WHERE col = 'body'")}


def _vocabulary(path: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return {row[0] for row in db.execute("SELECT term FROM search_terms")}


async def test_the_sqlite_search_vocabulary_holds_every_word_of_the_index(tmp_path: Path) -> None:
    path = tmp_path / "words.db"
    async with interlock.connect(f"sqlite:///{path}") as one, interlock.connect(f"sqlite:///{path}") as two:
        made = [await one.create(Text(f"Rotate key {i}?"), title="Keys") for i in range(3)]
        assert len((await two.list(text="rotat")).items) == 3  # taken in by the other process's catch-up
        await one.resolve(made[0].id, "Zanzibar rotated")
        await one.reject(made[1].id, reason="Quixotic")
        assert [r.id for r in (await one.list(text="zanzi")).items] == [made[0].id]
        assert [r.id for r in (await two.list(text="quix")).items] == [made[1].id]
    words = _indexed_words(path)
    assert {"rotate", "zanzibar", "quixotic", "keys"} <= words
    assert words <= _vocabulary(path)


async def test_a_sqlite_catch_up_indexes_only_the_texts_of_its_own_events(tmp_path: Path) -> None:
    """The texts a catch-up takes in pass through a table of the connection's own: a row
    left there (by a chunk cut short some other way than by its transaction) must not go
    into the index beside the next chunk's."""
    path = tmp_path / "taken.db"
    async with interlock.connect(f"sqlite:///{path}") as broker:
        store = broker.store
        assert isinstance(store, SqliteStore)
        first = await broker.create(Text("Rotate the keys?"))
        assert [r.id for r in (await broker.list(text="rotate")).items] == [first.id]
        store.db.execute("INSERT INTO temp.texts_taken VALUES (424242, 'zanzibar', '')")
        second = await broker.create(Text("Renew the certificate?"))
        assert [r.id for r in (await broker.list(text="renew")).items] == [second.id]
        assert (await broker.list(text="zanzibar")).items == []
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT rowid FROM requests_text WHERE requests_text MATCH 'zanzibar'").fetchall() == []
        db.execute("INSERT INTO requests_text (requests_text, rank) VALUES ('integrity-check', 0)")


async def test_an_sqlite_file_indexed_before_the_vocabulary_has_it_made_on_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "upgraded.db"
    async with interlock.connect(f"sqlite:///{path}") as broker:
        made = await broker.create(Text("Deploy the build?"))
        await broker.resolve(made.id, "Zanzibar")
    with contextlib.closing(sqlite3.connect(path)) as db, db:  # as the version before it left the file
        (version,) = db.execute("SELECT version FROM interlock_migrations WHERE name = 'search_terms'").fetchone()
        db.execute("DROP TABLE search_terms")
        db.execute("DELETE FROM interlock_migrations WHERE version = ?", (version,))
    async with interlock.connect(f"sqlite:///{path}") as broker:
        assert _vocabulary(path) >= {"deploy", "build", "zanzibar"}
        assert [r.id for r in (await broker.list(text="zanz")).items] == [made.id]
        assert [r.id for r in (await broker.list(text="deploy build")).items] == [made.id]
    assert _indexed_words(path) <= _vocabulary(path)


async def test_an_sqlite_file_indexed_with_every_string_is_searched_by_the_words_people_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import interlock.store.sqlite as sqlite_store

    path = tmp_path / "indexed-before.db"
    newest = sqlite_store.load_migrations("sqlite")
    with monkeypatch.context() as patch:  # the version before indexed every string of a request
        before = [m for m in newest if m.version < 26]  # 0026 narrowed the search to the words people read
        patch.setattr(sqlite_store, "load_migrations", lambda dialect: before)
        async with interlock.connect(f"sqlite:///{path}") as broker:
            answered = await broker.create(Text("Deploy the build?"), to="alice", agent="deployer")
            # (naming nobody: this version asks the tokens table as it is now of a `by`, which that schema lacks)
            await broker.resolve(answered.id, "Zanzibar")
            waiting = await broker.create(Text("Rotate the keys?"), to="alice", agent="deployer")
    # Its index, as that version's catch-up made it (this version's reads the view of 0026,
    # which that file lacks: it logs that the index was left behind, and made nothing).
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("INSERT INTO requests_text (requests_text) VALUES ('delete-all')")
        db.execute(
            "INSERT INTO requests_text (rowid, body, recipient) SELECT rowid,"
            " (SELECT group_concat(value, ' ') FROM json_tree(doc) WHERE type = 'text') ||"
            " ifnull(' ' || (SELECT group_concat(value, ' ') FROM json_tree(response) WHERE type = 'text'), ''),"
            " 'x' || hex(recipient) FROM requests"
        )
        db.execute("CREATE VIRTUAL TABLE temp.words USING fts5vocab(main, requests_text, col)")
        db.execute("INSERT OR IGNORE INTO search_terms SELECT term FROM temp.words WHERE col = 'body'")
    assert {"alice", "deployer", "pending", str(answered.created_at.year)} <= _indexed_words(path)
    async with interlock.connect(f"sqlite:///{path}") as broker:

        async def found(text: str) -> set[str]:
            return {r.id for r in (await broker.list(text=text)).items}

        assert await found("zanzibar") == await found("deploy build") == {answered.id}
        assert await found("rotate") == {waiting.id}
        for word in ("alice", "deployer", "pending", "python", str(answered.created_at.year), answered.id):
            assert await found(word) == set(), word
        await broker.resolve(waiting.id, "Tonight", by="alice")  # a text indexed on upgrade, replaced
        assert await found("tonight") == await found("rotate") == {waiting.id}
    words = _indexed_words(path)
    assert {"deploy", "zanzibar", "rotate", "tonight"} <= words
    assert not {"alice", "deployer", "pending", "python", str(answered.created_at.year)} & words
    assert words <= _vocabulary(path) and not {"alice", "pending"} & _vocabulary(path)
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("INSERT INTO requests_text (requests_text, rank) VALUES ('integrity-check', 0)")


BOUND = 10.0
"""Seconds any wait in these tests may take before it fails."""


def _snapshot(path: Path) -> tuple[object, ...]:
    """What a SQLite file holds that a write would change: every request and event."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        requests = db.execute("SELECT id, status, response FROM requests ORDER BY id").fetchall()
        events = db.execute("SELECT id, type, request_id FROM events ORDER BY id").fetchall()
    return requests, events


async def test_a_sqlite_process_left_running_refuses_to_write_once_a_later_version_migrated_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "shared.db"
    known = len(load_migrations("sqlite"))
    # A later version's migration whose trigger writes what this version writes itself
    # (as 0021's did for versions before it): a create's event, written twice.
    later = Migration(
        known + 1,
        "created_events_by_trigger",
        "CREATE TRIGGER requests_created_event AFTER INSERT ON requests BEGIN\n"
        "INSERT INTO events (type, request_id, at) VALUES ('created', new.id, new.created_at);\nEND;\n",
    )
    async with interlock.connect(f"sqlite:///{path}") as older:
        waiting = await older.create(Text("Colour?"), to="alice")
        with monkeypatch.context() as m:
            m.setattr(sqlite_store, "load_migrations", lambda dialect: [*load_migrations(dialect), later])
            newer = interlock.connect(f"sqlite:///{path}")
            await newer.open()
        try:
            before = _snapshot(path)
            refused = rf"upgraded by a later version of interlock .*{known + 1:04d}_created_events_by_trigger.*"
            refused += r"refused and changed nothing; restart this process"
            with pytest.raises(NewerDatabase, match=refused):
                await older.create(Text("Size?"), to="alice")  # one statement of its own
            with pytest.raises(NewerDatabase, match=refused):
                await older.resolve(waiting.id, "blue", by="alice")  # one statement of its own
            with pytest.raises(NewerDatabase, match=refused):
                await older.reject(waiting.id, "no", by="alice")
            with pytest.raises(NewerDatabase, match=refused):  # in a transaction: a read before the insert
                await older.create(Text("Shape?"), to="alice", idempotency_key="k")
            together = await asyncio.gather(  # several in one commit, each refused
                *(older.create(Text(f"Shape {i}?"), to="bob") for i in range(3)), return_exceptions=True
            )
            assert [type(outcome) for outcome in together] == [NewerDatabase] * 3
            with pytest.raises(NewerDatabase, match=refused):
                await older.start_run("bot")  # any write, not only a request's
            assert _snapshot(path) == before

            # It still reads: the request as it was, the list, the search.
            assert (await older.get(waiting.id)).status is Status.PENDING
            assert [r.id for r in (await older.list(recipient="alice")).items] == [waiting.id]
            # (its search leaves the index to the later version, which keeps it up to date)
            assert [r.id for r in (await newer.list(text="colour")).items] == [waiting.id]
            assert [r.id for r in (await older.list(text="colour")).items] == [waiting.id]

            # The later version writes on, each event once.
            assert await newer.resolve(waiting.id, "blue", by="alice")
            made = await newer.create(Text("Size?"), to="alice")
            events = [(e.type, e.request_id) for e in await newer.find_events(request=made.id)]
            assert events == [("created", made.id), ("created", made.id)]  # its migration's trigger and its own
        finally:
            await newer.aclose()


async def test_a_process_left_on_a_file_a_later_version_migrated_says_once_that_its_loops_write_no_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Its expiry and delivery loops try again seldom, and say why once, without a traceback:
    every try fails the same way until the process restarts on the later version."""
    path = tmp_path / "left.db"
    later = Migration(len(load_migrations("sqlite")) + 1, "from_the_future", "CREATE TABLE later (x);")
    retry_soon(monkeypatch)
    async with interlock.connect(f"sqlite:///{path}") as older:
        assert isinstance(older, LocalBroker)
        await older.create(Confirm("Restart the workers?"), to="alice", timeout=0.3)  # due soon, and routed
        with monkeypatch.context() as m:
            m.setattr(sqlite_store, "load_migrations", lambda dialect: [*load_migrations(dialect), later])
            newer = interlock.connect(f"sqlite:///{path}")
            await newer.open()
            await newer.aclose()
        before = _snapshot(path)

        await loops_say_once_they_write_no_more(older, caplog)
        assert _snapshot(path) == before


async def test_a_server_on_a_sqlite_file_a_later_version_migrated_answers_its_writes_503_and_reads_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "served.db"
    later = Migration(len(load_migrations("sqlite")) + 1, "from_the_future", "CREATE TABLE later (x);")
    body = {"asks": [{"type": "text", "prompt": "Name?"}]}
    async with serve_in_process(f"sqlite:///{path}", auth=False) as server, server.client() as client:
        made = await client.post("/api/v1/requests", json=body)
        assert made.status_code == 201, made.text
        assert (await client.get("/healthz")).status_code == 200
        with monkeypatch.context() as m:
            m.setattr(sqlite_store, "load_migrations", lambda dialect: [*load_migrations(dialect), later])
            async with interlock.connect(f"sqlite:///{path}"):
                pass
        # Out of a load balancer's rotation before any write is tried on it.
        health = await client.get("/healthz")
        assert health.status_code == 503, health.text
        assert "from_the_future" in health.json()["detail"]
        refused = await client.post("/api/v1/requests", json=body)
        assert refused.status_code == 503, refused.text
        assert refused.json()["code"] == "unavailable"
        assert "from_the_future" in refused.json()["detail"]
        assert "restart this process on the later version" in refused.json()["detail"]
        assert int(refused.headers["Retry-After"]) >= 1
        listed = await client.get("/api/v1/requests")
        assert [r["id"] for r in listed.json()["items"]] == [made.json()["id"]]
        # A person's page of the request too (its view goes unrecorded: a write).
        page = await client.get(f"/requests/{made.json()['id']}")
        assert page.status_code == 200, page.text
        assert "Name?" in page.text
