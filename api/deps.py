"""What routes depend on: the running service's parts and the caller's identity.

Contract: ``Services`` is built once by ``api.app`` and kept on ``app.state.tide``. ``Svc`` and ``Caller``
are FastAPI dependencies (annotated types) giving a route the services and the authenticated principal;
authentication runs on every route that declares ``Caller`` (every route but health and docs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from api.auth import Principal, bearer, is_admin, project_principal
from api.settings import Settings
from scheduler.engine.loop import Engine
from scheduler.executors.base import Executor
from scheduler.store.db import Database

if TYPE_CHECKING:  # api.metrics depends on this module
    from api.cache import ViewCache
    from api.metrics import Metrics


@dataclass
class Services:
    settings: Settings
    db: Database
    executor: Executor
    engine: Engine
    admin_token: str
    metrics: Metrics
    views: ViewCache


def get_services(request: Request) -> Services:
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
