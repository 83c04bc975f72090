"""PostgreSQL: any number of processes, on any number of nodes, sharing one database.

PostgreSQL is the distributed engine. Each write is one server-side function, so one
round trip and one transaction: the request row and its event commit together, and a
settlement is a conditional `UPDATE ... WHERE status = 'pending'`, so the first one wins
across every process. Event ids are handed out in commit order (see the `events` table
in `sql/postgresql/migrations/0001_initial.sql`), so readers on any node never skip one.
Expiry runs on every node; `FOR UPDATE SKIP LOCKED` and the status check settle each
overdue request once. Migrations run on open under an advisory lock.

Wake-ups: every event insert NOTIFYs `interlock` in the transaction that makes the
change, except that a settlement sends itself instead (`[id, status, response]`, signed
with the database's `note_key`, migration 0023), so that a process waiting on the request
wakes its waiters from the notification alone, with no read after the commit. A
dedicated connection LISTENs (passing on only other processes' notifications), pings the
server every `keepalive` seconds, and reconnects when the connection drops (then hints
once, for what it may have missed); the broker's bounded poll (`poll_interval`) is the
guarantee behind it.

The driver is asyncpg, chosen on measurement (`bench/postgres.py`, docs/explanation/benchmarks.md):
it ran the same create+answer commits 1.06x-1.24x as fast as psycopg 3 through these
server functions, 1.16x-1.37x as fast as explicit transactions, and a read in about 30%
less time. Its pool is not used: by default it adds a reset query to every statement,
and even without that it measured about 15% slower a cycle than `Connections` below.

URL: `postgresql://user:password@host:port/database?option=value`. The options
`poll_interval`, `min_size`, `max_size` (the connection pool), `keepalive`,
`statement_cache_size` (0 behind PgBouncer in transaction mode), `cache_bytes` (what
the parsed requests kept in memory may add up to, in bytes) and `connect_timeout`
(seconds, `DEFAULT_CONNECT_TIMEOUT`) are interlock's; any
other is handed to asyncpg (libpq-style `sslmode`, or a server setting such as
`search_path` to keep interlock's tables in their own schema).

A database a later version of interlock has migrated is refused at `open`
(`NewerDatabase`), and so is every write once a later version migrates the database this
store has open (a rolling upgrade): the later schema may do itself what this version's
writes do by hand (a trigger of its own writing an event this version writes too), give
its server functions another meaning, or no longer have what this version writes. Each
connection says the newest migration this version knows (`SCHEMA_VERSION`, a setting made
with it); a trigger before each statement on every table a store writes refuses it once a
newer migration is applied (migration 0038: SQLSTATE `UNKNOWN_SCHEMA`, the transaction
rolled back), about 1.2 us a statement. Reads go on.

What fails for now is raised as `interlock.errors.Unavailable` (`_FOR_NOW`), where a
driver's error reaches a caller: a connection made (`_new_connection`: refused, the server
starting up or not taking connections to the database, too many connections), a statement
on the pool (`Connections.run`: the connection dropped, the server shutting down, its disk
full, the statement cancelled by the database's `statement_timeout` or `lock_timeout`) and
a transaction (`_transaction`). A statement safe to repeat is tried once more on a fresh
connection first (`_query`), unless the database cancelled it. The migrations run without
those timeouts (`unbounded_migrations`). A constraint, a statement of ours that is wrong,
bad credentials or a database that does not exist stay the errors they are.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import hashlib
import hmac
import itertools
import logging
import math
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg  # type: ignore[import-untyped]  # asyncpg ships no type information; its results are converted here

from .._backoff import Backoff, Outage
from ..errors import NewerDatabase, Unavailable
from ..followups import Followup, followup_event_data
from ..model import (
    Claim,
    IssuedGrant,
    Request,
    Response,
    Run,
    RunStatus,
    Status,
    grant_event_data,
    request_from_dict,
    request_to_dict,
    response_from_dict,
    response_to_dict,
    run_event_data,
)
from ..outbox import Delivery, LinkUse, Notice, delivery_to_row
from ..principals import IssuedSession, IssuedSignInLink, IssuedToken, Principal, WebSession
from ..redact import redact, redact_url
from . import Query, RunClaim
from ._sql import (
    CUT_OFF,
    DEFAULT_CACHE_BYTES,
    CutOff,
    Migration,
    RequestCache,
    SqlStore,
    TextPlan,
    Transaction,
    closed_channel,
    decode_json,
    encode_json,
    load_migrations,
    load_queries,
    newer_while_open,
    positional,
    reads_along_texts,
    refuse_newer,
    request_from_row,
    row_size,
    run_from_row,
)
from ._url import url_options

__all__ = ["PostgresStore", "from_url"]

log = logging.getLogger("interlock")

Q = load_queries("postgresql") | load_queries("postgresql", "followups")
T = TypeVar("T")
CHANNEL = "interlock"
_DUE_BATCH = 1000  # overdue requests expired per transaction; the expiry loop comes back for more
DROPPED_QUIET = 60.0
"""Seconds after a warning that a connection was lost in which the next such are debug lines."""
DERIVE_CHUNK = 1000
"""Events taken into the search text a transaction."""
FULL_HOLD = 1.0
"""Seconds a pool refused a connection because the server was full (too many connections)
opens no more, and queues its calls on the connections it has (`Connections`)."""
RARE_WORD = 0.01
"""A search whose rarest word is in fewer requests than this share (as ANALYZE last
sampled the search texts) reads the word's matches first (`_text_plan`)."""
SHARES_FOR = 300.0
"""Seconds the search texts' word shares are used before they are read again."""
_OPTIONS = {
    "poll_interval": float,
    "min_size": int,
    "max_size": int,
    "keepalive": float,
    "statement_cache_size": int,
    "cache_bytes": int,
    "connect_timeout": float,
}
DEFAULT_CONNECT_TIMEOUT = 10.0
"""Seconds a new connection may take before it is given up on (`connect_timeout`, asyncpg's
own default is 60): a server out of reach without refusing (a network partition, a
failover whose old address is gone) is then `Unavailable` within this, and the pool's
retry on a fresh connection costs one more such wait, not two minutes."""
# A connection found dead (a server restart, a failover, a proxy's idle timeout): the
# statement is tried once more on a fresh connection where repeating it is safe.
_DROPPED = (
    asyncpg.PostgresConnectionError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.CannotConnectNowError,
    # A connection handed out after the server's "terminating connection" message was read
    # but before the connection was seen closed (a turn of the event loop or more later):
    # its protocol is still busy reading that error and refuses the next statement.
    asyncpg.InternalClientError,
    # 25P03: the server ended a connection left idle in a transaction for longer than the
    # database's idle_in_transaction_session_timeout (a process starved of CPU, say).
    asyncpg.IdleInTransactionSessionTimeoutError,
    OSError,
)
_CANCELLED = (
    asyncpg.QueryCanceledError,  # 57014: the database's statement_timeout, or an operator's pg_cancel_backend
    asyncpg.LockNotAvailableError,  # 55P03: the database's lock_timeout
)
"""A statement the database gave up on, on a connection still fine: too slow for now (a
lock held long by another session, a database overloaded). Not tried again at once, as a
dropped connection's statement is: the next try would most likely wait as long."""
_FOR_NOW = (
    *_DROPPED,
    *_CANCELLED,
    asyncpg.IdleSessionTimeoutError,  # 57P05: the server ended an idle connection
    asyncpg.InsufficientResourcesError,  # 53xxx: its disk full, out of memory, too many connections
)
"""What a driver's error says when the database cannot serve the call for now: the same call
may succeed once it is back. (`Unavailable` is a `ConnectionError`, so an `OSError`: one
raised already is among these, and is raised as it is.)"""
_REFUSED_FOR_NOW = (
    *_FOR_NOW,
    # 55000 as a connection is made: the database is not taking connections for now
    # (ALTER DATABASE ... ALLOW_CONNECTIONS false, as during a maintenance).
    asyncpg.ObjectNotInPrerequisiteStateError,
)
"""What refuses a new connection for now (bad credentials, a database that does not exist
are not: those stay what they are)."""
_NEVER_FOR_NOW = (ssl.SSLCertVerificationError, FileNotFoundError, IsADirectoryError)
"""The `OSError`s of a connection's set-up that are no outage: a certificate that does not
verify, a certificate file that is not there."""

