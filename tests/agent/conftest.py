from __future__ import annotations

import pytest

import interlock
from interlock import Broker

from .support import Inbox, Reports


@pytest.fixture
def inbox(broker: Broker) -> Inbox:
    return Inbox(broker)


@pytest.fixture
def reports() -> Reports:
    return Reports()


@pytest.fixture
def unopened() -> Broker:
    """A broker that is never opened: for rules checked when things are built, on no backend."""
    return interlock.connect("memory://")
