"""The OpenAPI document says what the server does: every error is documented as RFC 9457
problem details, where it can happen, and is sent in that shape (unknown routes and bodies
that are not JSON included); bodies the schema accepts are not refused for their shape."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator
from limits_support import BOUND, TEXT, api, issue_tokens
from openapi_spec_validator import validate as validate_openapi

import interlock
from interlock.server.app import create_app

pytestmark = pytest.mark.anyio

PROBLEM_JSON = "application/problem+json"

# The problems each route can answer with (401 and 403 are on every route, with auth).
EXPECTED = {
    ("post", "/api/v1/requests"): {400, 409, 413, 415, 422, 429},
    ("get", "/api/v1/requests"): {422},
    ("get", "/api/v1/requests/{request_id}"): {404},
    ("get", "/api/v1/requests/{request_id}/wait"): {404, 408, 422},
    ("post", "/api/v1/requests/{request_id}/answer"): {400, 404, 409, 413, 415, 422},
    ("post", "/api/v1/answers"): {400, 413, 422},
    ("post", "/api/v1/requests/{request_id}/reject"): {400, 404, 409, 413, 422},
    ("post", "/api/v1/requests/{request_id}/cancel"): {400, 404, 409, 413, 422},
    ("post", "/api/v1/requests/{request_id}/expire"): {404, 409},
    ("post", "/api/v1/close"): {400, 413, 422},
    ("post", "/api/v1/reopen"): {400, 413, 422},
    ("post", "/api/v1/inform"): {400, 413, 422, 429},
    ("get", "/api/v1/events"): {422},
    ("get", "/api/v1/events/stream"): {400, 422, 429},
}


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'contract.db'}"


@pytest.fixture
def spec(serve: Callable[..., AbstractContextManager[str]]) -> Iterator[dict[str, Any]]:
    with serve("memory://", auth=True) as base:
        # Bounded as the fuzzing's fetch is: building the document is the server's costliest
        # first answer, and a loaded machine had it outlast BOUND.
        yield httpx.get(f"{base}/openapi.json", timeout=60).json()


def strict(spec: dict[str, Any], schema: dict[str, Any]) -> Draft202012Validator:
    """A validator of `schema` (a `$ref` into the document) that also refuses any member
    the document does not name: a problem's every member is documented, nested too."""
    schemas = copy.deepcopy(spec["components"]["schemas"])
    for component in schemas.values():
        if "properties" in component:
            component["additionalProperties"] = False
    return Draft202012Validator({**schema, "components": {"schemas": schemas}})


def problem_validator(spec: dict[str, Any]) -> Draft202012Validator:
    return strict(spec, {"$ref": "#/components/schemas/Problem"})


def documented_problem(spec: dict[str, Any], method: str, path: str, status: int) -> Draft202012Validator:
    """A strict validator of the problem a route documents for `status`."""
    content = spec["paths"][path][method]["responses"][str(status)]["content"]
    return strict(spec, content[PROBLEM_JSON]["schema"])


def test_every_error_is_documented_as_problem_details(spec: dict[str, Any]) -> None:
    """Every error is `application/problem+json`: the `Problem` schema, or a route's own
    that is a `Problem` with members of its own (the same members, of the same types,
    required alike, and more)."""
    schemas = spec["components"]["schemas"]
    problem = schemas["Problem"]
    own = set()
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    assert set(response["content"]) == {PROBLEM_JSON}, (method, path, status)
                    name = response["content"][PROBLEM_JSON]["schema"]["$ref"].removeprefix("#/components/schemas/")
                    schema = schemas[name]
                    assert set(problem["required"]) <= set(schema["required"]), (method, path, status)
                    for member, shape in problem["properties"].items():
                        if member != "code":  # a route's own names only the codes it sends
                            assert schema["properties"][member] == shape, (method, path, status, member)
                    assert set(schema["properties"]["code"]["enum"]) <= set(problem["properties"]["code"]["enum"])
                    if name != "Problem":
                        own.add((method, path, status, name))
    assert "HTTPValidationError" not in schemas
    assert own == {
        ("post", "/api/v1/runs/{run_id}/messages", "409", "MessageConflict"),
        ("post", "/api/v1/threads/{thread_id}/messages", "409", "MessageConflict"),
        ("post", "/api/v1/requests/{request_id}/claim", "409", "ClaimConflict"),
    }


