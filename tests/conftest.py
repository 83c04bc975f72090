from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import interlock
from interlock import Broker

BACKENDS = ["memory", "sqlite", "http"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(backend: str, tmp_path: Path) -> Iterator[str]:
    """A fresh store of the backend under test; for http, a real server on its own file."""
    if backend == "memory":
        yield "memory://"
    elif backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'interlock.db'}"
    else:
        with running_server(f"sqlite:///{tmp_path / 'server.db'}", auth=False) as base:
            yield base


@contextlib.contextmanager
def running_server(store_url: str, **options: Any) -> Iterator[str]:
    """`interlock serve`'s app under uvicorn on a free loopback port, in a thread."""
    import uvicorn

    from interlock.server.app import create_app

    config = uvicorn.Config(create_app(store_url, **options), host="127.0.0.1", port=0, log_level="warning")
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
def connect(url: str) -> Callable[..., Broker]:
    """Open more brokers on the same store (for SQLite: another connection to the file)."""

    def make(**options: object) -> Broker:
        return interlock.connect(url, **options)

    return make


@pytest.fixture
async def broker(connect: Callable[..., Broker]) -> AsyncIterator[Broker]:
    async with connect() as b:
        yield b


@pytest.fixture
def serve() -> Callable[..., contextlib.AbstractContextManager[str]]:
    """Start a real server: `with serve(store_url, auth=False) as base_url: ...`."""
    return running_server
