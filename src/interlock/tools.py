"""The agent side: tool calls that ask a person, and the gate in front of the other tools.

Framework-free on purpose. A `ToolCall` (name, arguments, call id and the context of the
turn: session, channel, agent, actor, the person to ask, the delegation chain) goes in; a
`ToolResult` (content, is_error, refused) comes out. An adapter for an agent framework
maps its own two types onto these and gets everything below.

- `HumanInputTools` serves the tools that ask a person (`ask_user`, seed 003's
  `request_human_input`, or names of your own) and falls through (returns None) for every
  other name, so it composes with the agent's other handlers (`compose`).
- `ToolRunner` runs calls through the hook chain: `before_tool_use` (allow, deny or
  rewrite the arguments; a rewrite is checked against the tool's JSON Schema), the
  approval gate, the handlers, then the `on_tool_call` observers, who see each call
  exactly once as completed, failed, refused or cancelled. `on_input_required` hooks run
  beside each wait for a person (they are the broker's input hooks).
- `ApprovalGate` decides per call whether a person must approve it first: policies per
  tool name or glob (`always`, `once` per session, `never`), an auto-allow list, a
  per-call hook (allow / deny / pause). An approval is bound to the digest of the exact
  arguments reviewed and is consumed once; anything ambiguous fails closed.
  `requires_approval` puts the gate in front of a plain async function.

What the model reads (seed 000):

    answered                 the answer, as the tool result
    timed out                is_error, not refused: {"error": "Human input timed out after
                             {timeout}s for tool '{name}'"}
    rejected / denied        refused, the reason as given (a denied approval is terminal)
    given up (closed,        is_error with a generic message: never the error's own text
    released, cancelled)
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import fnmatch
import functools
import hashlib
import inspect
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, ParamSpec, Protocol, TypeAlias, TypeVar, cast

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from .approvals import check_context, is_marked, mark
from .broker import Broker
from .contracts import BrokerContract, Contracts, ContractSpec
from .errors import (
    ApprovalDenied,
    ApprovalRefused,
    Cancelled,
    Expired,
    InvalidRequest,
    Rejected,
    RunFailed,
    ToolFailed,
    ToolRefused,
)
from .model import (
    Ask,
    Choice,
    Confirm,
    Deny,
    Form,
    InputHook,
    MultiChoice,
    Origin,
    Request,
    Response,
    Status,
    Text,
    new_id,
)

__all__ = [
    "Allow",
    "ApprovalDenied",
    "ApprovalGate",
    "ApprovalHook",
    "ApprovalRefused",
    "BeforeToolUse",
    "HumanInputDefinition",
    "HumanInputTools",
    "InputMapping",
    "Pause",
    "Policy",
    "Prompt",
    "QUESTION_TYPES",
    "Rewrite",
    "RunFailed",
    "ToolCall",
    "ToolCallObserver",
    "ToolCallReport",
    "ToolDefinition",
    "ToolFailed",
    "ToolFunctions",
    "ToolHandler",
    "ToolRefused",
    "ToolResult",
    "ToolRunner",
    "arguments_digest",
    "ask_user_tool",
    "canonical_json",
    "compose",
    "current_call",
    "request_human_input_tool",
    "requires_approval",
]

log = logging.getLogger("interlock")

DEFAULT_INPUT_TIMEOUT = 300.0
DEFAULT_APPROVAL_TIMEOUT = 3600.0
DEFAULT_HOOK_TIMEOUT = 30.0
DEFAULT_MAX_QUESTION_LENGTH = 8000

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


# -- the plain tool-call model -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call of a tool by the model, with the context of the turn that made it.

    `id` is the model provider's call id (a fresh one when not given; replay detection
    needs the provider's own). `to` is the person to ask when the call needs one (the
    root conversation's person); `actor` is the participant whose turn raised the call;
    `delegation` lists the agents that delegated down to `agent`, root agent first.
    """

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=new_id)
    session: str | None = None
    channel: str | None = None
    agent: str | None = None
    actor: str | None = None
    to: str | None = None
    run: str | None = None
    delegation: tuple[str, ...] = ()

    def with_arguments(self, arguments: Mapping[str, Any]) -> ToolCall:
        """The same call with other arguments (a rewrite or an approver's edit)."""
        return replace(self, arguments=dict(arguments))

    def origin(self) -> Origin:
        """Where a request made for this call comes from, so a notification knows whom to ask."""
        return Origin(
            session=self.session,
            channel=self.channel,
            agent=self.agent,
            actor=self.actor,
            tool_call_id=self.id,
            tool_name=self.name,
            arguments=dict(self.arguments),
            run=self.run,
            delegation=self.delegation or None,
        )


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What the model reads back for a call.

    `refused`: the call did not run because someone (a hook, a policy, a person) refused
    it, and `content` says why. `denied`: a person reviewing an approval said no; this is
    terminal, `reason` is theirs verbatim. `detail` says what failed, for logs and
    observers only: it is never part of `content`.
    """

    content: str
    is_error: bool = False
    refused: bool = False
    denied: bool = False
    reason: str | None = None
    detail: str | None = None

    @property
    def status(self) -> Literal["completed", "failed", "refused"]:
        """How an `on_tool_call` observer sees this result."""
        if self.refused:
            return "refused"
        return "failed" if self.is_error else "completed"


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """A tool as offered to the model: its name, what it does, and a JSON Schema of its arguments."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def to_dict(self) -> dict[str, Any]:
        """The neutral JSON shape most model APIs take (name, description, parameters)."""
        return {"name": self.name, "description": self.description, "parameters": dict(self.parameters)}


