"""HTTP benchmark: interlock's server on loopback vs awaithumans 0.1.12's dev server.

Both servers are started by this script as subprocesses on 127.0.0.1 (free ports, fresh
SQLite files in a temporary directory), driven from this process, and stopped at the end.

Round trips (create a request, answer it from another task, the waiting client woken),
each contender for ``--seconds`` per repetition, serial (1 agent) and ``--agents``
concurrent, contenders rotated between repetitions:

* **interlock, raw httpx** -- ``POST /api/v1/requests`` (agent token), then
  ``GET /requests/{id}/wait?timeout=30`` (long poll) while another task
  ``POST``s ``/requests/{id}/answer`` ``{"answer": "x"}`` with the human's token.
  (Headline, held against awaithumans raw httpx.)
* **interlock, Python client** -- ``interlock.connect(url, token=...)``:
  ``ask(Text("q"))`` on the agent's remote broker, one call (``POST
  /api/v1/requests?wait=30``, a long poll on create that returns once answered); the
  human's broker answers each request as its ``created`` event arrives on the human's
  event stream, as an inbox would.
* **interlock, Python client, create + wait** -- one task ``create(Text("q"))`` +
  ``wait(id)`` on the agent's Broker (two calls), another ``resolve(id, "x")`` on the
  human's (informational).
* **interlock, raw httpx, --no-auth** -- the raw cycle against a second server started
  with ``--no-auth`` (informational: what bearer-token checks cost).
* **interlock, raw httpx, sequenced** -- create, answer, then wait (which finds it
  answered): the HTTP work of a cycle without the wake-up (informational).
* **awaithumans, SDK** -- ``await_human(...)`` (its Python SDK; admin bearer token) in
  one task; the human completes with ``POST /api/tasks/{id}/complete`` from a logged-in
  dashboard session (cookie), as the dashboard's form does.  The SDK prints the task id
  in a stderr banner and returns only once the task is done, so the banner function is
  replaced by one that hands the id to the human's task (and prints nothing).
* **awaithumans, raw httpx** -- ``POST /api/tasks``, then ``GET /api/tasks/{id}/poll``
  (its long poll, the SDK's own call) while another task completes it.
* **awaithumans, raw httpx, sequenced** -- create, complete, then poll (which finds it
  completed): its HTTP work without the wake-up (informational).

awaithumans' long poll re-reads the task once a second on the server
(``asyncio.sleep(1)`` between reads), so a waiting agent learns of a completion up to a
second late; the sequenced rows show what each server costs per cycle without that.

Fan-out: ``--subscribers`` streams of ``GET /api/v1/events/stream`` (the human's token)
held by ``--sub-procs`` separate subscriber processes (httpx + httpx_sse, this file
run as ``python bench/http_roundtrip.py subscriber ...``); then ``--events`` requests are created
one at a time and each subscriber process stamps every stream's arrival of the
``created`` event with ``time.monotonic()`` (CLOCK_MONOTONIC, the same clock in every
process); latency is measured from the create call returning in the driver.  A second
pass with a minimal asyncio-socket subscriber (``--sub-client raw``) shows how much of
that is the client library.

* **bare Starlette floor, raw httpx** -- ``bench/starlette_floor.py`` under the same uvicorn:
  the raw-httpx cycle against three bare endpoints doing the same two SQLite commits
  (token check, insert + commit, long poll on an ``asyncio.Event``, update + commit). The
  floor for what a server with interlock's shape can do on this machine.

Targets: interlock >= 3x awaithumans' round-trip throughput; interlock's raw-httpx cycle
and its Python client's one-call cycle >= 0.6x the bare Starlette floor; one event to
1,000 SSE subscribers within 100 ms, and to 10,000 within 1 s.

Run:

    bash bench/run.sh http
    # or, in a venv with interlock[test], its server deps and 'awaithumans[server]==0.1.12':
    python bench/http_roundtrip.py [--seconds 3] [--reps 3] [--agents 16 [64 ...]] [--contenders "raw httpx" ...]
                         [--subscribers 1000 | --fanout-sizes 1 100 1000] [--sub-procs 2]
                         [--sub-client httpx raw] [--events 9] [--only roundtrip fanout]
                         [--no-awaithumans] [--py-spy DIR] [--workdir DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import functools
import importlib.util
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# This file is named like the standard library's `http` package, which httpx imports:
# keep its folder off the import path and load the shared helpers by file name.
SCRIPT = Path(__file__).resolve()
HERE = SCRIPT.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
_spec = importlib.util.spec_from_file_location("_common", HERE / "_common.py")
assert _spec is not None and _spec.loader is not None
_common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_common)
environment, median, paired, perf = _common.environment, _common.median, _common.paired, _common.perf
rounds, table, verdict = _common.rounds, _common.table, _common.verdict

import httpx  # noqa: E402  (after the path fix above)

DISTS = [
    "interlock",
    "awaithumans",
    "fastapi",
    "starlette",
    "uvicorn",
    "uvloop",
    "httptools",
    "sse-starlette",
    "httpx",
    "httpcore",
    "httpx-sse",
    "anyio",
    "pydantic",
    "sqlalchemy",
    "aiosqlite",
    "py-spy",
]
CREATE = {"asks": [{"type": "text", "prompt": "q"}], "to": "alice"}
ANSWER = {"answer": "x"}
OPERATOR = {"email": "op@example.com", "password": "bench-password-1", "is_operator": True, "display_name": "Op"}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def raise_nofile(want: int = 16384) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


# ---- servers ----------------------------------------------------------------


@dataclass
class Server:
    name: str
    url: str
    proc: subprocess.Popen[bytes]
    log: Path
    tokens: dict[str, str] = field(default_factory=dict)

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not become healthy in {timeout:.0f}s:\n{log.read_text()[-3000:]}")


def start_interlock(work: Path, *, auth: bool = True) -> Server:
    """`interlock serve` on a fresh SQLite file; tokens made with `interlock token create`."""
    name = "interlock" + ("" if auth else "-noauth")
    db = f"sqlite:///{work / (name + '.db')}"
    cli = [sys.executable, "-m", "interlock"]
    tokens: dict[str, str] = {}
    if auth:
        for who, flags in (("alice", ["--human"]), ("agent", ["--agent", "--owner", "alice"])):
            out = subprocess.run([*cli, "token", "create", who, *flags, "--db", db], capture_output=True, check=True)
            tokens[who] = out.stdout.decode().strip()
    port = free_port()
    log = work / f"{name}.log"
    args = [*cli, "serve", "--host", "127.0.0.1", "--port", str(port), "--db", db]
    args += ["--rate-limit", "0", "--max-streams", "0"]  # measured flat out, past any quota
    with open(log, "wb") as fh:
        proc = subprocess.Popen([*args, *([] if auth else ["--no-auth"])], stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    _wait_healthy(f"{url}/healthz", proc, log)
    return Server(name, url, proc, log, tokens)


def start_floor(work: Path) -> Server:
    """The bare Starlette floor (bench/starlette_floor.py) on a fresh SQLite file; the same
    token for the agent and the person."""
    port = free_port()
    log = work / "floor.log"
    token = uuid.uuid4().hex
    script = Path(__file__).with_name("starlette_floor.py")
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, str(script), str(work / "floor.db"), str(port), token],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    _wait_healthy(f"{url}/healthz", proc, log)
    return Server("floor", url, proc, log, {"agent": token, "alice": token})


def start_awaithumans(work: Path) -> Server:
    """`awaithumans dev` (its dev server) with its SQLite file, HOME pointed at a temporary
    directory (it writes a discovery file there); an operator user is made through its
    admin API and logged in, for the human's dashboard session."""
    home = work / "awaithumans-home"
    home.mkdir()
    exe = Path(sys.executable).with_name("awaithumans")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWAITHUMANS_")} | {"HOME": str(home)}
    db = home / "dev.db"
    log = work / "awaithumans.log"
    args = [str(exe), "dev", "--host", "127.0.0.1", "--port", str(port), "--db-path", str(db), "--log-level", "WARNING"]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=home)
    url = f"http://127.0.0.1:{port}"
    _wait_healthy(f"{url}/api/health", proc, log)
    admin = (home / "admin.token").read_text().strip()
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}) as c:
        c.post("/api/admin/users", json=OPERATOR).raise_for_status()
    with httpx.Client(base_url=url) as c:
        c.post(
            "/api/auth/login", json={"email": OPERATOR["email"], "password": OPERATOR["password"]}
        ).raise_for_status()
        cookie = dict(c.cookies)
    return Server("awaithumans", url, proc, log, {"admin": admin, "cookie": json.dumps(cookie)})


