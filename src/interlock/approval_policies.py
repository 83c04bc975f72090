"""Declarative approval policies stored server-side, and what one says about a tool call.

An `ApprovalPolicy` belongs to an agent, and optionally to one tool server (a connection
the agent's tools come from); the policy for an agent's whole toolset has the server "".
Its fields, with the wire names Novo uses:

- `approval` (`once` | `always` | `never`): how gated calls are decided; `never` lets
  every call run without a person and without the hook;
- `gatedTools`: the tools (names or globs) the policy gates; a tool it omits runs at once,
  without consulting the hook; absent, every tool is gated;
- `autoAllow`: tools (names or globs) that never need approval and skip the hook;
- `hook`: a tool-approval hook registered by URL (`url`, `secret`, `onHookError`:
  `deny` | `pause` | `fail-run`, `timeout` in seconds) that answers `allow`, `deny` or
  `pause` for each gated call.

`ApprovalPolicy.decide(tool)` is pure: it says whether the call runs (`allow`), asks a
person (`ask`, with the mode), asks the hook first (`hook`), or whether the policy has
nothing to say (`none`). The approval gate combines that with its own Python policy, the
stricter winning, and calls the hook through the caller it was given (the I/O lives on
the agent side). `policy_from_dict` validates what a surface received; a bad policy is
refused with `InvalidRequest` naming the field.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal, TypeAlias
from urllib.parse import urlsplit

from .errors import InvalidRequest
from .model import check_text

__all__ = [
    "APPROVAL_MODES",
    "DEFAULT_POLICY_HOOK_TIMEOUT",
    "HOOK_ERROR_MODES",
    "MAX_POLICY_HOOK_TIMEOUT",
    "ApprovalMode",
    "ApprovalPolicy",
    "HookVerdict",
    "PolicyDecision",
    "PolicyHook",
    "hook_call_body",
    "hook_verdict_from_dict",
    "policy_body",
    "policy_event_data",
    "policy_from_body",
    "policy_from_dict",
    "policy_from_wire",
    "policy_to_dict",
    "tool_matches",
    "with_version",
]

ApprovalMode: TypeAlias = Literal["once", "always", "never"]
APPROVAL_MODES: tuple[str, ...] = ("once", "always", "never")
HookErrorMode: TypeAlias = Literal["deny", "pause", "fail-run"]
HOOK_ERROR_MODES: tuple[str, ...] = ("deny", "pause", "fail-run")
DEFAULT_POLICY_HOOK_TIMEOUT = 10.0
MAX_POLICY_HOOK_TIMEOUT = 60.0
"""A hook answers within this many seconds at most, whatever its registration says."""
_MAX_PATTERNS = 500
_MAX_URL_LENGTH = 2048
_MAX_SECRET_LENGTH = 512


@dataclass(frozen=True, slots=True)
class PolicyHook:
    """A tool-approval hook registered by URL. interlock POSTs each gated call to `url`,
    signed with `secret` (`interlock.webhooks`), and waits at most `timeout` seconds."""

    url: str
    secret: str
    on_hook_error: HookErrorMode = "deny"
    timeout: float = DEFAULT_POLICY_HOOK_TIMEOUT


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """What a stored policy says about one tool: `allow` (runs without a person),
    `ask` (a person decides, under `mode`), `hook` (ask the hook; on `pause` a person
    decides under `mode`) or `none` (the policy does not speak about it). `reason` says
    why, in words a person reads in the audit."""

    outcome: Literal["allow", "ask", "hook", "none"]
    mode: Literal["once", "always"] | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class HookVerdict:
    """A URL hook's answer: `allow`, `deny` or `pause`, with its reason."""

    decision: Literal["allow", "deny", "pause"]
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    """An agent's declarative approval policy (for one tool server, or all of them: "")."""

    agent: str
    server: str = ""
    approval: ApprovalMode | None = None
    gated_tools: tuple[str, ...] | None = None
    auto_allow: tuple[str, ...] = ()
    hook: PolicyHook | None = None
    version: int = 0
    """1 for the first version stored, one more for each replacement."""
    updated_at: datetime | None = None
    updated_by: str | None = None

    def decide(self, tool: str) -> PolicyDecision:
        """What this policy says about a call of `tool` (see the module's docstring)."""
        if _matches(tool, self.auto_allow):
            return PolicyDecision("allow", reason=f"autoAllow lists {tool!r}")
        if self.approval == "never":
            return PolicyDecision("allow", reason="approval is 'never'")
        if self.gated_tools is not None and not _matches(tool, self.gated_tools):
            return PolicyDecision("allow", reason=f"gatedTools omits {tool!r}")
        mode: Literal["once", "always"] = "once" if self.approval == "once" else "always"
        if self.hook is not None:
            return PolicyDecision("hook", mode, reason="the approval hook decides")
        if self.approval is not None or self.gated_tools is not None:
            return PolicyDecision("ask", mode, reason=f"approval is {mode!r}")
        return PolicyDecision("none")

    def describe(self) -> str:
        """How the audit names this policy: its agent, server and version."""
        where = f" (server {self.server!r})" if self.server else ""
        return f"the stored approval policy of {self.agent!r}{where}, version {self.version}"


