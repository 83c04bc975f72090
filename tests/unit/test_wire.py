"""One table of error codes, read by the server's problems and the remote broker alike."""

from __future__ import annotations

import pytest

from interlock.errors import AlreadySettled, Closed, Forbidden, InvalidAnswer, InvalidRequest, NotFound
from interlock.wire import WIRE_ERRORS, error_from_problem, problem_of

EXAMPLES = [
    InvalidAnswer("colour: not an option", ask_id="colour"),
    InvalidRequest("asks: none given"),
    NotFound("req_1"),
    AlreadySettled("req_1", "answered"),
    Closed("req_1", "channel 'c' is closed"),
    Forbidden("no valid token", status=401),
    Forbidden("not yours"),
]


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__ + str(getattr(e, "status", "")))
def test_an_error_crosses_the_wire_as_the_same_exception_with_its_fields(error: Exception) -> None:
    found = problem_of(error)
    assert found is not None
    status, code, extra = found
    back = error_from_problem({"status": status, "code": code, "detail": str(error), **extra}, request_id="req_1")
    assert type(back) is type(error) and str(back) == str(error)
    for field in ("ask_id", "status", "request_id"):
        if hasattr(error, field):
            assert getattr(back, field) == getattr(error, field)


def test_every_code_is_tabled_once_and_an_unknown_one_is_no_exception() -> None:
    codes = [row.code for row in WIRE_ERRORS]
    assert len(codes) == len(set(codes))
    assert error_from_problem({"code": "teapot", "detail": "short and stout"}) is None
    assert problem_of(RuntimeError("not an API error")) is None
