"""The approval gate: policies, the per-call hook, denial, edits, digest binding, the decorator."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
from collections.abc import Coroutine
from typing import Any, get_args, get_origin, get_type_hints

import anyio
import pytest

from interlock import Broker, Cancelled, Confirm, Deny, Expired, Form, InvalidAnswer, Request, Status
from interlock.agent import (
    Allow,
    ApprovalGate,
    HumanInputTools,
    Pause,
    ToolCall,
    ToolDefinition,
    ToolFunctions,
    ToolRunner,
    arguments_digest,
    ask_user_tool,
    canonical_json,
    requires_approval,
)
from interlock.approval_policies import ApprovalPolicy
from interlock.errors import ApprovalDenied, ApprovalRefused, RunFailed

from .support import Inbox, Reports, bounded

pytestmark = pytest.mark.anyio

SCHEMA = {
    "type": "object",
    "properties": {"env": {"enum": ["staging", "prod"]}, "version": {"type": "string"}},
    "required": ["env"],
    "additionalProperties": False,
}
TOOLS = [ToolDefinition(name, "", SCHEMA) for name in ("deploy", "rollback", "read_file", "read_logs")]


class Tools:
    """Plain tools that record every call they actually ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []

    def handler(self) -> ToolFunctions:
        def tool(name: str) -> Any:
            async def run(**arguments: Any) -> str:
                self.ran.append((name, arguments))
                return f"{name} ok"

            return run

        return ToolFunctions({d.name: tool(d.name) for d in TOOLS})


def gated(broker: Broker, tools: Tools, reports: Reports | None = None, **gate_options: Any) -> ToolRunner:
    gate = ApprovalGate(broker, **gate_options)
    human = HumanInputTools(broker, {"ask_user"}, definitions=[ask_user_tool()])
    runner = ToolRunner(broker, [human, tools.handler()], definitions=TOOLS, gate=gate)
    if reports is not None:
        runner.on_tool_call(reports)
    return runner


async def approve_next(inbox: Inbox, answer: object = True, *, comment: str = "") -> Request:
    """The approver (the request's recipient) answers the next approval."""
    request = await inbox.next()
    assert request.kind == "approval"
    assert await inbox.broker.resolve(
        request.id, {"approve": answer} if answer in (True, False) else answer, by=request.to, comment=comment
    )
    return request


# -- policies --------------------------------------------------------------------------------


async def test_always_asks_for_every_call_and_runs_it_once_approved(broker: Broker, inbox: Inbox) -> None:
    tools = Tools()
    runner = gated(broker, tools, policies={"deploy": "always"}, to="alice")
    for n in range(2):
        call = ToolCall("deploy", {"env": "prod", "version": f"2.{n}"}, f"c{n}", session="s1", agent="ops")
        task = asyncio.create_task(runner.run(call))
        await approve_next(inbox)
        assert (await bounded(task)).content == "deploy ok"
    assert tools.ran == [("deploy", {"env": "prod", "version": "2.0"}), ("deploy", {"env": "prod", "version": "2.1"})]
    assert len((await broker.list(kind="approval")).items) == 2


async def test_an_approval_request_carries_the_tool_its_arguments_and_a_preview(broker: Broker, inbox: Inbox) -> None:
    runner = gated(broker, Tools(), policies={"deploy": "always"}, to="alice")
    call = ToolCall("deploy", {"version": "2.3", "env": "prod"}, "c1", session="s1", agent="ops", actor="bob")
    task = asyncio.create_task(runner.run(call))
    request = await inbox.next()
    assert (request.kind, request.to, request.requester, request.title) == (
        "approval",
        "alice",
        "ops",
        "Approve deploy?",
    )
    assert (request.origin.tool_name, request.origin.tool_call_id) == ("deploy", "c1")
    assert request.origin.arguments == {"env": "prod", "version": "2.3"}
    assert request.origin.session == "s1" and request.origin.actor == "bob"
    assert request.details == 'deploy(env="prod", version="2.3")'
    assert request.context["tool"] == "deploy"
    assert request.context["arguments"] == {"env": "prod", "version": "2.3"}
    assert request.context["preview"] == request.details
    assert isinstance(request.asks[0], Confirm) and request.asks[0].id == "approve"
    assert isinstance(request.asks[1], Form) and not request.asks[1].required
    await broker.resolve(request.id, {"approve": True}, by="alice")
    await bounded(task)


