"""The `interlock` command: ask a person from a shell script, list an inbox, answer.

`interlock ask` exits with a code a script can branch on:

    0  answered (and, for --confirm, approved)
    1  declined (--confirm answered no) or rejected
    2  expired
    3  cancelled or closed
    4  usage error, bad input, or the store could not be reached
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import ipaddress
import json
import os
import re
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import __version__
from .agent.terminal import TerminalContract
from .broker import Broker, LocalBroker, connect
from .errors import Cancelled, Expired, Forbidden, InterlockError, InvalidAnswer, InvalidRequest, NotFound, Rejected
from .model import Ask, Choice, Confirm, Form, MultiChoice, Request, Status, Text, request_to_dict
from .principals import TOKEN_PREFIX, Principal, issue_token
from .redact import RedactingFilter, redact, redact_url
from .store import PrincipalStore

__all__ = ["app", "main", "parse_answer"]

ANSWERED, DECLINED, EXPIRED, CANCELLED, USAGE = 0, 1, 2, 3, 4
T = TypeVar("T")

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Durable human-in-the-loop requests for AI agents: ask a person, get a validated answer.",
)
err = Console(stderr=True)

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

LocalDb = Annotated[
    str | None,
    typer.Option(
        "--db", envvar="INTERLOCK_URL", help="Store URL (default sqlite:///interlock.db).", show_default=False
    ),
]


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


def _fail(message: str, code: int = USAGE) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(redact(message))}", highlight=False)
    return typer.Exit(code)


def _principals(broker: Broker) -> PrincipalStore:
    """The principals of the store the broker is on: managed where the store is, never
    through a server's API."""
    if not isinstance(broker, LocalBroker):
        raise Forbidden("principals and tokens are managed on the server: run `interlock token` there")
    return broker.principals


def _run(db: str | None, work: Callable[[Broker], Awaitable[T]]) -> T:
    async def main() -> T:
        async with connect(db) as broker:
            return await work(broker)

    try:
        return asyncio.run(main())
    except (InvalidRequest, InvalidAnswer) as exc:
        raise _fail(str(exc)) from None
    except NotFound as exc:
        raise _fail(str(exc), DECLINED) from None
    except Forbidden as exc:
        raise _fail(f"refused: {exc}") from None
    except (OSError, TimeoutError, ValueError) as exc:
        if isinstance(exc, InterlockError):
            raise
        raise _fail(f"{type(exc).__name__}: {exc}") from None


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(text: str) -> float:
    """'90' or '90s', '10m', '2h', '1d', '250ms' -> seconds."""
    match = _DURATION.match(text)
    if not match or float(match[1]) <= 0:
        raise typer.BadParameter(f"{text!r} is not a duration like 30s, 10m, 2h or 1d")
    return float(match[1]) * _UNIT[match[2]]


@app.command()
def ask(
    prompt: Annotated[str, typer.Argument(help="What to ask.")],
    confirm: Annotated[bool, typer.Option("--confirm", help="A yes/no question; exit 1 when declined.")] = False,
    choice: Annotated[list[str] | None, typer.Option("--choice", help="An option (repeat for each).")] = None,
    multi: Annotated[bool, typer.Option("--multi", help="With --choice: several may be picked.")] = False,
    other: Annotated[bool, typer.Option("--other", help="With --choice: free text is allowed too.")] = False,
    text: Annotated[bool, typer.Option("--text", help="Free text (the default).")] = False,
    multiline: Annotated[bool, typer.Option("--multiline", help="Free text over several lines.")] = False,
    form: Annotated[Path | None, typer.Option("--form", help="A JSON Schema (type object) file.")] = None,
    to: Annotated[str | None, typer.Option("--to", help="Whose inbox it goes to.")] = None,
    title: Annotated[str, typer.Option("--title", help="A short title.")] = "",
    details: Annotated[str, typer.Option("--details", help="More context, in markdown.")] = "",
    timeout: Annotated[str | None, typer.Option("--timeout", help="Expire after this long: 30s, 10m, 2h, 1d.")] = None,
    db: DbOption = None,
) -> None:
    """Ask a person and wait for the answer; print it as JSON. Exit codes: 0 answered
    (approved), 1 declined or rejected, 2 expired, 3 cancelled, 4 usage or connection error."""
    kinds = sum([confirm, bool(choice), text or multiline, form is not None])
    if kinds > 1:
        raise _fail("choose one of --confirm, --choice, --text/--multiline, --form")
    if (multi or other) and not choice:
        raise _fail("--multi and --other need --choice options")
    seconds = parse_duration(timeout) if timeout else None
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

    async def work(broker: Broker) -> tuple[int, Any]:
        request = await broker.create(the_ask, to=to, title=title, details=details, timeout=seconds)
        waiting = f"Waiting for an answer to {request.id} (answer it with: interlock answer {request.id} ...)"
        if not err.is_terminal:
            err.print(waiting, highlight=False)  # a spinner only shows on a terminal
        with err.status(escape(waiting)):
            try:
                response = await broker.wait(request.id)
            except Rejected as exc:
                return DECLINED, {"status": "rejected", "reason": exc.reason}
            except Expired:
                return EXPIRED, {"status": "expired"}
            except Cancelled as exc:
                return CANCELLED, {"status": "cancelled", "reason": exc.reason}
        value = response.answers.get("answer")
        return (DECLINED if confirm and value is False else ANSWERED), value

    code, value = _run(db, work)
    typer.echo(json.dumps(value))
    raise typer.Exit(code)


