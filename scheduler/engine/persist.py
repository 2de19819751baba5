"""Write a ``Plan`` to the store: wanted placements, released replicas, events, reasons and shares.

Contract: ``persist_plan(session, plan, now=..., notes=...)`` runs inside one write transaction; the loop
runs its two parts apart when the plan decided something (``persist_decisions``: the decisions, the notes
of the jobs decided or held GPUs for, the fair shares and the usage; then its stops and launches; then
``persist_notes``: the other jobs' reasons and places in line, nothing a launch reads, so a reclaim's stops
and a start's launch do not wait for thousands of places in line to be rewritten). The
decided jobs are re-read locked, all at once, and a decision is skipped when its job stopped being active
meanwhile (a delete that raced the cycle): a cancelled job never gets replicas. Each decision goes through
its job's transition in ``scheduler.store.lifecycle``: START/GROW insert ``ReplicaRow``s that the engine
launches once their GPUs are free; SHRINK/EVICT mark replicas ``stop`` (a never-launched one is deleted at
once), and EVICT sends the job back to ``pending``. Every decision becomes one event carrying its reason; a
SHRINK's or EVICT's also carries the work the job loses (``details["lost_gpu_seconds"]``).

``persist_starts`` writes the starts a release turn makes between cycles (``scheduler.core.handoff``: a job
the last plan held GPUs for, once they are free) the same way, each job re-read locked and skipped unless it
is still waiting, and clears their notes.

The starts and grows, most of a large plan's decisions, are read (``queries.lock_active``) and written
(``lifecycle.Starts``) without the ORM, each table in one statement; the releases, few, go through the ORM
with their jobs' replicas loaded. Rows are written in the plan's order (the ids of replicas and events
follow it), whichever way.

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
from collections.abc import Callable, Sequence
from functools import partial
from operator import attrgetter
from typing import Any

from sqlalchemy import bindparam, or_, select, text, update
from sqlalchemy.orm import Session

from scheduler.core.plan import Action, Decision, Plan
from scheduler.core.usage import accrue
from scheduler.elastic import notice
from scheduler.statuses import ACTIVE, JobStatus
from scheduler.store import lifecycle
from scheduler.store.changes import accounted
from scheduler.store.mapper import Notes
from scheduler.store.models import DepartmentRow, JobRow, ProjectRow, ReplicaRow
from scheduler.store.queries import active_jobs, lock_active, texts

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
    applied = persist_decisions(
        session,
        plan,
        now=now,
        usage_half_life=usage_half_life,
        notes=notes,
        over_quota=over_quota,
        reaches=reaches,
        grace_period=grace_period,
    )
    persist_notes(session, plan, notes=notes)
    return applied


def persist_decisions(
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
    """The first part of ``persist_plan``: the decisions, the notes of the jobs they decide or it holds GPUs
    for, the fair shares and the usage (what a launch or a stop needs, and the figures shown beside what they
    change)."""
    applied: list[Decision] = []
    if plan.decisions:
        applied = _write_decisions(session, plan, now=now, reaches=reaches, grace_period=grace_period)
        _write_notes(session, plan, notes, decided=True)
    _write_shares(session, plan)
    if usage_half_life > 0:
        _write_usage(session, plan, now, usage_half_life, over_quota or {})
    return applied


def persist_notes(session: Session, plan: Plan, *, notes: Notes) -> None:
    """The rest of ``persist_plan``: the reasons and places in line of the jobs the plan did not decide,
    nothing a launch or a stop reads (a new claim at the head of the line moves thousands of places: the loop
    writes them after its stops and launches)."""
    _write_notes(session, plan, notes, decided=False)


NoteFields = tuple[str, str, str, int | None]  # a plan's note as ``note_fields`` gives it
_note_fields = attrgetter("project", "job", "reason", "queue_position")


def note_fields(plan: Plan) -> list[NoteFields]:
    """The plan's notes as tuples, to compare with another plan's in one C-level comparison."""
    return list(map(_note_fields, plan.notes))


def persist_starts(session: Session, decisions: Sequence[Decision], *, now: float) -> list[Decision]:
    """Starts made between cycles (``scheduler.core.handoff``): each job still waiting is started as a plan's
    start is (``lifecycle.Starts``: its replicas, its event with the reason) and its note cleared; a job that
    is no longer waiting (deleted meanwhile) is skipped. The starts applied."""
    locked = lock_active(session, ((d.project, d.job) for d in decisions))
    starts = lifecycle.Starts()
    applied: list[Decision] = []
    for decision in decisions:
        job = locked.get((decision.project, decision.job))
        if job is None or job.status != JobStatus.PENDING:
            log.info("skipping the start of %s/%s: no longer waiting", decision.project, decision.job)
            continue
        starts.add(job, decision.replicas, grow=False, now=now, cause=decision.cause, reason=decision.reason)
        applied.append(decision)
    ids = list(starts.jobs)
    starts.write(session)
    if ids:  # a running job has no reason to wait and no place in line
        with accounted(session, notes=dict.fromkeys(ids, (None, None))):
            rows = [{"job_id": job_id, "reason": None, "position": None} for job_id in ids]
            session.connection().execute(_NOTE_UPDATE, rows)
    return applied


def _write_decisions(
    session: Session,
    plan: Plan,
    *,
    now: float,
    reaches: Callable[[JobRow], bool] | None,
    grace_period: float,
) -> list[Decision]:
    applied: list[Decision] = []
    keys = [(d.project, d.job) for d in plan.decisions]
    released = {key for key, d in zip(keys, plan.decisions, strict=True) if d.action in _RELEASES}
    jobs = active_jobs(session, released)  # ORM objects, with their replicas: the releases' transitions
    locked = lock_active(session, (key for key in keys if key not in released))  # the other starts: columns
    starts = lifecycle.Starts()
    for key, decision in zip(keys, plan.decisions, strict=True):
        job = jobs.get(key)
        started = locked.get(key) if job is None else None
        if (job is None or job.status not in ACTIVE) and started is None:
            log.info(
                "skipping %s of %s/%s: no longer active", decision.action, decision.project, decision.job
            )
            continue
        if started is not None:
            grow = decision.action is Action.GROW
            starts.add(
                started, decision.replicas, grow=grow, now=now, cause=decision.cause, reason=decision.reason
            )
        else:
            assert job is not None
            starts.write(session)  # the starts before it, first: ids in the plan's order
            _apply(session, job, decision, now=now, reaches=reaches, grace_period=grace_period)
        applied.append(decision)
    starts.write(session)
    return applied


_RELEASES = (Action.SHRINK, Action.EVICT)


def _apply(
    session: Session,
    job: JobRow,
    decision: Decision,
    *,
    now: float,
    reaches: Callable[[JobRow], bool] | None,
    grace_period: float,
) -> None:
    """Take ``decision`` through its job's transition (``scheduler.store.lifecycle``), which writes its event."""
    if decision.action in (Action.START, Action.GROW):
        grow = decision.action is Action.GROW
        lifecycle.start(
            session, job, decision.replicas, grow=grow, now=now, cause=decision.cause, reason=decision.reason
        )
        return
    lifecycle.release(
        session,
        job,
        [p.index for p in decision.replicas],
        evict=decision.action is Action.EVICT,
        now=now,
        cause=decision.cause,
        reason=decision.reason,
        details=_lost(decision),
        notify=partial(_notice, job, decision, reaches=reaches, default_grace=grace_period),
    )


