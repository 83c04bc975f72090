"""The approval gate: whether a person must approve a tool call before it runs, and asking them.

`ApprovalGate` decides per call: policies per tool name or glob (`always`, `once` per
session, `never`), an auto-allow list, a per-call hook (allow / deny / pause), and the
agent's approval policy stored server-side, with its hook by URL (the stricter wins). An approval
is bound to the digest of the exact arguments reviewed and is consumed once; anything
ambiguous fails closed. `requires_approval` puts the gate in front of a plain async
function. What marks a request as the gate's own lives in the core (`interlock.approvals`).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import replace
from typing import Any, Literal, ParamSpec, TypeAlias, TypeVar, cast

from ..approval_policies import ApprovalPolicy, HookVerdict, hook_call_body, tool_matches
from ..approvals import is_marked, mark
from ..broker import Broker
from ..errors import ApprovalDenied, ApprovalRefused, InvalidRequest, Rejected, RunFailed
from ..hooks import Hook, Hooks
from ..model import Ask, Confirm, Deny, Form, Request, Response, Status, derived_key, show_hidden
from ._results import about_call, seconds
from ._schemas import make_validator, schema_problem
from ._settle import settle
from .calls import ToolCall, arguments_digest, canonical_json, current_call
from .contracts import BrokerContract, Contracts, ContractSpec
from .hooks import Allow, ApprovalHook, Pause
from .url_hooks import UrlHook, call_url_hook

__all__ = [
    "DEFAULT_APPROVAL_TIMEOUT",
    "POLICIES",
    "ApprovalGate",
    "HookErrorMode",
    "Policy",
    "approval_key",
    "hook_call_key",
    "requires_approval",
]

log = logging.getLogger("interlock")

DEFAULT_APPROVAL_TIMEOUT = 3600.0

P = ParamSpec("P")
R = TypeVar("R")


Policy: TypeAlias = Literal["always", "once", "never"]
POLICIES: frozenset[str] = frozenset({"always", "once", "never"})
_STRICTNESS = {"never": 0, "once": 1, "always": 2}


HookErrorMode: TypeAlias = Literal["deny", "pause", "fail-run"]


class ApprovalGate:
    """Decides whether a person must approve a call before it runs, and asks them.

    In order: a name matching `auto_allow` runs at once; else a matching policy decides
    (`never` runs, `always` asks, `once` asks unless that tool was approved earlier in the
    session); else the `hook` returns `Allow()`, `Deny(reason)` or `Pause(reason)`;
    without a hook the call runs. Policies are keyed by tool name or glob: an exact name
    wins, then the glob with the most literal characters; globs equally specific that
    disagree take the strictest policy. A hook that raises, overruns `hook_timeout` or
    returns anything else is handled by `on_hook_error`: `deny` (the default: fail closed),
    `pause` (ask a person), or `fail-run` (raise `RunFailed`).

    The agent's stored approval policy (`interlock.approval_policies`, set by its owner
    through the broker, the API or `interlock policy`) applies too, read for each
    decision, before any hook (`stored_policies=False` reads none): the one for the
    call's tool server (`call.server`, else `server`), else the agent's own. Rules answer
    before hooks: where a rule of the gate and a stored rule both decide, the stricter
    wins (a call runs without a person only if both let it; the person decides under the
    strictest mode asked for); a stored rule that lets the call run (`never`,
    `autoAllow`, a `gatedTools` that omits the tool) answers before the gate's own hook,
    which is then not consulted; a denial by either hook refuses the call. The stored
    policy's hook by URL is called through `url_hook`
    (`interlock.agent.url_hooks.call_url_hook` by default) and its failures handled by
    its own `onHookError`; what it or the stored policy decides without a person is
    recorded as an update to the person the gate would have asked.

    An approval request (kind `approval`) carries the tool name and arguments in its
    origin, a rendered preview in its details, and in its context the digest of the
    canonical arguments. Its asks are a confirm (`approve`) and, when the tool's schema
    allows, an optional form (`arguments`) through which the approver edits the arguments;
    the broker checks the edit against the schema. A denial raises `ApprovalDenied` with
    the person's reason verbatim.

    The gate trusts only approvals it issued itself: marked as a gate's (a mark nothing
    else can set, `interlock.approvals`), made by its own principal (`call.agent`, or the
    token's principal over HTTP), addressed to the person it asks (`call.to` or `to`),
    answered by that person (the recorded `by`; a contract other than the inbox answers
    as its own `by`), for this tool and session, and for an exact call, this digest.

    An approval is consumed once, durably: the gate runs a call only after the store's
    conditional write (`Broker.consume`) said it was the first, in any process. A replayed
    call whose approval was used already is refused; an approval given while no process
    waited (the agent restarted) is taken by the first call that finds it; a retry with
    other arguments asks again.
    """

    def __init__(
        self,
        broker: Broker,
        *,
        policies: Mapping[str, Policy] | None = None,
        auto_allow: Iterable[str] = (),
        hook: ApprovalHook | None = None,
        hook_timeout: float = 10.0,
        on_hook_error: HookErrorMode = "deny",
        timeout: float | None = DEFAULT_APPROVAL_TIMEOUT,
        to: str | None = None,
        contracts: Contracts | ContractSpec | None = None,
        previews: Mapping[str, Callable[[ToolCall], str]] | None = None,
        server: str | None = None,
        stored_policies: bool = True,
        url_hook: UrlHook | None = None,
    ) -> None:
        self.policies = dict(policies or {})
        for pattern, policy in self.policies.items():
            if policy not in POLICIES:
                raise ValueError(f"policy for {pattern!r} must be one of always, once, never; not {policy!r}")
        if isinstance(auto_allow, str):
            raise TypeError("auto_allow is a collection of names, not one string")
        self.auto_allow = tuple(auto_allow)
        if on_hook_error not in ("deny", "pause", "fail-run"):
            raise ValueError("on_hook_error must be 'deny', 'pause' or 'fail-run'")
        if timeout is not None and not timeout > 0:
            raise ValueError("timeout must be a positive number of seconds, or None")
        self.broker = broker
        self.hook = hook
        self.hook_timeout = hook_timeout
        self._hooks: Hooks[ToolCall, Allow | Deny | Pause] = Hooks("approval hook", about_call)
        self._url_hooks: Hooks[ToolCall, HookVerdict] = Hooks("approval hook", about_call)  # runs a stored one
        if hook is not None:
            self._hooks.add(hook, timeout=hook_timeout)
        self.on_hook_error: HookErrorMode = on_hook_error
        self.timeout = timeout
        self.to = to
        self.contracts = Contracts.of(contracts)
        self.previews = dict(previews or {})
        self.server = server
        self.stored_policies = stored_policies
        self.url_hook: UrlHook = url_hook or call_url_hook
        self._once: set[tuple[str | None, ...]] = set()
        """What `once` approvals this gate saw (`_once_key`): a fast path, kept per asker and approver."""
        self._consumed: OrderedDict[str, None] = OrderedDict()
        self._occurrences: OrderedDict[tuple[str, str, str], int] = OrderedDict()

    def stable_call_id(self, call: ToolCall, outer: ToolCall | None) -> str:
        """The id `requires_approval` gives `call`, the same when a restarted agent makes
        it again: see `requires_approval`. `call.id` when there is nothing to anchor it."""
        if outer is not None:
            return f"{outer.id}/{call.name}"
        scope = call.run or call.session
        if scope is None:
            return call.id
        try:
            digest = arguments_digest(call.name, call.arguments)
        except (TypeError, ValueError):
            return call.id  # not JSON: `authorize` refuses it anyway
        key = (scope, call.name, digest)
        nth = self._occurrences.pop(key, 0) + 1
        self._occurrences[key] = nth
        while len(self._occurrences) > 65536:
            self._occurrences.popitem(last=False)
        return f"{call.name}:{digest[:16]}:{nth}"

    # -- deciding ---------------------------------------------------------------------------

    def auto_allowed(self, name: str) -> bool:
        """Whether tool `name` is on the auto-allow list (names, else globs: `tool_matches`): it never asks."""
        return any(tool_matches(name, pattern) for pattern in self.auto_allow)

    def policy_for(self, name: str) -> Policy | None:
        """The declared policy for tool `name`, or None when no name or glob matches
        (`tool_matches`): its own name's, else the most specific glob's, else the strictest."""
        if name in self.policies:
            return self.policies[name]
        matches = [(p, policy) for p, policy in self.policies.items() if tool_matches(name, p)]
        if not matches:
            return None
        specificity = max(_literal_chars(p) for p, _ in matches)
        best = [policy for p, policy in matches if _literal_chars(p) == specificity]
        return max(best, key=lambda policy: _STRICTNESS[policy])

    async def authorize(
        self, call: ToolCall, *, schema: Mapping[str, Any] | None = None, policy: Policy | None = None
    ) -> dict[str, Any]:
        """Decide on `call` and return the arguments to run it with (an approver may edit them).

        Raises `ApprovalDenied` (a person or the hook said no), `ApprovalRefused` (failed
        closed), `Expired` (nobody decided in time), `Cancelled` (the request was given
        up) or `RunFailed`. `policy` overrides the declared one for this call.
        """
        try:
            arguments = json.loads(canonical_json(dict(call.arguments)))
        except (TypeError, ValueError) as exc:
            raise ApprovalRefused(f"The arguments of '{call.name}' are not plain JSON", detail=str(exc)) from None
        decided, pause_reason, mode = await self._pre_decide(call, policy, arguments)
        if decided is not None:
            return decided
        return await self._ask(call, arguments, schema, mode, pause_reason)

    async def _pre_decide(
        self, call: ToolCall, policy: Policy | None, arguments: Any
    ) -> tuple[dict[str, Any] | None, str, Policy | None]:
        """What is decided without a person: the arguments when the call runs at once, else
        None, the reason to show the person and the policy they decide under. A hook's
        denial raises `ApprovalDenied`.

        The rules first, then the hooks, and only for what the rules leave open:

        1. The rules of both layers: the gate's own (`auto_allow`, the policy for the tool,
           or `policy`) and the agent's stored policy (`autoAllow`, `approval`,
           `gatedTools`). Where both decide, the stricter wins: a person is asked if
           either asks, under the strictest mode asked for (`always` over `once`).
        2. The gate's own hook, for a tool its own rules do not name, unless a stored rule
           lets the call run (a stored `never`, `autoAllow`, or a `gatedTools` that omits
           the tool): those answer before any hook.
        3. The stored policy's hook by URL, for a call its policy gates.

        A denial by either hook refuses the call; a pause by either asks a person. The
        call runs at once only if nothing asked (`once` runs at once if approved earlier
        in the session)."""
        own = policy or self.policy_for(call.name)
        own_allows = self.auto_allowed(call.name) or own == "never"
        stored = await self._stored_policy(call)
        decision = stored.decide(call.name) if stored is not None else None
        outcome = decision.outcome if decision is not None else "none"
        asks: list[tuple[Policy | None, str]] = []
        if own is not None and not own_allows:
            asks.append((own, ""))
        if decision is not None and outcome == "ask":
            asks.append((decision.mode, ""))
        if own is None and not own_allows and outcome != "allow" and self._hooks:
            verdict = await self._consult_hook(call)
            if isinstance(verdict, Deny):
                raise ApprovalDenied("", verdict.reason)
            if isinstance(verdict, Pause):
                asks.append((None, verdict.reason))
        if stored is not None and decision is not None and outcome == "hook":
            verdict_ = await self._consult_url_hook(call, stored, arguments)
            if verdict_.decision == "deny":
                await self._record(call, stored, "deny", f"the approval hook denied it: {verdict_.reason}")
                raise ApprovalDenied("", verdict_.reason)
            if verdict_.decision == "pause":
                asks.append((decision.mode, verdict_.reason))
            elif not asks:
                await self._record(call, stored, "allow", "the approval hook allowed it")
        elif stored is not None and decision is not None and outcome == "allow" and not asks:
            await self._record(call, stored, "allow", decision.reason)
        if not asks:
            return cast(dict[str, Any], arguments), "", None
        modes = {mode for mode, _ in asks}
        mode: Policy | None = (
            "once" if modes == {"once"} else ("always" if "always" in modes or "once" in modes else None)
        )
        if mode == "once" and await self._approved_in_session(call):
            return cast(dict[str, Any], arguments), "", None
        return None, "\n".join(reason for _, reason in asks if reason), mode

    async def _stored_policy(self, call: ToolCall) -> ApprovalPolicy | None:
        """The agent's stored approval policy for the call's tool server (else for its whole
        toolset), read for each decision so a change applies at once; None when the gate
        reads none (`stored_policies=False`) or the call has no agent."""
        if not self.stored_policies:
            return None
        agent = await self.broker.requester_of(call.agent)
        if agent is None:
            return None
        return await self.broker.approval_policy_for(agent, call.server or self.server or "")

    async def _consult_url_hook(self, call: ToolCall, stored: ApprovalPolicy, arguments: Any) -> HookVerdict:
        """The stored policy's hook's verdict on `call`; a hook that cannot decide is handled
        by its `onHookError` (deny: refused, pause: a person decides, fail-run: `RunFailed`)."""
        hook = stored.hook
        assert hook is not None  # a decision of "hook" comes only from a policy with one
        digest = arguments_digest(call.name, arguments)
        body = hook_call_body(
            tool=call.name,
            arguments=arguments,
            digest=digest,
            call_id=call.id,
            call_key=hook_call_key(stored.agent, call, digest),
            agent=stored.agent,
            server=stored.server,
            session=call.session,
            run=call.run,
            to=call.to or self.to,
            policy_version=stored.version,
        )
        # The policy's hook runs on the one hook runner, bounded by its own timeout (and a
        # second more, so that the HTTP call's own bound, inside, is the one that trips).
        runnable: Hook[ToolCall, HookVerdict] = Hook(
            lambda _: self.url_hook(hook, body), 0, hook.timeout + 1.0, f"of {stored.describe()}"
        )
        outcome = await self._url_hooks.call(runnable, call)
        verdict = outcome.verdict
        if outcome.timed_out or isinstance(outcome.error, TimeoutError):
            problem = f"the approval hook did not answer within {hook.timeout:g}s"
        elif outcome.error is not None:
            problem = str(outcome.error) or type(outcome.error).__name__
        elif isinstance(verdict, HookVerdict):
            return verdict
        else:
            problem = f"the hook caller returned {verdict!r}, not a HookVerdict"
            log.warning("approval hook %s failed on %s: %s", runnable.name, about_call(call), problem)
        if hook.on_hook_error == "pause":
            return HookVerdict("pause", f"The approval hook could not decide ({problem}).")
        await self._record(call, stored, hook.on_hook_error, f"the approval hook failed: {problem}")
        if hook.on_hook_error == "fail-run":
            raise RunFailed(f"tool '{call.name}': the approval hook failed: {problem}")
        raise ApprovalRefused(f"The call to '{call.name}' was refused: its approval hook failed", detail=problem)

    async def _record(self, call: ToolCall, stored: ApprovalPolicy, decision: str, reason: str) -> None:
        """Put a decision made without a person in the audit: an update (an `informed`
        event) to the person the gate would have asked, saying what decided and why."""
        verb = {"allow": "ran without asking", "deny": "was refused"}.get(decision, "was stopped")
        data = {
            "decision": decision,
            "tool": call.name,
            "tool_call_id": call.id,
            "reason": reason,
            "policy": {"agent": stored.agent, "server": stored.server or None, "version": stored.version},
        }
        try:
            await self.broker.inform(
                f"{call.name} {verb}: {reason} ({stored.describe()})",
                to=call.to or self.to,
                session=call.session,
                agent=call.agent,
                run=call.run,
                data=data,
            )
        except Exception:  # the audit must not decide the call; the log keeps it: what it would have said
            log.warning(
                "could not record in the audit that %s of run %s %s: %s (%s)",
                about_call(call),
                call.run,
                verb,
                reason,
                stored.describe(),
                exc_info=True,
            )

    async def _consult_hook(self, call: ToolCall) -> Allow | Deny | Pause:
        (outcome,) = await self._hooks.run(call)
        verdict = outcome.verdict
        if outcome.timed_out:
            problem = f"the approval hook timed out after {seconds(outcome.hook.timeout)}s"
        elif outcome.error is not None:
            problem = f"the approval hook failed: {type(outcome.error).__name__}: {outcome.error}"
        elif isinstance(verdict, Allow | Deny | Pause):
            return verdict
        else:  # (a raising or slow hook is logged by the hook runner; this one only here)
            problem = f"the approval hook returned {verdict!r}, not Allow, Deny or Pause"
            log.warning("approval hook failed on %s: %s", about_call(call), problem)
        if self.on_hook_error == "fail-run":
            raise RunFailed(f"tool '{call.name}': {problem}")
        if self.on_hook_error == "pause":
            return Pause(f"The approval hook could not decide ({problem}).")
        raise ApprovalRefused(f"The call to '{call.name}' was refused: its approval check failed", detail=problem)

    async def _approved_in_session(self, call: ToolCall) -> bool:
        """Whether the approver approved this tool earlier in the call's session (durably kept)."""
        if call.session is None:
            return False  # no session for the approval to hold in: ask every time
        requester = await self.broker.requester_of(call.agent)
        key = self._once_key(call, requester)
        if key in self._once:
            return True
        after: str | None = None
        while True:
            page = await self.broker.list(
                session=call.session,
                kind="approval",
                status=Status.ANSWERED,
                requester=requester,
                after=after,
                limit=1000,
                order="asc",
            )
            for request in page.items:
                response = request.response
                if (
                    response is not None
                    and response.answers.get("approve") is True
                    and _context(request).get("policy") == "once"
                    and await self._not_issued(request, response, call, requester) is None
                ):
                    self._once.add(key)
                    return True
            if page.next_cursor is None:
                return False
            after = page.next_cursor

    def _once_key(self, call: ToolCall, requester: str | None) -> tuple[str | None, ...]:
        """What a `once` approval holds for: the session and tool, and the asker and approver
        `_not_issued` checks, so that it does not carry over to another agent in the same
        session, or to a call whose approver is someone else."""
        return (call.session, call.name, call.agent, requester, call.to or self.to)

    async def _not_issued(
        self, request: Request, response: Response, call: ToolCall, requester: str | None
    ) -> str | None:
        """Why `request`, answered with `response`, is not an approval this gate issued for
        `call`'s tool and session, or not one given by its approver; None when it is."""
        context = _context(request)
        if not is_marked(request):
            return "it is not an approval gate's request"
        if request.requester != requester:
            return f"it was made by {request.requester!r}, not by {requester!r}"
        asked = call.to or self.to
        if asked is not None and request.to != asked:
            return f"it was addressed to {request.to!r}, not to {asked!r}"
        if request.origin.session != call.session or request.origin.tool_name != call.name:
            return "it was asked for another tool or session"
        if context.get("tool") != call.name:
            return "it names another tool"
        if request.to is not None and response.by not in self._answerers(request, call):
            # A request to a team is answered by any of its members.
            members = await self.broker.team_members(request.to) if response.by is not None else None
            if members is None:
                return f"it was answered by {response.by!r}, not by {request.to!r}"
            if response.by not in members:
                return f"it was answered by {response.by!r}, who is not in the team {request.to!r}"
        return None

    def _answerers(self, request: Request, call: ToolCall) -> set[str | None]:
        """Who may answer for the approver: the approver, and a contract that answers for
        them (auto_resolve, a terminal) as the `by` it records."""
        answerers: set[str | None] = {request.to}
        contract = self.contracts.for_agent(call.agent)
        if not isinstance(contract, BrokerContract):
            by = getattr(contract, "by", None)  # a contract that records itself as someone
            if isinstance(by, str):
                answerers.add(by)
        return answerers

    # -- asking -----------------------------------------------------------------------------

    def render_preview(self, call: ToolCall) -> str:
        """The preview the approver reads: a custom one for the tool, else the call itself."""
        custom = self.previews.get(call.name)
        if custom is not None:
            try:
                return custom(call)
            except Exception:
                log.exception("the preview of tool %r failed; showing the arguments", call.name)
        one_line = f"{call.name}({', '.join(f'{_key(k)}={canonical_json(v)}' for k, v in call.arguments.items())})"
        if len(one_line) <= 100:
            return show_hidden(one_line)
        return show_hidden(f"{call.name}\n{json.dumps(call.arguments, indent=2, sort_keys=True, ensure_ascii=False)}")

    async def _ask(
        self,
        call: ToolCall,
        arguments: dict[str, Any],
        schema: Mapping[str, Any] | None,
        policy: Policy | None,
        reason: str,
    ) -> dict[str, Any]:
        call = call.with_arguments(arguments)
        request, digest = await self._submit(call, schema, policy, reason, self.timeout)
        if request.status is not Status.PENDING:
            return await self._decided(call, request, digest, schema, policy)
        try:
            response = await settle(self.contracts, self.broker, request, call.agent)
        except Rejected as exc:
            raise ApprovalDenied(request.id, exc.reason) from None
        request = request.settle(Status.ANSWERED, response)
        return await self._consume(call, request, response, digest, schema, policy)

    async def _submit(
        self,
        call: ToolCall,
        schema: Mapping[str, Any] | None,
        policy: Policy | None,
        reason: str,
        timeout: float | None,
    ) -> tuple[Request, str]:
        """Make the approval request for `call` (its arguments canonical), or find the one
        made for the same call before (`approval_key`); with the digest it is bound to."""
        arguments = dict(call.arguments)
        digest = arguments_digest(call.name, arguments)
        preview = self.render_preview(call)
        asks: list[Ask] = [Confirm(f"Allow {call.name} to run with these arguments?", id="approve")]
        edit = _edit_form(schema)
        if edit is not None:
            asks.append(edit)
        prepared = self.broker.prepare(
            asks,
            kind="approval",
            to=call.to or self.to,
            title=f"Approve {call.name}?",
            details=f"{reason}\n\n{preview}" if reason else preview,
            context={
                "tool": call.name,
                "arguments": arguments,
                "preview": preview,
                "digest": digest,
                "policy": policy,
            },
            timeout=timeout,
            requester=call.agent,
            idempotency_key=approval_key(call, digest),
            origin=call.origin(),
        )
        request, _ = await self.broker.submit(mark(prepared))
        if request.id in self._consumed:
            raise _replayed(call, request)
        return request, digest

    async def _decided(
        self,
        call: ToolCall,
        request: Request,
        digest: str,
        schema: Mapping[str, Any] | None,
        policy: Policy | None,
    ) -> dict[str, Any]:
        """The outcome of an approval settled while no process waited on it (the agent
        restarted, or its run was parked): the first call to find an approval may consume
        it, any later one finds it consumed; a denial is a denial, with the reason."""
        if request.status is Status.ANSWERED and request.response is not None:
            response = request.response
        else:
            try:  # refused, expired or withdrawn: the same outcome, replayed
                response = await self.broker.wait(request.id)
            except Rejected as exc:
                raise ApprovalDenied(request.id, exc.reason) from None
        return await self._consume(call, request, response, digest, schema, policy)

    # -- without waiting: for runs that park ------------------------------------------------

    async def begin(
        self, call: ToolCall, *, schema: Mapping[str, Any] | None = None, policy: Policy | None = None
    ) -> dict[str, Any] | Request:
        """Decide on `call` as `authorize` does, without waiting for a person: the arguments
        to run it with, or the approval request a person must answer first.

        For an agent that parks its run instead of waiting (`interlock.runs`): once the
        request has settled, `finish` gives the arguments or raises as `authorize` would.
        A call of a run asks with no timeout of its own: the run's pause deadline applies.
        The same call begun again (a restarted agent) finds the same request.
        """
        try:
            arguments = json.loads(canonical_json(dict(call.arguments)))
        except (TypeError, ValueError) as exc:
            raise ApprovalRefused(f"The arguments of '{call.name}' are not plain JSON", detail=str(exc)) from None
        decided, reason, mode = await self._pre_decide(call, policy, arguments)
        if decided is not None:
            return decided
        call = call.with_arguments(arguments)
        timeout = None if call.run is not None else self.timeout
        request, _ = await self._submit(call, schema, mode, reason, timeout)
        return request

    async def finish(
        self,
        call: ToolCall,
        request: Request | str,
        *,
        schema: Mapping[str, Any] | None = None,
        policy: Policy | None = None,
    ) -> dict[str, Any]:
        """The arguments to run `call` with, once the approval `begin` asked for has settled.

        Raises as `authorize` does: `ApprovalDenied` with the person's reason, `Expired`,
        `Cancelled`, `ApprovalRefused` (not the gate's own, another digest, or used once
        already), and `InvalidRequest` if nobody has decided yet.
        """
        request_id = request if isinstance(request, str) else request.id
        current = await self.broker.get(request_id)
        if current.status is Status.PENDING:
            raise InvalidRequest(f"approval {request_id} has not been decided yet")
        try:
            arguments = json.loads(canonical_json(dict(call.arguments)))
        except (TypeError, ValueError) as exc:
            raise ApprovalRefused(f"The arguments of '{call.name}' are not plain JSON", detail=str(exc)) from None
        call = call.with_arguments(arguments)
        digest = arguments_digest(call.name, arguments)
        if current.id in self._consumed:
            raise _replayed(call, current)
        asked = _context(current).get("policy")  # the policy the person decided under
        return await self._decided(call, current, digest, schema, policy or (asked if asked in POLICIES else None))

    async def _consume(
        self,
        call: ToolCall,
        request: Request,
        response: Response,
        digest: str,
        schema: Mapping[str, Any] | None,
        policy: Policy | None,
    ) -> dict[str, Any]:
        requester = await self.broker.requester_of(call.agent)
        problem = await self._not_issued(request, response, call, requester)
        if problem is not None:
            raise ApprovalRefused(
                f"The approval for '{call.name}' was not given by its approver; the call does not run",
                detail=f"approval {request.id}: {problem}",
            )
        if response.answers.get("approve") is not True:
            raise ApprovalDenied(request.id, response.reason)
        if _context(request).get("digest") != digest:
            raise ApprovalRefused(
                f"The approval for '{call.name}' does not match the arguments reviewed",
                detail=f"approval {request.id}: digest mismatch",
            )
        if request.id in self._consumed or not await self.broker.consume(request.id, by=requester):
            raise _replayed(call, request)
        self._consumed[request.id] = None
        while len(self._consumed) > 4096:  # a fast path only: the store's consumption decides
            self._consumed.popitem(last=False)
        arguments = dict(call.arguments)
        edited = response.answers.get("arguments")
        if edited is not None:
            problem = None if schema is None else schema_problem(make_validator(call.name, schema), edited)
            if schema is None or problem is not None:
                raise ApprovalRefused(
                    f"The approver's edited arguments for '{call.name}' are invalid: {problem or 'no schema'}",
                    detail=f"approval {request.id}",
                )
            try:
                arguments = json.loads(canonical_json(edited))
            except (TypeError, ValueError) as exc:
                raise ApprovalRefused(f"The edited arguments for '{call.name}' are not JSON", detail=str(exc)) from None
        if policy == "once" and call.session is not None:
            self._once.add(self._once_key(call, requester))
        return arguments