async def test_a_yes_to_a_gate_approval_that_names_nobody_is_refused_before_it_is_stored(
    broker: Broker, inbox: Inbox
) -> None:
    # The gate takes a yes only as its approver's: one naming nobody (an operator's answer
    # without `by`, a script's) was stored as answered, then read by the gate as a refusal.
    runner = gated(broker, Tools(), policies={"deploy": "always"}, to="alice")
    task = asyncio.create_task(runner.run(ToolCall("deploy", {"env": "prod"}, "c1", session="s1", agent="ops")))
    request = await inbox.next()
    with pytest.raises(InvalidAnswer, match=r"approval for alice: .* names nobody; answer as them \(by='alice'"):
        await broker.resolve(request.id, {"approve": True})
    assert (await broker.get(request.id)).status is Status.PENDING  # nothing was recorded
    await broker.resolve(request.id, {"approve": True}, by="alice")
    assert (await bounded(task)).content == "deploy ok"


async def test_anyone_s_no_to_a_gate_approval_stops_the_call(broker: Broker, inbox: Inbox) -> None:
    runner = gated(broker, Tools(), policies={"deploy": "always"}, to="alice")
    task = asyncio.create_task(runner.run(ToolCall("deploy", {"env": "prod"}, "c1", session="s1", agent="ops")))
    request = await inbox.next()
    assert await broker.resolve(request.id, {"approve": False}, by="bob", comment="not today")
    assert "not today" in (await bounded(task)).content


async def test_the_preview_shows_what_a_reader_cannot_see_and_quotes_odd_argument_names(
    broker: Broker, inbox: Inbox
) -> None:
    # A right-to-left override made "/srv/\u202etxt.exe" read as "/srv/exe.txt" to the
    # approver, a zero-width space hid in a name, and a name like 'a=1, b' read as two.
    gate = ApprovalGate(broker, policies={"*": "always"}, to="alice")
    call = ToolCall("upload", {"path": "/srv/\u202etxt.exe", "host": "ex\u200bample.com"}, "c1", session="s1")
    task = asyncio.create_task(gate.authorize(call))
    request = await inbox.next()
    assert request.details == 'upload(host="ex\\u200bample.com", path="/srv/\\u202etxt.exe")'
    assert request.origin.arguments == {"host": "ex\u200bample.com", "path": "/srv/\u202etxt.exe"}  # runs as given
    await broker.resolve(request.id, {"approve": True}, by="alice")
    assert await bounded(task) == {"host": "ex\u200bample.com", "path": "/srv/\u202etxt.exe"}

    task = asyncio.create_task(gate.authorize(ToolCall("upload", {"path": "/tmp", "a=1, b": 2}, "c2", session="s1")))
    request = await inbox.next()
    assert request.details == 'upload("a=1, b"=2, path="/tmp")'
    await broker.resolve(request.id, {"approve": False}, by="alice")
    with pytest.raises(ApprovalDenied):
        await bounded(task)


async def test_never_runs_without_asking(broker: Broker) -> None:
    tools = Tools()
    runner = gated(broker, tools, policies={"read_*": "never"})
    assert (await bounded(runner.run(ToolCall("read_file", {"env": "prod"})))).content == "read_file ok"
    assert (await broker.list()).items == []


