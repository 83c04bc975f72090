"""The web inbox: a person's pending requests, answered from the browser.

Server-rendered HTML (Jinja2, autoescaped) with a little JavaScript and no build step.
A person signs in by pasting a token or with a one-time link (`pages`, `interlock.signin`),
which they may also ask for by email (`email_signin`), and comes back to the page that
sent them (`?next=`, kept by `signin_redirect` on every page); the session lives in the
store and the cookie holds only its random secret (`auth.Auth`); every form carries the
session's CSRF token. Signing out ends the session on the server. Agents cannot sign in: only people
answer. The request pages, history and dashboard are in `pages`.

The page follows `/inbox/stream`, server-sent events of the requests to the person, and
on each one fetches the request's card from `/inbox/requests/{id}`, so a card is rendered
in one place whether it comes with the page or later. Answers are posted to the same URL;
the page's script posts them with `fetch` and swaps in the card it gets back, while a
browser without JavaScript posts the form and is sent back to the inbox, or shown it with
the answer refused beside its ask and what was typed kept. A request's own page posts its
forms to itself (`pages`), with the same `take_answer` and `take_claim`.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlencode

from fastapi import APIRouter, FastAPI, HTTPException
from fastapi import Request as HttpRequest
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from jinja2 import pass_context
from jinja2.runtime import Context
from markupsafe import Markup
from sse_starlette import ServerSentEvent
from starlette.types import Scope

from .. import cursors
from .._form_inputs import Field, FieldFault, form_untouched, input_type, place_in
from ..approvals import decision_ask, not_the_approver
from ..broker import MAX_EVENT_ID, Broker, LocalBroker
from ..errors import FollowupNotFound, InvalidAnswer, InvalidCursor, InvalidRequest, NotFound, RunConflict
from ..followups import MAX_FOLLOWUP_LENGTH
from ..model import (
    Answers,
    Ask,
    Event,
    Grant,
    IssuedGrant,
    Run,
    Status,
    offered_grants,
    show_hidden,
    time_budget,
)
from ..model import Request as HumanRequest
from ..principals import ANONYMOUS, Principal, can_answer, can_claim
from ..signin import safe_next
from .auth import SESSION_COOKIE, SESSION_MAX_AGE, Holder, check_csrf, lost_access
from .common import (
    AppState,
    State,
    Values,
    can_see,
    inbox_filter,
    include,
    may_withdraw,
    named_run,
    parse_event_id,
    read_form,
    requests_of_run,
    run_event_filter,
    run_event_replay,
    seen_by,
    seen_event_replay,
    set_cookie,
)
from .markdown import prerender, render_markdown, shift_headings
from .stream import Dropped

__all__ = ["install_web"]

HERE = Path(__file__).parent
SIGNIN_COOKIE = "interlock_signin"
FRAGMENT_HEADER = "x-interlock-fragment"
HISTORY_LIMIT = 30
PENDING_LIMIT = 50  # pending requests a page; the rest behind an "older" link
RUN_REQUESTS_LIMIT = 50  # a run's requests a page of its own; the rest behind an "older" link
RUN_EVENTS_LIMIT = 200  # a run's events read for a page of its own; the rest behind a "newer" link
UPDATES_LIMIT = 20
UPDATES_LOOKBACK = 500  # events scanned for recent progress updates when the page loads
_SETTLED = tuple(s for s in Status if s.settled)
_INBOX_EVENTS = frozenset({"created", "informed", "claimed", "unclaimed", *(s.value for s in _SETTLED)})
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_ASSET_HEADERS = {name: value for name, value in _SECURITY_HEADERS.items() if name != "Cache-Control"}
"""The pages' scripts and styles carry the pages' headers, but a browser may keep them."""


# -- what a person typed ------------------------------------------------------------------


async def read_answers_off_loop(broker: Broker, request: HumanRequest, values: Values) -> Answers:
    """`read_answers`, in a worker thread within the broker's time budget when a form's
    schema must be checked: that can cost more than the event loop may spend."""
    if not any(ask.costly_to_check for ask in request.asks):
        return read_answers(request, values)
    return await _off_loop(broker, lambda: read_answers(request, values))


async def _off_loop(broker: Broker, read: Callable[[], Answers]) -> Answers:
    def budgeted() -> Answers:
        with time_budget(broker.limits.check_seconds):
            return read()

    return await asyncio.to_thread(budgeted)


async def events_upto(
    broker: Broker,
    limit: int,
    *,
    after: int = 0,
    request: str | None = None,
    run: str | None = None,
    to_whom: Principal | None = None,
) -> list[Event]:
    """Up to `limit` events after `after` (of one `request` or `run`; with `to_whom`, of
    those to or from that principal and to their teams, from their index ranges), oldest
    first, read on past a page that ended early, cut by the size of the requests its
    events carry."""
    whose = {} if to_whom is None else seen_by(to_whom)
    events: list[Event] = []
    while len(events) < limit:
        page = await broker.find_events(after=after, limit=limit - len(events), request=request, run=run, **whose)
        events += page
        if not page.cut:
            break
        after = page[-1].id
    return events


def read_answers(request: HumanRequest, values: Values) -> Answers:
    """The answers by ask id from the posted fields `a{i}` (one per ask, in order), each
    read by its ask's own `from_fields`.

    An ask left blank is left out, so the broker reports the missing required ones.
    """
    out = Answers()
    for i, ask in enumerate(request.asks):
        value = ask.from_fields(values, f"a{i}")
        if value is not None:
            out[ask.id] = value
    return out


# -- what the templates show --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AskView:
    ask: Ask
    name: str
    dom: str
    label_hidden: bool
    error: str
    error_field: str | None = None
    """The input of a form the error is about, when it is about one."""
    fields: tuple[Field, ...] | None = None

    @property
    def type(self) -> str:
        return self.ask.type


@dataclass(frozen=True, slots=True)
class Failure:
    """An answer the broker refused, to show beside the ask it names."""

    request_id: str
    message: str
    ask_id: str | None
    values: Values
    field: str | None = None


@dataclass(frozen=True, slots=True)
class UpdateView:
    id: int
    message: str
    at: datetime
    agent: str | None
    session: str | None


def is_approval(request: HumanRequest) -> bool:
    """An approval answered with Approve / Deny buttons: one yes/no ask, and maybe an
    optional edit of the arguments (`approvals.decision_ask`)."""
    return decision_ask(request) is not None


def prefill(request: HumanRequest) -> Values:
    """The inputs of an approval's optional forms, filled with the arguments under review."""
    arguments = request.origin.arguments
    items: list[tuple[str, str]] = []
    if isinstance(arguments, Mapping):
        for i, ask in enumerate(request.asks):
            if i:
                items.extend(ask.edit_fields(f"a{i}", arguments))
    return Values(items)


