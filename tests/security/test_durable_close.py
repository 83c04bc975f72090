"""Closing a channel holds on every process and node that shares the store, until it is
reopened; and `create` takes every field of `Origin`, `delegation` included."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import get_type_hints

import anyio
import pytest
from limits_support import BOUND, TEXT, api, issue_tokens

import interlock
from interlock import Broker, Closed, Origin, Status, Text
from interlock.broker import OriginFields

pytestmark = pytest.mark.anyio

SHARED = ["sqlite", "postgresql"]


@pytest.mark.parametrize("backend", SHARED)
async def test_a_channel_closed_by_one_broker_refuses_creates_through_another(
    connect: Callable[..., Broker],
) -> None:
    async with connect() as first, connect() as second:
        waiting = await second.create(Text("Deploy?"), channel="room-1")
        await first.close("room-1")
        with pytest.raises(Closed):
            await second.create(Text("Deploy again?"), channel="room-1")
        assert (await second.get(waiting.id)).status is Status.CANCELLED
        assert (await second.create(Text("Elsewhere?"), channel="room-2")).status is Status.PENDING
    async with connect() as later:  # a process that starts after the close
        with pytest.raises(Closed):
            await later.create(Text("Still closed?"), channel="room-1")


@pytest.mark.parametrize("backend", SHARED)
async def test_a_close_racing_creates_on_another_broker_leaves_nothing_pending_there(
    connect: Callable[..., Broker],
) -> None:
    async with connect() as closer, connect() as creator:
        created: list[str] = []
        under_way, refused = asyncio.Event(), asyncio.Event()

        async def create() -> None:
            for _ in range(5000):  # bounded: the close lands long before
                try:
                    created.append((await creator.create(Text("Q?"), channel="x")).id)
                except Closed:
                    refused.set()
                    return
                if len(created) >= 20:
                    under_way.set()
                await asyncio.sleep(0)  # a SQLite write never yields: let the close in between

        with anyio.fail_after(BOUND * 3):
            creating = [asyncio.create_task(create()) for _ in range(4)]
            await under_way.wait()  # creates are in flight (on PostgreSQL) when the close runs
            await closer.close("x")
            await asyncio.gather(*creating)
        assert refused.is_set()
        assert not await closer.pending(channel="x")
        for request_id in created:
            assert (await closer.get(request_id)).status is Status.CANCELLED


async def test_a_closed_channel_can_be_reopened(broker: Broker) -> None:
    await broker.close("room")
    with pytest.raises(Closed):
        await broker.create(Text("Q?"), channel="room")
    assert await broker.reopen("room")
    assert not await broker.reopen("room")  # nothing left to reopen
    assert (await broker.create(Text("Q?"), channel="room")).status is Status.PENDING


@pytest.mark.parametrize("backend", ["http"])
async def test_closing_one_client_without_a_channel_withdraws_its_work_but_leaves_the_server_open(
    connect: Callable[..., Broker],
) -> None:
    async with connect() as leaving, connect() as staying:
        mine = await leaving.create(Text("Q?"))
        theirs = await staying.create(Text("Q?"))
        await leaving.close()
        assert (await staying.get(mine.id)).status is Status.CANCELLED  # its pending work is withdrawn
        assert (await staying.get(theirs.id)).status is Status.PENDING  # another client's is not
        with pytest.raises(Closed):
            await leaving.create(Text("More?"))  # the closed client refuses
        assert (await staying.create(Text("More?"))).status is Status.PENDING  # a shutdown, not a closure


async def test_over_http_a_principal_closes_a_channel_for_its_own_requests_only(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]]
) -> None:
    db = f"sqlite:///{tmp_path / 'close.db'}"
    tokens = await issue_tokens(db)
    async with serve_apart(db, auth=True) as base:
        async with (
            interlock.connect(base, token=tokens["alice-bot"]) as mine,
            interlock.connect(base, token=tokens["bob-bot"]) as theirs,
        ):
            other = await theirs.create(Text("Q?"), channel="chat")
            await mine.close("chat")
            with pytest.raises(Closed):
                await mine.create(Text("Q?"), channel="chat")
            assert (await theirs.get(other.id)).status is Status.PENDING  # bob-bot's "chat" goes on
            assert (await theirs.create(Text("Q?"), channel="chat")).status is Status.PENDING
            assert await mine.reopen("chat")
            assert (await mine.create(Text("Q?"), channel="chat")).status is Status.PENDING
        async with api(base, tokens["alice-bot"]) as client:
            closed = await client.post("/close", json={"channel": "chat"})
            assert closed.status_code == 200
            refused = await client.post("/requests", json={**TEXT, "origin": {"channel": "chat"}})
            assert refused.status_code == 409 and refused.json()["code"] == "closed"


async def test_create_takes_delegation_like_every_other_origin_field() -> None:
    async with interlock.connect("memory://") as broker:
        request = await broker.create(Text("Deploy?"), agent="worker", delegation=["planner", "lead"])
    assert request.origin.delegation == ("planner", "lead")
    assert request.origin.agent == "worker"


def test_the_origin_keywords_of_create_are_the_fields_of_origin() -> None:
    assert set(get_type_hints(OriginFields)) == set(Origin.__dataclass_fields__)
