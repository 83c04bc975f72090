"""Getting a request settled by its agent's contract, withdrawn if the wait is cut."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import Any

from ..broker import Broker
from ..model import Request, Response
from ._background import keep
from .contracts import Contracts

log = logging.getLogger("interlock")


async def settle(contracts: Contracts, broker: Broker, request: Request, agent: str | None) -> Response:
    """Have the agent's contract settle `request`; a cut wait withdraws the request.

    The broker withdraws a request whose `wait` is cancelled, but a cancel scope that
    cancels again and again (anyio, a task group) can cut that short, and a custom
    contract may not wait through the broker at all: so withdraw here too, shielded. A
    request already settled is left as it is, and so is one that outlives its waiter (the
    gate's approvals, made with an idempotency key, and a run's requests).
    """
    try:
        return await contracts.for_agent(agent).settle(broker, request)
    except asyncio.CancelledError:
        if request.outlives_its_waiter:
            raise  # kept pending for the call to find again when it comes back
        cut = broker.cancel(request.id, "the waiting call was cancelled", cause="withdrawn")
        withdraw = keep(asyncio.ensure_future(cut))
        withdraw.add_done_callback(functools.partial(_log_failed_withdraw, request.id))
        # A withdrawal that fails is logged (`_log_failed_withdraw`); the cut wait is still
        # a cancellation, not that failure.
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.shield(withdraw)
        raise


def _log_failed_withdraw(request_id: str, future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning(
            "withdrawing request %s, whose call was cancelled, failed (%r): it stays pending, for a person to "
            "answer, until it expires or is cancelled",
            request_id,
            future.exception(),
        )
