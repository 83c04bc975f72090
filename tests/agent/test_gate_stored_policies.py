"""The approval gate under an agent's stored approval policy, on every backend: the
declarative modes, gatedTools and autoAllow, the stricter of the stored and the Python
policy, a change applying without a restart, a hook by URL (signed both ways) and its
onHookError, and the audit of decisions made without a person."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import Response
from starlette.routing import Route

from interlock import Broker, Deny, Request
from interlock.agent import Allow, ApprovalGate, ToolCall, ToolFunctions, ToolRunner, arguments_digest
from interlock.errors import ApprovalDenied, ApprovalRefused, RunFailed
from interlock.webhooks import signed_headers, verify

from .support import BOUND, Inbox, bounded

pytestmark = pytest.mark.anyio

SECRET = "hook-secret-0123456789"


@dataclass
class Hook:
    """A tool-approval hook on a loopback port: it checks each call's signature, keeps the
    bodies and idempotency keys it received and answers with `answer(body)`: (status,
    JSON, sign it), naming the call it answers as a hook must (its `callKey`) unless
    `echo` is False or the answer names one itself. It keeps each answer it sent, as
    sent; `replay` sends one of them again, whatever the call."""

    url: str = ""
    received: list[dict[str, Any]] = field(default_factory=list)
    keys: list[str | None] = field(default_factory=list)
    signatures_ok: list[bool] = field(default_factory=list)
    answer: Callable[[dict[str, Any]], tuple[int, Any, bool]] = lambda body: (200, {"decision": "allow"}, True)
    echo: bool = True
    delay: asyncio.Event | None = None
    sent: list[tuple[bytes, dict[str, str]]] = field(default_factory=list)
    replay: tuple[bytes, dict[str, str]] | None = None

    def registration(self, on_error: str = "deny", timeout: float = 5) -> dict[str, Any]:
        return {"url": self.url, "secret": SECRET, "onHookError": on_error, "timeout": timeout}


@pytest.fixture
async def hook() -> AsyncIterator[Hook]:
    state = Hook()

    async def receive(request: HttpRequest) -> Response:
        raw = await request.body()
        try:
            verify(SECRET, dict(request.headers), raw)
            state.signatures_ok.append(True)
        except ValueError:
            state.signatures_ok.append(False)
        body = json.loads(raw)
        state.received.append(body)
        state.keys.append(request.headers.get("Idempotency-Key"))
        if state.delay is not None:
            await state.delay.wait()
        if state.replay is not None:
            content, headers = state.replay
            return Response(content, headers=headers, media_type="application/json")
        status, answer, sign = state.answer(body)
        if state.echo and isinstance(answer, dict):
            answer = {"callKey": body["callKey"], **answer}
        content = json.dumps(answer).encode()
        headers = signed_headers(SECRET if sign else "another-secret-entirely", content)
        state.sent.append((content, headers))
        return Response(content, status_code=status, headers=headers, media_type="application/json")

    app = Starlette(routes=[Route("/approve", receive, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    async with asyncio.timeout(BOUND):
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.005)
    state.url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}/approve"
    try:
        yield state
    finally:
        if state.delay is not None:
            state.delay.set()
        server.should_exit = True
        await asyncio.wait_for(task, BOUND)


def call(name: str = "deploy", n: int = 0, **fields: Any) -> ToolCall:
    return ToolCall(name, {"env": "prod", "n": n}, f"c-{name}-{n}", session="s1", agent="ops", **fields)


async def approve_next(inbox: Inbox, answer: bool = True) -> Request:
    request = await inbox.next()
    assert request.kind == "approval"
    assert await inbox.broker.resolve(request.id, {"approve": answer}, by=request.to)
    return request


async def decisions(broker: Broker) -> list[dict[str, Any]]:
    """The audit of decisions made without a person: the updates the gate recorded."""
    events = await broker.find_events(limit=500)
    return [dict(e.data["data"]) for e in events if e.type == "informed" and "decision" in e.data.get("data", {})]


# -- the declarative policy ----------------------------------------------------------------


async def test_a_stored_never_runs_every_call_without_a_person_and_says_why(broker: Broker) -> None:
    await broker.set_approval_policy({"agent": "ops", "approval": "never"})
    gate = ApprovalGate(broker, to="alice")
    assert await bounded(gate.authorize(call())) == {"env": "prod", "n": 0}
    assert (await broker.list(kind="approval")).items == []
    (audit,) = await decisions(broker)
    assert (audit["decision"], audit["tool"], audit["reason"]) == ("allow", "deploy", "approval is 'never'")
    assert audit["policy"] == {"agent": "ops", "server": None, "version": 1}


async def test_a_decision_the_audit_could_not_record_is_kept_by_the_log_whole(
    broker: Broker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    await broker.set_approval_policy({"agent": "ops", "approval": "never"})

    async def away(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("the server is away")

    monkeypatch.setattr(broker, "inform", away)  # the audit's write meets an outage; the call goes on
    gate = ApprovalGate(broker, to="alice")
    assert await bounded(gate.authorize(call(run="r-1"))) == {"env": "prod", "n": 0}
    [line] = [r for r in caplog.records if "could not record" in r.getMessage()]
    assert line.levelno == logging.WARNING
    assert line.getMessage().startswith(
        "could not record in the audit that tool call c-deploy-0 (deploy) of run r-1 ran without asking: "
        "approval is 'never' ("
    )


async def test_a_stored_always_asks_the_person_for_each_gated_call(broker: Broker, inbox: Inbox) -> None:
    await broker.set_approval_policy({"agent": "ops", "approval": "always", "gatedTools": ["deploy"]})
    gate = ApprovalGate(broker, to="alice")
    for n in range(2):
        task = asyncio.create_task(gate.authorize(call(n=n)))
        request = await approve_next(inbox)
        assert request.context["policy"] == "always"
        assert await bounded(task) == {"env": "prod", "n": n}


async def test_a_stored_once_asks_once_per_session(broker: Broker, inbox: Inbox) -> None:
    await broker.set_approval_policy({"agent": "ops", "approval": "once"})
    gate = ApprovalGate(broker, to="alice")
    task = asyncio.create_task(gate.authorize(call(n=0)))
    await approve_next(inbox)
    await bounded(task)
    assert await bounded(gate.authorize(call(n=1))) == {"env": "prod", "n": 1}
    assert len((await broker.list(kind="approval")).items) == 1


async def test_a_tool_gatedtools_omits_runs_without_consulting_the_hook(broker: Broker, hook: Hook) -> None:
    hook.answer = lambda body: (200, {"decision": "deny", "reason": "no"}, True)
    policy = {"agent": "ops", "approval": "always", "gatedTools": ["deploy"], "hook": hook.registration()}
    await broker.set_approval_policy(policy)
    gate = ApprovalGate(broker, to="alice")
    assert await bounded(gate.authorize(call("read_logs"))) == {"env": "prod", "n": 0}
    assert hook.received == []
    audit = [(d["tool"], d["reason"]) for d in await decisions(broker)]
    assert audit == [("read_logs", "gatedTools omits 'read_logs'")]


async def test_autoallow_skips_the_hook_and_runs_at_once(broker: Broker, hook: Hook) -> None:
    hook.answer = lambda body: (200, {"decision": "deny", "reason": "no"}, True)
    await broker.set_approval_policy({"agent": "ops", "autoAllow": ["read_*"], "hook": hook.registration()})
    gate = ApprovalGate(broker, to="alice")
    assert await bounded(gate.authorize(call("read_file"))) == {"env": "prod", "n": 0}
    assert hook.received == []
    with pytest.raises(ApprovalDenied, match="no"):
        await bounded(gate.authorize(call("deploy")))
    assert len(hook.received) == 1


async def test_the_stricter_of_the_stored_and_the_python_policy_wins(broker: Broker, inbox: Inbox) -> None:
    await broker.set_approval_policy({"agent": "ops", "approval": "never"})
    strict_here = ApprovalGate(broker, to="alice", policies={"deploy": "always"})
    task = asyncio.create_task(strict_here.authorize(call(n=0)))
    await approve_next(inbox)
    await bounded(task)

    await broker.set_approval_policy({"agent": "ops", "approval": "always"})
    lax_here = ApprovalGate(broker, to="alice", policies={"deploy": "never"}, auto_allow=["deploy"])
    task = asyncio.create_task(lax_here.authorize(call(n=1)))
    request = await approve_next(inbox)
    assert request.context["policy"] == "always"
    await bounded(task)


class Consulted:
    """The gate's own Python hook: keeps the tools it was asked about, answers `verdict`."""

    def __init__(self, verdict: Allow | Deny) -> None:
        self.verdict = verdict
        self.tools: list[str] = []

    def __call__(self, call: ToolCall) -> Allow | Deny:
        self.tools.append(call.name)
        return self.verdict


