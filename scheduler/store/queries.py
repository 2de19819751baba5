"""Queries shared by the engine and the API, so each is written (and indexed for) once.

Contract: functions take an open ``Session`` and neither commit nor roll back. ``lock=True`` adds
``FOR UPDATE`` (a no-op on SQLite, whose write transactions are already exclusive).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy import Select, select
from sqlalchemy.orm import Session, selectinload

from scheduler.store.models import EventRow, JobRow, ProjectRow, ReplicaRow

ACTIVE = ("pending", "running")


def project_by_name(session: Session, name: str) -> ProjectRow | None:
    return session.scalars(
        select(ProjectRow).options(selectinload(ProjectRow.department)).where(ProjectRow.name == name)
    ).first()


def _job_query(project: str) -> Select[JobRow]:
    return (
        select(JobRow)
        .join(JobRow.project)
        .where(ProjectRow.name == project)
        .options(selectinload(JobRow.replicas), selectinload(JobRow.project))
    )


def job_by_name(session: Session, project: str, name: str, *, lock: bool = False) -> JobRow | None:
    query = _job_query(project).where(JobRow.name == name)
    if lock:
        query = query.with_for_update(of=JobRow).execution_options(populate_existing=True)
    return session.scalars(query).first()


def active_job(session: Session, project: str, name: str) -> JobRow | None:
    """The job if it is pending or running, locked for the rest of the transaction."""
    query = _job_query(project).where(JobRow.name == name, JobRow.status.in_(ACTIVE))
    query = query.with_for_update(of=JobRow).execution_options(populate_existing=True)
    return session.scalars(query).first()


def live_replicas(session: Session) -> Sequence[ReplicaRow]:
    """Replicas whose process was launched and has not been seen exiting."""
    query = (
        select(ReplicaRow)
        .where(ReplicaRow.pid.is_not(None), ReplicaRow.exit_code.is_(None))
        .options(selectinload(ReplicaRow.job).selectinload(JobRow.project))
        .order_by(ReplicaRow.id)
    )
    return session.scalars(query).all()


def held_gpu_ids(session: Session) -> dict[str, set[int]]:
    """GPU ids per node held by live processes (whatever their job's state)."""
    held: dict[str, set[int]] = defaultdict(set)
    for replica in live_replicas(session):
        held[replica.node].update(replica.gpu_ids or ())
    return held


def add_event(
    session: Session,
    *,
    time: float,
    kind: str,
    project: str,
    job: str,
    replicas: Sequence[int] = (),
    reason: str,
    cause: str | None = None,
) -> EventRow:
    event = EventRow(
        time=time, kind=kind, project=project, job=job, replicas=list(replicas), reason=reason, cause=cause
    )
    session.add(event)
    return event
