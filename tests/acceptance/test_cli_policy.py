"""`interlock policy set/show/list/rm`: an agent's approval policy from flags or JSON, as
the CLI (run in process: cli_support) stores it; bad policies are refused and change nothing."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import interlock
from cli_support import invoke, new_store
from interlock.cli import USAGE

pytestmark = pytest.mark.anyio
SECRET = "hook-secret-0123456789"


def run(*args: str, db: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "INTERLOCK_URL": db, "COLUMNS": "200", **env}
    return invoke(*args, env=environment)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return new_store(tmp_path / "cli.db")


async def test_set_from_flags_then_show_list_and_rm(db: str) -> None:
    made = run(
        "policy", "set", "bot", "--approval", "always", "--gated", "deploy", "--gated", "db_*",
        "--auto-allow", "read_file", "--hook-url", "https://hooks.example.com/approve",
        "--on-hook-error", "pause", db=db, INTERLOCK_HOOK_SECRET=SECRET,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    stored = json.loads(made.stdout)
    assert (stored["approval"], stored["gatedTools"], stored["autoAllow"], stored["version"]) == (
        "always",
        ["deploy", "db_*"],
        ["read_file"],
        1,
    )
    assert stored["hook"]["onHookError"] == "pause" and SECRET not in made.stdout
    async with interlock.connect(db) as broker:
        policy = await broker.get_approval_policy("bot")
        assert policy.hook is not None and policy.hook.secret == SECRET

    shown = run("policy", "show", "bot", db=db)
    assert json.loads(shown.stdout)["hook"]["hasSecret"] is True
    listed = run("policy", "list", db=db)
    assert "bot" in listed.stdout and "deploy, db_*" in listed.stdout and "pause" in listed.stdout
    assert run("policy", "rm", "bot", db=db).returncode == 0
    gone = run("policy", "show", "bot", db=db)
    assert gone.returncode == 1 and "no approval policy for agent 'bot'" in gone.stderr
    assert run("policy", "rm", "bot", db=db).returncode == 1


async def test_set_from_json_for_one_tool_server(db: str, tmp_path: Path) -> None:
    body = tmp_path / "policy.json"
    body.write_text(json.dumps({"approval": "never", "autoAllow": ["ls"]}))
    made = run("policy", "set", "bot", "--tool-server", "github", "--json", f"@{body}", db=db)
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["server"] == "github"
    lines = run("policy", "list", "--agent", "bot", "--json", db=db).stdout.splitlines()
    assert [(json.loads(line)["server"], json.loads(line)["approval"]) for line in lines] == [("github", "never")]


async def test_a_bad_policy_is_refused_and_the_stored_one_stays(db: str) -> None:
    assert run("policy", "set", "bot", "--approval", "once", db=db).returncode == 0
    for args in (
        ("--approval", "sometimes"),
        ("--json", '{"gatedTools": "deploy"}'),
        ("--hook-url", "http://hooks.example.com/x", "--hook-secret", SECRET),
        ("--json", "[1]"),
        (),  # nothing to set: it had stored an empty policy over the one in use
    ):
        refused = run("policy", "set", "bot", *args, db=db)
        assert refused.returncode == USAGE, (args, refused.stderr)
        assert "error" in refused.stderr
    assert json.loads(run("policy", "show", "bot", db=db).stdout)["approval"] == "once"


async def test_a_policy_naming_another_agent_or_tool_server_than_the_command_line_is_refused(db: str) -> None:
    # It set the policy the JSON named (`policy set deployer --json '{"agent": "otherbot"}'`
    # replaced otherbot's), where the API refuses such a body.
    assert run("policy", "set", "deployer", "--approval", "once", db=db).returncode == 0
    for args, why in (
        (
            ("--json", '{"agent": "otherbot", "approval": "never"}'),
            "--json says agent 'otherbot' but the command line says 'deployer': name one agent",
        ),
        (
            ("--tool-server", "github", "--json", '{"server": "gitlab", "approval": "never"}'),
            "--json says server 'gitlab' but --tool-server says 'github': name one tool server",
        ),
        (
            ("--json", '{"server": "gitlab", "approval": "never"}'),
            "sets the policy of the agent's whole toolset: add --tool-server gitlab to set that tool server's",
        ),
        # A secret without its hook was dropped, where a timeout without it was refused.
        (("--approval", "never", "--hook-secret", SECRET), "--hook-secret goes with --hook-url"),
        (
            ("--approval", "never", "--hook-secret", SECRET, "--hook-timeout", "5s"),
            "--hook-secret and --hook-timeout go with --hook-url",
        ),
    ):
        for where in (db, "http://127.0.0.1:9"):  # through a server too: refused before it is reached
            refused = run("policy", "set", "deployer", *args, db=where)
            assert refused.returncode == USAGE, (args, refused.stderr)
            [line] = refused.stderr.splitlines()
            assert line.startswith("error: ") and why in line, line
    listed = [json.loads(line) for line in run("policy", "list", "--json", db=db).stdout.splitlines()]
    assert [(p["agent"], p["server"], p["approval"]) for p in listed] == [("deployer", None, "once")]

    # A body that repeats the command line's names is taken, and the secret kept in the
    # environment is no word of the command's: a policy without a hook is set beside it.
    same = '{"agent": "deployer", "server": "github", "approval": "never"}'
    taken = run("policy", "set", "deployer", "--tool-server", "github", "--json", same, db=db)
    assert taken.returncode == 0, taken.stderr
    assert (json.loads(taken.stdout)["agent"], json.loads(taken.stdout)["server"]) == ("deployer", "github")
    beside = run("policy", "set", "deployer", "--approval", "always", db=db, INTERLOCK_HOOK_SECRET=SECRET)
    assert beside.returncode == 0 and json.loads(beside.stdout)["hook"] is None, beside.stderr


async def test_a_policy_set_or_removed_on_a_local_store_is_recorded_as_the_local_user_s(db: str) -> None:
    # It recorded nobody (updatedBy null), where answer, reject, claim and run send record
    # the local user.
    made = run("policy", "set", "deployer", "--approval", "once", db=db, INTERLOCK_USER="carol")
    assert made.returncode == 0 and json.loads(made.stdout)["updatedBy"] == "carol", made.stderr
    assert run("policy", "rm", "deployer", db=db, INTERLOCK_USER="carol").returncode == 0
    async with interlock.connect(db) as broker:
        changes = [(e.type, e.data["by"]) async for e in broker.events() if e.type.startswith("approval_policy_")]
    assert changes == [("approval_policy_set", "carol"), ("approval_policy_deleted", "carol")]
