"""`interlock` commands run in the test's own process, for the tests where a command's
output and exit code are the point and a process of its own is not.

Each `interlock` process imports interlock again (about 1.2 s on a 2-core machine); typer's
CliRunner runs the same `app` with the same arguments and environment, in a thread of its
own (a command runs its own event loop, and an async test's loop is running), and gives
back what `subprocess.run` would. Commands whose process is the point (`serve`, `ask`
waiting, `worker`, `mcp` over stdio, signals, crashes) stay in real subprocesses.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from typer.testing import CliRunner

import interlock
from interlock.cli import app

BOUND = 60.0


def invoke(
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`interlock ARGS` with `env` as its whole environment (as `subprocess.run(env=...)`;
    None: this process's own) in `cwd`: its exit code, stdout and stderr. An exception the
    command lets escape fails the test, as the traceback a person would see should."""

    def run() -> subprocess.CompletedProcess[str]:
        changes: dict[str, str | None] = {}
        if env is not None:
            changes = {name: None for name in os.environ if name not in env}
            changes.update({name: value for name, value in env.items() if os.environ.get(name) != value})
        with contextlib.chdir(cwd) if cwd is not None else contextlib.nullcontext():
            result = CliRunner().invoke(app, list(args), input=input, env=changes, catch_exceptions=True)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise AssertionError(f"interlock {' '.join(args)} raised: {result.stderr}") from result.exception
        return subprocess.CompletedProcess(["interlock", *args], result.exit_code, result.stdout, result.stderr)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result(timeout=BOUND)


def new_store(path: Path) -> str:
    """An empty SQLite store made at `path` (as `interlock serve` or `token create` makes
    one), closed: its URL, for the commands that act only on a store that is there."""

    async def make() -> None:
        async with interlock.connect(f"sqlite:///{path}"):
            pass

    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # (a test's own loop may be running)
        pool.submit(asyncio.run, make()).result(timeout=BOUND)
    return f"sqlite:///{path}"
