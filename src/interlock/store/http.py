"""A store that is a running interlock server, reached over its HTTP API.

`interlock.connect("http://host:8765", token=...)` gives the same Broker on top of this
store, so agent code does not change when it moves from a laptop to a cluster. The server
is the authority: it checks answers again, applies who-may-do-what, and expires requests;
this side turns each store operation into one API call. The server's event stream is the
wake-up hint (reconnecting with Last-Event-ID), backed by the broker's bounded poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from .._backoff import Backoff
from ..approvals import is_marked
from ..errors import Closed, Forbidden, InvalidAnswer, InvalidRequest, NotFound
from ..model import (
    Event,
    Request,
    Response,
    Status,
    ask_to_dict,
    origin_to_dict,
    request_from_dict,
)
from ..principals import IssuedSession, IssuedToken, LiveToken, Principal, WebSession
from ..redact import redact_url
from . import EventQuery, Query
from ._url import url_options

__all__ = ["HttpStore", "from_url"]

_CACHE = 10_000  # requests kept by id
_BUFFER = 10_000  # stream events kept for changes()

log = logging.getLogger("interlock")


_OPTIONS = {"token": str, "poll_interval": float}


def from_url(url: str, **options: Any) -> HttpStore:
    """`http(s)://host:port`; `token=` or `INTERLOCK_TOKEN` authenticates."""
    ours, _ = url_options(url, _OPTIONS, options)
    token = ours.pop("token", None) or os.environ.get("INTERLOCK_TOKEN")
    return HttpStore(url.split("?", 1)[0], token=token, **ours)


class HttpStore:
    shared = True

    def __init__(self, base_url: str, *, token: str | None = None, poll_interval: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.poll_interval = poll_interval
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client: httpx.AsyncClient | None = None
        self._stream_task: asyncio.Task[None] | None = None
        # What the event stream has brought: requests by id (a settled one is final), and
        # the events after `_floor`, complete while `_streaming`, for `changes()`.
        self._known: dict[str, Request] = {}
        self._buffer: deque[Event] = deque()
        self._floor = 0
        self._streaming = False
        self._caller: Mapping[str, Any] = {}  # the token's principal, from /whoami

    async def open(self) -> None:
        self._client = httpx.AsyncClient(
            base_url=f"{self.base_url}/api/v1", headers=self._headers, timeout=httpx.Timeout(30.0)
        )
        try:
            whoami = await self._call("GET", "/whoami")  # fail now, clearly, on a wrong address or token
            _raise_for(whoami)
            self._caller = whoami.json()
            self._floor = await self.last_event_id()  # the event stream starts from here
        except BaseException:
            await self._client.aclose()
            raise

    async def aclose(self) -> None:
        if self._stream_task is not None:
            self._stream_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._stream_task
        if self._client is not None:
            await self._client.aclose()

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            raise RuntimeError("the HTTP store is not open")
        return self._client

    async def _call(self, method: str, path: str, *, json: Any = None, params: Any = None) -> httpx.Response:
        try:
            response = await self.client.request(method, path, json=json, params=params)
        except httpx.TransportError as exc:
            raise ConnectionError(f"cannot reach the interlock server at {redact_url(self.base_url)}: {exc}") from exc
        if response.status_code in (401, 403):
            raise Forbidden(_detail(response), status=response.status_code)
        return response

    # -- the wake-up stream -------------------------------------------------------------

    def on_foreign_change(self, callback: Callable[[], None]) -> None:
        self._stream_task = asyncio.get_running_loop().create_task(self._follow(callback))

    async def _follow(self, callback: Callable[[], None]) -> None:
        last = str(self._floor)
        backoff = Backoff(0.1, 5.0)
        async with httpx.AsyncClient(
            base_url=f"{self.base_url}/api/v1", headers=self._headers, timeout=httpx.Timeout(30.0, read=None)
        ) as client:
            while True:
                try:
                    async with aconnect_sse(client, "GET", "/events/stream", headers={"Last-Event-ID": last}) as source:
                        source.response.raise_for_status()
                        self._streaming = True
                        backoff.reset()
                        async for sse in source.aiter_sse():
                            if not sse.id or sse.event == "dropped":
                                continue
                            last = sse.id
                            self._received(_event(json.loads(sse.data)))
                            callback()
                except (httpx.HTTPError, ValueError) as exc:
                    log.debug("event stream from %s dropped (%s); reconnecting", redact_url(self.base_url), exc)
                finally:
                    self._streaming = False
                callback()  # while disconnected, changes() reads the log over HTTP
                await asyncio.sleep(backoff.next())  # back off before reconnecting, at most 5 s

    def _received(self, event: Event) -> None:
        if event.request is not None:
            self._remember(event.request)
        self._buffer.append(event)
        while len(self._buffer) > _BUFFER:
            self._floor = self._buffer.popleft().id

    def _remember(self, request: Request) -> None:
        known = self._known.get(request.id)
        if known is not None and known.status is not Status.PENDING:
            return  # settled is final: never go back to an older snapshot
        self._known[request.id] = request
        if len(self._known) > _CACHE:
            del self._known[next(iter(self._known))]

    # -- requests ------------------------------------------------------------------------

    async def insert(self, request: Request) -> tuple[Request, bool]:
        body: dict[str, Any] = {
            "asks": [ask_to_dict(a) for a in request.asks],
            "kind": request.kind,
            "to": request.to,
            "title": request.title,
            "details": request.details,
            "context": request.context,
            "idempotency_key": request.idempotency_key,
            "origin": origin_to_dict(request.origin),
            "requester": request.requester,
        }
        if request.expires_at is not None:
            body["timeout"] = max((request.expires_at - request.created_at).total_seconds(), 0.001)
        # The approval gate's requests go through the one route that may mark them.
        response = await self._call("POST", "/approvals" if is_marked(request) else "/requests", json=body)
        _raise_for(response)
        stored = request_from_dict(response.json())
        self._remember(stored)
        return stored, response.status_code == 201

    async def settle(self, request: Request) -> Request | None:
        response = request.response or Response(at=request.created_at)
        path = f"/requests/{request.id}"
        if request.status is Status.ANSWERED:
            # No `via`: the server records the surface itself ("api").
            body = {"answers": dict(response.answers), "reason": response.reason, "by": response.by}
            result = await self._call("POST", f"{path}/answer", json=body)
        elif request.status is Status.REJECTED:
            result = await self._call("POST", f"{path}/reject", json={"reason": response.reason})
        elif request.status is Status.EXPIRED:
            result = await self._call("POST", f"{path}/expire")
        else:
            body = {"reason": response.reason, "cause": response.cause or "cancelled"}
            result = await self._call("POST", f"{path}/cancel", json=body)
        if result.status_code in (404, 409):
            return None
        _raise_for(result)
        stored = request_from_dict(result.json())
        self._remember(stored)
        return stored

    async def settle_pending(
        self, status: Status, response: Response, *, channel: str | None = None, due: datetime | None = None
    ) -> list[Request]:
        if due is not None:
            return []  # the server expires requests on time
        result = await self._call("POST", "/close", json={"channel": channel})
        _raise_for(result)
        return [request_from_dict(r) for r in result.json()]

    async def close_channel(self, channel: str, response: Response, *, requester: str | None = None) -> list[Request]:
        # The server decides whose closure it is: everyone's for an admin, else the caller's.
        result = await self._call("POST", "/close", json={"channel": channel})
        _raise_for(result)
        return [request_from_dict(r) for r in result.json()]

    async def reopen_channel(self, channel: str, *, requester: str | None = None) -> bool:
        result = await self._call("POST", "/reopen", json={"channel": channel})
        _raise_for(result)
        return bool(result.json()["reopened"])

    async def append_event(self, type: str, data: Mapping[str, Any]) -> Event:
        fields = {k: data.get(k) for k in ("message", "to", "session", "agent", "run", "data")}
        result = await self._call("POST", "/inform", json=fields)
        _raise_for(result)
        return _event(result.json())

    async def consume(self, request_id: str, by: str | None, at: datetime) -> bool:
        result = await self._call("POST", f"/requests/{request_id}/consume", json={"by": by})
        if result.status_code == 404:
            return False
        _raise_for(result)
        return bool(result.json()["consumed"])

    def requester_of(self, requester: str | None) -> str | None:
        if self._caller.get("kind") in (None, "admin"):
            return requester  # a server without auth records the requester it is given
        return str(self._caller["name"])

    async def next_expiry(self) -> datetime | None:
        return None

    async def get(self, request_id: str, *, fresh: bool = True) -> Request | None:
        known = self._known.get(request_id)
        if known is not None and (known.status is not Status.PENDING or not fresh):
            return known
        result = await self._call("GET", f"/requests/{request_id}")
        if result.status_code == 404:
            return None
        _raise_for(result)
        request = request_from_dict(result.json())
        self._remember(request)
        return request

    async def list(self, query: Query) -> Sequence[Request]:
        params: dict[str, Any] = {"limit": min(query.limit, 1000), "order": query.order}
        for name in ("recipient", "requester", "kind", "session", "channel", "agent", "run"):
            if (value := getattr(query, name)) is not None:
                params[name] = value
        if query.status is not None:
            params["status"] = query.status.value
        if query.after is not None:
            params["cursor"] = query.after
        result = await self._call("GET", "/requests", params=params)
        _raise_for(result)
        return [request_from_dict(r) for r in result.json()["items"]]

    async def events(self, after: int = 0, limit: int = 500) -> Sequence[Event]:
        result = await self._call("GET", "/events", params={"after": after, "limit": limit})
        _raise_for(result)
        events = [_event(e) for e in result.json()["events"]]
        for event in events:
            if event.request is not None and event.request.status is not Status.PENDING:
                self._remember(event.request)
        return events

    async def find_events(self, query: EventQuery) -> Sequence[Event]:
        # The server applies who may see what from the token; `involving` is its business.
        params: dict[str, Any] = {"after": query.after, "limit": query.limit}
        params |= {k: v for k in ("request", "session", "run") if (v := getattr(query, k)) is not None}
        result = await self._call("GET", "/events", params=params)
        _raise_for(result)
        until = query.until
        return [e for e in map(_event, result.json()["events"]) if until is None or e.id <= until]

    async def changes(self, after: int = 0, limit: int = 500) -> Sequence[tuple[int, str, str | None]]:
        if self._streaming and after >= self._floor:
            while self._buffer and self._buffer[0].id <= after:
                self._floor = self._buffer.popleft().id  # the follow loop has seen these
            return [(e.id, e.type, e.request_id) for e in itertools.islice(self._buffer, limit)]
        return [(e.id, e.type, e.request_id) for e in await self.events(after, limit)]

    async def last_event_id(self) -> int:
        result = await self._call("GET", "/events", params={"limit": 0})
        _raise_for(result)
        return int(result.json()["last_event_id"])

    # -- principals live on the server ---------------------------------------------------

    async def save_principal(self, principal: Principal) -> None:
        raise _server_side()

    async def get_principal(self, name: str) -> Principal | None:
        raise _server_side()

    async def list_principals(self) -> Sequence[Principal]:
        raise _server_side()

    async def save_token(self, token: IssuedToken) -> None:
        raise _server_side()

    async def principal_for_token(self, token_hash: str) -> Principal | None:
        raise _server_side()

    async def live_token(self, token_hash: str) -> LiveToken | None:
        raise _server_side()

    async def revoke_tokens(self, *, token_id: str | None = None, principal: str | None = None) -> int:
        raise _server_side()

    async def start_session(self, token_hash: str, session: IssuedSession) -> WebSession | None:
        raise _server_side()

    async def get_session(self, session_hash: str, now: datetime) -> WebSession | None:
        raise _server_side()

    async def end_session(self, session_hash: str) -> WebSession | None:
        raise _server_side()


def _server_side() -> Forbidden:
    return Forbidden("principals and tokens are managed on the server: run `interlock token` there")


def _event(data: Mapping[str, Any]) -> Event:
    request = data.get("request")
    return Event(
        id=int(data["id"]),
        type=data["type"],
        at=datetime.fromisoformat(data["at"]),
        request_id=data.get("request_id"),
        request=request_from_dict(request) if request else None,
        data=data.get("data") or {},
    )


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", response.text))
    except ValueError:
        return response.text or response.reason_phrase


def _raise_for(response: httpx.Response) -> None:
    """Turn a problem response back into the error the server raised."""
    if response.is_success:
        return
    code = ""
    with contextlib.suppress(ValueError):
        code = response.json().get("code", "")
    detail = _detail(response)
    if code == "invalid_answer":
        raise InvalidAnswer(detail, ask_id=response.json().get("ask_id"))
    if code == "invalid_request":
        raise InvalidRequest(detail)
    if code == "not_found":
        raise NotFound("", message=detail)
    if code == "closed":
        raise Closed(None, detail)
    response.raise_for_status()
