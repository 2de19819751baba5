"""Write a ``Plan`` to the store: wanted placements, released replicas, events, reasons and shares.

Contract: ``persist_plan(session, plan, now=..., notes=...)`` runs inside the cycle's one write transaction. The
decided jobs are re-read locked, all at once, and a decision is skipped when its job stopped being active
meanwhile (a delete that raced the cycle): a cancelled job never gets replicas. START/GROW insert ``ReplicaRow``s that the engine
launches once their GPUs are free; SHRINK/EVICT mark replicas ``stop`` (a never-launched one is deleted at
once). EVICT sends the job back to ``pending``. Every decision becomes one event carrying its reason; a
SHRINK's or EVICT's also carries the work the job loses (``details["lost_gpu_seconds"]``).

A SHRINK or EVICT caused by a reclaim or a preemption (``notice.NOTICE_CAUSES``) of a job whose project
(else department) sets a preemption notice gives each released replica that notice (``notice.give``, cut to
the job's grace period) where ``reaches(job)`` says the executor can deliver it; its event's reason then says
so ("notice: SIGUSR1 20 s before SIGTERM") and its details carry ``notice_seconds``.

With a usage half-life (R14), ``over_quota`` (GPUs each project held above its quota in the snapshot, held
since the previous cycle) brings each project's usage up to ``now`` (``scheduler.core.usage.accrue``) and
the weight the plan used is stored with it; with none, usage is left as it is.

Jobs' reasons and places in line (R13) are compared with ``notes``, what the snapshot the plan was made
from read (``scheduler.store.mapper.load_snapshot``), and only the changed ones are
written, in one batched statement, to jobs still active: a cluster with thousands of waiting jobs sees
thousands of places in line move each cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import bindparam, or_, select, update
from sqlalchemy.orm import Session

from scheduler.core.plan import Action, Decision, Plan
from scheduler.core.usage import accrue
from scheduler.engine import notice
from scheduler.store.mapper import Notes
from scheduler.store.models import DepartmentRow, JobRow, ProjectRow, ReplicaRow
from scheduler.store.queries import ACTIVE, active_jobs, add_event

log = logging.getLogger(__name__)


def persist_plan(
    session: Session,
    plan: Plan,
    *,
    now: float,
    usage_half_life: float = 0.0,
    notes: Notes,
    over_quota: dict[str, int] | None = None,
    reaches: Callable[[JobRow], bool] | None = None,
    grace_period: float = 30.0,
) -> list[Decision]:
    """Persist ``plan``; return the decisions applied (skipped ones are logged). ``reaches``: whether a
    job's replicas can be given a preemption notice (None: no notices); ``grace_period``: the service's."""
    applied: list[Decision] = []
    jobs = active_jobs(session, ((d.project, d.job) for d in plan.decisions))
    for decision in plan.decisions:
        job = jobs.get((decision.project, decision.job))
        if job is None or job.status not in ACTIVE:
            log.info(
                "skipping %s of %s/%s: no longer active", decision.action, decision.project, decision.job
            )
            continue
        reason, details = decision.reason, _lost(decision)
        if decision.action in (Action.START, Action.GROW):
            _place(session, job, decision, now)
        else:
            released = _release(session, job, decision, now)
            given = _notice(job, decision, released, reaches, grace_period)
            if given is not None and details is not None:
                reason, details = f"{reason}; {given[0]}", details | {"notice_seconds": given[1]}
        add_event(
            session,
            time=now,
            kind=decision.action.value,
            project=decision.project,
            job=decision.job,
            replicas=[p.index for p in decision.replicas],
            reason=reason,
            cause=decision.cause.value,
            details=details,
        )
        applied.append(decision)
    _write_notes(session, plan, notes)
    _write_shares(session, plan)
    if usage_half_life > 0:
        _write_usage(session, plan, now, usage_half_life, over_quota or {})
    return applied


def _lost(decision: Decision) -> dict[str, float] | None:
    """A shrink's or an eviction's cost, GPU-seconds since the job's last checkpoint or restart."""
    if decision.action in (Action.START, Action.GROW):
        return None
    return {"lost_gpu_seconds": round(decision.lost_gpu_seconds, 1)}


