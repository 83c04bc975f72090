"""The shapes the MCP tools speak: typed asks in, jobs and whole requests out.

An MCP client asks with four ask types (text, approval, choice, checkboxes); each is one of
interlock's ask kinds, so a request made here is answered from every surface and a request
made anywhere reads back here:

    text        Text (multiline)      answer: a string
    approval    Confirm               answer: true or false
    choice      Choice                answer: one option id
    checkboxes  MultiChoice           answer: an array of option ids
    form        Form (read only)      answer: an object fitting its schema

A job is a view of a request, not a second record: its id is the request's id and its
status follows the request's, so a job outlives every process that made or watched it:

    pending                     INPUT_REQUIRED
    answered                    COMPLETE, with the response
    rejected, expired           FAILED, with the reason
    cancelled                   CANCELLED, with the reason
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ..errors import InvalidRequest
from ..model import (
    Ask,
    Choice,
    Confirm,
    Form,
    Grant,
    IssuedGrant,
    MultiChoice,
    Request,
    Status,
    Text,
    grant_from_dict,
    grant_to_dict,
    issued_grant_to_dict,
    options_of,
)

__all__ = ["ASK_TYPES", "JOB_STATUSES", "JobStatus", "asks_from_arguments", "job_of", "request_view", "status_filter"]

JobStatus = Literal["INPUT_REQUIRED", "COMPLETE", "FAILED", "CANCELLED"]

ASK_TYPES: dict[str, str] = {"text": "text", "approval": "confirm", "choice": "choice", "checkboxes": "multi_choice"}
"""Each ask type an MCP client may send, and the interlock ask kind it becomes."""

_TYPE_OF: dict[type[Any], str] = {
    Text: "text",
    Confirm: "approval",
    Choice: "choice",
    MultiChoice: "checkboxes",
    Form: "form",
}

JOB_STATUSES: dict[Status, JobStatus] = {
    Status.PENDING: "INPUT_REQUIRED",
    Status.ANSWERED: "COMPLETE",
    Status.REJECTED: "FAILED",
    Status.EXPIRED: "FAILED",
    Status.CANCELLED: "CANCELLED",
}

_INBOX_STATUS = {"open": Status.PENDING, "answered": Status.ANSWERED, "rejected": Status.REJECTED}
_INBOX_STATUS |= {"expired": Status.EXPIRED, "cancelled": Status.CANCELLED}

_COMMON = {"id", "type", "prompt", "required"}
_FIELDS = {
    "text": _COMMON | {"multiline", "max_length"},
    "approval": _COMMON | {"grants"},
    "choice": _COMMON | {"options"},
    "checkboxes": _COMMON | {"options", "min", "max"},
}
_OPTION_FIELDS = {"id", "label", "description", "grants"}


def status_filter(status: str | None) -> Status | None:
    """The request status an inbox filter names (open, answered, rejected, expired, cancelled)."""
    if status is None:
        return None
    if status not in _INBOX_STATUS:
        raise InvalidRequest(f"status must be one of {', '.join(_INBOX_STATUS)}, not {status!r}")
    return _INBOX_STATUS[status]


def asks_from_arguments(asks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """interlock's JSON shape of each ask a client sent (`Broker.build_asks` checks the rest).

    An ask without an id is numbered (`q1`, `q2`, ...) by its place; text asks are
    multiline unless they say otherwise. Grant offers are passed on as they are: where
    they may appear, and what they may offer, is the venue's to decide.
    """
    if not isinstance(asks, Sequence) or isinstance(asks, str | bytes) or not asks:
        raise InvalidRequest("asks: give at least one ask")
    out: list[dict[str, Any]] = []
    for number, ask in enumerate(asks, 1):
        where = f"asks[{number - 1}]"
        if not isinstance(ask, Mapping):
            raise InvalidRequest(f"{where}: an ask is an object with a type and a prompt")
        kind = ask.get("type")
        if kind not in ASK_TYPES:
            raise InvalidRequest(f"{where}.type must be one of {', '.join(ASK_TYPES)}, not {kind!r}")
        unknown = sorted(set(ask) - _FIELDS[kind])
        if unknown:
            hint = " (grants go on approval asks and on options)" if "grants" in unknown else ""
            raise InvalidRequest(f"{where}: a {kind} ask has no field(s) {', '.join(unknown)}{hint}")
        shaped = {k: v for k, v in ask.items() if v is not None}
        shaped["type"] = ASK_TYPES[kind]
        shaped.setdefault("id", f"q{number}")
        if kind == "text":
            shaped.setdefault("multiline", True)
        if "options" in shaped:
            shaped["options"] = _options(where, shaped["options"])
        out.append(shaped)
    return out


def _options(where: str, options: Any) -> list[Any]:
    if not isinstance(options, Sequence) or isinstance(options, str | bytes):
        raise InvalidRequest(f"{where}.options must be an array of options")
    for index, option in enumerate(options):
        if isinstance(option, Mapping) and not set(option) <= _OPTION_FIELDS:
            unknown = ", ".join(sorted(set(option) - _OPTION_FIELDS))
            raise InvalidRequest(f"{where}.options[{index}]: an option has no field(s) {unknown}")
    return list(options)


def ask_view(ask: Ask) -> dict[str, Any]:
    """One ask as a client reads it: the type it would send, and how to answer it."""
    kind = _TYPE_OF.get(type(ask), ask.type)
    view: dict[str, Any] = {"id": ask.id, "type": kind, "prompt": ask.prompt, "required": ask.required}
    if isinstance(ask, Confirm) and ask.grants:
        view["grants"] = _offers(ask.grants)
    if isinstance(ask, Choice | MultiChoice):
        view["options"] = [_option_view(option) for option in options_of(ask)]
    if isinstance(ask, MultiChoice):
        view["min"], view["max"] = ask.min, ask.max
    if isinstance(ask, Choice) and ask.allow_other:
        view["allow_other"] = True
    if isinstance(ask, Form):
        view["schema"] = dict(ask.schema)
    view["answer_with"] = _ANSWER_WITH.get(kind, "a value")
    return view


_ANSWER_WITH = {
    "text": "a string",
    "approval": "true or false",
    "choice": "one option id",
    "checkboxes": "an array of option ids",
    "form": "an object fitting the schema",
}


def _option_view(option: Any) -> dict[str, Any]:
    view = {"id": option.id, "label": option.label or option.id}
    if option.description:
        view["description"] = option.description
    if option.grants:
        view["grants"] = _offers(option.grants)
    return view


def _offers(grants: Sequence[Grant | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Offered grants as a client echoes them: `{with, can}`, and `exp` when the offer set one."""
    return [grant_to_dict(grant_from_dict(grant)) for grant in grants]


