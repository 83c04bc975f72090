"""The secret key the nodes on one store share (`INTERLOCK_SECRET_KEY`), and its fingerprint.

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
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["ENV", "NO_KEY", "OTHER_KEY", "fingerprint"]

ENV = "INTERLOCK_SECRET_KEY"
"""The environment variable that holds the key."""

_LABEL = b"interlock secret key fingerprint"


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
