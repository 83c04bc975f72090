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
from urllib.parse import urlencode

from .principals import SIGNIN_LINK_LIFETIME, issue_signin_link
from .store import PrincipalStore

__all__ = ["SIGNIN_LINK_PATH", "mint_signin_link", "safe_next"]

SIGNIN_LINK_PATH = "/signin/link"


async def mint_signin_link(
    store: PrincipalStore,
    principal: str,
    base_url: str,
    *,
    next: str = "/",
    lifetime: timedelta = SIGNIN_LINK_LIFETIME,
) -> str:
    """A new one-time link that signs `principal` (a human known to `store`) in to the web
    inbox at `base_url` and then opens `next` (a path on that server, such as
    `/requests/<id>`). It works once, within `lifetime`."""
    found = await store.get_principal(principal)
    if found is None or found.kind != "human":
        raise ValueError(f"no human named {principal!r}: only people sign in to the inbox")
    link = issue_signin_link(principal, datetime.now(UTC), lifetime)
    await store.save_signin_link(link)
    query = {"code": link.secret} | ({"next": next} if safe_next(next) and next != "/" else {})
    return f"{base_url.rstrip('/')}{SIGNIN_LINK_PATH}?{urlencode(query)}"


def safe_next(path: str | None) -> bool:
    """Whether `path` may follow a sign-in: a path on this server (`/requests/...`), never
    another site (`//evil.example`, `https://...`, `/\\evil.example`)."""
    if not path or len(path) > 2000 or not path.startswith("/") or path.startswith("//"):
        return False
    return "\\" not in path and path.isprintable() and not any(c.isspace() for c in path)
