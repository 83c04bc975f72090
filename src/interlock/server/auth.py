"""Who is calling: bearer tokens for the API, a server-side session for the web inbox.

The API takes only `Authorization: Bearer <token>`, never the cookie, so a page on another
site cannot make a signed-in browser call it. The web inbox takes the session cookie,
which carries only a random secret: the store keeps its hash, the token it was opened
with and the CSRF token every form of the session must carry (checked in `check_csrf`).
Signing out deletes the session; revoking the token ends it; either way the old cookie
stops working on every node at once.

Without auth (loopback only) there are no sessions: the cookie is a signed CSRF token,
and `loopback_host` / `same_origin` keep pages of other sites out (DNS rebinding).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from urllib.parse import urlsplit

from fastapi import HTTPException, Request
from itsdangerous import BadSignature, URLSafeTimedSerializer

from ..broker import LocalBroker
from ..channels import routing_teams
from ..principals import (
    ANONYMOUS,
    SESSION_LIFETIME,
    SESSION_PREFIX,
    Principal,
    WebSession,
    hash_token,
    issue_session,
    issue_token,
)
from ..redact import MASK, public_token_id

__all__ = ["Auth", "Holder", "Visitor", "lost_access", "loopback_host", "same_origin"]

log = logging.getLogger("interlock.server")

SESSION_COOKIE = "interlock_session"
SESSION_MAX_AGE = int(SESSION_LIFETIME.total_seconds())
_HOLDER = "interlock_holder"
_FOUND = "interlock_found"  # the caller `api_principal` found, and `access_changes` before it looked
REFUSALS_QUIET = 60.0
"""Seconds after a warning that a credential from an address was refused in which the next
refusals from there are only counted (and said with the next warning)."""
_REFUSALS_KEPT = 10_000  # addresses whose last warning is remembered; past it, the oldest are forgotten


@dataclass(frozen=True, slots=True)
class Holder:
    """The credential a connection runs on: a principal's token, and the web session
    opened with it if any. A revocation or sign-out ends the streams of its holder."""

    principal: str
    token: str
    session: str | None = None


@dataclass(frozen=True, slots=True)
class Visitor:
    """Who is at the web inbox: the principal, the CSRF token of their forms, and the
    session (None without auth)."""

    principal: Principal
    csrf: str
    session: WebSession | None = None

    @property
    def holder(self) -> Holder | None:
        s = self.session
        return Holder(s.principal.name, s.token, s.id) if s is not None else None


def lost_access(before: Principal, now: Principal | None, ended: str) -> str | None:
    """Why a stream decided for `before` may no longer run, now that its credential finds
    `now` (None: the credential is gone, and `ended` says how): a team it showed was left
    since. None while it may run on."""
    if now is None:
        return ended
    left = before.teams - now.teams
    return f"you left the team {min(left)}" if left else None


class Auth:
    def __init__(
        self,
        broker: LocalBroker,
        *,
        enabled: bool,
        secret_key: str | None = None,
        trusted_proxies: Iterable[str] = (),
    ) -> None:
        self.broker = broker  # its principals, tokens and sessions: a server's own store's
        self.enabled = enabled
        self.routing_teams: Callable[[], Mapping[str, Sequence[str]]] = dict
        """The teams of the routing in use, with their members (none without a routing):
        the app's, once it has one."""
        self.access_changes: Callable[[], int] = lambda: -1
        """How many changes of access (a token revoked, a sign-out, a team left) this node
        has seen so far: the hub's count, once the app has one (`Hub.access_changes`)."""
        self._signer = URLSafeTimedSerializer(secret_key or secrets.token_urlsafe(32), salt="interlock-session")
        self.trusted_proxies = _networks(trusted_proxies)
        self._refusals: dict[str, tuple[float, int]] = {}  # by address: the last warning's time, refusals since

    def refused(self, request: Request, what: str, credential: str = "") -> None:
        """Log that `request` came with a credential that was refused (`what`: "an unknown
        or revoked token"), never the credential itself: a token's public id at most (the id
        `interlock token list` shows). One warning an address in `REFUSALS_QUIET` seconds, the
        next one counting those that came meanwhile: a client stuck on a revoked token, or
        one guessing, is a line a minute, not one a request."""
        public = public_token_id(credential)
        shown = f"{what} ({public}_{MASK})" if public else what
        client = request.client.host if request.client is not None else "an unknown address"
        now = time.monotonic()
        said, since = self._refusals.get(client, (None, 0))
        if said is not None and now - said < REFUSALS_QUIET:
            self._refusals[client] = (said, since + 1)
            log.debug("refused %s from %s: %s %s", shown, client, request.method, request.url.path)
            return
        if len(self._refusals) >= _REFUSALS_KEPT:
            for old in sorted(self._refusals, key=lambda a: self._refusals[a][0])[: _REFUSALS_KEPT // 2]:
                del self._refusals[old]
        self._refusals[client] = (now, 0)
        more = f" ({since} more refused from there in the last {now - said:.0f} s)" if since and said else ""
        log.warning("refused %s from %s: %s %s%s", shown, client, request.method, request.url.path, more)

    async def with_teams(self, principal: Principal) -> Principal:
        """The principal with the teams it belongs to (an agent: its owner's), which the
        rules of `interlock.principals` read: those the store keeps, and those only the
        routing in use names it in (`routing_teams`), as its channels count them, so a
        member reads and answers a team's requests alike on every surface."""
        member = principal.owner if principal.kind == "agent" else principal.name
        if principal.kind == "admin" or member is None:
            return principal
        teams = await self.broker.teams_of(member)
        teams |= await routing_teams(self.broker, self.routing_teams(), member)
        return replace(principal, teams=teams) if teams else principal

    async def from_token(self, token: str) -> Principal | None:
        live = await self.broker.live_token(hash_token(token))
        return await self.with_teams(live.principal) if live is not None else None

    def stream_lost(self, request: Request, caller: Principal) -> Callable[[], Awaitable[str | None]] | None:
        """For an API stream `caller` opens with `request`'s bearer token: why it may no
        longer run, asked once it has subscribed (`lost_access`). None without auth."""
        if self.holder(request) is None:
            return None

        async def lost() -> str | None:
            return lost_access(caller, await self.caller_now(request), "the token was revoked")

        return lost

    async def caller_now(self, request: Request) -> Principal | None:
        """The caller of an API request as its bearer token finds them now, their teams
        read afresh: None once the token is revoked (the operator, without auth)."""
        if self.holder(request) is None:
            return ANONYMOUS
        return await self.from_token(request.headers.get("authorization", "").partition(" ")[2].strip())

    async def api_principal(self, request: Request) -> Principal:
        """The caller of an API route, from its bearer token."""
        if not self.enabled:
            return ANONYMOUS
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _unauthorized("send Authorization: Bearer <token>")
        seen = self.access_changes()  # before the look-up: a change the hub sees after it is told apart
        live = await self.broker.live_token(hash_token(token.strip()))
        if live is None:
            self.refused(request, "an unknown or revoked token", token.strip())
            raise _unauthorized("the token is unknown or revoked")
        setattr(request.state, _HOLDER, Holder(live.principal.name, live.id))
        principal = await self.with_teams(live.principal)
        setattr(request.state, _FOUND, (principal, seen))
        return principal

    def found_unchanged(self, request: Request) -> Principal | None:
        """The caller `api_principal` found for this request, if no change of access has
        reached this node since (`access_changes`): as its token would find them now, as
        far as this node knows; None when one has, or it found none (look them up again)."""
        found = getattr(request.state, _FOUND, None)
        if not isinstance(found, tuple) or found[1] < 0 or found[1] != self.access_changes():
            return None
        principal: Principal = found[0]
        return principal

    @staticmethod
    def holder(request: Request) -> Holder | None:
        """The credential `api_principal` found for this request (None without auth)."""
        found = getattr(request.state, _HOLDER, None)
        return found if isinstance(found, Holder) else None

    # -- web sessions ---------------------------------------------------------------------

    async def sign_in(self, token: str) -> tuple[str, WebSession] | None:
        """Open a session for a live token: the cookie value (shown once) and the session."""
        issued = issue_session(datetime.now(UTC))
        session = await self.broker.start_session(hash_token(token), issued)
        return (issued.secret, session) if session is not None else None

    async def sign_in_with_link(self, secret: str) -> tuple[str, WebSession] | None:
        """Spend a one-time sign-in link and open a session for its person, with a token
        of its own; None when the link is unknown, used or expired."""
        now = datetime.now(UTC)
        principal = await self.broker.use_signin_link(hash_token(secret), now)
        if principal is None or principal.kind != "human" or await self.broker.tokens_all_revoked(principal.name):
            return None  # (a link made before `token revoke NAME` cut them off signs nobody in)
        token = issue_token(principal.name, now, for_session=True)  # goes when the session ends
        await self.broker.save_token(token)
        # Looked at again once the token is kept: a `token revoke NAME` that landed after the
        # look above (another node, the CLI) revoked every token it found, not this one; one
        # landing from now on revokes it too.
        if await self.broker.tokens_all_revoked(principal.name):
            await self.broker.revoke_tokens(token_id=token.id)
            return None
        return await self.sign_in(token.secret)

    async def web_session(self, request: Request) -> Visitor | None:
        """Who is at the web inbox, from the session cookie; None when signed out."""
        raw = request.cookies.get(SESSION_COOKIE) or ""
        if not self.enabled:
            return Visitor(ANONYMOUS, self._anonymous_csrf(raw))
        if not raw.startswith(SESSION_PREFIX):
            return None
        session = await self.broker.get_session(hash_token(raw), datetime.now(UTC))
        if session is None:
            return None
        return Visitor(await self.with_teams(session.principal), session.csrf, session)

    async def sign_out(self, request: Request) -> WebSession | None:
        """End the session of the request's cookie, everywhere; the session it ended."""
        raw = request.cookies.get(SESSION_COOKIE) or ""
        if not self.enabled or not raw.startswith(SESSION_PREFIX):
            return None
        return await self.broker.end_session(hash_token(raw))

    def anonymous_cookie(self) -> tuple[str, str]:
        """Without auth: a signed cookie carrying a new CSRF token, and the token."""
        csrf = secrets.token_urlsafe(24)
        return self._signer.dumps({"c": csrf}), csrf

    def _anonymous_csrf(self, raw: str) -> str:
        if not raw:
            return ""
        try:
            data = self._signer.loads(raw, max_age=SESSION_MAX_AGE)
        except BadSignature:
            return ""
        return str(data["c"]) if isinstance(data, dict) and isinstance(data.get("c"), str) else ""

    def secure(self, request: Request) -> bool:
        """Whether the browser reached us over HTTPS: directly, or through a trusted proxy
        that says so in X-Forwarded-Proto (its last value: the one that proxy set)."""
        if request.url.scheme == "https":
            return True
        client = request.client.host if request.client is not None else None
        if client is None or not _trusted(client, self.trusted_proxies):
            return False
        forwarded = request.headers.get("x-forwarded-proto", "")
        return forwarded.rsplit(",", 1)[-1].strip().lower() == "https"


def check_csrf(expected: str, given: str | None) -> None:
    if not expected or not given or not hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogatepass")):
        raise HTTPException(403, detail="the form is stale or came from another site; reload the page")


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(401, detail=detail, headers={"WWW-Authenticate": "Bearer"})


Networks = tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] | None


