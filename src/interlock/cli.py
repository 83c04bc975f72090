"""The `interlock` command: ask a person from a shell script, list an inbox, answer.

`interlock ask` exits with a code a script can branch on:

    0  answered (and, for --confirm, approved)
    1  declined (--confirm answered no) or rejected
    2  expired
    3  cancelled or closed
    4  usage error, bad input, or the store could not be reached

Every other command exits 0 when it did what it was asked; 1 when what it names is not
there or no longer in that state (no request, run, grant, team or dead letter by that id;
a request settled already; a claim someone else holds); 4 on a usage error, bad input, a
refusal (a token that may not do it, a quota used up) or a store or server that cannot be
reached. A script tells "not there, or not now" from "not like that" by the code alone.

A command that reads or acts on what a store holds (`inbox`, `show`, `answer`, `runs`,
`token list`, ...) or sets how a server works (`routing set`, `policy set`, `team add`,
`grants give`, `secret-key rotate`, `deliver`, ...) refuses a SQLite file that is not there
(a mistyped `--db`, or the default `interlock.db` of another folder) with exit code 4, and
makes no empty store; one that starts what asks (`ask`, `serve`, `worker`, `mcp`,
`token create`) makes the store if it is new.

Every command but `serve` refuses `memory://` with exit code 4: that store lives only in
the process that opens it, so what a command put there would be gone when it ended, and
no other command could read or answer it. `interlock serve --db memory://` keeps one for
as long as the server runs, reached through its URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import errno
import getpass
import importlib
import inspect
import ipaddress
import json
import logging
import math
import os
import re
import shlex
import signal
import socket
import sqlite3
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit

import httpx
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import __version__
from .agent.terminal import TerminalContract
from .approval_policies import DEFAULT_POLICY_HOOK_TIMEOUT, MAX_POLICY_HOOK_TIMEOUT, policy_to_dict
from .approvals import decision_ask, is_marked, not_the_approver, refused_yes
from .broker import Broker, LocalBroker, connect
from .durations import DURATION_SYNTAX, LONGEST, SHORTEST, duration_seconds
from .errors import (
    AlreadySettled,
    Cancelled,
    Expired,
    FollowupNotFound,
    Forbidden,
    InterlockError,
    InvalidAnswer,
    InvalidRequest,
    NewerDatabase,
    NotFound,
    RateLimited,
    Rejected,
    RunConflict,
    Unavailable,
)
from .followups import approval_word, followup_to_dict
from .model import (
    DEFAULT_EXP,
    Answers,
    Ask,
    Choice,
    Claim,
    Confirm,
    Form,
    GrantPolicy,
    MultiChoice,
    Request,
    Run,
    RunStatus,
    Status,
    Text,
    check_answers,
    issued_grant_to_dict,
    offered_grants,
    request_to_dict,
    run_to_dict,
    show_hidden,
)
from .principals import TOKEN_PREFIX, IssuedToken, Principal, TokenInfo, issue_token
from .redact import RedactingFilter, redact, redact_url
from .remote import RemoteBroker
from .runs import Worker
from .secret_key import ENV as SECRET_KEY_ENV
from .secret_key import GRANT_KEY_ENV, too_short
from .signin import mint_signin_link

__all__ = ["app", "main", "parse_answer"]

ANSWERED, DECLINED, EXPIRED, CANCELLED, USAGE = 0, 1, 2, 3, 4

if TYPE_CHECKING:
    from .grant_tokens import GrantSigner
    from .routing import Routing

T = TypeVar("T")


class _Commands(typer.core.TyperGroup):
    """A group whose --help lists each command with the first paragraph of its own help on
    the lines the terminal gives it: rich keeps a docstring's line breaks there, which cut
    a sentence wherever the source wrapped it."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:  # (click's Context, or typer's copy of it)
        command = super().get_command(ctx, cmd_name)
        if command is not None and command.help and not getattr(command, "_unwrapped", False):
            if command.short_help is None:
                command.short_help = " ".join(inspect.cleandoc(command.help).split("\n\n")[0].split())
            # Its own --help too: each paragraph one run of text (an indented block, as a
            # table of exit codes, kept as written).
            command.help = "\n\n".join(
                block if any(line.startswith(" ") for line in block.splitlines()) else " ".join(block.split())
                for block in inspect.cleandoc(command.help).split("\n\n")
            )
            command._unwrapped = True  # type: ignore[attr-defined]  # (once: each --help reads it again)
        return command


app = typer.Typer(
    cls=_Commands,
    no_args_is_help=True,
    add_completion=False,
    help="Durable human-in-the-loop requests for AI agents: ask a person, get a validated answer.",
)
err = Console(stderr=True, soft_wrap=True)  # one line each, however narrow: an operator greps a log for it

LogLevel = Literal["debug", "info", "warning", "error"]

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        "--server",
        envvar="INTERLOCK_URL",
        help="Where requests live: sqlite:///path.db (the default is sqlite:///interlock.db), or a server's "
        "http(s):// URL (its token from INTERLOCK_TOKEN).",
        show_default=False,
    ),
]

TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="INTERLOCK_TOKEN",
        help=(
            "With a server's URL: your token. Prefer INTERLOCK_TOKEN: other users of the machine "
            "see a --token in its process list."
        ),
        show_default=False,
    ),
]

LocalDb = Annotated[
    str | None,
    typer.Option(
        "--db", envvar="INTERLOCK_URL", help="Store URL (default sqlite:///interlock.db).", show_default=False
    ),
]

SendsOption = Annotated[
    int,
    typer.Option(
        "--concurrency",
        min=1,
        help="Notifications the delivery loop sends at a time, through all its channels.",
    ),
]
ShareOption = Annotated[
    int | None,
    typer.Option(
        "--per-channel",
        min=1,
        help="How many of those sends one channel may have under way, so a receiver that hangs holds back no "
        "other; at most --concurrency. \\[default: a quarter of --concurrency, at least 1]",
        show_default=False,
    ),
]


def _send_limits(concurrency: int, per_channel: int | None) -> tuple[int, int]:
    """--concurrency and --per-channel, as the delivery loop takes them (`send_limits`;
    each is at least 1 as read); a share above the sends is refused naming both options."""
    from .channels.delivery import send_limits

    if per_channel is not None and per_channel > concurrency:
        raise _fail(
            f"--per-channel {per_channel} is more than the {concurrency} sends at a time (--concurrency): one "
            "channel's share is at most all of them"
        )
    return send_limits(concurrency, per_channel)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"interlock {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """Ask a person, get a validated answer."""


def _json(value: Any, *, indent: int | None = None) -> str:
    """`value` as JSON for stdout: text as it is (a person reads "Zoë" and "日本", not
    their escapes) where stdout takes any text, escaped where it may not (a non-UTF-8
    locale)."""
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "").replace("_", "")
    return json.dumps(value, ensure_ascii=encoding != "utf8", indent=indent)


def _fail(message: str, code: int = USAGE) -> typer.Exit:
    # one line, however narrow the terminal: an operator greps a log for it
    err.print(f"[red]error:[/red] {escape(redact(message))}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _grant_signer(path: Path) -> GrantSigner:
    """The grant key in the file `--grant-key` (INTERLOCK_GRANT_KEY) names; one that cannot
    be read, or is no Ed25519 private key in PEM, is refused naming the option and the file."""
    from .grant_tokens import GrantSigner

    where = f"--grant-key {path}"
    try:
        return GrantSigner.from_pem(Path(path))
    except OSError as exc:
        raise _fail(f"{where}: {exc.strerror or exc}") from None
    except ValueError as exc:
        if "Ed25519" in str(exc):
            raise _fail(f"{where}: {exc}") from None
        raise _fail(
            f"{where}: not a private key in PEM that this server can read (make one with `openssl genpkey "
            "-algorithm ed25519 -out grant.pem`)"
        ) from None


def _secret_key() -> str | None:
    """This environment's INTERLOCK_SECRET_KEY, None when unset or empty; one too short to
    keep what it signs safe is refused (`secret_key.too_short`)."""
    secret = os.environ.get(SECRET_KEY_ENV) or None
    if secret is not None and (refusal := too_short(secret)) is not None:
        raise _fail(refusal)
    return secret


async def _token_person(broker: Broker) -> str | None:
    """Whom a server with auth records as the answerer: its token's principal. None on a
    local store, or through a server without auth (its caller is its admin, named by --by)."""
    if not isinstance(broker, RemoteBroker):
        return None
    me = await broker.whoami()
    name = me.get("name")
    return name if me.get("kind") not in (None, "admin") and isinstance(name, str) else None


def _local(broker: Broker) -> LocalBroker:
    """The broker over a store, for what is managed where the store is (principals and
    tokens, the keys, the outbox), never through a server's API (`_on_the_store` refuses a
    server's URL before it is reached)."""
    if not isinstance(broker, LocalBroker):
        raise Forbidden("this command works on a store itself (its file or database), not through a server")
    return broker


def _on_the_store(ctx: typer.Context, db: str | None, command: str) -> str:
    """The store that `interlock COMMAND`, which works on a store itself (who may use a
    server and their tokens, the keys its nodes sign with, its outbox), changes, as printed.
    A server's URL is refused before it is reached, saying where the command found it
    (INTERLOCK_URL, mostly, set to use the server from this shell) and how to name the
    store: where the server runs, its file (or its database's URL)."""
    if _remote(db):
        from_env = getattr(ctx.get_parameter_source("db"), "name", None) == "ENVIRONMENT"
        found = "INTERLOCK_URL points it at" if from_env else "--db names"
        raise _fail(
            f"`interlock {command}` works on the server's store file, not through its URL, and {found} the "
            f"server at {redact_url(db or '')}: run it where the server runs, with --db sqlite:///path/to/"
            "interlock.db (the store `interlock serve --db` names; or its postgresql://... URL)"
            + (", or unset INTERLOCK_URL (then ./interlock.db)" if from_env else "")
        )
    return redact_url(db or "sqlite:///interlock.db")


def _remote(db: str | None) -> bool:
    return db is not None and db.lower().startswith(("http://", "https://"))


def _run(
    db: str | None,
    work: Callable[[Broker], Awaitable[T]],
    token: str | None = None,
    by: str | None = None,
    *,
    make: bool = False,
) -> T:
    """`work` on the broker `db` names. `by`, a `--by` given: a server with auth records
    whom the token names, so another name is refused there rather than dropped. A command
    that only reads or acts on what a store holds (`make` False) refuses a SQLite file that
    is not there, rather than making an empty one where a path was mistyped. A store of
    this process alone (`memory://`) is refused: see `_refuse_memory`."""
    _refuse_memory(db)
    if not make:
        _check_store_is_there(db)

    async def main() -> T:
        async with connect(db, **({"token": token} if token and _remote(db) else {})) as broker:
            if by is not None and (named := await _token_person(broker)) not in (None, by):
                raise InvalidRequest(f"--by {by}: this server records whom your token names ({named}), no one else")
            return await work(broker)

    try:
        return asyncio.run(main())
    except (InvalidRequest, InvalidAnswer, RunConflict, NewerDatabase) as exc:
        raise _fail(str(exc)) from None
    except AlreadySettled as exc:  # (the commands that expect it say by whom and when)
        raise _fail(str(exc), DECLINED) from None
    except RateLimited as exc:  # a quota of the caller's, used up for now
        raise _fail(f"refused for now: {exc}") from None
    except NotFound as exc:
        if isinstance(exc, FollowupNotFound) or _remote(db):  # (a server's own answer names no store)
            raise _fail(str(exc), DECLINED) from None
        # Looked for in the default file, or INTERLOCK_URL's, when it lives in another:
        # say which store was read, and how to name the other.
        where = redact_url(db or "sqlite:///interlock.db")
        raise _fail(f"{exc} in {where} (is it in another store? name that one with --db)", DECLINED) from None
    except Forbidden as exc:
        if exc.status == 401 and not token and not os.environ.get("INTERLOCK_TOKEN"):
            raise _fail(
                f"no token for the server at {redact_url(db or '')}: set INTERLOCK_TOKEN or pass --token (whoever "
                "runs the server makes one on its store: `interlock token create NAME --human --db "
                "sqlite:///path/to/interlock.db`)"
            ) from None
        raise _fail(f"refused: {exc}") from None
    except httpx.HTTPStatusError as exc:
        raise _fail(
            f"the server at {redact_url(db or '')} failed ({exc.response.status_code} "
            f"{exc.response.reason_phrase}); its log says why"
        ) from None
    except Unavailable as exc:  # (a ConnectionError too: the store or the server is there, but not for now)
        where = redact_url(db or "sqlite:///interlock.db")
        raise _fail(f"{'the server' if _remote(db) else 'the store'} at {where}: {exc}; try again shortly") from None
    except ConnectionError as exc:
        if not _remote(db):  # a store's own refusal (a database not there, a password refused) says it all
            raise _fail(str(exc)) from None
        raise _fail(
            f"{exc}. Is `interlock serve` running at {redact_url(db or '')}? Start it there, or point "
            "--server (INTERLOCK_URL) at where it runs"
        ) from None
    except TimeoutError:
        raise _fail(f"the store at {redact_url(db or 'sqlite:///interlock.db')} did not answer in time") from None
    except sqlite3.Error as exc:  # a folder that is not there, a file that is no database
        raise _fail(f"the store at {redact_url(db or 'sqlite:///interlock.db')} cannot be opened: {exc}") from None
    except (OSError, ValueError) as exc:
        if isinstance(exc, InterlockError):
            raise
        if isinstance(exc, OSError) and exc.strerror:
            raise _fail(f"{exc.strerror}{f': {exc.filename}' if exc.filename else ''}") from None
        raise _fail(str(exc)) from None


