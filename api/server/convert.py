"""Rows to API schemas, and the live figures a read carries: the one store -> API conversion module.

Contract: pure functions of rows already loaded. Figures: ``allocated_gpus`` counts the GPUs of replicas
the scheduler wants running (launched or about to be) of active jobs; ``pending_gpus`` counts what pending
jobs need to start (``min_replicas * gpus_per_replica``); ``over_quota_gpus`` is what a project holds above
its deserved quota. Job ``env`` values are never returned (they may hold secrets), only their names.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any, Literal, Protocol

from fastapi import Response
from pydantic import BaseModel, TypeAdapter

from api.server import schemas
from scheduler.statuses import ACTIVE
from scheduler.store.models import DepartmentRow, EventRow, ProjectRow, TokenRow, takes_replicas
from scheduler.store.queries import Slot


@dataclass
class Figures:
    allocated_gpus: int = 0
    pending_gpus: int = 0
    running_jobs: int = 0
    pending_jobs: int = 0


@dataclass
class Totals:
    """Figures per project id, from ``scheduler.store.queries.project_figures``."""

    by_project: dict[int, Figures] = field(default_factory=lambda: defaultdict(Figures))
    # quotas that add up to more than they divide: the cluster's (key None), each department's (its name)
    oversubscribed: dict[str | None, str] = field(default_factory=dict)

    def warnings(self, department: str | None) -> list[str]:
        """What a project of ``department`` (or the department itself) is warned of: the cluster's quotas,
        then its department's."""
        keys = (None,) if department is None else (None, department)
        return [self.oversubscribed[k] for k in keys if k in self.oversubscribed]

    @classmethod
    def of(cls, jobs: Iterable[tuple[int, str, int, int]], held: Iterable[tuple[int, int]]) -> Totals:
        totals = cls()
        for project_id, status, count, min_gpus in jobs:
            figures = totals.by_project[project_id]
            if status == "pending":
                figures.pending_jobs += count
                figures.pending_gpus += min_gpus
            else:
                figures.running_jobs += count
        for project_id, gpus in held:
            totals.by_project[project_id].allocated_gpus += gpus
        return totals


def json_response(value: BaseModel | list[schemas.JobPublic]) -> Response:
    """Serialise a read once, here: FastAPI would validate the returned models again (hot polled reads)."""
    body = value.model_dump_json() if isinstance(value, BaseModel) else jobs_json(value)
    return Response(body, media_type="application/json")


def jobs_json(jobs: list[schemas.JobPublic]) -> bytes:
    return _JOB_LIST.dump_json(jobs)


_JOB_LIST = TypeAdapter(list[schemas.JobPublic])


