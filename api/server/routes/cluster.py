"""``/cluster``: the whole picture in one read (nodes with who holds which GPU, projects, departments).

Contract: node figures are physical (GPUs held by live processes, including replicas still stopping, marked
``releasing``); project figures are the scheduler's (GPUs of replicas it wants running). ``leader`` says
whether this service instance is the one scheduling. Served from ``api.server.cache`` while nothing changed.
"""

from __future__ import annotations

from fastapi import APIRouter, Response
from sqlalchemy import select
from sqlalchemy.orm import selectinload

from api.server import convert, schemas
from api.server.cache import cached_response
from api.server.deps import Caller, Services, Svc
from api.server.services.projects import totals_for
from scheduler.store.models import DepartmentRow, NodeRow, ProjectRow
from scheduler.store.queries import node_slots

router = APIRouter(tags=["cluster"])


@router.get("/cluster", response_model=schemas.ClusterPublic)
async def read_cluster(svc: Svc, caller: Caller) -> Response:
    view = await svc.views.get("cluster", lambda: _cluster(svc))
    return cached_response(view)


def _cluster(svc: Services) -> bytes:
    with svc.db.read() as session:
        live = node_slots(session)
        nodes = [
            convert.node_public(n, live) for n in session.scalars(select(NodeRow).order_by(NodeRow.name))
        ]
        totals = totals_for(session)
        projects = session.scalars(
            select(ProjectRow).options(selectinload(ProjectRow.department)).order_by(ProjectRow.name)
        ).all()
        departments = session.scalars(
            select(DepartmentRow).options(selectinload(DepartmentRow.projects)).order_by(DepartmentRow.name)
        ).all()
        total = sum(n.gpus for n in nodes)
        allocated = sum(n.allocated_gpus for n in nodes)
        cluster = schemas.ClusterPublic(
            total_gpus=total,
            allocated_gpus=allocated,
            free_gpus=max(0, total - allocated),
            nodes=nodes,
            projects=[convert.project_public(p, totals) for p in projects],
            departments=[convert.department_public(d, totals) for d in departments],
            leader=svc.engine.is_leader,
        )
    return cluster.model_dump_json().encode()
