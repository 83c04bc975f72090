"""What the tests of the keys the nodes on one store share (the secret key, the grant key)
have in common: a broker over each store implementation (the ports' suites), and real
nodes started with given keys on a SQLite file or a PostgreSQL database (the nodes' suites)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

import interlock
from interlock.broker import LocalBroker
from serve_support import refused_at_start


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def url_of(implementation: tuple[str, str]) -> str:
    """The URL of a store implementation of the ports' suites (tests/integration/conftest.py)."""
    name, where = implementation
    return {"memory": "memory://", "sqlite": f"sqlite:///{where}"}.get(name, where)


async def opened_broker(implementation: tuple[str, str]) -> AsyncIterator[LocalBroker]:
    """A local broker on `implementation`, open (a module makes it its `broker` fixture)."""
    made = interlock.connect(url_of(implementation))
    assert isinstance(made, LocalBroker)
    await made.open()
    try:
        yield made
    finally:
        await made.aclose()


def env_with(key: str | None, grant_key: Path | None = None) -> dict[str, str]:
    """This environment without interlock's settings, with `key` as the secret key and
    `grant_key` as the grant key's file, each if given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    if key is not None:
        env["INTERLOCK_SECRET_KEY"] = key
    if grant_key is not None:
        env["INTERLOCK_GRANT_KEY"] = str(grant_key)
    return env


async def refused(store: str, key: str | None, grant_key: Path | None = None) -> str:
    """The one error line of a node started on `store` with these keys, refused (exit 4)."""
    return await anyio.to_thread.run_sync(refused_at_start, store, env_with(key, grant_key))


def node_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store for nodes: a SQLite file, or a PostgreSQL database of the test's own (a
    module makes it its `store` fixture, with params sqlite and postgresql)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'nodes.db'}"
        return
    with request.getfixturevalue("pg_databases")() as url:
        yield url
