"""The keys the nodes on one store share: the secret key (`INTERLOCK_SECRET_KEY`), whose
fingerprint the store keeps, and the grant key, whose public id it keeps.

The key signs what one node hands out and another must take back: the one-click answer
links of email notifications, grant tokens (unless a grant key of their own is given) and,
without auth, the CSRF cookie. Nodes on one store that sign with different keys refuse
each other's links at random, as the load balancer sends a person to one or another.

So the store keeps the key's fingerprint: HKDF-SHA256 of the key with a label used for
nothing else, which tells keys apart but is no key itself (no signature checks against
it). The first node with a key records it; a node with another key, or with none (it would
make one at start), is refused (`LocalBroker.check_secret_key`). Changing the key on
purpose records the new one (`LocalBroker.rotate_secret_key`, `interlock secret-key
rotate`). A store that never saw a node with a key (one node on a laptop, making its key at
each start) keeps none, and checks nothing.

Like a link signed with the key, the fingerprint lets whoever reads it test guesses of the
key: make the key random (`secrets.token_urlsafe(32)`), not a word.

The grant key (`interlock.grant_tokens`) signs the grants' tokens, which an application
checks against any node's key set (`GET /api/v1/grants/keys`): nodes that sign with
different grant keys refuse each other's tokens as the load balancer routes. So the store
keeps its public id too (`GrantKeyId`: the key's `kid`, a hash of its public key, public in
every token; never the key): the first node with a stable grant key (a `--grant-key` file,
`INTERLOCK_GRANT_KEY`, or the key derived from the secret key) records it; a node with
another, or with a key it makes at start beside nodes that have one, is refused
(`LocalBroker.check_grant_key`). Changing it on purpose records the new one
(`LocalBroker.rotate_grant_key`). A key derived from the secret key follows it: rotating or
forgetting the secret key forgets the grant key recorded with it, and the first node
started with the new one records the key it derives.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

__all__ = [
    "ENV",
    "GRANT_KEY_ENV",
    "MIN_LENGTH",
    "NO_KEY",
    "OTHER_KEY",
    "GrantKeyId",
    "fingerprint",
    "no_grant_key",
    "other_grant_key",
    "too_short",
]

ENV = "INTERLOCK_SECRET_KEY"
"""The environment variable that holds the key."""

_LABEL = b"interlock secret key fingerprint"

MIN_LENGTH = 32
"""The fewest characters of a key a node starts with: a word, or a short phrase, is found
by trying guesses against any link it signed, or against the fingerprint the store keeps
(one fast hash). `secrets.token_urlsafe(32)` makes 43."""


def too_short(secret: str, name: str = ENV) -> str | None:
    """Why `secret` is refused as the key (given as `name`), on one line that says how to
    make one; None when it is long enough."""
    if len(secret) >= MIN_LENGTH:
        return None
    return (
        f"{name} is {len(secret)} characters long: a key that short can be found by trying guesses against "
        f"the links it signs; use at least {MIN_LENGTH} random characters, e.g. from "
        '`python -c "import secrets; print(secrets.token_urlsafe(32))"`'
    )


def fingerprint(secret: str) -> str:
    """The fingerprint of `secret`: the same for the same key, and nothing to sign with.
    HKDF-SHA256 (RFC 5869) of 32 bytes, salt `interlock`, its label as the info, written
    out with the standard library, which is all the core needs."""
    extracted = hmac.new(b"interlock", secret.encode("utf-8", "surrogateescape"), hashlib.sha256).digest()
    return hmac.new(extracted, _LABEL + b"\x01", hashlib.sha256).hexdigest()


OTHER_KEY = (
    "the other nodes on this store sign with another INTERLOCK_SECRET_KEY, and would refuse the answer links "
    "and grant tokens of this one: start it with theirs, or change the key of every node on purpose with "
    "`interlock secret-key rotate`"
)
"""Why a node whose key is not the store's nodes' is refused."""

NO_KEY = (
    "the other nodes on this store sign with an INTERLOCK_SECRET_KEY, and this node has none (the key it would "
    "make signs answer links and grant tokens they refuse): start it with theirs, or, with no other node on "
    "this store, let each node make its own again with `interlock secret-key forget`"
)
"""Why a node without a key is refused on a store whose nodes have one."""


GRANT_KEY_ENV = "INTERLOCK_GRANT_KEY"
"""The environment variable that names the grant key's file (`interlock serve --grant-key`)."""


@dataclass(frozen=True, slots=True)
class GrantKeyId:
    """The public id of the grant key the nodes on a store sign grant tokens with, as the
    store records it."""

    kid: str
    """The key's id (`GrantSigner.kid`: a hash of its public key), named in every token."""
    derived: bool = False
    """Whether the key is derived from the secret key (no `--grant-key`), rather than given
    in a file: such a key follows the secret key (see the module)."""


def _grant_key(key: GrantKeyId) -> str:
    return f"the key derived from {ENV}" if key.derived else "a --grant-key file"


def _start_it_with(kept: GrantKeyId) -> str:
    if kept.derived:
        return f"start it without --grant-key (or {GRANT_KEY_ENV}) and with their {ENV}"
    return f"start it with their grant key file (--grant-key FILE or {GRANT_KEY_ENV})"


def other_grant_key(kept: GrantKeyId, mine: GrantKeyId) -> str:
    """Why a node whose grant key is not the store's nodes' is refused: one line that names
    both keys' ids (public: the `kid` of `GET /api/v1/grants/keys`) and says what to do."""
    if kept.derived != mine.derived:
        theirs = _grant_key(kept)
    else:
        theirs = f"the key derived from another {ENV}" if kept.derived else "another --grant-key file"
    return (
        f"the other nodes on this store sign grant tokens with {theirs} (kid {kept.kid}), this node with "
        f"{_grant_key(mine)} (kid {mine.kid}), and each refuses the other's tokens: {_start_it_with(kept)}, or "
        "change the grant key of every node on purpose with `interlock grant-key rotate`"
    )


def no_grant_key(kept: GrantKeyId) -> str:
    """Why a node that would make its grant key at start is refused on a store whose nodes
    sign with a stable one."""
    return (
        f"the other nodes on this store sign grant tokens with {_grant_key(kept)} (kid {kept.kid}), and this "
        "node has none (the key it would make at start signs tokens they refuse, and it too once restarted): "
        f"{_start_it_with(kept)}, or, with no other node on this store, let each node make its own again with "
        "`interlock grant-key forget`"
    )
