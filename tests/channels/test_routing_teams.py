"""One rule for who may read and answer a request to a team, whatever the surface: a team
only the routing names (the store keeps no team of that name: one of its members is no
person here) has the routing's members, in the web inbox and the HTTP API as through its
channels. Against a real server with auth, a real webhook receiver and a browser's
cookies (httpx): the members read and answer its requests everywhere, anyone else
nowhere, and a routing's team never stands for a person of the same name."""

from __future__ import annotations

import contextlib
import html
import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

import interlock
from interlock.broker import LocalBroker
from interlock.channels import routing_left
from interlock.principals import Principal, issue_token
from interlock.routing import routing_from_dict

from .receiver import Receiver, receiver
from .test_server_deliveries import SECRET, signed

pytestmark = pytest.mark.anyio
BOUND = 20
APPROVAL = {"kind": "approval", "asks": [{"type": "confirm", "id": "ok", "prompt": "Restart the workers?"}]}
QUESTION = {"asks": [{"type": "text", "id": "why", "prompt": "Why is carol's build red?"}]}


@dataclass
class World:
    base: str
    tokens: dict[str, str]
    hook: Receiver

    def api(self, who: str) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        return httpx.AsyncClient(base_url=f"{self.base}/api/v1", headers=headers, timeout=BOUND)

    @contextlib.asynccontextmanager
    async def browser(self, who: str) -> AsyncIterator[httpx.AsyncClient]:
        """A browser signed in to the web inbox as `who`, with their token."""
        async with httpx.AsyncClient(base_url=self.base, timeout=BOUND) as web:
            form = await web.get("/signin")
            found = re.findall(r'type="hidden" name="(\w+)" value="([^"]*)"', form.text)
            signed_in = await web.post(
                "/signin", data={**{k: html.unescape(v) for k, v in found}, "token": self.tokens[who]}
            )
            assert signed_in.status_code == 303, signed_in.text
            yield web


@pytest.fixture
async def world(tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]]) -> AsyncIterator[World]:
    """alice is in ops only through the routing (its other member, dave, is no person here,
    so the store keeps no team ops); bob and carol are people outside it. The routing also
    names a team carol, with alice in it: carol is a person, and stays one."""
    db = f"sqlite:///{tmp_path / 'teams.db'}"
    tokens: dict[str, str] = {}
    async with interlock.connect(db) as broker:
        assert isinstance(broker, LocalBroker)
        people = [Principal(name, "human") for name in ("alice", "bob", "carol")]
        for principal in (*people, Principal("alice-bot", "agent", "alice"), Principal("bot", "agent", "bob")):
            await broker.store.save_principal(principal)
            token = issue_token(principal.name, datetime.now(UTC))
            await broker.store.save_token(token)
            tokens[principal.name] = token.secret
    async with receiver() as hook:
        doc = {
            "inbox_url": "http://inbox.example",
            "channels": {"hook": {"type": "webhook", "url": hook.url, "secret": SECRET}},
            "recipients": {"alice": {"channels": ["hook"]}},
            "teams": {"ops": {"members": ["alice", "dave"], "channels": ["hook"]}, "carol": {"members": ["alice"]}},
        }
        async with serve_apart(db, auth=True, routing=routing_from_dict(doc)) as base:
            yield World(base, tokens, hook)


async def ask(world: World, body: dict[str, Any], to: str) -> str:
    """A request to `to`: to ops from alice's agent (a member's agent asks her team), to a
    person from themselves."""
    async with world.api("alice-bot" if to == "ops" else to) as bot:
        made = await bot.post("/requests", json={**body, "to": to})
        assert made.status_code == 201, made.text
        return str(made.json()["id"])


async def test_a_member_of_a_team_only_the_routing_names_reads_and_answers_it_in_the_inbox_and_the_api(
    world: World,
) -> None:
    restart, other = await ask(world, APPROVAL, "ops"), await ask(world, APPROVAL, "ops")
    [told, _] = await world.hook.until(2)
    assert (told.json["recipient"], told.json["answerable"]) == ("ops", True)  # its channel: the members answer
    assert told.json["links"]["request"] is not None  # and may open it in the inbox, which shows it to them
    async with world.api("alice") as alice:
        assert (await alice.get(f"/requests/{restart}")).status_code == 200
        assert {r["id"] for r in (await alice.get("/requests")).json()["items"]} == {restart, other}
        async with world.browser("alice") as web:
            inbox = await web.get("/")
            assert inbox.status_code == 200 and restart in inbox.text and other in inbox.text
            page = await web.get(f"/requests/{restart}")
            assert page.status_code == 200, page.text
            assert "Restart the workers?" in page.text and "Approve" in page.text  # hers to answer there
            answered = await alice.post(f"/requests/{restart}/answer", json={"answer": True})
            assert answered.status_code == 200, answered.text
            assert answered.json()["response"]["by"] == "alice"
            claimed = await alice.post(f"/requests/{other}/claim")
            assert claimed.status_code == 200 and claimed.json()["by"] == "alice"
            history = await web.get("/history")
            assert history.status_code == 200 and restart in history.text
    raw, headers = signed({"request_id": other, "recipient": "ops", "by": "alice", "answer": False})
    async with httpx.AsyncClient(base_url=world.base, timeout=BOUND) as anyone:
        through_hook = await anyone.post("/api/v1/inbound/hook", content=raw, headers=headers)
        assert through_hook.status_code == 200, through_hook.text  # through its channel, as before


