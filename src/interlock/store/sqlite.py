"""The embedded default: a SQLite file in WAL mode, shared by any number of processes.

Statements run with the standard `sqlite3` module right on the event loop: one statement
costs about 12 us there against about 65 us through a worker thread, and every transaction
here is short. The loop is never blocked on a lock: the busy timeout is zero, a write that
finds the database locked by another process backs off asynchronously and tries again.
Transactions never await inside, so the writes of one process are serialized by the loop.
A read that runs longer than `READ_ON_LOOP` (a filter that few rows match, read along a
long index; pages not yet cached) is stopped there and run again in a worker thread, on a
connection of its own, so that one slow list never holds up everyone else's.

`synchronous=NORMAL` (the default) keeps every commit through a crash of the process; use
`synchronous=FULL` to keep it through a power cut as well, at the cost of an fsync a commit.

What fails for now is raised as `interlock.errors.Unavailable`, from where a statement's
error reaches a caller: `_retry` (every read on the loop, and a write's wait for a lock),
`_write` (a write's own failure, alone or in a group commit) and `_read_apart` (a read in
a worker thread). It is the database still locked by another connection after
`lock_timeout` seconds (a URL option, 30 by default), a disk I/O error, a disk full
(`_classified`); anything else (a constraint, a statement of ours that is wrong, a file
that is no database) stays the error it is.

A file this process cannot open, or may only read, is refused at `open` on one line that
names it and the likely cause, found by looking once it failed (`_sqlite_files`): a folder
not there, a folder, a file, a -wal or -shm file this user may not write, a filesystem
mounted read-only or full; SQLite's own error ("unable to open database file") comes last.

A file a later version of interlock has migrated is refused at `open` (`NewerDatabase`),
and so is every write once a later version migrates the file this store has open: a later
schema may do itself what this version's writes do by hand (since 0021 triggers write a
create's and a settlement's events). Each write checks in its own transaction that no
migration newer than it knows is applied (a migration commits with its row): a write in
BEGIN IMMEDIATE reads the newest one first, and a lone write's statement carries the check
(`interlock_refuse_write()`), a few thousand instructions a create and answer. Reads go on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

from .._backoff import Backoff
from ..errors import Unavailable
from ..model import (
    Claim,
    IssuedGrant,
    Request,
    Response,
    Run,
    RunStatus,
    Status,
    epoch_microseconds,
    from_epoch_microseconds,
    grant_event_data,
    request_to_dict,
    response_to_dict,
    run_event_data,
)
from ..outbox import Delivery, LinkUse, Notice
from ..principals import IssuedSession, IssuedSignInLink, IssuedToken, Principal, WebSession
from . import EventQuery, NewerDatabase, PageBudget, Query, RunClaim
from . import _sqlite_files as sqlite_files
from ._sql import (
    CUT_OFF,
    DEFAULT_CACHE_BYTES,
    DELIVERY_COLUMNS,
    CutOff,
    RequestCache,
    Settled,
    SqlStore,
    Transaction,
    closed_channel,
    encode_document,
    encode_json,
    find_events_sql,
    load_migrations,
    load_queries,
    newer_while_open,
    numbered,
    refuse_newer,
    request_from_row,
    row_size,
    run_from_row,
)
from ._url import url_options
from ._wakeup import Wakeup

__all__ = ["SqliteStore", "from_url"]

log = logging.getLogger("interlock")

T = TypeVar("T")
Q = load_queries("sqlite") | load_queries("sqlite", "followups")


def _positional(sql: str) -> tuple[str, tuple[int, ...] | None]:
    """A query `SqlStore` runs with positional arguments: its statement, and which
    argument each `?` takes (None when they are taken in order, once each)."""
    statement, taken = numbered(sql)
    return statement, None if taken == tuple(range(len(taken))) else taken


_NUMBERED = {name: _positional(sql) for name, sql in Q.items()}


def _in_order(name: str) -> str:
    """The statement of a query bound from a tuple: each parameter used once, in order."""
    sql, taken = _NUMBERED[name]
    if taken is not None:
        raise RuntimeError(f"the parameters of {name!r} are not each used once, in order")
    return sql


_INSERT_REQUEST = _in_order("insert_new_request")
_SETTLE_REQUEST = _in_order("settle_row")
# The same two, each its own transaction, refused on a schema this process does not know
# (their first argument the newest migration it knows: see `SqliteStore._transaction`).
_INSERT_REQUEST_KNOWN = _in_order("insert_new_request_known")
_SETTLE_REQUEST_KNOWN = _in_order("settle_row_known")
_SYNCHRONOUS = {"OFF", "NORMAL", "FULL", "EXTRA"}
MAX_TERMS = 32
"""The most indexed words a search's word may stand for and be asked for one by one (see
migration 0023); a word that stands for more is matched as a prefix by the index."""

DERIVE_CHUNK = 1000
"""The most events taken into the search index or the outbox a transaction."""
DERIVE_HOLD = 0.02
"""Seconds a catch-up's transaction should hold the event loop (and the write lock): each
one is sized from how long the one before took, between `DERIVE_FEWEST` and
`DERIVE_CHUNK` events. A thousand events of search text took about 100 ms on a slow host,
enough to hold up every other caller while a large backlog was caught up."""
DERIVE_FEWEST = 50
"""The fewest events a catch-up's transaction takes, however long they take."""
DUE_CHUNK = 1000
"""The most overdue requests expired a transaction (sized like a catch-up's, to hold the
loop about `DERIVE_HOLD`); the expiry loop comes back at once for the rest."""
DUE_FEWEST = 10
"""The fewest overdue requests expired a transaction, however long they take."""
CHECKPOINT_COMMITS = 100
"""Commits of this process between checkpoints of the write-ahead log, each run in a
worker thread. SQLite's own checkpoint runs inside the commit that takes the log past a
thousand pages, and holds up the event loop for its fsyncs: about half of all the time
spent committing, in stalls of up to 15 ms."""
CHECKPOINT_CHANGES = 1_000
"""Rows written (the connection's `total_changes`, triggers' included) that also start a
checkpoint in a worker thread, before `CHECKPOINT_COMMITS`: a few large transactions (a
catch-up, overdue requests expired in bulk) would otherwise take the log past
`AUTOCHECKPOINT_PAGES`, and SQLite's own checkpoint would run inside their commits (each
then held the loop about 120 ms, against 20-30 ms)."""
AUTOCHECKPOINT_PAGES = 10_000
"""SQLite's own checkpoint, left on so that the log stays bounded even with no worker
thread checkpointing it (a process that writes rarely, a thread that cannot keep up)."""
READ_ON_LOOP = 0.005
"""Seconds a read may run on the event loop: one that takes longer is stopped and run
again in a worker thread (`SqliteStore._read`). Nearly every read takes well under a
millisecond; the page of a list at a million requests, 1-3 ms."""
PROGRESS_STEPS = 5_000
"""SQLite virtual-machine steps between two looks at a read's deadline (each a call into
Python, well under a microsecond; 5,000 steps take about 50-200 us)."""
SLOW_READERS = 2
"""Worker threads (and connections) for the reads that outran `READ_ON_LOOP`: slow reads
wait for each other there, and leave the default thread pool to the broker's own work."""
SLOW_MEMORY = 60.0
"""Seconds for which a statement that outran `READ_ON_LOOP` goes straight to a worker
thread, without trying the loop first: a slow list asked for again costs the loop nothing."""
_SLOW_KEPT = 256  # statements remembered as slow, at most


def _fetch(cursor: sqlite3.Cursor, budget: int | None) -> list[Any]:
    """The rows of a statement; with `budget` (a list's rows: status, doc, response), up to
    the first one a `PageBudget` of it does not take. The rows after it are never read:
    SQLite reads a row when stepped to, and the statement is reset here."""
    if budget is None:
        return cursor.fetchall()
    rows: list[Any] = []
    page = PageBudget(budget)
    try:
        for row in cursor:
            rows.append(row)
            if not page.takes(row_size(row[1], row[2])):
                break
    finally:
        cursor.close()
    return rows


