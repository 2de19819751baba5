"""What routes depend on: the running service's parts and the caller's identity.

Contract: ``Services`` is built once by ``api.server.app`` and kept on ``app.state.tide``; its ``engine`` is the
``Engine`` itself when it runs in this process, else an ``api.server.engine.link.EngineLink``
(``api.server.engine.link.EngineHandle`` is what routes may use of either), and ``logs`` reads a replica's output
(the executor, or the engine process on its behalf). The parts (``api.server.metrics``, ``api.server.cache``,
``api.server.engine.link``) know nothing of this module: an import-linter contract keeps the dependency one way. ``Svc`` and ``Caller``
are FastAPI dependencies (annotated types) giving a route the services and the authenticated principal;
authentication runs on every route that declares ``Caller`` (every route but health and docs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from api.server.auth import Principal, bearer, is_admin, project_principal
from api.server.cache import ViewCache
from api.server.engine.link import EngineHandle, LogReader
from api.server.metrics import Metrics
from api.server.settings import Settings
from api.server.submits import SubmitBatcher
from scheduler.store.db import Database

__all__ = ["Caller", "EngineHandle", "LogReader", "Services", "Svc"]


@dataclass
class Services:
    settings: Settings
    db: Database
    logs: LogReader
    engine: EngineHandle
    admin_token: str
    metrics: Metrics
    views: ViewCache
    submits: SubmitBatcher | None = None  # PostgreSQL: submits that come together share a statement


async def get_services(request: Request) -> Services:  # async: a sync dependency costs a thread hop
    services: Services = request.app.state.tide
    return services


Svc = Annotated[Services, Depends(get_services)]


async def get_principal(request: Request, services: Svc) -> Principal:
    """Async: the admin token is checked on the event loop; only a project token's lookup takes a thread."""
    token = bearer(request.headers.get("authorization"))
    if is_admin(token, services.admin_token):
        return Principal(is_admin=True)
    return await run_in_threadpool(_project_principal, services, token)


def _project_principal(services: Services, token: str) -> Principal:
    with services.db.read() as session:
        return project_principal(token, session)


Caller = Annotated[Principal, Depends(get_principal)]
