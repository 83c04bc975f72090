from __future__ import annotations

import interlock.mcp


def test_the_mcp_packages_public_names_are_pinned() -> None:
    assert sorted(interlock.mcp.__all__) == [
        "Access",
        "HttpEndpoint",
        "InboxElicitation",
        "MAX_STATUS_WAIT",
        "Seat",
        "build_server",
        "fixed_access",
        "serve_stdio",
    ]
    assert all(hasattr(interlock.mcp, name) for name in interlock.mcp.__all__)
