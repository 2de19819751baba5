"""The one row <-> core mapper: ORM rows in, frozen ``scheduler.core`` dataclasses out.

Contract: ``load_state(session)`` reads the snapshot ``plan_cycle`` needs; ``load_snapshot(session)`` reads the
same and, from the same rows, each active job's id and the reason and place in line stored for it (``Notes``),
so the engine writes back only the notes a plan changed without reading them again. Only jobs that are ``pending`` or
``running`` are in it. A replica the engine wants (``desired == "run"``, launched or still waiting for its
GPUs) is active; one told to stop that has not been seen exiting is ``releasing`` (it still holds its GPUs).
A node is schedulable when the executor says so and an admin left it ``ready`` (not cordoned, drained or
lost). Replicas of finished jobs that are still stopping are left out: a placement onto their GPUs waits in the
engine until they exit, so it can never over-allocate. A job one of whose replicas finished its work (exited 0 on
its own, ``desired == "done"``) is ending: it is planned at the replicas it still runs, never restored or grown.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.core import goodput
from scheduler.core.model import ClusterState, Department, Job, Node, Project, Replica, Throughput
from scheduler.statuses import ACTIVE, ReplicaDesired
from scheduler.store.models import DepartmentRow, JobRow, NodeRow, ProjectRow, ReplicaRow, takes_replicas


def department_from_row(row: DepartmentRow) -> Department:
    return Department(
        name=row.name,
        deserved_gpus=row.deserved_gpus,
        over_quota_weight=row.over_quota_weight,
        limit_gpus=row.limit_gpus,
        created_at=row.created_at,
        min_runtime_seconds=row.min_runtime_seconds,
        resize_cost_seconds=row.resize_cost_seconds,
    )


JobKey = tuple[str, str]  # (project, job name)
Note = tuple[str | None, int | None]  # (pending reason, place in line)


@dataclass(frozen=True, slots=True)
class Notes:
    """Each active job's id and the note stored for it when the snapshot was read."""

    ids: dict[JobKey, int]
    stored: dict[int, Note]


@dataclass(frozen=True, slots=True)
class Snapshot:
    state: ClusterState
    notes: Notes


def load_state(session: Session) -> ClusterState:
    """The snapshot of everything the core reads, in a stable order."""
    return load_snapshot(session).state


def load_snapshot(session: Session) -> Snapshot:
    """The core's snapshot and the active jobs' stored notes, in one pass over the rows.

    Read with column queries, not ORM objects: this runs every cycle over every active job, and building
    the core's frozen dataclasses straight from rows is several times cheaper.
    """
    notes = Notes({}, {})
    rows = load_jobs(session)
    for job_id, (job, note) in rows.items():
        notes.ids[(job.project, job.name)] = job_id
        notes.stored[job_id] = note
    state = ClusterState(
        nodes=load_nodes(session),
        projects=load_projects(session),
        jobs=tuple(job for job, _ in rows.values()),
        departments=load_departments(session),
    )
    return Snapshot(state, notes)


def load_nodes(session: Session) -> tuple[Node, ...]:
    nodes = session.execute(
        select(NodeRow.name, NodeRow.gpus, NodeRow.schedulable, NodeRow.state, NodeRow.domain).order_by(
            NodeRow.name
        )
    )
    return tuple(
        Node(name=n, gpus=g, schedulable=takes_replicas(s, state), domain=domain)
        for n, g, s, state, domain in nodes
    )


def load_departments(session: Session) -> tuple[Department, ...]:
    departments = session.scalars(select(DepartmentRow).order_by(DepartmentRow.name)).all()
    return tuple(department_from_row(d) for d in departments)


def load_projects(session: Session) -> tuple[Project, ...]:
    query = (
        select(ProjectRow, DepartmentRow.name)
        .outerjoin(DepartmentRow, ProjectRow.department_id == DepartmentRow.id)
        .order_by(ProjectRow.name)
    )
    return tuple(
        Project(
            name=row.name,
            deserved_gpus=row.deserved_gpus,
            over_quota_weight=row.over_quota_weight,
            limit_gpus=row.limit_gpus,
            allow_over_quota=row.allow_over_quota,
            department=department,
            created_at=row.created_at,
            usage_gpu_seconds=row.usage_gpu_seconds,
            min_runtime_seconds=row.min_runtime_seconds,
            resize_cost_seconds=row.resize_cost_seconds,
        )
        for row, department in session.execute(query)
    )


IDS_A_QUERY = 500