async def test_once_asks_the_first_time_in_a_session_and_not_again(broker: Broker, inbox: Inbox) -> None:
    tools = Tools()
    runner = gated(broker, tools, policies={"deploy": "once"})
    task = asyncio.create_task(runner.run(ToolCall("deploy", {"env": "staging"}, session="s1")))
    await approve_next(inbox)
    await bounded(task)
    assert (await bounded(runner.run(ToolCall("deploy", {"env": "prod"}, session="s1")))).content == "deploy ok"
    assert len((await broker.list()).items) == 1

    other = asyncio.create_task(runner.run(ToolCall("deploy", {"env": "prod"}, session="s2")))
    await approve_next(inbox)  # another session asks again
    await bounded(other)
    assert len(tools.ran) == 3


async def test_a_once_approval_holds_for_a_gate_in_another_process(broker: Broker, inbox: Inbox) -> None:
    task = asyncio.create_task(
        gated(broker, Tools(), policies={"deploy": "once"}).run(ToolCall("deploy", {"env": "prod"}, session="s1"))
    )
    await approve_next(inbox)
    await bounded(task)
    fresh = Tools()  # a new gate knows nothing in memory: the approval is read back from the store
    again = gated(broker, fresh, policies={"deploy": "once"})
    result = await bounded(again.run(ToolCall("deploy", {"env": "prod"}, session="s1")))
    assert result.content == "deploy ok" and len(fresh.ran) == 1
    assert len((await broker.list()).items) == 1


async def test_a_once_approval_holds_only_for_the_agent_and_approver_it_was_given_to(
    broker: Broker, inbox: Inbox
) -> None:
    """The same gate, the same session and tool: another agent (a helper the session's
    agent delegates to), or a call to another approver, asks again, as a new gate would."""
    tools = Tools()
    runner = gated(broker, tools, policies={"deploy": "once"})
    first = ToolCall("deploy", {"env": "prod"}, session="s1", agent="planner", to="alice")
    task = asyncio.create_task(runner.run(first))
    await approve_next(inbox)
    await bounded(task)
    assert (await bounded(runner.run(first.with_arguments({"env": "staging"})))).content == "deploy ok"
    for other in (
        ToolCall("deploy", {"env": "prod"}, session="s1", agent="researcher", to="alice"),
        ToolCall("deploy", {"env": "prod"}, session="s1", agent="planner", to="mallory"),
    ):
        task = asyncio.create_task(runner.run(other))
        asked = await inbox.next()
        assert (asked.to, asked.origin.agent) == (other.to, other.agent)
        assert await broker.reject(asked.id, "not this one", by=asked.to)
        assert (await bounded(task)).denied
    assert len(tools.ran) == 2


async def test_a_denied_once_approval_does_not_hold(broker: Broker, inbox: Inbox) -> None:
    runner = gated(broker, Tools(), policies={"deploy": "once"})
    task = asyncio.create_task(runner.run(ToolCall("deploy", {"env": "prod"}, session="s1")))
    await approve_next(inbox, False)
    assert (await bounded(task)).denied
    again = asyncio.create_task(runner.run(ToolCall("deploy", {"env": "prod"}, session="s1")))
    await approve_next(inbox)
    assert (await bounded(again)).content == "deploy ok"


async def test_once_without_a_session_asks_every_time(broker: Broker, inbox: Inbox) -> None:
    runner = gated(broker, Tools(), policies={"deploy": "once"})
    for _ in range(2):
        task = asyncio.create_task(runner.run(ToolCall("deploy", {"env": "prod"})))
        await approve_next(inbox)
        await bounded(task)
    assert len((await broker.list()).items) == 2


def test_an_exact_name_beats_a_glob_and_a_more_specific_glob_beats_a_wider_one(unopened: Broker) -> None:
    gate = ApprovalGate(unopened, policies={"*": "always", "read_*": "never", "read_logs": "once", "deploy": "never"})
    assert gate.policy_for("deploy") == "never"
    assert gate.policy_for("read_file") == "never"
    assert gate.policy_for("read_logs") == "once"
    assert gate.policy_for("rollback") == "always"
    assert ApprovalGate(unopened).policy_for("deploy") is None


