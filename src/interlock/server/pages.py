"""The web inbox's other pages: a request's own page, the history, the dashboard, and the
one-time sign-in links.

- `/requests/{id}`: the request (its asks, answerable there while it is pending and yours),
  its details as Markdown, its answer, how people were told about it (its deliveries from
  the outbox), and its timeline: the event log, with each notice that went out, each
  dead letter and each delivery skipped (saying why) merged in. It is the page every
  message links to, and a link to it survives the sign-in: signing in comes back to it.
- `/history`: settled requests to you, filtered by status, kind, agent, run and dates, and
  searched by the words of their prompts and answers, a page at a time (`Broker.list`).
- `/dashboard`: what is waiting by agent and age, how fast answers come, what expired, per
  person.
- `/signin/link`: a one-time link (`interlock.signin`) opens a session. Following it shows
  a button that spends it, so a mail scanner that fetches links spends nothing.

All are plain server-rendered pages: forms and links, no script needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Any
from urllib.parse import urlencode
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from fastapi import APIRouter, FastAPI
from fastapi import Request as HttpRequest
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from .. import cursors
from ..broker import Page
from ..dashboard import AGES
from ..errors import InvalidCursor, InvalidRequest, NotFound
from ..model import Event, Status, search_words
from ..model import Request as HumanRequest
from ..outbox import Delivery
from ..principals import can_answer, can_claim, can_read
from .auth import SESSION_COOKIE, SESSION_MAX_AGE
from .common import AppState, State, delivery_seen_by, inbox_filter, include, may_resend, set_cookie
from .markdown import prerender
from .web import (
    SIGNIN_COOKIE,
    Failure,
    Session,
    Taken,
    after_signin,
    email_signin_offered,
    events_upto,
    grants_now,
    outcome,
    page,
    page_link_refused,
    posted_request,
    read_signin_form,
    refusal,
    request_page_path,
    session,
    signin_csrf,
    signin_page,
    signin_redirect,
    take_answer,
    take_claim,
)

__all__ = ["install_pages", "router"]

HISTORY_PAGE = 25
TIMELINE_LIMIT = 500
_SETTLED = [s.value for s in Status if s.settled]

router = APIRouter(include_in_schema=False)


def install_pages(app: FastAPI, state: AppState) -> None:
    """Add the request pages, the history, the dashboard and the sign-in links (after
    `install_web`, whose templates they use)."""
    state.templates.env.filters["span"] = span
    include(app, router)


# -- one-time sign-in links -----------------------------------------------------------------


@router.get("/signin/link", name="signin_link", response_class=HTMLResponse)
async def signin_link_page(http: HttpRequest, state: State, code: str = "", next: str = "") -> Response:
    if not state.auth.enabled or await session(state, http) is not None:
        return RedirectResponse(after_signin(http, next), status_code=303)
    return _link_page(state, http, code, next)


def _link_page(state: AppState, http: HttpRequest, code: str, next_path: str, error: str = "") -> HTMLResponse:
    csrf = signin_csrf(http)
    context = {"code": code, "next": next_path, "signin_csrf": csrf, "error": error}
    response = page(state, http, "signin_link.html", context, 400 if error else 200)
    set_cookie(response, SIGNIN_COOKIE, csrf, 3600, "strict", "/signin", state.auth.secure(http))
    return response


@router.post("/signin/link", response_class=HTMLResponse)
async def signin_with_link(http: HttpRequest, state: State) -> Response:
    values, stale = await read_signin_form(http)
    next_path = values.get("next")
    if not state.auth.enabled:
        return RedirectResponse(after_signin(http, next_path), status_code=303)
    if stale is not None:
        return _link_page(state, http, values.get("code"), next_path, stale)
    code = values.get("code").strip()
    started = await state.auth.sign_in_with_link(code) if code and len(code) <= 200 else None
    if started is None:
        state.auth.refused(http, "a sign-in link unknown, used or expired")
        message = "This sign-in link has been used already or has expired. " + (
            "Ask for a new one by email below, or sign in with a token."
            if email_signin_offered(state)
            else "Restarting `interlock serve` prints a new one; or sign in with a token."
        )
        return signin_page(state, http, message, 400, next_path)
    response = RedirectResponse(after_signin(http, next_path), status_code=303)
    set_cookie(response, SESSION_COOKIE, started[0], SESSION_MAX_AGE, "lax", "/", state.auth.secure(http))
    response.delete_cookie(SIGNIN_COOKIE, path="/signin")
    return response


# -- a request's own page -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Moment:
    """One line of a request's timeline."""

    at: datetime
    what: str
    detail: str = ""
    kind: str = ""


