"""The one row <-> core mapper: ORM rows in, frozen ``scheduler.core`` dataclasses out.

Contract: ``load_state(session)`` reads the snapshot ``plan_cycle`` needs. Only jobs that are ``pending`` or
``running`` are in it. A replica the engine wants (``desired == "run"``, launched or still waiting for its
GPUs) is active; one told to stop that has not been seen exiting is ``releasing`` (it still holds its GPUs).
Replicas of finished jobs that are still stopping are left out: a placement onto their GPUs waits in the
engine until they exit, so it can never over-allocate.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from scheduler.core.model import ClusterState, Department, Job, Node, Project, Replica
from scheduler.store.models import DepartmentRow, JobRow, NodeRow, ProjectRow, ReplicaRow

ACTIVE_JOB_STATUSES = ("pending", "running")
FINISHED_JOB_STATUSES = ("succeeded", "failed", "cancelled")


def node_from_row(row: NodeRow) -> Node:
    return Node(name=row.name, gpus=row.gpus, schedulable=row.schedulable)


def department_from_row(row: DepartmentRow) -> Department:
    return Department(
        name=row.name,
        deserved_gpus=row.deserved_gpus,
        over_quota_weight=row.over_quota_weight,
        limit_gpus=row.limit_gpus,
        created_at=row.created_at,
    )


def project_from_row(row: ProjectRow) -> Project:
    return Project(
        name=row.name,
        deserved_gpus=row.deserved_gpus,
        over_quota_weight=row.over_quota_weight,
        limit_gpus=row.limit_gpus,
        allow_over_quota=row.allow_over_quota,
        department=row.department.name if row.department else None,
        created_at=row.created_at,
    )


def replica_from_row(row: ReplicaRow) -> Replica | None:
    """The core's view of a replica row, or None when it no longer holds GPUs."""
    if row.desired == "run":
        return Replica(index=row.index, node=row.node, gpus=row.gpus)
    if row.desired == "stop" and row.pid is not None and row.exit_code is None:
        return Replica(index=row.index, node=row.node, gpus=row.gpus, releasing=True)
    return None


def job_from_row(row: JobRow) -> Job:
    replicas = tuple(r for r in (replica_from_row(x) for x in row.replicas) if r is not None)
    return Job(
        project=row.project.name,
        name=row.name,
        min_replicas=row.min_replicas,
        max_replicas=row.max_replicas,
        gpus_per_replica=row.gpus_per_replica,
        interactive=row.interactive,
        priority=row.priority,
        submitted_at=row.submitted_at,
        replicas=tuple(sorted(replicas, key=lambda r: (r.index, r.releasing))),
        last_resized_at=row.last_resized_at,
    )


def load_state(session: Session) -> ClusterState:
    """The snapshot of everything the core reads, in a stable order."""
    nodes = session.scalars(select(NodeRow).order_by(NodeRow.name)).all()
    departments = session.scalars(select(DepartmentRow).order_by(DepartmentRow.name)).all()
    projects = session.scalars(
        select(ProjectRow).options(selectinload(ProjectRow.department)).order_by(ProjectRow.name)
    ).all()
    jobs = session.scalars(
        select(JobRow)
        .where(JobRow.status.in_(ACTIVE_JOB_STATUSES))
        .options(selectinload(JobRow.replicas), selectinload(JobRow.project))
        .order_by(JobRow.id)
    ).all()
    return ClusterState(
        nodes=tuple(node_from_row(n) for n in nodes),
        projects=tuple(project_from_row(p) for p in projects),
        jobs=tuple(job_from_row(j) for j in jobs),
        departments=tuple(department_from_row(d) for d in departments),
    )
