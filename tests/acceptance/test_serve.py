"""`interlock serve` as a real process, used by `interlock ask` (a real process too) and the
other commands (in process: cli_support)."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import pytest

import interlock
from cli_support import invoke
from serve_support import DATED, Served, serve

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
INTERLOCK = [sys.executable, "-m", "interlock"]


@dataclass
class Server:
    url: str
    db: str
    tokens: dict[str, str]

    def env(self, who: str) -> dict[str, str]:
        return {**os.environ, "INTERLOCK_URL": self.url, "INTERLOCK_TOKEN": self.tokens[who]}


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    db = f"sqlite:///{tmp_path / 'served.db'}"
    tokens = {}
    for args in (["alice", "--human"], ["bob", "--human"], ["deployer", "--agent", "--owner", "alice"]):
        tokens[args[0]] = invoke("token", "create", *args, "--db", db).stdout.strip()
    async with serve("--db", db) as served:
        yield Server(served.url, db, tokens)


async def test_serve_on_port_0_takes_a_free_port_and_prints_it(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'served.db'}"
    async with serve("--db", db, "--no-auth") as first, serve("--db", db, "--no-auth") as second:
        ports = {first.url.rsplit(":", 1)[1], second.url.rsplit(":", 1)[1]}
        assert len(ports) == 2 and "0" not in ports  # two ports, each the one its server holds
        async with httpx.AsyncClient() as client:
            for served in (first, second):
                assert (await client.get(f"{served.url}/api/v1/requests")).status_code == 200


async def test_serve_logs_each_request_answered_only_with_access_log_each_line_dated(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'x.db'}"
    for flags, logged in (((), False), (("--access-log",), True)):
        async with serve("--db", db, "--no-auth", *flags) as served, httpx.AsyncClient(base_url=served.url) as client:
            assert (await client.get("/api/v1/requests/no-such-request")).status_code == 404
        lines = [line for line in served.printed if "GET /api/v1/requests/no-such-request" in line]
        assert len(lines) == logged, served.stderr
        if logged:
            assert (found := DATED.match(lines[0])) and found["level"] == "INFO", lines
            assert lines[0].rstrip().endswith('"GET /api/v1/requests/no-such-request HTTP/1.1" 404 Not Found'), lines


def test_serve_refuses_no_auth_off_loopback(tmp_path: Path) -> None:
    refused = subprocess.run(
        [*INTERLOCK, "serve", "--host", "0.0.0.0", "--no-auth", "--db", f"sqlite:///{tmp_path / 'x.db'}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 4
    assert "loopback" in refused.stderr


async def test_ask_through_a_server_blocks_until_the_owner_answers(server: Server) -> None:
    proc = await asyncio.create_subprocess_exec(
        *INTERLOCK,
        "ask",
        "Deploy v2 to prod?",
        "--confirm",
        "--timeout",
        "10m",
        env=server.env("deployer"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with interlock.connect(server.url, token=server.tokens["alice"]) as alice:
        with anyio.fail_after(30):
            async for event in alice.events(after=0, follow=True):
                if event.type == "created" and event.request is not None:
                    assert (event.request.to, event.request.requester) == ("alice", "deployer")
                    assert await alice.resolve(event.request.id, True)
                    break
            out, _ = await proc.communicate()
    assert (proc.returncode, json.loads(out)) == (0, True)


async def test_the_inbox_and_answer_commands_work_against_a_server(server: Server) -> None:
    async with interlock.connect(server.url, token=server.tokens["deployer"]) as agent:
        request = await agent.create(interlock.Choice("Region?", ["eu", "us"]), title="Roll-out")

    def run(who: str, *args: str) -> subprocess.CompletedProcess[str]:
        return invoke(*args, env=server.env(who))

    assert request.id in run("alice", "inbox").stdout
    assert request.id not in run("bob", "inbox").stdout
    denied = run("bob", "answer", request.id, "eu")
    assert denied.returncode == 4
    assert "only the human the request is to may answer" in denied.stderr or "neither to you" in denied.stderr
    assert run("alice", "answer", request.id, "EU").returncode == 0
    shown = json.loads(run("alice", "show", request.id).stdout)
    assert (shown["status"], shown["response"]["answers"], shown["response"]["by"]) == (
        "answered",
        {"choice": "eu"},
        "alice",
    )


async def test_stopping_ends_the_long_polls_at_once_with_the_request_still_pending(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'served.db'}"
    invoke("token", "create", "alice", "--human", "--db", db)
    agent = invoke("token", "create", "deployer", "--agent", "--owner", "alice", "--db", db).stdout.strip()
    headers = {"Authorization": f"Bearer {agent}"}
    body = {"asks": [{"type": "confirm", "prompt": "Ship it?"}]}
    async with (
        serve("--db", db, "--shutdown-timeout", "60") as served,
        httpx.AsyncClient(base_url=f"{served.url}/api/v1", headers=headers, timeout=120) as client,
    ):
        waited = (await client.post("/requests", json=body)).json()
        asking = asyncio.ensure_future(client.post("/requests", params={"wait": 100}, json=body))
        polling = asyncio.ensure_future(client.get(f"/requests/{waited['id']}/wait", params={"timeout": 100}))
        claiming = asyncio.ensure_future(client.post("/runs/claim", params={"wait": 100}, json={"worker": "w1"}))
        await asyncio.sleep(1)  # all three are waiting
        assert not (asking.done() or polling.done() or claiming.done())
        served.proc.terminate()
        with anyio.fail_after(15):  # not the 60 s grace: the server ends its waits as it stops
            asked, polled, claimed = await asyncio.gather(asking, polling, claiming)
            await served.proc.wait()
    # Answers the clients go on from (the request made and still pending, a 408 to poll
    # again, no run), not a 500 for a cut connection; nothing was withdrawn.
    assert asked.status_code == 201 and asked.json()["status"] == "pending", asked.text
    assert polled.status_code == 408 and polled.json()["code"] == "pending", polled.text
    assert claimed.status_code == 204, claimed.text
    assert "Traceback" not in served.stderr, served.stderr
    async with interlock.connect(db) as broker:
        assert set(await broker.pending()) == {waited["id"], asked.json()["id"]}


async def test_serve_names_the_routing_in_use_when_the_stored_one_overrides_the_file(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'served.db'}"
    routing = tmp_path / "routing.toml"
    routing.write_text('[channels.hook]\ntype = "webhook"\nurl = "http://127.0.0.1:9/"\n')
    async with serve("--db", db, "--no-auth", "--routing", str(routing)) as first:
        pass
    said = "".join(first.stderr.split())  # lines wrap anywhere in a long path
    assert "".join(f"delivering notifications as {routing} says (channels: hook)".split()) in said, said
    other = tmp_path / "other.toml"
    other.write_text('[channels.pager]\ntype = "webhook"\nurl = "http://127.0.0.1:9/"\n')
    assert invoke("routing", "set", str(other), "--db", db).returncode == 0
    async with serve("--db", db, "--no-auth", "--routing", str(routing)) as second:  # the file unchanged
        pass
    said = "".join(second.stderr.split())
    assert "astheroutingkeptinthestoresays(channels:pager)" in said, said
    assert "channels:hook" not in said


async def test_serve_without_a_routing_file_says_it_delivers_as_the_stored_routing_says(tmp_path: Path) -> None:
    """A node started without --routing on a store that keeps a routing delivers by it: it
    says so, with the routing's warnings, as a node started with the file does."""
    db = f"sqlite:///{tmp_path / 'served.db'}"
    async with serve("--db", db, "--no-auth") as bare:  # no routing anywhere: nothing to say
        pass
    assert "delivering" not in bare.stderr, bare.stderr
    kept = tmp_path / "kept.toml"
    kept.write_text('[channels.pager]\ntype = "webhook"\nurl = "http://127.0.0.1:9/"\n')
    assert invoke("routing", "set", str(kept), "--db", db).returncode == 0
    async with serve("--db", db, "--no-auth") as served:
        pass
    said = " ".join(served.stderr.split())
    assert "delivering notifications as the routing kept in the store says (channels: pager)" in said, said
    assert "warning:" in said and "pager" in said.partition("warning:")[2], said  # unsigned: it takes no answers


