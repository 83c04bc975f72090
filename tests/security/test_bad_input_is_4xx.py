"""Finding 10: bad input gets a clear 4xx, never a 500, and changes nothing.

Each case runs over the HTTP API (served in-process) on SQLite and on PostgreSQL (whose text cannot
hold a NUL), and checks afterwards that no request was created and no event appended.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

import interlock
from asgi_support import InProcessServer, serve_in_process
from interlock import InvalidRequest, Text

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("backend", ["sqlite", "postgresql"])]
BOUND = 10
TEXT = {"type": "text", "id": "t", "prompt": "Hi"}
INT64 = 2**63


@pytest.fixture
async def server(url: str) -> AsyncIterator[InProcessServer]:
    async with serve_in_process(url, auth=False) as server:
        yield server


@pytest.fixture
async def api(server: InProcessServer) -> AsyncIterator[httpx.AsyncClient]:
    async with server.client("/api/v1", timeout=BOUND) as client:
        yield client


@pytest.fixture
async def pending(api: httpx.AsyncClient) -> str:
    created = await api.post("/requests", json={"to": "alice", "asks": [TEXT]})
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


async def snapshot(api: httpx.AsyncClient) -> tuple[int, list[tuple[str, str]]]:
    events = await api.get("/events", params={"limit": 0})
    listed = await api.get("/requests", params={"recipient": "alice", "limit": 1000})
    assert events.status_code == listed.status_code == 200
    return events.json()["last_event_id"], [(r["id"], r["status"]) for r in listed.json()["items"]]


def refused(response: httpx.Response, *statuses: int) -> None:
    assert response.status_code in (statuses or (400, 422)), response.text
    assert response.headers["content-type"].startswith("application/problem+json"), response.text
    assert response.json()["code"] in ("invalid_request", "invalid_answer")


def body(**fields: Any) -> str:
    """JSON as a client may send it: `\\ud800` and `\\u0000` escapes are valid JSON."""
    return json.dumps({"to": "alice", "asks": [TEXT], **fields})


async def post(api: httpx.AsyncClient, path: str, raw: str) -> httpx.Response:
    return await api.post(path, content=raw.encode(), headers={"content-type": "application/json"})


async def test_a_timeout_too_large_for_a_date_is_refused_with_422(api: httpx.AsyncClient) -> None:
    before = await snapshot(api)
    for timeout in (1e300, 1e12 * 86400):
        response = await post(api, "/requests", body(timeout=timeout))
        refused(response, 422)
        assert "timeout" in response.json()["detail"]
    assert await snapshot(api) == before


async def test_a_body_of_the_wrong_shape_is_refused_with_422_saying_what_is_wrong(
    api: httpx.AsyncClient, pending: str
) -> None:
    before = await snapshot(api)
    for path, raw in (
        (f"/requests/{pending}/answer", "[]"),
        (f"/requests/{pending}/answer", '"yes"'),
        ("/answers", "[1]"),
        ("/requests", "[]"),
    ):
        response = await post(api, path, raw)
        refused(response, 422)
        assert response.json()["detail"].startswith("the body: "), (path, raw, response.text)
    neither = await api.post(f"/requests/{pending}/answer", json={})  # no answer, answers, inputResponses
    refused(neither, 422)
    assert neither.json() | {"detail": ""} == {
        "type": "about:blank",
        "title": "Unprocessable Content",
        "status": 422,
        "code": "invalid_request",
        "detail": "",
    }
    assert await snapshot(api) == before


@pytest.mark.parametrize("bad", ["\ud800", "\x00"], ids=["lone surrogate", "NUL"])
async def test_a_string_no_store_can_keep_is_refused_everywhere(api: httpx.AsyncClient, pending: str, bad: str) -> None:
    before = await snapshot(api)
    creates: list[dict[str, Any]] = [
        {"title": f"a{bad}"},
        {"details": bad},
        {"asks": [{"type": "text", "prompt": f"Hi {bad}"}]},
        {"asks": [{"type": "choice", "prompt": "Pick", "options": ["a", bad]}]},
        {"asks": [{"type": "choice", "prompt": "Pick", "options": [{"id": "a", "label": bad}]}]},
        {"asks": [{"type": "text", "id": f"t{bad}", "prompt": "Hi"}]},
        {"to": f"alice{bad}"},
        {"idempotency_key": bad},
        {"context": {"note": bad}},
        {"context": {bad: 1}},
        {"origin": {"session": bad}},
        {"origin": {"tool_name": "t", "arguments": {"path": bad}}},
    ]
    for fields in creates:
        refused(await post(api, "/requests", body(**fields)), 422)
    answers = [
        {"answer": bad},
        {"answers": {"t": f"fine {bad}"}},
        {"answer": "fine", "reason": bad},
    ]
    for answer in answers:
        refused(await post(api, f"/requests/{pending}/answer", json.dumps(answer)), 422)
    # Novo-compatible inputResponses that do not fit are 400s.
    novo = {"inputResponses": [{"requestId": "t", "text": bad}]}
    refused(await post(api, f"/requests/{pending}/answer", json.dumps(novo)), 400)
    refused(await post(api, f"/requests/{pending}/reject", json.dumps({"reason": bad})), 422)
    refused(await post(api, "/inform", json.dumps({"message": f"m{bad}", "to": "alice"})), 422)
    refused(await post(api, "/inform", json.dumps({"message": "m", "to": "alice", "data": {"x": bad}})), 422)
    assert await snapshot(api) == before


async def test_a_nul_in_a_filter_cursor_or_id_is_refused(api: httpx.AsyncClient, pending: str) -> None:
    before = await snapshot(api)
    for params in ({"recipient": "alice\x00"}, {"session": "\x00"}, {"run": "r\x00"}):
        refused(await api.get("/requests", params=params), 422)
    no_cursor = await api.get("/requests", params={"cursor": f"{pending}\x00"})  # no cursor a page gave
    assert no_cursor.status_code == 422 and no_cursor.json()["code"] == "invalid_cursor", no_cursor.text
    for path in (f"/requests/{pending}%00", "/requests/%00/wait?timeout=0", "/requests/%00/cancel"):
        response = await (api.post(path, json={}) if path.endswith("cancel") else api.get(path))
        refused(response, 422)
    refused(await api.post("/requests/%00/answer", json={"answer": "x"}), 422)
    refused(await api.get("/deliveries/%00"), 422)
    refused(await api.post("/deliveries/%00/retry"), 422)
    refused(await api.get("/teams/%00"), 422)
    for params in ({"request": "\x00"}, {"session": "\x00"}, {"run": "\x00"}):
        refused(await api.get("/events", params=params), 422)
        with anyio.fail_after(BOUND):  # refused before the stream's 200: one that started would not end
            refused(await api.get("/events/stream", params=params), 422)
            if "request" not in params:
                refused(await api.get("/interactions/stream", params=params), 422)
    refused(await api.post("/close", json={"channel": "c\x00"}), 422)
    batch = await api.post("/answers", json={"items": [{"id": "x\x00", "answer": "a"}, {"id": pending, "answer": 1}]})
    assert batch.status_code == 200, batch.text  # each item stands on its own
    assert [item["error"]["code"] for item in batch.json()] == ["invalid_request", "invalid_answer"]
    assert await snapshot(api) == before


async def test_a_lone_surrogate_or_nul_in_a_filter_or_id_is_refused_by_the_python_api(url: str) -> None:
    async with interlock.connect(url) as broker:
        request = await broker.create(Text("Hi"), to="alice")
        for bad in ("\ud800", "\x00"):
            with pytest.raises(InvalidRequest):
                await broker.list(session=f"s{bad}")
            with pytest.raises(InvalidRequest):
                await broker.list(after=f"{request.id}{bad}")
            with pytest.raises(InvalidRequest):
                await broker.get(f"{request.id}{bad}")
            with pytest.raises(InvalidRequest):
                await broker.resolve(f"x{bad}", "fine")
            with pytest.raises(InvalidRequest):
                await broker.cancel(f"x{bad}")
        assert (await broker.get(request.id)).status == "pending"
        assert [e.type async for e in broker.events()] == ["created"]


async def test_an_event_cursor_past_int64_is_refused(api: httpx.AsyncClient) -> None:
    before = await snapshot(api)
    for after in (INT64, 2**64, 10**30):
        refused(await api.get("/events", params={"after": after}), 422)
        refused(await api.get("/events/stream", params={"after": after}), 422)
    assert await snapshot(api) == before


@pytest.mark.parametrize(
    "last_event_id", [str(INT64).encode(), b"9" * 40, "²".encode("latin-1"), b"-1", b"1e3"], ids=str
)
async def test_a_bad_last_event_id_is_refused_before_the_stream_starts(
    server: InProcessServer, api: httpx.AsyncClient, last_event_id: bytes
) -> None:
    before = await snapshot(api)
    async with api.stream("GET", "/events/stream", headers={"Last-Event-ID": last_event_id}) as response:
        assert response.status_code == 400
        await response.aread()
        refused(response, 400)
        assert "Last-Event-ID" in response.json()["detail"]
    async with server.client(timeout=BOUND) as web:
        await web.get("/")  # the inbox's (no-auth) session cookie
        async with web.stream("GET", "/inbox/stream", headers={"Last-Event-ID": last_event_id}) as response:
            assert response.status_code == 400
            assert "Last-Event-ID" in (await response.aread()).decode()
        updates = await web.get(f"/inbox/updates/{INT64}")
        assert updates.status_code == 404
    assert await snapshot(api) == before


@pytest.mark.parametrize(
    ("schema", "fault"),
    [
        ({"properties": {"a": {"$ref": "#"}}}, "leads back to itself"),
        (
            {
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                "properties": {"x": {"$ref": "#/$defs/a"}},
            },
            "leads back to itself",
        ),
        (
            {"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "properties": {"x": {"$ref": "#/$defs/a"}}},
            "leads back to itself",
        ),
        ({"properties": {"a": {"$ref": "https://example.com/schema.json"}}}, "not local"),
        ({"properties": {"a": {"$ref": "other.json#/x"}}}, "not local"),
        ({"properties": {"a": {"$ref": "#/$defs/missing"}}}, "points to nothing"),
        ({"properties": {"a": {"$ref": "#nowhere"}}}, "points to nothing"),
    ],
    ids=["self", "cycle", "cycle through allOf", "remote", "relative", "missing", "missing anchor"],
)
async def test_a_form_schema_with_a_bad_ref_is_refused_at_create(
    api: httpx.AsyncClient, schema: dict[str, Any], fault: str
) -> None:
    before = await snapshot(api)
    ask = {"type": "form", "id": "f", "prompt": "Fill in", "schema": {"type": "object", **schema}}
    response = await api.post("/requests", json={"to": "alice", "asks": [ask]})
    refused(response, 422)
    assert "ask 'f'" in response.json()["detail"] and fault in response.json()["detail"]
    assert await snapshot(api) == before


@pytest.mark.parametrize(
    "text", ["[" * 100_000 + "]" * 100_000, "1" * 5000, '{"a": ' + "1" * 5000 + "}"], ids=["deep", "digits", "in"]
)
async def test_a_form_answered_in_text_with_json_python_cannot_read_is_refused(
    api: httpx.AsyncClient, text: str
) -> None:
    """A form answered through `inputResponses` (Novo's routes and the answer route) takes its
    answer as JSON text: nested past Python's recursion limit, or an integer of more digits
    than Python converts, made json.loads raise RecursionError or ValueError, a 500."""
    form = {"type": "form", "id": "f", "prompt": "Fill", "schema": {"type": "object"}}
    created = await api.post("/requests", json={"to": "alice", "asks": [form]})
    assert created.status_code == 201, created.text
    request_id = created.json()["id"]
    before = await snapshot(api)
    answer = {"inputResponses": [{"requestId": "f", "text": text}]}
    refused(await api.post(f"/requests/{request_id}/answer", json=answer))
    refused(await api.post(f"/interactions/{request_id}/resolve", json=answer))
    assert await snapshot(api) == before


async def test_a_withdrawal_of_a_request_that_outlives_its_waiter_says_why_it_stays_pending(
    api: httpx.AsyncClient,
) -> None:
    """The cancel body's own example (`cause: "withdrawn"`) on a detached request read as
    a 409 saying the pending request was "already pending"."""
    made = await api.post("/requests", json={"to": "alice", "asks": [TEXT], "detached": True})
    request_id = made.json()["id"]
    before = await snapshot(api)
    withdrawn = await api.post(f"/requests/{request_id}/cancel", json={"cause": "withdrawn"})
    assert withdrawn.status_code == 409, withdrawn.text
    assert (withdrawn.json()["code"], withdrawn.json()["current_status"]) == ("already_settled", "pending")
    assert "outlives its waiter" in withdrawn.json()["detail"]
    assert 'cancel it (cause "cancelled") to withdraw it' in withdrawn.json()["detail"]
    assert await snapshot(api) == before
    cancelled = await api.post(f"/requests/{request_id}/cancel", json={"cause": "cancelled"})
    assert (cancelled.status_code, cancelled.json()["status"]) == (200, "cancelled")


async def test_a_run_s_events_page_takes_at_least_one_event_and_a_message_some_text(
    api: httpx.AsyncClient, server: InProcessServer
) -> None:
    """`limit=0` gave back `after` as the page's end; a message of spaces, refused by the
    server, fitted the schema it publishes."""
    run = (await api.post("/runs", json={"agent": "deployer", "run_id": "r1"})).json()["id"]
    refused(await api.get(f"/runs/{run}/events", params={"limit": 0}), 422)
    before = await snapshot(api)
    refused(await api.post(f"/runs/{run}/messages", json={"text": "   "}), 422)
    assert await snapshot(api) == before
    async with server.client("") as root:
        schema = (await root.get("/openapi.json")).json()["components"]["schemas"]["MessageBody"]
    assert schema["properties"]["text"]["pattern"] == r"\S"


async def test_a_web_inbox_page_for_an_id_no_request_or_run_can_have_is_the_page_for_none(
    server: InProcessServer, pending: str
) -> None:
    long, nul = "r" * 300, "%00"  # too long for any id a store keeps; a NUL no store keeps
    async with server.client(timeout=BOUND) as browser:
        page = await browser.get("/")
        assert page.status_code == 200
        for path, fragment, words in (
            *((f"/inbox/runs/{bad}", False, "There is no such run.") for bad in (long, nul)),
            *((f"/inbox/requests/{bad}", True, "There is no such request.") for bad in (long, nul)),
            *((f"/inbox/deliveries?request={bad}", False, "There is no such request.") for bad in (long, nul)),
        ):
            headers = {"X-Interlock-Fragment": "1"} if fragment else {}
            shown = await browser.get(path, headers=headers)
            assert (shown.status_code, shown.headers["content-type"]) == (404, "text/html; charset=utf-8"), shown.text
            assert words in shown.text
        for bad in (long, nul):
            followed = await browser.get(f"/inbox/runs/{bad}/stream")
            assert (followed.status_code, followed.text) == (404, "there is no such run")
        unknown = await browser.get("/inbox/runs/no-such-run")  # as for an id no run has
        assert unknown.status_code == 404 and "There is no such run." in unknown.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        for bad in (long, nul):
            posted = await browser.post(f"/inbox/runs/{bad}/cancel", data={"csrf": csrf[1]})
            assert posted.status_code == 404 and "There is no such run." in posted.text, posted.text
            posted = await browser.post(f"/inbox/deliveries/{bad}/retry", data={"csrf": csrf[1]})
            assert posted.status_code == 404 and "There is no such delivery." in posted.text, posted.text
