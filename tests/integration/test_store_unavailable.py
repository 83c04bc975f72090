"""A store that fails for now answers the same everywhere: another connection holds a SQLite
file locked (`BEGIN EXCLUSIVE`) past the store's `lock_timeout` (a URL option), and the API
answers 503 `unavailable` with `Retry-After`, changing nothing; a page of the web inbox says
so; the same call succeeds once the lock is let go. The remote broker raises `Unavailable`
for a write, and its wait outlives a server that is unavailable for a while (a proxy's bare
503, as nginx answers for an upstream that is away). A worker backs off and goes on.

(SQLite in WAL mode still reads under another connection's write lock: what fails here is
a write. The reads that fail, the streams and the long polls across a database that refuses
connections are in tests/postgres/test_pg_unavailable.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.types import Receive, Scope, Send

import interlock
from asgi_support import BASE_URL, StreamingASGITransport, serve_in_process
from interlock import Confirm, Run, RunStatus, Status, Text, Unavailable, Worker
from interlock.server.app import create_app
from log_support import logged

pytestmark = pytest.mark.anyio

BOUND = 30  # seconds: the most any one wait here may take
LOCK_TIMEOUT = 0.2  # seconds the store waits for a lock before it says it is unavailable
TEXT = {"asks": [{"type": "text", "prompt": "Name?"}]}


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Another connection holds the file's write lock until the block ends."""
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")
        yield
    finally:
        if other.in_transaction:
            other.execute("ROLLBACK")
        other.close()


def db_url(path: Path) -> str:
    return f"sqlite:///{path}?lock_timeout={LOCK_TIMEOUT}"


async def test_a_write_to_a_store_locked_past_its_timeout_answers_503_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    async with serve_in_process(db_url(path), auth=False) as server, server.client("/api/v1") as api:
        asked = (await api.post("/requests", json=TEXT)).json()
        with locked(path), anyio.fail_after(BOUND):
            made = await api.post("/requests", json={**TEXT, "idempotency_key": "names-1"})
            answered = await api.post(f"/requests/{asked['id']}/answer", json={"answer": "Ada"})
        for refused in (made, answered):
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "1"
            assert refused.headers["content-type"] == "application/problem+json"
            problem = refused.json()
            assert (problem["code"], problem["status"], problem["retry_after"]) == ("unavailable", 503, 1)
            assert "stayed locked" in problem["detail"]
        # Nothing changed: one request, still pending.
        assert [r["id"] for r in (await api.get("/requests")).json()["items"]] == [asked["id"]]
        assert (await api.get(f"/requests/{asked['id']}")).json()["status"] == "pending"
        # The same calls, once the lock is let go.
        made = await api.post("/requests", json={**TEXT, "idempotency_key": "names-1"})
        assert made.status_code == 201
        answered = await api.post(f"/requests/{asked['id']}/answer", json={"answer": "Ada"})
        assert answered.status_code == 200 and answered.json()["status"] == "answered"


async def test_the_calls_refused_in_one_outage_are_one_warning_in_the_server_s_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "locked.db"
    async with serve_in_process(db_url(path), auth=False) as server, server.client("/api/v1") as api:
        with caplog.at_level(logging.DEBUG, logger="interlock.server"), locked(path), anyio.fail_after(BOUND):
            for n in range(3):  # agents asking on, the store away
                assert (await api.post("/requests", json={**TEXT, "idempotency_key": f"k{n}"})).status_code == 503
    refusals = [r for r in caplog.records if r.name == "interlock.server" and "answered 503" in r.getMessage()]
    assert [r.levelno for r in refusals] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    assert refusals[0].getMessage().startswith("POST /api/v1/requests answered 503: ")
    assert "stayed locked" in refusals[0].getMessage() and "logged at debug level" in refusals[0].getMessage()