def _lost(decision: Decision) -> dict[str, Any]:
    """A shrink's or an eviction's cost, GPU-seconds since the job's last checkpoint or restart."""
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


_NOTE_UPDATE = (
    update(JobRow)
    .where(JobRow.id == bindparam("job_id"), or_(*(JobRow.status == status for status in ACTIVE)))
    .values(pending_reason=bindparam("reason"), queue_position=bindparam("position"))
)


# PostgreSQL: every changed note in one statement, its values as three arrays (thousands of places in line
# move when one job starts: 3,000 changed notes took 58-67 ms as one UPDATE a row, 37-43 ms so), the
# reasons as a JSON array (``queries.texts``)
_NOTE_UPDATE_ARRAYS = text(
    f"UPDATE {JobRow.__tablename__} SET pending_reason = v.reason, queue_position = v.position "
    "FROM ROWS FROM (unnest(CAST(:ids AS integer[])), json_array_elements_text(CAST(:reasons AS json)), "
    "unnest(CAST(:positions AS integer[]))) "
    f"AS v(id, reason, position) WHERE {JobRow.__tablename__}.id = v.id "
    f"AND {JobRow.__tablename__}.status IN ({', '.join(repr(str(s.value)) for s in ACTIVE)})"
)


def _write_notes(session: Session, plan: Plan, notes: Notes, *, decided: bool) -> None:
    """Store the reason and place in line of each active job the plan decides or holds GPUs for (``decided``:
    what the plan did for it is shown with the decisions) or of each other one, writing only the ones that
    changed."""
    keys = {(d.project, d.job) for d in plan.decisions} | {
        (r.project, r.job) for r in plan.reservations if r.firm
    }
    # each half builds only its own notes: in a cycle that decides, both halves run
    wanted = {
        key: (n.reason, n.queue_position)
        for n in plan.notes
        if ((key := (n.project, n.job)) in keys) == decided
    }
    if decided:
        candidates = sorted(((key, notes.ids[key]) for key in keys if key in notes.ids), key=lambda kv: kv[1])
    else:
        candidates = [(key, job_id) for key, job_id in notes.ids.items() if key not in keys]
    changed = [
        (job_id, note)
        for key, job_id in candidates
        if (note := wanted.get(key, (None, None))) != notes.stored[job_id]
    ]
    if not changed:
        return
    connection = session.connection()
    with accounted(session, notes=dict(changed)):
        if connection.dialect.name == "postgresql":
            connection.execute(
                _NOTE_UPDATE_ARRAYS,
                {
                    "ids": [job_id for job_id, _ in changed],
                    "reasons": texts(note[0] for _, note in changed),
                    "positions": [note[1] for _, note in changed],
                },
            )
        else:
            rows = [{"job_id": job_id, "reason": note[0], "position": note[1]} for job_id, note in changed]
            connection.execute(_NOTE_UPDATE, rows)


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
            with accounted(session):  # fair shares: nothing the scheduling snapshot reads
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
