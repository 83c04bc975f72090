"""Slack against a local fake of its Web API over real HTTP (no network): a Block Kit
message per request, answers through the signed interactive endpoint (buttons and a
modal, in the payload shapes Slack sends), the message updated once the request settles."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

import interlock
from interlock.broker import LocalBroker
from interlock.principals import Principal, issue_token
from interlock.routing import routing_from_dict
from slack_support import FakeSlack, fake_slack

pytestmark = pytest.mark.anyio
SIGNING_SECRET = "slack-signing-secret-for-tests"
PAYLOADS = Path(__file__).parent / "slack_payloads"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with fake_slack("xoxb-test-token", SIGNING_SECRET) as fake:
        yield fake


@pytest.fixture
async def base(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], slack: FakeSlack
) -> AsyncIterator[str]:
    doc = {
        "inbox_url": "http://inbox.example",
        "retry_first": 0.05,
        "retry_cap": 0.1,
        "channels": {"slack": slack.channel},
        "teams": {"ops": {"members": ["alice", "bob"]}},
        "recipients": {
            "alice": {"channels": ["slack"], "addresses": {"slack": "U0ALICE"}},
            "bob": {"channels": ["slack"], "addresses": {"slack": "U0BOB"}},
            "carol": {"channels": ["slack"]},
        },
    }
    async with serve_apart(f"sqlite:///{tmp_path / 'slack.db'}", auth=False, routing=routing_from_dict(doc)) as url:
        yield url


def click(button: dict[str, Any], block_id: str, user: str, slack: FakeSlack) -> dict[str, Any]:
    payload = json.loads((PAYLOADS / "block_actions.json").read_text())
    payload["user"]["id"] = user
    payload["response_url"] = slack.response_url
    action = payload["actions"][0]
    action.update(action_id=button["action_id"], block_id=block_id, value=button.get("value", ""))
    return dict(payload)


async def press(client: httpx.AsyncClient, button: dict[str, Any], block_id: str, user: str, slack: FakeSlack) -> None:
    """`user` clicks `button` in Slack: its payload, signed as Slack signs it, taken (200)."""
    clicked = slack.signed(click(button, block_id, user, slack))
    assert (await client.post("/slack/interactive/slack", **clicked)).status_code == 200


def actions_of(message: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    [block] = [b for b in message["blocks"] if b["type"] == "actions"]
    return block["block_id"], block["elements"]


async def create(base: str, body: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base, timeout=20) as client:
        response = await client.post("/api/v1/requests", json=body)
        assert response.status_code == 201, response.text
        return dict(response.json())


async def test_a_confirm_request_is_answered_with_a_button_and_its_message_updated(base: str, slack: FakeSlack) -> None:
    request = await create(
        base, {"to": "alice", "title": "Deploy", "asks": [{"type": "confirm", "prompt": "Ship it?"}]}
    )
    [message] = await slack.until("chat.postMessage")
    assert message["channel"] == "U0ALICE" and message["text"] == "Deploy"
    assert {"type": "header", "text": {"type": "plain_text", "text": "Deploy"}} in message["blocks"]
    block_id, elements = actions_of(message)
    labels = [e["text"]["text"] for e in elements]
    assert labels == ["Yes", "No", "Open in the inbox"]
    assert elements[2]["url"] == f"http://inbox.example/requests/{request['id']}"
    async with httpx.AsyncClient(base_url=base, timeout=20) as client:
        await press(client, elements[0], block_id, "U0BOB", slack)
        [ephemeral] = await slack.until("response")
        assert ephemeral["text"] == "This request is not yours to answer."
        assert (await client.get(f"/api/v1/requests/{request['id']}")).json()["status"] == "pending"
        await press(client, elements[0], block_id, "U0ALICE", slack)
        settled = (await client.get(f"/api/v1/requests/{request['id']}")).json()
        assert settled["status"] == "answered"
        assert (settled["response"]["by"], settled["response"]["via"]) == ("alice", "slack")
        assert list(settled["response"]["answers"].values()) == [True]
    [update] = await slack.until("chat.update")
    assert (update["channel"], update["ts"]) == (message["channel"], "1700000000.000001")
    assert not [b for b in update["blocks"] if b["type"] == "actions"]
    assert "*Answered* by alice via slack" in json.dumps(update["blocks"])


async def test_a_title_cannot_mention_the_channel_or_disguise_a_link_in_the_notification(
    base: str, slack: FakeSlack
) -> None:
    """A message's `text` (what Slack's notification shows) is mrkdwn, as its blocks are:
    an agent's title went in as it was, so `<!channel>` pinged everyone in a channel and
    `<https://evil.example|...>` showed a link under words of the agent's choosing."""
    title = "<!channel> approve at <https://evil.example|http://inbox.example> & now"
    await create(base, {"to": "alice", "title": title, "asks": [{"type": "confirm", "prompt": "Ship it?"}]})
    [message] = await slack.until("chat.postMessage")
    escaped = "&lt;!channel&gt; approve at &lt;https://evil.example|http://inbox.example&gt; &amp; now"
    assert message["text"] == escaped


