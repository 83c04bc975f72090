"""How MCP clients reach the tools: /mcp takes the API's tokens, `interlock mcp` runs on a
store or a server, and a job outlives the processes that made and watched it."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_support import BOUND, World, add_people, error, in_process, result, stdio_params

import interlock
from interlock import Confirm
from interlock.agent import ApprovalGate, ToolCall
from interlock.errors import Closed

pytestmark = pytest.mark.anyio

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
LIST_INBOX = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "hitl_list", "arguments": {}}}
VERSION = {"MCP-Protocol-Version": "2025-06-18"}
ACCEPT = {"Accept": "application/json, text/event-stream"}
LOOPBACK = "http://127.0.0.1"
ASK = {"asks": [{"type": "approval", "id": "ok", "prompt": "Ship it?"}]}


@contextlib.asynccontextmanager
async def http_client(url: str, token: str | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=BOUND) as http,
        Client(streamable_http_client(url, http_client=http), read_timeout_seconds=BOUND) as client,
    ):
        yield client


async def test_mcp_over_http_refuses_no_token_a_wrong_one_and_a_revoked_one(world: World) -> None:
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(timeout=BOUND) as http:
        bare = await http.post(f"{world.base}/mcp", json=INITIALIZE, headers=headers)
        assert (bare.status_code, bare.json()["code"]) == (401, "unauthorized")
        assert bare.headers["www-authenticate"] == "Bearer"
        wrong = {**headers, "Authorization": "Bearer il_00000000_guess"}
        assert (await http.post(f"{world.base}/mcp", json=INITIALIZE, headers=wrong)).status_code == 401
        good = {**headers, "Authorization": f"Bearer {world.tokens['bob']}"}
        initialized = await http.post(f"{world.base}/mcp", json=INITIALIZE, headers=good)
        assert initialized.status_code == 200
        assert initialized.json()["result"]["serverInfo"]["version"] == interlock.__version__  # a client may log it

        listed = await http.post(f"{world.base}/mcp", json=LIST_INBOX, headers={**good, **VERSION})
        assert listed.status_code == 200 and listed.json()["result"]["structuredContent"] == {
            "requests": [],
            "next_cursor": None,
        }

    async with interlock.connect(world.db) as broker:
        assert await broker.store.revoke_tokens(principal="bob") == 1
    async with httpx.AsyncClient(timeout=BOUND) as http:  # bob's calls stop at once, his earlier ones too
        assert (await http.post(f"{world.base}/mcp", json=INITIALIZE, headers=good)).status_code == 401
        assert (await http.post(f"{world.base}/mcp", json=LIST_INBOX, headers={**good, **VERSION})).status_code == 401


async def test_a_client_that_gives_up_on_request_human_input_over_http_withdraws_its_question(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]]
) -> None:
    """Over stdio a cut call withdraws its question; over `/mcp` the question stayed in the
    person's inbox, answerable, with nobody waiting for the answer. The client hanging up
    now cuts the call there too."""
    db = f"sqlite:///{tmp_path / 'gone.db'}"
    asked = {"question": "Still there?", "question_type": "CONFIRM", "timeout": 100}
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call"}
    call["params"] = {"name": "request_human_input", "arguments": asked}
    async with serve_apart(db, auth=False) as base, interlock.connect(db) as broker:
        async with httpx.AsyncClient(timeout=BOUND) as http:  # (no session: the endpoint keeps none)
            with anyio.fail_after(BOUND):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(functools.partial(http.post, f"{base}/mcp", json=call, headers={**ACCEPT, **VERSION}))
                    async with contextlib.aclosing(broker.events(follow=True)) as events:
                        async for event in events:  # the question has arrived: hang up
                            if event.type == "created":
                                tg.cancel_scope.cancel()
                                break
        (question,) = (await broker.list()).items
        with anyio.fail_after(BOUND):
            settled = await broker.watch(question.id, timeout=BOUND)
        assert settled.status is interlock.Status.CANCELLED and settled.response is not None
        assert (settled.response.cause, settled.response.via) == ("withdrawn", "mcp")


async def test_what_is_answered_or_withdrawn_over_http_mcp_is_recorded_as_through_mcp(world: World) -> None:
    """`/mcp`'s tools call the API in the server's process: what they record is `via: mcp`,
    as `interlock mcp` records it on a store; a client of the API cannot claim it."""
    confirm = {"asks": [{"type": "confirm", "id": "ok", "prompt": "Ship it?"}], "to": "alice"}
    async with world.api("alice-bot") as bot:
        asked = [(await bot.post("/requests", json=confirm)).json()["id"] for _ in range(3)]
    async with http_client(f"{world.base}/mcp", world.tokens["alice"]) as alice:
        answered = result(await alice.call_tool("hitl_respond", {"id": asked[0], "answers": {"ok": True}}))
        assert answered["job"]["status"] == "COMPLETE"
        result(await alice.call_tool("hitl_respond", {"id": asked[1], "action": "reject", "comment": "not now"}))
    async with http_client(f"{world.base}/mcp", world.tokens["alice-bot"]) as bot_mcp:
        result(await bot_mcp.call_tool("hitl_cancel", {"job": asked[2]}))
    async with world.api("alice") as api:  # a header of that name is a header: the API's own
        other = (await api.post("/requests", json=confirm)).json()["id"]
        sent = await api.post(f"/requests/{other}/answer", json={"answer": True}, headers={"interlock.surface": "mcp"})
        assert sent.status_code == 200, sent.text
    async with interlock.connect(world.db) as broker:
        settled = [await broker.get(i) for i in (*asked, other)]
    assert [(r.status.value, r.response and r.response.via) for r in settled] == [
        ("answered", "mcp"),
        ("rejected", "mcp"),
        ("cancelled", "mcp"),
        ("answered", "api"),
    ]


async def test_a_body_past_the_limit_sent_in_chunks_is_refused_as_too_large_not_a_failure(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]]
) -> None:
    """Without a Content-Length the body's limit is found while it is read, inside the
    call `/mcp` cuts when its client hangs up: that 413 came out as a 500."""

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(40):
            yield b" " * 65536  # 2.5 MiB in all, past the server's 1 MiB

    async with serve_apart(f"sqlite:///{tmp_path / 'big.db'}", auth=False) as base, httpx.AsyncClient() as http:
        sent = await http.post(f"{base}/mcp", content=chunks(), headers={**ACCEPT, **VERSION}, timeout=BOUND)
    assert sent.status_code == 413, sent.text


async def test_a_token_refused_at_mcp_is_logged_as_the_api_logs_one(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator saw a token guessed or revoked at the API, never at `/mcp`."""
    caplog.set_level(logging.WARNING, logger="interlock.server")
    guess = {**ACCEPT, "Authorization": "Bearer il_0123abcd_a-guess-at-someones-token"}
    async with httpx.AsyncClient(timeout=BOUND) as http:
        assert (await http.post(f"{world.base}/mcp", json=INITIALIZE, headers=guess)).status_code == 401
    [said] = [r.getMessage() for r in caplog.records if r.name == "interlock.server"]
    assert said == "refused an unknown or revoked token (il_0123abcd_***) from 127.0.0.1: POST /mcp"


