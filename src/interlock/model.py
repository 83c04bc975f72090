"""Requests, asks, answers and events: pure data and validation, no I/O.

A request asks a person one or more things (its *asks*). Each ask type knows how to check
an answer; `check_answers` checks a whole answer against a request and returns the
normalised answers by ask id, or raises `InvalidAnswer` naming the ask and the fault.
The `*_to_dict` / `*_from_dict` functions give the JSON shape used by every store and
surface, so that a request reads the same from SQLite, PostgreSQL and the HTTP API.
"""

from __future__ import annotations

import enum
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TypeAlias, cast

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from .errors import InvalidAnswer, InvalidRequest

__all__ = [
    "DEFAULT_MAX_PROMPT_LENGTH",
    "Answers",
    "Ask",
    "Choice",
    "Confirm",
    "Deny",
    "Event",
    "Form",
    "InputHook",
    "Kind",
    "MultiChoice",
    "Option",
    "Origin",
    "Request",
    "Response",
    "Status",
    "Text",
    "ask_from_dict",
    "ask_to_dict",
    "build_request",
    "check_answers",
    "new_id",
    "options_of",
    "origin_from_dict",
    "origin_to_dict",
    "request_from_dict",
    "request_to_dict",
]

DEFAULT_MAX_PROMPT_LENGTH = 20_000

Kind: TypeAlias = Literal["question", "approval"]
KINDS: frozenset[str] = frozenset({"question", "approval"})


class Status(enum.StrEnum):
    """Where a request is in its life. `pending` moves to exactly one terminal state."""

    PENDING = "pending"
    ANSWERED = "answered"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"

    @property
    def settled(self) -> bool:
        return self is not Status.PENDING


# -- ids ---------------------------------------------------------------------------------

_id_lock = threading.Lock()
_id_last_ms = 0
_id_last_rand = 0


def new_id() -> str:
    """A 32-character id that sorts by creation time: a 48-bit millisecond timestamp and
    80 random bits, in hex; within a process, later ids always sort after earlier ones."""
    global _id_last_ms, _id_last_rand
    with _id_lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _id_last_ms:
            ms = _id_last_ms
            rand = _id_last_rand + 1
        else:
            rand = int.from_bytes(os.urandom(10), "big") >> 1  # leaves room to increment
            _id_last_ms = ms
        _id_last_rand = rand
    return f"{ms:012x}{rand:020x}"


# -- asks --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Option:
    """One option of a `Choice` or `MultiChoice`."""

    id: str
    label: str = ""
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InvalidRequest("an option needs a non-empty string id")
        if not self.label:
            object.__setattr__(self, "label", self.id)


def _check_prompt(type_name: str, ask_id: str, prompt: object) -> None:
    if not isinstance(ask_id, str) or not ask_id:
        raise InvalidRequest(f"a {type_name} ask needs a non-empty string id")
    if not isinstance(prompt, str) or not prompt.strip():
        raise InvalidRequest(f"ask {ask_id!r}: the prompt must be a non-empty string")


def _options(ask_id: str, raw: Iterable[Option | str | Mapping[str, Any]]) -> tuple[Option, ...]:
    opts: list[Option] = []
    for item in raw:
        if isinstance(item, Option):
            opts.append(item)
        elif isinstance(item, str):
            opts.append(Option(id=item))
        elif isinstance(item, Mapping):
            unknown = set(item) - {"id", "label", "description"}
            if unknown:
                raise InvalidRequest(f"ask {ask_id!r}: unknown option field(s) {sorted(unknown)}")
            opts.append(Option(**item))
        else:
            raise InvalidRequest(f"ask {ask_id!r}: an option must be an Option, a string or a mapping")
    if not opts:
        raise InvalidRequest(f"ask {ask_id!r}: a choice needs at least one option")
    seen: set[str] = set()
    for opt in opts:
        if opt.id in seen:
            raise InvalidRequest(f"ask {ask_id!r}: option id {opt.id!r} is given twice")
        seen.add(opt.id)
    return tuple(opts)


