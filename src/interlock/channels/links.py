"""One-click answer links: signed, expiring, bound to one request, one recipient and one
answer.

A link's token is the claim (request id, recipient, answer, expiry) as compact JSON in
URL-safe base64, a full stop, and an HMAC-SHA256 of it keyed with the server's secret. The
server's `/answer/{token}` page shows what the link will answer and a button; the answer
is recorded (by the recipient, `via: email`) only when the button is pressed, so a mail
scanner that fetches every link answers nothing.

A link is single-use: its id (`LinkClaim.link`, a hash of its claim, which holds a random
nonce) is recorded with who used it and when (`OutboxStore.use_answer_link`) before its
answer is, and a second use is refused saying so. A link answers only while its request
is pending, too: the first answer wins, so every link of a request is spent once one is
used.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ..model import Request

__all__ = ["AnswerLinks", "InvalidLink", "LinkClaim", "quick_answers"]

DEFAULT_LIFETIME = timedelta(days=7)


class InvalidLink(ValueError):
    """A link that is forged, damaged or expired; the message says which."""


@dataclass(frozen=True, slots=True)
class LinkClaim:
    request_id: str
    recipient: str
    answer: Any
    expires_at: datetime
    link: str = ""
    """The link's id: what its single use is recorded under."""


def quick_answers(request: Request) -> list[tuple[str, Any]] | None:
    """The answers one click can give (label, value): for a request of one ask that one
    click answers (a confirm, a choice: `one_click_answers`); None for anything else, which
    is answered in the inbox."""
    if len(request.asks) != 1:
        return None
    answers = request.asks[0].one_click_answers()
    return list(answers) if answers is not None else None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class AnswerLinks:
    """Makes and reads answer links for the server at `base_url`."""

    def __init__(self, secret: str, base_url: str, lifetime: timedelta = DEFAULT_LIFETIME) -> None:
        if len(secret) < 16:
            raise ValueError("the answer links' secret needs at least 16 characters")
        self._key = hashlib.sha256(b"interlock-answer-links\x00" + secret.encode()).digest()
        self.base_url = base_url.rstrip("/")
        self.lifetime = lifetime

    def token(self, request: Request, recipient: str, answer: Any, now: datetime | None = None) -> str:
        expires = (now or datetime.now(UTC)) + self.lifetime
        if request.expires_at is not None:
            expires = min(expires, request.expires_at)
        claim = {"r": request.id, "to": recipient, "a": answer, "exp": int(expires.timestamp())}
        claim["n"] = _b64(secrets.token_bytes(9))  # every link its own id, even for the same answer
        body = _b64(json.dumps(claim, separators=(",", ":")).encode())
        return f"{body}.{_b64(hmac.new(self._key, body.encode(), hashlib.sha256).digest())}"

    def link(self, request: Request, recipient: str, answer: Any) -> str:
        return f"{self.base_url}/answer/{self.token(request, recipient, answer)}"

    def read(self, token: str, now: datetime | None = None) -> LinkClaim:
        body, _, signature = token.partition(".")
        expected = _b64(hmac.new(self._key, body.encode(), hashlib.sha256).digest())
        if not signature or not hmac.compare_digest(signature.encode("utf-8", "surrogatepass"), expected.encode()):
            raise InvalidLink("this answer link is not valid (damaged, or not from this server)")
        try:
            claim = json.loads(_unb64(body))
            expires = datetime.fromtimestamp(claim["exp"], UTC)
            link = hashlib.sha256(body.encode()).hexdigest()[:32]
            result = LinkClaim(claim["r"], claim["to"], claim["a"], expires, link)
        except (ValueError, KeyError, TypeError):
            raise InvalidLink("this answer link is not valid") from None
        if (now or datetime.now(UTC)) >= result.expires_at:
            raise InvalidLink("this answer link has expired")
        return result
