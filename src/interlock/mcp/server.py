"""interlock's inbox as MCP tools: ask a person, read and answer your inbox, follow a job.

`build_server(access)` makes the MCP server; `access` says, for each call, which broker the
tools use and who is calling. It is the server's lifespan state, so each tool, a function
of this module, takes it from the call's context (`ctx.request_context.lifespan_context`),
as the MCP SDK has tools reach what the server holds. Every tool goes through that
`Broker`, so who may read, answer or ask whom is the server's rule, not this module's: over
the HTTP API (`interlock mcp --server`, and `/mcp` on `interlock serve`) the caller is a
token's principal and the API decides; over a store URL the caller is this machine's user,
as with the CLI.

The asks a client sends (`AskIn`, its `OptionIn`s) and the grant it checks (`GrantRef`) are
derived from the model's dataclasses (`Text`, `Confirm`, `Choice`, `MultiChoice`, `Form`,
`Option`, `Grant`), under the ask type names of `interlock.mcp.jobs`; only the words that
describe each field to a model are this module's.

MCP's tasks are not in the SDK's server or client (mcp 2.x), so `hitl_request` returns its
job at once and `hitl_status` reports it, waiting (bounded) for it to settle if asked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast, get_type_hints

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, create_model

from .. import __version__
from ..agent.calls import ToolCall
from ..agent.human_input import DEFAULT_INPUT_TIMEOUT, QUESTION_TYPES, HumanInputTools, request_human_input_tool
from ..approvals import decision_ask, refused_yes
from ..broker import Broker
from ..durations import instant
from ..errors import AlreadySettled, InterlockError, InvalidAnswer, NotFound, Unavailable
from ..model import Answers, Grant, Option, Request, Status, check_answers, issued_grant_to_dict
from ..principals import Principal, can_answer
from ..remote import RemoteBroker
from .jobs import (
    INBOX_STATUSES,
    answer_forms,
    asks_from_arguments,
    job_of,
    request_view,
    sent_fields,
    sent_types,
    status_filter,
    summary_view,
    type_descriptions,
)

__all__ = ["MAX_STATUS_WAIT", "Access", "Seat", "build_server"]

MAX_STATUS_WAIT = 300.0
"""The longest one `hitl_status` call waits for a job to settle, in seconds."""

RESOURCE = "interlock://requests/{request_id}"


@dataclass(frozen=True, slots=True)
class Seat:
    """What one tool call runs with: the broker, and who is calling through it."""

    broker: Broker
    caller: Principal
    person: str | None = None
    """On a store of this machine's (no server to name the caller): the person the caller
    is, as on the command line (this machine's user): asked when a request names nobody,
    and recorded as who answered, cancelled or told."""


Access = Callable[[Context], AbstractAsyncContextManager[Seat]]
"""Gives the seat of a tool call (the call's context tells an HTTP caller's token)."""


# -- the argument models, from the model's dataclasses ------------------------------------

_ASK_FIELDS = {
    "prompt": "The question, as the person will read it.",
    "id": "The key of this ask's answer; q1, q2, ... by position when omitted.",
    "required": "Whether an answer is needed (default true).",
    "options": "the options.",
    "multiline": "a multi-line box (default true).",
    "max_length": "the most characters allowed.",
    "min": "the fewest options to pick.",
    "max": "the most options to pick.",
    "grants": "capability grants {with, can, exp?} issued if approved and echoed.",
    "schema": "a JSON Schema of type object (draft 2020-12); the answer is an object valid against it.",
}
"""How each field an ask type sends is described to a model; a field that only some types
have is prefixed with their names ("text only: ...")."""

_OPTION_FIELDS = {
    "id": "What the answer names when this option is picked.",
    "label": "What the person reads; the id when omitted.",
    "grants": "Capability grants {with, can, exp?} issued if the person picks this option and echoes them.",
}

_GRANT_FIELDS = {"with_": "The resource, as the grant names it.", "can": "The ability, as the grant names it."}
"""A grant checked for is named by what it allows on what; its expiry is no part of that."""

_ARGUMENTS = ConfigDict(extra="forbid")


def _python_name(name: str) -> str:
    """An argument model's name for a dataclass field: the field's own, but a name pydantic's
    `BaseModel` keeps for itself (a form's `schema`) takes a trailing underscore."""
    return f"{name}_" if hasattr(BaseModel, name) else name


def _argument(hint: Any, spec: dataclasses.Field[Any], description: str | None, **rules: Any) -> tuple[Any, Any]:
    """A field of an argument model (named `_python_name(spec.name)`): required when the
    dataclass gives it no default, else optional (null or left out: the dataclass's default
    applies). A client sends it under the dataclass's name without a trailing underscore."""
    wire = spec.name.rstrip("_")
    alias = wire if wire != _python_name(spec.name) else None
    if spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
        return hint, Field(alias=alias, description=description, **rules)
    return hint | None, Field(None, alias=alias, description=description, **rules)


def _option_model() -> type[BaseModel]:
    hints = get_type_hints(Option)
    grants = {Sequence[Grant | Mapping[str, Any]]: list[dict[str, Any]]}
    fields: dict[str, Any] = {
        _python_name(f.name): _argument(grants.get(hints[f.name], hints[f.name]), f, _OPTION_FIELDS.get(f.name))
        for f in sent_fields(Option)
    }
    return create_model(
        "OptionIn", __config__=_ARGUMENTS, __doc__="One option of a choice or checkboxes ask.", **fields
    )


def _ask_model(option: type[BaseModel]) -> type[BaseModel]:
    """One flat model over every ask type a client sends (`asks_from_arguments` refuses a
    field its type does not have)."""
    wire = {
        Mapping[str, Any]: dict[str, Any],
        Sequence[Grant | Mapping[str, Any]]: list[dict[str, Any]],
        # a model made at run time is a valid type there, not one mypy can check
        Sequence[Option | str | Mapping[str, Any]]: list[option | str],  # type: ignore[valid-type]
    }
    types = sent_types()
    having: dict[str, list[str]] = {}
    specs: dict[str, tuple[Any, dataclasses.Field[Any]]] = {}
    for name, kind in types.items():
        hints = get_type_hints(kind)
        for spec in sent_fields(kind):
            having.setdefault(spec.name, []).append(name)
            specs.setdefault(spec.name, (wire.get(hints[spec.name], hints[spec.name]), spec))
    fields: dict[str, Any] = {"type": (Literal[tuple(types)], Field(description=type_descriptions()))}
    for field_name, (hint, spec) in specs.items():
        about = _ASK_FIELDS[field_name]
        if len(having[field_name]) < len(types):
            about = f"{' and '.join(having[field_name])} only: {about}"
        fields[_python_name(field_name)] = _argument(hint, spec, about)
    return create_model("AskIn", __config__=_ARGUMENTS, __doc__="One typed ask.", **fields)


def _grant_model() -> type[BaseModel]:
    hints = get_type_hints(Grant)
    fields: dict[str, Any] = {
        _python_name(f.name): _argument(hints[f.name], f, about, min_length=1)
        for f in dataclasses.fields(Grant)
        if (about := _GRANT_FIELDS.get(f.name)) is not None
    }
    config = ConfigDict(extra="forbid", populate_by_name=True)
    doc = "A capability: `can` (an ability) on `with` (a resource)."
    return create_model("GrantRef", __config__=config, __doc__=doc, **fields)


if TYPE_CHECKING:

    class OptionIn(BaseModel): ...

    class AskIn(BaseModel): ...

    class GrantRef(BaseModel): ...

    QuestionType = str
    InboxStatus = str

else:
    OptionIn = _option_model()
    AskIn = _ask_model(OptionIn)
    GrantRef = _grant_model()
    QuestionType = Literal[QUESTION_TYPES]
    InboxStatus = Literal[tuple(INBOX_STATUSES)]


_REQUEST = f"""Ask a human for decisions, approvals or information. Delivers a durable request \
into the target user's inbox and returns a job at once: status INPUT_REQUIRED until the human \
answers (COMPLETE, with the response: answers by ask id), rejects or the request expires \
(FAILED, with the reason), or it is cancelled (CANCELLED). Follow the job with hitl_status \
(pass wait to block until it settles); the job survives restarts, so keep its id. Asks are \
typed ({type_descriptions().rstrip(".")}). Approval asks and options may offer capability \
grants ({{with, can, exp?}}) that are issued ONLY if the human makes that choice and \
explicitly echoes the grant; exp is unix seconds, omit it for the venue's 7-day default or \
set it to null to request no expiry. Omit user to ask your own owner (or yourself, if you \
are a person); asking another person needs their permission. There is no framework timeout: \
set timeout (seconds) or expires_at (an RFC 3339 time) for time-sensitive asks and handle \
the FAILED outcome."""

_STATUS = """Report a job made by hitl_request (its id is the request id): INPUT_REQUIRED while \
the person has not answered, COMPLETE with the response (answers by ask id, the person's \
comment, any issued grants), FAILED with the reason (rejected or expired), or CANCELLED. \
With wait (seconds, at most 300), block until the job settles or the wait runs out, then \
report; call again to keep waiting."""

_LIST = """List the HITL requests in your own inbox: pending asks awaiting your decision and \
resolved ones, newest first (for an agent, which has no inbox: the requests it made). Filter by \
status: open, answered, rejected, expired, cancelled. Read a full request (asks, options, offered \
grants) with hitl_read or the resource interlock://requests/<id>."""

_READ = """Read one whole request you made or that is in your inbox: its title and description, \
every ask with its type, options and offered grants, how to answer each, and its job status."""

_RESPOND = f"""Resolve a HITL request in YOUR OWN inbox: answer it or reject it (only a person \
may). Answering completes the requester's job with your answers; rejecting fails it with your \
comment as the reason. Answers, by ask id: {answer_forms()}. A bad answer changes nothing: \
the request stays open and the error says which ask and why. If the request offered \
capability grants, echo the ones you approve in 'grants': the venue issues exactly the \
intersection of what you echo and what your choices actually triggered (approved approval \
asks, selected options); echoing anything else fails the response."""

_CANCEL = """Withdraw a request you made that nobody has answered yet; its job becomes \
CANCELLED with your reason."""

_GRANTS = """List capability grants: the ones you hold (role held, the default), issued to \
you when a person approved an offer and echoed it, or the ones you gave (role given). Each \
says who (issuer) lets whom (audience) do what (can) on what (with) until when (expires_at, \
null for never); on a server each carries a signed token to show an application that \
checks grants. issuer_cut_off true: its issuer was cut off (every token of theirs revoked), so \
it authorizes nothing until they are given a token again."""

_GRANT_CHECK = """Check whether you hold a live (unrevoked, unexpired) grant {with, can}, \
optionally from one issuer; returns the grant when you do."""

_GRANT_REVOKE = """Revoke a grant you gave (or, as its holder, one you no longer want); it \
stops working at once."""

_HUMAN_INPUT = """Ask the human for input and wait for the answer (blocking). question_type: \
CONFIRM (yes/no), FREE_FORM (text), MULTIPLE_CHOICE (one of choices), MULTI_SELECT (several \
of choices) or FORM (choices are the field names). Returns {"choice": <answer>, "steering": \
<an optional note from the human>}. Gives up after timeout seconds (300 by default); for \
asks that may take longer, use hitl_request and hitl_status."""

_INFORM = """Tell the user how the work is going, without waiting for an answer. The update \
shows in their inbox and event stream; returns a receipt."""


def _failed(exc: InterlockError) -> ToolError:
    if isinstance(exc, InvalidAnswer):
        said = str(exc)  # (said once: the check's own words may name the ask, or what changed)
        where = f" (ask {exc.ask_id!r})" if exc.ask_id and f"ask {exc.ask_id!r}" not in said else ""
        unchanged = "" if "nothing was answered" in said else "nothing changed, "
        return ToolError(f"the answer does not fit{where}: {said}; {unchanged}the request is still open")
    if isinstance(exc, Unavailable):
        return ToolError(f"{exc}; try the same call again in a few seconds")
    return ToolError(str(exc))


@contextlib.asynccontextmanager
async def _seated(ctx: Context) -> AsyncIterator[Seat]:
    """The call's seat, from the server's access (its lifespan state); what interlock raises
    inside becomes an error the model reads."""
    access = cast(Access, ctx.request_context.lifespan_context)
    try:
        async with access(ctx) as seat:
            yield seat
    except InterlockError as exc:
        raise _failed(exc) from exc
    except ConnectionError as exc:
        raise ToolError(f"interlock is not reachable: {exc}") from exc


# -- the tools ------------------------------------------------------------------------------


async def hitl_request(
    ctx: Context,
    asks: Annotated[list[AskIn], Field(min_length=1, description="What to ask, in order.")],
    user: Annotated[str | None, Field(description="Whom to ask; omit to ask your own owner.")] = None,
    title: Annotated[str, Field(description="A one-line summary shown in the inbox.")] = "",
    description: Annotated[str, Field(description="Background the person needs (markdown).")] = "",
    timeout: Annotated[
        float | None, Field(gt=0, description="Seconds until the request expires; none when omitted.")
    ] = None,
    expires_at: Annotated[
        str | None,
        Field(
            description="When the request expires: an RFC 3339 date-time with its offset, like "
            "2030-01-31T17:00:00Z. With timeout too, the earlier of the two."
        ),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        Field(description="Send the same key when retrying: the first request's job comes back, not a new ask."),
    ] = None,
) -> dict[str, Any]:
    try:
        deadline = None if expires_at is None else instant(expires_at)
    except ValueError as exc:
        raise ToolError(f"expires_at: {exc}") from None
    async with _seated(ctx) as seat:
        shaped = asks_from_arguments([a.model_dump(exclude_unset=True, by_alias=True) for a in asks])
        built = await seat.broker.build_asks(shaped)
        request = await seat.broker.create(
            built,
            to=user if user is not None else seat.person,
            title=title,
            details=description,
            timeout=timeout,
            expires_at=deadline,
            idempotency_key=idempotency_key,
            tool_name="hitl_request",
        )
        return job_of(request)


async def hitl_status(
    ctx: Context,
    job: Annotated[str, Field(description="The job id hitl_request returned.")],
    wait: Annotated[float, Field(ge=0, le=MAX_STATUS_WAIT, description="Seconds to wait for the job to settle.")] = 0,
) -> dict[str, Any]:
    async with _seated(ctx) as seat:
        request = await seat.broker.get(job)
        if request.status is Status.PENDING and wait > 0:
            request = await seat.broker.watch(job, timeout=wait)
        return job_of(request)


async def hitl_list(
    ctx: Context,
    status: Annotated[InboxStatus | None, Field(description="Only requests in this state.")] = None,
    limit: Annotated[int, Field(ge=1, le=200, description="At most this many.")] = 50,
    cursor: Annotated[str | None, Field(description="next_cursor of the previous page.")] = None,
) -> dict[str, Any]:
    async with _seated(ctx) as seat:
        me = seat.caller
        if me.kind == "agent":  # only people are asked: an agent's list is what it asked
            whose: dict[str, Any] = {"requester": me.name}
        else:  # a member's inbox holds their teams' requests too
            whose = {"recipient": None if me.kind == "admin" else me.name}
            whose["teams"] = sorted(me.teams) if me.kind == "human" else ()
        page = await seat.broker.list(**whose, status=status_filter(status), after=cursor, limit=limit)
        return {"requests": [summary_view(r) for r in page.items], "next_cursor": page.next_cursor}


async def hitl_read(
    ctx: Context, id: Annotated[str, Field(description="The request id, as hitl_list shows it.")]
) -> dict[str, Any]:
    async with _seated(ctx) as seat:
        return request_view(await seat.broker.get(id))


async def request_resource(request_id: str, ctx: Context) -> dict[str, Any]:
    """The resource `interlock://requests/{request_id}`. A read that fails says why, as
    `hitl_read` does (a request unknown is the protocol's "not found"): anything else a
    resource raises reaches the client as a bare "Error creating resource from template"."""
    try:
        async with _seated(ctx) as seat:
            return request_view(await seat.broker.get(request_id))
    except ToolError as exc:
        unknown = isinstance(exc.__cause__, NotFound)
        raise (ResourceNotFoundError if unknown else ResourceError)(str(exc)) from None


async def hitl_respond(
    ctx: Context,
    id: Annotated[str, Field(description="The request id, in your own inbox.")],
    action: Annotated[Literal["answer", "reject"], Field(description="Answer it, or reject it.")] = "answer",
    answers: Annotated[
        dict[str, Any] | None, Field(description="To answer: the answer of each ask, by ask id.")
    ] = None,
    comment: Annotated[str, Field(description="A note to the requester; the reason, when rejecting.")] = "",
    grants: Annotated[
        list[dict[str, Any]] | None,
        Field(description="The offered grants you consent to, echoed as offered ({with, can, exp})."),
    ] = None,
) -> dict[str, Any]:
    async with _seated(ctx) as seat:
        me = seat.caller
        request = await seat.broker.get(id)
        # A server decides whose inbox it is (a member of the team a request is to answers
        # it too, and the caller a token names here carries no teams); a store, this rule.
        venue = isinstance(seat.broker, RemoteBroker)
        if me.kind not in ("admin", "human") or not (venue or can_answer(me, request)):
            raise ToolError("you may answer only requests in your own inbox, and only as a person")
        if action == "reject" and grants:
            raise ToolError("grants are echoed only when answering: a rejection issues none")
        if action == "reject" and answers:
            raise ToolError("answers go with action 'answer': a rejection takes only its reason, as the comment")
        if action == "answer" and answers is None:
            raise ToolError("give 'answers' (by ask id) to answer, or action 'reject'")
        if action == "reject":
            done = await seat.broker.reject(id, comment, by=_by(seat), via="mcp")
        else:
            await _approvers_own(seat, request, answers or {})
            done = await seat.broker.resolve(
                id, Answers(answers or {}), by=_by(seat), via="mcp", comment=comment, grants=grants
            )
        settled = await seat.broker.get(id)
        if not done:
            raise _failed(AlreadySettled(id, settled.status.value))
        return request_view(settled)


async def hitl_cancel(
    ctx: Context,
    job: Annotated[str, Field(description="The job id hitl_request returned.")],
    reason: Annotated[str, Field(description="Why it is no longer needed.")] = "",
) -> dict[str, Any]:
    async with _seated(ctx) as seat:
        done = await seat.broker.cancel(job, reason, by=_by(seat), via="mcp")
        request = await seat.broker.get(job)
        if not done:
            raise _failed(AlreadySettled(job, request.status.value))
        return job_of(request)


async def hitl_grants(
    ctx: Context,
    role: Annotated[
        Literal["held", "given"], Field(description="held: grants to you; given: grants you issued.")
    ] = "held",
    live: Annotated[
        bool, Field(description="Only grants in force: neither revoked nor expired, nor given by a person cut off.")
    ] = True,
    limit: Annotated[int, Field(ge=1, le=100, description="At most this many.")] = 20,
    cursor: Annotated[str | None, Field(description="next_cursor of the previous page.")] = None,
) -> dict[str, Any]:
    async with _seated(ctx) as seat:
        me = seat.caller
        mine = None if me.kind == "admin" else me.name
        page = await seat.broker.list_grants(
            audience=mine if role == "held" else None,
            issuer=mine if role == "given" else None,
            live=live,
            after=cursor,
            limit=limit,
        )
        items = [issued_grant_to_dict(grant) for grant in page.items]  # (as they are now: `issuer_cut_off`)
        if isinstance(seat.broker, RemoteBroker):  # the venue signs them: a token to show others
            for item in items:
                item["token"] = await seat.broker.grant_token(item["id"])
        return {"grants": items, "next_cursor": page.next_cursor}


async def hitl_grant_check(
    ctx: Context,
    grant: Annotated[GrantRef, Field(description="The grant to look for: {with, can}.")],
    issuer: Annotated[str | None, Field(description="Only a grant from this person.")] = None,
) -> dict[str, Any]:
    wanted = grant.model_dump(by_alias=True)
    async with _seated(ctx) as seat:
        me = seat.caller
        found = await seat.broker.check_grant(
            None if me.kind == "admin" else me.name, wanted["with"], wanted["can"], issuer=issuer
        )
        return {"granted": found is not None, "grant": issued_grant_to_dict(found) if found is not None else None}


async def hitl_grant_revoke(
    ctx: Context, id: Annotated[str, Field(description="The grant id, as hitl_grants shows it.")]
) -> dict[str, Any]:
    async with _seated(ctx) as seat:
        await seat.broker.get_grant(id)  # an unknown id is an error, as over HTTP; a revoked one, false
        revoked = await seat.broker.revoke_grant(id, by=_by(seat))
        return {"id": id, "revoked": revoked}


_HUMAN_INPUT_TOOL = request_human_input_tool()


async def request_human_input(
    ctx: Context,
    question: Annotated[str, Field(min_length=1, max_length=8000, description="The question, as asked.")],
    question_type: Annotated[QuestionType, Field(description="How the human answers.")] = "FREE_FORM",
    choices: Annotated[
        list[str] | None, Field(description="The options (MULTIPLE_CHOICE, MULTI_SELECT) or field names (FORM).")
    ] = None,
    context_data: Annotated[dict[str, Any] | None, Field(description="Facts the human needs to answer.")] = None,
    timeout: Annotated[float | None, Field(gt=0, description="Seconds to wait (300 by default).")] = None,
) -> dict[str, Any]:
    arguments: dict[str, Any] = {"question": question, "question_type": question_type}
    optional = {"choices": choices, "context_data": context_data, "timeout": timeout}
    arguments |= {k: v for k, v in optional.items() if v is not None}
    definition = _HUMAN_INPUT_TOOL
    async with _seated(ctx) as seat:
        tools = HumanInputTools(seat.broker, [definition.name], definitions=[definition], timeout=DEFAULT_INPUT_TIMEOUT)
        result = await tools.ask(ToolCall(definition.name, arguments, to=seat.person))
    if result.is_error or result.refused:
        raise ToolError(result.content)
    # {"choice": ..., "steering": ...} as the tool's structured result (its text is the same JSON)
    return cast(dict[str, Any], json.loads(result.content))


async def inform_user(
    ctx: Context,
    message: Annotated[str, Field(min_length=1, description="The update, as the user will read it.")],
    data: Annotated[dict[str, Any] | None, Field(description="Structured details for the inbox.")] = None,
) -> dict[str, Any]:
    async with _seated(ctx) as seat:
        event = await seat.broker.inform(message, data=data, by=_by(seat), to=seat.person)
    return {"delivered": True, "receipt": event.id, "at": event.at.isoformat()}


_TOOLS: tuple[tuple[Callable[..., Any], str, ToolAnnotations | None], ...] = (
    (hitl_request, _REQUEST, ToolAnnotations(destructive_hint=False, idempotent_hint=False)),
    (hitl_status, _STATUS, ToolAnnotations(read_only_hint=True)),
    (hitl_list, _LIST, ToolAnnotations(read_only_hint=True)),
    (hitl_read, _READ, ToolAnnotations(read_only_hint=True)),
    (hitl_respond, _RESPOND, ToolAnnotations(destructive_hint=True, idempotent_hint=False)),
    (hitl_cancel, _CANCEL, ToolAnnotations(destructive_hint=True)),
    (hitl_grants, _GRANTS, ToolAnnotations(read_only_hint=True)),
    (hitl_grant_check, _GRANT_CHECK, ToolAnnotations(read_only_hint=True)),
    (hitl_grant_revoke, _GRANT_REVOKE, ToolAnnotations(destructive_hint=True, idempotent_hint=True)),
    (request_human_input, _HUMAN_INPUT, None),
    (inform_user, _INFORM, ToolAnnotations(destructive_hint=False)),
)
"""Each tool, what a model reads about it, and its hints."""


@functools.cache
def _tool_definitions() -> tuple[Tool, ...]:
    """The tools as the SDK describes them (their argument models and JSON Schemas), made
    once per process: they hold no state (each call takes its access from its context), and
    making them is nearly all the time a server takes to build (about 20 ms), which
    `interlock serve` and every app made in a process would otherwise pay again."""
    return tuple(
        _strict(Tool.from_function(tool, description=description, annotations=hints))
        for tool, description, hints in _TOOLS
    )


def _strict(tool: Tool) -> Tool:
    """`tool` refusing arguments it does not take, as the HTTP API refuses fields it does not
    know: a model's `timout` would otherwise be dropped, and its request never expire. The
    JSON Schema says so too (`additionalProperties: false`)."""
    loose = tool.fn_metadata.arg_model
    strict: type[BaseModel] = type(
        loose.__name__, (loose,), {"model_config": ConfigDict(**loose.model_config, extra="forbid")}
    )
    metadata = tool.fn_metadata.model_copy(update={"arg_model": strict})
    return tool.model_copy(update={"fn_metadata": metadata, "parameters": strict.model_json_schema(by_alias=True)})


def build_server(access: Access, *, name: str = "interlock") -> MCPServer[Access]:
    """The MCP server over `access`: the tools `hitl_request`, `hitl_status`, `hitl_list`,
    `hitl_read`, `hitl_respond`, `hitl_cancel`, `hitl_grants`, `hitl_grant_check`,
    `hitl_grant_revoke`, `request_human_input`, `inform_user`, and
    the resource `interlock://requests/{request_id}`."""

    @contextlib.asynccontextmanager
    async def lifespan(_: MCPServer[Access]) -> AsyncIterator[Access]:
        yield access

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    server: MCPServer[Access] = MCPServer(
        name,
        instructions=(
            "interlock routes questions to people. Ask with hitl_request (returns a job) or "
            "request_human_input (waits); follow jobs with hitl_status; people answer their "
            "own inbox with hitl_list, hitl_read and hitl_respond."
        ),
        version=__version__,
        log_level="WARNING",
        lifespan=lifespan,
        tools=list(_tool_definitions()),
    )
    # The SDK sets up the root logger when a server is made (a handler of its own, which
    # would bypass the redaction `interlock serve` puts on every handler): logging is the
    # host's to configure, so put it back as it was.
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    server.resource(
        RESOURCE,
        name="request",
        description="One whole request: its asks, options, offered grants and job status (JSON).",
        mime_type="application/json",
    )(request_resource)
    return server


async def _approvers_own(seat: Seat, request: Request, answers: dict[str, Any]) -> None:
    """On a local store, where the caller may answer anything as this machine's user, refuse
    before anything is recorded a yes to someone else's gate approval: the gate takes a yes
    only from its approver, so stored, it would be read as a refusal, and the approver
    could no longer answer (the command line refuses it alike). A no stops the call
    whoever says it."""
    decision = decision_ask(request)
    if seat.person is None or decision is None:
        return
    try:
        yes = check_answers(request, Answers(answers), limits=seat.broker.limits).get(decision.id) is True
    except InvalidAnswer:
        return  # the answer is refused as it is, by the broker
    refused = await refused_yes(seat.broker, request, seat.person) if yes else None
    if refused is not None:
        said, _ = refused
        raise ToolError(f"{said}; nothing changed, the request is still open")


def _by(seat: Seat) -> str | None:
    """Who a settlement is recorded as made by: the caller (the server records a token's
    principal itself), or when anonymous, the person at a local store (else nobody)."""
    return seat.person if seat.caller.kind == "admin" else seat.caller.name
