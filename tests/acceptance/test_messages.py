"""What the `interlock` command tells a person when something is off: each message says
what to do, names no Python class, and the command exits 4 (or 1 for a settled request).
A real SQLite file, and a real `interlock serve` where a server is meant; the commands that
only print and exit run in process (cli_support), `serve` and a waiting `ask` in subprocesses."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from cli_support import invoke, new_store
from serve_support import SERVING, SIGNIN_LINK, on_a_terminal

INTERLOCK = [sys.executable, "-m", "interlock"]
CLASS_NAME = re.compile(r"\b[A-Z][a-z]+(Error|Exception)\b|Traceback")


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("INTERLOCK_URL", "INTERLOCK_TOKEN")}
    done = invoke(*args, env=base | (env or {}), cwd=cwd)
    assert not CLASS_NAME.search(done.stderr), done.stderr
    return done


def process(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`interlock ARGS` in a process of its own (`serve`: uvicorn owns its process)."""
    base = {k: v for k, v in os.environ.items() if k not in ("INTERLOCK_URL", "INTERLOCK_TOKEN")}
    done = subprocess.run([*INTERLOCK, *args], capture_output=True, text=True, env=base, timeout=60, cwd=cwd)
    assert not CLASS_NAME.search(done.stderr), done.stderr
    return done


