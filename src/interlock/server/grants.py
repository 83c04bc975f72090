"""The grants API under /api/v1/grants: issued capability grants, listed, read with their
signed token, checked, verified, revoked, and given directly (a delegation).

Who sees what: a grant concerns its issuer (the person who consented) and its audience
(who asked); either may read and revoke it, nobody else (a server without auth: anyone on
this machine). The public key that verifies the tokens is served to anyone, at
`/grants/keys`, as a JWK Set.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from ..cursors import CURSOR, issued, taken
from ..errors import InvalidGrantToken, InvalidRequest, NotFound
from ..grant_tokens import verify_grant_token
from ..model import DEFAULT_EXP, MAX_EXP, IssuedGrant, issued_grant_to_dict
from ..principals import Principal
from .api import PROBLEMS
from .common import ApiError, AppState, Caller, State, TheBroker, problems_for
from .schemas import IssuedGrantModel, Strict

__all__ = ["router"]

router = APIRouter(tags=["grants"])


_problems = problems_for(PROBLEMS)


class GrantWithToken(IssuedGrantModel):
    token: str = Field(description="The grant as a signed JWT (EdDSA); verify it with the keys at /grants/keys.")


class GrantList(BaseModel):
    items: list[IssuedGrantModel]
    next_cursor: str | None


class CheckBody(Strict):
    with_: str = Field(alias="with")
    can: str
    audience: str | None = Field(None, description="Who would use it; you, unless you are its issuer.")
    issuer: str | None = Field(None, description="Only grants from this person.")


class CheckResult(BaseModel):
    granted: bool
    grant: IssuedGrantModel | None


class VerifyBody(Strict):
    token: str


class VerifyResult(BaseModel):
    valid: bool = Field(description="Signed here, unexpired and not revoked.")
    reason: str | None
    grant: IssuedGrantModel | None


class GiveBody(Strict):
    to: str = Field(description="Who may use the grant.")
    with_: str = Field(alias="with", min_length=1)
    can: str = Field(min_length=1)
    exp: int | None = Field(
        None, ge=0, description=f"Unix seconds, at most {MAX_EXP}; omitted: the venue's default; null: no expiry."
    )
    by: str | None = Field(None, description="The issuer; only honoured by a server without auth (else you).")


class RevokeBody(Strict):
    by: str | None = Field(None, description="Who revokes; only honoured by a server without auth (else you).")


class Revoked(BaseModel):
    id: str
    revoked: bool = Field(description="False when it was revoked already.")


def _concerns(caller: Principal, grant: IssuedGrant) -> bool:
    return caller.kind == "admin" or caller.name in (grant.issuer, grant.audience)


def _with_token(state: AppState, grant: IssuedGrant) -> dict[str, Any]:
    return {**issued_grant_to_dict(grant), "token": state.grant_signer.sign(grant)}


class Jwk(BaseModel):
    """A public key of the server's, as a JSON Web Key (RFC 8037: Ed25519)."""

    kty: Literal["OKP"]
    crv: Literal["Ed25519"]
    x: str = Field(description="The public key, base64url.")
    kid: str = Field(description="The key id, as the tokens' header names it.")
    alg: Literal["EdDSA"]
    use: Literal["sig"]


class JwkSet(BaseModel):
    keys: list[Jwk]


@router.get("/grants/keys", response_model=JwkSet)
async def grant_keys(state: State) -> dict[str, Any]:
    """The public key the grant tokens are signed with, as a JWK Set (Ed25519, EdDSA)."""
    return state.grant_signer.jwks()


