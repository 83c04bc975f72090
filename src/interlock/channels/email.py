"""Email over SMTP: the question in the message, one-click answers, HTML and plain text.

Options (in the routing file's `[channels.NAME]`): `from` (required), `host` (default
localhost), `port` (25; 465 with `tls`, 587 is usual with `starttls`), `username` and
`password`, `starttls` / `tls` (booleans), `timeout` (seconds, 30). Each recipient's
address is given in their route (`addresses = { NAME = "alice@example.com" }`); a
recipient without one is a dead letter at once.

A request of one confirm or one choice ask gets a link per answer (see `links`): one
click opens a page on the server that records the answer with `via: email`. Any other
request gets a link to it in the inbox. A person who may not answer the request (an
escalation told them of someone else's) gets no answer links: the message says whom it
waits on, since when, and links to it in the inbox only if they may open it there. Nor
does a message to a team's own address (`Message.to_team`): a link in a shared mailbox
would answer for whoever pressed it, and interlock records answers by the person who
gives them, so it says so and sends its members to the inbox, to answer as themselves. The
message's `Message-ID` is made from the delivery's idempotency key, so a repeat is
recognisably the same message.

Where the server offers sign-in by email, the same channel mails the one-time sign-in
links people ask for on the sign-in page (`compose_signin`, `EmailChannel.send_signin`).

Needs the `email` extra (aiosmtplib): from a clone of interlock, `pip install -e '.[email]'`.
"""

from __future__ import annotations

import html
import re
from datetime import timedelta
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any

from ..model import Request
from ..routing import ChannelConfig
from . import ChannelContext, ChannelError, Message, PermanentFailure, escalation_note, seconds_option, team_note
from .links import quick_answers

__all__ = ["EmailChannel", "compose", "compose_signin"]

_HOST = re.compile(r"[A-Za-z0-9._-]+|[0-9A-Fa-f]*:[0-9A-Fa-f]*:[0-9A-Fa-f:.]*")
"""A host name, an IPv4 address or an IPv6 one: not a URL, no port."""

_SUBJECTS = {
    "request": "{who} asks: {what}",
    "reminder": "Reminder, still waiting for you: {what}",
    "escalation": "Nobody has answered yet: {what}",
}
_ENDED = {
    "answered": "answered",
    "rejected": "rejected",
    "expired": "expired",
    "cancelled": "cancelled",
}


def _headline(request: Request) -> str:
    text = request.title or request.asks[0].prompt
    line = " ".join(text.split())
    return line if len(line) <= 120 else line[:117] + "..."


def compose(message: Message, sender: str, to: str) -> EmailMessage:
    """The email of a delivery: subject, plain-text and HTML parts, answer links."""
    d, request = message.delivery, message.request
    what = _headline(request)
    if d.kind == "settled":
        subject = f"No longer waiting for you ({_ENDED.get(d.event, d.event)}): {what}"
    else:
        subject = _SUBJECTS[d.kind].format(who=request.requester or "An agent", what=what)
    inbox = message.context.request_url(request.id) if message.may_read else None
    links = message.context.answer_links
    choices: list[tuple[str, str]] = []
    answers = d.kind != "settled" and message.may_answer
    if answers and not message.to_team and links is not None:
        for label, value in quick_answers(request) or ():
            choices.append((label, links.link(request, d.recipient, value)))
    text_lines: list[str] = []
    html_parts: list[str] = []
    if d.kind == "settled":
        by = request.response.by if request.response is not None else None
        ended = f"This request was {_ENDED.get(d.event, d.event)}" + (f" by {by}" if by else "") + "."
        text_lines += [ended, ""]
        html_parts.append(f"<p><strong>{html.escape(ended)}</strong></p>")
    for note in (escalation_note(message), team_note(message)):
        if note is not None:
            text_lines += [note, ""]
            html_parts.append(f"<p><strong>{html.escape(note)}</strong></p>")
    if request.title:
        text_lines += [request.title, ""]
        html_parts.append(f"<h2>{html.escape(request.title)}</h2>")
    if request.details:
        text_lines += [request.details, ""]
        html_parts.append(f'<pre style="white-space:pre-wrap">{html.escape(request.details)}</pre>')
    for ask in request.asks:
        text_lines += [ask.prompt, ""]
        html_parts.append(f"<p>{html.escape(ask.prompt)}</p>")
    if choices:
        text_lines.append("Answer with one click:")
        text_lines += [f"  {label}: {url}" for label, url in choices]
        text_lines.append("")
        buttons = " ".join(
            f'<a href="{html.escape(url)}" style="display:inline-block;padding:8px 16px;margin:4px;'
            f'border:1px solid #555;border-radius:4px;text-decoration:none">{html.escape(label)}</a>'
            for label, url in choices
        )
        html_parts.append(f"<p>{buttons}</p>")
    if inbox:
        verb = ("Or answer" if choices else "Answer" if answers else "See it") + " in the inbox"
        verb += " as yourself" if answers and message.to_team else ""
        text_lines.append(f"{verb}: {inbox}")
        html_parts.append(f'<p><a href="{html.escape(inbox)}">{html.escape(verb)}</a></p>')
    email = EmailMessage()
    email["Subject"] = subject
    email["From"] = sender
    email["To"] = to
    email["Date"] = formatdate(localtime=False)
    email["Message-ID"] = f"<{d.id}@interlock>"
    email["X-Interlock-Request"] = request.id
    email["X-Interlock-Delivery"] = d.id
    email.set_content("\n".join(text_lines).rstrip() + "\n")
    email.add_alternative("<!doctype html><html><body>" + "\n".join(html_parts) + "</body></html>", subtype="html")
    return email


