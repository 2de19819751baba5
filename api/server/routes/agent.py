"""``POST /agent/v1/projects/{project}/jobs/{job}/replicas/{replica_id}``: where a job pod's agent learns
its launches (docs/kubernetes.md, "How a pod learns a resize").

Contract: the caller is the agent of one replica, authenticated by its job's agent token (``Authorization:
Bearer``, compared with ``JobRow.agent_token_hash``; another job's token, a project or admin token: 401).
The body (``AgentPoll``) is what the agent runs and how it is doing; it is stored (``AgentReportRow``; a
newer checkpoint time than the job's is kept as its ``checkpointed_at``, a training speed (``progress``, R19)
goes to ``lifecycle.progressed``) and,
when it changed, the engine is woken (a warm newcomer may complete a grow, an exit may restart a launch).
The answer (``AgentOrder``) is ``launch`` when the replica's ``launch_generation`` is newer than the one it
runs: the launch's size, the replica's rank in it (members by replica index), the rendezvous port and
run id; else, after waiting up to ``wait`` seconds for that to change (a long-poll), ``wait``. The master
(rank 0) offers a free port in each poll; the port of the launch it is first told is recorded, and the
other members are answered only once it is known. A replica given a preemption notice
(``ReplicaRow.noticed_at``, ``scheduler.elastic.notice``) whose agent runs a launch and has not said it passed
it on (``noticed``) is answered ``notice`` first, whether it stays or leaves. A job that is over, or a replica it no longer has, is a
404 that says so (the agent stops); a replica that is being removed just waits for its pod's deletion.
"""

from __future__ import annotations

import hmac
import time
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Request, status
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.server import longpoll, schemas
from api.server.auth import bearer
from api.server.deps import Svc
from scheduler.elastic.inplace import hash_token, launch
from scheduler.statuses import ACTIVE
from scheduler.store import lifecycle
from scheduler.store.models import AgentReportRow, JobRow, ProjectRow, ReplicaRow

router = APIRouter(prefix="/agent/v1", tags=["agent"])
_REREAD_S = 0.5  # a long-poll reads the database at least this often, woken or not
WAIT = schemas.AgentOrder(action="wait")
NOTICE = schemas.AgentOrder(action="notice")


@router.post("/projects/{project}/jobs/{job}/replicas/{replica_id}", response_model=schemas.AgentOrder)
async def poll(
    project: str,
    job: str,
    replica_id: Annotated[int, Path(ge=1, le=2**62)],
    body: schemas.AgentPoll,
    *,
    request: Request,
    svc: Svc,
) -> schemas.AgentOrder:
    token = bearer(request.headers.get("authorization"))
    seen = longpoll.snapshot(svc.engine.changes)
    order, changed = await run_in_threadpool(_report, svc, (project, job, replica_id), token, body)
    if changed:
        longpoll.bump()
        svc.engine.trigger()
    deadline = time.monotonic() + body.wait  # woken by every write, it still waits ``wait`` seconds in all
    while order is None and (left := deadline - time.monotonic()) > 0:
        await longpoll.wait_change(seen, lambda: svc.engine.changes, min(_REREAD_S, left))
        seen = longpoll.snapshot(svc.engine.changes)
        order = await run_in_threadpool(_answer_now, svc, replica_id, body)
    return order or WAIT


