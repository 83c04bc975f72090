"""Waiting for a log line: what a background loop or a stream does that shows nowhere else."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator


@contextlib.contextmanager
def logged(logger: str, words: str) -> Iterator[asyncio.Event]:
    """An event set once `logger` (or a child of it) logs a record whose message holds
    `words`; clear it to wait for the next one. Call from the event loop's thread (the
    records of the loop's own tasks are handled there)."""
    seen = asyncio.Event()

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if words in record.getMessage():
                seen.set()

    handler = Watch(logging.DEBUG)
    log = logging.getLogger(logger)
    log.addHandler(handler)
    try:
        yield seen
    finally:
        log.removeHandler(handler)
