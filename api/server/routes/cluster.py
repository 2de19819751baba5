"""``/cluster``: the whole picture in one read (nodes with who holds which GPU, projects, departments).

Contract: node figures are physical (GPUs held by live processes, including replicas still stopping, marked
``releasing``); project figures are the scheduler's (GPUs of replicas it wants running). ``leader`` says
whether this service instance is the one scheduling. Served from ``api.server.cache`` while nothing changed,
built in three parts, each kept while nothing it shows changed:

1. the base (``StateVersion.nodes``): the nodes (10,240 of them is megabytes), each project's GPUs held and
   the quota warnings; a submit, the engine's notes, fair shares and usage leave it;
2. the projects and departments (``StateVersion.rows``): built with the base's figures; a submit leaves them;
3. the answer (every change): the jobs' counts per project read again (what a submit changes), the projects
   whose counts moved copied with them, and the answer spliced from the base's nodes and those.

The nodes are serialised from their rows' columns as plain values (``convert.node_fields``); the answer is
the same bytes as ``schemas.ClusterPublic``'s.
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
_NONE = convert.Figures()


@dataclass(frozen=True, slots=True)
class Base:
    """What the base read beside the nodes: ``queries.project_holdings`` and ``oversubscribed``."""

    holdings: list[tuple[int, int]]
    oversubscribed: dict[str | None, str]


@dataclass(frozen=True, slots=True)
class Rows:
    """The projects (with their ids) and the departments (with their projects' ids), as of their build."""

    projects: list[tuple[int, schemas.ProjectPublic]]
    departments: list[tuple[list[int], schemas.DepartmentPublic]]


@router.get("/cluster", response_model=schemas.ClusterPublic)
async def read_cluster(svc: Svc, caller: Caller) -> Response:
    views = svc.views

    async def base() -> View:
        return await views.get("cluster:base", lambda: base_part(svc), version=views.version.nodes)

    async def rows() -> Payload:
        return await run_in_threadpool(rows_part, svc, await base())

    async def build() -> Payload:
        nodes = await base()
        projects = await views.get_async("cluster:rows", rows, version=views.version.rows)
        return await run_in_threadpool(_cluster, svc, nodes, projects)

    view = await views.get_async("cluster", build)
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


def rows_part(svc: Services, base_view: View) -> Payload:
    """The value is ``Rows``, their figures the base's and the jobs' as of now (no body: never sent)."""
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
        rows = Rows(
            projects=[(p.id, convert.project_public(p, totals)) for p in projects],
            departments=[
                ([p.id for p in d.projects], convert.department_public(d, totals)) for d in departments
            ],
        )
    return Payload(b"", {}, etag="", value=rows)


def _cluster(svc: Services, base: View, rows_view: View) -> Payload:
    rows = rows_view.value
    assert isinstance(rows, Rows)
    with svc.db.read() as session:
        jobs = convert.Totals.of(project_jobs(session), ()).by_project
    projects = [_with_jobs(public, jobs.get(i, _NONE)) for i, public in rows.projects]
    departments = []
    for ids, public in rows.departments:
        gpus = sum(jobs.get(i, _NONE).pending_gpus for i in ids)
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
    body = b"".join((b"{", base.body, rest))
    return Payload(body, {}, etag=etag_of(base.etag.encode() + rest))


def _with_jobs(public: schemas.ProjectPublic, figures: convert.Figures) -> schemas.ProjectPublic:
    """``public`` with the jobs' counts of now (a submit's pending job, a job started meanwhile)."""
    if (public.pending_jobs, public.pending_gpus, public.running_jobs) == (
        figures.pending_jobs,
        figures.pending_gpus,
        figures.running_jobs,
    ):
        return public
    update = {
        "pending_jobs": figures.pending_jobs,
        "pending_gpus": figures.pending_gpus,
        "running_jobs": figures.running_jobs,
    }
    return public.model_copy(update=update)
