"""The remote broker over a real server: its calls are the API's, one call to ask and wait."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import interlock
from interlock import Cancelled, InvalidAnswer, Status, Text
from interlock.remote import RemoteBroker

pytestmark = pytest.mark.anyio
BOUND = 10


class Counting(httpx.AsyncBaseTransport):
    """A transport that records each call it makes."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.calls: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.calls.append(f"{request.method} {request.url.path}")
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class Recording(Counting):
    """A transport that also keeps the JSON body of each create it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.created: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/requests"):
            self.created.append(json.loads(request.content))
        return await super().handle_async_request(request)


@pytest.fixture
def base(tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]) -> Iterator[str]:
    with serve(f"sqlite:///{tmp_path / 'remote.db'}", auth=False) as url:
        yield url


async def test_connect_over_http_gives_a_remote_broker(base: str) -> None:
    async with interlock.connect(base) as broker:
        assert isinstance(broker, RemoteBroker)
        assert not hasattr(broker, "store")


async def test_ask_is_one_call_when_the_answer_comes_within_the_long_poll(base: str) -> None:
    counting = Counting()
    async with interlock.connect(base, transport=counting) as asker, interlock.connect(base) as person:
        opened = len(counting.calls)

        after = await person.last_event_id()

        async def answer_when_asked() -> None:
            async for event in person.events(after=after, follow=True):
                if event.type == "created" and event.request_id is not None:
                    await person.resolve(event.request_id, "Ada")
                    return

        with anyio.fail_after(BOUND):
            async with anyio.create_task_group() as tg:
                tg.start_soon(answer_when_asked)
                assert await asker.ask(Text("Name?"), to="alice") == "Ada"
        assert counting.calls[opened:] == ["POST /api/v1/requests"]


async def test_a_client_that_hangs_up_on_create_and_wait_withdraws_its_request(base: str) -> None:
    body = {"to": "alice", "asks": [{"type": "text", "id": "name", "prompt": "Name?"}]}
    async with httpx.AsyncClient(base_url=f"{base}/api/v1", timeout=httpx.Timeout(5, read=0.3)) as api:
        with pytest.raises(httpx.ReadTimeout):
            await api.post("/requests", params={"wait": 30}, json=body)
    async with interlock.connect(base) as broker:
        (created,) = (await broker.list()).items
        request = await broker.watch(created.id, timeout=BOUND)
        assert request.status is Status.CANCELLED
        assert request.response is not None and request.response.cause == "withdrawn"
        with pytest.raises(Cancelled):
            await broker.wait(request.id)


async def test_an_answer_is_checked_by_the_server_and_its_refusal_names_the_ask(base: str) -> None:
    async with interlock.connect(base) as broker:
        request = await broker.create(interlock.Choice("Colour?", ["red", "green"], id="colour"), to="alice")
        with pytest.raises(InvalidAnswer) as refused:
            await broker.resolve(request.id, "blue")
        assert refused.value.ask_id == "colour"
        assert (await broker.get(request.id)).status is Status.PENDING


async def test_a_timeout_and_a_deadline_are_sent_as_given(base: str) -> None:
    # A deadline went as a timeout (the instant moved by the round trip, its offset lost):
    # a timeout counts from when the server receives it, an instant is the server's clock's.
    recording = Recording()
    deadline = datetime(2999, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=-7)))
    async with interlock.connect(base, transport=recording) as broker:
        await broker.create(Text("In a minute?"), timeout=timedelta(minutes=1))
        await broker.create(Text("Then?"), expires_at=deadline)
        await broker.create(Text("Whichever first?"), expires_at=deadline, timeout=60)
        await broker.create_detached(Text("Past?"), expires_at=datetime(2000, 1, 1, tzinfo=UTC))
        assert broker._timeouts == {}  # type: ignore[attr-defined]  # forgotten once sent, not kept for good
    sent = [{k: body[k] for k in ("timeout", "expires_at") if k in body} for body in recording.created]
    assert sent == [
        {"timeout": 60.0},
        {"expires_at": "2999-01-02T03:04:05.000006-07:00"},
        {"timeout": 60.0, "expires_at": "2999-01-02T03:04:05.000006-07:00"},
        {"expires_at": "2000-01-01T00:00:00+00:00"},
    ]


async def test_a_remote_broker_forgets_a_request_it_made_once_it_sees_it_settled(base: str) -> None:
    # `close()` withdraws what this broker made and is still pending. A long-lived agent's
    # broker had kept every request whose wait it gave up on, or that it saw settled
    # without waiting, up to 100,000 of them, and its `close()` asked the server to cancel
    # each one again.
    counting = Counting()
    async with interlock.connect(base, transport=counting) as agent, interlock.connect(base) as person:
        abandoned = await agent.create(Text("Name?"), to="alice")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(agent.wait(abandoned.id), 0.2)  # gives up: the request is withdrawn
        assert (await person.get(abandoned.id)).status is Status.CANCELLED
        answered = await agent.create(Text("Branch?"), to="alice")
        assert await person.resolve(answered.id, "main")
        assert (await agent.get(answered.id)).status is Status.ANSWERED
        expired = await agent.create(Text("Tag?"), to="alice")
        assert await agent.expire(expired.id)
        pending = await agent.create(Text("Colour?"), to="alice")
        before = len(counting.calls)
        await agent.close()
        assert counting.calls[before:] == [f"POST /api/v1/requests/{pending.id}/cancel"]
        assert (await person.get(pending.id)).status is Status.CANCELLED


class OlderServer(Counting):
    """A server from before `keep_run`: its long poll refuses the parameter, as it refuses
    any query parameter a route does not take (422 `invalid_request`)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/wait") and "keep_run" in request.url.params:
            self.calls.append(f"refused {request.url.path}")
            detail = "unknown query parameter 'keep_run': this route takes timeout"
            body = {"type": "about:blank", "title": "Unprocessable Content", "status": 422}
            return httpx.Response(422, json={**body, "code": "invalid_request", "detail": detail})
        return await super().handle_async_request(request)


async def test_a_wait_goes_on_against_a_server_older_than_keep_run(base: str) -> None:
    # The client's wait long-polls with keep_run: a server older than it refused every wait
    # with InvalidRequest ("unknown query parameter 'keep_run'"), so no wait could end.
    older = OlderServer()
    async with interlock.connect(base, transport=older) as agent, interlock.connect(base) as person:
        for name in ("Ada", "Grace"):
            request = await agent.create(Text("Name?"), to="alice")
            waiting = asyncio.ensure_future(agent.wait(request.id, timeout=BOUND))
            await person.resolve(request.id, name)
            with anyio.fail_after(BOUND):
                assert (await waiting).answers == {"text": name}
    assert sum(call.startswith("refused") for call in older.calls) == 1  # asked once, then not again
