"""Slack: a Block Kit message per request, answered with buttons or a modal, updated when
the request settles.

Options (in the routing file's `[channels.NAME]`): `token` (the bot token, required),
`signing_secret` (required to take answers: Slack signs every interactive request with
it), `channel` (where to post when a recipient's route gives no address), `api_url`
(https://slack.com/api), `timeout` (seconds, 10). A recipient's address for this channel
is their Slack user id (the message goes to them directly, and a click by that user is
an answer by them) or a channel id.

A request of one confirm ask gets Yes / No buttons; of one choice ask, a button per
option (a menu past five); anything else an "Answer" button that opens a modal with an
input per ask (text, yes/no, a menu, checkboxes; a form is answered in the inbox). When
the request settles, the message is replaced by what happened. Slack posts clicks and
modal submissions to the server's `/slack/interactive/{channel}` (see
`server/inbound.py`), which checks Slack's request signature (`verify_slack`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

import httpx

from ..model import Choice, Confirm, Form, MultiChoice, Request, Text, options_of
from ..routing import ChannelConfig
from . import ChannelContext, ChannelError, Message, PermanentFailure
from .links import quick_answers

__all__ = [
    "ANSWER_ACTION",
    "MODAL_CALLBACK",
    "OPEN_ACTION",
    "SlackChannel",
    "answers_from_view",
    "message_blocks",
    "modal_view",
    "settled_blocks",
    "verify_slack",
]

ANSWER_ACTION = "interlock_answer"
OPEN_ACTION = "interlock_open"
MODAL_CALLBACK = "interlock_modal"
_RETRYABLE = {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
_MAX_BUTTONS = 5


class SlackSignatureError(ValueError):
    """A request that does not carry a valid Slack signature within the replay window."""


def verify_slack(
    signing_secret: str, headers: Mapping[str, str], body: bytes, *, tolerance: float = 300.0, now: float | None = None
) -> None:
    """Check Slack's v0 request signature: HMAC-SHA256 of `v0:{timestamp}:{body}` with the
    app's signing secret, and a timestamp within `tolerance` seconds."""
    lower = {k.lower(): v for k, v in headers.items()}
    stamp, given = lower.get("x-slack-request-timestamp", ""), lower.get("x-slack-signature", "")
    if not stamp.isdigit() or not given:
        raise SlackSignatureError("the Slack signature headers are missing")
    if abs((time.time() if now is None else now) - int(stamp)) > tolerance:
        raise SlackSignatureError("the Slack request's timestamp is outside the replay window")
    base = b"v0:" + stamp.encode() + b":" + body
    expected = "v0=" + hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, given):
        raise SlackSignatureError("the Slack signature does not match")


def _text(text: str, limit: int = 2900) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _escape(text: str) -> str:
    """Slack's mrkdwn escaping: only &, < and > are special."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _intro(request: Request, heading: str) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _text(heading, 150)}},
    ]
    if request.details:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _text(_escape(request.details))}})
    for ask in request.asks:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _text(f"*{_escape(ask.prompt)}*")}})
    return blocks


def message_blocks(request: Request, kind: str, inbox_url: str | None) -> list[dict[str, Any]]:
    """The message of a request: its question and the controls to answer it."""
    prefix = {"reminder": "Reminder: ", "escalation": "Nobody has answered: "}.get(kind, "")
    blocks = _intro(request, prefix + (request.title or f"{request.requester or 'An agent'} asks"))
    elements: list[dict[str, Any]] = []
    answers = quick_answers(request)
    if answers is not None and len(answers) <= _MAX_BUTTONS:
        for label, value in answers:
            button: dict[str, Any] = {
                "type": "button",
                "action_id": f"{ANSWER_ACTION}:{len(elements)}",
                "text": {"type": "plain_text", "text": _text(label, 75)},
                "value": json.dumps({"r": request.id, "a": value}),
            }
            if value is True:
                button["style"] = "primary"
            elements.append(button)
    elif answers is not None:
        elements.append(
            {
                "type": "static_select",
                "action_id": ANSWER_ACTION,
                "placeholder": {"type": "plain_text", "text": "Choose"},
                "options": [
                    {
                        "text": {"type": "plain_text", "text": _text(label, 75)},
                        "value": json.dumps({"r": request.id, "a": v}),
                    }
                    for label, v in answers[:100]
                ],
            }
        )
    elif not any(isinstance(ask, Form) for ask in request.asks):
        elements.append(
            {
                "type": "button",
                "action_id": OPEN_ACTION,
                "text": {"type": "plain_text", "text": "Answer"},
                "style": "primary",
                "value": request.id,
            }
        )
    if inbox_url:
        elements.append(
            {
                "type": "button",
                "action_id": "interlock_inbox",
                "text": {"type": "plain_text", "text": "Open in the inbox"},
                "url": inbox_url,
            }
        )
    if elements:
        blocks.append({"type": "actions", "block_id": f"interlock:{request.id}", "elements": elements})
    return blocks


def settled_blocks(request: Request) -> list[dict[str, Any]]:
    """What a request's message becomes once it settled: no controls, what happened."""
    response = request.response
    line = f"*{request.status.value.capitalize()}*"
    if response is not None and response.by:
        line += f" by {_escape(response.by)}"
    if response is not None and response.via:
        line += f" via {_escape(response.via)}"
    if response is not None and response.answers:
        shown = []
        for ask in request.asks:
            if ask.id in response.answers:
                shown.append(f"{_escape(ask.prompt)}: {_escape(ask.answer_text(response.answers[ask.id]))}")
        if shown:
            line += "\n" + "\n".join(shown)
    if response is not None and response.reason:
        line += f"\n_{_escape(response.reason)}_"
    blocks = _intro(request, request.title or f"{request.requester or 'An agent'} asked")
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _text(line)}]})
    return blocks


