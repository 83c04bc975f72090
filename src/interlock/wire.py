"""The wire table: every error code the HTTP API answers with, its status, its exception
and what it means.

The server raises its problems through this table (a code, at the status the table gives
it unless the route names another it allows), turns an exception into problem details by
it, and documents its problems from it (the OpenAPI document's `Problem.code`, each
route's error responses); the remote broker turns problem details back into the same
exception, so no side tables the codes again. A row says how the exception's own fields
travel: as extra members of the problem (`ask_id`, `current_status`) and back. A code with
no exception is the server's own answer (a quota, a body too large, a long poll that ran
out): a client reads it from the response, and the remote broker leaves it to httpx's
status error.

`unavailable` (503) is the store failing for now, whatever its driver: the server sends it
with `Retry-After` (`retry_after_of`), and the remote broker makes a bare 502, 503 or 504
(a proxy's, with no problem of this table) the same `Unavailable`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import (
    AlreadySettled,
    Closed,
    FollowupNotFound,
    Forbidden,
    IdempotencyKeyReused,
    InvalidAnswer,
    InvalidCursor,
    InvalidRequest,
    NotFound,
    RateLimited,
    RunConflict,
    Unavailable,
)

__all__ = [
    "RETRY_UNAVAILABLE",
    "SURFACE",
    "WIRE_ERRORS",
    "WireError",
    "code_for_status",
    "error_from_problem",
    "meaning",
    "problem_of",
    "retry_after_of",
    "status_of",
]


def _none(exc: Any) -> dict[str, Any]:
    return {}


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else None


SURFACE = "interlock.surface"
"""The ASGI scope key by which a surface of the server's own process that calls the HTTP
API in process (`/mcp`, whose tools are API calls) names itself, to be recorded as what an
answer or a cancel came through (`Response.via`: "mcp"); a call without it came over HTTP
("api"). A client sends headers and a body, never scope keys: it cannot claim a surface.
"""

RETRY_UNAVAILABLE = 1
"""The seconds a server's `Retry-After` asks for after `unavailable`, when the store named
no figure of its own. A database restarting or failing over, a connection dropped, another
process's lock: each is over in a second or a few, and the client's own back-off doubles
from there (the remote broker's, up to `remote.UNAVAILABLE_CAP`). One call a second costs
a server whose store is away nothing, and nobody waits longer than needed once it is back."""


def retry_after_of(exc: Unavailable) -> int:
    """The `Retry-After` of an `unavailable`: the exception's own figure in whole seconds
    (rounded up, at least 1), else `RETRY_UNAVAILABLE`."""
    if exc.retry_after is None:
        return RETRY_UNAVAILABLE
    return max(1, math.ceil(exc.retry_after))


@dataclass(frozen=True, slots=True)
class WireError:
    code: str
    status: int
    """The status it is sent with, unless a route names one of `also`."""
    error: type[Exception] | None
    """The exception it stands for, on both sides; None for the server's own answers."""
    meaning: str
    """What it means, in a line (the API's documentation of it)."""
    extra: Callable[[Any], dict[str, Any]] = _none
    """The exception's fields sent with the problem."""
    rebuild: Callable[[str, Mapping[str, Any], str], Exception] | None = None
    """The exception again, from the problem's `detail`, its members and the request id
    the call was about ("" for none)."""
    also: Mapping[int, str] = field(default_factory=dict)
    """Other statuses some routes send it with, and what it means with each (the route
    names the status where it raises the problem)."""


WIRE_ERRORS: tuple[WireError, ...] = (
    WireError(
        "invalid_answer",
        422,
        InvalidAnswer,
        "the answer does not fit its asks (`ask_id` names the ask); the request stays pending",
        lambda exc: {"ask_id": exc.ask_id},
        lambda detail, body, _: InvalidAnswer(detail, ask_id=body.get("ask_id")),
        also={400: "on Novo's routes (`inputResponses`, /interactions), an answer that does not fit its prompts"},
    ),
    WireError(
        "idempotency_key_reused",
        422,
        IdempotencyKeyReused,
        "the idempotency key was used for a request that differs from this one (`request_id` names the first); "
        "nothing changed: send the same request again to retry it, or use a new key",
        lambda exc: {"request_id": exc.request_id},
        lambda detail, body, _: IdempotencyKeyReused(
            detail, request_id=body.get("request_id") if isinstance(body.get("request_id"), str) else None
        ),
    ),
    WireError(
        "invalid_cursor",
        422,
        InvalidCursor,
        "the cursor is none a page of this list gave as its `next_cursor` (mistyped, cut short, empty, or "
        "another list's); nothing was listed: start again from the first page, without one",
        rebuild=lambda detail, body, _: InvalidCursor(detail),
    ),
    WireError(
        "invalid_request",
        422,
        InvalidRequest,
        "the body or a parameter does not fit, or is refused; nothing changed",
        rebuild=lambda detail, body, _: InvalidRequest(detail),
        also={400: "the body is not valid JSON, or a header (Last-Event-ID) or payload cannot be read"},
    ),
    WireError(
        "followup_not_found",
        404,
        FollowupNotFound,
        "no such message is held for the run: withdrawn, delivered, or read-only on an ended run",
        rebuild=lambda detail, body, rid: FollowupNotFound(rid, message=detail),
    ),
    WireError(
        "not_found",
        404,
        NotFound,
        "no such request, run, grant, policy, delivery, team, channel or route",
        rebuild=lambda detail, body, rid: NotFound(rid, message=detail),
    ),
    WireError(
        "already_settled",
        409,
        AlreadySettled,
        "the request is no longer pending (`current_status` says how it settled), or a delivery is no dead letter; "
        "or a waiting call's withdrawal (`cause: withdrawn`) left pending a request that outlives its waiter",
        lambda exc: {"current_status": exc.status},
        lambda detail, body, rid: AlreadySettled(rid, str(body.get("current_status") or "settled"), detail or None),
    ),
    WireError(
        "closed",
        409,
        Closed,
        "the channel is closed: nothing is created in it until it is reopened",
        rebuild=lambda detail, body, rid: Closed(rid or None, detail),
    ),
    WireError(
        "run_conflict",
        409,
        RunConflict,
        "the run (`run_id`) is not in a state that allows this (`current_status`): ended, parked, or held by "
        "another worker",
        lambda exc: {"current_status": exc.status, "run_id": exc.run_id},
        lambda detail, body, rid: RunConflict(
            run_id if isinstance(run_id := body.get("run_id"), str) else rid,
            str(body.get("current_status") or ""),
            detail,
        ),
    ),
    WireError(
        "already_claimed",
        409,
        None,
        "another member of the team holds the request (the standing `claim`)",
    ),
    WireError(
        "thread_busy",
        409,
        None,
        "the run is busy: the message was held, decided its approval, or was not held (`details` says which)",
    ),
    WireError("pending", 408, None, "the request is still pending when the wait runs out"),
    WireError(
        "unauthorized",
        401,
        Forbidden,
        "no valid token (or a webhook's signature does not check out)",
        rebuild=lambda detail, body, _: Forbidden(detail, status=401),
    ),
    WireError(
        "forbidden",
        403,
        Forbidden,
        "not yours to see or do",
        rebuild=lambda detail, body, _: Forbidden(detail, status=403),
    ),
    WireError(
        "too_large",
        413,
        None,
        "the body is larger than the server takes; nothing changed",
        rebuild=lambda detail, body, _: InvalidRequest(detail),
    ),
    WireError(
        "rate_limited",
        429,
        RateLimited,
        "a quota of yours is used up; `Retry-After` (and `retry_after`) says in how many seconds to try again",
        lambda exc: {"retry_after": exc.retry_after},
        lambda detail, body, _: RateLimited(detail, retry_after=_seconds(body.get("retry_after"))),
    ),
    WireError("method_not_allowed", 405, None, "the route takes other methods (`Allow` names them)"),
    WireError(
        "unsupported_media_type",
        415,
        None,
        "the body is not sent as JSON: send it with `Content-Type: application/json`; nothing changed",
        rebuild=lambda detail, body, _: InvalidRequest(detail),
    ),
    WireError(
        "unavailable",
        503,
        Unavailable,
        "the store cannot serve the call for now (restarting, out of reach, locked, full): try again after "
        "`Retry-After` (and `retry_after`) seconds. A read changed nothing; a write may have been made, so "
        "retry it with the same idempotency key",
        lambda exc: {"retry_after": retry_after_of(exc)},
        lambda detail, body, _: Unavailable(detail, retry_after=_seconds(body.get("retry_after"))),
    ),
    WireError("error", 500, None, "an HTTP error with no code of its own: its status says what went wrong"),
)
"""Most specific first: `problem_of` takes the first row the exception is an instance of."""

_BY_CODE = {row.code: row for row in WIRE_ERRORS}
_BY_ERROR = [(row.error, row) for row in WIRE_ERRORS if row.error is not None and row.code != "unauthorized"]
_FOR_STATUS = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "already_settled",
    413: "too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
    503: "unavailable",
}
"""The code of an HTTP error raised with a status alone (the framework's own: an unknown
route, a method a route does not take, a body cut off at the limit)."""


