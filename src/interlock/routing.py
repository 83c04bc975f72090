"""Who hears about a request, through which channels, and when: the routing configuration.

One TOML file (or the same document as JSON through the API) names the channels, the
teams (a name and its members) and a route per recipient, per team, and a default:

    inbox_url = "https://interlock.example.com"   # links in messages point here
    max_attempts = 8                              # then a delivery becomes a dead letter
    lease = "90s"                                 # a node that dies holds what it claimed this long

    [channels.ops-hook]
    type = "webhook"                # a built-in type, an entry point's name, or "module:factory"
    url = "https://hooks.example.com/interlock"
    secret = "..."

    [teams.ops]
    members = ["alice", "bob"]
    channels = ["ops-hook"]         # optional: without it, each member's own route is used

    [recipients.alice]
    channels = ["mail"]
    addresses = { mail = "alice@example.com" }
    quiet_hours = { start = "22:00", end = "07:00", timezone = "Europe/Paris" }
    remind_before = "10m"           # a reminder this long before the request expires
    escalate_after = "30m"          # if still pending after this long...
    escalate_to = "ops"             # ...tell this person or team too

    [default]
    channels = ["ops-hook"]

`Routing.plan` turns a notice into its deliveries. Pure: no I/O; `load_routing` reads a file.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .durations import duration_seconds
from .model import Request
from .outbox import Delivery, DeliveryKind, Notice, delivery_id
from .redact import redact_url

__all__ = [
    "ChannelConfig",
    "QuietHours",
    "Route",
    "Routing",
    "RoutingError",
    "load_routing",
    "parse_duration",
    "routing_from_dict",
]


class RoutingError(ValueError):
    """A routing document that cannot be used: the message names the field and the fault."""


def parse_duration(value: object, where: str) -> timedelta:
    """A duration: seconds as a number, or text as the command line takes it
    (`durations.duration_seconds`): `250ms`, `90s`, `10m`, `2h`, `1d`."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise RoutingError(f"{where}: a duration is a number of seconds or text like '10m', not {value!r}")
    if isinstance(value, str):
        try:
            seconds = duration_seconds(value)
        except ValueError as exc:
            raise RoutingError(f"{where}: {exc}") from None
    else:
        seconds = float(value)
    if not 0 < seconds < 366 * 86400:
        raise RoutingError(f"{where}: a duration must be positive and under a year")
    return timedelta(seconds=seconds)


def _clock(value: object, where: str) -> time:
    if not isinstance(value, str):
        raise RoutingError(f"{where}: a time of day is text like '22:00'")
    try:
        return time.fromisoformat(value)
    except ValueError:
        raise RoutingError(f"{where}: {value!r} is not a time of day like '22:00'") from None


@dataclass(frozen=True, slots=True)
class QuietHours:
    """A daily window (in a time zone) when nothing is sent; what falls due then waits for
    its end. `start` after `end` spans midnight (22:00-07:00)."""

    start: time
    end: time
    timezone: str = "UTC"

    def defer(self, when: datetime) -> datetime:
        """`when`, or the end of the quiet window it falls in."""
        zone = ZoneInfo(self.timezone)
        local = when.astimezone(zone)
        now = local.time()
        if self.start <= self.end:
            inside = self.start <= now < self.end
            end_day = local.date()
        else:
            inside = now >= self.start or now < self.end
            end_day = local.date() + timedelta(days=1) if now >= self.start else local.date()
        if not inside:
            return when
        return datetime.combine(end_day, self.end, zone).astimezone(when.tzinfo)


@dataclass(frozen=True, slots=True)
class Route:
    """How one recipient (a person or a team) is reached."""

    channels: tuple[str, ...] = ()
    addresses: Mapping[str, str] = field(default_factory=dict)
    quiet_hours: QuietHours | None = None
    remind_before: timedelta | None = None
    escalate_after: timedelta | None = None
    escalate_to: str | None = None

    def due(self, when: datetime) -> datetime:
        return when if self.quiet_hours is None else self.quiet_hours.defer(when)


