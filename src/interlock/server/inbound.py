"""Answers that come back through a signed webhook: POST /api/v1/inbound/{channel}.

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
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..errors import AlreadySettled, InvalidAnswer, NotFound
from ..model import Answers, request_to_dict
from ..webhooks import InvalidSignature, verify
from .common import ApiError, State, TheBroker

__all__ = ["router"]

router = APIRouter()

_MAX_BODY = 256 * 1024


@router.post("/inbound/{channel}", tags=["deliveries"])
async def inbound(channel: str, request: Request, state: State, broker: TheBroker) -> JSONResponse:
    """Answer or reject a request through a signed webhook (see the module)."""
    loop = state.delivery
    config = None if loop is None else loop.routing.channels.get(channel)
    secret = None if config is None else config.options.get("secret")
    if config is None or config.type != "webhook" or not isinstance(secret, str):
        raise ApiError(404, "not_found", f"no webhook channel {channel!r} with a secret is configured")
    assert loop is not None
    body = await request.body()
    if len(body) > _MAX_BODY:
        raise ApiError(413, "too_large", "the body is larger than 256 KiB")
    try:
        verify(secret, request.headers, body)
    except InvalidSignature as exc:
        raise ApiError(401, "unauthorized", f"the webhook signature does not check out: {exc}") from None
    doc = _object(body)
    request_id, recipient = doc.get("request_id"), doc.get("recipient")
    if not isinstance(request_id, str) or not isinstance(recipient, str):
        raise ApiError(422, "invalid_request", "request_id and recipient are required, as text")
    delivered = await broker.store.list_deliveries(request_id=request_id, limit=1000)
    if not any(d.channel == channel and d.recipient == recipient for d in delivered):
        raise ApiError(403, "forbidden", f"request {request_id} was not delivered to {recipient!r} through {channel!r}")
    by = recipient
    member = doc.get("by")
    if member is not None:
        if not isinstance(member, str) or member not in loop.routing.teams.get(recipient, ()):
            raise ApiError(403, "forbidden", f"{member!r} is not a member of the team {recipient!r}")
        by = member
    given = [key for key in ("answer", "answers", "reject") if key in doc]
    if len(given) != 1:
        raise ApiError(422, "invalid_request", "give exactly one of answer, answers or reject")
    comment = doc.get("comment", "")
    if not isinstance(comment, str):
        raise ApiError(422, "invalid_request", "comment: text")
    try:
        if given[0] == "reject":
            reason = doc["reject"]
            if not isinstance(reason, str):
                raise ApiError(422, "invalid_request", "reject: the reason, as text")
            done = await broker.reject(request_id, reason, by=by, via="webhook")
        else:
            value: Any = doc["answer"] if given[0] == "answer" else doc["answers"]
            if given[0] == "answers":
                if not isinstance(value, dict):
                    raise InvalidAnswer("answers: an object by ask id")
                value = Answers(value)
            done = await broker.resolve(request_id, value, by=by, via="webhook", comment=comment)
    except NotFound:
        raise ApiError(404, "not_found", f"no request {request_id}") from None
    current = await broker.get(request_id)
    if not done:
        raise AlreadySettled(request_id, current.status.value)
    return JSONResponse(request_to_dict(current))


def _object(body: bytes) -> dict[str, Any]:
    import json

    try:
        doc = json.loads(body)
    except ValueError:
        raise ApiError(400, "invalid_request", "the body is not valid JSON") from None
    if not isinstance(doc, dict):
        raise ApiError(422, "invalid_request", "the body must be a JSON object")
    return doc