@app.command()
def inbox(
    to: Annotated[str | None, typer.Option("--to", help="Only this recipient's requests.")] = None,
    status: Annotated[str, typer.Option("--status", help="pending, answered, rejected, expired, cancelled or all.")] = (
        "pending"
    ),
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    db: DbOption = None,
) -> None:
    """List requests, newest first."""
    if status != "all" and status not in {s.value for s in Status}:
        raise _fail(f"unknown status {status!r}")
    page = _run(db, lambda b: b.list(recipient=to, status=None if status == "all" else status, limit=limit))
    if as_json:
        for request in page.items:
            typer.echo(json.dumps(request_to_dict(request)))
        return
    table = Table(box=None, header_style="bold")
    table.add_column("id", no_wrap=True, min_width=32)
    for column in ("status", "to", "asks", "created", "expires"):
        table.add_column(column)
    now = datetime.now(UTC)
    for r in page.items:
        expires = "" if r.expires_at is None else _ago(r.expires_at, now)
        table.add_row(r.id, r.status.value, r.to or "", _summary(r), _ago(r.created_at, now), expires)
    Console(width=None if sys.stdout.isatty() else 1000).print(table)
    if not page.items:
        err.print("no requests")


@app.command()
def show(request_id: str, db: DbOption = None) -> None:
    """Print one request as JSON."""
    request = _run(db, lambda b: b.get(request_id))
    typer.echo(json.dumps(request_to_dict(request), indent=2))
    if request.status is Status.PENDING:
        if len(request.asks) == 1:
            err.print(f"answer with: {request.asks[0].how_to_answer()}", markup=False)
        else:
            err.print("answer each ask as ASK=VALUE:", markup=False)
            for ask in request.asks:
                err.print(f"  {ask.id}: {ask.how_to_answer()}", markup=False)


@app.command()
def answer(
    request_id: Annotated[str, typer.Argument(help="The request's id.")],
    values: Annotated[
        list[str] | None,
        typer.Argument(help="The answer: yes/no, an option, text; ASK=VALUE for each ask of a request with several."),
    ] = None,
    raw: Annotated[
        str | None, typer.Option("--json", help="The answer as JSON (a value, or answers by ask id).")
    ] = None,
    by: Annotated[str | None, typer.Option("--by", help="Who is answering.")] = None,
    comment: Annotated[str, typer.Option("--comment", help="A comment kept with the answer.")] = "",
    db: DbOption = None,
) -> None:
    """Answer a pending request."""

    async def work(broker: Broker) -> bool:
        request = await broker.get(request_id)
        if raw is not None:
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise InvalidAnswer(f"--json is not valid JSON: {exc}") from None
        else:
            value = parse_answer(request, values or [])
        return await broker.resolve(request_id, value, by=by, via="cli", comment=comment)

    if not _run(db, work):
        raise _fail(f"request {request_id} is no longer pending", DECLINED)
    err.print(f"answered {request_id}")


