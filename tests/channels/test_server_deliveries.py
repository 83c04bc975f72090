"""The outbox in a real server with auth: delivery state shown to whoever asked, dead
letters seen and retried by the people concerned only, answers through a signed inbound
webhook bound to the delivery, and the routing read and replaced by an admin only."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

import interlock
from cli_support import invoke
from interlock import Text
from interlock.broker import LocalBroker
from interlock.model import build_request
from interlock.outbox import Delivery
from interlock.principals import Principal, issue_token
from interlock.routing import routing_from_dict
from interlock.server.common import may_resend
from interlock.webhooks import signed_headers

from .receiver import Receiver, eventually, receiver

pytestmark = pytest.mark.anyio
SECRET = "inbound-and-outbound-secret-0123"
APPROVAL = {"kind": "approval", "asks": [{"type": "confirm", "id": "ok", "prompt": "Deploy?"}], "to": "alice"}


@dataclass
class World:
    base: str
    tokens: dict[str, str]
    hook: Receiver

    def client(self, who: str | None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}
        return httpx.AsyncClient(base_url=f"{self.base}/api/v1", headers=headers, timeout=20)


def routing_doc(url: str) -> dict[str, Any]:
    return {
        "retry_first": 0.05,
        "retry_cap": 0.1,
        "max_attempts": 2,
        "channels": {"hook": {"type": "webhook", "url": url, "secret": SECRET}},
        "recipients": {"alice": {"channels": ["hook"], "addresses": {"hook": f"{url}?for=alice"}}},
    }


@pytest.fixture
async def hook() -> AsyncIterator[Receiver]:
    async with receiver() as r:
        yield r


@pytest.fixture
async def world(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], hook: Receiver
) -> AsyncIterator[World]:
    db = f"sqlite:///{tmp_path / 'server.db'}"
    tokens: dict[str, str] = {}

    async def setup() -> None:
        async with interlock.connect(db) as broker:
            assert isinstance(broker, LocalBroker)
            for principal in (Principal("alice", "human"), Principal("bob", "human"), Principal("bot", "agent", "bob")):
                await broker.store.save_principal(principal)
                token = issue_token(principal.name, datetime.now(UTC))
                await broker.store.save_token(token)
                tokens[principal.name] = token.secret

    await setup()
    # bob's bot asks alice: an open organisation, so who may ask whom is not what is tested here.
    async with serve_apart(db, auth=True, open_inboxes=True, routing=routing_from_dict(routing_doc(hook.url))) as base:
        yield World(base, tokens, hook)


async def create(world: World) -> dict[str, Any]:
    async with world.client("bot") as bot:
        response = await bot.post("/requests", json=APPROVAL)
        assert response.status_code == 201, response.text
        return dict(response.json())


async def deliveries_until(
    client: httpx.AsyncClient, path: str, status: str, params: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The deliveries at `path` once one is in `status` (the server's loop is in another
    thread: look again on each arrival at the receiver, bounded)."""
    items: list[dict[str, Any]] = []

    async def reached() -> bool:
        nonlocal items
        items = (await client.get(path, params=params)).json()["items"]
        return any(d["status"] == status for d in items)

    await eventually(reached)
    return items


async def test_whoever_asked_sees_how_the_recipient_was_told_and_others_do_not(world: World) -> None:
    request = await create(world)
    [got] = await world.hook.until(1)
    assert got.json["request"]["id"] == request["id"]
    async with world.client("bot") as bot, world.client("alice") as alice, world.client(None) as nobody:
        items = await deliveries_until(bot, f"/requests/{request['id']}/deliveries", "delivered")
        assert [(d["recipient"], d["channel"], d["status"]) for d in items] == [("alice", "hook", "delivered")]
        assert (await alice.get(f"/requests/{request['id']}/deliveries")).status_code == 200
        assert (await nobody.get(f"/requests/{request['id']}/deliveries")).status_code == 401
    async with world.client("bob") as bob:
        response = await bob.get(f"/requests/{request['id']}/deliveries")
        assert response.status_code == 403  # neither to bob nor from bob


def signed(body: dict[str, Any], secret: str = SECRET, at: int | None = None) -> tuple[bytes, dict[str, str]]:
    raw = json.dumps(body).encode()
    return raw, {**signed_headers(secret, raw, timestamp=at), "Content-Type": "application/json"}