# ---- round trips --------------------------------------------------------------

Cycle = Callable[[], Awaitable[None]]


@dataclass
class Contender:
    name: str
    server: Server
    # setup() -> (cycle, teardown): the clients of one window, shared by its agents;
    # setup and teardown are not timed
    setup: Callable[[], Awaitable[tuple[Cycle, Callable[[], Awaitable[None]]]]]
    info: bool = False  # informational: not held to the target


def _limits() -> httpx.Limits:
    return httpx.Limits(max_connections=512, max_keepalive_connections=512)


def _check(r: httpx.Response, *codes: int) -> httpx.Response:
    if r.status_code not in codes:
        raise RuntimeError(f"{r.request.method} {r.request.url} -> {r.status_code}: {r.text[:300]}")
    return r


def interlock_raw(server: Server, *, sequenced: bool = False) -> Callable[[], Awaitable[Any]]:
    async def setup() -> tuple[Cycle, Callable[[], Awaitable[None]]]:
        def client(who: str) -> httpx.AsyncClient:
            token = server.tokens.get(who)
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            return httpx.AsyncClient(base_url=f"{server.url}/api/v1", headers=headers, limits=_limits(), timeout=60)

        agent, human = client("agent"), client("alice")

        async def answer(rid: str) -> None:
            _check(await human.post(f"/requests/{rid}/answer", json=ANSWER), 200)

        async def wait(rid: str) -> None:
            body = _check(await agent.get(f"/requests/{rid}/wait", params={"timeout": 30}), 200).json()
            if body["status"] != "answered":
                raise RuntimeError(f"request {rid} ended {body['status']}")

        async def cycle() -> None:
            rid = _check(await agent.post("/requests", json=CREATE), 201).json()["id"]
            if sequenced:
                await answer(rid)
                await wait(rid)
                return
            answering = asyncio.create_task(answer(rid))
            await wait(rid)
            await answering

        async def teardown() -> None:
            await agent.aclose()
            await human.aclose()

        return cycle, teardown

    return setup


