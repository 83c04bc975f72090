"""Answers that come back from channels: through a signed webhook (POST
/api/v1/inbound/{channel}), through email's one-click answer links (/answer/{token}), and
through Slack's interactive endpoint (POST /slack/interactive/{channel}).

The body is signed like the webhooks interlock sends (see `interlock.webhooks`), with the
secret of the webhook channel `channel` of the routing, and names the request and the
recipient it was delivered to:

    {"request_id": "...", "recipient": "alice", "answer": true}
    {"request_id": "...", "recipient": "alice", "answers": {"<ask id>": "..."}, "comment": "..."}
    {"request_id": "...", "recipient": "alice", "reject": "not now"}

It is accepted only when that request was delivered to that recipient through that
channel: the signature proves the sender holds the channel's secret, and the delivery
binds the answer to the person it was sent to. The answer is checked like any other and
recorded with `via: webhook`, by the recipient (or, for a team's delivery, by the member
named in `by`).

A channel names the person who answers (a webhook's `recipient` or `by`, the recipient of
an email's answer link, whoever a Slack user id is in the routing) without a token of
theirs, so a person `interlock token revoke NAME` cut off (every token of their own
revoked) answers nothing through any of them: the answer is refused (a webhook's with 403
`forbidden`) and nothing changes, until `token create` gives them a new token.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from markupsafe import Markup

from ..broker import LocalBroker
from ..channels import addressee
from ..channels.links import AnswerLinks, InvalidLink, LinkClaim, quick_answers
from ..errors import AlreadySettled, InvalidAnswer, NotFound
from ..model import Answers, Status, request_to_dict
from ..model import Request as HumanRequest
from ..outbox import LinkUse
from ..principals import Principal, can_answer
from ..webhooks import InvalidSignature, verify
from .common import UNREADABLE, ApiError, AppState, State, TheBroker, problem_response
from .markdown import prerender
from .schemas import RequestModel
from .web import page, utc, when

__all__ = ["pages", "router"]

router = APIRouter()

_MAX_BODY = 256 * 1024


@router.post(
    "/inbound/{channel}",
    name="receive_inbound",
    response_model=RequestModel,
    responses={
        s: problem_response(d)
        for s, d in {
            400: "the body is not valid JSON",
            404: "no such webhook channel (with a secret), or no such request",
            409: "the request is no longer pending",
            413: "the body is too large",
            422: "the body does not fit (`invalid_request`), or the answer does not (`invalid_answer`)",
        }.items()
    },
    tags=["deliveries"],
)
async def inbound(channel: str, request: Request, state: State, broker: TheBroker) -> JSONResponse:
    """Answer or reject a request through a signed webhook (see the module)."""
    loop = state.delivery
    config = None if loop is None else loop.routing.channels.get(channel)
    secret = None if config is None else config.options.get("secret")
    if config is None or config.type != "webhook" or not isinstance(secret, str):
        raise ApiError("not_found", f"no webhook channel {channel!r} with a secret is configured")
    assert loop is not None
    body = await request.body()
    if len(body) > _MAX_BODY:
        raise ApiError("too_large", "the body is larger than 256 KiB")
    try:
        verify(secret, request.headers, body)
    except InvalidSignature as exc:
        raise ApiError("unauthorized", f"the webhook signature does not check out: {exc}") from None
    doc = _object(body)
    request_id, recipient = doc.get("request_id"), doc.get("recipient")
    if not isinstance(request_id, str) or not isinstance(recipient, str):
        raise ApiError("invalid_request", "request_id and recipient are required, as text")
    delivered = await broker.list_deliveries(request_id=request_id, limit=1000)
    if not any(d.channel == channel and d.recipient == recipient for d in delivered):
        raise ApiError("forbidden", f"request {request_id} was not delivered to {recipient!r} through {channel!r}")
    by = recipient
    member = doc.get("by")
    if member is not None:
        listed, kept = loop.routing.teams.get(recipient), await broker.team_members(recipient)
        if listed is None and kept is None:
            raise ApiError("forbidden", f"{recipient!r} is no team: `by` names who answers a team's message")
        if not isinstance(member, str) or (member not in (listed or ()) and member not in (kept or ())):
            raise ApiError("forbidden", f"{member!r} is not a member of the team {recipient!r}")
        by = member
    given = [key for key in ("answer", "answers", "reject") if key in doc]
    if len(given) != 1:
        raise ApiError("invalid_request", "give exactly one of answer, answers or reject")
    try:
        target = await broker.get(request_id)
    except NotFound as exc:
        raise ApiError("not_found", str(exc)) from None
    try:
        who = await _speaks_for(state, broker, by, target)
    except _CutOff as exc:
        raise ApiError("forbidden", exc.words("a webhook naming them")) from None
    if not can_answer(who, target):
        if who.kind == "team":
            raise ApiError(
                "forbidden", f"{by!r} is a team and answers nothing itself: name the member who answers in `by`"
            )
        raise ApiError("forbidden", f"{by!r} may not answer request {request_id}: it is not to them nor their team")
    comment = doc.get("comment", "")
    if not isinstance(comment, str):
        raise ApiError("invalid_request", "comment: text")
    try:
        if given[0] == "reject":
            reason = doc["reject"]
            if not isinstance(reason, str):
                raise ApiError("invalid_request", "reject: the reason, as text")
            done = await broker.reject(request_id, reason, by=by, via="webhook")
        else:
            value: Any = doc["answer"] if given[0] == "answer" else doc["answers"]
            if given[0] == "answers":
                if not isinstance(value, dict):
                    raise InvalidAnswer("answers: an object by ask id")
                value = Answers(value)
            done = await broker.resolve(request_id, value, by=by, via="webhook", comment=comment)
    except NotFound as exc:
        raise ApiError("not_found", str(exc)) from None
    current = await broker.get(request_id)
    if not done:
        raise AlreadySettled(request_id, current.status.value)
    return JSONResponse(request_to_dict(current))


def _object(body: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # not JSON; nested deeper than Python reads
        raise ApiError("invalid_request", "the body is not valid JSON", status=UNREADABLE) from None
    if not isinstance(doc, dict):
        raise ApiError("invalid_request", "the body must be a JSON object")
    return doc


class _CutOff(Exception):
    """`name`, whom a channel's answer speaks for, has had every token of their own revoked
    (`interlock token revoke NAME`): they are cut off, and no channel answers as them."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def words(self, what: str) -> str:
        """Why `what` (this link, this button, ...) answers nothing, to whoever sent it."""
        return f"Every token of {self.name}'s is revoked here, so {what} answers nothing."


