"""The outbox in the web inbox: how people were told about a request (for whoever may read
it), and the signed-in person's dead letters and their teams' requests', newest first, a page at a time, each with a
button to send it again.

Pages of their own (`/inbox/deliveries`, `?request=ID` for one request), over the web
inbox's sessions, pages and CSRF checks; they work without JavaScript."""

from __future__ import annotations

import contextlib

from fastapi import APIRouter
from fastapi.requests import Request as HttpRequest
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ..errors import AlreadySettled, InvalidRequest, NotFound
from ..model import Request as HumanRequest
from ..outbox import Delivery
from ..principals import can_read
from ..signin import safe_next
from .common import AppState, State, deliveries_filter, delivery_seen_by, may_resend, may_see_delivery
from .web import page, posted, refusal, session, signin_redirect

__all__ = ["router"]

router = APIRouter(include_in_schema=False)

DEAD_LETTERS_PAGE = 50  # dead letters a page, newest first; the rest behind an "older" link


@router.get("/inbox/deliveries", name="inbox_deliveries", response_class=HTMLResponse)
async def deliveries_page(http: HttpRequest, state: State) -> Response:
    who = await session(state, http)
    if who is None:
        return signin_redirect(http)
    request_id = http.query_params.get("request")
    request = None
    older_link = newest_link = None
    if request_id:
        try:
            request = await state.broker.get(request_id[:64])
        except (NotFound, InvalidRequest):  # an id no request could have is no request either
            return refusal(state, http, 404, "There is no such request.", who)
        if not can_read(who.principal, request):
            return refusal(state, http, 403, "This request is neither to you nor from you.", who)
        of_request = await state.broker.list_deliveries(request_id=request.id, limit=1000)
        items = [delivery_seen_by(who.principal, d) for d in of_request]
    else:
        seen = deliveries_filter(who.principal)  # theirs and their teams' requests'
        after = http.query_params.get("after") or None
        try:
            found = await state.broker.dead_letters(after=after, limit=DEAD_LETTERS_PAGE, **seen)
        except InvalidRequest:  # a cursor no page gave (edited, or too long): the first page
            after, found = None, await state.broker.dead_letters(limit=DEAD_LETTERS_PAGE, **seen)
        items = [delivery_seen_by(who.principal, d) for d in found.items]  # a teammate's: no address
        here = http.url_for("inbox_deliveries")
        older_link = str(here.include_query_params(after=found.next_cursor)) if found.next_cursor else None
        newest_link = str(here) if after is not None else None
    notice = {"retried": "It will be sent again."}.get(http.query_params.get("done", ""))
    requests = {} if request is not None else await _requests_of(state, items)
    context = {
        "items": items,
        "older_link": older_link,
        "newest_link": newest_link,
        "requests": requests,
        "about": request,
        "notice": notice,
        "resendable": lambda delivery: may_resend(
            who.principal, request or requests.get(delivery.request_id), delivery
        ),
        "back": None,
        "view": None if request is not None else "dead",
    }
    return page(state, http, "deliveries.html", context, who=who)


async def _requests_of(state: AppState, items: list[Delivery]) -> dict[str, HumanRequest]:
    """The requests the dead letters are of, by id, so that each row says which it was
    (one that is gone is left out)."""
    found: dict[str, HumanRequest] = {}
    for request_id in dict.fromkeys(d.request_id for d in items):
        with contextlib.suppress(NotFound):
            found[request_id] = await state.broker.get(request_id)
    return found


@router.post("/inbox/deliveries/{delivery_id}/retry", name="inbox_delivery_retry", response_class=HTMLResponse)
async def retry(http: HttpRequest, state: State, delivery_id: str) -> Response:
    found = await posted(http, state, http.url_for("inbox_deliveries").path)
    if isinstance(found, Response):
        return found
    who, values = found
    try:
        known = await state.broker.get_delivery(delivery_id)
    except (NotFound, InvalidRequest):  # an id no delivery could have is no delivery either
        return refusal(state, http, 404, "There is no such delivery.", who)
    if not await may_see_delivery(state.broker, who.principal, known):
        return refusal(
            state, http, 403, "This delivery is neither to you nor about a request of yours or your team's.", who
        )
    try:
        await state.broker.retry_delivery(delivery_id)
    except AlreadySettled as exc:
        return refusal(state, http, 409, f"This delivery is {exc.status}, not a dead letter.", who)
    if state.delivery is not None:
        state.delivery.wake()
    if safe_next(values.get("next")):  # back to the page it was sent again from (a request's own)
        return RedirectResponse(values.get("next"), status_code=303)
    back = http.url_for("inbox_deliveries").include_query_params(done="retried")
    about = values.get("request")
    if about:
        back = back.include_query_params(request=about)
    return RedirectResponse(str(back), status_code=303)
