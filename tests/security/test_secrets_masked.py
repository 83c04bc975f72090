"""Credentials never show: not in `interlock serve`'s banner, not in a log line, not in an
error message. A store URL's password (or `?password=`), a server URL's token and a token
given on the command line all read `***`."""

from __future__ import annotations

import io
import logging
import os
import socket
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import anyio
import pytest

import interlock
from cli_support import invoke
from interlock.redact import redact
from interlock.remote import RemoteBroker
from serve_support import serve

pytestmark = pytest.mark.anyio
INTERLOCK = [sys.executable, "-m", "interlock"]
SECRET = "hunter2-not-for-your-eyes"
BOUND = 60


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
async def test_serve_never_prints_the_database_password(
    pg_databases: Callable[[], AbstractContextManager[str]],
) -> None:
    with pg_databases() as url:
        with_password = url.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@")
        async with serve("--db", with_password) as served:
            assert served.proc.returncode is None  # it started: the server trusts any password here
        printed = served.stderr  # all of it: the server has stopped
        assert SECRET not in printed
        assert "postgresql://postgres:***@127.0.0.1:5432/" in printed

    # A store that fails to open: the banner, the error and uvicorn's log of it, all masked.
    missing = f"postgresql://postgres@127.0.0.1:5432/no_such_database?password={SECRET}"
    with anyio.fail_after(BOUND):
        failed = await anyio.run_process([*INTERLOCK, "serve", "--port", "0", "--db", missing], check=False)
    printed = failed.stderr.decode()
    assert failed.returncode != 0
    assert "cannot open the PostgreSQL store" in printed
    assert SECRET not in printed
    assert "password=***" in printed