async def test_an_answer_through_the_signed_inbound_webhook_is_recorded_via_webhook(world: World) -> None:
    request = await create(world)
    await world.hook.until(1)
    async with world.client(None) as anyone, world.client("alice") as alice:
        await deliveries_until(alice, f"/requests/{request['id']}/deliveries", "delivered")
        body = {"request_id": request["id"], "recipient": "alice", "answer": True}
        raw, headers = signed(body, secret="not-the-secret-not-the-secret-00")
        assert (await anyone.post("/inbound/hook", content=raw, headers=headers)).status_code == 401
        raw, headers = signed(body, at=int(time.time()) - 3600)
        response = await anyone.post("/inbound/hook", content=raw, headers=headers)
        assert response.status_code == 401 and "replay window" in response.json()["detail"]
        raw, headers = signed({**body, "recipient": "bob"})
        assert (await anyone.post("/inbound/hook", content=raw, headers=headers)).status_code == 403
        raw, headers = signed({**body, "answer": "perhaps"})
        refused = await anyone.post("/inbound/hook", content=raw, headers=headers)
        assert refused.status_code == 422 and refused.json()["code"] == "invalid_answer"
        deep = b"[" * 100_000 + b"]" * 100_000  # deeper than Python reads: refused, not a 500
        unread = await anyone.post("/inbound/hook", content=deep, headers=signed_headers(SECRET, deep))
        assert unread.status_code == 400 and unread.json()["detail"] == "the body is not valid JSON"
        raw, headers = signed(body)
        assert (await anyone.post("/inbound/nope", content=raw, headers=headers)).status_code == 404
        assert (await alice.get(f"/requests/{request['id']}")).json()["status"] == "pending"
        response = await anyone.post("/inbound/hook", content=raw, headers=headers)
        assert response.status_code == 200, response.text
        settled = (await alice.get(f"/requests/{request['id']}")).json()
        assert settled["status"] == "answered"
        assert (settled["response"]["by"], settled["response"]["via"]) == ("alice", "webhook")
        again = await anyone.post("/inbound/hook", content=raw, headers=headers)
        assert again.status_code == 409


async def test_where_a_delivery_went_is_shown_to_its_recipient_only(world: World) -> None:
    # An email address, a Slack id or a webhook URL with a secret of its own: not the asking
    # agent's or a teammate's to read.
    request = await create(world)
    await world.hook.until(1)
    path = f"/requests/{request['id']}/deliveries"
    async with world.client("alice") as alice, world.client("bot") as bot:
        (mine,) = await deliveries_until(alice, path, "delivered")
        assert mine["address"] == f"{world.hook.url}?for=alice"
        (asked,) = (await bot.get(path)).json()["items"]
        assert asked["address"] is None and asked["status"] == "delivered"
        assert (await bot.get(f"/deliveries/{asked['id']}")).json()["address"] is None