def _refuse_memory(db: str | None) -> None:
    """Refuse `memory://`, a store that lives in the process that opens it: a command's
    ends with it, so what `ask` asks there no one can answer (it waits forever) and what
    `answer`, `token create` or `policy set` change there is gone at once. `interlock
    serve`, whose store outlives each call and is reached through its URL, takes one (it
    does not come through here)."""
    if db is not None and urlsplit(db).scheme.lower() == "memory":
        raise _fail(
            "memory:// keeps a store only in the process that opens it, this command's: what it holds is gone "
            "when the command ends, and no other command could read or answer it. Name a store they share with "
            "--db (or INTERLOCK_URL): sqlite:///interlock.db (the default), postgresql://..., or the URL of an "
            "`interlock serve` (which may keep a memory:// store of its own)"
        )


def _missing_store(db: str | None) -> str | None:
    """The path of the SQLite file `db` names (the default `interlock.db` when None) when
    it does not exist, else None."""
    url = db or "sqlite:///interlock.db"
    if not url.lower().startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///") :].split("?", 1)[0]
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return path or None
    except OSError:  # there or not, this user may not look: opening it says why (`_sqlite_files.why`)
        return None
    return None


def _check_store_is_there(db: str | None) -> None:
    """Refuse a SQLite store whose file does not exist (the default `interlock.db` of
    another folder, a mistyped `--db`): reading it would make an empty one and answer that
    it holds nothing."""
    url = db or "sqlite:///interlock.db"
    path = _missing_store(db)
    if path is not None:
        raise _fail(
            f"there is no store at {redact_url(url)} ({os.path.abspath(path)} does not exist): name the one your "
            "requests are in with --db (or INTERLOCK_URL); `interlock serve`, `interlock token create` and "
            "`interlock ask` make a new one"
        )


DURATION_HELP = f"A duration: {DURATION_SYNTAX}."


def _duration(least: float = SHORTEST, most: float | None = None) -> Callable[[str | float], float]:
    """The parser of an option holding a duration, in seconds, from `least` to `most`
    (refused past them naming the option, as click names it); every such option takes
    the one syntax (`durations.duration_seconds`)."""

    def duration(value: str | float) -> float:
        if isinstance(value, int | float):  # the option's default
            return float(value)
        try:
            seconds = duration_seconds(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        if seconds < least:
            shortest = "a microsecond, the least time kept" if least == SHORTEST else _say_duration(least)
            raise typer.BadParameter(f"{value!r} is less than {shortest}")
        if most is not None and seconds > most:
            longest = "a thousand years" if most == LONGEST else _say_duration(most)
            raise typer.BadParameter(f"{value!r} is more than {longest}")
        return seconds

    return duration


def _duration_option(
    flag: str, help: str, *, least: float = SHORTEST, most: float | None = None, default: str = ""
) -> Any:
    """An option holding a duration: parsed by `_duration(least, most)`, shown as `DURATION`,
    its help followed by the one syntax every such option takes and by `default`, said as a
    duration (typer would show the seconds)."""
    said = f" \\[default: {default}]" if default else ""
    return typer.Option(
        flag,
        parser=_duration(least, most),
        metavar="DURATION",
        help=f"{help} {DURATION_HELP}{said}",
        show_default=False,
    )


_WHOLE = re.compile(r"\s*\d+\s*")
_UNITLESS = re.compile(r"\s*\d+\.\d+\s*")
EXPIRY_SYNTAX = "how long from now, a number with a unit: 30m, 12h, 3d; or the Unix time it ends at, a whole number"


def _expiry(value: str | int) -> int:
    """The parser of a grant's `--exp`: when it ends, in Unix seconds. How long from now, in
    the one syntax of durations (`_duration`: `3d`, `12h`), its unit required: a whole
    number alone is the Unix time it ends at, as `--exp` took it before it took durations."""
    if isinstance(value, int):
        return value
    now = datetime.now(UTC).timestamp()
    if _WHOLE.fullmatch(value):
        at = int(value)
        if at <= now:
            passed = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            raise typer.BadParameter(
                f"{value!r} is a Unix time past already ({passed}): for how long the grant lasts, give a duration "
                f"with its unit, as {value.strip()}s or 3d"
            )
        return at
    if _UNITLESS.fullmatch(value):
        raise typer.BadParameter(f"{value!r} has no unit: give {EXPIRY_SYNTAX}")
    try:
        duration_seconds(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a duration: give {EXPIRY_SYNTAX}") from None
    # (rounded down: a grant asked to last as long as the venue's ceiling is not refused for
    # a fraction of a second past it)
    return int(now + _duration(least=1.0, most=LONGEST)(value))


def _say_duration(seconds: float) -> str:
    """`seconds` as the options take it: `50ms`, `1s`, `60s`."""
    return f"{seconds * 1000:g}ms" if seconds < 1 else f"{seconds:g}s"


@app.command()
def ask(
    ctx: typer.Context,
    prompt: Annotated[str, typer.Argument(help="What to ask.")],
    confirm: Annotated[bool, typer.Option("--confirm", help="A yes/no question; exit 1 when declined.")] = False,
    choice: Annotated[list[str] | None, typer.Option("--choice", help="An option (repeat for each).")] = None,
    multi: Annotated[bool, typer.Option("--multi", help="With --choice: several may be picked.")] = False,
    other: Annotated[bool, typer.Option("--other", help="With --choice: free text is allowed too.")] = False,
    text: Annotated[bool, typer.Option("--text", help="Free text (the default).")] = False,
    multiline: Annotated[bool, typer.Option("--multiline", help="Free text over several lines.")] = False,
    form: Annotated[Path | None, typer.Option("--form", help="A JSON Schema (type object) file.")] = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="Whose inbox it goes to. On a local store the default is you ($INTERLOCK_USER, else your login "
            "name): the person `interlock serve` signs in.",
        ),
    ] = None,
    title: Annotated[str, typer.Option("--title", help="A short title.")] = "",
    details: Annotated[str, typer.Option("--details", help="More context, in markdown.")] = "",
    timeout: Annotated[
        float | None,
        _duration_option("--timeout", "Expire after this long."),
    ] = None,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Ask a person and wait for the answer; print it as JSON. Exit codes: 0 answered
    (approved), 1 declined or rejected, 2 expired, 3 cancelled, 4 usage or connection error;
    130, 143 or 129 when Ctrl-C, SIGTERM or SIGHUP ended the wait (the request withdrawn; with
    the server away, it says so and the command that withdraws it once the server is back)."""
    kinds = sum([confirm, bool(choice), text or multiline, form is not None])
    if kinds > 1:
        raise _fail("choose one of --confirm, --choice, --text/--multiline, --form")
    if (multi or other) and not choice:
        raise _fail("--multi and --other need --choice options")
    if multi and other:
        raise _fail("--other goes with a single --choice: a --multi choice takes only its options")
    the_ask: Ask
    try:
        if confirm:
            the_ask = Confirm(prompt, id="answer")
        elif choice and multi:
            the_ask = MultiChoice(prompt, choice, id="answer", min=1)
        elif choice:
            the_ask = Choice(prompt, choice, id="answer", allow_other=other)
        elif form is not None:
            the_ask = Form(prompt, schema=json.loads(form.read_text("utf-8")), id="answer")
        else:
            the_ask = Text(prompt, id="answer", multiline=multiline)
    except (OSError, json.JSONDecodeError) as exc:
        raise _fail(f"cannot read the form schema: {exc}") from None
    except InvalidRequest as exc:
        raise _fail(str(exc)) from None

    stopped_by: list[int] = []  # the signal that ended the wait, if one did
    left: list[tuple[str, Status | None]] = []  # the request it ended, and its status once withdrawn (None: unread)

    async def work(broker: Broker) -> tuple[int, Any]:
        recipient = to if to is not None or not isinstance(broker, LocalBroker) else local_person()
        # Ctrl-C (SIGINT), SIGTERM (a service manager, `timeout`, cron) and SIGHUP (a terminal
        # closed) end the wait alike: cancelled, it withdraws the request nobody waits for,
        # and says so.
        loop, me = asyncio.get_running_loop(), asyncio.current_task()
        assert me is not None

        def stop_waiting(signum: int) -> None:
            stopped_by.append(signum)
            me.cancel()

        request = await broker.create(the_ask, to=recipient, title=title, details=details, timeout=timeout)
        if threading.current_thread() is threading.main_thread():  # (where signals are handled)
            for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                loop.add_signal_handler(stop, stop_waiting, stop)
        # The line `show` prints: the command, with the store, and what VALUE may be.
        (answer_it,) = how_to_answer(request, _store_named(ctx, db))
        waiting = f"Waiting for an answer to {request.id}; {answer_it}"
        if not err.is_terminal:  # a spinner only shows on a terminal; a log keeps the command on one line
            err.print(waiting, highlight=False, markup=False, soft_wrap=True)
        with err.status(escape(waiting)):
            try:
                # A remote broker's wait rides out a server that restarts (one warning).
                response = await broker.wait(request.id)
            except Rejected as exc:
                return DECLINED, {"status": "rejected", "reason": exc.reason}
            except Expired:
                return EXPIRED, {"status": "expired"}
            except Cancelled as exc:
                return CANCELLED, {"status": "cancelled", "reason": exc.reason}
            except asyncio.CancelledError:
                if stopped_by:  # the wait withdrew the request, or tried to: what it is now, said
                    left.append((request.id, await _status_now(broker, request.id)))
                raise
        value = response.answers.get("answer")
        return (DECLINED if confirm and value is False else ANSWERED), value

    try:
        with _logging_to(_Warnings()):
            code, value = _run(db, work, token, make=True)
    except asyncio.CancelledError:
        if not stopped_by:
            raise
        stopped = f"stopped by {signal.Signals(stopped_by[0]).name}"
        if left and left[0][1] is Status.CANCELLED:
            err.print(f"{stopped}: the request is withdrawn", markup=False)
        elif left and left[0][1] is not None and left[0][1] is not Status.PENDING:
            err.print(f"{stopped}: request {left[0][0]} was {left[0][1].value} meanwhile", markup=False)
        elif left:
            request_id = left[0][0]  # (the command names the store or server this one named, as `show` does)
            err.print(
                f"{stopped}: request {request_id} could not be withdrawn and may still be pending: "
                f"withdraw it with `interlock cancel {request_id}{_store_named(ctx, db)}`",
                markup=False,
                soft_wrap=True,
            )
        else:
            err.print(f"{stopped}", markup=False)
        raise typer.Exit(128 + stopped_by[0]) from None
    typer.echo(_json(value))
    raise typer.Exit(code)


async def _status_now(broker: Broker, request_id: str) -> Status | None:
    """A request's status, read within a few seconds; None if it could not be (the server
    away, say)."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(5):
            return (await broker.get(request_id)).status
    return None


def _warn_of(routing: Routing, *, secrets: bool = True) -> None:
    """Say what a routing taken will not do, a warning a line: each route that sends on a
    channel with no address (`channels.unaddressed`), and with `secrets`, each channel
    lacking its secret (`channels.lacking_secrets`: a server's and a delivery loop's start)."""
    from .channels import lacking_secrets, unaddressed

    for warning in [*(lacking_secrets(routing.channels) if secrets else ()), *unaddressed(routing)]:
        err.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False, soft_wrap=True)


class _Warnings(logging.Handler):
    """interlock's warnings as lines of the command's own stderr (over its spinner): the
    server away while `ask` waits, and that the wait goes on."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        err.print(redact(record.getMessage()), markup=False, highlight=False, soft_wrap=True)


@app.command()
def inbox(
    to: Annotated[str | None, typer.Option("--to", help="Only this recipient's requests.")] = None,
    status: Annotated[str, typer.Option("--status", help=f"{', '.join(Status)} or all.")] = "pending",
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="Requests per page.")] = 50,
    after: Annotated[
        str | None,
        typer.Option("--after", help="The next page: the cursor the previous page printed.", show_default=False),
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="Every page, not only the first.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """List requests, newest first.

    A page holds `--limit` requests; when there are more, the command prints (on stderr)
    the `--after CURSOR` that lists the next page. `--all` lists every page. With `--json`,
    each line is the request as the API gives it, with `claim` (who took it, since when;
    null when nobody has)."""
    if status != "all" and status not in {s.value for s in Status}:
        raise _fail(f"unknown status {status!r}")

    async def work(broker: Broker) -> tuple[list[Request], str | None, Mapping[str, Claim]]:
        # Through a server, a person's inbox holds their teams' requests too (the server
        # knows the token's teams); on a local store, `--to` names the person.
        teams = sorted(await broker.teams_of(to)) if to and isinstance(broker, LocalBroker) else []
        found: list[Request] = []
        cursor = after
        while True:
            page = await broker.list(
                recipient=to, teams=teams, status=None if status == "all" else status, after=cursor, limit=limit
            )
            found.extend(page.items)
            cursor = page.next_cursor
            if not every or cursor is None:
                break
        pending = [r.id for r in found if r.status is Status.PENDING]
        held: dict[str, Claim] = {}
        for start in range(0, len(pending), 1000):  # (`claims` takes a page's worth at a time)
            held.update(await broker.claims(pending[start : start + 1000]))
        return found, cursor, held

    found, next_cursor, claims = _run(db, work, token)
    more = f"more requests: the next page is --after {next_cursor} (with the same options), or list them all with --all"
    if as_json:
        for request in found:
            held = claims.get(request.id)
            claim = None if held is None else {"by": held.by, "at": held.at.isoformat()}
            typer.echo(_json({**request_to_dict(request), "claim": claim}))
        if next_cursor is not None:
            err.print(more, markup=False, soft_wrap=True)
        return
    table = Table(box=None, header_style="bold")
    table.add_column("id", no_wrap=True, min_width=32)
    for column in ("status", "to", "asks", "created", "expires", *(("claimed by",) if claims else ())):
        table.add_column(column)
    now = datetime.now(UTC)
    for r in found:
        expires = "" if r.expires_at is None or r.status is not Status.PENDING else _ago(r.expires_at, now)
        held = claims.get(r.id)
        claimed = (f"{held.by} ({_ago(held.at, now)})" if held else "",) if claims else ()
        table.add_row(r.id, r.status.value, r.to or "", _summary(r), _ago(r.created_at, now), expires, *claimed)
    Console(width=None if sys.stdout.isatty() else 1000).print(table)
    if not found:
        err.print("no requests")
    if next_cursor is not None:
        err.print(more, markup=False, soft_wrap=True)


@app.command()
def show(
    ctx: typer.Context,
    request_id: Annotated[str, typer.Argument(help="The request's id.")],
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Print one request as JSON. Your first look at it is on its timeline (`viewed`)."""

    async def work(broker: Broker) -> tuple[Request, str, Claim | None]:
        request = await broker.get(request_id)  # through a server, it records the view
        if isinstance(broker, LocalBroker):
            await broker.note_viewed(request, by=local_person())
        held = (await broker.claims([request.id])).get(request.id) if request.status is Status.PENDING else None
        return request, _store_named(ctx, db) + await _approver_named(broker, request), held

    request, options, held = _run(db, work, token)
    typer.echo(_json(request_to_dict(request), indent=2))
    if held is not None:
        err.print(f"claimed by {held.by} ({_ago(held.at, datetime.now(UTC))})", markup=False, soft_wrap=True)
    if request.status is Status.PENDING:
        for line in how_to_answer(request, options):
            err.print(line, markup=False, soft_wrap=True)
        offers = offered_grants(request)
        if offers:
            err.print("grants offered (issued only if you make the choice AND echo it with --grant):", soft_wrap=True)
            for ask_id, option, grant in offers:
                choice = f"if you approve {ask_id!r}" if option is None else f"if you select {option!r} in {ask_id!r}"
                err.print(
                    f"  [ ] {grant.describe()}, {choice}: --grant '{grant.can}@{grant.with_}'",
                    markup=False,
                    soft_wrap=True,
                )


