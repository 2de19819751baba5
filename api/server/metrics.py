"""The service's metrics in Prometheus' form, on a registry of its own (served by ``api.server.routes.metrics``).

Contract: ``Metrics`` holds one ``CollectorRegistry`` per service (never the process-global one, so several
apps in one process do not clash) with: the engine's metrics (``scheduler.engine.metrics``: cycle durations,
decisions by kind and cause, executor and cycle errors), kept here when the engine runs in this process
(``local_engine``), else asked of the engine process at each scrape (``watch_engine``; absent from a scrape
while it does not answer); the API's request latency histogram
(``tide_http_request_duration_seconds`` by route template, method and status, fed by ``api.server.observe``); and
figures read from the database at each scrape (``StateCollector``): per project its deserved, fair-share,
allocated and pending GPUs and the pending GPUs that can never fit (labels ``project`` and ``department``, empty when none), jobs by project and
status, the cluster's GPUs, and whether this instance leads. A database that cannot be read during a scrape
gives ``tide_state_up 0`` instead of an error, so the other metrics still arrive.

The figures are what any project token reads through the API anyway; no token, hash, env value or command
appears in them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, selectinload

from api.server.convert import Figures, Totals
from api.server.engine.link import EngineHandle, EngineUnavailable
from scheduler.core.fairshare import never_fits
from scheduler.engine.metrics import EngineMetrics
from scheduler.statuses import ACTIVE, JobStatus, ReplicaDesired
from scheduler.store.db import Database
from scheduler.store.models import JobRow, NodeRow, ProjectRow, ReplicaRow
from scheduler.store.queries import project_figures

REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
PROJECT_GAUGES = {
    "deserved": "GPUs the project is guaranteed (its quota).",
    "fair_share": "GPUs the project is entitled to right now (R1), as of the last cycle.",
    "allocated": "GPUs of the replicas the scheduler wants running for the project.",
    "pending": "GPUs the project's pending jobs need to start (min_replicas x gpus_per_replica).",
    "never_fit": "GPUs of the project's pending jobs that today's schedulable nodes can never hold, even all "
    "empty (a replica larger than the largest node, or more replicas than the nodes hold); part of pending.",
}


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self._state: StateCollector | None = None
        self._engine: EngineMetrics | RemoteCollector | None = None
        self.requests = Histogram(
            "tide_http_request_duration_seconds",
            "Seconds to answer an HTTP request, by route template, method and status code.",
            ["route", "method", "status"],
            buckets=REQUEST_BUCKETS,
            registry=self.registry,
        )

    def local_engine(self) -> EngineMetrics:
        """The engine's metrics, for an engine in this process (registered once per app)."""
        if not isinstance(self._engine, EngineMetrics):
            self._engine = EngineMetrics(self.registry)
        return self._engine

    def watch_engine(self, fetch: Callable[[], str]) -> None:
        """The engine's metrics, as the engine process exposes them (``fetch``), read at every scrape."""
        if self._engine is None:
            self._engine = RemoteCollector(fetch)
            self.registry.register(self._engine)
        elif isinstance(self._engine, RemoteCollector):
            self._engine.fetch = fetch  # the service restarted in this process (tests)

    def watch_state(self, db: Database, engine: EngineHandle) -> None:
        """Read the database's figures at every scrape (once the service's parts exist; again on restart)."""
        if self._state is not None:
            self.registry.unregister(self._state)
        self._state = StateCollector(db, engine)
        self.registry.register(self._state)


class RemoteCollector(Collector):
    """Metrics of another process, given in Prometheus' text format; none while it does not answer."""

    def __init__(self, fetch: Callable[[], str]) -> None:
        self.fetch = fetch

    def collect(self) -> Iterator[Metric]:
        try:
            text = self.fetch()
        except EngineUnavailable:
            return
        yield from text_string_to_metric_families(text)


class StateCollector(Collector):
    def __init__(self, db: Database, engine: EngineHandle) -> None:
        self.db = db
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("tide_state_up", "1 when this scrape could read the database, else 0.")
        try:
            with self.db.read() as session:
                families = _state_families(session)
        except DBAPIError:
            up.add_metric([], 0)
            families = []
        else:
            up.add_metric([], 1)
        yield up
        yield from families
        leader = GaugeMetricFamily("tide_leader", "1 when this instance runs the scheduling loop, else 0.")
        leader.add_metric([], 1 if self.engine.is_leader else 0)
        yield leader


