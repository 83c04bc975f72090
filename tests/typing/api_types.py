"""Typed code against the public API, as a user writes it: checked by the project's mypy run
(`[tool.mypy] files`), never run. Each `assert_type` pins what a type checker infers, and
each call is one the API takes, so a signature or a return type that regresses fails mypy.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, assert_type

import interlock
from interlock import Broker, Choice, Confirm, Deny, Form, InputHook, MultiChoice, Request, Run, Text, ToolRunner
from interlock.agent import (
    ApprovalGate,
    BeforeVerdict,
    ToolCall,
    ToolCallReport,
    UrlHook,
    UrlHookError,
    call_url_hook,
)
from interlock.approval_policies import HookVerdict, PolicyHook
from interlock.broker import LocalBroker
from interlock.integrations.langgraph import Decision, LangGraphAgent, approval
from interlock.integrations.openai_agents import OpenAIAgentsRuns
from interlock.remote import RemoteBroker
from interlock.runs import Worker
from interlock.store.memory import MemoryStore


async def a_broker_entered_is_the_broker_made(store: MemoryStore, remote: RemoteBroker) -> None:
    async with LocalBroker(store) as local:
        assert_type(local, LocalBroker)
        assert_type(await local.open(), LocalBroker)
    async with remote as entered:
        assert_type(entered, RemoteBroker)
    async with interlock.connect("memory://") as broker:
        assert_type(broker, Broker)


async def ask_answers_by_kind(broker: Broker) -> None:
    # One ask's value is of its kind; None only for an optional ask left unanswered.
    assert_type(await broker.ask(Confirm("Deploy?"), to="alice", timeout=600), bool | None)
    assert_type(await broker.ask(Text("Name?"), timeout=timedelta(minutes=5)), str | None)
    assert_type(await broker.ask(Choice("Region?", ["eu", "us"])), str | None)
    assert_type(await broker.ask(MultiChoice("Which?", ["a", "b"], min=1)), list[str] | None)
    assert_type(await broker.ask(Form("Details", {"type": "object"})), dict[str, Any] | None)
    # Several asks give a dict by ask id, a list of one the bare value: either, so Any.
    assert_type(await broker.ask([Choice("Region?", ["eu", "us"], id="region"), Text("Note", id="note")]), Any)


async def input_hooks_sync_or_async(broker: Broker, runner: ToolRunner) -> None:
    # Like every other hook of the broker and the runner, an input hook may be a plain function.
    def note(request: Request) -> None:
        print(request.id)

    def refuse(request: Request) -> Deny | None:
        return Deny("nobody to ask") if request.to is None else None

    async def notify(request: Request) -> Deny | None:
        return None

    broker.add_input_hook(note)
    broker.add_input_hook(refuse)
    broker.add_input_hook(notify)
    assert_type(runner.on_input_required(note), InputHook)

    def audit(report: ToolCallReport) -> None:
        print(report)

    runner.on_tool_call(audit)


async def a_langgraph_run_takes_a_timedelta(agent: LangGraphAgent) -> None:
    # As `Broker.start_run` and the other adapters' `start` do.
    assert_type(await agent.start({"to": "ops"}, max_duration=timedelta(days=30)), Run)
    assert_type(await agent.start({"to": "ops"}, max_duration=3600.0), Run)


def a_node_routes_on_the_decision() -> str:
    decision = approval("send_mail", {"to": "ops@example.com"})
    assert_type(decision["approved"], bool)  # always there: pyright reads it without a `.get`
    if decision["approved"]:
        return str(decision.get("arguments"))
    return decision.get("reason", "")


def a_decision_always_says_whether_it_is_approved() -> Decision:
    return {"reason": "no approved key"}  # type: ignore[typeddict-item]


async def a_list_filter_takes_only_what_it_knows(broker: Broker) -> None:
    await broker.list(kind="approval", recipient="alice")
    await broker.pending(kind="question")
    await broker.list(kind="approvals")  # type: ignore[arg-type]
    await broker.pending(kind="approvals")  # type: ignore[arg-type]


async def the_agent_side_names_its_page_uses(broker: Broker, runner: ToolRunner) -> None:
    # docs/how-to/agents.md: everything on that page is imported from `interlock.agent`.
    async def my_url_hook(hook: PolicyHook, body: Mapping[str, Any]) -> HookVerdict:
        try:
            return await call_url_hook(hook, body)
        except UrlHookError:
            raise

    calling: UrlHook = my_url_hook
    ApprovalGate(broker, url_hook=calling)

    def guard(call: ToolCall) -> BeforeVerdict:
        return None

    runner.before_tool_use(guard)


def a_worker_takes_its_lease_as_a_timedelta(broker: Broker) -> None:
    # The docs' durations are timedeltas elsewhere (`max_duration`, `pause_timeout`); the
    # worker took one at run time, but a checker refused it (typed a float only).
    Worker(broker, {}, lease=timedelta(minutes=5))
    Worker(broker, {}, lease=300)


async def an_openai_agents_run_starts_on_input_items(runs: OpenAIAgentsRuns) -> None:
    # As `Runner.run` takes them: a prompt, or a conversation so far (typed a str only before).
    assert_type(await runs.start("ship it"), Run)
    assert_type(await runs.start([{"role": "user", "content": "we ship to eu-west"}]), Run)