def tool_matches(tool: str, pattern: str) -> bool:
    """Whether tool `tool` is named by `pattern`: the same name, else a match of it as a
    glob (`fnmatch`, case-sensitive). The name comes first, so a tool whose name holds glob
    characters (`files[read]`) is named by itself. Every list of tools matches this way:
    a stored policy's, and the gate's policies and auto-allow list."""
    return tool == pattern or fnmatch.fnmatchcase(tool, pattern)


def _matches(tool: str, patterns: Sequence[str]) -> bool:
    return any(tool_matches(tool, p) for p in patterns)


# -- the wire shape -------------------------------------------------------------------------


def policy_to_dict(policy: ApprovalPolicy, *, secrets: bool = False) -> dict[str, Any]:
    """The policy as JSON, with Novo's field names. The hook's secret is left out unless
    `secrets` (a store keeps it; no surface shows it): `hasSecret` says it is set."""
    hook: dict[str, Any] | None = None
    if policy.hook is not None:
        hook = {
            "url": policy.hook.url,
            "onHookError": policy.hook.on_hook_error,
            "timeout": policy.hook.timeout,
            "hasSecret": bool(policy.hook.secret),
        }
        if secrets:
            hook["secret"] = policy.hook.secret
    return {
        "agent": policy.agent,
        "server": policy.server or None,
        "approval": policy.approval,
        "gatedTools": list(policy.gated_tools) if policy.gated_tools is not None else None,
        "autoAllow": list(policy.auto_allow),
        "hook": hook,
        "version": policy.version,
        "updatedAt": policy.updated_at.isoformat() if policy.updated_at is not None else None,
        "updatedBy": policy.updated_by,
    }


_FIELDS = {"agent", "server", "approval", "gatedTools", "autoAllow", "hook", "version", "updatedAt", "updatedBy"}
_HOOK_FIELDS = {"url", "secret", "onHookError", "timeout", "hasSecret"}


def policy_from_dict(
    data: Mapping[str, Any],
    *,
    agent: str | None = None,
    server: str | None = None,
    allow_http: bool = False,
    max_name_length: int = 256,
) -> ApprovalPolicy:
    """Validate a policy received as JSON (Novo's field names) and return it.

    `agent` and `server`, when given (a route's path), fill in or must equal the body's.
    A hook URL must be https, or http to a loopback address unless `allow_http`.
    Raises `InvalidRequest` naming the field; nothing is stored by a refusal.
    """
    if not isinstance(data, Mapping):
        raise InvalidRequest("an approval policy is a JSON object")
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise InvalidRequest(f"{unknown[0]}: unknown field; the fields are {', '.join(sorted(_FIELDS))}")
    name = _name(data.get("agent"), "agent", agent, max_name_length)
    if name is None:
        raise InvalidRequest("agent: name the agent the policy is for")
    where = _name(data.get("server"), "server", server, max_name_length) or ""
    approval = data.get("approval")
    if approval is not None and approval not in APPROVAL_MODES:
        raise InvalidRequest(f"approval: must be one of once, always, never; not {approval!r}")
    gated = data.get("gatedTools")
    gated_tools = None if gated is None else _patterns(gated, "gatedTools", max_name_length)
    auto_allow = _patterns(data.get("autoAllow") or [], "autoAllow", max_name_length)
    hook = _hook(data.get("hook"), allow_http) if data.get("hook") is not None else None
    return ApprovalPolicy(
        agent=name,
        server=where,
        approval=approval,
        gated_tools=gated_tools,
        auto_allow=auto_allow,
        hook=hook,
    )


