"""What routes depend on: the running service's parts and the caller's identity.

Contract: ``Services`` is built once by ``api.app`` and kept on ``app.state.tide``; its ``engine`` is the
``Engine`` itself when it runs in this process, else an ``api.engine_link.EngineLink`` (``EngineHandle`` is
what routes may use of either), and ``logs`` reads a replica's output (the executor, or the engine process
on its behalf). ``Svc`` and ``Caller``
are FastAPI dependencies (annotated types) giving a route the services and the authenticated principal;
authentication runs on every route that declares ``Caller`` (every route but health and docs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Protocol

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from api.auth import Principal, bearer, is_admin, project_principal
from api.settings import Settings
from scheduler.store.db import Database

if TYPE_CHECKING:  # api.metrics depends on this module
    from api.cache import ViewCache
    from api.metrics import Metrics


class EngineHandle(Protocol):
    """The scheduling engine as the API sees it, in this process or another."""

    role: str
    cycles: int
    changes: int
    last_cycle_at: float | None
    last_error: str | None
    clock: Callable[[], float]

    @property
    def is_leader(self) -> bool: ...

    def trigger(self) -> None: ...


class LogReader(Protocol):
    def read_log(self, project: str, job: str, index: int, tail: int | None = None) -> str | None: ...


@dataclass
class Services:
    settings: Settings
    db: Database
    logs: LogReader
    engine: EngineHandle
    admin_token: str
    metrics: Metrics
    views: ViewCache


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
