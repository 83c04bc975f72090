"""A SQLite store holds every request and answer and the notification channels' secrets
(webhook secrets, the mail password, Slack tokens): whoever reads the file can sign a
webhook's answer as the person it is for. A new store is made readable by its owner
alone, and SQLite gives its -wal and -shm files the same mode, whatever the umask; a
store that every user may read still opens, and says so once with the command that
closes it."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

import interlock
from interlock import Text

pytestmark = pytest.mark.anyio


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The umask of a machine that lets every user read what it makes (022)."""
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("open_umask")
async def test_a_new_store_and_its_wal_and_shm_files_are_readable_by_their_owner_alone(tmp_path: Path) -> None:
    db = tmp_path / "interlock.db"
    async with interlock.connect(f"sqlite:///{db}") as broker:
        await broker.create(Text("Deploy?"), to="alice")
        made = [db, tmp_path / "interlock.db-wal", tmp_path / "interlock.db-shm"]
        assert {path.name: mode(path) for path in made} == {path.name: 0o600 for path in made}


@pytest.mark.usefixtures("open_umask")
async def test_a_store_every_user_may_read_opens_and_says_how_to_close_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "shared.db"
    async with interlock.connect(f"sqlite:///{db}") as broker:
        asked = await broker.create(Text("Deploy?"), to="alice")
    db.chmod(0o644)
    caplog.set_level(logging.WARNING, logger="interlock")

    async with interlock.connect(f"sqlite:///{db}") as broker:
        assert (await broker.get(asked.id)).id == asked.id

    (warning,) = [r for r in caplog.records if "every user of this machine may read" in r.getMessage()]
    # SQLite made the -wal and -shm files as it opened the store, with the store's own mode.
    assert warning.getMessage().startswith(f"every user of this machine may read the SQLite store at {db},")
    assert warning.getMessage().endswith(f"chmod 600 {db} {db}-wal {db}-shm")


async def test_a_private_store_opens_without_a_word(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "private.db"
    async with interlock.connect(f"sqlite:///{db}") as broker:
        await broker.create(Text("Deploy?"), to="alice")
    caplog.set_level(logging.WARNING, logger="interlock")
    async with interlock.connect(f"sqlite:///{db}") as broker:
        await broker.create(Text("Again?"), to="alice")
    assert not [r for r in caplog.records if "may read" in r.getMessage()]


async def test_a_store_refused_at_open_leaves_no_file_behind(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    (tmp_path / "new.db-wal").mkdir()  # where SQLite would write its log: it cannot
    with pytest.raises((ConnectionError, interlock.errors.Unavailable), match=str(db)):
        async with interlock.connect(f"sqlite:///{db}"):
            pass
    assert os.listdir(tmp_path) == ["new.db-wal"]
