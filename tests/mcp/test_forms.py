"""A form asked over MCP: `hitl_request` with `type: "form"` and its `schema`, answered with an
object that fits it, from MCP, the API or the Python API; a wrong answer or a bad schema is
refused as the API refuses it, and changes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from mcp_support import EVERY_WAY, MCP, World, error, result

import interlock
from interlock import InvalidAnswer

pytestmark = pytest.mark.anyio

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "version": {"type": "string", "pattern": "^[0-9]+[.][0-9]+$"},
        "replicas": {"type": "integer", "minimum": 1},
        "notes": {"type": "string"},
    },
    "required": ["version", "replicas"],
    "additionalProperties": False,
}
FORM = {"type": "form", "id": "release", "prompt": "Which release, how many replicas?", "schema": SCHEMA}
FILLED = {"version": "1.2", "replicas": 3}


def deep_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    node = schema
    for _ in range(levels):
        node["properties"] = {"a": {"type": "object"}}
        node = node["properties"]["a"]
    return schema


@EVERY_WAY
async def test_an_agent_asks_for_a_form_and_the_job_completes_with_the_object_she_filled_in(mcp_as: MCP) -> None:
    async with mcp_as("alice-bot") as bot, mcp_as("alice") as alice:
        job = result(await bot.call_tool("hitl_request", {"asks": [FORM], "title": "Release"}))
        assert (job["status"], job["user"]) == ("INPUT_REQUIRED", "alice")

        (ask,) = result(await alice.call_tool("hitl_read", {"id": job["job"]}))["asks"]
        assert ask == {
            "id": "release",
            "type": "form",
            "prompt": "Which release, how many replicas?",
            "required": True,
            "schema": SCHEMA,
            "answer_with": "an object fitting the schema",
        }

        done = result(await alice.call_tool("hitl_respond", {"id": job["job"], "answers": {"release": FILLED}}))
        assert done["status"] == "answered"
        settled = result(await bot.call_tool("hitl_status", {"job": job["job"]}))
        assert settled["status"] == "COMPLETE"
        assert settled["response"]["answers"] == {"release": FILLED}


async def test_an_answer_that_does_not_fit_the_form_says_what_is_wrong_and_changes_nothing(mcp_as: MCP) -> None:
    async with mcp_as("alice-bot") as bot, mcp_as("alice") as alice:
        job = result(await bot.call_tool("hitl_request", {"asks": [FORM]}))
        wrong = [
            ({"version": "1.2"}, "'replicas' is a required property"),
            ({"version": "1.2", "replicas": 0}, "0 is less than the minimum of 1 at 'replicas'"),
            ({"version": "latest", "replicas": 2}, "'latest' does not match"),
            ({**FILLED, "colour": "red"}, "('colour' was unexpected)"),
            ("1.2 with 3 replicas", "expected an object, got text"),
        ]
        for answer, why in wrong:
            said = error(await alice.call_tool("hitl_respond", {"id": job["job"], "answers": {"release": answer}}))
            assert said.count("ask 'release'") == 1 and why in said and "still open" in said, said
        assert result(await bot.call_tool("hitl_status", {"job": job["job"]}))["status"] == "INPUT_REQUIRED"
        (ask,) = result(await alice.call_tool("hitl_read", {"id": job["job"]}))["asks"]
        assert ask["schema"] == SCHEMA


async def test_a_form_asked_over_mcp_is_answered_on_the_api_and_through_the_python_api(
    mcp_as: MCP, world: World
) -> None:
    async with mcp_as("alice-bot") as bot, world.api("alice") as api:
        on_api = result(await bot.call_tool("hitl_request", {"asks": [FORM]}))["job"]
        refused = await api.post(f"/requests/{on_api}/answer", json={"answer": {"version": "1.2"}})
        assert refused.status_code == 422 and "'replicas' is a required property" in refused.json()["detail"]
        answered = await api.post(f"/requests/{on_api}/answer", json={"answer": FILLED})
        assert answered.status_code == 200, answered.text
        settled = result(await bot.call_tool("hitl_status", {"job": on_api}))
        assert (settled["status"], settled["response"]["answers"]) == ("COMPLETE", {"release": FILLED})

        in_python = result(await bot.call_tool("hitl_request", {"asks": [FORM]}))["job"]
        async with interlock.connect(world.base, token=world.tokens["alice"]) as broker:
            with pytest.raises(InvalidAnswer, match="minimum of 1"):
                await broker.resolve(in_python, {"release": {"version": "1.2", "replicas": 0}})
            assert result(await bot.call_tool("hitl_status", {"job": in_python}))["status"] == "INPUT_REQUIRED"
            assert await broker.resolve(in_python, {"release": {**FILLED, "notes": "after lunch"}})
        settled = result(await bot.call_tool("hitl_status", {"job": in_python}))
        assert settled["response"]["answers"] == {"release": {**FILLED, "notes": "after lunch"}}


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ({"type": "string"}, '"type": "object"'),
        (None, '"type": "object"'),
        ({"type": "object", "properties": {"a": {"type": 5}}}, "invalid form schema"),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/none"}}}, "points to nothing"),
        ({"type": "object", "properties": {"a": {"type": "string", "pattern": "(a)\\1"}}}, "not supported"),
        (deep_schema(40), "levels deep"),
        (
            {
                "type": "object",
                "properties": {f"p{i}": {"type": "string", "description": "x" * 40} for i in range(2000)},
            },
            "bytes",
        ),
    ],
    ids=["not-an-object", "none", "invalid", "dangling-ref", "backtracking-pattern", "too-deep", "too-large"],
)
async def test_a_bad_form_schema_is_refused_as_the_api_refuses_it_and_nothing_is_asked(
    mcp_as: MCP, world: World, schema: dict[str, Any] | None, why: str
) -> None:
    ask = {"type": "form", "id": "f", "prompt": "Fill in"} | ({"schema": schema} if schema is not None else {})
    async with mcp_as("alice-bot") as bot, mcp_as("alice") as alice, world.api("alice-bot") as api:
        on_api = await api.post("/requests", json={"to": "alice", "asks": [ask | {"schema": schema or {}}]})
        assert on_api.status_code == 422, on_api.text
        detail = on_api.json()["detail"]
        said = error(await bot.call_tool("hitl_request", {"asks": [ask]}))
        assert detail in said and "ask 'f'" in said and why in said, (said, detail)
        assert result(await alice.call_tool("hitl_list", {}))["requests"] == []


async def test_hitl_request_offers_the_form_type_and_its_schema(mcp_as: MCP) -> None:
    async with mcp_as("alice-bot") as bot:
        tools = {tool.name: tool for tool in (await bot.list_tools()).tools}
    ask_in = tools["hitl_request"].input_schema["$defs"]["AskIn"]
    assert "form" in ask_in["properties"]["type"]["enum"]
    assert "form:" in ask_in["properties"]["type"]["description"]
    assert {"type": "object", "additionalProperties": True} in ask_in["properties"]["schema"]["anyOf"]
    assert "schema_" not in ask_in["properties"]
    assert "form:" in (tools["hitl_request"].description or "")
    assert "form -> an object fitting the schema" in (tools["hitl_respond"].description or "")
