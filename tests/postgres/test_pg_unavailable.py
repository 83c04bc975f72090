"""A server on a PostgreSQL database that refuses connections for a while (`ALLOW_CONNECTIONS
false` and its connections ended, as a restart or a failover does): every call answers 503
`unavailable` with `Retry-After`, and nothing else; a page of the web inbox says so; the
remote broker's wait and an event stream outlive the outage (the stream's client stays
connected, and gets every event once, in order); all of it serves again once the database
takes connections."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re

import anyio
import pytest
from httpx_sse import aconnect_sse
from pg_support import Partition, allow_connections, refuse_connections, refusing_connections

import interlock
from asgi_support import serve_in_process
from interlock import Text, Unavailable
from interlock.broker import LocalBroker
from interlock.channels.delivery import DeliveryLoop
from interlock.routing import routing_from_dict
from interlock.server import app as app_module
from log_support import logged

pytestmark = pytest.mark.anyio

BOUND = 30  # seconds: the most any one wait here may take
TEXT = {"asks": [{"type": "text", "prompt": "Name?"}]}


async def test_every_call_answers_503_while_the_database_refuses_connections_and_serves_after(pg_url: str) -> None:
    async with serve_in_process(pg_url, auth=False) as server, server.client() as client:
        asked = (await client.post("/api/v1/requests", json=TEXT)).json()
        with anyio.fail_after(BOUND):
            async with refusing_connections(pg_url):
                refused = [
                    await client.get(f"/api/v1/requests/{asked['id']}"),
                    await client.get("/api/v1/requests"),
                    await client.post(f"/api/v1/requests/{asked['id']}/answer", json={"answer": "Ada"}),
                    await client.post("/api/v1/requests", json={**TEXT, "idempotency_key": "names-1"}),
                    await client.get("/healthz"),  # a load balancer takes the node out meanwhile
                ]
        for response in refused:
            assert response.status_code == 503, response.text
            assert response.headers["retry-after"] == "1"
            assert response.headers["content-type"] == "application/problem+json"
            assert (response.json()["code"], response.json()["retry_after"]) == ("unavailable", 1)
            assert "not currently accepting connections" in response.json()["detail"]
        # Nothing changed, and everything serves again.
        assert [r["id"] for r in (await client.get("/api/v1/requests")).json()["items"]] == [asked["id"]]
        answered = await client.post(f"/api/v1/requests/{asked['id']}/answer", json={"answer": "Ada"})
        assert answered.status_code == 200 and answered.json()["status"] == "answered"
        assert (await client.post("/api/v1/requests", json={**TEXT, "idempotency_key": "names-1"})).status_code == 201
        assert (await client.get("/healthz")).status_code == 200


async def test_the_inbox_page_says_the_store_is_unavailable_with_503(pg_url: str) -> None:
    async with serve_in_process(pg_url, auth=False) as server, server.client() as browser:
        headers = {"Accept": "text/html"}
        with anyio.fail_after(BOUND):
            async with refusing_connections(pg_url):
                page = await browser.get("/", headers=headers)
        assert page.status_code == 503
        assert page.headers["retry-after"] == "1"
        assert page.headers["content-type"].startswith("text/html")
        assert (
            "Unavailable for now" in page.text and "The store is unavailable for now: try again shortly." in page.text
        )
        assert "Traceback" not in page.text and "PostgreSQL" not in page.text
        assert (await browser.get("/", headers=headers)).status_code == 200


async def test_the_remote_brokers_wait_outlives_the_outage_and_a_write_raises_it(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with serve_in_process(pg_url, auth=False) as server, server.connect() as broker:
        request = await broker.create(Text("Name?"))
        with (
            caplog.at_level(logging.DEBUG, logger="interlock"),  # each poll again is a debug line
            logged("interlock", f"waiting on {request.id}") as refused,
            anyio.fail_after(BOUND),
        ):
            async with refusing_connections(pg_url):
                with pytest.raises(Unavailable) as caught:  # a write: raised to the caller
                    await broker.resolve(request.id, "Ada")
                assert caught.value.retry_after == 1.0
                waiting = asyncio.ensure_future(broker.wait(request.id, timeout=BOUND))
                for _ in range(2):  # refused, polled again and refused again: the wait goes on
                    refused.clear()
                    await refused.wait()
                assert not waiting.done()
            assert await broker.resolve(request.id, "Ada")
            response = await waiting
        assert response.answers == {request.asks[0].id: "Ada"}
        outage = [r for r in caplog.records if r.name == "interlock" and f"waiting on {request.id}" in r.getMessage()]
        assert [r.levelno for r in outage].count(logging.WARNING) == 1  # one warning, however many polls


async def test_an_event_stream_outlives_the_outage_and_sends_every_event_once(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """And each outage is one warning as it begins and one line as it ends, for the stream's
    replay and for the hub that follows the log (which sees the store back before anything
    new is appended), however many times they try meanwhile."""
    async with serve_in_process(pg_url, auth=False) as server, server.client("/api/v1") as api:
        first = (await api.post("/requests", json=TEXT)).json()
        seen: list[str] = []
        with anyio.fail_after(BOUND), caplog.at_level(logging.DEBUG, logger="interlock.server"):
            await refuse_connections(pg_url)
            try:
                with logged("interlock.server", "a stream reading the store failed") as stalled:
                    # Opened while the database is away: its replay from event 0 waits for it.
                    async with aconnect_sse(api, "GET", "/events/stream", headers={"Last-Event-ID": "0"}) as source:
                        assert source.response.status_code == 200
                        events = source.aiter_sse()
                        for _ in range(2):  # failed, tried again and failed again
                            stalled.clear()
                            await stalled.wait()
                        await allow_connections(pg_url)
                        while not seen:
                            sse = await anext(events)
                            if sse.event in ("created", "dropped"):
                                seen.append(sse.id or sse.event)
                        # Away again while the stream follows live events: the hub waits for it.
                        with (
                            logged("interlock.server", "following the event log failed") as hub_stalled,
                            logged("interlock.server", "following the event log works again") as hub_back,
                        ):
                            async with refusing_connections(pg_url):
                                for _ in range(2):
                                    hub_stalled.clear()
                                    await hub_stalled.wait()
                            await hub_back.wait()  # with nothing appended since
                        second = (await api.post("/requests", json=TEXT)).json()
                        while len(seen) < 2:
                            sse = await anext(events)
                            if sse.event in ("created", "dropped"):
                                seen.append(sse.id or sse.event)
            finally:
                await allow_connections(pg_url)
        stored = (await api.get("/events")).json()["events"]
        assert [e["request_id"] for e in stored] == [first["id"], second["id"]]
        assert seen == [str(e["id"]) for e in stored]  # each once, in order, none dropped
    for what in ("a stream reading the store", "following the event log"):
        # W: a warning as an outage begins, D: a failure while it lasts, I: it works again.
        # (The hub may meet the first outage too, between its polls or not: one or two.)
        letters = {logging.WARNING: "W", logging.DEBUG: "D", logging.INFO: "I"}
        said = "".join(
            letters[r.levelno]
            for r in caplog.records
            if r.getMessage().startswith((f"{what} failed", f"{what} works again"))
        )
        assert re.fullmatch(r"(WD*I)+", said) and re.search(r"WD+I", said), (what, said)  # one retried


async def test_each_background_loop_logs_an_outage_once_as_it_begins_and_once_as_it_ends(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A store down for an hour was a warning a second from the expiry loop, one a poll
    from the event log's reader and one a call that met a dead connection: now two lines
    for each loop, however long the outage."""
    routing = routing_from_dict({"channels": {"hook": {"type": "webhook", "url": "http://127.0.0.1:9/"}}})
    loops = ("expiring overdue requests", "reading the event log", "the delivery loop")
    async with interlock.connect(pg_url, poll_interval=0.05) as broker:
        assert isinstance(broker, LocalBroker)
        delivery = DeliveryLoop(broker.outbox, routing, poll_interval=0.05)
        delivery.start()
        try:
            with (
                caplog.at_level(logging.DEBUG, logger="interlock"),  # where the retries go
                contextlib.ExitStack() as watching,
                anyio.fail_after(BOUND),
            ):
                failing = [watching.enter_context(logged("interlock", f"{loop} failed")) for loop in loops]
                back = [watching.enter_context(logged("interlock", f"{loop} works again")) for loop in loops]
                async with refusing_connections(pg_url):
                    for failed in failing:
                        for _ in range(2):  # failed, tried again and failed again
                            failed.clear()
                            await failed.wait()
                for worked in back:
                    await worked.wait()
        finally:
            await delivery.stop()
    for loop in loops:
        said = [r for r in caplog.records if r.getMessage().startswith(f"{loop} failed")]
        assert [r.levelno for r in said].count(logging.WARNING) == 1, [r.getMessage() for r in said]
        assert len(said) >= 2
        assert [r.levelno for r in caplog.records if r.getMessage().startswith(f"{loop} works again")] == [logging.INFO]
    lost = [r for r in caplog.records if r.getMessage().startswith("a PostgreSQL connection was lost")]
    assert [r.levelno for r in lost].count(logging.WARNING) == 1 and len(lost) > 1