ToolHandler: TypeAlias = Callable[[ToolCall], Awaitable["ToolResult | None"]]
"""Serves the calls it knows and returns None for the others, so handlers compose."""


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _error(message: str) -> str:
    return json.dumps({"error": message}, ensure_ascii=False)


def _failed(name: str, detail: str | None) -> ToolResult:
    """The generic failure: the model learns the call failed, never the error's message."""
    return ToolResult(_error(f"Tool '{name}' failed"), is_error=True, detail=detail)


def _refused(reason: str, *, detail: str | None = None, denied: bool = False) -> ToolResult:
    return ToolResult(reason, is_error=True, refused=True, denied=denied, reason=reason, detail=detail)


def _seconds(timeout: float) -> str:
    return f"{timeout:g}"


def canonical_json(value: Any) -> str:
    """The canonical JSON text of `value`: sorted keys, no spaces, no NaN. Raises on non-JSON."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def arguments_digest(name: str, arguments: Mapping[str, Any]) -> str:
    """The SHA-256 that binds an approval to one tool and its exact canonical arguments."""
    return hashlib.sha256(canonical_json({"tool": name, "arguments": arguments}).encode()).hexdigest()


_current_call: contextvars.ContextVar[ToolCall | None] = contextvars.ContextVar("interlock_tool_call", default=None)


def current_call() -> ToolCall | None:
    """The call a `ToolRunner` is running in this task, or None outside one.

    Handlers and `requires_approval` functions read it to learn the session, agent and
    person of the turn without threading them through every signature.
    """
    return _current_call.get()


async def _maybe_await(value: Awaitable[T] | T) -> T:
    if inspect.isawaitable(value):
        return await cast(Awaitable[T], value)
    return value


_background: set[asyncio.Future[Any]] = set()


def _keep(future: asyncio.Future[Any]) -> asyncio.Future[Any]:
    """Hold a reference to `future` until it is done, so a shielded task is not collected."""
    _background.add(future)
    future.add_done_callback(_background.discard)
    return future


async def _settle(contracts: Contracts, broker: Broker, request: Request, agent: str | None) -> Response:
    """Have the agent's contract settle `request`; a cut wait withdraws the request.

    The broker withdraws a request whose `wait` is cancelled, but a cancel scope that
    cancels again and again (anyio, a task group) can cut that short, and a custom
    contract may not wait through the broker at all: so withdraw here too, shielded. A
    request already settled is left as it is.
    """
    try:
        return await contracts.for_agent(agent).settle(broker, request)
    except asyncio.CancelledError:
        withdraw = _keep(asyncio.ensure_future(broker.cancel(request.id, "the waiting call was cancelled")))
        withdraw.add_done_callback(_log_failed_withdraw)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(withdraw)
        raise


def _log_failed_withdraw(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("withdrawing a request whose call was cancelled failed: %r", future.exception())


def _schema_problem(validator: Draft202012Validator, arguments: Any) -> str | None:
    if not isinstance(arguments, Mapping):
        return "the arguments must be an object"
    error = next(iter(sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))), None)
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{error.message} at {where!r}" if where else error.message


def _validator(name: str, schema: Mapping[str, Any]) -> Draft202012Validator:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"tool {name!r}: invalid JSON Schema: {exc.message}") from None
    return Draft202012Validator(schema)


def compose(*handlers: ToolHandler) -> ToolHandler:
    """One handler trying each of `handlers` in order; the first that serves the call answers."""

    async def composed(call: ToolCall) -> ToolResult | None:
        for handler in handlers:
            result = await handler(call)
            if result is not None:
                return result
        return None

    return composed


class ToolFunctions:
    """A handler for plain async functions by tool name: `fn(**arguments)` is the call.

    A string return value is the content as is; anything else is sent as JSON.
    """

    def __init__(self, functions: Mapping[str, Callable[..., Awaitable[Any]]]) -> None:
        self.functions = dict(functions)

    async def __call__(self, call: ToolCall) -> ToolResult | None:
        fn = self.functions.get(call.name)
        if fn is None:
            return None
        return ToolResult(_json(await fn(**call.arguments)))


# -- human-input tools ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Prompt:
    """What a human-input call asks: the asks, and how to present and bound the request."""

    asks: tuple[Ask, ...]
    title: str = ""
    context: Any = None
    timeout: float | None = None
    """Seconds, for this call only; None takes the handler's timeout."""


