"""The wire table: each error the HTTP API answers with, as code, status and exception.

The server turns an exception into problem details through this table, and the remote
broker turns problem details back into the same exception, so neither side tables the
codes again. A row says how the exception's own fields travel: as extra members of the
problem (`ask_id`, `current_status`) and back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import (
    AlreadySettled,
    Closed,
    FollowupNotFound,
    Forbidden,
    InvalidAnswer,
    InvalidRequest,
    NotFound,
    RunConflict,
)

__all__ = ["WIRE_ERRORS", "WireError", "error_from_problem", "problem_of"]


@dataclass(frozen=True, slots=True)
class WireError:
    code: str
    status: int
    error: type[Exception]
    extra: Callable[[Any], dict[str, Any]]
    """The exception's fields sent with the problem."""
    rebuild: Callable[[str, Mapping[str, Any], str], Exception]
    """The exception again, from the problem's `detail`, its members and the request id
    the call was about ("" for none)."""


def _none(exc: Any) -> dict[str, Any]:
    return {}


WIRE_ERRORS: tuple[WireError, ...] = (
    WireError(
        "invalid_answer",
        422,
        InvalidAnswer,
        lambda exc: {"ask_id": exc.ask_id},
        lambda detail, body, _: InvalidAnswer(detail, ask_id=body.get("ask_id")),
    ),
    WireError("invalid_request", 422, InvalidRequest, _none, lambda detail, body, _: InvalidRequest(detail)),
    WireError(
        "followup_not_found",
        404,
        FollowupNotFound,
        _none,
        lambda detail, body, rid: FollowupNotFound(rid, message=detail),
    ),
    WireError("not_found", 404, NotFound, _none, lambda detail, body, rid: NotFound(rid, message=detail)),
    WireError(
        "already_settled",
        409,
        AlreadySettled,
        lambda exc: {"current_status": exc.status},
        lambda detail, body, rid: AlreadySettled(rid, str(body.get("current_status") or "settled"), detail or None),
    ),
    WireError("closed", 409, Closed, _none, lambda detail, body, rid: Closed(rid or None, detail)),
    WireError(
        "run_conflict",
        409,
        RunConflict,
        lambda exc: {"current_status": exc.status},
        lambda detail, body, rid: RunConflict(rid, str(body.get("current_status") or ""), detail),
    ),
    WireError("unauthorized", 401, Forbidden, _none, lambda detail, body, _: Forbidden(detail, status=401)),
    WireError("forbidden", 403, Forbidden, _none, lambda detail, body, _: Forbidden(detail, status=403)),
)
"""Most specific first: `problem_of` takes the first row the exception is an instance of."""

_BY_CODE = {row.code: row for row in WIRE_ERRORS}
_BY_ERROR = [row for row in WIRE_ERRORS if row.code != "unauthorized"]


def problem_of(exc: Exception) -> tuple[int, str, dict[str, Any]] | None:
    """(status, code, extra members) for an exception the API answers with, else None."""
    for row in _BY_ERROR:
        if isinstance(exc, row.error):
            status = getattr(exc, "status", row.status) if row.error is Forbidden else row.status
            code = "unauthorized" if status == 401 else row.code
            return status, code, row.extra(exc)
    return None


def error_from_problem(body: Mapping[str, Any], *, request_id: str = "") -> Exception | None:
    """The exception a problem stands for, by its `code`; None for a code not in the table."""
    row = _BY_CODE.get(str(body.get("code", "")))
    if row is None:
        return None
    return row.rebuild(str(body.get("detail", "")), body, request_id)