@dataclass(frozen=True, slots=True)
class Text:
    """Free-form text; `multiline` is a rendering hint, `max_length` a hard limit."""

    prompt: str
    id: str = "text"
    multiline: bool = False
    max_length: int | None = None
    required: bool = True

    type = "text"

    def __post_init__(self) -> None:
        _check_prompt(self.type, self.id, self.prompt)
        if self.max_length is not None and (not isinstance(self.max_length, int) or self.max_length < 1):
            raise InvalidRequest(f"ask {self.id!r}: max_length must be a positive integer")

    def check(self, value: object) -> str:
        if not isinstance(value, str):
            raise InvalidAnswer(f"ask {self.id!r}: expected text, got {_kind_of(value)}", ask_id=self.id)
        if self.required and not value.strip():
            raise InvalidAnswer(f"ask {self.id!r}: an answer is required", ask_id=self.id)
        if self.max_length is not None and len(value) > self.max_length:
            raise InvalidAnswer(
                f"ask {self.id!r}: the answer is {len(value)} characters, at most {self.max_length} allowed",
                ask_id=self.id,
            )
        return value


@dataclass(frozen=True, slots=True)
class Confirm:
    """A yes/no question; the answer is a bool."""

    prompt: str
    id: str = "confirm"
    required: bool = True

    type = "confirm"

    def __post_init__(self) -> None:
        _check_prompt(self.type, self.id, self.prompt)

    def check(self, value: object) -> bool:
        if not isinstance(value, bool):
            raise InvalidAnswer(f"ask {self.id!r}: expected true or false, got {_kind_of(value)}", ask_id=self.id)
        return value


@dataclass(frozen=True, slots=True)
class Choice:
    """Pick one option by id; with `allow_other`, free text instead of an option is taken."""

    prompt: str
    options: Sequence[Option | str | Mapping[str, Any]] = ()
    id: str = "choice"
    allow_other: bool = False
    required: bool = True

    type = "choice"

    def __post_init__(self) -> None:
        _check_prompt(self.type, self.id, self.prompt)
        object.__setattr__(self, "options", _options(self.id, self.options))

    def check(self, value: object) -> str:
        if not isinstance(value, str):
            raise InvalidAnswer(f"ask {self.id!r}: expected one option id, got {_kind_of(value)}", ask_id=self.id)
        if any(opt.id == value for opt in options_of(self)):
            return value
        if self.allow_other and value.strip():
            return value
        ids = ", ".join(opt.id for opt in options_of(self))
        raise InvalidAnswer(f"ask {self.id!r}: {value!r} is not one of the options ({ids})", ask_id=self.id)


@dataclass(frozen=True, slots=True)
class MultiChoice:
    """Pick several options by id, between `min` and `max` of them."""

    prompt: str
    options: Sequence[Option | str | Mapping[str, Any]] = ()
    id: str = "multi_choice"
    min: int = 0
    max: int | None = None
    required: bool = True

    type = "multi_choice"

    def __post_init__(self) -> None:
        _check_prompt(self.type, self.id, self.prompt)
        opts = _options(self.id, self.options)
        object.__setattr__(self, "options", opts)
        if not isinstance(self.min, int) or self.min < 0:
            raise InvalidRequest(f"ask {self.id!r}: min must be a non-negative integer")
        if self.max is not None and (not isinstance(self.max, int) or self.max < max(self.min, 1)):
            raise InvalidRequest(f"ask {self.id!r}: max must be an integer >= min and >= 1")
        if self.min > len(opts):
            raise InvalidRequest(f"ask {self.id!r}: min is {self.min} but there are only {len(opts)} options")

    def check(self, value: object) -> list[str]:
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise InvalidAnswer(
                f"ask {self.id!r}: expected a list of option ids, got {_kind_of(value)}", ask_id=self.id
            )
        known = {opt.id for opt in options_of(self)}
        seen: set[str] = set()
        for v in value:
            if v not in known:
                raise InvalidAnswer(f"ask {self.id!r}: {v!r} is not one of the options", ask_id=self.id)
            if v in seen:
                raise InvalidAnswer(f"ask {self.id!r}: option {v!r} is selected twice", ask_id=self.id)
            seen.add(v)
        if len(value) < self.min:
            raise InvalidAnswer(f"ask {self.id!r}: select at least {self.min}, got {len(value)}", ask_id=self.id)
        if self.max is not None and len(value) > self.max:
            raise InvalidAnswer(f"ask {self.id!r}: select at most {self.max}, got {len(value)}", ask_id=self.id)
        return list(value)


