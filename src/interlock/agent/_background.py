"""References to futures the agent side shields, so none is collected while it runs."""

from __future__ import annotations

import asyncio
from typing import Any

_background: set[asyncio.Future[Any]] = set()


def keep(future: asyncio.Future[Any]) -> asyncio.Future[Any]:
    """Hold a reference to `future` until it is done, so a shielded task is not collected."""
    _background.add(future)
    future.add_done_callback(_background.discard)
    return future