async def test_a_forged_or_stale_slack_request_is_refused(base: str, slack: FakeSlack) -> None:
    request = await create(base, {"to": "alice", "asks": [{"type": "confirm", "prompt": "Ship it?"}]})
    [message] = await slack.until("chat.postMessage")
    block_id, elements = actions_of(message)
    payload = click(elements[0], block_id, "U0ALICE", slack)
    async with httpx.AsyncClient(base_url=base, timeout=20) as client:
        forged = slack.signed(payload, secret="not-the-signing-secret")
        assert (await client.post("/slack/interactive/slack", **forged)).status_code == 401
        stale = slack.signed(payload, at=time.time() - 600)
        assert (await client.post("/slack/interactive/slack", **stale)).status_code == 401
        assert (await client.post("/slack/interactive/other", **slack.signed(payload))).status_code == 404
        assert (await client.get(f"/api/v1/requests/{request['id']}")).json()["status"] == "pending"


async def test_a_routing_read_back_and_put_unchanged_keeps_its_secrets(base: str, slack: FakeSlack) -> None:
    """`GET /routing` shows the secrets as `***`; putting that document back must keep the
    secrets in use, not make `***` the signing secret anyone could sign a click with."""
    async with httpx.AsyncClient(base_url=base, timeout=20) as client:
        shown = (await client.get("/api/v1/routing")).json()
        assert shown["channels"]["slack"]["signing_secret"] == shown["channels"]["slack"]["token"] == "***"
        assert (await client.put("/api/v1/routing", json=shown)).status_code == 200
        request = await create(base, {"to": "alice", "asks": [{"type": "confirm", "prompt": "Ship it?"}]})
        [message] = await slack.until("chat.postMessage")  # with the bot token in use (the fake checks it)
        block_id, elements = actions_of(message)
        payload = click(elements[0], block_id, "U0ALICE", slack)
        masked = slack.signed(payload, secret="***")
        assert (await client.post("/slack/interactive/slack", **masked)).status_code == 401
        assert (await client.get(f"/api/v1/requests/{request['id']}")).json()["status"] == "pending"

        # A mask where the routing in use has no such secret is refused, and changes nothing.
        renamed = {**shown, "channels": {"chat": shown["channels"]["slack"]}}
        renamed["recipients"] = {"alice": {"channels": ["chat"], "addresses": {"chat": "U0ALICE"}}}
        refused = await client.put("/api/v1/routing", json=renamed)
        assert refused.status_code == 422
        assert "channels.chat.token: '***' is how a secret is shown" in refused.json()["detail"]
        assert list((await client.get("/api/v1/routing")).json()["channels"]) == ["slack"]
        short = {**shown, "channels": {"slack": {**shown["channels"]["slack"], "signing_secret": "abc"}}}
        refused = await client.put("/api/v1/routing", json=short)
        assert refused.status_code == 422 and "signing_secret: the app's signing secret" in refused.json()["detail"]

        signed = slack.signed(payload)  # the real secret still signs
        assert (await client.post("/slack/interactive/slack", **signed)).status_code == 200
        assert (await client.get(f"/api/v1/requests/{request['id']}")).json()["status"] == "answered"


