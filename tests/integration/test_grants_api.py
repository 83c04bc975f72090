"""Capability grants and who may ask whom, against a real server with auth on: the ask
matrix, echo consent over the API and the remote broker, expiry rules, the ceiling, the
grants API and the tokens an application verifies."""

from __future__ import annotations

import html
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

import interlock
from interlock import Confirm
from interlock.broker import LocalBroker
from interlock.errors import Forbidden, InvalidAnswer, InvalidGrantToken
from interlock.grant_tokens import verify_grant_token
from interlock.model import Choice, GrantPolicy, IssuedGrant, Option, Response, Status, new_id
from interlock.principals import Principal, issue_token

pytestmark = pytest.mark.anyio
BOUND = 10
ASK_BOB = {"with": "interlock:inbox/bob", "can": "hitl/request"}


@dataclass
class World:
    base: str
    db: str
    tokens: dict[str, str]

    def client(self, who: str) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        return httpx.AsyncClient(base_url=f"{self.base}/api/v1", headers=headers, timeout=BOUND)

    def broker(self, who: str) -> interlock.Broker:
        return interlock.connect(self.base, token=self.tokens[who])


@pytest.fixture
def world(
    tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]
) -> Callable[..., AbstractAsyncContextManager[World]]:
    """`with world(**server_options) as w:` a server with auth on, and alice, bob and carol
    (people) and bot (alice's agent), each with a token."""

    @asynccontextmanager
    async def make(**options: Any) -> AsyncIterator[World]:
        db = f"sqlite:///{tmp_path / f'grants-{time.monotonic_ns()}.db'}"
        tokens: dict[str, str] = {}

        async with interlock.connect(db) as broker:
            assert isinstance(broker, LocalBroker)
            for principal in (
                Principal("alice", "human"),
                Principal("bob", "human"),
                Principal("carol", "human"),
                Principal("bot", "agent", owner="alice"),
            ):
                await broker.store.save_principal(principal)
                token = issue_token(principal.name, datetime.now(UTC))
                await broker.store.save_token(token)
                tokens[principal.name] = token.secret
        with serve(db, auth=True, **options) as base:
            yield World(base, db, tokens)

    return make


def question(**fields: Any) -> dict[str, Any]:
    return {"asks": [{"type": "text", "id": "t", "prompt": "Name?"}], **fields}


async def inbox(w: World, who: str) -> list[dict[str, Any]]:
    async with w.client(who) as c:
        return list((await c.get("/requests", params={"status": "pending"})).json()["items"])


# -- who may ask whom ----------------------------------------------------------------------


async def test_the_ask_matrix_by_default(world: Callable[..., AbstractAsyncContextManager[World]]) -> None:
    async with world() as w:
        async with w.client("alice") as alice, w.client("bot") as bot:
            assert (await alice.post("/requests", json=question())).status_code == 201  # a person asks themself
            assert (await alice.post("/requests", json=question(to="alice"))).status_code == 201
            assert (await bot.post("/requests", json=question())).status_code == 201  # an agent asks its owner
            assert (await bot.post("/requests", json=question(to="alice"))).status_code == 201
            refused = await bot.post("/requests", json=question(to="bob"))  # an agent asks another person
            assert refused.status_code == 403
            assert refused.json()["code"] == "forbidden"
            assert "interlock:inbox/bob" in refused.json()["detail"]
            # and how bob gives it, a command that, run by bob, lets bot ask him
            assert (
                "bob gives with `interlock grants give bot --with interlock:inbox/bob --can hitl/request`"
                in (refused.json()["detail"])
            )
            by_person = await alice.post("/requests", json=question(to="bob"))  # a person asks another
            assert by_person.status_code == 403
            gate = await bot.post("/approvals", json={**question(to="bob"), "kind": "approval", "context": {}})
            assert gate.status_code == 403
        assert await inbox(w, "bob") == []  # nothing landed in the other inbox