async def test_the_dead_letters_page_newest_first_through_the_api_and_the_remote_broker(world: World) -> None:
    world.hook.statuses = [500] * 6
    asked = [(await create(world))["id"] for _ in range(3)]
    await world.hook.until(6)
    async with world.client("alice") as alice, world.client("bob") as bob:

        async def all_dead() -> bool:
            return len((await alice.get("/deliveries", params={"status": "dead"})).json()["items"]) == 3

        await eventually(all_dead)
        newest = {"status": "dead", "order": "newest", "limit": "2"}
        first = (await alice.get("/deliveries", params=newest)).json()
        rest = (await alice.get("/deliveries", params=newest | {"cursor": first["next_cursor"]})).json()
        shown = [*first["items"], *rest["items"]]
        assert len(first["items"]) == 2 and len(rest["items"]) == 1 and rest["next_cursor"] is None
        assert [d["due_at"] for d in shown] == sorted((d["due_at"] for d in shown), reverse=True)
        assert {d["request_id"] for d in shown} == set(asked)
        # `after` and `next`, the names every other list calls `cursor` and `next_cursor`, still work.
        assert first["next"] == first["next_cursor"] and rest["next"] is None
        assert (await alice.get("/deliveries", params=newest | {"after": first["next"]})).json() == rest
        both = newest | {"after": first["next"], "cursor": first["next"]}
        assert (await alice.get("/deliveries", params=both)).json() == rest
        differ = await alice.get("/deliveries", params=newest | {"after": first["next"], "cursor": "x"})
        assert differ.status_code == 422 and differ.json()["code"] == "invalid_request", differ.text
        assert (await bob.get("/deliveries", params=newest)).json() == {"items": [], "next_cursor": None, "next": None}
        assert (await alice.get("/deliveries", params={"order": "newest"})).status_code == 422  # dead letters only
        for name in ("cursor", "after"):
            mistyped = await alice.get("/deliveries", params=newest | {name: shown[0]["id"]})
            assert mistyped.status_code == 422 and mistyped.json()["code"] == "invalid_cursor", mistyped.text
        # By id: a page's cursor pages on, under either name.
        by_id = (await alice.get("/deliveries", params={"status": "dead", "limit": "2"})).json()
        assert by_id["next_cursor"] == by_id["next"] is not None
        on = (await alice.get("/deliveries", params={"status": "dead", "cursor": by_id["next_cursor"]})).json()
        assert (await alice.get("/deliveries", params={"status": "dead", "after": by_id["next"]})).json() == on
        assert len(on["items"]) == 1 and {d["id"] for d in [*by_id["items"], *on["items"]]} == {d["id"] for d in shown}
    async with interlock.connect(world.base, token=world.tokens["alice"]) as remote:
        page = await remote.dead_letters(limit=2)
        assert [d.id for d in page.items] == [d["id"] for d in first["items"]]
        later = await remote.dead_letters(after=page.next_cursor)
        assert [d.id for d in later.items] == [d["id"] for d in rest["items"]] and later.next_cursor is None
        assert [d.id for d in (await remote.dead_letters()).items] == [d["id"] for d in shown]


async def test_a_dead_letter_is_seen_and_retried_by_its_recipient_only(world: World) -> None:
    world.hook.statuses = [500, 500]
    request = await create(world)
    await world.hook.until(2)
    async with world.client("alice") as alice, world.client("bob") as bob, world.client("bot") as bot:
        dead = await deliveries_until(alice, "/deliveries", "dead", {"status": "dead"})
        assert [d["request_id"] for d in dead] == [request["id"]]
        assert dead[0]["last_error"] == "HTTP 500 from the receiver"
        assert (await bob.get("/deliveries", params={"status": "dead"})).json()["items"] == []
        assert (await bob.post(f"/deliveries/{dead[0]['id']}/retry")).status_code == 403
        assert (await bot.post(f"/deliveries/{dead[0]['id']}/retry")).status_code == 200  # it asked
        assert (await alice.post(f"/deliveries/{dead[0]['id']}/retry")).status_code == 409  # pending again
        assert (await alice.post("/deliveries/dlv_nope/retry")).status_code == 404
        unknown = await alice.get("/requests/req_nope/deliveries")
        assert (unknown.status_code, unknown.json()["detail"]) == (404, "no request with id 'req_nope'")
        await world.hook.until(3)
        await deliveries_until(alice, f"/requests/{request['id']}/deliveries", "delivered")
    async with httpx.AsyncClient(base_url=world.base, timeout=20) as client:
        metrics = (await client.get("/metrics")).text
    assert 'interlock_deliveries_total{channel="hook",outcome="retry"} 1.0' in metrics
    assert 'interlock_deliveries_total{channel="hook",outcome="dead"} 1.0' in metrics
    assert 'interlock_deliveries_total{channel="hook",outcome="delivered"} 1.0' in metrics


async def test_only_an_admin_reads_or_replaces_the_routing(world: World) -> None:
    async with world.client("alice") as alice:
        assert (await alice.get("/routing")).status_code == 403
        assert (await alice.put("/routing", json={})).status_code == 403


async def test_without_auth_the_routing_is_shown_masked_and_checked_before_it_is_replaced(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], hook: Receiver
) -> None:
    doc = routing_doc(hook.url)
    async with (
        serve_apart(f"sqlite:///{tmp_path / 'open.db'}", auth=False, routing=routing_from_dict(doc)) as base,
        httpx.AsyncClient(base_url=f"{base}/api/v1", timeout=20) as local,
    ):
        shown = (await local.get("/routing")).json()
        assert shown["channels"]["hook"]["secret"] == "***" and shown["channels"]["hook"]["url"] == hook.url
        bad = await local.put("/routing", json={**doc, "recipients": {"alice": {"channels": ["sms"]}}})
        assert bad.status_code == 422 and "no channel named 'sms'" in bad.json()["detail"]
        assert (await local.get("/routing")).json()["recipients"] == doc["recipients"]
        changed = await local.put("/routing", json={**doc, "recipients": {"bob": {"channels": ["hook"]}}})
        assert changed.status_code == 200
        response = await local.post("/requests", json={**APPROVAL, "to": "bob"})
        assert response.status_code == 201
        [got] = await hook.until(1)
        assert got.json["recipient"] == "bob"