async def test_a_text_question_is_answered_in_a_modal(base: str, slack: FakeSlack) -> None:
    asks = [{"type": "text", "id": "why", "prompt": "Why?"}, {"type": "confirm", "id": "ok", "prompt": "Sure?"}]
    request = await create(base, {"to": "ops", "asks": asks})
    messages = await slack.until("chat.postMessage", 2)  # the team's members, each directly
    assert sorted(m["channel"] for m in messages) == ["U0ALICE", "U0BOB"]
    block_id, elements = actions_of(messages[0])
    assert elements[0]["action_id"] == "interlock_open"
    async with httpx.AsyncClient(base_url=base, timeout=20) as client:
        await press(client, elements[0], block_id, "U0BOB", slack)
        [opened] = await slack.until("views.open")
        view = opened["view"]
        assert view["private_metadata"] == request["id"]
        assert [(b["block_id"], b["element"]["type"]) for b in view["blocks"]] == [
            ("why", "plain_text_input"),
            ("ok", "radio_buttons"),
        ]
        submission = json.loads((PAYLOADS / "view_submission.json").read_text())
        submission["user"]["id"] = "U0BOB"
        submission["view"]["private_metadata"] = request["id"]
        values = {"ok": {"value": {"type": "radio_buttons", "selected_option": {"value": "yes"}}}}
        submission["view"]["state"]["values"] = copy.deepcopy(values)
        refused = await client.post("/slack/interactive/slack", **slack.signed(submission))
        assert refused.json()["response_action"] == "errors"  # the required text is missing
        values["why"] = {"value": {"type": "plain_text_input", "value": "tests pass"}}
        submission["view"]["state"]["values"] = values
        done = await client.post("/slack/interactive/slack", **slack.signed(submission))
        assert done.status_code == 200 and done.content == b""
        settled = (await client.get(f"/api/v1/requests/{request['id']}")).json()
        assert settled["response"]["answers"] == {"why": "tests pass", "ok": True}
        assert (settled["response"]["by"], settled["response"]["via"]) == ("bob", "slack")
    updates = await slack.until("chat.update", 2)
    assert {u["channel"] for u in updates} == {"U0ALICE", "U0BOB"}


async def test_a_request_answered_elsewhere_updates_the_message(base: str, slack: FakeSlack) -> None:
    request = await create(base, {"to": "alice", "asks": [{"type": "confirm", "prompt": "Ship it?"}]})
    await slack.until("chat.postMessage")
    async with httpx.AsyncClient(base_url=base, timeout=20) as client:
        response = await client.post(f"/api/v1/requests/{request['id']}/reject", json={"reason": "not today"})
        assert response.status_code == 200, response.text
    [update] = await slack.until("chat.update")
    text = json.dumps(update["blocks"])
    assert "*Rejected*" in text and "not today" in text


async def test_slack_refusing_a_message_makes_a_dead_letter(base: str, slack: FakeSlack) -> None:
    slack.errors["chat.postMessage"] = "channel_not_found"
    request = await create(base, {"to": "alice", "asks": [{"type": "confirm", "prompt": "Ship it?"}]})
    await slack.until("chat.postMessage")
    async with httpx.AsyncClient(base_url=base, timeout=20) as client:
        async with asyncio.timeout(20):
            while True:
                items = (await client.get(f"/api/v1/requests/{request['id']}/deliveries")).json()["items"]
                if items and items[0]["status"] == "dead":
                    break
                await asyncio.sleep(0.05)  # written by the server's thread
    assert items[0]["last_error"] == "Slack refused chat.postMessage: channel_not_found"


def submission(request_id: str, user: str, values: dict[str, Any]) -> dict[str, Any]:
    """A modal's submission, in the recorded shape, with these `state.values`."""
    payload = json.loads((PAYLOADS / "view_submission.json").read_text())
    payload["user"]["id"] = user
    payload["view"]["private_metadata"] = request_id
    payload["view"]["state"]["values"] = values
    return dict(payload)


def picked(value: str) -> dict[str, Any]:
    return {"text": {"type": "plain_text", "text": value, "emoji": True}, "value": value}


async def open_modal(client: httpx.AsyncClient, slack: FakeSlack, message: dict[str, Any], user: str) -> dict[str, Any]:
    """Press the message's modal button as `user`; the modal Slack was asked to open."""
    block_id, elements = actions_of(message)
    [button] = [e for e in elements if e["action_id"] == "interlock_open"]
    before = len(await slack.until("views.open", 0))
    await press(client, button, block_id, user, slack)
    opened = await slack.until("views.open", before + 1)
    return dict(opened[-1]["view"])


async def submit(client: httpx.AsyncClient, slack: FakeSlack, payload: dict[str, Any]) -> httpx.Response:
    return await client.post("/slack/interactive/slack", **slack.signed(payload))


