"""Capability grants through MCP: offered on approval asks and options, issued only for the
choices made and echoed, listed, checked and revoked; and who may ask whom."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from mcp_support import EVERY_WAY, MCP, WAYS, World, add_people, error, result

import interlock
from interlock.broker import LocalBroker
from interlock.model import GrantPolicy
from interlock.principals import issue_token

pytestmark = pytest.mark.anyio

PUSH = {"with": "repo:acme/web", "can": "push"}
DEPLOY = {"with": "env:prod", "can": "deploy", "exp": None}
WEEK = 7 * 86400


def offer(*approval_grants: dict[str, Any], option_grants: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    approval = {"type": "approval", "id": "ok", "prompt": "Merge it?", "grants": list(approval_grants)}
    asks: list[dict[str, Any]] = [approval]
    if option_grants is not None:
        options = [{"id": "prod", "label": "Production", "grants": option_grants}, {"id": "staging"}]
        asks.append({"type": "choice", "id": "where", "prompt": "Deploy where?", "options": options})
    return {"asks": asks, "title": "Merge and deploy"}


@EVERY_WAY
async def test_a_grant_is_issued_only_for_what_was_approved_and_echoed(mcp_as: MCP) -> None:
    async with mcp_as("alice-bot") as bot, mcp_as("alice") as alice:
        job = result(await bot.call_tool("hitl_request", offer(PUSH, option_grants=[DEPLOY])))
        whole = result(await alice.call_tool("hitl_read", {"id": job["job"]}))
        assert whole["asks"][0]["grants"] == [PUSH]
        assert whole["asks"][1]["options"][0]["grants"] == [DEPLOY]

        # approves and picks production, but consents only to the push grant
        answer = {"id": job["job"], "answers": {"ok": True, "where": "prod"}, "grants": [PUSH]}
        result(await alice.call_tool("hitl_respond", answer))
        done = result(await bot.call_tool("hitl_status", {"job": job["job"]}))
        issued = done["response"]["grants"]
        assert [(g["with"], g["can"], g["issuer"], g["audience"]) for g in issued] == [
            ("repo:acme/web", "push", "alice", "alice-bot")
        ]
        assert abs(issued[0]["exp"] - time.time() - WEEK) < 600  # the venue's default: 7 days

        held = result(await bot.call_tool("hitl_grants", {}))["grants"]
        assert [g["id"] for g in held] == [issued[0]["id"]]
        if "token" in held[0]:  # signed by a server (not on a local store)
            assert held[0]["token"].count(".") == 2
        assert result(await bot.call_tool("hitl_grant_check", {"grant": PUSH}))["granted"]
        deploy = {"grant": {"with": "env:prod", "can": "deploy"}}
        assert not result(await bot.call_tool("hitl_grant_check", deploy))["granted"]
        given = result(await alice.call_tool("hitl_grants", {"role": "given"}))["grants"]
        assert [g["id"] for g in given] == [issued[0]["id"]]

        assert result(await alice.call_tool("hitl_grant_revoke", {"id": issued[0]["id"]}))["revoked"] is True
        assert result(await alice.call_tool("hitl_grant_revoke", {"id": issued[0]["id"]}))["revoked"] is False
        unknown = error(await alice.call_tool("hitl_grant_revoke", {"id": "no-such-grant"}))  # as HTTP's 404
        assert "no-such-grant" in unknown, unknown
        assert not result(await bot.call_tool("hitl_grant_check", {"grant": PUSH}))["granted"]
        assert result(await bot.call_tool("hitl_grants", {}))["grants"] == []


async def test_echoing_a_grant_the_choices_did_not_trigger_fails_the_whole_response(mcp_as: MCP) -> None:
    async with mcp_as("alice-bot") as bot, mcp_as("alice") as alice:
        job = result(await bot.call_tool("hitl_request", offer(PUSH, option_grants=[DEPLOY])))
        # picks staging (no grant) but echoes production's grant, and the push grant too
        answer = {"id": job["job"], "answers": {"ok": True, "where": "staging"}, "grants": [PUSH, DEPLOY]}
        said = error(await alice.call_tool("hitl_respond", answer))
        assert "still open" in said
        assert result(await bot.call_tool("hitl_status", {"job": job["job"]}))["status"] == "INPUT_REQUIRED"
        assert result(await bot.call_tool("hitl_grants", {"live": False}))["grants"] == []

        # a "no" triggers nothing either, so echoing its grant fails as well
        refused = {"id": job["job"], "answers": {"ok": False, "where": "staging"}, "grants": [PUSH]}
        assert "still open" in error(await alice.call_tool("hitl_respond", refused))


async def test_an_explicit_null_expiry_issues_a_grant_that_never_expires(mcp_as: MCP) -> None:
    async with mcp_as("alice-bot") as bot, mcp_as("alice") as alice:
        job = result(await bot.call_tool("hitl_request", offer(DEPLOY)))
        answer = {"id": job["job"], "answers": {"ok": True}, "grants": [{"with": "env:prod", "can": "deploy"}]}
        result(await alice.call_tool("hitl_respond", answer))
        issued = result(await bot.call_tool("hitl_status", {"job": job["job"]}))["response"]["grants"]
        assert [(g["can"], g["exp"], g["expires_at"]) for g in issued] == [("deploy", None, None)]


async def test_without_an_echo_nothing_is_issued(mcp_as: MCP) -> None:
    async with mcp_as("alice-bot") as bot, mcp_as("alice") as alice:
        job = result(await bot.call_tool("hitl_request", offer(PUSH)))
        result(await alice.call_tool("hitl_respond", {"id": job["job"], "answers": {"ok": True}}))
        done = result(await bot.call_tool("hitl_status", {"job": job["job"]}))
        assert done["status"] == "COMPLETE" and done["response"]["grants"] == []


async def test_an_agent_asks_another_person_only_with_their_grant_to_request(mcp_as: MCP, world: World) -> None:
    async with mcp_as("alice-bot") as bot, mcp_as("bob") as bob, mcp_as("alice") as alice:
        ask = {"asks": [{"type": "text", "prompt": "Review my PR?"}], "user": "bob"}
        assert error(await bot.call_tool("hitl_request", ask))
        assert error(await alice.call_tool("hitl_request", ask))  # a person, too, needs bob's permission
        assert result(await bob.call_tool("hitl_list", {}))["requests"] == []

        async with world.api("bob") as api:
            permission = {"to": "alice-bot", "with": "interlock:inbox/bob", "can": "hitl/request"}
            given = await api.post("/grants", json=permission)
            assert given.status_code in (200, 201), given.text
        job = result(await bot.call_tool("hitl_request", ask))
        assert job["user"] == "bob"
        assert [r["id"] for r in result(await bob.call_tool("hitl_list", {}))["requests"]] == [job["job"]]


async def test_a_grant_whose_issuer_is_cut_off_is_listed_as_not_in_force_and_left_out_of_the_live_ones(
    mcp_as: MCP, world: World
) -> None:
    # bob lets alice-bot ask him, then `interlock token revoke bob` cuts him off: hitl_grants
    # leaves the grant out of the live ones (the default) and, asked for every one, lists it
    # with issuer_cut_off true, not revoked. `token create bob` gives it back.
    async with world.api("bob") as api:
        permission = {"to": "alice-bot", "with": "interlock:inbox/bob", "can": "hitl/request"}
        given = await api.post("/grants", json=permission)
        assert given.status_code == 201, given.text
    async with mcp_as("alice-bot") as bot:
        [held] = result(await bot.call_tool("hitl_grants", {}))["grants"]
        assert (held["id"], held["issuer_cut_off"]) == (given.json()["id"], False)
        async with interlock.connect(world.db) as store:
            assert isinstance(store, LocalBroker)
            await store.revoke_tokens(principal="bob")  # `interlock token revoke bob`
            assert result(await bot.call_tool("hitl_grants", {}))["grants"] == []
            [listed] = result(await bot.call_tool("hitl_grants", {"live": False}))["grants"]
            assert listed["id"] == held["id"] and listed["revoked_at"] is None and listed["issuer_cut_off"] is True
            await store.save_token(issue_token("bob", datetime.now(UTC)))  # `interlock token create bob`
        [again] = result(await bot.call_tool("hitl_grants", {}))["grants"]
        assert (again["id"], again["issuer_cut_off"]) == (held["id"], False)


@pytest.mark.parametrize("way", ["in_process", "http"])
async def test_a_venue_ceiling_refuses_excessive_offers_before_delivery(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], way: str
) -> None:
    db = f"sqlite:///{tmp_path / 'ceiling.db'}"
    tokens = await add_people(db)
    async with serve_apart(
        db, auth=True, grant_policy=GrantPolicy(default_seconds=3600, ceiling_seconds=86400)
    ) as base:
        world = World(base, db, tokens)
        async with WAYS[way](world, "alice-bot") as bot, WAYS[way](world, "alice") as alice:
            too_long = {"with": "repo:acme/web", "can": "push", "exp": int(time.time()) + 30 * 86400}
            assert "ceiling" in error(await bot.call_tool("hitl_request", offer(too_long)))
            assert "no expiry" in error(await bot.call_tool("hitl_request", offer(DEPLOY)))  # under a ceiling
            assert result(await alice.call_tool("hitl_list", {}))["requests"] == []  # nothing was delivered

            within = {"with": "repo:acme/web", "can": "push", "exp": int(time.time()) + 3600}
            assert result(await bot.call_tool("hitl_request", offer(within)))["status"] == "INPUT_REQUIRED"