_SOLE_TRIES = 5
"""How many times an exclusive start is tried when the run it met had ended by the time it
was read (each try, another run must have started and ended on the session meanwhile)."""

SCHEMA_VERSION = "interlock.schema_version"
"""The setting each of the store's connections says the newest migration it knows with:
a write on a database where a later one is applied is refused (migration 0038)."""
UNKNOWN_SCHEMA = "IL001"
"""The SQLSTATE of that refusal; its DETAIL names the migrations the connection does not know."""


def _unavailable(exc: BaseException) -> Unavailable:
    """What a driver's error that is `_FOR_NOW` (or `_REFUSED_FOR_NOW`) is raised as."""
    return Unavailable(f"the store is unavailable for now: PostgreSQL: {redact(str(exc)) or type(exc).__name__}")


def split_url(url: str) -> tuple[str, dict[str, Any]]:
    """The URL for asyncpg, and interlock's own options taken out of its query."""
    ours, rest = url_options(url, _OPTIONS, {}, rest=True)
    parts = urlsplit(url)
    scheme = "postgresql" if parts.scheme == "postgres" else parts.scheme
    return urlunsplit((scheme, parts.netloc, parts.path, urlencode(rest), parts.fragment)), ours


def from_url(url: str, **options: Any) -> PostgresStore:
    """`postgresql://user:password@host:port/database?option=value` (see the module)."""
    return PostgresStore(url, **options)


def _named(dsn: str, name: str) -> dict[str, str]:
    """Server settings naming the connection in `pg_stat_activity`, unless the URL does."""
    return {} if "application_name" in dict(parse_qsl(urlsplit(dsn).query)) else {"application_name": name}


def _settings(dsn: str, name: str, known: int) -> dict[str, str]:
    """The server settings of the store's connections: the newest migration this version
    knows (`SCHEMA_VERSION`), and where the URL sets none of its own, named in
    `pg_stat_activity`, and without parallel plans. Every read the store makes is a page, or
    a count over at most a few thousand index entries, which takes a millisecond or two;
    the planner still picks a parallel plan for some of them (a person's search, say), and
    starting its worker alone took 20-30 ms on a busy host, ten times the read."""
    given = dict(parse_qsl(urlsplit(dsn).query))
    settings = _named(dsn, name)
    if "max_parallel_workers_per_gather" not in given and "options" not in given:
        settings["max_parallel_workers_per_gather"] = "0"
    settings[SCHEMA_VERSION] = str(known)
    return settings