async def test_a_grant_to_request_from_the_person_lets_its_holder_ask_them(
    world: Callable[..., AbstractAsyncContextManager[World]],
) -> None:
    async with world() as w, w.client("bob") as bob, w.client("bot") as bot, w.client("carol") as carol:
        # carol cannot open bob's inbox: a grant on it is bob's alone to give, so hers is
        # refused, and none is issued that a check or a venue would read as valid
        given = await carol.post("/grants", json={"to": "bot", **ASK_BOB})
        assert given.status_code == 403 and given.json()["code"] == "forbidden"
        assert "is bob's alone to give (it lets its holder ask them), not carol's" in given.json()["detail"]
        assert (await bot.post("/grants/check", json={"with": ASK_BOB["with"], "can": ASK_BOB["can"]})).json()[
            "granted"
        ] is False
        assert (await carol.get("/grants", params={"issuer": "carol"})).json()["items"] == []
        assert (await bot.post("/requests", json=question(to="bob"))).status_code == 403
        given = await bob.post("/grants", json={"to": "bot", **ASK_BOB})
        assert given.status_code == 201, given.text
        grant = given.json()
        assert (grant["issuer"], grant["audience"], grant["request_id"]) == ("bob", "bot", None)
        assert (await bot.post("/requests", json=question(to="bob"))).status_code == 201
        assert len(await inbox(w, "bob")) == 1
        # the grant is bot's own: alice (bot's owner) still may not ask bob
        async with w.client("alice") as alice:
            assert (await alice.post("/requests", json=question(to="bob"))).status_code == 403
        revoked = await bob.post(f"/grants/{grant['id']}/revoke")
        assert revoked.json() == {"id": grant["id"], "revoked": True}
        assert (await bot.post("/requests", json=question(to="bob"))).status_code == 403


async def test_a_grant_to_request_can_be_consented_to_through_an_approval(
    world: Callable[..., AbstractAsyncContextManager[World]],
) -> None:
    async with world() as w, w.client("bob") as bob, w.client("bot") as bot:
        # bob asks himself to let bot ask him (an operator's flow): the offer rides on the confirm ask
        ask = {"type": "confirm", "id": "ok", "prompt": "Let bot ask you?", "grants": [ASK_BOB]}
        created = (await bob.post("/requests", json={"asks": [ask], "to": "bob"})).json()
        answered = await bob.post(f"/requests/{created['id']}/answer", json={"answer": True, "grants": [ASK_BOB]})
        assert answered.status_code == 200, answered.text
        (issued,) = answered.json()["response"]["grants"]
        assert (issued["issuer"], issued["audience"]) == ("bob", "bob")  # the audience is the requester
        assert (await bot.post("/requests", json=question(to="bob"))).status_code == 403  # not bot's grant


async def test_an_open_organisation_lets_anyone_ask_anyone(
    world: Callable[..., AbstractAsyncContextManager[World]],
) -> None:
    async with world(open_inboxes=True) as w:
        async with w.client("bot") as bot, w.client("alice") as alice:
            assert (await bot.post("/requests", json=question(to="bob"))).status_code == 201
            assert (await alice.post("/requests", json=question(to="bob"))).status_code == 201
            assert (await bot.post("/inform", json={"message": "fyi", "to": "bob"})).status_code == 201
        assert len(await inbox(w, "bob")) == 2
        assert await updates_for(w, "bob") == ["fyi"]


async def updates_for(w: World, who: str) -> list[str]:
    async with w.client(who) as c:
        page = (await c.get("/events", params={"limit": 1000})).json()["events"]
    return [e["data"]["message"] for e in page if e["type"] == "informed" and e["data"]["to"] == who]


