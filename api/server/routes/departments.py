"""``/departments``: optional parents of projects, with their own quota, weight and limit (R1).

Contract: same shape as ``/projects``; admins write, anyone with a token reads. A department that still has
projects cannot be deleted (409: move or delete them first).
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response, status
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from api.server import convert, schemas
from api.server.auth import require_admin
from api.server.deps import Caller, Svc
from api.server.services import pods
from api.server.services.projects import apply_quota_changes, totals_for
from scheduler.store.models import DepartmentRow

router = APIRouter(prefix="/departments", tags=["departments"])


def _find(session: Session, name: str) -> DepartmentRow | None:
    query = (
        select(DepartmentRow).options(selectinload(DepartmentRow.projects)).where(DepartmentRow.name == name)
    )
    return session.scalars(query).first()


def _get(session: Session, name: str) -> DepartmentRow:
    row = _find(session, name)
    if row is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"no department named {name!r}; see GET /api/v1/departments"
        )
    return row


@router.post("", status_code=status.HTTP_201_CREATED, response_model=schemas.DepartmentPublic)
def create_department(body: schemas.DepartmentCreate, svc: Svc, caller: Caller) -> schemas.DepartmentPublic:
    require_admin(caller)
    pods.check_defaults(body.pod_defaults)
    with svc.db.write() as session:
        if _find(session, body.name) is not None:
            raise HTTPException(status.HTTP_409_CONFLICT, f"department {body.name!r} already exists")
        row = DepartmentRow(
            name=body.name,
            deserved_gpus=body.deserved_gpus,
            over_quota_weight=body.over_quota_weight,
            limit_gpus=body.limit_gpus,
            min_runtime_seconds=body.min_runtime_seconds,
            preemption_notice_seconds=body.preemption_notice_seconds,
            pod_defaults=body.pod_defaults,
            resize_cost_seconds=body.resize_cost_seconds,
            fair_share_gpus=0,
            created_at=svc.engine.clock(),
        )
        session.add(row)
        session.flush()
        public = convert.department_public(_get(session, body.name), totals_for(session))
    svc.engine.trigger()
    return public


@router.get("", response_model=list[schemas.DepartmentPublic])
def list_departments(svc: Svc, caller: Caller) -> list[schemas.DepartmentPublic]:
    with svc.db.read() as session:
        rows = session.scalars(
            select(DepartmentRow).options(selectinload(DepartmentRow.projects)).order_by(DepartmentRow.name)
        ).all()
        totals = totals_for(session)
        return [convert.department_public(r, totals) for r in rows]


@router.get("/{department}", response_model=schemas.DepartmentPublic)
def read_department(department: str, svc: Svc, caller: Caller) -> schemas.DepartmentPublic:
    with svc.db.read() as session:
        return convert.department_public(_get(session, department), totals_for(session))


@router.patch("/{department}", response_model=schemas.DepartmentPublic)
def update_department(
    department: str, body: schemas.DepartmentUpdate, svc: Svc, caller: Caller
) -> schemas.DepartmentPublic:
    require_admin(caller)
    pods.check_defaults(body.pod_defaults)
    with svc.db.write() as session:
        row = _get(session, department)
        changes = body.model_dump(exclude_unset=True)
        if changes.get("min_runtime_seconds", 0.0) is None:
            del changes["min_runtime_seconds"]  # a department's has no "inherit": null leaves it as it is
        apply_quota_changes(row, changes)
        session.flush()
        public = convert.department_public(row, totals_for(session))
    svc.engine.trigger()
    return public


@router.delete("/{department}", status_code=status.HTTP_204_NO_CONTENT)
def delete_department(department: str, svc: Svc, caller: Caller) -> Response:
    require_admin(caller)
    with svc.db.write() as session:
        row = _get(session, department)
        if row.projects:
            names = ", ".join(sorted(p.name for p in row.projects))
            raise HTTPException(
                status.HTTP_409_CONFLICT,
                f"department {department!r} still has projects ({names}): move them first",
            )
        session.delete(row)
    svc.engine.trigger()
    return Response(status_code=status.HTTP_204_NO_CONTENT)
