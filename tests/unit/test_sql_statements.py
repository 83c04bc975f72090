"""The SQL dialects' named statements, as the logic they share (`store/_sql.py`) runs them."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from interlock.store._sql import Transaction, load_queries, numbered
from interlock.store.sqlite import SqliteStore

pytestmark = pytest.mark.anyio


def statements(dialect: str) -> dict[str, str]:
    return load_queries(dialect) | load_queries(dialect, "followups")


def test_a_statement_named_in_both_dialects_takes_as_many_arguments_in_each() -> None:
    sqlite, postgres = statements("sqlite"), statements("postgresql")
    shared = sorted(sqlite.keys() & postgres.keys())
    assert "insert_event" in shared and "lock_run" in shared
    for name in shared:
        _, taken = numbered(sqlite[name])
        in_sqlite = max(taken, default=-1) + 1
        in_postgres = max((int(n) for n in re.findall(r"\$(\d+)", postgres[name])), default=0)
        assert in_sqlite == in_postgres, f"{name}: {in_sqlite} arguments on SQLite, {in_postgres} on PostgreSQL"


def test_a_name_a_comment_mentions_is_not_a_parameter() -> None:
    sql = "-- park the run held by :worker, when given\nUPDATE runs SET state = :state WHERE id = :id -- :id again"
    statement, taken = numbered(sql)
    assert statement.count("?") == 2 and taken == (0, 1)
    # SQLite statements whose comments name parameters take their arguments as SQLite sees them.
    _, taken = numbered(statements("sqlite")["finish_run"])
    assert len(taken) == 9  # its body's, not the :worker its comment names


async def test_the_body_of_a_sqlite_write_runs_to_its_end_in_the_transaction(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "writes.db"))
    await store.open()
    try:

        async def save(tx: Transaction) -> int:
            return await tx.execute("put_setting", "colour", '"blue"', 1)

        assert await store._write_in(save) == 1
        assert await store.load_setting("colour") == "blue"
    finally:
        await store.aclose()


async def test_a_sqlite_write_whose_body_suspends_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "writes.db"))
    await store.open()
    try:

        async def save(tx: Transaction) -> None:
            await tx.execute("put_setting", "colour", '"blue"', 1)
            await asyncio.sleep(0)  # would wait on the loop with the database locked

        with pytest.raises(RuntimeError, match="suspended"):
            await store._write_in(save)
        assert await store.load_setting("colour") is None
    finally:
        await store.aclose()
