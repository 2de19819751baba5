"""``/cluster``: the whole picture in one read (nodes with who holds which GPU, projects, departments).

Contract: node figures are physical (GPUs held by live processes, including replicas still stopping, marked
``releasing``); project figures are the scheduler's (GPUs of replicas it wants running). ``leader`` says
whether this service instance is the one scheduling. Served from ``api.server.cache`` while nothing changed,
built in two parts: the base (the nodes, 10,240 of them is megabytes, and the projects and departments as
they were then) kept while nothing but submits happened (``StateVersion.nodes``), and at every change the
pending figures (``pending_jobs``, ``pending_gpus``: the only ones a submit changes) read again and the answer
spliced from the base's nodes and the projects and departments with them. The nodes are serialised from
their rows' columns as plain values (``convert.node_fields``), the same bytes as ``schemas.ClusterPublic``'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import pydantic_core
from fastapi import APIRouter, Response
from pydantic import TypeAdapter
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload
from starlette.concurrency import run_in_threadpool

from api.server import convert, schemas
from api.server.cache import Payload, View, cached_response, etag_of
from api.server.deps import Caller, Services, Svc
from api.server.services.projects import totals_for
from scheduler.store.models import DepartmentRow, NodeRow, ProjectRow
from scheduler.store.queries import node_slots, project_figures_of_jobs

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
    """What a submit leaves as it was: the projects and departments as of the base's build (their pending
    figures replaced at each read), each project's id and each department's projects' ids."""

    projects: list[tuple[int, schemas.ProjectPublic]]
    departments: list[tuple[list[int], schemas.DepartmentPublic]]


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
        totals = totals_for(session)
        projects = session.scalars(
            select(ProjectRow).options(selectinload(ProjectRow.department)).order_by(ProjectRow.name)
        ).all()
        departments = session.scalars(
            select(DepartmentRow).options(selectinload(DepartmentRow.projects)).order_by(DepartmentRow.name)
        ).all()
        base = Base(
            projects=[(p.id, convert.project_public(p, totals)) for p in projects],
            departments=[
                ([p.id for p in d.projects], convert.department_public(d, totals)) for d in departments
            ],
        )
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
        jobs = _job_figures(session)
    projects = [_with_jobs(public, jobs.get(i, NONE)) for i, public in base.projects]
    departments = []
    for ids, public in base.departments:
        gpus = sum(jobs.get(i, NONE).pending_gpus for i in ids)
        departments.append(
            public if public.pending_gpus == gpus else public.model_copy(update={"pending_gpus": gpus})
        )
    rest = b"".join(
        (
            b',"projects":',
            _PROJECTS.dump_json(projects),
            b',"departments":',
            _DEPARTMENTS.dump_json(departments),
            b',"leader":',
            b"true" if svc.engine.is_leader else b"false",
            b"}",
        )
    )
    body = b"".join((b"{", base_view.body, rest))
    return Payload(body, {}, etag=etag_of(base_view.etag.encode() + rest))


NONE = convert.Figures()


def _job_figures(session: Session) -> dict[int, convert.Figures]:
    """Per project id: its pending and running jobs and the GPUs the pending ones need to start, read in one
    query (a job started meanwhile is counted once: running, whatever the base's figures)."""
    totals = convert.Totals.of(project_figures_of_jobs(session), ())
    return dict(totals.by_project)


def _with_jobs(public: schemas.ProjectPublic, figures: convert.Figures) -> schemas.ProjectPublic:
    now = {
        "pending_jobs": figures.pending_jobs,
        "pending_gpus": figures.pending_gpus,
        "running_jobs": figures.running_jobs,
    }
    if all(getattr(public, k) == v for k, v in now.items()):
        return public
    return public.model_copy(update=now)
