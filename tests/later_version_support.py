"""A process left on an earlier version while a later one migrated its store: how its
background loops behave, alike on every SQL store."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import anyio
import pytest

import interlock.broker as broker_module
import interlock.channels.delivery as delivery_module
from interlock.broker import LocalBroker
from interlock.channels.delivery import DeliveryLoop
from interlock.routing import routing_from_dict

BOUND = 20

PAGER = {
    "channels": {"pager": {"type": "webhook", "url": "http://127.0.0.1:9/pager", "secret": "s3cret-s3cret-s3cret"}},
    "recipients": {"alice": {"channels": ["pager"], "addresses": {"pager": "+33 6 12 34 56 78"}}},
}
"""A routing that gives alice's requests a notice to deliver (to a port nobody listens on)."""


def retry_soon(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loops try a refused write again at once, not a minute later."""
    monkeypatch.setattr(broker_module, "NEWER_DATABASE_RETRY", 0.01)
    monkeypatch.setattr(delivery_module, "NEWER_DATABASE_RETRY", 0.01)


async def loops_say_once_they_write_no_more(older: LocalBroker, caplog: pytest.LogCaptureFixture) -> None:
    """Run `older`'s expiry loop and a delivery loop (routed as `PAGER`) until each has tried
    three times on a store a later version migrated: each says so once, as an error without a
    traceback, whatever the number of tries (`retry_soon` first)."""
    tries = {"expiry": 0, "delivery": 0}
    tried = asyncio.Event()

    def counted(what: str, call: Callable[[], Any]) -> Callable[[], Any]:
        async def counting() -> Any:
            tries[what] += 1
            if min(tries.values()) >= 3:
                tried.set()
            return await call()

        return counting

    older._expire_due = counted("expiry", older._expire_due)  # type: ignore[method-assign]
    older._expiry_kick.set()
    loop = DeliveryLoop(older.outbox, routing_from_dict(PAGER), poll_interval=0.01)
    loop._round = counted("delivery", loop._round)  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="interlock"):
        loop.start()
        try:
            with anyio.fail_after(BOUND):
                await tried.wait()
        finally:
            await loop.stop()
    said = [(r.levelno, r.getMessage().split(":")[0]) for r in caplog.records if r.name.startswith("interlock")]
    assert sorted(said) == [
        (logging.ERROR, "this process delivers no notice any more"),
        (logging.ERROR, "this process expires no request any more"),
    ]
    assert all(r.exc_info is None for r in caplog.records)
    assert "upgraded by a later version of interlock" in caplog.text