async def printed(served: Served, words: str) -> str:
    """The first line `served` printed that holds `words`, once it has (bounded by the caller)."""
    while not (lines := [line for line in served.printed if words in line]):
        if served.proc.returncode is not None:
            raise AssertionError(f"interlock serve ended:\n{served.stderr}")
        await anyio.sleep(0.02)  # its stderr is read as it comes (serve_support): look again
    return lines[0]


async def test_serve_says_when_an_outage_of_its_store_ends_and_says_only_that_by_default(tmp_path: Path) -> None:
    """Another process holds the SQLite file's write lock past `lock_timeout`: the expiry of
    a request that falls due meanwhile fails, one warning; once the lock goes, one line says
    it works again, at the default log level (`--log-level warning` leaves that line out)."""
    path = tmp_path / "locked.db"
    db = f"sqlite:///{path}?lock_timeout=0.2"
    for level in ("info", "warning"):
        with anyio.fail_after(90):
            async with serve("--db", db, "--no-auth", "--log-level", level) as served:
                async with interlock.connect(served.url) as broker:
                    request = await broker.create_detached(interlock.Text("Name?"), timeout=0.5)
                holder = sqlite3.connect(path, isolation_level=None)
                try:
                    holder.execute("BEGIN IMMEDIATE")  # the write lock, held
                    failed = await printed(served, "expiring overdue requests failed")
                    holder.execute("ROLLBACK")
                    async with interlock.connect(served.url) as broker:
                        with pytest.raises(interlock.Expired):
                            await broker.wait(request.id, timeout=30)  # expired once the lock went
                finally:
                    holder.close()
        # (All it printed is read by now: the server has stopped.)
        assert DATED.match(failed) and DATED.match(failed)["level"] == "WARNING" and "locked" in failed, served.stderr
        back = [line for line in served.printed if "expiring overdue requests works again" in line]
        assert len(back) == (0 if level == "warning" else 1), served.stderr
        assert all((found := DATED.match(line)) and found["level"] == "INFO" for line in back)