async def test_a_call_under_way_keeps_its_seat_while_more_callers_come_than_mcp_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past `MAX_SEATS` callers `/mcp` closed the least recently used one's broker, though a
    call of its was still using it: that call failed ("this broker was closed"). Its seat
    now stays open until the call ends, and the next caller past the limit closes it then."""
    from interlock.mcp.transports import HttpEndpoint
    from interlock.server.app import create_app

    monkeypatch.setattr("interlock.mcp.transports.MAX_SEATS", 2)

    def call(token: str) -> Any:  # what a tool call's context says of its caller
        return SimpleNamespace(headers={"authorization": f"Bearer {token}"})

    async def nobody(token: str) -> None:
        return None

    app = create_app(f"sqlite:///{tmp_path / 'seats.db'}", auth=False)
    endpoint = HttpEndpoint(app, nobody, auth=False)
    async with app.router.lifespan_context(app), endpoint.running():
        async with endpoint._access(call("caller-0")) as waiting:  # a call under way, the least recent
            for n in range(1, 5):
                async with endpoint._access(call(f"caller-{n}")) as other:
                    await other.broker.list()
            await waiting.broker.list()  # its broker still works
        async with endpoint._access(call("caller-5")):
            pass
        with pytest.raises(Closed):
            await waiting.broker.list()  # closed once its call had ended


async def test_mcp_over_http_without_auth_answers_this_machine_only(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]]
) -> None:
    async with serve_apart(f"sqlite:///{tmp_path / 'open.db'}", auth=False) as base:
        async with http_client(f"{base}/mcp") as local:
            job = result(await local.call_tool("hitl_request", {**ASK, "user": "carol"}))
            assert [r["id"] for r in result(await local.call_tool("hitl_list", {}))["requests"]] == [job["job"]]
            answered = {"id": job["job"], "answers": {"ok": True}}
            assert result(await local.call_tool("hitl_respond", answered))["job"]["status"] == "COMPLETE"
        async with httpx.AsyncClient(timeout=BOUND) as http:
            rebound = {"Host": "evil.example", "Accept": "application/json, text/event-stream"}
            assert (await http.post(f"{base}/mcp", json=INITIALIZE, headers=rebound)).status_code == 403


async def test_interlock_mcp_on_a_store_url_acts_as_this_machines_user(tmp_path: Path) -> None:
    """As `interlock ask` and `answer` do on a store: a request that names nobody is the
    user's own, and what they answer or tell is recorded as theirs (it was to nobody, and
    answered by nobody)."""
    db = f"sqlite:///{tmp_path / 'local.db'}"
    async with Client(stdio_params("--db", db, user="dana"), read_timeout_seconds=BOUND) as local:
        job = result(await local.call_tool("hitl_request", {**ASK, "user": "alice"}))
        assert job["user"] == "alice"
        own = result(await local.call_tool("hitl_request", ASK))
        assert own["user"] == "dana"
        answered = result(await local.call_tool("hitl_respond", {"id": own["job"], "answers": {"ok": True}}))
        assert answered["job"]["status"] == "COMPLETE"
    async with interlock.connect(db) as broker:
        assert (await broker.get(job["job"])).asks == (Confirm("Ship it?", id="ok"),)
        settled = await broker.get(own["job"])
        assert settled.to == "dana" and settled.response is not None
        assert (settled.response.by, settled.response.via) == ("dana", "mcp")


async def test_interlock_mcp_on_a_store_refuses_a_yes_to_someone_else_s_gate_approval(tmp_path: Path) -> None:
    """Acting as this machine's user, a yes to bob's gate approval was stored as dana's: the
    gate read it as a refusal, and bob could no longer answer. A no still stops the call."""
    db = f"sqlite:///{tmp_path / 'local.db'}"
    async with interlock.connect(db) as broker:
        gate = ApprovalGate(broker, policies={"deploy": "always"}, to="bob")
        approval = await gate.begin(ToolCall("deploy", {"service": "web"}, id="call-1", session="s1"))
        assert isinstance(approval, interlock.Request)
    (decision,) = approval.asks
    async with Client(stdio_params("--db", db, user="dana"), read_timeout_seconds=BOUND) as local:
        yes = {"id": approval.id, "answers": {decision.id: True}}
        said = error(await local.call_tool("hitl_respond", yes))
        assert "takes a yes only from bob, and this one answers as dana" in said and "still open" in said
        async with interlock.connect(db) as broker:
            assert (await broker.get(approval.id)).status is interlock.Status.PENDING
        no = {"id": approval.id, "answers": {decision.id: False}, "comment": "not today"}
        assert result(await local.call_tool("hitl_respond", no))["job"]["status"] == "FAILED"


@pytest.mark.slow
async def test_a_job_outlives_the_stdio_server_that_made_it(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'jobs.db'}"
    async with Client(stdio_params("--db", db), read_timeout_seconds=BOUND) as first:
        job = result(await first.call_tool("hitl_request", {**ASK, "user": "alice"}))
    async with interlock.connect(db) as broker:  # answered while no MCP server runs
        assert await broker.resolve(job["job"], True, by="alice")
    async with Client(stdio_params("--db", db), read_timeout_seconds=BOUND) as second:
        settled = result(await second.call_tool("hitl_status", {"job": job["job"]}))
    assert settled["status"] == "COMPLETE" and settled["response"]["answers"] == {"ok": True}


@pytest.mark.slow
async def test_a_job_outlives_a_restart_of_the_server_and_of_the_client(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]]
) -> None:
    db = f"sqlite:///{tmp_path / 'restart.db'}"
    tokens = await add_people(db)
    async with serve_apart(db, auth=True) as base, http_client(f"{base}/mcp", tokens["alice-bot"]) as bot:
        job = result(await bot.call_tool("hitl_request", ASK))
    async with serve_apart(db, auth=True) as base:  # a new server process on the same store
        async with http_client(f"{base}/mcp", tokens["alice-bot"]) as bot:
            assert result(await bot.call_tool("hitl_status", {"job": job["job"]}))["status"] == "INPUT_REQUIRED"
        async with http_client(f"{base}/mcp", tokens["alice"]) as alice:
            reply = {"id": job["job"], "action": "reject", "comment": "later"}
            result(await alice.call_tool("hitl_respond", reply))
        async with http_client(f"{base}/mcp", tokens["alice-bot"]) as bot:
            failed = result(await bot.call_tool("hitl_status", {"job": job["job"]}))
    assert failed["status"] == "FAILED" and "later" in failed["reason"]


async def test_interlock_mcp_with_a_bad_token_says_so_and_exits(world: World) -> None:
    params = stdio_params("--server", world.base, token="il_0_wrong")
    with anyio.fail_after(BOUND):
        done = await anyio.run_process([params.command, *params.args], env=params.env, check=False, stdin=None)
    assert done.returncode == 4
    assert b"unknown or revoked" in done.stderr


async def test_making_the_mcp_server_leaves_logging_to_the_host() -> None:
    """The SDK would add a root handler of its own, past the redaction `interlock serve` sets up
    (the server makes it on the first call to /mcp)."""
    from interlock.server.app import create_app

    root = logging.getLogger()
    kept = list(root.handlers)  # pytest's capture handlers: without any, as at start-up
    for handler in kept:
        root.removeHandler(handler)
    try:
        level = root.level
        app = create_app("memory://", auth=False)
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=LOOPBACK) as http:
                assert (await http.post("/mcp", json=INITIALIZE, headers=ACCEPT)).status_code == 200
            assert (root.handlers, root.level) == ([], level)
    finally:
        for handler in kept:
            root.addHandler(handler)


# In an interpreter of its own: this one has imported the MCP SDK already.
FIRST_CALL = f"""
import asyncio, json, sys, httpx
from interlock.server.app import create_app