def approval_key(call: ToolCall, digest: str) -> str:
    """The identity of the approval for `call`: its run (else its session), the call's id
    and the digest of its arguments. The same call asked again, by a restarted agent or
    a resumed run, finds the approval made the first time instead of making another."""
    scope: tuple[str, str | None]
    spelled: str | None
    if call.run is not None:
        scope, spelled = ("run", call.run), f"run={call.run}"
    elif call.session is None:
        scope, spelled = ("session", None), "-"
    else:
        scope = ("session", call.session)
        # a session spelled as no session or as a run has no spelling of its own
        spelled = None if call.session == "-" or call.session.startswith("run=") else call.session
    # The spelling of 0.1.0 reads one way when its scope holds no `:` (the call id may:
    # the digest's fixed 64 digits follow it).
    kept = None if spelled is None or ":" in spelled else f"approval:{spelled}:{call.id}:{digest}"
    return derived_key("approval", *scope, call.id, digest, spelled=kept)


def hook_call_key(agent: str, call: ToolCall, digest: str) -> str:
    """The `callKey` of `call` put to a stored policy's hook by URL (and its
    `Idempotency-Key`): the identity of the call's approval (`approval_key`) for `agent`,
    hashed. The same call asked again (a restarted agent, a resumed run) has the same key;
    a call of another agent, run or session, or with other arguments under the same call
    id, has another. The hook's answer must name it, so that an answer is taken only for
    the call it decides."""
    identity = json.dumps([agent, approval_key(call, digest)])  # ASCII whatever the names hold
    return hashlib.sha256(identity.encode()).hexdigest()