_TOLD = {
    "request": "Notified {to} via {channel}",
    "reminder": "Reminded {to} via {channel}",
    "escalation": "Escalated to {to} via {channel}",
    "settled": "Told {to} via {channel} that it was {event}",
}


_NOT_TOLD = {
    "request": "Did not notify {to} via {channel}",
    "reminder": "Did not remind {to} via {channel}",
    "escalation": "Did not escalate to {to} via {channel}",
    "settled": "Did not tell {to} via {channel} that it was {event}",
}


def timeline(
    request: HumanRequest,
    events: Sequence[Event],
    deliveries: Sequence[Delivery] = (),
    channel_types: Mapping[str, str] | None = None,
) -> list[Moment]:
    """What happened to the request, oldest first: its events, and how people were told
    about it (each delivery that went out, each dead letter, and each delivery skipped,
    from the outbox, saying why: its recipient cut off, its request settled first)."""
    out = _event_moments(request, events)
    types = channel_types or {}
    for d in deliveries:
        kind = types.get(d.channel)
        channel = d.channel if kind in (None, d.channel) else f"{d.channel} ({kind})"
        told = _TOLD.get(d.kind, _TOLD["request"]).format(to=d.recipient, channel=channel, event=d.event)
        if d.status == "delivered" and d.delivered_at is not None:
            out.append(Moment(d.delivered_at, told, kind="notified"))
        elif d.status == "dead":
            tries = f" ({d.attempts} tries)" if d.attempts > 1 else ""
            what = f"Could not notify {d.recipient} via {channel}{tries}"
            out.append(Moment(d.due_at, what, d.last_error or "", "undelivered"))
        elif d.status == "skipped":  # (when it fell due: a skipped delivery keeps no other time)
            what = _NOT_TOLD.get(d.kind, _NOT_TOLD["request"]).format(to=d.recipient, channel=channel, event=d.event)
            out.append(Moment(d.due_at, what, d.last_error or "", "skipped"))
    out.sort(key=lambda m: m.at)  # stable: events in their own order
    return out


def _event_moments(request: HumanRequest, events: Sequence[Event]) -> list[Moment]:
    out = []
    for event in events:
        data = event.data
        if event.type == "created":
            who = request.requester or request.origin.agent
            to = f" to {request.to}" if request.to else ""
            out.append(Moment(event.at, f"Asked{f' by {who}' if who else ''}{to}", kind="created"))
        elif event.type in _SETTLED:
            out.append(
                Moment(event.at, outcome(request), request.response.reason if request.response else "", "settled")
            )
        elif event.type == "consumed":
            out.append(Moment(event.at, "The approval was used by whoever asked", kind="consumed"))
        elif event.type == "informed":
            out.append(Moment(event.at, "Update", str(data.get("message", "")), "informed"))
        elif event.type == "claimed":
            out.append(Moment(event.at, f"Claimed by {data.get('by')}", kind="claimed"))
        elif event.type == "unclaimed":
            out.append(Moment(event.at, f"{data.get('by')} gave up the claim", kind="unclaimed"))
        elif event.type == "viewed":
            out.append(Moment(event.at, f"Viewed by {data.get('by')}", kind="viewed"))
        else:  # what other parts record about a request (a notification sent, say)
            words = event.type.replace("_", " ").capitalize()
            via = data.get("channel") or data.get("via")
            out.append(Moment(event.at, f"{words}{f' via {via}' if via else ''}", kind=event.type))
    return out


@router.get("/requests/{request_id}", name="request_page", response_class=HTMLResponse)
async def request_page(http: HttpRequest, state: State, request_id: str) -> Response:
    who = await session(state, http)
    if who is None:
        return signin_redirect(http)
    try:
        request = await state.broker.get(request_id)
    except (NotFound, InvalidRequest):
        return refusal(state, http, 404, "There is no such request.", who)
    if not can_read(who.principal, request):
        return refusal(state, http, 403, "This request is neither to you nor from you.", who)
    if who.principal.kind != "agent":  # a browser is a person's, the local one's without auth too
        await state.broker.note_viewed(request, by=who.principal.name)
    return await own_page(state, http, who, request)