def _notice(
    job: JobRow,
    decision: Decision,
    released: list[ReplicaRow],
    reaches: Callable[[JobRow], bool] | None,
    default_grace: float,
) -> tuple[str, float] | None:
    """Give the released replicas the project's preemption notice, when one applies: its words and length."""
    if reaches is None or not released or decision.cause not in notice.NOTICE_CAUSES:
        return None
    asked = notice.project_notice(job.project)
    if asked <= 0 or not reaches(job):
        return None
    grace = notice.grace_of(job, default_grace)
    given = [notice.give(replica, asked, grace) for replica in released]
    return notice.words(given[0], asked, grace), given[0]


def _place(session: Session, job: JobRow, decision: Decision, now: float) -> None:
    for placement in decision.replicas:
        session.add(
            ReplicaRow(
                job=job,
                index=placement.index,
                node=placement.node,
                gpus=placement.gpus,
                desired="run",
                status="starting",
                created_at=now,
            )
        )
    job.status = "running"
    if job.started_at is None:
        job.started_at = now
    job.last_resized_at = now
    job.generation += 1


def _release(session: Session, job: JobRow, decision: Decision, now: float) -> list[ReplicaRow]:
    """Mark the decision's replicas to stop (delete those never launched); the ones marked."""
    marked: list[ReplicaRow] = []
    indices = {p.index for p in decision.replicas}
    if decision.action is Action.EVICT:
        indices = {r.index for r in job.replicas if r.desired == "run"}
    for replica in list(job.replicas):
        if replica.desired != "run" or replica.index not in indices:
            continue
        if replica.pid is None:
            job.replicas.remove(replica)
            session.delete(replica)
        else:
            replica.desired = "stop"
            replica.status = "terminating"
            marked.append(replica)
    job.last_resized_at = now
    job.generation += 1
    if not any(r.desired == "run" for r in job.replicas):
        job.status = "pending"
        job.restarts += 1 if decision.action is Action.EVICT else 0
    return marked


_NOTE_UPDATE = (
    update(JobRow)
    .where(JobRow.id == bindparam("job_id"), or_(*(JobRow.status == status for status in ACTIVE)))
    .values(pending_reason=bindparam("reason"), queue_position=bindparam("position"))
)


def _write_notes(session: Session, plan: Plan, notes: Notes) -> None:
    """Store each active job's reason and place in line, writing only the ones that changed."""
    wanted = {(n.project, n.job): (n.reason, n.queue_position) for n in plan.notes}
    changed = [
        {"job_id": job_id, "reason": note[0], "position": note[1]}
        for key, job_id in notes.ids.items()
        if (note := wanted.get(key, (None, None))) != notes.stored[job_id]
    ]
    if changed:
        session.connection().execute(_NOTE_UPDATE, changed)


def _write_shares(session: Session, plan: Plan) -> None:
    for table, shares in ((ProjectRow, plan.shares), (DepartmentRow, plan.department_shares)):
        wanted = {s.project: s.fair_share_gpus for s in shares}
        current = session.execute(select(table.id, table.name, table.fair_share_gpus))
        changed = [
            {"id": row_id, "fair_share_gpus": wanted.get(name, 0)}
            for row_id, name, share in current
            if wanted.get(name, 0) != share
        ]
        if changed:
            session.execute(update(table), changed)


def _write_usage(session: Session, plan: Plan, now: float, half_life: float, over: dict[str, int]) -> None:
    """R14: each project's usage brought up to ``now``, with the over-quota weight this plan used."""
    weight = {s.project: s.weight for s in plan.shares}
    rows = session.execute(
        select(ProjectRow.id, ProjectRow.name, ProjectRow.usage_gpu_seconds, ProjectRow.usage_at)
    )
    changed = [
        {
            "id": row_id,
            "usage_gpu_seconds": accrue(
                used, over.get(name, 0), now - (at if at is not None else now), half_life
            ),
            "usage_at": now,
            "usage_weight": weight.get(name),
        }
        for row_id, name, used, at in rows
    ]
    if changed:
        session.execute(update(ProjectRow), changed)
