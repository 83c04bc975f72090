"""An in-process store for tests, quickstarts and single-process agents.

Nothing survives the process. Pending requests are kept until they settle. A settled one
stays readable until a `wait` has read its outcome (up to the last 10,000 unread ones), so
a later answer never evicts an earlier one nobody has read yet; read outcomes then go into
a bounded retention (the last `retention`, 128 by default, 0 for none) so a late `wait`
can still replay them. Answered requests not yet consumed are remembered apart from that
retention (the last 10,000), so an approval can be consumed even when the retention is
small. No method awaits anything, so each one is atomic on the event loop.
"""

from __future__ import annotations

import builtins
import heapq
import itertools
import math
from collections import OrderedDict, deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from ..approval_policies import ApprovalPolicy, policy_event_data, with_version
from ..dashboard import Figures, Outline, count
from ..errors import Closed
from ..followups import Followup, followup_event_data
from ..model import (
    ASK_TYPES,
    NO_ORIGIN,
    Ask,
    Claim,
    Event,
    IssuedGrant,
    Request,
    Response,
    Run,
    RunStatus,
    Status,
    evolve,
    grant_event_data,
    request_to_dict,
    response_to_dict,
    run_event_data,
)
from ..outbox import NOTICE_TYPES, Delivery, DeliveryState, LinkUse, Notice
from ..principals import (
    TEAM_LEFT,
    IssuedSession,
    IssuedSignInLink,
    IssuedToken,
    LiveToken,
    Principal,
    TokenInfo,
    WebSession,
    decided_in_the_name_of,
    refused_cut_off,
)
from ..secret_key import GrantKeyId
from . import (
    EventQuery,
    GrantQuery,
    Listed,
    PageBudget,
    Query,
    RunClaim,
    RunQuery,
    search_texts,
    stored_size,
    text_words,
)
from ._sql import (  # JSON as the SQL stores write it; the rules who ends a run, who takes its messages
    encode_document,
    expirable,
    held_elsewhere,
    may_end,
)
from ._url import url_options

__all__ = ["MemoryStore", "from_url"]

_FINISHED = 10_000  # delivered or skipped deliveries kept listed; older ones are forgotten
_UNCONSUMED = 10_000  # answered requests kept consumable; an older one is refused (fails closed)
_UNREAD = 10_000  # settled requests kept until a waiter reads them; an older one is forgotten
_UNROUTED = 100_000  # notices kept until an outbox routes them; an older one is dropped


_OPTIONS = {"retention": int, "event_retention": int}


def from_url(url: str, **options: Any) -> MemoryStore:
    """`memory://?retention=128&event_retention=100000`."""
    ours, _ = url_options(url, _OPTIONS, options)
    return MemoryStore(**ours)


