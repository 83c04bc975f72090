"""One-time sign-in links to the web inbox, for people who should not have to paste a token.

`interlock serve` prints one for the person at the machine when it starts (as notebook
servers do); where the routing has an email channel, the sign-in page mails one to a
person who asks for it (`server.email_signin`), and a link made with `next` signs in and
opens that page (a request's, say). The link carries a random secret;
the store keeps its hash, whom it signs in and until when. Used once, it is spent: the web
inbox opens a session for that person with a token of its own, so revoking the person's
tokens ends it like any other session.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol
from urllib.parse import urlencode

from .principals import SIGNIN_LINK_LIFETIME, IssuedSignInLink, Principal, issue_signin_link

__all__ = ["SIGNIN_LINK_PATH", "SignInLinks", "mint_signin_link", "safe_next"]

SIGNIN_LINK_PATH = "/signin/link"


class SignInLinks(Protocol):
    """Where the people and their sign-in links are kept: a `LocalBroker` (or its
    store's principals port)."""

    async def get_principal(self, name: str) -> Principal | None: ...

    async def save_signin_link(self, link: IssuedSignInLink) -> None: ...


async def mint_signin_link(
    broker: SignInLinks,
    principal: str,
    base_url: str,
    *,
    next: str = "/",
    lifetime: timedelta = SIGNIN_LINK_LIFETIME,
) -> str:
    """A new one-time link that signs `principal` (a human known to `broker`, a local one) in to the web
    inbox at `base_url` and then opens `next` (a path on that server, such as
    `/requests/<id>`). It works once, within `lifetime`."""
    found = await broker.get_principal(principal)
    if found is None or found.kind != "human":
        raise ValueError(f"no human named {principal!r}: only people sign in to the inbox")
    link = issue_signin_link(principal, datetime.now(UTC), lifetime)
    await broker.save_signin_link(link)
    query = {"code": link.secret} | ({"next": next} if safe_next(next) and next != "/" else {})
    return f"{base_url.rstrip('/')}{SIGNIN_LINK_PATH}?{urlencode(query)}"


def safe_next(path: str | None) -> bool:
    """Whether `path` may follow a sign-in: a path on this server (`/requests/...`), never
    another site (`//evil.example`, `https://...`, `/\\evil.example`)."""
    if not path or len(path) > 2000 or not path.startswith("/") or path.startswith("//"):
        return False
    return "\\" not in path and path.isprintable() and not any(c.isspace() for c in path)
