"""Human-input tools: what is served, how arguments become asks, what the model reads back."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from jsonschema import Draft202012Validator

from interlock import Broker, Choice, Confirm, Form, MultiChoice, Status, Text
from interlock.agent import (
    HumanInputTools,
    ToolCall,
    ToolDefinition,
    ToolResult,
    ToolRunner,
    ask_user_tool,
    compose,
    request_human_input_tool,
)

from .support import Inbox, bounded

pytestmark = pytest.mark.anyio


@pytest.fixture
def tools(broker: Broker) -> HumanInputTools:
    return HumanInputTools(
        broker, {"ask_user", "request_human_input"}, definitions=[ask_user_tool(), request_human_input_tool()]
    )


async def answer_next(inbox: Inbox, answer: object, *, comment: str = "") -> None:
    request = await inbox.next()
    assert await inbox.broker.resolve(request.id, answer, by="alice", comment=comment)


# -- what the model reads ------------------------------------------------------------------


async def test_the_answer_comes_back_as_the_tool_result(tools: HumanInputTools, inbox: Inbox) -> None:
    call = ToolCall("ask_user", {"question": "Which colour?"}, "call-1")
    task = asyncio.create_task(tools(call))
    await answer_next(inbox, "blue")
    result = await bounded(task)
    assert result == ToolResult("blue")
    assert (result.is_error, result.refused, result.status) == (False, False, "completed")


async def test_each_request_carries_the_origin_of_its_call(tools: HumanInputTools, inbox: Inbox) -> None:
    call = ToolCall(
        "ask_user",
        {"question": "Which colour?"},
        "call-7",
        session="room-1",
        channel="web",
        agent="painter",
        actor="bob",
        to="alice",
        run="run-3",
    )
    await inbox.broker.start_run("painter", run_id="run-3")
    task = asyncio.create_task(tools(call))
    request = await inbox.next()
    origin = request.origin
    assert (origin.session, origin.channel, origin.agent, origin.actor) == ("room-1", "web", "painter", "bob")
    assert (origin.tool_call_id, origin.tool_name, origin.run) == ("call-7", "ask_user", "run-3")
    assert origin.arguments == {"question": "Which colour?"}
    assert (request.to, request.requester, request.kind) == ("alice", "painter", "question")
    await inbox.broker.resolve(request.id, "red")
    await bounded(task)


async def test_a_timeout_fails_the_call_with_the_tool_name_and_bound_and_is_not_a_refusal(broker: Broker) -> None:
    tools = HumanInputTools(broker, ["AskUserQuestion"], timeout=0.05)
    result = await bounded(tools(ToolCall("AskUserQuestion", {"question": "Still there?"})))
    assert result.content == '{"error": "Human input timed out after 0.05s for tool \'AskUserQuestion\'"}'
    assert json.loads(result.content) == {"error": "Human input timed out after 0.05s for tool 'AskUserQuestion'"}
    assert (result.is_error, result.refused, result.status) == (True, False, "failed")


async def test_a_whole_number_timeout_reads_without_decimals(broker: Broker) -> None:
    tools = HumanInputTools(broker, ["ask_user"], timeout=300)
    call = ToolCall("ask_user", {"question": "Still there?"})
    task = asyncio.create_task(tools(call))
    request = await Inbox(broker).next()
    await broker.expire(request.id)
    result = await bounded(task)
    assert json.loads(result.content)["error"] == "Human input timed out after 300s for tool 'ask_user'"


async def test_a_rejection_refuses_the_call_with_the_reason(tools: HumanInputTools, inbox: Inbox) -> None:
    task = asyncio.create_task(tools(ToolCall("ask_user", {"question": "Your salary?"})))
    request = await inbox.next()
    await inbox.broker.reject(request.id, "I'd rather not say", by="alice")
    result = await bounded(task)
    assert (result.refused, result.is_error, result.status) == (True, True, "refused")
    assert result.content == "I'd rather not say"
    assert result.reason == "I'd rather not say"


@pytest.mark.parametrize("how", ["closed", "released", "cancelled"])
async def test_a_request_given_up_fails_the_call_without_the_errors_message(
    broker: Broker, inbox: Inbox, how: str
) -> None:
    tools = HumanInputTools(broker, ["ask_user"])
    task = asyncio.create_task(tools(ToolCall("ask_user", {"question": "Proceed?"}, channel="chat")))
    request = await inbox.next()
    if how == "closed":
        await broker.close(channel="chat")
    elif how == "released":
        assert await broker.release(request.id)
    else:
        assert await broker.cancel(request.id, "secret internal reason")
    result = await bounded(task)
    assert (result.is_error, result.refused, result.status) == (True, False, "failed")
    assert json.loads(result.content) == {"error": "Tool 'ask_user' failed"}
    for private in ("secret", "closed", "released", "chat"):
        assert private not in result.content
    assert result.detail  # what failed is kept for logs and observers


async def test_asking_in_a_closed_channel_fails_the_call_plainly(broker: Broker) -> None:
    await broker.close(channel="chat")
    tools = HumanInputTools(broker, ["ask_user"])
    result = await bounded(tools(ToolCall("ask_user", {"question": "Proceed?"}, channel="chat")))
    assert json.loads(result.content) == {"error": "Tool 'ask_user' failed"}


# -- serving and composing -----------------------------------------------------------------


async def test_other_tool_names_fall_through_so_handlers_compose(tools: HumanInputTools, inbox: Inbox) -> None:
    assert await bounded(tools(ToolCall("search", {"q": "x"}))) is None

    async def search(call: ToolCall) -> ToolResult | None:
        return ToolResult("3 hits") if call.name == "search" else None

    both = compose(search, tools)
    assert await bounded(both(ToolCall("search", {"q": "x"}))) == ToolResult("3 hits")
    assert await bounded(both(ToolCall("unknown"))) is None
    task = asyncio.create_task(both(ToolCall("ask_user", {"question": "Which?"})))
    await answer_next(inbox, "that one")
    assert (await bounded(task)) == ToolResult("that one")


def test_construction_refuses_an_empty_name_set(unopened: Broker) -> None:
    with pytest.raises(ValueError, match="at least one"):
        HumanInputTools(unopened, set())
    with pytest.raises(TypeError):
        HumanInputTools(unopened, "ask_user")


def test_construction_refuses_a_definition_it_does_not_serve(unopened: Broker) -> None:
    with pytest.raises(ValueError, match="'request_human_input' is not served"):
        HumanInputTools(unopened, {"ask_user"}, definitions=[ask_user_tool(), request_human_input_tool()])


def test_a_served_tool_the_agent_never_offers_is_warned_about_once_per_name(
    unopened: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    tools = HumanInputTools(unopened, {"ask_user", "AskUserQuestion", "confirm"}, definitions=[ask_user_tool()])
    with caplog.at_level(logging.WARNING, logger="interlock"):
        assert tools.check_offered(["ask_user", "search"]) == {"AskUserQuestion", "confirm"}
        assert tools.check_offered([ask_user_tool()]) == {"AskUserQuestion", "confirm"}
        assert tools.check_offered([]) == {"ask_user", "AskUserQuestion", "confirm"}
    warned = [r.getMessage().split("'")[1] for r in caplog.records if r.levelno == logging.WARNING]
    assert sorted(warned) == ["AskUserQuestion", "ask_user", "confirm"]  # each name once


def test_a_runner_offers_the_handlers_definitions(unopened: Broker, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="interlock"):
        complete = HumanInputTools(unopened, {"ask_user"}, definitions=[ask_user_tool()])
        runner = ToolRunner(unopened, [complete], definitions=[ToolDefinition("search")])
        assert [d.name for d in runner.definitions] == ["ask_user", "search"]
    assert not caplog.records


# -- the ready definitions -----------------------------------------------------------------


def test_the_ready_definitions_are_valid_json_schema_with_the_typed_tools_arguments() -> None:
    rhi = request_human_input_tool(max_question_length=500)
    Draft202012Validator.check_schema(rhi.parameters)
    properties = rhi.parameters["properties"]
    assert set(properties) == {"question", "question_type", "choices", "context_data", "timeout"}
    assert properties["question_type"]["enum"] == ["CONFIRM", "FREE_FORM", "MULTIPLE_CHOICE", "MULTI_SELECT", "FORM"]
    assert properties["question"]["maxLength"] == 500
    assert rhi.to_dict()["name"] == "request_human_input"
    Draft202012Validator.check_schema(ask_user_tool().parameters)
    assert ask_user_tool("AskUserQuestion").name == "AskUserQuestion"


@pytest.mark.parametrize(
    ("arguments", "ask_type", "answer", "choice"),
    [
        ({"question": "Ship it?", "question_type": "CONFIRM"}, Confirm, True, True),
        ({"question": "Any notes?", "question_type": "FREE_FORM"}, Text, "watch p99", "watch p99"),
        ({"question": "Notes?"}, Text, "none", "none"),
        (
            {"question": "Region?", "question_type": "MULTIPLE_CHOICE", "choices": ["eu", "us"]},
            Choice,
            "us",
            "us",
        ),
        (
            {"question": "Region?", "question_type": "MULTIPLE_CHOICE", "choices": ["eu", "us"]},
            Choice,
            "asia, if possible",
            "asia, if possible",
        ),
        (
            {"question": "Checks?", "question_type": "MULTI_SELECT", "choices": ["lint", "tests", "docs"]},
            MultiChoice,
            ["lint", "docs"],
            ["lint", "docs"],
        ),
        (
            {"question": "Contact?", "question_type": "FORM", "choices": ["name", "email"]},
            Form,
            {"name": "Ada", "email": "ada@example.com"},
            {"name": "Ada", "email": "ada@example.com"},
        ),
    ],
)
async def test_request_human_input_maps_each_question_type_onto_an_ask(
    tools: HumanInputTools, inbox: Inbox, arguments: dict[str, object], ask_type: type, answer: object, choice: object
) -> None:
    task = asyncio.create_task(tools(ToolCall("request_human_input", arguments)))
    request = await inbox.next()
    (ask,) = request.asks
    assert isinstance(ask, ask_type)
    assert ask.prompt == arguments["question"]
    await inbox.broker.resolve(request.id, answer, comment="keep it short")
    result = await bounded(task)
    assert json.loads(result.content) == {"choice": choice, "steering": "keep it short"}


async def test_request_human_input_shows_context_data_and_takes_a_per_call_timeout(
    tools: HumanInputTools, inbox: Inbox
) -> None:
    arguments = {"question": "Refund?", "question_type": "CONFIRM", "context_data": {"order": "ABC"}, "timeout": 0.05}
    result = await bounded(tools(ToolCall("request_human_input", arguments)))
    request = await inbox.next()
    assert request.context == {"order": "ABC"}
    assert request.expires_at is not None
    assert (request.expires_at - request.created_at).total_seconds() == pytest.approx(0.05)
    assert json.loads(result.content) == {"error": "Human input timed out after 0.05s for tool 'request_human_input'"}
    assert (await inbox.broker.get(request.id)).status is Status.EXPIRED


async def test_a_question_over_the_length_limit_fails_the_call_and_asks_nobody(broker: Broker) -> None:
    tools = HumanInputTools(
        broker, {"request_human_input"}, definitions=[request_human_input_tool(max_question_length=10)]
    )
    result = await bounded(tools(ToolCall("request_human_input", {"question": "x" * 11})))
    assert (result.is_error, result.refused) == (True, False)
    assert "at most 10" in json.loads(result.content)["error"]
    assert (await broker.list()).items == []


async def test_a_question_up_to_the_tools_own_limit_is_asked_whole_under_a_shorter_title(
    broker: Broker, inbox: Inbox
) -> None:
    """The tools offer questions of up to 8,000 characters; a request's title holds 1,000."""
    tools = HumanInputTools(
        broker, {"request_human_input", "ask_user"}, definitions=[request_human_input_tool(), ask_user_tool()]
    )
    question = "Which of these rollout steps should go first? " + "step " * 1500
    for name in ("request_human_input", "ask_user"):
        task = asyncio.create_task(tools(ToolCall(name, {"question": question[:7999]})))
        asked = await inbox.next()
        assert asked.asks[0].prompt == question[:7999]
        assert len(asked.title) == 1000 and asked.title.endswith("\u2026")
        assert question.startswith(asked.title[:-1])
        assert await broker.resolve(asked.id, "the second")
        assert "the second" in (await bounded(task)).content


