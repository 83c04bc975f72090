"""The shapes of the HTTP API, for validation and for the OpenAPI document.

They mirror the JSON shape of `interlock.model` (`request_to_dict`), which is what the
handlers send, so the published schema is the one on the wire. The asks, their options
and the origin are generated from the model's dataclasses (`_wire_model`): a field is
defined once, in the model.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast, get_type_hints

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    create_model,
    model_serializer,
)
from pydantic_core import PydanticCustomError

from ..durations import NoOffset, instant
from ..model import Choice, Confirm, Form, Grant, MultiChoice, Option, Origin, Text
from ..store import Query
from ..wire import WIRE_ERRORS

__all__ = [
    "WhoamiModel",
    "Strict",
    "AnswerBody",
    "GrantEcho",
    "GrantModel",
    "IssuedGrantModel",
    "AskModel",
    "BatchAnswerBody",
    "BatchResult",
    "CancelBody",
    "CloseBody",
    "ConsumeBody",
    "ConsumeResult",
    "CreateBody",
    "DashboardModel",
    "EventModel",
    "EventPage",
    "InformBody",
    "InputResponse",
    "ListParams",
    "OriginModel",
    "Problem",
    "RejectBody",
    "ReopenBody",
    "Reopened",
    "RequestModel",
    "RequestPage",
    "list_filters",
]


class Strict(BaseModel):
    """A body of the API: strict types as well as no unknown fields, so a body is taken as
    the schema says, with no coercion (`0` is not a boolean, `5` not a string), and what
    the document refuses the server refuses too. NaN and Infinity are no JSON numbers, and
    no numbers here either."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class _Wire(Strict):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, populate_by_name=True)


_REQUIRED_ON_WIRE = frozenset({"options", "schema"})
"""Fields an ask cannot do without, though its dataclass gives them an empty default (so
that the prompt stays its first, positional field)."""

_DESCRIPTIONS = {"schema": "A JSON Schema of type object (draft 2020-12)."}

_ALIASES = {"schema": "schema_"}
"""Fields whose names pydantic's BaseModel keeps for itself: renamed, with the wire name as alias."""


