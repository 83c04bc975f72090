"""Helpers for the quota, contract and close tests: principals with tokens on a store, and
API clients that use them."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

import interlock
from interlock.principals import Principal, issue_token

BOUND = 10

PEOPLE = (
    Principal("alice", "human"),
    Principal("bob", "human"),
    Principal("alice-bot", "agent", owner="alice"),
    Principal("bob-bot", "agent", owner="bob"),
)

TEXT = {"asks": [{"type": "text", "prompt": "Deploy?"}]}


async def issue_tokens(db: str, principals: tuple[Principal, ...] = PEOPLE) -> dict[str, str]:
    """Save the principals in the store at `db` and give each a token: their secrets by name."""
    tokens: dict[str, str] = {}
    async with interlock.connect(db) as broker:
        for principal in principals:
            await broker.store.save_principal(principal)
            token = issue_token(principal.name, datetime.now(UTC))
            await broker.store.save_token(token)
            tokens[principal.name] = token.secret
    return tokens


def api(base: str, token: str | None = None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=f"{base}/api/v1", headers=headers, timeout=BOUND)
