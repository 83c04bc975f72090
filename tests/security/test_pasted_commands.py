"""The commands `interlock show` prints for answering a request are pasted into a shell as
they are. What the agent chose goes into them (a call's arguments, its ask ids, whom it
asks), so a hostile agent must not be able to make a person run a command of its own: each
line, run by a real shell, answers the request with exactly what it shows, and nothing else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import interlock
from cli_support import invoke
from interlock import Text
from interlock.agent import ApprovalGate, ToolCall

SCHEMA = {"type": "object", "properties": {"msg": {"type": "string"}}, "required": ["msg"]}
pytestmark = pytest.mark.anyio
HOSTILE = "x' $(touch PWNED) `touch PWNED` '; touch PWNED #"


def command_of(line: str) -> str:
    """The command of one of `show`'s lines: what follows its label."""
    return line.split(": ", 1)[1]


def pasted(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`command` run by bash as a person who pasted it would, with this interpreter's
    `interlock` first on the PATH."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {k: v for k, v in os.environ.items() if k not in ("INTERLOCK_URL", "INTERLOCK_TOKEN")}
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env | {"PATH": path}, capture_output=True, text=True, timeout=60
    )


async def test_an_edited_approval_pasted_from_show_approves_the_agent_s_arguments_and_runs_nothing_else(
    tmp_path: Path,
) -> None:
    db = f"sqlite:///{tmp_path / 'gate.db'}"
    async with interlock.connect(db) as broker:
        gate = ApprovalGate(broker, policies={"post": "always"}, to="ops;touch${IFS}PWNED")
        request = await gate.begin(ToolCall("post", {"msg": HOSTILE}, id="c1"), schema=SCHEMA)
        assert isinstance(request, interlock.Request)
    shown = invoke("show", request.id, "--db", db, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    (edit,) = [line.strip() for line in shown.stderr.splitlines() if line.strip().startswith("edit arguments")]
    done = pasted(command_of(edit), tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "PWNED").exists()
    async with interlock.connect(db) as broker:
        settled = await broker.get(request.id)
    assert settled.response is not None and settled.response.by == "ops;touch${IFS}PWNED"  # the --by it printed
    assert settled.response.answers == {"approve": True, "arguments": {"msg": HOSTILE}}


async def test_asks_whose_ids_a_shell_reads_as_code_are_named_as_words(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'asks.db'}"
    async with interlock.connect(db) as broker:
        asks = [Text("Name?", id="name;touch PWNED"), Text("Why?", id="$(touch PWNED)")]
        request = await broker.create_detached(asks)
    shown = invoke("show", request.id, "--db", db, cwd=tmp_path)
    (each,) = [line.strip() for line in shown.stderr.splitlines() if line.startswith("answer each ask")]
    done = pasted(command_of(each).replace("=VALUE", "=ada", 1).replace("=VALUE", "=because", 1), tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "PWNED").exists()
    async with interlock.connect(db) as broker:
        settled = await broker.get(request.id)
    assert settled.response is not None
    assert json.loads(json.dumps(settled.response.answers)) == {"name;touch PWNED": "ada", "$(touch PWNED)": "because"}
