"""A request's own page tells how people were told about it, on SQLite and PostgreSQL: its
timeline has a line for each notice that went out (to whom, through which channel, when)
and for each dead letter, and the page lists its deliveries (state, tries, last error),
for whoever may see the request only; a dead letter is sent again from there."""

from __future__ import annotations

import contextlib
import html
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

import interlock
from asgi_support import InProcessServer, serving
from interlock import Confirm
from interlock.broker import LocalBroker
from interlock.principals import Principal, issue_token
from interlock.routing import routing_from_dict
from interlock.server.app import create_app

from .receiver import Receiver, eventually, receiver

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("backend", ["sqlite", "postgresql"])]
SECRET_KEY = "timeline-secret-key-of-32-characters"


@dataclass
class World:
    server: InProcessServer
    broker: LocalBroker
    tokens: dict[str, str]
    hook: Receiver

    @contextlib.asynccontextmanager
    async def browser(self, who: str) -> AsyncIterator[httpx.AsyncClient]:
        """A client signed in to the web inbox as `who`, as a browser is."""
        async with self.server.client(follow_redirects=False) as client:
            form = await client.get("/signin")
            csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert csrf is not None
            done = await client.post("/signin", data={"csrf": csrf[1], "token": self.tokens[who]})
            assert done.status_code == 303, done.text
            yield client


def routing(url: str) -> dict[str, Any]:
    return {
        "max_attempts": 1,
        "channels": {
            "hook": {"type": "webhook", "url": url},
            "pager": {"type": "webhook"},  # no URL, and alice's route gives none: a dead letter at once
        },
        "recipients": {"alice": {"channels": ["hook", "pager"]}, "carol": {"channels": ["hook"]}},
        "teams": {"ops": {"members": ["alice", "carol"]}},
    }


@pytest.fixture
async def world(url: str) -> AsyncIterator[World]:
    async with receiver() as hook, interlock.connect(url) as broker:
        assert isinstance(broker, LocalBroker)
        tokens = {}
        people = ("alice", "bob", "carol")
        for p in (*(Principal(name, "human") for name in people), Principal("bot", "agent", "alice")):
            await broker.save_principal(p)
            token = issue_token(p.name, datetime.now(UTC))
            await broker.save_token(token)
            tokens[p.name] = token.secret
        app = create_app(broker=broker, secret_key=SECRET_KEY, routing=routing_from_dict(routing(hook.url)))
        async with serving(app) as server:
            yield World(server, broker, tokens, hook)


def timeline(page: str) -> list[str]:
    """The timeline's lines, as text."""
    found = re.search(r'<ol class="timeline"[^>]*>(.*?)</ol>', page, re.S)
    assert found is not None, page
    items = re.findall(r"<li[^>]*>(.*?)</li>", found[1], re.S)
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", item)).split()) for item in items]


async def settled_deliveries(world: World, request_id: str) -> None:
    async def done() -> bool:
        found = await world.broker.store.list_deliveries(request_id=request_id)
        return len(found) == 2 and all(d.status != "pending" for d in found)

    await eventually(done)


async def test_the_timeline_shows_who_was_notified_through_which_channel_and_each_dead_letter(world: World) -> None:
    request = await world.broker.create(Confirm("Ship it?"), to="alice", requester="bot")
    await world.hook.until(1)
    await settled_deliveries(world, request.id)
    delivered = next(d for d in await world.broker.store.list_deliveries(request_id=request.id) if d.channel == "hook")
    async with world.browser("alice") as alice:
        page = (await alice.get(f"/requests/{request.id}")).text
    lines = timeline(page)
    assert lines[0].startswith("Asked by bot to alice")
    notified = next(line for line in lines if line.startswith("Notified alice via hook (webhook)"))
    assert delivered.delivered_at is not None and delivered.delivered_at.strftime("%Y-%m-%d %H:%M UTC") in notified
    dead = next(line for line in lines if line.startswith("Could not notify alice via pager (webhook)"))
    assert "no URL for 'alice'" in dead
    when = r"<td><time[^>]*>[^<]*</time></td>"
    row = rf'<tr data-id="dlv_\w+" data-status="(\w+)">\s*{when}\s*<td>request</td>\s*<td>alice</td>\s*<td>(\w+)</td>'
    rows = dict(re.findall(row, page))
    assert rows == {"delivered": "hook", "dead": "pager"}
    assert re.search(r'href="[^"]*/inbox/deliveries">Dead letters</a>', page)  # the nav links to them


