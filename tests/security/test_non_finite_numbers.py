"""Finding 4: NaN and Infinity must not poison an inbox.

They are refused with 422 wherever they can come in (API bodies, answers parsed from
text, the web inbox's JSON box, the Python API, updates), and a store that already holds
such a row still lists, through the API and `interlock inbox --server`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import anyio
import httpx
import pytest

import interlock
from interlock import Form, InvalidAnswer, InvalidRequest, Text

pytestmark = pytest.mark.anyio
BOUND = 10
FORM = {"type": "form", "id": "f", "prompt": "Numbers", "schema": {"type": "object"}}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "nan.db"


@pytest.fixture
def base(db: Path, serve: Callable[..., AbstractContextManager[str]]) -> Iterator[str]:
    with serve(f"sqlite:///{db}", auth=False) as url:
        yield url


@pytest.fixture
async def api(base: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=f"{base}/api/v1", timeout=BOUND) as client:
        yield client


async def snapshot(api: httpx.AsyncClient) -> tuple[int, list[tuple[str, str]]]:
    """The newest event id and every request's id and status: what must not change."""
    events = (await api.get("/events", params={"limit": 0})).json()["last_event_id"]
    page = (await api.get("/requests", params={"recipient": "alice", "limit": 1000})).json()["items"]
    return events, [(r["id"], r["status"]) for r in page]


async def raw_post(api: httpx.AsyncClient, path: str, body: str) -> httpx.Response:
    return await api.post(path, content=body.encode(), headers={"content-type": "application/json"})


async def test_nan_and_infinity_in_api_bodies_are_refused_with_422(api: httpx.AsyncClient) -> None:
    form = (await api.post("/requests", json={"to": "alice", "asks": [FORM]})).json()["id"]
    before = await snapshot(api)
    text = '{"to": "alice", "asks": [{"type": "text", "prompt": "Hi"}], '
    for path, body in [
        ("/requests", text + '"context": {"x": NaN}}'),
        ("/requests", text + '"context": [Infinity]}'),
        ("/requests", text + '"origin": {"tool_name": "t", "arguments": {"n": -Infinity}}}'),
        ("/requests", text + '"context": 1e999}'),  # strictly valid JSON, infinite in Python
        (
            "/requests",
            '{"to": "alice", "asks": [{"type": "form", "prompt": "F", '
            '"schema": {"type": "object", "properties": {"n": {"type": "number", "default": NaN}}}}]}',
        ),
        (f"/requests/{form}/answer", '{"answer": {"n": NaN}}'),
        (f"/requests/{form}/answer", '{"answers": {"f": {"n": 1e999}}}'),
        ("/inform", '{"message": "progress", "to": "alice", "data": {"done": Infinity}}'),
    ]:
        response = await raw_post(api, path, body)
        assert response.status_code == 422, (body, response.text)
        assert "NaN and Infinity are refused" in response.json()["detail"], response.text
    assert await snapshot(api) == before


async def test_nan_and_infinity_as_seconds_are_refused_as_no_numbers(api: httpx.AsyncClient) -> None:
    # NaN was refused as though too large ("less than or equal to 300") or too small
    # ("greater than 0"), and an infinite timeout only by the broker.
    made = (await api.post("/requests", json={"to": "alice", "asks": [FORM]})).json()["id"]
    before = await snapshot(api)
    text = '{"to": "alice", "asks": [{"type": "text", "prompt": "Hi"}], '
    calls = [
        ("GET", f"/requests/{made}/wait", {"timeout": "nan"}, None, "query.timeout: nan is not a number"),
        ("GET", f"/requests/{made}/wait", {"timeout": "NaN"}, None, "query.timeout: NaN is not a number"),
        ("GET", f"/requests/{made}/wait", {"timeout": "inf"}, None, "query.timeout: inf is not a finite number"),
        ("POST", "/requests", {"wait": "nan"}, text + '"title": "x"}', "query.wait: nan is not a number"),
        ("POST", "/runs/claim", {"wait": "nan"}, "{}", "query.wait: nan is not a number"),
        ("GET", "/dashboard", {"window": "nan"}, None, "query.window: nan is not a number"),
        ("POST", "/requests", None, text + '"timeout": NaN}', "timeout: nan is not a number"),
        ("POST", "/requests", None, text + '"timeout": Infinity}', "timeout: inf is not a finite number"),
        ("POST", "/runs/claim", None, '{"worker": "w", "lease": NaN}', "lease: nan is not a number"),
    ]
    for method, path, params, body, refusal in calls:
        content = body.encode() if body is not None else None
        headers = {"content-type": "application/json"} if body is not None else None
        response = await api.request(method, path, params=params, content=content, headers=headers)
        assert response.status_code == 422, (path, params, body, response.text)
        assert response.json()["detail"] == f"{refusal} (NaN and Infinity are refused)", response.text
    assert await snapshot(api) == before


