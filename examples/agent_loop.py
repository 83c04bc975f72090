"""An agent loop with a scripted model: it asks the user a question, then asks approval to
deploy; the person denies the first deploy, the model changes course, the second is approved.

Run it: `python examples/agent_loop.py`. It uses an in-memory store and runs unattended: a
subscriber plays the person at the inbox. Point it at `sqlite:///interlock.db` and drop
the subscriber to answer from `interlock inbox` / `interlock answer` in another shell.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass

import interlock
from interlock import Broker, Request
from interlock.agent import (
    ApprovalGate,
    Conversation,
    HumanInputTools,
    InformUserTool,
    Sessions,
    ToolCall,
    ToolCallReport,
    ToolDefinition,
    ToolFunctions,
    ToolResult,
    ToolRunner,
    ask_user_tool,
)

DEPLOY = ToolDefinition(
    "deploy",
    "Deploy a version of the service to an environment.",
    {
        "type": "object",
        "properties": {"env": {"enum": ["staging", "prod"]}, "version": {"type": "string"}},
        "required": ["env", "version"],
        "additionalProperties": False,
    },
)


async def deploy(env: str, version: str) -> str:
    return f"{version} is live on {env}"


@dataclass
class Turn:
    """What the model says in one step: tool calls to make, or its final answer."""

    calls: Sequence[ToolCall] = ()
    text: str = ""


class ScriptedModel:
    """Stands in for an LLM: decides the next step from the tool results it has read."""

    def __init__(self, conversation: Conversation) -> None:
        self.conversation = conversation
        self.version = ""
        self.step = 0

    def next_turn(self, results: Sequence[ToolResult]) -> Turn:
        self.step += 1
        say = self.conversation.call
        if self.step == 1:
            return Turn([say("ask_user", {"question": "Which version should I release?"})])
        if self.step == 2:
            self.version = results[0].content
            return Turn([say("deploy", {"env": "prod", "version": self.version})])
        if self.step == 3 and results[0].denied:
            return Turn(
                [
                    say("inform_user", {"message": f"Prod was refused ({results[0].content}); trying staging."}),
                    say("deploy", {"env": "staging", "version": self.version}),
                ]
            )
        return Turn(text=f"Done: {results[-1].content}.")


async def person(broker: Broker, request: Request) -> None:
    """Alice at her inbox: answers the question, refuses prod, approves staging."""
    if request.kind == "question":
        print(f"  [alice] reads: {request.asks[0].prompt!r} -> answers 2.4.1")
        await broker.resolve(request.id, "2.4.1", by="alice", via="inbox")
    elif request.origin.arguments and request.origin.arguments.get("env") == "prod":
        print(f"  [alice] reviews {request.details} -> denies")
        await broker.reject(request.id, "Not on a Friday: staging first, please.", by="alice", via="inbox")
    else:
        print(f"  [alice] reviews {request.details} -> approves")
        await broker.resolve(request.id, {"approve": True}, by="alice", via="inbox")


async def main() -> None:
    async with interlock.connect("memory://") as broker, Sessions(broker) as sessions:
        conversation = Conversation("session-1", person="alice", agent="release-bot")
        gate = ApprovalGate(broker, policies={"deploy": "always"})  # every deploy needs alice's yes
        runner = ToolRunner(
            broker,
            [
                HumanInputTools(broker, {"ask_user"}, definitions=[ask_user_tool()]),
                InformUserTool(broker),
                ToolFunctions({"deploy": deploy}),
            ],
            definitions=[DEPLOY],  # the handlers' own definitions are added
            gate=gate,
        )

        async def audit(report: ToolCallReport) -> None:
            print(f"  [audit] {report.call.name}({json.dumps(dict(report.call.arguments))}) -> {report.status}")

        runner.on_tool_call(audit)
        await sessions.subscribe(lambda request: person(broker, request), session=conversation.session)

        model = ScriptedModel(conversation)
        print("tools offered to the model:", ", ".join(d.name for d in runner.definitions))
        results: list[ToolResult] = []
        while True:
            turn = model.next_turn(results)
            if not turn.calls:
                print(f"model: {turn.text}")
                break
            print("model calls:", ", ".join(call.name for call in turn.calls))
            async with asyncio.timeout(30):  # every wait is bounded
                results = await runner.run_all(turn.calls)
            for call, result in zip(turn.calls, results, strict=True):
                mark = "denied" if result.denied else result.status
                print(f"  {call.name} -> [{mark}] {result.content}")


if __name__ == "__main__":
    asyncio.run(main())
