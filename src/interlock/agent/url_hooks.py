"""Calling a tool-approval hook registered by URL in a stored approval policy.

interlock POSTs the call (`interlock.approval_policies.hook_call_body`: tool, input,
digest, call id, `callKey`, agent, server, session, run) as JSON, signed with the hook's
secret (`Interlock-Timestamp` and `Interlock-Signature`, as every webhook:
`interlock.webhooks`; a receiver checks it with `interlock.webhooks.verify`). Its
`Idempotency-Key` is the call's `callKey` (`interlock.agent.gate.hook_call_key`), which
names the call as the gate's approval does: its agent, its run (else its session), its
call id and the digest of its arguments. The same call asked again (a restarted agent)
has the same key, so a hook may cache its verdicts by it; a call with other arguments
under the same id, or in another run, session or agent, has another.

The hook answers 2xx with `{"decision": "allow" | "deny" | "pause", "callKey": "...",
"reason"?: "..."}`, echoing the `callKey` it was sent, signed the same way over the
response's body (`interlock.webhooks.signed_headers`). The signature says the secret's
holder wrote the answer; the echoed `callKey` says which call it decides, so that an
answer captured for one call (an `allow`, say) is not taken for another within the
signature's replay window. Anything else (a timeout, a refused connection, a 3xx to 5xx,
a missing or wrong signature, a body that is not such an object, an answer naming
another call or none) raises `UrlHookError`, and the gate applies the hook's
`onHookError`.

This is the I/O the pure policy model leaves out; the gate takes it as a parameter
(`ApprovalGate(url_hook=...)`), this function by default.
"""

from __future__ import annotations

import asyncio
import functools
import json
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

from ..approval_policies import HookVerdict, PolicyHook, hook_verdict_from_dict
from ..webhooks import IDEMPOTENCY_HEADER, InvalidSignature, signed_headers, verify

if TYPE_CHECKING:
    import httpx

__all__ = ["MAX_ANSWER_BYTES", "UrlHook", "UrlHookError", "call_url_hook"]

MAX_ANSWER_BYTES = 64 * 1024
"""The largest answer read from a hook."""

UrlHook: TypeAlias = Callable[[PolicyHook, Mapping[str, Any]], Awaitable[HookVerdict]]
"""What the gate calls with a stored policy's hook and the call's body; it raises when the
hook could not decide."""


@functools.cache
def _tls() -> ssl.SSLContext:
    """The TLS context of every hook call, made once: making one loads the CA bundle,
    which costs about 100 ms, far more than a call to a hook."""
    import httpx

    return httpx.create_ssl_context()


class UrlHookError(Exception):
    """The hook gave no verdict to take: the message says why (timeout, status, signature, body)."""


async def call_url_hook(
    hook: PolicyHook, body: Mapping[str, Any], *, transport: httpx.AsyncBaseTransport | None = None
) -> HookVerdict:
    """POST `body` (`hook_call_body`) to `hook.url`, signed, and return its verdict on
    that call, signed and naming its `callKey`, within `hook.timeout`."""
    import httpx  # here, not at import: an agent without stored hooks never loads it

    call_key = body.get("callKey")
    if not isinstance(call_key, str) or not call_key or not (call_key.isascii() and call_key.isprintable()):
        raise UrlHookError("the call has no callKey for the hook's answer to name")
    raw = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    headers = {
        "Content-Type": "application/json",
        IDEMPOTENCY_HEADER: call_key,
        **signed_headers(hook.secret, raw),
    }
    try:
        async with (
            asyncio.timeout(hook.timeout),
            httpx.AsyncClient(
                timeout=hook.timeout, transport=transport, verify=_tls(), follow_redirects=False
            ) as client,
            client.stream("POST", hook.url, content=raw, headers=headers) as response,
        ):
            answer = bytearray()
            async for chunk in response.aiter_bytes():
                answer += chunk
                if len(answer) > MAX_ANSWER_BYTES:
                    raise UrlHookError(f"the hook's answer is larger than {MAX_ANSWER_BYTES} bytes")
    except TimeoutError:
        raise UrlHookError(f"the hook did not answer within {hook.timeout:g}s") from None
    except httpx.HTTPError as exc:
        raise UrlHookError(f"the hook could not be reached: {type(exc).__name__}: {exc}") from None
    if not 200 <= response.status_code < 300:
        raise UrlHookError(f"the hook answered HTTP {response.status_code}")
    content = bytes(answer)
    try:
        verify(hook.secret, response.headers, content)
    except InvalidSignature as exc:
        raise UrlHookError(f"the hook's answer is not signed with its secret: {exc}") from None
    try:
        return hook_verdict_from_dict(json.loads(content), call_key)
    except ValueError as exc:
        raise UrlHookError(f"the hook's answer is not a verdict on this call: {exc}") from None
