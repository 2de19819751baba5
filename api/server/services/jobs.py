"""Jobs as the routes change them: submit, cancel, record a checkpoint; find one by name.

Contract: ``create_job`` submits a body to a project (the REST route's and a manifest's): a new name is
inserted without waiting for the database's write lock, so submits never queue behind a scheduling cycle.
On PostgreSQL a job without a pod template, from a caller who may write the project, is one statement that
reads the project, inserts the job and signals it (``scheduler.store.submit``: one round trip, a third of
the CPU of a session), shared with the submits that arrive with it when it comes through ``submit_job``
(``api.server.submits``, on the event loop); one with a pod template runs its checks in its
insert's own transaction (``Database.insert``: the template's check reads the project's pod defaults). On
SQLite (whose writes queue one at a time) the checks read before the write lock. A name already taken
(PostgreSQL learns it from the insert), or a project deleted meanwhile, sends the submit through the locked
path, which answers 409 or 404. A finished
job of the same name is replaced (its record and its events go: ``lifecycle.forget_job``), an active one is
a 409. A pod template is checked against the project's rules first (``api.server.services.pods``: 422). It
returns the job and what to warn its submitter of (a pod template this executor cannot honour; the job
does not fit today's cluster: it is accepted and waits). ``cancel_job`` marks an active job ``cancelled`` and its replicas to stop, with its
event; a finished job's record is removed, with its replicas and events (the answer shows it as it was),
once its replicas exited (a 409 says to try again while they stop; a submit of its name likewise).
``create_job`` and ``cancel_job`` wake the loop once their write is committed. ``record_checkpoint``
keeps an active job's newest checkpoint time (409 when it is finished; 422 for a time after the service's
clock beyond a minute of skew, or before the submission). ``get_job`` finds a job or raises 404.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from fastapi import HTTPException, status
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.server import convert, schemas
from api.server.auth import Principal, may_write, require_project_writer
from api.server.deps import Services
from api.server.services import pods
from api.server.services.projects import get_project
from api.server.settings import Settings
from scheduler.core.explain import beyond_cluster
from scheduler.statuses import ACTIVE, JobStatus
from scheduler.store import lifecycle, submit
from scheduler.store.db import Database
from scheduler.store.models import JobRow, NodeRow
from scheduler.store.queries import job_by_name

log = logging.getLogger(__name__)

NODE_SIZES = "submit:node-sizes"  # the fit warning's cached node sizes (``ViewCache.value``)
CLOCK_SKEW_SECONDS = 60.0  # a checkpoint reported this far ahead of the service's clock is still taken


def get_job(session: Session, project: str, name: str) -> JobRow:
    job = job_by_name(session, project, name)
    if job is None:
        get_project(session, project)  # an unknown project is its own 404; read only then
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"no job {name!r} in project {project!r}; see GET /api/v1/jobs?project={project}",
        )
    return job


def _node_sizes(db: Database, session: Session | None) -> list[tuple[int, int]]:
    """The schedulable nodes by size: ``(gpus, how many)``; read in ``session``, or in a read of its own."""
    query = select(NodeRow.gpus, func.count()).where(NodeRow.schedulable).group_by(NodeRow.gpus)
    if session is None:
        with db.read() as own:
            return [(gpus, count) for gpus, count in own.execute(query)]
    return [(gpus, count) for gpus, count in session.execute(query)]


def _fit_warning(svc: Services, session: Session | None, body: schemas.JobCreate) -> str | None:
    """Why the job does not fit today's cluster, if it does not: it is accepted all the same (nodes come and
    go: autoscalers, repairs, a cordoned node back) and waits, taking GPUs from nobody, with this reason."""
    # nodes by size, not one row each, and read once per change of the nodes (not of who holds their GPUs,
    # which moves every cycle while submits come), not once per submit: at 10,240 nodes the count takes 2 ms
    # of the database, a core's worth at 500 submits a second
    views = svc.views
    sizes = views.value(NODE_SIZES, lambda: _node_sizes(svc.db, session), version=views.version.node_rows)
    return _beyond(sizes, body)


async def _fit_warning_async(svc: Services, body: schemas.JobCreate) -> str | None:
    """``_fit_warning`` on the event loop: the node sizes read in a worker thread when they must be."""
    views = svc.views
    sizes = await views.value_async(
        NODE_SIZES, lambda: _node_sizes(svc.db, None), version=views.version.node_rows
    )
    return _beyond(sizes, body)


def _beyond(sizes: list[tuple[int, int]], body: schemas.JobCreate) -> str | None:
    if not sizes:
        return None  # nodes not known yet (the executor has not reported); the scheduler will explain
    if body.gpu_fraction is not None:
        return None  # R20: a share of one GPU fits any node with a GPU
    g, k = body.gpus_per_replica, body.min_replicas or 1
    return beyond_cluster(g, k, max(size for size, _ in sizes), sum(n * (size // g) for size, n in sizes))


def _lacks_image(settings: Settings, body: schemas.JobCreate) -> bool:
    """Whether the job has no image where one is needed: Kubernetes pods, and no default image."""
    return settings.executor == "kubernetes" and body.image is None and settings.default_image is None


def _check_image(settings: Settings, body: schemas.JobCreate) -> None:
    if _lacks_image(settings, body):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            "this Tide runs jobs as Kubernetes pods and has no default image: set the job's image "
            "(tide submit-dist --image IMAGE)",
        )


def _in_one_statement(svc: Services, caller: Principal, project: str, body: schemas.JobCreate) -> bool:
    """Whether the submit may be the one-statement insert (``scheduler.store.submit``): on PostgreSQL, for
    a job without a pod template (its check reads the project's pod defaults), from a caller who may write
    the project, with an image where one is needed. Any refusal is then the other paths' to give, in their
    order (an unknown project's 404 before the token's 403)."""
    return (
        not svc.db.is_sqlite
        and body.pod_template is None
        and may_write(caller, project)
        and not _lacks_image(svc.settings, body)
    )


async def submit_job(
    svc: Services, caller: Principal, *, project: str, body: schemas.JobCreate
) -> tuple[schemas.JobPublic, list[str]]:
    """``create_job`` from the event loop: where the submit may be one statement and the service gathers them
    (``Services.submits``, PostgreSQL), it waits there for its row with the submits that came with it, never
    holding a worker thread; otherwise, and for a name taken or a project gone, ``create_job``'s own paths run
    in a worker thread."""
    submits = svc.submits
    if submits is None or not _in_one_statement(svc, caller, project, body):
        return await run_in_threadpool(create_job, svc, caller, project=project, body=body)
    beyond = await _fit_warning_async(svc, body)
    job = new_job(0, body, svc.engine.clock())  # its project's id is the statement's to read
    job.pending_reason = beyond
    if await submits.insert(project, submit.values_of(job)) is None:  # name taken or no such project
        return await run_in_threadpool(_create_locked, svc, project, body, told=[], beyond=beyond)
    return convert.job_public(job, project), [beyond] if beyond else []


def create_job(
    svc: Services,
    caller: Principal,
    *,
    project: str,
    body: schemas.JobCreate,
    template_path: str = "pod_template",
) -> tuple[schemas.JobPublic, list[str]]:
    """Submit ``body`` to ``project``; the job and what to warn its submitter of (see the module contract).
    ``template_path``: how a 422 names the job's pod template (a manifest's replica template)."""

    def check(session: Session) -> tuple[int, list[str], str | None]:
        """The checks that only read: the project's id, what to tell the submitter, why it does not fit."""
        row = get_project(session, project)
        require_project_writer(caller, project)
        _check_image(svc.settings, body)
        told = pods.check_job(row, body.pod_template, template_path, executor=svc.settings.executor)
        return row.id, told, _fit_warning(svc, session, body)

    if _in_one_statement(svc, caller, project, body):
        beyond = _fit_warning(svc, None, body)
        job = new_job(0, body, svc.engine.clock())  # its project's id is the statement's to read
        job.pending_reason = beyond
        try:
            inserted = submit.insert_job(svc.db, project, submit.values_of(job))
        except IntegrityError:  # the name is taken, or the project deleted meanwhile: under the lock
            inserted = None
        if inserted is not None:
            svc.engine.trigger()
            return convert.job_public(job, project), [beyond] if beyond else []
        log.debug(
            "submit of %s/%s: name taken or no such project; deciding under the write lock",
            project,
            body.name,
        )
        return _create_locked(svc, project, body, told=[], beyond=beyond)
    # SQLite queues its writes one at a time, so the checks read before the write lock; PostgreSQL's insert takes
    # no lock, so there they run in the insert's own transaction (a job with a pod template, or a refusal)
    checks_first = svc.db.is_sqlite
    taken: int | None = None
    if checks_first:
        with svc.db.read() as session:
            owner, told, beyond = check(session)
            taken = session.scalar(
                select(JobRow.id).where(JobRow.project_id == owner, JobRow.name == body.name).limit(1)
            )
    if taken is None:
        try:
            with svc.db.insert() as session:
                if not checks_first:
                    owner, told, beyond = check(session)
                public = _insert(session, owner, project, body, beyond=beyond, now=svc.engine.clock())
        except IntegrityError:  # the name is taken, or the project deleted meanwhile: under the lock
            log.debug(
                "submit of %s/%s: name taken or project changed; deciding under the write lock",
                project,
                body.name,
            )
        else:
            svc.engine.trigger()
            return public, [*told, *([beyond] if beyond else [])]
    return _create_locked(svc, project, body, told=told, beyond=beyond)


