"""`interlock serve` as a real process, used by `interlock ask` (a real process too) and the
other commands (in process: cli_support)."""

from __future__ import annotations

import asyncio
import json
import os
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
from serve_support import serve

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
