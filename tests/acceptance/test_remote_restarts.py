"""A remote broker's waits ride out a server that restarts: `interlock serve` on a SQLite
file is stopped and started again on the same port and file while a wait, a claim of a
worker or an `ask` with an idempotency key is under way, and each goes on once the server
is back; a write meanwhile raises at once, and a wait whose time runs out first says so."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest

import interlock
from interlock import Confirm, Run, RunStatus, Status, Text, Worker
from log_support import logged
from serve_support import INTERLOCK, Served, serve

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
BOUND = 120  # seconds: two server starts on a busy machine, and the rest
LONG = 600.0  # a wait's timeout that no outage here comes near
STOPPING = "the interlock server is stopping"  # what a server says to a poll that comes as it stops


class Seen(httpx.AsyncBaseTransport):
    """A transport that records each call as it is sent (`METHOD /path`)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.calls: list[str] = []
        self.changed = asyncio.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.calls.append(f"{request.method} {request.url.path}")
        self.changed.set()
        return await self.inner.handle_async_request(request)

    async def sent(self, call: str) -> None:
        """Return once `call` (`METHOD /path`, the path's end) has been sent."""
        while not any(c.startswith(call.split()[0]) and c.endswith(call.split()[1]) for c in self.calls):
            self.changed.clear()
            await self.changed.wait()

    async def aclose(self) -> None:
        await self.inner.aclose()


def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'served.db'}"


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, port: int = 0) -> AsyncIterator[Served]:
    """A server on the test's SQLite file (no long poll held open as it stops)."""
    async with serve("--db", store(tmp_path), "--no-auth", "--shutdown-timeout", "0", port=port) as served:
        yield served


async def stop(served: Served, *, kill: bool = False) -> None:
    """Stop a server (SIGTERM, or SIGKILL: its calls cut mid-answer) and wait for its end."""
    served.proc.kill() if kill else served.proc.terminate()
    await served.proc.wait()


def port_of(served: Served) -> int:
    port = urlsplit(served.url).port
    assert port is not None
    return port


@contextlib.contextmanager
def tries(caplog: pytest.LogCaptureFixture, what: str) -> Iterator[tuple[asyncio.Event, asyncio.Event]]:
    """Two events: the warning that `what` met an outage, and each try after it (the debug
    lines; clear it to wait for the next one)."""
    with (
        caplog.at_level(logging.DEBUG, logger="interlock"),
        # (the server gone, or saying it is stopping: a poll that came as it stopped)
        logged("interlock", f"{what}: ") as away,
        logged("interlock", "; trying again in") as again,
    ):
        yield away, again


async def tried_again(again: asyncio.Event, times: int = 2) -> None:
    for _ in range(times):
        again.clear()
        await again.wait()


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "interlock" and r.levelno >= logging.WARNING]


async def test_a_remote_wait_rides_out_a_server_restart_and_a_write_meanwhile_raises_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seen = Seen()
    with anyio.fail_after(BOUND):
        async with serving(tmp_path) as first, interlock.connect(first.url, transport=seen) as broker:
            request = await broker.create(Confirm("Ship it?"), to="alice")
            with tries(caplog, f"waiting on {request.id}") as (away, again):
                waiting = asyncio.ensure_future(broker.wait(request.id, timeout=LONG))
                await seen.sent(f"GET /{request.id}/wait")  # its long poll is open
                await stop(first)
                await away.wait()
                await tried_again(again)  # connections refused, and the wait goes on
                assert not waiting.done()

                answering = len(seen.calls)
                with pytest.raises(ConnectionError) as caught:  # a write: raised, not tried again
                    await broker.resolve(request.id, True)
                assert first.url in str(caught.value)
                assert [c for c in seen.calls[answering:] if c.endswith("/answer")] == [
                    f"POST /api/v1/requests/{request.id}/answer"
                ]

                async with serving(tmp_path, port=port_of(first)) as second:
                    assert second.url == first.url
                    assert await broker.resolve(request.id, True)
                    response = await waiting
        assert response.answers == {request.asks[0].id: True}
    (warned,) = warnings(caplog)  # one warning for the outage, however many tries
    assert warned.startswith(f"waiting on {request.id}: "), warned
    # The server said it was stopping (a poll that came as it stopped), or was gone already.
    assert f"cannot reach the interlock server at {first.url}" in warned or STOPPING in warned, warned
    assert any(f"the interlock server at {first.url} answers again" in r.getMessage() for r in caplog.records)


