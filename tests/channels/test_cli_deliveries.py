"""`interlock deliver` (the delivery loop alone) and `interlock deliveries` (list, retry),
and the send limits of `deliver` and `serve` (--concurrency, --per-channel), run in
process (cli_support; `deliver` and `serve`, which run until stopped, in subprocesses)
against a SQLite file and a real webhook receiver; what `deliveries list` says of a
delivery skipped, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

import interlock
from asgi_support import serve_in_process
from cli_support import invoke
from interlock import Confirm
from interlock.broker import LocalBroker
from interlock.channels import Message
from interlock.channels.delivery import DeliveryLoop
from interlock.principals import Principal, issue_token
from interlock.routing import routing_from_dict
from interlock.server.app import create_app
from serve_support import serve

from .receiver import Received, Receiver, eventually, receiver

pytestmark = pytest.mark.anyio
INTERLOCK = [sys.executable, "-m", "interlock"]


def run(*args: str, db: str) -> subprocess.CompletedProcess[str]:
    return invoke(*args, env={**os.environ, "INTERLOCK_URL": db})


def write_routing(path: Path, url: str) -> Path:
    path.write_text(
        f'max_attempts = 1\n[channels.hook]\ntype = "webhook"\nurl = "{url}"\n[recipients.alice]\nchannels = ["hook"]\n'
    )
    return path


@pytest.mark.slow
async def test_a_dead_letter_is_listed_and_retried_from_the_command_line(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    async with receiver() as hook:
        hook.statuses = [500]
        routing = write_routing(tmp_path / "routing.toml", hook.url)
        async with interlock.connect(db) as broker:
            assert isinstance(broker, LocalBroker)
            request = await broker.create(Confirm("Ship it?"), to="alice", requester="bot")
            proc = await asyncio.create_subprocess_exec(
                *INTERLOCK,
                "deliver",
                "--routing",
                str(routing),
                "--db",
                db,
                "--poll-interval",
                "0.1",
                stderr=asyncio.subprocess.PIPE,
            )
            try:
                await hook.until(1, timeout=30)

                async def dead_letter() -> bool:
                    return bool(await broker.store.list_deliveries(status="dead"))

                await eventually(dead_letter, timeout=30)
            finally:
                proc.terminate()
                await proc.wait()
    listed = run("deliveries", "list", "--status", "dead", "--json", db=db)
    assert listed.returncode == 0, listed.stderr
    [dead] = [json.loads(line) for line in listed.stdout.splitlines()]  # one object per line, as every --json
    assert dead["request_id"] == request.id and dead["last_error"] == "HTTP 500 from the receiver"
    table = run("deliveries", "list", "--request", request.id, db=db)
    assert "dead" in table.stdout and "hook" in table.stdout
    retried = run("deliveries", "retry", dead["id"], db=db)
    assert retried.returncode == 0 and "will be sent again" in retried.stderr
    assert json.loads(run("deliveries", "list", "--json", db=db).stdout.splitlines()[0])["status"] == "pending"
    again = run("deliveries", "retry", dead["id"], db=db)
    assert again.returncode == 1 and "no dead letter" in again.stderr


def test_a_bad_routing_file_is_refused_naming_the_field(tmp_path: Path) -> None:
    routing = tmp_path / "routing.toml"
    routing.write_text('[recipients.alice]\nchannels = ["sms"]\n')
    result = run("deliver", "--routing", str(routing), db=f"sqlite:///{tmp_path / 'x.db'}")
    assert result.returncode == 4
    assert "recipients.alice.channels: no channel named 'sms'" in result.stderr
    bad_status = run("deliveries", "list", "--status", "lost", db=f"sqlite:///{tmp_path / 'x.db'}")
    assert bad_status.returncode == 4 and "--status is one of" in bad_status.stderr


def write_hanging_routing(path: Path, url: str) -> Path:
    """One channel, for everyone, with a timeout longer than any test waits."""
    path.write_text(
        f'[channels.hook]\ntype = "webhook"\nurl = "{url}"\ntimeout = 120\n[default]\nchannels = ["hook"]\n'
    )
    return path


@contextlib.asynccontextmanager
async def hanging_receiver() -> AsyncIterator[tuple[Receiver, asyncio.Semaphore]]:
    """A receiver that answers one message for each release of its semaphore; whatever
    still hangs is let go at the end."""
    answer = asyncio.Semaphore(0)

    async def hang(_: Received) -> None:
        await answer.acquire()

    async with receiver() as hook:
        hook.hold = hang
        try:
            yield hook, answer
        finally:
            for _ in range(32):
                answer.release()


async def six_at_a_time(broker: LocalBroker, hook: Receiver, answer: asyncio.Semaphore) -> None:
    """Of 8 messages through one channel that hangs, 6 are under way (not the 4 of 16 sends
    a channel takes by default) and 2 wait untouched; each goes once the receiver answers."""
    made = [(await broker.create(Confirm(f"Ship {i}?"), to=f"person-{i}", requester="bot")).id for i in range(8)]
    await hook.until(6, timeout=30)
    assert len(hook.received) == 6
    under_way = {got.headers["idempotency-key"] for got in hook.received}
    waiting = [d for r in made for d in await broker.store.list_deliveries(request_id=r) if d.id not in under_way]
    assert [(d.status, d.attempts) for d in waiting] == [("pending", 0)] * 2
    for _ in range(8):
        answer.release()
    await hook.until(8, timeout=30)

    async def all_delivered() -> bool:
        sent = [d for r in made for d in await broker.store.list_deliveries(request_id=r)]
        return [d.status for d in sent] == ["delivered"] * 8

    await eventually(all_delivered, timeout=30)


@pytest.mark.slow
async def test_deliver_sends_as_many_at_a_time_through_one_channel_as_its_options_say(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'sends.db'}"
    async with hanging_receiver() as (hook, answer):
        routing = write_hanging_routing(tmp_path / "routing.toml", hook.url)
        async with interlock.connect(db) as broker:
            assert isinstance(broker, LocalBroker)
            proc = await asyncio.create_subprocess_exec(
                *INTERLOCK,
                "deliver",
                "--routing",
                str(routing),
                "--db",
                db,
                "--poll-interval",
                "0.05",
                "--concurrency",
                "6",
                "--per-channel",
                "6",
                stderr=asyncio.subprocess.DEVNULL,
            )
            try:
                await six_at_a_time(broker, hook, answer)
            finally:
                proc.terminate()
                async with asyncio.timeout(20):
                    await proc.wait()


@pytest.mark.slow
async def test_serve_sends_as_many_at_a_time_through_one_channel_as_its_options_say(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'sends.db'}"
    async with hanging_receiver() as (hook, answer):
        routing = write_hanging_routing(tmp_path / "routing.toml", hook.url)
        limits = ("--concurrency", "6", "--per-channel", "6")
        async with serve("--db", db, "--routing", str(routing), *limits), interlock.connect(db) as broker:
            assert isinstance(broker, LocalBroker)
            await six_at_a_time(broker, hook, answer)


@pytest.mark.parametrize("command", ["deliver", "serve"])
@pytest.mark.parametrize(
    ("options", "code", "said"),
    [  # a usage error is 2 in process, as click says (the command exits 4)
        (["--concurrency", "0"], 2, "Invalid value for '--concurrency': Input should be greater than or equal to 1"),
        (["--concurrency", "-3"], 2, "Invalid value for '--concurrency': Input should be greater than or equal to 1"),
        (["--per-channel", "0"], 2, "Invalid value for '--per-channel': Input should be greater than or equal to 1"),
        (["--concurrency", "two"], 2, "Invalid value for '--concurrency':"),
        (
            ["--concurrency", "4", "--per-channel", "5"],
            4,
            "error: --per-channel 5 is more than the 4 sends at a time (--concurrency): one channel's share is at "
            "most all of them",
        ),
        (["--per-channel", "17"], 4, "error: --per-channel 17 is more than the 16 sends at a time (--concurrency)"),
    ],
)
def test_send_limits_out_of_range_are_refused_changing_nothing(
    tmp_path: Path, command: str, options: list[str], code: int, said: str
) -> None:
    """Refused on the command line before a store is made or a port taken."""
    routing = write_hanging_routing(tmp_path / "routing.toml", "http://127.0.0.1:9/hook")
    store = tmp_path / "never.db"
    extra = ["--port", "0"] if command == "serve" else []
    result = run(command, "--routing", str(routing), *extra, *options, db=f"sqlite:///{store}")
    assert result.returncode == code, result.stderr
    assert said in " ".join(result.stderr.replace("│", " ").split()), result.stderr
    assert "Traceback" not in result.stderr
    assert not store.exists()


async def test_a_server_s_send_limits_hold_for_a_routing_set_after_it_started() -> None:
    """A server started without a routing makes its delivery loop when one is set (PUT
    /routing): with the sends it was given, not the defaults. Limits out of range are
    refused when the app is made."""
    doc = {
        "channels": {"hook": {"type": "webhook", "url": "http://127.0.0.1:9/hook"}},
        "default": {"channels": ["hook"]},
    }
    limits = {"delivery_concurrency": 6, "delivery_per_channel": 6}
    async with serve_in_process("memory://", auth=False, **limits) as server, server.client("/api/v1") as local:
        assert server.app.state.interlock.delivery is None
        assert (await local.put("/routing", json=doc)).status_code == 200
        loop = server.app.state.interlock.delivery
        assert loop is not None and (loop.concurrency, loop.per_channel) == (6, 6)
    for wrong, said in (
        ({"delivery_concurrency": 0}, "concurrency: at least 1 send at a time, not 0"),
        ({"delivery_concurrency": 4, "delivery_per_channel": 5}, "per_channel: at most the 4 sends at a time"),
    ):
        with pytest.raises(ValueError, match=re.escape(said)):
            create_app("memory://", auth=False, **wrong)


class _Taking:
    """A channel that takes every send: to whom each went."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send(self, message: Message) -> str | None:
        self.sent.append(message.delivery.recipient)
        return None

    async def aclose(self) -> None:
        pass


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'cli.db'}"
        return
    databases: Callable[[], AbstractContextManager[str]] = request.getfixturevalue("pg_databases")
    with databases() as url:
        yield url