async def test_an_update_goes_only_to_whom_its_sender_may_ask(
    world: Callable[..., AbstractAsyncContextManager[World]],
) -> None:
    async with world() as w, w.client("bob") as bob, w.client("bot") as bot, w.client("alice") as alice:
        assert (await bot.post("/inform", json={"message": "to my owner"})).status_code == 201
        assert (await bot.post("/inform", json={"message": "to alice", "to": "alice"})).status_code == 201
        refused = await bot.post("/inform", json={"message": "buy now", "to": "bob"})  # an agent, another person
        assert refused.status_code == 403
        assert refused.json()["code"] == "forbidden"
        assert "interlock:inbox/bob" in refused.json()["detail"]
        assert (await alice.post("/inform", json={"message": "hi bob", "to": "bob"})).status_code == 403
        nobody = await bot.post("/inform", json={"message": "hello?", "to": "nobody-here"})
        assert nobody.status_code == 422
        assert "no human or agent named 'nobody-here'" in nobody.json()["detail"]
        assert await updates_for(w, "bob") == []  # nothing reached bob
        assert await updates_for(w, "alice") == ["to my owner", "to alice"]

        assert (await bob.post("/grants", json={"to": "bot", **ASK_BOB})).status_code == 201
        assert (await bot.post("/inform", json={"message": "deploy done", "to": "bob"})).status_code == 201
        assert await updates_for(w, "bob") == ["deploy done"]


# -- echo consent over the API --------------------------------------------------------------


async def test_an_echo_of_an_untriggered_grant_fails_the_whole_answer_and_issues_nothing(
    world: Callable[..., AbstractAsyncContextManager[World]],
) -> None:
    deploy = {"with": "repo:web", "can": "deploy"}
    async with world() as w, w.client("alice") as alice, w.client("bot") as bot:
        asks = [
            {"type": "confirm", "id": "ok", "prompt": "Deploy?", "grants": [deploy]},
            {
                "type": "choice",
                "id": "env",
                "prompt": "Where?",
                "options": [
                    {"id": "prod", "grants": [{"with": "env:prod", "can": "write", "exp": None}]},
                    "staging",
                ],
            },
        ]
        created = (await bot.post("/requests", json={"asks": asks})).json()
        path = f"/requests/{created['id']}/answer"
        refused = await alice.post(
            path,
            json={
                "answers": {"ok": True, "env": "staging"},
                "grants": [deploy, {"with": "env:prod", "can": "write"}],
            },
        )
        assert refused.status_code == 422
        assert refused.json()["code"] == "invalid_answer"
        assert "env:prod" in refused.json()["detail"]
        assert (await bot.get(f"/requests/{created['id']}")).json()["status"] == "pending"
        assert (await bot.get("/grants")).json()["items"] == []
        done = await alice.post(
            path, json={"answers": {"ok": True, "env": "prod"}, "grants": [{"with": "env:prod", "can": "write"}]}
        )
        assert done.status_code == 200, done.text
        (issued,) = done.json()["response"]["grants"]
        assert (issued["with"], issued["can"], issued["exp"], issued["option_id"]) == (
            "env:prod",
            "write",
            None,
            "prod",
        )
        held = (await bot.get("/grants")).json()["items"]  # an agent lists what it holds
        assert [g["id"] for g in held] == [issued["id"]]
        given = (await alice.get("/grants")).json()["items"]  # a person lists what they gave
        assert [g["id"] for g in given] == [issued["id"]]
        events = (await bot.get("/events")).json()["events"]
        assert [e["type"] for e in events][-2:] == ["answered", "granted"]


async def test_the_default_expiry_is_seven_days_and_null_means_none(
    world: Callable[..., AbstractAsyncContextManager[World]],
) -> None:
    async with world() as w, w.client("alice") as alice, w.client("bot") as bot:
        offers = [{"with": "a", "can": "x"}, {"with": "b", "can": "y", "exp": None}]
        ask = {"type": "confirm", "id": "ok", "prompt": "Ok?", "grants": offers}
        created = (await bot.post("/requests", json={"asks": [ask]})).json()
        assert created["asks"][0]["grants"] == offers  # omitted stays omitted, null stays null
        answered = (
            await alice.post(f"/requests/{created['id']}/answer", json={"answer": True, "grants": offers})
        ).json()
        default, forever = answered["response"]["grants"]
        issued_at = datetime.fromisoformat(default["issued_at"]).timestamp()
        assert abs(default["exp"] - (issued_at + 7 * 86400)) <= 1
        assert forever["exp"] is None and forever["expires_at"] is None