@router.get("/grants", response_model=GrantList, responses=_problems(403, 422))
async def list_grants(
    caller: Caller,
    broker: TheBroker,
    audience: str | None = None,
    issuer: str | None = None,
    request: str | None = None,
    live: Annotated[
        bool,
        Query(description="only grants in force: neither revoked nor expired, nor given by a person cut off"),
    ] = False,
    cursor: Annotated[str | None, Query(description=CURSOR)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> dict[str, Any]:
    """Grants you hold (`audience`) or gave (`issuer`), newest first. By default, an
    agent's are those it holds, a person's those they gave. A grant whose issuer `interlock
    token revoke` cut off is listed with `issuer_cut_off` true (left out with `live`): it
    authorizes nothing until `interlock token create ISSUER --human` gives them a token again."""
    if caller.kind != "admin":
        if audience is None and issuer is None:
            if caller.kind == "agent":
                audience = caller.name
            else:
                issuer = caller.name
        if caller.name not in (audience, issuer):
            raise ApiError("forbidden", "you may list only grants you hold or gave")
    page = await broker.list_grants(
        audience=audience, issuer=issuer, request=request, live=live, after=taken("grants", cursor), limit=limit
    )
    return {"items": [issued_grant_to_dict(g) for g in page.items], "next_cursor": issued("grants", page.next_cursor)}


@router.post("/grants", status_code=201, response_model=GrantWithToken, responses=_problems(400, 403, 413, 422))
async def give_grant(body: GiveBody, caller: Caller, broker: TheBroker, state: State) -> dict[str, Any]:
    """Give a grant directly, without a request: a delegation from you (a person) to `to`.
    A grant of `hitl/request` on `interlock:inbox/<you>` lets `to` ask you."""
    if caller.kind == "agent":
        raise ApiError("forbidden", "only a person gives grants")
    by = body.by if caller.kind == "admin" else caller.name
    if caller.kind != "admin" and await broker.get_principal(body.to) is None:
        raise ApiError("invalid_request", f"to: there is no human or agent named {body.to!r} here")
    exp = body.exp if "exp" in body.model_fields_set else DEFAULT_EXP
    grant = await broker.give_grant(body.to, body.with_, body.can, exp=exp, by=by)
    return _with_token(state, grant)


@router.post("/grants/check", response_model=CheckResult, responses=_problems(400, 403, 413, 422))
async def check_grant(body: CheckBody, caller: Caller, broker: TheBroker) -> dict[str, Any]:
    """Whether a live grant lets `audience` (you by default) do `can` on `with`. Checking
    someone else's, a person checks the grants they gave (`issuer` is then you)."""
    audience, issuer = body.audience, body.issuer
    if caller.kind != "admin":
        audience = audience or caller.name
        if audience != caller.name and issuer is None and caller.kind == "human":
            issuer = caller.name
        if caller.name not in (audience, issuer):
            raise ApiError("forbidden", "you may check only grants you hold or gave")
    grant = await broker.check_grant(audience, body.with_, body.can, issuer=issuer)
    return {"granted": grant is not None, "grant": issued_grant_to_dict(grant) if grant is not None else None}


@router.post("/grants/verify", response_model=VerifyResult, responses=_problems(400, 413, 422))
async def verify_grant(body: VerifyBody, caller: Caller, broker: TheBroker, state: State) -> dict[str, Any]:
    """Verify a grant token as the venue: its signature and expiry, that the grant is not
    revoked, and that whoever gave it is not cut off (`interlock token revoke`). Whoever
    holds a token may ask."""
    try:
        claims = verify_grant_token(body.token, state.grant_signer.jwks(), venue=state.grant_signer.venue)
        grant = await broker.get_grant(claims.grant_id)
    except (InvalidGrantToken, NotFound, InvalidRequest) as exc:
        return {"valid": False, "reason": str(exc), "grant": None}
    if grant.revoked_at is not None:
        return {"valid": False, "reason": "the grant was revoked", "grant": issued_grant_to_dict(grant)}
    if grant.issuer_cut_off:
        reason = f"the grant was given by {grant.issuer!r}, whom `token revoke` cut off"
        return {"valid": False, "reason": reason, "grant": issued_grant_to_dict(grant)}
    return {"valid": True, "reason": None, "grant": issued_grant_to_dict(grant)}


@router.get("/grants/{grant_id}", response_model=GrantWithToken, responses=_problems(403, 404, 422))
async def get_grant(grant_id: str, caller: Caller, broker: TheBroker, state: State) -> dict[str, Any]:
    """One grant you hold or gave, with its signed token."""
    grant = await broker.get_grant(grant_id)
    if not _concerns(caller, grant):
        raise ApiError("forbidden", "this grant is neither yours nor from you")
    return _with_token(state, grant)


@router.post("/grants/{grant_id}/revoke", response_model=Revoked, responses=_problems(400, 403, 404, 413, 422))
async def revoke_grant(
    grant_id: str, caller: Caller, broker: TheBroker, body: RevokeBody | None = None
) -> dict[str, Any]:
    """Revoke a grant you gave (or give up one you hold); it stops checking at once."""
    grant = await broker.get_grant(grant_id)
    if not _concerns(caller, grant):
        raise ApiError("forbidden", "this grant is neither yours nor from you")
    by = (body.by if body is not None else None) if caller.kind == "admin" else caller.name
    return {"id": grant_id, "revoked": await broker.revoke_grant(grant_id, by=by)}