def _us(value: datetime | None) -> int | None:
    """A time as the microseconds since the epoch a time column holds, counted exactly."""
    return None if value is None else epoch_microseconds(value)


def _now() -> datetime:
    return datetime.now(UTC)


_from_us = from_epoch_microseconds
"""A time column's microseconds since the epoch as a time."""


def _delete_session_tokens(db: sqlite3.Connection, tokens: set[str]) -> None:
    """Delete those of `tokens` that were made for a web session and have none left (the
    session was just deleted): nobody holds their secret."""
    db.executemany(Q["delete_session_token"], [{"token": token} for token in sorted(tokens)])


def _access_event(type_: str, at: int | None, data: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of `insert_event` for a sign-in event: it concerns no request and
    is shown to nobody (the hubs of every node end the streams it names)."""
    return {
        "type": type_,
        "request_id": None,
        "at": at,
        "data": encode_json(dict(data)),
        "recipient": None,
        "requester": None,
        "session": None,
        "run": None,
    }


def _run_event(type_: str, run: Run) -> dict[str, Any]:
    """The parameters of `insert_event` for an event about `run` (never its state)."""
    return {
        "type": type_,
        "request_id": None,
        "at": _us(run.updated_at),
        "data": encode_json(run_event_data(run)),
        "recipient": None,
        "requester": run.requester,
        "session": run.session,
        "run": run.id,
    }


def _request_row(request: Request, doc: str) -> tuple[Any, ...]:
    """The arguments of `insert_new_request` for a new request, its document `doc`."""
    o = request.origin
    return (
        request.id,
        request.kind,
        request.status.value,
        request.to,
        request.requester,
        o.session,
        o.channel,
        o.agent,
        o.run,
        request.idempotency_key,
        _us(request.created_at),
        _us(request.expires_at),
        doc,
    )


def _run_row(run: Run) -> dict[str, Any]:
    """The parameters of `insert_run` for a new run."""
    return {
        "id": run.id,
        "agent": run.agent,
        "session": run.session,
        "requester": run.requester,
        "status": run.status.value,
        "max_duration": run.max_duration.total_seconds() if run.max_duration is not None else None,
        "created_at": _us(run.created_at),
        "updated_at": _us(run.updated_at),
        "expires_at": _us(run.expires_at),
    }


def _json_or_none(value: Any) -> str | None:
    return None if value is None else encode_json(value)


def _grant_event(type_: str, grant: IssuedGrant, at: int | None) -> dict[str, Any]:
    """The parameters of `insert_event` for a grant's issuance or revocation: shown to its
    audience (as the recipient) and its issuer (as the requester)."""
    return {
        "type": type_,
        "request_id": None,
        "at": at,
        "data": encode_json(grant_event_data(grant)),
        "recipient": grant.audience,
        "requester": grant.issuer,
        "session": None,
        "run": None,
    }


_OPTIONS = {"poll_interval": float, "synchronous": str, "lock_timeout": float, "cache_bytes": int}


def from_url(url: str, **options: Any) -> SqliteStore:
    """`sqlite:///relative.db` or `sqlite:////absolute.db`, options as query parameters."""
    path = url[len("sqlite:///") :].split("?", 1)[0] if url.startswith("sqlite:///") else ""
    if not path:
        raise ValueError("a SQLite URL needs a path: sqlite:///relative.db or sqlite:////absolute.db")
    ours, _ = url_options(url, _OPTIONS, options)
    return SqliteStore(path, **ours)


def _next_chunk(size: int, took: float, fewest: int, most: int) -> int:
    """The size of a bulk write's next chunk (a catch-up's, an expiry's), from how long
    one of `size` took: what would hold the loop `DERIVE_HOLD`, at most twice or half the
    last, between `fewest` and `most`."""
    grow = min(max(DERIVE_HOLD / max(took, 1e-6), 0.5), 2.0)
    return max(fewest, min(most, round(size * grow)))


class _Outran(Exception):
    """A read on the event loop ran past `READ_ON_LOOP` and was stopped (`SqliteStore._read`)."""


_Write = tuple[Callable[[sqlite3.Connection], Any], "asyncio.Future[Any]", bool, bool]
"""A write waiting for the next group commit: its transaction body, its caller's future,
whether other processes are to be told of it, and whether it is one statement (`lone`)."""


class SqliteStore(SqlStore):
    def __init__(
        self,
        path: str,
        *,
        poll_interval: float = 1.0,
        synchronous: str = "NORMAL",
        lock_timeout: float = 30.0,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        if synchronous.upper() not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {sorted(_SYNCHRONOUS)}")
        self.path = os.path.abspath(path)
        self.poll_interval = poll_interval
        self.synchronous = synchronous.upper()
        self.lock_timeout = lock_timeout
        self._db: sqlite3.Connection | None = None
        self._wakeup = Wakeup(self.path)
        # Parsed requests by id, up to `cache_bytes` of them in memory (`row_size`). A settled one never
        # changes again, so it is served from here; a pending one only after a cheap
        # check that it is still pending.
        self._cache = RequestCache(cache_bytes)
        self._batch: list[_Write] | None = None  # writes waiting for the next turn's group commit
        self._batch_loop: asyncio.AbstractEventLoop | None = None
        self._turn_taken: asyncio.AbstractEventLoop | None = None  # the loop whose current turn committed a write
        self._committing: set[asyncio.Task[None]] = set()  # batches backing off from a lock
        self._commits = 0  # since the last checkpoint
        self._changes_at_checkpoint = 0  # the connection's total_changes when it was started
        self._checkpointing: asyncio.Future[None] | None = None
        self._checkpointer: sqlite3.Connection | None = None  # used in worker threads, one at a time
        self._derive_size: dict[str, int] = {}  # events a catch-up's transaction takes, by what it derives
        self._due_size = 100  # overdue requests an expiry's transaction takes (see `settle_pending`)
        # Reads that outran READ_ON_LOOP: the deadline of the read running on the loop (None
        # while none runs: writes are never stopped), the statements known to be slow (until
        # when), the worker threads and their connections, idle ones kept.
        self._read_due: float | None = None
        self._slow: dict[str, float] = {}
        self._slow_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._readers: list[sqlite3.Connection] = []
        # The newest migration this process knows, once it has migrated the file (None
        # before): a write finding a newer one applied is refused (`_transaction`).
        self._known: int | None = None

    # -- life cycle ----------------------------------------------------------------------

    async def open(self) -> None:
        """Open the file, making it and its tables if need be. A file this process cannot
        open or write is refused with a message that names it and the likely cause, found
        by looking, SQLite's own error last: a `ConnectionError`, or `Unavailable` for a
        disk full or failing."""
        if sqlite_files.unwritable(self.path):  # SQLite would open it read-only, to fail at the first write
            raise ConnectionError(self._refusal())
        made = sqlite_files.make_private(self.path)
        try:
            await self._open()
        except BaseException as exc:
            db, self._db = self._db, None
            if db is not None:
                db.close()
            if made:  # a refusal changes nothing: the file made here goes, if nothing was written to it
                sqlite_files.remove_if_empty(self.path)
            cause = exc.__cause__ if isinstance(exc, Unavailable) else exc
            if not isinstance(cause, sqlite3.Error) or (isinstance(cause, sqlite3.OperationalError) and _locked(cause)):
                raise  # (a newer database, a lock held past lock_timeout: their own errors say it)
            if isinstance(exc, Unavailable):
                raise Unavailable(self._refusal(cause, for_now=True)) from cause
            raise ConnectionError(self._refusal(cause)) from cause
        if not made and (files := sqlite_files.open_to_all(self.path)):
            log.warning(
                "every user of this machine may read the SQLite store at %s, which holds every request and "
                "answer and the notification channels' secrets: chmod 600 %s",
                self.path,
                " ".join(files),
            )

    def _refusal(self, error: BaseException | None = None, *, for_now: bool = False) -> str:
        why = sqlite_files.why(self.path, error)
        return (
            f"cannot open the SQLite store at {self.path}{' for now' if for_now else ''}"
            f"{f': {why}' if why else ''}{f' (SQLite: {error})' if error is not None else ''}"
        )

    async def _open(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db = db
        db.execute("PRAGMA busy_timeout = 0")
        await self._retry(lambda: db.execute("PRAGMA journal_mode = WAL").fetchone())
        db.execute(f"PRAGMA synchronous = {self.synchronous}")
        db.execute("PRAGMA foreign_keys = ON")
        db.execute(f"PRAGMA wal_autocheckpoint = {AUTOCHECKPOINT_PAGES}")
        # Temporary data in memory, not in files of the temporary folder: a statement's own
        # journal (an insert with triggers inside a larger transaction, as a park is, made a
        # file, wrote it and unlinked it every few cycles), and the catch-up's tables below.
        # What they hold stays small here: a read on the loop is stopped after READ_ON_LOOP
        # and run again in a thread, whose connection keeps SQLite's default.
        db.execute("PRAGMA temp_store = MEMORY")
        # What fails a lone write on a schema this process does not know (`_known_schema`).
        db.create_function("interlock_refuse_write", 0, _refuse_write)
        db.set_progress_handler(self._past_due, PROGRESS_STEPS)
        # Where the search's catch-up reads the texts it takes in, and finds their words.
        db.execute(Q["make_texts_taken"])
        db.execute(Q["make_new_texts"])
        db.execute(Q["make_new_terms"])
        await self._write(self._migrate, notify=False)

    async def aclose(self) -> None:
        self._wakeup.close()
        await self._stop_deriving()
        if self._db is not None:
            # Leave the search index up to date for whoever opens the file next.
            try:
                await self._derive("search")
            except (sqlite3.Error, Unavailable, NewerDatabase) as exc:
                log.warning("the search index was left behind the event log on close: %s", exc)
        if self._checkpointing is not None:
            await asyncio.shield(self._checkpointing)  # never fails: see _checkpoint
        checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            checkpointer.close()
        pool, self._slow_pool = self._slow_pool, None
        if pool is not None:  # a read still running in a thread stops now, with an error (`_closing`)
            await asyncio.to_thread(pool.shutdown)
        for reader in self._readers:
            reader.close()
        self._readers.clear()
        if self._db is not None:
            self._db.close()
            self._db = None

    def on_foreign_change(self, callback: Callable[[], None], settled: Callable[[Request], None] | None = None) -> None:
        self._wakeup.open(callback)

    def _migrate(self, db: sqlite3.Connection) -> None:
        db.execute(
            "CREATE TABLE IF NOT EXISTS interlock_migrations "
            "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)"
        )
        applied = {row[0] for row in db.execute("SELECT version FROM interlock_migrations")}
        migrations = load_migrations("sqlite")
        refuse_newer(str(self.path), applied, migrations)
        for migration in migrations:
            if migration.version in applied:
                continue
            for statement in _statements(migration.sql):
                db.execute(statement)
            db.execute(
                "INSERT INTO interlock_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.name, int(time.time() * 1_000_000)),
            )
        # Every migration and its row commit in this one transaction: a write of another
        # process that finds no row newer than it knows runs on the schema it knows.
        self._known = migrations[-1].version

    def _known_schema(self, db: sqlite3.Connection, sql: str, args: tuple[Any, ...]) -> sqlite3.Cursor:
        """Run a lone write's statement that refuses a schema this process does not know
        (`interlock_refuse_write()`, its first argument `_known`): its refusal is
        `NewerDatabase`."""
        try:
            return db.execute(sql, args)
        except sqlite3.OperationalError as exc:
            refused = None if _locked(exc) else self._newer(db)
            if refused is None:
                raise
            raise refused from None

    def _newer(self, db: sqlite3.Connection) -> NewerDatabase | None:
        """The refusal of a write on a file migrated since this process opened it: by a
        process of a later version, whose schema may do what this version's writes do by
        hand (since 0021 triggers write the events of a create and a settlement, which an
        earlier version wrote itself), or no longer have what they write. None while
        every migration applied is one this process knows."""
        known = self._known
        if known is None:
            return None
        newer = db.execute(Q["migrations_after"], {"known": known}).fetchall()
        if not newer:
            return None
        return newer_while_open(self._place(), [f"{version:04d}_{name}" for version, name in newer], known)

    # -- transactions --------------------------------------------------------------------

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError("the SQLite store is not open")
        return self._db

    async def _retry(self, fn: Callable[[], T]) -> T:
        """Run `fn`; while another process holds the lock, back off without blocking the loop,
        for up to `lock_timeout` seconds (then `Unavailable`)."""
        backoff = Backoff(0.0005, 0.05)  # a lock is held for a short transaction: look again soon
        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if not _locked(exc):
                    if _for_now(exc):
                        raise _unavailable(exc) from exc
                    raise
                if time.monotonic() > deadline:
                    raise Unavailable(
                        f"the store is unavailable for now: the SQLite database stayed locked for "
                        f"{self.lock_timeout:g} s (another connection holds its lock)"
                    ) from exc
            await asyncio.sleep(backoff.next())

    async def _write(self, fn: Callable[[sqlite3.Connection], T], *, notify: bool = True, lone: bool = False) -> T:
        """Run `fn` in a write transaction and return what it returns, once committed.

        The first write in a turn of the event loop commits at once. The writes asked for
        later in the same turn share one transaction at the start of the next (a group
        commit), each in a savepoint of its own, so that one that raises changes nothing and
        the others still commit: a lone writer waits for nobody, and a hundred concurrent
        agents pay a few commits, not a hundred.

        `lone` says that `fn` runs one statement and nothing else (no read before it that
        the statement depends on): committed alone, that statement is its own transaction,
        without a BEGIN and COMMIT around it.
        """
        self.db  # noqa: B018  # refuse a closed store here, in the caller
        loop = asyncio.get_running_loop()
        if self._turn_taken is not loop:  # (a flag left by a loop that stopped is not this loop's)
            self._turn_taken = loop
            loop.call_soon(self._end_turn)
            try:
                ((ok, value),) = self._transaction([fn], lone=lone)
            except sqlite3.OperationalError as exc:
                if not _locked(exc):
                    if _for_now(exc):
                        raise _unavailable(exc) from exc
                    raise
                # another process writes: back off and try again
                ((ok, value),) = await self._retry(lambda: self._transaction([fn], lone=lone))
            if not ok:
                raise _classified(value)
            if notify:
                self._wakeup.notify()
                self._derive_soon()
            return cast(T, value)
        fut: asyncio.Future[Any] = loop.create_future()
        if self._batch is None or self._batch_loop is not loop:
            self._batch, self._batch_loop = [], loop
            loop.call_soon(self._commit_batch)
        self._batch.append((fn, fut, notify, lone))
        return cast(T, await fut)

    async def _write_in(self, body: Callable[[Transaction], Coroutine[Any, Any, T]], *, notify: bool = True) -> T:
        """Run a shared write's body as a write of this store: its statements run at once
        (`_Transaction`), so it runs to its end inside the transaction (`_to_end`)."""
        return await self._write(lambda db: _to_end(body(_Transaction(db))), notify=notify)

    async def _change(self, name: str, *args: Any, notify: bool = True) -> int:
        return await self._write(lambda db: _execute(db, name, args).rowcount, notify=notify)

    def _end_turn(self) -> None:
        self._turn_taken = None

    def _commit_batch(self) -> None:
        batch, self._batch = self._batch or [], None
        batch = [entry for entry in batch if not entry[1].done()]  # a cancelled write is not made
        if not batch:
            return
        try:
            outcomes = self._transaction([entry[0] for entry in batch], lone=len(batch) == 1 and batch[0][3])
        except sqlite3.OperationalError as exc:
            if _locked(exc):  # another process writes: back off, off this turn
                task = asyncio.get_running_loop().create_task(self._commit_later(batch))
                self._committing.add(task)
                task.add_done_callback(self._committing.discard)
                return
            outcomes = [(False, exc)] * len(batch)
        except Exception as exc:
            outcomes = [(False, exc)] * len(batch)
        self._settle_batch(batch, outcomes)

    async def _commit_later(self, batch: list[_Write]) -> None:
        try:
            lone = len(batch) == 1 and batch[0][3]
            outcomes = await self._retry(lambda: self._transaction([entry[0] for entry in batch], lone=lone))
        except Exception as exc:
            outcomes = [(False, exc)] * len(batch)
        self._settle_batch(batch, outcomes)

    def _transaction(
        self, writes: list[Callable[[sqlite3.Connection], Any]], *, lone: bool = False
    ) -> list[tuple[bool, Any]]:
        """Run writes in one transaction: (True, result) or (False, exception) for each.
        One that raises is rolled back alone (to its savepoint). A `lone` write (one write of
        one statement) runs as SQLite's own transaction of that statement."""
        db = self.db
        if lone:
            try:
                outcome = (True, writes[0](db))
            except sqlite3.OperationalError as exc:
                if _locked(exc):
                    raise  # nothing was written: try again (`_retry`)
                outcome = (False, exc)
            except Exception as exc:
                outcome = (False, exc)
            self._committed()
            return [outcome]
        db.execute("BEGIN IMMEDIATE")
        try:
            # A process of a later version may have migrated the file since this one opened
            # it: write nothing on a schema this version does not know (a lone write checks
            # the same in its statement: `insert_new_request_known`, `settle_row_known`).
            if self._known is not None and db.execute(Q["newest_migration"]).fetchone()[0] > self._known:
                raise self._newer(db) or NewerDatabase(f"{self.path} was upgraded by a later version of interlock")
            outcomes: list[tuple[bool, Any]] = []
            if len(writes) == 1:
                try:
                    outcomes.append((True, writes[0](db)))
                except Exception as exc:
                    db.execute("ROLLBACK")
                    return [(False, exc)]
            else:
                for fn in writes:
                    db.execute("SAVEPOINT one_write")
                    try:
                        outcomes.append((True, fn(db)))
                    except Exception as exc:
                        db.execute("ROLLBACK TO one_write")
                        outcomes.append((False, exc))
                    db.execute("RELEASE one_write")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        self._committed()
        return outcomes

    def _committed(self) -> None:
        """Count a commit; every `CHECKPOINT_COMMITS`, or `CHECKPOINT_CHANGES` rows written,
        checkpoint the log in a worker thread."""
        self._commits += 1
        if self._checkpointing is not None:
            return
        changes = self.db.total_changes
        if self._commits >= CHECKPOINT_COMMITS or changes - self._changes_at_checkpoint >= CHECKPOINT_CHANGES:
            self._commits, self._changes_at_checkpoint = 0, changes
            self._checkpointing = asyncio.get_running_loop().run_in_executor(None, self._checkpoint)
            self._checkpointing.add_done_callback(self._checkpointed)

    def _checkpoint(self) -> None:
        """Copy the write-ahead log's committed pages into the database file (in a worker
        thread, on a connection of its own). Passive: it waits for no writer or reader, and
        copies what no reader still needs; the next commit then starts the log afresh."""
        try:
            if self._checkpointer is None:
                self._checkpointer = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                self._checkpointer.execute("PRAGMA busy_timeout = 0")
            self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:  # another process checkpointing: the next one goes on
            log.debug("a checkpoint of %s did not run: %s", self.path, exc)

    def _checkpointed(self, _: asyncio.Future[None]) -> None:
        self._checkpointing = None

    def _settle_batch(self, batch: list[_Write], outcomes: list[tuple[bool, Any]]) -> None:
        if any(ok and notify for (ok, _), (_, _, notify, _) in zip(outcomes, batch, strict=True)):
            self._wakeup.notify()
            self._derive_soon()
        for (_, fut, _, _), (ok, value) in zip(batch, outcomes, strict=True):
            if fut.done():
                continue
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(_classified(value))

    # -- what is derived from the event log -------------------------------------------------

    def _is_open(self) -> bool:
        return self._db is not None

    def _known_migration(self) -> int | None:
        return self._known

    def _place(self) -> str:
        return str(self.path)

    async def _catch_up(self) -> None:
        await self._derive("search")

    async def _derive(self, name: str) -> None:
        """Bring `name` (the `search` index or the `outbox`'s notices) up to date with every
        event committed so far, a transaction a chunk of events sized to hold the loop for
        about `DERIVE_HOLD` (and no further: the events appended meanwhile are the next
        catch-up's)."""
        ((after, last),) = await self._read(Q["derived_behind"], {"name": name})
        size = self._derive_size.get(name, DERIVE_CHUNK)
        while after < last:
            upto = min(last, after + size)
            started = time.perf_counter()
            derived = await self._write(functools.partial(self._derive_chunk, name=name, upto=upto), notify=False)
            if derived and upto - after == size:  # (a last, shorter chunk says less)
                # Timed with its commit: FTS5 merges segments there.
                size = _next_chunk(size, time.perf_counter() - started, DERIVE_FEWEST, DERIVE_CHUNK)
                self._derive_size[name] = size
            after = upto

    async def _before_search(self, query: Query) -> dict[str, tuple[str, ...] | None]:
        # A search sees every change committed before it; on a file a later version has
        # migrated, it reads on: that version's processes keep the index up to date.
        with contextlib.suppress(NewerDatabase):
            await self._derive("search")
        # The words each of the search's stands for (see migration 0023): a word of plain
        # letters and digits is indexed as it is written, lower case; any other is left to
        # the index's own prefix match (None), as is one that stands for too many.
        terms: dict[str, tuple[str, ...] | None] = {}
        for word in query.words:
            if not (word.isascii() and word.isalnum()):
                terms[word] = None
                continue
            high = word[:-1] + chr(ord(word[-1]) + 1)
            rows = await self._read(Q["terms_with_prefix"], {"low": word, "high": high, "most": MAX_TERMS + 1})
            terms[word] = tuple(row[0] for row in rows) if len(rows) <= MAX_TERMS else None
        return terms

    @staticmethod
    def _derive_chunk(db: sqlite3.Connection, *, name: str, upto: int) -> bool:
        """Derive the events up to `upto` in this transaction; False if another process had
        done it."""
        # Read again in the transaction: another process may have gone on meanwhile.
        ((after, _),) = db.execute(Q["derived_behind"], {"name": name}).fetchall()
        if after >= upto:
            return False
        window = {"after": after, "upto": upto}
        if name == "search":
            db.execute(Q["unindex_settled"], window)
            # The new texts, read out of their JSON once, go into the index and give their
            # words. Emptied first: a row left over would go into the index twice.
            db.execute(Q["forget_taken_texts"])
            db.execute(Q["take_texts"], window)
            db.execute(Q["index_taken_texts"])
            db.execute(Q["words_of_taken_texts"])
            db.execute(Q["keep_new_terms"])
            db.execute(Q["forget_new_texts"])
        else:
            db.execute(Q["derive_notices"], window)
        db.execute(Q["set_derived"], {"name": name, "upto": upto})
        return True

    async def _read(
        self, sql: str, params: dict[str, Any] | Sequence[Any] = (), budget: int | None = None
    ) -> list[Any]:
        """The rows of a read, run on the event loop for as long as `READ_ON_LOOP`; a read
        that takes longer is stopped there and run again in a worker thread, where it takes
        what it takes while the loop serves everyone else. For the next `SLOW_MEMORY`
        seconds the same statement goes to the thread at once."""
        db = self.db
        if self._slow:
            until = self._slow.get(sql)
            if until is not None and until > time.monotonic():
                return await self._read_apart(sql, params, budget)
        try:
            return await self._retry(lambda: self._read_here(db, sql, params, budget))
        except _Outran:
            if len(self._slow) >= _SLOW_KEPT:
                del self._slow[next(iter(self._slow))]
            self._slow[sql] = time.monotonic() + SLOW_MEMORY
            log.debug("a read outran %s s on the event loop; run in a worker thread: %s", READ_ON_LOOP, sql)
            return await self._read_apart(sql, params, budget)

    def _read_here(
        self, db: sqlite3.Connection, sql: str, params: dict[str, Any] | Sequence[Any], budget: int | None = None
    ) -> list[Any]:
        self._read_due = time.monotonic() + READ_ON_LOOP
        try:
            return _fetch(db.execute(sql, params), budget)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode == sqlite3.SQLITE_INTERRUPT and self._read_due is None:
                raise _Outran from None
            raise
        finally:
            self._read_due = None

    def _past_due(self) -> int:
        """SQLite's progress handler: stop the read running on the loop once it is due
        (writes run with no deadline, and are never stopped)."""
        due = self._read_due
        if due is not None and time.monotonic() > due:
            self._read_due = None  # (says the stop was ours)
            return 1
        return 0

    def _closing(self) -> int:
        """The progress handler of the worker threads' reads: stop once the store closes."""
        return 1 if self._slow_pool is None else 0

    async def _read_apart(
        self, sql: str, params: dict[str, Any] | Sequence[Any], budget: int | None = None
    ) -> list[Any]:
        """A read in a worker thread of the store's own, on a read-only connection of its
        own: it sees the same committed state as one on the loop would (WAL readers take a
        snapshot and wait for no writer)."""
        self.db  # noqa: B018  # refuse a closed store
        if self._slow_pool is None:
            self._slow_pool = concurrent.futures.ThreadPoolExecutor(SLOW_READERS, thread_name_prefix="interlock-read")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._slow_pool, self._read_in_thread, sql, params, budget)
        except sqlite3.OperationalError as exc:  # its own busy timeout ran out, a disk error
            if _for_now(exc):
                raise _unavailable(exc) from exc
            raise

    def _read_in_thread(self, sql: str, params: dict[str, Any] | Sequence[Any], budget: int | None = None) -> list[Any]:
        try:
            reader = self._readers.pop()
        except IndexError:
            reader = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            reader.execute(f"PRAGMA busy_timeout = {int(self.lock_timeout * 1000)}")
            reader.execute("PRAGMA query_only = ON")
            reader.set_progress_handler(self._closing, PROGRESS_STEPS)
        try:
            return _fetch(reader.execute(sql, params), budget)
        finally:
            if self._slow_pool is None:  # the store closed meanwhile
                reader.close()
            else:
                self._readers.append(reader)

    async def _rows(self, name: str, *args: Any) -> list[Any]:
        sql, taken = _NUMBERED[name]
        return await self._read(sql, args if taken is None else [args[i] for i in taken])

    async def _rows_of(self, sql: str, params: dict[str, Any], *, budget: int | None = None) -> list[Any]:
        return await self._read(sql, params, budget)

    def _time(self, value: Any) -> datetime:
        return _from_us(value)

    def _stamp(self, value: datetime) -> Any:
        return _us(value)

    def _array(self, values: Sequence[str]) -> Any:
        return encode_json(list(values))

    def _find_events_sql(self, query: EventQuery) -> tuple[str, dict[str, Any]]:
        return find_events_sql(query, indexed_by=True)

    # -- requests ------------------------------------------------------------------------

    async def _insert(self, request: Request, doc: str) -> tuple[Request, bool, int]:
        row = _request_row(request, doc)
        created = request, True, row_size(doc)
        channel, key = request.origin.channel, request.idempotency_key
        if channel is None and key is None:
            # Nothing to look up first: the insert (and its event) is the whole write.
            def insert_only(db: sqlite3.Connection) -> tuple[Request, bool, int]:
                self._known_schema(db, _INSERT_REQUEST_KNOWN, (self._known, *row))
                return created

            return await self._write(insert_only, lone=True)

        def insert(db: sqlite3.Connection) -> tuple[Request, bool, int]:
            if channel is not None:
                closed = db.execute(Q["is_closed"], {"channel": channel, "requester": request.requester}).fetchone()
                if closed is not None:
                    raise closed_channel(channel)
            if key is not None:
                found = db.execute(Q["find_idempotent"], {"requester": request.requester or "", "key": key}).fetchone()
                if found is not None:
                    return request_from_row(*found), False, row_size(found[1], found[2])
            db.execute(_INSERT_REQUEST, row)
            return created

        return await self._write(insert)

    async def _settle(self, request: Request, at: datetime, answer: str | None) -> bool:
        stamp = _us(at)
        response = request.response
        row = (self._known, request.status.value, stamp, answer, None if response is None else response.by, request.id)
        return await self._write(lambda db: self._known_schema(db, _SETTLE_REQUEST_KNOWN, row).rowcount == 1, lone=True)

    async def _settle_in(self, tx: Transaction, request: Request, at: datetime, answer: str | None) -> bool:
        return _settle_row(cast(_Transaction, tx).db, request, _us(at), answer)

    async def settle_pending(
        self, status: Status, response: Response, *, channel: str | None = None, due: datetime | None = None
    ) -> list[Request]:
        params: dict[str, Any]
        if due is not None:
            # A chunk a transaction, sized to hold the loop about `DERIVE_HOLD`: the expiry
            # loop comes back for the rest (29,000 requests due at once, as after a long
            # stop, held it 4.7 s in one transaction).
            sql, params = Q["pending_due"], {"due": _us(due), "most": self._due_size}
        elif channel is not None:
            sql, params = Q["pending_in_channel"], {"channel": channel}
        else:
            sql, params = Q["pending_all"], {}
        if due is not None and not (await self._read(sql, params | {"most": 1})):
            return []  # the common case for the expiry loop: take no write lock

        at, answer = _us(response.at), encode_document(response_to_dict(response))

        def settle_all(db: sqlite3.Connection) -> tuple[list[tuple[Request, int]], int]:
            settled = []
            rows = db.execute(sql, params).fetchall()
            for row in rows:
                request = request_from_row(*row).settle(status, response)
                if _settle_row(db, request, at, answer):
                    settled.append((request, row_size(row[1], answer)))
            return settled, len(rows)

        started = time.perf_counter()
        settled, read = await self._write(settle_all)
        if due is not None and read == self._due_size:  # (a last, shorter chunk says less)
            # Timed with its commit: scattered rows, many pages.
            self._due_size = _next_chunk(self._due_size, time.perf_counter() - started, DUE_FEWEST, DUE_CHUNK)
        for request, size in settled:
            self._cache.put(request, size)
        return [request for request, _ in settled]

    async def close_channel(self, channel: str, response: Response, *, requester: str | None = None) -> list[Request]:
        at = _us(response.at)
        closure = {"channel": channel, "requester": requester or "", "closed_at": at}
        if requester is None:
            sql, params = Q["pending_in_channel"], {"channel": channel}
        else:
            sql, params = Q["pending_in_channel_for"], {"channel": channel, "requester": requester}

        answer = encode_document(response_to_dict(response))

        def close(db: sqlite3.Connection) -> list[tuple[Request, str]]:
            db.execute(Q["insert_closed_channel"], closure)
            settled = []
            for row in db.execute(sql, params).fetchall():
                request = request_from_row(*row).settle(Status.CANCELLED, response)
                if _settle_row(db, request, at, answer):
                    settled.append((request, answer))
            return settled

        return self._remember_all(await self._write(close))

    async def _append_event(self, *values: Any) -> int:
        def append(db: sqlite3.Connection) -> int:
            cursor = _execute(db, "insert_event", values)
            assert cursor.lastrowid is not None
            return cursor.lastrowid

        return await self._write(append)

    async def consume(self, request_id: str, by: str | None, at: datetime) -> bool:
        params = {"id": request_id, "by": by, "at": _us(at)}
        event = {"type": "consumed", "id": request_id, "at": params["at"]}

        def consume(db: sqlite3.Connection) -> bool:
            if db.execute(Q["consume_request"], params).rowcount != 1:
                return False
            db.execute(Q["insert_request_event"], event)
            return True

        return await self._write(consume)

    async def release(self, request_id: str, at: datetime) -> bool:
        params = {"id": request_id, "at": _us(at)}
        return await self._write(lambda db: db.execute(Q["release_request"], params).rowcount == 1)

    # -- claims and views ----------------------------------------------------------------

    async def claim(self, request_id: str, by: str, at: datetime) -> Claim | None:
        params = {"id": request_id, "by": by, "at": _us(at)}
        event = {"type": "claimed", "id": request_id, "at": params["at"], "data": encode_json({"by": by})}

        def claim(db: sqlite3.Connection) -> list[Any]:
            if db.execute(Q["insert_claim"], params).rowcount == 1:
                db.execute(Q["insert_request_event_data"], event)
            return db.execute(Q["get_claim"], params).fetchall()

        return self._claim(request_id, await self._write(claim))

    async def unclaim(self, request_id: str, by: str | None, at: datetime) -> Claim | None:
        params = {"id": request_id, "by": by}

        def unclaim(db: sqlite3.Connection) -> list[Any]:
            removed = db.execute(Q["delete_claim"], params).fetchall()
            if removed:
                data = encode_json({"by": removed[0][0]})
                db.execute(
                    Q["insert_request_event_data"], {"type": "unclaimed", "id": request_id, "at": _us(at), "data": data}
                )
            return removed

        return self._claim(request_id, await self._write(unclaim))

    async def note_viewed(self, request_id: str, by: str, at: datetime) -> bool:
        params = {"id": request_id, "by": by, "at": _us(at)}
        event = {"type": "viewed", "id": request_id, "at": params["at"], "data": encode_json({"by": by})}

        def view(db: sqlite3.Connection) -> bool:
            if db.execute(Q["insert_view"], params).rowcount != 1:
                return False
            db.execute(Q["insert_request_event_data"], event)
            return True

        return await self._write(view)

    # -- grants ---------------------------------------------------------------------------

    def _insert_grant(self, db: sqlite3.Connection, grant: IssuedGrant, type_: str = "granted") -> None:
        row: dict[str, Any] = {
            "id": grant.id,
            "resource": grant.with_,
            "ability": grant.can,
            "issuer": grant.issuer,
            "audience": grant.audience,
            "issued_at": _us(grant.issued_at),
            "expires_at": _us(grant.expires_at),
            "request_id": grant.request_id,
            "ask_id": grant.ask_id,
            "option_id": grant.option_id,
        }
        db.execute(Q["insert_grant_row"], row)
        db.execute(Q["insert_event"], _grant_event(type_, grant, row["issued_at"]))

    async def _settle_granting(self, request: Request, at: datetime, answer: str | None) -> bool:
        grants = request.response.grants if request.response is not None else ()
        stamp = _us(at)

        def settle(db: sqlite3.Connection) -> bool:
            if not _settle_row(db, request, stamp, answer):
                return False
            for grant in grants:
                self._insert_grant(db, grant)
            return True

        return await self._write(settle)

    async def give_grant(self, grant: IssuedGrant) -> None:
        await self._write(lambda db: self._insert_grant(db, grant))

    # -- principals and tokens ------------------------------------------------------------

    async def save_token(self, token: IssuedToken) -> None:
        row = {"id": token.id, "hash": token.hash, "principal": token.principal, "created_at": _us(token.created_at)}
        row["for_session"] = int(token.for_session)
        try:
            await self._write(lambda db: db.execute(Q["insert_token"], row), notify=False)
        except sqlite3.IntegrityError:
            raise ValueError(f"no principal named {token.principal!r}") from None

    async def revoke_tokens(self, *, token_id: str | None = None, principal: str | None = None) -> int:
        now = _us(_now())

        def revoke(db: sqlite3.Connection) -> int:
            if token_id is not None:
                live = db.execute(Q["live_tokens_by_id"], {"id": token_id}).fetchall()
                db.execute(Q["revoke_token"], {"id": token_id, "now": now})
            else:
                live = db.execute(Q["live_tokens_by_principal"], {"principal": principal}).fetchall()
                db.execute(Q["revoke_principal_tokens"], {"principal": principal, "now": now})
            if not live:
                return 0
            for token, _ in live:
                db.execute(Q["end_token_sessions"], {"token": token})
            data = {"principal": live[0][1], "tokens": [t for t, _ in live], "all": token_id is None}
            db.execute(Q["insert_event"], _access_event("token_revoked", now, data))
            return len(live)

        return await self._write(revoke)

    # -- web sessions ---------------------------------------------------------------------

    def _session(self, db: sqlite3.Connection, session_hash: str, now: datetime) -> WebSession | None:
        return self._web_session(db.execute(Q["get_session"], {"hash": session_hash, "now": _us(now)}).fetchone())

    async def start_session(self, token_hash: str, session: IssuedSession) -> WebSession | None:
        row = {
            "hash": session.hash,
            "id": session.id,
            "csrf": session.csrf,
            "created_at": _us(session.created_at),
            "expires_at": _us(session.expires_at),
            "token_hash": token_hash,
        }

        def start(db: sqlite3.Connection) -> WebSession | None:
            ended = db.execute(Q["delete_expired_sessions"], {"now": row["created_at"]}).fetchall()
            _delete_session_tokens(db, {token for (token,) in ended})
            if db.execute(Q["insert_session"], row).rowcount != 1:
                return None
            return self._session(db, session.hash, session.created_at)

        return await self._write(start, notify=False)

    async def end_session(self, session_hash: str) -> WebSession | None:
        def end(db: sqlite3.Connection) -> WebSession | None:
            ended = self._session(db, session_hash, datetime.fromtimestamp(0, UTC))
            deleted = db.execute(Q["delete_session"], {"hash": session_hash}).fetchall()
            _delete_session_tokens(db, {token for (token,) in deleted})
            if not deleted or ended is None:
                return None
            data = {"principal": ended.principal.name, "session": ended.id}
            db.execute(Q["insert_event"], _access_event("signed_out", _us(_now()), data))
            return ended

        return await self._write(end)

    # -- runs ----------------------------------------------------------------------------

    async def _lock_requests_of_run(self, tx: Transaction, run_id: str) -> None:
        pass  # the writer holds the whole database

    def _run_in(self, db: sqlite3.Connection, run_id: str) -> Run | None:
        row = db.execute(Q["get_run"], {"id": run_id}).fetchone()
        return None if row is None else run_from_row(row, _from_us)

    async def insert_run(self, run: Run, *, exclusive: bool = False) -> tuple[Run, bool]:
        row = _run_row(run)

        def insert(db: sqlite3.Connection) -> tuple[Run, bool]:
            inserted = _one(db.execute(Q["insert_sole_run" if exclusive else "insert_run"], row))
            if inserted is None:
                existing = self._run_in(db, run.id)
                if existing is None:  # not its id: a run of its agent on its session has not ended
                    busy = db.execute(Q["unended_run_on_session"], row).fetchone()
                    assert busy is not None
                    existing = run_from_row(busy, _from_us)
                return existing, False
            stored = run_from_row(inserted, _from_us)
            db.execute(Q["insert_event"], _run_event("run_started", stored))
            return stored, True

        return await self._write(insert)

    async def start_parked(
        self, run: Run, requests: Sequence[Request], *, state: Any, status: RunStatus, expires_at: datetime
    ) -> tuple[Run, bool]:
        row = _run_row(run)
        row.update(
            status=status.value,
            state=_json_or_none(state),
            ids=encode_json([request.id for request in requests]),
            expires_at=_us(expires_at),
        )
        made = [(request, _request_row(request, encode_document(request_to_dict(request)))) for request in requests]
        # (each row's document is its last argument)

        def start(db: sqlite3.Connection) -> tuple[Run, bool]:
            # The run is stored parked at once (no running row to update); its events say
            # what happened as they always do: started, its requests created, then parked.
            inserted = _one(db.execute(Q["insert_parked_run"], row))
            if inserted is None:
                existing = self._run_in(db, run.id)
                assert existing is not None
                return existing, False
            db.execute(Q["insert_event"], _run_event("run_started", run))
            for request, params in made:
                channel = request.origin.channel
                if channel is not None:
                    closed = db.execute(Q["is_closed"], {"channel": channel, "requester": request.requester})
                    if closed.fetchone() is not None:
                        raise closed_channel(channel)  # the transaction rolls back: nothing is stored
                db.execute(_INSERT_REQUEST, params)
            parked = run_from_row(inserted, _from_us)
            db.execute(Q["insert_event"], _run_event("input_requested", parked))
            return parked, True

        parked, created = await self._write(start)
        if created:
            for request, params in made:
                self._cache.put(request, row_size(params[-1]))
        return parked, created

    async def park_run(
        self,
        run_id: str,
        *,
        state: Any,
        waiting_on: Sequence[str],
        status: RunStatus,
        expires_at: datetime,
        at: datetime,
        worker: str | None = None,
    ) -> Run | None:
        params = {
            "id": run_id,
            "status": status.value,
            "state": _json_or_none(state),
            "ids": encode_json(list(waiting_on)),
            "expires_at": _us(expires_at),
            "at": _us(at),
            "worker": worker,
        }
        return await self._write(lambda db: self._park_in(db, params))

    def _park_in(self, db: sqlite3.Connection, params: dict[str, Any]) -> Run | None:
        row = _one(db.execute(Q["park_run"], params))
        if row is None:
            return None
        parked = run_from_row(row, _from_us)
        db.execute(Q["insert_event"], _run_event("input_requested", parked))
        return parked

    async def claim_run(
        self,
        agents: Sequence[str] | None,
        *,
        worker: str,
        lease_expires_at: datetime,
        at: datetime,
        requester: str | None = None,
    ) -> Run | None:
        params: dict[str, Any] = {"at": _us(at), "requester": requester}
        if agents is not None:
            params["agents"] = encode_json(list(agents))
        find = Q["find_run" if agents is None else "find_run_of"]
        found = await self._retry(lambda: self.db.execute(find, params).fetchone())
        if found is None:
            return None  # the common case for an idle worker: take no write lock
        lease = {"worker": worker, "lease_expires_at": _us(lease_expires_at), "at": _us(at)}

        def claim(db: sqlite3.Connection) -> Run | None:
            run_id = found[0]
            while True:
                row = _one(db.execute(Q["claim_found_run"], lease | {"id": run_id}))
                if row is not None:
                    claimed = run_from_row(row, _from_us)
                    db.execute(Q["insert_event"], _run_event("run_claimed", claimed))
                    return claimed
                # Another process claimed it between the look and the lock: look again, locked.
                again = db.execute(find, params).fetchone()
                if again is None:
                    return None
                run_id = again[0]

        return await self._write(claim)

    async def _settle_claiming(
        self, request: Request, at: datetime, answer: str | None, claim: RunClaim
    ) -> tuple[bool, Run | None]:
        stamp = _us(at)
        params = {
            "id": request.origin.run,
            "worker": claim.worker,
            "lease_expires_at": _us(claim.lease_expires_at),
            "at": _us(claim.at),
            "agents": None if claim.agents is None else encode_json(list(claim.agents)),
            "requester": claim.requester,
        }

        def settle(db: sqlite3.Connection) -> tuple[bool, Run | None]:
            if not _settle_row(db, request, stamp, answer):
                return False, None
            if request.origin.run is None:
                return True, None
            row = _one(db.execute(Q["claim_settled_run"], params))
            if row is None:
                return True, None
            claimed = run_from_row(row, _from_us)
            db.execute(Q["insert_event"], _run_event("run_claimed", claimed))
            return True, claimed

        return await self._write(settle)

    def _finish_in(self, db: sqlite3.Connection, params: dict[str, Any]) -> tuple[Run | None, bool]:
        row = _one(db.execute(Q["finish_run"], params))
        if row is None:
            return None, False
        ended = run_from_row(row, _from_us)
        db.execute(Q["insert_event"], _run_event(f"run_{ended.status.value}", ended))
        return ended, db.execute(Q["any_pending_of_run"], {"id": ended.id}).fetchone() is not None

    async def _finish_run(
        self, run_id: str, status: RunStatus, fields: tuple[Any, ...], worker: str | None
    ) -> tuple[Run | None, bool]:
        params = dict(zip(("result", "error", "terminal_reason", "at"), fields, strict=True))
        params |= {"id": run_id, "status": status.value, "worker": worker}
        return await self._write(lambda db: self._finish_in(db, params))

    async def expire_runs(
        self, due: datetime, response: Response, *, abandoned: Response | None = None
    ) -> list[tuple[Run, list[Request]]]:
        if not [row for row in await self._rows("runs_due", _us(due)) if abandoned is not None or not row[1]]:
            return []  # the common case for the expiry loop: take no write lock

        async def expire(tx: Transaction) -> list[tuple[Run, Settled]]:
            out = []
            for run_id, running in await tx.rows("runs_due", _us(due)):
                if running and abandoned is None:
                    continue
                ended, cancelled = await self._expire_in(tx, run_id, due, response, abandoned if running else None)
                if ended is not None:
                    out.append((ended, cancelled))
            return out

        return [(run, self._remember_all(cancelled)) for run, cancelled in await self._write_in(expire)]

    # -- one-time sign-in links -----------------------------------------------------------

    async def save_signin_link(self, link: IssuedSignInLink) -> None:
        row = {
            "hash": link.hash,
            "principal": link.principal,
            "created_at": _us(link.created_at),
            "expires_at": _us(link.expires_at),
        }

        def save(db: sqlite3.Connection) -> None:
            db.execute(Q["delete_expired_signin_links"], {"now": row["created_at"]})
            db.execute(Q["insert_signin_link"], row)

        try:
            await self._write(save, notify=False)
        except sqlite3.IntegrityError:
            raise ValueError(f"no principal named {link.principal!r}") from None

    async def use_signin_link(self, link_hash: str, now: datetime) -> Principal | None:
        def use(db: sqlite3.Connection) -> str | None:
            row = db.execute(Q["use_signin_link"], {"hash": link_hash, "now": _us(now)}).fetchone()
            return None if row is None else str(row[0])

        name = await self._write(use, notify=False)
        return None if name is None else await self.get_principal(name)

    # -- the outbox ----------------------------------------------------------------------

    async def _record_link_use(self, use: LinkUse, expires_at: datetime) -> bool:
        row = {"link": use.link, "request_id": use.request_id, "by": use.by, "at": _us(use.at)}
        row["expires_at"] = _us(expires_at)

        def record(db: sqlite3.Connection) -> bool:
            db.execute(Q["delete_expired_link_uses"], {"now": row["at"]})
            return bool(db.execute(Q["insert_link_use"], row).rowcount)

        return await self._write(record, notify=False)

    async def claim_notices(self, owner: str, now: datetime, lease: float, limit: int = 100) -> Sequence[Notice]:
        params = {"owner": owner, "now": _us(now), "limit": limit}
        until = _us(now + timedelta(seconds=lease))

        def claim(db: sqlite3.Connection) -> list[Any]:
            rows = db.execute(Q["unrouted_notices"], params).fetchall()
            for row in rows:
                db.execute(Q["lease_notice"], {"owner": owner, "until": until, "id": row[0]})
            return rows

        await self._derive("outbox")
        if not await self._read(Q["unrouted_notices"], params):
            return []  # the common case: take no write lock
        return [self._notice(row) for row in await self._write(claim, notify=False)]

    async def route_notice(self, notice: Notice, deliveries: Sequence[Delivery], owner: str, now: datetime) -> int:
        rows: list[dict[str, Any]] = [
            dict(zip(_DELIVERY_NAMES, self._delivery_row(d), strict=True)) for d in deliveries
        ]

        def route(db: sqlite3.Connection) -> int:
            if db.execute(Q["mark_routed"], {"now": _us(now), "id": notice.id, "owner": owner}).rowcount != 1:
                return 0
            return sum(db.execute(Q["insert_delivery"], row).rowcount for row in rows)

        return await self._write(route, notify=False)

    async def claim_deliveries(
        self, owner: str, now: datetime, lease: float, limit: int = 100, *, per_channel: int | None = None
    ) -> Sequence[Delivery]:
        at = _us(now)
        params = {"owner": owner, "now": at, "limit": limit, "per_channel": per_channel}
        until = _us(now + timedelta(seconds=lease))
        if not await self._read(Q["claimable_channels"], params):
            return []  # nothing due, or only in channels full: take no write lock

        def claim(db: sqlite3.Connection) -> list[Any]:
            rows: list[Any] = []
            for channel, room in db.execute(Q["claimable_channels"], params).fetchall():
                of = {"channel": channel, "now": at, "limit": min(room, limit)}
                rows += db.execute(Q["due_deliveries_of"], of).fetchall()
            rows.sort(key=lambda row: (row[_DUE_AT], row[0]))
            del rows[limit:]
            for row in rows:
                db.execute(Q["lease_delivery"], {"owner": owner, "until": until, "id": row[0]})
            return rows

        return [self._delivery(row) for row in await self._write(claim, notify=False)]

    async def retry_delivery(self, delivery_id: str, now: datetime) -> Delivery | None:
        params = {"id": delivery_id, "now": _us(now)}
        if not await self._write(lambda db: db.execute(Q["retry_delivery"], params).rowcount, notify=False):
            return None
        return await self.get_delivery(delivery_id)

    async def next_outbox_due(self) -> datetime | None:
        rows = await self._read(Q["first_underived_notice"])
        if rows:
            return _from_us(rows[0][0])
        rows = await self._read(Q["oldest_unrouted"])
        if rows[0][0] is None:
            rows = await self._read(Q["next_delivery_due"])
        return None if rows[0][0] is None else _from_us(rows[0][0])

    # -- events --------------------------------------------------------------------------

    async def changes(self, after: int = 0, limit: int = 500) -> Sequence[tuple[int, str, str | None]]:
        rows = await self._read(Q["changes_after"], {"after": after, "limit": limit})
        for _, type_, request_id in rows:
            if type_ != "created" and request_id in self._cache:
                self._cache.discard(request_id)  # settled, maybe by another process: read it afresh
        return [tuple(row) for row in rows]


