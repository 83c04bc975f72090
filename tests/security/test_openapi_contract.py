"""The OpenAPI document says what the server does: every error is documented as RFC 9457
problem details, where it can happen, and is sent in that shape (unknown routes and bodies
that are not JSON included); bodies the schema accepts are not refused for their shape."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator
from limits_support import BOUND, TEXT, api, issue_tokens

pytestmark = pytest.mark.anyio

PROBLEM_JSON = "application/problem+json"

# The problems each route can answer with (401 and 403 are on every route, with auth).
EXPECTED = {
    ("post", "/api/v1/requests"): {400, 409, 413, 422, 429},
    ("get", "/api/v1/requests"): {422},
    ("get", "/api/v1/requests/{request_id}"): {404},
    ("get", "/api/v1/requests/{request_id}/wait"): {404, 408, 422},
    ("post", "/api/v1/requests/{request_id}/answer"): {400, 404, 409, 413, 422},
    ("post", "/api/v1/answers"): {400, 413, 422},
    ("post", "/api/v1/requests/{request_id}/reject"): {400, 404, 409, 413, 422},
    ("post", "/api/v1/requests/{request_id}/cancel"): {400, 404, 409, 413, 422},
    ("post", "/api/v1/requests/{request_id}/expire"): {404, 409},
    ("post", "/api/v1/close"): {400, 413, 422},
    ("post", "/api/v1/reopen"): {400, 413, 422},
    ("post", "/api/v1/inform"): {400, 413, 422, 429},
    ("get", "/api/v1/events"): {422},
    ("get", "/api/v1/events/stream"): {422, 429},
}


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'contract.db'}"


@pytest.fixture
def spec(serve: Callable[..., AbstractContextManager[str]]) -> Iterator[dict[str, Any]]:
    with serve("memory://", auth=True) as base:
        yield httpx.get(f"{base}/openapi.json", timeout=BOUND).json()


def problem_validator(spec: dict[str, Any]) -> Draft202012Validator:
    return Draft202012Validator(spec["components"]["schemas"]["Problem"])


def test_every_error_is_documented_as_problem_details(spec: dict[str, Any]) -> None:
    problem_ref = {"$ref": "#/components/schemas/Problem"}
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    assert response["content"] == {PROBLEM_JSON: {"schema": problem_ref}}, (method, path, status)
    assert "HTTPValidationError" not in spec["components"]["schemas"]


def test_each_route_documents_the_problems_it_can_answer_with(spec: dict[str, Any]) -> None:
    for (method, path), statuses in EXPECTED.items():
        documented = {int(s) for s in spec["paths"][path][method]["responses"]}
        assert statuses | {401, 403} <= documented, (method, path, sorted(statuses - documented))
    limited = spec["paths"]["/api/v1/requests"]["post"]["responses"]["429"]
    assert "Retry-After" in limited["headers"]


async def test_unknown_routes_wrong_methods_and_unparsable_bodies_answer_problem_details(
    db: str, serve: Callable[..., AbstractContextManager[str]], spec: dict[str, Any]
) -> None:
    tokens = await issue_tokens(db)
    check = problem_validator(spec)
    with serve(db, auth=True) as base:
        async with api(base, tokens["alice-bot"]) as bot:
            cases = [
                (await bot.get("/no-such-route"), 404, "not_found"),
                (await bot.delete("/requests"), 405, "method_not_allowed"),
                (await bot.post("/requests", content=b'{"asks": [', headers={"content-type": "application/json"}), 400),
                (await bot.post("/requests", json={"asks": []}), 422, "invalid_request"),
                (await bot.get("/requests/no-such-id"), 404, "not_found"),
            ]
            for response, status, *code in cases:
                assert response.status_code == status, response.text
                assert response.headers["content-type"] == PROBLEM_JSON
                body = response.json()
                check.validate(body)
                assert body["status"] == status
                if code:
                    assert body["code"] == code[0]
            assert "POST" in cases[1][0].headers["allow"]
        async with api(base) as anonymous:
            refused = await anonymous.get("/requests")
            assert refused.status_code == 401 and refused.headers["content-type"] == PROBLEM_JSON
            check.validate(refused.json())


async def test_an_update_without_words_is_excluded_by_the_schema_and_refused_by_the_server(
    db: str, serve: Callable[..., AbstractContextManager[str]], spec: dict[str, Any]
) -> None:
    schemas = spec["components"]["schemas"]
    inform = Draft202012Validator({**schemas["InformBody"], "$defs": schemas})
    for message in ("", "   ", "\n\t"):
        assert not inform.is_valid({"message": message})
    assert inform.is_valid({"message": " Halfway there "})
    tokens = await issue_tokens(db)
    with serve(db, auth=True) as base:
        async with api(base, tokens["alice-bot"]) as bot:
            for message in ("", "   "):
                refused = await bot.post("/inform", json={"message": message})
                assert refused.status_code == 422 and refused.headers["content-type"] == PROBLEM_JSON
            assert (await bot.post("/inform", json={"message": " Halfway there "})).status_code == 201


async def test_a_persons_request_without_a_recipient_goes_to_their_own_inbox(
    db: str, serve: Callable[..., AbstractContextManager[str]]
) -> None:
    tokens = await issue_tokens(db)
    with serve(db, auth=True) as base:
        async with api(base, tokens["alice"]) as alice, api(base, tokens["alice-bot"]) as bot:
            made = await alice.post("/requests", json=TEXT)
            assert made.status_code == 201, made.text
            assert made.json()["to"] == "alice" and made.json()["requester"] == "alice"
            inbox = (await alice.get("/requests")).json()["items"]
            assert [r["id"] for r in inbox] == [made.json()["id"]]
            assert (await bot.post("/requests", json=TEXT)).json()["to"] == "alice"  # an agent's: its owner's


def test_every_json_success_documents_its_body(spec: dict[str, Any]) -> None:
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                body = response.get("content", {}).get("application/json")
                if status.startswith("2") and body is not None:
                    assert body.get("schema") not in (None, {}), (method, path, status)


def conforms(spec: dict[str, Any], operation: tuple[str, str], status: str, body: Any) -> None:
    method, path = operation
    schema = spec["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]
    Draft202012Validator({**schema, "components": spec["components"]}).validate(body)


async def test_the_interactions_answer_in_the_shapes_they_publish(
    db: str, serve: Callable[..., AbstractContextManager[str]], spec: dict[str, Any]
) -> None:
    tokens = await issue_tokens(db)
    prefix, spec_prefix = "/interactions", "/api/v1/interactions"
    with serve(db, auth=True) as base:
        async with api(base, tokens["alice-bot"]) as bot, api(base, tokens["alice"]) as alice:
            approval = {"kind": "approval", "to": "alice", "asks": [{"type": "confirm", "prompt": "Deploy?"}]}
            approval["context"] = {"tool": "deploy", "arguments": {"env": "prod"}}
            made = [
                await bot.post("/requests", json=approval),
                await bot.post(
                    "/requests",
                    json={
                        "to": "alice",
                        "details": "For the *release*",
                        "asks": [
                            {"type": "multi_choice", "id": "m", "prompt": "Which?", "options": ["a", "b"], "max": 2},
                            {"type": "form", "id": "f", "prompt": "Notes?", "schema": {"type": "object"}},
                            {"type": "text", "id": "t", "prompt": "Why?", "multiline": True},
                        ],
                    },
                ),
                await bot.post(
                    "/requests", json={"to": "alice", "asks": [{"type": "choice", "prompt": "Pick", "options": ["x"]}]}
                ),
            ]
            assert all(m.status_code == 201 for m in made), [m.text for m in made]
            ids = [m.json()["id"] for m in made]
            decided = await alice.post(
                f"{prefix}/{ids[0]}/resolve", json={"inputResponses": [{"requestId": ids[0], "optionId": "approve"}]}
            )
            assert decided.status_code == 200, decided.text
            conforms(spec, ("post", f"{spec_prefix}/{{interaction_id}}/resolve"), "200", decided.json())
            batch = await alice.post(
                f"{prefix}/resolve", json={"items": [{"id": ids[2], "cancel": True}, {"id": "nope", "cancel": True}]}
            )
            assert [item["ok"] for item in batch.json()] == [True, False]
            conforms(spec, ("post", f"{spec_prefix}/resolve"), "200", batch.json())
            listed = (await alice.get(prefix)).json()
            assert len(listed["items"]) == 3 and {i["status"] for i in listed["items"]} == {
                "answered",
                "pending",
                "cancelled",
            }
            conforms(spec, ("get", spec_prefix), "200", listed)
            for request_id in ids:
                conforms(
                    spec,
                    ("get", f"{spec_prefix}/{{interaction_id}}"),
                    "200",
                    (await alice.get(f"{prefix}/{request_id}")).json(),
                )