async def test_a_ceiling_refuses_excessive_offers_before_delivery(
    world: Callable[..., AbstractAsyncContextManager[World]],
) -> None:
    async with world(grant_policy=GrantPolicy(ceiling_seconds=3600)) as w:
        async with w.client("bot") as bot:
            for grant in (
                {"with": "a", "can": "x", "exp": None},
                {"with": "a", "can": "x", "exp": int(time.time()) + 7200},
            ):
                ask = {"type": "choice", "id": "c", "prompt": "Pick", "options": [{"id": "a", "grants": [grant]}]}
                refused = await bot.post("/requests", json={"asks": [ask]})
                assert refused.status_code == 422
                assert "ceiling" in refused.json()["detail"] or "no expiry" in refused.json()["detail"]
            ok = {"type": "confirm", "id": "ok", "prompt": "Ok?", "grants": [{"with": "a", "can": "x"}]}
            assert (await bot.post("/requests", json={"asks": [ok]})).status_code == 201
        assert len(await inbox(w, "alice")) == 1  # only the acceptable one landed


async def test_grants_on_a_text_ask_are_refused_at_create(
    world: Callable[..., AbstractAsyncContextManager[World]],
) -> None:
    async with world() as w:
        async with w.client("bot") as bot:
            ask = {"type": "text", "id": "t", "prompt": "Name?", "grants": [{"with": "a", "can": "x"}]}
            refused = await bot.post("/requests", json={"asks": [ask]})
            assert refused.status_code == 422
            assert "grants may be offered only on confirm" in refused.json()["detail"]
        assert await inbox(w, "alice") == []


# -- the grants API, the remote broker and tokens ----------------------------------------------