def grant_view(grant: IssuedGrant) -> dict[str, Any]:
    """An issued grant: who (`issuer`) lets whom (`audience`) do `can` on `with` until when."""
    return issued_grant_to_dict(grant)


def job_of(request: Request) -> dict[str, Any]:
    """The job a request stands for: its status, and the response or the reason."""
    status = JOB_STATUSES[request.status]
    job: dict[str, Any] = {"job": request.id, "status": status, "request_status": request.status.value}
    job["user"] = request.to
    if request.expires_at is not None:
        job["expires_at"] = request.expires_at.isoformat()
    response = request.response
    if status == "COMPLETE" and response is not None:
        job["response"] = {
            "answers": dict(response.answers),
            "comment": response.reason,
            "by": response.by,
            "at": response.at.isoformat(),
        }
        job["response"]["grants"] = [grant_view(grant) for grant in response.grants]
    elif status in ("FAILED", "CANCELLED"):
        job["reason"] = _reason(request)
    return job


def _reason(request: Request) -> str:
    response = request.response
    given = response.reason if response is not None else ""
    if request.status is Status.REJECTED:
        return f"rejected: {given}" if given else "rejected by the person"
    if request.status is Status.EXPIRED:
        return "expired: nobody answered in time"
    cause = response.cause if response is not None and response.cause else "cancelled"
    return f"{cause}: {given}" if given else cause


def request_view(request: Request) -> dict[str, Any]:
    """One whole request as a client reads it: who, what, its asks and offered grants, its job."""
    view: dict[str, Any] = {
        "id": request.id,
        "status": _inbox_status(request.status),
        "title": request.title,
        "description": request.details,
        "from": request.requester,
        "user": request.to,
        "created_at": request.created_at.isoformat(),
        "expires_at": request.expires_at.isoformat() if request.expires_at is not None else None,
        "asks": [ask_view(ask) for ask in request.asks],
    }
    if request.context is not None:
        view["context"] = request.context
    view["job"] = job_of(request)
    return view


def summary_view(request: Request) -> dict[str, Any]:
    """A request as one inbox line: enough to decide whether to read it whole."""
    return {
        "id": request.id,
        "status": _inbox_status(request.status),
        "title": request.title or (request.asks[0].prompt if request.asks else ""),
        "from": request.requester,
        "created_at": request.created_at.isoformat(),
        "expires_at": request.expires_at.isoformat() if request.expires_at is not None else None,
        "asks": len(request.asks),
    }


def _inbox_status(status: Status) -> str:
    return "open" if status is Status.PENDING else status.value
