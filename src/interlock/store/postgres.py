"""PostgreSQL: any number of processes, on any number of nodes, sharing one database.

PostgreSQL is the distributed engine. Each write is one server-side function, so one
round trip and one transaction: the request row and its event commit together, and a
settlement is a conditional `UPDATE ... WHERE status = 'pending'`, so the first one wins
across every process. Event ids are handed out in commit order (see the `events` table
in `sql/postgresql/migrations/0001_initial.sql`), so readers on any node never skip one.
Expiry runs on every node; `FOR UPDATE SKIP LOCKED` and the status check settle each
overdue request once. Migrations run on open under an advisory lock.

Wake-ups: every event insert NOTIFYs `interlock` in its own transaction. A dedicated
connection LISTENs, pings the server every `keepalive` seconds, and reconnects when the
connection drops (and then hints once, for what it may have missed); the broker's
bounded poll (`poll_interval`) is the guarantee behind it.

The driver is asyncpg: through the same server functions it ran about 24% more
create+answer cycles per second than psycopg 3 here, and reads about 30% faster
(`bench/postgres.py` and docs/benchmarks.md have the figures).

URL: `postgresql://user:password@host:port/database?option=value`. The options
`poll_interval`, `min_size`, `max_size` (the connection pool), `keepalive` and
`statement_cache_size` (0 behind PgBouncer in transaction mode) are interlock's; any
other is handed to asyncpg (libpq-style `sslmode`, or a server setting such as
`search_path` to keep interlock's tables in their own schema).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg  # type: ignore[import-untyped]  # asyncpg ships no type information; its results are converted here

from ..model import (
    Event,
    Request,
    Response,
    Status,
    request_from_dict,
    request_to_dict,
    response_from_dict,
    response_to_dict,
)
from ..principals import IssuedToken, Principal
from . import Query
from ._sql import load_migrations, load_queries

__all__ = ["PostgresStore"]

log = logging.getLogger("interlock")

Q = load_queries("postgresql")
CHANNEL = "interlock"
_CACHE_SIZE = 10_000
_DUE_BATCH = 1000  # overdue requests expired per transaction; the expiry loop comes back for more
_OPTIONS = {
    "poll_interval": float,
    "min_size": int,
    "max_size": int,
    "keepalive": float,
    "statement_cache_size": int,
}
_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_FILTERS = ("recipient", "requester", "status", "kind", "session", "channel", "agent", "run")


def split_url(url: str) -> tuple[str, dict[str, Any]]:
    """The URL for asyncpg, and interlock's own options taken out of its query."""
    parts = urlsplit(url)
    ours: dict[str, Any] = {}
    rest = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in _OPTIONS:
            ours[name] = _OPTIONS[name](value)
        else:
            rest.append((name, value))
    scheme = "postgresql" if parts.scheme == "postgres" else parts.scheme
    return urlunsplit((scheme, parts.netloc, parts.path, urlencode(rest), parts.fragment)), ours


