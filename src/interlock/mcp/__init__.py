"""interlock over MCP: the inbox as MCP tools, and MCP elicitation routed to a person.

- `build_server(access)`: the MCP server (tools `hitl_request`, `hitl_status`, `hitl_list`,
  `hitl_read`, `hitl_respond`, `hitl_cancel`, `request_human_input`, `inform_user`; the
  resource `interlock://requests/{request_id}`), every call through a `Broker`.
- `serve_stdio(url, token=)`: what `interlock mcp` runs for desktop hosts.
- `HttpEndpoint`: `/mcp` on `interlock serve`, with the API's bearer tokens.
- `InboxElicitation`: an elicitation handler for the official MCP client that asks a
  person through their inbox instead of a user at the keyboard.

Needs the `mcp` extra (the MCP SDK; the `server` extra does not include it): in a clone of
interlock, `pip install -e '.[mcp]'` (`/mcp` on a server needs both, `pip install -e '.[server,mcp]'`).
"""

from __future__ import annotations

from .elicitation import InboxElicitation
from .server import MAX_STATUS_WAIT, Access, Seat, build_server
from .transports import HttpEndpoint, fixed_access, serve_stdio

__all__ = [
    "MAX_STATUS_WAIT",
    "Access",
    "HttpEndpoint",
    "InboxElicitation",
    "Seat",
    "build_server",
    "fixed_access",
    "serve_stdio",
]