@dataclass(frozen=True, slots=True)
class ChannelConfig:
    """A configured channel: its name in routes, its type (which plugin), its options."""

    name: str
    type: str
    options: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Routing:
    channels: Mapping[str, ChannelConfig] = field(default_factory=dict)
    recipients: Mapping[str, Route] = field(default_factory=dict)
    teams: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    team_routes: Mapping[str, Route] = field(default_factory=dict)
    default: Route | None = None
    inbox_url: str | None = None
    max_attempts: int = 8
    retry_first: float = 5.0
    retry_cap: float = 3600.0
    lease: float | None = None
    """Seconds a delivery loop holds the notices and deliveries it claimed before another
    may take them (what a node that died was sending waits this long); None: the loop's own."""
    source: Mapping[str, Any] = field(default_factory=dict)
    """The document it was read from (the API shows it with secrets masked)."""

    def route_of(self, name: str) -> Route | None:
        """The route of a person, or of a team that has its own."""
        return self.team_routes.get(name) or self.recipients.get(name) or (None if name in self.teams else self.default)

    def reach(self, name: str) -> list[tuple[str, Route]]:
        """Who to deliver to for `name`: a person, a team with its own route, or else each
        member of the team by their own route."""
        route = self.route_of(name)
        if route is not None:
            return [(name, route)]
        out = []
        for member in self.teams.get(name, ()):
            member_route = self.recipients.get(member) or self.default
            if member_route is not None:
                out.append((member, member_route))
        return out

    def plan(self, notice: Notice, request: Request, now: datetime) -> list[Delivery]:
        """The deliveries of a notice: to the request's recipient for its creation and its
        end, plus a reminder before it expires and an escalation if it is still pending
        after a while, each as that recipient's route says."""
        target = request.to
        if target is None:
            return []
        kind: DeliveryKind = "request" if notice.type == "created" else "settled"
        out: list[Delivery] = []

        def add(kind: DeliveryKind, name: str, route: Route, when: datetime) -> None:
            due = route.due(when)
            if kind in ("reminder", "escalation") and request.expires_at is not None and due >= request.expires_at:
                return  # it would arrive when nothing can be answered any more
            for channel in route.channels:
                address = route.addresses.get(channel)
                out.append(
                    Delivery(
                        delivery_id(notice.event_id, kind, name, channel, address),
                        notice.id,
                        request.id,
                        kind,
                        notice.type,
                        name,
                        channel,
                        address,
                        due,
                        now,
                    )
                )

        reached = self.reach(target)
        for name, route in reached:
            add(kind, name, route, now)
        if kind != "request":
            return out
        for name, route in reached:
            if route.remind_before is not None and request.expires_at is not None:
                add("reminder", name, route, max(now, request.expires_at - route.remind_before))
        own = self.route_of(target)
        if own is not None and own.escalate_after is not None and own.escalate_to is not None:
            when = max(now, request.created_at + own.escalate_after)
            for name, route in self.reach(own.escalate_to):
                add("escalation", name, route, when)
        return out


# -- reading a routing document ---------------------------------------------------------------

MIN_LEASE = 1.0
MAX_LEASE = 24 * 3600.0
"""The bounds of a routing's `lease`, in seconds: a send is given a third of it."""

_ROUTE_KEYS = {"channels", "addresses", "quiet_hours", "remind_before", "escalate_after", "escalate_to"}
_TOP_KEYS = {
    "inbox_url",
    "max_attempts",
    "retry_first",
    "retry_cap",
    "lease",
    "channels",
    "teams",
    "recipients",
    "default",
}


