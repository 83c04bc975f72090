"""The `interlock` command against a SQLite file: in real subprocesses where it waits for an
answer or reads the terminal, in process (cli_support) where it prints and exits."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

import interlock
from cli_support import invoke
from interlock import Broker, Confirm, Request
from interlock.agent import ApprovalGate, ToolCall
from interlock.principals import issue_token
from interlock.server.quotas import Quota

pytestmark = pytest.mark.anyio

INTERLOCK = [sys.executable, "-m", "interlock"]


def run(*args: str, db: str) -> subprocess.CompletedProcess[str]:
    return invoke(*args, env={**os.environ, "INTERLOCK_URL": db})


async def ask_and_settle(
    db: str, args: list[str], settle: Callable[[Broker, Request], Awaitable[object]]
) -> tuple[int, str]:
    """Run `interlock ask ...`, settle the request it creates through the API, return
    the exit code and what it printed."""
    env = {**os.environ, "INTERLOCK_URL": db}
    async with interlock.connect(db) as broker:
        after = await broker.last_event_id()  # before the child can create anything
        proc = await asyncio.create_subprocess_exec(
            *INTERLOCK, "ask", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
        )
        with anyio.fail_after(30):
            async for event in broker.events(after=after, follow=True):
                if event.type == "created" and event.request is not None:
                    await settle(broker, event.request)
                    break
            out, _ = await proc.communicate()
        assert proc.returncode is not None
        return proc.returncode, out.decode().strip()


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cli.db'}"


def test_version() -> None:
    out = invoke("--version").stdout
    assert out.strip() == f"interlock {interlock.__version__}"


@pytest.mark.slow
async def test_ask_blocks_until_answered_and_prints_the_answer(db: str) -> None:
    async def approve(broker: Broker, request: Request) -> None:
        assert request.to == "alice"
        assert request.expires_at is not None
        await broker.resolve(request.id, True, by="alice")

    code, out = await ask_and_settle(db, ["Deploy to prod?", "--confirm", "--to", "alice", "--timeout", "10m"], approve)
    assert (code, json.loads(out)) == (0, True)


@pytest.mark.slow
async def test_a_declined_confirm_exits_one(db: str) -> None:
    code, out = await ask_and_settle(db, ["Deploy?", "--confirm"], lambda b, r: b.resolve(r.id, False))
    assert (code, json.loads(out)) == (1, False)


@pytest.mark.slow
async def test_a_rejection_exits_one_with_the_reason(db: str) -> None:
    code, out = await ask_and_settle(db, ["Deploy?", "--confirm"], lambda b, r: b.reject(r.id, "freeze week"))
    assert code == 1
    assert json.loads(out) == {"status": "rejected", "reason": "freeze week"}


@pytest.mark.slow
async def test_a_cancellation_exits_three(db: str) -> None:
    code, _ = await ask_and_settle(db, ["Deploy?", "--confirm"], lambda b, r: b.cancel(r.id))
    assert code == 3


@pytest.mark.slow
async def test_choices_and_multi_choices_come_back_as_option_ids(db: str) -> None:
    code, out = await ask_and_settle(
        db, ["Region?", "--choice", "eu", "--choice", "us"], lambda b, r: b.resolve(r.id, "us")
    )
    assert (code, json.loads(out)) == (0, "us")
    code, out = await ask_and_settle(
        db, ["Regions?", "--choice", "eu", "--choice", "us", "--multi"], lambda b, r: b.resolve(r.id, ["eu", "us"])
    )
    assert (code, json.loads(out)) == (0, ["eu", "us"])


@pytest.mark.slow
async def test_a_form_ask_takes_its_schema_from_a_file(db: str, tmp_path: Path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}))
    code, out = await ask_and_settle(db, ["How many?", "--form", str(schema)], lambda b, r: b.resolve(r.id, {"n": 3}))
    assert (code, json.loads(out)) == (0, {"n": 3})


async def test_a_large_answer_comes_from_a_file_or_standard_input(db: str, tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"notes": {"type": "string"}}, "required": ["notes"]}
    async with interlock.connect(db) as broker:
        made = [(await broker.create(interlock.Form("Notes?", schema))).id for _ in range(3)]
    notes = "n" * 200_000  # more than a command line comfortably holds
    answer_file = tmp_path / "answer.json"
    answer_file.write_text(json.dumps({"notes": notes}))
    env = {**os.environ, "INTERLOCK_URL": db}
    from_file = invoke("answer", made[0], "--json", f"@{answer_file}", env=env)
    from_stdin = invoke("answer", made[1], "--json", "-", env=env, input=json.dumps({"notes": "short"}))
    missing = invoke("answer", made[2], "--json", f"@{tmp_path / 'nope.json'}", env=env)
    assert from_file.returncode == from_stdin.returncode == 0, (from_file.stderr, from_stdin.stderr)
    assert missing.returncode == 4 and "cannot read it" in " ".join(missing.stderr.split())
    async with interlock.connect(db) as broker:
        answered = [await broker.get(i) for i in made]
    assert [r.answer for r in answered[:2]] == [{"notes": notes}, {"notes": "short"}]
    assert answered[2].status is interlock.Status.PENDING


async def test_token_list_names_each_live_token_so_one_leaked_token_is_revoked_alone(db: str) -> None:
    made = [run("token", "create", "alice", "--human", db=db) for _ in range(2)]
    first, second = (m.stdout.strip() for m in made)
    first_id, second_id = first.split("_")[1], second.split("_")[1]
    assert f"(id {first_id};" in made[0].stderr  # told when it is made
    run("token", "create", "bot", "--agent", "--owner", "alice", db=db)
    listed = dict(line.split("\t", 1) for line in run("token", "list", db=db).stdout.splitlines())
    assert listed["alice"].startswith("human\ttokens=")
    assert [t.split("@")[0] for t in listed["alice"].split("tokens=")[1].split(",")] == [first_id, second_id]
    assert first.split("_", 2)[2] not in run("token", "list", db=db).stdout  # ids, never secrets

    assert run("token", "revoke", first_id, db=db).returncode == 0
    async with interlock.connect(db) as broker:
        live = [t.id for t in await broker.list_tokens()]  # type: ignore[attr-defined]
    assert first_id not in live and second_id in live  # her other token still works
    assert f"tokens={second_id}@" in run("token", "list", db=db).stdout


async def test_token_list_shows_the_web_inbox_s_session_tokens_apart_from_those_an_operator_made(db: str) -> None:
    # Each sign-in link's session has a token of its own, listed beside the ones made with
    # `token create` with nothing to tell them apart.
    made = run("token", "create", "alice", "--human", db=db).stdout.strip().split("_")[1]
    async with interlock.connect(db) as broker:
        session = issue_token("alice", datetime.now(UTC), for_session=True)  # as a sign-in link's session makes
        await broker.store.save_token(session)  # type: ignore[attr-defined]
    listed = dict(line.split("\t", 1) for line in run("token", "list", db=db).stdout.splitlines())
    kind, tokens, sessions = listed["alice"].split("\t")
    assert (kind, tokens.split("@")[0], sessions.split("@")[0]) == (
        "human",
        f"tokens={made}",
        f"web_sessions={session.id}",
    )
    assert run("token", "revoke", session.id, db=db).returncode == 0  # signs that session out
    assert "web_sessions" not in run("token", "list", db=db).stdout


def test_revoking_every_token_of_a_person_says_they_are_cut_off_and_sent_nothing(db: str) -> None:
    # Revoking alice by name cuts her off: the command says what that means (the routing
    # sends her nothing any more: each delivery to her is skipped) and how to undo it.
    for who in ("alice", "bob"):
        run("token", "create", who, "--human", db=db)
    bob_token = run("token", "create", "bob", "--human", db=db).stdout.strip()
    alice = run("token", "revoke", "alice", db=db)
    assert alice.returncode == 0, alice.stderr
    said = " ".join(alice.stderr.split())
    assert "revoked 1 token(s)" in said
    assert "alice is cut off: nothing is sent to them" in said, said
    assert "interlock deliveries --status skipped" in said and "interlock token create alice --human" in said
    assert "the grants they gave authorize nothing" in said
    assert "still mails" not in said and "warning" not in said
    one = run("token", "revoke", bob_token.split("_")[1], db=db)  # one of bob's tokens: he is not cut off
    assert one.returncode == 0 and "cut off" not in one.stderr, one.stderr
    listed = dict(line.split("\t", 1) for line in run("token", "list", db=db).stdout.splitlines())
    last = listed["bob"].split("tokens=")[1].split("@")[0]  # his other token, revoked by its id: his last
    cut = run("token", "revoke", last, db=db)
    assert cut.returncode == 0, cut.stderr
    said = " ".join(cut.stderr.split())
    assert "bob is cut off (that was their last live token): nothing is sent to them" in said, said
    assert "interlock token create bob --human" in said


async def test_an_answer_in_the_name_of_a_person_cut_off_is_refused_and_exits_non_zero(db: str) -> None:
    run("token", "create", "alice", "--human", db=db)
    assert run("token", "revoke", "alice", db=db).returncode == 0
    async with interlock.connect(db) as broker:
        request = await broker.create(interlock.Text("Which region?"), to="alice")
    refused = run("answer", request.id, "eu", "--by", "alice", db=db)
    assert refused.returncode == 4  # a refusal, as the CLI's exit codes say
    said = " ".join(refused.stderr.split())
    assert "every token of 'alice' is revoked" in said, refused.stderr
    async with interlock.connect(db) as broker:
        assert (await broker.get(request.id)).status is interlock.Status.PENDING
    # The refusal names the command that gives her a token again: run as it says, it does.
    remedy = said.split("until `interlock ", 1)[1].split("`", 1)[0]
    restored = run(*shlex.split(remedy), db=db)
    assert restored.returncode == 0, restored.stderr
    assert run("answer", request.id, "eu", "--by", "alice", db=db).returncode == 0


def test_token_create_says_which_of_human_and_agent_is_missing_or_that_both_were_given(db: str) -> None:
    neither, both = run("token", "create", "y", db=db), run("token", "create", "y", "--human", "--agent", db=db)
    assert (neither.returncode, both.returncode) == (4, 4)
    assert "say --human or --agent" in neither.stderr and "not both" not in neither.stderr
    assert "say --human or --agent, not both" in both.stderr
    assert "y" not in run("token", "list", db=db).stdout.split()


def test_an_expiry_exits_two(db: str) -> None:
    result = run("ask", "Deploy?", "--confirm", "--timeout", "100ms", db=db)
    assert result.returncode == 2
    assert json.loads(result.stdout) == {"status": "expired"}


async def test_an_ask_over_its_quota_says_so_in_one_line_and_exits_four_not_one(
    db: str, serve: Callable[..., AbstractContextManager[str]]
) -> None:
    """1 would read as "the person said no" to a script."""
    with serve(db, auth=False, rate_limit=Quota(0.01, 1)) as url:
        async with interlock.connect(url) as broker:
            await broker.create_detached(Confirm("Deploy?"))  # the quota's one request
        refused = invoke("ask", "Deploy again?", "--confirm", "--server", url)
    assert refused.returncode == 4 and "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr.startswith("error: refused for now: ") and "try again in " in refused.stderr
    assert len(refused.stderr.splitlines()) == 1


async def test_a_server_url_with_a_path_is_said_to_be_no_server_s_address_and_exits_four(
    db: str, serve: Callable[..., AbstractContextManager[str]]
) -> None:
    """`--server http://host:port/api/v1` (the API's own path, pasted from the docs) read as
    "Not Found" with the exit code of a person's no."""
    with serve(db, auth=False) as url:
        for args in (["inbox"], ["ask", "Deploy?", "--confirm"], ["show", "01a24cd1716806f01369ea31f9ed3638"]):
            refused = invoke(*args, "--server", f"{url}/api/v1")
            said = " ".join(refused.stderr.split())
            assert refused.returncode == 4, (args, said)
            assert said.startswith(f"error: {url}/api/v1 is not an interlock server's own address: "), said
            assert "GET /api/v1/api/v1/whoami answered 404 Not Found" in said, said
        async with interlock.connect(url) as broker:
            assert not await broker.pending()  # the ask created nothing anywhere


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
async def test_an_ask_stopped_by_its_service_manager_or_a_closed_terminal_withdraws_its_request(
    db: str, stop: signal.Signals
) -> None:
    """Ctrl-C, cron, `timeout`, systemd stop with SIGTERM, a closed terminal hangs up: a
    request nobody waits for any more would stay in the inbox. Each says so (Ctrl-C said
    nothing)."""
    env = {**os.environ, "INTERLOCK_URL": db}
    asking = await asyncio.create_subprocess_exec(
        *INTERLOCK, "ask", "Ship it?", "--confirm", "--to", "alice",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    assert asking.stderr is not None
    with anyio.fail_after(60):
        while b"Waiting for an answer to " not in (line := await asking.stderr.readline()):
            assert line, "interlock ask ended before it waited"
        request_id = line.decode().split("Waiting for an answer to ", 1)[1].split(";", 1)[0]
        asking.send_signal(stop)
        out, err = await asking.communicate()
    assert asking.returncode == 128 + stop, err.decode()
    assert f"stopped by {stop.name}: the request is withdrawn" in err.decode() and out == b""
    async with interlock.connect(db) as broker:
        withdrawn = await broker.get(request_id)
    assert withdrawn.status is interlock.Status.CANCELLED


def test_json_on_stdout_keeps_the_text_people_read_and_escapes_it_only_where_stdout_cannot_take_it(db: str) -> None:
    async def make() -> Request:
        async with interlock.connect(db) as broker:
            return await broker.create_detached(interlock.Text("Zoë, 日本へ?"), title="Zoë")

    request = asyncio.run(make())
    shown = run("show", request.id, db=db)
    assert shown.returncode == 0 and '"prompt": "Zoë, 日本へ?"' in shown.stdout
    latin = subprocess.run(
        [*INTERLOCK, "show", request.id],
        env={**os.environ, "INTERLOCK_URL": db, "PYTHONIOENCODING": "latin-1"},
        capture_output=True,
        timeout=60,
    )
    assert latin.returncode == 0, latin.stderr
    assert json.loads(latin.stdout)["asks"][0]["prompt"] == "Zoë, 日本へ?"  # escaped: \u65e5...


def test_usage_errors_exit_four_and_store_nothing(db: str, tmp_path: Path) -> None:
    assert run("ask", "Deploy?", "--confirm", "--choice", "a", db=db).returncode == 4
    for typo in (["--timeout", "soon"], ["--nope"]):  # the parser's own errors: 4, not 2 (expired)
        parsed = subprocess.run([*INTERLOCK, "ask", "Deploy?", *typo], capture_output=True, text=True, timeout=60)
        assert parsed.returncode == 4 and "Try 'python -m interlock ask --help'" in parsed.stderr, parsed.stderr
    assert run("ask", "", db=db).returncode == 4
    assert run("ask", "Pick", "--choice", "a", "--choice", "b", "--multi", "--other", db=db).returncode == 4
    assert run("token", "create", "zed", "--human", "--owner", "carol", db=db).returncode == 4
    (tmp_path / "garbage.db").write_text("not a database")
    refused = run("inbox", db=f"sqlite:///{tmp_path / 'garbage.db'}")
    assert refused.returncode == 4 and "cannot open the SQLite store at" in refused.stderr, refused.stderr
    refused = run("inbox", db="sqlite:///no/such/folder/x.db")
    assert refused.returncode == 4 and "there is no store at sqlite:///no/such/folder/x.db" in refused.stderr
    assert run("ask", "Deploy?", "--form", "/nonexistent.json", db=db).returncode == 4
    listed = run("inbox", "--status", "all", "--json", db=db)
    assert listed.stdout == ""


async def test_inbox_lists_a_page_at_a_time_saying_how_to_list_the_next_or_every_page(db: str) -> None:
    async with interlock.connect(db) as broker:
        made = [(await broker.create_detached(interlock.Text(f"Name {i}?"))).id for i in range(5)]
    newest_first = made[::-1]
    for as_json in ([], ["--json"]):
        first = run("inbox", "--limit", "2", *as_json, db=db)
        assert first.returncode == 0, first.stderr
        assert [i for i in newest_first if i in first.stdout] == newest_first[:2]
        (more,) = [line for line in first.stderr.splitlines() if line.startswith("more requests:")]
        cursor = more.split("--after ", 1)[1].split()[0]
        second = run("inbox", "--limit", "2", "--after", cursor, *as_json, db=db)
        assert [i for i in newest_first if i in second.stdout] == newest_first[2:4]
        every = run("inbox", "--limit", "2", "--all", *as_json, db=db)
        assert [i for i in newest_first if i in every.stdout] == newest_first
        assert "more requests" not in every.stderr


async def test_inbox_tells_approvals_of_one_tool_apart_by_their_calls(db: str) -> None:
    # Both listed as "confirm: Approve deploy? (+1)": only `show` told prod from staging.
    async with interlock.connect(db) as broker:
        for env in ("prod", "staging"):
            await broker.create(
                [Confirm("Allow deploy?", id="approve"), interlock.Text("Why?", id="why", required=False)],
                kind="approval",
                title="Approve deploy?",
                tool_name="deploy",
                details=f'deploy(env="{env}")',
                to="alice",
            )
    listed = " ".join(run("inbox", "--to", "alice", db=db).stdout.split())
    assert 'approval: deploy(env="prod")' in listed and 'approval: deploy(env="staging")' in listed, listed


async def test_inbox_and_answer_in_the_terminal(db: str) -> None:
    async with interlock.connect(db) as broker:
        request = await broker.create(
            [interlock.Choice("Colour?", ["Red", "Green"], id="colour"), interlock.Text("Why?", id="why")],
            to="alice",
            title="Paint the shed",
        )
    table = run("inbox", "--to", "alice", db=db)
    assert request.id in table.stdout
    assert "Paint the shed" in table.stdout

    bad = run("answer", request.id, "colour=blue", "why=because", db=db)
    assert bad.returncode == 4
    assert "'blue' is not one of the options" in bad.stderr
    good = run("answer", request.id, "colour=green", "why=it is calm", "--by", "alice", db=db)
    assert good.returncode == 0, good.stderr  # 'green' matched the option 'Green' ignoring case
    again = run("answer", request.id, "colour=Red", "why=x", db=db)
    assert again.returncode == 1

    async with interlock.connect(db) as broker:
        settled = await broker.get(request.id)
    assert settled.answer == {"colour": "Green", "why": "it is calm"}
    assert settled.response is not None
    assert (settled.response.by, settled.response.via) == ("alice", "cli")


async def test_an_id_not_in_the_default_store_names_the_store_read_and_how_to_name_another(tmp_path: Path) -> None:
    """The tutorial's requests live in tutorial.db; an `answer` without --db reads
    interlock.db, and says so rather than only that no such request exists."""
    async with interlock.connect(f"sqlite:///{tmp_path / 'tutorial.db'}") as broker:
        request = await broker.create(interlock.Confirm("Ship it?"), to="alice")
    env = {name: value for name, value in os.environ.items() if name != "INTERLOCK_URL"}
    async with interlock.connect(f"sqlite:///{tmp_path / 'interlock.db'}"):
        pass  # the default store is there, and holds other requests
    missed = invoke("answer", request.id, "yes", "--by", "alice", env=env, cwd=tmp_path)
    assert missed.returncode == 1
    said = " ".join(missed.stderr.split())
    assert f"no request with id {request.id!r} in sqlite:///interlock.db" in said, said
    assert "name that one with --db" in said
    async with interlock.connect(f"sqlite:///{tmp_path / 'tutorial.db'}") as broker:
        assert (await broker.get(request.id)).status is interlock.Status.PENDING


def test_a_command_that_reads_refuses_a_store_that_is_not_there_and_makes_none(tmp_path: Path) -> None:
    """A mistyped --db, or the default interlock.db of a folder that has none, is said to be
    missing, and no empty store is left where it was named; a command that makes things
    (ask, token create, ...) makes the store as before."""
    env = {name: value for name, value in os.environ.items() if name != "INTERLOCK_URL"}
    typo = f"sqlite:///{tmp_path / 'tutoral.db'}"
    for args in (["inbox"], ["answer", "01a24cd1716806f01369ea31f9ed3638", "yes"], ["runs"], ["token", "list"]):
        for named in (["--db", typo], []):
            refused = invoke(*args, *named, env=env, cwd=tmp_path)
            said = " ".join(refused.stderr.split())
            assert refused.returncode == 4, (args, named, said)
            assert "there is no store at sqlite:///" in said and "name the one your requests are in" in said, said
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    made = invoke("token", "create", "alice", "--human", "--db", typo, env=env, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert invoke("token", "list", "--db", typo, env=env, cwd=tmp_path).stdout.startswith("alice\t")


def test_a_command_that_sets_how_a_server_works_refuses_a_store_that_is_not_there(tmp_path: Path) -> None:
    """Run in the wrong folder, a command that changes a server's settings said it had
    changed them, in an empty store it made there that no server reads."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("INTERLOCK_")}
    env["INTERLOCK_SECRET_KEY"] = "k" * 43
    routing = tmp_path / "routing.toml"
    routing.write_text(
        '[channels.ops]\ntype = "webhook"\nurl = "http://127.0.0.1:9/hook"\nsecret = "a-webhook-secret-of-32-chars!"\n'
    )
    policy = tmp_path / "policy.json"
    policy.write_text('{"approval": "always"}')
    wrong = tmp_path / "elsewhere"
    wrong.mkdir()
    for args in (
        ["routing", "set", str(routing)],
        ["policy", "set", "bot", "--json", f"@{policy}"],
        ["team", "add", "ops", "alice"],
        ["grants", "give", "bot", "--with", "interlock:inbox/alice", "--can", "hitl/request", "--by", "alice"],
        ["secret-key", "rotate"],
        ["grant-key", "rotate"],
        ["deliver", "--routing", str(routing)],
    ):
        refused = invoke(*args, env=env, cwd=wrong)
        said = " ".join(refused.stderr.split())
        assert refused.returncode == 4, (args, said)
        assert said.startswith("error: there is no store at sqlite:///interlock.db"), said
        assert "`interlock serve`, `interlock token create` and `interlock ask` make a new one" in said, said
    assert os.listdir(wrong) == []


@pytest.mark.parametrize(
    "args",
    [
        ["token", "create", "bob", "--human"],
        ["token", "revoke", "bob"],
        ["token", "list"],
        ["secret-key", "rotate"],
        ["secret-key", "forget"],
        ["grant-key", "rotate"],
        ["grant-key", "forget"],
        ["deliver"],
    ],
    ids=" ".join,
)
def test_a_command_that_works_on_a_store_itself_says_so_when_pointed_at_a_server(
    args: list[str], tmp_path: Path
) -> None:
    """With INTERLOCK_URL set to use a server from the shell (docs/how-to/server.md),
    `token create` said "no token for the server: set INTERLOCK_TOKEN or pass --token (an
    admin makes one with `interlock token create NAME --human`)", and with a token
    "principals and tokens are managed on the server: run `interlock token` there", to
    someone on the server. It says where it works and how to name that store, before the
    server is reached (none listens here)."""
    server = "http://127.0.0.1:9"
    env = {name: value for name, value in os.environ.items() if not name.startswith("INTERLOCK_")}
    env |= {"INTERLOCK_SECRET_KEY": "k" * 43, "INTERLOCK_TOKEN": issue_token("alice", datetime.now(UTC)).secret}
    how = (
        ": run it where the server runs, with --db sqlite:///path/to/interlock.db (the store `interlock serve --db` "
        "names; or its postgresql://... URL)"
    )
    command = " ".join(args[:2] if args[0] != "deliver" else args[:1])
    for named, environment, found in (
        ([], {**env, "INTERLOCK_URL": server}, "INTERLOCK_URL points it at"),
        (["--db", server], env, "--db names"),
    ):
        refused = invoke(*args, *named, env=environment, cwd=tmp_path)
        assert refused.returncode == 4, refused.stderr
        [line] = refused.stderr.splitlines()
        assert line.startswith(
            f"error: `interlock {command}` works on the server's store file, not through its URL, and {found} the "
            f"server at {server}{how}"
        ), line
        assert line.endswith(", or unset INTERLOCK_URL (then ./interlock.db)") == (not named), line
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "args",
    [
        ["ask", "mem", "--timeout", "1s"],  # (it waited for an answer no one could give; bounded here)
        ["inbox"],
        ["answer", "01a24cd1716806f01369ea31f9ed3638", "yes"],
        ["runs"],
        ["token", "create", "alice", "--human"],
        ["team", "add", "ops"],
        ["policy", "set", "bot", "--approval", "once"],
        ["grants", "give", "bot", "--with", "x", "--can", "y"],
        ["secret-key", "forget"],
        ["mcp"],
        ["worker", "memory_worker:handlers", "--once"],
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_a_store_of_one_process_is_refused_saying_why_and_what_to_name(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `ask --db memory://` asked in a store only its own process could reach, printed
    # "answer with: interlock answer ID VALUE --db memory://" (which answers nothing) and
    # waited for ever; the others did their work in a store gone when they ended.
    (tmp_path / "memory_worker.py").write_text("def handlers(broker):\n    return {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    env = {name: value for name, value in os.environ.items() if not name.startswith("INTERLOCK_")}
    for named, environment in ((["--db", "memory://"], env), ([], {**env, "INTERLOCK_URL": "memory://?retention=5"})):
        refused = invoke(*args, *named, env=environment, cwd=tmp_path, input="")
        assert refused.returncode == 4, (args, refused.stderr)
        [line] = refused.stderr.splitlines()
        assert line.startswith("error: memory:// keeps a store only in the process that opens it"), line
        assert "Name a store they share with --db (or INTERLOCK_URL): sqlite:///interlock.db" in line, line
        assert refused.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".py" and p.name != "__pycache__") == []


async def test_the_answer_show_prints_for_a_gate_approval_works_pasted_as_it_is(tmp_path: Path) -> None:
    """Read with --db from a shell whose person is not the approver (the tutorial's second
    shell), the printed line names the store and the approver, and answers when pasted."""
    db = f"sqlite:///{tmp_path / 'tutorial.db'}"
    async with interlock.connect(db) as broker:
        await broker.start_run("deployer", run_id="deploy-1")
        gate = ApprovalGate(broker, policies={"deploy": "always"}, to="alice")
        request = await gate.begin(ToolCall("deploy", {"service": "web"}, id="call-1", run="deploy-1"))
        assert isinstance(request, Request)
        await broker.park("deploy-1", state=None, waiting_on=[request.id])
    env = {**{k: v for k, v in os.environ.items() if k != "INTERLOCK_URL"}, "INTERLOCK_USER": "carol"}
    shown = invoke("show", request.id, "--db", db, env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    (approve,) = [line for line in shown.stderr.splitlines() if line.startswith("approve:")]
    assert approve == f"approve: interlock answer {request.id} yes --db {db} --by alice"
    of_the_run = invoke("run", "show", "deploy-1", "--db", db, env=env, cwd=tmp_path)
    assert f"    {approve}" in of_the_run.stderr.splitlines(), of_the_run.stderr
    # the store from INTERLOCK_URL, which the pasted command reads too, and alice's own shell: neither named
    as_alice = invoke("show", request.id, env={**env, "INTERLOCK_URL": db, "INTERLOCK_USER": "alice"})
    assert f"approve: interlock answer {request.id} yes\n" in as_alice.stderr, as_alice.stderr
    pasted = invoke(*shlex.split(approve.removeprefix("approve: interlock ")), env=env, cwd=tmp_path)
    assert pasted.returncode == 0, pasted.stderr
    async with interlock.connect(db) as broker:
        answered = await broker.get(request.id)
    assert answered.response is not None and answered.response.by == "alice"


async def test_watch_leaves_an_approval_its_gate_takes_only_from_someone_else_pending_and_says_so(
    tmp_path: Path,
) -> None:
    """`printf 'y' | interlock watch` as carol took alice's approval: the gate then refused
    the yes, the call never ran, and alice could no longer answer."""
    db = f"sqlite:///{tmp_path / 'gate.db'}"
    async with interlock.connect(db) as broker:
        gate = ApprovalGate(broker, policies={"deploy": "always"}, to="alice")
        approval = await gate.begin(ToolCall("deploy", {"service": "web"}, id="call-1", session="s1"))
        assert isinstance(approval, Request)
        question = await broker.create(Confirm("Lunch?"), to="alice")
    env = {**{k: v for k, v in os.environ.items() if k != "INTERLOCK_URL"}, "INTERLOCK_USER": "carol"}
    watched = invoke("watch", "--db", db, env=env, input="y\n")
    assert watched.returncode == 0, watched.stderr
    said = " ".join(watched.stderr.split())
    assert f"(request {approval.id} is an approval for alice, which the agent's gate takes only from alice:" in said
    assert "left pending; watch as them with --by alice to answer it here)" in said
    async with interlock.connect(db) as broker:
        assert (await broker.get(approval.id)).status is interlock.Status.PENDING
        answered = await broker.get(question.id)  # the line went to the question carol may answer
        assert answered.answer is True and answered.response is not None and answered.response.by == "carol"


async def test_a_server_without_auth_prints_answer_lines_that_name_the_approver_and_refuses_anyone_else(
    serve: Callable[..., AbstractContextManager[str]], tmp_path: Path
) -> None:
    """Without auth nobody is named by a token: `answer ID yes` names nobody unless --by
    does. `show` printed a line without --by, which failed pasted; `--by bob` was stored,
    read by the gate as a refusal, and alice could no longer answer."""
    with serve(f"sqlite:///{tmp_path / 'open.db'}", auth=False) as url:
        async with interlock.connect(url) as broker:
            gate = ApprovalGate(broker, policies={"deploy": "always"}, to="alice")
            approval = await gate.begin(ToolCall("deploy", {"service": "web"}, id="call-1", session="s1"))
            assert isinstance(approval, Request)
        shown = invoke("show", approval.id, "--server", url)
        (approve,) = [line for line in shown.stderr.splitlines() if line.startswith("approve:")]
        assert approve == f"approve: interlock answer {approval.id} yes --server {url} --by alice"
        as_bob = invoke("answer", approval.id, "yes", "--server", url, "--by", "bob")
        assert as_bob.returncode == 4 and "takes a yes only from alice, and this one answers as bob" in " ".join(
            as_bob.stderr.split()
        )
        pasted = invoke(*shlex.split(approve.removeprefix("approve: interlock ")))
        assert pasted.returncode == 0, pasted.stderr
        async with interlock.connect(url) as broker:
            answered = await broker.get(approval.id)
        assert answered.response is not None and answered.response.by == "alice"


@pytest.mark.slow
async def test_ask_says_how_to_answer_on_one_line_naming_the_store_it_was_given(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'a-folder-whose-name-is-long-enough-to-pass-a-terminal-width' / 'tutorial.db'}"
    (tmp_path / "a-folder-whose-name-is-long-enough-to-pass-a-terminal-width").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("INTERLOCK_URL", "COLUMNS")}
    async with interlock.connect(db) as broker:
        after = await broker.last_event_id()
        proc = await asyncio.create_subprocess_exec(
            *INTERLOCK, "ask", "Ship it?", "--confirm", "--to", "alice", "--db", db,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=tmp_path,
        )  # fmt: skip
        with anyio.fail_after(30):
            async for event in broker.events(after=after, follow=True):
                if event.type == "created" and event.request is not None:
                    await broker.resolve(event.request.id, True, by="alice")
                    break
            out, said = await proc.communicate()
    assert event.request is not None and (proc.returncode, out.decode().strip()) == (0, "true")
    (line,) = [line for line in said.decode().splitlines() if "answer with" in line]
    command = f"interlock answer {event.request.id} VALUE --db {db}"
    assert line.endswith(f"; answer with: {command}   (VALUE: yes or no (or approve, deny, ...))"), said


def test_reject_in_the_terminal(db: str) -> None:
    async def make() -> str:
        async with interlock.connect(db) as broker:
            return (await broker.create(interlock.Confirm("Ok?"))).id

    request_id = asyncio.run(make())
    assert run("reject", request_id, "--reason", "no", db=db).returncode == 0
    assert run("reject", request_id, db=db).returncode == 1
    shown = json.loads(run("show", request_id, db=db).stdout)
    assert shown["status"] == "rejected"
    assert shown["response"]["reason"] == "no"


def test_cancel_withdraws_a_request_from_the_terminal(db: str) -> None:
    # There was no command for it: only Python's cancel and the API's /cancel.
    async def make() -> str:
        async with interlock.connect(db) as broker:
            return (await broker.create(interlock.Confirm("Ok?"), to="alice")).id

    request_id = asyncio.run(make())
    withdrawn = run("cancel", request_id, "--reason", "asked by mistake", db=db)
    assert (withdrawn.returncode, withdrawn.stderr.strip()) == (0, f"withdrew {request_id}"), withdrawn.stderr
    again = run("cancel", request_id, db=db)
    assert again.returncode == 1 and "was already cancelled by" in again.stderr, again.stderr
    shown = json.loads(run("show", request_id, db=db).stdout)
    assert (shown["status"], shown["response"]["reason"], shown["response"]["via"]) == (
        "cancelled",
        "asked by mistake",
        "cli",
    )
    assert run("cancel", "01NOSUCHREQUEST000000000000", db=db).returncode == 1


@pytest.mark.slow
async def test_watch_answers_requests_in_the_terminal_as_they_arrive(db: str) -> None:
    async with interlock.connect(db) as broker:
        waiting = await broker.create(interlock.Choice("Colour?", ["Red", "Green"], allow_other=True), to="alice")
        env = {**os.environ, "INTERLOCK_URL": db}
        proc = await asyncio.create_subprocess_exec(
            *INTERLOCK, "watch", "--to", "alice", "--by", "alice",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        assert proc.stdin is not None and proc.stdout is not None

        async def settled(request_id: str) -> interlock.Request:
            with anyio.fail_after(30):
                return await broker.watch(request_id, timeout=30)

        async def prompt_shown(text: str) -> None:
            seen = b""
            with anyio.fail_after(30):
                while text.encode() not in seen:
                    chunk = await proc.stdout.read(256)  # type: ignore[union-attr]
                    assert chunk, "watch ended early"
                    seen += chunk

        await prompt_shown("Colour?")
        proc.stdin.write(b"green\n")  # an option's label, any case
        assert (await settled(waiting.id)).answer == "Green"

        live = await broker.create(interlock.Choice("Size?", ["s", "m"], allow_other=True), to="alice")
        await prompt_shown("Size?")
        proc.stdin.write(b"extra large\n")  # not an option: passed through as free text
        assert (await settled(live.id)).answer == "extra large"

        elsewhere = await broker.create(interlock.Confirm("Ship it?"), to="alice")
        await prompt_shown("Ship it?")
        await broker.resolve(elsewhere.id, True, by="bob")  # answered elsewhere while prompting

        await broker.create(interlock.Text("For bob?"), to="bob")  # not alice's: not shown
        last = await broker.create(interlock.Confirm("Roll back?"), to="alice")
        await prompt_shown("Roll back?")
        proc.stdin.write(b"n\n")
        assert (await settled(last.id)).answer is False

        unanswered = await broker.create(interlock.Text("Anything else?"), to="alice")
        await prompt_shown("Anything else?")
        proc.stdin.close()  # Ctrl-D at a prompt: stop watching, leave everything else pending
        with anyio.fail_after(30):
            out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        assert "Traceback" not in err.decode() and "never retrieved" not in err.decode()
        assert "For bob?" not in out.decode()
        assert (await broker.get(unanswered.id)).status is interlock.Status.PENDING
        stored = await broker.get(last.id)
        assert stored.response is not None
        assert (stored.response.by, stored.response.via) == ("alice", "terminal")


def test_watch_takes_piped_answers_in_turn_and_stops_when_they_run_out(db: str) -> None:
    """Lines from a pipe were all written for the prompts to come: none is dropped for
    having arrived before its prompt showed, and the input's end stops watching only once
    every line has answered one."""

    async def make() -> list[str]:
        async with interlock.connect(db) as broker:
            asks = [
                interlock.Confirm("Deploy?"),
                interlock.Choice("Region?", ["eu", "us"]),
                interlock.Text("Why?"),
                interlock.Confirm("Page the on-call?"),
            ]
            return [(await broker.create(ask, to="alice")).id for ask in asks]

    ids = asyncio.run(make())
    done = invoke(
        "watch", "--to", "alice", "--by", "alice", env={**os.environ, "INTERLOCK_URL": db}, input="y\n2\nbecause\n"
    )
    assert done.returncode == 0, done.stderr

    async def read() -> list[interlock.Request]:
        async with interlock.connect(db) as broker:
            return [await broker.get(request_id) for request_id in ids]

    deploy, region, why, page = asyncio.run(read())
    assert (deploy.answer, region.answer, why.answer) == (True, "us", "because")
    assert all(r.response is not None and r.response.via == "terminal" for r in (deploy, region, why))
    assert page.status is interlock.Status.PENDING  # no line left for it: left pending


def test_error_messages_keep_brackets_and_ask_says_it_is_waiting(db: str) -> None:
    async def make() -> str:
        async with interlock.connect(db) as broker:
            return (await broker.create(interlock.Choice("Colour?", ["red"]))).id

    request_id = asyncio.run(make())
    bad = run("answer", request_id, "[blue]", db=db)
    assert bad.returncode == 4
    assert "'[blue]' is not one of the options" in bad.stderr  # not eaten as terminal markup
    expired = run("ask", "Deploy?", "--confirm", "--timeout", "100ms", db=db)
    assert "Waiting for an answer to" in expired.stderr
    assert "interlock answer" in expired.stderr


def test_every_command_that_reaches_a_store_or_a_server_takes_a_token() -> None:
    # A command given --server URL (or INTERLOCK_URL) must be able to authenticate there.
    import typer.main

    from interlock.cli import app

    def commands(group: Any, path: str) -> list[tuple[str, Any]]:
        found: list[tuple[str, Any]] = []
        for name, command in group.commands.items():
            found += (
                commands(command, f"{path} {name}") if hasattr(command, "commands") else [(f"{path} {name}", command)]
            )
        return found

    def options(command: Any) -> set[str]:
        return {option for p in command.params for option in getattr(p, "opts", ())}

    found = [(name, options(c)) for name, c in commands(typer.main.get_command(app), "interlock")]
    # Not serve, token, the keys nor deliver: they work on the store itself.
    reaching = [name for name, opts in found if "--server" in opts]
    assert [name for name, opts in found if "--server" in opts and "--token" not in opts] == []
    assert len(reaching) > 25


def test_a_default_an_option_s_help_says_in_words_is_shown_by_help() -> None:
    # "[default: 20 with auth, ...]" written in a help text was taken for terminal markup
    # and dropped from --help, while the reference pages showed it.
    import typer.main

    from interlock.cli import app

    def commands(group: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                yield from commands(command, [*path, name])
            else:
                yield [*path, name], command

    said = 0
    for path, command in commands(typer.main.get_command(app), []):
        written = [p.help.split("\\[default: ", 1)[1] for p in command.params if "\\[default: " in (p.help or "")]
        if not written:
            continue
        shown = " ".join(invoke(*path, "--help", env={**os.environ, "COLUMNS": "400"}).stdout.split())
        for default in written:
            assert f"[default: {default}" in shown, (path, default)
            said += 1
    assert said >= 10  # serve's --rate-limit, --max-streams, its durations, worker's --name, ...


def test_a_command_s_help_runs_each_paragraph_on_as_one_text_where_the_source_wrapped_it() -> None:
    # `inbox --help` broke a sentence after "prints (on stderr)", where its docstring's
    # line ended, however wide the terminal.
    shown = invoke("inbox", "--help", env={**os.environ, "COLUMNS": "300"}).stdout
    assert "the command prints (on stderr) the `--after CURSOR` that lists the next page" in shown
    exits = invoke("ask", "--help", env={**os.environ, "COLUMNS": "300"}).stdout
    assert "Exit codes: 0 answered (approved), 1 declined or rejected" in exits


def test_each_group_s_help_lists_a_command_on_the_lines_its_own_help_gives_it() -> None:
    # `interlock --help` (and `interlock run --help`, ...) lists each command with the first
    # paragraph of its own help; a docstring's line breaks are no breaks of that paragraph.
    import typer.main

    from interlock.cli import app

    def groups(group: Any, path: list[str]) -> list[tuple[list[str], Any]]:
        found = [(path, group)]
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                found += groups(command, [*path, name])
        return found

    wrapped = []
    for path, group in groups(typer.main.get_command(app), []):
        listed = invoke(*path, "--help", env={**os.environ, "COLUMNS": "1000", "NO_COLOR": "1"}).stdout
        for name, command in group.commands.items():
            first = " ".join(inspect.cleandoc(command.help or "").split("\n\n")[0].split())
            if f" {name} " not in listed or first not in listed:
                wrapped.append(f"interlock {' '.join([*path, name])}")
    assert wrapped == []


def test_each_argument_and_option_says_what_it_is_in_its_command_s_help() -> None:
    import typer.main

    from interlock.cli import app

    def unexplained(group: Any, path: list[str]) -> list[str]:
        found: list[str] = []
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                found += unexplained(command, [*path, name])
                continue
            found += [f"interlock {' '.join([*path, name])} {param.name}" for param in command.params if not param.help]
        return found

    assert unexplained(typer.main.get_command(app), []) == []


def test_a_command_exits_1_for_what_is_not_there_or_not_now_and_4_for_what_is_asked_wrongly(
    db: str, tmp_path: Path
) -> None:
    # The exit codes the CLI's reference gives every command: a script branches on them.
    async def make() -> tuple[str, str]:
        async with interlock.connect(db) as broker:
            settled = (await broker.create(interlock.Confirm("Ok?"))).id
            await broker.resolve(settled, True)
            return settled, (await broker.create(interlock.Confirm("Ok?"))).id

    settled, pending = asyncio.run(make())
    unknown = "01JZZZZZZZZZZZZZZZZZZZZZZZ"
    for args, code in (
        (("show", unknown), 1),
        (("answer", unknown, "yes"), 1),
        (("answer", settled, "yes"), 1),
        (("reject", settled), 1),
        (("run", "show", "run-nope"), 1),
        (("answer", pending, "perhaps"), 4),
        (("show", pending, "--db", f"sqlite:///{tmp_path / 'not-there.db'}"), 4),
    ):
        done = run(*args, db=db)
        assert done.returncode == code, (args, done.returncode, done.stderr)
        assert done.stderr.startswith("error: "), (args, done.stderr)
    assert json.loads(run("show", pending, db=db).stdout)["status"] == "pending"  # nothing changed it