def approval_answers(request: HumanRequest, approve: bool, values: Values) -> Answers:
    """An approval's answers from its Approve / Deny buttons: the verdict, and on approval
    each optional form whose inputs the person changed from the prefilled arguments (an
    unchanged one is left out, so it is neither read nor checked)."""
    answers = Answers({request.asks[0].id: approve})
    if not approve:
        return answers
    original = prefill(request)
    arguments = request.origin.arguments
    for i, ask in enumerate(request.asks):
        name = f"a{i}"
        if i == 0 or not ask.edited(name, values, original):
            continue
        value = ask.from_fields(values, name)
        inputs = ask.inputs(name)
        if isinstance(value, dict) and isinstance(arguments, Mapping) and inputs is not None:
            # What the person left alone stays as reviewed, not as the browser posted it back.
            for key in form_untouched(inputs, values, original):
                if key in arguments:
                    value[key] = arguments[key]
                else:
                    value.pop(key, None)
            # And so do the arguments the form has no input for (its schema does not list
            # them): the edited call is the reviewed one with what the person changed.
            shown = {f.key for f in inputs}
            for key, item in arguments.items():
                if key not in shown:
                    value.setdefault(key, item)
        if value is not None:
            answers[ask.id] = value
    return answers


def heading(request: HumanRequest) -> str:
    """The request's title, else its first prompt (shortened); an approval's with the
    characters a reader cannot see written out (`show_hidden`), as its arguments are: a
    tool named `deploy_\u202etxt.exe` must not read as "deploy_exe.txt"."""
    if request.title:
        text = request.title
    elif request.kind == "approval" and request.origin.tool_name:
        text = f"Run {request.origin.tool_name}?"
    else:
        prompt = request.asks[0].prompt
        text = prompt if len(prompt) <= 120 else prompt[:119] + "…"
    return show_hidden(text) if request.kind == "approval" else text


def ask_views(request: HumanRequest, failure: Failure | None) -> list[AskView]:
    untitled = not request.title and not (request.kind == "approval" and request.origin.tool_name)
    out = []
    for i, ask in enumerate(request.asks):
        error, error_field = "", None
        if failure is not None and failure.ask_id == ask.id:
            error, error_field = failure.message.removeprefix(f"ask {ask.id!r}: "), failure.field
            error = error[:1].upper() + error[1:]
        name = f"a{i}"
        out.append(
            AskView(
                ask,
                name,
                f"r-{request.id}-{name}",
                label_hidden=untitled and i == 0 and len(request.asks) == 1,
                error=error,
                error_field=error_field,
                fields=ask.inputs(name),
            )
        )
    return out


def answer_text(ask: Ask, value: Any) -> str:
    return ask.answer_text(value)


def answers_shown(request: HumanRequest) -> list[tuple[str, str]]:
    if request.status is not Status.ANSWERED or request.response is None:
        return []
    given = request.response.answers
    if is_approval(request):  # the verdict is the badge; show an edit of the arguments, as it ran
        return [
            (show_hidden(ask.prompt), show_hidden(answer_text(ask, given[ask.id])))
            for ask in request.asks[1:]
            if ask.id in given
        ]
    if len(request.asks) == 1 and request.asks[0].id in given:
        return [("Answer", answer_text(request.asks[0], given[request.asks[0].id]))]
    return [(ask.prompt, answer_text(ask, given[ask.id])) for ask in request.asks if ask.id in given]


def badge(request: HumanRequest) -> str:
    """The one-word state shown on a settled request."""
    if request.status is Status.ANSWERED and is_approval(request) and request.response is not None:
        return "approved" if request.response.answers.get(request.asks[0].id) else "denied"
    if request.status is Status.REJECTED and is_approval(request):
        return "denied"  # an approval's no is recorded as a denial
    return {"rejected": "declined"}.get(request.status.value, request.status.value)


def outcome(request: HumanRequest) -> str:
    response = request.response
    by = f" by {response.by}" if response is not None and response.by else ""
    via = f" via {response.via}" if response is not None and response.via else ""
    if request.status is Status.ANSWERED:
        verb = "Answered"
        if is_approval(request) and response is not None:
            verb = "Approved" if response.answers.get(request.asks[0].id) else "Denied"
        return f"{verb}{by}{via}"
    if request.status is Status.REJECTED:
        return f"{'Denied' if is_approval(request) else 'Declined'}{by}{via}"
    if request.status is Status.EXPIRED:
        return "Expired unanswered"
    cause = response.cause if response is not None else None
    return {
        "released": "Released by whoever asked",
        "closed": "Withdrawn: its channel was closed",
        "withdrawn": "Withdrawn: nobody waits for it any more",
    }.get(cause or "", f"Cancelled{by}")


def issued(grant: IssuedGrant, now: Mapping[str, IssuedGrant] | None = None) -> Markup:
    """A grant an answer issued, in words (its times as `when` writes them), as the person
    who gave it sees it afterwards: as it is now, when `now` has it (`grants_now`), saying so
    if it was revoked since or is not in force while its issuer is cut off (not of one that
    expired: a token for its issuer would not give it back)."""
    grant = (now or {}).get(grant.id, grant)
    until = Markup("with no expiry") if grant.expires_at is None else Markup("until {}").format(when(grant.expires_at))
    to = f" to {grant.audience}" if grant.audience else ""
    words = Markup("Granted {} on {}{} {}").format(grant.can, grant.with_, to, until)
    if grant.revoked_at is not None:
        return Markup("{}; revoked {}").format(words, when(grant.revoked_at))
    if grant.issuer_cut_off and grant.live(datetime.now(UTC)):
        return Markup(
            "{}; not in force: {} is cut off (every token of theirs revoked), until `interlock token create {} --human`"
        ).format(words, grant.issuer, grant.issuer)
    return words


