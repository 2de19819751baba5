"""Projects as the routes need them: found by name, their live figures, quota changes.

Contract: ``get_project`` returns a project's row or raises 404 (``lock=True`` also locks the row on
PostgreSQL until the transaction ends); ``totals_for`` reads the live figures of one project or all, with the warnings of quotas that add up to
more than they divide;
``department_id`` resolves a department's name (422 when there is none); ``apply_quota_changes`` applies
a PATCH to a project or department row (what ``null`` means per field below; a limit below the deserved
quota is a 422).
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException, status
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.server import convert
from scheduler.core.fairshare import quota_warnings
from scheduler.core.model import Department, Project
from scheduler.store.models import DepartmentRow, NodeRow, ProjectRow
from scheduler.store.queries import project_by_name, project_figures


def totals_for(session: Session, project_id: int | None = None) -> convert.Totals:
    totals = convert.Totals.of(*project_figures(session, project_id))
    totals.oversubscribed = oversubscribed(session)
    return totals


def oversubscribed(session: Session) -> dict[str | None, str]:
    """Quotas that add up to more than they divide (``scheduler.core.fairshare.quota_warnings``): the
    cluster's against its schedulable GPUs, each department's against its own quota."""
    total = session.scalar(select(func.coalesce(func.sum(NodeRow.gpus), 0)).where(NodeRow.schedulable)) or 0
    departments = session.execute(
        select(DepartmentRow.id, DepartmentRow.name, DepartmentRow.deserved_gpus)
    ).all()
    dept_name: dict[int | None, str] = {i: name for i, name, _ in departments}
    projects = session.execute(
        select(ProjectRow.name, ProjectRow.deserved_gpus, ProjectRow.department_id)
    ).all()
    return quota_warnings(
        int(total),
        [Project(name, deserved, department=dept_name.get(d)) for name, deserved, d in projects],
        [Department(name, deserved) for _, name, deserved in departments],
    )


def get_project(session: Session, name: str, *, lock: bool = False) -> ProjectRow:
    """The project named ``name`` or a 404; ``lock=True`` locks its row (PostgreSQL) until the transaction
    ends: a submit inserting a job into it finishes first, and none starts."""
    row = project_by_name(session, name, lock=lock)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no project named {name!r}; see GET /api/v1/projects")
    return row


def department_id(session: Session, name: str | None) -> int | None:
    if name is None:
        return None
    row = session.scalars(select(DepartmentRow).where(DepartmentRow.name == name)).first()
    if row is None:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"no department named {name!r}: create it first or leave it out",
        )
    return row.id


NULLABLE = (
    "limit_gpus",
    "min_runtime_seconds",
    "preemption_notice_seconds",
    "pod_defaults",
    "resize_cost_seconds",
)


def apply_quota_changes(row: ProjectRow | DepartmentRow, changes: dict[str, Any]) -> None:
    """A PATCH of a project or department: ``null`` means "unchanged" except for ``limit_gpus``, where it
    means "no limit", a project's ``min_runtime_seconds`` and ``preemption_notice_seconds``, where it means
    "its department's", a department's ``preemption_notice_seconds``, where it means "none", and
    ``resize_cost_seconds``, where it means "inherited" (R18: the department's, else the service's); a limit
    ``pod_defaults`` (replaced whole), where it means "none of its own"; a limit
    below the deserved quota (as it would be after the change) is a 422."""
    deserved = changes["deserved_gpus"] if changes.get("deserved_gpus") is not None else row.deserved_gpus
    limit = changes.get("limit_gpus", row.limit_gpus)
    if limit is not None and limit < deserved:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"limit_gpus ({limit}) would be below deserved_gpus ({deserved}): change both together",
        )
    for key, value in changes.items():
        if value is not None or key in NULLABLE:
            setattr(row, key, value)