@app.command()
def claim(
    request_id: Annotated[str, typer.Argument(help="The request's id.")],
    release: Annotated[bool, typer.Option("--release", help="Give up your claim instead.")] = False,
    by: Annotated[
        str | None, typer.Option("--by", help="On a local store: who claims (default: you, the local user).")
    ] = None,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Claim a pending request to one of your teams, so the other members see it is
    yours (or give the claim up with --release). Anyone in the team may still answer."""

    async def work(broker: Broker) -> tuple[Claim | Request | None, str]:
        # Through a server, the claim is the token's principal's.
        me = str((await broker.whoami())["name"]) if isinstance(broker, RemoteBroker) else by or local_person()
        try:
            if release:
                return await broker.unclaim(request_id, by=me), me
            return await broker.claim(request_id, by=me), me
        except AlreadySettled:  # nothing left to claim: say how it settled, as `answer` does
            return await broker.get(request_id), me

    held, me = _run(db, work, token, by=by)
    if isinstance(held, Request):
        raise _fail(f"request {request_id} {settled_already(held)}", DECLINED)
    if release:
        if held is None:
            raise _fail(f"you hold no claim on {request_id}", DECLINED)
        err.print(f"gave up the claim on {request_id}")
        return
    assert held is not None
    when = held.at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    if held.by != me:
        raise _fail(f"already claimed by {held.by} at {when}", DECLINED)
    err.print(f"claimed {request_id} ({when})")


def how_to_answer(request: Request, options: str = "") -> list[str]:
    """The commands that answer a pending request, one line each, as `show` prints them.
    `options` (` --db URL --by NAME`, from `_store_named` and `_approver_named`) end each
    command, so that a line pasted as it is answers the request where it was read. What
    the agent chose (the ask ids, the arguments of a call) is quoted for the shell: pasted,
    it is the command's words, never a command of its own."""
    command = f"interlock answer {shlex.quote(request.id)}"
    decision = decision_ask(request)
    if decision is not None:
        lines = [
            f"approve: {command} yes{options}",
            f"deny:    {command} no --reason TEXT{options}   (the reason reaches the agent verbatim)",
        ]
        current = request.origin.arguments if isinstance(request.origin.arguments, Mapping) else {}
        for ask in request.asks[1:]:
            example = json.dumps({decision.id: True, ask.id: dict(current)}, ensure_ascii=False)
            lines.append(f"edit {ask.id} and approve: {command} --json {shlex.quote(example)}{options}")
        return lines
    if len(request.asks) == 1:
        return [f"answer with: {command} VALUE{options}   (VALUE: {request.asks[0].how_to_answer()})"]
    pairs = " ".join(f"{shlex.quote(a.id)}=VALUE" for a in request.asks)
    lines = [f"answer each ask as ASK=VALUE: {command} {pairs}{options}"]
    lines.extend(f"  {ask.id}: {ask.how_to_answer()}{'' if ask.required else ' (optional)'}" for ask in request.asks)
    return lines


def _store_named(ctx: typer.Context, db: str | None) -> str:
    """` --db URL` (` --server URL`) when this command read a store (a server) named on its
    own command line (not the default, nor INTERLOCK_URL, which the next command reads as
    well): the commands it prints name it too, or they would look in interlock.db. A
    server's token is never printed: from INTERLOCK_TOKEN the next command takes it as this
    one did; given with --token, it is given again."""
    source = ctx.get_parameter_source("db")  # (click's ParameterSource, or typer's own copy of it)
    if db is None or getattr(source, "name", None) != "COMMANDLINE":
        return ""
    return f" {'--server' if _remote(db) else '--db'} {shlex.quote(redact_url(db))}"


async def _approver_named(broker: Broker, request: Request) -> str:
    """` --by NAME` where a gate's approval counts only as someone else's answer than
    this command's (the broker refuses a yes from anyone else): its approver, or any member
    of the team it is to. On a local store this command answers as you; through a server
    with auth, as its token names (nothing to add); with none, as nobody unless `--by`."""
    if not is_marked(request) or request.to is None:
        return ""
    if await _token_person(broker) is not None:
        return ""
    refused = await not_the_approver(broker, request, None if isinstance(broker, RemoteBroker) else local_person())
    return "" if refused is None else f" --by {shlex.quote(refused[1])}"


def parse_grant_echo(values: list[str]) -> list[dict[str, str]]:
    """`--grant CAN@WITH` words as an echo of offered grants."""
    echo = []
    for value in values:
        can, sep, with_ = value.partition("@")
        if not sep or not can or not with_:
            raise InvalidAnswer(f"--grant takes CAN@WITH (as `interlock show` prints it), not {value!r}")
        echo.append({"with": with_, "can": can})
    return echo


@app.command()
def answer(
    request_id: Annotated[str, typer.Argument(help="The request's id.")],
    values: Annotated[
        list[str] | None,
        typer.Argument(help="The answer: yes/no, an option, text; ASK=VALUE for each ask of a request with several."),
    ] = None,
    raw: Annotated[
        str | None,
        typer.Option("--json", help="The answer as JSON (a value, or answers by ask id); @file or - reads it."),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help="Who answers: on a local store, you (the local user) by default; through a server without auth, "
            "nobody unless named here (a gate's approval takes a yes only from its approver); with auth, the "
            "token's person (an admin's token may name another).",
        ),
    ] = None,
    comment: Annotated[str, typer.Option("--comment", help="A comment kept with the answer.")] = "",
    reason: Annotated[
        str | None,
        typer.Option("--reason", help="Why (kept with the answer like --comment; a denial's reason, verbatim)."),
    ] = None,
    grant: Annotated[
        list[str] | None,
        typer.Option(
            "--grant",
            help="Echo an offered grant you approve, as CAN@WITH (repeat for each); it is issued only if your "
            "answer also makes the choice that offers it. `interlock show` lists the offers.",
        ),
    ] = None,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Answer a pending request: `yes` / `no` for an approval (`--reason` says why)."""
    if reason is not None:
        if comment:
            raise _fail("give --reason or --comment, not both")
        comment = reason
    if raw is not None and values:
        raise _fail("give the answer as words or as --json, not both")
    raw = None if raw is None else _json_source(raw)
    try:
        echo = parse_grant_echo(grant) if grant else None
    except InvalidAnswer as exc:
        raise _fail(str(exc)) from None

    answerer = _answerer(db, by)

    async def work(broker: Broker) -> Request | str:
        request = await broker.get(request_id)
        if request.status is not Status.PENDING:
            return request
        if raw is not None:
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise InvalidAnswer(f"--json is not valid JSON: {exc}") from None
        else:
            value = parse_answer(request, values or [])
        await _approvers_own(broker, request, value, answerer)
        if await broker.resolve(request_id, value, by=answerer, via="cli", comment=comment, grants=echo):
            return "denied" if _denies(request, value) else "answered"  # an approval's no is a denial
        return await broker.get(request_id)

    settled = _run(db, work, token, by=by)
    if isinstance(settled, Request):
        raise _fail(f"request {request_id} {settled_already(settled)}", DECLINED)
    err.print(f"{settled} {request_id}")


@app.command()
def reject(
    request_id: Annotated[str, typer.Argument(help="The request's id.")],
    reason: Annotated[str, typer.Option("--reason", help="Why; the asker reads it.")] = "",
    by: Annotated[
        str | None,
        typer.Option("--by", help="On a local store: who refuses (default: you, the local user)."),
    ] = None,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Refuse a pending request."""
    refuser = _answerer(db, by)

    async def work(broker: Broker) -> Request | None:
        if await broker.reject(request_id, reason, by=refuser, via="cli"):
            return None
        return await broker.get(request_id)

    settled = _run(db, work, token, by=by)
    if settled is not None:
        raise _fail(f"request {request_id} {settled_already(settled)}", DECLINED)
    err.print(f"rejected {request_id}")


@app.command()
def cancel(
    request_id: Annotated[str, typer.Argument(help="The request's id.")],
    reason: Annotated[str, typer.Option("--reason", help="Why; its recipient reads it.")] = "",
    by: Annotated[
        str | None,
        typer.Option("--by", help="On a local store: who withdraws it (default: you, the local user)."),
    ] = None,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Withdraw a pending request (through a server, one you made): it is settled
    cancelled, out of its recipient's inbox, and a wait on it raises Cancelled. Exit 1 if
    it was no longer pending, saying how it settled."""
    withdrawer = _answerer(db, by)

    async def work(broker: Broker) -> Request | None:
        if await broker.cancel(request_id, reason, by=withdrawer, via="cli"):
            return None
        return await broker.get(request_id)

    settled = _run(db, work, token, by=by)
    if settled is not None:
        raise _fail(f"request {request_id} {settled_already(settled)}", DECLINED)
    err.print(f"withdrew {request_id}")


def _answerer(db: str | None, by: str | None) -> str | None:
    """Who answers (refuses, claims, sends, gives or revokes a grant, changes a policy)
    from this terminal: through a server, whom the token names (the server records it; see
    `_run`'s `by`); on a local store, `--by`, else you ($INTERLOCK_USER, else your login),
    whatever the command, so that the record of who did what does not depend on it."""
    return by if _remote(db) else by or local_person()


def _denies(request: Request, value: Any) -> bool:
    """Whether `value` answers an approval no (a denial: it stops the call whoever says it)."""
    decision = decision_ask(request)
    return decision is not None and check_answers(request, value).get(decision.id) is False


async def _approvers_own(broker: Broker, request: Request, value: Any, by: str | None) -> None:
    """Refuse before anything is recorded a yes that an approval gate would not take: a
    gate's approval counts only as its approver's answer (any member's, for a team). On a
    local store, and through a server without auth, where `--by` names the answerer (with
    auth, the token does, and the person may answer only what is theirs). A no stops the
    call whoever says it; a yes naming nobody the broker refuses."""
    if by is None or _denies(request, value):
        return
    if await _token_person(broker) is not None:
        return
    refused = await refused_yes(broker, request, by)
    if refused is not None:
        said, example = refused
        raise InvalidAnswer(f"{said}. Answer as them with --by {example} (or set INTERLOCK_USER)")


def settled_already(request: Request) -> str:
    """How a request that is no longer pending settled, for a person: "was already
    answered by alice at 2026-12-01 09:30 UTC"."""
    response = request.response
    verb = {"rejected": "declined"}.get(request.status.value, request.status.value)
    by = f" by {response.by}" if response is not None and response.by else ""
    at = f" at {response.at.strftime('%Y-%m-%d %H:%M:%S UTC')}" if response is not None else ""
    return f"was already {verb}{by}{at}"


@app.command()
def watch(
    to: Annotated[str | None, typer.Option("--to", help="On a local store: only requests to this person.")] = None,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help="Who answers: on a local store, you (the local user) by default; through a server without auth, "
            "each request's recipient unless named here; with auth, the token's person.",
        ),
    ] = None,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Answer requests in this terminal as they arrive: what is pending first, then new ones.

    A choice takes an option's number, id or label (ignoring case), or your own words where
    "other" is allowed; a request answered elsewhere meanwhile is skipped. Ctrl-D or Ctrl-C
    stops watching and leaves everything pending. Lines piped in answer the prompts in
    turn, and watching stops once they are used up.
    """
    terminal = TerminalContract(by=_answerer(db, by))
    answering_as: list[str | None] = []  # who this terminal answers as, once known

    async def answer(broker: Broker, request: Request) -> None:
        if not answering_as:
            # Whom its token names, else --by or you (`_answerer`); None through a server without
            # auth and no --by, where each request is answered as its recipient (`TerminalContract`).
            answering_as.append(await _token_person(broker) or terminal.by)
        refused = None if answering_as[0] is None else await not_the_approver(broker, request, answering_as[0])
        if refused is not None:  # its yes would be refused: left for its approver, not asked here
            who, example = refused
            err.print(
                f"\n(request {request.id} is an approval for {request.to}, which the agent's gate takes only from "
                f"{who}: left pending; watch as them with --by {example} to answer it here)",
                markup=False,
                soft_wrap=True,
            )
            return
        prompting = asyncio.ensure_future(terminal.prompt(broker, request))
        settled = asyncio.ensure_future(broker.watch(request.id))
        try:
            done, _ = await asyncio.wait({prompting, settled}, return_when=asyncio.FIRST_COMPLETED)
            if prompting not in done:
                final = settled.result()
                who = final.response.by if final.response and final.response.by else "someone else"
                err.print(f"\n(request {request.id} was {final.status.value} by {who} meanwhile)")
                return
            prompting.result()  # raises EOFError at the end of input
        finally:  # (watching stopped, or one of the two won): the other ends here, its outcome read
            for task in (prompting, settled):
                task.cancel()
            await asyncio.gather(prompting, settled, return_exceptions=True)

    async def work(broker: Broker) -> None:
        watching = asyncio.ensure_future(follow(broker))
        closed = asyncio.ensure_future(terminal.input_closed())
        await asyncio.wait({watching, closed}, return_when=asyncio.FIRST_COMPLETED)
        closed.cancel()
        if not watching.done():
            watching.cancel()
        with contextlib.suppress(asyncio.CancelledError, EOFError):
            await watching  # anything else it raised is a real failure

    async def follow(broker: Broker) -> None:
        after = await broker.last_event_id()
        for request in (await broker.pending(recipient=to)).values():
            await answer(broker, request)
        err.print("waiting for new requests (Ctrl-D or Ctrl-C to stop)")
        async for event in broker.events(after=after, follow=True):
            new = event.request
            if event.type != "created" or new is None or (to is not None and new.to != to):
                continue
            if (await broker.get(new.id)).status is Status.PENDING:
                await answer(broker, new)

    with contextlib.suppress(EOFError):
        _run(db, work, token, by=by)


def parse_answer(request: Request, values: list[str]) -> Any:
    """Turn command-line words into an answer: one ask takes the words as its value (or one
    ASK=VALUE pair, as several asks take them, when the words are no value of it), several
    take ASK=VALUE pairs, each ask at most once."""
    if len(request.asks) == 1:
        ask = request.asks[0]
        try:
            return ask.from_words(values)
        except InvalidAnswer:
            named = len(values) == 1 and values[0].startswith(f"{ask.id}=")
            if not named:
                raise
            return ask.from_words([values[0][len(ask.id) + 1 :]])
    decision = decision_ask(request)
    if decision is not None and not any("=" in word for word in values):
        return Answers({decision.id: decision.from_words(values)})  # the optional asks left out
    by_id = {a.id: a for a in request.asks}
    longest_first = sorted(by_id, key=len, reverse=True)  # an ask id may hold "=" itself
    answers: dict[str, Any] = {}
    for pair in values:
        ask_id = next((i for i in longest_first if pair.startswith(f"{i}=")), None)
        if ask_id is None:
            raise InvalidAnswer(f"give each answer as ASK=VALUE with ASK one of: {', '.join(by_id)}")
        if ask_id in answers:
            raise InvalidAnswer(f"{ask_id} is answered twice ({ask_id}=...): give each ask one answer")
        answers[ask_id] = by_id[ask_id].from_words([pair[len(ask_id) + 1 :]])
    return answers


def _summary(request: Request) -> str:
    """One line for a list: the first ask's kind and the title (or prompt); for a tool
    call's approval, the call itself (its preview's first line), so approvals of one tool
    are told apart, with the characters a reader cannot see written out."""
    if decision_ask(request) is not None and request.origin.tool_name and request.details:
        call = show_hidden(request.details.splitlines()[0])
        return "approval: " + (call if len(call) <= 60 else call[:57] + "...")
    first = request.title or request.asks[0].prompt
    first = first if len(first) <= 60 else first[:57] + "..."
    more = f" (+{len(request.asks) - 1})" if len(request.asks) > 1 else ""
    return f"{request.asks[0].type}: {first}{more}"


def _ago(when: datetime, now: datetime) -> str:
    """`when` from `now` in its largest unit: a time past in whole units gone ("5m ago" until
    the sixth minute), a time to come to the nearest ("in 7d" for a week's grant from its
    first second, where whole units said "in 6d")."""
    seconds = (when - now).total_seconds()
    future, seconds = seconds > 0, abs(seconds)
    amount = "0s"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count = round(seconds / size) if future else int(seconds // size)
        if count >= 1:
            amount = f"{count}{unit}"
            break
    return f"in {amount}" if future else f"{amount} ago"


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Port to listen on (0: any free port, printed at start).")
    ] = 8765,
    db: LocalDb = None,
    no_auth: Annotated[
        bool, typer.Option("--no-auth", help="Let anyone on this machine do anything (loopback addresses only).")
    ] = False,
    trusted_proxy: Annotated[
        list[str] | None,
        typer.Option(
            "--trusted-proxy",
            help="An address or network (CIDR) of a proxy in front of the server whose X-Forwarded-Proto and "
            "X-Forwarded-For are believed (repeat for each). None by default.",
        ),
    ] = None,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--cors-origin",
            help="An origin (https://app.example.com, or * for any) whose browser apps may call the HTTP API "
            "with a token (CORS; repeat for each). None by default; needs auth.",
        ),
    ] = None,
    open_recipients: Annotated[
        bool,
        typer.Option("--open-recipients", help="Accept requests to names that are no human or agent here."),
    ] = False,
    max_body_size: Annotated[
        int,
        typer.Option("--max-body-size", min=1, help="The largest request body accepted, in bytes (413 past it)."),
    ] = 1024 * 1024,
    rate_limit: Annotated[
        float | None,
        typer.Option(
            "--rate-limit",
            help="Requests created (and, apart, updates sent) a second per principal, on average; 0 turns the "
            "limit off. \\[default: 20 with auth, off with --no-auth]",
            show_default=False,
            min=0,
        ),
    ] = None,
    open_inboxes: Annotated[
        bool,
        typer.Option(
            "--open-inboxes",
            help="Let anyone signed in ask anyone (an open organisation). By default a person asks their own "
            "inbox, an agent its owner's, and anyone else only with their grant to request.",
        ),
    ] = False,
    grant_ceiling: Annotated[
        float | None,
        _duration_option(
            "--grant-ceiling",
            "The longest a grant may last: offers beyond it, or without expiry, are refused when the request "
            "is created. None by default.",
            most=LONGEST,
        ),
    ] = None,
    grant_default: Annotated[
        float,
        _duration_option(
            "--grant-default", "How long a grant offered without exp lasts once issued.", most=LONGEST, default="7d"
        ),
    ] = 7 * 86400.0,
    grant_key: Annotated[
        Path | None,
        typer.Option(
            "--grant-key",
            envvar="INTERLOCK_GRANT_KEY",
            help="An Ed25519 private key (PEM) that signs grant tokens. Default: derived from "
            "INTERLOCK_SECRET_KEY, else made at start (tokens then stop verifying on restart).",
            show_default=False,
        ),
    ] = None,
    rate_burst: Annotated[
        int, typer.Option("--rate-burst", help="How many of those at once, above the rate.", min=1)
    ] = 200,
    max_streams: Annotated[
        int | None,
        typer.Option(
            "--max-streams",
            help="Event streams each principal may hold open (API and web inbox); 0 for no cap. "
            "\\[default: 32 with auth, no cap with --no-auth]",
            show_default=False,
            min=0,
        ),
    ] = None,
    pause_timeout: Annotated[
        float | None,
        _duration_option(
            "--pause-timeout",
            "How long a parked run waits on a person before it is given up, like 14d or 36h "
            "(a run's longer max_duration wins); a run running in its agent's own process that "
            "neither parks it, starts it again nor asks (or waits on an answer) on it for that long is given up too, "
            "as abandoned.",
            most=LONGEST,
            default="14d",
        ),
    ] = None,
    max_followups: Annotated[
        int | None,
        typer.Option(
            "--max-followups",
            min=1,
            help="How many messages a busy run holds for its agent; past that a send holds nothing. \\[default: 20]",
            show_default=False,
        ),
    ] = None,
    default_expiry: Annotated[
        float | None,
        _duration_option(
            "--default-expiry",
            "How long a request that sets no timeout and belongs to no run stays pending before it "
            "expires, like 7d or 12h.",
            most=LONGEST,
            default="never",
        ),
    ] = None,
    routing: Annotated[
        Path | None,
        typer.Option(
            "--routing",
            envvar="INTERLOCK_ROUTING",
            help="A routing file (TOML): who is told about requests, through which channels (webhook, email, "
            "Slack, plugins). The delivery loop then runs in the server; without it, it runs as the routing kept "
            "in the store says, if there is one (`interlock routing set`).",
        ),
    ] = None,
    concurrency: SendsOption = 16,
    per_channel: ShareOption = None,
    shutdown_timeout: Annotated[
        float,
        _duration_option(
            "--shutdown-timeout",
            "On Ctrl-C or SIGTERM, how long connections still open (long polls, event streams) are given to "
            "end before they are cut (0: cut at once); their clients come back.",
            least=0,
            default="5s",
        ),
    ] = 5.0,
    log_level: Annotated[
        LogLevel,
        typer.Option(
            "--log-level",
            case_sensitive=False,
            help="What interlock itself logs to stderr: info (the default) adds to the warnings the lines that say "
            "an outage ended and what changed without a call (a routing taken from the store, a claim given back); "
            "debug, each retry meanwhile.",
        ),
    ] = "info",
    access_log: Annotated[
        bool,
        typer.Option(
            "--access-log",
            help="Log each HTTP request answered (client, method, path, status), one line each among the others.",
        ),
    ] = False,
) -> None:
    """Run the HTTP API, the live event stream and the web inbox."""
    try:
        import uvicorn
        from uvicorn.config import LOGGING_CONFIG

        from .server.app import create_app
        from .server.quotas import Quota
    except ImportError as exc:  # how interlock was installed: tested with uvicorn made unimportable
        raise _fail(
            f"the server needs its extra ({_missing(exc)} is missing): in your clone of interlock, run "
            "`.venv/bin/pip install -e '.[server]'`"
        ) from None
    if db is not None and db.startswith(("http://", "https://")):
        raise _fail(
            f"serve keeps its own store, and {redact_url(db)} is a server (from --db or INTERLOCK_URL): pass "
            "--db sqlite:///interlock.db (or postgresql://..., memory://)"
        )
    if no_auth and not _is_loopback(host):
        raise _fail(f"--no-auth is allowed only on a loopback address, not {host}")
    sends = _send_limits(concurrency, per_channel)
    proxies = list(trusted_proxy or ())
    secret = _secret_key()
    signer = _grant_signer(grant_key) if grant_key is not None else None
    quota: Quota | Literal["default"] | None = "default"
    if rate_limit is not None:
        if not math.isfinite(rate_limit):  # (--rate-burst is at least 1, as read)
            raise _fail(f"--rate-limit {rate_limit}: give a finite number of requests a second (0 for no limit)")
        quota = Quota(rate_limit, rate_burst) if rate_limit > 0 else None
    streams: int | Literal["default"] | None = "default" if max_streams is None else max_streams or None
    policy = GrantPolicy(grant_default, grant_ceiling)  # each bounded as the option is read
    sock = _listen(host, port)
    where = f"http://{host if ':' not in host else f'[{host}]'}:{sock.getsockname()[1]}"  # the port held, if 0

    async def announce(broker: LocalBroker) -> None:
        """Once the store is open: the routing in use (the file's, or the one kept in the
        store when the file has not changed since it was taken) and, with auth, a one-time
        sign-in link for the person at this machine (made a human here on a store with none yet), as
        notebook servers print theirs, when stderr is a terminal: a service manager or a
        container keeps what a server prints in a log, where a link to sign in must not
        be. Its banner comes first: a start refused before (the store, the secret key, the
        routing) says only why."""
        err.print(
            f"interlock {__version__} serving {where} on {redact_url(db or 'sqlite:///interlock.db')}", markup=False
        )
        if no_auth:
            err.print("[yellow]auth is OFF[/yellow]: anyone who can reach this loopback address can read and answer")
        else:
            err.print("auth is on: create tokens with `interlock token create NAME --human|--agent`")
        if proxies:
            err.print(f"trusting X-Forwarded-Proto and X-Forwarded-For from {', '.join(proxies)}", markup=False)
        delivery = app.state.interlock.delivery
        if delivery is not None:
            _warn_of(delivery.routing)
            names = ", ".join(delivery.channels) or "none"
            if routing is None:  # no --routing: the one kept in the store is used all the same
                err.print(
                    f"delivering notifications as the routing kept in the store says (channels: {names}): "
                    "`interlock routing show` reads it",
                    markup=False,
                )
            elif delivery.routing is from_file:
                err.print(f"delivering notifications as {routing} says (channels: {names})", markup=False)
            else:
                err.print(
                    f"delivering notifications as the routing kept in the store says (channels: {names}): it was "
                    f"set since {routing} was taken, which is unchanged (`interlock routing show`)",
                    markup=False,
                )
        if no_auth:
            err.print(f"open {where}/ in your browser", markup=False)
            return
        if not sys.stderr.isatty():
            err.print(
                f"sign in at {where}/ with a person's token (`interlock token create NAME --human`); a one-time "
                "sign-in link is printed only to a terminal, since this output may be kept in a log",
                markup=False,
            )
            return
        person = local_person()
        found = await broker.get_principal(person)
        if found is None:
            # Made a person here only on a store that has none yet (the first start): on a
            # store its people share, whoever starts a node by hand is not made one of them.
            if any(known.kind == "human" for known in await broker.list_principals()):
                err.print(
                    f"no sign-in link: {person!r} is not a person on this store; sign in with a person's token, or "
                    f"make {person!r} one with `interlock token create {person} --human`",
                    markup=False,
                    soft_wrap=True,
                )
                return
            await broker.save_principal(Principal(person, "human"))
        elif found.kind != "human":
            err.print(f"no sign-in link: {person!r} is an agent here; sign in with a human's token", markup=False)
            return
        elif await broker.tokens_all_revoked(person):
            err.print(
                f"no sign-in link: every token of {person!r} is revoked; sign in with a person's token, or give "
                f"{person!r} a new one with `interlock token create {person} --human`",
                markup=False,
                soft_wrap=True,
            )
            return
        link = await mint_signin_link(broker, person, where)
        err.print(f"sign in as {person} (the link works once, for a day):", markup=False)
        err.print(f"    {link}", markup=False, highlight=False, soft_wrap=True)  # plain: one piece to copy

    try:
        app = create_app(
            db,
            auth=not no_auth,
            secret_key=secret,
            trusted_proxies=proxies,
            open_recipients=open_recipients,
            max_body_size=max_body_size,
            rate_limit=quota,
            max_streams=streams,
            pause_timeout=pause_timeout,
            max_followups=max_followups,
            default_expiry=default_expiry,
            open_inboxes=open_inboxes,
            grant_policy=policy,
            grant_key=signer,
            on_ready=announce,
            routing=str(routing) if routing is not None else None,
            delivery_concurrency=sends[0],
            delivery_per_channel=sends[1],
            cors_origins=cors_origin or (),
        )
    except (ValueError, OSError) as exc:
        sock.close()
        raise _fail(str(exc)) from None
    from_file = app.state.interlock.delivery.routing if routing is not None else None  # the lifespan may replace it
    config = uvicorn.Config(
        _quiet_refusal(app),
        log_level="warning",  # uvicorn's own: its start-up lines stay out, and its access log unless asked for
        log_config=_redacted_logging(LOGGING_CONFIG, log_level.upper()),
        access_log=access_log,
        proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies or None,
        # Long polls and streams end; their clients come back. (Typed int, used as
        # asyncio.timeout's delay, which takes any number of seconds.)
        timeout_graceful_shutdown=shutdown_timeout,  # type: ignore[arg-type]
    )
    if access_log:  # (the Config set every uvicorn logger to its log_level)
        logging.getLogger("uvicorn.access").setLevel(logging.INFO)
    state = app.state.interlock
    # uvicorn logs "Application startup failed. Exiting." for any failed start: for a refusal
    # of ours, the line that says why (below) is the whole story.
    logging.getLogger("uvicorn.error").addFilter(
        lambda record: state.refused is None or record.getMessage() != "Application startup failed. Exiting."
    )

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # The long polls end at once, so their clients go on with a server that
            # answers rather than being cut (with a 500) when the grace runs out.
            state.stop_waits()
            super().handle_exit(sig, frame)

    try:
        Server(config).run(sockets=[sock])
    except SystemExit:  # uvicorn's, when the app did not start
        if state.refused is None:
            raise
        raise _fail(state.refused) from None
    finally:
        sock.close()


def _quiet_refusal(app: Any) -> Any:
    """`app`, whose start-up refused for a reason its operator can fix (`StartupRefused`)
    tells uvicorn no traceback: `serve` says the reason on one line instead."""
    state = app.state.interlock

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "lifespan.startup.failed" and state.refused is not None:
                message = {**message, "message": ""}
            await send(message)

        await app(scope, receive, sending if scope["type"] == "lifespan" else send)

    return asgi


def _missing(exc: ImportError) -> str:
    """The package an extra would have installed, from the import that failed."""
    return (exc.name or "").partition(".")[0] or str(exc)


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on host:port, or a message saying what to do instead."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise _fail(f"cannot listen on {host}: {exc.strerror}; pass --host with an address of this machine") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise _fail(
                f"port {port} on {host} is already in use (another `interlock serve`?): stop it, or pass --port "
                "with a free port"
            ) from None
        raise _fail(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


def local_person() -> str:
    """The person at this machine, as `interlock serve` signs them in and `interlock ask`
    on a local store addresses them: $INTERLOCK_USER, else the login name, else "me"."""
    for name in (os.environ.get("INTERLOCK_USER"), _login()):
        if name and _PERSON.match(name):
            return name
    return "me"


_PERSON = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")


def _login() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container, say)
        return None


LOG_DATES = "%Y-%m-%d %H:%M:%S%z"
"""How the lines of serve, worker and deliver give their time: a log kept in a file (or by a
service manager that adds no time) says when."""


@contextlib.contextmanager
def _logging_to(handler: logging.Handler, level: int | None = None) -> Iterator[None]:
    """interlock's records going to `handler` too (from `level` up, when given) while the
    command runs, and the logger as it was once it ends: a command run in the same process
    as other code (a test, a program calling the CLI) leaves no handler on a stream closed
    since, nor a level that lets others' records through."""
    logger = logging.getLogger("interlock")
    before = logger.level
    if level is not None:
        logger.setLevel(level)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)


def _log_to_stderr(level: int = logging.INFO) -> contextlib.AbstractContextManager[None]:
    """interlock's own records, from `level` up, as dated lines on stderr, credentials
    redacted (a handler's error may quote a store URL or a token), while the command runs:
    for the commands that run until stopped beside the server (`worker`, `deliver`)."""
    handler = logging.StreamHandler()
    handler.addFilter(RedactingFilter())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", LOG_DATES))
    return _logging_to(handler, level)


def _redacted_logging(base: dict[str, Any], level: str = "INFO") -> dict[str, Any]:
    """uvicorn's logging set-up with every line dated and every handler redacting
    credentials, and interlock's own records, from `level` up, going to the same place as
    uvicorn's errors."""
    config = copy.deepcopy(base)
    for formatter in config.get("formatters", {}).values():  # each line with its time, as worker's and deliver's
        formatter["fmt"] = f"%(asctime)s {formatter.get('fmt', '%(levelprefix)s %(message)s')}"
        formatter["datefmt"] = LOG_DATES
    config.setdefault("filters", {})["redact"] = {"()": RedactingFilter}
    config.get("handlers", {}).get("access", {})["stream"] = "ext://sys.stderr"  # (with --access-log) one log
    for handler in config.get("handlers", {}).values():
        handler["filters"] = [*handler.get("filters", []), "redact"]
    config.setdefault("loggers", {})["interlock"] = {"handlers": ["default"], "level": level, "propagate": False}
    return config


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@app.command("mcp")
def mcp_stdio(
    db: DbOption = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="INTERLOCK_TOKEN",
            help=(
                "The token for a server's URL. Prefer INTERLOCK_TOKEN: other users of the machine "
                "see a --token in its process list."
            ),
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve interlock's MCP tools over stdio, for desktop hosts (Claude Desktop, Claude Code, Cursor).

    On a store URL the tools act as this machine's user; on a server's URL, as the token's
    human or agent, under the server's rules. Logs go to stderr; stdout is the protocol's.
    """
    try:
        from .mcp.transports import run_stdio
    except ImportError as exc:  # the SDK is an extra
        raise _fail(
            f"the MCP server needs the mcp extra ({_missing(exc)} is missing): in your clone of interlock, run "
            "`.venv/bin/pip install -e '.[mcp]'`"
        ) from None

    logs = logging.StreamHandler(sys.stderr)  # stdout carries the protocol
    logs.addFilter(RedactingFilter())
    logging.basicConfig(level=logging.WARNING, handlers=[logs], format="%(levelname)s %(name)s: %(message)s")
    # What went wrong is said as every command says it (no token, no server, bad URL).
    _run(db, lambda broker: run_stdio(broker, person=local_person()), token, make=True)


token_app = typer.Typer(
    cls=_Commands, no_args_is_help=True, help="Manage who may use a server: humans and agents, and their tokens."
)
app.add_typer(token_app, name="token")


@token_app.command("create")
def token_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The human's or agent's name.")],
    human: Annotated[bool, typer.Option("--human", help="A person, who answers requests to them.")] = False,
    agent: Annotated[bool, typer.Option("--agent", help="A program, which makes requests.")] = False,
    owner: Annotated[str | None, typer.Option("--owner", help="An agent's human: its requests go to them.")] = None,
    db: LocalDb = None,
) -> None:
    """Add a human or an agent (or reuse one) and print a new token for it, once. It works
    on the server's store (--db sqlite:///path/to/interlock.db, where the server runs),
    not through the server's URL."""
    _on_the_store(ctx, db, "token create")
    if human == agent:
        raise _fail("say --human or --agent, not both" if human else "say --human or --agent")
    if agent and not owner:
        raise _fail("an agent needs --owner HUMAN: whose inbox its requests go to")
    if human and owner:
        raise _fail("--owner is an agent's: a person owns no one")

    async def work(broker: Broker) -> IssuedToken:
        store = _local(broker)
        if owner is not None:
            found = await store.get_principal(owner)
            if found is None or found.kind != "human":
                raise InvalidRequest(f"no human named {owner!r}: create one first with --human")
        existing = await store.get_principal(name)
        principal = Principal(name, "agent" if agent else "human", owner if agent else None)
        if existing is not None and existing.kind != principal.kind:
            raise InvalidRequest(f"{name!r} is already a {existing.kind}")
        await store.save_principal(principal)
        token = issue_token(name, datetime.now(UTC))
        await store.save_token(token)
        return token

    token = _run(db, work, make=True)
    err.print(f"token for {name} (id {token.id}; shown once, keep it secret):")
    typer.echo(token.secret)


@token_app.command("revoke")
def token_revoke(
    ctx: typer.Context,
    what: Annotated[str, typer.Argument(help="A token (il_...), a token id, or a name to revoke all its tokens.")],
    db: LocalDb = None,
) -> None:
    """Revoke a token, or every token of a human or agent; it stops working at once. A
    person whose every token is revoked is cut off: no sign-in link (mailed, or printed by
    serve) signs them in, and no channel answers as them (an answer link mailed to them,
    their Slack user's click, a signed webhook naming them), no message goes to them
    (each delivery to them is skipped, saying why) and no grant they gave authorizes
    anything, until `token create` gives them a new one. It works on the server's store, not through its URL."""
    _on_the_store(ctx, db, "token revoke")

    async def work(broker: Broker) -> tuple[int, str | None]:
        """How many tokens were revoked, and the person cut off by it (None if nobody is)."""
        store = _local(broker)
        found = await store.get_principal(what)
        if found is not None and not (what.startswith(TOKEN_PREFIX) and what.count("_") >= 2):
            count = await store.revoke_tokens(principal=what)
            return count, what if found.kind == "human" else None
        token_id = what.split("_")[1] if what.startswith(TOKEN_PREFIX) and what.count("_") >= 2 else what
        # a token revoked by itself or its id: its person's last live one cuts them off too
        owner = next((t.principal for t in await store.list_tokens() if t.id == token_id and not t.for_session), None)
        count = await store.revoke_tokens(token_id=token_id)
        person = await store.get_principal(owner) if count and owner is not None else None
        cut = person is not None and person.kind == "human" and await store.tokens_all_revoked(person.name)
        return count, person.name if cut and person is not None else None

    count, person = _run(db, work)
    by_name = person == what
    if not count and not by_name:  # (a person with no live token is cut off all the same)
        raise _fail(f"no live token matches {redact(what)!r}", DECLINED)
    err.print(f"revoked {count} token(s)" + ("" if count or not by_name else f": {what} had none, and is cut off"))
    if person is not None:
        err.print(
            f"{person} is cut off{'' if by_name else ' (that was their last live token)'}: nothing is sent to them "
            "(each delivery to them is skipped, saying why: `interlock deliveries --status skipped`), nothing "
            f"answers in their name and the grants they gave authorize nothing, until `interlock token create "
            f"{person} --human`",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


@token_app.command("list")
def token_list(ctx: typer.Context, db: LocalDb = None) -> None:
    """List the humans, agents and teams, each with the ids of its live tokens (oldest
    first), and apart, of the tokens the web inbox made for the sessions of its sign-in
    links (`web_sessions`): `token revoke ID` revokes one (signing out its session) and
    leaves the others working. It works on the server's store, not through its URL."""
    _on_the_store(ctx, db, "token list")

    async def work(broker: Broker) -> tuple[Sequence[Principal], Sequence[TokenInfo]]:
        store = _local(broker)
        return await store.list_principals(), await store.list_tokens()

    principals, tokens = _run(db, work)
    ids: dict[tuple[str, bool], list[str]] = {}
    for token in tokens:
        ids.setdefault((token.principal, token.for_session), []).append(f"{token.id}@{token.created_at:%Y-%m-%d}")
    for p in principals:
        owner = f"\towner={p.owner}" if p.owner else ""
        live = f"\ttokens={','.join(ids[p.name, False])}" if (p.name, False) in ids else ""
        # The web inbox's own, each made for one signed-in session: revoking one signs it out.
        sessions = f"\tweb_sessions={','.join(ids[p.name, True])}" if (p.name, True) in ids else ""
        typer.echo(f"{p.name}\t{p.kind}{owner}{live}{sessions}")


team_app = typer.Typer(
    cls=_Commands,
    no_args_is_help=True,
    help="Manage teams: a request to a team is seen, claimed and answered by its members. On a store, or "
    "through a server: anyone signed in lists a team's members; an admin (the operator of a server without "
    "auth) changes teams.",
)
app.add_typer(team_app, name="team")


@contextlib.contextmanager
def _teams_changed_on_the_store(broker: Broker) -> Iterator[None]:
    """A server refusing to change a team (only an admin may, and a token made by `token
    create` is a person's or an agent's): say where it is done instead."""
    try:
        yield
    except Forbidden as exc:
        if exc.status != 403 or not isinstance(broker, RemoteBroker):
            raise
        raise Forbidden(
            f"{exc}: with auth, change the server's teams on its store, where the server runs: "
            "--db sqlite:///path/to/interlock.db (the store `interlock serve --db` names)"
        ) from None


@team_app.command("add")
def team_add(
    team: Annotated[str, typer.Argument(help="The team's name (made if new).")],
    members: Annotated[list[str] | None, typer.Argument(help="People to add to it.")] = None,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Make a team if it is new, and add people (humans with a token here) to it."""

    async def work(broker: Broker) -> Sequence[str]:
        if isinstance(broker, LocalBroker):  # the store refuses them too; here, with the way to make one
            for member in dict.fromkeys(members or []):
                known = await broker.get_principal(member)
                if known is None:
                    raise InvalidRequest(
                        f"{member!r} is no person here: make them one first with "
                        f"`interlock token create {member} --human`, then add them"
                    )
                if known.kind != "human":
                    raise InvalidRequest(
                        f"{member!r} is {'an agent' if known.kind == 'agent' else 'a team'} here: "
                        "a team's members are people"
                    )
        with _teams_changed_on_the_store(broker):
            return await broker.add_team_members(team, members or [])

    found = _run(db, work, token)
    err.print(f"team {team}: {', '.join(found) or 'no members yet'}")


@team_app.command("rm")
def team_rm(
    team: Annotated[str, typer.Argument(help="The team's name.")],
    members: Annotated[list[str] | None, typer.Argument(help="People to take out; none deletes the team.")] = None,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Take people out of a team, or delete the team when no one is named."""

    async def work(broker: Broker) -> int | None:
        if await broker.team_members(team) is None:
            return None
        with _teams_changed_on_the_store(broker):
            if not members:
                return int(await broker.delete_team(team))
            return sum([await broker.remove_team_member(team, member) for member in dict.fromkeys(members)])

    removed = _run(db, work, token)
    if removed is None:
        raise _fail(f"there is no team named {team!r}", DECLINED)
    if not members:
        err.print(f"deleted the team {team}")
    elif not removed:
        raise _fail(f"none of them is in the team {team!r}", DECLINED)
    else:
        err.print(f"took {removed} member(s) out of {team}")


@team_app.command("members")
def team_members(
    team: Annotated[str, typer.Argument(help="The team's name.")], db: DbOption = None, token: TokenOption = None
) -> None:
    """List a team's members, one a line."""
    found = _run(db, lambda b: b.team_members(team), token)
    if found is None:
        raise _fail(f"there is no team named {team!r}", DECLINED)
    for name in found:
        typer.echo(name)


# -- runs ------------------------------------------------------------------------------------


@app.command()
def runs(
    agent: Annotated[str | None, typer.Option("--agent", help="Only this agent's runs.")] = None,
    status: Annotated[
        str | None,
        typer.Option(
            "--status",
            help="running, waiting_for_input, waiting_for_approval, completed, failed, cancelled, or all. "
            "\\[default: all]",
            show_default=False,
        ),
    ] = None,
    session: Annotated[str | None, typer.Option("--session", help="Only the runs of this session or thread.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="Runs per page.")] = 50,
    after: Annotated[
        str | None,
        typer.Option("--after", help="The next page: the cursor the previous page printed.", show_default=False),
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="Every page, not only the first.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """List runs, newest first: agents' pieces of work, and what each waits on.

    A page holds `--limit` runs; when there are more, the command prints (on stderr) the
    `--after CURSOR` that lists the next page. `--all` lists every page."""
    if status == "all":  # (as `inbox --status all`)
        status = None
    if status is not None and status not in {s.value for s in RunStatus}:
        raise _fail(f"unknown run status {status!r}: use {', '.join(s.value for s in RunStatus)} or all")

    async def work(broker: Broker) -> tuple[list[Run], str | None]:
        found: list[Run] = []
        cursor = after
        while True:
            page = await broker.list_runs(agent=agent, status=status, session=session, after=cursor, limit=limit)
            found.extend(page.items)
            cursor = page.next_cursor
            if not every or cursor is None:
                return found, cursor

    found, next_cursor = _run(db, work, token)
    if as_json:
        for run in found:
            typer.echo(_json(run_to_dict(run, state=False)))
    else:
        _print_runs(found)
    if next_cursor is not None:
        err.print(
            f"more runs: the next page is --after {next_cursor} (with the same options), or list them all with --all",
            markup=False,
            soft_wrap=True,
        )


def _print_runs(found: Sequence[Run]) -> None:
    if not found:  # a header over nothing reads as a table that failed to fill
        err.print("no runs")
        return
    table = Table(box=None, header_style="bold")
    table.add_column("id", no_wrap=True, min_width=32)
    for column in ("agent", "status", "waiting on", "updated", "expires"):
        table.add_column(column)
    now = datetime.now(UTC)
    for run in found:
        status_text = run.status.value + (f" ({run.terminal_reason})" if run.terminal_reason else "")
        waiting = f"{len(run.waiting_on)} request(s)" + (", ready" if run.ready else "") if run.status.waiting else ""
        # A pause still waiting on a person, or a run in its agent's own process, is given
        # up then; a ready run waits on a worker, and a worker's claim on its lease.
        expires = "" if run.deadline is None else _ago(run.deadline, now)
        table.add_row(run.id, run.agent, status_text, waiting, _ago(run.updated_at, now), expires)
    Console(width=None if sys.stdout.isatty() else 1000).print(table)


run_app = typer.Typer(cls=_Commands, no_args_is_help=True, help="Look at one run, send it a message, or stop it.")
app.add_typer(run_app, name="run")


@run_app.command("show")
def run_show(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(help="The run's id.")],
    with_state: Annotated[
        bool, typer.Option("--state", help="Include the agent's framework state (as stored; large).")
    ] = False,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Print one run as JSON, and list its requests (with how to answer those pending,
    as `interlock show` says it)."""

    async def work(broker: Broker) -> tuple[Run, list[Request], dict[str, str]]:
        run = await broker.get_run(run_id)
        requests: list[Request] = []
        cursor: str | None = None
        while True:
            page = await broker.list(run=run.id, order="asc", after=cursor, limit=1000)
            requests.extend(page.items)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        pending = [r for r in requests if r.status is Status.PENDING]
        return run, requests, {r.id: _store_named(ctx, db) + await _approver_named(broker, r) for r in pending}

    run, requests, options = _run(db, work, token)
    typer.echo(_json(run_to_dict(run, state=with_state), indent=2))
    if with_state and run.state is None and _remote(db):
        err.print("(state null: the run has none, or the server shows it only to the agent that started it)")
    if requests:
        err.print("requests:", markup=False)
    for request in requests:
        err.print(f"  {request.id}  {request.status.value:<9}  {_summary(request)}", markup=False)
        if request.status is Status.PENDING:
            for line in how_to_answer(request, options[request.id]):
                err.print(f"    {line}", markup=False, soft_wrap=True)


@run_app.command("cancel")
def run_cancel(
    run_id: Annotated[str, typer.Argument(help="The run's id.")],
    reason: Annotated[str, typer.Option("--reason", help="Recorded as the run's terminal_reason.")] = (
        "cancelled_by_user"
    ),
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Stop a run: it ends cancelled and its pending requests are withdrawn. Exit 3 if it
    had ended already."""
    cancelled = _run(db, lambda b: b.cancel_run(run_id, reason, by=_answerer(db, None), via="cli"), token)
    if not cancelled:
        raise _fail(f"run {run_id} had ended already", CANCELLED)
    err.print(f"cancelled run {run_id}", markup=False)


@run_app.command("send")
def run_send(
    run_id: Annotated[str, typer.Argument(help="The run's id.")],
    text: Annotated[str, typer.Argument(help="The message, verbatim.")],
    by: Annotated[
        str | None,
        typer.Option("--by", help="On a local store: who sends it (default: you, the local user)."),
    ] = None,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Send a message to a busy run; it is never dropped. Parked on an approval, `approve`
    / `deny` (or `1` / `2`) decides it; anything else is held and goes to the agent as its
    next user turn. Prints what became of it as JSON. Exit 1 if nothing was held (the run
    holds as many messages as it may), 3 if the run has ended."""
    sender = _answerer(db, by)

    async def work(broker: Broker) -> Any:
        try:
            if isinstance(broker, LocalBroker) and sender is not None and approval_word(text) is True:
                # As a server does: a yes decides only an approval the sender may answer (it
                # is to them, their team or no one); from anyone else it is held as text. A
                # no stops the call whoever says it.
                teams = await broker.teams_of(sender)

                def theirs(request: Request) -> bool:
                    return request.to in (None, sender, *teams)

                return await broker.send_message(run_id, text, by=sender, may_answer=theirs)
            return await broker.send_message(run_id, text, by=sender)
        except RunConflict as exc:
            return exc

    sent = _run(db, work, token, by=by)
    if isinstance(sent, RunConflict):
        raise _fail(f"{sent}; start a new run", CANCELLED)
    out: dict[str, Any] = {"run": sent.run, "outcome": sent.outcome}
    if sent.resolved is not None:
        out["resolved_interaction_id"] = sent.resolved
    if sent.followup is not None:
        out["followup_id"] = sent.followup.id
    typer.echo(_json(out))
    if sent.outcome == "full":
        raise _fail(f"run {run_id} holds as many messages as it may: nothing was held; send it again later", DECLINED)


@run_app.command("followups")
def run_followups(
    run_id: Annotated[str, typer.Argument(help="The run's id.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """List the messages held for a run, oldest first (on an ended run: those it never
    delivered, read-only)."""
    held = _run(db, lambda b: b.list_followups(run_id), token)
    for followup in held:
        if as_json:
            typer.echo(_json(followup_to_dict(followup)))
        else:
            typer.echo(f"{followup.id}\t{followup.queued_at.isoformat()}\t{followup.by or ''}\t{followup.text}")
    if not held:
        err.print("no messages held")


@run_app.command("withdraw")
def run_withdraw(
    run_id: Annotated[str, typer.Argument(help="The run's id.")],
    followup_id: Annotated[str, typer.Argument(help="The held message's id.")],
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Withdraw a held message before it is delivered. Exit 1 if it is gone: withdrawn,
    delivered, or read-only on an ended run."""
    _run(db, lambda b: b.withdraw_followup(run_id, followup_id, by=os.environ.get("USER")), token)
    err.print(f"withdrew {followup_id} from run {run_id}", markup=False)


@app.command()
def worker(
    target: Annotated[
        str,
        typer.Argument(
            help="module:factory — factory(broker) returns the resume handlers by agent name, or a Worker "
            "(--name, --lease and --concurrency given here apply to it, in place of its own)."
        ),
    ],
    name: Annotated[
        str | None, typer.Option("--name", help="This worker's name, one no other worker has. \\[default: host:pid]")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", min=1, help="Runs resumed at a time. \\[default: 1]")
    ] = None,
    lease: Annotated[
        float | None,
        _duration_option(
            "--lease",
            "How long a claimed run is held before another worker may take it, 1s or more.",
            least=1,
            default="30s",
        ),
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="Resume the runs ready now, then exit.")] = False,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Resume parked runs as their requests settle, by the handlers of the agents you serve.

    Each ready run is resumed once across every worker; a worker that dies leaves its run
    to another once its lease runs out. Stop with Ctrl-C or SIGTERM: the runs being resumed
    finish first. A factory that returns a Worker of its own keeps its name, lease and
    concurrency but for those given here.
    """
    factory = _load_factory(target)
    given: dict[str, Any] = {"name": name, "lease": lease, "concurrency": concurrency}
    given = {option: value for option, value in given.items() if value is not None}

    async def work(broker: Broker) -> int:
        made = factory(broker)
        if inspect.isawaitable(made):
            made = await made
        if isinstance(made, Worker):
            serving = made  # the command line's options over the factory's, as for the handlers
            for option, value in given.items():
                setattr(serving, option, value)
        elif isinstance(made, Mapping):
            serving = Worker(broker, made, **given)
        else:
            raise InvalidRequest(f"{target} returned {type(made).__name__}, not the handlers by agent name or a Worker")
        others = await _ready_elsewhere(broker, serving.handlers)
        if others:  # a handler named otherwise than its agent's runs, mostly: nothing would say so
            err.print(
                f"note: runs of {', '.join(others)} are ready to resume, and this worker serves "
                f"{', '.join(sorted(serving.handlers)) or 'no agent'}: a handler is found by its agent's exact name",
                markup=False,
                soft_wrap=True,
            )
        if once:
            return await serving.drain()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):  # not on Windows' loop
                loop.add_signal_handler(signum, stop.set)
        err.print(f"worker {serving.name} resuming runs of {', '.join(sorted(serving.handlers))}", markup=False)
        await serving.run(stop=stop)
        return serving.resumed

    missing = _missing_store(db)
    if missing is not None:  # legitimate before any agent ran, but mostly a --db left out
        err.print(
            f"note: there was no store at {os.path.abspath(missing)}: made an empty one, whose runs are those "
            "agents park there; name the store your agents use with --db (or INTERLOCK_URL)",
            markup=False,
            soft_wrap=True,
        )
    with _log_to_stderr():  # what was resumed, and why a run failed; not other libraries' chatter
        resumed = _run(db, work, token, make=True)
    err.print(f"resumed {resumed} run(s)", markup=False)


async def _ready_elsewhere(broker: Broker, served: Mapping[str, Any]) -> list[str]:
    """The agents of runs ready to resume (the newest hundred parked of each waiting status)
    that `served` has no handler for."""
    names: set[str] = set()
    for status in (RunStatus.WAITING_FOR_APPROVAL, RunStatus.WAITING_FOR_INPUT):
        page = await broker.list_runs(status=status, limit=100)
        names |= {run.agent for run in page.items if run.ready and run.agent not in served}
    return sorted(names)


def _load_factory(target: str) -> Callable[[Broker], Any]:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise _fail(f"expected module:factory, not {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: the working directory's modules
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        stem = module_name.removesuffix(".py")
        hint = f" (name the module without .py: {stem}:{attribute})" if stem != module_name else ""
        raise _fail(f"cannot import {module_name}: {exc}{hint}") from None
    found = getattr(module, attribute, None)
    if not callable(found):
        raise _fail(f"{module_name} has no callable {attribute!r}")
    try:
        inspect.signature(found).bind(None)
    except TypeError:
        raise _fail(f"{target} must take one argument, the broker: def {attribute}(broker): ...") from None
    except ValueError:
        pass  # no signature to read (a builtin): the call itself will say
    return found  # type: ignore[no-any-return]  # checked callable just above


# -- grants ------------------------------------------------------------------------------------


grants_app = typer.Typer(
    cls=_Commands,
    no_args_is_help=True,
    help="Capability grants issued by answers (and given directly): list, show, check, give and revoke them.",
)
app.add_typer(grants_app, name="grants")


def _print_grants(grants: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        for grant in grants:
            typer.echo(_json(grant))
        return
    table = Table(box=None, header_style="bold")
    for column in ("id", "can", "with", "issuer", "audience", "expires", "state"):
        table.add_column(column, no_wrap=column == "id")
    now = datetime.now(UTC)
    cut: set[str] = set()  # the issuers cut off of the grants that would be live but for it
    for g in grants:
        expires = "never" if g["expires_at"] is None else _ago(datetime.fromisoformat(g["expires_at"]), now)
        state = "revoked" if g["revoked_at"] else "expired" if expires.endswith("ago") else "live"
        if state == "live" and g.get("issuer_cut_off"):
            state = "issuer cut off"
            cut.add(g["issuer"])
        table.add_row(g["id"], g["can"], g["with"], g["issuer"] or "", g["audience"] or "", expires, state)
    Console(width=None if sys.stdout.isatty() else 1000).print(table)
    if not grants:
        err.print("no grants")
    for issuer in sorted(cut):
        err.print(
            f"the grants {issuer} gave are not in force: {issuer} is cut off (every token of theirs revoked, "
            f"`interlock token revoke`), so they authorize nothing; `interlock token create {issuer} --human` "
            "restores them",
            markup=False,
            soft_wrap=True,
        )


@grants_app.command("list")
def grants_list(
    audience: Annotated[str | None, typer.Option("--audience", help="Only grants this principal holds.")] = None,
    issuer: Annotated[str | None, typer.Option("--issuer", help="Only grants this person gave.")] = None,
    request: Annotated[str | None, typer.Option("--request", help="Only grants this request issued.")] = None,
    live: Annotated[
        bool,
        typer.Option(
            "--live", help="Only grants in force: neither revoked nor expired, nor given by a person cut off."
        ),
    ] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="The most grants listed, newest first.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """List issued grants, newest first. On a server, those you hold or gave: by default an
    agent's the ones it holds, a person's the ones they gave (`--audience YOU` for the ones you
    hold). A grant whose issuer `token revoke` cut off shows the state "issuer cut off": it
    authorizes nothing until `token create ISSUER --human` gives them a token again."""
    page = _run(
        db, lambda b: b.list_grants(audience=audience, issuer=issuer, request=request, live=live, limit=limit), token
    )
    _print_grants([issued_grant_to_dict(g) for g in page.items], as_json)


@grants_app.command("show")
def grants_show(
    grant_id: Annotated[str, typer.Argument(help="The grant's id.")], db: DbOption = None, token: TokenOption = None
) -> None:
    """Print one grant as JSON (from a server, with its signed token)."""

    async def work(broker: Broker) -> dict[str, Any]:
        shown = issued_grant_to_dict(await broker.get_grant(grant_id))
        token = getattr(broker, "grant_token", None)
        if token is not None:
            shown["token"] = await token(grant_id)
        return shown

    typer.echo(_json(_run(db, work, token), indent=2))


@grants_app.command("check")
def grants_check(
    audience: Annotated[str, typer.Option("--audience", help="Who would use the grant.")],
    with_: Annotated[str, typer.Option("--with", help="The resource.")],
    can: Annotated[str, typer.Option("--can", help="The ability.")],
    issuer: Annotated[str | None, typer.Option("--issuer", help="Only a grant from this person.")] = None,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Whether a live grant lets AUDIENCE do CAN on WITH: exit 0 and print it, else exit 1."""
    found = _run(db, lambda b: b.check_grant(audience, with_, can, issuer=issuer), token)
    if found is None:
        raise _fail(f"no live grant lets {audience} do {can} on {with_}", DECLINED)
    typer.echo(_json(issued_grant_to_dict(found)))


@grants_app.command("give")
def grants_give(
    to: Annotated[str, typer.Argument(help="Who may use the grant.")],
    with_: Annotated[str, typer.Option("--with", help="The resource, e.g. interlock:inbox/alice.")],
    can: Annotated[str, typer.Option("--can", help="The ability, e.g. hitl/request.")],
    exp: Annotated[
        int | None,
        typer.Option(
            "--exp",
            parser=_expiry,
            metavar="DURATION",
            help="When it ends: how long from now, a duration with its unit: 30m, 12h, 3d (up to the venue's "
            "ceiling); a whole number alone is the Unix time it ends at.",
            show_default=False,
        ),
    ] = None,
    no_expiry: Annotated[bool, typer.Option("--no-expiry", help="It never expires.")] = False,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help="Who gives it: on a local store, you (the local user) by default; through a server, whom the "
            "token names (a server without auth records this name).",
        ),
    ] = None,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Give a grant directly, without a request (a delegation). Without --exp or
    --no-expiry it lasts the venue's default time."""
    if exp is not None and no_expiry:
        raise _fail("say --exp or --no-expiry, not both")
    until: int | Literal["default"] | None = None if no_expiry else DEFAULT_EXP if exp is None else exp
    giver = _answerer(db, by)
    grant = _run(db, lambda b: b.give_grant(to, with_, can, exp=until, by=giver), token, by=by)
    typer.echo(_json(issued_grant_to_dict(grant)))


@grants_app.command("revoke")
def grants_revoke(
    grant_id: Annotated[str, typer.Argument(help="The grant's id.")],
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help="Who revokes: on a local store, you (the local user) by default; through a server, whom the "
            "token names (a server without auth records this name).",
        ),
    ] = None,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Revoke a grant; it stops checking at once. Exit 1 for an unknown grant or one
    revoked already."""

    revoker = _answerer(db, by)

    async def revoke(broker: Broker) -> bool:
        await broker.get_grant(grant_id)  # NotFound: "no grant ..."
        return await broker.revoke_grant(grant_id, by=revoker)

    if not _run(db, revoke, token, by=by):
        raise _fail(f"grant {grant_id} was revoked already", DECLINED)
    err.print(f"revoked {grant_id}")


# -- approval policies ----------------------------------------------------------------------

policy_app = typer.Typer(
    cls=_Commands,
    no_args_is_help=True,
    help="An agent's declarative approval policy, stored where its requests live: set, show, list, rm.",
)
app.add_typer(policy_app, name="policy")

ToolServerOption = Annotated[
    str,
    typer.Option("--tool-server", help="The tool server (connection) the policy is for; none: all the agent's tools."),
]


def _json_source(text: str) -> str:
    """A `--json` option's JSON: the text itself, `@path` a file's, `-` standard input's
    (neither is JSON, so nothing is taken for the other)."""
    if text == "-":
        return sys.stdin.read()
    if not text.startswith("@"):
        return text
    try:
        return Path(text[1:]).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(f"--json {text}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None


def _read_policy_json(text: str) -> dict[str, Any]:
    source = _json_source(text)
    try:
        data = json.loads(source)
    except ValueError as exc:
        raise _fail(f"--json: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise _fail("--json: an approval policy is a JSON object")
    return data


@policy_app.command("set")
def policy_set(
    ctx: typer.Context,
    agent: Annotated[str, typer.Argument(help="The agent the policy is for.")],
    tool_server: ToolServerOption = "",
    approval: Annotated[
        str | None, typer.Option("--approval", help="once | always | never: how gated calls are decided.")
    ] = None,
    gated: Annotated[
        list[str] | None, typer.Option("--gated", help="A tool (or glob) the policy gates; repeat. Others run at once.")
    ] = None,
    auto_allow: Annotated[
        list[str] | None, typer.Option("--auto-allow", help="A tool (or glob) that never needs approval; repeat.")
    ] = None,
    hook_url: Annotated[str | None, typer.Option("--hook-url", help="A tool-approval hook's URL.")] = None,
    hook_secret: Annotated[
        str | None,
        typer.Option(
            "--hook-secret", envvar="INTERLOCK_HOOK_SECRET", help="The hook's shared secret.", show_default=False
        ),
    ] = None,
    on_hook_error: Annotated[
        str | None, typer.Option("--on-hook-error", help="deny | pause | fail-run, when the hook cannot decide.")
    ] = None,
    hook_timeout: Annotated[
        float | None,
        _duration_option(
            "--hook-timeout",
            f"How long the hook may take, up to {MAX_POLICY_HOOK_TIMEOUT:g}s.",
            most=MAX_POLICY_HOOK_TIMEOUT,
            default=f"{DEFAULT_POLICY_HOOK_TIMEOUT:g}s",
        ),
    ] = None,
    as_json: Annotated[
        str | None, typer.Option("--json", help="The whole policy as JSON (Novo's field names), or @file.")
    ] = None,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Create or replace AGENT's approval policy (from flags, or --json); print it as stored.
    Every approval gate of the agent applies it from its next decision. AGENT and
    --tool-server say which policy is set: a --json naming another agent or tool server is
    refused."""
    data: dict[str, Any] = _read_policy_json(as_json) if as_json is not None else {}
    flags = {"approval": approval, "gatedTools": gated, "autoAllow": auto_allow}
    data.update({k: v for k, v in flags.items() if v is not None})
    if hook_url is not None:
        hook: dict[str, Any] = {"url": hook_url, "secret": hook_secret}
        hook |= {k: v for k, v in (("onHookError", on_hook_error), ("timeout", hook_timeout)) if v is not None}
        data["hook"] = hook
    else:
        # The secret typed here, not INTERLOCK_HOOK_SECRET's (kept in the environment for
        # the next hook, it is no word of this command's).
        typed = getattr(ctx.get_parameter_source("hook_secret"), "name", None) == "COMMANDLINE"
        given = [
            flag
            for flag, value in (
                ("--hook-secret", hook_secret if typed else None),
                ("--on-hook-error", on_hook_error),
                ("--hook-timeout", hook_timeout),
            )
            if value is not None
        ]
        if given:
            said = f"{', '.join(given[:-1])} and {given[-1]} go" if len(given) > 1 else f"{given[0]} goes"
            raise _fail(f"{said} with --hook-url: give the URL of the hook they are for")
    if not data:
        raise _fail(
            "give the policy: --approval, --gated, --auto-allow, --hook-url, or --json "
            "(`interlock policy rm` removes one)"
        )
    # The command line names the policy, as the API's path does: a body may repeat it, not
    # name another (whose policy the command would have set instead).
    named = data.get("agent")
    if named is not None and named != agent:
        raise _fail(f"--json says agent {named!r} but the command line says {agent!r}: name one agent")
    where = data.get("server")
    if where is not None and where != tool_server:
        raise _fail(
            f"--json says server {where!r} but --tool-server says {tool_server!r}: name one tool server"
            if tool_server
            else f"--json says server {where!r} but the command line sets the policy of the agent's whole "
            f"toolset: add --tool-server {shlex.quote(str(where))} to set that tool server's"
        )
    data["agent"] = agent
    data["server"] = tool_server or None
    # On a local store, you (the local user) change it; a server records whom the token names.
    stored = _run(db, lambda b: b.set_approval_policy(data, by=_answerer(db, None)), token)
    typer.echo(_json(policy_to_dict(stored), indent=2))


@policy_app.command("show")
def policy_show(
    agent: Annotated[str, typer.Argument(help="The agent.")],
    tool_server: ToolServerOption = "",
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Print AGENT's policy (for --tool-server) as JSON, without the hook's secret; exit 1 if none."""
    typer.echo(_json(policy_to_dict(_run(db, lambda b: b.get_approval_policy(agent, tool_server), token)), indent=2))


@policy_app.command("list")
def policy_list(
    agent: Annotated[str | None, typer.Option("--agent", help="Only this agent's policies.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """List the stored approval policies (on a server: those you may read)."""
    policies = [policy_to_dict(p) for p in _run(db, lambda b: b.list_approval_policies(agent), token)]
    if as_json:
        for policy in policies:
            typer.echo(_json(policy))
        return
    table = Table(box=None, header_style="bold")
    for column in ("agent", "tool server", "approval", "gated", "auto-allow", "hook", "version"):
        table.add_column(column)
    for p in policies:
        gated_tools = "all" if p["gatedTools"] is None else ", ".join(p["gatedTools"]) or "none"
        hook = "" if p["hook"] is None else f"{p['hook']['url']} ({p['hook']['onHookError']})"
        table.add_row(
            p["agent"],
            p["server"] or "",
            p["approval"] or "",
            gated_tools,
            ", ".join(p["autoAllow"]),
            hook,
            str(p["version"]),
        )
    Console(width=None if sys.stdout.isatty() else 1000).print(table)
    if not policies:
        err.print("no approval policies")


@policy_app.command("rm")
def policy_rm(
    agent: Annotated[str, typer.Argument(help="The agent.")],
    tool_server: ToolServerOption = "",
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Delete AGENT's policy (for --tool-server); exit 1 if there was none."""
    if not _run(db, lambda b: b.delete_approval_policy(agent, tool_server, by=_answerer(db, None)), token):
        raise _fail(f"agent {agent} has no such approval policy", DECLINED)
    err.print(f"deleted the approval policy of {agent}{f' for {tool_server}' if tool_server else ''}")


# -- the outbox: deliveries, dead letters and a standalone delivery loop ----------------------

deliveries_app = typer.Typer(
    cls=_Commands, no_args_is_help=True, help="The outbox: how people were told about requests, and the dead letters."
)
app.add_typer(deliveries_app, name="deliveries")


def _print_deliveries(items: list[dict[str, Any]]) -> None:
    if not items:
        err.print("no deliveries")
        return
    table = Table(box=None, pad_edge=False)
    for column in ("id", "request", "kind", "to", "channel", "status", "tries", "last error"):
        table.add_column(column)
    for d in items:
        table.add_row(
            d["id"],
            d["request_id"],
            d["kind"],
            d["recipient"],
            d["channel"],
            d["status"],
            str(d["attempts"]),
            escape(d["last_error"] or ""),
        )
    Console(width=200).print(table)


@deliveries_app.command("list")
def deliveries_list(
    request: Annotated[str | None, typer.Option("--request", help="Only the deliveries of this request.")] = None,
    status: Annotated[
        str | None, typer.Option("--status", help="pending, delivered, dead (the dead letters) or skipped.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """List deliveries: of one request, or in one state (`--status dead` for the dead letters)."""
    from .outbox import DELIVERY_STATES, delivery_to_dict

    if status is not None and status not in DELIVERY_STATES:
        raise _fail(f"--status is one of {', '.join(DELIVERY_STATES)}, not {status!r}")

    async def work(broker: Broker) -> list[dict[str, Any]]:
        found = await broker.list_deliveries(request_id=request, status=status, limit=1000)
        return [delivery_to_dict(d) for d in found]

    items = _run(db, work, token)
    if as_json:
        for item in items:
            typer.echo(_json(item))
    else:
        _print_deliveries(items)


@deliveries_app.command("retry")
def deliveries_retry(
    delivery_id: Annotated[str, typer.Argument(help="The id of a dead letter (dlv_...).")],
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Send a dead letter again (due now, its attempts counted afresh)."""

    async def work(broker: Broker) -> bool:
        try:
            await broker.retry_delivery(delivery_id)
        except (NotFound, AlreadySettled):
            return False
        return True

    if not _run(db, work, token):
        raise _fail(f"no dead letter {delivery_id!r}", DECLINED)
    err.print(f"{delivery_id} will be sent again")


routing_app = typer.Typer(
    cls=_Commands,
    no_args_is_help=True,
    help="The routing in use (who is told about requests, through which channels), kept in the store.",
)
app.add_typer(routing_app, name="routing")


@routing_app.command("show")
def routing_show(db: DbOption = None, token: TokenOption = None) -> None:
    """Print the routing in use as JSON, the channels' secrets masked."""
    document = _run(db, lambda b: b.routing(), token)
    if document is None:
        raise _fail("no routing is kept here yet: set one with `interlock routing set FILE`", DECLINED)
    typer.echo(_json(document, indent=2))


@routing_app.command("set")
def routing_set(
    file: Annotated[
        Path,
        typer.Argument(
            help="A routing file, checked as `serve --routing` checks it: TOML, or JSON (a name ending in .json) "
            "as `routing show` prints it, a secret left as *** keeping the one in use."
        ),
    ],
    db: DbOption = None,
    token: TokenOption = None,
) -> None:
    """Replace the routing in use with a file's: every server on the store (or the server
    named) takes it up within seconds, and it survives restarts."""
    from .channels import ChannelContext, ChannelError, open_channels
    from .routing import RoutingError, read_routing_document, routing_from_dict

    async def replace(broker: Broker) -> Routing:
        document = read_routing_document(file)
        if isinstance(broker, LocalBroker):  # a server checks its channels itself
            document = await broker.with_secrets_kept(document)
            try:
                routing = routing_from_dict(document)
                for channel in open_channels(routing.channels, ChannelContext(routing.inbox_url)).values():
                    await channel.aclose()
            except (RoutingError, ChannelError) as exc:
                raise type(exc)(f"{file}: {exc}") from None
        await broker.set_routing(document)
        return routing_from_dict(document)

    try:
        routing = _run(db, replace, token)
    except (RoutingError, ChannelError) as exc:
        raise _fail(str(exc)) from None
    err.print(f"routing from {file} in use (channels: {', '.join(routing.channels) or 'none'})")
    _warn_of(routing, secrets=False)


secret_key_app = typer.Typer(
    cls=_Commands,
    no_args_is_help=True,
    help="The INTERLOCK_SECRET_KEY the nodes on a store sign with (answer links, grant tokens): a node "
    "started with another is refused. Change it on purpose here.",
)
app.add_typer(secret_key_app, name="secret-key")


@secret_key_app.command("rotate")
def secret_key_rotate(ctx: typer.Context, db: LocalDb = None) -> None:
    """Make the INTERLOCK_SECRET_KEY of this environment the one the nodes on the store sign
    with: from now on a node started with another key (the old one) is refused. Answer links
    mailed, and grant tokens signed, with the old key stop working; restart every node with
    the new one. A grant key derived from the secret key follows it; one given with
    --grant-key stays."""
    where = _on_the_store(ctx, db, "secret-key rotate")
    secret = _secret_key()
    if not secret:
        raise _fail(
            f"{SECRET_KEY_ENV} is not set: set it to the new key, which rotate records as the nodes' key "
            "(`interlock secret-key forget` records none)"
        )
    if _run(db, lambda broker: _local(broker).rotate_secret_key(secret)):
        err.print(
            f"the nodes on {where} sign with this {SECRET_KEY_ENV} from now on: restart each node with it (one "
            "still running signs with the old key until then)",
            markup=False,
            soft_wrap=True,
        )
    else:
        err.print(f"unchanged: the nodes on {where} sign with this {SECRET_KEY_ENV} already", markup=False)


@secret_key_app.command("forget")
def secret_key_forget(ctx: typer.Context, db: LocalDb = None) -> None:
    """Record no key for the nodes on the store: a node without INTERLOCK_SECRET_KEY (which
    makes a key of its own at each start) is no longer refused, until a node with a key
    starts and records it. For one node on its own, never for several."""
    where = _on_the_store(ctx, db, "secret-key forget")
    if _run(db, lambda broker: _local(broker).rotate_secret_key(None)):
        err.print(f"the store at {where} keeps no secret key now: each node signs with its own", markup=False)
    else:
        err.print(f"unchanged: the store at {where} keeps no secret key", markup=False)


grant_key_app = typer.Typer(
    cls=_Commands,
    no_args_is_help=True,
    help="The key the nodes on a store sign grant tokens with (--grant-key / INTERLOCK_GRANT_KEY, or derived "
    "from INTERLOCK_SECRET_KEY): a node started with another is refused. Change it on purpose here.",
)
app.add_typer(grant_key_app, name="grant-key")


@grant_key_app.command("rotate")
def grant_key_rotate(
    ctx: typer.Context,
    grant_key: Annotated[
        Path | None,
        typer.Option(
            "--grant-key",
            envvar=GRANT_KEY_ENV,
            help="The new key's file (an Ed25519 private key, PEM); without it, the key derived from "
            "INTERLOCK_SECRET_KEY.",
            show_default=False,
        ),
    ] = None,
    db: LocalDb = None,
) -> None:
    """Make the grant key named here (or derived from this environment's
    INTERLOCK_SECRET_KEY) the one the nodes on the store sign grant tokens with: from now on
    a node started with another is refused. Tokens signed with the old key stop verifying;
    restart every node with the new one."""
    where = _on_the_store(ctx, db, "grant-key rotate")
    try:
        from .grant_tokens import GrantSigner
    except ImportError as exc:
        raise _fail(f"grant keys need the server's extra ({_missing(exc)} is missing)") from None
    secret = None if grant_key is not None else _secret_key()  # (with a key's file, the secret key is not used)
    if grant_key is not None:
        kid, derived = _grant_signer(grant_key).kid, False
    elif secret:
        kid, derived = GrantSigner.from_secret(secret).kid, True
    else:
        raise _fail(
            f"neither --grant-key ({GRANT_KEY_ENV}) nor {SECRET_KEY_ENV} is set: name the new grant key's file, "
            "or set the secret key it is derived from (`interlock grant-key forget` records none)"
        )
    if _run(db, lambda broker: _local(broker).rotate_grant_key(kid, derived=derived)):
        err.print(
            f"the nodes on {where} sign grant tokens with the key {kid} from now on: restart each node with it "
            "(one still running signs with the old key until then)",
            markup=False,
            soft_wrap=True,
        )
    else:
        err.print(f"unchanged: the nodes on {where} sign grant tokens with the key {kid} already", markup=False)


@grant_key_app.command("forget")
def grant_key_forget(ctx: typer.Context, db: LocalDb = None) -> None:
    """Record no grant key for the nodes on the store: a node that makes its key at each
    start (no --grant-key, no INTERLOCK_SECRET_KEY) is no longer refused, until a node with
    a key starts and records it. For one node on its own, never for several."""
    where = _on_the_store(ctx, db, "grant-key forget")
    if _run(db, lambda broker: _local(broker).rotate_grant_key(None)):
        err.print(
            f"the store at {where} keeps no grant key now: a node without one makes its own at each start",
            markup=False,
        )
    else:
        err.print(f"unchanged: the store at {where} keeps no grant key", markup=False)


@app.command()
def deliver(
    ctx: typer.Context,
    routing: Annotated[
        Path | None,
        typer.Option(
            "--routing",
            envvar="INTERLOCK_ROUTING",
            help="A routing file (TOML); without it, the routing kept in the store (`interlock routing set`).",
        ),
    ] = None,
    db: LocalDb = None,
    poll_interval: Annotated[
        float,
        _duration_option(
            "--poll-interval", "How long between looks at the outbox, 50ms or more.", least=0.05, default="1s"
        ),
    ] = 1.0,
    concurrency: SendsOption = 16,
    per_channel: ShareOption = None,
) -> None:
    """Run the outbox's delivery loop alone (beside servers that run without --routing).
    Email answer links are signed with INTERLOCK_SECRET_KEY, which the servers must share."""
    from .channels import Channel, ChannelContext, ChannelError, open_channels
    from .channels.delivery import DeliveryLoop
    from .channels.links import AnswerLinks
    from .routing import RoutingError, load_routing

    _on_the_store(ctx, db, "deliver")
    sends = _send_limits(concurrency, per_channel)
    try:
        from_file = load_routing(routing) if routing is not None else None
    except RoutingError as exc:
        raise _fail(str(exc)) from None

    secret = _secret_key()

    async def work(broker: Broker) -> None:
        local = _local(broker)
        refusal = await local.check_secret_key(secret) if secret else None  # without, it signs no links
        if refusal is not None:  # the servers check the links with the same key
            raise InvalidRequest(refusal)

        def channels_of(chosen: Routing) -> tuple[ChannelContext, dict[str, Channel]]:
            links = AnswerLinks(secret, chosen.inbox_url) if secret and chosen.inbox_url else None
            context = ChannelContext(chosen.inbox_url, links)
            return context, open_channels(chosen.channels, context)

        made = None
        if from_file is not None:  # its channels made before it is kept: one they refuse changes nothing
            try:
                made = channels_of(from_file)
            except ChannelError as exc:
                raise InvalidRequest(f"{routing}: {exc}") from None
        the_routing = await local.settle_routing(from_file)
        if the_routing is None:
            raise InvalidRequest("no routing here yet: pass --routing FILE, or set one with `interlock routing set`")
        if made is None or the_routing is not from_file:  # the routing kept in the store is used
            for channel in made[1].values() if made is not None else ():
                await channel.aclose()
            try:
                made = channels_of(the_routing)
            except ChannelError as exc:
                raise InvalidRequest(f"the routing kept in the store: {exc}") from None
        context, channels = made
        loop = DeliveryLoop(
            local.outbox,
            the_routing,
            channels=channels,
            context=context,
            poll_interval=poll_interval,
            routing_check=5.0,
            concurrency=sends[0],
            per_channel=sends[1],
        )
        _warn_of(the_routing)
        err.print(f"delivering from {redact_url(db or 'sqlite:///interlock.db')}", markup=False)
        with _log_to_stderr():  # a delivery that failed, a dead letter, the routing taken again
            try:
                await loop.run()
            finally:
                await loop.stop()

    _run(db, work)


def main() -> None:
    # A mistyped command line is a usage error (4). Typer parses it with click (a copy of its
    # own in newer typers), whose usage error, BadParameter's base, exits 2: the code this
    # CLI gives an expired request, which a script branching on it would read a typo as.
    typer.BadParameter.__bases__[0].exit_code = USAGE  # type: ignore[attr-defined]
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