def load_jobs(session: Session, ids: Iterable[int] | None = None) -> dict[int, tuple[Job, Note]]:
    """The active jobs (all, or those of ``ids`` that are active), each with its stored note, by id in id
    order."""
    if ids is None:
        return _jobs(session, None)
    wanted = sorted(set(ids))
    found: dict[int, tuple[Job, Note]] = {}
    for start in range(0, len(wanted), IDS_A_QUERY):
        found |= _jobs(session, wanted[start : start + IDS_A_QUERY])
    return found


def _jobs(session: Session, ids: list[int] | None) -> dict[int, tuple[Job, Note]]:
    replicas: dict[int, list[Replica]] = {}
    held = (
        select(
            ReplicaRow.job_id,
            ReplicaRow.index,
            ReplicaRow.node,
            ReplicaRow.gpus,
            ReplicaRow.desired,
            ReplicaRow.share,
            ReplicaRow.shared_gpu,
        )
        .join(JobRow, ReplicaRow.job_id == JobRow.id)
        .where(JobRow.status.in_(ACTIVE))
        .where(
            (ReplicaRow.desired.in_((ReplicaDesired.RUN, ReplicaDesired.DONE)))
            | (
                (ReplicaRow.desired == ReplicaDesired.STOP)
                & ReplicaRow.pid.is_not(None)
                & ReplicaRow.exit_code.is_(None)
            )
        )
    )
    if ids is not None:
        held = held.where(ReplicaRow.job_id.in_(ids))
    completing: set[int] = set()  # jobs one of whose replicas finished its work
    for job_id, index, node, gpus, desired, share, shared_gpu in session.execute(held):
        if desired == ReplicaDesired.DONE:
            completing.add(job_id)
        else:
            replicas.setdefault(job_id, []).append(
                Replica(
                    index,
                    node,
                    gpus,
                    releasing=desired != ReplicaDesired.RUN,
                    share=None if share is None else Fraction(share),  # R20
                    gpu=shared_gpu,
                )
            )
    query = (
        select(
            JobRow.id,
            ProjectRow.name,
            JobRow.name,
            JobRow.min_replicas,
            JobRow.max_replicas,
            JobRow.gpus_per_replica,
            JobRow.interactive,
            JobRow.priority,
            JobRow.submitted_at,
            JobRow.last_resized_at,
            JobRow.checkpointed_at,
            JobRow.resize_cost_seconds,
            JobRow.allowed_replicas,
            JobRow.progress_rates,
            JobRow.topology,
            JobRow.pending_reason,
            JobRow.queue_position,
            JobRow.gpu_fraction,
        )
        .join(ProjectRow, JobRow.project_id == ProjectRow.id)
        .where(JobRow.status.in_(ACTIVE))
        .order_by(JobRow.id)
    )
    if ids is not None:
        query = query.where(JobRow.id.in_(ids))
    found: dict[int, tuple[Job, Note]] = {}
    for row in session.execute(query):
        job = _job(row, replicas)
        found[row[0]] = (_completing(job) if row[0] in completing else job, (row[15], row[16]))
    return found


def _completing(job: Job) -> Job:
    """A job one of whose replicas finished its work (exited 0 on its own): it is ending, so the core keeps it
    at the replicas it still runs, neither restoring nor growing the finished one."""
    running = sum(1 for r in job.replicas if not r.releasing)
    size = max(running, 1)
    return replace(job, min_replicas=size, max_replicas=size, allowed_replicas=())


def _job(row: Any, replicas: dict[int, list[Replica]]) -> Job:
    (
        job_id,
        project,
        name,
        low,
        high,
        gpr,
        interactive,
        priority,
        submitted,
        resized,
        checkpointed,
        resize_cost,
        allowed,
        rates,
        topology,
        _reason,
        _position,
        fraction,
    ) = row
    return Job(
        project=project,
        name=name,
        min_replicas=low,
        max_replicas=high,
        gpus_per_replica=gpr,
        interactive=interactive,
        priority=priority,
        submitted_at=submitted,
        last_resized_at=resized,
        checkpointed_at=checkpointed,
        replicas=tuple(sorted(replicas.get(job_id, ()), key=lambda r: (r.index, r.releasing))),
        allowed_replicas=tuple(allowed or ()),
        topology=topology,
        throughput=_throughput(rates),  # R19
        resize_cost_seconds=resize_cost,
        gpu_fraction=None if fraction is None else Fraction(fraction),  # R20
    )


def _throughput(rates: Any) -> Throughput | None:
    """R19: the model fitted from the speeds stored per replica count (anything else in the column is ignored)."""
    if not isinstance(rates, dict):
        return None
    points = [
        (int(n), float(r))
        for n, r in rates.items()
        if isinstance(n, str) and n.isdigit() and isinstance(r, int | float) and not isinstance(r, bool)
    ]
    return goodput.fit(points)
