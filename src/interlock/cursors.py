"""The page cursors of the HTTP API: `next_cursor` is opaque text the server issues, and
the `cursor` it is sent back as is told apart from anything else.

A cursor wraps the position the broker pages from (a request's or a grant's id, a
delivery's id, the `time.id` keyset of runs and dead letters) with the list it belongs to
and a check: base64url, without padding, of a version byte (1), the list's name, a unit
separator, the position, and the first 4 bytes of a BLAKE2b digest of all that. So a
cursor cut short, mistyped or changed on its way, or one of another list, is refused with
422 `invalid_cursor` rather than answered with an empty page or the first page again. The
digest is a check, not a signature (a cursor made by hand only names a place in a list
its caller may read anyway), so every node reads every other's cursors, before and after
a restart.

Text that is no such cursor is handed to the broker as a position, which refuses
(`InvalidCursor`) all but the plain positions these lists gave as cursors before, and
still take: a client holding one keeps working. The remote broker unwraps the server's
cursors (`taken`) and sends back the plain position, so a `Page.next_cursor` is the same
on every store, through a server too (the id of the last request seen, say); a cursor of
a later version it cannot read it passes on as it is.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from typing import Literal

from .errors import InvalidCursor

__all__ = ["CURSOR", "MAX_CURSOR", "VERSION", "List", "issued", "taken"]

VERSION = 1

List = Literal["requests", "interactions", "grants", "runs", "deliveries", "dead_letters"]
"""The paged lists, each with cursors of its own."""

CURSOR = (
    "the previous page's `next_cursor`, sent back as it is (opaque); any other text is refused with 422 "
    "`invalid_cursor` (the plain id or keyset earlier versions gave as a cursor is taken too)"
)
"""What a list's `cursor` parameter is, as the OpenAPI document says."""

_BASE64URL = re.compile("[A-Za-z0-9_-]+")
_CHECK = 4
MAX_CURSOR = 4096
"""The longest cursor taken: longer text is none of the server's (a position is at most a
name long)."""


def _check(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=_CHECK, person=b"interlock-cursor").digest()


def issued(of: List, position: str | None) -> str | None:
    """The cursor of the page of list `of` after `position` (None: no next page)."""
    if position is None:
        return None
    body = bytes([VERSION]) + of.encode() + b"\x1f" + position.encode()
    return base64.urlsafe_b64encode(body + _check(body)).rstrip(b"=").decode("ascii")


def _opened(cursor: str) -> tuple[str, str] | None:
    """The (list, position) a cursor of `issued` holds; None for any other text."""
    if len(cursor) > MAX_CURSOR or not _BASE64URL.fullmatch(cursor):
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        return None
    body, check = raw[:-_CHECK], raw[-_CHECK:]
    if len(body) < 3 or body[0] != VERSION or not hmac.compare_digest(_check(body), check):
        return None
    of, separator, position = body[1:].partition(b"\x1f")
    try:
        return (of.decode("ascii"), position.decode()) if separator and position else None
    except UnicodeDecodeError:
        return None


def taken(of: List, cursor: str | None) -> str | None:
    """The position to page list `of` from, for the `cursor` a client sent: a cursor of
    this list's unwrapped, any other text as it is (the broker takes a plain position of
    the list's and refuses the rest). `InvalidCursor` for a cursor of another list."""
    if cursor is None:
        return None
    opened = _opened(cursor)
    if opened is None:
        return cursor
    found, position = opened
    if found != of:
        name = found.replace("_", " ")
        raise InvalidCursor(f"cursor: this is a cursor of {name}, not of {of.replace('_', ' ')}")
    return position