async def own_page(
    state: AppState,
    http: HttpRequest,
    who: Session,
    request: HumanRequest,
    *,
    failure: Failure | None = None,
    notice: str | None = None,
    status: int = 200,
) -> HTMLResponse:
    """A request's own page for someone who may read it: also where a form posted from it
    without JavaScript comes back to when it is refused, the answer's fault beside its ask
    and what was typed kept (`failure`), or what happened instead (`notice`)."""
    events = await events_upto(state.broker, TIMELINE_LIMIT, request=request.id)
    found = await state.broker.list_deliveries(request_id=request.id, limit=TIMELINE_LIMIT)
    deliveries = [delivery_seen_by(who.principal, d) for d in found]
    loop = state.delivery
    types = {name: c.type for name, c in loop.routing.channels.items()} if loop is not None else {}
    context = {
        "r": request,
        "rendered": await prerender([request.details]),
        "failure": failure,
        "card_notice": None,
        "notice": notice,
        "return_to": request_page_path(http, request.id),
        "answerable": request.status is Status.PENDING and can_answer(who.principal, request),
        "moments": timeline(request, events, deliveries, types),
        "claims": await state.broker.claims([request.id]),
        "grants_now": await grants_now(state.broker, [request]),
        "deliveries": deliveries,
        "resendable": lambda delivery: may_resend(who.principal, request, delivery),
        "view": "request",
        "card_level": 1,  # an answerable request's card heads the page
        # While pending, the page follows the inbox's stream: settled elsewhere, it shows so.
        "after": await state.broker.last_event_id() if request.status is Status.PENDING else None,
    }
    return page(state, http, "request.html", context, status, who)


@router.post("/requests/{request_id}", name="request_answer", response_class=HTMLResponse)
async def answer_on_page(http: HttpRequest, state: State, request_id: str) -> Response:
    """An answer posted from the request's own page (as `web.answer` takes one from the
    inbox): back to the page; refused, the page again with the fault beside its ask and
    what was typed kept, or with what happened instead."""
    found = await posted_request(http, state, request_id, can_answer, "You may not answer this request.")
    if isinstance(found, Response):
        return found
    who, values, request = found
    return await _back_on_page(state, http, who, await take_answer(state, who, request, values))


@router.post("/requests/{request_id}/claim", name="request_claim", response_class=HTMLResponse)
async def claim_on_page(http: HttpRequest, state: State, request_id: str) -> Response:
    """A claim, or its giving up, posted from the request's own page (see `web.claim`)."""
    refused = "Only a member of the team this request is to may claim it."
    found = await posted_request(http, state, request_id, can_claim, refused)
    if isinstance(found, Response):
        return found
    who, values, request = found
    return await _back_on_page(state, http, who, await take_claim(state, who, request, values))


async def _back_on_page(state: AppState, http: HttpRequest, who: Session, taken: Taken) -> Response:
    if taken.status == 200:
        return RedirectResponse(request_page_path(http, taken.request.id), status_code=303)
    request = taken.request
    return await own_page(state, http, who, request, failure=taken.failure, notice=taken.notice, status=taken.status)


# -- history --------------------------------------------------------------------------------


@dataclass
class HistoryFilters:
    """The history's form, as given and as understood."""

    text: str = ""
    status: str = ""
    kind: str = ""
    agent: str = ""
    run: str = ""
    since: str = ""
    until: str = ""
    zone: str = ""  # the reader's time zone (IANA), which the pages' script sends: the days' own
    errors: list[str] = field(default_factory=list)

    @property
    def days_in(self) -> tzinfo:
        """Where From and To are days: the reader's time zone, UTC when none is known."""
        return ZoneInfo(self.zone) if self.zone else UTC

    def query(self) -> dict[str, Any]:
        """The keywords of `Broker.list` for these filters (the recipient aside)."""
        out: dict[str, Any] = {"settled": True}
        if self.text.strip():
            out["text"] = self.text.strip()
        if self.status in _SETTLED:
            out["status"] = self.status
        if self.kind in ("question", "approval"):
            out["kind"] = self.kind
        for name in ("agent", "run"):
            if getattr(self, name).strip():
                out[name] = getattr(self, name).strip()
        if self.since:
            out["since"] = _start_of(date.fromisoformat(self.since), self.days_in)
        if self.until:
            day = date.fromisoformat(self.until)
            if day < date.max:  # (through the end of the last day there is: no bound)
                out["until"] = _start_of(day + timedelta(days=1), self.days_in)  # through the end of that day
        return out

    def link(self, **changes: str) -> str:
        """The query string of these filters with some changed (for paging)."""
        given = {"q": self.text, "status": self.status, "kind": self.kind, "agent": self.agent, "run": self.run}
        given |= {"from": self.since, "to": self.until, "tz": self.zone} | changes
        return urlencode({k: v for k, v in given.items() if v})


def _start_of(day: date, zone: tzinfo) -> datetime:
    """When `day` begins in `zone`, in UTC (the day of a time zone that skips midnight for
    summer time begins at the first time it has)."""
    start = datetime.combine(day, datetime.min.time(), zone)
    return start.astimezone(UTC) if start.year > 1 else start.replace(tzinfo=UTC)


