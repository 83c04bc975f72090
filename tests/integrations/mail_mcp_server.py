"""A small MCP server over stdio for the OpenAI Agents SDK adapter's tests: `send_mail`
appends each call it runs to the file named by its first argument, one JSON line each,
and `list_mail` reads nothing and changes nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

LOG = Path(sys.argv[1])
server = MCPServer("mail")


@server.tool()
def send_mail(to: str, subject: str) -> str:
    """Send a mail."""
    with LOG.open("a", encoding="utf-8") as log:
        log.write(json.dumps({"to": to, "subject": subject}) + "\n")
    return f"mailed {to}: {subject}"


@server.tool()
def list_mail() -> str:
    """List the mail sent so far."""
    return f"{len(LOG.read_text(encoding='utf-8').splitlines()) if LOG.exists() else 0} sent"


if __name__ == "__main__":
    server.run("stdio")
