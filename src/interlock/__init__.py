"""interlock: durable human-in-the-loop requests for AI agents.

async with interlock.connect() as broker:          # SQLite file by default
    ok = await broker.ask(Confirm("Deploy to prod?"), to="alice", timeout=600)
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .broker import Broker, Page, connect
from .contracts import AutoResolveContract, BrokerContract, Contract, Contracts, TerminalContract
from .errors import (
    AlreadySettled,
    ApprovalDenied,
    ApprovalRefused,
    Cancelled,
    Closed,
    Expired,
    Forbidden,
    InterlockError,
    InvalidAnswer,
    InvalidRequest,
    NotFound,
    Rejected,
    RunFailed,
    ToolFailed,
    ToolRefused,
)
from .model import (
    Ask,
    Choice,
    Confirm,
    Deny,
    Event,
    Form,
    InputHook,
    Limits,
    MultiChoice,
    Option,
    Origin,
    Request,
    Response,
    Status,
    Text,
)
from .sessions import Conversation, Receipt, Sessions, inform_user
from .tools import (
    Allow,
    ApprovalGate,
    HumanInputTools,
    Pause,
    Rewrite,
    ToolCall,
    ToolDefinition,
    ToolResult,
    ToolRunner,
    ask_user_tool,
    request_human_input_tool,
    requires_approval,
)

try:
    __version__ = version("interlock")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"

__all__ = [
    "Allow",
    "AlreadySettled",
    "ApprovalDenied",
    "ApprovalGate",
    "ApprovalRefused",
    "Ask",
    "AutoResolveContract",
    "Broker",
    "BrokerContract",
    "Cancelled",
    "Choice",
    "Closed",
    "Confirm",
    "Contract",
    "Contracts",
    "Conversation",
    "Deny",
    "Event",
    "Expired",
    "Forbidden",
    "Form",
    "HumanInputTools",
    "InputHook",
    "InterlockError",
    "InvalidAnswer",
    "InvalidRequest",
    "Limits",
    "MultiChoice",
    "NotFound",
    "Option",
    "Origin",
    "Page",
    "Pause",
    "Receipt",
    "Rejected",
    "Request",
    "Response",
    "Rewrite",
    "RunFailed",
    "Sessions",
    "Status",
    "TerminalContract",
    "Text",
    "ToolCall",
    "ToolDefinition",
    "ToolFailed",
    "ToolRefused",
    "ToolResult",
    "ToolRunner",
    "__version__",
    "ask_user_tool",
    "connect",
    "inform_user",
    "request_human_input_tool",
    "requires_approval",
]