async def test_an_error_message_never_shows_a_password_or_a_token(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    unreachable = invoke("inbox", "--server", f"http://alice:{SECRET}@127.0.0.1:{port}")
    assert unreachable.returncode == 4
    said = " ".join(unreachable.stderr.split())  # the terminal width wraps it
    assert "cannot reach the interlock server at http://alice:***@127.0.0.1" in said
    assert SECRET not in said

    token = f"il_0123abcd_{SECRET}-and-more-of-it"
    async with interlock.connect(f"sqlite:///{tmp_path / 'x.db'}"):
        pass  # a store that holds no such token
    unknown = invoke("token", "revoke", token, "--db", f"sqlite:///{tmp_path / 'x.db'}")
    assert unknown.returncode == 1
    said = " ".join(unknown.stderr.split())
    assert "il_0123abcd_***" in said and SECRET not in said

    with pytest.raises(ValueError, match="unsupported store URL") as refused:
        interlock.connect(f"redis://admin:{SECRET}@cache:6379")
    assert SECRET not in str(refused.value)

    broker = interlock.connect(f"postgresql://postgres:{SECRET}@127.0.0.1:{port}/db")
    with pytest.raises(ConnectionError) as unopened:
        await broker.open()
    assert f"postgresql://postgres:***@127.0.0.1:{port}/db" in str(unopened.value)
    assert SECRET not in str(unopened.value)


@pytest.mark.parametrize(
    "given", ["token for alice, shown once:\n{token}", "{token} and more", "{token}é"], ids=["line", "space", "accent"]
)
def test_a_token_copied_with_more_than_itself_is_refused_quoting_none_of_it(given: str) -> None:
    """A token captured with `interlock token create`'s line before it was sent as it was:
    httpx refused the header, quoting it in full (after an escaped line break, which the
    mask missed), and the command said the server could not be reached."""
    token = f"il_0123abcd_{SECRET}-and-more-of-it"
    refused = invoke(
        "inbox",
        "--server",
        f"http://127.0.0.1:{free_port()}",
        env={**os.environ, "INTERLOCK_TOKEN": given.format(token=token)},
    )
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 4, said  # as for any setting given wrong
    assert "the token is not one: it holds white space, a line break or characters no token has" in said
    assert SECRET not in said and "reach" not in said
    assert redact(repr(f"Bearer token for alice:\n{token}")) == repr("Bearer token for alice:\nil_0123abcd_***")


def test_a_token_with_white_space_around_it_is_taken_without_it() -> None:
    """The end of a copied line (a space, a line break) is no part of a token."""
    token = f"il_0123abcd_{SECRET}"
    broker = interlock.connect("http://127.0.0.1:1", token=f" {token}\n")
    assert isinstance(broker, RemoteBroker) and broker._headers["Authorization"] == f"Bearer {token}"


def test_a_log_record_is_redacted_by_the_servers_log_handlers() -> None:
    from uvicorn.config import LOGGING_CONFIG

    from interlock.cli import _redacted_logging
    from interlock.redact import RedactingFilter

    config = _redacted_logging(LOGGING_CONFIG)
    assert all("redact" in handler["filters"] for handler in config["handlers"].values())
    assert config["filters"]["redact"]["()"] is RedactingFilter
    assert config["loggers"]["interlock"]["handlers"]  # interlock's own records go through them too

    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("interlock.test-redaction")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        dsn = f"postgresql://app:{SECRET}@db.internal:5432/interlock?sslmode=require"
        logger.warning("cannot reach %s (token il_0123abcd_%s)", dsn, SECRET * 2)
        try:
            raise OSError(f"connect to {dsn} failed")
        except OSError:
            logger.exception("the store failed")
    finally:
        logger.removeHandler(handler)
    written = out.getvalue()
    assert SECRET not in written
    assert "postgresql://app:***@db.internal:5432/interlock?sslmode=require" in written
    assert "il_0123abcd_***" in written


def test_a_warning_ask_prints_while_it_waits_is_masked_as_a_servers_log_line_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from interlock.cli import _Warnings

    record = logging.LogRecord(
        "interlock", logging.WARNING, __file__, 1, "waiting failed: %s", (f"postgresql://app:{SECRET}@db/x",), None
    )
    _Warnings().emit(record)
    printed = capsys.readouterr().err
    assert "waiting failed: postgresql://app:***@db/x" in printed
    assert SECRET not in printed


def test_an_access_log_line_hides_tokens_sign_in_codes_and_answer_links_and_is_still_written() -> None:
    """uvicorn's access log (on for an app embedded under uvicorn's defaults) names each
    request's path: a sign-in link's code and an answer link's token are credentials, and
    were written as they were; a token in the path made the filter set the record's
    arguments to None, which uvicorn's formatter unpacks, so the line was lost."""
    from uvicorn.logging import AccessFormatter

    from interlock.redact import RedactingFilter

    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s', use_colors=False))
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("interlock.test-access")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    code, link = f"ilk_{SECRET}-{SECRET}", f"eyJyIjoiMDEifQ.{SECRET}{SECRET}"
    paths = [
        f"/api/v1/events/stream?token=il_0123abcd_{SECRET}",
        f"/signin/link?code={code}&next=/requests/01a2",
        f"/answer/{link}",
    ]
    try:
        with pytest.MonkeyPatch.context() as patch:
            errors: list[BaseException] = []
            patch.setattr(handler, "handleError", lambda record: errors.append(sys.exc_info()[1]))  # type: ignore[arg-type]
            for path in paths:
                logger.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:50000", "GET", path, "1.1", 200)
    finally:
        logger.removeHandler(handler)
    written = out.getvalue()
    assert errors == [] and SECRET not in written
    assert written.splitlines() == [
        '127.0.0.1:50000 - "GET /api/v1/events/stream?token=*** HTTP/1.1" 200 OK',
        '127.0.0.1:50000 - "GET /signin/link?code=***&next=/requests/01a2 HTTP/1.1" 200 OK',
        '127.0.0.1:50000 - "GET /answer/*** HTTP/1.1" 200 OK',
    ]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:p%40ss@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u@h/db?password=pw&sslmode=require", "postgresql://u@h/db?password=***&sslmode=require"),
        ("http://127.0.0.1:8765?token=il_0123abcd_secretsecretsecret", "http://127.0.0.1:8765?token=***"),
        ("postgresql://:pw@h/db", "postgresql://:***@h/db"),
        ("sqlite:///var/lib/interlock.db", "sqlite:///var/lib/interlock.db"),
        ("memory://", "memory://"),
    ],
)
def test_a_url_is_shown_without_its_credentials(url: str, shown: str) -> None:
    from interlock.redact import redact, redact_url

    assert redact_url(url) == shown
    assert redact(f"failed on '{url}': refused") == f"failed on '{shown}': refused"