async def grants_now(broker: LocalBroker, requests: Iterable[HumanRequest]) -> dict[str, IssuedGrant]:
    """The grants the answers of `requests` issued, by id, as they are now (revoked, their
    issuer cut off) for `issued` to say: read for all of them at once."""
    issuing = [r.id for r in requests if r.response is not None and r.response.grants]
    return {g.id: g for g in await broker.grants_issued(issuing)} if issuing else {}


def pretty_json(value: Any) -> str:
    return show_hidden(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str))


def _in_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utc(value: datetime) -> str:
    """An instant in UTC to the minute, "2026-12-07 23:05 UTC": what a page shows where its
    script does not run, and what the server says where it knows no reader's time zone."""
    return _in_utc(value).strftime("%Y-%m-%d %H:%M UTC")


def when(value: datetime, css: str = "") -> Markup:
    """An instant on a page: a `<time>` whose `datetime` is the instant in UTC (ISO 8601, to
    the second) and whose text is `utc`'s, which the pages' script (static/inbox.js) shows in
    the reader's own time zone and manner. `css`: the element's class."""
    at = _in_utc(value)
    attrs = Markup(' class="{}"').format(css) if css else Markup("")
    return Markup('<time{} datetime="{}">{}</time>').format(attrs, at.strftime("%Y-%m-%dT%H:%M:%SZ"), utc(at))


@dataclass(frozen=True, slots=True)
class OfferView:
    """An offered grant as the inbox shows it beside its choice: an unticked checkbox
    whose value is the offer's place among the request's offers."""

    index: int
    grant: Grant


def grant_offers(request: HumanRequest, ask_id: str, option_id: str | None = None) -> list[OfferView]:
    """The grants offered on this ask (with `option_id`, on that option of it)."""
    return [
        OfferView(i, grant)
        for i, (ask, option, grant) in enumerate(offered_grants(request))
        if ask == ask_id and option == option_id
    ]


def grant_echo(request: HumanRequest, values: Values) -> list[dict[str, str]] | None:
    """The offers ticked in the form (`grant` checkboxes), echoed as the offers' own
    `with` and `can`; None when the request offers none."""
    offers = offered_grants(request)
    if not offers:
        return None
    echo = []
    for picked in values.all("grant"):
        place = place_in(picked, len(offers))
        if place is None:
            raise InvalidAnswer("a ticked grant is not one this request offers")
        grant = offers[place][2]
        echo.append({"with": grant.with_, "can": grant.can})
    return echo


@pass_context
def _markdown(context: Context, text: str, top: int = 1) -> Markup:
    """A request's details as HTML, their `#` an `h{top}`: as the route made them off the
    event loop beforehand (`prerender`, given to the template as `rendered`), else
    rendered now."""
    made = context.get("rendered")
    if isinstance(made, Mapping) and text in made:
        return shift_headings(cast("Markup", made[text]), top)
    return render_markdown(text, top)


def _templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=HERE / "templates")
    env = templates.env
    env.autoescape = True  # every template, whatever its name
    env.trim_blocks = env.lstrip_blocks = True
    env.filters.update(utc=utc, when=when, pretty_json=pretty_json, markdown=_markdown, show_hidden=show_hidden)
    env.globals.update(
        heading=heading,
        is_approval=is_approval,
        prefill=prefill,
        input_type=input_type,
        ask_views=ask_views,
        outcome=outcome,
        badge=badge,
        answers_shown=answers_shown,
        grant_offers=grant_offers,
        issued=issued,
    )
    return templates


# -- routes -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Session:
    principal: Principal
    csrf: str
    new_cookie: str | None = None
    """Set when auth is off and the browser has no cookie yet: it carries the CSRF token."""
    holder: Holder | None = None
    """The token and session it runs on (None without auth): their end ends its streams."""
    expires_at: datetime | None = None
    """When the session runs out (None without auth): its streams end then too."""


def install_web(app: FastAPI, state: AppState) -> None:
    """Add the web inbox to the app: `/`, sign-in, the live stream, request cards, assets."""
    app.mount("/static", Assets(directory=HERE / "static"), name="static")
    state.templates = _templates()
    include(app, router)