def _table(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise RoutingError(f"{where}: expected a table")
    return value


def _names(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise RoutingError(f"{where}: expected a list of names")
    return tuple(value)


def credentials_twice(url: object, headers: object) -> bool:
    """Whether `url` carries a user and password while `headers` has an Authorization
    header: the URL's credentials are sent as that header, in place of the one configured
    (a webhook refuses it, for its own `url` and for a route's address on it)."""
    if not isinstance(url, str) or not isinstance(headers, Mapping):
        return False
    try:
        userinfo = "@" in urlsplit(url).netloc
    except ValueError:
        return False
    return userinfo and any(isinstance(k, str) and k.lower() == "authorization" for k in headers)


def _route(doc: Mapping[str, Any], where: str, channels: Mapping[str, ChannelConfig]) -> Route:
    unknown = set(doc) - _ROUTE_KEYS - {"members"}
    if unknown:
        raise RoutingError(f"{where}: unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(_ROUTE_KEYS))})")
    names = _names(doc.get("channels", []), f"{where}.channels")
    for name in names:
        if name not in channels:
            raise RoutingError(f"{where}.channels: no channel named {name!r} (configured: {sorted(channels)})")
    addresses = dict(_table(doc.get("addresses", {}), f"{where}.addresses"))
    for key, value in addresses.items():
        if not isinstance(value, str):
            raise RoutingError(f"{where}.addresses.{key}: an address is text")
        if key not in names:  # (a mistyped channel's address: each message on that channel found none)
            raise RoutingError(f"{where}.addresses.{key}: no channel {key!r} in this route's channels ({list(names)})")
        if channels[key].type == "webhook" and credentials_twice(value, channels[key].options.get("headers")):
            raise RoutingError(
                f"{where}.addresses.{key}: a URL with a user and password, on a webhook whose headers have an "
                "Authorization header (the URL's would be sent in its place): give one"
            )
    quiet = None
    if "quiet_hours" in doc:
        q = _table(doc["quiet_hours"], f"{where}.quiet_hours")
        zone = q.get("timezone", "UTC")
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError, TypeError):
            raise RoutingError(f"{where}.quiet_hours.timezone: unknown time zone {zone!r}") from None
        quiet = QuietHours(
            _clock(q.get("start"), f"{where}.quiet_hours.start"), _clock(q.get("end"), f"{where}.quiet_hours.end"), zone
        )
    remind = parse_duration(doc["remind_before"], f"{where}.remind_before") if "remind_before" in doc else None
    after = parse_duration(doc["escalate_after"], f"{where}.escalate_after") if "escalate_after" in doc else None
    escalate_to = doc.get("escalate_to")
    if escalate_to is not None and not isinstance(escalate_to, str):
        raise RoutingError(f"{where}.escalate_to: a person's or a team's name")
    if (after is None) != (escalate_to is None):
        raise RoutingError(f"{where}: escalate_after and escalate_to go together")
    return Route(names, addresses, quiet, remind, after, escalate_to)


def routing_from_dict(doc: Mapping[str, Any]) -> Routing:
    """A routing from its document (a parsed TOML file, or JSON from the API); raises
    `RoutingError` naming the first fault."""
    doc = _table(doc, "routing")
    unknown = set(doc) - _TOP_KEYS
    if unknown:
        raise RoutingError(f"unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(_TOP_KEYS))})")
    channels: dict[str, ChannelConfig] = {}
    for name, options in _table(doc.get("channels", {}), "channels").items():
        options = _table(options, f"channels.{name}")
        kind = options.get("type")
        if not isinstance(kind, str) or not kind:
            raise RoutingError(f"channels.{name}.type: name the channel's type (webhook, email, slack or a plugin)")
        channels[name] = ChannelConfig(name, kind, {k: v for k, v in options.items() if k != "type"})
    teams: dict[str, tuple[str, ...]] = {}
    team_routes: dict[str, Route] = {}
    for name, team in _table(doc.get("teams", {}), "teams").items():
        team = _table(team, f"teams.{name}")
        teams[name] = _names(team.get("members", []), f"teams.{name}.members")
        if "channels" in team:
            team_routes[name] = _route(team, f"teams.{name}", channels)
        elif set(team) - {"members"}:  # what a route of its own takes, or a typo: either way nothing it does
            other = sorted(set(team) - {"members"})[0]
            known = "members" if other not in _ROUTE_KEYS else f"{other} with channels, the team's own route"
            raise RoutingError(f"teams.{name}: {other!r} is not taken here (a team takes {known})")
    recipients = {
        name: _route(_table(route, f"recipients.{name}"), f"recipients.{name}", channels)
        for name, route in _table(doc.get("recipients", {}), "recipients").items()
    }
    default = _route(_table(doc["default"], "default"), "default", channels) if "default" in doc else None
    for where, route in [
        *(("recipients." + n, r) for n, r in recipients.items()),
        *(("teams." + n, r) for n, r in team_routes.items()),
    ]:
        target = route.escalate_to
        if target is not None and target not in recipients and target not in teams and default is None:
            raise RoutingError(f"{where}.escalate_to: {target!r} is no recipient or team here, and there is no default")
    inbox_url = doc.get("inbox_url")
    if inbox_url is not None and (not isinstance(inbox_url, str) or not inbox_url.startswith(("http://", "https://"))):
        raise RoutingError("inbox_url: an http:// or https:// URL")
    max_attempts = doc.get("max_attempts", 8)
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or not 1 <= max_attempts <= 100:
        raise RoutingError("max_attempts: a whole number from 1 to 100")
    first = parse_duration(doc.get("retry_first", 5), "retry_first").total_seconds()
    cap = parse_duration(doc.get("retry_cap", 3600), "retry_cap").total_seconds()
    if cap < first:
        raise RoutingError("retry_cap: must not be shorter than retry_first")
    lease = parse_duration(doc["lease"], "lease").total_seconds() if "lease" in doc else None
    if lease is not None and not MIN_LEASE <= lease <= MAX_LEASE:
        raise RoutingError(f"lease: from {MIN_LEASE:g}s to {MAX_LEASE / 3600:g}h")
    return Routing(
        channels,
        recipients,
        teams,
        team_routes,
        default,
        inbox_url.rstrip("/") if inbox_url else None,
        max_attempts,
        first,
        cap,
        lease,
        dict(doc),
    )


def load_routing(path: str | Path) -> Routing:
    """The routing in a TOML file (or a JSON one, see `read_routing_document`); a fault is
    raised naming the file before the field (`routing.toml: recipients.alice.channels: ...`)."""
    document = read_routing_document(path)
    try:
        _no_masks(document)
        return routing_from_dict(document)
    except RoutingError as exc:
        raise RoutingError(f"{path}: {exc}") from None


def _no_masks(doc: Mapping[str, Any]) -> None:
    """`RoutingError` for a secret given as `***` in a routing file (one `routing show`
    wrote, say): only `routing set` puts back the secret a `***` stands for, and a file
    is used as it is, so the `***` itself would replace the secret in use."""
    channels = doc.get("channels")
    for name, options in (channels if isinstance(channels, Mapping) else {}).items():
        if not isinstance(options, Mapping):
            continue
        found = [f"channels.{name}.{key}" for key in SECRET_OPTIONS if options.get(key) == MASK]
        for table in SECRET_TABLES:
            values = options.get(table)
            if isinstance(values, Mapping):
                found += [f"channels.{name}.{table}.{key}" for key, value in values.items() if value == MASK]
        url = options.get("url")
        if isinstance(url, str) and MASK in url and redact_url(url.replace(MASK, "x")) != url.replace(MASK, "x"):
            found.append(f"channels.{name}.url")  # `***` where a URL shows its password
        if found:
            raise RoutingError(
                f"{found[0]}: {MASK!r} is how a secret is shown, and a routing file is used as it is: give the "
                "secret itself, or put the routing in the store with `interlock routing set FILE`, which keeps "
                "the secret a *** stands for"
            )


def read_routing_document(path: str | Path) -> dict[str, Any]:
    """The document of a routing file: TOML, or JSON when its name ends in `.json` (as
    `interlock routing show` and `GET /api/v1/routing` give it), not checked yet."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise RoutingError(f"cannot read the routing file {str(path)!r}: {exc.strerror}") from None
    if str(path).endswith(".json"):
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise RoutingError(f"the routing file {str(path)!r} is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise RoutingError(f"the routing file {str(path)!r} holds no JSON object")
        return doc
    try:
        return tomllib.loads(raw.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RoutingError(f"the routing file {str(path)!r} is not valid TOML: {exc}") from None


SECRET_OPTIONS = ("secret", "password", "token", "signing_secret")
"""The channel options `masked` hides."""

MASK = "***"


SECRET_TABLES = ("headers",)
"""The channel options whose every value `masked` hides: a webhook's `headers` (an
`Authorization` header carries a credential)."""


def masked(doc: Mapping[str, Any], secrets: Sequence[str] = SECRET_OPTIONS) -> dict[str, Any]:
    """A routing document with the channels' secrets replaced by `***` (`MASK`): the
    options `secrets` names, each value of a table `SECRET_TABLES` names, and the password
    and secret query parameters of a URL (a channel's `url`, a route's address:
    `https://hooks:***@example.com/in`)."""
    out = dict(doc)
    channels = {}
    for name, options in dict(doc.get("channels", {})).items():
        shown = {k: (MASK if k in secrets and v else v) for k, v in dict(options).items()}
        for table in SECRET_TABLES:
            values = shown.get(table)
            if isinstance(values, Mapping):
                shown[table] = {k: (MASK if v else v) for k, v in values.items()}
        if isinstance(shown.get("url"), str):
            shown["url"] = redact_url(shown["url"])
        channels[name] = shown
    if channels:
        out["channels"] = channels
    for where, route in _routes(doc):
        addresses = route.get("addresses")
        if isinstance(addresses, Mapping):
            shown_route = {**route, "addresses": {k: _url_shown(v) for k, v in addresses.items()}}
            _put_route(out, where, shown_route)
    return out


def _url_shown(value: object) -> object:
    return redact_url(value) if isinstance(value, str) and "://" in value else value


def _routes(doc: Mapping[str, Any]) -> list[tuple[tuple[str, ...], Mapping[str, Any]]]:
    """Each route of a routing document (a recipient's, a team's, the default), with where
    it sits: ("recipients", "alice"), ("teams", "ops"), ("default",)."""
    found: list[tuple[tuple[str, ...], Mapping[str, Any]]] = []
    for table in ("recipients", "teams"):
        routes = doc.get(table)
        for name, route in (routes if isinstance(routes, Mapping) else {}).items():
            if isinstance(route, Mapping):
                found.append(((table, name), route))
    default = doc.get("default")
    if isinstance(default, Mapping):
        found.append((("default",), default))
    return found


def _put_route(doc: dict[str, Any], where: tuple[str, ...], route: Mapping[str, Any]) -> None:
    if where == ("default",):
        doc["default"] = route
    else:
        doc[where[0]] = {**doc[where[0]], where[1]: route}


_DESTINATIONS = {"webhook": ("url",), "email": ("host", "port"), "slack": ("api_url",)}
"""The options of each built-in channel type that say where its secrets are sent: a
webhook's headers go to its `url` (or a route's address on it), an email password to its
SMTP `host`, a Slack token to its `api_url`."""


_DEFAULT_DESTINATIONS: dict[str, dict[str, Any]] = {
    "email": {"host": "localhost"},
    "slack": {"api_url": "https://slack.com/api"},
}
"""Where a built-in channel sends its secrets when the option is left out: an email
channel without `host` sends its password to localhost, so taking the host away moves it."""


def _sent_to(doc: Mapping[str, Any], name: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Where channel `name`'s secrets are sent, by what says so: its destination options
    (every option but the secrets, for a type of its own) and, but for email and Slack,
    whose secrets go to their server whoever a message is for, each route's address on it."""
    kind = options.get("type")
    keys = _DESTINATIONS.get(kind) if isinstance(kind, str) else None
    if keys is None:
        keys = tuple(k for k in options if k not in SECRET_OPTIONS and k not in SECRET_TABLES and k != "type")
    defaults = _DEFAULT_DESTINATIONS.get(kind, {}) if isinstance(kind, str) else {}
    sent: dict[str, Any] = {f"channels.{name}.{key}": options.get(key, defaults.get(key)) for key in keys}
    if kind not in ("email", "slack"):
        for where, route in _routes(doc):
            addresses = route.get("addresses")
            if isinstance(addresses, Mapping) and name in addresses:
                sent[".".join((*where, "addresses", name))] = addresses[name]
    return sent


