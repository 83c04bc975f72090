"""A SQLite file this process cannot open or write is refused on one line that names the
file and the cause, found by looking, with SQLite's own error last: a folder not there, a
file on the way, the path of a folder; a folder, a file, a -wal or -shm file this user may
not write; a filesystem mounted read-only; a disk full. The same line from
`interlock.connect`, any command (exit 4) and `interlock serve` (exit 4, no traceback).

Permission bits bind every user but root: run as root (as in CI containers), the commands
run as root without the capabilities that pass over them (setpriv's bounding set), else as
`nobody` (through setpriv or runuser). A read-only mount and a full filesystem are
made in a mount namespace of their own (unshare, as root); without one those tests are
skipped, and `why` is checked on a statvfs that says read-only instead.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import interlock
from interlock.store import _sqlite_files
from serve_support import INTERLOCK, START_BOUND

BOUND = 60  # seconds: the most one command may take on a busy machine
ENV = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}


def refused(
    url: str, prefix: list[str] | None = None, *, command: tuple[str, ...] = ("token", "create", "ops", "--human")
) -> str:
    """`interlock COMMAND --db url` (after `prefix`: as another user, in a namespace),
    refused with exit code 4 and no traceback: its one line. The command makes the store
    if it is new (one that only reads refuses a file that is not there before opening it)."""
    done = subprocess.run(
        [*(prefix or []), *INTERLOCK, *command, "--db", url],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=BOUND,
        cwd=tempfile.gettempdir(),
    )
    assert done.returncode == 4, done.stderr
    assert "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    return line


def owned(path: Path) -> str:
    info = path.stat()
    return f"owned by {pwd.getpwuid(info.st_uid).pw_name}, mode {stat.S_IMODE(info.st_mode):04o}"


def make_store(path: Path) -> None:
    """A store at `path` with its tables, closed (so its -wal and -shm are gone)."""
    done = subprocess.run(
        [*INTERLOCK, "token", "create", "ops", "--human", "--db", f"sqlite:///{path}"],  # it makes the store
        env=ENV,
        capture_output=True,
        text=True,
        timeout=BOUND,
    )
    assert done.returncode == 0, done.stderr
    assert not Path(f"{path}-wal").exists()


def connect_refused(path: Path) -> str:
    """What `interlock.connect` on the SQLite file `path` is refused with."""

    async def opening() -> None:
        async with interlock.connect(f"sqlite:///{path}"):
            pass

    with pytest.raises(ConnectionError) as raised:
        asyncio.run(opening())
    return str(raised.value)


# -- in this process: what no permission bit decides --------------------------------------


def test_a_folder_that_is_not_there_is_named_and_nothing_is_made(tmp_path: Path) -> None:
    path = tmp_path / "gone" / "deeper" / "interlock.db"
    assert connect_refused(path) == (
        f"cannot open the SQLite store at {path}: its folder {path.parent} does not exist "
        f"(nor does {tmp_path / 'gone'}) (SQLite: unable to open database file)"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_folder_named_as_the_file_and_a_file_on_the_way_are_named(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    (tmp_path / "folder.db").mkdir()
    cases = {
        tmp_path / "folder.db": "it is a folder, not a file",
        tmp_path / "afile" / "interlock.db": f"{tmp_path / 'afile'} is a file, not a folder",
    }
    for path, why in cases.items():
        expected = f"cannot open the SQLite store at {path}: {why} (SQLite: unable to open database file)"
        assert connect_refused(path) == expected


def test_a_file_that_is_no_database_is_named(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("not a database")
    assert connect_refused(path) == f"cannot open the SQLite store at {path} (SQLite: file is not a database)"
    assert path.read_text() == "not a database"


# -- as a user bound by permission bits ------------------------------------------------------


@pytest.fixture(scope="module")
def as_user() -> tuple[list[str], str]:
    """How to run a command as a user whom permission bits bind, and that user's name: this
    process's own, or `nobody` when tests run as root."""
    if os.geteuid() != 0:
        return [], pwd.getpwuid(os.geteuid()).pw_name
    if shutil.which("setpriv"):
        # Root without the capabilities that pass over permission bits is bound by them like
        # anyone else, and can still read this interlock wherever it is installed (under
        # /root, say, which nobody may not enter).
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]
        with tempfile.NamedTemporaryFile() as shut:
            os.chmod(shut.name, 0)
            probe = subprocess.run(
                [
                    *prefix,
                    sys.executable,
                    "-c",
                    "import os, sys; assert not os.access(sys.argv[1], os.R_OK)",
                    shut.name,
                ],
                capture_output=True,
                timeout=BOUND,
            )
        if probe.returncode == 0:
            return prefix, "root"
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("tests run as root, which permission bits do not bind, and there is no user nobody")
    if shutil.which("setpriv"):
        prefix = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"]
    elif shutil.which("runuser"):
        prefix = ["runuser", "-u", "nobody", "--"]
    else:
        pytest.skip("tests run as root, which permission bits do not bind, and neither setpriv nor runuser is here")
    probe = subprocess.run(
        [*prefix, sys.executable, "-c", "import interlock"], capture_output=True, text=True, timeout=BOUND
    )
    if probe.returncode != 0:
        pytest.skip(f"nobody cannot run this interlock (its files are not theirs to read): {probe.stderr.strip()}")
    return prefix, "nobody"


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder that `as_user` may enter (pytest's own are its owner's alone), removed after."""
    base = Path(tempfile.mkdtemp(prefix="interlock-refusals-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        for name in base.rglob("*"):
            if name.is_dir():
                name.chmod(0o700)
        shutil.rmtree(base)


@pytest.mark.slow
def test_a_folder_this_user_may_not_write_is_named_with_its_owner_and_mode(
    as_user: tuple[list[str], str], folder: Path
) -> None:
    prefix, user = as_user
    shut = folder / "shut"
    shut.mkdir(mode=0o555)
    shut.chmod(0o555)
    path = shut / "interlock.db"
    assert refused(f"sqlite:///{path}", prefix) == (
        f"error: cannot open the SQLite store at {path}: user {user} may not create files in its folder "
        f"{shut} ({owned(shut)}), where SQLite makes the database and its -wal and -shm files "
        "(SQLite: unable to open database file)"
    )

    shut.chmod(0o777)
    make_store(path)  # the database is there and writable: SQLite must still make its -wal and -shm
    path.chmod(0o666)
    shut.chmod(0o555)
    assert refused(f"sqlite:///{path}", prefix) == (
        f"error: cannot open the SQLite store at {path}: user {user} may not create files in its folder "
        f"{shut} ({owned(shut)}), where SQLite makes its -wal and -shm files "
        "(SQLite: attempt to write a readonly database)"
    )


@pytest.mark.slow
def test_a_store_in_a_folder_this_user_may_not_enter_is_not_said_to_be_missing(
    as_user: tuple[list[str], str], folder: Path
) -> None:
    """A command that reads a store looks for its file first, and refuses one not there: a
    file whose folder this user may not enter looked missing too (`os.path.exists`)."""
    prefix, user = as_user
    shut = folder / "shut"
    shut.mkdir()
    path = shut / "interlock.db"
    make_store(path)
    shut.chmod(0o600)  # readable, but none may enter it (its owner neither, without the capabilities)
    line = refused(f"sqlite:///{path}", prefix, command=("token", "list"))
    assert line == (
        f"error: cannot open the SQLite store at {path}: user {user} may not enter the folder {shut} ({owned(shut)}) "
        "(SQLite: unable to open database file)"
    )


@pytest.mark.slow
def test_a_database_this_user_may_only_read_is_refused_before_sqlite_leaves_files_beside_it(
    as_user: tuple[list[str], str], folder: Path
) -> None:
    prefix, user = as_user
    folder.chmod(0o777)
    path = folder / "interlock.db"
    make_store(path)
    for mode, may_not in ((0o444, "write"), (0o000, "read or write")):
        path.chmod(mode)
        assert refused(f"sqlite:///{path}", prefix, command=("ask", "Deploy?", "--to", "bob")) == (
            f"error: cannot open the SQLite store at {path}: user {user} may not {may_not} it ({owned(path)})"
        )
        # (opened read-only, it made -wal and -shm files that the owner's processes may not write)
        assert sorted(name.name for name in folder.iterdir()) == ["interlock.db"]


@pytest.mark.slow
@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
def test_a_wal_or_shm_file_this_user_may_not_write_is_named(
    as_user: tuple[list[str], str], folder: Path, suffix: str
) -> None:
    prefix, user = as_user
    folder.chmod(0o777)
    path = folder / "interlock.db"
    make_store(path)
    path.chmod(0o666)
    beside = Path(f"{path}{suffix}")
    beside.write_bytes(b"")
    beside.chmod(0o444)
    assert refused(f"sqlite:///{path}", prefix) == (
        f"error: cannot open the SQLite store at {path}: user {user} may not write its {suffix} file {beside} "
        f"({owned(beside)}), which SQLite writes beside it"
    )


@pytest.mark.slow
def test_serve_on_a_folder_it_may_not_write_says_which_and_why_on_one_line_and_exits_4(
    as_user: tuple[list[str], str], folder: Path
) -> None:
    prefix, user = as_user
    folder.chmod(0o555)
    path = folder / "interlock.db"
    serving = subprocess.run(
        [*prefix, *INTERLOCK, "serve", "--port", "0", "--db", f"sqlite:///{path}"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=START_BOUND,
        cwd=tempfile.gettempdir(),
    )
    assert serving.returncode == 4, serving.stderr
    assert "Traceback" not in serving.stderr
    [line] = [line for line in serving.stderr.splitlines() if line.startswith("error: ")]
    assert line == (
        f"error: cannot open the SQLite store at {path}: user {user} may not create files in its folder "
        f"{folder} ({owned(folder)}), where SQLite makes the database and its -wal and -shm files "
        "(SQLite: unable to open database file)"
    )


# -- in a mount namespace of their own: a read-only filesystem, a full one -------------------


@pytest.fixture(scope="module")
def namespace() -> list[str]:
    """How to run a shell command in a mount namespace of its own, where it may mount."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("mounting a filesystem read-only, or a small one, takes root and unshare")
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
        capture_output=True,
        text=True,
        timeout=BOUND,
    )
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace here: {probe.stderr.strip()}")
    return ["unshare", "-m", "sh", "-e", "-c"]


