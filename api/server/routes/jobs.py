"""Jobs: submit, read, list, delete (stop) and read a replica's logs.

Contract: a job is created ``pending`` and the loop is woken at once (the answer never waits for a cycle;
the checks read before the submit writes; a new name is inserted without waiting for the database's write
lock (``Database.insert``), so submits never queue behind a scheduling cycle; a name taken meanwhile, or a
project deleted meanwhile, sends the submit through the locked path, which answers 409 or 404). Names are unique among a project's
jobs; submitting the name of a *finished* job replaces that job (its record and its events go, so the new
run shows only its own), an active one is a 409. A job that does not fit today's cluster (a replica needs more GPUs than any schedulable
node has, or ``min_replicas`` replicas more room than all of them) is accepted: nodes come and go
(autoscalers, repairs, a cordoned node back), so it waits, taking GPUs from nobody, with a reason that says
what it would need, also sent back as a ``Warning`` header. The only size refusals (422) are the schema's
bounds on a job (``api.server.schemas.JobCreate``: at most 1024 replicas and 1024 GPUs per replica), and a job
without an image on Kubernetes when the service has no default image is refused too. ``DELETE`` marks the job ``cancelled`` and its replicas to stop
(SIGTERM, the grace period, then SIGKILL; the master last); deleting a finished job removes its record, its
replicas and its events (the answer shows the job as it was).
``POST .../checkpointed`` records that an active job completed a checkpoint (its newest report is kept: the
victim search weighs the work since then, which a preemption would lose); a finished job is a 409, a time
after the service's clock (beyond a minute of skew) or before the submission a 422.
Submitting, deleting and reading logs need the admin token or a token of the job's project (a job's
output may hold its secrets); any token reads jobs, which never show env values. What a submit, a delete
and a checkpoint report change is ``api.server.services.jobs``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response, status
from fastapi.responses import PlainTextResponse

from api.server import convert, schemas
from api.server.auth import require_project_writer
from api.server.cache import Payload, cached_response
from api.server.deps import Caller, Services, Svc
from api.server.engine.link import EngineUnavailable
from api.server.headers import header_warning
from api.server.services import jobs, projects
from scheduler.store.queries import count_jobs, job_views

router = APIRouter(tags=["jobs"])

WARNING = {
    "description": 'Present when the job does not fit today\'s cluster: 299 tide "why, and what it would need"',
    "schema": {"type": "string"},
}


@router.post(
    "/projects/{project}/jobs",
    status_code=status.HTTP_201_CREATED,
    response_model=schemas.JobPublic,
    responses={201: {"description": "The job, as submitted", "headers": {"Warning": WARNING}}},
)
def submit_job(
    project: str, body: schemas.JobCreate, response: Response, svc: Svc, caller: Caller
) -> schemas.JobPublic:
    public, warnings = jobs.create_job(svc, caller, project=project, body=body)
    for warning in warnings:
        response.headers.append("Warning", header_warning(warning))
    return public


PAGE_LIMIT = 10_000
TOTAL: dict[str, Any] = {
    "description": "How many jobs match the filters, whatever the page",
    "schema": {"type": "integer"},
}
PAGED: dict[int | str, dict[str, Any]] = {
    200: {"description": "The jobs, by project then age", "headers": {"X-Total-Count": TOTAL}}
}


@router.get("/projects/{project}/jobs", response_model=list[schemas.JobPublic], responses=PAGED)
async def list_project_jobs(
    *,
    project: str,
    svc: Svc,
    caller: Caller,
    status_: Annotated[schemas.JobStatus | None, Query(alias="status")] = None,
    limit: Annotated[int | None, Query(ge=1, le=PAGE_LIMIT)] = None,
    offset: Annotated[int, Query(ge=0, le=2**31)] = 0,
) -> Response:
    return await list_jobs(
        svc=svc, caller=caller, project=project, status_=status_, limit=limit, offset=offset
    )


@router.get("/jobs", response_model=list[schemas.JobPublic], responses=PAGED)
async def list_jobs(
    *,
    svc: Svc,
    caller: Caller,
    project: Annotated[str | None, Query(max_length=63)] = None,
    status_: Annotated[schemas.JobStatus | None, Query(alias="status")] = None,
    limit: Annotated[int | None, Query(ge=1, le=PAGE_LIMIT)] = None,
    offset: Annotated[int, Query(ge=0, le=2**31)] = 0,
) -> Response:
    """Jobs by project then age; ``limit``/``offset`` page them, ``X-Total-Count`` says how many match."""
    key = f"jobs?project={project}&status={status_}&limit={limit}&offset={offset}"
    return cached_response(await svc.views.get(key, lambda: _jobs(svc, project, status_, limit, offset)))


def _jobs(svc: Services, project: str | None, status_: str | None, limit: int | None, offset: int) -> Payload:
    with svc.db.read() as session:
        if project is not None:
            projects.get_project(session, project)
        views = job_views(session, project=project, status=status_, limit=limit, offset=offset)
        paged = limit is not None or offset > 0
        total = count_jobs(session, project=project, status=status_) if paged else len(views)
    body = convert.jobs_json([convert.job_public(view, view.project_name) for view in views])
    return Payload(body, {"X-Total-Count": str(total)})


@router.get("/projects/{project}/jobs/{name}", response_model=schemas.JobPublic)
def read_job(project: str, name: str, svc: Svc, caller: Caller) -> schemas.JobPublic:
    with svc.db.read() as session:
        return convert.job_public(jobs.get_job(session, project, name), project)


@router.delete("/projects/{project}/jobs/{name}", response_model=schemas.JobPublic)
def delete_job(project: str, name: str, svc: Svc, caller: Caller) -> schemas.JobPublic:
    return jobs.cancel_job(svc, caller, project=project, name=name)


@router.post("/projects/{project}/jobs/{name}/checkpointed", response_model=schemas.JobPublic)
def report_checkpoint(
    project: str, name: str, svc: Svc, caller: Caller, body: schemas.JobCheckpointed | None = None
) -> schemas.JobPublic:
    """The job completed a checkpoint (now, or at ``at``): victims are chosen by the work each would lose."""
    return jobs.record_checkpoint(
        svc, caller, project=project, name=name, at=None if body is None else body.at
    )


@router.get("/projects/{project}/jobs/{name}/logs", response_class=PlainTextResponse)
def read_logs(
    *,
    project: str,
    name: str,
    svc: Svc,
    caller: Caller,
    replica: Annotated[int, Query(ge=0, le=1023)] = 0,
    tail: Annotated[int | None, Query(ge=0, le=100_000)] = None,
) -> PlainTextResponse:
    with svc.db.read() as session:
        jobs.get_job(session, project, name)
    require_project_writer(caller, project)  # a job's output is its project's: it may print its secrets
    try:
        text = svc.logs.read_log(project, name, replica, tail)
    except EngineUnavailable as error:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, f"logs are unavailable: {error}") from error
    if text is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"no logs for replica {replica} of {project}/{name} (has it started?)"
        )
    return PlainTextResponse(text)