INCIDENT = {
    "type": "object",
    "properties": {
        "summary": {"type": "string", "title": "Summary", "maxLength": 80},
        "users": {"type": "integer", "minimum": 0, "title": "Users affected"},
        "public": {"type": "boolean", "title": "Post on the status page"},
        "severity": {"enum": ["low", "high"], "title": "Severity", "default": "low"},
    },
    "required": ["summary", "users"],
}


async def test_a_form_is_answered_in_a_modal_with_an_input_per_field(base: str, slack: FakeSlack) -> None:
    request = await create(
        base, {"to": "alice", "asks": [{"type": "form", "id": "incident", "prompt": "Report it", "schema": INCIDENT}]}
    )
    [message] = await slack.until("chat.postMessage")
    assert [e["text"]["text"] for e in actions_of(message)[1]] == ["Answer", "Open in the inbox"]
    async with httpx.AsyncClient(base_url=base, timeout=20) as client:
        view = await open_modal(client, slack, message, "U0ALICE")
        inputs = [
            (b["block_id"], b["label"]["text"], b["element"]["type"], b["optional"])
            for b in view["blocks"]
            if b["type"] == "input"
        ]
        assert inputs == [
            ("incident#p0", "Summary", "plain_text_input", False),
            ("incident#p1", "Users affected", "number_input", False),
            ("incident#p2", "Post on the status page", "checkboxes", True),
            ("incident#p3", "Severity", "static_select", True),
        ]
        number = view["blocks"][2]["element"]
        assert (number["is_decimal_allowed"], number["min_value"]) == (False, "0")
        assert view["blocks"][4]["element"]["initial_option"]["text"]["text"] == "low"  # the schema's default
        values = {
            "incident#p0": {"value": {"type": "plain_text_input", "value": "Checkout is down"}},
            "incident#p1": {"value": {"type": "number_input", "value": "many"}},
            "incident#p2": {"value": {"type": "checkboxes", "selected_options": [picked("on")]}},
            "incident#p3": {"value": {"type": "static_select", "selected_option": picked("1")}},
        }
        refused = (await submit(client, slack, submission(request["id"], "U0ALICE", values))).json()
        assert refused == {
            "response_action": "errors",
            "errors": {"incident#p1": "Users affected: 'many' is not a whole number"},
        }
        values["incident#p1"]["value"]["value"] = "1200"
        done = await submit(client, slack, submission(request["id"], "U0ALICE", values))
        assert done.status_code == 200 and done.content == b""
        settled = (await client.get(f"/api/v1/requests/{request['id']}")).json()
    assert settled["response"]["answers"] == {
        "incident": {"summary": "Checkout is down", "users": 1200, "public": True, "severity": "high"}
    }
    assert (settled["response"]["by"], settled["response"]["via"]) == ("alice", "slack")
    [update] = await slack.until("chat.update")  # the message says it is answered
    assert update["channel"] == "U0ALICE" and "*Answered*" in json.dumps(update["blocks"])


async def test_a_form_a_modal_cannot_express_is_answered_in_the_inbox(base: str, slack: FakeSlack) -> None:
    schema = {"type": "object", "properties": {"hosts": {"type": "array", "items": {"type": "string"}}}}
    request = await create(
        base, {"to": "alice", "asks": [{"type": "form", "prompt": "Which hosts?", "schema": schema}]}
    )
    [message] = await slack.until("chat.postMessage")
    [inbox] = actions_of(message)[1]
    assert (inbox["text"]["text"], inbox["url"]) == (
        "Open in the inbox",
        f"http://inbox.example/requests/{request['id']}",
    )


async def test_a_choice_with_an_other_answer_and_a_multi_choice_are_answered_in_a_modal(
    base: str, slack: FakeSlack
) -> None:
    asks = [
        {"type": "choice", "id": "region", "prompt": "Which region?", "options": ["eu", "us"], "allow_other": True},
        {"type": "multi_choice", "id": "notify", "prompt": "Notify whom?", "options": ["email", "slack", "pager"]},
    ]
    request = await create(base, {"to": "alice", "asks": asks})
    [message] = await slack.until("chat.postMessage")
    async with httpx.AsyncClient(base_url=base, timeout=20) as client:
        view = await open_modal(client, slack, message, "U0ALICE")
        assert [(b["block_id"], b["element"]["type"]) for b in view["blocks"]] == [
            ("region", "static_select"),
            ("region#other", "plain_text_input"),
            ("notify", "checkboxes"),
        ]
        assert [o["value"] for o in view["blocks"][2]["element"]["options"]] == ["email", "slack", "pager"]
        values = {
            "region": {"value": {"type": "static_select", "selected_option": None}},
            "region#other": {"value": {"type": "plain_text_input", "value": "ap-south-1"}},
            "notify": {"value": {"type": "checkboxes", "selected_options": [picked("email"), picked("pager")]}},
        }
        done = await submit(client, slack, submission(request["id"], "U0ALICE", values))
        assert done.status_code == 200 and done.content == b""
        settled = (await client.get(f"/api/v1/requests/{request['id']}")).json()
    assert settled["response"]["answers"] == {"region": "ap-south-1", "notify": ["email", "pager"]}
    [update] = await slack.until("chat.update")
    assert update["channel"] == "U0ALICE" and "*Answered*" in json.dumps(update["blocks"])


