"""What the SQL dialects share: the logic of a SQL store over its two dialects' connectors.

`SqlStore` holds everything that does not depend on the database: the cache of parsed
requests, `get(fresh)`, the list and event-page builders, rows to requests, events,
principals and sessions, and what each write writes. A dialect module (the connector)
subclasses it with only its connection handling, its placeholders and its `.sql` files:
`_rows(name, *args)` runs one of its named queries with positional arguments (in the
order the query first names them, comments aside), `_rows_of(sql, params)` a statement
built here with `:named` parameters, `_time` and `_stamp` read and write a time column.
Both dialects load their named queries and versioned migrations from .sql files here.

A write is shared in one of two ways:

- When its steps are the same in both dialects (a follow-up held, a policy set, a run
  ended with its requests withdrawn), it is written here once, as an async body over a
  `Transaction`: the dialect's named statements, with the same positional arguments in
  both. `_write_in(body)` runs it in one transaction: on SQLite inside the one writer,
  where each statement runs at once and the body never suspends; on PostgreSQL on one
  connection, a round trip a statement.
- When PostgreSQL makes it in one round trip (a server function or one statement: a
  request created or settled, a statement safe to repeat) and SQLite in a few statements
  in its writer, what it writes and what it results in (the cache, the value returned)
  are decided here, and the dialect's hook (`_insert`, `_settle`, `_change`, ...) runs it.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import logging
import math
import re
import statistics
from collections.abc import Callable, Collection, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any, Protocol, TypeVar

from ..approval_policies import ApprovalPolicy, policy_body, policy_event_data, policy_from_body, with_version
from ..dashboard import AGE_LIMITS, AGES, NOBODY, UNKNOWN, Answered, Figures, Outline
from ..errors import Closed, NewerDatabase
from ..followups import Followup, followup_event_data
from ..model import (
    Claim,
    Event,
    IssuedGrant,
    Request,
    Response,
    Run,
    RunStatus,
    Status,
    grant_event_data,
    request_from_dict,
    request_to_dict,
    response_from_dict,
    response_to_dict,
    run_event_data,
)
from ..outbox import Delivery, DeliveryState, LinkUse, Notice
from ..principals import TEAM_LEFT, LiveToken, Principal, TokenInfo, WebSession, refused_cut_off
from ..secret_key import GrantKeyId
from . import PAGE_BYTES, EventQuery, GrantQuery, Listed, PageBudget, Query, RunClaim, RunQuery, stored_size

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DELIVERY_COLUMNS",
    "FILTERS",
    "Migration",
    "RUN_COLUMNS",
    "RequestCache",
    "Settled",
    "SqlStore",
    "TextPlan",
    "reads_along_texts",
    "Transaction",
    "closed_channel",
    "decode_json",
    "encode_document",
    "encode_json",
    "followup_from_row",
    "find_events_sql",
    "page_requests_sql",
    "grants_sql",
    "load_migrations",
    "load_queries",
    "expirable",
    "may_end",
    "positional",
    "request_and_created",
    "request_from_row",
    "row_size",
    "run_from_row",
    "runs_sql",
    "settlement",
]

T = TypeVar("T")

DEFAULT_CACHE_BYTES = 32 * 1024 * 1024
"""What the parsed requests a store keeps may add up to, counted as their stored JSON."""

FILTERS = ("recipient", "requester", "status", "kind", "session", "channel", "agent", "run")
"""The `Query` filters that are columns of the requests table, in every dialect."""

encode_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _document_encoder() -> Callable[[Any], str]:
    """`encode_json` for the documents of requests and responses, without the set-up that
    `JSONEncoder.encode` repeats each call: its C encoder, made once. The model bounds how
    deep these documents nest (`check_json`), so it looks for no circular reference. Where
    the C encoder is missing or is not called the same way, `encode_json` itself."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return encode_json
    join = "".join
    try:
        encoder = make(None, _refuse, json.encoder.encode_basestring, None, ":", ",", False, False, True)
        sample = {"a": [1, 2.5, None, True, "\u00e9\n"], "b": {}}
        if join(encoder(sample, 0)) != encode_json(sample):
            return encode_json
    except Exception:  # another Python's private encoder: use the public one
        return encode_json
    return lambda value: join(encoder(value, 0))


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


encode_document = _document_encoder()
"""`encode_json` of a request's or a response's document (the same text, made faster)."""


