"""`interlock show` lists offered grants unticked beside their choices; `interlock answer
--grant` echoes the ones approved; `interlock grants` lists, checks, gives and revokes."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import interlock
from cli_support import invoke, new_store
from interlock.grant_tokens import GrantSigner, verify_grant_token
from interlock.model import Choice, Confirm, Option, Status
from serve_support import serve

pytestmark = pytest.mark.anyio


def run(*args: str, db: str) -> subprocess.CompletedProcess[str]:
    return invoke(*args, env={**os.environ, "INTERLOCK_URL": db, "COLUMNS": "200"})


@pytest.fixture
def db(tmp_path: Path) -> str:
    return new_store(tmp_path / "cli.db")


async def offering(db: str) -> str:
    async with interlock.connect(db) as broker:
        request = await broker.create(
            [
                Confirm("Deploy?", id="ok", grants=[{"with": "repo:web", "can": "deploy"}]),
                Choice(
                    "Where?",
                    [Option("prod", grants=[{"with": "env:prod", "can": "write", "exp": None}]), "staging"],
                    id="env",
                ),
            ],
            to="alice",
            requester="bot",
        )
        return request.id


async def test_show_lists_each_offer_unticked_beside_the_choice_that_triggers_it(db: str) -> None:
    request_id = await offering(db)
    shown = run("show", request_id, db=db)
    assert shown.returncode == 0
    assert json.loads(shown.stdout)["asks"][0]["grants"] == [{"with": "repo:web", "can": "deploy"}]
    lines = shown.stderr.splitlines()
    assert (
        "  [ ] grant deploy on repo:web for the venue's default time, if you approve 'ok': --grant 'deploy@repo:web'"
        in lines
    )
    assert (
        "  [ ] grant write on env:prod with no expiry, if you select 'prod' in 'env': --grant 'write@env:prod'" in lines
    )


async def test_answer_issues_only_the_echoed_grants_the_choices_trigger(db: str) -> None:
    request_id = await offering(db)
    untriggered = run(
        "answer", request_id, "ok=yes", "env=staging", "--grant", "write@env:prod", "--by", "alice", db=db
    )
    assert untriggered.returncode == 4
    assert "not triggered" in untriggered.stderr
    malformed = run("answer", request_id, "ok=yes", "env=prod", "--grant", "write", db=db)
    assert malformed.returncode == 4 and "CAN@WITH" in malformed.stderr
    async with interlock.connect(db) as broker:
        assert (await broker.get(request_id)).status is Status.PENDING
    done = run("answer", request_id, "ok=yes", "env=prod", "--grant", "write@env:prod", "--by", "alice", db=db)
    assert done.returncode == 0, done.stderr
    listed = [json.loads(line) for line in run("grants", "list", "--json", db=db).stdout.splitlines()]
    assert [(g["can"], g["with"], g["issuer"], g["audience"], g["exp"]) for g in listed] == [
        ("write", "env:prod", "alice", "bot", None)
    ]
    grant_id = listed[0]["id"]
    table = run("grants", "list", db=db).stdout
    assert grant_id in table and "live" in table
    assert run("grants", "check", "--audience", "bot", "--with", "env:prod", "--can", "write", db=db).returncode == 0
    assert json.loads(run("grants", "show", grant_id, db=db).stdout)["request_id"] == request_id
    assert run("grants", "revoke", grant_id, "--by", "alice", db=db).returncode == 0
    again = run("grants", "revoke", grant_id, db=db)
    assert again.returncode == 1 and "revoked already" in again.stderr
    unknown = run("grants", "revoke", "no-such-grant", db=db)
    assert unknown.returncode == 1 and "no grant no-such-grant" in unknown.stderr
    assert run("grants", "check", "--audience", "bot", "--with", "env:prod", "--can", "write", db=db).returncode == 1


def test_grants_give_makes_a_delegation_with_the_expiry_asked_for(db: str) -> None:
    given = run(
        "grants",
        "give",
        "bot",
        "--with",
        "interlock:inbox/alice",
        "--can",
        "hitl/request",
        "--by",
        "alice",
        "--no-expiry",
        db=db,
    )
    assert given.returncode == 0, given.stderr
    grant = json.loads(given.stdout)
    assert (grant["issuer"], grant["audience"], grant["exp"], grant["request_id"]) == ("alice", "bot", None, None)
    default = json.loads(run("grants", "give", "bot", "--with", "x", "--can", "y", db=db).stdout)
    assert default["exp"] is not None
    # A deadline reads to the nearest unit: a week's grant, listed at once, ends "in 7d".
    (listed,) = [line for line in run("grants", "list", db=db).stdout.splitlines() if default["id"] in line]
    assert " in 7d " in f" {listed} ", listed
    both = run("grants", "give", "bot", "--with", "x", "--can", "y", "--exp", "5d", "--no-expiry", db=db)
    assert both.returncode == 4


def test_grants_give_takes_how_long_the_grant_lasts_as_every_duration_option_does(db: str) -> None:
    # `--exp 3d` was refused: "Input should be a valid integer".
    given = run("grants", "give", "bot", "--with", "x", "--can", "y", "--exp", "3d", db=db)
    assert given.returncode == 0, given.stderr
    lasts = datetime.fromisoformat(json.loads(given.stdout)["expires_at"]) - datetime.now(UTC)
    assert timedelta(days=3) - timedelta(minutes=1) < lasts <= timedelta(days=3)
    at = run("grants", "give", "bot", "--with", "x", "--can", "y", "--exp", "4102444800", db=db)
    assert json.loads(at.stdout)["expires_at"] == "2100-01-01T00:00:00+00:00"  # a Unix time, as before


@pytest.mark.slow
async def test_serve_takes_the_grant_settings_and_the_cli_answers_with_grants_through_it(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'served.db'}"
    pem = tmp_path / "grant-key.pem"
    pem.write_bytes(
        Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    tokens = {}
    for args in (["alice", "--human"], ["bob", "--human"], ["deployer", "--agent", "--owner", "alice"]):
        tokens[args[0]] = invoke("token", "create", *args, "--db", db).stdout.strip()
    flags = ["--grant-ceiling", "1h", "--grant-key", str(pem), "--open-inboxes"]
    async with serve("--db", db, *flags) as served:
        url = served.url
        async with httpx.AsyncClient(base_url=f"{url}/api/v1", timeout=10) as http:
            keys = (await http.get("/grants/keys")).json()
            assert keys["keys"][0]["kid"] == GrantSigner.from_pem(pem).kid  # signed with the key given
            agent = {"Authorization": f"Bearer {tokens['deployer']}"}
            forever = {"type": "confirm", "prompt": "Ok?", "grants": [{"with": "a", "can": "x", "exp": None}]}
            refused = await http.post("/requests", json={"asks": [forever], "to": "bob"}, headers=agent)
            assert refused.status_code == 422 and "no expiry" in refused.json()["detail"]  # the ceiling
            offer = {"type": "confirm", "id": "ok", "prompt": "Ok?", "grants": [{"with": "repo:web", "can": "deploy"}]}
            created = await http.post("/requests", json={"asks": [offer], "to": "bob"}, headers=agent)
            assert created.status_code == 201, created.text  # open inboxes: the agent asks bob
        request_id = created.json()["id"]

        def cli(who: str, *args: str) -> subprocess.CompletedProcess[str]:
            return invoke(
                *args, env={**os.environ, "INTERLOCK_URL": url, "INTERLOCK_TOKEN": tokens[who], "COLUMNS": "200"}
            )

        assert "--grant 'deploy@repo:web'" in cli("bob", "show", request_id).stderr
        posing = cli("bob", "answer", request_id, "yes", "--by", "alice")  # the server records bob
        assert posing.returncode == 4 and "whom your token names (bob)" in posing.stderr, posing.stderr
        assert cli("bob", "claim", request_id, "--by", "alice").returncode == 4
        assert cli("bob", "answer", request_id, "yes", "--grant", "deploy@repo:web").returncode == 0
        (line,) = cli("deployer", "grants", "list", "--json").stdout.splitlines()
        shown = json.loads(cli("deployer", "grants", "show", json.loads(line)["id"]).stdout)
        claims = verify_grant_token(shown["token"], keys, audience="deployer", with_="repo:web", can="deploy")
        assert claims.issuer == "bob"
        assert claims.expires_at is not None and claims.expires_at.timestamp() - claims.issued_at.timestamp() <= 3600


@pytest.mark.parametrize("option", ["--grant-default", "--grant-ceiling"])
def test_serve_refuses_a_grant_duration_past_a_thousand_years(tmp_path: Path, option: str) -> None:
    # It started, and every approval that issued a grant then failed with a 500.
    refused = invoke(
        "serve",
        "--port",
        "0",
        "--db",
        f"sqlite:///{tmp_path / 'x.db'}",
        option,
        "3000000d",
        env={**os.environ, "COLUMNS": "300"},
    )
    assert refused.returncode == 2  # a usage error, as click says in process (the command exits 4)
    assert f"Invalid value for '{option}': '3000000d' is more than a thousand years" in refused.stderr
    assert not (tmp_path / "x.db").exists()  # refused before anything was opened


async def test_a_grant_given_or_revoked_on_a_local_store_is_the_local_user_s_unless_by_names_another(
    db: str,
) -> None:
    # They recorded nobody (issuer and revoked_by null), where answer, reject, claim and
    # run send record the local user: the record of who did what depended on the command.
    def as_carol(*args: str) -> subprocess.CompletedProcess[str]:
        return invoke(*args, env={**os.environ, "INTERLOCK_URL": db, "INTERLOCK_USER": "carol", "COLUMNS": "200"})

    given = as_carol("grants", "give", "bot", "--with", "repo:web", "--can", "deploy")
    assert given.returncode == 0, given.stderr
    grant = json.loads(given.stdout)
    assert grant["issuer"] == "carol"
    assert as_carol("grants", "revoke", grant["id"]).returncode == 0
    assert json.loads(as_carol("grants", "show", grant["id"]).stdout)["revoked_by"] == "carol"
    # Her own inbox is hers to give: as the local user she gives it, as she answers.
    own = as_carol("grants", "give", "bot", "--with", "interlock:inbox/carol", "--can", "hitl/request")
    assert own.returncode == 0 and json.loads(own.stdout)["issuer"] == "carol", own.stderr
    named = as_carol("grants", "give", "bot", "--with", "x", "--can", "y", "--by", "dave")
    assert json.loads(named.stdout)["issuer"] == "dave"


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store of each kind the CLI opens on its own: a SQLite file, a PostgreSQL database."""
    if request.param == "sqlite":
        yield new_store(tmp_path / "cli.db")
        return
    databases: Callable[[], AbstractContextManager[str]] = request.getfixturevalue("pg_databases")
    with databases() as url:
        yield url


