"""The approval policies API under /api/v1/approval-policies: an agent's declarative
approval policy (for its whole toolset, or for one tool server), set, read, listed and
deleted, with Novo's field names (`approval`, `gatedTools`, `autoAllow`, `hook`).

Who may do what: the agent's owner and an admin set and delete its policies (nobody
else: a person cannot loosen another's agent, an agent cannot loosen its own); they and
the agent itself read them. The hook's secret is never shown, except to the agent itself
(and an admin) by `/effective`, which the agent's approval gate reads for each decision
because it signs the hook's calls.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query
from pydantic import BaseModel, Field

from ..approval_policies import ApprovalPolicy, policy_from_dict, policy_to_dict
from ..broker import LocalBroker
from ..principals import Principal
from .api import PROBLEMS
from .common import ApiError, Caller, TheBroker, problems_for

__all__ = ["router"]

router = APIRouter(tags=["approval policies"])

_problems = problems_for(PROBLEMS)

_EXAMPLE = {
    "approval": "always",
    "gatedTools": ["send_email", "delete_*"],
    "autoAllow": ["read_file", "list_directory"],
    "hook": {
        "url": "https://hooks.example.com/approve",
        "secret": "a shared secret of 16 characters or more",
        "onHookError": "pause",
        "timeout": 5,
    },
}
PolicyBody = Annotated[
    dict[str, Any],
    Body(
        description="The policy: `approval` (once | always | never), `gatedTools`, `autoAllow` (names or "
        "globs) and `hook` (`url`, `secret`, `onHookError`: deny | pause | fail-run, `timeout` in seconds).",
        examples=[_EXAMPLE],
    ),
]


class PolicyHookModel(BaseModel):
    url: str
    onHookError: str
    timeout: float
    hasSecret: bool
    secret: str | None = Field(None, description="Only on /effective, to the agent itself or an admin.")


class PolicyModel(BaseModel):
    agent: str
    server: str | None = Field(description="The tool server the policy is for; null: the agent's whole toolset.")
    approval: str | None
    gatedTools: list[str] | None
    autoAllow: list[str]
    hook: PolicyHookModel | None
    version: int
    updatedAt: str | None
    updatedBy: str | None


class PolicyList(BaseModel):
    items: list[PolicyModel]


class Effective(BaseModel):
    policy: PolicyModel | None = Field(description="The server's policy, else the agent's own, else null.")


class Deleted(BaseModel):
    agent: str
    server: str | None
    deleted: bool = Field(description="False when there was no such policy.")


async def _owns(broker: LocalBroker, caller: Principal, agent: str) -> bool:
    if caller.kind == "admin":
        return True
    principal = await broker.get_principal(agent)
    return principal is not None and principal.kind == "agent" and principal.owner == caller.name


async def _may_change(broker: LocalBroker, caller: Principal, agent: str) -> None:
    if not await _owns(broker, caller, agent):
        raise ApiError("forbidden", f"only the owner of agent {agent!r} or an admin may change its approval policy")


async def _may_read(broker: LocalBroker, caller: Principal, agent: str) -> None:
    if caller.name != agent and not await _owns(broker, caller, agent):
        raise ApiError("forbidden", f"only agent {agent!r}, its owner or an admin may read its approval policy")


async def _put(
    broker: LocalBroker, caller: Principal, body: dict[str, Any], agent: str | None, server: str | None
) -> Any:
    checked = policy_from_dict(
        body,
        agent=agent,
        server=server,
        allow_http=broker.allow_http_hooks,
        max_name_length=broker.limits.max_name_length,
    )
    await _may_change(broker, caller, checked.agent)
    return policy_to_dict(await broker.set_approval_policy(checked, by=caller.name))


@router.get("/approval-policies", response_model=PolicyList, responses=_problems(403, 422))
async def list_policies(
    caller: Caller,
    broker: TheBroker,
    agent: Annotated[str | None, Query(description="Only this agent's policies.")] = None,
) -> dict[str, Any]:
    """The policies you may read: an admin's all, a person's those of the agents they own,
    an agent's its own."""
    if agent is not None:
        await _may_read(broker, caller, agent)
    found: list[ApprovalPolicy] = await broker.list_approval_policies(agent)
    if caller.kind != "admin" and agent is None:
        owned: dict[str, bool] = {}
        for policy in found:
            if policy.agent not in owned:
                owned[policy.agent] = policy.agent == caller.name or await _owns(broker, caller, policy.agent)
        found = [p for p in found if owned[p.agent]]
    return {"items": [policy_to_dict(p) for p in found]}


