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
An elicitation the inbox cannot take (a schema it cannot render, a person the caller may
not ask, an inbox out of reach) is an error the server reads, saying why.
"""

from __future__ import annotations

from typing import Any

from mcp.client import ClientRequestContext
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitResult,
    ErrorData,
)

from ..broker import Broker
from ..errors import Cancelled, Expired, InterlockError, InvalidRequest, Rejected
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
        except (InterlockError, ConnectionError) as exc:
            return _not_asked(exc)
        try:
            response = await self.broker.wait(request.id)
        except Rejected:
            return ElicitResult(action="decline")
        except (Expired, Cancelled):
            return ElicitResult(action="cancel")
        except (InterlockError, ConnectionError) as exc:
            return _not_asked(exc)
        return ElicitResult(action="accept", content=response.answers.get(ask.id) or {})


def _not_asked(exc: Exception) -> ErrorData:
    """The error the MCP server reads when its elicitation could not reach a person, or
    their answer could not come back (the inbox refused it, or could not be reached): an
    exception raised here would end the client's tool call instead, with no word to the
    server."""
    if isinstance(exc, ConnectionError):  # `Unavailable` too: the same call may work later
        return ErrorData(code=INTERNAL_ERROR, message=f"the person's inbox cannot be reached: {exc}")
    return ErrorData(code=INVALID_REQUEST, message=f"the inbox refused this elicitation: {exc}")


def _object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The requested schema as a form's: an object (the spec's restricted subset always is)."""
    if schema.get("type", "object") != "object":
        raise InvalidRequest("the requested schema is not an object")
    return {**schema, "type": "object"}
