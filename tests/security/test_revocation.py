"""Revoking a token ends the streams it opened: the API's event stream and the web inbox's,
on every node, whoever revokes it (the CLI in another process, on another machine)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import ServerSentEvent, aconnect_sse
from poll_support import Entered

import interlock
from interlock import Confirm
from interlock.principals import Principal, issue_token
from interlock.routing import routing_from_dict
from interlock.server.auth import Auth
from interlock.server.stream import Hub
from serve_support import serve_many

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
BOUND = 20
HELD = 120  # seconds a long poll asks to be held: far past BOUND, so only an answer ends it in time
INTERLOCK = [sys.executable, "-m", "interlock"]
APPROVAL = {"kind": "approval", "asks": [{"type": "confirm", "id": "ok", "prompt": "Deploy?"}]}


@dataclass
class People:
    """Tokens by name; alice has two (`alice` and `alice-2`), so one can outlive the other."""

    tokens: dict[str, str]
    ids: dict[str, str]


async def add_people(db: str, bot_owner: str = "alice") -> People:
    people = People({}, {})
    async with interlock.connect(db) as broker:
        for principal in (Principal("alice", "human"), Principal("bob", "human"), Principal("bot", "agent", bot_owner)):
            await broker.store.save_principal(principal)
        for key, name in (("alice", "alice"), ("alice-2", "alice"), ("bob", "bob"), ("bot", "bot")):
            token = issue_token(name, datetime.now(UTC))
            await broker.store.save_token(token)
            people.tokens[key], people.ids[key] = token.secret, token.id
    return people


async def sign_in(client: httpx.AsyncClient, token: str) -> None:
    """Sign in to the web inbox as a browser would; the client keeps the session cookie."""
    form = await client.get("/signin")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None, form.text
    done = await client.post("/signin", data={"token": token, "csrf": csrf[1]})
    assert done.status_code == 303, done.text
    assert (await client.get("/")).status_code == 200


class Stream:
    """An open server-sent-event stream read in the background until the server ends it."""

    def __init__(self) -> None:
        self.events: list[ServerSentEvent] = []
        self.read = 0
        self.ended = anyio.Event()
        self.received = anyio.Event()

    async def run(self, client: httpx.AsyncClient, url: str, params: dict[str, Any]) -> None:
        try:
            async with aconnect_sse(client, "GET", url, params=params) as source:
                assert source.response.status_code == 200
                async for sse in source.aiter_sse():
                    if sse.event not in ("", "message"):  # not the opening comment
                        self.events.append(sse)
                        self.received.set()
                        self.received = anyio.Event()
        finally:
            self.ended.set()

    async def next_event(self) -> ServerSentEvent:
        """The next event not read yet, waiting for it if need be."""
        with anyio.fail_after(BOUND):
            while len(self.events) == self.read:
                await self.received.wait()
        self.read += 1
        return self.events[self.read - 1]

    @property
    def kinds(self) -> list[str]:
        return [e.event for e in self.events]


async def revoke(db: str, what: str) -> None:
    """`interlock token revoke` in a process of its own."""
    done = await anyio.run_process([*INTERLOCK, "token", "revoke", what, "--db", db], check=False)
    assert done.returncode == 0, done.stderr.decode()


def api(base: str, token: str) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.AsyncClient(base_url=base, headers=headers, timeout=httpx.Timeout(BOUND, read=None))


async def last_event_id(client: httpx.AsyncClient) -> int:
    return int((await client.get("/api/v1/events", params={"limit": 0})).json()["last_event_id"])


@pytest.fixture
def sqlite_world(
    tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]
) -> Iterator[tuple[str, str, People]]:
    db = f"sqlite:///{tmp_path / 'revoke.db'}"
    people = anyio.run(add_people, db)
    with serve(db, auth=True, keepalive=1.0) as base:
        yield base, db, people


async def test_revoking_a_token_in_another_process_ends_the_streams_it_opened_and_only_those(
    sqlite_world: tuple[str, str, People],
) -> None:
    base, db, people = sqlite_world
    async with (
        api(base, people.tokens["alice"]) as alice,
        api(base, people.tokens["alice-2"]) as alice_2,
        api(base, people.tokens["bot"]) as bot,
        api(base, people.tokens["bob"]) as bob,
        httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(BOUND, read=None)) as browser,
        anyio.create_task_group() as tg,
    ):
        await sign_in(browser, people.tokens["alice"])  # a web session on the token to be revoked
        start = await last_event_id(alice)
        doomed, web, kept = Stream(), Stream(), Stream()
        tg.start_soon(doomed.run, alice, "/api/v1/events/stream", {"after": start})
        tg.start_soon(web.run, browser, "/inbox/stream", {"after": start})
        tg.start_soon(kept.run, alice_2, "/api/v1/events/stream", {"after": start})

        first = (await bot.post("/api/v1/requests", json=APPROVAL)).json()
        for stream in (doomed, web, kept):
            assert (await stream.next_event()).event == "created"

        await revoke(db, people.ids["alice"])  # one token, by id, from another process
        with anyio.fail_after(BOUND):
            await doomed.ended.wait()
            await web.ended.wait()
        assert json.loads(doomed.events[-1].data)["reason"] == "the token was revoked"
        assert doomed.kinds == web.kinds == ["created", "dropped"]

        # The other token of the same person streams on, and sees nothing of the revocation.
        second = (await bot.post("/api/v1/requests", json=APPROVAL)).json()
        seen = await kept.next_event()
        assert (seen.event, json.loads(seen.data)["request_id"]) == ("created", second["id"])
        assert not kept.ended.is_set()
        for who in (alice_2, bob, bot):
            types = [e["type"] for e in (await who.get("/api/v1/events", params={"after": start})).json()["events"]]
            assert "token_revoked" not in types

        # The revoked token and its web session are refused from now on.
        assert (await alice.get("/api/v1/requests")).status_code == 401
        assert (await browser.get("/inbox/stream")).status_code == 401
        card = await browser.get(f"/inbox/requests/{first['id']}", headers={"x-interlock-fragment": "1"})
        assert card.status_code == 401

        await revoke(db, "alice")  # every token of hers
        with anyio.fail_after(BOUND):
            await kept.ended.wait()
        assert kept.kinds[-1] == "dropped"
        tg.cancel_scope.cancel()


async def ask_bob(db: str) -> str:
    """A request to bob himself, made on the server's store (by its agent, in this process)."""
    async with interlock.connect(db) as broker:
        return (await broker.create(Confirm("Restart?"), to="bob", requester="bot")).id


