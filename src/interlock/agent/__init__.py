"""The agent side: tool calls that ask a person, and the gate in front of the other tools.

Framework-free on purpose. A `ToolCall` (name, arguments, call id and the context of the
turn: session, channel, agent, actor, the person to ask, the delegation chain) goes in; a
`ToolResult` (content, is_error, refused) comes out. An adapter for an agent framework
maps its own two types onto these and gets everything below. One module per concern:

- `calls`: the tool-call vocabulary (`ToolCall`, `ToolResult`, `ToolDefinition`, the
  argument digest an approval is bound to, `current_call`).
- `human_input`: the tools that ask a person (`HumanInputTools`, `ask_user_tool`,
  `request_human_input_tool`, the mappings from arguments to asks).
- `gate`: the approval gate (`ApprovalGate`, its policies, `requires_approval`).
- `hooks`: what each hook is given and may answer (`Allow`, `Pause`, `Rewrite`,
  `ToolCallReport`).
- `url_hooks`: how the gate calls a stored policy's hook by URL (`call_url_hook`,
  `UrlHookError`; `UrlHook`, the type of a function calling it your own way).
- `runner`: `ToolRunner`, which runs calls through the hooks, the gate and the handlers.
- `contracts`: who settles a request made for an agent (the inbox, an automatic
  decision, a terminal) and the choice of one per agent; `terminal`: the terminal one.
- `sessions`: the conversation an agent works in, the host's views of what waits in it,
  and `inform_user`; `user_io`: where each agent's progress updates are delivered.

The agent side builds on the core (`interlock.broker`, `interlock.model`,
`interlock.hooks`) and never on a surface (the server, the CLI).
"""

from __future__ import annotations

from .calls import ToolCall, ToolDefinition, ToolHandler, ToolResult, arguments_digest, canonical_json, current_call
from .contracts import (
    AUTO_RESOLVE_ENV,
    AutoResolveContract,
    BrokerContract,
    Contract,
    Contracts,
    ContractSpec,
    auto_resolve_from_env,
    contract_from,
)
from .gate import ApprovalGate, HookErrorMode, Policy, requires_approval
from .hooks import Allow, ApprovalHook, BeforeToolUse, BeforeVerdict, Pause, Rewrite, ToolCallObserver, ToolCallReport
from .human_input import (
    QUESTION_TYPES,
    HumanInputDefinition,
    HumanInputTools,
    InputMapping,
    Prompt,
    ask_user_tool,
    request_human_input_tool,
)
from .runner import ToolFunctions, ToolRunner, compose
from .sessions import (
    Conversation,
    InformUserTool,
    Receipt,
    Sessions,
    Subscriber,
    Subscription,
    inform_user,
    inform_user_tool,
)
from .terminal import TerminalContract
from .url_hooks import UrlHook, UrlHookError, call_url_hook
from .user_io import BrokerUserIO, LogUserIO, TerminalUserIO, UserIOContract, UserIOContracts, UserIOSpec, user_io_from

__all__ = [
    "BrokerUserIO",
    "LogUserIO",
    "TerminalUserIO",
    "UserIOContract",
    "UserIOContracts",
    "UserIOSpec",
    "user_io_from",
    "AUTO_RESOLVE_ENV",
    "Allow",
    "ApprovalGate",
    "ApprovalHook",
    "AutoResolveContract",
    "BeforeToolUse",
    "BeforeVerdict",
    "BrokerContract",
    "Contract",
    "ContractSpec",
    "Contracts",
    "Conversation",
    "HookErrorMode",
    "HumanInputDefinition",
    "HumanInputTools",
    "InformUserTool",
    "InputMapping",
    "Pause",
    "Policy",
    "Prompt",
    "QUESTION_TYPES",
    "Receipt",
    "Rewrite",
    "Sessions",
    "Subscriber",
    "Subscription",
    "TerminalContract",
    "ToolCall",
    "ToolCallObserver",
    "ToolCallReport",
    "ToolDefinition",
    "ToolFunctions",
    "ToolHandler",
    "ToolResult",
    "ToolRunner",
    "UrlHook",
    "UrlHookError",
    "arguments_digest",
    "ask_user_tool",
    "auto_resolve_from_env",
    "call_url_hook",
    "canonical_json",
    "compose",
    "contract_from",
    "current_call",
    "inform_user",
    "inform_user_tool",
    "request_human_input_tool",
    "requires_approval",
]
