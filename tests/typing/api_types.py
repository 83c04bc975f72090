"""Typed code against the public API, as a user writes it: checked by the project's mypy run
(`[tool.mypy] files`), never run. Each `assert_type` pins what a type checker infers, and
each call is one the API takes, so a signature or a return type that regresses fails mypy.
"""

from __future__ import annotations

from typing import assert_type

import interlock
from interlock import Broker
from interlock.broker import LocalBroker
from interlock.remote import RemoteBroker
from interlock.store.memory import MemoryStore


async def a_broker_entered_is_the_broker_made(store: MemoryStore, remote: RemoteBroker) -> None:
    async with LocalBroker(store) as local:
        assert_type(local, LocalBroker)
        assert_type(await local.open(), LocalBroker)
    async with remote as entered:
        assert_type(entered, RemoteBroker)
    async with interlock.connect("memory://") as broker:
        assert_type(broker, Broker)