def modal_view(request: Request) -> dict[str, Any]:
    """A modal with one input per ask (forms are answered in the inbox)."""
    blocks: list[dict[str, Any]] = []
    for ask in request.asks:
        label = {"type": "plain_text", "text": _text(ask.prompt, 2000)}
        element: dict[str, Any]
        if isinstance(ask, Text):
            element = {"type": "plain_text_input", "action_id": "value", "multiline": ask.multiline}
        elif isinstance(ask, Confirm):
            element = {
                "type": "radio_buttons",
                "action_id": "value",
                "options": [
                    {"text": {"type": "plain_text", "text": "Yes"}, "value": "yes"},
                    {"text": {"type": "plain_text", "text": "No"}, "value": "no"},
                ],
            }
        elif isinstance(ask, Choice | MultiChoice):
            options = [
                {"text": {"type": "plain_text", "text": _text(o.label or o.id, 75)}, "value": o.id}
                for o in options_of(ask)[:100]
            ]
            kind = "checkboxes" if isinstance(ask, MultiChoice) else "static_select"
            element = {"type": kind, "action_id": "value", "options": options}
        else:
            continue
        blocks.append(
            {"type": "input", "block_id": ask.id, "label": label, "element": element, "optional": not ask.required}
        )
    return {
        "type": "modal",
        "callback_id": MODAL_CALLBACK,
        "private_metadata": request.id,
        "title": {"type": "plain_text", "text": "Answer"},
        "submit": {"type": "plain_text", "text": "Send"},
        "blocks": blocks,
    }


def answers_from_view(request: Request, view: Mapping[str, Any]) -> dict[str, Any]:
    """The answers by ask id in a submitted modal (`view.state.values`)."""
    values = view.get("state", {}).get("values", {})
    out: dict[str, Any] = {}
    for ask in request.asks:
        field = values.get(ask.id, {}).get("value")
        if not isinstance(field, Mapping):
            continue
        if isinstance(ask, Text) and field.get("value") is not None:
            out[ask.id] = field["value"]
        elif isinstance(ask, Confirm) and field.get("selected_option"):
            out[ask.id] = field["selected_option"]["value"] == "yes"
        elif isinstance(ask, Choice) and field.get("selected_option"):
            out[ask.id] = field["selected_option"]["value"]
        elif isinstance(ask, MultiChoice) and field.get("selected_options") is not None:
            out[ask.id] = [o["value"] for o in field["selected_options"]]
    return out


class SlackChannel:
    def __init__(self, config: ChannelConfig, context: ChannelContext) -> None:
        options: dict[str, Any] = dict(config.options)
        where = f"channels.{config.name}"
        token = options.pop("token", None)
        if not isinstance(token, str) or not token:
            raise ChannelError(f"{where}.token: the bot token (xoxb-...)")
        self.signing_secret: str | None = options.pop("signing_secret", None)
        self.default_channel: str | None = options.pop("channel", None)
        api_url = options.pop("api_url", "https://slack.com/api")
        if not isinstance(api_url, str) or not api_url.startswith(("http://", "https://")):
            raise ChannelError(f"{where}.api_url: an http(s) URL")
        timeout = float(options.pop("timeout", 10))
        if options:
            raise ChannelError(f"{where}: unknown option {sorted(options)[0]!r} for Slack")
        self.name = config.name
        self.api_url = api_url.rstrip("/")
        self._client = httpx.AsyncClient(timeout=timeout, headers={"Authorization": f"Bearer {token}"})

    async def call(self, method: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """One Web API call; Slack's own errors are raised (permanent ones as such)."""
        response = await self._client.post(f"{self.api_url}/{method}", json=dict(body))
        if response.status_code == 429 or response.status_code >= 500:
            raise RuntimeError(f"Slack answered HTTP {response.status_code} to {method}")
        try:
            doc: dict[str, Any] = response.json()
        except ValueError:
            raise RuntimeError(f"Slack answered {method} with something that is not JSON") from None
        if not doc.get("ok"):
            error = str(doc.get("error", "unknown_error"))
            if error in _RETRYABLE:
                raise RuntimeError(f"Slack refused {method} for now: {error}")
            raise PermanentFailure(f"Slack refused {method}: {error}")
        return doc

    async def post(self, url: str, json: Mapping[str, Any]) -> None:
        """Post to a URL Slack gave (an interaction's `response_url`)."""
        await self._client.post(url, json=dict(json))

    async def send(self, message: Message) -> str | None:
        d, request = message.delivery, message.request
        target = d.address or self.default_channel
        if not target:
            raise PermanentFailure(f"no Slack user or channel for {d.recipient!r}: set addresses.{self.name}")
        inbox = message.context.request_url(request.id)
        fallback = request.title or request.asks[0].prompt
        if d.kind == "settled":
            sent = [
                e.reference
                for e in message.earlier
                if e.kind != "settled" and e.reference and e.recipient == d.recipient
            ]
            blocks = settled_blocks(request)
            text = _text(f"{request.status.value}: {fallback}", 3000)
            for reference in sent:
                channel, _, ts = reference.partition(":")
                await self.call("chat.update", {"channel": channel, "ts": ts, "text": text, "blocks": blocks})
            if sent:
                return sent[0]
            doc = await self.call("chat.postMessage", {"channel": target, "text": text, "blocks": blocks})
            return f"{doc['channel']}:{doc['ts']}"
        blocks = message_blocks(request, d.kind, inbox)
        doc = await self.call("chat.postMessage", {"channel": target, "text": _text(fallback, 3000), "blocks": blocks})
        return f"{doc['channel']}:{doc['ts']}"

    async def aclose(self) -> None:
        await self._client.aclose()
