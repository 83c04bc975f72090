"""The mailer of the MCP tests (test_openai_agents_mcp.py): an OpenAI Agents SDK agent
whose tools come from a real MCP server (mail_mcp_server.py, over stdio, in a subprocess),
its scripted model (offline), and, for `interlock worker mail_agent:handlers`, a worker
factory that connects the server before the worker starts ($MAIL_LOG names the file the
server logs each mail it sends to).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from agents import Agent, Model, ModelResponse, RunConfig, Usage
from agents.mcp import MCPServerStdio
from agents.mcp.server import RequireApprovalSetting
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from interlock import Broker
from interlock.agent import ApprovalGate
from interlock.integrations.openai_agents import OpenAIAgentsRuns
from interlock.runs import ResumeHandler

SERVER = Path(__file__).with_name("mail_mcp_server.py")
BOUND = 30
MAIL = {"to": "ops@example.com", "subject": "release 1.4"}
MAILED = "mailed ops@example.com: release 1.4"


class Scripted(Model):
    """A fake model: makes one call (by default: mails ops, call "m1"), then says what the
    call returned."""

    def __init__(self, tool: str = "send_mail", arguments: dict[str, Any] = MAIL, call_id: str = "m1") -> None:
        self.call = ResponseFunctionToolCall(
            arguments=json.dumps(arguments), call_id=call_id, name=tool, type="function_call"
        )

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        items = input if isinstance(input, list) else []
        outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if not outputs:
            return ModelResponse(output=[self.call], usage=Usage(), response_id=None)
        content = [ResponseOutputText(text=said(outputs[-1]["output"]), type="output_text", annotations=[])]
        message = ResponseOutputMessage(id="r1", content=content, role="assistant", status="completed", type="message")
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def said(output: Any) -> str:
    """The text of a call's output as the model reads it: an MCP tool's is a list of parts."""
    if isinstance(output, list):
        return " ".join(str(part.get("text")) for part in output if isinstance(part, dict))
    return str(output)


def mail_server(log: Path, require_approval: RequireApprovalSetting = None) -> MCPServerStdio:
    """A connection to a new mail server process that logs what it sends to `log`."""
    params = {"command": sys.executable, "args": [str(SERVER), str(log)]}
    return MCPServerStdio(params, name="mail", require_approval=require_approval, client_session_timeout_seconds=BOUND)


def mailer(broker: Broker, server: MCPServerStdio, gate: ApprovalGate | None = None) -> OpenAIAgentsRuns:
    """The agent "mailer" on `server`'s tools, behind interlock (the gate asks alice)."""
    agent = Agent(name="mailer", model=Scripted(), mcp_servers=[server])
    gate = gate or ApprovalGate(broker, to="alice")
    return OpenAIAgentsRuns(broker, agent, name="mailer", gate=gate, run_config=RunConfig(tracing_disabled=True))


async def handlers(broker: Broker) -> dict[str, ResumeHandler]:
    """For `interlock worker mail_agent:handlers`: the server is connected for the worker's
    life (the process exits with it)."""
    server = mail_server(Path(os.environ["MAIL_LOG"]), "always")
    await server.connect()
    return mailer(broker, server).handlers()