async def test_leaving_a_team_ends_the_streams_that_showed_its_requests(
    sqlite_world: tuple[str, str, People], entered: Entered
) -> None:
    """bob, taken out of ops by the CLI in another process: his streams that showed the
    team's requests end, and so does his long poll on the team's request, refused (403)
    while it is still pending; alice's stream goes on."""
    base, db, people = sqlite_world
    async with interlock.connect(db) as broker:
        await broker.add_team_members("ops", ["alice", "bob"])
    to_ops = {**APPROVAL, "to": "ops"}
    async with (
        api(base, people.tokens["alice"]) as alice,
        api(base, people.tokens["bob"]) as bob,
        api(base, people.tokens["bot"]) as bot,
        httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(BOUND, read=None)) as browser,
        anyio.create_task_group() as tg,
    ):
        await sign_in(browser, people.tokens["bob"])
        start = await last_event_id(alice)
        events, interactions, web, stays = Stream(), Stream(), Stream(), Stream()
        tg.start_soon(events.run, bob, "/api/v1/events/stream", {"after": start})
        tg.start_soon(interactions.run, bob, "/api/v1/interactions/stream", {})
        tg.start_soon(web.run, browser, "/inbox/stream", {"after": start})
        tg.start_soon(stays.run, alice, "/api/v1/events/stream", {"after": start})
        team = (await bot.post("/api/v1/requests", json=to_ops)).json()["id"]
        for stream in (events, web, stays):
            assert (await stream.next_event()).event == "created"
        direct = await ask_bob(db)
        for stream in (events, web):
            assert (await stream.next_event()).event == "created"
        seen = [json.loads((await interactions.next_event()).data)["id"] for _ in range(2)]
        assert seen == [team, direct]  # it is open, with the team's request as a member's
        polled: list[httpx.Response] = []
        poll_ended = anyio.Event()

        async def poll() -> None:
            polled.append(await bob.get(f"/api/v1/requests/{team}/wait", params={"timeout": HELD}))
            poll_ended.set()

        tg.start_soon(poll)
        await entered.reach(1)

        # Taken out of the team by an admin's CLI, in another process.
        left = await anyio.run_process([*INTERLOCK, "team", "rm", "ops", "bob", "--db", db], check=False)
        assert left.returncode == 0, left.stderr.decode()
        with anyio.fail_after(BOUND):
            for stream in (events, interactions, web):
                await stream.ended.wait()
            await poll_ended.wait()  # the team's request still pending: only his leaving ended it
        assert polled[0].status_code == 403, polled[0].text
        assert json.loads(events.events[-1].data)["reason"] == "you left the team ops"
        assert events.kinds[-1] == interactions.kinds[-1] == web.kinds[-1] == "dropped"

        # Back with the last id seen, bob's stream no longer shows the team's requests.
        again = Stream()
        tg.start_soon(again.run, bob, "/api/v1/events/stream", {"after": events.events[1].id})
        second = (await bot.post("/api/v1/requests", json=to_ops)).json()
        seen = await stays.next_event()
        assert (seen.event, json.loads(seen.data)["request_id"]) == ("created", second["id"])
        mine = await ask_bob(db)
        shown = await again.next_event()
        assert json.loads(shown.data)["request_id"] == mine  # not the team's second request
        assert not stays.ended.is_set()
        for who in (alice, bob, bot):
            types = [e["type"] for e in (await who.get("/api/v1/events", params={"after": start})).json()["events"]]
            assert "team_left" not in types
        tg.cancel_scope.cancel()


