from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import secrets
import shutil
import sqlite3
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

import interlock
from asgi_support import InProcessServer, serving
from interlock import Broker
from pg_pool import DatabasePool

BACKENDS = ["memory", "sqlite", "postgresql", "http"]
PG_SERVER = "postgresql://postgres@127.0.0.1:5432"  # here and in CI: trust auth, always up


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that spawn processes (marked slow: most of the suite's longest) first, the
    rest after them, each in its order: xdist hands tests out in this order, and a long test
    handed out last keeps one worker busy after the others have finished."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh store of the backend under test; for postgresql, a database of its own,
    cloned from the session's template; for http, a server on its own SQLite file, served
    in-process (`http_server`: open brokers on it with the `connect` fixture)."""
    if backend == "memory":
        yield "memory://"
    elif backend == "sqlite":
        yield f"sqlite:///{sqlite_copy(request, tmp_path / 'interlock.db')}"
    elif backend == "postgresql":
        with request.getfixturevalue("pg_databases")() as pg_url:
            yield pg_url
    else:
        yield request.getfixturevalue("http_server").url


@pytest.fixture
async def http_server(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[InProcessServer]:
    """`interlock serve`'s app without auth on its own SQLite file, reached in-process over
    a transport that streams (no socket: see asgi_support)."""
    from interlock.server.app import create_app

    store = f"sqlite:///{sqlite_copy(request, tmp_path / 'server.db')}"
    async with serving(create_app(store, auth=False)) as server:
        yield server


def run_apart(make: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run a coroutine to its end on an event loop of its own, in a thread of its own: a
    session fixture may first be asked for by an async test, inside a running loop."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, make()).result(timeout=120)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file with interlock's migrations applied, made once per session."""
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"

    async def migrate() -> None:
        async with interlock.connect(f"sqlite:///{path}"):
            pass

    run_apart(migrate)
    with contextlib.closing(sqlite3.connect(path)) as db:  # all of it in the main file
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


def sqlite_copy(request: pytest.FixtureRequest, path: Path) -> Path:
    """A fresh store at `path`: a copy of the migrated template (the migrations themselves
    are tested on fresh files in test_stores)."""
    shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
    return path


def psql(sql: str, database: str = "postgres") -> str:
    """Run SQL with psql (the tests' own admin work: databases, inspection)."""
    done = subprocess.run(
        ["psql", f"{PG_SERVER}/{database}", "-X", "-v", "ON_ERROR_STOP=1", "-Atqc", sql],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise RuntimeError(f"psql failed on {sql!r}: {done.stderr.strip()}")
    return done.stdout.strip()


@pytest.fixture(scope="session")
def pg_template() -> Iterator[DatabasePool]:
    """A database with interlock's migrations applied, built once per session, and the
    pool of its clones the tests draw from (pg_pool: brought back to it, not dropped)."""
    name = f"interlock_template_{os.getpid()}_{secrets.token_hex(3)}"
    psql(f"CREATE DATABASE {name}")
    pool = DatabasePool(PG_SERVER, name)
    try:

        async def migrate() -> None:
            async with interlock.connect(f"{PG_SERVER}/{name}"):
                pass

        run_apart(migrate)
        pool.remember_template()
        psql(f"ALTER DATABASE {name} WITH IS_TEMPLATE true ALLOW_CONNECTIONS false")
        yield pool
    finally:
        try:
            pool.close()
        finally:
            psql(f"ALTER DATABASE {name} WITH IS_TEMPLATE false")
            psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def pg_databases(pg_template: DatabasePool) -> Callable[[], contextlib.AbstractContextManager[str]]:
    """`with pg_databases() as url:` a database of its own in the template's state: a clone,
    or one an earlier test used, brought back to that state (see pg_pool)."""
    return pg_template.database


@contextlib.contextmanager
def running_server(store_url: str, **options: Any) -> Iterator[str]:
    """`interlock serve`'s app under uvicorn on a free loopback port, in a thread."""
    import uvicorn

    from interlock.server.app import create_app

    # A connection left open (a stream a test did not close) holds the shutdown for 2 s at most.
    app = create_app(store_url, **options)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:  # bounded: the server starts or the test fails
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.005)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)


@pytest.fixture
def connect(url: str, backend: str, request: pytest.FixtureRequest) -> Callable[..., Broker]:
    """Open more brokers on the same store (for SQLite: another connection to the file;
    for http: another client of the same server)."""
    if backend == "http":
        return cast("Callable[..., Broker]", request.getfixturevalue("http_server").connect)

    def make(**options: object) -> Broker:
        return interlock.connect(url, **options)

    return make


@pytest.fixture
async def broker(connect: Callable[..., Broker]) -> AsyncIterator[Broker]:
    async with connect() as b:
        yield b


@contextlib.asynccontextmanager
async def running_server_apart(store_url: str, **options: Any) -> AsyncIterator[str]:
    """`running_server`, started and stopped from a worker thread, so that the test's event
    loop runs on meanwhile: a receiver served on it (a fake Slack, a webhook's) answers the
    deliveries the server still sends as it stops. Stopped from the loop's own thread, the
    server waited out its delivery loop's grace (5 s) on a send nobody could answer."""
    manager = running_server(store_url, **options)
    url = await asyncio.to_thread(manager.__enter__)
    try:
        yield url
    finally:
        await asyncio.to_thread(manager.__exit__, None, None, None)


@pytest.fixture(scope="session")
def serve() -> Callable[..., contextlib.AbstractContextManager[str]]:
    """Start a real server: `with serve(store_url, auth=False) as base_url: ...`."""
    return running_server


@pytest.fixture(scope="session")
def serve_apart() -> Callable[..., contextlib.AbstractAsyncContextManager[str]]:
    """`serve` for an async test whose receivers run on its event loop:
    `async with serve_apart(store_url, auth=False) as base_url: ...`."""
    return running_server_apart
