"""Every exception interlock raises, in one place.

The hierarchy tells apart the three ways a request can end without an answer, because
the caller (and the model reading a tool result) must treat them differently:

    InterlockError
    ├── InvalidRequest      (also ValueError)   the request was malformed; nothing was stored
    │   ├── IdempotencyKeyReused                ... its idempotency key was used for another
    │   │                                       request: other asks, recipient or texts
    │   └── InvalidCursor                       ... a list's cursor is none a page of it gave
    ├── InvalidAnswer       (also ValueError)   the answer does not fit the asks; the request
    │                                           stays pending and unchanged, so try again
    ├── NotFound            (also ValueError)   no request with that id (never seen, or
    │   │                                       evicted from a memory:// retention)
    │   └── FollowupNotFound                    ... no message held with that id: withdrawn,
    │                                           delivered, or read-only on an ended run
    ├── Rejected            (also RuntimeError) a person, or a hook, refused; carries `reason`
    │   └── ApprovalDenied                      ... an approval of a tool call, in particular
    ├── Expired             (also TimeoutError) nobody answered in time
    ├── Cancelled           (also RuntimeError) the program gave the request up (cancel,
    │   │                                       release, or a waiting call that was cut)
    │   └── Closed                              ... because its channel or broker was closed
    ├── AlreadySettled      (also RuntimeError) an operation needed a pending request
    ├── RunConflict         (also RuntimeError) an operation needed a run in another state
    │                                           (running and held by this worker, or not ended)
    ├── Forbidden           (also PermissionError) the server refused who you are (401/403)
    ├── RateLimited         (also RuntimeError) a quota of yours is used up (429): `retry_after`
    ├── Unavailable         (also ConnectionError) the store, or the server behind a remote
    │                                           broker, cannot serve the call for now (503): try
    │                                           again after `retry_after`; a write's outcome may
    │                                           be unknown, so retry it with the same idempotency key.
    │                                           Raised by a resume handler: not now, the worker
    │                                           hands the run back for later instead of failing it
    ├── NewerDatabase       (also RuntimeError) a later version of interlock migrated the store:
    │                                           this process writes no more; restart it on that
    │                                           version (reads go on)
    ├── InvalidGrantToken   (also ValueError)   a grant's token does not verify: forged,
    │                                           expired, or for someone or something else
    ├── ApprovalRefused     (also RuntimeError) the approval gate failed closed: do not run
    ├── RunFailed           (also RuntimeError) an approval hook failed and the run must stop
    ├── ToolFailed          (also RuntimeError) a tool handler failed the call (model reads it)
    └── ToolRefused         (also RuntimeError) a tool handler refused the call (model reads why)

`Rejected` is deliberately not a parent of `Cancelled`: a refusal by the human is an
answer the model should read, while a request the program gave up on is a plain failure.
`Closed` is also what creating a request in a closed channel raises.

`Unavailable` is the one error that says nothing about the call itself: the same call may
succeed a moment later. The stores raise it for their driver's transient failures (a
connection refused or dropped, a server restarting, a lock held past the timeout, a disk
full or failing), so no caller needs to know which driver is underneath. A resume handler
raises it for the same reason about what it needs (an MCP server not connected in this
worker, a service of the agent's down): the worker hands the run back, to be resumed after
`retry_after` by this worker or another, instead of failing it (see `interlock.runs`).
"""

from __future__ import annotations

__all__ = [
    "AlreadySettled",
    "ApprovalDenied",
    "ApprovalRefused",
    "Cancelled",
    "Closed",
    "Expired",
    "FollowupNotFound",
    "Forbidden",
    "InterlockError",
    "InvalidGrantToken",
    "InvalidAnswer",
    "IdempotencyKeyReused",
    "InvalidCursor",
    "InvalidRequest",
    "NewerDatabase",
    "NotFound",
    "RateLimited",
    "Rejected",
    "RunConflict",
    "RunFailed",
    "ToolFailed",
    "ToolRefused",
    "Unavailable",
]


class InterlockError(Exception):
    """Base class of every interlock error."""


class InvalidRequest(InterlockError, ValueError):
    """The request is malformed: bad asks, duplicate ids, an invalid form schema, ..."""