@dataclass(frozen=True, slots=True)
class Form:
    """A JSON object valid against `schema` (a JSON Schema of type object, draft 2020-12)."""

    prompt: str
    schema: Mapping[str, Any] = field(default_factory=dict)
    id: str = "form"
    required: bool = True
    _validator: Draft202012Validator = field(init=False, repr=False, compare=False)

    type = "form"

    def __post_init__(self) -> None:
        _check_prompt(self.type, self.id, self.prompt)
        if not isinstance(self.schema, Mapping) or self.schema.get("type") != "object":
            raise InvalidRequest(f'ask {self.id!r}: a form schema must be a JSON Schema with "type": "object"')
        try:
            Draft202012Validator.check_schema(self.schema)
        except SchemaError as exc:
            raise InvalidRequest(f"ask {self.id!r}: invalid form schema: {exc.message}") from None
        object.__setattr__(self, "_validator", Draft202012Validator(self.schema))

    def check(self, value: object) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise InvalidAnswer(f"ask {self.id!r}: expected an object, got {_kind_of(value)}", ask_id=self.id)
        error = next(iter(sorted(self._validator.iter_errors(value), key=lambda e: list(e.path))), None)
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path)
            at = f" at {where!r}" if where else ""
            raise InvalidAnswer(f"ask {self.id!r}: {error.message}{at}", ask_id=self.id)
        return dict(value)


def options_of(ask: Choice | MultiChoice) -> tuple[Option, ...]:
    """The options of a choice ask, as the `Option`s they were normalised to."""
    return cast(tuple[Option, ...], ask.options)


Ask: TypeAlias = Text | Confirm | Choice | MultiChoice | Form
_ASK_CLASSES = (Text, Confirm, Choice, MultiChoice, Form)
ASK_TYPES: dict[str, type[Ask]] = {cls.type: cls for cls in _ASK_CLASSES}


def _kind_of(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", str: "text", int: "a number", float: "a number", list: "a list", dict: "an object"}.get(
        type(value), type(value).__name__
    )


# -- requests ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a request came from, so a notification knows whom to ask and why."""

    session: str | None = None
    channel: str | None = None
    agent: str | None = None
    actor: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    arguments: Mapping[str, Any] | None = None
    run: str | None = None
    correlation_id: str | None = None
    delegation: tuple[str, ...] | None = None
    """The agents that delegated down to `agent`, the root conversation's agent first."""


NO_ORIGIN = Origin()
"""The origin of a request that says nothing of where it came from (shared: Origins are frozen)."""


@dataclass(frozen=True, slots=True)
class Response:
    """How a request settled: the answers by ask id, who, through which surface, why, when.

    `cause` tells apart the ways a request is given up on (`cancelled`, `released`,
    `closed`, `withdrawn`); it is None for an answer, a rejection or an expiry.
    """

    at: datetime
    answers: Mapping[str, Any] = field(default_factory=dict)
    by: str | None = None
    via: str | None = None
    reason: str = ""
    cause: str | None = None


@dataclass(frozen=True, slots=True)
class Request:
    """A durable ask for human input. Build one through `Broker.create`."""

    id: str
    kind: Kind
    asks: tuple[Ask, ...]
    created_at: datetime
    status: Status = Status.PENDING
    title: str = ""
    details: str = ""
    context: Any = None
    to: str | None = None
    requester: str | None = None
    origin: Origin = NO_ORIGIN
    expires_at: datetime | None = None
    idempotency_key: str | None = None
    response: Response | None = None

    @property
    def answer(self) -> Any:
        """The answer: the bare value for a single ask, else a dict by ask id; None if unanswered."""
        if self.status is not Status.ANSWERED or self.response is None:
            return None
        if len(self.asks) == 1:
            return self.response.answers.get(self.asks[0].id)
        return dict(self.response.answers)

    def as_created(self) -> Request:
        """This request as it was when created: pending, without a response."""
        return self.settle(Status.PENDING, None)

    def settle(self, status: Status, response: Response | None) -> Request:
        """This request as settled; the caller stores it only if still pending."""
        return Request(
            self.id,
            self.kind,
            self.asks,
            self.created_at,
            status,
            self.title,
            self.details,
            self.context,
            self.to,
            self.requester,
            self.origin,
            self.expires_at,
            self.idempotency_key,
            response,
        )


