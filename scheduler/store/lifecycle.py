"""Every change of a job's or a replica's status: one function per transition, the only writer of them.

Contract: functions take the rows (and, where they add or delete rows or write events, the open ``Session``)
and neither commit nor roll back; the caller holds the job locked. A job's transition sets its status,
resets what depends on it (its replicas, its generation, its reason to wait and place in line) and writes
its event, the same whichever path asked for it (the plan, a taken node, an exit, a delete):

- ``start``: wanted placements become replicas (``run``, ``starting``: the engine launches them once their
  GPUs are free); the job is ``running``, its first start and last resize are ``now``, its generation moves
  on. Event ``start`` or ``grow``. ``Starts`` is the same transition for many jobs at once (a plan's starts
  and grows), read and written without the ORM: the same rows, one statement per table.
- ``release``: replicas stop (``mark_stopping``): the ones named, or every wanted one for an eviction; the
  job's last resize is ``now`` and its generation moves on; a job left with no wanted replica is ``pending``
  again (an eviction counts a restart). Event ``shrink`` or ``evict`` naming the replicas given.
- ``restart_launch``: a torchrun job's launch ends and starts again at the same size, from its checkpoint
  (docs/elastic-resize.md): its generation moves on, the members whose process ends first are marked
  restarting (``mark_restarting``; in-place launches keep their pods), event ``restart`` naming the members,
  with its cause (``failure``, ``timeout``). ``count_restarts`` counts those events: the restart budget.
- ``progressed``: the job reported its training speed (R19): the newest samples per second per size kept;
- ``checkpointed``: the job reported a checkpoint; a shrink or eviction it saved its work after says it
  lost none (its event's ``lost_gpu_seconds`` and reason).
- ``forget_job``: a finished job's record goes, with its replicas and its events (a delete, a new submit
  of its name), so each run's events stay with their run, once none of its processes is alive
  (``stopping``); ``forget_finished`` forgets the jobs that finished before a time (the service's
  retention of finished jobs).
- ``finish_job``: ``succeeded`` (event ``finish``), ``failed`` (``fail``) or ``cancelled`` (``cancel``,
  ``cancel_job``), for good: ``finished_at``, the reason as its message, no reason to wait nor place in line,
  and every wanted replica stopping.

A replica's own transitions write no event (its job's transition, or its exit, is what a person reads):
``mark_stopping`` (told to stop for good), ``mark_running`` (seen running), ``launched`` (its process
started), ``mark_restarting`` (still wanted, but its process ends before its job's next launch),
``relaunchable`` (that process is gone: ready to launch again) and ``exited`` (its process ended).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from sqlalchemy import delete, func, insert, select, text, update
from sqlalchemy.orm import Session

from scheduler.core.plan import Action, Cause, Placement
from scheduler.elastic.policy import RESTART
from scheduler.statuses import ACTIVE, JobStatus, ReplicaDesired, ReplicaStatus
from scheduler.store.changes import accounted
from scheduler.store.models import EventRow, JobRow, ReplicaRow
from scheduler.store.queries import LockedJob, add_event, texts

# given the replicas a release marked: the words and length of the preemption notice they got, if any
Notify = Callable[[list[ReplicaRow]], tuple[str, float] | None]
_FINISH_KINDS = {JobStatus.SUCCEEDED: "finish", JobStatus.FAILED: "fail", JobStatus.CANCELLED: "cancel"}


def start(
    session: Session,
    job: JobRow,
    placements: Sequence[Placement],
    *,
    grow: bool,
    now: float,
    cause: Cause,
    reason: str,
) -> None:
    """Start ``job`` (or grow it) with the replicas ``placements`` (see the module's contract)."""
    for placement in placements:
        session.add(
            ReplicaRow(
                job=job,
                desired=ReplicaDesired.RUN,
                status=ReplicaStatus.STARTING,
                **_replica_fields(placement, now),
            )
        )
    # R18: a grow of a running job is a resize whose pause is measured (``resumed``); a start is not
    job.resize_from = now if grow else None
    _mark_started(job, now)
    job.last_resized_at = now
    action = Action.GROW if grow else Action.START
    _event(session, job, action, now=now, replicas=[p.index for p in placements], reason=reason, cause=cause)


def _mark_started(job: JobRow | LockedJob, now: float) -> None:
    """The job's own columns a start or a grow changes (``start`` and ``Starts`` alike): running, first
    started now if never before, one generation more."""
    job.status = JobStatus.RUNNING
    if job.started_at is None:
        job.started_at = now
    job.generation += 1


def _replica_fields(placement: Placement, now: float) -> dict[str, Any]:
    """A started replica's columns from its placement (``start`` and ``Starts`` write the same)."""
    return {
        "index": placement.index,
        "node": placement.node,
        "gpus": placement.gpus,
        "share": None if placement.share is None else str(placement.share),  # R20
        "shared_gpu": placement.gpu,
        "created_at": now,
    }


class Starts:
    """``start`` for many ``LockedJob``s (locked by ``queries.lock_active``), gathered by ``add`` and written by
    ``write``: the replicas, the jobs and the events ``start`` writes, the same rows in the same order, each
    table in one statement (a fill of thousands of starts spent seconds in the ORM's unit of work)."""

    def __init__(self) -> None:
        self.replicas: list[dict[str, Any]] = []
        self.jobs: dict[int, LockedJob] = {}  # by id: the job as its last start left it
        self.resized: dict[int, tuple[float, float | None]] = {}  # by job id: last resize, ``resize_from``
        self.events: list[dict[str, Any]] = []

    def __bool__(self) -> bool:
        return bool(self.events)

    def add(
        self,
        job: LockedJob,
        placements: Sequence[Placement],
        *,
        grow: bool,
        now: float,
        cause: Cause,
        reason: str,
    ) -> None:
        """Start ``job`` (or grow it) with the replicas ``placements``, as ``start`` does."""
        self.replicas.extend({"job_id": job.id, **_replica_fields(p, now)} for p in placements)
        self.resized[job.id] = (now, now if grow else None)  # R18: as in ``start``
        _mark_started(job, now)
        self.jobs[job.id] = job
        action = Action.GROW if grow else Action.START
        self.events.append(
            {
                "time": now,
                "kind": action.value,
                "project": job.project,
                "job": job.name,
                "replicas": [p.index for p in placements],
                "reason": reason,
                "cause": cause.value,
                "details": None,
            }
        )

    def write(self, session: Session) -> None:
        """Write what was gathered (in the caller's transaction) and start empty again. What the session
        holds unwritten (transitions through the ORM, made before these) is flushed first."""
        if not self:
            return
        session.flush()
        jobs = list(self.jobs.values())
        postgres = session.get_bind().dialect.name == "postgresql"
        with accounted(session, jobs=[job.id for job in jobs]):
            if postgres:
                _write_starts_arrays(session, self, jobs)
            else:
                _write_starts_rows(session, self, jobs)
        self.replicas, self.jobs, self.resized, self.events = [], {}, {}, []


_REPLICA_DEFAULTS = {"desired": ReplicaDesired.RUN.value, "status": ReplicaStatus.STARTING.value}


def _write_starts_rows(session: Session, starts: Starts, jobs: list[LockedJob]) -> None:
    """SQLite: each table's rows in one executemany (the ORM's bulk statements: no objects)."""
    if starts.replicas:
        session.execute(insert(ReplicaRow), [r | _REPLICA_DEFAULTS for r in starts.replicas])
    session.execute(
        update(JobRow),  # by primary key
        [
            {
                "id": job.id,
                "status": job.status,
                "started_at": job.started_at,
                "last_resized_at": starts.resized[job.id][0],
                "resize_from": starts.resized[job.id][1],
                "generation": job.generation,
            }
            for job in jobs
        ],
    )
    session.execute(insert(EventRow), starts.events)


# PostgreSQL: each table in one statement whose values come as arrays, the strings as JSON arrays
# (``queries.texts``) (a statement of many rows of values spent more time being parsed by the driver than run)
_INSERT_REPLICAS = text(
    f"INSERT INTO {ReplicaRow.__tablename__} (job_id, index, node, gpus, share, shared_gpu, desired, status, "
    "created_at) SELECT v.job_id, v.index, v.node, v.gpus, v.share, v.shared_gpu, :desired, :status, "
    "v.created_at FROM ROWS FROM (unnest(CAST(:job_ids AS integer[])), unnest(CAST(:indices AS integer[])), "
    "json_array_elements_text(CAST(:nodes AS json)), unnest(CAST(:gpus AS integer[])), "
    "json_array_elements_text(CAST(:shares AS json)), unnest(CAST(:shared_gpus AS integer[])), "
    "unnest(CAST(:created AS float8[]))) WITH ORDINALITY "
    "AS v(job_id, index, node, gpus, share, shared_gpu, created_at, n) ORDER BY v.n"
)
_UPDATE_STARTED = text(
    f"UPDATE {JobRow.__tablename__} SET status = :status, started_at = v.started_at, "
    "last_resized_at = v.resized_at, resize_from = v.resize_from, generation = v.generation "
    "FROM unnest(CAST(:ids AS integer[]), CAST(:started AS float8[]), CAST(:resized AS float8[]), "
    "CAST(:resize_from AS float8[]), CAST(:generations AS integer[])) "
    "AS v(id, started_at, resized_at, resize_from, generation) "
    f"WHERE {JobRow.__tablename__}.id = v.id"
)
_INSERT_EVENTS = text(
    f"INSERT INTO {EventRow.__tablename__} (time, kind, project, job, replicas, reason, cause, details) "
    "SELECT v.time, v.kind, v.project, v.job, CAST(v.replicas AS json), v.reason, v.cause, "
    "CAST(v.details AS json) FROM ROWS FROM (unnest(CAST(:times AS float8[])), "
    + ", ".join(
        f"json_array_elements_text(CAST(:{name} AS json))"
        for name in ("kinds", "projects", "jobs", "replicas", "reasons", "causes", "details")
    )
    + ") WITH ORDINALITY "
    "AS v(time, kind, project, job, replicas, reason, cause, details, n) ORDER BY v.n"
)


def _write_starts_arrays(session: Session, starts: Starts, jobs: list[LockedJob]) -> None:
    """PostgreSQL: each table in one statement, the rows' values as arrays (ids in the rows' order)."""
    replicas = starts.replicas
    if replicas:
        session.execute(
            _INSERT_REPLICAS,
            {
                "desired": _REPLICA_DEFAULTS["desired"],
                "status": _REPLICA_DEFAULTS["status"],
                **{
                    name: [r[key] for r in replicas]
                    for name, key in (
                        ("job_ids", "job_id"),
                        ("indices", "index"),
                        ("gpus", "gpus"),
                        ("shared_gpus", "shared_gpu"),
                        ("created", "created_at"),
                    )
                },
                "nodes": texts(r["node"] for r in replicas),
                "shares": texts(r["share"] for r in replicas),
            },
        )
    session.execute(
        _UPDATE_STARTED,
        {
            "status": JobStatus.RUNNING.value,
            "ids": [job.id for job in jobs],
            "started": [job.started_at for job in jobs],
            "resized": [starts.resized[job.id][0] for job in jobs],
            "resize_from": [starts.resized[job.id][1] for job in jobs],
            "generations": [job.generation for job in jobs],
        },
    )
    events = starts.events
    session.execute(
        _INSERT_EVENTS,
        {
            "times": [e["time"] for e in events],
            "kinds": texts(e["kind"] for e in events),
            "projects": texts(e["project"] for e in events),
            "jobs": texts(e["job"] for e in events),
            "replicas": texts(json.dumps(e["replicas"]) for e in events),  # each a JSON text, as the ORM's
            "reasons": texts(e["reason"] for e in events),
            "causes": texts(e["cause"] for e in events),
            "details": texts(json.dumps(e["details"]) for e in events),  # None: JSON null, as the ORM writes
        },
    )


def release(
    session: Session,
    job: JobRow,
    indices: Sequence[int],
    *,
    evict: bool,
    now: float,
    cause: Cause,
    reason: str,
    details: dict[str, Any] | None = None,
    notify: Notify | None = None,
    pending_reason: str | None = None,
) -> list[ReplicaRow]:
    """Shrink ``job`` by the replicas ``indices``, or ``evict`` it whole; return the replicas marked to stop.

    ``notify`` may give those a preemption notice: its words join the event's reason and its length the
    event's ``details`` (``notice_seconds``). ``pending_reason``: the job's reason to wait, when the release
    sends it back to ``pending`` and the caller knows it ahead of the next cycle's notes."""
    chosen = set(indices)
    marked: list[ReplicaRow] = []
    for replica in [r for r in job.replicas if r.desired == ReplicaDesired.RUN]:
        if (evict or replica.index in chosen) and mark_stopping(session, replica):
            marked.append(replica)
    job.last_resized_at = now
    job.resize_from = now  # R18: the pause of this shrink is measured when it trains again (``resumed``)
    job.generation += 1
    if not any(r.desired == ReplicaDesired.RUN for r in job.replicas):
        job.resize_from = None  # an eviction: its next start is not a resize
        job.status = JobStatus.PENDING
        job.restarts += 1 if evict else 0
        if pending_reason is not None:
            job.pending_reason = pending_reason
    given = notify(marked) if notify is not None else None
    if given is not None:
        reason, details = f"{reason}; {given[0]}", (details or {}) | {"notice_seconds": given[1]}
    action = Action.EVICT if evict else Action.SHRINK
    _event(session, job, action, now=now, replicas=indices, reason=reason, cause=cause, details=details)
    return marked


def restart_launch(
    session: Session,
    job: JobRow,
    members: Sequence[ReplicaRow],
    *,
    generation: int,
    in_place: bool,
    now: float,
    cause: str,
    reason: str,
) -> None:
    """Restart ``job``'s launch as launch ``generation`` of ``members`` (its wanted replicas, by rank), from
    its checkpoint. Unless ``in_place`` (the members' agents relaunch their training), each live member's
    process ends before the next launch: it is marked restarting."""
    if not in_place:
        mark_restarting(members)
    job.generation = generation
    add_event(
        session, time=now, kind=RESTART, project=job.project.name, job=job.name,
        replicas=[r.index for r in members], reason=reason, cause=cause,
    )  # fmt: skip


def count_restarts(session: Session, job: JobRow, cause: str, since: float) -> int:
    """How many times ``job``'s launch restarted for ``cause`` since ``since``."""
    query = select(func.count(EventRow.id)).where(
        EventRow.project == job.project.name,
        EventRow.job == job.name,
        EventRow.kind == RESTART,
        EventRow.cause == cause,
        EventRow.time >= since,
    )
    return int(session.scalar(query) or 0)


def finish_job(session: Session, job: JobRow, status: JobStatus, *, now: float, reason: str) -> None:
    """End ``job`` for good with ``status`` (succeeded, failed or cancelled) and why."""
    job.status = status
    job.finished_at = now
    job.message = reason
    job.pending_reason = None
    job.queue_position = None
    for replica in [r for r in job.replicas if r.desired == ReplicaDesired.RUN]:
        mark_stopping(session, replica)
    add_event(
        session, time=now, kind=_FINISH_KINDS[status], project=job.project.name, job=job.name, reason=reason
    )


# sizes whose speed a job keeps (R19): the most recent ones beyond this are dropped, oldest first
MAX_PROGRESS_SIZES = 64


def progressed(job: JobRow, samples_per_second: float, world_size: int | None = None) -> bool:
    """``job`` reported its training speed (R19): kept as the newest at the replicas it runs now, unless it
    says it measured at another world size (a report from before a resize). Returns whether it was kept."""
    replicas = sum(1 for r in job.replicas if r.desired == ReplicaDesired.RUN)
    if replicas == 0 or samples_per_second <= 0:
        return False
    if world_size is not None and world_size != replicas * job.gpus_per_replica:
        return False
    rates = {k: v for k, v in (job.progress_rates or {}).items() if k != str(replicas)}
    rates[str(replicas)] = samples_per_second
    job.progress_rates = dict(list(rates.items())[-MAX_PROGRESS_SIZES:])
    return True


def checkpointed(session: Session, job: JobRow, at: float) -> None:
    """``job`` completed a checkpoint at ``at``: keep it when it is the newest. A shrink or an eviction of
    this run at or before ``at``, with no launch of the job since (the checkpoint was written by the
    processes it released, on their notice or their SIGTERM, or by the ones it kept running), lost nothing:
    its event says so (``lost_gpu_seconds`` 0, and its reason)."""
    if job.checkpointed_at is not None and at <= job.checkpointed_at:
        return
    job.checkpointed_at = at
    launched = [r.started_at for r in job.replicas if r.started_at is not None and r.started_at <= at]
    since = max([job.created_at, *launched])
    releases = session.scalars(
        select(EventRow).where(
            EventRow.project == job.project.name,
            EventRow.job == job.name,
            EventRow.kind.in_((Action.SHRINK.value, Action.EVICT.value)),
            EventRow.time >= since,
            EventRow.time <= at,
        )
    )
    for event in releases:
        if (event.details or {}).get("lost_gpu_seconds"):
            event.details = (event.details or {}) | {"lost_gpu_seconds": 0.0}
            event.reason = _saved(event.reason)


def _saved(reason: str) -> str:
    """``reason`` with its estimate of the work lost (``scheduler.core.explain.work_lost``) replaced."""
    start = reason.find("loses ~")
    end = reason.find(")", start)
    if start < 0 or end < 0:
        return reason
    return f"{reason[:start]}loses no work (it reported a checkpoint after this){reason[end + 1 :]}"


def cancel_job(session: Session, job: JobRow, *, now: float, reason: str) -> None:
    """Cancel ``job`` (a delete): its replicas stop, master last, and it never starts again."""
    finish_job(session, job, JobStatus.CANCELLED, now=now, reason=reason)


def live(replica: ReplicaRow) -> bool:
    """``replica``'s process was launched and has not been seen exiting."""
    return replica.pid is not None and replica.exit_code is None


def stopping(job: JobRow) -> int:
    """How many of ``job``'s replica processes are still alive (a finished job's stop still under way)."""
    return sum(1 for r in job.replicas if live(r))


def forget_job(session: Session, job: JobRow) -> None:
    """Remove finished ``job``'s record: its row, its replicas and its events (a delete of a finished job, its
    name submitted again, or its retention ran out), so that no later run of the name shows them. Only once
    none of its processes is alive (``stopping``): until then its rows are what keeps their GPUs taken."""
    assert job.status not in ACTIVE and not stopping(job), "only a finished job whose replicas exited"
    session.execute(
        delete(EventRow).where(EventRow.project == job.project.name, EventRow.job == job.name),
        execution_options={"synchronize_session": False},
    )
    session.delete(job)
    session.flush()


def forget_finished(session: Session, *, before: float, batch: int = 500) -> int:
    """Forget (``forget_job``) up to ``batch`` jobs that finished before ``before``, oldest first; how many."""
    query = (
        select(JobRow)
        .where(JobRow.status.not_in(ACTIVE), JobRow.finished_at < before)
        .order_by(JobRow.finished_at)
        .limit(batch)
        .with_for_update(skip_locked=True)
    )
    jobs = [job for job in session.scalars(query) if not stopping(job)]
    for job in jobs:
        forget_job(session, job)
    return len(jobs)


def mark_stopping(session: Session, replica: ReplicaRow) -> bool:
    """Tell ``replica`` to stop for good; one never launched is forgotten at once. Whether it was marked."""
    if replica.pid is None:
        replica.job.replicas.remove(replica)
        session.delete(replica)
        return False
    replica.desired = ReplicaDesired.STOP
    replica.status = ReplicaStatus.TERMINATING
    return True


def mark_running(session: Session, ids: Collection[int], *, now: float) -> None:
    """The replicas ``ids``, starting until now, were seen running (one statement, no rows loaded): their
    process started ``now`` (a pod's container, which may start long after the pod was made)."""
    if ids:
        with accounted(session):  # status and start time: nothing the scheduling snapshot reads
            session.execute(
                update(ReplicaRow)
                .where(ReplicaRow.id.in_(ids), ReplicaRow.status == ReplicaStatus.STARTING)
                .values(status=ReplicaStatus.RUNNING, started_at=now),
                execution_options={"synchronize_session": False},
            )


def launched(
    replica: ReplicaRow, *, pid: int | None, gpu_ids: Iterable[int], now: float, running: bool
) -> None:
    """``replica``'s process started on ``gpu_ids`` (``running``: already seen running)."""
    replica.pid = pid
    replica.gpu_ids = list(gpu_ids)
    replica.started_at = now
    replica.status = ReplicaStatus.RUNNING if running else ReplicaStatus.STARTING


def mark_restarting(replicas: Iterable[ReplicaRow]) -> int:
    """Of ``replicas`` (wanted ones), each live one not yet marked stays wanted, but its process ends before
    its job's next launch; how many were marked."""
    marked = 0
    for replica in replicas:
        if live(replica) and replica.status != ReplicaStatus.TERMINATING:
            replica.status = ReplicaStatus.TERMINATING
            marked += 1
    return marked


def relaunchable(replica: ReplicaRow) -> None:
    """``replica``'s process is gone and it launches again, on the same node and GPUs."""
    replica.pid = None
    replica.exit_code = None
    replica.started_at = None
    replica.stop_requested_at = None
    replica.status = ReplicaStatus.STARTING


def exited(session: Session, replica: ReplicaRow, code: int) -> None:
    """``replica``'s process ended with ``code``. One told to stop did what it was asked, whatever its code
    (torchrun exits 1 on SIGTERM): it is ``stopped``, never succeeded nor failed, and is forgotten while its
    job is active (kept, as its history, once the job finished); one that ended on its own is ``done``,
    ``succeeded`` or ``failed`` by its code, kept for its job's history."""
    replica.exit_code = code
    if replica.desired != ReplicaDesired.STOP:
        replica.status = ReplicaStatus.SUCCEEDED if code == 0 else ReplicaStatus.FAILED
        replica.desired = ReplicaDesired.DONE
        return
    replica.status = ReplicaStatus.STOPPED
    if replica.job.status in ACTIVE:
        replica.job.replicas.remove(replica)
        session.delete(replica)


def _event(
    session: Session,
    job: JobRow,
    action: Action,
    *,
    now: float,
    replicas: Sequence[int],
    reason: str,
    cause: Cause,
    details: dict[str, Any] | None = None,
) -> None:
    add_event(
        session,
        time=now,
        kind=action.value,
        project=job.project.name,
        job=job.name,
        replicas=replicas,
        reason=reason,
        cause=cause.value,
        details=details,
    )


MEASURED_WEIGHT = 4  # R18: the estimate is a running mean over about the last this many resizes


def resumed(job: JobRow, now: float) -> bool:
    """R18: the job trains again at its new size: the pause since the resize was decided is measured into
    its estimate (a running mean of the last few), which the core weighs its next resize against. False
    when no resize was being measured."""
    if job.resize_from is None:
        return False
    pause = max(0.0, now - job.resize_from)
    n = min(job.resizes_measured or 0, MEASURED_WEIGHT - 1)
    old = job.resize_cost_seconds if job.resize_cost_seconds is not None else pause
    job.resize_cost_seconds = (old * n + pause) / (n + 1)
    job.resizes_measured = (job.resizes_measured or 0) + 1
    job.resize_from = None
    return True