async def test_a_stored_never_answers_before_the_gate_s_own_hook(broker: Broker) -> None:
    await broker.set_approval_policy({"agent": "ops", "approval": "never"})
    hook = Consulted(Deny("frozen"))
    gate = ApprovalGate(broker, to="alice", hook=hook)
    assert await bounded(gate.authorize(call())) == {"env": "prod", "n": 0}
    assert hook.tools == []
    assert (await broker.list(kind="approval")).items == []
    assert [(d["decision"], d["reason"]) for d in await decisions(broker)] == [("allow", "approval is 'never'")]


async def test_a_tool_gatedtools_omits_runs_without_consulting_the_gate_s_own_hook(broker: Broker) -> None:
    await broker.set_approval_policy({"agent": "ops", "approval": "always", "gatedTools": ["deploy"]})
    hook = Consulted(Deny("nothing runs today"))
    gate = ApprovalGate(broker, to="alice", hook=hook)
    assert await bounded(gate.authorize(call("read_logs"))) == {"env": "prod", "n": 0}
    assert hook.tools == []
    audit = [(d["decision"], d["tool"], d["reason"]) for d in await decisions(broker)]
    assert audit == [("allow", "read_logs", "gatedTools omits 'read_logs'")]


async def test_a_stored_autoallow_runs_without_consulting_the_gate_s_own_hook(broker: Broker) -> None:
    await broker.set_approval_policy({"agent": "ops", "approval": "always", "autoAllow": ["read_*"]})
    hook = Consulted(Deny("nothing runs today"))
    gate = ApprovalGate(broker, to="alice", hook=hook)
    assert await bounded(gate.authorize(call("read_logs"))) == {"env": "prod", "n": 0}
    assert hook.tools == []


