"""The approval policy model: what a stored policy says about a tool, and the refusal of
bad policies with the field named."""

from __future__ import annotations

from typing import Any

import pytest

from interlock.approval_policies import (
    ApprovalPolicy,
    HookVerdict,
    PolicyHook,
    hook_verdict_from_dict,
    policy_from_dict,
    policy_from_wire,
    policy_to_dict,
)
from interlock.errors import InvalidRequest

HOOK = {"url": "https://hooks.example.com/approve", "secret": "0123456789abcdef"}


def test_autoallow_and_never_and_an_omitted_gated_tool_run_at_once() -> None:
    policy = ApprovalPolicy("bot", approval="always", gated_tools=("deploy", "db_*"), auto_allow=("db_read",))
    assert policy.decide("db_read").outcome == "allow"
    assert policy.decide("read_file").reason == "gatedTools omits 'read_file'"
    assert (policy.decide("db_drop").outcome, policy.decide("db_drop").mode) == ("ask", "always")
    never = ApprovalPolicy("bot", approval="never", hook=PolicyHook("https://h", "s" * 16))
    assert never.decide("x").outcome == "allow"


def test_a_gated_tool_goes_to_the_hook_when_there_is_one_and_pauses_under_the_mode() -> None:
    hook = PolicyHook("https://h.example", "s" * 16)
    decision = ApprovalPolicy("bot", approval="once", hook=hook).decide("x")
    assert (decision.outcome, decision.mode) == ("hook", "once")
    assert ApprovalPolicy("bot", hook=hook).decide("x").mode == "always"


def test_a_policy_with_only_an_autoallow_list_says_nothing_of_other_tools() -> None:
    assert ApprovalPolicy("bot", auto_allow=("ls",)).decide("rm").outcome == "none"


def test_a_policy_round_trips_through_its_json_with_novos_field_names() -> None:
    data = {
        "agent": "bot",
        "server": "github",
        "approval": "once",
        "gatedTools": ["push"],
        "autoAllow": ["read_*"],
        "hook": {**HOOK, "onHookError": "fail-run", "timeout": 3},
    }
    policy = policy_from_dict(data)
    shown = policy_to_dict(policy)
    assert shown["hook"] == {"url": HOOK["url"], "onHookError": "fail-run", "timeout": 3.0, "hasSecret": True}
    assert "secret" not in str(shown)
    assert policy_from_wire(policy_to_dict(policy, secrets=True)) == policy


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"approval": "sometimes"}, "approval"),
        ({"gatedTools": "deploy"}, "gatedTools"),
        ({"gatedTools": ["deploy", 3]}, r"gatedTools\[1\]"),
        ({"autoAllow": {"a": 1}}, "autoAllow"),
        ({"hook": {"url": "ftp://h.example/x", "secret": HOOK["secret"]}}, "hook.url"),
        ({"hook": {"url": "http://hooks.example.com/x", "secret": HOOK["secret"]}}, "hook.url"),
        ({"hook": {"url": "https://u:p@h.example/x", "secret": HOOK["secret"]}}, "hook.url"),
        ({"hook": {"url": HOOK["url"], "secret": "short"}}, "hook.secret"),
        ({"hook": {**HOOK, "onHookError": "retry"}}, "hook.onHookError"),
        ({"hook": {**HOOK, "timeout": 0}}, "hook.timeout"),
        ({"hook": {**HOOK, "timeout": 3600}}, "hook.timeout"),
        ({"hook": "https://h.example"}, "hook"),
        ({"approvals": "always"}, "approvals"),
        ({"agent": None}, "agent"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest, match=f"^{field}"):
        policy_from_dict({"agent": "bot", **data})


def test_http_is_taken_for_a_loopback_hook_or_when_allowed() -> None:
    for url in ("http://127.0.0.1:9000/x", "http://localhost/x", "http://[::1]/x"):
        assert policy_from_dict({"agent": "bot", "hook": {**HOOK, "url": url}}).hook is not None
    remote = {"agent": "bot", "hook": {**HOOK, "url": "http://hooks.internal/x"}}
    assert policy_from_dict(remote, allow_http=True).hook is not None


def test_the_path_fills_in_the_agent_and_server_and_must_agree_with_the_body() -> None:
    assert policy_from_dict({}, agent="bot", server="gh").server == "gh"
    with pytest.raises(InvalidRequest, match="agent: the body says 'eve'"):
        policy_from_dict({"agent": "eve"}, agent="bot")


@pytest.mark.parametrize("answer", [None, [], {"decision": "yes"}, {"decision": "deny", "reason": 3}])
def test_a_hook_answer_that_is_not_a_verdict_is_refused(answer: Any) -> None:
    with pytest.raises(ValueError, match="hook"):
        hook_verdict_from_dict(answer if not isinstance(answer, dict) else {**answer, "callKey": "k1"}, "k1")


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ({"decision": "allow"}, "names no call"),
        ({"decision": "allow", "callKey": None}, "names no call"),
        ({"decision": "allow", "callKey": "k2"}, "names another call"),
        ({"decision": "allow", "callKey": ["k1"]}, "names another call"),
    ],
)
def test_a_hook_answer_is_taken_only_for_the_call_it_names(answer: Any, problem: str) -> None:
    assert hook_verdict_from_dict({"decision": "deny", "reason": "no", "callKey": "k1"}, "k1") == HookVerdict(
        "deny", "no"
    )
    with pytest.raises(ValueError, match=problem):
        hook_verdict_from_dict(answer, "k1")