async def test_one_choice_with_an_other_answer_has_its_buttons_and_an_other_answer_button(
    base: str, slack: FakeSlack
) -> None:
    ask = {"type": "choice", "id": "region", "prompt": "Which region?", "options": ["eu", "us"], "allow_other": True}
    request = await create(base, {"to": "alice", "asks": [ask]})
    [message] = await slack.until("chat.postMessage")
    assert [e["text"]["text"] for e in actions_of(message)[1]] == ["eu", "us", "Other answer", "Open in the inbox"]
    async with httpx.AsyncClient(base_url=base, timeout=20) as client:
        await open_modal(client, slack, message, "U0ALICE")
        values = {"region#other": {"value": {"type": "plain_text_input", "value": "  "}}}
        refused = (await submit(client, slack, submission(request["id"], "U0ALICE", values))).json()
        assert refused["response_action"] == "errors" and list(refused["errors"]) == ["region"]  # nothing chosen
        values = {"region#other": {"value": {"type": "plain_text_input", "value": "sa-east-1"}}}
        assert (await submit(client, slack, submission(request["id"], "U0ALICE", values))).status_code == 200
        assert (await client.get(f"/api/v1/requests/{request['id']}")).json()["response"]["answers"] == {
            "region": "sa-east-1"
        }
    [update] = await slack.until("chat.update")  # once: the refused submission changed nothing
    assert update["channel"] == "U0ALICE" and "*Answered*" in json.dumps(update["blocks"])


async def test_the_message_is_updated_when_the_request_expires_or_is_cancelled(base: str, slack: FakeSlack) -> None:
    # (a second to expire in: its message is posted first, however busy the machine)
    expiring = await create(base, {"to": "alice", "timeout": 1, "asks": [{"type": "confirm", "prompt": "Quick?"}]})
    await slack.until("chat.postMessage")
    [expired] = await slack.until("chat.update")
    assert "*Expired*" in json.dumps(expired["blocks"]) and expired["text"].startswith("expired")
    assert not [b for b in expired["blocks"] if b["type"] == "actions"]

    cancelled = await create(base, {"to": "alice", "asks": [{"type": "confirm", "prompt": "Still needed?"}]})
    await slack.until("chat.postMessage", 2)
    async with httpx.AsyncClient(base_url=base, timeout=20) as client:
        response = await client.post(f"/api/v1/requests/{cancelled['id']}/cancel", json={"reason": "not needed"})
        assert response.status_code == 200, response.text
    updates = await slack.until("chat.update", 2)
    assert updates[1]["channel"] == "U0ALICE" and updates[1]["ts"] != updates[0]["ts"]  # the second message
    text = json.dumps(updates[1]["blocks"])
    assert "*Cancelled*" in text and "not needed" in text
    assert expiring["id"] != cancelled["id"]


