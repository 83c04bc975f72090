"""The tools that ask a person: `ask_user`, the typed `request_human_input`, or your own.

`HumanInputTools` serves them and falls through (returns None) for every other name, so
it composes with the agent's other handlers. Each call becomes a request recorded by the
broker, settled by the agent's contract; an `InputMapping` turns a tool's arguments into
asks and the answer into what the model reads:

    answered                 the answer, as the tool result
    timed out                is_error, not refused: {"error": "Human input timed out after
                             {timeout}s for tool '{name}'"}
    rejected                 refused, the reason as given
    given up (closed,        is_error with a generic message: never the error's own text
    released, cancelled)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

from ..approvals import check_context
from ..broker import Broker, connect
from ..errors import Cancelled, Expired, InvalidRequest, Rejected
from ..model import DEFAULT_LIMITS, Ask, Choice, Confirm, Form, MultiChoice, Response, Text
from ._results import as_content, error_content, failure, refusal, seconds
from ._settle import settle
from .calls import ToolCall, ToolDefinition, ToolResult
from .contracts import Contracts, ContractSpec

__all__ = [
    "DEFAULT_INPUT_TIMEOUT",
    "DEFAULT_MAX_QUESTION_LENGTH",
    "QUESTION_TYPES",
    "HumanInputDefinition",
    "HumanInputTools",
    "InputMapping",
    "Prompt",
    "ask_user_tool",
    "request_human_input_tool",
]

log = logging.getLogger("interlock")

DEFAULT_INPUT_TIMEOUT = 300.0
DEFAULT_MAX_QUESTION_LENGTH = 8000


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


def _title(question: str) -> str:
    """The request's title for a question: the question itself, cut to a title's length
    (`Limits.max_title_length`) when longer; the ask's prompt keeps it whole."""
    most = DEFAULT_LIMITS.max_title_length
    return question if len(question) <= most else question[: most - 1].rstrip() + "\u2026"


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
        return Prompt((ask,), title=_title(question))

    def render(self, prompt: Prompt, response: Response) -> str:
        return as_content(response.answers.get(prompt.asks[0].id))


def _string_form(question: str, names: list[str]) -> Form:
    schema = {"type": "object", "properties": {name: {"type": "string"} for name in names}, "required": names}
    return Form(question, schema=schema, id="answer")


_QUESTION_ASKS: dict[str, Callable[[str, list[str]], Ask]] = {
    "CONFIRM": lambda question, _: Confirm(question, id="answer"),
    "FREE_FORM": lambda question, _: Text(question, id="answer", multiline=True),
    "MULTIPLE_CHOICE": lambda question, choices: Choice(question, choices, id="answer", allow_other=True),
    "MULTI_SELECT": lambda question, choices: MultiChoice(question, choices, id="answer"),
    "FORM": _string_form,
}
"""The ask each `question_type` becomes, given the question and its `choices`."""

QUESTION_TYPES = tuple(_QUESTION_ASKS)


class _RequestHumanInput:
    """`request_human_input`: typed questions, the answer as {"choice", "steering"}."""

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
        ask = _QUESTION_ASKS[kind](question, list(choices or ()))
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
        seconds = None if timeout is None else float(timeout)
        return Prompt((ask,), title=_title(question), context=context, timeout=seconds)

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
    """The ready definition of the typed `request_human_input` system tool."""
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
    otherwise show up only as an agent that never asks (a `ToolRunner` does not serve such a
    call as a human-input tool at all: it goes to the host's handlers, with a warning).
    Without a `broker`, the tools make their own in this process (`memory://`) and own
    it: use them with `async with` (or call `aclose`) so that it is closed with them. A
    broker given is the caller's to close.
    """

    def __init__(
        self,
        broker: Broker | None = None,
        tool_names: Iterable[str] = (),
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
        self._owns_broker = broker is None
        self.broker = broker if broker is not None else connect("memory://")
        """The broker the requests go to: the one given, else one of its own in this process
        (answer through `tools.broker.resolve(...)`)."""
        self.timeout = float(timeout)
        self.to = to
        self.contracts = Contracts.of(contracts)
        self._mappings: dict[str, InputMapping] = {
            d.name: d.mapping if isinstance(d, HumanInputDefinition) else _ASK_USER for d in self.definitions
        }
        self._warned: set[str] = set()

    async def __aenter__(self) -> HumanInputTools:
        if self._owns_broker:
            await self.broker.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the broker these tools made for themselves, if they did (its background
        work stops; calls after this fail plainly). A broker given is left open."""
        if self._owns_broker:
            await self.broker.aclose()

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
            return ToolResult(error_content(f"Invalid arguments for tool '{call.name}': {exc}"), is_error=True)
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
            return ToolResult(error_content(f"Invalid arguments for tool '{call.name}': {exc}"), is_error=True)
        except Cancelled as exc:  # created in a closed channel
            return failure(call.name, f"{type(exc).__name__}: {exc}")
        try:
            response = await settle(self.contracts, self.broker, request, call.agent)
        except Expired:
            return ToolResult(
                error_content(f"Human input timed out after {seconds(timeout)}s for tool '{call.name}'"),
                is_error=True,
                detail=f"request {request.id} expired",
            )
        except Rejected as exc:
            reason = exc.reason or f"The person declined to answer '{call.name}'"
            return refusal(reason, detail=f"request {request.id} was rejected")
        except Cancelled as exc:  # closed, released, cancelled: a plain failure
            return failure(call.name, f"request {request.id}: {type(exc).__name__}: {exc}")
        return ToolResult(mapping.render(prompt, response))