def when(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


def role(index: int) -> Literal["master", "worker"]:
    return "master" if index == 0 else "worker"


def job_allocated(job: JobFields) -> int:
    return sum(r.gpus for r in job.replicas if r.desired == "run") if job.status in ACTIVE else 0


def project_public(row: ProjectRow, totals: Totals) -> schemas.ProjectPublic:
    figures = totals.by_project.get(row.id, Figures())
    return schemas.ProjectPublic(
        name=row.name,
        deserved_gpus=row.deserved_gpus,
        over_quota_weight=row.over_quota_weight,
        limit_gpus=row.limit_gpus,
        allow_over_quota=row.allow_over_quota,
        department=row.department.name if row.department else None,
        fair_share_gpus=row.fair_share_gpus,
        allocated_gpus=figures.allocated_gpus,
        over_quota_gpus=max(0, figures.allocated_gpus - row.deserved_gpus),
        pending_gpus=figures.pending_gpus,
        running_jobs=figures.running_jobs,
        pending_jobs=figures.pending_jobs,
        created_at=datetime.fromtimestamp(row.created_at, UTC),
        usage_gpu_hours=row.usage_gpu_seconds / 3600.0,
        effective_weight=row.over_quota_weight if row.usage_weight is None else row.usage_weight,
        min_runtime_seconds=row.min_runtime_seconds,
        effective_min_runtime_seconds=_min_runtime(row),
        preemption_notice_seconds=row.preemption_notice_seconds,
        effective_preemption_notice_seconds=effective_notice(row),
        pod_defaults=row.pod_defaults,
        resize_cost_seconds=row.resize_cost_seconds,
        effective_resize_cost_seconds=effective_resize_cost(row),
        warnings=totals.warnings(row.department.name if row.department else None),
    )


def _min_runtime(row: ProjectRow) -> float:
    """R15: the project's own minimum runtime, else its department's, else 0."""
    if row.min_runtime_seconds is not None:
        return row.min_runtime_seconds
    return row.department.min_runtime_seconds if row.department else 0.0


def effective_notice(row: ProjectRow) -> int:
    """The preemption notice of the project's jobs: its own, else its department's, else 0 (none)."""
    if row.preemption_notice_seconds is not None:
        return row.preemption_notice_seconds
    department = row.department.preemption_notice_seconds if row.department else None
    return department or 0


def effective_resize_cost(row: ProjectRow) -> float | None:
    """R18: what a resize costs the project's jobs not yet measured: its own, else its department's, else
    ``None`` (the service's default)."""
    if row.resize_cost_seconds is not None:
        return row.resize_cost_seconds
    return row.department.resize_cost_seconds if row.department else None


def department_public(row: DepartmentRow, totals: Totals) -> schemas.DepartmentPublic:
    figures = [totals.by_project.get(p.id, Figures()) for p in row.projects]
    return schemas.DepartmentPublic(
        name=row.name,
        deserved_gpus=row.deserved_gpus,
        over_quota_weight=row.over_quota_weight,
        limit_gpus=row.limit_gpus,
        fair_share_gpus=row.fair_share_gpus,
        allocated_gpus=sum(f.allocated_gpus for f in figures),
        pending_gpus=sum(f.pending_gpus for f in figures),
        projects=sorted(p.name for p in row.projects),
        created_at=datetime.fromtimestamp(row.created_at, UTC),
        min_runtime_seconds=row.min_runtime_seconds,
        preemption_notice_seconds=row.preemption_notice_seconds,
        pod_defaults=row.pod_defaults,
        resize_cost_seconds=row.resize_cost_seconds,
        warnings=totals.warnings(row.name),
    )


class ReplicaFields(Protocol):
    """What a replica read needs: a ``ReplicaRow`` or a ``ReplicaView``."""

    @property
    def id(self) -> int: ...
    @property
    def index(self) -> int: ...
    @property
    def node(self) -> str: ...
    @property
    def gpus(self) -> int: ...
    @property
    def gpu_ids(self) -> list[int] | None: ...
    @property
    def desired(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def started_at(self) -> float | None: ...
    @property
    def exit_code(self) -> int | None: ...
    @property
    def share(self) -> str | None: ...
    @property
    def shared_gpu(self) -> int | None: ...


class JobFields(Protocol):
    """What a job read needs: a ``JobRow`` or a ``JobView``."""

    @property
    def name(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def workers(self) -> int: ...
    @property
    def min_replicas(self) -> int: ...
    @property
    def max_replicas(self) -> int: ...
    @property
    def gpus_per_replica(self) -> int: ...
    @property
    def allowed_replicas(self) -> list[int] | None: ...
    @property
    def topology(self) -> str: ...
    @property
    def image(self) -> str | None: ...
    @property
    def command(self) -> list[str]: ...
    @property
    def env(self) -> dict[str, str]: ...
    @property
    def interactive(self) -> bool: ...
    @property
    def priority(self) -> int: ...
    @property
    def created_at(self) -> float: ...
    @property
    def finished_at(self) -> float | None: ...
    @property
    def restarts(self) -> int: ...
    @property
    def checkpointed_at(self) -> float | None: ...
    @property
    def progress_rates(self) -> dict[str, float] | None: ...
    @property
    def resize_cost_seconds(self) -> float | None: ...
    @property
    def resizes_measured(self) -> int: ...
    @property
    def pending_reason(self) -> str | None: ...
    @property
    def queue_position(self) -> int | None: ...
    @property
    def message(self) -> str | None: ...
    @property
    def started_at(self) -> float | None: ...
    @property
    def expected_duration(self) -> float | None: ...
    @property
    def eta(self) -> dict[str, Any] | None: ...
    @property
    def gpu_fraction(self) -> str | None: ...
    @property
    def replicas(self) -> Sequence[ReplicaFields]: ...


def replica_public(row: ReplicaFields) -> schemas.ReplicaPublic:
    return schemas.ReplicaPublic(
        index=row.index,
        role=role(row.index),
        status=row.status,  # type: ignore[arg-type]
        node=row.node,
        gpus=row.gpus,
        gpu_ids=row.gpu_ids,
        pid=row.pid,
        started_at=when(row.started_at),
        exit_code=row.exit_code,
        share=None if row.share is None else float(Fraction(row.share)),
        shared_gpu=row.shared_gpu,
    )


def visible_replicas(job: JobFields) -> list[ReplicaFields]:
    """Replicas a reader cares about: the live and wanted ones, or the final ones of a finished job."""
    if job.status in ACTIVE:
        return [r for r in job.replicas if r.desired != "done" or r.exit_code is None]
    return list(job.replicas)


def job_public(job: JobFields, project: str) -> schemas.JobPublic:
    replicas_now = sum(1 for r in job.replicas if r.desired == "run") if job.status in ACTIVE else 0
    return schemas.JobPublic(
        project=project,
        name=job.name,
        status=job.status,  # type: ignore[arg-type]
        workers=job.workers,
        min_replicas=job.min_replicas,
        max_replicas=job.max_replicas,
        gpus_per_replica=job.gpus_per_replica,
        replicas_now=replicas_now,
        allocated_gpus=job_allocated(job),
        pending_reason=job.pending_reason,
        queue_position=job.queue_position,
        restarts=job.restarts,
        checkpointed_at=when(job.checkpointed_at),
        speeds=dict(sorted(job.progress_rates.items(), key=lambda kv: int(kv[0])))
        if job.progress_rates
        else None,
        interactive=job.interactive,
        priority=job.priority,
        image=job.image,
        command=list(job.command),
        env_names=sorted(job.env),
        message=job.message,
        created_at=datetime.fromtimestamp(job.created_at, UTC),
        finished_at=when(job.finished_at),
        replicas=[replica_public(r) for r in sorted(visible_replicas(job), key=lambda r: (r.index, r.id))],
        allowed_replicas=job.allowed_replicas,
        topology="required" if job.topology == "required" else "preferred",
        resize_cost_seconds=job.resize_cost_seconds,
        resizes_measured=job.resizes_measured or 0,
        expected_duration=job.expected_duration,
        started_at=when(job.started_at),
        eta=eta_public(job.eta) if job.status == "pending" and job.eta and not job.eta["grows"] else None,
        grow_at=_grow_at(job, replicas_now),
        gpu_fraction=None if job.gpu_fraction is None else float(Fraction(job.gpu_fraction)),
    )


def _grow_at(job: JobFields, replicas_now: int) -> schemas.EtaPublic | None:
    """A running job's growth forecast, only while it is below ``max_replicas``: a forecast made before it
    grew (they are made every few seconds, apart from the cycle) says nothing of a job at its largest size."""
    if job.status != "running" or not job.eta or not job.eta["grows"] or replicas_now >= job.max_replicas:
        return None
    return eta_public(job.eta)


def eta_public(eta: dict[str, Any]) -> schemas.EtaPublic:
    """A stored forecast (``scheduler.engine.eta``) as the API shows it."""
    return schemas.EtaPublic(
        start_p50=when(eta["start_p50"]),
        start_p90=when(eta["start_p90"]),
        size=eta["size"],
        after=eta["after"],
        source=eta["source"],
        computed_at=datetime.fromtimestamp(eta["computed_at"], UTC),
    )


class NodeFields(Protocol):
    """What a node read needs: a ``NodeRow``, or a row of its columns read without the ORM (``/cluster``)."""

    @property
    def name(self) -> str: ...
    @property
    def gpus(self) -> int: ...
    @property
    def schedulable(self) -> bool: ...
    @property
    def state(self) -> str: ...
    @property
    def state_since(self) -> float | None: ...
    @property
    def domain(self) -> str | None: ...


def node_public(row: NodeFields, live: Mapping[str, Sequence[Slot]]) -> schemas.NodePublic:
    """``live``: ``scheduler.store.queries.node_slots`` (each node's live replicas, and those that wait)."""
    fields = node_fields(row, live)
    slots = [schemas.NodeSlot.model_construct(**s) for s in fields["slots"]]  # trusted: from the store
    waiting = [schemas.WaitingSlot.model_construct(**s) for s in fields["waiting"]]
    return schemas.NodePublic.model_construct(**{**fields, "slots": slots, "waiting": waiting})


def node_fields(row: NodeFields, live: Mapping[str, Sequence[Slot]]) -> dict[str, Any]:
    """``schemas.NodePublic``'s fields in its order, its slots as dicts in theirs: serialised as they are
    (``pydantic_core.to_json``), the same bytes as the model's, without a model per node and per slot
    (10,240 nodes a read of ``/cluster``; ``tests/integration/test_cluster_read.py`` compares them)."""
    here = live.get(row.name, ())
    slots = [
        {
            "project": slot.project,
            "job": slot.job,
            "index": slot.replica,
            "role": role(slot.replica),
            "gpu_ids": slot.gpu_ids,
            "releasing": slot.releasing,
            "share": None if slot.share is None else float(Fraction(slot.share)),
            "job_status": slot.job_status,
        }
        for slot in here
        if not slot.waiting
    ]
    waiting = [{"project": s.project, "job": s.job, "index": s.replica} for s in here if s.waiting]
    return {
        "name": row.name,
        "gpus": row.gpus,
        "allocated_gpus": len(
            {g for s in here if not s.waiting for g in s.gpu_ids}
        ),  # a shared GPU (R20): once
        "schedulable": takes_replicas(row.schedulable, row.state),
        "slots": slots,
        "state": "draining" if row.state == "drained" and slots else row.state,  # NODE_STATES, or draining
        "state_since": when(row.state_since),
        "domain": row.domain,
        "waiting": waiting,
    }


def event_public(row: EventRow) -> schemas.EventPublic:
    return schemas.EventPublic(
        id=row.id,
        time=datetime.fromtimestamp(row.time, UTC),
        kind=row.kind,
        project=row.project,
        job=row.job,
        replicas=list(row.replicas),
        reason=row.reason,
        cause=row.cause,
        lost_gpu_seconds=(row.details or {}).get("lost_gpu_seconds"),
    )


def token_public(row: TokenRow, project: str, secret: str | None = None) -> schemas.TokenPublic:
    return schemas.TokenPublic(
        id=row.id,
        project=project,
        name=row.name,
        created_at=datetime.fromtimestamp(row.created_at, UTC),
        token=secret,
    )