async def test_the_conflicts_with_members_of_their_own_are_sent_as_documented(
    db: str, serve_apart: Callable[..., AbstractAsyncContextManager[str]], spec: dict[str, Any]
) -> None:
    """A message to a busy run is a 409 `thread_busy` whose `details` say what became of
    it (decided the approval, held, or not held), and to an ended run a 409 `run_conflict`
    naming the run; a claim on a request another member holds is a 409 `already_claimed`
    with the standing claim: each fits the route's documented 409, member for member."""
    tokens = await issue_tokens(db)
    async with interlock.connect(db) as broker:
        await broker.add_team_members("ops", ["alice", "bob"])
    run, messages = "alice-bot:run-1", "/api/v1/runs/{run_id}/messages"
    sent = documented_problem(spec, "post", messages, 409)
    to_thread = documented_problem(spec, "post", "/api/v1/threads/{thread_id}/messages", 409)
    async with serve_apart(db, auth=True, max_followups=1) as base:
        async with api(base, tokens["alice-bot"]) as bot, api(base, tokens["alice"]) as alice:
            assert (await bot.post("/runs", json={"agent": "deployer", "run_id": "run-1", "session": "t1"})).is_success
            approval = {"kind": "approval", "to": "alice", "asks": [{"type": "confirm", "prompt": "Deploy?"}]}
            asked = (await bot.post("/requests", json={**approval, "origin": {"run": "run-1"}})).json()["id"]
            parked = await bot.post("/runs/run-1/park", json={"state": {}, "waiting_on": [asked]})
            assert parked.status_code == 200, parked.text
            bodies = []
            for text in ("approve", "deploy to eu first", "and tell me"):
                response = await alice.post(f"/runs/{run}/messages", json={"text": text})
                assert response.status_code == 409 and response.headers["content-type"] == PROBLEM_JSON
                sent.validate(response.json())
                bodies.append(response.json())
            assert [b["code"] for b in bodies] == ["thread_busy"] * 3
            decided, held, full = (b["details"] for b in bodies)
            assert decided == {"resolved_interaction_id": asked}
            assert held["queued"] is True and set(held) == {"queued", "followup_id"}
            assert full == {}  # not held: the run holds as many as it may
            busy = await alice.post("/threads/t1/messages", json={"text": "still there?"})
            assert busy.status_code == 409, busy.text
            to_thread.validate(busy.json())
            assert (await alice.post(f"/runs/{run}/cancel", json={})).status_code == 200
            ended = await alice.post(f"/runs/{run}/messages", json={"text": "too late"})
            assert ended.status_code == 409, ended.text
            sent.validate(ended.json())
            assert ended.json()["code"] == "run_conflict"
            assert (ended.json()["run_id"], ended.json()["current_status"]) == (run, "cancelled")

            to_ops = (await bot.post("/requests", json={**TEXT, "to": "ops"})).json()["id"]
            assert (await alice.post(f"/requests/{to_ops}/claim")).status_code == 200
        async with api(base, tokens["bob"]) as bob:
            taken = await bob.post(f"/requests/{to_ops}/claim")
            assert taken.status_code == 409 and taken.json()["code"] == "already_claimed", taken.text
            documented_problem(spec, "post", "/api/v1/requests/{request_id}/claim", 409).validate(taken.json())
            assert taken.json()["claim"]["by"] == "alice"


def test_each_route_documents_the_problems_it_can_answer_with(spec: dict[str, Any]) -> None:
    for (method, path), statuses in EXPECTED.items():
        documented = {int(s) for s in spec["paths"][path][method]["responses"]}
        assert statuses | {401, 403} <= documented, (method, path, sorted(statuses - documented))
    limited = spec["paths"]["/api/v1/requests"]["post"]["responses"]["429"]
    assert "Retry-After" in limited["headers"]


async def test_unknown_routes_wrong_methods_and_unparsable_bodies_answer_problem_details(
    db: str, serve_apart: Callable[..., AbstractAsyncContextManager[str]], spec: dict[str, Any]
) -> None:
    tokens = await issue_tokens(db)
    check = problem_validator(spec)
    async with serve_apart(db, auth=True) as base:
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
    db: str, serve_apart: Callable[..., AbstractAsyncContextManager[str]], spec: dict[str, Any]
) -> None:
    schemas = spec["components"]["schemas"]
    inform = Draft202012Validator({**schemas["InformBody"], "$defs": schemas})
    for message in ("", "   ", "\n\t"):
        assert not inform.is_valid({"message": message})
    assert inform.is_valid({"message": " Halfway there "})
    tokens = await issue_tokens(db)
    async with serve_apart(db, auth=True) as base, api(base, tokens["alice-bot"]) as bot:
        for message in ("", "   "):
            refused = await bot.post("/inform", json={"message": message})
            assert refused.status_code == 422 and refused.headers["content-type"] == PROBLEM_JSON
        assert (await bot.post("/inform", json={"message": " Halfway there "})).status_code == 201


