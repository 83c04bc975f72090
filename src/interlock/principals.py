"""Who may do what: principals, their bearer tokens, and the access rules.

Principals are humans and agents. An agent has an owner, a human: a request an agent
makes without naming a recipient goes to its owner's inbox. The rules, everywhere:

- anyone signed in may create a request in their own inbox (an agent: its owner's), and in
  anyone else's with their grant to request there (`interlock.grants`); the server
  records them as its requester;
- a request is visible to its requester and its recipient, and to nobody else; a request
  to a team is visible to the team's members (people);
- only the recipient answers or rejects it, and only if the recipient is a human: an agent
  never answers, not even in its owner's inbox; a request to a team is answered by any
  of its members, the first answer winning as everywhere;
- a member of the team a request is addressed to may claim it while it is pending (the
  others see who took it and when); a claim is advisory: it does not stop another
  member from answering;
- only the requester cancels it.

A team is a principal too (kind `team`), with people as members: it has no token and
never signs in. Its members are kept in the store; a principal as the server
authenticates it carries the teams it belongs to (an agent: its owner's), which is all the
rules above need. A person and an agent ask their (owner's) teams as they ask their own
inbox.

Tokens are random secrets shown once; only their SHA-256 is stored (they carry 256 bits
of entropy, so a slow password hash would add nothing). A web session is the same kind of
secret, kept in a cookie: the store keeps its hash, the token it was opened with and its
CSRF token, so signing out or revoking the token ends it on every node.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from .errors import Forbidden, InvalidRequest
from .model import Request, Status

__all__ = [
    "ANONYMOUS",
    "IssuedSession",
    "IssuedSignInLink",
    "IssuedToken",
    "LiveToken",
    "Principal",
    "TokenInfo",
    "TEAM_LEFT",
    "WebSession",
    "can_answer",
    "can_cancel",
    "can_claim",
    "can_read",
    "decided_in_the_name_of",
    "hash_token",
    "issue_session",
    "issue_signin_link",
    "issue_token",
    "refused_cut_off",
]

PrincipalKind = Literal["human", "agent", "admin", "team"]

TEAM_LEFT = "team_left"
"""The event a store appends, in the same transaction, when people leave a team (taken
out, or the team deleted): `team`, and `principals`, who left. Shown to no principal; the
hubs of every node end those people's streams, which saw the team's requests."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
TOKEN_PREFIX = "il_"
SESSION_PREFIX = "ils_"
SESSION_LIFETIME = timedelta(days=7)
SIGNIN_LINK_PREFIX = "ilk_"
SIGNIN_LINK_LIFETIME = timedelta(hours=24)


@dataclass(frozen=True, slots=True)
class Principal:
    """A human, an agent or a team. `admin` is the caller of a server run without auth.

    `teams` are the teams a person belongs to (an agent: its owner's), as resolved when
    the server authenticates them; a principal read from the store alone has none."""

    name: str
    kind: PrincipalKind
    owner: str | None = None
    teams: frozenset[str] = field(default=frozenset(), compare=False)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise InvalidRequest(f"{self.name!r} is not a valid name: use letters, digits, '.', '_', '@', '-'")
        if self.kind == "agent" and not self.owner:
            raise InvalidRequest(f"agent {self.name!r} needs an owner (a human)")
        if self.kind != "agent" and self.owner is not None:
            raise InvalidRequest("only an agent has an owner")


