"""The Tide service: ``create_app(settings)`` builds the FastAPI app; its lifespan runs the scheduling loop.

Contract: nothing is opened at import. The lifespan migrates the database (refusing one from a newer Tide)
and runs the engine (leader election, executor, cycles) one of two ways: with ``Settings.engine_process``
(``tide serve``) in a child process of its own (``api.server.engine.link``, ``api.server.engine.host``), so a cycle never
holds the interpreter that answers requests; otherwise (tests, tools) in this process, ``Engine.run`` as
a task beside the API. Either way it waits for the first cycle before serving, and on shutdown stops the
loop without stopping replicas (a restarted service adopts them) and closes the executor if it has a
``close`` (the kubernetes one ends its watches). Routes live under ``/api/v1`` (GETs answer
304 to a matching ``If-None-Match``); ``/docs``
serves OpenAPI; ``/metrics`` Prometheus metrics (``api.server.metrics``, ``api.server.routes.metrics``; every request is timed and carries a
request id: ``api.server.observe``); ``/`` serves the dashboard (``api.server.dashboard``) when its ``index.html`` is there, a placeholder
otherwise. Tests may pass their own ``executor`` (e.g. ``FakeExecutor``; in-process engine only).
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext, suppress

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from api.server import longpoll
from api.server.auth import admin_token
from api.server.cache import StateVersion, ViewCache, WriteCounter
from api.server.dashboard import STATIC, DashboardFiles
from api.server.deps import LogReader, Services
from api.server.engine.link import EngineLink
from api.server.errors import BodyLimit, install_error_handlers
from api.server.etag import ETagMiddleware
from api.server.metrics import Metrics
from api.server.observe import ObserveMiddleware
from api.server.openapi import MethodGuard, install
from api.server.parts import build_executor, build_leadership, close_executor, engine_settings
from api.server.routes import (
    agent,
    cluster,
    departments,
    events,
    health,
    jobs,
    manifests,
    nodes,
    projects,
    tokens,
)
from api.server.routes.metrics import router as metrics_router
from api.server.settings import Settings
from api.server.submits import SubmitBatcher
from scheduler.engine.loop import Engine
from scheduler.executors.base import Executor
from scheduler.store.db import Database
from scheduler.store.migrate import upgrade

API_PREFIX = "/api/v1"
PLACEHOLDER = """<!doctype html><html><head><meta charset="utf-8"><title>Tide</title></head>
<body><h1>Tide is running</h1><p>The API is under <a href="/api/v1/cluster">/api/v1</a>;
its documentation is at <a href="/docs">/docs</a>.</p></body></html>"""


def build_services(
    settings: Settings, metrics: Metrics, version: StateVersion, executor: Executor | None = None
) -> tuple[Services, AbstractAsyncContextManager[None]]:
    """The service's parts, and what runs the engine while the service serves."""
    db = Database(settings.resolved_database_url(), pool=settings.database_pool)
    upgrade(db)  # before an engine process starts: it never migrates
    token, _ = admin_token(settings)
    engine: Engine | EngineLink
    if settings.engine_process:
        engine = link = EngineLink(settings)
        metrics.watch_engine(link.metrics_text)
        logs: LogReader = link
        runner = _engine_process(link) if settings.run_loop else nullcontext()
    else:
        executor = executor or build_executor(settings)
        engine = Engine(
            db,
            executor,
            engine_settings(settings),
            leadership=build_leadership(settings, db),
            metrics=metrics.local_engine(),
            on_change=longpoll.wake,
        )
        logs = executor
        runner = _engine_here(engine, executor, run=settings.run_loop)
    metrics.watch_state(db, engine)
    version.cycles = lambda: engine.changes
    version.placements = lambda: engine.placements
    version.node_rows_of = lambda: engine.node_rows
    services = Services(
        settings=settings,
        db=db,
        logs=logs,
        engine=engine,
        admin_token=token,
        metrics=metrics,
        views=ViewCache(version),
        submits=None if db.is_sqlite else SubmitBatcher(db, engine.trigger),
    )
    return services, runner


@asynccontextmanager
async def _engine_here(engine: Engine, executor: Executor, *, run: bool) -> AsyncIterator[None]:
    """The engine as a task on this event loop (tests, and ``create_app`` without ``engine_process``)."""
    task = None
    if run:
        await engine.turn()  # lead (or not) and know the nodes before serving
        task = asyncio.create_task(engine.run(), name="tide-engine")
    try:
        yield
    finally:
        engine.stop()
        if task is not None:
            with suppress(asyncio.CancelledError):
                await task
        engine.close()
        close_executor(executor)


@asynccontextmanager
async def _engine_process(link: EngineLink) -> AsyncIterator[None]:
    """The engine in a child process (``tide serve``): its cycles never hold this process's interpreter."""
    await asyncio.to_thread(link.start)  # its first cycle done: the nodes are known before serving
    try:
        yield
    finally:
        await asyncio.to_thread(link.stop)


def tune_server_process() -> None:
    """For ``tide serve``'s API process (not a test's): move what startup built out of the collector's
    sight, so a full collection scans only what came since (it paused every request for 90-200 ms every
    few seconds under load); and switch threads every 1 ms rather than 5, so a request thread back from
    the database (holding the write lock, for a submit) is not kept waiting behind a view build."""
    gc.collect()
    gc.freeze()
    sys.setswitchinterval(0.001)


def create_app(settings: Settings, *, executor: Executor | None = None) -> FastAPI:
    metrics = Metrics()  # a registry per app: several apps in one process (tests) do not clash
    version = StateVersion()  # what polled reads are cached against (api.server.cache)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services, runner = await asyncio.to_thread(build_services, settings, metrics, version, executor)
        app.state.tide = services
        try:
            async with runner:
                if settings.engine_process:  # the server's own process (tide serve), not a test's
                    tune_server_process()
                yield
        finally:
            services.db.dispose()

    app = FastAPI(
        title="Tide",
        version="0.1.0",
        lifespan=lifespan,
        description="Quota-aware elastic GPU scheduler for distributed PyTorch jobs.",
    )
    install_error_handlers(app)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(ETagMiddleware, prefix=API_PREFIX)
    app.add_middleware(WriteCounter, version=version, prefix=API_PREFIX)
    app.add_middleware(MethodGuard, api=app)
    app.add_middleware(ObserveMiddleware, histogram=metrics.requests, prefixes=(API_PREFIX,))  # outermost
    for module in (projects, departments, jobs, manifests, cluster, nodes, events, tokens):
        app.include_router(module.router, prefix=API_PREFIX)
    app.include_router(agent.router)
    app.include_router(health.router)
    app.include_router(metrics_router)
    app.include_router(health.router, prefix=API_PREFIX, include_in_schema=False)
    _mount_dashboard(app)
    install(app, API_PREFIX)
    return app


def _mount_dashboard(app: FastAPI) -> None:
    if (STATIC / "index.html").is_file():
        app.mount("/", DashboardFiles(STATIC), name="dashboard")
        return

    @app.get("/", include_in_schema=False)
    def placeholder() -> HTMLResponse:
        return HTMLResponse(PLACEHOLDER)
