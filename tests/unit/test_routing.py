"""The routing document: what it accepts, what it refuses (naming the field), and the
deliveries it plans for a notice."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any

import pytest

from interlock import Confirm
from interlock.model import build_request
from interlock.outbox import Notice, retry_delay
from interlock.routing import QuietHours, RoutingError, load_routing, parse_duration, routing_from_dict

CHANNELS = {"hook": {"type": "webhook", "url": "http://x.example/h"}, "mail": {"type": "email"}}


def doc(**extra: Any) -> dict[str, Any]:
    return {"channels": CHANNELS, **extra}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"recipients": {"alice": {"channels": ["sms"]}}}, "recipients.alice.channels: no channel named 'sms'"),
        ({"recipients": {"alice": {"chanels": ["hook"]}}}, "recipients.alice: unknown key 'chanels'"),
        (
            {"recipients": {"alice": {"remind_before": "soon"}}},
            "recipients.alice.remind_before: 'soon' is not a duration",
        ),
        ({"recipients": {"alice": {"escalate_after": "5m"}}}, "escalate_after and escalate_to go together"),
        (
            {"recipients": {"alice": {"escalate_after": "5m", "escalate_to": "ghost"}}},
            "'ghost' is no recipient or team",
        ),
        (
            {"recipients": {"a": {"quiet_hours": {"start": "22:00", "end": "7h"}}}},
            "quiet_hours.end: '7h' is not a time",
        ),
        (
            {"recipients": {"a": {"quiet_hours": {"start": "22:00", "end": "07:00", "timezone": "Mars/Olympus"}}}},
            "unknown time zone",
        ),
        ({"max_attempts": 0}, "max_attempts: a whole number from 1 to 100"),
        ({"inbox_url": "ftp://x"}, "inbox_url: an http:// or https:// URL"),
        ({"teams": {"ops": {"members": "alice"}}}, "teams.ops.members: expected a list of names"),
        ({"retry_first": 10, "retry_cap": 5}, "retry_cap: must not be shorter than retry_first"),
        ({"colour": "blue"}, "unknown key 'colour'"),
        ({"lease": "half a minute"}, "lease: 'half a minute' is not a duration"),
        ({"lease": "500ms"}, "lease: from 1s to 24h"),  # read since the command line takes ms
        ({"lease": 0.5}, "lease: from 1s to 24h"),
        ({"lease": "2d"}, "lease: from 1s to 24h"),
        # Typos that were taken, each losing what it meant: a team of no members, an
        # escalation never made, an address no message found.
        ({"teams": {"ops": {"member": ["alice"]}}}, "teams.ops: 'member' is not taken here (a team takes members)"),
        (
            {"teams": {"ops": {"members": ["alice"], "escalate_after": "1m", "escalate_to": "bob"}}},
            "teams.ops: 'escalate_after' is not taken here (a team takes escalate_after with channels",
        ),
        (
            {"recipients": {"alice": {"channels": ["hook"], "addresses": {"hok": "https://x.example"}}}},
            "recipients.alice.addresses.hok: no channel 'hok' in this route's channels",
        ),
    ],
)
def test_a_bad_routing_document_is_refused_naming_the_field(document: dict[str, Any], message: str) -> None:
    with pytest.raises(RoutingError, match=message.replace("(", r"\(").replace(")", r"\)")):
        routing_from_dict(doc(**document))


def test_a_channel_needs_a_type() -> None:
    with pytest.raises(RoutingError, match=r"channels\.hook\.type"):
        routing_from_dict({"channels": {"hook": {"url": "http://x"}}})


def test_a_routing_file_is_read_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "routing.toml"
    path.write_text(
        '[channels.hook]\ntype = "webhook"\nurl = "http://x.example/h"\n'
        '[teams.ops]\nmembers = ["bob", "carol"]\n'
        '[recipients.alice]\nchannels = ["hook"]\nremind_before = "10m"\nescalate_after = "30m"\nescalate_to = "ops"\n'
    )
    routing = load_routing(path)
    assert routing.teams == {"ops": ("bob", "carol")}
    assert routing.recipients["alice"].remind_before == timedelta(minutes=10)
    path.write_text("[channels\n")
    with pytest.raises(RoutingError, match="not valid TOML"):
        load_routing(path)
    with pytest.raises(RoutingError, match="cannot read the routing file"):
        load_routing(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("10m", 600), ("2h", 7200), ("1d", 86400), (45, 45), ("1.5m", 90), ("250ms", 0.25), ("90", 90)],
)
def test_durations_read_as_people_write_them(text: object, seconds: float) -> None:
    # As the command line takes them: `250ms` was refused here.
    assert parse_duration(text, "x").total_seconds() == seconds


@pytest.mark.parametrize("text", ["10 minutes", "-5s", "1e3", "5y", "9" * 400])
def test_a_duration_in_no_syntax_taken_is_refused_naming_the_field(text: str) -> None:
    with pytest.raises(RoutingError, match=r"^retry_first: '.*' is (not a duration: give seconds|longer than any)"):
        routing_from_dict({"retry_first": text, "channels": {}})


def test_quiet_hours_across_midnight_defer_to_their_end() -> None:
    quiet = QuietHours(time(22), time(7), "Europe/Paris")
    late = datetime(2026, 1, 10, 22, 30, tzinfo=UTC)  # 23:30 in Paris
    assert quiet.defer(late) == datetime(2026, 1, 11, 6, 0, tzinfo=UTC)  # 07:00 in Paris
    early = datetime(2026, 1, 10, 5, 0, tzinfo=UTC)  # 06:00 in Paris
    assert quiet.defer(early) == datetime(2026, 1, 10, 6, 0, tzinfo=UTC)
    noon = datetime(2026, 1, 10, 11, 0, tzinfo=UTC)
    assert quiet.defer(noon) == noon


def notice_for(request_id: str, type_: str = "created") -> Notice:
    return Notice(1, 7, type_, request_id, "alice", datetime.now(UTC))


def test_a_team_with_its_own_route_gets_one_delivery_and_one_without_gets_one_per_member() -> None:
    routing = routing_from_dict(
        doc(
            teams={"ops": {"members": ["bob", "carol"], "channels": ["hook"]}, "dev": {"members": ["bob", "carol"]}},
            recipients={"bob": {"channels": ["hook"]}, "carol": {"channels": ["mail"], "addresses": {"mail": "c@x"}}},
        )
    )
    now = datetime.now(UTC)
    to_ops = build_request(Confirm("Ship?"), to="ops")
    assert [(d.recipient, d.channel) for d in routing.plan(notice_for(to_ops.id), to_ops, now)] == [("ops", "hook")]
    to_dev = build_request(Confirm("Ship?"), to="dev")
    planned = routing.plan(notice_for(to_dev.id), to_dev, now)
    assert [(d.recipient, d.channel, d.address) for d in planned] == [("bob", "hook", None), ("carol", "mail", "c@x")]


def test_the_same_notice_plans_the_same_idempotency_keys() -> None:
    routing = routing_from_dict(doc(default={"channels": ["hook", "mail"]}))
    request = build_request(Confirm("Ship?"), to="alice")
    first = routing.plan(notice_for(request.id), request, datetime.now(UTC))
    again = routing.plan(notice_for(request.id), request, datetime.now(UTC) + timedelta(seconds=3))
    assert [d.id for d in first] == [d.id for d in again] and len({d.id for d in first}) == 2


def test_no_reminder_is_planned_for_a_request_that_never_expires_or_once_it_is_too_late() -> None:
    routing = routing_from_dict(doc(recipients={"alice": {"channels": ["hook"], "remind_before": "10m"}}))
    now = datetime.now(UTC)
    forever = build_request(Confirm("Ship?"), to="alice")
    assert [d.kind for d in routing.plan(notice_for(forever.id), forever, now)] == ["request"]
    soon = build_request(Confirm("Ship?"), to="alice", expires_at=now + timedelta(minutes=5))
    kinds = [(d.kind, d.due_at) for d in routing.plan(notice_for(soon.id), soon, now)]
    assert kinds == [("request", now), ("reminder", now)]  # inside the reminder's lead: at once
    later = build_request(Confirm("Ship?"), to="alice", expires_at=now + timedelta(hours=1))
    kinds = [(d.kind, d.due_at) for d in routing.plan(notice_for(later.id), later, now)]
    assert kinds == [("request", now), ("reminder", now + timedelta(minutes=50))]


def test_retry_delays_grow_with_jitter_up_to_the_cap() -> None:
    delays = [retry_delay(n, first=1, cap=8) for n in range(1, 7)]
    for n, delay in enumerate(delays, start=1):
        full = min(2 ** (n - 1), 8)
        assert full / 2 <= delay <= full


def test_a_webhook_signature_is_checked_against_body_secret_and_replay_window() -> None:
    from interlock.webhooks import InvalidSignature, signed_headers, verify

    body = b'{"id":"dlv_1"}'
    headers = signed_headers("s3cret-s3cret-s3cret", body, timestamp=1_000_000)
    assert verify("s3cret-s3cret-s3cret", headers, body, now=1_000_100) == 1_000_000
    with pytest.raises(InvalidSignature, match="replay window"):
        verify("s3cret-s3cret-s3cret", headers, body, now=1_000_301)
    with pytest.raises(InvalidSignature, match="does not match"):
        verify("s3cret-s3cret-s3cret", headers, body + b"x", now=1_000_000)
    with pytest.raises(InvalidSignature, match="required"):
        verify("s3cret-s3cret-s3cret", {}, body)
    rotated = {**headers, "Interlock-Signature": "v1=00," + headers["Interlock-Signature"]}
    assert verify("s3cret-s3cret-s3cret", rotated, body, now=1_000_000) == 1_000_000


def test_the_routing_file_in_the_docs_loads_and_its_channels_open() -> None:
    import asyncio
    import re
    import tomllib

    from interlock.channels import ChannelContext, open_channels

    page = (Path(__file__).parents[2] / "docs" / "how-to" / "notifications.md").read_text()
    documents = [
        m[1] for m in re.finditer(r"^```toml\n(.*?)^```", page, re.MULTILINE | re.DOTALL) if "[channels." in m[1]
    ]
    assert documents
    for text in documents:
        routing = routing_from_dict(tomllib.loads(text))
        channels = open_channels(routing.channels, ChannelContext(routing.inbox_url))
        assert set(channels) == {"ops-hook", "mail", "slack"}
        assert routing.reach("ops") == [("alice", routing.recipients["alice"]), ("bob", routing.recipients["bob"])]

        async def close(opened: dict[str, Any]) -> None:
            for channel in opened.values():
                await channel.aclose()

        asyncio.run(close(channels))


class FakeChannel:
    def __init__(self, config: Any, context: Any) -> None:
        self.config = config

    async def send(self, message: Any) -> str | None:
        return None

    async def aclose(self) -> None:
        pass


def test_a_channel_type_is_found_built_in_by_module_path_or_not_at_all() -> None:
    from interlock.channels import ChannelError, find_factory
    from interlock.channels.webhook import WebhookChannel

    assert find_factory("webhook") is WebhookChannel
    assert find_factory(f"{__name__}:FakeChannel") is FakeChannel
    with pytest.raises(ChannelError, match=r"unknown channel type 'teams' \(known: webhook, email, slack"):
        find_factory("teams")
    with pytest.raises(ChannelError, match="cannot load"):
        find_factory("no.such.module:Thing")


def test_a_routing_file_with_a_secret_shown_as_stars_is_refused_naming_it(tmp_path: Path) -> None:
    # `interlock routing show > routing.json` then `serve --routing routing.json`: the file is
    # used as it is, so a *** would replace the secret (and a webhook's header) in use.
    path = tmp_path / "routing.json"
    path.write_text(
        '{"channels": {"hook": {"type": "webhook", "url": "https://hooks.example/in",'
        ' "headers": {"X-Trace": "on", "Authorization": "***"}}}, "recipients": {"alice": {"channels": ["hook"]}}}'
    )
    with pytest.raises(RoutingError, match=r"routing\.json: channels\.hook\.headers\.Authorization: '\*\*\*' is how"):
        load_routing(path)
    path.write_text(path.read_text().replace('"Authorization": "***"', '"Authorization": "Bearer x"'))
    assert load_routing(path).channels["hook"].options["headers"]["Authorization"] == "Bearer x"
    path.write_text(path.read_text().replace('"url"', '"secret": "***", "url"'))
    with pytest.raises(RoutingError, match=r"channels\.hook\.secret: '\*\*\*'"):
        load_routing(path)
    path.write_text(path.read_text().replace('"secret": "***", ', "").replace("https://hooks", "https://u:***@hooks"))
    with pytest.raises(RoutingError, match=r"channels\.hook\.url: '\*\*\*'"):
        load_routing(path)


def test_a_webhook_with_a_password_in_its_url_and_an_authorization_header_is_refused_naming_both() -> None:
    # The URL's user and password go as an Authorization header of their own, which would
    # replace the one configured without a word.
    from interlock.channels import ChannelContext, ChannelError, open_channels

    doc = {"channels": {"hook": {"type": "webhook", "url": "https://u:pw@hooks.example/in"}}}
    doc["channels"]["hook"]["headers"] = {"authorization": "Bearer x"}
    with pytest.raises(ChannelError, match=r"channels\.hook: a url with a user and password and an Authorization"):
        open_channels(routing_from_dict(doc).channels, ChannelContext(None))


def test_a_masked_smtp_password_is_not_kept_for_an_email_channel_whose_host_is_taken_away() -> None:
    # An email channel without `host` sends to localhost: taking the host away moved the
    # password there, kept from `***`, as if no destination had changed.
    from interlock.routing import masked, unmasked

    mail = {"type": "email", "from": "ops@example.com", "host": "smtp.example.com", "password": "smtp-pw"}
    current = {"channels": {"mail": mail}}
    shown = masked(current)
    without_host = {"channels": {"mail": {k: v for k, v in shown["channels"]["mail"].items() if k != "host"}}}
    with pytest.raises(RoutingError, match=r"channels\.mail\.password: .* channels\.mail\.host changed"):
        unmasked(without_host, current)
    # the host it sends to named as the default it is, or left out while it is, is no change
    local = {"channels": {"mail": {k: v for k, v in mail.items() if k != "host"}}}
    named = {"channels": {"mail": {**masked(local)["channels"]["mail"], "host": "localhost"}}}
    assert unmasked(named, local)["channels"]["mail"]["password"] == "smtp-pw"
    at_localhost = {"channels": {"mail": {**mail, "host": "localhost"}}}
    assert unmasked(masked(local), at_localhost)["channels"]["mail"]["password"] == "smtp-pw"


def test_a_route_address_with_a_password_on_a_webhook_with_an_authorization_header_is_refused() -> None:
    # The webhook refused its own url with a user and password beside an Authorization
    # header, but a route's address with one was taken: the address's credentials were sent
    # as the Authorization header in place of the one configured, without a word.
    hook = {"type": "webhook", "url": "https://hooks.example/in", "headers": {"Authorization": "Bearer x"}}
    route = {"channels": ["hook"], "addresses": {"hook": "https://bob:pw@bob.example/in"}}
    with pytest.raises(RoutingError, match=r"recipients\.bob\.addresses\.hook: a URL with a user and password"):
        routing_from_dict({"channels": {"hook": hook}, "recipients": {"bob": route}})
    with pytest.raises(RoutingError, match=r"default\.addresses\.hook: a URL with a user and password"):
        routing_from_dict({"channels": {"hook": hook}, "default": route})
    # either one alone is taken
    routing_from_dict({"channels": {"hook": {**hook, "headers": {"X-Team": "ops"}}}, "recipients": {"bob": route}})
    plain = {**route, "addresses": {"hook": "https://bob.example/in"}}
    routing_from_dict({"channels": {"hook": hook}, "recipients": {"bob": plain}})
