"""Sign-in links by email, where the routing has an email channel and says where the inbox is
(`inbox_url`).

The sign-in page then asks for an email address too. When the address is a person's on
one of the routing's email channels (`addresses` in their route) and that person is a
human known here, the server mints a one-time sign-in link (`interlock.signin`: it works
once, within `MAIL_LIFETIME`, and opens the page the person was going to) and mails it
through that channel.

Nothing tells whether an address is known: the page answers the same for every address,
and the look-up and the mail happen after the answer, so its timing tells nothing either.
How often links are asked for is capped per address (known or not) and per client
(`quotas.SIGNIN_MAIL_PER_ADDRESS`, `quotas.SIGNIN_MAIL_PER_CLIENT`); past that the page
says when to try again.
"""

from __future__ import annotations

import asyncio
import logging
import math
from datetime import timedelta

from fastapi import APIRouter
from fastapi import Request as HttpRequest
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ..channels.email import EmailChannel
from ..signin import mint_signin_link, safe_next
from .common import AppState, State
from .web import email_signin_offered, read_signin_form, signin_page

__all__ = ["MAIL_LIFETIME", "router", "person_at"]

log = logging.getLogger("interlock.server")

MAIL_LIFETIME = timedelta(minutes=15)
"""How long a mailed sign-in link works."""

router = APIRouter(include_in_schema=False)


def person_at(state: AppState, address: str) -> tuple[str, str, EmailChannel] | None:
    """Whose address `address` is on the routing's email channels (compared without case):
    their name, the address as the routing gives it, and the channel to mail them
    through; None unless exactly one recipient has it."""
    loop = state.delivery
    if loop is None:
        return None
    wanted = address.strip().lower()
    found: dict[str, tuple[str, EmailChannel]] = {}
    for name, route in loop.routing.recipients.items():
        for channel_name, given in route.addresses.items():
            channel = loop.channels.get(channel_name)
            if isinstance(channel, EmailChannel) and given.strip().lower() == wanted:
                found.setdefault(name, (given.strip(), channel))
    if len(found) != 1:
        return None
    [(name, (on_file, channel))] = found.items()
    return name, on_file, channel


async def _mail_link(state: AppState, address: str, next_path: str) -> None:
    """Mail a sign-in link to the person at `address`, if there is one (logged, never raised:
    nobody waits for this)."""
    try:
        found = person_at(state, address)
        loop = state.delivery
        if found is None or loop is None or loop.context.inbox_url is None:
            return
        name, on_file, channel = found
        principal = await state.broker.get_principal(name)
        if principal is None or principal.kind != "human" or await state.broker.tokens_all_revoked(name):
            return  # (every token of theirs revoked: `token revoke NAME` cut them off)
        base = loop.context.inbox_url
        link = await mint_signin_link(state.broker, name, base, next=next_path, lifetime=MAIL_LIFETIME)
    except Exception:
        log.exception("mailing a sign-in link failed")
        return
    try:
        await channel.send_signin(on_file, name, link, MAIL_LIFETIME)
    except Exception as exc:  # the mail server down or refusing: a failure to send, not a bug to trace
        log.warning(
            "mailing %s a sign-in link through %s failed: %s (they may ask for another, or sign in with a token)",
            name,
            channel.name,
            str(exc) or type(exc).__name__,
        )


def _valid_address(address: str) -> bool:
    local, at, domain = address.rpartition("@")
    return bool(at and local and "." in domain) and len(address) <= 254 and not any(c.isspace() for c in address)


@router.post("/signin/email", name="signin_email", response_class=HTMLResponse)
async def ask_for_a_link(http: HttpRequest, state: State) -> Response:
    if not state.auth.enabled:
        return RedirectResponse(http.url_for("inbox"), status_code=303)
    values, stale = await read_signin_form(http)
    next_path = values.get("next")
    next_path = next_path if safe_next(next_path) else "/"
    if stale is not None:
        return signin_page(state, http, stale, 403, next_path)
    if not email_signin_offered(state):
        return signin_page(state, http, "This server sends no sign-in links by email.", 404, next_path)
    address = values.get("email").strip()
    if not _valid_address(address):
        return signin_page(state, http, "Give your email address, like alice@example.com.", 422, next_path)
    client = http.client.host if http.client is not None else ""
    wait = max(state.quotas.signin_mail.wait_for(address.lower()), state.quotas.signin_mail_clients.wait_for(client))
    if wait > 0:
        minutes = math.ceil(wait / 60)
        message = f"Too many sign-in links were asked for. Try again in {minutes} minute{'s' * (minutes != 1)}."
        return signin_page(state, http, message, 429, next_path)
    task = asyncio.get_running_loop().create_task(_mail_link(state, address, next_path))
    state.tasks.add(task)
    task.add_done_callback(state.tasks.discard)
    minutes = round(MAIL_LIFETIME.total_seconds() / 60)
    notice = (
        f"If {address} is the address of someone here, a sign-in link is on its way to it. "
        f"It works once, within {minutes} minutes."
    )
    return signin_page(state, http, next_path=next_path, notice=notice)