async def test_the_timeline_shows_each_delivery_skipped_to_whom_through_which_channel_and_why(world: World) -> None:
    # carol is cut off (`interlock token revoke carol`): her share of a request to her
    # team is not sent. The page alice (of the team too) reads says so on the timeline,
    # beside the notice that reached alice: to whom, through which channel, and why,
    # with what undoes it; as its table of deliveries lists it, skipped.
    await world.broker.add_team_members("ops", ["alice", "carol"])
    await world.broker.revoke_tokens(principal="carol")
    request = await world.broker.create(Confirm("Restart the workers?"), to="ops", requester="bot")

    async def sent() -> bool:
        found = await world.broker.store.list_deliveries(request_id=request.id)
        return len(found) == 3 and all(d.status != "pending" for d in found)

    await eventually(sent)
    async with world.browser("alice") as alice:
        page = (await alice.get(f"/requests/{request.id}")).text
    lines = timeline(page)
    assert any(line.startswith("Notified alice via hook (webhook)") for line in lines), lines
    [skipped] = [line for line in lines if line.startswith("Did not notify carol via hook (webhook)")]
    assert "not sent: every token of 'carol' is revoked (`interlock token revoke carol`)" in skipped, skipped
    assert "until `interlock token create carol --human` gives them one again" in skipped, skipped
    assert not any(line.startswith(("Notified carol", "Could not notify carol")) for line in lines), lines
    row = r'<tr data-id="dlv_\w+" data-status="skipped">\s*<td><time[^>]*>[^<]*</time></td>\s*<td>request</td>'
    assert re.search(row + r"\s*<td>carol</td>\s*<td>hook</td>", page), page


async def test_a_settled_request_tells_who_was_told_it_ended(world: World) -> None:
    request = await world.broker.create(Confirm("Ship it?"), to="alice", requester="bot")
    await settled_deliveries(world, request.id)
    await world.broker.resolve(request.id, True, by="alice")
    await world.hook.until(2)

    async def told() -> bool:
        found = await world.broker.store.list_deliveries(request_id=request.id, status="delivered")
        return any(d.kind == "settled" for d in found)

    await eventually(told)
    async with world.browser("alice") as alice:
        lines = timeline((await alice.get(f"/requests/{request.id}")).text)
    assert any(line.startswith("Told alice via hook (webhook) that it was answered") for line in lines)
    assert [line.split(" 20")[0] for line in lines].index("Answered by alice via python") < len(lines) - 1


async def test_only_who_may_see_the_request_sees_how_people_were_told(world: World) -> None:
    request = await world.broker.create(Confirm("Ship it?"), to="alice", requester="bot")
    await settled_deliveries(world, request.id)
    async with world.browser("bob") as bob:
        refused = await bob.get(f"/requests/{request.id}")
        assert refused.status_code == 403
        assert "hook" not in refused.text and "no URL" not in refused.text
        assert (await bob.get(f"/inbox/deliveries?request={request.id}")).status_code == 403


async def test_a_dead_letter_is_sent_again_from_the_request_page(world: World) -> None:
    request = await world.broker.create(Confirm("Ship it?"), to="alice", requester="bot")
    await settled_deliveries(world, request.id)
    [first] = [d for d in await world.broker.store.list_deliveries(request_id=request.id) if d.channel == "pager"]
    async with world.browser("alice") as alice:
        page = (await alice.get(f"/requests/{request.id}")).text
        # One "Send again" button, the dead letter's; the delivered one has none.
        assert (
            len(re.findall(r'action="[^"]*/retry">', page)) == 1 and page.count('aria-hidden="true">Send again<') == 1
        )
        form = re.search(r'action="[^"]*(/inbox/deliveries/dlv_\w+/retry)">(.*?)</form>', page, re.S)
        assert form is not None
        fields = dict(re.findall(r'name="(\w+)" value="([^"]*)"', form[2]))
        assert fields["next"] == f"/requests/{request.id}"
        again = await alice.post(form[1], data=fields)
        assert again.status_code == 303 and again.headers["location"] == f"/requests/{request.id}"

    async def died_again() -> bool:
        found = await world.broker.store.get_delivery(first.id)
        return found is not None and found.status == "dead" and found.due_at > first.due_at

    await eventually(died_again)  # tried again (and, with still no URL, dead again)
