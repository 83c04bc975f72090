"""Wake-up hints between processes on one machine that share a database file.

Each process binds a Unix datagram socket in a private folder named after the database;
after each commit it sends one byte to every other socket there. A hint only says "look at
the event log": a lost one costs latency, never correctness, since the broker also polls.
Sockets of processes that died are found by the refused send and removed.

The folder is listed again only when the set of peers may have changed: a process that
opens says so with a hint to every peer, and any hint received, or a send refused, makes
the next notify look at the folder. A commit with nobody else around costs no system call.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import socket
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["Wakeup"]

log = logging.getLogger("interlock")


class Wakeup:
    def __init__(self, key: str) -> None:
        digest = hashlib.sha256(key.encode()).hexdigest()[:20]
        uid = os.getuid() if hasattr(os, "getuid") else 0
        self.folder = Path(tempfile.gettempdir()) / f"interlock-{uid}" / digest
        self._folder_path = str(self.folder)
        self._sock: socket.socket | None = None
        self._path: str | None = None
        self._peers: list[str] = []
        self._stale = True  # list the folder before the next send
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def available(self) -> bool:
        return hasattr(socket, "AF_UNIX") and os.name == "posix"

    def open(self, callback: Callable[[], None]) -> None:
        if not self.available or not self._private_folder():
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setblocking(False)
        path = str(self.folder / f"{os.getpid()}-{secrets.token_hex(4)}.sock")
        sock.bind(path)
        self._sock, self._path = sock, path
        self._loop = asyncio.get_running_loop()

        def drain() -> None:
            try:
                while sock.recv(64):
                    pass
            except (BlockingIOError, InterruptedError):
                pass
            self._stale = True  # the sender may be a process that just opened
            callback()

        self._loop.add_reader(sock.fileno(), drain)
        self.notify()  # tell the others this process is here, so they list the folder again

    def _private_folder(self) -> bool:
        """Make the folder, refusing one that another user owns or can write to: hints
        from them could not break anything, but they could keep this process busy."""
        try:
            self.folder.parent.mkdir(mode=0o700, exist_ok=True)
            self.folder.mkdir(mode=0o700, exist_ok=True)
            for folder in (self.folder.parent, self.folder):
                info = os.lstat(folder)
                if info.st_uid != os.getuid() or info.st_mode & 0o077 or not stat.S_ISDIR(info.st_mode):
                    log.warning("not using %s for wake-up hints: it is not private; falling back to polling", folder)
                    return False
        except OSError as exc:
            log.warning("no wake-up hints (%s); falling back to polling", exc)
            return False
        return True

    def notify(self) -> None:
        """Tell every other process on this database that something was committed."""
        sock = self._sock
        if sock is None:
            return
        for peer in self._current_peers():
            try:
                sock.sendto(b"!", peer)
            except (BlockingIOError, InterruptedError):
                pass  # its queue is full, so it has a hint waiting already
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(peer)  # its process is gone
                self._stale = True
            except OSError:
                pass

    def _current_peers(self) -> list[str]:
        if self._stale:
            self._stale = False
            mine = self._path
            try:
                with os.scandir(self._folder_path) as entries:
                    self._peers = [e.path for e in entries if e.name.endswith(".sock") and e.path != mine]
            except FileNotFoundError:
                self._peers = []
        return self._peers

    def close(self) -> None:
        if self._sock is None:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        if self._path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path)
            with contextlib.suppress(OSError):
                self.folder.rmdir()  # only if no other process is left in it
        self._sock = self._path = None
