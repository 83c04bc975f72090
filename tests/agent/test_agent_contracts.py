"""Resolution contracts: broker (the inbox), auto_resolve, terminal, and custom ones, per agent."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from interlock import Broker, Choice, Confirm, Form, MultiChoice, Request, Response, Status, Text
from interlock.agent import (
    ApprovalGate,
    AutoResolveContract,
    BrokerContract,
    Contract,
    Contracts,
    HumanInputTools,
    TerminalContract,
    ToolCall,
    ToolDefinition,
    ToolFunctions,
    ToolRunner,
    ask_user_tool,
    auto_resolve_from_env,
    contract_from,
    request_human_input_tool,
)

from .support import Inbox, bounded

pytestmark = pytest.mark.anyio

NO_ENV: dict[str, str] = {}


def human(broker: Broker, contracts: Any, **options: Any) -> HumanInputTools:
    return HumanInputTools(
        broker,
        {"ask_user", "request_human_input"},
        definitions=[ask_user_tool(), request_human_input_tool()],
        contracts=contracts,
        **options,
    )


def rhi(question: str, kind: str, choices: list[str] | None = None, **context: Any) -> ToolCall:
    arguments: dict[str, Any] = {"question": question, "question_type": kind}
    if choices is not None:
        arguments["choices"] = choices
    return ToolCall("request_human_input", arguments, **context)


def choice_of(result_content: str) -> Any:
    return json.loads(result_content)["choice"]


def via(backend: str, surface: str) -> str:
    """The surface recorded for an answer: the one named in-process; through a server,
    the server's own ("api"), since no client chooses how it is recorded."""
    return "api" if backend == "http" else surface


# -- choosing ----------------------------------------------------------------------------------


def test_a_contract_is_chosen_by_name_by_mapping_or_as_an_object() -> None:
    assert isinstance(contract_from("broker"), BrokerContract)
    assert isinstance(contract_from("registry"), BrokerContract)
    assert isinstance(contract_from("terminal"), TerminalContract)
    deny = contract_from({"type": "auto_resolve", "params": {"decision": "deny"}})
    assert isinstance(deny, AutoResolveContract) and deny.decision == "deny"
    mine = BrokerContract()
    assert contract_from(mine) is mine
    with pytest.raises(ValueError, match="unknown contract 'slack'"):
        contract_from("slack")
    with pytest.raises(ValueError, match="bad params"):
        contract_from({"type": "auto_resolve", "params": {"colour": "red"}})
    with pytest.raises(ValueError, match="a contract mapping is"):
        contract_from({"kind": "auto_resolve"})
    with pytest.raises(TypeError):
        contract_from(42)  # type: ignore[arg-type]


def test_contracts_are_chosen_per_agent_with_a_default() -> None:
    terminal = TerminalContract()
    contracts = Contracts(agents={"bench": "auto_resolve", "cli": terminal}, environ=NO_ENV)
    assert isinstance(contracts.for_agent("bench"), AutoResolveContract)
    assert contracts.for_agent("cli") is terminal
    assert isinstance(contracts.for_agent("planner"), BrokerContract)
    assert isinstance(contracts.for_agent(None), BrokerContract)
    assert isinstance(Contracts("auto_resolve", environ=NO_ENV).for_agent("x"), AutoResolveContract)


@pytest.mark.parametrize(
    ("value", "decision"),
    [("1", "approve"), ("true", "approve"), ("approve", "approve"), ("deny", "deny"), (" DENY ", "deny")],
)
def test_the_environment_variable_switches_auto_resolve_on_for_every_agent(value: str, decision: str) -> None:
    environ = {"INTERLOCK_AUTO_RESOLVE": value}
    contracts = Contracts(agents={"cli": TerminalContract()}, environ=environ)
    for agent in ("cli", "planner", None):
        chosen = contracts.for_agent(agent)
        assert isinstance(chosen, AutoResolveContract) and chosen.decision == decision


@pytest.mark.parametrize("value", ["", "0", "false", "off", "no"])
def test_the_environment_variable_off_leaves_the_configured_contracts(value: str) -> None:
    assert auto_resolve_from_env({"INTERLOCK_AUTO_RESOLVE": value}) is None
    assert isinstance(Contracts(environ={"INTERLOCK_AUTO_RESOLVE": value}).for_agent("a"), BrokerContract)