_DELIVERY_NAMES = tuple(DELIVERY_COLUMNS.split(", "))
_DUE_AT = _DELIVERY_NAMES.index("due_at")


def _one(cursor: sqlite3.Cursor) -> Any:
    """The one row of an `UPDATE ... RETURNING` (None for none), read to its end so the
    statement is done before the transaction commits."""
    rows = cursor.fetchall()
    return rows[0] if rows else None


def _settle_row(db: sqlite3.Connection, request: Request, at: int | None, answer: str | None) -> bool:
    """Settle the request's row if still pending (its event appended by a trigger, see
    migration 0021); whether it was."""
    response = request.response
    by = None if response is None else response.by
    return db.execute(_SETTLE_REQUEST, (request.status.value, at, answer, by, request.id)).rowcount == 1


def _refuse_write() -> None:
    """`interlock_refuse_write()`: fail the statement that calls it (sqlite3 reports a
    user-defined function's exception as an `OperationalError`, without its message)."""
    raise RuntimeError("a later version of interlock migrated the file: this process does not write to it")


def _locked(exc: sqlite3.OperationalError) -> bool:
    """Whether an error says another connection holds the lock (nothing was done: try again)."""
    message = str(exc)
    return "locked" in message or "busy" in message


_FOR_NOW = frozenset(
    getattr(sqlite3, name)
    for name in ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_IOERR", "SQLITE_FULL", "SQLITE_PROTOCOL")
)
"""SQLite's primary result codes of a failure that is not the call's: a lock held (past the
timeout, where it reaches a caller), the disk failing or full, the locking protocol lost
to another connection. The same call may succeed later."""


