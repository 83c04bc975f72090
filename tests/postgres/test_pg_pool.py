"""The suite's PostgreSQL databases (pg_pool): a reused one is in the template's state."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pg_support import psql

import interlock
from interlock import Text
from pg_pool import DatabasePool

pytestmark = pytest.mark.anyio


@pytest.fixture
def pool(pg_template: DatabasePool) -> Iterator[DatabasePool]:
    """A pool of its own, so which database comes back next is known."""
    pool = pg_template.sibling()
    try:
        yield pool
    finally:
        pool.close()


def name_of(url: str) -> str:
    return url.rsplit("/", 1)[1]


async def test_a_reused_database_holds_nothing_from_the_test_before(pool: DatabasePool) -> None:
    with pool.database() as url:
        async with interlock.connect(url) as broker:
            for _ in range(3):
                request = await broker.create(Text("Q?"), to="alice")
                await broker.resolve(request.id, "a")
        psql("ANALYZE", name_of(url))
        leftover = interlock.connect(url)
        await leftover.open()  # a connection the test leaves open: ended before reuse
    with pool.database() as again:
        assert again == url  # the same database, handed back
        tables = ["requests", "events", "principals", "tokens", "closed_channels", "sessions"]
        counts = psql(" UNION ALL ".join(f"SELECT count(*) FROM {t}" for t in tables), name_of(again))
        assert counts.split() == ["0"] * len(tables)
        assert psql("SELECT count(*) FROM pg_statistic WHERE starelid >= 16384", name_of(again)) == "0"
        async with interlock.connect(again) as broker:
            await broker.create(Text("Q?"), to="alice")
            assert await broker.last_event_id() == 1  # the event ids start again
    await leftover.aclose()


async def test_a_database_whose_schema_a_test_changed_is_dropped_not_reused(pool: DatabasePool) -> None:
    with pool.database() as url:
        psql("ALTER TABLE requests ADD COLUMN extra text", name_of(url))
    with pool.database() as other:
        assert other != url
        assert psql(f"SELECT count(*) FROM pg_database WHERE datname = '{name_of(url)}'") == "0"
        assert (
            psql("SELECT count(*) FROM information_schema.columns WHERE column_name = 'extra'", name_of(other)) == "0"
        )
