"""``/cluster``: the whole picture in one read (nodes with who holds which GPU, projects, departments).

Contract: node figures are physical (GPUs held by live processes, including replicas still stopping, marked
``releasing``); project figures are the scheduler's (GPUs of replicas it wants running). ``leader`` says
whether this service instance is the one scheduling. Served from ``api.server.cache`` while nothing changed,
built in two parts. The base (the nodes: 10,240 of them is megabytes; each project's GPUs held; the quota
warnings) is kept while nothing it shows changed (``StateVersion.nodes``: a submit, the engine's notes, fair
shares and usage leave it). At every change the rest is read again (the jobs' counts per project, which a
submit changes, and the projects' and departments' rows, which the engine's fair shares and usage change)
and spliced after the base's nodes. The nodes are serialised from their rows' columns as plain values
(``convert.node_fields``), the same bytes as ``schemas.ClusterPublic``'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import pydantic_core
from fastapi import APIRouter, Response
from pydantic import TypeAdapter
from sqlalchemy import select
from sqlalchemy.orm import selectinload
from starlette.concurrency import run_in_threadpool

from api.server import convert, schemas
from api.server.cache import Payload, View, cached_response, etag_of
from api.server.deps import Caller, Services, Svc
from api.server.services.projects import oversubscribed
from scheduler.store.models import DepartmentRow, NodeRow, ProjectRow
from scheduler.store.queries import node_slots, project_holdings, project_jobs

router = APIRouter(tags=["cluster"])

_PROJECTS = TypeAdapter(list[schemas.ProjectPublic])
_DEPARTMENTS = TypeAdapter(list[schemas.DepartmentPublic])
_NODE_COLUMNS = (
    NodeRow.name,
    NodeRow.gpus,
    NodeRow.schedulable,
    NodeRow.state,
    NodeRow.state_since,
    NodeRow.domain,
)


@dataclass(frozen=True, slots=True)
class Base:
    """What the base read beside the nodes: ``queries.project_holdings`` and ``oversubscribed``."""

    holdings: list[tuple[int, int]]
    oversubscribed: dict[str | None, str]


@router.get("/cluster", response_model=schemas.ClusterPublic)
async def read_cluster(svc: Svc, caller: Caller) -> Response:
    async def build() -> Payload:
        base = await svc.views.get("cluster:base", lambda: base_part(svc), version=svc.views.version.nodes)
        return await run_in_threadpool(_cluster, svc, base)

    view = await svc.views.get_async("cluster", build)
    return cached_response(view)


def base_part(svc: Services) -> Payload:
    """The body is ``"total_gpus":...,"allocated_gpus":...,"free_gpus":...,"nodes":[...]`` (the answer's first
    fields), the value a ``Base``."""
    with svc.db.read() as session:
        live = node_slots(session)
        rows = session.execute(select(*_NODE_COLUMNS).order_by(NodeRow.name)).all()
        base = Base(holdings=project_holdings(session), oversubscribed=oversubscribed(session))
    nodes = [convert.node_fields(row, live) for row in rows]
    total = sum(n["gpus"] for n in nodes)
    allocated = sum(n["allocated_gpus"] for n in nodes)
    head = (
        f'"total_gpus":{total},"allocated_gpus":{allocated},"free_gpus":{max(0, total - allocated)},"nodes":'
    )
    return Payload(head.encode() + pydantic_core.to_json(nodes), {}, value=base)


def _cluster(svc: Services, base_view: View) -> Payload:
    base = base_view.value
    assert isinstance(base, Base)
    with svc.db.read() as session:
        totals = convert.Totals.of(project_jobs(session), base.holdings)
        totals.oversubscribed = base.oversubscribed
        projects = session.scalars(
            select(ProjectRow).options(selectinload(ProjectRow.department)).order_by(ProjectRow.name)
        ).all()
        departments = session.scalars(
            select(DepartmentRow).options(selectinload(DepartmentRow.projects)).order_by(DepartmentRow.name)
        ).all()
        rest = b"".join(
            (
                b',"projects":',
                _PROJECTS.dump_json([convert.project_public(p, totals) for p in projects]),
                b',"departments":',
                _DEPARTMENTS.dump_json([convert.department_public(d, totals) for d in departments]),
                b',"leader":',
                b"true" if svc.engine.is_leader else b"false",
                b"}",
            )
        )
    body = b"".join((b"{", base_view.body, rest))
    return Payload(body, {}, etag=etag_of(base_view.etag.encode() + rest))
