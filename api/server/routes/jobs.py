"""Jobs: submit, read, list, delete (stop) and read a replica's logs.

Contract: a job is created ``pending`` and the loop is woken at once (the answer never waits for a cycle;
the checks read before the submit writes; a new name is inserted without waiting for the database's write
lock (``Database.insert``), so submits never queue behind a scheduling cycle; a name taken meanwhile, or a
project deleted meanwhile, sends the submit through the locked path, which answers 409 or 404). Names are unique among a project's
jobs; submitting the name of a *finished* job replaces that job (its history stays in the events), an
active one is a 409. A job that does not fit today's cluster (a replica needs more GPUs than any schedulable
node has, or ``min_replicas`` replicas more room than all of them) is accepted: nodes come and go
(autoscalers, repairs, a cordoned node back), so it waits, taking GPUs from nobody, with a reason that says
what it would need, also sent back as a ``Warning`` header. The only size refusals (422) are the schema's
bounds on a job (``api.server.schemas.JobCreate``: at most 1024 replicas and 1024 GPUs per replica), and a job
without an image on Kubernetes when the service has no default image is refused too. ``DELETE`` marks the job ``cancelled`` and its replicas to stop
(SIGTERM, the grace period, then SIGKILL; the master last); deleting a finished job is a no-op.
``POST .../checkpointed`` records that an active job completed a checkpoint (its newest report is kept: the
victim search weighs the work since then, which a preemption would lose); a finished job is a 409, a time
after the service's clock (beyond a minute of skew) or before the submission a 422.
Submitting, deleting and reading logs need the admin token or a token of the job's project (a job's
output may hold its secrets); any token reads jobs, which never show env values.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response, status
from fastapi.responses import PlainTextResponse
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from api.server import convert, schemas
from api.server.auth import Principal, require_project_writer
from api.server.cache import Payload, cached_response
from api.server.deps import Caller, Services, Svc
from api.server.engine.link import EngineUnavailable
from api.server.routes.projects import get_project
from api.server.settings import Settings
from scheduler.core.explain import beyond_cluster
from scheduler.engine.reconcile import stop_job_replicas
from scheduler.store.models import JobRow, NodeRow
from scheduler.store.queries import ACTIVE, add_event, count_jobs, job_by_name, job_views

log = logging.getLogger(__name__)

router = APIRouter(tags=["jobs"])


def _get_job(session: Session, project: str, name: str) -> JobRow:
    get_project(session, project)
    job = job_by_name(session, project, name)
    if job is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"no job {name!r} in project {project!r}; see GET /api/v1/jobs?project={project}",
        )
    return job


def _fit_warning(session: Session, body: schemas.JobCreate) -> str | None:
    """Why the job does not fit today's cluster, if it does not: it is accepted all the same (nodes come and
    go: autoscalers, repairs, a cordoned node back) and waits, taking GPUs from nobody, with this reason."""
    # nodes by size, not one row each: this runs on every submit, and a cluster has thousands of nodes
    sizes = session.execute(
        select(NodeRow.gpus, func.count()).where(NodeRow.schedulable).group_by(NodeRow.gpus)
    ).all()
    if not sizes:
        return None  # nodes not known yet (the executor has not reported); the scheduler will explain
    g, k = body.gpus_per_replica, body.min_replicas or 1
    return beyond_cluster(g, k, max(size for size, _ in sizes), sum(n * (size // g) for size, n in sizes))


WARNING = {
    "description": 'Present when the job does not fit today\'s cluster: 299 tide "why, and what it would need"',
    "schema": {"type": "string"},
}


def header_warning(text: str) -> str:
    """A ``Warning`` header value (RFC 7234 form, as Kubernetes sends them): printable ASCII (anything else
    becomes ``?``), quotes and backslashes escaped."""
    printable = "".join(ch if " " <= ch <= "~" else "?" for ch in text)
    return '299 tide "' + printable.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _check_image(settings: Settings, body: schemas.JobCreate) -> None:
    if settings.executor == "kubernetes" and body.image is None and settings.default_image is None:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            "this Tide runs jobs as Kubernetes pods and has no default image: set the job's image "
            "(tide submit-dist --image IMAGE)",
        )


@router.post(
    "/projects/{project}/jobs",
    status_code=status.HTTP_201_CREATED,
    response_model=schemas.JobPublic,
    responses={201: {"description": "The job, as submitted", "headers": {"Warning": WARNING}}},
)
def submit_job(
    project: str, body: schemas.JobCreate, response: Response, svc: Svc, caller: Caller
) -> schemas.JobPublic:
    public, warnings = create_job(project, body, svc, caller)
    for warning in warnings:
        response.headers.append("Warning", header_warning(warning))
    return public


def create_job(
    project: str, body: schemas.JobCreate, svc: Services, caller: Principal
) -> tuple[schemas.JobPublic, list[str]]:
    """Submit ``body`` to ``project`` (this route's, and ``api.server.routes.manifests``' from a manifest); the job
    and what to warn its submitter of (it does not fit today's cluster)."""
    with svc.db.read() as session:  # checks that only read, before the write lock: writes are serialised
        owner = get_project(session, project).id
        require_project_writer(caller, project)
        _check_image(svc.settings, body)
        beyond = _fit_warning(session, body)
        taken = session.scalar(
            select(JobRow.id).where(JobRow.project_id == owner, JobRow.name == body.name).limit(1)
        )
    if taken is None:
        try:
            with svc.db.insert() as session:
                public = _insert(session, owner, project, body, beyond=beyond, now=svc.engine.clock())
        except IntegrityError:  # the name was taken or the project deleted meanwhile: decide under the lock
            log.info("submit of %s/%s raced another write; retrying under the write lock", project, body.name)
        else:
            svc.engine.trigger()
            return public, [beyond] if beyond else []
    with svc.db.write() as session:
        owner = get_project(session, project, lock=True).id  # deleted meanwhile: 404
        existing = job_by_name(session, project, body.name, lock=True)
        if existing is not None and existing.status in ACTIVE:
            raise HTTPException(
                status.HTTP_409_CONFLICT,
                f"job {body.name!r} already exists in project {project!r} ({existing.status}): "
                "pick another name or delete it first",
            )
        if existing is not None:
            session.delete(existing)
            session.flush()
        public = _insert(session, owner, project, body, beyond=beyond, now=svc.engine.clock())
    svc.engine.trigger()
    return public, [beyond] if beyond else []


def _insert(
    session: Session, owner: int, project: str, body: schemas.JobCreate, *, beyond: str | None, now: float
) -> schemas.JobPublic:
    job = new_job(owner, body, now)
    job.pending_reason = beyond
    session.add(job)
    session.flush()
    return convert.job_public(job, project)


def new_job(project_id: int, body: schemas.JobCreate, now: float) -> JobRow:
    """The row of a job submitted at ``now``, pending (the one place a submit's body becomes a row)."""
    assert body.min_replicas is not None and body.max_replicas is not None  # filled in by the schema
    return JobRow(
        project_id=project_id,
        name=body.name,
        status="pending",
        workers=body.workers,
        min_replicas=body.min_replicas,
        max_replicas=body.max_replicas,
        gpus_per_replica=body.gpus_per_replica,
        allowed_replicas=body.allowed_replicas,
        topology=body.topology,
        image=body.image,
        command=list(body.command),
        env=dict(body.env),
        interactive=body.interactive,
        priority=body.priority,
        grace_period=body.grace_period,
        expected_duration=body.expected_duration,
        created_at=now,
        submitted_at=now,
        restarts=0,
        generation=0,
        replicas=[],
    )


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
            get_project(session, project)
        views = job_views(session, project=project, status=status_, limit=limit, offset=offset)
        paged = limit is not None or offset > 0
        total = count_jobs(session, project=project, status=status_) if paged else len(views)
    body = convert.jobs_json([convert.job_public(view, view.project_name) for view in views])
    return Payload(body, {"X-Total-Count": str(total)})


@router.get("/projects/{project}/jobs/{name}", response_model=schemas.JobPublic)
def read_job(project: str, name: str, svc: Svc, caller: Caller) -> schemas.JobPublic:
    with svc.db.read() as session:
        return convert.job_public(_get_job(session, project, name), project)


@router.delete("/projects/{project}/jobs/{name}", response_model=schemas.JobPublic)
def delete_job(project: str, name: str, svc: Svc, caller: Caller) -> schemas.JobPublic:
    with svc.db.write() as session:
        job = _get_job(session, project, name)
        require_project_writer(caller, project)
        job = job_by_name(session, project, name, lock=True) or job
        if job.status in ACTIVE:
            now = svc.engine.clock()
            who = "an admin" if caller.is_admin else "a project token"
            job.status, job.finished_at, job.message = "cancelled", now, f"deleted by {who}"
            job.pending_reason = job.queue_position = None
            stop_job_replicas(session, job)
            add_event(session, time=now, kind="cancel", project=project, job=name, reason=f"deleted by {who}")
        session.flush()
        public = convert.job_public(job, project)
    svc.engine.trigger()
    return public


CLOCK_SKEW_SECONDS = 60.0  # a checkpoint reported this far ahead of the service's clock is still taken


@router.post("/projects/{project}/jobs/{name}/checkpointed", response_model=schemas.JobPublic)
def report_checkpoint(
    project: str, name: str, svc: Svc, caller: Caller, body: schemas.JobCheckpointed | None = None
) -> schemas.JobPublic:
    """The job completed a checkpoint (now, or at ``at``): victims are chosen by the work each would lose."""
    now = svc.engine.clock()
    at = now if body is None or body.at is None else _seconds(body.at)
    with svc.db.write() as session:
        job = _get_job(session, project, name)
        require_project_writer(caller, project)
        job = job_by_name(session, project, name, lock=True) or job
        if job.status not in ACTIVE:
            raise HTTPException(
                status.HTTP_409_CONFLICT,
                f"job {name!r} in project {project!r} is {job.status}: only a pending or running job reports "
                "checkpoints",
            )
        if at > now + CLOCK_SKEW_SECONDS:
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                f"'at' is {at - now:.0f} s after the service's clock: report a checkpoint once it is complete "
                "(or leave 'at' out for now); is this machine's clock right?",
            )
        if at < job.submitted_at - 1.0:  # a second's slack: clients round times to microseconds
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                f"'at' is before job {name!r} was submitted: report a checkpoint of this job",
            )
        if job.checkpointed_at is None or at > job.checkpointed_at:
            job.checkpointed_at = at
        session.flush()
        return convert.job_public(job, project)


def _seconds(value: datetime) -> float:
    return (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).timestamp()


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
        _get_job(session, project, name)
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