async def test_a_tool_gatedtools_lists_is_put_to_the_gate_s_own_hook_whose_denial_refuses_it(broker: Broker) -> None:
    await broker.set_approval_policy({"agent": "ops", "approval": "always", "gatedTools": ["deploy"]})
    hook = Consulted(Deny("prod is frozen"))
    gate = ApprovalGate(broker, to="alice", hook=hook)
    with pytest.raises(ApprovalDenied, match="prod is frozen"):
        await bounded(gate.authorize(call("deploy")))
    assert hook.tools == ["deploy"]
    assert (await broker.list(kind="approval")).items == []


async def test_the_gate_s_own_hook_allowing_a_gated_tool_still_leaves_it_to_a_person(
    broker: Broker, inbox: Inbox
) -> None:
    await broker.set_approval_policy({"agent": "ops", "approval": "always", "gatedTools": ["deploy"]})
    hook = Consulted(Allow())
    gate = ApprovalGate(broker, to="alice", hook=hook)
    task = asyncio.create_task(gate.authorize(call("deploy")))
    request = await approve_next(inbox)
    assert request.context["policy"] == "always"
    assert await bounded(task) == {"env": "prod", "n": 0}
    assert hook.tools == ["deploy"]


async def test_a_stored_never_does_not_loosen_a_tool_the_gate_holds_at_always_nor_call_its_hook(
    broker: Broker, inbox: Inbox
) -> None:
    await broker.set_approval_policy({"agent": "ops", "approval": "never"})
    hook = Consulted(Deny("frozen"))
    gate = ApprovalGate(broker, to="alice", policies={"deploy": "always"}, hook=hook)
    task = asyncio.create_task(gate.authorize(call("deploy")))
    await approve_next(inbox)
    assert await bounded(task) == {"env": "prod", "n": 0}
    assert await bounded(gate.authorize(call("search"))) == {"env": "prod", "n": 0}
    assert hook.tools == []