# -- PostgreSQL: a stream on one node, the revocation through another ------------------------


@contextlib.asynccontextmanager
async def auth_nodes(db: str, count: int) -> AsyncIterator[list[str]]:
    """`count` real `interlock serve --db <db>` processes with auth on, healthy, stopped after."""
    env = {**os.environ, "INTERLOCK_SECRET_KEY": "the-nodes-secret-key-0123456789abcdef"}
    async with serve_many(count, "--db", db, env=env) as started:
        yield [served.url for served in started]


async def test_revoking_a_token_ends_its_streams_on_every_postgresql_node(
    pg_databases: Callable[[], AbstractContextManager[str]],
) -> None:
    with pg_databases() as db:
        people = await add_people(db)
        async with (
            auth_nodes(db, 2) as (a, b),
            api(a, people.tokens["alice"]) as alice_on_a,
            api(b, people.tokens["alice"]) as alice_on_b,
            api(a, people.tokens["bot"]) as bot,
            httpx.AsyncClient(base_url=b, timeout=httpx.Timeout(BOUND, read=None)) as browser_on_b,
            anyio.create_task_group() as tg,
        ):
            await sign_in(browser_on_b, people.tokens["alice"])
            start = await last_event_id(alice_on_a)
            on_a, on_b, web_on_b = Stream(), Stream(), Stream()
            tg.start_soon(on_a.run, alice_on_a, "/api/v1/events/stream", {"after": start})
            tg.start_soon(on_b.run, alice_on_b, "/api/v1/events/stream", {"after": start})
            tg.start_soon(web_on_b.run, browser_on_b, "/inbox/stream", {"after": start})
            await bot.post("/api/v1/requests", json=APPROVAL)
            for stream in (on_a, on_b, web_on_b):
                assert (await stream.next_event()).event == "created"

            await revoke(db, "alice")  # through another process on the same database
            with anyio.fail_after(BOUND):
                for stream in (on_a, on_b, web_on_b):
                    await stream.ended.wait()
            for stream in (on_a, on_b, web_on_b):
                assert stream.kinds == ["created", "dropped"]
            assert (await alice_on_b.get("/api/v1/requests")).status_code == 401
            assert (await browser_on_b.get("/")).status_code == 303  # back to the sign-in page
            tg.cancel_scope.cancel()


