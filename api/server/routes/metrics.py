"""``GET /metrics``: ``api.server.metrics``' registry in Prometheus' text format, for a bearer token.

Contract: ``/metrics`` needs a bearer token (see docs/security.md): the admin token, a project token, or the
metrics token (``TIDE_METRICS_TOKEN``), which can read nothing else; without one it is a 401.
"""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.server.auth import Principal, bearer, is_admin, project_principal
from api.server.deps import Svc

router = APIRouter(tags=["metrics"])


def _scraper(request: Request, svc: Svc) -> Principal:
    """The admin token, a project token or the metrics token (401 otherwise)."""
    token = bearer(request.headers.get("authorization"))
    if is_admin(token, svc.admin_token):
        return Principal(is_admin=True)
    metrics_token = svc.settings.metrics_token
    if metrics_token and hmac.compare_digest(token.encode(), metrics_token.encode()):
        return Principal(is_admin=False)
    with svc.db.read() as session:
        return project_principal(token, session)


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format"}},
)
def metrics(request: Request, svc: Svc) -> Response:
    """Prometheus metrics; needs a bearer token (admin, project or ``TIDE_METRICS_TOKEN``)."""
    _scraper(request, svc)
    return Response(generate_latest(svc.metrics.registry), media_type=CONTENT_TYPE_LATEST)
