# ruff: noqa: F811  (the fixture imported from test_messages is a parameter here)
"""What `interlock mcp`, `interlock deliveries` and `interlock routing` tell a person when
something is off, through the command (in process: cli_support) against a real `interlock serve`: the same
words as every other command (no token: how to give one; no server: whether `interlock
serve` runs there, the URL's password masked; an unsupported URL: the schemes), no
Python class names; and, without an extra, how to install it from a clone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_messages import CLASS_NAME, Served, free_port, one_line, run, served  # noqa: F401 - the fixture

OUTBOX_COMMANDS = (
    ("deliveries", "list"),
    ("deliveries", "retry", "dlv_0"),
    ("routing", "show"),
)


def token_for(name: str, cwd: Path) -> str:
    made = run("token", "create", name, "--human", cwd=cwd)  # in the server's folder: on its store file
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def test_mcp_with_an_unsupported_url_lists_the_schemes(tmp_path: Path) -> None:
    done = run("mcp", "--db", "ftp://x", cwd=tmp_path)
    assert done.returncode == 4
    message = one_line(done.stderr)
    assert "unsupported store URL 'ftp://x'" in message and "sqlite://" in message and "http://" in message
    assert "ValueError" not in message


@pytest.mark.slow
def test_mcp_without_a_token_or_a_server_says_what_to_do(served: Served, tmp_path: Path) -> None:
    url = served.url
    no_token = run("mcp", "--server", url, cwd=tmp_path)
    assert no_token.returncode == 4 and "set INTERLOCK_TOKEN or pass --token" in one_line(no_token.stderr)
    nowhere = f"http://127.0.0.1:{free_port()}"
    unreachable = run("mcp", "--server", nowhere, "--token", "il_x", cwd=tmp_path)
    assert unreachable.returncode == 4
    assert f"Is `interlock serve` running at {nowhere}?" in one_line(unreachable.stderr)


@pytest.mark.slow
def test_the_outbox_commands_without_a_token_say_how_to_give_one(served: Served, tmp_path: Path) -> None:
    url = served.url
    routing = tmp_path / "routing.toml"
    routing.write_text('[channels.hook]\ntype = "webhook"\nurl = "http://127.0.0.1:9/"\n')
    for command in (*OUTBOX_COMMANDS, ("routing", "set", str(routing))):
        done = run(*command, "--server", url, cwd=tmp_path)
        assert done.returncode == 4, (command, done.stderr)
        assert "set INTERLOCK_TOKEN or pass --token" in one_line(done.stderr), command


@pytest.mark.slow
def test_the_outbox_commands_take_a_token_and_say_what_the_server_refused(served: Served, tmp_path: Path) -> None:
    url = served.url
    token = token_for("alice", served.folder)
    listed = run("deliveries", "list", "--server", url, "--token", token, "--json", cwd=tmp_path)
    assert listed.returncode == 0 and listed.stdout.strip() == "", listed.stderr  # none: no lines
    from_env = run(
        "deliveries", "list", "--status", "dead", cwd=tmp_path, env={"INTERLOCK_URL": url, "INTERLOCK_TOKEN": token}
    )
    assert from_env.returncode == 0 and "no deliveries" in from_env.stderr
    retried = run("deliveries", "retry", "dlv_0", "--server", url, "--token", token, cwd=tmp_path)
    assert retried.returncode == 1 and "no dead letter 'dlv_0'" in retried.stderr
    shown = run("routing", "show", "--server", url, "--token", token, cwd=tmp_path)
    assert shown.returncode == 4 and "refused: only an admin may read the routing" in one_line(shown.stderr)
    wrong = run("deliveries", "list", "--server", url, "--token", "il_0000_not-a-token", cwd=tmp_path)
    assert wrong.returncode == 4 and "the token is unknown or revoked" in one_line(wrong.stderr)


def test_the_outbox_commands_ask_whether_serve_runs_where_no_server_answers(tmp_path: Path) -> None:
    port = free_port()
    for command in OUTBOX_COMMANDS:
        done = run(*command, "--server", f"http://ops:hunter2@127.0.0.1:{port}", "--token", "il_x", cwd=tmp_path)
        assert done.returncode == 4, (command, done.stderr)
        message = one_line(done.stderr)
        assert f"Is `interlock serve` running at http://ops:***@127.0.0.1:{port}?" in message, command
        assert "hunter2" not in message and "Errno" not in message


@pytest.mark.parametrize(
    ("command", "module", "extra"),
    [("serve", "uvicorn", "server"), ("mcp", "mcp", "mcp")],
)
@pytest.mark.slow
def test_without_its_extra_a_command_says_how_to_install_it_from_a_clone(
    tmp_path: Path, command: str, module: str, extra: str
) -> None:
    # the extra's package made unimportable, as in an install without that extra
    program = (
        f"import sys; sys.modules[{module!r}] = None; sys.argv = ['interlock', {command!r}]; "
        "from interlock.cli import main; main()"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("INTERLOCK_URL", "INTERLOCK_TOKEN")}
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60
    )
    assert done.returncode == 4
    message = one_line(done.stderr)
    assert f"({module} is missing)" in message
    assert f"in your clone of interlock, run `.venv/bin/pip install -e '.[{extra}]'`" in message
    assert "interlock[" not in message and not CLASS_NAME.search(done.stderr)