class Assets(StaticFiles):
    """The pages' static files (the inbox's, and the API page's vendored Swagger UI), sent
    with the pages' security headers."""

    def file_response(
        self, full_path: str | os.PathLike[str], stat_result: os.stat_result, scope: Scope, status_code: int = 200
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers.update(_ASSET_HEADERS)
        return response


router = APIRouter(include_in_schema=False)


async def session(state: AppState, http: HttpRequest) -> Session | None:
    found = await state.auth.web_session(http)
    if found is None or found.principal.kind == "agent":
        return None
    if not found.csrf:
        cookie, csrf = state.auth.anonymous_cookie()
        return Session(found.principal, csrf, cookie)
    expires_at = found.session.expires_at if found.session is not None else None
    return Session(found.principal, found.csrf, holder=found.holder, expires_at=expires_at)


def page(
    state: AppState,
    http: HttpRequest,
    name: str,
    context: dict[str, Any],
    status: int = 200,
    who: Session | None = None,
) -> HTMLResponse:
    response = state.templates.TemplateResponse(
        http,
        name,
        {
            "principal": who.principal if who else None,
            "csrf": who.csrf if who else "",
            "auth": state.auth.enabled,
            "delivers": state.delivery is not None,  # the nav links to the dead letters
        }
        | context,
        status_code=status,
        headers=_SECURITY_HEADERS,
    )
    if who is not None and who.new_cookie is not None:
        set_cookie(response, SESSION_COOKIE, who.new_cookie, SESSION_MAX_AGE, "lax", "/", state.auth.secure(http))
    return response


def after_signin(http: HttpRequest, next_path: str | None) -> str:
    """Where a sign-in goes on to: the page the person was sent to sign in from (a path
    on this server only), else the inbox."""
    return next_path if next_path is not None and safe_next(next_path) else str(http.url_for("inbox"))


def signin_redirect(http: HttpRequest, next_path: str | None = None) -> RedirectResponse:
    """Off to sign in, coming back afterwards to this very page (its path and query), or
    to `next_path` (the page a form was posted from). Every page a person may be sent a
    link to answers a visitor who is signed out with this, so the link survives the
    sign-in."""
    here = next_path or http.url.path + (f"?{http.url.query}" if http.url.query else "")
    signin = http.url_for("signin")
    target = signin.include_query_params(next=here) if here != "/" and safe_next(here) else signin
    return RedirectResponse(target, status_code=303)


def request_page_path(http: HttpRequest, request_id: str) -> str:
    return http.url_for("request_page", request_id=request_id).path


def back_after_post(http: HttpRequest, request: HumanRequest, values: Values) -> RedirectResponse:
    """Back to the inbox, without JavaScript, after a form about `request` posted there was
    taken; or to the request's own page, when its `next` names that page (a page rendered
    before the request's page posted its forms to itself). A `next` naming anything else is
    not followed."""
    own = request_page_path(http, request.id)
    return RedirectResponse(own if values.get("next") == own else str(http.url_for("inbox")), status_code=303)


def fragment_wanted(http: HttpRequest) -> bool:
    return http.headers.get(FRAGMENT_HEADER) == "1"


def refusal(
    state: AppState,
    http: HttpRequest,
    status: int,
    message: str,
    who: Session | None = None,
    *,
    back: tuple[str, str] | None = None,
) -> HTMLResponse:
    """A page (or, to the inbox's script, a notice) that refuses with `message`; `back`:
    a link (address, words) to go on from, besides the inbox."""
    name = "_notice.html" if fragment_wanted(http) else "error.html"
    return page(state, http, name, {"message": message, "status": status, "back": back}, status, who)


def page_link_refused(
    state: AppState,
    http: HttpRequest,
    who: Session,
    of: str,
    start: tuple[str, str],
    *,
    first: str = "newest",
) -> HTMLResponse:
    """The answer to a link to a page of a list (`of`: which, in words) whose cursor is no
    page's (cut short, mistyped, changed, or another list's): a 400 page that says so and
    links to the list's first page (`start`: its address and words; `first`: which page
    that is, in a word: "oldest" for a list oldest first), rather than the first page
    shown as if it were the one asked for."""
    message = (
        f"This link to a page of {of} is not valid: it may have been cut short or changed on its way. "
        f"Start again from the {first} page."
    )
    return refusal(state, http, 400, message, who, back=start)


def mine(who: Session, request: HumanRequest) -> bool:
    """Whether the request is in this person's inbox: to them, or to one of their teams."""
    p = who.principal
    return p.kind == "admin" or request.to == p.name or (p.kind == "human" and request.to in p.teams)


async def posted(http: HttpRequest, state: AppState, back: str) -> tuple[Session, Values] | Response:
    """The signed-in person and the fields of a form they posted, its CSRF token checked;
    else what to answer instead: off to sign in (coming back to the page `back`), or, to
    the inbox's script, a refusal (a session that ended, a stale form)."""
    who = await session(state, http)
    if who is None:
        if fragment_wanted(http):
            return refusal(state, http, 401, "Your session has ended: sign in again.")
        return signin_redirect(http, back)
    values = await read_form(http)
    try:
        check_csrf(who.csrf, values.get("csrf"))
    except HTTPException as exc:
        return refusal(state, http, 403, str(exc.detail), who)
    return who, values


async def posted_request(
    http: HttpRequest, state: AppState, request_id: str, may: Callable[[Principal, HumanRequest], bool], refused: str
) -> tuple[Session, Values, HumanRequest] | Response:
    """A form posted about a request in the person's inbox that they `may` act on (as
    `posted`), with the request; else the refusal (`refused` when they may not)."""
    found = await posted(http, state, request_page_path(http, request_id))
    if isinstance(found, Response):
        return found
    who, values = found
    try:
        request = await state.broker.get(request_id)
    except (NotFound, InvalidRequest):  # an id no request could have (too long) is no request either
        return refusal(state, http, 404, "There is no such request.", who)
    if not mine(who, request):  # the same answer as the API's: it exists, and it is not yours
        return refusal(state, http, 403, "This request is not in your inbox.", who)
    if not may(who.principal, request):
        return refusal(state, http, 403, refused, who)
    return who, values, request


async def posted_run(http: HttpRequest, state: AppState, run_id: str) -> tuple[Session, Run, Values] | Response:
    """A form posted about a run the person may see (as `posted`), with the run; else the
    refusal to answer with."""
    found = await posted(http, state, http.url_for("inbox_run", run_id=run_id).path)
    if isinstance(found, Response):
        return found
    who, values = found
    try:  # a run not theirs to see is refused as one that does not exist: run ids may be guessed
        run = await named_run(state.broker, who.principal, run_id)
    except (NotFound, InvalidRequest):  # (an id no run could have, too long, is no run either)
        return refusal(state, http, 404, "There is no such run.", who)
    return who, run, values


async def card(state: AppState, http: HttpRequest, who: Session, request: HumanRequest, **extra: Any) -> HTMLResponse:
    status = extra.pop("status", 200)
    claims = await state.broker.claims([request.id])
    context = {"r": request, "failure": None, "card_notice": None, "claims": claims} | extra
    context["rendered"] = await prerender([request.details])
    context["grants_now"] = await grants_now(state.broker, [request])
    return page(state, http, "_request.html", context, status, who)


async def inbox_page(
    state: AppState,
    http: HttpRequest,
    who: Session,
    *,
    older: str | None = None,
    failure: Failure | None = None,
    notice: str | None = None,
    status: int = 200,
) -> HTMLResponse:
    """The inbox: the pending requests a page at a time (`older`: the cursor of the page,
    as its "Older requests" link gives it; a plain request id, as older links gave, too),
    the latest settled ones, and the latest updates. A link whose cursor is no page's is
    refused with a 400 page that says so (`page_link_refused`)."""
    after = await state.broker.last_event_id()  # before reading, so the stream misses nothing
    recipient = inbox_filter(who.principal)
    try:
        position = cursors.taken("requests", older or None)
        pending = await state.broker.list(status=Status.PENDING, after=position, limit=PENDING_LIMIT, **recipient)
    except InvalidCursor:
        return page_link_refused(state, http, who, "the inbox", (str(http.url_for("inbox")), "Newest requests"))
    history: list[HumanRequest] = []
    for settled in _SETTLED:
        history.extend((await state.broker.list(status=settled, limit=HISTORY_LIMIT, **recipient)).items)
    history.sort(key=lambda r: r.response.at if r.response else r.created_at, reverse=True)
    # The updates to them among the log's latest events, read from their own index ranges:
    # the rest of the log is other people's, with requests of any size.
    window = max(after - UPDATES_LOOKBACK, 0)
    recent = await events_upto(state.broker, UPDATES_LOOKBACK, after=window, to_whom=who.principal)
    updates = [
        _update_view(e) for e in recent if e.id <= after and e.type == "informed" and _for_inbox(who.principal, e)
    ]
    context = {
        "pending": pending.items,
        "rendered": await prerender(r.details for r in pending.items),
        "claims": await state.broker.claims([r.id for r in pending.items]),
        "older": cursors.issued("requests", pending.next_cursor),
        "paged": position is not None,
        "history": history[:HISTORY_LIMIT],
        "grants_now": await grants_now(state.broker, history[:HISTORY_LIMIT]),
        "updates": updates[::-1][:UPDATES_LIMIT],
        "after": after,
        "failure": failure,
        "notice": notice,
    }
    return page(state, http, "inbox.html", context, status, who)


@router.get("/", name="inbox", response_class=HTMLResponse)
async def inbox(http: HttpRequest, state: State) -> Response:
    who = await session(state, http)
    if who is None:
        return signin_redirect(http)
    return await inbox_page(state, http, who, older=http.query_params.get("older"))


@router.get("/signin", name="signin", response_class=HTMLResponse)
async def signin_form(http: HttpRequest, state: State) -> Response:
    if not state.auth.enabled or await session(state, http) is not None:
        return RedirectResponse(after_signin(http, http.query_params.get("next")), status_code=303)
    return signin_page(state, http)


def email_signin_offered(state: AppState) -> bool:
    """Whether the sign-in page offers a link by email (`email_signin`): with auth, where
    the routing has an email channel and says where the inbox is."""
    loop = state.delivery
    return (
        state.auth.enabled
        and loop is not None
        and loop.context.inbox_url is not None
        and any(config.type == "email" for config in loop.routing.channels.values())
    )


_SIGNIN_CSRF = re.compile(r"[A-Za-z0-9_-]{32}")


def signin_csrf(http: HttpRequest) -> str:
    """The sign-in form's CSRF token: the one this browser holds already, if any (so a
    sign-in page opened in a second tab leaves the first one's form good), else a new one."""
    held = http.cookies.get(SIGNIN_COOKIE, "")
    return held if _SIGNIN_CSRF.fullmatch(held) else secrets.token_urlsafe(24)


def signin_page(
    state: AppState,
    http: HttpRequest,
    error: str = "",
    status: int = 200,
    next_path: str | None = None,
    notice: str = "",
) -> HTMLResponse:
    csrf = signin_csrf(http)
    if next_path is None:
        next_path = http.query_params.get("next")
    context = {
        "error": error,
        "notice": notice,
        "signin_csrf": csrf,
        "next": next_path if safe_next(next_path) else "",
        "by_email": email_signin_offered(state),
    }
    response = page(state, http, "signin.html", context, status)
    set_cookie(response, SIGNIN_COOKIE, csrf, 3600, "strict", "/signin", state.auth.secure(http))
    return response


async def read_signin_form(http: HttpRequest) -> tuple[Values, str | None]:
    """The fields of a posted sign-in form, and what is wrong with its CSRF token (None
    when it is the one in the short-lived sign-in cookie: a double submit, as there is no
    session yet)."""
    values = await read_form(http)
    try:
        check_csrf(http.cookies.get(SIGNIN_COOKIE, ""), values.get("csrf"))
    except HTTPException as exc:
        return values, str(exc.detail)
    return values, None


@router.post("/signin", response_class=HTMLResponse)
async def signin(http: HttpRequest, state: State) -> Response:
    if not state.auth.enabled:
        return RedirectResponse(http.url_for("inbox"), status_code=303)
    values, stale = await read_signin_form(http)
    next_path = values.get("next")
    if stale is not None:
        return signin_page(state, http, stale, 403, next_path)
    token = values.get("token").strip()
    principal = await state.auth.from_token(token) if token else None
    if principal is None:
        if token:
            state.auth.refused(http, "an unknown or revoked token", token)
        return signin_page(state, http, "That token is unknown or has been revoked.", 401, next_path)
    if principal.kind == "agent":
        message = "That is an agent's token. Only people answer requests: use your own."
        return signin_page(state, http, message, 403, next_path)
    started = await state.auth.sign_in(token)
    if started is None:  # revoked in the meantime
        return signin_page(state, http, "That token is unknown or has been revoked.", 401, next_path)
    response = RedirectResponse(after_signin(http, next_path), status_code=303)
    set_cookie(response, SESSION_COOKIE, started[0], SESSION_MAX_AGE, "lax", "/", state.auth.secure(http))
    response.delete_cookie(SIGNIN_COOKIE, path="/signin")
    return response


@router.post("/signout", name="signout")
async def signout(http: HttpRequest, state: State) -> Response:
    who = await session(state, http)
    if who is not None:
        try:
            check_csrf(who.csrf, (await read_form(http)).get("csrf"))
        except HTTPException as exc:
            return refusal(state, http, 403, str(exc.detail), who)
    response = RedirectResponse(http.url_for("signin" if state.auth.enabled else "inbox"), status_code=303)
    if state.auth.enabled:
        ended = await state.auth.sign_out(http)  # on the server: the old cookie opens nothing any more
        if ended is not None:  # this node's streams end now; other nodes' when they read the event
            state.hub.end_streams("signed_out", {"principal": ended.principal.name, "session": ended.id})
        response.delete_cookie(SESSION_COOKIE, path="/", secure=state.auth.secure(http), httponly=True, samesite="lax")
    return response


_RAN_OUT = "your session ended"
"""Why a web inbox stream ends once its session is gone: signed out elsewhere, or run out."""


@router.get("/inbox/stream", name="inbox_stream")
async def stream(http: HttpRequest, state: State, after: int | None = None) -> Response:
    who = await session(state, http)
    if who is None:
        return Response("sign in first", status_code=401, media_type="text/plain")
    principal = who.principal

    def accept(event: Event) -> bool:
        return event.type in _INBOX_EVENTS and _for_inbox(principal, event)

    # A replay (a Last-Event-ID, or `after`) reads the person's own events from their
    # indexes, not the whole log: everyone's events, and the requests they carry.
    return _followed(state, http, who, accept, after, seen_event_replay(state.broker, principal))


@router.get("/inbox/runs/{run_id}/stream", name="inbox_run_stream")
async def run_stream(http: HttpRequest, state: State, run_id: str, after: int | None = None) -> Response:
    """A run's events the person may see (`run_event_filter`), as its page follows them: the
    page reads itself again on each, so it stays live while the run goes on."""
    who = await session(state, http)
    if who is None:
        return Response("sign in first", status_code=401, media_type="text/plain")
    try:
        run = await named_run(state.broker, who.principal, run_id)
    except (NotFound, InvalidRequest):  # an id no run could have (too long) is no run either
        return Response("there is no such run", status_code=404, media_type="text/plain")

    accept = run_event_filter(who.principal, run.id)
    return _followed(state, http, who, accept, after, run_event_replay(state.broker, run.id), named=False)


def _followed(
    state: AppState,
    http: HttpRequest,
    who: Session,
    accept: Callable[[Event], bool],
    after: int | None,
    replay: Callable[[int], AsyncIterator[Event]] | None = None,
    *,
    named: bool = True,
) -> Response:
    """The events `accept` takes, as server-sent events (id, type and request id each),
    from after the Last-Event-ID given (else `after`; else from now on), to a page signed
    in as `who`: the stream ends with its session, or when its access is lost. `named`:
    each is sent as its type's event (else as a plain message, for a page that takes them
    all alike)."""
    try:  # here, before the stream's 200 goes out
        start = parse_event_id(http.headers.get("last-event-id"))
    except ValueError as exc:
        return Response(str(exc), status_code=400, media_type="text/plain")
    if after is not None and not 0 <= after <= MAX_EVENT_ID:
        return Response(f"after must be between 0 and {MAX_EVENT_ID}", status_code=400, media_type="text/plain")
    start = after if start is None else start
    principal = who.principal

    async def lost() -> str | None:
        now = await session(state, http)
        return lost_access(principal, now.principal if now is not None else None, _RAN_OUT)

    async def generate() -> AsyncIterator[ServerSentEvent]:
        yield ServerSentEvent(comment="connected", retry=2000)
        holder, ends = who.holder, None
        if holder is not None and who.expires_at is not None:  # the stream ends with its session
            left = (who.expires_at - datetime.now(UTC)).total_seconds()
            ends = asyncio.get_running_loop().call_later(max(left, 0), state.hub.end_holder, holder, _RAN_OUT)
        try:
            follow = state.hub.replay_then_follow(
                accept, start, replay, holder=holder, lost=lost if holder is not None else None
            )
            async for event in follow:
                data = {"id": event.id, "type": event.type, "request_id": event.request_id}
                yield ServerSentEvent(data=json.dumps(data), event=event.type if named else None, id=str(event.id))
        except Dropped as exc:
            yield ServerSentEvent(data=json.dumps({"reason": str(exc)}), event="dropped")
        finally:
            if ends is not None:
                ends.cancel()

    return state.quotas.streams.response(principal.name, generate(), ping=state.keepalive, send_timeout=30)


@router.get("/inbox/requests/{request_id}", name="inbox_request", response_class=HTMLResponse)
async def request_card(http: HttpRequest, state: State, request_id: str) -> Response:
    """A request's card, for the live inbox's script. A browser that opens this URL
    itself (a link in a message sent before links pointed at the request's page) is sent
    to the request's own page, through the sign-in if need be."""
    if not fragment_wanted(http):
        own = request_page_path(http, request_id)
        if await session(state, http) is None:
            return signin_redirect(http, own)
        return RedirectResponse(own, status_code=303)
    who = await session(state, http)
    if who is None:
        return refusal(state, http, 401, "Your session has ended: sign in again.")
    try:
        request = await state.broker.get(request_id)
    except (NotFound, InvalidRequest):  # an id no request could have (too long) is no request either
        return refusal(state, http, 404, "There is no such request.", who)
    if not mine(who, request):
        return refusal(state, http, 403, "This request is not in your inbox.", who)
    return await card(state, http, who, request)


@dataclass(frozen=True, slots=True)
class Taken:
    """What came of a form posted about a request: taken (neither field set), refused
    (`failure`: the answer's fault), or moot (`notice`: what happened instead)."""

    request: HumanRequest
    """The request as it is now; as it was posted about, when the answer was refused."""
    failure: Failure | None = None
    notice: str | None = None

    @property
    def status(self) -> int:
        return 422 if self.failure is not None else 409 if self.notice is not None else 200


async def take_answer(state: AppState, who: Session, request: HumanRequest, values: Values) -> Taken:
    """Answer, decline, approve or deny `request` with the fields of a form posted about it
    (from the inbox or from the request's own page)."""
    action = values.get("action", "answer")
    comment = values.get("comment").strip()
    by = who.principal.name
    try:
        if request.status is not Status.PENDING:
            done = False
        elif action == "reject":
            done = await state.broker.reject(request.id, comment, by=by, via="web")
        elif action in ("approve", "deny") and is_approval(request):
            if action == "approve":
                await _approvers_yes(state, who, request)
            if len(request.asks) == 1:
                verdict = Answers({request.asks[0].id: action == "approve"})
            else:
                verdict = await _off_loop(state.broker, lambda: approval_answers(request, action == "approve", values))
            echo = grant_echo(request, values) if action == "approve" else None
            done = await state.broker.resolve(request.id, verdict, by=by, via="web", comment=comment, grants=echo)
        else:
            answers = await read_answers_off_loop(state.broker, request, values)
            echo = grant_echo(request, values)
            done = await state.broker.resolve(request.id, answers, by=by, via="web", comment=comment, grants=echo)
    except InvalidAnswer as exc:
        if isinstance(exc, FieldFault):
            return Taken(request, Failure(request.id, exc.fault, exc.ask_id, values, exc.field))
        return Taken(request, Failure(request.id, str(exc), exc.ask_id, values))
    current = await state.broker.get(request.id)
    if not done:
        return Taken(current, notice=f"This request is no longer pending: {outcome(current).lower()}.")
    return Taken(current)


async def _approvers_yes(state: AppState, who: Session, request: HumanRequest) -> None:
    """Refuse, before anything is recorded, a yes the agent's approval gate would not take:
    it counts a gate's approval only as its approver's (a member's, for a team). A person
    signed in answers only their own and their teams' requests; an operator (a server
    without sign-in) is refused here, rather than record an approval the call then does
    not run on."""
    by = who.principal.name
    refused = await not_the_approver(state.broker, request, by)
    if refused is None:
        return
    whom, as_whom = refused
    anonymous = who.principal == ANONYMOUS
    why = (
        "this server runs without sign-in, so it cannot tell that you are them"
        if anonymous
        else f"you are signed in as {by}"
    )
    raise InvalidAnswer(
        f"This approval is for {request.to}: the agent's approval gate takes a yes only from {whom}, and {why}. "
        f"Answer as them: interlock answer {request.id} yes --by {as_whom}"
        + (" (or run the server with sign-in)" if anonymous else "")
    )


async def take_claim(state: AppState, who: Session, request: HumanRequest, values: Values) -> Taken:
    """Claim `request` to one of the person's teams (`action=claim`), or give their claim
    up (`action=unclaim`), as a form posted about it asks."""
    by = who.principal.name
    notice = None
    if request.status is not Status.PENDING:
        notice = f"This request is no longer pending: {outcome(request).lower()}."
    elif values.get("action") == "unclaim":
        await state.broker.unclaim(request.id, by=by)
    else:
        held = await state.broker.claim(request.id, by=by)
        if held.by != by:
            notice = Markup("Already claimed by {} at {}.").format(held.by, when(held.at))
    return Taken(await state.broker.get(request.id), notice=notice)


@router.post("/inbox/requests/{request_id}", name="inbox_answer", response_class=HTMLResponse)
async def answer(http: HttpRequest, state: State, request_id: str) -> Response:
    """An answer from the inbox. The request's own page posts its form to that page
    (`pages`), which shows what is refused there."""
    found = await posted_request(http, state, request_id, can_answer, "You may not answer this request.")
    if isinstance(found, Response):
        return found
    who, values, request = found
    taken = await take_answer(state, who, request, values)
    if fragment_wanted(http):
        return await card(
            state, http, who, taken.request, failure=taken.failure, card_notice=taken.notice, status=taken.status
        )
    if taken.status != 200:
        return await inbox_page(state, http, who, failure=taken.failure, notice=taken.notice, status=taken.status)
    return back_after_post(http, taken.request, values)


@router.post("/inbox/requests/{request_id}/claim", name="inbox_claim", response_class=HTMLResponse)
async def claim(http: HttpRequest, state: State, request_id: str) -> Response:
    """Claim a request to one of your teams, or give your claim up (`take_claim`), from the
    inbox. Without JavaScript, back to it."""
    refused = "Only a member of the team this request is to may claim it."
    found = await posted_request(http, state, request_id, can_claim, refused)
    if isinstance(found, Response):
        return found
    who, values, request = found
    taken = await take_claim(state, who, request, values)
    if fragment_wanted(http):
        return await card(state, http, who, taken.request, card_notice=taken.notice)
    if taken.notice is not None:
        return await inbox_page(state, http, who, notice=taken.notice, status=409)
    return back_after_post(http, taken.request, values)


@router.get("/inbox/runs/{run_id}", name="inbox_run", response_class=HTMLResponse)
async def run_page(
    http: HttpRequest,
    state: State,
    run_id: str,
    cancel: str = "",
    sent: str = "",
    older: str = "",
    events: str = "",
) -> Response:
    """A run: its agent and status, the requests of it the person may read (to them, to
    their teams, made by them: `requests_of_run`; newest first, a page at a time: `older`
    is the cursor of the next), the messages held for its agent (and a box to send one),
    and its events the person may see, oldest first, a page at a time (`events`: the id
    of the last event the previous page read). A link whose `older` is no page's cursor,
    or whose `events` is no event id, is refused with a 400 page that says so."""
    who = await session(state, http)
    if who is None:
        return signin_redirect(http)
    position = await state.broker.last_event_id()  # before reading: the page's stream goes on from here
    try:  # a run not theirs to see is refused as one that does not exist: run ids may be guessed
        run = await named_run(state.broker, who.principal, run_id)
    except (NotFound, InvalidRequest):  # (an id no run could have, too long, is no run either)
        return refusal(state, http, 404, "There is no such run.", who)
    since = _event_position(events)  # None: no page's link; refused below, once the requests' link is checked
    here = http.url_for("inbox_run", run_id=run.id).path

    def link(**changed: str | int | None) -> str:
        """This page with the other list's cursor kept and this one's set (or dropped)."""
        given = {"older": older, "events": since or None} | changed
        kept = {name: value for name, value in given.items() if value}
        return here + (f"?{urlencode(kept)}" if kept else "")

    try:
        after = cursors.taken("requests", older or None)
        requests = await requests_of_run(state.broker, who.principal, run.id, after=after, limit=RUN_REQUESTS_LIMIT)
    except InvalidCursor:
        newest = f"{http.url_for('inbox_run', run_id=run.id)}{link(older=None).removeprefix(here)}"
        return page_link_refused(state, http, who, "this run's requests", (newest, "Newest requests of this run"))
    if since is None:
        oldest = f"{http.url_for('inbox_run', run_id=run.id)}{link(events=None).removeprefix(here)}"
        back = (oldest, "Oldest events of this run")
        return page_link_refused(state, http, who, "this run's events", back, first="oldest")
    accept = run_event_filter(who.principal, run.id)
    # A page reads a bounded number of the run's events (one more: is there a next page?)
    # and shows those the person may see, so a page may show fewer, never costs more.
    read = await events_upto(state.broker, RUN_EVENTS_LIMIT + 1, after=since, run=run.id)
    newer = read[RUN_EVENTS_LIMIT - 1].id if len(read) > RUN_EVENTS_LIMIT else None
    notice = _RUN_NOTICES.get(cancel, "") or _SENT_NOTICES.get(sent, "")  # fixed texts, nothing from the URL
    followups = await state.broker.list_followups(run.id)
    context = {
        "run": run,
        "requests": requests.items,
        "older_link": link(older=cursors.issued("requests", requests.next_cursor)) if requests.next_cursor else None,
        "newest_link": link(older=None) if after is not None else None,
        "paged": after is not None,
        "events": [e for e in read[:RUN_EVENTS_LIMIT] if accept(e)],
        "newer_events_link": link(events=newer) if newer is not None else None,
        "oldest_events_link": link(events=None) if since else None,
        "events_paged": bool(since),
        "notice": notice,
        "followups": followups,
        "position": position,
    }
    return page(state, http, "run.html", context, who=who)


@router.post("/inbox/runs/{run_id}/cancel", name="inbox_run_cancel", response_class=HTMLResponse)
async def cancel_run(http: HttpRequest, state: State, run_id: str) -> Response:
    found = await posted_run(http, state, run_id)
    if isinstance(found, Response):
        return found
    who, run, _ = found
    done = await state.broker.cancel_run(run.id, by=who.principal.name, via="web")
    where = http.url_for("inbox_run", run_id=run.id).include_query_params(cancel="done" if done else "ended")
    return RedirectResponse(where, status_code=303)


_RUN_NOTICES = {"done": "Cancelled: its pending requests were withdrawn.", "ended": "This run had ended already."}
_SENT_NOTICES = {
    "resolved": "Your message decided the approval the run waited on.",
    "queued": "Your message is held: the agent gets it at its next turn.",
    "full": "The run holds as many messages as it may: nothing was held. Send it again later.",
    "ended": "This run has ended: nothing was held.",
    "withdrawn": "Your message was withdrawn.",
    "gone": "That message is gone already: delivered, withdrawn, or the run has ended.",
}


@router.post("/inbox/runs/{run_id}/messages", name="inbox_run_message", response_class=HTMLResponse)
async def send_run_message(http: HttpRequest, state: State, run_id: str) -> Response:
    """Send the run's agent a message: `approve` / `deny` decides a pending approval of
    yours; anything else is held for the agent's next turn."""
    found = await posted_run(http, state, run_id)
    if isinstance(found, Response):
        return found
    who, run, values = found
    text = values.get("text", "")
    outcome: str
    if not text.strip() or len(text) > MAX_FOLLOWUP_LENGTH:
        return refusal(state, http, 422, f"A message needs some text, at most {MAX_FOLLOWUP_LENGTH} characters.", who)
    try:
        outcome = (
            await state.broker.send_message(
                run.id, text, by=who.principal.name, may_answer=lambda r: can_answer(who.principal, r)
            )
        ).outcome
    except RunConflict:
        outcome = "ended"
    where = http.url_for("inbox_run", run_id=run.id).include_query_params(sent=outcome)
    return RedirectResponse(where, status_code=303)


@router.post(
    "/inbox/runs/{run_id}/followups/{followup_id}/withdraw", name="inbox_run_withdraw", response_class=HTMLResponse
)
async def withdraw_run_message(http: HttpRequest, state: State, run_id: str, followup_id: str) -> Response:
    """Withdraw a message the person sent, held for the run, before its agent gets it."""
    found = await posted_run(http, state, run_id)
    if isinstance(found, Response):
        return found
    who, run, _ = found
    if not await may_withdraw(state.broker, who.principal, run.id, followup_id):
        return refusal(state, http, 403, "Only whoever sent a message may withdraw it.", who)
    try:
        await state.broker.withdraw_followup(run.id, followup_id)
        outcome = "withdrawn"
    except FollowupNotFound:
        outcome = "gone"
    where = http.url_for("inbox_run", run_id=run.id).include_query_params(sent=outcome)
    return RedirectResponse(where, status_code=303)


@router.get("/inbox/updates/{event_id}", name="inbox_update", response_class=HTMLResponse)
async def update_card(http: HttpRequest, state: State, event_id: int) -> Response:
    who = await session(state, http)
    if who is None:
        return refusal(state, http, 401, "Your session has ended: sign in again.")
    # From the person's own index ranges: another's event (and the request it carries) is not read.
    found = (
        await state.broker.find_events(after=event_id - 1, until=event_id, limit=1, **seen_by(who.principal))
        if 0 < event_id <= MAX_EVENT_ID
        else []
    )
    if found and found[0].id == event_id and found[0].type == "informed" and _for_inbox(who.principal, found[0]):
        return page(state, http, "_update.html", {"u": _update_view(found[0])}, 200, who)
    return refusal(state, http, 404, "There is no such update.", who)


def _for_inbox(principal: Principal, event: Event) -> bool:
    """Whether the event belongs in this person's inbox: requests and updates to them or
    to one of their teams."""
    if not can_see(principal, event):
        return False
    if principal.kind == "admin":
        return True
    to = event.request.to if event.request is not None else event.data.get("to")
    return to == principal.name or (principal.kind == "human" and to in principal.teams)


def _event_position(value: str) -> int | None:
    """A page of a run's events from the query string: the id of the last event the
    previous page read (0, or nothing: the first page), as the API's `after` of a run's
    events takes it; None for any other text, which no page's link carries (not ASCII
    digits, or past the largest event id a store holds)."""
    if not value:
        return 0
    digits = value.lstrip("0") or "0"  # leading zeros change nothing, nor count towards int()'s digit limit
    if not (value.isascii() and value.isdigit()) or len(digits) > len(str(MAX_EVENT_ID)) or int(digits) > MAX_EVENT_ID:
        return None
    return int(digits)


def _update_view(event: Event) -> UpdateView:
    data = event.data
    return UpdateView(event.id, str(data.get("message", "")), event.at, data.get("agent"), data.get("session"))
