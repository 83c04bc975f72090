"""Slack: a Block Kit message per request, answered with buttons or a modal, updated when
the request settles.

Options (in the routing file's `[channels.NAME]`): `token` (the bot token, required),
`signing_secret` (required to take answers: Slack signs every interactive request with
it), `channel` (where to post when a recipient's route gives no address), `api_url`
(https://slack.com/api), `timeout` (seconds, 10). A recipient's address for this channel
is their Slack user id (the message goes to them directly, and a click by that user is
an answer by them) or a channel id.

A request of one confirm ask gets Yes / No buttons; of one choice ask, a button per
option (a menu past five), and an "Other answer" button when it takes free text;
anything else an "Answer" button that opens a modal with an input per ask: text, yes/no,
a menu (with a text input for an "other" answer), checkboxes, and for a form an input per
field of its schema (text, a number, a checkbox, a menu of its allowed values). A form
whose schema a modal cannot express (a field that is an object or a list, or no fields)
is answered in the inbox, through the message's link. The modal's inputs are read back
by each ask's own `from_fields`, as the web inbox's are; each kind's inputs are made by
its entry in `MODAL_INPUTS`. A person who may not answer the request (an escalation told
them of someone else's) gets no controls: the message says whom it waits on and since
when, and links to the inbox only if they may open it there. When the request settles,
the message is replaced by what happened. Slack posts clicks and modal submissions to the
server's `/slack/interactive/{channel}` (see `server/inbound.py`), which checks Slack's
request signature (`verify_slack`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from ..errors import InvalidAnswer
from ..model import ASK_TYPES, Ask, Choice, Confirm, Form, MultiChoice, Request, Text, by_ask_kind, options_of
from ..routing import ChannelConfig
from . import ChannelContext, ChannelError, Message, PermanentFailure, escalation_note, seconds_option
from .links import quick_answers

__all__ = [
    "ANSWER_ACTION",
    "MODAL_CALLBACK",
    "MODAL_INPUTS",
    "OPEN_ACTION",
    "SlackChannel",
    "answers_from_view",
    "error_block",
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
    if not stamp or not given:
        raise SlackSignatureError("the Slack signature headers are missing")
    if not (stamp.isascii() and stamp.isdigit()) or len(stamp) > 12:  # (`isdigit` takes `²`, which `int` refuses)
        raise SlackSignatureError("the Slack request's timestamp is not a Unix time")
    if abs((time.time() if now is None else now) - int(stamp)) > tolerance:
        raise SlackSignatureError("the Slack request's timestamp is outside the replay window")
    base = b"v0:" + stamp.encode() + b":" + body
    expected = "v0=" + hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogatepass")):
        raise SlackSignatureError("the Slack signature does not match")


def _option_fault(option: Any, where: str) -> str | None:
    if option is not None and not isinstance(option, dict):
        return f"{where} is not an object"
    if option is not None and not isinstance(option.get("value", ""), str):
        return f"{where}.value is not a string"
    return None


def _input_fault(field: Any, where: str) -> str | None:
    """What is wrong with an action's or a modal input's shape (`where` it is), if anything."""
    if not isinstance(field, dict):
        return f"{where} is not an object"
    for key in ("action_id", "value"):
        if field.get(key) is not None and not isinstance(field[key], str):
            return f"{where}.{key} is not a string"
    if fault := _option_fault(field.get("selected_option"), f"{where}.selected_option"):
        return fault
    chosen = field.get("selected_options")
    if chosen is not None and not isinstance(chosen, list):
        return f"{where}.selected_options is not a list"
    return next((f for o in chosen or () if (f := _option_fault(o, f"{where}.selected_options[]"))), None)


def interaction_fault(payload: Any) -> str | None:
    """What in a (signed) interaction payload is not of the shape Slack sends, in words,
    if anything: `user` an object with a string `id`, `actions` a list of objects whose
    `action_id` and `value` are strings and `selected_option` an object, `view` an object
    whose `state.values` are objects of inputs of that shape."""
    if not isinstance(payload, dict):
        return "the payload is not a JSON object"
    user = payload.get("user")
    if not isinstance(user, dict) or not isinstance(user.get("id"), str):
        return "user is not an object with a string id"
    for key in ("type", "response_url", "trigger_id"):
        if payload.get(key) is not None and not isinstance(payload[key], str):
            return f"{key} is not a string"
    actions = payload.get("actions", [])
    if not isinstance(actions, list):
        return "actions is not a list"
    if fault := next((f for i, a in enumerate(actions) if (f := _input_fault(a, f"actions[{i}]"))), None):
        return fault
    if "view" not in payload:
        return None
    view = payload["view"]
    if not isinstance(view, dict):
        return "view is not an object"
    for key in ("callback_id", "private_metadata"):
        if view.get(key) is not None and not isinstance(view[key], str):
            return f"view.{key} is not a string"
    state = view.get("state", {})
    values = state.get("values", {}) if isinstance(state, dict) else None
    if not isinstance(values, dict):
        return "view.state.values is not an object"
    for block_id, block in values.items():
        if not isinstance(block, dict):
            return f"view.state.values.{block_id} is not an object"
        for action_id, field in block.items():
            if fault := _input_fault(field, f"view.state.values.{block_id}.{action_id}"):
                return fault
    return None


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


def message_blocks(
    request: Request, kind: str, inbox_url: str | None, *, may_answer: bool = True, note: str | None = None
) -> list[dict[str, Any]]:
    """The message of a request: its question and the controls to answer it; without
    `may_answer` (its person may not answer it), no controls but the inbox's link, if
    given. `note` (an escalation's, `escalation_note`) comes before the question."""
    prefix = {"reminder": "Reminder: ", "escalation": "Nobody has answered: "}.get(kind, "")
    blocks = _intro(request, prefix + (request.title or f"{request.requester or 'An agent'} asks"))
    if note is not None:
        blocks.insert(1, {"type": "section", "text": {"type": "mrkdwn", "text": _text(_escape(note))}})
    elements: list[dict[str, Any]] = []
    answers = quick_answers(request) if may_answer else None
    modal = may_answer and modal_view(request) is not None
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
    if modal and (answers is None or _takes_other(request)):
        button = {
            "type": "button",
            "action_id": OPEN_ACTION,
            "text": {"type": "plain_text", "text": "Other answer" if answers else "Answer"},
            "value": request.id,
        }
        elements.append(button if answers else button | {"style": "primary"})
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


def _takes_other(request: Request) -> bool:
    return any(ask.allow_other for ask in request.asks)


def _plain(text: str, limit: int = 2000) -> dict[str, Any]:
    return {"type": "plain_text", "text": _text(text, limit)}


def _input(block_id: str, label: str, element: dict[str, Any], optional: bool, hint: str = "") -> dict[str, Any]:
    block = {"type": "input", "block_id": block_id, "label": _plain(label), "element": element, "optional": optional}
    if hint:
        block["hint"] = _plain(hint)
    return block


def _options(pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [{"text": _plain(label, 75), "value": value} for label, value in pairs[:100]]


def _text_inputs(ask: Text, name: str) -> list[dict[str, Any]]:
    element = {"type": "plain_text_input", "action_id": "value", "multiline": ask.multiline}
    return [_input(ask.id, ask.prompt, element, not ask.required)]


def _confirm_inputs(ask: Confirm, name: str) -> list[dict[str, Any]]:
    element = {"type": "radio_buttons", "action_id": "value", "options": _options([("Yes", "yes"), ("No", "no")])}
    return [_input(ask.id, ask.prompt, element, not ask.required)]


def _multi_choice_inputs(ask: MultiChoice, name: str) -> list[dict[str, Any]]:
    element = {
        "type": "checkboxes",
        "action_id": "value",
        "options": _options([(o.label or o.id, o.id) for o in options_of(ask)]),
    }
    return [_input(ask.id, ask.prompt, element, not ask.required)]


def _choice_inputs(ask: Choice, name: str) -> list[dict[str, Any]]:
    menu = {
        "type": "static_select",
        "action_id": "value",
        "options": _options([(o.label or o.id, o.id) for o in options_of(ask)]),
    }
    if not ask.allow_other:
        return [_input(ask.id, ask.prompt, menu, not ask.required)]
    # either one may carry the answer, so neither is required by Slack: the answer is checked as always
    other = {"type": "plain_text_input", "action_id": "value"}
    return [
        _input(ask.id, ask.prompt, menu, True),
        _input(f"{ask.id}{_OTHER}", "Other answer", other, True, "Or type your own answer."),
    ]


def _form_inputs(ask: Form, name: str) -> list[dict[str, Any]] | None:
    fields = ask.inputs(name)
    if fields is None or any(f.kind == "json" for f in fields):
        return None
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": _text(f"*{_escape(ask.prompt)}*")}}
    ]
    for j, f in enumerate(fields):
        block_id = f"{ask.id}{_FIELD}{j}"
        element: dict[str, Any]
        if f.kind == "boolean":
            element = {"type": "checkboxes", "action_id": "value", "options": _options([(f.label, "on")])}
            if f.default:
                element["initial_options"] = element["options"]
        elif f.kind == "enum":
            element = {
                "type": "static_select",
                "action_id": "value",
                "options": _options([(label, i) for i, label in f.choices]),
            }
            chosen = [o for o in element["options"] if o["value"] == f.default]
            if chosen:
                element["initial_option"] = chosen[0]
        elif f.kind in ("number", "integer"):
            element = {"type": "number_input", "action_id": "value", "is_decimal_allowed": f.kind == "number"}
            element |= {
                key: f.attrs[src] for key, src in (("min_value", "min"), ("max_value", "max")) if src in f.attrs
            }
            if f.default:
                element["initial_value"] = f.default
        else:
            element = {"type": "plain_text_input", "action_id": "value"}
            if f.default:
                element["initial_value"] = f.default
        blocks.append(_input(block_id, f.label, element, f.kind == "boolean" or not f.required, f.hint))
    return blocks


_ModalInputs = Callable[[Any, str], list[dict[str, Any]] | None]

MODAL_INPUTS: dict[type[Ask], _ModalInputs] = by_ask_kind(
    {
        Text: _text_inputs,
        Confirm: _confirm_inputs,
        Choice: _choice_inputs,
        MultiChoice: _multi_choice_inputs,
        Form: _form_inputs,
    },
    "Slack's modal inputs",
)
"""The inputs of one ask in a modal by its kind (given the ask and its field name, `a{i}`),
or None when a modal cannot take its answer (a form whose schema it cannot express)."""


def _ask_blocks(ask: Ask, name: str) -> list[dict[str, Any]] | None:
    return MODAL_INPUTS[ASK_TYPES[ask.type]](ask, name)


_OTHER = "#other"  # the block of a choice's free-text answer: `{ask id}#other`
_FIELD = "#p"  # the block of a form's field: `{ask id}#p{index}`
_MAX_BLOCKS = 100  # Slack's limit for a modal


def modal_view(request: Request) -> dict[str, Any] | None:
    """A modal with the inputs of every ask; None when a modal cannot take the answer (a
    form whose schema it cannot express, or more inputs than Slack allows): that request
    is answered in the inbox."""
    blocks: list[dict[str, Any]] = []
    for i, ask in enumerate(request.asks):
        found = _ask_blocks(ask, f"a{i}")
        if found is None:
            return None
        blocks.extend(found)
    if len(blocks) > _MAX_BLOCKS:
        return None
    return {
        "type": "modal",
        "callback_id": MODAL_CALLBACK,
        "private_metadata": request.id,
        "title": {"type": "plain_text", "text": "Answer"},
        "submit": {"type": "plain_text", "text": "Send"},
        "blocks": blocks,
    }


class _ViewValues:
    """A submitted modal's inputs under the names the asks' `from_fields` read (the web
    inbox's: `a{i}`, `a{i}.other`, `a{i}.p{j}`)."""

    def __init__(self, request: Request, view: Mapping[str, Any]) -> None:
        state = view.get("state", {}).get("values", {})
        self._by_name: dict[str, list[str]] = {}
        for i, ask in enumerate(request.asks):
            name = f"a{i}"
            self._take(name, state.get(ask.id))
            self._take(f"{name}.other", state.get(f"{ask.id}{_OTHER}"))
            for j in range(len(ask.inputs(name) or ())):
                self._take(f"{name}.p{j}", state.get(f"{ask.id}{_FIELD}{j}"))

    def _take(self, name: str, block: Any) -> None:
        field = block.get("value") if isinstance(block, Mapping) else None
        if not isinstance(field, Mapping):
            return
        if field.get("selected_options") is not None:  # checkboxes: a name per ticked box
            given = [str(o.get("value", "")) for o in field["selected_options"] if isinstance(o, Mapping)]
        elif isinstance(field.get("selected_option"), Mapping):
            given = [str(field["selected_option"].get("value", ""))]
        elif field.get("value") is not None:
            given = [str(field["value"])]
        else:
            return
        if given:
            self._by_name[name] = given

    def get(self, name: str, default: str = "") -> str:
        found = self._by_name.get(name)
        return found[-1] if found else default

    def all(self, name: str) -> list[str]:
        return list(self._by_name.get(name, ()))

    def has(self, name: str) -> bool:
        return name in self._by_name


def answers_from_view(request: Request, view: Mapping[str, Any]) -> dict[str, Any]:
    """The answers by ask id in a submitted modal (`view.state.values`), each read by its
    ask's own `from_fields`; an ask left blank is left out (the broker reports a missing
    required one). Raises `InvalidAnswer` for an input that does not read (a form's field
    that is not a number, say)."""
    values = _ViewValues(request, view)
    out: dict[str, Any] = {}
    for i, ask in enumerate(request.asks):
        value = ask.from_fields(values, f"a{i}")
        if value is not None:
            out[ask.id] = value
    return out


def error_block(request: Request, exc: InvalidAnswer | None = None) -> str:
    """The modal's block to show a refusal beside: the form field a refused answer is
    about, else its ask's first input (the first ask's when it names none)."""
    field = getattr(exc, "field", None)
    for i, ask in enumerate(request.asks):
        if isinstance(field, str) and field.startswith(f"a{i}.p"):
            return f"{ask.id}{_FIELD}{field.removeprefix(f'a{i}.p')}"
    wanted = exc.ask_id if exc is not None else None
    i, ask = next(((i, a) for i, a in enumerate(request.asks) if a.id == wanted), (0, request.asks[0]))
    inputs = (block for block in _ask_blocks(ask, f"a{i}") or () if block["type"] == "input")
    return next((str(block["block_id"]) for block in inputs), ask.id)


class SlackChannel:
    def __init__(self, config: ChannelConfig, context: ChannelContext) -> None:
        options: dict[str, Any] = dict(config.options)
        where = f"channels.{config.name}"
        token = options.pop("token", None)
        if not isinstance(token, str) or not token:
            raise ChannelError(f"{where}.token: the bot token (xoxb-...)")
        signing_secret = options.pop("signing_secret", None)
        if signing_secret is not None and (not isinstance(signing_secret, str) or len(signing_secret) < 16):
            raise ChannelError(f"{where}.signing_secret: the app's signing secret, at least 16 characters")
        self.signing_secret: str | None = signing_secret
        default_channel = options.pop("channel", None)
        if default_channel is not None and (not isinstance(default_channel, str) or not default_channel):
            raise ChannelError(f"{where}.channel: a Slack channel id, like C012ABCDEF")
        self.default_channel: str | None = default_channel
        api_url = options.pop("api_url", "https://slack.com/api")
        if not isinstance(api_url, str) or not api_url.startswith(("http://", "https://")):
            raise ChannelError(f"{where}.api_url: an http(s) URL")
        timeout = seconds_option(options.pop("timeout", 10), f"{where}.timeout")
        if options:
            raise ChannelError(f"{where}: unknown option {sorted(options)[0]!r} for Slack")
        self.name = config.name
        self.api_url = api_url.rstrip("/")
        self._auth = {"Authorization": f"Bearer {token}"}
        self._client = httpx.AsyncClient(timeout=timeout)

    async def call(self, method: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """One Web API call; Slack's own errors are raised (permanent ones as such)."""
        response = await self._client.post(f"{self.api_url}/{method}", json=dict(body), headers=self._auth)
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
        """Post to a URL Slack gave (an interaction's `response_url`), which takes no
        token: the bot token goes to the Web API alone."""
        await self._client.post(url, json=dict(json))

    async def send(self, message: Message) -> str | None:
        d, request = message.delivery, message.request
        target = d.address or self.default_channel
        if not target:
            raise PermanentFailure(f"no Slack user or channel for {d.recipient!r}: set addresses.{self.name}")
        inbox = message.context.request_url(request.id) if message.may_read else None
        # The message's text is mrkdwn too (what its notification shows): escaped, so a
        # title cannot mention the channel (<!channel>) or show a link under other words.
        fallback = _escape(request.title or request.asks[0].prompt)
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
        blocks = message_blocks(request, d.kind, inbox, may_answer=message.may_answer, note=escalation_note(message))
        doc = await self.call("chat.postMessage", {"channel": target, "text": _text(fallback, 3000), "blocks": blocks})
        return f"{doc['channel']}:{doc['ts']}"

    async def aclose(self) -> None:
        await self._client.aclose()