async def test_a_remote_wait_whose_timeout_passes_while_the_server_is_away_raises_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seen = Seen()
    with anyio.fail_after(BOUND):
        async with serving(tmp_path) as served, interlock.connect(served.url, transport=seen) as broker:
            request = await broker.create(Text("Name?"), to="alice")
            with tries(caplog, f"waiting on {request.id}") as (away, again):
                waiting = asyncio.ensure_future(broker.wait(request.id, timeout=5))
                await seen.sent(f"GET /{request.id}/wait")
                await stop(served, kill=True)  # its long poll cut mid-answer
                await away.wait()
                await again.wait()  # tried again while its time lasts
                with pytest.raises(ConnectionError) as caught:
                    await waiting
    message = str(caught.value)
    assert message.startswith(f"cannot reach the interlock server at {served.url}: "), message
    assert f"gave up waiting on {request.id} when its time ran out" in message
    assert "the request stays pending there" in message
    async with interlock.connect(store(tmp_path)) as local:  # the file itself: not expired, as it says
        assert (await local.get(request.id)).status is Status.PENDING


async def test_a_wait_without_a_timeout_on_a_request_that_expires_is_not_held_past_its_expiry_by_an_outage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The request's own expiry bounds it: past it, the server has expired the request
    unless it was answered before, and the outage is raised saying so."""
    seen = Seen()
    with anyio.fail_after(BOUND):
        async with serving(tmp_path) as served, interlock.connect(served.url, transport=seen) as broker:
            request = await broker.create(Text("Name?"), to="alice", timeout=2)
            assert request.expires_at is not None
            with tries(caplog, f"waiting on {request.id}") as (away, _):
                waiting = asyncio.ensure_future(broker.wait(request.id))
                await seen.sent(f"GET /{request.id}/wait")
                await stop(served, kill=True)
                await away.wait()
                with pytest.raises(ConnectionError) as caught:
                    await waiting
    message = str(caught.value)
    assert f"gave up waiting on {request.id} when its time ran out" in message, message
    assert f"the server expires it at {request.expires_at:%Y-%m-%d %H:%M:%S} UTC unless it was answered" in message


async def test_interlock_ask_with_a_timeout_ends_saying_why_when_the_server_stays_away_past_it(tmp_path: Path) -> None:
    """Not held forever: exit 4 (a connection error) once its time is up, as a script
    running `interlock ask --timeout` expects."""
    with anyio.fail_after(BOUND):
        async with serving(tmp_path) as served:
            asking = await asyncio.create_subprocess_exec(
                *INTERLOCK, "ask", "Name?", "--timeout", "2s", "--server", served.url,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            assert asking.stderr is not None
            while b"Waiting for an answer" not in (line := await asking.stderr.readline()):
                assert line, "interlock ask ended before it waited"
            await stop(served, kill=True)
            _, err = await asking.communicate()
    assert asking.returncode == 4, err.decode()
    assert "gave up waiting on" in err.decode() and "when its time ran out" in err.decode()


async def test_a_worker_over_a_remote_broker_keeps_claiming_across_a_server_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    called = asyncio.Event()

    async def resume(run: Run, requests: Mapping[str, Any]) -> str:
        called.set()
        return "deployed"

    seen = Seen()
    with anyio.fail_after(BOUND):
        async with serving(tmp_path) as first, interlock.connect(first.url, transport=seen) as broker:
            run = await broker.start_run("deployer", run_id="deploy-1")
            request = await broker.create(Confirm("Deploy?"), kind="approval", to="alice", run=run.id)
            await broker.park(run.id, state=None, waiting_on=[request.id])
            worker = Worker(broker, {"deployer": resume}, name="w1")
            stopping = asyncio.Event()
            with tries(caplog, "worker w1 claiming a run") as (away, again):
                running = asyncio.ensure_future(worker.run(stop=stopping))
                await seen.sent("POST /runs/claim")  # its long poll is open
                await stop(first)
                await away.wait()
                await tried_again(again)
                assert not running.done()
                async with serving(tmp_path, port=port_of(first)):
                    assert await broker.resolve(request.id, True)
                    await called.wait()  # claimed once the server was back
                    stopping.set()
                    await running
                    done = await broker.get_run(run.id)
    assert (done.status, done.result, done.attempts) == (RunStatus.COMPLETED, "deployed", 1)
    (warned,) = warnings(caplog)
    assert warned.startswith("worker w1 claiming a run: "), warned
    assert f"cannot reach the interlock server at {first.url}" in warned or STOPPING in warned, warned


async def test_ask_with_an_idempotency_key_is_asked_again_after_a_server_killed_mid_answer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seen = Seen()
    with anyio.fail_after(BOUND):
        async with serving(tmp_path) as first, interlock.connect(first.url, transport=seen) as broker:
            after = await broker.last_event_id()
            with tries(caplog, "asking 'deploy-42'") as (away, again):
                asking = asyncio.ensure_future(broker.ask(Confirm("Deploy?"), to="alice", idempotency_key="deploy-42"))
                async with interlock.connect(first.url) as other:
                    async for event in other.events(after=after, follow=True):
                        if event.type == "created":  # stored: the create's long poll is open
                            break
                await stop(first, kill=True)
                await away.wait()
                await tried_again(again, 1)
                assert not asking.done()
                async with serving(tmp_path, port=port_of(first)), interlock.connect(first.url) as person:
                    (made,) = (await person.list()).items  # made once, however often it was sent
                    assert await person.resolve(made.id, True)
                    assert await asking is True


async def test_ask_without_an_idempotency_key_rides_out_a_server_killed_once_its_request_is_made(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`ask()` without a key holds its create open only briefly (it cannot be sent again),
    then waits by the request's id: a server killed during a person's long think is waited
    out, and the answer given after its restart reaches the agent."""
    seen = Seen()
    with anyio.fail_after(BOUND):
        async with serving(tmp_path) as first, interlock.connect(first.url, transport=seen) as broker:
            asking = asyncio.ensure_future(broker.ask(Confirm("Deploy?"), to="alice"))
            with anyio.fail_after(15):  # (a create held the whole first long poll, 30 s, before)
                await seen.sent("GET /wait")  # made, and no answer within its create's brief hold
            assert [c for c in seen.calls if c.startswith("POST")] == ["POST /api/v1/requests"]
            (polled,) = [c for c in seen.calls if c.endswith("/wait")]
            request_id = polled.split("/")[-2]
            with tries(caplog, f"waiting on {request_id}") as (away, again):
                await stop(first, kill=True)
                await away.wait()
                await tried_again(again, 1)
                assert not asking.done()
                async with serving(tmp_path, port=port_of(first)), interlock.connect(first.url) as person:
                    (made,) = (await person.list()).items
                    assert (made.id, made.status) == (request_id, Status.PENDING)
                    assert await person.resolve(made.id, True)
                    assert await asking is True


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
async def test_interlock_ask_stopped_while_its_server_is_away_says_its_request_could_not_be_withdrawn(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """The server stopped under a waiting `interlock ask --server URL`, then the ask
    stopped too: it cannot withdraw its request, and says so on one line, with the command
    that withdraws it later (naming the server, as the ask did: without it, `interlock
    cancel` looks in ./interlock.db), exit 128 + the signal. The request is still pending
    once the server is back, and that command, run as printed, withdraws it."""
    with anyio.fail_after(BOUND):
        async with serving(tmp_path) as served:
            asking = await asyncio.create_subprocess_exec(
                *INTERLOCK, "ask", "Ship it?", "--confirm", "--to", "alice", "--server", served.url,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            assert asking.stderr is not None
            while b"Waiting for an answer to " not in (line := await asking.stderr.readline()):
                assert line, "interlock ask ended before it waited"
            request_id = line.decode().split("Waiting for an answer to ", 1)[1].split(";", 1)[0]
            await stop(served)
            # It has seen the server go (its one warning), and waits for it to come back.
            while b"; trying again until it is back" not in (line := await asking.stderr.readline()):
                assert line, "interlock ask ended before it saw the server go"
            asking.send_signal(signum)
            out, err = await asking.communicate()
        said = err.decode()
        assert asking.returncode == 128 + signum, said
        assert out == b"" and "Traceback" not in said, said
        withdraw = f"interlock cancel {request_id} --server {served.url}"
        assert said.splitlines() == [
            f"stopped by {signum.name}: request {request_id} could not be withdrawn and may still be pending: "
            f"withdraw it with `{withdraw}`"
        ], said
        async with serving(tmp_path, port=port_of(served)) as again:
            assert again.url == served.url
            async with interlock.connect(again.url) as broker:
                assert (await broker.get(request_id)).status is Status.PENDING
            withdrawn = await asyncio.create_subprocess_exec(
                *INTERLOCK, *withdraw.split()[1:], stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            _, cancel_err = await withdrawn.communicate()
            assert withdrawn.returncode == 0, cancel_err.decode()
            async with interlock.connect(again.url) as broker:
                assert (await broker.get(request_id)).status is Status.CANCELLED