@router.post("/approval-policies", response_model=PolicyModel, responses=_problems(400, 403, 413, 422))
async def set_policy(body: PolicyBody, caller: Caller, broker: TheBroker) -> Any:
    """Create or replace the policy its body names (`agent`, and `server` for one tool
    server's). Every approval gate of the agent applies it from its next decision."""
    return await _put(broker, caller, body, None, None)


@router.put("/approval-policies/{agent}", response_model=PolicyModel, responses=_problems(400, 403, 413, 422))
async def put_agent_policy(agent: str, body: PolicyBody, caller: Caller, broker: TheBroker) -> Any:
    """Create or replace the policy of the agent's whole toolset."""
    if body.get("server") not in (None, ""):
        raise ApiError(
            "invalid_request",
            f"server: the body names {body['server']!r}, but this route sets the agent's policy for its whole "
            f"toolset; PUT /approval-policies/{agent}/servers/{body['server']} sets one server's",
        )
    return await _put(broker, caller, body, agent, None)


@router.put(
    "/approval-policies/{agent}/servers/{server}", response_model=PolicyModel, responses=_problems(400, 403, 413, 422)
)
async def put_server_policy(agent: str, server: str, body: PolicyBody, caller: Caller, broker: TheBroker) -> Any:
    """Create or replace the policy of the agent's tools from one tool server (a connection)."""
    return await _put(broker, caller, body, agent, server)


@router.get("/approval-policies/{agent}", response_model=PolicyModel, responses=_problems(403, 404, 422))
async def get_agent_policy(agent: str, caller: Caller, broker: TheBroker) -> Any:
    """The policy of the agent's whole toolset (without the hook's secret)."""
    await _may_read(broker, caller, agent)
    return policy_to_dict(await broker.get_approval_policy(agent))


@router.get("/approval-policies/{agent}/effective", response_model=Effective, responses=_problems(403, 422))
async def effective_policy(
    agent: str,
    caller: Caller,
    broker: TheBroker,
    server: Annotated[str, Query(description="The tool server the call's tool comes from.")] = "",
) -> dict[str, Any]:
    """The policy that applies to a call of the agent's tool from `server`, with the hook's
    secret: for the agent's own approval gate (and an admin) only."""
    if caller.kind != "admin" and caller.name != agent:
        raise ApiError("forbidden", "only the agent itself or an admin reads the policy it applies")
    found = await broker.approval_policy_for(agent, server)
    return {"policy": None if found is None else policy_to_dict(found, secrets=True)}


@router.get(
    "/approval-policies/{agent}/servers/{server}", response_model=PolicyModel, responses=_problems(403, 404, 422)
)
async def get_server_policy(agent: str, server: str, caller: Caller, broker: TheBroker) -> Any:
    """The policy of the agent's tools from one tool server (without the hook's secret)."""
    await _may_read(broker, caller, agent)
    return policy_to_dict(await broker.get_approval_policy(agent, server))


@router.delete("/approval-policies/{agent}", response_model=Deleted, responses=_problems(403, 422))
async def delete_agent_policy(agent: str, caller: Caller, broker: TheBroker) -> dict[str, Any]:
    """Delete the policy of the agent's whole toolset."""
    await _may_change(broker, caller, agent)
    return {"agent": agent, "server": None, "deleted": await broker.delete_approval_policy(agent, by=caller.name)}


@router.delete("/approval-policies/{agent}/servers/{server}", response_model=Deleted, responses=_problems(403, 422))
async def delete_server_policy(agent: str, server: str, caller: Caller, broker: TheBroker) -> dict[str, Any]:
    """Delete the policy of the agent's tools from one tool server."""
    await _may_change(broker, caller, agent)
    deleted = await broker.delete_approval_policy(agent, server, by=caller.name)
    return {"agent": agent, "server": server, "deleted": deleted}