def interlock_client(server: Server) -> Callable[[], Awaitable[Any]]:
    async def setup() -> tuple[Cycle, Callable[[], Awaitable[None]]]:
        import interlock
        from interlock import Text

        agent = await interlock.connect(server.url, token=server.tokens["agent"]).open()
        human = await interlock.connect(server.url, token=server.tokens["alice"]).open()

        async def answer(rid: str) -> None:
            if not await human.resolve(rid, "x"):
                raise RuntimeError(f"resolve({rid}) returned False")

        async def cycle() -> None:
            req = await agent.create(Text("q"))
            answering = asyncio.create_task(answer(req.id))
            response = await agent.wait(req.id)
            await answering
            if response.answers.get("text") != "x":
                raise RuntimeError(f"unexpected answer {response!r}")

        async def teardown() -> None:
            await agent.aclose()
            await human.aclose()

        return cycle, teardown

    return setup


def interlock_ask(server: Server) -> Callable[[], Awaitable[Any]]:
    """`ask()` on the remote broker: one call, `POST /requests?wait=30`, that answers once
    the request settles. The human answers each request as its `created` event arrives on
    one event stream (as an inbox would)."""

    async def setup() -> tuple[Cycle, Callable[[], Awaitable[None]]]:
        import interlock
        from interlock import Text

        agent = await interlock.connect(server.url, token=server.tokens["agent"]).open()
        human = await interlock.connect(server.url, token=server.tokens["alice"]).open()

        answering: set[asyncio.Task[bool]] = set()
        # Where the inbox starts reading, taken before any cycle creates a request: taken
        # in the inbox's own task, it could come after the first cycle's `created` event,
        # which the inbox then never saw, and that cycle waited for an answer forever.
        start = await human.last_event_id()

        async def inbox() -> None:
            async for event in human.events(after=start, follow=True):
                if event.type == "created" and event.request_id is not None:
                    task = asyncio.create_task(human.resolve(event.request_id, "x"))
                    answering.add(task)
                    task.add_done_callback(answering.discard)

        following = asyncio.create_task(inbox())

        async def cycle() -> None:
            if await agent.ask(Text("q")) != "x":
                raise RuntimeError("unexpected answer")

        async def teardown() -> None:
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following
            await agent.aclose()
            await human.aclose()

        return cycle, teardown

    return setup


def _ah_models() -> tuple[Any, Any, dict[str, Any]]:
    from pydantic import BaseModel

    class Question(BaseModel):
        question: str = "q"

    class Reply(BaseModel):
        answer: str

    from awaithumans.forms import extract_form

    body = {
        "task": "q",
        "payload": Question().model_dump(mode="json"),
        "payload_schema": Question.model_json_schema(),
        "response_schema": Reply.model_json_schema(),
        "form_definition": extract_form(Reply).model_dump(mode="json"),
        "timeout_seconds": 600,
        "assign_to": None,
        "notify": None,
        "verifier_config": None,
        "redact_payload": False,
        "task_metadata": None,
    }
    return Question, Reply, body


_on_task: contextvars.ContextVar[Callable[[str], None]] = contextvars.ContextVar("on_task")


def _banner(*, base_url: str, task_id: str, timeout_seconds: int) -> None:
    """Stands in for awaithumans.client._print_waiting_banner: hands the new task's id
    to the human's task (the SDK returns only once the task is done)."""
    _on_task.get()(task_id)


def _ah_human(server: Server) -> httpx.AsyncClient:
    cookies = json.loads(server.tokens["cookie"])
    return httpx.AsyncClient(base_url=server.url, cookies=cookies, limits=_limits(), timeout=60)


async def _ah_complete(human: httpx.AsyncClient, tid: str) -> None:
    r = _check(await human.post(f"/api/tasks/{tid}/complete", json={"response": {"answer": "x"}}), 200)
    if r.json()["status"] != "completed":
        raise RuntimeError(f"task {tid} is {r.json()['status']} after complete")


def awaithumans_sdk(server: Server) -> Callable[[], Awaitable[Any]]:
    async def setup() -> tuple[Cycle, Callable[[], Awaitable[None]]]:
        import awaithumans.client
        from awaithumans import await_human

        awaithumans.client._print_waiting_banner = _banner  # type: ignore[assignment]
        question, reply, _ = _ah_models()
        human = _ah_human(server)

        async def cycle() -> None:
            answering: list[asyncio.Task[None]] = []
            _on_task.set(lambda tid: answering.append(asyncio.create_task(_ah_complete(human, tid))))
            result = await await_human(
                task="q",
                payload_schema=question,
                payload=question(),
                response_schema=reply,
                timeout_seconds=600,
                idempotency_key=uuid.uuid4().hex,
                server_url=server.url,
                api_key=server.tokens["admin"],
            )
            await answering[0]
            if result.answer != "x":
                raise RuntimeError(f"unexpected answer {result!r}")

        async def teardown() -> None:
            await human.aclose()

        return cycle, teardown

    return setup


