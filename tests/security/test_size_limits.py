"""Finding 5: size limits, and caches bounded by bytes.

A request body over the server's limit is refused with 413 `too_large` while it is read
(whatever its Content-Length says, chunked too); each part of a request or an update over
its own limit is refused with 422 naming it; the stores' caches of parsed requests are
bounded by the size of what they hold, not by a count.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import interlock
from asgi_support import serve_in_process
from interlock import Text

pytestmark = pytest.mark.anyio
BOUND = 10
KiB = 1024
TEXT = {"type": "text", "prompt": "Hi"}


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        serve_in_process(f"sqlite:///{tmp_path / 'sizes.db'}", auth=False) as server,
        server.client("/api/v1", timeout=BOUND) as client,
    ):
        yield client


async def snapshot(api: httpx.AsyncClient) -> tuple[int, int]:
    events = (await api.get("/events", params={"limit": 0})).json()["last_event_id"]
    listed = (await api.get("/requests", params={"recipient": "alice", "limit": 1000})).json()["items"]
    return events, len(listed)


def too_large(response: httpx.Response) -> None:
    assert response.status_code == 413, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == "too_large"


async def test_a_body_over_the_limit_is_refused_with_413_however_it_is_sent(api: httpx.AsyncClient) -> None:
    before = await snapshot(api)
    details = "x" * (2 * KiB * KiB)
    too_large(await api.post("/requests", json={"to": "alice", "asks": [TEXT], "details": details}))

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: read and counted as it comes
        yield b'{"to": "alice", "asks": [{"type": "text", "prompt": "Hi"}], "details": "'
        for _ in range(32):
            yield b"x" * (64 * KiB)
        yield b'"}'

    too_large(await api.post("/requests", content=chunks(), headers={"content-type": "application/json"}))
    too_large(await api.post("/inform", json={"message": "m", "to": "alice", "data": {"blob": details}}))
    assert await snapshot(api) == before


async def test_the_body_limit_is_configurable(tmp_path: Path) -> None:
    async with (
        serve_in_process(f"sqlite:///{tmp_path / 'small.db'}", auth=False, max_body_size=2 * KiB) as server,
        server.client("/api/v1", timeout=BOUND) as api,
    ):
        small = await api.post("/requests", json={"to": "alice", "asks": [TEXT], "details": "x" * KiB})
        assert small.status_code == 201, small.text
        too_large(await api.post("/requests", json={"to": "alice", "asks": [TEXT], "details": "x" * 3 * KiB}))


async def test_each_field_over_its_limit_is_refused_with_422_naming_it(api: httpx.AsyncClient) -> None:
    before = await snapshot(api)
    form = {"type": "form", "id": "f", "prompt": "F"}
    many = {f"p{i}": {"type": "string", "description": "x" * 60} for i in range(1000)}
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("/requests", {"title": "t" * 5000}, "title"),
        ("/requests", {"details": "d" * 200_000}, "details"),
        ("/requests", {"context": {"blob": "c" * 100_000}}, "context"),
        ("/requests", {"asks": [{"type": "text", "prompt": "p" * 30_000}]}, "prompt"),
        ("/requests", {"asks": [{"type": "text", "id": f"a{i}", "prompt": "?"} for i in range(60)]}, "asks"),
        (
            "/requests",
            {"asks": [{"type": "choice", "prompt": "?", "options": [str(i) for i in range(600)]}]},
            "options",
        ),
        ("/requests", {"asks": [{**form, "schema": {"type": "object", "properties": many}}]}, "schema"),
        ("/requests", {"to": "a" * 1000}, "to"),
        ("/requests", {"origin": {"session": "s" * 1000}}, "origin.session"),
        ("/inform", {"message": "m" * 30_000}, "message"),
        ("/inform", {"message": "m", "data": {"blob": "d" * 100_000}}, "data"),
    ]
    for path, fields, name in cases:
        body = {"to": "alice", "asks": [TEXT], **fields} if path == "/requests" else {"to": "alice", **fields}
        response = await api.post(path, json=body)
        assert response.status_code == 422, (name, response.text)
        assert response.json()["code"] == "invalid_request"
        assert name in response.json()["detail"], (name, response.json()["detail"])
    assert await snapshot(api) == before


async def test_an_answer_over_its_limit_is_refused_with_422(api: httpx.AsyncClient) -> None:
    created = await api.post("/requests", json={"to": "alice", "asks": [TEXT]})
    before = await snapshot(api)
    answered = await api.post(f"/requests/{created.json()['id']}/answer", json={"answer": "a" * 300_000})
    assert answered.status_code == 422
    assert "bytes of JSON" in answered.json()["detail"]
    assert await snapshot(api) == before


async def test_a_body_too_large_is_the_same_error_through_a_server_as_on_a_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'same.db'}"
    async with (
        serve_in_process(url, auth=False) as server,
        server.connect() as remote,
        interlock.connect(url) as local,
    ):
        for broker in (local, remote):
            created = await broker.create(Text("Hi"), to="alice")
            with pytest.raises(interlock.InvalidAnswer, match=r"262144|1 MiB"):
                await broker.resolve(created.id, "a" * 2_000_000)  # past the answer's limit and the body's
            assert (await broker.get(created.id)).status is interlock.Status.PENDING
            with pytest.raises(interlock.InvalidRequest):
                await broker.create(Text("x" * 2_000_000), to="alice")


async def test_limits_are_configured_in_one_place_for_every_surface(tmp_path: Path) -> None:
    limits = interlock.Limits(max_title_length=10, max_context_bytes=100)
    async with (
        serve_in_process(f"sqlite:///{tmp_path / 'conf.db'}", auth=False, limits=limits) as server,
        server.client("/api/v1", timeout=BOUND) as api,
    ):
        response = await api.post("/requests", json={"to": "alice", "asks": [TEXT], "title": "t" * 11})
        assert response.status_code == 422 and "title" in response.json()["detail"]
    async with interlock.connect(f"sqlite:///{tmp_path / 'py.db'}", limits=limits) as broker:
        with pytest.raises(interlock.InvalidRequest, match="context"):
            await broker.create(Text("Hi"), to="alice", context={"x": "y" * 200})


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_the_request_cache_is_bounded_by_bytes_not_entries(url: str) -> None:
    budget = 64 * KiB
    async with interlock.connect(url, cache_bytes=budget) as broker:
        for _ in range(40):  # 40 requests of about 8 KiB: five times the budget
            request = await broker.create(Text("Hi"), to="alice", details="d" * 8 * KiB)
            await broker.resolve(request.id, "fine")
        cache = broker.store._cache  # type: ignore[attr-defined]
        assert 0 < cache.bytes <= budget
        assert 0 < len(cache) < 10
        assert len((await broker.list(recipient="alice", limit=100)).items) == 40


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_the_request_cache_counts_what_parsed_json_holds_not_its_length(url: str) -> None:
    """JSON of small parts parses into many times its length (`[[0], [0], ...]`: 19 times):
    counted by its length, a cache of 4 MiB held 36 MiB of these requests."""
    budget = 4096 * KiB
    context = {"rows": [[0]] * 9000}  # 54 KiB of JSON, within the context's limit; 1.1 MiB parsed
    tracemalloc.start()
    kept = json.loads(json.dumps(context))
    parsed, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert kept == context
    async with interlock.connect(url, cache_bytes=budget) as broker:
        for _ in range(30):
            request = await broker.create(Text("Hi"), to="alice", context=context)
            assert (await broker.get(request.id)).context == context
        cache = broker.store._cache  # type: ignore[attr-defined]
        assert len(cache) > 0 and len(cache) * parsed <= 2 * budget
