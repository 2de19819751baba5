"""The web dashboard: static files (HTML, CSS, plain ES modules) that poll the REST API; no build step.

Contract: ``DashboardFiles`` serves ``api/server/dashboard/static`` at ``/`` (``index.html`` for the root). Every
answer carries ``Cache-Control: no-cache`` (the browser revalidates, so an upgraded Tide is never shown with
stale scripts; unchanged files cost a 304) and a ``Content-Security-Policy`` that allows only this origin:
the page loads nothing from the internet and runs no inline script, by construction rather than by review.
What the page shows and how it polls: docs/dashboard.md.
"""

from __future__ import annotations

from pathlib import Path

from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

STATIC = Path(__file__).parent / "static"
HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
        "frame-ancestors 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class DashboardFiles(StaticFiles):
    """``StaticFiles`` for the dashboard, with the headers above on every answer."""

    def __init__(self, directory: Path = STATIC) -> None:
        super().__init__(directory=directory, html=True)

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(HEADERS)
        return response