def _wire_model(cls: type[Any], name: str, wire_types: Mapping[Any, Any]) -> type[_Wire]:
    """A pydantic model of a model dataclass's JSON shape: its init fields, with their
    defaults, in its order; an ask's `type` first."""
    hints = get_type_hints(cls)
    fields: dict[str, Any] = {}
    if isinstance(getattr(cls, "type", None), str):
        fields["type"] = (Literal[cls.type], ...)
    for f in dataclasses.fields(cls):
        if not f.init or f.name.startswith("_"):
            continue
        hint = wire_types.get(hints[f.name], hints[f.name])
        required = f.name in _REQUIRED_ON_WIRE or (
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        default = ... if required else f.default
        info = Field(default, alias=f.name if f.name in _ALIASES else None, description=_DESCRIPTIONS.get(f.name))
        if default == ():  # an empty tuple in the dataclass (grants) is an empty list on the wire
            info = Field(default_factory=list, description=_DESCRIPTIONS.get(f.name))
        fields[_ALIASES.get(f.name, f.name)] = (hint, info)
    model: type[_Wire] = create_model(name, __base__=_Wire, **fields)
    return model


class GrantModel(_Wire):
    """A capability offered on a confirm ask or an option: `can` on `with`, until `exp`.
    It is issued only if the person makes that choice and echoes the grant."""

    with_: str = Field(alias="with", min_length=1, description="The resource, e.g. interlock:inbox/alice.")
    can: str = Field(min_length=1, description="The ability, e.g. hitl/request.")
    exp: int | None = Field(
        None,
        ge=0,
        description="Unix seconds. Omitted: the venue's default (7 days after issuance); null: no expiry.",
    )

    @model_serializer(mode="wrap")
    def _leave_out_default_exp(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # An omitted `exp` (the venue's default) and an explicit null (no expiry) differ.
        data: dict[str, Any] = handler(self)
        if "exp" not in self.model_fields_set:
            data.pop("exp", None)
        return data


class GrantEcho(_Wire):
    """An offered grant the person approves, named by `with` and `can` (an `exp`, when
    given, must be the offer's)."""

    with_: str = Field(alias="with")
    can: str
    exp: int | None = None

    @model_serializer(mode="wrap")
    def _leave_out_unset_exp(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if "exp" not in self.model_fields_set:
            data.pop("exp", None)
        return data


class IssuedGrantModel(BaseModel):
    id: str
    with_: str = Field(alias="with")
    can: str
    issuer: str | None
    audience: str | None
    issued_at: str
    expires_at: str | None
    exp: int | None = Field(description="expires_at in unix seconds; null: no expiry")
    request_id: str | None
    ask_id: str | None
    option_id: str | None
    revoked_at: str | None
    revoked_by: str | None
    issuer_cut_off: bool = Field(
        False,
        description="True while its issuer is a person `interlock token revoke` cut off (every token of theirs "
        "revoked): it authorizes nothing then, though it is neither revoked nor expired and is kept as it is; "
        "`interlock token create ISSUER --human` restores it. Said as the grant is read (the grants list, one grant); "
        "the grants an answer issued are shown as it issued them, without it.",
    )


if TYPE_CHECKING:

    class OptionModel(_Wire): ...

    class TextAsk(_Wire): ...

    class ConfirmAsk(_Wire): ...

    class ChoiceAsk(_Wire): ...

    class MultiChoiceAsk(_Wire): ...

    class FormAsk(_Wire): ...

    class OriginModel(_Wire):
        """`Origin`'s fields, each optional."""

else:
    # Derived from the model's dataclasses, so the API takes exactly their fields.
    _GRANT_TYPES = {Sequence[Grant | Mapping[str, Any]]: list[GrantModel]}
    OptionModel = _wire_model(Option, "OptionModel", _GRANT_TYPES)
    _WIRE_TYPES = {
        **_GRANT_TYPES,
        Mapping[str, Any]: dict[str, Any],
        Mapping[str, Any] | None: dict[str, Any] | None,
        tuple[str, ...] | None: list[str] | None,
        Sequence[Option | str | Mapping[str, Any]]: list[OptionModel | str],
    }
    TextAsk = _wire_model(Text, "TextAsk", _WIRE_TYPES)
    ConfirmAsk = _wire_model(Confirm, "ConfirmAsk", _WIRE_TYPES)
    ChoiceAsk = _wire_model(Choice, "ChoiceAsk", _WIRE_TYPES)
    MultiChoiceAsk = _wire_model(MultiChoice, "MultiChoiceAsk", _WIRE_TYPES)
    FormAsk = _wire_model(Form, "FormAsk", _WIRE_TYPES)
    OriginModel = _wire_model(Origin, "OriginModel", _WIRE_TYPES)


def _list_params() -> type[BaseModel]:
    """The query parameters of `GET /requests`: the filters of `Query` that are parameters,
    each under its parameter's name, with the values it takes, its bounds and what it keeps.
    A time is RFC 3339 text (the route reads it, with its offset)."""
    hints = get_type_hints(Query)
    fields: dict[str, Any] = {}
    for spec in dataclasses.fields(Query):
        meta = spec.metadata
        if not spec.init or meta["wire"] is None:
            continue
        rules = dict(meta["rules"])
        hint, default, about = hints[spec.name], cast(Any, spec.default), meta["about"]
        values = rules.pop("values", None)
        if values is not None:
            # As their wire words (an enum's values): a refusal lists 'pending', not Status.PENDING.
            values = tuple(v.value if isinstance(v, enum.Enum) else v for v in values)
            hint = Literal[values] if default is not None else Literal[values] | None
        elif hint == datetime | None:
            hint, about = str | None, f"{about} (RFC 3339)"
            rules["json_schema_extra"] = {"format": "date-time"}
        fields[meta["wire"] or spec.name] = (hint, Field(default, description=about, **rules))
    return create_model("ListParams", **fields)


def list_filters(params: BaseModel) -> dict[str, Any]:
    """`Broker.list`'s keyword arguments from `GET /requests`' parameters (times still as text)."""
    given = params.model_dump()
    return {
        spec.name: given[spec.metadata["wire"] or spec.name]
        for spec in dataclasses.fields(Query)
        if spec.init and spec.metadata["wire"] is not None
    }


if TYPE_CHECKING:

    class ListParams(BaseModel):
        """The query parameters of `GET /requests`."""

else:
    ListParams = _list_params()


AskModel = Annotated[TextAsk | ConfirmAsk | ChoiceAsk | MultiChoiceAsk | FormAsk, Field(discriminator="type")]


def _instant(value: object) -> object:
    """An RFC 3339 date-time with its offset (`durations.instant`), refused with pydantic's
    own error types for a time it cannot read and one without an offset."""
    if isinstance(value, datetime):
        return value  # built in Python (an example), not read off the wire
    try:
        return instant(value)
    except NoOffset as exc:
        raise PydanticCustomError("timezone_aware", "{reason}", {"reason": str(exc)}) from None
    except ValueError as exc:
        raise PydanticCustomError("datetime_from_date_parsing", "{reason}", {"reason": str(exc)}) from None


Instant = Annotated[datetime, BeforeValidator(_instant)]
"""An instant on the wire: an RFC 3339 date-time with an offset, kept with that offset."""


class CreateBody(Strict):
    asks: list[AskModel] = Field(min_length=1)
    kind: Literal["question", "approval"] = "question"
    to: str | None = Field(
        None,
        description="The recipient. When omitted, the caller's own inbox: an agent's owner's, or the person's own "
        "(a server without auth leaves the request unaddressed).",
    )
    title: str = ""
    details: str = Field("", description="Markdown.")
    context: Any = None
    timeout: float | None = Field(
        None,
        gt=0,
        description="Seconds until the request expires, counted from when the server receives it.",
    )
    expires_at: Instant | None = Field(
        None,
        description="When the request expires: an RFC 3339 date-time with its offset (Z for UTC), kept with "
        "that offset, as the server's clock reads it. With `timeout` too, the earlier of the two. One already "
        "past makes a request that expires at once.",
    )
    idempotency_key: str | None = None
    origin: OriginModel = Field(default_factory=OriginModel)
    requester: str | None = Field(None, description="Only honoured by a server without auth.")
    detached: bool = Field(
        False,
        description="Nobody will wait on it: its creator frees it with a release (a cancel with cause "
        "`released`), and a waiting call that is cut does not withdraw it.",
    )


class ResponseModel(BaseModel):
    answers: dict[str, Any]
    by: str | None
    via: str | None
    reason: str
    cause: str | None
    at: str
    grants: list[IssuedGrantModel] = Field(default_factory=list, description="The grants this answer issued.")


class RequestModel(BaseModel):
    id: str
    kind: Literal["question", "approval"]
    status: Literal["pending", "answered", "rejected", "expired", "cancelled"]
    asks: list[AskModel]
    title: str
    details: str
    context: Any
    to: str | None
    requester: str | None
    origin: OriginModel
    created_at: str
    expires_at: str | None = Field(
        description="when the request will be given up, while pending (for a request of a parked run, "
        "when the run's pause expires); null once settled"
    )
    settled_at: str | None = Field(None, description="when the request settled; null while pending")
    idempotency_key: str | None
    response: ResponseModel | None
    detached: bool


class RequestPage(BaseModel):
    items: list[RequestModel]
    next_cursor: str | None


class InputResponse(Strict):
    """A Novo-compatible answer to one prompt: an option, several options, or text."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    request_id: str = Field(alias="requestId")
    option_id: str | None = Field(None, alias="optionId")
    option_ids: list[str] | None = Field(None, alias="optionIds")
    text: str | None = None


class AnswerBody(Strict):
    """Answer natively (`answers` by ask id, or `answer` for a request with one ask), or
    with the Novo-compatible body (`inputResponses`, `reason`, `cancel`). The server records the
    surface (`via`: "api") itself. `cancel: true` ends the request unanswered: the requester
    withdraws it (as on `/cancel`), or the person it is to declines it; either way it is
    recorded as cancelled, by whoever did it."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    answers: dict[str, Any] | None = None
    answer: Any = None
    input_responses: list[InputResponse] | None = Field(None, alias="inputResponses")
    cancel: bool = False
    reason: str = Field("", description="Kept with the answer and echoed back verbatim.")
    by: str | None = Field(None, description="Who answers; only honoured by a server without auth.")
    grants: list[GrantEcho] | None = Field(
        None,
        description="Echo the offered grants you approve. Exactly those your choices trigger and you echo are "
        "issued; echoing one your choices did not trigger refuses the whole answer and leaves the request open.",
    )


class BatchItem(AnswerBody):
    id: str


class BatchAnswerBody(Strict):
    items: list[BatchItem] = Field(min_length=1, max_length=500)


class BatchResult(BaseModel):
    id: str
    ok: bool
    status: str | None = None
    error: dict[str, Any] | None = None


class RejectBody(Strict):
    reason: str = ""
    hook: bool = Field(
        default=False,
        description="The requester's own input hook denies the request (recorded `via: hook`, by the "
        "requester): only whoever made the request may send it.",
    )


class CancelBody(Strict):
    reason: str = ""
    cause: Literal["cancelled", "released", "withdrawn", "closed"] = "cancelled"


class CloseBody(Strict):
    channel: str | None = Field(None, description="The channel to close; none to withdraw pending requests only.")


class ReopenBody(Strict):
    channel: str


class Reopened(BaseModel):
    channel: str
    reopened: bool = Field(description="Whether the channel was closed.")


class ConsumeBody(Strict):
    by: str | None = Field(None, description="Only honoured by a server without auth; else you.")


class ConsumeResult(BaseModel):
    id: str
    consumed: bool = Field(description="True for the one call that consumed the answered request.")


class InformBody(Strict):
    message: str = Field(pattern=r"\S", description="What to tell the person: not empty, not only spaces.")
    to: str | None = None
    session: str | None = None
    agent: str | None = Field(None, description="Only honoured by a server without auth: else the calling agent.")
    run: str | None = None
    data: dict[str, Any] | None = None


class PersonFigures(BaseModel):
    name: str
    answered: int = Field(description="requests answered or rejected in the window")
    median_seconds: float | None = Field(description="their median time from asked to answered")
    expired: int = Field(description="requests to them that expired in the window")
    pending: int = Field(description="requests waiting for them now")


class AgentFigures(BaseModel):
    agent: str
    by_age: list[int] = Field(description="its requests waiting now, one count for each of `ages`")
    oldest_seconds: float = Field(description="how long its oldest waiting request has waited")


class DashboardModel(BaseModel):
    """The dashboard's figures (`Broker.dashboard`), over the newest 1,000 pending and
    1,000 settled requests (`capped` when there were more)."""

    model_config = ConfigDict(extra="forbid")

    pending: int
    answered: int
    median_seconds: float | None
    expired: int
    ages: list[str] = Field(description="the age columns of `agents[].by_age`")
    agents: list[AgentFigures]
    people: list[PersonFigures]
    teams: list[PersonFigures]
    window_seconds: float
    capped: bool


class EventModel(BaseModel):
    id: int
    type: str
    at: str
    request_id: str | None
    request: RequestModel | None
    data: dict[str, Any]


class EventPage(BaseModel):
    """A page of events: pass `last_event_id` as `after` for the next one. A page holds
    `limit` events, or fewer where the requests they carry (each event its own) pass 8 MiB
    of stored JSON (`interlock.store.PAGE_BYTES`); then `cut` is true and more events
    follow `last_event_id` already."""

    events: list[EventModel]
    last_event_id: int
    cut: bool = Field(default=False, description="the page ended short of `limit` by size: read on at once")


def _codes_text() -> str:
    rows = [f"`{row.code}` ({row.status}): {row.meaning}" for row in WIRE_ERRORS]
    return "A stable machine code, one of the wire table's:\n\n" + "\n".join(f"- {row}" for row in rows)


class WhoamiModel(BaseModel):
    """Who the token names: a person (`human`), an agent (with its `owner`), or `admin` on a
    server without auth."""

    name: str
    kind: Literal["human", "agent", "admin"]
    owner: str | None = Field(description="An agent's owner; null for anyone else.")


class Problem(BaseModel):
    """An error, as RFC 9457 problem details with a stable machine `code`."""

    type: str = "about:blank"
    title: str
    status: int
    code: str = Field(description=_codes_text(), json_schema_extra={"enum": [row.code for row in WIRE_ERRORS]})
    detail: str
    ask_id: str | None = Field(None, description="`invalid_answer`: the ask the answer does not fit")
    current_status: str | None = Field(
        None, description="`already_settled`, `run_conflict` and `pending`: the request's or the run's status"
    )
    request_id: str | None = Field(None, description="`idempotency_key_reused`: the request first made with the key")
    run_id: str | None = Field(None, description="`run_conflict`: the run")
    retry_after: int | None = Field(
        None, description="`rate_limited` and `unavailable`: the seconds `Retry-After` says"
    )
