"""A backup of a SQLite store in use, with the commands of docs/how-to/server.md (Backing up
the store): taken while a process has the file open in WAL mode, with commits not yet
checkpointed, it holds every commit made before it; a server on the copy serves the same
inbox, and its new events take ids after the backup's."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

import interlock
from interlock import Text
from serve_support import serve

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

BOUND = 20

VACUUM_INTO = "import sqlite3; sqlite3.connect('interlock.db').execute(\"VACUUM INTO 'interlock-backup.db'\")"
"""The backup command of server.md for a machine without the sqlite3 shell."""


def back_up(how: str, folder: Path) -> None:
    assert (folder / "interlock.db-wal").stat().st_size > 0  # commits in the log, not yet in the file
    command = (
        ["sqlite3", "interlock.db", ".backup interlock-backup.db"]
        if how == "sqlite3 shell"
        else [sys.executable, "-c", VACUUM_INTO]
    )
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=BOUND)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "how",
    [
        pytest.param(
            "sqlite3 shell",
            marks=pytest.mark.skipif(shutil.which("sqlite3") is None, reason="no sqlite3 shell here"),
        ),
        "VACUUM INTO",
    ],
)
async def test_a_backup_of_a_file_in_use_holds_every_commit_before_it_and_serves(tmp_path: Path, how: str) -> None:
    live = tmp_path / "interlock.db"
    async with interlock.connect(f"sqlite:///{live}") as broker:
        asked = [await broker.create(Text(f"Name {i}?"), to="alice") for i in range(3)]
        await broker.resolve(asked[0].id, "Ada", by="alice")
        seen = await broker.last_event_id()
        back_up(how, tmp_path)
        await broker.create(Text("After the backup?"), to="alice")
        restored = tmp_path / "restored"
        restored.mkdir()
        shutil.move(tmp_path / "interlock-backup.db", restored / "interlock.db")
        async with (
            serve("--db", f"sqlite:///{restored / 'interlock.db'}", "--no-auth") as node,
            httpx.AsyncClient(timeout=BOUND) as http,
        ):
            inbox = (await http.get(f"{node.url}/api/v1/requests", params={"status": "pending"})).json()
            assert [r["id"] for r in inbox["items"]][::-1] == [a.id for a in asked[1:]]
            made = await http.post(
                f"{node.url}/api/v1/requests", json={"asks": [{"type": "text", "prompt": "Restored?"}]}
            )
            assert made.status_code == 201, made.text
            page = (await http.get(f"{node.url}/api/v1/events", params={"after": seen - 1})).json()
            assert [(e["id"], e["type"]) for e in page["events"]] == [(seen, "answered"), (seen + 1, "created")]
    with contextlib.closing(sqlite3.connect(restored / "interlock.db")) as db, db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