async def test_an_escalation_offers_buttons_only_to_someone_who_may_answer(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], slack: FakeSlack
) -> None:
    """Requests to alice and to the team ops nobody answered are escalated to bob, who is
    in ops. alice's message to him has no buttons and no link to a page that would refuse
    him: it says the request waits on alice and whom to remind, and a click forged from
    her buttons is still refused. The team's message to him keeps its buttons, which
    answer it, by him."""
    escalated = {"escalate_after": "0.2s", "escalate_to": "bob"}
    doc = {
        "inbox_url": "http://inbox.example",
        "channels": {"slack": slack.channel},
        "teams": {"ops": {"members": ["bob"], "channels": ["slack"], "addresses": {"slack": "C0OPS"}, **escalated}},
        "recipients": {
            "alice": {"channels": ["slack"], "addresses": {"slack": "U0ALICE"}, **escalated},
            "bob": {"channels": ["slack"], "addresses": {"slack": "U0BOB"}},
        },
    }
    confirm = [{"type": "confirm", "prompt": "Ship it?"}]
    async with serve_apart(f"sqlite:///{tmp_path / 'slack.db'}", auth=False, routing=routing_from_dict(doc)) as base:
        alices = await create(base, {"to": "alice", "requester": "deployer", "title": "Alice's", "asks": confirm})
        teams = await create(base, {"to": "ops", "title": "The team's", "asks": confirm})
        posted = await slack.until("chat.postMessage", 4)
        to_bob = {m["text"]: m for m in posted if m["channel"] == "U0BOB"}
        [to_alice] = [m for m in posted if m["channel"] == "U0ALICE"]

        told = to_bob["Alice's"]
        assert not [b for b in told["blocks"] if b["type"] == "actions"]
        shown = json.dumps(told["blocks"])
        when = datetime.fromisoformat(alices["created_at"]).strftime("%Y-%m-%d %H:%M UTC")
        assert f"it waits on alice since {when}, and was escalated to you (bob)" in shown
        assert "only alice can. Nor may you open it in the inbox: remind alice, or deployer, who asked for it." in shown
        assert "inbox.example" not in shown

        block_id, elements = actions_of(to_alice)  # her buttons, clicked by bob
        async with httpx.AsyncClient(base_url=base, timeout=20) as client:
            await press(client, elements[0], block_id, "U0BOB", slack)
            [ephemeral] = await slack.until("response")
            assert ephemeral["text"] == "This request is not yours to answer."
            assert (await client.get(f"/api/v1/requests/{alices['id']}")).json()["status"] == "pending"

            theirs = to_bob["The team's"]
            assert "it waits on ops since" in json.dumps(theirs["blocks"])
            block_id, elements = actions_of(theirs)
            assert [e["text"]["text"] for e in elements] == ["Yes", "No", "Open in the inbox"]
            await press(client, elements[0], block_id, "U0BOB", slack)
            settled = (await client.get(f"/api/v1/requests/{teams['id']}")).json()
            assert (settled["status"], settled["response"]["by"], settled["response"]["via"]) == (
                "answered",
                "bob",
                "slack",
            )


@pytest.mark.parametrize("kept", [True, False], ids=["team-in-the-store", "team-of-the-routing-only"])
async def test_a_team_s_channel_keeps_its_buttons_and_a_click_answers_as_the_member_who_clicked(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], slack: FakeSlack, kept: bool
) -> None:
    """A request to ops goes to the team's own Slack channel: Slack names whoever clicks,
    so its buttons stay, and bob's click answers it as bob; carol, who is not in ops, is
    told it is not hers. Its link to the inbox is there only where the store keeps the
    team (its members may not open it otherwise)."""
    db = f"sqlite:///{tmp_path / 'slack.db'}"
    if kept:
        async with interlock.connect(db) as broker:
            assert isinstance(broker, LocalBroker)
            for name in ("alice", "bob"):
                await broker.save_principal(Principal(name, "human"))
    doc = {
        "inbox_url": "http://inbox.example",
        "channels": {"slack": slack.channel},
        "teams": {"ops": {"members": ["alice", "bob"], "channels": ["slack"], "addresses": {"slack": "C0OPS"}}},
        "recipients": {
            name: {"channels": ["slack"], "addresses": {"slack": f"U0{name.upper()}"}}
            for name in ("alice", "bob", "carol")
        },
    }
    async with serve_apart(db, auth=False, routing=routing_from_dict(doc)) as base:
        request = await create(base, {"to": "ops", "asks": [{"type": "confirm", "prompt": "Restart the workers?"}]})
        [posted] = await slack.until("chat.postMessage")
        assert posted["channel"] == "C0OPS"
        block_id, elements = actions_of(posted)
        labels = [e["text"]["text"] for e in elements]
        assert labels == (["Yes", "No", "Open in the inbox"] if kept else ["Yes", "No"])
        async with httpx.AsyncClient(base_url=base, timeout=20) as client:
            await press(client, elements[0], block_id, "U0CAROL", slack)
            [ephemeral] = await slack.until("response")
            assert ephemeral["text"] == "This request is not yours to answer."
            assert (await client.get(f"/api/v1/requests/{request['id']}")).json()["status"] == "pending"
            await press(client, elements[0], block_id, "U0BOB", slack)
            settled = (await client.get(f"/api/v1/requests/{request['id']}")).json()
            assert (settled["status"], settled["response"]["by"], settled["response"]["via"]) == (
                "answered",
                "bob",
                "slack",
            )