def awaithumans_raw(server: Server, *, sequenced: bool = False) -> Callable[[], Awaitable[Any]]:
    async def setup() -> tuple[Cycle, Callable[[], Awaitable[None]]]:
        _, _, template = _ah_models()
        headers = {"Authorization": f"Bearer {server.tokens['admin']}"}
        agent = httpx.AsyncClient(base_url=server.url, headers=headers, limits=_limits(), timeout=60)
        human = _ah_human(server)

        async def wait(tid: str) -> None:
            while True:  # the SDK's loop: reconnect while the poll times out non-terminal
                body = _check(await agent.get(f"/api/tasks/{tid}/poll", params={"timeout": 25}), 200).json()
                if body["status"] == "completed":
                    return
                if body["status"] in ("timed_out", "cancelled", "verification_exhausted"):
                    raise RuntimeError(f"task {tid} ended {body['status']}")

        async def cycle() -> None:
            body = template | {"idempotency_key": uuid.uuid4().hex}
            tid = _check(await agent.post("/api/tasks", json=body), 201).json()["id"]
            if sequenced:
                await _ah_complete(human, tid)
                await wait(tid)
                return
            answering = asyncio.create_task(_ah_complete(human, tid))
            await wait(tid)
            await answering

        async def teardown() -> None:
            await agent.aclose()
            await human.aclose()

        return cycle, teardown

    return setup


@dataclass
class Window:
    rate: float  # cycles/s
    cycles: int
    seconds: float
    server_cpu_ms: float  # server CPU per cycle
    client_cpu_ms: float  # this process' CPU per cycle (all clients of the cycle)
    errors: int = 0  # cycles that failed (an HTTP error, or no answer within CYCLE_TIMEOUT)
    first_error: str = ""


CYCLE_TIMEOUT = 35.0  # longer than one long poll (30 s), so only a lost wake-up trips it


async def window(c: Contender, agents: int, seconds: float) -> Window:
    cycle, teardown = await c.setup()
    try:
        await cycle()  # connections made, caches warm
        count = errors = 0
        first_error = ""
        t_end = perf() + seconds

        async def worker() -> None:
            nonlocal count, errors, first_error
            while perf() < t_end:
                try:
                    async with asyncio.timeout(CYCLE_TIMEOUT):
                        await cycle()
                except (Exception, TimeoutError) as exc:  # a failed cycle is reported, not counted
                    errors += 1
                    first_error = first_error or f"{type(exc).__name__}: {exc}"[:300]
                    continue
                count += 1

        cpu0, own0, t0 = c.server.cpu(), time.process_time(), perf()
        await asyncio.gather(*(worker() for _ in range(agents)))
        elapsed = perf() - t0
        cpu1, own1 = c.server.cpu(), time.process_time()
    finally:
        await teardown()
    per = max(count, 1)
    return Window(
        count / elapsed, count, elapsed, 1000 * (cpu1 - cpu0) / per, 1000 * (own1 - own0) / per, errors, first_error
    )


async def roundtrips(contenders: list[Contender], args: argparse.Namespace) -> dict[str, dict[int, list[Window]]]:
    modes = [1, *args.agents]
    results: dict[str, dict[int, list[Window]]] = {c.name: {m: [] for m in modes} for c in contenders}
    by_name = {c.name: c for c in contenders}
    print(f">> warm-up: each contender {args.warmup:.1f}s serial", file=sys.stderr, flush=True)
    for c in contenders:
        await window(c, 1, args.warmup)
    for r, order in enumerate(rounds(list(by_name), args.reps), 1):
        for agents in modes:
            for name in order:
                w = await window(by_name[name], agents, args.seconds)
                results[name][agents].append(w)
                print(
                    f"   rep {r}/{args.reps} agents={agents:<3} {name:<40} {w.rate:8.1f}/s ({w.cycles} cycles"
                    + (f", {w.errors} failed: {w.first_error}" if w.errors else "")
                    + ")",
                    file=sys.stderr,
                    flush=True,
                )
    return results


# ---- fan-out -------------------------------------------------------------------

CREATED_RAW = re.compile(rb"id: (\d+)\r?\nevent: created\r?\n")