async def test_a_persons_request_without_a_recipient_goes_to_their_own_inbox(
    db: str, serve_apart: Callable[..., AbstractAsyncContextManager[str]]
) -> None:
    tokens = await issue_tokens(db)
    async with (
        serve_apart(db, auth=True) as base,
        api(base, tokens["alice"]) as alice,
        api(base, tokens["alice-bot"]) as bot,
    ):
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
    db: str, serve_apart: Callable[..., AbstractAsyncContextManager[str]], spec: dict[str, Any]
) -> None:
    tokens = await issue_tokens(db)
    prefix, spec_prefix = "/interactions", "/api/v1/interactions"
    async with (
        serve_apart(db, auth=True) as base,
        api(base, tokens["alice-bot"]) as bot,
        api(base, tokens["alice"]) as alice,
    ):
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


# Free-form documents, on purpose: a stored approval policy (its keys are those of the
# policy files agents load) and the routing (a routing file's JSON); each says so.
FREE_FORM = {("put", "/api/v1/routing"), ("get", "/api/v1/routing")}
FREE_FORM |= {
    (m, p) for m in ("post", "put") for p in ("/api/v1/approval-policies", "/api/v1/approval-policies/{agent}")
}
FREE_FORM |= {("put", "/api/v1/approval-policies/{agent}/servers/{server}")}
NO_TOKEN = {("get", "/api/v1/grants/keys"), ("post", "/api/v1/inbound/{channel}")}


def test_the_document_is_valid_openapi_3_1_that_a_client_can_be_generated_from(spec: dict[str, Any]) -> None:
    assert spec["openapi"].startswith("3.1.")
    validate_openapi(spec)
    ids = []
    assert spec["components"]["securitySchemes"] == {"bearer": {"type": "http", "scheme": "bearer", "description": ANY}}
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            where = (method, path)
            ids.append(operation["operationId"])
            assert operation["operationId"].isidentifier() and "api_v1" not in operation["operationId"], where
            assert operation["summary"] and operation.get("description"), where
            assert operation["security"] == ([] if where in NO_TOKEN else [{"bearer": []}]), where
            if where in NO_TOKEN:
                continue
            bodies = [operation.get("requestBody", {}).get("content", {}).get("application/json", {})]
            bodies += [r.get("content", {}).get("application/json", {}) for r in operation["responses"].values()]
            for body in bodies:
                schema = body.get("schema", {"$ref": ""})
                if where not in FREE_FORM:  # a shape, not a bare object
                    assert '"$ref"' in json.dumps(schema) or "properties" in schema, (where, schema)
            if "requestBody" in operation:
                assert "415" in operation["responses"], where
    assert len(ids) == len(set(ids))


class _Any:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and bool(other)


ANY = _Any()


async def test_a_body_sent_as_anything_but_json_is_a_415_problem_and_changes_nothing(
    db: str, serve_apart: Callable[..., AbstractAsyncContextManager[str]], spec: dict[str, Any]
) -> None:
    tokens = await issue_tokens(db)
    check = problem_validator(spec)
    body = b'{"asks": [{"type": "text", "prompt": "Deploy?"}]}'
    async with serve_apart(db, auth=True) as base, api(base, tokens["alice-bot"]) as bot:
        for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {"content-type": content_type} if content_type else {}
            refused = await bot.post("/requests", content=body, headers=headers)
            assert refused.status_code == 415, refused.text
            assert refused.headers["content-type"] == PROBLEM_JSON
            check.validate(refused.json())
            assert refused.json()["code"] == "unsupported_media_type"
            assert f"sent as {content_type or 'no Content-Type'}" in refused.json()["detail"]
        assert (await bot.get("/requests", params={"requester": "alice-bot"})).json()["items"] == []
        # JSON by any of its names is taken; a body left out where one may be, too
        sent = await bot.post("/requests", content=body, headers={"content-type": "application/json; charset=utf-8"})
        assert sent.status_code == 201, sent.text
        cancelled = await bot.post(f"/requests/{sent.json()['id']}/cancel", headers={"content-type": "text/plain"})
        assert cancelled.status_code == 200, cancelled.text
        bad_json = await bot.post("/requests", content=b'{"asks": [', headers={"content-type": "application/json"})
        assert bad_json.json()["detail"] == "the body is not valid JSON at character 10: Expecting value"
        wrong_type = await bot.get("/requests", params={"limit": "ten"})
        assert wrong_type.status_code == 422 and wrong_type.headers["content-type"] == PROBLEM_JSON
        check.validate(wrong_type.json())