def test_grants_list_shows_a_grant_from_a_person_cut_off_as_not_in_force_and_how_to_restore_it(any_store: str) -> None:
    # `token revoke alice`: the grant she gave is listed as "issuer cut off" (not "live"),
    # saying why and what gives it back; `--json` and `grants show` say so too, and
    # nothing stored of it changed. `token create alice --human` restores it.
    for person in ("alice", "bob"):
        assert run("token", "create", person, "--human", db=any_store).returncode == 0
    ids = {}
    for person in ("alice", "bob"):
        given = run("grants", "give", "bot", "--with", "repo:web", "--can", "deploy", "--by", person, db=any_store)
        assert given.returncode == 0, given.stderr
        ids[person] = json.loads(given.stdout)["id"]
    assert run("token", "revoke", "alice", db=any_store).returncode == 0

    listed = run("grants", "list", "--audience", "bot", db=any_store)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
    assert rows[ids["alice"]].rstrip().endswith("issuer cut off"), listed.stdout
    assert rows[ids["bob"]].rstrip().endswith("live"), listed.stdout
    said = " ".join(listed.stderr.split())
    assert "the grants alice gave are not in force: alice is cut off" in said, said
    assert "`interlock token create alice --human` restores them" in said and "bob" not in said
    as_json = {g["id"]: g for g in map(json.loads, run("grants", "list", "--json", db=any_store).stdout.splitlines())}
    assert as_json[ids["alice"]]["issuer_cut_off"] is True and as_json[ids["alice"]]["revoked_at"] is None
    assert as_json[ids["bob"]]["issuer_cut_off"] is False
    shown = json.loads(run("grants", "show", ids["alice"], db=any_store).stdout)
    assert shown["issuer_cut_off"] is True and shown["revoked_at"] is None
    live = run("grants", "list", "--audience", "bot", "--live", "--json", db=any_store).stdout.splitlines()
    assert [json.loads(line)["id"] for line in live] == [ids["bob"]]

    assert run("token", "create", "alice", "--human", db=any_store).returncode == 0
    again = run("grants", "list", "--audience", "bot", db=any_store)
    assert "cut off" not in again.stdout + again.stderr, again
    assert all(line.rstrip().endswith("live") for line in again.stdout.splitlines()[1:]), again.stdout