def in_namespace(namespace: list[str], mount: str, url: str) -> str:
    """`interlock token create ops --human --db url` (a command that makes the store if it is new) after
    the shell command `mount`, in its own mount namespace: its one line."""
    command = " ".join(map(_quoted, [*INTERLOCK, "token", "create", "ops", "--human", "--db", url]))
    done = subprocess.run(
        [*namespace, f"{mount}; exec {command}"], env=ENV, capture_output=True, text=True, timeout=BOUND
    )
    assert done.returncode == 4, done.stderr
    [line] = done.stderr.splitlines()
    return line


def _quoted(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


@pytest.mark.slow
def test_a_filesystem_mounted_read_only_is_named(namespace: list[str], folder: Path) -> None:
    path = folder / "interlock.db"
    make_store(path)
    mount = f"mount --bind -o ro {_quoted(str(folder))} {_quoted(str(folder))}"
    why = f"the filesystem of its folder {folder} is mounted read-only"
    assert in_namespace(namespace, mount, f"sqlite:///{path}") == (
        f"error: cannot open the SQLite store at {path}: {why}"
    )
    new = folder / "new.db"
    assert in_namespace(namespace, mount, f"sqlite:///{new}") == (
        f"error: cannot open the SQLite store at {new}: {why} (SQLite: unable to open database file)"
    )


@pytest.mark.slow
def test_a_full_filesystem_is_named_and_is_for_now(namespace: list[str], folder: Path) -> None:
    path = folder / "interlock.db"
    mount = (
        f"mount -t tmpfs -o size=64k tmpfs {_quoted(str(folder))}; "
        f"dd if=/dev/zero of={_quoted(str(folder / 'filler'))} bs=4k count=64 2>/dev/null || true"
    )
    assert in_namespace(namespace, mount, f"sqlite:///{path}") == (
        f"error: the store at sqlite:///{path}: cannot open the SQLite store at {path} for now: the filesystem "
        f"of its folder {folder} is full (0 bytes free) (SQLite: database or disk is full); try again shortly"
    )


class _ReadOnly:
    """A statvfs result that says read-only, and otherwise this filesystem's."""

    def __init__(self, real: os.statvfs_result) -> None:
        self.real = real

    def __getattr__(self, name: str) -> Any:
        return self.real.f_flag | os.ST_RDONLY if name == "f_flag" else getattr(self.real, name)


def test_why_names_a_read_only_mount_from_statvfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(Where no mount namespace can make one: the check at its boundary, os.statvfs.)"""
    real = os.statvfs
    monkeypatch.setattr(_sqlite_files.os, "statvfs", lambda name: _ReadOnly(real(name)))
    path = tmp_path / "interlock.db"
    error = sqlite3.OperationalError("unable to open database file")
    assert _sqlite_files.why(str(path), error) == f"the filesystem of its folder {tmp_path} is mounted read-only"