async def test_a_changed_policy_applies_to_the_next_decision_without_a_restart(broker: Broker, inbox: Inbox) -> None:
    gate = ApprovalGate(broker, to="alice")
    assert await bounded(gate.authorize(call(n=0))) == {"env": "prod", "n": 0}  # no policy: runs
    stored = await broker.set_approval_policy({"agent": "ops", "approval": "always"})
    task = asyncio.create_task(gate.authorize(call(n=1)))
    await approve_next(inbox)
    await bounded(task)
    replaced = await broker.set_approval_policy({"agent": "ops", "approval": "never"})
    assert replaced.version == stored.version + 1
    assert await bounded(gate.authorize(call(n=2))) == {"env": "prod", "n": 2}
    assert await broker.delete_approval_policy("ops")
    assert not await broker.delete_approval_policy("ops")
    assert await bounded(gate.authorize(call(n=3))) == {"env": "prod", "n": 3}
    assert len((await broker.list(kind="approval")).items) == 1


async def test_a_tool_servers_policy_applies_to_its_tools_before_the_agents_own(broker: Broker, inbox: Inbox) -> None:
    await broker.set_approval_policy({"agent": "ops", "approval": "always"})
    await broker.set_approval_policy({"agent": "ops", "server": "docs", "approval": "never"})
    gate = ApprovalGate(broker, to="alice")
    assert await bounded(gate.authorize(call(server="docs"))) == {"env": "prod", "n": 0}
    docs_gate = ApprovalGate(broker, to="alice", server="docs")
    assert await bounded(docs_gate.authorize(call(n=1))) == {"env": "prod", "n": 1}
    task = asyncio.create_task(gate.authorize(call(n=2, server="github")))
    await approve_next(inbox)
    await bounded(task)
    assert [(p.agent, p.server) for p in await broker.list_approval_policies("ops")] == [("ops", ""), ("ops", "docs")]


async def test_a_gate_can_ignore_stored_policies(broker: Broker) -> None:
    await broker.set_approval_policy({"agent": "ops", "approval": "always"})
    gate = ApprovalGate(broker, to="alice", stored_policies=False)
    assert await bounded(gate.authorize(call())) == {"env": "prod", "n": 0}


# -- the hook by URL -------------------------------------------------------------------------


async def test_the_hook_receives_the_call_signed_and_its_allow_runs_it(broker: Broker, hook: Hook) -> None:
    await broker.set_approval_policy({"agent": "ops", "hook": hook.registration()})
    gate = ApprovalGate(broker, to="alice")
    assert await bounded(gate.authorize(call(run=None))) == {"env": "prod", "n": 0}
    (body,) = hook.received
    assert hook.signatures_ok == [True]
    assert body == {
        "type": "tool_approval",
        "toolName": "deploy",
        "input": {"env": "prod", "n": 0},
        "digest": arguments_digest("deploy", {"env": "prod", "n": 0}),
        "toolCallId": "c-deploy-0",
        "callKey": hook.keys[0],
        "agent": "ops",
        "server": None,
        "session": "s1",
        "run": None,
        "to": "alice",
        "policyVersion": 1,
    }
    assert [d["reason"] for d in await decisions(broker)] == ["the approval hook allowed it"]
    assert re.fullmatch("[0-9a-f]{64}", body["callKey"])


async def test_a_signed_answer_is_taken_only_for_the_call_it_names(broker: Broker, hook: Hook) -> None:
    """An answer captured for one call and sent back (signed, in its replay window) as the
    answer for another is refused as a hook that cannot decide: `onHookError`."""
    await broker.set_approval_policy({"agent": "ops", "hook": hook.registration()})
    gate = ApprovalGate(broker, to="alice")
    assert await bounded(gate.authorize(call(n=0))) == {"env": "prod", "n": 0}
    (allow,) = hook.sent
    hook.replay = allow
    others = [
        call(n=1),  # other arguments (and another call id)
        ToolCall("deploy", {"env": "prod", "n": 2}, "c-deploy-0", session="s1", agent="ops"),  # the same id
        replace(call(n=0), session="s2"),  # the same call id and arguments, in another session
        replace(call(n=0), run="r-other"),  # ... or run
    ]
    for other in others:
        with pytest.raises(ApprovalRefused, match="approval hook failed") as refused:
            await bounded(gate.authorize(other))
        assert refused.value.detail == (
            "the hook's answer is not a verdict on this call: "
            "it names another call (a callKey other than the one it was sent)"
        )
    assert [d["decision"] for d in await decisions(broker)] == ["allow"] + ["deny"] * len(others)
    hook.replay = None
    assert await bounded(gate.authorize(call(n=3))) == {"env": "prod", "n": 3}  # a fresh answer is taken


