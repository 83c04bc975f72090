"""The outbox's records: notices (events that concern a person) and their deliveries.

A *notice* is written by the store in the same transaction as the event it reports: a
request created for someone (`created`), or a request they can no longer answer
(`answered`, `rejected`, `expired`, `cancelled`). The delivery loop routes each notice
(see `interlock.routing`) into *deliveries*: one per channel and address, each with an
idempotency key (its id) that a receiver can use to drop a repeat, since a delivery is
sent at least once. A delivery is `pending` until it is `delivered`; a failed attempt
is tried again later with a growing, jittered delay; out of attempts it becomes `dead`
(a dead letter, kept and listed until someone retries it). A reminder or an escalation
whose request settled before it fell due is `skipped`, as is a delivery to a person whom
`token revoke` cut off (its `last_error` says which).

Pure data, no I/O.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, ClassVar, Literal

from ._backoff import Backoff
from .model import _quick_init

__all__ = [
    "DELIVERY_ID_PREFIX",
    "DELIVERY_KINDS",
    "DELIVERY_STATES",
    "NOTICE_TYPES",
    "Delivery",
    "DeliveryKind",
    "DeliveryState",
    "LinkUse",
    "Notice",
    "delivery_from_dict",
    "delivery_id",
    "delivery_to_dict",
    "delivery_to_row",
    "retry_delay",
]

NOTICE_TYPES = ("created", "answered", "rejected", "expired", "cancelled")
"""The event types that make a notice."""

DeliveryKind = Literal["request", "settled", "reminder", "escalation"]
DELIVERY_KINDS: tuple[DeliveryKind, ...] = ("request", "settled", "reminder", "escalation")
DeliveryState = Literal["pending", "delivered", "dead", "skipped"]
DELIVERY_STATES: tuple[DeliveryState, ...] = ("pending", "delivered", "dead", "skipped")


@dataclass(frozen=True, slots=True)
class Notice:
    """An event that concerns a person, as the outbox keeps it until it is routed."""

    id: int
    event_id: int
    type: str
    request_id: str
    recipient: str | None
    at: datetime


@_quick_init
@dataclass(frozen=True, slots=True)
class Delivery:
    """One notice to one channel and address; `id` is its idempotency key."""

    id: str
    notice: int
    request_id: str
    kind: DeliveryKind
    event: str
    recipient: str
    channel: str
    address: str | None
    due_at: datetime
    """When it is due (again); for a dead letter, when it became one."""
    created_at: datetime
    status: DeliveryState = "pending"
    attempts: int = 0
    delivered_at: datetime | None = None
    last_error: str | None = None
    reference: str | None = None

    _make: ClassVar[Callable[..., Delivery]]  # the fields in order, cheaper than __init__ (`_quick_init`)

    def with_state(self, **changes: Any) -> Delivery:
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class LinkUse:
    """The use of a one-click answer link (email): the link's id, its request, who used it
    and when. A link is used once; the store keeps the first use."""

    link: str
    request_id: str
    by: str
    at: datetime


DELIVERY_ID_PREFIX = "dlv_"
"""What a delivery's id begins with; 32 hex digits follow."""


def delivery_id(event_id: int, kind: str, recipient: str, channel: str, address: str | None) -> str:
    """The idempotency key of a delivery: the same notice routed again (by another node, or
    after a crash between routing and recording it) yields the same ids."""
    text = "\x1f".join((str(event_id), kind, recipient, channel, address or ""))
    return DELIVERY_ID_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:32]


def retry_delay(attempts: int, *, first: float = 5.0, cap: float = 3600.0, rng: random.Random | None = None) -> float:
    """How long to wait after `attempts` failed attempts: the shared back-off's delay
    (doubling from `first` up to `cap`), with "equal jitter": half of it fixed, the other
    half random, so deliveries that failed together do not all come back together."""
    backoff = Backoff(first, cap)
    delay = first
    for _ in range(max(1, attempts)):
        delay = backoff.next()
    return delay / 2 + (rng or random).uniform(0, delay / 2)


def delivery_to_row(d: Delivery) -> dict[str, Any]:
    """A delivery's columns as JSON values (times in ISO 8601), as a store writes them in bulk."""
    return {
        "id": d.id,
        "notice": d.notice,
        "request_id": d.request_id,
        "kind": d.kind,
        "event": d.event,
        "recipient": d.recipient,
        "channel": d.channel,
        "address": d.address,
        "status": d.status,
        "attempts": d.attempts,
        "due_at": d.due_at.isoformat(),
        "created_at": d.created_at.isoformat(),
        "delivered_at": d.delivered_at.isoformat() if d.delivered_at else None,
        "last_error": d.last_error,
        "reference": d.reference,
    }


def delivery_to_dict(delivery: Delivery) -> dict[str, Any]:
    """A delivery's JSON shape in the API and the CLI."""
    return {
        "id": delivery.id,
        "notice": delivery.notice,
        "request_id": delivery.request_id,
        "kind": delivery.kind,
        "event": delivery.event,
        "recipient": delivery.recipient,
        "channel": delivery.channel,
        "address": delivery.address,
        "status": delivery.status,
        "attempts": delivery.attempts,
        "due_at": delivery.due_at.isoformat(),
        "created_at": delivery.created_at.isoformat(),
        "delivered_at": delivery.delivered_at.isoformat() if delivery.delivered_at else None,
        "last_error": delivery.last_error,
        "reference": delivery.reference,
    }


def delivery_from_dict(data: Mapping[str, Any]) -> Delivery:
    """A delivery from its JSON shape (`delivery_to_dict`), as a remote broker reads the API's."""

    delivered_at = data.get("delivered_at")
    return Delivery(
        id=str(data["id"]),
        notice=int(data.get("notice") or 0),
        request_id=str(data["request_id"]),
        kind=data["kind"],
        event=str(data["event"]),
        recipient=str(data["recipient"]),
        channel=str(data["channel"]),
        address=data.get("address"),
        due_at=datetime.fromisoformat(data["due_at"]),
        created_at=datetime.fromisoformat(data["created_at"]),
        status=data["status"],
        attempts=int(data["attempts"]),
        delivered_at=datetime.fromisoformat(delivered_at) if delivered_at else None,
        last_error=data.get("last_error"),
        reference=data.get("reference"),
    )