def _key(name: str) -> str:
    """An argument's name as the one-line preview shows it: bare when it is a plain name,
    else quoted, so that no name reads as more of the call (`a=1, b`)."""
    return name if name.isidentifier() and name.isascii() else canonical_json(name)


def _literal_chars(pattern: str) -> int:
    return sum(ch not in "*?[]" for ch in pattern)


def _edit_form(schema: Mapping[str, Any] | None) -> Form | None:
    if schema is None or schema.get("type") != "object":
        return None
    try:
        return Form("Edit the arguments before approving", schema=schema, id="arguments", required=False)
    except InvalidRequest:
        return None


def _context(request: Request) -> Mapping[str, Any]:
    return request.context if isinstance(request.context, Mapping) else {}


def _replayed(call: ToolCall, request: Request) -> ApprovalRefused:
    scope = f"run {call.run!r}" if call.run is not None else f"session {call.session!r}" if call.session else None
    again = (
        f" (the same call, with the same id, made again in the same {scope}: by a program started again, or by "
        "a worker resuming the run again after one stopped while it resumed; a new piece of work asks again "
        "under a new run or session)"
        if scope is not None
        else ""
    )
    return ApprovalRefused(
        f"The call to '{call.name}' was already decided once; a replayed call does not run again{again}",
        detail=f"approval {request.id} is {request.status.value} and was used or given up",
    )