@dataclass(frozen=True, slots=True)
class Event:
    """One record of the append-only, totally ordered event log."""

    id: int
    type: str
    at: datetime
    request_id: str | None = None
    request: Request | None = None
    """The request as it was right after this event."""
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Deny:
    """Returned by an input hook to refuse a request; the request is rejected with `reason`."""

    reason: str = "denied"


InputHook: TypeAlias = Callable[[Request], Awaitable[Deny | None]]
"""An on-input-required hook: notify someone; return `Deny(...)` to reject the request."""


def build_request(
    asks: Ask | Sequence[Ask],
    *,
    kind: str = "question",
    title: str = "",
    details: str = "",
    context: Any = None,
    to: str | None = None,
    requester: str | None = None,
    origin: Origin | None = None,
    expires_at: datetime | None = None,
    idempotency_key: str | None = None,
    max_prompt_length: int = DEFAULT_MAX_PROMPT_LENGTH,
    now: datetime | None = None,
) -> Request:
    """Check the parts of a new request and return it, pending, with a fresh id."""
    if isinstance(asks, _ASK_CLASSES):
        ask_list: tuple[Ask, ...] = (asks,)
        if len(asks.prompt) > max_prompt_length:
            raise InvalidRequest(_too_long(asks, max_prompt_length))
    else:
        ask_list = tuple(asks)
        if not ask_list:
            raise InvalidRequest("a request needs at least one ask")
        seen: set[str] = set()
        for ask in ask_list:
            if not isinstance(ask, _ASK_CLASSES):
                raise InvalidRequest(f"not an ask: {ask!r}")
            if ask.id in seen:
                raise InvalidRequest(f"ask id {ask.id!r} is used twice")
            seen.add(ask.id)
            if len(ask.prompt) > max_prompt_length:
                raise InvalidRequest(_too_long(ask, max_prompt_length))
    if kind != "question" and kind != "approval":
        raise InvalidRequest(f"kind must be 'question' or 'approval', not {kind!r}")
    if not isinstance(title, str):
        raise InvalidRequest("title must be a string")
    if not isinstance(details, str):
        raise InvalidRequest("details must be a string")
    if idempotency_key is not None and (not isinstance(idempotency_key, str) or not idempotency_key):
        raise InvalidRequest("idempotency_key must be a non-empty string")
    if expires_at is not None and expires_at.tzinfo is None:
        raise InvalidRequest("expires_at must be timezone-aware")
    return Request(
        new_id(),
        kind,  # type: ignore[arg-type]  # checked above
        ask_list,
        now or datetime.now(UTC),
        Status.PENDING,
        title,
        details,
        context,
        to,
        requester,
        origin or NO_ORIGIN,
        expires_at,
        idempotency_key,
    )


def _too_long(ask: Ask, limit: int) -> str:
    return f"ask {ask.id!r}: the prompt is {len(ask.prompt)} characters, at most {limit} allowed"


class Answers(dict[str, Any]):
    """Answers by ask id, said explicitly: never read as the bare value of a single ask."""


def check_answers(request: Request, answer: Any) -> dict[str, Any]:
    """Check an answer against the request's asks and return the answers by ask id.

    A mapping keyed by ask ids answers several asks; a request with one ask may also be
    answered with the bare value. For a single form ask, a mapping is the bare form value
    unless its only key is the ask id (and that is not a property of the form).
    """
    asks = request.asks
    if len(asks) == 1 and not isinstance(answer, Answers) and not _is_keyed(asks[0], answer):
        return {asks[0].id: asks[0].check(answer)}
    if not isinstance(answer, Mapping):
        raise InvalidAnswer(f"expected an object of answers by ask id ({', '.join(a.id for a in asks)})")
    by_id = {ask.id: ask for ask in asks}
    unknown = [key for key in answer if key not in by_id]
    if unknown:
        raise InvalidAnswer(f"unknown ask id {unknown[0]!r}", ask_id=str(unknown[0]))
    checked: dict[str, Any] = {}
    for ask in asks:
        if ask.id in answer:
            checked[ask.id] = ask.check(answer[ask.id])
        elif ask.required:
            raise InvalidAnswer(f"ask {ask.id!r}: an answer is required", ask_id=ask.id)
    return checked


def _is_keyed(ask: Ask, answer: Any) -> bool:
    if not isinstance(answer, Mapping) or set(answer) != {ask.id}:
        return False
    return not (isinstance(ask, Form) and ask.id in ask.schema.get("properties", {}))