def unmasked(doc: Mapping[str, Any], current: Mapping[str, Any] | None) -> dict[str, Any]:
    """`doc` with each secret given as `MASK` (a routing read back as `masked` shows it)
    put back from `current`, the routing in use: the same channel's (same name and type)
    same secret, and a URL shown with its password masked, the URL in use. A mask with no
    such secret behind it is refused (`RoutingError`): it would otherwise be kept as the
    secret itself, one anyone can sign with. So is a mask on a channel that would now send
    its secrets elsewhere (another `url`, SMTP host or Slack `api_url`, or a route's address
    on a webhook changed), or an email channel that would send its password without the TLS
    it uses now: whoever may change the routing but was never shown a secret cannot have it
    sent to a server of their choosing, nor in the clear; they give the secret itself."""
    current = current if current is not None else {}
    before = current.get("channels")
    before = before if isinstance(before, Mapping) else {}
    out = dict(doc)
    for where, route in _routes(doc):
        addresses = route.get("addresses")
        if isinstance(addresses, Mapping) and any(isinstance(v, str) and MASK in v for v in addresses.values()):
            had = _route_at(current, where).get("addresses")
            had = had if isinstance(had, Mapping) else {}
            kept = {k: _url_kept(v, had.get(k), ".".join((*where, "addresses", k))) for k, v in addresses.items()}
            _put_route(out, where, {**route, "addresses": kept})
    channels = doc.get("channels")
    if not isinstance(channels, Mapping):
        return out
    restored: dict[str, Any] = {}
    for name, options in channels.items():
        if isinstance(options, Mapping):
            old = before.get(name)
            old = old if isinstance(old, Mapping) and old.get("type") == options.get("type") else {}
            options = dict(options)
            if isinstance(options.get("url"), str) and MASK in options["url"]:
                options["url"] = _url_kept(options["url"], old.get("url"), f"channels.{name}.url")
            masks = [f"channels.{name}.{key}" for key in SECRET_OPTIONS if options.get(key) == MASK]
            for table in SECRET_TABLES:
                given = options.get(table)
                if isinstance(given, Mapping):
                    masks += [f"channels.{name}.{table}.{k}" for k, v in given.items() if v == MASK]
            if masks and old:
                _same_destination(masks[0], _sent_to(out, name, options), _sent_to(current, name, old))
                _as_guarded(masks[0], name, options, old)
            for key in SECRET_OPTIONS:
                if options.get(key) == MASK:
                    options[key] = _kept(old.get(key), f"channels.{name}.{key}", options.get("type"), name)
            for table in SECRET_TABLES:
                given, had = options.get(table), old.get(table)
                if isinstance(given, Mapping) and MASK in given.values():
                    had = had if isinstance(had, Mapping) else {}
                    options[table] = {
                        k: _kept(had.get(k), f"channels.{name}.{table}.{k}", options.get("type"), name)
                        if v == MASK
                        else v
                        for k, v in given.items()
                    }
        restored[name] = options
    return {**out, "channels": restored}


