"""Every MCP tool, driven by the official MCP client in process and over /mcp; the tests
marked EVERY_WAY over stdio too (`interlock mcp` as a subprocess)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from mcp import MCPError
from mcp.types import INVALID_PARAMS
from mcp_support import BOUND, EVERY_WAY, MCP, World, error, next_created, result

import interlock

pytestmark = pytest.mark.anyio

FOUR_ASKS: list[dict[str, Any]] = [
    {"type": "text", "id": "why", "prompt": "Why?"},
    {"type": "approval", "id": "ok", "prompt": "Deploy to production?"},
    {"type": "choice", "id": "region", "prompt": "Where?", "options": [{"id": "eu", "label": "Europe"}, "us"]},
    {"type": "checkboxes", "id": "notify", "prompt": "Tell whom?", "options": ["ops", "qa", "sales"]},
]


@EVERY_WAY
async def test_an_agent_asks_its_owner_and_the_job_completes_with_her_answers(mcp_as: MCP) -> None:
    async with mcp_as("alice-bot") as bot, mcp_as("alice") as alice:
        job = result(await bot.call_tool("hitl_request", {"asks": FOUR_ASKS, "title": "Release 1.2"}))
        assert (job["status"], job["user"]) == ("INPUT_REQUIRED", "alice")

        inbox = result(await alice.call_tool("hitl_list", {"status": "open"}))
        assert [r["id"] for r in inbox["requests"]] == [job["job"]]
        assert inbox["requests"][0]["from"] == "alice-bot"

        whole = result(await alice.call_tool("hitl_read", {"id": job["job"]}))
        assert [(a["id"], a["type"]) for a in whole["asks"]] == [
            ("why", "text"),
            ("ok", "approval"),
            ("region", "choice"),
            ("notify", "checkboxes"),
        ]
        assert whole["asks"][2]["options"] == [{"id": "eu", "label": "Europe"}, {"id": "us", "label": "us"}]

        answers = {"why": "tests pass", "ok": True, "region": "eu", "notify": ["ops", "qa"]}
        done = result(await alice.call_tool("hitl_respond", {"id": job["job"], "answers": answers, "comment": "go"}))
        assert done["status"] == "answered"

        settled = result(await bot.call_tool("hitl_status", {"job": job["job"]}))
        assert settled["status"] == "COMPLETE"
        # An agent has no inbox (only people are asked): its list is what it asked.
        asked = result(await bot.call_tool("hitl_list", {}))["requests"]
        assert [(r["id"], r["from"], r["status"]) for r in asked] == [(job["job"], "alice-bot", "answered")]
        assert result(await bot.call_tool("hitl_list", {"status": "open"}))["requests"] == []
        assert settled["response"]["answers"] == answers
        assert (settled["response"]["comment"], settled["response"]["by"]) == ("go", "alice")


async def test_a_bad_answer_says_why_and_leaves_the_request_open(mcp_as: MCP) -> None:
    async with mcp_as("alice-bot") as bot, mcp_as("alice") as alice:
        job = result(await bot.call_tool("hitl_request", {"asks": FOUR_ASKS[1:3]}))
        bad = {"ok": "yes please", "region": "eu"}
        said = error(await alice.call_tool("hitl_respond", {"id": job["job"], "answers": bad}))
        assert "'ok'" in said and "still open" in said
        assert said.count("ask 'ok'") == 1, said  # named once, not "(ask 'ok'): ask 'ok': ..."
        elsewhere = {"id": job["job"], "answers": {"ok": True, "region": "mars"}}
        unknown = error(await alice.call_tool("hitl_respond", elsewhere))
        assert "mars" in unknown
        assert result(await bot.call_tool("hitl_status", {"job": job["job"]}))["status"] == "INPUT_REQUIRED"
        assert result(await alice.call_tool("hitl_list", {"status": "open"}))["requests"]


async def test_a_rejection_fails_the_job_with_the_comment_as_reason(mcp_as: MCP) -> None:
    async with mcp_as("alice-bot") as bot, mcp_as("alice") as alice:
        job = result(await bot.call_tool("hitl_request", {"asks": [FOUR_ASKS[1]]}))
        reply = {"id": job["job"], "action": "reject", "comment": "not on a Friday"}
        # answers sent with a rejection were dropped without a word: they are refused
        mixed = error(await alice.call_tool("hitl_respond", {**reply, "answers": {FOUR_ASKS[1]["id"]: True}}))
        assert "answers go with action 'answer'" in mixed
        assert result(await bot.call_tool("hitl_status", {"job": job["job"]}))["status"] == "INPUT_REQUIRED"
        assert result(await alice.call_tool("hitl_respond", reply))["status"] == "rejected"
        failed = result(await bot.call_tool("hitl_status", {"job": job["job"]}))
        assert failed["status"] == "FAILED" and "not on a Friday" in failed["reason"]
        assert [r["id"] for r in result(await alice.call_tool("hitl_list", {"status": "rejected"}))["requests"]] == [
            job["job"]
        ]


async def test_a_request_with_a_timeout_expires_and_the_waiting_status_reports_it_failed(mcp_as: MCP) -> None:
    async with mcp_as("alice-bot") as bot:
        job = result(await bot.call_tool("hitl_request", {"asks": [FOUR_ASKS[0]], "timeout": 0.5}))
        with anyio.fail_after(BOUND):
            failed = result(await bot.call_tool("hitl_status", {"job": job["job"], "wait": BOUND - 5}))
        assert failed["status"] == "FAILED" and failed["reason"].startswith("expired")


async def test_a_request_can_name_the_instant_it_expires(mcp_as: MCP) -> None:
    async with mcp_as("alice-bot") as bot, mcp_as("alice") as alice:
        ask = {"asks": [FOUR_ASKS[0]]}
        later = result(await bot.call_tool("hitl_request", {**ask, "expires_at": "2999-03-04T05:06:07+05:30"}))
        assert (later["status"], later["expires_at"]) == ("INPUT_REQUIRED", "2999-03-04T05:06:07+05:30")
        # with a timeout too, the earlier of the two
        both = result(await bot.call_tool("hitl_request", {**ask, "expires_at": "2999-01-01T00:00:00Z", "timeout": 60}))
        assert both["expires_at"] < "2999"

        past = result(await bot.call_tool("hitl_request", {**ask, "expires_at": "2000-01-01T00:00:00Z"}))
        with anyio.fail_after(BOUND):
            failed = result(await bot.call_tool("hitl_status", {"job": past["job"], "wait": BOUND - 5}))
        assert failed["status"] == "FAILED" and failed["reason"].startswith("expired")

        for sent, said in [
            ("2999-03-04T05:06:07", "has no offset: add Z for UTC"),
            ("next tuesday", "is not a date and time"),
        ]:
            assert said in error(await bot.call_tool("hitl_request", {**ask, "expires_at": sent}))
        pending = result(await alice.call_tool("hitl_list", {"status": "open"}))["requests"]
        assert sorted(r["id"] for r in pending) == sorted([later["job"], both["job"]])  # nothing more was made


@EVERY_WAY
async def test_status_with_a_wait_returns_as_soon_as_the_person_answers(mcp_as: MCP, world: World) -> None:
    async with mcp_as("alice-bot") as bot:
        job = result(await bot.call_tool("hitl_request", {"asks": [FOUR_ASKS[1]]}))
        seen: dict[str, Any] = {}

        async def wait() -> None:
            seen.update(result(await bot.call_tool("hitl_status", {"job": job["job"], "wait": 120})))

        with anyio.fail_after(BOUND):
            async with anyio.create_task_group() as tg, world.api("alice") as alice:
                tg.start_soon(wait)
                answered = await alice.post(f"/requests/{job['job']}/answer", json={"answer": True})
                assert answered.status_code == 200, answered.text
        assert seen["status"] == "COMPLETE" and seen["response"]["answers"] == {"ok": True}


async def test_a_job_is_cancelled_by_its_requester_only(mcp_as: MCP) -> None:
    async with mcp_as("alice-bot") as bot, mcp_as("alice") as alice:
        job = result(await bot.call_tool("hitl_request", {"asks": [FOUR_ASKS[0]]}))
        assert "made" in error(await alice.call_tool("hitl_cancel", {"job": job["job"]}))
        cancelled = result(await bot.call_tool("hitl_cancel", {"job": job["job"], "reason": "done without it"}))
        assert cancelled["status"] == "CANCELLED" and "done without it" in cancelled["reason"]
        assert "cancelled" in error(await bot.call_tool("hitl_cancel", {"job": job["job"]}))


@EVERY_WAY
async def test_only_the_person_the_request_is_to_may_respond(mcp_as: MCP) -> None:
    async with mcp_as("alice-bot") as bot, mcp_as("bob") as bob:
        job = result(await bot.call_tool("hitl_request", {"asks": [FOUR_ASKS[1]]}))
        reply = {"id": job["job"], "answers": {"ok": True}}
        assert error(await bob.call_tool("hitl_respond", reply))  # not his inbox: he may not even read it
        assert "own inbox" in error(await bot.call_tool("hitl_respond", reply))  # an agent never answers
        assert result(await bob.call_tool("hitl_list", {}))["requests"] == []
        assert error(await bob.call_tool("hitl_read", {"id": job["job"]}))
        assert result(await bot.call_tool("hitl_status", {"job": job["job"]}))["status"] == "INPUT_REQUIRED"


async def test_the_request_resource_reads_the_whole_request(mcp_as: MCP) -> None:
    async with mcp_as("alice-bot") as bot, mcp_as("alice") as alice:
        job = result(await bot.call_tool("hitl_request", {"asks": FOUR_ASKS, "description": "**why** it matters"}))
        templates = await alice.list_resource_templates()
        assert [t.uri_template for t in templates.resource_templates] == ["interlock://requests/{request_id}"]
        read = await alice.read_resource(f"interlock://requests/{job['job']}")
        whole = json.loads(read.contents[0].text)  # type: ignore[union-attr]
        assert whole["description"] == "**why** it matters"
        assert whole["asks"][1] == {
            "id": "ok",
            "type": "approval",
            "prompt": "Deploy to production?",
            "required": True,
            "answer_with": "true or false",
        }
        assert whole["job"]["status"] == "INPUT_REQUIRED"


async def test_bad_asks_are_refused_and_nothing_lands_in_the_inbox(mcp_as: MCP) -> None:
    async with mcp_as("alice-bot") as bot, mcp_as("alice") as alice:
        no_options = error(await bot.call_tool("hitl_request", {"asks": [{"type": "choice", "prompt": "Which?"}]}))
        assert "option" in no_options
        grants_on_text = {"type": "text", "prompt": "Why?", "grants": [{"with": "repo", "can": "push"}]}
        assert "grants" in error(await bot.call_tool("hitl_request", {"asks": [grants_on_text]}))
        assert error(await bot.call_tool("hitl_request", {"asks": [{"type": "poll", "prompt": "?"}]}))
        assert error(await bot.call_tool("hitl_request", {"asks": [FOUR_ASKS[0]], "user": "nobody-here"}))
        # An argument the tool does not take (a model's typo) was dropped: a request that never expired.
        misspelt = error(await bot.call_tool("hitl_request", {"asks": [FOUR_ASKS[0]], "timout": 60}))
        assert "timout" in misspelt and "Extra inputs are not permitted" in misspelt
        assert "agent" in error(await bot.call_tool("hitl_request", {"asks": [FOUR_ASKS[0]], "user": "alice-bot"}))
        assert result(await alice.call_tool("hitl_list", {}))["requests"] == []


async def test_request_human_input_waits_for_the_answer_and_returns_choice_and_steering(
    mcp_as: MCP, world: World
) -> None:
    out: dict[str, Any] = {}
    async with mcp_as("alice-bot") as bot, world.api("alice") as alice:

        async def ask() -> None:
            arguments = {"question": "Which colour?", "question_type": "MULTIPLE_CHOICE", "choices": ["red", "blue"]}
            out["result"] = await bot.call_tool("request_human_input", arguments)

        with anyio.fail_after(BOUND):
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask)
                pending = await next_created(world, "alice")
                body = {"answers": {pending["asks"][0]["id"]: "blue"}, "reason": "the brand colour"}
                assert (await alice.post(f"/requests/{pending['id']}/answer", json=body)).status_code == 200
    called = out["result"]
    assert not called.is_error
    assert json.loads(called.content[0].text) == {"choice": "blue", "steering": "the brand colour"}
    assert called.structured_content == {"choice": "blue", "steering": "the brand colour"}  # not a string in it


async def test_request_human_input_refuses_bad_arguments(mcp_as: MCP) -> None:
    async with mcp_as("alice-bot") as bot:
        said = error(await bot.call_tool("request_human_input", {"question": "Pick", "question_type": "MULTI_SELECT"}))
        assert "choices" in said


async def test_inform_user_records_an_update_the_owner_sees(mcp_as: MCP, world: World) -> None:
    async with mcp_as("alice-bot") as bot:
        receipt = result(await bot.call_tool("inform_user", {"message": "halfway there", "data": {"done": 5}}))
    assert receipt["delivered"] is True
    async with world.api("alice") as alice:
        events = (await alice.get("/events")).json()["events"]
    informed = [e for e in events if e["type"] == "informed"]
    assert [e["id"] for e in informed] == [receipt["receipt"]]
    assert informed[0]["data"]["message"] == "halfway there"


@EVERY_WAY
async def test_every_tool_is_listed_with_a_description(mcp_as: MCP) -> None:
    async with mcp_as("alice") as alice:
        tools = {t.name: t for t in (await alice.list_tools()).tools}
    assert set(tools) == {
        "hitl_request",
        "hitl_status",
        "hitl_list",
        "hitl_read",
        "hitl_respond",
        "hitl_cancel",
        "hitl_grants",
        "hitl_grant_check",
        "hitl_grant_revoke",
        "request_human_input",
        "inform_user",
    }
    assert all(len(t.description or "") > 80 for t in tools.values())
    assert tools["hitl_request"].input_schema["required"] == ["asks"]


async def test_request_human_input_times_out_as_a_tool_error(mcp_as: MCP) -> None:
    async with mcp_as("alice-bot") as bot:
        with anyio.fail_after(BOUND):
            said = error(await bot.call_tool("request_human_input", {"question": "Quick?", "timeout": 0.5}))
    assert "timed out" in said


async def test_a_retried_request_with_its_key_returns_the_first_job(mcp_as: MCP) -> None:
    async with mcp_as("alice-bot") as bot, mcp_as("alice") as alice:
        ask = {"asks": [FOUR_ASKS[1]], "idempotency_key": "release-1.2"}
        first = result(await bot.call_tool("hitl_request", ask))
        again = result(await bot.call_tool("hitl_request", ask))
        assert again["job"] == first["job"]
        assert len(result(await alice.call_tool("hitl_list", {}))["requests"]) == 1


async def test_reading_a_choice_that_takes_ones_own_words_says_so(mcp_as: MCP, world: World) -> None:
    choice = {"type": "choice", "id": "where", "prompt": "Where?", "options": ["eu", "us"], "allow_other": True}
    async with world.api("alice-bot") as bot, mcp_as("alice") as alice:
        made = await bot.post("/requests", json={"to": "alice", "asks": [choice]})
        assert made.status_code == 201, made.text
        read = result(await alice.call_tool("hitl_read", {"id": made.json()["id"]}))
        (ask,) = read["asks"]
        assert ask["answer_with"] == "one option id, or your own text"
        answered = await alice.call_tool("hitl_respond", {"id": made.json()["id"], "answers": {"where": "mars"}})
        assert not answered.is_error, answered


async def test_reading_the_resource_of_a_request_unknown_or_not_yours_says_why(mcp_as: MCP) -> None:
    async with mcp_as("alice-bot") as bot, mcp_as("bob") as bob:
        job = result(await bot.call_tool("hitl_request", {"asks": [FOUR_ASKS[0]], "title": "secret plans"}))
        with pytest.raises(MCPError) as unknown:
            await bob.read_resource("interlock://requests/no-such-request")
        assert unknown.value.error.code == INVALID_PARAMS  # the protocol's "not found"
        assert "no request with id 'no-such-request'" in unknown.value.error.message
        with pytest.raises(MCPError) as theirs:
            await bob.read_resource(f"interlock://requests/{job['job']}")
        assert "neither to you nor from you" in theirs.value.error.message
        assert "secret plans" not in str(theirs.value.error)


async def test_a_member_of_the_team_a_request_is_to_answers_it(mcp_as: MCP, world: World) -> None:
    async with interlock.connect(world.db) as store:
        await store.store.save_team("ops", ["alice"])
    async with mcp_as("alice-bot") as bot, mcp_as("alice") as alice, mcp_as("bob") as bob:
        job = result(await bot.call_tool("hitl_request", {"asks": [FOUR_ASKS[1]], "user": "ops"}))
        assert [r["id"] for r in result(await alice.call_tool("hitl_list", {"status": "open"}))["requests"]] == [
            job["job"]
        ]
        assert error(await bob.call_tool("hitl_respond", {"id": job["job"], "answers": {"ok": True}}))
        done = result(await alice.call_tool("hitl_respond", {"id": job["job"], "answers": {"ok": True}}))
        assert done["job"]["status"] == "COMPLETE" and done["job"]["response"]["by"] == "alice"
