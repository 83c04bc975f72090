"""The security suite: one test per finding of the outside review, named for the behaviour
it keeps. Each test failed on the code before its fix."""

from __future__ import annotations

from typing import Any

import pytest
from poll_support import Entered

from interlock.broker import LocalBroker


@pytest.fixture
def entered(monkeypatch: pytest.MonkeyPatch) -> Entered:
    """The long polls (broker waits and claims) the test's servers in this process begin to hold."""
    noted = Entered()
    watch, claim_run = LocalBroker.watch, LocalBroker.claim_run

    async def watching(self: LocalBroker, *args: Any, **options: Any) -> Any:
        noted.note()
        return await watch(self, *args, **options)

    async def claiming(self: LocalBroker, *args: Any, **options: Any) -> Any:
        noted.note()
        return await claim_run(self, *args, **options)

    monkeypatch.setattr(LocalBroker, "watch", watching)
    monkeypatch.setattr(LocalBroker, "claim_run", claiming)
    return noted