async def main():
    app = create_app("memory://", auth=False)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url={LOOPBACK!r}) as http:
            seen = [(await http.get("/healthz")).status_code, "mcp" in sys.modules]
            answer = await http.post("/mcp", json={INITIALIZE!r}, headers={ACCEPT!r})
            seen += [answer.status_code, "mcp" in sys.modules]
    print(json.dumps(seen))

asyncio.run(main())
"""


def test_a_server_loads_the_mcp_sdk_only_once_mcp_is_called() -> None:
    """A third of the CPU `interlock serve` spent starting was importing the MCP SDK."""
    done = subprocess.run([sys.executable, "-c", FIRST_CALL], capture_output=True, text=True, timeout=BOUND)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [200, False, 200, True]


async def test_a_server_gone_away_is_a_tool_error_the_model_reads(
    tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]
) -> None:
    db = f"sqlite:///{tmp_path / 'gone.db'}"
    tokens = await add_people(db)
    with contextlib.ExitStack() as running:
        world = World(running.enter_context(serve(db, auth=True)), db, tokens)
        async with in_process(world, "alice") as alice:
            assert result(await alice.call_tool("hitl_list", {}))["requests"] == []
            running.close()  # the server stops; the MCP server and its client stay
            assert "not reachable" in error(await alice.call_tool("hitl_list", {}))


async def test_an_mcp_endpoint_that_cannot_be_made_fails_its_calls_and_the_rest_of_the_server_serves_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import interlock.mcp
    from interlock.server.app import create_app

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no MCP today")

    monkeypatch.setattr(interlock.mcp, "HttpEndpoint", broken)
    app = create_app("memory://", auth=False)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url=LOOPBACK) as http:
            for _ in range(2):  # made once, refused each time
                assert (await http.post("/mcp", json=INITIALIZE, headers=ACCEPT)).status_code == 500
            assert (await http.get("/api/v1/requests")).status_code == 200