def _finite_or_none(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


_DECODER = json.JSONDecoder(parse_constant=lambda _: None, parse_float=_finite_or_none)


def decode_json(text: str) -> Any:
    """Stored JSON, with NaN and Infinity read as null: rows written before non-finite
    numbers were refused still read (and list) instead of failing every later reader.
    (One decoder for every call: `json.loads` with hooks makes a new one each time.)"""
    return _DECODER.decode(text)


_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_MIGRATION = re.compile(r"^(\d{4})_(\w+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def load_queries(dialect: str, file: str = "queries") -> dict[str, str]:
    """The `-- name: x` sections of `sql/<dialect>/<file>.sql`, by name."""
    text = resources.files(__package__).joinpath("sql", dialect, f"{file}.sql").read_text("utf-8")
    parts = _NAME.split(text)
    return {name: body.strip().rstrip(";") for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def load_migrations(dialect: str) -> list[Migration]:
    """The files `sql/<dialect>/migrations/NNNN_name.sql`, in version order."""
    folder = resources.files(__package__).joinpath("sql", dialect, "migrations")
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"{dialect} migrations are not numbered 1..n: {[m.version for m in found]}")
    return found


def refuse_newer(place: str, applied: Collection[int], migrations: Sequence[Migration]) -> None:
    """Refuse to open a database a later version has migrated (`place` names it): its schema
    may do itself what this version does by hand (since 0021, triggers write the events of
    a create and a settlement), or no longer have what this version writes."""
    unknown = sorted(set(applied) - {migration.version for migration in migrations})
    if unknown:
        raise NewerDatabase(
            f"{place} was migrated by a later version of interlock (migrations {unknown} are unknown "
            f"to this one, which knows 1 to {len(migrations)}): upgrade interlock in every process that opens it"
        )


def newer_while_open(place: str, unknown: Sequence[str], known: int) -> NewerDatabase:
    """The refusal of a write on a database a later version migrated while this process had
    it open (`place` names it; `unknown`, the migrations it does not know, as `0039_name`):
    that version's schema may do itself what this version's writes do by hand, or no
    longer have what they write."""
    return NewerDatabase(
        f"{place} was upgraded by a later version of interlock while this process had it open "
        f"(migrations {', '.join(unknown)} are unknown to this one, which knows 1 to {known}): the write was "
        "refused and changed nothing; restart this process on the later version"
    )


def followup_from_row(row: Sequence[Any], time: Callable[[Any], datetime]) -> Followup:
    """A held message from its row (id, run_id, text, sender, queued_at)."""
    followup_id, run_id, text, sender, queued_at = row[:5]
    return Followup(followup_id, run_id, text, time(queued_at), sender)


def request_from_row(status: str, doc: str, response: str | None) -> Request:
    """A request from its row: the document as created, then how it settled."""
    return request_and_created(status, doc, response)[0]


def request_and_created(status: str, doc: str, response: str | None) -> tuple[Request, Request]:
    """A request from its row, and the request as created (its document, deadline and
    all: a settled request no longer carries its own)."""
    created = request_from_dict(decode_json(doc))
    if status == Status.PENDING:
        return created, created
    return created.settle(Status(status), response_from_dict(decode_json(response)) if response else None), created


def row_size(doc: str, response: str | None = None) -> int:
    """What a request counts against the cache and a page of a list: about the bytes its
    parsed form holds (`stored_size` of its document and its response)."""
    return stored_size(doc) + stored_size(response)


def _reach(rows: Sequence[Sequence[Any]], known: Mapping[str, tuple[Request, int]], withheld: Mapping[str, int]) -> int:
    """How many of a page's event rows (id, type, request id, ...) a `PageBudget` takes,
    each counting the request it carries: by its size (`known`: the request and its
    `row_size`) or, when its documents were withheld, by their JSON's length (no more
    than it counts). A request not read at all (SQLite stopped stepping past the budget)
    ends the page there."""
    budget = PageBudget()
    for taken, row in enumerate(rows):
        request_id = row[2]
        if request_id is None:
            size = 0
        elif (found := known.get(request_id)) is not None:
            size = found[1]
        elif request_id in withheld:
            size = withheld[request_id]
        else:
            return taken
        if not budget.takes(size):
            return taken
    return len(rows)


def closed_channel(channel: str | None) -> Closed:
    """The refusal of a request made in a closed channel."""
    return Closed(None, f"channel {channel!r} is closed")


class CutOff(Exception):
    """A dialect's report that the settlement's statement refused a decision in the name of
    a person `token revoke` cut off (migrations 0038 on SQLite, 0046 on PostgreSQL); the
    store raises `principals.refused_cut_off` for the request instead."""


CUT_OFF = "interlock_cut_off"
"""The message the settlement's trigger fails with when it refuses (see `CutOff`)."""


def settlement(request: Request) -> tuple[datetime, str | None]:
    """When a request settled by `request` settles, and its response as stored (None for
    none): what every dialect writes into the row."""
    response = request.response
    if response is None:
        return datetime.now(UTC), None
    return response.at, encode_document(response_to_dict(response))


_CREATED_FORM = 200
"""What a request's created form counts against the cache (it shares every part with the
request but its own object: about this many bytes)."""


class RequestCache:
    """Parsed requests by id, bounded by the total of their sizes in memory (as
    `row_size` estimates them from their stored JSON), not by their number: the oldest
    entries are dropped first, and a request larger than the whole budget is not kept at
    all."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError("cache_bytes must not be negative")
        self.max_bytes = max_bytes
        self.bytes = 0
        # By id: the request, its size, and once asked for, a settled one as it was created.
        self._items: dict[str, tuple[Request, int, Request | None]] = {}

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._items

    def __len__(self) -> int:
        return len(self._items)

    def get(self, request_id: str) -> Request | None:
        found = self._items.get(request_id)
        return found[0] if found is not None else None

    def size_of(self, request_id: str) -> int | None:
        found = self._items.get(request_id)
        return found[1] if found is not None else None

    def as_created(self, request: Request) -> Request | None:
        """The request as it was created, for a request held here: a page of events gives
        each request's `created` event the request as it was then (a person's 500 events,
        about 460 of them, read again and again). None for a settled request whose created
        form is not held (a settled request no longer carries its deadline: its row's
        document has it)."""
        if request.status is Status.PENDING:
            return request
        found = self._items.get(request.id)
        return found[2] if found is not None and found[0] is request else None

    def put(self, request: Request, size: int, created: Request | None = None) -> None:
        """Hold `request`, and for a settled one its `created` form when given; a request
        held pending (or with its created form) that `request` settles leaves its created
        form held."""
        items = self._items
        old = items.get(request.id)
        if old is not None:
            self.bytes -= _cost(old)
        if size > self.max_bytes:
            if old is not None:
                del items[request.id]
            return
        if request.status is Status.PENDING:
            created = None
        elif created is None and old is not None:
            created = old[0] if old[0].status is Status.PENDING else old[2]
        entry = (request, size, created)
        items[request.id] = entry  # an entry kept keeps its place: the oldest go first
        self.bytes += _cost(entry)
        self._shrink()

    def _shrink(self) -> None:
        items = self._items
        while self.bytes > self.max_bytes and items:
            oldest = next(iter(items))
            self.bytes -= _cost(items.pop(oldest))

    def discard(self, request_id: str) -> None:
        old = self._items.pop(request_id, None)
        if old is not None:
            self.bytes -= _cost(old)


def _cost(entry: tuple[Request, int, Request | None]) -> int:
    """What an entry of `RequestCache` counts against its budget: its stored JSON's size,
    and its created form's, once made."""
    return entry[1] + (_CREATED_FORM if entry[2] is not None else 0)


_EVENT_COLUMNS = "e.id, e.type, e.request_id, e.at, e.data"


def find_events_sql(
    query: EventQuery, *, indexed_by: bool = False, rows_to_them: bool = False
) -> tuple[str, dict[str, Any]]:
    """The statement for `Store.find_events` (named `:parameters`), shaped so that the
    database reads about one page of rows: the events alone (their requests are read
    apart, those the store does not hold already).

    Without a filter, a principal's page is the union of index ranges, each cut at the
    page's size: the events to them (and to each of their teams) and the events from them,
    their ids from the indexes and each row then read by its id. With `rows_to_them`
    (PostgreSQL's indexes since migration 0029), the events to them that carry no data,
    most of them, are read from their index's entries alone, which hold the columns a
    page shows; those with data, and those from them (few for a person) but those also to
    them or their teams, by id as before. With a filter, the filter's own
    index drives the read (a request has a handful of events; a session or run, its own),
    and who may see what is checked on those rows. `indexed_by` names that index for
    SQLite, whose planner has no statistics to choose it by.
    """
    params: dict[str, Any] = {"after": query.after, "limit": query.limit}
    bounds = ["{e}id > :after"]
    if query.until is not None:
        bounds.append("{e}id <= :until")
        params["until"] = query.until
    # Each name once (a repeated team, or their own name as a team, would be read twice).
    teams = tuple(dict.fromkeys(t for t in query.teams if t != query.involving)) if query.involving is not None else ()
    if query.involving is not None:
        params["who"] = query.involving
    params |= {f"team_{i}": team for i, team in enumerate(teams)}
    given = [(name, value) for name in ("request", "run", "session") if (value := getattr(query, name)) is not None]
    within = " AND ".join(bounds).format(e="")
    if not given and query.involving is not None and not rows_to_them:
        sources = [("recipient", "who", "to_them"), ("requester", "who", "from_them")]
        sources += [("recipient", f"team_{i}", f"to_team_{i}") for i in range(len(teams))]
        ranges = " UNION ".join(
            f"SELECT id FROM (SELECT id FROM events WHERE {column} = :{param} AND {within} "
            f"ORDER BY id LIMIT :limit) AS {alias}"
            for column, param, alias in sources
        )
        return (
            f"SELECT {_EVENT_COLUMNS} FROM ({ranges}) AS page JOIN events e ON e.id = page.id "
            "ORDER BY e.id LIMIT :limit",
            params,
        )
    if not given and query.involving is not None:
        names = ["who", *(f"team_{i}" for i in range(len(teams)))]
        columns = _EVENT_COLUMNS.replace("e.", "")
        plain = columns.replace("data", "NULL::json AS data")
        to_them = [
            part
            for name in names
            for part in (
                f"SELECT * FROM (SELECT {plain} FROM events WHERE recipient = :{name} AND data IS NULL AND {within} "
                f"ORDER BY id LIMIT :limit) AS to_{name}",
                f"SELECT {_EVENT_COLUMNS} FROM (SELECT id FROM events WHERE recipient = :{name} "
                f"AND data IS NOT NULL AND {within} ORDER BY id LIMIT :limit) AS data_to_{name} "
                f"JOIN events e ON e.id = data_to_{name}.id",
            )
        ]
        # (An event both to and from them is in its range to them; one of the events from
        # them passed over for it here was not among the page's first either.)
        from_them = (
            f"SELECT {_EVENT_COLUMNS} FROM (SELECT id FROM events WHERE requester = :who AND {within} "
            "ORDER BY id LIMIT :limit) AS from_them JOIN events e ON e.id = from_them.id "
            f"WHERE coalesce(e.recipient, '') NOT IN ({', '.join(f':{name}' for name in names)})"
        )
        ranges = " UNION ALL ".join([*to_them, from_them])
        return f"SELECT {columns} FROM ({ranges}) AS page ORDER BY id LIMIT :limit", params
    where = [b.format(e="e.") for b in bounds]
    for name, value in given:
        where.append(f"e.{'request_id' if name == 'request' else name} = :{name}")
        params[name] = value
    if query.involving is not None:
        to_teams = "".join(f" OR e.recipient = :team_{i}" for i in range(len(teams)))
        where.append(f"(e.recipient = :who OR e.requester = :who{to_teams})")
    indexed = f" INDEXED BY events_by_{given[0][0]}" if given and indexed_by else ""
    return (
        f"SELECT {_EVENT_COLUMNS} FROM events e{indexed} WHERE {' AND '.join(where)} ORDER BY e.id LIMIT :limit",
        params,
    )


_PARAMETER = re.compile(r"(?<!:):([a-z_][a-z0-9_]*)")


def positional(sql: str, params: dict[str, Any]) -> tuple[str, list[Any]]:
    """Turn `:name` parameters into PostgreSQL's `$n`, with the values in that order."""
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match[1]
        if name not in order:
            order.append(name)
        return f"${order.index(name) + 1}"

    return _PARAMETER.sub(number, sql), [params[name] for name in order]


OUTLINE_COLUMNS = {
    "sqlite": "{r}status, {r}recipient, coalesce({r}agent, {r}requester), (:now - {r}created_at) / 1e6, "
    "({r}settled_at - {r}created_at) / 1e6, {r}settled_by",
    "postgresql": "{r}status, {r}recipient, coalesce({r}agent, {r}requester), "
    "date_part('epoch', :now - {r}created_at), date_part('epoch', {r}settled_at - {r}created_at), "
    "{r}response->>'by'",
}
"""The columns of an `Outline`, in its fields' order, per dialect (`{r}`: the table's prefix;
`:now`, the moment ages are counted to; on PostgreSQL `date_part`, a float, where
`extract` would work in `numeric`: 15% of the dashboard's statement). Each is in the index that the dashboard's reads
of a person's requests take (SQLite's `requests_by_recipient`), so those reads never
visit the rows."""

PENDING_OUTLINE = {
    "sqlite": "'pending', {r}recipient, coalesce({r}agent, {r}requester), (:now - {r}created_at) / 1e6, NULL, NULL",
    "postgresql": "'pending', {r}recipient, coalesce({r}agent, {r}requester), "
    "date_part('epoch', :now - {r}created_at), NULL, NULL",
}
"""The columns of a pending request's `Outline`: in SQLite's pending indexes, and in the
rows of PostgreSQL's `pending_requests`."""

_OF_PENDING_ROWS = frozenset({"recipient", "requester", "channel"})
"""The filters a row of `pending_requests` answers by itself."""

SETTLED_OUTLINE = (
    "{r}status, {r}recipient, {r}agent, date_part('epoch', :now - {r}created_at), "
    "date_part('epoch', {r}settled_at - {r}created_at), {r}settled_by"
)
"""The columns of a settled request's `Outline` in the rows of PostgreSQL's
`settled_requests` (its `agent` is already the request's agent or requester)."""


@dataclass(frozen=True, slots=True)
class TextPlan:
    """How PostgreSQL reads a search (`PostgresStore._text_plan`), chosen from how common
    its words are, since the planner cannot be left to choose: a prepared statement is
    planned for any words after its fifth run, and the plan of a common word, kept for a
    rare one, read every request of a person or of the log (90-300 ms at a million).

    `matches_first=False`: the requests in the page's order, each one's text checked
    (soon done for a common word). True: the words' matches from the GIN index first, in
    id order, each match's request read until the page is full (a rare word); `narrow`
    (a `tsquery`) is matched there too: a word of each name the search is for, which
    every request to them holds in its text, so the index gives the few requests to them
    with the word instead of every request with it.

    `along` (with `matches_first=False`): a person's texts are read in the page's order
    from the index of the word their texts hold them by (`request_texts_to`: this word),
    each one's words checked and each match's request read, instead of every request of
    theirs read and its text looked up by id."""

    matches_first: bool
    narrow: str | None = None
    along: str | None = None


def list_sql(
    query: Query,
    dialect: str = "sqlite",
    stamp: Callable[[datetime], Any] | None = None,
    *,
    outline: datetime | None = None,
    terms: Mapping[str, Sequence[str] | None] | None = None,
    text_plan: TextPlan | None = None,
    share: int | None = None,
) -> tuple[str, dict[str, Any]]:
    """The statement for `Store.list` (named `:parameters`): the filters, then a keyset page.
    With `share` (PostgreSQL), a row whose stored JSON is longer than that comes without
    its documents, with its id and that length (`WITHHELD_COLUMNS`), to be read by id
    only if the page's budget reaches it.
    With `outline` (the moment ages are counted to), the statement of `Store.outlines`: the
    same rows, as the columns of an `Outline` (`OUTLINE_COLUMNS`) instead of the documents.
    On SQLite a search is read from the full-text index first, in the order the requests
    were stored (their rowid: newest first, or oldest with `order="asc"`), each match's row
    checked against the other filters, so it stops at the page however common its words
    are; `after` is then the place of the cursor's request in that order. `terms` gives, for
    a word of the search, the indexed words it stands for, matched one by one instead of as
    a prefix (which the index merges whole before its first match). A search that
    also filters by something with a small index of its own (`_TEXT_NARROWING`) is read
    along that index instead, in id order, each row checked against the matches.

    Each filter's index ends in `id`, so the page is read in order and cut at its size. On
    PostgreSQL no index of `requests` reads its status (a settlement is then a HOT
    update), so the pending requests are read through `pending_requests`, whose indexes
    give all of them, or a person's, an agent's or a channel's, in id order (a session's
    or a run's come from its own index); the outlines of settled requests (everyone's, or a
    person's) are read likewise from `settled_requests` alone. A search checks the `request_texts` row of
    each request, or reads a person's texts in order and checks each, or reads the matches
    from the GIN index first, as `text_plan` says (without one, request by request).
    """
    postgres = dialect == "postgresql"
    # A session's or a run's few requests are read from their own index, pending or not.
    pending = postgres and query.status == Status.PENDING and query.session is None and query.run is None
    # Settled requests, outlined (the dashboard), from the narrow rows alone.
    settled_rows = postgres and outline is not None and _reads_settled_rows_only(query)
    # SQLite: a search, from the full-text index first (see above).
    text_first = bool(query.words) and not postgres and all(getattr(query, n) is None for n in _TEXT_NARROWING)
    # PostgreSQL: a search for a rare word, from the GIN index's matches first.
    matches_first = bool(text_plan and text_plan.matches_first and query.words) and postgres
    matches_first = matches_first and not (pending or settled_rows)
    # PostgreSQL: a person's search for a common word, along their texts in order.
    along_texts = bool(text_plan and text_plan.along and query.words) and postgres
    along_texts = along_texts and not (pending or settled_rows or matches_first)
    row = "r." if pending or text_first or matches_first or along_texts else "s." if settled_rows else ""
    # The id the page is cut and ordered by.
    key = "p.id" if pending else "t.rowid" if text_first else "t.id" if along_texts else f"{row}id"
    # A list with no filter of those read along an index of their own reads one agent's
    # requests along `requests_by_agent`, or the approvals along `requests_approvals` (whose
    # kind is in the statement's text, as the partial index says it). On SQLite, which
    # keeps no statistics, any other list keeps to the index it reads, a kind or an agent
    # only checked there (`+`: no index of it read instead; a person's and an agent's
    # indexes carry the kind); PostgreSQL reads whichever its statistics say is narrower.
    along_ids = _reads_along_ids(query)
    along = along_ids and not query.words
    by_agent = along and query.agent is not None
    unindexed = "+" if dialect == "sqlite" else ""
    where, params = [], {}
    for name in FILTERS:
        value = getattr(query, name)
        if value is None:
            continue
        if name == "kind":
            if value in ("approval", "question") and (dialect == "postgresql" or (along and not by_agent)):
                # In the text, as the partial index says it (PostgreSQL plans a prepared
                # statement for any values from its sixth run: a kind as a parameter would
                # never read the approvals' index there, however few they are).
                where.append(f"{row}kind = '{value}'")
            else:
                where.append(f"{unindexed}{row}kind = :kind")
                params["kind"] = value
            continue
        if name == "agent" and not by_agent:
            where.append(f"{unindexed}{row}agent = :agent")
            params["agent"] = value
            continue
        if along_texts and name == "recipient":
            # The texts read are theirs: the same condition on their requests besides would
            # only mislead the planner's estimate (to every match of the words sorted).
            continue
        if pending and name == "status":
            # A row of pending_requests is pending: it goes in the settling transaction. A
            # status condition on requests besides would only mislead the planner's
            # estimate (to a parallel plan for the 50 rows of an inbox page).
            continue
        if name == "status" and value == Status.PENDING:  # in words, as the partial indexes say it
            where.append(f"{row}status = 'pending'")
            continue
        column = f"p.{name}" if pending and name in ("recipient", "requester", "channel") else f"{row}{name}"
        where.append(f"{column} = :{name}")
        params[name] = value.value if isinstance(value, Status) else value
    if query.teams and query.recipient is not None:  # a member's inbox: theirs and their teams'
        column = "p.recipient" if pending else f"{row}recipient"
        names = [f":team_{i}" for i in range(len(query.teams))]
        where[where.index(f"{column} = :recipient")] = f"{column} IN (:recipient, {', '.join(names)})"
        params |= {f"team_{i}": team for i, team in enumerate(query.teams)}
    if query.settled and not settled_rows:  # (a row of settled_requests is settled)
        where.append(f"{row}status <> 'pending'")
    for name, op in (("since", ">="), ("until", "<")):
        when = getattr(query, name)
        if when is not None:
            where.append(f"{row}created_at {op} :{name}")
            params[name] = stamp(when) if stamp is not None else when
    if (query.since is not None or query.until is not None) and ((along_ids and row in ("", "s.")) or along_texts):
        # Read along the primary key, a time window starts and ends where its ids do (an id
        # begins with the time it was made), give or take `ID_TIME_SLACK`: not at the newest
        # (or oldest) request, passing over every one outside the window. The ids are in the
        # statement's text (made here, hex digits only, to the minute so a window asked for
        # again is the same statement): PostgreSQL plans a prepared statement for any values
        # from its sixth run, and for unknown bounds it read the window by time and sorted
        # it (126 ms for a week of a million requests, against 1 ms).
        if query.since is not None:
            where.append(f"{key} >= '{_id_at(query.since, -ID_TIME_SLACK)}'")
        if query.until is not None:
            where.append(f"{key} < '{_id_at(query.until, ID_TIME_SLACK)}'")
    if query.words:
        if postgres:
            params["words"] = " & ".join(f"{w}:*" for w in query.words)
            if along_texts:
                # `ts_match_vq` is `@@` that no index answers: the planner would otherwise
                # read every match of the words from the GIN index, to sort them.
                assert text_plan is not None
                where.append("interlock_text_recipient(t.body) = :along")
                where.append("ts_match_vq(t.body, to_tsquery('simple', :words))")
                params["along"] = text_plan.along
            elif not matches_first:
                # OFFSET 0 keeps the check a check of each request read, not a join the
                # planner may turn around.
                where.append(
                    f"EXISTS (SELECT 1 FROM request_texts t WHERE t.id = {row or 'requests.'}id "
                    "AND t.body @@ to_tsquery('simple', :words) OFFSET 0)"
                )
        else:  # FTS5: each word a quoted prefix, all of them required
            match = "requests_text MATCH :words"
            where.append(match if text_first else f"rowid IN (SELECT rowid FROM requests_text WHERE {match})")
            params["words"] = fts_match(query, terms)
    if query.after is not None and text_first:
        # The cursor's own request, or the nearest stored after it in id order (a cursor
        # names a request; one made up names where it would be).
        if query.order == "desc":
            place = "(SELECT rowid FROM requests WHERE id >= :after ORDER BY id LIMIT 1), 9223372036854775807"
            where.append(f"t.rowid < coalesce({place})")
        else:
            place = "(SELECT rowid FROM requests WHERE id <= :after ORDER BY id DESC LIMIT 1), 0"
            where.append(f"t.rowid > coalesce({place})")
        params["after"] = query.after
    elif query.after is not None:
        where.append(f"{key} < :after" if query.order == "desc" else f"{key} > :after")
        params["after"] = query.after
    if outline is None:
        columns = "{r}status, {r}doc, {r}response"
        if postgres and share is not None:
            columns = WITHHELD_COLUMNS
            params["share"] = share
    else:
        columns = (PENDING_OUTLINE if query.status == Status.PENDING else OUTLINE_COLUMNS)[dialect]
        params["now"] = stamp(outline) if stamp is not None else outline
    if pending and outline is not None and _reads_pending_rows_only(query):
        sql = f"SELECT {columns.format(r='p.')} FROM pending_requests p"
    elif text_first:
        sql = f"SELECT {columns.format(r=row)} FROM requests_text t JOIN requests r ON r.rowid = t.rowid"
    elif matches_first:
        assert text_plan is not None
        match = "to_tsquery('simple', :words)"
        if text_plan.narrow is not None:
            match = f"({match} && CAST(:narrow AS tsquery))"
            params["narrow"] = text_plan.narrow
        order = "DESC" if query.order == "desc" else "ASC"
        # The matches alone first (OFFSET 0: planned apart, from the GIN index), in the
        # page's order, then each one's request until the page is full.
        sql = (
            f"SELECT {columns.format(r=row)} FROM (SELECT t.id FROM request_texts t WHERE t.body @@ {match} "
            f"ORDER BY t.id {order} OFFSET 0) m JOIN requests r ON r.id = m.id"
        )
    elif along_texts:
        sql = f"SELECT {columns.format(r=row)} FROM request_texts t JOIN requests r ON r.id = t.id"
    elif settled_rows:
        sql = f"SELECT {SETTLED_OUTLINE.format(r=row)} FROM settled_requests s"
    elif pending:
        sql = f"SELECT {columns.format(r=row)} FROM pending_requests p JOIN requests r ON r.id = p.id"
    elif query.status == Status.PENDING and query.recipient is not None and dialect == "sqlite":
        # A person's pending requests: SQLite, which keeps no statistics, would read the
        # wider index of all their requests (it has the status too) and pass over the settled.
        sql = f"SELECT {columns.format(r=row)} FROM requests INDEXED BY requests_pending_to"
    else:
        sql = f"SELECT {columns.format(r=row)} FROM requests"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += f" ORDER BY {key} {'DESC' if query.order == 'desc' else 'ASC'} LIMIT :limit"
    params["limit"] = query.limit
    return sql, params


_STATUSES = {status.value: status for status in Status}

_STORED = "pg_column_size({r}doc) + coalesce(pg_column_size({r}response), 0)"
_LENGTH = "length({r}doc::text) + coalesce(length({r}response::text), 0)"
_WITHHELD = f"WHEN {_STORED} > :share THEN NULL WHEN {_LENGTH} > :share THEN NULL"
WITHHELD_COLUMNS = (
    f"{{r}}status, CASE {_WITHHELD} ELSE {{r}}doc END, CASE {_WITHHELD} ELSE {{r}}response END, {{r}}id, {_LENGTH}"
)
"""PostgreSQL's columns of a list's rows (`list_sql(share=...)`): the status; the document
and the response unless their JSON together is longer than `:share`, NULL then; the id;
that length, in characters (no more than `stored_size` counts). A long row's stored
(maybe compressed) size is looked at first, which needs no read of the value itself; a
length is the JSON's own, however it is stored. A
page of a thousand requests of 1 MiB each was otherwise read whole, a GiB, to be cut
after the first few."""


def page_requests_sql(dialect: str, ids: Any, share: int) -> tuple[str, dict[str, Any]]:
    """The statement that reads the requests a page of events carries (`ids`, in the page's
    order, as the dialect's array), each row status, doc, response, id (and on PostgreSQL
    a length), for `SqlStore.find_events` to cut the page by their size. SQLite returns
    them in that order (`json_each` drives the join), so stepping it may stop at the first
    that does not fit; PostgreSQL withholds the documents of rows longer than `share`, as a
    list's statement does (`WITHHELD_COLUMNS`)."""
    if dialect == "postgresql":
        columns = WITHHELD_COLUMNS.format(r="")
        return f"SELECT {columns} FROM requests WHERE id = ANY(:ids::text[])", {"ids": ids, "share": share}
    sql = (
        "SELECT r.status, r.doc, r.response, r.id FROM json_each(:ids) AS j CROSS JOIN requests AS r ON r.id = j.value"
    )
    return sql, {"ids": ids}


_TEXT_NARROWING = ("requester", "session", "channel", "run")
"""The filters whose own index a search on SQLite reads along (a requester's, a session's,
a channel's or a run's requests), checking each row against the words' matches."""


_TIMES = {
    "sqlite": "group_concat(printf('%!.17g', took))",  # 17 digits: each value read back exactly
    "postgresql": "array_agg(took)",
}
"""The times of one group of answers, per dialect: a text of numbers, or an array."""

_NO_TIMES = {"sqlite": "NULL", "postgresql": "NULL::float8[]"}  # the column's type, where it is first named


def figures_sql(
    pending: Query,
    settled: Query,
    now: datetime,
    teams: Collection[str],
    dialect: str = "sqlite",
    stamp: Callable[[datetime], Any] | None = None,
) -> tuple[str, dict[str, Any]]:
    """The statement of `Store.figures`: the dashboard's figures counted in the database,
    over the rows of `outlines(pending)` and `outlines(settled)` (the same index ranges),
    so that a few dozen rows come back where a page reads two thousand.

    Each row is (part, name, column, count, seconds, times): part 0, an agent's pending
    requests in one age column and the oldest age; 1, a recipient's pending requests; 2
    and 3, the answered (or rejected) requests per answerer and per team, with the times
    they took (`_TIMES`: the median is taken of them in Python, as `count` does, which no
    SQL dialect here has; everyone's are each answerer's together); 5, a recipient's
    expired requests; 6, how many settled rows were counted."""
    pending_sql, params = list_sql(pending, dialect, stamp, outline=now)
    settled_sql, more = list_sql(settled, dialect, stamp, outline=now)
    for name, value in more.items():  # the two share their names only for the same values
        if params.setdefault(name, value) != value:
            raise ValueError(f"the two reads disagree on :{name}")
    columns = "(status, recipient, agent, age, took, settled_by)"
    ages = " ".join(f"WHEN age < {limit!r} THEN {i}" for i, limit in enumerate(AGE_LIMITS[:-1]))
    team_names = [f":tally_team_{i}" for i in range(len(teams))]
    params |= {f"tally_team_{i}": team for i, team in enumerate(sorted(teams))}
    if dialect == "postgresql":
        return _figures_in_grouping_sets(pending_sql, settled_sql, columns, ages, team_names), params
    times = _TIMES[dialect]
    of_teams = (
        f"UNION ALL SELECT 3, recipient, NULL, count(*), NULL, {times} FROM answered "
        f"WHERE recipient IN ({', '.join(team_names)}) GROUP BY recipient "
        if teams
        else ""
    )
    sql = (
        f"WITH pending_rows{columns} AS ({pending_sql}), "
        f"settled_rows{columns} AS ({settled_sql}), "
        f"answered AS (SELECT coalesce(settled_by, recipient, '{UNKNOWN}') AS who, recipient, took "
        "FROM settled_rows WHERE status IN ('answered', 'rejected') AND took IS NOT NULL) "
        f"SELECT 0, coalesce(agent, '{NOBODY}'), CASE {ages} ELSE {len(AGE_LIMITS) - 1} END, count(*), max(age), "
        f"{_NO_TIMES[dialect]} FROM pending_rows GROUP BY 2, 3 "
        f"UNION ALL SELECT 1, coalesce(recipient, '{NOBODY}'), NULL, count(*), NULL, NULL FROM pending_rows GROUP BY 2 "
        f"UNION ALL SELECT 2, who, NULL, count(*), NULL, {times} FROM answered GROUP BY who "
        f"{of_teams}"
        f"UNION ALL SELECT 5, coalesce(recipient, '{NOBODY}'), NULL, count(*), NULL, NULL FROM settled_rows "
        "WHERE status = 'expired' GROUP BY 2 "
        "UNION ALL SELECT 6, '', NULL, count(*), NULL, NULL FROM settled_rows"
    )
    return sql, params


def _figures_in_grouping_sets(
    pending_sql: str, settled_sql: str, columns: str, ages: str, team_names: Sequence[str]
) -> str:
    """`figures_sql` on PostgreSQL: the same rows, each read counted in one pass of grouping
    sets instead of a union of groupings over the reads kept apart (a third less time: the
    statement alone for an admin's page at a million requests 2.2 -> 1.5 ms). A grouping whose part counts
    nothing (an answerer's group of expired requests only, ...) is left out by HAVING."""
    answered = "status IN ('answered', 'rejected') AND took IS NOT NULL"
    team = (
        f"CASE WHEN {answered} AND recipient IN ({', '.join(team_names)}) THEN recipient END"
        if team_names
        else "NULL::text"
    )
    return (
        "SELECT CASE WHEN grouping(agent) = 0 THEN 0 ELSE 1 END, coalesce(agent, recipient), age_column, count(*), "
        "max(age), NULL::float8[] "
        f"FROM (SELECT coalesce(agent, '{NOBODY}') AS agent, coalesce(recipient, '{NOBODY}') AS recipient, "
        f"CASE {ages} ELSE {len(AGE_LIMITS) - 1} END AS age_column, age "
        f"FROM ({pending_sql}) AS pending_rows{columns}) AS p "
        "GROUP BY GROUPING SETS ((agent, age_column), (recipient)) "
        "UNION ALL "
        "SELECT CASE WHEN grouping(who) = 0 THEN 2 WHEN grouping(team) = 0 THEN 3 WHEN grouping(recipient) = 0 THEN 5 "
        "ELSE 6 END, coalesce(who, team, recipient, ''), NULL, "
        "CASE WHEN grouping(who) = 0 THEN count(*) FILTER (WHERE answered) "
        "WHEN grouping(recipient) = 0 THEN count(*) FILTER (WHERE status = 'expired') ELSE count(*) END, "
        "NULL, CASE WHEN grouping(who) = 0 OR grouping(team) = 0 THEN array_agg(took) FILTER (WHERE answered) END "
        f"FROM (SELECT status, took, {answered} AS answered, "
        f"coalesce(settled_by, recipient, '{UNKNOWN}') AS who, coalesce(recipient, '{NOBODY}') AS recipient, "
        f"{team} AS team FROM ({settled_sql}) AS settled_rows{columns}) AS s "
        "GROUP BY GROUPING SETS ((who), (team), (recipient), ()) "
        "HAVING CASE WHEN grouping(who) = 0 THEN count(*) FILTER (WHERE answered) > 0 "
        "WHEN grouping(team) = 0 THEN team IS NOT NULL "
        "WHEN grouping(recipient) = 0 THEN count(*) FILTER (WHERE status = 'expired') > 0 ELSE true END"
    )


def _times_of(times: str | Sequence[float]) -> list[float]:
    return [float(t) for t in times.split(",")] if isinstance(times, str) else list(times)


def figures_from_rows(rows: Iterable[Sequence[Any]]) -> Figures:
    """`Figures` from the rows of `figures_sql`."""
    ages: dict[str, list[int]] = {}
    oldest: dict[str, float] = {}
    waiting: dict[str, int] = {}
    answered: dict[str, Answered] = {}
    team_answered: dict[str, Answered] = {}
    expired: dict[str, int] = {}
    every_time: list[float] = []  # everyone's: each answerer's, together
    settled_rows = 0
    for part, name, column, count, seconds, times in rows:
        if part == 0:
            counts = ages.get(name)
            if counts is None:
                counts = ages[name] = [0] * len(AGES)
            counts[column] = count
            oldest[name] = max(oldest.get(name, seconds), seconds)
        elif part == 1:
            waiting[name] = count
        elif part == 2:
            took = _times_of(times)
            answered[name] = Answered(count, statistics.median(took))
            every_time += took
        elif part == 3:
            team_answered[name] = Answered(count, statistics.median(_times_of(times)))
        elif part == 5:
            expired[name] = count
        else:
            settled_rows = count
    return Figures(
        ages=ages,
        oldest=oldest,
        waiting=waiting,
        answered=answered,
        team_answered=team_answered,
        everyone=Answered(len(every_time), statistics.median(every_time) if every_time else None),
        expired=expired,
        pending_rows=sum(waiting.values()),
        settled_rows=settled_rows,
    )


def fts_match(query: Query, terms: Mapping[str, Sequence[str] | None] | None = None) -> str:
    """SQLite's full-text query of a search: every word as a prefix of a word of the texts
    (or one of the indexed words it stands for, when `terms` names them) and, for someone's
    requests, the index's own intersection with whom they are to (a person and their
    teams), so a common word costs its matches among theirs only."""

    def one(word: str) -> str:
        found = None if terms is None else terms.get(word)
        if not found:
            return f'"{word}"*'
        return "(" + " OR ".join('"' + term.replace('"', '""') + '"' for term in found) + ")"

    match = "body : (" + " AND ".join(one(w) for w in query.words) + ")"
    if query.recipient is not None:
        names = (query.recipient, *query.teams)
        match += " AND recipient : (" + " OR ".join(f'"{recipient_token(n)}"' for n in names) + ")"
    return match


def recipient_token(name: str) -> str:
    """A name as one token of SQLite's search index (its `recipient` column)."""
    return "x" + name.encode().hex().upper()


ID_TIME_SLACK = timedelta(minutes=10)
"""How far a request's creation time may be from the time its id begins with, for a time
window's list read along the ids. An id is made just after the creation time is read,
from the same clock; within a process ids never go back, so after the clock stepped back
by more than this, the ids made until it caught up begin later than their requests were
made, and a window ending among them would leave those requests out."""


def _id_at(when: datetime, offset: timedelta) -> str:
    """The smallest id made at `when` + `offset` (`model.new_id`: 48 bits of milliseconds,
    then 80 random bits), the time rounded away from `when` to the minute, clamped to the
    ids' range."""
    minutes = when.timestamp() / 60 + offset / timedelta(minutes=1)
    ms = 60_000 * (math.floor(minutes) if offset < timedelta(0) else math.ceil(minutes))
    return f"{min(max(ms, 0), (1 << 48) - 1):012x}{0:020x}"


def _reads_along_ids(query: Query) -> bool:
    """Whether a list reads along the primary key: no filter with an index of its own (a
    person's, an agent's, a session's, a channel's, a run's; pending requests)."""
    return query.status != Status.PENDING and all(getattr(query, n) is None for n in ("recipient", *_TEXT_NARROWING))


def reads_along_texts(query: Query) -> bool:
    """Whether a search may read along a person's texts (`TextPlan.along`): theirs alone
    (no teams), and no other filter read by an index of its own (a requester's, a
    session's, a channel's, a run's, an agent's, the approvals', the pending rows')."""
    return (
        query.recipient is not None
        and not query.teams
        and query.status != Status.PENDING
        and query.kind != "approval"
        and all(getattr(query, name) is None for name in (*_TEXT_NARROWING, "agent"))
    )


def _reads_settled_rows_only(query: Query) -> bool:
    """Whether a read of settled requests (everyone's, or a person's and their teams')
    filters by nothing a `settled_requests` row lacks (when they were created)."""
    others = (name for name in FILTERS if name != "recipient")
    return query.settled and not any(getattr(query, name) is not None for name in others) and not query.words


def _reads_pending_rows_only(query: Query) -> bool:
    """Whether a read of pending requests filters by nothing a `pending_requests` row lacks."""
    others = (name for name in FILTERS if name != "status" and name not in _OF_PENDING_ROWS)
    dated = query.since is not None or query.until is not None
    return not any(getattr(query, name) is not None for name in others) and not dated and not query.words


RUN_COLUMNS = (
    "id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at, "
    "attempts, max_duration, created_at, updated_at, waiting_on, state, result, error"
)
"""The columns of a run, in the order `run_from_row` reads them (the same in each dialect)."""

_RUN_FILTERS = ("agent", "session", "status", "requester")


def run_from_row(row: Sequence[Any], time: Any) -> Run:
    """A run from its row (`RUN_COLUMNS`); `time` reads the dialect's time columns."""
    (run_id, agent, session, requester, status, reason, ready, worker, lease, expires, attempts, duration) = row[:12]
    created, updated, waiting_on, state, result, error = row[12:]
    return Run(
        id=run_id,
        agent=agent,
        created_at=time(created),
        updated_at=time(updated),
        status=RunStatus(status),
        session=session,
        requester=requester,
        terminal_reason=reason,
        expires_at=None if expires is None else time(expires),
        max_duration=None if duration is None else timedelta(seconds=duration),
        waiting_on=tuple(decode_json(waiting_on)) if waiting_on else (),
        state=None if state is None else decode_json(state),
        result=None if result is None else decode_json(result),
        error=error,
        ready=bool(ready),
        worker=worker,
        lease_expires_at=None if lease is None else time(lease),
        attempts=int(attempts),
    )


def may_end(run: Run, status: RunStatus, worker: str | None, due: datetime | None, *, abandoned: bool = False) -> bool:
    """Whether a run may end now as `status`: not ended; running and held by `worker` when
    given; completed or failed without `worker`, running and held by no worker (a worker
    resuming it ends it, not its agent; a cancellation ends it whoever holds it); and when
    it is being expired (`due`), past its deadline and still parked on a person (not
    ready), or with `abandoned`, still running held by no worker."""
    if run.status.ended:
        return False
    if (worker is not None or status is not RunStatus.CANCELLED) and not (
        run.status is RunStatus.RUNNING and run.worker == worker
    ):
        return False
    if due is not None:
        return run.expires_at is not None and run.expires_at <= due and expirable(run, abandoned=abandoned)
    return True


def expirable(run: Run, *, abandoned: bool) -> bool:
    """Whether `run` is one its deadline ends: with `abandoned`, a running run no worker
    holds (its own process gave no sign of life); else one parked on a person (not ready)."""
    if abandoned:
        return run.status is RunStatus.RUNNING and run.worker is None
    return run.status.waiting and not run.ready


def held_elsewhere(status: RunStatus, holder: str | None, worker: str | None) -> bool:
    """Whether a run is running under someone other than `worker` (without `worker`, an
    agent: under any worker, which resumes it): what it holds, such as the messages sent
    to it, is then not `worker`'s to take."""
    return status is RunStatus.RUNNING and holder != worker


OWNED_AGENTS_READ = 32
"""The most agents of one owner whose runs a person's list reads an index range each of
(`runs_sql`); past it, the runs of all of them are gathered and sorted."""


def runs_sql(
    query: RunQuery, stamp: Callable[[datetime], Any], owned: Sequence[str] | None = ()
) -> tuple[str, dict[str, Any]]:
    """The statement for `RunStore.list_runs` (named `:parameters`): the filters, then a
    keyset page in the order runs were made (`stamp` writes the keyset's time as the
    store keeps it). A list leaves each run's state out (None); `get_run` reads it.

    `owned`: with `involving`, the agents that person owns (None: more than
    `OWNED_AGENTS_READ`). The runs each of them and the person started are read as index
    ranges cut at the page, so an owner of a busy agent reads a page of its runs, not all
    of them sorted; those with requests to the person are gathered whole."""
    where, params = [], {}
    for name in _RUN_FILTERS:
        value = getattr(query, name)
        if value is not None:
            where.append(f"{name} = :{name}")
            params[name] = value.value if isinstance(value, RunStatus) else value
    if query.after is not None:
        at, run_id = query.after
        where.append(f"(created_at, id) {'<' if query.order == 'desc' else '>'} (:after_at, :after_id)")
        params |= {"after_at": stamp(at), "after_id": run_id}
    direction = "DESC" if query.order == "desc" else "ASC"
    page = f" ORDER BY created_at {direction}, id {direction} LIMIT :limit"
    params["limit"] = query.limit
    if query.involving is not None:
        # Each name once (their own name as a team would be read twice).
        teams = tuple(dict.fromkeys(t for t in query.teams if t != query.involving))
        names = ", ".join([":who", *(f":team_{i}" for i in range(len(teams)))])
        recipient = "recipient = :who" if not teams else f"recipient IN ({names})"
        params["who"] = query.involving
        params |= {f"team_{i}": team for i, team in enumerate(teams)}
        starters = [":who"]
        if owned is not None:
            starters += [f":own_{i}" for i in range(len(owned))]
            params |= {f"own_{i}": name for i, name in enumerate(owned)}
        also = "".join(f" AND {w}" for w in where)
        sources = [
            f"SELECT id FROM (SELECT id FROM runs WHERE requester = {starter}{also}{page}) AS started_{i}"
            for i, starter in enumerate(starters)
        ]
        if owned is None:
            sources.append("SELECT id FROM runs WHERE requester IN (SELECT name FROM principals WHERE owner = :who)")
        sources.append(f"SELECT run FROM requests WHERE {recipient} AND run IS NOT NULL")
        where.append(f"id IN ({' UNION ALL '.join(sources)})")
    columns = RUN_COLUMNS.replace(", state,", ", NULL AS state,")
    sql = f"SELECT {columns} FROM runs"
    if where:
        sql += " WHERE " + " AND ".join(where)
    return sql + page, params


GRANT_COLUMNS = (
    "id, resource, ability, issuer, audience, issued_at, expires_at, request_id, ask_id, option_id, "
    "revoked_at, revoked_by"
)
"""The columns of the grants table a grant is read from, in `SqlStore._grant` order."""


CUT_OFF_ISSUER = (
    "(issuer IS NULL"
    " OR NOT EXISTS (SELECT 1 FROM tokens t WHERE t.principal = grants.issuer AND NOT t.for_session)"
    " OR EXISTS (SELECT 1 FROM tokens t WHERE t.principal = grants.issuer AND NOT t.for_session"
    " AND t.revoked_at IS NULL))"
)
"""A live grant's issuer is not a person `token revoke` cut off (`tokens_all_revoked`):
they had no token of their own, or one of them is live."""


def grants_sql(
    query: GrantQuery, stamp: Any, dialect: str, array: Callable[[Sequence[str]], Any]
) -> tuple[str, dict[str, Any]]:
    """The statement for `GrantStore.list_grants` (named `:parameters`), newest first
    (`requests` as the dialect's `array`)."""
    where: list[str] = []
    params: dict[str, Any] = {}
    for column, value in (
        ("audience", query.audience),
        ("issuer", query.issuer),
        ("request_id", query.request),
        ("resource", query.with_),
        ("ability", query.can),
    ):
        if value is not None:
            where.append(f"{column} = :{column}")
            params[column] = value
    if query.requests is not None:
        if dialect == "postgresql":
            where.append("request_id = ANY(:requests::text[])")
        else:
            where.append("request_id IN (SELECT value FROM json_each(:requests))")
        params["requests"] = array(list(query.requests))
    if query.live_at is not None:
        where.append("revoked_at IS NULL AND (expires_at IS NULL OR expires_at > :now)")
        params["now"] = stamp(query.live_at)
        where.append(CUT_OFF_ISSUER)
    if query.after is not None:
        where.append("id < :after")
        params["after"] = query.after
    sql = f"SELECT {GRANT_COLUMNS} FROM grants"
    if where:
        sql += " WHERE " + " AND ".join(where)
    params["limit"] = query.limit
    return sql + " ORDER BY id DESC LIMIT :limit", params


def web_session(row: Sequence[Any] | None, expires_at: datetime | None = None) -> WebSession | None:
    """A session from its row (id, principal name, kind, owner, token, csrf, expires_at)."""
    if row is None:
        return None
    session_id, name, kind, owner, token, csrf, expiry = row
    return WebSession(session_id, Principal(name, kind, owner), token, csrf, expires_at or expiry)


Settled = list[tuple[Request, str]]
"""Requests a write settled, each with its response as stored (as `_remember` takes them)."""


_WHO = ("to", "by", "session", "run")
"""The fields of an appended event's data it is filed under: recipient, requester, session, run."""


class Transaction(Protocol):
    """One write transaction of a dialect, as the shared write logic sees it: the dialect's
    named statements (from its .sql files), with positional arguments in the order each
    statement first names them, as for `SqlStore._rows`. On SQLite each runs at once in
    the writer (a body over it never suspends); on PostgreSQL each is a round trip on the
    transaction's connection."""

    async def rows(self, name: str, *args: Any) -> Sequence[Sequence[Any]]:
        """Run the statement `name`; all its rows."""
        ...

    async def row(self, name: str, *args: Any) -> Sequence[Any] | None:
        """Run the statement `name`; its first row (None for none)."""
        ...

    async def execute(self, name: str, *args: Any) -> int:
        """Run the statement `name`; how many rows it changed."""
        ...


DERIVE_DELAY = 0.2
"""Seconds after a write of this process before the search index is brought up to date
with it (a search brings it up to date first anyway)."""

_log = logging.getLogger("interlock")


class SqlStore:
    """The logic both SQL dialects share; a dialect subclass is its connector (see the
    module for how a write is shared)."""

    shared = True
    _cache: RequestCache
    _deriving: asyncio.TimerHandle | asyncio.Task[None] | None = None  # the search index's next catch-up

    # -- the search index, derived from the event log ---------------------------------------

    def _derive_soon(self) -> None:
        """Bring the search index up to date shortly (a write of ours appended events)."""
        if self._deriving is None and self._is_open():
            self._deriving = asyncio.get_running_loop().call_later(DERIVE_DELAY, self._derive_now)

    def _derive_now(self) -> None:
        task = asyncio.get_running_loop().create_task(self._catch_up())
        self._deriving = task

        def done(task: asyncio.Task[None]) -> None:
            if self._deriving is task:
                self._deriving = None
            if not task.cancelled() and (exc := task.exception()) is not None:
                _log.warning("bringing the search index up to date failed (a search will try again): %s", exc)

        task.add_done_callback(done)

    async def _stop_deriving(self) -> None:
        """Call off the next catch-up, and wait for one under way to stop (its failure is logged)."""
        deriving, self._deriving = self._deriving, None
        if deriving is not None:
            deriving.cancel()
            if isinstance(deriving, asyncio.Task):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await deriving

    # -- what a dialect supplies -----------------------------------------------------------

    def _is_open(self) -> bool:
        """Whether the store is open (its connection or pool is there)."""
        raise NotImplementedError

    async def _catch_up(self) -> None:
        """Bring the search index up to date with every event committed so far."""
        raise NotImplementedError

    async def _rows(self, name: str, *args: Any) -> Sequence[Sequence[Any]]:
        """Run the dialect's named query `name` with positional `args`; its rows."""
        raise NotImplementedError

    def _known_migration(self) -> int | None:
        """The newest migration this version knows, once the store is open (else None)."""
        raise NotImplementedError

    def _place(self) -> str:
        """The database, as a refusal names it (a password left out)."""
        raise NotImplementedError

    async def _rows_of(self, sql: str, params: dict[str, Any], *, budget: int | None = None) -> Sequence[Sequence[Any]]:
        """Run a statement built here, with `:named` parameters; its rows. With `budget`
        (a list's, whose rows begin with status, doc and response), a dialect may stop
        at the first row a `PageBudget` of it does not take: that row read, none after."""
        raise NotImplementedError

    def _time(self, value: Any) -> datetime:
        """A time column as stored by the dialect, as a datetime."""
        raise NotImplementedError

    def _stamp(self, value: datetime) -> Any:
        """A datetime as the dialect stores it in a time column."""
        raise NotImplementedError

    def _array(self, values: Sequence[str]) -> Any:
        """A list of texts as the dialect's statements take one."""
        raise NotImplementedError

    async def _write_in(self, body: Callable[[Transaction], Coroutine[Any, Any, T]], *, notify: bool = True) -> T:
        """Run `body` in one write transaction and return what it returns, once committed
        (`notify`: whether other processes are to be told of the change, where the dialect
        tells them itself)."""
        raise NotImplementedError

    async def _settle_in(self, tx: Transaction, request: Request, at: datetime, answer: str | None) -> bool:
        """Settle `request` (settled as it is to be stored) in `tx` if its row is still
        pending, appending its event; whether it was."""
        raise NotImplementedError

    async def _lock_requests_of_run(self, tx: Transaction, run_id: str) -> None:
        """Lock the pending requests of a run about to be ended and have them withdrawn,
        before the run itself (the dialect's lock order)."""
        raise NotImplementedError

    async def _change(self, name: str, *args: Any, notify: bool = True) -> int:
        """Run one named statement that changes rows and is safe to repeat, in a transaction
        of its own; how many rows it changed."""
        raise NotImplementedError

    async def _append_event(self, *values: Any) -> int:
        """Run `insert_event` with `values` in a transaction of its own; the event's id."""
        raise NotImplementedError

    async def _insert(self, request: Request, doc: str) -> tuple[Request, bool, int]:
        """Store a new request (its document `doc`) with its event, unless its channel is
        closed (`closed_channel`) or its idempotency key was used: the request stored,
        whether it is this one, and its size (see `row_size`)."""
        raise NotImplementedError

    async def _settle(self, request: Request, at: datetime, answer: str | None) -> bool:
        """Settle the request's row if still pending (see `settlement`), with its event;
        whether it was."""
        raise NotImplementedError

    async def _settle_granting(self, request: Request, at: datetime, answer: str | None) -> bool:
        """`_settle`, issuing the grants of its response (with their events) with it."""
        raise NotImplementedError

    async def _settle_claiming(
        self, request: Request, at: datetime, answer: str | None, claim: RunClaim
    ) -> tuple[bool, Run | None]:
        """`_settle`, and hand the run of the request, if that made it ready, to the worker
        of `claim` (with its event): whether it settled, and the run claimed."""
        raise NotImplementedError

    # -- requests --------------------------------------------------------------------------

    async def get(self, request_id: str, *, fresh: bool = True) -> Request | None:
        cached = self._cache.get(request_id)
        if cached is not None:
            if cached.status is not Status.PENDING or not fresh:
                return cached
            rows = await self._rows("get_status", request_id)
            if rows and rows[0][0] == Status.PENDING:
                return cached
        rows = await self._rows("get_request", request_id)
        if not rows:
            return None
        status, doc, answer = rows[0]
        request = request_from_row(status, doc, answer)
        self._cache.put(request, row_size(doc, answer))
        return request

    async def get_by_key(self, requester: str | None, key: str) -> Request | None:
        rows = await self._rows("find_idempotent", requester or "", key)
        if not rows:
            return None
        status, doc, answer = rows[0]
        return request_from_row(status, doc, answer)

    dialect = "sqlite"

    async def _list_sql(
        self, query: Query, outline: datetime | None = None, *, share: int | None = None
    ) -> tuple[str, dict[str, Any]] | None:
        """`list_sql` for this store, a search's index brought up to date first; None when
        a word of the search begins no indexed word (nothing can match)."""
        terms = await self._before_search(query) if query.words else None
        if terms is not None and () in terms.values():
            return None
        text_plan = await self._text_plan(query) if query.words else None
        return list_sql(
            query, self.dialect, self._stamp, outline=outline, terms=terms, text_plan=text_plan, share=share
        )

    async def list(self, query: Query) -> Listed[Request]:
        sql = await self._list_sql(query, share=PAGE_BYTES // query.limit)
        if sql is None:
            return Listed([])
        rows = await self._rows_of(*sql, budget=PAGE_BYTES)
        # The page's requests, as far as the budget goes: first by what each row is known
        # to count at least (a row withheld, its JSON's length), then, once the withheld
        # rows within that reach are read by id, by what each counts.
        budget, sizes = PageBudget(), []
        for row in rows:
            size = row_size(row[1], row[2]) if row[1] is not None else row[4]
            if not budget.takes(size):
                break
            sizes.append(size)
        withheld = [row[3] for row in rows[: len(sizes)] if row[1] is None]
        if not withheld:  # every size known already: the page is the rows the budget took
            items = [request_from_row(*row[:3]) for row in rows[: len(sizes)]]
            return Listed(items, cut=len(items) < len(rows))
        read = {found[0]: found[1:] for found in await self._rows("get_requests", self._array(withheld))}
        budget, items = PageBudget(), []
        for row, size in zip(rows, sizes, strict=False):
            status, doc, response = row[:3]
            if doc is None:  # withheld: read by id, and counted as it is
                status, doc, response = read.get(row[3], (None, None, None))
                if doc is None:
                    continue  # deleted since the page was read
                size = row_size(doc, response)
            if not budget.takes(size):
                break
            items.append(request_from_row(status, doc, response))
        return Listed(items, cut=len(items) < len(rows))

    async def outlines(self, query: Query, now: datetime) -> Sequence[Outline]:
        sql = await self._list_sql(query, outline=now)
        if sql is None:
            return []
        status, make = _STATUSES.__getitem__, tuple.__new__  # a thousand rows: no per-row call of Outline's own
        return [
            make(Outline, (status(state), to, agent, age, took, by))
            for state, to, agent, age, took, by in await self._rows_of(*sql)
        ]

    async def figures(self, pending: Query, settled: Query, now: datetime, teams: Collection[str]) -> Figures:
        return figures_from_rows(
            await self._rows_of(*figures_sql(pending, settled, now, teams, self.dialect, self._stamp))
        )

    async def _before_search(self, query: Query) -> Mapping[str, Sequence[str] | None] | None:
        """Bring what a text search reads up to date (a dialect that derives it later); the
        indexed words each of the query's words stands for, where a dialect asks for them
        (`list_sql(terms=...)`), or None."""
        return None

    async def _text_plan(self, query: Query) -> TextPlan | None:
        """How a search is read (`list_sql(text_plan=...)`), where a dialect chooses, or None."""
        return None

    async def next_expiry(self) -> datetime | None:
        value = (await self._rows("next_expiry"))[0][0]
        return None if value is None else self._time(value)

    def note_read(self, request_id: str) -> None:
        pass  # every outcome is kept

    def requester_of(self, requester: str | None) -> str | None:
        return requester

    def _remember(self, request: Request, response: str | None) -> None:
        """Cache a request just settled: its document's size as known, and its response."""
        size = self._cache.size_of(request.id)
        if size is None:
            size = row_size(encode_document(request_to_dict(request.as_created())))
        self._cache.put(request, size + row_size("", response))

    async def insert(self, request: Request) -> tuple[Request, bool]:
        stored, created, size = await self._insert(request, encode_document(request_to_dict(request)))
        self._cache.put(stored, size)
        return stored, created

    async def settle(self, request: Request) -> Request | None:
        at, answer = settlement(request)
        try:
            settled = await self._settle(request, at, answer)
        except CutOff:
            raise refused_cut_off(request) from None
        if not settled:
            return None
        self._remember(request, answer)
        return request

    async def settle_granting(self, request: Request) -> Request | None:
        at, answer = settlement(request)
        try:
            settled = await self._settle_granting(request, at, answer)
        except CutOff:
            raise refused_cut_off(request) from None
        if not settled:
            return None
        self._remember(request, answer)
        return request

    async def settle_claiming(self, request: Request, claim: RunClaim) -> tuple[Request | None, Run | None]:
        at, answer = settlement(request)
        try:
            settled, claimed = await self._settle_claiming(request, at, answer, claim)
        except CutOff:
            raise refused_cut_off(request) from None
        if not settled:
            return None, None
        self._remember(request, answer)
        return request, claimed

    async def append_event(self, type: str, data: Mapping[str, Any]) -> Event:
        at = datetime.now(UTC)
        # Filed under whom the data names, as the event of a request would be.
        to, by, session, run = (value if isinstance(value, str) else None for value in map(data.get, _WHO))
        event_id = await self._append_event(type, None, self._stamp(at), encode_json(dict(data)), to, by, session, run)
        return Event(event_id, type, at, data=dict(data))

    async def reopen_channel(self, channel: str, *, requester: str | None = None) -> bool:
        if requester is None:
            return await self._change("reopen_channel", channel) > 0
        return await self._change("reopen_channel_for", channel, requester) > 0

    # -- events ----------------------------------------------------------------------------

    async def events(self, after: int = 0, limit: int = 500) -> Listed[Event]:
        return await self.find_events(EventQuery(after, limit=limit))

    async def find_events(self, query: EventQuery) -> Listed[Event]:
        rows = await self._rows_of(*self._find_events_sql(query))
        # The requests the page names: a settled one held here never changes, so only the
        # others are read, in one statement (a person's page of 500 events otherwise looks
        # up 500 requests by id, most of them the same few hundred on every read).
        # A settled one's `created` event needs it as created: held too, or read.
        cache = self._cache
        known: dict[str, tuple[Request, int]] = {}
        created: dict[str, Request] = {}
        unknown: dict[str, None] = {}  # in the page's order
        for _, type_, request_id, _, _ in rows:
            if request_id is None or request_id in unknown:
                continue
            entry = known.get(request_id)
            held = entry[0] if entry is not None else cache.get(request_id)
            if held is None or held.status is Status.PENDING:
                unknown[request_id] = None
                continue
            if entry is None:
                known[request_id] = (held, cache.size_of(request_id) or 0)
            if type_ == "created" and request_id not in created:
                as_made = cache.as_created(held)
                if as_made is None:
                    unknown[request_id] = None  # its row's document has it
                else:
                    created[request_id] = as_made
        withheld: dict[str, int] = {}
        if unknown:
            # Each event counts the request it carries, and the page ends where they pass
            # `PAGE_BYTES`: SQLite stops reading there, PostgreSQL withholds long requests.
            sql = page_requests_sql(self.dialect, self._array(list(unknown)), PAGE_BYTES // max(query.limit, 1))
            for status, doc, answer, request_id, *length in await self._rows_of(*sql, budget=PAGE_BYTES):
                if doc is None:
                    withheld[request_id] = length[0]
                else:
                    known[request_id] = self._read_request(request_id, status, doc, answer, created)
        reach = _reach(rows, known, withheld)
        # The requests withheld for their length are read by id, and counted as they are.
        # (Every other request on the page was read above: the unknown ones are read in
        # the page's order, and the budget of that read, which counts them alone, runs out
        # no sooner than the page's, which counts the held ones too.)
        if any(row[2] in withheld for row in rows[:reach]):
            long = list(dict.fromkeys(row[2] for row in rows[:reach] if row[2] in withheld))
            for request_id, status, doc, answer in await self._rows("get_requests", self._array(long)):
                known[request_id] = self._read_request(request_id, status, doc, answer, created)
            reach = _reach(rows[:reach], known, {})
        page = rows[:reach]
        return Listed(self._events_about(page, {k: v[0] for k, v in known.items()}, created), cut=reach < len(rows))

    def _read_request(
        self, request_id: str, status: str, doc: str, answer: str | None, created: dict[str, Request]
    ) -> tuple[Request, int]:
        """A request read for a page of events, and its size: as held here while it is
        pending still, else parsed (and held, with its created form, which goes into
        `created` too)."""
        size = row_size(doc, answer)
        held = self._cache.get(request_id) if status == "pending" else None
        if held is not None:
            return held, size
        request, as_made = request_and_created(status, doc, answer)
        self._cache.put(request, size, as_made)
        created[request_id] = as_made
        return request, size

    def _events_about(
        self, rows: Sequence[Sequence[Any]], requests: Mapping[str, Request], created: Mapping[str, Request]
    ) -> Sequence[Event]:
        """Events from their rows (id, type, request id, time, data, ...), each with its
        request from `requests` (a `created` event's as it was created: a settled one's from
        `created`)."""
        out = []
        moment, make, pending = self._time, Event._make, Status.PENDING
        for event_id, type_, request_id, at, data, *_ in rows:
            about = None if request_id is None else requests[request_id]
            if type_ == "created" and about is not None and about.status is not pending:
                about = created[about.id]
            out.append(make(event_id, type_, moment(at), request_id, about, decode_json(data) if data else {}))
        return out

    def _find_events_sql(self, query: EventQuery) -> tuple[str, dict[str, Any]]:
        return find_events_sql(query, rows_to_them=True)

    async def last_event_id(self) -> int:
        return int((await self._rows("last_event_id"))[0][0])

    async def check_schema(self) -> None:
        known = self._known_migration()
        if known is None:
            return
        newer = await self._rows("migrations_after", known)
        if newer:
            raise newer_while_open(self._place(), [f"{int(v):04d}_{name}" for v, name in newer], known)

    # -- runs ------------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run | None:
        rows = await self._rows("get_run", run_id)
        return run_from_row(rows[0], self._time) if rows else None

    async def list_runs(self, query: RunQuery) -> Sequence[Run]:
        owned: Sequence[str] | None = ()
        if query.involving is not None:  # their agents' runs: an index range each
            found = await self._rows_of(
                "SELECT name FROM principals WHERE owner = :who LIMIT :most",
                {"who": query.involving, "most": OWNED_AGENTS_READ + 1},
            )
            owned = None if len(found) > OWNED_AGENTS_READ else [name for (name,) in found]
        rows = await self._rows_of(*runs_sql(query, self._stamp, owned))
        return [run_from_row(row, self._time) for row in rows]

    async def next_run_expiry(self) -> datetime | None:
        value = (await self._rows("next_run_expiry"))[0][0]
        return None if value is None else self._time(value)

    async def _locked_run(self, tx: Transaction, run_id: str) -> Run | None:
        """The run, locked until `tx` ends (on SQLite the writer holds the whole database)."""
        row = await tx.row("lock_run", run_id)
        return None if row is None else run_from_row(tuple(row), self._time)

    async def _insert_event(
        self,
        tx: Transaction,
        type_: str,
        at: datetime,
        data: Mapping[str, Any],
        *,
        recipient: str | None = None,
        requester: str | None = None,
        session: str | None = None,
        run: str | None = None,
    ) -> None:
        """Append an event about no request, filed under whom it concerns: the last
        statement of its transaction (on PostgreSQL event ids follow commit order)."""
        stamp = self._stamp(at)
        await tx.execute("insert_event", type_, None, stamp, encode_json(data), recipient, requester, session, run)

    def _remember_all(self, settled: Sequence[tuple[Request, str]]) -> builtins.list[Request]:
        """Cache requests just settled (with their stored responses); the requests."""
        for request, answer in settled:
            self._remember(request, answer)
        return [request for request, _ in settled]

    async def renew_lease(self, run_id: str, *, worker: str, lease_expires_at: datetime) -> bool:
        return await self._change("renew_lease", self._stamp(lease_expires_at), run_id, worker, notify=False) == 1

    async def _finish_run(
        self, run_id: str, status: RunStatus, fields: tuple[Any, ...], worker: str | None
    ) -> tuple[Run | None, bool]:
        """End a run without withdrawing its requests (completing or failing it), with its
        event, if it may end (see `may_end`): the ended run, else None, and whether requests
        of it are left pending. `fields`: the stored result, error, terminal reason and time."""
        raise NotImplementedError

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
    ) -> tuple[Run | None, builtins.list[Request]]:
        fields = (None if result is None else encode_json(result), error, terminal_reason, self._stamp(at))
        if withdraw is None or status is not RunStatus.CANCELLED:
            # Completing or failing: one statement, which says whether requests of the run
            # are left pending (made and never waited on, mostly none); those are withdrawn
            # after, as nobody will read their answers.
            ended, left = await self._finish_run(run_id, status, fields, worker)
            if ended is None or not left or withdraw is None:
                return ended, []
            cancelled = await self._write_in(lambda tx: self._withdraw_in(tx, run_id, withdraw))
            return ended, self._remember_all(cancelled)
        ended, cancelled = await self._write_in(lambda tx: self._end_in(tx, run_id, status, fields, worker, withdraw))
        return ended, self._remember_all(cancelled)

    async def _end_in(
        self,
        tx: Transaction,
        run_id: str,
        status: RunStatus,
        fields: tuple[Any, ...],
        worker: str | None,
        withdraw: Response,
        due: datetime | None = None,
        abandoned: bool = False,
    ) -> tuple[Run | None, Settled]:
        """End a run in `tx` if it may end (see `may_end`), cancelling its pending requests
        with `withdraw`: the ended run and the requests cancelled, with their stored
        responses."""
        await self._lock_requests_of_run(tx, run_id)
        run = await self._locked_run(tx, run_id)
        if run is None or not may_end(run, status, worker, due, abandoned=abandoned):
            return None, []
        row = await tx.row("end_run", status.value, *fields, run_id)
        assert row is not None  # the run is locked
        ended = run_from_row(tuple(row), self._time)
        cancelled = await self._withdraw_pending_in(tx, run_id, withdraw)
        await self._insert_event(
            tx,
            f"run_{status.value}",
            ended.updated_at,
            run_event_data(ended),
            requester=ended.requester,
            session=ended.session,
            run=ended.id,
        )
        return ended, cancelled

    async def _withdraw_pending_in(self, tx: Transaction, run_id: str, withdraw: Response) -> Settled:
        """Cancel the run's pending requests in `tx` with `withdraw`: those cancelled, with
        their stored responses."""
        answer = encode_json(response_to_dict(withdraw))
        cancelled = []
        for request_status, doc, response in await tx.rows("pending_of_run", run_id):
            request = request_from_row(request_status, doc, response).settle(Status.CANCELLED, withdraw)
            if await self._settle_in(tx, request, withdraw.at, answer):
                cancelled.append((request, answer))
        return cancelled

    async def _withdraw_in(self, tx: Transaction, run_id: str, withdraw: Response) -> Settled:
        """Withdraw the requests left pending by a run that has ended (see `end_run`)."""
        await self._lock_requests_of_run(tx, run_id)
        return await self._withdraw_pending_in(tx, run_id, withdraw)

    async def _expire_in(
        self, tx: Transaction, run_id: str, due: datetime, response: Response, abandoned: Response | None = None
    ) -> tuple[Run | None, Settled]:
        """Cancel a run past its deadline `due` (see `_end_in`): left waiting on a person;
        with `abandoned`, left running by a process that gave no sign of life since."""
        if abandoned is not None:
            fields = (None, None, "abandoned", self._stamp(due))
            return await self._end_in(tx, run_id, RunStatus.CANCELLED, fields, None, abandoned, due, abandoned=True)
        fields = (None, None, "interaction_timeout", self._stamp(due))
        return await self._end_in(tx, run_id, RunStatus.CANCELLED, fields, None, response, due)

    async def restart_run(self, run_id: str, *, expires_at: datetime) -> Run | None:
        stamp = self._stamp(expires_at)
        row = await self._write_in(lambda tx: tx.row("restart_run", stamp, run_id), notify=False)
        return None if row is None else run_from_row(tuple(row), self._time)

    # -- follow-up messages ------------------------------------------------------------------

    async def _followup_events(
        self, tx: Transaction, type_: str, followups: Sequence[Followup], run: Run, at: datetime
    ) -> None:
        """Append one event per message, filed under its sender and the run."""
        for followup in followups:
            data = followup_event_data(followup, agent=run.agent, session=run.session, to=run.requester)
            await self._insert_event(
                tx, type_, at, data, recipient=followup.by, requester=run.requester, session=run.session, run=run.id
            )

    async def enqueue_followup(self, followup: Followup, *, limit: int) -> Followup | None:
        async def enqueue(tx: Transaction) -> Followup | None:
            run = await self._locked_run(tx, followup.run)
            if run is None or run.status.ended:
                return None
            held = await tx.row("count_held_followups", run.id)
            if held is None or held[0] >= limit:
                return None
            queued_at = self._stamp(followup.queued_at)
            await tx.execute("insert_followup", followup.id, run.id, followup.text, followup.by, queued_at)
            await self._followup_events(tx, "followup_queued", [followup], run, followup.queued_at)
            return followup

        return await self._write_in(enqueue)

    async def list_followups(self, run_id: str) -> Sequence[Followup]:
        return [followup_from_row(tuple(row), self._time) for row in await self._rows("held_followups", run_id)]

    async def withdraw_followup(self, run_id: str, followup_id: str, *, at: datetime) -> Followup | None:
        async def withdraw(tx: Transaction) -> Followup | None:
            run = await self._locked_run(tx, run_id)
            if run is None or run.status.ended:
                return None
            row = await tx.row("finish_followup", "withdrawn", self._stamp(at), followup_id, run_id)
            if row is None:
                return None
            followup = followup_from_row(tuple(row), self._time)
            await self._followup_events(tx, "followup_withdrawn", [followup], run, at)
            return followup

        return await self._write_in(withdraw)

    async def claim_followups(
        self, run_id: str, *, at: datetime, worker: str | None = None
    ) -> Sequence[Followup] | None:
        async def claim(tx: Transaction) -> list[Followup] | None:
            run = await self._locked_run(tx, run_id)
            if run is None or run.status is not RunStatus.RUNNING:
                return []
            if held_elsewhere(run.status, run.worker, worker):
                return None
            rows = await tx.rows("deliver_followups", self._stamp(at), run_id)
            taken = sorted((followup_from_row(tuple(r), self._time) for r in rows), key=lambda f: (f.queued_at, f.id))
            if taken:
                await self._followup_events(tx, "followup_replayed", taken, run, at)
            return taken

        found = await self._rows("followups_to_take", run_id)
        if not found:
            return []
        status, holder, any_held = found[0]
        if held_elsewhere(RunStatus(status), holder, worker):
            return None  # refused whether or not messages are held, without a lock
        if not any_held:
            return []  # the common case at a turn boundary: lock nothing
        return await self._write_in(claim)

    # -- principals, tokens and sessions ---------------------------------------------------

    async def get_principal(self, name: str) -> Principal | None:
        rows = await self._rows("get_principal", name)
        return Principal(*rows[0]) if rows else None

    async def list_principals(self) -> Sequence[Principal]:
        return [Principal(*row) for row in await self._rows("list_principals")]

    async def team_members(self, team: str) -> Sequence[str] | None:
        if not await self._rows("get_team", team):
            return None
        return [str(row[0]) for row in await self._rows("team_members", team)]

    async def teams_of(self, name: str) -> frozenset[str]:
        return frozenset(str(row[0]) for row in await self._rows("teams_of", name))

    async def save_principal(self, principal: Principal) -> None:
        if principal.kind == "team":
            await self.save_team(principal.name)
            return
        created_at = self._stamp(datetime.now(UTC))

        async def save(tx: Transaction) -> None:
            if await tx.row("get_team", principal.name) is not None:
                raise ValueError(f"{principal.name!r} is a team")
            await tx.execute("upsert_principal", principal.name, principal.kind, principal.owner, created_at)

        await self._write_in(save, notify=False)

    async def save_team(self, team: str, members: Sequence[str] = ()) -> None:
        Principal(team, "team")  # the name's rules
        created_at = self._stamp(datetime.now(UTC))

        async def save(tx: Transaction) -> None:
            if await tx.row("principal_kind", team) is not None:
                raise ValueError(f"{team!r} is a person or an agent, not a team")
            for member in members:
                kind = await tx.row("principal_kind", member)
                if kind is None or kind[0] != "human":
                    raise ValueError(f"{member!r} is no person here: a team's members are people")
            await tx.execute("insert_team", team, created_at)
            for member in members:
                await tx.execute("insert_team_member", team, member)

        await self._write_in(save, notify=False)

    async def delete_team(self, team: str) -> bool:
        at = datetime.now(UTC)

        async def delete(tx: Transaction) -> bool:
            if await tx.row("lock_team", team) is None:
                return False
            members = [str(row[0]) for row in await tx.rows("team_members", team)]  # all of them: see lock_team
            await tx.execute("delete_team", team)
            if members:
                await self._insert_event(tx, TEAM_LEFT, at, {"team": team, "principals": members})
            return True

        return await self._write_in(delete)

    async def remove_team_members(self, team: str, members: Sequence[str]) -> int:
        at = datetime.now(UTC)

        async def remove(tx: Transaction) -> int:
            gone = [member for member in dict.fromkeys(members) if await tx.execute("delete_team_member", team, member)]
            if gone:
                await self._insert_event(tx, TEAM_LEFT, at, {"team": team, "principals": gone})
            return len(gone)

        return await self._write_in(remove)

    def _claim(self, request_id: str, rows: Sequence[Sequence[Any]]) -> Claim | None:
        return Claim(request_id, str(rows[0][0]), self._time(rows[0][1])) if rows else None

    async def claims(
        self, request_ids: Sequence[str], *, involving: str | None = None, teams: Collection[str] = ()
    ) -> Mapping[str, Claim]:
        if not request_ids:
            return {}
        if involving is None:
            rows = await self._rows("claims_of", self._array(request_ids))
        else:
            rows = await self._rows("claims_seen_by", self._array(request_ids), involving, self._array(list(teams)))
        return {row[0]: Claim(row[0], row[1], self._time(row[2])) for row in rows}

    async def principal_for_token(self, token_hash: str) -> Principal | None:
        rows = await self._rows("principal_for_token", token_hash)
        return Principal(*rows[0]) if rows else None

    async def live_token(self, token_hash: str) -> LiveToken | None:
        rows = await self._rows("live_token", token_hash)
        return LiveToken(rows[0][0], Principal(*rows[0][1:])) if rows else None

    async def list_tokens(self) -> Sequence[TokenInfo]:
        rows = await self._rows("list_tokens")
        return [TokenInfo(row[0], row[1], self._time(row[2]), bool(row[3])) for row in rows]

    async def tokens_all_revoked(self, principal: str) -> bool:
        rows = await self._rows("tokens_all_revoked", principal)
        return bool(rows[0][0])

    async def cut_off(self, names: Collection[str]) -> frozenset[str]:
        if not names:
            return frozenset()
        rows = await self._rows("cut_off", self._array(sorted(set(names))))
        return frozenset(row[0] for row in rows)

    # -- approval policies -------------------------------------------------------------------

    def _policy(self, row: Sequence[Any]) -> ApprovalPolicy:
        """A policy from its row (agent, server, body, version, updated_at, updated_by)."""
        agent, server, body, version, at, by = row
        return policy_from_body(agent, server, json.loads(body), int(version), self._time(at), by)

    async def get_policy(self, agent: str, server: str) -> ApprovalPolicy | None:
        rows = await self._rows("get_policy", agent, server)
        return self._policy(rows[0]) if rows else None

    async def list_policies(self, agent: str | None = None) -> Sequence[ApprovalPolicy]:
        rows = await (self._rows("list_policies") if agent is None else self._rows("list_policies_of", agent))
        return [self._policy(row) for row in rows]

    async def put_policy(self, policy: ApprovalPolicy, at: datetime, by: str | None) -> ApprovalPolicy:
        body = encode_json(policy_body(policy))

        async def put(tx: Transaction) -> ApprovalPolicy:
            row = await tx.row("put_policy", policy.agent, policy.server, body, self._stamp(at), by)
            assert row is not None  # an upsert returns its row
            stored = with_version(policy, int(row[0]), at, by)
            await self._policy_event(tx, "approval_policy_set", stored, by, at)
            return stored

        return await self._write_in(put)

    async def delete_policy(self, agent: str, server: str, by: str | None, at: datetime) -> ApprovalPolicy | None:
        async def delete(tx: Transaction) -> ApprovalPolicy | None:
            row = await tx.row("delete_policy", agent, server)
            if row is None:
                return None
            gone = self._policy(tuple(row))
            await self._policy_event(tx, "approval_policy_deleted", gone, by, at)
            return gone

        return await self._write_in(delete)

    async def _policy_event(
        self, tx: Transaction, type_: str, policy: ApprovalPolicy, by: str | None, at: datetime
    ) -> None:
        """A policy's change: shown to its agent and to who changed it."""
        data = policy_event_data(policy, by)
        await self._insert_event(tx, type_, at, data, recipient=policy.agent, requester=by)

    # -- grants ----------------------------------------------------------------------------

    def _grant(self, row: Sequence[Any]) -> IssuedGrant:
        """A grant from its row (`GRANT_COLUMNS`)."""
        gid, resource, ability, issuer, audience, issued, expires, request_id, ask_id, option_id, revoked, by = row
        return IssuedGrant(
            id=gid,
            with_=resource,
            can=ability,
            issuer=issuer,
            audience=audience,
            issued_at=self._time(issued),
            expires_at=None if expires is None else self._time(expires),
            request_id=request_id,
            ask_id=ask_id,
            option_id=option_id,
            revoked_at=None if revoked is None else self._time(revoked),
            revoked_by=by,
        )

    async def get_grant(self, grant_id: str) -> IssuedGrant | None:
        rows = await self._rows("get_grant", grant_id)
        return self._grant(rows[0]) if rows else None

    async def list_grants(self, query: GrantQuery) -> Sequence[IssuedGrant]:
        return [
            self._grant(row) for row in await self._rows_of(*grants_sql(query, self._stamp, self.dialect, self._array))
        ]

    async def revoke_grant(self, grant_id: str, by: str | None, at: datetime) -> IssuedGrant | None:
        async def revoke(tx: Transaction) -> IssuedGrant | None:
            row = await tx.row("revoke_grant", self._stamp(at), by, grant_id)
            if row is None:
                return None
            revoked = self._grant(tuple(row))
            data = grant_event_data(revoked)
            audience, issuer = revoked.audience, revoked.issuer  # the two it is shown to
            await self._insert_event(tx, "grant_revoked", at, data, recipient=audience, requester=issuer)
            return revoked

        return await self._write_in(revoke)

    def _web_session(self, row: Sequence[Any] | None) -> WebSession | None:
        return None if row is None else web_session(row, self._time(row[6]))

    async def get_session(self, session_hash: str, now: datetime) -> WebSession | None:
        rows = await self._rows("get_session", session_hash, self._stamp(now))
        return self._web_session(rows[0] if rows else None)

    # -- the outbox ------------------------------------------------------------------------

    def _notice(self, row: Sequence[Any]) -> Notice:
        notice_id, event_id, type_, request_id, recipient, at = row
        return Notice(int(notice_id), int(event_id), type_, request_id, recipient, self._time(at))

    def _delivery(self, row: Sequence[Any]) -> Delivery:
        """A delivery from its row, in the column order of `DELIVERY_COLUMNS`."""
        id_, notice, request_id, kind, event, recipient, channel, address, status, attempts = row[:10]
        due_at, created_at, delivered_at, last_error, reference = row[10:]
        return Delivery._make(
            id_,
            int(notice),
            request_id,
            kind,
            event,
            recipient,
            channel,
            address,
            self._time(due_at),
            self._time(created_at),
            status,
            int(attempts),
            None if delivered_at is None else self._time(delivered_at),
            last_error,
            reference,
        )

    def _delivery_row(self, d: Delivery) -> tuple[Any, ...]:
        """A delivery's values in the column order of `DELIVERY_COLUMNS`."""
        return (
            d.id,
            d.notice,
            d.request_id,
            d.kind,
            d.event,
            d.recipient,
            d.channel,
            d.address,
            d.status,
            d.attempts,
            self._stamp(d.due_at),
            self._stamp(d.created_at),
            None if d.delivered_at is None else self._stamp(d.delivered_at),
            d.last_error,
            d.reference,
        )

    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        rows = await self._rows("get_delivery", delivery_id)
        return self._delivery(rows[0]) if rows else None

    async def load_setting(self, name: str) -> Any | None:
        rows = await self._rows("get_setting", name)
        return decode_json(rows[0][0]) if rows else None

    async def save_setting(self, name: str, value: Any) -> None:
        await self._change("put_setting", name, encode_json(value), self._stamp(datetime.now(UTC)), notify=False)

    async def finish_delivery(self, delivery: Delivery, owner: str) -> bool:
        due_at = self._stamp(delivery.due_at)
        delivered_at = None if delivery.delivered_at is None else self._stamp(delivery.delivered_at)
        outcome = (delivery.status, delivery.attempts, due_at, delivered_at, delivery.last_error, delivery.reference)
        return await self._change("finish_delivery", *outcome, delivery.id, owner, notify=False) == 1

    async def _record_link_use(self, use: LinkUse, expires_at: datetime) -> bool:
        """Record the first use of an answer link (dropping the expired ones); whether this
        one was the first."""
        raise NotImplementedError

    async def use_answer_link(self, use: LinkUse, expires_at: datetime) -> tuple[LinkUse, bool]:
        if await self._record_link_use(use, expires_at):
            return use, True
        earlier = await self.answer_link_use(use.link)
        return (earlier or use), False

    async def answer_link_use(self, link: str) -> LinkUse | None:
        rows = await self._rows("get_link_use", link)
        return LinkUse(rows[0][0], rows[0][1], rows[0][2], self._time(rows[0][3])) if rows else None

    async def key_fingerprint(self) -> str | None:
        rows = await self._rows("get_key_fingerprint")
        return str(rows[0][0]) if rows else None

    async def keep_key_fingerprint(self, fingerprint: str, at: datetime) -> str:
        await self._change("keep_key_fingerprint", fingerprint, self._stamp(at), notify=False)
        return await self.key_fingerprint() or fingerprint  # (or forgotten since: it stood a moment ago)

    async def replace_key_fingerprint(self, fingerprint: str | None, at: datetime) -> None:
        if fingerprint is None:
            await self._change("forget_key_fingerprint", notify=False)
        else:
            await self._change("put_key_fingerprint", fingerprint, self._stamp(at), notify=False)

    async def grant_key_id(self) -> GrantKeyId | None:
        rows = await self._rows("get_grant_key_id")
        return GrantKeyId(str(rows[0][0]), bool(rows[0][1])) if rows else None

    async def keep_grant_key_id(self, key: GrantKeyId, at: datetime) -> GrantKeyId:
        await self._change("keep_grant_key_id", key.kid, key.derived, self._stamp(at), notify=False)
        return await self.grant_key_id() or key  # (or forgotten since: it stood a moment ago)

    async def replace_grant_key_id(self, key: GrantKeyId | None, at: datetime) -> None:
        if key is None:
            await self._change("forget_grant_key_id", notify=False)
        else:
            await self._change("put_grant_key_id", key.kid, key.derived, self._stamp(at), notify=False)

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
        where: list[str] = []
        params: dict[str, Any] = {"limit": limit}
        for column, value in (("request_id", request_id), ("status", status), ("recipient", recipient)):
            if value is not None:
                where.append(f"{column} = :{column}")
                params[column] = value
        _of_teams(where, params, recipient, teams)
        if after is not None:
            where.append("id > :after")
            params["after"] = after
        sql = f"SELECT {DELIVERY_COLUMNS} FROM deliveries"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [self._delivery(row) for row in await self._rows_of(sql + " ORDER BY id LIMIT :limit", params)]

    async def list_dead_letters(
        self,
        *,
        recipient: str | None = None,
        teams: Sequence[str] = (),
        before: tuple[datetime, str] | None = None,
        limit: int = 100,
    ) -> Sequence[Delivery]:
        # `status = 'dead'` as written here is what the partial indexes `deliveries_dead`
        # and `deliveries_dead_to` (migrations) are of, so each page is one range of one
        # (a member's, with their teams' requests, reads `deliveries_dead` in order, each
        # row checked).
        where = ["status = 'dead'"]
        params: dict[str, Any] = {"limit": limit}
        if recipient is not None:
            where.append("recipient = :recipient")
            params["recipient"] = recipient
        _of_teams(where, params, recipient, teams)
        if before is not None:
            where.append("(due_at, id) < (:before_at, :before_id)")
            params |= {"before_at": self._stamp(before[0]), "before_id": before[1]}
        sql = f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE {' AND '.join(where)}"
        sql += " ORDER BY due_at DESC, id DESC LIMIT :limit"
        return [self._delivery(row) for row in await self._rows_of(sql, params)]


def _of_teams(where: list[str], params: dict[str, Any], recipient: str | None, teams: Sequence[str]) -> None:
    """Widen a list's `recipient = :recipient` to the deliveries of the requests addressed
    to `teams` too (a member's view of them)."""
    if recipient is None or not teams:
        return
    names = [f":team_{i}" for i in range(len(teams))]
    where[where.index("recipient = :recipient")] = (
        f"(recipient = :recipient OR (kind <> 'escalation' AND request_id IN "
        f"(SELECT id FROM requests WHERE recipient IN ({', '.join(names)}))))"
    )
    params |= {f"team_{i}": team for i, team in enumerate(teams)}


DELIVERY_COLUMNS = (
    "id, notice, request_id, kind, event, recipient, channel, address, status, attempts, "
    "due_at, created_at, delivered_at, last_error, reference"
)


_COMMENT = re.compile(r"--[^\n]*")


def numbered(sql: str) -> tuple[str, tuple[int, ...]]:
    """Turn `:name` parameters into SQLite's plain `?`, and say which positional argument
    each takes: the arguments are numbered in order of first appearance (the order
    PostgreSQL's `$n` of the same query take), so a name used twice takes its argument
    twice. Comments are dropped first: a name they mention is not a parameter. (Numbered
    `?N` bound from a sequence are deprecated from Python 3.12.)"""
    sql = _COMMENT.sub("", sql)
    order: list[str] = []
    taken: list[int] = []

    def place(match: re.Match[str]) -> str:
        if match[1] not in order:
            order.append(match[1])
        taken.append(order.index(match[1]))
        return "?"

    return _PARAMETER.sub(place, sql), tuple(taken)
