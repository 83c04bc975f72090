"""The examples of the OpenAPI document: one for every request body and for the main
answers (a request, a page of requests, an interaction, a run, an event, a grant, a
delivery, a problem, a message's 409), each a value a client can copy.

None is written out by hand as JSON. A body's example is an instance of its own model,
checked by pydantic when it is made; an answer's is what the handlers send for a real
object of the model (`request_to_dict` of a `Request`, `run_to_dict` of a `Run`, the
body of `problem`), so an example cannot drift from the schema or the wire. Their ids
and times are fixed, so the document is the same on every build (and every node).
`add_examples` puts them in the document: under `examples` in the component schemas
they belong to, and as the media type's `example` for the bodies that have no model of
their own (the routing document).
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel

from ..cursors import issued
from ..followups import Followup, Sent
from ..model import Choice as ChoiceAsk
from ..model import (
    Confirm,
    Event,
    Grant,
    IssuedGrant,
    Option,
    Origin,
    Request,
    Response,
    Run,
    RunStatus,
    Status,
    Text,
    ask_to_dict,
    build_request,
    issued_grant_to_dict,
    origin_to_dict,
    request_to_dict,
    run_to_dict,
)
from ..outbox import Delivery, delivery_to_dict
from ..principals import Principal
from ..routing import routing_from_dict
from . import followups, grants, interactions, runs, teams
from .common import event_to_dict, problem
from .deliveries import shown_to
from .schemas import (
    AnswerBody,
    BatchAnswerBody,
    CancelBody,
    CloseBody,
    ConsumeBody,
    CreateBody,
    InformBody,
    RejectBody,
    ReopenBody,
)

__all__ = ["add_examples", "body_examples", "response_examples", "ROUTING"]

AT = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
REQUEST_ID = "01a24b4d2a0b3758ccc2025dea1b8a44"
QUESTION_ID = "01a24b4d2a0b3758ccc2025dea1b8a45"
GRANT_ID = "01a24b4d2a0b3758ccc2025dea1b9c01"
RUN_ID = "deploy-bot:release-7"
DEPLOY = Grant("repo:web", "deploy")

ROUTING: dict[str, Any] = {
    "inbox_url": "https://interlock.example.com",
    "channels": {"hook": {"type": "webhook", "url": "https://hooks.example.com/interlock", "secret": "***"}},
    "default": {"channels": ["hook"]},
    "recipients": {
        "alice": {"channels": ["hook"], "remind_before": "10m", "escalate_after": "30m", "escalate_to": "ops"}
    },
    "teams": {"ops": {"members": ["bob", "carol"]}},
}
"""`PUT /routing`'s example: a routing document, as `routing_from_dict` takes it."""


def _approval() -> Request:
    """A deploy bot's approval to alice, pending: a tool call's arguments and a grant offered."""
    made = build_request(
        Confirm("Deploy web v2.3 to production?", id="deploy", grants=[DEPLOY]),
        kind="approval",
        title="Deploy web v2.3",
        details="The canary has run for an hour with **no errors**.",
        to="alice",
        requester="deploy-bot",
        origin=Origin(
            session="release-2026-12",
            agent="deploy-bot",
            tool_call_id="call_7",
            tool_name="deploy",
            arguments={"service": "web", "version": "2.3"},
            run=RUN_ID,
        ),
        expires_at=AT + timedelta(hours=1),
        idempotency_key="deploy-web-2.3",
        now=AT,
    )
    return replace(made, id=REQUEST_ID)


def _question() -> Request:
    made = build_request(
        [
            ChoiceAsk("Which region first?", [Option("eu", "Europe"), Option("us", "United States")], id="region"),
            Text("Anything the on-call should know?", id="note", required=False),
        ],
        title="Rollout order",
        to="alice",
        requester="deploy-bot",
        origin=Origin(session="release-2026-12", agent="deploy-bot"),
        now=AT - timedelta(minutes=5),
    )
    return replace(made, id=QUESTION_ID)


