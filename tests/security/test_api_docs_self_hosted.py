"""The interactive API page, `/docs`, is served whole by the server, under the web inbox's
Content-Security-Policy: FastAPI's default pages (`/docs`, `/redoc`) loaded unpinned scripts
from a CDN, with no integrity check and no policy, on the origin of the inbox's session
cookie and its forms, so whoever controlled that CDN path ran script as any person signed in
who opened them (and on a machine without internet the page was blank)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from urllib.parse import urljoin, urlsplit

import httpx
import pytest

from asgi_support import BASE_URL, InProcessServer, serve_in_process

pytestmark = pytest.mark.anyio

SECRET_KEY = "api-docs-secret-key-of-32-characters"
POLICY = re.compile(r"(?:^|;)\s*script-src 'self'\s*(?:;|$)")


@pytest.fixture
async def server() -> AsyncIterator[InProcessServer]:
    async with serve_in_process("memory://", secret_key=SECRET_KEY) as s:
        yield s


def policy_of(response: httpx.Response) -> str:
    policy = response.headers.get("content-security-policy", "")
    assert POLICY.search(policy), f"{response.url}: {policy!r}"
    assert "unsafe" not in policy
    assert response.headers["x-content-type-options"] == "nosniff"
    return policy


def what_the_page_loads(html: str) -> list[str]:
    """Every script and stylesheet the page names; and no script of its own inline."""
    scripts = re.findall(r"<script\b([^>]*)>", html)
    assert scripts and all(re.search(r'\bsrc="', attrs) for attrs in scripts), scripts
    assert "<style" not in html and " style=" not in html
    sources = [re.search(r'\bsrc="([^"]+)"', attrs).group(1) for attrs in scripts]  # type: ignore[union-attr]
    return sources + re.findall(r'<link rel="stylesheet" href="([^"]+)"', html)


async def test_docs_and_all_it_loads_come_from_the_server_with_its_policy(server: InProcessServer) -> None:
    async with server.client() as client:
        page = await client.get("/docs")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in policy_of(page)
        loaded = what_the_page_loads(page.text)
        assert any(url.endswith("/swagger-ui-bundle.js") for url in loaded), loaded
        for url in loaded:
            absolute = urljoin(str(page.url), url)
            assert urlsplit(absolute).netloc == urlsplit(BASE_URL).netloc, f"{url} is not the server's own"
            asset = await client.get(absolute)
            assert asset.status_code == 200, url
            assert asset.headers["content-type"].startswith(("text/javascript", "text/css")), url
            policy_of(asset)
        document = await client.get("/openapi.json")  # as it was: where the page reads the API
        assert document.status_code == 200
        assert document.json()["openapi"].startswith("3.1")


async def test_there_is_no_redoc_page(server: InProcessServer) -> None:
    async with server.client() as client:
        for path in ("/redoc", "/docs/oauth2-redirect"):
            gone = await client.get(path)
            assert gone.status_code == 404, path
            assert "cdn.jsdelivr.net" not in gone.text