async def test_the_idempotency_key_names_the_call_as_its_approval_does(broker: Broker, hook: Hook) -> None:
    """A hook that caches its verdicts by `Idempotency-Key` gives a call the verdict made
    for that same call only: not one made for the same call id with other arguments."""
    await broker.set_approval_policy({"agent": "ops", "hook": hook.registration()})
    await broker.set_approval_policy({"agent": "ops-2", "hook": hook.registration()})
    gate = ApprovalGate(broker, to="alice")
    same_id = "c-deploy-0"
    calls = [
        call(n=0),
        call(n=0),  # the same call asked again (a restarted agent)
        ToolCall("deploy", {"env": "prod", "n": 1}, same_id, session="s1", agent="ops"),  # other arguments
        ToolCall("deploy", {"env": "prod", "n": 0}, same_id, session="s2", agent="ops"),  # another session
        ToolCall("deploy", {"env": "prod", "n": 0}, same_id, session="s1", agent="ops-2"),  # another agent
    ]
    for each in calls:
        await bounded(gate.authorize(each))
    assert [body["toolCallId"] for body in hook.received] == [same_id] * 5
    first, again, *others = hook.keys
    assert first == again
    assert len({first, *others}) == 4
    assert hook.keys == [body["callKey"] for body in hook.received]


async def test_the_hooks_deny_refuses_without_a_person_and_its_pause_asks_one(
    broker: Broker, hook: Hook, inbox: Inbox
) -> None:
    verdicts = iter([("deny", "not on Fridays"), ("pause", "large change")])

    def answer(body: dict[str, Any]) -> tuple[int, Any, bool]:
        decision, reason = next(verdicts)
        return 200, {"decision": decision, "reason": reason}, True

    hook.answer = answer
    await broker.set_approval_policy({"agent": "ops", "approval": "always", "hook": hook.registration()})
    gate = ApprovalGate(broker, to="alice")
    with pytest.raises(ApprovalDenied) as denied:
        await bounded(gate.authorize(call(n=0)))
    assert denied.value.reason == "not on Fridays"
    assert (await broker.list(kind="approval")).items == []
    task = asyncio.create_task(gate.authorize(call(n=1)))
    request = await approve_next(inbox)
    assert request.details is not None and request.details.startswith("large change")
    await bounded(task)
    assert [d["decision"] for d in await decisions(broker)] == ["deny"]


@pytest.mark.parametrize(
    ("failure", "answer"),
    [
        ("a 5xx", lambda body: (503, {"decision": "allow"}, True)),
        ("a wrong signature", lambda body: (200, {"decision": "allow"}, False)),
        ("a bad body", lambda body: (200, {"decision": "maybe"}, True)),
        ("an answer naming no call", lambda body: (200, {"decision": "allow", "callKey": None}, True)),
        ("an answer naming another call", lambda body: (200, {"decision": "allow", "callKey": "c-deploy-0"}, True)),
    ],
)
async def test_a_hook_that_cannot_decide_is_refused_by_default(
    broker: Broker, hook: Hook, failure: str, answer: Callable[[dict[str, Any]], tuple[int, Any, bool]]
) -> None:
    hook.answer = answer
    await broker.set_approval_policy({"agent": "ops", "hook": hook.registration()})
    with pytest.raises(ApprovalRefused, match="approval hook failed"):
        await bounded(ApprovalGate(broker, to="alice").authorize(call()))
    assert [d["decision"] for d in await decisions(broker)] == ["deny"]


async def test_on_hook_error_pause_asks_a_person_when_the_hook_times_out(
    broker: Broker, hook: Hook, inbox: Inbox
) -> None:
    hook.delay = asyncio.Event()  # the hook never answers in time
    await broker.set_approval_policy({"agent": "ops", "hook": hook.registration("pause", timeout=0.2)})
    task = asyncio.create_task(ApprovalGate(broker, to="alice").authorize(call()))
    request = await approve_next(inbox)
    assert request.details is not None and "did not answer within 0.2s" in request.details
    assert await bounded(task) == {"env": "prod", "n": 0}