async def test_nan_in_answer_text_parsed_as_json_is_refused_with_400(api: httpx.AsyncClient) -> None:
    """Through Novo-compatible inputResponses, whose answers that do not fit are 400s."""
    form = (await api.post("/requests", json={"to": "alice", "asks": [FORM]})).json()["id"]
    before = await snapshot(api)
    for text in ('{"n": NaN}', '{"n": Infinity}', '{"n": 1e400}'):  # the body itself is strict JSON
        response = await api.post(
            f"/requests/{form}/answer", json={"inputResponses": [{"requestId": "f", "text": text}]}
        )
        assert response.status_code == 400, response.text
        assert response.json()["code"] == "invalid_answer"
    assert await snapshot(api) == before


async def test_nan_in_the_web_inbox_json_box_is_refused_with_422(base: str, api: httpx.AsyncClient) -> None:
    form = (await api.post("/requests", json={"to": "alice", "asks": [FORM]})).json()["id"]
    before = await snapshot(api)
    async with httpx.AsyncClient(base_url=base, timeout=BOUND) as web:
        page = await web.get("/")
        found = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert found is not None
        for text in ('{"n": NaN}', '{"n": -Infinity}'):
            response = await web.post(
                f"/inbox/requests/{form}",
                data={"csrf": found[1], "a0.json": text},
                headers={"x-interlock-fragment": "1"},
            )
            assert response.status_code == 422, response.text
            assert "NaN and Infinity are refused" in response.text
    assert await snapshot(api) == before


async def test_the_python_api_refuses_nan_and_infinity(tmp_path: Path) -> None:
    async with interlock.connect(f"sqlite:///{tmp_path / 'py.db'}") as broker:
        with pytest.raises(InvalidRequest, match="NaN and Infinity"):
            await broker.create(Text("Hi"), to="alice", context={"x": math.nan})
        with pytest.raises(InvalidRequest, match="NaN and Infinity"):
            await broker.create(Text("Hi"), to="alice", tool_name="t", arguments={"x": math.inf})
        with pytest.raises(InvalidRequest, match="NaN and Infinity"):
            await broker.inform("progress", to="alice", data={"x": -math.inf})
        request = await broker.create(Form("F", schema={"type": "object"}), to="alice")
        with pytest.raises(InvalidAnswer, match="NaN and Infinity"):
            await broker.resolve(request.id, {"n": math.nan})
        assert (await broker.get(request.id)).status == "pending"
        assert [e.type for e in [e async for e in broker.events()]] == ["created"]


@pytest.mark.slow
async def test_a_stored_row_holding_nan_still_lists_through_the_api_and_the_cli(
    db: Path, base: str, api: httpx.AsyncClient
) -> None:
    answered = (await api.post("/requests", json={"to": "alice", "asks": [FORM], "context": {"x": 1.5}})).json()["id"]
    assert (await api.post(f"/requests/{answered}/answer", json={"answer": {"n": 2.5}})).status_code == 200
    pending = (await api.post("/requests", json={"to": "alice", "asks": [FORM], "context": [0.5]})).json()["id"]
    assert (await api.post("/inform", json={"message": "m", "to": "alice", "data": {"x": 3.5}})).status_code == 201
    # A row written before non-finite numbers were refused (SQLite keeps what JSON text it is given).
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.execute(
            # Each number with the JSON around it: a bare '0.5' can be in a timestamp too.
            "UPDATE requests SET doc = replace(doc, '\"x\":1.5', '\"x\":NaN'),"
            " response = replace(response, '\"n\":2.5', '\"n\":Infinity')"
        )
        conn.execute("UPDATE requests SET doc = replace(doc, '[0.5]', '[-Infinity]')")
        conn.execute("UPDATE events SET data = replace(data, '\"x\":3.5', '\"x\":NaN') WHERE data IS NOT NULL")
    listed = await api.get("/requests", params={"recipient": "alice"})
    assert listed.status_code == 200, listed.text
    by_id = {r["id"]: r for r in listed.json()["items"]}
    assert by_id[answered]["context"] == {"x": None}
    assert by_id[answered]["response"]["answers"] == {"f": {"n": None}}
    assert by_id[pending]["context"] == [None]
    assert (await api.get(f"/requests/{answered}")).status_code == 200
    events = await api.get("/events")
    assert events.status_code == 200, events.text
    assert next(e["data"] for e in events.json()["events"] if e["type"] == "informed")["data"] == {"x": None}
    env = {**os.environ, "INTERLOCK_URL": ""}
    for args in (["inbox", "--server", base, "--status", "all"], ["inbox", "--server", base, "--json"]):
        with anyio.fail_after(60):
            done = await anyio.run_process([sys.executable, "-m", "interlock", *args], env=env, check=False)
        assert done.returncode == 0, done.stderr.decode()
    lines = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert [r["context"] for r in lines] == [[None]]
    async with httpx.AsyncClient(base_url=base, timeout=BOUND) as web:
        assert (await web.get("/")).status_code == 200  # the web inbox shows them too