@app.command()
def reject(
    request_id: Annotated[str, typer.Argument(help="The request's id.")],
    reason: Annotated[str, typer.Option("--reason", help="Why; the asker reads it.")] = "",
    by: Annotated[str | None, typer.Option("--by", help="Who is rejecting.")] = None,
    db: DbOption = None,
) -> None:
    """Refuse a pending request."""
    if not _run(db, lambda b: b.reject(request_id, reason, by=by, via="cli")):
        raise _fail(f"request {request_id} is not pending", DECLINED)
    err.print(f"rejected {request_id}")


@app.command()
def watch(
    to: Annotated[str | None, typer.Option("--to", help="On a local store: only requests to this person.")] = None,
    by: Annotated[str | None, typer.Option("--by", help="Who is answering (a server knows from the token).")] = None,
    db: DbOption = None,
) -> None:
    """Answer requests in this terminal as they arrive: what is pending first, then new ones.

    A choice takes an option's number, id or label (ignoring case), or your own words where
    "other" is allowed; a request answered elsewhere meanwhile is skipped. Ctrl-D or Ctrl-C
    stops watching and leaves everything pending.
    """
    terminal = TerminalContract(by=by)

    async def answer(broker: Broker, request: Request) -> None:
        prompting = asyncio.ensure_future(terminal.prompt(broker, request))
        settled = asyncio.ensure_future(broker.watch(request.id))
        done, _ = await asyncio.wait({prompting, settled}, return_when=asyncio.FIRST_COMPLETED)
        if prompting not in done:
            prompting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await prompting
            final = settled.result()
            who = final.response.by if final.response and final.response.by else "someone else"
            err.print(f"\n(request {request.id} was {final.status.value} by {who} meanwhile)")
            return
        settled.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await settled
        prompting.result()  # raises EOFError at the end of input

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
        _run(db, work)


def parse_answer(request: Request, values: list[str]) -> Any:
    """Turn command-line words into an answer: one ask takes the words as its value,
    several take ASK=VALUE pairs."""
    if len(request.asks) == 1:
        return request.asks[0].from_words(values)
    by_id = {a.id: a for a in request.asks}
    answers: dict[str, Any] = {}
    for pair in values:
        ask_id, sep, value = pair.partition("=")
        if not sep or ask_id not in by_id:
            raise InvalidAnswer(f"give each answer as ASK=VALUE with ASK one of: {', '.join(by_id)}")
        answers[ask_id] = by_id[ask_id].from_words([value])
    return answers


def _summary(request: Request) -> str:
    first = request.title or request.asks[0].prompt
    first = first if len(first) <= 60 else first[:57] + "..."
    more = f" (+{len(request.asks) - 1})" if len(request.asks) > 1 else ""
    return f"{request.asks[0].type}: {first}{more}"


def _ago(when: datetime, now: datetime) -> str:
    seconds = int((when - now).total_seconds())
    future, seconds = seconds > 0, abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            amount = f"{seconds // size}{unit}"
            break
    else:
        amount = f"{seconds}s"
    return f"in {amount}" if future else f"{amount} ago"


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8765,
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
            "limit off. [default: 20 with auth, off with --no-auth]",
            show_default=False,
            min=0,
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
            "[default: 32 with auth, no cap with --no-auth]",
            show_default=False,
            min=0,
        ),
    ] = None,
    routing: Annotated[
        Path | None,
        typer.Option(
            "--routing",
            envvar="INTERLOCK_ROUTING",
            help="A routing file (TOML): who is told about requests, through which channels (webhook, email, "
            "Slack, plugins). The delivery loop then runs in the server.",
        ),
    ] = None,
) -> None:
    """Run the HTTP API, the live event stream and the web inbox."""
    try:
        import uvicorn
        from uvicorn.config import LOGGING_CONFIG

        from .server.app import create_app
        from .server.quotas import Quota
    except ImportError as exc:  # pragma: no cover - depends on how interlock was installed
        raise _fail(f"the server needs its extra: pip install 'interlock[server]' ({exc})") from None
    if db is not None and db.startswith(("http://", "https://")):
        raise _fail("serve needs a store URL (sqlite:///... or memory://), not another server")
    if no_auth and not _is_loopback(host):
        raise _fail(f"--no-auth is allowed only on a loopback address, not {host}")
    proxies = list(trusted_proxy or ())
    secret = os.environ.get("INTERLOCK_SECRET_KEY")
    quota: Quota | Literal["default"] | None = "default"
    if rate_limit is not None:
        try:
            quota = Quota(rate_limit, rate_burst) if rate_limit > 0 else None
        except ValueError as exc:
            raise _fail(str(exc)) from None
    streams: int | Literal["default"] | None = "default" if max_streams is None else max_streams or None
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
            routing=str(routing) if routing is not None else None,
        )
    except ValueError as exc:
        raise _fail(str(exc)) from None
    where = f"http://{host}:{port}"
    err.print(f"interlock {__version__} serving {where} on {redact_url(db or 'sqlite:///interlock.db')}", markup=False)
    if no_auth:
        err.print("[yellow]auth is OFF[/yellow]: anyone who can reach this loopback address can read and answer")
    else:
        err.print("auth is on: create tokens with `interlock token create NAME --human|--agent`")
    if proxies:
        err.print(f"trusting X-Forwarded-Proto and X-Forwarded-For from {', '.join(proxies)}", markup=False)
    if routing is not None:
        names = ", ".join(app.state.interlock.delivery.channels) or "none"
        err.print(f"delivering notifications as {routing} says (channels: {names})", markup=False)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="warning",
        log_config=_redacted_logging(LOGGING_CONFIG),
        proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies or None,
    )


