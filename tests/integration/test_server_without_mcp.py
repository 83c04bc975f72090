"""A server installed without the `mcp` extra serves everything but /mcp, which says how
to get it."""

from __future__ import annotations

import pytest

from asgi_support import serve_in_process
from interlock.server import app as server_app

pytestmark = pytest.mark.anyio


async def test_without_the_mcp_sdk_mcp_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_app, "mcp_installed", lambda: False)
    async with serve_in_process("memory://", auth=False) as server, server.client() as client:
        response = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert response.status_code == 404
        assert "[server,mcp]" in response.json()["detail"]
        assert (await client.get("/api/v1/requests")).status_code == 200


async def test_with_the_mcp_sdk_mcp_is_served() -> None:
    assert server_app.mcp_installed()
    async with serve_in_process("memory://", auth=False) as server, server.client() as client:
        response = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert response.status_code != 404
