"""Sessions: the conversation an agent works in, and the host's view of what waits in it.

The broker keeps the pending requests of every session and agent, durably and across
processes; this module gives the views a host that talks to the user needs:

- `Conversation`: the root conversation (a session and its person), handed down to
  delegate agents with `delegate`; every call a delegate makes still reaches the root
  person, with the chain of delegating agents recorded in the request's origin.
- `Sessions`: pending requests of a session grouped by agent, `has_pending`, which agents
  are waiting on a person, `subscribe` (a callback per new request), and
  `clear_session`, which wakes every blocked waiter with a cancellation instead of leaving
  it blocked.
- `inform_user`: a progress update that asks nothing, recorded as an event so inboxes and
  streams show it; `InformUserTool` serves it as a tool.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any, TypeAlias

from ..broker import Broker
from ..errors import InvalidRequest
from ..model import Request
from .calls import ToolCall, ToolDefinition, ToolResult
from .user_io import Receipt, UserIOContracts, UserIOSpec

__all__ = [
    "Conversation",
    "InformUserTool",
    "Receipt",
    "Sessions",
    "Subscriber",
    "Subscription",
    "inform_user",
    "inform_user_tool",
]

log = logging.getLogger("interlock")


@dataclass(frozen=True, slots=True)
class Conversation:
    """Who an agent is working for: a session, its person, and the agent (maybe a delegate).

    `delegation` lists the agents that delegated down to `agent`, the root agent first;
    it is empty for the root conversation's own agent.
    """

    session: str
    person: str | None = None
    agent: str | None = None
    channel: str | None = None
    run: str | None = None
    delegation: tuple[str, ...] = ()

    def delegate(self, agent: str, *, run: str | None = None) -> Conversation:
        """The conversation as seen by `agent`, to whom this conversation's agent delegates.

        The session and the person stay those of the root conversation, so the delegate's
        questions reach the person the user talks to.
        """
        if self.agent is None:
            raise ValueError("only a conversation with an agent can delegate")
        if not agent:
            raise ValueError("a delegate needs a name")
        return replace(self, agent=agent, run=run, delegation=(*self.delegation, self.agent))

    @property
    def root_agent(self) -> str | None:
        """The agent of the root conversation: the one the person talks to."""
        return self.delegation[0] if self.delegation else self.agent

    def call(self, name: str, arguments: Mapping[str, Any] | None = None, *, id: str | None = None) -> ToolCall:
        """A tool call made in this conversation: its context filled in, to the root person."""
        call = ToolCall(
            name,
            dict(arguments or {}),
            session=self.session,
            channel=self.channel,
            agent=self.agent,
            actor=self.person,
            to=self.person,
            run=self.run,
            delegation=self.delegation,
        )
        return call if id is None else replace(call, id=id)


# -- inform_user ---------------------------------------------------------------------------


async def inform_user(
    broker: Broker,
    message: str,
    *,
    conversation: Conversation | None = None,
    to: str | None = None,
    session: str | None = None,
    agent: str | None = None,
    run: str | None = None,
    data: Mapping[str, Any] | None = None,
    contracts: UserIOContracts | UserIOSpec | None = None,
) -> Receipt:
    """Tell the person something without waiting for anything, and return the receipt.

    The update becomes an `informed` event, so the inbox and event streams show it; then
    the agent's user-IO contract (`contracts`, by default none beyond the log: see
    `interlock.agent.user_io`) delivers it too. A delivery that fails is logged: the update
    is recorded all the same. The person, session, agent and run come from `conversation`
    unless given here.
    """
    if conversation is not None:
        to = to if to is not None else conversation.person
        session = session if session is not None else conversation.session
        agent = agent if agent is not None else conversation.agent
        run = run if run is not None else conversation.run
    event = await broker.inform(message, to=to, session=session, agent=agent, run=run, data=data)
    receipt = Receipt(event.id, event.at, message, to=to, session=session, agent=agent)
    if contracts is not None:
        contract = UserIOContracts.of(contracts).for_agent(agent)
        try:
            await contract.deliver(receipt)
        except Exception:
            log.exception("user-IO contract %r failed to deliver update %s", contract, receipt.id)
    return receipt


def inform_user_tool(name: str = "inform_user") -> ToolDefinition:
    """The ready definition of the `inform_user` tool: a progress update, no answer."""
    return ToolDefinition(
        name,
        "Tell the user how the work is going, without waiting for an answer.",
        {
            "type": "object",
            "properties": {"message": {"type": "string", "minLength": 1}},
            "required": ["message"],
            "additionalProperties": False,
        },
    )


class InformUserTool:
    """Serves the `inform_user` tool (or `name`): records the update and returns at once.

    The model reads `{"delivered": true, "receipt": <event id>}`. It falls through for any
    other tool name. `contracts` chooses, per agent, where else updates are delivered
    (`interlock.agent.user_io`: `broker`, `terminal`, `log` or your own).
    """

    def __init__(
        self,
        broker: Broker,
        *,
        name: str = "inform_user",
        to: str | None = None,
        contracts: UserIOContracts | UserIOSpec | None = None,
    ) -> None:
        self.broker = broker
        self.name = name
        self.to = to
        self.contracts = UserIOContracts.of(contracts)
        self.definitions = (inform_user_tool(name),)

    async def __call__(self, call: ToolCall) -> ToolResult | None:
        if call.name != self.name:
            return None
        message = call.arguments.get("message")
        if not isinstance(message, str):
            return ToolResult(json.dumps({"error": "'message' must be a string"}), is_error=True)
        try:
            receipt = await inform_user(
                self.broker,
                message,
                to=call.to or self.to,
                session=call.session,
                agent=call.agent,
                run=call.run,
                contracts=self.contracts,
            )
        except InvalidRequest as exc:
            return ToolResult(json.dumps({"error": str(exc)}), is_error=True)
        return ToolResult(json.dumps({"delivered": True, "receipt": receipt.id}))


# -- session views -------------------------------------------------------------------------

Subscriber: TypeAlias = Callable[[Request], "Awaitable[None] | None"]


@dataclass(eq=False)
class Subscription:
    """A live `subscribe`: `cancel()` (or `await aclose()`) stops the callbacks."""

    callback: Subscriber
    session: str | None
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    def cancel(self) -> None:
        """Stop calling back; a callback already running finishes."""
        if self.task is not None:
            self.task.cancel()

    async def aclose(self) -> None:
        """Stop calling back and wait until the follower has stopped."""
        self.cancel()
        if self.task is not None:
            await asyncio.gather(self.task, return_exceptions=True)


class Sessions:
    """What waits on people, per session, read from the broker (so from every process).

    Use it with `async with` (or call `aclose`) when it has subscriptions, so their
    followers stop with it.
    """

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._subscriptions: set[Subscription] = set()

    async def __aenter__(self) -> Sessions:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop every subscription."""
        subscriptions, self._subscriptions = self._subscriptions, set()
        for subscription in subscriptions:
            await subscription.aclose()

    async def pending(self, session: str) -> dict[str | None, list[Request]]:
        """The pending requests of `session`, grouped by the agent that made them, oldest first."""
        grouped: dict[str | None, list[Request]] = {}
        for request in (await self.broker.pending(session=session)).values():
            grouped.setdefault(request.origin.agent, []).append(request)
        return grouped

    async def has_pending(self, session: str, agent: str | None = None) -> bool:
        """Whether anything in `session` (made by `agent`, if given) waits on a person."""
        page = await self.broker.list(session=session, agent=agent, status="pending", limit=1)
        return bool(page.items)

    async def waiting_agents(self, session: str, person: str | None = None) -> list[str]:
        """The agents of `session` waiting on a person (on `person`, if given), oldest wait first.

        Delegates count: a delegate's request names it as its agent, with the chain of
        delegating agents in its origin.
        """
        agents: list[str] = []
        for request in (await self.broker.pending(session=session)).values():
            agent = request.origin.agent
            if agent is not None and agent not in agents and (person is None or request.to == person):
                agents.append(agent)
        return agents

    async def find(self, session: str, agent: str | None, correlation_id: str) -> Request | None:
        """The pending request of `session` made by `agent` for `correlation_id`: its origin's
        `correlation_id`, or for a request a tool call made, that call's id. None if none waits."""
        after: str | None = None
        while True:  # (a page of big requests ends early: every page is looked through)
            page = await self.broker.list(session=session, agent=agent, status="pending", after=after, limit=500)
            for request in page.items:
                origin = request.origin
                if origin.agent == agent and correlation_id in (origin.correlation_id, origin.tool_call_id):
                    return request
            if page.next_cursor is None:
                return None
            after = page.next_cursor

    async def resolve(
        self,
        session: str,
        agent: str | None,
        correlation_id: str,
        answer: Any,
        *,
        by: str | None = None,
        comment: str = "",
    ) -> bool:
        """Answer the request that `(session, agent, correlation_id)` names, as a host that
        keys its questions that way does; False if none is pending. The answer is checked
        as `Broker.resolve` checks it (`InvalidAnswer` changes nothing)."""
        request = await self.find(session, agent, correlation_id)
        if request is None:
            return False
        return await self.broker.resolve(request.id, answer, by=by, via="python", comment=comment)

    async def user_updates(self, session: str, *, after: int = 0, limit: int = 100) -> list[Receipt]:
        """The progress updates (`inform_user`) of `session` after event id `after`, oldest
        first: pass the last receipt's id as `after` to read only what is new."""
        updates: list[Receipt] = []
        while len(updates) < limit:
            events = await self.broker.find_events(after=after, session=session, limit=500)
            updates += [_receipt(e) for e in events if e.type == "informed"]
            if len(events) < 500 and not events.cut:
                break
            after = events[-1].id
        return updates[:limit]

    async def subscribe_user_updates(
        self, callback: Callable[[Receipt], Awaitable[None] | None], *, session: str | None = None
    ) -> Subscription:
        """Call `callback(receipt)` for each progress update recorded from now on (in
        `session`), from this process or any other sharing the store."""
        after = await self.broker.last_event_id()

        async def each(event: Any) -> None:
            if event.type != "informed" or (session is not None and event.data.get("session") != session):
                return
            outcome = callback(_receipt(event))
            if inspect.isawaitable(outcome):
                await outcome

        subscription = Subscription(lambda _: None, session)
        subscription.task = asyncio.ensure_future(self._follow_events(each, after))
        self._subscriptions.add(subscription)
        subscription.task.add_done_callback(lambda _: self._subscriptions.discard(subscription))
        return subscription

    async def _follow_events(self, each: Callable[[Any], Awaitable[None]], after: int) -> None:
        async for event in self.broker.events(after=after, follow=True):
            try:
                await each(event)
            except Exception:
                log.exception("user update subscriber failed on event %s", event.id)

    async def clear_session(self, session: str, reason: str = "the session was cleared") -> list[str]:
        """Cancel every pending request of `session` and return their ids.

        Every call blocked on one wakes with a cancellation (a human-input tool reports a
        plain failure), in this process and in any other sharing the store.
        """
        cleared: list[str] = []
        for request_id in await self.broker.pending(session=session):
            if await self.broker.cancel(request_id, reason, by="clear_session"):
                cleared.append(request_id)
        return cleared

    async def subscribe(self, callback: Subscriber, *, session: str | None = None) -> Subscription:
        """Call `callback(request)` once for each request created from now on (in `session`).

        Requests made by other processes sharing the store count too. A callback that
        raises is logged and the subscription goes on; each subscription has its own
        follower, so a failing or slow subscriber never holds up another.
        """
        after = await self.broker.last_event_id()
        subscription = Subscription(callback, session)
        subscription.task = asyncio.ensure_future(self._follow(subscription, after))
        self._subscriptions.add(subscription)
        subscription.task.add_done_callback(lambda _: self._subscriptions.discard(subscription))
        return subscription

    async def _follow(self, subscription: Subscription, after: int) -> None:
        async for event in self.broker.events(after=after, follow=True):
            request = event.request
            if event.type != "created" or request is None:
                continue
            if subscription.session is not None and request.origin.session != subscription.session:
                continue
            try:
                outcome = subscription.callback(request)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                log.exception("subscriber %r failed on request %s", subscription.callback, request.id)


def _receipt(event: Any) -> Receipt:
    data = event.data
    return Receipt(event.id, event.at, data.get("message", ""), data.get("to"), data.get("session"), data.get("agent"))