ANONYMOUS = Principal("local", "admin")


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A token as issued: `secret` is shown once and never stored. `for_session`: made by
    the web inbox for one session (a sign-in link's), whose secret nobody keeps; the store
    deletes it once that session is signed out or has run out."""

    id: str
    secret: str
    hash: str
    principal: str
    created_at: datetime
    for_session: bool = False


@dataclass(frozen=True, slots=True)
class LiveToken:
    """An unrevoked token as the store knows it: its id and whose it is."""

    id: str
    principal: Principal


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """A live token as an operator lists it: its id (the part of the token after `il_`, no
    secret), whose it is, when it was made, and whether the web inbox made it for one
    session (`IssuedToken.for_session`: a sign-in link's, gone once its session ends)."""

    id: str
    principal: str
    created_at: datetime
    for_session: bool = False


@dataclass(frozen=True, slots=True)
class IssuedSession:
    """A web session as issued: `secret` goes in the cookie and is never stored; `id`
    names the session in the event log without revealing anything."""

    id: str
    secret: str
    hash: str
    csrf: str
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class WebSession:
    """A live web session: who, through which token, and the CSRF token of its forms."""

    id: str
    principal: Principal
    token: str
    csrf: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class IssuedSignInLink:
    """A one-time sign-in link's secret as issued: `secret` goes in the link and is never
    stored; the store keeps its hash, whom it signs in and until when. Used once, it opens
    a web session for `principal` with a token of its own."""

    secret: str
    hash: str
    principal: str
    created_at: datetime
    expires_at: datetime


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def issue_token(principal: str, now: datetime, *, for_session: bool = False) -> IssuedToken:
    token_id = secrets.token_hex(4)
    secret = f"{TOKEN_PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
    return IssuedToken(token_id, secret, hash_token(secret), principal, now, for_session)


def issue_session(now: datetime, lifetime: timedelta = SESSION_LIFETIME) -> IssuedSession:
    session_id = secrets.token_hex(8)
    secret = f"{SESSION_PREFIX}{session_id}_{secrets.token_urlsafe(32)}"
    return IssuedSession(session_id, secret, hash_token(secret), secrets.token_urlsafe(24), now, now + lifetime)


def issue_signin_link(principal: str, now: datetime, lifetime: timedelta = SIGNIN_LINK_LIFETIME) -> IssuedSignInLink:
    secret = f"{SIGNIN_LINK_PREFIX}{secrets.token_urlsafe(32)}"
    return IssuedSignInLink(secret, hash_token(secret), principal, now, now + lifetime)


def _member(principal: Principal, request: Request) -> bool:
    """True when `principal` is a person in the team `request` is addressed to."""
    return principal.kind == "human" and request.to is not None and request.to in principal.teams


def can_read(principal: Principal, request: Request) -> bool:
    return principal.kind == "admin" or principal.name in (request.to, request.requester) or _member(principal, request)


def can_answer(principal: Principal, request: Request) -> bool:
    return principal.kind == "admin" or (
        principal.kind == "human" and (principal.name == request.to or _member(principal, request))
    )


def can_claim(principal: Principal, request: Request) -> bool:
    """Whether `principal` may claim (or give up a claim on) a request to a team: its
    members, and an admin."""
    return principal.kind == "admin" or _member(principal, request)


def can_cancel(principal: Principal, request: Request) -> bool:
    return principal.kind == "admin" or principal.name == request.requester


def decided_in_the_name_of(request: Request) -> str | None:
    """Whose decision a settled `request` records, if a person's: who answered or refused it
    (`by`) or, for an answer naming nobody that issues grants, their issuer (its recipient).
    A store refuses the settlement when `token revoke` cut that person off
    (`refused_cut_off`); a withdrawal or an expiry is nobody's decision."""
    response = request.response
    if response is None or request.status not in (Status.ANSWERED, Status.REJECTED):
        return None
    if response.by is not None:
        return response.by
    return response.grants[0].issuer if response.grants else None


def refused_cut_off(request: Request) -> Forbidden:
    """The refusal of a settlement decided in the name of a person cut off by `token
    revoke` (every token of theirs revoked, none live): whoever records it (an admin, a
    local caller naming them), nothing is decided in their name until `token create` gives
    them a token again. Every store checks it inside the settlement's own transaction, so
    a revocation that commits first is never overtaken by an answer checked before it."""
    name = decided_in_the_name_of(request)
    response = request.response
    field, why = (
        ("by", "")
        if response is None or response.by is not None
        else (
            "grants",
            " (an answer naming nobody issues its grants as theirs)",
        )
    )
    return Forbidden(
        f"{field}: every token of {name!r} is revoked (`interlock token revoke {name}` cut them off), so nothing is "
        f"answered in their name{why} until `interlock token create {name} --human` gives them one again; nothing "
        "was answered"
    )
