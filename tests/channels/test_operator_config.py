"""What an operator gets wrong in a routing file, refused by `interlock serve` before it
opens its store: one line naming the file and the option (or the line of a syntax error),
no traceback, nothing written. Run in process (cli_support): the command exits before it
serves. A store the server cannot open, and a routing kept in the store that it cannot
use, are refused at start on one line too (a real process: uvicorn runs the start-up)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cli_support import invoke, new_store
from interlock.channels import lacking_secrets, unaddressed
from interlock.routing import routing_from_dict
from serve_support import refused_at_start

BAD = {
    "syntax": ('inbox_url = "http://x.example"\n[channels.hook\ntype = "webhook"\n', "line 2"),
    "unknown-channel": (
        '[recipients.alice]\nchannels = ["sms"]\n',
        "recipients.alice.channels: no channel named 'sms'",
    ),
    "unknown-type": ('[channels.pager]\ntype = "sms"\n', "channels.pager.type: unknown channel type 'sms'"),
    "smtp-url": (
        '[channels.mail]\ntype = "email"\nfrom = "i@x.example"\nhost = "smtp://smtp.x.example:587"\n',
        "channels.mail.host: the mail server's host name",
    ),
    "host-and-port": (
        '[channels.mail]\ntype = "email"\nfrom = "i@x.example"\nhost = "smtp.x.example:587"\n',
        "channels.mail.host",
    ),
    "tls-and-starttls": (
        '[channels.mail]\ntype = "email"\nfrom = "i@x.example"\ntls = true\nstarttls = true\n',
        "channels.mail: tls (TLS from the start, port 465) or starttls",
    ),
    "starttls-as-text": (
        '[channels.mail]\ntype = "email"\nfrom = "i@x.example"\nstarttls = "no"\n',
        "channels.mail.starttls: true or false",
    ),
    "email-timeout-as-text": (
        '[channels.mail]\ntype = "email"\nfrom = "i@x.example"\ntimeout = "10s"\n',
        "channels.mail.timeout: a number of seconds",
    ),
    "slack-timeout-as-text": (
        '[channels.chat]\ntype = "slack"\ntoken = "xoxb-1"\ntimeout = "soon"\n',
        "channels.chat.timeout: a number of seconds",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_serve_refuses_a_bad_routing_file_on_one_line_naming_the_file_and_the_option(case: str, tmp_path: Path) -> None:
    text, expected = BAD[case]
    routing = tmp_path / "routing.toml"
    routing.write_text(text)
    store = tmp_path / "interlock.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    result = invoke("serve", "--port", "0", "--db", f"sqlite:///{store}", "--routing", str(routing), env=env)
    assert result.returncode == 4, result.stderr
    [line] = result.stderr.splitlines()  # one line, however narrow the terminal
    assert line.startswith("error: ") and "Traceback" not in line
    assert str(routing) in line and expected in line, line
    assert not store.exists()  # nothing written


def test_a_channel_without_its_secret_is_named_with_what_it_cannot_do() -> None:
    routing = routing_from_dict(
        {
            "channels": {
                "hook": {"type": "webhook", "url": "http://127.0.0.1:9/"},
                "signed": {"type": "webhook", "url": "http://127.0.0.1:9/", "secret": "0123456789abcdef"},
                "chat": {"type": "slack", "token": "xoxb-1"},
            }
        }
    )
    hook, chat = lacking_secrets(routing.channels)
    assert hook.startswith("channels.hook has no secret: its webhooks go unsigned")
    assert chat.startswith("channels.chat has no signing_secret") and "/slack/interactive/chat" in chat


def test_a_route_that_gives_a_channel_without_an_address_of_its_own_none_is_named() -> None:
    # Each message such a route sends on that channel fails, to end as a dead letter.
    routing = routing_from_dict(
        {
            "channels": {
                "hook": {"type": "webhook"},
                "shared": {"type": "webhook", "url": "http://127.0.0.1:9/"},
                "mail": {"type": "email", "from": "i@x.example"},
                "chat": {"type": "slack", "token": "xoxb-1"},
                "room": {"type": "slack", "token": "xoxb-1", "channel": "C0OPS"},
            },
            "recipients": {
                "alice": {"channels": ["mail", "hook"], "addresses": {"mail": "alice@x.example", "hook": "http://h/"}},
                "bob": {"channels": ["mail", "shared", "room"]},
            },
            "teams": {"ops": {"members": ["alice"], "channels": ["chat"]}},
            "default": {"channels": ["hook", "shared"]},
        }
    )
    assert unaddressed(routing) == [
        "recipients.bob sends on channels.mail with no address: each message there fails until "
        "recipients.bob.addresses.mail gives an email address",
        "teams.ops sends on channels.chat with no address: each message there fails until "
        "teams.ops.addresses.chat gives a Slack user or channel id (or channels.chat.channel, for every route)",
        "default sends on channels.hook with no address: each message there fails until "
        "default.addresses.hook gives a URL (or channels.hook.url, for every route)",
    ]


def test_routing_set_takes_a_route_without_an_address_and_says_what_will_fail(tmp_path: Path) -> None:
    routing = tmp_path / "routing.toml"
    routing.write_text('[channels.hook]\ntype = "webhook"\n[default]\nchannels = ["hook"]\n')
    store = new_store(tmp_path / "interlock.db")
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    taken = invoke("routing", "set", str(routing), "--db", store, env=env)
    assert taken.returncode == 0, taken.stderr
    assert "warning: default sends on channels.hook with no address" in " ".join(taken.stderr.split()), taken.stderr
    assert '"default"' in invoke("routing", "show", "--db", store, env=env).stdout


@pytest.mark.slow
def test_serve_refuses_a_kept_routing_whose_channel_it_cannot_make_on_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A routing kept in the store by a node that had a channel plugin this one lacks.
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "pager_plugin.py").write_text("from interlock.channels.webhook import WebhookChannel as Pager\n")
    monkeypatch.syspath_prepend(str(plugins))
    routing = tmp_path / "routing.toml"
    routing.write_text(
        '[channels.pager]\ntype = "pager_plugin:Pager"\n'
        'url = "http://127.0.0.1:9/hook"\nsecret = "s3cret-s3cret-s3cret"\n'
    )
    store = new_store(tmp_path / "interlock.db")
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_") and k != "PYTHONPATH"}
    assert invoke("routing", "set", str(routing), "--db", store, env=env).returncode == 0

    line = refused_at_start(store, env)
    assert "the routing kept in the store cannot be used here: channels.pager.type" in line, line
    assert "No module named 'pager_plugin'" in line and "interlock routing set FILE" in line, line


def test_deliver_refuses_a_routing_file_whose_channel_it_cannot_make_and_keeps_the_one_in_use(tmp_path: Path) -> None:
    # It kept the file's routing in the store first, then refused it: every server then
    # logged that routing's failure every few seconds, and none started again.
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text('[channels.hook]\ntype = "webhook"\nurl = "http://127.0.0.1:9/hook"\nsecret = "' + "s" * 32 + '"\n')
    bad.write_text('[channels.hook]\ntype = "carrierpigeon"\n')
    store = new_store(tmp_path / "interlock.db")
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    assert invoke("routing", "set", str(good), "--db", store, env=env).returncode == 0
    before = invoke("routing", "show", "--db", store, env=env).stdout
    refused = invoke("deliver", "--routing", str(bad), "--db", store, env=env)
    assert refused.returncode == 4, refused.stderr
    [line] = refused.stderr.splitlines()
    assert line.startswith(f"error: {bad}: channels.hook.type: unknown channel type 'carrierpigeon'"), line
    assert invoke("routing", "show", "--db", store, env=env).stdout == before


@pytest.mark.slow
@pytest.mark.parametrize(
    ("store", "why"),
    [
        (
            "sqlite:///{tmp}/no-such-folder/interlock.db",
            "cannot open the SQLite store at {tmp}/no-such-folder/interlock.db: its folder {tmp}/no-such-folder "
            "does not exist (SQLite: unable to open database file)",
        ),
        (
            "postgresql://postgres@127.0.0.1:5432/interlock_no_such_database",
            "cannot open the PostgreSQL store at postgresql://postgres@127.0.0.1:5432/interlock_no_such_database: "
            'database "interlock_no_such_database"',
        ),
    ],
)
def test_serve_refuses_a_store_it_cannot_open_on_one_line(store: str, why: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    line = refused_at_start(store.format(tmp=tmp_path), env)
    assert line.startswith(f"error: {why.format(tmp=tmp_path)}"), line
    assert not (tmp_path / "no-such-folder").exists()


def test_a_command_on_a_postgresql_database_that_is_not_there_says_so_alone() -> None:
    store = "postgresql://postgres@127.0.0.1:5432/interlock_no_such_database"
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    result = invoke("inbox", "--db", store, env=env)
    assert result.returncode == 4, result.stderr
    [line] = result.stderr.splitlines()
    assert 'database "interlock_no_such_database" does not exist' in line, line
    assert "interlock serve" not in line  # no server to start: the database is missing