class Arrivals:
    """Per created-event id, when each stream of this process received it."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.times: dict[str, list[float]] = defaultdict(list)
        self.order: list[str] = []
        self.complete: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.reported = 0
        self.new = asyncio.Event()

    def arrived(self, event_id: str, at: float) -> None:
        times = self.times[event_id]
        if not times:
            self.order.append(event_id)
            self.new.set()
        times.append(at)
        if len(times) == self.count:
            self.complete[event_id].set()

    async def next_report(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while len(self.order) <= self.reported:
                    self.new.clear()
                    await self.new.wait()
        if len(self.order) <= self.reported:
            return {"id": None, "times": []}
        event_id = self.order[self.reported]
        self.reported += 1
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.0)):
                await self.complete[event_id].wait()
        return {"id": event_id, "times": self.times.pop(event_id)}


async def _stream_httpx(
    client: httpx.AsyncClient, arrivals: Arrivals, connected: Callable[[], None], opening: asyncio.Semaphore
) -> None:
    from httpx_sse import aconnect_sse

    async with contextlib.AsyncExitStack() as stack:
        async with opening:
            source = await stack.enter_async_context(aconnect_sse(client, "GET", "/api/v1/events/stream"))
            source.response.raise_for_status()
        connected()
        async for sse in source.aiter_sse():
            if sse.event == "created":
                arrivals.arrived(sse.id, time.monotonic())


async def _stream_raw(
    url: str, token: str | None, arrivals: Arrivals, connected: Callable[[], None], opening: asyncio.Semaphore
) -> None:
    """A minimal SSE reader on an asyncio socket: just finds `id: N\\nevent: created`."""
    host, port = url.removeprefix("http://").split(":")
    async with opening:  # a few hundred opening at a time: within the server's listen backlog
        reader, writer = await asyncio.open_connection(host, int(port))
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        head = f"GET /api/v1/events/stream HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n{auth}\r\n"
        writer.write(head.encode())
        status = await reader.readline()
        if b" 200 " not in status:
            raise RuntimeError(f"stream refused: {status!r}")
        await reader.readuntil(b"\r\n\r\n")
    connected()
    tail = b""
    while chunk := await reader.read(65536):
        now = time.monotonic()
        buf = tail + chunk
        for m in CREATED_RAW.finditer(buf):
            arrivals.arrived(m.group(1).decode(), now)
        tail = buf[-64:]
        if CREATED_RAW.search(tail):
            tail = b""


async def subscriber(url: str, token: str | None, count: int, kind: str) -> None:
    """A subscriber process: `count` streams; reports arrival times on request (stdin)."""
    raise_nofile(count + 256)
    arrivals = Arrivals(count)
    connected_n = 0
    all_connected = asyncio.Event()

    def connected() -> None:
        nonlocal connected_n
        connected_n += 1
        if connected_n == count:
            all_connected.set()

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    timeout = httpx.Timeout(60.0, read=None)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=timeout) as client:
        opening = asyncio.Semaphore(256)
        if kind == "httpx":
            tasks = [asyncio.create_task(_stream_httpx(client, arrivals, connected, opening)) for _ in range(count)]
        else:
            tasks = [asyncio.create_task(_stream_raw(url, token, arrivals, connected, opening)) for _ in range(count)]
        waiter = asyncio.create_task(all_connected.wait())
        await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED, timeout=max(120, count / 20))
        if not all_connected.is_set():
            failed = [t.exception() for t in tasks if t.done() and t.exception() is not None]
            print(json.dumps({"error": f"{connected_n}/{count} connected; {failed[:1]!r}"}), flush=True)
            return
        print(json.dumps({"ready": count}), flush=True)
        loop = asyncio.get_running_loop()
        while line := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
            if line == "quit":
                break
            cmd, timeout_s = line.split()
            assert cmd == "next"
            reply = await arrivals.next_report(float(timeout_s))
            print(json.dumps(reply | {"cpu": time.process_time()}), flush=True)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@dataclass
class FanoutResult:
    subscribers: int
    procs: int
    client: str
    connect_s: float
    events: list[dict[str, float]]  # per event: first/p50/p99/last ms after the create call returned, received


async def fanout(
    server: Server,
    subscribers: int,
    procs: int,
    events: int,
    client: str,
    profile: Callable[[], contextlib.AbstractAsyncContextManager[Any]] | None = None,
) -> FanoutResult:
    shares = [subscribers // procs + (1 if i < subscribers % procs else 0) for i in range(procs)]
    token = server.tokens.get("alice")
    t_connect = perf()
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(SCRIPT),
            "subscriber",
            server.url,
            token or "-",
            str(n),
            client,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=64 * 1024 * 1024,  # a report holds every stream's arrival time
        )
        for n in shares
        if n
    ]

    async def ask(child: asyncio.subprocess.Process, line: str | None) -> dict[str, Any]:
        assert child.stdin is not None and child.stdout is not None
        if line is not None:
            child.stdin.write(line.encode() + b"\n")
            await child.stdin.drain()
        out = await child.stdout.readline()
        if not out:
            raise RuntimeError("a subscriber process exited")
        reply: dict[str, Any] = json.loads(out)
        if "error" in reply:
            raise RuntimeError(f"subscriber: {reply['error']}")
        return reply

    rows: list[dict[str, float]] = []
    try:
        await asyncio.gather(*(ask(ch, None) for ch in children))
        connect_s = perf() - t_connect
        headers = {"Authorization": f"Bearer {server.tokens['agent']}"} if "agent" in server.tokens else {}
        child_cpu = [0.0] * len(children)
        async with (
            httpx.AsyncClient(base_url=f"{server.url}/api/v1", headers=headers, timeout=60) as agent,
            (profile or contextlib.nullcontext)(),
        ):
            for i in range(events + 1):  # the first one is a warm-up (every stream surely subscribed)
                await asyncio.sleep(0.3)
                cpu0 = server.cpu()
                t_call = time.monotonic()
                _check(await agent.post("/requests", json=CREATE), 201)
                t_ret = time.monotonic()
                reports = await asyncio.gather(*(ask(ch, "next 10") for ch in children))
                server_cpu = server.cpu() - cpu0
                subs_cpu = sum(r["cpu"] - c for r, c in zip(reports, child_cpu, strict=True))
                child_cpu = [r["cpu"] for r in reports]
                ids = {r["id"] for r in reports}
                if len(ids) != 1 or None in ids:
                    raise RuntimeError(f"subscribers saw different events: {ids}")
                times = sorted(t for r in reports for t in r["times"])
                if i == 0:
                    continue
                ms = [1000 * (t - t_ret) for t in times]
                rows.append(
                    {
                        "received": len(times),
                        "call_ms": 1000 * (t_ret - t_call),
                        "first_ms": ms[0],
                        "p50_ms": ms[len(ms) // 2],
                        "p99_ms": ms[min(len(ms) - 1, int(len(ms) * 0.99))],
                        "last_ms": ms[-1],
                        "server_cpu_ms": 1000 * server_cpu,
                        "subscribers_cpu_ms": 1000 * subs_cpu,
                    }
                )
                print(
                    f"   fan-out {subscribers} ({client}, {procs} proc) event {i}: received {len(times)}, "
                    f"last {ms[-1]:.1f} ms after the call returned",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        for ch in children:
            if ch.returncode is None and ch.stdin is not None:
                with contextlib.suppress(OSError):
                    ch.stdin.write(b"quit\n")
                    await ch.stdin.drain()
        for ch in children:
            try:
                await asyncio.wait_for(ch.wait(), 15)
            except TimeoutError:
                ch.kill()
                await ch.wait()
    return FanoutResult(subscribers, procs, client, connect_s, rows)


# ---- profiling ----------------------------------------------------------------


class PySpy:
    """`py-spy record` of a server process for one phase; summarised as top functions."""

    def __init__(self, out_dir: Path | None) -> None:
        self.out_dir = out_dir
        self.exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        self.summaries: dict[str, str] = {}

    @contextlib.asynccontextmanager
    async def record(self, server: Server, phase: str) -> AsyncIterator[None]:
        if self.out_dir is None:
            yield
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        raw = self.out_dir / f"{server.name}-{phase}.txt"
        proc = await asyncio.create_subprocess_exec(
            self.exe,
            "record",
            "--pid",
            str(server.proc.pid),
            "--format",
            "raw",
            "--rate",
            "250",
            "--output",
            str(raw),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        await asyncio.sleep(0.5)
        try:
            yield
        finally:
            proc.send_signal(2)
            await proc.wait()
            if raw.exists():
                self.summaries[f"{server.name} {phase}"] = summarize_stacks(raw)


def summarize_stacks(path: Path, top: int = 20) -> str:
    """Top frames by inclusive and by self share of the busy samples (py-spy leaves out
    idle ones). Frames up to the event loop's `Runner.run` are dropped; a sample whose
    leaf is `Runner.run` is time in uvloop's C code (loop, socket reads and writes)."""
    incl: dict[str, int] = defaultdict(int)
    own: dict[str, int] = defaultdict(int)
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = [_frame(f) for f in stack.split(";")]
        cut = max((i for i, f in enumerate(frames) if f.startswith("Runner.run ")), default=-1)
        frames = frames[cut + 1 :] or ["(uvloop C code: loop, sockets)"]
        count = int(n)
        total += count
        own[frames[-1]] += count
        for f in set(frames):
            incl[f] += count
    if not total:
        return "(no busy samples)"
    lines = [f"busy samples: {total}", "", "inclusive:"]
    lines += [f"  {100 * v / total:5.1f}%  {k}" for k, v in sorted(incl.items(), key=lambda kv: -kv[1])[:top]]
    lines += ["", "self:"]
    lines += [f"  {100 * v / total:5.1f}%  {k}" for k, v in sorted(own.items(), key=lambda kv: -kv[1])[:top]]
    return "\n".join(lines)


