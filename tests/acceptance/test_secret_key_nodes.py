"""Nodes on one store must sign with one INTERLOCK_SECRET_KEY, or a person's email link
works on one node and says "not valid" on the next: real `interlock serve` processes side
by side on one SQLite file (and one PostgreSQL database). A node with another key, or with
none beside nodes that have one, is refused at start on one line (exit 4); changing the key
is done on purpose (`interlock secret-key rotate`). The commands that only touch the store
run in process (cli_support)."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from cli_support import invoke, new_store
from interlock.secret_key import fingerprint
from key_support import env_with, node_store, refused
from serve_support import serve

pytestmark = pytest.mark.anyio

KEY, OTHER = "the-nodes-key-0123456789abcdef-0123456789", "another-key-0123456789abcdef-0123456789"


store = pytest.fixture(params=["sqlite", "postgresql"])(node_store)


@pytest.mark.slow
async def test_a_node_with_another_key_beside_a_running_one_is_refused_and_one_with_the_same_key_starts(
    store: str,
) -> None:
    async with serve("--db", store, env=env_with(KEY)) as first:
        line = await refused(store, OTHER)
        assert line.startswith("error: the other nodes on this store sign with another INTERLOCK_SECRET_KEY"), line
        assert "`interlock secret-key rotate`" in line, line
        assert KEY not in line and OTHER not in line
        async with serve("--db", store, env=env_with(KEY)) as second:
            assert second.proc.returncode is None
        assert first.proc.returncode is None  # the refused node changed nothing for the running one


@pytest.mark.slow
async def test_a_node_without_a_key_is_refused_once_a_node_with_one_served_until_the_key_is_forgotten(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'nodes.db'}"
    async with serve("--db", store, env=env_with(None)):  # one node making its key at start: nothing kept
        pass
    async with serve("--db", store, env=env_with(KEY)):
        line = await refused(store, None)
        assert "sign with an INTERLOCK_SECRET_KEY, and this node has none" in line, line
        assert "`interlock secret-key forget`" in line, line
    forgot = invoke("secret-key", "forget", "--db", store, env=env_with(None))
    assert forgot.returncode == 0, forgot.stderr
    assert "keeps no secret key now" in forgot.stderr
    async with serve("--db", store, env=env_with(None)) as alone:
        assert alone.proc.returncode is None


@pytest.mark.slow
async def test_a_rotated_key_lets_nodes_with_the_new_key_start_and_refuses_the_old_one(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'nodes.db'}"
    async with serve("--db", store, env=env_with(KEY)):
        pass
    rotated = invoke("secret-key", "rotate", "--db", store, env=env_with(OTHER))
    assert rotated.returncode == 0, rotated.stderr
    assert "sign with this INTERLOCK_SECRET_KEY from now on" in rotated.stderr
    assert "another INTERLOCK_SECRET_KEY" in await refused(store, KEY)
    async with serve("--db", store, env=env_with(OTHER)) as node:
        assert node.proc.returncode is None
    again = invoke("secret-key", "rotate", "--db", store, env=env_with(OTHER))
    assert again.returncode == 0 and "unchanged" in again.stderr


def kept_fingerprint(path: Path) -> list[tuple[str]]:
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        return db.execute("SELECT fingerprint FROM secret_key_fingerprint").fetchall()


def test_rotate_without_a_key_or_on_a_server_is_refused_on_one_line_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "nodes.db"
    store = new_store(path)
    assert invoke("secret-key", "rotate", "--db", store, env=env_with(KEY)).returncode == 0
    for env, args, why in (
        (env_with(None), ("--db", store), "INTERLOCK_SECRET_KEY is not set: set it to the new key"),
        (env_with(""), ("--db", store), "INTERLOCK_SECRET_KEY is not set"),
        (env_with(OTHER), ("--db", "http://127.0.0.1:9"), "works on the server's store file, not through its URL"),
    ):
        result = invoke("secret-key", "rotate", *args, env=env)
        assert result.returncode == 4, result.stderr
        [line] = result.stderr.splitlines()
        assert line.startswith("error: ") and why in line, line
    assert kept_fingerprint(path) == [(fingerprint(KEY),)]


def test_deliver_with_another_key_is_refused_before_it_mails_a_link_the_servers_refuse(tmp_path: Path) -> None:
    path = tmp_path / "nodes.db"
    store = new_store(path)
    assert invoke("secret-key", "rotate", "--db", store, env=env_with(KEY)).returncode == 0
    result = invoke("deliver", "--db", store, env=env_with(OTHER))
    assert result.returncode == 4, result.stderr
    [line] = result.stderr.splitlines()
    assert "sign with another INTERLOCK_SECRET_KEY" in line, line
    same = invoke("deliver", "--db", store, env=env_with(KEY))  # the key checks out; the routing is what is missing
    assert same.returncode == 4 and "no routing here yet" in same.stderr, same.stderr
    unsigned = invoke("deliver", "--db", store, env=env_with(None))  # mails no one-click links: nothing to check
    assert "no routing here yet" in unsigned.stderr, unsigned.stderr
    assert kept_fingerprint(path) == [(fingerprint(KEY),)]


@pytest.mark.parametrize(
    "command",
    [("serve", "--port", "0"), ("deliver",), ("secret-key", "rotate"), ("grant-key", "rotate")],
    ids=lambda command: " ".join(command[:2]),
)
def test_a_key_too_short_to_keep_what_it_signs_is_refused_and_changes_nothing(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    path = tmp_path / "nodes.db"
    store = new_store(path)
    assert invoke("secret-key", "rotate", "--db", store, env=env_with(KEY)).returncode == 0
    weak = "hunter2-hunter2"  # a phrase, found by trying words against a link it signed
    result = invoke(*command, "--db", store, env=env_with(weak))
    assert result.returncode == 4, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("error: INTERLOCK_SECRET_KEY is 15 characters long"), line
    assert "at least 32 random characters" in line and "secrets.token_urlsafe(32)" in line, line
    assert weak not in line
    assert kept_fingerprint(path) == [(fingerprint(KEY),)]