class PostgresStore:
    shared = True

    def __init__(
        self,
        url: str,
        *,
        poll_interval: float | None = None,
        min_size: int | None = None,
        max_size: int | None = None,
        keepalive: float | None = None,
        statement_cache_size: int | None = None,
    ) -> None:
        self.dsn, ours = split_url(url)
        given = {
            "poll_interval": poll_interval,
            "min_size": min_size,
            "max_size": max_size,
            "keepalive": keepalive,
            "statement_cache_size": statement_cache_size,
        }
        ours.update({k: v for k, v in given.items() if v is not None})
        self.poll_interval = float(ours.get("poll_interval", 1.0))
        self.min_size = int(ours.get("min_size", 1))
        self.max_size = int(ours.get("max_size", 10))
        self.keepalive = float(ours.get("keepalive", 15.0))
        self.statement_cache_size = int(ours.get("statement_cache_size", 100))
        if not 0 <= self.min_size <= self.max_size or self.max_size < 1:
            raise ValueError("the pool needs 0 <= min_size <= max_size and max_size >= 1")
        self._pool: Any = None
        self._listener: asyncio.Task[None] | None = None
        self._hint: Callable[[], None] | None = None
        # Server process ids of this store's own connections: their notifications are
        # about changes the broker of this process has seen already.
        self._own: set[int] = set()
        # Parsed requests by id. A settled one never changes again, so it is served from
        # here; a pending one only after a cheap check that it is still pending.
        self._cache: dict[str, Request] = {}

    # -- life cycle ----------------------------------------------------------------------

    async def open(self) -> None:
        try:
            self._pool = await asyncpg.create_pool(
                self.dsn,
                min_size=self.min_size,
                max_size=self.max_size,
                statement_cache_size=self.statement_cache_size,
                init=self._init_connection,
            )
        except (OSError, asyncpg.PostgresError) as exc:
            raise ConnectionError(f"cannot open the PostgreSQL store at {_safe(self.dsn)}: {exc}") from exc
        try:
            await self._migrate()
        except BaseException:
            await self._pool.close()
            self._pool = None
            raise

    async def _init_connection(self, conn: Any) -> None:
        self._own.add(conn.get_server_pid())

    async def _migrate(self) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(Q["lock_migrations"])
            await conn.execute(Q["create_migrations"])
            applied = {row[0] for row in await conn.fetch(Q["applied_migrations"])}
            for migration in load_migrations("postgresql"):
                if migration.version not in applied:
                    await conn.execute(migration.sql)
                    await conn.execute(Q["record_migration"], migration.version, migration.name)

    async def aclose(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                async with asyncio.timeout(10):
                    await pool.close()
            except TimeoutError:
                pool.terminate()

    @property
    def pool(self) -> Any:
        """The asyncpg pool (for tests and operators' scripts; the store needs no other)."""
        if self._pool is None:
            raise RuntimeError("the PostgreSQL store is not open")
        return self._pool

    # -- wake-ups ------------------------------------------------------------------------

    def on_foreign_change(self, callback: Callable[[], None]) -> None:
        self._hint = callback
        if self._listener is None:
            self._listener = asyncio.get_running_loop().create_task(self._listen(callback))

    def _notified(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        if pid not in self._own and self._hint is not None:
            self._hint()

    async def _listen(self, callback: Callable[[], None]) -> None:
        """Keep one connection LISTENing: ping it, and reconnect when it drops."""
        failures = 0
        while True:
            delay = 0.0
            conn: Any = None
            try:
                conn = await asyncpg.connect(self.dsn, timeout=max(self.keepalive, 5.0), statement_cache_size=0)
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _: lost.set())
                await conn.add_listener(CHANNEL, self._notified)
                if failures:
                    log.info("the PostgreSQL listener is connected again")
                failures = 0
                callback()  # whatever committed while nobody listened
                while not lost.is_set():
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self.keepalive):
                            await lost.wait()
                    if not lost.is_set():
                        await conn.fetchval(Q["ping"], timeout=self.keepalive)
                raise ConnectionError("the connection was closed")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                delay = 0.0 if failures == 1 else min(0.05 * 2**failures, 5.0)
                log.warning("the PostgreSQL listener lost its connection (%s); reconnecting in %.2fs", exc, delay)
            finally:
                if conn is not None:
                    conn.terminate()
            await asyncio.sleep(delay)  # back off between failed attempts; the broker polls meanwhile

    # -- requests ------------------------------------------------------------------------

    async def insert(self, request: Request) -> tuple[Request, bool]:
        o = request.origin
        row = await self.pool.fetchrow(
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
            _json(request_to_dict(request)),
        )
        if row is None:
            raise RuntimeError(f"request {request.id} was neither stored nor found by its idempotency key")
        if row[0]:
            self._remember(request)
            return request, True
        first = _request(row[1], row[2], row[3])
        self._remember(first)
        return first, False

    def _remember(self, request: Request) -> None:
        cache = self._cache
        cache[request.id] = request
        if len(cache) > _CACHE_SIZE:
            del cache[next(iter(cache))]

    async def settle(self, request: Request) -> Request | None:
        response = request.response
        at = response.at if response is not None else datetime.now(UTC)
        answer = _json(response_to_dict(response)) if response is not None else None
        event_id = await self.pool.fetchval(Q["settle_request"], request.id, request.status.value, at, answer)
        if event_id is None:
            return None
        self._remember(request)
        return request

    async def settle_pending(
        self, status: Status, response: Response, *, channel: str | None = None, due: datetime | None = None
    ) -> list[Request]:
        answer = _json(response_to_dict(response))
        rows = await self.pool.fetch(
            Q["settle_pending"], status.value, response.at, answer, channel, due, _DUE_BATCH if due is not None else None
        )
        settled = []
        for request_id, doc in rows:
            known = self._cache.get(request_id)
            request = (known or request_from_dict(json.loads(doc))).settle(status, response)
            self._remember(request)
            settled.append(request)
        return settled

    async def append_event(self, type: str, data: Mapping[str, Any]) -> Event:
        at = datetime.now(UTC)
        event_id = await self.pool.fetchval(Q["insert_event"], type, at, _json(dict(data)))
        return Event(int(event_id), type, at, data=dict(data))

    async def next_expiry(self) -> datetime | None:
        value: datetime | None = await self.pool.fetchval(Q["next_expiry"])
        return value

    async def get(self, request_id: str, *, fresh: bool = True) -> Request | None:
        cached = self._cache.get(request_id)
        if cached is not None:
            if cached.status is not Status.PENDING or not fresh:
                return cached
            if await self.pool.fetchval(Q["get_status"], request_id) == Status.PENDING:
                return cached
        row = await self.pool.fetchrow(Q["get_request"], request_id)
        if row is None:
            return None
        request = _request(row[0], row[1], row[2])
        self._remember(request)
        return request

    async def list(self, query: Query) -> Sequence[Request]:
        where: list[str] = []
        params: list[Any] = []
        for name in _FILTERS:
            value = getattr(query, name)
            if value is not None:
                params.append(value.value if isinstance(value, Status) else value)
                where.append(f"{name} = ${len(params)}")
        if query.after is not None:
            params.append(query.after)
            where.append(f"id {'<' if query.order == 'desc' else '>'} ${len(params)}")
        sql = "SELECT status, doc, response FROM requests"
        if where:
            sql += " WHERE " + " AND ".join(where)
        params.append(query.limit)
        sql += f" ORDER BY id {'DESC' if query.order == 'desc' else 'ASC'} LIMIT ${len(params)}"
        return [_request(row[0], row[1], row[2]) for row in await self.pool.fetch(sql, *params)]

    # -- principals and tokens ------------------------------------------------------------

    async def save_principal(self, principal: Principal) -> None:
        await self.pool.execute(
            Q["upsert_principal"], principal.name, principal.kind, principal.owner, datetime.now(UTC)
        )

    async def get_principal(self, name: str) -> Principal | None:
        row = await self.pool.fetchrow(Q["get_principal"], name)
        return Principal(row[0], row[1], row[2]) if row is not None else None

    async def list_principals(self) -> Sequence[Principal]:
        return [Principal(row[0], row[1], row[2]) for row in await self.pool.fetch(Q["list_principals"])]

    async def save_token(self, token: IssuedToken) -> None:
        try:
            await self.pool.execute(Q["insert_token"], token.id, token.hash, token.principal, token.created_at)
        except asyncpg.ForeignKeyViolationError:
            raise ValueError(f"no principal named {token.principal!r}") from None

    async def principal_for_token(self, token_hash: str) -> Principal | None:
        row = await self.pool.fetchrow(Q["principal_for_token"], token_hash)
        return Principal(row[0], row[1], row[2]) if row is not None else None

    async def revoke_tokens(self, *, token_id: str | None = None, principal: str | None = None) -> int:
        if token_id is not None:
            sql, key = Q["revoke_token"], token_id
        else:
            sql, key = Q["revoke_principal_tokens"], principal
        status: str = await self.pool.execute(sql, key, datetime.now(UTC))
        return int(status.rsplit(" ", 1)[-1])  # "UPDATE n"

    # -- events --------------------------------------------------------------------------

    async def events(self, after: int = 0, limit: int = 500) -> Sequence[Event]:
        out = []
        for event_id, type_, request_id, at, data, status, doc, answer in await self.pool.fetch(
            Q["events_after"], after, limit
        ):
            if request_id is None:
                out.append(Event(event_id, type_, at, data=json.loads(data) if data else {}))
                continue
            request = self._cache.get(request_id)
            if request is None or request.status is Status.PENDING:
                request = _request(status, doc, answer)
                self._remember(request)
            if type_ == "created" and request.status is not Status.PENDING:
                request = request.as_created()
            out.append(Event(event_id, type_, at, request_id, request))
        return out

    async def changes(self, after: int = 0, limit: int = 500) -> Sequence[tuple[int, str, str | None]]:
        rows = await self.pool.fetch(Q["changes_after"], after, limit)
        out: list[tuple[int, str, str | None]] = []
        for event_id, type_, request_id in rows:
            if type_ != "created" and request_id in self._cache:
                del self._cache[request_id]  # settled, maybe by another process: read it afresh
            out.append((event_id, type_, request_id))
        return out

    async def last_event_id(self) -> int:
        return int(await self.pool.fetchval(Q["last_event_id"]))


def _request(status: str, doc: str, response: str | None) -> Request:
    """A request from its row: the document as created, then how it settled."""
    request = request_from_dict(json.loads(doc))
    if status == Status.PENDING:
        return request
    return request.settle(Status(status), response_from_dict(json.loads(response)) if response else None)


def _safe(dsn: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(dsn)
    netloc = parts.netloc.rsplit("@", 1)
    if len(netloc) == 2 and ":" in netloc[0]:
        return urlunsplit(parts._replace(netloc=f"{netloc[0].split(':', 1)[0]}:***@{netloc[1]}"))
    return dsn