class InputMapping(Protocol):
    """Turns a human-input tool's arguments into asks, and the answer into the tool result."""

    def prepare(self, arguments: Mapping[str, Any]) -> Prompt:
        """The prompt for these arguments; raise `ValueError` if they do not make one."""
        ...

    def render(self, prompt: Prompt, response: Response) -> str:
        """The content the model reads for this answer."""
        ...


def _question(arguments: Mapping[str, Any], max_length: int | None) -> str:
    question = arguments.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("'question' must be a non-empty string")
    if max_length is not None and len(question) > max_length:
        raise ValueError(f"the question is {len(question)} characters, at most {max_length} allowed")
    return question


def _string_list(arguments: Mapping[str, Any], key: str) -> list[str] | None:
    value = arguments.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{key!r} must be a list of non-empty strings")
    return value


class _AskUser:
    """`ask_user`: a question, with optional options (one, or several with `multiple`)."""

    def prepare(self, arguments: Mapping[str, Any]) -> Prompt:
        question = _question(arguments, None)
        options = _string_list(arguments, "options")
        ask: Ask
        if options and arguments.get("multiple") is True:
            ask = MultiChoice(question, options, id="answer", min=1)
        elif options:
            ask = Choice(question, options, id="answer", allow_other=True)
        else:
            ask = Text(question, id="answer", multiline=True)
        return Prompt((ask,), title=question)

    def render(self, prompt: Prompt, response: Response) -> str:
        return _json(response.answers.get(prompt.asks[0].id))


QUESTION_TYPES = ("CONFIRM", "FREE_FORM", "MULTIPLE_CHOICE", "MULTI_SELECT", "FORM")