async def test_a_routing_set_through_the_api_survives_a_restart_and_an_unchanged_file(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], hook: Receiver
) -> None:
    db = f"sqlite:///{tmp_path / 'kept.db'}"
    doc = routing_doc(hook.url)
    for_bob = {**doc, "recipients": {"bob": {"channels": ["hook"]}}}
    async with (
        serve_apart(db, auth=False) as base,  # no routing yet: nothing to show, until one is put
        httpx.AsyncClient(base_url=f"{base}/api/v1", timeout=20) as local,
    ):
        assert (await local.get("/routing")).status_code == 404
        assert (await local.put("/routing", json=doc)).status_code == 200
        assert (await local.post("/requests", json=APPROVAL)).status_code == 201
        [got] = await hook.until(1)  # the server that ran without a routing now delivers
        assert got.json["recipient"] == "alice"
        assert (await local.put("/routing", json=for_bob)).status_code == 200
    async with (
        serve_apart(db, auth=False) as base,  # restarted without a file: the stored routing is used
        httpx.AsyncClient(base_url=f"{base}/api/v1", timeout=20) as local,
    ):
        assert (await local.get("/routing")).json()["recipients"] == {"bob": {"channels": ["hook"]}}
        assert (await local.post("/requests", json={**APPROVAL, "to": "bob"})).status_code == 201
        [_, got] = await hook.until(2)
        assert got.json["recipient"] == "bob"


async def test_a_routing_file_seeds_the_store_and_wins_only_when_it_changed(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], hook: Receiver
) -> None:
    db = f"sqlite:///{tmp_path / 'seeded.db'}"
    doc = routing_doc(hook.url)
    for_bob = {**doc, "recipients": {"bob": {"channels": ["hook"]}}}
    async with (
        serve_apart(db, auth=False, routing=routing_from_dict(doc)) as base,
        httpx.AsyncClient(base_url=f"{base}/api/v1", timeout=20) as local,
    ):
        assert (await local.put("/routing", json=for_bob)).status_code == 200
    async with (
        serve_apart(db, auth=False, routing=routing_from_dict(doc)) as base,  # the same file: the API's change stays
        httpx.AsyncClient(base_url=f"{base}/api/v1", timeout=20) as local,
    ):
        assert (await local.get("/routing")).json()["recipients"] == {"bob": {"channels": ["hook"]}}
    changed = {**doc, "max_attempts": 3}
    async with (
        serve_apart(db, auth=False, routing=routing_from_dict(changed)) as base,  # an edited file wins
        httpx.AsyncClient(base_url=f"{base}/api/v1", timeout=20) as local,
    ):
        shown = (await local.get("/routing")).json()
        assert (shown["recipients"], shown["max_attempts"]) == (doc["recipients"], 3)


async def test_the_routing_s_teams_of_people_here_are_kept_as_teams(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], hook: Receiver
) -> None:
    db = f"sqlite:///{tmp_path / 'teams.db'}"
    async with interlock.connect(db) as broker:
        assert isinstance(broker, LocalBroker)
        for name in ("alice", "bob"):
            await broker.store.save_principal(Principal(name, "human"))
    teams = {"ops": {"members": ["alice", "bob"]}, "ghosts": {"members": ["nobody-here"]}}
    async with (
        serve_apart(db, auth=False) as base,
        httpx.AsyncClient(base_url=f"{base}/api/v1", timeout=20) as local,
    ):
        assert (await local.put("/routing", json={**routing_doc(hook.url), "teams": teams})).status_code == 200
        assert (await local.get("/teams/ops")).json() == {"name": "ops", "members": ["alice", "bob"]}
        assert (await local.get("/teams/ghosts")).status_code == 404  # no person by that name: left out


