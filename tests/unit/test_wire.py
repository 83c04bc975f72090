"""One table of error codes, read by the server's problems and the remote broker alike."""

from __future__ import annotations

import ast
import email.utils
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

import interlock
from interlock.errors import (
    AlreadySettled,
    Closed,
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
from interlock.remote import RemoteBroker
from interlock.server.common import NOVO_REFUSAL, UNREADABLE, ApiError, problem
from interlock.wire import (
    RETRY_UNAVAILABLE,
    WIRE_ERRORS,
    code_for_status,
    error_from_problem,
    meaning,
    problem_of,
    retry_after_of,
    status_of,
)

EXAMPLES = [
    InvalidAnswer("colour: not an option", ask_id="colour"),
    InvalidRequest("asks: none given"),
    IdempotencyKeyReused("asks: idempotency key 'k' was used for request 'req_0'", request_id="req_0"),
    InvalidCursor("cursor: 'zzzz' is none a page of requests gave (its next_cursor)"),
    NotFound("req_1"),
    AlreadySettled("req_1", "answered"),
    Closed("req_1", "channel 'c' is closed"),
    Forbidden("no valid token", status=401),
    Forbidden("not yours"),
    RunConflict("deploy-1", "completed", "run 'deploy-1' has ended (completed): no request is made for it"),
]


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__ + str(getattr(e, "status", "")))
def test_an_error_crosses_the_wire_as_the_same_exception_with_its_fields(error: Exception) -> None:
    found = problem_of(error)
    assert found is not None
    status, code, extra = found
    back = error_from_problem({"status": status, "code": code, "detail": str(error), **extra}, request_id="req_1")
    assert type(back) is type(error) and str(back) == str(error)
    for field in ("ask_id", "status", "request_id", "run_id"):
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


# -- a store unavailable for now: the server's problem, the remote broker's exception -----------


@pytest.mark.parametrize(("given", "sent"), [(None, RETRY_UNAVAILABLE), (0.2, 1), (2.5, 3), (30, 30)])
def test_unavailable_is_sent_with_its_retry_after_in_whole_seconds(given: float | None, sent: int) -> None:
    error = Unavailable("the store is unavailable for now: the database is restarting", retry_after=given)
    assert problem_of(error) == (503, "unavailable", {"retry_after": sent})
    assert retry_after_of(error) == sent
    assert code_for_status(503) == "unavailable"  # a bare 503 the framework raised, too


def _answering(*responses: httpx.Response) -> httpx.MockTransport:
    """A server (or the proxy in front of it) that answers /whoami, then `responses` in turn."""
    left = list(responses)

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/whoami"):
            return httpx.Response(200, json={"name": "admin", "kind": "admin", "owner": None})
        return left.pop(0)

    return httpx.MockTransport(handle)


async def _raised(*responses: httpx.Response) -> Exception:
    async with RemoteBroker("http://127.0.0.1:8765", transport=_answering(*responses)) as broker:
        try:
            await broker.get("req_1")
        except Exception as exc:
            return exc
    raise AssertionError("the call did not fail")


@pytest.mark.anyio
async def test_the_servers_unavailable_problem_is_raised_by_the_remote_broker_with_its_retry_after() -> None:
    error = Unavailable("the store is unavailable for now: the database is restarting", retry_after=2.5)
    sent = problem("unavailable", str(error), retry_after=retry_after_of(error))  # as the server sends it
    sent.headers["Retry-After"] = str(retry_after_of(error))
    back = await _raised(httpx.Response(sent.status_code, headers=sent.headers, content=sent.body))
    assert type(back) is Unavailable and str(back) == str(error)
    assert back.retry_after == 3.0
    # The header is what counts, where a problem and its header differ (RateLimited's too).
    body = {"status": 429, "code": "rate_limited", "detail": "too many", "retry_after": 1}
    limited = await _raised(httpx.Response(429, json=body, headers={"Retry-After": "7"}))
    assert isinstance(limited, RateLimited) and limited.retry_after == 7.0


@pytest.mark.anyio
@pytest.mark.parametrize("status", [502, 503, 504])
async def test_a_proxys_bare_bad_gateway_or_unavailable_is_unavailable_too(status: int) -> None:
    page = httpx.Response(status, text="<h1>upstream is away</h1>", headers={"Retry-After": "4"})
    raised = await _raised(page)
    assert isinstance(raised, Unavailable) and raised.retry_after == 4.0
    assert str(status) in str(raised)
    when = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=60), usegmt=True)
    dated = await _raised(httpx.Response(status, headers={"Retry-After": when}))
    assert isinstance(dated, Unavailable) and dated.retry_after is not None and 50 < dated.retry_after <= 60
    bare = await _raised(httpx.Response(status))
    assert isinstance(bare, Unavailable) and bare.retry_after is None


@pytest.mark.anyio
async def test_a_500_is_no_unavailable() -> None:
    raised = await _raised(httpx.Response(500, text="Internal Server Error"))
    assert isinstance(raised, httpx.HTTPStatusError) and not isinstance(raised, Unavailable)