async def test_on_hook_error_fail_run_stops_the_run(broker: Broker, hook: Hook) -> None:
    hook.answer = lambda body: (500, {}, True)
    await broker.set_approval_policy({"agent": "ops", "hook": hook.registration("fail-run")})
    with pytest.raises(RunFailed, match="HTTP 500"):
        await bounded(ApprovalGate(broker, to="alice").authorize(call()))


async def test_the_caller_of_the_hook_can_be_injected(broker: Broker) -> None:
    from interlock.approval_policies import HookVerdict, PolicyHook

    seen: list[str] = []

    async def fake(hook: PolicyHook, body: Any) -> HookVerdict:
        seen.append(body["toolName"])
        return HookVerdict("deny", "injected")

    await broker.set_approval_policy({"agent": "ops", "hook": {"url": "https://h.example/x", "secret": SECRET}})
    with pytest.raises(ApprovalDenied, match="injected"):
        await bounded(ApprovalGate(broker, to="alice", url_hook=fake).authorize(call()))
    assert seen == ["deploy"]


async def test_a_stored_hook_runs_on_the_hook_runner_bounded_and_logged_with_its_policy_and_call(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    async def never_answers(hook: Any, body: Any) -> Any:
        await asyncio.Event().wait()

    registration = {"url": "https://h.example/x", "secret": SECRET, "timeout": 0.1}
    await broker.set_approval_policy({"agent": "ops", "hook": registration})
    with caplog.at_level(logging.WARNING, logger="interlock"), pytest.raises(ApprovalRefused, match="hook failed"):
        await bounded(ApprovalGate(broker, to="alice", url_hook=never_answers).authorize(call()))
    # bounded by the hook's timeout and a second more, for the HTTP call's own bound inside
    assert (
        "approval hook of the stored approval policy of 'ops', version 1 timed out after 1.1s "
        "on tool call c-deploy-0 (deploy)"
    ) in caplog.text
    assert [(d["decision"], d["reason"]) for d in await decisions(broker)] == [
        ("deny", "the approval hook failed: the approval hook did not answer within 0.1s")
    ]


async def test_a_denial_by_the_stored_hook_refuses_a_call_the_gate_would_ask_about(broker: Broker, hook: Hook) -> None:
    hook.answer = lambda body: (200, {"decision": "deny", "reason": "frozen"}, True)
    await broker.set_approval_policy({"agent": "ops", "hook": hook.registration()})
    gate = ApprovalGate(broker, to="alice", policies={"deploy": "always"})
    with pytest.raises(ApprovalDenied, match="frozen"):
        await bounded(gate.authorize(call()))
    assert (await broker.list(kind="approval")).items == []


async def test_the_model_reads_the_hooks_denial_as_a_denied_result(broker: Broker, hook: Hook) -> None:
    hook.answer = lambda body: (200, {"decision": "deny", "reason": "not in prod"}, True)
    await broker.set_approval_policy({"agent": "ops", "hook": hook.registration()})
    ran: list[str] = []

    async def deploy(env: str, n: int) -> str:
        ran.append(env)
        return "deployed"

    gate = ApprovalGate(broker, to="alice")
    runner = ToolRunner(broker, [ToolFunctions({"deploy": deploy})], gate=gate)
    result = await bounded(runner.run(call()))
    assert (result.denied, result.content) == (True, "not in prod")
    assert ran == []


async def test_a_call_begun_without_waiting_asks_under_the_stored_mode_and_finishes(broker: Broker) -> None:
    await broker.set_approval_policy({"agent": "ops", "approval": "once"})
    gate = ApprovalGate(broker, to="alice")
    begun = await bounded(gate.begin(call(n=0)))
    assert isinstance(begun, Request) and begun.context["policy"] == "once"
    assert await broker.resolve(begun.id, {"approve": True}, by="alice")
    assert await bounded(gate.finish(call(n=0), begun)) == {"env": "prod", "n": 0}
    assert await bounded(gate.begin(call(n=1))) == {"env": "prod", "n": 1}  # approved once in this session
