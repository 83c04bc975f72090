"""Where requests and events are kept, behind small ports, one per concern.

- `RequestStore`: requests and their events. It does the atomic parts: insert a request
  (unless its channel is closed), settle it only while it is pending (the first
  settlement wins), and append an event in the same transaction as every change.
- `PrincipalStore`: principals, their tokens and the web sessions opened with them.
- `RunStore`: runs, the requests each parked run waits on, and who holds a claimed run.
- `FollowupStore`: the messages held for busy runs until their agent takes them.
- `GrantStore`: capability grants as issued (by an answer, or given directly), listed,
  looked up and revoked, each issuance and revocation with its event.
- `OutboxStore`: the notices the request store writes with each event that concerns a
  person, and their deliveries to channels, claimed under a lease.
- `PolicyStore`: the declarative approval policies of agents (per tool server), each
  change versioned and recorded with its event.
- `SecretKeyStore`: the fingerprint of the secret key the nodes sign with, and the public
  id of their grant key.
- `Store`: all eight, as every backend implements them over one database.

The Broker holds the semantics (waiting, hooks, expiry timing) and is the only caller.
Core code never imports a driver: each backend module imports its own. The SQL backends
share their logic (`_sql.py`); each dialect module keeps its connection handling, its
parameters and its `.sql` files.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Literal, Protocol, TypedDict, TypeVar, get_args, overload, runtime_checkable

from ..approval_policies import ApprovalPolicy
from ..dashboard import Figures, Outline
from ..errors import InvalidRequest, NewerDatabase
from ..followups import Followup
from ..model import (
    Claim,
    Event,
    IssuedGrant,
    Kind,
    Request,
    Response,
    Run,
    RunStatus,
    Status,
    search_words,
    text_words,
)
from ..outbox import Delivery, DeliveryState, LinkUse, Notice
from ..principals import IssuedSession, IssuedSignInLink, IssuedToken, LiveToken, Principal, TokenInfo, WebSession
from ..secret_key import GrantKeyId
from ._url import UnknownOption

__all__ = [
    "DeliveryPort",
    "EventQuery",
    "FollowupStore",
    "GrantQuery",
    "GrantStore",
    "ImmediateRequests",
    "ListFilters",
    "Listed",
    "MAX_LIST_LIMIT",
    "MAX_SEARCH_LENGTH",
    "NewerDatabase",
    "OutboxStore",
    "PAGE_BYTES",
    "PageBudget",
    "PendingFilters",
    "PeopleDirectory",
    "PolicyStore",
    "PrincipalStore",
    "Query",
    "RequestStore",
    "RunClaim",
    "RunQuery",
    "RunStore",
    "SecretKeyStore",
    "Store",
    "UnknownOption",
    "search_texts",
    "search_words",
    "stored_size",
    "text_words",
]


MAX_LIST_LIMIT = 1000
"""The most requests one page of a list holds."""

MAX_SEARCH_LENGTH = 500
"""The longest text a list searches for, in characters."""

PAGE_BYTES = 8 * 1024 * 1024
"""What the requests of one page of a list may add up to, as `stored_size` counts their
stored JSON (about what their parsed form holds): a page of big requests ends there,
short of its limit, with a cursor to the rest. A thousand ordinary requests (2 to 8 KB
each) fit; the requests of one page are otherwise read, parsed and sent whole, and a
thousand of the largest the limits let through (1 MiB each) held the server for a minute.
A page of events is bounded the same way by the requests its events carry (each event
counts its request: the server writes it out with every event about it)."""


def stored_size(text: str | None) -> int:
    """What a request's stored JSON (its document, or its response) counts against a
    budget: about the bytes its parsed form holds.

    Its length alone undercounts JSON made of small parts: 28 MiB of `[[[[0]]]]` parse
    into 870 MiB of lists. Each array, object and item costs Python an object or a
    pointer more than its few characters, so those are counted apart (within a factor of
    0.8 to 6 of what the parsed form holds, for every shape of JSON; text alone counts its
    length). The requests cache and the pages of a list count with it."""
    if not text:
        return 0
    return len(text) + 64 * text.count("[") + 160 * text.count("{") + 48 * text.count(",")


class PageBudget:
    """How much of `PAGE_BYTES` (or `budget`) a page has left, item by item in the page's
    order: the first item is always taken (a page moves on), each later one only while
    the total stays within the budget. Every store cuts its pages of requests and of
    events with it, so the same requests make the same pages on each."""

    __slots__ = ("first", "left")

    def __init__(self, budget: int = PAGE_BYTES) -> None:
        self.left = budget
        self.first = True

    def takes(self, size: int) -> bool:
        """Whether the next item, of `size` (`stored_size` of the request it is or
        carries), goes on the page; once one does not, the page ends before it."""
        if not self.first and size > self.left:
            return False
        self.first = False
        self.left -= size
        return True


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Listed(Sequence[T]):
    """What `RequestStore.list` and `find_events` return: the requests (or events), and
    whether the store cut the page short of its limit because the stored JSON of the
    requests on it passed `PAGE_BYTES` (`PageBudget`); then at least one more matches
    after the last one. It reads as the sequence of its items: a caller that pages on
    goes on while a page is full or `cut`, and only then."""

    items: Sequence[T]
    cut: bool = False

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...

    def __getitem__(self, index: int | slice) -> T | Sequence[T]:
        return self.items[index]

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[T]:
        return iter(self.items)


def _filter(about: str, *, wire: str | None = "", name: bool = False, **rules: Any) -> dict[str, Any]:
    """What a filter of `Query` is, as its field's metadata: what it keeps (said here once:
    `ListFilters`' documentation and the HTTP API's parameters are made from it), the query
    parameter it is on the HTTP API (its own name for "", none for None), whether it names
    someone or something (so is bounded like a name), and the parameter's rules: the
    `values` it takes, its bounds."""
    return {"about": about, "wire": wire, "name": name, "rules": rules}


@dataclass(frozen=True, slots=True)
class Query:
    """Which requests a list returns: those matching every filter given, newest first by
    default, a page at a time (a keyset page: `after` is the id of the last row seen).

    `Broker.list` takes these filters as keyword arguments (`ListFilters`), checks them
    (`check`) and hands the store the `Query`; the remote broker sends them as the query
    string of `GET /requests`, and the server reads them back with the same names.
    """

    status: Status | str | None = field(
        default=None, metadata=_filter("only requests in this state", values=tuple(Status))
    )
    kind: str | None = field(
        default=None, metadata=_filter("only questions, or only approvals", name=True, values=get_args(Kind))
    )
    recipient: str | None = field(
        default=None, metadata=_filter("only requests to this name (a person, an agent or a team)", name=True)
    )
    teams: Sequence[str] = field(
        default=(), metadata=_filter("also the requests to these teams, with `recipient` (a member's inbox)", wire=None)
    )
    requester: str | None = field(default=None, metadata=_filter("only requests made by this name", name=True))
    session: str | None = field(default=None, metadata=_filter("only requests of this session", name=True))
    channel: str | None = field(default=None, metadata=_filter("only requests from this channel", name=True))
    agent: str | None = field(default=None, metadata=_filter("only requests of this agent", name=True))
    run: str | None = field(default=None, metadata=_filter("only requests of this run", name=True))
    after: str | None = field(
        default=None,
        metadata=_filter(
            "the previous page's next_cursor, as it is (or the id of the last request seen); any other text "
            "is refused (InvalidCursor; over HTTP 422 invalid_cursor)",
            wire="cursor",
            name=True,
        ),
    )
    limit: int = field(default=50, metadata=_filter("at most this many", ge=1, le=MAX_LIST_LIMIT))
    order: Literal["asc", "desc"] = field(
        default="desc", metadata=_filter("newest first (desc) or oldest first (asc)", values=("desc", "asc"))
    )
    settled: bool = field(default=False, metadata=_filter("only settled requests (any status but pending)"))
    text: str | None = field(
        default=None,
        metadata=_filter(
            "only requests with a word starting with each word of this in their texts "
            "(title, details, prompts, options, answers, reason)",
            max_length=MAX_SEARCH_LENGTH,
        ),
    )
    since: datetime | None = field(default=None, metadata=_filter("only requests created at or after this time"))
    until: datetime | None = field(default=None, metadata=_filter("only requests created before this time"))
    words: tuple[str, ...] = field(default=(), init=False, repr=False)
    """The words of `text` a store matches (`search_words`): lower case, letters and digits."""

    @classmethod
    def of(cls, filters: Mapping[str, Any]) -> Query:
        """The query of `list`'s keyword arguments; one it does not take is a TypeError
        naming it and the filters there are (Python's own named this class), with the name
        of the filter meant where it is another surface's word for it."""
        known = {f.name for f in fields(cls) if f.init}
        unknown = sorted(filters.keys() - known)
        if unknown:
            meant = {"to": "recipient", "cursor": "after", "state": "status", "from": "requester"}
            hints = [f"{name!r} is {meant[name]!r} here" for name in unknown if name in meant]
            names = ", ".join(repr(name) for name in unknown)
            raise TypeError(
                f"list() got an unknown filter {names}{' (' + '; '.join(hints) + ')' if hints else ''}: "
                f"it takes {', '.join(sorted(known))}"
            )
        return cls(**filters)

    def __post_init__(self) -> None:
        if self.status is not None and not isinstance(self.status, Status):
            try:
                object.__setattr__(self, "status", Status(self.status))
            except ValueError:
                statuses = ", ".join(status.value for status in Status)
                raise InvalidRequest(f"status must be one of {statuses}, not {self.status!r}") from None
        if not isinstance(self.teams, tuple):
            object.__setattr__(self, "teams", tuple(self.teams))
        object.__setattr__(self, "words", search_words(self.text) if self.text else ())

    def check(self) -> None:
        """Refuse what no list takes (`InvalidRequest`, a `ValueError`): a limit out of 1 to
        1000, an order but asc or desc, a kind but question or approval, a time without its
        time zone. (A status but one there is is refused as the query is made.)"""
        if not 1 <= self.limit <= MAX_LIST_LIMIT:
            raise InvalidRequest(f"limit must be between 1 and {MAX_LIST_LIMIT}, not {self.limit!r}")
        if self.order not in ("asc", "desc"):
            raise InvalidRequest(f"order must be 'asc' or 'desc', not {self.order!r}")
        if self.kind is not None and self.kind not in get_args(Kind):
            raise InvalidRequest(f"kind must be 'question' or 'approval', not {self.kind!r}")
        for name, when in (("since", self.since), ("until", self.until)):
            if when is not None and when.tzinfo is None:
                raise InvalidRequest(f"{name} needs a time zone (UTC, say)")

    def texts(self) -> Iterator[tuple[str, str | None, int | None]]:
        """Each filter given as text, by the name a caller knows it by, with its longest
        length: its own, or None for a name (the broker's limits say how long one may be)."""
        for spec in fields(self):
            rules = spec.metadata.get("rules", {})
            if spec.metadata.get("name") or "max_length" in rules:
                yield spec.metadata["wire"] or spec.name, getattr(self, spec.name), rules.get("max_length")


class ListFilters(TypedDict, total=False):
    # The fields of `Query`, as the keyword arguments of `Broker.list`: type checkers read
    # them here, mypy checks each against `Query` where a list makes one, and a test that
    # there are no others. What each keeps is said once, on `Query`'s field.
    status: Status | str | None
    kind: Kind | None
    recipient: str | None
    teams: Sequence[str]
    requester: str | None
    session: str | None
    channel: str | None
    agent: str | None
    run: str | None
    after: str | None
    limit: int
    order: Literal["asc", "desc"]
    settled: bool
    text: str | None
    since: datetime | None
    until: datetime | None


ListFilters.__doc__ = (
    "The keyword arguments of `Broker.list` (the fields of `Query`), each a filter: "
    + "; ".join(
        f"`{spec.name}`: {spec.metadata['about']}"
        + ("" if spec.default in (None, False, ()) else f" ({spec.default!r} by default)")
        for spec in fields(Query)
        if spec.init
    )
    + "."
)


class PendingFilters(TypedDict, total=False):
    # `ListFilters` but the status and the page, which `Broker.pending` sets itself.
    kind: Kind | None
    recipient: str | None
    teams: Sequence[str]
    requester: str | None
    session: str | None
    channel: str | None
    agent: str | None
    run: str | None
    text: str | None
    since: datetime | None
    until: datetime | None


PendingFilters.__doc__ = (
    "The keyword arguments of `Broker.pending`: those of `Broker.list` (`ListFilters`) but "
    "`status`, `settled` and the page (`after`, `limit`, `order`)."
)


@dataclass(frozen=True, slots=True)
class EventQuery:
    """Filters and a page for `Store.find_events`: events with `after < id <= until`,
    oldest first, at most `limit` (fewer where the requests they carry pass `PAGE_BYTES`).

    `involving` keeps the events about requests to or from that name and the updates to or
    by them (what a principal may see); `request`, `session` and `run` keep the events of
    that request, session or run. A store answers from indexes, so a page costs about its
    own size, not the size of the log.
    """

    after: int = 0
    until: int | None = None
    limit: int = 500
    involving: str | None = None
    request: str | None = None
    session: str | None = None
    run: str | None = None
    teams: tuple[str, ...] = ()
    """With `involving`: also the events about requests to these teams (a member's)."""


_SEARCHED_IN_ASKS = ("prompt", "label", "description", "title")
"""The members of an ask (at any depth: an option's, a form field's) whose text a search reads."""


def search_texts(request: Request) -> list[str]:
    """The texts a search reads in a request, as `Query.text` says: its title and details;
    in each ask its prompt and every label, description and title within it (options, form
    fields); once settled, every string of the answers (a yes or no as `yes` or `no`), and
    the reason. Not its ids, times, status, kind, names or origin: no one searches for
    those words, and a search for `12` would otherwise find every request made in December. Every store reads the
    same texts (the SQL stores from the documents they keep, see `take_texts`)."""
    texts = [request.title, request.details]
    for ask in request.asks:
        _named_strings(ask.to_dict(), texts)
    response = request.response
    if response is not None:
        _strings(response.answers, texts)
        texts.append(response.reason)
    return texts


def _named_strings(value: Any, into: list[str]) -> None:
    """Append the strings of the `_SEARCHED_IN_ASKS` members of every object in `value`."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(item, str):
                if key in _SEARCHED_IN_ASKS:
                    into.append(item)
            else:
                _named_strings(item, into)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _named_strings(item, into)


def _strings(value: Any, into: list[str]) -> None:
    """Append every string in a JSON value (not the keys), and each true or false as the
    word a person reads for it: `yes` or `no`."""
    if isinstance(value, str):
        into.append(value)
    elif value is True or value is False:
        into.append("yes" if value else "no")
    elif isinstance(value, Mapping):
        for item in value.values():
            _strings(item, into)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _strings(item, into)


@runtime_checkable
class ImmediateRequests(Protocol):
    """What a request store whose reads and writes never wait (the in-process memory store)
    also offers: `get`, `insert` and `settle` as plain calls, each doing what its async
    namesake does, so the broker's hot path spends no coroutine on them."""

    def get_now(self, request_id: str) -> Request | None: ...

    def insert_now(self, request: Request) -> tuple[Request, bool]: ...

    def settle_now(self, request: Request) -> Request | None: ...


class RequestStore(Protocol):
    """Requests and events. Every method that changes state appends its event(s) atomically."""

    shared: bool
    """True when other processes may change the data: the broker then follows the event
    log for their changes (wake-up hints plus a bounded poll)."""

    poll_interval: float
    """The longest a shared store lets a foreign change go unnoticed without a hint."""

    async def open(self) -> None: ...

    async def aclose(self) -> None: ...

    async def insert(self, request: Request) -> tuple[Request, bool]:
        """Store a new pending request and its `created` event.

        With an idempotency key already used by the same requester, store nothing and
        return the first request with False. In a channel closed (for everyone or for the
        request's requester) raise `Closed`, checked in the insert's own transaction.
        """
        ...

    async def close_channel(self, channel: str, response: Response, *, requester: str | None = None) -> list[Request]:
        """Record `channel` as closed (for every requester, or for `requester` only) and
        cancel its pending requests (theirs only) with `response`, in one transaction;
        return the requests it settled. Inserts there raise `Closed` until reopened."""
        ...

    async def reopen_channel(self, channel: str, *, requester: str | None = None) -> bool:
        """Take back the closure of `channel` for `requester` (every closure of it when
        None). True if there was one."""
        ...

    async def settle(self, request: Request) -> Request | None:
        """Store `request` (already settled) if its stored version is still pending, and
        return it as stored; None if it was not pending (or is unknown).

        An answer or a refusal decided in the name of a person whose every token is revoked
        (`principals.decided_in_the_name_of`, `tokens_all_revoked`) is refused with
        `principals.refused_cut_off`, changing nothing, by the same write that would settle
        it (so a revocation that commits first always wins); so is it by `settle_granting`
        and `settle_claiming`."""
        ...

    async def settle_pending(
        self, status: Status, response: Response, *, channel: str | None = None, due: datetime | None = None
    ) -> list[Request]:
        """Settle every pending request in `channel` (all when None), or only those whose
        `expires_at` is at or before `due` when given; return the requests it settled.
        With `due`, a store may settle only the longest overdue of them in one call (a
        transaction that holds no one up for long): the expiry loop calls again while
        `next_expiry` is due."""
        ...

    async def append_event(self, type: str, data: Mapping[str, Any]) -> Event:
        """Append an event that changes no request (a progress update, say)."""
        ...

    async def consume(self, request_id: str, by: str | None, at: datetime) -> bool:
        """Mark an answered request consumed, with its `consumed` event, if no one has yet.

        A conditional write: one caller wins across every process and node. False when the
        request is unknown, not answered, or consumed already.
        """
        ...

    async def release(self, request_id: str, at: datetime) -> bool:
        """Mark a request released, if it was created detached or is still pending and no
        one has released it yet.

        A conditional write: one caller wins across every process and node, whichever
        created the request. False when the request is unknown, neither detached nor
        pending, or released already.
        """
        ...

    def requester_of(self, requester: str | None) -> str | None:
        """Who a request inserted with `requester` is recorded as made by (the store's
        authority may record someone else: a server records the token's principal)."""
        ...

    def note_read(self, request_id: str) -> None:
        """A waiter has read the outcome of `request_id`. A store that keeps only a bounded
        retention of outcomes counts read ones against it and keeps unread ones; a durable
        store keeps every outcome and has nothing to do."""

    async def next_expiry(self) -> datetime | None:
        """The earliest `expires_at` among pending requests."""
        ...

    async def get(self, request_id: str, *, fresh: bool = True) -> Request | None:
        """The request by id. With `fresh=False` a pending request may come from a cache
        and be settled by now: enough for a settlement, which is conditional anyway."""
        ...

    async def get_by_key(self, requester: str | None, key: str) -> Request | None:
        """The request `requester` made with idempotency key `key`, as stored now, or None:
        what an insert with that key would give back instead of storing a new one."""
        ...

    async def list(self, query: Query) -> Listed[Request]:
        """The requests matching `query`, a page of at most `query.limit` in its order,
        cut short (`Listed.cut`) where their stored JSON passes `PAGE_BYTES`: a store
        neither parses nor, where it can help it, reads the requests past that point."""
        ...

    async def outlines(self, query: Query, now: datetime) -> Sequence[Outline]:
        """The requests `list` returns, as the few columns the dashboard counts (their
        ages counted to `now`)."""
        ...

    async def figures(self, pending: Query, settled: Query, now: datetime, teams: Collection[str]) -> Figures:
        """The dashboard's figures (`dashboard.count`) over the requests `outlines(pending)`
        and `outlines(settled)` return, `teams` the names that are teams: counted where the
        store can count cheapest."""
        ...

    async def events(self, after: int = 0, limit: int = 500) -> Listed[Event]:
        """Events with id greater than `after`, oldest first, a page as `find_events` cuts it."""
        ...

    async def find_events(self, query: EventQuery) -> Listed[Event]:
        """A page of the events that match `query`, oldest first: at most `query.limit`,
        cut short (`Listed.cut`) where the stored JSON of the requests its events carry
        passes `PAGE_BYTES`, each event counting its request's. A store neither parses
        nor, where it can help it, reads the requests past that point."""
        ...

    async def changes(self, after: int = 0, limit: int = 500) -> Sequence[tuple[int, str, str | None]]:
        """Like `events`, only (event id, type, request id): cheap to follow."""
        ...

    async def last_event_id(self) -> int: ...

    async def check_schema(self) -> None:
        """Raise `NewerDatabase` if a later version of interlock has migrated the database
        since this store opened it (its writes are then refused): a read of the store,
        changing nothing, so `Unavailable` too while the store cannot be reached."""
        ...

    def on_foreign_change(self, callback: Callable[[], None], settled: Callable[[Request], None] | None = None) -> None:
        """Have `callback` called (on the event loop) when another process may have written.

        A store that hears of another process's settlement before its event can be read
        (PostgreSQL: the notification carries it) calls `settled` first with the request
        as settled, when it holds the request's pending copy; the event log still brings
        the same settlement later, in order."""
        ...

    async def claim(self, request_id: str, by: str, at: datetime) -> Claim | None:
        """Claim a pending request for `by`, with its `claimed` event, unless someone holds
        it already: a conditional write, so one member wins across every node. Returns the
        claim that stands afterwards (`by`'s, or the earlier one); None when the request is
        unknown, or settled with no claim."""
        ...

    async def unclaim(self, request_id: str, by: str | None, at: datetime) -> Claim | None:
        """Give up the claim on a pending request, with its `unclaimed` event: `by`'s
        claim only, or anyone's when None (an admin). Returns the claim removed, if any."""
        ...

    async def claims(
        self, request_ids: Sequence[str], *, involving: str | None = None, teams: Collection[str] = ()
    ) -> Mapping[str, Claim]:
        """The claims on these requests, by request id (those without one left out); with
        `involving`, only of those to or from that name or to one of `teams`, as the
        requests' index columns say (no request read whole)."""
        ...

    async def note_viewed(self, request_id: str, by: str, at: datetime) -> bool:
        """Record that `by` has opened the request, with a `viewed` event the first time
        only (once per person, across every node). True when this was the first time."""
        ...


class PrincipalStore(Protocol):
    """Principals, tokens and web sessions (used by the server and `interlock token`)."""

    async def save_principal(self, principal: Principal) -> None:
        """Add a principal, or change the kind and owner of one with the same name."""
        ...

    async def get_principal(self, name: str) -> Principal | None:
        """The human, agent or team (kind `team`) of that name."""
        ...

    async def list_principals(self) -> Sequence[Principal]:
        """Every human, agent and team, by name."""
        ...

    async def save_team(self, team: str, members: Sequence[str] = ()) -> None:
        """Create the team if it is new and add these members (people) to it. Raises
        `ValueError` when the name is a human's or an agent's, or a member is no human."""
        ...

    async def remove_team_members(self, team: str, members: Sequence[str]) -> int:
        """Take these members out of the team; how many were in it. In the same
        transaction, append a `team_left` event naming those who were (`TEAM_LEFT`)."""
        ...

    async def delete_team(self, team: str) -> bool:
        """Delete the team and its memberships; False if there was none. In the same
        transaction, append a `team_left` event naming its members, if it had any."""
        ...

    async def team_members(self, team: str) -> Sequence[str] | None:
        """The members of the team, by name; None when there is no such team."""
        ...

    async def teams_of(self, name: str) -> frozenset[str]:
        """The teams `name` is a member of."""
        ...

    async def save_token(self, token: IssuedToken) -> None: ...

    async def principal_for_token(self, token_hash: str) -> Principal | None:
        """The principal a live (unrevoked) token belongs to."""
        ...

    async def live_token(self, token_hash: str) -> LiveToken | None:
        """The id and principal of a live (unrevoked) token."""
        ...

    async def list_tokens(self) -> Sequence[TokenInfo]:
        """Every live (unrevoked) token: its id, whose it is and when it was made, by
        principal and then oldest first."""
        ...

    async def tokens_all_revoked(self, principal: str) -> bool:
        """Whether `principal` had tokens of their own (`token create`'s, not a web
        session's) and every one of them is revoked: whom `token revoke NAME` cut off."""
        ...

    async def cut_off(self, names: Collection[str]) -> frozenset[str]:
        """Of `names`, those whom `token revoke NAME` cut off (`tokens_all_revoked`), in one
        query: what a delivery loop asks of each batch of deliveries it is to send."""
        ...

    async def revoke_tokens(self, *, token_id: str | None = None, principal: str | None = None) -> int:
        """Revoke one token by id, or every token of a principal; return how many.

        In the same transaction, end the web sessions opened with them and append a
        `token_revoked` event (`principal`, `tokens`: their ids, `all`: every token of the
        principal), so every node ends the streams opened with them.
        """
        ...

    # the web inbox's sign-in

    async def start_session(self, token_hash: str, session: IssuedSession) -> WebSession | None:
        """Store a session opened with the live token of this hash; None if there is none.
        Sessions past their expiry may be deleted meanwhile."""
        ...

    async def get_session(self, session_hash: str, now: datetime) -> WebSession | None:
        """The session of this hash, while unexpired and its token is live."""
        ...

    async def end_session(self, session_hash: str) -> WebSession | None:
        """Delete the session and append a `signed_out` event (`principal`, `session`: its
        id) in the same transaction; return it, or None if there was none."""
        ...

    # one-time sign-in links (printed by `interlock serve`, sent by email)

    async def save_signin_link(self, link: IssuedSignInLink) -> None:
        """Store a sign-in link's hash for its principal (which must exist). Links past
        their expiry may be deleted meanwhile."""
        ...

    async def use_signin_link(self, link_hash: str, now: datetime) -> Principal | None:
        """Mark the link of this hash used, if it is unused and unexpired at `now`, and
        return whom it signs in; None otherwise. A conditional write: of any number of
        callers on any node, one gets the principal."""
        ...


@dataclass(frozen=True, slots=True)
class RunQuery:
    """Filters and a keyset page for `RunStore.list_runs`, in the order runs were made
    (`created_at`, then `id`). `after` is the (created_at, id) of the last run seen;
    `involving` keeps the runs a person may see: those that name started, those an agent it
    owns started, and those with requests to it (or, with `teams`, to one of these teams:
    a member's)."""

    agent: str | None = None
    session: str | None = None
    status: RunStatus | None = None
    requester: str | None = None
    involving: str | None = None
    teams: tuple[str, ...] = ()
    after: tuple[datetime, str] | None = None
    limit: int = 50
    order: Literal["asc", "desc"] = "desc"


@dataclass(frozen=True, slots=True)
class RunClaim:
    """A worker waiting for a ready run, as `RunStore.settle_claiming` may hand it one: of
    `agents` (any when None), only `requester`'s runs when given, held until
    `lease_expires_at`."""

    worker: str
    lease_expires_at: datetime
    at: datetime
    agents: tuple[str, ...] | None = None
    requester: str | None = None

    def takes(self, run: Run) -> bool:
        """Whether this claim may take `run` (its agent and requester; not its state)."""
        return (self.agents is None or run.agent in self.agents) and (
            self.requester is None or run.requester == self.requester
        )


class RunStore(Protocol):
    """Runs. Each change appends its run event (`model.RUN_EVENTS`) in the same transaction.

    A parked run is *ready* once none of the requests it waits on is pending: the store
    marks it in the transaction that settles the last of them (a trigger on the SQL
    stores), or in the park itself if they had all settled by then, so no settlement is
    missed between processes.
    """

    async def insert_run(self, run: Run, *, exclusive: bool = False) -> tuple[Run, bool]:
        """Store a new run (with its `expires_at`: when it is given up as abandoned if its
        process never parks it) and its `run_started` event; if one with this id exists,
        store nothing and return it with False. With `exclusive` (the run names a session), the
        run holds its session: if a run of its agent and requester on that session has not
        ended, store nothing and return that run (the newest such) with False; and while
        this one has not ended, no other exclusive run of its agent and requester is stored
        on the session. The store decides in one step (a partial unique index on the SQL
        stores), so of two starts at once on one session, one stores its run and the other
        gets that run back."""
        ...

    async def start_parked(
        self, run: Run, requests: Sequence[Request], *, state: Any, status: RunStatus, expires_at: datetime
    ) -> tuple[Run, bool]:
        """Store a new run, its new pending `requests` (each `run=run.id`, no idempotency
        key) and its park on them, in one transaction, with the events `insert_run`,
        `insert` and `park_run` append; return the run as parked and True. If a run with
        this id exists, store nothing and return it with False. A request in a closed
        channel raises `Closed`, and nothing is stored."""
        ...

    async def restart_run(self, run_id: str, *, expires_at: datetime) -> Run | None:
        """Give a running run that no worker holds a new `expires_at` (its process started
        it again, so it is alive): the run so renewed, or None if it is not such a run
        (parked, claimed by a worker, ended, unknown). Appends no event."""
        ...

    async def get_run(self, run_id: str) -> Run | None: ...

    async def list_runs(self, query: RunQuery) -> Sequence[Run]: ...

    async def park_run(
        self,
        run_id: str,
        *,
        state: Any,
        waiting_on: Sequence[str],
        status: RunStatus,
        expires_at: datetime,
        at: datetime,
        worker: str | None = None,
    ) -> Run | None:
        """Park a running run held by `worker` (without one: a run no worker holds): keep
        `state` and the requests it waits on, release its lease, mark it ready if none of
        them is pending; append `input_requested`. None if the run is not running, or is
        held by another worker (without `worker`: by any worker, so a park of the agent's
        never takes a claimed run from the worker resuming it)."""
        ...

    async def claim_run(
        self,
        agents: Sequence[str] | None,
        *,
        worker: str,
        lease_expires_at: datetime,
        at: datetime,
        requester: str | None = None,
    ) -> Run | None:
        """Claim one run of `agents` (any agent when None; only `requester`'s runs when
        given) for `worker`: a ready parked run, or a running one whose lease ran out (its
        worker died). Exactly one caller, across processes, gets each; it is running again
        and held until `lease_expires_at`."""
        ...

    async def settle_claiming(self, request: Request, claim: RunClaim) -> tuple[Request | None, Run | None]:
        """Like `RequestStore.settle`; and if that made the request's run ready, and the
        run is one `claim` takes, claim it for `claim.worker` in the same transaction (its
        `run_claimed` event after the settlement's). Returns the request as stored (None
        if it was not pending) and the run claimed (None when none was)."""
        ...

    async def renew_lease(self, run_id: str, *, worker: str, lease_expires_at: datetime) -> bool:
        """Extend `worker`'s hold on a running run. False if it holds it no longer."""
        ...

    async def end_run(
        self,
        run_id: str,
        status: RunStatus,
        *,
        at: datetime,
        result: Any = None,
        error: str | None = None,
        terminal_reason: str | None = None,
        worker: str | None = None,
        withdraw: Response | None = None,
    ) -> tuple[Run | None, list[Request]]:
        """End a run that has not ended with `status`: a running one held by `worker`, when
        given; without `worker`, as cancelled any run not ended, as completed or failed
        only a running one no worker holds (an agent never ends a run under the worker
        resuming it). With `withdraw`, cancel its pending requests with that response: in
        the same transaction when cancelling it; when completing or failing it (which leaves
        none pending, mostly: those it made and never waited on), once it has ended. Returns
        the run as ended (None if it may not end so: it had ended, is parked, or a worker
        other than `worker` holds it) and the requests it cancelled."""
        ...

    async def expire_runs(
        self, due: datetime, response: Response, *, abandoned: Response | None = None
    ) -> list[tuple[Run, list[Request]]]:
        """End every parked run (not ready) whose `expires_at` is at or before `due` as
        cancelled with `terminal_reason` "interaction_timeout", cancelling its pending
        requests with `response`; with `abandoned`, also every running run that no worker
        holds whose `expires_at` is due (its process gave no sign of life: it never parked
        it, started it again nor asked on it), as cancelled with `terminal_reason` "abandoned",
        cancelling its pending requests with `abandoned`. Each ends with its `run_cancelled`
        event."""
        ...

    async def next_run_expiry(self) -> datetime | None:
        """The earliest `expires_at` among parked runs (not ready) and running runs no
        worker holds."""
        ...


class FollowupStore(Protocol):
    """Messages held for runs that are busy (`interlock.followups`). Each change appends
    its `followup_*` event (data: `followups.followup_event_data`) in the same transaction.

    A held message is delivered or withdrawn at most once: of any number of callers on any
    node, one takes it. Once its run has ended, a message still held is read-only: listed,
    never withdrawn nor delivered.
    """

    async def enqueue_followup(self, followup: Followup, *, limit: int) -> Followup | None:
        """Hold `followup` for its run, with its `followup_queued` event, if the run exists,
        has not ended and holds fewer than `limit` messages (checked in the insert's own
        transaction); None otherwise."""
        ...

    async def list_followups(self, run_id: str) -> Sequence[Followup]:
        """The messages held for the run (neither delivered nor withdrawn), oldest first."""
        ...

    async def withdraw_followup(self, run_id: str, followup_id: str, *, at: datetime) -> Followup | None:
        """Withdraw a message held for a run that has not ended, with its
        `followup_withdrawn` event; None when it is not held (unknown, of another run,
        withdrawn or delivered already) or its run has ended."""
        ...

    async def claim_followups(
        self, run_id: str, *, at: datetime, worker: str | None = None
    ) -> Sequence[Followup] | None:
        """Take every message held for a running run held by `worker` (without `worker`:
        by no worker, an agent's own) for delivery, oldest first, each with its
        `followup_replayed` event, in one transaction; none when the run is not running.
        None, taking nothing, when the run is running under a worker other than `worker`
        (without `worker`: under any worker, which resumes it and takes its messages),
        whether or not any are held."""
        ...


@dataclass(frozen=True, slots=True)
class GrantQuery:
    """Filters and a keyset page for `GrantStore.list_grants`, newest first. `live_at`
    keeps only grants neither revoked nor expired at that time, whose issuer `token
    revoke` has not cut off (`PrincipalStore.tokens_all_revoked`: checked as they are
    read, so `token create` gives them back); `after` is the id of the last grant seen.
    `requests` keeps only the grants one of these requests issued (a page's, in one query)."""

    audience: str | None = None
    issuer: str | None = None
    request: str | None = None
    requests: tuple[str, ...] | None = None
    with_: str | None = None
    can: str | None = None
    live_at: datetime | None = None
    after: str | None = None
    limit: int = 50


class GrantStore(Protocol):
    """Capability grants as issued. An issuance appends a `granted` event and a revocation
    a `grant_revoked` event (data: `grant`, `to`: the audience, `by`: the issuer or the
    revoker, `request`), in the same transaction."""

    async def settle_granting(self, request: Request) -> Request | None:
        """Like `settle`, and store the grants of its response (`request.response.grants`)
        with a `granted` event each, in the same transaction: the answer and its grants
        land together or not at all. None if the request was not pending."""
        ...

    async def give_grant(self, grant: IssuedGrant) -> None:
        """Store a grant given directly (a delegation), with its `granted` event."""
        ...

    async def get_grant(self, grant_id: str) -> IssuedGrant | None: ...

    async def list_grants(self, query: GrantQuery) -> Sequence[IssuedGrant]: ...

    async def revoke_grant(self, grant_id: str, by: str | None, at: datetime) -> IssuedGrant | None:
        """Revoke a grant not revoked yet, with its `grant_revoked` event; the grant as
        revoked, or None when it is unknown or revoked already."""
        ...


class OutboxStore(Protocol):
    """Notices and deliveries (used by the delivery loop, the API and `interlock deliveries`).

    The notices are written by the `RequestStore` itself, in the transaction of their
    event. A claim holds rows for `lease` seconds for `owner`: another loop (another
    process, another node) takes them only once the lease has run out, so in the normal
    case nothing is sent twice, and a loop that died lets its rows go after the lease.
    """

    async def claim_notices(self, owner: str, now: datetime, lease: float, limit: int = 100) -> Sequence[Notice]:
        """Unrouted notices, oldest first, not leased by another loop; lease them."""
        ...

    async def load_setting(self, name: str) -> Any | None:
        """A configuration document every node shares (`routing`: the routing in use), as
        saved (JSON values); None when it was never saved."""
        ...

    async def save_setting(self, name: str, value: Any) -> None:
        """Replace a shared configuration document (a JSON value)."""
        ...

    async def route_notice(self, notice: Notice, deliveries: Sequence[Delivery], owner: str, now: datetime) -> int:
        """Add `deliveries` (ids already present are kept as they are) and mark the notice
        routed, in one transaction, if `owner` still holds its lease; how many were added."""
        ...

    async def claim_deliveries(
        self, owner: str, now: datetime, lease: float, limit: int = 100, *, per_channel: int | None = None
    ) -> Sequence[Delivery]:
        """Pending deliveries due by `now`, not leased by another loop, the earliest due
        first; lease them. With `per_channel`, `owner` holds no more than that many of one
        channel at a time, counting those it holds already (their leases running): a
        channel it holds that many of is passed over, its deliveries left as they are
        (due, their attempts uncounted) for a claim once one of its sends ends. On SQLite
        and PostgreSQL a claim looks into each channel with pending deliveries once, at the
        front of its index range: thousands waiting in a channel that is full cost it
        nothing."""
        ...

    async def finish_delivery(self, delivery: Delivery, owner: str) -> bool:
        """Store how an attempt went (its status, attempts, due_at, delivered_at and
        last_error) and release the lease; False (and no change) if `owner` lost it."""
        ...

    async def get_delivery(self, delivery_id: str) -> Delivery | None: ...

    async def list_deliveries(
        self,
        *,
        request_id: str | None = None,
        status: DeliveryState | None = None,
        recipient: str | None = None,
        teams: Sequence[str] = (),
        after: str | None = None,
        limit: int = 100,
    ) -> Sequence[Delivery]:
        """Deliveries by id (a keyset page after `after`), of one request, in one state, to one
        recipient; with `teams` beside `recipient`, also every delivery of a request addressed
        to one of those teams (whoever it went to), as a member of them reads them."""
        ...

    async def list_dead_letters(
        self,
        *,
        recipient: str | None = None,
        teams: Sequence[str] = (),
        before: tuple[datetime, str] | None = None,
        limit: int = 100,
    ) -> Sequence[Delivery]:
        """The dead letters (to one recipient; with `teams` beside it, and those of requests
        addressed to one of those teams, as in `list_deliveries`), newest first: by when
        each became one (`due_at`), then by id; a keyset page after `before`, the (due_at,
        id) of the last one seen. Read from one index range in that order (with `teams`,
        that range, each row checked against the teams' requests: fine while they are few)."""
        ...

    async def retry_delivery(self, delivery_id: str, now: datetime) -> Delivery | None:
        """Make a dead letter pending again, due now, its attempts counted afresh; None
        when there is no dead delivery of that id."""
        ...

    async def next_outbox_due(self) -> datetime | None:
        """When the delivery loop has work next: the time of the oldest unrouted notice,
        else the earliest due pending delivery."""
        ...

    async def use_answer_link(self, use: LinkUse, expires_at: datetime) -> tuple[LinkUse, bool]:
        """Record the use of a one-click answer link unless it was used already: the use
        that stands (this one, or the earlier one) and whether it is this one. A
        conditional write: of any number of callers on any node, one records its use.
        Uses of links past `expires_at` (their link's expiry) may be deleted meanwhile."""
        ...

    async def answer_link_use(self, link: str) -> LinkUse | None:
        """The recorded use of the answer link of this id, if it was used."""
        ...


class PeopleDirectory(Protocol):
    """Who a name is and which teams it is in: what the access rules need to judge a name
    a channel's message is addressed to, or its answer speaks for (every store has it, as
    part of `PrincipalStore`; so does a local broker)."""

    async def get_principal(self, name: str) -> Principal | None: ...

    async def team_members(self, team: str) -> Sequence[str] | None: ...

    async def teams_of(self, name: str) -> frozenset[str]: ...


class DeliveryPort(OutboxStore, PeopleDirectory, Protocol):
    """What a delivery loop works on: the outbox, the requests its notices are about
    (`fresh`: read past a store's cache, for a request that may have settled elsewhere),
    and who may answer them (a message offers its answers only to someone who may give
    them). A local broker hands its store's as `LocalBroker.outbox`."""

    async def get(self, request_id: str, *, fresh: bool = True) -> Request | None: ...

    async def cut_off(self, names: Collection[str]) -> frozenset[str]: ...


class PolicyStore(Protocol):
    """Approval policies, one per agent and tool server ("" for the agent's whole toolset).
    A change appends an `approval_policy_set` or `approval_policy_deleted` event (data:
    `agent`, `server`, `version`, `by`, `to`: the agent) in the same transaction; the
    hook's secret is kept with the policy and never put in an event."""

    async def put_policy(self, policy: ApprovalPolicy, at: datetime, by: str | None) -> ApprovalPolicy:
        """Create or replace the policy of `policy.agent` and `policy.server`; return it as
        stored: version 1 when new, one more than the replaced one's otherwise."""
        ...

    async def get_policy(self, agent: str, server: str) -> ApprovalPolicy | None: ...

    async def list_policies(self, agent: str | None = None) -> Sequence[ApprovalPolicy]:
        """Every policy (of `agent`, when given), by agent then server."""
        ...

    async def delete_policy(self, agent: str, server: str, by: str | None, at: datetime) -> ApprovalPolicy | None:
        """Delete a policy; return it as it was, or None when there was none."""
        ...


class SecretKeyStore(Protocol):
    """The fingerprint of the secret key the nodes on this store sign with
    (`interlock.secret_key`): derived from the key one way, never the key itself; and the
    public id of the key they sign grant tokens with (never the private key). At most one
    of each is recorded."""

    async def key_fingerprint(self) -> str | None:
        """The fingerprint recorded, if any."""
        ...

    async def keep_key_fingerprint(self, fingerprint: str, at: datetime) -> str:
        """Record `fingerprint` unless one is recorded already: the one that stands (this
        one, or the earlier one). A conditional write: of any number of callers on any
        node, one records its own."""
        ...

    async def replace_key_fingerprint(self, fingerprint: str | None, at: datetime) -> None:
        """Record `fingerprint` in place of the one recorded, if any (None: forget it)."""
        ...

    async def grant_key_id(self) -> GrantKeyId | None:
        """The public id of the nodes' grant key recorded, if any."""
        ...

    async def keep_grant_key_id(self, key: GrantKeyId, at: datetime) -> GrantKeyId:
        """Record `key` unless a grant key is recorded already: the one that stands (this
        one, or the earlier one). A conditional write: of any number of callers on any
        node, one records its own."""
        ...

    async def replace_grant_key_id(self, key: GrantKeyId | None, at: datetime) -> None:
        """Record `key` in place of the grant key recorded, if any (None: forget it)."""
        ...


class Store(
    RequestStore,
    PrincipalStore,
    RunStore,
    FollowupStore,
    GrantStore,
    OutboxStore,
    PolicyStore,
    SecretKeyStore,
    Protocol,
):
    """Every port over one database, as the broker takes it: a backend keeps requests,
    principals and runs side by side, so a revocation ends the sessions and writes its
    event in one transaction, and a settlement marks its run ready in its own."""
