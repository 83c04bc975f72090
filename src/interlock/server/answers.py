"""Turn an HTTP answer body into an answer for the broker.

Besides the native forms (`answers` by ask id, or a bare `answer` for a request with one
ask), the API takes the Novo-compatible body: `inputResponses: [{requestId, optionId | optionIds |
text}]`. An approval is answered with the request's own id and `approve` or `deny` (a gate's
optional "edit the arguments" form left out: the call runs with the arguments reviewed); a
question with one entry per ask, addressed by the ask's id. Its rules give 400s: an unknown
question id, an id given twice, several options for a single-select question, and the
request's own id used for a question.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..approvals import decision_ask
from ..errors import InvalidAnswer, InvalidRequest
from ..model import Answers, Ask, Confirm, Request, yes_no
from .schemas import AnswerBody, InputResponse

__all__ = ["Decision", "decide"]


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
        # The body's shape, not the answer's fit: 422, as any other body that does not fit.
        raise InvalidRequest("give exactly one of answers, answer, inputResponses or cancel: true")
    if body.cancel:
        return Decision(cancel=True)
    if body.answers is not None:
        return Decision(cancel=False, value=Answers(body.answers))
    if body.input_responses is None:
        return Decision(cancel=False, value=body.answer)
    return Decision(cancel=False, value=_from_input_responses(request, body.input_responses))


def _from_input_responses(request: Request, responses: list[InputResponse]) -> Any:
    decision = decision_ask(request)
    if decision is not None:  # an approval decided by a yes/no; any other is answered as questions are
        return _approval(request, decision, responses)
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
            raise InvalidAnswer(f"requestId {ask.id!r} appears more than once", ask_id=ask.id)
        answers[ask.id] = _value(ask, item)
    return answers


_YES_OR_NO = "answer an approval with optionId 'approve' or 'deny' (or another yes or no word: 'yes', 'no')"


def _approval(request: Request, decision: Confirm, responses: list[InputResponse]) -> Answers:
    if len(responses) != 1:
        raise InvalidAnswer("an approval takes exactly one input response")
    (item,) = responses
    if item.request_id != request.id:
        raise InvalidAnswer(f"Unknown requestId {item.request_id!r}: answer an approval with its own id {request.id!r}")
    if item.option_ids is not None or item.text is not None or item.option_id is None:
        raise InvalidAnswer(_YES_OR_NO, ask_id=decision.id)
    verdict = yes_no(item.option_id)
    if verdict is None:
        raise InvalidAnswer(_YES_OR_NO, ask_id=decision.id)
    return Answers({decision.id: verdict})


def _value(ask: Ask, item: InputResponse) -> Any:
    given = sum(x is not None for x in (item.option_id, item.option_ids, item.text))
    if given != 1:
        raise InvalidAnswer(f"question {ask.id!r}: give one of optionId, optionIds or text", ask_id=ask.id)
    return ask.from_input(item.option_id, item.option_ids, item.text)