def _grant() -> IssuedGrant:
    return IssuedGrant(
        id=GRANT_ID,
        with_=DEPLOY.with_,
        can=DEPLOY.can,
        issuer="alice",
        audience="deploy-bot",
        issued_at=AT + timedelta(minutes=3),
        expires_at=AT + timedelta(days=7, minutes=3),
        request_id=REQUEST_ID,
        ask_id="deploy",
    )


def _answered() -> Request:
    response = Response(
        AT + timedelta(minutes=3),
        {"deploy": True},
        by="alice",
        via="api",
        reason="Canary looks clean.",
        grants=(_grant(),),
    )
    return replace(_approval(), status=Status.ANSWERED, response=response, expires_at=None)


def _run() -> Run:
    return Run(
        id=RUN_ID,
        agent="deploy-bot",
        created_at=AT - timedelta(minutes=10),
        updated_at=AT,
        status=RunStatus.WAITING_FOR_APPROVAL,
        session="release-2026-12",
        requester="deploy-bot",
        expires_at=AT + timedelta(hours=1),
        waiting_on=(REQUEST_ID,),
    )


def _delivery() -> Delivery:
    return Delivery(
        id="dlv_9f2c4e61b0a84d7c93e5f1a2b3c4d5e6",
        notice=1041,
        request_id=REQUEST_ID,
        kind="request",
        event="created",
        recipient="alice",
        channel="hook",
        address="https://hooks.example.com/interlock",
        due_at=AT,
        created_at=AT,
        status="delivered",
        attempts=1,
        delivered_at=AT + timedelta(seconds=1),
    )


def _body(model: BaseModel) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True)


def body_examples() -> dict[type[BaseModel], BaseModel]:
    """An example of each request body's model, as an instance of it."""
    approval = _approval()
    create = CreateBody.model_validate(
        {
            "kind": approval.kind,
            "asks": [ask_to_dict(ask) for ask in approval.asks],
            "to": approval.to,
            "title": approval.title,
            "details": approval.details,
            "timeout": 3600,
            "idempotency_key": approval.idempotency_key,
            "origin": origin_to_dict(replace(approval.origin, run=None)),  # a run of its own: POST /runs
        }
    )
    novo = [{"requestId": "region", "optionId": "eu"}, {"requestId": "note", "text": "Page me first."}]
    resolve = {"inputResponses": novo, "reason": "Europe is quieter now."}
    bodies: list[tuple[type[BaseModel], dict[str, Any]]] = [
        (
            AnswerBody,
            {
                "answers": {"deploy": True},
                "reason": "Canary looks clean.",
                "grants": [{"with": DEPLOY.with_, "can": DEPLOY.can}],
            },
        ),
        (
            BatchAnswerBody,
            {"items": [{"id": REQUEST_ID, "answer": True}, {"id": QUESTION_ID, "answers": {"region": "eu"}}]},
        ),
        (RejectBody, {"reason": "Not during the freeze."}),
        (CancelBody, {"reason": "The release was called off.", "cause": "withdrawn"}),
        (ConsumeBody, {}),
        (CloseBody, {"channel": "release-2026-12"}),
        (ReopenBody, {"channel": "release-2026-12"}),
        (InformBody, {"message": "Deployed web v2.3 to Europe.", "to": "alice", "session": "release-2026-12"}),
        (interactions.ResolveBody, resolve),
        (
            interactions.BatchResolveBody,
            {"items": [{"id": QUESTION_ID, **resolve}, {"id": REQUEST_ID, "cancel": True, "reason": "Not now."}]},
        ),
        (grants.GiveBody, {"to": "deploy-bot", "with": "repo:web", "can": "read", "exp": 1796117400}),
        (grants.CheckBody, {"with": "repo:web", "can": "deploy", "audience": "deploy-bot"}),
        (grants.VerifyBody, {"token": "eyJhbGciOiJFZERTQSIsImtpZCI6Ii4uLiJ9.eyJzdWIiOiJkZXBsb3ktYm90In0.c2lnbmF0dXJl"}),
        (grants.RevokeBody, {}),
        (runs.StartBody, {"agent": "deploy-bot", "session": "release-2026-12", "run_id": "release-7"}),
        (
            runs.ParkBody,
            {
                "state": {"messages": [{"role": "user", "content": "Ship web v2.3"}]},
                "waiting_on": [REQUEST_ID],
                "status": "waiting_for_approval",
            },
        ),
        (runs.ClaimBody, {"agents": ["deploy-bot"], "worker": "worker-1", "lease": 60.0}),
        (runs.LeaseBody, {"worker": "worker-1", "lease": 60.0}),
        (runs.CompleteBody, {"result": {"deployed": "2.3"}, "worker": "worker-1"}),
        (runs.FailBody, {"error": "the deploy tool timed out", "worker": "worker-1"}),
        (runs.CancelRunBody, {"reason": "cancelled_by_user"}),
        (followups.MessageBody, {"text": "Wait for the EU morning, please."}),
        (followups.TakeBody, {"worker": "worker-1"}),
        (teams.Members, {"members": ["alice", "bob"]}),
    ]
    return {CreateBody: create} | {model: model.model_validate(body) for model, body in bodies}