async def test_a_person_whose_every_token_is_revoked_answers_nothing_from_slack_until_given_a_new_one(
    tmp_path: Path, serve_apart: Callable[..., AbstractAsyncContextManager[str]], slack: FakeSlack
) -> None:
    """`interlock token revoke alice` cuts her off: her Slack user id still names her, but
    her click on a button, on the button that opens a form and a form she sends answer
    nothing, each telling her why; bob, of her team and not cut off, answers as before,
    and once `token create` gives her a new token her click answers again."""
    db = f"sqlite:///{tmp_path / 'slack.db'}"
    async with interlock.connect(db) as broker:
        assert isinstance(broker, LocalBroker)
        for name in ("alice", "bob"):
            await broker.save_principal(Principal(name, "human"))
            await broker.save_token(issue_token(name, datetime.now(UTC)))
    doc = {
        "channels": {"slack": slack.channel},
        "teams": {"ops": {"members": ["alice", "bob"]}},
        "recipients": {
            name: {"channels": ["slack"], "addresses": {"slack": f"U0{name.upper()}"}} for name in ("alice", "bob")
        },
    }
    confirm = [{"type": "confirm", "prompt": "Ship it?"}]
    asks = [{"type": "text", "id": "why", "prompt": "Why?"}, {"type": "confirm", "id": "ok", "prompt": "Sure?"}]
    async with serve_apart(db, auth=False, routing=routing_from_dict(doc)) as base:
        hers = await create(base, {"to": "alice", "title": "Alice's", "asks": confirm})
        teams = await create(base, {"to": "ops", "title": "The team's", "asks": asks})
        posted = {(m["channel"], m["text"]): m for m in await slack.until("chat.postMessage", 3)}
        async with interlock.connect(db) as broker:
            assert isinstance(broker, LocalBroker)
            assert await broker.revoke_tokens(principal="alice") == 1  # `interlock token revoke alice`
        values = {
            "why": {"value": {"type": "plain_text_input", "value": "tests pass"}},
            "ok": {"value": {"type": "radio_buttons", "selected_option": {"value": "yes"}}},
        }
        async with httpx.AsyncClient(base_url=base, timeout=20) as client:
            block_id, elements = actions_of(posted["U0ALICE", "Alice's"])
            await press(client, elements[0], block_id, "U0ALICE", slack)
            block_id, elements = actions_of(posted["U0ALICE", "The team's"])
            [opener] = [e for e in elements if e["action_id"] == "interlock_open"]
            await press(client, opener, block_id, "U0ALICE", slack)
            told = [r["text"] for r in await slack.until("response", 2)]
            assert told == [
                "Every token of alice's is revoked here, so this button answers nothing.",
                "Every token of alice's is revoked here, so this button answers nothing.",
            ]
            assert not await slack.until("views.open", 0)  # no form opened for her
            refused = await submit(client, slack, submission(teams["id"], "U0ALICE", copy.deepcopy(values)))
            assert refused.status_code == 200
            assert refused.json()["response_action"] == "errors"
            assert list(refused.json()["errors"].values()) == [
                "Every token of alice's is revoked here, so this form answers nothing."
            ]
            for request in (hers, teams):
                now = (await client.get(f"/api/v1/requests/{request['id']}")).json()
                assert (now["status"], now["response"]) == ("pending", None)

            await open_modal(client, slack, posted["U0BOB", "The team's"], "U0BOB")  # bob: not cut off
            assert (await submit(client, slack, submission(teams["id"], "U0BOB", values))).status_code == 200
            settled = (await client.get(f"/api/v1/requests/{teams['id']}")).json()
            assert (settled["status"], settled["response"]["by"]) == ("answered", "bob")

            async with interlock.connect(db) as broker:
                assert isinstance(broker, LocalBroker)
                await broker.save_token(issue_token("alice", datetime.now(UTC)))  # `interlock token create alice`
            block_id, elements = actions_of(posted["U0ALICE", "Alice's"])
            await press(client, elements[0], block_id, "U0ALICE", slack)
            settled = (await client.get(f"/api/v1/requests/{hers['id']}")).json()
            assert (settled["status"], settled["response"]["by"], settled["response"]["via"]) == (
                "answered",
                "alice",
                "slack",
            )


