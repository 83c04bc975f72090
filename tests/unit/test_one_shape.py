"""Each shape is defined once and the others are derived from it."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from typing import Unpack, get_origin, get_type_hints

import pytest

import interlock
from interlock import Ask, Choice, Confirm, Form, InvalidAnswer, MultiChoice, Option, Origin, Text, ToolCall
from interlock.broker import Broker, LocalBroker
from interlock.mcp.jobs import ASK_TYPES, ask_view
from interlock.mcp.server import AskIn, GrantRef, OptionIn
from interlock.model import Grant, ask_from_dict
from interlock.remote import RemoteBroker, _query_params
from interlock.server.schemas import (
    ChoiceAsk,
    ConfirmAsk,
    FormAsk,
    ListParams,
    MultiChoiceAsk,
    OriginModel,
    TextAsk,
    list_filters,
)
from interlock.store import ListFilters, PendingFilters, Query

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
        await broker.start_run("agent", run_id="run")  # a request's run is one started here
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


def test_a_choice_s_leave_unanswered_value_is_no_option_s_and_reads_as_no_answer() -> None:
    ask = Choice("Region?", ["eu", "-", "--"], allow_other=True, required=False)
    none = ask.unanswered_value()
    assert none == "---"  # never an option's id, nor the Other radio's empty string
    assert ask.from_fields(_Posted(a0=[none], **{"a0.other": ["typed, then left"]}), "a0") is None
    assert ask.from_fields(_Posted(a0=["-"]), "a0") == "-"
    assert ask.from_fields(_Posted(a0=[""], **{"a0.other": ["mars"]}), "a0") == "mars"


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


def test_the_mcp_ask_arguments_take_the_fields_of_the_ask_types_a_client_sends() -> None:
    kinds = {cls.type: cls for cls in (Text, Confirm, Choice, MultiChoice, Form)}
    assert set(ASK_TYPES.values()) == set(kinds)  # a client sends every ask kind
    sent = {f.name for kind in ASK_TYPES.values() for f in dataclasses.fields(kinds[kind]) if f.init}
    taken = {info.alias or name for name, info in AskIn.model_fields.items()}
    assert taken == {"type"} | sent - {"allow_other"}  # one's own text: not over MCP
    assert set(OptionIn.model_fields) == {f.name for f in dataclasses.fields(Option)}
    assert {info.alias or name for name, info in GrantRef.model_fields.items()} == {"with", "can"}
    assert [f.name for f in dataclasses.fields(Grant)] == ["with_", "can", "exp"]  # a check names no expiry


@pytest.mark.parametrize(
    "ask",
    [
        Text("Why?", id="t", multiline=True, max_length=9),
        Confirm("Go?", id="c", grants=[{"with": "repo", "can": "push"}]),
        Choice("Which?", [Option("a", "A", "first"), "b"], id="ch", allow_other=True),
        MultiChoice("Which?", ["a", "b"], id="m", min=1),
        Form("Fill", {"type": "object"}, id="f"),
    ],
    ids=lambda ask: ask.type,
)
def test_an_mcp_client_reads_each_ask_in_its_kinds_own_shape_under_the_type_name_it_sends(ask: Ask) -> None:
    view = ask_view(ask)
    names = {kind: name for name, kind in ASK_TYPES.items()}
    shape = ask.to_dict() | {"type": names[ask.type]}
    if "options" in shape:  # an option without a description reads without one
        shape["options"] = [{k: v for k, v in o.items() if k != "description" or v} for o in shape["options"]]
    assert {k: v for k, v in view.items() if k != "answer_with"} == shape
    assert view["answer_with"]


def test_the_list_filters_a_type_checker_reads_are_exactly_the_fields_of_query() -> None:
    assert list(get_type_hints(ListFilters)) == [f.name for f in dataclasses.fields(Query) if f.init]
    for f in dataclasses.fields(Query):
        assert not f.init or f.name in (ListFilters.__doc__ or ""), f"{f.name} is not described"


def test_ask_takes_exactly_creates_fields_and_pending_lists_filters_for_a_type_checker() -> None:
    # A keyword typed `Any` let a type checker pass `ask(..., timout=5)` or `pending(to=...)`,
    # which fail only when run.
    fields = get_type_hints(Broker.create, include_extras=True)["fields"]
    for ask in (Broker.ask, RemoteBroker.ask):
        assert get_type_hints(ask, include_extras=True)["fields"] == fields
    assert get_type_hints(Broker.pending, include_extras=True)["filters"] == Unpack[PendingFilters]
    page = {"status", "settled", "after", "limit", "order"}  # what `pending` sets itself
    assert list(get_type_hints(PendingFilters)) == [name for name in get_type_hints(ListFilters) if name not in page]


def test_events_is_typed_as_the_async_generator_it_is() -> None:
    # `contextlib.aclosing(broker.events(...))`, to close a follow left early, needs an
    # `aclose`: a type checker refused it on a bare AsyncIterator.
    for cls in (Broker, LocalBroker, RemoteBroker):
        assert get_origin(get_type_hints(cls.events)["return"]) is AsyncGenerator, cls


def test_the_apis_list_parameters_are_the_filters_of_query_by_their_wire_names() -> None:
    wire = [
        f.metadata["wire"] or f.name for f in dataclasses.fields(Query) if f.init and f.metadata["wire"] is not None
    ]
    assert list(ListParams.model_fields) == wire
    assert "cursor" in wire and "after" not in wire and "teams" not in wire  # a member's teams are the server's
    params = ListParams.model_validate({"status": "pending", "cursor": "r1", "limit": 10, "settled": True})
    assert list_filters(params) | {"teams": ()} == {f.name: f.default for f in dataclasses.fields(Query) if f.init} | {
        "status": "pending",
        "after": "r1",
        "limit": 10,
        "settled": True,
    }


def test_a_remote_list_sends_each_filter_given_as_the_api_reads_it() -> None:
    query = Query(status="answered", after="r1", settled=True, since=datetime(2026, 1, 2, tzinfo=UTC), teams=("ops",))
    sent = _query_params(query)
    assert sent == {
        "status": "answered",
        "cursor": "r1",
        "limit": 50,
        "order": "desc",
        "settled": "true",
        "since": "2026-01-02T00:00:00+00:00",
    }
    read = list_filters(ListParams.model_validate(sent))
    assert (read["status"], read["after"], read["settled"], read["since"]) == ("answered", "r1", True, sent["since"])


async def test_a_list_refuses_a_filter_it_does_not_have() -> None:
    async with interlock.connect("memory://") as broker:
        with pytest.raises(TypeError, match="reciptient"):
            await broker.list(reciptient="alice")


def test_a_confirm_refuses_another_word_alike_from_every_surface() -> None:
    ask = Confirm("Deploy?", id="go")
    said = []
    for read in (
        lambda: ask.from_words(["maybe"]),  # the CLI
        lambda: ask.from_input("maybe", None, None),  # the API's inputResponses
        lambda: ask.check(ask.from_fields(_Posted(a0=["maybe"]), "a0")),  # the web inbox, checked on answering
        lambda: ask.check("maybe"),  # the API's own answer, Python, MCP
    ):
        with pytest.raises(InvalidAnswer) as refused:
            read()
        said.append(str(refused.value))
    assert said == ["ask 'go': answer yes or no (or approve or deny), not 'maybe'"] * 4
    assert ask.from_fields(_Posted(a0=["  "]), "a0") is None  # left blank: the broker says it is required
