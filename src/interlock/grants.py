"""What a grant lets its holder do in interlock itself, and who may ask whom.

A grant lets its audience do `can` on `with`. interlock itself honours one ability:

- `hitl/request` on `interlock:inbox/<person>` (`INBOX_ABILITY` on `inbox_resource(name)`),
  issued by that person: its holder may create requests in that person's inbox (and
  send them progress updates, which the server lets through on the same rule).

Who may ask whom (`may_ask`): a principal asks its own inbox (a person), or its owner's
(an agent); asking anyone else needs their permission, a live grant to request in their
inbox issued by them, held by the caller. Without it the request is refused with
`Forbidden` and nothing lands in the other inbox. A server run with `open_inboxes` (an
open organisation) lets anyone signed in ask anyone, as does a server without auth.

Every other grant is the application's to interpret: interlock stores, lists, checks and
revokes it, and signs a token for it (`interlock.grant_tokens`) that the application
verifies.
"""

from __future__ import annotations

from .broker import Broker
from .errors import Forbidden
from .model import INBOX_RESOURCE, IssuedGrant
from .principals import Principal

__all__ = ["INBOX_ABILITY", "asks_own_inbox", "inbox_resource", "may_ask"]

INBOX_ABILITY = "hitl/request"
"""The ability, on a person's inbox, to create requests there."""


def inbox_resource(name: str) -> str:
    """The `with` of a grant to request in `name`'s inbox."""
    return INBOX_RESOURCE + name


def asks_own_inbox(caller: Principal, to: str | None) -> bool:
    """True when `caller` may ask `to` with no permission: its own inbox (a person's), its
    owner's (an agent's), a team it (its owner) belongs to, anything for an admin (a
    server without auth)."""
    if caller.kind == "admin" or to is None:
        return True
    return to == caller.name or (caller.kind == "agent" and to == caller.owner) or to in caller.teams


async def may_ask(
    broker: Broker, caller: Principal, to: str | None, *, open_inboxes: bool = False
) -> IssuedGrant | None:
    """Check that `caller` may put a request into `to`'s inbox; raise `Forbidden` if not.

    Returns the grant that permits it, or None when no permission is needed (own inbox,
    owner's inbox, an admin, or `open_inboxes`)."""
    if open_inboxes or asks_own_inbox(caller, to):
        return None
    assert to is not None
    grant = await broker.check_grant(caller.name, inbox_resource(to), INBOX_ABILITY, issuer=to)
    if grant is None:
        if await broker.team_members(to) is not None:  # a team gives no grants: its members ask it
            mine = "your owner's teams" if caller.kind == "agent" else "your teams"
            raise Forbidden(f"{to!r} is a team, and only its members and their agents ask it: it is not one of {mine}")
        who = "your owner" if caller.kind == "agent" else "yourself"
        raise Forbidden(
            f"you may ask only {who} here; asking {to!r} needs their permission: a grant of "
            f"{INBOX_ABILITY!r} on {inbox_resource(to)!r} from {to!r}, which {to} gives with "
            f"`interlock grants give {caller.name} --with {inbox_resource(to)} --can {INBOX_ABILITY}`"
        )
    return grant
