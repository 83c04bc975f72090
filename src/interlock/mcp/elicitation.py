"""MCP elicitation, answered by a person through their inbox.

An MCP server asks its client's user for input with an elicitation: a message and a flat
JSON Schema. An unattended agent has no user at the keyboard, so `InboxElicitation` is an
elicitation handler for the official MCP client that turns each one into a Form request
in a configured person's inbox, waits, and answers the server:

    the person answers      accept, with the answer (checked against the schema)
    the person rejects      decline
    it expires, or the      cancel
    request is withdrawn

If the server gives up first (the MCP request is cancelled), the waiting request is
withdrawn from the inbox. URL-mode elicitations (open a page) are not routed: they are
refused with an error, since the person would have to be sent to a page they never saw.
"""

from __future__ import annotations

from typing import Any

from mcp.client import ClientRequestContext
from mcp.types import INVALID_REQUEST, ElicitRequestFormParams, ElicitRequestParams, ElicitResult, ErrorData

from ..broker import Broker
from ..errors import Cancelled, Expired, InvalidRequest, Rejected
from ..model import Form

__all__ = ["InboxElicitation"]


class InboxElicitation:
    """Pass as `Client(..., elicitation_callback=InboxElicitation(broker, to="alice"))`.

    `to` is the person asked (None: the broker's caller decides, e.g. an agent's owner on
    a server); `timeout` (seconds) bounds each wait, after which the request expires and
    the server is told `cancel`; `title` names the asker in the inbox (the MCP server's
    name, say).
    """

    def __init__(
        self, broker: Broker, *, to: str | None = None, timeout: float | None = 3600.0, title: str = ""
    ) -> None:
        if timeout is not None and not timeout > 0:
            raise ValueError("timeout must be a positive number of seconds")
        self.broker = broker
        self.to = to
        self.timeout = timeout
        self.title = title

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        if not isinstance(params, ElicitRequestFormParams):
            return ErrorData(code=INVALID_REQUEST, message="URL elicitation is not routed to a person's inbox")
        try:
            ask = Form(params.message, schema=_object_schema(params.requested_schema), id="form")
            request = await self.broker.create(
                [ask],
                to=self.to,
                title=self.title or params.message,
                timeout=self.timeout,
                tool_name="elicitation",
            )
        except InvalidRequest as exc:
            return ErrorData(code=INVALID_REQUEST, message=f"cannot ask a person this: {exc}")
        try:
            response = await self.broker.wait(request.id)
        except Rejected:
            return ElicitResult(action="decline")
        except (Expired, Cancelled):
            return ElicitResult(action="cancel")
        return ElicitResult(action="accept", content=response.answers.get(ask.id) or {})


def _object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The requested schema as a form's: an object (the spec's restricted subset always is)."""
    if schema.get("type", "object") != "object":
        raise InvalidRequest("the requested schema is not an object")
    return {**schema, "type": "object"}