async def test_a_team_left_while_a_stream_opens_ends_that_stream_too(
    sqlite_world: tuple[str, str, People], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race: the stream's reader is found in the team, then taken out of it, and this
    node's hub handles the `team_left` event before the stream has subscribed to it."""
    base, db, people = sqlite_world
    async with interlock.connect(db) as broker:
        await broker.add_team_members("ops", ["alice", "bob"])
    armed = threading.Event()  # the next look at bob's teams is the one raced
    handled: list[asyncio.Event] = []
    with_teams, end_streams = Auth.with_teams, Hub.end_streams

    async def racing_with_teams(auth: Auth, principal: Principal) -> Principal:
        found = await with_teams(auth, principal)
        if principal.name == "bob" and armed.is_set():
            armed.clear()
            handled.append(asyncio.Event())
            assert await auth.broker.remove_team_member("ops", "bob")
            with anyio.fail_after(BOUND):
                await handled[-1].wait()  # the hub is done with it: no stream of bob's is open yet
        return found

    def noting_end_streams(hub: Hub, type_: str, data: Any) -> None:
        end_streams(hub, type_, data)
        if type_ == "team_left" and handled:
            handled[-1].set()

    monkeypatch.setattr(Auth, "with_teams", racing_with_teams)
    monkeypatch.setattr(Hub, "end_streams", noting_end_streams)
    async with (
        api(base, people.tokens["bob"]) as bob,
        httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(BOUND, read=None)) as browser,
        anyio.create_task_group() as tg,
    ):
        await sign_in(browser, people.tokens["bob"])
        for client, url in (
            (bob, "/api/v1/events/stream"),
            (bob, "/api/v1/interactions/stream"),
            (browser, "/inbox/stream"),
        ):
            async with interlock.connect(db) as broker:
                await broker.add_team_members("ops", ["bob"])
            armed.set()
            stream = Stream()
            tg.start_soon(stream.run, client, url, {})
            with anyio.fail_after(BOUND):
                await stream.ended.wait()
            assert not armed.is_set()  # (the race did happen)
            assert stream.kinds == ["dropped"], url
            assert json.loads(stream.events[-1].data)["reason"] == "you left the team ops"


ROUTING_CHANGES = ["interlock routing set", "PUT /api/v1/routing"]


