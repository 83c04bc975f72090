"""Signed tokens for issued grants, so an application can check a grant it was given.

Each issued grant has a token: a JWT signed with EdDSA (Ed25519) by the venue's grant key.
Its claims: `iss` the venue (`interlock` unless configured), `sub` the person who granted
it, `aud` the audience (who asked), `jti` the grant's id, `iat`, `exp` (left out for no
expiry), and the grant itself as `with` and `can`, with `request` the request that issued
it (absent for a grant given directly).

An application verifies a token offline with the venue's public key (`GET
/api/v1/grants/keys` serves it as a JWK Set) through `verify_grant_token`; a token says
nothing of a revocation after it was signed (nor of `interlock token revoke` cutting off
the person who gave it, which withholds their grants while it lasts), so an application
that must honour revocations at once also asks the venue (`POST /api/v1/grants/verify`).

Keys (`GrantSigner`): a server signs with the Ed25519 private key in the PEM file named by
`INTERLOCK_GRANT_KEY` (`interlock serve --grant-key`); without one, with a key derived from
`INTERLOCK_SECRET_KEY` (HKDF-SHA256), so nodes sharing that secret share the key; without
either, with a key made at start, whose tokens stop verifying when the server restarts.
Ed25519 signatures are deterministic: a grant's token is signed when asked for, not stored.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from jwt.algorithms import OKPAlgorithm

from .errors import InvalidGrantToken
from .model import IssuedGrant

__all__ = ["DEFAULT_VENUE", "GrantClaims", "GrantSigner", "public_key_of", "verify_grant_token"]

DEFAULT_VENUE = "interlock"
_ALGORITHM = "EdDSA"


@dataclass(frozen=True, slots=True)
class GrantClaims:
    """What a verified grant token says."""

    grant_id: str
    with_: str
    can: str
    issuer: str | None
    """The person who granted it."""
    audience: str | None
    """Who may use it."""
    issued_at: datetime
    expires_at: datetime | None
    request_id: str | None
    venue: str


class GrantSigner:
    """Signs grant tokens with an Ed25519 key; publishes the public half as a JWK Set."""

    def __init__(self, key: Ed25519PrivateKey, *, venue: str = DEFAULT_VENUE) -> None:
        self.key = key
        self.venue = venue
        raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.kid = base64.urlsafe_b64encode(hashlib.sha256(raw).digest()[:12]).decode().rstrip("=")
        """The key's id (a hash of its public key), named in each token's header."""

    @classmethod
    def generate(cls, *, venue: str = DEFAULT_VENUE) -> GrantSigner:
        return cls(Ed25519PrivateKey.generate(), venue=venue)

    @classmethod
    def from_pem(cls, pem: bytes | str | Path, *, venue: str = DEFAULT_VENUE) -> GrantSigner:
        """From an Ed25519 private key in PEM (its bytes, or a path to the file)."""
        data = Path(pem).read_bytes() if isinstance(pem, Path) else pem.encode() if isinstance(pem, str) else pem
        key = serialization.load_pem_private_key(data, password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError("the grant key must be an Ed25519 private key (openssl genpkey -algorithm ed25519)")
        return cls(key, venue=venue)

    @classmethod
    def from_secret(cls, secret: str, *, venue: str = DEFAULT_VENUE) -> GrantSigner:
        """A key derived from a server secret, the same on every node that shares it."""
        hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"interlock", info=b"interlock grant key")
        return cls(Ed25519PrivateKey.from_private_bytes(hkdf.derive(secret.encode())), venue=venue)

    def sign(self, grant: IssuedGrant) -> str:
        """The grant's token."""
        claims: dict[str, Any] = {
            "iss": self.venue,
            "jti": grant.id,
            "iat": int(grant.issued_at.timestamp()),
            "with": grant.with_,
            "can": grant.can,
        }
        if grant.issuer is not None:
            claims["sub"] = grant.issuer
        if grant.audience is not None:
            claims["aud"] = grant.audience
        if grant.expires_at is not None:
            claims["exp"] = int(grant.expires_at.timestamp())
        if grant.request_id is not None:
            claims["request"] = grant.request_id
        return jwt.encode(claims, self.key, algorithm=_ALGORITHM, headers={"kid": self.kid})

    def jwks(self) -> dict[str, Any]:
        """The public key as a JWK Set, for `verify_grant_token` and any JOSE library."""
        jwk = OKPAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        return {"keys": [{**jwk, "kid": self.kid, "alg": _ALGORITHM, "use": "sig"}]}


def public_key_of(key: Ed25519PublicKey | Mapping[str, Any] | str | bytes, kid: str | None = None) -> Ed25519PublicKey:
    """A public key from a key, a JWK, a JWK Set (picking `kid`) or a PEM."""
    if isinstance(key, Ed25519PublicKey):
        return key
    loaded: object
    if isinstance(key, Mapping):
        jwk: Mapping[str, Any] = key
        if "keys" in key:
            found = [k for k in key["keys"] if kid is None or k.get("kid") == kid]
            if not found:
                raise InvalidGrantToken(f"no key {kid!r} in the key set")
            jwk = found[0]
        loaded = OKPAlgorithm.from_jwk(dict(jwk))
    else:
        loaded = serialization.load_pem_public_key(key.encode() if isinstance(key, str) else key)
    if not isinstance(loaded, Ed25519PublicKey):
        raise InvalidGrantToken("a grant token is checked with an Ed25519 public key")
    return loaded


def verify_grant_token(
    token: str,
    key: Ed25519PublicKey | Mapping[str, Any] | str | bytes,
    *,
    audience: str | None = None,
    with_: str | None = None,
    can: str | None = None,
    venue: str = DEFAULT_VENUE,
    leeway: float = 0,
) -> GrantClaims:
    """Check a grant token's signature, venue and expiry (and, when given, that it is for
    `audience`, on `with_`, for `can`) and return its claims; `InvalidGrantToken` if not.

    `key` is the venue's public key: a JWK Set as `GET /api/v1/grants/keys` serves it, one
    JWK, a PEM, or the key itself. Revocation is the venue's to know: see the module."""
    try:
        header = jwt.get_unverified_header(token)
        public = public_key_of(key, header.get("kid"))
        claims = jwt.decode(
            token,
            public,
            algorithms=[_ALGORITHM],
            audience=audience,
            issuer=venue,
            leeway=leeway,
            options={"require": ["iss", "jti", "iat", "with", "can"], "verify_aud": audience is not None},
        )
    except jwt.PyJWTError as exc:
        raise InvalidGrantToken(f"the grant token does not verify: {exc}") from None
    for name, wanted in (("with", with_), ("can", can)):
        if wanted is not None and claims.get(name) != wanted:
            raise InvalidGrantToken(f"the grant is for {name} {claims.get(name)!r}, not {wanted!r}")
    exp = claims.get("exp")
    return GrantClaims(
        grant_id=str(claims["jti"]),
        with_=str(claims["with"]),
        can=str(claims["can"]),
        issuer=claims.get("sub"),
        audience=claims.get("aud"),
        issued_at=datetime.fromtimestamp(int(claims["iat"]), UTC),
        expires_at=None if exp is None else datetime.fromtimestamp(int(exp), UTC),
        request_id=claims.get("request"),
        venue=str(claims["iss"]),
    )
