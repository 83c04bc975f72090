"""Webhooks out: one signed JSON POST per delivery.

Options (in the routing file's `[channels.NAME]`): `url` (required; a recipient's address
for this channel, when given, is used instead), `secret` (signs every body, see
`interlock.webhooks`), `timeout` (seconds, 10 by default), `headers` (a table of extra
headers, each value shown as `***` where the routing is shown). A 2xx answer is a
delivery; 408, 429 and 5xx (and no answer) are tried again;
any other 4xx is a dead letter at once (the receiver refused it), and so is a redirect
(3xx): it is not followed, since the signed body would go where nobody configured, and the
dead letter names where it pointed.

The body:

    {"id": "<delivery id>", "type": "request.created", "kind": "request", "event": "created",
     "recipient": "alice", "answerable": true, "sent_at": "...",
     "links": {"request": "https://.../requests/<id>"},
     "request": { ...the request as the API shows it... }}

`type` is `request.created` (a request for the recipient), `request.reminder`,
`request.escalated`, or `request.answered` / `.rejected` / `.expired` / `.cancelled`.
`answerable` says whether `recipient` may answer it (an answer sent back for them is taken):
false once it settled, and for an escalation to someone who is neither its recipient nor in
its team. `links.request` is null when `recipient` may not open it in the inbox (or there is
no `inbox_url`).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx

from ..model import request_to_dict
from ..routing import ChannelConfig, credentials_twice
from ..webhooks import IDEMPOTENCY_HEADER, signed_headers
from . import ChannelContext, ChannelError, Message, PermanentFailure, seconds_option

__all__ = ["WebhookChannel", "payload_of"]

_TYPES = {"request": "request.created", "reminder": "request.reminder", "escalation": "request.escalated"}


def payload_of(message: Message) -> dict[str, Any]:
    """The JSON body of a delivery."""
    d = message.delivery
    return {
        "id": d.id,
        "type": _TYPES.get(d.kind, f"request.{d.event}"),
        "kind": d.kind,
        "event": d.event,
        "recipient": d.recipient,
        "answerable": d.kind != "settled" and message.may_answer,
        "sent_at": datetime.now(UTC).isoformat(),
        "links": {"request": message.context.request_url(message.request.id) if message.may_read else None},
        "request": request_to_dict(message.request),
    }


class WebhookChannel:
    def __init__(self, config: ChannelConfig, context: ChannelContext) -> None:
        options = dict(config.options)
        url = options.pop("url", None)
        secret = options.pop("secret", None)
        timeout = options.pop("timeout", 10)
        headers = options.pop("headers", {})
        if options:
            raise ChannelError(f"channels.{config.name}: unknown option {sorted(options)[0]!r} for a webhook")
        if url is not None and (not isinstance(url, str) or not url.startswith(("http://", "https://"))):
            raise ChannelError(f"channels.{config.name}.url: an http:// or https:// URL")
        if secret is not None and (not isinstance(secret, str) or len(secret) < 16):
            raise ChannelError(f"channels.{config.name}.secret: at least 16 characters")
        timeout = seconds_option(timeout, f"channels.{config.name}.timeout")
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            raise ChannelError(f"channels.{config.name}.headers: a table of text values")
        if credentials_twice(url, headers):
            # the URL's user and password are sent as an Authorization header of their own
            raise ChannelError(
                f"channels.{config.name}: a url with a user and password and an Authorization header: give one"
            )
        self.name = config.name
        self.url: str | None = url
        self.secret: str | None = secret
        self.headers = dict(headers)
        self._client = httpx.AsyncClient(timeout=timeout, follow_redirects=False)

    async def send(self, message: Message) -> str | None:
        url = message.delivery.address or self.url
        if not url:
            raise PermanentFailure(f"no URL for {message.delivery.recipient!r}: set channels.{self.name}.url")
        body = json.dumps(payload_of(message), separators=(",", ":"), ensure_ascii=False).encode()
        headers = {**self.headers, "Content-Type": "application/json", IDEMPOTENCY_HEADER: message.idempotency_key}
        if self.secret is not None:
            headers |= signed_headers(self.secret, body)
        response = await self._client.post(url, content=body, headers=headers)
        status = response.status_code
        if 200 <= status < 300:
            return None
        if 300 <= status < 400:  # not followed: the signed body would go where nobody configured
            where = response.headers.get("location")
            raise PermanentFailure(
                f"the receiver redirected it (HTTP {status}) to {where or 'nowhere'}: redirects are not followed; "
                f"set the URL it was sent to (channels.{self.name}.url, or the recipient's address) to where it points"
            )
        if 400 <= status < 500 and status not in (408, 429):
            raise PermanentFailure(f"the receiver refused it: HTTP {status}")
        raise RuntimeError(f"HTTP {status} from the receiver")

    async def aclose(self) -> None:
        await self._client.aclose()