def compose_signin(sender: str, to: str, person: str, link: str, lifetime: timedelta) -> EmailMessage:
    """The email of a sign-in link someone asked for on the sign-in page."""
    minutes = max(1, round(lifetime.total_seconds() / 60))
    text = (
        f"Someone (you, we hope) asked to sign in to the interlock inbox as {person}.\n\n"
        f"This link signs you in, once, within {minutes} minutes:\n\n  {link}\n\n"
        "If it was not you, ignore this message: nothing happens unless the link is used.\n"
    )
    rich = (
        f"<p>Someone (you, we hope) asked to sign in to the interlock inbox as <strong>{html.escape(person)}"
        f"</strong>.</p><p>This link signs you in, once, within {minutes} minutes:</p>"
        f'<p><a href="{html.escape(link)}">Sign in to interlock</a></p>'
        "<p>If it was not you, ignore this message: nothing happens unless the link is used.</p>"
    )
    email = EmailMessage()
    email["Subject"] = "Your sign-in link to interlock"
    email["From"] = sender
    email["To"] = to
    email["Date"] = formatdate(localtime=False)
    email["Message-ID"] = make_msgid(domain="interlock")
    email.set_content(text)
    email.add_alternative(f"<!doctype html><html><body>{rich}</body></html>", subtype="html")
    return email


class EmailChannel:
    def __init__(self, config: ChannelConfig, context: ChannelContext) -> None:
        options: dict[str, Any] = dict(config.options)
        where = f"channels.{config.name}"
        sender = options.pop("from", None)
        if not isinstance(sender, str) or "@" not in sender:
            raise ChannelError(f"{where}.from: the sender's address, like interlock@example.com")
        self.sender = sender
        host = options.pop("host", "localhost")
        if not isinstance(host, str) or not _HOST.fullmatch(host):
            raise ChannelError(
                f"{where}.host: the mail server's host name or address, like smtp.example.com, not {host!r} "
                "(the port is `port`; TLS is `tls` or `starttls`)"
            )
        self.host = host
        flags = {}
        for flag in ("tls", "starttls"):
            value = options.pop(flag, False)
            if not isinstance(value, bool):
                raise ChannelError(f"{where}.{flag}: true or false, not {value!r}")
            flags[flag] = value
        if flags["tls"] and flags["starttls"]:
            raise ChannelError(
                f"{where}: tls (TLS from the start, port 465) or starttls (upgraded, port 587), not both"
            )
        self.tls, self.starttls = flags["tls"], flags["starttls"]
        port = options.pop("port", 465 if self.tls else 25)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ChannelError(f"{where}.port: a port number")
        self.port = port
        self.username = options.pop("username", None)
        self.password = options.pop("password", None)
        self.timeout = seconds_option(options.pop("timeout", 30), f"{where}.timeout")
        if options:
            raise ChannelError(f"{where}: unknown option {sorted(options)[0]!r} for email")
        try:
            import aiosmtplib  # noqa: F401  # checked here: a missing extra fails at start, not at the first send
        except ImportError:
            raise ChannelError(
                f"{where}: email needs the email extra: in your clone of interlock, run `pip install -e '.[email]'`"
            ) from None
        self.name = config.name

    async def send(self, message: Message) -> str | None:
        import aiosmtplib

        to = message.delivery.address
        if not to:
            raise PermanentFailure(f"no email address for {message.delivery.recipient!r} (addresses.{self.name})")
        try:
            await self._submit(compose(message, self.sender, to))
        except aiosmtplib.SMTPRecipientsRefused as exc:
            raise PermanentFailure(f"the mail server refused {to}: {exc}") from None
        return None

    async def send_signin(self, to: str, person: str, link: str, lifetime: timedelta) -> None:
        """Mail `person` (at `to`) a one-time sign-in link to the web inbox."""
        await self._submit(compose_signin(self.sender, to, person, link, lifetime))

    async def _submit(self, email: EmailMessage) -> None:
        import aiosmtplib

        await aiosmtplib.send(
            email,
            hostname=self.host,
            port=self.port,
            username=self.username,
            password=self.password,
            use_tls=self.tls,
            start_tls=self.starttls,
            timeout=self.timeout,
        )

    async def aclose(self) -> None:
        pass
