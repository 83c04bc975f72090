"""The port conformance suites' stores: each test gets every implementation in turn."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from interlock.store import Store
from interlock.store.memory import MemoryStore
from interlock.store.sqlite import SqliteStore

IMPLEMENTATIONS = ["memory", "sqlite", "postgresql"]


@pytest.fixture(params=IMPLEMENTATIONS, ids=[f"{name}-store" for name in IMPLEMENTATIONS])
def implementation(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Which store, and where: a file of its own, or a database cloned from the template."""
    if request.param != "postgresql":
        yield request.param, str(tmp_path / "ports.db")
        return
    databases: Callable[[], AbstractContextManager[str]] = request.getfixturevalue("pg_databases")
    with databases() as pg_url:
        yield request.param, pg_url


@pytest.fixture
async def store(implementation: tuple[str, str]) -> AsyncIterator[Store]:
    name, where = implementation
    made: Store
    if name == "memory":
        made = MemoryStore()
    elif name == "sqlite":
        made = SqliteStore(where)
    else:
        from interlock.store.postgres import PostgresStore

        made = PostgresStore(where)
    await made.open()
    try:
        yield made
    finally:
        await made.aclose()