def _for_now(exc: BaseException) -> bool:
    """Whether an error of SQLite's says the database cannot serve the call for now
    (`_FOR_NOW`, by its primary result code): a constraint, a statement of ours that is
    wrong, a corrupt file are not."""
    return isinstance(exc, sqlite3.OperationalError) and (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in _FOR_NOW


def _unavailable(exc: BaseException) -> Unavailable:
    return Unavailable(f"the store is unavailable for now: the SQLite database says {exc}")


def _classified(exc: BaseException) -> BaseException:
    """What to raise for a write's failure: `Unavailable` (from `exc`) if it is `_for_now`,
    `CutOff` if a settlement's trigger refused it (migration 0038), else `exc` itself."""
    if not _for_now(exc):
        if isinstance(exc, sqlite3.IntegrityError) and str(exc) == CUT_OFF:
            return CutOff()
        return exc
    unavailable = _unavailable(exc)
    unavailable.__cause__ = exc
    return unavailable


def _execute(db: sqlite3.Connection, name: str, args: tuple[Any, ...]) -> sqlite3.Cursor:
    """Run the named statement with positional arguments (see `_positional`)."""
    sql, taken = _NUMBERED[name]
    return db.execute(sql, args if taken is None else [args[i] for i in taken])


class _Transaction:
    """The `Transaction` of a write running in the writer: each statement runs at once."""

    __slots__ = ("db",)

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    async def rows(self, name: str, *args: Any) -> list[Any]:
        return _execute(self.db, name, args).fetchall()

    async def row(self, name: str, *args: Any) -> Any:
        rows = _execute(self.db, name, args).fetchall()  # to its end, so that a RETURNING is done
        return rows[0] if rows else None

    async def execute(self, name: str, *args: Any) -> int:
        return _execute(self.db, name, args).rowcount


def _to_end(body: Coroutine[Any, Any, T]) -> T:
    """Run the body of a write to its end, here in the writer's transaction. Its statements
    run synchronously (`_Transaction`), so it never suspends; one that did would wait on the
    event loop with the database locked, and is refused."""
    try:
        body.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    body.close()
    raise RuntimeError("the body of a SQLite write suspended inside its transaction")


def _statements(script: str) -> list[str]:
    """Split a script into whole statements, the way SQLite itself sees them."""
    statements, current = [], ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            if current.strip():
                statements.append(current.strip())
            current = ""
    if current.strip() and not all(ln.strip().startswith("--") or not ln.strip() for ln in current.splitlines()):
        raise ValueError(f"incomplete SQL statement at the end of a migration: {current.strip()[:80]!r}")
    return statements