def _create_locked(
    svc: Services, project: str, body: schemas.JobCreate, *, told: list[str], beyond: str | None
) -> tuple[schemas.JobPublic, list[str]]:
    """The submit under the writers' lock: 404 for a project gone, 409 for an active job of the name, a
    finished one replaced."""
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
            _forgettable(existing, project, "submit its name again")
            lifecycle.forget_job(session, existing)  # the old run's events go with it
        public = _insert(session, owner, project, body, beyond=beyond, now=svc.engine.clock())
    svc.engine.trigger()
    return public, [*told, *([beyond] if beyond else [])]


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
        status=JobStatus.PENDING,
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
        pod_template=body.pod_template,
        gpu_fraction=None if body.gpu_fraction is None else str(schemas.exact_fraction(body.gpu_fraction)),
        created_at=now,
        submitted_at=now,
        restarts=0,
        generation=0,
        replicas=[],
    )


def cancel_job(svc: Services, caller: Principal, *, project: str, name: str) -> schemas.JobPublic:
    """Cancel the job (see the module contract); the job as it is afterwards."""
    with svc.db.write() as session:
        job = get_job(session, project, name)
        require_project_writer(caller, project)
        job = job_by_name(session, project, name, lock=True) or job
        if job.status in ACTIVE:
            who = "an admin" if caller.is_admin else f"project token {caller.token or '(unknown)'}"
            lifecycle.cancel_job(session, job, now=svc.engine.clock(), reason=f"deleted by {who}")
            session.flush()
            public = convert.job_public(job, project)
        else:
            _forgettable(job, project, "delete it again")
            public = convert.job_public(job, project)  # as it was: its record is gone once this commits
            lifecycle.forget_job(session, job)
    svc.engine.trigger()
    return public


