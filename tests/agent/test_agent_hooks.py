"""The hook chain: before_tool_use -> on_input_required -> on_tool_call, and parallel calls."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import anyio
import pytest

from interlock import Broker, Deny, Request, Status
from interlock.agent import (
    Allow,
    HumanInputTools,
    Rewrite,
    ToolCall,
    ToolDefinition,
    ToolFunctions,
    ToolResult,
    ToolRunner,
    ask_user_tool,
    current_call,
)
from interlock.errors import ToolFailed, ToolRefused

from .support import BOUND, Inbox, Reports, bounded

pytestmark = pytest.mark.anyio

DEPLOY = ToolDefinition(
    "deploy",
    "Deploy a version to an environment.",
    {
        "type": "object",
        "properties": {"env": {"enum": ["staging", "prod"]}, "version": {"type": "string"}},
        "required": ["env"],
        "additionalProperties": False,
    },
)


class Deployer:
    """A plain tool that records every call it actually ran."""

    def __init__(self) -> None:
        self.ran: list[dict[str, Any]] = []

    async def deploy(self, env: str, version: str = "latest") -> str:
        self.ran.append({"env": env, "version": version})
        return f"deployed {version} to {env}"


def make_runner(broker: Broker, deployer: Deployer, reports: Reports | None = None, **options: Any) -> ToolRunner:
    human = HumanInputTools(broker, {"ask_user"}, definitions=[ask_user_tool()])
    runner = ToolRunner(broker, [human, ToolFunctions({"deploy": deployer.deploy})], definitions=[DEPLOY], **options)
    if reports is not None:
        runner.on_tool_call(reports)
    return runner


# -- before_tool_use -----------------------------------------------------------------------


async def test_a_before_tool_use_denial_refuses_the_call_with_its_reason(broker: Broker, reports: Reports) -> None:
    deployer = Deployer()
    runner = make_runner(broker, deployer, reports)

    async def rate_limit(call: ToolCall) -> Deny | None:
        return Deny("rate limited: one deploy per hour") if call.name == "deploy" else None

    runner.before_tool_use(rate_limit)
    result = await bounded(runner.run(ToolCall("deploy", {"env": "prod"}, "c1")))
    assert (result.refused, result.is_error, result.content) == (True, True, "rate limited: one deploy per hour")
    assert deployer.ran == []
    assert reports.statuses() == [("c1", "refused")]


async def test_a_rewrite_that_fits_the_schema_runs_with_the_new_arguments(broker: Broker, reports: Reports) -> None:
    deployer = Deployer()
    runner = make_runner(broker, deployer, reports)
    runner.before_tool_use(lambda call: Rewrite({**call.arguments, "env": "staging"}))
    result = await bounded(runner.run(ToolCall("deploy", {"env": "prod", "version": "2.3"})))
    assert result == ToolResult("deployed 2.3 to staging")
    assert deployer.ran == [{"env": "staging", "version": "2.3"}]
    assert reports.items[0].call.arguments == {"env": "staging", "version": "2.3"}


async def test_a_rewrite_that_breaks_the_schema_is_refused_before_anything_runs(
    broker: Broker, reports: Reports
) -> None:
    deployer = Deployer()
    runner = make_runner(broker, deployer, reports)
    runner.before_tool_use(lambda call: Rewrite({"env": "moon"}))
    result = await bounded(runner.run(ToolCall("deploy", {"env": "prod"})))
    assert result.refused and "rewritten arguments for 'deploy' are invalid" in result.content
    assert "'moon' is not one of" in result.content
    assert deployer.ran == []
    assert [r.status for r in reports.items] == ["refused"]


async def test_a_rewrite_of_a_tool_without_a_schema_fails_closed(broker: Broker) -> None:
    ran: list[object] = []

    async def ping(**arguments: object) -> str:
        ran.append(arguments)
        return "pong"

    runner = ToolRunner(broker, [ToolFunctions({"ping": ping})])
    runner.before_tool_use(lambda call: Rewrite({"host": "elsewhere"}))
    result = await bounded(runner.run(ToolCall("ping", {"host": "here"})))
    assert result.refused and "no schema" in result.content
    assert ran == []


async def test_before_tool_use_hooks_run_by_priority_and_each_sees_the_last_rewrite(broker: Broker) -> None:
    deployer = Deployer()
    runner = make_runner(broker, deployer)
    seen: list[tuple[str, dict[str, Any]]] = []

    def hook(name: str, rewrite: dict[str, Any] | None = None) -> Any:
        async def run(call: ToolCall) -> Rewrite | Allow:
            seen.append((name, dict(call.arguments)))
            return Rewrite(rewrite) if rewrite is not None else Allow()

        return run

    runner.before_tool_use(hook("last"), priority=10)
    runner.before_tool_use(hook("first", {"env": "staging", "version": "1"}), priority=-1)
    runner.before_tool_use(hook("middle"))
    await bounded(runner.run(ToolCall("deploy", {"env": "prod"})))
    assert seen == [
        ("first", {"env": "prod"}),
        ("middle", {"env": "staging", "version": "1"}),
        ("last", {"env": "staging", "version": "1"}),
    ]


async def test_a_before_tool_use_hook_that_fails_or_overruns_refuses_the_call(
    broker: Broker, reports: Reports, caplog: pytest.LogCaptureFixture
) -> None:
    deployer = Deployer()

    async def broken(call: ToolCall) -> None:
        raise RuntimeError("policy service down: token=abc")

    async def hangs(call: ToolCall) -> None:
        await asyncio.Event().wait()

    with caplog.at_level(logging.WARNING, logger="interlock"):
        for hook, timeout in ((broken, None), (hangs, 0.01)):
            runner = make_runner(broker, deployer, reports)
            runner.before_tool_use(hook, timeout=timeout)
            result = await bounded(runner.run(ToolCall("deploy", {"env": "prod"})))
            assert result.refused and "was blocked" in result.content
            assert "token=abc" not in result.content
    assert deployer.ran == []
    assert "token=abc" in (reports.items[0].detail or "")
    assert "timed out" in (reports.items[1].detail or "")


async def test_a_before_tool_use_hook_with_no_clear_verdict_refuses_the_call(broker: Broker) -> None:
    deployer = Deployer()
    runner = make_runner(broker, deployer)
    runner.before_tool_use(lambda call: "yes please")  # type: ignore[arg-type, return-value]
    result = await bounded(runner.run(ToolCall("deploy", {"env": "prod"})))
    assert result.refused and deployer.ran == []


async def test_arguments_that_break_the_schema_fail_the_call_so_the_model_can_fix_them(
    broker: Broker, reports: Reports
) -> None:
    deployer = Deployer()
    runner = make_runner(broker, deployer, reports)
    result = await bounded(runner.run(ToolCall("deploy", {"environment": "prod"})))
    assert (result.is_error, result.refused) == (True, False)
    assert json.loads(result.content)["error"].startswith("Invalid arguments for tool 'deploy'")
    assert deployer.ran == []


# -- on_input_required ---------------------------------------------------------------------


async def test_on_input_required_sees_whom_to_ask_and_may_deny(broker: Broker, inbox: Inbox) -> None:
    runner = make_runner(broker, Deployer())
    notified: list[Request] = []

    async def notify(request: Request) -> Deny | None:
        notified.append(request)
        return Deny("the user is offline") if request.origin.actor == "bob" else None

    runner.on_input_required(notify)
    call = ToolCall("ask_user", {"question": "Colour?"}, "c9", session="room", actor="bob", to="bob")
    result = await bounded(runner.run(call))
    assert (result.refused, result.content) == (True, "the user is offline")
    (request,) = notified
    assert (request.origin.session, request.origin.actor, request.origin.tool_call_id) == ("room", "bob", "c9")
    assert request.origin.tool_name == "ask_user" and request.to == "bob"


async def test_on_input_required_runs_beside_the_wait_not_in_front_of_it(broker: Broker, inbox: Inbox) -> None:
    runner = make_runner(broker, Deployer())
    release = asyncio.Event()

    async def slow_broadcast(request: Request) -> None:
        await release.wait()

    runner.on_input_required(slow_broadcast)
    task = asyncio.create_task(runner.run(ToolCall("ask_user", {"question": "Colour?"})))
    request = await inbox.next()
    await anyio.wait_all_tasks_blocked()
    assert await broker.resolve(request.id, "green")  # answered while the hook still runs
    assert (await bounded(task)).content == "green"
    release.set()


# -- on_tool_call --------------------------------------------------------------------------


async def test_observers_see_each_call_once_as_completed_failed_or_refused(
    broker: Broker, reports: Reports, inbox: Inbox
) -> None:
    async def crash(**arguments: object) -> str:
        raise RuntimeError("disk full at /secret/path")

    async def fail_nicely(**arguments: object) -> str:
        raise ToolFailed("the index is being rebuilt, try in a minute")

    async def refuse(**arguments: object) -> str:
        raise ToolRefused("this tool is read-only today")

    deployer = Deployer()
    runner = ToolRunner(
        broker,
        [
            HumanInputTools(broker, {"ask_user"}, definitions=[ask_user_tool()]),
            ToolFunctions({"deploy": deployer.deploy, "crash": crash, "search": fail_nicely, "write": refuse}),
        ],
        definitions=[DEPLOY],
    )
    runner.on_tool_call(reports)
    calls = [
        ToolCall("deploy", {"env": "staging"}, "ok"),
        ToolCall("crash", {}, "crash"),
        ToolCall("search", {}, "search"),
        ToolCall("write", {}, "write"),
        ToolCall("teleport", {}, "unknown"),
    ]
    results = await bounded(runner.run_all(calls))
    assert [r.status for r in results] == ["completed", "failed", "failed", "refused", "failed"]
    assert json.loads(results[1].content) == {"error": "Tool 'crash' failed"}
    assert "disk full" not in results[1].content and "disk full" in (results[1].detail or "")
    assert json.loads(results[2].content) == {"error": "the index is being rebuilt, try in a minute"}
    assert results[3].content == "this tool is read-only today"
    assert json.loads(results[4].content) == {"error": "Unknown tool 'teleport'"}
    assert sorted(reports.statuses()) == sorted(
        [("ok", "completed"), ("crash", "failed"), ("search", "failed"), ("write", "refused"), ("unknown", "failed")]
    )


async def test_a_failing_or_slow_observer_is_logged_and_the_others_still_run(
    broker: Broker, reports: Reports, caplog: pytest.LogCaptureFixture
) -> None:
    runner = make_runner(broker, Deployer())
    order: list[str] = []

    async def broken(report: object) -> None:
        order.append("broken")
        raise RuntimeError("observer bug")

    async def slow(report: object) -> None:
        order.append("slow")
        await asyncio.Event().wait()

    def sync_observer(report: object) -> None:
        order.append("sync")

    runner.on_tool_call(reports, priority=5)
    runner.on_tool_call(slow, priority=1, timeout=0.01)
    runner.on_tool_call(broken, priority=-1)
    runner.on_tool_call(sync_observer, priority=2)
    with caplog.at_level(logging.WARNING, logger="interlock"):
        result = await bounded(runner.run(ToolCall("deploy", {"env": "staging"})))
    assert result.status == "completed"
    assert order == ["broken", "slow", "sync"]
    assert [r.status for r in reports.items] == ["completed"]
    assert "observer bug" in caplog.text and "timed out" in caplog.text


async def test_a_handler_reads_the_call_it_serves(broker: Broker) -> None:
    seen: list[ToolCall | None] = []

    async def whoami(**arguments: object) -> str:
        seen.append(current_call())
        return "ok"

    runner = ToolRunner(broker, [ToolFunctions({"whoami": whoami})])
    call = ToolCall("whoami", {}, session="s1", agent="a1", to="alice")
    await bounded(runner.run(call))
    assert seen == [call]
    assert current_call() is None


# -- parallel calls ------------------------------------------------------------------------


async def test_a_human_input_call_waits_while_the_other_calls_complete(
    broker: Broker, reports: Reports, inbox: Inbox
) -> None:
    deployer = Deployer()
    runner = make_runner(broker, deployer, reports)
    calls = [
        ToolCall("ask_user", {"question": "Version?"}, "ask"),
        ToolCall("deploy", {"env": "staging", "version": "1"}, "d1"),
        ToolCall("deploy", {"env": "staging", "version": "2"}, "d2"),
    ]
    turn = asyncio.create_task(runner.run_all(calls))
    request = await inbox.next()
    await reports.wait_for(2)
    assert sorted(reports.statuses()) == [("d1", "completed"), ("d2", "completed")]
    assert (await broker.get(request.id)).status is Status.PENDING
    assert not turn.done()
    await broker.resolve(request.id, "3")
    results = await bounded(turn)
    assert [r.content for r in results] == ["3", "deployed 1 to staging", "deployed 2 to staging"]
    assert sorted(reports.statuses()) == [("ask", "completed"), ("d1", "completed"), ("d2", "completed")]


async def test_a_turn_cancelled_while_a_call_waits_withdraws_it_and_reports_it_cancelled_once(
    broker: Broker, reports: Reports, inbox: Inbox
) -> None:
    runner = make_runner(broker, Deployer(), reports)
    calls = [ToolCall("ask_user", {"question": "Version?"}, "ask"), ToolCall("deploy", {"env": "staging"}, "d1")]
    turn = asyncio.create_task(runner.run_all(calls))
    request = await inbox.next()
    await reports.wait_for(1)
    await anyio.wait_all_tasks_blocked()

    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await bounded(turn)
    await reports.wait_for(2)
    await anyio.wait_all_tasks_blocked()

    assert sorted(reports.statuses()) == [("ask", "cancelled"), ("d1", "completed")]
    stored = await broker.watch(request.id, timeout=BOUND)
    assert stored.status is Status.CANCELLED
    assert await broker.resolve(request.id, "late") is False  # a late answer is not taken


async def test_a_single_call_cut_by_an_outer_cancel_scope_is_withdrawn_and_reported_cancelled_once(
    broker: Broker, reports: Reports, inbox: Inbox
) -> None:
    runner = make_runner(broker, Deployer(), reports)
    outcome: list[ToolResult] = []

    async def turn() -> None:
        outcome.append(await runner.run(ToolCall("ask_user", {"question": "Version?"}, "ask")))

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn)
        request = await inbox.next()
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()  # anyio re-delivers the cancellation until the task exits
    await reports.wait_for(1)
    await anyio.wait_all_tasks_blocked()
    assert outcome == []
    assert reports.statuses() == [("ask", "cancelled")]
    assert (await broker.watch(request.id, timeout=BOUND)).status is Status.CANCELLED
