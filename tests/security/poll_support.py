"""Long polls held by a test server in this process: when they are held, so that a test
changes someone's access only once they are."""

from __future__ import annotations

import threading

import anyio

BOUND = 20


class Entered:
    """Counts the long polls the server (in a thread of this process) has begun to hold:
    its broker's waits and claims; a test changes access (revokes a token) once they are."""

    def __init__(self) -> None:
        self.count = 0
        self.changed = threading.Condition()

    def note(self) -> None:
        with self.changed:
            self.count += 1
            self.changed.notify_all()

    async def reach(self, count: int) -> None:
        def wait() -> None:
            with self.changed:
                assert self.changed.wait_for(lambda: self.count >= count, timeout=BOUND)

        await anyio.to_thread.run_sync(wait)