class MemoryStore:
    shared = False
    poll_interval = math.inf

    def __init__(self, *, retention: int = 128, event_retention: int = 100_000) -> None:
        if retention < 0:
            raise ValueError("retention must be >= 0")
        self.retention = retention
        self._pending: dict[str, Request] = {}
        self._pending_of_run: dict[str, dict[str, None]] = {}  # a run's pending requests' ids, by run
        self._settled: OrderedDict[str, Request] = OrderedDict()  # read outcomes: the retention
        self._sizes: dict[str, tuple[Request | _Archive, int]] = {}  # what a request counts on a page, once listed
        self._unread: OrderedDict[str, Request] = OrderedDict()  # settled, not read by a waiter yet
        self._idempotency: dict[tuple[str | None, str], str] = {}
        # Events are kept as tuples of plain values and made `Event`s when read: a request's
        # events are written on every cycle and read far less often. A request event names
        # its request; the log keeps one version of each request it names, the latest (its
        # `created` event reads it back as created), with how many events name it. So the
        # log holds no object per event that the garbage collector would have to walk; a
        # request the log keeps once the retention has let it go is kept as plain values
        # (`_archived`), which the collector stops tracking.
        self._events: deque[_Entry] = deque(maxlen=event_retention)
        self._event_retention = event_retention
        self._logged: dict[str, Request | _Archive] = {}
        self._log_refs: dict[str, int] = {}
        # The deadlines of logged requests that settled with one (a settled request no
        # longer carries it): their `created` event shows it.
        self._deadlines: dict[str, datetime] = {}
        self._last_event = 0
        self._expiry: list[tuple[datetime, str]] = []
        self._principals: dict[str, Principal] = {}
        self._tokens: dict[str, IssuedToken] = {}  # by hash
        self._revoked: set[str] = set()  # token ids
        self._unconsumed: OrderedDict[str, Request | _Archive] = OrderedDict()  # answered, not consumed yet
        self._sessions: dict[str, tuple[IssuedSession, str]] = {}  # by hash: the session and its token's id
        self._signin_links: dict[str, tuple[IssuedSignInLink, bool]] = {}  # by hash: the link and whether used
        self._closed: set[tuple[str, str | None]] = set()  # (channel, requester or None for everyone)
        self._runs: dict[str, Run] = {}
        # The runs with a session that have not ended, by agent, session and requester (no
        # requester and an empty one alike): what an exclusive start looks at, so that it
        # reads those, not every run the session (or the store) ever had.
        self._unended_runs: dict[tuple[str, str, str], dict[str, None]] = {}
        self._followups: dict[str, dict[str, Followup]] = {}  # by run, then id: the messages held, oldest first
        self._run_expiry: list[tuple[datetime, str]] = []  # parked runs' deadlines (stale entries skipped)
        # What a claim may take, so that it looks at those runs and not at every run kept:
        # the waiting runs that are ready (in the order they became so), and the leases of
        # running ones by deadline (stale entries skipped).
        self._ready_runs: dict[str, None] = {}
        self._leases: list[tuple[datetime, str]] = []
        self._grants: dict[str, IssuedGrant] = {}  # by id; kept for the life of the process
        self._policies: dict[tuple[str, str], ApprovalPolicy] = {}  # by (agent, server)
        # The outbox: the unrouted notices by id (the newest `_UNROUTED`), each the very entry
        # of its event in the log, not a copy (every tuple made is one more object for the
        # garbage collector to count, and it collects every 700); the leases of claimed ones
        # apart; the deliveries by id.
        self._notices: dict[int, _Entry] = {}
        self._notice_leases: dict[int, tuple[str, datetime]] = {}
        self._deliveries: dict[str, tuple[Delivery, str | None, datetime | None]] = {}
        self._last_notice = 0
        self._link_uses: dict[str, tuple[LinkUse, datetime]] = {}  # answer links used: the use, the link's expiry
        self._finished: deque[str] = deque()  # delivered or skipped, oldest first
        self._teams: dict[str, set[str]] = {}  # team name: its members
        self._claims: dict[str, Claim] = {}  # by request id
        self._views: dict[str, set[str]] = {}  # request id: who has opened it
        self._released: set[str] = set()  # request ids released, while their request is kept
        self._settings: dict[str, Any] = {}
        self._key_fingerprint: str | None = None  # of the nodes' secret key (`SecretKeyStore`)
        self._grant_key_id: GrantKeyId | None = None  # of the nodes' grant key (`SecretKeyStore`)

    async def open(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    def on_foreign_change(self, callback: Callable[[], None], settled: Callable[[Request], None] | None = None) -> None:
        pass  # no other process can write here

    def _append(self, type_: str, request: Request) -> None:
        """Log a request's change of status (its `created` or settled event), and its notice."""
        self._last_event = event_id = self._last_event + 1
        response = request.response
        at = response.at if response is not None else request.created_at
        entry = (event_id, type_, at, request.id, None, request.to)
        self._log(entry, request)
        if type_ in _NOTICE_TYPES:
            self._last_notice += 1
            notices = self._notices
            notices[self._last_notice] = entry
            if len(notices) > _UNROUTED:
                # A process that runs no outbox routes none: keep the newest only, as the
                # event log does, rather than two notices for every request ever made.
                oldest = next(iter(notices))
                del notices[oldest]
                self._notice_leases.pop(oldest, None)

    async def append_event(self, type: str, data: Mapping[str, Any]) -> Event:
        self._last_event += 1
        entry = (self._last_event, type, datetime.now(UTC), None, dict(data), None)
        self._log(entry)
        return self._event(entry)

    def _log(self, entry: _Entry, request: Request | _Archive | None = None) -> None:
        """Append an event; `request`, the request it names as it is after it (entry[3] its id)."""
        events = self._events
        if len(events) >= self._event_retention:
            if not self._event_retention:
                return  # no event log kept
            self._unlog(events[0][3])  # the oldest event is about to go
        if request is not None:
            request_id = entry[3]
            assert request_id is not None
            before = self._logged.get(request_id)
            if isinstance(before, Request) and before.expires_at is not None and before is not request:
                self._deadlines[request_id] = before.expires_at  # `request` settles it
            self._logged[request_id] = request
            refs = self._log_refs
            refs[request_id] = refs.get(request_id, 0) + 1
        events.append(entry)

    def _unlog(self, request_id: str | None) -> None:
        if request_id is None:
            return
        left = self._log_refs[request_id] - 1
        if left:
            self._log_refs[request_id] = left
        else:
            del self._log_refs[request_id]
            del self._logged[request_id]
            if request_id not in self._pending and request_id not in self._unread and request_id not in self._settled:
                self._sizes.pop(request_id, None)
            self._deadlines.pop(request_id, None)

    def _logged_request(self, entry: _Entry) -> Request | None:
        """The request as it was right after a logged event."""
        request_id = entry[3]
        if request_id is None:
            return None
        request = _restored(self._logged[request_id])
        if entry[1] == "created" and request.status is not Status.PENDING:
            return request.as_created(self._deadlines.get(request_id))
        return request

    def _event(self, entry: _Entry) -> Event:
        event_id, type_, at, request_id, data, _ = entry
        return Event(event_id, type_, at, request_id, self._logged_request(entry), {} if data is None else data)

    async def insert(self, request: Request) -> tuple[Request, bool]:
        return self.insert_now(request)

    def insert_now(self, request: Request) -> tuple[Request, bool]:
        channel = request.origin.channel
        if channel is not None and self._closed and self._is_closed(channel, request.requester):
            raise Closed(None, f"channel {channel!r} is closed")
        if request.idempotency_key is not None:
            key = (request.requester, request.idempotency_key)
            first = self._idempotency.get(key)
            if first is not None and (existing := self._lookup(first)) is not None:
                return existing, False
            self._idempotency[key] = request.id
        self._pending[request.id] = request
        if request.origin.run is not None:
            self._pending_of_run.setdefault(request.origin.run, {})[request.id] = None
        if request.expires_at is not None:
            heapq.heappush(self._expiry, (request.expires_at, request.id))
        self._append("created", request)
        return request, True

    def _is_closed(self, channel: str, requester: str | None) -> bool:
        return (channel, None) in self._closed or (requester is not None and (channel, requester) in self._closed)

    async def close_channel(self, channel: str, response: Response, *, requester: str | None = None) -> list[Request]:
        self._closed.add((channel, requester))
        targets = [
            r
            for r in self._pending.values()
            if r.origin.channel == channel and (requester is None or r.requester == requester)
        ]
        settled = [r.settle(Status.CANCELLED, response) for r in targets]
        return [r for r in settled if await self.settle(r) is not None]

    async def reopen_channel(self, channel: str, *, requester: str | None = None) -> bool:
        gone = {c for c in self._closed if c[0] == channel and (requester is None or c[1] == requester)}
        self._closed -= gone
        return bool(gone)

    def _lookup(self, request_id: str) -> Request | None:
        return self._pending.get(request_id) or self._unread.get(request_id) or self._settled.get(request_id)

    async def settle(self, request: Request) -> Request | None:
        return self.settle_now(request)

    def settle_now(self, request: Request) -> Request | None:
        request_id = request.id
        response = request.response
        if response is not None and (response.by is not None or response.grants) and request_id in self._pending:
            name = decided_in_the_name_of(request)
            if name is not None and self._all_revoked(name):
                raise refused_cut_off(request)
        if self._pending.pop(request_id, None) is None:
            return None
        status = request.status
        if status is Status.ANSWERED:
            unconsumed = self._unconsumed
            unconsumed[request_id] = request
            if len(unconsumed) > _UNCONSUMED:
                unconsumed.popitem(last=False)
        unread = self._unread
        unread[request_id] = request
        if len(unread) > _UNREAD:
            self._forget(unread.popitem(last=False)[1])
        self._append(_EVENT_TYPE[status], request)
        run_id = request.origin.run
        if run_id is not None:
            of_run = self._pending_of_run.get(run_id)
            if of_run is not None:
                of_run.pop(request_id, None)
                if not of_run:
                    del self._pending_of_run[run_id]
            self._mark_ready(run_id, request_id)
        return request

    def note_read(self, request_id: str) -> None:
        request = self._unread.pop(request_id, None)
        if request is not None:
            self._retain(request)

    def _retain(self, request: Request) -> None:
        if self.retention == 0:
            self._forget(request)
            return
        settled = self._settled
        settled[request.id] = request
        if len(settled) > self.retention:
            self._forget(settled.popitem(last=False)[1])  # one in, one out: the oldest read outcome

    def _forget(self, request: Request) -> None:
        """The retention lets `request` go: what is kept of it apart goes too, and what the
        event log and the consumable answers keep of it is kept as plain values."""
        request_id = request.id
        self._sizes.pop(request_id, None)
        logged = self._logged.get(request_id) is request
        unconsumed = self._unconsumed.get(request_id) is request
        if logged or unconsumed:
            archived = _archived(request)
            if logged:
                self._logged[request_id] = archived
            if unconsumed:
                self._unconsumed[request_id] = archived
        if self._claims:
            self._claims.pop(request_id, None)
        if self._released:
            self._released.discard(request_id)
        if self._views:
            self._views.pop(request_id, None)
        if request.idempotency_key is not None:
            key = (request.requester, request.idempotency_key)
            if self._idempotency.get(key) == request.id:
                del self._idempotency[key]

    async def settle_pending(
        self, status: Status, response: Response, *, channel: str | None = None, due: datetime | None = None
    ) -> list[Request]:
        if due is not None:
            ids = []
            while self._expiry and self._expiry[0][0] <= due:
                ids.append(heapq.heappop(self._expiry)[1])
            targets = [r for i in ids if (r := self._pending.get(i)) is not None]
        else:
            targets = [r for r in self._pending.values() if channel is None or r.origin.channel == channel]
        settled = [r.settle(status, response) for r in targets]
        return [r for r in settled if await self.settle(r) is not None]

    async def consume(self, request_id: str, by: str | None, at: datetime) -> bool:
        request = self._unconsumed.pop(request_id, None)
        if request is None:
            return False
        self._last_event += 1
        self._log((self._last_event, "consumed", at, request_id, None, None), request)
        return True

    async def release(self, request_id: str, at: datetime) -> bool:
        request = self._lookup(request_id)
        if request is None or request_id in self._released:
            return False
        if not (request.detached or request.status is Status.PENDING):
            return False
        self._released.add(request_id)
        return True

    def requester_of(self, requester: str | None) -> str | None:
        return requester

    def _append_about(self, type_: str, request: Request, at: datetime, data: Mapping[str, Any]) -> None:
        self._last_event += 1
        self._log((self._last_event, type_, at, request.id, dict(data), None), request)

    async def claim(self, request_id: str, by: str, at: datetime) -> Claim | None:
        held = self._claims.get(request_id)
        request = self._pending.get(request_id)
        if held is not None or request is None:
            return held
        self._claims[request_id] = claim = Claim(request_id, by, at)
        self._append_about("claimed", request, at, {"by": by})
        return claim

    async def unclaim(self, request_id: str, by: str | None, at: datetime) -> Claim | None:
        held = self._claims.get(request_id)
        request = self._pending.get(request_id)
        if held is None or request is None or (by is not None and held.by != by):
            return None
        del self._claims[request_id]
        self._append_about("unclaimed", request, at, {"by": held.by})
        return held

    async def claims(
        self, request_ids: Sequence[str], *, involving: str | None = None, teams: Collection[str] = ()
    ) -> Mapping[str, Claim]:
        def seen(request_id: str) -> bool:
            request = self._lookup(request_id)
            return request is not None and (involving in (request.to, request.requester) or request.to in teams)

        return {
            i: claim
            for i in request_ids
            if (claim := self._claims.get(i)) is not None and (involving is None or seen(i))
        }

    async def note_viewed(self, request_id: str, by: str, at: datetime) -> bool:
        request = self._lookup(request_id)
        seen = self._views.setdefault(request_id, set()) if request is not None else None
        if seen is None or request is None or by in seen:
            return False
        seen.add(by)
        self._append_about("viewed", request, at, {"by": by})
        return True

    async def next_expiry(self) -> datetime | None:
        while self._expiry and self._expiry[0][1] not in self._pending:
            heapq.heappop(self._expiry)
        return self._expiry[0][0] if self._expiry else None

    async def get(self, request_id: str, *, fresh: bool = True) -> Request | None:
        return self._pending.get(request_id) or self._unread.get(request_id) or self._settled.get(request_id)

    def get_now(self, request_id: str) -> Request | None:
        return self._pending.get(request_id) or self._unread.get(request_id) or self._settled.get(request_id)

    async def get_by_key(self, requester: str | None, key: str) -> Request | None:
        first = self._idempotency.get((requester, key))
        return None if first is None else self._lookup(first)

    def _matching(self, query: Query) -> list[Request]:
        rows = [
            r for r in (*self._pending.values(), *self._unread.values(), *self._settled.values()) if _matches(r, query)
        ]
        rows.sort(key=lambda r: r.id, reverse=query.order == "desc")
        if query.after is not None:
            after = query.after
            rows = [r for r in rows if (r.id < after if query.order == "desc" else r.id > after)]
        return rows[: query.limit]

    async def list(self, query: Query) -> Listed[Request]:
        # Cut where the SQL stores cut: by the size of the JSON they would keep (the server
        # still writes every request of a page out as JSON).
        rows = self._matching(query)
        budget = PageBudget()
        for taken, request in enumerate(rows):
            if not budget.takes(self._size(request.id, request)):
                return Listed(rows[:taken], cut=True)
        return Listed(rows)

    def _size(self, request_id: str, kept: Request | _Archive) -> int:
        """`stored_size` of a request's document and response, as a SQL store keeps them,
        for the form `kept` holds it in (a listed request, or the event log's entry for
        it): remembered for that form, so a request is encoded once."""
        known = self._sizes.get(request_id)
        if known is not None and known[0] is kept:
            return known[1]
        request = _restored(kept)
        size = stored_size(encode_document(request_to_dict(request.as_created())))
        if request.response is not None:
            size += stored_size(encode_document(response_to_dict(request.response)))
        self._sizes[request_id] = (kept, size)
        return size

    def _carried(self, entry: _Entry) -> int:
        """What a logged event counts on a page: the size of the request it carries (as
        it is now, as a SQL store reads it with the event), or nothing."""
        request_id = entry[3]
        return 0 if request_id is None else self._size(request_id, self._logged[request_id])

    async def outlines(self, query: Query, now: datetime) -> Sequence[Outline]:
        return [_outline(r, now) for r in self._matching(query)]

    async def figures(self, pending: Query, settled: Query, now: datetime, teams: Collection[str]) -> Figures:
        return count(await self.outlines(pending, now), await self.outlines(settled, now), teams=teams)

    async def events(self, after: int = 0, limit: int = 500) -> Listed[Event]:
        if not self._events or after >= self._last_event:
            return Listed([])
        start = max(0, after - self._events[0][0] + 1)
        out: list[Event] = []
        budget = PageBudget()
        for entry in itertools.islice(self._events, start, start + limit):
            if not budget.takes(self._carried(entry)):
                return Listed(out, cut=True)
            out.append(self._event(entry))
        return Listed(out)

    async def find_events(self, query: EventQuery) -> Listed[Event]:
        # In process, the filters run over the events after the cursor: nothing to index.
        # A page is cut where a SQL store cuts it: by the size of the requests its events
        # carry (the server writes each one out with its event).
        out: list[Event] = []
        if not self._events or query.limit <= 0 or query.after >= self._last_event:
            return Listed(out)
        start = max(0, query.after - self._events[0][0] + 1)
        budget = PageBudget()
        for entry in itertools.islice(self._events, start, None):
            if query.until is not None and entry[0] > query.until:
                break
            if _event_matches(entry, _parties(self._logged.get(entry[3])) if entry[3] is not None else None, query):
                if not budget.takes(self._carried(entry)):
                    return Listed(out, cut=True)
                out.append(self._event(entry))
                if len(out) == query.limit:
                    break
        return Listed(out)

    async def changes(self, after: int = 0, limit: int = 500) -> Sequence[tuple[int, str, str | None]]:
        if not self._events or after >= self._last_event:
            return []
        start = max(0, after - self._events[0][0] + 1)
        return [(e[0], e[1], e[3]) for e in itertools.islice(self._events, start, start + limit)]

    async def last_event_id(self) -> int:
        return self._last_event

    async def check_schema(self) -> None:
        pass  # no other version can reach this process's memory

    async def save_principal(self, principal: Principal) -> None:
        if principal.kind == "team":
            await self.save_team(principal.name)
            return
        if principal.name in self._teams:
            raise ValueError(f"{principal.name!r} is a team")
        self._principals[principal.name] = principal

    async def get_principal(self, name: str) -> Principal | None:
        return self._principals.get(name) or (Principal(name, "team") if name in self._teams else None)

    async def list_principals(self) -> Sequence[Principal]:
        teams = [Principal(name, "team") for name in self._teams]
        return sorted([*self._principals.values(), *teams], key=lambda p: p.name)

    async def save_team(self, team: str, members: Sequence[str] = ()) -> None:
        Principal(team, "team")  # the name's rules
        if team in self._principals:
            raise ValueError(f"{team!r} is a person or an agent, not a team")
        for member in members:
            known = self._principals.get(member)
            if known is None or known.kind != "human":
                raise ValueError(f"{member!r} is no person here: a team's members are people")
        self._teams.setdefault(team, set()).update(members)

    async def remove_team_members(self, team: str, members: Sequence[str]) -> int:
        current = self._teams.get(team, set())
        gone = current & set(members)
        current -= gone
        if gone:
            await self.append_event(TEAM_LEFT, {"team": team, "principals": sorted(gone)})
        return len(gone)

    async def delete_team(self, team: str) -> bool:
        members = self._teams.pop(team, None)
        if members:
            await self.append_event(TEAM_LEFT, {"team": team, "principals": sorted(members)})
        return members is not None

    async def team_members(self, team: str) -> Sequence[str] | None:
        members = self._teams.get(team)
        return None if members is None else sorted(members)

    async def teams_of(self, name: str) -> frozenset[str]:
        return frozenset(team for team, members in self._teams.items() if name in members)

    async def save_token(self, token: IssuedToken) -> None:
        if token.principal not in self._principals:
            raise ValueError(f"no principal named {token.principal!r}")
        self._tokens[token.hash] = token

    async def principal_for_token(self, token_hash: str) -> Principal | None:
        live = await self.live_token(token_hash)
        return live.principal if live is not None else None

    async def live_token(self, token_hash: str) -> LiveToken | None:
        token = self._tokens.get(token_hash)
        if token is None or token.id in self._revoked:
            return None
        principal = self._principals.get(token.principal)
        return LiveToken(token.id, principal) if principal is not None else None

    async def list_tokens(self) -> Sequence[TokenInfo]:
        live = (
            TokenInfo(t.id, t.principal, t.created_at, t.for_session)
            for t in self._tokens.values()
            if t.id not in self._revoked
        )
        return sorted(live, key=lambda t: (t.principal, t.created_at, t.id))

    async def tokens_all_revoked(self, principal: str) -> bool:
        return self._all_revoked(principal)

    def _all_revoked(self, principal: str) -> bool:
        own = [t.id for t in self._tokens.values() if t.principal == principal and not t.for_session]
        return bool(own) and all(i in self._revoked for i in own)

    async def cut_off(self, names: Collection[str]) -> frozenset[str]:
        wanted = set(names)
        own: dict[str, bool] = {}  # each name's tokens (not a session's): all revoked so far
        for t in self._tokens.values():
            if t.principal in wanted and not t.for_session:
                own[t.principal] = own.get(t.principal, True) and t.id in self._revoked
        return frozenset(name for name, revoked in own.items() if revoked)

    async def revoke_tokens(self, *, token_id: str | None = None, principal: str | None = None) -> int:
        hits = sorted(
            (t.id, t.principal)
            for t in self._tokens.values()
            if t.id not in self._revoked and (t.id == token_id or (principal is not None and t.principal == principal))
        )
        if not hits:
            return 0
        ids = [i for i, _ in hits]
        self._revoked.update(ids)
        for key, (_, token) in list(self._sessions.items()):
            if token in self._revoked:
                del self._sessions[key]
        data = {"principal": hits[0][1], "tokens": ids, "all": principal is not None}
        await self.append_event("token_revoked", data)
        return len(hits)

    async def start_session(self, token_hash: str, session: IssuedSession) -> WebSession | None:
        live = await self.live_token(token_hash)
        if live is None:
            return None
        for key, (old, token_id) in list(self._sessions.items()):
            if old.expires_at <= session.created_at:
                del self._sessions[key]
                self._delete_session_token(token_id)
        self._sessions[session.hash] = (session, live.id)
        return WebSession(session.id, live.principal, live.id, session.csrf, session.expires_at)

    async def get_session(self, session_hash: str, now: datetime) -> WebSession | None:
        found = self._sessions.get(session_hash)
        if found is None or found[0].expires_at <= now or found[1] in self._revoked:
            return None
        session, token_id = found
        token = next((t for t in self._tokens.values() if t.id == token_id), None)
        principal = self._principals.get(token.principal) if token is not None else None
        if principal is None:
            return None
        return WebSession(session.id, principal, token_id, session.csrf, session.expires_at)

    async def end_session(self, session_hash: str) -> WebSession | None:
        ended = await self.get_session(session_hash, datetime.min.replace(tzinfo=UTC))
        gone = self._sessions.pop(session_hash, None)
        if gone is not None:
            self._delete_session_token(gone[1])
        if gone is None or ended is None:
            return None
        await self.append_event("signed_out", {"principal": ended.principal.name, "session": ended.id})
        return ended

    def _delete_session_token(self, token_id: str) -> None:
        """Delete the token of this id if it was made for a web session and has none left:
        nobody holds its secret."""
        if any(token == token_id for _, token in self._sessions.values()):
            return
        for key, token in list(self._tokens.items()):
            if token.id == token_id and token.for_session:
                del self._tokens[key]
                self._revoked.discard(token_id)

    async def save_signin_link(self, link: IssuedSignInLink) -> None:
        if link.principal not in self._principals:
            raise ValueError(f"no principal named {link.principal!r}")
        for key, (old, _) in list(self._signin_links.items()):
            if old.expires_at <= link.created_at:
                del self._signin_links[key]
        self._signin_links[link.hash] = (link, False)

    async def use_signin_link(self, link_hash: str, now: datetime) -> Principal | None:
        found = self._signin_links.get(link_hash)
        if found is None or found[1] or found[0].expires_at <= now:
            return None
        self._signin_links[link_hash] = (found[0], True)
        return self._principals.get(found[0].principal)

    # -- runs ------------------------------------------------------------------------------

    def _append_run(self, type_: str, run: Run, at: datetime | None = None) -> None:
        self._last_event += 1
        self._log((self._last_event, type_, at or run.updated_at, None, run_event_data(run), None))

    def _mark_ready(self, run_id: str, request_id: str) -> None:
        run = self._runs.get(run_id)
        if run is None or not run.status.waiting or run.ready or request_id not in run.waiting_on:
            return
        if any(w in self._pending for w in run.waiting_on):
            return
        self._put_run(evolve(run, ready=True))

    async def insert_run(self, run: Run, *, exclusive: bool = False) -> tuple[Run, bool]:
        existing = self._runs.get(run.id)
        if existing is not None:
            return existing, False
        if exclusive:  # looked at and stored with no await between: nothing runs in between
            busy = self._unended_on(run)
            if busy is not None:
                return busy, False
        self._put_run(run)
        if run.expires_at is not None:
            heapq.heappush(self._run_expiry, (run.expires_at, run.id))
        self._append_run("run_started", run)
        return run, True

    async def restart_run(self, run_id: str, *, expires_at: datetime) -> Run | None:
        run = self._runs.get(run_id)
        if run is None or run.status is not RunStatus.RUNNING or run.worker is not None:
            return None
        run = evolve(run, expires_at=expires_at)
        self._put_run(run)
        heapq.heappush(self._run_expiry, (expires_at, run_id))
        return run

    def _unended_on(self, run: Run) -> Run | None:
        """The newest run of `run`'s agent and requester on its session that has not ended
        (no requester and an empty one alike, as the SQL stores' index has them)."""
        if run.session is None:
            return None  # (as `session = NULL` in SQL: no run holds no session)
        held = self._unended_runs.get((run.agent, run.session, run.requester or ""), {})
        return max((self._runs[r] for r in held), key=lambda r: (r.created_at, r.id), default=None)

    async def start_parked(
        self, run: Run, requests: Sequence[Request], *, state: Any, status: RunStatus, expires_at: datetime
    ) -> tuple[Run, bool]:
        existing = self._runs.get(run.id)
        if existing is not None:
            return existing, False
        for request in requests:  # refused before anything is stored
            channel = request.origin.channel
            if channel is not None and self._closed and self._is_closed(channel, request.requester):
                raise Closed(None, f"channel {channel!r} is closed")
        await self.insert_run(run)
        for request in requests:
            await self.insert(request)
        ids = [request.id for request in requests]
        parked = await self.park_run(
            run.id, state=state, waiting_on=ids, status=status, expires_at=expires_at, at=run.created_at
        )
        assert parked is not None
        return parked, True

    async def get_run(self, run_id: str) -> Run | None:
        return self._runs.get(run_id)

    async def list_runs(self, query: RunQuery) -> Sequence[Run]:
        rows = [r for r in self._runs.values() if self._run_matches(r, query)]
        rows.sort(key=lambda r: (r.created_at, r.id), reverse=query.order == "desc")
        if query.after is not None:
            after = query.after
            rows = [
                r
                for r in rows
                if ((r.created_at, r.id) < after if query.order == "desc" else (r.created_at, r.id) > after)
            ]
        return [evolve(r, state=None) for r in rows[: query.limit]]

    def _run_matches(self, run: Run, q: RunQuery) -> bool:
        if q.involving is not None and not self._involves(run, q.involving, q.teams):
            return False
        return (
            (q.agent is None or run.agent == q.agent)
            and (q.session is None or run.session == q.session)
            and (q.status is None or run.status == q.status)
            and (q.requester is None or run.requester == q.requester)
        )

    def _involves(self, run: Run, name: str, teams: tuple[str, ...]) -> bool:
        """Whether `name` started the run, owns the agent that did, or is asked in it."""
        starter = self._principals.get(run.requester) if run.requester is not None else None
        return (
            run.requester == name
            or (starter is not None and starter.owner == name)
            or any(r.to == name or r.to in teams for r in self._requests_of_run(run.id))
        )

    def _requests_of_run(self, run_id: str) -> builtins.list[Request]:
        return [
            r
            for r in (*self._pending.values(), *self._unread.values(), *self._settled.values())
            if r.origin.run == run_id
        ]

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
        run = self._runs.get(run_id)
        # Without `worker`, only a run no worker holds: a worker's claim is not taken from it.
        if run is None or run.status is not RunStatus.RUNNING or run.worker != worker:
            return None
        ready = not any(w in self._pending for w in waiting_on)
        run = evolve(
            run,
            status=status,
            state=state,
            waiting_on=tuple(waiting_on),
            expires_at=expires_at,
            updated_at=at,
            ready=ready,
            worker=None,
            lease_expires_at=None,
        )
        self._put_run(run)
        heapq.heappush(self._run_expiry, (expires_at, run_id))
        self._append_run("input_requested", run)
        return run

    async def claim_run(
        self,
        agents: Sequence[str] | None,
        *,
        worker: str,
        lease_expires_at: datetime,
        at: datetime,
        requester: str | None = None,
    ) -> Run | None:
        wanted = None if agents is None else set(agents)
        best: Run | None = None
        for run in self._claimable(at):
            if (wanted is not None and run.agent not in wanted) or (
                requester is not None and run.requester != requester
            ):
                continue
            if best is None or (run.updated_at, run.id) < (best.updated_at, best.id):
                best = run
        if best is None:
            return None
        return self._claim(best, worker, lease_expires_at, at)

    def _put_run(self, run: Run) -> None:
        before = self._runs.get(run.id)
        self._runs[run.id] = run
        if run.session is not None:  # (a run's agent, session and requester never change)
            key = (run.agent, run.session, run.requester or "")
            if not run.status.ended:
                self._unended_runs.setdefault(key, {})[run.id] = None
            elif (unended := self._unended_runs.get(key)) is not None:
                unended.pop(run.id, None)
                if not unended:
                    del self._unended_runs[key]
        if run.status.waiting and run.ready:
            self._ready_runs[run.id] = None
        else:
            self._ready_runs.pop(run.id, None)
        lease = run.lease_expires_at
        if run.status is RunStatus.RUNNING and lease is not None:
            # A running run has an entry no later than its lease. A renewal (a later lease)
            # adds none: the earlier entry, once due, moves on to the lease then current.
            held = before.lease_expires_at if before is not None and before.status is RunStatus.RUNNING else None
            if held is None or lease < held:
                heapq.heappush(self._leases, (lease, run.id))

    def _claimable(self, at: datetime) -> builtins.list[Run]:
        """The runs a claim at `at` may take: the ready ones, and the running ones whose
        lease has run out (their worker died)."""
        found = [self._runs[run_id] for run_id in self._ready_runs]
        leases = self._leases
        lapsed: dict[str, datetime] = {}
        while leases and leases[0][0] <= at:
            due, run_id = heapq.heappop(leases)
            run = self._runs.get(run_id)
            if run is None or run.status is not RunStatus.RUNNING or run.lease_expires_at is None:
                continue  # ended or parked since: nothing to look at
            if run.lease_expires_at == due:
                lapsed[run_id] = due  # still held by that lease: claimable, kept until taken
            elif run.lease_expires_at > due and run_id not in lapsed:
                heapq.heappush(leases, (run.lease_expires_at, run_id))  # renewed: its lease now
        for run_id, due in lapsed.items():
            heapq.heappush(leases, (due, run_id))
            found.append(self._runs[run_id])
        return found

    def _claim(self, best: Run, worker: str, lease_expires_at: datetime, at: datetime) -> Run:
        run = evolve(
            best,
            status=RunStatus.RUNNING,
            ready=False,
            expires_at=None,
            worker=worker,
            lease_expires_at=lease_expires_at,
            attempts=best.attempts + 1,
            updated_at=at,
        )
        self._put_run(run)
        self._append_run("run_claimed", run)
        return run

    async def settle_claiming(self, request: Request, claim: RunClaim) -> tuple[Request | None, Run | None]:
        stored = await self.settle(request)
        run = self._runs.get(request.origin.run or "") if stored is not None else None
        if run is None or not (run.status.waiting and run.ready) or not claim.takes(run):
            return stored, None
        return stored, self._claim(run, claim.worker, claim.lease_expires_at, claim.at)

    async def renew_lease(self, run_id: str, *, worker: str, lease_expires_at: datetime) -> bool:
        run = self._runs.get(run_id)
        if run is None or run.status is not RunStatus.RUNNING or run.worker != worker:
            return False
        self._put_run(evolve(run, lease_expires_at=lease_expires_at))
        return True

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
        run = self._runs.get(run_id)
        if run is None or not may_end(run, status, worker, None):
            return None, []
        run = evolve(
            run,
            status=status,
            result=result,
            error=error,
            terminal_reason=terminal_reason,
            updated_at=at,
            expires_at=None,
            ready=False,
            worker=None,
            lease_expires_at=None,
        )
        self._put_run(run)  # ended before its requests are withdrawn, so none makes it ready
        cancelled: builtins.list[Request] = []
        if withdraw is not None:
            for request in [self._pending[i] for i in self._pending_of_run.get(run_id, ())]:
                if (stored := await self.settle(request.settle(Status.CANCELLED, withdraw))) is not None:
                    cancelled.append(stored)
        self._append_run(f"run_{status.value}", run)
        return run, cancelled

    async def expire_runs(
        self, due: datetime, response: Response, *, abandoned: Response | None = None
    ) -> builtins.list[tuple[Run, builtins.list[Request]]]:
        out = []
        kept = []  # running runs left alone (no `abandoned` given): their entries stay
        while self._run_expiry and self._run_expiry[0][0] <= due:
            deadline, run_id = heapq.heappop(self._run_expiry)
            run = self._runs.get(run_id)
            if run is None or run.expires_at != deadline:
                continue
            if expirable(run, abandoned=False):
                reason, withdraw = "interaction_timeout", response
            elif expirable(run, abandoned=True):
                if abandoned is None:
                    kept.append((deadline, run_id))
                    continue
                reason, withdraw = "abandoned", abandoned
            else:
                continue
            ended, cancelled = await self.end_run(
                run_id, RunStatus.CANCELLED, at=due, terminal_reason=reason, withdraw=withdraw
            )
            if ended is not None:
                out.append((ended, cancelled))
        for entry in kept:
            heapq.heappush(self._run_expiry, entry)
        return out

    async def next_run_expiry(self) -> datetime | None:
        while self._run_expiry:
            deadline, run_id = self._run_expiry[0]
            run = self._runs.get(run_id)
            if (
                run is not None
                and run.expires_at == deadline
                and (expirable(run, abandoned=False) or expirable(run, abandoned=True))
            ):
                return deadline
            heapq.heappop(self._run_expiry)
        return None

    # -- follow-up messages ------------------------------------------------------------------

    def _append_followup(self, type_: str, followup: Followup, run: Run, at: datetime) -> None:
        self._last_event += 1
        data = followup_event_data(followup, agent=run.agent, session=run.session, to=run.requester)
        self._log((self._last_event, type_, at, None, data, None))

    async def enqueue_followup(self, followup: Followup, *, limit: int) -> Followup | None:
        run = self._runs.get(followup.run)
        held = self._followups.setdefault(followup.run, {})
        if run is None or run.status.ended or len(held) >= limit or followup.id in held:
            return None
        held[followup.id] = followup
        self._append_followup("followup_queued", followup, run, followup.queued_at)
        return followup

    async def list_followups(self, run_id: str) -> Sequence[Followup]:
        return builtins.list(self._followups.get(run_id, {}).values())

    async def withdraw_followup(self, run_id: str, followup_id: str, *, at: datetime) -> Followup | None:
        run = self._runs.get(run_id)
        held = self._followups.get(run_id, {})
        if run is None or run.status.ended or followup_id not in held:
            return None
        followup = held.pop(followup_id)
        self._append_followup("followup_withdrawn", followup, run, at)
        return followup

    async def claim_followups(
        self, run_id: str, *, at: datetime, worker: str | None = None
    ) -> Sequence[Followup] | None:
        run = self._runs.get(run_id)
        if run is None or run.status is not RunStatus.RUNNING:
            return []
        if held_elsewhere(run.status, run.worker, worker):
            return None
        taken = builtins.list(self._followups.pop(run_id, {}).values())
        for followup in taken:
            self._append_followup("followup_replayed", followup, run, at)
        return taken

    # -- grants -----------------------------------------------------------------------------

    async def settle_granting(self, request: Request) -> Request | None:
        if request.id not in self._pending:
            return None
        settled = await self.settle(request)
        for grant in request.response.grants if request.response is not None else ():
            await self.give_grant(grant)
        return settled

    # -- approval policies ---------------------------------------------------------------

    async def put_policy(self, policy: ApprovalPolicy, at: datetime, by: str | None) -> ApprovalPolicy:
        key = (policy.agent, policy.server)
        before = self._policies.get(key)
        stored = with_version(policy, 1 if before is None else before.version + 1, at, by)
        self._policies[key] = stored
        await self.append_event("approval_policy_set", policy_event_data(stored, by))
        return stored

    async def get_policy(self, agent: str, server: str) -> ApprovalPolicy | None:
        return self._policies.get((agent, server))

    async def list_policies(self, agent: str | None = None) -> Sequence[ApprovalPolicy]:
        return [p for key, p in sorted(self._policies.items()) if agent is None or key[0] == agent]

    async def delete_policy(self, agent: str, server: str, by: str | None, at: datetime) -> ApprovalPolicy | None:
        gone = self._policies.pop((agent, server), None)
        if gone is not None:
            await self.append_event("approval_policy_deleted", policy_event_data(gone, by))
        return gone

    async def give_grant(self, grant: IssuedGrant) -> None:
        self._grants[grant.id] = grant
        await self.append_event("granted", grant_event_data(grant))

    async def get_grant(self, grant_id: str) -> IssuedGrant | None:
        return self._grants.get(grant_id)

    async def list_grants(self, query: GrantQuery) -> Sequence[IssuedGrant]:
        found = [g for g in self._grants.values() if _grant_matches(g, query)]
        if query.live_at is not None:  # (a grant of a person cut off is live no more, while they are)
            cut = await self.cut_off({g.issuer for g in found if g.issuer is not None})
            found = [g for g in found if g.issuer not in cut]
        return sorted(found, key=lambda g: g.id, reverse=True)[: query.limit]

    async def revoke_grant(self, grant_id: str, by: str | None, at: datetime) -> IssuedGrant | None:
        grant = self._grants.get(grant_id)
        if grant is None or grant.revoked_at is not None:
            return None
        revoked = replace(grant, revoked_at=at, revoked_by=by)
        self._grants[grant_id] = revoked
        await self.append_event("grant_revoked", grant_event_data(revoked))
        return revoked

    # -- the outbox ------------------------------------------------------------------------

    async def load_setting(self, name: str) -> Any | None:
        return self._settings.get(name)

    async def save_setting(self, name: str, value: Any) -> None:
        self._settings[name] = value

    async def claim_notices(self, owner: str, now: datetime, lease: float, limit: int = 100) -> Sequence[Notice]:
        until = now + timedelta(seconds=lease)
        out: list[Notice] = []
        for notice_id, entry in self._notices.items():
            if len(out) == limit:
                break
            held = self._notice_leases.get(notice_id)
            if held is not None and held[0] != owner and held[1] > now:
                continue
            self._notice_leases[notice_id] = (owner, until)
            event_id, type_, at, request_id, _, recipient = entry
            assert request_id is not None  # only a request's events make notices
            out.append(Notice(notice_id, event_id, type_, request_id, recipient, at))
        return out

    async def route_notice(self, notice: Notice, deliveries: Sequence[Delivery], owner: str, now: datetime) -> int:
        held = self._notice_leases.get(notice.id)
        if notice.id not in self._notices or held is None or held[0] != owner:
            return 0
        added = 0
        for delivery in deliveries:
            if delivery.id not in self._deliveries:
                self._deliveries[delivery.id] = (delivery, None, None)
                added += 1
        del self._notices[notice.id]  # routed: only unrouted notices are kept here
        del self._notice_leases[notice.id]
        return added

    async def claim_deliveries(
        self, owner: str, now: datetime, lease: float, limit: int = 100, *, per_channel: int | None = None
    ) -> Sequence[Delivery]:
        until = now + timedelta(seconds=lease)
        room: dict[str, int] = {}  # by channel, how many more `owner` may hold (per_channel)
        if per_channel is not None:
            for d, holder, held in self._deliveries.values():
                if holder == owner and held is not None and held > now:
                    room[d.channel] = room.get(d.channel, per_channel) - 1
        due: list[Delivery] = []
        for d in sorted(
            (
                d
                for d, holder, held in self._deliveries.values()
                if d.status == "pending" and d.due_at <= now and (holder is None or held is None or held <= now)
            ),
            key=lambda d: (d.due_at, d.id),
        ):
            if len(due) == limit:
                break
            if per_channel is not None:
                left = room.get(d.channel, per_channel)
                if left <= 0:
                    continue
                room[d.channel] = left - 1
            due.append(d)
        for delivery in due:
            self._deliveries[delivery.id] = (delivery, owner, until)
        return due

    async def finish_delivery(self, delivery: Delivery, owner: str) -> bool:
        found = self._deliveries.get(delivery.id)
        if found is None or found[1] != owner:
            return False
        self._deliveries[delivery.id] = (delivery, None, None)
        if delivery.status in ("delivered", "skipped"):
            self._finished.append(delivery.id)
            if len(self._finished) > _FINISHED:  # what stays in process is bounded, as events are
                self._deliveries.pop(self._finished.popleft(), None)
        return True

    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        found = self._deliveries.get(delivery_id)
        return found[0] if found is not None else None

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
        rows = sorted(
            (
                d
                for d, _, _ in self._deliveries.values()
                if (request_id is None or d.request_id == request_id)
                and (status is None or d.status == status)
                and self._to(d, recipient, teams)
                and (after is None or d.id > after)
            ),
            key=lambda d: d.id,
        )
        return rows[:limit]

    async def list_dead_letters(
        self,
        *,
        recipient: str | None = None,
        teams: Sequence[str] = (),
        before: tuple[datetime, str] | None = None,
        limit: int = 100,
    ) -> Sequence[Delivery]:
        rows = sorted(
            (
                d
                for d, _, _ in self._deliveries.values()
                if d.status == "dead"
                and self._to(d, recipient, teams)
                and (before is None or (d.due_at, d.id) < before)
            ),
            key=lambda d: (d.due_at, d.id),
            reverse=True,
        )
        return rows[:limit]

    def _to(self, delivery: Delivery, recipient: str | None, teams: Sequence[str]) -> bool:
        """Whether a delivery is to `recipient` (anyone: None) or, with `teams`, of a
        request addressed to one of them (`list_deliveries`)."""
        if recipient is None or delivery.recipient == recipient:
            return True
        request = self.get_now(delivery.request_id) if teams else None
        return request is not None and request.to in teams and delivery.kind != "escalation"

    async def retry_delivery(self, delivery_id: str, now: datetime) -> Delivery | None:
        found = self._deliveries.get(delivery_id)
        if found is None or found[0].status != "dead":
            return None
        again = found[0].with_state(status="pending", attempts=0, due_at=now)
        self._deliveries[delivery_id] = (again, None, None)
        return again

    async def next_outbox_due(self) -> datetime | None:
        if self._notices:
            return min(entry[2] for entry in self._notices.values())
        due = [d.due_at for d, _, _ in self._deliveries.values() if d.status == "pending"]
        return min(due) if due else None

    async def use_answer_link(self, use: LinkUse, expires_at: datetime) -> tuple[LinkUse, bool]:
        for link, (_, until) in list(self._link_uses.items()):
            if until <= use.at:
                del self._link_uses[link]
        earlier = self._link_uses.get(use.link)
        if earlier is not None:
            return earlier[0], False
        self._link_uses[use.link] = (use, expires_at)
        return use, True

    async def answer_link_use(self, link: str) -> LinkUse | None:
        found = self._link_uses.get(link)
        return found[0] if found is not None else None

    async def key_fingerprint(self) -> str | None:
        return self._key_fingerprint

    async def keep_key_fingerprint(self, fingerprint: str, at: datetime) -> str:
        if self._key_fingerprint is None:
            self._key_fingerprint = fingerprint
        return self._key_fingerprint

    async def replace_key_fingerprint(self, fingerprint: str | None, at: datetime) -> None:
        self._key_fingerprint = fingerprint

    async def grant_key_id(self) -> GrantKeyId | None:
        return self._grant_key_id

    async def keep_grant_key_id(self, key: GrantKeyId, at: datetime) -> GrantKeyId:
        if self._grant_key_id is None:
            self._grant_key_id = key
        return self._grant_key_id

    async def replace_grant_key_id(self, key: GrantKeyId | None, at: datetime) -> None:
        self._grant_key_id = key


_NOTICE_TYPES = frozenset(NOTICE_TYPES)
_EVENT_TYPE = {status: status.value for status in Status}  # a settlement's event type, as a plain str

_Entry = tuple[int, str, datetime, str | None, Mapping[str, Any] | None, str | None]
"""An event as the log keeps it: id, type, time, request id (its request is kept apart), data,
and, for an event that makes a notice (`_NOTICE_TYPES`), whom its request is to: the notice is
this same entry, and may outlive the log's copy of the request."""

_Archive = tuple[Any, ...]
"""A request as plain values (`_archived`)."""
_Parties = tuple[str | None, str | None, str | None, str | None]
"""Whom a logged request concerns: its recipient, requester, session and run."""

_ASKS_AT = 14  # where the asks begin in an archive (see `_archived`)


def _archived(request: Request) -> _Archive:
    """`request` as one flat tuple of plain values, which the garbage collector stops
    tracking: a busy process's event log keeps tens of thousands of requests, and each
    object it tracks is walked at every full collection. Flat, because nested tuples are
    let go a level per collection, and a dict never is. A part that is not a plain value
    (an origin, a context, an ask that is not `plain`, answers holding lists, issued
    grants) is kept as it is, and keeps the tuple tracked: still one object for the
    request and its response.

    The layout: the request's own fields (its status as its value, its origin None when it
    has none), the number of asks, each ask (a plain one as its type, how many fields and
    the fields), then, when settled, the response's fields, the number of answers and each
    answer's id and value."""
    origin = request.origin
    asks = request.asks
    flat: list[Any] = [
        request.id,
        request.kind,
        request.created_at,
        _EVENT_TYPE[request.status],
        request.title,
        request.details,
        request.context,
        request.to,
        request.requester,
        None if origin is NO_ORIGIN else origin,
        request.expires_at,
        request.idempotency_key,
        request.detached,
        len(asks),
    ]
    for ask in asks:
        plain = ask.plain()
        if plain is None:
            flat.append(ask)
        else:
            flat += (ask.type, len(plain))
            flat += plain
    response = request.response
    if response is not None:
        answers = response.answers
        flat += (response.at, response.by, response.via, response.reason, response.cause, response.grants, len(answers))
        for item in answers.items():
            flat += item
    return tuple(flat)


def _restored(kept: Request | _Archive) -> Request:
    """The request `_archived` kept (equal to the one it was given)."""
    if not isinstance(kept, tuple):
        return kept
    request_id, kind, created_at, status, title, details, context, to, requester, origin, expires_at, key, *rest = kept
    detached, n = rest[0], rest[1]
    i = _ASKS_AT
    asks: list[Ask] = []
    for _ in range(n):
        item = kept[i]
        if isinstance(item, str):
            width = kept[i + 1]
            asks.append(ASK_TYPES[item](*kept[i + 2 : i + 2 + width]))
            i += 2 + width
        else:
            asks.append(item)
            i += 1
    response = None
    if i < len(kept):
        at, by, via, reason, cause, grants, count = kept[i : i + 7]
        i += 7
        answers = {kept[j]: kept[j + 1] for j in range(i, i + 2 * count, 2)}
        response = Response._make(at, answers, by, via, reason, cause, grants)
    return Request._make(
        request_id,
        kind,
        tuple(asks),
        created_at,
        Status(status),
        title,
        details,
        context,
        to,
        requester,
        NO_ORIGIN if origin is None else origin,
        expires_at,
        key,
        response,
        detached,
    )


def _parties(kept: Request | _Archive | None) -> _Parties | None:
    if kept is None:
        return None
    if isinstance(kept, tuple):
        to, requester, origin = kept[7], kept[8], kept[9] or NO_ORIGIN
    else:
        to, requester, origin = kept.to, kept.requester, kept.origin
    return to, requester, origin.session, origin.run


def _grant_matches(g: IssuedGrant, q: GrantQuery) -> bool:
    return (
        (q.audience is None or g.audience == q.audience)
        and (q.issuer is None or g.issuer == q.issuer)
        and (q.request is None or g.request_id == q.request)
        and (q.requests is None or g.request_id in q.requests)
        and (q.with_ is None or g.with_ == q.with_)
        and (q.can is None or g.can == q.can)
        and (q.live_at is None or g.live(q.live_at))
        and (q.after is None or g.id < q.after)
    )


def _outline(r: Request, now: datetime) -> Outline:
    response = r.response
    took, by = (None, None) if response is None else ((response.at - r.created_at).total_seconds(), response.by)
    return Outline(r.status, r.to, r.origin.agent or r.requester, (now - r.created_at).total_seconds(), took, by)


def _matches(r: Request, q: Query) -> bool:
    o = r.origin
    return (
        (q.status is None or r.status == q.status)
        and (q.recipient is None or r.to == q.recipient or (r.to is not None and r.to in q.teams))
        and (q.requester is None or r.requester == q.requester)
        and (q.kind is None or r.kind == q.kind)
        and (q.session is None or o.session == q.session)
        and (q.channel is None or o.channel == q.channel)
        and (q.agent is None or o.agent == q.agent)
        and (q.run is None or o.run == q.run)
        and (not q.settled or r.status is not Status.PENDING)
        and (q.since is None or r.created_at >= q.since)
        and (q.until is None or r.created_at < q.until)
        and (not q.words or _has_words(r, q.words))
    )


def _has_words(r: Request, words: Sequence[str]) -> bool:
    found = text_words(search_texts(r))
    return all(any(w.startswith(word) for w in found) for word in words)


def _event_matches(entry: _Entry, parties: _Parties | None, q: EventQuery) -> bool:
    _, _, _, request_id, data, _ = entry
    if q.request is not None and request_id != q.request:
        return False
    if parties is not None:
        to, by, session, run = parties
    elif data is None:
        to = by = session = run = None
    else:
        to, by, session, run = data.get("to"), data.get("by"), data.get("session"), data.get("run")
    return (
        (q.involving is None or q.involving in (to, by) or (to is not None and to in q.teams))
        and (q.session is None or session == q.session)
        and (q.run is None or run == q.run)
    )