async def test_an_escalation_s_webhook_does_not_let_its_recipient_answer(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], hook: Receiver
) -> None:
    """bob is told of alice's request when nobody answered it in time; that notice is no
    right to answer it (its `answerable` says so), through the inbound webhook as through
    any other surface."""
    doc = routing_doc(hook.url)
    doc["recipients"] = {
        "alice": {"channels": ["hook"], "escalate_after": "0.2s", "escalate_to": "bob"},
        "bob": {"channels": ["hook"]},
    }
    async with (
        serve_apart(f"sqlite:///{tmp_path / 'escalated.db'}", auth=False, routing=routing_from_dict(doc)) as base,
        httpx.AsyncClient(base_url=f"{base}/api/v1", timeout=20) as local,
    ):
        request = (await local.post("/requests", json=APPROVAL)).json()
        told = await hook.until(2)
        assert sorted((got.json["type"], got.json["recipient"], got.json["answerable"]) for got in told) == [
            ("request.created", "alice", True),
            ("request.escalated", "bob", False),
        ]
        raw, headers = signed({"request_id": request["id"], "recipient": "bob", "answer": True})
        refused = await local.post("/inbound/hook", content=raw, headers=headers)
        assert refused.status_code == 403 and "'bob' may not answer" in refused.json()["detail"]
        assert (await local.get(f"/requests/{request['id']}")).json()["status"] == "pending"
        raw, headers = signed({"request_id": request["id"], "recipient": "alice", "answer": True})
        assert (await local.post("/inbound/hook", content=raw, headers=headers)).status_code == 200
        settled = (await hook.until(3))[-1]  # (received before the server stops: its loop does not wait on it)
        assert (settled.json["type"], settled.json["request"]["response"]["by"]) == ("request.answered", "alice")
        assert settled.json["answerable"] is False  # nothing is, once it settled


@pytest.mark.parametrize("kept", [True, False], ids=["team-in-the-store", "team-of-the-routing-only"])
async def test_a_team_s_webhook_is_answered_by_the_member_it_names_not_as_the_team(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], hook: Receiver, kept: bool
) -> None:
    """A request to the team ops goes to its own webhook: an answer sent back for ops
    without `by` would be nobody's, and is refused (whether the store keeps the team or
    only the routing names it) and changes nothing; with `by` naming bob, it is his."""
    db = f"sqlite:///{tmp_path / 'teams.db'}"
    if kept:
        async with interlock.connect(db) as broker:
            assert isinstance(broker, LocalBroker)
            await broker.save_principal(Principal("bob", "human"))
    doc = routing_doc(hook.url)
    doc["teams"] = {"ops": {"members": ["bob"], "channels": ["hook"]}}
    async with (
        serve_apart(db, auth=False, routing=routing_from_dict(doc)) as base,
        httpx.AsyncClient(base_url=f"{base}/api/v1", timeout=20) as local,
    ):
        assert (await local.get("/teams/ops")).status_code == (200 if kept else 404)
        request = (await local.post("/requests", json={**APPROVAL, "to": "ops"})).json()
        [told] = await hook.until(1)
        assert (told.json["recipient"], told.json["answerable"]) == ("ops", True)
        raw, headers = signed({"request_id": request["id"], "recipient": "ops", "answer": True})
        refused = await local.post("/inbound/hook", content=raw, headers=headers)
        assert refused.status_code == 403
        assert (
            refused.json()["detail"]
            == "'ops' is a team and answers nothing itself: name the member who answers in `by`"
        )
        assert (await local.get(f"/requests/{request['id']}")).json()["status"] == "pending"
        raw, headers = signed({"request_id": request["id"], "recipient": "ops", "by": "bob", "answer": True})
        assert (await local.post("/inbound/hook", content=raw, headers=headers)).status_code == 200
        settled = (await local.get(f"/requests/{request['id']}")).json()
        assert (settled["response"]["by"], settled["response"]["via"]) == ("bob", "webhook")


