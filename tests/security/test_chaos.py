"""Chaos on one SQLite file: worker processes create and answer requests while a seeded
schedule SIGKILLs them; nothing they saw acknowledged is lost, nothing settles twice, and
the file is intact. (`bench/chaos.py` runs the same harness longer, and on PostgreSQL.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from chaos_harness import check_sqlite, lines, run

pytestmark = pytest.mark.slow


def test_sigkilled_workers_on_one_sqlite_file_lose_nothing_acknowledged_and_settle_nothing_twice(
    tmp_path: Path,
) -> None:
    path = tmp_path / "chaos.db"
    outcome = run(f"sqlite:///{path}", tmp_path / "logs", seconds=15, workers=4, seed=8)
    check_sqlite(outcome, tmp_path / "logs", path)
    report = "\n".join(lines(outcome))
    assert outcome.kills >= 8, report
    assert outcome.created >= 200 and outcome.answered >= 50, report
    assert not outcome.lost, report
    assert not outcome.violations, report