class _RequestHumanInput:
    """Seed 003's `request_human_input`: typed questions, the answer as {"choice", "steering"}."""

    def __init__(self, max_question_length: int) -> None:
        self.max_question_length = max_question_length

    def prepare(self, arguments: Mapping[str, Any]) -> Prompt:
        question = _question(arguments, self.max_question_length)
        kind = arguments.get("question_type", "FREE_FORM")
        if kind not in QUESTION_TYPES:
            raise ValueError(f"'question_type' must be one of {', '.join(QUESTION_TYPES)}")
        choices = _string_list(arguments, "choices")
        if kind in ("MULTIPLE_CHOICE", "MULTI_SELECT", "FORM") and not choices:
            what = "field names" if kind == "FORM" else "options"
            raise ValueError(f"a {kind} question needs 'choices' (its {what})")
        ask: Ask
        if kind == "CONFIRM":
            ask = Confirm(question, id="answer")
        elif kind == "MULTIPLE_CHOICE":
            ask = Choice(question, cast(list[str], choices), id="answer", allow_other=True)
        elif kind == "MULTI_SELECT":
            ask = MultiChoice(question, cast(list[str], choices), id="answer")
        elif kind == "FORM":
            names = cast(list[str], choices)
            schema = {
                "type": "object",
                "properties": {name: {"type": "string"} for name in names},
                "required": names,
            }
            ask = Form(question, schema=schema, id="answer")
        else:
            ask = Text(question, id="answer", multiline=True)
        context = arguments.get("context_data")
        if context is not None and not isinstance(context, Mapping):
            raise ValueError("'context_data' must be an object")
        try:
            check_context(context)  # a model's context never passes for the approval gate's
        except InvalidRequest as exc:
            raise ValueError(f"'context_data': {exc}") from None
        timeout = arguments.get("timeout")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0):
            raise ValueError("'timeout' must be a positive number of seconds")
        return Prompt((ask,), title=question, context=context, timeout=None if timeout is None else float(timeout))

    def render(self, prompt: Prompt, response: Response) -> str:
        answer = response.answers.get(prompt.asks[0].id)
        return json.dumps({"choice": answer, "steering": response.reason or None}, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class HumanInputDefinition(ToolDefinition):
    """A tool definition that also says how its arguments become asks (`mapping`)."""

    mapping: InputMapping = field(default_factory=_AskUser, repr=False, compare=False)


def ask_user_tool(
    name: str = "ask_user",
    description: str = (
        "Ask the user a question and wait for the answer. Give options to have them pick one "
        "(or several, with multiple=true); without options they answer in their own words."
    ),
) -> HumanInputDefinition:
    """The ready definition of a simple ask-the-user tool (question, options, multiple)."""
    parameters = {
        "type": "object",
        "properties": {
            "question": {"type": "string", "minLength": 1, "description": "The question, as the user will read it."},
            "options": {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "uniqueItems": True,
                "description": "Answers to pick from; the user may still answer otherwise.",
            },
            "multiple": {"type": "boolean", "description": "Let the user pick several options."},
        },
        "required": ["question"],
        "additionalProperties": False,
    }
    return HumanInputDefinition(name, description, parameters, _AskUser())


def request_human_input_tool(
    name: str = "request_human_input",
    *,
    max_question_length: int = DEFAULT_MAX_QUESTION_LENGTH,
    description: str = (
        "Ask the human for input and wait for it: a confirmation (CONFIRM), free text "
        "(FREE_FORM), one of several choices (MULTIPLE_CHOICE), several choices "
        "(MULTI_SELECT) or named fields (FORM, with the field names as choices). The result "
        'is {"choice": <answer>, "steering": <an optional note from the human>}.'
    ),
) -> HumanInputDefinition:
    """The ready definition of seed 003's `request_human_input` system tool."""
    if max_question_length < 1:
        raise ValueError("max_question_length must be positive")
    parameters = {
        "type": "object",
        "properties": {
            "question": {"type": "string", "minLength": 1, "maxLength": max_question_length},
            "question_type": {"type": "string", "enum": list(QUESTION_TYPES), "default": "FREE_FORM"},
            "choices": {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True},
            "context_data": {"type": "object", "description": "Facts the human needs to answer."},
            "timeout": {"type": "number", "exclusiveMinimum": 0, "description": "Seconds to wait for the answer."},
        },
        "required": ["question"],
        "additionalProperties": False,
    }
    return HumanInputDefinition(name, description, parameters, _RequestHumanInput(max_question_length))


_ASK_USER = _AskUser()


class HumanInputTools:
    """Serves the tools that ask a person; returns None for any other tool name.

    Each call becomes a request recorded by the broker, with its origin taken from the
    call (session, channel, agent, actor, tool call id, tool name and arguments), sent to
    `call.to` or else to `to`, expiring after the call's own timeout or `timeout`. The
    agent's contract (`contracts`) then gets it settled: by the inbox, at once, or on a
    terminal. A served name without a `HumanInputDefinition` takes `ask_user`'s arguments.

    `tool_names` decides what is served, not what is offered: offer the tools to the model
    through `definitions` (a `ToolRunner` adds them) or your own. `check_offered` logs a
    warning, once per name, for a served tool the agent does not offer, which would
    otherwise show up only as an agent that never asks.
    """

    def __init__(
        self,
        broker: Broker,
        tool_names: Iterable[str],
        *,
        definitions: Iterable[ToolDefinition] = (),
        timeout: float = DEFAULT_INPUT_TIMEOUT,
        to: str | None = None,
        contracts: Contracts | ContractSpec | None = None,
    ) -> None:
        if isinstance(tool_names, str):
            raise TypeError("tool_names is a collection of names, not one string")
        self.tool_names = frozenset(tool_names)
        if not self.tool_names:
            raise ValueError("a HumanInputTools needs at least one tool name to serve")
        self.definitions = tuple(definitions)
        for definition in self.definitions:
            if definition.name not in self.tool_names:
                raise ValueError(
                    f"definition {definition.name!r} is not served: tool_names are {sorted(self.tool_names)}"
                )
        if not timeout > 0:
            raise ValueError("timeout must be a positive number of seconds")
        self.broker = broker
        self.timeout = float(timeout)
        self.to = to
        self.contracts = Contracts.of(contracts)
        self._mappings: dict[str, InputMapping] = {
            d.name: d.mapping if isinstance(d, HumanInputDefinition) else _ASK_USER for d in self.definitions
        }
        self._warned: set[str] = set()

    def check_offered(self, offered: Iterable[str | ToolDefinition]) -> frozenset[str]:
        """The served names missing from `offered`; each is logged as a warning once."""
        names = {o.name if isinstance(o, ToolDefinition) else o for o in offered}
        missing = self.tool_names - names
        for name in sorted(missing - self._warned):
            log.warning(
                "tool %r is served as a human-input tool but the agent never offers it: the model cannot call it, "
                "so nobody will ever be asked; add its definition",
                name,
            )
        self._warned |= missing
        return frozenset(missing)

    async def __call__(self, call: ToolCall) -> ToolResult | None:
        if call.name not in self.tool_names:
            return None
        return await self.ask(call)

    async def ask(self, call: ToolCall) -> ToolResult:
        """Ask a person for this call and map the outcome onto what the model reads."""
        mapping = self._mappings.get(call.name, _ASK_USER)
        try:
            prompt = mapping.prepare(call.arguments)
        except ValueError as exc:
            return ToolResult(_error(f"Invalid arguments for tool '{call.name}': {exc}"), is_error=True)
        timeout = prompt.timeout or self.timeout
        try:
            request = await self.broker.create(
                prompt.asks,
                kind="question",
                to=call.to or self.to,
                title=prompt.title,
                context=prompt.context,
                timeout=timeout,
                requester=call.agent,
                origin=call.origin(),
            )
        except InvalidRequest as exc:  # the model's arguments made a request that does not hold
            return ToolResult(_error(f"Invalid arguments for tool '{call.name}': {exc}"), is_error=True)
        except Cancelled as exc:  # created in a closed channel
            return _failed(call.name, f"{type(exc).__name__}: {exc}")
        try:
            response = await _settle(self.contracts, self.broker, request, call.agent)
        except Expired:
            return ToolResult(
                _error(f"Human input timed out after {_seconds(timeout)}s for tool '{call.name}'"),
                is_error=True,
                detail=f"request {request.id} expired",
            )
        except Rejected as exc:
            reason = exc.reason or f"The person declined to answer '{call.name}'"
            return _refused(reason, detail=f"request {request.id} was rejected")
        except Cancelled as exc:  # closed, released, cancelled: a plain failure
            return _failed(call.name, f"request {request.id}: {type(exc).__name__}: {exc}")
        return ToolResult(mapping.render(prompt, response))


# -- the approval gate ---------------------------------------------------------------------

Policy: TypeAlias = Literal["always", "once", "never"]
POLICIES: frozenset[str] = frozenset({"always", "once", "never"})
_STRICTNESS = {"never": 0, "once": 1, "always": 2}


@dataclass(frozen=True, slots=True)
class Allow:
    """A hook's verdict: let the call go on (for the approval hook: run it without asking)."""


@dataclass(frozen=True, slots=True)
class Pause:
    """The approval hook's verdict: a person must approve this call; `reason` is shown to them."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class Rewrite:
    """A `before_tool_use` verdict: run the call with these arguments instead."""

    arguments: Mapping[str, Any]


ApprovalHook: TypeAlias = Callable[[ToolCall], "Awaitable[Allow | Deny | Pause] | Allow | Deny | Pause"]
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
        self.on_hook_error: HookErrorMode = on_hook_error
        self.timeout = timeout
        self.to = to
        self.contracts = Contracts.of(contracts)
        self.previews = dict(previews or {})
        self._once: set[tuple[str, str]] = set()
        self._consumed: OrderedDict[str, None] = OrderedDict()

    # -- deciding ---------------------------------------------------------------------------

    def auto_allowed(self, name: str) -> bool:
        """Whether tool `name` is on the auto-allow list (names or globs): it never asks."""
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.auto_allow)

    def policy_for(self, name: str) -> Policy | None:
        """The declared policy for tool `name`, or None when no name or glob matches."""
        if name in self.policies:
            return self.policies[name]
        matches = [(p, policy) for p, policy in self.policies.items() if fnmatch.fnmatchcase(name, p)]
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
        if self.auto_allowed(call.name):
            return cast(dict[str, Any], arguments)
        policy = policy or self.policy_for(call.name)
        pause_reason = ""
        if policy == "never":
            return cast(dict[str, Any], arguments)
        if policy == "once" and await self._approved_in_session(call):
            return cast(dict[str, Any], arguments)
        if policy is None:
            if self.hook is None:
                return cast(dict[str, Any], arguments)
            verdict = await self._consult_hook(call)
            if isinstance(verdict, Allow):
                return cast(dict[str, Any], arguments)
            if isinstance(verdict, Deny):
                raise ApprovalDenied("", verdict.reason)
            pause_reason = verdict.reason
        return await self._ask(call, arguments, schema, policy, pause_reason)

    async def _consult_hook(self, call: ToolCall) -> Allow | Deny | Pause:
        assert self.hook is not None
        problem: str
        try:
            async with asyncio.timeout(self.hook_timeout):
                verdict = await _maybe_await(self.hook(call))
        except TimeoutError:
            problem = f"the approval hook timed out after {_seconds(self.hook_timeout)}s"
        except Exception as exc:
            log.exception("the approval hook failed on tool call %s (%s)", call.id, call.name)
            problem = f"the approval hook failed: {type(exc).__name__}: {exc}"
        else:
            if isinstance(verdict, Allow | Deny | Pause):
                return verdict
            problem = f"the approval hook returned {verdict!r}, not Allow, Deny or Pause"
        if self.on_hook_error == "fail-run":
            raise RunFailed(f"tool '{call.name}': {problem}")
        if self.on_hook_error == "pause":
            return Pause(f"The approval hook could not decide ({problem}).")
        raise ApprovalRefused(f"The call to '{call.name}' was refused: its approval check failed", detail=problem)

    async def _approved_in_session(self, call: ToolCall) -> bool:
        """Whether the approver approved this tool earlier in the call's session (durably kept)."""
        if call.session is None:
            return False  # no session for the approval to hold in: ask every time
        key = (call.session, call.name)
        if key in self._once:
            return True
        requester = await self.broker.requester_of(call.agent)
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
                    and self._not_issued(request, response, call, requester) is None
                ):
                    self._once.add(key)
                    return True
            if page.next_cursor is None:
                return False
            after = page.next_cursor

    def _not_issued(self, request: Request, response: Response, call: ToolCall, requester: str | None) -> str | None:
        """Why `request`, answered with `response`, is not an approval this gate issued for
        `call`'s tool and session; None when it is."""
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
            return f"it was answered by {response.by!r}, not by {request.to!r}"
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
        one_line = f"{call.name}({', '.join(f'{k}={canonical_json(v)}' for k, v in call.arguments.items())})"
        if len(one_line) <= 100:
            return one_line
        return f"{call.name}\n{json.dumps(call.arguments, indent=2, sort_keys=True, ensure_ascii=False)}"

    async def _ask(
        self,
        call: ToolCall,
        arguments: dict[str, Any],
        schema: Mapping[str, Any] | None,
        policy: Policy | None,
        reason: str,
    ) -> dict[str, Any]:
        call = call.with_arguments(arguments)
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
            timeout=self.timeout,
            requester=call.agent,
            idempotency_key=f"approval:{call.session or '-'}:{call.id}:{digest}",
            origin=call.origin(),
        )
        request, _ = await self.broker.submit(mark(prepared))
        if request.id in self._consumed:
            raise _replayed(call, request)
        if request.status is Status.PENDING:
            try:
                response = await _settle(self.contracts, self.broker, request, call.agent)
            except Rejected as exc:
                raise ApprovalDenied(request.id, exc.reason) from None
            request = request.settle(Status.ANSWERED, response)
        elif request.status is Status.ANSWERED and request.response is not None:
            # Approved while no process waited (say the agent restarted): the first call to
            # find it may consume it; any later one finds it consumed.
            response = request.response
            if response.answers.get("approve") is not True:
                raise _replayed(call, request)
        else:
            raise _replayed(call, request)
        return await self._consume(call, request, response, digest, schema, policy)

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
        problem = self._not_issued(request, response, call, requester)
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
            problem = None if schema is None else _schema_problem(_validator(call.name, schema), edited)
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
            self._once.add((call.session, call.name))
        return arguments