def requires_approval(
    gate: ApprovalGate,
    *,
    name: str | None = None,
    schema: Mapping[str, Any] | None = None,
    policy: Policy | None = None,
    session: str | None = None,
    agent: str | None = None,
    to: str | None = None,
    run: str | None = None,
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Coroutine[Any, Any, R]]]:
    """Put `gate` in front of a plain async function: each call is approved before it runs.

    The function's bound arguments (defaults applied) are what the approver reviews, and
    the function runs with the approved (possibly edited, then checked against `schema`)
    arguments. The policy is `policy`, else the gate's for `name`, else `always`. The
    session, run, agent and person come from the `ToolRunner` call running it
    (`current_call`), else from `session`, `run`, `agent` and `to`. A denial raises
    `ApprovalDenied`; an expiry `Expired`; a request given up `Cancelled`; a gate failing
    closed `ApprovalRefused`.

    Each call has a stable id, so an agent that restarts and calls again finds the approval
    asked the first time (approved meanwhile, it runs once): inside a tool call, the tool
    call's id and this function's name; else, with a run or session, the function's name,
    the digest of its arguments and how many times it was called so with them in this run
    or session by this process. Without a run, session or tool call, every call is new.
    """
    if schema is not None:
        make_validator(name or "requires_approval", schema)

    def decorate(fn: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
        inner = inspect.unwrap(fn)  # (a decorator's wrapper hands back what the async function does)
        if (inspect.isfunction(inner) or inspect.ismethod(inner)) and not inspect.iscoroutinefunction(inner):
            # Called as it was before, it would hand back a coroutine never awaited: no approval, no call.
            raise TypeError(
                f"{fn.__qualname__}: requires_approval wraps an async function (`async def`), whose call waits for "
                "the person's approval; make it one, or run the work in `asyncio.to_thread` from one"
            )
        signature = inspect.signature(fn)
        for param in signature.parameters.values():
            if param.kind in (param.POSITIONAL_ONLY, param.VAR_POSITIONAL):
                raise TypeError(f"{fn.__qualname__}: requires_approval needs parameters that can be passed by name")
        tool = name or fn.__name__

        @functools.wraps(fn)
        async def gated(*args: P.args, **kwargs: P.kwargs) -> R:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments: dict[str, Any] = {}
            for key, value in bound.arguments.items():
                if signature.parameters[key].kind is inspect.Parameter.VAR_KEYWORD:
                    arguments.update(value)
                else:
                    arguments[key] = value
            outer = current_call()
            call = ToolCall(
                tool,
                arguments,
                session=outer.session if outer else session,
                channel=outer.channel if outer else None,
                agent=outer.agent if outer else agent,
                actor=outer.actor if outer else None,
                to=outer.to if outer else to,
                run=outer.run if outer else run,
                delegation=outer.delegation if outer else (),
            )
            call = replace(call, id=gate.stable_call_id(call, outer))
            effective = policy or gate.policy_for(tool) or "always"
            approved = await gate.authorize(call, schema=schema, policy=effective)
            return await cast(Callable[..., Awaitable[R]], fn)(**approved)

        return gated

    return decorate