async def test_a_member_the_store_s_team_has_answers_through_the_team_s_webhook_as_the_routing_s_members_do(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], hook: Receiver
) -> None:
    """dave, added to ops with `interlock team add` but not in the routing's list, read and
    answered its requests in the inbox, yet his answer through the team's webhook was
    refused as from someone not in the team."""
    db = f"sqlite:///{tmp_path / 'teams.db'}"
    async with interlock.connect(db) as broker:
        assert isinstance(broker, LocalBroker)
        for name in ("bob", "dave", "carol"):
            await broker.save_principal(Principal(name, "human"))
        await broker.add_team_members("ops", ["bob", "dave"])
    doc = routing_doc(hook.url)
    doc["teams"] = {"ops": {"members": ["bob"], "channels": ["hook"]}}
    async with (
        serve_apart(db, auth=False, routing=routing_from_dict(doc)) as base,
        httpx.AsyncClient(base_url=f"{base}/api/v1", timeout=20) as local,
    ):
        request = (await local.post("/requests", json={**APPROVAL, "to": "ops"})).json()
        await hook.until(1)
        for by, status, said in (
            ("carol", 403, "'carol' is not a member of the team 'ops'"),
            ("dave", 200, None),
        ):
            raw, headers = signed({"request_id": request["id"], "recipient": "ops", "by": by, "answer": True})
            answered = await local.post("/inbound/hook", content=raw, headers=headers)
            assert answered.status_code == status, answered.text
            if said is not None:
                assert answered.json()["detail"] == said
        settled = (await local.get(f"/requests/{request['id']}")).json()
        assert (settled["response"]["by"], settled["response"]["via"]) == ("dave", "webhook")


async def test_a_webhook_answer_for_a_person_whose_every_token_is_revoked_answers_nothing_until_given_a_new_one(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], hook: Receiver
) -> None:
    """`interlock token revoke alice` and `token revoke bob` cut them off: a signed answer
    naming alice as its recipient, or bob as the member who answers for ops, is refused
    (403) and changes nothing; carol, of ops and not cut off, answers as before, and once
    `token create` gives alice a new token the answer naming her is taken."""
    db = f"sqlite:///{tmp_path / 'cut-off.db'}"
    async with interlock.connect(db) as broker:
        assert isinstance(broker, LocalBroker)
        for name in ("alice", "bob", "carol"):
            await broker.save_principal(Principal(name, "human"))
            await broker.save_token(issue_token(name, datetime.now(UTC)))
    doc = routing_doc(hook.url)
    doc["teams"] = {"ops": {"members": ["bob", "carol"], "channels": ["hook"]}}
    async with (
        serve_apart(db, auth=False, routing=routing_from_dict(doc)) as base,
        httpx.AsyncClient(base_url=f"{base}/api/v1", timeout=20) as local,
    ):
        hers = (await local.post("/requests", json=APPROVAL)).json()
        teams = (await local.post("/requests", json={**APPROVAL, "to": "ops"})).json()
        await hook.until(2)
        async with interlock.connect(db) as broker:
            assert isinstance(broker, LocalBroker)
            for name in ("alice", "bob"):
                assert await broker.revoke_tokens(principal=name) == 1  # `interlock token revoke NAME`
        for name, body in (
            ("alice", {"request_id": hers["id"], "recipient": "alice", "answer": True}),
            ("bob", {"request_id": teams["id"], "recipient": "ops", "by": "bob", "answer": True}),
            ("bob", {"request_id": teams["id"], "recipient": "ops", "by": "bob", "reject": "no"}),
        ):
            raw, headers = signed(body)
            refused = await local.post("/inbound/hook", content=raw, headers=headers)
            assert refused.status_code == 403, refused.text
            assert refused.json()["code"] == "forbidden"
            assert refused.json()["detail"] == (
                f"Every token of {name}'s is revoked here, so a webhook naming them answers nothing."
            )
        for request in (hers, teams):
            now = (await local.get(f"/requests/{request['id']}")).json()
            assert (now["status"], now["response"]) == ("pending", None)

        raw, headers = signed({"request_id": teams["id"], "recipient": "ops", "by": "carol", "answer": True})
        assert (await local.post("/inbound/hook", content=raw, headers=headers)).status_code == 200
        settled = (await local.get(f"/requests/{teams['id']}")).json()
        assert (settled["status"], settled["response"]["by"]) == ("answered", "carol")

        async with interlock.connect(db) as broker:
            assert isinstance(broker, LocalBroker)
            await broker.save_token(issue_token("alice", datetime.now(UTC)))  # `interlock token create alice`
        raw, headers = signed({"request_id": hers["id"], "recipient": "alice", "answer": True})
        answered = await local.post("/inbound/hook", content=raw, headers=headers)
        assert answered.status_code == 200, answered.text
        assert (answered.json()["status"], answered.json()["response"]["by"]) == ("answered", "alice")


