"""`interlock team`, `interlock claim`, `interlock inbox` for a team's member and
`interlock routing`, run in process (cli_support) against a SQLite file."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import interlock
from cli_support import invoke
from interlock import Confirm
from interlock.broker import LocalBroker, stored_routing

pytestmark = pytest.mark.anyio


def run(*args: str, db: str, user: str = "alice") -> subprocess.CompletedProcess[str]:
    return invoke(*args, env={**os.environ, "INTERLOCK_URL": db, "INTERLOCK_USER": user})


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'teams.db'}"
    for name in ("alice", "bob"):
        assert run("token", "create", name, "--human", db=url).returncode == 0
    return url


def test_teams_are_made_listed_and_changed_and_bad_members_refused(db: str) -> None:
    made = run("team", "add", "ops", "alice", "bob", db=db)
    assert made.returncode == 0 and "team ops: alice, bob" in made.stderr
    assert run("team", "members", "ops", db=db).stdout.split() == ["alice", "bob"]
    refused = run("team", "add", "ops", "zed", db=db)
    assert refused.returncode == 4 and "'zed' is no person here" in refused.stderr
    # and what to do about it, with no one added meanwhile
    assert "make them one first with `interlock token create zed --human`" in " ".join(refused.stderr.split())
    assert run("token", "create", "bot", "--agent", "--owner", "alice", db=db).returncode == 0
    an_agent = run("team", "add", "ops", "bot", db=db)
    assert an_agent.returncode == 4 and "'bot' is an agent here: a team's members are people" in an_agent.stderr
    assert run("team", "members", "ops", db=db).stdout.split() == ["alice", "bob"]
    clash = run("team", "add", "alice", db=db)
    assert clash.returncode == 4 and "'alice' is a person or an agent, not a team" in clash.stderr
    assert run("team", "rm", "ops", "bob", db=db).returncode == 0
    assert run("team", "members", "ops", db=db).stdout.split() == ["alice"]
    unknown = run("team", "rm", "nope", "alice", db=db)
    assert unknown.returncode == 1 and "there is no team named 'nope'" in unknown.stderr
    assert run("team", "rm", "ops", db=db).returncode == 0  # no one named: the team goes
    assert run("team", "members", "ops", db=db).returncode == 1
    assert "ops\tteam" not in run("token", "list", db=db).stdout


def test_teams_are_read_through_a_server_with_a_token_and_changed_on_its_store(
    db: str, serve: Callable[..., contextlib.AbstractContextManager[str]]
) -> None:
    # `team members ops --token TOKEN` was "No such option: --token": the team commands reach
    # a server, but took its token only from INTERLOCK_TOKEN.
    carol = run("token", "create", "carol", "--human", db=db).stdout.strip()
    assert run("team", "add", "ops", "alice", db=db).returncode == 0
    env = {name: value for name, value in os.environ.items() if not name.startswith("INTERLOCK_")}
    with serve(db) as url:
        listed = invoke("team", "members", "ops", "--server", url, "--token", carol, env=env)
        assert listed.returncode == 0 and listed.stdout.split() == ["alice"], listed.stderr
        # Only an admin changes a team through a server, and a token is a person's or an
        # agent's: where it is done instead.
        refused = invoke("team", "add", "ops", "bob", "--server", url, "--token", carol, env=env)
        assert refused.returncode == 4
        assert refused.stderr.strip() == (
            "error: refused: only an admin may change a team: with auth, change the server's teams on its store, "
            "where the server runs: --db sqlite:///path/to/interlock.db (the store `interlock serve --db` names)"
        )
        # Without a token, how one is made, on the server's store (not `token create`
        # through INTERLOCK_URL, which refuses a server).
        tokenless = invoke("team", "members", "ops", env={**env, "INTERLOCK_URL": url})
        assert tokenless.returncode == 4 and "pass --token (whoever runs the server makes one on its store: " in (
            tokenless.stderr
        )
        assert "`interlock token create NAME --human --db sqlite:///path/to/interlock.db`" in tokenless.stderr
    with serve(db, auth=False) as url:  # its operator is an admin
        added = invoke("team", "add", "ops", "bob", "--server", url, env=env)
        assert added.returncode == 0 and "team ops: alice, bob" in added.stderr, added.stderr
    assert run("team", "members", "ops", db=db).stdout.split() == ["alice", "bob"]


async def test_a_member_claims_from_the_command_line_and_the_others_see_it_in_their_inbox(db: str) -> None:
    assert run("team", "add", "ops", "alice", "bob", db=db).returncode == 0
    async with interlock.connect(db) as broker:
        request = await broker.create(Confirm("Fail over?"), to="ops", requester="bot")
    claimed = run("claim", request.id, "--by", "alice", db=db)
    assert claimed.returncode == 0 and f"claimed {request.id}" in claimed.stderr
    taken = run("claim", request.id, "--by", "bob", db=db)
    assert taken.returncode == 1 and "already claimed by alice at " in taken.stderr
    inbox = run("inbox", "--to", "bob", db=db)
    assert request.id in inbox.stdout and "claimed by" in inbox.stdout and "alice" in inbox.stdout
    (line,) = run("inbox", "--to", "bob", "--json", db=db).stdout.splitlines()  # and to a script
    assert (json.loads(line)["id"], json.loads(line)["claim"]["by"]) == (request.id, "alice")
    shown = run("show", request.id, db=db)
    assert json.loads(shown.stdout)["id"] == request.id and "claimed by alice (" in shown.stderr
    assert run("claim", request.id, "--release", "--by", "bob", db=db).returncode == 1  # not bob's
    assert run("claim", request.id, "--release", "--by", "alice", db=db).returncode == 0
    assert run("claim", request.id, "--by", "bob", db=db).returncode == 0
    async with interlock.connect(db) as broker:
        await broker.resolve(request.id, True, by="bob")
    (line,) = run("inbox", "--to", "bob", "--status", "all", "--json", db=db).stdout.splitlines()
    assert json.loads(line)["claim"] is None  # settled: nobody holds it any more


async def test_claiming_a_request_settled_already_says_how_it_settled_in_one_line(db: str) -> None:
    assert run("team", "add", "ops", "alice", "bob", db=db).returncode == 0
    async with interlock.connect(db) as broker:
        request = await broker.create(Confirm("Fail over?"), to="ops", requester="bot")
        await broker.resolve(request.id, True, by="bob")
    for args in (("claim", request.id), ("claim", request.id, "--release")):
        late = run(*args, "--by", "alice", db=db)
        assert late.returncode == 1 and "Traceback" not in late.stderr, late.stderr
        assert late.stderr.startswith(f"error: request {request.id} was already answered by bob at ")
        assert len(late.stderr.splitlines()) == 1


async def test_show_puts_the_person_s_first_look_on_the_timeline(db: str) -> None:
    async with interlock.connect(db) as broker:
        request = await broker.create(Confirm("Purge the queue?"), to="alice", requester="bot")
    for _ in range(2):
        assert run("show", request.id, db=db, user="alice").returncode == 0
    async with interlock.connect(db) as broker:
        events = await broker.find_events(request=request.id)
    assert [(e.type, e.data.get("by")) for e in events] == [("created", None), ("viewed", "alice")]


def test_the_routing_is_set_from_a_file_checked_as_serve_checks_it_and_shown_masked(db: str, tmp_path: Path) -> None:
    missing = run("routing", "show", db=db)
    assert missing.returncode == 1 and "no routing is kept here yet" in missing.stderr
    good = tmp_path / "routing.toml"
    good.write_text(
        '[channels.hook]\ntype = "webhook"\nurl = "http://127.0.0.1:9/hook"\nsecret = "s3cret-s3cret-s3cret"\n'
        '[recipients.alice]\nchannels = ["hook"]\n'
    )
    assert run("routing", "set", str(good), db=db).returncode == 0
    bad = tmp_path / "bad.toml"
    bad.write_text('[recipients.alice]\nchannels = ["sms"]\n')
    refused = run("routing", "set", str(bad), db=db)
    assert refused.returncode == 4 and "no channel named 'sms'" in refused.stderr
    shown = json.loads(run("routing", "show", db=db).stdout)  # unchanged by the refused file
    assert shown["recipients"] == {"alice": {"channels": ["hook"]}}
    assert shown["channels"]["hook"]["secret"] == "***"


def test_the_routing_shown_as_json_edited_and_set_keeps_its_secrets(db: str, tmp_path: Path) -> None:
    first = tmp_path / "routing.toml"
    first.write_text(
        '[channels.hook]\ntype = "webhook"\nurl = "http://127.0.0.1:9/hook"\nsecret = "s3cret-s3cret-s3cret"\n'
        '[recipients.alice]\nchannels = ["hook"]\n'
    )
    assert run("routing", "set", str(first), db=db).returncode == 0
    shown = json.loads(run("routing", "show", db=db).stdout)
    edited = tmp_path / "routing.json"
    edited.write_text(json.dumps({**shown, "recipients": {"bob": {"channels": ["hook"]}}}))
    done = run("routing", "set", str(edited), db=db)
    assert done.returncode == 0, done.stderr

    async def kept() -> Any:
        async with interlock.connect(db) as broker:
            assert isinstance(broker, LocalBroker)
            return await stored_routing(broker.store)

    stored = asyncio.run(kept())
    assert stored["recipients"] == {"bob": {"channels": ["hook"]}}
    assert stored["channels"]["hook"]["secret"] == "s3cret-s3cret-s3cret"  # not the *** it was shown as
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    refused = run("routing", "set", str(broken), db=db)
    assert refused.returncode == 4 and "is not valid JSON" in " ".join(refused.stderr.split())
