"""``/projects``: tenants with their quotas and live figures (fair share, allocated, pending).

Contract: admins create, change and delete projects; anyone with a token reads them. A project with
pending or running jobs cannot be deleted (409: delete its jobs first). Every change triggers a cycle.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response, status
from sqlalchemy import select
from sqlalchemy.orm import selectinload

from api.server import convert, schemas
from api.server.auth import require_admin
from api.server.deps import Caller, Svc
from api.server.services import pods
from api.server.services.projects import apply_quota_changes, department_id, get_project, totals_for
from scheduler.statuses import ACTIVE
from scheduler.store.models import JobRow, ProjectRow
from scheduler.store.queries import project_by_name

router = APIRouter(prefix="/projects", tags=["projects"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=schemas.ProjectPublic)
def create_project(body: schemas.ProjectCreate, svc: Svc, caller: Caller) -> schemas.ProjectPublic:
    require_admin(caller)
    pods.check_defaults(body.pod_defaults)
    with svc.db.write() as session:
        if project_by_name(session, body.name) is not None:
            raise HTTPException(status.HTTP_409_CONFLICT, f"project {body.name!r} already exists")
        row = ProjectRow(
            name=body.name,
            deserved_gpus=body.deserved_gpus,
            over_quota_weight=body.over_quota_weight,
            limit_gpus=body.limit_gpus,
            allow_over_quota=body.allow_over_quota,
            department_id=department_id(session, body.department),
            min_runtime_seconds=body.min_runtime_seconds,
            preemption_notice_seconds=body.preemption_notice_seconds,
            pod_defaults=body.pod_defaults,
            resize_cost_seconds=body.resize_cost_seconds,
            fair_share_gpus=0,
            created_at=svc.engine.clock(),
        )
        session.add(row)
        session.flush()
        session.refresh(row)
        public = convert.project_public(row, totals_for(session, row.id))
    svc.engine.trigger()
    return public


@router.get("", response_model=list[schemas.ProjectPublic])
def list_projects(svc: Svc, caller: Caller) -> list[schemas.ProjectPublic]:
    with svc.db.read() as session:
        rows = session.scalars(
            select(ProjectRow).options(selectinload(ProjectRow.department)).order_by(ProjectRow.name)
        ).all()
        totals = totals_for(session)
        return [convert.project_public(r, totals) for r in rows]


@router.get("/{project}", response_model=schemas.ProjectPublic)
def read_project(project: str, svc: Svc, caller: Caller) -> schemas.ProjectPublic:
    with svc.db.read() as session:
        row = get_project(session, project)
        return convert.project_public(row, totals_for(session, row.id))


@router.patch("/{project}", response_model=schemas.ProjectPublic)
def update_project(
    project: str, body: schemas.ProjectUpdate, svc: Svc, caller: Caller
) -> schemas.ProjectPublic:
    require_admin(caller)
    pods.check_defaults(body.pod_defaults)
    with svc.db.write() as session:
        row = get_project(session, project)
        changes = body.model_dump(exclude_unset=True)
        if "department" in changes:
            row.department_id = department_id(session, changes.pop("department"))
        apply_quota_changes(row, changes)
        session.flush()
        session.refresh(row)
        public = convert.project_public(row, totals_for(session, row.id))
    svc.engine.trigger()
    return public


@router.delete("/{project}", status_code=status.HTTP_204_NO_CONTENT)
def delete_project(project: str, svc: Svc, caller: Caller) -> Response:
    require_admin(caller)
    with svc.db.write() as session:
        row = get_project(session, project, lock=True)  # submits insert without the write lock
        active = session.scalars(
            select(JobRow.name)
            .where(JobRow.project_id == row.id, JobRow.status.in_(ACTIVE))
            .order_by(JobRow.id)
            .limit(4)
        ).all()
        if active:
            raise HTTPException(status.HTTP_409_CONFLICT, _still_active(project, list(active)))
        session.delete(row)
    svc.engine.trigger()
    return Response(status_code=status.HTTP_204_NO_CONTENT)


def _still_active(project: str, active: list[str]) -> str:
    """Why a project with active jobs cannot go: up to three of their names, "..." when there are more."""
    names = ", ".join(active[:3]) + (", ..." if len(active) > 3 else "")
    return f"project {project!r} still has active jobs ({names}): delete them first"