class PostgresStore(SqlStore):
    dialect = "postgresql"

    def __init__(
        self,
        url: str,
        *,
        poll_interval: float | None = None,
        min_size: int | None = None,
        max_size: int | None = None,
        keepalive: float | None = None,
        statement_cache_size: int | None = None,
        cache_bytes: int | None = None,
        connect_timeout: float | None = None,
    ) -> None:
        self.dsn, ours = split_url(url)
        given = {
            "poll_interval": poll_interval,
            "min_size": min_size,
            "max_size": max_size,
            "keepalive": keepalive,
            "statement_cache_size": statement_cache_size,
            "cache_bytes": cache_bytes,
            "connect_timeout": connect_timeout,
        }
        ours.update({k: v for k, v in given.items() if v is not None})
        self.poll_interval = float(ours.get("poll_interval", 1.0))
        self.min_size = int(ours.get("min_size", 1))
        self.max_size = int(ours.get("max_size", 10))
        self.keepalive = float(ours.get("keepalive", 15.0))
        self.statement_cache_size = int(ours.get("statement_cache_size", 100))
        self.connect_timeout = float(ours.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT))
        if not 0 < self.connect_timeout < math.inf:
            raise ValueError("connect_timeout must be a number of seconds above 0")
        if not 0 <= self.min_size <= self.max_size or self.max_size < 1:
            raise ValueError("the pool needs 0 <= min_size <= max_size and max_size >= 1")
        self._pool: Connections | None = None
        self._migrations: list[Migration] = []  # this version's, read at open
        self._listener: asyncio.Task[None] | None = None
        self._hint: Callable[[], None] | None = None
        self._on_settled: Callable[[Request], None] | None = None
        self._note_key: bytes | None = None  # what settlement notes are signed with (migration 0023)
        self._listener_healthy = False
        self._dropped_said: float | None = None  # when `_dropped` last logged a warning (time.monotonic)
        # Server process ids of this store's open connections: their notifications are
        # about changes the broker of this process has seen already.
        self._own: set[int] = set()
        # Parsed requests by id, up to `cache_bytes` of them in memory (`row_size`). A settled one never
        # changes again, so it is served from here; a pending one only after a cheap
        # check that it is still pending.
        self._cache = RequestCache(int(ours.get("cache_bytes", DEFAULT_CACHE_BYTES)))
        # What a search is read by (`_text_plan`): the words' shares.
        self._shares: tuple[float, WordShares] = (-math.inf, WordShares({}))

    # -- life cycle ----------------------------------------------------------------------

    async def open(self) -> None:
        self._migrations = load_migrations("postgresql")
        pool = Connections(self._new_connection, self.max_size, newer=self._newer)
        try:
            await pool.fill(max(self.min_size, 1))
        except (OSError, asyncpg.PostgresError) as exc:
            where = redact_url(self.dsn)
            if isinstance(exc, Unavailable):  # (said by `_new_connection`) try again later
                raise Unavailable(f"cannot open the PostgreSQL store at {where} for now: {exc}") from exc.__cause__
            raise ConnectionError(f"cannot open the PostgreSQL store at {where}: {redact(str(exc))}") from exc
        self._pool = pool
        try:
            await self._migrate()
            # A store opening at the same moment may have made the key after this
            # statement's snapshot was taken: a second statement sees it.
            self._note_key = await self._query("fetchval", Q["note_key"]) or await self._query(
                "fetchval", Q["note_key"]
            )
        except BaseException as exc:
            self._pool = None
            await pool.close()
            if isinstance(exc, _FOR_NOW) and not isinstance(exc, Unavailable):  # the migrations' connection dropped
                raise _unavailable(exc) from exc
            raise

    async def _new_connection(self) -> Any:
        try:
            conn = await _connect(
                self.dsn,
                timeout=self.connect_timeout,
                statement_cache_size=self.statement_cache_size,
                server_settings=_settings(self.dsn, "interlock", self._migrations[-1].version),
            )
        except TimeoutError as exc:  # out of reach, not refusing: a partition, an address gone
            raise Unavailable(
                f"the store is unavailable for now: PostgreSQL at {redact_url(self.dsn)} did not answer a new "
                f"connection within {self.connect_timeout:g} s (connect_timeout)"
            ) from exc
        except _REFUSED_FOR_NOW as exc:
            if isinstance(exc, _NEVER_FOR_NOW):
                raise
            raise _unavailable(exc) from exc
        pid = conn.get_server_pid()
        self._own.add(pid)
        # Once closed (or lost), the database may give its pid to another node's backend.
        conn.add_termination_listener(lambda _: self._own.discard(pid))
        return conn

    async def _migrate(self) -> None:
        conn = await self.pool.acquire()
        try:
            # Every migration applied already (every start but an upgrade's): nothing to lock
            # or create, so a role that may only read and write the tables opens the store.
            migrations = self._migrations
            if await conn.fetchval(Q["migrations_kept"]):
                applied = {row[0] for row in await conn.fetch(Q["applied_migrations"])}
                refuse_newer(self._place(), applied, migrations)
                if applied >= {migration.version for migration in migrations}:
                    return
            async with conn.transaction():
                await conn.execute(Q["unbounded_migrations"])
                await conn.execute(Q["lock_migrations"])
                await conn.execute(Q["create_migrations"])
                applied = {row[0] for row in await conn.fetch(Q["applied_migrations"])}
                refuse_newer(self._place(), applied, migrations)
                for migration in migrations:
                    if migration.version not in applied:
                        await conn.execute(migration.sql)
                        await conn.execute(Q["record_migration"], migration.version, migration.name)
        finally:
            self.pool.release(conn)

    def _newer(self, exc: asyncpg.PostgresError) -> NewerDatabase:
        """A write refused on a database a later version migrated while this store had it
        open: its connections say the newest migration they know (`SCHEMA_VERSION`), and
        the database's guard (migration 0038) refuses them once a newer one is applied, the
        write changing nothing. Every later schema does: a migration recorded updates the
        guard."""
        known = self._migrations[-1].version
        unknown = [name for name in str(exc.detail or "").split(", ") if name]
        return newer_while_open(self._place(), unknown or [f"after {known}"], known)

    async def aclose(self) -> None:
        self._hint = self._on_settled = None
        await self._stop_deriving()
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    @property
    def pool(self) -> Connections:
        """The store's connections (tests and operators' scripts may borrow one)."""
        if self._pool is None:
            raise RuntimeError("the PostgreSQL store is not open")
        return self._pool

    async def _query(self, method: str, sql: str, *args: Any) -> Any:
        """Run one statement that is safe to repeat; once more (on a fresh connection) if the
        database was unavailable: a connection found dead after a restart, say."""
        try:
            return await getattr(self.pool, method)(sql, *args)
        except Unavailable as exc:
            if isinstance(exc.__cause__, _CANCELLED):
                raise
            await self._dropped(exc)
            return await getattr(self.pool, method)(sql, *args)

    async def _rows(self, name: str, *args: Any) -> Sequence[Any]:
        rows: Sequence[Any] = await self._query("fetch", Q[name], *args)
        return rows

    async def _rows_of(self, sql: str, params: dict[str, Any], *, budget: int | None = None) -> Sequence[Any]:
        # (A list's rows come whole: its statement withholds the documents of long rows.)
        text, args = positional(sql, params)
        rows: Sequence[Any] = await self._query("fetch", text, *args)
        return rows

    def _time(self, value: Any) -> datetime:
        # asyncpg reads timestamptz as an aware datetime, but the last instant there is
        # (which it writes as 'infinity') as a naive `datetime.max`: a broker comparing it
        # with now failed.
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)  # type: ignore[no-any-return]

    def _stamp(self, value: datetime) -> Any:
        return value

    def _array(self, values: Sequence[str]) -> Any:
        return list(values)

    async def _dropped(self, exc: BaseException) -> None:
        # Every call meets it while the database is away: one warning a minute, not one a call.
        now = time.monotonic()
        if self._dropped_said is None or now - self._dropped_said >= DROPPED_QUIET:
            self._dropped_said = now
            log.warning(
                "a PostgreSQL connection was lost (%s); trying once more on a new one (the same for the next %g s is "
                "logged at debug level)",
                exc,
                DROPPED_QUIET,
            )
        else:
            log.debug("a PostgreSQL connection was lost (%s); trying once more on a new one", exc)
        self.pool.expire_idle()  # its siblings are likely dead too

    # -- transactions --------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Any]:
        """A connection in a transaction: for the writes that read before they write."""
        conn = await self.pool.acquire()
        reusable = False
        try:
            async with conn.transaction():
                yield conn
            reusable = True
        except Exception as exc:
            # The server refused a statement, or the write refused what it read: the
            # transaction rolled back and the connection is fine (release drops a closed one
            # or one still in a transaction). One that failed on the wire or timed out is not.
            reusable = not isinstance(exc, (*_DROPPED, TimeoutError, asyncpg.InterfaceError))
            if isinstance(exc, _FOR_NOW) and not isinstance(exc, Unavailable):
                raise _unavailable(exc) from exc
            if isinstance(exc, asyncpg.PostgresError) and exc.sqlstate == UNKNOWN_SCHEMA:
                raise self._newer(exc) from None
            raise
        finally:
            self.pool.release(conn, reusable=reusable)

    async def _write_in(self, body: Callable[[Transaction], Coroutine[Any, Any, T]], *, notify: bool = True) -> T:
        async with self._transaction() as conn:  # every event insert NOTIFYs
            return await body(_Transaction(conn))

    async def _change(self, name: str, *args: Any, notify: bool = True) -> int:
        status: str = await self._query("execute", Q[name], *args)
        return int(status.rsplit(" ", 1)[-1])  # "UPDATE n"

    # -- wake-ups ------------------------------------------------------------------------

    def on_foreign_change(self, callback: Callable[[], None], settled: Callable[[Request], None] | None = None) -> None:
        self._hint = callback
        self._on_settled = settled
        if self._listener is None:
            self._listener = asyncio.get_running_loop().create_task(self._listen(callback))

    def _notified(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        if pid in self._own:
            self._derive_soon()  # events of ours: the search text catches up with them shortly
            return
        if payload and self._on_settled is not None:
            settled = self._settled_by_note(payload)
            if settled is not None:
                self._on_settled(settled)
        if self._hint is not None:
            self._hint()

    def _settled_by_note(self, payload: str) -> Request | None:
        """The request a settlement's signed note (`[id, status, response]` and its
        signature, see migration 0023) settled, made from its pending copy here; None when
        there is none, or the note is not signed with the database's key (the event log's
        read brings the settlement then, if there is one)."""
        key = self._note_key
        if key is None:
            return None
        # Every node hears every settlement: read the id first (it opens the note, and an id
        # with no escape in it ends at the first quote), and check and decode the rest only
        # for a request this process holds pending.
        end = payload.find('"', 2)
        request_id = payload[2:end]
        if payload.startswith('["') and end > 0 and "\\" not in request_id:
            known = self._cache.get(request_id)
            if known is None or known.status is not Status.PENDING:
                return None
        note, signature = payload[:-64], payload[-64:]
        # A note carries the person's answer: the logs name only the request it claims to settle.
        about = f"request {request_id[:64]!r}" if payload.startswith('["') and end > 0 else "no request id"
        if not hmac.compare_digest(_signature(key, note).encode(), signature.encode("utf-8", "surrogatepass")):
            log.warning("ignored a settlement notification (%s) not signed with this database's key", about)
            return None
        try:
            request_id, status, answer = decode_json(note)
            known = self._cache.get(request_id)
            if known is None or known.status is not Status.PENDING:
                return None
            settled = known.settle(Status(status), None if answer is None else response_from_dict(answer))
        except Exception as exc:  # a note this version cannot read: the event log says the same
            # (its kind only: what it says may quote the answer)
            log.debug("a settlement notification (%s) could not be read: %s", about, type(exc).__name__)
            return None
        self._cache.put(settled, (self._cache.size_of(request_id) or 0) + len(payload))
        return settled

    # -- the search text, derived from the event log -----------------------------------------

    def _is_open(self) -> bool:
        return self._pool is not None

    def _known_migration(self) -> int | None:
        return self._migrations[-1].version if self._is_open() else None

    def _place(self) -> str:
        return f"the PostgreSQL database at {redact_url(self.dsn)}"

    async def _catch_up(self) -> None:
        """Bring `request_texts` up to date with every event committed so far,
        `DERIVE_CHUNK` events a transaction (and no further: the events appended
        meanwhile are the next catch-up's)."""
        upto, last = await self._query("fetchrow", Q["derive_search"], DERIVE_CHUNK)  # safe to repeat
        while upto < last:
            upto, _ = await self._query("fetchrow", Q["derive_search"], DERIVE_CHUNK)

    async def _before_search(self, query: Query) -> None:
        # A search sees every change committed before it; on a database a later version has
        # migrated, it reads on: that version's processes keep the texts up to date.
        with contextlib.suppress(NewerDatabase):
            await self._catch_up()

    async def _text_plan(self, query: Query) -> TextPlan:
        """A search whose rarest word is rare (`RARE_WORD`) is read from the GIN index's
        matches first; one of common words from the requests in the page's order, each
        one's text checked, which soon fills the page (the index would merge every match
        first: 11 ms for a word in 8% of a million requests). Shares are what ANALYZE last
        sampled, a word it did not list being rarer than those it did. The requests are
        read first before the first ANALYZE, and when a word of the search begins many
        words ANALYZE does not list, each rare (`_begins_many`): the GIN index would gather
        every one of those words' matches first (when the texts still held the requests'
        ids, an admin's search for `01a`, which began the id of every request made for
        months, took 3.9 s at a million requests).

        A person's search for a common word reads their texts in order, from the index of
        the word each text holds its recipient by (`_in_order`), each checked and each
        match's request read: at a million requests, a word in 3% of them 2.2 ms p50, where
        reading every request of theirs and looking its text up by id took 4.2 ms.

        A person's search for a rare word narrows the matches to those of each name it is
        for (theirs and their teams'): a request's text holds its recipient whole, as one
        word no search can type (`recipient_word`), so the GIN index intersects the two. At
        a million requests, a person's search for a word in 0.3% of them: 2-3 ms; without
        it, every match of the word was read to see whom it was for (10-26 ms)."""
        shares = await self._word_shares()
        words = query.words
        if not shares or not words or any(map(_begins_many, words)):
            return _in_order(query)
        if min(map(shares.of_prefix, words)) >= RARE_WORD:
            return _in_order(query)
        if query.recipient is None:
            return TextPlan(matches_first=True)
        return TextPlan(matches_first=True, narrow=" | ".join(map(recipient_word, (query.recipient, *query.teams))))

    async def _word_shares(self) -> WordShares:
        """The most common words of the search texts, each with its share of requests."""
        read_at, shares = self._shares
        now = time.monotonic()
        if now - read_at >= SHARES_FOR:
            rows = await self._rows("search_word_shares")
            shares = WordShares(dict(zip(rows[0][0], rows[0][1], strict=False)) if rows and rows[0][0] else {})
            self._shares = (now, shares)
        return shares

    async def _listen(self, callback: Callable[[], None]) -> None:
        """Keep one connection LISTENing; reconnect when it drops, backing off while
        attempts keep failing (the broker's poll goes on meanwhile)."""
        backoff = Backoff(0.2, 5.0, immediate=True)
        outage = Outage(log, "the PostgreSQL listener's connection")  # a warning as it drops, not one a retry
        while True:
            self._listener_healthy = False
            try:
                await self._listen_once(callback, connected=outage.ended)
                reason = "the connection was closed"
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reason = str(exc) or type(exc).__name__
            if self._listener_healthy:
                backoff.reset()
            delay = backoff.next()
            outage.failed(reason, f"reconnecting in {delay:.2f} s")
            await asyncio.sleep(delay)

    async def _listen_once(self, callback: Callable[[], None], *, connected: Callable[[], None]) -> None:
        """LISTEN until the connection is lost, pinging it every `keepalive` seconds so a
        silently dead link is found too."""
        conn = await _connect(
            self.dsn,
            timeout=min(max(self.keepalive, 5.0), self.connect_timeout),
            statement_cache_size=0,
            server_settings=_named(self.dsn, "interlock-listener"),
        )
        try:
            lost = asyncio.Event()
            conn.add_termination_listener(lambda _: lost.set())
            await conn.add_listener(CHANNEL, self._notified)
            connected()  # (after a drop, an info line says it is back)
            callback()  # whatever committed while nobody listened
            self._derive_soon()  # and the search text of what we wrote meanwhile (its NOTIFYs went unheard)
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.keepalive):
                        await lost.wait()
                if lost.is_set():
                    return
                await conn.fetchval(Q["ping"], timeout=self.keepalive)
                self._listener_healthy = True  # it was up a while: a drop now starts the backoff afresh
        finally:
            conn.terminate()

    # -- requests ------------------------------------------------------------------------

    async def _insert(self, request: Request, doc: str) -> tuple[Request, bool, int]:
        o = request.origin
        row = await self._query(  # safe to repeat: the request id makes it idempotent
            "fetchrow",
            Q["insert_request"],
            request.id,
            request.kind,
            request.to,
            request.requester,
            o.session,
            o.channel,
            o.agent,
            o.run,
            request.idempotency_key,
            request.created_at,
            request.expires_at,
            doc,
        )
        if row is None:
            raise RuntimeError(f"request {request.id} was neither stored nor found by its idempotency key")
        if row[0]:
            return request, True, row_size(doc)
        if row[1] == "closed" and row[2] is None:
            raise closed_channel(o.channel)
        return request_from_row(row[1], row[2], row[3]), False, row_size(row[2], row[3])

    async def _settle(self, request: Request, at: datetime, answer: str | None) -> bool:
        args = (request.id, request.status.value, at, answer)
        try:
            settled = await self.pool.fetchval(Q["settle_request"], *args) is not None
        except Unavailable as exc:
            await self._dropped(exc)
            settled = await self.pool.fetchval(Q["settle_request"], *args) is not None
            if not settled and answer is not None:
                # Not pending any more: maybe settled by the first attempt, whose reply was
                # lost with its connection. Then the row holds this very response (the
                # JSON type keeps its text as given, time stamp and all).
                row = await self.pool.fetchrow(Q["get_settlement"], request.id)
                settled = row is not None and (row[0], row[1]) == (request.status.value, answer)
        return settled

    async def _append_event(self, *values: Any) -> int:
        return int(await self.pool.fetchval(Q["insert_event"], *values))

    async def settle_pending(
        self, status: Status, response: Response, *, channel: str | None = None, due: datetime | None = None
    ) -> list[Request]:
        answer = encode_json(response_to_dict(response))
        rows = await self._query(  # safe to repeat: the status check settles each request once
            "fetch",
            Q["settle_pending"],
            status.value,
            response.at,
            answer,
            channel,
            due,
            _DUE_BATCH if due is not None else None,
        )
        settled = []
        for request_id, doc in rows:
            known = self._cache.get(request_id)
            request = (known or request_from_dict(decode_json(doc))).settle(status, response)
            self._cache.put(request, row_size(doc, answer))
            settled.append(request)
        return settled

    async def consume(self, request_id: str, by: str | None, at: datetime) -> bool:
        try:
            return await self.pool.fetchval(Q["consume_request"], request_id, by, at) is not None
        except Unavailable as exc:
            await self._dropped(exc)
            if await self.pool.fetchval(Q["consume_request"], request_id, by, at) is not None:
                return True
            # Consumed already: maybe by the first attempt, whose reply was lost with its
            # connection. Then the row holds this very consumer and time.
            row = await self.pool.fetchrow(Q["get_consumption"], request_id)
            return row is not None and (row[0], row[1]) == (by, at)

    async def release(self, request_id: str, at: datetime) -> bool:
        try:
            return await self.pool.fetchval(Q["release_request"], request_id, at) is not None
        except Unavailable as exc:
            await self._dropped(exc)
            if await self.pool.fetchval(Q["release_request"], request_id, at) is not None:
                return True
            # Released already: maybe by the first attempt, whose reply was lost with its
            # connection. Then the row holds this very time.
            released: datetime | None = await self.pool.fetchval(Q["get_release"], request_id)
            return released == at

    async def close_channel(self, channel: str, response: Response, *, requester: str | None = None) -> list[Request]:
        answer = encode_json(response_to_dict(response))
        rows = await self._query(  # safe to repeat: closing twice changes nothing more
            "fetch", Q["close_channel"], channel, requester, response.at, answer
        )
        settled = []
        for request_id, doc in rows:
            known = self._cache.get(request_id)
            request = (known or request_from_dict(decode_json(doc))).settle(Status.CANCELLED, response)
            self._cache.put(request, row_size(doc, answer))
            settled.append(request)
        return settled

    # -- runs ----------------------------------------------------------------------------

    async def _settle_in(self, tx: Transaction, request: Request, at: datetime, answer: str | None) -> bool:
        row = await tx.row("settle_request", request.id, request.status.value, at, answer)
        return row is not None and row[0] is not None  # the id of its event

    async def _lock_requests_of_run(self, tx: Transaction, run_id: str) -> None:
        await tx.rows("lock_pending_of_run", run_id)  # the requests before their run: the lock order

    def _run(self, row: Any) -> Run:
        return run_from_row(tuple(row), self._time)

    async def insert_run(self, run: Run, *, exclusive: bool = False) -> tuple[Run, bool]:
        duration = run.max_duration.total_seconds() if run.max_duration is not None else None
        data = encode_json(run_event_data(run))
        args = (
            *(run.id, run.agent, run.session, run.requester, run.status.value, duration, run.created_at, data),
            run.expires_at,
        )
        if exclusive:
            return await self._insert_sole_run(run, args)
        created = await self._query("fetchval", Q["insert_run"], *args)  # safe to repeat: the id decides
        if created is not None:
            return run, True
        existing = await self.get_run(run.id)
        assert existing is not None
        return existing, False

    async def _insert_sole_run(self, run: Run, args: tuple[Any, ...]) -> tuple[Run, bool]:
        """`insert_run` of a run that holds its session. Safe to repeat: stored already, the
        run is found by its id. What it met is read after the insert (the run that committed
        while the insert waited is seen only by a statement after it); a run that ended in
        between is no longer in the way, and the insert is tried again."""
        for _ in range(_SOLE_TRIES):
            if await self._query("fetchval", Q["insert_sole_run"], *args) is not None:
                return run, True
            existing = await self.get_run(run.id)
            if existing is not None:
                return existing, False
            busy = await self._query("fetchrow", Q["unended_run_on_session"], run.agent, run.session, run.requester)
            if busy is not None:
                return self._run(busy), False
        raise Unavailable(
            f"runs of agent {run.agent!r} on session {run.session!r} kept starting and ending while run "
            f"{run.id!r} started; nothing was stored: start it again"
        )

    async def start_parked(
        self, run: Run, requests: Sequence[Request], *, state: Any, status: RunStatus, expires_at: datetime
    ) -> tuple[Run, bool]:
        duration = run.max_duration.total_seconds() if run.max_duration is not None else None
        docs = [encode_json(request_to_dict(request)) for request in requests]
        columns: list[list[Any]] = [[] for _ in range(9)]
        for request in requests:
            o = request.origin
            values = (request.id, request.kind, request.to, request.requester, o.session, o.channel, o.agent)
            for column, value in zip(columns, (*values, request.created_at, request.expires_at), strict=True):
                column.append(value)
        args = (
            *(run.id, run.agent, run.session, run.requester, duration, run.created_at),
            encode_json(run_event_data(run)),
            *columns,
            docs,
            status.value,
            None if state is None else encode_json(state),
            expires_at,
        )
        try:  # not repeated on a lost connection: a second call would find the run and store nothing
            row = await self.pool.fetchrow(Q["start_parked"], *args)
        except asyncpg.RaiseError as exc:
            if exc.message == "interlock_channel_closed":
                raise closed_channel(exc.detail) from None
            raise
        if row is None:
            existing = await self.get_run(run.id)
            assert existing is not None
            return existing, False
        for request, doc in zip(requests, docs, strict=True):
            self._cache.put(request, row_size(doc))
        return self._run(row), True

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
        encoded = None if state is None else encode_json(state)
        args = (run_id, list(waiting_on), status.value, encoded, expires_at, at, worker)
        row = await self.pool.fetchrow(Q["park_run"], *args)  # not repeated: a second park would conflict
        return None if row is None else self._run(row)

    async def claim_run(
        self,
        agents: Sequence[str] | None,
        *,
        worker: str,
        lease_expires_at: datetime,
        at: datetime,
        requester: str | None = None,
    ) -> Run | None:
        names = None if agents is None else list(agents)
        # Not repeated on a lost connection: the first may have claimed a run, which its
        # lease then hands on; a second would claim another.
        row = await self.pool.fetchrow(Q["claim_run"], names, worker, lease_expires_at, at, requester)
        return None if row is None else self._run(row)

    async def _settle_claiming(
        self, request: Request, at: datetime, answer: str | None, claim: RunClaim
    ) -> tuple[bool, Run | None]:
        agents = None if claim.agents is None else list(claim.agents)
        args = (request.id, request.status.value, at, answer, agents, claim.worker, claim.lease_expires_at)
        try:
            row = await self.pool.fetchrow(Q["settle_claiming"], *args, claim.at, claim.requester)
        except Unavailable as exc:
            # Maybe settled (and a run claimed) by this very call, its reply lost with the
            # connection: `_settle` finds out which. A run claimed so is taken over by
            # another worker once its lease runs out.
            await self._dropped(exc)
            return await self._settle(request, at, answer), None
        if not row[0]:
            return False, None
        return True, (None if row[1] is None else self._run(tuple(row)[1:]))  # (the id is never null)

    async def _finish_run(
        self, run_id: str, status: RunStatus, fields: tuple[Any, ...], worker: str | None
    ) -> tuple[Run | None, bool]:
        row = await self.pool.fetchrow(Q["finish_run"], run_id, status.value, *fields, worker)  # one round trip
        return (None, False) if row is None else (self._run(tuple(row)[:-1]), row["left_pending"])

    async def expire_runs(
        self, due: datetime, response: Response, *, abandoned: Response | None = None
    ) -> list[tuple[Run, list[Request]]]:
        out = []
        for run_id, running in await self._rows("runs_due", due):
            if running and abandoned is None:
                continue
            # One transaction a run; another node expiring the same run finds it ended.
            ended, cancelled = await self._write_in(
                functools.partial(
                    self._expire_in, run_id=run_id, due=due, response=response, abandoned=abandoned if running else None
                )
            )
            if ended is not None:
                out.append((ended, self._remember_all(cancelled)))
        return out

    # -- follow-up messages --------------------------------------------------------------

    async def _followup_events(
        self, tx: Transaction, type_: str, followups: Sequence[Followup], run: Run, at: datetime
    ) -> None:
        """One statement for every message's event, its transaction's last (see `events`)."""
        data = [followup_event_data(f, agent=run.agent, session=run.session, to=run.requester) for f in followups]
        await tx.execute("followup_events", type_, at, run.id, [encode_json(d) for d in data])

    # -- claims and views ----------------------------------------------------------------

    async def claim(self, request_id: str, by: str, at: datetime) -> Claim | None:
        await self._query("fetchval", Q["claim_request"], request_id, by, at, encode_json({"by": by}))
        return self._claim(request_id, await self._rows("get_claim", request_id))

    async def unclaim(self, request_id: str, by: str | None, at: datetime) -> Claim | None:
        return self._claim(request_id, await self.pool.fetch(Q["unclaim_request"], request_id, by, at))

    async def note_viewed(self, request_id: str, by: str, at: datetime) -> bool:
        return await self._query("fetchval", Q["view_request"], request_id, by, at) is not None

    # -- grants ---------------------------------------------------------------------------

    async def _settle_granting(self, request: Request, at: datetime, answer: str | None) -> bool:
        response = request.response
        if response is None:
            return await self._settle(request, at, answer)
        events = encode_json([grant_event_data(g) for g in response.grants])
        # One server function, one transaction: not repeated on a dropped connection (its
        # reply may be lost after the commit; the answerer then sees the error and finds
        # the request answered).
        done = await self.pool.fetchval(Q["settle_granting"], request.id, request.status.value, at, answer, events)
        return done is not None

    async def give_grant(self, grant: IssuedGrant) -> None:
        await self.pool.fetchval(Q["insert_grant"], encode_json(grant_event_data(grant)))

    # -- principals and tokens ------------------------------------------------------------

    async def save_token(self, token: IssuedToken) -> None:
        try:
            await self.pool.execute(
                Q["insert_token"], token.id, token.hash, token.principal, token.created_at, token.for_session
            )
        except asyncpg.ForeignKeyViolationError:
            raise ValueError(f"no principal named {token.principal!r}") from None

    async def revoke_tokens(self, *, token_id: str | None = None, principal: str | None = None) -> int:
        by_principal = principal if token_id is None else None
        return int(await self.pool.fetchval(Q["revoke_tokens"], token_id, by_principal, datetime.now(UTC)))

    # -- web sessions ---------------------------------------------------------------------

    async def start_session(self, token_hash: str, session: IssuedSession) -> WebSession | None:
        await self._query("execute", Q["delete_expired_sessions"], session.created_at)
        row = await self.pool.fetchrow(
            Q["start_session"],
            session.hash,
            session.id,
            session.csrf,
            session.created_at,
            session.expires_at,
            token_hash,
        )
        return self._web_session(row)

    async def end_session(self, session_hash: str) -> WebSession | None:
        return self._web_session(await self.pool.fetchrow(Q["end_session"], session_hash, datetime.now(UTC)))

    # -- one-time sign-in links -----------------------------------------------------------

    async def save_signin_link(self, link: IssuedSignInLink) -> None:
        await self._query("execute", Q["delete_expired_signin_links"], link.created_at)
        try:
            await self.pool.execute(
                Q["insert_signin_link"], link.hash, link.principal, link.created_at, link.expires_at
            )
        except asyncpg.ForeignKeyViolationError:
            raise ValueError(f"no principal named {link.principal!r}") from None

    async def use_signin_link(self, link_hash: str, now: datetime) -> Principal | None:
        row = await self.pool.fetchrow(Q["use_signin_link"], link_hash, now)
        return None if row is None else Principal(*row)

    # -- the outbox ----------------------------------------------------------------------
    # Claims are one statement each: FOR UPDATE SKIP LOCKED passes over rows another node
    # is claiming right now, and the lease keeps them from being claimed again until it
    # runs out, so two nodes do not send one delivery in the normal case.

    async def _record_link_use(self, use: LinkUse, expires_at: datetime) -> bool:
        await self._query("execute", Q["delete_expired_link_uses"], use.at)
        added = await self.pool.fetchval(Q["insert_link_use"], use.link, use.request_id, use.by, use.at, expires_at)
        return added is not None

    async def claim_notices(self, owner: str, now: datetime, lease: float, limit: int = 100) -> Sequence[Notice]:
        until = now + timedelta(seconds=lease)
        return [self._notice(row) for row in await self._query("fetch", Q["claim_notices"], owner, now, until, limit)]

    async def route_notice(self, notice: Notice, deliveries: Sequence[Delivery], owner: str, now: datetime) -> int:
        rows = [delivery_to_row(d) for d in deliveries]
        added = await self.pool.fetchval(Q["route_notice"], notice.id, now, owner, encode_json(rows))
        return int(added)

    async def claim_deliveries(
        self, owner: str, now: datetime, lease: float, limit: int = 100, *, per_channel: int | None = None
    ) -> Sequence[Delivery]:
        until = now + timedelta(seconds=lease)
        rows = await self._query("fetch", Q["claim_deliveries"], owner, now, until, limit, per_channel)
        claimed = [self._delivery(row) for row in rows]
        return sorted(claimed, key=lambda d: (d.due_at, d.id))  # (an UPDATE returns its rows in no order)

    async def retry_delivery(self, delivery_id: str, now: datetime) -> Delivery | None:
        row = await self._query("fetchrow", Q["retry_delivery"], delivery_id, now)
        return None if row is None else self._delivery(row)

    async def next_outbox_due(self) -> datetime | None:
        due: datetime | None = await self._query("fetchval", Q["next_outbox_due"])  # an aware datetime
        return due

    # -- events --------------------------------------------------------------------------

    async def changes(self, after: int = 0, limit: int = 500) -> Sequence[tuple[int, str, str | None]]:
        rows = await self._query("fetch", Q["changes_after"], after, limit)
        out: list[tuple[int, str, str | None]] = []
        cache = self._cache
        for event_id, type_, request_id, status, answer in rows:
            if type_ != "created" and request_id is not None:
                known = cache.get(request_id)
                if known is not None and known.status is Status.PENDING and status != Status.PENDING:
                    # Settled, maybe by another process: the row says how, so the broker's
                    # `get` that follows is served from here, without another round trip.
                    response = response_from_dict(decode_json(answer)) if answer else None
                    size = cache.size_of(request_id) or 0
                    cache.put(known.settle(Status(status), response), size + row_size("", answer))
            out.append((event_id, type_, request_id))
        return out