def _route_at(doc: Mapping[str, Any], where: tuple[str, ...]) -> Mapping[str, Any]:
    found: Any = doc
    for key in where:
        found = found.get(key) if isinstance(found, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _url_kept(given: object, had: object, where: str) -> object:
    """The URL in use that `given` shows masked (`masked`), or `given` when it masks nothing;
    `RoutingError` for a masked URL that shows no URL in use."""
    if not isinstance(given, str) or MASK not in given:
        return given
    if isinstance(had, str) and redact_url(had) == given:
        return had
    raise RoutingError(
        f"{where}: {MASK!r} is how a URL's password is shown, and it is kept only with the rest of the URL "
        "as it is in use: give the URL with its password"
    )


def _same_destination(mask: str, now: Mapping[str, Any], before: Mapping[str, Any]) -> None:
    """`RoutingError` when the channel would send its secrets somewhere it does not now: a
    destination taken away is no such place, nor one moved to another that was one already."""
    was = [value for value in before.values() if value is not None]
    for where, value in sorted(now.items()):
        if value is not None and before.get(where) != value and value not in was:
            raise RoutingError(
                f"{mask}: {MASK!r} keeps the secret in use only while the channel sends it where it does now, "
                f"and {where} changed: give the secret itself"
            )


def _as_guarded(mask: str, name: str, options: Mapping[str, Any], before: Mapping[str, Any]) -> None:
    """`RoutingError` when an email channel that sends its password over TLS (`tls` or
    `starttls`) would now send it in the clear to the same server, kept by a `***`: anyone
    on the way could read it, so whoever turns TLS off gives the password itself."""
    if options.get("type") == "email" and _over_tls(before) and not _over_tls(options):
        raise RoutingError(
            f"{mask}: {MASK!r} keeps the secret in use only while the channel sends it as safely as it does now, "
            f"and channels.{name} would send it without TLS (tls and starttls off): give the secret itself"
        )


def _over_tls(options: Mapping[str, Any]) -> bool:
    return options.get("tls") is True or options.get("starttls") is True


def _kept(secret: object, where: str, kind: object, channel: str) -> str:
    """The secret in use that a `***` at `where` keeps; `RoutingError` when there is none."""
    if not isinstance(secret, str) or not secret or secret == MASK:
        raise RoutingError(
            f"{where}: {MASK!r} is how a secret is shown, and the routing in use has no such secret for a "
            f"{kind} channel named {channel!r} to keep: give the secret itself"
        )
    return secret
