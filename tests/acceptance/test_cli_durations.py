"""The command line's durations: every option holding one takes the same syntax (seconds,
or a number with a unit: 250ms, 30s, 10m, 2h, 1d), and a refusal names the option typed."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main

from cli_support import invoke
from interlock.cli import app

ROOT = typer.main.get_command(app)
SERVE = ("serve", "--port", "0")
USAGE_IN_PROCESS = 2  # click's code for a usage error; the `interlock` command makes it 4 (`cli.main`)


def command(path: str) -> Any:
    found: Any = ROOT
    for name in path.split():
        found = found.commands[name]
    return found


def leaves(group: Any, path: str = "") -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    for name, each in group.commands.items():
        found += (
            leaves(each, f"{path} {name}".strip()) if hasattr(each, "commands") else [(f"{path} {name}".strip(), each)]
        )
    return found


def parsed(path: str, *args: str) -> dict[str, Any]:
    """The values `interlock PATH ARGS` would run with, read as the command reads them."""
    return dict(command(path).make_context(path, list(args)).params)


# Each option holding a duration, with what it held: --lease 5m had been refused, as had
# any unit on --hook-timeout, --shutdown-timeout and --poll-interval.
OPTIONS = [
    ("ask", ("hi", "--timeout"), "timeout"),
    ("serve", ("--pause-timeout",), "pause_timeout"),
    ("serve", ("--default-expiry",), "default_expiry"),
    ("serve", ("--grant-default",), "grant_default"),
    ("serve", ("--grant-ceiling",), "grant_ceiling"),
    ("serve", ("--shutdown-timeout",), "shutdown_timeout"),
    ("worker", ("mod:factory", "--lease"), "lease"),
    ("policy set", ("agent", "--hook-timeout"), "hook_timeout"),
    ("deliver", ("--poll-interval",), "poll_interval"),
]


@pytest.mark.parametrize(("path", "before", "name"), OPTIONS, ids=[o[1][-1] for o in OPTIONS])
@pytest.mark.parametrize(("text", "seconds"), [("5", 5.0), ("30s", 30.0), ("1.5", 1.5), ("1m", 60.0), ("1500ms", 1.5)])
def test_every_duration_option_takes_the_one_syntax(
    path: str, before: tuple[str, ...], name: str, text: str, seconds: float
) -> None:
    assert parsed(path, *before, text)[name] == seconds


def test_the_long_units_reach_as_far_as_each_option_allows() -> None:
    assert parsed("worker", "m:f", "--lease", "2h")["lease"] == 7200.0
    assert parsed("serve", "--pause-timeout", "36h", "--grant-ceiling", "30d")["pause_timeout"] == 36 * 3600.0
    assert parsed("serve")["grant_default"] == 7 * 86400.0 and parsed("serve")["shutdown_timeout"] == 5.0
    assert parsed("serve", "--shutdown-timeout", "0")["shutdown_timeout"] == 0.0  # cut at once


@pytest.mark.parametrize(
    ("path", "args", "refusal"),
    [
        (
            "worker",
            ("m:f", "--lease", "5y"),
            "'--lease': '5y' is not a duration: give seconds, or a number with a unit",
        ),
        ("worker", ("m:f", "--lease", "500ms"), "'--lease': '500ms' is less than 1s"),
        ("policy set", ("a", "--hook-timeout", "2m"), "'--hook-timeout': '2m' is more than 60s"),
        ("deliver", ("--poll-interval", "10ms"), "'--poll-interval': '10ms' is less than 50ms"),
        ("ask", ("hi", "--timeout", "-5s"), "'--timeout': '-5s' is not a duration"),
        ("ask", ("hi", "--timeout", "0"), "'--timeout': '0' is less than a microsecond"),
        ("ask", ("hi", "--timeout", "9" * 400), "is longer than any duration kept"),
        ("serve", ("--pause-timeout", "0.0000001s"), "'--pause-timeout': '0.0000001s' is less than a microsecond"),
        ("serve", ("--grant-default", "0.0000001s"), "'--grant-default': '0.0000001s' is less than a microsecond"),
    ],
)
def test_a_duration_an_option_cannot_hold_is_refused_naming_it(path: str, args: tuple[str, ...], refusal: str) -> None:
    with pytest.raises(typer.BadParameter) as refused:
        parsed(path, *args)
    assert refusal in refused.value.format_message()


def test_every_option_that_speaks_of_time_takes_a_duration() -> None:
    # An option added later holding plain seconds would take another syntax again.
    instants = {"--exp"}  # a grant's end: a duration from now, or a Unix time (the test below)
    timed = re.compile(r"\bseconds\b|\bhow long\b|\bduration\b|\bexpire after\b", re.IGNORECASE)
    checked, plain = [], []
    for path, each in leaves(ROOT):
        arguments = ["m:f" if p.name == "target" else "x" for p in each.params if p.param_type_name == "argument"]
        for param in each.params:
            option = param.opts[0]
            if param.param_type_name != "option" or option in instants or not timed.search(param.help or ""):
                continue
            checked.append(option)
            try:
                held = parsed(path, *arguments, option, "1m")[param.name]
            except typer.BadParameter:
                held = None
            if held != 60.0:
                plain.append(f"interlock {path} {option}")
    assert plain == []
    assert sorted(checked) == sorted(o[1][-1] for o in OPTIONS)


GIVE = ("bot", "--with", "x", "--can", "y")


def test_a_grant_s_exp_takes_a_duration_from_now_or_the_unix_time_it_ends_at() -> None:
    # `grants give --exp 3d` was refused ("Input should be a valid integer"): only Unix
    # seconds were taken, where every other option of the command line takes durations.
    before = int(time.time())
    exp = parsed("grants give", *GIVE, "--exp", "3d")["exp"]
    assert before + 3 * 86400 <= exp <= time.time() + 3 * 86400
    assert parsed("grants give", *GIVE, "--exp", "90m")["exp"] - before in range(90 * 60 - 1, 90 * 60 + 60)
    assert parsed("grants give", *GIVE, "--exp", "4102444800")["exp"] == 4102444800  # as before: the Unix time
    assert parsed("grants give", *GIVE)["exp"] is None  # the venue's default


@pytest.mark.parametrize(
    ("value", "refusal"),
    [
        ("3y", "'--exp': '3y' is not a duration: give how long from now, a number with a unit: 30m, 12h, 3d; or"),
        ("500ms", "'--exp': '500ms' is less than 1s"),
        ("400000d", "'--exp': '400000d' is more than a thousand years"),
        ("1.5", "'--exp': '1.5' has no unit: give how long from now"),
        ("3600", "'--exp': '3600' is a Unix time past already (1970-01-01 01:00:00 UTC): for how long the grant"),
    ],
)
def test_an_exp_that_is_no_duration_or_future_unix_time_is_refused_naming_it(value: str, refusal: str) -> None:
    with pytest.raises(typer.BadParameter) as refused:
        parsed("grants give", *GIVE, "--exp", value)
    assert refusal in refused.value.format_message()


@pytest.mark.parametrize(
    ("option", "value"),
    [("--pause-timeout", "400000d"), ("--default-expiry", "400000d"), ("--grant-ceiling", "400000d")],
)
def test_serve_refuses_a_duration_past_its_limit_naming_the_option(tmp_path: Path, option: str, value: str) -> None:
    # "pause_timeout is 3.456e+10 seconds, more than a thousand years": the Python name.
    refused = invoke(*SERVE, "--db", f"sqlite:///{tmp_path / 'x.db'}", option, value, env=WIDE)
    assert refused.returncode == USAGE_IN_PROCESS
    assert f"Invalid value for '{option}': '{value}' is more than a thousand years" in refused.stderr, refused.stderr
    assert not (tmp_path / "x.db").exists()


def test_serve_refuses_an_infinite_rate_limit_naming_the_option(tmp_path: Path) -> None:
    refused = invoke(*SERVE, "--db", f"sqlite:///{tmp_path / 'x.db'}", "--rate-limit", "1e400", env=WIDE)
    assert refused.returncode == 4
    assert "--rate-limit inf: give a finite number of requests a second" in refused.stderr, refused.stderr
    assert not (tmp_path / "x.db").exists()


WIDE = {**os.environ, "COLUMNS": "300", "NO_COLOR": "1"}