def _forgettable(job: JobRow, project: str, then: str) -> None:
    """A finished job's record may go only once its processes exited (their rows hold their GPUs): 409."""
    left = lifecycle.stopping(job)
    if left:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"job {job.name!r} in project {project!r} is {job.status} but {left} of its replicas are still "
            f"stopping: {then} once they exited (see GET /api/v1/projects/{project}/jobs/{job.name})",
        )


def record_checkpoint(
    svc: Services, caller: Principal, *, project: str, name: str, at: datetime | None
) -> schemas.JobPublic:
    """The job completed a checkpoint at ``at`` (None: now); the job as it is afterwards."""
    now = svc.engine.clock()
    when = now if at is None else _seconds(at)
    with svc.db.write() as session:
        job = get_job(session, project, name)
        require_project_writer(caller, project)
        job = job_by_name(session, project, name, lock=True) or job
        if job.status not in ACTIVE:
            raise HTTPException(
                status.HTTP_409_CONFLICT,
                f"job {name!r} in project {project!r} is {job.status}: only a pending or running job reports "
                "checkpoints",
            )
        if when > now + CLOCK_SKEW_SECONDS:
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                f"'at' is {when - now:.0f} s after the service's clock: report a checkpoint once it is complete "
                "(or leave 'at' out for now); is this machine's clock right?",
            )
        if when < job.submitted_at - 1.0:  # a second's slack: clients round times to microseconds
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                f"'at' is before job {name!r} was submitted: report a checkpoint of this job",
            )
        lifecycle.checkpointed(session, job, when)
        session.flush()
        return convert.job_public(job, project)


def _seconds(value: datetime) -> float:
    return (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).timestamp()