async def _speaks_for(state: AppState, broker: LocalBroker, name: str, request: HumanRequest) -> Principal:
    """`name`, whom a channel's answer speaks for, as the access rules see them
    (`addressee`, with the routing's teams). `_CutOff` where `token revoke NAME` cut them
    off: a channel names them without a token of theirs, so this is where every channel's
    answer is refused for them."""
    if await broker.tokens_all_revoked(name):
        raise _CutOff(name)
    teams = state.delivery.routing.teams if state.delivery is not None else {}
    return await addressee(broker, teams, name, request)


async def _may_answer(state: AppState, broker: LocalBroker, name: str, request: HumanRequest) -> bool:
    """Whether `name`, whom a channel's answer speaks for, may answer `request`, by the rule
    of every other surface (`can_answer`): the person it is to, a member of its team as the
    store has it now, or an admin. A delivery was only a notice: an escalation's, or one
    sent before its recipient left the team, gives no one the right to answer. A team the
    store does not keep (the routing's, naming no people here) has the routing's members,
    here as in the inbox and the API (`routing_teams`). A team itself answers nothing:
    its members do, each named (a webhook's `by`)."""
    return can_answer(await _speaks_for(state, broker, name, request), request)


# -- one-click answer links (email) ---------------------------------------------------------

pages = APIRouter(include_in_schema=False)


def _page(
    state: AppState, http: Request, title: str, message: str = "", status: int = 200, **context: Any
) -> HTMLResponse:
    """An answer link's page, in the inbox's look (its templates, style and headers, the
    dark theme with the system's). The link is in the address, and the inbox's
    `Referrer-Policy: same-origin` carries it to no other site; `no-referrer` made a
    browser post the page's form with `Origin: null`, which a server without auth refuses
    as a change sent from another site."""
    return page(
        state, http, "answer_link.html", {"title": title, "message": message, "status_code": status} | context, status
    )


async def _claim(
    state: AppState, http: Request, broker: LocalBroker, token: str
) -> tuple[LinkClaim, HumanRequest] | HTMLResponse:
    links = None if state.delivery is None else state.delivery.context.answer_links
    if not isinstance(links, AnswerLinks):
        return _page(state, http, "No answer links here", "This server sends no answer links.", 404)
    try:
        claim = links.read(token)
    except InvalidLink as exc:
        text = str(exc)
        return _page(state, http, "This link does not work", f"{text[:1].upper()}{text[1:]}.", 400)
    used = await broker.answer_link_use(claim.link)
    if used is not None:
        return _used(state, http, used)
    try:
        request = await broker.get(claim.request_id)
    except NotFound:
        return _page(state, http, "No such request", "The request of this link is gone.", 404)
    if request.status is not Status.PENDING:
        return _settled(state, http, request)
    try:
        who = await _speaks_for(state, broker, claim.recipient, request)
    except _CutOff as exc:
        return _page(state, http, "Not yours to answer", exc.words("this link"), 403, request_id=request.id)
    if not can_answer(who, request):
        if who.kind == "team":
            message = (
                f"This link would answer as the team {who.name}, and interlock takes answers from people, each as "
                "themselves: answer in the inbox, signed in as yourself."
            )
        else:
            message = f"This request is not {claim.recipient}'s to answer (any more): it is to {request.to}."
        return _page(state, http, "Not yours to answer", message, 403, request_id=request.id)
    return claim, request