def response_examples() -> dict[str, Any]:
    """An example of the main answers, by the name of their component schema: what the
    handlers send for real objects."""
    pending, answered, question, run = _approval(), _answered(), _question(), _run()
    event = Event(1042, "answered", AT + timedelta(minutes=3), REQUEST_ID, answered)
    refused = problem("invalid_answer", "deploy: answer yes or no (true or false)", ask_id="deploy")
    held = Followup("01a24b4d2f9c1e2a7b3c4d5e6f708192", RUN_ID, "Wait for the EU morning, please.", AT, "alice")
    detail, details = followups.busy_problem(Sent(RUN_ID, followup=held))
    grant = issued_grant_to_dict(_grant())
    delivery = delivery_to_dict(_delivery())
    return {
        "RequestModel": request_to_dict(pending),
        "RequestPage": {
            "items": [request_to_dict(answered), request_to_dict(question)],
            "next_cursor": issued("requests", question.id),
        },
        "InteractionModel": interactions.interaction(pending),
        "InteractionPage": {"items": [interactions.interaction(question)], "next_cursor": None},
        "RunModel": run_to_dict(run, state=False),
        "RunPageModel": {"items": [run_to_dict(run, state=False)], "next_cursor": None},
        "EventModel": event_to_dict(event),
        "EventPage": {"events": [event_to_dict(event)], "last_event_id": event.id, "cut": False},
        "Problem": json.loads(bytes(refused.body)),
        "MessageConflict": json.loads(bytes(problem("thread_busy", detail, details=details).body)),
        "IssuedGrantModel": grant,
        "GrantList": {"items": [grant], "next_cursor": None},
        "DeliveryModel": delivery,
        "DeliveryPage": {
            "items": [shown_to(Principal("alice", "human"), _delivery())],
            "next_cursor": None,
            "next": None,
        },
    }


def add_examples(document: dict[str, Any]) -> None:
    """Put the examples in an OpenAPI document of the API (see the module's docstring)."""
    components = document.get("components", {}).get("schemas", {})
    for model, example in body_examples().items():
        components[model.__name__]["examples"] = [_body(example)]
    for name, example in response_examples().items():
        components[name]["examples"] = [example]
    routing = document["paths"]["/api/v1/routing"]["put"]["requestBody"]["content"]["application/json"]
    routing_from_dict(ROUTING)  # what PUT /routing takes (with a secret kept as `***`)
    routing["example"] = ROUTING
