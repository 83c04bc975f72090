"""Helpers for the PostgreSQL tests: admin SQL, real `interlock serve` nodes, child processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator, Sequence

import anyio
import asyncpg

from serve_support import serve_many

PG_SERVER = "postgresql://postgres@127.0.0.1:5432"
BOUND = 20  # seconds: the most any single wait on another process may take


def database_of(url: str) -> str:
    """The database a URL names."""
    return url.rsplit("/", 1)[1].split("?", 1)[0]


def psql(sql: str, database: str = "postgres") -> str:
    done = subprocess.run(
        ["psql", f"{PG_SERVER}/{database}", "-X", "-v", "ON_ERROR_STOP=1", "-Atqc", sql],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise RuntimeError(f"psql failed on {sql!r}: {done.stderr.strip()}")
    return done.stdout.strip()


@contextlib.contextmanager
def empty_database() -> Iterator[str]:
    """A database without interlock's schema (to watch the migrations run), dropped after."""
    name = f"interlock_empty_{os.getpid()}_{secrets.token_hex(4)}"
    psql(f"CREATE DATABASE {name} TEMPLATE template0")
    try:
        yield f"{PG_SERVER}/{name}"
    finally:
        psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextlib.asynccontextmanager
async def nodes(db: str, count: int) -> AsyncIterator[list[tuple[str, asyncio.subprocess.Process]]]:
    """`count` real `interlock serve --db <db>` processes, healthy, stopped after."""
    async with serve_many(count, "--db", db, "--no-auth") as started:
        yield [(served.url, served.proc) for served in started]


async def spawn(code: str, *args: str) -> asyncio.subprocess.Process:
    """A Python child running `code`, talking over its stdin and stdout."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        textwrap.dedent(code),
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def read_line(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    with anyio.fail_after(BOUND):
        line = await proc.stdout.readline()
    if not line:
        assert proc.stderr is not None
        raise AssertionError("the child ended early: " + (await proc.stderr.read()).decode())
    return line.decode().strip()


def send(procs: Sequence[asyncio.subprocess.Process], line: str) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(line.encode() + b"\n")


async def refuse_connections(db: str) -> None:
    """The database refuses new connections and ends the open ones, as a restart does
    (until `allow_connections`)."""
    name = database_of(db)
    admin = await asyncpg.connect(f"{PG_SERVER}/postgres")
    try:
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            name,
        )
    finally:
        await admin.close()


async def allow_connections(db: str) -> None:
    """The database takes connections again (after `refuse_connections`)."""
    admin = await asyncpg.connect(f"{PG_SERVER}/postgres")
    try:
        await admin.execute(f'ALTER DATABASE "{database_of(db)}" ALLOW_CONNECTIONS true')
    finally:
        await admin.close()


@contextlib.asynccontextmanager
async def refusing_connections(db: str) -> AsyncIterator[None]:
    """The database refuses new connections and ends the open ones (as a restart does),
    until the block ends."""
    try:
        await refuse_connections(db)
        yield
    finally:
        await allow_connections(db)


class Partition:
    """A TCP proxy to the test's PostgreSQL server that can stop passing bytes either way
    (`cut`) while every connection stays open, as a network partition or a failover whose
    old address is gone does: the database neither answers nor refuses. `url(db)` is `db`
    through the proxy."""

    def __init__(self) -> None:
        self.flowing = asyncio.Event()
        self.flowing.set()
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.Task[None]] = set()
        self.port = 0

    async def __aenter__(self) -> Partition:
        self._server = await asyncio.start_server(self._link, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for link in list(self._links):
            link.cancel()
        await asyncio.gather(*self._links, return_exceptions=True)

    def url(self, db: str) -> str:
        return db.replace("@127.0.0.1:5432/", f"@127.0.0.1:{self.port}/")

    def cut(self) -> None:
        self.flowing.clear()

    def heal(self) -> None:
        self.flowing.set()

    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._links.add(task)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", 5432)
            try:
                await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
            finally:
                up_writer.close()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            self._links.discard(task)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        while chunk := await source.read(65536):
            await self.flowing.wait()  # cut: held, neither passed on nor refused
            sink.write(chunk)
            await sink.drain()
        sink.close()