def _used(state: AppState, http: Request, used: LinkUse) -> HTMLResponse:
    message = Markup("This link was already used, by {} at {}: each answer link works once.").format(
        used.by, when(used.at)
    )
    return _page(state, http, "Already used", message, 409, request_id=used.request_id)


def _settled(state: AppState, http: Request, request: HumanRequest) -> HTMLResponse:
    return _page(state, http, "Already settled", _settled_text(request, when), 409, request_id=request.id)


def _settled_text(request: HumanRequest, stamp: Callable[[datetime], str] = utc) -> str:
    """What a link or a reply to a request already settled is told, its time as `stamp`
    writes it: `when` on a page (the whole then markup, the rest escaped), else `utc`."""
    response = request.response
    words = [f"This request was already {request.status.value}"]
    if response is not None and response.by:
        words.append(f" by {response.by}")
    if response is not None:
        words += [" at ", stamp(response.at)]
    words.append(".")
    return (Markup("") if any(isinstance(w, Markup) for w in words) else "").join(words)


def _label(request: HumanRequest, answer: Any) -> str:
    for label, value in quick_answers(request) or ():
        if value == answer:
            return label
    return str(answer)


@pages.get("/answer/{token}", response_class=HTMLResponse)
async def answer_page(token: str, http: Request, state: State, broker: TheBroker) -> HTMLResponse:
    """What the link will answer, and a button to answer it: fetching the link changes
    nothing (mail scanners fetch links too)."""
    found = await _claim(state, http, broker, token)
    if isinstance(found, HTMLResponse):
        return found
    claim, request = found
    return _page(
        state,
        http,
        request.title or "Your answer",
        prompt=request.asks[0].prompt,
        details=request.details,
        rendered=await prerender([request.details]),
        recipient=claim.recipient,
        label=_label(request, claim.answer),
        request_id=request.id,
    )


@pages.post("/answer/{token}", response_class=HTMLResponse)
async def answer_by_link(token: str, http: Request, state: State, broker: TheBroker) -> HTMLResponse:
    """Spend the link (its use recorded first: a second click is refused, saying by whom
    and when) and record its answer, by its recipient, `via: email`."""
    found = await _claim(state, http, broker, token)
    if isinstance(found, HTMLResponse):
        return found
    claim, request = found
    use, first = await broker.use_answer_link(
        LinkUse(claim.link, request.id, claim.recipient, datetime.now(UTC)), claim.expires_at
    )
    if not first:
        return _used(state, http, use)
    done = await broker.resolve(request.id, claim.answer, by=claim.recipient, via="email")
    if not done:
        return _settled(state, http, await broker.get(request.id))
    label = _label(request, claim.answer)
    return _page(state, http, "Answer recorded", f"You answered {label}. You can close this page.", answered=label)


# -- Slack's interactive endpoint ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _NotYours:
    """Why a Slack user may not answer a request, in words to tell them."""

    why: str


async def _slack_answerer(
    state: AppState, broker: LocalBroker, channel: str, user_id: str, request: HumanRequest, what: str
) -> str | _NotYours:
    """The interlock name a Slack user answers as: the recipient (or a member of the team
    the request is to) whose route gives that user id as their address on `channel`, if
    they may answer it (`_may_answer`); else why not, with `what` they clicked or sent
    named where the person is cut off."""
    assert state.delivery is not None
    routing = state.delivery.routing
    kept = await broker.team_members(request.to) if request.to is not None else None
    members = {*routing.teams.get(request.to or "", ()), *(kept or ())}  # the routing's list and the store's team
    cut_off: _CutOff | None = None
    for name, route in routing.recipients.items():
        if route.addresses.get(channel) != user_id or (name != request.to and name not in members):
            continue
        try:
            if await _may_answer(state, broker, name, request):
                return name
        except _CutOff as exc:
            cut_off = exc
    return _NotYours(cut_off.words(what) if cut_off is not None else "This request is not yours to answer.")


