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

from dataclasses import dataclass
from typing import Annotated, Any, Literal, NoReturn

from fastapi import APIRouter, HTTPException, Query, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse

from api.server import convert, cursor, schemas
from api.server.auth import require_project_writer
from api.server.cache import Payload, cached_response
from api.server.deps import Caller, Services, Svc
from api.server.engine.link import EngineUnavailable
from api.server.headers import header_warning
from api.server.services import jobs, projects
from scheduler.store.queries import PageKey, count_jobs, job_page

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
async def submit_job(
    project: str, body: schemas.JobCreate, response: Response, svc: Svc, caller: Caller
) -> schemas.JobPublic:
    # async, the database's work handed to a worker thread (or gathered with other submits') in the service:
    # FastAPI checks a sync route's answer against its model in a second worker-thread hand-off, a tenth of
    # a submit's CPU at hundreds a second
    public, warnings = await jobs.submit_job(svc, caller, project=project, body=body)
    for warning in warnings:
        response.headers.append("Warning", header_warning(warning))
    return public


PAGE_LIMIT = 10_000  # the most one page holds
PAGE_DEFAULT = 1_000  # a page without ``limit``
TOTAL: dict[str, Any] = {
    "description": "How many jobs match the filters, whatever the page",
    "schema": {"type": "integer"},
}
NEXT: dict[str, Any] = {
    "description": "Present when more jobs follow this page: pass it back as ``cursor`` (with the same "
    "filters and order) for the next page. Opaque.",
    "schema": {"type": "string"},
}
PAGED: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "A page of the jobs, in the order asked for",
        "headers": {"X-Total-Count": TOTAL, "X-Next-Cursor": NEXT},
    }
}
Statuses = Annotated[
    list[schemas.JobStatus] | None,
    Query(alias="status", description="Only jobs in this status; give it several times for any of them."),
]
Waiting = Annotated[
    bool,
    Query(description="Only active jobs that wait or run short of their wanted size (they have a reason)."),
]
Order = Annotated[
    Literal["project", "line"],
    Query(description="project: by project, then age. line: by place in line, then the rest by age."),
]
Limit = Annotated[
    int, Query(ge=1, le=PAGE_LIMIT, description=f"At most this many jobs (default {PAGE_DEFAULT}).")
]
Cursor = Annotated[
    str | None,
    Query(
        max_length=cursor.MAX_LENGTH, description="Where to go on: the X-Next-Cursor of the previous page."
    ),
]
Offset = Annotated[
    int,
    Query(ge=0, le=2**31, description="Deprecated (use cursor): skip this many jobs first. Not with cursor."),
]


@router.get("/projects/{project}/jobs", response_model=list[schemas.JobPublic], responses=PAGED)
async def list_project_jobs(
    *,
    project: str,
    svc: Svc,
    caller: Caller,
    status_: Statuses = None,
    waiting: Waiting = False,
    order: Order = "project",
    limit: Limit = PAGE_DEFAULT,
    cursor_: Annotated[Cursor, Query(alias="cursor")] = None,
    offset: Offset = 0,
) -> Response:
    """A project's jobs, a page at a time: as ``GET /jobs?project=...``."""
    return await list_jobs(
        svc=svc,
        caller=caller,
        project=project,
        status_=status_,
        waiting=waiting,
        order=order,
        limit=limit,
        cursor_=cursor_,
        offset=offset,
    )


@router.get("/jobs", response_model=list[schemas.JobPublic], responses=PAGED)
async def list_jobs(
    *,
    svc: Svc,
    caller: Caller,
    project: Annotated[str | None, Query(max_length=63)] = None,
    status_: Statuses = None,
    waiting: Waiting = False,
    order: Order = "project",
    limit: Limit = PAGE_DEFAULT,
    cursor_: Annotated[Cursor, Query(alias="cursor")] = None,
    offset: Offset = 0,
) -> Response:
    """Jobs a page at a time (``limit``, default 1,000, at most 10,000): ``X-Total-Count`` says how many
    match the filters, ``X-Next-Cursor`` (absent on the last page) where the next page starts."""
    statuses: list[str] = sorted(set(status_ or ()))
    listing = [order, project, statuses, waiting]
    after = None
    if cursor_ is not None:
        if offset:
            _refuse("offset", "cannot be given with cursor: the cursor already says where the page starts")
        try:
            after = cursor.decode(cursor_, listing, KEY_SHAPES[order])
        except cursor.BadCursor as error:
            _refuse("cursor", str(error))
    key = f"jobs?{listing}&limit={limit}&cursor={cursor_}&offset={offset}"
    page = Page(listing, statuses, after, limit, offset)
    return cached_response(await svc.views.get(key, lambda: _jobs(svc, project, page)))


KEY_SHAPES: dict[str, tuple[type, ...]] = {"project": (str, float, int), "line": (int, float, int)}


@dataclass(frozen=True, slots=True)
class Page:
    listing: list[Any]  # order, project, statuses, waiting: what a cursor was given out for
    statuses: list[str]
    after: PageKey | None
    limit: int
    offset: int


def _refuse(field: str, message: str) -> NoReturn:
    raise RequestValidationError([{"loc": ("query", field), "msg": message, "type": "value_error"}])


def _jobs(svc: Services, project: str | None, page: Page) -> Payload:
    order, _, _, waiting = page.listing
    with svc.db.read() as session:
        if project is not None:
            projects.get_project(session, project)
        views, keys = job_page(
            session,
            project=project,
            status=page.statuses,
            waiting=waiting,
            order=order,
            after=page.after,
            limit=page.limit + 1,  # one more: is there a next page?
            offset=page.offset,
        )
        total = count_jobs(session, project=project, status=page.statuses, waiting=waiting)
    headers = {"X-Total-Count": str(total)}
    if len(views) > page.limit:
        views = views[: page.limit]
        headers["X-Next-Cursor"] = cursor.encode(page.listing, keys[page.limit - 1])
    body = convert.jobs_json([convert.job_public(view, view.project_name) for view in views])
    return Payload(body, headers)


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