# -- JSON shape --------------------------------------------------------------------------


def ask_to_dict(ask: Ask) -> dict[str, Any]:
    out: dict[str, Any] = {"type": ask.type, "id": ask.id, "prompt": ask.prompt, "required": ask.required}
    if isinstance(ask, Text):
        out.update(multiline=ask.multiline, max_length=ask.max_length)
    elif isinstance(ask, Choice | MultiChoice):
        out["options"] = [{"id": o.id, "label": o.label, "description": o.description} for o in options_of(ask)]
        if isinstance(ask, Choice):
            out["allow_other"] = ask.allow_other
        else:
            out.update(min=ask.min, max=ask.max)
    elif isinstance(ask, Form):
        out["schema"] = dict(ask.schema)
    return out


def ask_from_dict(data: Mapping[str, Any]) -> Ask:
    """Build an ask from its JSON shape; unknown types or fields raise `InvalidRequest`."""
    if not isinstance(data, Mapping):
        raise InvalidRequest("an ask must be an object")
    fields = dict(data)
    type_name = fields.pop("type", None)
    cls = ASK_TYPES.get(type_name) if isinstance(type_name, str) else None
    if cls is None:
        raise InvalidRequest(f"unknown ask type {type_name!r}; expected one of {', '.join(ASK_TYPES)}")
    allowed = {f for f in cls.__dataclass_fields__ if not f.startswith("_")}
    unknown = set(fields) - allowed
    if "options" in unknown:
        raise InvalidRequest(f"ask {fields.get('id', type_name)!r}: options are only allowed on choice asks")
    if unknown:
        raise InvalidRequest(f"ask {fields.get('id', type_name)!r}: unknown field(s) {sorted(unknown)}")
    try:
        return cls(**fields)
    except TypeError as exc:
        raise InvalidRequest(f"ask {fields.get('id', type_name)!r}: {exc}") from None


def _ts(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value is not None else None


def origin_to_dict(origin: Origin) -> dict[str, Any]:
    out = {name: value for name in Origin.__dataclass_fields__ if (value := getattr(origin, name)) is not None}
    if origin.delegation is not None:
        out["delegation"] = list(origin.delegation)
    return out


def origin_from_dict(data: Mapping[str, Any]) -> Origin:
    fields = dict(data)
    if fields.get("delegation") is not None:
        fields["delegation"] = tuple(fields["delegation"])
    return Origin(**fields)


def response_to_dict(response: Response) -> dict[str, Any]:
    return {
        "answers": dict(response.answers),
        "by": response.by,
        "via": response.via,
        "reason": response.reason,
        "cause": response.cause,
        "at": response.at.isoformat(),
    }


def response_from_dict(data: Mapping[str, Any]) -> Response:
    return Response(
        at=datetime.fromisoformat(data["at"]),
        answers=data.get("answers") or {},
        by=data.get("by"),
        via=data.get("via"),
        reason=data.get("reason") or "",
        cause=data.get("cause"),
    )


def request_to_dict(request: Request) -> dict[str, Any]:
    return {
        "id": request.id,
        "kind": request.kind,
        "status": request.status.value,
        "asks": [ask_to_dict(a) for a in request.asks],
        "title": request.title,
        "details": request.details,
        "context": request.context,
        "to": request.to,
        "requester": request.requester,
        "origin": origin_to_dict(request.origin),
        "created_at": request.created_at.isoformat(),
        "expires_at": _ts(request.expires_at),
        "idempotency_key": request.idempotency_key,
        "response": response_to_dict(request.response) if request.response else None,
    }


def request_from_dict(data: Mapping[str, Any]) -> Request:
    """Rebuild a stored request. Stored data was checked on the way in."""
    return Request(
        id=data["id"],
        kind=data["kind"],
        status=Status(data["status"]),
        asks=tuple(ask_from_dict(a) for a in data["asks"]),
        title=data.get("title", ""),
        details=data.get("details", ""),
        context=data.get("context"),
        to=data.get("to"),
        requester=data.get("requester"),
        origin=origin_from_dict(data.get("origin", {})),
        created_at=datetime.fromisoformat(data["created_at"]),
        expires_at=_dt(data.get("expires_at")),
        idempotency_key=data.get("idempotency_key"),
        response=response_from_dict(data["response"]) if data.get("response") else None,
    )