def test_an_environment_variable_that_says_nothing_clear_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="INTERLOCK_AUTO_RESOLVE"):
        auto_resolve_from_env({"INTERLOCK_AUTO_RESOLVE": "maybe"})
    monkeypatch.setenv("INTERLOCK_AUTO_RESOLVE", "1")
    assert isinstance(Contracts().for_agent("a"), AutoResolveContract)  # read from os.environ


# -- broker ------------------------------------------------------------------------------------


async def test_the_default_contract_waits_for_an_answer_from_the_inbox(broker: Broker, inbox: Inbox) -> None:
    tools = human(broker, None)
    task = asyncio.create_task(tools(rhi("Ship it?", "CONFIRM", agent="planner")))
    request = await inbox.next()
    assert (await broker.get(request.id)).status is Status.PENDING
    await broker.resolve(request.id, True, by="alice", via="web")
    assert choice_of((await bounded(task)).content) is True


# -- auto_resolve ------------------------------------------------------------------------------


async def test_auto_resolve_answers_at_once_and_records_the_decision(
    broker: Broker, inbox: Inbox, backend: str
) -> None:
    tools = human(broker, Contracts(agents={"bench": "auto_resolve"}, environ=NO_ENV))
    result = await bounded(tools(rhi("Ship it?", "CONFIRM", agent="bench")))
    assert choice_of(result.content) is True
    request = await broker.get((await inbox.next()).id)
    assert request.status is Status.ANSWERED
    assert request.response is not None
    assert (request.response.by, request.response.via) == ("auto_resolve", via(backend, "auto_resolve"))

    other = asyncio.create_task(tools(rhi("Ship it?", "CONFIRM", agent="planner")))
    waiting = await inbox.next()
    assert (await broker.get(waiting.id)).status is Status.PENDING  # other agents still wait
    await broker.resolve(waiting.id, False)
    assert choice_of((await bounded(other)).content) is False


@pytest.mark.parametrize(
    ("decision", "ask", "answer"),
    [
        ("approve", Confirm("Ok?"), True),
        ("deny", Confirm("Ok?"), False),
        ("blue", Confirm("Ok?"), False),  # anything but an approving word answers no
        ("approve", Text("Notes?"), "approve"),
        ("Blue", Choice("Colour?", ["red", "blue"]), "blue"),
        ("deny", Choice("Go?", ["yes", "no"]), "no"),
        ("approve", Choice("Go?", ["yes", "no"]), "yes"),
        ("teal", Choice("Colour?", ["red", "blue"], allow_other=True), "teal"),
        ("teal", Choice("Colour?", ["red", "blue"]), "red"),
        ("docs", MultiChoice("Checks?", ["lint", "docs"]), ["docs"]),
        ("approve", MultiChoice("Checks?", ["lint", "docs", "tests"], min=2), ["lint", "docs"]),
        # A refusal ticks none (it had ticked the first: "users" as the tables one may drop).
        ("deny", MultiChoice("Which tables may I drop?", ["users", "orders"]), []),
        (
            "approve",
            Form("Size?", schema={"type": "object", "properties": {"n": {"type": "integer", "default": 3}}}),
            {"n": 3},
        ),
    ],
)
async def test_auto_resolve_maps_its_decision_onto_each_kind_of_ask(
    broker: Broker, decision: str, ask: Any, answer: Any
) -> None:
    request = await broker.create(ask)
    response = await bounded(AutoResolveContract(decision).settle(broker, request))
    assert response.answers == {ask.id: answer}