def _name(value: Any, field: str, given: str | None, max_length: int) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InvalidRequest(f"{field}: must be a string")
    if given is not None and value not in (None, given):
        raise InvalidRequest(f"{field}: the body says {value!r} but the path says {given!r}")
    found = given if given is not None else value
    check_text(found, field, max_length)
    return found or None


def _patterns(value: Any, field: str, max_length: int) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise InvalidRequest(f"{field}: must be a list of tool names (or globs), not {type(value).__name__}")
    if len(value) > _MAX_PATTERNS:
        raise InvalidRequest(f"{field}: {len(value)} names, at most {_MAX_PATTERNS} allowed")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise InvalidRequest(f"{field}[{i}]: must be a non-empty tool name (or glob)")
        check_text(item, f"{field}[{i}]", max_length)
    return tuple(dict.fromkeys(value))


def _hook(value: Any, allow_http: bool) -> PolicyHook:
    if not isinstance(value, Mapping):
        raise InvalidRequest("hook: must be an object with url and secret")
    unknown = sorted(set(value) - _HOOK_FIELDS)
    if unknown:
        raise InvalidRequest(f"hook.{unknown[0]}: unknown field; the fields are url, secret, onHookError, timeout")
    url = value.get("url")
    if not isinstance(url, str) or not url:
        raise InvalidRequest("hook.url: the URL interlock posts each gated call to")
    check_text(url, "hook.url", _MAX_URL_LENGTH)
    _check_url(url, allow_http)
    secret = value.get("secret")
    if not isinstance(secret, str) or len(secret) < 16:
        raise InvalidRequest("hook.secret: a shared secret of at least 16 characters signs each call")
    check_text(secret, "hook.secret", _MAX_SECRET_LENGTH)
    on_error = value.get("onHookError", "deny")
    if on_error not in HOOK_ERROR_MODES:
        raise InvalidRequest(f"hook.onHookError: must be one of deny, pause, fail-run; not {on_error!r}")
    timeout = value.get("timeout", DEFAULT_POLICY_HOOK_TIMEOUT)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or not 0 < timeout <= MAX_POLICY_HOOK_TIMEOUT
    ):
        raise InvalidRequest(f"hook.timeout: seconds, more than 0 and at most {MAX_POLICY_HOOK_TIMEOUT:g}")
    return PolicyHook(url=url, secret=secret, on_hook_error=on_error, timeout=float(timeout))


def _check_url(url: str, allow_http: bool) -> None:
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as exc:
        raise InvalidRequest(f"hook.url: not a URL ({exc})") from None
    if parts.scheme not in ("https", "http") or not host:
        raise InvalidRequest("hook.url: must be an absolute https:// URL")
    if parts.username is not None or parts.password is not None:
        raise InvalidRequest("hook.url: must not carry credentials; the secret signs each call")
    if parts.scheme == "http" and not allow_http and not _loopback(host):
        raise InvalidRequest("hook.url: must be https:// (http:// only to a loopback address on this server)")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def with_version(policy: ApprovalPolicy, version: int, at: datetime, by: str | None) -> ApprovalPolicy:
    """`policy` as stored: its version, when and by whom."""
    return replace(policy, version=version, updated_at=at, updated_by=by)


# -- what a hook is sent and what it answers -------------------------------------------------


