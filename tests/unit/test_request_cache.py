"""The SQL stores' cache of parsed requests: bounded by bytes, the oldest dropped first,
and a settled request's created form (its deadline with it) held while the request is."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from interlock import Text
from interlock.model import Request, Response, Status, build_request
from interlock.store._sql import _CREATED_FORM, RequestCache


def pending(question: str) -> Request:
    now = datetime.now(UTC)
    return build_request([Text(question)], now=now, expires_at=now + timedelta(hours=1))


def answered(request: Request) -> Request:
    return request.settle(Status.ANSWERED, Response(at=datetime.now(UTC), answers={"text": "yes"}))


def test_a_request_settled_while_held_keeps_its_created_form_deadline_and_all() -> None:
    cache = RequestCache(max_bytes=1000)
    made = pending("Ship it?")
    cache.put(made, 300)
    assert cache.as_created(made) is made and cache.bytes == 300
    settled = answered(made)
    assert settled.expires_at is None
    cache.put(settled, 350)
    created = cache.as_created(settled)
    assert created is made and created.expires_at is not None
    assert cache.bytes == 350 + _CREATED_FORM
    # Held again as another object (read anew), it keeps the created form held.
    again = settled.settle(settled.status, settled.response)
    cache.put(again, 350)
    assert cache.as_created(again) is made and cache.bytes == 350 + _CREATED_FORM


def test_a_settled_request_s_created_form_is_known_only_when_held() -> None:
    cache = RequestCache(max_bytes=1000)
    made = pending("Who?")
    settled = answered(made)
    assert cache.as_created(settled) is None  # not held: its row's document has it
    cache.put(settled, 300)
    assert cache.as_created(settled) is None and cache.bytes == 300
    cache.put(settled, 300, made)  # read from its row, with the document
    assert cache.as_created(settled) is made
    assert cache.as_created(answered(made)) is None  # another object than the one held


def test_created_forms_count_towards_dropping_the_oldest() -> None:
    cache = RequestCache(max_bytes=2 * 300 + _CREATED_FORM)
    first, second = pending("First?"), pending("Second?")
    cache.put(answered(first), 300, first)
    assert cache.bytes == 300 + _CREATED_FORM
    cache.put(answered(second), 300, second)  # over the budget: the oldest goes, its created form with it
    assert first.id not in cache and second.id in cache
    assert cache.bytes == 300 + _CREATED_FORM
    cache.discard(second.id)
    assert cache.bytes == 0 and len(cache) == 0