def test_equally_specific_globs_that_disagree_take_the_strictest_policy(unopened: Broker) -> None:
    gate = ApprovalGate(unopened, policies={"db_*": "never", "*_prod": "always", "*_stag": "once"})
    assert gate.policy_for("db_prod") == "always"
    assert gate.policy_for("db_stag") == "once"
    assert gate.policy_for("db_dev") == "never"


def test_a_name_holding_glob_characters_is_matched_exactly_by_the_auto_allow_list_as_by_policies(
    unopened: Broker,
) -> None:
    # "files[read]" read as a glob is "files" and one of r, e, a, d: it does not match itself
    gate = ApprovalGate(unopened, policies={"files[read]": "never"}, auto_allow=["files[read]"])
    assert gate.policy_for("files[read]") == "never"
    assert gate.auto_allowed("files[read]")
    assert ApprovalPolicy("bot", auto_allow=("files[read]",)).decide("files[read]").outcome == "allow"
    # and still as a glob, alike in all three
    assert gate.auto_allowed("filesr") and gate.policy_for("filesr") == "never"
    assert ApprovalPolicy("bot", auto_allow=("files[read]",)).decide("filesr").outcome == "allow"
    assert not gate.auto_allowed("files") and gate.policy_for("files") is None


def test_an_unknown_policy_or_hook_error_mode_is_refused_at_construction(unopened: Broker) -> None:
    with pytest.raises(ValueError, match="always, once, never"):
        ApprovalGate(unopened, policies={"deploy": "sometimes"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="on_hook_error"):
        ApprovalGate(unopened, on_hook_error="ignore")  # type: ignore[arg-type]


async def test_the_auto_allow_list_skips_policies_and_the_hook(broker: Broker) -> None:
    consulted: list[str] = []

    async def hook(call: ToolCall) -> Deny:
        consulted.append(call.name)
        return Deny("no")

    tools = Tools()
    runner = gated(broker, tools, policies={"*": "always"}, auto_allow=["read_file", "read_logs"], hook=hook)
    assert (await bounded(runner.run(ToolCall("read_file", {"env": "prod"})))).content == "read_file ok"
    assert consulted == [] and (await broker.list()).items == []


async def test_human_input_tools_are_not_gated(broker: Broker, inbox: Inbox) -> None:
    runner = gated(broker, Tools(), policies={"*": "always"})
    task = asyncio.create_task(runner.run(ToolCall("ask_user", {"question": "Colour?"})))
    request = await inbox.next()
    assert request.kind == "question"
    await broker.resolve(request.id, "red")
    assert (await bounded(task)).content == "red"


# -- the per-call hook -----------------------------------------------------------------------


async def test_the_hook_allows_denies_or_pauses_each_call(broker: Broker, inbox: Inbox, reports: Reports) -> None:
    async def hook(call: ToolCall) -> Allow | Deny | Pause:
        env = call.arguments["env"]
        if call.name == "read_file":
            return Allow()
        if env == "prod":
            return Pause("production needs a second pair of eyes")
        return Deny("staging is frozen")

    tools = Tools()
    runner = gated(broker, tools, reports, hook=hook)
    assert (await bounded(runner.run(ToolCall("read_file", {"env": "prod"})))).content == "read_file ok"
    denied = await bounded(runner.run(ToolCall("deploy", {"env": "staging"})))
    assert (denied.denied, denied.refused, denied.content) == (True, True, "staging is frozen")
    assert (await broker.list()).items == []  # allow and deny never pause

    task = asyncio.create_task(runner.run(ToolCall("deploy", {"env": "prod"})))
    request = await approve_next(inbox)
    assert request.details.startswith("production needs a second pair of eyes")
    assert (await bounded(task)).content == "deploy ok"
    assert [name for name, _ in tools.ran] == ["read_file", "deploy"]
    assert [r.status for r in reports.items] == ["completed", "refused", "completed"]


async def test_a_declared_policy_answers_before_the_hook_is_consulted(broker: Broker) -> None:
    consulted: list[str] = []

    def hook(call: ToolCall) -> Deny:
        consulted.append(call.name)
        return Deny("no")

    runner = gated(broker, Tools(), policies={"read_file": "never"}, hook=hook)
    assert (await bounded(runner.run(ToolCall("read_file", {"env": "prod"})))).content == "read_file ok"
    assert (await bounded(runner.run(ToolCall("deploy", {"env": "prod"})))).denied
    assert consulted == ["deploy"]


async def failing_hook(call: ToolCall) -> Allow:
    raise ConnectionError("hook endpoint returned 503")


async def hanging_hook(call: ToolCall) -> Allow:
    await asyncio.Event().wait()
    return Allow()


async def ambiguous_hook(call: ToolCall) -> Any:
    return "allow"  # not a verdict: ambiguous


@pytest.mark.parametrize("hook", [failing_hook, hanging_hook, ambiguous_hook], ids=["raises", "hangs", "ambiguous"])
async def test_a_hook_that_cannot_decide_fails_closed_by_default(broker: Broker, hook: Any) -> None:
    tools = Tools()
    runner = gated(broker, tools, hook=hook, hook_timeout=0.01)
    result = await bounded(runner.run(ToolCall("deploy", {"env": "prod"})))
    assert (result.refused, result.denied) == (True, False)
    assert "503" not in result.content
    assert tools.ran == [] and (await broker.list()).items == []


async def test_a_hook_that_returns_no_verdict_is_logged_with_what_it_returned(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    # Refused as "its approval check failed", with the reason only in the refusal's detail:
    # a raising or slow hook was logged, one returning "allow" (or None) was not.
    caplog.set_level(logging.WARNING, logger="interlock")
    runner = gated(broker, Tools(), hook=ambiguous_hook)
    assert (await bounded(runner.run(ToolCall("deploy", {"env": "prod"})))).refused
    (logged,) = [r.getMessage() for r in caplog.records if "approval hook failed" in r.getMessage()]
    assert "the approval hook returned 'allow', not Allow, Deny or Pause" in logged and "deploy" in logged


async def test_on_hook_error_pause_asks_a_person_instead(broker: Broker, inbox: Inbox) -> None:
    tools = Tools()
    runner = gated(broker, tools, hook=failing_hook, on_hook_error="pause")
    task = asyncio.create_task(runner.run(ToolCall("deploy", {"env": "prod"})))
    request = await approve_next(inbox)
    assert "could not decide" in request.details
    assert (await bounded(task)).content == "deploy ok"


async def test_on_hook_error_fail_run_stops_the_run_and_reports_the_call_failed_once(
    broker: Broker, reports: Reports
) -> None:
    tools = Tools()
    runner = gated(broker, tools, reports, hook=failing_hook, on_hook_error="fail-run")
    with pytest.raises(RunFailed, match="503"):
        await bounded(runner.run(ToolCall("deploy", {"env": "prod"}, "c1")))
    with pytest.raises(RunFailed):
        await bounded(runner.run_all([ToolCall("deploy", {"env": "prod"}, "c2")]))
    assert reports.statuses() == [("c1", "failed"), ("c2", "failed")]
    assert tools.ran == []


# -- deciding ---------------------------------------------------------------------------------


async def test_a_denial_is_terminal_and_echoes_the_persons_reason_verbatim(
    broker: Broker, inbox: Inbox, reports: Reports
) -> None:
    tools = Tools()
    runner = gated(broker, tools, reports, policies={"deploy": "always"})
    reason = "Not during the freeze — ask again on Monday!"

    task = asyncio.create_task(runner.run(ToolCall("deploy", {"env": "prod"})))
    request = await inbox.next()
    await broker.reject(request.id, reason, by="alice")
    rejected = await bounded(task)

    task = asyncio.create_task(runner.run(ToolCall("deploy", {"env": "prod"})))
    await approve_next(inbox, False, comment=reason)
    answered_no = await bounded(task)

    for result in (rejected, answered_no):
        assert (result.denied, result.refused, result.is_error) == (True, True, True)
        assert result.content == reason and result.reason == reason
    assert tools.ran == []
    assert [r.status for r in reports.items] == ["refused", "refused"]


async def test_the_approver_may_edit_the_arguments_within_the_schema(broker: Broker, inbox: Inbox) -> None:
    tools = Tools()
    runner = gated(broker, tools, policies={"deploy": "always"})
    task = asyncio.create_task(runner.run(ToolCall("deploy", {"env": "prod", "version": "2.3"})))
    request = await inbox.next()
    with pytest.raises(InvalidAnswer):
        await broker.resolve(request.id, {"approve": True, "arguments": {"env": "moon"}})
    assert (await broker.get(request.id)).status is Status.PENDING
    await broker.resolve(request.id, {"approve": True, "arguments": {"env": "staging", "version": "2.3"}})
    assert (await bounded(task)).content == "deploy ok"
    assert tools.ran == [("deploy", {"env": "staging", "version": "2.3"})]


async def test_an_approval_is_bound_to_the_digest_of_the_canonical_arguments(broker: Broker, inbox: Inbox) -> None:
    runner = gated(broker, Tools(), policies={"deploy": "always"})
    task = asyncio.create_task(runner.run(ToolCall("deploy", {"version": "2.3", "env": "prod"}, "c1")))
    request = await approve_next(inbox)
    await bounded(task)
    expected = arguments_digest("deploy", {"env": "prod", "version": "2.3"})
    assert request.context["digest"] == expected
    assert canonical_json({"b": 1, "a": [1, "é"]}) == '{"a":[1,"é"],"b":1}'
    assert arguments_digest("deploy", {"env": "prod", "version": "2.3"}) != arguments_digest("deploy", {"env": "prod"})


async def test_a_retry_with_other_arguments_asks_again(broker: Broker, inbox: Inbox) -> None:
    tools = Tools()
    runner = gated(broker, tools, policies={"deploy": "always"})
    first = asyncio.create_task(runner.run(ToolCall("deploy", {"env": "prod"}, "c1", session="s1")))
    await approve_next(inbox, False, comment="use staging first")
    assert (await bounded(first)).denied
    retry = asyncio.create_task(runner.run(ToolCall("deploy", {"env": "staging"}, "c1", session="s1")))
    second = await approve_next(inbox)
    assert second.context["arguments"] == {"env": "staging"}
    assert (await bounded(retry)).content == "deploy ok"
    assert tools.ran == [("deploy", {"env": "staging"})]


async def test_a_replayed_call_never_runs_the_tool_twice(broker: Broker, inbox: Inbox) -> None:
    tools = Tools()
    runner = gated(broker, tools, policies={"deploy": "always"})
    call = ToolCall("deploy", {"env": "prod"}, "c1", session="s1", agent="ops")
    task = asyncio.create_task(runner.run(call))
    await approve_next(inbox)
    assert (await bounded(task)).content == "deploy ok"

    replay = await bounded(runner.run(call))
    assert replay.refused and not replay.denied and "already decided" in replay.content
    other_process = await bounded(gated(broker, tools, policies={"deploy": "always"}).run(call))
    assert other_process.refused
    assert tools.ran == [("deploy", {"env": "prod"})]
    assert len((await broker.list()).items) == 1


async def test_two_waits_on_one_approval_consume_it_once(broker: Broker, inbox: Inbox) -> None:
    tools = Tools()
    runner = gated(broker, tools, policies={"deploy": "always"})
    call = ToolCall("deploy", {"env": "prod"}, "c1", session="s1")
    first = asyncio.create_task(runner.run(call))
    await inbox.next()
    second = asyncio.create_task(runner.run(call))  # the same call, delivered twice
    (request,) = (await broker.list()).items
    await anyio.wait_all_tasks_blocked()
    await broker.resolve(request.id, {"approve": True})
    results = [await bounded(first), await bounded(second)]
    assert sorted(r.status for r in results) == ["completed", "refused"]
    assert tools.ran == [("deploy", {"env": "prod"})]


async def test_an_approval_nobody_gives_in_time_fails_the_call_without_refusing_it(broker: Broker) -> None:
    tools = Tools()
    runner = gated(broker, tools, policies={"deploy": "always"}, timeout=0.05)
    result = await bounded(runner.run(ToolCall("deploy", {"env": "prod"})))
    assert (result.is_error, result.refused) == (True, False)
    assert json.loads(result.content) == {"error": "Approval timed out after 0.05s for tool 'deploy'"}
    assert tools.ran == []


async def test_an_approval_given_up_fails_the_call_plainly(broker: Broker, inbox: Inbox) -> None:
    tools = Tools()
    runner = gated(broker, tools, policies={"deploy": "always"})
    task = asyncio.create_task(runner.run(ToolCall("deploy", {"env": "prod"})))
    request = await inbox.next()
    await broker.cancel(request.id, "internal: shutting down")
    result = await bounded(task)
    assert json.loads(result.content) == {"error": "Tool 'deploy' failed"}
    assert tools.ran == []


async def test_a_custom_preview_is_what_the_approver_reads(broker: Broker, inbox: Inbox) -> None:
    previews = {"deploy": lambda call: f"Ship {call.arguments['version']} to {call.arguments['env'].upper()}"}
    runner = gated(broker, Tools(), policies={"deploy": "always"}, previews=previews)
    task = asyncio.create_task(runner.run(ToolCall("deploy", {"env": "prod", "version": "2.3"})))
    request = await approve_next(inbox)
    assert request.details == "Ship 2.3 to PROD"
    await bounded(task)


# -- requires_approval ------------------------------------------------------------------------


async def test_requires_approval_puts_the_gate_in_front_of_a_plain_function(broker: Broker, inbox: Inbox) -> None:
    gate = ApprovalGate(broker, to="alice")
    ran: list[tuple[str, int]] = []

    @requires_approval(gate, session="s1", agent="ops")
    async def scale(service: str, replicas: int = 3) -> str:
        ran.append((service, replicas))
        return f"{service} x{replicas}"

    task = asyncio.create_task(scale("api"))
    request = await inbox.next()
    assert (request.origin.tool_name, request.to, request.origin.session) == ("scale", "alice", "s1")
    assert request.origin.arguments == {"service": "api", "replicas": 3}
    await broker.resolve(request.id, {"approve": True}, by="alice")
    assert await bounded(task) == "api x3"

    task = asyncio.create_task(scale("api", replicas=50))
    request = await inbox.next()
    await broker.reject(request.id, "50 is too many")
    with pytest.raises(ApprovalDenied) as caught:
        await bounded(task)
    assert caught.value.reason == "50 is too many"
    assert ran == [("api", 3)]
    assert scale.__name__ == "scale"


def test_requires_approval_is_typed_as_giving_a_coroutine_function() -> None:
    # `asyncio.create_task(scale(...))` and `asyncio.run(scale(...))`, as above, take a
    # coroutine: typed as returning a bare Awaitable, a type checker refused both.
    decorator = get_type_hints(requires_approval)["return"]
    (_, decorated) = get_args(decorator)
    assert get_origin(get_args(decorated)[-1]) is Coroutine


async def test_requires_approval_runs_the_edited_arguments(broker: Broker, inbox: Inbox) -> None:
    gate = ApprovalGate(broker)
    schema = {
        "type": "object",
        "properties": {"service": {"type": "string"}, "replicas": {"type": "integer", "maximum": 10}},
    }

    @requires_approval(gate, schema=schema)
    async def scale(service: str, replicas: int) -> str:
        return f"{service} x{replicas}"

    task = asyncio.create_task(scale("api", 50))
    request = await inbox.next()
    with pytest.raises(InvalidAnswer):
        await broker.resolve(request.id, {"approve": True, "arguments": {"service": "api", "replicas": 50}})
    await broker.resolve(request.id, {"approve": True, "arguments": {"service": "api", "replicas": 10}})
    assert await bounded(task) == "api x10"


async def test_requires_approval_follows_the_gate_policy_and_propagates_outcomes(broker: Broker, inbox: Inbox) -> None:
    gate = ApprovalGate(broker, policies={"lookup": "never"}, timeout=0.05)

    @requires_approval(gate)
    async def lookup(key: str) -> str:
        return key.upper()

    @requires_approval(gate)
    async def purge(key: str) -> str:
        return "purged"

    @requires_approval(ApprovalGate(broker))
    async def wipe(key: str) -> str:
        return "wiped"

    assert await bounded(lookup("abc")) == "ABC"
    with pytest.raises(Expired):
        await bounded(purge("abc"))
    await inbox.next()  # the approval that expired

    task = asyncio.create_task(wipe("abc"))
    request = await inbox.next()
    await broker.cancel(request.id)
    with pytest.raises(Cancelled):
        await bounded(task)


async def test_requires_approval_takes_the_context_of_the_running_tool_call(broker: Broker, inbox: Inbox) -> None:
    gate = ApprovalGate(broker)

    @requires_approval(gate)
    async def send_email(to: str) -> str:
        return "sent"

    async def notify(**arguments: Any) -> str:
        return await send_email(arguments["who"])

    runner = ToolRunner(broker, [ToolFunctions({"notify": notify})])
    task = asyncio.create_task(
        runner.run(ToolCall("notify", {"who": "ops@x"}, session="s9", agent="mailer", to="carol"))
    )
    request = await approve_next(inbox)
    assert (request.origin.session, request.origin.agent, request.to) == ("s9", "mailer", "carol")
    assert (await bounded(task)).content == "sent"


async def test_a_lone_surrogate_in_the_arguments_is_refused_as_not_plain_json_and_asks_nobody(
    broker: Broker, inbox: Inbox
) -> None:
    # A model can write "\\ud800" in its JSON arguments: the string decodes, but no UTF-8
    # text (a digest, a stored request) can carry it. It had escaped the gate as a raw
    # UnicodeEncodeError, failing a parked run's whole pass instead of this one call.
    gate = ApprovalGate(broker, policies={"deploy": "always"}, to="alice")
    call = ToolCall("deploy", json.loads('{"env": "prod", "version": "\\ud800"}'), "c1", session="s1", agent="ops")
    with pytest.raises(ApprovalRefused, match="not plain JSON") as refused:
        await bounded(gate.authorize(call))
    assert "lone surrogate" in (refused.value.detail or "")
    with pytest.raises(ApprovalRefused, match="not plain JSON"):
        await bounded(gate.begin(call))
    assert await inbox.created_since() == []


async def test_arguments_that_are_not_plain_json_fail_closed(broker: Broker) -> None:
    gate = ApprovalGate(broker, policies={"*": "never"})

    @requires_approval(gate)
    async def store(blob: object) -> str:
        return "stored"

    with pytest.raises(ApprovalRefused, match="not plain JSON"):
        await bounded(store(object()))
    with pytest.raises(TypeError, match="by name"):

        @requires_approval(gate)
        async def positional(a: int, /) -> None: ...

    with pytest.raises(TypeError, match=r"remove: requires_approval wraps an async function \(`async def`\)"):

        @requires_approval(gate)  # type: ignore[arg-type]
        def remove(path: str) -> None: ...  # called without await, it would have done nothing at all

    def logged(fn: Any) -> Any:  # a decorator of the usual kind, whose wrapper is a plain function
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        return wrapper

    @requires_approval(gate)
    @logged
    async def archive(path: str) -> str:
        return f"archived {path}"

    assert inspect.iscoroutinefunction(archive)  # taken: what it wraps is an async function
