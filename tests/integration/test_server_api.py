"""The HTTP API, served in-process (asgi_support): answers in both formats, errors, long polls, SSE."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import aconnect_sse

import interlock
from asgi_support import InProcessServer, serving
from interlock import Event, Status, Text
from interlock.server.app import create_app
from interlock.server.common import event_to_dict
from interlock.server.stream import Hub

pytestmark = pytest.mark.anyio
BOUND = 10


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[InProcessServer]:
    async with serving(create_app(f"sqlite:///{tmp_path / 'api.db'}", auth=False, keepalive=0.2)) as server:
        yield server


@pytest.fixture
def base(server: InProcessServer) -> str:
    return server.url


@pytest.fixture
async def api(server: InProcessServer) -> AsyncIterator[httpx.AsyncClient]:
    async with server.client("/api/v1", timeout=BOUND) as client:
        yield client


async def create(api: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    response = await api.post("/requests", json={"to": "alice", **body})
    assert response.status_code == 201, response.text
    return dict(response.json())


QUESTION = {
    "asks": [
        {"type": "choice", "id": "colour", "prompt": "Colour?", "options": ["red", "green"]},
        {"type": "multi_choice", "id": "sizes", "prompt": "Sizes?", "options": ["s", "m", "l"]},
        {"type": "text", "id": "note", "prompt": "Anything else?", "required": False},
    ]
}
APPROVAL = {"kind": "approval", "asks": [{"type": "confirm", "id": "ok", "prompt": "Run deploy?"}]}


async def test_a_question_is_answered_with_novo_input_responses(api: httpx.AsyncClient) -> None:
    request = await create(api, **QUESTION)
    body = {
        "inputResponses": [
            {"requestId": "colour", "optionId": "green"},
            {"requestId": "sizes", "optionIds": ["s", "l"]},
            {"requestId": "note", "text": "Customer confirmed via phone."},
        ],
        "reason": "checked with the customer",
    }
    response = await api.post(f"/requests/{request['id']}/answer", json=body)
    assert response.status_code == 200, response.text
    settled = response.json()
    assert settled["status"] == "answered"
    assert settled["response"]["answers"] == {
        "colour": "green",
        "sizes": ["s", "l"],
        "note": "Customer confirmed via phone.",
    }
    assert settled["response"]["reason"] == "checked with the customer"


@pytest.mark.parametrize(
    ("responses", "fragment"),
    [
        ([{"requestId": "shape", "optionId": "x"}], "Unknown questionId 'shape'"),
        ([{"requestId": "colour", "optionId": "red"}, {"requestId": "colour", "optionId": "green"}], "more than once"),
        ([{"requestId": "colour", "optionIds": ["red", "green"]}, {"requestId": "sizes", "optionIds": []}], "single"),
        ([{"requestId": "SELF", "optionId": "red"}], "request's own id"),
    ],
)
async def test_novo_input_response_rules_give_400_and_change_nothing(
    api: httpx.AsyncClient, responses: list[dict[str, Any]], fragment: str
) -> None:
    request = await create(api, **QUESTION)
    for item in responses:
        if item["requestId"] == "SELF":
            item["requestId"] = request["id"]
    response = await api.post(f"/requests/{request['id']}/answer", json={"inputResponses": responses})
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == "invalid_answer"
    assert fragment in response.json()["detail"]
    assert (await api.get(f"/requests/{request['id']}")).json()["status"] == "pending"


async def test_an_approval_takes_approve_or_deny_with_its_own_id_and_echoes_the_reason(
    api: httpx.AsyncClient,
) -> None:
    approved = await create(api, **APPROVAL)
    body = {"inputResponses": [{"requestId": approved["id"], "optionId": "approve"}], "reason": "approved by on-call"}
    settled = (await api.post(f"/requests/{approved['id']}/answer", json=body)).json()
    assert settled["response"]["answers"] == {"ok": True}
    assert settled["response"]["reason"] == "approved by on-call"

    denied = await create(api, **APPROVAL)
    body = {"inputResponses": [{"requestId": denied["id"], "optionId": "deny"}], "reason": "blocked: change freeze"}
    settled = (await api.post(f"/requests/{denied['id']}/answer", json=body)).json()
    assert settled["response"]["answers"] == {"ok": False}
    assert settled["response"]["reason"] == "blocked: change freeze"

    wrong = await create(api, **APPROVAL)
    body = {"inputResponses": [{"requestId": "ok", "optionId": "approve"}]}
    assert (await api.post(f"/requests/{wrong['id']}/answer", json=body)).status_code == 400


async def test_cancel_true_withdraws_without_answering(api: httpx.AsyncClient) -> None:
    request = await create(api, **QUESTION)
    settled = (await api.post(f"/requests/{request['id']}/answer", json={"cancel": True, "reason": "moot"})).json()
    assert (settled["status"], settled["response"]["reason"]) == ("cancelled", "moot")


async def test_a_native_answer_that_does_not_fit_is_422_naming_the_ask(api: httpx.AsyncClient) -> None:
    request = await create(api, **QUESTION)
    response = await api.post(f"/requests/{request['id']}/answer", json={"answers": {"colour": "blue", "sizes": []}})
    assert response.status_code == 422
    problem = response.json()
    assert (problem["code"], problem["ask_id"]) == ("invalid_answer", "colour")
    assert "'blue' is not one of the options" in problem["detail"]
    assert (await api.get(f"/requests/{request['id']}")).json()["status"] == "pending"

    ok = await api.post(f"/requests/{request['id']}/answer", json={"answers": {"colour": "red", "sizes": ["m"]}})
    assert ok.status_code == 200
    again = await api.post(f"/requests/{request['id']}/answer", json={"answers": {"colour": "red", "sizes": []}})
    assert again.status_code == 409
    assert (again.json()["code"], again.json()["current_status"]) == ("already_settled", "answered")


async def test_a_single_ask_takes_a_bare_answer(api: httpx.AsyncClient) -> None:
    request = await create(api, asks=[{"type": "text", "prompt": "Name?"}])
    settled = (await api.post(f"/requests/{request['id']}/answer", json={"answer": "Ada"})).json()
    assert settled["response"]["answers"] == {"text": "Ada"}


async def test_a_batch_reports_each_result_on_its_own(api: httpx.AsyncClient) -> None:
    a = await create(api, **APPROVAL)
    b = await create(api, **QUESTION)
    items = [
        {"id": a["id"], "inputResponses": [{"requestId": a["id"], "optionId": "approve"}]},
        {"id": b["id"], "answers": {"colour": "blue", "sizes": []}},
        {"id": "01NOSUCHREQUEST000000000000", "answer": True},
    ]
    results = (await api.post("/answers", json={"items": items})).json()
    assert [r["ok"] for r in results] == [True, False, False]
    assert results[0]["status"] == "answered"
    assert results[1]["error"]["code"] == "invalid_answer"
    assert results[2]["error"]["code"] == "not_found"
    assert (await api.get(f"/requests/{b['id']}")).json()["status"] == "pending"


async def test_reject_and_cancel_settle_with_their_reasons(api: httpx.AsyncClient) -> None:
    a = await create(api, **APPROVAL)
    rejected = (await api.post(f"/requests/{a['id']}/reject", json={"reason": "not today"})).json()
    assert (rejected["status"], rejected["response"]["reason"]) == ("rejected", "not today")
    b = await create(api, **APPROVAL)
    cancelled = (await api.post(f"/requests/{b['id']}/cancel", json={"reason": "no longer needed"})).json()
    assert cancelled["status"] == "cancelled"
    assert (await api.post(f"/requests/{b['id']}/reject", json={})).status_code == 409


async def test_bad_input_is_a_problem_with_a_stable_code(api: httpx.AsyncClient) -> None:
    bad_json = await api.post("/requests", content=b"{nope", headers={"content-type": "application/json"})
    assert (bad_json.status_code, bad_json.json()["code"]) == (400, "invalid_request")
    no_asks = await api.post("/requests", json={"asks": []})
    assert (no_asks.status_code, no_asks.json()["code"]) == (422, "invalid_request")
    bad_ask = await api.post("/requests", json={"asks": [{"type": "choice", "prompt": "?", "options": ["a", "a"]}]})
    assert (bad_ask.status_code, bad_ask.json()["code"]) == (422, "invalid_request")
    assert "given twice" in bad_ask.json()["detail"]
    missing = await api.get("/requests/01NOSUCHREQUEST000000000000")
    assert (missing.status_code, missing.json()["code"]) == (404, "not_found")
    assert (await api.get("/requests", params={"limit": 0})).status_code == 422
    assert (await api.get("/requests")).json()["items"] == []  # nothing was stored


async def test_an_idempotent_create_returns_the_first_request_with_200(api: httpx.AsyncClient) -> None:
    body = {"to": "alice", "idempotency_key": "deploy-42", **APPROVAL}
    first = await api.post("/requests", json=body)
    again = await api.post("/requests", json=body)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]


async def test_the_long_poll_returns_the_outcome_or_408_pending(api: httpx.AsyncClient) -> None:
    request = await create(api, **APPROVAL)
    timed_out = await api.get(f"/requests/{request['id']}/wait", params={"timeout": 0.05})
    assert (timed_out.status_code, timed_out.json()["code"]) == (408, "pending")
    assert (await api.get(f"/requests/{request['id']}")).json()["status"] == "pending"  # no side effect

    async with anyio.create_task_group() as tg:
        result: list[httpx.Response] = []

        async def poll() -> None:
            result.append(await api.get(f"/requests/{request['id']}/wait", params={"timeout": BOUND}))

        tg.start_soon(poll)
        await api.post(f"/requests/{request['id']}/answer", json={"answer": True})
    assert result[0].status_code == 200
    assert result[0].json()["status"] == "answered"


async def test_listing_filters_and_pages_newest_first(api: httpx.AsyncClient) -> None:
    ids = [(await create(api, **APPROVAL, origin={"session": "s1" if i % 2 else "s2"}))["id"] for i in range(5)]
    page = (await api.get("/requests", params={"limit": 2})).json()
    assert [r["id"] for r in page["items"]] == ids[::-1][:2]
    rest = (await api.get("/requests", params={"limit": 10, "cursor": page["next_cursor"]})).json()
    assert [r["id"] for r in rest["items"]] == ids[::-1][2:]
    oldest = (await api.get("/requests", params={"order": "asc", "session": "s1"})).json()
    assert [r["id"] for r in oldest["items"]] == [ids[1], ids[3]]
    await api.post(f"/requests/{ids[0]}/answer", json={"answer": True})
    pending = (await api.get("/requests", params={"status": "pending", "kind": "approval"})).json()
    assert ids[0] not in [r["id"] for r in pending["items"]]
    bogus = await api.get("/requests", params={"status": "bogus"})  # the words a client may send
    assert bogus.status_code == 422
    assert "'pending', 'answered', 'rejected', 'expired' or 'cancelled'" in bogus.json()["detail"], bogus.text


async def test_a_query_parameter_a_route_does_not_take_is_refused_not_dropped(api: httpx.AsyncClient) -> None:
    answered = await create(api, **APPROVAL)
    await api.post(f"/requests/{answered['id']}/answer", json={"answer": True})
    pending = await create(api, **APPROVAL)
    # A misspelt filter was dropped, and the list came back unfiltered as if it were the one asked for.
    typo = await api.get("/requests", params={"stauts": "pending"})
    assert (typo.status_code, typo.json()["code"]) == (422, "invalid_request"), typo.text
    assert "unknown query parameter 'stauts'" in typo.json()["detail"]
    assert "status" in typo.json()["detail"]  # it names what the route takes
    # A model's fields, a dependency's and a route's own parameters are each known.
    listed = await api.get("/requests", params={"status": "pending", "limit": 5, "order": "asc"})
    assert [r["id"] for r in listed.json()["items"]] == [pending["id"]]
    polled = await api.get(f"/requests/{answered['id']}/wait", params={"timeout": 1})
    assert polled.status_code == 200, polled.text
    # A route that takes none refuses any, and changes nothing.
    answer = await api.post(f"/requests/{pending['id']}/answer", params={"dry_run": 1}, json={"answer": True})
    assert (answer.status_code, answer.json()["code"]) == (422, "invalid_request"), answer.text
    assert "takes none" in answer.json()["detail"]
    assert (await api.get(f"/requests/{pending['id']}")).json()["status"] == "pending"
    many = await api.get("/runs", params={"zeta": "1", "alpha": "2"})
    assert "'alpha', 'zeta'" in many.json()["detail"], many.text


async def test_a_method_a_path_does_not_take_is_405_naming_every_method_it_takes(api: httpx.AsyncClient) -> None:
    # `Allow` named the first route's method alone (POST for /requests, which GET lists).
    for method, path, allowed in (
        ("DELETE", "/requests", "GET, POST"),
        ("POST", "/approval-policies/bot", "GET, PUT, DELETE"),
        ("PUT", "/requests/some-id/answer", "POST"),
    ):
        refused = await api.request(method, path)
        assert (refused.status_code, refused.headers["allow"]) == (405, allowed), (method, path)
        assert refused.json()["code"] == "method_not_allowed"


async def test_the_openapi_document_and_health_are_served(api: httpx.AsyncClient, base: str) -> None:
    spec = (await api.get(f"{base}/openapi.json")).json()
    assert {"/api/v1/requests", "/api/v1/requests/{request_id}/answer", "/api/v1/events/stream"} <= set(spec["paths"])
    assert "inputResponses" in json.dumps(spec["components"]["schemas"]["AnswerBody"])
    assert (await api.get(f"{base}/healthz")).json() == {"status": "ok"}


# -- the event stream --------------------------------------------------------------------


async def read_events(
    client: httpx.AsyncClient, count: int, path: str = "/events/stream", **headers: str
) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    async with aconnect_sse(client, "GET", path, headers=headers) as source:
        async for sse in source.aiter_sse():
            if sse.event in ("message", ""):
                continue
            assert sse.id == str(json.loads(sse.data)["id"])
            got.append(json.loads(sse.data))
            if len(got) == count:
                return got
    raise AssertionError("the stream ended early")


async def test_reconnecting_with_last_event_id_replays_exactly_the_missed_events(api: httpx.AsyncClient) -> None:
    with anyio.fail_after(BOUND):
        first = await create(api, **APPROVAL)
        seen = await read_events(api, 1, **{"Last-Event-ID": "0"})
        assert [e["type"] for e in seen] == ["created"]
        # the connection is gone; meanwhile:
        await api.post(f"/requests/{first['id']}/answer", json={"answer": True})
        second = await create(api, **APPROVAL)
        await api.post(f"/requests/{second['id']}/reject", json={"reason": "no"})

        replayed = await read_events(api, 3, **{"Last-Event-ID": str(seen[-1]["id"])})
    assert [(e["type"], e["request_id"]) for e in replayed] == [
        ("answered", first["id"]),
        ("created", second["id"]),
        ("rejected", second["id"]),
    ]
    assert [e["id"] for e in replayed] == sorted({e["id"] for e in replayed})


async def test_a_client_that_cannot_send_the_header_resumes_with_last_event_id_in_the_query(
    api: httpx.AsyncClient,
) -> None:
    # An EventSource polyfill reconnects with ?lastEventId=N: refused as an unknown
    # parameter, its stream was gone for good after the first blip.
    with anyio.fail_after(BOUND):
        first = await create(api, **APPROVAL)
        [created] = await read_events(api, 1, "/events/stream?lastEventId=0")
        await api.post(f"/requests/{first['id']}/answer", json={"answer": True})
        [answered] = await read_events(api, 1, f"/events/stream?lastEventId={created['id']}")
        # The header wins where both are sent.
        [again] = await read_events(api, 1, "/events/stream?lastEventId=0", **{"Last-Event-ID": str(created["id"])})
    assert (created["type"], answered["type"], again["type"]) == ("created", "answered", "answered")
    for path in ("/events/stream", "/runs/no-such-run/events/stream", "/interactions/stream"):
        refused = await api.get(path, params={"lastEventId": "soon"})
        assert (refused.status_code, refused.json()["code"]) in ((400, "invalid_request"), (404, "not_found")), path


async def test_a_stream_carries_live_events_and_keepalive_comments(api: httpx.AsyncClient) -> None:
    with anyio.fail_after(BOUND):
        async with aconnect_sse(api, "GET", "/events/stream") as source:
            lines = source.response.aiter_lines()
            created = False
            pinged = False
            async for line in lines:
                if line.startswith(": ping"):
                    pinged = True
                if line.startswith("event: created"):
                    created = True
                if line.startswith(": connected"):
                    await create(api, **APPROVAL)
                if created and pinged:
                    break
    assert created and pinged


async def test_a_stream_can_follow_one_request_or_one_session(api: httpx.AsyncClient) -> None:
    mine = await create(api, **APPROVAL, origin={"session": "s-1"})
    await create(api, **APPROVAL, origin={"session": "s-2"})
    await api.post(f"/requests/{mine['id']}/answer", json={"answer": True})
    with anyio.fail_after(BOUND):
        async with aconnect_sse(api, "GET", "/events/stream", params={"session": "s-1", "after": 0}) as source:
            types = []
            async for sse in source.aiter_sse():
                if sse.event in ("created", "answered"):
                    assert json.loads(sse.data)["request_id"] == mine["id"]
                    types.append(sse.event)
                    if len(types) == 2:
                        break
    assert types == ["created", "answered"]


async def test_a_slow_subscriber_is_dropped_with_a_reason_and_the_others_go_on() -> None:
    async with interlock.connect("memory://") as broker:
        hub = Hub(broker, queue_size=2)
        await hub.start()
        slow = hub.subscribe(lambda e: True)
        fast_seen: list[int] = []

        async def fast() -> None:
            async for event in hub.replay_then_follow(lambda e: True, None):
                fast_seen.append(event.id)
                if len(fast_seen) == 4:
                    return

        with anyio.fail_after(BOUND):
            async with anyio.create_task_group() as tg:
                tg.start_soon(fast)
                await anyio.wait_all_tasks_blocked()
                for _ in range(2):
                    request = await broker.create(Text("Name?"))
                    await anyio.wait_all_tasks_blocked()  # the fast one keeps up
                    await broker.resolve(request.id, "x")
                    await anyio.wait_all_tasks_blocked()
        assert slow.dropped is not None and "behind" in slow.dropped
        assert slow not in hub.subscribers
        assert len(fast_seen) == 4
        drained = [await slow.next(), await slow.next(), await slow.next()]
        assert [e is not None for e in drained] == [True, True, False]  # what it had, then the end
        await hub.stop()


async def test_streams_alike_share_one_decision_per_event_and_each_sees_only_its_own() -> None:
    async with interlock.connect("memory://") as broker:
        hub = Hub(broker, encode=lambda event: json.dumps(event_to_dict(event)))
        await hub.start()
        asked: list[tuple[str, int]] = []

        def reader(name: str, request: str | None = None) -> Callable[[Event], bool]:
            def accept(event: Event) -> bool:
                asked.append((name, event.id))
                assert event.request is not None
                return name in (event.request.to, event.request.requester) and request in (None, event.request_id)

            return accept

        alice = [hub.subscribe(reader("alice"), audience=("alice", None)) for _ in range(3)]
        bob = [hub.subscribe(reader("bob"), audience=("bob", None)) for _ in range(2)]
        narrow = hub.subscribe(reader("alice", "another"), audience=("alice", "another"))
        loner = hub.subscribe(reader("alice"))  # no audience: decides for itself
        with anyio.fail_after(BOUND):
            request = await broker.create(Text("Name?"), to="alice")
            while not loner.queue:
                await anyio.wait_all_tasks_blocked()
        created = loner.queue[0].id
        assert [[e.request_id for e in s.queue] for s in alice] == [[request.id]] * 3
        assert [list(s.queue) for s in (*bob, narrow)] == [[], [], []]
        assert sorted(asked) == sorted([("alice", created)] * 3 + [("bob", created)])
        frames = {hub.frame(e) for s in (*alice, loner) for e in s.queue}
        assert len(frames) == 1  # encoded once: the same bytes for every stream
        frame = frames.pop().decode()
        assert frame.startswith(f"id: {created}\r\nevent: created\r\ndata: {{")
        assert json.loads(frame.split("data: ", 1)[1])["request_id"] == request.id
        await hub.stop()


async def test_metrics_count_what_happened(api: httpx.AsyncClient, base: str) -> None:
    with anyio.fail_after(BOUND):
        async with aconnect_sse(api, "GET", "/events/stream") as source:
            events = source.aiter_sse()
            await anext(events)  # connected: what follows comes live, through the hub
            request = await create(api, **APPROVAL)
            await api.post(f"/requests/{request['id']}/answer", json={"answer": True})
            seen = [(await anext(events)).event for _ in range(2)]
    assert seen == ["created", "answered"]  # the hub counts each event before it streams it
    text = (await api.get(f"{base}/metrics")).text
    assert "interlock_requests_created_total 1.0" in text
    assert 'interlock_requests_settled_total{outcome="answered"} 1.0' in text
    assert "interlock_pending_requests 0.0" in text
    assert "interlock_time_to_answer_seconds_count 1.0" in text


def test_status_values_match_the_model() -> None:
    assert {s.value for s in Status} == {"pending", "answered", "rejected", "expired", "cancelled"}


async def test_a_create_s_expires_at_is_an_instant_with_its_offset(api: httpx.AsyncClient) -> None:
    # The API took a timeout only: a client's deadline had to go as one.
    made = await create(api, asks=[{"type": "text", "prompt": "When?"}], expires_at="2999-03-04T05:06:07.5+05:30")
    assert made["expires_at"] == "2999-03-04T05:06:07.500000+05:30"
    for sent, refusal in [
        ("2999-03-04T05:06:07", "expires_at: '2999-03-04T05:06:07' has no offset: add Z for UTC"),
        ("2999-03-04", "expires_at: '2999-03-04' has no offset"),
        ("next tuesday", "expires_at: 'next tuesday' is not a date and time"),
        (32503680000, "expires_at: 32503680000 is not a date and time: give one as text"),
        ("9999-12-31T23:00:00-05:00", "is outside the years 1 to 9999 in UTC"),
    ]:
        response = await api.post(
            "/requests", json={"to": "alice", "asks": [{"type": "text", "prompt": "When?"}], "expires_at": sent}
        )
        assert response.status_code == 422, response.text
        assert refusal in response.json()["detail"], response.text
    assert [r["id"] for r in (await api.get("/requests", params={"recipient": "alice"})).json()["items"]] == [
        made["id"]
    ]


async def test_a_long_poll_that_comes_once_the_server_began_to_stop_is_told_to_wait_not_answered_at_once(
    server: InProcessServer, api: httpx.AsyncClient
) -> None:
    """A 408 at once would have its client poll again at once, in a tight loop for as
    long as the server takes to stop; 503 with Retry-After has it wait, or ask another
    node. A create is still taken (its outcome would otherwise be unknown)."""
    created = await api.post("/requests", json={"asks": [{"type": "text", "prompt": "Name?"}]})
    server.app.state.interlock.stop_waits()
    with anyio.fail_after(10):
        await server.app.state.interlock.stopping.wait()
        polled = await api.get(f"/requests/{created.json()['id']}/wait", params={"timeout": 30})
        claimed = await api.post("/runs/claim", params={"wait": 30}, json={"worker": "w1"})
    for refused in (polled, claimed):
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1", refused.text
        assert (
            refused.json()["code"] == "unavailable" and "the interlock server is stopping" in refused.json()["detail"]
        )
    made = await api.post("/requests", json={"asks": [{"type": "text", "prompt": "Name?"}]})
    assert made.status_code == 201


async def test_a_request_reads_the_same_from_every_route_that_returns_it(api: httpx.AsyncClient) -> None:
    """`/close` and the event pages filled each request out through their response's model
    (`grants: []`, every origin field null), where `GET /requests/{id}` writes it as
    stored: a client comparing the two saw a change that was none."""
    made = await create(api, **QUESTION, origin={"channel": "chat"})
    closed = await api.post("/close", json={"channel": "chat"})
    assert closed.status_code == 200, closed.text
    [from_close] = closed.json()
    got = (await api.get(f"/requests/{made['id']}")).json()
    assert from_close == got
    events = (await api.get("/events", params={"request": made["id"]})).json()["events"]
    assert [e["request"] for e in events if e["type"] == "cancelled"] == [got]
    assert (await api.post("/reopen", json={"channel": "chat"})).json()["reopened"] is True


async def test_apps_made_in_one_process_each_serve_their_own_store_through_the_routes_they_share(
    tmp_path: Path,
) -> None:
    """Apps made one after another in a process serve the same route objects (so FastAPI
    works out each route once, not once an app): each still answers from its own store,
    with its own checks, and describes the same API."""
    first = create_app(f"sqlite:///{tmp_path / 'first.db'}", auth=False)
    second = create_app(f"sqlite:///{tmp_path / 'second.db'}", auth=False, max_body_size=2_000)
    async with (
        serving(first) as one,
        serving(second) as two,
        one.client("/api/v1", timeout=BOUND) as api_one,
        two.client("/api/v1", timeout=BOUND) as api_two,
    ):
        made = await create(api_one, **APPROVAL)
        assert (await api_one.get(f"/requests/{made['id']}")).status_code == 200
        missing = await api_two.get(f"/requests/{made['id']}")
        assert missing.status_code == 404, missing.text
        assert [r["id"] for r in (await api_two.get("/requests")).json()["items"]] == []
        big = {"to": "alice", "asks": [{"type": "text", "id": "t", "prompt": "x" * 3_000}]}
        assert (await api_two.post("/requests", json=big)).status_code == 413
        assert (await api_one.post("/requests", json=big)).status_code == 201
    assert first.openapi() == second.openapi()