def _frame(f: str) -> str:
    # "func (path/to/module.py:123)" -> "func (module.py)"
    name, _, where = f.partition(" (")
    where = where.rstrip(")").rsplit(":", 1)[0]
    parts = where.split("/site-packages/", 1)[-1].split("/src/", 1)[-1]
    return f"{name} ({parts})"


# ---- report -------------------------------------------------------------------


def report_roundtrips(
    results: dict[str, dict[int, list[Window]]], contenders: list[Contender], agents: list[int]
) -> bool:
    modes = [1, *agents]
    print("## Round trips: create -> answer from another task -> the waiting client woken\n")
    rows = []
    for c in contenders:
        for m in modes:
            ws = results[c.name][m]
            rates = [w.rate for w in ws]
            rows.append(
                [
                    c.name + (" *" if c.info else ""),
                    m,
                    median(rates),
                    min(rates),
                    max(rates),
                    1000 / median(rates) * m,
                    median([w.server_cpu_ms for w in ws]),
                    median([w.client_cpu_ms for w in ws]),
                    sum(w.errors for w in ws),
                ]
            )
    print(
        table(
            [
                "contender",
                "agents",
                "cycles/s (median)",
                "min",
                "max",
                "ms per cycle per agent",
                "server CPU ms/cycle",
                "driver CPU ms/cycle",
                "failed cycles",
            ],
            rows,
        )
    )
    print("\n`*` informational. CPU per cycle from /proc (server) and process_time (this driver).")
    for c in contenders:
        for m in modes:
            errs = [w.first_error for w in results[c.name][m] if w.errors]
            if errs:
                print(f"\nfailed cycles of {c.name}, {m} agents, first: `{errs[0]}`")
    print()

    pairs = [
        ("interlock, raw httpx", "awaithumans, raw httpx", True),
        ("interlock, Python client", "awaithumans, SDK", True),
        ("interlock, raw httpx, sequenced", "awaithumans, raw httpx, sequenced", False),
    ]
    ok = True
    rows = []
    for a, b, held in pairs:
        if a not in results or b not in results:
            continue
        for m in modes:
            ratio = paired([w.rate for w in results[a][m]], [w.rate for w in results[b][m]])
            met = ratio >= 3.0
            if held:
                ok &= met
            rows.append([a, b, m, f"{ratio:.1f}x", verdict(met) + ("" if held else " (informational)")])
    if rows:
        print("### Target: interlock >= 3x awaithumans' round-trip throughput\n")
        print(table(["interlock", "awaithumans", "agents", "ratio (median of per-round)", "verdict"], rows))
        print()
    floor = "bare Starlette floor, raw httpx"
    rows = []
    held_rows = ("interlock, raw httpx", "interlock, Python client")
    for a in (*held_rows, "interlock, Python client, create + wait", "interlock, raw httpx, --no-auth"):
        if a not in results or floor not in results:
            continue
        for m in modes:
            ratio = paired([w.rate for w in results[a][m]], [w.rate for w in results[floor][m]])
            met, held = ratio >= 0.6, a in held_rows
            if held:
                ok &= met
            rows.append([a, m, f"{ratio:.2f}x", verdict(met) + ("" if held else " (informational)")])
    if rows:
        print("### Target: interlock's cycle >= 0.6x a bare Starlette endpoint doing the same two SQLite commits\n")
        print(table(["interlock", "agents", "x floor (median of per-round)", "verdict"], rows))
        print()
    return ok


