"""The shapes the MCP tools speak: typed asks in, jobs and whole requests out.

An MCP client asks with five ask types (text, approval, choice, checkboxes, form); each is
one of interlock's ask kinds, so a request made here is answered from every surface and a
request made anywhere reads back here:

    text        Text (multiline)      answer: a string
    approval    Confirm               answer: true or false
    choice      Choice                answer: one option id
    checkboxes  MultiChoice           answer: an array of option ids
    form        Form                  answer: an object fitting its schema

A job is a view of a request, not a second record: its id is the request's id and its
status follows the request's, so a job outlives every process that made or watched it:

    pending                     INPUT_REQUIRED
    answered                    COMPLETE, with the response
    rejected, expired           FAILED, with the reason
    cancelled                   CANCELLED, with the reason
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import InvalidRequest
from ..model import (
    Ask,
    Choice,
    Confirm,
    Form,
    IssuedGrant,
    MultiChoice,
    Option,
    Request,
    Status,
    Text,
    grant_record,
)

__all__ = [
    "ASK_TYPES",
    "INBOX_STATUSES",
    "JOB_STATUSES",
    "JobStatus",
    "asks_from_arguments",
    "job_of",
    "request_view",
    "status_filter",
]

JobStatus = Literal["INPUT_REQUIRED", "COMPLETE", "FAILED", "CANCELLED"]


@dataclass(frozen=True, slots=True)
class _AskType:
    """An ask type as MCP clients name it: the ask kind it is, what it asks in a few words,
    and how it is answered."""

    kind: type[Ask]
    about: str
    answer_with: str


_TYPES: dict[str, _AskType] = {
    "text": _AskType(Text, "free text", "a string"),
    "approval": _AskType(Confirm, "yes/no", "true or false"),
    "choice": _AskType(Choice, "pick one option", "one option id"),
    "checkboxes": _AskType(MultiChoice, "pick any number", "an array of option ids"),
    "form": _AskType(
        Form, "fill in an object valid against schema, a JSON Schema of type object", "an object fitting the schema"
    ),
}

_NOT_SENT = frozenset({"allow_other"})
"""Fields of an ask kind an MCP client does not send: a choice answered with one's own text
is for the other surfaces."""

ASK_TYPES: dict[str, str] = {name: t.kind.type for name, t in _TYPES.items()}
"""Each ask type an MCP client may send, and the interlock ask kind it becomes."""

_NAME_OF: dict[str, str] = {t.kind.type: name for name, t in _TYPES.items()}


def sent_fields(kind: type[Any]) -> tuple[dataclasses.Field[Any], ...]:
    """The fields of an ask kind (or of `Option`) an MCP client sends: the dataclass's own,
    in its order, but those it does not send."""
    return tuple(
        f for f in dataclasses.fields(kind) if f.init and not f.name.startswith("_") and f.name not in _NOT_SENT
    )


def sent_types() -> dict[str, type[Ask]]:
    """Each ask type a client may send, by its MCP name, and the ask kind it is."""
    return {name: t.kind for name, t in _TYPES.items()}


def type_descriptions() -> str:
    """The ask types a client may send, each in a few words."""
    return "; ".join(f"{name}: {t.about}" for name, t in _TYPES.items()) + "."


def answer_forms() -> str:
    """How each ask type is answered, as a tool's description lists it."""
    return ", ".join(f"{name} -> {t.answer_with}" for name, t in _TYPES.items())


JOB_STATUSES: dict[Status, JobStatus] = {
    Status.PENDING: "INPUT_REQUIRED",
    Status.ANSWERED: "COMPLETE",
    Status.REJECTED: "FAILED",
    Status.EXPIRED: "FAILED",
    Status.CANCELLED: "CANCELLED",
}


def _inbox_status(status: Status) -> str:
    return "open" if status is Status.PENDING else status.value


INBOX_STATUSES: dict[str, Status] = {_inbox_status(status): status for status in Status}
"""A request's status as an inbox filter names it: `open` for pending, the others as they are."""

_FIELDS = {name: {"type", *(f.name for f in sent_fields(kind))} for name, kind in sent_types().items()}
_OPTION_FIELDS = {f.name for f in sent_fields(Option)}


def status_filter(status: str | None) -> Status | None:
    """The request status an inbox filter names (open, answered, rejected, expired, cancelled)."""
    if status is None:
        return None
    if status not in INBOX_STATUSES:
        raise InvalidRequest(f"status must be one of {', '.join(INBOX_STATUSES)}, not {status!r}")
    return INBOX_STATUSES[status]


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
            raise InvalidRequest(
                f"{where}: {'an' if kind[:1] in 'aeiou' else 'a'} {kind} ask has no field(s) {', '.join(unknown)}{hint}"
            )
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
    """One ask as a client reads it: its JSON shape (the ask kind's own `to_dict`) under the
    type name a client sends, and how to answer it."""
    view = ask.to_dict()
    name = view["type"] = _NAME_OF.get(ask.type, ask.type)
    if "options" in view:
        view["options"] = [_option_view(option) for option in view["options"]]
    known = _TYPES.get(name)
    answer_with = known.answer_with if known is not None else ask.how_to_answer()
    if ask.allow_other:  # a choice made elsewhere that takes one's own words too
        answer_with += ", or your own text"
    view["answer_with"] = answer_with
    return view


def _option_view(option: Mapping[str, Any]) -> dict[str, Any]:
    """An option as a client reads it: without a description when it has none."""
    return {key: value for key, value in option.items() if key != "description" or value}


def grant_view(grant: IssuedGrant) -> dict[str, Any]:
    """An issued grant: who (`issuer`) lets whom (`audience`) do `can` on `with` until when,
    as the answer issued it."""
    return grant_record(grant)


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