async def test_auto_resolve_rejects_a_required_ask_it_cannot_answer(broker: Broker) -> None:
    form = Form("Address?", schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    tools = human(broker, "auto_resolve")
    request = await broker.create([Text("Name?", id="name"), form])
    with pytest.raises(Exception, match="cannot fill form"):
        await bounded(AutoResolveContract().settle(broker, request))
    assert (await broker.get(request.id)).status is Status.REJECTED
    result = await bounded(tools(rhi("Contact?", "FORM", ["name", "email"])))
    assert result.refused and "cannot fill form" in result.content


@pytest.mark.parametrize(
    "ask",
    [
        Choice("Which region?", ["eu", "us"]),
        Choice("Which region?", ["eu", "us"], allow_other=True),
        MultiChoice("Which tables?", ["users", "orders"], min=1),
    ],
)
async def test_a_deny_decision_picks_no_option_for_the_person_and_rejects_what_needs_one(
    broker: Broker, ask: Any
) -> None:
    # A deny had answered with the first option (or its own word), as if someone had chosen it.
    request = await broker.create(ask)
    with pytest.raises(Exception, match="'deny' refuses, and names none of the options"):
        await bounded(AutoResolveContract("deny").settle(broker, request))
    assert (await broker.get(request.id)).status is Status.REJECTED


async def test_auto_resolve_approves_tool_calls_and_a_deny_decision_denies_them(broker: Broker) -> None:
    ran: list[str] = []

    async def deploy(env: str) -> str:
        ran.append(env)
        return "deployed"

    schema = {"type": "object", "properties": {"env": {"type": "string"}}, "required": ["env"]}
    for decision, expected in (("approve", "deployed"), ("deny", None)):
        gate = ApprovalGate(
            broker, policies={"deploy": "always"}, contracts={"type": "auto_resolve", "params": {"decision": decision}}
        )
        runner = ToolRunner(
            broker, [ToolFunctions({"deploy": deploy})], definitions=[ToolDefinition("deploy", "", schema)], gate=gate
        )
        result = await bounded(runner.run(ToolCall("deploy", {"env": "prod"}, agent="bench")))
        if expected is None:
            assert result.denied
        else:
            assert result.content == expected
    assert ran == ["prod"]


@pytest.mark.parametrize("to", ["alice", "ops"])
async def test_auto_resolve_approves_a_call_whose_gate_names_an_approver_or_a_team(broker: Broker, to: str) -> None:
    # The gate takes the contract's own yes in the approver's place; the broker, refusing a
    # yes from anyone but the approver, turned it into a denial.
    gate = ApprovalGate(broker, policies={"*": "always"}, contracts={"type": "auto_resolve"}, to=to)
    assert await bounded(gate.authorize(ToolCall("deploy", {"env": "prod"}, agent="bench", session="s1"))) == {
        "env": "prod"
    }


# -- terminal ----------------------------------------------------------------------------------


def terminal(text: str) -> tuple[TerminalContract, io.StringIO]:
    out = io.StringIO()
    return TerminalContract(io.StringIO(text), out), out


@pytest.mark.parametrize(
    ("typed", "call", "choice"),
    [
        ("BLUE\n", rhi("Colour?", "MULTIPLE_CHOICE", ["red", "blue"]), "blue"),
        ("2\n", rhi("Colour?", "MULTIPLE_CHOICE", ["red", "blue"]), "blue"),
        ("teal, please\n", rhi("Colour?", "MULTIPLE_CHOICE", ["red", "blue"]), "teal, please"),
        ("Yes\n", rhi("Ship it?", "CONFIRM"), True),
        ("maybe\nno\n", rhi("Ship it?", "CONFIRM"), False),
        ("lint, DOCS\n", rhi("Checks?", "MULTI_SELECT", ["lint", "tests", "docs"]), ["lint", "docs"]),
        ("purple\ntests\n", rhi("Checks?", "MULTI_SELECT", ["lint", "tests"]), ["tests"]),
        ('{"name": "Ada"}\n', rhi("Who?", "FORM", ["name"]), {"name": "Ada"}),
        ("Watch the p99 latency\n", rhi("Notes?", "FREE_FORM"), "Watch the p99 latency"),
    ],
    ids=["name", "number", "other", "yes", "reasked", "several", "bad-then-good", "form", "text"],
)
async def test_the_terminal_matches_choices_ignoring_case_and_passes_other_text_through(
    broker: Broker, typed: str, call: ToolCall, choice: Any, backend: str
) -> None:
    contract, out = terminal(typed)
    result = await bounded(human(broker, contract)(call))
    assert choice_of(result.content) == choice, out.getvalue()
    shown = out.getvalue()
    assert call.arguments["question"] in shown
    for option in call.arguments.get("choices", []):
        assert option in shown
    (request,) = (await broker.list()).items
    assert request.response is not None and request.response.via == via(backend, "terminal")


async def test_the_terminal_shows_why_an_answer_was_not_taken_and_asks_again(broker: Broker) -> None:
    contract, out = terminal("purple\nlint\n")
    result = await bounded(human(broker, contract)(rhi("Checks?", "MULTI_SELECT", ["lint", "tests"])))
    assert choice_of(result.content) == ["lint"]
    assert "'purple' is not one of the options" in out.getvalue()


async def test_an_approval_denied_at_the_terminal_carries_the_typed_reason(broker: Broker) -> None:
    ran: list[dict[str, Any]] = []

    async def deploy(**arguments: Any) -> str:
        ran.append(arguments)
        return "deployed"

    schema = {"type": "object", "properties": {"env": {"enum": ["staging", "prod"]}}, "required": ["env"]}
    for typed, content in (
        ("no\nNot on a Friday.\n", "Not on a Friday."),
        ("y\n\n", "deployed"),
        ('y\n{"env": "staging"}\n', "deployed"),
    ):
        contract, out = terminal(typed)
        gate = ApprovalGate(broker, policies={"deploy": "always"}, contracts=contract)
        runner = ToolRunner(
            broker, [ToolFunctions({"deploy": deploy})], definitions=[ToolDefinition("deploy", "", schema)], gate=gate
        )
        result = await bounded(runner.run(ToolCall("deploy", {"env": "prod"})))
        assert result.content == content
        assert 'deploy(env="prod")' in out.getvalue()
    assert ran == [{"env": "prod"}, {"env": "staging"}]


async def test_end_of_input_at_the_terminal_gives_the_request_up(broker: Broker) -> None:
    contract, _ = terminal("")
    result = await bounded(human(broker, contract)(rhi("Ship it?", "CONFIRM")))
    assert json.loads(result.content) == {"error": "Tool 'request_human_input' failed"}
    (request,) = (await broker.list()).items
    assert request.status is Status.CANCELLED


@pytest.fixture
def silent_terminal() -> Iterator[tuple[io.TextIOWrapper, int]]:
    """A terminal nobody types at: reading it blocks until the write end is closed."""
    read_fd, write_fd = os.pipe()
    reader = os.fdopen(read_fd, "r")
    try:
        yield reader, write_fd
    finally:
        os.close(write_fd)  # the daemon reader thread sees end of input and returns
        reader.close()  # waits for that read to let go of the stream


async def test_an_answer_from_the_inbox_counts_while_the_terminal_waits(
    broker: Broker, inbox: Inbox, silent_terminal: tuple[io.TextIOWrapper, int]
) -> None:
    reader, _ = silent_terminal
    out = io.StringIO()
    task = asyncio.create_task(human(broker, TerminalContract(reader, out))(rhi("Ship it?", "CONFIRM")))
    request = await inbox.next()
    await anyio.wait_all_tasks_blocked()  # the prompt is on the terminal, waiting for a line
    assert "Ship it?" in out.getvalue()
    await broker.resolve(request.id, True, by="alice", via="web")
    assert choice_of((await bounded(task)).content) is True


# -- custom contracts --------------------------------------------------------------------------


class Escalator:
    """A custom contract: answers questions from a table, as a chat bridge might."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def settle(self, broker: Broker, request: Request) -> Response:
        self.seen.append(request.id)
        await broker.resolve(request.id, "from the on-call table", by="bot", via="chat")
        return await broker.wait(request.id)


async def test_a_custom_contract_object_settles_requests(broker: Broker, backend: str) -> None:
    escalator = Escalator()
    assert isinstance(escalator, Contract)
    tools = human(broker, Contracts(agents={"oncall": escalator}, environ=NO_ENV))
    result = await bounded(tools(ToolCall("ask_user", {"question": "Who is on call?"}, agent="oncall")))
    assert result.content == "from the on-call table"
    (request,) = (await broker.list()).items
    assert escalator.seen == [request.id]
    assert request.response is not None and request.response.via == via(backend, "chat")


async def test_a_withdrawal_that_fails_names_the_request_left_pending(
    broker: Broker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from interlock.agent._settle import settle

    async def away(request_id: str, *args: Any, **kwargs: Any) -> bool:
        raise ConnectionError("the server is away")

    class Elsewhere:  # a contract that waits on something other than the broker
        async def settle(self, broker: Broker, request: Request) -> Response:
            await asyncio.Event().wait()
            raise AssertionError("never settled")

    request = await broker.create(Text("Name?"), to="alice")
    waiting = asyncio.ensure_future(settle(Contracts(Elsewhere(), environ={}), broker, request, None))
    await anyio.wait_all_tasks_blocked()
    monkeypatch.setattr(broker, "cancel", away)  # the withdrawal meets an outage
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):  # still a cancellation, not the withdrawal's failure
        await bounded(waiting)
    [line] = [r for r in caplog.records if "withdrawing request" in r.getMessage()]
    assert line.levelno == logging.WARNING
    assert line.getMessage().startswith(f"withdrawing request {request.id}, whose call was cancelled, failed")
    assert "the server is away" in line.getMessage() and "stays pending" in line.getMessage()
    assert (await broker.get(request.id)).status is Status.PENDING