def _redacted_logging(base: dict[str, Any]) -> dict[str, Any]:
    """uvicorn's logging set-up with every handler redacting credentials, and interlock's
    own records going to the same place as uvicorn's errors."""
    config = copy.deepcopy(base)
    config.setdefault("filters", {})["redact"] = {"()": RedactingFilter}
    for handler in config.get("handlers", {}).values():
        handler["filters"] = [*handler.get("filters", []), "redact"]
    config.setdefault("loggers", {})["interlock"] = {"handlers": ["default"], "level": "WARNING", "propagate": False}
    return config


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


token_app = typer.Typer(no_args_is_help=True, help="Manage who may use a server: humans and agents, and their tokens.")
app.add_typer(token_app, name="token")


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Argument(help="The human's or agent's name.")],
    human: Annotated[bool, typer.Option("--human", help="A person, who answers requests to them.")] = False,
    agent: Annotated[bool, typer.Option("--agent", help="A program, which makes requests.")] = False,
    owner: Annotated[str | None, typer.Option("--owner", help="An agent's human: its requests go to them.")] = None,
    db: LocalDb = None,
) -> None:
    """Add a human or an agent (or reuse one) and print a new token for it, once."""
    if human == agent:
        raise _fail("say --human or --agent")
    if agent and not owner:
        raise _fail("an agent needs --owner HUMAN: whose inbox its requests go to")

    async def work(broker: Broker) -> str:
        store = _principals(broker)
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
        return token.secret

    secret = _run(db, work)
    err.print(f"token for {name} (shown once; keep it secret):")
    typer.echo(secret)


@token_app.command("revoke")
def token_revoke(
    what: Annotated[str, typer.Argument(help="A token (il_...), a token id, or a name to revoke all its tokens.")],
    db: LocalDb = None,
) -> None:
    """Revoke a token, or every token of a human or agent; it stops working at once."""

    async def work(broker: Broker) -> int:
        store = _principals(broker)
        if what.startswith(TOKEN_PREFIX) and what.count("_") >= 2:
            return await store.revoke_tokens(token_id=what.split("_")[1])
        if await store.get_principal(what) is not None:
            return await store.revoke_tokens(principal=what)
        return await store.revoke_tokens(token_id=what)

    count = _run(db, work)
    if not count:
        raise _fail(f"no live token matches {redact(what)!r}", DECLINED)
    err.print(f"revoked {count} token(s)")


@token_app.command("list")
def token_list(db: LocalDb = None) -> None:
    """List the humans and agents."""
    for p in _run(db, lambda b: _principals(b).list_principals()):
        typer.echo(f"{p.name}\t{p.kind}" + (f"\towner={p.owner}" if p.owner else ""))


# -- the outbox: deliveries, dead letters and a standalone delivery loop ----------------------

deliveries_app = typer.Typer(
    no_args_is_help=True, help="The outbox: how people were told about requests, and the dead letters."
)
app.add_typer(deliveries_app, name="deliveries")