def one_line(text: str) -> str:
    return " ".join(text.split())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def until_healthy(url: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # still starting


def announced(proc: subprocess.Popen[str]) -> str:
    """The address `interlock serve --port 0` prints, once it holds a port: its own, never
    one another test's server could take between a pick and a bind."""
    assert proc.stderr is not None
    stuck = threading.Timer(60, proc.kill)  # the bound: a server that never says where it serves is ended
    stuck.start()
    try:
        while line := proc.stderr.readline():
            if found := SERVING.search(line):
                return found.group(1)
    finally:
        stuck.cancel()
    raise AssertionError(f"interlock serve ended with {proc.wait(20)} before serving")


@dataclass
class Served:
    """A running `interlock serve`: its URL, its process and its folder (its store's file)."""

    url: str
    proc: subprocess.Popen[str]
    folder: Path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`interlock serve` on a free port in a folder of its own, with auth, as a newcomer runs
    it: one for the module's tests, which only read from it or add what none of the others
    looks at (a process each would start and import the server again for every test)."""
    folder = tmp_path_factory.mktemp("served")
    env = {k: v for k, v in os.environ.items() if k not in ("INTERLOCK_URL", "INTERLOCK_TOKEN")}
    proc = subprocess.Popen(
        [*INTERLOCK, "serve", "--port", "0"], cwd=folder, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        url = announced(proc)
        until_healthy(url)
        yield Served(url, proc, folder)
    finally:
        proc.terminate()
        proc.wait(20)
        if proc.stderr is not None:
            proc.stderr.close()


@pytest.mark.slow
def test_no_token_for_a_server_says_how_to_give_one(served: Served, tmp_path: Path) -> None:
    done = run("inbox", "--server", served.url, cwd=tmp_path)
    assert done.returncode == 4
    assert "set INTERLOCK_TOKEN or pass --token" in one_line(done.stderr)


def test_an_unreachable_server_asks_whether_serve_runs_there(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = run("inbox", "--token", "il_x", cwd=tmp_path, env={"INTERLOCK_URL": url})
    assert done.returncode == 4
    assert f"Is `interlock serve` running at {url}?" in one_line(done.stderr)


def test_an_unsupported_url_lists_the_schemes(tmp_path: Path) -> None:
    done = run("inbox", "--db", "ftp://example.com/x", cwd=tmp_path)
    assert done.returncode == 4
    message = one_line(done.stderr)
    assert "unsupported store URL" in message and "sqlite://" in message and "http://" in message
    assert "ValueError" not in message


def test_serve_refused_at_start_says_why_once(tmp_path: Path) -> None:
    # After the banner, the one line that says why: not uvicorn's "ERROR: Application
    # startup failed. Exiting." before it, which says nothing the operator can act on.
    done = process("serve", "--port", "0", "--db", f"sqlite:///{tmp_path}/nope/x.db", cwd=tmp_path)
    assert done.returncode == 4
    printed = done.stderr.splitlines()
    at = next(i for i, line in enumerate(printed) if line.startswith("error: "))
    assert printed[at:] == [printed[at]], done.stderr
    assert not [line for line in printed[:at] if "ERROR" in line or "failed" in line], done.stderr
    assert "its folder" in printed[at] and "does not exist" in printed[at]


def test_what_a_command_says_on_stderr_is_one_line_in_a_log(tmp_path: Path) -> None:
    # stderr to a file or a pipe (a service's log): each line whole, however long, as an
    # operator greps for it; not wrapped at 80 columns in the middle of a path.
    folder = tmp_path / ("a-long-folder-name" * 3)
    served = process("serve", "--port", "0", "--db", f"sqlite:///{folder}/interlock.db", cwd=tmp_path)
    (refusal,) = served.stderr.splitlines()  # the folder is not there: no banner, the line that says why
    assert refusal.startswith(f"error: cannot open the SQLite store at {folder}/interlock.db: its folder {folder} ")
    store = new_store(tmp_path / f"{'a-long-file-name' * 3}.db")
    env = {"INTERLOCK_SECRET_KEY": "k" * 43}
    assert run("secret-key", "rotate", "--db", store, cwd=tmp_path, env=env).returncode == 0
    again = run("secret-key", "rotate", "--db", store, cwd=tmp_path, env=env)
    assert again.stderr.splitlines() == [f"unchanged: the nodes on {store} sign with this INTERLOCK_SECRET_KEY already"]


def test_a_file_named_without_a_scheme_is_named_back_as_its_sqlite_url(tmp_path: Path) -> None:
    # `--db tutorial.db` for `--db sqlite:///tutorial.db`: the command says the URL to type,
    # and opens (so makes) no file.
    for given, meant in [
        ("tutorial.db", "sqlite:///tutorial.db"),
        (str(tmp_path / "x.db"), f"sqlite:///{tmp_path}/x.db"),
    ]:
        done = run("inbox", "--db", given, cwd=tmp_path)
        assert done.returncode == 4
        assert f"a SQLite file is named {meant}" in one_line(done.stderr)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_busy_port_says_to_pick_another(served: Served, tmp_path: Path) -> None:
    port = served.url.rsplit(":", 1)[1]
    done = process("serve", "--port", port, "--db", f"sqlite:///{tmp_path / 'other.db'}", cwd=tmp_path)
    assert done.returncode == 4
    assert f"port {port} on 127.0.0.1 is already in use" in one_line(done.stderr)
    assert "--port" in done.stderr


@pytest.mark.slow
def test_a_form_given_as_fields_names_json_and_a_settled_request_says_by_whom(tmp_path: Path) -> None:
    schema = tmp_path / "form.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}}))
    asked = subprocess.Popen(
        [*INTERLOCK, "ask", "How many?", "--form", str(schema), "--timeout", "60s"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            listed = run("inbox", "--json", cwd=tmp_path).stdout.strip()
            if listed:
                break
            assert time.monotonic() < deadline, "the request never appeared"
            time.sleep(0.1)  # the child is still starting
        request_id = json.loads(listed.splitlines()[0])["id"]

        wrong = run("answer", request_id, "n=3", cwd=tmp_path)
        assert wrong.returncode == 4
        assert "give its answer as one JSON object, with --json '{\"n\": ...}'" in one_line(wrong.stderr)

        assert run("answer", request_id, "--json", '{"n": 3}', "--by", "alice", cwd=tmp_path).returncode == 0
        again = run("answer", request_id, "--json", '{"n": 4}', cwd=tmp_path)
        assert again.returncode == 1
        assert re.search(r"was already answered by alice at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", one_line(again.stderr))
        assert asked.wait(30) == 0 and json.loads(asked.communicate()[0]) == {"n": 3}

        listing = run("inbox", "--status", "all", cwd=tmp_path).stdout
        assert "answered" in listing and " in " not in listing  # no "expires in ..." once settled
    finally:
        asked.kill()
        asked.communicate(timeout=10)


@pytest.mark.slow
def test_serve_prints_no_signin_link_where_its_output_may_be_kept_in_a_log(served: Served) -> None:
    """Under a service manager or in a container, stderr is a pipe to a log that others may
    read: no link that signs someone in goes there, only how to sign in."""
    assert served.proc.stderr is not None
    said = []
    while not said or "sign in" not in said[-1]:  # after the banner, before /healthz answers
        said.append(served.proc.stderr.readline())
        assert said[-1], "serve said nothing about signing in"
    assert not SIGNIN_LINK.search("".join(said))
    assert one_line(said[-1]) == (
        f"sign in at {served.url}/ with a person's token (`interlock token create NAME --human`); a one-time "
        "sign-in link is printed only to a terminal, since this output may be kept in a log"
    )


@pytest.mark.slow
def test_serve_on_a_terminal_prints_a_signin_link_that_opens_a_session(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("INTERLOCK_URL", "INTERLOCK_TOKEN")}
    with on_a_terminal([*INTERLOCK, "serve", "--port", "0"], cwd=tmp_path, env=env) as (_, next_line):
        url = link = ""
        while not link:  # the banner comes before the server answers /healthz
            line = next_line()
            assert line, "serve printed no sign-in link"
            if found := SERVING.search(line):
                url = found.group(1)
            link = found.group(1) if (found := SIGNIN_LINK.search(line)) else ""
        assert link.startswith(f"{url}/signin/link?code=")
        until_healthy(url)
        signed_in_once(url, link)


def _serve_says_of_signing_in(db: str, user: str, cwd: Path) -> list[str]:
    """What `interlock serve` on a terminal, run by `user`, prints up to its line about
    signing in."""
    env = {k: v for k, v in os.environ.items() if k not in ("INTERLOCK_URL", "INTERLOCK_TOKEN")}
    env["INTERLOCK_USER"] = user
    with on_a_terminal([*INTERLOCK, "serve", "--port", "0", "--db", db], cwd=cwd, env=env) as (_, next_line):
        said: list[str] = []
        while not said or "sign in" not in said[-1]:
            said.append(next_line())
            assert said[-1], "serve said nothing about signing in"
    return said


@pytest.mark.slow
def test_serve_on_a_terminal_makes_nobody_a_person_on_a_store_that_has_people(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'shared.db'}"
    assert invoke("token", "create", "alice", "--human", "--db", db).returncode == 0
    said = _serve_says_of_signing_in(db, "operator-on-call", tmp_path)
    assert not SIGNIN_LINK.search("".join(said))
    assert one_line(said[-1]) == (
        "no sign-in link: 'operator-on-call' is not a person on this store; sign in with a person's token, or "
        "make 'operator-on-call' one with `interlock token create operator-on-call --human`"
    )
    listed = invoke("token", "list", "--db", db)
    assert "alice" in listed.stdout and "operator-on-call" not in listed.stdout


@pytest.mark.slow
def test_serve_on_a_terminal_prints_no_signin_link_for_a_person_whose_every_token_is_revoked(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'shared.db'}"
    assert invoke("token", "create", "alice", "--human", "--db", db).returncode == 0
    assert invoke("token", "revoke", "alice", "--db", db).returncode == 0  # cut off
    said = _serve_says_of_signing_in(db, "alice", tmp_path)
    assert not SIGNIN_LINK.search("".join(said))
    assert one_line(said[-1]) == (
        "no sign-in link: every token of 'alice' is revoked; sign in with a person's token, or give 'alice' a "
        "new one with `interlock token create alice --human`"
    )


def signed_in_once(url: str, link: str) -> None:
    """The link shows a page to sign in, signs in once, and is spent after."""
    with httpx.Client(base_url=url) as client:
        shown = client.get(link)
        assert shown.status_code == 200 and "one-time link" in shown.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', shown.text)
        code = re.search(r'name="code" value="([^"]+)"', shown.text)
        assert csrf and code
        signed = client.post("/signin/link", data={"csrf": csrf.group(1), "code": code.group(1)})
        assert signed.status_code == 303 and "interlock_session" in signed.cookies
        assert "Waiting for you" in client.get("/").text
    with httpx.Client(base_url=url) as other:  # another browser, the same link: spent
        shown = other.get(link)
        csrf = re.search(r'name="csrf" value="([^"]+)"', shown.text)
        assert csrf
        again = other.post("/signin/link", data={"csrf": csrf.group(1), "code": code.group(1)})
        assert again.status_code == 400 and "used already" in again.text
        assert "interlock_session" not in again.cookies


@pytest.mark.slow
def test_ask_rides_out_a_server_restart_saying_so_on_one_line(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'served.db'}"
    token = run("token", "create", "alice", "--human", "--db", db, cwd=tmp_path).stdout.strip()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k not in ("INTERLOCK_URL", "INTERLOCK_TOKEN")}

    def start() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            # No grace for the ask's long poll on SIGTERM (5 s by default): it is cut at once.
            [*INTERLOCK, "serve", "--port", str(port), "--db", db, "--shutdown-timeout", "0"],
            cwd=tmp_path,
            env=env,
            stderr=subprocess.DEVNULL,
        )
        until_healthy(url)
        return proc

    server = start()
    asked = subprocess.Popen(
        [*INTERLOCK, "ask", "Ship it?", "--confirm", "--to", "alice", "--server", url, "--token", token],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    retrying = threading.Event()

    def read_stderr() -> None:
        assert asked.stderr is not None
        for line in asked.stderr:
            lines.append(line)
            if "trying again until it is back" in line:
                retrying.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 30
        while not httpx.get(f"{url}/api/v1/requests", headers={"Authorization": f"Bearer {token}"}).json()["items"]:
            assert time.monotonic() < deadline, "the request never appeared"
            time.sleep(0.05)  # the child is still starting
        server.terminate()
        server.wait(20)
        assert retrying.wait(30), "".join(lines)  # down: the waiting ask tries again meanwhile
        server = start()
        request_id = json.loads(run("inbox", "--json", "--db", db, cwd=tmp_path).stdout.splitlines()[0])["id"]
        answered = run("answer", request_id, "yes", "--server", url, "--token", token, cwd=tmp_path)
        assert answered.returncode == 0, answered.stderr
        assert asked.wait(60) == 0
        assert asked.stdout is not None
        out = asked.stdout.read()
        reader.join(10)
        err = "".join(lines)
        assert out.strip() == "true", (out, err)
        (away,) = [line for line in err.splitlines() if "trying again" in line]  # one line for the outage
        assert away.startswith(f"waiting on {request_id}: "), err
        # The server said it was stopping (a poll that came as it stopped), or was gone already.
        assert f"cannot reach the interlock server at {url}" in away or "the interlock server is stopping" in away, err
        assert "Traceback" not in err and len(err.splitlines()) <= 5, err
    finally:
        for proc in (asked, server):
            proc.kill()
            proc.wait(10)
        reader.join(10)
        for pipe in (asked.stdout, asked.stderr):
            if pipe is not None:
                pipe.close()
