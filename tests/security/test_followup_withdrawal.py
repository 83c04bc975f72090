"""A message held for a run is withdrawn by whoever sent it, and by no one else. Everyone
who may see a run sees what it holds: its agent's owner, and each person one of its
requests goes to. Before, any of them could withdraw the others' messages (bob, asked one
question by alice's agent, took back alice's instructions to it), through the API and
from the run's page in the web inbox."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import anyio
import httpx
import pytest

import interlock
from interlock.principals import Principal, issue_token

pytestmark = pytest.mark.anyio
BOUND = 10
RUN = "alice-bot:deploy"
QUESTION = {"asks": [{"type": "text", "id": "region", "prompt": "Region?"}]}


@dataclass
class World:
    base: str
    tokens: dict[str, str]


async def add_people(db: str) -> dict[str, str]:
    tokens = {}
    async with interlock.connect(db) as broker:
        for principal in (
            Principal("alice", "human"),
            Principal("bob", "human"),
            Principal("alice-bot", "agent", "alice"),
        ):
            await broker.store.save_principal(principal)
            token = issue_token(principal.name, datetime.now(UTC))
            await broker.store.save_token(token)
            tokens[principal.name] = token.secret
    return tokens


@pytest.fixture
def world(tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]) -> Iterator[World]:
    db = f"sqlite:///{tmp_path / 'held.db'}"
    tokens = anyio.run(add_people, db)
    with serve(db, auth=True) as base:
        yield World(base, tokens)


@pytest.fixture
async def api(world: World) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    made = {
        who: httpx.AsyncClient(
            base_url=f"{world.base}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=BOUND
        )
        for who, token in world.tokens.items()
    }
    yield made
    for client in made.values():
        await client.aclose()


async def held_from_alice(api: dict[str, httpx.AsyncClient]) -> str:
    """alice's agent runs, asks bob a question in its run (with his grant) and parks on it;
    alice sends it a message, held. The id of that message."""
    bot = api["alice-bot"]
    grant = {"to": "alice-bot", "with": "interlock:inbox/bob", "can": "hitl/request"}
    assert (await api["bob"].post("/grants", json=grant)).status_code == 201
    assert (await bot.post("/runs", json={"agent": "alice-bot", "run_id": "deploy"})).status_code == 201
    asked = await bot.post("/requests", json={**QUESTION, "to": "bob", "origin": {"run": "deploy"}})
    assert asked.status_code == 201, asked.text
    assert (await bot.post(f"/runs/{RUN}/park", json={"waiting_on": [asked.json()["id"]]})).status_code == 200
    sent = await api["alice"].post(f"/runs/{RUN}/messages", json={"text": "use eu-west, not us-east"})
    assert sent.status_code == 409 and sent.json()["details"]["queued"] is True, sent.text
    return str(sent.json()["details"]["followup_id"])


async def held(api: dict[str, httpx.AsyncClient]) -> list[str]:
    return [f["id"] for f in (await api["alice"].get(f"/runs/{RUN}/followups")).json()["items"]]


async def test_another_person_who_sees_the_run_cannot_withdraw_a_message_over_the_api(
    api: dict[str, httpx.AsyncClient],
) -> None:
    message = await held_from_alice(api)
    seen = (await api["bob"].get(f"/runs/{RUN}/followups")).json()["items"]
    assert [f["by"] for f in seen] == ["alice"]  # bob sees it: he is asked in this run
    refused = await api["bob"].delete(f"/runs/{RUN}/followups/{message}")
    assert refused.status_code == 403 and refused.json()["code"] == "forbidden", refused.text
    assert refused.json()["detail"] == "only whoever sent a message may withdraw it"
    assert (await api["alice-bot"].delete(f"/runs/{RUN}/followups/{message}")).status_code == 403
    assert await held(api) == [message]
    withdrawn = await api["alice"].delete(f"/runs/{RUN}/followups/{message}")
    assert withdrawn.status_code == 200 and withdrawn.json()["id"] == message
    assert await held(api) == []


async def test_another_person_cannot_withdraw_a_message_from_the_runs_page(
    world: World, api: dict[str, httpx.AsyncClient]
) -> None:
    message = await held_from_alice(api)
    async with httpx.AsyncClient(base_url=world.base, timeout=BOUND) as bob:
        form = await bob.get("/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        signed_in = await bob.post("/signin", data={"token": world.tokens["bob"], "csrf": csrf[1]})
        assert signed_in.status_code == 303, signed_in.text
        page = await bob.get(f"/inbox/runs/{RUN}")
        assert page.status_code == 200 and "use eu-west, not us-east" in page.text
        assert "/withdraw" not in page.text  # no button for a message that is not his
        mine = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert mine is not None
        posted = await bob.post(f"/inbox/runs/{RUN}/followups/{message}/withdraw", data={"csrf": mine[1]})
        assert posted.status_code == 403, posted.text
        assert "Only whoever sent a message may withdraw it." in posted.text
    assert await held(api) == [message]