@pytest.mark.parametrize("how", ROUTING_CHANGES)
async def test_a_routing_that_drops_someone_from_its_team_ends_their_streams_on_every_node(
    tmp_path: Path, serve: Callable[..., AbstractContextManager[str]], entered: Entered, how: str
) -> None:
    """ops is a team only the routing names (dave is no person here): alice and bob are in
    it as the routing lists them. An operator sets a routing without alice, with `interlock
    routing set` in another process, or with `PUT /api/v1/routing` on a server of theirs
    without auth (where the caller is an admin) on the same store: her streams end on both
    nodes as each takes the routing up from the store, her long polls held on the team's
    request are refused (403) at once, and bob's stream and long poll go on."""
    db = f"sqlite:///{tmp_path / 'routing.db'}"
    # bot is bob's agent: it asks ops, his team, before and after alice leaves it
    tokens = (await add_people(db, bot_owner="bob")).tokens
    doc = {"teams": {"ops": {"members": ["alice", "bob", "dave"]}}}
    to_ops = {**APPROVAL, "to": "ops"}
    with (
        serve(db, auth=True, routing=routing_from_dict(doc)) as a,
        serve(db, auth=True, routing=routing_from_dict(doc)) as b,
    ):
        async with (
            api(a, tokens["alice"]) as alice_a,
            api(b, tokens["alice"]) as alice_b,
            api(a, tokens["bob"]) as bob_a,
            api(b, tokens["bob"]) as bob_b,
            api(a, tokens["bot"]) as bot,
            httpx.AsyncClient(base_url=b, timeout=httpx.Timeout(BOUND, read=None)) as browser_b,
            anyio.create_task_group() as tg,
        ):
            await sign_in(browser_b, tokens["alice"])
            start = await last_event_id(alice_a)
            on_a, on_b, web_b, bob_on_a, bob_on_b = Stream(), Stream(), Stream(), Stream(), Stream()
            interactions_a = Stream()
            tg.start_soon(on_a.run, alice_a, "/api/v1/events/stream", {"after": start})
            tg.start_soon(on_b.run, alice_b, "/api/v1/events/stream", {"after": start})
            tg.start_soon(web_b.run, browser_b, "/inbox/stream", {"after": start})
            tg.start_soon(interactions_a.run, alice_a, "/api/v1/interactions/stream", {})
            tg.start_soon(bob_on_a.run, bob_a, "/api/v1/events/stream", {"after": start})
            tg.start_soon(bob_on_b.run, bob_b, "/api/v1/events/stream", {"after": start})
            created = await bot.post("/api/v1/requests", json=to_ops)
            assert created.status_code == 201, created.text
            first = created.json()["id"]
            for stream in (on_a, on_b, web_b, bob_on_a, bob_on_b):
                assert (await stream.next_event()).event == "created"  # the team's request, hers too
            assert json.loads((await interactions_a.next_event()).data)["id"] == first

            # Long polls on the team's request: hers end as she leaves, bob's when it is answered.
            polls = {"alice on a": alice_a, "alice on b": alice_b, "bob on b": bob_b}
            waited: dict[str, httpx.Response] = {}
            hers_ended, his_ended = anyio.Event(), anyio.Event()

            async def hold(name: str) -> None:
                waited[name] = await polls[name].get(f"/api/v1/requests/{first}/wait", params={"timeout": HELD})
                if "alice on a" in waited and "alice on b" in waited:
                    hers_ended.set()
                if "bob on b" in waited:
                    his_ended.set()

            for name in polls:
                tg.start_soon(hold, name)
            await entered.reach(len(polls))

            without = {"teams": {"ops": {"members": ["bob", "dave"]}}}
            if how == "PUT /api/v1/routing":
                assert (await alice_a.put("/api/v1/routing", json=without)).status_code == 403  # an admin's
                with serve(db, auth=False) as operator:
                    async with httpx.AsyncClient(base_url=operator, timeout=BOUND) as local:
                        put = await local.put("/api/v1/routing", json=without)
                assert put.status_code == 200, put.text
                assert put.json()["teams"] == without["teams"]
            else:
                path = tmp_path / "without-alice.json"
                path.write_text(json.dumps(without))
                done = await anyio.run_process([*INTERLOCK, "routing", "set", str(path), "--db", db], check=False)
                assert done.returncode == 0, done.stderr.decode()
            with anyio.fail_after(BOUND):  # as each node's delivery loop takes the routing up (within 5 s)
                for stream in (on_a, on_b, web_b, interactions_a):
                    await stream.ended.wait()
            for stream in (on_a, on_b, web_b, interactions_a):
                assert len(stream.kinds) == 2 and stream.kinds[-1] == "dropped"  # the team's request, then this
                assert json.loads(stream.events[-1].data)["reason"] == "you left the team ops"

            # Her long polls end with the change, refused, while the request is still pending
            # (held for HELD seconds otherwise: its answer comes after); bob's gets the answer.
            with anyio.fail_after(BOUND):
                await hers_ended.wait()
            for name in ("alice on a", "alice on b"):
                refused = waited[name]
                assert refused.status_code == 403, (name, refused.text)
                assert refused.json()["detail"] == "this request is neither to you nor from you (any more)"
            assert "bob on b" not in waited
            answered = await bob_a.post(f"/api/v1/requests/{first}/answer", json={"answers": {"ok": True}})
            assert answered.status_code == 200, answered.text
            with anyio.fail_after(BOUND):
                await his_ended.wait()
            assert waited["bob on b"].status_code == 200, waited["bob on b"].text
            assert waited["bob on b"].json()["status"] == "answered"

            # The team's next request: bob's streams show it; alice's, opened again, do not.
            again = Stream()
            tg.start_soon(again.run, alice_b, "/api/v1/events/stream", {"after": on_b.events[0].id})
            second = (await bot.post("/api/v1/requests", json=to_ops)).json()["id"]
            for stream in (bob_on_a, bob_on_b):
                seen = [await stream.next_event() for _ in range(2)]
                shown_to_bob = [(e.event, json.loads(e.data)["request_id"]) for e in seen]
                assert shown_to_bob == [("answered", first), ("created", second)]
            async with interlock.connect(db) as broker:
                hers = (await broker.create(Confirm("Rotate the keys?"), to="alice", requester="bot")).id
            shown = await again.next_event()
            assert json.loads(shown.data)["request_id"] == hers  # not the team's second request
            for alice in (alice_a, alice_b):
                assert (await alice.get(f"/api/v1/requests/{second}")).status_code == 403
            assert not bob_on_a.ended.is_set() and not bob_on_b.ended.is_set()
            tg.cancel_scope.cancel()
