"""``/healthz`` (the process answers) and ``/readyz`` (the database answers): no token needed.

Contract: ``/healthz`` is 200 while the process serves, and 503 (``unavailable``) while the engine holds the
lead but has not completed a cycle (since it took it) for ``stall_periods`` cycle periods (its cycles fail or hang: a liveness probe
restarts it). ``/readyz`` is 200 when the database answers, else 503; both report the role (``leader`` or
``standby``) and the loop's last cycle and error.
"""

from __future__ import annotations

from fastapi import APIRouter, Response, status
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from api.server import convert, schemas
from api.server.deps import Services, Svc
from api.shared.version import package_version

router = APIRouter(tags=["health"])
VERSION = package_version()


def _health(svc: Services, ok: bool, database: str) -> schemas.Health:
    engine = svc.engine
    return schemas.Health(
        status="ok" if ok else "unavailable",
        role=engine.role,
        version=VERSION,
        database=database,
        cycles=engine.cycles,
        last_cycle_at=convert.when(engine.last_cycle_at),
        last_error=engine.last_error,
    )


def stalled(svc: Services) -> bool:
    """The engine holds the lead, and neither its last completed cycle nor its taking the lead is more recent
    than ``stall_periods`` cycle periods (a first cycle that never completes counts too)."""
    engine, settings = svc.engine, svc.settings
    if settings.stall_periods <= 0 or engine.leading_since is None:
        return False
    last = max(engine.leading_since, engine.last_cycle_at or engine.leading_since)
    return engine.clock() - last > settings.stall_periods * settings.cycle_period


@router.get(
    "/healthz",
    response_model=schemas.Health,
    responses={503: {"model": schemas.Health, "description": "The leading engine completes no cycle."}},
)
def healthz(svc: Svc, response: Response) -> schemas.Health:
    if stalled(svc):
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
        return _health(svc, False, svc.db.url.get_backend_name())
    return _health(svc, True, svc.db.url.get_backend_name())


@router.get(
    "/readyz",
    response_model=schemas.Health,
    responses={503: {"model": schemas.Health, "description": "The database does not answer."}},
)
def readyz(svc: Svc, response: Response) -> schemas.Health:
    try:
        with svc.db.read() as session:
            session.execute(text("SELECT 1"))
    except DBAPIError as error:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
        return _health(svc, False, f"unreachable: {type(error.orig).__name__}")
    return _health(svc, True, svc.db.url.get_backend_name())
