"""Finding 3: one answer must not freeze the server.

Form patterns run on RE2 (linear time), a schema RE2 cannot run or that is too large or
too deep is refused at create, and a check that still runs long is cut at the broker's
time budget, off the event loop, with a clear 422. Each test runs against a real server.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import interlock
from asgi_support import serve_in_process
from interlock import Form, InvalidAnswer
from interlock.model import time_budget

pytestmark = pytest.mark.anyio
BOUND = 5  # seconds: far beyond what any of these takes now, far below what each took before
EVIL = "^(a+)+$"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        serve_in_process(f"sqlite:///{tmp_path / 'forms.db'}", auth=False) as server,
        server.client("/api/v1", timeout=BOUND) as client,
    ):
        yield client


def form(schema: dict[str, Any], ask_id: str = "f") -> dict[str, Any]:
    return {"to": "alice", "asks": [{"type": "form", "id": ask_id, "prompt": "Fill in", "schema": schema}]}


async def last_event(api: httpx.AsyncClient) -> int:
    response = await api.get("/events", params={"limit": 0})
    assert response.status_code == 200, response.text
    return int(response.json()["last_event_id"])


async def test_an_answer_that_would_backtrack_for_seconds_is_refused_at_once(api: httpx.AsyncClient) -> None:
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": EVIL}}}
    created = await api.post("/requests", json=form(schema))
    assert created.status_code == 201, created.text
    request_id = created.json()["id"]
    before = await last_event(api)
    with anyio.fail_after(BOUND):  # Python's re took about 8 s on this one
        answered = await api.post(f"/requests/{request_id}/answer", json={"answer": {"code": "a" * 28 + "!"}})
    assert answered.status_code == 422
    assert answered.json()["code"] == "invalid_answer"
    assert "does not match" in answered.json()["detail"]
    assert (await api.get(f"/requests/{request_id}")).json()["status"] == "pending"
    assert await last_event(api) == before
    ok = await api.post(f"/requests/{request_id}/answer", json={"answer": {"code": "aaaa"}})
    assert ok.status_code == 200, ok.text


async def test_pattern_properties_and_additional_properties_run_on_the_linear_engine(api: httpx.AsyncClient) -> None:
    schema = {"type": "object", "patternProperties": {EVIL: {"type": "string"}}, "additionalProperties": False}
    created = await api.post("/requests", json=form(schema))
    assert created.status_code == 201, created.text
    with anyio.fail_after(BOUND):
        answered = await api.post(f"/requests/{created.json()['id']}/answer", json={"answer": {"a" * 28 + "!": "x"}})
    assert answered.status_code == 422
    assert (
        "do not match any of the regexes" in answered.json()["detail"] or "does not match" in answered.json()["detail"]
    )


async def test_unique_items_over_many_objects_is_checked_in_linear_time(api: httpx.AsyncClient) -> None:
    schema = {"type": "object", "properties": {"rows": {"type": "array", "uniqueItems": True}}}
    created = await api.post("/requests", json=form(schema))
    assert created.status_code == 201, created.text
    rows = [{"n": i} for i in range(20_000)] + [{"n": 7}]  # quadratic: about 2e8 comparisons before
    with anyio.fail_after(BOUND):
        answered = await api.post(f"/requests/{created.json()['id']}/answer", json={"answer": {"rows": rows}})
    assert answered.status_code == 422
    assert "non-unique" in answered.json()["detail"]


async def test_a_pattern_the_linear_engine_cannot_run_is_refused_at_create(api: httpx.AsyncClient) -> None:
    before = await last_event(api)
    for pattern in ("(a)\\1", "^(?=a)a$", "(?<!x)y"):
        schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": pattern}}}
        response = await api.post("/requests", json=form(schema, ask_id="details"))
        assert response.status_code == 422, (pattern, response.text)
        assert response.json()["code"] == "invalid_request"
        assert "ask 'details'" in response.json()["detail"] and "not supported" in response.json()["detail"]
    keys = await api.post("/requests", json=form({"type": "object", "patternProperties": {"(x)\\1": {}}}))
    assert keys.status_code == 422
    assert await last_event(api) == before


async def test_a_schema_too_large_or_too_deep_is_refused_at_create_naming_the_ask(api: httpx.AsyncClient) -> None:
    before = await last_event(api)
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 40} for i in range(2000)}}
    response = await api.post("/requests", json=form(wide, ask_id="big"))
    assert response.status_code == 422, response.text
    assert "ask 'big'" in response.json()["detail"] and "bytes" in response.json()["detail"]
    deep: dict[str, Any] = {"type": "object"}
    node = deep
    for _ in range(40):
        node["properties"] = {"a": {"type": "object"}}
        node = node["properties"]["a"]
    response = await api.post("/requests", json=form(deep, ask_id="deep"))
    assert response.status_code == 422, response.text
    assert "ask 'deep'" in response.json()["detail"] and "levels deep" in response.json()["detail"]
    huge = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(60_000)}}
    response = await api.post("/requests", json=form(huge))
    assert response.status_code == 413  # a multi-MB schema does not get past the body limit
    assert await last_event(api) == before


def fan_out(levels: int, width: int) -> dict[str, Any]:
    """A small schema whose check grows as width**levels: each level refers `width` times
    to the next."""
    defs: dict[str, Any] = {f"l{i}": {"allOf": [{"$ref": f"#/$defs/l{i + 1}"}] * width} for i in range(levels)}
    defs[f"l{levels}"] = {"type": "string"}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/l0"}}}


async def test_a_check_that_runs_past_its_budget_is_refused_and_the_server_stays_responsive(
    api: httpx.AsyncClient,
) -> None:
    created = await api.post("/requests", json=form(fan_out(8, 8)))  # 8**8 subschema checks
    assert created.status_code == 201, created.text
    request_id = created.json()["id"]
    before = await last_event(api)
    with anyio.fail_after(BOUND):
        answered, health = await asyncio.gather(
            api.post(f"/requests/{request_id}/answer", json={"answer": {"x": "s"}}), api.get("/requests")
        )
    assert health.status_code == 200
    assert answered.status_code == 422
    assert answered.json()["code"] == "invalid_answer"
    assert "took longer than 1 s" in answered.json()["detail"]  # the default budget
    assert (await api.get(f"/requests/{request_id}")).json()["status"] == "pending"
    assert await last_event(api) == before


async def test_the_python_api_checks_forms_in_a_worker_thread_within_the_budget(tmp_path: Path) -> None:
    limits = interlock.Limits(check_seconds=0.2)
    async with interlock.connect(f"sqlite:///{tmp_path / 'py.db'}", limits=limits) as broker:
        request = await broker.create(Form("Fill in", schema=fan_out(8, 8)), to="alice")
        threads: set[str] = set()
        real = broker._check_in_thread

        def spy(*args: Any) -> Any:
            threads.add(threading.current_thread().name)
            return real(*args)

        broker._check_in_thread = spy  # type: ignore[method-assign]
        with anyio.fail_after(BOUND), pytest.raises(InvalidAnswer, match="took longer than"):
            await broker.resolve(request.id, {"x": "s"})
        assert threads and threading.main_thread().name not in threads
        assert (await broker.get(request.id)).status == "pending"


def test_the_budget_counts_the_checking_thread_s_work_not_its_waiting() -> None:
    """On a busy host a check's thread waits for a core or for the interpreter's lock: that
    is no work of the answer's, and a simple answer is not refused for it (a check that
    works past the budget is, as above)."""
    form = Form("Fill in", schema={"type": "object", "properties": {"x": {"type": "string", "pattern": "^a+$"}}})
    with time_budget(0.05):
        threading.Event().wait(0.2)  # four budgets of waiting, none of working
        assert form.check({"x": "aaa"}) == {"x": "aaa"}
        with pytest.raises(InvalidAnswer, match="does not match"):
            form.check({"x": "b"})
    worked = Form("Fill in", schema=fan_out(8, 8))
    with time_budget(0.05), pytest.raises(InvalidAnswer, match=r"took longer than 0\.05 s"):
        worked.check({"x": "s"})
