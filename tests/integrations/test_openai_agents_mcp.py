"""The tools of an OpenAI Agents SDK agent's MCP servers, behind interlock, on every backend.

The agent reaches a real MCP server (mail_mcp_server.py, the official SDK's server over
stdio, in a subprocess) whose `send_mail` writes each call it runs to a file, so a test
counts what actually ran. The model is a scripted one (offline, tracing off). A call the
server holds for approval (`require_approval`) and one the gate's policies hold alike park
the run on an interlock approval; a fresh agent, adapter and MCP connection resume it
(standing for another process); the call runs once, as approved, or, denied, not at all
and the model reads the person's reason.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from agents import Agent, RunConfig
from agents.mcp.server import RequireApprovalSetting
from mail_agent import BOUND, MAIL, MAILED, Scripted, mail_server, mailer

from interlock import Broker, Deny, runs
from interlock.agent import ApprovalGate
from interlock.integrations.openai_agents import OpenAIAgentsRuns, gate_tools
from interlock.model import RunStatus
from interlock.runs import Worker

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
HERE = Path(__file__).parent


def mails(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def resume_in_a_fresh_agent(
    broker: Broker, log: Path, require_approval: RequireApprovalSetting, gate: ApprovalGate | None = None
) -> Any:
    """Resume the ready run with a new agent, adapter and mail server connection, as another
    process would; a second worker finds nothing left to resume."""
    async with mail_server(log, require_approval) as server:
        worker = Worker(broker, mailer(broker, server, gate).handlers())
        with anyio.fail_after(BOUND):
            resumed = await worker.run_once(wait=BOUND)
            assert await worker.drain() == 0
    assert resumed is not None
    return resumed


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "mail.jsonl"


async def parked(
    broker: Broker, log: Path, require_approval: RequireApprovalSetting, gate: ApprovalGate | None = None
) -> Any:
    """Start the mailer on a server with `require_approval`: the run, parked on one approval
    (nothing mailed yet), and that approval."""
    async with mail_server(log, require_approval) as server:
        with anyio.fail_after(BOUND):
            run = await mailer(broker, server, gate).start("Mail ops the release notes")
    assert run.status is RunStatus.WAITING_FOR_APPROVAL, run.error
    assert mails(log) == []
    (approval,) = [await broker.get(i) for i in run.waiting_on]
    return run, approval


async def test_a_call_its_mcp_server_holds_for_approval_parks_the_run_and_runs_once_as_approved(
    broker: Broker, log: Path
) -> None:
    run, approval = await parked(broker, log, "always")
    assert (approval.kind, approval.to, approval.origin.run) == ("approval", "alice", run.id)
    assert (approval.origin.tool_name, approval.origin.tool_call_id, approval.origin.arguments) == (
        "send_mail",
        "m1",
        MAIL,
    )
    assert approval.context["arguments"] == MAIL and "send_mail" in approval.context["preview"]
    await broker.resolve(approval.id, {"approve": True}, by="alice")
    done = await resume_in_a_fresh_agent(broker, log, "always")
    assert (done.status, done.result) == (RunStatus.COMPLETED, MAILED)
    assert mails(log) == [MAIL]


async def test_a_denied_mcp_call_does_not_run_and_the_model_reads_the_reason(broker: Broker, log: Path) -> None:
    _, approval = await parked(broker, log, "always")
    await broker.reject(approval.id, "Not before the release is tagged.", by="alice")
    done = await resume_in_a_fresh_agent(broker, log, "always")
    assert (done.status, done.result) == (RunStatus.COMPLETED, "Not before the release is tagged.")
    assert mails(log) == []


async def test_a_gate_policy_holds_an_mcp_tool_its_server_lets_run_and_it_runs_once_as_approved(
    broker: Broker, log: Path
) -> None:
    gate = ApprovalGate(broker, policies={"send_*": "always"}, to="alice")
    _, approval = await parked(broker, log, "never", gate)
    assert (approval.origin.tool_name, approval.origin.arguments, approval.context["policy"]) == (
        "send_mail",
        MAIL,
        "always",
    )
    await broker.resolve(approval.id, {"approve": True}, by="alice")
    done = await resume_in_a_fresh_agent(broker, log, "never", gate)
    assert (done.status, done.result) == (RunStatus.COMPLETED, MAILED)
    assert mails(log) == [MAIL]


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_a_hook_s_denial_of_an_mcp_tool_its_server_lets_run_reaches_the_model_and_nothing_is_mailed(
    broker: Broker, log: Path
) -> None:
    gate = ApprovalGate(broker, hook=lambda call: Deny(f"{call.name} is off on Sundays"), to="alice")
    async with mail_server(log) as server:
        with anyio.fail_after(BOUND):
            run = await mailer(broker, server, gate).start("Mail ops the release notes")
    assert (run.status, run.result) == (RunStatus.COMPLETED, "send_mail is off on Sundays")
    assert mails(log) == [] and (await broker.list(kind="approval")).items == []


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize(
    ("require_approval", "policies", "asks"),
    [
        (None, {}, False),
        ("never", {"send_mail": "always"}, True),
        ("always", {}, True),
        ("always", {"send_*": "never"}, False),
        ({"always": {"tool_names": ["send_mail"]}}, {}, True),
    ],
    ids=[
        "server-none-gate-none",
        "server-never-gate-always",
        "server-always-gate-none",
        "server-always-gate-never",
        "server-list",
    ],
)
async def test_the_gate_decides_an_mcp_call_as_it_does_a_function_tool_s_with_the_server_s_setting_as_the_mark(
    broker: Broker, log: Path, require_approval: RequireApprovalSetting, policies: dict[str, Any], asks: bool
) -> None:
    gate = ApprovalGate(broker, policies=policies, to="alice")
    async with mail_server(log, require_approval) as server:
        with anyio.fail_after(BOUND):
            run = await mailer(broker, server, gate).start("Mail ops the release notes")
    approvals = (await broker.list(kind="approval")).items
    if asks:
        assert run.status is RunStatus.WAITING_FOR_APPROVAL and mails(log) == []
        assert [a.origin.tool_name for a in approvals] == ["send_mail"]
    else:
        assert (run.status, run.result, approvals) == (RunStatus.COMPLETED, MAILED, [])
        assert mails(log) == [MAIL]


async def call_records(broker: Broker, run_id: str) -> Sequence[dict[str, Any]]:
    events = await broker.find_events(run=run_id)
    return [dict(e.data["data"]) for e in events if e.type == "informed" and "outcome" in e.data.get("data", {})]


async def test_a_resume_repeated_after_a_worker_died_gives_back_the_mcp_call_s_output_without_mailing_again(
    broker: Broker, log: Path
) -> None:
    run, approval = await parked(broker, log, "always")
    await broker.resolve(approval.id, {"approve": True}, by="alice")
    claimed = await broker.claim_run(["mailer"], worker="w1", lease=BOUND)
    assert claimed is not None
    async with mail_server(log, "always") as server:
        with anyio.fail_after(BOUND):
            assert await mailer(broker, server).resume(claimed, {}) == MAILED
    # That worker died before it completed the run; another one resumes it from the same state.
    async with mail_server(log, "always") as server:
        with anyio.fail_after(BOUND):
            assert await mailer(broker, server).resume(claimed, {}) == MAILED
    assert mails(log) == [MAIL]
    (record,) = await call_records(broker, run.id)
    assert (record["outcome"], record["tool"], record["tool_call_id"]) == ("ran", "send_mail", "m1")


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_a_worker_whose_mcp_server_is_not_connected_hands_the_run_back_saying_which_for_one_that_has_it(
    broker: Broker, log: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runs, "HAND_BACK_FIRST", 0.2)  # 5 s in a worker, shorter here
    run, approval = await parked(broker, log, "always")
    await broker.resolve(approval.id, {"approve": True}, by="alice")
    never_connected = mail_server(log, "always")
    with anyio.fail_after(BOUND):
        back = await Worker(broker, mailer(broker, never_connected).handlers(), name="lacking").run_once(wait=BOUND)
    # Not failed: left for a worker that has the server, its approval unspent and nothing mailed.
    assert back is not None and (back.status, back.error, back.worker) == (RunStatus.RUNNING, None, "lacking")
    assert not [e for e in await broker.find_events(request=approval.id) if e.type == "consumed"]
    assert mails(log) == []
    (record,) = await call_records(broker, run.id)
    assert record["outcome"] == "handed_back" and "\n" not in record["reason"]
    for said in (record["reason"], caplog.text):
        assert "MCP server 'mail' of agent 'mailer' cannot list its tools" in said
        assert "connect()" in said
    async with mail_server(log, "always") as server:
        with anyio.fail_after(BOUND):
            done = await Worker(broker, mailer(broker, server).handlers(), name="able").run_once(wait=BOUND)
    assert done is not None and (done.id, done.status, done.result, done.attempts) == (
        run.id,
        RunStatus.COMPLETED,
        MAILED,
        2,
    )
    assert mails(log) == [MAIL]


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_an_agent_used_as_a_tool_needs_a_gated_copy_for_its_mcp_tools_and_then_they_pause_the_run(
    broker: Broker, log: Path
) -> None:
    gate = ApprovalGate(broker, policies={"send_mail": "always"}, to="alice")
    offline = RunConfig(tracing_disabled=True)

    def triage(inner: Agent[Any]) -> Agent[Any]:
        mailing = inner.as_tool(tool_name="mailing", tool_description="Mail people.")
        return Agent(name="triage", model=Scripted("mailing", {"input": "mail ops"}, "t1"), tools=[mailing])

    async with mail_server(log) as server:
        clerk = Agent(name="clerk", model=Scripted(), mcp_servers=[server])
        with pytest.raises(ValueError, match=r"the tools of MCP server 'mail'.*agent 'clerk'.*gate_tools\(clerk\)"):
            OpenAIAgentsRuns(broker, triage(clerk), name="ops", gate=gate, run_config=offline)
        runs = OpenAIAgentsRuns(broker, triage(gate_tools(clerk)), name="ops", gate=gate, run_config=offline)
        with anyio.fail_after(BOUND):
            run = await runs.start("mail ops")
        assert run.status is RunStatus.WAITING_FOR_APPROVAL and mails(log) == []
        (approval,) = [await broker.get(i) for i in run.waiting_on]
        assert (approval.origin.tool_name, approval.origin.arguments) == ("send_mail", MAIL)
        await broker.resolve(approval.id, {"approve": True}, by="alice")
        with anyio.fail_after(BOUND):
            done = await Worker(broker, runs.handlers()).run_once(wait=BOUND)
    assert done is not None and (done.status, done.result) == (RunStatus.COMPLETED, MAILED)
    assert mails(log) == [MAIL]


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_interlock_worker_in_a_process_of_its_own_connects_the_mcp_server_and_mails_once_as_approved(
    broker: Broker, url: str, log: Path
) -> None:
    _, approval = await parked(broker, log, "always")
    await broker.resolve(approval.id, {"approve": True}, by="alice")
    environ = {
        **os.environ,
        "MAIL_LOG": str(log),
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    worker = [sys.executable, "-m", "interlock", "worker", "mail_agent:handlers", "--once", "--db", url]
    with anyio.fail_after(BOUND * 2):
        done = await anyio.run_process(worker, env=environ, cwd=HERE, check=False)
    stderr = done.stderr.decode()
    assert done.returncode == 0 and "resumed 1 run(s)" in stderr, stderr
    (run,) = (await broker.list_runs()).items
    assert (run.status, run.result) == (RunStatus.COMPLETED, MAILED)
    assert mails(log) == [MAIL]