def fanout_target(subscribers: int) -> float | None:
    """The bound on the last arrival, in ms: 100 ms for 1,000 subscribers, 1 s for 10,000."""
    if subscribers >= 10_000:
        return 1000.0
    if subscribers >= 1000:
        return 100.0
    return None


def report_fanout(results: list[FanoutResult]) -> bool:
    print("## Fan-out: one `created` event to every SSE subscriber\n")
    rows = []
    ok = True
    for r in results:
        if not r.events:
            continue
        last = [e["last_ms"] for e in r.events]
        target = fanout_target(r.subscribers)
        met = target is not None and median(last) <= target
        # Held: the lean subscribers, whose own CPU leaves the server most of the two
        # cores; with httpx + httpx_sse subscribers on the same machine the clients'
        # CPU per event exceeds the server's (informational).
        if target is not None and r.client == "raw":
            ok &= met
        rows.append(
            [
                r.subscribers,
                f"{r.client}, {r.procs} proc",
                len(r.events),
                f"{min(e['received'] for e in r.events)}",
                median([e["call_ms"] for e in r.events]),
                median([e["first_ms"] for e in r.events]),
                median([e["p50_ms"] for e in r.events]),
                median([e["p99_ms"] for e in r.events]),
                median(last),
                max(last),
                median([e["server_cpu_ms"] for e in r.events]),
                median([e["subscribers_cpu_ms"] for e in r.events]),
                f"{r.connect_s:.1f}",
                "-"
                if target is None
                else f"<= {target:,.0f} ms: {verdict(met)}" + ("" if r.client == "raw" else " (informational)"),
            ]
        )
    print(
        table(
            [
                "subscribers",
                "subscriber client",
                "events",
                "min received",
                "create call ms",
                "first ms",
                "p50 ms",
                "p99 ms",
                "all (median) ms",
                "all (max) ms",
                "server CPU ms/event",
                "subscribers CPU ms/event",
                "connect s",
                "target (all received)",
            ],
            rows,
        )
    )
    print(
        "\nTimes are after the create call returned in the driver (medians over the events; `all` = the last"
        " subscriber); `connect s` = time to open every stream.\n"
    )
    return ok


