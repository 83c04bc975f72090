"""interlock: durable human-in-the-loop requests for AI agents.

async with interlock.connect() as broker:          # SQLite file by default
    ok = await broker.ask(Confirm("Deploy to prod?"), to="alice", timeout=600)
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .broker import Broker, Page, connect
from .errors import (
    AlreadySettled,
    Cancelled,
    Closed,
    Expired,
    Forbidden,
    InterlockError,
    InvalidAnswer,
    InvalidRequest,
    NotFound,
    Rejected,
)
from .model import (
    Ask,
    Choice,
    Confirm,
    Deny,
    Event,
    Form,
    InputHook,
    MultiChoice,
    Option,
    Origin,
    Request,
    Response,
    Status,
    Text,
)

try:
    __version__ = version("interlock")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"

__all__ = [
    "AlreadySettled",
    "Ask",
    "Broker",
    "Cancelled",
    "Choice",
    "Closed",
    "Confirm",
    "Deny",
    "Event",
    "Expired",
    "Forbidden",
    "Form",
    "InputHook",
    "InterlockError",
    "InvalidAnswer",
    "InvalidRequest",
    "MultiChoice",
    "NotFound",
    "Option",
    "Origin",
    "Page",
    "Rejected",
    "Request",
    "Response",
    "Status",
    "Text",
    "__version__",
    "connect",
]
