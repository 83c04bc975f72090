"""Teams over HTTP, under /api/v1: a team is a name and its members (people). A request
addressed to a team is visible to its members, any of them may claim and answer it.

Anyone signed in may read a team's members (to know whom a request to it reaches);
only an admin creates a team, adds or removes members, or deletes it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from ..principals import Principal
from .api import PROBLEMS
from .common import ApiError, Caller, TheBroker, problems_for

__all__ = ["TeamModel", "router"]

router = APIRouter()
problems = problems_for(PROBLEMS)


class TeamModel(BaseModel):
    """A team and its members, by name."""

    name: str
    members: list[str]


class TeamList(BaseModel):
    items: list[TeamModel]


class Members(BaseModel):
    members: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(max_length=1000)


def _admin(caller: Principal, what: str) -> None:
    if caller.kind != "admin":
        raise ApiError("forbidden", f"only an admin may {what}")


async def _team(broker: TheBroker, name: str) -> JSONResponse:
    members = await broker.team_members(name)
    if members is None:
        raise ApiError("not_found", f"there is no team named {name!r}")
    return JSONResponse({"name": name, "members": list(members)})


@router.get("/teams", response_model=TeamList, tags=["teams"])
async def list_teams(caller: Caller, broker: TheBroker) -> JSONResponse:
    """Every team with its members (for an admin); for anyone else, the teams they are in."""
    found = await broker.list_teams()
    items = [
        {"name": name, "members": list(members)}
        for name, members in found.items()
        if caller.kind == "admin" or name in caller.teams
    ]
    return JSONResponse({"items": items})


@router.get("/teams/{name}", response_model=TeamModel, responses=problems(404), tags=["teams"])
async def get_team(name: str, caller: Caller, broker: TheBroker) -> JSONResponse:
    """A team's members, whoever asks: an agent whose approval went to a team reads them to
    check that its answer came from a member (`GET /teams` lists only your own teams)."""
    return await _team(broker, name)


@router.post("/teams/{name}/members", response_model=TeamModel, responses=problems(400, 404, 422), tags=["teams"])
async def add_members(name: str, caller: Caller, broker: TheBroker, body: Annotated[Members, Body()]) -> JSONResponse:
    """Create the team if it is new and add these people to it (an admin only). A name
    that is a person's or an agent's, or a member who is no person here, is refused with
    422 and changes nothing."""
    _admin(caller, "change a team")
    members = await broker.add_team_members(name, body.members)  # InvalidRequest: 422
    return JSONResponse({"name": name, "members": list(members)})


@router.delete("/teams/{name}/members/{member}", response_model=TeamModel, responses=problems(404), tags=["teams"])
async def remove_member(name: str, member: str, caller: Caller, broker: TheBroker) -> JSONResponse:
    """Take a person out of a team (an admin only)."""
    _admin(caller, "change a team")
    if await broker.team_members(name) is None:
        raise ApiError("not_found", f"there is no team named {name!r}")
    if not await broker.remove_team_member(name, member):
        raise ApiError("not_found", f"{member!r} is not in the team {name!r}")
    return await _team(broker, name)


@router.delete("/teams/{name}", status_code=204, responses=problems(404), tags=["teams"])
async def delete_team(name: str, caller: Caller, broker: TheBroker) -> None:
    """Delete a team (an admin only); its requests stay, readable by their requesters."""
    _admin(caller, "delete a team")
    if not await broker.delete_team(name):
        raise ApiError("not_found", f"there is no team named {name!r}")