async def test_nobody_outside_a_team_only_the_routing_names_reads_or_answers_it_anywhere(world: World) -> None:
    restart = await ask(world, APPROVAL, "ops")
    await world.hook.until(1)
    for outsider in ("bob", "carol"):
        async with world.api(outsider) as api:
            assert (await api.get(f"/requests/{restart}")).status_code in (403, 404)
            assert restart not in {r["id"] for r in (await api.get("/requests")).json()["items"]}
            refused = await api.post(f"/requests/{restart}/answer", json={"answer": True})
            assert refused.status_code in (403, 404), refused.text
        async with world.browser(outsider) as web:
            assert restart not in (await web.get("/")).text
            assert (await web.get(f"/requests/{restart}")).status_code == 403
        raw, headers = signed({"request_id": restart, "recipient": "ops", "by": outsider, "answer": True})
        async with httpx.AsyncClient(base_url=world.base, timeout=BOUND) as anyone:
            assert (await anyone.post("/api/v1/inbound/hook", content=raw, headers=headers)).status_code == 403
    for asker in ("bot", "bob"):  # nor do they (or their agents) ask it
        async with world.api(asker) as api:
            refused = await api.post("/requests", json={**APPROVAL, "to": "ops"})
            assert refused.status_code == 403, refused.text
            assert "'ops' is a team, and only its members and their agents ask it" in refused.json()["detail"]
    async with world.api("alice") as alice:
        assert (await alice.get(f"/requests/{restart}")).json()["status"] == "pending"


async def test_a_routing_s_team_named_like_a_person_gives_its_members_nothing_of_theirs(world: World) -> None:
    """The routing's team carol lists alice; carol is a person here, so the store keeps no
    such team, and a request to carol stays carol's alone: alice may neither read nor
    answer it, in the inbox, the API or through the message a channel sends her about it."""
    why = await ask(world, QUESTION, "carol")
    [told] = await world.hook.until(1)  # to alice, a member of the routing's team carol
    assert (told.json["recipient"], told.json["answerable"], told.json["links"]["request"]) == ("alice", False, None)
    async with world.api("alice") as alice:
        assert (await alice.get(f"/requests/{why}")).status_code in (403, 404)
        assert (await alice.post(f"/requests/{why}/answer", json={"answer": "flaky"})).status_code in (403, 404)
        async with world.browser("alice") as web:
            assert (await web.get(f"/requests/{why}")).status_code == 403
    raw, headers = signed({"request_id": why, "recipient": "alice", "answer": "flaky"})
    async with httpx.AsyncClient(base_url=world.base, timeout=BOUND) as anyone:
        assert (await anyone.post("/api/v1/inbound/hook", content=raw, headers=headers)).status_code == 403
    async with world.api("alice-bot") as bot:  # nor does her agent ask carol as a team of alice's
        assert (await bot.post("/requests", json={**QUESTION, "to": "carol"})).status_code == 403
    async with world.api("carol") as carol:
        assert (await carol.get(f"/requests/{why}")).json()["status"] == "pending"


async def test_a_routing_change_takes_out_of_a_team_only_whom_it_alone_made_a_member(tmp_path: Path) -> None:
    """Who a changed routing took out of a team (their streams end): dropped from a team
    only the routing names, yes; dropped from the routing's list of a team the store keeps
    with them in it, or of a team named like a person, no."""
    async with interlock.connect(f"sqlite:///{tmp_path / 'left.db'}") as broker:
        assert isinstance(broker, LocalBroker)
        for name in ("alice", "bob", "carol"):
            await broker.store.save_principal(Principal(name, "human"))
        await broker.add_team_members("sre", ["alice", "bob"])
        before = {"ops": ("alice", "bob", "dave"), "sre": ("alice", "bob"), "carol": ("alice",), "qa": ("bob", "dave")}
        after = {"ops": ("bob", "dave"), "sre": ("bob",)}
        assert await routing_left(broker, before, after) == {"ops": {"alice"}, "qa": {"bob", "dave"}}
        assert await routing_left(broker, after, before) == {}


async def test_someone_taken_out_of_a_team_stays_out_when_a_server_starts_again_with_the_same_routing(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]]
) -> None:
    """Each start of a server added the routing's members to the teams the store keeps
    again: bob, taken out of ops with `interlock team rm`, read its requests after the next
    restart. Only a routing that newly lists someone adds them."""
    db = f"sqlite:///{tmp_path / 'teams.db'}"
    async with interlock.connect(db) as broker:
        assert isinstance(broker, LocalBroker)
        for name in ("alice", "bob", "carol"):
            await broker.store.save_principal(Principal(name, "human"))
    doc: dict[str, Any] = {
        "channels": {"hook": {"type": "webhook", "url": "http://127.0.0.1:9/hook", "secret": SECRET}},
        "teams": {"ops": {"members": ["alice", "bob"]}},
    }
    async with serve_apart(db, auth=True, routing=routing_from_dict(doc)):
        pass
    async with interlock.connect(db) as broker:
        assert isinstance(broker, LocalBroker)
        assert await broker.team_members("ops") == ["alice", "bob"]  # a new team: made with them
        assert await broker.remove_team_member("ops", "bob")  # `interlock team rm ops bob`
    for _ in range(2):  # and again, with the same file
        async with serve_apart(db, auth=True, routing=routing_from_dict(doc)):
            pass
    changed = {**doc, "teams": {"ops": {"members": ["alice", "bob", "carol"]}}}  # newly lists carol
    async with serve_apart(db, auth=True, routing=routing_from_dict(changed)):
        pass
    async with interlock.connect(db) as broker:
        assert isinstance(broker, LocalBroker)
        assert await broker.team_members("ops") == ["alice", "carol"]