async def test_a_request_s_deliveries_list_each_one_skipped_with_its_recipient_channel_and_why(store_url: str) -> None:
    # alice is cut off (`interlock token revoke alice`): her share of a request to her team
    # is skipped, bob's sent. `interlock deliveries list --request ID`, where an operator
    # looks for why nobody was told, lists both: hers skipped, to her, through the hook,
    # and why, as bob's delivered.
    hook = _Taking()
    async with interlock.connect(store_url) as broker:
        assert isinstance(broker, LocalBroker)
        for person in ("alice", "bob"):
            await broker.save_principal(Principal(person, "human"))
            await broker.save_token(issue_token(person, datetime.now(UTC)))
        await broker.revoke_tokens(principal="alice")
        request = await broker.create(Confirm("Restart the workers?"), to="ops", requester="bot")
        routing = {
            "channels": {"hook": {"type": "webhook", "url": "http://127.0.0.1:9/hook"}},
            "teams": {"ops": {"members": ["alice", "bob"]}},
            "default": {"channels": ["hook"]},
        }
        loop = DeliveryLoop(broker.outbox, routing_from_dict(routing), channels={"hook": hook})
        with anyio.fail_after(10):
            while await loop.run_once() or await broker.list_deliveries(status="pending"):
                pass
    assert hook.sent == ["bob"]
    listed = run("deliveries", "list", "--request", request.id, db=store_url)
    assert listed.returncode == 0, listed.stderr
    said = " ".join(listed.stdout.split())
    assert "request alice hook skipped 0 not sent: every token of 'alice' is revoked" in said, listed.stdout
    assert "until `interlock token create alice --human` gives them one again" in said, listed.stdout
    assert "request bob hook delivered 1" in said, listed.stdout
    as_json = [
        json.loads(line)
        for line in run("deliveries", "list", "--request", request.id, "--json", db=store_url).stdout.splitlines()
    ]
    [hers] = [d for d in as_json if d["recipient"] == "alice"]
    assert (hers["channel"], hers["status"]) == ("hook", "skipped")
    assert "every token of 'alice' is revoked" in hers["last_error"]