@pages.post("/slack/interactive/{channel}")
async def slack_interactive(channel: str, request: Request, state: State, broker: TheBroker) -> Response:
    """Button clicks and modal submissions from Slack, signed with the app's signing secret."""
    from ..channels.slack import (
        ANSWER_ACTION,
        MODAL_CALLBACK,
        OPEN_ACTION,
        SlackChannel,
        SlackSignatureError,
        answers_from_view,
        error_block,
        interaction_fault,
        modal_view,
        verify_slack,
    )

    slack = None if state.delivery is None else state.delivery.channels.get(channel)
    if not isinstance(slack, SlackChannel) or not slack.signing_secret:
        raise ApiError("not_found", f"no Slack channel {channel!r} with a signing secret is configured")
    body = await request.body()
    if len(body) > _MAX_BODY:
        raise ApiError("too_large", "the body is larger than 256 KiB")
    try:
        verify_slack(slack.signing_secret, request.headers, body)
    except SlackSignatureError as exc:
        raise ApiError("unauthorized", str(exc)) from None
    try:
        payload = json.loads(parse_qs(body.decode())["payload"][0])
        kind, user_id = payload["type"], payload["user"]["id"]
    except (KeyError, IndexError, ValueError, TypeError, UnicodeDecodeError, RecursionError):
        raise ApiError("invalid_request", "not a Slack interaction payload", status=UNREADABLE) from None
    if (fault := interaction_fault(payload)) is not None:
        raise ApiError("invalid_request", f"not a Slack interaction payload: {fault}", status=UNREADABLE)

    async def tell(text: str) -> None:
        url = payload.get("response_url")
        if isinstance(url, str) and url.startswith(("http://", "https://")):
            await slack.post(url, json={"response_type": "ephemeral", "replace_original": False, "text": text})

    if kind == "view_submission" and payload.get("view", {}).get("callback_id") == MODAL_CALLBACK:
        view = payload["view"]
        try:
            target = await broker.get(str(view.get("private_metadata", "")))
        except NotFound:
            return JSONResponse({"response_action": "errors", "errors": {}}, status_code=200)
        by = await _slack_answerer(state, broker, channel, user_id, target, "this form")
        first = error_block(target)
        if isinstance(by, _NotYours):
            return JSONResponse({"response_action": "errors", "errors": {first: by.why[:150]}})
        try:
            done = await broker.resolve(target.id, Answers(answers_from_view(target, view)), by=by, via="slack")
        except InvalidAnswer as exc:
            fault = str(exc).removeprefix(f"ask {exc.ask_id!r}: ") if exc.ask_id else str(exc)
            fault = fault[:1].upper() + fault[1:]
            return JSONResponse({"response_action": "errors", "errors": {error_block(target, exc): fault[:150]}})
        if not done:
            text = _settled_text(await broker.get(target.id))
            return JSONResponse({"response_action": "errors", "errors": {first: text[:150]}})
        return Response(status_code=200)
    if kind != "block_actions" or not payload.get("actions"):
        return Response(status_code=200)  # nothing interlock asked for
    action = payload["actions"][0]
    action_id = str(action.get("action_id", ""))
    if action_id == OPEN_ACTION:
        try:
            target = await broker.get(str(action.get("value", "")))
        except NotFound:
            await tell("This request is gone.")
            return Response(status_code=200)
        if target.status is not Status.PENDING:
            await tell(_settled_text(target))
        elif isinstance(
            refused := await _slack_answerer(state, broker, channel, user_id, target, "this button"), _NotYours
        ):
            await tell(refused.why)
        elif (view := modal_view(target)) is None:  # its form is answered in the inbox
            where = state.delivery.context.request_url(target.id) if state.delivery is not None else None
            await tell(f"Answer this one in the inbox: {where}" if where else "Answer this one in the inbox.")
        else:
            await slack.call("views.open", {"trigger_id": payload.get("trigger_id"), "view": view})
        return Response(status_code=200)
    if not action_id.startswith(ANSWER_ACTION):
        return Response(status_code=200)  # the inbox link button: Slack opens the URL itself
    raw = action.get("value") or (action.get("selected_option") or {}).get("value") or ""
    try:
        chosen = json.loads(str(raw))
        target = await broker.get(chosen["r"])
    except (ValueError, TypeError, KeyError, RecursionError, NotFound):
        await tell("This button no longer works.")
        return Response(status_code=200)
    by = await _slack_answerer(state, broker, channel, user_id, target, "this button")
    if isinstance(by, _NotYours):
        await tell(by.why)
        return Response(status_code=200)
    try:
        done = await broker.resolve(target.id, chosen["a"], by=by, via="slack")
    except InvalidAnswer as exc:
        await tell(f"That answer does not fit: {exc}")
        return Response(status_code=200)
    if not done:
        await tell(_settled_text(await broker.get(target.id)))
    return Response(status_code=200)
