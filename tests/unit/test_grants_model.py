"""Grant offers, echo consent and the venue's grant policy, in the pure model."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from interlock.errors import InvalidAnswer, InvalidRequest
from interlock.model import (
    Choice,
    Confirm,
    Grant,
    GrantPolicy,
    MultiChoice,
    Option,
    Text,
    ask_from_dict,
    build_request,
    issue_grants,
    offered_grants,
    request_from_dict,
    request_to_dict,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DEPLOY = {"with": "repo:web", "can": "deploy"}
READ = {"with": "repo:web", "can": "read", "exp": None}


def offering() -> object:
    return build_request(
        [
            Confirm("Deploy?", id="ok", grants=[DEPLOY]),
            Choice("Scope?", [Option("read", grants=[READ]), "none"], id="scope"),
            MultiChoice(
                "Extras?",
                [Option("logs", grants=[{"with": "logs", "can": "tail", "exp": 1_900_000_000}]), "x"],
                id="extras",
            ),
            Text("Why?", id="why", required=False),
        ],
        to="alice",
        requester="bot",
    )


def test_offers_are_kept_on_confirm_asks_and_options_and_read_back_from_json() -> None:
    request = offering()
    again = request_from_dict(request_to_dict(request))
    assert again == request
    assert [(a, o, g.can) for a, o, g in offered_grants(again)] == [
        ("ok", None, "deploy"),
        ("scope", "read", "read"),
        ("extras", "logs", "tail"),
    ]
    shape = request_to_dict(request)["asks"]
    assert shape[0]["grants"] == [DEPLOY]  # no exp: the venue's default
    assert shape[1]["options"][0]["grants"] == [READ]  # explicit null: no expiry
    assert "grants" not in shape[1]["options"][1] and "grants" not in shape[3]


@pytest.mark.parametrize(
    "ask",
    [
        {"type": "text", "id": "t", "prompt": "Name?", "grants": [DEPLOY]},
        {"type": "form", "id": "f", "prompt": "Form", "schema": {"type": "object"}, "grants": [DEPLOY]},
        {"type": "choice", "id": "c", "prompt": "Pick", "options": ["a"], "grants": [DEPLOY]},
    ],
)
def test_grants_anywhere_but_a_confirm_ask_or_an_option_are_refused(ask: dict[str, object]) -> None:
    with pytest.raises(InvalidRequest, match="grants may be offered only on confirm"):
        ask_from_dict(ask)


@pytest.mark.parametrize(
    ("grant", "fault"),
    [
        ({"can": "x"}, "needs both"),
        ({"with": "", "can": "x"}, "non-empty"),
        ({"with": "w", "can": "x", "exp": "soon"}, "unix seconds"),
        ({"with": "w", "can": "x", "exp": True}, "unix seconds"),
        ({"with": "w", "can": "x", "exp": -1}, "unix seconds"),
        ({"with": "w", "can": "x", "until": 5}, "unknown field"),
    ],
)
def test_a_malformed_offer_is_refused(grant: dict[str, object], fault: str) -> None:
    with pytest.raises(InvalidRequest, match=fault):
        Confirm("Ok?", grants=[grant])


def test_the_same_grant_twice_in_one_place_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="offered twice"):
        Option("a", grants=[DEPLOY, DEPLOY])


def test_only_the_triggered_and_echoed_grants_are_issued_built_from_the_offer() -> None:
    request = offering()
    answers = {"ok": True, "scope": "read", "extras": ["x"]}
    echo = [{"with": "repo:web", "can": "deploy"}, {"with": "repo:web", "can": "read"}]
    issued = issue_grants(request, answers, echo, issuer="alice", now=NOW)
    assert [(g.can, g.ask_id, g.option_id) for g in issued] == [("deploy", "ok", None), ("read", "scope", "read")]
    deploy, read = issued
    assert (deploy.issuer, deploy.audience, deploy.request_id) == ("alice", "bot", request.id)
    assert deploy.expires_at == NOW + timedelta(days=7)  # omitted exp: the 7-day default
    assert read.expires_at is None  # explicit null: no expiry


def test_a_triggered_grant_not_echoed_is_not_issued() -> None:
    request = offering()
    assert issue_grants(request, {"ok": True, "scope": "read"}, None, issuer="alice", now=NOW) == ()
    only = issue_grants(request, {"ok": True, "scope": "read"}, [DEPLOY], issuer="alice", now=NOW)
    assert [g.can for g in only] == ["deploy"]


@pytest.mark.parametrize(
    ("answers", "echo", "why"),
    [
        ({"ok": False, "scope": "read"}, [DEPLOY], "did not choose"),  # the confirm ask was declined
        ({"ok": True, "scope": "none"}, [{"with": "repo:web", "can": "read"}], "did not choose"),
        ({"ok": True, "scope": "read"}, [{"with": "repo:web", "can": "admin"}], "does not offer"),
        ({"ok": True, "scope": "read"}, [{"with": "repo:web", "can": "read", "exp": 5}], "did not choose"),
    ],
)
def test_an_echo_of_anything_not_triggered_refuses_the_whole_answer(
    answers: dict[str, object], echo: list[dict[str, object]], why: str
) -> None:
    with pytest.raises(InvalidAnswer, match=why):
        issue_grants(offering(), answers, echo, issuer="alice", now=NOW)


def test_an_echo_must_be_a_list_of_grants() -> None:
    with pytest.raises(InvalidAnswer, match="list"):
        issue_grants(offering(), {"ok": True}, {"with": "a", "can": "b"}, issuer="alice", now=NOW)  # type: ignore[arg-type]
    with pytest.raises(InvalidAnswer, match="needs both"):
        issue_grants(offering(), {"ok": True}, [{"can": "deploy"}], issuer="alice", now=NOW)


def test_the_policy_refuses_offers_past_its_ceiling_and_caps_the_default() -> None:
    policy = GrantPolicy(ceiling_seconds=3600)
    policy.check_offer(Grant("w", "c"), "ask", NOW)  # the default is capped, not refused
    policy.check_offer(Grant("w", "c", int(NOW.timestamp()) + 3600), "ask", NOW)
    with pytest.raises(InvalidRequest, match="ceiling of 1 hour "):
        policy.check_offer(Grant("w", "c", int(NOW.timestamp()) + 3601), "ask", NOW)
    with pytest.raises(InvalidRequest, match="no expiry"):
        policy.check_offer(Grant("w", "c", None), "ask", NOW)
    assert policy.expiry(Grant("w", "c"), NOW) == NOW + timedelta(hours=1)
    with pytest.raises(InvalidRequest, match="in the past"):
        GrantPolicy().check_offer(Grant("w", "c", int(NOW.timestamp()) - 1), "ask", NOW)
    with pytest.raises(ValueError, match="ceiling_seconds"):
        GrantPolicy(ceiling_seconds=0)


def test_a_policy_whose_grants_would_end_past_the_last_date_or_at_once_is_refused_when_made() -> None:
    # It was taken (`interlock serve --grant-default 3000000d`), and every approval that
    # issued a grant from it then failed with an OverflowError, a 500 over HTTP.
    for made in (lambda: GrantPolicy(3_000_000 * 86400.0), lambda: GrantPolicy(ceiling_seconds=3_000_000 * 86400.0)):
        with pytest.raises(ValueError, match="more than a thousand years"):
            made()
    for made in (lambda: GrantPolicy(1e-7), lambda: GrantPolicy(ceiling_seconds=1e-7)):
        with pytest.raises(ValueError, match="less than the microsecond"):
            made()
    thousand_years = 365 * 1000 * 86400
    assert GrantPolicy(thousand_years).expiry(Grant("w", "c"), NOW) == NOW + timedelta(seconds=thousand_years)


def test_a_ceiling_of_one_unit_reads_in_the_singular() -> None:
    with pytest.raises(InvalidRequest, match="ceiling of 1 hour "):
        GrantPolicy(ceiling_seconds=3600).check_offer(Grant("w", "c", int(NOW.timestamp()) + 3601), "ask", NOW)
    with pytest.raises(InvalidRequest, match="at most 2 days;"):
        GrantPolicy(ceiling_seconds=2 * 86400).check_offer(Grant("w", "c", None), "ask", NOW)
