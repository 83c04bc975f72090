"""Without auth, the loopback server answers only to its own name: a page that rebinds its
DNS name to 127.0.0.1 (so the browser sends `Host: evil.example`), or posts from another
origin, can neither read nor answer anything."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

import interlock
from interlock import Confirm

pytestmark = pytest.mark.anyio
BOUND = 10


@pytest.fixture
def open_server(tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]) -> Iterator[tuple[str, str]]:
    db = f"sqlite:///{tmp_path / 'local.db'}"
    with serve(db, auth=False) as base:
        yield base, db


async def pending(db: str) -> str:
    async with interlock.connect(db) as broker:
        return (await broker.create(Confirm("Deploy?"), to="alice")).id


async def test_a_foreign_host_is_refused_without_auth(
    open_server: tuple[str, str], tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]]
) -> None:
    base, db = open_server
    request_id = await pending(db)
    port = urlsplit(base).port
    async with httpx.AsyncClient(base_url=base, timeout=BOUND) as client:
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", "localhost.evil.example"):
            listed = await client.get("/api/v1/requests", headers={"Host": host})
            assert listed.status_code == 403, host
            assert listed.headers["content-type"] == "application/problem+json"
            assert listed.json()["code"] == "forbidden"
            answered = await client.post(
                f"/api/v1/requests/{request_id}/answer", json={"answer": True}, headers={"Host": host}
            )
            assert answered.status_code == 403
            assert (await client.get("/", headers={"Host": host})).status_code == 403
        for host in ("localhost", f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "127.0.0.2"):
            assert (await client.get("/api/v1/requests", headers={"Host": host})).status_code == 200, host
    async with interlock.connect(db) as broker:
        assert (await broker.get(request_id)).status.value == "pending"

    async with (
        serve_apart(f"sqlite:///{tmp_path / 'auth.db'}", auth=True) as with_auth,
        httpx.AsyncClient(base_url=with_auth, timeout=BOUND) as client,
    ):
        # Behind a proxy the Host is the public name: with auth, the bearer token is what is checked.
        assert (await client.get("/api/v1/requests", headers={"Host": "interlock.example.com"})).status_code == 401


async def test_a_change_posted_from_another_origin_is_refused_without_auth(open_server: tuple[str, str]) -> None:
    base, db = open_server
    request_id = await pending(db)
    port = urlsplit(base).port
    async with httpx.AsyncClient(base_url=base, timeout=BOUND) as client:
        for origin in ("http://evil.example", f"http://localhost:{port + 1 if port != 65535 else 1}", "null"):
            refused = await client.post(
                f"/api/v1/requests/{request_id}/answer", json={"answer": True}, headers={"Origin": origin}
            )
            assert (refused.status_code, refused.json()["code"]) == (403, "forbidden"), origin
            created = await client.post(
                "/api/v1/requests", json={"asks": [{"type": "text", "prompt": "x"}]}, headers={"Origin": origin}
            )
            assert created.status_code == 403
            web_path = f"/inbox/requests/{request_id}"
            web = await client.post(web_path, data={"action": "approve"}, headers={"Origin": origin})
            assert web.status_code == 403
        # Reading is not a change: a cross-origin GET still cannot read the answer (no CORS).
        assert (await client.get("/api/v1/requests", headers={"Origin": "http://evil.example"})).status_code == 200
        async with interlock.connect(db) as broker:
            assert (await broker.get(request_id)).status.value == "pending"

        # The server's own pages post with its own origin, and that works.
        path = f"/api/v1/requests/{request_id}/answer"
        own = await client.post(path, json={"answer": True}, headers={"Origin": base})
        assert own.status_code == 200
        made = await client.post("/api/v1/requests", json={"asks": [{"type": "text", "prompt": "Why?"}]})
        assert made.status_code == 201  # a client without Origin (curl, the Python client) is not a page