@pytest.mark.parametrize(
    "arguments",
    [
        {"question": "Region?", "question_type": "MULTIPLE_CHOICE"},
        {"question": "Which?", "question_type": "MULTI_SELECT", "choices": []},
        {"question": "Who?", "question_type": "FORM"},
        {"question": "Hm?", "question_type": "ESSAY"},
        {"question": "   "},
        {"question": "Soon?", "timeout": -1},
        {"question": "Soon?", "context_data": "not an object"},
    ],
)
async def test_arguments_that_make_no_question_fail_the_call_and_ask_nobody(
    tools: HumanInputTools, arguments: dict[str, object]
) -> None:
    result = await bounded(tools(ToolCall("request_human_input", arguments)))
    assert (result.is_error, result.refused) == (True, False)
    assert json.loads(result.content)["error"].startswith("Invalid arguments for tool 'request_human_input'")
    assert (await tools.broker.list()).items == []


async def test_ask_user_options_become_a_choice_or_with_multiple_a_multi_choice(
    tools: HumanInputTools, inbox: Inbox
) -> None:
    task = asyncio.create_task(tools(ToolCall("ask_user", {"question": "Which?", "options": ["a", "b"]})))
    request = await inbox.next()
    assert isinstance(request.asks[0], Choice) and request.asks[0].allow_other
    await inbox.broker.resolve(request.id, "neither")
    assert (await bounded(task)).content == "neither"

    call = ToolCall("ask_user", {"question": "Which?", "options": ["a", "b", "c"], "multiple": True})
    task = asyncio.create_task(tools(call))
    request = await inbox.next()
    assert isinstance(request.asks[0], MultiChoice)
    await inbox.broker.resolve(request.id, ["a", "c"])
    assert json.loads((await bounded(task)).content) == ["a", "c"]


async def test_a_served_name_without_a_definition_takes_ask_user_arguments(broker: Broker, inbox: Inbox) -> None:
    tools = HumanInputTools(broker, {"AskUserQuestion"})
    task = asyncio.create_task(tools(ToolCall("AskUserQuestion", {"question": "Colour?"})))
    await answer_next(inbox, '{"answer": "blue"}')
    assert (await bounded(task)).content == '{"answer": "blue"}'
    missing = await bounded(tools(ToolCall("AskUserQuestion", {"questions": []})))
    assert missing.is_error and "'question' must be a non-empty string" in missing.content