def _definitions_of(handler: ToolHandler) -> tuple[ToolDefinition, ...]:
    found = getattr(handler, "definitions", ())
    return tuple(d for d in found if isinstance(d, ToolDefinition))


def _literal_chars(pattern: str) -> int:
    return sum(ch not in "*?[]" for ch in pattern)


def _edit_form(schema: Mapping[str, Any] | None) -> Form | None:
    if schema is None or schema.get("type") != "object":
        return None
    try:
        return Form("Edit the arguments before approving (optional)", schema=schema, id="arguments", required=False)
    except InvalidRequest:
        return None


def _context(request: Request) -> Mapping[str, Any]:
    return request.context if isinstance(request.context, Mapping) else {}


def _replayed(call: ToolCall, request: Request) -> ApprovalRefused:
    return ApprovalRefused(
        f"The call to '{call.name}' was already decided once; a replayed call does not run again",
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
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Put `gate` in front of a plain async function: each call is approved before it runs.

    The function's bound arguments (defaults applied) are what the approver reviews, and
    the function runs with the approved (possibly edited, then checked against `schema`)
    arguments. The policy is `policy`, else the gate's for `name`, else `always`. The
    session, agent and person come from the `ToolRunner` call running it (`current_call`),
    else from `session`, `agent` and `to`. A denial raises `ApprovalDenied`; an expiry
    `Expired`; a request given up `Cancelled`; a gate failing closed `ApprovalRefused`.
    """
    if schema is not None:
        _validator(name or "requires_approval", schema)

    def decorate(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
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
                run=outer.run if outer else None,
                delegation=outer.delegation if outer else (),
            )
            effective = policy or gate.policy_for(tool) or "always"
            approved = await gate.authorize(call, schema=schema, policy=effective)
            return await cast(Callable[..., Awaitable[R]], fn)(**approved)

        return gated

    return decorate


# -- running calls through the hook chain --------------------------------------------------

BeforeVerdict: TypeAlias = "Allow | Deny | Rewrite | None"
BeforeToolUse: TypeAlias = Callable[[ToolCall], "Awaitable[BeforeVerdict] | BeforeVerdict"]
ToolCallObserver: TypeAlias = Callable[["ToolCallReport"], "Awaitable[None] | None"]


@dataclass(frozen=True, slots=True)
class ToolCallReport:
    """What `on_tool_call` observers see, once per call.

    `call` carries the arguments the call ran with (after any rewrite or edit); `result`
    is None for a cancelled call and for a run stopped by `RunFailed`.
    """

    call: ToolCall
    status: Literal["completed", "failed", "refused", "cancelled"]
    result: ToolResult | None = None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class _Hook:
    fn: Callable[..., Any]
    priority: int
    timeout: float
    order: int


class ToolRunner:
    """Runs tool calls through the hook chain and the approval gate, reporting each once.

    `handlers` are tried in order for each call (a `HumanInputTools`, a `ToolFunctions`,
    any `ToolHandler`); the first to return a result serves it. `definitions` are the
    agent's own tools; `self.definitions` adds those of the handlers that carry a
    `definitions` attribute (the human-input tools, `InformUserTool`), and is what to
    offer the model. A call whose arguments do not fit its tool's schema fails
    without running; a handler that raises fails the call with a generic message (raise
    `ToolFailed` or `ToolRefused` to say more). Human-input tools skip the gate: they ask
    a person anyway.
    """

    def __init__(
        self,
        broker: Broker,
        handlers: Sequence[ToolHandler],
        *,
        definitions: Iterable[ToolDefinition] = (),
        gate: ApprovalGate | None = None,
        hook_timeout: float = DEFAULT_HOOK_TIMEOUT,
    ) -> None:
        self.broker = broker
        self.handlers = tuple(handlers)
        self.gate = gate
        self.hook_timeout = hook_timeout
        human = [h for h in self.handlers if isinstance(h, HumanInputTools)]
        by_name: dict[str, ToolDefinition] = {}
        for definition in [d for h in self.handlers for d in _definitions_of(h)] + list(definitions):
            known = by_name.get(definition.name)
            if known is not None and known.parameters != definition.parameters:
                raise ValueError(f"tool {definition.name!r} is defined twice, with different parameters")
            by_name.setdefault(definition.name, definition)
        self.definitions = tuple(by_name.values())
        self._schemas = {d.name: d.parameters for d in self.definitions}
        self._validators = {d.name: _validator(d.name, d.parameters) for d in self.definitions}
        self._human_names = frozenset(n for h in human for n in h.tool_names)
        for handler in human:
            handler.check_offered(self.definitions)
        self._before: list[_Hook] = []
        self._observers: list[_Hook] = []

    # -- hooks ------------------------------------------------------------------------------

    def before_tool_use(self, hook: BeforeToolUse, *, priority: int = 0, timeout: float | None = None) -> BeforeToolUse:
        """Run `hook(call)` before each call; lower priority first. Returns the hook.

        `Deny(reason)` refuses the call; `Rewrite(arguments)` replaces its arguments (the
        next hooks see them) once they pass the tool's schema, else the call is refused;
        None or `Allow()` goes on. A hook that raises or overruns its bound refuses the call:
        a gate that cannot decide fails closed.
        """
        self._before.append(_Hook(hook, priority, self._bound(timeout), len(self._before)))
        self._before.sort(key=lambda h: (h.priority, h.order))
        return hook

    def on_input_required(self, hook: InputHook, *, priority: int = 0, timeout: float | None = None) -> InputHook:
        """Run `hook(request)` beside each wait for a person; `Deny(reason)` rejects the request.

        It is the broker's input hook: it sees every request this broker creates (the
        request's origin names the session, agent, actor and tool call). Returns the hook.
        """
        self.broker.add_input_hook(hook, priority=priority, timeout=timeout)
        return hook

    def on_tool_call(
        self, observer: ToolCallObserver, *, priority: int = 0, timeout: float | None = None
    ) -> ToolCallObserver:
        """Have `observer(report)` told of each call once it is over. Returns the observer.

        An observer that raises or overruns its bound is logged; the others still run and
        the result does not change.
        """
        self._observers.append(_Hook(observer, priority, self._bound(timeout), len(self._observers)))
        self._observers.sort(key=lambda h: (h.priority, h.order))
        return observer

    def _bound(self, timeout: float | None) -> float:
        bound = self.hook_timeout if timeout is None else timeout
        if not bound > 0:
            raise ValueError("a hook's timeout must be a positive number of seconds")
        return bound

    # -- running ----------------------------------------------------------------------------

    async def run(self, call: ToolCall) -> ToolResult:
        """Run one call through the chain and return what the model reads.

        Cancelled (the turn was cut), the call is reported `cancelled` and the cancellation
        goes on; a request it was waiting on is withdrawn by the broker.
        """
        token = _current_call.set(call)
        try:
            try:
                result, ran = await self._run(call)
            except asyncio.CancelledError:
                await self._report(ToolCallReport(call, "cancelled", detail="the turn was cancelled"))
                raise
            except RunFailed as exc:
                await self._report(ToolCallReport(call, "failed", detail=str(exc)))
                raise
            await self._report(ToolCallReport(ran, result.status, result, result.detail))
            return result
        finally:
            _current_call.reset(token)

    async def run_all(self, calls: Sequence[ToolCall]) -> list[ToolResult]:
        """Run the calls of one turn concurrently; results in the order of `calls`.

        A call waiting for a person holds only itself: the others complete meanwhile. If
        the turn is cancelled, every call still running is cancelled (and reported so,
        once). A `RunFailed` cancels the other calls and is raised.
        """
        tasks = [asyncio.ensure_future(self.run(call)) for call in calls]
        if not tasks:
            return []
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            failed = next((t for t in tasks if t in done and not t.cancelled() and t.exception()), None)
            if failed is not None:
                raise cast(BaseException, failed.exception())
            return [t.result() for t in tasks]
        finally:
            for task in tasks:
                task.cancel()
            # Let each cancelled call withdraw its request and report itself, even if this
            # turn is cancelled again meanwhile.
            await self._shielded(asyncio.gather(*tasks, return_exceptions=True))

    async def _run(self, call: ToolCall) -> tuple[ToolResult, ToolCall]:
        validator = self._validators.get(call.name)
        if validator is not None:
            problem = _schema_problem(validator, call.arguments)
            if problem is not None:
                return ToolResult(_error(f"Invalid arguments for tool '{call.name}': {problem}"), is_error=True), call
        checked = await self._before_tool_use(call)
        if isinstance(checked, ToolResult):
            return checked, call
        call = checked
        if self.gate is not None and call.name not in self._human_names:
            gated = await self._authorize(call)
            if isinstance(gated, ToolResult):
                return gated, call
            call = gated
        return await self._dispatch(call), call

    async def _before_tool_use(self, call: ToolCall) -> ToolCall | ToolResult:
        for hook in self._before:
            try:
                async with asyncio.timeout(hook.timeout):
                    verdict = await _maybe_await(hook.fn(call))
            except TimeoutError:
                detail = f"before_tool_use hook {hook.fn!r} timed out after {_seconds(hook.timeout)}s"
                log.warning("%s on tool call %s; refusing it", detail, call.id)
                return _refused(f"The call to '{call.name}' was blocked: its check did not finish", detail=detail)
            except Exception as exc:
                log.exception("before_tool_use hook %r failed on tool call %s; refusing it", hook.fn, call.id)
                return _refused(
                    f"The call to '{call.name}' was blocked: its check failed", detail=f"{type(exc).__name__}: {exc}"
                )
            if verdict is None or isinstance(verdict, Allow):
                continue
            if isinstance(verdict, Deny):
                return _refused(verdict.reason)
            if isinstance(verdict, Rewrite):
                validator = self._validators.get(call.name)
                problem = (
                    "the tool declares no schema to check them against"
                    if validator is None
                    else _schema_problem(validator, verdict.arguments)
                )
                if problem is not None:
                    return _refused(
                        f"The rewritten arguments for '{call.name}' are invalid: {problem}",
                        detail=f"rewrite by {hook.fn!r}",
                    )
                call = call.with_arguments(verdict.arguments)
                continue
            return _refused(
                f"The call to '{call.name}' was blocked: its check gave no clear answer",
                detail=f"before_tool_use hook {hook.fn!r} returned {verdict!r}",
            )
        return call

    async def _authorize(self, call: ToolCall) -> ToolCall | ToolResult:
        assert self.gate is not None
        try:
            arguments = await self.gate.authorize(call, schema=self._schemas.get(call.name))
        except ApprovalDenied as exc:
            reason = exc.reason or f"The call to '{call.name}' was denied"
            return _refused(reason, denied=True, detail=f"approval {exc.request_id or '(hook)'} denied")
        except ApprovalRefused as exc:
            return _refused(exc.reason, detail=exc.detail)
        except Expired as exc:
            bound = self.gate.timeout
            after = f" after {_seconds(bound)}s" if bound is not None else ""
            return ToolResult(
                _error(f"Approval timed out{after} for tool '{call.name}'"), is_error=True, detail=str(exc)
            )
        except Cancelled as exc:
            return _failed(call.name, f"approval: {type(exc).__name__}: {exc}")
        except (RunFailed, asyncio.CancelledError):
            raise
        except Exception as exc:  # the call must not run on an approval nobody saw through
            log.exception("the approval gate failed on tool call %s (%s)", call.id, call.name)
            return _failed(call.name, f"approval gate: {type(exc).__name__}: {exc}")
        return call.with_arguments(arguments)

    async def _dispatch(self, call: ToolCall) -> ToolResult:
        for handler in self.handlers:
            try:
                result = await handler(call)
            except ToolFailed as exc:
                return ToolResult(_error(str(exc)), is_error=True, detail=str(exc))
            except ToolRefused as exc:
                return _refused(exc.reason)
            except Exception as exc:
                log.exception("tool %r failed on call %s", call.name, call.id)
                return _failed(call.name, f"{type(exc).__name__}: {exc}")
            if result is not None:
                return result
        return ToolResult(_error(f"Unknown tool '{call.name}'"), is_error=True, detail="no handler serves it")

    async def _report(self, report: ToolCallReport) -> None:
        """Tell every observer, shielded: a turn cut meanwhile does not cut the report short."""
        if not self._observers:
            return
        await self._shielded(asyncio.ensure_future(self._tell_observers(report)))

    async def _shielded(self, future: asyncio.Future[Any]) -> None:
        """Await `future` so that cancelling the waiter leaves it running (and referenced)."""
        await asyncio.shield(_keep(future))

    async def _tell_observers(self, report: ToolCallReport) -> None:
        for observer in self._observers:
            try:
                async with asyncio.timeout(observer.timeout):
                    await _maybe_await(observer.fn(report))
            except TimeoutError:
                log.warning("on_tool_call observer %r timed out after %ss", observer.fn, observer.timeout)
            except Exception:
                log.exception("on_tool_call observer %r failed on tool call %s", observer.fn, report.call.id)