async def main_async(args: argparse.Namespace, work: Path, spy: PySpy) -> dict[str, Any]:
    out: dict[str, Any] = {}
    servers: list[Server] = []
    try:
        il = start_interlock(work)
        servers.append(il)
        if "roundtrip" in args.only:
            il_open = start_interlock(work, auth=False)
            servers.append(il_open)
            contenders = [
                Contender("interlock, raw httpx", il, interlock_raw(il)),
                Contender("interlock, Python client", il, interlock_ask(il)),
                Contender("interlock, Python client, create + wait", il, interlock_client(il), True),
                Contender("interlock, raw httpx, --no-auth", il_open, interlock_raw(il_open), True),
                Contender("interlock, raw httpx, sequenced", il, interlock_raw(il, sequenced=True), True),
            ]
            floor = start_floor(work)
            servers.append(floor)
            contenders.append(Contender("bare Starlette floor, raw httpx", floor, interlock_raw(floor), True))
            if not args.no_awaithumans:
                ah = start_awaithumans(work)
                servers.append(ah)
                contenders += [
                    Contender("awaithumans, raw httpx", ah, awaithumans_raw(ah)),
                    Contender("awaithumans, SDK", ah, awaithumans_sdk(ah)),
                    Contender(
                        "awaithumans, raw httpx, sequenced",
                        ah,
                        awaithumans_raw(ah, sequenced=True),
                        True,
                    ),
                ]
            if args.contenders:
                contenders = [c for c in contenders if any(k in c.name for k in args.contenders)]
            results = await roundtrips(contenders, args)
            out["roundtrip"] = {
                name: {str(m): [w.__dict__ for w in ws] for m, ws in by_mode.items()}
                for name, by_mode in results.items()
            }
            out["roundtrip_ok"] = report_roundtrips(results, contenders, args.agents)
            if args.py_spy:  # profiled windows of their own, after the measured ones
                named = {c.name: c for c in contenders}
                profiled = (("interlock, raw httpx", "roundtrip"), ("interlock, Python client", "python-client-ask"))
                for name, tag in profiled:
                    if name not in named:
                        continue
                    for agents in (1, args.agents[0]):
                        async with spy.record(il, f"{tag}-{agents}-agents"):
                            await window(named[name], agents, args.seconds)
        if "fanout" in args.only:
            fan: list[FanoutResult] = []
            for n in args.fanout_sizes:
                for client in args.sub_client:
                    profile = None
                    if args.py_spy and n == max(args.fanout_sizes):
                        profile = functools.partial(spy.record, il, f"fanout-{n}-{client}")
                    fan.append(await fanout(il, n, args.sub_procs, args.events, client, profile))
            out["fanout"] = [r.__dict__ for r in fan]
            out["fanout_ok"] = report_fanout(fan)
    finally:
        for s in servers:
            s.stop()
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "subscriber":
        _, _, url, token, count, kind = sys.argv
        asyncio.run(subscriber(url, None if token == "-" else token, int(count), kind))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seconds", type=float, default=3.0, help="measured window per contender per repetition")
    p.add_argument("--warmup", type=float, default=1.0, help="one serial warm-up window per contender")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--agents", type=int, nargs="+", default=[16], help="concurrent agents (one rate per count)")
    p.add_argument("--contenders", nargs="+", default=None, help="only contenders whose name contains one of these")
    p.add_argument("--subscribers", type=int, default=1000, help="(same as --fanout-sizes N)")
    p.add_argument("--fanout-sizes", type=int, nargs="+", default=None, help="subscriber counts to measure")
    p.add_argument("--sub-procs", type=int, default=2, help="subscriber processes sharing the streams")
    p.add_argument("--sub-client", nargs="+", choices=["httpx", "raw"], default=["httpx", "raw"])
    p.add_argument("--events", type=int, default=9, help="measured events per fan-out size")
    p.add_argument("--only", nargs="+", choices=["roundtrip", "fanout"], default=["roundtrip", "fanout"])
    p.add_argument("--no-awaithumans", action="store_true", help="interlock only")
    p.add_argument("--py-spy", type=Path, default=None, help="record the interlock server with py-spy into DIR")
    p.add_argument("--json", type=Path, default=None, help="write the raw samples here")
    p.add_argument(
        "--workdir", type=Path, default=None, help="a new directory to keep the databases and server logs in"
    )
    args = p.parse_args()
    args.fanout_sizes = args.fanout_sizes or [args.subscribers]
    nofile = raise_nofile()
    print("```")
    print(environment(DISTS))
    print(f"open files limit {nofile}; servers: uvicorn on 127.0.0.1, one process each, SQLite files in a temp dir")
    print("```\n")
    with tempfile.TemporaryDirectory(prefix="interlock-bench-http-") as tmp:
        work = Path(tmp)
        if args.workdir is not None:  # keep the databases and server logs
            work = args.workdir
            work.mkdir(parents=True)
        spy = PySpy(args.py_spy)
        out = asyncio.run(main_async(args, work, spy))
    for phase, summary in spy.summaries.items():
        print(f"### py-spy: {phase}\n\n```\n{summary}\n```\n")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
