"""Follow-up messages over HTTP, under /api/v1/runs/{run_id}: send a message to a busy run
(or to a thread's busy run, /api/v1/threads/{thread_id}/messages), list what it holds,
withdraw a held message, and (the run's agent) take them for delivery.

The send answers as Novo's does, so a Novo client reads it unchanged: a message to a run
that has not ended is never dropped, and the answer is always 409 `thread_busy`, saying
what became of it in `details`: `resolved_interaction_id` (the message decided the run's
pending approval), `queued: true` with `followup_id` (it is held), or neither (nothing
was held: the run holds as many messages as it may). A message to a run that has ended
is 409 `run_conflict`: nothing is held and no run is started.

Who may send: whoever may see the run (the agent that started it, that agent's owner,
the people its requests go to, not an agent they go to); a message decides an approval
only for one who may answer it. Each of them sees what the run holds, but withdraws only
their own messages. Taking the held messages is the run's own agent's.
"""

from __future__ import annotations

from typing import Any, NoReturn

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from ..followups import MAX_FOLLOWUP_LENGTH, Sent, followup_to_dict
from ..model import Run
from ..principals import can_answer
from .common import ApiError, Caller, TheBroker, describe, may_withdraw, problems_for, rate_limited, runs_filter
from .runs import own_run, visible_run
from .schemas import Problem, Strict

__all__ = ["router"]

router = APIRouter(tags=["runs"])

PROBLEMS = {404: ("not_found", "followup_not_found"), 409: ("thread_busy", "run_conflict")}
"""The codes of the follow-up routes that differ from `PROBLEM_CODES`."""

_problems = problems_for(PROBLEMS)


class MessageBody(Strict):
    text: str = Field(
        min_length=1,
        max_length=MAX_FOLLOWUP_LENGTH,
        pattern=r"\S",
        description="the message, verbatim: not empty, not only spaces",
    )
    by: str | None = Field(None, description="who sends it (the operator only; else the token's principal)")


class TakeBody(Strict):
    worker: str | None = Field(None, description="the worker holding the run, when a worker takes them")


class FollowupModel(BaseModel):
    id: str
    text: str = Field(description="the message, verbatim")
    queuedAt: str = Field(description="when it was held")  # Novo's name on the wire
    by: str | None = Field(description="who sent it")


class FollowupList(BaseModel):
    items: list[FollowupModel] = Field(description="oldest first")


class BusyDetails(BaseModel):
    """What became of a message sent to a busy run: held, or it decided the run's pending
    approval; no member at all when it was not held."""

    queued: bool | None = Field(None, description="true: the message is held for the agent's next turn")
    followup_id: str | None = Field(
        None, description="the held message's id (`DELETE /runs/{run_id}/followups/{followup_id}` withdraws it)"
    )
    resolved_interaction_id: str | None = Field(
        None, description="the pending approval the message decided (`approve` / `deny`, `1` / `2`)"
    )


class MessageConflict(Problem):
    """The answer to a message sent to a run: 409 `thread_busy` while the run has not
    ended, `details` saying what became of the message; 409 `run_conflict` (with `run_id`
    and `current_status`) once it has, and nothing was held."""

    code: str = Field(description="`thread_busy` or `run_conflict`", json_schema_extra={"enum": list(PROBLEMS[409])})
    details: BusyDetails | None = Field(
        None,
        description="`thread_busy`: held (`queued`, `followup_id`), decided the run's pending approval "
        "(`resolved_interaction_id`), or not held (empty: the run holds as many messages as it may)",
    )


@router.post(
    "/runs/{run_id}/messages",
    status_code=409,
    responses={
        409: {"model": MessageConflict, "description": describe(409, PROBLEMS[409])},
        **_problems(400, 403, 404, 413, 422, 429),
    },
    dependencies=[Depends(rate_limited("updates", "messages sent"))],
)
async def send_message(run_id: str, body: MessageBody, caller: Caller, broker: TheBroker) -> JSONResponse:
    """Send a message to a run that is busy. Parked on an approval, `approve` / `deny`
    (or `1` / `2`) decides it; anything else, and everything sent while the run works or
    waits on a question, is held and delivered to the agent as its next user turn."""
    run_id = (await visible_run(broker, caller, run_id)).id
    by = body.by if caller.kind == "admin" and body.by is not None else caller.name
    _busy(await broker.send_message(run_id, body.text, by=by, may_answer=lambda r: can_answer(caller, r)))


