"""Signed webhooks: how interlock signs what it sends, and how a receiver checks it.

Every webhook carries three headers:

- `Interlock-Timestamp`: when it was signed, in whole seconds since the Unix epoch;
- `Interlock-Signature`: `v1=` and the hex HMAC-SHA256, keyed with the shared secret, of
  the timestamp, a full stop, and the raw body (`f"{timestamp}.".encode() + body`);
- `Idempotency-Key`: the delivery's id; a delivery is sent at least once, so a receiver
  drops a key it has seen. (A tool-approval hook, which must answer, is sent the call's
  `callKey` instead: `interlock.agent.url_hooks`.)

A receiver recomputes the signature over the raw bytes it received (before parsing the
JSON), compares in constant time, and refuses a timestamp outside its replay window
(five minutes either way by default). `verify` does all three; the same rules hold for
answers sent back to interlock's inbound webhook endpoint.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping

__all__ = [
    "DEFAULT_TOLERANCE",
    "IDEMPOTENCY_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "InvalidSignature",
    "sign",
    "signed_headers",
    "verify",
]

SIGNATURE_HEADER = "Interlock-Signature"
TIMESTAMP_HEADER = "Interlock-Timestamp"
IDEMPOTENCY_HEADER = "Idempotency-Key"
DEFAULT_TOLERANCE = 300.0
"""Seconds a signed timestamp may be off (either way) before it is refused as a replay."""


class InvalidSignature(ValueError):
    """A webhook whose signature or timestamp does not check out; the message says which."""


def sign(secret: str | bytes, timestamp: int, body: bytes) -> str:
    """The `Interlock-Signature` value of `body` signed at `timestamp`."""
    key = secret.encode() if isinstance(secret, str) else secret
    digest = hmac.new(key, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"v1={digest}"


def signed_headers(secret: str | bytes, body: bytes, *, timestamp: int | None = None) -> dict[str, str]:
    """The timestamp and signature headers for `body`, signed now (or at `timestamp`)."""
    at = int(time.time()) if timestamp is None else timestamp
    return {TIMESTAMP_HEADER: str(at), SIGNATURE_HEADER: sign(secret, at, body)}


def verify(
    secret: str | bytes,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> int:
    """Check a webhook's signature and timestamp; return the timestamp, or raise
    `InvalidSignature`. `headers` may be any mapping (looked up case-insensitively)."""
    lower = {k.lower(): v for k, v in headers.items()}
    stamp = lower.get(TIMESTAMP_HEADER.lower())
    given = lower.get(SIGNATURE_HEADER.lower())
    if not stamp or not given:
        raise InvalidSignature(f"the {TIMESTAMP_HEADER} and {SIGNATURE_HEADER} headers are required")
    if not (stamp.isascii() and stamp.isdigit()) or len(stamp) > 12:
        raise InvalidSignature(f"{TIMESTAMP_HEADER} must be whole seconds since the epoch")
    timestamp = int(stamp)
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise InvalidSignature(f"the timestamp is outside the {tolerance:g}s replay window")
    expected = sign(secret, timestamp, body)
    # several signatures may be given (during a secret's rotation), separated by commas
    # (as bytes: compare_digest raises TypeError on text that is not ASCII)
    wanted = expected.encode()
    if not any(hmac.compare_digest(wanted, part.strip().encode("utf-8", "surrogatepass")) for part in given.split(",")):
        raise InvalidSignature("the signature does not match the body")
    return timestamp