async def test_a_routing_change_that_meets_the_outage_ends_the_streams_of_whom_it_drops_with_one_warning(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Who a routing change took out of a team is looked up in the store; with the store
    away, everyone it no longer lists counts as gone (their streams end, and they reconnect
    to what they may see), said in one warning without a traceback."""
    before = routing_from_dict({"teams": {"ops": {"members": ["alice", "bob", "carol"]}}})
    after = routing_from_dict({"teams": {"ops": {"members": ["bob"]}}})
    async with serve_in_process(pg_url, auth=False, routing=before) as server:
        state = server.app.state.interlock
        changes = state.hub.access_changes
        with anyio.fail_after(BOUND), caplog.at_level(logging.WARNING, logger="interlock.server"):
            async with refusing_connections(pg_url):
                await state.delivery.replace(after, {}, state.delivery.context)
    assert state.hub.access_changes == changes + 1  # one team left, by both of them
    (said,) = [r for r in caplog.records if "routing change" in r.getMessage()]
    assert said.levelno == logging.WARNING and said.exc_info is None
    assert "could not be looked up" in said.getMessage() and "ops: alice, carol" in said.getMessage()


async def test_healthz_answers_503_within_its_bound_when_the_database_stops_answering_without_refusing(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition (or a failover whose old address is gone): nothing refuses, nothing
    answers. A load balancer's probe gets its 503 within the bound and takes the node out,
    rather than waiting for the driver to give up (two minutes); it serves once healed."""
    monkeypatch.setattr(app_module, "HEALTH_TIMEOUT", 0.5)
    async with (
        Partition() as partition,
        serve_in_process(partition.url(pg_url), auth=False) as server,
        server.client() as client,
    ):
        assert (await client.get("/healthz")).status_code == 200
        partition.cut()
        with anyio.fail_after(BOUND):
            probed = await client.get("/healthz")
        assert probed.status_code == 503 and probed.headers["retry-after"] == "1"
        assert "did not answer within 0.5 s" in probed.json()["detail"]
        partition.heal()
        with anyio.fail_after(BOUND):
            assert (await client.get("/healthz")).status_code == 200


async def test_a_new_connection_to_a_database_that_never_answers_is_given_up_after_connect_timeout(
    pg_url: str,
) -> None:
    async with Partition() as partition:
        partition.cut()
        url = partition.url(pg_url) + "?connect_timeout=0.3"
        with anyio.fail_after(BOUND), pytest.raises(Unavailable) as caught:
            async with interlock.connect(url):
                pass
    assert "did not answer a new connection within 0.3 s (connect_timeout)" in str(caught.value)
    with pytest.raises(ValueError, match="connect_timeout must be a number of seconds above 0"):
        interlock.connect(pg_url + "?connect_timeout=0")