def _report(
    svc: Svc, who: tuple[str, str, int], token: str, body: schemas.AgentPoll
) -> tuple[schemas.AgentOrder | None, bool]:
    """Check the caller, store its report; the order for it now (None: wait) and whether it changed."""
    project, job, replica_id = who
    with svc.db.write() as session:
        row = _job(session, project, job)
        if row.agent_token_hash is None or not hmac.compare_digest(row.agent_token_hash, hash_token(token)):
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                f"this is not the agent token of job {project}/{job}: the pod must read it from the job's "
                "Secret (TIDE_AGENT_TOKEN)",
            )
        replica = session.get(ReplicaRow, replica_id)
        if replica is None or replica.job_id != row.id:
            raise HTTPException(
                status.HTTP_404_NOT_FOUND, f"job {project}/{job} has no replica {replica_id} any more"
            )
        report = session.get(AgentReportRow, replica_id)
        now = svc.engine.clock()
        if report is None:
            report = AgentReportRow(replica_id=replica_id, job_id=row.id, state=body.state, reported_at=now)
            session.add(report)
            changed = True
        else:
            changed = (report.generation, report.state, report.exit_code) != (
                body.generation, body.state, body.exit_code,
            )  # fmt: skip
        report.generation, report.state, report.exit_code = body.generation, body.state, body.exit_code
        if _trains_after_resize(row, replica, body):
            lifecycle.resumed(row, now)  # R18: the resize's pause, decision to training at the new size
        mark = body.checkpointed_at
        if mark is not None and (row.checkpointed_at is None or mark > row.checkpointed_at):
            row.checkpointed_at = mark  # the job's progress, reported by its pods' agents (the newest kept)
        if body.progress is not None:  # R19: its training speed at the size it runs
            lifecycle.progressed(row, body.progress.samples_per_second, body.progress.world_size)
        report.reported_at = now
        session.flush()
        return _order(session, replica, body), changed


def _trains_after_resize(job: JobRow, replica: ReplicaRow, body: schemas.AgentPoll) -> bool:
    """Whether this report is the first sign that the job trains at the size a resize gave it: its agent runs
    the launch made after the resize was decided."""
    return (
        job.resize_from is not None
        and body.state == "running"
        and body.generation is not None
        and body.generation == replica.launch_generation
        and replica.launch_at is not None
        and replica.launch_at >= job.resize_from
    )


def _job(session: Session, project: str, job: str) -> JobRow:
    row = session.scalars(
        select(JobRow)
        .join(JobRow.project)
        .where(ProjectRow.name == project, JobRow.name == job, JobRow.status.in_(ACTIVE))
        .order_by(JobRow.id.desc())
        .limit(1)
    ).first()
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {project}/{job} is not running (it is over)")
    return row


def _answer_now(svc: Svc, replica_id: int, body: schemas.AgentPoll) -> schemas.AgentOrder | None:
    with svc.db.read() as session:
        replica = session.get(ReplicaRow, replica_id)
        if replica is not None and _notice_due(replica, body):
            return NOTICE
        if replica is None or not _due(replica, body):
            return None
        assert replica.launch_generation is not None
        master = launch(replica.job, replica.launch_generation).master
        if master != replica.id or _port(session, master, replica.launch_generation):
            return _order(session, replica, body)
    with svc.db.write() as session:  # the master's first poll for this launch: record its port
        replica = session.get(ReplicaRow, replica_id)
        return None if replica is None else _order(session, replica, body)


def _notice_due(replica: ReplicaRow, body: schemas.AgentPoll) -> bool:
    return replica.noticed_at is not None and body.state == "running" and not body.noticed


def _due(replica: ReplicaRow, body: schemas.AgentPoll) -> bool:
    return (
        replica.desired == "run"
        and replica.launch_generation is not None
        and replica.launch_generation != body.generation
    )


def _port(session: Session, master: int, generation: int) -> int | None:
    """The rendezvous port the master replica ``master`` offered for launch ``generation``, once known."""
    report = session.get(AgentReportRow, master)
    if report is None or report.port_generation != generation:
        return None
    return report.port


def _order(session: Session, replica: ReplicaRow, body: schemas.AgentPoll) -> schemas.AgentOrder | None:
    """A notice to pass on, the launch ``replica`` is to start now, or None (nothing new, or its master's
    port is not known)."""
    if _notice_due(replica, body):
        return NOTICE
    if not _due(replica, body):
        return None
    generation = replica.launch_generation
    assert generation is not None
    current = launch(replica.job, generation)
    if current.master == replica.id and _port(session, current.master, generation) is None:
        if body.port is None:
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                "the master replica's agent must offer a rendezvous port ('port') in its poll",
            )
        report = session.get(AgentReportRow, current.master)
        if report is None:
            return None
        report.port, report.port_generation = body.port, generation
        longpoll.bump()
    port = _port(session, current.master, generation)
    if port is None:
        return None
    return schemas.AgentOrder(
        action="launch",
        generation=generation,
        world_size=current.size,
        rank=current.rank_of(replica.id),
        rdzv_port=port,
        run_id=current.run_id,
    )