class Connections:
    """The store's connections: idle ones reused last-in first-out, new ones made up to
    `max_size`, then callers queue in order.

    Leaner than asyncpg's own pool, which runs a reset query (a round trip) and a task on
    every release and re-arms an idle timer on every acquire: here one statement costs one
    round trip. The store never changes a session's state (no SET, LISTEN, session lock
    or cursor), so there is nothing to reset; a connection that is closed, left inside a
    transaction, or was cut by a cancellation is dropped rather than reused.

    A server that takes no more connections (`max_connections`, a role's or a database's
    connection limit: other nodes and clients took them) makes the pool wait for one of its
    own, when it has any, rather than fail the call: for `FULL_HOLD` seconds it opens no
    more than it has, then tries again.

    A statement the database refuses because a later version migrated it (`UNKNOWN_SCHEMA`)
    raises what `newer` makes of the refusal (a `NewerDatabase`).
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[Any]],
        max_size: int,
        *,
        newer: Callable[[asyncpg.PostgresError], Exception],
    ) -> None:
        self._connect = connect
        self.max_size = max_size
        self._newer = newer
        self._idle: list[Any] = []
        self._size = 0  # connections open or being opened
        self._waiters: deque[asyncio.Future[Any]] = deque()
        self._closed = False
        self._full_until = -math.inf  # while the server refuses new connections, the pool makes none

    async def fill(self, count: int) -> None:
        """Open connections until `count` are idle (the first failure is raised)."""
        while self._size < min(count, self.max_size):
            self._size += 1
            try:
                conn = await self._connect()
            except BaseException:
                self._size -= 1
                raise
            self._idle.append(conn)

    async def acquire(self) -> Any:
        if self._closed:
            raise RuntimeError("the PostgreSQL store is closed")
        while True:
            while self._idle:
                conn = self._idle.pop()
                if not conn.is_closed():
                    return conn
                self._size -= 1
            if self._size >= self.max_size or (self._size > 0 and time.monotonic() < self._full_until):
                fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                self._waiters.append(fut)
                try:
                    conn = await fut
                except asyncio.CancelledError:
                    if fut.done() and not fut.cancelled():
                        self._hand_on(fut.result())  # given to us just as we were cancelled
                    raise
                if conn is not None:
                    return conn
                # None: a connection was dropped and its place handed to us; open one in it.
            else:
                self._size += 1
            try:
                return await self._connect()
            except Unavailable as exc:
                if not isinstance(exc.__cause__, asyncpg.TooManyConnectionsError) or self._size <= 1:
                    self._hand_on(None)
                    raise
                # The server is full and this pool has connections: wait for one of them.
                self._size -= 1
                if time.monotonic() >= self._full_until:
                    log.warning(
                        "PostgreSQL takes no more connections (%s): this process waits for its %d open ones "
                        "(raise max_connections, or lower max_size on the nodes)",
                        exc.__cause__,
                        self._size,
                    )
                self._full_until = time.monotonic() + FULL_HOLD
            except BaseException:
                self._hand_on(None)
                raise

    def release(self, conn: Any, *, reusable: bool = True) -> None:
        if not reusable or self._closed or conn.is_closed() or conn.is_in_transaction():
            conn.terminate()
            self._hand_on(None)
        else:
            self._hand_on(conn)

    def _hand_on(self, conn: Any) -> None:
        """Give a connection (or, with None, the place of a dropped one) to the first
        caller still waiting; else keep it idle (or free the place)."""
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(conn)
                return
        if conn is None:
            self._size -= 1
        else:
            self._idle.append(conn)

    async def run(self, method: str, sql: str, *args: Any) -> Any:
        """One statement on a connection of the pool (`Unavailable` when the database
        cannot serve it for now)."""
        conn = await self.acquire()
        reusable = False
        try:
            result = await getattr(conn, method)(sql, *args)
            reusable = True
            return result
        except asyncpg.PostgresError as exc:
            # The server refused the statement and the connection is fine, unless the
            # server is ending it.
            reusable = not isinstance(exc, _DROPPED)
            if isinstance(exc, _FOR_NOW):
                raise _unavailable(exc) from exc
            if exc.sqlstate == UNKNOWN_SCHEMA:
                raise self._newer(exc) from None
            if isinstance(exc, asyncpg.RaiseError) and exc.message == CUT_OFF:
                raise CutOff() from None  # (a settlement's trigger refused it: migration 0046)
            raise
        except (OSError, asyncpg.InternalClientError) as exc:  # the connection failed on the wire
            raise _unavailable(exc) from exc
        finally:
            self.release(conn, reusable=reusable)

    async def fetch(self, sql: str, *args: Any) -> Any:
        return await self.run("fetch", sql, *args)

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        return await self.run("fetchrow", sql, *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self.run("fetchval", sql, *args)

    async def execute(self, sql: str, *args: Any) -> Any:
        return await self.run("execute", sql, *args)

    def expire_idle(self) -> None:
        """Drop the idle connections: after one was found dead, they likely are too."""
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.terminate()
            self._size -= 1

    async def close(self) -> None:
        """Close the idle connections (in-use ones close as they come back)."""
        self._closed = True
        for fut in self._waiters:
            if not fut.done():
                fut.set_exception(RuntimeError("the PostgreSQL store is closed"))
        self._waiters.clear()
        idle, self._idle = self._idle, []
        for conn in idle:
            try:
                await conn.close(timeout=5)
            except Exception:
                conn.terminate()


class _Transaction:
    """The `Transaction` of a write: its statements on the connection holding it."""

    __slots__ = ("conn",)

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def rows(self, name: str, *args: Any) -> Sequence[Any]:
        rows: Sequence[Any] = await self.conn.fetch(Q[name], *args)
        return rows

    async def row(self, name: str, *args: Any) -> Any:
        return await self.conn.fetchrow(Q[name], *args)

    async def execute(self, name: str, *args: Any) -> int:
        status: str = await self.conn.execute(Q[name], *args)
        return int(status.rsplit(" ", 1)[-1])  # "UPDATE n"


async def _connect(*args: Any, **kwargs: Any) -> Any:
    """asyncpg's `connect`, carried to its end when the caller is cancelled: cut in the
    middle of its TLS negotiation, asyncpg leaves a future whose error nobody reads."""
    task = asyncio.ensure_future(asyncpg.connect(*args, **kwargs))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(_discard)
        raise


def recipient_lexeme(name: str) -> str:
    """The word a request's search text holds its recipient as (migration 0026's
    `interlock_recipient_word`): the name whole, after ' to ', which no search's word can
    be (none begins with a space); a name too long for a word, its MD5."""
    if len(encoded := name.encode()) > 2000:
        return f" to md5 {hashlib.md5(encoded).hexdigest()}"
    return " to " + name


def recipient_word(name: str) -> str:
    """`recipient_lexeme`, as a `tsquery`."""
    return "'" + recipient_lexeme(name).replace("\\", "\\\\").replace("'", "''") + "'"


def _in_order(query: Query) -> TextPlan:
    """A search read in the page's order: a person's along their texts (migration 0028),
    when `reads_along_texts` says it may be."""
    if query.recipient is None or not reads_along_texts(query):
        return TextPlan(matches_first=False)
    return TextPlan(matches_first=False, along=recipient_lexeme(query.recipient))


def _begins_many(word: str) -> bool:
    """Whether a search's word, a prefix, begins many different words of the texts, each
    too rare for ANALYZE to list: a word of one or two letters. The newest requests match
    such a word, so reading them first fills the page at once."""
    return len(word) < 3


class WordShares:
    """The words ANALYZE listed as the most common of the search texts (`pg_stats`), each
    with the share of requests it is in, sorted, so that the words a prefix begins are one
    range of them (about 2,000 words: statistics target 1,000, migration 0030)."""

    def __init__(self, shares: dict[str, float]) -> None:
        self._words = sorted(shares)
        self._upto = list(itertools.accumulate((shares[w] for w in self._words), initial=0.0))

    def __bool__(self) -> bool:
        return bool(self._words)

    def of_prefix(self, prefix: str) -> float:
        """The share of requests with a word that begins with `prefix`, at most (the shares of
        the words it begins, added; 0 when ANALYZE listed none of them)."""
        first = bisect.bisect_left(self._words, prefix)
        end = bisect.bisect_left(self._words, prefix + "\U0010ffff", first)
        return self._upto[end] - self._upto[first]


def _signature(key: bytes, note: str) -> str:
    """A settlement note's signature, as the database makes it (migration 0023)."""
    inner = hashlib.sha256(key + note.encode()).digest()
    return hashlib.sha256(key + inner).hexdigest()


def _discard(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is None:
        task.result().terminate()