async def test_a_store_s_first_routing_announces_what_waits_now_not_its_whole_history(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], hook: Receiver
) -> None:
    db = f"sqlite:///{tmp_path / 'history.db'}"
    async with interlock.connect(db) as broker:
        answered = await broker.create(interlock.Confirm("Ship v1?"), to="alice")
        assert await broker.resolve(answered.id, True)
        withdrawn = await broker.create(interlock.Confirm("Ship v2?"), to="alice")
        assert await broker.cancel(withdrawn.id, "too late")
        waiting = await broker.create(interlock.Confirm("Ship v3?"), to="alice")
    async with (
        serve_apart(db, auth=False, routing=routing_from_dict(routing_doc(hook.url))) as base,
        httpx.AsyncClient(base_url=f"{base}/api/v1", timeout=20) as local,
    ):
        new = (await local.post("/requests", json=APPROVAL)).json()
        told = await hook.until(2)
        assert [(got.json["type"], got.json["request"]["id"]) for got in told] == [
            ("request.created", waiting.id),
            ("request.created", new["id"]),
        ]
        assert (await local.post(f"/requests/{new['id']}/answer", json={"answer": True})).status_code == 200
        settled = (await hook.until(3))[-1]  # what happens from now on is told, settlements too
        assert (settled.json["type"], settled.json["request"]["id"]) == ("request.answered", new["id"])
        for old in (answered, withdrawn):
            assert (await local.get(f"/requests/{old.id}/deliveries")).json()["items"] == []


def remote_env(base: str, token: str) -> dict[str, str]:
    return {**os.environ, "INTERLOCK_URL": base, "INTERLOCK_TOKEN": token}


async def sign_in(browser: httpx.AsyncClient, token: str) -> str:
    """Sign `browser` in to the web inbox with `token`: the CSRF token of its session's forms."""
    form = await browser.get("/signin")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None
    await browser.post("/signin", data={"token": token, "csrf": csrf[1]})
    page = await browser.get("/")
    session_csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert session_csrf is not None, page.text
    return session_csrf[1]


