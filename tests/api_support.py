"""People and agents signed in to a server a test started: its address and their tokens."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

CALL_BOUND = 10  # seconds: the most one call to the test's server may take


@dataclass
class World:
    """A server at `base` and a token for each name a test acts as (`db`: its store)."""

    base: str
    tokens: dict[str, str]
    db: str = ""

    def client(self, who: str) -> httpx.AsyncClient:
        """A client of the API that acts as `who`, with their token."""
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        return httpx.AsyncClient(base_url=f"{self.base}/api/v1", headers=headers, timeout=CALL_BOUND)
