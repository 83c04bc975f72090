"""Why this process cannot open or write a SQLite database file, found by looking at the
file, the files SQLite keeps beside it, its folder and its filesystem.

SQLite's own errors name neither the file nor the cause ("unable to open database file",
"attempt to write a readonly database"). Besides the database file, readable and
writable, SQLite in WAL mode needs its folder to be writable, to make the `-wal` and
`-shm` files there (and a `-journal` while it changes the journal mode); those files
readable and writable once they are there; a filesystem mounted read-write, with room.

`why` is only asked once opening failed; `unwritable` is one `access` call per file at
open, never on the way of a call.

The file holds every request and answer, and the secrets of the notification channels
(the routing's webhook secrets, mail password, Slack tokens): a new one is made readable by
its owner alone (`make_private`; SQLite gives its `-wal` and `-shm` files the database's
mode), and one that every user may read is named at open (`open_to_all`).
"""

from __future__ import annotations

import errno
import os
import sqlite3
import stat

__all__ = ["make_private", "open_to_all", "remove_if_empty", "unwritable", "why"]

COMPANIONS = ("-wal", "-shm", "-journal")
"""The files SQLite makes beside a database `x.db`: `x.db-wal` and so on."""

_EFFECTIVE = os.access in os.supports_effective_ids


def _may(path: str, mode: int) -> bool:
    return os.access(path, mode, effective_ids=_EFFECTIVE)


def unwritable(path: str) -> bool:
    """Whether the database file, or its `-wal` or `-shm`, is there but this process may not
    read and write it. SQLite would open such a database read-only and fail at its first
    write, and the `-wal` and `-shm` files it made meanwhile would be this user's, which
    the processes of the database's owner may not write then."""
    return any(
        not _may(name, os.R_OK | os.W_OK) and os.path.exists(name) for name in (path, f"{path}-wal", f"{path}-shm")
    )


def make_private(path: str) -> bool:
    """Make the database file, empty, readable and writable by its owner alone, if it is not
    there; SQLite then makes its `-wal` and `-shm` files with the same mode. Whether it was
    made: False for a file already there, or one this process cannot make (SQLite's own
    open then fails, and `why` says why)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError:
        return False
    return True


def remove_if_empty(path: str) -> None:
    """Remove the file at `path` if it is there with nothing in it (one `make_private` made)."""
    try:
        if os.path.getsize(path) == 0:
            os.remove(path)
    except OSError:
        pass


def open_to_all(path: str) -> list[str]:
    """The files of the database at `path` (itself, its `-wal` and `-shm`) that are there, if
    every user of this machine may read any of them; else none."""
    there = []
    for name in (path, f"{path}-wal", f"{path}-shm"):
        try:
            mode = os.stat(name).st_mode
        except OSError:
            continue
        there.append((name, mode))
    return [name for name, _ in there] if any(mode & stat.S_IROTH for _, mode in there) else []


def why(path: str, error: BaseException | None = None) -> str | None:
    """The likely cause of `error` (or of `unwritable`), opening the database at `path`
    (absolute), found by looking; None when nothing looked at explains it."""
    user = _user()
    if os.path.isdir(path):
        return "it is a folder, not a file"
    folder = os.path.dirname(path)
    unreached = _unreached(folder, user)
    if unreached is not None:
        return unreached
    try:
        space = os.statvfs(folder)
    except (AttributeError, OSError):  # (no statvfs on Windows)
        space = None
    if space is not None and space.f_flag & os.ST_RDONLY:
        return f"the filesystem of its folder {folder} is mounted read-only"
    for suffix in ("", *COMPANIONS):
        name = path + suffix
        may_not = _may_not(name)
        if may_not is None:
            continue
        if not suffix:
            return f"user {user} may not {may_not} it ({_owned(name)})"
        return f"user {user} may not {may_not} its {suffix} file {name} ({_owned(name)}), which SQLite writes beside it"
    missing = [suffix or "database" for suffix in ("", "-wal", "-shm") if not os.path.exists(path + suffix)]
    if missing and not _may(folder, os.W_OK | os.X_OK):
        made = "the database and its -wal and -shm files" if "database" in missing else "its -wal and -shm files"
        return f"user {user} may not create files in its folder {folder} ({_owned(folder)}), where SQLite makes {made}"
    if space is not None and _full(space, error):
        free = space.f_frsize * (space.f_bfree if _is_root() else space.f_bavail)
        return f"the filesystem of its folder {folder} is full ({free} bytes free)"
    return None


def _unreached(folder: str, user: str) -> str | None:
    """What keeps this user from the folder: a folder on its way not there, or a file, or
    one this user may not enter."""
    chain = [folder]
    while os.path.dirname(chain[-1]) != chain[-1]:
        chain.append(os.path.dirname(chain[-1]))
    for step in reversed(chain):
        try:
            mode = os.stat(step).st_mode
        except FileNotFoundError:
            return f"its folder {folder} does not exist" + ("" if step == folder else f" (nor does {step})")
        except OSError:  # (a folder on the way that the step before found it may enter)
            return None
        if not stat.S_ISDIR(mode):
            return f"{step} is a file, not a folder"
        if not _may(step, os.X_OK):
            return f"user {user} may not enter the folder {step} ({_owned(step)})"
    return None


def _may_not(name: str) -> str | None:
    """What this user may not do to the file `name` that is there, or None."""
    if not os.path.exists(name):
        return None
    read, write = _may(name, os.R_OK), _may(name, os.W_OK)
    if read and write:
        return None
    return "read or write" if not read and not write else "read" if not read else "write"


def _full(space: os.statvfs_result, error: BaseException | None) -> bool:
    if (
        isinstance(error, sqlite3.Error)
        and (getattr(error, "sqlite_errorcode", None) or 0) & 0xFF == sqlite3.SQLITE_FULL
    ):
        return True
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return True
    blocks, files = (space.f_bfree, space.f_ffree) if _is_root() else (space.f_bavail, space.f_favail)
    return blocks == 0 or (files == 0 and space.f_files > 0)


def _owned(name: str) -> str:
    try:
        info = os.stat(name)
    except OSError:
        return "owner unknown"
    return f"owned by {_name_of(info.st_uid)}, mode {stat.S_IMODE(info.st_mode):04o}"


def _user() -> str:
    return _name_of(os.geteuid()) if hasattr(os, "geteuid") else "this user"


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _name_of(uid: int) -> str:
    try:
        import pwd
    except ImportError:  # (Windows)
        return f"uid {uid}"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # no name for this uid (a container, say)
        return f"uid {uid}"