async def test_a_team_s_dead_letters_are_listed_seen_and_retried_by_its_members_and_nobody_else(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], hook: Receiver
) -> None:
    """A request to the team ops goes to the team's own address and dies there: alice and
    bob (its members, who may answer it) list it through the API, the CLI pointed at the
    server and the web inbox's dead letters, read it without its address, and may send it
    again, as they answer the team's requests; carol (no member) and her agent see none of
    it and may not send it again; the agent that asked may, as before."""
    db = f"sqlite:///{tmp_path / 'team.db'}"
    tokens: dict[str, str] = {}
    async with interlock.connect(db) as broker:
        assert isinstance(broker, LocalBroker)
        people = ("alice", "bob", "carol")
        agents = (Principal("bot", "agent", "bob"), Principal("carol-bot", "agent", "carol"))
        for principal in (*(Principal(name, "human") for name in people), *agents):
            await broker.store.save_principal(principal)
            token = issue_token(principal.name, datetime.now(UTC))
            await broker.store.save_token(token)
            tokens[principal.name] = token.secret
        await broker.add_team_members("ops", ["alice", "bob"])
    doc = routing_doc(hook.url)
    doc["teams"] = {
        "ops": {"members": ["alice", "bob"], "channels": ["hook"], "addresses": {"hook": f"{hook.url}?ops"}}
    }
    hook.statuses = [500, 500]
    async with serve_apart(db, auth=True, open_inboxes=True, routing=routing_from_dict(doc)) as base:
        world = World(base, tokens, hook)
        async with world.client("bot") as bot:
            made = await bot.post("/requests", json={**APPROVAL, "to": "ops"})
            assert made.status_code == 201, made.text
            request = made.json()
        await hook.until(2)
        dead_only = {"status": "dead"}
        async with (
            world.client("alice") as alice,
            world.client("bob") as bob,
            world.client("carol") as carol,
            world.client("carol-bot") as carol_bot,
        ):
            [dead] = await deliveries_until(alice, "/deliveries", "dead", dead_only)
            assert (dead["request_id"], dead["recipient"], dead["address"]) == (request["id"], "ops", None)
            assert dead["last_error"] == "HTTP 500 from the receiver"
            newest = (await bob.get("/deliveries", params={**dead_only, "order": "newest"})).json()["items"]
            assert [d["id"] for d in newest] == [dead["id"]]
            assert [d["id"] for d in (await bob.get("/deliveries")).json()["items"]] == [dead["id"]]
            seen = await alice.get(f"/deliveries/{dead['id']}")
            assert (seen.status_code, seen.json()["address"]) == (200, None)
            for outsider in (carol, carol_bot):
                assert (await outsider.get("/deliveries", params=dead_only)).json()["items"] == []
                newest_none = await outsider.get("/deliveries", params={**dead_only, "order": "newest"})
                assert newest_none.json()["items"] == []
                assert (await outsider.get("/deliveries")).json()["items"] == []
                assert (await outsider.get(f"/deliveries/{dead['id']}")).status_code == 403
                refused = await outsider.post(f"/deliveries/{dead['id']}/retry")
                assert refused.status_code == 403, refused.text
                assert refused.json()["detail"] == (
                    "this delivery is neither to you nor about a request of yours or your team's"
                )
            # The command line, pointed at the server with each one's token.
            listed = invoke("deliveries", "list", "--status", "dead", "--json", env=remote_env(base, tokens["bob"]))
            assert listed.returncode == 0, listed.stderr
            assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [dead["id"]]
            none = invoke("deliveries", "list", "--status", "dead", "--json", env=remote_env(base, tokens["carol"]))
            assert (none.returncode, none.stdout) == (0, ""), none.stderr
            refused_cli = invoke("deliveries", "retry", dead["id"], env=remote_env(base, tokens["carol"]))
            assert refused_cli.returncode != 0 and "your team's" in refused_cli.stderr, refused_cli.stderr

            # The web inbox's dead letters: a member's lists it with its button, an outsider's not.
            async with (
                httpx.AsyncClient(base_url=base, timeout=20) as member,
                httpx.AsyncClient(base_url=base, timeout=20) as outsider,
            ):
                member_csrf = await sign_in(member, tokens["alice"])
                outsider_csrf = await sign_in(outsider, tokens["carol"])
                page = await member.get("/inbox/deliveries")
                assert f'data-id="{dead["id"]}"' in page.text and "Send again" in page.text
                assert f"{hook.url}?ops" not in page.text
                of_request = await member.get(f"/requests/{request['id']}")
                assert f'data-id="{dead["id"]}"' in of_request.text and "Send again" in of_request.text
                other = await outsider.get("/inbox/deliveries")
                assert dead["id"] not in other.text and "None: every notification went out." in other.text
                action = f"/inbox/deliveries/{dead['id']}/retry"
                refused_web = await outsider.post(action, data={"csrf": outsider_csrf})
                assert refused_web.status_code == 403
                sent = await member.post(action, data={"csrf": member_csrf})
                assert sent.status_code == 303, sent.text
            again = (await bob.get(f"/deliveries/{dead['id']}")).json()
            assert again["status"] in ("pending", "delivered")  # sent again at once, answered 200 now
            await hook.until(3)
            retried = await bob.post(f"/deliveries/{dead['id']}/retry")
            assert retried.status_code == 409  # no dead letter now: the member's retry went through


def test_who_may_resend_a_delivery_of_a_team_s_request() -> None:
    """The rule the API, the CLI through a server and the web inbox's buttons share: a
    member may resend what went to the team or to another member, not the escalation that
    went over the team to someone else; its recipient, its requester and an admin may."""
    t = datetime.now(UTC)
    request = build_request(Text("Deploy?"), to="ops", requester="bot")

    def delivery(kind: str, recipient: str) -> Delivery:
        return Delivery(f"d-{kind}", 1, request.id, kind, "created", recipient, "hook", None, t, t)

    member = Principal("alice", "human", teams=frozenset({"ops"}))
    outsider = Principal("erin", "human")
    to_team, to_bob, over = delivery("request", "ops"), delivery("request", "bob"), delivery("escalation", "boss")
    assert may_resend(member, request, to_team) and may_resend(member, request, to_bob)
    assert not may_resend(member, request, over)
    assert not any(may_resend(outsider, request, d) for d in (to_team, to_bob, over))
    assert may_resend(Principal("boss", "human"), request, over)  # its recipient
    assert may_resend(Principal("bot", "agent", owner="carol"), request, over)  # its requester
    assert may_resend(Principal("root", "admin"), request, over)
    assert not may_resend(member, None, to_team)  # its request gone: only recipient and admin
