"""Channels: the ways a notice reaches a person (webhook, email, Slack, or a plugin).

A channel is one small interface, `Channel`: `send` one `Message` (a delivery and its
request) and return an optional reference (a message id the channel may need later, to
update what it sent), or raise. Any exception is retried later with back-off; raise
`PermanentFailure` for a delivery that can never succeed (it becomes a dead letter at
once). `aclose` releases what the channel holds.

A channel is made by a factory, `factory(config, context) -> Channel`, found by the type
named in the routing file: a built-in (`webhook`, `email`, `slack`), the name of an entry
point in the group `interlock.channels` (what a package of your own declares, so a team
adds Teams, Discord or SMS without touching interlock), or `module:attribute`.

A message offers answers only to someone who may give them (`Message.may_answer`), by the
rule of every other surface (`interlock.principals.can_answer`), judged for the person it
is addressed to by `addressee`; an escalation to someone else tells them whom the request
waits on instead (`escalation_note`). A message to a team's own address (`Message.to_team`)
is read by its members, and interlock records answers by the person who gives them: it
offers only answers that name that person (a Slack user, a webhook's `by`), never a link
that answers for whoever presses it (`team_note`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC
from importlib.metadata import entry_points
from typing import Any, Protocol

from ..model import Request
from ..outbox import Delivery
from ..principals import Principal
from ..routing import ChannelConfig, Routing
from ..store import PeopleDirectory

__all__ = [
    "BUILT_IN",
    "Channel",
    "ChannelContext",
    "ChannelError",
    "ChannelFactory",
    "Message",
    "PermanentFailure",
    "addressee",
    "escalation_note",
    "find_factory",
    "lacking_secrets",
    "unaddressed",
    "open_channels",
    "routing_dropped",
    "routing_left",
    "routing_teams",
    "seconds_option",
    "team_note",
]


class PermanentFailure(Exception):
    """A delivery that no retry will make succeed (refused by the receiver, no address)."""


class ChannelError(ValueError):
    """A channel that cannot be made from its configuration; the message says why."""


def seconds_option(value: object, where: str, cap: float = 300.0) -> float:
    """A channel's `timeout` option: a number of seconds above 0 and up to `cap`."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= cap:
        raise ChannelError(f"{where}: a number of seconds, above 0 and up to {cap:g}, not {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class ChannelContext:
    """What channels share: where the inbox is, and the signed answer links the server
    accepts (given when the server runs the delivery loop; None standalone)."""

    inbox_url: str | None = None
    answer_links: Any = None
    """An object with `link(request, recipient, answers) -> str | None` (email's one-click answers)."""

    def request_url(self, request_id: str) -> str | None:
        """The request's own page in the web inbox (it sends a person who is signed out
        through the sign-in and back to it); None without an inbox_url."""
        return f"{self.inbox_url.rstrip('/')}/requests/{request_id}" if self.inbox_url else None


@dataclass(frozen=True, slots=True)
class Message:
    """What one delivery sends: the delivery (its kind, recipient, address, idempotency
    key), the request as it is now, and the earlier deliveries of the same request on the
    same channel (with their references, to update a message sent before)."""

    delivery: Delivery
    request: Request
    context: ChannelContext
    earlier: tuple[Delivery, ...] = field(default=())
    may_answer: bool = True
    """Whether the person (or team) it is addressed to may answer the request, as the rules
    are when it is sent: the delivery loop judges it (False for a request that settled, and
    for an escalation to someone who is neither its recipient nor in its team). A channel
    offers answers (links, buttons) only when True: the server would refuse them."""
    may_read: bool = True
    """Whether they may open the request in the web inbox (its page refuses anyone else):
    a channel links to it only when True."""
    to_team: bool = False
    """Whether it goes to a team's own address (its route's), which its members share,
    rather than to one person. `may_answer` then says whether the team's members may
    answer; an answer through the message counts only as a member it names (a Slack user
    who clicks, a webhook's `by`), so a channel whose answers name nobody (an email's
    one-click links: whoever reads the mailbox can press them) offers none, and says where
    to answer as oneself instead (`team_note`). The server refuses an answer given as the
    team itself."""

    @property
    def idempotency_key(self) -> str:
        return self.delivery.id


async def addressee(
    directory: PeopleDirectory, teams: Mapping[str, Sequence[str]], name: str, request: Request
) -> Principal:
    """`name`, whom a channel's message is addressed to or its answer speaks for, as the
    access rules (`interlock.principals`) see them: the principal of that name in the store
    (a name it does not know: a team if the routing's `teams` name it, else a person), with
    the teams they are in as the store has them now (an agent: its owner's), and the team
    the request is to if only the routing names them in it (`routing_teams`). A team
    answers nothing itself: its members do, each as themselves. The server judges an
    answer through a channel by this, and the delivery loop whether a message offers
    answers; the server's inbox and API count the same teams (`Auth.with_teams`)."""
    principal = await directory.get_principal(name) or Principal(name, "team" if name in teams else "human")
    member = principal.owner if principal.kind == "agent" else principal.name
    if principal.kind != "admin" and member is not None:
        found = await directory.teams_of(member)
        if found:
            principal = replace(principal, teams=found)
        team = request.to
        if team is not None and team not in principal.teams:
            listed = await routing_teams(directory, {team: teams.get(team, ())}, member)
            if listed:
                principal = replace(principal, teams=principal.teams | listed)
    return principal


async def routing_teams(directory: PeopleDirectory, teams: Mapping[str, Sequence[str]], name: str) -> frozenset[str]:
    """The teams only the routing (its `teams`) makes `name` a member of: those that list
    `name` and whose name the store keeps nothing under. A team the store keeps has the
    store's members (which the routing's are added to when they are all people here), and
    a name the store has for a person or an agent is theirs: a routing's team of that name
    gives its members nothing of theirs. Every surface counts these teams, so a member of
    one reads and answers its requests in the inbox and the API as through its channels."""
    found = [team for team, members in teams.items() if name in members]
    return frozenset([team for team in found if await directory.get_principal(team) is None])


def routing_dropped(
    before: Mapping[str, Sequence[str]], after: Mapping[str, Sequence[str]]
) -> dict[str, frozenset[str]]:
    """By team, the names a routing's `before` teams list and its `after` teams no longer
    do (a team `after` leaves out: all its members): those a routing change may have taken
    out of a team (`routing_left` says who it did)."""
    dropped = {team: frozenset(members) - frozenset(after.get(team, ())) for team, members in before.items()}
    return {team: names for team, names in dropped.items() if names}


async def routing_left(
    directory: PeopleDirectory, before: Mapping[str, Sequence[str]], after: Mapping[str, Sequence[str]]
) -> dict[str, frozenset[str]]:
    """By team, who a routing change (its teams `before` and `after`) took out of it:
    listed in it `before` and in it no more, neither in the store's team of that name nor
    as `after` lists them (`routing_teams`). A name the store has for a person or an agent
    gave its members nothing, so nobody leaves it."""
    left: dict[str, set[str]] = {}
    for team, names in routing_dropped(before, after).items():
        principal = await directory.get_principal(team)
        if principal is not None and principal.kind != "team":
            continue
        for name in names:
            if team not in await directory.teams_of(name) | await routing_teams(directory, after, name):
                left.setdefault(team, set()).add(name)
    return {team: frozenset(names) for team, names in left.items()}


def escalation_note(message: Message) -> str | None:
    """What an escalation says first, in plain words: whom the request waits on and since
    when, that it was escalated to its addressee, and (when they may not answer it) who
    can, and what they can do where they may not open it either. None for any other
    message."""
    d, request = message.delivery, message.request
    if d.kind != "escalation":
        return None
    waits_on = request.to or "its recipient"
    since = request.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    note = f"Nobody has answered this request yet: it waits on {waits_on} since {since}, and was escalated to you"
    note += f" ({d.recipient})."
    if message.may_answer:
        return note
    note += f" It is not yours to answer: only {waits_on} can."
    if not message.may_read:
        asked = request.requester
        also = f", or {asked}, who asked for it" if asked and asked not in (d.recipient, waits_on) else ""
        note += f" Nor may you open it in the inbox: remind {waits_on}{also}."
    return note


def team_note(message: Message) -> str | None:
    """What a message to a team's own address says, through a channel whose answers
    cannot name the member who gives them (email's links, which whoever reads the shared
    mailbox can press): that it offers no one-click answers, and where to answer as
    oneself. None for any other message (to a person, one the team may not answer, or one
    sent once the request settled)."""
    d = message.delivery
    if not message.to_team or not message.may_answer or d.kind == "settled":
        return None
    note = (
        f"This went to the {d.recipient} team's shared address, so it has no one-click answers: interlock "
        "records who answers, and a click here could not say which of you it was."
    )
    if message.may_read:
        where = "the inbox" if message.context.inbox_url else "the interlock inbox"
        return f"{note} Answer it in {where}, signed in as yourself."
    return (
        f"{note} Nor can you open it in the inbox: none of the {d.recipient} team's members is a person "
        "interlock knows. Ask whoever runs interlock to add you."
    )


class Channel(Protocol):
    async def send(self, message: Message) -> str | None:
        """Deliver `message`; return a reference to what was sent, if the channel has one."""
        ...

    async def aclose(self) -> None: ...


ChannelFactory = Callable[[ChannelConfig, ChannelContext], Channel]

BUILT_IN = {
    "webhook": "interlock.channels.webhook:WebhookChannel",
    "email": "interlock.channels.email:EmailChannel",
    "slack": "interlock.channels.slack:SlackChannel",
}


def _load(target: str, where: str) -> ChannelFactory:
    module_name, _, attribute = target.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise ChannelError(f"{where}: cannot load {target!r}: {exc}") from None
    if not callable(found):
        raise ChannelError(f"{where}: {target!r} is not a channel factory")
    factory: ChannelFactory = found
    return factory


def find_factory(kind: str) -> ChannelFactory:
    """The factory of a channel type: built-in, entry point, or `module:attribute`."""
    if kind in BUILT_IN:
        return _load(BUILT_IN[kind], f"channel type {kind!r}")
    for point in entry_points(group="interlock.channels"):
        if point.name == kind:
            return _load(point.value, f"entry point {kind!r}")
    if ":" in kind:
        return _load(kind, f"channel type {kind!r}")
    plugins = sorted(p.name for p in entry_points(group="interlock.channels"))
    known = ", ".join([*BUILT_IN, *plugins])
    raise ChannelError(f"unknown channel type {kind!r} (known: {known}; or give 'module:factory')")


def lacking_secrets(configs: Mapping[str, ChannelConfig]) -> list[str]:
    """What the built-in channels without their secret cannot do, one line each, for a
    server to say at start: a webhook channel without `secret` sends unsigned bodies (which
    a receiver that verifies them refuses) and takes no answers; a Slack channel without
    `signing_secret` posts buttons whose clicks are refused."""
    out = []
    for name, config in configs.items():
        if config.type == "webhook" and not config.options.get("secret"):
            out.append(
                f"channels.{name} has no secret: its webhooks go unsigned (a receiver that verifies them refuses "
                f"them) and it takes no answers at /api/v1/inbound/{name}"
            )
        elif config.type == "slack" and not config.options.get("signing_secret"):
            out.append(
                f"channels.{name} has no signing_secret: its messages' buttons and modals cannot answer "
                f"(Slack's calls to /slack/interactive/{name} are refused)"
            )
    return out


_ADDRESSES = {
    "webhook": ("a URL", "url"),
    "email": ("an email address", None),
    "slack": ("a Slack user or channel id", "channel"),
}
"""What each built-in channel sends to, and the option that gives it one for every route
(None: each route gives its own)."""


def unaddressed(routing: Routing) -> list[str]:
    """The routes that name a built-in channel with no address of its own and give it none,
    one line each, for a server to say at start and `routing set` when it takes the routing:
    each message sent there fails, to end as a dead letter (a route may be written before
    its person's address is known, so it is not refused). A plugin's options are its own."""
    routes = [
        *((f"recipients.{name}", route) for name, route in routing.recipients.items()),
        *((f"teams.{name}", route) for name, route in routing.team_routes.items()),
        *([("default", routing.default)] if routing.default is not None else []),
    ]
    out = []
    for where, route in routes:
        for name in route.channels:
            config = routing.channels[name]
            if config.type not in _ADDRESSES or name in route.addresses:
                continue
            what, own = _ADDRESSES[config.type]
            if own is not None and config.options.get(own):
                continue
            instead = f" (or channels.{name}.{own}, for every route)" if own is not None else ""
            out.append(
                f"{where} sends on channels.{name} with no address: each message there fails until "
                f"{where}.addresses.{name} gives {what}{instead}"
            )
    return out


def open_channels(configs: Mapping[str, ChannelConfig], context: ChannelContext) -> dict[str, Channel]:
    """A channel for each configuration, by name; a type that cannot be found is refused
    naming the channel (`channels.NAME.type: ...`)."""
    channels: dict[str, Channel] = {}
    for name, config in configs.items():
        try:
            factory = find_factory(config.type)
        except ChannelError as exc:
            raise ChannelError(f"channels.{name}.type: {exc}") from None
        channels[name] = factory(config, context)
    return channels
