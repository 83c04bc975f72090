"""Real `interlock serve` processes, for the tests whose point is the process.

Each server binds port 0 and the test reads the address it prints. A port the test picked
and the server bound afterwards could be taken in between by another test's server, whose
/healthz would then answer in this one's place (and the test would fail later, once that
other server had stopped).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import queue
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx

INTERLOCK = [sys.executable, "-m", "interlock"]
START_BOUND = 60  # seconds: the most a server may take to start (imports, migrations) on a busy machine
STOP_BOUND = 20  # seconds: the most it may take to stop after SIGTERM
SERVING = re.compile(r" serving (http://\S+) on ")
"""The banner line of a server, and the address it serves at (group 1)."""


def refused_at_start(store: str, env: Mapping[str, str]) -> str:
    """`interlock serve` on `store` in a process of its own (uvicorn runs the start-up),
    refused with exit code 4 and no traceback: its one error line."""
    serving = subprocess.run(
        [*INTERLOCK, "serve", "--port", "0", "--db", store],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=START_BOUND,
    )
    assert serving.returncode == 4, serving.stderr
    assert "Traceback" not in serving.stderr
    assert "startup failed" not in serving.stderr  # uvicorn's own line, beside the one that says why
    assert not SERVING.search(serving.stderr), serving.stderr  # no banner claims it serves
    [line] = [line for line in serving.stderr.splitlines() if line.startswith("error: ")]
    return line


@dataclass
class Served:
    """A running `interlock serve`: its address, its process and what it has printed so far."""

    url: str
    proc: asyncio.subprocess.Process
    printed: list[str] = field(default_factory=list)

    @property
    def stderr(self) -> str:
        return "".join(self.printed)


@contextlib.asynccontextmanager
async def serve(
    *args: str, env: Mapping[str, str] | None = None, cwd: Path | str | None = None, port: int = 0
) -> AsyncIterator[Served]:
    """`interlock serve --port 0 ARGS`, healthy; stopped (SIGTERM, bounded) after. A `port`
    is for a server started again where one stopped (its clients reconnect to it)."""
    async with serve_many(1, *args, env=env, cwd=cwd, port=port) as [served]:
        yield served


@contextlib.asynccontextmanager
async def serve_many(
    count: int, *args: str, env: Mapping[str, str] | None = None, cwd: Path | str | None = None, port: int = 0
) -> AsyncIterator[list[Served]]:
    """`count` servers with the same ARGS (nodes on one store), started side by side."""
    procs: list[asyncio.subprocess.Process] = []
    readers: list[asyncio.Task[None]] = []
    try:
        for _ in range(count):
            procs.append(
                await asyncio.create_subprocess_exec(
                    *INTERLOCK,
                    "serve",
                    "--port",
                    str(port),
                    *args,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.PIPE,
                    env=None if env is None else dict(env),
                    cwd=cwd,
                )
            )
        started = []
        for proc in procs:
            assert proc.stderr is not None
            printed: list[str] = []
            with anyio.fail_after(START_BOUND):
                url = await _announced(proc.stderr, printed)
            readers.append(asyncio.create_task(_keep_reading(proc.stderr, printed)))  # a full pipe stalls a server
            started.append(Served(url, proc, printed))
        for served in started:
            await _until_healthy(served)
        yield started
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.terminate()
        with anyio.fail_after(STOP_BOUND):
            for proc in procs:
                await proc.wait()
            for reader in readers:
                await reader  # what each printed while stopping, up to its end


async def _announced(stream: asyncio.StreamReader, printed: list[str]) -> str:
    while True:
        line = (await stream.readline()).decode()
        if not line:
            raise AssertionError("interlock serve ended before serving:\n" + "".join(printed))
        printed.append(line)
        if found := SERVING.search(line):
            return found.group(1)


async def _keep_reading(stream: asyncio.StreamReader, printed: list[str]) -> None:
    while line := await stream.readline():
        printed.append(line.decode())


async def _until_healthy(served: Served) -> None:
    """The socket listens before the address is printed; the app answers once the store is open."""
    with anyio.fail_after(START_BOUND):
        async with httpx.AsyncClient() as client:
            while True:
                if served.proc.returncode is not None:
                    raise AssertionError(f"interlock serve exited with {served.proc.returncode}:\n{served.stderr}")
                try:
                    if (await client.get(f"{served.url}/healthz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await anyio.sleep(0.02)  # the store is still opening: poll again (bounded above)


DATED = re.compile(r"^(?P<at>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}[+-]\d{4}) (?P<level>[A-Z]+):? ")
"""A line serve, worker or deliver logs: its time and level first."""

SIGNIN_LINK = re.compile(r"(http://\S+/signin/link\?code=\S+)")
"""A one-time sign-in link, as `interlock serve` prints it to a terminal (group 1)."""
_COLOUR = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # a terminal's colours and styles


@contextlib.contextmanager
def on_a_terminal(
    command: Sequence[str], *, cwd: Path | str, env: Mapping[str, str], bound: float = START_BOUND
) -> Iterator[tuple[subprocess.Popen[bytes], Callable[[], str]]]:
    """`command` with its stderr on a pseudo-terminal, as a person runs it in a shell: the
    process, and a function that gives the next line it printed there, its colours taken
    out ('' once it has ended), waiting at most `bound` seconds. What it prints is read as
    it comes (a terminal nobody reads would stall it); it is killed on leaving."""
    main, side = pty.openpty()
    proc = subprocess.Popen(command, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stderr=side)
    os.close(side)
    printed: queue.Queue[str] = queue.Queue()
    terminal = open(main, "rb", buffering=0)  # noqa: SIM115 (closed below, once its reader is done)

    def read() -> None:
        for line in _terminal_lines(terminal):
            printed.put(line)
        printed.put("")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield proc, lambda: printed.get(timeout=bound)
    finally:
        proc.kill()
        proc.wait(STOP_BOUND)
        reader.join(STOP_BOUND)  # the terminal reads as ended once the process has
        terminal.close()


def _terminal_lines(terminal: Any) -> Iterator[str]:
    buffered = b""
    while True:
        try:
            chunk = terminal.read(4096)
        except OSError:  # EIO: the process has ended and nothing holds the terminal open
            chunk = b""
        if not chunk:
            if buffered:
                yield _COLOUR.sub("", buffered.decode(errors="replace"))
            return
        buffered += chunk
        *whole, buffered = buffered.split(b"\n")
        for line in whole:
            yield _COLOUR.sub("", line.decode(errors="replace")).rstrip("\r") + "\n"