async def test_the_remote_broker_echoes_lists_checks_and_revokes_and_the_token_verifies(
    world: Callable[..., AbstractAsyncContextManager[World]],
) -> None:
    async with world() as w, w.broker("bot") as bot, w.broker("alice") as alice:
        request = await bot.create(
            Choice("Access?", [Option("read", grants=[{"with": "repo:web", "can": "read"}]), "none"], id="c")
        )
        with pytest.raises(InvalidAnswer, match="not triggered"):
            await alice.resolve(request.id, "none", grants=[{"with": "repo:web", "can": "read"}])
        assert await alice.resolve(request.id, "read", grants=[{"with": "repo:web", "can": "read"}])
        (issued,) = (await bot.get(request.id)).response.grants  # type: ignore[union-attr]
        assert (await bot.list_grants()).items == [issued]
        assert await bot.check_grant("bot", "repo:web", "read") == issued
        assert await bot.check_grant("bot", "repo:web", "write") is None
        assert await alice.check_grant("bot", "repo:web", "read") == issued  # the grants she gave, by default
        with pytest.raises(Forbidden):
            await alice.check_grant("bot", "repo:web", "read", issuer="bob")  # others': not hers to check
        token = await bot.grant_token(issued.id)  # type: ignore[attr-defined]
        async with httpx.AsyncClient() as http:
            keys = (await http.get(f"{w.base}/api/v1/grants/keys")).json()
        claims = verify_grant_token(token, keys, audience="bot", with_="repo:web", can="read")
        assert (claims.grant_id, claims.issuer, claims.request_id) == (issued.id, "alice", request.id)
        with pytest.raises(InvalidGrantToken):
            verify_grant_token(token, keys, audience="someone-else")
        with pytest.raises(InvalidGrantToken):
            verify_grant_token(token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB"), keys)
        async with w.client("carol") as carol:  # anyone holding the token may ask the venue
            assert (await carol.post("/grants/verify", json={"token": token})).json()["valid"] is True
            assert (await carol.get(f"/grants/{issued.id}")).status_code == 403  # but not read it
            assert (await carol.post(f"/grants/{issued.id}/revoke")).status_code == 403
        assert await alice.revoke_grant(issued.id)
        assert not await alice.revoke_grant(issued.id)
        assert await bot.check_grant("bot", "repo:web", "read") is None
        async with w.client("carol") as carol:
            verdict = (await carol.post("/grants/verify", json={"token": token})).json()
            assert verdict["valid"] is False and verdict["reason"] == "the grant was revoked"
        with pytest.raises(Forbidden):
            await bot.give_grant("bob", "interlock:inbox/alice", "hitl/request")  # an agent gives nothing
        given = await alice.give_grant("bot", "x", "y", exp=None)
        assert given.expires_at is None and given.issuer == "alice"
        assert (await bot.get_grant(given.id)).id == given.id


async def test_a_confirm_approval_through_the_remote_broker_issues_its_grant(
    world: Callable[..., AbstractAsyncContextManager[World]],
) -> None:
    async with world() as w, w.broker("bot") as bot, w.broker("alice") as alice:
        request = await bot.create(Confirm("Deploy?", grants=[{"with": "repo:web", "can": "deploy"}]), kind="approval")
        assert await alice.resolve(request.id, True, grants=[{"with": "repo:web", "can": "deploy"}])
        response = await bot.wait(request.id, timeout=BOUND)
        assert [g.can for g in response.grants] == ["deploy"]


async def test_a_batch_answer_echoes_grants_item_by_item(
    world: Callable[..., AbstractAsyncContextManager[World]],
) -> None:
    deploy = {"with": "repo:web", "can": "deploy"}
    async with world() as w, w.client("alice") as alice, w.client("bot") as bot:
        ask = {"type": "confirm", "id": "ok", "prompt": "Deploy?", "grants": [deploy]}
        first, second = [(await bot.post("/requests", json={"asks": [ask]})).json()["id"] for _ in range(2)]
        results = await alice.post(
            "/answers",
            json={
                "items": [
                    {"id": first, "answer": True, "grants": [deploy]},
                    {"id": second, "answer": False, "grants": [deploy]},  # declined: not triggered
                ]
            },
        )
        ok, refused = results.json()
        assert ok["ok"] is True and refused["ok"] is False
        assert refused["error"]["code"] == "invalid_answer"
        assert (await bot.get(f"/requests/{second}")).json()["status"] == "pending"
        assert [g["request_id"] for g in (await bot.get("/grants")).json()["items"]] == [first]


async def tokens_of(w: World, person: str, *, revoked: bool) -> None:
    """On the server's store: every token of `person` revoked (`interlock token revoke`,
    which cuts them off), or a new one given them (`interlock token create`)."""
    async with interlock.connect(w.db) as store:
        assert isinstance(store, LocalBroker)
        if revoked:
            await store.revoke_tokens(principal=person)
        else:
            await store.save_token(issue_token(person, datetime.now(UTC)))


async def test_a_grant_from_a_person_cut_off_lets_nobody_ask_them_nor_verifies_until_they_are_given_a_token(
    world: Callable[..., AbstractAsyncContextManager[World]],
) -> None:
    # alice lets carol ask her; `token revoke alice` withdraws that with the rest of her
    # say: carol's ask is refused, the venue says her grant's token is not valid and why;
    # `token create alice` gives it back.
    async with world() as w:
        async with w.broker("alice") as alice:
            given = await alice.give_grant("carol", "interlock:inbox/alice", "hitl/request")
            token = await alice.grant_token(given.id)  # type: ignore[attr-defined]
        await tokens_of(w, "alice", revoked=True)  # `interlock token revoke alice`
        async with w.broker("carol") as carol, w.client("carol") as http:
            with pytest.raises(Forbidden, match="needs their permission"):
                await carol.create(Confirm("Lunch?"), to="alice")
            verdict = (await http.post("/grants/verify", json={"token": token})).json()
            assert verdict["valid"] is False and verdict["grant"]["id"] == given.id
            assert verdict["reason"] == "the grant was given by 'alice', whom `token revoke` cut off", verdict
            await tokens_of(w, "alice", revoked=False)  # `interlock token create alice`
            assert (await carol.create(Confirm("Lunch?"), to="alice")).to == "alice"
            assert (await http.post("/grants/verify", json={"token": token})).json()["valid"] is True


async def test_the_grants_api_shows_a_grant_from_a_person_cut_off_as_not_in_force_until_they_are_given_a_token(
    world: Callable[..., AbstractAsyncContextManager[World]],
) -> None:
    # `token revoke alice`: the grant she gave carol is listed, and read, with
    # `issuer_cut_off` true (every other field as before: it is not revoked, nor changed),
    # `live=true` leaves it out, and the OpenAPI document says what the field means.
    # `token create alice` gives it back as it was.
    async with world() as w:
        async with w.broker("alice") as alice:
            given = await alice.give_grant("carol", "interlock:inbox/alice", "hitl/request")
            token = await alice.grant_token(given.id)  # type: ignore[attr-defined]
        async with w.client("carol") as http:
            before = (await http.get("/grants", params={"audience": "carol"})).json()["items"]
            assert [(g["id"], g["issuer_cut_off"]) for g in before] == [(given.id, False)]
            await tokens_of(w, "alice", revoked=True)  # `interlock token revoke alice`
            listed = (await http.get("/grants", params={"audience": "carol"})).json()["items"]
            assert [g["id"] for g in listed] == [given.id]
            assert listed[0] == {**before[0], "issuer_cut_off": True}  # revoked_at still null
            one = (await http.get(f"/grants/{given.id}")).json()
            assert one["issuer_cut_off"] is True and one["revoked_at"] is None and one["token"] == token
            assert (await http.get("/grants", params={"audience": "carol", "live": True})).json()["items"] == []
            verdict = (await http.post("/grants/verify", json={"token": token})).json()
            assert verdict["valid"] is False and verdict["grant"]["issuer_cut_off"] is True
            schema = (await http.get(f"{w.base}/openapi.json")).json()["components"]["schemas"]["IssuedGrantModel"]
            assert "issuer_cut_off" not in schema.get("required", [])  # added: older clients read on
            assert "token create ISSUER --human" in schema["properties"]["issuer_cut_off"]["description"]
            await tokens_of(w, "alice", revoked=False)  # `interlock token create alice`
            assert (await http.get("/grants", params={"audience": "carol"})).json()["items"] == before


async def test_the_request_page_says_a_grant_its_answer_issued_is_not_in_force_while_its_issuer_is_cut_off(
    world: Callable[..., AbstractAsyncContextManager[World]],
) -> None:
    # alice's answer let bob deploy; `token revoke alice`: the request's page, as bob (who
    # asked) reads it in the web inbox, says the grant is not in force and why, where it
    # said it was granted as if it still held. `token create alice` gives it back; revoked
    # since, it says that.
    async with world() as w:
        deploy = {"with": "repo:web", "can": "deploy", "exp": None}
        async with interlock.connect(w.db) as store:
            assert isinstance(store, LocalBroker)
            request = await store.create(Confirm("Let bob deploy?", grants=[deploy]), to="alice", requester="bob")
            assert await store.resolve(request.id, True, by="alice", grants=[deploy])
            await store.revoke_tokens(principal="alice")  # `interlock token revoke alice`
        granted = "Granted deploy on repo:web to bob with no expiry"
        async with httpx.AsyncClient(base_url=w.base, timeout=BOUND) as browser:
            form = await browser.get("/signin")
            csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert csrf is not None, form.text
            signed_in = await browser.post("/signin", data={"csrf": csrf[1], "token": w.tokens["bob"]})
            assert signed_in.status_code == 303, signed_in.text

            async def issued(markup: bool = False) -> list[str]:
                page = (await browser.get(f"/requests/{request.id}")).text
                found = re.search(r'<ul class="issued"[^>]*>(.*?)</ul>', page, re.S)
                assert found is not None, page
                items = re.findall(r"<li>(.*?)</li>", found[1], re.S)
                return [
                    " ".join(html.unescape(item if markup else re.sub(r"<[^>]+>", "", item)).split()) for item in items
                ]

            assert await issued() == [
                f"{granted}; not in force: alice is cut off (every token of theirs revoked), until "
                "`interlock token create alice --human`"
            ]
            await tokens_of(w, "alice", revoked=False)  # `interlock token create alice`
            assert await issued() == [granted]
            async with interlock.connect(w.db) as store:  # revoked since, it says so too
                [grant] = (await store.list_grants(request=request.id)).items
                assert await store.revoke_grant(grant.id, by="alice")
                [grant] = (await store.list_grants(request=request.id)).items
            assert grant.revoked_at is not None
            [revoked] = await issued(markup=True)  # its time as the page's script shows in the reader's own zone
            at = grant.revoked_at.astimezone(UTC)
            assert (
                revoked == f'{granted}; revoked <time datetime="{at:%Y-%m-%dT%H:%M:%SZ}">{at:%Y-%m-%d %H:%M} UTC</time>'
            )


async def test_the_request_page_says_nothing_of_a_cut_off_issuer_for_a_grant_that_expired(
    world: Callable[..., AbstractAsyncContextManager[World]],
) -> None:
    # A grant alice's answer issued has expired; then `token revoke alice`. Giving her a
    # token again would not put it back in force, so the page must not say it is out of
    # force for her being cut off "until `interlock token create alice --human`": it ended.
    async with world() as w:
        async with interlock.connect(w.db) as store:
            assert isinstance(store, LocalBroker)
            request = await store.create(Confirm("Let bob deploy?"), to="alice", requester="bob")
            issued_at = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
            ended = IssuedGrant(
                new_id(), "repo:web", "deploy", "alice", "bob", issued_at, issued_at + timedelta(hours=1), request.id
            )
            response = Response(datetime.now(UTC), {"confirm": True}, by="alice", via="api", grants=(ended,))
            assert await store.store.settle_granting(request.settle(Status.ANSWERED, response)) is not None
            await store.revoke_tokens(principal="alice")  # `interlock token revoke alice`
        async with httpx.AsyncClient(base_url=w.base, timeout=BOUND) as browser:
            form = await browser.get("/signin")
            csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert csrf is not None, form.text
            signed_in = await browser.post("/signin", data={"csrf": csrf[1], "token": w.tokens["bob"]})
            assert signed_in.status_code == 303, signed_in.text
            page = (await browser.get(f"/requests/{request.id}")).text
        found = re.search(r'<ul class="issued"[^>]*>(.*?)</ul>', page, re.S)
        assert found is not None, page
        [shown] = [
            " ".join(html.unescape(re.sub(r"<[^>]+>", "", item)).split())
            for item in re.findall(r"<li>(.*?)</li>", found[1], re.S)
        ]
        assert shown.startswith("Granted deploy on repo:web to bob until 20"), shown
        assert "cut off" not in shown and "token create" not in shown, shown


async def test_the_inbox_and_the_history_read_the_grants_their_answers_issued_in_one_query_a_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each page says how the grants its answers issued are now (revoked, their issuer cut
    # off): read for the whole page at once, not a read of the grants and another of their
    # issuers for each request (50 queries for a page of 25 answers, each a round trip on
    # PostgreSQL).
    from asgi_support import serve_in_process

    db = f"sqlite:///{tmp_path / 'pages.db'}"
    deploy = {"with": "repo:web", "can": "deploy", "exp": None}
    async with interlock.connect(db) as broker:
        for i in range(12):
            request = await broker.create(Confirm(f"Deploy {i}?", grants=[deploy]), to="alice", requester="bot")
            assert await broker.resolve(request.id, True, by="alice", grants=[deploy])
    async with serve_in_process(db, auth=False) as server, server.client(timeout=BOUND) as web:
        store = server.app.state.interlock.broker.store
        reads: list[str] = []
        for name in ("list_grants", "get_grant", "cut_off"):

            def counted(read: Any, name: str = name) -> Any:
                async def call(*args: Any) -> Any:
                    reads.append(name)
                    return await read(*args)

                return call

            monkeypatch.setattr(store, name, counted(getattr(store, name)))
        for path in ("/history", "/"):
            reads.clear()
            shown = await web.get(path)
            assert shown.status_code == 200, shown.text
            assert shown.text.count("Granted deploy on repo:web to bot with no expiry") == 12
            assert sorted(reads) == ["cut_off", "list_grants"], (path, reads)
