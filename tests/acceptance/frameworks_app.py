"""An agent program for the framework acceptance tests: one deploy agent per framework.

Run as `python frameworks_app.py FRAMEWORK STORE_URL RUN_ID` it starts a run, which parks
on the deploy approval, prints the run as JSON and exits (with $DIE_BEFORE_PARKING set, it
is killed once the approval is stored, before the run is parked). `interlock worker
frameworks_app:FRAMEWORK_factory` resumes it in another process. The deploy tool appends
each call it actually ran to the file named by $DEPLOY_LOG, so a test can count them.

The models are the frameworks' own offline test models, deciding from the history: call
`deploy` once, then say what it returned.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import interlock
from interlock import Broker
from interlock.agent import ApprovalGate
from interlock.model import run_to_dict
from interlock.runs import ResumeHandler

AGENT = "deployer"
ARGUMENTS = {"env": "prod", "version": "2.3"}


def record(env: str, version: str) -> str:
    with open(os.environ["DEPLOY_LOG"], "a") as log:
        log.write(json.dumps({"env": env, "version": version}) + "\n")
    return f"deployed {version} to {env}"


def gate(broker: Broker) -> ApprovalGate:
    return ApprovalGate(broker, policies={"deploy": "always", "read_*": "never"}, to="alice")


# -- pydantic-ai ---------------------------------------------------------------------------


def pydantic_ai_runs(broker: Broker) -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from interlock.integrations.pydantic_ai import PydanticAIRuns

    def decide(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(parts=[ToolCallPart("deploy", ARGUMENTS, tool_call_id="call_deploy_1")])
        return ModelResponse(parts=[TextPart(f"deploy said: {returns[-1].content}")])

    agent = Agent(FunctionModel(decide))

    @agent.tool_plain(requires_approval=True)
    def deploy(env: str, version: str) -> str:
        """Deploy `version` to `env`."""
        return record(env, version)

    return PydanticAIRuns(broker, agent, name=AGENT, gate=gate(broker))


def pydantic_ai_factory(broker: Broker) -> dict[str, ResumeHandler]:
    return pydantic_ai_runs(broker).handlers()


# -- OpenAI Agents SDK -----------------------------------------------------------------------


def openai_agents_runs(broker: Broker) -> Any:
    from agents import Agent, Model, ModelResponse, RunConfig, Usage, function_tool
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    from interlock.integrations.openai_agents import OpenAIAgentsRuns

    class Scripted(Model):
        """A fake model: calls deploy, then reports the tool's output (offline, no API key)."""

        async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
            items = input if isinstance(input, list) else []
            outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
            if not outputs:
                call = ResponseFunctionToolCall(
                    arguments=json.dumps(ARGUMENTS), call_id="call_deploy_1", name="deploy", type="function_call"
                )
                return ModelResponse(output=[call], usage=Usage(), response_id=None)
            text = ResponseOutputText(text=f"deploy said: {outputs[-1]['output']}", type="output_text", annotations=[])
            message = ResponseOutputMessage(
                id="msg_1", content=[text], role="assistant", status="completed", type="message"
            )
            return ModelResponse(output=[message], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the tests do not stream")

    @function_tool(needs_approval=True)
    def deploy(env: str, version: str) -> str:
        """Deploy `version` to `env`."""
        return record(env, version)

    agent = Agent(name=AGENT, model=Scripted(), tools=[deploy])
    return OpenAIAgentsRuns(broker, agent, name=AGENT, gate=gate(broker), run_config=RunConfig(tracing_disabled=True))


def openai_agents_factory(broker: Broker) -> dict[str, ResumeHandler]:
    return openai_agents_runs(broker).handlers()


async def start(framework: str, url: str, run_id: str) -> None:
    async with interlock.connect(url) as broker:
        runs = pydantic_ai_runs(broker) if framework == "pydantic-ai" else openai_agents_runs(broker)
        if os.environ.get("DIE_BEFORE_PARKING"):
            # The process is killed once its approval is stored and before its run is parked.
            broker.park = lambda *args, **kwargs: os._exit(3)  # type: ignore[method-assign]
        run = await runs.start("Deploy 2.3 to prod", run_id=run_id, session="ops-chat")
        print(json.dumps(run_to_dict(run, state=False)))


if __name__ == "__main__":
    asyncio.run(start(*sys.argv[1:4]))
