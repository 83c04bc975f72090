"""The floor for interlock's HTTP cycle: a bare Starlette app doing the same SQLite work.

Three endpoints with the shape of interlock's raw-httpx cycle, and nothing else:

* ``POST /requests`` -- a bearer-token check, one ``INSERT`` and its commit, 201 with the id;
* ``GET /requests/{id}/wait?timeout=30`` -- a long poll: the answer at once if there is
  one, else an ``asyncio.Event`` woken by the answer;
* ``POST /requests/{id}/answer`` -- a token check, one conditional ``UPDATE`` and its
  commit, the waiter woken, 200.

The SQLite file uses the pragmas interlock uses (WAL, ``synchronous=NORMAL``) and is written
from the event loop on one connection, as a best-case server would. No validation, no
event log, no idempotency, no permissions: the ratio says what all of those, and the web
framework's extra layers, cost per cycle.

Run by ``bench/http_roundtrip.py`` as ``python bench/starlette_floor.py DB PORT TOKEN``.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import uuid

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


def make_app(db: str, token: str) -> Starlette:
    conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE IF NOT EXISTS requests (id TEXT PRIMARY KEY, doc TEXT NOT NULL, answer TEXT)")
    waiters: dict[str, asyncio.Event] = {}
    expected = f"Bearer {token}"

    def authorized(request: Request) -> bool:
        return request.headers.get("authorization") == expected

    async def create(request: Request) -> Response:
        if not authorized(request):
            return JSONResponse({"code": "unauthorized"}, status_code=401)
        body = await request.body()
        rid = uuid.uuid4().hex
        conn.execute("BEGIN")
        conn.execute("INSERT INTO requests (id, doc) VALUES (?, ?)", (rid, body.decode()))
        conn.execute("COMMIT")
        return JSONResponse({"id": rid, "status": "pending"}, status_code=201)

    async def answer(request: Request) -> Response:
        if not authorized(request):
            return JSONResponse({"code": "unauthorized"}, status_code=401)
        rid = request.path_params["rid"]
        body = await request.body()
        conn.execute("BEGIN")
        done = conn.execute(
            "UPDATE requests SET answer = ? WHERE id = ? AND answer IS NULL", (body.decode(), rid)
        ).rowcount
        conn.execute("COMMIT")
        if not done:
            return JSONResponse({"code": "already_settled"}, status_code=409)
        event = waiters.pop(rid, None)
        if event is not None:
            event.set()
        return JSONResponse({"id": rid, "status": "answered"})

    async def wait(request: Request) -> Response:
        if not authorized(request):
            return JSONResponse({"code": "unauthorized"}, status_code=401)
        rid = request.path_params["rid"]
        timeout = float(request.query_params.get("timeout", "30"))
        event = waiters.setdefault(rid, asyncio.Event())
        row = conn.execute("SELECT answer FROM requests WHERE id = ?", (rid,)).fetchone()
        if row is None:
            return JSONResponse({"code": "not_found"}, status_code=404)
        if row[0] is None:
            try:
                async with asyncio.timeout(timeout):
                    await event.wait()
            except TimeoutError:
                return JSONResponse({"code": "pending"}, status_code=408)
            row = conn.execute("SELECT answer FROM requests WHERE id = ?", (rid,)).fetchone()
        waiters.pop(rid, None)
        return JSONResponse({"id": rid, "status": "answered", "answer": json.loads(row[0])})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(
        routes=[
            Route("/healthz", health),
            Route("/api/v1/requests", create, methods=["POST"]),
            Route("/api/v1/requests/{rid}/answer", answer, methods=["POST"]),
            Route("/api/v1/requests/{rid}/wait", wait),
        ]
    )


if __name__ == "__main__":
    db, port, token = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    # The same server stack as `interlock serve`: uvicorn with uvloop and httptools when installed.
    uvicorn.run(make_app(db, token), host="127.0.0.1", port=port, log_level="warning", access_log=False)
