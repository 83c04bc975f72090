"""Novo-compatible interactions against a real server: the shape, resolving with Novo's
rules (400s that change nothing), the stream that re-sends a pending pause on reconnect,
and who may see and resolve what."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import aconnect_sse

import interlock
from interlock import Request
from interlock.agent import ApprovalGate, ToolCall
from interlock.principals import Principal, issue_token

pytestmark = pytest.mark.anyio
BOUND = 10

QUESTION = {
    "title": "Refund #ABC?",
    "details": "The customer called twice.",
    "asks": [
        {"type": "choice", "id": "colour", "prompt": "Colour?", "options": ["red", "green"]},
        {"type": "multi_choice", "id": "sizes", "prompt": "Sizes?", "options": ["s", "m", "l"], "min": 1, "max": 2},
        {"type": "text", "id": "note", "prompt": "Anything else?", "required": False, "multiline": True},
    ],
}
APPROVAL = {
    "kind": "approval",
    "title": "Approve deploy?",
    "asks": [{"type": "confirm", "id": "ok", "prompt": "Run deploy?"}],
    "origin": {"tool_name": "deploy", "tool_call_id": "call-1", "arguments": {"env": "prod"}, "session": "t1"},
}


@pytest.fixture
def base(tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]) -> Iterator[str]:
    with serve(f"sqlite:///{tmp_path / 'novo.db'}", auth=False, keepalive=0.2) as url:
        yield url


@pytest.fixture
async def api(base: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=f"{base}/api/v1", timeout=BOUND) as client:
        yield client


async def create(api: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    response = await api.post("/requests", json={"to": "alice", **body})
    assert response.status_code == 201, response.text
    return dict(response.json())


async def resolve(api: httpx.AsyncClient, interaction_id: str, **body: Any) -> httpx.Response:
    return await api.post(f"/interactions/{interaction_id}/resolve", json=body)


# -- the shape ---------------------------------------------------------------------------------


async def test_an_approval_has_exactly_approve_and_deny_and_the_call_under_review(api: httpx.AsyncClient) -> None:
    made = await create(api, **APPROVAL, timeout=3600)
    got = (await api.get(f"/interactions/{made['id']}")).json()
    assert (got["id"], got["kind"], got["status"]) == (made["id"], "approval_request", "pending")
    assert (got["toolName"], got["toolCallId"], got["threadId"]) == ("deploy", "call-1", "t1")
    assert got["expiresAt"] is not None
    request = got["request"]
    assert request["requestId"] == made["id"]
    assert (request["kind"], request["display"], request["allowFreeform"]) == (
        "approval_request",
        "confirmation",
        False,
    )
    assert request["options"] == [{"id": "approve", "label": "Approve"}, {"id": "deny", "label": "Deny"}]
    assert request["input"] == {"env": "prod"}


async def test_an_approval_carries_its_rendered_preview_beside_the_input_everywhere_it_is_shown(
    base: str, api: httpx.AsyncClient
) -> None:
    plain = await create(api, **APPROVAL)
    assert "preview" not in (await api.get(f"/interactions/{plain['id']}")).json()["request"]
    rendered = "deploy web to prod\n3 replicas, rolling"
    made = await create(api, **APPROVAL, context={"preview": rendered})
    async with interlock.connect(base) as broker:  # the approval gate renders one for each call it asks about
        gate = ApprovalGate(
            broker,
            policies={"deploy": "always"},
            to="alice",
            previews={"deploy": lambda c: f"deploy {c.arguments['env']}"},
        )
        gated = await gate.begin(ToolCall("deploy", {"env": "staging"}, id="call-9", session="t1"))
        assert isinstance(gated, Request)
    expected = {made["id"]: (rendered, {"env": "prod"}), gated.id: ("deploy staging", {"env": "staging"})}

    def shown(interaction: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        request = interaction["request"]
        assert (request["kind"], request["display"], request["allowFreeform"]) == (
            "approval_request",
            "confirmation",
            False,
        )
        assert [o["id"] for o in request["options"]] == ["approve", "deny"]
        return request["preview"], request["input"]

    for interaction_id, want in expected.items():
        assert shown((await api.get(f"/interactions/{interaction_id}")).json()) == want
    listed = (await api.get("/interactions", params={"kind": "approval_request"})).json()["items"]
    assert {i["id"]: shown(i) for i in listed if i["id"] in expected} == expected
    streamed: dict[str, Any] = {}
    async with (
        httpx.AsyncClient(timeout=BOUND) as client,
        aconnect_sse(client, "GET", f"{base}/api/v1/interactions/stream") as source,
    ):
        events = source.aiter_sse()
        while len(streamed) < 3:
            data = json.loads((await next_event(events, "data-novo-input-requested")).data)
            streamed[data["id"]] = data
    assert {i: shown(streamed[i]) for i in expected} == expected
    assert "preview" not in streamed[plain["id"]]["request"]


async def test_a_question_carries_its_prompts_in_details_and_no_top_level_options(api: httpx.AsyncClient) -> None:
    made = await create(api, **QUESTION)
    request = (await api.get(f"/interactions/{made['id']}")).json()["request"]
    assert (request["kind"], request["display"]) == ("question", "text")
    assert "options" not in request and "allowFreeform" not in request
    details = request["details"]
    assert (details["title"], details["details"]) == ("Refund #ABC?", "The customer called twice.")
    colour, sizes, note = details["questions"]
    assert colour["id"] == "colour" and colour["options"] == [
        {"id": "red", "label": "red"},
        {"id": "green", "label": "green"},
    ]
    assert (colour["multiple"], colour["allowOther"]) == (False, False)
    assert sizes["multiple"] is True and [o["id"] for o in sizes["options"]] == ["s", "m", "l"]
    assert (sizes["min"], sizes["max"]) == (1, 2) and "min" not in colour  # how many may be picked
    assert (note["multiline"], note["required"], "options" in note) == (True, False, False)


async def test_interactions_are_listed_by_kind_and_status(api: httpx.AsyncClient) -> None:
    approval = await create(api, **APPROVAL)
    question = await create(api, **QUESTION)
    listed = (await api.get("/interactions", params={"status": "pending"})).json()["items"]
    assert {i["id"] for i in listed} == {approval["id"], question["id"]}
    approvals = (await api.get("/interactions", params={"kind": "approval_request"})).json()["items"]
    assert [i["id"] for i in approvals] == [approval["id"]]


# -- resolving ---------------------------------------------------------------------------------


async def test_an_approval_is_approved_or_denied_by_its_own_id_with_the_reason_echoed(api: httpx.AsyncClient) -> None:
    approved, denied = await create(api, **APPROVAL), await create(api, **APPROVAL)
    ok = await resolve(
        api,
        approved["id"],
        inputResponses=[{"requestId": approved["id"], "optionId": "approve"}],
        reason="approved by on-call",
    )
    assert ok.status_code == 200, ok.text
    assert ok.json()["resolution"]["outcome"] == "approve"
    assert ok.json()["resolution"]["reason"] == "approved by on-call"
    assert ok.json()["expiresAt"] is None  # only a pending pause has one

    no = await resolve(
        api, denied["id"], inputResponses=[{"requestId": denied["id"], "optionId": "deny"}], reason="blocked"
    )
    assert no.status_code == 200, no.text
    assert (no.json()["resolution"]["outcome"], no.json()["resolution"]["reason"]) == ("deny", "blocked")
    assert no.json()["status"] == "rejected"  # a denial, not an answer of "no"


async def test_an_approval_not_decided_by_a_yes_or_no_is_shown_and_answered_as_its_questions(
    api: httpx.AsyncClient,
) -> None:
    # Shown as approve / deny, it refused both ("this approval has several asks") and
    # offered no way a Novo client could answer it.
    made = await create(api, kind="approval", asks=[{"type": "text", "id": "why", "prompt": "Why ship today?"}])
    shown = (await api.get(f"/interactions/{made['id']}")).json()
    assert (shown["kind"], shown["request"]["kind"]) == ("question", "question")
    assert [q["id"] for q in shown["request"]["details"]["questions"]] == ["why"]
    done = await resolve(api, made["id"], inputResponses=[{"requestId": "why", "text": "the fix is urgent"}])
    assert done.status_code == 200, done.text
    assert (done.json()["resolution"]["outcome"], done.json()["resolution"]["answers"]) == (
        "answered",
        {"why": "the fix is urgent"},
    )


async def test_a_question_is_resolved_per_prompt(api: httpx.AsyncClient) -> None:
    made = await create(api, **QUESTION)
    response = await resolve(
        api,
        made["id"],
        inputResponses=[
            {"requestId": "colour", "optionId": "green"},
            {"requestId": "sizes", "optionIds": ["s", "l"]},
        ],
    )
    assert response.status_code == 200, response.text
    resolution = response.json()["resolution"]
    assert resolution["outcome"] == "answered"
    assert resolution["answers"] == {"colour": "green", "sizes": ["s", "l"]}  # the optional prompt left out


@pytest.mark.parametrize(
    ("responses", "fragment"),
    [
        ([{"requestId": "colour", "optionId": "blue"}, {"requestId": "sizes", "optionIds": ["s"]}], "not one of"),
        ([{"requestId": "colour", "optionIds": ["red", "green"]}, {"requestId": "sizes", "optionIds": []}], "single"),
        ([{"requestId": "SELF", "optionId": "red"}], "Unknown questionId"),
        (
            [{"requestId": "colour", "optionId": "red"}, {"requestId": "colour", "optionId": "green"}],
            "requestId 'colour' appears more than once",
        ),
        ([{"requestId": "colour", "optionId": "red"}], "sizes"),  # a required prompt left unanswered
        # text only where free form is allowed: not on a select-only prompt, even naming an option
        ([{"requestId": "colour", "text": "red"}, {"requestId": "sizes", "optionIds": ["s"]}], "not free-form"),
        ([{"requestId": "colour", "optionId": "red"}, {"requestId": "sizes", "text": "s"}], "optionIds"),
    ],
)
async def test_a_body_that_does_not_fit_is_a_400_and_changes_nothing(
    api: httpx.AsyncClient, responses: list[dict[str, Any]], fragment: str
) -> None:
    made = await create(api, **QUESTION)
    body = json.loads(json.dumps(responses).replace("SELF", made["id"]))
    for path in (f"/interactions/{made['id']}/resolve", f"/requests/{made['id']}/answer"):
        response = await api.post(path, json={"inputResponses": body})
        assert response.status_code == 400, response.text
        assert response.json()["code"] == "invalid_answer"
        assert fragment in response.json()["detail"]
    assert (await api.get(f"/interactions/{made['id']}")).json()["status"] == "pending"


async def test_an_approval_answered_with_no_yes_or_no_word_says_every_word_it_takes(api: httpx.AsyncClient) -> None:
    made = await create(api, **APPROVAL)
    refused = await resolve(api, made["id"], inputResponses=[{"requestId": made["id"], "optionId": "maybe"}])
    assert refused.status_code == 400
    assert "optionId 'approve' or 'deny' (or another yes or no word: 'yes', 'no')" in refused.json()["detail"]
    taken = await resolve(api, made["id"], inputResponses=[{"requestId": made["id"], "optionId": "yes"}])
    assert taken.status_code == 200 and taken.json()["resolution"]["outcome"] == "approve"


async def test_free_form_text_is_taken_exactly_where_the_prompt_allows_it(api: httpx.AsyncClient) -> None:
    asks = [
        {"type": "choice", "id": "region", "prompt": "Region?", "options": ["eu", "us"], "allow_other": True},
        {"type": "confirm", "id": "now", "prompt": "Right away?"},
        {"type": "text", "id": "note", "prompt": "Why?"},
    ]
    made = await create(api, title="Where to?", asks=asks)
    prompts = (await api.get(f"/interactions/{made['id']}")).json()["request"]["details"]["questions"]
    assert [(q["id"], q["allowOther"], "options" in q) for q in prompts] == [
        ("region", True, True),
        ("now", False, True),
        ("note", False, False),
    ]
    for wrong, fragment in (
        ({"requestId": "now", "text": "yes"}, "not free-form"),  # yes / no are options, not text
        ({"requestId": "region", "optionId": "mars"}, "not one of the options"),  # text it may be, an option not
        ({"requestId": "note", "optionId": "eu"}, "takes text"),
    ):
        right = {"region": {"requestId": "region", "optionId": "eu"}, "now": {"requestId": "now", "optionId": "yes"}}
        right |= {"note": {"requestId": "note", "text": "cheaper"}}
        right[wrong["requestId"]] = wrong
        response = await resolve(api, made["id"], inputResponses=list(right.values()))
        assert response.status_code == 400 and fragment in response.json()["detail"], (wrong, response.text)
    assert (await api.get(f"/interactions/{made['id']}")).json()["status"] == "pending"
    done = await resolve(
        api,
        made["id"],
        inputResponses=[
            {"requestId": "region", "text": "mars"},
            {"requestId": "now", "optionId": "no"},
            {"requestId": "note", "text": "cheaper"},
        ],
    )
    assert done.status_code == 200, done.text
    assert done.json()["resolution"]["answers"] == {"region": "mars", "now": False, "note": "cheaper"}


async def test_the_native_answer_body_keeps_its_422(api: httpx.AsyncClient) -> None:
    made = await create(api, **QUESTION)
    response = await api.post(f"/requests/{made['id']}/answer", json={"answers": {"colour": "blue", "sizes": []}})
    assert response.status_code == 422


async def test_cancel_withdraws_the_pause_with_the_reason_echoed(api: httpx.AsyncClient) -> None:
    made = await create(api, **QUESTION)
    response = await resolve(api, made["id"], cancel=True, reason="not needed any more")
    assert response.status_code == 200, response.text
    got = response.json()
    assert got["status"] == "cancelled"
    assert (got["resolution"]["outcome"], got["resolution"]["reason"]) == ("cancelled", "not needed any more")


async def test_several_are_resolved_at_once_each_on_its_own(api: httpx.AsyncClient) -> None:
    a, b = await create(api, **APPROVAL), await create(api, **APPROVAL)
    items = [
        {"id": a["id"], "inputResponses": [{"requestId": a["id"], "optionId": "approve"}]},
        {"id": b["id"], "inputResponses": [{"requestId": b["id"], "optionId": "maybe"}]},
        {"id": "f" * 32, "inputResponses": [{"requestId": "f" * 32, "optionId": "approve"}]},
    ]
    response = await api.post("/interactions/resolve", json={"items": items})
    assert response.status_code == 200, response.text
    ok, bad, missing = response.json()
    assert ok["ok"] and ok["interaction"]["resolution"]["outcome"] == "approve"
    assert (bad["ok"], bad["error"]["status"]) == (False, 400)
    assert (missing["ok"], missing["error"]["status"]) == (False, 404)
    # each says why, as the interaction's own route does (it said a code alone)
    alone = await resolve(api, b["id"], inputResponses=[{"requestId": b["id"], "optionId": "maybe"}])
    assert bad["error"]["detail"] == alone.json()["detail"] and "optionId" in bad["error"]["detail"]
    assert "f" * 32 in missing["error"]["detail"]
    assert (await api.get(f"/interactions/{b['id']}")).json()["status"] == "pending"


# -- the stream --------------------------------------------------------------------------------


async def next_event(events: AsyncIterator[Any], *names: str) -> Any:
    with anyio.fail_after(BOUND):
        async for sse in events:
            if sse.event in names:
                return sse
    raise AssertionError("the stream ended")


async def test_a_pending_pause_is_sent_again_on_reconnect_then_what_was_missed(
    base: str, api: httpx.AsyncClient
) -> None:
    url = f"{base}/api/v1/interactions/stream"
    first = await create(api, **APPROVAL)
    async with httpx.AsyncClient(timeout=BOUND) as client:
        async with aconnect_sse(client, "GET", url) as source:
            events = source.aiter_sse()
            sent = await next_event(events, "data-novo-input-requested")  # pending before we came
            assert json.loads(sent.data)["id"] == first["id"] and not sent.id
            second = await create(api, **QUESTION)
            live = await next_event(events, "data-novo-input-requested")
            assert json.loads(live.data)["id"] == second["id"]
            last_seen = live.id
        # Offline: one pause settles, another is made.
        await resolve(
            api,
            second["id"],
            inputResponses=[{"requestId": "colour", "optionId": "red"}, {"requestId": "sizes", "optionIds": ["s"]}],
        )
        third = await create(api, **APPROVAL)
        async with aconnect_sse(client, "GET", url, headers={"Last-Event-ID": last_seen}) as source:
            events = source.aiter_sse()
            again = [json.loads((await next_event(events, "data-novo-input-requested")).data)["id"] for _ in range(2)]
            assert again == [first["id"], third["id"]]  # every pending pause, oldest first
            resolved = await next_event(events, "data-novo-input-resolved")
            assert json.loads(resolved.data)["id"] == second["id"]
            made = await next_event(events, "data-novo-input-requested")
            assert json.loads(made.data)["id"] == third["id"] and made.id  # the missed event itself


# -- who may see and resolve what ------------------------------------------------------------------


@pytest.fixture
def authed(tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]) -> Iterator[tuple[str, dict[str, str]]]:
    db = f"sqlite:///{tmp_path / 'auth.db'}"
    tokens: dict[str, str] = {}

    async def setup() -> None:
        async with interlock.connect(db) as broker:
            for principal in (
                Principal("alice", "human"),
                Principal("bob", "human"),
                Principal("alice-bot", "agent", owner="alice"),
            ):
                await broker.store.save_principal(principal)
                token = issue_token(principal.name, datetime.now(UTC))
                await broker.store.save_token(token)
                tokens[principal.name] = token.secret
            await broker.add_team_members("ops", ["alice", "bob"])

    anyio.run(setup)
    with serve(db, auth=True) as url:
        yield f"{url}/api/v1", tokens


async def test_only_the_recipient_resolves_and_only_the_parties_see_an_interaction(
    authed: tuple[str, dict[str, str]],
) -> None:
    base, tokens = authed

    def client(who: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {tokens[who]}"}, timeout=BOUND)

    async with client("alice") as alice, client("bob") as bob, client("alice-bot") as bot:
        made = (await bot.post("/requests", json=APPROVAL)).json()
        approve = {"inputResponses": [{"requestId": made["id"], "optionId": "approve"}]}
        assert (await bob.get(f"/interactions/{made['id']}")).status_code == 403
        assert (await bob.get("/interactions")).json()["items"] == []
        assert (await bob.post(f"/interactions/{made['id']}/resolve", json=approve)).status_code == 403
        assert (
            await bot.post(f"/interactions/{made['id']}/resolve", json=approve)
        ).status_code == 403  # agents never answer
        assert [i["id"] for i in (await bot.get("/interactions")).json()["items"]] == [made["id"]]
        assert [i["id"] for i in (await alice.get("/interactions")).json()["items"]] == [made["id"]]
        done = await alice.post(f"/interactions/{made['id']}/resolve", json=approve)
        assert done.status_code == 200 and done.json()["resolution"]["by"] == "alice"


async def test_a_pause_to_a_team_is_each_members_interaction_listed_and_sent_on_connect(
    authed: tuple[str, dict[str, str]],
) -> None:
    base, tokens = authed

    def client(who: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {tokens[who]}"}, timeout=BOUND)

    async with client("alice") as alice, client("bob") as bob, client("alice-bot") as bot:
        made = (await bot.post("/requests", json={**APPROVAL, "to": "ops"})).json()
        for member in (alice, bob):
            assert (await member.get(f"/interactions/{made['id']}")).status_code == 200
            assert [i["id"] for i in (await member.get("/interactions")).json()["items"]] == [made["id"]]
            async with aconnect_sse(member, "GET", "/interactions/stream") as source:
                sent = await next_event(source.aiter_sse(), "data-novo-input-requested")  # pending before we came
                assert json.loads(sent.data)["id"] == made["id"]


async def test_the_person_a_pause_is_to_may_cancel_it_unanswered_recorded_as_theirs(
    authed: tuple[str, dict[str, str]],
) -> None:
    base, tokens = authed

    def client(who: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {tokens[who]}"}, timeout=BOUND)

    async with client("alice") as alice, client("bob") as bob, client("alice-bot") as bot:
        made = (await bot.post("/requests", json=APPROVAL)).json()
        cancel = {"cancel": True, "reason": "wrong environment, ask again"}
        assert (await bob.post(f"/interactions/{made['id']}/resolve", json=cancel)).status_code == 403
        done = await alice.post(f"/interactions/{made['id']}/resolve", json=cancel)
        assert done.status_code == 200, done.text
        resolution = done.json()["resolution"]
        assert done.json()["status"] == "cancelled"  # ended unanswered: neither approved nor denied
        assert (resolution["outcome"], resolution["by"], resolution["via"]) == ("cancelled", "alice", "api")
        assert resolution["reason"] == "wrong environment, ask again"
        seen_by_agent = (await bot.get(f"/interactions/{made['id']}")).json()
        assert seen_by_agent["resolution"] == resolution
