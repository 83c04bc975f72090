"""Each shape is defined once and the others are derived from it."""

from __future__ import annotations

import dataclasses

import pytest

import interlock
from interlock import Ask, Choice, Confirm, Form, MultiChoice, Option, Origin, Text, ToolCall
from interlock.model import ask_from_dict
from interlock.server.schemas import ChoiceAsk, ConfirmAsk, FormAsk, MultiChoiceAsk, OriginModel, TextAsk

pytestmark = pytest.mark.anyio


def test_the_api_origin_takes_exactly_the_fields_of_origin() -> None:
    assert list(OriginModel.model_fields) == [f.name for f in dataclasses.fields(Origin)]
    body = {f.name: None for f in dataclasses.fields(Origin)}
    assert OriginModel.model_validate(body).model_dump() == body


async def test_create_takes_every_origin_field_one_by_one() -> None:
    given = {
        f.name: (["root", "child"] if f.name == "delegation" else {"a": 1} if f.name == "arguments" else f.name)
        for f in dataclasses.fields(Origin)
    }
    async with interlock.connect("memory://") as broker:
        request = await broker.create_detached(Confirm("Deploy?"), **given)  # type: ignore[arg-type]
    assert request.origin == Origin(**{**given, "delegation": ("root", "child")})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "data",
    [
        {"type": "text", "id": "t", "prompt": "Why?", "required": True, "multiline": True, "max_length": 9},
        {"type": "confirm", "id": "c", "prompt": "Go?", "required": False},
        {
            "type": "choice",
            "id": "ch",
            "prompt": "Which?",
            "required": True,
            "options": [{"id": "a", "label": "A", "description": "first"}],
            "allow_other": True,
        },
        {
            "type": "multi_choice",
            "id": "m",
            "prompt": "Which?",
            "required": True,
            "options": [{"id": "a", "label": "a", "description": ""}],
            "min": 1,
            "max": None,
        },
        {"type": "form", "id": "f", "prompt": "Fill", "required": True, "schema": {"type": "object"}},
    ],
)
def test_each_ask_kind_reads_back_its_own_json_shape(data: dict[str, object]) -> None:
    assert ask_from_dict(data).to_dict() == data


class _Posted:
    def __init__(self, **fields: list[str]) -> None:
        self._fields = fields

    def get(self, name: str, default: str = "") -> str:
        return self._fields.get(name, [default])[-1]

    def all(self, name: str) -> list[str]:
        return list(self._fields.get(name, []))

    def has(self, name: str) -> bool:
        return name in self._fields


@pytest.mark.parametrize(("word", "verdict"), [("Allow", True), ("ok", True), ("reject", False), ("N", False)])
def test_a_confirm_reads_a_yes_no_word_alike_from_every_surface(word: str, verdict: bool) -> None:
    ask = Confirm("Deploy?")
    assert ask.from_words([word]) is verdict  # the CLI
    assert ask.from_input(word, None, None) is verdict  # the API's inputResponses
    assert ask.from_fields(_Posted(a0=[word]), "a0") is verdict  # the web inbox
    assert ask.from_line(word) is verdict  # the terminal
    assert ask.from_decision(word) is verdict  # an auto-resolve decision


def test_a_choice_takes_a_number_an_id_or_a_label_from_the_terminal() -> None:
    ask = Choice("Region?", [Option("eu", "Europe"), Option("us", "United States")])
    assert [ask.from_line(t) for t in ("2", "eu", "europe", "mars")] == ["us", "eu", "eu", "mars"]
    lines, prompt = ask.terminal_prompt("")
    assert prompt.endswith("> ")
    assert lines == ["Region?", "  1) Europe", "  2) United States"]
    assert ask.answer_text("us") == "United States"
    assert ask.answer_text("mars") == "Other: mars"


@pytest.mark.parametrize("cls", [Text, Confirm, Choice, MultiChoice, Form])
def test_the_api_ask_models_take_exactly_the_fields_of_each_ask_type(cls: type[Ask]) -> None:
    model = {
        "text": TextAsk,
        "confirm": ConfirmAsk,
        "choice": ChoiceAsk,
        "multi_choice": MultiChoiceAsk,
        "form": FormAsk,
    }[cls.type]
    taken = {info.alias or name for name, info in model.model_fields.items()}
    assert taken == {"type"} | {f.name for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")}


def test_a_tool_call_passes_every_field_it_shares_with_origin_to_its_request() -> None:
    shared = [
        f.name
        for f in dataclasses.fields(ToolCall)
        if f.name in Origin.__dataclass_fields__ and f.name not in ("arguments", "delegation")
    ]
    assert {"session", "channel", "agent", "actor", "run"} <= set(shared)
    call = ToolCall("deploy", {"env": "prod"}, **{name: name for name in shared})
    origin = call.origin()
    assert [getattr(origin, name) for name in shared] == shared
    assert (origin.tool_name, origin.tool_call_id, origin.arguments) == ("deploy", call.id, {"env": "prod"})
