from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest


@pytest.fixture
def pg_url(pg_databases: Callable[[], contextlib.AbstractContextManager[str]]) -> Iterator[str]:
    """A fresh database with interlock's schema, dropped after the test."""
    with pg_databases() as url:
        yield url