async def test_a_page_of_the_web_inbox_whose_store_fails_says_so_with_503(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    async with serve_in_process(db_url(path), auth=False) as server, server.client() as browser:
        async with server.client("/api/v1") as api:
            asked = (await api.post("/requests", json=TEXT)).json()
        headers = {"Accept": "text/html"}
        with locked(path), anyio.fail_after(BOUND):
            page = await browser.get(f"/requests/{asked['id']}", headers=headers)  # a person's view is written
        assert page.status_code == 503
        assert page.headers["retry-after"] == "1"
        assert page.headers["content-type"].startswith("text/html")
        assert "Unavailable for now" in page.text and "try again shortly" in page.text
        assert "Traceback" not in page.text and "sqlite" not in page.text.lower()
        assert (await browser.get(f"/requests/{asked['id']}", headers=headers)).status_code == 200


async def test_the_remote_broker_raises_unavailable_for_a_write_and_the_retry_makes_it_once(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    async with serve_in_process(db_url(path), auth=False) as server, server.connect() as broker:
        with locked(path), anyio.fail_after(BOUND), pytest.raises(Unavailable) as caught:
            await broker.create(Text("Name?"), idempotency_key="names-1")
        assert caught.value.retry_after == 1.0
        assert isinstance(caught.value, ConnectionError)
        made = await broker.create(Text("Name?"), idempotency_key="names-1")
        again = await broker.create(Text("Name?"), idempotency_key="names-1")
        assert again.id == made.id
        assert [r.id for r in (await broker.list()).items] == [made.id]


class Outage:
    """A proxy in front of the app: while `down`, every call is answered 503 with a page of
    its own and no problem of interlock's (`refused` is set at each), else passed on."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.down = False
        self.refused = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.down:
            await self.app(scope, receive, send)
            return
        headers = [(b"content-type", b"text/html"), (b"retry-after", b"0")]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": b"<h1>503 Service Temporarily Unavailable</h1>"})
        self.refused.set()


@contextlib.asynccontextmanager
async def behind_a_proxy(tmp_path: Path) -> AsyncIterator[tuple[Outage, StreamingASGITransport]]:
    app = create_app(f"sqlite:///{tmp_path / 'proxied.db'}", auth=False)
    proxy = Outage(app)
    transport = StreamingASGITransport(proxy)
    async with app.router.lifespan_context(app):
        try:
            yield proxy, transport
        finally:
            await transport.stop()


async def test_a_wait_outlives_a_server_that_is_unavailable_and_a_write_raises_it(tmp_path: Path) -> None:
    async with behind_a_proxy(tmp_path) as (proxy, transport):
        async with interlock.connect(BASE_URL, transport=transport) as broker:
            request = await broker.create(Confirm("Deploy?"))
            proxy.down = True
            with anyio.fail_after(BOUND):
                with pytest.raises(Unavailable) as caught:  # a write: raised to the caller
                    await broker.resolve(request.id, True)
                assert caught.value.retry_after == 0.0
                waiting = asyncio.ensure_future(broker.wait(request.id, timeout=BOUND))
                for _ in range(2):  # the wait polled, was refused and polled again: it goes on
                    proxy.refused.clear()
                    await proxy.refused.wait()
                assert not waiting.done()
                proxy.down = False
                assert await broker.resolve(request.id, True)
                response = await waiting
        assert response.answers == {request.asks[0].id: True}


async def test_a_wait_with_a_timeout_is_not_held_past_it_by_a_server_that_stays_unavailable(tmp_path: Path) -> None:
    async with (
        behind_a_proxy(tmp_path) as (proxy, transport),
        interlock.connect(BASE_URL, transport=transport) as broker,
    ):
        request = await broker.create(Text("Name?"))
        proxy.down = True
        with anyio.fail_after(BOUND), pytest.raises(Unavailable):
            await broker.wait(request.id, timeout=0.3)
        proxy.down = False
        assert (await broker.get(request.id)).status is Status.PENDING


async def test_a_worker_backs_off_while_the_store_is_locked_and_resumes_the_run_after(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "worker.db"
    resumed: list[str] = []
    called = asyncio.Event()

    async def resume(run: Run, requests: Any) -> str:
        resumed.append(run.id)
        called.set()
        return "deployed"

    async with interlock.connect(db_url(path)) as broker:
        run = await broker.start_run("deployer", run_id="deploy-1")
        request = await broker.create(Confirm("Deploy?"), kind="approval", to="alice", run=run.id)
        await broker.park(run.id, state=None, waiting_on=[request.id])
        await broker.resolve(request.id, True)  # ready to resume
        worker = Worker(broker, {"deployer": resume}, name="w1")
        stop = asyncio.Event()
        with (
            caplog.at_level(logging.DEBUG, logger="interlock"),  # each try again is a debug line
            logged("interlock", "could not claim a run") as refused,
            anyio.fail_after(BOUND),
        ):
            with locked(path):
                running = asyncio.ensure_future(worker.run(stop=stop))
                for _ in range(2):  # the claim met the lock, and again: logged, and the worker goes on
                    refused.clear()
                    await refused.wait()
                assert not running.done()
            await called.wait()  # claimed once the lock was let go
            stop.set()  # (after the run it resumes now is stored)
            await running
        assert resumed == ["deploy-1"]
        done = await broker.get_run(run.id)
        assert (done.status, done.result, done.attempts) == (RunStatus.COMPLETED, "deployed", 1)
    claims = [r for r in caplog.records if "could not claim a run" in r.getMessage()]
    assert [r.levelno for r in claims].count(logging.WARNING) == 1  # one warning for the outage, not per try
    assert any("worker w1 claims runs again" in r.getMessage() for r in caplog.records)
