"""The SQL stores' cache of parsed requests: bounded by bytes, the oldest dropped first,
and a settled request's created form made once while the request is held."""

from __future__ import annotations

from datetime import UTC, datetime

from interlock import Text
from interlock.model import Response, Status, build_request
from interlock.store._sql import _CREATED_FORM, RequestCache


def settled(question: str):  # type: ignore[no-untyped-def]
    request = build_request([Text(question)], now=datetime.now(UTC))
    return request.settle(Status.ANSWERED, Response(at=datetime.now(UTC), answers={"text": "yes"}))


def test_a_held_request_s_created_form_is_made_once_and_counted_against_the_budget() -> None:
    cache = RequestCache(max_bytes=1000)
    request = settled("Ship it?")
    cache.put(request, 300)
    created = cache.as_created(request)
    assert created.status is Status.PENDING and created.response is None and created.id == request.id
    assert cache.as_created(request) is created  # made once
    assert cache.bytes == 300 + _CREATED_FORM
    # Held again as another object (read anew): its created form is made again.
    again = request.settle(request.status, request.response)  # the same request, another object
    cache.put(again, 300)
    assert cache.bytes == 300
    assert cache.as_created(again) is not created and cache.as_created(again).status is Status.PENDING
    # A request not held is answered too, and nothing is kept of it.
    stranger = settled("Who?")
    assert cache.as_created(stranger).status is Status.PENDING and stranger.id not in cache


def test_created_forms_count_towards_dropping_the_oldest() -> None:
    cache = RequestCache(max_bytes=2 * 300 + _CREATED_FORM)
    first, second = settled("First?"), settled("Second?")
    cache.put(first, 300)
    cache.put(second, 300)
    cache.as_created(first)
    assert first.id in cache and cache.bytes == 600 + _CREATED_FORM
    cache.as_created(second)  # over the budget: the oldest goes, its created form with it
    assert first.id not in cache and second.id in cache
    assert cache.bytes == 300 + _CREATED_FORM
    cache.discard(second.id)
    assert cache.bytes == 0 and len(cache) == 0
