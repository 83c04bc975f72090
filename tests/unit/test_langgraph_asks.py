"""How a LangGraph interrupt's payload becomes asks, and what a settled request resumes it with."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from interlock import Choice, Confirm, Form, MultiChoice, Response, Status, Text
from interlock.errors import InvalidRequest
from interlock.integrations.langgraph import QUESTION, asks_for, resume_value
from interlock.model import build_request


def only(value: Any, schema: dict[str, Any] | None = None) -> Any:
    asks, _, _ = asks_for(value, schema)
    assert len(asks) == 1
    return asks[0]


def test_a_string_payload_is_a_free_text_question_with_that_prompt() -> None:
    ask = only("Anything to add?")
    assert isinstance(ask, Text) and ask.prompt == "Anything to add?"


def test_a_payload_with_an_ask_type_is_that_ask() -> None:
    ask = only({"type": "multi_choice", "prompt": "Which envs?", "options": ["dev", "prod"], "id": "envs"})
    assert isinstance(ask, MultiChoice) and ask.id == "envs" and [o.id for o in ask.options] == ["dev", "prod"]


def test_a_question_with_options_is_a_choice_or_with_multiple_a_multi_choice() -> None:
    assert isinstance(only({"question": "Region?", "options": ["eu", "us"]}), Choice)
    assert isinstance(only({"question": "Regions?", "options": ["eu", "us"], "multiple": True}), MultiChoice)
    assert isinstance(only({"question": "Ship it?", "confirm": True}), Confirm)


def test_the_rest_of_a_question_payload_is_shown_in_the_details() -> None:
    asks, _, details = asks_for({"question": "Is this summary right?", "summary": "3 bugs fixed"})
    assert isinstance(asks[0], Text) and asks[0].prompt == "Is this summary right?"
    assert "3 bugs fixed" in details


def test_langgraphs_response_schema_chooses_the_ask() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    assert isinstance(only("How many?", schema), Form)
    assert isinstance(only("Proceed?", {"type": "boolean"}), Confirm)
    assert isinstance(only("Which?", {"type": "string", "enum": ["a", "b"]}), Choice)
    assert isinstance(only("Which ones?", {"type": "array", "items": {"enum": ["a", "b"]}}), MultiChoice)
    assert isinstance(only("Say something", {"type": "string"}), Text)


def test_any_other_payload_is_free_text_with_the_payload_as_json() -> None:
    asks, _, details = asks_for({"llm_output": "draft", "step": 3})
    assert isinstance(asks[0], Text)
    assert '"llm_output": "draft"' in details and '"step": 3' in details
    asks, _, details = asks_for("x" * 5000)
    assert len(asks[0].prompt) < 100 and details == "x" * 5000


def test_the_payload_of_ask_keeps_every_ask_with_its_id() -> None:
    payload = {
        "kind": QUESTION,
        "asks": [Confirm("Ok?", id="ok").to_dict(), Text("Why?", id="why").to_dict()],
        "title": "Release",
        "details": "",
    }
    asks, title, _ = asks_for(payload)
    assert [a.id for a in asks] == ["ok", "why"] and title == "Release"


def test_a_malformed_ask_payload_is_refused_clearly() -> None:
    with pytest.raises(InvalidRequest, match="unknown field"):
        asks_for({"type": "choice", "prompt": "x", "options": ["a"], "colour": "red"})
    with pytest.raises(InvalidRequest, match="list of asks"):
        asks_for({"kind": QUESTION, "asks": []})


def test_the_resume_value_is_the_answer_or_the_rejection_with_its_reason() -> None:
    one = build_request(Choice("Region?", ["eu", "us"]))
    answered = one.settle(Status.ANSWERED, Response(datetime.now(UTC), {"choice": "eu"}))
    assert resume_value(answered) == "eu"
    two = build_request([Confirm("Ok?", id="ok"), Text("Why?", id="why")])
    both = two.settle(Status.ANSWERED, Response(datetime.now(UTC), {"ok": True, "why": "tested"}))
    assert resume_value(both) == {"ok": True, "why": "tested"}
    rejected = one.settle(Status.REJECTED, Response(datetime.now(UTC), reason="not now"))
    assert resume_value(rejected) == {"rejected": True, "reason": "not now"}
    expired = one.settle(Status.EXPIRED, Response(datetime.now(UTC)))
    assert resume_value(expired) == {"rejected": True, "reason": "Nobody answered: the question expired."}
    with pytest.raises(InvalidRequest, match="pending"):
        resume_value(one)
