from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

import interlock
from interlock import Broker

BACKENDS = ["memory", "sqlite"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(backend: str, tmp_path: Path) -> str:
    """A fresh store of the backend under test."""
    if backend == "memory":
        return "memory://"
    return f"sqlite:///{tmp_path / 'interlock.db'}"


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
