"""Turn an HTTP answer body into an answer for the broker.

Besides the native forms (`answers` by ask id, or a bare `answer` for a request with one
ask), the API takes the Novo-compatible body: `inputResponses: [{requestId, optionId | optionIds |
text}]`. An approval is answered with the request's own id and `approve` or `deny`; a
question with one entry per ask, addressed by the ask's id. Its rules give 400s: an unknown
question id, an id given twice, several options for a single-select question, and the
request's own id used for a question.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidAnswer
from ..model import Answers, Ask, Choice, Confirm, MultiChoice, Request, Text
from .schemas import AnswerBody, InputResponse

__all__ = ["Decision", "decide"]

_YES = {"approve", "yes", "true", "allow"}
_NO = {"deny", "no", "false", "reject"}


@dataclass(frozen=True, slots=True)
class Decision:
    """What an answer body asks for: answer with `value`, or cancel the request."""

    cancel: bool
    value: Any = None


def decide(request: Request, body: AnswerBody) -> Decision:
    given = [
        name
        for name, present in (
            ("answers", body.answers is not None),
            ("answer", "answer" in body.model_fields_set),
            ("inputResponses", body.input_responses is not None),
            ("cancel", body.cancel),
        )
        if present
    ]
    if len(given) != 1:
        raise InvalidAnswer("give exactly one of answers, answer, inputResponses or cancel: true")
    if body.cancel:
        return Decision(cancel=True)
    if body.answers is not None:
        return Decision(cancel=False, value=Answers(body.answers))
    if body.input_responses is None:
        return Decision(cancel=False, value=body.answer)
    return Decision(cancel=False, value=_from_input_responses(request, body.input_responses))


def _from_input_responses(request: Request, responses: list[InputResponse]) -> Any:
    if request.kind == "approval":
        return _approval(request, responses)
    by_id = {ask.id: ask for ask in request.asks}
    answers: dict[str, Any] = {}
    for item in responses:
        if item.request_id == request.id and item.request_id not in by_id:
            raise InvalidAnswer(
                f"Unknown questionId {item.request_id!r}: that is the request's own id; "
                f"address each question by its id ({', '.join(by_id)})"
            )
        ask = by_id.get(item.request_id)
        if ask is None:
            raise InvalidAnswer(f"Unknown questionId {item.request_id!r}", ask_id=item.request_id)
        if ask.id in answers:
            raise InvalidAnswer(f"questionId {ask.id!r} is given more than once", ask_id=ask.id)
        answers[ask.id] = _value(ask, item)
    return answers


def _approval(request: Request, responses: list[InputResponse]) -> bool:
    if len(request.asks) != 1 or not isinstance(request.asks[0], Confirm):
        raise InvalidAnswer("this approval has several asks: answer them with `answers`")
    if len(responses) != 1:
        raise InvalidAnswer("an approval takes exactly one input response")
    (item,) = responses
    if item.request_id != request.id:
        raise InvalidAnswer(f"Unknown requestId {item.request_id!r}: answer an approval with its own id {request.id!r}")
    choice = (item.option_id or "").lower()
    if item.option_ids is not None or item.text is not None or choice not in _YES | _NO:
        raise InvalidAnswer("answer an approval with optionId 'approve' or 'deny'", ask_id=request.asks[0].id)
    return choice in _YES


def _value(ask: Ask, item: InputResponse) -> Any:
    given = sum(x is not None for x in (item.option_id, item.option_ids, item.text))
    if given != 1:
        raise InvalidAnswer(f"question {ask.id!r}: give one of optionId, optionIds or text", ask_id=ask.id)
    if isinstance(ask, Choice):
        if item.option_ids is not None:
            if len(item.option_ids) != 1:
                raise InvalidAnswer(f"question {ask.id!r} is single-select: choose one option", ask_id=ask.id)
            return item.option_ids[0]
        return item.option_id if item.option_id is not None else item.text
    if isinstance(ask, MultiChoice):
        if item.text is not None:
            raise InvalidAnswer(f"question {ask.id!r}: choose options with optionIds", ask_id=ask.id)
        return item.option_ids if item.option_ids is not None else [item.option_id]
    if isinstance(ask, Confirm):
        word = (item.option_id or item.text or "").lower()
        if word not in _YES | _NO:
            raise InvalidAnswer(f"question {ask.id!r}: answer with optionId 'yes' or 'no'", ask_id=ask.id)
        return word in _YES
    if item.text is None:
        raise InvalidAnswer(f"question {ask.id!r} takes text, not options", ask_id=ask.id)
    if isinstance(ask, Text):
        return item.text
    try:
        return json.loads(item.text)
    except json.JSONDecodeError:
        raise InvalidAnswer(f"question {ask.id!r}: give the form as a JSON object in text", ask_id=ask.id) from None
