"""Who is calling: bearer tokens for the API, a signed session cookie for the web inbox.

The API takes only `Authorization: Bearer <token>`, never the cookie, so a page on another
site cannot make a signed-in browser call it. The web inbox takes the cookie, and every
form it posts carries a token tied to the session (checked in `check_csrf`).
"""

from __future__ import annotations

import hmac
import secrets
from typing import Any

from fastapi import HTTPException, Request
from itsdangerous import BadSignature, URLSafeTimedSerializer

from ..principals import ANONYMOUS, Principal, hash_token
from ..store import Store

__all__ = ["Auth"]

SESSION_COOKIE = "interlock_session"
SESSION_MAX_AGE = 7 * 24 * 3600


class Auth:
    def __init__(self, store: Store, *, enabled: bool, secret_key: str | None = None) -> None:
        self.store = store
        self.enabled = enabled
        self._signer = URLSafeTimedSerializer(secret_key or secrets.token_urlsafe(32), salt="interlock-session")

    async def from_token(self, token: str) -> Principal | None:
        return await self.store.principal_for_token(hash_token(token))

    async def api_principal(self, request: Request) -> Principal:
        """The caller of an API route, from its bearer token."""
        if not self.enabled:
            return ANONYMOUS
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _unauthorized("send Authorization: Bearer <token>")
        principal = await self.from_token(token.strip())
        if principal is None:
            raise _unauthorized("the token is unknown or revoked")
        return principal

    # -- web sessions ---------------------------------------------------------------------

    def session_cookie(self, token: str) -> tuple[str, str]:
        """A signed cookie value for a signed-in token, and the CSRF token of the session."""
        csrf = secrets.token_urlsafe(24)
        return self._signer.dumps({"t": hash_token(token), "c": csrf}), csrf

    async def web_session(self, request: Request) -> tuple[Principal, str] | None:
        """The signed-in principal and the session's CSRF token, or None."""
        raw = request.cookies.get(SESSION_COOKIE)
        if not self.enabled:
            csrf = self._read(raw)
            return ANONYMOUS, (csrf["c"] if csrf else "")
        data = self._read(raw)
        if data is None:
            return None
        principal = await self.store.principal_for_token(str(data["t"]))  # a revoked token ends the session
        return (principal, str(data["c"])) if principal is not None else None

    def anonymous_cookie(self) -> tuple[str, str]:
        csrf = secrets.token_urlsafe(24)
        return self._signer.dumps({"t": "", "c": csrf}), csrf

    def _read(self, raw: str | None) -> dict[str, Any] | None:
        if not raw:
            return None
        try:
            data = self._signer.loads(raw, max_age=SESSION_MAX_AGE)
        except BadSignature:
            return None
        return data if isinstance(data, dict) and "t" in data and "c" in data else None


def check_csrf(expected: str, given: str | None) -> None:
    if not expected or not given or not hmac.compare_digest(expected, given):
        raise HTTPException(403, detail="the form is stale or came from another site; reload the page")


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(401, detail=detail, headers={"WWW-Authenticate": "Bearer"})