async def test_the_api_s_answers_are_never_stored_by_a_cache(
    db: str, serve_apart: Callable[..., AbstractAsyncContextManager[str]]
) -> None:
    tokens = await issue_tokens(db)
    async with serve_apart(db, auth=True) as base:
        async with api(base, tokens["alice-bot"]) as bot, api(base, tokens["alice"]) as alice, api(base) as nobody:
            made = await bot.post("/requests", json=TEXT)
            answered = await alice.post(f"/requests/{made.json()['id']}/answer", json={"answer": "the secret word"})
            responses = [
                made,
                answered,
                await bot.get(f"/requests/{made.json()['id']}"),
                await bot.get("/whoami"),
                await bot.get("/no-such-route"),
                await nobody.get("/requests"),  # a 401
            ]
            for response in responses:
                assert response.headers["cache-control"] == "no-store", (response.request.url, response.headers)
        async with httpx.AsyncClient(base_url=base) as web:
            assert (await web.get("/openapi.json")).headers.get("cache-control") != "no-store"


async def test_browser_apps_of_other_origins_reach_the_api_only_where_the_operator_allows_them(
    db: str, serve_apart: Callable[..., AbstractAsyncContextManager[str]]
) -> None:
    tokens = await issue_tokens(db)
    app_origin = "https://app.example.com"
    preflight = {
        "Origin": app_origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, idempotency-key",
    }
    async with (
        serve_apart(db, auth=True) as base,  # by default: no CORS at all
        httpx.AsyncClient(base_url=base, timeout=BOUND) as browser,
    ):
        refused = await browser.options("/api/v1/requests", headers=preflight)
        assert refused.status_code == 405 and "access-control-allow-origin" not in refused.headers
        read = await browser.get("/api/v1/whoami", headers={"Origin": app_origin, **_bearer(tokens["alice"])})
        assert read.status_code == 200 and "access-control-allow-origin" not in read.headers
    async with (
        serve_apart(db, auth=True, cors_origins=[app_origin]) as base,
        httpx.AsyncClient(base_url=base, timeout=BOUND) as browser,
    ):
        allowed = await browser.options("/api/v1/requests", headers=preflight)
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == app_origin
        assert "access-control-allow-credentials" not in allowed.headers  # a token, never the cookie
        made = await browser.post(
            "/api/v1/requests", json=TEXT, headers={"Origin": app_origin, **_bearer(tokens["alice-bot"])}
        )
        assert made.status_code == 201 and made.headers["access-control-allow-origin"] == app_origin
        anonymous = await browser.get("/api/v1/requests", headers={"Origin": app_origin})
        assert anonymous.status_code == 401 and anonymous.headers["access-control-allow-origin"] == app_origin
        assert "Retry-After" in anonymous.headers["access-control-expose-headers"]
        other = await browser.options("/api/v1/requests", headers={**preflight, "Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers
        page = await browser.options("/signin", headers=preflight)  # the web inbox: none of it
        assert "access-control-allow-origin" not in page.headers
    for origins, auth, refusal in [
        (["https://app.example.com/"], True, "give scheme://host"),
        (["app.example.com"], True, "give scheme://host"),
        ([app_origin], False, "CORS origins need auth"),
    ]:
        with pytest.raises(ValueError, match=refusal):
            create_app("memory://", auth=auth, cors_origins=origins)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_create_retried_with_its_key_in_the_idempotency_key_header_or_the_body_is_answered_alike(
    db: str, serve_apart: Callable[..., AbstractAsyncContextManager[str]], spec: dict[str, Any]
) -> None:
    tokens = await issue_tokens(db)
    check = problem_validator(spec)
    parameters = spec["paths"]["/api/v1/requests"]["post"]["parameters"]
    assert any(p["name"] == "Idempotency-Key" and p["in"] == "header" for p in parameters)
    async with serve_apart(db, auth=True) as base, api(base, tokens["alice-bot"]) as bot:
        first = await bot.post("/requests", json=TEXT, headers={"Idempotency-Key": "deploy-1"})
        assert first.status_code == 201 and first.json()["idempotency_key"] == "deploy-1"
        again = await bot.post("/requests", json={**TEXT, "idempotency_key": "deploy-1"})
        assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
        other = {"asks": [{"type": "text", "prompt": "Deploy to prod?"}]}
        reused = await bot.post("/requests", json=other, headers={"Idempotency-Key": "deploy-1"})
        assert reused.status_code == 422 and reused.headers["content-type"] == PROBLEM_JSON
        check.validate(reused.json())
        assert reused.json()["code"] == "idempotency_key_reused"
        assert reused.json()["request_id"] == first.json()["id"]
        both = await bot.post("/requests", json={**TEXT, "idempotency_key": "a"}, headers={"Idempotency-Key": "b"})
        assert both.status_code == 422 and "is not the body's idempotency_key" in both.json()["detail"]
        mine = (await bot.get("/requests", params={"requester": "alice-bot"})).json()["items"]
        assert [r["id"] for r in mine] == [first.json()["id"]]


def examples_in(node: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any], Any]]:
    """Every example in the document, with where it is and the schema it must fit: a
    schema's own `examples`, and a media type's or a parameter's `example`."""
    if isinstance(node, dict):
        if isinstance(node.get("schema"), dict) and "example" in node:
            yield where, node["schema"], node["example"]
        if isinstance(node.get("examples"), list) and ("type" in node or "properties" in node or "$ref" in node):
            for example in node["examples"]:
                yield where, node, example
        for key, value in node.items():
            yield from examples_in(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from examples_in(value, f"{where}/{i}")


MAIN_ANSWERS = ("RequestModel", "RequestPage", "RunModel", "RunPageModel", "EventModel", "EventPage", "Problem")
MAIN_ANSWERS += ("MessageConflict",)


def test_every_example_in_the_document_fits_its_own_schema(spec: dict[str, Any]) -> None:
    found = list(examples_in(spec))
    assert len(found) >= 35
    for where, schema, example in found:
        errors = list(Draft202012Validator({**schema, "components": spec["components"]}).iter_errors(example))
        assert not errors, (where, errors[0].message)


def test_every_request_body_and_the_main_answers_have_an_example_to_copy(spec: dict[str, Any]) -> None:
    schemas = spec["components"]["schemas"]

    def has_example(schema: dict[str, Any]) -> bool:
        if "$ref" in schema:
            return has_example(schemas[schema["$ref"].rsplit("/", 1)[1]])
        return bool(schema.get("examples")) or any(
            has_example(s) for s in schema.get("anyOf", ()) if s != {"type": "null"}
        )

    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            for media in operation.get("requestBody", {}).get("content", {}).values():
                assert "example" in media or has_example(media["schema"]), (method, path)
    for name in MAIN_ANSWERS:
        assert schemas[name].get("examples"), name
    assert spec["paths"]["/api/v1/requests"]["get"]["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/RequestPage"
    }


async def test_the_create_and_answer_examples_work_as_they_are_copied(
    db: str, serve_apart: Callable[..., AbstractAsyncContextManager[str]], spec: dict[str, Any]
) -> None:
    schemas = spec["components"]["schemas"]
    tokens = await issue_tokens(db)
    async with (
        serve_apart(db, auth=True) as base,
        api(base, tokens["alice-bot"]) as bot,
        api(base, tokens["alice"]) as alice,
    ):
        made = await bot.post("/requests", json=schemas["CreateBody"]["examples"][0])
        assert made.status_code == 201, made.text
        answered = await alice.post(f"/requests/{made.json()['id']}/answer", json=schemas["AnswerBody"]["examples"][0])
        assert answered.status_code == 200, answered.text
        shown = answered.json()
        (grant,) = shown["response"]["grants"]
        assert (shown["status"], grant["with"], grant["can"]) == ("answered", "repo:web", "deploy")
        conforms(spec, ("post", "/api/v1/requests/{request_id}/answer"), "200", shown)
