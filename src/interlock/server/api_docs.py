"""The interactive API page, `/docs`: Swagger UI over the server's own `/openapi.json`.

Everything the page runs comes from this server: Swagger UI is vendored
(`static/swagger-ui/`, an exact release of `swagger-ui-dist` from the npm registry; its
README says which and how to update it) and the page's settings are a script of its own
(`static/api-docs.js`), so the page is sent with the web inbox's Content-Security-Policy
(scripts from this origin only, no inline script or style). FastAPI's default pages loaded
unpinned scripts from a CDN, with no integrity check, on the origin of the inbox's
session: whoever controlled that CDN ran script as any person signed in who opened them.
So they are off (`docs_url=None`, `redoc_url=None`), and there is no `/redoc`.
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from fastapi import Request as HttpRequest
from fastapi.responses import HTMLResponse

from .common import State, include
from .web import page

__all__ = ["DOCS_PATH", "install_api_docs"]

DOCS_PATH = "/docs"

router = APIRouter(include_in_schema=False)


def install_api_docs(app: FastAPI) -> None:
    """Add `/docs` (after `install_web`, whose templates and static files it uses)."""
    include(app, router)


@router.get(DOCS_PATH, name="api_docs", response_class=HTMLResponse)
async def api_docs(http: HttpRequest, state: State) -> HTMLResponse:
    # Behind a proxy that serves the app under a prefix, the document is under it too.
    root_path = http.scope.get("root_path", "").rstrip("/")
    return page(state, http, "api_docs.html", {"openapi_url": root_path + http.app.openapi_url})
