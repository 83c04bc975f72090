"""The shapes of the HTTP API, for validation and for the OpenAPI document.

They mirror the JSON shape of `interlock.model` (`request_to_dict`), which is what the
handlers send, so the published schema is the one on the wire.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

from ..model import Origin

__all__ = [
    "AnswerBody",
    "AskModel",
    "BatchAnswerBody",
    "BatchResult",
    "CancelBody",
    "CloseBody",
    "ConsumeBody",
    "ConsumeResult",
    "CreateBody",
    "EventModel",
    "EventPage",
    "InformBody",
    "InputResponse",
    "OriginModel",
    "Problem",
    "RejectBody",
    "ReopenBody",
    "Reopened",
    "RequestModel",
    "RequestPage",
]


class _Strict(BaseModel):
    # Strict types as well as no unknown fields: a body is taken as the schema says, with
    # no coercion (`0` is not a boolean, `5` not a string), so what the document refuses
    # the server refuses too.
    model_config = ConfigDict(extra="forbid", strict=True)


class OptionModel(_Strict):
    id: str
    label: str = ""
    description: str = ""


class TextAsk(_Strict):
    type: Literal["text"]
    id: str = "text"
    prompt: str
    required: bool = True
    multiline: bool = False
    max_length: int | None = None


class ConfirmAsk(_Strict):
    type: Literal["confirm"]
    id: str = "confirm"
    prompt: str
    required: bool = True


class ChoiceAsk(_Strict):
    type: Literal["choice"]
    id: str = "choice"
    prompt: str
    required: bool = True
    options: list[OptionModel | str]
    allow_other: bool = False


class MultiChoiceAsk(_Strict):
    type: Literal["multi_choice"]
    id: str = "multi_choice"
    prompt: str
    required: bool = True
    options: list[OptionModel | str]
    min: int = 0
    max: int | None = None


class FormAsk(_Strict):
    type: Literal["form"]
    id: str = "form"
    prompt: str
    required: bool = True
    schema_: dict[str, Any] = Field(alias="schema", description="A JSON Schema of type object (draft 2020-12).")
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


AskModel = Annotated[TextAsk | ConfirmAsk | ChoiceAsk | MultiChoiceAsk | FormAsk, Field(discriminator="type")]


_WIRE_TYPES: dict[Any, Any] = {
    Mapping[str, Any] | None: dict[str, Any] | None,
    tuple[str, ...] | None: list[str] | None,
}
"""The JSON types of `Origin`'s fields whose Python types are not JSON's."""

if TYPE_CHECKING:

    class OriginModel(_Strict):
        """`Origin`'s fields, each optional."""

else:
    # Derived from the `Origin` dataclass, so the API takes exactly its fields.
    OriginModel = create_model(
        "OriginModel",
        __base__=_Strict,
        **{name: (_WIRE_TYPES.get(hint, hint), None) for name, hint in get_type_hints(Origin).items()},
    )


class CreateBody(_Strict):
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
    timeout: float | None = Field(None, gt=0, description="Seconds until the request expires.")
    idempotency_key: str | None = None
    origin: OriginModel = Field(default_factory=OriginModel)
    requester: str | None = Field(None, description="Only honoured by a server without auth.")


class ResponseModel(BaseModel):
    answers: dict[str, Any]
    by: str | None
    via: str | None
    reason: str
    cause: str | None
    at: str


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
    expires_at: str | None
    idempotency_key: str | None
    response: ResponseModel | None


class RequestPage(BaseModel):
    items: list[RequestModel]
    next_cursor: str | None


class InputResponse(_Strict):
    """Seed 001's answer to one prompt: an option, several options, or text."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    request_id: str = Field(alias="requestId")
    option_id: str | None = Field(None, alias="optionId")
    option_ids: list[str] | None = Field(None, alias="optionIds")
    text: str | None = None


class AnswerBody(_Strict):
    """Answer natively (`answers` by ask id, or `answer` for a request with one ask), or
    with seed 001's body (`inputResponses`, `reason`, `cancel`). The server records the
    surface (`via`: "api") itself; `cancel` is the requester's, as on `/cancel`."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    answers: dict[str, Any] | None = None
    answer: Any = None
    input_responses: list[InputResponse] | None = Field(None, alias="inputResponses")
    cancel: bool = False
    reason: str = Field("", description="Kept with the answer and echoed back verbatim.")
    by: str | None = Field(None, description="Who answers; only honoured by a server without auth.")


class BatchItem(AnswerBody):
    id: str


class BatchAnswerBody(_Strict):
    items: list[BatchItem] = Field(min_length=1, max_length=500)


class BatchResult(BaseModel):
    id: str
    ok: bool
    status: str | None = None
    error: dict[str, Any] | None = None


class RejectBody(_Strict):
    reason: str = ""


class CancelBody(_Strict):
    reason: str = ""
    cause: Literal["cancelled", "released", "withdrawn", "closed"] = "cancelled"


class CloseBody(_Strict):
    channel: str | None = Field(None, description="The channel to close; none to withdraw pending requests only.")


class ReopenBody(_Strict):
    channel: str


class Reopened(BaseModel):
    channel: str
    reopened: bool = Field(description="Whether the channel was closed.")


class ConsumeBody(_Strict):
    by: str | None = Field(None, description="Only honoured by a server without auth; else you.")


class ConsumeResult(BaseModel):
    id: str
    consumed: bool = Field(description="True for the one call that consumed the answered request.")


class InformBody(_Strict):
    message: str = Field(pattern=r"\S", description="What to tell the person: not empty, not only spaces.")
    to: str | None = None
    session: str | None = None
    agent: str | None = Field(None, description="Only honoured by a server without auth: else the calling agent.")
    run: str | None = None
    data: dict[str, Any] | None = None


class EventModel(BaseModel):
    id: int
    type: str
    at: str
    request_id: str | None
    request: RequestModel | None
    data: dict[str, Any]


class EventPage(BaseModel):
    events: list[EventModel]
    last_event_id: int


class Problem(BaseModel):
    """An error, as RFC 9457 problem details with a stable machine `code`."""

    type: str = "about:blank"
    title: str
    status: int
    code: str
    detail: str
    ask_id: str | None = None
    current_status: str | None = None