@router.post(
    "/threads/{thread_id}/messages",
    status_code=409,
    responses={
        409: {"model": MessageConflict, "description": describe(409, PROBLEMS[409])},
        **_problems(400, 404, 413, 422, 429),
    },
    dependencies=[Depends(rate_limited("updates", "messages sent"))],
)
async def send_to_thread(thread_id: str, body: MessageBody, caller: Caller, broker: TheBroker) -> JSONResponse:
    """Send a message to the busy run of a thread (a session): its newest run you may see
    (an agent's own; a person's own agents', or one asking them or a team of theirs) that
    has not ended, as `POST /runs/{id}/messages` does; a person's own agents' runs first (a
    session id is any agent's to use, and another agent asking you in the same one must
    not take messages meant for yours). 404 when no run of the thread is busy: nothing
    is held and no run is started."""
    by = body.by if caller.kind == "admin" and body.by is not None else caller.name

    async def own(run: Run) -> bool:  # a run of one of the person's own agents
        agent = await broker.get_principal(run.requester) if run.requester is not None else None
        return agent is not None and agent.owner == caller.name

    sent = await broker.send_to_thread(
        thread_id,
        body.text,
        by=by,
        **runs_filter(caller),
        may_answer=lambda r: can_answer(caller, r),
        prefer=own if caller.kind == "human" else None,
    )
    _busy(sent)


def _busy(sent: Sent) -> NoReturn:
    """The answer to a send: always 409 `thread_busy`, saying what became of the message."""
    detail, details = busy_problem(sent)
    raise ApiError("thread_busy", detail, details=details)


def busy_problem(sent: Sent) -> tuple[str, dict[str, Any]]:
    """The `detail` and `details` of a send's 409 `thread_busy` (see `MessageConflict`)."""
    details: dict[str, Any]
    if sent.resolved is not None:
        details = {"resolved_interaction_id": sent.resolved}
        detail = "the run is busy: your message decided its pending approval"
    elif sent.followup is not None:
        details = {"queued": True, "followup_id": sent.followup.id}
        detail = "the run is busy: your message is held and goes to the agent at its next turn"
    else:
        details = {}
        detail = "the run is busy and holds as many messages as it may: nothing was held; send it again later"
    return detail, details


@router.get("/runs/{run_id}/followups", response_model=FollowupList, responses=_problems(403, 404, 422))
async def list_followups(run_id: str, caller: Caller, broker: TheBroker) -> dict[str, Any]:
    """The messages held for the run, oldest first (the run's `queuedFollowups`); on a
    run that has ended, the ones it never delivered, read-only."""
    run_id = (await visible_run(broker, caller, run_id)).id
    return {"items": [followup_to_dict(f) for f in await broker.list_followups(run_id)]}


@router.delete(
    "/runs/{run_id}/followups/{followup_id}", response_model=FollowupModel, responses=_problems(403, 404, 422)
)
async def withdraw_followup(run_id: str, followup_id: str, caller: Caller, broker: TheBroker) -> dict[str, Any]:
    """Withdraw a message you sent before it is delivered (403 for another's: everyone
    who may see the run sees what it holds); 404 `followup_not_found` once it is gone
    (withdrawn, taken for delivery, or read-only on a run that has ended)."""
    run_id = (await visible_run(broker, caller, run_id)).id
    if not await may_withdraw(broker, caller, run_id, followup_id):
        raise ApiError("forbidden", "only whoever sent a message may withdraw it")
    return followup_to_dict(await broker.withdraw_followup(run_id, followup_id, by=caller.name))


@router.post(
    "/runs/{run_id}/followups/take", response_model=FollowupList, responses=_problems(400, 403, 404, 409, 413, 422)
)
async def take_followups(
    run_id: str, caller: Caller, broker: TheBroker, body: TakeBody | None = None
) -> dict[str, Any]:
    """At a turn boundary of a running run, its agent takes every held message for
    delivery, oldest first; each gets its `followup_replayed` event. A run a worker holds
    gives its messages only to that worker (`worker`): 409 `run_conflict` otherwise,
    naming the worker, whether or not any are held."""
    run_id = (await own_run(broker, caller, run_id, "takes a run's messages")).id
    worker = body.worker if body is not None else None
    return {"items": [followup_to_dict(f) for f in await broker.take_followups(run_id, worker=worker)]}