class IdempotencyKeyReused(InvalidRequest):
    """The idempotency key was used by the same requester for a request that differs from
    this one (its kind, recipient, asks, title, details or context): a retry must send the
    same request again, so this one is refused rather than answered with the first.
    `request_id` is the first request's id."""

    def __init__(self, message: str, *, request_id: str | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


class InvalidCursor(InvalidRequest):
    """A list's cursor (`after`, or `cursor` over HTTP) is none a page of that list gave as
    its `next_cursor`: mistyped, cut short, empty, or another list's. Nothing is listed:
    start again from the first page (no cursor)."""


class InvalidAnswer(InterlockError, ValueError):
    """The answer does not fit the request's asks. The message names the ask and the fault."""

    def __init__(self, message: str, *, ask_id: str | None = None) -> None:
        super().__init__(message)
        self.ask_id = ask_id


class NotFound(InterlockError, ValueError):
    """No request with this id is known."""

    def __init__(self, request_id: str, *, message: str | None = None) -> None:
        super().__init__(message or f"no request with id {request_id!r}")
        self.request_id = request_id


class FollowupNotFound(NotFound):
    """No message is held for the run with this id: never sent, withdrawn, taken for
    delivery, or left read-only on a run that has ended."""

    def __init__(self, followup_id: str, *, message: str | None = None) -> None:
        super().__init__(followup_id, message=message or f"no follow-up {followup_id!r} is held for this run")
        self.followup_id = followup_id


class Rejected(InterlockError, RuntimeError):
    """The request was refused, by the person or by a hook. `reason` says why."""

    def __init__(self, request_id: str, reason: str = "") -> None:
        super().__init__(reason or "rejected")
        self.request_id = request_id
        self.reason = reason


class Expired(InterlockError, TimeoutError):
    """Nobody answered before the request's deadline or the waiter's own timeout."""

    def __init__(self, request_id: str) -> None:
        super().__init__(f"request {request_id!r} expired without an answer")
        self.request_id = request_id


class Cancelled(InterlockError, RuntimeError):
    """The program gave the request up: cancelled, released or withdrawn."""

    def __init__(self, request_id: str | None, reason: str = "") -> None:
        super().__init__(reason or "cancelled")
        self.request_id = request_id
        self.reason = reason


class Closed(Cancelled):
    """The channel (or the whole broker) was closed; also raised by create in a closed scope."""


class AlreadySettled(InterlockError, RuntimeError):
    """The request is no longer pending (or a dead letter to retry is none). `status` is
    the state it is in."""

    def __init__(self, request_id: str, status: str, message: str | None = None) -> None:
        super().__init__(message or f"request {request_id!r} is already {status}")
        self.request_id = request_id
        self.status = status


class RunConflict(InterlockError, RuntimeError):
    """The run is not in a state that allows this: it has ended, it is parked, or another
    worker holds it (its lease ran out and it was claimed again). `status` is its state."""

    def __init__(self, run_id: str, status: str, message: str | None = None) -> None:
        super().__init__(message or f"run {run_id!r} is {status}")
        self.run_id = run_id
        self.status = status


class Forbidden(InterlockError, PermissionError):
    """A server refused the call: no valid token (401) or not yours to see or do (403)."""

    def __init__(self, message: str, *, status: int = 403) -> None:
        super().__init__(message)
        self.status = status


class RateLimited(InterlockError, RuntimeError):
    """A server refused the call because a quota of the caller's is used up (429):
    `retry_after` is how many seconds to wait before trying again (None: it did not say)."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Unavailable(InterlockError, ConnectionError):
    """The store (or the server behind a remote broker) cannot serve this call for now: its
    database restarting, failing over or out of reach, a connection dropped, a lock another
    process held past the store's timeout, a disk full or failing. Try again: `retry_after`
    is how many seconds the server suggested waiting (None: it did not say).

    A read that raised it changed nothing. A write may have: when a connection drops after
    the statement went out, nobody can tell whether it committed. So retry a write the way
    that is safe to repeat: a request with the same `idempotency_key` (or `get` it by id)
    is made once, an answer to a request answered meanwhile finds it settled, a run started
    with the same id is found rather than made again.

    A resume handler raises it to say "not now": what the run needs is missing in this
    worker or away for a while. The worker then does not fail the run but hands it back,
    to be claimed again after `retry_after` seconds (None: the worker's own growing delay),
    by this worker or another (`interlock.runs.Worker`).
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class NewerDatabase(InterlockError, RuntimeError):
    """The database has migrations applied that this version of interlock does not know:
    a process of a later version migrated it, and this one would not write what that one
    expects (a later schema may do itself what this version does by hand, or no longer
    have what it writes). A SQL store refuses to open such a database, and a store already
    open refuses every write once a later version has migrated its SQLite file or
    PostgreSQL database (the write changes nothing; reads go on): restart the process on
    the later version."""


class InvalidGrantToken(InterlockError, ValueError):
    """A grant's signed token did not verify (see `interlock.grant_tokens`)."""


class ToolFailed(InterlockError, RuntimeError):
    """Raised by a handler to fail a call with a message the model may read."""


class ToolRefused(InterlockError, RuntimeError):
    """Raised by a handler to refuse a call; the model reads `reason`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ApprovalDenied(Rejected):
    """A person reviewing the call (or the approval hook) said no. `reason` is verbatim."""


class ApprovalRefused(InterlockError, RuntimeError):
    """The gate could not get a clean approval and failed closed: the call must not run.

    A failing approval hook (with `on_hook_error="deny"`), a replayed or already consumed
    approval, edited arguments that do not fit the schema, arguments that are not JSON.
    """

    def __init__(self, reason: str, *, detail: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


class RunFailed(InterlockError, RuntimeError):
    """The approval hook failed and `on_hook_error="fail-run"` says the whole run must stop."""