def hook_call_body(
    *,
    tool: str,
    arguments: Mapping[str, Any],
    digest: str,
    call_id: str,
    call_key: str,
    agent: str | None,
    server: str,
    session: str | None,
    run: str | None,
    to: str | None,
    policy_version: int,
) -> dict[str, Any]:
    """The JSON body interlock POSTs to a tool-approval hook for one call. `call_key` names
    the call (`interlock.agent.gate.hook_call_key`): its answer must echo it."""
    return {
        "type": "tool_approval",
        "toolName": tool,
        "input": dict(arguments),
        "digest": digest,
        "toolCallId": call_id,
        "callKey": call_key,
        "agent": agent,
        "server": server or None,
        "session": session,
        "run": run,
        "to": to,
        "policyVersion": policy_version,
    }


def hook_verdict_from_dict(data: Any, call_key: str) -> HookVerdict:
    """A hook's answer to the call named `call_key` (`{"decision": "allow" | "deny" |
    "pause", "callKey": call_key, "reason"?: str}`); `ValueError` saying what is wrong
    otherwise. An answer that does not echo the call's `callKey` is refused: it may have
    been written for another call (a signed `allow` captured and replayed)."""
    if not isinstance(data, Mapping):
        raise ValueError("the hook's answer is not a JSON object")
    named = data.get("callKey")
    if named is None:
        raise ValueError("it names no call (an answer must echo the callKey it was sent)")
    if named != call_key:
        raise ValueError("it names another call (a callKey other than the one it was sent)")
    decision = data.get("decision")
    if decision not in ("allow", "deny", "pause"):
        raise ValueError(f"the hook's decision must be allow, deny or pause; not {decision!r}")
    reason = data.get("reason", "")
    if reason is None:
        reason = ""
    if not isinstance(reason, str):
        raise ValueError("the hook's reason must be a string")
    return HookVerdict(decision, reason[:20_000])


# -- how a store keeps a policy ---------------------------------------------------------------


def policy_body(policy: ApprovalPolicy) -> dict[str, Any]:
    """What a store keeps of a policy beside its key and version: its rules and its hook
    (the secret included: the caller signs with it)."""
    body = policy_to_dict(policy, secrets=True)
    for key in ("agent", "server", "version", "updatedAt", "updatedBy"):
        body.pop(key)
    if body["hook"] is not None:
        body["hook"].pop("hasSecret")
    return body


def policy_from_body(
    agent: str, server: str, body: Mapping[str, Any], version: int, at: datetime | None, by: str | None
) -> ApprovalPolicy:
    """A stored policy from its key, `policy_body` and version (validated when it was set)."""
    hook = body.get("hook")
    gated = body.get("gatedTools")
    return ApprovalPolicy(
        agent=agent,
        server=server,
        approval=body.get("approval"),
        gated_tools=None if gated is None else tuple(gated),
        auto_allow=tuple(body.get("autoAllow") or ()),
        hook=None
        if hook is None
        else PolicyHook(hook["url"], hook["secret"], hook.get("onHookError", "deny"), float(hook["timeout"])),
        version=version,
        updated_at=at,
        updated_by=by,
    )


def policy_from_wire(data: Mapping[str, Any]) -> ApprovalPolicy:
    """A policy as a server sent it (`policy_to_dict`), its secret "" when not shown."""
    hook = data.get("hook")
    if isinstance(hook, Mapping):
        hook = {**hook, "secret": hook.get("secret") or ""}
    at = data.get("updatedAt")
    return policy_from_body(
        str(data["agent"]),
        str(data.get("server") or ""),
        {**data, "hook": hook},
        int(data.get("version") or 0),
        None if at is None else datetime.fromisoformat(at),
        data.get("updatedBy"),
    )


def policy_event_data(policy: ApprovalPolicy, by: str | None) -> dict[str, Any]:
    """The data of a policy's `approval_policy_set` / `approval_policy_deleted` event: shown
    to the agent (`to`) and to who changed it (`by`); no secret."""
    return {
        "agent": policy.agent,
        "server": policy.server or None,
        "version": policy.version,
        "by": by,
        "to": policy.agent,
    }
