"""Keep credentials out of messages, banners and logs.

A store URL may carry a password (`postgresql://user:password@host/db`, or `?password=`),
a server URL a token (`?token=`), and a message may quote a token given on the command
line. Everything interlock prints or logs about a URL goes through `redact_url` (or, for
free text such as a driver's error, `redact`), which shows `***` in their place and keeps
the rest readable. `RedactingFilter` does the same to every record of a log handler.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["MASK", "RedactingFilter", "public_token_id", "redact", "redact_url"]

MASK = "***"
SECRET_PARAMETERS = frozenset({"password", "sslpassword", "token", "access_token", "secret", "secret_key", "code"})
"""Query parameters whose values are credentials, in any store or server URL."""

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
# Not inside a word, but after an escaped line break or tab too (a repr's "\\n" ends in an "n").
_START = r"(?:(?<![A-Za-z0-9])|(?<=\\[nrt]))"
_TOKEN = re.compile(rf"{_START}(ils?_[0-9a-f]{{8,16}})_[A-Za-z0-9_-]{{16,}}")
# A path without a scheme (an access log's request line): its secret query parameters, a
# one-time sign-in link's code and a one-click answer link's token are credentials too.
_PARAMETER = re.compile(rf"(?<=[?&])({'|'.join(sorted(SECRET_PARAMETERS))})=[^&\s'\"<>#]+", re.IGNORECASE)
_SIGNIN_CODE = re.compile(rf"{_START}ilk_[A-Za-z0-9_-]{{16,}}")
_ANSWER_LINK = re.compile(r"(/answer/)[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{16,}")


def redact_url(url: str) -> str:
    """The URL with its password and secret query parameters shown as `***`."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return _TOKEN.sub(rf"\1_{MASK}", url)
    netloc = parts.netloc
    userinfo, at, host = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.split(':', 1)[0]}:{MASK}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(name.lower() in SECRET_PARAMETERS for name, _ in pairs):
            masked = [(name, MASK if name.lower() in SECRET_PARAMETERS else value) for name, value in pairs]
            query = urlencode(masked, safe="*")
    if (netloc, query) == (parts.netloc, parts.query):
        return _TOKEN.sub(rf"\1_{MASK}", url)
    return _TOKEN.sub(rf"\1_{MASK}", urlunsplit(parts._replace(netloc=netloc, query=query)))


def public_token_id(text: str) -> str | None:
    """The public id an interlock token or session secret may be shown by (`il_1a2b3c4d`,
    what `redact` leaves of it), or None when `text` is not one."""
    found = _TOKEN.fullmatch(text)
    return found.group(1) if found else None


def redact(text: str) -> str:
    """`text` with every URL in it redacted, and every interlock token or session secret
    cut to its public id (`il_1a2b3c4d_***`); in a path with no scheme too, its secret
    query parameters, a sign-in link's code and an answer link's token read `***`."""
    text = _TOKEN.sub(rf"\1_{MASK}", _URL.sub(lambda m: redact_url(m.group(0)), text))
    text = _PARAMETER.sub(rf"\1={MASK}", text)
    return _ANSWER_LINK.sub(rf"\1{MASK}", _SIGNIN_CODE.sub(f"ilk_{MASK}", text))


class RedactingFilter(logging.Filter):
    """A log filter that redacts each record's message (and its exception text) in place."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            # Each argument redacted in place: a formatter that reads the arguments (uvicorn's
            # access log unpacks them) still finds them, where None made it raise. (What the
            # message still shows after that, its own text, say, is redacted as a whole below.)
            record.args = tuple(redact(arg) if isinstance(arg, str) else arg for arg in record.args)
        message = record.getMessage()
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True
