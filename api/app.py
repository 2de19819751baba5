"""The Tide service: ``create_app(settings)`` builds the FastAPI app; its lifespan runs the scheduling loop.

Contract: nothing is opened at import. The lifespan migrates the database (refusing one from a newer Tide),
builds the executor, takes part in leader election, runs ``Engine.run`` as a task, and on shutdown stops the
loop without stopping replicas (a restarted service adopts them) and closes the executor if it has a
``close`` (the kubernetes one ends its watches). Routes live under ``/api/v1`` (GETs answer
304 to a matching ``If-None-Match``); ``/docs``
serves OpenAPI; ``/metrics`` Prometheus metrics (``api.metrics``; every request is timed and carries a
request id: ``api.observe``); ``/`` serves the dashboard (``api.dashboard``) when its ``index.html`` is there, a placeholder
otherwise. Tests may pass their own ``executor`` (e.g. ``FakeExecutor``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from api.auth import admin_token
from api.cache import StateVersion, ViewCache, WriteCounter
from api.dashboard import STATIC, DashboardFiles
from api.deps import Services
from api.errors import BodyLimit, install_error_handlers
from api.etag import ETagMiddleware
from api.metrics import Metrics
from api.metrics import router as metrics_router
from api.observe import ObserveMiddleware
from api.openapi import MethodGuard, install
from api.routes import cluster, departments, events, health, jobs, nodes, projects, tokens
from api.settings import Settings
from scheduler.core import Config, Node
from scheduler.engine.loop import Engine, EngineSettings
from scheduler.executors.base import Executor
from scheduler.executors.fake import FakeExecutor
from scheduler.executors.kube.config import KubeSettings
from scheduler.executors.kubernetes import KubernetesExecutor
from scheduler.executors.local import LocalExecutor, visible_gpu_count
from scheduler.store.db import Database
from scheduler.store.migrate import upgrade

log = logging.getLogger(__name__)
API_PREFIX = "/api/v1"
PLACEHOLDER = """<!doctype html><html><head><meta charset="utf-8"><title>Tide</title></head>
<body><h1>Tide is running</h1><p>The API is under <a href="/api/v1/cluster">/api/v1</a>;
its documentation is at <a href="/docs">/docs</a>.</p></body></html>"""


def resolve_nodes(settings: Settings) -> tuple[tuple[Node, ...], bool]:
    """The local executor's nodes and whether their GPUs are real (R12 places onto these)."""
    if settings.nodes is None and settings.gpus_per_node is None:
        count = visible_gpu_count()
        if count > 0:
            return (Node(name="node-0", gpus=count),), True
    nodes = settings.nodes if settings.nodes is not None else 1
    gpus = settings.gpus_per_node if settings.gpus_per_node is not None else 4
    return tuple(Node(name=f"node-{i}", gpus=gpus) for i in range(nodes)), False


def kube_settings(settings: Settings) -> KubeSettings:
    return KubeSettings(
        namespace=settings.namespace,
        kubeconfig=settings.kubeconfig,
        default_image=settings.default_image,
        node_selector=settings.node_selector,
        checkpoint_claim=settings.checkpoint_claim,
    )


def build_executor(settings: Settings) -> Executor:
    """The executor named by ``settings.executor``; the kubernetes one connects at its first use."""
    if settings.executor == "kubernetes":
        return KubernetesExecutor(
            kube_settings(settings), data_dir=settings.data_dir, grace_period=settings.grace_period
        )
    nodes, real = resolve_nodes(settings)
    if settings.executor == "local":
        return LocalExecutor(settings.data_dir, nodes, real_gpus=real)
    if settings.executor == "fake":
        return FakeExecutor(nodes)
    raise ValueError(f"unknown executor {settings.executor!r}: use local or kubernetes")


def build_services(
    settings: Settings, metrics: Metrics, version: StateVersion, executor: Executor | None = None
) -> Services:
    db = Database(settings.resolved_database_url())
    upgrade(db)
    executor = executor or build_executor(settings)
    engine_settings = EngineSettings(
        cycle_period=settings.cycle_period,
        grace_period=settings.grace_period,
        core=Config(settle_seconds=settings.settle_seconds),
        check_invariants=settings.check_invariants,
    )
    token, _ = admin_token(settings)
    engine = Engine(db, executor, engine_settings, metrics=metrics.engine)
    metrics.watch_state(db, engine)
    version.cycles = lambda: engine.changes
    return Services(
        settings=settings,
        db=db,
        executor=executor,
        engine=engine,
        admin_token=token,
        metrics=metrics,
        views=ViewCache(version),
    )


def create_app(settings: Settings, *, executor: Executor | None = None) -> FastAPI:
    metrics = Metrics()  # a registry per app: several apps in one process (tests) do not clash
    version = StateVersion()  # what polled reads are cached against (api.cache)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services = await asyncio.to_thread(build_services, settings, metrics, version, executor)
        app.state.tide = services
        task = None
        if settings.run_loop:
            try:  # lead (or not) and know the nodes before serving
                await asyncio.to_thread(services.engine.tick)
            except Exception:
                log.exception("first scheduling cycle failed; the loop retries")
            task = asyncio.create_task(services.engine.run(), name="tide-engine")
        try:
            yield
        finally:
            services.engine.stop()
            if task is not None:
                with suppress(asyncio.CancelledError):
                    await task
            services.engine.close()
            services.db.dispose()
            close_executor = getattr(services.executor, "close", None)  # the kubernetes one has watches
            if callable(close_executor):
                close_executor()

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
    for module in (projects, departments, jobs, cluster, nodes, events, tokens):
        app.include_router(module.router, prefix=API_PREFIX)
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