def _answer_click(payload: dict[str, Any]) -> dict[str, Any]:
    return dict(payload["actions"][0])


MALFORMED: dict[str, Callable[[dict[str, Any], dict[str, Any]], Any]] = {
    "payload not JSON": lambda click, form: "not json",
    "payload not an object": lambda click, form: json.dumps([click]),
    "user missing": lambda click, form: {k: v for k, v in click.items() if k != "user"},
    "user not an object": lambda click, form: {**click, "user": "U0ALICE"},
    "user id not a string": lambda click, form: {**click, "user": {"id": ["U0ALICE"]}},
    "actions not a list": lambda click, form: {**click, "actions": "interlock_answer"},
    "actions an object": lambda click, form: {**click, "actions": {"0": _answer_click(click)}},
    "an action not an object": lambda click, form: {**click, "actions": ["interlock_answer"]},
    "action_id not a string": lambda click, form: {
        **click,
        "actions": [{**_answer_click(click), "action_id": ["interlock_answer"]}],
    },
    "value not a string": lambda click, form: {
        **click,
        "actions": [{**_answer_click(click), "value": json.loads(_answer_click(click)["value"])}],
    },
    "selected_option not an object": lambda click, form: {
        **click,
        "actions": [{**_answer_click(click), "value": None, "selected_option": _answer_click(click)["value"]}],
    },
    "view not an object": lambda click, form: {**form, "view": ["interlock_answer"]},
    "view state not an object": lambda click, form: {**form, "view": {**form["view"], "state": "values"}},
    "view state values not an object": lambda click, form: {
        **form,
        "view": {**form["view"], "state": {"values": ["ok"]}},
    },
    "a modal input not an object": lambda click, form: {
        **form,
        "view": {**form["view"], "state": {"values": {"ok": ["value"]}}},
    },
    "selected_options not a list": lambda click, form: {
        **form,
        "view": {**form["view"], "state": {"values": {"ok": {"value": {"type": "checkboxes", "selected_options": 5}}}}},
    },
    "private_metadata not a string": lambda click, form: {
        **form,
        "view": {**form["view"], "private_metadata": [form["view"]["private_metadata"]]},
    },
}


@pytest.mark.parametrize("shape", list(MALFORMED))
async def test_a_signed_payload_of_an_unexpected_shape_is_refused_and_changes_nothing(
    base: str, slack: FakeSlack, shape: str
) -> None:
    """Slack's signature says who sent a payload, not that it has the shape Slack sends: a
    signed one whose `actions`, `user`, `view` or `value` are of another type, or whose
    `payload` is not JSON, answered 500. It is refused, 400 saying what was wrong, and
    nothing is answered, told or opened."""
    request = await create(base, {"to": "alice", "asks": [{"type": "confirm", "id": "ok", "prompt": "Ship it?"}]})
    [message] = await slack.until("chat.postMessage")
    block_id, elements = actions_of(message)
    yes = click(elements[0], block_id, "U0ALICE", slack)
    values = {"ok": {"value": {"type": "radio_buttons", "selected_option": {"value": "yes"}}}}
    form = submission(request["id"], "U0ALICE", values)
    malformed = MALFORMED[shape](yes, form)
    if isinstance(malformed, str):  # the form field itself, as it is
        body = urlencode({"payload": malformed}).encode()
        signed = slack.signed({})
        stamp = signed["headers"]["X-Slack-Request-Timestamp"]
        digest = hmac.new(SIGNING_SECRET.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
        signed = {"content": body, "headers": {**signed["headers"], "X-Slack-Signature": f"v0={digest}"}}
    else:
        signed = slack.signed(malformed)
    async with httpx.AsyncClient(base_url=base, timeout=20) as client:
        refused = await client.post("/slack/interactive/slack", **signed)
        assert refused.status_code == 400, refused.text
        assert refused.json()["detail"].startswith("not a Slack interaction payload")
        assert (await client.get(f"/api/v1/requests/{request['id']}")).json()["status"] == "pending"
        assert (await client.post("/slack/interactive/slack", **slack.signed(yes))).status_code == 200
        assert (await client.get(f"/api/v1/requests/{request['id']}")).json()["status"] == "answered"
    assert await slack.until("response", 0) == [] and await slack.until("views.open", 0) == []