def _state_families(session: Session) -> list[Metric]:
    projects = session.scalars(select(ProjectRow).options(selectinload(ProjectRow.department))).all()
    totals = Totals.of(*project_figures(session))
    never_fit = _never_fit_gpus(session)
    gauges = {
        key: GaugeMetricFamily(f"tide_project_{key}_gpus", text, labels=["project", "department"])
        for key, text in PROJECT_GAUGES.items()
    }
    usage = GaugeMetricFamily(
        "tide_project_usage_gpu_hours",
        "Fair share over time: GPU-hours the project held above its quota, decayed by the usage half-life.",
        labels=["project", "department"],
    )
    weight = GaugeMetricFamily(
        "tide_project_over_quota_weight",
        "The over-quota weight the last cycle divided idle GPUs by (lowered for usage above quota).",
        labels=["project", "department"],
    )
    for row in projects:
        labels = [row.name, row.department.name if row.department else ""]
        figures = totals.by_project.get(row.id, Figures())
        gauges["deserved"].add_metric(labels, row.deserved_gpus)
        gauges["fair_share"].add_metric(labels, row.fair_share_gpus)
        gauges["allocated"].add_metric(labels, figures.allocated_gpus)
        gauges["pending"].add_metric(labels, figures.pending_gpus)
        gauges["never_fit"].add_metric(labels, never_fit.get(row.id, 0))
        usage.add_metric(labels, row.usage_gpu_seconds / 3600.0)
        weight.add_metric(labels, row.over_quota_weight if row.usage_weight is None else row.usage_weight)
    return [
        *gauges.values(),
        usage,
        weight,
        *_shared(session, {r.id: [r.name, r.department.name if r.department else ""] for r in projects}),
        _jobs(session, {r.id: r.name for r in projects}),
        _cluster(session),
    ]


def _shared(session: Session, labels: dict[int, list[str]]) -> list[Metric]:
    """R20: per project, the shared GPUs its fractional replicas run on and the shares booked on them (exact
    sums, shown as floats); the cluster's shared GPUs. One query over the fractional replicas wanted running."""
    rows = session.execute(
        select(JobRow.project_id, ReplicaRow.node, ReplicaRow.shared_gpu, ReplicaRow.share)
        .join(ReplicaRow, ReplicaRow.job_id == JobRow.id)
        .where(
            ReplicaRow.shared_gpu.is_not(None),
            ReplicaRow.desired == ReplicaDesired.RUN,
            JobRow.status.in_(ACTIVE),
        )
    )
    gpus: dict[int, set[tuple[str, int]]] = {}
    booked: dict[int, Fraction] = {}
    for project_id, node, number, text in rows:
        gpus.setdefault(project_id, set()).add((node, number or 0))
        booked[project_id] = booked.get(project_id, Fraction(0)) + Fraction(text or "0")
    shared = GaugeMetricFamily(
        "tide_project_shared_gpus",
        "GPUs the project's fractional replicas share (each counts as one GPU of its quota).",
        labels=["project", "department"],
    )
    fraction = GaugeMetricFamily(
        "tide_project_booked_gpu_fraction",
        "The sum of the shares of one GPU booked by the project's fractional replicas.",
        labels=["project", "department"],
    )
    for project_id, names in sorted(labels.items(), key=lambda item: item[1]):
        shared.add_metric(names, len(gpus.get(project_id, ())))
        fraction.add_metric(names, float(booked.get(project_id, 0)))
    cluster = GaugeMetricFamily("tide_cluster_shared_gpus", "GPUs shared by fractional replicas.")
    cluster.add_metric([], sum(len(g) for g in gpus.values()))
    return [shared, fraction, cluster]


def _jobs(session: Session, names: dict[int, str]) -> Metric:
    jobs = GaugeMetricFamily("tide_jobs", "Jobs by project and status.", labels=["project", "status"])
    counts = {
        (project_id, status): int(count)
        for project_id, status, count in session.execute(
            select(JobRow.project_id, JobRow.status, func.count()).group_by(JobRow.project_id, JobRow.status)
        )
    }
    for project_id, name in sorted(names.items(), key=lambda item: item[1]):
        for status in JobStatus:
            jobs.add_metric([name, status.value], counts.get((project_id, status), 0))
    return jobs


def _never_fit_gpus(session: Session) -> dict[int, int]:
    """Per project id: the minimum GPUs of its pending jobs that can never fit today's schedulable nodes
    (``scheduler.core.fairshare.never_fits``, the core's one definition). Two aggregate queries."""
    sizes = [int(g) for (g,) in session.execute(select(NodeRow.gpus).where(NodeRow.schedulable.is_(True)))]
    largest = max(sizes, default=0)
    shapes = session.execute(
        select(JobRow.project_id, JobRow.gpus_per_replica, JobRow.min_replicas, func.count())
        .where(JobRow.status == JobStatus.PENDING)
        .group_by(JobRow.project_id, JobRow.gpus_per_replica, JobRow.min_replicas)
    )
    found: dict[int, int] = {}
    slots: dict[int, int] = {}
    for project_id, g, k, count in shapes:
        if g not in slots:
            slots[g] = sum(size // g for size in sizes) if g > 0 else 0
        if never_fits(g, k, largest, slots[g]):
            found[project_id] = found.get(project_id, 0) + int(count) * g * k
    return found


def _cluster(session: Session) -> Metric:
    gpus = GaugeMetricFamily("tide_cluster_gpus", "GPUs of the cluster's nodes.", labels=["schedulable"])
    rows = session.execute(select(NodeRow.schedulable, func.sum(NodeRow.gpus)).group_by(NodeRow.schedulable))
    found = {bool(schedulable): int(total or 0) for schedulable, total in rows}
    for schedulable in (True, False):
        gpus.add_metric([str(schedulable).lower()], found.get(schedulable, 0))
    return gpus