def _networks(entries: Iterable[str]) -> Networks:
    """The trusted proxies as networks; None for "*" (every peer: only behind a proxy
    that is the sole way in)."""
    out = []
    for entry in entries:
        entry = entry.strip()
        if entry == "*":
            return None
        try:
            out.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"{entry!r} is not an IP address or network (CIDR) of a trusted proxy") from None
    return tuple(out)


def _trusted(client: str, networks: Networks) -> bool:
    if networks is None:
        return True
    try:
        address = ipaddress.ip_address(client)
    except ValueError:
        return False
    return any(address in network for network in networks)


# -- no-auth mode: this machine only -------------------------------------------------------

_DEFAULT_PORT = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def _split_host(host: str) -> tuple[str, int | None] | None:
    """A Host header's name and port; None when it is not one."""
    try:
        parts = urlsplit(f"//{host}")
        return (parts.hostname or "", parts.port)
    except ValueError:
        return None


def loopback_host(host: str | None) -> bool:
    """Whether a Host header names this machine: localhost, or a loopback address such as
    127.0.0.1 or [::1], with any port. A rebound DNS name (evil.example) is not one."""
    split = _split_host(host or "")
    if split is None or not split[0]:
        return False
    name = split[0].lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def same_origin(origin: str, scheme: str, host: str) -> bool:
    """Whether an Origin header is this server's own origin (`scheme://host`)."""
    try:
        parts = urlsplit(origin)
        given = (parts.scheme.lower(), (parts.hostname or "").lower(), parts.port)
    except ValueError:
        return False
    split = _split_host(host)
    if split is None or not given[1]:
        return False
    default = _DEFAULT_PORT.get(scheme)
    return (
        given[0] == scheme
        and given[1] == split[0].lower()
        and (given[2] or _DEFAULT_PORT.get(given[0])) == (split[1] or default)
    )