def _zone(name: str) -> str | None:
    """`name` if it is a time zone this server knows (an IANA name, "Europe/Berlin")."""
    if not name or len(name) > 64:
        return None
    try:
        ZoneInfo(name)
    except (ValueError, ZoneInfoNotFoundError):  # (a name that is no key, or none known here)
        return None
    return name


def _filters(http: HttpRequest) -> HistoryFilters:
    q = http.query_params
    filters = HistoryFilters(
        text=q.get("q", "")[:500],
        status=q.get("status", ""),
        kind=q.get("kind", ""),
        agent=q.get("agent", "")[:128],
        run=q.get("run", "")[:128],
        since=q.get("from", ""),
        until=q.get("to", ""),
    )
    zone = q.get("tz", "")
    if zone and _zone(zone) is None:
        filters.errors.append(f"Days are read in UTC: this server does not know the time zone {zone[:64]!r}.")
    filters.zone = _zone(zone) or ""
    for name, label in (("since", "From"), ("until", "To")):
        value = getattr(filters, name)
        try:
            if value:
                date.fromisoformat(value)
        except ValueError:
            filters.errors.append(f"{label} is not a date like 2026-12-01.")
            setattr(filters, name, "")
    if filters.status and filters.status not in _SETTLED:
        filters.errors.append(f"Status is one of: {', '.join(_SETTLED)}.")
        filters.status = ""
    if filters.kind and filters.kind not in ("question", "approval"):
        filters.errors.append("Kind is question or approval.")
        filters.kind = ""
    if filters.text.strip() and not search_words(filters.text):
        # Searched as given it would match everything, and look like a search that did.
        filters.errors.append("Search has no word to look for (letters or digits): every request is listed.")
    return filters


@router.get("/history", name="history", response_class=HTMLResponse)
async def history(http: HttpRequest, state: State) -> Response:
    who = await session(state, http)
    if who is None:
        return signin_redirect(http)
    filters = _filters(http)
    after = http.query_params.get("after") or None
    try:
        found = await state.broker.list(
            **_mine(who), **filters.query(), after=cursors.taken("requests", after), limit=HISTORY_PAGE
        )
    except InvalidCursor:
        return _bad_page_link(state, http, who, filters)
    except InvalidRequest as exc:
        filters.errors.append(str(exc))
        found = Page([], None)
    cursor = cursors.issued("requests", found.next_cursor)
    context = {
        "found": found.items,
        "grants_now": await grants_now(state.broker, found.items),
        "next_link": filters.link(after=cursor) if cursor else None,
        "first_link": filters.link() if after else None,
        "filters": filters,
        "statuses": _SETTLED,
        "view": "history",
    }
    return page(state, http, "history.html", context, 422 if filters.errors else 200, who)


def _bad_page_link(state: AppState, http: HttpRequest, who: Session, filters: HistoryFilters) -> HTMLResponse:
    """The answer to a history link whose `after` is no page's cursor (cut short, mistyped,
    changed, or another list's): a 400 page that says so and links to the newest page of
    the same search, rather than the first page shown as if it were the one asked for."""
    back = f"{http.url_for('history')}?{filters.link()}".rstrip("?")
    return page_link_refused(state, http, who, "the history", (back, "Newest page of the history"))


def _mine(who: Session) -> dict[str, Any]:
    """The `Broker.list` keywords that keep a person's own requests and their teams' (none
    for an admin)."""
    return inbox_filter(who.principal)


# -- dashboard ------------------------------------------------------------------------------


def span(value: timedelta | None) -> str:
    """A duration for people: 45s, 12m, 3h 5m, 2d 4h."""
    if value is None:
        return "none yet"
    seconds = max(int(value.total_seconds()), 0)
    if seconds < 60:
        return f"{seconds}s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if hours == 0:
        return f"{minutes}m"
    if days == 0:
        return f"{hours}h {minutes % 60}m" if minutes % 60 else f"{hours}h"
    return f"{days}d {hours % 24}h" if hours % 24 else f"{days}d"


@router.get("/dashboard", name="dashboard", response_class=HTMLResponse)
async def dashboard(http: HttpRequest, state: State) -> Response:
    who = await session(state, http)
    if who is None:
        return signin_redirect(http)
    board = await state.broker.dashboard(**_mine(who))
    context = {
        "board": board,
        "ages": [label for label, _ in AGES],
        "window_days": board.window.days,
        "view": "dashboard",
    }
    return page(state, http, "dashboard.html", context, 200, who)