def _deliveries_api(db: str, method: str, path: str, **params: Any) -> Any:
    """Call a server's deliveries API with the token from INTERLOCK_TOKEN."""
    import httpx

    token = os.environ.get("INTERLOCK_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.request(method, db.rstrip("/") + "/api/v1" + path, params=params, headers=headers, timeout=30)
    except httpx.HTTPError as exc:
        raise _fail(f"cannot reach the server at {db}: {exc}") from None
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise _fail(f"{detail}", DECLINED if response.status_code in (404, 409) else USAGE)
    return response.json()


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
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    db: DbOption = None,
) -> None:
    """List deliveries: of one request, or in one state (`--status dead` for the dead letters)."""
    from .outbox import DELIVERY_STATES, delivery_to_dict

    if status is not None and status not in DELIVERY_STATES:
        raise _fail(f"--status is one of {', '.join(DELIVERY_STATES)}, not {status!r}")
    if db is not None and db.startswith(("http://", "https://")):
        if request is not None:
            items = _deliveries_api(db, "GET", f"/requests/{request}/deliveries")["items"]
            items = [d for d in items if status is None or d["status"] == status]
        else:
            items = _deliveries_api(db, "GET", "/deliveries", **({"status": status} if status else {}))["items"]
    else:

        async def work(broker: Broker) -> list[dict[str, Any]]:
            assert isinstance(broker, LocalBroker)
            found = await broker.store.list_deliveries(request_id=request, status=status, limit=1000)
            return [delivery_to_dict(d) for d in found]

        items = _run(db, work)
    if as_json:
        typer.echo(json.dumps(items, indent=2))
    else:
        _print_deliveries(items)


@deliveries_app.command("retry")
def deliveries_retry(
    delivery_id: Annotated[str, typer.Argument(help="The id of a dead letter (dlv_...).")],
    db: DbOption = None,
) -> None:
    """Send a dead letter again (due now, its attempts counted afresh)."""
    if db is not None and db.startswith(("http://", "https://")):
        _deliveries_api(db, "POST", f"/deliveries/{delivery_id}/retry")
    else:

        async def work(broker: Broker) -> bool:
            assert isinstance(broker, LocalBroker)
            return await broker.store.retry_delivery(delivery_id, datetime.now(UTC)) is not None

        if not _run(db, work):
            raise _fail(f"no dead letter {delivery_id!r}", DECLINED)
    err.print(f"{delivery_id} will be sent again")


@app.command()
def deliver(
    routing: Annotated[Path, typer.Option("--routing", envvar="INTERLOCK_ROUTING", help="The routing file (TOML).")],
    db: LocalDb = None,
    poll_interval: Annotated[
        float, typer.Option("--poll-interval", min=0.05, help="Seconds between looks at the outbox.")
    ] = 1.0,
) -> None:
    """Run the outbox's delivery loop alone (beside servers that run without --routing).
    Email answer links are signed with INTERLOCK_SECRET_KEY, which the servers must share."""
    from .channels import ChannelContext, ChannelError
    from .channels.delivery import DeliveryLoop
    from .channels.links import AnswerLinks
    from .routing import RoutingError, load_routing

    if db is not None and db.startswith(("http://", "https://")):
        raise _fail("deliver needs a store URL (sqlite:///... or postgresql://...), not a server")
    try:
        the_routing = load_routing(routing)
    except RoutingError as exc:
        raise _fail(str(exc)) from None

    async def work(broker: Broker) -> None:
        assert isinstance(broker, LocalBroker)
        links = None
        secret = os.environ.get("INTERLOCK_SECRET_KEY")
        if secret and the_routing.inbox_url:  # the servers check the links with the same key
            links = AnswerLinks(secret, the_routing.inbox_url)
        context = ChannelContext(the_routing.inbox_url, links)
        try:
            loop = DeliveryLoop(broker.store, broker.store, the_routing, context=context, poll_interval=poll_interval)
        except ChannelError as exc:
            raise InvalidRequest(str(exc)) from None
        err.print(f"delivering from {redact_url(db or 'sqlite:///interlock.db')}", markup=False)
        try:
            await loop.run()
        finally:
            await loop.stop()

    _run(db, work)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
