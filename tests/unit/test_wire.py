"""One table of error codes, read by the server's problems and the remote broker alike."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import interlock
from interlock.errors import AlreadySettled, Closed, Forbidden, InvalidAnswer, InvalidRequest, NotFound
from interlock.server.common import NOVO_REFUSAL, UNREADABLE, ApiError
from interlock.wire import WIRE_ERRORS, code_for_status, error_from_problem, meaning, problem_of, status_of

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


# -- every code the server sends is in the table, and every code in it is sent -----------------

SRC = Path(interlock.__file__).parent
SERVER = sorted((SRC / "server").glob("*.py"))
CODES = {row.code for row in WIRE_ERRORS}
RAISERS = {"ApiError", "problem"}
NAMED_STATUSES = {"UNREADABLE": UNREADABLE, "NOVO_REFUSAL": NOVO_REFUSAL}
PASSED_ON = {
    "exc.code": "an ApiError's own code, checked when it was raised",
    "code": "the code `problem_of` found in the table for an exception",
    "code_for_status(exc.status_code)": "the table's code for a status the framework raised",
}
"""The non-literal codes the server's handlers send, each from the table already."""


def _calls(path: Path) -> Iterator[ast.Call]:
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name in RAISERS:
                yield node


def _sent() -> Iterator[tuple[str, ast.Call, ast.expr]]:
    for path in SERVER:
        for call in _calls(path):
            if call.args:
                yield path.name, call, call.args[0]


def test_every_code_the_server_raises_is_in_the_table_at_a_status_it_allows() -> None:
    seen = 0
    for where, call, code in _sent():
        seen += 1
        if not isinstance(code, ast.Constant):
            assert ast.unparse(code) in PASSED_ON, f"{where}:{call.lineno}: a code the table does not vouch for"
            continue
        assert code.value in CODES, f"{where}:{call.lineno}: {code.value!r} is not in the wire table"
        for keyword in (k for k in call.keywords if k.arg == "status"):
            # A status other than the table's is named where it is used, and is one the table allows.
            given = keyword.value
            for status in (given.body, given.orelse) if isinstance(given, ast.IfExp) else (given,):
                if isinstance(status, ast.Constant) and status.value is None:
                    continue
                assert isinstance(status, ast.Name), f"{where}:{call.lineno}: name the status"
                assert status.id in NAMED_STATUSES, f"{where}:{call.lineno}: {status.id} is not a named status"
                meaning(code.value, NAMED_STATUSES[status.id])
    assert seen > 60  # the scan finds the raises (the server has some seventy)


def test_every_code_of_the_table_is_sent_by_the_server() -> None:
    literal = {code.value for _, _, code in _sent() if isinstance(code, ast.Constant)}
    framework = {code_for_status(status) for status in range(400, 600)}  # the framework's own statuses
    raised: set[str] = set()  # the exceptions raised somewhere in the package
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                raised.add(node.func.id)
    by_error = {row.code for row in WIRE_ERRORS if row.error is not None and row.error.__name__ in raised}
    assert CODES - literal - framework - by_error == set()


def test_every_problem_body_written_by_hand_has_a_code_of_the_table() -> None:
    written = []  # `{"code": "..."}` in a problem built without `problem` (the /mcp endpoint's 401)
    for path in [*SERVER, *sorted((SRC / "mcp").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Dict) and "status" in [getattr(k, "value", None) for k in node.keys]:
                for key, value in zip(node.keys, node.values, strict=True):
                    if getattr(key, "value", None) == "code" and isinstance(value, ast.Constant):
                        written.append(value.value)
    assert written and set(written) <= CODES, set(written) - CODES


def test_the_remote_broker_reads_only_codes_of_the_table() -> None:
    read = set()
    for node in ast.walk(ast.parse((SRC / "remote.py").read_text("utf-8"))):
        if isinstance(node, ast.Compare) and "_code(" in ast.unparse(node.left):
            for comparator in node.comparators:
                for value in ast.walk(comparator):
                    if isinstance(value, ast.Constant) and isinstance(value.value, str):
                        read.add(value.value)
    assert read and read <= CODES, read - CODES


def test_a_problem_is_raised_only_with_a_code_of_the_table_at_a_status_it_allows() -> None:
    assert ApiError("not_found", "no request x").status == 404
    assert ApiError("invalid_answer", "colour: not an option", status=NOVO_REFUSAL).status == 400
    with pytest.raises(ValueError, match="not an error code"):
        ApiError("teapot", "short and stout")
    with pytest.raises(ValueError, match="not 400"):
        ApiError("forbidden", "not yours", status=400)
    assert status_of("invalid_answer") == 422


def test_the_openapi_document_names_every_code_with_its_meaning() -> None:
    from interlock.server.app import create_app

    code = create_app("memory://").openapi()["components"]["schemas"]["Problem"]["properties"]["code"]
    assert code["enum"] == [row.code for row in WIRE_ERRORS]
    for row in WIRE_ERRORS:
        assert f"`{row.code}` ({row.status}): {row.meaning}" in code["description"]
