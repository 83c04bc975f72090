"""Helpers for the PostgreSQL tests: admin SQL, real `interlock serve` nodes, child processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator, Sequence

import anyio
import httpx

PG_SERVER = "postgresql://postgres@127.0.0.1:5432"
INTERLOCK = [sys.executable, "-m", "interlock"]
BOUND = 20  # seconds: the most any single wait on another process may take


def database_of(url: str) -> str:
    """The database a URL names."""
    return url.rsplit("/", 1)[1].split("?", 1)[0]


def psql(sql: str, database: str = "postgres") -> str:
    done = subprocess.run(
        ["psql", f"{PG_SERVER}/{database}", "-X", "-v", "ON_ERROR_STOP=1", "-Atqc", sql],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise RuntimeError(f"psql failed on {sql!r}: {done.stderr.strip()}")
    return done.stdout.strip()


@contextlib.contextmanager
def empty_database() -> Iterator[str]:
    """A database without interlock's schema (to watch the migrations run), dropped after."""
    name = f"interlock_empty_{os.getpid()}_{secrets.token_hex(4)}"
    psql(f"CREATE DATABASE {name} TEMPLATE template0")
    try:
        yield f"{PG_SERVER}/{name}"
    finally:
        psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def until_healthy(url: str, proc: asyncio.subprocess.Process) -> None:
    with anyio.fail_after(60):
        async with httpx.AsyncClient() as client:
            while True:
                if proc.returncode is not None:
                    raise AssertionError(f"the node at {url} exited with {proc.returncode}")
                try:
                    if (await client.get(f"{url}/healthz")).status_code == 200:
                        return
                except httpx.TransportError:
                    await anyio.sleep(0.02)  # still starting: poll again (bounded above)


@contextlib.asynccontextmanager
async def nodes(db: str, count: int) -> AsyncIterator[list[tuple[str, asyncio.subprocess.Process]]]:
    """`count` real `interlock serve --db <db>` processes, healthy, stopped after."""
    started: list[tuple[str, asyncio.subprocess.Process]] = []
    try:
        for _ in range(count):
            port = free_port()
            proc = await asyncio.create_subprocess_exec(
                *INTERLOCK,
                "serve",
                "--port",
                str(port),
                "--db",
                db,
                "--no-auth",
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            started.append((f"http://127.0.0.1:{port}", proc))
        for url, proc in started:
            await until_healthy(url, proc)
        yield started
    finally:
        for _, proc in started:
            if proc.returncode is None:
                proc.terminate()
        for _, proc in started:
            with anyio.fail_after(BOUND):
                await proc.wait()


async def spawn(code: str, *args: str) -> asyncio.subprocess.Process:
    """A Python child running `code`, talking over its stdin and stdout."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        textwrap.dedent(code),
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def read_line(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    with anyio.fail_after(BOUND):
        line = await proc.stdout.readline()
    if not line:
        assert proc.stderr is not None
        raise AssertionError("the child ended early: " + (await proc.stderr.read()).decode())
    return line.decode().strip()


def send(procs: Sequence[asyncio.subprocess.Process], line: str) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(line.encode() + b"\n")