def status_of(code: str) -> int:
    """The status a code is sent with. Raises `ValueError` for a code not in the table."""
    row = _BY_CODE.get(code)
    if row is None:
        raise ValueError(f"{code!r} is not an error code of the wire table")
    return row.status


def meaning(code: str, status: int | None = None) -> str:
    """What a code means (sent with `status`, when it is one of the row's `also`)."""
    row = _BY_CODE.get(code)
    if row is None:
        raise ValueError(f"{code!r} is not an error code of the wire table")
    if status is None or status == row.status:
        return row.meaning
    if status not in row.also:
        raise ValueError(f"{code!r} is sent with {row.status}, or {sorted(row.also)}, not {status}")
    return row.also[status]


def code_for_status(status: int) -> str:
    """The code of an HTTP error that carries only its status."""
    return _FOR_STATUS.get(status, "error")


def problem_of(exc: Exception) -> tuple[int, str, dict[str, Any]] | None:
    """(status, code, extra members) for an exception the API answers with, else None."""
    for error, row in _BY_ERROR:
        if isinstance(exc, error):
            status = getattr(exc, "status", row.status) if error is Forbidden else row.status
            code = "unauthorized" if status == 401 else row.code
            return status, code, row.extra(exc)
    return None


def error_from_problem(body: Mapping[str, Any], *, request_id: str = "") -> Exception | None:
    """The exception a problem stands for, by its `code`; None for a code with none (or
    not in the table)."""
    row = _BY_CODE.get(str(body.get("code", "")))
    if row is None or row.rebuild is None:
        return None
    return row.rebuild(str(body.get("detail", "")), body, request_id)
